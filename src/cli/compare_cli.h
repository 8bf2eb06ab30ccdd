/* compare_cli.h — plain vs speculative decoding of one prompt through the engine session, and
 * the sums `run` and `bench-spec` report over a prompt file: speed, τ, acceptance per position,
 * the round-cost profile of both runs (round_report.h) and whether greedy outputs were identical. */
#ifndef SPECULA_CLI_COMPARE_H
#define SPECULA_CLI_COMPARE_H

#include "api/session.h"
#include "round_report.h"

typedef struct {
    double plain_ms, spec_ms, draft_ms, verify_ms;
    long tok_plain, tok_spec, calls, drafted, accepted;
    long pos_drafted[SP_SPEC_MAX_G], pos_accepted[SP_SPEC_MAX_G];
    cli_round_sums spec, plain; /* round-cost profiles */
    int mismatches;             /* prompts whose speculative tokens differ from the plain ones */
    int n_prompts;
    double speedup_min, speedup_max; /* the spread of the per-prompt speedups (plain ms ÷ speculative ms) */
} cli_compare_sums;

/* One prompt: a plain run (profiled through the round) and, unless plain_only, a speculative
 * one with the same request; o0 / o1 receive them (o1 = a copy of o0's figures when plain_only;
 * free both with sp_session_out_free). Returns 0, or -1 with err. */
int cli_compare_prompt(sp_session *s, const sp_session_req *r, const int32_t *ids, int n, int plain_only,
                       sp_session_out *o0, sp_session_out *o1, sp_err *err);
/* Add a prompt's pair to the sums; returns 1 when the outputs are identical. */
int cli_compare_add(cli_compare_sums *c, const sp_session_out *o0, const sp_session_out *o1, int G);

double cli_compare_speedup(const cli_compare_sums *c); /* plain decode time ÷ speculative */
double cli_compare_tau(const cli_compare_sums *c);     /* tokens per target forward */
double cli_compare_accept(const cli_compare_sums *c, int k); /* acceptance at draft position k */

#endif
