/* act_avx2.c — AVX2 + FMA versions of the element-wise and row primitives of act.c and norm.c
 * (gated activations, softcap, softmax's exp and sum, argmax, the canonical dot): 8 lanes at a
 * time, the tail through a zero-padded copy, each lane computing exactly what the portable
 * lane functions of kernels_internal.h compute. */
#include <string.h>

#include "kernels_avx2.h"

static SP_ALWAYS_INLINE __m256 silu_mul8(__m256 g, __m256 u) {
    __m256 e = sp_exp_avx2(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static SP_ALWAYS_INLINE __m256 gelu_mul8(__m256 g, __m256 u) {
    __m256 inner = _mm256_mul_ps(_mm256_set1_ps((float)SP_GELU_K),
                                 _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps((float)SP_GELU_A), g), _mm256_mul_ps(g, g), g));
    __m256 t = _mm256_add_ps(_mm256_set1_ps(1.0f), sp_tanh_avx2(inner));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), t), u);
}

void sp_silu_mul_avx2(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (n - i) * sizeof(float));
        memcpy(u, up + i, (n - i) * sizeof(float));
        _mm256_storeu_ps(g, silu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(out + i, g, (n - i) * sizeof(float));
    }
}

void sp_gelu_tanh_mul_avx2(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (n - i) * sizeof(float));
        memcpy(u, up + i, (n - i) * sizeof(float));
        _mm256_storeu_ps(g, gelu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(out + i, g, (n - i) * sizeof(float));
    }
}

static SP_ALWAYS_INLINE __m256 softcap8(__m256 x, __m256 vc) {
    return _mm256_mul_ps(vc, sp_tanh_avx2(_mm256_div_ps(x, vc)));
}

void sp_softcap_avx2(float *x, size_t n, float c) {
    __m256 vc = _mm256_set1_ps(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, softcap8(_mm256_loadu_ps(x + i), vc));
    if (i < n) {
        float t[8] = {0};
        memcpy(t, x + i, (n - i) * sizeof(float));
        _mm256_storeu_ps(t, softcap8(_mm256_loadu_ps(t), vc));
        memcpy(x + i, t, (n - i) * sizeof(float));
    }
}

/* 16 lane sums as lo (lanes 0..7) and hi (8..15); the tail lanes blended in */
float sp_exp_sum_avx2(float *x, int n, float m) {
    __m256 vm = _mm256_set1_ps(m), lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 e0 = sp_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        __m256 e1 = sp_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        _mm256_storeu_ps(x + i, e0);
        _mm256_storeu_ps(x + i + 8, e1);
        lo = _mm256_add_ps(lo, e0);
        hi = _mm256_add_ps(hi, e1);
    }
    if (i < n) {
        float t[16] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        __m256 e0 = sp_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(t), vm));
        __m256 e1 = sp_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(t + 8), vm));
        lo = _mm256_blendv_ps(lo, _mm256_add_ps(lo, e0), sp_lane_mask_avx2(n - i));
        hi = _mm256_blendv_ps(hi, _mm256_add_ps(hi, e1), sp_lane_mask_avx2(n - i - 8));
        _mm256_storeu_ps(t, e0);
        _mm256_storeu_ps(t + 8, e1);
        memcpy(x + i, t, (size_t)(n - i) * sizeof(float));
    }
    return sp_hsum16_avx2(lo, hi);
}

float sp_dot_f32_avx2(const float *x, const float *w, int K) { return sp_dot_inline_avx2(x, w, K); }

/* one pass for the maximum (max(x, acc) keeps acc when x is NaN), one for the first index
 * equal to it */
int sp_argmax_avx2(const float *x, int n) {
    __m256 acc = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(_mm256_loadu_ps(x + i), acc);
    __m128 a4 = _mm_max_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    a4 = _mm_max_ps(a4, _mm_movehl_ps(a4, a4));
    a4 = _mm_max_ss(a4, _mm_shuffle_ps(a4, a4, 1));
    float m = _mm_cvtss_f32(a4);
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    __m256 vm = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= n; i += 8) {
        int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (k) return i + __builtin_ctz((unsigned)k);
    }
    for (; i < n; i++)
        if (x[i] == m) return i;
    return 0; /* every value NaN */
}
