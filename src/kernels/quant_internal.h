/* quant_internal.h — what the quantized-matmul files share: the quantized activation rows,
 * the call context, the per-tier row kernels, and THE CANONICAL ORDER every tier follows.
 *
 * THE CANONICAL QUANTIZED DOT. The activation row x is quantized once per call (Q8_0 blocks
 * for Q8_0 / Q4_0 weights, Q8_K super-blocks for Q4_K / Q6_K; quant.c's quantizers), then
 * every output y = Σ_k x̂[k]·ŵ[k] is computed as follows; integer sums are exact, so the only
 * roundings are the float operations written here, in this order, in every tier:
 *
 *   Q8_0, Q4_0, Q5_0 (blocks b of 32; v = the weight's integer value: qs, nibble − 8, or
 *   (nibble | fifth bit · 16) − 16):
 *     acc[16] = 0
 *     for b = 0, 1, ...:  s = f16(W.d[b]) · xd[b]                      (exact: 11 × 11 bits)
 *       for i = 0..7:     p = Σ_{e=4i..4i+3} v[32b+e] · xq[32b+e]      (int32, exact)
 *                         acc[8·(b & 1) + i] = fma(s, (float)p, acc[8·(b & 1) + i])
 *     y = the canonical 16 → 1 tree of kernels_internal.h over acc
 *   Q4_K (super-blocks b of 256; sub-block j = 0..7 of 32 values q with 6-bit sc[j], m[j]):
 *     acc = 0
 *     for b:  isum = Σ_j sc[j] · Σ_{e in j} q[e] · xq[e];  imin = Σ_j m[j] · (bsum[2j] + bsum[2j+1])
 *             acc = fma(f16(W.d) · xd[b], (float)isum, acc)
 *             acc = fma(−(f16(W.dmin) · xd[b]), (float)imin, acc)
 *   Q6_K (groups g = 0..15 of 16 values u in 0..63, int8 sc[g]):
 *     for b:  isum = Σ_g sc[g] · (Σ_{e in g} u[e] · xq[e] − 32 · bsum[g])
 *             acc = fma(f16(W.d) · xd[b], (float)isum, acc)
 *     y = acc
 *   Q5_K as Q4_K with q in 0..31. Q2_K (groups g of 16, 4-bit sc[g] and m[g]) as Q4_K with
 *     isum = Σ_g sc[g] · Σ_{e in g} q[e] · xq[e] and imin = Σ_g m[g] · bsum[g].
 *   Q3_K (groups g of 16, signed s[g], u = 2 bits | third bit << 2 in 0..7):
 *     isum = Σ_g s[g] · (Σ_{e in g} u[e] · xq[e] − 4 · bsum[g]);  acc = fma(f16(W.d) · xd[b], (float)isum, acc)
 *   IQ4_XS (sub-blocks j of 32, table values T[q], 6-bit ls[j]):
 *     isum = Σ_j (ls[j] − 32) · Σ_{e in j} T[q[e]] · xq[e];  acc = fma(f16(W.d) · xd[b], (float)isum, acc)
 *   Q4_1, QA8 (blocks b of 32, q in 0..15 or 0..255, with a min m): Q4_0's 16 lanes, each block
 *   adding its min term to the same lane right after its scale term:
 *     s = f16(W.d[b]) · xd[b];  sm = f16(W.m[b]) · xd[b]
 *     for i = 0..7:  p = Σ_{e=4i..4i+3} q[32b+e] · xq[32b+e];  sx = Σ_{e=4i..4i+3} xq[32b+e]
 *                    acc[8·(b & 1) + i] = fma(s, (float)p, acc[8·(b & 1) + i])
 *                    acc[8·(b & 1) + i] = fma(sm, (float)sx, acc[8·(b & 1) + i])
 *     y = the 16 → 1 tree over acc
 *   IQ4_NL, Q5_1 (blocks b of 32 against Q8_0 activations, one accumulator, blocks in order):
 *     acc = fma(f16(W.d) · xd[b], (float)Σ v[e] · xq[e], acc)   (v = T[q], or q in 0..31 for Q5_1)
 *     Q5_1 then: acc = fma(f16(W.m) · xd[b], (float)Σ xq[e], acc)
 * The 16-lane layout of the 32-blocks matches every SIMD width: an AVX2 register of 8 int32
 * lanes from one block (lane i = elements 4i..4i+3), an AVX-512 register holding two blocks,
 * NEON pairs of 4-lane registers. int32 sums never overflow: |isum| < 2^28 for the K-quants.
 *
 * Tiers: scalar (quant_matmul.c), AVX2 (quant_avx2.c), AVX-512 with VNNI (quant_avx512.c;
 * its Q4_K / Q6_K tiles in quant_k_avx512.c),
 * NEON with dotprod (quant_neon.c; Q4_1 and QA8 have no NEON kernel: scalar there, AVX2 tiles on an
 * AVX-512 processor without VNNI); Q5_K, Q3_K, Q2_K, Q5_1, IQ4_NL, IQ4_XS in quant_lowbit_avx2.c
 * (the AVX2 and AVX-512 tiers) and quant_lowbit_neon.c, in the order written out by the scalar
 * kernels of quant_matmul.c. Each file is entered only after sp_cpu_level() selects
 * its tier (an AVX-512 processor without VNNI takes the AVX2 file, an aarch64 one without
 * dotprod the scalar path). */
#ifndef SPECULA_QUANT_INTERNAL_H
#define SPECULA_QUANT_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "../core/cpu.h"
#include "kernels_internal.h"
#include "quant.h"

/* bytes of sp_matmul's stack scratch for quantized activations: tokens go through in chunks
 * that fit, and one row of K <= SP_QUANT_MAX_K always does */
#define SP_QX_SCRATCH (96 * 1024)

/* 1 for Q5_K, Q3_K, Q2_K, Q5_1, IQ4_NL and IQ4_XS (their kernels: quant_lowbit_*.c) */
static inline int sp_quant_is_lowbit(sp_dtype dt) { return dt >= SP_DT_Q5_K && dt <= SP_DT_IQ4_XS; }
/* 1 when dt's dot product reads Q8_K activation rows (the 256-blocks), 0 for Q8_0 blocks */
static inline int qx_is_q8_K(sp_dtype dt) { return sp_dtype_block_elems(dt) == 256; }

/* One activation row quantized for a weight type. Scratch layout per row: q[K] int8, then
 * d[K / block] f32 (the block scales as the dot product uses them: a Q8_0 block's f16 scale
 * widened), then for Q8_K bsums[K / 16] int16; rows start at 64-byte multiples. */
typedef struct {
    const int8_t *q;
    const float *d;
    const int16_t *bsums; /* Q8_K only */
} qx_row;

/* PACKED Q4_0 (sp_mat_pack; read by the AVX-512 tile only). A row of nb = K / 32 blocks
 * becomes: the nb f16 scales, zero-padded to a multiple of 16 (q4p_scale_slots), then one
 * 32-byte group per block pair (2p, 2p + 1) whose byte i holds element i of block 2p in its low
 * nibble and element i of block 2p + 1 in its high nibble (the unsigned nibble, value + 8; high
 * nibble 0 for a last, unpaired block). Rows are q4p_row_bytes apart (a multiple of 64). */
static inline int q4p_scale_slots(int K) { return (K / 32 + 15) / 16 * 16; }
static inline size_t q4p_row_bytes(int K) {
    size_t b = 2 * (size_t)q4p_scale_slots(K) + 32 * (size_t)((K / 32 + 1) / 2);
    return (b + 63) / 64 * 64;
}

/* PACKED Q4_K AND Q6_K (sp_mat_pack; read by the AVX-512 tiles only): the rows in groups of
 * KX_ROWS = 16 (the last group padded with zero rows), one output row per int32 lane; the
 * activation stays in its natural order, a 64-byte load holding 4 consecutive elements of the
 * 16 rows against one broadcast int32 of it. Super-block b of group G is a record at
 * (G · K / 256 + b) · record bytes, so row n's group starts at n · kx_row_bytes for n a multiple
 * of 16. With r the row in the group, i, k = 0..3:
 *   Q4_K (Q4KX_SB_BYTES = 2368, 148 per row: the file's 144 with sc and m a byte each):
 *     0 + 2r: f16 d;  32 + 2r: f16 dmin;  64 + 16j + r: sc[j];  192 + 32 (j / 2) + 2r + j % 2: m[j]
 *     320 + 64 (4j + i) + 4r + k: element 32j + 4i + k in the low nibble and 32j + 16 + 4i + k
 *     in the high nibble (sub-block j; q4kx_pos)
 *   Q6_K (Q6KX_SB_BYTES = 3360, the file's 210 per row): group g = elements 16g + 0..15 as
 *   sets A, B, C, D of 4 (16g + 4s + k, s = 0..3):
 *     192g + 4r + k:        low nibble A's, high nibble B's low 4 bits
 *     192g + 64 + 4r + k:   low nibble C's, high nibble D's low 4 bits
 *     192g + 128 + 4r + k:  top 2 bits of C, D, A, B at bits 0-1, 2-3, 4-5, 6-7
 *     Q6KX_D + 2r: f16 d;  Q6KX_SC + 16g + r: int8 sc[g]
 * so the scales of 16 rows widen to the int32 lanes (Q4_K's m[2q], m[2q + 1] to the int16
 * pairs) with one extension each. */
#define KX_ROWS 16
#define Q4KX_SB_BYTES 2368
#define Q6KX_SB_BYTES 3360
#define Q6KX_D 3072
#define Q6KX_SC 3104
/* PACKED Q5_K, Q3_K AND IQ4_XS (sp_mat_pack; read by quant_lowbit_avx512.c only): the same
 * 16-row groups and records, with r the row in the group, i, k, s = 0..3:
 *   Q5_K (Q5KX_SB_BYTES = 2880, 180 per row): bytes 0 .. 2367 are the packed Q4_K record of the
 *     low 4 bits (d, dmin, sc, m, nibbles), then the fifth bits of sub-block j at
 *     Q5KX_H + 64j + 4r + k: bit i of element 32j + 4i + k, bit 4 + i of element 32j + 16 + 4i + k
 *   Q3_K (Q3KX_SB_BYTES = 1824, 114 per row): group g = elements 16g + 0..15;
 *     64g + 4r + k: bits 2s, 2s + 1 = the low 2 bits of element 16g + 4s + k
 *     Q3KX_H + 64 (g / 2) + 4r + k: bit 4 (g % 2) + s = the hmask bit of element 16g + 4s + k
 *     Q3KX_SC + 16g + r: int8 s[g] − 32 (−32..31);  Q3KX_D + 2r: f16 d
 *   IQ4_XS (IQ4XSX_SB_BYTES = 2208, 138 per row): 64 (4j + i) + 4r + k: the table index of
 *     element 32j + 4i + k in the low nibble, of 32j + 16 + 4i + k in the high nibble;
 *     IQ4XSX_SC + 16j + r: int8 ls[j] − 32;  IQ4XSX_D + 2r: f16 d */
#define Q5KX_SB_BYTES 2880
#define Q5KX_H 2368
#define Q3KX_SB_BYTES 1824
#define Q3KX_H 1024
#define Q3KX_SC 1536
#define Q3KX_D 1792
#define IQ4XSX_SB_BYTES 2208
#define IQ4XSX_SC 2048
#define IQ4XSX_D 2176
/* 1 for the low-bit types with a packed form (above) */
static inline int sp_lowbit_packs(sp_dtype dt) { return dt == SP_DT_Q5_K || dt == SP_DT_Q3_K || dt == SP_DT_IQ4_XS; }
/* bytes of one packed record (16 rows, one super-block) of Q4_K, Q5_K, Q3_K or IQ4_XS */
static inline size_t kx_record_bytes(sp_dtype dt) {
    return dt == SP_DT_Q4_K ? Q4KX_SB_BYTES : dt == SP_DT_Q5_K ? Q5KX_SB_BYTES : dt == SP_DT_Q3_K ? Q3KX_SB_BYTES
                                                                                                   : IQ4XSX_SB_BYTES;
}
/* bytes per row of packed Q4_K (for Q6_K: the file's row bytes) */
static inline size_t q4kx_row_bytes(int K) { return (size_t)(K / 256) * (Q4KX_SB_BYTES / KX_ROWS); }
/* bytes per row of packed Q5_K, Q3_K or IQ4_XS */
static inline size_t kx_lowbit_row_bytes(sp_dtype dt, int K) { return (size_t)(K / 256) * (kx_record_bytes(dt) / KX_ROWS); }
static inline size_t kx_bytes(int N, size_t row_bytes) { return (size_t)((N + KX_ROWS - 1) / KX_ROWS) * KX_ROWS * row_bytes; }
/* byte of a Q4_K record holding element e (0..255) of row r; the high nibble when e % 32 >= 16 */
static inline int q4kx_pos(int r, int e) { return 320 + 64 * (4 * (e / 32) + e % 16 / 4) + 4 * r + e % 4; }

typedef struct {
    float *Y;          /* [T, N] */
    const uint8_t *W;  /* N rows of wrow bytes (the packed rows when packed) */
    int packed;        /* W is packed Q4_0, Q4_K, Q6_K, Q5_K, Q3_K or IQ4_XS (above); wrow is the packed row's bytes */
    const uint8_t *XQ; /* T quantized activation rows of xrow bytes */
    sp_dtype dt;
    int T, N, K;
    size_t wrow, xrow;
} qmm_ctx;

/* A software-prefetch stream of the decode tiles: rows [first, first + rows) of W (rows are
 * contiguous, clipped to W's last row), requested at an even pace, one share per call of
 * qstream_next (into every cache level) or qstream_next_nta (non-temporally) over `steps`
 * calls. */
typedef struct {
    const char *p, *end;
    size_t step;
} qstream;

static inline qstream qstream_rows(const qmm_ctx *c, int first, int rows, int steps) {
    qstream f = {NULL, NULL, 0};
    if (first >= c->N) return f;
    if (c->N - first < rows) rows = c->N - first;
    f.p = (const char *)c->W + (size_t)first * c->wrow;
    f.end = f.p + (size_t)rows * c->wrow;
    f.step = ((size_t)rows * c->wrow + (size_t)steps - 1) / (size_t)steps;
    return f;
}

static inline void qstream_next(qstream *f) {
    if (!f->p) return;
    const char *goal = f->p + f->step;
    for (; f->p < goal && f->p < f->end; f->p += 64) __builtin_prefetch(f->p, 0, 3);
}

static inline void qstream_next_nta(qstream *f) {
    if (!f->p) return;
    const char *goal = f->p + f->step;
    for (; f->p < goal && f->p < f->end; f->p += 64) __builtin_prefetch(f->p, 0, 0);
}

static inline qx_row qx_at(const qmm_ctx *c, int t) {
    const uint8_t *p = c->XQ + (size_t)t * c->xrow;
    size_t nb = (size_t)c->K / sp_dtype_block_elems(c->dt);
    qx_row r = {(const int8_t *)p, (const float *)(p + c->K), NULL};
    if (qx_is_q8_K(c->dt)) r.bsums = (const int16_t *)(p + c->K + 4 * nb);
    return r;
}

/* llama.cpp's nearest_int: half to even (quant.c) */
int sp_quant_round_even(float f);
/* the weighted scale-and-min fit of the K-quants with a min (quant.c) */
float sp_quant_fit_scale_min(const float *x, const float *w, int n, int nmax, float rmin, int nstep, int use_abs,
                             uint8_t *L, float *mn);
/* Q3_K's 16 signed scales s[g] − 32 from its 12 packed bytes (quant_lowbit.c) */
void sp_q3_K_scales(const uint8_t *packed, int8_t sc[16]);

/* sub-block j's 6-bit scale and min of a Q4_K block's packed `scales` (quant.c) */
void sp_q4_K_scale_min(int j, const uint8_t *s, int *sc, int *m);

/* All eight at once, one byte each (byte j of *sc8 = sc[j], of *m8 = m[j]), by 32-bit word
 * operations on the 12 packed bytes (the same bits as sp_q4_K_scale_min). */
static inline void q4k_scales8(const uint8_t *s, uint64_t *sc8, uint64_t *m8) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4), memcpy(&u1, s + 4, 4), memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    *sc8 = sc_lo | (uint64_t)sc_hi << 32;
    *m8 = m_lo | (uint64_t)m_hi << 32;
}

/* scratch bytes of one activation row for weight type dt (a multiple of 64) */
size_t sp_qx_row_bytes(sp_dtype dt, int K);
/* Quantize x[K] into one scratch row (layout above) with quant.c's row quantizers: Q8_0
 * blocks for Q8_0 / Q4_0 / Q5_0 weights, Q8_K for the K-quants. sp_qx_quantize_avx512 (AVX-512 F/BW,
 * entered with the VNNI kernels) writes the same bytes; blocks holding a NaN or an infinity
 * go through the scalar quantizer there. */
void sp_qx_quantize(uint8_t *row, const float *x, sp_dtype dt, int K);
#if defined(__x86_64__) || defined(__i386__)
void sp_qx_quantize_avx512(uint8_t *row, const float *x, sp_dtype dt, int K);
#endif

/* Y[t, n] for every t < T and n in [n0, n1), in the canonical order above */
void sp_qmm_rows_scalar(const qmm_ctx *c, int n0, int n1);
#if defined(__x86_64__) || defined(__i386__)
void sp_qmm_rows_avx2(const qmm_ctx *c, int n0, int n1);
void sp_qmm_rows_avx512(const qmm_ctx *c, int n0, int n1);
void sp_qmm_rows_avx512_k(const qmm_ctx *c, int n0, int n1); /* Q4_K / Q6_K, from sp_qmm_rows_avx512 */
void sp_qmm_rows_lowbit_avx2(const qmm_ctx *c, int n0, int n1); /* sp_quant_is_lowbit types, AVX2 and AVX-512 tiers */
/* AVX-512 VNNI: packed Q5_K / Q3_K / IQ4_XS in 16-row tiles; everything else goes to the AVX2 kernels */
void sp_qmm_rows_lowbit_avx512(const qmm_ctx *c, int n0, int n1);
#endif
#if defined(__aarch64__)
void qmm_rows_neon(const qmm_ctx *c, int n0, int n1);
void sp_qmm_rows_lowbit_neon(const qmm_ctx *c, int n0, int n1); /* sp_quant_is_lowbit types */
#endif

/* sp_matmul for quantized W on tier `tier` (SP_CPU_SCALAR for the portable twin) */
void sp_matmul_quant(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W, sp_cpu_tier tier);
/* sp_matmul_multi's quantized path: n weights of one K and one activation format (Q8_0 blocks:
 * Q8_0 / Q4_0 / Q5_0; Q8_K: Q4_K / Q6_K), which sp_matmul_quant_shares_x tells */
int sp_matmul_quant_shares_x(const sp_mat *const *W, int n);
void sp_matmul_quant_multi(sp_pool *pool, float *const *Y, const float *X, int T, const sp_mat *const *W, int n,
                           sp_cpu_tier tier);
void sp_matmul_quant_ref(float *Y, const float *X, int T, const sp_mat *W);

#endif
