/* synth_cli.c — the synthetic-acceptance flags of bench-spec and serve (synth_cli.h). */
#include "synth_cli.h"

#include <stdlib.h>
#include <string.h>

int cli_synth_opt_rows(cli_opt *rows, cli_synth_opts *o) {
    rows[0] = (cli_opt){NULL, "--spec-synthetic", CLI_STR, &o->list, "P[,P...]",
                        "BENCHMARK ONLY, NOT LOSSLESS: accept each draft with chance P (i.i.d., seeded) instead of "
                        "by the target; the drafter and the verify forward still run (a list: one run per P)"};
    rows[1] = (cli_opt){NULL, "--spec-synthetic-profile", CLI_STR, &o->profile, "P1,P2,...",
                        "BENCHMARK ONLY, NOT LOSSLESS: draft i accepted with chance Pi once draft i-1 was"};
    rows[2] = (cli_opt){NULL, "--spec-synthetic-seed", CLI_U64, &o->seed, "N", "seed of the synthetic accept test (default 1)"};
    return CLI_SYNTH_OPT_ROWS;
}

/* "a,b,c" as probabilities into v[0 .. *n) (at most cap). Prints errors; 0 / -1. */
static int parse_list(const char *cmd, const char *flag, const char *s, float *v, int cap, int *n) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        double x = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(x >= 0 && x <= 1))
            return cli_error(cmd, "%s '%s': entry %d is not a probability in [0, 1]", flag, s, *n + 1), -1;
        if (*n == cap) return cli_error(cmd, "%s '%s': more than %d entries", flag, s, cap), -1;
        v[(*n)++] = (float)x;
        p = *end ? end + 1 : end;
        if (*end && !*p) return cli_error(cmd, "%s '%s': empty entry after the last comma", flag, s), -1;
    }
    if (!*n) return cli_error(cmd, "%s: empty list", flag), -1;
    return 0;
}

int cli_synth_resolve(const char *cmd, const cli_synth_opts *o, sp_synth *out, int cap, int *n) {
    *n = 0;
    if (o->list && o->profile) return cli_error(cmd, "--spec-synthetic and --spec-synthetic-profile exclude each other"), -1;
    float v[SP_SPEC_MAX_G];
    int k = 0;
    if (o->profile) {
        if (parse_list(cmd, "--spec-synthetic-profile", o->profile, v, SP_SPEC_MAX_G, &k)) return -1;
        memset(&out[0], 0, sizeof out[0]);
        out[0].n = k, out[0].seed = o->seed;
        memcpy(out[0].p, v, sizeof(float) * (size_t)k);
        *n = 1;
    } else if (o->list) {
        if (parse_list(cmd, "--spec-synthetic", o->list, v, cap < SP_SPEC_MAX_G ? cap : SP_SPEC_MAX_G, &k)) return -1;
        for (int i = 0; i < k; i++) {
            memset(&out[i], 0, sizeof out[i]);
            out[i].n = 1, out[i].p[0] = v[i], out[i].seed = o->seed;
        }
        *n = k;
    }
    return 0;
}

void cli_synth_name(const sp_synth *s, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%g", i ? "," : "", s->p[i]);
}

void cli_synth_banner(FILE *f, const char *cmd, const sp_synth *s) {
    char name[512];
    cli_synth_name(s, name, sizeof name);
    fprintf(f, "%s: SYNTHETIC ACCEPTANCE %s=%s (seed %llu): benchmark only, outputs are NOT lossless\n", cmd,
            s->n > 1 ? "profile" : "P", name, (unsigned long long)s->seed);
}
