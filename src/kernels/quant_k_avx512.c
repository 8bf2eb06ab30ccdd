/* quant_k_avx512.c — the Q4_K and Q6_K row kernels for AVX-512 with VNNI, in the canonical order
 * of quant_internal.h (entered from sp_qmm_rows_avx512, the same tier conditions).
 *
 * The file's rows (no load-time repack) take 4-row tiles: each row's super-block is unpacked
 * once into registers (kept in L1) and serves up to KTB_MAX tokens; the 4 rows' integer totals
 * of a token are reduced at once and the float part runs with the rows in lanes. Matrices the
 * loader repacked (sp_mat_pack; 16 rows per group, one row per int32 lane) take 16-row tiles:
 * the integer sums of the 16 rows build up in the lanes with the activation broadcast, so there
 * is no horizontal reduction, the scales of the 16 rows are one widening load, and the float
 * part is one fma per super-block for 16 rows (docs/QUANT.md, "Packed Q4_K and Q6_K"). Within
 * one output the operations are the scalar kernel's, so the bits are the same. */
#include <immintrin.h>
#include <string.h>

#include "kernels_avx512.h"
#include "quant_internal.h"

#define NB 4 /* rows per tile of the file's rows */
/* tokens per tile: the unpacked super-blocks (kept in L1) serve up to 8 tokens, so an 8-token
 * verify unpacks each weight row once (measured: Q4_K / Q6_K 8-token matmul ~0.8x the time of
 * two 4-token tiles; docs/ROUND_COST.md) */
#define KTB_MAX 8

static SP_ALWAYS_INLINE uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* Software prefetch: the first token tile of a row tile requests the next `rows` rows (rows
 * are contiguous, and a 16-row group of packed rows is 16 rows' bytes) at an even pace over its
 * `steps` super-blocks, so DRAM streams them while these are computed. The 16-row tiles request
 * them non-temporally (the bytes are read once per call; measured on the LM head and the layer
 * shapes, one thread: 1.04-1.18x the GB/s of requests into every level, requests into L2 0.8x,
 * two groups ahead no gain). */
static SP_ALWAYS_INLINE qstream kpf_init(const qmm_ctx *c, int t0, int n_next, int rows, int steps) {
    qstream none = {NULL, NULL, 0};
    return t0 != 0 ? none : qstream_rows(c, n_next, rows, steps);
}

/* ---- the file's rows, 4 per tile ------------------------------------------------------------ */
/* a 4-row tile's start: its rows' weight pointers (rows past n1 repeat the last one), its
 * tokens' activation rows, zeroed accumulators */
static SP_ALWAYS_INLINE void ktile_begin(const qmm_ctx *c, int t0, int n0, int n1, const int TB, const uint8_t **wr,
                                         qx_row *xr, __m128 *acc) {
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    for (int i = 0; i < TB; i++) acc[i] = _mm_setzero_ps();
}

/* The 4 rows' integer totals of one token at once: lane j of the result = Σ lanes of s[j]
 * (exact), by a transpose-and-add network instead of four horizontal sums. */
static SP_ALWAYS_INLINE __m128i hsum4x16_i32(const __m512i *s) {
    __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/* lane j = Σ of the 4 lanes of m[j] */
static SP_ALWAYS_INLINE __m128i hsum4x4_i32(const __m128i *m) {
    return _mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3]));
}

/* Each row's weights are unpacked once per super-block into wv / sv (they stay in L1), then
 * every token takes the 4 rows together: the integer totals of the 4 rows are reduced at once
 * and the float part runs with the rows in lanes — per lane the operations of the scalar
 * kernel, so the bits are the same. */
static SP_ALWAYS_INLINE void tile_q4_K(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *wr[NB];
    qx_row xr[KTB_MAX];
    __m128 acc[KTB_MAX];
    ktile_begin(c, t0, n0, n1, TB, wr, xr, acc);
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    /* vpermw indices: chunk q's scales [sc[2q] × 16 | sc[2q+1] × 16] */
    const __m512i sidx = _mm512_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0);
    qstream pf = kpf_init(c, t0, n1, NB, nsb);
    for (int b = 0; b < nsb; b++) {
        qstream_next(&pf);
        __m512i wv[NB][4], sv[NB][4];
        __m128i m16[NB];
        float dj[NB], mj[NB];
        for (int j = 0; j < NB; j++) {
            const uint8_t *blk = wr[j] + (size_t)b * 144;
            uint64_t sc8, m8;
            q4k_scales8(blk + 4, &sc8, &m8);
            m16[j] = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m8));
            dj[j] = _cvtsh_ss(rd16(blk)), mj[j] = _cvtsh_ss(rd16(blk + 2));
            __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
            /* chunk q: [low nibbles (sub-block 2q) | high nibbles (2q + 1)], scales as int16 */
            for (int q = 0; q < 4; q++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * q));
                wv[j][q] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), lo4);
                sv[j][q] = _mm512_permutexvar_epi16(_mm512_add_epi16(sidx, _mm512_set1_epi16((short)(2 * q))), sc16);
            }
        }
        __m128 d4 = _mm_loadu_ps(dj), dmin4 = _mm_loadu_ps(mj);
        for (int i = 0; i < TB; i++) {
            const int8_t *xq = xr[i].q + SP_QK_K * b;
            __m512i xv[4], s[NB];
            __m128i mm[NB];
            for (int q = 0; q < 4; q++) xv[q] = _mm512_loadu_si512(xq + 64 * q);
            /* bsum[2j] + bsum[2j+1] for sub-block j, as 8 int16 */
            __m256i pp = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr[i].bsums + 16 * b)), _mm256_set1_epi16(1));
            __m128i ps = _mm_packs_epi32(_mm256_castsi256_si128(pp), _mm256_extracti128_si256(pp, 1));
            for (int j = 0; j < NB; j++) {
                s[j] = _mm512_setzero_si512();
                for (int q = 0; q < 4; q++)
                    s[j] = _mm512_dpwssd_epi32(s[j], _mm512_maddubs_epi16(wv[j][q], xv[q]), sv[j][q]);
                mm[j] = _mm_madd_epi16(ps, m16[j]);
            }
            __m128 isum = _mm_cvtepi32_ps(hsum4x16_i32(s)), imin = _mm_cvtepi32_ps(hsum4x4_i32(mm));
            __m128 xd = _mm_set1_ps(xr[i].d[b]);
            acc[i] = _mm_fmadd_ps(_mm_mul_ps(d4, xd), isum, acc[i]);
            acc[i] = _mm_fmadd_ps(_mm_xor_ps(_mm_mul_ps(dmin4, xd), _mm_set1_ps(-0.0f)), imin, acc[i]);
        }
    }
    for (int i = 0; i < TB; i++) {
        float y[4];
        _mm_storeu_ps(y, acc[i]);
        for (int j = 0; j < NB && n0 + j < n1; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = y[j];
    }
}

/* The file's Q6_K rows, 4 per tile: 64-byte value vectors built from the ql / qh bytes, the
 * group scales spread over int16 lanes by permutes, and per token the 4 rows' totals reduced
 * at once (hsum4x16_i32). */
static SP_ALWAYS_INLINE void tile_q6_K(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *wr[NB];
    qx_row xr[KTB_MAX];
    __m128 acc[KTB_MAX];
    ktile_begin(c, t0, n0, n1, TB, wr, xr, acc);
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi2 = _mm512_set1_epi8(0x30);
    /* lane l of scale vector v takes group 4v + l / 8 (int16 lanes after maddubs) */
    const __m512i sidx0 = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0,
                                           0, 0, 0, 0, 0, 0, 0);
    qstream pf = kpf_init(c, t0, n1, NB, nsb);
    for (int b = 0; b < nsb; b++) {
        qstream_next(&pf);
        __m512i wv[NB][4], sv[NB][4];
        __m256i sc16[NB];
        float dj[NB];
        for (int j = 0; j < NB; j++) {
            const uint8_t *blk = wr[j] + (size_t)b * 210;
            dj[j] = _cvtsh_ss(rd16(blk + 208));
            sc16[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
            for (int h = 0; h < 2; h++) {
                __m512i L = _mm512_loadu_si512(blk + 64 * h);
                __m256i H = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
                __m512i Hz = _mm512_inserti64x4(_mm512_castsi256_si512(H), _mm256_srli_epi16(H, 2), 1);
                /* values 128h + 0..63: low nibbles | bits (0,1) / (2,3) of qh as bits 4, 5 */
                wv[j][2 * h] = _mm512_or_si512(_mm512_and_si512(L, lo4), _mm512_and_si512(_mm512_slli_epi16(Hz, 4), hi2));
                /* values 128h + 64..127: high nibbles | bits (4,5) / (6,7) of qh */
                wv[j][2 * h + 1] =
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), lo4), _mm512_and_si512(Hz, hi2));
            }
            for (int v = 0; v < 4; v++)
                sv[j][v] = _mm512_permutexvar_epi16(_mm512_add_epi16(sidx0, _mm512_set1_epi16((short)(4 * v))),
                                                    _mm512_castsi256_si512(sc16[j]));
        }
        __m128 d4 = _mm_loadu_ps(dj);
        for (int i = 0; i < TB; i++) {
            const int8_t *xq = xr[i].q + SP_QK_K * b;
            __m512i xv[4], s[NB];
            for (int v = 0; v < 4; v++) xv[v] = _mm512_loadu_si512(xq + 64 * v);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xr[i].bsums + 16 * b));
            for (int j = 0; j < NB; j++) {
                s[j] = _mm512_setzero_si512();
                for (int v = 0; v < 4; v++)
                    s[j] = _mm512_dpwssd_epi32(s[j], _mm512_maddubs_epi16(wv[j][v], xv[v]), sv[j][v]);
                /* − 32 · Σ_g sc[g] · bsum[g] */
                s[j] = _mm512_sub_epi32(s[j], _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(bs, sc16[j]), 5)));
            }
            __m128 isum = _mm_cvtepi32_ps(hsum4x16_i32(s));
            acc[i] = _mm_fmadd_ps(_mm_mul_ps(d4, _mm_set1_ps(xr[i].d[b])), isum, acc[i]);
        }
    }
    for (int i = 0; i < TB; i++) {
        float y[4];
        _mm_storeu_ps(y, acc[i]);
        for (int j = 0; j < NB && n0 + j < n1; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = y[j];
    }
}

/* ---- packed rows (quant_internal.h), 16 per tile ------------------------------------------- */
/* Packed Q4_K (quant_internal.h): a tile is 16 rows, one per int32 lane, and TB tokens. Per
 * super-block and sub-block j, four 64-byte loads give, masked, the low nibbles (elements
 * 32j + 4i .. + 3) and 16 × the high nibbles (32j + 16 + 4i ..) of the 16 rows; per token eight
 * vpdpbusd against broadcast int32 of the activation give Σ low · x and 16 · Σ high · x (both
 * exact, below 2^20), the shift by 4 is exact, and one vpmulld by the rows' sc[j] gives the
 * terms of isum. imin takes one vpdpwssd per sub-block pair (m[2q], m[2q + 1] against bsum
 * pair sums, all below 2^15). The float part per lane is the scalar kernel's. */
static SP_ALWAYS_INLINE __m512i bcast_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static SP_ALWAYS_INLINE void tile_q4_K_x16(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *grp = c->W + (size_t)n0 * c->wrow;
    qx_row xr[KTB_MAX];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    __m512 acc[KTB_MAX];
    for (int i = 0; i < TB; i++) acc[i] = _mm512_setzero_ps();
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8((char)0xF0);
    qstream pf = kpf_init(c, t0, n0 + KX_ROWS, KX_ROWS, nsb);
    for (int b = 0; b < nsb; b++) {
        qstream_next_nta(&pf);
        const uint8_t *rec = grp + (size_t)b * Q4KX_SB_BYTES;
        __m512i isum[KTB_MAX];
        for (int i = 0; i < TB; i++) isum[i] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i wl[4], wh[4];
            for (int i = 0; i < 4; i++) {
                __m512i raw = _mm512_loadu_si512(rec + 320 + 64 * (4 * j + i));
                wl[i] = _mm512_and_si512(raw, lo4), wh[i] = _mm512_and_si512(raw, hi4);
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + 64 + 16 * j)));
            for (int t = 0; t < TB; t++) {
                const int8_t *xq = xr[t].q + SP_QK_K * b + 32 * j;
                __m512i sl = _mm512_setzero_si512(), sh = _mm512_setzero_si512();
                for (int i = 0; i < 4; i++) {
                    sl = _mm512_dpbusd_epi32(sl, wl[i], bcast_i32(xq + 4 * i));
                    sh = _mm512_dpbusd_epi32(sh, wh[i], bcast_i32(xq + 16 + 4 * i));
                }
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(sl, _mm512_srai_epi32(sh, 4)), sc));
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
    const __mmask16 keep = (__mmask16)((1u << (n1 - n0)) - 1);
    for (int t = 0; t < TB; t++) _mm512_mask_storeu_ps(c->Y + (size_t)(t0 + t) * c->N + n0, keep, acc[t]);
}

/* Packed Q6_K (quant_internal.h): a tile is 16 rows, one per int32 lane, and TB tokens. Group g
 * is three 64-byte loads: ql nibbles of its element sets A, B (L0) and C, D (L1) and their top
 * bits (H). One mask and one bit select give u of A and of C; a shift, a mask and a select give
 * 4u of B and of D (the nibble at bits 2..5, the top bits at 6, 7). Per token, two vpdpbusd
 * from −32 · bsum[g] take A, C and two from 0 take 4u of B, D (below 2^18); the shift by 2 is
 * exact, and one vpmulld by the rows' sc[g] gives the terms of isum. The float part per lane is
 * the scalar kernel's. */
static SP_ALWAYS_INLINE __m512i bits_select(__m512i a, __m512i b, __m512i m) { /* m ? b : a, per bit */
    return _mm512_ternarylogic_epi32(a, b, m, 0xD8);
}

static SP_ALWAYS_INLINE void tile_q6_K_x16(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *grp = c->W + (size_t)n0 * c->wrow;
    qx_row xr[KTB_MAX];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    __m512 acc[KTB_MAX];
    for (int i = 0; i < TB; i++) acc[i] = _mm512_setzero_ps();
    const __m512i lo4 = _mm512_set1_epi8(0x0F), mid4 = _mm512_set1_epi8(0x3C);
    const __m512i sel45 = _mm512_set1_epi8(0x30), sel67 = _mm512_set1_epi8((char)0xC0);
    qstream pf = kpf_init(c, t0, n0 + KX_ROWS, KX_ROWS, nsb);
    for (int b = 0; b < nsb; b++) {
        qstream_next_nta(&pf);
        const uint8_t *rec = grp + (size_t)b * Q6KX_SB_BYTES;
        int32_t nb32[KTB_MAX][16]; /* −32 · bsum[g] per token */
        __m512i isum[KTB_MAX];
        for (int t = 0; t < TB; t++) {
            __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(xr[t].bsums + 16 * b)));
            _mm512_storeu_si512(nb32[t], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
            isum[t] = _mm512_setzero_si512();
        }
        for (int g = 0; g < 16; g++) {
            const uint8_t *q = rec + 192 * g;
            const __m512i L0 = _mm512_loadu_si512(q), L1 = _mm512_loadu_si512(q + 64), H = _mm512_loadu_si512(q + 128);
            const __m512i Hs = _mm512_slli_epi16(H, 4);
            const __m512i uA = bits_select(_mm512_and_si512(L0, lo4), H, sel45);
            const __m512i uB4 = bits_select(_mm512_and_si512(_mm512_srli_epi16(L0, 2), mid4), H, sel67);
            const __m512i uC = bits_select(_mm512_and_si512(L1, lo4), Hs, sel45);
            const __m512i uD4 = bits_select(_mm512_and_si512(_mm512_srli_epi16(L1, 2), mid4), Hs, sel67);
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(rec + Q6KX_SC + 16 * g)));
            for (int t = 0; t < TB; t++) {
                const int8_t *xq = xr[t].q + SP_QK_K * b + 16 * g;
                __m512i s1 = _mm512_dpbusd_epi32(_mm512_set1_epi32(nb32[t][g]), uA, bcast_i32(xq));
                __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uB4, bcast_i32(xq + 4));
                s1 = _mm512_dpbusd_epi32(s1, uC, bcast_i32(xq + 8));
                s4 = _mm512_dpbusd_epi32(s4, uD4, bcast_i32(xq + 12));
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(s1, _mm512_srai_epi32(s4, 2)), sc));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + Q6KX_D)));
        for (int t = 0; t < TB; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(xr[t].d[b])), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
    const __mmask16 keep = (__mmask16)((1u << (n1 - n0)) - 1);
    for (int t = 0; t < TB; t++) _mm512_mask_storeu_ps(c->Y + (size_t)(t0 + t) * c->N + n0, keep, acc[t]);
}

/* ---- driver: one out-of-line function per (layout, type, TB) ----------------------------------- */
static void tile_q4_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 1); }
static void tile_q4_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 2); }
static void tile_q4_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 3); }
static void tile_q4_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 4); }
static void tile_q4_K_5(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 5); }
static void tile_q4_K_6(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 6); }
static void tile_q4_K_7(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 7); }
static void tile_q4_K_8(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 8); }
static void tile_q4_K_packed_1(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 1); }
static void tile_q4_K_packed_2(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 2); }
static void tile_q4_K_packed_3(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 3); }
static void tile_q4_K_packed_4(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 4); }
static void tile_q4_K_packed_5(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 5); }
static void tile_q4_K_packed_6(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 6); }
static void tile_q4_K_packed_7(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 7); }
static void tile_q4_K_packed_8(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K_x16(c, t, n, n1, 8); }
static void tile_q6_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 1); }
static void tile_q6_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 2); }
static void tile_q6_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 3); }
static void tile_q6_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 4); }
static void tile_q6_K_5(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 5); }
static void tile_q6_K_6(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 6); }
static void tile_q6_K_7(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 7); }
static void tile_q6_K_8(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 8); }
static void tile_q6_K_packed_1(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 1); }
static void tile_q6_K_packed_2(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 2); }
static void tile_q6_K_packed_3(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 3); }
static void tile_q6_K_packed_4(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 4); }
static void tile_q6_K_packed_5(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 5); }
static void tile_q6_K_packed_6(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 6); }
static void tile_q6_K_packed_7(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 7); }
static void tile_q6_K_packed_8(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K_x16(c, t, n, n1, 8); }

typedef void (*ktile_fn)(const qmm_ctx *c, int t0, int n0, int n1);

void sp_qmm_rows_avx512_k(const qmm_ctx *c, int n0, int n1) {
    static const ktile_fn q4_K[KTB_MAX] = {tile_q4_K_1, tile_q4_K_2, tile_q4_K_3, tile_q4_K_4,
                                           tile_q4_K_5, tile_q4_K_6, tile_q4_K_7, tile_q4_K_8};
    static const ktile_fn q6_K[KTB_MAX] = {tile_q6_K_1, tile_q6_K_2, tile_q6_K_3, tile_q6_K_4,
                                           tile_q6_K_5, tile_q6_K_6, tile_q6_K_7, tile_q6_K_8};
    static const ktile_fn q4_K_packed[KTB_MAX] = {tile_q4_K_packed_1, tile_q4_K_packed_2, tile_q4_K_packed_3,
                                                  tile_q4_K_packed_4, tile_q4_K_packed_5, tile_q4_K_packed_6,
                                                  tile_q4_K_packed_7, tile_q4_K_packed_8};
    static const ktile_fn q6_K_packed[KTB_MAX] = {tile_q6_K_packed_1, tile_q6_K_packed_2, tile_q6_K_packed_3,
                                                  tile_q6_K_packed_4, tile_q6_K_packed_5, tile_q6_K_packed_6,
                                                  tile_q6_K_packed_7, tile_q6_K_packed_8};
    const ktile_fn *tiles = c->dt == SP_DT_Q4_K ? (c->packed ? q4_K_packed : q4_K) : (c->packed ? q6_K_packed : q6_K);
    /* packed: 16-row tiles (the claimed row ranges start at multiples of 16) */
    const int nb = c->packed ? KX_ROWS : NB;
    SP_ASSERT(!c->packed || n0 % KX_ROWS == 0);
    for (int n = n0; n < n1; n += nb) {
        int ne = n + nb < n1 ? n + nb : n1;
        for (int t = 0; t < c->T; t += KTB_MAX) tiles[(c->T - t < KTB_MAX ? c->T - t : KTB_MAX) - 1](c, t, n, ne);
    }
}
