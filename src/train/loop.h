/* loop.h — the one training loop of every trainer (`train`: DSpark / DFlash / EAGLE-3 drafters,
 * `train-lm`: a target LM), see docs/TRAINING.md.
 *
 * The loop owns what is the same for all of them: the gradient and AdamW moment arrays over one
 * flat parameter array, the step loop (zero the gradient, the trainer's loss + gradient, sums
 * over MPI ranks, global-norm clipping, the warmup + cosine schedule of optim.h, AdamW), the
 * divergence checks, the evaluation and checkpoint cadence, resume, the CSV log (header, one
 * row a step, cut back to the checkpoint's step on resume, torn last line included), the
 * progress bar, and rank-0-only I/O. A trainer gives its model through tr_loop_params and a few
 * callbacks (tr_loop_ops): the loss and gradient of a step, an evaluation, its log row, its
 * model files, its fields of trainer_state.json.
 *
 * A checkpoint (checkpoint.h) is OUT/: the trainer's model files (ops->export), then
 * trainer_state.json (jansson), then optimizer.safetensors, last. Resume reads only the
 * optimizer file, so a kill at any moment resumes from the last complete checkpoint and repeats
 * the uninterrupted run bit for bit, given that a step's batch depends only on (seed, step). */
#ifndef SPECULA_TRAIN_LOOP_H
#define SPECULA_TRAIN_LOOP_H

#include <jansson.h>
#include <stdio.h>

#include "core/core.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/optim.h"

#define TR_LOOP_MAX_STATS 5

/* what one step (or the evaluation before step 1, step 0) leaves for the log and progress */
typedef struct {
    long step;                       /* 1-based; 0: the evaluation before training */
    long step0;                      /* the step this run started from (0, or the resumed one) */
    double lr, grad_norm;
    double stats[TR_LOOP_MAX_STATS]; /* the trainer's loss terms, summed over ranks; [0] the loss */
    double step_ms;                  /* this step: batch, forward, backward, reductions, update */
    double elapsed_ms;               /* since the loop started (evaluations and saves included) */
    double train_ms;                 /* Σ step_ms of this run up to this step */
    int evaluated;                   /* ops->eval ran after this step */
} tr_loop_row;

typedef struct {
    /* loss and gradient of `step` (1-based) into grad[n] (zeroed by the loop), this rank's part:
     * stats[0..n_stats) its loss terms, stats[0] the loss. The loop sums both over ranks. */
    void (*step)(void *ctx, long step, float *grad, double *stats);
    /* the held-out evaluation after `step` (0: before training); results stay in ctx. Returns 0,
     * 1 to stop training after this step (with a checkpoint: early stopping), or -1 */
    int (*eval)(void *ctx, long step, sp_err *err);
    /* one CSV row (newline included) */
    void (*log_row)(void *ctx, FILE *f, const tr_loop_row *r);
    /* text beside the progress bar (may be NULL) */
    void (*progress_text)(void *ctx, char *buf, size_t n, const tr_loop_row *r);
    /* the model files of a checkpoint into dir */
    int (*export_model)(void *ctx, const char *dir, sp_err *err);
    /* the trainer's fields of trainer_state.json, added to state (may be NULL) */
    int (*state)(void *ctx, json_t *state);
    /* AdamW of step `step` with learning rate lr over w, g, m, v (NULL: one sp_tr_adamw_step over
     * all n with the loop's optimizer settings) */
    void (*update)(void *ctx, float *w, const float *g, float *m, float *v, long step, double lr,
                   const tr_optim_cfg *oc);
} tr_loop_ops;

/* the parameters trained: a flat array and its tensor table (the optimizer file's names) */
typedef struct {
    float *w;
    size_t n;
    const tr_ckpt_tensor *t;
    int nt;
} tr_loop_params;

typedef struct {
    tr_optim_cfg oc;       /* schedule (lr, warmup, total, min_lr_frac), AdamW, clip */
    int n_stats;           /* loss terms a step reports (1..TR_LOOP_MAX_STATS) */
    const char *out_dir;   /* checkpoints */
    const char *log_path;  /* NULL: OUT/train_log.csv */
    const char *log_header; /* the CSV header line, newline included */
    const char *run;       /* every setting the trajectory depends on (resume refuses others) */
    int resume;            /* continue from OUT's checkpoint when there is one */
    int resume_needs_checkpoint; /* 1: resume without a checkpoint is an error; 0: a fresh start where the run's log shows one began */
    int save_every;        /* 0: only at `total` (and at stop_at / the time limit) */
    int eval_every;        /* 0: only at `total` (and before step 1 when eval_at_start) */
    int eval_at_start;     /* evaluate before step 1; a fresh run logs it as row 0 */
    long stop_at;          /* > 0: save and return after this step (a time slice) */
    long kill_after;       /* > 0: return after this many steps of this run, without saving (tests) */
    double time_limit_s;   /* > 0: save and return after the first step past this wall time */
    const char *progress;  /* label of the progress bar (NULL: none) */
    const tr_dist *dist;   /* NULL: one process; else rank 0 writes the log and the checkpoints */
} tr_loop_cfg;

typedef struct {
    long step0;            /* the step resumed from (0: fresh) */
    long step;             /* last step done */
    double loss_first, loss_last; /* of this run's first and last step */
    double train_ms;       /* Σ step_ms */
} tr_loop_result;

/* Run steps step0+1 .. total (or to stop_at / kill_after / the time limit). The caller owns
 * p->w (resume overwrites it); ctx is passed to every callback. Errors: a checkpoint that does
 * not match (run string, shapes), a diverged step (non-finite loss, gradient norm or weight; the
 * last checkpoint is kept), I/O. */
int sp_tr_loop_run(const tr_loop_cfg *c, const tr_loop_params *p, const tr_loop_ops *ops, void *ctx,
                tr_loop_result *res, sp_err *err);

#endif
