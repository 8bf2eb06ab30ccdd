/* bench_train.c — the matrix products of drafter training (src/train/gemm.c) against this
 * machine's measured GEMM peak (OpenBLAS sgemm on the same threads), at the shapes of a DSpark
 * drafter for a Qwen3-0.6B-shaped target (H 1024, I 3072, KVH·D 1024). Prints GFLOP/s and the
 * ratio to the peak; `specula train` prints the GFLOP/s a whole step reaches. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "core/pool.h"
#include "train/ops.h"

static double gflops(double flop, double ms) { return flop / (ms / 1000) / 1e9; }

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    sp_pool *pool = sp_pool_create(threads);
    int nt = sp_pool_size(pool);
    openblas_set_num_threads(nt);
    struct { const char *what; int M, K, N; } shapes[] = {
        {"k/v proj  (S=1038 ctx+block rows)", 1038, 1024, 1024},
        {"MLP up    (T=112 block rows)", 112, 1024, 3072},
        {"LM head   (T=112, V=151936)", 112, 1024, 151936},
    };
    printf("threads %d\n", nt);
    /* peak: OpenBLAS sgemm 1024^3 */
    int P = 1024;
    float *a = malloc(sizeof(float) * P * P), *b = malloc(sizeof(float) * P * P), *c = malloc(sizeof(float) * P * P);
    for (int i = 0; i < P * P; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = sp_time_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, P, P, P, 1.0f, a, P, b, P, 0.0f, c, P);
        double t = sp_time_ms() - t0;
        if (t < best) best = t;
    }
    double peak = gflops(2.0 * P * P * P, best);
    printf("measured GEMM peak (OpenBLAS sgemm %d^3): %.1f GFLOP/s\n", P, peak);
    free(a); free(b); free(c);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s].M, K = shapes[s].K, N = shapes[s].N;
        float *A = calloc((size_t)M * K, 4), *W = calloc((size_t)N * K, 4), *Y = calloc((size_t)M * N, 4);
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)(i % 13) * 0.01f;
        for (size_t i = 0; i < (size_t)N * K; i++) W[i] = (float)(i % 11) * 0.01f;
        double flop = 2.0 * M * K * N, t_nt = 1e30, t_nn = 1e30, t_tn = 1e30;
        float *dX = calloc((size_t)M * K, 4), *dW = calloc((size_t)N * K, 4);
        for (int r = 0; r < 2; r++) {
            double t0 = sp_time_ms();
            sp_tr_gemm_nt(pool, Y, A, W, M, K, N);            /* forward  Y = X·Wᵀ */
            double t1 = sp_time_ms();
            sp_tr_gemm_nn_acc(pool, dX, Y, W, M, N, K);       /* dX += dY·W */
            double t2 = sp_time_ms();
            sp_tr_gemm_tn_acc(pool, dW, Y, A, N, M, K);       /* dW += dYᵀ·X */
            double t3 = sp_time_ms();
            t_nt = t1 - t0 < t_nt ? t1 - t0 : t_nt;
            t_nn = t2 - t1 < t_nn ? t2 - t1 : t_nn;
            t_tn = t3 - t2 < t_tn ? t3 - t2 : t_tn;
        }
        printf("%-36s fwd X·Wᵀ %6.1f GFLOP/s (%3.0f%%)  dX %6.1f (%3.0f%%)  dW %6.1f (%3.0f%%)\n", shapes[s].what,
               gflops(flop, t_nt), 100 * gflops(flop, t_nt) / peak, gflops(flop, t_nn), 100 * gflops(flop, t_nn) / peak,
               gflops(flop, t_tn), 100 * gflops(flop, t_tn) / peak);
        free(A); free(W); free(Y); free(dX); free(dW);
    }
    sp_pool_free(pool);
    return 0;
}
