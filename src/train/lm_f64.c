/* lm_f64.c — the double instantiation of the target LM's forward / backward (lm_impl.h) on
 * the double ops: the reference the finite-difference test differentiates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "train/lm.h"
#include "train/lm_ops.h"
#include "train/ops.h"

#define real double
#define LM(name) lm_##name##_f64
#define LM_ACTS lm_acts_f64
#define TR(name) tr_##name##_f64
#define LOP(name) lm_##name##_f64
#include "train/lm_impl.h"
