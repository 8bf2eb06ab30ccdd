/* block_train_f64.c — the double twin of the training decoder layer (block_train_impl.h renamed
 * by ops_f64_names.h: sp_tr_block_forward_f64, …): the finite-difference reference. */
#include <string.h>

#include "train/block_train.h"
#include "train/ops_f64_names.h"

#define real double
#include "train/block_train_impl.h"
