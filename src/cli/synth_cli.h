/* synth_cli.h — synthetic acceptance for the benchmark commands (bench-spec) and `serve` only:
 * --spec-synthetic P[,P...], --spec-synthetic-profile P1,P2,... and --spec-synthetic-seed N become
 * sp_synth profiles (decode/spec.h, docs/SYNTHETIC.md). `generate`, `run` and the chat do not have
 * these flags. Every command that takes them prints the banner of cli_synth_banner. */
#ifndef SPECULA_CLI_SYNTH_H
#define SPECULA_CLI_SYNTH_H

#include <stdio.h>

#include "args.h"
#include "decode/spec.h"

typedef struct {
    const char *list;    /* --spec-synthetic P[,P...]: one run per P (serve: exactly one P) */
    const char *profile; /* --spec-synthetic-profile P1,P2,...: the chance per draft position */
    uint64_t seed;       /* --spec-synthetic-seed */
} cli_synth_opts;

#define CLI_SYNTH_OPTS_DEFAULT {NULL, NULL, 1}
#define CLI_SYNTH_OPT_ROWS 3
int cli_synth_opt_rows(cli_opt *rows, cli_synth_opts *o);

/* The profiles the flags ask for into out[0 .. *n) (at most cap): one per P of --spec-synthetic,
 * or the one --spec-synthetic-profile; *n = 0 when neither flag was given. Prints errors; 0 / -1. */
int cli_synth_resolve(const char *cmd, const cli_synth_opts *o, sp_synth *out, int cap, int *n);

/* "0.85" or "0.9,0.8,..." (a profile) */
void cli_synth_name(const sp_synth *s, char *buf, size_t cap);
/* The line that marks a synthetic run: "CMD: SYNTHETIC ACCEPTANCE P=...: benchmark only, NOT lossless". */
void cli_synth_banner(FILE *f, const char *cmd, const sp_synth *s);

#endif
