/* weights.h — binding a drafter checkpoint's tensors, shared by the DFlash / DSpark, EAGLE-3 and
 * Gemma-4 assistant loaders. */
#ifndef SPECULA_DRAFTER_WEIGHTS_H
#define SPECULA_DRAFTER_WEIGHTS_H

#include "core/core.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"

/* The [n, k] matrix `name`, float or Q8_0-stored (sp_st_get_weight), used in place. 0 or -1 with err. */
int sp_drafter_weight_mat(const st_set *st, const char *name, int n, int k, sp_mat *out, sp_err *err);
/* The [n] vector `name` converted to f32 into memory from `owner`. 0 or -1 with err. */
int sp_drafter_weight_vec(const st_set *st, sp_owner *owner, const char *name, int n, float **out, sp_err *err);

#endif
