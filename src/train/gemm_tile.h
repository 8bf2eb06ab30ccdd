/* gemm_tile.h — the 4 × 64 accumulation tile of the training GEMMs (gemm.c), one per SIMD tier:
 *   C[r, j] += A[r·sar + k·sak] · B[k·ldb + j]   for r < 4, j < 64, k = k0 .. k1-1 in order,
 * each step a product and then a sum (no fma), so every tier gives the same bits. The
 * *_avx512.c / *_avx2.c files are compiled with that instruction set and entered only when
 * sp_cpu_level() (src/core/cpu.h) selects it. */
#ifndef SPECULA_TRAIN_GEMM_TILE_H
#define SPECULA_TRAIN_GEMM_TILE_H

#include <stddef.h>

#define TR_GEMM_MR 4
#define TR_GEMM_NR 64

typedef void (*tr_gemm_tile_fn)(float *C, int ldc, const float *A, size_t sar, size_t sak, const float *B, int ldb,
                                int k0, int k1);
void sp_tr_gemm_4x64_avx512(float *C, int ldc, const float *A, size_t sar, size_t sak, const float *B, int ldb, int k0,
                         int k1);
void sp_tr_gemm_4x64_avx2(float *C, int ldc, const float *A, size_t sar, size_t sak, const float *B, int ldb, int k0,
                       int k1);

#endif
