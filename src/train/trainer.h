/* trainer.h — `specula train`: a DSpark (vanilla / gated / rnn Markov head), DFlash or EAGLE-3
 * drafter for a llama, qwen3 or gemma4 target, from regenerated shards.
 *
 * The training loop is loop.h's (docs/TRAINING.md): AdamW on fp32 master weights (optim.h),
 * warmup + cosine to 0, clip 1.0; target embedding and LM head frozen and shared (never in the
 * checkpoint). Checkpoints (checkpoint.h) every save_every steps and at the end; resume
 * continues bit-identically: the batch of step s depends only on (seed, s), every kernel is
 * deterministic and thread-count invariant, and the optimizer file holds everything else. The held-out monitor evaluates a fixed set of full blocks: per-slot
 * analytic acceptance a_k = mean c*_k and τ = mean over blocks of 1 + Σ_j Π_{i≤j} c*_i.
 * CSV log: step,epoch,lr,loss,ce,l1,bce,grad_norm,tok_per_s,tau,a1..aB (tau and a_k only on
 * monitor steps), then kl under the tempered loss. */
#ifndef SPECULA_TRAIN_TRAINER_H
#define SPECULA_TRAIN_TRAINER_H

#include <stdint.h>

#include "train/dist.h"
#include "train/drafter_net.h"

typedef struct {
    tr_arch arch;
    const char *model_dir, *data_dir, *heldout_dir, *out_dir, *log_path; /* log: NULL = OUT/train_log.csv */
    long steps;          /* > 0: this many steps; else epochs over the anchors */
    int epochs;
    double lr;
    long warmup;         /* < 0: 4 % of the steps */
    int batch;           /* anchors per step */
    int anchors_per_seq; /* A: anchors drawn together from one sequence, sharing their context
                            rows (batch.h, model.h); 1 = every anchor its own context */
    int block, layers, markov_rank, ctx; /* EAGLE-3: block = training-time-test steps */
    int window;          /* EAGLE-3: positions per window (default 64) */
    int draft_vocab;     /* EAGLE-3: draft vocabulary (0: min(V, 32000)), the most frequent ids */
    tr_markov_type markov_head; /* DSpark Markov head type (default vanilla) */
    double gamma;
    int gamma_block;        /* 1: γ = the block size (mlx-bun's recipe), in place of gamma */
    double loss_weights[3]; /* α_ce, α_l1 (TV), α_conf when loss_weights_set (DSpark / DFlash) */
    int loss_weights_set;   /* 0: the kind's defaults (sp_tr_loss_alpha) */
    tr_loss_norm loss_norm; /* the loss normaliser: Σw (default) or the number of anchors */
    int n_temps;            /* > 0: the tempered loss (docs/TRAINING.md §7) at temps[], one drawn per anchor
                               (DSpark only); 0: the untempered loss */
    double temps[TR_MAX_TEMPS];
    double kl_weight;       /* α_kl of the tempered loss (needs n_temps > 0) */
    const char *init_dir;   /* non-NULL: start from this drafter's model.safetensors (same layout; DeepSpec
                               DSpark / DFlash) instead of the random init; a resume reads its checkpoint */
    int layout_mlxbun;      /* 1: mlx-bun's own modules and files (mlxbun_train.h): --arch dspark is DSpark v1,
                               dflash the faithful DFlash; block = γ, layers = nLayers, markov_rank = markovRank */
    int mb_dim, mb_heads, mb_ff_mult; /* mlx-bun: dDraft, nHeads, ffMult */
    uint64_t seed;
    int save_every;      /* 0: only at the end */
    int resume;
    int eval_every;      /* 0: only at the start and the end */
    int eval_blocks;
    double val_split;    /* > 0: this fraction of the shards' sequences (by seed) is the held-out set */
    int keep_best;       /* 1: the model at the best held-out τ so far in OUT/best/ (best.json: step, tau) */
    int patience;        /* > 0: stop (with a checkpoint) after this many evaluations without a better τ;
                            implies keep_best */
    int threads;
    int mask_id;         /* < 0: automatic */
    long stop_after;     /* > 0: return after this many steps without a final save (tests: a kill) */
    int progress;
    const tr_dist *dist; /* NULL: one process. With N ranks each takes a slice of every global
                            batch; gradients and the loss normaliser are summed over ranks; rank 0
                            writes the log and the checkpoints */
} tr_train_cfg;

/* defaults of docs/DSPARK.md §8 scaled to a CPU: lr 6e-4, warmup 4 %, batch 16, block 7, 5 layers,
 * Markov rank 256, context 512, γ 4, seed 42 */
tr_train_cfg sp_tr_train_defaults(void);
#define TR_ANCHORS_PER_SEQ_DEFAULT 4

typedef struct {
    long step;            /* last step done */
    double tau_first, tau_last;
    double a_last[64];
    double loss_first, loss_last;
    double tok_per_s;     /* block tokens (anchors × B) per second of training steps */
    double gflops;        /* matmul + attention GFLOP/s of the training steps (analytic count:
                             forward, backward, and the target LM head for the distributions) */
} tr_train_result;

/* "dspark", "dflash", "dflash-zlab" */
const char *sp_tr_arch_name(tr_arch a);

/* analytic FLOPs of one training step over NB anchors of context C whose groups have NR
 * context rows in all (NR = NB·C unshared; see gflops) */
double sp_tr_step_flops(const tr_dims *d, int NB, int C, int NR, int with_P);

/* The drafter sp_tr_train_run trains for `target` (c->model_dir) from c's arch, layers, block,
 * Markov rank / head and mask id, with m tapped layers taps[]: its dims as the inference loader
 * will read them back, and the config.json text of its checkpoint (*config_json malloc'd; the
 * caller frees it). Returns 0 / -1 (unsupported target or settings). */
int sp_tr_drafter_dims(const tr_train_cfg *c, const sp_model *target, int m, const int *taps, tr_dims *d,
                    char **config_json, sp_err *err);

/* The same for an EAGLE-3 drafter (eagle3_train.h): the SpecForge layer with the target's head
 * shape, c->block training-time-test steps, c->draft_vocab (0: min(V, 32000)), 3 taps; RoPE and
 * eps as the inference loader reads them back from the written config. */
int sp_tr_eagle3_dims(const tr_train_cfg *c, const sp_model *target, int m, const int *taps, tr_dims *d,
                   char **config_json, sp_err *err);

int sp_tr_train_run(const tr_train_cfg *c, tr_train_result *res, sp_err *err);

#endif
