/* gemm_avx512.c — the training GEMM tile (gemm_tile.h) on AVX-512: 4 rows × 4 zmm registers. */
#include <immintrin.h>

#include "train/gemm_tile.h"

void sp_tr_gemm_4x64_avx512(float *C, int ldc, const float *A, size_t sar, size_t sak, const float *B, int ldb, int k0,
                         int k1) {
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_loadu_ps(C + (size_t)r * ldc + 16 * v);
    for (int k = k0; k < k1; k++) {
        const float *b = B + (size_t)k * ldb;
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32),
               b3 = _mm512_loadu_ps(b + 48);
        for (int r = 0; r < 4; r++) {
            __m512 a = _mm512_set1_ps(A[r * sar + (size_t)k * sak]);
            acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_mul_ps(a, b0));
            acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_mul_ps(a, b1));
            acc[r][2] = _mm512_add_ps(acc[r][2], _mm512_mul_ps(a, b2));
            acc[r][3] = _mm512_add_ps(acc[r][3], _mm512_mul_ps(a, b3));
        }
    }
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(C + (size_t)r * ldc + 16 * v, acc[r][v]);
}
