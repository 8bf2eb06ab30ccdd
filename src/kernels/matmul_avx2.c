/* matmul_avx2.c — the AVX2 + FMA tiles of sp_matmul (matmul.c). A canonical accumulator is
 * two ymm registers, so a tile holds at most 12 of the 16: 1 token × 6 rows for decode
 * (T = 1, each row prefetched ahead), 2 tokens × 3 rows otherwise, 1 row at the end of a
 * chunk. For T > 16 tokens go in chunks whose X stays in L2 while rows of W stream past.
 * The K tail (K % 16) reads zero-padded copies and blends, so lanes past K keep their
 * accumulator exactly as the canonical order says. */
#include <string.h>

#include "kernels_avx2.h"

/* bytes of each W row the decode tile prefetches ahead of its loads */
#define MM2_PREFETCH_BYTES 1024
/* floats of X kept hot per token chunk (~256 KB: half of a small L2) */
#define MM2_XCHUNK_FLOATS (64 * 1024)

/* 16 weights of type dt at element offset off, widened exactly to f32: lanes 0..7, 8..15 */
static SP_ALWAYS_INLINE void load_w16(const void *W, size_t off, sp_dtype dt, __m256 *lo, __m256 *hi) {
    if (dt == SP_DT_F32) {
        *lo = _mm256_loadu_ps((const float *)W + off);
        *hi = _mm256_loadu_ps((const float *)W + off + 8);
        return;
    }
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)W + off));
    __m128i h0 = _mm256_castsi256_si128(h), h1 = _mm256_extracti128_si256(h, 1);
    if (dt == SP_DT_BF16) {
        *lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
        *hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
    } else {
        *lo = _mm256_cvtph_ps(h0);
        *hi = _mm256_cvtph_ps(h1);
    }
}

/* One TB × NB tile: Y[t0.., n0..] over the full K; TB, NB, dt constant at each call site. */
static SP_ALWAYS_INLINE void mm_tile(const sp_mm_ctx *c, int t0, int n0, sp_dtype dt, const int TB,
                                     const int NB) {
    const int K = c->K;
    const float *X = c->X + (size_t)t0 * K;
    const size_t w0 = (size_t)n0 * K, esz = dt == SP_DT_F32 ? 4 : 2;
    __m256 lo[2][6], hi[2][6];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m256 xl[2], xh[2];
        for (int i = 0; i < TB; i++) {
            xl[i] = _mm256_loadu_ps(X + (size_t)i * K + k);
            xh[i] = _mm256_loadu_ps(X + (size_t)i * K + k + 8);
        }
        for (int j = 0; j < NB; j++) {
            size_t off = w0 + (size_t)j * K + k;
            if (TB == 1) _mm_prefetch((const char *)c->W + off * esz + MM2_PREFETCH_BYTES, _MM_HINT_T0);
            __m256 wl, wh;
            load_w16(c->W, off, dt, &wl, &wh);
            for (int i = 0; i < TB; i++) {
                lo[i][j] = _mm256_fmadd_ps(xl[i], wl, lo[i][j]);
                hi[i][j] = _mm256_fmadd_ps(xh[i], wh, hi[i][j]);
            }
        }
    }
    if (k < K) {
        const int m = K - k;
        const __m256 ml = sp_lane_mask_avx2(m), mh = sp_lane_mask_avx2(m - 8);
        __m256 xl[2], xh[2];
        for (int i = 0; i < TB; i++) {
            float xt[16] = {0};
            memcpy(xt, X + (size_t)i * K + k, (size_t)m * sizeof(float));
            xl[i] = _mm256_loadu_ps(xt);
            xh[i] = _mm256_loadu_ps(xt + 8);
        }
        for (int j = 0; j < NB; j++) {
            _Alignas(32) unsigned char wt[64] = {0};
            memcpy(wt, (const char *)c->W + (w0 + (size_t)j * K + k) * esz, (size_t)m * esz);
            __m256 wl, wh;
            load_w16(wt, 0, dt, &wl, &wh);
            for (int i = 0; i < TB; i++) {
                lo[i][j] = _mm256_blendv_ps(lo[i][j], _mm256_fmadd_ps(xl[i], wl, lo[i][j]), ml);
                hi[i][j] = _mm256_blendv_ps(hi[i][j], _mm256_fmadd_ps(xh[i], wh, hi[i][j]), mh);
            }
        }
    }
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = sp_hsum16_avx2(lo[i][j], hi[i][j]);
}

/* the tile shapes used below, each for every weight type */
static void tile_1x6(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 1, 6); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 1, 6); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 1, 6); break;
    }
}
static void tile_2x3(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 2, 3); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 2, 3); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 2, 3); break;
    }
}
static void tile_1x3(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 1, 3); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 1, 3); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 1, 3); break;
    }
}
static void tile_2x1(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 2, 1); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 2, 1); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 2, 1); break;
    }
}
static void tile_1x1(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 1, 1); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 1, 1); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 1, 1); break;
    }
}

void sp_mm_rows_avx2(const sp_mm_ctx *c, int n0, int n1) {
    const int T = c->T, K = c->K;
    const int NB = T == 1 ? 6 : 3;
    int Tc = T;
    if (T > 16) {
        Tc = (MM2_XCHUNK_FLOATS / (K > 0 ? K : 1)) & ~1;
        if (Tc < 2) Tc = 2;
    }
    for (int tc0 = 0; tc0 < T; tc0 += Tc) {
        int tc1 = tc0 + Tc < T ? tc0 + Tc : T;
        for (int n = n0; n < n1;) {
            int nb = n1 - n >= NB ? NB : 1;
            for (int t = tc0; t < tc1;) {
                int tb = tc1 - t >= 2 ? 2 : 1;
                if (nb == 6) tile_1x6(c, t, n);
                else if (nb == 3) (tb == 2 ? tile_2x3 : tile_1x3)(c, t, n);
                else (tb == 2 ? tile_2x1 : tile_1x1)(c, t, n);
                t += nb == 6 ? 1 : tb;
            }
            n += nb;
        }
    }
}
