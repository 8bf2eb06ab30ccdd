/* lm_train.h — the trainer of a target LM (`specula train-lm`): text files →
 * tokens → packed sequences → sp_lm_forward / sp_lm_backward → AdamW, with a warmup + cosine
 * schedule, global-norm gradient clipping, atomic checkpoints with optimizer state,
 * bit-identical resume, a CSV log, held-out perplexity, and the export of the trained model
 * in the Hugging Face layout the inference loader reads (config.json, model.safetensors,
 * tokenizer.json).
 *
 * Data: every file is encoded (no BOS) and followed by EOS; the files are concatenated into
 * one stream. The b-th sequence of step s starts at an offset drawn from the counter RNG
 * (seed, s, b), so a batch depends only on (seed, step): that and the saved weights and
 * moments make a resumed run identical to an uninterrupted one. A sequence is
 * [BOS, x_o .. x_{o+T−2}] with labels x_o .. x_{o+T−1} (every position scored).
 * Held-out files are cut into consecutive windows the same way, evaluated in order.
 *
 * Output directory, a checkpoint of the training loop (loop.h, checkpoint.h), refreshed at
 * every save in this order:
 *   config.json, model.safetensors, tokenizer.json     the model (the export dtype)
 *   trainer_state.json                                 step and settings (informative)
 *   optimizer.safetensors                              f32 master weights and AdamW moments,
 *                                                      the step: what --resume reads (written last)
 *   train_log.csv                                      step,loss,lr,grad_norm,tokens_per_s,eval_loss,eval_ppl */
#ifndef SPECULA_TRAIN_LM_TRAIN_H
#define SPECULA_TRAIN_LM_TRAIN_H

#include <stdint.h>

#include "train/lm.h"

typedef struct {
    const char *config_path;    /* HF config.json (gemma4, text_config) — copied to the output */
    const char *tokenizer_path; /* tokenizer.json (e.g. from `specula train-tokenizer`) */
    const char *const *data;    /* training text files */
    int n_data;
    const char *const *eval;    /* held-out text files (may be 0) */
    int n_eval;
    const char *out_dir;
    int steps, batch, seq;      /* optimizer steps, sequences per step, tokens per sequence */
    int warmup;                 /* linear warmup steps (< 0: 4 % of the steps); then cosine to
                                   min_lr_frac·lr at `steps` (optim.h's schedule) */
    double lr, min_lr_frac, weight_decay, beta1, beta2, adam_eps, clip;
    uint64_t seed;
    int save_every;             /* 0: only at the end */
    int eval_every;             /* 0: only at the end */
    int eval_seqs;              /* held-out sequences per evaluation (0: 64) */
    int resume;                 /* continue from out_dir/optimizer.safetensors (an error when absent) */
    int stop_after;             /* > 0: stop (after saving) once this step is done — tests, time slices */
    double time_limit_s;        /* > 0: stop (after saving) at the first step past this wall time */
    sp_dtype dtype;             /* exported weights: SP_DT_BF16 or SP_DT_F32 */
    int n_threads;              /* <= 0: all cores */
    int quiet;                  /* 1: no progress bar */
} lm_train_opts;

/* Defaults for everything but the paths. */
void sp_lm_train_defaults(lm_train_opts *o);

typedef struct {
    int step;                   /* last completed step */
    double first_loss, last_loss;
    double eval_loss, eval_ppl; /* last evaluation (0 when no held-out data) */
    double tokens_per_s;        /* training throughput of this run */
    size_t n_params;
    int64_t train_tokens, eval_tokens;
} lm_train_result;

int sp_lm_train_run(const lm_train_opts *o, lm_train_result *res, sp_err *err);

/* the warm-up steps of o: o->warmup, or when negative 4 % of the steps (sp_tr_warmup_default) */
long sp_lm_warmup_steps(const lm_train_opts *o);

/* Write dir/config.json (config_text verbatim), dir/model.safetensors (weights w in dtype,
 * HF names) and, when tokenizer_path is given, dir/tokenizer.json. Each file atomically. */
int sp_lm_export(const char *dir, const lm_layout *lay, const float *w, const char *config_text, sp_dtype dtype,
              const char *tokenizer_path, sp_err *err);

#endif
