/* block_train.c — the float decoder layer in training (block_train.h; body in block_train_impl.h). */
#include <string.h>

#include "train/block_train.h"

#define real float
#include "train/block_train_impl.h"
