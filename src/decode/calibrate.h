/* calibrate.h — sequential temperature scaling (STS) of DSpark confidences (docs/DSPARK.md §9).
 *
 * Data: per proposal, the raw confidence logits z_1..z_n of its n drafts and how many were
 * accepted; label y_k = 1 when drafts 1..k were all accepted. For k = 1..B in order, one
 * temperature T_k (c_k = σ(z_k / T_k)) is grid-searched to minimise the ECE of the prefix
 * survival a_k = Π_{i<=k} c_i against y_k, with T_1..T_{k-1} fixed. ECE as DeepSpec measures
 * it: 20 equal-width bins over [0, 1], Σ_b (n_b/N)·|mean pred_b − mean label_b|. Grid: 161
 * log-spaced values from 0.05 to 20 (the paper gives none); ties keep the value nearest 1.
 * The result lives in sts.json beside the drafter ({"temperatures": [...]}) and the DSpark
 * drafter applies it on load. */
#ifndef SPECULA_CALIBRATE_H
#define SPECULA_CALIBRATE_H

#include <stdint.h>

#include "specula.h"

/* the temperature grid's ends; a fit at an end means the search was cut there */
#define SP_STS_T_MIN 0.05
#define SP_STS_T_MAX 20.0

typedef struct {
    int B;          /* slots per proposal */
    int n, cap;     /* proposals recorded */
    float *z;       /* [n, B] raw confidence logits (only the first len[i] of a row are valid) */
    uint8_t *len;   /* [n] drafts in the proposal */
    uint8_t *acc;   /* [n] accepted of them */
} sp_sts_data;

void sp_sts_data_init(sp_sts_data *d, int B);
void sp_sts_data_free(sp_sts_data *d);
/* record one proposal (n <= B drafts, n_acc accepted); 0 or -1 out of memory */
int sp_sts_data_add(sp_sts_data *d, const float *z, int n, int n_acc);

/* ECE of pred[n] against labels y[n] (20 bins) */
double sp_ece(const double *pred, const uint8_t *y, int n);

/* Fit T[0..B). ece_before / ece_after [B] (may be NULL): per slot, raw vs calibrated.
 * Slots with no data keep T = 1. Returns 0, or -1 with err. */
int sp_sts_fit(const sp_sts_data *d, float *T, double *ece_before, double *ece_after, sp_err *err);

/* Write dir/sts.json (atomic). */
int sp_sts_write(const char *dir, const float *T, int B, sp_err *err);

#endif
