/* test_quant.c — the quantized weight types (src/kernels/quant.h, docs/QUANT.md):
 *   - block geometry and names; hand-written byte vectors from llama.cpp's definitions;
 *   - quantize → dequantize round trips on rows mixing normal, all-zero, tiny, huge, spiky,
 *     one-signed and constant blocks, against the error each format allows; the quantizers'
 *     bytes against hashes of what llama.cpp's reference quantizers write for the same rows;
 *   - the dequantizers against an element-by-element reading of the layouts;
 *   - sp_matmul on quantized W: equal (to float rounding) to the exact dot of the dequantized
 *     weights with the quantized activations, and within the stated activation-quantization
 *     bound of sp_matmul_ref; bitwise batch invariance (T = 1..16 at every offset, a long T
 *     crossing scratch chunks, threads 1 vs 2) and identical bits on every SIMD tier;
 *   - sp_mat_check and the generic row functions' errors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

static sp_pool *pool1, *pool2;
static const sp_dtype WTYPES[] = {SP_DT_Q8_0, SP_DT_Q4_0, SP_DT_Q4_K, SP_DT_Q6_K, SP_DT_Q5_0, SP_DT_Q5_K,
                                  SP_DT_Q3_K, SP_DT_Q2_K, SP_DT_Q5_1, SP_DT_IQ4_NL, SP_DT_IQ4_XS,
                                  SP_DT_Q4_1, SP_DT_QA8};
#define NWT 13

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static uint16_t f16(float f) { return sp_f32_to_f16(f); }

/* A row of n values whose 32-value blocks cycle through the shapes quantizers trip on:
 * uniform, all zero, tiny (1e-6), huge (3e4), one spike among small values, all positive,
 * all negative, constant; every fifth 256-value super-block is entirely zero. */
static void tricky_row(float *x, size_t n, unsigned seed) {
    harness_fill(x, n, 1.0f, seed);
    for (size_t i = 0; i < n; i++) {
        size_t blk = i / 32, sb = i / 256;
        float v = x[i];
        if (sb % 5 == 4) v = 0.0f;
        else switch ((blk + seed) % 8) {
            case 0: break;
            case 1: v = 0.0f; break;
            case 2: v *= 1e-6f; break;
            case 3: v *= 3e4f; break;
            case 4: v = i % 32 == 7 ? 100.0f : v * 0.01f; break;
            case 5: v = fabsf(v) + 0.5f; break;
            case 6: v = -fabsf(v) - 0.25f; break;
            default: v = 0.3f; break;
            }
        x[i] = v;
    }
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- geometry, names, byte vectors ----------------------------------------------------- */
static void test_geometry(void) {
    static const struct { sp_dtype dt; const char *name; size_t be, bb; } g[] = {
        {SP_DT_Q8_0, "Q8_0", 32, 34},   {SP_DT_Q4_0, "Q4_0", 32, 18},   {SP_DT_Q4_K, "Q4_K", 256, 144},
        {SP_DT_Q6_K, "Q6_K", 256, 210}, {SP_DT_Q8_K, "Q8_K", 256, 292}, {SP_DT_BF16, "BF16", 1, 2},
        {SP_DT_F32, "F32", 1, 4},       {SP_DT_Q5_0, "Q5_0", 32, 22}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        CHECK(strcmp(sp_dtype_name(g[i].dt), g[i].name) == 0, "%s", sp_dtype_name(g[i].dt));
        CHECK(sp_dtype_block_elems(g[i].dt) == g[i].be, "%s elems %zu", g[i].name, sp_dtype_block_elems(g[i].dt));
        CHECK(sp_dtype_block_bytes(g[i].dt) == g[i].bb, "%s bytes %zu", g[i].name, sp_dtype_block_bytes(g[i].dt));
        CHECK(sp_dtype_row_bytes(g[i].dt, 1024) == 1024 / g[i].be * g[i].bb, "%s row", g[i].name);
        CHECK(sp_dtype_is_quant(g[i].dt) == (g[i].be > 1), "%s is_quant", g[i].name);
    }
    CHECK(sp_dtype_row_bytes(SP_DT_Q4_K, 1000) == 0, "partial super-block");
    CHECK(sp_dtype_row_bytes(SP_DT_Q8_0, 48) == 0, "partial block");
    CHECK(sp_dtype_size(SP_DT_Q8_0) == 0, "no per-element size");
    CHECK(strcmp(sp_dtype_name(SP_DT_UNKNOWN), "UNKNOWN") == 0, "unknown name");
}

/* Q8_0, Q4_0 and Q5_0 blocks written out by hand from the format definitions */
static void test_bytes_q8_0_q4_0(void) {
    /* Q8_0: amax 127 → d = 1 (f16 0x3C00), qs = round(x); x = -64, -60, ..., 60, then 127;
     * halves round away from zero: 2.5 → 3, -2.5 → -3 */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(4 * j - 64);
    x[31] = 127.0f, x[1] = 2.5f, x[2] = -2.5f;
    sp_block_q8_0 b8;
    sp_quantize_row_q8_0(&b8, x, 32);
    CHECK(b8.d == 0x3C00, "d %04x", b8.d);
    for (int j = 0; j < 32; j++) {
        int want = j == 1 ? 3 : j == 2 ? -3 : (int)x[j];
        CHECK(b8.qs[j] == want, "qs[%d] = %d, want %d", j, b8.qs[j], want);
    }
    /* Q4_0: largest magnitude -8 → d = -8 / -8 = 1; q = min(15, trunc(x + 8.5)) = x + 8 for
     * integers -8..7; byte j = q[j] | q[j + 16] << 4 */
    for (int j = 0; j < 32; j++) x[j] = (float)((j * 7) % 16 - 8);
    x[5] = -8.0f;
    sp_block_q4_0 b4;
    sp_quantize_row_q4_0(&b4, x, 32);
    CHECK(b4.d == 0x3C00, "q4_0 d %04x", b4.d);
    for (int j = 0; j < 16; j++) {
        int q0 = (int)x[j] + 8, q1 = (int)x[j + 16] + 8;
        CHECK(b4.qs[j] == (uint8_t)(q0 | q1 << 4), "q4_0 qs[%d] = %02x", j, b4.qs[j]);
    }
    /* the largest magnitude positive: d = 6 / -8 = -0.75 (f16 0xBA00); 6 → q 0; -6 → 16 → 15 */
    memset(x, 0, sizeof x);
    x[0] = 6.0f, x[1] = -6.0f, x[20] = 3.0f;
    sp_quantize_row_q4_0(&b4, x, 32);
    CHECK(b4.d == 0xBA00, "q4_0 d %04x", b4.d);
    CHECK(b4.qs[0] == (0 | 8 << 4) && b4.qs[1] == (15 | 8 << 4) && b4.qs[4] == (8 | 4 << 4),
          "q4_0 bytes %02x %02x %02x", b4.qs[0], b4.qs[1], b4.qs[4]);
    float y[32];
    sp_dequantize_row_q4_0(y, &b4, 32);
    CHECK(y[0] == 6.0f && y[1] == -5.25f && y[20] == 3.0f && y[2] == 0.0f, "q4_0 values %g %g %g", y[0], y[1], y[20]);
    /* Q5_0: largest magnitude -16 → d = 1; q = min(31, trunc(x + 16.5)) = x + 16 for integers
     * -16..15; byte j = (q[j] & 15) | (q[j + 16] & 15) << 4, bit e of qh = q[e] >> 4 */
    for (int j = 0; j < 32; j++) x[j] = (float)((j * 11) % 32 - 16);
    x[9] = -16.0f;
    sp_block_q5_0 b5;
    sp_quantize_row_q5_0(&b5, x, 32);
    CHECK(b5.d == 0x3C00, "q5_0 d %04x", b5.d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = (int)x[j] + 16, q1 = (int)x[j + 16] + 16;
        CHECK(b5.qs[j] == (uint8_t)((q0 & 15) | (q1 & 15) << 4), "q5_0 qs[%d] = %02x", j, b5.qs[j]);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    CHECK(b5.qh[0] == (qh & 255) && b5.qh[1] == (qh >> 8 & 255) && b5.qh[2] == (qh >> 16 & 255) && b5.qh[3] == qh >> 24,
          "q5_0 qh %02x%02x%02x%02x, want %08x", b5.qh[3], b5.qh[2], b5.qh[1], b5.qh[0], qh);
    sp_dequantize_row_q5_0(y, &b5, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == x[j], "q5_0 y[%d] = %g, want %g", j, y[j], x[j]);
    /* the largest magnitude positive: d = 8 / -16 = -0.5 (f16 0xB800); 8 → 0; -8 → 32 → 31 */
    memset(x, 0, sizeof x);
    x[0] = 8.0f, x[1] = -8.0f, x[20] = 3.0f;
    sp_quantize_row_q5_0(&b5, x, 32);
    sp_dequantize_row_q5_0(y, &b5, 32);
    CHECK(b5.d == 0xB800 && y[0] == 8.0f && y[1] == -7.5f && y[20] == 3.0f && y[2] == 0.0f, "q5_0 %04x: %g %g %g",
          b5.d, y[0], y[1], y[20]);
}

/* Q4_K and Q6_K blocks assembled by hand; expected values from the definitions */
static void test_bytes_k_quants(void) {
    sp_block_q4_K k4;
    memset(&k4, 0, sizeof k4);
    k4.d = f16(0.5f), k4.dmin = f16(0.25f);
    /* sub-blocks 0..3: sc = 1 + j, m = 2j in the low 6 bits of bytes j, j + 4; sub-blocks
     * 4..7: sc = 40 + j (low nibble in byte j + 4, top 2 bits in byte j - 4 bits 6-7),
     * m = 17 + j (high nibble of byte j + 4, top bits in byte j bits 6-7) */
    int want_sc[8], want_m[8];
    for (int j = 0; j < 4; j++) {
        want_sc[j] = 1 + j, want_m[j] = 2 * j;
        k4.scales[j] = (uint8_t)want_sc[j], k4.scales[j + 4] = (uint8_t)want_m[j];
    }
    for (int j = 4; j < 8; j++) {
        want_sc[j] = 40 + j, want_m[j] = 17 + j;
        k4.scales[j + 4] = (uint8_t)((want_sc[j] & 15) | (want_m[j] & 15) << 4);
        k4.scales[j - 4] |= (uint8_t)((want_sc[j] >> 4) << 6);
        k4.scales[j] |= (uint8_t)((want_m[j] >> 4) << 6);
    }
    for (int i = 0; i < 128; i++) k4.qs[i] = (uint8_t)((i * 5 + 3) & 0xFF);
    float y[256];
    sp_dequantize_row_q4_K(y, &k4, 256);
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        int c = e / 64, hi = (e % 64) >= 32, l = e % 32, j = 2 * c + hi;
        int q = hi ? k4.qs[32 * c + l] >> 4 : k4.qs[32 * c + l] & 15;
        float want = (0.5f * (float)want_sc[j]) * (float)q - 0.25f * (float)want_m[j];
        if (y[e] != want && bad++ < 5) CHECK(0, "q4_K y[%d] = %g, want %g", e, y[e], want);
    }
    CHECK(bad == 0, "%d q4_K values differ", bad);

    sp_block_q6_K k6;
    memset(&k6, 0, sizeof k6);
    k6.d = f16(0.125f);
    for (int g = 0; g < 16; g++) k6.scales[g] = (int8_t)(g * 9 - 70);
    for (int i = 0; i < 128; i++) k6.ql[i] = (uint8_t)((i * 37 + 11) & 0xFF);
    for (int i = 0; i < 64; i++) k6.qh[i] = (uint8_t)((i * 101 + 5) & 0xFF);
    sp_dequantize_row_q6_K(y, &k6, 256);
    bad = 0;
    for (int e = 0; e < 256; e++) {
        /* value e = 128h + 32k + l: low 4 bits from ql[64h + l + 32(k & 1)] (high nibble
         * when k >= 2), top 2 bits from qh[32h + l] bits 2k, 2k+1; group e / 16 */
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        int lo = k6.ql[64 * h + l + 32 * (k & 1)], u = (k >= 2 ? lo >> 4 : lo & 15) | ((k6.qh[32 * h + l] >> (2 * k)) & 3) << 4;
        float want = (0.125f * (float)k6.scales[e / 16]) * (float)(u - 32);
        if (y[e] != want && bad++ < 5) CHECK(0, "q6_K y[%d] = %g, want %g", e, y[e], want);
    }
    CHECK(bad == 0, "%d q6_K values differ", bad);
}

/* The largest |x − x̂| of a Q8_0 block with largest magnitude amax: half a step d = amax/127,
 * plus 128 times the rounding of d to f16 (which underflows to 0 for amax below ~7.6e-6) */
static double q8_0_err(float amax) {
    float d = amax / 127.0f, d16 = sp_f16_to_f32(f16(d));
    return 0.5 * d + 128.0 * fabs((double)d - d16) + 1e-38;
}

/* the word-parallel unpacking of Q4_K scales the SIMD kernels use agrees with the bytewise
 * definition on every bit pattern of random packed bytes */
static void test_q4_K_scales(void) {
    unsigned long long r = 12345;
    int bad = 0;
    for (int it = 0; it < 20000; it++) {
        uint8_t s[12];
        for (int k = 0; k < 12; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            s[k] = (uint8_t)(r >> 56);
        }
        uint64_t sc8, m8;
        q4k_scales8(s, &sc8, &m8);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            sp_q4_K_scale_min(j, s, &sc, &m);
            bad += (int)(sc8 >> (8 * j) & 0xFF) != sc || (int)(m8 >> (8 * j) & 0xFF) != m;
        }
    }
    CHECK(bad == 0, "%d scale/min values differ", bad);
}

/* ---- round trips ------------------------------------------------------------------------- */
/* Worst error the format allows per block (a multiple of its step), checked element-wise for
 * Q8_0 / Q4_0 and as block RMS for the K-quants, whose fitted scales have no simple max. */
static void test_round_trip(void) {
    const size_t n = 4096;
    float *x = xmalloc(n * 4), *y = xmalloc(n * 4);
    void *q = xmalloc(sp_dtype_row_bytes(SP_DT_Q8_K, n));
    for (unsigned seed = 1; seed <= 8; seed++) {
        tricky_row(x, n, seed);
        for (int t = 0; t < NWT + 1; t++) {
            sp_dtype dt = t < NWT ? WTYPES[t] : SP_DT_Q8_K;
            sp_err err;
            CHECK(sp_quantize_row(q, x, dt, n, &err) == 0, "%s", err.msg);
            CHECK(sp_dequantize_row(y, q, dt, n, &err) == 0, "%s", err.msg);
            size_t be = qx_is_q8_K(dt) ? 16 : 32; /* check unit */
            for (size_t b0 = 0; b0 < n; b0 += be) {
                float amax = 0;
                double se = 0, sx = 0;
                for (size_t i = b0; i < b0 + be; i++) amax = fmaxf(amax, fabsf(x[i]));
                for (size_t i = b0; i < b0 + be; i++) {
                    CHECK(isfinite(y[i]), "%s seed %u y[%zu] not finite", sp_dtype_name(dt), seed, i);
                    double e = fabs((double)y[i] - x[i]);
                    se += e * e, sx += (double)x[i] * x[i];
                    float d4 = amax / 8.0f, d4h = sp_f16_to_f32(f16(d4));
                    float d5 = amax / 16.0f, d5h = sp_f16_to_f32(f16(d5));
                    double lim = dt == SP_DT_Q8_0 ? q8_0_err(amax)
                                 : dt == SP_DT_Q4_0 ? d4 + 8.0 * fabs((double)d4 - d4h) + 1e-38
                                 : dt == SP_DT_Q5_0 ? d5 + 16.0 * fabs((double)d5 - d5h) + 1e-38
                                 : dt == SP_DT_Q8_K ? 0 : INFINITY;
                    if (dt == SP_DT_Q8_K) { /* scale over the whole super-block */
                        float sa = 0;
                        for (size_t k = i / 256 * 256; k < i / 256 * 256 + 256; k++) sa = fmaxf(sa, fabsf(x[k]));
                        lim = sa / 127.0 * 0.5001 + 1e-38;
                    }
                    if (e > lim) {
                        CHECK(0, "%s seed %u x[%zu] = %g → %g (limit %g)", sp_dtype_name(dt), seed, i, x[i], y[i], lim);
                        break;
                    }
                }
                /* K-quants: a group's RMS error against its super-block's range; all-zero groups
                 * come back exactly zero */
                if (amax == 0) CHECK(se == 0, "%s seed %u: zero group at %zu not exact", sp_dtype_name(dt), seed, b0);
                if (dt == SP_DT_Q4_K || dt == SP_DT_Q6_K) {
                    float sa = 0;
                    for (size_t k = b0 / 256 * 256; k < b0 / 256 * 256 + 256; k++) sa = fmaxf(sa, fabsf(x[k]));
                    double rel = sqrt(se / be) / sa;
                    double lim = dt == SP_DT_Q4_K ? 0.1 : 0.02;
                    CHECK(sa == 0 || rel <= lim, "%s seed %u group %zu: rms error %.3g of the range", sp_dtype_name(dt),
                          seed, b0 / be, rel);
                }
                (void)sx;
            }
        }
    }
    free(x), free(y), free(q);
}

/* The quantizers' bytes on tricky_row(seed 1..3) of 4096 values, hashed (FNV-1a 64): the
 * hashes are of the bytes llama.cpp's reference quantizers (quantize_row_*_ref, ggml at
 * llama.cpp de3ff81, x86-64) write for the same inputs. */
static void test_bytes_match_llama(void) {
    static const struct { sp_dtype dt; uint64_t h[3]; } ref[] = {
        {SP_DT_Q8_0, {0x8062b16bfd6566f1ull, 0x26cb9ce80fd804feull, 0x37d4a00f17702f7eull}},
        {SP_DT_Q4_0, {0xf02f8a744cd02181ull, 0x78a95efb665e01acull, 0x97a4fafc103678ceull}},
        {SP_DT_Q5_0, {0xe5cf6ab5a8b27bcdull, 0xbafd2b42bee1edc6ull, 0x73b16fa0cb84fe67ull}},
        {SP_DT_Q4_K, {0xc0b450ac25653295ull, 0xc92a2e25fb0024f8ull, 0xfd3ae4983531848bull}},
        {SP_DT_Q6_K, {0x99266c4c7038fa60ull, 0xbe0a784606717b83ull, 0xc7d41e1bdb7cc8c9ull}},
        {SP_DT_Q8_K, {0x69f00be05544946cull, 0xc9aec5cd8d848f8eull, 0xa642cf9767ec9e22ull}},
        {SP_DT_Q5_K, {0xb4e74be33359e4a1ull, 0x97c9cfde43b49da7ull, 0x3be4a16cb2192badull}},
        {SP_DT_Q3_K, {0xb2daecdb92ccf337ull, 0x222fe0b29ecaaea7ull, 0x12ac9d5a5b2d380dull}},
        {SP_DT_Q2_K, {0xca2feecb6513a3f8ull, 0xe68c706e9b8cbdc7ull, 0x7c9953ed64d74207ull}},
        {SP_DT_Q5_1, {0x3d65e49348eba1b2ull, 0x89ae84a250c584b2ull, 0x9ffcd049bb89d2e1ull}},
        {SP_DT_IQ4_NL, {0xac7cf272876ca0c6ull, 0x85812b4a2e73d718ull, 0x2dfcb713123ad1e4ull}},
        {SP_DT_IQ4_XS, {0xecfbbd18cdf2fe00ull, 0x22671b6877ce4950ull, 0xe351a807029f944eull}}};
    const size_t n = 4096;
    float *x = xmalloc(n * 4);
    void *q = xmalloc(sp_dtype_row_bytes(SP_DT_Q8_K, n));
    for (size_t t = 0; t < sizeof ref / sizeof ref[0]; t++)
        for (unsigned s = 1; s <= 3; s++) {
            tricky_row(x, n, s);
            sp_quantize_row(q, x, ref[t].dt, n, NULL);
            uint64_t h = fnv1a(q, sp_dtype_row_bytes(ref[t].dt, n));
            CHECK(h == ref[t].h[s - 1], "%s seed %u: bytes hash %016llx, llama.cpp %016llx", sp_dtype_name(ref[t].dt),
                  s, (unsigned long long)h, (unsigned long long)ref[t].h[s - 1]);
        }
    free(x), free(q);
}

/* ---- matmul ------------------------------------------------------------------------------ */
typedef struct {
    sp_dtype dt;
    int N, K;
    void *w;
    float *wf; /* dequantized W [N, K] */
} qmat;

static qmat qmat_make(sp_dtype dt, int N, int K, unsigned seed, float scale) {
    qmat m = {dt, N, K, NULL, xmalloc((size_t)N * K * 4)};
    size_t rb = sp_dtype_row_bytes(dt, (size_t)K);
    m.w = xmalloc((size_t)N * rb);
    float *row = xmalloc((size_t)K * 4);
    for (int n = 0; n < N; n++) {
        harness_fill(row, (size_t)K, scale, seed * 1000 + (unsigned)n);
        if (n % 7 == 3) tricky_row(row, (size_t)K, (unsigned)n);
        sp_quantize_row((char *)m.w + (size_t)n * rb, row, dt, (size_t)K, NULL);
        sp_dequantize_row(m.wf + (size_t)n * K, (char *)m.w + (size_t)n * rb, dt, (size_t)K, NULL);
    }
    free(row);
    return m;
}

static void qmat_free(qmat *m) { free(m->w), free(m->wf); }

/* x quantized as sp_matmul does for weight type dt, then dequantized */
static void act_dequant(float *xh, const float *x, sp_dtype dt, int K) {
    sp_dtype at = qx_is_q8_K(dt) ? SP_DT_Q8_K : SP_DT_Q8_0;
    void *q = xmalloc(sp_dtype_row_bytes(at, (size_t)K));
    sp_quantize_row(q, x, at, (size_t)K, NULL);
    sp_dequantize_row(xh, q, at, (size_t)K, NULL);
    free(q);
}

/* Fast vs exact: |y − Σ ŵ·x̂| <= 2e-6 · Σ|ŵ·x̂| (float rounding of the block sums). Fast vs
 * ref (x unquantized): |y − Σ ŵ·x| <= Σ |ŵ| · e_x + 2e-6 · Σ|ŵ·x|, with e_x the activation
 * quantization error bound per element: Q8_0 blocks q8_0_err (half a step plus the f16
 * rounding of the step), Q8_K 0.5001 · amax/127 over the super-block. */
static void test_matmul_vs_ref(void) {
    const int N = 37, T = 5;
    for (int t = 0; t < NWT; t++) {
        sp_dtype dt = WTYPES[t];
        int K = sp_dtype_block_elems(dt) == 32 ? 32 * 23 : 256 * 3;
        for (int sc = 0; sc < 3; sc++) {
            float scale = sc == 0 ? 1.0f : sc == 1 ? 1e-3f : 50.0f;
            qmat m = qmat_make(dt, N, K, 7 + (unsigned)sc, scale);
            sp_mat W = {m.w, dt, N, K, 0, NULL};
            float *X = xmalloc((size_t)T * K * 4), *Y = xmalloc((size_t)T * N * 4), *R = xmalloc((size_t)T * N * 4);
            float *xh = xmalloc((size_t)K * 4), *ex = xmalloc((size_t)K * 4);
            harness_fill(X, (size_t)T * K, scale, 99 + (unsigned)sc);
            tricky_row(X + K, (size_t)K, 3); /* token 1: the awkward blocks */
            sp_matmul(pool2, Y, X, T, &W);
            sp_matmul_ref(R, X, T, &W);
            int bad = 0;
            for (int tk = 0; tk < T; tk++) {
                const float *x = X + (size_t)tk * K;
                act_dequant(xh, x, dt, K);
                int unit = sp_dtype_block_elems(dt) == 32 ? 32 : 256;
                for (int k0 = 0; k0 < K; k0 += unit) {
                    float a = 0;
                    for (int k = k0; k < k0 + unit; k++) a = fmaxf(a, fabsf(x[k]));
                    for (int k = k0; k < k0 + unit; k++) ex[k] = unit == 32 ? (float)q8_0_err(a) : a / 127.0f * 0.5001f;
                }
                for (int n = 0; n < N; n++) {
                    const float *w = m.wf + (size_t)n * K;
                    double exact = 0, mag = 0, magx = 0, bound = 0;
                    for (int k = 0; k < K; k++) {
                        exact += (double)w[k] * xh[k];
                        mag += fabs((double)w[k] * xh[k]);
                        magx += fabs((double)w[k] * x[k]);
                        bound += fabs((double)w[k]) * ex[k];
                    }
                    double y = Y[(size_t)tk * N + n], r = R[(size_t)tk * N + n];
                    if (fabs(y - exact) > 2e-6 * mag + 1e-30 && bad++ < 4)
                        CHECK(0, "%s s=%g t=%d n=%d: fast %.9g vs exact %.9g", sp_dtype_name(dt), scale, tk, n, y, exact);
                    if (fabs(y - r) > bound + 2e-6 * magx + 1e-30 && bad++ < 4)
                        CHECK(0, "%s s=%g t=%d n=%d: fast %.9g vs ref %.9g beyond bound %.3g", sp_dtype_name(dt), scale,
                              tk, n, y, r, bound);
                }
            }
            CHECK(bad == 0, "%s scale %g: %d outputs out of bounds", sp_dtype_name(dt), scale, bad);
            free(X), free(Y), free(R), free(xh), free(ex);
            qmat_free(&m);
        }
    }
}

/* a row's output is the same bits whatever T, its index and the thread count */
static void test_batch_invariance(void) {
    for (int t = 0; t < NWT; t++) {
        sp_dtype dt = WTYPES[t];
        int K = sp_dtype_block_elems(dt) == 32 ? 32 * 13 : 512, N = 83, T = 16;
        qmat m = qmat_make(dt, N, K, 3, 1.0f);
        sp_mat W = {m.w, dt, N, K, 0, NULL};
        float *X = xmalloc((size_t)T * K * 4), *Y = xmalloc((size_t)T * N * 4), *P = xmalloc((size_t)T * N * 4);
        harness_fill(X, (size_t)T * K, 1.0f, 5);
        sp_matmul(pool1, Y, X, T, &W);
        int bad = 0;
        for (int tt = 1; tt <= T; tt++)
            for (int off = 0; off + tt <= T; off++) {
                sp_matmul(off & 1 ? pool2 : pool1, P, X + (size_t)off * K, tt, &W);
                if (memcmp(P, Y + (size_t)off * N, (size_t)tt * N * 4) != 0) bad++;
            }
        CHECK(bad == 0, "%s: %d (T, offset) pairs differ from the T=16 call", sp_dtype_name(dt), bad);
        sp_matmul(pool2, P, X, T, &W);
        CHECK(memcmp(P, Y, (size_t)T * N * 4) == 0, "%s: 2 threads differ from 1", sp_dtype_name(dt));
        free(X), free(Y), free(P);
        qmat_free(&m);
    }
    /* long T with a wide K: the activations go through the scratch in several chunks */
    for (int t = 0; t < NWT; t++) {
        sp_dtype dt = WTYPES[t];
        int K = 8192, N = 24, T = 40;
        qmat m = qmat_make(dt, N, K, 4, 1.0f);
        sp_mat W = {m.w, dt, N, K, 0, NULL};
        float *X = xmalloc((size_t)T * K * 4), *Y = xmalloc((size_t)T * N * 4), *P = xmalloc((size_t)N * 4);
        harness_fill(X, (size_t)T * K, 1.0f, 6);
        sp_matmul(pool2, Y, X, T, &W);
        int bad = 0;
        for (int tk = 0; tk < T; tk++) {
            sp_matmul(pool1, P, X + (size_t)tk * K, 1, &W);
            if (memcmp(P, Y + (size_t)tk * N, (size_t)N * 4) != 0) bad++;
        }
        CHECK(bad == 0, "%s K=%d: %d of %d tokens differ from single-token calls", sp_dtype_name(dt), K, bad, T);
        free(X), free(Y), free(P);
        qmat_free(&m);
    }
}

/* every tier this processor has gives the scalar tier's bits */
static void test_tiers(void) {
    sp_cpu_tier orig = sp_cpu_level();
    const sp_cpu_tier tiers[] = {SP_CPU_AVX2, SP_CPU_AVX512, SP_CPU_NEON};
    int tried = 0;
    for (int t = 0; t < NWT; t++) {
        sp_dtype dt = WTYPES[t];
        int K = sp_dtype_block_elems(dt) == 32 ? 32 * 21 : 256 * 5, N = 53, T = 11;
        qmat m = qmat_make(dt, N, K, 11, 1.0f);
        sp_mat W = {m.w, dt, N, K, 0, NULL};
        float *X = xmalloc((size_t)T * K * 4), *S = xmalloc((size_t)T * N * 4), *P = xmalloc((size_t)T * N * 4);
        harness_fill(X, (size_t)T * K, 2.0f, 12);
        tricky_row(X + 2 * (size_t)K, (size_t)K, 5);
        sp_matmul_portable(pool2, S, X, T, &W);
        CHECK(sp_cpu_force(SP_CPU_SCALAR) == 0, "force scalar");
        sp_matmul(pool2, P, X, T, &W);
        CHECK(memcmp(S, P, (size_t)T * N * 4) == 0, "%s: forced scalar differs from the portable path", sp_dtype_name(dt));
        for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
            if (sp_cpu_force(tiers[i]) != 0) continue;
            tried++;
            for (int tt = 1; tt <= T; tt += 5) {
                memset(P, 0xff, (size_t)T * N * 4);
                sp_matmul(pool2, P, X, tt, &W);
                CHECK(memcmp(S, P, (size_t)tt * N * 4) == 0, "%s T=%d: tier %s differs from scalar",
                      sp_dtype_name(dt), tt, sp_cpu_tier_name(tiers[i]));
            }
        }
        sp_cpu_force(orig);
        free(X), free(S), free(P);
        qmat_free(&m);
    }
    printf("# tiers compared with scalar: %d (current tier %s)\n", tried / NWT, sp_cpu_tier_name(orig));
}

/* Packed Q4_0 (sp_mat_pack, the AVX-512 tier's load-time layout of quant_internal.h): it holds
 * the file's scales and nibbles, and sp_matmul gives the unpacked bits with it, for every T,
 * batch offset and thread count, on row counts and block counts that leave remainders (an odd
 * last block, a partial group of 16 scales, a partial tile of 4 rows). */
static void test_packed_q4_0(void) {
    const int Ks[] = {32 * 13, 32 * 37, 32 * 48};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki], N = 23, T = 16, nb = K / 32;
        qmat m = qmat_make(SP_DT_Q4_0, N, K, 21 + (unsigned)ki, 1.0f);
        sp_mat W = {m.w, SP_DT_Q4_0, N, K, 0, NULL};
        size_t pb = sp_mat_pack_bytes(&W);
        if (pb == 0) {
            printf("# no packed Q4_0 on tier %s: nothing to compare\n", sp_cpu_tier_name(sp_cpu_level()));
            CHECK(sp_cpu_level() != SP_CPU_AVX512 || !(sp_cpu_features() & SP_CPU_HAS_AVX512_VNNI),
                  "AVX-512 VNNI tier without a packed Q4_0 form");
            qmat_free(&m);
            return;
        }
        size_t prow = pb / (size_t)N, wrow = sp_dtype_row_bytes(SP_DT_Q4_0, (size_t)K);
        CHECK(pb % (size_t)N == 0 && prow % 64 == 0 && prow >= wrow && prow < wrow + 64 + 32,
              "K=%d: packed bytes %zu for %d rows of %zu", K, pb, N, wrow);
        uint8_t *pk = xmalloc(pb);
        memset(pk, 0xA5, pb);
        sp_mat_pack(&W, pk);
        /* the layout: scales first (padded to 16), then pairs of blocks in nibbles */
        int bad = 0;
        size_t sbytes = (size_t)(nb + 15) / 16 * 16 * 2;
        for (int n = 0; n < N; n++) {
            const uint8_t *src = (const uint8_t *)m.w + (size_t)n * wrow, *row = pk + (size_t)n * prow;
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = src + 18 * (size_t)b;
                if (memcmp(row + 2 * (size_t)b, blk, 2) != 0) bad++;
                for (int i = 0; i < 32; i++) {
                    int want = i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4;
                    int got = row[sbytes + 32 * (size_t)(b / 2) + (size_t)i] >> (4 * (b & 1)) & 15;
                    if (got != want) bad++;
                }
            }
            if (nb % 2)
                for (int i = 0; i < 32; i++) bad += row[sbytes + 32 * (size_t)(nb / 2) + (size_t)i] >> 4 != 0;
        }
        CHECK(bad == 0, "K=%d: %d packed values differ from the Q4_0 rows", K, bad);
        sp_mat Wp = W;
        Wp.pack = pk;
        float *X = xmalloc((size_t)T * K * 4), *Y = xmalloc((size_t)T * N * 4), *P = xmalloc((size_t)T * N * 4);
        harness_fill(X, (size_t)T * K, 1.0f, 31 + (unsigned)ki);
        tricky_row(X + 3 * (size_t)K, (size_t)K, 7);
        sp_matmul(pool1, Y, X, T, &W);
        for (int tt = 1; tt <= T; tt++)
            for (int off = 0; off + tt <= T; off += 3) {
                memset(P, 0xff, (size_t)tt * N * 4);
                sp_matmul(off & 1 ? pool2 : pool1, P, X + (size_t)off * K, tt, &Wp);
                if (memcmp(P, Y + (size_t)off * N, (size_t)tt * N * 4) != 0) bad++;
            }
        CHECK(bad == 0, "K=%d: %d (T, offset) calls on the packed form differ from the Q4_0 rows", K, bad);
        CHECK(Y[0] != 0.0f && Y[(size_t)T * N - 1] != 0.0f, "K=%d: outputs are zero", K);
        free(X), free(Y), free(P), free(pk);
        qmat_free(&m);
    }
}

static uint16_t rd_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* the 6-bit value of element e of a Q6_K super-block in the file's layout (docs/QUANT.md) */
static int q6k_value(const uint8_t *blk, int e) {
    int h = e / 128, l = e % 32, part = e % 128 / 32;
    uint8_t lb = blk[64 * h + l + 32 * (part & 1)];
    return (part < 2 ? lb & 15 : lb >> 4) | (blk[128 + 32 * h + l] >> (2 * part) & 3) << 4;
}

/* Packed Q4_K / Q6_K (quant_internal.h): every quant, scale and d of the 16-row groups sits
 * where the layout says, zeros in the padding rows (N = 23: a full group and a part), and
 * sp_matmul on the packed form gives the bits of the file's
 * rows (the unpacked AVX-512 tile and the scalar kernels) for T = 1..16, batch offsets, 1 and 2
 * threads. Row 5 is all largest quants with the largest scales (Q6_K: scale −128, to check the
 * sign) and token 2 is constant (every activation −127, dequantized exactly 1): the largest
 * integer sums the packed kernels keep per lane. */
static void test_packed_k(sp_dtype dt) {
    const int Ks[] = {256 * 1, 256 * 5, 256 * 12};
    const int q4 = dt == SP_DT_Q4_K, bsz = q4 ? 144 : 210;
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki], N = 23, T = 16, nsb = K / 256;
        qmat m = qmat_make(dt, N, K, 41 + (unsigned)ki, 1.0f);
        size_t wrow = sp_dtype_row_bytes(dt, (size_t)K);
        uint16_t d = f16(0.01f), dmin = f16(0.02f);
        for (int b = 0; b < nsb; b++) {
            uint8_t *blk = (uint8_t *)m.w + 5 * wrow + (size_t)bsz * b;
            if (q4) {
                memcpy(blk, &d, 2), memcpy(blk + 2, &dmin, 2);
                memset(blk + 4, 0xFF, 140);
            } else {
                memset(blk, 0xFF, 192), memset(blk + 192, 0x80, 16);
                memcpy(blk + 208, &d, 2);
            }
        }
        sp_mat W = {m.w, dt, N, K, 0, NULL};
        size_t pb = sp_mat_pack_bytes(&W);
        if (pb == 0) {
            printf("# no packed %s on tier %s: nothing to compare\n", sp_dtype_name(dt), sp_cpu_tier_name(sp_cpu_level()));
            CHECK(sp_cpu_level() != SP_CPU_AVX512 || !(sp_cpu_features() & SP_CPU_HAS_AVX512_VNNI),
                  "AVX-512 VNNI tier without a packed %s form", sp_dtype_name(dt));
            qmat_free(&m);
            return;
        }
        const size_t rec_bytes = q4 ? 2368 : 3360, want_pb = (size_t)(N + 15) / 16 * nsb * rec_bytes;
        CHECK(pb == want_pb, "K=%d: packed bytes %zu, expected %zu", K, pb, want_pb);
        uint8_t *pk = xmalloc(pb);
        memset(pk, 0xA5, pb);
        sp_mat_pack(&W, pk);
        /* every row of every group, record (n / 16, b), row r = n % 16; zeros for padding rows */
        int bad = 0;
        for (int n = 0; n < (N + 15) / 16 * 16; n++)
            for (int b = 0; b < nsb; b++) {
                const uint8_t *rec = pk + ((size_t)(n / 16) * nsb + b) * rec_bytes;
                const uint8_t *src = n < N ? (const uint8_t *)m.w + n * wrow + (size_t)bsz * b : NULL;
                int r = n % 16;
                if (q4) {
                    if (rd_u16(rec + 2 * r) != (src ? rd_u16(src) : 0) || rd_u16(rec + 32 + 2 * r) != (src ? rd_u16(src + 2) : 0))
                        bad++;
                    for (int j = 0; j < 8; j++) {
                        int sc = 0, mn = 0;
                        if (src) sp_q4_K_scale_min(j, src + 4, &sc, &mn);
                        if (rec[64 + 16 * j + r] != sc || rec[192 + 32 * (j / 2) + 2 * r + j % 2] != mn) bad++;
                    }
                    for (int e = 0; e < 256; e++) {
                        int want = !src ? 0 : e % 64 < 32 ? src[16 + 32 * (e / 64) + e % 32] & 15 : src[16 + 32 * (e / 64) + e % 32] >> 4;
                        if ((rec[q4kx_pos(r, e)] >> (e % 32 >= 16 ? 4 : 0) & 15) != want) bad++;
                    }
                } else { /* element 16g + 4s + k: nibble s % 2 of L(s / 2), top bits at 2 ((s + 2) % 4) of H */
                    if (rd_u16(rec + Q6KX_D + 2 * r) != (src ? rd_u16(src + 208) : 0)) bad++;
                    for (int g = 0; g < 16; g++)
                        if ((int8_t)rec[Q6KX_SC + 16 * g + r] != (src ? (int8_t)src[192 + g] : 0)) bad++;
                    for (int e = 0; e < 256; e++) {
                        int g = e / 16, s4 = e % 16 / 4, k = e % 4;
                        int lo = rec[192 * g + 64 * (s4 / 2) + 4 * r + k] >> (4 * (s4 % 2)) & 15;
                        int top = rec[192 * g + 128 + 4 * r + k] >> (2 * ((s4 + 2) % 4)) & 3;
                        if ((lo | top << 4) != (src ? q6k_value(src, e) : 0)) bad++;
                    }
                }
            }
        CHECK(bad == 0, "%s K=%d: %d packed values differ from the rows", sp_dtype_name(dt), K, bad);
        sp_mat Wp = W;
        Wp.pack = pk;
        float *X = xmalloc((size_t)T * K * 4), *Y = xmalloc((size_t)T * N * 4), *P = xmalloc((size_t)T * N * 4);
        float *S = xmalloc((size_t)T * N * 4);
        harness_fill(X, (size_t)T * K, 1.0f, 51 + (unsigned)ki);
        tricky_row(X + 3 * (size_t)K, (size_t)K, 9);
        for (int k = 0; k < K; k++) X[2 * (size_t)K + k] = 1.0f;
        sp_matmul(pool1, Y, X, T, &W);
        sp_matmul_quant(NULL, S, X, T, &W, SP_CPU_SCALAR);
        CHECK(memcmp(S, Y, (size_t)T * N * 4) == 0, "%s K=%d: the unpacked tile differs from the scalar kernel",
              sp_dtype_name(dt), K);
        for (int tt = 1; tt <= T; tt++)
            for (int off = 0; off + tt <= T; off += 3) {
                memset(P, 0xff, (size_t)tt * N * 4);
                sp_matmul(off & 1 ? pool2 : pool1, P, X + (size_t)off * K, tt, &Wp);
                if (memcmp(P, Y + (size_t)off * N, (size_t)tt * N * 4) != 0) bad++;
            }
        CHECK(bad == 0, "%s K=%d: %d (T, offset) calls on the packed form differ from the rows", sp_dtype_name(dt), K, bad);
        /* row 5 at the constant token: K · value, value = 63·15·d − 63·dmin (Q4_K), d·(−128)·(63 − 32) (Q6_K) */
        double fd = sp_f16_to_f32(d), fm = sp_f16_to_f32(dmin);
        double want = K * (q4 ? 63 * 15 * fd - 63 * fm : fd * -128 * 31);
        CHECK(fabs(Y[2 * (size_t)N + 5] - want) <= 1e-4 * fabs(want), "%s K=%d: extreme row gives %g, expected %g",
              sp_dtype_name(dt), K, Y[2 * (size_t)N + 5], want);
        free(X), free(Y), free(P), free(S), free(pk);
        qmat_free(&m);
    }
}

static void test_packed_q4_K(void) { test_packed_k(SP_DT_Q4_K); }
static void test_packed_q6_K(void) { test_packed_k(SP_DT_Q6_K); }

/* the integer quant of element e of a super-block in the file's layout (docs/QUANT.md): Q5_K
 * q in 0..31, Q3_K u in 0..7 (value u − 4), IQ4_XS the table index */
static int lowbit_file_q(sp_dtype dt, const uint8_t *blk, int e) {
    int j = e / 32, l = e % 32;
    if (dt == SP_DT_Q5_K) {
        uint8_t b = blk[48 + 32 * (e / 64) + l];
        return (e % 64 < 32 ? b & 15 : b >> 4) | (blk[16 + l] >> j & 1) << 4;
    }
    if (dt == SP_DT_Q3_K) return (blk[32 + 32 * (e / 128) + l] >> (2 * (j % 4)) & 3) | (blk[l] >> j & 1) << 2;
    uint8_t b = blk[8 + 16 * j + l % 16];
    return l < 16 ? b & 15 : b >> 4;
}

/* the same from row r of a packed record (quant_internal.h) */
static int lowbit_packed_q(sp_dtype dt, const uint8_t *rec, int r, int e) {
    int g = e / 16, s = e % 16 / 4, k = e % 4, i = e % 16 / 4, hi = e % 32 >= 16;
    if (dt == SP_DT_Q3_K)
        return (rec[64 * g + 4 * r + k] >> (2 * s) & 3) | (rec[Q3KX_H + 64 * (g / 2) + 4 * r + k] >> (4 * (g % 2) + s) & 1) << 2;
    int nib = rec[(dt == SP_DT_Q5_K ? 320 : 0) + 64 * (4 * (e / 32) + i) + 4 * r + k] >> (4 * hi) & 15;
    if (dt == SP_DT_IQ4_XS) return nib;
    return nib | (rec[Q5KX_H + 64 * (e / 32) + 4 * r + k] >> (i + 4 * hi) & 1) << 4;
}

/* the number of scale / d fields of row r of a record that differ from the file's block src
 * (NULL: a padding row, every field 0) */
static int lowbit_packed_scales_bad(sp_dtype dt, const uint8_t *rec, int r, const uint8_t *src) {
    int bad = 0;
    if (dt == SP_DT_Q5_K) {
        bad += rd_u16(rec + 2 * r) != (src ? rd_u16(src) : 0) || rd_u16(rec + 32 + 2 * r) != (src ? rd_u16(src + 2) : 0);
        for (int j = 0; j < 8; j++) {
            int sc = 0, mn = 0;
            if (src) sp_q4_K_scale_min(j, src + 4, &sc, &mn);
            bad += rec[64 + 16 * j + r] != sc || rec[192 + 32 * (j / 2) + 2 * r + j % 2] != mn;
        }
    } else if (dt == SP_DT_Q3_K) {
        int8_t sc[16] = {0};
        if (src) sp_q3_K_scales(src + 96, sc);
        bad += rd_u16(rec + Q3KX_D + 2 * r) != (src ? rd_u16(src + 108) : 0);
        for (int g = 0; g < 16; g++) bad += (int8_t)rec[Q3KX_SC + 16 * g + r] != sc[g];
    } else {
        bad += rd_u16(rec + IQ4XSX_D + 2 * r) != (src ? rd_u16(src) : 0);
        for (int j = 0; j < 8; j++) {
            int ls = src ? ((src[4 + j / 2] >> (4 * (j % 2)) & 15) | (rd_u16(src + 2) >> (2 * j) & 3) << 4) - 32 : 0;
            bad += (int8_t)rec[IQ4XSX_SC + 16 * j + r] != ls;
        }
    }
    return bad;
}

/* row 5's super-blocks made extreme: Q5_K every quant 31 and scale and min 63; Q3_K every u 7
 * and every scale −32; IQ4_XS every index 0 (T = −127) and every scale −32. Returns the value
 * of each of its elements. */
static double lowbit_extreme_row(sp_dtype dt, uint8_t *row, int nsb) {
    const size_t bsz = dt == SP_DT_Q5_K ? 176 : dt == SP_DT_Q3_K ? 110 : 136;
    uint16_t d = f16(0.01f), dmin = f16(0.02f);
    for (int b = 0; b < nsb; b++) {
        uint8_t *blk = row + bsz * b;
        if (dt == SP_DT_Q5_K) memcpy(blk, &d, 2), memcpy(blk + 2, &dmin, 2), memset(blk + 4, 0xFF, 172);
        if (dt == SP_DT_Q3_K) memset(blk, 0xFF, 96), memset(blk + 96, 0, 12), memcpy(blk + 108, &d, 2);
        if (dt == SP_DT_IQ4_XS) memcpy(blk, &d, 2), memset(blk + 2, 0, 134);
    }
    double fd = sp_f16_to_f32(d), fm = sp_f16_to_f32(dmin);
    return dt == SP_DT_Q5_K ? 63 * 31 * fd - 63 * fm : dt == SP_DT_Q3_K ? fd * -32 * 3 : fd * -32 * -127;
}

/* Packed Q5_K / Q3_K / IQ4_XS (quant_internal.h): every quant, scale and d of the 16-row groups
 * sits where the layout says, zeros in the padding rows (N = 23: a full group and a part), and
 * sp_matmul on the packed form gives the bits of the file's rows (the AVX2 kernels and the
 * scalar ones) for T = 1..16, batch offsets, 1 and 2 threads; row 5 holds the largest integer
 * sums (lowbit_extreme_row) against token 2, constant. */
static void test_packed_lowbit(sp_dtype dt) {
    const int Ks[] = {256 * 1, 256 * 5, 256 * 12};
    const size_t bsz = sp_dtype_block_bytes(dt), rec_bytes = kx_record_bytes(dt);
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki], N = 23, T = 16, nsb = K / 256;
        qmat m = qmat_make(dt, N, K, 61 + (unsigned)ki, 1.0f);
        size_t wrow = sp_dtype_row_bytes(dt, (size_t)K);
        double want = K * lowbit_extreme_row(dt, (uint8_t *)m.w + 5 * wrow, nsb);
        sp_mat W = {m.w, dt, N, K, 0, NULL};
        size_t pb = sp_mat_pack_bytes(&W);
        if (pb == 0) {
            printf("# no packed %s on tier %s: nothing to compare\n", sp_dtype_name(dt), sp_cpu_tier_name(sp_cpu_level()));
            CHECK(sp_cpu_level() != SP_CPU_AVX512 || !(sp_cpu_features() & SP_CPU_HAS_AVX512_VNNI),
                  "AVX-512 VNNI tier without a packed %s form", sp_dtype_name(dt));
            qmat_free(&m);
            return;
        }
        CHECK(pb == (size_t)(N + 15) / 16 * nsb * rec_bytes, "%s K=%d: packed bytes %zu", sp_dtype_name(dt), K, pb);
        uint8_t *pk = xmalloc(pb);
        memset(pk, 0xA5, pb);
        sp_mat_pack(&W, pk);
        int bad = 0;
        for (int n = 0; n < (N + 15) / 16 * 16; n++)
            for (int b = 0; b < nsb; b++) {
                const uint8_t *rec = pk + ((size_t)(n / 16) * nsb + b) * rec_bytes;
                const uint8_t *src = n < N ? (const uint8_t *)m.w + n * wrow + bsz * b : NULL;
                bad += lowbit_packed_scales_bad(dt, rec, n % 16, src);
                for (int e = 0; e < 256; e++) bad += lowbit_packed_q(dt, rec, n % 16, e) != (src ? lowbit_file_q(dt, src, e) : 0);
            }
        CHECK(bad == 0, "%s K=%d: %d packed values differ from the rows", sp_dtype_name(dt), K, bad);
        sp_mat Wp = W;
        Wp.pack = pk;
        float *X = xmalloc((size_t)T * K * 4), *Y = xmalloc((size_t)T * N * 4), *P = xmalloc((size_t)T * N * 4);
        float *S = xmalloc((size_t)T * N * 4);
        harness_fill(X, (size_t)T * K, 1.0f, 71 + (unsigned)ki);
        tricky_row(X + 3 * (size_t)K, (size_t)K, 9);
        for (int k = 0; k < K; k++) X[2 * (size_t)K + k] = 1.0f;
        sp_matmul(pool1, Y, X, T, &W);
        sp_matmul_quant(NULL, S, X, T, &W, SP_CPU_SCALAR);
        CHECK(memcmp(S, Y, (size_t)T * N * 4) == 0, "%s K=%d: the file's rows differ from the scalar kernel",
              sp_dtype_name(dt), K);
        for (int tt = 1; tt <= T; tt++)
            for (int off = 0; off + tt <= T; off += 3) {
                memset(P, 0xff, (size_t)tt * N * 4);
                sp_matmul(off & 1 ? pool2 : pool1, P, X + (size_t)off * K, tt, &Wp);
                if (memcmp(P, Y + (size_t)off * N, (size_t)tt * N * 4) != 0) bad++;
            }
        CHECK(bad == 0, "%s K=%d: %d (T, offset) calls on the packed form differ from the rows", sp_dtype_name(dt), K, bad);
        CHECK(fabs(Y[2 * (size_t)N + 5] - want) <= 1e-4 * fabs(want), "%s K=%d: extreme row gives %g, expected %g",
              sp_dtype_name(dt), K, Y[2 * (size_t)N + 5], want);
        free(X), free(Y), free(P), free(S), free(pk);
        qmat_free(&m);
    }
}

static void test_packed_q5_K(void) { test_packed_lowbit(SP_DT_Q5_K); }
static void test_packed_q3_K(void) { test_packed_lowbit(SP_DT_Q3_K); }
static void test_packed_iq4_xs(void) { test_packed_lowbit(SP_DT_IQ4_XS); }

/* The activation rows sp_matmul quantizes: the AVX-512 quantizer writes the scalar one's bytes,
 * on tricky rows and on the cases where rounding rules, the first-maximum rule or the scalar
 * fallback would show (ties at .5, ±equal magnitudes, NaN / inf, |x| above 3.4e38, subnormals). */
static void test_activation_rows(void) {
#if defined(__x86_64__)
    unsigned f = sp_cpu_features();
    if (!(f & SP_CPU_HAS_AVX512) || !(f & SP_CPU_HAS_AVX512_VNNI)) {
        printf("# no AVX-512 VNNI: activation quantizer not compared\n");
        return;
    }
    const sp_dtype types[] = {SP_DT_Q8_0, SP_DT_Q4_K};
    const int K = 256 * 8;
    float *x = xmalloc((size_t)K * 4);
    size_t rb = sp_qx_row_bytes(SP_DT_Q4_K, K);
    uint8_t *a = xmalloc(rb), *b = xmalloc(rb);
    for (int ti = 0; ti < 2; ti++) {
        sp_dtype dt = types[ti];
        size_t nb = (size_t)K / sp_dtype_block_elems(dt);
        size_t used = (size_t)K + 4 * nb + (dt == SP_DT_Q4_K ? 2 * (size_t)K / 16 : 0);
        for (int r = 0; r < 6; r++) {
            tricky_row(x, (size_t)K, 30 + (unsigned)r);
            if (r == 1) /* ties: a block whose largest magnitude is 127 (Q8_0 scale 1) */
                for (int i = 0; i < 256; i++) x[i] = i % 32 == 0 ? 127.0f : (float)(i % 7) - 2.5f;
            if (r == 2) /* equal magnitudes of both signs: the first decides the Q8_K sign */
                for (int i = 0; i < 512; i++) x[i] = i % 3 == 0 ? -4.0f : i % 3 == 1 ? 4.0f : 0.5f;
            if (r == 3) { /* non-finite values and magnitudes past 3.4e38 in some blocks */
                x[5] = NAN, x[300] = INFINITY, x[600] = -INFINITY, x[1000] = 3.402e38f, x[1500] = -3.4025e38f;
                x[1800] = NAN, x[1801] = 1.0f;
            }
            if (r == 4) /* subnormals and tiny values */
                for (int i = 0; i < K; i++) x[i] = (float)((i % 11) - 5) * 1e-41f;
            memset(a, 0x5a, rb), memset(b, 0xa5, rb);
            sp_qx_quantize(a, x, dt, K);
            sp_qx_quantize_avx512(b, x, dt, K);
            CHECK(memcmp(a, b, used) == 0, "%s row %d: AVX-512 activation quantizer differs from scalar",
                  sp_dtype_name(dt), r);
        }
    }
    free(x), free(a), free(b);
#endif
}

/* ---- errors -------------------------------------------------------------------------------- */
static void test_errors(void) {
    sp_err err;
    char buf[64];
    float x[64] = {1};
    sp_mat W = {buf, SP_DT_Q4_K, 4, 320, 0, NULL};
    CHECK(sp_mat_check(&W, "blk.0.ffn_up.weight", &err) == -1 && strstr(err.msg, "blk.0.ffn_up.weight") &&
              strstr(err.msg, "multiple of the 256-element block"),
          "%s", err.msg);
    W.dt = SP_DT_Q8_0, W.k = 48;
    CHECK(sp_mat_check(&W, "w", &err) == -1 && strstr(err.msg, "32-element"), "%s", err.msg);
    W.k = SP_QUANT_MAX_K + 32;
    CHECK(sp_mat_check(&W, "w", &err) == -1 && strstr(err.msg, "at most"), "%s", err.msg);
    W.dt = SP_DT_Q8_K, W.k = 256;
    CHECK(sp_mat_check(&W, "w", &err) == -1 && strstr(err.msg, "Q8_K"), "%s", err.msg);
    W.dt = SP_DT_I32;
    CHECK(sp_mat_check(&W, "w", &err) == -1 && strstr(err.msg, "I32"), "%s", err.msg);
    W.dt = SP_DT_Q6_K, W.k = 512;
    CHECK(sp_mat_check(&W, "w", &err) == 0, "%s", err.msg);
    W.data = NULL;
    CHECK(sp_mat_check(&W, "w", &err) == -1, "NULL data accepted");
    CHECK(sp_quantize_row(buf, x, SP_DT_Q4_0, 33, &err) == -1 && strstr(err.msg, "33"), "%s", err.msg);
    CHECK(sp_dequantize_row(x, buf, SP_DT_BF16, 32, &err) == -1 && strstr(err.msg, "BF16"), "%s", err.msg);
    uint16_t h[4] = {0x3C00, 0x4000, 0xC000, 0};
    CHECK(sp_row_to_f32(x, h, SP_DT_F16, 4, &err) == 0 && x[0] == 1.0f && x[1] == 2.0f && x[2] == -2.0f, "f16 row");
    sp_block_q8_0 b = {0x3800, {0}};
    b.qs[3] = -7;
    CHECK(sp_row_to_f32(x, &b, SP_DT_Q8_0, 32, &err) == 0 && x[3] == -3.5f && x[0] == 0.0f, "q8_0 row %g", x[3]);
}

int main(void) {
    pool1 = sp_pool_create(1);
    pool2 = sp_pool_create(2);
    RUN(test_geometry);
    RUN(test_bytes_q8_0_q4_0);
    RUN(test_bytes_k_quants);
    RUN(test_q4_K_scales);
    RUN(test_round_trip);
    RUN(test_bytes_match_llama);
    RUN(test_matmul_vs_ref);
    RUN(test_batch_invariance);
    RUN(test_tiers);
    RUN(test_packed_q4_0);
    RUN(test_packed_q4_K);
    RUN(test_packed_q6_K);
    RUN(test_packed_q5_K);
    RUN(test_packed_q3_K);
    RUN(test_packed_iq4_xs);
    RUN(test_activation_rows);
    RUN(test_errors);
    sp_pool_free(pool1);
    sp_pool_free(pool2);
    return harness_done("test_quant");
}
