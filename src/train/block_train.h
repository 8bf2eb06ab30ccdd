/* block_train.h — one decoder layer in training: the forward / backward twin of sp_block_forward
 * (model/block.h), executing the same description (sp_block_desc: which norms, q/k norms, v_norm,
 * V from its own projection or the raw K, activation, attention scale, epsilon) over rows of
 * the residual stream, with every step an op of ops.h. Used by the DFlash / DSpark drafter
 * (drafter_net.c) and the Gemma-4 target (lm_impl.h); docs/TRANSFORMER.md, "Training".
 *
 *   xn = norm_attn(x);  kvin = xn (or the caller's K/V rows built from xn: io.kv_rows)
 *   q = rope(q_norm(xn·Wqᵀ)),  k = rope(k_norm(kvin·Wkᵀ)),  v = v_norm(kvin·Wvᵀ or the raw K)
 *   x1 = x + [norm_attn_post](attn(q, k, v) · Woᵀ)
 *   y  = (x1 + [norm_ffn_post](down(act(gate(n)) ⊙ up(n)))) · layer_scalar,  n = norm_ffn(x1)
 *
 * Attention is sp_tr_attention_forward with io.shape (causal / sliding / non-causal with a key mask),
 * or the caller's io.attn_forward when the keys of a query are not one contiguous run (the
 * DFlash / DSpark block's shared context rows). The backward ACCUMULATES into the gradients it is
 * given (NULL: frozen) and turns dL/dy into dL/dx in place. layer_scalar is frozen.
 *
 * Like the ops, everything here exists in float (tr_block_*) and double (tr_block_*_f64,
 * block_train_f64.c: the same source renamed by ops_f64_names.h), the double twin being the
 * finite-difference reference of the LM test. Not supported: per-layer inputs (ple_dim), layers
 * without their own K/V (kv_proj 0), interleaved Q/K rows, the [embedding ; state] attention input
 * (SP_ATTN_IN_EMBED_STATE: EAGLE-3's trainer runs its own attention half and this MLP half). */
#ifndef SPECULA_TRAIN_BLOCK_TRAIN_H
#define SPECULA_TRAIN_BLOCK_TRAIN_H

#include "model/block.h"
#include "train/ops.h"

/* A layer's parameters in the block's order (NULL where the description has none; in a gradient
 * set, NULL = not trained): attn_norm [H]; wq [NH·D, H]; wk, wv [KVH·D, H]; wo [H, NH·D];
 * q_norm, k_norm [D]; attn_post_norm, ffn_norm, ffn_post_norm [H]; w_gate, w_up [I, H];
 * w_down [H, I]. */
#define TR_BLOCK_PARAMS(T)                                                                       \
    T *attn_norm, *wq, *wk, *wv, *wo, *q_norm, *k_norm, *attn_post_norm, *ffn_norm, *ffn_post_norm; \
    T *w_gate, *w_up, *w_down;

/* What one layer saves for its backward, R query rows and S K/V rows (QD = NH·D, KD = KVH·D):
 * xn [R,H], rstd_in [R]; kvin [S,H] (io.kv_rows only); qp, q [R,QD], rstd_q [R·NH]; kp, k [S,KD],
 * rstd_k [S·KVH]; vp [S,KD] (v_proj with v_norm), v [S,KD], rstd_v [S·KVH]; att (as the attention
 * lays it out: tr_attn_shape); ao [R,QD]; o [R,H], rstd_o [R]; x1 [R,H]; xn2 [R,H], rstd_ffn [R];
 * g, u, gu [R,I]; dn [R,H], rstd_dn [R]. */
#define TR_BLOCK_ACTS(T)                                                                         \
    T *xn, *rstd_in, *kvin, *qp, *rstd_q, *q, *kp, *rstd_k, *k, *vp, *rstd_v, *v, *att, *ao, *o, *rstd_o; \
    T *x1, *xn2, *rstd_ffn, *g, *u, *gu, *dn, *rstd_dn;

/* Backward scratch: dh, dxn [R,H]; dgu, dg, du [R,I]; dao, dq, dq2 [R,QD]; dk, dk2, dv, dv2 [S,KD];
 * dkvin [S,H] (io.kv_rows only); dp the attention backward's (tr_attn_shape; unused with
 * io.attn_backward). */
#define TR_BLOCK_SCRATCH(T) T *dh, *dxn, *dgu, *dg, *du, *dao, *dq, *dq2, *dk, *dk2, *dv, *dv2, *dkvin, *dp;

/* The rows of one call: R query rows at RoPE positions qpos, S K/V rows at kpos. Without
 * kv_rows, the K/V rows are the query rows (S = R, kpos = qpos). ctx is passed to the hooks:
 *   kv_rows(ctx, kvin, xn)              build the S K/V input rows from the normed rows xn [R,H]
 *   kv_rows_backward(ctx, dxn, dkvin)   add the part of dkvin that came from xn into dxn
 *   attn_forward / attn_backward        attention in place of tr_attention_* with shape */
#define TR_BLOCK_IO(T)                                                                           \
    int R, S;                                                                                    \
    const int *qpos, *kpos;                                                                      \
    tr_attn_shape shape;                                                                         \
    void *ctx;                                                                                   \
    void (*kv_rows)(void *ctx, T *kvin, const T *xn);                                            \
    void (*kv_rows_backward)(void *ctx, T *dxn, const T *dkvin);                                 \
    void (*attn_forward)(void *ctx, sp_pool *pool, T *ao, T *att, const T *q, const T *k, const T *v); \
    void (*attn_backward)(void *ctx, sp_pool *pool, T *dq, T *dk, T *dv, const T *dao, const T *q, const T *k, \
                          const T *v, const T *att);

/* float: the trainer */
typedef struct {
    TR_BLOCK_PARAMS(const float)
    float layer_scalar;     /* 1 when the architecture has none */
    const float *inv_freq;  /* [D/2] RoPE frequencies of the layer's type */
    const float *ones;      /* [D] all ones: the weight of the weightless v_norm */
} tr_block_w;
typedef struct { TR_BLOCK_PARAMS(float) } tr_block_g;
typedef struct { TR_BLOCK_ACTS(float) } tr_block_acts;
typedef struct { TR_BLOCK_SCRATCH(float) } tr_block_scratch;
typedef struct { TR_BLOCK_IO(float) } tr_block_io;

/* y [R,H] = the layer on x [R,H] (x is kept: backward reads it). */
void sp_tr_block_forward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_io *io,
                      const float *x, float *y, const tr_block_acts *a);
/* dx [R,H]: dL/dy on entry, dL/dx on return. Gradients accumulate into g. */
void sp_tr_block_backward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_g *g,
                       const tr_block_io *io, const float *x, const tr_block_acts *a, const tr_block_scratch *s,
                       float *dx);
/* The two halves sp_tr_block_forward / backward run, for a layer whose attention half is its own
 * (EAGLE-3): the attention sublayer x → a->x1, and the MLP sublayer x1 [R,H] → y (it reads
 * a->xn2 … a->rstd_dn, and w / g's ffn_norm, ffn_post_norm, w_gate, w_up, w_down, layer_scalar).
 * The backwards turn dL/dy into dL/dx1 and dL/dx1 into dL/dx, in place in dx. */
void sp_tr_block_attn_forward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_io *io,
                           const float *x, const tr_block_acts *a);
void sp_tr_block_mlp_forward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, int R, const float *x1, float *y,
                          const tr_block_acts *a);
void sp_tr_block_attn_backward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_g *g,
                            const tr_block_io *io, const float *x, const tr_block_acts *a, const tr_block_scratch *s,
                            float *dx);
void sp_tr_block_mlp_backward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_g *g, int R,
                           const float *x1, const tr_block_acts *a, const tr_block_scratch *s, float *dx);

/* double: the finite-difference reference */
typedef struct {
    TR_BLOCK_PARAMS(const double)
    double layer_scalar;
    const float *inv_freq;
    const double *ones;
} tr_block_w_f64;
typedef struct { TR_BLOCK_PARAMS(double) } tr_block_g_f64;
typedef struct { TR_BLOCK_ACTS(double) } tr_block_acts_f64;
typedef struct { TR_BLOCK_SCRATCH(double) } tr_block_scratch_f64;
typedef struct { TR_BLOCK_IO(double) } tr_block_io_f64;

void sp_tr_block_forward_f64(sp_pool *pool, const sp_block_desc *d, const tr_block_w_f64 *w, const tr_block_io_f64 *io,
                          const double *x, double *y, const tr_block_acts_f64 *a);
void sp_tr_block_backward_f64(sp_pool *pool, const sp_block_desc *d, const tr_block_w_f64 *w, const tr_block_g_f64 *g,
                           const tr_block_io_f64 *io, const double *x, const tr_block_acts_f64 *a,
                           const tr_block_scratch_f64 *s, double *dx);
void sp_tr_block_attn_forward_f64(sp_pool *pool, const sp_block_desc *d, const tr_block_w_f64 *w,
                               const tr_block_io_f64 *io, const double *x, const tr_block_acts_f64 *a);
void sp_tr_block_mlp_forward_f64(sp_pool *pool, const sp_block_desc *d, const tr_block_w_f64 *w, int R, const double *x1,
                              double *y, const tr_block_acts_f64 *a);
void sp_tr_block_attn_backward_f64(sp_pool *pool, const sp_block_desc *d, const tr_block_w_f64 *w,
                                const tr_block_g_f64 *g, const tr_block_io_f64 *io, const double *x,
                                const tr_block_acts_f64 *a, const tr_block_scratch_f64 *s, double *dx);
void sp_tr_block_mlp_backward_f64(sp_pool *pool, const sp_block_desc *d, const tr_block_w_f64 *w, const tr_block_g_f64 *g,
                               int R, const double *x1, const tr_block_acts_f64 *a, const tr_block_scratch_f64 *s,
                               double *dx);

#endif
