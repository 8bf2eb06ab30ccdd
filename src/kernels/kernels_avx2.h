/* kernels_avx2.h — AVX2 + FMA building blocks of the *_avx2.c kernel files (compiled with
 * AVX2, FMA and F16C enabled; include nowhere else). A canonical 16-lane accumulator
 * (kernels_internal.h) is a pair of ymm registers: lo holds lanes 0..7, hi lanes 8..15. */
#ifndef SPECULA_KERNELS_AVX2_H
#define SPECULA_KERNELS_AVX2_H

#include <immintrin.h>

#include "kernels_internal.h"

/* the canonical 16 → 1 tree: (i, i+8) is lo + hi, then (i, i+4), (i, i+2), (0, 1) */
static SP_ALWAYS_INLINE float sp_hsum16_avx2(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* all-ones in lanes l < rem of 8 (rem may be <= 0 or >= 8) */
static SP_ALWAYS_INLINE __m256 sp_lane_mask_avx2(int rem) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/* the canonical dot of x and w, length K: the tail lanes keep their accumulators (blend) */
static SP_ALWAYS_INLINE float sp_dot_inline_avx2(const float *x, const float *w, int K) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_loadu_ps(w + k + 8), hi);
    }
    if (k < K) {
        __m256 ml = sp_lane_mask_avx2(K - k), mh = sp_lane_mask_avx2(K - k - 8);
        __m256i il = _mm256_castps_si256(ml), ih = _mm256_castps_si256(mh);
        __m256 xl = _mm256_maskload_ps(x + k, il), wl = _mm256_maskload_ps(w + k, il);
        __m256 xh = _mm256_maskload_ps(x + k + 8, ih), wh = _mm256_maskload_ps(w + k + 8, ih);
        lo = _mm256_blendv_ps(lo, _mm256_fmadd_ps(xl, wl, lo), ml);
        hi = _mm256_blendv_ps(hi, _mm256_fmadd_ps(xh, wh, hi), mh);
    }
    return sp_hsum16_avx2(lo, hi);
}

/* sp_exp_lane on 8 lanes, operation for operation. 2^n is applied as 2^(n>>1) · 2^(n − (n>>1)):
 * the first product is exact (both factors normal), so the result is rounded once, as
 * ldexpf rounds, for every n in [-150, 128]. */
static SP_ALWAYS_INLINE __m256 sp_exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.7228390f), x); /* NaN: min/max return x */
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* sp_tanh_lane on 8 lanes, operation for operation */
static SP_ALWAYS_INLINE __m256 sp_tanh_avx2(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 e = sp_exp_avx2(_mm256_add_ps(ax, ax));
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    big = _mm256_or_ps(big, _mm256_and_ps(x, sign));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-1.4558343870e-3f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(3.5921280366e-3f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.8632355299e-3f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.1869488536e-2f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.3968253968e-2f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.3333333333e-1f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-3.3333333333e-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(x, x2), p, x);
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ));
}

#endif
