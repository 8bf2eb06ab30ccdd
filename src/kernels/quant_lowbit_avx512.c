/* quant_lowbit_avx512.c — the packed Q5_K, Q3_K and IQ4_XS row kernels for AVX-512 with VNNI, in
 * the canonical order of quant_internal.h. Matrices the loader repacked (sp_mat_pack; 16 rows per
 * group, one output row per int32 lane, layouts in quant_internal.h) take 16-row tiles built like
 * quant_k_avx512.c's packed Q4_K / Q6_K tiles: each vpdpbusd multiplies a 64-byte vector of 4
 * consecutive elements of the 16 rows by one broadcast int32 of the activation, so the integer
 * sums of the 16 rows build up in the lanes with no horizontal reduction, the rows' scales are
 * one widening load, and the float part is one fma (two for Q5_K) per super-block for 16 rows.
 * Within one output the integer sums are exact and the float operations are the scalar
 * kernel's, so the bits are those of every other tier. Everything else (the file's rows, Q2_K,
 * Q5_1, IQ4_NL) goes to the AVX2 kernels (quant_lowbit_avx2.c). */
#include <immintrin.h>
#include <string.h>

#include "kernels_avx512.h"
#include "quant_internal.h"

/* tokens per tile: the 16 rows' unpacked sub-block (in registers) serves up to 8 tokens */
#define LTB_MAX 8

static SP_ALWAYS_INLINE __m512i bcast_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static SP_ALWAYS_INLINE __m512i bits_select(__m512i a, __m512i b, __m512i m) { /* m ? b : a, per bit */
    return _mm512_ternarylogic_epi32(a, b, m, 0xD8);
}

/* The first token tile of a group requests the next group (16 rows' bytes) non-temporally at an
 * even pace over its super-blocks, as the packed Q4_K / Q6_K tiles do. */
static SP_ALWAYS_INLINE qstream lpf_init(const qmm_ctx *c, int t0, int n0) {
    qstream none = {NULL, NULL, 0};
    return t0 != 0 ? none : qstream_rows(c, n0 + KX_ROWS, KX_ROWS, c->K / SP_QK_K);
}

static SP_ALWAYS_INLINE void tile_store(const qmm_ctx *c, int t0, int n0, int n1, const __m512 *acc, int TB) {
    const __mmask16 keep = (__mmask16)((1u << (n1 - n0)) - 1);
    for (int t = 0; t < TB; t++) _mm512_mask_storeu_ps(c->Y + (size_t)(t0 + t) * c->N + n0, keep, acc[t]);
}

/* Packed Q5_K: per sub-block j the four nibble vectors of packed Q4_K and one vector of fifth
 * bits. Vector i gives q (0..31) of elements 32j + 4i + k: the low nibble with bit i of the fifth
 * bits moved to bit 4; and 8q of elements 32j + 16 + 4i + k: the high nibble at bits 3..6 with
 * bit 4 + i at bit 7 (every shift keeps the bit inside its byte). Per token, vpdpbusd sums
 * Σ q·x and 8 · Σ q·x (exact, below 2^20); the shift by 3 is exact and one vpmulld by the rows'
 * sc[j] gives the terms of isum. imin and the float part are packed Q4_K's. */
static SP_ALWAYS_INLINE void tile_q5_K_x16(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *grp = c->W + (size_t)n0 * c->wrow;
    qx_row xr[LTB_MAX];
    __m512 acc[LTB_MAX];
    for (int t = 0; t < TB; t++) xr[t] = qx_at(c, t0 + t), acc[t] = _mm512_setzero_ps();
    const __m512i lo4 = _mm512_set1_epi8(0x0F), mid4 = _mm512_set1_epi8(0x78);
    const __m512i b4 = _mm512_set1_epi8(0x10), b7 = _mm512_set1_epi8((char)0x80);
    qstream pf = lpf_init(c, t0, n0);
    for (int b = 0; b < nsb; b++) {
        qstream_next_nta(&pf);
        const uint8_t *rec = grp + (size_t)b * Q5KX_SB_BYTES;
        __m512i isum[LTB_MAX];
        for (int t = 0; t < TB; t++) isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            const __m512i H = _mm512_loadu_si512(rec + Q5KX_H + 64 * j);
            __m512i wl[4], wh[4];
            for (int i = 0; i < 4; i++) {
                __m512i raw = _mm512_loadu_si512(rec + 320 + 64 * (4 * j + i));
                wl[i] = bits_select(_mm512_and_si512(raw, lo4), _mm512_slli_epi16(H, 4 - i), b4);
                wh[i] = bits_select(_mm512_and_si512(_mm512_srli_epi16(raw, 1), mid4), _mm512_slli_epi16(H, 3 - i), b7);
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + 64 + 16 * j)));
            for (int t = 0; t < TB; t++) {
                const int8_t *xq = xr[t].q + SP_QK_K * b + 32 * j;
                __m512i sl = _mm512_setzero_si512(), sh = _mm512_setzero_si512();
                for (int i = 0; i < 4; i++) {
                    sl = _mm512_dpbusd_epi32(sl, wl[i], bcast_i32(xq + 4 * i));
                    sh = _mm512_dpbusd_epi32(sh, wh[i], bcast_i32(xq + 16 + 4 * i));
                }
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(sl, _mm512_srai_epi32(sh, 3)), sc));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)rec));
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + 32)));
        __m512i mq[4];
        for (int q = 0; q < 4; q++) mq[q] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(rec + 192 + 32 * q)));
        for (int t = 0; t < TB; t++) {
            /* int32 q = bsum pair sums of sub-blocks 2q, 2q + 1 as two int16 */
            __m256i pp = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr[t].bsums + 16 * b)), _mm256_set1_epi16(1));
            int32_t bp[4];
            _mm_storeu_si128((__m128i *)bp, _mm_packs_epi32(_mm256_castsi256_si128(pp), _mm256_extracti128_si256(pp, 1)));
            __m512i imin = _mm512_setzero_si512();
            for (int q = 0; q < 4; q++) imin = _mm512_dpwssd_epi32(imin, mq[q], _mm512_set1_epi32(bp[q]));
            const __m512 xd = _mm512_set1_ps(xr[t].d[b]);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dv, xd), _mm512_cvtepi32_ps(isum[t]), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_xor_ps(_mm512_mul_ps(mv, xd), _mm512_set1_ps(-0.0f)), _mm512_cvtepi32_ps(imin),
                                     acc[t]);
        }
    }
    tile_store(c, t0, n0, n1, acc, TB);
}

/* Packed Q3_K: group g is one vector of 2-bit fields (run s at bits 2s, 2s + 1) and half a
 * vector of third bits (bits 4 (g % 2) + s). One mask and one bit select give u (0..7) of runs
 * 0 and 2; a mask and a select give 4u of runs 1 and 3 (the fields already at bits 2, 3, the
 * third bit moved to bit 4). Per token, one vpdpbusd chain from −4 · bsum[g] takes runs 0, 2
 * and one from 0 takes 4u of runs 1, 3 (below 2^16); the shift by 2 is exact and one vpmulld by
 * the rows' signed s[g] gives the terms of isum. The float part per lane is the scalar
 * kernel's. */
static SP_ALWAYS_INLINE void tile_q3_K_x16(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *grp = c->W + (size_t)n0 * c->wrow;
    qx_row xr[LTB_MAX];
    __m512 acc[LTB_MAX];
    for (int t = 0; t < TB; t++) xr[t] = qx_at(c, t0 + t), acc[t] = _mm512_setzero_ps();
    const __m512i m3 = _mm512_set1_epi8(0x03), mC = _mm512_set1_epi8(0x0C);
    const __m512i b2 = _mm512_set1_epi8(0x04), b4 = _mm512_set1_epi8(0x10);
    qstream pf = lpf_init(c, t0, n0);
    for (int b = 0; b < nsb; b++) {
        qstream_next_nta(&pf);
        const uint8_t *rec = grp + (size_t)b * Q3KX_SB_BYTES;
        int32_t nb4[LTB_MAX][16]; /* −4 · bsum[g] per token */
        __m512i isum[LTB_MAX];
        for (int t = 0; t < TB; t++) {
            __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(xr[t].bsums + 16 * b)));
            _mm512_storeu_si512(nb4[t], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 2)));
            isum[t] = _mm512_setzero_si512();
        }
        for (int g = 0; g < 16; g++) {
            const __m512i Q = _mm512_loadu_si512(rec + 64 * g), Q4 = _mm512_srli_epi16(Q, 4);
            const __m512i Hr = _mm512_loadu_si512(rec + Q3KX_H + 64 * (g / 2));
            const __m512i H = g % 2 ? _mm512_srli_epi16(Hr, 4) : Hr; /* run s's third bit at bit s */
            const __m512i u0 = bits_select(_mm512_and_si512(Q, m3), _mm512_slli_epi16(H, 2), b2);
            const __m512i u1x4 = bits_select(_mm512_and_si512(Q, mC), _mm512_slli_epi16(H, 3), b4);
            const __m512i u2 = bits_select(_mm512_and_si512(Q4, m3), H, b2);
            const __m512i u3x4 = bits_select(_mm512_and_si512(Q4, mC), _mm512_slli_epi16(H, 1), b4);
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(rec + Q3KX_SC + 16 * g)));
            for (int t = 0; t < TB; t++) {
                const int8_t *xq = xr[t].q + SP_QK_K * b + 16 * g;
                __m512i s1 = _mm512_dpbusd_epi32(_mm512_set1_epi32(nb4[t][g]), u0, bcast_i32(xq));
                __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u1x4, bcast_i32(xq + 4));
                s1 = _mm512_dpbusd_epi32(s1, u2, bcast_i32(xq + 8));
                s4 = _mm512_dpbusd_epi32(s4, u3x4, bcast_i32(xq + 12));
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(s1, _mm512_srai_epi32(s4, 2)), sc));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + Q3KX_D)));
        for (int t = 0; t < TB; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(xr[t].d[b])), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
    tile_store(c, t0, n0, n1, acc, TB);
}

/* Packed IQ4_XS: the nibble vectors of packed Q4_K hold table indices. vpshufb looks them up in
 * the table shifted by +128 (1..241, unsigned for vpdpbusd); per token and sub-block one chain
 * from −128 · (bsum[2j] + bsum[2j + 1]) takes the 8 vectors, so it ends at Σ T[q]·x exactly
 * (below 2^20), and one vpmulld by the rows' ls[j] − 32 gives the terms of isum. The float part
 * per lane is the scalar kernel's. */
static SP_ALWAYS_INLINE void tile_iq4_xs_x16(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *grp = c->W + (size_t)n0 * c->wrow;
    qx_row xr[LTB_MAX];
    __m512 acc[LTB_MAX];
    for (int t = 0; t < TB; t++) xr[t] = qx_at(c, t0 + t), acc[t] = _mm512_setzero_ps();
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    const __m512i tab = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)sp_kvalues_iq4nl)),
                                         _mm512_set1_epi8((char)0x80)); /* T + 128 as unsigned bytes */
    qstream pf = lpf_init(c, t0, n0);
    for (int b = 0; b < nsb; b++) {
        qstream_next_nta(&pf);
        const uint8_t *rec = grp + (size_t)b * IQ4XSX_SB_BYTES;
        int32_t nb128[LTB_MAX][8]; /* −128 · (bsum[2j] + bsum[2j + 1]) per token */
        __m512i isum[LTB_MAX];
        for (int t = 0; t < TB; t++) {
            __m256i pp = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr[t].bsums + 16 * b)), _mm256_set1_epi16(1));
            _mm256_storeu_si256((__m256i *)nb128[t], _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(pp, 7)));
            isum[t] = _mm512_setzero_si512();
        }
        for (int j = 0; j < 8; j++) {
            __m512i wl[4], wh[4];
            for (int i = 0; i < 4; i++) {
                __m512i raw = _mm512_loadu_si512(rec + 64 * (4 * j + i));
                wl[i] = _mm512_shuffle_epi8(tab, _mm512_and_si512(raw, lo4));
                wh[i] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4));
            }
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(rec + IQ4XSX_SC + 16 * j)));
            for (int t = 0; t < TB; t++) {
                const int8_t *xq = xr[t].q + SP_QK_K * b + 32 * j;
                __m512i s = _mm512_set1_epi32(nb128[t][j]), s2 = _mm512_setzero_si512();
                for (int i = 0; i < 4; i++) {
                    s = _mm512_dpbusd_epi32(s, wl[i], bcast_i32(xq + 4 * i));
                    s2 = _mm512_dpbusd_epi32(s2, wh[i], bcast_i32(xq + 16 + 4 * i));
                }
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(s, s2), sc));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + IQ4XSX_D)));
        for (int t = 0; t < TB; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(xr[t].d[b])), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
    tile_store(c, t0, n0, n1, acc, TB);
}

/* ---- driver: one out-of-line function per (type, TB) ------------------------------------------ */
static void tile_q5_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 1); }
static void tile_q5_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 2); }
static void tile_q5_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 3); }
static void tile_q5_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 4); }
static void tile_q5_K_5(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 5); }
static void tile_q5_K_6(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 6); }
static void tile_q5_K_7(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 7); }
static void tile_q5_K_8(const qmm_ctx *c, int t, int n, int n1) { tile_q5_K_x16(c, t, n, n1, 8); }
static void tile_q3_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 1); }
static void tile_q3_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 2); }
static void tile_q3_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 3); }
static void tile_q3_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 4); }
static void tile_q3_K_5(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 5); }
static void tile_q3_K_6(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 6); }
static void tile_q3_K_7(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 7); }
static void tile_q3_K_8(const qmm_ctx *c, int t, int n, int n1) { tile_q3_K_x16(c, t, n, n1, 8); }
static void tile_iq4_xs_1(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 1); }
static void tile_iq4_xs_2(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 2); }
static void tile_iq4_xs_3(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 3); }
static void tile_iq4_xs_4(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 4); }
static void tile_iq4_xs_5(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 5); }
static void tile_iq4_xs_6(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 6); }
static void tile_iq4_xs_7(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 7); }
static void tile_iq4_xs_8(const qmm_ctx *c, int t, int n, int n1) { tile_iq4_xs_x16(c, t, n, n1, 8); }

typedef void (*ltile_fn)(const qmm_ctx *c, int t0, int n0, int n1);

void sp_qmm_rows_lowbit_avx512(const qmm_ctx *c, int n0, int n1) {
    static const ltile_fn q5_K[LTB_MAX] = {tile_q5_K_1, tile_q5_K_2, tile_q5_K_3, tile_q5_K_4,
                                           tile_q5_K_5, tile_q5_K_6, tile_q5_K_7, tile_q5_K_8};
    static const ltile_fn q3_K[LTB_MAX] = {tile_q3_K_1, tile_q3_K_2, tile_q3_K_3, tile_q3_K_4,
                                           tile_q3_K_5, tile_q3_K_6, tile_q3_K_7, tile_q3_K_8};
    static const ltile_fn iq4_xs[LTB_MAX] = {tile_iq4_xs_1, tile_iq4_xs_2, tile_iq4_xs_3, tile_iq4_xs_4,
                                             tile_iq4_xs_5, tile_iq4_xs_6, tile_iq4_xs_7, tile_iq4_xs_8};
    if (!c->packed || !sp_lowbit_packs(c->dt)) {
        sp_qmm_rows_lowbit_avx2(c, n0, n1);
        return;
    }
    const ltile_fn *tiles = c->dt == SP_DT_Q5_K ? q5_K : c->dt == SP_DT_Q3_K ? q3_K : iq4_xs;
    /* 16-row tiles (the claimed row ranges start at multiples of 16) */
    SP_ASSERT(n0 % KX_ROWS == 0);
    for (int n = n0; n < n1; n += KX_ROWS) {
        int ne = n + KX_ROWS < n1 ? n + KX_ROWS : n1;
        for (int t = 0; t < c->T; t += LTB_MAX) tiles[(c->T - t < LTB_MAX ? c->T - t : LTB_MAX) - 1](c, t, n, ne);
    }
}
