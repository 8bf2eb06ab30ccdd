/* matmul.c — Y[T, N] = X[T, K] · W[N, K]ᵀ with f32 activations and f32 / bf16 / f16 weights.
 *
 * Every output Y[t, n] is the canonical 16-lane dot product of kernels_internal.h: weights are
 * widened exactly to f32 (bf16: the u16 becomes the high half of the f32) and no activation
 * is ever rounded. Register blocking (tokens × rows sharing each loaded X and W chunk), token
 * chunking for cache, the thread split and the instruction set change only which outputs are
 * computed together, never the float operations inside one output, so results are
 * bit-identical whatever T, the token's index, the thread count or the tier.
 *
 * Threads claim chunks of rows of W (N, never K) from a shared counter and run the tiles of
 * the tier in use: matmul_avx512.c, matmul_avx2.c, matmul_neon.c, or the portable scalar loop
 * here (the reference path, same order, one output at a time).
 * A bf16 matrix with bf16_dot set takes the bf16-dot order instead (kernels_internal.h):
 * matmul_bf16dot.c and its tier files, with the same row split.
 * Not here: K blocking (would change the summation order); quantized weights go to
 * quant_matmul.c. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/prof.h"
#include "kernels_internal.h"
#include "quant_internal.h"

/* chunks per thread: threads claim row chunks from a shared counter, so a thread the OS
 * keeps off a core (the machine is shared) costs its chunks, not the whole call */
#define MM_CHUNKS_PER_THREAD 8

static float w_at(const void *W, sp_dtype dt, size_t i) {
    switch (dt) {
    case SP_DT_F32: return ((const float *)W)[i];
    case SP_DT_BF16: return sp_bf16_to_f32(((const uint16_t *)W)[i]);
    case SP_DT_F16: return sp_f16_to_f32(((const uint16_t *)W)[i]);
    default: SP_ASSERT(!"sp_matmul: weight dtype must be f32, bf16 or f16");
    }
    return 0;
}

/* ---- reference: double accumulation in k order ------------------------------------- */
void sp_matmul_ref(float *Y, const float *X, int T, const sp_mat *W) {
    if (sp_dtype_is_quant(W->dt)) {
        sp_matmul_quant_ref(Y, X, T, W);
        return;
    }
    int N = W->n, K = W->k, dot = W->dt == SP_DT_BF16 && W->bf16_dot;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                float x = X[(size_t)t * K + k], w = w_at(W->data, W->dt, (size_t)n * K + k);
                if (dot) x = sp_bf16dot_round(x), w = sp_bf16dot_daz(w);
                s += (double)x * w;
            }
            Y[(size_t)t * N + n] = (float)s;
        }
}

/* ---- portable path: the canonical order with fmaf, one output at a time ------------- */
/* up to 16 weights from element offset off, as f32 */
static void w_chunk(float *dst, const void *W, sp_dtype dt, size_t off, int n) {
    if (dt == SP_DT_F32) {
        memcpy(dst, (const float *)W + off, (size_t)n * sizeof(float));
    } else if (dt == SP_DT_BF16) {
        for (int l = 0; l < n; l++) dst[l] = sp_bf16_to_f32(((const uint16_t *)W)[off + l]);
    } else {
        for (int l = 0; l < n; l++) dst[l] = sp_f16_to_f32(((const uint16_t *)W)[off + l]);
    }
}

static void mm_rows_portable(const sp_mm_ctx *c, int n0, int n1) {
    int K = c->K;
    for (int n = n0; n < n1; n++)
        for (int t = 0; t < c->T; t++) {
            const float *x = c->X + (size_t)t * K;
            float acc[16] = {0}, w[16];
            for (int k0 = 0; k0 < K; k0 += 16) {
                int m = K - k0 < 16 ? K - k0 : 16;
                w_chunk(w, c->W, c->dt, (size_t)n * K + k0, m);
                for (int l = 0; l < m; l++) acc[l] = fmaf(x[k0 + l], w[l], acc[l]);
            }
            c->Y[(size_t)t * c->N + n] = sp_hsum16(acc);
        }
}

/* Each thread claims row chunks until none is left, one chunk ahead so the current chunk's
 * last row block can prefetch the next. Which thread computes a row never changes its value
 * (see the file comment), so dynamic claiming keeps results fixed. */
static int mm_claim(sp_mm_ctx *c, int *n0, int *n1) {
    long a = (long)atomic_fetch_add_explicit(&c->next_chunk, 1, memory_order_relaxed) * c->chunk_rows;
    if (a >= c->N) {
        *n0 = *n1 = c->N;
        return 0;
    }
    *n0 = (int)a;
    *n1 = a + c->chunk_rows < c->N ? (int)a + c->chunk_rows : c->N;
    return 1;
}

/* rows [n0, n1) on the tier and numerics of the call */
static void mm_rows(const sp_mm_ctx *c, int n0, int n1, int f0, int f1, int cold) {
    (void)f0, (void)f1, (void)cold; /* only the AVX-512 f32-order rows use them */
    if (c->bf16dot) {
        switch (c->tier) {
#if defined(__x86_64__)
        case SP_CPU_AVX512: sp_mm_bf16dot_rows_avx512(c, n0, n1, c->bf16dot == 2); return;
        case SP_CPU_AVX2: sp_mm_bf16dot_rows_avx2(c, n0, n1); return;
#endif
#if defined(__aarch64__)
        case SP_CPU_NEON: sp_mm_bf16dot_rows_neon(c, n0, n1); return;
#endif
        default: sp_mm_bf16dot_rows_portable(c, n0, n1); return;
        }
    }
    switch (c->tier) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: sp_mm_rows_avx512(c, n0, n1, f0, f1, cold); return;
    case SP_CPU_AVX2: sp_mm_rows_avx2(c, n0, n1); return;
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: sp_mm_rows_neon(c, n0, n1); return;
#endif
    default: mm_rows_portable(c, n0, n1); return;
    }
}

static void mm_task(void *arg, int i, int n) {
    (void)i, (void)n;
    sp_mm_ctx *c = arg;
    int n0, n1, f0, f1;
    if (!mm_claim(c, &n0, &n1)) return;
    for (int cold = 1;; cold = 0) {
        int more = mm_claim(c, &f0, &f1);
        mm_rows(c, n0, n1, f0, f1, cold);
        if (!more) return;
        n0 = f0, n1 = f1;
    }
}

/* hw: 1 lets the AVX-512 tier use vdpbf16ps for a bf16-dot matrix when the processor has it */
static void mm_run(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W, sp_cpu_tier tier, int hw) {
    /* quantized weights: quant_matmul.c, on the same tier */
    if (sp_dtype_is_quant(W->dt)) {
        sp_matmul_quant(pool, Y, X, T, W, tier);
        return;
    }
    SP_ASSERT(W->dt == SP_DT_F32 || W->dt == SP_DT_BF16 || W->dt == SP_DT_F16);
    if (T <= 0 || W->n <= 0) return;
    int nthr = sp_pool_size(pool);
    int chunks = nthr > 1 ? MM_CHUNKS_PER_THREAD * nthr : 1;
    int rows = (W->n + chunks - 1) / chunks;
    rows = (rows + SP_MM_ROW_ALIGN - 1) / SP_MM_ROW_ALIGN * SP_MM_ROW_ALIGN;
    int dot = W->dt == SP_DT_BF16 && W->bf16_dot;
    if (dot && hw && tier == SP_CPU_AVX512 && (sp_cpu_features() & SP_CPU_HAS_AVX512_BF16)) dot = 2;
    sp_mm_ctx c = {Y, X, W->data, W->dt, T, W->n, W->k, tier, dot, rows, 0};
    atomic_init(&c.next_chunk, 0);
    sp_pool_run(pool, mm_task, &c);
}

void sp_matmul(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W) {
    int prof = sp_prof_enter_kernel(SP_PROF_MATMUL);
    mm_run(pool, Y, X, T, W, sp_cpu_level(), 1);
    sp_prof_leave(prof);
}

void sp_matmul_multi(sp_pool *pool, float *const *Y, const float *X, int T, const sp_mat *const *W, int n) {
    int prof = sp_prof_enter_kernel(SP_PROF_MATMUL);
    if (n > 1 && sp_matmul_quant_shares_x(W, n)) sp_matmul_quant_multi(pool, Y, X, T, W, n, sp_cpu_level());
    else
        for (int i = 0; i < n; i++) mm_run(pool, Y[i], X, T, W[i], sp_cpu_level(), 1);
    sp_prof_leave(prof);
}

void sp_matmul_tier(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W, sp_cpu_tier tier) {
    mm_run(pool, Y, X, T, W, tier, 1);
}

void sp_matmul_bf16dot_tier(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W, sp_cpu_tier tier,
                            int hw) {
    SP_ASSERT(W->dt == SP_DT_BF16 && W->bf16_dot);
    SP_ASSERT(!hw || (tier == SP_CPU_AVX512 && (sp_cpu_features() & SP_CPU_HAS_AVX512_BF16)));
    mm_run(pool, Y, X, T, W, tier, hw);
}

void sp_matmul_portable(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W) {
    mm_run(pool, Y, X, T, W, SP_CPU_SCALAR, 1);
}
