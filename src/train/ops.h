/* ops.h — the forward/backward ops every training model is built from: the decoder block
 * (block_train.h), the DFlash / DSpark heads and losses (docs/DFLASH.md §5, docs/DSPARK.md), the
 * EAGLE-3 layer and the target LM.
 *
 * Each op exists twice with one source (ops_impl.h): tr_NAME in float for the trainer (GEMMs and
 * attention threaded on an sp_pool) and tr_NAME_f64 in double with naive loops, which the tests
 * use for central finite differences in double precision and as the reference the float path is
 * compared with. Backward passes ACCUMULATE into gradients (see ops_impl.h). */
#ifndef SPECULA_TRAIN_OPS_H
#define SPECULA_TRAIN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"

/* Threaded float GEMMs (row-major) used by the float ops and the trainer:
 *   sp_tr_gemm_nt:     C[M,N]  = A[M,K] · B[N,K]ᵀ   (sp_matmul: batch-invariant)
 *   sp_tr_gemm_nn_acc: C[M,N] += A[M,K] · B[K,N]
 *   sp_tr_gemm_tn_acc: C[M,N] += A[K,M]ᵀ · B[K,N] */
void sp_tr_gemm_nt(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N);
void sp_tr_gemm_nn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N);
void sp_tr_gemm_tn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N);

/* The shape and mode of one attention call: NB groups (sequences, or one DFlash block), each of
 * Tq queries over its own Tk keys. q / out [NB·Tq, NH, D], k / v [NB·Tk, KVH, D], att (saved
 * probabilities) [NB, NH, Tq, Tk], dp (backward scratch) [NB, KVH, Tk].
 *   causal = 1: query i sees keys lo(i)..i (Tq = Tk), lo(i) = i − window + 1 with a sliding
 *               window (window 0: lo = 0) — the target's causal / sliding attention;
 *   causal = 0: every key (the DFlash / DSpark block over [context ; block], EAGLE-3's gathered
 *               keys);
 * and in both modes only keys with kmask[b·Tk + j] = 1 (kmask NULL: all). */
typedef struct {
    int NB, Tq, Tk, NH, KVH, D;
    int causal, window;
    const uint8_t *kmask;
    double scale; /* on q·k, rounded to the op's precision */
} tr_attn_shape;

/* float: the trainer */
void sp_tr_linear_forward(sp_pool *pool, float *out, const float *in, const float *W, int T, int K, int N);
void sp_tr_linear_backward(sp_pool *pool, float *din, float *dW, const float *dout, const float *in, const float *W, int T,
                        int K, int N);
void sp_tr_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, int T, int n, double eps);
void sp_tr_rmsnorm_backward(float *din, float *dw, const float *dout, const float *in, const float *w, const float *rstd,
                         int T, int n);
void sp_tr_rope_forward(float *out, const float *in, int T, int nh, int D, const int *pos, const float *inv_freq);
void sp_tr_rope_backward(float *din, const float *dout, int T, int nh, int D, const int *pos, const float *inv_freq);
void sp_tr_attention_forward(sp_pool *pool, float *out, float *att, const float *q, const float *k, const float *v,
                          const tr_attn_shape *s);
void sp_tr_attention_backward(sp_pool *pool, float *dq, float *dk, float *dv, float *dp, const float *dout, const float *q,
                           const float *k, const float *v, const float *att, const tr_attn_shape *s);
void sp_tr_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void sp_tr_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
void sp_tr_geglu_forward(float *out, const float *gate, const float *up, size_t n);
void sp_tr_geglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
void sp_tr_softcap_forward(float *y, const float *x, size_t n, float c);
void sp_tr_softcap_backward(float *dx, const float *dy, const float *y, size_t n, float c);
void sp_tr_markov_forward(sp_pool *pool, float *bias, float *code, const int32_t *prev, const float *W1, const float *W2,
                       int T, int V, int r);
void sp_tr_markov_backward(sp_pool *pool, float *dW1, float *dW2, float *dcode, const float *dbias, const float *code,
                        const int32_t *prev, const float *W2, int T, int V, int r);
void sp_tr_gated_forward(sp_pool *pool, float *mix, float *gate, float *vec, const float *h, const float *code,
                      const float *Wg, const float *bg, int T, int H, int r);
void sp_tr_gated_backward(sp_pool *pool, float *dh, float *dcode, float *dWg, float *dbg, float *dpre, float *dvec,
                       const float *dmix, const float *vec, const float *gate, const float *code, const float *Wg,
                       int T, int H, int r);
void sp_tr_rnn_forward(sp_pool *pool, float *mix, float *act, float *z, const float *h, const float *code, const float *Wj,
                    const float *bj, int NB, int B, int H, int r);
void sp_tr_rnn_backward(sp_pool *pool, float *dh, float *dcode, float *dWj, float *dbj, float *dpre, float *dz, float *ds,
                     const float *dmix, const float *act, const float *z, const float *Wj, int NB, int B, int H, int r);
void sp_tr_gather_forward(float *out, const int32_t *idx, const float *W, int T, int n);
void sp_tr_gather_backward(float *dW, const float *dout, const int32_t *idx, int T, int n);
void sp_tr_conf_forward(float *logit, const float *h, const float *code, const float *w, const float *b, int T, int H,
                     int r);
void sp_tr_conf_backward(float *dh, float *dcode, float *dw, float *db, const float *dlogit, const float *h,
                      const float *code, const float *w, int T, int H, int r);
void sp_tr_lmhead_forward(sp_pool *pool, float *U, const float *h, const float *Wlm, int T, int H, int V);
void sp_tr_lmhead_backward(sp_pool *pool, float *dh, const float *dU, const float *Wlm, int T, int H, int V);
void sp_tr_softmax_rows(float *q, const float *Z, int T, int V);
double sp_tr_ce_forward(float *q, const float *Z, const int32_t *labels, const float *wt, int T, int V, double denom);
void sp_tr_ce_backward(float *dZ, const float *q, const int32_t *labels, const float *wt, int T, int V, double denom);
double sp_tr_spark_loss_forward(double *terms, float *q, float *cstar, const float *Z, const float *P,
                             const int32_t *labels, const float *conf, const float *wt, int T, int V,
                             const double *alpha, double denom);
void sp_tr_spark_loss_backward(float *dZ, float *dconf, const float *q, const float *cstar, const float *P,
                            const int32_t *labels, const float *conf, const float *wt, int T, int V,
                            const double *alpha, double denom);
double sp_tr_spark_loss_temp_forward(double *terms, float *q, float *qT, float *cstar, const float *Z, const float *P,
                                  const int32_t *labels, const float *conf, const float *wt, const float *tinv, int T,
                                  int V, const double *alpha, double denom);
void sp_tr_spark_loss_temp_backward(float *dZ, float *dconf, const float *q, const float *qT, const float *cstar,
                                 const float *P, const int32_t *labels, const float *conf, const float *wt,
                                 const float *tinv, int T, int V, const double *alpha, double denom);

/* double: the finite-difference reference (same arguments, double data) */
void sp_tr_linear_forward_f64(sp_pool *pool, double *out, const double *in, const double *W, int T, int K, int N);
void sp_tr_linear_backward_f64(sp_pool *pool, double *din, double *dW, const double *dout, const double *in,
                            const double *W, int T, int K, int N);
void sp_tr_rmsnorm_forward_f64(double *out, double *rstd, const double *in, const double *w, int T, int n, double eps);
void sp_tr_rmsnorm_backward_f64(double *din, double *dw, const double *dout, const double *in, const double *w,
                             const double *rstd, int T, int n);
void sp_tr_rope_forward_f64(double *out, const double *in, int T, int nh, int D, const int *pos, const float *inv_freq);
void sp_tr_rope_backward_f64(double *din, const double *dout, int T, int nh, int D, const int *pos, const float *inv_freq);
void sp_tr_attention_forward_f64(sp_pool *pool, double *out, double *att, const double *q, const double *k,
                              const double *v, const tr_attn_shape *s);
void sp_tr_attention_backward_f64(sp_pool *pool, double *dq, double *dk, double *dv, double *dp, const double *dout,
                               const double *q, const double *k, const double *v, const double *att,
                               const tr_attn_shape *s);
void sp_tr_swiglu_forward_f64(double *out, const double *gate, const double *up, size_t n);
void sp_tr_swiglu_backward_f64(double *dgate, double *dup, const double *dout, const double *gate, const double *up,
                            size_t n);
void sp_tr_geglu_forward_f64(double *out, const double *gate, const double *up, size_t n);
void sp_tr_geglu_backward_f64(double *dgate, double *dup, const double *dout, const double *gate, const double *up,
                           size_t n);
void sp_tr_softcap_forward_f64(double *y, const double *x, size_t n, double c);
void sp_tr_softcap_backward_f64(double *dx, const double *dy, const double *y, size_t n, double c);
void sp_tr_markov_forward_f64(sp_pool *pool, double *bias, double *code, const int32_t *prev, const double *W1,
                           const double *W2, int T, int V, int r);
void sp_tr_markov_backward_f64(sp_pool *pool, double *dW1, double *dW2, double *dcode, const double *dbias,
                            const double *code, const int32_t *prev, const double *W2, int T, int V, int r);
void sp_tr_gated_forward_f64(sp_pool *pool, double *mix, double *gate, double *vec, const double *h, const double *code,
                          const double *Wg, const double *bg, int T, int H, int r);
void sp_tr_gated_backward_f64(sp_pool *pool, double *dh, double *dcode, double *dWg, double *dbg, double *dpre,
                           double *dvec, const double *dmix, const double *vec, const double *gate, const double *code,
                           const double *Wg, int T, int H, int r);
void sp_tr_rnn_forward_f64(sp_pool *pool, double *mix, double *act, double *z, const double *h, const double *code,
                        const double *Wj, const double *bj, int NB, int B, int H, int r);
void sp_tr_rnn_backward_f64(sp_pool *pool, double *dh, double *dcode, double *dWj, double *dbj, double *dpre, double *dz,
                         double *ds, const double *dmix, const double *act, const double *z, const double *Wj, int NB,
                         int B, int H, int r);
void sp_tr_gather_forward_f64(double *out, const int32_t *idx, const double *W, int T, int n);
void sp_tr_gather_backward_f64(double *dW, const double *dout, const int32_t *idx, int T, int n);
void sp_tr_conf_forward_f64(double *logit, const double *h, const double *code, const double *w, const double *b, int T,
                         int H, int r);
void sp_tr_conf_backward_f64(double *dh, double *dcode, double *dw, double *db, const double *dlogit, const double *h,
                          const double *code, const double *w, int T, int H, int r);
void sp_tr_lmhead_forward_f64(sp_pool *pool, double *U, const double *h, const double *Wlm, int T, int H, int V);
void sp_tr_lmhead_backward_f64(sp_pool *pool, double *dh, const double *dU, const double *Wlm, int T, int H, int V);
void sp_tr_softmax_rows_f64(double *q, const double *Z, int T, int V);
double sp_tr_ce_forward_f64(double *q, const double *Z, const int32_t *labels, const double *wt, int T, int V,
                         double denom);
void sp_tr_ce_backward_f64(double *dZ, const double *q, const int32_t *labels, const double *wt, int T, int V,
                        double denom);
double sp_tr_spark_loss_forward_f64(double *terms, double *q, double *cstar, const double *Z, const double *P,
                                 const int32_t *labels, const double *conf, const double *wt, int T, int V,
                                 const double *alpha, double denom);
void sp_tr_spark_loss_backward_f64(double *dZ, double *dconf, const double *q, const double *cstar, const double *P,
                                const int32_t *labels, const double *conf, const double *wt, int T, int V,
                                const double *alpha, double denom);

double sp_tr_spark_loss_temp_forward_f64(double *terms, double *q, double *qT, double *cstar, const double *Z,
                                      const double *P, const int32_t *labels, const double *conf, const double *wt,
                                      const double *tinv, int T, int V, const double *alpha, double denom);
void sp_tr_spark_loss_temp_backward_f64(double *dZ, double *dconf, const double *q, const double *qT,
                                     const double *cstar, const double *P, const int32_t *labels, const double *conf,
                                     const double *wt, const double *tinv, int T, int V, const double *alpha,
                                     double denom);

#endif
