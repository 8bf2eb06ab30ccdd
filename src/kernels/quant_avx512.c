/* quant_avx512.c — the quantized row kernels for AVX-512 with VNNI (vpdpbusd / vpdpwssd),
 * in the canonical order of quant_internal.h. Entered only when sp_cpu_level() is
 * SP_CPU_AVX512 and the processor has AVX512-VNNI.
 *
 * Tiles: TB tokens (1..4) × 4 weight rows; each weight block is loaded and unpacked once per
 * tile and used for all TB tokens, so a T-token call reads W once per 4 tokens from memory
 * (the rest from cache). Row remainders reuse the last row and drop its results. Within one
 * output the operations are exactly those of the scalar kernels: integer block sums (exact),
 * then the float scale products and fmas in block order, the 16 lanes of the 32-blocks held
 * in one register as [even block's 8 lanes | odd block's 8 lanes]. */
#include <immintrin.h>
#include <string.h>

#include "quant_internal.h"

#define NB 4 /* weight rows per tile */

static SP_ALWAYS_INLINE uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* Software prefetch: the first token tile of a row tile requests the next row tile's bytes
 * (rows are contiguous) at an even pace over its K loop, so DRAM streams the next rows while
 * these are computed; the hardware prefetchers stop at 4 KiB pages. qpf_step: bytes to
 * request per step of a loop of `steps` steps covering `bytes`. */
typedef struct {
    const char *p, *end;
    size_t step;
} qpf;

static SP_ALWAYS_INLINE qpf qpf_init(const qmm_ctx *c, int t0, int n1, int steps) {
    qpf f = {NULL, NULL, 0};
    if (t0 != 0 || n1 >= c->N) return f;
    int rows = c->N - n1 < NB ? c->N - n1 : NB;
    f.p = (const char *)c->W + (size_t)n1 * c->wrow;
    f.end = f.p + (size_t)rows * c->wrow;
    f.step = ((size_t)rows * c->wrow + (size_t)steps - 1) / (size_t)steps;
    return f;
}

static SP_ALWAYS_INLINE void qpf_advance(qpf *f) {
    if (!f->p) return;
    const char *goal = f->p + f->step;
    for (; f->p < goal && f->p < f->end; f->p += 64) _mm_prefetch(f->p, _MM_HINT_T0);
}

/* ---- Q8_0 / Q4_0 ------------------------------------------------------------------------ */
/* two blocks' integer weights as unsigned bytes u with v = u − bias: Q8_0 flips the sign bit
 * (u = v + 128), Q4_0 unpacks nibbles (u = v + 8) into element order [lo | hi] per block */
static SP_ALWAYS_INLINE __m512i w32_pair(const uint8_t *b0, const uint8_t *b1, const int Q4) {
    if (Q4) {
        __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 2))),
                                             _mm_loadu_si128((const __m128i *)(b1 + 2)), 1);
        __m512i t = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), _mm512_castsi256_si512(ab));
        t = _mm512_mask_blend_epi64(0xCC, t, _mm512_srli_epi16(t, 4));
        return _mm512_and_si512(t, _mm512_set1_epi8(0x0F));
    }
    __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                                   _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
    return _mm512_xor_si512(t, _mm512_set1_epi8((char)0x80));
}

/* one block (b1 absent): the same in the low half, zeros above */
static SP_ALWAYS_INLINE __m512i w32_one(const uint8_t *b0, const int Q4) {
    if (Q4) {
        __m128i a = _mm_loadu_si128((const __m128i *)(b0 + 2));
        __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(a), _mm_srli_epi16(a, 4), 1);
        return _mm512_zextsi256_si512(_mm256_and_si256(t, _mm256_set1_epi8(0x0F)));
    }
    __m256i t = _mm256_loadu_si256((const __m256i *)(b0 + 2));
    return _mm512_zextsi256_si512(_mm256_xor_si256(t, _mm256_set1_epi8((char)0x80)));
}

/* [f(s0) × 8 | f(s1) × 8] from two f16 scales */
static SP_ALWAYS_INLINE __m512 scale_pair_f16(uint16_t s0, uint16_t s1) {
    __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)s0 | (uint32_t)s1 << 16)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(f));
}

static SP_ALWAYS_INLINE __m512 scale_pair_f32(const float *d) {
    __m128 f = _mm_castpd_ps(_mm_load_sd((const double *)d));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(f));
}

static SP_ALWAYS_INLINE void tile32(const qmm_ctx *c, int t0, int n0, int n1, const int TB, const int Q4) {
    const int nb = c->K / 32, bsz = Q4 ? 18 : 34;
    const uint8_t *wr[NB];
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    qx_row xr[4];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    const __m512i cbias = _mm512_set1_epi8((char)(Q4 ? 8 : 0x80));
    __m512 acc[4][NB];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    qpf pf = qpf_init(c, t0, n1, nb / 2 > 0 ? nb / 2 : 1);
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i wv[NB];
        __m512 wd[NB];
        qpf_advance(&pf);
        for (int j = 0; j < NB; j++) {
            const uint8_t *b0 = wr[j] + (size_t)b * bsz;
            wv[j] = w32_pair(b0, b0 + bsz, Q4);
            wd[j] = scale_pair_f16(rd16(b0), rd16(b0 + bsz));
        }
        for (int i = 0; i < TB; i++) {
            __m512i xv = _mm512_loadu_si512(xr[i].q + 32 * b);
            __m512i nbias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), cbias, xv));
            __m512 xd = scale_pair_f32(xr[i].d + b);
            for (int j = 0; j < NB; j++) {
                __m512i p = _mm512_dpbusd_epi32(nbias, wv[j], xv);
                acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(wd[j], xd), _mm512_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    if (b < nb) { /* last, even-numbered block: lanes 0..7 only */
        __m512i wv[NB];
        __m512 wd[NB];
        for (int j = 0; j < NB; j++) {
            const uint8_t *b0 = wr[j] + (size_t)b * bsz;
            wv[j] = w32_one(b0, Q4);
            wd[j] = scale_pair_f16(rd16(b0), rd16(b0));
        }
        for (int i = 0; i < TB; i++) {
            __m512i xv = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr[i].q + 32 * b)));
            __m512i nbias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), cbias, xv));
            __m512 xd = _mm512_set1_ps(xr[i].d[b]);
            for (int j = 0; j < NB; j++) {
                __m512i p = _mm512_dpbusd_epi32(nbias, wv[j], xv);
                acc[i][j] = _mm512_mask3_fmadd_ps(_mm512_mul_ps(wd[j], xd), _mm512_cvtepi32_ps(p), acc[i][j], 0x00FF);
            }
        }
    }
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB && n0 + j < n1; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = sp_hsum16_avx512(acc[i][j]);
}

/* ---- Q4_K ----------------------------------------------------------------------------------- */
/* the 8 sub-block scales and mins of a Q4_K block as ints */
static SP_ALWAYS_INLINE void q4k_scales(const uint8_t *s, int *sc, int *m) {
    for (int j = 0; j < 4; j++) sc[j] = s[j] & 63, m[j] = s[j + 4] & 63;
    for (int j = 4; j < 8; j++) sc[j] = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, m[j] = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
}

/* sum of the 16 int32 lanes (exact) */
static SP_ALWAYS_INLINE int hsum_i32(__m512i v) { return _mm512_reduce_add_epi32(v); }

static SP_ALWAYS_INLINE void tile_q4_K(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *wr[NB];
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    qx_row xr[4];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    float acc[4][NB] = {{0}};
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    qpf pf = qpf_init(c, t0, n1, nsb);
    for (int b = 0; b < nsb; b++) {
        qpf_advance(&pf);
        for (int j = 0; j < NB; j++) {
            const uint8_t *blk = wr[j] + (size_t)b * 144;
            int sc[8], m[8];
            q4k_scales(blk + 4, sc, m);
            /* chunk c: [low nibbles (sub-block 2c) | high nibbles (2c + 1)], scales as int16 */
            __m512i wv[4], sv[4];
            for (int q = 0; q < 4; q++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * q));
                wv[q] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), lo4);
                sv[q] = _mm512_inserti64x4(_mm512_set1_epi16((short)sc[2 * q]), _mm256_set1_epi16((short)sc[2 * q + 1]), 1);
            }
            __m256i mv = _mm256_set_epi16((short)m[7], (short)m[7], (short)m[6], (short)m[6], (short)m[5], (short)m[5],
                                          (short)m[4], (short)m[4], (short)m[3], (short)m[3], (short)m[2], (short)m[2],
                                          (short)m[1], (short)m[1], (short)m[0], (short)m[0]);
            float d = _cvtsh_ss(rd16(blk)), dmin = _cvtsh_ss(rd16(blk + 2));
            for (int i = 0; i < TB; i++) {
                const int8_t *xq = xr[i].q + SP_QK_K * b;
                __m512i s = _mm512_setzero_si512();
                for (int q = 0; q < 4; q++)
                    s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(wv[q], _mm512_loadu_si512(xq + 64 * q)), sv[q]);
                __m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr[i].bsums + 16 * b)), mv);
                int isum = hsum_i32(s), imin = hsum_i32(_mm512_zextsi256_si512(mins));
                float xd = xr[i].d[b];
                acc[i][j] = fmaf(d * xd, (float)isum, acc[i][j]);
                acc[i][j] = fmaf(-(dmin * xd), (float)imin, acc[i][j]);
            }
        }
    }
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB && n0 + j < n1; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = acc[i][j];
}

/* ---- Q6_K ----------------------------------------------------------------------------------- */
static SP_ALWAYS_INLINE void tile_q6_K(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    const uint8_t *wr[NB];
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    qx_row xr[4];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    float acc[4][NB] = {{0}};
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi2 = _mm512_set1_epi8(0x30);
    /* lane l of scale vector v takes group 4v + l / 8 (int16 lanes after maddubs) */
    const __m512i sidx0 = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0,
                                           0, 0, 0, 0, 0, 0, 0);
    qpf pf = qpf_init(c, t0, n1, nsb);
    for (int b = 0; b < nsb; b++) {
        qpf_advance(&pf);
        for (int j = 0; j < NB; j++) {
            const uint8_t *blk = wr[j] + (size_t)b * 210;
            __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
            __m512i wv[4], sv[4];
            for (int h = 0; h < 2; h++) {
                __m512i L = _mm512_loadu_si512(blk + 64 * h);
                __m256i H = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
                __m512i Hz = _mm512_inserti64x4(_mm512_castsi256_si512(H), _mm256_srli_epi16(H, 2), 1);
                /* values 128h + 0..63: low nibbles | bits (0,1) / (2,3) of qh as bits 4, 5 */
                wv[2 * h] = _mm512_or_si512(_mm512_and_si512(L, lo4), _mm512_and_si512(_mm512_slli_epi16(Hz, 4), hi2));
                /* values 128h + 64..127: high nibbles | bits (4,5) / (6,7) of qh */
                wv[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), lo4), _mm512_and_si512(Hz, hi2));
            }
            for (int v = 0; v < 4; v++)
                sv[v] = _mm512_permutexvar_epi16(_mm512_add_epi16(sidx0, _mm512_set1_epi16((short)(4 * v))), sc16);
            float d = _cvtsh_ss(rd16(blk + 208));
            for (int i = 0; i < TB; i++) {
                const int8_t *xq = xr[i].q + SP_QK_K * b;
                __m512i s = _mm512_setzero_si512();
                for (int v = 0; v < 4; v++)
                    s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(wv[v], _mm512_loadu_si512(xq + 64 * v)), sv[v]);
                /* − 32 · Σ_g sc[g] · bsum[g] */
                __m256i bias = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr[i].bsums + 16 * b)),
                                                 _mm512_castsi512_si256(sc16));
                s = _mm512_sub_epi32(s, _mm512_zextsi256_si512(_mm256_slli_epi32(bias, 5)));
                acc[i][j] = fmaf(d * xr[i].d[b], (float)hsum_i32(s), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB && n0 + j < n1; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = acc[i][j];
}

/* ---- driver: one out-of-line function per (type, TB) ------------------------------------------ */
static void tile_q8_0_1(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 1, 0); }
static void tile_q8_0_2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 2, 0); }
static void tile_q8_0_3(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 3, 0); }
static void tile_q8_0_4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 4, 0); }
static void tile_q4_0_1(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 1, 1); }
static void tile_q4_0_2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 2, 1); }
static void tile_q4_0_3(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 3, 1); }
static void tile_q4_0_4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 4, 1); }
static void tile_q4_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 1); }
static void tile_q4_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 2); }
static void tile_q4_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 3); }
static void tile_q4_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 4); }
static void tile_q6_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 1); }
static void tile_q6_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 2); }
static void tile_q6_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 3); }
static void tile_q6_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 4); }

typedef void (*qtile_fn)(const qmm_ctx *c, int t0, int n0, int n1);

void qmm_rows_avx512(const qmm_ctx *c, int n0, int n1) {
    static const qtile_fn q8_0[4] = {tile_q8_0_1, tile_q8_0_2, tile_q8_0_3, tile_q8_0_4};
    static const qtile_fn q4_0[4] = {tile_q4_0_1, tile_q4_0_2, tile_q4_0_3, tile_q4_0_4};
    static const qtile_fn q4_K[4] = {tile_q4_K_1, tile_q4_K_2, tile_q4_K_3, tile_q4_K_4};
    static const qtile_fn q6_K[4] = {tile_q6_K_1, tile_q6_K_2, tile_q6_K_3, tile_q6_K_4};
    const qtile_fn *tiles = c->dt == SP_DT_Q8_0 ? q8_0 : c->dt == SP_DT_Q4_0 ? q4_0 : c->dt == SP_DT_Q4_K ? q4_K : q6_K;
    for (int n = n0; n < n1; n += NB) {
        int ne = n + NB < n1 ? n + NB : n1;
        for (int t = 0; t < c->T; t += 4) tiles[(c->T - t < 4 ? c->T - t : 4) - 1](c, t, n, ne);
    }
}
