/* quant_neon.c — the quantized row kernels for aarch64 NEON with the dot-product extension
 * (sdot: four int8 products summed into each int32 lane), in the canonical order of
 * quant_internal.h. Entered only when sp_cpu_level() is SP_CPU_NEON and the processor has
 * dotprod (a core without it takes the scalar kernels).
 *
 * 32-blocks: a block is two 16-byte registers; sdot gives int32 lanes 0..3 and 4..7 of the
 * canonical layout directly, and the 16 float accumulator lanes live in four registers
 * (lanes 0..7 for even blocks, 8..15 for odd). K-quants: per 16 or 32 values an sdot, scaled
 * by the sub-block scale in int32 (exact), one horizontal sum per super-block. Up to 4 tokens
 * share each unpacked weight block. */
#include <arm_neon.h>
#include <string.h>

#include "quant_internal.h"

#define TBMAX 4

static inline float rd_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* the canonical 16 → 1 tree over lanes a[0] = 0..3, a[1] = 4..7, a[2] = 8..11, a[3] = 12..15 */
static inline float hsum16_neon(const float32x4_t *a) {
    float32x4_t r8lo = vaddq_f32(a[0], a[2]), r8hi = vaddq_f32(a[1], a[3]);
    float32x4_t r4 = vaddq_f32(r8lo, r8hi);
    float32x2_t r2 = vadd_f32(vget_low_f32(r4), vget_high_f32(r4));
    return vget_lane_f32(r2, 0) + vget_lane_f32(r2, 1);
}

/* ---- Q8_0 / Q4_0 ------------------------------------------------------------------------ */
/* block b into accumulator pair 2H, 2H + 1 (compile-time: b mod 2) */
static inline __attribute__((always_inline)) void rows32_block(float32x4_t acc[][4], const uint8_t *w,
                                                               const qx_row *xr, int TB, int b, const int H,
                                                               const int Q4) {
    const uint8_t *blk = w + (size_t)b * (Q4 ? 18 : 34);
    int8x16_t v0, v1;
    if (Q4) {
        uint8x16_t q = vld1q_u8(blk + 2);
        v0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        v1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    } else {
        v0 = vld1q_s8((const int8_t *)(blk + 2));
        v1 = vld1q_s8((const int8_t *)(blk + 18));
    }
    float wd = rd_f16(blk);
    for (int i = 0; i < TB; i++) {
        const int8_t *xq = xr[i].q + 32 * b;
        int32x4_t p0 = vdotq_s32(vdupq_n_s32(0), v0, vld1q_s8(xq));
        int32x4_t p1 = vdotq_s32(vdupq_n_s32(0), v1, vld1q_s8(xq + 16));
        float32x4_t s = vdupq_n_f32(wd * xr[i].d[b]);
        acc[i][2 * H] = vfmaq_f32(acc[i][2 * H], vcvtq_f32_s32(p0), s);
        acc[i][2 * H + 1] = vfmaq_f32(acc[i][2 * H + 1], vcvtq_f32_s32(p1), s);
    }
}

static void rows32(const qmm_ctx *c, int t0, int TB, int n, const int Q4) {
    const int nb = c->K / 32;
    const uint8_t *w = c->W + (size_t)n * c->wrow;
    qx_row xr[TBMAX];
    float32x4_t acc[TBMAX][4];
    for (int i = 0; i < TB; i++) {
        xr[i] = qx_at(c, t0 + i);
        for (int l = 0; l < 4; l++) acc[i][l] = vdupq_n_f32(0.0f);
    }
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        rows32_block(acc, w, xr, TB, b, 0, Q4);
        rows32_block(acc, w, xr, TB, b + 1, 1, Q4);
    }
    if (b < nb) rows32_block(acc, w, xr, TB, b, 0, Q4);
    for (int i = 0; i < TB; i++) c->Y[(size_t)(t0 + i) * c->N + n] = hsum16_neon(acc[i]);
}

/* ---- Q4_K ----------------------------------------------------------------------------------- */
static void rows_q4_K(const qmm_ctx *c, int t0, int TB, int n) {
    const uint8_t *w = c->W + (size_t)n * c->wrow;
    qx_row xr[TBMAX];
    float acc[TBMAX] = {0};
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    for (int b = 0; b < c->K / SP_QK_K; b++) {
        const uint8_t *blk = w + (size_t)b * 144;
        int sc[8], m[8];
        for (int j = 0; j < 8; j++) sp_q4_K_scale_min(j, blk + 4, &sc[j], &m[j]);
        int32x4_t s[TBMAX];
        for (int i = 0; i < TB; i++) s[i] = vdupq_n_s32(0);
        for (int q = 0; q < 4; q++) {
            uint8x16_t r0 = vld1q_u8(blk + 16 + 32 * q), r1 = vld1q_u8(blk + 32 + 32 * q);
            int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(r0, vdupq_n_u8(0x0F)));
            int8x16_t lo1 = vreinterpretq_s8_u8(vandq_u8(r1, vdupq_n_u8(0x0F)));
            int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(r0, 4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(r1, 4));
            for (int i = 0; i < TB; i++) {
                const int8_t *xq = xr[i].q + SP_QK_K * b + 64 * q;
                int32x4_t a = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo0, vld1q_s8(xq)), lo1, vld1q_s8(xq + 16));
                int32x4_t e = vdotq_s32(vdotq_s32(vdupq_n_s32(0), hi0, vld1q_s8(xq + 32)), hi1, vld1q_s8(xq + 48));
                s[i] = vmlaq_n_s32(vmlaq_n_s32(s[i], a, sc[2 * q]), e, sc[2 * q + 1]);
            }
        }
        float d = rd_f16(blk), dmin = rd_f16(blk + 2);
        for (int i = 0; i < TB; i++) {
            const int16_t *bs = xr[i].bsums + 16 * b;
            int imin = 0;
            for (int j = 0; j < 8; j++) imin += m[j] * (bs[2 * j] + bs[2 * j + 1]);
            float xd = xr[i].d[b];
            acc[i] = fmaf(d * xd, (float)vaddvq_s32(s[i]), acc[i]);
            acc[i] = fmaf(-(dmin * xd), (float)imin, acc[i]);
        }
    }
    for (int i = 0; i < TB; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
}

/* ---- Q6_K ----------------------------------------------------------------------------------- */
static void rows_q6_K(const qmm_ctx *c, int t0, int TB, int n) {
    const uint8_t *w = c->W + (size_t)n * c->wrow;
    qx_row xr[TBMAX];
    float acc[TBMAX] = {0};
    for (int i = 0; i < TB; i++) xr[i] = qx_at(c, t0 + i);
    const uint8x16_t lo4 = vdupq_n_u8(0x0F), hi2 = vdupq_n_u8(0x30);
    for (int b = 0; b < c->K / SP_QK_K; b++) {
        const uint8_t *blk = w + (size_t)b * 210;
        const int8_t *sc = (const int8_t *)(blk + 192);
        int32x4_t s[TBMAX];
        for (int i = 0; i < TB; i++) s[i] = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++)
            for (int half = 0; half < 2; half++) {
                /* values 128h + 32k + 16·half + (0..15), k = 0..3; group 8h + 2k + half */
                const uint8_t *ql = blk + 64 * h + 16 * half, *qh = blk + 128 + 32 * h + 16 * half;
                uint8x16_t L0 = vld1q_u8(ql), L1 = vld1q_u8(ql + 32), H = vld1q_u8(qh);
                int8x16_t u[4] = {
                    vreinterpretq_s8_u8(vorrq_u8(vandq_u8(L0, lo4), vandq_u8(vshlq_n_u8(H, 4), hi2))),
                    vreinterpretq_s8_u8(vorrq_u8(vandq_u8(L1, lo4), vandq_u8(vshlq_n_u8(H, 2), hi2))),
                    vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(L0, 4), vandq_u8(H, hi2))),
                    vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(L1, 4), vandq_u8(vshrq_n_u8(H, 2), hi2)))};
                for (int k = 0; k < 4; k++) {
                    int g = 8 * h + 2 * k + half;
                    for (int i = 0; i < TB; i++) {
                        const int8_t *xq = xr[i].q + SP_QK_K * b + 128 * h + 32 * k + 16 * half;
                        s[i] = vmlaq_n_s32(s[i], vdotq_s32(vdupq_n_s32(0), u[k], vld1q_s8(xq)), sc[g]);
                    }
                }
            }
        float d = rd_f16(blk + 208);
        for (int i = 0; i < TB; i++) {
            const int16_t *bs = xr[i].bsums + 16 * b;
            int bias = 0;
            for (int g = 0; g < 16; g++) bias += sc[g] * bs[g];
            acc[i] = fmaf(d * xr[i].d[b], (float)(vaddvq_s32(s[i]) - 32 * bias), acc[i]);
        }
    }
    for (int i = 0; i < TB; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
}

void qmm_rows_neon(const qmm_ctx *c, int n0, int n1) {
    /* rows in groups of 4 so each group's weights are still in cache for the next tokens */
    for (int g = n0; g < n1; g += 4) {
        int ge = g + 4 < n1 ? g + 4 : n1;
        for (int t = 0; t < c->T; t += TBMAX) {
            int tb = c->T - t < TBMAX ? c->T - t : TBMAX;
            for (int n = g; n < ge; n++) {
                switch (c->dt) {
                case SP_DT_Q8_0: rows32(c, t, tb, n, 0); break;
                case SP_DT_Q4_0: rows32(c, t, tb, n, 1); break;
                case SP_DT_Q4_K: rows_q4_K(c, t, tb, n); break;
                default: rows_q6_K(c, t, tb, n); break;
                }
            }
        }
    }
}
