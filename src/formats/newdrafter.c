/* newdrafter.c — random DFlash / DSpark drafter checkpoints for a target (see newdrafter.h).
 *
 * Pipeline: target config.json → draft config (z-lab: a fresh Qwen3-shaped config with a
 * dflash_config and the target's rope_theta / rope_scaling / rms_norm_eps; DeepSpec: a copy of
 * the target's (text) config with the docs/DSPARK.md §1 overrides, model_type "qwen3" for a Llama target) →
 * --set overrides → derived keys (layer_types, tap ids) unless overridden → sp_config (the
 * target parser, as a shape check) → tensors (the decoder layers of newmodel's list without
 * prefix, fc, hidden_norm, Markov and confidence heads; DeepSpec also the target's embedding
 * and LM head, referenced from the target's mmap, converted only when dtypes differ). */
#include "newdrafter.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfjson.h"
#include "newmodel.h"
#include "presets.h"
#include "safetensors.h"
#include "tensor_names.h"

static const char *ZLAB_PRESETS[] = {"b16", NULL};
static const char *DSPARK_PRESETS[] = {"b7", "dflash-b7", NULL};
static const char *EAGLE3_PRESETS[] = {"specforge", "deepspec", NULL};

const char *sp_newdrafter_preset_at(const char *arch, int i) {
    const char **v = !strcmp(arch, "dflash") ? ZLAB_PRESETS : !strcmp(arch, "dspark") ? DSPARK_PRESETS
                     : !strcmp(arch, "eagle3")                                  ? EAGLE3_PRESETS
                                                                                : NULL;
    if (!v || i < 0) return NULL;
    for (int k = 0; k <= i; k++)
        if (!v[k]) return NULL;
    return v[i];
}

int sp_newdrafter_mask_id(const sp_config *tc) {
    if (tc->arch == SP_ARCH_GEMMA4) return 4;          /* Gemma's <mask> (docs/DSPARK.md §1 table) */
    if (tc->vocab_size == 151936) return 151669;       /* Qwen3: first unused embedding row (docs/TOKENIZER.md §5, docs/DFLASH.md §1) */
    if (tc->vocab_size == 128256) return 128002;       /* Llama-3: <|reserved_special_token_0|> (newdrafter.h) */
    return tc->vocab_size - 1;
}

static int round_half_even(double x) {
    double r = floor(x + 0.5);
    if (r - x == 0.5 && fmod(r, 2.0) != 0) r -= 1.0;
    return (int)r;
}

void sp_newdrafter_tap_ids(int N, int m, int *ids) {
    if (m <= 0) return;
    if (m == 1) {
        ids[0] = N / 2 <= N - 2 ? N / 2 : 0;
        return;
    }
    int start = 1, end = N - 3;
    if (end - start < m - 1) start = 0, end = N - 2; /* shallow target: spread over 0..N-2 */
    for (int i = 0; i < m; i++) ids[i] = round_half_even(start + i * (double)(end - start) / (m - 1));
}

static int set_has(const newdrafter_opts *o, const char *key) {
    size_t k = strlen(key);
    for (int i = 0; i < o->n_sets; i++)
        if (!strncmp(o->sets[i], key, k) && (o->sets[i][k] == '=' || o->sets[i][k] == '.')) return 1;
    return 0;
}

static json_t *int_list(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static int json_int_or(json_t *o, const char *key, int def) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* docs/DFLASH.md §1: a z-lab drafter is a Qwen3 body of the target's widths */
static json_t *zlab_config(const sp_config *tc, json_t *troot, int mask, const char *dtype) {
    int gemma = tc->arch == SP_ARCH_GEMMA4;
    json_t *d = json_object();
    json_object_set_new(d, "architectures", json_pack("[s]", "DFlashDraftModel"));
    json_object_set_new(d, "model_type", json_string("qwen3"));
    json_object_set_new(d, "auto_map", json_pack("{s:s}", "AutoModel", "dflash.DFlashDraftModel"));
    json_object_set_new(d, "block_size", json_integer(16));
    json_object_set_new(d, "hidden_size", json_integer(tc->hidden_size));
    json_object_set_new(d, "intermediate_size", json_integer(tc->ffn_dim));
    json_object_set_new(d, "num_attention_heads", json_integer(tc->n_heads));
    json_object_set_new(d, "num_key_value_heads", json_integer(tc->n_kv_heads));
    json_object_set_new(d, "head_dim", json_integer(gemma ? tc->global_head_dim : tc->head_dim));
    json_object_set_new(d, "rms_norm_eps", json_real(tc->rms_eps));
    json_object_set_new(d, "rope_theta", json_real(tc->rope.theta));
    if (!gemma) /* the target's RoPE as written (llama3 rope_scaling; transformers 5 rope_parameters) */
        for (int k = 0; k < 2; k++) {
            const char *key = k ? "rope_parameters" : "rope_scaling";
            json_t *v = json_object_get(troot, key);
            if (v) json_object_set_new(d, key, json_deep_copy(v));
        }
    json_object_set_new(d, "max_position_embeddings", json_integer(tc->max_pos));
    json_object_set_new(d, "vocab_size", json_integer(tc->vocab_size));
    json_object_set_new(d, "attention_bias", json_false());
    json_object_set_new(d, "hidden_act", json_string("silu"));
    json_object_set_new(d, "tie_word_embeddings", json_false());
    json_object_set_new(d, "torch_dtype", json_string(dtype));
    json_object_set_new(d, "dflash_config", json_pack("{s:i}", "mask_token_id", mask));
    return d;
}

/* docs/DSPARK.md §1: a DeepSpec drafter is a copy of the target (text) config with overrides */
static json_t *dspark_config(const newdrafter_opts *o, const sp_config *tc, json_t *troot, int mask,
                             const char *dtype) {
    int gemma = tc->arch == SP_ARCH_GEMMA4, tiny = tc->hidden_size < 512;
    json_t *src = troot;
    if (gemma && json_is_object(json_object_get(troot, "text_config"))) src = json_object_get(troot, "text_config");
    json_t *d = json_deep_copy(src);
    json_object_set_new(d, "architectures", json_pack("[s]", gemma ? "Gemma4DSparkModel" : "Qwen3DSparkModel"));
    if (!gemma) /* the Qwen3 block (q_norm / k_norm) for a Llama target too, as `specula train` writes */
        json_object_set_new(d, "model_type", json_string("qwen3"));
    if (gemma) {
        json_object_set_new(d, "model_type", json_string("gemma4_text"));
        json_object_set_new(d, "target_model_type", json_string("gemma4"));
        json_object_set_new(d, "target_text_model_type", json_string("gemma4_text"));
        json_object_set_new(d, "num_kv_shared_layers", json_integer(0));
        json_object_set_new(d, "hidden_size_per_layer_input", json_integer(0));
        json_object_del(d, "vocab_size_per_layer_input");
    }
    json_object_set_new(d, "block_size", json_integer(7));
    json_object_set_new(d, "mask_token_id", json_integer(mask));
    json_object_set_new(d, "num_anchors", json_integer(512));
    json_object_set_new(d, "tie_word_embeddings", json_false());
    int heads = strcmp(o->preset ? o->preset : "b7", "dflash-b7") != 0;
    json_object_set_new(d, "markov_rank", json_integer(heads ? (tiny ? 16 : 256) : 0));
    if (heads) json_object_set_new(d, "markov_head_type", json_string("vanilla"));
    json_object_set_new(d, "enable_confidence_head", json_boolean(heads));
    json_object_set_new(d, "confidence_head_with_markov", json_boolean(heads));
    json_object_del(d, "torch_dtype");
    json_object_set_new(d, "dtype", json_string(dtype));
    return d;
}

/* the --set overrides, then the keys derived from them unless overridden (layer types, taps) */
static int finish_config(json_t *d, const newdrafter_opts *o, const sp_config *tc, int zlab, sp_err *err) {
    int gemma = tc->arch == SP_ARCH_GEMMA4, N = tc->n_layers;
    int rc = 0;
    for (int i = 0; i < o->n_sets && !rc; i++) rc = sp_preset_apply_set(d, o->sets[i], err);
    int L = json_int_or(d, "num_hidden_layers", 0);
    if (!rc && L <= 0) rc = sp_err_set(err, "draft config: num_hidden_layers must be > 0");
    if (!rc && !gemma && !zlab && !set_has(o, "layer_types")) json_object_del(d, "layer_types");
    if (!rc && gemma && !set_has(o, "layer_types")) {
        json_t *lt = json_array();
        for (int i = 0; i < L; i++) json_array_append_new(lt, json_string("full_attention"));
        json_object_set_new(d, "layer_types", lt);
    }
    if (!rc && !(zlab ? set_has(o, "dflash_config.target_layer_ids") : set_has(o, "target_layer_ids"))) {
        int m = N - 1 < 5 ? N - 1 : 5, ids[5];
        if (m < 1) rc = sp_err_set(err, "target has %d layers: a drafter needs at least 2", N);
        sp_newdrafter_tap_ids(N, m, ids);
        json_t *at = zlab ? json_object_get(d, "dflash_config") : d;
        if (!rc) json_object_set_new(at, "target_layer_ids", int_list(ids, m));
    }
    return rc;
}

/* The draft config as newline-terminated JSON text (malloc'd), z-lab or DeepSpec. */
static char *draft_config(const newdrafter_opts *o, const sp_config *tc, json_t *troot, int zlab, sp_err *err) {
    int mask = sp_newdrafter_mask_id(tc);
    const char *dtype = o->dtype == SP_DT_F32 ? "float32" : o->dtype == SP_DT_BF16 ? "bfloat16"
                        : !strcmp(tc->torch_dtype, "float32") ? "float32" : "bfloat16";
    json_t *d = zlab ? zlab_config(tc, troot, mask, dtype) : dspark_config(o, tc, troot, mask, dtype);
    json_object_set_new(d, "num_hidden_layers", json_integer(tc->hidden_size < 512 ? 2 : 5));
    json_object_set_new(d, "num_target_layers", json_integer(tc->n_layers));
    int rc = finish_config(d, o, tc, zlab, err);
    char *text = rc ? NULL : json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(d);
    if (!rc && !text) sp_err_set(err, "out of memory");
    if (text) { /* newline-terminated */
        size_t n = strlen(text);
        char *t2 = realloc(text, n + 2);
        if (t2) {
            t2[n] = '\n';
            t2[n + 1] = 0;
            text = t2;
        }
    }
    return text;
}

typedef struct {
    char name[112];
    int64_t shape[2];
    int ndim;
    hf_init init;
} extra_t;

/* what one writer call holds: the target's config, the draft config, the tensors written */
typedef struct {
    sp_config tc, dc;
    json_t *troot, *dj;
    char *ttext, *text;
    st_set *ts;
    st_writer *w;
    void **bufs; /* every buffer w refers to */
    int n_bufs, cap_bufs;
    sp_dtype dt;
    int zlab;
} nd_t;

static void nd_free(nd_t *n) {
    for (int k = 0; k < n->n_bufs; k++) free(n->bufs[k]);
    free(n->bufs);
    sp_st_writer_free(n->w);
    sp_st_close(n->ts);
    json_decref(n->troot);
    json_decref(n->dj);
    free(n->ttext);
    free(n->text);
}

/* a float buffer of numel elements that lives until nd_free */
static float *nd_buf(nd_t *n, int64_t numel, sp_err *err) {
    if (n->n_bufs == n->cap_bufs) {
        int cap = n->cap_bufs ? 2 * n->cap_bufs : 64;
        void **nb = realloc(n->bufs, (size_t)cap * sizeof *nb);
        if (!nb) return sp_err_set(err, "out of memory"), NULL;
        n->bufs = nb, n->cap_bufs = cap;
    }
    float *f = malloc((size_t)numel * sizeof(float));
    if (!f) return sp_err_set(err, "out of memory"), NULL;
    return n->bufs[n->n_bufs++] = f;
}

/* f[numel] → the writer's dtype, in place (element i is read before slot i is written) */
static void to_dtype(float *f, int64_t numel, sp_dtype dt) {
    if (dt != SP_DT_BF16) return;
    uint16_t *b = (uint16_t *)f;
    for (int64_t i = 0; i < numel; i++) b[i] = sp_f32_to_bf16(f[i]);
}

static int target_tensor(st_set *ts, const char *name, int64_t V, int64_t H, const st_tensor **out, sp_err *err) {
    int64_t shape[2] = {V, H};
    return sp_st_get(ts, name, SP_DT_UNKNOWN, 2, shape, out, err);
}

/* the target's config and the draft config, checked against each other */
static int nd_configs(nd_t *n, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    char path[4096];
    size_t tn;
    if (sp_path_join(path, sizeof path, target_dir, "config.json") || sp_read_file(path, &n->ttext, &tn, err))
        return -1;
    if (sp_config_parse(&n->tc, n->ttext, path, err)) return -1;
    if (!(n->troot = sp_hf_json_loadb(n->ttext, tn, JSON_REJECT_DUPLICATES, path, err))) return -1;
    if (!(n->text = draft_config(o, &n->tc, n->troot, n->zlab, err))) return -1;
    if (sp_config_parse(&n->dc, n->text, "draft config.json", err)) return -1;
    n->dc.tensor_prefix[0] = 0; /* drafter tensors carry no prefix (docs/DFLASH.md §2, docs/DSPARK.md §2) */
    if (n->dc.hidden_size != n->tc.hidden_size || n->dc.vocab_size != n->tc.vocab_size)
        return sp_err_set(err, "draft config: hidden_size %d / vocab_size %d must equal the target's (%d / %d)",
                          n->dc.hidden_size, n->dc.vocab_size, n->tc.hidden_size, n->tc.vocab_size);
    if (!(n->dj = json_loads(n->text, 0, NULL))) return sp_err_set(err, "out of memory");
    n->dt = !strcmp(n->dc.torch_dtype, "float32") ? SP_DT_F32 : SP_DT_BF16;
    return 0;
}

/* the drafter's own tensors beside the decoder layers: fc, hidden_norm, the Markov and
 * confidence heads the draft config declares (ex[8]) */
static int nd_extras(const nd_t *n, extra_t *ex, int *n_ex, sp_err *err) {
    int64_t H = n->dc.hidden_size, V = n->dc.vocab_size;
    json_t *taps = json_object_get(n->zlab ? json_object_get(n->dj, "dflash_config") : n->dj, "target_layer_ids");
    int64_t m = json_is_array(taps) ? (int64_t)json_array_size(taps) : 0;
    int r = n->zlab ? 0 : json_int_or(n->dj, "markov_rank", 0);
    const char *mtype = json_string_value(json_object_get(n->dj, "markov_head_type"));
    int conf = json_is_true(json_object_get(n->dj, "enable_confidence_head"));
    int conf_markov = json_is_true(json_object_get(n->dj, "confidence_head_with_markov"));
    if (m < 1 || r < 0)
        return sp_err_set(err, "draft config: target_layer_ids must be a non-empty list and markov_rank >= 0");
    int k = 0;
    ex[k++] = (extra_t){"fc.weight", {H, m * H}, 2, HF_INIT_PROJ};
    ex[k++] = (extra_t){"hidden_norm.weight", {H, 0}, 1, HF_INIT_NORM};
    if (r > 0) {
        ex[k++] = (extra_t){"markov_head.markov_w1.weight", {V, r}, 2, HF_INIT_EMBED};
        ex[k++] = (extra_t){"markov_head.markov_w2.weight", {V, r}, 2, HF_INIT_PROJ};
        if (mtype && !strcmp(mtype, "gated")) {
            ex[k++] = (extra_t){"markov_head.gate_proj.weight", {r, H + r}, 2, HF_INIT_PROJ};
            ex[k++] = (extra_t){"markov_head.gate_proj.bias", {r, 0}, 1, HF_INIT_NORM};
        } else if (mtype && !strcmp(mtype, "rnn")) {
            ex[k++] = (extra_t){"markov_head.joint_proj.weight", {3 * r, 2 * r + H}, 2, HF_INIT_PROJ};
            ex[k++] = (extra_t){"markov_head.joint_proj.bias", {3 * r, 0}, 1, HF_INIT_NORM};
        } else if (mtype && strcmp(mtype, "vanilla")) {
            return sp_err_set(err, "draft config: markov_head_type \"%s\" (expected vanilla, gated or rnn)", mtype);
        }
    }
    if (conf) {
        ex[k++] = (extra_t){"confidence_head.proj.weight", {1, H + (conf_markov && r > 0 ? r : 0)}, 2, HF_INIT_PROJ};
        ex[k++] = (extra_t){"confidence_head.proj.bias", {1, 0}, 1, HF_INIT_NORM};
    }
    *n_ex = k;
    return 0;
}

/* random weights: the decoder layers (newmodel's list without embedding / LM head), then the
 * extras; tensor k's values depend on (seed, k) only */
static int nd_random(nd_t *n, const extra_t *ex, int n_ex, uint64_t seed, sp_err *err) {
    hf_tensor_spec *specs = NULL;
    int n_specs = 0;
    if (sp_hf_tensor_specs(&n->dc, &specs, &n_specs, err)) return -1;
    char embed_name[64], head_name[64]; /* the table's names, without a prefix (drafters carry none) */
    sp_tensor_hf_name(n->tc.arch, SP_TN_EMBED, 0, embed_name, sizeof embed_name);
    sp_tensor_hf_name(n->tc.arch, SP_TN_LM_HEAD, 0, head_name, sizeof head_name);
    int rc = 0;
    for (int k = 0; k < n_specs + n_ex && !rc; k++) {
        hf_tensor_spec t;
        if (k < n_specs) {
            t = specs[k];
            if (!strcmp(t.name, embed_name) || !strcmp(t.name, head_name)) continue;
        } else {
            const extra_t *e = &ex[k - n_specs];
            memset(&t, 0, sizeof t);
            snprintf(t.name, sizeof t.name, "%s", e->name);
            t.ndim = e->ndim;
            t.shape[0] = e->shape[0];
            t.shape[1] = e->shape[1];
            t.init = e->init;
        }
        int64_t numel = t.shape[0] * (t.ndim > 1 ? t.shape[1] : 1);
        float *f = nd_buf(n, numel, err);
        if (!f) rc = -1;
        if (f) sp_hf_tensor_fill(&t, k, seed, 1.0f, f, 0, numel);
        if (f) to_dtype(f, numel, n->dt);
        if (f) rc = sp_st_writer_add_ref(n->w, t.name, n->dt, t.ndim, t.shape, f, err);
    }
    free(specs);
    return rc;
}

/* DeepSpec ships copies of the target's embedding and LM head (frozen, docs/DSPARK.md §2) */
static int nd_target_tables(nd_t *n, const char *target_dir, sp_err *err) {
    int64_t H = n->dc.hidden_size, V = n->dc.vocab_size, shape[2] = {V, H};
    char embed_name[64], head_name[64], en[160];
    sp_tensor_hf_name(n->tc.arch, SP_TN_EMBED, 0, embed_name, sizeof embed_name);
    sp_tensor_hf_name(n->tc.arch, SP_TN_LM_HEAD, 0, head_name, sizeof head_name);
    if (sp_st_open_dir(&n->ts, target_dir, err)) return -1;
    snprintf(en, sizeof en, "%s%s", n->tc.tensor_prefix, embed_name);
    const st_tensor *te, *th;
    if (target_tensor(n->ts, en, V, H, &te, err)) return -1;
    if (n->tc.tie_embeddings) th = te;
    else if (target_tensor(n->ts, head_name, V, H, &th, err)) return -1;
    const st_tensor *src[2] = {te, th};
    const char *names[2] = {embed_name, head_name};
    for (int i = 0; i < 2; i++) {
        const void *data = src[i]->data;
        if (src[i]->dtype != n->dt) {
            float *f = nd_buf(n, V * H, err);
            if (!f) return -1;
            sp_to_f32(f, src[i]->data, src[i]->dtype, (size_t)(V * H));
            to_dtype(f, V * H, n->dt);
            data = f;
        }
        if (sp_st_writer_add_ref(n->w, names[i], n->dt, 2, shape, data, err)) return -1;
    }
    return 0;
}

int sp_newdrafter_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    if (o->arch && !strcmp(o->arch, "eagle3")) return sp_newdrafter_eagle3_write(dir, target_dir, o, err);
    if (!o->arch || (strcmp(o->arch, "dflash") && strcmp(o->arch, "dspark")))
        return sp_err_set(err, "new drafter: --arch must be dflash, dspark or eagle3 (got %s)", o->arch ? o->arch : "none");
    if (o->preset) {
        int ok = 0;
        for (int i = 0; sp_newdrafter_preset_at(o->arch, i); i++)
            ok |= !strcmp(sp_newdrafter_preset_at(o->arch, i), o->preset);
        if (!ok) return sp_err_set(err, "new drafter: unknown preset \"%s\" for --arch %s", o->preset, o->arch);
    }
    nd_t n = {.zlab = !strcmp(o->arch, "dflash")};
    extra_t ex[8];
    int n_ex = 0, rc = -1;
    char path[4096];
    if (nd_configs(&n, target_dir, o, err) || nd_extras(&n, ex, &n_ex, err)) goto done;
    if (!(n.w = sp_st_writer_create())) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    if (nd_random(&n, ex, n_ex, o->seed, err) || (!n.zlab && nd_target_tables(&n, target_dir, err))) goto done;
    if (sp_mkdir_p(dir, err) || sp_path_join(path, sizeof path, dir, "config.json") ||
        sp_write_file_atomic(path, n.text, strlen(n.text), err))
        goto done;
    if (sp_path_join(path, sizeof path, dir, "model.safetensors") || sp_st_writer_save(n.w, path, err)) goto done;
    rc = 0;
done:
    nd_free(&n);
    return rc;
}

/* the new-drafter writers of the dflash and dspark kinds (the table of kinds, src/api/drafter_kinds.c) */
int sp_newdrafter_dflash_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    newdrafter_opts k = *o;
    k.arch = "dflash";
    return sp_newdrafter_write(dir, target_dir, &k, err);
}

int sp_newdrafter_dspark_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    newdrafter_opts k = *o;
    k.arch = "dspark";
    return sp_newdrafter_write(dir, target_dir, &k, err);
}
