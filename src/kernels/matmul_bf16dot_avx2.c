/* matmul_bf16dot_avx2.c — the bf16-dot numerics (kernels_internal.h) emulated with AVX2 FMAs.
 * The 16 lane accumulators are two ymm registers: lo holds lanes 0..7 (elements 32c + 0..15
 * of chunk c), hi lanes 8..15 (elements 32c + 16..31). Activations are rounded to bf16 in
 * integer arithmetic and split into even and odd elements; a bf16 weight pair widens with one
 * shift (even) and one mask (odd). Each product is one fma, then the flush of a subnormal
 * result; acc starts at +0 and is flushed after every step, so the order's DAZ of the
 * accumulator never changes it and is omitted. The last, partial chunk is copied into a
 * zero-padded buffer (AVX2 has no 16-bit masked load). Tiles: 1 × 4 for T = 1, 2 × 2 else. */
#include "kernels_avx2.h"

/* subnormal lanes become zeros of their sign */
static SP_ALWAYS_INLINE __m256 bd_ftz(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm256_blendv_ps(v, _mm256_and_ps(v, sign), tiny);
}

/* sp_bf16dot_round on 8 lanes */
static SP_ALWAYS_INLINE __m256 bd_round(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                     _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    __m256 den = _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256()));
    __m256 rf = _mm256_blendv_ps(_mm256_castsi256_ps(r),
                                 _mm256_castsi256_ps(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000))), nan);
    rf = _mm256_blendv_ps(rf, _mm256_and_ps(v, _mm256_set1_ps(-0.0f)), den);
    return _mm256_and_ps(rf, _mm256_castsi256_ps(_mm256_set1_epi32((int)0xffff0000u)));
}

/* even and odd elements of the 16 floats at x, rounded: lanes i = elements 2i, 2i + 1 */
static SP_ALWAYS_INLINE void bd_split_x(const float *x, __m256 *e, __m256 *o) {
    __m256 a = bd_round(_mm256_loadu_ps(x)), b = bd_round(_mm256_loadu_ps(x + 8));
    *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

/* One TB × NB tile over the full K. */
static SP_ALWAYS_INLINE void bd_tile(const sp_mm_ctx *c, int t0, int n0, const int TB, const int NB) {
    const int K = c->K;
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[2][4][2];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
    float xpad[2][32];
    uint16_t wpad[4][32];
    for (int k = 0; k < K; k += 32) {
        const float *xs[2];
        const uint16_t *ws[4];
        for (int i = 0; i < TB; i++) xs[i] = c->X + (size_t)(t0 + i) * K + k;
        for (int j = 0; j < NB; j++) ws[j] = (const uint16_t *)c->W + (size_t)(n0 + j) * K + k;
        if (K - k < 32) { /* the padded chunk */
            int rem = K - k;
            for (int i = 0; i < TB; i++) {
                memset(xpad[i], 0, sizeof xpad[i]);
                memcpy(xpad[i], xs[i], (size_t)rem * sizeof(float));
                xs[i] = xpad[i];
            }
            for (int j = 0; j < NB; j++) {
                memset(wpad[j], 0, sizeof wpad[j]);
                memcpy(wpad[j], ws[j], (size_t)rem * sizeof(uint16_t));
                ws[j] = wpad[j];
            }
        }
        __m256 xe[2][2], xo[2][2]; /* [token][lo, hi] */
        for (int i = 0; i < TB; i++) {
            bd_split_x(xs[i], &xe[i][0], &xo[i][0]);
            bd_split_x(xs[i] + 16, &xe[i][1], &xo[i][1]);
        }
        for (int j = 0; j < NB; j++)
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(ws[j] + 16 * h));
                __m256 we = bd_ftz(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
                __m256 wo = bd_ftz(_mm256_castsi256_ps(_mm256_and_si256(v, hi_mask)));
                for (int i = 0; i < TB; i++) {
                    acc[i][j][h] = bd_ftz(_mm256_fmadd_ps(xo[i][h], wo, acc[i][j][h]));
                    acc[i][j][h] = bd_ftz(_mm256_fmadd_ps(xe[i][h], we, acc[i][j][h]));
                }
            }
    }
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++)
            c->Y[(size_t)(t0 + i) * c->N + n0 + j] = sp_hsum16_avx2(acc[i][j][0], acc[i][j][1]);
}

void sp_mm_bf16dot_rows_avx2(const sp_mm_ctx *c, int n0, int n1) {
    const int T = c->T, NB = T == 1 ? 4 : 2;
    for (int n = n0; n < n1;) {
        int nb = n1 - n >= NB ? NB : 1;
        for (int t = 0; t < T;) {
            int tb = T - t >= 2 ? 2 : 1;
            switch (nb * 10 + tb) {
            case 41: bd_tile(c, t, n, 1, 4); break;
            case 22: bd_tile(c, t, n, 2, 2); break;
            case 21: bd_tile(c, t, n, 1, 2); break;
            case 12: bd_tile(c, t, n, 2, 1); break;
            default: bd_tile(c, t, n, 1, 1); break;
            }
            t += tb;
        }
        n += nb;
    }
}
