/* round_report.h — the round-cost profile and the rounds-without-drafts counts of `run` and
 * `bench-spec`, as JSON and as human lines (docs/ROUND_COST.md). */
#ifndef SPECULA_CLI_ROUND_REPORT_H
#define SPECULA_CLI_ROUND_REPORT_H

#include <jansson.h>

#include "decode/spec.h"

/* Sums of the per-request stats a report needs. */
typedef struct {
    sp_prof_totals prof;
    long rounds;
    long nodraft[SP_NODRAFT_N];
    double decode_ms;
} cli_round_sums;

void cli_round_sums_add(cli_round_sums *s, const sp_spec_stats *st);

/* {"plain_step_ms", "rounds", "round_ms", "round": measured round ÷ plain step, "sum": the
 * parts' sum ÷ plain step, "draft", "verify", "engine": phase totals, "parts": {"draft.block": …}}:
 * every figure but the ms ones is per round, as a fraction of one plain decoding step. New
 * reference (caller owns it). */
json_t *cli_round_profile_json(const cli_round_sums *s, double plain_step_ms);
/* {"total": N, "not paying": N, ...} (new reference). */
json_t *cli_round_nodraft_json(const cli_round_sums *s);
/* Human lines: the profile as fractions of a plain step, and the rounds without drafts. */
void cli_round_print(const cli_round_sums *s, double plain_step_ms);

#endif
