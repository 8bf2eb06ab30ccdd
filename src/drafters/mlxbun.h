/* mlxbun.h — mlx-bun's own DSpark drafters (docs/MLX-BUN-DRAFTERS.md): a directory with
 * dspark.json and a float32 model.safetensors whose matrices are stored [in, out].
 *
 *   v1 (no "variant"): context = the target's final post-norm hidden of the last verified
 *       position (the row that predicted the pending token), one row of the backbone;
 *   faithful ("variant" "dspark" / "dflash"): context = every committed position seen through
 *       the tapped target layers (tapLayers; the sentinel num_layers is the final norm), whose
 *       per-layer K / V are cached across rounds (a layer never updates the context rows).
 *
 * Both draft left to right over U_k + B_k (the target's LM head on the block, plus the Markov
 * head, or the rnn head when config.seqHead is "rnn"), with the confidence head cutting the
 * proposal at the first c_k below the threshold (k ≥ 2: the first draft is always offered), the
 * threshold being --conf-threshold, else config.sts.thresholds[k]. Sampled drafts report q. */
#ifndef SPECULA_MLXBUN_H
#define SPECULA_MLXBUN_H

#include "decode/drafter.h"
#include "decode/spec.h"
#include "sample/sample.h"

#define SP_MLXBUN_MAX_TAPS 16

/* dspark.json, as read and checked (against the target when one is given) */
typedef struct {
    int faithful;       /* 0: v1, 1: variant "dspark" / "dflash" */
    int gamma, d, n_layers, n_heads, rank, ff_mult;
    int n_taps, taps[SP_MLXBUN_MAX_TAPS]; /* faithful only */
    int rnn;            /* config.seqHead "rnn" */
    int n_sts;          /* config.sts.thresholds: one per block position (0: none) */
    float sts[SP_SPEC_MAX_G];
    int hidden, vocab;  /* dims.hiddenSize, dims.vocabSize */
    float eps;          /* dims.eps */
} sp_mlxbun_cfg;

/* 1 when dir holds a dspark.json (and no config.json): mlx-bun's layout */
int sp_mlxbun_dir(const char *dir);
/* Read dir/dspark.json into *c; with a target, check dims and taps against it. 0 or -1 with err
 * naming the file and the key. */
int sp_mlxbun_cfg_read(const char *dir, const sp_model *target, sp_mlxbun_cfg *c, sp_err *err);
/* The tensor names of a config, in mlx-bun's canonical order (param_names); returns the count
 * (at most cap; names written into buf, each < 32 bytes). */
int sp_mlxbun_param_names(const sp_mlxbun_cfg *c, char (*buf)[32], int cap);

/* Load dir for target (borrowed). max_drafts caps gamma (0: gamma); conf_threshold 0: the sts
 * thresholds if any. Every missing / mis-shaped / non-f32 tensor is an error naming it. */
sp_drafter *sp_drafter_mlxbun(const char *dir, sp_model *target, const sp_sample_params *sample, int max_drafts,
                              float conf_threshold, sp_err *err);

/* For tests: the last proposal's base logits U [gamma, V] (the target's LM head on the block),
 * the drafted rows' logits Z [n, V] (Markov / rnn head added, before penalties and sampling), the
 * confidences c [n], n (0 after a commit), and the config. -1 if d is not this kind. */
int sp_mlxbun_last(const sp_drafter *d, const float **U, const float **Z, const float **c, int *n,
                   const sp_mlxbun_cfg **cfg);

#endif
