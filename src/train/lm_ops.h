/* lm_ops.h — the ops a target language model needs beyond ops.h (Gemma-4 text
 * training): causal attention with an optional sliding window over NB packed sequences,
 * the tanh-GELU gated MLP glue (GeGLU) and the final logit softcap.
 *
 * Like ops.h, each op is written once (lm_ops_impl.h) and compiled twice: lm_NAME in float
 * (attention split over the thread pool; results do not depend on the thread count) and
 * lm_NAME_f64 in double (pool ignored; the finite-difference reference). Backward passes
 * ACCUMULATE into gradients. */
#ifndef SPECULA_TRAIN_LM_OPS_H
#define SPECULA_TRAIN_LM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"

#define real float
#define LOP(name) lm_##name
#include "lm_ops_decl.h"
#undef real
#undef LOP
#define real double
#define LOP(name) lm_##name##_f64
#include "lm_ops_decl.h"
#undef real
#undef LOP

#endif
