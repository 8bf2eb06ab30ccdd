/* attention_avx512.c — the AVX-512 pieces of sp_attention (attention.c): register-tiled QK
 * scores with the batched canonical trees, the lane-wise exp, and P·V rows with their
 * accumulators held in zmm registers across keys. */
#include "kernels_avx512.h"

static inline void prefetch_row(const float *row, int D) {
    for (int d = 0; d < D; d += 16) __builtin_prefetch(row + d, 0, 3);
}

/* rows × keys of scores per register tile */
#define ATTN_QK_ROWS 4
#define ATTN_QK_KEYS 6

/* Scores of NR query rows q[r] against NK key rows k[x] (sp_attn_qk_fn, kernels_internal.h). */
static SP_ALWAYS_INLINE void attn_qk_tile(const float *const *q, const float *const *k, int D,
                                          float scale, float *const *e, int col, float *m,
                                          const int NR, const int NK) {
    __m512 acc[ATTN_QK_ROWS][ATTN_QK_KEYS];
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < NK; x++) acc[r][x] = _mm512_setzero_ps();
    int d = 0;
    for (; d + 16 <= D; d += 16) {
        __m512 qv[ATTN_QK_ROWS];
        for (int r = 0; r < NR; r++) qv[r] = _mm512_loadu_ps(q[r] + d);
        for (int x = 0; x < NK; x++) {
            __m512 kv = _mm512_loadu_ps(k[x] + d);
            for (int r = 0; r < NR; r++) acc[r][x] = _mm512_fmadd_ps(qv[r], kv, acc[r][x]);
        }
    }
    if (d < D) {
        __mmask16 mk = sp_tail_mask(D - d);
        __m512 qv[ATTN_QK_ROWS];
        for (int r = 0; r < NR; r++) qv[r] = _mm512_maskz_loadu_ps(mk, q[r] + d);
        for (int x = 0; x < NK; x++) {
            __m512 kv = _mm512_maskz_loadu_ps(mk, k[x] + d);
            for (int r = 0; r < NR; r++) acc[r][x] = _mm512_mask3_fmadd_ps(qv[r], kv, acc[r][x], mk);
        }
    }
    /* canonical sums (batched), times scale, then the running maxima in key order */
    float *o[ATTN_QK_ROWS];
    for (int r = 0; r < NR; r++) o[r] = e[r] + col;
    if (NR == 4 && NK == 6) {
        __m512 a[24];
        for (int r = 0; r < 4; r++)
            for (int x = 0; x < 6; x++) a[r * 6 + x] = acc[r][x];
        __m512 c4;
        __m256 c2;
        sp_sums_4x6(a, scale, 1, &c4, &c2);
        sp_put_sums_4x6(c4, c2, o);
        /* the maxima with the four rows in lanes 0..3, key by key: max_ps(s, m) is
         * s > m ? s : m, the scalar update below, lane by lane */
        __m128 mv = _mm_loadu_ps(m);
        for (int x = 0; x < 4; x++) {
            const __m512i col = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12 + x, 8 + x, 4 + x, x);
            mv = _mm_max_ps(_mm512_castps512_ps128(_mm512_permutexvar_ps(col, c4)), mv);
        }
        __m128 lo = _mm256_castps256_ps128(c2), hi = _mm256_extractf128_ps(c2, 1);
        mv = _mm_max_ps(_mm_shuffle_ps(lo, hi, 0x88), mv); /* key 4: lanes 0, 2 of each half */
        mv = _mm_max_ps(_mm_shuffle_ps(lo, hi, 0xDD), mv); /* key 5: lanes 1, 3 */
        _mm_storeu_ps(m, mv);
        return;
    }
    if (NK == 6) {
        for (int r = 0; r < NR; r++) sp_store_sums_row(acc[r], 6, o[r], scale, 1);
    } else {
        for (int r = 0; r < NR; r++)
            for (int x = 0; x < NK; x++) o[r][x] = sp_hsum16_avx512(acc[r][x]) * scale;
    }
    for (int r = 0; r < NR; r++) {
        float mr = m[r];
        for (int x = 0; x < NK; x++) mr = o[r][x] > mr ? o[r][x] : mr;
        m[r] = mr;
    }
}

#define ATTN_QK(NR, NK)                                                                       \
    static void attn_qk_##NR##x##NK(const float *const *q, const float *const *k, int D,       \
                                    float scale, float *const *e, int col, float *m) {        \
        attn_qk_tile(q, k, D, scale, e, col, m, NR, NK);                                      \
    }
ATTN_QK(1, 6) ATTN_QK(2, 6) ATTN_QK(3, 6) ATTN_QK(4, 6)
ATTN_QK(1, 1) ATTN_QK(2, 1) ATTN_QK(3, 1) ATTN_QK(4, 1)

/* buf[i] = exp(buf[i] - m), i < n; lane-wise, so each value is independent of its index */
static void attn_exp(float *buf, int n, float m) {
    int i = 0;
    __m512 vm = _mm512_set1_ps(m);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(buf + i, sp_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(buf + i), vm)));
    if (i < n) {
        __mmask16 k = sp_tail_mask(n - i);
        __m512 e = sp_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, buf + i), vm));
        _mm512_mask_storeu_ps(buf + i, k, e);
    }
}

/* rows per P·V block: 3 rows × 8 vectors = 24 accumulators in registers */
#define ATTN_PV_ROWS 3

/* For nr <= 3 rows r: o_r[d] = fma(e_r[p], v_p[d], o_r[d]) for p = a .. b-1 in increasing
 * order and d = d0 .. d0+dn-1 (dn <= 128), with the accumulators held in registers across
 * keys. e_r points at row r's scores for key p0 (e_r[p - p0]). Per element this is exactly
 * the sequence of the one-key-at-a-time loop. This is the general form (any dn, masked
 * tail); attn_pv_full is the same for dn = 16·NV. */
static SP_ALWAYS_INLINE void attn_pv_rows(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, const int NR,
                                          float *const *o, const float *const *e, int d0, int dn) {
    const int nv = (dn + 15) / 16;
    __mmask16 m[8];
    for (int v = 0; v < 8; v++)
        m[v] = v < nv - 1 ? (__mmask16)0xFFFF : v == nv - 1 ? sp_tail_mask(dn - 16 * v) : 0;
    __m512 acc[ATTN_PV_ROWS][8];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < 8; v++)
            acc[r][v] = v < nv ? _mm512_maskz_loadu_ps(m[v], o[r] + d0 + 16 * v) : _mm512_setzero_ps();
    for (int p = a; p < b; p++) {
        const float *vp = V + sp_kv_off(s, p, kvh) + d0;
        if (p + SP_ATTN_PF_KEYS < b) prefetch_row(V + sp_kv_off(s, p + SP_ATTN_PF_KEYS, kvh) + d0, dn);
        __m512 er[ATTN_PV_ROWS];
        for (int r = 0; r < NR; r++) er[r] = _mm512_set1_ps(e[r][p - p0]);
        for (int v = 0; v < 8; v++) {
            if (v >= nv) break;
            __m512 x = _mm512_maskz_loadu_ps(m[v], vp + 16 * v);
            for (int r = 0; r < NR; r++) acc[r][v] = _mm512_fmadd_ps(er[r], x, acc[r][v]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < 8; v++)
            if (v < nv) _mm512_mask_storeu_ps(o[r] + d0 + 16 * v, m[v], acc[r][v]);
}

/* attn_pv_rows for dn = 16·NV exactly: no masks and no data-dependent branches in the key
 * loop, so the NR·NV accumulators stay in registers (the general form's runtime vector count
 * makes the compiler keep them on the stack). The same operations in the same order. V rows
 * are addressed by a stride, which holds for a linear cache and within one lap of a ring. */
static SP_ALWAYS_INLINE void attn_pv_full(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0,
                                          const int NR, const int NV, float *const *o, const float *const *e,
                                          int d0) {
    __m512 acc[ATTN_PV_ROWS][8];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_loadu_ps(o[r] + d0 + 16 * v);
    const size_t stride = (size_t)s->KVH * s->D;
    for (int p = a; p < b;) {
        /* keys p .. q-1 lie in consecutive slots */
        int q = b;
        if (s->ring && q - p > s->cap - p % s->cap) q = p + (s->cap - p % s->cap);
        const float *vp = V + sp_kv_off(s, p, kvh) + d0;
        for (; p < q; p++, vp += stride) {
            if (p + SP_ATTN_PF_KEYS < b) prefetch_row(V + sp_kv_off(s, p + SP_ATTN_PF_KEYS, kvh) + d0, 16 * NV);
            __m512 w[ATTN_PV_ROWS];
            for (int r = 0; r < NR; r++) w[r] = _mm512_set1_ps(e[r][p - p0]);
            for (int v = 0; v < NV; v++) {
                __m512 x = _mm512_loadu_ps(vp + 16 * v);
                for (int r = 0; r < NR; r++) acc[r][v] = _mm512_fmadd_ps(w[r], x, acc[r][v]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(o[r] + d0 + 16 * v, acc[r][v]);
}

/* one block of NR rows: the register-resident form for whole 128- or 64-float slices */
static SP_ALWAYS_INLINE void attn_pv_block(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0,
                                           const int NR, float *const *o, const float *const *e, int d0, int dn) {
    if (dn == 128) attn_pv_full(V, s, kvh, a, b, p0, NR, 8, o, e, d0);
    else if (dn == 64) attn_pv_full(V, s, kvh, a, b, p0, NR, 4, o, e, d0);
    else attn_pv_rows(V, s, kvh, a, b, p0, NR, o, e, d0, dn);
}

static void attn_pv_1(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                      const float *const *e, int d0, int dn) {
    attn_pv_block(V, s, kvh, a, b, p0, 1, o, e, d0, dn);
}
static void attn_pv_2(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                      const float *const *e, int d0, int dn) {
    attn_pv_block(V, s, kvh, a, b, p0, 2, o, e, d0, dn);
}
static void attn_pv_3(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                      const float *const *e, int d0, int dn) {
    attn_pv_block(V, s, kvh, a, b, p0, 3, o, e, d0, dn);
}


const sp_attn_ops sp_attn_ops_avx512 = {
    .qk_wide = {attn_qk_1x6, attn_qk_2x6, attn_qk_3x6, attn_qk_4x6},
    .qk_narrow = {attn_qk_1x1, attn_qk_2x1, attn_qk_3x1, attn_qk_4x1},
    .pv = {attn_pv_1, attn_pv_2, attn_pv_3},
    .exp = attn_exp,
};
