/* cmd_calibrate.c — `specula calibrate -m TARGET -md DRAFTER --prompts FILE`: run the DSpark
 * drafter with raw confidences on held-out prompts (a prompt file, prompts_cli.h), fit sequential temperature scaling (docs/DSPARK.md §9) and write
 * DRAFTER/sts.json, which the drafter then applies automatically. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "drafters/dflash.h"
#include "decode/calibrate.h"
#include "decode/spec.h"
#include "prompts_cli.h"
#include "spec_cli.h"

static const char *CMD = "calibrate";

static void on_round(void *ctx, const float *z, int n, int n_acc) {
    sp_sts_data *d = ctx;
    if (sp_sts_data_add(d, z, n, n_acc)) sp_log(SP_LOG_WARN, "calibrate: out of memory recording a round");
}

int cmd_calibrate(int argc, char **argv) {
    const char *model = NULL, *drafter = NULL, *prompts = NULL;
    int n_new = 128, threads = 0, dry = 0, text_prompts = 0;
    float temp = 1.0f;
    uint64_t seed = 1;
    int bf16_dot = 0;
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &model, "DIR", "target model directory"},
        {"-md", "--model-draft", CLI_STR, &drafter, "DIR", "DSpark drafter directory (sts.json is written here)"},
        {NULL, "--prompts", CLI_STR, &prompts, "FILE",
         "held-out prompts, JSONL ({\"prompt\"}, {\"prompt_ids\"} or {\"messages\"})"},
        {NULL, "--text-prompts", CLI_FLAG, &text_prompts, NULL, "the prompt file is plain text, one prompt per line"},
        {"-n", "--n-predict", CLI_INT, &n_new, "N", "tokens generated per prompt (default 128)"},
        {NULL, "--temp", CLI_FLOAT, &temp, "T", "sampling temperature of the runs (default 1.0, as DeepSpec evaluates)"},
        {"-s", "--seed", CLI_U64, &seed, "S", "sampling seed (default 1)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads"},
        {NULL, "--bf16-dot", CLI_FLAG, &bf16_dot, NULL, CLI_BF16_DOT_HELP},
        {NULL, "--dry-run", CLI_FLAG, &dry, NULL, "print the fit, do not write sts.json"},
    };
    int rc = cli_parse(CMD, "-m TARGET -md DRAFTER --prompts FILE.jsonl [-n N] [--temp T]", opts,
                       (int)(sizeof opts / sizeof opts[0]), argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || !drafter || !prompts) return cli_error(CMD, "-m, -md and --prompts are required");
    if (n_new < 1) return cli_error(CMD, "-n must be >= 1");
    sp_err err = {{0}};
    sp_model *m = NULL;
    sp_drafter *d = NULL;
    cli_prompt *ps = NULL;
    int np = 0;
    sp_sts_data data;
    sp_sts_data_init(&data, 0);
    rc = 1;
    if (sp_model_load(&m, model, threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    sp_model_set_bf16_dot(m, bf16_dot);
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.max_new = n_new;
    sp.gen.sample.temperature = temp;
    sp.gen.sample.seed = seed;
    sp_dflash_opts o = sp_dflash_opts_default();
    o.no_sts = 1; /* fit on raw confidences */
    o.on_round = on_round;
    o.on_round_ctx = &data;
    if (!(d = sp_drafter_dflash(drafter, m, &sp.gen.sample, &o, &err))) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    sp_dflash_info info;
    sp_dflash_info_get(d, &info);
    if (!info.has_conf) {
        cli_error(CMD, "%s has no confidence head: nothing to calibrate", drafter);
        goto done;
    }
    data.B = info.max_drafts;
    sp.draft_max = info.max_drafts;
    if (cli_prompts_read(CMD, prompts, model, text_prompts, &ps, &np)) goto done;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)n_new);
    if (!out) {
        cli_error(CMD, "out of memory");
        goto done;
    }
    for (int i = 0; i < np; i++) {
        sp_spec_stats st;
        if (sp_spec_generate(m, d, ps[i].ids, ps[i].n, &sp, out, n_new, &st, &err)) {
            free(out);
            cli_error(CMD, "%s:%d: %s", prompts, ps[i].line, err.msg);
            goto done;
        }
        fprintf(stderr, "\rprompt %d: %d proposals so far", i + 1, data.n);
    }
    free(out);
    fprintf(stderr, "\n");
    if (data.n == 0) {
        cli_error(CMD, "no proposals recorded (empty prompt file?)");
        goto done;
    }
    float T[SP_SPEC_MAX_G];
    double eb[SP_SPEC_MAX_G], ea[SP_SPEC_MAX_G];
    if (sp_sts_fit(&data, T, eb, ea, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    printf("slot  temperature  ECE raw  ECE calibrated\n");
    for (int k = 0; k < data.B; k++) printf("%4d  %11.3f  %7.4f  %14.4f\n", k + 1, T[k], eb[k], ea[k]);
    printf("%d proposals from %d prompts\n", data.n, np);
    if (!dry) {
        if (sp_sts_write(drafter, T, data.B, &err)) {
            cli_error(CMD, "%s", err.msg);
            goto done;
        }
        fprintf(stderr, "wrote %s/sts.json\n", drafter);
    }
    rc = 0;
done:
    cli_prompts_free(ps, np);
    sp_sts_data_free(&data);
    sp_drafter_free(d);
    sp_model_free(m);
    return rc;
}
