/* mlx_quant.h — MLX affine group-quantized safetensors: the checkpoints mlx-lm and mlx-bun
 * write with `"quantization": {"group_size": G, "bits": B}` in config.json (docs/MLX-QUANT.md).
 *
 * A quantized matrix X [n, k] is three tensors: X.weight, uint32 [n, k·B/32], each word holding
 * 32/B consecutive B-bit values of a row, the first in the lowest bits; X.scales and X.biases,
 * [n, k/G] in a float dtype, one per group of G consecutive inputs; value = scale · q + bias.
 *
 * The loader turns each such matrix into a type the kernels run, without changing one value:
 * when its scales and biases are all exact in f16, 32-blocks with d = scale and m = bias (Q4_1
 * for 4 bits, QA8 for 8), else (a scale that f16 would round) f32. Either way row r
 * dequantizes to exactly sp_mlxq_dequant_row's floats. */
#ifndef SPECULA_MLX_QUANT_H
#define SPECULA_MLX_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"
#include "safetensors.h"

typedef struct {
    int bits;  /* 4 or 8 */
    int group; /* 32, 64 or 128 */
} sp_mlxq_params;

/* config.json's "quantization" object (or "quantization_config" when only that is present) */
typedef struct sp_mlxq sp_mlxq;

/* Reads the quantization object of config.json at path: *out NULL (and 0) when the file has
 * none; -1 with err naming the key when it is malformed (bits / group_size missing or not
 * integers, a mode other than "affine"). */
int sp_mlxq_load(sp_mlxq **out, const char *config_path, sp_err *err);
void sp_mlxq_free(sp_mlxq *q);

/* The parameters of module `module` (a tensor name without ".weight"): its own entry in the
 * quantization object when there is one (mlx-lm writes per-module overrides keyed by path),
 * else the defaults. -1 with err when bits is not 4 or 8, or the group size not 32, 64 or 128. */
int sp_mlxq_params_for(const sp_mlxq *q, const char *module, sp_mlxq_params *p, sp_err *err);

/* Row r of a quantized matrix of k inputs: y[j] = (float)q_j · scale + bias in f32, the product
 * rounded before the sum (no fused multiply-add). w: the row's k·bits/32 words; scales, biases:
 * the row's k/group values of dtype sdt (F32, F16 or BF16). */
void sp_mlxq_dequant_row(float *y, const uint32_t *w, const void *scales, const void *biases, sp_dtype sdt,
                         const sp_mlxq_params *p, int64_t k);

/* X.weight converted for the kernels: data (allocated with alloc(actx, bytes), 64-byte aligned,
 * owned by the caller) holding n rows of dt (SP_DT_Q4_1, SP_DT_QA8 or SP_DT_F32). */
typedef struct {
    void *data;
    sp_dtype dt;
    int64_t n, k;
    size_t nbytes;
} sp_mlxq_mat;

/* Validates X.weight (U32, 2-D), X.scales and X.biases (present, same float dtype, shape
 * [n, k/G]) against p, then converts. `weight` is the name of X.weight in s. Errors name the
 * tensor and the rule: bits, group size not dividing the input width, the shape found. */
int sp_mlxq_convert(const st_set *s, const char *weight, const sp_mlxq_params *p, void *(*alloc)(void *, size_t),
                    void *actx, sp_mlxq_mat *out, sp_err *err);

/* MLX's affine quantizer over one row of k floats (k a multiple of the group): per group the
 * scale and bias mlx's `quantize` picks (docs/MLX-QUANT.md §3), rounded to sdt, then each value
 * q = clamp(round((x − bias) / scale), 0, 2^bits − 1) against the stored scale and bias. */
void sp_mlxq_quantize_row(uint32_t *w, void *scales, void *biases, sp_dtype sdt, const float *x, int64_t k,
                          const sp_mlxq_params *p);

/* `specula quantize --type mlx4|mlx8`: the Hugging Face checkpoint in in_dir written to out_dir
 * with every 2-D float `*.weight` whose width is a multiple of the group quantized (1-D tensors
 * and narrower matrices kept), config.json given the quantization object, the other files of
 * in_dir (tokenizer, chat template) copied. Scales and biases are BF16 (F16 when the input
 * matrix is F16). The directory is built under a temp name and published whole. */
int sp_mlxq_write_model(const char *in_dir, const char *out_dir, const sp_mlxq_params *p, int *n_quantized,
                        sp_err *err);

#endif
