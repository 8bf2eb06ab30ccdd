/* quant_avx512.c — the quantized row kernels for AVX-512 with VNNI (vpdpbusd / vpdpwssd),
 * in the canonical order of quant_internal.h. Entered only when sp_cpu_level() is
 * SP_CPU_AVX512 and the processor has AVX512-VNNI.
 *
 * Tiles: TB tokens (1..4) × 4 weight rows; each weight block is
 * loaded and unpacked once per tile and used for all TB tokens, so a T-token call reads W
 * once per tile of tokens from memory (the rest from cache). Row remainders reuse the last row and drop its results. Within one
 * output the operations are exactly those of the scalar kernels: integer block sums (exact),
 * then the float scale products and fmas in block order — the 16 lanes of the 32-blocks held
 * in one register as [even block's 8 lanes | odd block's 8 lanes]. Q4_0 matrices the loader
 * repacked (sp_mat_pack, quant_internal.h) take tile32_packed, the same operations on other
 * loads. The K-quants (Q4_K, Q6_K) have their own file, quant_k_avx512.c. */
#include <immintrin.h>
#include <string.h>

#include "kernels_avx512.h"
#include "quant_internal.h"

#define NB 4 /* weight rows per tile */

/* the canonical 16 → 1 tree of quant_internal.h: (i, i+8), (i, i+4), (i, i+2), (0, 1) */
static SP_ALWAYS_INLINE float hsum16_canon(__m512 v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

static SP_ALWAYS_INLINE uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* Software prefetch: the first token tile of a row tile requests the bytes of the row tile
 * after the next one (rows are contiguous) at an even pace over its K loop, so DRAM streams two
 * tiles ahead of the rows being computed; the hardware prefetchers stop at 4 KiB pages. Measured
 * on every matmul of the qwen3-0.6b preset's GGUF files, one thread (bench_kernels gguf): two
 * tiles ahead streams the Q8_0 / Q4_0 files' decode 1.14 / 1.14x faster than one tile ahead
 * (three ahead: 1.08 / 1.19x). qpf_init spreads that tile's bytes over the `steps`
 * iterations of the K loop; qstream_next requests one share. */
static SP_ALWAYS_INLINE qstream qpf_init(const qmm_ctx *c, int t0, int n1, int steps) {
    qstream none = {NULL, NULL, 0};
    return t0 != 0 ? none : qstream_rows(c, n1 + NB, NB, steps);
}

/* ---- Q8_0 / Q4_0 / Q5_0 ----------------------------------------------------------------- */
/* Q: 0 Q8_0, 1 Q4_0, 2 Q5_0 — block bytes, where the nibbles start, and the bias u − v */
#define QB_BYTES(Q) ((Q) == 0 ? 34 : (Q) == 1 ? 18 : 22)
#define QB_NIB(Q) ((Q) == 2 ? 6 : 2)
#define QB_BIAS(Q) ((Q) == 0 ? 0x80 : (Q) == 1 ? 8 : 16)

static SP_ALWAYS_INLINE uint32_t rd32(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    return h;
}

/* two blocks' integer weights as unsigned bytes u with v = u − bias: Q8_0 flips the sign bit
 * (u = v + 128), Q4_0 unpacks nibbles (u = v + 8) into element order [lo | hi] per block, Q5_0
 * adds 16 where the element's bit of qh is set (u = v + 16) */
static SP_ALWAYS_INLINE __m512i w32_pair(const uint8_t *b0, const uint8_t *b1, const int Q) {
    if (Q) {
        __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + QB_NIB(Q)))),
                                             _mm_loadu_si128((const __m128i *)(b1 + QB_NIB(Q))), 1);
        __m512i t = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), _mm512_castsi256_si512(ab));
        t = _mm512_mask_blend_epi64(0xCC, t, _mm512_srli_epi16(t, 4));
        t = _mm512_and_si512(t, _mm512_set1_epi8(0x0F));
        if (Q == 2) t = _mm512_mask_add_epi8(t, (__mmask64)rd32(b0 + 2) | (__mmask64)rd32(b1 + 2) << 32, t,
                                             _mm512_set1_epi8(16));
        return t;
    }
    __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                                   _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
    return _mm512_xor_si512(t, _mm512_set1_epi8((char)0x80));
}

/* one block (b1 absent): the same in the low half, zeros above */
static SP_ALWAYS_INLINE __m512i w32_one(const uint8_t *b0, const int Q) {
    if (Q) {
        __m128i a = _mm_loadu_si128((const __m128i *)(b0 + QB_NIB(Q)));
        __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(a), _mm_srli_epi16(a, 4), 1);
        t = _mm256_and_si256(t, _mm256_set1_epi8(0x0F));
        if (Q == 2) t = _mm256_mask_add_epi8(t, (__mmask32)rd32(b0 + 2), t, _mm256_set1_epi8(16));
        return _mm512_zextsi256_si512(t);
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

/* a tile's start: its rows' weight pointers (rows past n1 repeat the last one), its tokens'
 * activation rows, zeroed accumulators */
static SP_ALWAYS_INLINE void tile_begin(const qmm_ctx *c, int t0, int n0, int n1, const int TB, const uint8_t **wr,
                                        qx_row *xr, __m512 acc[4][NB]) {
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
}

/* acc[i][j] += d_w · d_x · (w · x) per lane, over blocks b and b + 1 of every token i of the tile
 * and every row j (wv / wd: the rows' unsigned weights and scales; the weight bias comes off
 * through the activations' sum against cbias) */
static SP_ALWAYS_INLINE void dot_pair_tokens(__m512 acc[4][NB], const __m512i *wv, const __m512 *wd, const qx_row *xr,
                                             int b, const int TB, __m512i cbias) {
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

/* the same for a last, unpaired block b: lanes 0..7 only */
static SP_ALWAYS_INLINE void dot_last_tokens(__m512 acc[4][NB], const __m512i *wv, const __m512 *wd, const qx_row *xr,
                                             int b, const int TB, __m512i cbias) {
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

/* the tile's outputs: each accumulator's canonical horizontal sum */
static SP_ALWAYS_INLINE void tile_store(const qmm_ctx *c, __m512 acc[4][NB], int t0, int n0, int n1, const int TB) {
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB && n0 + j < n1; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = hsum16_canon(acc[i][j]);
}

static SP_ALWAYS_INLINE void tile32(const qmm_ctx *c, int t0, int n0, int n1, const int TB, const int Q) {
    const int nb = c->K / 32, bsz = QB_BYTES(Q);
    const uint8_t *wr[NB];
    qx_row xr[4];
    __m512 acc[4][NB];
    tile_begin(c, t0, n0, n1, TB, wr, xr, acc);
    const __m512i cbias = _mm512_set1_epi8((char)QB_BIAS(Q));
    qstream pf = qpf_init(c, t0, n1, nb / 2 > 0 ? nb / 2 : 1);
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i wv[NB];
        __m512 wd[NB];
        qstream_next(&pf);
        for (int j = 0; j < NB; j++) {
            const uint8_t *b0 = wr[j] + (size_t)b * bsz;
            wv[j] = w32_pair(b0, b0 + bsz, Q);
            wd[j] = scale_pair_f16(rd16(b0), rd16(b0 + bsz));
        }
        dot_pair_tokens(acc, wv, wd, xr, b, TB, cbias);
    }
    if (b < nb) { /* last, even-numbered block: lanes 0..7 only */
        __m512i wv[NB];
        __m512 wd[NB];
        for (int j = 0; j < NB; j++) {
            const uint8_t *b0 = wr[j] + (size_t)b * bsz;
            wv[j] = w32_one(b0, Q);
            wd[j] = scale_pair_f16(rd16(b0), rd16(b0));
        }
        dot_last_tokens(acc, wv, wd, xr, b, TB, cbias);
    }
    tile_store(c, acc, t0, n0, n1, TB);
}

/* ---- Q4_1 / QA8: unsigned q (nibbles or bytes at +4) with a min term per block ----------------
 * p = Σ q · x and sx = Σ x per lane (dpbusd: 4 products of at most 255 · 127, exact), then
 * acc = fma(d · xd, p, acc) and acc = fma(m · xd, sx, acc): the scalar kernel's order. */
static SP_ALWAYS_INLINE __m512i affine_pair(const uint8_t *b0, const uint8_t *b1, const int A8) {
    if (!A8) return w32_pair(b0 + 2, b1 + 2, 1); /* Q4_0's unpacking of the nibbles at +4 */
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 4))),
                              _mm256_loadu_si256((const __m256i *)(b1 + 4)), 1);
}

static SP_ALWAYS_INLINE void affine_tokens(__m512 acc[4][NB], const __m512i *wv, const __m512 *wd, const __m512 *wm,
                                           const qx_row *xr, int b, const int TB, const int LAST) {
    for (int i = 0; i < TB; i++) {
        __m512i xv = LAST ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr[i].q + 32 * b)))
                          : _mm512_loadu_si512(xr[i].q + 32 * b);
        __m512 sx = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), xv));
        __m512 xd = LAST ? _mm512_set1_ps(xr[i].d[b]) : scale_pair_f32(xr[i].d + b);
        for (int j = 0; j < NB; j++) {
            __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[j], xv));
            acc[i][j] = _mm512_mask3_fmadd_ps(_mm512_mul_ps(wd[j], xd), p, acc[i][j], LAST ? 0x00FF : 0xFFFF);
            acc[i][j] = _mm512_mask3_fmadd_ps(_mm512_mul_ps(wm[j], xd), sx, acc[i][j], LAST ? 0x00FF : 0xFFFF);
        }
    }
}

static SP_ALWAYS_INLINE void tile_affine(const qmm_ctx *c, int t0, int n0, int n1, const int TB, const int A8) {
    const int nb = c->K / 32, bsz = A8 ? 36 : 20;
    const uint8_t *wr[NB];
    qx_row xr[4];
    __m512 acc[4][NB];
    tile_begin(c, t0, n0, n1, TB, wr, xr, acc);
    qstream pf = qpf_init(c, t0, n1, nb / 2 > 0 ? nb / 2 : 1);
    int b = 0;
    __m512i wv[NB];
    __m512 wd[NB], wm[NB];
    for (; b + 2 <= nb; b += 2) {
        qstream_next(&pf);
        for (int j = 0; j < NB; j++) {
            const uint8_t *b0 = wr[j] + (size_t)b * bsz;
            wv[j] = affine_pair(b0, b0 + bsz, A8);
            wd[j] = scale_pair_f16(rd16(b0), rd16(b0 + bsz));
            wm[j] = scale_pair_f16(rd16(b0 + 2), rd16(b0 + bsz + 2));
        }
        affine_tokens(acc, wv, wd, wm, xr, b, TB, 0);
    }
    if (b < nb) { /* last, even-numbered block: lanes 0..7 only (its bytes in both halves, masked off) */
        for (int j = 0; j < NB; j++) {
            const uint8_t *b0 = wr[j] + (size_t)b * bsz;
            wv[j] = affine_pair(b0, b0, A8);
            wd[j] = scale_pair_f16(rd16(b0), rd16(b0));
            wm[j] = scale_pair_f16(rd16(b0 + 2), rd16(b0 + 2));
        }
        affine_tokens(acc, wv, wd, wm, xr, b, TB, 1);
    }
    tile_store(c, acc, t0, n0, n1, TB);
}

/* Staged tiles (T > 8, where a row tile serves three or more token tiles): the row tile's weights are
 * unpacked once into `st` — per block pair p and row j the 64 unsigned weight bytes and the 16
 * float scales exactly as tile32 builds them (the last odd block as tile32's: upper half zero,
 * its scale twice) — and each token tile loads them from L1 instead of unpacking again. The
 * operations on every output are tile32's, so the bits are too. STAGE_BYTES bounds K; a longer
 * row takes tile32 for every token tile. Measured (one thread, loaded machine, 3072 × 1024,
 * 85 tokens): Q4_0 0.8x the time of unpacking per token tile, Q8_0 0.95x; at 8 tokens no gain,
 * hence the threshold. */
#define STAGE_BYTES (64 * 1024)

static SP_ALWAYS_INLINE int stage_fits(const qmm_ctx *c) {
    return (size_t)(c->K / 32 + 1) / 2 * NB * 128 <= STAGE_BYTES;
}

static SP_ALWAYS_INLINE void stage32(const qmm_ctx *c, int n0, int n1, __m512i *st, const int Q) {
    const int nb = c->K / 32, bsz = QB_BYTES(Q);
    const uint8_t *wr[NB];
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    qstream pf = qpf_init(c, 0, n1, (nb + 1) / 2);
    for (int b = 0; b < nb; b += 2, st += 2 * NB) {
        qstream_next(&pf);
        for (int j = 0; j < NB; j++) {
            const uint8_t *b0 = wr[j] + (size_t)b * bsz;
            int pair = b + 1 < nb;
            st[2 * j] = pair ? w32_pair(b0, b0 + bsz, Q) : w32_one(b0, Q);
            st[2 * j + 1] = _mm512_castps_si512(scale_pair_f16(rd16(b0), rd16(pair ? b0 + bsz : b0)));
        }
    }
}

static SP_ALWAYS_INLINE void tile32_staged(const qmm_ctx *c, int t0, int n0, int n1, const __m512i *st, const int TB,
                                           const int Q) {
    const int nb = c->K / 32;
    qx_row xr[4];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    const __m512i cbias = _mm512_set1_epi8((char)QB_BIAS(Q));
    __m512 acc[4][NB];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2, st += 2 * NB) {
        __m512i wv[NB];
        __m512 wd[NB];
        for (int j = 0; j < NB; j++) wv[j] = _mm512_load_si512(st + 2 * j), wd[j] = _mm512_castsi512_ps(st[2 * j + 1]);
        dot_pair_tokens(acc, wv, wd, xr, b, TB, cbias);
    }
    if (b < nb) { /* last, even-numbered block: lanes 0..7 only */
        __m512i wv[NB];
        __m512 wd[NB];
        for (int j = 0; j < NB; j++) wv[j] = _mm512_load_si512(st + 2 * j), wd[j] = _mm512_castsi512_ps(st[2 * j + 1]);
        dot_last_tokens(acc, wv, wd, xr, b, TB, cbias);
    }
    tile_store(c, acc, t0, n0, n1, TB);
}

/* ---- packed Q4_0 (quant_internal.h): the same operations as tile32 / stage32 with Q = 1 on
 * every output, only the loads differ — one 32-byte load and a shift give a block pair's
 * unsigned weights in tile32's element order, and one f16 → f32 conversion gives the scales of
 * 16 blocks, of which a permute picks the pair's [s(b) × 8 | s(b + 1) × 8]. A last, unpaired
 * block's upper lanes hold zeros and are masked off as in tile32. */
static SP_ALWAYS_INLINE __m512i w32_packed(const uint8_t *pair) {
    __m256i raw = _mm256_loadu_si256((const __m256i *)pair);
    __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1);
    return _mm512_and_si512(t, _mm512_set1_epi8(0x0F));
}

/* the 16 scales of blocks b .. b + 15 (b a multiple of 16) */
static SP_ALWAYS_INLINE __m512 scales16_packed(const uint8_t *row, int b) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)b)));
}

/* permute indices [b % 16 × 8 | b % 16 + 1 × 8] */
static SP_ALWAYS_INLINE __m512i scale_idx_packed(int b) {
    return _mm512_add_epi32(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_set1_epi32(b & 15));
}

/* the unsigned weights and scales of block pair b, b + 1 of every row of the tile; s16 holds the
 * rows' scales of blocks b & ~15 .. + 15, reloaded at each multiple of 16 */
static SP_ALWAYS_INLINE void load_packed(const uint8_t *const *wr, int b, size_t sbytes, __m512 *s16, __m512i *wv,
                                         __m512 *wd) {
    if ((b & 15) == 0)
        for (int j = 0; j < NB; j++) s16[j] = scales16_packed(wr[j], b);
    const __m512i idx = scale_idx_packed(b);
    for (int j = 0; j < NB; j++) {
        wv[j] = w32_packed(wr[j] + sbytes + 16 * (size_t)b);
        wd[j] = _mm512_permutexvar_ps(idx, s16[j]);
    }
}

static SP_ALWAYS_INLINE void tile32_packed(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nb = c->K / 32;
    const size_t sbytes = 2 * (size_t)q4p_scale_slots(c->K);
    const uint8_t *wr[NB];
    qx_row xr[4];
    __m512 acc[4][NB], s16[NB];
    tile_begin(c, t0, n0, n1, TB, wr, xr, acc);
    const __m512i cbias = _mm512_set1_epi8(8);
    for (int j = 0; j < NB; j++) s16[j] = _mm512_setzero_ps(); /* loaded at b = 0 */
    qstream pf = qpf_init(c, t0, n1, nb / 2 > 0 ? nb / 2 : 1);
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i wv[NB];
        __m512 wd[NB];
        qstream_next(&pf);
        load_packed(wr, b, sbytes, s16, wv, wd);
        dot_pair_tokens(acc, wv, wd, xr, b, TB, cbias);
    }
    if (b < nb) { /* last, even-numbered block: lanes 0..7 only */
        __m512i wv[NB];
        __m512 wd[NB];
        load_packed(wr, b, sbytes, s16, wv, wd);
        dot_last_tokens(acc, wv, wd, xr, b, TB, cbias);
    }
    tile_store(c, acc, t0, n0, n1, TB);
}

/* stage32's staging from packed rows (the lanes tile32_staged reads are the same) */
static void stage_q4_0_packed(const qmm_ctx *c, int n0, int n1, __m512i *st) {
    const int nb = c->K / 32;
    const size_t sbytes = 2 * (size_t)q4p_scale_slots(c->K);
    const uint8_t *wr[NB];
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    __m512 s16[NB];
    for (int j = 0; j < NB; j++) s16[j] = _mm512_setzero_ps(); /* loaded at b = 0 */
    qstream pf = qpf_init(c, 0, n1, (nb + 1) / 2);
    for (int b = 0; b < nb; b += 2, st += 2 * NB) {
        __m512i wv[NB];
        __m512 wd[NB];
        qstream_next(&pf);
        load_packed(wr, b, sbytes, s16, wv, wd);
        for (int j = 0; j < NB; j++) st[2 * j] = wv[j], st[2 * j + 1] = _mm512_castps_si512(wd[j]);
    }
}

/* ---- activation rows ------------------------------------------------------------------------ */
/* quant.c's sp_quantize_row_q8_0 / _q8_K on 16 lanes, operation for operation (no fused
 * operations), so the bytes are the same; a block with a NaN, an infinity or a scale whose
 * inverse overflows takes the scalar quantizer, whose handling of those is not worth copying. */

/* every |x| of the n values (a multiple of 16) at most 3.4e38: finite, and on the common
 * path of both scalar quantizers */
static SP_ALWAYS_INLINE int all_finite(const float *x, int n) {
    const __m512 lim = _mm512_set1_ps(3.4e38f); /* sp_quantize_row_q8_0 takes another path above */
    __mmask16 ok = 0xFFFF;
    for (int i = 0; i < n; i += 16) ok &= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + i)), lim, _CMP_LE_OQ);
    return ok == 0xFFFF;
}

/* one Q8_0 block of 32: q[32], *d the f16 scale widened */
static void qx_q8_0_block_scalar(int8_t *q, float *d, const float *x) {
    sp_block_q8_0 blk;
    sp_quantize_row_q8_0(&blk, x, 32);
    memcpy(q, blk.qs, 32);
    *d = sp_f16_to_f32(blk.d);
}

static void qx_q8_0_block(int8_t *q, float *d, const float *x) {
    if (!all_finite(x, 32)) {
        qx_q8_0_block_scalar(q, d, x);
        return;
    }
    /* pm[l] = max over x[l], x[l + 8], x[l + 16], x[l + 24], then amax over l in order (the
     * values are finite, so any max order gives the same amax) */
    __m256 pm = _mm256_setzero_ps();
    const __m256 sgn = _mm256_set1_ps(-0.0f);
    for (int c = 0; c < 4; c++) pm = _mm256_max_ps(pm, _mm256_andnot_ps(sgn, _mm256_loadu_ps(x + 8 * c)));
    float pl[8], amax = 0.0f;
    _mm256_storeu_ps(pl, pm);
    for (int l = 0; l < 8; l++) amax = amax > pl[l] ? amax : pl[l];
    float dd = amax / 127.0f;
    float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    if (!(id <= 3.4e38f)) { /* a subnormal scale: 1/d overflows */
        qx_q8_0_block_scalar(q, d, x);
        return;
    }
    *d = sp_f16_to_f32(sp_f32_to_f16(dd));
    /* half away from zero: trunc(|v|) + (rest >= 0.5), at most 127, with v's sign */
    const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int c = 0; c < 2; c++) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * c), vid);
        __m512 a = _mm512_abs_ps(v);
        __m512 t = _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        t = _mm512_mask_add_ps(t, _mm512_cmp_ps_mask(_mm512_sub_ps(a, t), half, _CMP_GE_OQ), t, one);
        t = _mm512_min_ps(t, _mm512_set1_ps(127.0f));
        t = _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps(), t);
        _mm_storeu_si128((__m128i *)(q + 16 * c), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t)));
    }
}

/* one Q8_K block of 256: q[256], *d, bsums[16] */
static void qx_q8_K_block_scalar(int8_t *q, float *d, int16_t *bsums, const float *x) {
    sp_block_q8_K blk;
    sp_quantize_row_q8_K(&blk, x, SP_QK_K);
    memcpy(q, blk.qs, SP_QK_K);
    *d = blk.d;
    memcpy(bsums, blk.bsums, sizeof blk.bsums);
}

static void qx_q8_K_block(int8_t *q, float *d, int16_t *bsums, const float *x) {
    if (!all_finite(x, SP_QK_K)) {
        qx_q8_K_block_scalar(q, d, bsums, x);
        return;
    }
    /* the largest magnitude; the scalar loop keeps the first element reaching it */
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < SP_QK_K; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
    float amax = _mm512_reduce_max_ps(m);
    if (amax == 0.0f) {
        memset(q, 0, SP_QK_K);
        *d = 0.0f;
        memset(bsums, 0, 16 * sizeof *bsums);
        return;
    }
    float max = 0.0f;
    for (int i = 0; i < SP_QK_K; i += 16) {
        __mmask16 e = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + i)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
        if (e) {
            max = x[i + __builtin_ctz(e)];
            break;
        }
    }
    float iscale = -127.0f / max;
    if (!(fabsf(iscale) <= 3.4e38f)) { /* a subnormal maximum: the scale overflows */
        qx_q8_K_block_scalar(q, d, bsums, x);
        return;
    }
    const __m512 vs = _mm512_set1_ps(iscale);
    /* round half to even (|v| <= 127 here), saturated to int8; group g = lanes of chunk g */
    for (int g = 0; g < 16; g++) {
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * g)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512i iv = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127)),
                                      _mm512_set1_epi32(-128));
        _mm_storeu_si128((__m128i *)(q + 16 * g), _mm512_cvtepi32_epi8(iv));
        bsums[g] = (int16_t)_mm512_reduce_add_epi32(iv);
    }
    *d = 1 / iscale;
}

void sp_qx_quantize_avx512(uint8_t *row, const float *x, sp_dtype dt, int K) {
    int8_t *q = (int8_t *)row;
    float *d = (float *)(row + K);
    if (!qx_is_q8_K(dt)) {
        for (int b = 0; b < K / SP_QK8_0; b++) qx_q8_0_block(q + (size_t)b * SP_QK8_0, d + b, x + (size_t)b * SP_QK8_0);
    } else {
        int16_t *bs = (int16_t *)(row + K + 4 * (size_t)(K / SP_QK_K));
        for (int b = 0; b < K / SP_QK_K; b++)
            qx_q8_K_block(q + (size_t)b * SP_QK_K, d + b, bs + 16 * b, x + (size_t)b * SP_QK_K);
    }
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
static void tile_q4_0_packed_1(const qmm_ctx *c, int t, int n, int n1) { tile32_packed(c, t, n, n1, 1); }
static void tile_q4_0_packed_2(const qmm_ctx *c, int t, int n, int n1) { tile32_packed(c, t, n, n1, 2); }
static void tile_q4_0_packed_3(const qmm_ctx *c, int t, int n, int n1) { tile32_packed(c, t, n, n1, 3); }
static void tile_q4_0_packed_4(const qmm_ctx *c, int t, int n, int n1) { tile32_packed(c, t, n, n1, 4); }
static void tile_q5_0_1(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 1, 2); }
static void tile_q5_0_2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 2, 2); }
static void tile_q5_0_3(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 3, 2); }
static void tile_q5_0_4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, 4, 2); }
static void stage_q8_0(const qmm_ctx *c, int n, int n1, __m512i *st) { stage32(c, n, n1, st, 0); }
static void tile_q4_1_1(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 1, 0); }
static void tile_q4_1_2(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 2, 0); }
static void tile_q4_1_3(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 3, 0); }
static void tile_q4_1_4(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 4, 0); }
static void tile_qa8_1(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 1, 1); }
static void tile_qa8_2(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 2, 1); }
static void tile_qa8_3(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 3, 1); }
static void tile_qa8_4(const qmm_ctx *c, int t, int n, int n1) { tile_affine(c, t, n, n1, 4, 1); }
static void stage_q4_0(const qmm_ctx *c, int n, int n1, __m512i *st) { stage32(c, n, n1, st, 1); }
static void stage_q5_0(const qmm_ctx *c, int n, int n1, __m512i *st) { stage32(c, n, n1, st, 2); }
static void staged_q8_0_1(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 1, 0); }
static void staged_q8_0_2(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 2, 0); }
static void staged_q8_0_3(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 3, 0); }
static void staged_q8_0_4(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 4, 0); }
static void staged_q4_0_1(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 1, 1); }
static void staged_q4_0_2(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 2, 1); }
static void staged_q4_0_3(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 3, 1); }
static void staged_q4_0_4(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 4, 1); }
static void staged_q5_0_1(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 1, 2); }
static void staged_q5_0_2(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 2, 2); }
static void staged_q5_0_3(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 3, 2); }
static void staged_q5_0_4(const qmm_ctx *c, int t, int n, int n1, const __m512i *st) { tile32_staged(c, t, n, n1, st, 4, 2); }

typedef void (*qtile_fn)(const qmm_ctx *c, int t0, int n0, int n1);
typedef void (*qstaged_fn)(const qmm_ctx *c, int t0, int n0, int n1, const __m512i *st);

void sp_qmm_rows_avx512(const qmm_ctx *c, int n0, int n1) {
    static const qtile_fn q8_0[4] = {tile_q8_0_1, tile_q8_0_2, tile_q8_0_3, tile_q8_0_4};
    static const qtile_fn q4_0[4] = {tile_q4_0_1, tile_q4_0_2, tile_q4_0_3, tile_q4_0_4};
    static const qtile_fn q5_0[4] = {tile_q5_0_1, tile_q5_0_2, tile_q5_0_3, tile_q5_0_4};
    static const qtile_fn q4_0_packed[4] = {tile_q4_0_packed_1, tile_q4_0_packed_2, tile_q4_0_packed_3,
                                            tile_q4_0_packed_4};
    if (c->dt == SP_DT_Q4_K || c->dt == SP_DT_Q6_K) {
        sp_qmm_rows_avx512_k(c, n0, n1);
        return;
    }
    static const qtile_fn q4_1[4] = {tile_q4_1_1, tile_q4_1_2, tile_q4_1_3, tile_q4_1_4};
    static const qtile_fn qa8[4] = {tile_qa8_1, tile_qa8_2, tile_qa8_3, tile_qa8_4};
    const qtile_fn *tiles = c->dt == SP_DT_Q8_0   ? q8_0
                            : c->dt == SP_DT_Q4_0 ? (c->packed ? q4_0_packed : q4_0)
                            : c->dt == SP_DT_Q4_1 ? q4_1
                            : c->dt == SP_DT_QA8  ? qa8
                                                  : q5_0;
    const int tb = 4;
    if ((c->dt == SP_DT_Q8_0 || c->dt == SP_DT_Q4_0 || c->dt == SP_DT_Q5_0) && c->T > 8 && stage_fits(c)) {
        static const qstaged_fn s8[4] = {staged_q8_0_1, staged_q8_0_2, staged_q8_0_3, staged_q8_0_4};
        static const qstaged_fn s4[4] = {staged_q4_0_1, staged_q4_0_2, staged_q4_0_3, staged_q4_0_4};
        static const qstaged_fn s5[4] = {staged_q5_0_1, staged_q5_0_2, staged_q5_0_3, staged_q5_0_4};
        const qstaged_fn *staged = c->dt == SP_DT_Q8_0 ? s8 : c->dt == SP_DT_Q4_0 ? s4 : s5;
        void (*stage)(const qmm_ctx *, int, int, __m512i *) =
            c->dt == SP_DT_Q8_0 ? stage_q8_0 : c->dt == SP_DT_Q4_0 ? (c->packed ? stage_q4_0_packed : stage_q4_0) : stage_q5_0;
        _Alignas(64) __m512i st[STAGE_BYTES / 64];
        for (int n = n0; n < n1; n += NB) {
            int ne = n + NB < n1 ? n + NB : n1;
            stage(c, n, ne, st);
            for (int t = 0; t < c->T; t += 4) staged[(c->T - t < 4 ? c->T - t : 4) - 1](c, t, n, ne, st);
        }
        return;
    }
    for (int n = n0; n < n1; n += NB) {
        int ne = n + NB < n1 ? n + NB : n1;
        for (int t = 0; t < c->T; t += tb) tiles[(c->T - t < tb ? c->T - t : tb) - 1](c, t, n, ne);
    }
}
