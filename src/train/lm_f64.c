/* lm_f64.c — the double twin of the target LM's forward / backward (lm_impl.h with every name
 * renamed to its _f64 twin: sp_lm_forward_f64, …, on the double ops): the reference the
 * finite-difference test differentiates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "train/lm.h"
#include "train/block_train.h"
#include "train/ops.h"
#include "train/ops_f64_names.h"

#define lm_acts lm_acts_f64
#define sp_lm_acts_create sp_lm_acts_create_f64
#define sp_lm_acts_free sp_lm_acts_free_f64
#define sp_lm_forward sp_lm_forward_f64
#define sp_lm_backward sp_lm_backward_f64

#define real double
#include "train/lm_impl.h"
