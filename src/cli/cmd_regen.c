/* cmd_regen.c — `specula regen`: target hidden states of a JSONL corpus into training shards
 * (src/train/regen.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "train/regen.h"

int cmd_regen(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *out = NULL, *taps = "auto";
    int shard_records = 256, max_len = 4096, generate = 0, threads = 0, quiet = 0;
    float temp = 0;
    uint64_t seed = 0;
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &model, "DIR", "target model directory or FILE.gguf (required)"},
        {NULL, "--data", CLI_STR, &data, "FILE.jsonl", "records: text | prompt+response | messages | conversations (ShareGPT) | ids+resp_start"},
        {"-o", "--out", CLI_STR, &out, "SHARDS", "output directory of shard_NNNNN/ (required)"},
        {NULL, "--taps", CLI_STR, &taps, "auto|eagle3|l1,l2,..",
         "tapped target layers (default auto: docs/DFLASH.md §1; eagle3: EAGLE-3's three, docs/EAGLE3.md); a list may "
         "end with num_layers, the final norm's output (docs/MLX-BUN-DRAFTERS.md)"},
        {NULL, "--generate", CLI_INT, &generate, "N", "regenerate each response with the target (up to N tokens)"},
        {NULL, "--temp", CLI_FLOAT, &temp, "T", "temperature of --generate (default 0: greedy)"},
        {NULL, "--seed", CLI_U64, &seed, "S", "sampling seed of --generate (default 0)"},
        {NULL, "--shard-records", CLI_INT, &shard_records, "N", "records per shard (default 256)"},
        {NULL, "--max-len", CLI_INT, &max_len, "N", "cut sequences to N tokens (default 4096)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {"-q", "--quiet", CLI_FLAG, &quiet, NULL, "no progress bar"},
    };
    int rc = cli_parse("regen", "-m TARGET --data FILE.jsonl -o SHARDS [options]", opts,
                       (int)(sizeof opts / sizeof opts[0]), argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || !data || !out) return cli_error("regen", "-m, --data and -o are required");
    tr_regen_cfg c = {.model_dir = model, .data_path = data, .out_dir = out, .shard_records = shard_records,
                      .max_len = max_len, .generate = generate, .temp = temp, .seed = seed, .threads = threads,
                      .progress = !quiet};
    if (!strcmp(taps, "eagle3")) {
        c.n_taps = -1; /* the inputs of layers 2, N/2, N-3 */
    } else if (strcmp(taps, "auto") != 0) {
        int32_t *ids = NULL;
        int n = 0;
        if (cli_parse_ids("regen", "--taps", taps, &ids, &n)) return 2;
        if (n > 16) { free(ids); return cli_error("regen", "--taps: at most 16 layers"); }
        for (int i = 0; i < n; i++) c.taps[i] = ids[i];
        c.n_taps = n;
        free(ids);
    }
    tr_dist dist;
    sp_tr_dist_init(&dist); /* under mpirun: records split across ranks by shard */
    c.dist = &dist;
    c.progress = c.progress && dist.rank == 0;
    sp_err err = {{0}};
    int written = 0, skipped = 0;
    rc = sp_tr_regen_run(&c, &written, &skipped, &err);
    if (rc) cli_error("regen", "%s", err.msg);
    else if (dist.size > 1) fprintf(stderr, "regen: rank %d/%d: %d shard(s) written, %d already complete\n", dist.rank,
                                    dist.size, written, skipped);
    else fprintf(stderr, "regen: %d shard(s) written, %d already complete\n", written, skipped);
    sp_tr_dist_barrier(&dist);
    sp_tr_dist_finalize(&dist);
    return rc ? 2 : 0;
}
