/* newdrafter_assistant.c — write a random Gemma-4 assistant for a target (see the header), and
 * parse assistant config.json files (shared with the drafter's loader, drafters/assistant.c).
 *
 * Pipeline: target config.json → assistant config JSON (shapes of the borrowed target layers,
 * defaults by size, --set overrides) → the same parser the loader uses → tensor list (docs/ASSISTANT.md §2) →
 * one model.safetensors. Not here: tokenizer files (the assistant uses the target's). */
#include "newdrafter_assistant.h"

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

/* ---- parsing ----------------------------------------------------------------------------- */

static int json_int_or(json_t *o, const char *key, int def, int *out, const char *what, sp_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff)
        return sp_err_set(err, "%s: \"%s\" must be a non-negative integer", what, key);
    *out = (int)json_integer_value(v);
    return 0;
}

int sp_assistant_config_parse(sp_assistant_config *ac, const char *text, const char *what, sp_err *err) {
    memset(ac, 0, sizeof *ac);
    json_t *root = sp_hf_json_loadb(text, strlen(text), JSON_REJECT_DUPLICATES, what, err);
    if (!root) return -1;
    int rc = -1;
    char *tc_text = NULL;
    json_t *tc = NULL;
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (!mt || (strcmp(mt, "gemma4_assistant") && strcmp(mt, "gemma4_unified_assistant"))) {
        sp_err_set(err, "%s: model_type is \"%s\", expected \"gemma4_assistant\" or \"gemma4_unified_assistant\"",
                   what, mt ? mt : "(missing)");
        goto done;
    }
    json_t *bh = json_object_get(root, "backbone_hidden_size");
    if (!json_is_integer(bh) || json_integer_value(bh) <= 0 || json_integer_value(bh) > 1 << 20) {
        sp_err_set(err, "%s: \"backbone_hidden_size\" missing or not a positive integer", what);
        goto done;
    }
    ac->backbone_hidden = (int)json_integer_value(bh);
    json_t *uo = json_object_get(root, "use_ordered_embeddings");
    ac->use_ordered_embeddings = json_is_true(uo);
    if (json_int_or(root, "num_centroids", 2048, &ac->num_centroids, what, err) ||
        json_int_or(root, "centroid_intermediate_top_k", 32, &ac->centroid_top_k, what, err))
        goto done;
    json_t *t = json_object_get(root, "text_config");
    if (!json_is_object(t)) {
        sp_err_set(err, "%s: no \"text_config\" object", what);
        goto done;
    }
    /* docs/ASSISTANT.md §1 constraints the HF config enforces */
    int ple = 0, ple_v = 0;
    if (json_int_or(t, "hidden_size_per_layer_input", 0, &ple, what, err) ||
        json_int_or(t, "vocab_size_per_layer_input", 0, &ple_v, what, err))
        goto done;
    if (ple || ple_v) {
        sp_err_set(err, "%s: text_config: an assistant has no per-layer inputs (hidden_size_per_layer_input and "
                   "vocab_size_per_layer_input must be 0)", what);
        goto done;
    }
    if (json_is_true(json_object_get(t, "use_double_wide_mlp")) ||
        json_is_true(json_object_get(t, "enable_moe_block"))) {
        sp_err_set(err, "%s: text_config: use_double_wide_mlp and enable_moe_block must be false for an assistant",
                   what);
        goto done;
    }
    /* every assistant layer is KV-shared with the target: parse the layers as unshared */
    tc = json_deep_copy(t);
    if (!tc) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    json_object_set_new(tc, "model_type", json_string("gemma4_text"));
    json_object_set_new(tc, "num_kv_shared_layers", json_integer(0));
    tc_text = json_dumps(tc, 0);
    if (!tc_text) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    if (sp_config_parse(&ac->text, tc_text, what, err)) goto done;
    if (ac->use_ordered_embeddings &&
        (ac->num_centroids <= 0 || ac->text.vocab_size % ac->num_centroids || ac->centroid_top_k <= 0 ||
         ac->centroid_top_k > ac->num_centroids)) {
        sp_err_set(err, "%s: num_centroids %d must divide vocab_size %d and centroid_intermediate_top_k %d must be in "
                   "1..num_centroids", what, ac->num_centroids, ac->text.vocab_size, ac->centroid_top_k);
        goto done;
    }
    rc = 0;
done:
    free(tc_text);
    json_decref(tc);
    json_decref(root);
    return rc;
}

int sp_assistant_borrowed_layers(const sp_config *target, int *sliding_src, int *full_src) {
    *sliding_src = *full_src = -1;
    for (int i = target->n_layers - 1; i >= 0; i--) {
        const sp_layer_config *l = &target->layers[i];
        if (l->sliding && *sliding_src < 0) *sliding_src = l->kv_source;
        if (!l->sliding && *full_src < 0) *full_src = l->kv_source;
    }
    return 0;
}

/* ---- writing ----------------------------------------------------------------------------- */

static const char *TOP_KEYS[] = {"backbone_hidden_size", "use_ordered_embeddings", "num_centroids",
                                 "centroid_intermediate_top_k", "tie_word_embeddings"};

static int apply_set(json_t *root, const char *kv, sp_err *err) {
    char key[256];
    json_t *v;
    if (sp_preset_parse_set(kv, key, sizeof key, &v, err)) return -1;
    json_t *at = json_object_get(root, "text_config");
    const char *k = key;
    if (!strncmp(k, "text_config.", 12)) k += 12;
    else
        for (size_t i = 0; i < sizeof TOP_KEYS / sizeof TOP_KEYS[0]; i++)
            if (!strcmp(k, TOP_KEYS[i])) at = root;
    if (!*k || strchr(k, '.')) {
        json_decref(v);
        return sp_err_set(err, "--set '%s': expected KEY or text_config.KEY", kv);
    }
    json_object_set_new(at, k, v);
    return 0;
}

static void set(json_t *o, const char *k, json_t *v) { json_object_set_new(o, k, v); }

/* the assistant config.json for target (tc parsed, traw its text_config JSON); unified: the
 * target is a gemma4_unified model, its assistant a gemma4_unified_assistant */
static json_t *build_config(const sp_config *tc, json_t *traw, int centroid, int unified, const char *dtype) {
    int sl, fu;
    sp_assistant_borrowed_layers(tc, &sl, &fu);
    const sp_layer_config *ls = sl >= 0 ? &tc->layers[sl] : NULL, *lf = &tc->layers[fu];
    int real = tc->hidden_size >= 1024;
    int d_a = real ? 256 : (tc->hidden_size * 3 / 4) & ~1;
    int I_a = real ? 2048 : 2 * d_a + 16;
    int nH = real ? 4 : tc->n_heads;
    int kv_s = ls ? ls->n_kv_heads : lf->n_kv_heads, kv_f = lf->n_kv_heads;
    while (nH % kv_s || nH % kv_f) nH++;
    int L = 4, V = tc->vocab_size;

    json_t *t = json_object();
    set(t, "model_type", json_string(unified ? "gemma4_unified_text" : "gemma4_text"));
    set(t, "vocab_size", json_integer(V));
    set(t, "hidden_size", json_integer(d_a));
    set(t, "intermediate_size", json_integer(I_a));
    set(t, "num_hidden_layers", json_integer(L));
    set(t, "num_attention_heads", json_integer(nH));
    set(t, "num_key_value_heads", json_integer(kv_s));
    set(t, "head_dim", json_integer(ls ? ls->head_dim : tc->head_dim));
    set(t, "global_head_dim", json_integer(lf->head_dim));
    set(t, "num_global_key_value_heads", tc->attention_k_eq_v ? json_integer(kv_f) : json_null());
    set(t, "attention_k_eq_v", json_boolean(tc->attention_k_eq_v));
    set(t, "hidden_activation", json_string("gelu_pytorch_tanh"));
    set(t, "max_position_embeddings", json_integer(tc->max_pos));
    set(t, "rms_norm_eps", json_real(tc->rms_eps));
    json_t *rp = json_object_get(traw, "rope_parameters");
    if (rp) set(t, "rope_parameters", json_deep_copy(rp));
    set(t, "attention_bias", json_false());
    set(t, "sliding_window", json_integer(tc->sliding_window));
    json_t *types = json_array();
    for (int i = 0; i < L; i++)
        json_array_append_new(types, json_string(ls && i < L - 1 ? "sliding_attention" : "full_attention"));
    set(t, "layer_types", types);
    set(t, "final_logit_softcapping", json_null());
    set(t, "vocab_size_per_layer_input", json_integer(0));
    set(t, "hidden_size_per_layer_input", json_integer(0));
    set(t, "num_kv_shared_layers", json_integer(L));
    set(t, "enable_moe_block", json_false());
    set(t, "use_double_wide_mlp", json_false());
    set(t, "pad_token_id", json_integer(tc->pad_id));
    set(t, "bos_token_id", json_integer(tc->bos_id));
    json_t *eos = json_array();
    for (int i = 0; i < tc->n_eos; i++) json_array_append_new(eos, json_integer(tc->eos_ids[i]));
    set(t, "eos_token_id", eos);
    set(t, "tie_word_embeddings", json_true());
    set(t, "dtype", json_string(dtype));

    json_t *o = json_object();
    json_t *archs = json_array();
    json_array_append_new(archs, json_string(unified ? "Gemma4UnifiedAssistantForCausalLM" : "Gemma4AssistantForCausalLM"));
    set(o, "architectures", archs);
    set(o, "model_type", json_string(unified ? "gemma4_unified_assistant" : "gemma4_assistant"));
    set(o, "backbone_hidden_size", json_integer(tc->hidden_size));
    set(o, "use_ordered_embeddings", json_boolean(centroid));
    set(o, "num_centroids", json_integer(V % 128 == 0 ? V / 128 : 2048));
    set(o, "centroid_intermediate_top_k", json_integer(32));
    set(o, "tie_word_embeddings", json_true());
    set(o, "text_config", t);
    set(o, "dtype", json_string(dtype));
    return o;
}

typedef struct {
    hf_tensor_spec *v;
    int n, cap;
} specs_t;

static int spec_add(specs_t *s, hf_init init, int ndim, int64_t d0, int64_t d1, const char *name, int layer) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        hf_tensor_spec *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    hf_tensor_spec *t = &s->v[s->n++];
    memset(t, 0, sizeof *t);
    size_t len = strlen(name);
    if (len >= sizeof t->name) return -1;
    memcpy(t->name, name, len + 1);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->init = init;
    t->layer = layer;
    return 0;
}

/* a layer tensor named by the tensor table (a Gemma-4 layer, prefix "model.") */
static int spec_role(specs_t *s, hf_init init, int ndim, int64_t d0, int64_t d1, sp_tensor_role role, int layer) {
    char rel[96], name[112];
    if (!sp_tensor_hf_name(SP_ARCH_GEMMA4, role, layer, rel, sizeof rel)) return -1;
    snprintf(name, sizeof name, "model.%s", rel);
    return spec_add(s, init, ndim, d0, d1, name, layer);
}

/* the float tensors of docs/ASSISTANT.md §2 (token_ordering is written separately) */
static int assistant_specs(const sp_assistant_config *ac, int centroid, specs_t *s) {
    const sp_config *c = &ac->text;
    int64_t d = c->hidden_size, Hb = ac->backbone_hidden, V = c->vocab_size, nH = c->n_heads;
    int rc = 0;
    rc |= spec_role(s, HF_INIT_EMBED, 2, V, d, SP_TN_EMBED, -1);
    rc |= spec_add(s, HF_INIT_PROJ, 2, d, 2 * Hb, "pre_projection.weight", -1);
    rc |= spec_add(s, HF_INIT_PROJ, 2, Hb, d, "post_projection.weight", -1);
    for (int i = 0; i < c->n_layers; i++) {
        int64_t D = c->layers[i].head_dim, I = c->layers[i].ffn_dim;
        rc |= spec_role(s, HF_INIT_NORM, 1, d, 0, SP_TN_ATTN_NORM, i);
        rc |= spec_role(s, HF_INIT_PROJ, 2, nH * D, d, SP_TN_Q, i);
        rc |= spec_role(s, HF_INIT_NORM, 1, D, 0, SP_TN_Q_NORM, i);
        rc |= spec_role(s, HF_INIT_PROJ, 2, d, nH * D, SP_TN_O, i);
        rc |= spec_role(s, HF_INIT_NORM, 1, d, 0, SP_TN_ATTN_POST_NORM, i);
        rc |= spec_role(s, HF_INIT_NORM, 1, d, 0, SP_TN_FFN_NORM, i);
        rc |= spec_role(s, HF_INIT_PROJ, 2, I, d, SP_TN_GATE, i);
        rc |= spec_role(s, HF_INIT_PROJ, 2, I, d, SP_TN_UP, i);
        rc |= spec_role(s, HF_INIT_PROJ, 2, d, I, SP_TN_DOWN, i);
        rc |= spec_role(s, HF_INIT_NORM, 1, d, 0, SP_TN_FFN_POST_NORM, i);
        rc |= spec_role(s, HF_INIT_SCALAR, 1, 1, 0, SP_TN_LAYER_SCALAR, i);
    }
    rc |= spec_role(s, HF_INIT_NORM, 1, d, 0, SP_TN_FINAL_NORM, -1);
    if (centroid) rc |= spec_add(s, HF_INIT_EMBED, 2, ac->num_centroids, d, "masked_embedding.centroids.weight", -1);
    return rc;
}

/* the target's config (a Gemma-4 model) → the assistant's config.json object; *dt the weight
 * dtype (the target's) */
static json_t *asst_config(const char *target_dir, int centroid, sp_config *tc, sp_dtype *dt, sp_err *err) {
    char path[4096];
    if (sp_path_join(path, sizeof path, target_dir, "config.json"))
        return sp_err_set(err, "target path too long: %s", target_dir), NULL;
    if (sp_config_load(tc, path, err)) return sp_err_wrap(err, "new assistant: target"), NULL;
    if (tc->arch != SP_ARCH_GEMMA4)
        return sp_err_set(err, "new assistant: target %s is %s, expected a Gemma-4 model", target_dir,
                          sp_arch_name(tc->arch)), NULL;
    json_t *traw_root = sp_hf_json_load_file(path, 0, err);
    if (!traw_root) return sp_err_wrap(err, "new assistant"), NULL;
    json_t *traw = json_object_get(traw_root, "text_config");
    if (!json_is_object(traw)) traw = traw_root;
    const char *dtype = strcmp(tc->torch_dtype, "bfloat16") ? "float32" : "bfloat16";
    *dt = strcmp(dtype, "bfloat16") ? SP_DT_F32 : SP_DT_BF16;
    const char *mt = json_string_value(json_object_get(traw_root, "model_type"));
    int unified = mt && (!strcmp(mt, "gemma4_unified") || !strcmp(mt, "gemma4_unified_text"));
    json_t *root = build_config(tc, traw, centroid, unified, dtype);
    json_decref(traw_root);
    return root;
}

/* random weights for sp (tensor k's values depend on (seed, k) only), into bufs[sp->n] */
static int asst_random(st_writer *w, const specs_t *sp, void **bufs, sp_dtype dt, float embed_std, uint64_t seed,
                       sp_err *err) {
    size_t es = sp_dtype_size(dt);
    for (int k = 0; k < sp->n; k++) {
        const hf_tensor_spec *t = &sp->v[k];
        int64_t numel = t->shape[0] * (t->ndim > 1 ? t->shape[1] : 1);
        float *f = malloc((size_t)numel * sizeof(float));
        if (!f) return sp_err_set(err, "out of memory for tensor %s", t->name);
        sp_hf_tensor_fill(t, k, seed, embed_std, f, 0, numel);
        if (dt == SP_DT_BF16) {
            uint16_t *b = malloc((size_t)numel * es);
            if (!b) {
                free(f);
                return sp_err_set(err, "out of memory for tensor %s", t->name);
            }
            for (int64_t i = 0; i < numel; i++) b[i] = sp_f32_to_bf16(f[i]);
            free(f);
            bufs[k] = b;
        } else {
            bufs[k] = f;
        }
        if (sp_st_writer_add_ref(w, t->name, dt, t->ndim, t->shape, bufs[k], err)) return -1;
    }
    return 0;
}

/* token_ordering: a random permutation of the vocabulary (Fisher-Yates, stream n_specs) */
static int asst_ordering(st_writer *w, int64_t V, int n_specs, uint64_t seed, int64_t **order, sp_err *err) {
    *order = malloc((size_t)V * sizeof **order);
    if (!*order) return sp_err_set(err, "out of memory");
    int64_t *o = *order;
    for (int64_t i = 0; i < V; i++) o[i] = i;
    for (int64_t i = V - 1; i > 0; i--) {
        int64_t j = (int64_t)(sp_rng_u64(seed, (uint64_t)n_specs, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t x = o[i];
        o[i] = o[j];
        o[j] = x;
    }
    int64_t shape[1] = {V};
    return sp_st_writer_add_ref(w, "masked_embedding.token_ordering", SP_DT_I64, 1, shape, o, err);
}

/* config.json (text + newline) and model.safetensors into dir */
static int asst_save(const char *dir, const char *text, st_writer *w, sp_err *err) {
    char path[4096];
    if (sp_mkdir_p(dir, err)) return -1;
    size_t n = strlen(text);
    if (sp_path_join(path, sizeof path, dir, "config.json")) return sp_err_set(err, "path too long: %s", dir);
    char *with_nl = malloc(n + 2);
    if (!with_nl) return sp_err_set(err, "out of memory");
    memcpy(with_nl, text, n);
    with_nl[n] = '\n';
    int wrc = sp_write_file_atomic(path, with_nl, n + 1, err);
    free(with_nl);
    if (wrc) return -1;
    if (sp_path_join(path, sizeof path, dir, "model.safetensors") || sp_st_writer_save(w, path, err)) return -1;
    return 0;
}

int sp_newdrafter_assistant_write(const char *dir, const char *target_dir, const char *head, uint64_t seed,
                               const char *const *sets, int n_sets, sp_err *err) {
    int centroid;
    if (head && !strcmp(head, "centroid")) centroid = 1;
    else if (head && !strcmp(head, "tied")) centroid = 0;
    else return sp_err_set(err, "new assistant: head '%s': expected centroid or tied", head ? head : "(null)");
    sp_config tc;
    sp_dtype dt;
    json_t *root = asst_config(target_dir, centroid, &tc, &dt, err);
    if (!root) return -1;
    int rc = -1;
    char *text = NULL;
    specs_t sp = {0};
    void **bufs = NULL;
    int64_t *order = NULL;
    st_writer *w = NULL;
    for (int i = 0; i < n_sets; i++)
        if (apply_set(root, sets[i], err)) goto done;
    text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    if (!text) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    sp_assistant_config ac;
    if (sp_assistant_config_parse(&ac, text, "generated assistant config.json", err)) goto done;
    if (centroid && (!ac.use_ordered_embeddings || ac.text.vocab_size % ac.num_centroids)) {
        sp_err_set(err, "new assistant: the centroid head needs use_ordered_embeddings and num_centroids dividing "
                   "vocab_size %d (num_centroids %d)", ac.text.vocab_size, ac.num_centroids);
        goto done;
    }
    if (assistant_specs(&ac, centroid, &sp)) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    w = sp_st_writer_create();
    bufs = calloc((size_t)sp.n, sizeof *bufs);
    if (!w || !bufs) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    float embed_std = tc.hidden_size >= 1024 ? 4.0f / sqrtf((float)ac.text.hidden_size) : 1.0f;
    if (asst_random(w, &sp, bufs, dt, embed_std, seed, err)) goto done;
    if (centroid && asst_ordering(w, ac.text.vocab_size, sp.n, seed, &order, err)) goto done;
    rc = asst_save(dir, text, w, err);
done:
    if (rc) sp_err_wrap(err, "new assistant %s", dir);
    sp_st_writer_free(w);
    for (int k = 0; bufs && k < sp.n; k++) free(bufs[k]);
    free(bufs);
    free(order);
    free(sp.v);
    free(text);
    json_decref(root);
    return rc;
}

/* the assistant kind's new-drafter writer: the preset names the head ("centroid", default, or "tied") */
int sp_newdrafter_assistant_kind_write(const char *dir, const char *target_dir, const newdrafter_opts *o,
                                       sp_err *err) {
    const char *head = o->preset ? o->preset : "centroid";
    if (strcmp(head, "centroid") && strcmp(head, "tied"))
        return sp_err_set(err, "new drafter: unknown preset \"%s\" for --arch gemma4_assistant (centroid, tied)", head);
    return sp_newdrafter_assistant_write(dir, target_dir, head, o->seed, o->sets, o->n_sets, err);
}
