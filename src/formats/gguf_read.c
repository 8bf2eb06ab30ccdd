/* gguf_read.c — the GGUF reader (docs/GGUF-FORMAT.md §1). mmaps the file, walks the header with a
 * bounds-checked cursor, and builds a table of key/values and tensor infos. Every count is
 * checked against the bytes left before anything is allocated from it. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_KEY 65535u

typedef struct {
    const uint8_t *p, *end;
    const char *path;
    sp_err *err;
} cursor;

static int need(cursor *c, uint64_t n, const char *what) {
    if ((uint64_t)(c->end - c->p) < n)
        return sp_err_set(c->err, "%s: truncated GGUF while reading %s (need %llu bytes, %llu left)",
                          c->path, what, (unsigned long long)n,
                          (unsigned long long)(c->end - c->p));
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    *v = (uint32_t)c->p[0] | (uint32_t)c->p[1] << 8 | (uint32_t)c->p[2] << 16 |
         (uint32_t)c->p[3] << 24;
    c->p += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | c->p[i];
    *v = x;
    c->p += 8;
    return 0;
}

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t n;
    if (rd_u64(c, &n, what) || need(c, n, what)) return -1;
    s->ptr = (const char *)c->p;
    s->len = n;
    c->p += n;
    return 0;
}

static const size_t scalar_size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *sp_gguf_type_name(uint32_t t) {
    static const char *names[GGUF_TYPE_COUNT] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                                 "int32", "float32", "bool",  "string", "array",
                                                 "uint64", "int64", "float64"};
    return t < GGUF_TYPE_COUNT ? names[t] : "invalid";
}

/* little-endian scalar at p of type t, widened */
static void load_scalar(gguf_kv *kv, uint32_t t, const uint8_t *p) {
    uint64_t u = 0;
    size_t n = scalar_size[t];
    for (size_t i = n; i-- > 0;) u = u << 8 | p[i];
    switch (t) {
    case GGUF_TYPE_INT8: kv->v.i = (int8_t)u; break;
    case GGUF_TYPE_INT16: kv->v.i = (int16_t)u; break;
    case GGUF_TYPE_INT32: kv->v.i = (int32_t)u; break;
    case GGUF_TYPE_INT64: kv->v.i = (int64_t)u; break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        kv->v.f = f;
        break;
    }
    case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f, &u, 8); break;
    default: kv->v.u = u; break;
    }
}

/* Skip (validating) one value of type t; depth bounds nested arrays. */
static int skip_value(cursor *c, uint32_t t, int depth, const char *what) {
    if (t >= GGUF_TYPE_COUNT) return sp_err_set(c->err, "%s: %s: invalid value type %u", c->path, what, t);
    if (t == GGUF_TYPE_STRING) {
        gguf_str s;
        return rd_str(c, &s, what);
    }
    if (t == GGUF_TYPE_ARRAY) {
        uint32_t et;
        uint64_t n;
        if (depth > 8) return sp_err_set(c->err, "%s: %s: arrays nested too deeply", c->path, what);
        if (rd_u32(c, &et, what) || rd_u64(c, &n, what)) return -1;
        if (et >= GGUF_TYPE_COUNT)
            return sp_err_set(c->err, "%s: %s: invalid array element type %u", c->path, what, et);
        if (et != GGUF_TYPE_STRING && et != GGUF_TYPE_ARRAY) {
            if (n > (uint64_t)(c->end - c->p) / scalar_size[et]) return need(c, UINT64_MAX, what);
            c->p += n * scalar_size[et];
            return 0;
        }
        for (uint64_t i = 0; i < n; i++)
            if (skip_value(c, et, depth + 1, what)) return -1;
        return 0;
    }
    if (need(c, scalar_size[t], what)) return -1;
    if (t == GGUF_TYPE_BOOL && *c->p > 1)
        return sp_err_set(c->err, "%s: %s: bool value %u is not 0 or 1", c->path, what, *c->p);
    c->p += scalar_size[t];
    return 0;
}

static int read_kv(cursor *c, gguf_kv *kv, uint64_t idx) {
    char what[96];
    snprintf(what, sizeof what, "metadata key #%llu", (unsigned long long)idx);
    if (rd_str(c, &kv->key, what)) return -1;
    if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY)
        return sp_err_set(c->err, "%s: %s has invalid length %llu", c->path, what,
                          (unsigned long long)kv->key.len);
    snprintf(what, sizeof what, "value of '%.*s'", (int)(kv->key.len > 60 ? 60 : kv->key.len),
             kv->key.ptr);
    if (rd_u32(c, &kv->type, what)) return -1;
    if (kv->type >= GGUF_TYPE_COUNT)
        return sp_err_set(c->err, "%s: %s: invalid type %u", c->path, what, kv->type);
    if (kv->type == GGUF_TYPE_STRING) return rd_str(c, &kv->v.s, what);
    if (kv->type != GGUF_TYPE_ARRAY) {
        const uint8_t *p = c->p;
        if (skip_value(c, kv->type, 0, what)) return -1;
        load_scalar(kv, kv->type, p);
        return 0;
    }
    if (rd_u32(c, &kv->arr_type, what) || rd_u64(c, &kv->arr_n, what)) return -1;
    if (kv->arr_type >= GGUF_TYPE_COUNT)
        return sp_err_set(c->err, "%s: %s: invalid array element type %u", c->path, what,
                          kv->arr_type);
    kv->arr_data = c->p;
    if (kv->arr_type == GGUF_TYPE_STRING) {
        /* each string takes at least 8 bytes: bound the count before allocating */
        if (kv->arr_n > (uint64_t)(c->end - c->p) / 8) return need(c, UINT64_MAX, what);
        kv->arr_strs = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *kv->arr_strs);
        if (!kv->arr_strs) return sp_err_set(c->err, "%s: out of memory for %s", c->path, what);
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (rd_str(c, &kv->arr_strs[i], what)) return -1;
        return 0;
    }
    if (kv->arr_type == GGUF_TYPE_ARRAY) {
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (skip_value(c, GGUF_TYPE_ARRAY, 1, what)) return -1;
        return 0;
    }
    if (kv->arr_n > (uint64_t)(c->end - c->p) / scalar_size[kv->arr_type])
        return need(c, UINT64_MAX, what);
    if (kv->arr_type == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (c->p[i] > 1) return sp_err_set(c->err, "%s: %s: bool element %llu is not 0 or 1",
                                               c->path, what, (unsigned long long)i);
    c->p += kv->arr_n * scalar_size[kv->arr_type];
    return 0;
}

/* ggml block sizes: {values per block, bytes per block} (docs/GGUF-FORMAT.md §3) */
static const struct {
    uint32_t type;
    uint16_t values, bytes;
} ggml_blocks[] = {
    {0, 1, 4},     {1, 1, 2},     {2, 32, 18},   {3, 32, 20},   {6, 32, 22},   {7, 32, 24},
    {8, 32, 34},   {9, 32, 36},   {10, 256, 84}, {11, 256, 110}, {12, 256, 144}, {13, 256, 176},
    {14, 256, 210}, {15, 256, 292}, {20, 32, 18}, {23, 256, 136}, {24, 1, 1},  {25, 1, 2},
    {26, 1, 4},    {27, 1, 8},    {28, 1, 8},    {30, 1, 2},
};

const char *sp_ggml_type_label(uint32_t t) {
    static const struct {
        uint32_t type;
        const char *name;
    } names[] = {
        {0, "F32"},       {1, "F16"},      {2, "Q4_0"},     {3, "Q4_1"},    {6, "Q5_0"},    {7, "Q5_1"},
        {8, "Q8_0"},      {9, "Q8_1"},     {10, "Q2_K"},    {11, "Q3_K"},   {12, "Q4_K"},   {13, "Q5_K"},
        {14, "Q6_K"},     {15, "Q8_K"},    {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"},
        {20, "IQ4_NL"},   {21, "IQ3_S"},   {22, "IQ2_S"},   {23, "IQ4_XS"}, {24, "I8"},     {25, "I16"},
        {26, "I32"},      {27, "I64"},     {28, "F64"},     {29, "IQ1_M"},  {30, "BF16"},   {34, "TQ1_0"},
        {35, "TQ2_0"},    {39, "MXFP4"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].type == t) return names[i].name;
    return "unknown";
}

static int block_index(uint32_t t) {
    for (size_t i = 0; i < sizeof ggml_blocks / sizeof ggml_blocks[0]; i++)
        if (ggml_blocks[i].type == t) return (int)i;
    return -1;
}
size_t sp_ggml_type_block_bytes(uint32_t t) {
    int i = block_index(t);
    return i < 0 ? 0 : ggml_blocks[i].bytes;
}
size_t sp_ggml_type_block_values(uint32_t t) {
    int i = block_index(t);
    return i < 0 ? 0 : ggml_blocks[i].values;
}

/* -1 on a bad entry; -2 when the entry cannot be read as one (truncated, no name, a dims count
 * out of range): what a header whose n_tensors counts more entries than it holds gives */
static int read_tensor_info(cursor *c, gguf_tensor_info *t, uint64_t idx) {
    char what[96];
    snprintf(what, sizeof what, "tensor info #%llu", (unsigned long long)idx);
    if (rd_str(c, &t->name, what)) return -2;
    if (t->name.len == 0) return sp_err_set(c->err, "%s: %s has an empty name", c->path, what), -2;
    if (rd_u32(c, &t->n_dims, what)) return -2;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return sp_err_set(c->err, "%s: tensor '%.*s' has %u dims (1..%d allowed)", c->path,
                          (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr, t->n_dims,
                          GGUF_MAX_DIMS), -2;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (rd_u64(c, &t->dims[d], what)) return -2;
        if (t->dims[d] == 0)
            return sp_err_set(c->err, "%s: tensor '%.*s': dimension %u is 0", c->path,
                              (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr, d);
        if (t->dims[d] && numel > UINT64_MAX / t->dims[d])
            return sp_err_set(c->err, "%s: tensor '%.*s' element count overflows", c->path,
                              (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr);
        numel *= t->dims[d];
    }
    for (uint32_t d = t->n_dims; d < GGUF_MAX_DIMS; d++) t->dims[d] = 1;
    if (rd_u32(c, &t->type, what) || rd_u64(c, &t->offset, what)) return -2;
    size_t bv = sp_ggml_type_block_values(t->type), bb = sp_ggml_type_block_bytes(t->type);
    t->nbytes = 0;
    if (bv) {
        if (t->dims[0] % bv)
            return sp_err_set(c->err, "%s: tensor '%.*s': row length %llu is not a multiple of the "
                              "block size %zu of ggml type %u", c->path,
                              (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr,
                              (unsigned long long)t->dims[0], bv, t->type);
        if (numel / bv > UINT64_MAX / bb)
            return sp_err_set(c->err, "%s: tensor '%.*s' byte size overflows", c->path,
                              (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr);
        t->nbytes = numel / bv * bb;
    }
    return 0;
}

/* add to err that entry i failed of the n the header's n_tensors declares */
static void tensor_count_hint(sp_err *err, uint64_t i, uint64_t n) {
    if (!err) return;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%.700s (tensor info #%llu of the n_tensors = %llu the header declares; %llu read "
             "before it)", err->msg, (unsigned long long)i, (unsigned long long)n, (unsigned long long)i);
    memcpy(err->msg, msg, sizeof msg);
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor_info *x = *(const gguf_tensor_info *const *)a, *y = *(const gguf_tensor_info *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_by_name(const void *a, const void *b) {
    const gguf_tensor_info *x = *(const gguf_tensor_info *const *)a, *y = *(const gguf_tensor_info *const *)b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = memcmp(x->name.ptr, y->name.ptr, n);
    return c ? c : (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

#define NAME_ARGS(t) (int)((t)->name.len > 64 ? 64 : (t)->name.len), (t)->name.ptr

/* No two tensors share a name, and no two tensors' bytes overlap. */
static int check_names_and_overlap(const gguf_file *f, sp_err *err) {
    if (f->n_tensors < 2) return 0;
    const gguf_tensor_info **v = malloc(f->n_tensors * sizeof *v);
    if (!v) return sp_err_set(err, "%s: out of memory", f->path);
    for (uint64_t i = 0; i < f->n_tensors; i++) v[i] = &f->tensors[i];
    int rc = 0;
    qsort(v, f->n_tensors, sizeof *v, cmp_by_name);
    for (uint64_t i = 1; i < f->n_tensors && !rc; i++)
        if (!cmp_by_name(&v[i - 1], &v[i])) rc = sp_err_set(err, "%s: tensor '%.*s' appears twice", f->path, NAME_ARGS(v[i]));
    qsort(v, f->n_tensors, sizeof *v, cmp_by_offset);
    for (uint64_t i = 1; i < f->n_tensors && !rc; i++)
        if (v[i - 1]->offset + v[i - 1]->nbytes > v[i]->offset)
            rc = sp_err_set(err, "%s: tensors '%.*s' (offset %llu, %llu bytes) and '%.*s' (offset %llu) overlap",
                            f->path, NAME_ARGS(v[i - 1]), (unsigned long long)v[i - 1]->offset,
                            (unsigned long long)v[i - 1]->nbytes, NAME_ARGS(v[i]), (unsigned long long)v[i]->offset);
    free(v);
    return rc;
}

void sp_gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].arr_strs);
    free(f->kv);
    free(f->tensors);
    if (f->map) munmap((void *)f->map, f->size);
    free(f);
}

/* f->map, f->size: the whole regular file at path, mapped read-only */
static int map_file(gguf_file *f, const char *path, sp_err *err) {
    off_t size = 0;
    int fd = sp_open_regular(path, &size, err);
    if (fd < 0) return -1;
    if (size < 24) {
        close(fd);
        return sp_err_set(err, "%s: not a GGUF file (too small)", path);
    }
    f->size = (size_t)size;
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return sp_err_set(err, "%s: mmap failed: %s", path, strerror(errno));
    f->map = m;
    return 0;
}

/* every tensor offset aligned and its data inside the file */
static int check_tensor_bounds(const gguf_file *f, const char *path, sp_err *err) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor_info *t = &f->tensors[i];
        int nl = (int)(t->name.len > 64 ? 64 : t->name.len);
        if (t->offset % f->alignment)
            return sp_err_set(err, "%s: tensor '%.*s' offset %llu is not aligned to %llu", path, nl, t->name.ptr,
                              (unsigned long long)t->offset, (unsigned long long)f->alignment);
        if (f->n_tensors && (f->data_offset > f->size || t->offset > f->size - f->data_offset ||
                             t->nbytes > f->size - f->data_offset - t->offset))
            return sp_err_set(err, "%s: tensor '%.*s' data (offset %llu, %llu bytes) lies past the end of the file",
                              path, nl, t->name.ptr, (unsigned long long)t->offset, (unsigned long long)t->nbytes);
    }
    return 0;
}

gguf_file *sp_gguf_open(const char *path, sp_err *err) {
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        sp_err_set(err, "%s: out of memory", path);
        return NULL;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    if (map_file(f, path, err)) goto fail;
    cursor c = {f->map, f->map + f->size, f->path, err};
    uint32_t magic = 0;
    rd_u32(&c, &magic, "magic");
    if (magic != GGUF_MAGIC) {
        sp_err_set(err, "%s: bad magic (not a GGUF file)", path);
        goto fail;
    }
    if (rd_u32(&c, &f->version, "version")) goto fail;
    if (f->version != 2 && f->version != 3) {
        sp_err_set(err, "%s: unsupported GGUF version %u (2 or 3 expected)", path, f->version);
        goto fail;
    }
    if (rd_u64(&c, &f->n_tensors, "tensor count") || rd_u64(&c, &f->n_kv, "metadata count"))
        goto fail;
    /* each kv takes >= 8+1+4 bytes, each tensor info >= 8+4+8+4+8 */
    if (f->n_kv > (uint64_t)(c.end - c.p) / 13 || f->n_tensors > (uint64_t)(c.end - c.p) / 32) {
        sp_err_set(err, "%s: header counts (%llu keys, %llu tensors) exceed the file size", path,
                   (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
        goto fail;
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        sp_err_set(err, "%s: out of memory", path);
        goto fail;
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (read_kv(&c, &f->kv[i], i)) goto fail;
        f->kv[i].raw = (const uint8_t *)f->kv[i].key.ptr + f->kv[i].key.len + 4;
        f->kv[i].raw_len = (uint64_t)(c.p - f->kv[i].raw);
    }
    f->alignment = 32;
    const gguf_kv *al = sp_gguf_get(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32 || al->v.u == 0 || al->v.u % 8) {
            sp_err_set(err, "%s: general.alignment must be a uint32 multiple of 8", path);
            goto fail;
        }
        f->alignment = al->v.u;
    }
    int rc;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((rc = read_tensor_info(&c, &f->tensors[i], i)) != 0) {
            /* an unreadable entry past the first: n_tensors most likely counts more than are described */
            if (rc == -2 && i > 0) tensor_count_hint(err, i, f->n_tensors);
            goto fail;
        }
    uint64_t pos = (uint64_t)(c.p - f->map);
    f->data_offset = pos + (f->alignment - pos % f->alignment) % f->alignment;
    if (check_tensor_bounds(f, path, err)) goto fail;
    if (check_names_and_overlap(f, err)) goto fail;
    return f;
fail:
    sp_gguf_close(f);
    return NULL;
}

int64_t sp_gguf_find(const gguf_file *f, const char *key) {
    size_t n = strlen(key);
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key.len == n && !memcmp(f->kv[i].key.ptr, key, n)) return (int64_t)i;
    return -1;
}

const gguf_kv *sp_gguf_get(const gguf_file *f, const char *key) {
    int64_t i = sp_gguf_find(f, key);
    return i < 0 ? NULL : &f->kv[i];
}

static int is_int_type(uint32_t t) {
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_BOOL || t == GGUF_TYPE_UINT64 ||
           t == GGUF_TYPE_INT64;
}
static int is_signed_type(uint32_t t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

int sp_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, sp_err *err) {
    const gguf_kv *kv = sp_gguf_get(f, key);
    if (!kv) return 1;
    if (!is_int_type(kv->type))
        return sp_err_set(err, "%s: key %s is %s, an integer was expected", f->path, key,
                          sp_gguf_type_name(kv->type));
    if (!is_signed_type(kv->type) && kv->v.u > (uint64_t)INT64_MAX)
        return sp_err_set(err, "%s: key %s value out of range", f->path, key);
    *out = is_signed_type(kv->type) ? kv->v.i : (int64_t)kv->v.u;
    return 0;
}

int sp_gguf_get_bool(const gguf_file *f, const char *key, int *out, sp_err *err) {
    int64_t v;
    int rc = sp_gguf_get_i64(f, key, &v, err);
    if (rc) return rc;
    *out = v != 0;
    return 0;
}

int sp_gguf_get_f64(const gguf_file *f, const char *key, double *out, sp_err *err) {
    const gguf_kv *kv = sp_gguf_get(f, key);
    if (!kv) return 1;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) {
        *out = kv->v.f;
        return 0;
    }
    int64_t v;
    if (sp_gguf_get_i64(f, key, &v, err)) return -1;
    *out = (double)v;
    return 0;
}

int sp_gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, sp_err *err) {
    const gguf_kv *kv = sp_gguf_get(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_TYPE_STRING)
        return sp_err_set(err, "%s: key %s is %s, a string was expected", f->path, key,
                          sp_gguf_type_name(kv->type));
    *out = kv->v.s;
    return 0;
}

int sp_gguf_get_arr(const gguf_file *f, const char *key, int elem_type, const gguf_kv **out,
                 sp_err *err) {
    const gguf_kv *kv = sp_gguf_get(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_TYPE_ARRAY)
        return sp_err_set(err, "%s: key %s is %s, an array was expected", f->path, key,
                          sp_gguf_type_name(kv->type));
    if (elem_type >= 0 && kv->arr_type != (uint32_t)elem_type)
        return sp_err_set(err, "%s: key %s is an array of %s, %s elements were expected", f->path,
                          key, sp_gguf_type_name(kv->arr_type), sp_gguf_type_name((uint32_t)elem_type));
    *out = kv;
    return 0;
}

double sp_gguf_arr_f64(const gguf_kv *kv, uint64_t i) {
    gguf_kv tmp;
    SP_ASSERT(kv->arr_type < GGUF_TYPE_COUNT && scalar_size[kv->arr_type] && i < kv->arr_n);
    load_scalar(&tmp, kv->arr_type, kv->arr_data + i * scalar_size[kv->arr_type]);
    if (kv->arr_type == GGUF_TYPE_FLOAT32 || kv->arr_type == GGUF_TYPE_FLOAT64) return tmp.v.f;
    return is_signed_type(kv->arr_type) ? (double)tmp.v.i : (double)tmp.v.u;
}

int64_t sp_gguf_arr_i64(const gguf_kv *kv, uint64_t i) {
    gguf_kv tmp;
    SP_ASSERT(kv->arr_type < GGUF_TYPE_COUNT && scalar_size[kv->arr_type] && i < kv->arr_n);
    load_scalar(&tmp, kv->arr_type, kv->arr_data + i * scalar_size[kv->arr_type]);
    if (kv->arr_type == GGUF_TYPE_FLOAT32 || kv->arr_type == GGUF_TYPE_FLOAT64) /* NaN / out of range: INT64_MIN */
        return tmp.v.f >= -9223372036854775808.0 && tmp.v.f < 9223372036854775808.0 ? (int64_t)tmp.v.f : INT64_MIN;
    return is_signed_type(kv->arr_type) ? tmp.v.i : (int64_t)tmp.v.u;
}

const gguf_tensor_info *sp_gguf_find_tensor(const gguf_file *f, const char *name) {
    size_t n = strlen(name);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name.len == n && !memcmp(f->tensors[i].name.ptr, name, n))
            return &f->tensors[i];
    return NULL;
}

const void *sp_gguf_tensor_data(const gguf_file *f, const gguf_tensor_info *t, sp_err *err) {
    if (!t->nbytes) {
        sp_err_set(err, "%s: tensor '%.*s' has ggml type %u, unknown to this reader", f->path,
                   (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr, t->type);
        return NULL;
    }
    return f->map + f->data_offset + t->offset;
}

void sp_gguf_drop_pages(const gguf_file *f, const void *p, size_t n) {
    const uint8_t *a = p, *b = a + n;
    if (!f->map || a < f->map || b > f->map + f->size) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + page - 1) / page * page, hi = (uintptr_t)b / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED); /* read-only private map: clean pages */
}
