/* presets.c — config.json generators for random checkpoints (see presets.h).
 *
 * Each preset is a row of numbers (preset_dims); one builder per architecture turns a row
 * into the JSON object HF would write (docs/TRANSFORMER.md §1 for llama/qwen3, docs/TRANSFORMER.md §1 for gemma4,
 * docs/GEMMA4-UNIFIED.md for gemma4_unified),
 * then the --set overrides are applied. */
#include "presets.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    preset_info info; /* arch, name, real, summary */
    int V, H, L, nH, nKV, D, I, max_pos, tied;
    double eps, theta;
    int bos, eos[3], n_eos;
    /* llama3 rope scaling (factor 0 = none) */
    double rs_factor, rs_lo, rs_hi;
    int rs_orig;
    /* gemma4 */
    int Dg, nKVg, k_eq_v, shared, ple, window, full_period, double_wide;
    double softcap;
    /* qwen3_moe: experts, experts per token, expert width, the one dense layer (-1: none) */
    int E, k, Ie, dense_layer;
} preset_dims;

/* The tiny presets keep V small (8192) so a checkpoint is a few MB; sizes are unequal on
 * purpose so a transposed tensor cannot pass (nH·D != H for qwen3, Dg != D for gemma4). */
static const preset_dims presets[] = {
    {.info = {"llama", "tiny", 0, "H 64, 2 layers, llama3 rope scaling, untied head"},
     .V = 8192, .H = 64, .L = 2, .nH = 4, .nKV = 2, .D = 16, .I = 192, .max_pos = 4096, .tied = 0,
     .eps = 1e-5, .theta = 500000.0, .bos = 1, .eos = {2}, .n_eos = 1,
     .rs_factor = 8.0, .rs_lo = 1.0, .rs_hi = 4.0, .rs_orig = 256},
    {.info = {"llama", "llama3.2-1b", 1, "Llama-3.2-1B shape (tied, llama3 scaling 32)"},
     .V = 128256, .H = 2048, .L = 16, .nH = 32, .nKV = 8, .D = 64, .I = 8192, .max_pos = 131072, .tied = 1,
     .eps = 1e-5, .theta = 500000.0, .bos = 128000, .eos = {128001}, .n_eos = 1,
     .rs_factor = 32.0, .rs_lo = 1.0, .rs_hi = 4.0, .rs_orig = 8192},
    {.info = {"qwen3", "tiny", 0, "H 64, 2 layers, q/k norm, head_dim 32 != H/nH, tied"},
     .V = 8192, .H = 64, .L = 2, .nH = 4, .nKV = 2, .D = 32, .I = 160, .max_pos = 4096, .tied = 1,
     .eps = 1e-6, .theta = 1000000.0, .bos = 1, .eos = {2}, .n_eos = 1},
    {.info = {"qwen3", "qwen3-0.6b", 1, "Qwen3-0.6B shape (tied)"},
     .V = 151936, .H = 1024, .L = 28, .nH = 16, .nKV = 8, .D = 128, .I = 3072, .max_pos = 40960, .tied = 1,
     .eps = 1e-6, .theta = 1000000.0, .bos = 151643, .eos = {151645}, .n_eos = 1},
    {.info = {"qwen3", "qwen3-4b", 1, "Qwen3-4B shape (tied)"},
     .V = 151936, .H = 2560, .L = 36, .nH = 32, .nKV = 8, .D = 128, .I = 9728, .max_pos = 40960, .tied = 1,
     .eps = 1e-6, .theta = 1000000.0, .bos = 151643, .eos = {151645}, .n_eos = 1},
    /* tiny qwen3_moe: layer 1 dense (mlp_only_layers), 8 experts of which 2 per token */
    {.info = {"qwen3_moe", "tiny", 0, "H 64, 3 layers (layer 1 dense), 8 experts, 2 per token, width 48"},
     .V = 8192, .H = 64, .L = 3, .nH = 4, .nKV = 2, .D = 32, .I = 160, .max_pos = 4096, .tied = 1,
     .eps = 1e-6, .theta = 1000000.0, .bos = 1, .eos = {2}, .n_eos = 1, .E = 8, .k = 2, .Ie = 48,
     .dense_layer = 1},
    /* Qwen3-30B-A3B's layout (128 experts, 8 per token) scaled to ~1.5B total, ~0.4B active */
    {.info = {"qwen3_moe", "qwen3-moe-2b", 1, "Qwen3-30B-A3B layout at ~1.5B total / ~0.4B active (bench)"},
     .V = 151936, .H = 1024, .L = 16, .nH = 16, .nKV = 4, .D = 128, .I = 3072, .max_pos = 40960, .tied = 1,
     .eps = 1e-6, .theta = 1000000.0, .bos = 151643, .eos = {151645}, .n_eos = 1, .E = 64, .k = 8, .Ie = 384,
     .dense_layer = -1},
    /* tiny gemma4: layers S,S,F,S,S,F; the last 3 share KV (non-shared layers end S,F as
     * llama.cpp's reuse rule needs, docs/GGUF-FORMAT.md §7); k_eq_v; PLE 16; window 16. */
    {.info = {"gemma4", "tiny", 0,
              "H 64, 6 layers S,S,F,S,S,F, window 16, k_eq_v, 3 KV-shared, PLE 16, double-wide MLP"},
     .V = 8192, .H = 64, .L = 6, .nH = 4, .nKV = 2, .D = 16, .I = 128, .max_pos = 4096, .tied = 1,
     .eps = 1e-6, .bos = 2, .eos = {1}, .n_eos = 1,
     .Dg = 32, .nKVg = 1, .k_eq_v = 1, .shared = 3, .ple = 16, .window = 16, .full_period = 3,
     .double_wide = 1, .softcap = 30.0},
    {.info = {"gemma4", "gemma4-e2b", 1, "Gemma-4 E2B text shape (35 layers, PLE 256)"},
     .V = 262144, .H = 1536, .L = 35, .nH = 8, .nKV = 1, .D = 256, .I = 6144, .max_pos = 131072, .tied = 1,
     .eps = 1e-6, .bos = 2, .eos = {1, 106, 50}, .n_eos = 3,
     .Dg = 512, .nKVg = 0, .k_eq_v = 0, .shared = 20, .ple = 256, .window = 512, .full_period = 5,
     .double_wide = 1, .softcap = 30.0},
    /* Gemma-4 12B (gemma4_unified): no PLE, no KV sharing, 5 sliding : 1 full, K = V on the
     * full layers with one KV head of width 512 (docs/GEMMA4-UNIFIED.md §2) */
    {.info = {"gemma4_unified", "gemma4-12b", 1, "Gemma-4 12B text shape (48 layers, window 1024, k_eq_v)"},
     .V = 262144, .H = 3840, .L = 48, .nH = 16, .nKV = 8, .D = 256, .I = 15360, .max_pos = 262144, .tied = 1,
     .eps = 1e-6, .bos = 2, .eos = {1, 106, 50}, .n_eos = 3,
     .Dg = 512, .nKVg = 1, .k_eq_v = 1, .shared = 0, .ple = 0, .window = 1024, .full_period = 6,
     .double_wide = 0, .softcap = 30.0},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

const preset_info *sp_preset_at(int i) { return i >= 0 && i < N_PRESETS ? &presets[i].info : NULL; }

static const preset_dims *find_dims(const char *arch, const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (!strcmp(presets[i].info.arch, arch) && !strcmp(presets[i].info.name, name)) return &presets[i];
    return NULL;
}

const preset_info *sp_preset_find(const char *arch, const char *name) {
    const preset_dims *p = find_dims(arch, name);
    return p ? &p->info : NULL;
}

/* ---- builders ---------------------------------------------------------------------------- */

static void set(json_t *o, const char *k, json_t *v) { json_object_set_new(o, k, v); }

static json_t *eos_value(const preset_dims *p) {
    if (p->n_eos == 1) return json_integer(p->eos[0]);
    json_t *a = json_array();
    for (int i = 0; i < p->n_eos; i++) json_array_append_new(a, json_integer(p->eos[i]));
    return a;
}

/* keys shared by LlamaForCausalLM and Qwen3ForCausalLM, in HF's order */
static json_t *build_decoder(const preset_dims *p, const char *dtype) {
    int is_llama = !strcmp(p->info.arch, "llama"), moe = p->E > 0;
    json_t *o = json_object();
    json_t *archs = json_array();
    json_array_append_new(archs, json_string(is_llama ? "LlamaForCausalLM"
                                             : moe  ? "Qwen3MoeForCausalLM"
                                                    : "Qwen3ForCausalLM"));
    set(o, "architectures", archs);
    set(o, "attention_bias", json_false());
    set(o, "attention_dropout", json_real(0.0));
    set(o, "bos_token_id", json_integer(p->bos));
    set(o, "eos_token_id", eos_value(p));
    set(o, "head_dim", json_integer(p->D));
    set(o, "hidden_act", json_string("silu"));
    set(o, "hidden_size", json_integer(p->H));
    set(o, "initializer_range", json_real(0.02));
    set(o, "intermediate_size", json_integer(p->I));
    set(o, "max_position_embeddings", json_integer(p->max_pos));
    if (is_llama) set(o, "mlp_bias", json_false());
    else set(o, "max_window_layers", json_integer(p->L));
    set(o, "model_type", json_string(p->info.arch));
    set(o, "num_attention_heads", json_integer(p->nH));
    set(o, "num_hidden_layers", json_integer(p->L));
    set(o, "num_key_value_heads", json_integer(p->nKV));
    if (is_llama) set(o, "pretraining_tp", json_integer(1));
    set(o, "rms_norm_eps", json_real(p->eps));
    if (p->rs_factor > 0) {
        json_t *rs = json_object();
        set(rs, "factor", json_real(p->rs_factor));
        set(rs, "high_freq_factor", json_real(p->rs_hi));
        set(rs, "low_freq_factor", json_real(p->rs_lo));
        set(rs, "original_max_position_embeddings", json_integer(p->rs_orig));
        set(rs, "rope_type", json_string("llama3"));
        set(o, "rope_scaling", rs);
    } else {
        set(o, "rope_scaling", json_null());
    }
    set(o, "rope_theta", json_real(p->theta));
    if (!is_llama) {
        set(o, "sliding_window", json_null());
        set(o, "use_sliding_window", json_false());
    }
    set(o, "tie_word_embeddings", json_boolean(p->tied));
    set(o, "torch_dtype", json_string(dtype));
    set(o, "use_cache", json_true());
    set(o, "vocab_size", json_integer(p->V));
    if (moe) {
        set(o, "num_experts", json_integer(p->E));
        set(o, "num_experts_per_tok", json_integer(p->k));
        set(o, "moe_intermediate_size", json_integer(p->Ie));
        set(o, "norm_topk_prob", json_true());
        set(o, "decoder_sparse_step", json_integer(1));
        json_t *dense = json_array();
        if (p->dense_layer >= 0) json_array_append_new(dense, json_integer(p->dense_layer));
        set(o, "mlp_only_layers", dense);
        set(o, "output_router_logits", json_false());
        set(o, "router_aux_loss_coef", json_real(0.001));
    }
    return o;
}

/* layer i is full iff (i+1) % period == 0; the last layer is always full (HF forces it) */
static json_t *gemma4_layer_types(int L, int period) {
    json_t *a = json_array();
    for (int i = 0; i < L; i++) {
        int full = (period > 0 && (i + 1) % period == 0) || i == L - 1;
        json_array_append_new(a, json_string(full ? "full_attention" : "sliding_attention"));
    }
    return a;
}

static int is_unified(const preset_dims *p) { return !strcmp(p->info.arch, "gemma4_unified"); }

static json_t *build_gemma4_text(const preset_dims *p, const char *dtype) {
    json_t *t = json_object();
    set(t, "model_type", json_string(is_unified(p) ? "gemma4_unified_text" : "gemma4_text"));
    set(t, "vocab_size", json_integer(p->V));
    set(t, "hidden_size", json_integer(p->H));
    set(t, "intermediate_size", json_integer(p->I));
    set(t, "num_hidden_layers", json_integer(p->L));
    set(t, "num_attention_heads", json_integer(p->nH));
    set(t, "num_key_value_heads", json_integer(p->nKV));
    set(t, "head_dim", json_integer(p->D));
    set(t, "global_head_dim", json_integer(p->Dg));
    set(t, "num_global_key_value_heads", p->nKVg ? json_integer(p->nKVg) : json_null());
    set(t, "attention_k_eq_v", json_boolean(p->k_eq_v));
    set(t, "hidden_activation", json_string("gelu_pytorch_tanh"));
    set(t, "max_position_embeddings", json_integer(p->max_pos));
    set(t, "rms_norm_eps", json_real(p->eps));
    json_t *rp = json_object(), *s = json_object(), *f = json_object();
    set(s, "rope_type", json_string("default"));
    set(s, "rope_theta", json_real(10000.0));
    set(f, "rope_type", json_string("proportional"));
    set(f, "partial_rotary_factor", json_real(0.25));
    set(f, "rope_theta", json_real(1000000.0));
    set(rp, "sliding_attention", s);
    set(rp, "full_attention", f);
    set(t, "rope_parameters", rp);
    set(t, "attention_bias", json_false());
    set(t, "attention_dropout", json_real(0.0));
    set(t, "sliding_window", json_integer(p->window));
    set(t, "layer_types", gemma4_layer_types(p->L, p->full_period));
    set(t, "final_logit_softcapping", p->softcap > 0 ? json_real(p->softcap) : json_null());
    set(t, "use_bidirectional_attention", json_null());
    set(t, "vocab_size_per_layer_input", json_integer(p->V));
    set(t, "hidden_size_per_layer_input", json_integer(p->ple));
    set(t, "num_kv_shared_layers", json_integer(p->shared));
    set(t, "enable_moe_block", json_false());
    set(t, "use_double_wide_mlp", json_boolean(p->double_wide));
    set(t, "num_experts", json_null());
    set(t, "top_k_experts", json_null());
    set(t, "moe_intermediate_size", json_null());
    set(t, "pad_token_id", json_integer(0));
    set(t, "bos_token_id", json_integer(p->bos));
    set(t, "eos_token_id", eos_value(p));
    set(t, "tie_word_embeddings", json_boolean(p->tied));
    set(t, "initializer_range", json_real(0.02));
    set(t, "use_cache", json_true());
    set(t, "dtype", json_string(dtype));
    return t;
}

static json_t *build_gemma4(const preset_dims *p, const char *dtype, json_t *text) {
    json_t *o = json_object();
    json_t *archs = json_array();
    json_array_append_new(archs, json_string(is_unified(p) ? "Gemma4UnifiedForConditionalGeneration"
                                                           : "Gemma4ForConditionalGeneration"));
    set(o, "architectures", archs);
    set(o, "model_type", json_string(p->info.arch));
    set(o, "text_config", text);
    set(o, "vision_config", json_null());
    set(o, "audio_config", json_null());
    if (p->info.real && !is_unified(p)) { /* the multimodal token ids of the released checkpoints (docs/TRANSFORMER.md §1) */
        set(o, "boi_token_id", json_integer(255999));
        set(o, "boa_token_id", json_integer(256000));
        set(o, "image_token_id", json_integer(258880));
        set(o, "audio_token_id", json_integer(258881));
        set(o, "eoi_token_id", json_integer(258882));
    }
    set(o, "tie_word_embeddings", json_boolean(p->tied));
    set(o, "initializer_range", json_real(0.02));
    set(o, "dtype", json_string(dtype));
    return o;
}

/* ---- overrides ---------------------------------------------------------------------------- */

int sp_preset_parse_set(const char *kv, char *key, size_t cap, json_t **value, sp_err *err) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) return sp_err_set(err, "--set '%s': expected key=value", kv);
    size_t klen = (size_t)(eq - kv);
    if (klen >= cap) return sp_err_set(err, "--set '%s': key too long", kv);
    memcpy(key, kv, klen);
    key[klen] = 0;
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (!v) v = json_string(eq + 1);
    if (!v) return sp_err_set(err, "--set '%s': value is not valid UTF-8", kv);
    *value = v;
    return 0;
}

int sp_preset_apply_set(json_t *obj, const char *kv, sp_err *err) {
    char key[256];
    json_t *v;
    if (sp_preset_parse_set(kv, key, sizeof key, &v, err)) return -1;
    json_t *at = obj;
    char *part = key;
    for (char *dot; (dot = strchr(part, '.')) != NULL; part = dot + 1) {
        *dot = 0;
        if (!*part) {
            json_decref(v);
            return sp_err_set(err, "--set '%s': empty key component", kv);
        }
        json_t *next = json_object_get(at, part);
        if (!json_is_object(next)) {
            next = json_object();
            json_object_set_new(at, part, next);
        }
        at = next;
    }
    if (!*part) {
        json_decref(v);
        return sp_err_set(err, "--set '%s': empty key component", kv);
    }
    json_object_set_new(at, part, v);
    return 0;
}

static int set_has_key(const char *const *sets, int n, const char *key) {
    size_t k = strlen(key);
    for (int i = 0; i < n; i++)
        if (!strncmp(sets[i], key, k) && sets[i][k] == '=') return 1;
    return 0;
}

char *sp_preset_config_json(const char *arch, const char *preset, const char *dtype,
                         const char *const *sets, int n_sets, sp_err *err) {
    const preset_dims *p = find_dims(arch, preset);
    if (!p) {
        int any = 0;
        for (int i = 0; i < N_PRESETS; i++) any |= !strcmp(presets[i].info.arch, arch);
        if (!any) {
            sp_err_set(err, "unknown architecture '%s' (expected llama, qwen3, qwen3_moe, gemma4 or gemma4_unified)", arch);
        } else {
            char names[256] = "";
            for (int i = 0; i < N_PRESETS; i++)
                if (!strcmp(presets[i].info.arch, arch)) {
                    strncat(names, " ", sizeof names - strlen(names) - 1);
                    strncat(names, presets[i].info.name, sizeof names - strlen(names) - 1);
                }
            sp_err_set(err, "unknown preset '%s' for %s (presets:%s)", preset, arch, names);
        }
        return NULL;
    }
    if (strcmp(dtype, "float32") && strcmp(dtype, "bfloat16")) {
        sp_err_set(err, "dtype '%s': expected float32 or bfloat16", dtype);
        return NULL;
    }
    int gemma = !strcmp(arch, "gemma4") || !strcmp(arch, "gemma4_unified");
    json_t *text = gemma ? build_gemma4_text(p, dtype) : build_decoder(p, dtype);
    json_t *root = gemma ? build_gemma4(p, dtype, text) : text;
    for (int i = 0; i < n_sets; i++)
        if (sp_preset_apply_set(text, sets[i], err) != 0) {
            json_decref(root);
            return NULL;
        }
    if (gemma) {
        /* keep dependent keys consistent unless the user set them too */
        json_t *L = json_object_get(text, "num_hidden_layers");
        if (set_has_key(sets, n_sets, "num_hidden_layers") && !set_has_key(sets, n_sets, "layer_types") &&
            json_is_integer(L) && json_integer_value(L) > 0 && json_integer_value(L) <= SP_MAX_LAYERS)
            set(text, "layer_types", gemma4_layer_types((int)json_integer_value(L), p->full_period));
        json_t *V = json_object_get(text, "vocab_size");
        if (set_has_key(sets, n_sets, "vocab_size") && !set_has_key(sets, n_sets, "vocab_size_per_layer_input"))
            set(text, "vocab_size_per_layer_input", json_copy(V));
        json_t *tie = json_object_get(text, "tie_word_embeddings");
        if (tie) set(root, "tie_word_embeddings", json_copy(tie));
    }
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (!s) {
        sp_err_set(err, "cannot serialise config for %s/%s", arch, preset);
        return NULL;
    }
    /* jansson's string is malloc'd by its allocator (malloc by default); add a newline */
    size_t n = strlen(s);
    char *out = malloc(n + 2);
    if (!out) {
        free(s);
        sp_err_set(err, "out of memory");
        return NULL;
    }
    memcpy(out, s, n);
    out[n] = '\n';
    out[n + 1] = 0;
    free(s);
    return out;
}
