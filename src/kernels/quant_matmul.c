/* quant_matmul.c — sp_matmul for quantized weights: the activation rows are quantized into a
 * stack scratch (in token chunks that fit it), threads claim chunks of weight rows (N, never
 * K) and each runs its tier's row kernel; plus the scalar row kernels (the portable tier, in
 * the canonical order of quant_internal.h), the double-precision reference, and the load-time
 * repacks of Q4_0, Q4_K and Q6_K for the AVX-512 tiles (sp_mat_pack). Several weights that
 * read one activation format (sp_matmul_multi: Q, K, V; gate, up) share one quantization of X
 * and one region; a chunk of many tokens is quantized by every thread.
 *
 * Every tier computes an output from that output's weight row and that token's quantized
 * activation row alone, in one fixed order, so results are bit-identical whatever T, the
 * token's index, the thread count or the tier. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "quant_internal.h"

/* rows per claimed chunk are a multiple of this (the tiles' row counts divide it) */
#define QMM_ROW_ALIGN 16
#define QMM_CHUNKS_PER_THREAD 8
/* and hold at most about this many weight bytes (more chunks for a large matrix such as the LM
 * head, so the threads finish it together) */
#define QMM_CHUNK_BYTES (1 << 20)

static inline float rd_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return sp_f16_to_f32(h);
}

/* ---- activation rows ------------------------------------------------------------------- */
size_t sp_qx_row_bytes(sp_dtype dt, int K) {
    size_t nb = (size_t)K / sp_dtype_block_elems(dt);
    size_t bytes = (size_t)K + 4 * nb + (qx_is_q8_K(dt) ? 2 * (size_t)K / 16 : 0);
    return (bytes + 63) / 64 * 64;
}

void sp_qx_quantize(uint8_t *row, const float *x, sp_dtype dt, int K) {
    int8_t *q = (int8_t *)row;
    float *d = (float *)(row + K);
    if (!qx_is_q8_K(dt)) {
        sp_block_q8_0 blk;
        for (int b = 0; b < K / SP_QK8_0; b++) {
            sp_quantize_row_q8_0(&blk, x + (size_t)b * SP_QK8_0, SP_QK8_0);
            memcpy(q + (size_t)b * SP_QK8_0, blk.qs, SP_QK8_0);
            d[b] = sp_f16_to_f32(blk.d);
        }
    } else {
        sp_block_q8_K blk;
        int16_t *bs = (int16_t *)(row + K + 4 * (size_t)(K / SP_QK_K));
        for (int b = 0; b < K / SP_QK_K; b++) {
            sp_quantize_row_q8_K(&blk, x + (size_t)b * SP_QK_K, SP_QK_K);
            memcpy(q + (size_t)b * SP_QK_K, blk.qs, SP_QK_K);
            d[b] = blk.d;
            memcpy(bs + 16 * b, blk.bsums, sizeof blk.bsums);
        }
    }
}

/* ---- scalar row kernels (the canonical order, written out) ------------------------------ */
static float dot_q8_0_scalar(const uint8_t *w, qx_row x, int K) {
    float acc[16] = {0};
    for (int b = 0; b < K / 32; b++, w += 34) {
        const int8_t *wq = (const int8_t *)(w + 2), *xq = x.q + 32 * b;
        float s = rd_f16(w) * x.d[b];
        for (int i = 0; i < 8; i++) {
            int p = 0;
            for (int e = 4 * i; e < 4 * i + 4; e++) p += wq[e] * xq[e];
            acc[8 * (b & 1) + i] = fmaf(s, (float)p, acc[8 * (b & 1) + i]);
        }
    }
    return sp_hsum16(acc);
}

static float dot_q4_0_scalar(const uint8_t *w, qx_row x, int K) {
    float acc[16] = {0};
    for (int b = 0; b < K / 32; b++, w += 18) {
        const uint8_t *qs = w + 2;
        const int8_t *xq = x.q + 32 * b;
        float s = rd_f16(w) * x.d[b];
        for (int i = 0; i < 8; i++) {
            int p = 0;
            for (int e = 4 * i; e < 4 * i + 4; e++) p += ((e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) - 8) * xq[e];
            acc[8 * (b & 1) + i] = fmaf(s, (float)p, acc[8 * (b & 1) + i]);
        }
    }
    return sp_hsum16(acc);
}

static float dot_q5_0_scalar(const uint8_t *w, qx_row x, int K) {
    float acc[16] = {0};
    for (int b = 0; b < K / 32; b++, w += 22) {
        const uint8_t *qs = w + 6;
        const int8_t *xq = x.q + 32 * b;
        uint32_t qh = w[2] | (uint32_t)w[3] << 8 | (uint32_t)w[4] << 16 | (uint32_t)w[5] << 24;
        float s = rd_f16(w) * x.d[b];
        for (int i = 0; i < 8; i++) {
            int p = 0;
            for (int e = 4 * i; e < 4 * i + 4; e++)
                p += (((e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) | (int)(qh >> e & 1) << 4) - 16) * xq[e];
            acc[8 * (b & 1) + i] = fmaf(s, (float)p, acc[8 * (b & 1) + i]);
        }
    }
    return sp_hsum16(acc);
}

static float dot_q4_K_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    for (int b = 0; b < K / SP_QK_K; b++, w += 144) {
        const uint8_t *sc8 = w + 4, *qs = w + 16;
        const int8_t *xq = x.q + SP_QK_K * b;
        const int16_t *bs = x.bsums + 16 * b;
        int isum = 0, imin = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m, s = 0;
            sp_q4_K_scale_min(j, sc8, &sc, &m);
            const uint8_t *q = qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) s += (j & 1 ? q[l] >> 4 : q[l] & 15) * xq[32 * j + l];
            isum += sc * s;
            imin += m * (bs[2 * j] + bs[2 * j + 1]);
        }
        acc = fmaf(rd_f16(w) * x.d[b], (float)isum, acc);
        acc = fmaf(-(rd_f16(w + 2) * x.d[b]), (float)imin, acc);
    }
    return acc;
}

static float dot_q6_K_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    for (int b = 0; b < K / SP_QK_K; b++, w += 210) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192), *xq = x.q + SP_QK_K * b;
        const int16_t *bs = x.bsums + 16 * b;
        int gsum[16] = {0};
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *L = ql + 64 * h, *H = qh + 32 * h;
                int e = 128 * h + l;
                int u0 = (L[l] & 15) | (H[l] & 3) << 4, u1 = (L[l + 32] & 15) | (H[l] >> 2 & 3) << 4;
                int u2 = (L[l] >> 4) | (H[l] >> 4 & 3) << 4, u3 = (L[l + 32] >> 4) | (H[l] >> 6 & 3) << 4;
                gsum[e / 16] += u0 * xq[e];
                gsum[(e + 32) / 16] += u1 * xq[e + 32];
                gsum[(e + 64) / 16] += u2 * xq[e + 64];
                gsum[(e + 96) / 16] += u3 * xq[e + 96];
            }
        int isum = 0;
        for (int g = 0; g < 16; g++) isum += sc[g] * (gsum[g] - 32 * bs[g]);
        acc = fmaf(rd_f16(w + 208) * x.d[b], (float)isum, acc);
    }
    return acc;
}

/* Q5_1 and IQ4_NL (32-blocks against Q8_0 activations): one accumulator, blocks in order */
static float dot_q5_1_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    for (int b = 0; b < K / 32; b++, w += 24) {
        const uint8_t *qs = w + 8;
        const int8_t *xq = x.q + 32 * b;
        uint32_t qh = w[4] | (uint32_t)w[5] << 8 | (uint32_t)w[6] << 16 | (uint32_t)w[7] << 24;
        int p = 0, sx = 0;
        for (int e = 0; e < 32; e++) {
            p += ((e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) | (int)(qh >> e & 1) << 4) * xq[e];
            sx += xq[e];
        }
        acc = fmaf(rd_f16(w) * x.d[b], (float)p, acc);
        acc = fmaf(rd_f16(w + 2) * x.d[b], (float)sx, acc);
    }
    return acc;
}

/* Q4_1 and QA8: Q4_0's lanes, each block's min term after its scale term (q: nibbles or bytes at w + 4) */
static float dot_affine_scalar(const uint8_t *w, qx_row x, int K, int qa8) {
    const size_t bb = qa8 ? 36 : 20;
    float acc[16] = {0};
    for (int b = 0; b < K / 32; b++, w += bb) {
        const uint8_t *qs = w + 4;
        const int8_t *xq = x.q + 32 * b;
        float s = rd_f16(w) * x.d[b], sm = rd_f16(w + 2) * x.d[b];
        for (int i = 0; i < 8; i++) {
            int p = 0, sx = 0;
            for (int e = 4 * i; e < 4 * i + 4; e++) {
                p += (qa8 ? qs[e] : e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) * xq[e];
                sx += xq[e];
            }
            acc[8 * (b & 1) + i] = fmaf(s, (float)p, acc[8 * (b & 1) + i]);
            acc[8 * (b & 1) + i] = fmaf(sm, (float)sx, acc[8 * (b & 1) + i]);
        }
    }
    return sp_hsum16(acc);
}

static float dot_iq4_nl_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    for (int b = 0; b < K / 32; b++, w += 18) {
        const uint8_t *qs = w + 2;
        const int8_t *xq = x.q + 32 * b;
        int p = 0;
        for (int e = 0; e < 32; e++) p += sp_kvalues_iq4nl[e < 16 ? qs[e] & 15 : qs[e - 16] >> 4] * xq[e];
        acc = fmaf(rd_f16(w) * x.d[b], (float)p, acc);
    }
    return acc;
}

static float dot_q5_K_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    for (int b = 0; b < K / SP_QK_K; b++, w += 176) {
        const uint8_t *sc8 = w + 4, *qh = w + 16, *qs = w + 48;
        const int8_t *xq = x.q + SP_QK_K * b;
        const int16_t *bs = x.bsums + 16 * b;
        int isum = 0, imin = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m, s = 0;
            sp_q4_K_scale_min(j, sc8, &sc, &m);
            const uint8_t *q = qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) s += ((j & 1 ? q[l] >> 4 : q[l] & 15) | (qh[l] >> j & 1) << 4) * xq[32 * j + l];
            isum += sc * s;
            imin += m * (bs[2 * j] + bs[2 * j + 1]);
        }
        acc = fmaf(rd_f16(w) * x.d[b], (float)isum, acc);
        acc = fmaf(-(rd_f16(w + 2) * x.d[b]), (float)imin, acc);
    }
    return acc;
}

static float dot_q3_K_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    int8_t sc[16];
    for (int b = 0; b < K / SP_QK_K; b++, w += 110) {
        const uint8_t *hm = w, *qs = w + 32;
        const int8_t *xq = x.q + SP_QK_K * b;
        const int16_t *bs = x.bsums + 16 * b;
        sp_q3_K_scales(w + 96, sc);
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int e = 16 * g; e < 16 * g + 16; e++) {
                int u = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32)) & 3) | (hm[e % 32] >> (e / 32) & 1) << 2;
                s += u * xq[e];
            }
            isum += sc[g] * (s - 4 * bs[g]);
        }
        acc = fmaf(rd_f16(w + 108) * x.d[b], (float)isum, acc);
    }
    return acc;
}

static float dot_q2_K_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    for (int b = 0; b < K / SP_QK_K; b++, w += 84) {
        const uint8_t *sc = w, *qs = w + 16;
        const int8_t *xq = x.q + SP_QK_K * b;
        const int16_t *bs = x.bsums + 16 * b;
        int isum = 0, imin = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int e = 16 * g; e < 16 * g + 16; e++) s += (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32)) & 3) * xq[e];
            isum += (sc[g] & 15) * s;
            imin += (sc[g] >> 4) * bs[g];
        }
        acc = fmaf(rd_f16(w + 80) * x.d[b], (float)isum, acc);
        acc = fmaf(-(rd_f16(w + 82) * x.d[b]), (float)imin, acc);
    }
    return acc;
}

static float dot_iq4_xs_scalar(const uint8_t *w, qx_row x, int K) {
    float acc = 0;
    for (int b = 0; b < K / SP_QK_K; b++, w += 136) {
        unsigned sh = w[2] | (unsigned)w[3] << 8;
        const uint8_t *sl = w + 4, *qs = w + 8;
        const int8_t *xq = x.q + SP_QK_K * b;
        int isum = 0;
        for (int j = 0; j < 8; j++) {
            int ls = (sl[j / 2] >> (4 * (j % 2)) & 15) | (int)(sh >> (2 * j) & 3) << 4, s = 0;
            const uint8_t *q = qs + 16 * j;
            for (int e = 0; e < 32; e++) s += sp_kvalues_iq4nl[e < 16 ? q[e] & 15 : q[e - 16] >> 4] * xq[32 * j + e];
            isum += (ls - 32) * s;
        }
        acc = fmaf(rd_f16(w) * x.d[b], (float)isum, acc);
    }
    return acc;
}

static float dot_scalar(const uint8_t *w, qx_row x, sp_dtype dt, int K) {
    switch (dt) {
    case SP_DT_Q8_0: return dot_q8_0_scalar(w, x, K);
    case SP_DT_Q4_0: return dot_q4_0_scalar(w, x, K);
    case SP_DT_Q5_0: return dot_q5_0_scalar(w, x, K);
    case SP_DT_Q4_K: return dot_q4_K_scalar(w, x, K);
    case SP_DT_Q5_K: return dot_q5_K_scalar(w, x, K);
    case SP_DT_Q3_K: return dot_q3_K_scalar(w, x, K);
    case SP_DT_Q2_K: return dot_q2_K_scalar(w, x, K);
    case SP_DT_Q5_1: return dot_q5_1_scalar(w, x, K);
    case SP_DT_IQ4_NL: return dot_iq4_nl_scalar(w, x, K);
    case SP_DT_IQ4_XS: return dot_iq4_xs_scalar(w, x, K);
    case SP_DT_Q4_1: return dot_affine_scalar(w, x, K, 0);
    case SP_DT_QA8: return dot_affine_scalar(w, x, K, 1);
    default: return dot_q6_K_scalar(w, x, K);
    }
}

void sp_qmm_rows_scalar(const qmm_ctx *c, int n0, int n1) {
    for (int n = n0; n < n1; n++) {
        const uint8_t *w = c->W + (size_t)n * c->wrow;
        for (int t = 0; t < c->T; t++) {
            c->Y[(size_t)t * c->N + n] = dot_scalar(w, qx_at(c, t), c->dt, c->K);
        }
    }
}

/* ---- threads and tiers ----------------------------------------------------------------- */
typedef void (*qmm_rows_fn)(const qmm_ctx *c, int n0, int n1);

/* One parallel region over the rows of up to SP_MATMUL_MULTI_MAX weights that share one
 * quantized activation block: chunk k belongs to weight m when first[m] <= k < first[m + 1].
 * Threads claim chunks from one counter, so each weight's rows are spread over every thread
 * and a thread the OS keeps off a core costs only its chunks. */
typedef struct {
    qmm_ctx c[SP_MATMUL_MULTI_MAX];
    qmm_rows_fn rows[SP_MATMUL_MULTI_MAX];
    int chunk_rows[SP_MATMUL_MULTI_MAX];
    int first[SP_MATMUL_MULTI_MAX + 1];
    int n;
    atomic_int next_chunk;
} qmm_job;

static void qmm_task(void *arg, int i, int n) {
    (void)i, (void)n;
    qmm_job *j = arg;
    for (;;) {
        int k = atomic_fetch_add(&j->next_chunk, 1), m = 0;
        if (k >= j->first[j->n]) return;
        while (k >= j->first[m + 1]) m++;
        const qmm_ctx *c = &j->c[m];
        long a = (long)(k - j->first[m]) * j->chunk_rows[m];
        int n1 = a + j->chunk_rows[m] < c->N ? (int)a + j->chunk_rows[m] : c->N;
        j->rows[m](c, (int)a, n1);
    }
}

/* the row kernels of tier for weight type dt (NEON has none for Q5_0, Q4_1, QA8: the scalar ones) */
static qmm_rows_fn qmm_pick(sp_cpu_tier tier, sp_dtype dt) {
    unsigned f = sp_cpu_features();
#if defined(__x86_64__) || defined(__i386__)
    /* Q4_1, QA8: the AVX-512 VNNI tiles, else the AVX2 ones on both x86 tiers */
    if ((dt == SP_DT_Q4_1 || dt == SP_DT_QA8) && !(tier == SP_CPU_AVX512 && (f & SP_CPU_HAS_AVX512_VNNI)))
        return tier == SP_CPU_AVX512 || tier == SP_CPU_AVX2 ? sp_qmm_rows_avx2 : sp_qmm_rows_scalar;
    /* Q5_K, Q3_K, Q2_K, Q5_1, IQ4_NL, IQ4_XS: the AVX2 kernels on both x86 tiers, except the
     * packed Q5_K, Q3_K and IQ4_XS tiles of AVX-512 VNNI */
    if (sp_quant_is_lowbit(dt) && tier == SP_CPU_AVX512 && (f & SP_CPU_HAS_AVX512_VNNI) && sp_lowbit_packs(dt))
        return sp_qmm_rows_lowbit_avx512;
    if (sp_quant_is_lowbit(dt)) return tier == SP_CPU_AVX512 || tier == SP_CPU_AVX2 ? sp_qmm_rows_lowbit_avx2 : sp_qmm_rows_scalar;
    if (tier == SP_CPU_AVX512 && (f & SP_CPU_HAS_AVX512_VNNI)) return sp_qmm_rows_avx512;
    if (tier == SP_CPU_AVX512 || tier == SP_CPU_AVX2) return sp_qmm_rows_avx2;
#elif defined(__aarch64__)
    if (tier == SP_CPU_NEON && (f & SP_CPU_HAS_DOTPROD) && sp_quant_is_lowbit(dt)) return sp_qmm_rows_lowbit_neon;
    if (tier == SP_CPU_NEON && (f & SP_CPU_HAS_DOTPROD) && dt != SP_DT_Q5_0 && dt != SP_DT_Q4_1 && dt != SP_DT_QA8)
        return qmm_rows_neon;
#endif
    (void)f, (void)tier, (void)dt;
    return sp_qmm_rows_scalar;
}

/* the activation format a weight type's dot product reads: 0 Q8_0 blocks, 1 Q8_K */
static int qx_format(sp_dtype dt) { return qx_is_q8_K(dt); }

int sp_matmul_quant_shares_x(const sp_mat *const *W, int n) {
    if (n < 1 || n > SP_MATMUL_MULTI_MAX) return 0;
    for (int i = 0; i < n; i++)
        if (!sp_dtype_is_quant(W[i]->dt) || W[i]->k != W[0]->k || qx_format(W[i]->dt) != qx_format(W[0]->dt)) return 0;
    return 1;
}

/* Activation rows [t0, t1) of a chunk quantized by the threads of a pool (rows are independent,
 * so the bytes are those of one thread). */
typedef struct {
    void (*quantize)(uint8_t *, const float *, sp_dtype, int);
    uint8_t *XQ;
    const float *X;
    sp_dtype dt;
    int T, K;
    size_t xrow;
} qx_job;

static void qx_task(void *arg, int i, int n) {
    const qx_job *j = arg;
    int lo, hi;
    sp_pool_split(j->T, 1, i, n, &lo, &hi);
    for (int t = lo; t < hi; t++) {
        uint8_t *row = j->XQ + (size_t)t * j->xrow;
        j->quantize(row, j->X + (size_t)t * j->K, j->dt, j->K);
    }
}

/* chunks of at least this many tokens quantize their activation rows on every thread (below
 * it one more region costs more than the rows) */
#define QX_PARALLEL_MIN_T 16

void sp_matmul_quant_multi(sp_pool *pool, float *const *Y, const float *X, int T, const sp_mat *const *W, int n,
                           sp_cpu_tier tier) {
    SP_ASSERT(sp_matmul_quant_shares_x(W, n));
    if (T <= 0) return;
    _Alignas(64) uint8_t scratch[SP_QX_SCRATCH];
    int nthr = sp_pool_size(pool), K = W[0]->k;
    int chunks = nthr > 1 ? QMM_CHUNKS_PER_THREAD * nthr : 1;
    qmm_job job = {.n = n};
    job.first[0] = 0;
    for (int m = 0; m < n; m++) {
        SP_ASSERT(sp_mat_check(W[m], "sp_matmul", NULL) == 0);
        qmm_ctx *c = &job.c[m];
        *c = (qmm_ctx){.W = W[m]->data, .XQ = scratch, .dt = W[m]->dt, .N = W[m]->n, .K = K};
        c->wrow = sp_dtype_row_bytes(W[m]->dt, (size_t)K);
        c->xrow = sp_qx_row_bytes(W[m]->dt, K);
        job.rows[m] = qmm_pick(tier, W[m]->dt);
#if defined(__x86_64__) || defined(__i386__)
        if (W[m]->pack && (W[m]->dt == SP_DT_Q4_0 || W[m]->dt == SP_DT_Q4_K || W[m]->dt == SP_DT_Q6_K) &&
            job.rows[m] == sp_qmm_rows_avx512) {
            c->W = W[m]->pack;
            if (W[m]->dt == SP_DT_Q4_0) c->wrow = q4p_row_bytes(K);
            if (W[m]->dt == SP_DT_Q4_K) c->wrow = q4kx_row_bytes(K);
            c->packed = 1;
        }
        if (W[m]->pack && job.rows[m] == sp_qmm_rows_lowbit_avx512) {
            c->W = W[m]->pack;
            c->wrow = kx_lowbit_row_bytes(W[m]->dt, K);
            c->packed = 1;
        }
#endif
        int rows = (W[m]->n + chunks - 1) / chunks;
        long cap = (long)(QMM_CHUNK_BYTES / c->wrow);
        if (rows > cap) rows = (int)cap;
        if (rows < 1) rows = 1;
        job.chunk_rows[m] = (rows + QMM_ROW_ALIGN - 1) / QMM_ROW_ALIGN * QMM_ROW_ALIGN;
        job.first[m + 1] = job.first[m] + (W[m]->n + job.chunk_rows[m] - 1) / job.chunk_rows[m];
    }
    size_t xrow = job.c[0].xrow; /* one format: every weight's row bytes are these */
    int tc = (int)(SP_QX_SCRATCH / xrow);
    SP_ASSERT(tc >= 1);
    /* the activation rows: the same bytes from either quantizer */
    qx_job qj = {sp_qx_quantize, scratch, X, W[0]->dt, 0, K, xrow};
#if defined(__x86_64__) || defined(__i386__)
    if (job.rows[0] == sp_qmm_rows_avx512 || job.rows[0] == sp_qmm_rows_lowbit_avx512) qj.quantize = sp_qx_quantize_avx512;
#endif
    for (int t0 = 0; t0 < T; t0 += tc) {
        int tn = T - t0 < tc ? T - t0 : tc;
        qj.X = X + (size_t)t0 * K;
        qj.T = tn;
        if (nthr > 1 && tn >= QX_PARALLEL_MIN_T) sp_pool_run(pool, qx_task, &qj);
        else qx_task(&qj, 0, 1);
        for (int m = 0; m < n; m++) {
            job.c[m].T = tn;
            job.c[m].Y = Y[m] + (size_t)t0 * W[m]->n;
        }
        atomic_store(&job.next_chunk, 0);
        sp_pool_run(pool, qmm_task, &job);
    }
}

void sp_matmul_quant(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W, sp_cpu_tier tier) {
    SP_ASSERT(sp_mat_check(W, "sp_matmul", NULL) == 0 && sp_dtype_is_quant(W->dt));
    if (T <= 0 || W->n <= 0) return;
    sp_matmul_quant_multi(pool, &Y, X, T, &W, 1, tier);
}

/* ---- load-time repacks (layouts in quant_internal.h) --------------------------------------- */
size_t sp_mat_pack_bytes(const sp_mat *W) {
    if (W->n <= 0 || !W->data) return 0;
    if (!(W->dt == SP_DT_Q4_0 && W->k % 32 == 0) &&
        !((W->dt == SP_DT_Q4_K || W->dt == SP_DT_Q6_K || sp_lowbit_packs(W->dt)) && W->k % SP_QK_K == 0))
        return 0;
#if defined(__x86_64__) || defined(__i386__)
    if (sp_lowbit_packs(W->dt))
        return qmm_pick(sp_cpu_level(), W->dt) == sp_qmm_rows_lowbit_avx512 ? kx_bytes(W->n, kx_lowbit_row_bytes(W->dt, W->k)) : 0;
    if (qmm_pick(sp_cpu_level(), W->dt) == sp_qmm_rows_avx512)
        return W->dt == SP_DT_Q4_0   ? (size_t)W->n * q4p_row_bytes(W->k)
               : W->dt == SP_DT_Q4_K ? kx_bytes(W->n, q4kx_row_bytes(W->k))
                                     : kx_bytes(W->n, sp_dtype_row_bytes(W->dt, (size_t)W->k));
#endif
    return 0;
}

static inline uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

#define LO4_64 0x0F0F0F0F0F0F0F0Full

/* Q4_K in groups of 16 rows (quant_internal.h). Sub-block j's 32 nibbles are the low (even j) or
 * high (odd j) nibbles of the file's qs bytes 32 (j / 2) .. + 31; eight output bytes at a time
 * take elements l .. l + 7 (low nibbles) and 16 + l .. (high nibbles), l = 0 or 8, and go out as
 * two int32 lanes, for i = l / 4 and l / 4 + 1. src: d, dmin, the 12 scale bytes (Q4_K and
 * Q5_K alike), qs: the 128 nibble bytes. */
static void q4kx_put(uint8_t *dst, int r, const uint8_t *src, const uint8_t *qs) {
    memcpy(dst + 2 * r, src, 2), memcpy(dst + 32 + 2 * r, src + 2, 2);
    uint64_t sc8, m8;
    q4k_scales8(src + 4, &sc8, &m8);
    for (int j = 0; j < 8; j++) {
        dst[64 + 16 * j + r] = (uint8_t)(sc8 >> 8 * j);
        dst[192 + 32 * (j / 2) + 2 * r + j % 2] = (uint8_t)(m8 >> 8 * j);
        const uint8_t *q = qs + 32 * (j / 2);
        for (int l = 0; l < 16; l += 8) {
            uint64_t a = ld64(q + l), h = ld64(q + 16 + l);
            uint64_t v = j % 2 == 0 ? (a & LO4_64) | (h & LO4_64) << 4 : (a >> 4 & LO4_64) | (h & ~LO4_64);
            uint32_t v0 = (uint32_t)v, v1 = (uint32_t)(v >> 32);
            memcpy(dst + 320 + 64 * (4 * j + l / 4) + 4 * r, &v0, 4);
            memcpy(dst + 320 + 64 * (4 * j + l / 4 + 1) + 4 * r, &v1, 4);
        }
    }
}

/* Q5_K's fifth bits (quant_internal.h): bit j of qh[l] is element 32j + l's */
static void q5kx_put_h(uint8_t *dst, int r, const uint8_t *qh) {
    for (int j = 0; j < 8; j++)
        for (int k = 0; k < 4; k++) {
            uint8_t v = 0;
            for (int i = 0; i < 4; i++)
                v |= (uint8_t)((qh[4 * i + k] >> j & 1) << i | (qh[16 + 4 * i + k] >> j & 1) << (4 + i));
            dst[Q5KX_H + 64 * j + 4 * r + k] = v;
        }
}

static void pack_q4_K(const sp_mat *W, uint8_t *dst) {
    const int nsb = W->k / SP_QK_K, q5 = W->dt == SP_DT_Q5_K;
    const size_t wrow = sp_dtype_row_bytes(W->dt, (size_t)W->k), bb = q5 ? 176 : 144, rec = kx_record_bytes(W->dt);
    for (int g = 0; g < (W->n + KX_ROWS - 1) / KX_ROWS; g++)
        for (int b = 0; b < nsb; b++, dst += rec) {
            memset(dst, 0, rec);
            for (int r = 0; r < KX_ROWS && KX_ROWS * g + r < W->n; r++) {
                const uint8_t *src = (const uint8_t *)W->data + (size_t)(KX_ROWS * g + r) * wrow + bb * b;
                q4kx_put(dst, r, src, src + (q5 ? 48 : 16));
                if (q5) q5kx_put_h(dst, r, src + 16);
            }
        }
}

/* Q3_K in groups of 16 rows (quant_internal.h): element e = 128h + 32j + l has its low 2 bits
 * at bits 2j of qs[32h + l] and its third bit at bit e / 32 of hmask[l] */
static void pack_q3_K(const sp_mat *W, uint8_t *dst) {
    const int nsb = W->k / SP_QK_K;
    const size_t wrow = sp_dtype_row_bytes(W->dt, (size_t)W->k);
    for (int G = 0; G < (W->n + KX_ROWS - 1) / KX_ROWS; G++)
        for (int b = 0; b < nsb; b++, dst += Q3KX_SB_BYTES) {
            memset(dst, 0, Q3KX_SB_BYTES);
            for (int r = 0; r < KX_ROWS && KX_ROWS * G + r < W->n; r++) {
                const uint8_t *src = (const uint8_t *)W->data + (size_t)(KX_ROWS * G + r) * wrow + (size_t)110 * b;
                int8_t sc[16];
                sp_q3_K_scales(src + 96, sc);
                memcpy(dst + Q3KX_D + 2 * r, src + 108, 2);
                for (int e = 0; e < 256; e++) {
                    int g = e / 16, s = e % 16 / 4, k = e % 4, l = e % 32;
                    int lo = src[32 + 32 * (e / 128) + l] >> (2 * (e % 128 / 32)) & 3, hb = src[l] >> (e / 32) & 1;
                    dst[64 * g + 4 * r + k] |= (uint8_t)(lo << 2 * s);
                    dst[Q3KX_H + 64 * (g / 2) + 4 * r + k] |= (uint8_t)(hb << (4 * (g % 2) + s));
                }
                for (int g = 0; g < 16; g++) dst[Q3KX_SC + 16 * g + r] = (uint8_t)sc[g];
            }
        }
}

/* IQ4_XS in groups of 16 rows (quant_internal.h): sub-block j's 16 bytes are laid out as an
 * IQ4_NL block's (element l < 16 the low nibble of byte l, 16 + l its high nibble) */
static void pack_iq4_xs(const sp_mat *W, uint8_t *dst) {
    const int nsb = W->k / SP_QK_K;
    const size_t wrow = sp_dtype_row_bytes(W->dt, (size_t)W->k);
    for (int G = 0; G < (W->n + KX_ROWS - 1) / KX_ROWS; G++)
        for (int b = 0; b < nsb; b++, dst += IQ4XSX_SB_BYTES) {
            memset(dst, 0, IQ4XSX_SB_BYTES);
            for (int r = 0; r < KX_ROWS && KX_ROWS * G + r < W->n; r++) {
                const uint8_t *src = (const uint8_t *)W->data + (size_t)(KX_ROWS * G + r) * wrow + (size_t)136 * b;
                unsigned sh = src[2] | (unsigned)src[3] << 8;
                memcpy(dst + IQ4XSX_D + 2 * r, src, 2);
                for (int j = 0; j < 8; j++) {
                    int ls = (src[4 + j / 2] >> (4 * (j % 2)) & 15) | (int)(sh >> (2 * j) & 3) << 4;
                    dst[IQ4XSX_SC + 16 * j + r] = (uint8_t)(int8_t)(ls - 32);
                    /* the file's sub-block bytes are already the packed nibble pairs, 4 at a time */
                    for (int i = 0; i < 4; i++) memcpy(dst + 64 * (4 * j + i) + 4 * r, src + 8 + 16 * j + 4 * i, 4);
                }
            }
        }
}

/* Q6_K in groups of 16 rows (quant_internal.h). Group g's 16 elements share the file's half
 * h = g / 8 and quarter part = g % 8 / 2, and are the 16 consecutive l = 16 (g % 2) + 0..15:
 * their low 4 bits the low (part < 2) or high nibbles of ql bytes 64h + 32 (part & 1) + l, their
 * top 2 bits bits 2 part, + 1 of qh bytes 32h + l (docs/QUANT.md) — eight at a time below. */
static void pack_q6_K(const sp_mat *W, uint8_t *dst) {
    const int nsb = W->k / SP_QK_K;
    const size_t wrow = sp_dtype_row_bytes(W->dt, (size_t)W->k);
    for (int G = 0; G < (W->n + KX_ROWS - 1) / KX_ROWS; G++)
        for (int b = 0; b < nsb; b++, dst += Q6KX_SB_BYTES) {
            memset(dst, 0, Q6KX_SB_BYTES);
            for (int r = 0; r < KX_ROWS && KX_ROWS * G + r < W->n; r++) {
                const uint8_t *src = (const uint8_t *)W->data + (size_t)(KX_ROWS * G + r) * wrow + (size_t)210 * b;
                memcpy(dst + Q6KX_D + 2 * r, src + 208, 2);
                for (int g = 0; g < 16; g++) {
                    int h = g / 8, part = g % 8 / 2, l = 16 * (g % 2);
                    const uint8_t *ql = src + 64 * h + 32 * (part & 1) + l, *qh = src + 128 + 32 * h + l;
                    uint64_t n[2], t[2]; /* elements 8s .. 8s + 7 of the group: low 4 bits, top 2 bits */
                    for (int s = 0; s < 2; s++) {
                        uint64_t lb = ld64(ql + 8 * s);
                        n[s] = part < 2 ? lb & LO4_64 : lb >> 4 & LO4_64;
                        t[s] = ld64(qh + 8 * s) >> (2 * part) & 0x0303030303030303ull;
                    }
                    uint32_t l0 = (uint32_t)n[0] | (uint32_t)(n[0] >> 32) << 4, l1 = (uint32_t)n[1] | (uint32_t)(n[1] >> 32) << 4;
                    uint32_t hb = (uint32_t)t[1] | (uint32_t)(t[1] >> 32) << 2 | (uint32_t)t[0] << 4 | (uint32_t)(t[0] >> 32) << 6;
                    uint8_t *q = dst + 192 * g + 4 * r;
                    memcpy(q, &l0, 4), memcpy(q + 64, &l1, 4), memcpy(q + 128, &hb, 4);
                    dst[Q6KX_SC + 16 * g + r] = src[192 + g];
                }
            }
        }
}

void sp_mat_pack(const sp_mat *W, void *dst) {
    if (W->dt == SP_DT_Q4_K || W->dt == SP_DT_Q5_K || W->dt == SP_DT_Q6_K || W->dt == SP_DT_Q3_K || W->dt == SP_DT_IQ4_XS) {
        (W->dt == SP_DT_Q6_K ? pack_q6_K : W->dt == SP_DT_Q3_K ? pack_q3_K : W->dt == SP_DT_IQ4_XS ? pack_iq4_xs : pack_q4_K)(W, dst);
        return;
    }
    const int nb = W->k / 32;
    const size_t wrow = sp_dtype_row_bytes(W->dt, (size_t)W->k), prow = q4p_row_bytes(W->k);
    const size_t sbytes = 2 * (size_t)q4p_scale_slots(W->k);
    for (int n = 0; n < W->n; n++) {
        const uint8_t *src = (const uint8_t *)W->data + (size_t)n * wrow;
        uint8_t *row = (uint8_t *)dst + (size_t)n * prow;
        memset(row, 0, prow);
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = src + (size_t)b * 18, *qs = blk + 2;
            memcpy(row + 2 * (size_t)b, blk, 2);
            uint8_t *pair = row + sbytes + 32 * (size_t)(b / 2);
            for (int i = 0; i < 32; i++) {
                int e = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
                pair[i] |= (uint8_t)(e << (4 * (b & 1)));
            }
        }
    }
}

void sp_matmul_quant_ref(float *Y, const float *X, int T, const sp_mat *W) {
    size_t wrow = sp_dtype_row_bytes(W->dt, (size_t)W->k);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < W->n; n++)
            Y[(size_t)t * W->n + n] =
                (float)sp_dot_quant_ref((const uint8_t *)W->data + (size_t)n * wrow, W->dt, X + (size_t)t * W->k, W->k);
}
