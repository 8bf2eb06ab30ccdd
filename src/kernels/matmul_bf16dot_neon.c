/* matmul_bf16dot_neon.c — the bf16-dot numerics (kernels_internal.h) emulated with NEON FMAs
 * (BFDOT is not used: its rounding is not the order's). The 16 lane accumulators are four q
 * registers; register q holds lanes 4q..4q+3, i.e. elements 32c + 8q .. 8q+7 of chunk c.
 * Activations are rounded to bf16 in integer arithmetic and split into even and odd elements
 * (uzp1 / uzp2); a bf16 weight pair widens with one shift (even) and one mask (odd). Each
 * product is one fma, then the flush of a subnormal result; acc starts at +0 and is flushed
 * after every step, so the order's DAZ of the accumulator is omitted. The last, partial chunk
 * is copied into a zero-padded buffer. Tiles: 1 × 4 for T = 1, 2 × 2 else. */
#include <arm_neon.h>

#include "kernels_internal.h"

/* subnormal lanes become zeros of their sign (|v| < 2^-126; NaN compares false) */
static SP_ALWAYS_INLINE float32x4_t bd_ftz(float32x4_t v) {
    uint32x4_t tiny = vcaltq_f32(v, vdupq_n_f32(0x1p-126f));
    uint32x4_t u = vreinterpretq_u32_f32(v);
    return vreinterpretq_f32_u32(vbslq_u32(tiny, vandq_u32(u, vdupq_n_u32(0x80000000u)), u));
}

/* sp_bf16dot_round on 4 lanes */
static SP_ALWAYS_INLINE float32x4_t bd_round(float32x4_t v) {
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t r = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1))));
    uint32x4_t nan = vmvnq_u32(vceqq_f32(v, v));
    uint32x4_t den = vceqq_u32(vandq_u32(u, vdupq_n_u32(0x7f800000u)), vdupq_n_u32(0));
    r = vbslq_u32(nan, vorrq_u32(u, vdupq_n_u32(0x00400000u)), r);
    r = vbslq_u32(den, vandq_u32(u, vdupq_n_u32(0x80000000u)), r);
    return vreinterpretq_f32_u32(vandq_u32(r, vdupq_n_u32(0xffff0000u)));
}

/* One TB × NB tile over the full K. */
static SP_ALWAYS_INLINE void bd_tile(const sp_mm_ctx *c, int t0, int n0, const int TB, const int NB) {
    const int K = c->K;
    float32x4_t acc[2][4][4];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++)
            for (int q = 0; q < 4; q++) acc[i][j][q] = vdupq_n_f32(0.0f);
    float xpad[2][32];
    uint16_t wpad[4][32];
    for (int k = 0; k < K; k += 32) {
        const float *xs[2];
        const uint16_t *ws[4];
        for (int i = 0; i < TB; i++) xs[i] = c->X + (size_t)(t0 + i) * K + k;
        for (int j = 0; j < NB; j++) ws[j] = (const uint16_t *)c->W + (size_t)(n0 + j) * K + k;
        if (K - k < 32) { /* the padded chunk */
            int rem = K - k;
            for (int i = 0; i < TB; i++) {
                memset(xpad[i], 0, sizeof xpad[i]);
                memcpy(xpad[i], xs[i], (size_t)rem * sizeof(float));
                xs[i] = xpad[i];
            }
            for (int j = 0; j < NB; j++) {
                memset(wpad[j], 0, sizeof wpad[j]);
                memcpy(wpad[j], ws[j], (size_t)rem * sizeof(uint16_t));
                ws[j] = wpad[j];
            }
        }
        float32x4_t xe[2][4], xo[2][4];
        for (int i = 0; i < TB; i++)
            for (int q = 0; q < 4; q++) {
                float32x4_t a = bd_round(vld1q_f32(xs[i] + 8 * q)), b = bd_round(vld1q_f32(xs[i] + 8 * q + 4));
                xe[i][q] = vuzp1q_f32(a, b);
                xo[i][q] = vuzp2q_f32(a, b);
            }
        for (int j = 0; j < NB; j++)
            for (int q = 0; q < 4; q++) {
                uint32x4_t v = vreinterpretq_u32_u16(vld1q_u16(ws[j] + 8 * q));
                float32x4_t we = bd_ftz(vreinterpretq_f32_u32(vshlq_n_u32(v, 16)));
                float32x4_t wo = bd_ftz(vreinterpretq_f32_u32(vandq_u32(v, vdupq_n_u32(0xffff0000u))));
                for (int i = 0; i < TB; i++) {
                    acc[i][j][q] = bd_ftz(vfmaq_f32(acc[i][j][q], xo[i][q], wo));
                    acc[i][j][q] = bd_ftz(vfmaq_f32(acc[i][j][q], xe[i][q], we));
                }
            }
    }
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) {
            float a[16];
            for (int q = 0; q < 4; q++) vst1q_f32(a + 4 * q, acc[i][j][q]);
            c->Y[(size_t)(t0 + i) * c->N + n0 + j] = sp_hsum16(a);
        }
}

void sp_mm_bf16dot_rows_neon(const sp_mm_ctx *c, int n0, int n1) {
    const int T = c->T, NB = T == 1 ? 4 : 2;
    for (int n = n0; n < n1;) {
        int nb = n1 - n >= NB ? NB : 1;
        for (int t = 0; t < T;) {
            int tb = T - t >= 2 ? 2 : 1;
            switch (nb * 10 + tb) {
            case 41: bd_tile(c, t, n, 1, 4); break;
            case 22: bd_tile(c, t, n, 2, 2); break;
            case 21: bd_tile(c, t, n, 1, 2); break;
            case 12: bd_tile(c, t, n, 2, 1); break;
            default: bd_tile(c, t, n, 1, 1); break;
            }
            t += tb;
        }
        n += nb;
    }
}
