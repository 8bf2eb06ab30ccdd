/* sampcal.h — draft temperatures for sampled targets (docs/sampling.md, "Draft temperatures").
 *
 * At temperature T a draft x drawn from q is accepted with probability min(1, p(x)/q(x)), so a
 * position is accepted with probability α = Σ_v min(p(v), q(v)) = 1 − TV(p, q), where p is the
 * target's processed distribution. A block drafter's q_j is its logits Z_j processed with the
 * request's settings; the temperature of that processing is free (any q is lossless: the engine
 * verifies with the q the draft was drawn from). A drafter trained on hard labels is rarely
 * calibrated at the target's T, so a draft temperature T_j per block position j, fitted to
 * maximise the mean α_j on held-out prompts, raises the acceptance.
 *
 * The fit (`specula calibrate --sampling`) runs sampled speculative decoding at a few target
 * temperatures with the drafter's q at the request's temperature, and for every verified draft
 * row adds Σ min(p, proc(Z_j / (ρ·T))) for a grid of ratios ρ (0.5 .. 2, log-spaced, ρ = 1 the
 * uncalibrated q), and p(argmax Z_j) (a one-hot q at the drafter's greedy token). Per position the
 * ρ with the largest mean α is kept (ties: the one nearest 1); positions with fewer than
 * SP_SAMPCAL_MIN_ROWS rows take the ratio fitted over all positions.
 *
 * File draft_temps.json beside the drafter:
 *     {"target_temperatures": [T_1 < … < T_n], "draft_temperatures": [[T_1,1 … T_1,B], …]}
 * (other keys — the measured acceptances — are informative). At request temperature T the
 * ratio ρ_j = T_j / T is interpolated linearly in T between the fitted rows and held at the end
 * rows' ratios outside them; the draft temperature is ρ_j(T)·T. */
#ifndef SPECULA_SAMPCAL_H
#define SPECULA_SAMPCAL_H

#include "sample/sample.h"
#include "specula.h"

#define SP_SAMPCAL_MAX_T 8      /* fitted target temperatures */
#define SP_SAMPCAL_MAX_B 32     /* block positions (= SP_SPEC_MAX_G) */
#define SP_SAMPCAL_GRID 21      /* ratios ρ_k = 2^((k − 10)/10), k = 0..20 */
#define SP_SAMPCAL_MIN_ROWS 200 /* fewer verified rows at a position: the all-position ratio */

typedef struct {
    int n_t, B;                                   /* fitted target temperatures; positions per row */
    float t[SP_SAMPCAL_MAX_T];                    /* ascending, > 0 */
    float draft[SP_SAMPCAL_MAX_T][SP_SAMPCAL_MAX_B]; /* draft temperature per position */
} sp_sampcal;

/* Read path into c. Every missing key, bad shape or non-positive value is an error naming it. */
int sp_sampcal_read(sp_sampcal *c, const char *path, sp_err *err);
/* Write c to path (atomic), with the measured mean acceptances acc_raw / acc_fit / acc_onehot
 * [n_t][B] when given (informative keys). */
int sp_sampcal_write(const char *path, const sp_sampcal *c, const double (*acc_raw)[SP_SAMPCAL_MAX_B],
                     const double (*acc_fit)[SP_SAMPCAL_MAX_B], const double (*acc_onehot)[SP_SAMPCAL_MAX_B],
                     sp_err *err);
/* out[0..B) = the draft temperatures at request temperature T > 0 (c NULL or empty: T). Positions
 * beyond c->B take c's last. */
void sp_sampcal_draft_temps(const sp_sampcal *c, float T, int B, float *out);

/* The fit's statistics at one target temperature. */
typedef struct {
    int B, V;
    sp_sampler *smp;                     /* the request's settings; its temperature varies */
    float T;                             /* the target temperature of the runs */
    float *Z;                            /* [B, V] the last proposal's logits */
    float *q;                            /* [V] scratch */
    int nz;                              /* rows in Z */
    long n[SP_SAMPCAL_MAX_B];            /* verified rows per position */
    double alpha[SP_SAMPCAL_MAX_B][SP_SAMPCAL_GRID]; /* Σ min(p, q_ρ) per position and ratio */
    double onehot[SP_SAMPCAL_MAX_B];     /* Σ p(argmax Z) */
} sp_sampcal_data;

double sp_sampcal_ratio(int k); /* ρ_k */
/* sp: the request's sampling settings (temperature > 0). 0, or -1 with err. */
int sp_sampcal_data_init(sp_sampcal_data *d, int B, int V, const sp_sample_params *sp, sp_err *err);
void sp_sampcal_data_free(sp_sampcal_data *d);
/* Keep the logits Z[n, V] of a proposal's n drafts (rows beyond B dropped). */
void sp_sampcal_data_logits(sp_sampcal_data *d, const float *Z, int n);
/* Add the verified row of draft i (0-based) with target probs p[V]. 0, or -1 with err. */
int sp_sampcal_data_verify(sp_sampcal_data *d, int i, const float *p, sp_err *err);
/* Fit draft_t[0..B) for d->T. mean acceptances per position (may be NULL): raw (ρ = 1), fitted,
 * one-hot. Positions without rows keep T and report 0. */
void sp_sampcal_fit(const sp_sampcal_data *d, float *draft_t, double *acc_raw, double *acc_fit, double *acc_onehot);

#endif
