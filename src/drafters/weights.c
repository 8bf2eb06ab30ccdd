/* weights.c — see weights.h */
#include "drafters/weights.h"

int sp_drafter_weight_mat(const st_set *st, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    const void *data;
    sp_dtype dt;
    if (sp_st_get_weight(st, name, n, k, &data, &dt, err)) return -1;
    *out = (sp_mat){data, dt, n, k, 0, NULL};
    return 0;
}

int sp_drafter_weight_vec(const st_set *st, sp_owner *owner, const char *name, int n, float **out, sp_err *err) {
    const st_tensor *t;
    int64_t shape[1] = {n};
    if (sp_st_get(st, name, SP_DT_UNKNOWN, 1, shape, &t, err)) return -1;
    float *x = sp_owner_calloc(owner, (size_t)n * sizeof(float));
    if (!x) return sp_err_set(err, "out of memory loading %s", name);
    sp_to_f32(x, t->data, t->dtype, (size_t)n);
    *out = x;
    return 0;
}
