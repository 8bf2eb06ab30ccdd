/* newmodel.c — write a random-weight checkpoint in the Hugging Face layout (see newmodel.h).
 *
 * Pipeline: preset → config.json text (presets.c) → sp_config (the same parser the model
 * loader uses) → tensor list (sp_hf_tensor_specs) → shards of at most opts.shard_bytes, each
 * generated, written and freed before the next. */
#include "newmodel.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hfjson.h"
#include "presets.h"
#include "safetensors.h"
#include "tensor_names.h"

#define DEFAULT_SHARD_BYTES ((uint64_t)2 << 30)

/* ---- the tensor list ---------------------------------------------------------------------- */

typedef struct {
    hf_tensor_spec *v;
    int n, cap;
    const char *prefix;
    int oom;
} spec_list;

static void add(spec_list *l, int layer, hf_init init, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void add(spec_list *l, int layer, hf_init init, int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
    if (l->oom) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        hf_tensor_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) {
            l->oom = 1;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    hf_tensor_spec *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->init = init;
    t->layer = layer;
}

/* the tensor of `role` (layer `layer`, -1 for model-wide ones) by the tensor table's name */
static void add_role(spec_list *l, const sp_config *c, sp_tensor_role role, int layer, hf_init init, int ndim,
                     int64_t d0, int64_t d1) {
    char rel[160];
    if (!sp_tensor_hf_name(c->arch, role, layer, rel, sizeof rel)) {
        l->oom = 1; /* not reached: every role listed below is in the architecture's table */
        return;
    }
    add(l, layer, init, ndim, d0, d1, "%s%s", role == SP_TN_LM_HEAD ? "" : c->tensor_prefix, rel);
}

/* a Gemma-4 MoE layer's expert block after its dense MLP (HF's order): the router's projection
 * and scales, the stacked experts [E, 2·Ie, H] and [E, H, Ie], the three extra norms */
static void add_gemma4_experts(spec_list *l, const sp_config *c, int i) {
    const int64_t H = c->hidden_size, Ie = c->moe_ffn_dim, E = c->n_experts;
    add_role(l, c, SP_TN_ROUTER, i, HF_INIT_PROJ, 2, E, H);
    add_role(l, c, SP_TN_ROUTER_SCALE, i, HF_INIT_NORM, 1, H, 0);
    add_role(l, c, SP_TN_EXP_SCALE, i, HF_INIT_NORM, 1, E, 0);
    const sp_tensor_role stacked[2] = {SP_TN_EXP_GATE, SP_TN_EXP_DOWN};
    for (int j = 0; j < 2 && !l->oom; j++) {
        char rel[160];
        int part, parts;
        if (!sp_tensor_expert_stack(c->arch, stacked[j], i, 0, rel, sizeof rel, &part, &parts)) {
            l->oom = 1;
            return;
        }
        add(l, i, HF_INIT_PROJ, 2, E, j ? H : 2 * Ie, "%s%s", c->tensor_prefix, rel);
        hf_tensor_spec *t = &l->v[l->n - 1];
        if (l->oom) return;
        t->ndim = 3;
        t->shape[2] = j ? Ie : H;
    }
    add_role(l, c, SP_TN_FFN_NORM_2, i, HF_INIT_NORM, 1, H, 0);
    add_role(l, c, SP_TN_FFN_POST_NORM_1, i, HF_INIT_NORM, 1, H, 0);
    add_role(l, c, SP_TN_FFN_POST_NORM_2, i, HF_INIT_NORM, 1, H, 0);
}

/* an MoE layer's MLP: the router, then each expert's gate, up and down (HF's order) */
static void add_experts(spec_list *l, const sp_config *c, int i) {
    const int64_t H = c->hidden_size, Ie = c->moe_ffn_dim;
    add_role(l, c, SP_TN_ROUTER, i, HF_INIT_PROJ, 2, c->n_experts, H);
    const sp_tensor_role roles[3] = {SP_TN_EXP_GATE, SP_TN_EXP_UP, SP_TN_EXP_DOWN};
    for (int e = 0; e < c->n_experts; e++)
        for (int j = 0; j < 3; j++) {
            char rel[160];
            if (!sp_tensor_hf_expert_name(c->arch, roles[j], i, e, rel, sizeof rel)) {
                l->oom = 1;
                return;
            }
            add(l, i, HF_INIT_PROJ, 2, j == 2 ? H : Ie, j == 2 ? Ie : H, "%s%s", c->tensor_prefix, rel);
        }
}

int sp_hf_tensor_specs(const sp_config *c, hf_tensor_spec **out, int *n, sp_err *err) {
    spec_list l = {0};
    const int64_t H = c->hidden_size, V = c->vocab_size, L = c->n_layers, nH = c->n_heads;
    const int gemma = c->arch == SP_ARCH_GEMMA4;
    const int64_t Pw = gemma ? c->ple_dim : 0; /* PLE width */

    add_role(&l, c, SP_TN_EMBED, -1, HF_INIT_EMBED, 2, V, H);
    if (Pw > 0) {
        add_role(&l, c, SP_TN_PLE_EMBED, -1, HF_INIT_EMBED, 2, c->ple_vocab, L * Pw);
        add_role(&l, c, SP_TN_PLE_MODEL_PROJ, -1, HF_INIT_PROJ, 2, L * Pw, H);
        add_role(&l, c, SP_TN_PLE_PROJ_NORM, -1, HF_INIT_NORM, 1, Pw, 0);
    }
    for (int i = 0; i < (int)L; i++) {
        const sp_layer_config *lc = &c->layers[i];
        const int64_t D = lc->head_dim, nKV = lc->n_kv_heads, I = lc->ffn_dim;
        const int shared = gemma && i >= L - c->n_kv_shared; /* no K/V of its own (docs/TRANSFORMER.md §5) */
        add_role(&l, c, SP_TN_ATTN_NORM, i, HF_INIT_NORM, 1, H, 0);
        add_role(&l, c, SP_TN_Q, i, HF_INIT_PROJ, 2, nH * D, H);
        if (!shared) {
            add_role(&l, c, SP_TN_K, i, HF_INIT_PROJ, 2, nKV * D, H);
            if (lc->has_v_proj) add_role(&l, c, SP_TN_V, i, HF_INIT_PROJ, 2, nKV * D, H);
        }
        add_role(&l, c, SP_TN_O, i, HF_INIT_PROJ, 2, H, nH * D);
        if (c->qk_norm) {
            add_role(&l, c, SP_TN_Q_NORM, i, HF_INIT_NORM, 1, D, 0);
            if (!shared) add_role(&l, c, SP_TN_K_NORM, i, HF_INIT_NORM, 1, D, 0);
        }
        add_role(&l, c, gemma ? SP_TN_ATTN_POST_NORM : SP_TN_FFN_NORM, i, HF_INIT_NORM, 1, H, 0);
        if (gemma) add_role(&l, c, SP_TN_FFN_NORM, i, HF_INIT_NORM, 1, H, 0);
        if (lc->moe && c->n_experts > 0 && !gemma) add_experts(&l, c, i);
        else {
            add_role(&l, c, SP_TN_GATE, i, HF_INIT_PROJ, 2, I, H);
            add_role(&l, c, SP_TN_UP, i, HF_INIT_PROJ, 2, I, H);
            add_role(&l, c, SP_TN_DOWN, i, HF_INIT_PROJ, 2, H, I);
            if (lc->moe && c->n_experts > 0) add_gemma4_experts(&l, c, i);
        }
        if (gemma) {
            add_role(&l, c, SP_TN_FFN_POST_NORM, i, HF_INIT_NORM, 1, H, 0);
            add_role(&l, c, SP_TN_LAYER_SCALAR, i, HF_INIT_SCALAR, 1, 1, 0);
            if (Pw > 0) {
                add_role(&l, c, SP_TN_PLE_GATE, i, HF_INIT_PROJ, 2, Pw, H);
                add_role(&l, c, SP_TN_PLE_PROJ, i, HF_INIT_PROJ, 2, H, Pw);
                add_role(&l, c, SP_TN_PLE_POST_NORM, i, HF_INIT_NORM, 1, H, 0);
            }
        }
    }
    add_role(&l, c, SP_TN_FINAL_NORM, -1, HF_INIT_NORM, 1, H, 0);
    if (!c->tie_embeddings) add_role(&l, c, SP_TN_LM_HEAD, -1, HF_INIT_EMBED, 2, V, H);
    if (l.oom) {
        free(l.v);
        return sp_err_set(err, "out of memory listing tensors");
    }
    *out = l.v;
    *n = l.n;
    return 0;
}

void sp_hf_tensor_fill(const hf_tensor_spec *t, int k, uint64_t seed, float embed_std, float *dst, int64_t lo,
                    int64_t hi) {
    float std = 1.0f;
    switch (t->init) {
    case HF_INIT_PROJ: std = 1.0f / sqrtf((float)t->shape[t->ndim - 1]); break; /* 1/sqrt(fan_in) */
    case HF_INIT_EMBED: std = embed_std; break;
    case HF_INIT_NORM: std = 0.1f; break;
    case HF_INIT_SCALAR: break;
    }
    for (int64_t i = lo; i < hi; i++) {
        float *d = &dst[i - lo];
        if (t->init == HF_INIT_SCALAR) *d = 0.5f + 0.5f * (float)sp_rng_uniform(seed, (uint64_t)k, (uint64_t)i);
        else if (t->init == HF_INIT_NORM) *d = 1.0f + std * sp_rng_normal(seed, (uint64_t)k, (uint64_t)i);
        else *d = std * sp_rng_normal(seed, (uint64_t)k, (uint64_t)i);
    }
}

/* ---- parallel generation of one tensor ---------------------------------------------------- */

typedef struct {
    const hf_tensor_spec *t;
    int k;
    uint64_t seed;
    float embed_std;
    sp_dtype dtype;
    void *out;
    int64_t numel;
    int i, n; /* this worker's share */
} gen_job;

static void *gen_worker(void *arg) {
    gen_job *j = arg;
    int64_t lo = j->numel * j->i / j->n, hi = j->numel * (j->i + 1) / j->n;
    enum { CH = 4096 };
    float buf[CH];
    for (int64_t a = lo; a < hi; a += CH) {
        int64_t b = a + CH < hi ? a + CH : hi;
        if (j->dtype == SP_DT_F32) {
            sp_hf_tensor_fill(j->t, j->k, j->seed, j->embed_std, (float *)j->out + a, a, b);
        } else {
            sp_hf_tensor_fill(j->t, j->k, j->seed, j->embed_std, buf, a, b);
            uint16_t *o = (uint16_t *)j->out + a;
            for (int64_t x = 0; x < b - a; x++) o[x] = sp_f32_to_bf16(buf[x]);
        }
    }
    return NULL;
}

static void generate(const hf_tensor_spec *t, int k, uint64_t seed, float embed_std, sp_dtype dtype, void *out,
                     int64_t numel, int n_threads) {
    if (n_threads > 16) n_threads = 16;
    if (numel < (1 << 16)) n_threads = 1;
    gen_job jobs[16];
    pthread_t th[16];
    int started[16] = {0};
    for (int i = 0; i < n_threads; i++) {
        jobs[i] = (gen_job){t, k, seed, embed_std, dtype, out, numel, i, n_threads};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, gen_worker, &jobs[i]) == 0;
    }
    gen_worker(&jobs[0]);
    for (int i = 1; i < n_threads; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else gen_worker(&jobs[i]); /* thread creation failed: do the share here */
    }
}

/* ---- files ---------------------------------------------------------------------------------- */

static int copy_file(const char *src, const char *dst, sp_err *err) {
    char *buf;
    size_t n;
    if (sp_read_file(src, &buf, &n, err)) return -1;
    int rc = sp_write_file_atomic(dst, buf, n, err);
    free(buf);
    return rc;
}

/* id of a token string in tokenizer.json (added_tokens, then model.vocab), or -1 */
static int token_id(json_t *root, const char *content) {
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(root, "added_tokens"), i, v) {
        const char *c = json_string_value(json_object_get(v, "content"));
        if (c && !strcmp(c, content)) return (int)json_integer_value(json_object_get(v, "id"));
    }
    json_t *id = json_object_get(json_object_get(json_object_get(root, "model"), "vocab"), content);
    return json_is_integer(id) ? (int)json_integer_value(id) : -1;
}

/* What a tokenizer decides about the config: the number of ids (1 + the largest id in
 * model.vocab / added_tokens) and "bos_token_id=..." / "eos_token_id=..." / "pad_token_id=..."
 * overrides from tokenizer_config.json beside it (null when that file says null; nothing when
 * it is silent). sets[0..2] get bos, eos, pad. */
static int tokenizer_info(const char *path, int *n_ids, char sets[3][64], sp_err *err) {
    json_t *root = sp_hf_json_load_file(path, 0, err);
    if (!root) return -1;
    json_int_t max_id = -1;
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_object(vocab)) {
        json_object_foreach(vocab, k, v) if (json_is_integer(v) && json_integer_value(v) > max_id) max_id =
            json_integer_value(v);
    } else if (json_is_array(vocab)) { /* Unigram: [[piece, score], ...] */
        max_id = (json_int_t)json_array_size(vocab) - 1;
    }
    json_array_foreach(json_object_get(root, "added_tokens"), i, v) {
        json_t *id = json_object_get(v, "id");
        if (json_is_integer(id) && json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0 || max_id >= 0x7fffffff) {
        json_decref(root);
        return sp_err_set(err, "%s: no usable vocabulary (model.vocab)", path);
    }
    size_t n_tokens = (json_is_object(vocab) ? json_object_size(vocab) : json_array_size(vocab)) +
                      json_array_size(json_object_get(root, "added_tokens"));
    if ((size_t)max_id >= 2 * n_tokens + 65536) { /* as the tokenizer loader: ids must be dense */
        json_decref(root);
        return sp_err_set(err, "%s: token id %lld with only %zu tokens: ids must be dense", path, (long long)max_id,
                          n_tokens);
    }
    *n_ids = (int)max_id + 1;
    sets[0][0] = sets[1][0] = sets[2][0] = 0;
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s", path);
    char *slash = strrchr(cfg_path, '/');
    snprintf(slash ? slash + 1 : cfg_path, sizeof cfg_path - (size_t)(slash ? slash + 1 - cfg_path : 0),
             "tokenizer_config.json");
    json_t *tc = NULL;
    if (sp_file_exists(cfg_path) && !(tc = sp_hf_json_load_file(cfg_path, 0, err))) {
        json_decref(root);
        return -1;
    }
    static const char *names[3] = {"bos", "eos", "pad"};
    for (int t = 0; t < 3 && json_is_object(tc); t++) {
        char key[16];
        snprintf(key, sizeof key, "%s_token", names[t]);
        json_t *e = json_object_get(tc, key);
        if (!e) continue;
        const char *content = json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "content"));
        int id = content ? token_id(root, content) : -1;
        if (json_is_null(e)) snprintf(sets[t], 64, "%s_token_id=null", names[t]);
        else if (id >= 0) snprintf(sets[t], 64, "%s_token_id=%d", names[t], id);
    }
    json_decref(tc);
    json_decref(root);
    return 0;
}

static int copy_tokenizer(const char *tok_path, const char *dir, sp_err *err) {
    char dst[4096], src_dir[4096], src[4096];
    if (sp_path_join(dst, sizeof dst, dir, "tokenizer.json") || copy_file(tok_path, dst, err)) return -1;
    snprintf(src_dir, sizeof src_dir, "%s", tok_path);
    char *slash = strrchr(src_dir, '/');
    if (slash) *slash = 0;
    else snprintf(src_dir, sizeof src_dir, ".");
    static const char *extras[] = {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"};
    for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++) {
        if (sp_path_join(src, sizeof src, src_dir, extras[i]) || !sp_file_exists(src)) continue;
        if (sp_path_join(dst, sizeof dst, dir, extras[i]) || copy_file(src, dst, err)) return -1;
    }
    return 0;
}

/* model.safetensors.index.json for a sharded save (docs/SAFETENSORS.md §4) */
static int write_index(const char *dir, const hf_tensor_spec *specs, const int *shard_of, int n, int n_shards,
                       uint64_t total, sp_err *err) {
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", meta);
    for (int i = 0; i < n; i++) {
        char fname[64];
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", shard_of[i] + 1, n_shards);
        json_object_set_new(map, specs[i].name, json_string(fname));
    }
    json_object_set_new(root, "weight_map", map);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    if (!s) return sp_err_set(err, "out of memory writing the index");
    char path[4096];
    sp_path_join(path, sizeof path, dir, "model.safetensors.index.json");
    int rc = sp_write_file_atomic(path, s, strlen(s), err);
    free(s);
    return rc;
}

/* the --set list for the config: the tokenizer's special ids and, when the tokenizer is larger
 * than the preset's vocabulary, vocab_size (an explicit --set, appended last, wins) */
static int collect_sets(const newmodel_opts *o, const preset_info *pi, const char **sets, int *n_sets,
                        char *vocab_set, size_t vocab_set_size, char (*tok_sets)[64], sp_err *err) {
    if (o->tokenizer) {
        int tv = 0;
        sp_config cfg;
        if (tokenizer_info(o->tokenizer, &tv, tok_sets, err)) return -1;
        /* the tokenizer's ids win; a null in its config clears an id of the tiny presets only
         * (a real shape keeps its model's id where the tokenizer names none, as Qwen3's bos) */
        for (int k = 0; k < 3; k++)
            if (tok_sets[k][0] && (!strstr(tok_sets[k], "=null") || !(pi && pi->real))) sets[(*n_sets)++] = tok_sets[k];
        char *probe = sp_preset_config_json(o->arch, o->preset, "float32", o->sets, o->n_sets, err);
        if (!probe) return -1;
        int ok = sp_config_parse(&cfg, probe, "config.json", err);
        free(probe);
        if (ok != 0) return -1;
        if (tv > cfg.vocab_size) {
            snprintf(vocab_set, vocab_set_size, "vocab_size=%d", tv);
            sets[(*n_sets)++] = vocab_set;
            sp_log(SP_LOG_INFO, "vocab_size %d -> %d to fit %s", cfg.vocab_size, tv, o->tokenizer);
        }
    }
    for (int i = 0; i < o->n_sets; i++) sets[(*n_sets)++] = o->sets[i];
    return 0;
}

/* shards: consecutive tensors up to limit bytes each (a bigger tensor gets its own); returns the
 * number of shards, shard_of[i] the shard of tensor i, *total the bytes of all */
static int plan_shards(const hf_tensor_spec *specs, int n, uint64_t limit, size_t es, int *shard_of,
                       uint64_t *total) {
    uint64_t cur = 0;
    int n_shards = 1;
    for (int i = 0; i < n; i++) {
        uint64_t b = (uint64_t)sp_hf_spec_numel(&specs[i]) * es;
        if (cur > 0 && cur + b > limit) {
            n_shards++;
            cur = 0;
        }
        cur += b;
        *total += b;
        shard_of[i] = n_shards - 1;
    }
    return n_shards;
}

/* one shard at a time: generate its tensors, hand them to the writer by reference, save,
 * free; memory peaks near one shard (or the largest tensor) */
static int write_shards(const char *dir, const newmodel_opts *o, const hf_tensor_spec *specs, const int *shard_of,
                        int n, int n_shards, sp_dtype dtype, float embed_std, sp_err *err) {
    size_t es = sp_dtype_size(dtype);
    int n_threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    char path[4096];
    void **bufs = calloc((size_t)n, sizeof *bufs);
    if (!bufs) return sp_err_set(err, "out of memory");
    int next = 0, ok = 1;
    for (int s = 0; ok && s < n_shards; s++) {
        st_writer *w = sp_st_writer_create();
        if (!w) {
            sp_err_set(err, "out of memory");
            ok = 0;
            break;
        }
        int first = next;
        for (; ok && next < n && shard_of[next] == s; next++) {
            const hf_tensor_spec *t = &specs[next];
            int64_t numel = sp_hf_spec_numel(t);
            if (!(bufs[next] = malloc((size_t)numel * es))) {
                sp_err_set(err, "out of memory for tensor %s (%lld elements)", t->name, (long long)numel);
                ok = 0;
                break;
            }
            generate(t, next, o->seed, embed_std, dtype, bufs[next], numel, n_threads);
            ok = sp_st_writer_add_ref(w, t->name, dtype, t->ndim, t->shape, bufs[next], err) == 0;
        }
        if (ok) {
            char fname[64];
            if (n_shards == 1) snprintf(fname, sizeof fname, "model.safetensors");
            else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
            ok = sp_path_join(path, sizeof path, dir, fname) == 0 && sp_st_writer_save(w, path, err) == 0;
            if (ok) sp_log(SP_LOG_INFO, "wrote %s", path);
        }
        sp_st_writer_free(w);
        for (int i = first; i < next && i < n; i++) {
            free(bufs[i]);
            bufs[i] = NULL;
        }
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    return ok ? 0 : -1;
}

/* sp_newmodel_write into dir, which the caller created and removes on failure */
static int write_into(const char *dir, const newmodel_opts *o, sp_err *err) {
    const preset_info *pi = sp_preset_find(o->arch, o->preset);
    sp_dtype dtype = o->dtype == SP_DT_UNKNOWN ? (pi && pi->real ? SP_DT_BF16 : SP_DT_F32) : o->dtype;
    if (dtype != SP_DT_F32 && dtype != SP_DT_BF16) return sp_err_set(err, "new model: dtype must be f32 or bf16");

    const char **sets = calloc((size_t)o->n_sets + 4, sizeof *sets);
    if (!sets) return sp_err_set(err, "out of memory");
    int n_sets = 0;
    char vocab_set[64], tok_sets[3][64];
    sp_config cfg;
    char *text = NULL;
    hf_tensor_spec *specs = NULL;
    int *shard_of = NULL;
    int rc = -1;
    if (collect_sets(o, pi, sets, &n_sets, vocab_set, sizeof vocab_set, tok_sets, err)) goto done;

    text = sp_preset_config_json(o->arch, o->preset, dtype == SP_DT_F32 ? "float32" : "bfloat16", sets, n_sets, err);
    if (!text) goto done;
    if (sp_config_parse(&cfg, text, "generated config.json", err)) goto done;
    int n;
    if (sp_hf_tensor_specs(&cfg, &specs, &n, err)) goto done;

    uint64_t limit = o->shard_bytes ? o->shard_bytes : DEFAULT_SHARD_BYTES, total = 0;
    shard_of = malloc((size_t)n * sizeof *shard_of);
    if (!shard_of) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    int n_shards = plan_shards(specs, n, limit, sp_dtype_size(dtype), shard_of, &total);

    char path[4096];
    if (sp_path_join(path, sizeof path, dir, "config.json") || sp_write_file_atomic(path, text, strlen(text), err))
        goto done;
    float embed_std = pi && pi->real ? 4.0f / sqrtf((float)cfg.hidden_size) : 1.0f;
    if (write_shards(dir, o, specs, shard_of, n, n_shards, dtype, embed_std, err)) goto done;
    if (n_shards > 1 && write_index(dir, specs, shard_of, n, n_shards, total, err)) goto done;
    if (o->tokenizer && copy_tokenizer(o->tokenizer, dir, err)) goto done;
    rc = 0;
done:
    free(sets);
    free(text);
    free(specs);
    free(shard_of);
    return rc;
}

int sp_newmodel_write(const char *dir, const newmodel_opts *o, sp_err *err) {
    /* everything goes into dir.tmp.PID, published whole at the end: a failed or killed run
     * leaves no half-written model (and a later run removes the temp of a killed one) */
    char tmp[4200];
    if (sp_tmp_name(tmp, sizeof tmp, dir)) return sp_err_set(err, "path too long: %s", dir);
    sp_remove_stale_tmp(dir);
    sp_remove_tree(tmp);
    if (sp_mkdir_p(tmp, err)) return -1;
    int rc = write_into(tmp, o, err);
    if (!rc) rc = sp_dir_publish(tmp, dir, err);
    if (rc) sp_remove_tree(tmp);
    return rc;
}
