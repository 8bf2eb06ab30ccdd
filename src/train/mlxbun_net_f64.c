/* mlxbun_net_f64.c — the double twin of mlx-bun's modules in training (mlxbun_net_impl.h renamed:
 * sp_tr_mb_forward_f64, …) over the double ops: the finite-difference reference. Not used by the
 * trainer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/block_train.h"
#include "train/mlxbun_net.h"
#include "train/ops_f64_names.h"

#define sp_tr_mb_forward sp_tr_mb_forward_f64
#define sp_tr_mb_backward sp_tr_mb_backward_f64
#define real double
#define MB_ACTS tr_mb_acts_f64
#define MB_IN tr_mb_in_f64
#include "train/mlxbun_net_impl.h"

tr_mb_acts_f64 *sp_tr_mb_acts_create_f64(const tr_mb_dims *d, int NB, int C, int NR, sp_err *err) {
    return mb_acts_create_impl(d, NB, C, NR, err);
}
void sp_tr_mb_acts_free_f64(tr_mb_acts_f64 *a) { mb_acts_free_impl(a); }
