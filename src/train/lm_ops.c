/* lm_ops.c — the float instantiation of the target-LM ops (lm_ops_impl.h). */
#include <math.h>

#include "train/lm_ops.h"

#include "kernels/kernels.h"

#define real float
#define LOP(name) lm_##name
#define EXP expf
#define TANH tanhf
#define GELU(x) sp_gelu_tanh(x)
#include "train/lm_ops_impl.h"
