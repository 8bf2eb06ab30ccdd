/* sample_cli.c — shared sampling flags and their resolution (see sample_cli.h). */
#include "sample_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "formats/genconfig.h"

int cli_penalty_opt_rows(void *rows, cli_sample_opts *o) {
    cli_opt *r = rows;
    r[0] = (cli_opt){NULL, "--repeat-penalty", CLI_FLOAT, &o->repeat, "P",
                     "penalise repeated tokens: logit / P (logit x P when <= 0) (default 1 = off)"};
    r[1] = (cli_opt){NULL, "--repeat-last-n", CLI_INT, &o->last_n, "N",
                     "window of the penalties: the last N tokens (default 64, 0 = off, -1 = all)"};
    r[2] = (cli_opt){NULL, "--presence-penalty", CLI_FLOAT, &o->presence, "P",
                     "subtract P from every token in the window (default 0 = off)"};
    r[3] = (cli_opt){NULL, "--frequency-penalty", CLI_FLOAT, &o->frequency, "P",
                     "subtract P per occurrence in the window (default 0 = off)"};
    return CLI_PENALTY_OPT_ROWS;
}

int cli_sample_opt_rows(void *rows, cli_sample_opts *o) {
    cli_opt *r = rows;
    r[0] = (cli_opt){NULL, "--temp", CLI_FLOAT, &o->temp, "T",
                     "temperature, 0 = greedy (default: generation_config.json, else 0)"};
    r[1] = (cli_opt){NULL, "--top-k", CLI_INT, &o->top_k, "K", "keep the K most likely tokens (0 = off)"};
    r[2] = (cli_opt){NULL, "--top-p", CLI_FLOAT, &o->top_p, "P", "nucleus mass (1 = off)"};
    r[3] = (cli_opt){NULL, "--min-p", CLI_FLOAT, &o->min_p, "P", "drop tokens below P x the top probability (0 = off)"};
    r[4] = (cli_opt){"-s", "--seed", CLI_STR, &o->seed, "S", "sampling seed (default 0; -1 = random, printed)"};
    cli_penalty_opt_rows(r + 5, o);
    r[9] = (cli_opt){NULL, "--ignore-generation-config", CLI_FLAG, &o->ignore_gc, NULL,
                     "ignore the model's generation_config.json (eos ids, default sampling)"};
    return CLI_SAMPLE_OPT_ROWS;
}

static uint64_t random_seed(void) {
    uint32_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&s, sizeof s, 1, f) != 1) s = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
    if (f) fclose(f);
    return s;
}

int cli_seed_parse(const char *cmd, const char *text, uint64_t *seed, int *random) {
    char *end;
    errno = 0;
    *random = 0;
    if (!strcmp(text, "-1")) {
        *seed = random_seed();
        *random = 1;
        return 0;
    }
    unsigned long long v = text[0] == '-' ? 0 : strtoull(text, &end, 0);
    if (text[0] == '-' || !*text || *end || errno)
        return cli_error(cmd, "--seed expects a non-negative integer or -1 (random), got '%s'", text), -1;
    *seed = v;
    return 0;
}

int cli_sample_resolve(const char *cmd, cli_sample_opts *o, const char *model_dir, const sp_sample_params *def,
                       int use_gc_sampling, sp_gen_params *gp) {
    sp_sample_params sp = *def;
    sp_penalty_params pp = sp_penalty_params_default();
    if (o->seed && cli_seed_parse(cmd, o->seed, &sp.seed, &o->seed_random)) return -1;
    gp->n_extra_eos = 0;
    sp_genconfig gc = {0};
    sp_err err = {{0}};
    if (!o->ignore_gc && model_dir && sp_genconfig_load(model_dir, &gc, &err)) {
        return cli_error(cmd, "%s (--ignore-generation-config skips the file)", err.msg), -1;
    }
    if (gc.found) {
        for (int i = 0; i < gc.n_eos; i++) gp->extra_eos[gp->n_extra_eos++] = gc.eos_ids[i];
        o->from_gc = gc.n_eos > 0;
        if (use_gc_sampling) {
            sp_genconfig_sampling(&gc, &sp.temperature, !isnan(o->temp), &sp.top_k, o->top_k != INT_MIN, &sp.top_p,
                                  !isnan(o->top_p), &sp.min_p, !isnan(o->min_p));
            o->from_gc = 1;
            if (gc.has_repetition_penalty && isnan(o->repeat)) {
                pp.repeat = gc.repetition_penalty; /* transformers: the whole sequence */
                if (o->last_n == INT_MIN) pp.last_n = -1;
            }
        }
    }
    if (!isnan(o->temp)) sp.temperature = o->temp;
    if (o->top_k != INT_MIN) sp.top_k = o->top_k;
    if (!isnan(o->top_p)) sp.top_p = o->top_p;
    if (!isnan(o->min_p)) sp.min_p = o->min_p;
    if (!isnan(o->repeat)) pp.repeat = o->repeat;
    if (o->last_n != INT_MIN) pp.last_n = o->last_n;
    if (!isnan(o->presence)) pp.presence = o->presence;
    if (!isnan(o->frequency)) pp.frequency = o->frequency;
    if (!isnan(o->repeat) && !(o->repeat > 0))
        return cli_error(cmd, "--repeat-penalty must be > 0 (1 = off), got %g", (double)o->repeat), -1;
    if (sp_sample_params_check(&sp, &err) || sp_penalty_params_check(&pp, &err))
        return cli_error(cmd, "%s", err.msg), -1;
    gp->sample = sp;
    gp->penalty = pp;
    return 0;
}

int cli_logit_bias_parse(const char *cmd, const cli_list *l, int32_t *ids, float *bias, sp_gen_params *gp) {
    for (int i = 0; i < l->n; i++) {
        const char *v = l->v[i];
        char *end = NULL;
        errno = 0;
        long id = strtol(v, &end, 10);
        if (end == v || errno || id < 0 || id > INT32_MAX || (*end != '+' && *end != '-'))
            return cli_error(cmd, "--logit-bias expects TOKEN_ID(+|-)BIAS (e.g. 15043+1 or 15043-inf), got '%s'", v), -1;
        const char *b = end;
        float x = strtof(b, &end);
        if (end == b || *end || isnan(x) || x == INFINITY)
            return cli_error(cmd, "--logit-bias expects TOKEN_ID(+|-)BIAS (e.g. 15043+1 or 15043-inf), got '%s'", v), -1;
        ids[i] = (int32_t)id;
        bias[i] = x;
    }
    gp->penalty.n_bias = l->n;
    gp->penalty.bias_ids = l->n ? ids : NULL;
    gp->penalty.bias = l->n ? bias : NULL;
    return 0;
}
