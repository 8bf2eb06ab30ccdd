/* attention_neon.c — the AArch64 NEON pieces of sp_attention (attention.c). QK tiles are done as
 * blocks of up to 2 rows × 2 keys (16 q-register accumulators), P·V rows in 32-float slices
 * of D with the accumulators held across keys (the last d % 4 values through fmaf), the exp 4
 * lanes at a time. Every value follows the portable operations exactly. */
#include "kernels_neon.h"

static inline void prefetch_row(const float *row, int D) {
    for (int d = 0; d < D; d += 16) __builtin_prefetch(row + d, 0, 3);
}

/* raw canonical dots of NR <= 2 query rows with NK <= 2 key rows into s[r][x] */
static SP_ALWAYS_INLINE void qk_block(const float *const *q, const float *const *k, int D, float s[][6],
                                      const int NR, const int NK) {
    float32x4_t acc[2][2][4];
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < NK; x++)
            for (int v = 0; v < 4; v++) acc[r][x][v] = vdupq_n_f32(0.0f);
    int d = 0;
    for (; d + 16 <= D; d += 16) {
        float32x4_t qv[2][4];
        for (int r = 0; r < NR; r++)
            for (int v = 0; v < 4; v++) qv[r][v] = vld1q_f32(q[r] + d + 4 * v);
        for (int x = 0; x < NK; x++)
            for (int v = 0; v < 4; v++) {
                float32x4_t kv = vld1q_f32(k[x] + d + 4 * v);
                for (int r = 0; r < NR; r++) acc[r][x][v] = vfmaq_f32(acc[r][x][v], qv[r][v], kv);
            }
    }
    if (d < D)
        for (int r = 0; r < NR; r++)
            for (int x = 0; x < NK; x++) sp_fma_tail_neon(acc[r][x], q[r] + d, k[x] + d, D - d);
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < NK; x++) s[r][x] = sp_hsum16_neon(acc[r][x]);
}

/* sp_attn_qk_fn for NR <= 4 rows × NK (6 or 1) keys */
static SP_ALWAYS_INLINE void qk_tile(const float *const *q, const float *const *k, int D, float scale,
                                     float *const *e, int col, float *m, const int NR, const int NK) {
    float s[4][6];
    for (int r0 = 0; r0 < NR; r0 += 2)
        for (int x0 = 0; x0 < NK; x0 += 2) {
            const int nr = NR - r0 >= 2 ? 2 : 1, nk = NK - x0 >= 2 ? 2 : 1;
            float(*sb)[6] = (float(*)[6])&s[r0][x0];
            if (nr == 2 && nk == 2) qk_block(q + r0, k + x0, D, sb, 2, 2);
            else if (nr == 1 && nk == 2) qk_block(q + r0, k + x0, D, sb, 1, 2);
            else if (nr == 2) qk_block(q + r0, k + x0, D, sb, 2, 1);
            else qk_block(q + r0, k + x0, D, sb, 1, 1);
        }
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < NK; x++) {
            float v = s[r][x] * scale;
            e[r][col + x] = v;
            if (v > m[r]) m[r] = v;
        }
}

static void qk_1x6(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 1, 6);
}
static void qk_2x6(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 2, 6);
}
static void qk_3x6(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 3, 6);
}
static void qk_4x6(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 4, 6);
}
static void qk_1x1(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 1, 1);
}
static void qk_2x1(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 2, 1);
}
static void qk_3x1(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 3, 1);
}
static void qk_4x1(const float *const *q, const float *const *k, int D, float scale, float *const *e, int col,
                   float *m) {
    qk_tile(q, k, D, scale, e, col, m, 4, 1);
}

/* buf[i] = e^(buf[i] − m), 4 lanes at a time, the tail by the lane code */
static void attn_exp(float *buf, int n, float m) {
    float32x4_t vm = vdupq_n_f32(m);
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(buf + i, sp_exp_neon(vsubq_f32(vld1q_f32(buf + i), vm)));
    for (; i < n; i++) buf[i] = sp_exp_lane(buf[i] - m);
}

/* sp_attn_pv_fn for NR <= 3 rows: slices of 32 floats, 3 × 8 accumulators */
static SP_ALWAYS_INLINE void pv_rows(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0,
                                     float *const *o, const float *const *e, int d0, int dn, const int NR) {
    for (int ds = d0; ds < d0 + dn; ds += 32) {
        const int n = d0 + dn - ds < 32 ? d0 + dn - ds : 32, nv = n / 4;
        float32x4_t acc[3][8];
        for (int r = 0; r < NR; r++)
            for (int v = 0; v < 8; v++) acc[r][v] = v < nv ? vld1q_f32(o[r] + ds + 4 * v) : vdupq_n_f32(0.0f);
        for (int p = a; p < b; p++) {
            const float *vp = V + sp_kv_off(s, p, kvh) + ds;
            if (p + SP_ATTN_PF_KEYS < b) prefetch_row(V + sp_kv_off(s, p + SP_ATTN_PF_KEYS, kvh) + ds, n);
            for (int v = 0; v < 8; v++) {
                if (v >= nv) break;
                float32x4_t x = vld1q_f32(vp + 4 * v);
                for (int r = 0; r < NR; r++) acc[r][v] = vfmaq_n_f32(acc[r][v], x, e[r][p - p0]);
            }
            for (int d = 4 * nv; d < n; d++)
                for (int r = 0; r < NR; r++) o[r][ds + d] = fmaf(e[r][p - p0], vp[d], o[r][ds + d]);
        }
        for (int r = 0; r < NR; r++)
            for (int v = 0; v < nv; v++) vst1q_f32(o[r] + ds + 4 * v, acc[r][v]);
    }
}

static void pv_1(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                 const float *const *e, int d0, int dn) {
    pv_rows(V, s, kvh, a, b, p0, o, e, d0, dn, 1);
}
static void pv_2(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                 const float *const *e, int d0, int dn) {
    pv_rows(V, s, kvh, a, b, p0, o, e, d0, dn, 2);
}
static void pv_3(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                 const float *const *e, int d0, int dn) {
    pv_rows(V, s, kvh, a, b, p0, o, e, d0, dn, 3);
}

const sp_attn_ops sp_attn_ops_neon = {
    .qk_wide = {qk_1x6, qk_2x6, qk_3x6, qk_4x6},
    .qk_narrow = {qk_1x1, qk_2x1, qk_3x1, qk_4x1},
    .pv = {pv_1, pv_2, pv_3},
    .exp = attn_exp,
};
