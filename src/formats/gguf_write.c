/* gguf_write.c — GGUF v3 writer (docs/GGUF-FORMAT.md §1). See gguf_write.h.
 *
 * Each metadata entry is encoded to its final bytes when it is set (key string, u32 type,
 * value), so saving is a straight copy. Tensor infos get their data offsets at save time:
 * tensors are laid out in the order they were added, each at a multiple of 32 bytes from
 * the start of the data section, with zero padding between them. */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GGUF_CHUNK_BYTES ((size_t)64 << 20)

typedef struct {
    char *key;
    uint8_t *bytes; /* type tag + value, little-endian, as written in the file */
    size_t n;
} gguf_kv;

typedef struct {
    char name[GGUF_MAX_NAME + 1];
    ggml_type type;
    int ndim;
    int64_t ne[GGUF_MAX_DIMS];
    size_t nbytes;
    const void *data;
    gguf_fill_fn fill;
    void *ctx;
} gguf_wtensor;

struct gguf_writer {
    gguf_kv *kv;
    int n_kv, cap_kv;
    gguf_wtensor *t;
    int n_t, cap_t;
};

/* a growable byte buffer used to encode one value */
typedef struct {
    uint8_t *p;
    size_t n, cap;
    int oom;
} gbuf;

static void gbuf_put(gbuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* all multi-byte values little-endian; the build targets are little-endian hosts */
static void gbuf_u32(gbuf *b, uint32_t v) { gbuf_put(b, &v, 4); }
static void gbuf_u64(gbuf *b, uint64_t v) { gbuf_put(b, &v, 8); }
static void gbuf_str(gbuf *b, const char *s, size_t n) {
    gbuf_u64(b, n);
    gbuf_put(b, s, n);
}

size_t sp_gguf_type_size(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

size_t sp_ggml_type_size(ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: return 4;
    case GGML_TYPE_F16: case GGML_TYPE_BF16: return 2;
    case GGML_TYPE_I64: return 8;
    default: return 0;
    }
}

const char *sp_ggml_type_name(ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: return "F32";
    case GGML_TYPE_F16: return "F16";
    case GGML_TYPE_BF16: return "BF16";
    case GGML_TYPE_I64: return "I64";
    case GGML_TYPE_Q4_0: return "Q4_0";
    case GGML_TYPE_Q5_0: return "Q5_0";
    case GGML_TYPE_Q8_0: return "Q8_0";
    case GGML_TYPE_Q4_K: return "Q4_K";
    case GGML_TYPE_Q6_K: return "Q6_K";
    case GGML_TYPE_Q5_1: return "Q5_1";
    case GGML_TYPE_Q2_K: return "Q2_K";
    case GGML_TYPE_Q3_K: return "Q3_K";
    case GGML_TYPE_Q5_K: return "Q5_K";
    case GGML_TYPE_IQ4_NL: return "IQ4_NL";
    case GGML_TYPE_IQ4_XS: return "IQ4_XS";
    default: return "?";
    }
}

size_t sp_ggml_row_size(ggml_type t, int64_t ne0) {
    size_t per, bytes;
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_I64:
        per = 1, bytes = sp_ggml_type_size(t);
        break;
    case GGML_TYPE_Q4_0: per = 32, bytes = 18; break;
    case GGML_TYPE_Q5_0: per = 32, bytes = 22; break;
    case GGML_TYPE_Q8_0: per = 32, bytes = 34; break;
    case GGML_TYPE_Q4_K: per = 256, bytes = 144; break;
    case GGML_TYPE_Q6_K: per = 256, bytes = 210; break;
    case GGML_TYPE_Q5_1: per = 32, bytes = 24; break;
    case GGML_TYPE_IQ4_NL: per = 32, bytes = 18; break;
    case GGML_TYPE_Q2_K: per = 256, bytes = 84; break;
    case GGML_TYPE_Q3_K: per = 256, bytes = 110; break;
    case GGML_TYPE_Q5_K: per = 256, bytes = 176; break;
    case GGML_TYPE_IQ4_XS: per = 256, bytes = 136; break;
    default: return 0;
    }
    if (ne0 < 1 || (uint64_t)ne0 % per) return 0;
    return (size_t)ne0 / per * bytes;
}

gguf_writer *sp_gguf_writer_create(void) { return calloc(1, sizeof(gguf_writer)); }

void sp_gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].bytes);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

int sp_gguf_writer_n_tensors(const gguf_writer *w) { return w->n_t; }
int sp_gguf_writer_n_kv(const gguf_writer *w) { return w->n_kv; }

/* take ownership of an encoded value (type tag + value) under key */
static int add_kv(gguf_writer *w, const char *key, gbuf *b, sp_err *err) {
    size_t klen = strlen(key);
    if (b->oom) {
        free(b->p);
        return sp_err_set(err, "gguf: out of memory encoding key %s", key);
    }
    if (klen == 0 || klen > 65535) {
        free(b->p);
        return sp_err_set(err, "gguf: key length %zu out of range (1..65535)", klen);
    }
    for (int i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            free(b->p);
            return sp_err_set(err, "gguf: key %s set twice", key);
        }
    if (w->n_kv == w->cap_kv) {
        int cap = w->cap_kv ? 2 * w->cap_kv : 32;
        gguf_kv *kv = realloc(w->kv, (size_t)cap * sizeof *kv);
        if (!kv) {
            free(b->p);
            return sp_err_set(err, "gguf: out of memory");
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(b->p);
        return sp_err_set(err, "gguf: out of memory");
    }
    w->kv[w->n_kv++] = (gguf_kv){k, b->p, b->n};
    return 0;
}

static int set_scalar(gguf_writer *w, const char *key, gguf_type t, const void *v, sp_err *err) {
    gbuf b = {0};
    gbuf_u32(&b, (uint32_t)t);
    gbuf_put(&b, v, sp_gguf_type_size(t));
    return add_kv(w, key, &b, err);
}

int sp_gguf_writer_set_u8(gguf_writer *w, const char *k, uint8_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_UINT8, &v, e); }
int sp_gguf_writer_set_i8(gguf_writer *w, const char *k, int8_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_INT8, &v, e); }
int sp_gguf_writer_set_u16(gguf_writer *w, const char *k, uint16_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_UINT16, &v, e); }
int sp_gguf_writer_set_i16(gguf_writer *w, const char *k, int16_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_INT16, &v, e); }
int sp_gguf_writer_set_u32(gguf_writer *w, const char *k, uint32_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_UINT32, &v, e); }
int sp_gguf_writer_set_i32(gguf_writer *w, const char *k, int32_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_INT32, &v, e); }
int sp_gguf_writer_set_u64(gguf_writer *w, const char *k, uint64_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_UINT64, &v, e); }
int sp_gguf_writer_set_i64(gguf_writer *w, const char *k, int64_t v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_INT64, &v, e); }
int sp_gguf_writer_set_f32(gguf_writer *w, const char *k, float v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_FLOAT32, &v, e); }
int sp_gguf_writer_set_f64(gguf_writer *w, const char *k, double v, sp_err *e) { return set_scalar(w, k, GGUF_TYPE_FLOAT64, &v, e); }

int sp_gguf_writer_set_bool(gguf_writer *w, const char *key, int v, sp_err *err) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, GGUF_TYPE_BOOL, &b, err);
}

int sp_gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, sp_err *err) {
    gbuf b = {0};
    gbuf_u32(&b, GGUF_TYPE_STRING);
    gbuf_str(&b, v, strlen(v));
    return add_kv(w, key, &b, err);
}

int sp_gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data,
                        size_t n, sp_err *err) {
    size_t es = sp_gguf_type_size(elem_type);
    if (es == 0) return sp_err_set(err, "gguf: key %s: array element type %d is not a scalar", key, (int)elem_type);
    if (elem_type == GGUF_TYPE_BOOL)
        for (size_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return sp_err_set(err, "gguf: key %s: BOOL element %zu is %u (must be 0 or 1)", key, i,
                                  ((const uint8_t *)data)[i]);
    gbuf b = {0};
    gbuf_u32(&b, GGUF_TYPE_ARRAY);
    gbuf_u32(&b, (uint32_t)elem_type);
    gbuf_u64(&b, n);
    if (n) gbuf_put(&b, data, n * es);
    return add_kv(w, key, &b, err);
}

int sp_gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, size_t n,
                            sp_err *err) {
    gbuf b = {0};
    gbuf_u32(&b, GGUF_TYPE_ARRAY);
    gbuf_u32(&b, GGUF_TYPE_STRING);
    gbuf_u64(&b, n);
    for (size_t i = 0; i < n; i++) gbuf_str(&b, strs[i], strlen(strs[i]));
    return add_kv(w, key, &b, err);
}

int sp_gguf_writer_set_raw(gguf_writer *w, const char *key, gguf_type type, const void *value,
                        size_t nbytes, sp_err *err) {
    gbuf b = {0};
    gbuf_u32(&b, (uint32_t)type);
    gbuf_put(&b, value, nbytes);
    return add_kv(w, key, &b, err);
}

int sp_gguf_writer_add_tensor(gguf_writer *w, const char *name, ggml_type type, int ndim,
                           const int64_t *ne, const void *data, gguf_fill_fn fill, void *ctx,
                           sp_err *err) {
    size_t len = strlen(name);
    if (len == 0 || len > GGUF_MAX_NAME)
        return sp_err_set(err, "gguf: tensor name '%s' has %zu bytes (1..%d allowed)", name, len, GGUF_MAX_NAME);
    if (ndim < 1 || ndim > GGUF_MAX_DIMS)
        return sp_err_set(err, "gguf: tensor %s: %d dims (1..%d allowed)", name, ndim, GGUF_MAX_DIMS);
    if (!strcmp(sp_ggml_type_name(type), "?"))
        return sp_err_set(err, "gguf: tensor %s: unsupported ggml type %d", name, (int)type);
    if ((data == NULL) == (fill == NULL))
        return sp_err_set(err, "gguf: tensor %s: give exactly one of data or fill", name);
    size_t nbytes = sp_ggml_row_size(type, ne[0]);
    if (nbytes == 0)
        return sp_err_set(err, "gguf: tensor %s: a row of %lld elements is not a whole number of %s blocks", name,
                          (long long)ne[0], sp_ggml_type_name(type));
    for (int d = 1; d < ndim; d++) {
        if (ne[d] < 1) return sp_err_set(err, "gguf: tensor %s: dim %d is %lld", name, d, (long long)ne[d]);
        if ((uint64_t)ne[d] > SIZE_MAX / nbytes) return sp_err_set(err, "gguf: tensor %s: size overflows", name);
        nbytes *= (size_t)ne[d];
    }
    for (int i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return sp_err_set(err, "gguf: tensor %s added twice", name);
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? 2 * w->cap_t : 64;
        gguf_wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return sp_err_set(err, "gguf: out of memory");
        w->t = t;
        w->cap_t = cap;
    }
    gguf_wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, len + 1);
    t->type = type;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->ne[d] = ne[d];
    t->nbytes = nbytes;
    t->data = data;
    t->fill = fill;
    t->ctx = ctx;
    return 0;
}

/* ---- saving -------------------------------------------------------------------------- */

typedef struct {
    sp_afile *f;
    uint64_t pos;
} gout;

static void out_put(gout *o, const void *p, size_t n) {
    sp_afile_write(o->f, p, n);
    o->pos += n;
}

static void out_pad(gout *o) {
    static const uint8_t zeros[GGUF_ALIGNMENT];
    size_t pad = (size_t)((GGUF_ALIGNMENT - o->pos % GGUF_ALIGNMENT) % GGUF_ALIGNMENT);
    out_put(o, zeros, pad);
}

static size_t align_up(size_t x) { return x + (GGUF_ALIGNMENT - x % GGUF_ALIGNMENT) % GGUF_ALIGNMENT; }

static int write_all(gguf_writer *w, gout *o, sp_err *err) {
    uint32_t magic = GGUF_MAGIC, version = GGUF_VERSION;
    uint64_t n_t = (uint64_t)w->n_t, n_kv = (uint64_t)w->n_kv;
    out_put(o, &magic, 4);
    out_put(o, &version, 4);
    out_put(o, &n_t, 8);
    out_put(o, &n_kv, 8);
    for (int i = 0; i < w->n_kv; i++) {
        uint64_t klen = strlen(w->kv[i].key);
        out_put(o, &klen, 8);
        out_put(o, w->kv[i].key, klen);
        out_put(o, w->kv[i].bytes, w->kv[i].n);
    }
    size_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        const gguf_wtensor *t = &w->t[i];
        uint64_t nlen = strlen(t->name), o64 = off;
        uint32_t nd = (uint32_t)t->ndim, ty = (uint32_t)t->type;
        out_put(o, &nlen, 8);
        out_put(o, t->name, nlen);
        out_put(o, &nd, 4);
        for (int d = 0; d < t->ndim; d++) {
            uint64_t ne = (uint64_t)t->ne[d];
            out_put(o, &ne, 8);
        }
        out_put(o, &ty, 4);
        out_put(o, &o64, 8);
        off = align_up(off + t->nbytes);
    }
    out_pad(o);

    uint8_t *chunk = NULL;
    size_t chunk_cap = 0;
    for (int i = 0; i < w->n_t && !o->f->failed; i++) {
        const gguf_wtensor *t = &w->t[i];
        if (t->data) {
            out_put(o, t->data, t->nbytes);
        } else {
            /* whole rows per call, at most ~GGUF_CHUNK_BYTES (at least one row) */
            size_t row = sp_ggml_row_size(t->type, t->ne[0]);
            size_t rows_per = GGUF_CHUNK_BYTES / row;
            if (rows_per == 0) rows_per = 1;
            size_t step = rows_per * row;
            if (step > t->nbytes) step = t->nbytes;
            if (step > chunk_cap) {
                free(chunk);
                chunk = malloc(step);
                chunk_cap = chunk ? step : 0;
                if (!chunk) {
                    sp_err_set(err, "gguf: out of memory for a %zu-byte chunk of %s", step, t->name);
                    return -1;
                }
            }
            for (size_t at = 0; at < t->nbytes && !o->f->failed; at += step) {
                size_t n = t->nbytes - at < step ? t->nbytes - at : step;
                if (t->fill(t->ctx, chunk, at, n, err) != 0) {
                    free(chunk);
                    return sp_err_wrap(err, "gguf: tensor %s", t->name);
                }
                out_put(o, chunk, n);
            }
        }
        out_pad(o);
    }
    free(chunk);
    if (o->f->failed) return sp_err_set(err, "gguf: write %s: %s", o->f->tmp, strerror(o->f->failed));
    return 0;
}

static int writer_save(gguf_writer *w, const char *path, int in_place, sp_err *err) {
    sp_afile f;
    if (in_place ? sp_afile_open_direct(&f, path, err) : sp_afile_open(&f, path, err)) return -1;
    gout o = {&f, 0};
    if (write_all(w, &o, err)) {
        sp_afile_abort(&f);
        return -1;
    }
    return sp_afile_commit(&f, err);
}

int sp_gguf_writer_save(gguf_writer *w, const char *path, sp_err *err) { return writer_save(w, path, 0, err); }

int sp_gguf_writer_save_in_place(gguf_writer *w, const char *path, sp_err *err) {
    return writer_save(w, path, 1, err);
}
