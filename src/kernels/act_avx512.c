/* act_avx512.c — AVX-512 versions of the element-wise and row primitives of act.c and norm.c
 * (gated activations, softcap, softmax's exp and sum, argmax, the canonical dot): 16 lanes at
 * a time, the tail masked, each lane computing exactly what the portable lane functions of
 * kernels_internal.h compute. */
#include "kernels_avx512.h"

static SP_ALWAYS_INLINE __m512 silu_mul16(__m512 g, __m512 u) {
    __m512 e = sp_exp_avx512(_mm512_xor_ps(g, _mm512_set1_ps(-0.0f)));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

static SP_ALWAYS_INLINE __m512 gelu_mul16(__m512 g, __m512 u) {
    __m512 inner = _mm512_mul_ps(_mm512_set1_ps((float)SP_GELU_K),
                                 _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps((float)SP_GELU_A), g), _mm512_mul_ps(g, g), g));
    __m512 t = _mm512_add_ps(_mm512_set1_ps(1.0f), sp_tanh_avx512(inner));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), g), t), u);
}

void sp_silu_mul_avx512(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, silu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        __mmask16 m = sp_tail_mask((int)(n - i));
        _mm512_mask_storeu_ps(out + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void sp_gelu_tanh_mul_avx512(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, gelu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        __mmask16 m = sp_tail_mask((int)(n - i));
        _mm512_mask_storeu_ps(out + i, m, gelu_mul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void sp_softcap_avx512(float *x, size_t n, float c) {
    size_t i = 0;
    __m512 vc = _mm512_set1_ps(c);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(vc, sp_tanh_avx512(_mm512_div_ps(_mm512_loadu_ps(x + i), vc))));
    if (i < n) {
        __mmask16 m = sp_tail_mask((int)(n - i));
        __m512 r = _mm512_mul_ps(vc, sp_tanh_avx512(_mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), vc)));
        _mm512_mask_storeu_ps(x + i, m, r);
    }
}

float sp_exp_sum_avx512(float *x, int n, float m) {
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = sp_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 k = sp_tail_mask(n - i);
        __m512 e = sp_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(x + i, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    return sp_hsum16_avx512(acc);
}

float sp_dot_f32_avx512(const float *x, const float *w, int K) { return sp_dot_inline_avx512(x, w, K); }

/* one pass for the maximum (max(x, acc) keeps acc when x is NaN), one for the first index
 * equal to it */
int sp_argmax_avx512(const float *x, int n) {
    __m512 acc = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_max_ps(_mm512_loadu_ps(x + i), acc);
    float m = _mm512_reduce_max_ps(acc);
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    __m512 vm = _mm512_set1_ps(m);
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vm, _CMP_EQ_OQ);
        if (k) return i + __builtin_ctz(k);
    }
    for (; i < n; i++)
        if (x[i] == m) return i;
    return 0; /* every value NaN */
}
