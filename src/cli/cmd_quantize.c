/* cmd_quantize.c — `specula quantize`: a model directory or GGUF file → a quantized GGUF that
 * specula and llama.cpp both load (src/formats/gguf_quantize.h, docs/QUANTIZE.md). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "specula.h"
#include "formats/gguf_quantize.h"
#include "formats/mlx_quant.h"
#include "formats/st_quantize.h"

#define CMD "quantize"

/* llama-quantize's order, `quantize IN OUT TYPE` (and `IN OUT` with --type): positionals fill
 * what -m, -o and --type left unset. -1 (printed) on too many or a clash. */
static int quantize_positional(const char **pos, int n, const char **in, const char **out, const char **type) {
    const char **slot[3] = {in, out, type};
    if (n > 3) return cli_error(CMD, "expected at most IN OUT TYPE, got %d positional arguments", n), -1;
    for (int i = 0; i < n; i++) {
        if (*slot[i] && strcmp(*slot[i], pos[i]))
            return cli_error(CMD, "%s given both as an option (%s) and as a positional argument", i == 0 ? "the input"
                             : i == 1 ? "the output" : "the type", *slot[i]), -1;
        *slot[i] = pos[i];
    }
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = NULL;
    int threads = 0, quiet = 0, drafter = 0, group = 64;
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &in, "DIR|FILE", "model directory (config.json + safetensors) or GGUF file, required"},
        {"-o", "--output", CLI_STR, &out, "FILE", "output GGUF file, required (written to a temp name, then renamed)"},
        {NULL, "--type", CLI_STR, &type, "T",
         "llama-quantize's type names, any case: Q2_K, Q3_K_S/M/L, Q4_0, Q4_K_S/M, Q5_0, Q5_1, Q5_K_S/M, Q6_K, "
         "Q8_0, IQ4_NL, IQ4_XS, F16, BF16 with llama.cpp's per-tensor mix (the LM head Q6_K, more bits on some "
         "attn_v / attn_output / ffn_down); F32 dequantizes every tensor; MLX4 / MLX8: -o DIR gets an MLX "
         "affine-quantized safetensors checkpoint (docs/MLX-QUANT.md)"},
        {NULL, "--group-size", CLI_INT, &group, "G", "MLX4 / MLX8: inputs per scale and bias, 32, 64 or 128 (default 64)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {"-q", "--quiet", CLI_FLAG, &quiet, NULL, "no progress bar"},
        {NULL, "--drafter", CLI_FLAG, &drafter, NULL,
         "-m is a DFlash / DSpark drafter directory: -o OUT_DIR gets the same checkpoint with its projection "
         "matrices as q8_0 (or q4_0) blocks in safetensors"},
    };
    const char *pos[4];
    int npos = 0;
    int rc = cli_parse(CMD, "-m DIR|FILE.gguf -o OUT.gguf --type TYPE  |  IN OUT TYPE  |  --drafter -m DIR -o DIR  |  "
                       "-m DIR -o DIR --type mlx4|mlx8 [--group-size G]",
                       opts, 7, argc, argv, pos, &npos, 4);
    if (rc) return rc > 0 ? 0 : 2;
    if (quantize_positional(pos, npos, &in, &out, &type)) return 2;
    if (!in || !out || !type)
        return cli_error(CMD, "-m, -o and --type (or IN OUT TYPE) are required (see specula quantize --help)");
    sp_err err = {{0}};
    if (drafter) {
        sp_dtype qt = !strcasecmp(type, "q8_0") ? SP_DT_Q8_0 : !strcasecmp(type, "q4_0") ? SP_DT_Q4_0 : SP_DT_UNKNOWN;
        int nq = 0;
        if (qt == SP_DT_UNKNOWN) return cli_error(CMD, "--drafter: --type %s: expected q8_0 or q4_0", type);
        if (sp_st_quantize_drafter(in, out, qt, &nq, &err)) return cli_error(CMD, "%s", err.msg);
        fprintf(stderr, "wrote %s (%d matrices as %s)\n", out, nq, sp_dtype_name(qt));
        return 0;
    }
    if (!strcasecmp(type, "mlx4") || !strcasecmp(type, "mlx8")) {
        sp_mlxq_params p = {type[3] - '0', group};
        int nq = 0;
        if (sp_model_check(in, &err) || sp_mlxq_write_model(in, out, &p, &nq, &err))
            return cli_error(CMD, "%s", err.msg);
        fprintf(stderr, "wrote %s (%d matrices as MLX %d-bit, group size %d)\n", out, nq, p.bits, p.group);
        return 0;
    }
    gguf_quantize_opts o = {.n_threads = threads, .progress = !quiet};
    if (sp_gguf_mix_parse(type, &o.mix)) return cli_error(CMD, "type %s: expected %s", type, sp_gguf_mix_names());
    /* the model must load as generate loads it: the one validator, before anything is written */
    if (sp_model_check(in, &err)) return cli_error(CMD, "%s", err.msg);
    if (sp_gguf_quantize(in, out, &o, &err)) return cli_error(CMD, "%s", err.msg);
    fprintf(stderr, "wrote %s (%s)\n", out, sp_gguf_mix_name(o.mix));
    return 0;
}
