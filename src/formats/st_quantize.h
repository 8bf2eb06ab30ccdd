/* st_quantize.h — store a DFlash / DSpark drafter's projection matrices as Q8_0 (or Q4_0)
 * blocks in safetensors, so a draft step reads about half the bytes of bf16 (see st_quantize.c,
 * docs/QUANTIZE.md). The drafter loader (src/drafters/dflash.c) reads them through
 * sp_st_get_weight; nothing else changes in the checkpoint. */
#ifndef SPECULA_ST_QUANTIZE_H
#define SPECULA_ST_QUANTIZE_H

#include "../core/core.h"

/* dir (config.json + safetensors) → out_dir (created): model.safetensors with the matrices in qt
 * (SP_DT_Q8_0 or SP_DT_Q4_0), config.json and sts.json copied. *n_quantized (may be NULL) gets
 * the number of matrices quantized. */
int sp_st_quantize_drafter(const char *dir, const char *out_dir, sp_dtype qt, int *n_quantized, sp_err *err);

#endif
