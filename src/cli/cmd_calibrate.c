/* cmd_calibrate.c — `specula calibrate -m TARGET -md DRAFTER --prompts FILE`: run the DSpark
 * drafter with raw confidences on held-out prompts (a prompt file, prompts_cli.h), fit sequential temperature scaling (docs/DSPARK.md §9) and write
 * DRAFTER/sts.json, which the drafter then applies automatically.
 * With --sampling: run sampled speculative decoding at each of --temps with the drafter's q at
 * the request's temperature, fit a draft temperature per block position (decode/sampcal.h,
 * docs/sampling.md) and write DRAFTER/draft_temps.json, which DFlash / DSpark drafters apply to
 * sampled requests. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "drafters/dflash.h"
#include "decode/calibrate.h"
#include "decode/sampcal.h"
#include "decode/spec.h"
#include "prompts_cli.h"
#include "spec_cli.h"

static const char *CMD = "calibrate";

static void on_round(void *ctx, const float *z, int n, int n_acc) {
    sp_sts_data *d = ctx;
    if (sp_sts_data_add(d, z, n, n_acc)) sp_log(SP_LOG_WARN, "calibrate: out of memory recording a round");
}

typedef struct {
    sp_sampcal_data data;
    int failed;
    sp_err err;
} sampling_fit;

static void on_logits(void *ctx, const float *Z, int n, int V) {
    sampling_fit *f = ctx;
    sp_sampcal_data_logits(&f->data, Z, n);
}

static void on_verify(void *ctx, int i, const float *p, int V) {
    sampling_fit *f = ctx;
    if (!f->failed && sp_sampcal_data_verify(&f->data, i, p, &f->err)) f->failed = 1;
}

/* "0.6,0.8,1.0" → ascending temperatures > 0; 0 or -1 (error printed) */
static int parse_temps(const char *s, float *t, int *n) {
    *n = 0;
    const char *at = s;
    while (*at) {
        char *end;
        double v = strtod(at, &end);
        if (end == at || !(v > 0) || v > 100 || (*end && *end != ',') || *n == SP_SAMPCAL_MAX_T ||
            (*n > 0 && !(v > t[*n - 1])))
            return cli_error(CMD, "--temps: expected 1..%d ascending temperatures > 0 separated by commas, got '%s'",
                             SP_SAMPCAL_MAX_T, s), -1;
        t[(*n)++] = (float)v;
        at = *end ? end + 1 : end;
    }
    if (*n == 0) return cli_error(CMD, "--temps is empty"), -1;
    return 0;
}

/* the fit at temperature cal->t[ti]: per block position the verified rows, the draft
 * temperature and mean sum min(p, q) at T, fitted and with a one-hot q; then the mean over the
 * grid of draft temperatures and the expected drafts accepted per block */
static void report_temperature(const sp_sampcal *cal, int ti, const sp_sampcal_data *data, const double *raw,
                               const double *fit, const double *one) {
    printf("temperature %g: per position, verified rows, draft temperature, mean sum min(p, q): at T, fitted, "
           "one-hot q\n",
           (double)cal->t[ti]);
    double er = 0, ef = 0, eo = 0, pr = 1, pf = 1, po = 1; /* Σ_j Π_{i<=j} α_i: drafts accepted per block */
    for (int j = 0; j < cal->B; j++) {
        printf("%4d %8ld %8.3f   %.4f %.4f %.4f\n", j + 1, data->n[j], (double)cal->draft[ti][j], raw[j],
               fit[j], one[j]);
        er += pr *= raw[j], ef += pf *= fit[j], eo += po *= one[j];
    }
    printf("mean over all rows by draft temperature / T:");
    for (int k = 0; k < SP_SAMPCAL_GRID; k++) {
        double a = 0;
        long n = 0;
        for (int j = 0; j < cal->B; j++) a += data->alpha[j][k], n += data->n[j];
        printf(" %.2f:%.4f", sp_sampcal_ratio(k), n ? a / n : 0);
    }
    printf("\n");
    printf("expected drafts accepted per block (positions independent): at T %.3f, fitted %.3f, one-hot %.3f\n",
           er, ef, eo);
}

/* --sampling: fit draft_temps.json on the prompts ps[np] */
static int calibrate_sampling(sp_model *m, const char *drafter, const char *prompts, const cli_prompt *ps, int np,
                              const char *temps, int n_new, uint64_t seed, int dry) {
    sp_sampcal cal;
    memset(&cal, 0, sizeof cal);
    if (parse_temps(temps, cal.t, &cal.n_t)) return 1;
    double raw[SP_SAMPCAL_MAX_T][SP_SAMPCAL_MAX_B], fit[SP_SAMPCAL_MAX_T][SP_SAMPCAL_MAX_B],
        one[SP_SAMPCAL_MAX_T][SP_SAMPCAL_MAX_B];
    int32_t *out = malloc(sizeof(int32_t) * (size_t)n_new);
    sampling_fit *f = calloc(1, sizeof *f);
    sp_drafter *d = NULL;
    sp_err err = {{0}};
    int rc = 1;
    if (!out || !f) {
        cli_error(CMD, "out of memory");
        goto done;
    }
    for (int ti = 0; ti < cal.n_t; ti++) {
        sp_spec_params sp = sp_spec_params_default();
        sp.gen.max_new = n_new;
        sp.gen.sample.temperature = cal.t[ti];
        sp.gen.sample.seed = seed;
        sp.on_verify = on_verify;
        sp.on_verify_ctx = f;
        sp_dflash_opts o = sp_dflash_opts_default();
        o.no_draft_temps = 1; /* fit from q at the request's temperature */
        o.on_logits = on_logits;
        o.on_logits_ctx = f;
        if (!(d = sp_drafter_dflash(drafter, m, &sp.gen.sample, &o, &err))) {
            cli_error(CMD, "%s", err.msg);
            goto done;
        }
        sp_dflash_info info;
        sp_dflash_info_get(d, &info);
        sp.draft_max = info.max_drafts;
        cal.B = info.max_drafts;
        if (sp_sampcal_data_init(&f->data, cal.B, sp_model_config(m)->vocab_size, &sp.gen.sample, &err)) {
            cli_error(CMD, "%s", err.msg);
            goto done;
        }
        for (int i = 0; i < np; i++) {
            sp_spec_stats st;
            if (sp_spec_generate(m, d, ps[i].ids, ps[i].n, &sp, out, n_new, &st, &err) || f->failed) {
                cli_error(CMD, "%s:%d: %s", prompts, ps[i].line, f->failed ? f->err.msg : err.msg);
                goto done;
            }
            fprintf(stderr, "\rtemperature %g: prompt %d of %d", (double)cal.t[ti], i + 1, np);
        }
        fprintf(stderr, "\n");
        sp_sampcal_fit(&f->data, cal.draft[ti], raw[ti], fit[ti], one[ti]);
        report_temperature(&cal, ti, &f->data, raw[ti], fit[ti], one[ti]);
        sp_sampcal_data_free(&f->data);
        sp_drafter_free(d);
        d = NULL;
    }
    if (!dry) {
        char path[4096];
        if (sp_path_join(path, sizeof path, drafter, "draft_temps.json") ||
            sp_sampcal_write(path, &cal, (const double(*)[SP_SAMPCAL_MAX_B])raw, (const double(*)[SP_SAMPCAL_MAX_B])fit,
                             (const double(*)[SP_SAMPCAL_MAX_B])one, &err)) {
            cli_error(CMD, "%s", err.msg[0] ? err.msg : "drafter path too long");
            goto done;
        }
        fprintf(stderr, "wrote %s\n", path);
    }
    rc = 0;
done:
    if (f) sp_sampcal_data_free(&f->data);
    free(f);
    free(out);
    sp_drafter_free(d);
    return rc;
}

/* the options of one run */
typedef struct {
    const char *model, *drafter, *prompts, *temps;
    int n_new, threads, dry, text_prompts, sampling, bf16_dot;
    float temp;
    uint64_t seed;
} calibrate_opts;

/* a warning naming the slots whose fitted temperature is an end of the search grid */
static void warn_bound(const float *T, int B) {
    char hi[256] = "", lo[256] = "";
    size_t nh = 0, nl = 0;
    for (int k = 0; k < B; k++) {
        if (T[k] >= SP_STS_T_MAX * 0.999 && nh < sizeof hi)
            nh += (size_t)snprintf(hi + nh, sizeof hi - nh, "%s%d", nh ? "," : "", k + 1);
        if (T[k] <= SP_STS_T_MIN * 1.001 && nl < sizeof lo)
            nl += (size_t)snprintf(lo + nl, sizeof lo - nl, "%s%d", nl ? "," : "", k + 1);
    }
    if (nh)
        fprintf(stderr, "warning: slot%s %s hit the upper bound %g of the temperature search (%g..%g): the "
                        "fit wants those confidences flatter than the grid allows (they barely predict acceptance); "
                        "more prompts or a better-trained drafter give a real fit\n", strchr(hi, ',') ? "s" : "", hi,
                SP_STS_T_MAX, SP_STS_T_MIN, SP_STS_T_MAX);
    if (nl)
        fprintf(stderr, "warning: slot%s %s hit the lower bound %g of the temperature search (%g..%g)\n",
                strchr(lo, ',') ? "s" : "", lo, SP_STS_T_MIN, SP_STS_T_MIN, SP_STS_T_MAX);
}

/* sequential temperature scaling: run the drafter with raw confidences on the prompts, fit,
 * print and (unless --dry-run) write DRAFTER/sts.json */
static int calibrate_sts(sp_model *m, const calibrate_opts *c) {
    sp_err err = {{0}};
    sp_drafter *d = NULL;
    cli_prompt *ps = NULL;
    int np = 0, rc = 1;
    sp_sts_data data;
    sp_sts_data_init(&data, 0);
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.max_new = c->n_new;
    sp.gen.sample.temperature = c->temp;
    sp.gen.sample.seed = c->seed;
    sp_dflash_opts o = sp_dflash_opts_default();
    o.no_sts = 1; /* fit on raw confidences */
    o.on_round = on_round;
    o.on_round_ctx = &data;
    if (!(d = sp_drafter_dflash(c->drafter, m, &sp.gen.sample, &o, &err))) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    sp_dflash_info info;
    sp_dflash_info_get(d, &info);
    if (!info.has_conf) {
        cli_error(CMD, "%s has no confidence head: nothing to calibrate", c->drafter);
        goto done;
    }
    data.B = info.max_drafts;
    sp.draft_max = info.max_drafts;
    if (cli_prompts_read(CMD, c->prompts, c->model, c->text_prompts, &ps, &np)) goto done;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)c->n_new);
    if (!out) {
        cli_error(CMD, "out of memory");
        goto done;
    }
    for (int i = 0; i < np; i++) {
        sp_spec_stats st;
        if (sp_spec_generate(m, d, ps[i].ids, ps[i].n, &sp, out, c->n_new, &st, &err)) {
            free(out);
            cli_error(CMD, "%s:%d: %s", c->prompts, ps[i].line, err.msg);
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
    warn_bound(T, data.B);
    if (!c->dry) {
        if (sp_sts_write(c->drafter, T, data.B, &err)) {
            cli_error(CMD, "%s", err.msg);
            goto done;
        }
        fprintf(stderr, "wrote %s/sts.json\n", c->drafter);
    }
    rc = 0;
done:
    cli_prompts_free(ps, np);
    sp_sts_data_free(&data);
    sp_drafter_free(d);
    return rc;
}

/* load the target, then fit draft_temps.json (--sampling) or sts.json */
static int run_calibrate(const calibrate_opts *c) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    int rc = 1;
    if (sp_model_load(&m, c->model, c->threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        return 1;
    }
    sp_model_set_bf16_dot(m, c->bf16_dot);
    if (c->sampling) {
        cli_prompt *ps = NULL;
        int np = 0;
        if (!cli_prompts_read(CMD, c->prompts, c->model, c->text_prompts, &ps, &np))
            rc = calibrate_sampling(m, c->drafter, c->prompts, ps, np, c->temps, c->n_new, c->seed, c->dry);
        cli_prompts_free(ps, np);
    } else {
        rc = calibrate_sts(m, c);
    }
    sp_model_free(m);
    return rc;
}

int cmd_calibrate(int argc, char **argv) {
    calibrate_opts c = {.temps = "0.6,0.8,1.0", .n_new = 128, .temp = 1.0f, .seed = 1};
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &c.model, "DIR", "target model directory"},
        {"-md", "--model-draft", CLI_STR, &c.drafter, "DIR", "DSpark drafter directory (sts.json is written here)"},
        {NULL, "--prompts", CLI_STR, &c.prompts, "FILE",
         "held-out prompts, JSONL ({\"prompt\"}, {\"prompt_ids\"} or {\"messages\"})"},
        {NULL, "--text-prompts", CLI_FLAG, &c.text_prompts, NULL, "the prompt file is plain text, one prompt per line"},
        {"-n", "--n-predict", CLI_INT, &c.n_new, "N", "tokens generated per prompt (default 128)"},
        {NULL, "--temp", CLI_FLOAT, &c.temp, "T", "sampling temperature of the runs (default 1.0, as DeepSpec evaluates)"},
        {"-s", "--seed", CLI_U64, &c.seed, "S", "sampling seed (default 1)"},
        {"-t", "--threads", CLI_INT, &c.threads, "N", "threads"},
        {NULL, "--bf16-dot", CLI_FLAG, &c.bf16_dot, NULL, CLI_BF16_DOT_HELP},
        {NULL, "--dry-run", CLI_FLAG, &c.dry, NULL, "print the fit, do not write sts.json / draft_temps.json"},
        {NULL, "--sampling", CLI_FLAG, &c.sampling, NULL,
         "fit the draft temperature of each block position for sampled targets (draft_temps.json; DFlash / DSpark)"},
        {NULL, "--temps", CLI_STR, &c.temps, "LIST",
         "--sampling: the target temperatures fitted (default 0.6,0.8,1.0); others interpolate"},
    };
    int rc = cli_parse(CMD, "-m TARGET -md DRAFTER --prompts FILE.jsonl [-n N] [--temp T | --sampling [--temps LIST]]", opts,
                       (int)(sizeof opts / sizeof opts[0]), argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!c.model || !c.drafter || !c.prompts) return cli_error(CMD, "-m, -md and --prompts are required");
    if (c.n_new < 1) return cli_error(CMD, "-n must be >= 1");
    return run_calibrate(&c);
}
