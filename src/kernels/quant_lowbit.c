/* quant_lowbit.c — row quantizers and dequantizers of Q5_K, Q3_K, Q2_K, Q5_1, IQ4_NL and
 * IQ4_XS (layouts in quant.h, docs/QUANT.md "Q5_K, Q3_K, Q2_K, Q5_1, IQ4_NL, IQ4_XS").
 *
 * The quantizers reproduce what llama-quantize writes without an importance matrix (for the
 * K-quants and Q5_1 llama.cpp's quantize_row_*_ref; for IQ4_NL and IQ4_XS its quantize_iq4_nl /
 * quantize_iq4_xs, which try 15 scales around the first guess) step for step: the same float
 * operations in the same order, none fused, so the bytes match. The dequantizers follow
 * llama.cpp's definitions operation for operation. Not here: the dot-product kernels. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels_internal.h"
#include "quant.h"
#include "quant_internal.h"

/* below this a group's largest magnitude counts as zero */
#define GROUP_MAX_EPS 1e-15f

const int8_t sp_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
static int nearest(float f) { return sp_quant_round_even(f); }

/* float → uint8_t as an x86-64 compiler converts it (through int32: NaN and out-of-range values
 * give 0x80000000, whose low byte is 0), defined for every input */
static uint8_t to_u8(float v) {
    if (!(v > -2147483648.0f && v < 2147483648.0f)) return 0;
    return (uint8_t)(int32_t)v;
}

/* ---- Q5_1 ------------------------------------------------------------------------------ */
void sp_quantize_row_q5_1(sp_block_q5_1 *dst, const float *x, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, x += 32) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        float d = (max - min) / 31;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = sp_f32_to_f16(d);
        dst[b].m = sp_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            uint8_t q0 = to_u8((x[j] - min) * id + 0.5f), q1 = to_u8((x[j + 16] - min) * id + 0.5f);
            dst[b].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)((q0 & 16) >> 4) << j | (uint32_t)((q1 & 16) >> 4) << (j + 16);
        }
        for (int i = 0; i < 4; i++) dst[b].qh[i] = (uint8_t)(qh >> 8 * i);
    }
}

void sp_dequantize_row_q5_1(float *y, const sp_block_q5_1 *src, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, y += 32) {
        float d = sp_f16_to_f32(src[b].d), m = sp_f16_to_f32(src[b].m);
        uint32_t qh = src[b].qh[0] | (uint32_t)src[b].qh[1] << 8 | (uint32_t)src[b].qh[2] << 16 |
                      (uint32_t)src[b].qh[3] << 24;
        for (int j = 0; j < 16; j++) {
            int q0 = (src[b].qs[j] & 15) | (int)(qh >> j & 1) << 4, q1 = (src[b].qs[j] >> 4) | (int)(qh >> (j + 16) & 1) << 4;
            y[j] = (float)q0 * d + m;
            y[j + 16] = (float)q1 * d + m;
        }
    }
}

/* ---- Q5_K ------------------------------------------------------------------------------ */
/* the 8 sub-block scales and mins, quantized to 6 bits against the largest of each and packed
 * as Q4_K packs them (the same 12 bytes; shared by Q4_K's layout) */
static void pack_scales_mins(uint8_t *out, const float *scales, const float *mins, float max_scale, float max_min) {
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(out, 0, SP_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        /* llama.cpp stores nearest_int into a uint8_t before clamping to 63 */
        int ls = (uint8_t)nearest(inv_scale * scales[j]), lm = (uint8_t)nearest(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            out[j] = (uint8_t)ls;
            out[j + 4] = (uint8_t)lm;
        } else {
            out[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
            out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
}

void sp_quantize_row_q5_K(sp_block_q5_K *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    uint8_t L[SP_QK_K];
    float w[32], mins[8], scales[8];
    for (size_t b = 0; b < n / SP_QK_K; b++, x += SP_QK_K) {
        sp_block_q5_K *y = &dst[b];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = sp_quant_fit_scale_min(x + 32 * j, w, 32, 31, -0.5f, 15, 0, L + 32 * j, &mins[j]);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        pack_scales_mins(y->scales, scales, mins, max_scale, max_min);
        y->d = sp_f32_to_f16(max_scale / 63.0f);
        y->dmin = sp_f32_to_f16(max_min / 63.0f);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            sp_q4_K_scale_min(j, y->scales, &sc, &m);
            float d = sp_f16_to_f32(y->d) * (float)sc;
            if (d == 0.0f) continue;
            float dm = sp_f16_to_f32(y->dmin) * (float)m;
            for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(nearest((x[32 * j + l] + dm) / d), 0, 31);
        }
        memset(y->qh, 0, sizeof y->qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                y->qh[l] |= (uint8_t)((l1 >> 4) << (2 * c) | (l2 >> 4) << (2 * c + 1));
                y->qs[32 * c + l] = (uint8_t)((l1 & 15) | (l2 & 15) << 4);
            }
    }
}

void sp_dequantize_row_q5_K(float *y, const sp_block_q5_K *src, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    for (size_t b = 0; b < n / SP_QK_K; b++) {
        float d = sp_f16_to_f32(src[b].d), dmin = sp_f16_to_f32(src[b].dmin);
        const uint8_t *q = src[b].qs, *qh = src[b].qh;
        for (int c = 0; c < 4; c++, q += 32) {
            int sc, m;
            sp_q4_K_scale_min(2 * c, src[b].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            sp_q4_K_scale_min(2 * c + 1, src[b].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] & 15) + (qh[l] >> (2 * c) & 1) * 16) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((q[l] >> 4) + (qh[l] >> (2 * c + 1) & 1) * 16) - m2;
        }
    }
}

/* ---- Q3_K ------------------------------------------------------------------------------ */
/* Fit x[0..16) ≈ scale · L with L in -4..3 (stored + 4): the largest-magnitude element maps to
 * -4, then up to 5 passes move single values to their best level while that raises the
 * x²-weighted fit (llama.cpp's make_q3_quants with its RMSE search). */
static float fit_q3(const float *x, int8_t *L) {
    enum { NS = 16, NMAX = 4 };
    float max = 0, amax = 0;
    for (int i = 0; i < NS; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, NS);
        return 0.0f;
    }
    float iscale = -NMAX / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < NS; i++) {
        int l = clampi(nearest(iscale * x[i]), -NMAX, NMAX - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < NS; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            int nl = clampi(nearest(x[i] * sl2 / slx), -NMAX, NMAX - 1);
            if (nl == L[i]) continue;
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl, sumlx = slx, suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < NS; i++) L[i] = (int8_t)(L[i] + NMAX);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void sp_q3_K_scales(const uint8_t *p, int8_t sc[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? p[j] & 15 : p[j - 8] >> 4, hi = p[8 + j % 4] >> (2 * (j / 4)) & 3;
        sc[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

void sp_quantize_row_q3_K(sp_block_q3_K *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    int8_t L[SP_QK_K], sc[16];
    float scales[16];
    for (size_t b = 0; b < n / SP_QK_K; b++, x += SP_QK_K) {
        sp_block_q3_K *y = &dst[b];
        float max_scale = 0, amax = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_q3(x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > amax) amax = fabsf(scales[g]), max_scale = scales[g];
        }
        memset(y->scales, 0, sizeof y->scales);
        if (max_scale != 0.0f) {
            float iscale = -32.0f / max_scale;
            for (int g = 0; g < 16; g++) {
                /* llama.cpp keeps nearest_int in an int8_t before clamping */
                int l = clampi((int8_t)nearest(iscale * scales[g]), -32, 31) + 32;
                if (g < 8) y->scales[g] = (uint8_t)(l & 15);
                else y->scales[g - 8] |= (uint8_t)((l & 15) << 4);
                y->scales[g % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (g / 4)));
            }
            y->d = sp_f32_to_f16(1 / iscale);
        } else {
            y->d = sp_f32_to_f16(0.0f);
        }
        sp_q3_K_scales(y->scales, sc);
        for (int g = 0; g < 16; g++) {
            float d = sp_f16_to_f32(y->d) * (float)sc[g];
            if (d == 0.0f) continue;
            for (int i = 0; i < 16; i++) L[16 * g + i] = (int8_t)(clampi(nearest(x[16 * g + i] / d), -4, 3) + 4);
        }
        /* the third bit of value e goes to bit e / 32 of hmask[e % 32]; 2 bits to qs as Q2_K */
        memset(y->hmask, 0, sizeof y->hmask);
        for (int e = 0; e < SP_QK_K; e++)
            if (L[e] > 3) {
                y->hmask[e % 32] |= (uint8_t)(1 << (e / 32));
                L[e] = (int8_t)(L[e] - 4);
            }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *Lh = L + 128 * h;
                y->qs[32 * h + l] = (uint8_t)(Lh[l] | Lh[l + 32] << 2 | Lh[l + 64] << 4 | Lh[l + 96] << 6);
            }
    }
}

void sp_dequantize_row_q3_K(float *y, const sp_block_q3_K *src, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    int8_t sc[16];
    for (size_t b = 0; b < n / SP_QK_K; b++) {
        float d = sp_f16_to_f32(src[b].d);
        sp_q3_K_scales(src[b].scales, sc);
        for (int e = 0; e < SP_QK_K; e++) {
            int h = e / 128, j = e % 128 / 32, l = e % 32;
            int q = (src[b].qs[32 * h + l] >> (2 * j) & 3) - (src[b].hmask[l] >> (e / 32) & 1 ? 0 : 4);
            float dl = d * (float)sc[e / 16];
            *y++ = dl * (float)q;
        }
    }
}

/* ---- Q2_K ------------------------------------------------------------------------------ */
void sp_quantize_row_q2_K(sp_block_q2_K *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    uint8_t L[SP_QK_K];
    float w[16], mins[16], scales[16];
    const float q4scale = 15.0f;
    for (size_t b = 0; b < n / SP_QK_K; b++, x += SP_QK_K) {
        sp_block_q2_K *y = &dst[b];
        float max_scale = 0, max_min = 0;
        for (int g = 0; g < 16; g++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * g + l]);
            scales[g] = sp_quant_fit_scale_min(x + 16 * g, w, 16, 3, -0.5f, 15, 1, L + 16 * g, &mins[g]);
            if (scales[g] > max_scale) max_scale = scales[g];
            if (mins[g] > max_min) max_min = mins[g];
        }
        memset(y->scales, 0, sizeof y->scales);
        y->d = sp_f32_to_f16(0.0f);
        y->dmin = sp_f32_to_f16(0.0f);
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int g = 0; g < 16; g++) y->scales[g] = (uint8_t)nearest(iscale * scales[g]);
            y->d = sp_f32_to_f16(max_scale / q4scale);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int g = 0; g < 16; g++) y->scales[g] |= (uint8_t)(nearest(iscale * mins[g]) << 4);
            y->dmin = sp_f32_to_f16(max_min / q4scale);
        }
        for (int g = 0; g < 16; g++) {
            float d = sp_f16_to_f32(y->d) * (float)(y->scales[g] & 15);
            if (d == 0.0f) continue;
            float dm = sp_f16_to_f32(y->dmin) * (float)(y->scales[g] >> 4);
            for (int i = 0; i < 16; i++) L[16 * g + i] = (uint8_t)clampi(nearest((x[16 * g + i] + dm) / d), 0, 3);
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *Lh = L + 128 * h;
                y->qs[32 * h + l] = (uint8_t)(Lh[l] | Lh[l + 32] << 2 | Lh[l + 64] << 4 | Lh[l + 96] << 6);
            }
    }
}

void sp_dequantize_row_q2_K(float *y, const sp_block_q2_K *src, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    for (size_t b = 0; b < n / SP_QK_K; b++) {
        float d = sp_f16_to_f32(src[b].d), dmin = sp_f16_to_f32(src[b].dmin);
        for (int e = 0; e < SP_QK_K; e++) {
            int h = e / 128, j = e % 128 / 32, l = e % 32, sc = src[b].scales[e / 16];
            float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
            *y++ = dl * (float)(src[b].qs[32 * h + l] >> (2 * j) & 3) - ml;
        }
    }
}

/* ---- IQ4_NL and IQ4_XS ----------------------------------------------------------------- */
/* index of the table value nearest v (ties to the upper one; NaN gives 15), by bisection */
static int iq4_index(float v) {
    const int8_t *t = sp_kvalues_iq4nl;
    if (v <= t[0]) return 0;
    if (v >= t[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < t[mid]) hi = mid;
        else lo = mid;
    }
    return v - t[hi - 1] < t[hi] - v ? hi - 1 : hi;
}

/* The scale of a block of 32 against the table by x²-weighted least squares: first with the
 * largest-magnitude element on the table's end, then 15 trial inverse scales around it, keeping
 * the best fit (llama.cpp's quantize_row_iq4_nl_impl with 7 tries each way). 0 for a zero block. */
static float fit_iq4(const float *x) {
    const int8_t *t = sp_kvalues_iq4nl;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (amax < GROUP_MAX_EPS) return 0.0f;
    float d = -max / t[0], id = 1 / d, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        float q = t[iq4_index(id * x[j])], w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        id = (itry + t[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = t[iq4_index(id * x[j])], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* the 32 indices of x against inverse scale id, packed as an IQ4_NL block's nibbles */
static void pack_iq4(uint8_t *qs, const float *x, float id) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(iq4_index(id * x[j]) | iq4_index(id * x[j + 16]) << 4);
}

void sp_quantize_row_iq4_nl(sp_block_iq4_nl *dst, const float *x, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, x += 32) {
        float d = fit_iq4(x);
        dst[b].d = sp_f32_to_f16(d);
        pack_iq4(dst[b].qs, x, d != 0.0f ? 1 / d : 0.0f);
    }
}

void sp_quantize_row_iq4_xs(sp_block_iq4_xs *dst, const float *x, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    float scales[8];
    for (size_t b = 0; b < n / SP_QK_K; b++, x += SP_QK_K) {
        sp_block_iq4_xs *y = &dst[b];
        float max_scale = 0, amax_scale = 0;
        for (int j = 0; j < 8; j++) {
            scales[j] = fit_iq4(x + 32 * j);
            if (fabsf(scales[j]) > amax_scale) amax_scale = fabsf(scales[j]), max_scale = scales[j];
        }
        /* the sub-block scales as 6-bit multiples of d = −max / 32; values against the rounded one */
        float d = -max_scale / 32, id = d != 0.0f ? 1 / d : 0.0f;
        y->d = sp_f32_to_f16(d);
        y->scales_h = 0;
        memset(y->scales_l, 0, sizeof y->scales_l);
        for (int j = 0; j < 8; j++) {
            int l = clampi(nearest(id * scales[j]), -32, 31);
            float dl = d * (float)l;
            pack_iq4(y->qs + 16 * j, x + 32 * j, dl != 0.0f ? 1 / dl : 0.0f);
            l += 32;
            y->scales_l[j / 2] |= (uint8_t)((l & 15) << (4 * (j % 2)));
            y->scales_h |= (uint16_t)((l >> 4) << (2 * j));
        }
    }
}

void sp_dequantize_row_iq4_nl(float *y, const sp_block_iq4_nl *src, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, y += 32) {
        float d = sp_f16_to_f32(src[b].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)sp_kvalues_iq4nl[src[b].qs[j] & 15];
            y[j + 16] = d * (float)sp_kvalues_iq4nl[src[b].qs[j] >> 4];
        }
    }
}

void sp_dequantize_row_iq4_xs(float *y, const sp_block_iq4_xs *src, size_t n) {
    SP_ASSERT(n % SP_QK_K == 0);
    for (size_t b = 0; b < n / SP_QK_K; b++) {
        float d = sp_f16_to_f32(src[b].d);
        for (int j = 0; j < 8; j++, y += 32) {
            int ls = (src[b].scales_l[j / 2] >> (4 * (j % 2)) & 15) | (src[b].scales_h >> (2 * j) & 3) << 4;
            float dl = d * (float)(ls - 32);
            const uint8_t *qs = src[b].qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                y[l] = dl * (float)sp_kvalues_iq4nl[qs[l] & 15];
                y[l + 16] = dl * (float)sp_kvalues_iq4nl[qs[l] >> 4];
            }
        }
    }
}
