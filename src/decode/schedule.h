/* schedule.h — how many of a block's drafts to verify, from the drafter's confidences
 * (docs/DSPARK.md §6 static threshold, docs/DSPARK.md §10 the DSpark paper's hardware-aware prefix scheduler).
 *
 * Confidence c_j estimates P(draft j accepted | drafts 1..j-1 accepted); the prefix survival is
 * a_j = Π_{i<=j} c_i. The scheduler admits drafts in decreasing order of a while the expected
 * throughput τ·SPS(Bt) (τ = expected tokens emitted, Bt = verify width) improves, and stops at
 * the FIRST step that does not improve. That early stop keeps the decision to verify draft x_k
 * a function of c_1..c_k only (information from before x_k was sampled): lossless. The
 * retrospective variant (evaluate every length, keep the best) lets c_{k+1} — which depends on
 * x_k through the Markov embedding — decide whether x_k is verified, and biases the output
 * (paper Appendix A). It exists only so the audit can show that.
 *
 * SPS(b): target forward steps per second with b tokens in the verify batch, profiled on this
 * machine (sp_sps_profile) and cached on disk per model and thread count (sp_sps_cached). */
#ifndef SPECULA_SCHEDULE_H
#define SPECULA_SCHEDULE_H

#include "specula.h"

#define SP_SPS_MAX 64

typedef struct {
    int n;                       /* widths 1..n are known */
    double sps[SP_SPS_MAX + 1];  /* sps[b], b = 1..n (sps[0] unused) */
} sp_sps_table;

/* SPS at width b (clamped to the table; beyond it: scaled as 1/b from the last entry). */
double sp_sps_at(const sp_sps_table *t, int b);

/* Time target forwards of b = 1..max_b tokens (after a 64-token context; median of reps).
 * The model's own KV cache is used and freed inside. */
int sp_sps_profile(sp_model *m, int max_b, int reps, sp_sps_table *t, sp_err *err);

/* The table for (model dir, thread count, max_b): read from the cache file
 * ($XDG_CACHE_HOME or ~/.cache)/specula/sps-<hash of realpath(dir), weight bytes, threads>.json,
 * else profiled and written there (atomic). *path_out (may be NULL) receives the cache path. */
int sp_sps_cached(sp_model *m, const char *model_dir, int max_b, sp_sps_table *t, char *path_out, size_t cap,
                  sp_err *err);

/* ---- one request (R = 1), step by step: the docs/DSPARK.md §10 loop with its early stop ------------- */
typedef struct {
    const sp_sps_table *t;
    int R;                 /* requests in the batch: the base verify width (1 here) */
    double a, tau, best;
    int bt, len, stopped;
} sp_sched;

void sp_sched_begin(sp_sched *s, const sp_sps_table *t);
/* Offer draft j = len+1 with confidence c_j (computed before x_j is sampled). Returns 1 when it
 * is admitted (sample and verify it), 0 when the scheduler stops (and stays stopped). */
int sp_sched_admit(sp_sched *s, double c);

/* docs/DSPARK.md §10 Algorithm 1 over R requests: c[r·B + j-1] = c_{r,j}; len[r] receives ℓ*_r. */
void sp_sched_prefix(int R, int B, const double *c, const sp_sps_table *t, int *len);

/* LOSSY (test only): the length 0..n maximising τ·SPS over all prefixes of c[0..n). */
int sp_sched_retrospective(const double *c, int n, const sp_sps_table *t);

#endif
