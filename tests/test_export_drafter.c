/* test_export_drafter.c — `specula export-gguf -m DRAFTER --target TARGET` end to end through the
 * binary: random drafters from `new-drafter` for tiny targets (Qwen3, Llama, Gemma-4), exported
 * and parsed back with the GGUF reader (src/formats/gguf_read.c). For each drafter kind — z-lab
 * DFlash, DeepSpec DSpark and DFlash (Qwen3 block), Gemma-4 DSpark, Gemma-4 assistant, and a
 * SpecForge EAGLE-3 checkpoint written by the test itself — every
 * key (name, type, the values llama.cpp acts on) and every tensor (name, ggml dims, type) is
 * checked against the tables below, which restate llama.cpp's converter (docs/EXPORT.md); a few
 * tensors' bytes against the safetensors; a drafter quantized by `quantize --drafter` keeps its
 * blocks byte for byte; and each malformed input fails with a clear error and
 * no file. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "core/core.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

static char tmp[256], cli[1024];
static char out[65536];

static const char *P(const char *name) {
    static char buf[8][600];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 600, "%s/%s", tmp, name);
    return b;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return harness_run(cmd, out, sizeof out);
}

/* ---- expected tables ------------------------------------------------------------------------- */

typedef struct {
    const char *key;
    uint32_t type; /* GGUF_TYPE_*; ARRAY for arrays */
} want_kv;

/* the keys llama.cpp's converter writes for arch dflash with a Qwen3 block (docs/EXPORT.md) */
static const want_kv DFLASH_KEYS[] = {
    {"general.architecture", GGUF_TYPE_STRING},
    {"general.name", GGUF_TYPE_STRING},
    {"general.file_type", GGUF_TYPE_UINT32},
    {"dflash.block_count", GGUF_TYPE_UINT32},
    {"dflash.context_length", GGUF_TYPE_UINT32},
    {"dflash.embedding_length", GGUF_TYPE_UINT32},
    {"dflash.feed_forward_length", GGUF_TYPE_UINT32},
    {"dflash.attention.head_count", GGUF_TYPE_UINT32},
    {"dflash.attention.head_count_kv", GGUF_TYPE_UINT32},
    {"dflash.rope.freq_base", GGUF_TYPE_FLOAT32},
    {"dflash.attention.layer_norm_rms_epsilon", GGUF_TYPE_FLOAT32},
    {"dflash.attention.key_length", GGUF_TYPE_UINT32},
    {"dflash.attention.value_length", GGUF_TYPE_UINT32},
    {"dflash.block_size", GGUF_TYPE_UINT32},
    {"dflash.target_layers", GGUF_TYPE_ARRAY},
    {"tokenizer.ggml.mask_token_id", GGUF_TYPE_UINT32},
};
/* + DeepSpec */
static const want_kv DSPARK_KEYS[] = {
    {"dflash.sample_from_anchor", GGUF_TYPE_BOOL},
    {"dflash.has_confidence_head", GGUF_TYPE_BOOL},
};
/* + Gemma-4 block */
static const want_kv GEMMA_KEYS[] = {
    {"dflash.rope.freq_base_swa", GGUF_TYPE_FLOAT32},   {"dflash.rope.dimension_count", GGUF_TYPE_UINT32},
    {"dflash.embedding_scale", GGUF_TYPE_FLOAT32},      {"dflash.attention.scale", GGUF_TYPE_FLOAT32},
    {"dflash.hidden_activation", GGUF_TYPE_STRING},
};
/* gemma4-assistant: the gemma4 keys + the two assistant ones */
static const want_kv ASSISTANT_KEYS[] = {
    {"general.architecture", GGUF_TYPE_STRING},
    {"general.name", GGUF_TYPE_STRING},
    {"general.file_type", GGUF_TYPE_UINT32},
    {"gemma4-assistant.context_length", GGUF_TYPE_UINT32},
    {"gemma4-assistant.embedding_length", GGUF_TYPE_UINT32},
    {"gemma4-assistant.block_count", GGUF_TYPE_UINT32},
    {"gemma4-assistant.feed_forward_length", GGUF_TYPE_UINT32},
    {"gemma4-assistant.attention.head_count", GGUF_TYPE_UINT32},
    {"gemma4-assistant.attention.head_count_kv", GGUF_TYPE_ARRAY},
    {"gemma4-assistant.attention.layer_norm_rms_epsilon", GGUF_TYPE_FLOAT32},
    {"gemma4-assistant.rope.freq_base", GGUF_TYPE_FLOAT32},
    {"gemma4-assistant.attention.sliding_window", GGUF_TYPE_UINT32},
    {"gemma4-assistant.attention.sliding_window_pattern", GGUF_TYPE_ARRAY},
    {"gemma4-assistant.attention.key_length", GGUF_TYPE_UINT32},
    {"gemma4-assistant.attention.value_length", GGUF_TYPE_UINT32},
    {"gemma4-assistant.attention.key_length_swa", GGUF_TYPE_UINT32},
    {"gemma4-assistant.attention.value_length_swa", GGUF_TYPE_UINT32},
    {"gemma4-assistant.rope.freq_base_swa", GGUF_TYPE_FLOAT32},
    {"gemma4-assistant.rope.dimension_count", GGUF_TYPE_UINT32},
    {"gemma4-assistant.rope.dimension_count_swa", GGUF_TYPE_UINT32},
    {"gemma4-assistant.attention.shared_kv_layers", GGUF_TYPE_UINT32},
    {"gemma4-assistant.embedding_length_per_layer_input", GGUF_TYPE_UINT32},
    {"gemma4-assistant.final_logit_softcapping", GGUF_TYPE_FLOAT32},
    {"gemma4-assistant.embedding_length_out", GGUF_TYPE_UINT32},
    {"gemma4-assistant.nextn_predict_layers", GGUF_TYPE_UINT32},
};

/* expected tensors: name, ggml dims (ne0 first), type */
typedef struct {
    char name[64];
    int nd;
    int64_t ne[2];
    uint32_t type;
} want_t;

typedef struct {
    want_t v[160];
    int n;
} want_list;

static void wt(want_list *l, uint32_t type, int64_t ne0, int64_t ne1, const char *fmt, int i) {
    want_t *t = &l->v[l->n++];
    snprintf(t->name, sizeof t->name, fmt, i);
    t->nd = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->type = type;
}

typedef struct {
    int H, I, NH, KVH, D, L, V;
} dims;

static int cfg_int(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

static dims read_dims(const char *dir, int gemma_full) {
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *r = json_load_file(p, 0, NULL), *c = r;
    if (json_is_object(json_object_get(r, "text_config"))) c = json_object_get(r, "text_config");
    dims d = {cfg_int(c, "hidden_size"), cfg_int(c, "intermediate_size"), cfg_int(c, "num_attention_heads"),
              cfg_int(c, gemma_full ? "num_global_key_value_heads" : "num_key_value_heads"),
              cfg_int(c, gemma_full ? "global_head_dim" : "head_dim"), cfg_int(c, "num_hidden_layers"),
              cfg_int(c, "vocab_size")};
    json_decref(r);
    return d;
}

/* per-layer tensors of the Qwen3 block (llama.cpp names); w = the 2-D weight type */
static void qwen3_layers(want_list *l, const dims *d, uint32_t w) {
    for (int i = 0; i < d->L; i++) {
        wt(l, 0, d->H, 0, "blk.%d.attn_norm.weight", i);
        wt(l, w, d->H, d->NH * d->D, "blk.%d.attn_q.weight", i);
        wt(l, w, d->H, d->KVH * d->D, "blk.%d.attn_k.weight", i);
        wt(l, w, d->H, d->KVH * d->D, "blk.%d.attn_v.weight", i);
        wt(l, w, d->NH * d->D, d->H, "blk.%d.attn_output.weight", i);
        wt(l, 0, d->D, 0, "blk.%d.attn_q_norm.weight", i);
        wt(l, 0, d->D, 0, "blk.%d.attn_k_norm.weight", i);
        wt(l, 0, d->H, 0, "blk.%d.ffn_norm.weight", i);
        wt(l, w, d->H, d->I, "blk.%d.ffn_gate.weight", i);
        wt(l, w, d->H, d->I, "blk.%d.ffn_up.weight", i);
        wt(l, w, d->I, d->H, "blk.%d.ffn_down.weight", i);
    }
}

/* ---- checking a file ------------------------------------------------------------------------------ */

static int kv_in(const want_kv *t, int n, const char *key, size_t len, uint32_t *type) {
    for (int i = 0; i < n; i++)
        if (strlen(t[i].key) == len && !memcmp(t[i].key, key, len)) {
            *type = t[i].type;
            return 1;
        }
    return 0;
}

/* every non-tokenizer key is in one of the tables with its type, and every table key is present */
static void check_keys(const gguf_file *f, const want_kv *const *tabs, const int *ns, int n_tabs) {
    int n_tok = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10) &&
            !(kv->key.len == 28 && !memcmp(kv->key.ptr, "tokenizer.ggml.mask_token_id", 28))) {
            n_tok++;
            continue;
        }
        uint32_t type = 99;
        int found = 0;
        for (int t = 0; t < n_tabs && !found; t++) found = kv_in(tabs[t], ns[t], kv->key.ptr, kv->key.len, &type);
        CHECK(found, "unexpected key %.*s", (int)kv->key.len, kv->key.ptr);
        CHECK(!found || type == kv->type, "key %.*s has type %u, expected %u", (int)kv->key.len, kv->key.ptr,
              kv->type, type);
    }
    for (int t = 0; t < n_tabs; t++)
        for (int i = 0; i < ns[t]; i++) CHECK(sp_gguf_get(f, tabs[t][i].key) != NULL, "missing key %s", tabs[t][i].key);
    CHECK(n_tok >= 3, "only %d tokenizer keys", n_tok);
}

static void check_tensors(const gguf_file *f, const want_list *l) {
    CHECK(f->n_tensors == (uint64_t)l->n, "%llu tensors, expected %d", (unsigned long long)f->n_tensors, l->n);
    for (int i = 0; i < l->n; i++) {
        const want_t *w = &l->v[i];
        const gguf_tensor_info *t = sp_gguf_find_tensor(f, w->name);
        CHECK(t != NULL, "missing tensor %s", w->name);
        if (!t) continue;
        CHECK(t->n_dims == (uint32_t)w->nd && t->dims[0] == (uint64_t)w->ne[0] &&
                  (w->nd == 1 || t->dims[1] == (uint64_t)w->ne[1]),
              "%s: dims %u [%llu, %llu], expected %d [%lld, %lld]", w->name, t->n_dims,
              (unsigned long long)t->dims[0], (unsigned long long)(t->n_dims > 1 ? t->dims[1] : 0), w->nd,
              (long long)w->ne[0], (long long)w->ne[1]);
        CHECK(t->type == w->type, "%s: type %u, expected %u", w->name, t->type, w->type);
    }
}

static int64_t key_int(const gguf_file *f, const char *key) {
    int64_t v = -1;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_i64(f, key, &v, &err) == 0, "%s: %s", key, err.msg);
    return v;
}

static double key_f(const gguf_file *f, const char *key) {
    double v = NAN;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_f64(f, key, &v, &err) == 0, "%s: %s", key, err.msg);
    return v;
}

static void key_str_is(const gguf_file *f, const char *key, const char *want) {
    gguf_str s = {0};
    sp_err err = {{0}};
    CHECK(sp_gguf_get_str(f, key, &s, &err) == 0 && s.len == strlen(want) && !memcmp(s.ptr, want, s.len),
          "%s = %.*s, expected %s", key, (int)s.len, s.ptr ? s.ptr : "", want);
}

/* token list = the target's vocabulary (llama.cpp sizes token_embd by it) */
static void check_vocab(const gguf_file *f, int V, const char *model) {
    const gguf_kv *t = NULL;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &t, &err) == 0 && t->arr_n == (uint64_t)V,
          "tokenizer.ggml.tokens: %s", err.msg);
    key_str_is(f, "tokenizer.ggml.model", model);
}

/* the bytes of GGUF tensor gg equal safetensors tensor hf of dir (both f32) */
static void check_bytes(const gguf_file *f, const char *gg, const char *dir, const char *hf) {
    st_set *st = NULL;
    sp_err err = {{0}};
    CHECK(sp_st_open_dir(&st, dir, &err) == 0, "%s", err.msg);
    if (!st) return;
    const st_tensor *s = sp_st_find(st, hf);
    const gguf_tensor_info *t = sp_gguf_find_tensor(f, gg);
    const void *data = t ? sp_gguf_tensor_data(f, t, &err) : NULL;
    CHECK(s && data && s->dtype == SP_DT_F32 && t->nbytes == s->nbytes && !memcmp(data, s->data, s->nbytes),
          "%s differs from %s", gg, hf);
    sp_st_close(st);
}

static gguf_file *export_ok(const char *drafter, const char *target, const char *file, const char *extra) {
    int rc = sh("%s export-gguf -m %s --target %s -o %s %s 2>&1", cli, P(drafter), P(target), P(file), extra);
    CHECK(rc == 0, "export %s: exit %d: %s", drafter, rc, out);
    sp_err err = {{0}};
    gguf_file *f = rc == 0 ? sp_gguf_open(P(file), &err) : NULL;
    CHECK(rc != 0 || f, "reading back %s: %s", file, err.msg);
    return f;
}

static void expect_error(const char *drafter, const char *target, const char *want);

/* ---- the cases ------------------------------------------------------------------------------------ */

static void test_zlab_dflash(void) {
    gguf_file *f = export_ok("q3-zlab", "q3", "q3-zlab.gguf", "");
    if (!f) return;
    const want_kv *tabs[] = {DFLASH_KEYS};
    int ns[] = {(int)(sizeof DFLASH_KEYS / sizeof DFLASH_KEYS[0])};
    check_keys(f, tabs, ns, 1);
    key_str_is(f, "general.architecture", "dflash");
    dims d = read_dims(P("q3-zlab"), 0);
    want_list l = {.n = 0};
    qwen3_layers(&l, &d, 0);
    wt(&l, 0, d.H, d.H, "fc.weight", 0); /* one tap */
    wt(&l, 0, d.H, 0, "enc.output_norm.weight", 0);
    wt(&l, 0, d.H, 0, "output_norm.weight", 0);
    check_tensors(f, &l);
    CHECK(key_int(f, "dflash.block_size") == 16, "block_size");
    CHECK(key_int(f, "tokenizer.ggml.mask_token_id") == d.V - 1, "mask id");
    CHECK(key_int(f, "dflash.block_count") == d.L && key_int(f, "dflash.embedding_length") == d.H, "dims");
    CHECK(key_int(f, "dflash.attention.key_length") == d.D, "key_length");
    const gguf_kv *tl = NULL;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_arr(f, "dflash.target_layers", GGUF_TYPE_INT32, &tl, &err) == 0 && tl->arr_n == 1 &&
              sp_gguf_arr_i64(tl, 0) == 1,
          "target_layers must be [target_layer_ids + 1] = [1]");
    check_vocab(f, d.V, "llama"); /* SentencePiece-style tokenizer.json, not gemma4 */
    check_bytes(f, "fc.weight", P("q3-zlab"), "fc.weight");
    sp_gguf_close(f);
}

/* DeepSpec DSpark (Qwen3 block): Markov + confidence heads; the LM head copy dropped for a tied
 * target, kept as output.weight for an untied one; a Llama target's drafter gets rope_freqs */
static void test_dspark(void) {
    for (int untied = 0; untied < 2; untied++) {
        const char *dr = untied ? "ll-dspark" : "q3-dspark", *tg = untied ? "ll" : "q3";
        gguf_file *f = export_ok(dr, tg, untied ? "ll-dspark.gguf" : "q3-dspark.gguf", "");
        if (!f) continue;
        const want_kv *tabs[] = {DFLASH_KEYS, DSPARK_KEYS};
        int ns[] = {(int)(sizeof DFLASH_KEYS / sizeof DFLASH_KEYS[0]), 2};
        check_keys(f, tabs, ns, 2);
        dims d = read_dims(P(dr), 0);
        int r = 16;
        want_list l = {.n = 0};
        qwen3_layers(&l, &d, 0);
        wt(&l, 0, d.H, d.V, "token_embd.weight", 0);
        if (untied) wt(&l, 0, d.H, d.V, "output.weight", 0);
        if (untied) wt(&l, 0, d.D / 2, 0, "rope_freqs.weight", 0);
        wt(&l, 0, d.H, d.H, "fc.weight", 0);
        wt(&l, 0, d.H, 0, "enc.output_norm.weight", 0);
        wt(&l, 0, d.H, 0, "output_norm.weight", 0);
        wt(&l, 0, r, d.V, "markov_w1.weight", 0);
        wt(&l, 0, r, d.V, "markov_w2.weight", 0);
        wt(&l, 0, d.H + r, 1, "conf_proj.weight", 0);
        wt(&l, 0, 1, 0, "conf_proj.bias", 0);
        check_tensors(f, &l);
        int b = -1;
        sp_err err = {{0}};
        CHECK(sp_gguf_get_bool(f, "dflash.sample_from_anchor", &b, &err) == 0 && b == 1, "sample_from_anchor");
        CHECK(sp_gguf_get_bool(f, "dflash.has_confidence_head", &b, &err) == 0 && b == 1, "has_confidence_head");
        CHECK(key_int(f, "dflash.block_size") == 7, "block_size");
        check_vocab(f, d.V, "llama");
        check_bytes(f, "markov_w1.weight", P(dr), "markov_head.markov_w1.weight");
        check_bytes(f, "conf_proj.weight", P(dr), "confidence_head.proj.weight");
        if (untied) check_bytes(f, "output.weight", P(dr), "lm_head.weight");
        sp_gguf_close(f);
    }
}

/* a drafter quantized by `quantize --drafter`: each weight stored as llama.cpp blocks goes into
 * the GGUF in that type with the same bytes and the GGUF element dims; general.file_type is the
 * type's llama_ftype; --type cannot re-encode the blocks */
static void test_dspark_quantized(void) {
    static const struct {
        const char *name;
        uint32_t type, ftype;
    } types[] = {{"q8_0", 8, 7}, {"q4_0", 2, 2}};
    static const char *names[][2] = {{"fc.weight", "fc.weight"},
                                     {"layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
                                     {"layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"},
                                     {"layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight"}};
    for (size_t q = 0; q < sizeof types / sizeof types[0]; q++) {
        char dir[64], file[80];
        snprintf(dir, sizeof dir, "q3-dspark-%s", types[q].name);
        snprintf(file, sizeof file, "%s.gguf", dir);
        int rc = sh("%s quantize --drafter -m %s -o %s --type %s -q 2>&1", cli, P("q3-dspark"), P(dir), types[q].name);
        CHECK(rc == 0, "quantize --drafter %s: %s", types[q].name, out);
        gguf_file *f = rc == 0 ? export_ok(dir, "q3", file, "") : NULL;
        if (!f) continue;
        CHECK(key_int(f, "general.file_type") == (int64_t)types[q].ftype, "%s: general.file_type", dir);
        st_set *st = NULL;
        sp_err err = {{0}};
        CHECK(sp_st_open_dir(&st, P(dir), &err) == 0, "%s", err.msg);
        int n_quant = 0, n_type = 0;
        for (int i = 0; st && i < sp_st_count(st); i++) {
            char key[160];
            snprintf(key, sizeof key, "quant.%s", sp_st_at(st, i)->name);
            n_quant += sp_st_metadata(st, key) != NULL;
        }
        for (uint64_t i = 0; i < f->n_tensors; i++) n_type += f->tensors[i].type == types[q].type;
        CHECK(n_quant >= 8 && n_type == n_quant, "%s: %d tensors of type %u in the GGUF, %d quantized in safetensors",
              dir, n_type, types[q].type, n_quant);
        for (size_t k = 0; st && k < sizeof names / sizeof names[0]; k++) {
            const st_tensor *s = sp_st_find(st, names[k][0]);
            const gguf_tensor_info *t = sp_gguf_find_tensor(f, names[k][1]);
            const void *data = t ? sp_gguf_tensor_data(f, t, &err) : NULL;
            int64_t n = s ? s->shape[0] : 0, kk = t ? (int64_t)t->dims[0] : 0;
            CHECK(s && data && t->type == types[q].type && t->n_dims == 2 && (int64_t)t->dims[1] == n &&
                      sp_dtype_row_bytes(types[q].type == 8 ? SP_DT_Q8_0 : SP_DT_Q4_0, (size_t)kk) ==
                          (size_t)s->shape[1] &&
                      t->nbytes == s->nbytes && !memcmp(data, s->data, s->nbytes),
                  "%s: %s is not %s's blocks as stored", dir, names[k][1], names[k][0]);
        }
        sp_st_close(st);
        sp_gguf_close(f);
        char o[600];
        snprintf(o, sizeof o, "%s/%s-bf16.gguf", tmp, dir);
        rc = sh("%s export-gguf -m %s --target %s -o %s --type bf16 2>&1", cli, P(dir), P("q3"), o);
        CHECK(rc == 1 && strstr(out, "cannot apply") && strstr(out, "as they are") && access(o, F_OK) != 0,
              "%s --type bf16: exit %d: %s", dir, rc, out);
    }
}

/* DeepSpec DFlash (dspark preset dflash-b7): no heads, has_confidence_head false, --type bf16 */
static void test_deepspec_dflash_bf16(void) {
    gguf_file *f = export_ok("q3-dsdflash", "q3", "q3-dsdflash.gguf", "--type bf16");
    if (!f) return;
    const want_kv *tabs[] = {DFLASH_KEYS, DSPARK_KEYS};
    int ns[] = {(int)(sizeof DFLASH_KEYS / sizeof DFLASH_KEYS[0]), 2};
    check_keys(f, tabs, ns, 2);
    dims d = read_dims(P("q3-dsdflash"), 0);
    want_list l = {.n = 0};
    qwen3_layers(&l, &d, 30);
    wt(&l, 30, d.H, d.V, "token_embd.weight", 0);
    wt(&l, 30, d.H, d.H, "fc.weight", 0);
    wt(&l, 0, d.H, 0, "enc.output_norm.weight", 0);
    wt(&l, 0, d.H, 0, "output_norm.weight", 0);
    check_tensors(f, &l);
    int b = -1;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_bool(f, "dflash.has_confidence_head", &b, &err) == 0 && b == 0, "has_confidence_head false");
    CHECK(key_int(f, "general.file_type") == 32, "file_type mostly BF16");
    sp_gguf_close(f);
}

static void test_gemma4_dspark(void) {
    gguf_file *f = export_ok("g4-dspark", "g4", "g4-dspark.gguf", "");
    if (!f) return;
    const want_kv *tabs[] = {DFLASH_KEYS, DSPARK_KEYS, GEMMA_KEYS};
    int ns[] = {(int)(sizeof DFLASH_KEYS / sizeof DFLASH_KEYS[0]), 2, 5};
    check_keys(f, tabs, ns, 3);
    dims d = read_dims(P("g4-dspark"), 1);
    int r = 16;
    want_list l = {.n = 0};
    wt(&l, 0, d.H, d.V, "token_embd.weight", 0);
    for (int i = 0; i < d.L; i++) { /* k_eq_v full layers: no attn_v; Gemma's four norms */
        wt(&l, 0, d.H, 0, "blk.%d.attn_norm.weight", i);
        wt(&l, 0, d.H, d.NH * d.D, "blk.%d.attn_q.weight", i);
        wt(&l, 0, d.H, d.KVH * d.D, "blk.%d.attn_k.weight", i);
        wt(&l, 0, d.NH * d.D, d.H, "blk.%d.attn_output.weight", i);
        wt(&l, 0, d.D, 0, "blk.%d.attn_q_norm.weight", i);
        wt(&l, 0, d.D, 0, "blk.%d.attn_k_norm.weight", i);
        wt(&l, 0, d.H, 0, "blk.%d.post_attention_norm.weight", i);
        wt(&l, 0, d.H, 0, "blk.%d.ffn_norm.weight", i);
        wt(&l, 0, d.H, d.I, "blk.%d.ffn_gate.weight", i);
        wt(&l, 0, d.H, d.I, "blk.%d.ffn_up.weight", i);
        wt(&l, 0, d.I, d.H, "blk.%d.ffn_down.weight", i);
        wt(&l, 0, d.H, 0, "blk.%d.post_ffw_norm.weight", i);
        wt(&l, 0, 1, 0, "blk.%d.layer_output_scale.weight", i);
    }
    wt(&l, 0, d.H, 0, "output_norm.weight", 0);
    wt(&l, 0, d.H, d.V, "output.weight", 0);
    wt(&l, 0, 5 * d.H, d.H, "fc.weight", 0); /* five taps */
    wt(&l, 0, d.H, 0, "enc.output_norm.weight", 0);
    wt(&l, 0, r, d.V, "markov_w1.weight", 0);
    wt(&l, 0, r, d.V, "markov_w2.weight", 0);
    wt(&l, 0, d.H + r, 1, "conf_proj.weight", 0);
    wt(&l, 0, 1, 0, "conf_proj.bias", 0);
    wt(&l, 0, d.D / 2, 0, "rope_freqs.weight", 0);
    check_tensors(f, &l);
    CHECK(key_int(f, "dflash.attention.key_length") == d.D && key_int(f, "dflash.rope.dimension_count") == d.D,
          "Gemma: global head dim %d", d.D);
    CHECK(key_int(f, "dflash.attention.head_count_kv") == d.KVH, "global KV heads %d", d.KVH);
    CHECK(fabs(key_f(f, "dflash.embedding_scale") - 8.0) < 1e-6, "embedding_scale = sqrt(64)");
    CHECK(key_f(f, "dflash.attention.scale") == 1.0, "attention.scale 1");
    key_str_is(f, "dflash.hidden_activation", "gelu_pytorch_tanh");
    CHECK(key_int(f, "tokenizer.ggml.mask_token_id") == 4, "Gemma mask id 4");
    const gguf_kv *tl = NULL;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_arr(f, "dflash.target_layers", GGUF_TYPE_INT32, &tl, &err) == 0 && tl->arr_n == 5 &&
              sp_gguf_arr_i64(tl, 0) == 1 && sp_gguf_arr_i64(tl, 4) == 5,
          "target_layers [1..5]");
    /* proportional RoPE: Dg·0.25/2 rotated pairs, the rest fixed */
    const gguf_tensor_info *t = sp_gguf_find_tensor(f, "rope_freqs.weight");
    const float *rf = t ? sp_gguf_tensor_data(f, t, &err) : NULL;
    int n_rot = d.D / 8;
    CHECK(rf && rf[0] == 1.0f && rf[n_rot - 1] == 1.0f && rf[n_rot] == 1e30f && rf[d.D / 2 - 1] == 1e30f,
          "rope_freqs pattern");
    check_vocab(f, d.V, "gemma4");
    sp_gguf_close(f);
}

static void test_gemma4_assistant(void) {
    gguf_file *f = export_ok("g4-asst", "g4", "g4-asst.gguf", "");
    if (!f) return;
    const want_kv *tabs[] = {ASSISTANT_KEYS};
    int ns[] = {(int)(sizeof ASSISTANT_KEYS / sizeof ASSISTANT_KEYS[0])};
    check_keys(f, tabs, ns, 1);
    key_str_is(f, "general.architecture", "gemma4-assistant");
    dims d = read_dims(P("g4-asst"), 0), g = read_dims(P("g4-asst"), 1), tg = read_dims(P("g4"), 0);
    want_list l = {.n = 0};
    wt(&l, 0, d.H, d.V, "token_embd.weight", 0);
    wt(&l, 0, 2 * tg.H, d.H, "nextn.pre_projection.weight", 0);
    wt(&l, 0, d.H, tg.H, "nextn.post_projection.weight", 0);
    wt(&l, 0, d.H, 0, "output_norm.weight", 0);
    for (int i = 0; i < d.L; i++) {
        int D = i < d.L - 1 ? d.D : g.D; /* S, S, S, F */
        wt(&l, 0, d.H, 0, "blk.%d.attn_norm.weight", i);
        wt(&l, 0, d.H, d.NH * D, "blk.%d.attn_q.weight", i);
        wt(&l, 0, D, 0, "blk.%d.attn_q_norm.weight", i);
        wt(&l, 0, d.NH * D, d.H, "blk.%d.attn_output.weight", i);
        wt(&l, 0, d.H, 0, "blk.%d.post_attention_norm.weight", i);
        wt(&l, 0, d.H, 0, "blk.%d.ffn_norm.weight", i);
        wt(&l, 0, d.H, d.I, "blk.%d.ffn_gate.weight", i);
        wt(&l, 0, d.H, d.I, "blk.%d.ffn_up.weight", i);
        wt(&l, 0, d.I, d.H, "blk.%d.ffn_down.weight", i);
        wt(&l, 0, d.H, 0, "blk.%d.post_ffw_norm.weight", i);
        wt(&l, 0, 1, 0, "blk.%d.layer_output_scale.weight", i);
    }
    wt(&l, 0, g.D / 2, 0, "rope_freqs.weight", 0);
    check_tensors(f, &l); /* no masked_embedding.* (dropped), no K/V */
    CHECK(key_int(f, "gemma4-assistant.embedding_length_out") == tg.H, "embedding_length_out = target H");
    CHECK(key_int(f, "gemma4-assistant.nextn_predict_layers") == d.L, "nextn_predict_layers = L");
    CHECK(key_int(f, "gemma4-assistant.embedding_length") == d.H, "embedding_length = d_a");
    CHECK(key_int(f, "gemma4-assistant.attention.key_length") == g.D &&
              key_int(f, "gemma4-assistant.attention.key_length_swa") == d.D,
          "head dims");
    const gguf_kv *kv = NULL;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_arr(f, "gemma4-assistant.attention.head_count_kv", -1, &kv, &err) == 0 && kv->arr_n == 4 &&
              sp_gguf_arr_i64(kv, 0) == d.KVH && sp_gguf_arr_i64(kv, 3) == g.KVH,
          "per-layer KV heads (sliding %d, full %d)", d.KVH, g.KVH);
    check_vocab(f, d.V, "gemma4");
    check_bytes(f, "nextn.pre_projection.weight", P("g4-asst"), "pre_projection.weight");
    sp_gguf_close(f);
}

/* A SpecForge EAGLE-3 checkpoint for the llama target, written here (H 64, 4 heads of 16, 2 KV
 * heads, I 96, draft vocabulary 512): random floats, d2t offsets mapping draft id j to target id
 * 3j + 1 (or, with dup, every id to 7). */
static int write_eagle3(const char *name, int dup, int n_taps) {
    const int H = 64, NH = 4, KVH = 2, D = 16, I = 96, V = 8192, Vd = 512;
    char p[600];
    if (sh("mkdir -p %s", P(name))) return -1;
    snprintf(p, sizeof p, "%s/config.json", P(name));
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLMEagle3\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
               "\"intermediate_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
               "\"num_hidden_layers\": 1, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, "
               "\"max_position_embeddings\": 4096, \"vocab_size\": %d, \"draft_vocab_size\": %d, "
               "\"target_hidden_size\": %d, \"eagle_aux_hidden_state_layer_ids\": [%s], \"norm_before_residual\": true}\n",
            H, I, NH, KVH, D, V, Vd, H, n_taps == 3 ? "1, 1, 2" : "1, 2");
    fclose(f);
    static const struct {
        const char *n;
        int64_t d0, d1;
    } T[] = {
        {"fc.weight", 64, 192},
        {"midlayer.hidden_norm.weight", 64, 0},
        {"midlayer.input_layernorm.weight", 64, 0},
        {"midlayer.self_attn.q_proj.weight", 64, 128},
        {"midlayer.self_attn.k_proj.weight", 32, 128},
        {"midlayer.self_attn.v_proj.weight", 32, 128},
        {"midlayer.self_attn.o_proj.weight", 64, 64},
        {"midlayer.post_attention_layernorm.weight", 64, 0},
        {"midlayer.mlp.gate_proj.weight", 96, 64},
        {"midlayer.mlp.up_proj.weight", 96, 64},
        {"midlayer.mlp.down_proj.weight", 64, 96},
        {"norm.weight", 64, 0},
        {"lm_head.weight", 512, 64},
    };
    (void)I;
    sp_err err = {{0}};
    st_writer *w = sp_st_writer_create();
    int rc = 0;
    for (size_t i = 0; i < sizeof T / sizeof T[0] && !rc; i++) {
        int64_t n = T[i].d0 * (T[i].d1 ? T[i].d1 : 1), shape[2] = {T[i].d0, T[i].d1};
        float *x = malloc(sizeof(float) * (size_t)n);
        harness_fill(x, (size_t)n, 0.1f, (unsigned)i + 11);
        rc = sp_st_writer_add(w, T[i].n, SP_DT_F32, T[i].d1 ? 2 : 1, shape, x, &err);
        free(x);
    }
    int64_t d2t[512], s1[1] = {Vd}, s2[1] = {V};
    for (int j = 0; j < Vd; j++) d2t[j] = dup ? 7 - j : 2 * j + 1; /* target id j + d2t[j] */
    uint8_t *t2d = calloc(V, 1);
    for (int j = 0; j < Vd; j++) t2d[3 * j + 1] = 1;
    if (!rc) rc = sp_st_writer_add(w, "d2t", SP_DT_I64, 1, s1, d2t, &err);
    if (!rc) rc = sp_st_writer_add(w, "t2d", SP_DT_BOOL, 1, s2, t2d, &err);
    free(t2d);
    snprintf(p, sizeof p, "%s/model.safetensors", P(name));
    if (!rc) rc = sp_st_writer_save(w, p, &err);
    sp_st_writer_free(w);
    if (rc) fprintf(stderr, "write_eagle3: %s\n", err.msg);
    return rc;
}

static void test_eagle3(void) {
    gguf_file *f = export_ok("ll-eagle", "ll", "ll-eagle.gguf", "");
    if (!f) return;
    const char *A = "eagle3";
    char k[24][96];
    static const char *names[] = {"context_length", "embedding_length", "block_count", "feed_forward_length",
                                  "attention.head_count", "attention.head_count_kv",
                                  "attention.layer_norm_rms_epsilon", "rope.freq_base", "vocab_size",
                                  "rope.dimension_count", "attention.key_length", "attention.value_length",
                                  "target_layers", "target_hidden_size", "norm_before_residual", "norm_before_fc"};
    static const uint32_t types[] = {4, 4, 4, 4, 4, 4, 6, 6, 4, 4, 4, 4, 9, 4, 7, 7};
    want_kv tab[24];
    int n = 0;
    tab[n++] = (want_kv){"general.architecture", GGUF_TYPE_STRING};
    tab[n++] = (want_kv){"general.name", GGUF_TYPE_STRING};
    tab[n++] = (want_kv){"general.file_type", GGUF_TYPE_UINT32};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(k[i], sizeof k[i], "%s.%s", A, names[i]);
        tab[n++] = (want_kv){k[i], types[i]};
    }
    const want_kv *tabs[] = {tab};
    int ns[] = {n};
    check_keys(f, tabs, ns, 1);
    key_str_is(f, "general.architecture", "eagle3");
    want_list l = {.n = 0};
    wt(&l, 0, 192, 64, "fc.weight", 0);
    wt(&l, 0, 64, 0, "blk.0.attn_norm_2.weight", 0);
    wt(&l, 0, 64, 0, "blk.0.attn_norm.weight", 0);
    wt(&l, 0, 128, 64, "blk.0.attn_q.weight", 0);
    wt(&l, 0, 128, 32, "blk.0.attn_k.weight", 0);
    wt(&l, 0, 128, 32, "blk.0.attn_v.weight", 0);
    wt(&l, 0, 64, 64, "blk.0.attn_output.weight", 0);
    wt(&l, 0, 64, 0, "blk.0.ffn_norm.weight", 0);
    wt(&l, 0, 64, 96, "blk.0.ffn_gate.weight", 0);
    wt(&l, 0, 64, 96, "blk.0.ffn_up.weight", 0);
    wt(&l, 0, 96, 64, "blk.0.ffn_down.weight", 0);
    wt(&l, 0, 64, 0, "output_norm.weight", 0);
    wt(&l, 0, 64, 512, "output.weight", 0);
    wt(&l, 27, 512, 0, "d2t", 0); /* I64 */
    check_tensors(f, &l);
    const gguf_kv *tl = NULL;
    sp_err err = {{0}};
    CHECK(sp_gguf_get_arr(f, "eagle3.target_layers", GGUF_TYPE_INT32, &tl, &err) == 0 && tl->arr_n == 3 &&
              sp_gguf_arr_i64(tl, 0) == 1 && sp_gguf_arr_i64(tl, 1) == 1 && sp_gguf_arr_i64(tl, 2) == 2,
          "target_layers as stored [1, 1, 2]");
    int b = -1;
    CHECK(sp_gguf_get_bool(f, "eagle3.norm_before_residual", &b, &err) == 0 && b == 1, "norm_before_residual");
    CHECK(key_int(f, "eagle3.target_hidden_size") == 64, "target_hidden_size");
    /* d2t as absolute target ids: j + (2j + 1) */
    const gguf_tensor_info *t = sp_gguf_find_tensor(f, "d2t");
    const int64_t *d = t ? sp_gguf_tensor_data(f, t, &err) : NULL;
    CHECK(d && d[0] == 1 && d[1] == 4 && d[511] == 3 * 511 + 1, "d2t absolute ids");
    /* Q rows permuted to adjacent RoPE pairs: GGUF row 1 is HF row D/2 = 8 of head 0 */
    st_set *st = NULL;
    CHECK(sp_st_open_dir(&st, P("ll-eagle"), &err) == 0, "%s", err.msg);
    const st_tensor *q = st ? sp_st_find(st, "midlayer.self_attn.q_proj.weight") : NULL;
    t = sp_gguf_find_tensor(f, "blk.0.attn_q.weight");
    const float *g = t ? sp_gguf_tensor_data(f, t, &err) : NULL;
    CHECK(q && g && !memcmp(g + 128, (const float *)q->data + 8 * 128, 128 * sizeof(float)) &&
              !memcmp(g, q->data, 128 * sizeof(float)),
          "attn_q rows permuted (row 1 = HF row 8)");
    if (st) sp_st_close(st);
    check_vocab(f, 8192, "llama");
    sp_gguf_close(f);
}

/* EAGLE-3 drafters written by `new-drafter --arch eagle3` (SpecForge preset) for the llama and
 * gemma4 targets: the tensor set, the taps as configured (or the published default) */
static void test_eagle3_new_drafter(void) {
    static const char *cases[][3] = {{"ll-eagle-nd", "ll", "1 1 2"}, {"g4-eagle-nd", "g4", "2 3 3"}};
    for (int c = 0; c < 2; c++) {
        char file[64];
        snprintf(file, sizeof file, "%s.gguf", cases[c][0]);
        gguf_file *f = export_ok(cases[c][0], cases[c][1], file, "");
        if (!f) continue;
        key_str_is(f, "general.architecture", "eagle3");
        char j[600];
        snprintf(j, sizeof j, "%s/config.json", P(cases[c][0]));
        json_t *r = json_load_file(j, 0, NULL);
        int H = cfg_int(r, "hidden_size"), NH = cfg_int(r, "num_attention_heads"), KVH = cfg_int(r, "num_key_value_heads");
        int D = cfg_int(r, "head_dim"), I = cfg_int(r, "intermediate_size"), Vd = cfg_int(r, "draft_vocab_size");
        json_decref(r);
        want_list l = {.n = 0};
        wt(&l, 0, 3 * H, H, "fc.weight", 0);
        wt(&l, 0, H, 0, "blk.0.attn_norm_2.weight", 0);
        wt(&l, 0, H, 0, "blk.0.attn_norm.weight", 0);
        wt(&l, 0, 2 * H, NH * D, "blk.0.attn_q.weight", 0);
        wt(&l, 0, 2 * H, KVH * D, "blk.0.attn_k.weight", 0);
        wt(&l, 0, 2 * H, KVH * D, "blk.0.attn_v.weight", 0);
        wt(&l, 0, NH * D, H, "blk.0.attn_output.weight", 0);
        wt(&l, 0, H, 0, "blk.0.ffn_norm.weight", 0);
        wt(&l, 0, H, I, "blk.0.ffn_gate.weight", 0);
        wt(&l, 0, H, I, "blk.0.ffn_up.weight", 0);
        wt(&l, 0, I, H, "blk.0.ffn_down.weight", 0);
        wt(&l, 0, H, 0, "output_norm.weight", 0);
        wt(&l, 0, H, Vd, "output.weight", 0);
        wt(&l, 27, Vd, 0, "d2t", 0);
        if (c == 0) wt(&l, 0, D / 2, 0, "rope_freqs.weight", 0); /* the llama target's llama3 scaling */
        check_tensors(f, &l);
        const gguf_kv *tl = NULL;
        sp_err err = {{0}};
        int a = -1, b = -1, d = -1;
        sscanf(cases[c][2], "%d %d %d", &a, &b, &d);
        CHECK(sp_gguf_get_arr(f, "eagle3.target_layers", GGUF_TYPE_INT32, &tl, &err) == 0 && tl->arr_n == 3 &&
                  sp_gguf_arr_i64(tl, 0) == a && sp_gguf_arr_i64(tl, 1) == b && sp_gguf_arr_i64(tl, 2) == d,
              "%s: target_layers [%s]", cases[c][0], cases[c][2]);
        sp_gguf_close(f);
    }
    expect_error("g4-eagle-ds", "g4", "llama.cpp's eagle3 runs only the three-tap Llama-block layout");
}

/* malformed input: a clear error naming the problem, exit 1, no file */
static void expect_error(const char *drafter, const char *target, const char *want) {
    const char *o = P("bad.gguf");
    unlink(o);
    int rc = sh("%s export-gguf -m %s --target %s -o %s 2>&1", cli, P(drafter), P(target), o);
    CHECK(rc == 1, "%s for %s: exit %d, expected 1: %s", drafter, target, rc, out);
    CHECK(strstr(out, want) != NULL, "%s for %s: message lacks \"%s\": %s", drafter, target, want, out);
    CHECK(access(o, F_OK) != 0, "%s for %s: a file was written", drafter, target);
}

static void test_errors(void) {
    expect_error("q3-dspark", "g4", "num_target_layers 2 but the target has 6 layers");
    expect_error("g4-asst", "q3", "needs a Gemma-4 target");
    expect_error("q3", "q3", "is not a drafter export-gguf knows");
    expect_error("q3-gated", "q3", "only the vanilla Markov head");
    expect_error("q3-norank", "q3", "missing tensor markov_head.markov_w1.weight");
    expect_error("q3-rank8", "q3", "expected [");
    expect_error("q3-dspark", "nowhere", "nowhere/config.json");
    expect_error("ll-eagle-dup", "ll", "to target id 7 (twice)");
    expect_error("ll-eagle-2taps", "ll", "llama.cpp's eagle3 takes 3");
}

/* a copy of drafter src with config key set to a JSON value */
static int variant(const char *src, const char *dst, const char *key, json_t *val) {
    char p[600];
    if (sh("cp -r %s %s", P(src), P(dst))) return -1;
    snprintf(p, sizeof p, "%s/config.json", P(dst));
    json_t *r = json_load_file(p, 0, NULL);
    if (!r) return -1;
    json_object_set_new(r, key, val);
    int rc = json_dump_file(r, p, JSON_INDENT(2));
    json_decref(r);
    return rc;
}

static int setup(void) {
    const char *tok = "models/default/target/tokenizer.json";
    static const char *targets[][2] = {{"qwen3", "q3"}, {"llama", "ll"}, {"gemma4", "g4"}};
    for (int i = 0; i < 3; i++)
        if (sh("%s new-model --arch %s --preset tiny --tokenizer %s --seed 1 -o %s 2>&1", cli, targets[i][0], tok,
               P(targets[i][1])))
            return fprintf(stderr, "new-model %s: %s\n", targets[i][0], out), -1;
    static const char *drafters[][4] = {
        {"dflash", "", "q3", "q3-zlab"},      {"dspark", "", "q3", "q3-dspark"}, {"dspark", "", "ll", "ll-dspark"},
        {"dspark", "--preset dflash-b7", "q3", "q3-dsdflash"}, {"dspark", "", "g4", "g4-dspark"},
        {"gemma4_assistant", "", "g4", "g4-asst"},
        {"dspark", "--set markov_head_type=gated", "q3", "q3-gated"},
        {"eagle3", "--set eagle_aux_hidden_state_layer_ids=[1,1,2]", "ll", "ll-eagle-nd"},
        {"eagle3", "", "g4", "g4-eagle-nd"},
        {"eagle3", "--preset deepspec", "g4", "g4-eagle-ds"},
    };
    for (size_t i = 0; i < sizeof drafters / sizeof drafters[0]; i++)
        if (sh("%s new-drafter --arch %s %s -m %s --seed 2 -o %s 2>&1", cli, drafters[i][0], drafters[i][1],
               P(drafters[i][2]), P(drafters[i][3])))
            return fprintf(stderr, "new-drafter %s: %s\n", drafters[i][3], out), -1;
    if (variant("q3-dsdflash", "q3-norank", "markov_rank", json_integer(16)) ||
        variant("q3-dspark", "q3-rank8", "markov_rank", json_integer(8)))
        return fprintf(stderr, "config variants failed\n"), -1;
    if (write_eagle3("ll-eagle", 0, 3) || write_eagle3("ll-eagle-dup", 1, 3) || write_eagle3("ll-eagle-2taps", 0, 2))
        return -1;
    return 0;
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    snprintf(tmp, sizeof tmp, "/tmp/specula_test_exd.XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    sp_log_level = SP_LOG_ERROR;
    int ok = setup() == 0;
    CHECK(ok, "setup");
    if (ok) {
        RUN(test_zlab_dflash);
        RUN(test_dspark);
        RUN(test_dspark_quantized);
        RUN(test_deepspec_dflash_bf16);
        RUN(test_gemma4_dspark);
        RUN(test_gemma4_assistant);
        RUN(test_eagle3);
        RUN(test_eagle3_new_drafter);
        RUN(test_errors);
    } else {
        harness_failed++;
        printf("FAIL setup\n");
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return harness_done("test_export_drafter");
}
