/* quant_lowbit_avx2.c — the row kernels of Q5_K, Q3_K, Q2_K, IQ4_XS (against Q8_K activation
 * rows) and Q5_1, IQ4_NL (against Q8_0 blocks) for AVX2 + FMA, entered on the AVX2 and the
 * AVX-512 tiers (packed Q5_K, Q3_K and IQ4_XS matrices take quant_lowbit_avx512.c there).
 *
 * Each weight block is unpacked once into its values in element order (256 bytes for the
 * super-blocks, 32 for the 32-blocks) and dotted with up to 4 tokens' activations by maddubs
 * (unsigned × signed bytes → int16 pairs; the IQ4 tables are signed, so |v| against the sign
 * moved onto x) and madd against the group scales (int16 pairs → int32). Integer sums are
 * exact, so the block's integer results equal the scalar kernels' (quant_matmul.c), and the
 * float steps after them are the canonical ones of quant_internal.h, written the same way:
 * the same bits on every tier. No int16 pair saturates: at most 2 · 127 · 127. */
#include <immintrin.h>
#include <string.h>

#include "quant_internal.h"

/* tokens per pass over a row's blocks */
#define LB_TB 4

/* Decode's software prefetch along each weight row (the first token pass of a row requests it;
 * past a row's end that is the next rows, which are contiguous): super-blocks ahead, and bytes
 * ahead for the 32-blocks (one request per two blocks), the distances of quant_avx2.c's
 * Q4_K / Q4_0 tiles. */
#define LB_PF_AHEAD_K 12
#define LB_PF_AHEAD_32 7680

static SP_ALWAYS_INLINE float rd_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return sp_f16_to_f32(h);
}

static SP_ALWAYS_INLINE int hsum8_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* 16 bytes of nibbles as 32 values in element order: [low nibbles | high nibbles] */
static SP_ALWAYS_INLINE __m256i nibbles32(const uint8_t *p) {
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

/* the IQ4 table looked up by 32 indices */
static SP_ALWAYS_INLINE __m256i iq4_lookup(__m256i idx) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)sp_kvalues_iq4nl));
    return _mm256_shuffle_epi8(t, idx);
}

/* 16 in byte e where bit e of the 4 bytes at qh is set, else 0 */
static SP_ALWAYS_INLINE __m256i fifth_bits32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                                                 0x0101010101010101ll, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(16));
}

/* bits k of each byte of v, as 0 / 1 bytes (k < 8) */
static SP_ALWAYS_INLINE __m256i bit_k(__m256i v, int k) {
    return _mm256_and_si256(_mm256_srli_epi16(v, k), _mm256_set1_epi8(1));
}

/* ---- super-blocks: 256 values u (unsigned unless sgn) and 16 group scales --------------------- */
typedef struct {
    __m256i u[8];  /* values 32r .. 32r + 31 */
    __m256i sc[8]; /* int16 scales: groups 2r (low 128 bits) and 2r + 1 (high) */
} sb256;

static SP_ALWAYS_INLINE __m256i scale_pair(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

/* Σ_g sc[g] · Σ_{e in g} u[e] · xq[e] over one super-block (exact) */
static SP_ALWAYS_INLINE int sb_isum(const sb256 *w, const int8_t *xq, const int sgn) {
    __m256i acc = _mm256_setzero_si256();
    for (int r = 0; r < 8; r++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 32 * r));
        __m256i p = sgn ? _mm256_maddubs_epi16(_mm256_abs_epi8(w->u[r]), _mm256_sign_epi8(x, w->u[r]))
                        : _mm256_maddubs_epi16(w->u[r], x);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, w->sc[r]));
    }
    return hsum8_i32(acc);
}

static SP_ALWAYS_INLINE void unpack_q5_K(const uint8_t *w, sb256 *o, int m[8]) {
    uint64_t sc8, m8;
    q4k_scales8(w + 4, &sc8, &m8);
    __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 16));
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(w + 48 + 32 * c)), lo4 = _mm256_set1_epi8(0x0F);
        __m256i h0 = _mm256_slli_epi16(bit_k(qh, 2 * c), 4), h1 = _mm256_slli_epi16(bit_k(qh, 2 * c + 1), 4);
        o->u[2 * c] = _mm256_or_si256(_mm256_and_si256(q, lo4), h0);
        o->u[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), lo4), h1);
    }
    for (int j = 0; j < 8; j++) {
        int s = (int)(sc8 >> 8 * j & 0xFF);
        o->sc[j] = scale_pair(s, s);
        m[j] = (int)(m8 >> 8 * j & 0xFF);
    }
}

/* Q3_K and Q2_K: 2-bit values at bits 2j of qs[32h + l] for element 128h + 32j + l */
static SP_ALWAYS_INLINE void unpack_2bit(const uint8_t *qs, const uint8_t *hmask, sb256 *o) {
    __m256i hm = hmask ? _mm256_loadu_si256((const __m256i *)hmask) : _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        for (int j = 0; j < 4; j++) {
            __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
            if (hmask) u = _mm256_or_si256(u, _mm256_slli_epi16(bit_k(hm, 4 * h + j), 2));
            o->u[4 * h + j] = u;
        }
    }
}

static SP_ALWAYS_INLINE void unpack_iq4_xs(const uint8_t *w, sb256 *o) {
    unsigned sh = w[2] | (unsigned)w[3] << 8;
    for (int j = 0; j < 8; j++) {
        int ls = (w[4 + j / 2] >> (4 * (j % 2)) & 15) | (int)(sh >> (2 * j) & 3) << 4;
        o->u[j] = iq4_lookup(nibbles32(w + 8 + 16 * j));
        o->sc[j] = scale_pair(ls - 32, ls - 32);
    }
}

/* Y[t0 .. t0 + tb) of row n for a super-block type, in the canonical order */
static SP_ALWAYS_INLINE void rows_k(const qmm_ctx *c, int n, int t0, int tb, const sp_dtype dt) {
    const uint8_t *w = c->W + (size_t)n * c->wrow;
    const size_t bb = sp_dtype_block_bytes(dt);
    float acc[LB_TB] = {0};
    qx_row x[LB_TB];
    for (int i = 0; i < tb; i++) x[i] = qx_at(c, t0 + i);
    sb256 s;
    int m[16];
    int8_t sc3[16];
    for (int b = 0; b < c->K / SP_QK_K; b++, w += bb) {
        if (t0 == 0)
            for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)w + LB_PF_AHEAD_K * bb + o, _MM_HINT_T0);
        float d = rd_f16(dt == SP_DT_Q3_K ? w + 108 : dt == SP_DT_Q2_K ? w + 80 : w), dmin = 0;
        if (dt == SP_DT_Q5_K) unpack_q5_K(w, &s, m), dmin = rd_f16(w + 2);
        if (dt == SP_DT_IQ4_XS) unpack_iq4_xs(w, &s);
        if (dt == SP_DT_Q3_K) {
            unpack_2bit(w + 32, w, &s);
            sp_q3_K_scales(w + 96, sc3);
            for (int r = 0; r < 8; r++) s.sc[r] = scale_pair(sc3[2 * r], sc3[2 * r + 1]);
        }
        if (dt == SP_DT_Q2_K) {
            unpack_2bit(w + 16, NULL, &s);
            for (int r = 0; r < 8; r++) s.sc[r] = scale_pair(w[2 * r] & 15, w[2 * r + 1] & 15);
            dmin = rd_f16(w + 82);
        }
        for (int i = 0; i < tb; i++) {
            const int16_t *bs = x[i].bsums + 16 * b;
            float xd = x[i].d[b];
            int isum = sb_isum(&s, x[i].q + SP_QK_K * b, dt == SP_DT_IQ4_XS), imin = 0;
            if (dt == SP_DT_Q5_K)
                for (int j = 0; j < 8; j++) imin += m[j] * (bs[2 * j] + bs[2 * j + 1]);
            if (dt == SP_DT_Q2_K)
                for (int g = 0; g < 16; g++) imin += (w[g] >> 4) * bs[g];
            if (dt == SP_DT_Q3_K)
                for (int g = 0; g < 16; g++) isum -= 4 * sc3[g] * bs[g];
            acc[i] = fmaf(d * xd, (float)isum, acc[i]);
            if (dt == SP_DT_Q5_K || dt == SP_DT_Q2_K) acc[i] = fmaf(-(dmin * xd), (float)imin, acc[i]);
        }
    }
    for (int i = 0; i < tb; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
}

/* ---- 32-blocks: Q5_1 and IQ4_NL against Q8_0 activation blocks ------------------------------ */
static SP_ALWAYS_INLINE void rows_32(const qmm_ctx *c, int n, int t0, int tb, const sp_dtype dt) {
    const uint8_t *w = c->W + (size_t)n * c->wrow;
    const size_t bb = dt == SP_DT_Q5_1 ? 24 : 18;
    const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
    float acc[LB_TB] = {0};
    qx_row x[LB_TB];
    for (int i = 0; i < tb; i++) x[i] = qx_at(c, t0 + i);
    for (int b = 0; b < c->K / 32; b++, w += bb) {
        if (t0 == 0 && b % 2 == 0) _mm_prefetch((const char *)w + LB_PF_AHEAD_32, _MM_HINT_T0);
        float d = rd_f16(w);
        __m256i u = dt == SP_DT_Q5_1 ? _mm256_or_si256(nibbles32(w + 8), fifth_bits32(w + 4)) : iq4_lookup(nibbles32(w + 2));
        for (int i = 0; i < tb; i++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(x[i].q + 32 * b));
            float xd = x[i].d[b];
            if (dt == SP_DT_Q5_1) {
                int p = hsum8_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones16));
                int sx = hsum8_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xv), ones16));
                acc[i] = fmaf(d * xd, (float)p, acc[i]);
                acc[i] = fmaf(rd_f16(w + 2) * xd, (float)sx, acc[i]);
            } else {
                __m256i pr = _mm256_maddubs_epi16(_mm256_abs_epi8(u), _mm256_sign_epi8(xv, u));
                acc[i] = fmaf(d * xd, (float)hsum8_i32(_mm256_madd_epi16(pr, ones16)), acc[i]);
            }
        }
    }
    for (int i = 0; i < tb; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
}

/* ---- driver: one out-of-line function per type ---------------------------------------------- */
static void rows_q5_K(const qmm_ctx *c, int n, int t, int tb) { rows_k(c, n, t, tb, SP_DT_Q5_K); }
static void rows_q3_K(const qmm_ctx *c, int n, int t, int tb) { rows_k(c, n, t, tb, SP_DT_Q3_K); }
static void rows_q2_K(const qmm_ctx *c, int n, int t, int tb) { rows_k(c, n, t, tb, SP_DT_Q2_K); }
static void rows_iq4_xs(const qmm_ctx *c, int n, int t, int tb) { rows_k(c, n, t, tb, SP_DT_IQ4_XS); }
static void rows_q5_1(const qmm_ctx *c, int n, int t, int tb) { rows_32(c, n, t, tb, SP_DT_Q5_1); }
static void rows_iq4_nl(const qmm_ctx *c, int n, int t, int tb) { rows_32(c, n, t, tb, SP_DT_IQ4_NL); }

void sp_qmm_rows_lowbit_avx2(const qmm_ctx *c, int n0, int n1) {
    void (*f)(const qmm_ctx *, int, int, int) = c->dt == SP_DT_Q5_K   ? rows_q5_K
                                                : c->dt == SP_DT_Q3_K ? rows_q3_K
                                                : c->dt == SP_DT_Q2_K ? rows_q2_K
                                                : c->dt == SP_DT_Q5_1 ? rows_q5_1
                                                : c->dt == SP_DT_IQ4_NL ? rows_iq4_nl
                                                                        : rows_iq4_xs;
    for (int n = n0; n < n1; n++)
        for (int t = 0; t < c->T; t += LB_TB) f(c, n, t, c->T - t < LB_TB ? c->T - t : LB_TB);
}
