/* mlxbun_net.h — mlx-bun's DSpark v1 and faithful DFlash modules in training
 * (docs/MLX-BUN-DRAFTERS.md, "The computation"): their parameters in one flat array, the forward
 * over a batch of anchor blocks with mlx-bun's loss, and the backward.
 *
 * The backbone layer is the shared training decoder layer (block_train.h) described as mlx-bun's:
 * pre-norm attention with no mask and no rotary embedding (every position 0, which makes the
 * rotation the identity), head size d / nHeads, scale (d / nHeads)^−½, a gelu_tanh gated FFN,
 * RMSNorm without offset, residuals, no q / k norms. Then out_norm → out_proj (to the target's
 * width) → the target's LM head (frozen, soft-capped like the target) gives the base logits U,
 * the Markov head adds W2·W1[prev], and the confidence head reads [out_norm(h) ; W1[prev]].
 *
 *   v1:       rows per element γ+1: ctx_proj(h_ctx) + pos_emb[0], tok_proj(e_anchor) + pos_emb[1],
 *             mask_emb[j] + pos_emb[j+2]; the context row is dropped before out_norm.
 *   faithful: H_ctx = RMSNorm(W_c · taps, ctx_norm) for every context row; γ block rows
 *             tok_proj(e_anchor) + block_pos[0], mask_emb[j] + block_pos[j+1]; in each layer the
 *             context rows pass through that layer's attn_norm and give keys / values only
 *             ([H_ctx ; block], context first, padding rows masked); the FFN runs on the block.
 *
 * The parameter array holds every tensor in mlx-bun's param_names order, each in the layout the
 * ops read: linear maps [out, in] (the file's [in, out] transposed), markov.w2 [V, r], the
 * embedding tables and markov.w1 as stored, conf.w as its d + r values. Export and import
 * transpose (mlxbun_train.c).
 *
 * Like the ops, the forward / backward exist in float (sp_tr_mb_*) and double (sp_tr_mb_*_f64, the
 * same source: mlxbun_net_impl.h) — the double twin is what the finite-difference test
 * differentiates. Backward ACCUMULATES into the gradient array. */
#ifndef SPECULA_TRAIN_MLXBUN_NET_H
#define SPECULA_TRAIN_MLXBUN_NET_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "train/drafter_net.h"

typedef struct {
    int faithful;           /* 0: v1, 1: the faithful DFlash module */
    int d, NH, Dh, I, L;    /* draft width dDraft, heads, head size d/NH, FFN width ffMult·d, layers */
    int Ht, V, m, G, r;     /* target hidden size, vocabulary, taps in F (v1 reads the last), block size γ, Markov rank */
    double eps;             /* the target's RMSNorm epsilon (dims.eps) */
    double softcap;         /* the target LM head's final soft-cap (0: none) */
    double alpha[3];        /* loss weights α_ce, α_tv, α_conf */
} tr_mb_dims;

/* offsets (in values) of every tensor in the parameter array */
typedef struct {
    size_t attn_norm[TR_MAX_LAYERS], q[TR_MAX_LAYERS], k[TR_MAX_LAYERS], v[TR_MAX_LAYERS], o[TR_MAX_LAYERS];
    size_t ff_norm[TR_MAX_LAYERS], gate[TR_MAX_LAYERS], up[TR_MAX_LAYERS], down[TR_MAX_LAYERS];
    size_t ctx;      /* v1: ctx_proj [d, Ht]; faithful: W_c [d, m·Ht] */
    size_t ctx_norm; /* faithful: [d] */
    size_t tok, mask, pos, out_norm, out_proj, w1, w2, cw, cb;
    size_t n;        /* values in all */
} tr_mb_off;

/* One batch as the network reads it (float or double data):
 *   F [NR, m·Ht] context taps; element e's window is the C rows from ctx_row[e], kmask [NB, C+γ]
 *   (1 = a real row; the γ block slots after the C window slots); v1 reads the last H columns
 *   (the final norm) of its last window row (zeros when that row is padding);
 *   anchor [NB, Ht] the anchors' raw target embeddings; prev / labels / wt / P [NB·γ(, V)] per
 *   slot; Wlm [V, Ht] the target LM head; cstar_target: NULL, or fixed BCE targets [NB·γ]. */
#define TR_MB_IN(T)                                                                              \
    int NB, C, NR;                                                                               \
    const T *F;                                                                                  \
    const int32_t *ctx_row;                                                                      \
    const uint8_t *kmask;                                                                        \
    const T *anchor;                                                                             \
    const int32_t *prev, *labels;                                                                \
    const T *wt, *P, *Wlm, *cstar_target;
typedef struct tr_mb_in { TR_MB_IN(float) } tr_mb_in;
typedef struct tr_mb_in_f64 { TR_MB_IN(double) } tr_mb_in_f64;

/* Offsets of d's tensors (mlx-bun's param_names order, contiguous) into o, and when p is not
 * NULL the named table with the array's shapes into p[cap]. Returns the tensor count, -1 when
 * d is out of range or cap is short. */
int sp_tr_mb_layout(const tr_mb_dims *d, tr_mb_off *o, tr_param *p, int cap);
/* 1 when the file stores p as the transpose of the array's [out, in] (linear maps, markov.w2) */
int sp_tr_mb_param_transposed(const tr_param *p);

/* Saved activations and scratch for batches of at most NB elements, C context slots each, NR
 * context rows. */
typedef struct tr_mb_acts tr_mb_acts;
typedef struct tr_mb_acts_f64 tr_mb_acts_f64;
tr_mb_acts *sp_tr_mb_acts_create(const tr_mb_dims *d, int NB, int C, int NR, sp_err *err);
void sp_tr_mb_acts_free(tr_mb_acts *a);
tr_mb_acts_f64 *sp_tr_mb_acts_create_f64(const tr_mb_dims *d, int NB, int C, int NR, sp_err *err);
void sp_tr_mb_acts_free_f64(tr_mb_acts_f64 *a);

/* The forward and the loss (docs/MLX-BUN-DRAFTERS.md, "Training recipe"): st as sp_tr_forward's,
 * cstar [NB·γ] = clamp(1 − ½‖p_d − p_t‖₁, 0, 1) when not NULL. denom: the loss normaliser. */
void sp_tr_mb_forward(sp_pool *pool, const tr_mb_dims *d, const tr_mb_off *o, const float *w, tr_mb_acts *a,
                      const tr_mb_in *in, double denom, tr_stats *st, float *cstar);
/* Backward of the last forward; ACCUMULATES into grad (the parameter layout). */
void sp_tr_mb_backward(sp_pool *pool, const tr_mb_dims *d, const tr_mb_off *o, const float *w, tr_mb_acts *a,
                       const tr_mb_in *in, double denom, float *grad);
void sp_tr_mb_forward_f64(sp_pool *pool, const tr_mb_dims *d, const tr_mb_off *o, const double *w,
                          tr_mb_acts_f64 *a, const tr_mb_in_f64 *in, double denom, tr_stats *st, double *cstar);
void sp_tr_mb_backward_f64(sp_pool *pool, const tr_mb_dims *d, const tr_mb_off *o, const double *w,
                           tr_mb_acts_f64 *a, const tr_mb_in_f64 *in, double denom, double *grad);

#endif
