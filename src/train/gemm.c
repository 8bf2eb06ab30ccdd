/* gemm.c — the float matrix products of training, threaded on the pool.
 *
 * Every output element is computed by exactly one share, summing in a fixed order, so results
 * do not depend on the thread count (training resumes bit-identically on any machine size with
 * the same binary). The NT product is sp_matmul (the batch-invariant inference kernel); the
 * accumulating NN / TN products of backward passes share one register-blocked kernel.
 * (Transposing operands into scratch and reusing sp_matmul was measured slower at training
 * shapes: bench/bench_train.c.) */
#include <string.h>

#include "train/ops.h"

#include "core/cpu.h"
#include "kernels/kernels.h"
#include "train/gemm_tile.h"


void sp_tr_gemm_nt(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N) {
    sp_mat w = {.data = B, .dt = SP_DT_F32, .n = N, .k = K};
    sp_matmul(pool, C, A, M, &w);
}

typedef struct {
    float *C;
    const float *A, *B;
    int M, K, N;
} gemm_job;

/* ---- register-blocked accumulation: C[i, j] += Σ_k a(i, k) · B[k, j] ----------------------
 * a(i, k) = A[i·sar + k·sak] covers both A[M,K] (NN) and A[K,M]ᵀ (TN). A 4 × 64 tile of C lives
 * in vector accumulators while k runs over a KB-deep panel of B (kept in L2). Every element is
 * c += a · b (a product, then a sum: no fma) in k order, on every tier: the AVX-512 and AVX2
 * tiles (gemm_avx512.c, gemm_avx2.c) and the portable one below give the same bits. */
enum { MR = TR_GEMM_MR, NR = TR_GEMM_NR, KB = 256 };

static void kernel_4x64_portable(float *C, int ldc, const float *A, size_t sar, size_t sak, const float *B, int ldb,
                                 int k0, int k1) {
    float acc[MR][NR];
    for (int r = 0; r < MR; r++) memcpy(acc[r], C + (size_t)r * ldc, sizeof acc[r]);
    for (int k = k0; k < k1; k++) {
        const float *b = B + (size_t)k * ldb;
        for (int r = 0; r < MR; r++) {
            float a = A[r * sar + (size_t)k * sak];
            for (int j = 0; j < NR; j++) acc[r][j] += a * b[j];
        }
    }
    for (int r = 0; r < MR; r++) memcpy(C + (size_t)r * ldc, acc[r], sizeof acc[r]);
}

static tr_gemm_tile_fn tile_kernel(void) {
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: return sp_tr_gemm_4x64_avx512;
    case SP_CPU_AVX2: return sp_tr_gemm_4x64_avx2;
#endif
    default: return kernel_4x64_portable;
    }
}

/* the rows [i0, i1) × columns [j0, j1) of C, over all k, in a fixed order per element */
static void block_acc(float *C, int ldc, const float *A, size_t sar, size_t sak, const float *B, int ldb, int i0,
                      int i1, int j0, int j1, int K) {
    const tr_gemm_tile_fn kernel_4x64 = tile_kernel();
    for (int kb = 0; kb < K; kb += KB) {
        int ke = kb + KB < K ? kb + KB : K;
        for (int jt = j0; jt < j1; jt += NR) {
            int jn = j1 - jt < NR ? j1 - jt : NR;
            for (int it = i0; it < i1; it += MR) {
                int in = i1 - it < MR ? i1 - it : MR;
                if (in == MR && jn == NR) {
                    kernel_4x64(C + (size_t)it * ldc + jt, ldc, A + (size_t)it * sar, sar, sak, B + jt, ldb, kb, ke);
                    continue;
                }
                for (int r = it; r < it + in; r++)
                    for (int k = kb; k < ke; k++) {
                        float a = A[(size_t)r * sar + (size_t)k * sak];
                        const float *b = B + (size_t)k * ldb + jt;
                        float *c = C + (size_t)r * ldc + jt;
                        for (int j = 0; j < jn; j++) c[j] += a * b[j];
                    }
            }
        }
    }
}

/* NN: shares split the columns of C (in whole 64-wide tiles) */
static void nn_blocked(void *ctx, int share, int n_shares) {
    const gemm_job *g = ctx;
    int c0, c1;
    sp_pool_split(g->N, NR, share, n_shares, &c0, &c1);
    if (c1 > c0) block_acc(g->C, g->N, g->A, (size_t)g->K, 1, g->B, g->N, 0, g->M, c0, c1, g->K);
}

/* TN: shares split the rows of C (in whole 4-row tiles) */
static void tn_blocked(void *ctx, int share, int n_shares) {
    const gemm_job *g = ctx;
    int r0, r1;
    sp_pool_split(g->M, MR, share, n_shares, &r0, &r1);
    if (r1 > r0) block_acc(g->C, g->N, g->A, 1, (size_t)g->M, g->B, g->N, r0, r1, 0, g->N, g->K);
}

void sp_tr_gemm_nn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N) {
    gemm_job g = {C, A, B, M, K, N};
    sp_pool_run(pool, nn_blocked, &g);
}

void sp_tr_gemm_tn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N) {
    gemm_job g = {C, A, B, M, K, N};
    sp_pool_run(pool, tn_blocked, &g);
}
