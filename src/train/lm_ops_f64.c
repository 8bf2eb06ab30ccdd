/* lm_ops_f64.c — the double instantiation of the target-LM ops (lm_ops_impl.h): the reference
 * the finite-difference tests differentiate (pool may be NULL). */
#include <math.h>

#include "kernels/kernels.h"
#include "train/lm_ops.h"

#define real double
#define LOP(name) lm_##name##_f64
#define EXP exp
#define TANH tanh
#define GELU(x) (0.5 * (x) * (1 + tanh(SP_GELU_K * ((x) + SP_GELU_A * (x) * (x) * (x)))))
#include "train/lm_ops_impl.h"
