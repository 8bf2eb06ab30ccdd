/* quant.h — block-quantized weight types with llama.cpp's exact byte layouts (Q8_0, Q4_0,
 * Q5_0, Q5_1, Q4_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, and Q8_K for activations; and QA8, the 8-bit
 * affine blocks of MLX checkpoints), their row quantizers and dequantizers, and the
 * rules sp_matmul follows for quantized weights. docs/QUANT.md describes the layouts, the
 * quantizers and the order of operations of the dot products in our words.
 *
 * Quantizers follow llama.cpp's reference quantizers (what llama-quantize writes without an
 * importance matrix), dequantizers follow its definitions operation for operation, so a row
 * dequantizes to the same floats in both programs.
 *
 * sp_matmul (kernels.h) takes an sp_mat whose dt is any of these weight types: W[N, K] as N rows of sp_dtype_row_bytes(dt, K) bytes, each row K / block
 * blocks. K must be a multiple of the block (32, or 256 for the K-quants) and at most
 * SP_QUANT_MAX_K; sp_mat_check says so with an error at load time. The activation row is
 * quantized once per call the way llama.cpp does for that weight type (Q8_0 blocks for
 * the 32-blocks, Q8_K for the 256-blocks), the dot products run in integers per block,
 * and the block scales are applied in float in one fixed order per output, the same in
 * every SIMD tier — so results are batch-invariant and tier-invariant. */
#ifndef SPECULA_QUANT_H
#define SPECULA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#define SP_QK8_0 32 /* elements per Q8_0 block */
#define SP_QK4_0 32 /* elements per Q4_0 block */
#define SP_QK5_0 32 /* elements per Q5_0 block */
#define SP_QK_K 256 /* elements per K-quant super-block */
#define SP_K_SCALE_SIZE 12

/* the widest row (K) sp_matmul accepts for a quantized weight */
#define SP_QUANT_MAX_K 65536

/* value j = d · qs[j] */
typedef struct {
    uint16_t d; /* f16 scale */
    int8_t qs[SP_QK8_0];
} sp_block_q8_0;

/* value j = ((qs[j] & 15) − 8) · d and value j + 16 = ((qs[j] >> 4) − 8) · d, j < 16 */
typedef struct {
    uint16_t d; /* f16 scale */
    uint8_t qs[SP_QK4_0 / 2];
} sp_block_q4_0;

/* value j = (((qs[j] & 15) | h_j << 4) − 16) · d and value j + 16 = (((qs[j] >> 4) | h_{j+16} << 4)
 * − 16) · d, j < 16, where h_e is bit e of the little-endian 32-bit qh */
typedef struct {
    uint16_t d; /* f16 scale */
    uint8_t qh[4];
    uint8_t qs[SP_QK5_0 / 2];
} sp_block_q5_0;

/* 8 sub-blocks of 32 with 6-bit scale sc[j] and min m[j] packed in `scales`; values
 * 64c + l (l < 32) are the low nibbles of qs[32c + l] (sub-block 2c), values 64c + 32 + l the
 * high nibbles (sub-block 2c + 1); value = (d · sc) · q − (dmin · m) */
typedef struct {
    uint16_t d;    /* f16 super-scale of the sub-block scales */
    uint16_t dmin; /* f16 super-scale of the sub-block mins */
    uint8_t scales[SP_K_SCALE_SIZE];
    uint8_t qs[SP_QK_K / 2];
} sp_block_q4_K;

/* 16 groups of 16 with int8 scale; a 6-bit value is 4 bits in ql and 2 in qh (layout in
 * docs/QUANT.md); value = (d · scales[g]) · (q − 32) */
typedef struct {
    uint8_t ql[SP_QK_K / 2];
    uint8_t qh[SP_QK_K / 4];
    int8_t scales[SP_QK_K / 16];
    uint16_t d; /* f16 super-scale */
} sp_block_q6_K;

/* Q4_K's d, dmin, scales and nibbles, plus bit j of qh[l] the fifth bit of value 32j + l:
 * value = (d · sc) · q − (dmin · m), q in 0..31 */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[SP_K_SCALE_SIZE];
    uint8_t qh[SP_QK_K / 8];
    uint8_t qs[SP_QK_K / 2];
} sp_block_q5_K;

/* 16 groups of 16 with 6-bit scales s[g] (12 packed bytes, docs/QUANT.md); value
 * 128h + 32j + l (h < 2, j < 4, l < 32) has 2 bits at bit 2j of qs[32h + l] and its third bit
 * at bit 4h + j of hmask[l]; value = (d · (s[g] − 32)) · (q − 4 · (1 − bit)) */
typedef struct {
    uint8_t hmask[SP_QK_K / 8];
    uint8_t qs[SP_QK_K / 4];
    uint8_t scales[SP_K_SCALE_SIZE];
    uint16_t d;
} sp_block_q3_K;

/* 16 groups of 16, scales[g] = 4-bit scale | 4-bit min << 4; 2-bit values laid out as Q3_K's
 * qs; value = (d · sc) · q − (dmin · m) */
typedef struct {
    uint8_t scales[SP_QK_K / 16];
    uint8_t qs[SP_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} sp_block_q2_K;

/* Q5_0's layout with a min: value = d · q + m, q in 0..31 */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[SP_QK5_0 / 2];
} sp_block_q5_1;

/* llama.cpp's Q4_1: value j = (qs[j] & 15) · d + m and value j + 16 = (qs[j] >> 4) · d + m, j < 16 */
typedef struct {
    uint16_t d; /* f16 scale */
    uint16_t m; /* f16 min */
    uint8_t qs[SP_QK4_0 / 2];
} sp_block_q4_1;

/* 8-bit affine blocks (MLX's 8-bit groups, docs/MLX-QUANT.md): value j = qs[j] · d + m */
typedef struct {
    uint16_t d; /* f16 scale */
    uint16_t m; /* f16 min (MLX's bias) */
    uint8_t qs[32];
} sp_block_qa8;

/* the 16 values a 4-bit IQ4_NL / IQ4_XS index selects */
extern const int8_t sp_kvalues_iq4nl[16];

/* value j = d · T[qs[j] & 15], value j + 16 = d · T[qs[j] >> 4] (T = sp_kvalues_iq4nl) */
typedef struct {
    uint16_t d;
    uint8_t qs[SP_QK5_0 / 2];
} sp_block_iq4_nl;

/* 8 sub-blocks of 32, each laid out as an IQ4_NL block's nibbles, with 6-bit scale ls[j] = low
 * nibble j % 2 of scales_l[j / 2] | bits 2j, 2j + 1 of scales_h << 4; value = d · (ls − 32) · T[q] */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[SP_QK_K / 64];
    uint8_t qs[SP_QK_K / 2];
} sp_block_iq4_xs;

/* the activation side of the K-quant dot products: value j = d · qs[j]; bsums[g] is the sum
 * of qs[16g .. 16g + 16) */
typedef struct {
    float d;
    int8_t qs[SP_QK_K];
    int16_t bsums[SP_QK_K / 16];
} sp_block_q8_K;

_Static_assert(sizeof(sp_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(sp_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(sp_block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(sp_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(sp_block_q6_K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(sp_block_q8_K) == 292, "Q8_K block is 292 bytes");
_Static_assert(sizeof(sp_block_q5_K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(sp_block_q3_K) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(sp_block_q2_K) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(sp_block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(sp_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(sp_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");
_Static_assert(sizeof(sp_block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(sp_block_qa8) == 36, "QA8 block is 36 bytes");

/* ---- rows -----------------------------------------------------------------------------
 * n is the number of elements; it must be a multiple of the type's block (ASSERT in the
 * typed functions; an error from the generic ones). dst holds sp_dtype_row_bytes(dt, n)
 * bytes. The caller owns every buffer. */
void sp_quantize_row_q8_0(sp_block_q8_0 *dst, const float *x, size_t n);
void sp_quantize_row_q4_0(sp_block_q4_0 *dst, const float *x, size_t n);
void sp_quantize_row_q5_0(sp_block_q5_0 *dst, const float *x, size_t n);
void sp_quantize_row_q4_K(sp_block_q4_K *dst, const float *x, size_t n);
void sp_quantize_row_q6_K(sp_block_q6_K *dst, const float *x, size_t n);
void sp_quantize_row_q8_K(sp_block_q8_K *dst, const float *x, size_t n);
void sp_quantize_row_q5_K(sp_block_q5_K *dst, const float *x, size_t n);
void sp_quantize_row_q3_K(sp_block_q3_K *dst, const float *x, size_t n);
void sp_quantize_row_q2_K(sp_block_q2_K *dst, const float *x, size_t n);
void sp_quantize_row_q5_1(sp_block_q5_1 *dst, const float *x, size_t n);
void sp_quantize_row_iq4_nl(sp_block_iq4_nl *dst, const float *x, size_t n);
void sp_quantize_row_iq4_xs(sp_block_iq4_xs *dst, const float *x, size_t n);
void sp_quantize_row_q4_1(sp_block_q4_1 *dst, const float *x, size_t n);
void sp_quantize_row_qa8(sp_block_qa8 *dst, const float *x, size_t n);

void sp_dequantize_row_q8_0(float *y, const sp_block_q8_0 *src, size_t n);
void sp_dequantize_row_q4_0(float *y, const sp_block_q4_0 *src, size_t n);
void sp_dequantize_row_q5_0(float *y, const sp_block_q5_0 *src, size_t n);
void sp_dequantize_row_q4_K(float *y, const sp_block_q4_K *src, size_t n);
void sp_dequantize_row_q6_K(float *y, const sp_block_q6_K *src, size_t n);
void sp_dequantize_row_q8_K(float *y, const sp_block_q8_K *src, size_t n);
void sp_dequantize_row_q5_K(float *y, const sp_block_q5_K *src, size_t n);
void sp_dequantize_row_q3_K(float *y, const sp_block_q3_K *src, size_t n);
void sp_dequantize_row_q2_K(float *y, const sp_block_q2_K *src, size_t n);
void sp_dequantize_row_q5_1(float *y, const sp_block_q5_1 *src, size_t n);
void sp_dequantize_row_iq4_nl(float *y, const sp_block_iq4_nl *src, size_t n);
void sp_dequantize_row_iq4_xs(float *y, const sp_block_iq4_xs *src, size_t n);
void sp_dequantize_row_q4_1(float *y, const sp_block_q4_1 *src, size_t n);
void sp_dequantize_row_qa8(float *y, const sp_block_qa8 *src, size_t n);

/* Quantize n floats into dt (any quantized type). -1 with a message when dt is not a
 * quantized type or n is not a multiple of its block. */
int sp_quantize_row(void *dst, const float *x, sp_dtype dt, size_t n, sp_err *err);
/* Dequantize n elements of dt (any quantized type). -1 as above. */
int sp_dequantize_row(float *y, const void *src, sp_dtype dt, size_t n, sp_err *err);
/* n elements of any float (F32, F16, BF16, F64) or quantized type to f32 — e.g. one row of
 * an embedding table. -1 as above, or for a non-float type. */
int sp_row_to_f32(float *y, const void *src, sp_dtype dt, size_t n, sp_err *err);

/* 0 when W can go through sp_matmul (f32 / bf16 / f16, or a quantized type with K a multiple
 * of its block and K <= SP_QUANT_MAX_K, and data non-NULL); else -1 with a message naming
 * `what` (the tensor) and the rule. */
int sp_mat_check(const sp_mat *W, const char *what, sp_err *err);

/* Load-time repack. sp_mat_pack_bytes: the bytes of W's packed form for the tier sp_matmul
 * runs on this CPU, 0 when that tier has none (today: Q4_0, Q4_K and Q6_K weights on AVX-512
 * with VNNI, as large as the file's rows, docs/QUANT.md "Packed Q4_0", "Packed Q4_K and Q6_K").
 * sp_mat_pack writes it into dst
 * (the caller owns dst, sp_mat_pack_bytes bytes, and sets W->pack = dst while W is in use).
 * The packed form holds the same values, and sp_matmul gives the same bits with or without it. */
size_t sp_mat_pack_bytes(const sp_mat *W);
void sp_mat_pack(const sp_mat *W, void *dst);

/* The test oracle: Σ_k x[k] · w[k] over one quantized weight row of K elements, the weights
 * dequantized exactly (sp_dequantize_row) and the sum accumulated in double. */
double sp_dot_quant_ref(const void *w_row, sp_dtype dt, const float *x, int K);

#endif
