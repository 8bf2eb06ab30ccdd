/* ops.c — the float instantiation of the training ops (ops_impl.h); matmuls go to gemm.c. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/ops.h"

#define real float
#define OP(name) tr_##name
#define MM_NT(pool, C, A, B, M, K, N) tr_gemm_nt(pool, C, A, B, M, K, N)
#define MM_NN_ACC(pool, C, A, B, M, K, N) tr_gemm_nn_acc(pool, C, A, B, M, K, N)
#define MM_TN_ACC(pool, C, A, B, M, K, N) tr_gemm_tn_acc(pool, C, A, B, M, K, N)
#define EXP expf
#define COS cosf
#define SIN sinf
#define FABS fabsf
#define TANH tanhf
#include "train/ops_impl.h"
