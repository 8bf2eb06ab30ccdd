/* ops_f64.c — the double twins of the training ops (ops_impl.h renamed by ops_f64_names.h:
 * sp_tr_linear_forward_f64, …) with naive matmuls: the reference the finite-difference tests
 * differentiate. Not used by the trainer. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/ops.h"
#include "train/ops_f64_names.h"

static void mm_nt(double *C, const double *A, const double *B, int M, int K, int N) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += A[(size_t)i * K + k] * B[(size_t)j * K + k];
            C[(size_t)i * N + j] = s;
        }
}
static void mm_nn_acc(double *C, const double *A, const double *B, int M, int K, int N) {
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++) C[(size_t)i * N + j] += A[(size_t)i * K + k] * B[(size_t)k * N + j];
}
static void mm_tn_acc(double *C, const double *A, const double *B, int M, int K, int N) {
    for (int k = 0; k < K; k++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * N + j] += A[(size_t)k * M + i] * B[(size_t)k * N + j];
}

#define real double
#define MM_NT(pool, C, A, B, M, K, N) ((void)(pool), mm_nt(C, A, B, M, K, N))
#define MM_NN_ACC(pool, C, A, B, M, K, N) ((void)(pool), mm_nn_acc(C, A, B, M, K, N))
#define MM_TN_ACC(pool, C, A, B, M, K, N) ((void)(pool), mm_tn_acc(C, A, B, M, K, N))
#define EXP exp
#define COS cos
#define SIN sin
#define FABS fabs
#define TANH tanh
#define GELU_TANH(x) (0.5 * (x) * (1 + tanh(SP_GELU_K * ((x) + SP_GELU_A * (x) * (x) * (x)))))
#include "train/ops_impl.h"
