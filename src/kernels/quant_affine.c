/* quant_affine.c — the affine 32-blocks with a scale and a minimum, value q · d + m: llama.cpp's
 * Q4_1 (4-bit) and QA8 (8-bit, the form MLX 8-bit checkpoints load into; docs/MLX-QUANT.md).
 * Their dot products run in the Q5_1 kernels' order (quant_internal.h). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels_internal.h"
#include "quant.h"
#include "quant_internal.h"

/* float → level: truncation of v + 0.5 clamped to 0..top (NaN gives 0) */
static unsigned level(float v, unsigned top) {
    if (!(v > 0)) return 0;
    return v >= (float)top ? top : (unsigned)v;
}

/* one block's min and step over 32 values with top + 1 levels (llama.cpp's Q4_1 rule) */
static void block_range(const float *x, unsigned top, float *min, float *d) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *min = lo;
    *d = (hi - lo) / (float)top;
}

void sp_quantize_row_q4_1(sp_block_q4_1 *dst, const float *x, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, x += 32) {
        float min, d;
        block_range(x, 15, &min, &d);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = sp_f32_to_f16(d);
        dst[b].m = sp_f32_to_f16(min);
        for (int j = 0; j < 16; j++)
            dst[b].qs[j] = (uint8_t)(level((x[j] - min) * id + 0.5f, 15) | level((x[j + 16] - min) * id + 0.5f, 15) << 4);
    }
}

void sp_dequantize_row_q4_1(float *y, const sp_block_q4_1 *src, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, y += 32) {
        float d = sp_f16_to_f32(src[b].d), m = sp_f16_to_f32(src[b].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(src[b].qs[j] & 15) * d + m;
            y[j + 16] = (float)(src[b].qs[j] >> 4) * d + m;
        }
    }
}

void sp_quantize_row_qa8(sp_block_qa8 *dst, const float *x, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, x += 32) {
        float min, d;
        block_range(x, 255, &min, &d);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = sp_f32_to_f16(d);
        dst[b].m = sp_f32_to_f16(min);
        for (int j = 0; j < 32; j++) dst[b].qs[j] = (uint8_t)level((x[j] - min) * id + 0.5f, 255);
    }
}

void sp_dequantize_row_qa8(float *y, const sp_block_qa8 *src, size_t n) {
    SP_ASSERT(n % 32 == 0);
    for (size_t b = 0; b < n / 32; b++, y += 32) {
        float d = sp_f16_to_f32(src[b].d), m = sp_f16_to_f32(src[b].m);
        for (int j = 0; j < 32; j++) y[j] = (float)src[b].qs[j] * d + m;
    }
}
