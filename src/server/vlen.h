/* vlen.h — batch-aware verify lengths for the server's scheduler (docs/server-batching.md).
 *
 * With n decoding slots one target forward verifies Σ (g_i + 1) rows. On a CPU the cost of that
 * forward grows with its rows (slowly while the weights' memory traffic dominates, then about
 * linearly once the matmuls are compute-bound, and more steeply still when other processes share
 * the cores), so the drafts that pay at one client can cost more than they save at eight. The
 * policy here picks each greedy slot's g to maximise the expected tokens per millisecond of the
 * step:
 *
 *     J(g) = Σ_i E_i(g_i) / ( F(base + Σ_i (g_i + 1)) - F(base) + D(S, Σ_i g_i) + Σ_i B_i(g_i) )
 *
 * (base: rows of prompt chunks in the same forward, work the step does whatever g is)
 *
 * E_i(g) = 1 + Σ_{k ≤ g} p_ik is slot i's expected tokens with g drafts verified (p_ik: its
 * measured rate of accepting at least k drafts, shrunk towards the server-wide rate while it has
 * few rounds; non-increasing in k, so E_i is concave). F(r) is the cost of a batched forward over
 * r rows: a table measured at start, times the recent load and a shape learned online per row
 * count from the forwards the server runs, never cheaper for more rows. D(S, R) = c_slot · S + c_row · R is the cost of drafting R block rows
 * for the S slots that draft (the drafter's per-slot work — LM head, heads, sampling — and its
 * shared per-row work), both learned online from the timed proposals. B_i(g > 0) is the begin of a
 * slot's still dormant drafter over its context, spread over the rounds left to the request
 * (c_ctx ms per context row, learned from the timed begins). The maximum over all
 * assignments is found exactly (Dinkelbach iterations over a dynamic programme on the total draft
 * count), so by the model a step is never slower per token than plain decoding. Sampled slots keep
 * their full g (their seeded output depends on it); greedy output does not depend on g. */
#ifndef SPECULA_SERVER_VLEN_H
#define SPECULA_SERVER_VLEN_H

#include "decode/spec.h"
#include "specula.h"

#define SRV_VLEN_PTS 16 /* row-count points 1, 2, 4, .. 2^15 of the learned load ratios */

typedef struct {
    int n_rows;  /* the table covers 0 .. n_rows */
    double *fwd; /* [n_rows + 1] calibrated ms of one batched forward over r rows (fwd[0] = 0) */
    double load; /* recent observed / calibrated forward time, over every row count */
    /* per row-count point 2^j: that ratio over `load` at the time (how much more or less than the
     * others this row count is slowed), and the (decayed) weight of its observations; a point with
     * little weight falls back to 1 */
    double pt_ratio[SRV_VLEN_PTS], pt_weight[SRV_VLEN_PTS];
    /* drafting: ms = load · (c_slot · S + c_row · R), fitted by decayed least squares on the
     * proposals (sxx, sxy: the decayed sums over (S, R) → ms / load), shrunk towards c0 */
    double c_slot, c_row, c0_slot, c0_row;
    double c_ctx; /* ms (per load) per context row of a dormant drafter's begin, from timed begins */
    double sxx[2][2], sxy[2];
    long offered[SP_SPEC_MAX_G + 1], reached[SP_SPEC_MAX_G + 1]; /* server-wide, as sp_slot_accept_counts */
} srv_vlen;

/* Time batched forwards of 1, 2, 4, .. 32 rows (at most calib_rows; with logits, after a 64-token
 * context, in a temporary cache) and fill the table up to n_rows (sp_srv_vlen_init_table).
 * scratch: a cache with max_batch >= calib_rows; logits: [calib_rows, V]. 0, or -1 with err. */
int sp_srv_vlen_init(srv_vlen *v, sp_model *m, sp_kv *scratch, float *logits, int calib_rows, int n_rows, sp_err *err);
/* The model from measured forward times ms[i] of pts[i] rows (np points, pts increasing): the
 * table up to n_rows, linear between the points and continued past the last; no observations
 * yet. 0, or -1 with err (bad points, out of memory). */
int sp_srv_vlen_init_table(srv_vlen *v, const int *pts, const double *ms, int np, int n_rows, sp_err *err);
void sp_srv_vlen_free(srv_vlen *v);

/* The model's cost of a forward over `rows` rows, in ms (learned load included). */
double sp_srv_vlen_forward_ms(const srv_vlen *v, int rows);
/* The model's cost of proposing `rows` block rows for `slots` drafting slots, in ms. */
double sp_srv_vlen_draft_ms(const srv_vlen *v, int slots, int rows);

/* Choose g[i] for n decoding slots: room[i] the most it may verify, fixed[i] 1 when g[i] = room[i]
 * is imposed (sampled), offered[i] / reached[i] its counts (NULL: none yet); wake_rows[i] the
 * context rows its dormant drafter would be begun on if it drafts (0: begun; NULL: all begun), a
 * one-off cost spread over the rounds left to its left[i] tokens (NULL: one round); base_rows: rows
 * of prompt chunks in the same forward. */
void sp_srv_vlen_choose(const srv_vlen *v, int n, const int *room, const int *fixed, const long *const *offered,
                     const long *const *reached, const int *wake_rows, const int *left, int base_rows, int *g);

/* Observations after a step: a forward over rows took ms; a proposal of draft_rows block rows for
 * draft_slots slots took ms; a slot verified nd drafts and accepted acc. */
void sp_srv_vlen_observe_forward(srv_vlen *v, int rows, double ms);
void sp_srv_vlen_observe_draft(srv_vlen *v, int draft_slots, int draft_rows, double ms);
void sp_srv_vlen_observe_round(srv_vlen *v, int nd, int acc);
/* A dormant drafter was begun over `rows` context rows in ms. */
void sp_srv_vlen_observe_wake(srv_vlen *v, int rows, double ms);

#endif
