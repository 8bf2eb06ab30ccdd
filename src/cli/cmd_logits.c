/* cmd_logits.c — `specula logits`: the raw logits of every prompt position, for debugging and
 * for comparison with other engines (e.g. tests/data/ref-logits/ * /logits.numpy.f32).
 * Output: little-endian float32, row-major [T, V]; row t holds the logits after tokens 0..t. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "specula.h"

static const char *CMD = "logits";

/* in-place byte swap of 32-bit words on a big-endian host, no-op on little-endian */
static void to_little_endian(float *x, size_t n) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    if (first) return;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u = __builtin_bswap32(u);
        memcpy(&x[i], &u, 4);
    }
}

int cmd_logits(int argc, char **argv) {
    const char *dir = NULL, *ids_arg = NULL, *out_path = NULL;
    int decode_steps = 0, threads = 0;
    int bf16_dot = 0;
    const cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &dir, "DIR", "model directory or FILE.gguf, required"},
        {NULL, "--prompt-ids", CLI_STR, &ids_arg, "IDS", "comma-separated token ids, required"},
        {"-o", "--output", CLI_STR, &out_path, "FILE", "output file: float32 [T, V], required"},
        {NULL, "--decode-steps", CLI_FLAG, &decode_steps, NULL, "forward token by token (default: one prefill forward)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {NULL, "--bf16-dot", CLI_FLAG, &bf16_dot, NULL, CLI_BF16_DOT_HELP},
    };
    int rc = cli_parse(CMD, "-m DIR --prompt-ids 1,2,3 -o FILE [--decode-steps]", opts,
                       (int)(sizeof opts / sizeof *opts), argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!dir || !ids_arg || !out_path)
        return cli_error(CMD, "-m DIR, --prompt-ids IDS and -o FILE are required (see specula logits --help)");
    int32_t *ids = NULL;
    int T = 0;
    if (cli_parse_ids(CMD, "--prompt-ids", ids_arg, &ids, &T)) return 2;

    sp_err err = {{0}};
    sp_model *m = NULL;
    sp_kv *kv = NULL;
    float *logits = NULL;
    rc = 2;
    if (sp_model_load(&m, dir, threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    sp_model_set_bf16_dot(m, bf16_dot);
    const int V = sp_model_config(m)->vocab_size;
    for (int t = 0; t < T; t++)
        if (ids[t] >= V) {
            cli_error(CMD, "--prompt-ids: token %d at index %d is outside the vocabulary [0, %d)", ids[t], t, V);
            goto done;
        }
    kv = sp_kv_create(m, T, decode_steps ? 1 : T, &err);
    logits = malloc((size_t)T * V * sizeof *logits);
    if (!kv || !logits) {
        cli_error(CMD, "%s", kv ? "out of memory for the logits" : err.msg);
        goto done;
    }
    double t0 = sp_time_ms();
    for (int t = 0; t < T; t += decode_steps ? 1 : T) {
        int n = decode_steps ? 1 : T;
        sp_forward_out fo = {.logits = logits + (size_t)t * V};
        if (sp_model_forward(m, kv, ids + t, n, &fo, &err)) {
            cli_error(CMD, "forward at position %d: %s", t, err.msg);
            goto done;
        }
    }
    double ms = sp_time_ms() - t0;
    to_little_endian(logits, (size_t)T * V);
    if (sp_write_file_atomic(out_path, logits, (size_t)T * V * sizeof *logits, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    fprintf(stderr, "wrote %s: float32 [%d, %d] (%s, %.1f ms)\n", out_path, T, V,
            decode_steps ? "token by token" : "one prefill forward", ms);
    rc = 0;
done:
    free(logits);
    if (kv) sp_kv_free(kv);
    if (m) sp_model_free(m);
    free(ids);
    return rc;
}
