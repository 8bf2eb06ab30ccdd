/* safetensors_write.c — the safetensors writer (docs/SAFETENSORS.md §1, §3, §4).
 *
 * Tensors are collected (copied, or by reference for multi-GB saves) and written in the
 * reference writer's layout: sorted by descending element size then name, header padded
 * with spaces so that 8+N is a multiple of 8, which aligns every tensor. Data is streamed
 * from the caller's buffers straight into path.tmp.PID, which is fsynced and renamed over
 * the target, so a crash leaves either the old file or the new one. The sharded save cuts
 * the tensors into model-XXXXX-of-YYYYY.safetensors files plus the index. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "safetensors.h"
#include "safetensors_internal.h"

typedef struct {
    char *name;
    sp_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void *data; /* owned (== owned) or the caller's buffer */
    void *owned;
} st_wtensor;

struct st_writer {
    st_wtensor *t;
    int n, cap;
    char **meta; /* n_meta (key, value) pairs */
    int n_meta;
};

st_writer *sp_st_writer_create(void) {
    st_writer *w = calloc(1, sizeof *w);
    if (w && sp_st_writer_set_metadata(w, "format", "pt", NULL) != 0) {
        sp_st_writer_free(w);
        w = NULL;
    }
    return w;
}

void sp_st_writer_free(st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].owned);
    }
    free(w->t);
    for (int k = 0; k < 2 * w->n_meta; k++) free(w->meta[k]);
    free(w->meta);
    free(w);
}

int sp_st_writer_set_metadata(st_writer *w, const char *key, const char *value, sp_err *err) {
    if (!sp_st_utf8_valid((const unsigned char *)key, strlen(key)) ||
        !sp_st_utf8_valid((const unsigned char *)value, strlen(value)))
        return sp_err_set(err, "safetensors metadata \"%.200s\": key or value is not UTF-8", key);
    char *v = strdup(value);
    if (!v) return sp_err_set(err, "out of memory");
    for (int k = 0; k < w->n_meta; k++) {
        if (strcmp(w->meta[2 * k], key) == 0) {
            free(w->meta[2 * k + 1]);
            w->meta[2 * k + 1] = v;
            return 0;
        }
    }
    char **m = realloc(w->meta, (size_t)(2 * w->n_meta + 2) * sizeof *m);
    char *k = strdup(key);
    if (m) w->meta = m;
    if (!m || !k) {
        free(v);
        free(k);
        return sp_err_set(err, "out of memory");
    }
    m[2 * w->n_meta] = k;
    m[2 * w->n_meta + 1] = v;
    w->n_meta++;
    return 0;
}

static int writer_add(st_writer *w, const char *name, sp_dtype dtype, int ndim,
                      const int64_t *shape, const void *data, int copy, sp_err *err) {
    if (!name || !name[0]) return sp_err_set(err, "safetensors writer: empty tensor name");
    if (strcmp(name, "__metadata__") == 0)
        return sp_err_set(err, "safetensors writer: \"__metadata__\" is not a tensor name");
    if (!sp_st_utf8_valid((const unsigned char *)name, strlen(name)))
        return sp_err_set(err, "safetensors writer: tensor name is not UTF-8");
    size_t esize = sp_dtype_size(dtype);
    if (esize == 0)
        return sp_err_set(err, "tensor \"%.200s\": cannot write dtype %s", name,
                          sp_dtype_name(dtype));
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return sp_err_set(err, "tensor \"%.200s\": ndim %d not in 0..%d", name, ndim, ST_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return sp_err_set(err, "tensor \"%.200s\": shape[%d] < 0", name, i);
        if (shape[i] && numel > (uint64_t)INT64_MAX / esize / (uint64_t)shape[i])
            return sp_err_set(err, "tensor \"%.200s\": shape overflows", name);
        numel *= (uint64_t)shape[i];
    }
    size_t nbytes = (size_t)(numel * esize);
    if (nbytes && !data) return sp_err_set(err, "tensor \"%.200s\": data is NULL", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        st_wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return sp_err_set(err, "tensor \"%.200s\": out of memory", name);
        w->t = t;
        w->cap = cap;
    }
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = nbytes;
    t->data = data;
    if (!(t->name = strdup(name)) || (copy && !(t->owned = malloc(nbytes ? nbytes : 1)))) {
        free(t->name);
        return sp_err_set(err, "tensor \"%.200s\": out of memory (%zu bytes)", name, nbytes);
    }
    if (copy) {
        if (nbytes) memcpy(t->owned, data, nbytes);
        t->data = t->owned;
    }
    w->n++;
    return 0;
}

int sp_st_writer_add(st_writer *w, const char *name, sp_dtype dtype, int ndim, const int64_t *shape,
                  const void *data, sp_err *err) {
    return writer_add(w, name, dtype, ndim, shape, data, 1, err);
}

int sp_st_writer_add_ref(st_writer *w, const char *name, sp_dtype dtype, int ndim,
                      const int64_t *shape, const void *data, sp_err *err) {
    return writer_add(w, name, dtype, ndim, shape, data, 0, err);
}

/* ---- layout and header --------------------------------------------------------------- */
static int by_name(const void *a, const void *b) {
    return strcmp((*(st_wtensor *const *)a)->name, (*(st_wtensor *const *)b)->name);
}

/* reference layout (docs/SAFETENSORS.md §3): descending element size, then name */
static int by_layout(const void *a, const void *b) {
    const st_wtensor *x = *(st_wtensor *const *)a, *y = *(st_wtensor *const *)b;
    size_t sx = sp_dtype_size(x->dtype), sy = sp_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* All tensors as pointers sorted by name; fails on a duplicate name. Caller frees. */
static st_wtensor **sorted_by_name(const st_writer *w, sp_err *err) {
    st_wtensor **p = malloc((size_t)(w->n ? w->n : 1) * sizeof *p);
    if (!p) {
        sp_err_set(err, "out of memory");
        return NULL;
    }
    for (int i = 0; i < w->n; i++) p[i] = &w->t[i];
    qsort(p, (size_t)w->n, sizeof *p, by_name);
    for (int i = 1; i < w->n; i++) {
        if (strcmp(p[i - 1]->name, p[i]->name) == 0) {
            sp_err_set(err, "safetensors writer: tensor \"%.200s\" added twice", p[i]->name);
            free(p);
            return NULL;
        }
    }
    return p;
}

/* JSON header for tensors t[0..n) (already in layout order), padded with spaces so that
 * 8 + len is a multiple of 8. Returns a malloc'd buffer (not NUL-terminated) or NULL. */
static char *build_header(const st_writer *w, st_wtensor **t, int n, size_t *len) {
    json_t *root = json_object(), *md = json_object();
    int bad = !root || !md;
    for (int k = 0; !bad && k < w->n_meta; k++)
        bad = json_object_set_new(md, w->meta[2 * k], json_string(w->meta[2 * k + 1]));
    if (!bad && w->n_meta) bad = json_object_set(root, "__metadata__", md);
    uint64_t off = 0;
    for (int i = 0; !bad && i < n; i++) {
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        bad = !e || !shape || !offs;
        for (int d = 0; !bad && d < t[i]->ndim; d++)
            bad = json_array_append_new(shape, json_integer(t[i]->shape[d]));
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)off)) ||
              json_array_append_new(offs, json_integer((json_int_t)(off + t[i]->nbytes)));
        off += t[i]->nbytes;
        bad = bad || json_object_set_new(e, "dtype", json_string(sp_dtype_name(t[i]->dtype))) ||
              json_object_set(e, "shape", shape) || json_object_set(e, "data_offsets", offs) ||
              json_object_set(root, t[i]->name, e);
        json_decref(e);
        json_decref(shape);
        json_decref(offs);
    }
    char *s = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(md);
    json_decref(root);
    if (!s) return NULL;
    size_t n0 = strlen(s), pad = (8 - (8 + n0) % 8) % 8;
    char *h = realloc(s, n0 + pad + 1);
    if (!h) {
        free(s);
        return NULL;
    }
    memset(h + n0, ' ', pad);
    *len = n0 + pad;
    return h;
}

/* Write tensors t[0..n) as one safetensors file at path, atomically. Reorders t. */
static int write_file(const st_writer *w, st_wtensor **t, int n, const char *path, sp_err *err) {
    qsort(t, (size_t)n, sizeof *t, by_layout);
    size_t hlen = 0;
    char *hdr = build_header(w, t, n, &hlen);
    if (!hdr) return sp_err_set(err, "%s: cannot build the safetensors header", path);
    sp_afile f;
    if (sp_afile_open(&f, path, err)) {
        free(hdr);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    sp_afile_write(&f, len8, 8);
    sp_afile_write(&f, hdr, hlen);
    free(hdr);
    for (int i = 0; i < n; i++) sp_afile_write(&f, t[i]->data, t[i]->nbytes);
    return sp_afile_commit(&f, err);
}

int sp_st_writer_save(st_writer *w, const char *path, sp_err *err) {
    st_wtensor **t = sorted_by_name(w, err);
    if (!t) return -1;
    int rc = write_file(w, t, w->n, path, err);
    free(t);
    return rc;
}

/* ---- sharded save (docs/SAFETENSORS.md §4) ------------------------------------------------------------- */
static int write_index(st_writer *w, const char *dir, const int *shard_of, int n_shards,
                       sp_err *err) {
    st_wtensor **t = sorted_by_name(w, err);
    if (!t) return -1;
    json_t *root = json_object(), *md = json_object(), *wm = json_object();
    int bad = !root || !md || !wm;
    uint64_t total = 0;
    char shard[64];
    for (int i = 0; !bad && i < w->n; i++) {
        total += t[i]->nbytes;
        snprintf(shard, sizeof shard, "model-%05d-of-%05d.safetensors",
                 shard_of[t[i] - w->t] + 1, n_shards);
        bad = json_object_set_new(wm, t[i]->name, json_string(shard));
    }
    free(t);
    bad = bad || json_object_set_new(md, "total_size", json_integer((json_int_t)total)) ||
          json_object_set(root, "metadata", md) || json_object_set(root, "weight_map", wm);
    char *s = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(md);
    json_decref(wm);
    json_decref(root);
    char path[4200];
    if (!s) return sp_err_set(err, "%s: cannot build the index", dir);
    if (sp_path_join(path, sizeof path, dir, "model.safetensors.index.json") != 0) {
        free(s);
        return sp_err_set(err, "%s: path too long", dir);
    }
    size_t len = strlen(s);
    s[len] = '\n'; /* json_dumps' NUL becomes the final newline */
    int rc = sp_write_file_atomic(path, s, len + 1, err);
    free(s);
    return rc;
}

int sp_st_writer_save_sharded(st_writer *w, const char *dir, uint64_t max_shard_bytes,
                           sp_err *err) {
    st_wtensor **t = sorted_by_name(w, err); /* duplicate check */
    if (!t) return -1;
    free(t);
    if (sp_mkdir_p(dir, err)) return -1;
    /* Cut in insertion order; a tensor that alone exceeds the limit gets its own shard. */
    int *shard_of = malloc((size_t)(w->n ? w->n : 1) * sizeof *shard_of);
    t = malloc((size_t)(w->n ? w->n : 1) * sizeof *t);
    int rc = 0, n_shards = 1;
    char path[4200], name[64];
    if (!shard_of || !t) {
        rc = sp_err_set(err, "%s: out of memory", dir);
        goto done;
    }
    uint64_t cur = 0;
    for (int i = 0; i < w->n; i++) {
        if (max_shard_bytes && cur > 0 && cur + w->t[i].nbytes > max_shard_bytes) {
            n_shards++;
            cur = 0;
        }
        cur += w->t[i].nbytes;
        shard_of[i] = n_shards - 1;
    }
    if (n_shards > 99999) {
        rc = sp_err_set(err, "%s: %d shards, more than 99999", dir, n_shards);
        goto done;
    }
    for (int k = 0; k < n_shards; k++) {
        int m = 0;
        for (int i = 0; i < w->n; i++)
            if (shard_of[i] == k) t[m++] = &w->t[i];
        if (n_shards == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        if (sp_path_join(path, sizeof path, dir, name) != 0) {
            rc = sp_err_set(err, "%s: path too long", dir);
            goto done;
        }
        if ((rc = write_file(w, t, m, path, err))) goto done;
    }
    if (n_shards > 1) {
        rc = write_index(w, dir, shard_of, n_shards, err);
    } else if (sp_path_join(path, sizeof path, dir, "model.safetensors.index.json") == 0 &&
               unlink(path) == 0) {
        sp_fsync_parent_dir(path); /* a stale index would shadow the new model.safetensors */
    }
done:
    free(shard_of);
    free(t);
    return rc ? -1 : 0;
}
