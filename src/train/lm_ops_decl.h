/* lm_ops_decl.h — prototypes of lm_ops_impl.h for one scalar type (see lm_ops.h). */

/* Causal attention over NB sequences of T tokens each (positions 0..T-1 inside a sequence):
 * query i of a sequence sees keys j with lo(i) <= j <= i, lo(i) = window > 0 ? i−window+1 : 0
 * (the window counts the query itself, as sp_attention's does). q[NB·T, NH, D],
 * k/v[NB·T, KVH, D], out[NB·T, NH, D], att[NB, NH, T, T] the saved probabilities (entries
 * outside the visible range are 0). Query head h reads KV head h / (NH/KVH). */
void LOP(causal_attention_forward)(sp_pool *pool, real *out, real *att, const real *q, const real *k,
                                   const real *v, int NB, int T, int NH, int KVH, int D, int window,
                                   real scale);
/* dp: scratch [NB, NH, T]. */
void LOP(causal_attention_backward)(sp_pool *pool, real *dq, real *dk, real *dv, real *dp, const real *dout,
                                    const real *q, const real *k, const real *v, const real *att, int NB,
                                    int T, int NH, int KVH, int D, int window, real scale);

/* GeGLU glue: out = gelu_tanh(gate) · up, n elements (the arithmetic of sp_gelu_tanh_mul). */
void LOP(geglu_forward)(real *out, const real *gate, const real *up, size_t n);
void LOP(geglu_backward)(real *dgate, real *dup, const real *dout, const real *gate, const real *up, size_t n);

/* softcap: y = c · tanh(x / c) (the arithmetic of sp_softcap); backward from the saved y. */
void LOP(softcap_forward)(real *y, const real *x, size_t n, real c);
void LOP(softcap_backward)(real *dx, const real *dy, const real *y, size_t n, real c);
