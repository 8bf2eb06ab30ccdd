/* ops.c — the float training ops (ops_impl.h): GEMMs on gemm.c, attention on the pool, the GELU
 * of the inference kernels. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/ops.h"

#define real float
#define MM_NT(pool, C, A, B, M, K, N) sp_tr_gemm_nt(pool, C, A, B, M, K, N)
#define MM_NN_ACC(pool, C, A, B, M, K, N) sp_tr_gemm_nn_acc(pool, C, A, B, M, K, N)
#define MM_TN_ACC(pool, C, A, B, M, K, N) sp_tr_gemm_tn_acc(pool, C, A, B, M, K, N)
#define EXP expf
#define COS cosf
#define SIN sinf
#define FABS fabsf
#define TANH tanhf
#define GELU_TANH(x) sp_gelu_tanh(x)
#include "train/ops_impl.h"
