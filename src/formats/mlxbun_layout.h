/* mlxbun_layout.h — mlx-bun's DSpark v1 / faithful DFlash checkpoint layout
 * (docs/MLX-BUN-DRAFTERS.md): the config, the tensor list in canonical (param_names) order with
 * each tensor's file shape ([in, out] matrices) and initialisation, mlx-bun's seeded random stream,
 * and the dspark.json text. Used by `new-drafter --layout mlx-bun` (newdrafter_mlxbun.c) and by
 * `train --layout mlx-bun` (src/train/mlxbun_train.c), so both write the same files. */
#ifndef SPECULA_FORMATS_MLXBUN_LAYOUT_H
#define SPECULA_FORMATS_MLXBUN_LAYOUT_H

#include <stdint.h>

#include "../core/core.h"

#define SP_MLXBUN_MAX_TAPS 16
#define SP_MLXBUN_MAX_LAYERS 64
#define SP_MLXBUN_MAX_TENSORS (9 * SP_MLXBUN_MAX_LAYERS + 16)

/* dspark.json's config (mlx-bun's names in the comments) */
typedef struct {
    int gamma, d, layers, heads, rank, ff; /* gamma, dDraft, nLayers, nHeads, markovRank, ffMult */
    int taps[SP_MLXBUN_MAX_TAPS], n_taps;  /* tapLayers (faithful only) */
} sp_mlxbun_cfg;

/* one tensor of the file: name, shape as stored, init 'n' N(0, 0.02), '1' ones, '0' zeros */
typedef struct {
    char name[32];
    int ndim;
    int64_t shape[2];
    char init;
} sp_mlxbun_tensor;

/* The tensors of the v1 (faithful 0) or faithful module for a target of hidden size H and
 * vocabulary V, in param_names order, into t[cap]. Returns the count, or -1 when cap is short. */
int sp_mlxbun_tensors(const sp_mlxbun_cfg *c, int faithful, int64_t H, int64_t V, sp_mlxbun_tensor *t, int cap);

/* mlx-bun's initial values: dst[i] (t[i]'s element count) from one xorshift32 stream seeded with
 * seed (0: 0x9e3779b9), Box–Muller pairs (cosine, then sine) per tensor in list order. */
void sp_mlxbun_init_values(const sp_mlxbun_tensor *t, int n, uint64_t seed, float *const *dst);

/* dspark.json (kind, variant for the faithful module, version, target_id, config, dims,
 * param_names from t[n]); malloc'd text, NULL when out of memory. */
char *sp_mlxbun_json(const sp_mlxbun_cfg *c, int faithful, const char *target_id, int H, int V, double eps,
                     const sp_mlxbun_tensor *t, int n);

#endif
