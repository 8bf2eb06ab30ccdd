/* quant.c — row quantizers and dequantizers of the block-quantized types (quant.h), the
 * generic row conversions, the sp_matmul admission check and the double-precision oracle.
 *
 * The quantizers reproduce llama.cpp's reference quantizers (no importance matrix) step for
 * step: the same float operations in the same order, none fused (this file is built with FP
 * contraction off, see kernels_internal.h), so the bytes match what llama-quantize writes.
 * The dequantizers follow llama.cpp's definitions operation for operation. docs/QUANT.md
 * states each algorithm in our words. Not here: the dot-product kernels (quant_matmul.c and
 * the per-tier files). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_internal.h"
#include "quant.h"
#include "quant_internal.h"

/* below this a group's largest magnitude counts as zero (K-quant quantizers) */
#define GROUP_MAX_EPS 1e-15f

/* round half to even, as llama.cpp's nearest_int does over its valid range (|f| < 2^22);
 * outside it saturates, and NaN gives 0, so no input can cause undefined behaviour */
static int round_even(float f) {
    float r = nearbyintf(f);
    if (!(r == r)) return 0;
    if (r >= 2147483520.0f) return INT_MAX;
    if (r <= -2147483648.0f) return INT_MIN;
    return (int)r;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

int sp_quant_round_even(float f) { return round_even(f); }

/* The hot rounding of the activation quantizers, without libm calls: valid for |v| < 2^22
 * (their arguments are at most 127 in magnitude by construction); NaN or a larger |v| gives 0.
 * Half to even: adding 1.5 · 2^23 leaves the integer in the low mantissa bits. */
static inline int round_even_small(float v) {
    if (!(v > -4194304.0f && v < 4194304.0f)) return 0;
    return (int)((v + 12582912.0f) - 12582912.0f);
}

/* half away from zero (roundf) for |v| < 2^22, else 0: truncate, then look at the exact rest */
static inline int round_away_small(float v) {
    if (!(v > -4194304.0f && v < 4194304.0f)) return 0;
    int i = (int)v;
    float r = v - (float)i;
    return i + (r >= 0.5f) - (r <= -0.5f); /* branch-free: the rest is random */
}

/* ---- Q8_0 ------------------------------------------------------------------------------ */
void sp_quantize_row_q8_0(sp_block_q8_0 *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK8_0 == 0);
    for (size_t b = 0; b < n / SP_QK8_0; b++, x += SP_QK8_0) {
        /* max |x| over 8 interleaved partial maxima (max is exact in any order; one chain
         * of 32 dependent compares would dominate the activation quantization) */
        float pm[8] = {0};
        for (int j = 0; j < SP_QK8_0; j++) {
            float a = fabsf(x[j]);
            pm[j % 8] = pm[j % 8] > a ? pm[j % 8] : a;
        }
        float amax = 0.0f;
        for (int l = 0; l < 8; l++) amax = amax > pm[l] ? amax : pm[l];
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = sp_f32_to_f16(d);
        /* half away from zero, as roundf; |x·id| <= 127 up to rounding when amax is finite
         * (a branch-free loop the compiler vectorizes), else element by element */
        if (amax <= 3.4e38f) {
            for (int j = 0; j < SP_QK8_0; j++) {
                float v = x[j] * id, a = fabsf(v);
                int i = (int)a;
                i += a - (float)i >= 0.5f;
                i = i > 127 ? 127 : i;
                dst[b].qs[j] = (int8_t)(v < 0.0f ? -i : i);
            }
        } else {
            for (int j = 0; j < SP_QK8_0; j++) dst[b].qs[j] = (int8_t)clampi(round_away_small(x[j] * id), -128, 127);
        }
    }
}

void sp_dequantize_row_q8_0(float *y, const sp_block_q8_0 *src, size_t n) {
    SP_ASSERT(n % SP_QK8_0 == 0);
    for (size_t b = 0; b < n / SP_QK8_0; b++) {
        float d = sp_f16_to_f32(src[b].d);
        for (int j = 0; j < SP_QK8_0; j++) *y++ = (float)src[b].qs[j] * d;
    }
}

/* ---- Q4_0 ------------------------------------------------------------------------------ */
void sp_quantize_row_q4_0(sp_block_q4_0 *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK4_0 == 0);
    for (size_t b = 0; b < n / SP_QK4_0; b++, x += SP_QK4_0) {
        /* the element of largest magnitude, keeping its sign, maps to -8 */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SP_QK4_0; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = sp_f32_to_f16(d);
        for (int j = 0; j < SP_QK4_0 / 2; j++) {
            /* truncation toward zero of x·id + 8.5, at most 15 (NaN gives 0) */
            float v0 = x[j] * id + 8.5f, v1 = x[j + SP_QK4_0 / 2] * id + 8.5f;
            int q0 = v0 >= 15.0f ? 15 : v0 > 0.0f ? (int)v0 : 0, q1 = v1 >= 15.0f ? 15 : v1 > 0.0f ? (int)v1 : 0;
            dst[b].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void sp_dequantize_row_q4_0(float *y, const sp_block_q4_0 *src, size_t n) {
    SP_ASSERT(n % SP_QK4_0 == 0);
    for (size_t b = 0; b < n / SP_QK4_0; b++, y += SP_QK4_0) {
        float d = sp_f16_to_f32(src[b].d);
        for (int j = 0; j < SP_QK4_0 / 2; j++) {
            y[j] = (float)((src[b].qs[j] & 15) - 8) * d;
            y[j + SP_QK4_0 / 2] = (float)((src[b].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- Q5_0 ------------------------------------------------------------------------------ */
void sp_quantize_row_q5_0(sp_block_q5_0 *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK5_0 == 0);
    for (size_t b = 0; b < n / SP_QK5_0; b++, x += SP_QK5_0) {
        /* the element of largest magnitude, keeping its sign, maps to -16 */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SP_QK5_0; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        float d = max / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = sp_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < SP_QK5_0 / 2; j++) {
            /* truncation toward zero of x·id + 16.5, at most 31 (NaN gives 0) */
            float v0 = x[j] * id + 16.5f, v1 = x[j + SP_QK5_0 / 2] * id + 16.5f;
            int q0 = v0 >= 31.0f ? 31 : v0 > 0.0f ? (int)v0 : 0, q1 = v1 >= 31.0f ? 31 : v1 > 0.0f ? (int)v1 : 0;
            dst[b].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + SP_QK5_0 / 2);
        }
        for (int i = 0; i < 4; i++) dst[b].qh[i] = (uint8_t)(qh >> 8 * i);
    }
}

void sp_dequantize_row_q5_0(float *y, const sp_block_q5_0 *src, size_t n) {
    SP_ASSERT(n % SP_QK5_0 == 0);
    for (size_t b = 0; b < n / SP_QK5_0; b++, y += SP_QK5_0) {
        float d = sp_f16_to_f32(src[b].d);
        uint32_t qh = src[b].qh[0] | (uint32_t)src[b].qh[1] << 8 | (uint32_t)src[b].qh[2] << 16 |
                      (uint32_t)src[b].qh[3] << 24;
        for (int j = 0; j < SP_QK5_0 / 2; j++) {
            int h0 = qh >> j & 1, h1 = qh >> (j + SP_QK5_0 / 2) & 1;
            y[j] = (float)(((src[b].qs[j] & 15) | h0 << 4) - 16) * d;
            y[j + SP_QK5_0 / 2] = (float)(((src[b].qs[j] >> 4) | h1 << 4) - 16) * d;
        }
    }
}

/* ---- Q4_K ------------------------------------------------------------------------------ */
/* sub-block j's 6-bit scale and min from the 12 packed bytes: j < 4 in the low 6 bits of
 * bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 with the top 2 bits taken from the
 * spare high bits of bytes j - 4 (scale) and j (min) */
void sp_q4_K_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Fit x[0..n) ≈ scale · L − mn with L in 0..nmax by weighted least squares over a small grid
 * of nstep + 1 trial inverse scales from (nmax + rmin) / range in steps of 0.1 (llama.cpp's
 * search for the K-quants with a min: Q4_K 15, -1, 20; Q5_K 31, -0.5, 15; Q2_K 3, -0.5, 15 with
 * the absolute error instead of its square, use_abs). Returns the scale; *mn gets the
 * (non-negative) offset. n is at most 32. */
float sp_quant_fit_scale_min(const float *x, const float *w, int n, int nmax, float rmin, int nstep, int use_abs,
                             uint8_t *L, float *mn) {
    const float rdelta = 0.1f;
    uint8_t Laux[32];
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *mn = -lo;
        return 0.0f;
    }
    float iscale = nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(round_even(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * L[i] + lo - x[i];
        best += w[i] * (use_abs ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(round_even(iscale * (x[i] - lo)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float s = (sum_w * sum_xl - sum_x * sum_l) / D;
            float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (m > 0) {
                m = 0;
                s = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = s * Laux[i] + m - x[i];
                err += w[i] * (use_abs ? fabsf(diff) : diff * diff);
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = s;
                lo = m;
            }
        }
    }
    *mn = -lo;
    return scale;
}

void sp_quantize_row_q4_K(sp_block_q4_K *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    uint8_t L[SP_QK_K];
    float w[32], mins[8], scales[8];
    for (size_t b = 0; b < n / SP_QK_K; b++, x += SP_QK_K) {
        sp_block_q4_K *y = &dst[b];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            /* weights: the sub-block's RMS plus each value's magnitude */
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = sp_quant_fit_scale_min(x + 32 * j, w, 32, 15, -1.0f, 20, 0, L + 32 * j, &mins[j]);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        memset(y->scales, 0, sizeof y->scales);
        for (int j = 0; j < 8; j++) {
            /* llama.cpp stores nearest_int into a uint8_t before clamping to 63 */
            int ls = (uint8_t)round_even(inv_scale * scales[j]), lm = (uint8_t)round_even(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                y->scales[j] = (uint8_t)ls;
                y->scales[j + 4] = (uint8_t)lm;
            } else {
                y->scales[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
                y->scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y->scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y->d = sp_f32_to_f16(max_scale / 63.0f);
        y->dmin = sp_f32_to_f16(max_min / 63.0f);
        /* requantize each value with the stored (rounded) scale and min */
        for (int j = 0; j < 8; j++) {
            int sc, m;
            sp_q4_K_scale_min(j, y->scales, &sc, &m);
            float d = sp_f16_to_f32(y->d) * (float)sc;
            if (d == 0.0f) continue;
            float dm = sp_f16_to_f32(y->dmin) * (float)m;
            for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(round_even((x[32 * j + l] + dm) / d), 0, 15);
        }
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) y->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

void sp_dequantize_row_q4_K(float *y, const sp_block_q4_K *src, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    for (size_t b = 0; b < n / SP_QK_K; b++) {
        float d = sp_f16_to_f32(src[b].d), dmin = sp_f16_to_f32(src[b].dmin);
        const uint8_t *q = src[b].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            int sc, m;
            sp_q4_K_scale_min(2 * c, src[b].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            sp_q4_K_scale_min(2 * c + 1, src[b].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 15) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* ---- Q6_K ------------------------------------------------------------------------------ */
/* Fit x[0..16) ≈ scale · L with L in -32..31 (stored + 32 in L): the inverse scale maps the
 * largest-magnitude element to -32, then 18 nearby trial scales are tried and the one with
 * the best x²-weighted least-squares fit kept (llama.cpp's search for Q6_K). */
static float fit_scale_sym(const float *x, int8_t *L) {
    enum { NS = 16, NMAX = 32 };
    float max = 0, amax = 0;
    for (int i = 0; i < NS; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, NS);
        return 0.0f;
    }
    float iscale = -NMAX / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < NS; i++) {
        int l = clampi(round_even(iscale * x[i]), -NMAX, NMAX - 1);
        L[i] = (int8_t)(l + NMAX);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(NMAX + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < NS; i++) {
            int l = clampi(round_even(iscale * x[i]), -NMAX, NMAX - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < NS; i++) L[i] = (int8_t)(NMAX + clampi(round_even(iscale * x[i]), -NMAX, NMAX - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void sp_quantize_row_q6_K(sp_block_q6_K *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    int8_t L[SP_QK_K];
    float scales[16];
    for (size_t b = 0; b < n / SP_QK_K; b++, x += SP_QK_K) {
        sp_block_q6_K *y = &dst[b];
        float max_scale = 0, max_abs_scale = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_scale_sym(x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > max_abs_scale) max_abs_scale = fabsf(scales[g]), max_scale = scales[g];
        }
        memset(y, 0, sizeof *y);
        if (max_abs_scale < GROUP_MAX_EPS) continue; /* all-zero block: d = 0 */
        float iscale = -128.0f / max_scale;
        y->d = sp_f32_to_f16(1 / iscale);
        for (int g = 0; g < 16; g++) {
            int s = round_even(iscale * scales[g]);
            y->scales[g] = (int8_t)(s < 127 ? s : 127);
        }
        for (int g = 0; g < 16; g++) {
            float d = sp_f16_to_f32(y->d) * (float)y->scales[g];
            if (d == 0.0f) continue;
            for (int i = 0; i < 16; i++) L[16 * g + i] = (int8_t)(clampi(round_even(x[16 * g + i] / d), -32, 31) + 32);
        }
        /* per 128 values: ql holds low nibbles (values l and l + 64 share byte l, l + 32 and
         * l + 96 byte l + 32), qh the top 2 bits of values l, l+32, l+64, l+96 in byte l */
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 15) | (Lh[l + 64] & 15) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 15) | (Lh[l + 96] & 15) << 4);
                qh[l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

void sp_dequantize_row_q6_K(float *y, const sp_block_q6_K *src, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    for (size_t b = 0; b < n / SP_QK_K; b++) {
        float d = sp_f16_to_f32(src[b].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = src[b].ql + 64 * h, *qh = src[b].qh + 32 * h;
            const int8_t *sc = src[b].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                int g = l / 16;
                int q1 = ((ql[l] & 15) | (qh[l] & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32;
                y[l] = d * (float)sc[g] * (float)q1;
                y[l + 32] = d * (float)sc[g + 2] * (float)q2;
                y[l + 64] = d * (float)sc[g + 4] * (float)q3;
                y[l + 96] = d * (float)sc[g + 6] * (float)q4;
            }
        }
    }
}

/* ---- Q8_K (activations of the K-quant dot products) ----------------------------------- */
void sp_quantize_row_q8_K(sp_block_q8_K *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    for (size_t b = 0; b < n / SP_QK_K; b++, x += SP_QK_K) {
        sp_block_q8_K *y = &dst[b];
        float max = 0, amax = 0;
        for (int j = 0; j < SP_QK_K; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        memset(y, 0, sizeof *y);
        if (amax == 0.0f) continue;
        float iscale = -127.0f / max; /* the largest-magnitude element maps to -127 */
        for (int j = 0; j < SP_QK_K; j++) y->qs[j] = (int8_t)clampi(round_even_small(iscale * x[j]), -128, 127);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += y->qs[16 * g + i];
            y->bsums[g] = (int16_t)s;
        }
        y->d = 1 / iscale;
    }
}

void sp_dequantize_row_q8_K(float *y, const sp_block_q8_K *src, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    for (size_t b = 0; b < n / SP_QK_K; b++)
        for (int j = 0; j < SP_QK_K; j++) *y++ = src[b].d * (float)src[b].qs[j];
}

/* ---- generic rows ---------------------------------------------------------------------- */
static int check_row(sp_dtype dt, size_t n, sp_err *err) {
    if (!sp_dtype_is_quant(dt)) return sp_err_set(err, "%s is not a quantized type", sp_dtype_name(dt));
    if (n % sp_dtype_block_elems(dt))
        return sp_err_set(err, "%s row of %zu elements: must be a multiple of the %zu-element block", sp_dtype_name(dt),
                          n, sp_dtype_block_elems(dt));
    return 0;
}

int sp_quantize_row(void *dst, const float *x, sp_dtype dt, size_t n, sp_err *err) {
    if (check_row(dt, n, err)) return -1;
    switch (dt) {
    case SP_DT_Q8_0: sp_quantize_row_q8_0(dst, x, n); break;
    case SP_DT_Q4_0: sp_quantize_row_q4_0(dst, x, n); break;
    case SP_DT_Q5_0: sp_quantize_row_q5_0(dst, x, n); break;
    case SP_DT_Q4_K: sp_quantize_row_q4_K(dst, x, n); break;
    case SP_DT_Q6_K: sp_quantize_row_q6_K(dst, x, n); break;
    case SP_DT_Q5_K: sp_quantize_row_q5_K(dst, x, n); break;
    case SP_DT_Q3_K: sp_quantize_row_q3_K(dst, x, n); break;
    case SP_DT_Q2_K: sp_quantize_row_q2_K(dst, x, n); break;
    case SP_DT_Q5_1: sp_quantize_row_q5_1(dst, x, n); break;
    case SP_DT_IQ4_NL: sp_quantize_row_iq4_nl(dst, x, n); break;
    case SP_DT_IQ4_XS: sp_quantize_row_iq4_xs(dst, x, n); break;
    case SP_DT_Q4_1: sp_quantize_row_q4_1(dst, x, n); break;
    case SP_DT_QA8: sp_quantize_row_qa8(dst, x, n); break;
    default: sp_quantize_row_q8_K(dst, x, n); break;
    }
    return 0;
}

int sp_dequantize_row(float *y, const void *src, sp_dtype dt, size_t n, sp_err *err) {
    if (check_row(dt, n, err)) return -1;
    switch (dt) {
    case SP_DT_Q8_0: sp_dequantize_row_q8_0(y, src, n); break;
    case SP_DT_Q4_0: sp_dequantize_row_q4_0(y, src, n); break;
    case SP_DT_Q5_0: sp_dequantize_row_q5_0(y, src, n); break;
    case SP_DT_Q4_K: sp_dequantize_row_q4_K(y, src, n); break;
    case SP_DT_Q6_K: sp_dequantize_row_q6_K(y, src, n); break;
    case SP_DT_Q5_K: sp_dequantize_row_q5_K(y, src, n); break;
    case SP_DT_Q3_K: sp_dequantize_row_q3_K(y, src, n); break;
    case SP_DT_Q2_K: sp_dequantize_row_q2_K(y, src, n); break;
    case SP_DT_Q5_1: sp_dequantize_row_q5_1(y, src, n); break;
    case SP_DT_IQ4_NL: sp_dequantize_row_iq4_nl(y, src, n); break;
    case SP_DT_IQ4_XS: sp_dequantize_row_iq4_xs(y, src, n); break;
    case SP_DT_Q4_1: sp_dequantize_row_q4_1(y, src, n); break;
    case SP_DT_QA8: sp_dequantize_row_qa8(y, src, n); break;
    default: sp_dequantize_row_q8_K(y, src, n); break;
    }
    return 0;
}

int sp_row_to_f32(float *y, const void *src, sp_dtype dt, size_t n, sp_err *err) {
    if (dt == SP_DT_F32 || dt == SP_DT_F16 || dt == SP_DT_BF16 || dt == SP_DT_F64) {
        sp_to_f32(y, src, dt, n);
        return 0;
    }
    return sp_dequantize_row(y, src, dt, n, err);
}

int sp_mat_check(const sp_mat *W, const char *what, sp_err *err) {
    if (W->n < 0 || W->k <= 0 || (W->n > 0 && !W->data))
        return sp_err_set(err, "%s: empty or negative weight shape [%d, %d]", what, W->n, W->k);
    if (W->dt == SP_DT_F32 || W->dt == SP_DT_BF16 || W->dt == SP_DT_F16) return 0;
    if (!sp_dtype_is_quant(W->dt) || W->dt == SP_DT_Q8_K)
        return sp_err_set(err, "%s: weight type %s is not supported by matmul (expected F32, BF16, F16, Q8_0, Q4_0, "
                          "Q5_0, Q5_1, Q4_1, QA8, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or IQ4_XS)", what, sp_dtype_name(W->dt));
    size_t be = sp_dtype_block_elems(W->dt);
    if ((size_t)W->k % be)
        return sp_err_set(err, "%s: %s rows of %d elements; must be a multiple of the %zu-element block", what,
                          sp_dtype_name(W->dt), W->k, be);
    if (W->k > SP_QUANT_MAX_K)
        return sp_err_set(err, "%s: %s rows of %d elements; quantized matmul takes at most %d", what,
                          sp_dtype_name(W->dt), W->k, SP_QUANT_MAX_K);
    return 0;
}

double sp_dot_quant_ref(const void *w_row, sp_dtype dt, const float *x, int K) {
    float w[SP_QK_K];
    size_t be = sp_dtype_block_elems(dt), bb = sp_dtype_block_bytes(dt);
    SP_ASSERT(sp_dtype_is_quant(dt) && K % (int)be == 0);
    double s = 0;
    for (int k0 = 0; k0 < K; k0 += (int)be) {
        sp_dequantize_row(w, (const char *)w_row + (size_t)k0 / be * bb, dt, be, NULL);
        for (size_t l = 0; l < be; l++) s += (double)x[k0 + l] * w[l];
    }
    return s;
}
