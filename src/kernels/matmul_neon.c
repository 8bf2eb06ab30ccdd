/* matmul_neon.c — the AArch64 NEON tiles of sp_matmul (matmul.c). A canonical accumulator is
 * four q registers, so a tile holds 16 of the 32: 1 token × 4 rows for decode (T = 1),
 * 2 tokens × 2 rows otherwise, 1 row at the end of a chunk. For T > 16 tokens go in chunks
 * whose X stays in L2 while rows of W stream past. The K tail goes through the lane code. */
#include "kernels_neon.h"

#define MMN_PREFETCH_BYTES 1024
#define MMN_XCHUNK_FLOATS (64 * 1024)

/* 16 weights of type dt at element offset off, widened exactly to f32 */
static SP_ALWAYS_INLINE void load_w16(const void *W, size_t off, sp_dtype dt, float32x4_t *w) {
    if (dt == SP_DT_F32) {
        const float *p = (const float *)W + off;
        for (int v = 0; v < 4; v++) w[v] = vld1q_f32(p + 4 * v);
        return;
    }
    const uint16_t *p = (const uint16_t *)W + off;
    uint16x8_t h0 = vld1q_u16(p), h1 = vld1q_u16(p + 8);
    if (dt == SP_DT_BF16) {
        w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
        w[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
        w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
        w[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
    } else {
        float16x8_t f0 = vreinterpretq_f16_u16(h0), f1 = vreinterpretq_f16_u16(h1);
        w[0] = vcvt_f32_f16(vget_low_f16(f0));
        w[1] = vcvt_high_f32_f16(f0);
        w[2] = vcvt_f32_f16(vget_low_f16(f1));
        w[3] = vcvt_high_f32_f16(f1);
    }
}

/* m (< 16) weights of type dt at element offset off, as f32 */
static void tail_w(float *dst, const void *W, size_t off, sp_dtype dt, int m) {
    for (int l = 0; l < m; l++)
        dst[l] = dt == SP_DT_F32    ? ((const float *)W)[off + l]
                 : dt == SP_DT_BF16 ? sp_bf16_to_f32(((const uint16_t *)W)[off + l])
                                    : sp_f16_to_f32(((const uint16_t *)W)[off + l]);
}

/* One TB × NB tile: Y[t0.., n0..] over the full K; TB, NB, dt constant at each call site. */
static SP_ALWAYS_INLINE void mm_tile(const sp_mm_ctx *c, int t0, int n0, sp_dtype dt, const int TB,
                                     const int NB) {
    const int K = c->K;
    const float *X = c->X + (size_t)t0 * K;
    const size_t w0 = (size_t)n0 * K, esz = dt == SP_DT_F32 ? 4 : 2;
    float32x4_t acc[2][4][4];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++)
            for (int v = 0; v < 4; v++) acc[i][j][v] = vdupq_n_f32(0.0f);
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        float32x4_t xv[2][4];
        for (int i = 0; i < TB; i++)
            for (int v = 0; v < 4; v++) xv[i][v] = vld1q_f32(X + (size_t)i * K + k + 4 * v);
        for (int j = 0; j < NB; j++) {
            size_t off = w0 + (size_t)j * K + k;
            if (TB == 1) __builtin_prefetch((const char *)c->W + off * esz + MMN_PREFETCH_BYTES, 0, 3);
            float32x4_t w[4];
            load_w16(c->W, off, dt, w);
            for (int i = 0; i < TB; i++)
                for (int v = 0; v < 4; v++) acc[i][j][v] = vfmaq_f32(acc[i][j][v], xv[i][v], w[v]);
        }
    }
    if (k < K)
        for (int j = 0; j < NB; j++) {
            float w[16];
            tail_w(w, c->W, w0 + (size_t)j * K + k, dt, K - k);
            for (int i = 0; i < TB; i++) sp_fma_tail_neon(acc[i][j], X + (size_t)i * K + k, w, K - k);
        }
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) c->Y[(size_t)(t0 + i) * c->N + n0 + j] = sp_hsum16_neon(acc[i][j]);
}

/* the tile shapes used below, each for every weight type */
static void tile_1x4(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 1, 4); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 1, 4); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 1, 4); break;
    }
}
static void tile_2x2(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 2, 2); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 2, 2); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 2, 2); break;
    }
}
static void tile_1x2(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 1, 2); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 1, 2); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 1, 2); break;
    }
}
static void tile_2x1(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 2, 1); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 2, 1); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 2, 1); break;
    }
}
static void tile_1x1(const sp_mm_ctx *c, int t0, int n0) {
    switch (c->dt) {
    case SP_DT_F32: mm_tile(c, t0, n0, SP_DT_F32, 1, 1); break;
    case SP_DT_BF16: mm_tile(c, t0, n0, SP_DT_BF16, 1, 1); break;
    default: mm_tile(c, t0, n0, SP_DT_F16, 1, 1); break;
    }
}

void sp_mm_rows_neon(const sp_mm_ctx *c, int n0, int n1) {
    const int T = c->T, K = c->K;
    const int NB = T == 1 ? 4 : 2;
    int Tc = T;
    if (T > 16) {
        Tc = (MMN_XCHUNK_FLOATS / (K > 0 ? K : 1)) & ~1;
        if (Tc < 2) Tc = 2;
    }
    for (int tc0 = 0; tc0 < T; tc0 += Tc) {
        int tc1 = tc0 + Tc < T ? tc0 + Tc : T;
        for (int n = n0; n < n1;) {
            int nb = n1 - n >= NB ? NB : 1;
            for (int t = tc0; t < tc1;) {
                int tb = nb == 4 ? 1 : tc1 - t >= 2 ? 2 : 1;
                if (nb == 4) tile_1x4(c, t, n);
                else if (nb == 2) (tb == 2 ? tile_2x2 : tile_1x2)(c, t, n);
                else (tb == 2 ? tile_2x1 : tile_1x1)(c, t, n);
                t += tb;
            }
            n += nb;
        }
    }
}
