/* attention_avx2.c — the AVX2 + FMA pieces of sp_attention (attention.c). QK tiles are done as
 * blocks of up to 2 rows × 3 keys (12 ymm accumulators: a canonical accumulator is two ymm
 * registers), P·V rows in 32-float slices of D with the accumulators held across keys, and
 * the exp 8 lanes at a time. Every value follows the portable operations exactly. */
#include <string.h>

#include "kernels_avx2.h"

static inline void prefetch_row(const float *row, int D) {
    for (int d = 0; d < D; d += 16) __builtin_prefetch(row + d, 0, 3);
}

/* raw canonical dots of NR <= 2 query rows with NK <= 3 key rows into s[r][x] */
static SP_ALWAYS_INLINE void qk_block(const float *const *q, const float *const *k, int D, float s[][6],
                                      const int NR, const int NK) {
    __m256 lo[2][3], hi[2][3];
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < NK; x++) lo[r][x] = hi[r][x] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= D; d += 16) {
        __m256 ql[2], qh[2];
        for (int r = 0; r < NR; r++) ql[r] = _mm256_loadu_ps(q[r] + d), qh[r] = _mm256_loadu_ps(q[r] + d + 8);
        for (int x = 0; x < NK; x++) {
            __m256 kl = _mm256_loadu_ps(k[x] + d), kh = _mm256_loadu_ps(k[x] + d + 8);
            for (int r = 0; r < NR; r++) {
                lo[r][x] = _mm256_fmadd_ps(ql[r], kl, lo[r][x]);
                hi[r][x] = _mm256_fmadd_ps(qh[r], kh, hi[r][x]);
            }
        }
    }
    if (d < D) {
        __m256 ml = sp_lane_mask_avx2(D - d), mh = sp_lane_mask_avx2(D - d - 8);
        __m256i il = _mm256_castps_si256(ml), ih = _mm256_castps_si256(mh);
        __m256 ql[2], qh[2];
        for (int r = 0; r < NR; r++)
            ql[r] = _mm256_maskload_ps(q[r] + d, il), qh[r] = _mm256_maskload_ps(q[r] + d + 8, ih);
        for (int x = 0; x < NK; x++) {
            __m256 kl = _mm256_maskload_ps(k[x] + d, il), kh = _mm256_maskload_ps(k[x] + d + 8, ih);
            for (int r = 0; r < NR; r++) {
                lo[r][x] = _mm256_blendv_ps(lo[r][x], _mm256_fmadd_ps(ql[r], kl, lo[r][x]), ml);
                hi[r][x] = _mm256_blendv_ps(hi[r][x], _mm256_fmadd_ps(qh[r], kh, hi[r][x]), mh);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < NK; x++) s[r][x] = sp_hsum16_avx2(lo[r][x], hi[r][x]);
}

/* sp_attn_qk_fn for NR <= 4 rows × NK (6 or 1) keys */
static SP_ALWAYS_INLINE void qk_tile(const float *const *q, const float *const *k, int D, float scale,
                                     float *const *e, int col, float *m, const int NR, const int NK) {
    float s[4][6];
    for (int r0 = 0; r0 < NR; r0 += 2)
        for (int x0 = 0; x0 < NK; x0 += 3) {
            const int nr = NR - r0 >= 2 ? 2 : 1, nk = NK - x0 >= 3 ? 3 : 1;
            float(*sb)[6] = (float(*)[6])&s[r0][x0];
            if (nr == 2 && nk == 3) qk_block(q + r0, k + x0, D, sb, 2, 3);
            else if (nr == 1 && nk == 3) qk_block(q + r0, k + x0, D, sb, 1, 3);
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

/* buf[i] = e^(buf[i] − m), 8 lanes at a time; the tail through a padded copy */
static void attn_exp(float *buf, int n, float m) {
    __m256 vm = _mm256_set1_ps(m);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(buf + i, sp_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(buf + i), vm)));
    if (i < n) {
        float t[8] = {0};
        memcpy(t, buf + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, sp_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(t), vm)));
        memcpy(buf + i, t, (size_t)(n - i) * sizeof(float));
    }
}

/* sp_attn_pv_fn for NR <= 3 rows: slices of 32 floats of [d0, d0 + dn), 3 × 4 accumulators */
static SP_ALWAYS_INLINE void pv_rows(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0,
                                     float *const *o, const float *const *e, int d0, int dn, const int NR) {
    for (int ds = d0; ds < d0 + dn; ds += 32) {
        const int n = d0 + dn - ds < 32 ? d0 + dn - ds : 32, nv = (n + 7) / 8;
        __m256i mk[4];
        for (int v = 0; v < 4; v++) mk[v] = _mm256_castps_si256(sp_lane_mask_avx2(n - 8 * v));
        __m256 acc[3][4];
        for (int r = 0; r < NR; r++)
            for (int v = 0; v < 4; v++)
                acc[r][v] = v < nv ? _mm256_maskload_ps(o[r] + ds + 8 * v, mk[v]) : _mm256_setzero_ps();
        for (int p = a; p < b; p++) {
            const float *vp = V + sp_kv_off(s, p, kvh) + ds;
            if (p + SP_ATTN_PF_KEYS < b) prefetch_row(V + sp_kv_off(s, p + SP_ATTN_PF_KEYS, kvh) + ds, n);
            __m256 er[3];
            for (int r = 0; r < NR; r++) er[r] = _mm256_set1_ps(e[r][p - p0]);
            for (int v = 0; v < 4; v++) {
                if (v >= nv) break;
                __m256 x = _mm256_maskload_ps(vp + 8 * v, mk[v]);
                for (int r = 0; r < NR; r++) acc[r][v] = _mm256_fmadd_ps(er[r], x, acc[r][v]);
            }
        }
        for (int r = 0; r < NR; r++)
            for (int v = 0; v < nv; v++) _mm256_maskstore_ps(o[r] + ds + 8 * v, mk[v], acc[r][v]);
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

const sp_attn_ops sp_attn_ops_avx2 = {
    .qk_wide = {qk_1x6, qk_2x6, qk_3x6, qk_4x6},
    .qk_narrow = {qk_1x1, qk_2x1, qk_3x1, qk_4x1},
    .pv = {pv_1, pv_2, pv_3},
    .exp = attn_exp,
};
