/* kernels_avx512.h — AVX-512 building blocks of the *_avx512.c kernel files (compiled with
 * AVX-512 enabled; include nowhere else): the canonical 16 → 1 tree on one zmm accumulator and
 * batched over 8 or 16, and the lane-wise e^x and tanh of kernels_internal.h on 16 lanes. */
#ifndef SPECULA_KERNELS_AVX512_H
#define SPECULA_KERNELS_AVX512_H

#include <immintrin.h>

#include "kernels_internal.h"

static SP_ALWAYS_INLINE float sp_hsum16_avx512(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* The canonical tree for 16 accumulators at once, as a transpose-and-add network: lane i of
 * the result is bit for bit sp_hsum16_avx512(a[i]) (same additions, same operands), at ~3
 * instructions per accumulator instead of ~9. Levels: (i, i+8), (i, i+4), (i, i+2), (0, 1). */
static SP_ALWAYS_INLINE __m512 sp_hsum16x16_avx512(const __m512 *a) {
    __m512 s1[8], s2[4], s3[2];
    for (int m = 0; m < 8; m++) /* [a[2m] lanes i + i+8 | a[2m+1] likewise] */
        s1[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                              _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
    for (int m = 0; m < 4; m++) /* one 128-bit quarter per accumulator: lanes i + i+4 */
        s2[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], 0x88),
                              _mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], 0xDD));
    for (int m = 0; m < 2; m++) /* lanes i + i+2: two accumulators per quarter */
        s3[m] = _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s2[2 * m]), _mm512_castps_pd(s2[2 * m + 1]))),
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s2[2 * m]), _mm512_castps_pd(s2[2 * m + 1]))));
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88), _mm512_shuffle_ps(s3[0], s3[1], 0xDD));
    /* lane 4q + m holds accumulator q + 4m */
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(order, r);
}

/* the same for 8 accumulators; result lanes 0..7 */
static SP_ALWAYS_INLINE __m256 sp_hsum8x16_avx512(const __m512 *a) {
    __m512 s1[4], s2[2];
    for (int m = 0; m < 4; m++)
        s1[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                              _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
    for (int m = 0; m < 2; m++)
        s2[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], 0x88),
                              _mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], 0xDD));
    __m512 s3 = _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s2[0]), _mm512_castps_pd(s2[1]))),
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s2[0]), _mm512_castps_pd(s2[1]))));
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(s3, s3, 0x88), _mm512_shuffle_ps(s3, s3, 0xDD));
    /* lane 4q + {0, 1} holds accumulators q and q + 4 */
    const __m512i order = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, r));
}

/* Canonical sums of n <= 8 accumulators a[0..n) (times scale when SCALE) to out[0..n). */
static SP_ALWAYS_INLINE void sp_store_sums_row(const __m512 *a, int n, float *out, float scale,
                                               const int SCALE) {
    __m512 b[8];
    for (int j = 0; j < 8; j++) b[j] = j < n ? a[j] : _mm512_setzero_ps();
    __m256 r = sp_hsum8x16_avx512(b);
    if (SCALE) r = _mm256_mul_ps(r, _mm256_set1_ps(scale));
    if (n == 8) _mm256_storeu_ps(out, r);
    else _mm256_mask_storeu_ps(out, (__mmask8)((1u << n) - 1u), r);
}

/* Canonical sums of a 4 × 6 tile a[i·6 + j] (times scale when SCALE): *c4 lanes 4i..4i+3 hold
 * row i, columns 0..3; *c2 lanes 2i, 2i+1 hold row i, columns 4, 5. */
static SP_ALWAYS_INLINE void sp_sums_4x6(const __m512 *a, float scale, const int SCALE, __m512 *c4, __m256 *c2) {
    __m512 b16[16], b8[8];
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++) b16[i * 4 + j] = a[i * 6 + j];
        for (int j = 0; j < 2; j++) b8[i * 2 + j] = a[i * 6 + 4 + j];
    }
    __m512 r = sp_hsum16x16_avx512(b16);
    __m256 r8 = sp_hsum8x16_avx512(b8);
    if (SCALE) {
        r = _mm512_mul_ps(r, _mm512_set1_ps(scale));
        r8 = _mm256_mul_ps(r8, _mm256_set1_ps(scale));
    }
    *c4 = r, *c2 = r8;
}

/* sp_sums_4x6's result to out[i][0..6) */
static SP_ALWAYS_INLINE void sp_put_sums_4x6(__m512 r, __m256 r8, float *const *out) {
    _mm_storeu_ps(out[0], _mm512_castps512_ps128(r));
    _mm_storeu_ps(out[1], _mm512_extractf32x4_ps(r, 1));
    _mm_storeu_ps(out[2], _mm512_extractf32x4_ps(r, 2));
    _mm_storeu_ps(out[3], _mm512_extractf32x4_ps(r, 3));
    __m128 lo = _mm256_castps256_ps128(r8), hi = _mm256_extractf128_ps(r8, 1);
    _mm_storel_pi((__m64 *)(out[0] + 4), lo);
    _mm_storeh_pi((__m64 *)(out[1] + 4), lo);
    _mm_storel_pi((__m64 *)(out[2] + 4), hi);
    _mm_storeh_pi((__m64 *)(out[3] + 4), hi);
}

/* Canonical sums of a 4 × 6 tile a[i·6 + j] (times scale when SCALE) to out[i][0..6). */
static SP_ALWAYS_INLINE void sp_store_sums_4x6(const __m512 *a, float *const *out, float scale,
                                               const int SCALE) {
    __m512 r;
    __m256 r8;
    sp_sums_4x6(a, scale, SCALE, &r, &r8);
    sp_put_sums_4x6(r, r8, out);
}

static SP_ALWAYS_INLINE __mmask16 sp_tail_mask(int rem) { return (__mmask16)((1u << rem) - 1u); }

static SP_ALWAYS_INLINE float sp_dot_inline_avx512(const float *x, const float *w, int K) {
    __m512 acc = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(w + k), acc);
    if (k < K) {
        __mmask16 m = sp_tail_mask(K - k);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, w + k),
                                    acc, m);
    }
    return sp_hsum16_avx512(acc);
}

/* sp_exp_lane (kernels_internal.h) on 16 lanes, operation for operation */
static SP_ALWAYS_INLINE __m512 sp_exp_avx512(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
    const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    /* min/max return their second operand when one is NaN: NaN passes through */
    x = _mm512_min_ps(_mm512_set1_ps(88.7228390f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    /* Taylor-like minimax polynomial for e^r on |r| <= ln2/2 (cephes expf coefficients) */
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* sp_tanh_lane on 16 lanes, operation for operation */
static SP_ALWAYS_INLINE __m512 sp_tanh_avx512(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 ax = _mm512_andnot_ps(sign, x);
    __m512 e = sp_exp_avx512(_mm512_add_ps(ax, ax));
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    big = _mm512_or_ps(big, _mm512_and_ps(x, sign));
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-1.4558343870e-3f);               /* -929569/638512875 */
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(3.5921280366e-3f)); /* 21844/6081075 */
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.8632355299e-3f)); /* -1382/155925 */
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.1869488536e-2f)); /* 62/2835 */
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.3968253968e-2f)); /* -17/315 */
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.3333333333e-1f)); /* 2/15 */
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-3.3333333333e-1f)); /* -1/3 */
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(x, x2), p, x);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.5f), _CMP_LT_OQ), big, small);
}

#endif
