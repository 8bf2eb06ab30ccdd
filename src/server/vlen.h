/* vlen.h — batch-aware verify lengths for the server's scheduler (docs/server-batching.md).
 *
 * With n decoding slots one target forward verifies Σ (g_i + 1) rows. On a CPU the cost of that
 * forward grows with its rows (slowly while the weights' memory traffic dominates, then about
 * linearly once the matmuls are compute-bound), so the drafts that pay at one client can cost more
 * than they save at eight. The policy here picks each greedy slot's g to maximise the expected
 * tokens per millisecond of the step:
 *
 *     J(g) = Σ_i E_i(g_i) / (F(rows_prefill + Σ_i (g_i + 1)) + κ · F(Σ_i g_i))
 *
 * E_i(g) = 1 + Σ_{k ≤ g} p_ik is slot i's expected tokens with g drafts verified (p_ik: its
 * measured rate of accepting at least k drafts, shrunk towards the server-wide rate while it has
 * few rounds); F(r) is the measured cost of a batched forward over r rows (calibrated at start,
 * scaled by the observed/calibrated ratio of recent steps, so machine load is tracked); κ·F(r) is
 * the drafting cost of r block rows (κ learned from the measured proposal times). The search
 * starts from plain decoding (every g_i = 0) and takes only changes that raise J, so by the model
 * a step is never slower per token than plain. Sampled slots keep their full g (their seeded
 * output depends on it); greedy output does not depend on g. */
#ifndef SPECULA_SERVER_VLEN_H
#define SPECULA_SERVER_VLEN_H

#include "decode/spec.h"
#include "specula.h"

typedef struct {
    int n_rows;   /* the table covers 0 .. n_rows */
    double *fwd;  /* [n_rows + 1] calibrated ms of one batched forward over r rows (fwd[0] = 0) */
    double load;  /* recent observed / calibrated forward time */
    double kappa; /* drafting ms per calibrated forward ms at the same row count */
    long offered[SP_SPEC_MAX_G + 1], reached[SP_SPEC_MAX_G + 1]; /* server-wide, as slot_accept_counts */
} srv_vlen;

/* Time batched forwards of 1, 2, 4, .. 32 rows (at most calib_rows; with logits, after a 64-token
 * context, in a temporary cache) and fill the table up to n_rows (extrapolated past the last).
 * scratch: a cache with max_batch >= calib_rows; logits: [calib_rows, V]. 0, or -1 with err. */
int srv_vlen_init(srv_vlen *v, sp_model *m, sp_kv *scratch, float *logits, int calib_rows, int n_rows, sp_err *err);
void srv_vlen_free(srv_vlen *v);

/* The model's cost of a forward over `rows` rows, in ms (load included). */
double srv_vlen_forward_ms(const srv_vlen *v, int rows);

/* Choose g[i] for n decoding slots: room[i] the most it may verify, fixed[i] 1 when g[i] = room[i]
 * is imposed (sampled), offered[i] / reached[i] its counts (NULL: none yet); base_rows: rows of
 * prompt chunks in the same forward. */
void srv_vlen_choose(const srv_vlen *v, int n, const int *room, const int *fixed, const long *const *offered,
                     const long *const *reached, int base_rows, int *g);

/* Observations after a step: a forward over rows took ms; a proposal over draft_rows rows took
 * ms; a slot verified nd drafts and accepted acc. */
void srv_vlen_observe_forward(srv_vlen *v, int rows, double ms);
void srv_vlen_observe_draft(srv_vlen *v, int draft_rows, double ms);
void srv_vlen_observe_round(srv_vlen *v, int nd, int acc);

#endif
