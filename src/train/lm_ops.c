/* lm_ops.c — the float instantiation of the target-LM ops (lm_ops_impl.h). */
#include <math.h>

#include "train/lm_ops.h"

#define real float
#define LOP(name) lm_##name
#define EXP expf
#define TANH tanhf
#include "train/lm_ops_impl.h"
