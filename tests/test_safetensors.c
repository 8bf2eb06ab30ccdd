/* test_safetensors.c — safetensors reader/writer (docs/SAFETENSORS.md): round trips of every dtype,
 * sharded checkpoints, one test per docs/SAFETENSORS.md §2 validation rule (files built byte by byte), the
 * unaligned-file copy path, index.json errors, the real fixtures, and a corruption fuzz test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "harness.h"

/* ---- helpers ------------------------------------------------------------------------- */
static char tmpdir[64];

static void tmp_begin(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/specula-test-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

/* remove every file of the (flat) temp dir, then the dir */
static void tmp_end(void) {
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(tmpdir);
}

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* a safetensors file: 8-byte length, header text as given, then data */
static void write_st(const char *path, const char *hdr, const void *data, size_t ndata) {
    size_t hn = strlen(hdr);
    unsigned char *b = malloc(8 + hn + ndata + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, hdr, hn);
    if (ndata) memcpy(b + 8 + hn, data, ndata);
    write_bytes(path, b, 8 + hn + ndata);
    free(b);
}

static void fill_bytes(unsigned char *p, size_t n, unsigned seed) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        p[i] = (unsigned char)(s >> 24);
    }
}

/* count of files in tmpdir whose name contains `sub` */
static int count_files(const char *sub) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, sub)) n++;
    if (d) closedir(d);
    return n;
}

/* ---- round trip ---------------------------------------------------------------------- */
typedef struct {
    const char *name;
    sp_dtype dt;
    int ndim;
    int64_t shape[3];
} spec;

static const spec specs[] = {
    {"a.f32", SP_DT_F32, 2, {3, 5}},     {"b.f16", SP_DT_F16, 1, {7}},
    {"c.bf16", SP_DT_BF16, 3, {2, 3, 3}}, {"d.i64", SP_DT_I64, 1, {5}},
    {"e.i32", SP_DT_I32, 2, {3, 1}},     {"f.u8", SP_DT_U8, 1, {13}},
    {"g.bool", SP_DT_BOOL, 1, {9}},      {"h.i8", SP_DT_I8, 1, {3}},
    {"i.i16", SP_DT_I16, 1, {5}},        {"j.u16", SP_DT_U16, 1, {3}},
    {"k.u32", SP_DT_U32, 1, {3}},        {"l.u64", SP_DT_U64, 2, {2, 2}},
    {"m.f64", SP_DT_F64, 1, {3}},        {"scalar.f32", SP_DT_F32, 0, {0}},
    {"scalar.u8", SP_DT_U8, 0, {0}},     {"empty.bf16", SP_DT_BF16, 2, {0, 4}},
    {"empty.f32", SP_DT_F32, 1, {0}},
};
#define N_SPECS ((int)(sizeof specs / sizeof specs[0]))

static size_t spec_bytes(const spec *s) {
    size_t n = sp_dtype_size(s->dt);
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
    return n;
}

static void test_roundtrip_dtypes(void) {
    tmp_begin();
    sp_err err = {{0}};
    st_writer *w = sp_st_writer_create();
    unsigned char *data[N_SPECS];
    for (int i = 0; i < N_SPECS; i++) {
        size_t n = spec_bytes(&specs[i]);
        data[i] = malloc(n + 1);
        fill_bytes(data[i], n, (unsigned)i);
        CHECK(sp_st_writer_add(w, specs[i].name, specs[i].dt, specs[i].ndim, specs[i].shape,
                            data[i], &err) == 0, "%s", err.msg);
    }
    CHECK(sp_st_writer_set_metadata(w, "note", "héllo \"q\"", &err) == 0, "%s", err.msg);
    CHECK(sp_st_writer_save(w, tpath("rt.safetensors"), &err) == 0, "%s", err.msg);
    sp_st_writer_free(w);
    CHECK(count_files(".tmp") == 0, "temp file left behind");

    /* header padded: 8 + N multiple of 8, padding is spaces */
    size_t fn;
    unsigned char *raw = read_bytes(tpath("rt.safetensors"), &fn);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = (hn << 8) | raw[i];
    CHECK((8 + hn) % 8 == 0, "8+N = %llu", (unsigned long long)(8 + hn));
    CHECK(raw[8 + hn - 1] == '}' || raw[8 + hn - 1] == ' ', "header end");

    st_set *s = NULL;
    CHECK(sp_st_open_file(&s, tpath("rt.safetensors"), &err) == 0, "%s", err.msg);
    if (!s) goto out;
    CHECK(sp_st_count(s) == N_SPECS, "count %d", sp_st_count(s));
    CHECK(sp_st_metadata(s, "format") && strcmp(sp_st_metadata(s, "format"), "pt") == 0, "format");
    CHECK(sp_st_metadata(s, "note") && strcmp(sp_st_metadata(s, "note"), "héllo \"q\"") == 0, "note");
    CHECK(sp_st_metadata(s, "absent") == NULL, "absent metadata");
    for (int i = 0; i < N_SPECS; i++) {
        const st_tensor *t = sp_st_find(s, specs[i].name);
        CHECK(t != NULL, "missing %s", specs[i].name);
        if (!t) continue;
        CHECK(t->dtype == specs[i].dt && t->ndim == specs[i].ndim, "%s dtype/ndim", t->name);
        for (int d = 0; d < t->ndim; d++)
            CHECK(t->shape[d] == specs[i].shape[d], "%s shape", t->name);
        size_t n = spec_bytes(&specs[i]);
        CHECK(t->nbytes == n, "%s nbytes %zu vs %zu", t->name, t->nbytes, n);
        CHECK(t->numel == (int64_t)(n / sp_dtype_size(t->dtype)), "%s numel", t->name);
        CHECK(t->data != NULL && memcmp(t->data, data[i], n) == 0, "%s data", t->name);
        CHECK((uintptr_t)t->data % sp_dtype_size(t->dtype) == 0, "%s aligned", t->name);
        CHECK(strcmp(sp_st_tensor_dtype_name(t), sp_dtype_name(t->dtype)) == 0, "dtype name");
        uint64_t off = sp_st_tensor_file_offset(t);
        CHECK(off + n <= fn && memcmp(raw + off, data[i], n) == 0, "%s file offset", t->name);
        CHECK(strcmp(t->file, tpath("rt.safetensors")) == 0, "file %s", t->file);
    }
    /* sp_st_at walks in name order; the layout is by descending element size, then name */
    for (int i = 1; i < sp_st_count(s); i++)
        CHECK(strcmp(sp_st_at(s, i - 1)->name, sp_st_at(s, i)->name) < 0, "sp_st_at order");
    CHECK(sp_st_at(s, -1) == NULL && sp_st_at(s, sp_st_count(s)) == NULL, "sp_st_at bounds");
    {
        /* walk tensors in file order */
        const st_tensor *order[N_SPECS];
        int m = 0;
        for (int i = 0; i < sp_st_count(s); i++) order[m++] = sp_st_at(s, i);
        for (int i = 0; i < m; i++)
            for (int j = i + 1; j < m; j++)
                if (sp_st_tensor_file_offset(order[j]) < sp_st_tensor_file_offset(order[i]) ||
                    (sp_st_tensor_file_offset(order[j]) == sp_st_tensor_file_offset(order[i]) &&
                     order[j]->nbytes < order[i]->nbytes)) {
                    const st_tensor *x = order[i];
                    order[i] = order[j];
                    order[j] = x;
                }
        for (int i = 1; i < m; i++) {
            size_t a = sp_dtype_size(order[i - 1]->dtype), b = sp_dtype_size(order[i]->dtype);
            if (order[i - 1]->nbytes && order[i]->nbytes)
                CHECK(a > b || (a == b && strcmp(order[i - 1]->name, order[i]->name) < 0),
                      "layout order %s before %s", order[i - 1]->name, order[i]->name);
        }
    }
    sp_st_close(s);
out:
    free(raw);
    for (int i = 0; i < N_SPECS; i++) free(data[i]);
    tmp_end();
}

static void test_get(void) {
    tmp_begin();
    sp_err err = {{0}};
    st_writer *w = sp_st_writer_create();
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[2] = {2, 3}, sh1[1] = {6};
    int64_t ids[6] = {1, 2, 3, 4, 5, 6};
    CHECK(sp_st_writer_add(w, "w", SP_DT_F32, 2, sh, x, &err) == 0, "%s", err.msg);
    CHECK(sp_st_writer_add(w, "ids", SP_DT_I64, 1, sh1, ids, &err) == 0, "%s", err.msg);
    CHECK(sp_st_writer_save(w, tpath("g.safetensors"), &err) == 0, "%s", err.msg);
    sp_st_writer_free(w);
    st_set *s = NULL;
    const st_tensor *t = NULL;
    CHECK(sp_st_open_file(&s, tpath("g.safetensors"), &err) == 0, "%s", err.msg);
    if (!s) goto out;
    CHECK(sp_st_get(s, "w", SP_DT_F32, 2, sh, &t, &err) == 0 && t, "%s", err.msg);
    CHECK(sp_st_get(s, "w", SP_DT_UNKNOWN, 2, sh, &t, &err) == 0 && t, "any float");
    CHECK(sp_st_get(s, "w", SP_DT_F32, -1, NULL, &t, &err) == 0 && t, "skip shape");
    int64_t bad[2] = {3, 2};
    CHECK(sp_st_get(s, "w", SP_DT_F32, 2, bad, &t, &err) != 0 && t == NULL, "shape mismatch");
    CHECK(strstr(err.msg, "\"w\"") && strstr(err.msg, "g.safetensors") &&
          strstr(err.msg, "[2, 3]") && strstr(err.msg, "[3, 2]"), "msg: %s", err.msg);
    CHECK(sp_st_get(s, "w", SP_DT_F32, 1, sh1, &t, &err) != 0 && strstr(err.msg, "[6]"), "%s",
          err.msg);
    CHECK(sp_st_get(s, "w", SP_DT_BF16, 2, sh, &t, &err) != 0 && strstr(err.msg, "BF16") &&
          strstr(err.msg, "F32"), "%s", err.msg);
    CHECK(sp_st_get(s, "ids", SP_DT_UNKNOWN, 1, sh1, &t, &err) != 0 && strstr(err.msg, "I64"),
          "%s", err.msg);
    CHECK(sp_st_get(s, "nope", SP_DT_F32, 2, sh, &t, &err) != 0 && strstr(err.msg, "nope") &&
          strstr(err.msg, "not found"), "%s", err.msg);
    CHECK(sp_st_find(s, "nope") == NULL, "find absent");
    sp_st_close(s);
out:
    tmp_end();
}

/* ---- the real fixtures --------------------------------------------------------------- */
static void test_fixtures(void) {
    static const struct {
        const char *dir, *embed;
        int n;
    } fx[] = {
        {"tests/data/ref-logits/qwen3", "model.embed_tokens.weight", 47 - 1},
        {"tests/data/ref-logits/llama", "model.embed_tokens.weight", 39 - 1},
        {"tests/data/ref-logits/gemma4", "model.language_model.embed_tokens.weight", 100 - 1},
    };
    sp_err err = {{0}};
    for (int i = 0; i < 3; i++) {
        st_set *s = NULL;
        CHECK(sp_st_open_dir(&s, fx[i].dir, &err) == 0, "%s", err.msg);
        if (!s) continue;
        CHECK(sp_st_count(s) == fx[i].n, "%s: %d tensors", fx[i].dir, sp_st_count(s));
        const st_tensor *t = NULL;
        int64_t sh[2] = {32000, 32};
        CHECK(sp_st_get(s, fx[i].embed, SP_DT_F32, 2, sh, &t, &err) == 0, "%s", err.msg);
        CHECK(sp_st_metadata(s, "format") && strcmp(sp_st_metadata(s, "format"), "pt") == 0, "fmt");
        CHECK(sp_st_find(s, "lm_head.weight") == NULL, "tied embeddings");
        size_t total = 0;
        for (int k = 0; k < sp_st_count(s); k++) {
            const st_tensor *x = sp_st_at(s, k);
            total += x->nbytes;
            CHECK(x->dtype == SP_DT_F32 && x->ndim >= 1 && x->ndim <= 2, "%s", x->name);
            CHECK((uintptr_t)x->data % 4 == 0, "aligned %s", x->name);
        }
        if (t) {
            /* random weights: finite and not all zero */
            const float *e = t->data;
            int nonzero = 0, finite = 1;
            for (int64_t k = 0; k < t->numel; k++) {
                nonzero += e[k] != 0.0f;
                finite &= isfinite(e[k]) != 0;
            }
            CHECK(nonzero > t->numel / 2 && finite, "%s values", fx[i].dir);
        }
        struct stat st;
        char p[256];
        snprintf(p, sizeof p, "%s/model.safetensors", fx[i].dir);
        stat(p, &st);
        CHECK(total < (size_t)st.st_size && (size_t)st.st_size - total < 20000, "%s size", p);
        sp_st_close(s);
    }
    st_set *s = NULL;
    CHECK(sp_st_open_file(&s, "tests/data/ref-logits/qwen3/model.safetensors", &err) == 0, "%s",
          err.msg);
    const st_tensor *t = NULL;
    int64_t q[2] = {4 * 32, 32};
    CHECK(s && sp_st_get(s, "model.layers.0.self_attn.q_proj.weight", SP_DT_F32, 2, q, &t, &err) == 0,
          "%s", err.msg);
    sp_st_close(s);
}

/* ---- docs/SAFETENSORS.md §2: one test per rule, files built byte by byte --------------------------------- */
static int expect_fail_at(int line, const char *hdr, size_t ndata, const char *want) {
    static unsigned char data[1024];
    fill_bytes(data, sizeof data, 7);
    const char *path = tpath("bad.safetensors");
    write_st(path, hdr, data, ndata);
    st_set *s = (st_set *)&data; /* must come back NULL */
    sp_err err = {{0}};
    int rc = sp_st_open_file(&s, path, &err);
    int ok = rc != 0 && s == NULL && strstr(err.msg, want) && strstr(err.msg, "bad.safetensors");
    if (!ok) {
        harness_case_failed++;
        fprintf(stderr, "  line %d: header %s\n    want \"%s\", got rc=%d \"%s\"\n", line, hdr,
                want, rc, err.msg);
    }
    if (rc == 0) sp_st_close(s);
    return ok;
}
#define EXPECT_FAIL(hdr, ndata, want) expect_fail_at(__LINE__, hdr, ndata, want)

static void expect_ok(const char *hdr, const void *data, size_t ndata, int count) {
    const char *path = tpath("ok.safetensors");
    write_st(path, hdr, data, ndata);
    st_set *s = NULL;
    sp_err err = {{0}};
    CHECK(sp_st_open_file(&s, path, &err) == 0, "%s: %s", hdr, err.msg);
    if (s) CHECK(sp_st_count(s) == count, "%s: count %d", hdr, sp_st_count(s));
    sp_st_close(s);
}

#define T(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape \
                                 ",\"data_offsets\":[" #b "," #e "]}"

static void test_rule1_file_too_small(void) {
    tmp_begin();
    sp_err err = {{0}};
    for (size_t n = 0; n < 8; n++) {
        unsigned char b[8] = {2, 0, 0, 0, 0, 0, 0, 0};
        write_bytes(tpath("small.safetensors"), b, n);
        st_set *s = NULL;
        CHECK(sp_st_open_file(&s, tpath("small.safetensors"), &err) != 0 && !s, "len %zu", n);
        CHECK(strstr(err.msg, "header too small") && strstr(err.msg, "small.safetensors"), "%s",
              err.msg);
    }
    st_set *s = NULL;
    CHECK(sp_st_open_file(&s, tpath("absent.safetensors"), &err) != 0 && !s &&
          strstr(err.msg, "absent.safetensors") && strstr(err.msg, "cannot open"), "%s", err.msg);
    CHECK(sp_st_open_file(&s, tmpdir, &err) != 0 && strstr(err.msg, "not a regular file"), "%s",
          err.msg);
    tmp_end();
}

static void test_rule2_header_size(void) {
    tmp_begin();
    sp_err err = {{0}};
    unsigned char b[64];
    memset(b, ' ', sizeof b);
    uint64_t ns[3] = {100000001ull, UINT64_MAX, 57}; /* too large, too large, beyond EOF */
    const char *want[3] = {"header too large", "header too large", "beyond end of file"};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)(ns[k] >> (8 * i));
        b[8] = '{';
        b[9] = '}';
        write_bytes(tpath("big.safetensors"), b, sizeof b);
        st_set *s = NULL;
        CHECK(sp_st_open_file(&s, tpath("big.safetensors"), &err) != 0 && !s, "k=%d", k);
        CHECK(strstr(err.msg, want[k]) && strstr(err.msg, "big.safetensors"), "%s", err.msg);
    }
    /* N exactly at the end of the file is fine: {} then spaces, no tensors */
    uint64_t n = sizeof b - 8;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    write_bytes(tpath("big.safetensors"), b, sizeof b);
    st_set *s = NULL;
    CHECK(sp_st_open_file(&s, tpath("big.safetensors"), &err) == 0 && sp_st_count(s) == 0, "%s",
          err.msg);
    sp_st_close(s);
    tmp_end();
}

static void test_rule3_utf8_json_object(void) {
    tmp_begin();
    EXPECT_FAIL("{\"a\xff\":{}}", 0, "not valid UTF-8");
    EXPECT_FAIL("{\"a\xc0\xaf\":{}}", 0, "not valid UTF-8");     /* overlong '/' */
    EXPECT_FAIL("{\"a\xed\xa0\x80\":{}}", 0, "not valid UTF-8"); /* surrogate */
    EXPECT_FAIL("{\"a\xf4\x90\x80\x80\":{}}", 0, "not valid UTF-8"); /* > U+10FFFF */
    EXPECT_FAIL("{\"a\xe2\x82\":{}}", 0, "not valid UTF-8");     /* cut sequence */
    EXPECT_FAIL("{\"a\": ", 0, "not valid JSON");
    EXPECT_FAIL("{} x", 0, "not valid JSON");
    EXPECT_FAIL("{}{}", 0, "not valid JSON");
    EXPECT_FAIL("", 0, "not valid JSON");
    EXPECT_FAIL("{'a':1}", 0, "not valid JSON");
    EXPECT_FAIL("[1, 2]", 0, "not a JSON object");
    EXPECT_FAIL("\"str\"", 0, "not a JSON object");
    EXPECT_FAIL("  42 ", 0, "not a JSON object");
    EXPECT_FAIL("null", 0, "not a JSON object");
    /* whitespace around the object is tolerated (docs/SAFETENSORS.md §2 rule 3); padding with spaces is normal */
    expect_ok("\t\n {" T("a", "U8", "[2]", 0, 2) "}\r \t\n", "xy", 2, 1);
    expect_ok("{}", NULL, 0, 0);
    expect_ok("{}        ", NULL, 0, 0);
    expect_ok("{\"n\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],"
              "\"data_offsets\":[0,1]}}", "z", 1, 1); /* multi-byte UTF-8 name */
    tmp_end();
}

static void test_rule4_duplicate_keys(void) {
    tmp_begin();
    EXPECT_FAIL("{" T("a", "U8", "[1]", 0, 1) "," T("a", "U8", "[1]", 1, 2) "}", 2,
                "duplicate key");
    EXPECT_FAIL("{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, "duplicate key");
    EXPECT_FAIL("{" T("a", "U8", "[1]", 0, 1) "," T("b", "U8", "[1]", 1, 2)
                ",\"__metadata__\":{},\"__metadata__\":{}}", 2, "duplicate key");
    tmp_end();
}

static void test_entry_types(void) {
    tmp_begin();
    EXPECT_FAIL("{\"a\":5}", 0, "tensor \"a\": entry is not a JSON object");
    EXPECT_FAIL("{\"a\":[]}", 0, "tensor \"a\": entry is not a JSON object");
    EXPECT_FAIL("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "\"a\": missing \"dtype\"");
    EXPECT_FAIL("{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                "\"dtype\" is not a string");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "missing \"shape\"");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1,
                "\"shape\" is not an array");
    EXPECT_FAIL("{" T("a", "U8", "[1.0]", 0, 1) "}", 1, "shape[0] is not an integer");
    EXPECT_FAIL("{" T("a", "U8", "[\"1\"]", 0, 1) "}", 1, "shape[0] is not an integer");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "missing \"data_offsets\"");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
                "\"data_offsets\" is not an array of 2");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
                "\"data_offsets\" is not an array of 2");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{}}}", 1,
                "\"data_offsets\" is not an array of 2");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}", 1,
                "data_offsets[1] is not an integer");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-1,0]}}", 0,
                "data_offsets[0] = -1 is negative");
    EXPECT_FAIL("{" T("a", "F7", "[1]", 0, 1) "}", 1, "tensor \"a\": unknown dtype \"F7\"");
    EXPECT_FAIL("{" T("a", "f32", "[1]", 0, 4) "}", 4, "unknown dtype \"f32\"");
    EXPECT_FAIL("{" T("a", "U8", "[2,-1]", 0, 1) "}", 1, "shape[1] = -1 is negative");
    EXPECT_FAIL("{" T("a", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1, "9 dimensions");
    EXPECT_FAIL("{" T("a", "U8", "[4294967296,4294967296]", 0, 1) "}", 1, "shape overflows");
    EXPECT_FAIL("{" T("a", "U8", "[4294967296,4294967296,0]", 0, 0) "}", 0, "shape overflows");
    EXPECT_FAIL("{" T("a", "I64", "[4611686018427387904]", 0, 0) "}", 0, "overflows");
    EXPECT_FAIL("{\"__metadata__\":{\"format\":1}}", 0,
                "__metadata__ value for key \"format\" is not a string");
    EXPECT_FAIL("{\"__metadata__\":{\"a\":\"b\",\"c\":null}}", 0, "key \"c\" is not a string");
    EXPECT_FAIL("{\"__metadata__\":[\"pt\"]}", 0, "__metadata__ is not a JSON object");
    /* unknown extra fields in an entry are ignored, as the reference reader does */
    expect_ok("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", "q", 1,
              1);
    tmp_end();
}

static void test_rule5_offsets(void) {
    tmp_begin();
    /* first BEGIN must be 0 */
    EXPECT_FAIL("{" T("a", "F32", "[1]", 4, 8) "}", 8, "must begin at 0");
    /* hole */
    EXPECT_FAIL("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12,
                "tensor \"b\": data_offsets BEGIN 8 leaves a hole");
    /* overlap */
    EXPECT_FAIL("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[1]", 4, 8) "}", 8,
                "tensor \"b\": data_offsets BEGIN 4 overlaps");
    EXPECT_FAIL("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 0, 4) "}", 4,
                "overlaps");
    /* END < BEGIN */
    EXPECT_FAIL("{" T("a", "U8", "[0]", 8, 4) "}", 0, "tensor \"a\": data_offsets END 4 < BEGIN 8");
    /* entries listed out of order are fine: only the sorted walk matters */
    expect_ok("{" T("b", "U8", "[2]", 2, 4) "," T("a", "U8", "[2]", 0, 2) "}", "abcd", 4, 2);
    /* empty tensors may sit anywhere in the walk */
    expect_ok("{" T("e", "F32", "[0,3]", 2, 2) "," T("a", "U8", "[2]", 0, 2) "," T("z", "F32",
              "[0]", 2, 2) "}", "ab", 2, 3);
    tmp_end();
}

static void test_rule6_byte_size(void) {
    tmp_begin();
    EXPECT_FAIL("{" T("a", "F32", "[2]", 0, 4) "}", 4, "tensor \"a\": byte size mismatch");
    EXPECT_FAIL("{" T("a", "BF16", "[2,3]", 0, 16) "}", 16, "byte size mismatch");
    EXPECT_FAIL("{" T("a", "F32", "[]", 0, 8) "}", 8, "byte size mismatch");
    EXPECT_FAIL("{" T("a", "F4", "[3]", 0, 2) "}", 2, "not a whole number of bytes");
    EXPECT_FAIL("{" T("a", "F6_E2M3", "[2,3]", 0, 5) "}", 5, "not a whole number of bytes");
    tmp_end();
}

static void test_rule7_coverage(void) {
    tmp_begin();
    EXPECT_FAIL("{" T("a", "F32", "[1]", 0, 4) "}", 6, "2 trailing bytes");
    EXPECT_FAIL("{}", 3, "3 trailing bytes");
    EXPECT_FAIL("{" T("a", "F32", "[2]", 0, 8) "}", 5, "beyond end of file");
    EXPECT_FAIL("{" T("a", "F32", "[1]", 0, 4) "," T("b", "I64", "[1]", 4, 12) "}", 11,
                "beyond end of file");
    tmp_end();
}

/* Sub-byte and engine-less dtypes get sizes (docs/SAFETENSORS.md §1) and are named by sp_st_tensor_dtype_name. */
static void test_all_dtype_sizes(void) {
    tmp_begin();
    static const char *hdr = "{" T("f4", "F4", "[2,2]", 0, 2) "," T("f6", "F6_E2M3", "[4]", 2, 5)
        "," T("f6b", "F6_E3M2", "[8]", 5, 11) "," T("e5", "F8_E5M2", "[1]", 11, 12) ","
        T("e4", "F8_E4M3", "[2]", 12, 14) "," T("e8", "F8_E8M0", "[1]", 14, 15) ","
        T("fz", "F8_E4M3FNUZ", "[1]", 15, 16) "," T("fy", "F8_E5M2FNUZ", "[1]", 16, 17) ","
        T("c", "C64", "[1]", 17, 25) "}";
    unsigned char data[25];
    fill_bytes(data, sizeof data, 3);
    write_st(tpath("dt.safetensors"), hdr, data, sizeof data);
    st_set *s = NULL;
    sp_err err = {{0}};
    CHECK(sp_st_open_file(&s, tpath("dt.safetensors"), &err) == 0, "%s", err.msg);
    if (s) {
        CHECK(sp_st_count(s) == 9, "count");
        static const char *names[][2] = {{"f4", "F4"}, {"f6", "F6_E2M3"}, {"f6b", "F6_E3M2"},
                                         {"e5", "F8_E5M2"}, {"e4", "F8_E4M3"}, {"c", "C64"}};
        for (int i = 0; i < 6; i++) {
            const st_tensor *t = sp_st_find(s, names[i][0]);
            CHECK(t && t->dtype == SP_DT_UNKNOWN && !strcmp(sp_st_tensor_dtype_name(t), names[i][1]),
                  "%s", names[i][0]);
        }
        const st_tensor *t = sp_st_find(s, "f6b");
        CHECK(t && t->nbytes == 6 && t->numel == 8 && !memcmp(t->data, data + 5, 6), "f6b");
        t = sp_st_find(s, "c");
        CHECK(t && t->nbytes == 8 && !memcmp(t->data, data + 17, 8), "c64");
        CHECK(sp_st_get(s, "e4", SP_DT_UNKNOWN, -1, NULL, &t, &err) != 0 &&
              strstr(err.msg, "F8_E4M3"), "%s", err.msg);
    }
    sp_st_close(s);
    CHECK(sp_st_dtype_from_name("BF16") == SP_DT_BF16 && sp_st_dtype_from_name("BOOL") == SP_DT_BOOL &&
          sp_st_dtype_from_name("F8_E4M3") == SP_DT_UNKNOWN && sp_st_dtype_from_name("x") ==
          SP_DT_UNKNOWN, "sp_st_dtype_from_name");
    tmp_end();
}

/* docs/SAFETENSORS.md §3: a header without padding puts tensors at odd offsets; they must be copied, not cast. */
static void test_unaligned(void) {
    tmp_begin();
    /* 8 + N is odd by construction below */
    char hdr[512];
    snprintf(hdr, sizeof hdr, "{" T("x", "F32", "[3]", 0, 12) "," T("y", "I64", "[2]", 12, 28) ","
             T("z", "U8", "[1]", 28, 29) "," T("w", "BF16", "[2]", 29, 33) ","
             T("v", "F64", "[1]", 33, 41) "}");
    if ((8 + strlen(hdr)) % 2 == 0) strcat(hdr, " ");
    unsigned char data[41];
    float x[3] = {1.5f, -2.25f, 3.0e7f};
    int64_t y[2] = {-5, 1234567890123ll};
    uint16_t w[2] = {sp_f32_to_bf16(0.75f), sp_f32_to_bf16(-8.0f)};
    double v = 3.141592653589793;
    memcpy(data, x, 12);
    memcpy(data + 12, y, 16);
    data[28] = 0xAB;
    memcpy(data + 29, w, 4);
    memcpy(data + 33, &v, 8);
    write_st(tpath("u.safetensors"), hdr, data, sizeof data);
    st_set *s = NULL;
    sp_err err = {{0}};
    CHECK(sp_st_open_file(&s, tpath("u.safetensors"), &err) == 0, "%s", err.msg);
    if (!s) goto out;
    const st_tensor *t = NULL;
    int64_t s3[1] = {3}, s2[1] = {2};
    CHECK(sp_st_get(s, "x", SP_DT_F32, 1, s3, &t, &err) == 0, "%s", err.msg);
    if (t) {
        CHECK(sp_st_tensor_file_offset(t) % 2 == 1, "x offset should be odd");
        CHECK((uintptr_t)t->data % 4 == 0, "x not aligned");
        const float *f = t->data;
        CHECK(f[0] == 1.5f && f[1] == -2.25f && f[2] == 3.0e7f, "x values");
    }
    CHECK(sp_st_get(s, "y", SP_DT_I64, 1, s2, &t, &err) == 0 && (uintptr_t)t->data % 8 == 0, "y");
    if (t) CHECK(((const int64_t *)t->data)[0] == -5 &&
                 ((const int64_t *)t->data)[1] == 1234567890123ll, "y values");
    CHECK(sp_st_get(s, "w", SP_DT_BF16, 1, s2, &t, &err) == 0 && (uintptr_t)t->data % 2 == 0, "w");
    if (t) CHECK(sp_bf16_to_f32(((const uint16_t *)t->data)[0]) == 0.75f &&
                 sp_bf16_to_f32(((const uint16_t *)t->data)[1]) == -8.0f, "w values");
    t = sp_st_find(s, "v");
    CHECK(t && (uintptr_t)t->data % 8 == 0 && *(const double *)t->data == v, "v");
    t = sp_st_find(s, "z");
    CHECK(t && *(const unsigned char *)t->data == 0xAB, "z");
    sp_st_close(s);
out:
    tmp_end();
}

/* ---- writer: by-reference tensors, sharded checkpoints ------------------------------- */
static void test_add_ref(void) {
    tmp_begin();
    sp_err err = {{0}};
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    int64_t sh[1] = {4};
    st_writer *w = sp_st_writer_create();
    CHECK(sp_st_writer_add_ref(w, "ref", SP_DT_F32, 1, sh, a, &err) == 0, "%s", err.msg);
    CHECK(sp_st_writer_add(w, "copy", SP_DT_F32, 1, sh, b, &err) == 0, "%s", err.msg);
    a[0] = 100; /* seen: only the pointer was kept */
    b[0] = 100; /* not seen: copied at add time */
    CHECK(sp_st_writer_set_metadata(w, "format", "mlx", &err) == 0, "%s", err.msg);
    CHECK(sp_st_writer_save(w, tpath("r.safetensors"), &err) == 0, "%s", err.msg);
    /* a failing rename (target is a directory) leaves no temp file behind */
    mkdir(tpath("isdir"), 0755);
    CHECK(sp_st_writer_save(w, tpath("isdir"), &err) != 0 && strstr(err.msg, "isdir"), "%s",
          err.msg);
    CHECK(count_files(".tmp") == 0, "temp file left after failed rename");
    rmdir(tpath("isdir"));
    CHECK(sp_st_writer_save(w, tpath("nodir/x.safetensors"), &err) != 0 &&
          strstr(err.msg, "nodir"), "%s", err.msg);
    /* writer argument errors */
    CHECK(sp_st_writer_add(w, "", SP_DT_F32, 1, sh, b, &err) != 0 && strstr(err.msg, "empty"), "e");
    CHECK(sp_st_writer_add(w, "__metadata__", SP_DT_F32, 1, sh, b, &err) != 0, "reserved");
    CHECK(sp_st_writer_add(w, "u", SP_DT_UNKNOWN, 1, sh, b, &err) != 0, "dtype");
    CHECK(sp_st_writer_add(w, "n", SP_DT_F32, 1, sh, NULL, &err) != 0, "null data");
    int64_t neg[1] = {-1};
    CHECK(sp_st_writer_add(w, "neg", SP_DT_F32, 1, neg, b, &err) != 0, "negative dim");
    CHECK(sp_st_writer_add(w, "bad\xff", SP_DT_F32, 1, sh, b, &err) != 0, "utf8 name");
    CHECK(sp_st_writer_add(w, "ref", SP_DT_F32, 1, sh, b, &err) == 0, "dup add ok until save");
    CHECK(sp_st_writer_save(w, tpath("d.safetensors"), &err) != 0 && strstr(err.msg, "\"ref\"") &&
          strstr(err.msg, "twice"), "%s", err.msg);
    CHECK(count_files("d.safetensors") == 0, "no file written on error");
    sp_st_writer_free(w);
    st_set *s = NULL;
    CHECK(sp_st_open_file(&s, tpath("r.safetensors"), &err) == 0, "%s", err.msg);
    if (s) {
        const float *r = sp_st_find(s, "ref")->data, *c = sp_st_find(s, "copy")->data;
        CHECK(r[0] == 100 && r[3] == 4 && c[0] == 5 && c[3] == 8, "ref %g copy %g", r[0], c[0]);
        CHECK(!strcmp(sp_st_metadata(s, "format"), "mlx"), "format replaced");
    }
    sp_st_close(s);
    CHECK(count_files(".tmp") == 0, "temp file left");
    tmp_end();
}

#define N_SHARD_T 12

static void test_sharded(void) {
    tmp_begin();
    sp_err err = {{0}};
    static const sp_dtype dts[4] = {SP_DT_F32, SP_DT_BF16, SP_DT_I64, SP_DT_U8};
    unsigned char *buf[N_SHARD_T];
    char names[N_SHARD_T][32];
    int64_t shapes[N_SHARD_T][2];
    st_writer *w = sp_st_writer_create();
    for (int i = 0; i < N_SHARD_T; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.w", i);
        shapes[i][0] = 1 + i % 5;
        shapes[i][1] = i == 7 ? 300 : 3 + i; /* tensor 7 (2400 B+) alone exceeds the limit */
        size_t n = sp_dtype_size(dts[i % 4]) * (size_t)(shapes[i][0] * shapes[i][1]);
        buf[i] = malloc(n);
        fill_bytes(buf[i], n, 100u + (unsigned)i);
        CHECK(sp_st_writer_add_ref(w, names[i], dts[i % 4], 2, shapes[i], buf[i], &err) == 0, "%s",
              err.msg);
    }
    CHECK(sp_st_writer_save_sharded(w, tmpdir, 256, &err) == 0, "%s", err.msg);
    int n_shards = count_files("-of-");
    CHECK(n_shards >= 3, "%d shards", n_shards);
    CHECK(count_files("model.safetensors.index.json") == 1, "index");
    CHECK(count_files(".tmp") == 0, "temp files left");
    char first[64];
    snprintf(first, sizeof first, "model-00001-of-%05d.safetensors", n_shards);
    CHECK(count_files(first) == 1, "%s", first);

    st_set *s = NULL;
    CHECK(sp_st_open_dir(&s, tmpdir, &err) == 0, "%s", err.msg);
    if (s) {
        CHECK(sp_st_count(s) == N_SHARD_T, "count %d", sp_st_count(s));
        for (int i = 0; i < N_SHARD_T; i++) {
            const st_tensor *t = NULL;
            CHECK(sp_st_get(s, names[i], dts[i % 4], 2, shapes[i], &t, &err) == 0, "%s", err.msg);
            if (t) CHECK(!memcmp(t->data, buf[i], t->nbytes), "%s data", names[i]);
            if (t) CHECK(strstr(t->file, "-of-") != NULL, "%s file %s", names[i], t->file);
        }
        CHECK(!strcmp(sp_st_metadata(s, "format"), "pt"), "metadata");
    }
    sp_st_close(s);
    /* index: total_size = sum of tensor bytes; every name mapped */
    size_t n;
    char *idx = (char *)read_bytes(tpath("model.safetensors.index.json"), &n);
    if (idx) {
        idx[n] = 0;
        size_t total = 0;
        for (int i = 0; i < N_SHARD_T; i++)
            total += sp_dtype_size(dts[i % 4]) * (size_t)(shapes[i][0] * shapes[i][1]);
        char want[64];
        snprintf(want, sizeof want, "\"total_size\": %zu", total);
        CHECK(strstr(idx, want) != NULL, "%s not in index", want);
        for (int i = 0; i < N_SHARD_T; i++) CHECK(strstr(idx, names[i]) != NULL, "%s", names[i]);
        free(idx);
    }
    /* everything in one shard: model.safetensors, and the stale index goes away */
    CHECK(sp_st_writer_save_sharded(w, tmpdir, 0, &err) == 0, "%s", err.msg);
    CHECK(count_files("model.safetensors.index.json") == 0, "stale index removed");
    CHECK(count_files("model.safetensors") == 1, "single file");
    s = NULL;
    CHECK(sp_st_open_dir(&s, tmpdir, &err) == 0 && sp_st_count(s) == N_SHARD_T, "%s", err.msg);
    if (s) CHECK(strstr(sp_st_find(s, names[3])->file, "/model.safetensors") != NULL, "single");
    sp_st_close(s);
    CHECK(count_files(".tmp") == 0, "temp files left");
    sp_st_writer_free(w);
    for (int i = 0; i < N_SHARD_T; i++) free(buf[i]);
    tmp_end();
}

/* ---- docs/SAFETENSORS.md §4 index.json errors ---------------------------------------------------------- */
static void save_two(const char *file, const char *n1, const char *n2) {
    sp_err err = {{0}};
    float x[2] = {1, 2};
    int64_t sh[1] = {2};
    st_writer *w = sp_st_writer_create();
    sp_st_writer_add(w, n1, SP_DT_F32, 1, sh, x, &err);
    if (n2) sp_st_writer_add(w, n2, SP_DT_F32, 1, sh, x, &err);
    CHECK(sp_st_writer_save(w, tpath(file), &err) == 0, "%s", err.msg);
    sp_st_writer_free(w);
}

static void expect_dir_fail_at(int line, const char *index, const char *want) {
    if (index) write_bytes(tpath("model.safetensors.index.json"), index, strlen(index));
    st_set *s = (st_set *)&s;
    sp_err err = {{0}};
    int rc = sp_st_open_dir(&s, tmpdir, &err);
    if (rc == 0 || s != NULL || !strstr(err.msg, want)) {
        harness_case_failed++;
        fprintf(stderr, "  line %d: want \"%s\", got rc=%d \"%s\"\n", line, want, rc, err.msg);
    }
    if (rc == 0) sp_st_close(s);
}
#define EXPECT_DIR_FAIL(index, want) expect_dir_fail_at(__LINE__, index, want)

static void test_index_errors(void) {
    tmp_begin();
    EXPECT_DIR_FAIL(NULL, "no model.safetensors.index.json or model.safetensors");
    {
        st_set *s = NULL;
        sp_err err = {{0}};
        CHECK(sp_st_open_dir(&s, tpath("nonexistent"), &err) != 0 && !s &&
              strstr(err.msg, "nonexistent: cannot open"), "%s", err.msg);
        CHECK(sp_st_open_dir(&s, "tests/data/ref-logits/qwen3/config.json", &err) != 0 &&
              strstr(err.msg, "not a directory"), "%s", err.msg);
    }
    save_two("s1.safetensors", "a", "b");
    save_two("s2.safetensors", "c", NULL);
    save_two("s3.safetensors", "a", NULL); /* "a" again */
    sp_err err = {{0}};
    st_set *s = NULL;
    const char *good = "{\"metadata\":{\"total_size\":24},\"weight_map\":{\"a\":\"s1.safetensors\","
                       "\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}";
    write_bytes(tpath("model.safetensors.index.json"), good, strlen(good));
    CHECK(sp_st_open_dir(&s, tmpdir, &err) == 0 && sp_st_count(s) == 3, "%s", err.msg);
    if (s) CHECK(strstr(sp_st_find(s, "c")->file, "s2.safetensors") != NULL, "c in s2");
    sp_st_close(s);
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s9.safetensors\"}}",
                    "s9.safetensors: cannot open");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s1.safetensors\",\"x\":\"s2.safetensors\"}}",
                    "tensor \"x\" in");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s1.safetensors\",\"x\":\"s2.safetensors\"}}",
                    "s2.safetensors, but that shard has no such tensor");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s2.safetensors\",\"c\":\"s2.safetensors\"}}",
                    "tensor \"a\" in " "/tmp/specula-test-");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\","
                    "\"c\":\"s2.safetensors\"}}", "s1.safetensors");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\","
                    "\"c\":\"s2.safetensors\"}}", "but it is in");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s3.safetensors\"}}",
                    "tensor \"a\" appears in two shards");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s1.safetensors\"", "not valid JSON");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}",
                    "duplicate");
    EXPECT_DIR_FAIL("{\"metadata\":{}}", "\"weight_map\" is missing");
    EXPECT_DIR_FAIL("{\"weight_map\":[]}", "\"weight_map\" is missing or not an object");
    EXPECT_DIR_FAIL("{\"weight_map\":{}}", "\"weight_map\" is empty");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":1}}", "value for \"a\" is not a string");
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"../s1.safetensors\"}}", "not a plain file name");
    /* a corrupt shard: its own docs/SAFETENSORS.md §2 message, prefixed by the index */
    write_st(tpath("s4.safetensors"), "{" T("d", "F32", "[2]", 0, 4) "}", "abcd", 4);
    EXPECT_DIR_FAIL("{\"weight_map\":{\"a\":\"s1.safetensors\",\"d\":\"s4.safetensors\"}}",
                    "s4.safetensors: tensor \"d\": byte size mismatch");
    tmp_end();
}

/* Re-writing a fixture (made by a reference-style writer) through st_writer must give the
 * same bytes: same compact header, same padding, same layout. */
static void test_fixture_rewrite_identical(void) {
    tmp_begin();
    sp_err err = {{0}};
    const char *src = "tests/data/ref-logits/llama/model.safetensors";
    st_set *s = NULL;
    CHECK(sp_st_open_file(&s, src, &err) == 0, "%s", err.msg);
    if (s) {
        st_writer *w = sp_st_writer_create();
        for (int i = sp_st_count(s) - 1; i >= 0; i--) { /* insertion order must not matter */
            const st_tensor *t = sp_st_at(s, i);
            CHECK(sp_st_writer_add_ref(w, t->name, t->dtype, t->ndim, t->shape, t->data, &err) == 0,
                  "%s", err.msg);
        }
        CHECK(sp_st_writer_save(w, tpath("re.safetensors"), &err) == 0, "%s", err.msg);
        sp_st_writer_free(w);
        size_t na, nb;
        unsigned char *a = read_bytes(src, &na), *b = read_bytes(tpath("re.safetensors"), &nb);
        CHECK(a && b && na == nb && memcmp(a, b, na) == 0, "rewrite differs (%zu vs %zu bytes)",
              na, nb);
        free(a);
        free(b);
    }
    sp_st_close(s);
    tmp_end();
}

/* ---- fuzz: random corruptions of a valid file ---------------------------------------- */
static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* One random edit of the header text: keeps the JSON mostly well-formed so the deeper
 * checks (offsets, sizes, dtypes) are reached, not just the parser. */
static size_t mutate_header(unsigned char *b, size_t len, size_t cap) {
    static const char tok[] = "{}[]\",:-0123456789 \t\nFIUB";
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
    if (n > len - 8) n = len - 8;
    if (n == 0) return len;
    size_t p = 8 + rnd_below((size_t)n);
    switch (rnd_below(7)) {
    case 0: /* digit → digit: shifts shapes and offsets */
        for (size_t k = 0; k < 64; k++) {
            size_t q = 8 + rnd_below((size_t)n);
            if (b[q] >= '0' && b[q] <= '9') {
                b[q] = (unsigned char)('0' + rnd_below(10));
                break;
            }
        }
        break;
    case 1: b[p] = (unsigned char)tok[rnd_below(sizeof tok - 1)]; break;
    case 2: /* delete one header byte, keep N consistent */
        memmove(b + p, b + p + 1, len - p - 1);
        len--, n--;
        break;
    case 3: /* insert one byte, keep N consistent */
        if (len + 1 > cap) break;
        memmove(b + p + 1, b + p, len - p);
        b[p] = (unsigned char)tok[rnd_below(sizeof tok - 1)];
        len++, n++;
        break;
    case 4: { /* swap a dtype for another */
        static const char *dt[] = {"F32", "F16", "I64", "I32", "BOOL", "U8", "F64", "F4"};
        for (size_t k = 0; k < 64; k++) {
            size_t q = 8 + rnd_below((size_t)n);
            if (q + 4 < 8 + n && b[q] == '"' && b[q + 1] >= 'A' && b[q + 1] <= 'Z') {
                const char *d = dt[rnd_below(8)];
                size_t dl = strlen(d);
                if (q + 1 + dl < 8 + n) memcpy(b + q + 1, d, dl);
                break;
            }
        }
        break;
    }
    case 5: { /* shift one tensor's data_offsets by the same delta: holes and overlaps */
        static const char key[] = "\"data_offsets\":[";
        unsigned char *q = memmem(b + p, (size_t)(8 + n - p), key, sizeof key - 1);
        if (!q) q = memmem(b + 8, (size_t)n, key, sizeof key - 1);
        if (!q) break;
        size_t start = (size_t)(q - b) + sizeof key - 1, avail = 8 + n - start;
        char txt[48], *e1, *e2;
        if (start >= 8 + n) break;
        memcpy(txt, b + start, avail < 47 ? avail : 47);
        txt[avail < 47 ? avail : 47] = 0;
        unsigned long long b0 = strtoull(txt, &e1, 10), e0 = strtoull(e1 + 1, &e2, 10);
        if (*e1 != ',' || *e2 != ']') break;
        long long d = (long long)rnd_below(17) - 8;
        if ((long long)b0 + d < 0) d = -d;
        char rep[64];
        int rl = snprintf(rep, sizeof rep, "%lld,%lld", (long long)b0 + d, (long long)e0 + d);
        size_t old = (size_t)(e2 - txt);
        if (len - old + (size_t)rl > cap) break;
        memmove(b + start + rl, b + start + old, len - start - old);
        memcpy(b + start, rep, (size_t)rl);
        len = len - old + (size_t)rl;
        n = n - old + (size_t)rl;
        break;
    }
    default: b[p] ^= (unsigned char)(1u << rnd_below(8)); break;
    }
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    return len;
}

static void test_fuzz(void) {
    tmp_begin();
    sp_err err = {{0}};
    st_writer *w = sp_st_writer_create();
    static const sp_dtype dts[6] = {SP_DT_F32, SP_DT_BF16, SP_DT_I64, SP_DT_U8, SP_DT_F16,
                                    SP_DT_BOOL};
    unsigned char payload[256];
    fill_bytes(payload, sizeof payload, 42);
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        int64_t sh[2] = {1 + i % 3, i == 5 ? 0 : 2 + i % 4};
        CHECK(sp_st_writer_add(w, name, dts[i % 6], i == 6 ? 0 : 2, sh, payload, &err) == 0, "%s",
              err.msg);
    }
    CHECK(sp_st_writer_save(w, tpath("base.safetensors"), &err) == 0, "%s", err.msg);
    sp_st_writer_free(w);
    size_t base_len;
    unsigned char *base = read_bytes(tpath("base.safetensors"), &base_len);
    size_t cap = base_len + 64;
    unsigned char *b = malloc(cap);
    int opened = 0, failed = 0, bad_invariant = 0;
    static const char *kinds[] = {"too small", "too large", "beyond end of file", "UTF-8",
                                  "not valid JSON", "duplicate", "not a JSON object",
                                  "unknown dtype", "byte size", "hole", "overlaps", "trailing",
                                  "END", "negative", "not an integer", "whole number"};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))
    int kind_count[N_KINDS] = {0};
    const char *path = tpath("fuzz.safetensors");
    /* ST_FUZZ_ITERS / ST_FUZZ_SEED widen a manual run; the suite uses 3000 and a fixed seed */
    int iters = getenv("ST_FUZZ_ITERS") ? atoi(getenv("ST_FUZZ_ITERS")) : 3000;
    if (getenv("ST_FUZZ_SEED")) rng_state ^= strtoull(getenv("ST_FUZZ_SEED"), NULL, 10) * 0x9E37ull;
    for (int it = 0; it < iters; it++) {
        memcpy(b, base, base_len);
        size_t len = base_len;
        int edits = 1 + (int)rnd_below(3);
        for (int e = 0; e < edits; e++) {
            switch (rnd_below(8)) {
            case 0: /* random byte flips anywhere in the header */
                for (int k = 0, m = 1 + (int)rnd_below(4); k < m; k++)
                    b[rnd_below(len < 8 + 200 ? len : 8 + 200)] ^= (unsigned char)(1 + rnd_below(255));
                break;
            case 1: { /* random header length field */
                uint64_t n = rnd_below(3) == 0 ? rnd() : rnd_below(len + 16);
                for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
                break;
            }
            case 2: len = rnd_below(len); break; /* truncation */
            case 3: { /* trailing garbage */
                size_t add = 1 + rnd_below(cap - len > 1 ? cap - len - 1 : 1);
                if (len + add <= cap) {
                    fill_bytes(b + len, add, (unsigned)it);
                    len += add;
                }
                break;
            }
            default: len = mutate_header(b, len, cap); break; /* JSON edits */
            }
            if (len < 8) break;
        }
        write_bytes(path, b, len);
        st_set *s = (st_set *)&s;
        err.msg[0] = 0;
        if (sp_st_open_file(&s, path, &err) != 0) {
            failed++;
            for (int k = 0; k < N_KINDS; k++)
                if (strstr(err.msg, kinds[k])) {
                    kind_count[k]++;
                    break;
                }
            if (s != NULL || err.msg[0] == 0) bad_invariant++;
            continue;
        }
        opened++;
        /* invariants of an opened file: every tensor's bytes are inside the file and equal to
         * them, sizes agree with dtype × shape, pointers are aligned, and the tensors tile the
         * data buffer exactly */
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
        size_t covered = 0;
        for (int i = 0; i < sp_st_count(s); i++) {
            const st_tensor *t = sp_st_at(s, i);
            uint64_t off = sp_st_tensor_file_offset(t);
            int64_t numel = 1;
            for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
            size_t es = sp_dtype_size(t->dtype);
            int ok = numel == t->numel && off >= 8 + n && off + t->nbytes <= len &&
                     (t->nbytes == 0 || memcmp(t->data, b + off, t->nbytes) == 0);
            if (es) ok = ok && t->nbytes == (size_t)numel * es && (uintptr_t)t->data % es == 0;
            if (!ok) bad_invariant++;
            covered += t->nbytes;
        }
        if (covered != len - 8 - n) bad_invariant++;
        sp_st_close(s);
    }
    CHECK(bad_invariant == 0, "%d invariant violations", bad_invariant);
    CHECK(opened >= iters / 100 && failed >= iters / 2, "opened %d, failed %d", opened, failed);
    printf("  fuzz: %d corruptions, %d opened (all invariants held), %d rejected\n", iters,
           opened, failed);
    printf("  rejections by kind:");
    for (int k = 0; k < N_KINDS; k++) printf(" [%s] %d", kinds[k], kind_count[k]);
    printf("\n");
    free(b);
    free(base);
    tmp_end();
}

int main(void) {
    RUN(test_roundtrip_dtypes);
    RUN(test_get);
    RUN(test_rule1_file_too_small);
    RUN(test_rule2_header_size);
    RUN(test_rule3_utf8_json_object);
    RUN(test_rule4_duplicate_keys);
    RUN(test_entry_types);
    RUN(test_rule5_offsets);
    RUN(test_rule6_byte_size);
    RUN(test_rule7_coverage);
    RUN(test_all_dtype_sizes);
    RUN(test_unaligned);
    RUN(test_add_ref);
    RUN(test_sharded);
    RUN(test_index_errors);
    RUN(test_fixtures);
    RUN(test_fixture_rewrite_identical);
    RUN(test_fuzz);
    return harness_done("test_safetensors");
}
