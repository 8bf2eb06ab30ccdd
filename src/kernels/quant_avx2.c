/* quant_avx2.c — the quantized row kernels for AVX2 + FMA + F16C (no VNNI): integer dot
 * products by maddubs (unsigned × signed bytes → int16 pairs) and madd (int16 pairs → int32),
 * in the canonical order of quant_internal.h. Entered only when sp_cpu_level() is SP_CPU_AVX2,
 * or SP_CPU_AVX512 on a processor without AVX512-VNNI.
 *
 * 32-blocks: one block per 256-bit register; lanes 0..7 of the canonical accumulator live in
 * one register (even blocks) and lanes 8..15 in another (odd blocks). Tiles: 1 token × 4 rows
 * for decode, 2 tokens × 2 rows otherwise (read from a stage of prepared blocks for longer T).
 * K-quants: the scalar kernels' integer sums, 256 bits at a time, up to 4 tokens per loaded
 * weight block. Row remainders reuse the last row and
 * drop its results. No int16 sum saturates: pairs are at most 2 · 128 · 127. */
#include <immintrin.h>
#include <string.h>

#include "quant_internal.h"

static SP_ALWAYS_INLINE uint16_t rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

static SP_ALWAYS_INLINE int hsum4_i32(__m128i s) {
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

static SP_ALWAYS_INLINE int hsum8_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* the canonical 16 → 1 tree with lanes 0..7 in e and 8..15 in o */
static SP_ALWAYS_INLINE float hsum16_pair(__m256 e, __m256 o) {
    __m256 r8 = _mm256_add_ps(e, o);
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(r8), _mm256_extractf128_ps(r8, 1));
    __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    return _mm_cvtss_f32(_mm_add_ss(r2, _mm_shuffle_ps(r2, r2, 1)));
}

/* ---- Q8_0 / Q4_0 / Q5_0 ----------------------------------------------------------------- */
/* Q: 0 Q8_0, 1 Q4_0, 2 Q5_0 — block bytes, where the nibbles start, and the bias u − v */
/* Q: 0 Q8_0, 1 Q4_0, 2 Q5_0, 3 Q4_1, 4 QA8 (the last two with a min term, never staged) */
#define QB_BYTES(Q) ((Q) == 0 ? 34 : (Q) == 1 ? 18 : (Q) == 2 ? 22 : (Q) == 3 ? 20 : 36)
#define QB_NIB(Q) ((Q) == 2 ? 6 : (Q) == 3 ? 4 : 2)
#define QB_BIAS(Q) ((Q) == 1 ? 8 : 16)

/* 16 in byte e where bit e of h is set, else 0 */
static SP_ALWAYS_INLINE __m256i q5_high(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    /* byte e takes byte e / 8 of h (each 128-bit half holds h four times) */
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                    _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                      0x0101010101010101ll, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(16));
}

/* A block's weights prepared for maddubs: Q8_0 keeps |v| (unsigned) and v for the signs; Q4_0
 * unpacks the nibbles u = v + 8 into element order [lo | hi]; Q5_0 adds the fifth bits
 * (u = v + 16); Q4_1 unpacks its nibbles q; QA8 keeps v = q − 128 as Q8_0 keeps v. */
typedef struct {
    __m256i a, s; /* Q8_0: |v| and v; Q4_0, Q5_0: u (s unused) */
    __m256 d;     /* the block's f16 scale, broadcast */
} w32;

static SP_ALWAYS_INLINE w32 w32_load(const uint8_t *blk, const int Q) {
    w32 w;
    if (Q == 4) {
        w.s = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 4)), _mm256_set1_epi8((char)0x80));
        w.a = _mm256_abs_epi8(w.s);
    } else if (Q) {
        /* the 16 bytes in both halves (a load, no shuffle), the high half shifted: [lo | hi] */
        __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + QB_NIB(Q))));
        w.a = _mm256_and_si256(_mm256_blend_epi32(q, _mm256_srli_epi16(q, 4), 0xF0), _mm256_set1_epi8(0x0F));
        if (Q == 2) w.a = _mm256_or_si256(w.a, q5_high(blk + 2));
        w.s = w.a;
    } else {
        w.s = _mm256_loadu_si256((const __m256i *)(blk + 2));
        w.a = _mm256_abs_epi8(w.s);
    }
    w.d = _mm256_set1_ps(_cvtsh_ss(rd16(blk)));
    return w;
}

/* the 8 exact int32 lane sums Σ_{e=4i..4i+3} v · x, as floats; x8 = maddubs(bias, x) for Q4_0
 * and Q5_0; for Q4_1 and QA8 the sums of q · x, with sx the lane sums of x (QA8: Σ (q − 128) · x
 * + 128 · sx, the same integers) */
static SP_ALWAYS_INLINE __m256 p32(const w32 *w, __m256i x, __m256i x8, __m256i sx, const int Q) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i m = Q == 1 || Q == 2 ? _mm256_sub_epi16(_mm256_maddubs_epi16(w->a, x), x8)
                : Q == 3         ? _mm256_maddubs_epi16(w->a, x)
                                 : _mm256_maddubs_epi16(w->a, _mm256_sign_epi8(x, w->s));
    __m256i p = _mm256_madd_epi16(m, ones);
    if (Q == 4) p = _mm256_add_epi32(p, _mm256_slli_epi32(sx, 7));
    return _mm256_cvtepi32_ps(p);
}

/* Decode's software prefetch distance along each weight row: bytes ahead for the 32-element
 * blocks, super-blocks ahead for the K-quants (past a row's end that is the next rows, which are
 * contiguous). Measured on every matmul of the qwen3-0.6b preset's GGUF files, one thread
 * (SPECULA_CPU=avx2 bench_kernels gguf): against 640 bytes and 4 super-blocks, Q8_0 / Q4_0 /
 * Q4_K_M decode 1.45 / 1.53 / 1.19x faster; 2 and 4x farther measured in between, 1.3 and 2.7x
 * farther the same within noise. */
#define PF_AHEAD_32 7680
#define PF_AHEAD_K 12

/* block b of the tile into accumulator half H (compile-time: b mod 2), so the accumulators
 * stay in registers; S: the rows' prepared blocks come from the stage st (NB per block) */
static SP_ALWAYS_INLINE void tile32_block(__m256 acc[2][4][2], const uint8_t *const *wr, const w32 *st,
                                          const qx_row *xr, int b, const int H, const int TB, const int NB,
                                          const int Q, const int PF, const int S) {
    const int bsz = QB_BYTES(Q);
    w32 w[4];
    for (int j = 0; j < NB; j++) {
        if (S) {
            w[j] = st[(size_t)b * NB + j];
            continue;
        }
        if (PF) _mm_prefetch((const char *)wr[j] + (size_t)b * bsz + PF_AHEAD_32, _MM_HINT_T0);
        w[j] = w32_load(wr[j] + (size_t)b * bsz, Q);
    }
    __m256 wm[4]; /* Q4_1, QA8: each row's min, broadcast */
    for (int j = 0; Q >= 3 && j < NB; j++) wm[j] = _mm256_set1_ps(_cvtsh_ss(rd16(wr[j] + (size_t)b * bsz + 2)));
    for (int i = 0; i < TB; i++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(xr[i].q + 32 * b));
        __m256i x8 = Q == 1 || Q == 2 ? _mm256_maddubs_epi16(_mm256_set1_epi8(QB_BIAS(Q)), x) : x;
        __m256i sx = Q >= 3 ? _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), x), _mm256_set1_epi16(1)) : x;
        __m256 xd = _mm256_set1_ps(xr[i].d[b]);
        for (int j = 0; j < NB; j++) {
            acc[i][j][H] = _mm256_fmadd_ps(_mm256_mul_ps(w[j].d, xd), p32(&w[j], x, x8, sx, Q), acc[i][j][H]);
            if (Q >= 3)
                acc[i][j][H] = _mm256_fmadd_ps(_mm256_mul_ps(wm[j], xd), _mm256_cvtepi32_ps(sx), acc[i][j][H]);
        }
    }
}

static SP_ALWAYS_INLINE void tile32(const qmm_ctx *c, int t0, int n0, int n1, const w32 *st, const int TB,
                                    const int NB, const int Q, const int S) {
    const int nb = c->K / 32;
    const uint8_t *wr[4];
    for (int j = 0; j < NB; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    qx_row xr[2];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    __m256 acc[2][4][2];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
    int b = 0;
    /* decode prefetches every other block: one 64-byte line covers 2 (Q8_0) to 3.5 (Q4_0) blocks */
    for (; b + 2 <= nb; b += 2) {
        tile32_block(acc, wr, st, xr, b, 0, TB, NB, Q, TB == 1, S);
        tile32_block(acc, wr, st, xr, b + 1, 1, TB, NB, Q, 0, S);
    }
    if (b < nb) tile32_block(acc, wr, st, xr, b, 0, TB, NB, Q, 0, S);
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB && n0 + j < n1; j++)
            c->Y[(size_t)(t0 + i) * c->N + n0 + j] = hsum16_pair(acc[i][j][0], acc[i][j][1]);
}

/* Staged 2-row tiles: the row pair's blocks are prepared once (w32_load) into a stage in L1
 * that every token pair reads, instead of once per token pair. The operations on each output
 * are tile32's. STAGE_BYTES bounds K; longer rows are not staged. Measured (CPU time of one
 * thread on the loaded machine, 3072 × 1024): Q4_0 ~0.9x at 85 tokens and no loss at 8; Q8_0,
 * whose blocks are only a load and an abs to prepare, ~0.93x at 32 to 85 tokens but 1.15x at
 * 8 — hence a threshold per type. */
#define STAGE_BYTES (64 * 1024)
#define STAGE_MIN_T_Q8 32 /* Q8_0 */
#define STAGE_MIN_T_Q4 6  /* Q4_0, Q5_0 */

static SP_ALWAYS_INLINE int stage_fits(const qmm_ctx *c) { return (size_t)(c->K / 32) * 2 * sizeof(w32) <= STAGE_BYTES; }

static SP_ALWAYS_INLINE void stage32(const qmm_ctx *c, int n0, int n1, w32 *st, const int Q) {
    const int nb = c->K / 32, bsz = QB_BYTES(Q);
    const uint8_t *wr[2];
    for (int j = 0; j < 2; j++) wr[j] = c->W + (size_t)(n0 + j < n1 ? n0 + j : n1 - 1) * c->wrow;
    for (int b = 0; b < nb; b++)
        for (int j = 0; j < 2; j++) st[2 * b + j] = w32_load(wr[j] + (size_t)b * bsz, Q);
}

/* ---- Q4_K ----------------------------------------------------------------------------------- */
static SP_ALWAYS_INLINE void tile_q4_K(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    qx_row xr[4];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int n = n0; n < n1; n++) {
        const uint8_t *wrow = c->W + (size_t)n * c->wrow;
        float acc[4] = {0};
        for (int b = 0; b < nsb; b++) {
            const uint8_t *blk = wrow + (size_t)b * 144;
            if (TB == 1)
                for (int o = 0; o < 192; o += 64) _mm_prefetch((const char *)blk + PF_AHEAD_K * 144 + o, _MM_HINT_T0);
            uint64_t sc8, m8;
            q4k_scales8(blk + 4, &sc8, &m8);
            __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m8));
            __m256i s[4];
            for (int i = 0; i < TB; i++) s[i] = _mm256_setzero_si256();
            for (int q = 0; q < 4; q++) {
                /* chunk q: low nibbles = sub-block 2q, high nibbles = sub-block 2q + 1 */
                __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * q));
                __m256i lo = _mm256_and_si256(raw, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4);
                __m256i slo = _mm256_set1_epi16((short)(sc8 >> (16 * q) & 0xFF));
                __m256i shi = _mm256_set1_epi16((short)(sc8 >> (16 * q + 8) & 0xFF));
                for (int i = 0; i < TB; i++) {
                    const int8_t *xq = xr[i].q + SP_QK_K * b + 64 * q;
                    __m256i a = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq)), slo);
                    __m256i e = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32))), shi);
                    s[i] = _mm256_add_epi32(s[i], _mm256_add_epi32(a, e));
                }
            }
            float d = _cvtsh_ss(rd16(blk)), dmin = _cvtsh_ss(rd16(blk + 2));
            for (int i = 0; i < TB; i++) {
                /* imin = Σ_j m[j] · (bsum[2j] + bsum[2j+1]) */
                __m256i ps = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr[i].bsums + 16 * b)), _mm256_set1_epi16(1));
                __m128i ps16 = _mm_packs_epi32(_mm256_castsi256_si128(ps), _mm256_extracti128_si256(ps, 1));
                int isum = hsum8_i32(s[i]);
                int imin = hsum4_i32(_mm_madd_epi16(ps16, m16));
                float xd = xr[i].d[b];
                acc[i] = fmaf(d * xd, (float)isum, acc[i]);
                acc[i] = fmaf(-(dmin * xd), (float)imin, acc[i]);
            }
        }
        for (int i = 0; i < TB; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
    }
}

/* ---- Q6_K ----------------------------------------------------------------------------------- */
static SP_ALWAYS_INLINE void tile_q6_K(const qmm_ctx *c, int t0, int n0, int n1, const int TB) {
    const int nsb = c->K / SP_QK_K;
    qx_row xr[4];
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    const __m256i lo4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30);
    for (int n = n0; n < n1; n++) {
        const uint8_t *wrow = c->W + (size_t)n * c->wrow;
        float acc[4] = {0};
        for (int b = 0; b < nsb; b++) {
            const uint8_t *blk = wrow + (size_t)b * 210;
            if (TB == 1)
                for (int o = 0; o < 256; o += 64) _mm_prefetch((const char *)blk + PF_AHEAD_K * 210 + o, _MM_HINT_T0);
            /* group scales as int32 holding the int16 twice, for the pair layout of madd */
            __m128i sc8 = _mm_loadu_si128((const __m128i *)(blk + 192));
            __m256i sc32[2];
            for (int k = 0; k < 2; k++) {
                __m256i v = _mm256_cvtepi8_epi32(k ? _mm_srli_si128(sc8, 8) : sc8);
                sc32[k] = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
            }
            __m256i s[4];
            for (int i = 0; i < TB; i++) s[i] = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                __m256i L0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
                __m256i L1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
                __m256i H = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
                /* values 128h + 32k + l: a nibble of ql and bits 2k, 2k+1 of qh[l] as bits 4, 5 */
                __m256i u[4] = {
                    _mm256_or_si256(_mm256_and_si256(L0, lo4), _mm256_and_si256(_mm256_slli_epi16(H, 4), hi2)),
                    _mm256_or_si256(_mm256_and_si256(L1, lo4), _mm256_and_si256(_mm256_slli_epi16(H, 2), hi2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), lo4), _mm256_and_si256(H, hi2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), lo4),
                                    _mm256_and_si256(_mm256_srli_epi16(H, 2), hi2))};
                for (int k = 0; k < 4; k++) {
                    /* groups g = 8h + 2k (int16 lanes 0..7 after maddubs) and g + 1 (lanes 8..15) */
                    int g = 8 * h + 2 * k, l0 = g % 8, l1 = g % 8 + 1;
                    __m256i sv = _mm256_permutevar8x32_epi32(sc32[g / 8], _mm256_set_epi32(l1, l1, l1, l1, l0, l0, l0, l0));
                    for (int i = 0; i < TB; i++) {
                        __m256i x = _mm256_loadu_si256((const __m256i *)(xr[i].q + SP_QK_K * b + 128 * h + 32 * k));
                        s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u[k], x), sv));
                    }
                }
            }
            float d = _cvtsh_ss(rd16(blk + 208));
            __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            for (int i = 0; i < TB; i++) {
                /* − 32 · Σ_g sc[g] · bsum[g] */
                __m256i bias = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr[i].bsums + 16 * b)), sc16);
                int isum = hsum8_i32(_mm256_sub_epi32(s[i], _mm256_slli_epi32(bias, 5)));
                acc[i] = fmaf(d * xr[i].d[b], (float)isum, acc[i]);
            }
        }
        for (int i = 0; i < TB; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
    }
}

/* ---- driver: one out-of-line function per tile shape ------------------------------------------ */
static void tile_q8_0_1x4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 4, 0, 0); }
static void tile_q8_0_1x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 2, 0, 0); }
static void tile_q8_0_2x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 2, 2, 0, 0); }
static void tile_q4_0_1x4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 4, 1, 0); }
static void tile_q4_0_1x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 2, 1, 0); }
static void tile_q4_0_2x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 2, 2, 1, 0); }
static void tile_q5_0_1x4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 4, 2, 0); }
static void tile_q5_0_1x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 2, 2, 0); }
static void tile_q5_0_2x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 2, 2, 2, 0); }
static void tile_q4_1_1x4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 4, 3, 0); }
static void tile_q4_1_1x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 2, 3, 0); }
static void tile_q4_1_2x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 2, 2, 3, 0); }
static void tile_qa8_1x4(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 4, 4, 0); }
static void tile_qa8_1x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 1, 2, 4, 0); }
static void tile_qa8_2x2(const qmm_ctx *c, int t, int n, int n1) { tile32(c, t, n, n1, NULL, 2, 2, 4, 0); }
static void stage_q8_0(const qmm_ctx *c, int n, int n1, w32 *st) { stage32(c, n, n1, st, 0); }
static void stage_q4_0(const qmm_ctx *c, int n, int n1, w32 *st) { stage32(c, n, n1, st, 1); }
static void stage_q5_0(const qmm_ctx *c, int n, int n1, w32 *st) { stage32(c, n, n1, st, 2); }
static void staged_q8_0_1x2(const qmm_ctx *c, int t, int n, int n1, const w32 *st) { tile32(c, t, n, n1, st, 1, 2, 0, 1); }
static void staged_q8_0_2x2(const qmm_ctx *c, int t, int n, int n1, const w32 *st) { tile32(c, t, n, n1, st, 2, 2, 0, 1); }
static void staged_q4_0_1x2(const qmm_ctx *c, int t, int n, int n1, const w32 *st) { tile32(c, t, n, n1, st, 1, 2, 1, 1); }
static void staged_q4_0_2x2(const qmm_ctx *c, int t, int n, int n1, const w32 *st) { tile32(c, t, n, n1, st, 2, 2, 1, 1); }
static void staged_q5_0_1x2(const qmm_ctx *c, int t, int n, int n1, const w32 *st) { tile32(c, t, n, n1, st, 1, 2, 2, 1); }
static void staged_q5_0_2x2(const qmm_ctx *c, int t, int n, int n1, const w32 *st) { tile32(c, t, n, n1, st, 2, 2, 2, 1); }
static void tile_q4_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 1); }
static void tile_q4_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 2); }
static void tile_q4_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 3); }
static void tile_q4_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q4_K(c, t, n, n1, 4); }
static void tile_q6_K_1(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 1); }
static void tile_q6_K_2(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 2); }
static void tile_q6_K_3(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 3); }
static void tile_q6_K_4(const qmm_ctx *c, int t, int n, int n1) { tile_q6_K(c, t, n, n1, 4); }

typedef void (*qtile_fn)(const qmm_ctx *c, int t0, int n0, int n1);
typedef void (*qstaged_fn)(const qmm_ctx *c, int t0, int n0, int n1, const w32 *st);

/* Q4_1 and QA8: 1×4 tiles for one token, else 2×2 (not staged) */
static void rows_affine(const qmm_ctx *c, int n0, int n1) {
    const int a8 = c->dt == SP_DT_QA8;
    if (c->T == 1) {
        for (int n = n0; n < n1; n += 4) (a8 ? tile_qa8_1x4 : tile_q4_1_1x4)(c, 0, n, n + 4 < n1 ? n + 4 : n1);
        return;
    }
    for (int n = n0; n < n1; n += 2) {
        int ne = n + 2 < n1 ? n + 2 : n1, t = 0;
        for (; t + 2 <= c->T; t += 2) (a8 ? tile_qa8_2x2 : tile_q4_1_2x2)(c, t, n, ne);
        if (t < c->T) (a8 ? tile_qa8_1x2 : tile_q4_1_1x2)(c, t, n, ne);
    }
}

void sp_qmm_rows_avx2(const qmm_ctx *c, int n0, int n1) {
    if (c->dt == SP_DT_Q4_1 || c->dt == SP_DT_QA8) {
        rows_affine(c, n0, n1);
        return;
    }
    if (c->dt == SP_DT_Q8_0 || c->dt == SP_DT_Q4_0 || c->dt == SP_DT_Q5_0) {
        int q = c->dt == SP_DT_Q8_0 ? 0 : c->dt == SP_DT_Q4_0 ? 1 : 2;
        if (c->T == 1) {
            qtile_fn f = q == 0 ? tile_q8_0_1x4 : q == 1 ? tile_q4_0_1x4 : tile_q5_0_1x4;
            for (int n = n0; n < n1; n += 4) f(c, 0, n, n + 4 < n1 ? n + 4 : n1);
            return;
        }
        if (c->T >= (q == 0 ? STAGE_MIN_T_Q8 : STAGE_MIN_T_Q4) && stage_fits(c)) {
            void (*stage)(const qmm_ctx *, int, int, w32 *) = q == 0 ? stage_q8_0 : q == 1 ? stage_q4_0 : stage_q5_0;
            qstaged_fn s2 = q == 0 ? staged_q8_0_2x2 : q == 1 ? staged_q4_0_2x2 : staged_q5_0_2x2;
            qstaged_fn s1 = q == 0 ? staged_q8_0_1x2 : q == 1 ? staged_q4_0_1x2 : staged_q5_0_1x2;
            _Alignas(32) w32 st[STAGE_BYTES / sizeof(w32)];
            for (int n = n0; n < n1; n += 2) {
                int ne = n + 2 < n1 ? n + 2 : n1, t = 0;
                stage(c, n, ne, st);
                for (; t + 2 <= c->T; t += 2) s2(c, t, n, ne, st);
                if (t < c->T) s1(c, t, n, ne, st);
            }
            return;
        }
        qtile_fn f2 = q == 0 ? tile_q8_0_2x2 : q == 1 ? tile_q4_0_2x2 : tile_q5_0_2x2;
        qtile_fn f1 = q == 0 ? tile_q8_0_1x2 : q == 1 ? tile_q4_0_1x2 : tile_q5_0_1x2;
        for (int n = n0; n < n1; n += 2) {
            int ne = n + 2 < n1 ? n + 2 : n1, t = 0;
            for (; t + 2 <= c->T; t += 2) f2(c, t, n, ne);
            if (t < c->T) f1(c, t, n, ne);
        }
        return;
    }
    static const qtile_fn q4_K[4] = {tile_q4_K_1, tile_q4_K_2, tile_q4_K_3, tile_q4_K_4};
    static const qtile_fn q6_K[4] = {tile_q6_K_1, tile_q6_K_2, tile_q6_K_3, tile_q6_K_4};
    const qtile_fn *tiles = c->dt == SP_DT_Q4_K ? q4_K : q6_K;
    /* rows in groups of 4 so each group's weights are still in cache for the next tokens */
    for (int n = n0; n < n1; n += 4) {
        int ne = n + 4 < n1 ? n + 4 : n1;
        for (int t = 0; t < c->T; t += 4) tiles[(c->T - t < 4 ? c->T - t : 4) - 1](c, t, n, ne);
    }
}
