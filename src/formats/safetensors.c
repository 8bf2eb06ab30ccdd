/* safetensors.c — the safetensors reader (docs/SAFETENSORS.md): single files and sharded checkpoints.
 *
 * A file is mmapped read-only, then its header is checked against every rule of docs/SAFETENSORS.md §2 before
 * a single tensor pointer is formed. Tensors whose data sits at an offset that is not a
 * multiple of their element size (writers that do not pad, docs/SAFETENSORS.md §3) are copied into an owned
 * aligned buffer. On any error everything opened so far is released and the caller gets
 * NULL plus a message naming the file, the tensor and the rule. The writer is in
 * safetensors_write.c. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors_internal.h"

#define ST_MAX_HEADER 100000000ull /* MAX_HEADER_SIZE of the reference reader */
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

/* ---- dtypes (docs/SAFETENSORS.md §1) ------------------------------------------------------------------- */
typedef struct {
    const char *name;
    int bits;      /* element width in bits */
    sp_dtype dt;   /* SP_DT_UNKNOWN when the engine has no such type */
} st_dtype_info;

static const st_dtype_info st_dtypes[] = {
    {"BOOL", 8, SP_DT_BOOL},        {"F4", 4, SP_DT_UNKNOWN},
    {"F6_E2M3", 6, SP_DT_UNKNOWN},  {"F6_E3M2", 6, SP_DT_UNKNOWN},
    {"U8", 8, SP_DT_U8},            {"I8", 8, SP_DT_I8},
    {"F8_E5M2", 8, SP_DT_UNKNOWN},  {"F8_E4M3", 8, SP_DT_UNKNOWN},
    {"F8_E8M0", 8, SP_DT_UNKNOWN},  {"F8_E4M3FNUZ", 8, SP_DT_UNKNOWN},
    {"F8_E5M2FNUZ", 8, SP_DT_UNKNOWN}, {"I16", 16, SP_DT_I16},
    {"U16", 16, SP_DT_U16},         {"F16", 16, SP_DT_F16},
    {"BF16", 16, SP_DT_BF16},       {"I32", 32, SP_DT_I32},
    {"U32", 32, SP_DT_U32},         {"F32", 32, SP_DT_F32},
    {"C64", 64, SP_DT_UNKNOWN},     {"F64", 64, SP_DT_F64},
    {"I64", 64, SP_DT_I64},         {"U64", 64, SP_DT_U64},
};
#define ST_N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static const st_dtype_info *dtype_lookup(const char *name) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

sp_dtype sp_st_dtype_from_name(const char *s) {
    const st_dtype_info *d = s ? dtype_lookup(s) : NULL;
    return d ? d->dt : SP_DT_UNKNOWN;
}

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above U+10FFFF. */
int sp_st_utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        int len;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) { len = 3; lo = 0xA0; }
        else if (c == 0xED) { len = 3; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) len = 3;
        else if (c == 0xF0) { len = 4; lo = 0x90; }
        else if (c == 0xF4) { len = 4; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else return 0;
        if (n - i < (size_t)len) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* ---- the open set -------------------------------------------------------------------- */
typedef struct {
    st_tensor t;              /* public view; first member, so an st_tensor* converts back */
    const st_dtype_info *dti;
    uint64_t begin, end;      /* data_offsets, relative to the byte buffer */
    uint64_t offset;          /* absolute file offset of the data: 8 + N + begin */
    void *owned;              /* aligned copy when the mapped data is misaligned, else NULL */
} st_entry;

typedef struct {
    char *path;
    void *map;    /* whole file, PROT_READ */
    size_t size;
    int n_meta;
    char **meta;  /* n_meta (key, value) pairs */
} st_file;

struct st_set {
    char *origin;    /* path given to sp_st_open_file / sp_st_open_dir, for messages */
    st_file *files;  /* n_files; paths are heap strings, so st_tensor.file survives realloc */
    int n_files;
    st_entry *ents;  /* sorted by name once open */
    int n, cap;
};

static const uint64_t st_empty_data[1]; /* data pointer of 0-byte tensors */

void sp_st_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        free((char *)s->ents[i].t.name);
        free(s->ents[i].owned);
    }
    free(s->ents);
    for (int i = 0; i < s->n_files; i++) {
        st_file *f = &s->files[i];
        if (f->map) munmap(f->map, f->size);
        for (int k = 0; k < 2 * f->n_meta; k++) free(f->meta[k]);
        free(f->meta);
        free(f->path);
    }
    free(s->files);
    free(s->origin);
    free(s);
}

static uint64_t read_u64_le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Map `path` and register it in s (so sp_st_close releases it whatever happens next). */
static int map_file(st_set *s, const char *path, st_file **out, sp_err *err) {
    st_file *files = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *files);
    if (!files) return sp_err_set(err, "%s: out of memory", path);
    s->files = files;
    st_file *f = &files[s->n_files];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path))) return sp_err_set(err, "%s: out of memory", path);
    s->n_files++;

    off_t size = 0;
    int fd = sp_open_regular(path, &size, err);
    if (fd < 0) return -1;
    if (size < 8) {
        close(fd);
        return sp_err_set(err, "%s: header too small: the file is %lld bytes, less than the 8-byte "
                          "header length", path, (long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return sp_err_set(err, "%s: cannot mmap: %s", path, strerror(errno));
    f->map = map;
    f->size = (size_t)size;
    *out = f;
    return 0;
}

/* Append one blank entry to s; the caller fills it. */
static st_entry *push_entry(st_set *s) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        st_entry *e = realloc(s->ents, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        s->ents = e;
        s->cap = cap;
    }
    st_entry *e = &s->ents[s->n++];
    memset(e, 0, sizeof *e);
    return e;
}

/* __metadata__: an object whose values are all strings (docs/SAFETENSORS.md §1). */
static int parse_metadata(st_file *f, json_t *md, sp_err *err) {
    if (!json_is_object(md)) return sp_err_set(err, "%s: __metadata__ is not a JSON object", f->path);
    size_t n = json_object_size(md);
    if (!(f->meta = calloc(2 * n + 1, sizeof *f->meta)))
        return sp_err_set(err, "%s: out of memory", f->path);
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v) {
        if (!json_is_string(v))
            return sp_err_set(err, "%s: __metadata__ value for key \"%.200s\" is not a string",
                              f->path, k);
        char *kk = strdup(k), *vv = strdup(json_string_value(v));
        f->meta[2 * f->n_meta] = kk;
        f->meta[2 * f->n_meta + 1] = vv;
        f->n_meta++;
        if (!kk || !vv) return sp_err_set(err, "%s: out of memory", f->path);
    }
    return 0;
}

/* Non-negative integer from a JSON value, else -1. */
static int64_t json_nonneg(const json_t *v) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

/* One tensor entry: types, dtype, shape (overflow-checked), data_offsets, size (docs/SAFETENSORS.md §2 rule 6). */
static int parse_entry(st_entry *e, const char *path, const char *name, json_t *v, sp_err *err) {
#define BAD(...) return sp_err_set(err, "%s: tensor \"%.200s\": " __VA_ARGS__)
    if (!json_is_object(v)) BAD("entry is not a JSON object", path, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!jd) BAD("missing \"dtype\"", path, name);
    if (!json_is_string(jd)) BAD("\"dtype\" is not a string", path, name);
    e->dti = dtype_lookup(json_string_value(jd));
    if (!e->dti) BAD("unknown dtype \"%.40s\"", path, name, json_string_value(jd));
    if (!js) BAD("missing \"shape\"", path, name);
    if (!json_is_array(js)) BAD("\"shape\" is not an array", path, name);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS) BAD("shape has %zu dimensions, at most %d supported", path, name, nd,
                              ST_MAX_DIMS);
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d)) BAD("shape[%zu] is not an integer", path, name, i);
        int64_t x = json_nonneg(d);
        if (x < 0) BAD("shape[%zu] = %lld is negative", path, name, i,
                       (long long)json_integer_value(d));
        if (x != 0 && numel > (uint64_t)INT64_MAX / (uint64_t)x)
            BAD("shape overflows: element count exceeds 2^63", path, name);
        numel *= (uint64_t)x;
        e->t.shape[i] = x;
    }
    e->t.ndim = (int)nd;
    e->t.numel = (int64_t)numel;
    uint64_t bits = (uint64_t)e->dti->bits;
    if (numel > UINT64_MAX / bits) BAD("shape overflows: bit count exceeds 2^64", path, name);
    if ((numel * bits) % 8 != 0)
        BAD("%llu elements of %s (%d bits) are not a whole number of bytes", path, name,
            (unsigned long long)numel, e->dti->name, e->dti->bits);
    uint64_t nbytes = numel * bits / 8;
    if (!jo) BAD("missing \"data_offsets\"", path, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        BAD("\"data_offsets\" is not an array of 2 integers", path, name);
    for (int i = 0; i < 2; i++) {
        json_t *o = json_array_get(jo, (size_t)i);
        if (!json_is_integer(o)) BAD("data_offsets[%d] is not an integer", path, name, i);
        if (json_nonneg(o) < 0) BAD("data_offsets[%d] = %lld is negative", path, name, i,
                                    (long long)json_integer_value(o));
    }
    e->begin = (uint64_t)json_nonneg(json_array_get(jo, 0));
    e->end = (uint64_t)json_nonneg(json_array_get(jo, 1));
    if (e->end < e->begin)
        BAD("data_offsets END %llu < BEGIN %llu", path, name, (unsigned long long)e->end,
            (unsigned long long)e->begin);
    if (e->end - e->begin != nbytes)
        BAD("byte size mismatch: data_offsets [%llu, %llu] hold %llu bytes, but %llu elements "
            "of %s need %llu", path, name, (unsigned long long)e->begin,
            (unsigned long long)e->end, (unsigned long long)(e->end - e->begin),
            (unsigned long long)numel, e->dti->name, (unsigned long long)nbytes);
    e->t.nbytes = (size_t)nbytes;
    e->t.dtype = e->dti->dt;
    return 0;
#undef BAD
}

typedef struct {
    uint64_t begin, end;
    int idx;
} st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* docs/SAFETENSORS.md §2 rules 5 and 7: sorted by offsets the tensors tile [0, buffer length) exactly. */
static int check_layout(st_set *s, int first, const st_file *f, uint64_t data_len, sp_err *err) {
    int n = s->n - first;
    if (n == 0) {
        if (data_len != 0)
            return sp_err_set(err, "%s: %llu trailing bytes after the header but no tensors "
                              "(buffer not fully covered)", f->path,
                              (unsigned long long)data_len);
        return 0;
    }
    st_span *sp = malloc((size_t)n * sizeof *sp);
    if (!sp) return sp_err_set(err, "%s: out of memory", f->path);
    for (int i = 0; i < n; i++)
        sp[i] = (st_span){s->ents[first + i].begin, s->ents[first + i].end, first + i};
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    uint64_t pos = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *name = s->ents[sp[i].idx].t.name;
        if (sp[i].begin > pos)
            rc = sp_err_set(err, "%s: tensor \"%.200s\": data_offsets BEGIN %llu leaves a hole "
                            "(expected %llu%s)", f->path, name, (unsigned long long)sp[i].begin,
                            (unsigned long long)pos, i == 0 ? ": the first tensor must begin at 0"
                                                            : ", where the previous tensor ends");
        else if (sp[i].begin < pos)
            rc = sp_err_set(err, "%s: tensor \"%.200s\": data_offsets BEGIN %llu overlaps the "
                            "previous tensor (which ends at %llu)", f->path, name,
                            (unsigned long long)sp[i].begin, (unsigned long long)pos);
        pos = sp[i].end;
    }
    free(sp);
    if (rc) return rc;
    if (pos < data_len)
        return sp_err_set(err, "%s: %llu trailing bytes after the last tensor (buffer not fully "
                          "covered: tensors end at %llu, data buffer is %llu bytes)", f->path,
                          (unsigned long long)(data_len - pos), (unsigned long long)pos,
                          (unsigned long long)data_len);
    if (pos > data_len)
        return sp_err_set(err, "%s: tensor data extends beyond end of file (tensors end at %llu, "
                          "data buffer is %llu bytes; truncated file?)", f->path,
                          (unsigned long long)pos, (unsigned long long)data_len);
    return 0;
}

/* Map, validate and append every tensor of one file to s. */
static int add_file(st_set *s, const char *path, sp_err *err) {
    st_file *f = NULL;
    if (map_file(s, path, &f, err)) return -1;
    const unsigned char *base = f->map;
    uint64_t n = read_u64_le(base);
    if (n > ST_MAX_HEADER)
        return sp_err_set(err, "%s: header too large: N = %llu > %llu", path,
                          (unsigned long long)n, ST_MAX_HEADER);
    if (8 + n > f->size)
        return sp_err_set(err, "%s: header extends beyond end of file (N = %llu, file is %zu "
                          "bytes)", path, (unsigned long long)n, f->size);
    const char *hdr = (const char *)base + 8;
    if (!sp_st_utf8_valid((const unsigned char *)hdr, (size_t)n))
        return sp_err_set(err, "%s: header is not valid UTF-8", path);
    json_error_t jerr;
    json_t *root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return sp_err_set(err, "%s: duplicate key in header (%s)", path, jerr.text);
        return sp_err_set(err, "%s: header is not valid JSON: %s (at byte %d)", path, jerr.text,
                          jerr.position);
    }
    int rc = 0, first = s->n;
    if (!json_is_object(root)) rc = sp_err_set(err, "%s: header is not a JSON object", path);
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (rc) break;
        if (strcmp(key, "__metadata__") == 0) {
            rc = parse_metadata(f, val, err);
            continue;
        }
        st_entry *e = push_entry(s);
        if (!e || !(e->t.name = strdup(key))) {
            rc = sp_err_set(err, "%s: out of memory", path);
            break;
        }
        e->t.file = f->path;
        rc = parse_entry(e, path, key, val, err);
    }
    json_decref(root);
    uint64_t data_start = 8 + n;
    if (rc || check_layout(s, first, f, f->size - data_start, err)) return -1;

    /* Every offset is now known to lie inside the file: form the data pointers (docs/SAFETENSORS.md §3). */
    for (int i = first; i < s->n; i++) {
        st_entry *e = &s->ents[i];
        e->offset = data_start + e->begin;
        size_t align = e->dti->bits >= 8 ? (size_t)e->dti->bits / 8 : 1;
        if (e->t.nbytes == 0) {
            e->t.data = st_empty_data;
        } else if (e->offset % align == 0) {
            e->t.data = base + e->offset;
        } else {
            void *p = NULL;
            if (posix_memalign(&p, 64, e->t.nbytes) != 0)
                return sp_err_set(err, "%s: tensor \"%.200s\": out of memory copying %zu "
                                  "misaligned bytes", path, e->t.name, e->t.nbytes);
            memcpy(p, base + e->offset, e->t.nbytes);
            e->owned = p;
            e->t.data = p;
        }
    }
    return 0;
}

static int entry_name_cmp(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->t.name, ((const st_entry *)b)->t.name);
}

/* Sort by name (for sp_st_find / sp_st_at) and reject a name present twice (only possible
 * across shards: a single header rejects duplicate keys). */
static int sort_entries(st_set *s, sp_err *err) {
    if (s->n > 1) qsort(s->ents, (size_t)s->n, sizeof *s->ents, entry_name_cmp);
    for (int i = 1; i < s->n; i++)
        if (strcmp(s->ents[i - 1].t.name, s->ents[i].t.name) == 0)
            return sp_err_set(err, "%s: tensor \"%.200s\" appears in two shards: %s and %s",
                              s->origin, s->ents[i].t.name, s->ents[i - 1].t.file,
                              s->ents[i].t.file);
    return 0;
}

static st_set *set_new(const char *origin) {
    st_set *s = calloc(1, sizeof *s);
    if (s && !(s->origin = strdup(origin))) {
        free(s);
        s = NULL;
    }
    return s;
}

int sp_st_open_file(st_set **out, const char *path, sp_err *err) {
    *out = NULL;
    st_set *s = set_new(path);
    if (!s) return sp_err_set(err, "%s: out of memory", path);
    if (add_file(s, path, err) || sort_entries(s, err)) {
        sp_st_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* Is `name` a plain file name (no directory part)? */
static int plain_file_name(const char *name) {
    return name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

/* shards[0..*n_shards): the distinct shard names of weight_map (plain file names) */
static int collect_shards(json_t *wm, const char *index, const char **shards, int *n_shards, sp_err *err) {
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v))
            return sp_err_set(err, "%s: weight_map value for \"%.200s\" is not a string", index, name);
        const char *sh = json_string_value(v);
        if (!plain_file_name(sh))
            return sp_err_set(err, "%s: weight_map shard \"%.200s\" is not a plain file name", index, sh);
        int k = 0;
        while (k < *n_shards && strcmp(shards[k], sh) != 0) k++;
        if (k == *n_shards) shards[(*n_shards)++] = sh;
    }
    return 0;
}

/* every weight_map entry is in the shard it names; the tensors not listed and a metadata.total_size
 * that differs from the shards' bytes are warnings */
static int check_weight_map(const st_set *s, json_t *root, json_t *wm, const char *dir, const char *index,
                            sp_err *err) {
    const char *name;
    json_t *v;
    char path[4200];
    uint64_t total = 0;
    json_object_foreach(wm, name, v) {
        const st_tensor *t = sp_st_find(s, name);
        sp_path_join(path, sizeof path, dir, json_string_value(v));
        if (!t)
            return sp_err_set(err, "%s: weight_map names tensor \"%.200s\" in %s, but that "
                                   "shard has no such tensor", index, name, path);
        if (strcmp(t->file, path) != 0)
            return sp_err_set(err, "%s: weight_map names tensor \"%.200s\" in %s, but it is in %s", index, name,
                              path, t->file);
    }
    for (int i = 0; i < s->n; i++) total += s->ents[i].t.nbytes;
    if ((size_t)s->n > json_object_size(wm))
        sp_log(SP_LOG_WARN, "%s: %zu tensors in the shards are not listed in weight_map", index,
               (size_t)s->n - json_object_size(wm));
    json_t *ts = json_object_get(json_object_get(root, "metadata"), "total_size");
    if (json_is_integer(ts) && (uint64_t)json_integer_value(ts) != total)
        sp_log(SP_LOG_WARN, "%s: metadata.total_size %lld differs from the %llu tensor bytes in "
               "the shards", index, (long long)json_integer_value(ts), (unsigned long long)total);
    return 0;
}

/* docs/SAFETENSORS.md §4: open every distinct shard of the index once, then cross-check weight_map. */
static int open_index(st_set *s, const char *dir, const char *index, sp_err *err) {
    char *txt = NULL;
    size_t len = 0;
    if (sp_read_file(index, &txt, &len, err)) return -1;
    json_error_t jerr;
    json_t *root = json_loadb(txt, len, JSON_REJECT_DUPLICATES, &jerr);
    free(txt);
    if (!root) return sp_err_set(err, "%s: not valid JSON: %s (line %d)", index, jerr.text,
                                 jerr.line);
    int rc = 0;
    json_t *wm = json_object_get(root, "weight_map");
    const char **shards = NULL;
    int n_shards = 0;
    char path[4200];
    if (!json_is_object(wm)) {
        rc = sp_err_set(err, "%s: \"weight_map\" is missing or not an object", index);
        goto done;
    }
    if (json_object_size(wm) == 0) {
        rc = sp_err_set(err, "%s: \"weight_map\" is empty", index);
        goto done;
    }
    if (!(shards = calloc(json_object_size(wm), sizeof *shards))) {
        rc = sp_err_set(err, "%s: out of memory", index);
        goto done;
    }
    if ((rc = collect_shards(wm, index, shards, &n_shards, err))) goto done;
    for (int k = 0; k < n_shards; k++) {
        if (sp_path_join(path, sizeof path, dir, shards[k]) != 0) {
            rc = sp_err_set(err, "%s: path too long for shard %s", index, shards[k]);
            goto done;
        }
        if (add_file(s, path, err)) {
            rc = sp_err_wrap(err, "%s", index);
            goto done;
        }
    }
    if ((rc = sort_entries(s, err))) goto done;
    rc = check_weight_map(s, root, wm, dir, index, err);
done:
    free(shards);
    json_decref(root);
    return rc ? -1 : 0;
}

int sp_st_open_dir(st_set **out, const char *dir, sp_err *err) {
    *out = NULL;
    char index[4200], single[4200];
    struct stat st;
    if (stat(dir, &st) != 0) return sp_err_set(err, "%s: cannot open: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return sp_err_set(err, "%s: not a directory", dir);
    if (sp_path_join(index, sizeof index, dir, ST_INDEX_NAME) != 0 ||
        sp_path_join(single, sizeof single, dir, ST_SINGLE_NAME) != 0)
        return sp_err_set(err, "%s: path too long", dir);
    if (!sp_file_exists(index)) {
        if (!sp_file_exists(single))
            return sp_err_set(err, "%s: no %s or %s in this directory", dir, ST_INDEX_NAME,
                              ST_SINGLE_NAME);
        return sp_st_open_file(out, single, err);
    }
    st_set *s = set_new(dir);
    if (!s) return sp_err_set(err, "%s: out of memory", dir);
    if (open_index(s, dir, index, err)) {
        sp_st_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* ---- queries ------------------------------------------------------------------------- */
int sp_st_count(const st_set *s) { return s ? s->n : 0; }

const st_tensor *sp_st_at(const st_set *s, int i) {
    return s && i >= 0 && i < s->n ? &s->ents[i].t : NULL;
}

const st_tensor *sp_st_find(const st_set *s, const char *name) {
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(name, s->ents[mid].t.name);
        if (c == 0) return &s->ents[mid].t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *sp_st_metadata(const st_set *s, const char *key) {
    for (int i = 0; i < s->n_files; i++)
        for (int k = 0; k < s->files[i].n_meta; k++)
            if (strcmp(s->files[i].meta[2 * k], key) == 0) return s->files[i].meta[2 * k + 1];
    return NULL;
}

/* st_tensor is the first member of st_entry, and every st_tensor handed out lives in one. */
static const st_entry *entry_of(const st_tensor *t) { return (const st_entry *)(const void *)t; }

const char *sp_st_tensor_dtype_name(const st_tensor *t) { return entry_of(t)->dti->name; }
uint64_t sp_st_tensor_file_offset(const st_tensor *t) { return entry_of(t)->offset; }

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

int sp_st_get(const st_set *s, const char *name, sp_dtype dtype, int ndim, const int64_t *shape,
           const st_tensor **out, sp_err *err) {
    *out = NULL;
    const st_tensor *t = sp_st_find(s, name);
    if (!t) return sp_err_set(err, "%s: tensor \"%.200s\" not found", s->origin, name);
    const char *found = sp_st_tensor_dtype_name(t);
    if (dtype == SP_DT_UNKNOWN) {
        if (t->dtype != SP_DT_F32 && t->dtype != SP_DT_F16 && t->dtype != SP_DT_BF16)
            return sp_err_set(err, "tensor \"%.200s\" in %s: dtype %s, expected a float dtype "
                              "(F32, F16 or BF16)", name, t->file, found);
    } else if (t->dtype != dtype) {
        return sp_err_set(err, "tensor \"%.200s\" in %s: dtype %s, expected %s", name, t->file,
                          found, sp_dtype_name(dtype));
    }
    if (ndim >= 0) {
        int same = ndim == t->ndim;
        for (int i = 0; same && i < ndim; i++) same = shape[i] == t->shape[i];
        if (!same) {
            char want[256], got[256];
            shape_str(want, sizeof want, ndim > ST_MAX_DIMS ? ST_MAX_DIMS : ndim, shape);
            shape_str(got, sizeof got, t->ndim, t->shape);
            return sp_err_set(err, "tensor \"%.200s\" in %s: shape %s, expected %s", name,
                              t->file, got, want);
        }
    }
    *out = t;
    return 0;
}

int sp_st_get_weight(const st_set *s, const char *name, int64_t n, int64_t k, const void **data, sp_dtype *dt,
                  sp_err *err) {
    char key[320];
    snprintf(key, sizeof key, "quant.%s", name);
    const char *q = sp_st_metadata(s, key);
    const st_tensor *t;
    if (!q) {
        int64_t shape[2] = {n, k};
        if (sp_st_get(s, name, SP_DT_UNKNOWN, 2, shape, &t, err)) return -1;
        *data = t->data;
        *dt = t->dtype;
        return 0;
    }
    static const sp_dtype quant[] = {SP_DT_Q8_0, SP_DT_Q4_0, SP_DT_Q4_K, SP_DT_Q6_K};
    sp_dtype qt = SP_DT_UNKNOWN;
    for (size_t i = 0; i < sizeof quant / sizeof quant[0]; i++)
        if (!strcmp(q, sp_dtype_name(quant[i]))) qt = quant[i];
    if (qt == SP_DT_UNKNOWN)
        return sp_err_set(err, "%s: metadata %s = \"%.40s\": not a quantized type (Q8_0, Q4_0, Q4_K, Q6_K)", s->origin,
                          key, q);
    size_t row = sp_dtype_row_bytes(qt, (size_t)k);
    if (row == 0)
        return sp_err_set(err, "tensor \"%.200s\": %lld-element rows are not whole %s blocks", name, (long long)k, q);
    int64_t shape[2] = {n, (int64_t)row};
    if (sp_st_get(s, name, SP_DT_U8, 2, shape, &t, err)) return sp_err_wrap(err, "(%s blocks of [%lld, %lld])", q,
                                                                         (long long)n, (long long)k);
    *data = t->data;
    *dt = qt;
    return 0;
}
