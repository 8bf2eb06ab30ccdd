/* lm_ops_f64.c — the double instantiation of the target-LM ops (lm_ops_impl.h): the reference
 * the finite-difference tests differentiate (pool may be NULL). */
#include <math.h>

#include "train/lm_ops.h"

#define real double
#define LOP(name) lm_##name##_f64
#define EXP exp
#define TANH tanh
#define GELU(x) (0.5 * (x) * (1 + tanh(0.7978845608028654 * ((x) + 0.044715 * (x) * (x) * (x)))))
#include "train/lm_ops_impl.h"
