/* kernels_internal.h — what the kernel files share and the tests may reach: the canonical
 * reduction order (the heart of batch invariance), the lane-wise exp/tanh, and the entry
 * points of the instruction-set variants (*_avx512.c, *_avx2.c, *_neon.c) that the portable
 * files dispatch to through sp_cpu_level() (src/core/cpu.h).
 *
 * THE CANONICAL DOT PRODUCT. Every f32 dot product of length K in the fast kernels (matmul
 * rows, attention scores, RMSNorm sums of squares) is computed the same way:
 *   acc[l] = 0 for 16 lanes l;
 *   for chunk c = 0, 1, ..., ceil(K/16)-1 and lane l with k = 16c + l < K:
 *       acc[l] = fma(x[k], w[k], acc[l])          (lanes past K are left unchanged)
 *   r8[i] = acc[i] + acc[i+8]; r4[i] = r8[i] + r8[i+4]; r2[i] = r4[i] + r4[i+2];
 *   result = r2[0] + r2[1]
 * AVX-512 holds acc in one zmm register, AVX2 in two ymm registers (lanes 0..7, 8..15), NEON
 * in four q registers, the portable path in a float[16] with fmaf. All give the same bits,
 * whatever register blocking is used around them (docs/SIMD.md). */
#ifndef SPECULA_KERNELS_INTERNAL_H
#define SPECULA_KERNELS_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/cpu.h"
#include "kernels.h"

/* clang contracts a*b+c into fma by default (gcc in ISO C mode does not); the kernels spell
 * their fmas out, so keep both compilers from inventing others. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define SP_ALWAYS_INLINE inline __attribute__((always_inline))

/* the canonical 16 → 1 tree over 16 lane values */
static inline float sp_hsum16(const float a[16]) {
    float r8[8], r4[4], r2[2];
    for (int i = 0; i < 8; i++) r8[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++) r4[i] = r8[i] + r8[i + 4];
    for (int i = 0; i < 2; i++) r2[i] = r4[i] + r4[i + 2];
    return r2[0] + r2[1];
}

/* canonical dot of two f32 vectors, portable */
static inline float sp_dot_f32_portable(const float *x, const float *w, int K) {
    float acc[16] = {0};
    for (int k0 = 0; k0 < K; k0 += 16)
        for (int l = 0; l < 16 && k0 + l < K; l++) acc[l] = fmaf(x[k0 + l], w[k0 + l], acc[l]);
    return sp_hsum16(acc);
}

/* ---- lane-wise e^x and tanh ----------------------------------------------------------------
 * One value's result depends on that value only. Every tier computes exactly these float
 * operations (the vector versions in kernels_avx512.h, kernels_avx2.h, kernels_neon.h follow
 * them step for step), so scalar and vector results are bit-identical.
 *
 * e^x, ~1 ulp over the f32 range: x clamped to [-104, 88.7228390] (NaN passes through),
 * n = round-to-even(x·log2 e), r = x − n·ln2 (two-constant Cody–Waite, fused), a degree-7
 * polynomial for e^r on |r| <= ln2/2 (cephes expf coefficients), times 2^n with one rounding
 * (ldexpf; x < -104 gives 0, x > 88.72 gives inf). */
static inline float sp_exp_lane(float x) {
    x = 88.7228390f < x ? 88.7228390f : x;
    x = -104.0f > x ? -104.0f : x;
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    return n == n ? ldexpf(p, (int)n) : p;
}

/* tanh, ~2 ulp: |x| < 0.5 by the odd Taylor series to x^15 (next term < 3e-8 relative there),
 * otherwise sign(x)·(1 − 2/(e^{2|x|} + 1)) (no cancellation once tanh >= 0.46; e^{2|x|} = inf
 * for large |x| gives exactly ±1). NaN stays NaN. */
static inline float sp_tanh_lane(float x) {
    float ax = fabsf(x);
    if (!(ax < 0.5f)) return copysignf(1.0f - 2.0f / (sp_exp_lane(ax + ax) + 1.0f), x);
    float x2 = x * x, p = -1.4558343870e-3f; /* -929569/638512875 */
    p = fmaf(p, x2, 3.5921280366e-3f);       /* 21844/6081075 */
    p = fmaf(p, x2, -8.8632355299e-3f);      /* -1382/155925 */
    p = fmaf(p, x2, 2.1869488536e-2f);       /* 62/2835 */
    p = fmaf(p, x2, -5.3968253968e-2f);      /* -17/315 */
    p = fmaf(p, x2, 1.3333333333e-1f);       /* 2/15 */
    p = fmaf(p, x2, -3.3333333333e-1f);      /* -1/3 */
    return fmaf(x * x2, p, x);
}

/* silu(g)·u and gelu_tanh(g)·u of one lane, in the order every vector tier uses */
static inline float sp_silu_mul_lane(float g, float u) { return g / (1.0f + sp_exp_lane(-g)) * u; }
static inline float sp_gelu_mul_lane(float g, float u) {
    float inner = (float)SP_GELU_K * fmaf((float)SP_GELU_A * g, g * g, g);
    return 0.5f * g * (1.0f + sp_tanh_lane(inner)) * u;
}

/* ---- element-wise and row primitives, one set per tier (act.c, act_<tier>.c) ------------ */
/* out = silu(gate) ⊙ up and gelu_tanh(gate) ⊙ up (out may alias gate or up) */
void sp_silu_mul_avx512(float *out, const float *gate, const float *up, size_t n);
void sp_silu_mul_avx2(float *out, const float *gate, const float *up, size_t n);
void sp_silu_mul_neon(float *out, const float *gate, const float *up, size_t n);
void sp_gelu_tanh_mul_avx512(float *out, const float *gate, const float *up, size_t n);
void sp_gelu_tanh_mul_avx2(float *out, const float *gate, const float *up, size_t n);
void sp_gelu_tanh_mul_neon(float *out, const float *gate, const float *up, size_t n);
/* x = c · tanh(x / c) */
void sp_softcap_avx512(float *x, size_t n, float c);
void sp_softcap_avx2(float *x, size_t n, float c);
void sp_softcap_neon(float *x, size_t n, float c);
/* x[i] = e^(x[i] − m); returns Σ x[i] as 16 lane sums (lane i % 16) and the canonical tree */
float sp_exp_sum_avx512(float *x, int n, float m);
float sp_exp_sum_avx2(float *x, int n, float m);
float sp_exp_sum_neon(float *x, int n, float m);
/* the canonical dot of x and w (length K) */
float sp_dot_f32_avx512(const float *x, const float *w, int K);
float sp_dot_f32_avx2(const float *x, const float *w, int K);
float sp_dot_f32_neon(const float *x, const float *w, int K);
/* first index of the largest non-NaN value; 0 when all are NaN (n >= 1) */
int sp_argmax_avx512(const float *x, int n);
int sp_argmax_avx2(const float *x, int n);
int sp_argmax_neon(const float *x, int n);

/* the bandwidth probe's read loop (bandwidth.c): XOR of the 8-byte words of p[0, n), n a
 * multiple of 256, p 64-byte aligned */
uint64_t sp_read_span_avx512(const uint8_t *p, size_t n);
uint64_t sp_read_span_avx2(const uint8_t *p, size_t n);

/* the canonical dot on the tier in use */
float sp_dot_f32(const float *x, const float *w, int K);

/* ---- matmul (matmul.c, matmul_<tier>.c) ------------------------------------------------- */
typedef struct {
    float *Y;
    const float *X;
    const void *W;
    sp_dtype dt;
    int T, N, K;
    sp_cpu_tier tier; /* the code path of this call */
    int bf16dot;      /* 0: the canonical f32 order; 1: the bf16-dot order, 2: the same on vdpbf16ps */
    int chunk_rows;   /* rows of W per claimed chunk (a multiple of SP_MM_ROW_ALIGN) */
    _Atomic int next_chunk;
} sp_mm_ctx;

/* row chunks are multiples of every tier's tile heights (1, 2, 3, 4, 6, 8) */
#define SP_MM_ROW_ALIGN 24

/* Y rows [n0, n1) for all T tokens. [f0, f1): the rows this thread does next (empty if
 * none), which the AVX-512 path starts streaming in; cold: nothing of [n0, n1) requested yet. */
void sp_mm_rows_avx512(const sp_mm_ctx *c, int n0, int n1, int f0, int f1, int cold);
void sp_mm_rows_avx2(const sp_mm_ctx *c, int n0, int n1);
void sp_mm_rows_neon(const sp_mm_ctx *c, int n0, int n1);

/* sp_matmul on one code path (tests; tier must be supported). Same bits on every tier. */
void sp_matmul_tier(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W, sp_cpu_tier tier);
/* sp_matmul_tier on SP_CPU_SCALAR */
void sp_matmul_portable(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W);

/* ---- the bf16-dot numerics (matmul_bf16dot.c, matmul_bf16dot_<tier>.c; docs/SIMD.md) -----
 * An opt-in order for bf16 weights (sp_mat.bf16_dot) that the AVX512_BF16 instruction
 * vdpbf16ps computes natively and every other tier emulates with f32 FMAs, bit for bit:
 *   xb[k] = sp_bf16dot_round(x[k]): the activation rounded to bf16 (DAZ, round-to-nearest-even,
 *           NaN made quiet), as vcvtne2ps2bf16 does; wb[k] = sp_bf16dot_daz(w[k]);
 *           positions k >= K count as xb = wb = +0 (the last chunk is padded);
 *   acc[l] = +0 for 16 lanes l;
 *   for chunk c = 0 .. ceil(K/32)-1 and lane l, with o = 32c + 2l + 1 and e = 32c + 2l:
 *       acc[l] = ftz(fma(xb[o], wb[o], sp_bf16dot_daz(acc[l])))     (the odd element first)
 *       acc[l] = ftz(fma(xb[e], wb[e], acc[l]))
 *   result = the canonical 16 → 1 tree (sp_hsum16, plain IEEE adds).
 * ftz: a subnormal result (after rounding) becomes a zero of its sign; the products of two
 * bf16 values are exact, and fma keeps them unrounded and unbounded in exponent, as the
 * instruction does (measured on an AMD Zen 5: docs/SIMD.md). NaN results are NaN on every
 * tier, with unspecified payload. */
static inline float sp_bf16dot_daz(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&x, &u, 4);
    return x;
}
/* x as the bf16 value the order multiplies (kept as an f32 with its low 16 bits zero) */
static inline float sp_bf16dot_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
    else if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    else u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
/* one lane step of the order: acc after the pair (o, e) */
static inline float sp_bf16dot_pair(float acc, float xo, float wo, float xe, float we) {
    acc = sp_bf16dot_daz(fmaf(xo, wo, sp_bf16dot_daz(acc)));
    return sp_bf16dot_daz(fmaf(xe, we, acc));
}
/* the bf16-dot of an f32 row x and a bf16 row w of length K, portable (the reference order) */
float sp_dot_bf16dot_portable(const float *x, const uint16_t *w, int K);

/* rows [n0, n1) of a bf16-dot matmul on one tier; hw (AVX-512 only): use vdpbf16ps */
void sp_mm_bf16dot_rows_avx512(const sp_mm_ctx *c, int n0, int n1, int hw);
void sp_mm_bf16dot_rows_avx2(const sp_mm_ctx *c, int n0, int n1);
void sp_mm_bf16dot_rows_neon(const sp_mm_ctx *c, int n0, int n1);
void sp_mm_bf16dot_rows_portable(const sp_mm_ctx *c, int n0, int n1);
/* sp_matmul of a bf16-dot matrix on one code path (tests; tier must be supported; hw: the
 * AVX-512 tier uses vdpbf16ps, needs SP_CPU_HAS_AVX512_BF16) */
void sp_matmul_bf16dot_tier(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W, sp_cpu_tier tier,
                            int hw);

/* ---- attention (attention.c, attention_<tier>.c) ---------------------------------------- */
/* element offset of position p, KV head kvh in a [cap, KVH, D] cache */
static inline size_t sp_kv_off(const sp_attn_shape *s, int p, int kvh) {
    size_t slot = (size_t)(s->ring ? p % s->cap : p);
    return (slot * (size_t)s->KVH + (size_t)kvh) * (size_t)s->D;
}

#define SP_ATTN_PF_KEYS 16 /* keys ahead to prefetch */

/* Scores of NR query rows q[r] against NK key rows k[x]: the canonical dot times scale, into
 * e[r][col + x]; m[r] = max(m[r], ...) in increasing x. */
typedef void (*sp_attn_qk_fn)(const float *const *q, const float *const *k, int D, float scale,
                              float *const *e, int col, float *m);
/* For NR rows r: o_r[d] = fma(e_r[p − p0], v_p[d], o_r[d]) for p = a .. b-1 in increasing
 * order, d = d0 .. d0+dn-1 (dn <= 128), v_p the V row of position p, KV head kvh. */
typedef void (*sp_attn_pv_fn)(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0,
                              float *const *o, const float *const *e, int d0, int dn);
/* One tier's attention pieces. qk_wide[NR − 1]: NR = 1..4 rows × 6 keys; qk_narrow: × 1 key;
 * pv[NR − 1]: NR = 1..3 rows; exp: buf[i] = e^(buf[i] − m), i < n, lane-wise. */
typedef struct {
    sp_attn_qk_fn qk_wide[4], qk_narrow[4];
    sp_attn_pv_fn pv[3];
    void (*exp)(float *buf, int n, float m);
} sp_attn_ops;

extern const sp_attn_ops sp_attn_ops_avx512, sp_attn_ops_avx2, sp_attn_ops_neon;
/* the pieces of one tier (attention.c); the tree-masked kernel (attention_tree.c) uses them */
const sp_attn_ops *sp_attn_ops_for(sp_cpu_tier tier);
/* sp_attention_tree on one code path (tests; tier must be supported) */
void sp_attention_tree_tier(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                            const sp_attn_shape *s, const int32_t *parent, sp_cpu_tier tier);

/* sp_attention on one code path (tests; tier must be supported) */
void sp_attention_tier(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                       const sp_attn_shape *s, sp_cpu_tier tier);

#endif
