/* gemm_avx2.c — the training GEMM tile (gemm_tile.h) on AVX2: the 64 columns in two halves of
 * 4 rows × 4 ymm registers (each half runs the whole k range; per element the order is the same). */
#include <immintrin.h>

#include "train/gemm_tile.h"

void sp_tr_gemm_4x64_avx2(float *C, int ldc, const float *A, size_t sar, size_t sak, const float *B, int ldb, int k0,
                       int k1) {
    for (int h = 0; h < 64; h += 32) {
        __m256 acc[4][4];
        for (int r = 0; r < 4; r++)
            for (int v = 0; v < 4; v++) acc[r][v] = _mm256_loadu_ps(C + (size_t)r * ldc + h + 8 * v);
        for (int k = k0; k < k1; k++) {
            const float *b = B + (size_t)k * ldb + h;
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16),
                   b3 = _mm256_loadu_ps(b + 24);
            for (int r = 0; r < 4; r++) {
                __m256 a = _mm256_set1_ps(A[r * sar + (size_t)k * sak]);
                acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(a, b0));
                acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(a, b1));
                acc[r][2] = _mm256_add_ps(acc[r][2], _mm256_mul_ps(a, b2));
                acc[r][3] = _mm256_add_ps(acc[r][3], _mm256_mul_ps(a, b3));
            }
        }
        for (int r = 0; r < 4; r++)
            for (int v = 0; v < 4; v++) _mm256_storeu_ps(C + (size_t)r * ldc + h + 8 * v, acc[r][v]);
    }
}
