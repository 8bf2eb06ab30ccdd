/* ops.h — forward/backward ops for training DFlash / DSpark drafters (docs/DFLASH.md §5, docs/DSPARK.md).
 *
 * Each op exists twice with one source (ops_impl.h): tr_NAME in float for the trainer (matmuls
 * threaded on an sp_pool) and tr_NAME_f64 in double with naive loops, which the tests use for
 * central finite differences in double precision and as the reference the float path is
 * compared with. Backward passes accumulate into gradients (see ops_impl.h). */
#ifndef SPECULA_TRAIN_OPS_H
#define SPECULA_TRAIN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"

/* Threaded float GEMMs (row-major) used by the float ops and the trainer:
 *   tr_gemm_nt:     C[M,N]  = A[M,K] · B[N,K]ᵀ   (sp_matmul: batch-invariant)
 *   tr_gemm_nn_acc: C[M,N] += A[M,K] · B[K,N]
 *   tr_gemm_tn_acc: C[M,N] += A[K,M]ᵀ · B[K,N] */
void tr_gemm_nt(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N);
void tr_gemm_nn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N);
void tr_gemm_tn_acc(sp_pool *pool, float *C, const float *A, const float *B, int M, int K, int N);

#define real float
#define OP(name) tr_##name
#include "ops_decl.h"
#undef real
#undef OP
#define real double
#define OP(name) tr_##name##_f64
#include "ops_decl.h"
#undef real
#undef OP

#endif
