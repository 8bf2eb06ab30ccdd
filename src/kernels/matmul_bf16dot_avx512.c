/* matmul_bf16dot_avx512.c — the AVX-512 tiles of the bf16-dot numerics (kernels_internal.h):
 * one zmm holds the 16 lane accumulators, one 32-element chunk per step.
 *   hw   (AVX512_BF16): vcvtne2ps2bf16 rounds 32 activations to bf16 once per token and chunk,
 *        vdpbf16ps adds the (odd, even) pair of each lane: the order itself, in one instruction.
 *   emulation (AVX-512 F/BW/DQ without it): the activations are rounded in integer arithmetic
 *        and split into even and odd elements; a bf16 weight pair widens to f32 with one shift
 *        (even) and one mask (odd); each product is one fma followed by the flush of a
 *        subnormal result. acc starts at +0 and is flushed after every step, so the order's
 *        DAZ of the accumulator never changes it and is omitted.
 * Tiles as in matmul_avx512.c: 1 × 8 for T = 1 (own-row prefetch), T × 8 for T = 2, 3, up to
 * 4 × 6 for T >= 4 with the row block MM_AHEAD_BLOCKS on streamed in; 1..4 × 1 for the last
 * rows. Positions past K are loaded as +0 in activations and weights (the padded chunk). */
#include "kernels_avx512.h"

#define BD_PREFETCH_BYTES 1024
#define BD_AHEAD_BLOCKS 3
#define BD_XCHUNK_FLOATS (128 * 1024)

typedef struct {
    const char *p, *end;
    size_t step;
} bd_pf;

/* subnormal lanes of v become zeros of their sign */
static SP_ALWAYS_INLINE __m512 bd_ftz(__m512 v) {
    return _mm512_mask_and_ps(v, _mm512_fpclass_ps_mask(v, 0x20), v, _mm512_set1_ps(-0.0f));
}

/* sp_bf16dot_round on 16 lanes */
static SP_ALWAYS_INLINE __m512 bd_round(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_mask_or_epi32(r, _mm512_fpclass_ps_mask(v, 0x81), u, _mm512_set1_epi32(0x00400000));
    r = _mm512_mask_and_epi32(r, _mm512_fpclass_ps_mask(v, 0x20), u, _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

/* 32 activations from x (rem of them, the rest +0) */
static SP_ALWAYS_INLINE void bd_load_x(const float *x, int rem, __m512 *lo, __m512 *hi) {
    if (rem >= 32) {
        *lo = _mm512_loadu_ps(x), *hi = _mm512_loadu_ps(x + 16);
    } else {
        __mmask16 mlo = rem >= 16 ? 0xFFFF : sp_tail_mask(rem), mhi = rem > 16 ? sp_tail_mask(rem - 16) : 0;
        *lo = _mm512_maskz_loadu_ps(mlo, x), *hi = _mm512_maskz_loadu_ps(mhi, x + 16);
    }
}

static SP_ALWAYS_INLINE __m512i bd_load_w(const uint16_t *w, int rem) {
    if (rem >= 32) return _mm512_loadu_si512(w);
    return _mm512_maskz_loadu_epi16((__mmask32)((1ull << rem) - 1u), w);
}

/* One 32-element chunk at k into acc (rem: elements left in the row, >= 32 for a full chunk) */
static SP_ALWAYS_INLINE void bd_chunk(const sp_mm_ctx *c, const float *X, const uint16_t *W, int k, int rem,
                                      __m512 acc[4][8], bd_pf *pf, const char **pf_goal, const int TB, const int NB,
                                      const int PF, const int HW) {
    const int K = c->K;
    if (PF == 2) {
        *pf_goal += pf->step;
        for (; pf->p < *pf_goal && pf->p < pf->end; pf->p += 64) _mm_prefetch(pf->p, _MM_HINT_T0);
    }
    __m512bh xb[4];
    __m512 xe[4], xo[4];
    for (int i = 0; i < TB; i++) {
        __m512 lo, hi;
        bd_load_x(X + (size_t)i * K + k, rem, &lo, &hi);
        if (HW) {
            xb[i] = _mm512_cvtne2ps_pbh(hi, lo);
        } else {
            const __m512i even_idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            lo = bd_round(lo), hi = bd_round(hi);
            xe[i] = _mm512_permutex2var_ps(lo, even_idx, hi);
            xo[i] = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even_idx, _mm512_set1_epi32(1)), hi);
        }
    }
    for (int j = 0; j < NB; j++) {
        const uint16_t *wp = W + (size_t)j * K + k;
        if (PF == 1) _mm_prefetch((const char *)wp + BD_PREFETCH_BYTES, _MM_HINT_T0);
        __m512i v = bd_load_w(wp, rem);
        if (HW) {
            __m512bh wb = (__m512bh)v;
            for (int i = 0; i < TB; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xb[i], wb);
        } else {
            __m512 we = bd_ftz(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
            __m512 wo = bd_ftz(_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u))));
            for (int i = 0; i < TB; i++) {
                acc[i][j] = bd_ftz(_mm512_fmadd_ps(xo[i], wo, acc[i][j]));
                acc[i][j] = bd_ftz(_mm512_fmadd_ps(xe[i], we, acc[i][j]));
            }
        }
    }
}

/* One TB × NB tile over the full K. HW: vdpbf16ps; PF 1: own-row prefetch, 2: advance *pf. */
static SP_ALWAYS_INLINE void bd_tile(const sp_mm_ctx *c, int t0, int n0, bd_pf *pf, const int TB, const int NB,
                                     const int PF, const int HW) {
    const int K = c->K;
    const float *X = c->X + (size_t)t0 * K;
    const uint16_t *W = (const uint16_t *)c->W + (size_t)n0 * K;
    __m512 acc[4][8];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    const char *pf_goal = PF == 2 ? pf->p : NULL;
    int k = 0;
    for (; k + 32 <= K; k += 32) bd_chunk(c, X, W, k, 32, acc, pf, &pf_goal, TB, NB, PF, HW);
    if (k < K) bd_chunk(c, X, W, k, K - k, acc, pf, &pf_goal, TB, NB, PF, HW);
    float *y[4];
    for (int i = 0; i < TB; i++) y[i] = c->Y + (size_t)(t0 + i) * c->N + n0;
    if (TB == 4 && NB == 6) {
        __m512 a[24];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++) a[i * 6 + j] = acc[i][j];
        sp_store_sums_4x6(a, y, 1.0f, 0);
    } else if (NB >= 6) {
        for (int i = 0; i < TB; i++) sp_store_sums_row(acc[i], NB, y[i], 1.0f, 0);
    } else {
        for (int i = 0; i < TB; i++)
            for (int j = 0; j < NB; j++) y[i][j] = sp_hsum16_avx512(acc[i][j]);
    }
}

/* the tile of tb tokens × nb rows (nb 8, 6 or 1) */
static void bd_tile_hw(const sp_mm_ctx *c, int t0, int n0, bd_pf *pf, int tb, int nb) {
    switch (nb * 10 + tb) {
    case 81: bd_tile(c, t0, n0, pf, 1, 8, 2, 1); break;
    case 82: bd_tile(c, t0, n0, pf, 2, 8, 2, 1); break;
    case 83: bd_tile(c, t0, n0, pf, 3, 8, 2, 1); break;
    case 61: bd_tile(c, t0, n0, pf, 1, 6, 2, 1); break;
    case 62: bd_tile(c, t0, n0, pf, 2, 6, 2, 1); break;
    case 63: bd_tile(c, t0, n0, pf, 3, 6, 2, 1); break;
    case 64: bd_tile(c, t0, n0, pf, 4, 6, 2, 1); break;
    case 11: bd_tile(c, t0, n0, pf, 1, 1, 0, 1); break;
    case 12: bd_tile(c, t0, n0, pf, 2, 1, 0, 1); break;
    case 13: bd_tile(c, t0, n0, pf, 3, 1, 0, 1); break;
    default: bd_tile(c, t0, n0, pf, 4, 1, 0, 1); break;
    }
}

static void bd_tile_emu(const sp_mm_ctx *c, int t0, int n0, bd_pf *pf, int tb, int nb) {
    switch (nb * 10 + tb) {
    case 81: bd_tile(c, t0, n0, pf, 1, 8, 2, 0); break;
    case 82: bd_tile(c, t0, n0, pf, 2, 8, 2, 0); break;
    case 83: bd_tile(c, t0, n0, pf, 3, 8, 2, 0); break;
    case 61: bd_tile(c, t0, n0, pf, 1, 6, 2, 0); break;
    case 62: bd_tile(c, t0, n0, pf, 2, 6, 2, 0); break;
    case 63: bd_tile(c, t0, n0, pf, 3, 6, 2, 0); break;
    case 64: bd_tile(c, t0, n0, pf, 4, 6, 2, 0); break;
    case 11: bd_tile(c, t0, n0, pf, 1, 1, 0, 0); break;
    case 12: bd_tile(c, t0, n0, pf, 2, 1, 0, 0); break;
    case 13: bd_tile(c, t0, n0, pf, 3, 1, 0, 0); break;
    default: bd_tile(c, t0, n0, pf, 4, 1, 0, 0); break;
    }
}

void sp_mm_bf16dot_rows_avx512(const sp_mm_ctx *c, int n0, int n1, int hw) {
    void (*tile)(const sp_mm_ctx *, int, int, bd_pf *, int, int) = hw ? bd_tile_hw : bd_tile_emu;
    const int T = c->T, K = c->K;
    const size_t row_bytes = (size_t)K * 2;
    const size_t steps = (size_t)((K + 31) / 32 > 0 ? (K + 31) / 32 : 1);
    const int TBmax = T >= 4 ? 4 : T;
    const int NB = T >= 4 ? 6 : 8;
    int Tc = T;
    if (T > 16) {
        Tc = (BD_XCHUNK_FLOATS / (K > 0 ? K : 1)) & ~3;
        if (Tc < 4) Tc = 4;
    }
    const int ahead_rows = (T >= 2 ? BD_AHEAD_BLOCKS : 1) * NB;
    for (size_t o = 0; o < (size_t)(n1 - n0 < ahead_rows ? n1 - n0 : ahead_rows) * row_bytes; o += 64)
        _mm_prefetch((const char *)c->W + (size_t)n0 * row_bytes + o, _MM_HINT_T0);
    for (int tc0 = 0; tc0 < T; tc0 += Tc) {
        int tc1 = tc0 + Tc < T ? tc0 + Tc : T;
        /* token blocks of near-equal sizes per row block */
        int nblk = (tc1 - tc0 + TBmax - 1) / TBmax;
        int tb_base = (tc1 - tc0) / nblk, tb_extra = (tc1 - tc0) % nblk;
        for (int n = n0; n < n1;) {
            int nb = n1 - n >= NB ? NB : 1;
            /* the row block `ahead` blocks on streams in while this one computes */
            int p0 = n + nb + ahead_rows - NB, p1 = p0 + NB < n1 ? p0 + NB : n1;
            if (p0 >= n1) p0 = p1 = n1;
            const char *next = (const char *)c->W + (size_t)p0 * row_bytes;
            size_t len = (size_t)(p1 - p0) * row_bytes;
            int b = 0;
            for (int t = tc0; t < tc1; b++) {
                int tb = tb_base + (b < tb_extra);
                bd_pf pf = {next + len * b / nblk, next + len * (b + 1) / nblk, 0};
                pf.step = (size_t)(pf.end - pf.p) / steps + 1;
                tile(c, t, n, &pf, tb, nb);
                t += tb;
            }
            n += nb;
        }
    }
}
