/* ops_decl.h — prototypes of the ops in ops_impl.h for one scalar type; included by ops.h
 * once for float (tr_*) and once for double (tr_*_f64). See ops_impl.h for what each does. */
void OP(linear_forward)(sp_pool *pool, real *out, const real *in, const real *W, int T, int K, int N);
void OP(linear_backward)(sp_pool *pool, real *din, real *dW, const real *dout, const real *in,
                         const real *W, int T, int K, int N);
void OP(rmsnorm_forward)(real *out, real *rstd, const real *in, const real *w, int T, int n, double eps);
void OP(rmsnorm_backward)(real *din, real *dw, const real *dout, const real *in, const real *w,
                          const real *rstd, int T, int n);
void OP(rope_forward)(real *out, const real *in, int T, int nh, int D, const int *pos, const float *inv_freq);
void OP(rope_backward)(real *din, const real *dout, int T, int nh, int D, const int *pos, const float *inv_freq);
void OP(attention_forward)(real *out, real *att, const real *q, const real *k, const real *v,
                           const uint8_t *kmask, int Tq, int Tk, int NH, int KVH, int D, real scale);
void OP(attention_backward)(real *dq, real *dk, real *dv, real *dp, const real *dout, const real *q,
                            const real *k, const real *v, const real *att, const uint8_t *kmask,
                            int Tq, int Tk, int NH, int KVH, int D, real scale);
void OP(swiglu_forward)(real *out, const real *gate, const real *up, size_t n);
void OP(swiglu_backward)(real *dgate, real *dup, const real *dout, const real *gate, const real *up, size_t n);
void OP(geglu_forward)(real *out, const real *gate, const real *up, size_t n);
void OP(geglu_backward)(real *dgate, real *dup, const real *dout, const real *gate, const real *up, size_t n);
void OP(softcap_forward)(real *Z, const real *U, size_t n, double c);
void OP(softcap_backward)(real *dU, const real *dZ, const real *Z, size_t n, double c);
void OP(markov_forward)(sp_pool *pool, real *bias, real *code, const int32_t *prev, const real *W1,
                        const real *W2, int T, int V, int r);
void OP(markov_backward)(sp_pool *pool, real *dW1, real *dW2, real *dcode, const real *dbias, const real *code,
                         const int32_t *prev, const real *W2, int T, int V, int r);
void OP(gated_forward)(sp_pool *pool, real *mix, real *gate, real *vec, const real *h, const real *code,
                       const real *Wg, const real *bg, int T, int H, int r);
void OP(gated_backward)(sp_pool *pool, real *dh, real *dcode, real *dWg, real *dbg, real *dpre, real *dvec,
                        const real *dmix, const real *vec, const real *gate, const real *code, const real *Wg,
                        int T, int H, int r);
void OP(rnn_forward)(sp_pool *pool, real *mix, real *act, real *z, const real *h, const real *code,
                     const real *Wj, const real *bj, int NB, int B, int H, int r);
void OP(rnn_backward)(sp_pool *pool, real *dh, real *dcode, real *dWj, real *dbj, real *dpre, real *dz, real *ds,
                      const real *dmix, const real *act, const real *z, const real *Wj, int NB, int B, int H,
                      int r);
void OP(gather_forward)(real *out, const int32_t *idx, const real *W, int T, int n);
void OP(gather_backward)(real *dW, const real *dout, const int32_t *idx, int T, int n);
void OP(conf_forward)(real *logit, const real *h, const real *code, const real *w, const real *b,
                      int T, int H, int r);
void OP(conf_backward)(real *dh, real *dcode, real *dw, real *db, const real *dlogit, const real *h,
                       const real *code, const real *w, int T, int H, int r);
void OP(lmhead_forward)(sp_pool *pool, real *U, const real *h, const real *Wlm, int T, int H, int V);
void OP(lmhead_backward)(sp_pool *pool, real *dh, const real *dU, const real *Wlm, int T, int H, int V);
void OP(softmax_rows)(real *q, const real *Z, int T, int V);
double OP(ce_forward)(real *q, const real *Z, const int32_t *labels, const real *wt, int T, int V, double denom);
void OP(ce_backward)(real *dZ, const real *q, const int32_t *labels, const real *wt, int T, int V, double denom);
double OP(spark_loss_forward)(double *terms, real *q, real *cstar, const real *Z, const real *P,
                              const int32_t *labels, const real *conf, const real *wt, int T, int V,
                              const double *alpha, double denom);
void OP(spark_loss_backward)(real *dZ, real *dconf, const real *q, const real *cstar, const real *P,
                             const int32_t *labels, const real *conf, const real *wt, int T, int V,
                             const double *alpha, double denom);
