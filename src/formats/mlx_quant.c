/* mlx_quant.c — MLX affine group-quantized safetensors: config, validation, the lossless
 * conversion the loader runs, the quantizer and the checkpoint writer (docs/MLX-QUANT.md). */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/quant.h"
#include "hfjson.h"
#include "mlx_quant.h"

struct sp_mlxq {
    json_t *obj;      /* the quantization object (per-module entries read on demand) */
    sp_mlxq_params p; /* its bits and group_size */
};

static int get_param(json_t *o, const char *key, const char *where, int *out, sp_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || !json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096)
        return sp_err_set(err, "%s: \"%s\" must be a positive integer", where, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int check_mode(json_t *o, const char *where, sp_err *err) {
    json_t *mode = json_object_get(o, "mode");
    if (mode && !(json_is_string(mode) && !strcmp(json_string_value(mode), "affine")))
        return sp_err_set(err, "%s: quantization mode %s is not supported (only \"affine\": scales and biases)", where,
                          json_is_string(mode) ? json_string_value(mode) : "(not a string)");
    return 0;
}

int sp_mlxq_load(sp_mlxq **out, const char *config_path, sp_err *err) {
    *out = NULL;
    json_t *root = sp_hf_json_load_file(config_path, 0, err);
    if (!root) return -1;
    json_t *o = json_object_get(root, "quantization");
    if (!o) o = json_object_get(root, "quantization_config");
    int rc = 0;
    if (o && json_is_object(o) && json_object_get(o, "group_size")) { /* MLX's; other tools' configs differ */
        sp_mlxq *q = calloc(1, sizeof *q);
        char where[4200];
        snprintf(where, sizeof where, "%s: quantization", config_path);
        if (!q) rc = sp_err_set(err, "out of memory");
        else if (check_mode(o, where, err) || get_param(o, "bits", where, &q->p.bits, err) ||
                 get_param(o, "group_size", where, &q->p.group, err)) {
            free(q);
            rc = -1;
        } else {
            q->obj = json_incref(o);
            *out = q;
        }
    }
    json_decref(root);
    return rc;
}

void sp_mlxq_free(sp_mlxq *q) {
    if (!q) return;
    json_decref(q->obj);
    free(q);
}

int sp_mlxq_params_for(const sp_mlxq *q, const char *module, sp_mlxq_params *p, sp_err *err) {
    *p = q->p;
    json_t *o = json_object_get(q->obj, module);
    char where[600];
    snprintf(where, sizeof where, "config.json quantization[\"%s\"]", module);
    if (o && json_is_object(o) &&
        (check_mode(o, where, err) || get_param(o, "bits", where, &p->bits, err) ||
         get_param(o, "group_size", where, &p->group, err)))
        return -1;
    if (p->bits != 4 && p->bits != 8)
        return sp_err_set(err, "%s: MLX quantization with %d bits is not supported (4 or 8)", module, p->bits);
    if (p->group != 32 && p->group != 64 && p->group != 128)
        return sp_err_set(err, "%s: MLX group size %d is not supported (32, 64 or 128)", module, p->group);
    return 0;
}

static float scalar_at(const void *v, sp_dtype dt, int64_t i) {
    if (dt == SP_DT_BF16) return sp_bf16_to_f32(((const uint16_t *)v)[i]);
    if (dt == SP_DT_F16) return sp_f16_to_f32(((const uint16_t *)v)[i]);
    return ((const float *)v)[i];
}

/* value j of a packed row */
static inline unsigned qval(const uint32_t *w, int bits, int64_t j) {
    int per = 32 / bits;
    return (unsigned)(w[j / per] >> (bits * (int)(j % per))) & ((1u << bits) - 1);
}

void sp_mlxq_dequant_row(float *y, const uint32_t *w, const void *scales, const void *biases, sp_dtype sdt,
                         const sp_mlxq_params *p, int64_t k) {
    for (int64_t g = 0; g < k / p->group; g++) {
        float s = scalar_at(scales, sdt, g), b = scalar_at(biases, sdt, g);
        for (int64_t j = g * p->group; j < (g + 1) * p->group; j++) {
            float prod = (float)qval(w, p->bits, j) * s;
            y[j] = prod + b;
        }
    }
}

/* 1 when every value of the n scales or biases is exactly an f16 */
static int f16_exact(const void *v, sp_dtype dt, int64_t n) {
    if (dt == SP_DT_F16) return 1;
    for (int64_t i = 0; i < n; i++) {
        float x = scalar_at(v, dt, i);
        if (!isfinite(x) || sp_f16_to_f32(sp_f32_to_f16(x)) != x) return 0;
    }
    return 1;
}

/* one row as Q4_1 (4-bit) or QA8 (8-bit) blocks: each 32 values of a group keep the group's
 * scale (d) and bias (m) */
static void row_to_blocks(void *dst, const uint32_t *w, const void *sc, const void *bi, sp_dtype sdt,
                          const sp_mlxq_params *p, int64_t k) {
    for (int64_t b = 0; b < k / 32; b++) {
        int64_t g = b * 32 / p->group;
        uint16_t d = sp_f32_to_f16(scalar_at(sc, sdt, g)), m = sp_f32_to_f16(scalar_at(bi, sdt, g));
        if (p->bits == 4) {
            sp_block_q4_1 *o = (sp_block_q4_1 *)dst + b;
            o->d = d, o->m = m;
            for (int j = 0; j < 16; j++) o->qs[j] = (uint8_t)(qval(w, 4, 32 * b + j) | qval(w, 4, 32 * b + j + 16) << 4);
        } else {
            sp_block_qa8 *o = (sp_block_qa8 *)dst + b;
            o->d = d, o->m = m;
            for (int j = 0; j < 32; j++) o->qs[j] = (uint8_t)qval(w, 8, 32 * b + j);
        }
    }
}

static int check_side(const st_set *s, const char *name, const char *what, int64_t n, int64_t ng,
                      const st_tensor **out, sp_err *err) {
    const st_tensor *t = sp_st_find(s, name);
    if (!t) return sp_err_set(err, "%s is MLX-quantized but has no %s", what, name);
    if (t->dtype != SP_DT_F32 && t->dtype != SP_DT_F16 && t->dtype != SP_DT_BF16)
        return sp_err_set(err, "tensor %s in %s: dtype %s, expected F32, F16 or BF16", name, t->file,
                          sp_st_tensor_dtype_name(t));
    if (t->ndim != 2 || t->shape[0] != n || t->shape[1] != ng)
        return sp_err_set(err, "tensor %s in %s: shape [%lld%s%lld], expected [%lld, %lld] (one per group)", name,
                          t->file, (long long)t->shape[0], t->ndim > 1 ? ", " : "] ndim ",
                          (long long)(t->ndim > 1 ? t->shape[1] : t->ndim), (long long)n, (long long)ng);
    *out = t;
    return 0;
}

/* the module name (weight without ".weight") into buf */
static int module_of(const char *weight, char *buf, size_t cap) {
    size_t n = strlen(weight);
    if (n < 7 || strcmp(weight + n - 7, ".weight") || n - 7 >= cap) return -1;
    memcpy(buf, weight, n - 7);
    buf[n - 7] = 0;
    return 0;
}

int sp_mlxq_convert(const st_set *s, const char *weight, const sp_mlxq_params *p, void *(*alloc)(void *, size_t),
                    void *actx, sp_mlxq_mat *out, sp_err *err) {
    char mod[400], nm[420];
    const st_tensor *w = sp_st_find(s, weight), *sc, *bi;
    if (!w || module_of(weight, mod, sizeof mod)) return sp_err_set(err, "no MLX-quantized tensor %s", weight);
    if (w->dtype != SP_DT_U32 || w->ndim != 2)
        return sp_err_set(err, "tensor %s in %s: an MLX-quantized weight must be U32 [rows, packed words], found %s "
                          "with %d dims", weight, w->file, sp_st_tensor_dtype_name(w), w->ndim);
    int64_t n = w->shape[0], k = w->shape[1] * 32 / p->bits;
    if (k % p->group)
        return sp_err_set(err, "tensor %s in %s: group size %d does not divide the input width %lld (%lld words of "
                          "%d-bit values)", weight, w->file, p->group, (long long)k, (long long)w->shape[1], p->bits);
    snprintf(nm, sizeof nm, "%s.scales", mod);
    if (check_side(s, nm, weight, n, k / p->group, &sc, err)) return -1;
    snprintf(nm, sizeof nm, "%s.biases", mod);
    if (check_side(s, nm, weight, n, k / p->group, &bi, err)) return -1;
    if (bi->dtype != sc->dtype)
        return sp_err_set(err, "%s: scales are %s but biases %s", weight, sp_dtype_name(sc->dtype),
                          sp_dtype_name(bi->dtype));
    int64_t ng = k / p->group, nwords = w->shape[1];
    int blocks = f16_exact(sc->data, sc->dtype, n * ng) && f16_exact(bi->data, bi->dtype, n * ng);
    out->dt = !blocks ? SP_DT_F32 : p->bits == 4 ? SP_DT_Q4_1 : SP_DT_QA8;
    out->n = n;
    out->k = k;
    size_t rb = sp_dtype_row_bytes(out->dt, (size_t)k), es = sp_dtype_size(sc->dtype);
    out->nbytes = (size_t)n * rb;
    if (!(out->data = alloc(actx, out->nbytes ? out->nbytes : 1)))
        return sp_err_set(err, "out of memory converting %s (%zu bytes)", weight, out->nbytes);
    for (int64_t r = 0; r < n; r++) {
        const uint32_t *wr = (const uint32_t *)w->data + r * nwords;
        const char *sr = (const char *)sc->data + (size_t)(r * ng) * es, *br = (const char *)bi->data + (size_t)(r * ng) * es;
        char *dst = (char *)out->data + (size_t)r * rb;
        if (blocks) row_to_blocks(dst, wr, sr, br, sc->dtype, p, k);
        else sp_mlxq_dequant_row((float *)dst, wr, sr, br, sc->dtype, p, k);
    }
    return 0;
}

static float round_to(float x, sp_dtype dt) {
    if (dt == SP_DT_BF16) return sp_bf16_to_f32(sp_f32_to_bf16(x));
    if (dt == SP_DT_F16) return sp_f16_to_f32(sp_f32_to_f16(x));
    return x;
}

static void store(void *v, sp_dtype dt, int64_t i, float x) {
    if (dt == SP_DT_BF16) ((uint16_t *)v)[i] = sp_f32_to_bf16(x);
    else if (dt == SP_DT_F16) ((uint16_t *)v)[i] = sp_f32_to_f16(x);
    else ((float *)v)[i] = x;
}

/* mlx's choice for one group: the edge of larger magnitude is the bias and lands on a level */
static void group_params(const float *x, int G, int bits, float *scale, float *bias) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < G; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
    float nb = (float)((1 << bits) - 1);
    int low_edge = fabsf(lo) > fabsf(hi);
    float s = fmaxf((hi - lo) / nb, 1e-7f);
    if (!low_edge) s = -s;
    float edge = low_edge ? lo : hi, q0 = rintf(edge / s);
    *scale = q0 != 0 ? edge / q0 : s;
    *bias = q0 != 0 ? edge : 0;
}

void sp_mlxq_quantize_row(uint32_t *w, void *scales, void *biases, sp_dtype sdt, const float *x, int64_t k,
                          const sp_mlxq_params *p) {
    int per = 32 / p->bits;
    unsigned top = (1u << p->bits) - 1;
    memset(w, 0, (size_t)(k / per) * sizeof *w);
    for (int64_t g = 0; g < k / p->group; g++) {
        float s, b;
        group_params(x + g * p->group, p->group, p->bits, &s, &b);
        s = round_to(s, sdt);
        b = round_to(b, sdt);
        store(scales, sdt, g, s);
        store(biases, sdt, g, b);
        for (int64_t j = g * p->group; j < (g + 1) * p->group; j++) {
            float q = s != 0 ? rintf((x[j] - b) / s) : 0;
            unsigned u = !(q > 0) ? 0 : q >= (float)top ? top : (unsigned)q;
            w[j / per] |= (uint32_t)u << (p->bits * (int)(j % per));
        }
    }
}
