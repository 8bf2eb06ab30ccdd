/* mlxbun_train.h — `specula train --layout mlx-bun`: what the drafter trainer (trainer.c) needs to
 * train mlx-bun's DSpark v1 (--arch dspark) or faithful DFlash (--arch dflash) module
 * (docs/MLX-BUN-DRAFTERS.md): the module sized from the settings and the shards' taps, mlx-bun's
 * initialisation, the batch view the network reads, and the checkpoint in mlx-bun's own files
 * (dspark.json + float32 model.safetensors, [in, out] matrices, param_names order). */
#ifndef SPECULA_TRAIN_MLXBUN_TRAIN_H
#define SPECULA_TRAIN_MLXBUN_TRAIN_H

#include "formats/mlxbun_layout.h"
#include "kernels/kernels.h"
#include "train/mlxbun_net.h"
#include "train/trainer.h"

typedef struct {
    tr_mb_dims d;
    tr_mb_off o;
    sp_mlxbun_cfg cfg;      /* dspark.json's config */
    char target_id[256];    /* the target directory's last component */
    const sp_mat *embed;    /* the target's raw embedding table [V, Ht] */
    int C;                  /* context slots per element: v1 1, faithful the trainer's --ctx */
    tr_mb_acts *acts;
    float *anchor;          /* [cap, Ht] raw anchor embeddings of the batch */
    int cap;
} tr_mb_run;

/* mlx-bun's recipe and sizes as the settings' defaults (`train --layout mlx-bun`): block γ 5,
 * nLayers 2 (v1) or 5 (faithful), dDraft 1024, 8 heads, ffMult 2, Markov rank 256, γ decay =
 * the block size, the loss averaged over anchors. arch: TR_ARCH_DSPARK (v1) or TR_ARCH_DFLASH. */
void sp_tr_mlxbun_defaults(tr_train_cfg *c, tr_arch arch);

/* Size the module for `target` from c and the shards' taps (m, taps; v1 needs the last one to
 * be the final norm, num_layers), lay out m's parameter table, initialise it as mlx-bun does
 * (seed c->seed), and allocate the activations for cap elements. Returns 0 / -1. */
int sp_tr_mb_setup(tr_mb_run *mb, tr_model *m, const tr_train_cfg *c, sp_model *target, int n_taps,
                   const int *taps, int cap, sp_err *err);
void sp_tr_mb_free(tr_mb_run *mb);

/* the network's view of a filled batch (anchors' raw embeddings looked up from b->prev) */
tr_mb_in sp_tr_mb_view(tr_mb_run *mb, const tr_batch *b, const float *Wlm);

/* DIR/dspark.json and DIR/model.safetensors (float32, mlx-bun's names and shapes). */
int sp_tr_mb_export(const char *dir, const tr_model *m, const tr_mb_run *mb, sp_err *err);

/* analytic FLOPs of one training step (forward, backward, the LM head for the targets) */
double sp_tr_mb_step_flops(const tr_mb_dims *d, int NB, int C, int NR);

#endif
