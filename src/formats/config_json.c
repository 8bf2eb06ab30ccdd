/* config_json.c — sp_config → config.json text, and a model path's config.json (a directory's
 * file, or a GGUF file's metadata written as one). See config_json.h and docs/GGUF.md.
 *
 * The keys written are those sp_config_parse reads (config.c), with values that parse back to
 * the same sp_config: reals are printed with 17 significant digits, per-layer values that the
 * flat keys cannot express go to per_layer_config (gemma4) or are refused (llama / qwen3 layers
 * share their shapes by construction in both loaders). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_json.h"
#include "core/core.h"
#include "gguf.h"
#include "gguf_model.h"

static void set(json_t *o, const char *key, json_t *v) { json_object_set_new(o, key, v); }

/* {"rope_type", "rope_theta", ...} of one RoPE as parse_rope_obj reads it */
static json_t *rope_obj(const sp_rope_params *rp) {
    static const char *names[] = {"default", "llama3", "proportional"};
    json_t *r = json_object();
    set(r, "rope_type", json_string(names[rp->type]));
    set(r, "rope_theta", json_real(rp->theta));
    if (rp->type != SP_ROPE_DEFAULT) set(r, "factor", json_real(rp->factor));
    if (rp->type == SP_ROPE_LLAMA3) {
        set(r, "low_freq_factor", json_real(rp->low_freq_factor));
        set(r, "high_freq_factor", json_real(rp->high_freq_factor));
        set(r, "original_max_position_embeddings", json_real(rp->original_max_pos));
    }
    if (rp->type == SP_ROPE_PROPORTIONAL) set(r, "partial_rotary_factor", json_real(rp->partial_rotary_factor));
    return r;
}

static void common_keys(json_t *o, const sp_config *c) {
    set(o, "vocab_size", json_integer(c->vocab_size));
    set(o, "hidden_size", json_integer(c->hidden_size));
    set(o, "intermediate_size", json_integer(c->ffn_dim));
    set(o, "num_hidden_layers", json_integer(c->n_layers));
    set(o, "num_attention_heads", json_integer(c->n_heads));
    set(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    set(o, "head_dim", json_integer(c->head_dim));
    set(o, "rms_norm_eps", json_real(c->rms_eps));
    set(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    set(o, "max_position_embeddings", json_integer(c->max_pos));
    set(o, "bos_token_id", json_integer(c->bos_id)); /* -1: none */
    set(o, "pad_token_id", json_integer(c->pad_id));
    json_t *eos = json_array();
    for (int i = 0; i < c->n_eos; i++) json_array_append_new(eos, json_integer(c->eos_ids[i]));
    set(o, "eos_token_id", eos);
    if (c->torch_dtype[0]) set(o, "torch_dtype", json_string(c->torch_dtype));
}

static int llama_qwen_keys(json_t *o, const sp_config *c, sp_err *err) {
    for (int i = 0; i < c->n_layers; i++) {
        const sp_layer_config *l = &c->layers[i];
        if (l->sliding || l->head_dim != c->head_dim || l->n_kv_heads != c->n_kv_heads || l->ffn_dim != c->ffn_dim)
            return sp_err_set(err, "config.json: %s layer %d differs from the others (config.json cannot say so)",
                              sp_arch_name(c->arch), i);
    }
    set(o, "architectures", json_pack("[s]", c->arch == SP_ARCH_LLAMA ? "LlamaForCausalLM" : "Qwen3ForCausalLM"));
    set(o, "model_type", json_string(c->arch == SP_ARCH_LLAMA ? "llama" : "qwen3"));
    common_keys(o, c);
    set(o, "hidden_act", json_string("silu"));
    set(o, "attention_bias", json_false());
    set(o, "rope_theta", json_real(c->rope.theta));
    if (c->rope.type == SP_ROPE_LLAMA3) set(o, "rope_scaling", rope_obj(&c->rope));
    return 0;
}

static void gemma4_keys(json_t *o, const sp_config *c) {
    set(o, "architectures", json_pack("[s]", "Gemma4ForCausalLM"));
    set(o, "model_type", json_string("gemma4_text"));
    common_keys(o, c);
    set(o, "hidden_activation", json_string("gelu_pytorch_tanh"));
    set(o, "global_head_dim", json_integer(c->global_head_dim));
    set(o, "num_global_key_value_heads", json_integer(c->n_global_kv_heads));
    set(o, "attention_k_eq_v", json_boolean(c->attention_k_eq_v));
    set(o, "sliding_window", json_integer(c->sliding_window));
    set(o, "final_logit_softcapping", json_real(c->final_softcap));
    set(o, "hidden_size_per_layer_input", json_integer(c->ple_dim));
    set(o, "vocab_size_per_layer_input", json_integer(c->ple_vocab));
    set(o, "num_kv_shared_layers", json_integer(c->n_kv_shared));
    set(o, "use_double_wide_mlp", json_boolean(c->double_wide_mlp));
    set(o, "enable_moe_block", json_boolean(c->n_experts > 0));
    if (c->n_experts > 0) {
        set(o, "num_experts", json_integer(c->n_experts));
        set(o, "top_k_experts", json_integer(c->n_experts_used));
        set(o, "moe_intermediate_size", json_integer(c->moe_ffn_dim));
    }
    json_t *rp = json_object();
    set(rp, "sliding_attention", rope_obj(&c->rope_swa));
    set(rp, "full_attention", rope_obj(&c->rope));
    set(o, "rope_parameters", rp);
    json_t *types = json_array(), *plc = json_object();
    /* the shapes config.c derives from the flat keys; a layer that differs is written out */
    int n_global_kv = c->attention_k_eq_v && c->n_global_kv_heads > 0 ? c->n_global_kv_heads : c->n_kv_heads;
    for (int i = 0; i < c->n_layers; i++) {
        const sp_layer_config *l = &c->layers[i];
        json_array_append_new(types, json_string(l->sliding ? "sliding_attention" : "full_attention"));
        int hd = l->sliding ? c->head_dim : c->global_head_dim, kvh = l->sliding ? c->n_kv_heads : n_global_kv;
        if (l->head_dim != hd || l->n_kv_heads != kvh) {
            char key[16];
            snprintf(key, sizeof key, "%d", i);
            set(plc, key, json_pack("{s:i, s:i}", "head_dim", l->head_dim, "num_key_value_heads", l->n_kv_heads));
        }
    }
    set(o, "layer_types", types);
    if (json_object_size(plc)) set(o, "per_layer_config", plc);
    else json_decref(plc);
}

char *sp_config_to_json(const sp_config *cfg, sp_err *err) {
    json_t *o = json_object();
    if (!o) {
        sp_err_set(err, "config.json: out of memory");
        return NULL;
    }
    int rc = 0;
    if (cfg->arch == SP_ARCH_GEMMA4) gemma4_keys(o, cfg);
    else rc = llama_qwen_keys(o, cfg, err);
    char *text = rc ? NULL : json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!rc && !text) sp_err_set(err, "config.json: out of memory");
    return text;
}

int sp_model_config_json(const char *path, char **out, sp_err *err) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return sp_err_set(err, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) {
        char cfgpath[4096];
        if (sp_path_join(cfgpath, sizeof cfgpath, path, "config.json"))
            return sp_err_set(err, "model path too long: %s", path);
        return sp_read_file(cfgpath, out, NULL, err);
    }
    gguf_file *f = sp_gguf_open(path, err);
    if (!f) return -1;
    sp_config cfg;
    int rc = sp_config_from_gguf(&cfg, f, err);
    sp_gguf_close(f);
    if (rc) return -1;
    *out = sp_config_to_json(&cfg, err);
    return *out ? 0 : -1;
}
