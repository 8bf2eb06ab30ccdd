/* gemm.c — the float matrix products of training, threaded on the pool.
 *
 * Every output element is computed by exactly one share, summing in a fixed order, so results
 * do not depend on the thread count (training resumes bit-identically on any machine size with
 * the same binary). The NT product is sp_matmul (the batch-invariant inference kernel); the
 * two accumulating products of backward passes are tiled loops the compiler vectorises:
 * a tile of RB output rows × CB output columns is kept hot while the shared dimension streams. */
#include "train/ops.h"

#include "kernels/kernels.h"

enum { RB = 8, CB = 512 };

void tr_gemm_nt(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N) {
    sp_mat w = {.data = B, .dt = SP_DT_F32, .n = N, .k = K};
    sp_matmul(pool, C, A, M, &w);
}

typedef struct {
    float *C;
    const float *A, *B;
    int M, K, N;
} gemm_job;

/* C[M,N] += A[M,K] · B[K,N]; shares split the columns of C */
static void nn_share(void *ctx, int share, int n_shares) {
    const gemm_job *g = ctx;
    int c0, c1;
    sp_pool_split(g->N, 16, share, n_shares, &c0, &c1);
    for (int j0 = c0; j0 < c1; j0 += CB) {
        int jn = c1 - j0 < CB ? c1 - j0 : CB;
        for (int i0 = 0; i0 < g->M; i0 += RB) {
            int in = g->M - i0 < RB ? g->M - i0 : RB;
            for (int k = 0; k < g->K; k++) {
                const float *b = g->B + (size_t)k * g->N + j0;
                for (int ii = 0; ii < in; ii++) {
                    float a = g->A[(size_t)(i0 + ii) * g->K + k];
                    float *c = g->C + (size_t)(i0 + ii) * g->N + j0;
                    for (int j = 0; j < jn; j++) c[j] += a * b[j];
                }
            }
        }
    }
}

/* C[M,N] += A[K,M]ᵀ · B[K,N]; shares split the rows of C */
static void tn_share(void *ctx, int share, int n_shares) {
    const gemm_job *g = ctx;
    int r0, r1;
    sp_pool_split(g->M, RB, share, n_shares, &r0, &r1);
    for (int j0 = 0; j0 < g->N; j0 += CB) {
        int jn = g->N - j0 < CB ? g->N - j0 : CB;
        for (int i0 = r0; i0 < r1; i0 += RB) {
            int in = r1 - i0 < RB ? r1 - i0 : RB;
            for (int k = 0; k < g->K; k++) {
                const float *b = g->B + (size_t)k * g->N + j0;
                const float *arow = g->A + (size_t)k * g->M + i0;
                for (int ii = 0; ii < in; ii++) {
                    float a = arow[ii];
                    float *c = g->C + (size_t)(i0 + ii) * g->N + j0;
                    for (int j = 0; j < jn; j++) c[j] += a * b[j];
                }
            }
        }
    }
}

void tr_gemm_nn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N) {
    gemm_job g = {C, A, B, M, K, N};
    sp_pool_run(pool, nn_share, &g);
}

void tr_gemm_tn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N) {
    gemm_job g = {C, A, B, M, K, N};
    sp_pool_run(pool, tn_share, &g);
}
