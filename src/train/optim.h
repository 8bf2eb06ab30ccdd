/* optim.h — AdamW on fp32 master weights, linear warmup + cosine learning rate, global
 * gradient-norm clipping (docs/DSPARK.md §8: lr 6e-4, warmup 4 %, cosine to 0, clip 1.0, wd 0).
 * The one schedule of every trainer (drafters and train-lm, docs/TRAINING.md).
 * All three are deterministic element-wise loops (norm summed in double in index order), so a
 * resumed run repeats an uninterrupted one bit for bit. */
#ifndef SPECULA_TRAIN_OPTIM_H
#define SPECULA_TRAIN_OPTIM_H

#include <stddef.h>

typedef struct {
    double lr;            /* peak learning rate */
    double beta1, beta2, eps, weight_decay;
    long warmup;          /* steps of linear warmup */
    long total;           /* steps in the schedule (cosine reaches min_lr_frac·lr at `total`) */
    double min_lr_frac;   /* floor of the cosine as a fraction of lr (drafters: 0) */
    double clip;          /* max global gradient norm (<= 0: no clipping) */
} tr_optim_cfg;

/* learning rate of step `step` (1-based): lr·step/warmup up to step `warmup` (which has lr), then
 * lo + (lr − lo)·½(1 + cos(π·(step−warmup)/(total−warmup))) with lo = min_lr_frac·lr, lo at `total` */
double sp_tr_lr_at(const tr_optim_cfg *c, long step);
/* the default warm-up: 4 % of the steps, rounded up */
long sp_tr_warmup_default(long total);
/* global L2 norm of g[n]; scales g to norm max_norm when above it. Returns the norm before clipping. */
double sp_tr_clip_grad(float *g, size_t n, double max_norm);
/* one AdamW update of w with bias correction for update number `step` (1-based) */
void sp_tr_adamw_step(float *w, const float *g, float *m, float *v, size_t n, long step, double lr,
                   const tr_optim_cfg *c);

#endif
