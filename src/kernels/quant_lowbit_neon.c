/* quant_lowbit_neon.c — the row kernels of Q5_K, Q3_K, Q2_K, IQ4_XS (against Q8_K activation
 * rows) and Q5_1, IQ4_NL (against Q8_0 blocks) for aarch64 NEON with the dot-product extension.
 * Entered only when sp_cpu_level() is SP_CPU_NEON and the processor has dotprod.
 *
 * Each weight block is unpacked once into its signed 8-bit values in element order (the
 * unpacking of the scalar kernels, quant_matmul.c), then every group of 16 is one sdot against
 * up to 4 tokens' activations, summed across lanes and scaled in int32. Integer sums are
 * exact, so the block's integer results equal the scalar kernels', and the float steps after
 * them are the canonical ones of quant_internal.h: the same bits on every tier. */
#include <arm_neon.h>
#include <string.h>

#include "quant_internal.h"

#define LB_TB 4

static inline float rd_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return sp_f16_to_f32(h);
}

/* Σ v[e] · x[e] over 16 values */
static inline int dot16(const int8_t *v, const int8_t *x) {
    return vaddvq_s32(vdotq_s32(vdupq_n_s32(0), vld1q_s8(v), vld1q_s8(x)));
}

/* a super-block's 256 values and 16 group scales (groups of 32 repeat their scale) */
static void unpack_k(const uint8_t *w, sp_dtype dt, int8_t *v, int *sc) {
    if (dt == SP_DT_Q5_K) {
        const uint8_t *qh = w + 16, *qs = w + 48;
        for (int e = 0; e < 256; e++) {
            int j = e / 32, l = e % 32, q = qs[32 * (j / 2) + l];
            v[e] = (int8_t)((j & 1 ? q >> 4 : q & 15) | (qh[l] >> j & 1) << 4);
        }
        for (int j = 0; j < 8; j++) {
            int s, m;
            sp_q4_K_scale_min(j, w + 4, &s, &m);
            sc[2 * j] = sc[2 * j + 1] = s;
        }
    } else if (dt == SP_DT_Q3_K || dt == SP_DT_Q2_K) {
        const uint8_t *qs = dt == SP_DT_Q3_K ? w + 32 : w + 16;
        for (int e = 0; e < 256; e++) {
            int u = qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32)) & 3;
            if (dt == SP_DT_Q3_K) u |= (w[e % 32] >> (e / 32) & 1) << 2;
            v[e] = (int8_t)u;
        }
        if (dt == SP_DT_Q3_K) {
            int8_t s3[16];
            sp_q3_K_scales(w + 96, s3);
            for (int g = 0; g < 16; g++) sc[g] = s3[g];
        } else {
            for (int g = 0; g < 16; g++) sc[g] = w[g] & 15;
        }
    } else { /* IQ4_XS */
        unsigned sh = w[2] | (unsigned)w[3] << 8;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = w + 8 + 16 * j;
            for (int l = 0; l < 16; l++) {
                v[32 * j + l] = sp_kvalues_iq4nl[q[l] & 15];
                v[32 * j + 16 + l] = sp_kvalues_iq4nl[q[l] >> 4];
            }
            int ls = (w[4 + j / 2] >> (4 * (j % 2)) & 15) | (int)(sh >> (2 * j) & 3) << 4;
            sc[2 * j] = sc[2 * j + 1] = ls - 32;
        }
    }
}

static void rows_k(const qmm_ctx *c, int n, int t0, int tb) {
    const sp_dtype dt = c->dt;
    const uint8_t *w = c->W + (size_t)n * c->wrow;
    const size_t bb = sp_dtype_block_bytes(dt);
    float acc[LB_TB] = {0};
    int8_t v[256];
    int sc[16];
    for (int b = 0; b < c->K / SP_QK_K; b++, w += bb) {
        unpack_k(w, dt, v, sc);
        float d = rd_f16(dt == SP_DT_Q3_K ? w + 108 : dt == SP_DT_Q2_K ? w + 80 : w);
        for (int i = 0; i < tb; i++) {
            qx_row x = qx_at(c, t0 + i);
            const int8_t *xq = x.q + SP_QK_K * b;
            const int16_t *bs = x.bsums + 16 * b;
            float xd = x.d[b];
            int isum = 0, imin = 0;
            for (int g = 0; g < 16; g++) isum += sc[g] * dot16(v + 16 * g, xq + 16 * g);
            if (dt == SP_DT_Q3_K)
                for (int g = 0; g < 16; g++) isum -= 4 * sc[g] * bs[g];
            if (dt == SP_DT_Q5_K)
                for (int j = 0; j < 8; j++) {
                    int s, m;
                    sp_q4_K_scale_min(j, w + 4, &s, &m);
                    imin += m * (bs[2 * j] + bs[2 * j + 1]);
                }
            if (dt == SP_DT_Q2_K)
                for (int g = 0; g < 16; g++) imin += (w[g] >> 4) * bs[g];
            acc[i] = fmaf(d * xd, (float)isum, acc[i]);
            if (dt == SP_DT_Q5_K) acc[i] = fmaf(-(rd_f16(w + 2) * xd), (float)imin, acc[i]);
            if (dt == SP_DT_Q2_K) acc[i] = fmaf(-(rd_f16(w + 82) * xd), (float)imin, acc[i]);
        }
    }
    for (int i = 0; i < tb; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
}

static void rows_32(const qmm_ctx *c, int n, int t0, int tb) {
    const int q51 = c->dt == SP_DT_Q5_1;
    const uint8_t *w = c->W + (size_t)n * c->wrow;
    const size_t bb = q51 ? 24 : 18;
    float acc[LB_TB] = {0};
    int8_t v[32];
    for (int b = 0; b < c->K / 32; b++, w += bb) {
        if (q51) {
            uint32_t qh = w[4] | (uint32_t)w[5] << 8 | (uint32_t)w[6] << 16 | (uint32_t)w[7] << 24;
            for (int e = 0; e < 32; e++) v[e] = (int8_t)((e < 16 ? w[8 + e] & 15 : w[8 + e - 16] >> 4) | (int)(qh >> e & 1) << 4);
        } else {
            for (int e = 0; e < 32; e++) v[e] = sp_kvalues_iq4nl[e < 16 ? w[2 + e] & 15 : w[2 + e - 16] >> 4];
        }
        float d = rd_f16(w);
        for (int i = 0; i < tb; i++) {
            qx_row x = qx_at(c, t0 + i);
            const int8_t *xq = x.q + 32 * b;
            float xd = x.d[b];
            int p = dot16(v, xq) + dot16(v + 16, xq + 16);
            acc[i] = fmaf(d * xd, (float)p, acc[i]);
            if (q51) {
                int sx = vaddvq_s32(vpaddlq_s16(vaddq_s16(vpaddlq_s8(vld1q_s8(xq)), vpaddlq_s8(vld1q_s8(xq + 16)))));
                acc[i] = fmaf(rd_f16(w + 2) * xd, (float)sx, acc[i]);
            }
        }
    }
    for (int i = 0; i < tb; i++) c->Y[(size_t)(t0 + i) * c->N + n] = acc[i];
}

void sp_qmm_rows_lowbit_neon(const qmm_ctx *c, int n0, int n1) {
    void (*f)(const qmm_ctx *, int, int, int) = qx_is_q8_K(c->dt) ? rows_k : rows_32;
    for (int n = n0; n < n1; n++)
        for (int t = 0; t < c->T; t += LB_TB) f(c, n, t, c->T - t < LB_TB ? c->T - t : LB_TB);
}
