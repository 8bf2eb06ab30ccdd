/* config.c — Hugging Face config.json → sp_config for llama, qwen3, qwen3_moe, gemma4 and gemma4_unified
 * (docs/TRANSFORMER.md, docs/GEMMA4-UNIFIED.md).
 *
 * Reads both key forms where transformers versions differ (rope_theta vs rope_parameters;
 * global_head_dim vs per_layer_config). Shape keys without an HF default are required; a
 * missing one, an unknown architecture, or a feature specula does not run (Gemma-4 MoE,
 * attention bias, Qwen sliding window) is a clear error naming the key. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "formats/hfjson.h"

const char *sp_arch_name(sp_arch a) {
    switch (a) {
    case SP_ARCH_LLAMA: return "llama";
    case SP_ARCH_QWEN3: return "qwen3";
    case SP_ARCH_GEMMA4: return "gemma4";
    }
    return "?";
}

/* ---- typed getters: required ones fail with the key name ---------------------------- */
typedef struct {
    const char *what; /* file name for messages */
    sp_err *err;
} ctx_t;

static int get_int(ctx_t *c, json_t *o, const char *key, int required, int def, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return sp_err_set(c->err, "%s: missing required key \"%s\"", c->what, key);
        *out = def;
        return 0;
    }
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < -2147483647 || x > 2147483647)
            return sp_err_set(c->err, "%s: key \"%s\" out of range", c->what, key);
        *out = (int)x;
        return 0;
    }
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        fabs(json_real_value(v)) < 2e9) {
        *out = (int)json_real_value(v);
        return 0;
    }
    return sp_err_set(c->err, "%s: key \"%s\" must be an integer", c->what, key);
}

static int get_num(ctx_t *c, json_t *o, const char *key, int required, double def, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return sp_err_set(c->err, "%s: missing required key \"%s\"", c->what, key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return sp_err_set(c->err, "%s: key \"%s\" must be a number", c->what, key);
    *out = json_number_value(v);
    return 0;
}

static int get_bool(ctx_t *c, json_t *o, const char *key, int def, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return sp_err_set(c->err, "%s: key \"%s\" must be true or false", c->what, key);
    *out = json_is_true(v);
    return 0;
}

static const char *get_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* eos_token_id: an int or a list of ints */
static int get_eos(ctx_t *c, json_t *o, sp_config *cfg) {
    json_t *v = json_object_get(o, "eos_token_id");
    cfg->n_eos = 0;
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return sp_err_set(c->err, "%s: \"eos_token_id\" %lld is not a token id", c->what,
                              (long long)json_integer_value(v));
        cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(v);
        return 0;
    }
    if (!json_is_array(v)) return sp_err_set(c->err, "%s: \"eos_token_id\" must be an integer or a list", c->what);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return sp_err_set(c->err, "%s: \"eos_token_id\"[%zu] is not a token id", c->what, i);
        if (cfg->n_eos < SP_MAX_EOS) cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(e);
    }
    return 0;
}

/* rope: either {"rope_type":..., "rope_theta":...,...} or the legacy rope_theta + rope_scaling */
static int parse_rope_obj(ctx_t *c, json_t *r, sp_rope_params *rp, const char *where) {
    const char *type = get_str(r, "rope_type");
    if (!type) type = get_str(r, "type");
    if (!type || !strcmp(type, "default")) rp->type = SP_ROPE_DEFAULT;
    else if (!strcmp(type, "llama3")) rp->type = SP_ROPE_LLAMA3;
    else if (!strcmp(type, "proportional")) rp->type = SP_ROPE_PROPORTIONAL;
    else return sp_err_set(c->err, "%s: %s: unsupported rope_type \"%s\" (supported: default, llama3, proportional)",
                           c->what, where, type);
    if (get_num(c, r, "rope_theta", 0, rp->theta, &rp->theta)) return -1;
    if (get_num(c, r, "factor", 0, 1.0, &rp->factor)) return -1;
    if (get_num(c, r, "partial_rotary_factor", 0, 1.0, &rp->partial_rotary_factor)) return -1;
    if (rp->type == SP_ROPE_LLAMA3) {
        if (get_num(c, r, "low_freq_factor", 1, 0, &rp->low_freq_factor) ||
            get_num(c, r, "high_freq_factor", 1, 0, &rp->high_freq_factor) ||
            get_num(c, r, "original_max_position_embeddings", 1, 0, &rp->original_max_pos))
            return sp_err_wrap(c->err, "in %s", where);
        if (rp->factor <= 0 || rp->high_freq_factor <= rp->low_freq_factor)
            return sp_err_set(c->err, "%s: %s: llama3 rope needs factor > 0 and high_freq_factor > low_freq_factor",
                              c->what, where);
    }
    if (!(rp->theta > 0)) return sp_err_set(c->err, "%s: %s: rope_theta must be > 0", c->what, where);
    return 0;
}

static int parse_rope_llama_qwen(ctx_t *c, json_t *o, sp_rope_params *rp, double def_theta) {
    memset(rp, 0, sizeof *rp);
    rp->theta = def_theta;
    rp->factor = 1.0;
    rp->partial_rotary_factor = 1.0;
    json_t *params = json_object_get(o, "rope_parameters");
    if (json_is_object(params)) return parse_rope_obj(c, params, rp, "rope_parameters");
    if (get_num(c, o, "rope_theta", 0, def_theta, &rp->theta)) return -1;
    json_t *sc = json_object_get(o, "rope_scaling");
    if (sc && !json_is_null(sc)) {
        if (!json_is_object(sc)) return sp_err_set(c->err, "%s: \"rope_scaling\" must be an object or null", c->what);
        double theta = rp->theta;
        if (parse_rope_obj(c, sc, rp, "rope_scaling")) return -1;
        rp->theta = theta;
    }
    return 0;
}

/* ---- llama / qwen3 -------------------------------------------------------------------- */
static int parse_llama_qwen(ctx_t *c, json_t *o, sp_config *cfg) {
    int bias = 0, mlp_bias = 0, swa = 0;
    if (get_int(c, o, "vocab_size", 1, 0, &cfg->vocab_size) || get_int(c, o, "hidden_size", 1, 0, &cfg->hidden_size) ||
        get_int(c, o, "intermediate_size", 1, 0, &cfg->ffn_dim) ||
        get_int(c, o, "num_hidden_layers", 1, 0, &cfg->n_layers) ||
        get_int(c, o, "num_attention_heads", 1, 0, &cfg->n_heads))
        return -1;
    if (get_int(c, o, "num_key_value_heads", 0, cfg->n_heads, &cfg->n_kv_heads) ||
        get_int(c, o, "head_dim", 0, cfg->n_heads > 0 ? cfg->hidden_size / cfg->n_heads : 0, &cfg->head_dim) ||
        get_num(c, o, "rms_norm_eps", 0, cfg->arch == SP_ARCH_LLAMA ? 1e-6 : 1e-6, &cfg->rms_eps) ||
        get_bool(c, o, "tie_word_embeddings", 0, &cfg->tie_embeddings) ||
        get_int(c, o, "max_position_embeddings", 0, 4096, &cfg->max_pos) ||
        get_int(c, o, "bos_token_id", 0, -1, &cfg->bos_id) || get_int(c, o, "pad_token_id", 0, -1, &cfg->pad_id) ||
        get_bool(c, o, "attention_bias", 0, &bias) || get_bool(c, o, "mlp_bias", 0, &mlp_bias) ||
        get_bool(c, o, "use_sliding_window", 0, &swa) || get_eos(c, o, cfg))
        return -1;
    if (bias || mlp_bias)
        return sp_err_set(c->err, "%s: attention_bias / mlp_bias = true is not supported", c->what);
    if (swa) return sp_err_set(c->err, "%s: use_sliding_window = true is not supported for %s", c->what,
                               sp_arch_name(cfg->arch));
    const char *act = get_str(o, "hidden_act");
    if (act && strcmp(act, "silu"))
        return sp_err_set(c->err, "%s: hidden_act \"%s\" is not supported (expected \"silu\")", c->what, act);
    cfg->act = SP_ACT_SILU;
    cfg->qk_norm = cfg->arch == SP_ARCH_QWEN3;
    if (parse_rope_llama_qwen(c, o, &cfg->rope, cfg->arch == SP_ARCH_LLAMA ? 10000.0 : 10000.0)) return -1;
    if (cfg->rope.type == SP_ROPE_PROPORTIONAL)
        return sp_err_set(c->err, "%s: rope_type \"proportional\" is a Gemma-4 rope, not valid for %s", c->what,
                          sp_arch_name(cfg->arch));
    cfg->rope_swa = cfg->rope;
    snprintf(cfg->tensor_prefix, sizeof cfg->tensor_prefix, "model.");
    if (cfg->n_layers > SP_MAX_LAYERS)
        return sp_err_set(c->err, "%s: num_hidden_layers %d exceeds the supported %d", c->what, cfg->n_layers,
                          SP_MAX_LAYERS);
    for (int i = 0; i < cfg->n_layers; i++) {
        sp_layer_config *l = &cfg->layers[i];
        l->sliding = 0;
        l->head_dim = cfg->head_dim;
        l->n_kv_heads = cfg->n_kv_heads;
        l->ffn_dim = cfg->ffn_dim;
        l->has_v_proj = 1;
        l->kv_source = i;
    }
    return 0;
}

/* the expert count, the experts per token (named used_key in this architecture's config) and
 * the expert width in range */
static int moe_sizes_check(ctx_t *c, const sp_config *cfg, const char *used_key) {
    if (cfg->n_experts <= 0 || cfg->n_experts > SP_CONFIG_MAX_EXPERTS)
        return sp_err_set(c->err, "%s: num_experts %d out of range 1..%d", c->what, cfg->n_experts,
                          SP_CONFIG_MAX_EXPERTS);
    if (cfg->n_experts_used <= 0 || cfg->n_experts_used > cfg->n_experts)
        return sp_err_set(c->err, "%s: %s %d out of range 1..num_experts (%d)", c->what, used_key,
                          cfg->n_experts_used, cfg->n_experts);
    if (cfg->moe_ffn_dim <= 0 || cfg->moe_ffn_dim > SP_CONFIG_MAX_DIM)
        return sp_err_set(c->err, "%s: moe_intermediate_size %d out of range 1..%d", c->what, cfg->moe_ffn_dim,
                          SP_CONFIG_MAX_DIM);
    return 0;
}

/* ---- qwen3_moe: the MoE keys on top of qwen3's ------------------------------------------ */
/* Layer i is MoE when it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
 * (Qwen3MoeDecoderLayer); the others keep the dense MLP of intermediate_size. */
static int parse_qwen3_moe(ctx_t *c, json_t *o, sp_config *cfg) {
    int step = 1, shared = 0;
    if (get_int(c, o, "num_experts", 1, 0, &cfg->n_experts) ||
        get_int(c, o, "num_experts_per_tok", 1, 0, &cfg->n_experts_used) ||
        get_int(c, o, "moe_intermediate_size", 1, 0, &cfg->moe_ffn_dim) ||
        get_bool(c, o, "norm_topk_prob", 0, &cfg->norm_topk_prob) ||
        get_int(c, o, "decoder_sparse_step", 0, 1, &step) ||
        get_int(c, o, "shared_expert_intermediate_size", 0, 0, &shared))
        return -1;
    if (shared > 0)
        return sp_err_set(c->err, "%s: a shared expert (shared_expert_intermediate_size %d) is not supported", c->what,
                          shared);
    if (moe_sizes_check(c, cfg, "num_experts_per_tok")) return -1;
    if (step <= 0) return sp_err_set(c->err, "%s: decoder_sparse_step %d must be > 0", c->what, step);
    for (int i = 0; i < cfg->n_layers; i++) cfg->layers[i].moe = (i + 1) % step == 0;
    json_t *dense = json_object_get(o, "mlp_only_layers");
    if (dense && !json_is_null(dense)) {
        if (!json_is_array(dense)) return sp_err_set(c->err, "%s: \"mlp_only_layers\" must be a list", c->what);
        size_t i;
        json_t *e;
        json_array_foreach(dense, i, e) {
            json_int_t li = json_is_integer(e) ? json_integer_value(e) : -1;
            if (li < 0 || li >= cfg->n_layers)
                return sp_err_set(c->err, "%s: \"mlp_only_layers\"[%zu] is not a layer index (0..%d)", c->what, i,
                                  cfg->n_layers - 1);
            cfg->layers[li].moe = 0;
        }
    }
    return 0;
}

/* ---- gemma4 text ------------------------------------------------------------------------ */
/* rope per layer type (defaults from Gemma4TextConfig), then rope_parameters */
static int gemma4_rope(ctx_t *c, json_t *o, sp_config *cfg) {
    memset(&cfg->rope_swa, 0, sizeof cfg->rope_swa);
    cfg->rope_swa = (sp_rope_params){SP_ROPE_DEFAULT, 10000.0, 1.0, 0, 0, 0, 1.0};
    cfg->rope = (sp_rope_params){SP_ROPE_PROPORTIONAL, 1000000.0, 1.0, 0, 0, 0, 0.25};
    json_t *rpar = json_object_get(o, "rope_parameters");
    if (rpar && !json_is_null(rpar)) {
        if (!json_is_object(rpar)) return sp_err_set(c->err, "%s: \"rope_parameters\" must be an object", c->what);
        json_t *s = json_object_get(rpar, "sliding_attention"), *f = json_object_get(rpar, "full_attention");
        if (s && json_is_object(s) && parse_rope_obj(c, s, &cfg->rope_swa, "rope_parameters.sliding_attention"))
            return -1;
        if (f && json_is_object(f) && parse_rope_obj(c, f, &cfg->rope, "rope_parameters.full_attention")) return -1;
    }

    return 0;
}

/* layer types: explicit list or the (i+1) % 6 default; the last layer is always full */
static int gemma4_layer_types(ctx_t *c, json_t *o, sp_config *cfg, int L) {
    json_t *lt = json_object_get(o, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != L)
            return sp_err_set(c->err, "%s: \"layer_types\" must be a list of %d entries", c->what, L);
        for (int i = 0; i < L; i++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)i));
            if (!t) return sp_err_set(c->err, "%s: \"layer_types\"[%d] is not a string", c->what, i);
            if (!strcmp(t, "sliding_attention")) cfg->layers[i].sliding = 1;
            else if (!strcmp(t, "full_attention")) cfg->layers[i].sliding = 0;
            else return sp_err_set(c->err, "%s: \"layer_types\"[%d] = \"%s\" is not sliding_attention or full_attention",
                                   c->what, i, t);
        }
    } else {
        for (int i = 0; i < L; i++) cfg->layers[i].sliding = (i + 1) % 6 != 0;
    }
    if (cfg->layers[L - 1].sliding) {
        sp_log(SP_LOG_WARN, "%s: last layer forced to full attention (as transformers does)", c->what);
        cfg->layers[L - 1].sliding = 0;
    }
    return 0;
}

/* newer key form: per_layer_config {"idx": {"head_dim":..,"num_key_value_heads":..}} */
static int gemma4_per_layer_config(ctx_t *c, json_t *o, sp_config *cfg, int L) {
    json_t *plc = json_object_get(o, "per_layer_config");
    if (plc && !json_is_null(plc)) {
        if (!json_is_object(plc)) return sp_err_set(c->err, "%s: \"per_layer_config\" must be an object", c->what);
        const char *k;
        json_t *v;
        json_object_foreach(plc, k, v) {
            char *end;
            long idx = strtol(k, &end, 10);
            if (*end || idx < 0 || idx >= L || !json_is_object(v))
                return sp_err_set(c->err, "%s: per_layer_config key \"%s\" is not a layer index", c->what, k);
            if (get_int(c, v, "head_dim", 0, cfg->layers[idx].head_dim, &cfg->layers[idx].head_dim) ||
                get_int(c, v, "num_key_value_heads", 0, cfg->layers[idx].n_kv_heads, &cfg->layers[idx].n_kv_heads))
                return -1;
            if (!cfg->layers[idx].sliding) {
                cfg->global_head_dim = cfg->layers[idx].head_dim;
                if (cfg->attention_k_eq_v) cfg->n_global_kv_heads = cfg->layers[idx].n_kv_heads;
            }
        }
    }
    return 0;
}

/* KV sharing: layers >= L - shared read the last non-shared layer of the same type */
static int gemma4_kv_sharing(ctx_t *c, sp_config *cfg, int L) {
    int first_shared = L - cfg->n_kv_shared;
    if (cfg->n_kv_shared < 0 || first_shared < 1)
        return sp_err_set(c->err, "%s: num_kv_shared_layers %d out of range for %d layers", c->what,
                          cfg->n_kv_shared, L);
    for (int i = 0; i < L; i++) {
        sp_layer_config *l = &cfg->layers[i];
        l->kv_source = i;
        if (i < first_shared) continue;
        int src = -1;
        for (int j = first_shared - 1; j >= 0; j--)
            if (cfg->layers[j].sliding == l->sliding) {
                src = j;
                break;
            }
        if (src < 0)
            return sp_err_set(c->err, "%s: KV-shared layer %d has no earlier non-shared %s layer", c->what, i,
                              l->sliding ? "sliding" : "full");
        l->kv_source = src;
        if (cfg->double_wide_mlp) l->ffn_dim = 2 * cfg->ffn_dim;
    }
    return 0;
}

/* the model types read as a Gemma-4 text stack: gemma4 and gemma4_unified (the 12B) nest it in
 * text_config, gemma4_text and gemma4_unified_text are the bare stack (docs/GEMMA4-UNIFIED.md) */
static int is_gemma4_text_type(const char *mt) {
    return !strcmp(mt, "gemma4_text") || !strcmp(mt, "gemma4_unified_text");
}

static int is_gemma4_type(const char *mt) {
    return !strcmp(mt, "gemma4") || !strcmp(mt, "gemma4_unified") || is_gemma4_text_type(mt);
}

/* enable_moe_block: every layer adds a routed-expert block beside its dense MLP (the 26B-A4B,
 * docs/TRANSFORMER.md §5b): num_experts experts of width moe_intermediate_size, top_k_experts per
 * token, their weights always renormalised */
static int gemma4_moe(ctx_t *c, json_t *o, sp_config *cfg) {
    int moe = 0;
    if (get_bool(c, o, "enable_moe_block", 0, &moe)) return -1;
    if (!moe) return 0;
    if (get_int(c, o, "num_experts", 1, 0, &cfg->n_experts) ||
        get_int(c, o, "top_k_experts", 1, 0, &cfg->n_experts_used) ||
        get_int(c, o, "moe_intermediate_size", 1, 0, &cfg->moe_ffn_dim))
        return -1;
    if (moe_sizes_check(c, cfg, "top_k_experts")) return -1;
    cfg->norm_topk_prob = 1;
    for (int i = 0; i < cfg->n_layers; i++) cfg->layers[i].moe = 1;
    return 0;
}

static int parse_gemma4(ctx_t *c, json_t *o, sp_config *cfg) {
    if (get_int(c, o, "vocab_size", 0, 262144, &cfg->vocab_size) ||
        get_int(c, o, "hidden_size", 1, 0, &cfg->hidden_size) ||
        get_int(c, o, "intermediate_size", 1, 0, &cfg->ffn_dim) ||
        get_int(c, o, "num_hidden_layers", 1, 0, &cfg->n_layers) ||
        get_int(c, o, "num_attention_heads", 1, 0, &cfg->n_heads) ||
        get_int(c, o, "num_key_value_heads", 1, 0, &cfg->n_kv_heads) ||
        get_int(c, o, "head_dim", 0, 256, &cfg->head_dim) ||
        get_int(c, o, "global_head_dim", 0, 512, &cfg->global_head_dim) ||
        get_int(c, o, "num_global_key_value_heads", 0, 0, &cfg->n_global_kv_heads) ||
        get_bool(c, o, "attention_k_eq_v", 0, &cfg->attention_k_eq_v) ||
        get_num(c, o, "rms_norm_eps", 0, 1e-6, &cfg->rms_eps) ||
        get_bool(c, o, "tie_word_embeddings", 1, &cfg->tie_embeddings) ||
        get_int(c, o, "max_position_embeddings", 0, 131072, &cfg->max_pos) ||
        get_int(c, o, "sliding_window", 0, 512, &cfg->sliding_window) ||
        get_num(c, o, "final_logit_softcapping", 0, 0.0, &cfg->final_softcap) ||
        get_int(c, o, "hidden_size_per_layer_input", 0, 0, &cfg->ple_dim) ||
        get_int(c, o, "vocab_size_per_layer_input", 0, cfg->vocab_size, &cfg->ple_vocab) ||
        get_int(c, o, "num_kv_shared_layers", 0, 0, &cfg->n_kv_shared) ||
        get_bool(c, o, "use_double_wide_mlp", 0, &cfg->double_wide_mlp) ||
        get_int(c, o, "bos_token_id", 0, 2, &cfg->bos_id) || get_int(c, o, "pad_token_id", 0, 0, &cfg->pad_id) ||
        get_eos(c, o, cfg))
        return -1;
    int bias = 0;
    if (get_bool(c, o, "attention_bias", 0, &bias)) return -1;
    if (bias) return sp_err_set(c->err, "%s: attention_bias = true is not supported", c->what);
    const char *act = get_str(o, "hidden_activation");
    if (!act) act = get_str(o, "hidden_act");
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        return sp_err_set(c->err, "%s: hidden_activation \"%s\" is not supported (expected \"gelu_pytorch_tanh\")",
                          c->what, act);
    cfg->act = SP_ACT_GELU_TANH;
    cfg->qk_norm = 1;
    snprintf(cfg->tensor_prefix, sizeof cfg->tensor_prefix, "model.language_model.");

    if (gemma4_rope(c, o, cfg)) return -1;

    int L = cfg->n_layers;
    if (L <= 0 || L > SP_MAX_LAYERS)
        return sp_err_set(c->err, "%s: num_hidden_layers %d out of range 1..%d", c->what, L, SP_MAX_LAYERS);
    if (gemma4_layer_types(c, o, cfg, L)) return -1;
    int n_global_kv = cfg->attention_k_eq_v && cfg->n_global_kv_heads > 0 ? cfg->n_global_kv_heads : cfg->n_kv_heads;
    for (int i = 0; i < L; i++) {
        sp_layer_config *l = &cfg->layers[i];
        l->head_dim = l->sliding ? cfg->head_dim : cfg->global_head_dim;
        l->n_kv_heads = l->sliding ? cfg->n_kv_heads : n_global_kv;
        l->has_v_proj = !(cfg->attention_k_eq_v && !l->sliding);
        l->ffn_dim = cfg->ffn_dim;
    }
    if (gemma4_per_layer_config(c, o, cfg, L)) return -1;
    if (gemma4_kv_sharing(c, cfg, L) || gemma4_moe(c, o, cfg)) return -1;
    if (cfg->ple_dim < 0) return sp_err_set(c->err, "%s: hidden_size_per_layer_input must be >= 0", c->what);
    return 0;
}

static int validate(ctx_t *c, sp_config *cfg) {
#define POS(x, name) if ((x) <= 0) return sp_err_set(c->err, "%s: \"%s\" must be > 0 (got %d)", c->what, name, (x))
    POS(cfg->vocab_size, "vocab_size");
    POS(cfg->hidden_size, "hidden_size");
    POS(cfg->n_layers, "num_hidden_layers");
    POS(cfg->n_heads, "num_attention_heads");
    POS(cfg->n_kv_heads, "num_key_value_heads");
    POS(cfg->head_dim, "head_dim");
    POS(cfg->ffn_dim, "intermediate_size");
#undef POS
    if (cfg->n_layers > SP_MAX_LAYERS)
        return sp_err_set(c->err, "%s: %d layers exceed the supported %d", c->what, cfg->n_layers, SP_MAX_LAYERS);
    /* bounds that keep every shape product (heads × head_dim, layers × per-layer dim, rows ×
     * columns as int64) far from overflow; real checkpoints are orders of magnitude below */
#define MAX(x, name, lim)                                                                                  \
    if ((int64_t)(x) > (int64_t)(lim))                                                                     \
        return sp_err_set(c->err, "%s: \"%s\" = %lld exceeds the supported %lld", c->what, name, (long long)(x), \
                          (long long)(lim))
    MAX(cfg->vocab_size, "vocab_size", SP_CONFIG_MAX_VOCAB);
    MAX(cfg->hidden_size, "hidden_size", SP_CONFIG_MAX_DIM);
    MAX(cfg->ffn_dim, "intermediate_size", SP_CONFIG_MAX_DIM);
    MAX(cfg->n_heads, "num_attention_heads", SP_CONFIG_MAX_DIM);
    MAX((int64_t)cfg->n_heads * cfg->head_dim, "num_attention_heads x head_dim", SP_CONFIG_MAX_DIM);
    MAX(cfg->ple_dim, "hidden_size_per_layer_input", SP_CONFIG_MAX_DIM);
    MAX((int64_t)cfg->n_layers * cfg->ple_dim, "num_hidden_layers x hidden_size_per_layer_input", SP_CONFIG_MAX_DIM);
    MAX(cfg->ple_vocab, "vocab_size_per_layer_input", SP_CONFIG_MAX_VOCAB);
    MAX(cfg->sliding_window, "sliding_window", SP_CONFIG_MAX_DIM);
    if (cfg->ple_vocab < 0 || cfg->sliding_window < 0 || cfg->max_pos < 0)
        return sp_err_set(c->err, "%s: vocab_size_per_layer_input %d, sliding_window %d, max_position_embeddings %d: "
                          "each must be >= 0", c->what, cfg->ple_vocab, cfg->sliding_window, cfg->max_pos);
    for (int i = 0; i < cfg->n_layers; i++) {
        const sp_layer_config *l = &cfg->layers[i];
        MAX(l->head_dim, "head_dim", SP_CONFIG_MAX_DIM);
        MAX(l->n_kv_heads, "num_key_value_heads", SP_CONFIG_MAX_DIM);
        MAX((int64_t)cfg->n_heads * l->head_dim, "num_attention_heads x head_dim", SP_CONFIG_MAX_DIM);
        MAX((int64_t)l->n_kv_heads * l->head_dim, "num_key_value_heads x head_dim", SP_CONFIG_MAX_DIM);
        MAX(l->ffn_dim, "intermediate_size", SP_CONFIG_MAX_DIM);
        if (l->ffn_dim <= 0)
            return sp_err_set(c->err, "%s: layer %d: intermediate size %d must be > 0", c->what, i, l->ffn_dim);
        if (l->n_kv_heads <= 0 || cfg->n_heads % l->n_kv_heads)
            return sp_err_set(c->err, "%s: layer %d: %d attention heads not divisible by %d KV heads", c->what, i,
                              cfg->n_heads, l->n_kv_heads);
        if (l->head_dim <= 0 || l->head_dim % 2)
            return sp_err_set(c->err, "%s: layer %d: head_dim %d must be even and > 0", c->what, i, l->head_dim);
    }
#undef MAX
    if (!(cfg->rms_eps > 0) || !isfinite(cfg->rms_eps))
        return sp_err_set(c->err, "%s: rms_norm_eps must be a finite number > 0", c->what);
    if (!(cfg->final_softcap >= 0) || !isfinite(cfg->final_softcap))
        return sp_err_set(c->err, "%s: final_logit_softcapping must be a finite number >= 0", c->what);
    const sp_rope_params *rp[2] = {&cfg->rope, &cfg->rope_swa};
    for (int i = 0; i < 2; i++)
        if (!isfinite(rp[i]->theta) || !isfinite(rp[i]->factor) || !(rp[i]->partial_rotary_factor >= 0) ||
            rp[i]->partial_rotary_factor > 1 || !isfinite(rp[i]->low_freq_factor) ||
            !isfinite(rp[i]->high_freq_factor) || !isfinite(rp[i]->original_max_pos))
            return sp_err_set(c->err, "%s: rope parameters must be finite, partial_rotary_factor in [0, 1]", c->what);
    return 0;
}

int sp_config_parse(sp_config *cfg, const char *text, const char *what, sp_err *err) {
    memset(cfg, 0, sizeof *cfg);
    ctx_t c = {what, err};
    json_t *root = sp_hf_json_loadb(text, strlen(text), JSON_REJECT_DUPLICATES, what, err);
    if (!root) return -1;
    int rc = -1;
    if (!json_is_object(root)) {
        sp_err_set(err, "%s: top level is not a JSON object", what);
        goto done;
    }
    const char *mt = get_str(root, "model_type");
    const char *archs0 = json_string_value(json_array_get(json_object_get(root, "architectures"), 0));
    if (!mt) {
        sp_err_set(err, "%s: missing \"model_type\"", what);
        goto done;
    }
    json_t *o = root;
    if (!strcmp(mt, "llama")) {
        cfg->arch = SP_ARCH_LLAMA;
        rc = parse_llama_qwen(&c, o, cfg);
    } else if (!strcmp(mt, "qwen3")) {
        cfg->arch = SP_ARCH_QWEN3;
        rc = parse_llama_qwen(&c, o, cfg);
    } else if (!strcmp(mt, "qwen3_moe")) {
        cfg->arch = SP_ARCH_QWEN3;
        rc = parse_llama_qwen(&c, o, cfg);
        if (!rc) rc = parse_qwen3_moe(&c, o, cfg);
    } else if (is_gemma4_type(mt)) {
        cfg->arch = SP_ARCH_GEMMA4;
        int bare = is_gemma4_text_type(mt);
        if (!bare) {
            o = json_object_get(root, "text_config");
            if (!json_is_object(o)) {
                sp_err_set(err, "%s: %s config has no \"text_config\" object", what, mt);
                goto done;
            }
            const char *tmt = get_str(o, "model_type");
            if (tmt && !is_gemma4_text_type(tmt)) {
                sp_err_set(err, "%s: text_config.model_type is \"%s\", expected \"gemma4_text\" or "
                           "\"gemma4_unified_text\"", what, tmt);
                goto done;
            }
        }
        rc = parse_gemma4(&c, o, cfg);
        if (!rc && bare) snprintf(cfg->tensor_prefix, sizeof cfg->tensor_prefix, "model.");
        /* top-level eos/bos may live outside text_config */
        if (!rc && cfg->n_eos == 0 && o != root) rc = get_eos(&c, root, cfg);
    } else {
        sp_err_set(err, "%s: unknown architecture: model_type \"%s\"%s%s%s (supported: llama, qwen3, qwen3_moe, gemma4, gemma4_unified)", what,
                   mt, archs0 ? " (" : "", archs0 ? archs0 : "", archs0 ? ")" : "");
        goto done;
    }
    if (!rc) rc = validate(&c, cfg);
    const char *dt = get_str(o, "torch_dtype");
    if (!dt) dt = get_str(o, "dtype");
    if (!dt) dt = get_str(root, "torch_dtype");
    if (!dt) dt = get_str(root, "dtype");
    snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s", dt ? dt : "");
done:
    json_decref(root);
    return rc;
}

int sp_config_load(sp_config *cfg, const char *path, sp_err *err) {
    char *text;
    if (sp_read_file(path, &text, NULL, err)) return -1;
    int rc = sp_config_parse(cfg, text, path, err);
    free(text);
    return rc;
}

int sp_config_check(sp_config *cfg, const char *what, sp_err *err) {
    ctx_t c = {what, err};
    return validate(&c, cfg);
}
