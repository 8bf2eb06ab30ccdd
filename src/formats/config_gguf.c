/* config_gguf.c — GGUF metadata → sp_config for llama / qwen3 / qwen3moe / gemma4 (docs/GGUF.md).
 *
 * Keys are read as llama.cpp writes and reads them: `{arch}.embedding_length` etc., per-layer
 * values either one integer or an array of block_count integers, Gemma-4's sliding pattern a
 * BOOL array. What the keys do not carry comes from tensors: the vocabulary is token_embd's
 * row count, a missing output.weight means a tied head, a Gemma-4 full layer without attn_v is
 * a k_eq_v layer, and RoPE scaling is the rope_freqs.weight divisor table (llama3 scaling for
 * llama, the partial "proportional" rotation for gemma4), turned back into the Hugging Face
 * parameters so the angles are computed exactly as for the safetensors checkpoint. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "export_gguf.h"
#include "gguf_model.h"

typedef struct {
    const gguf_file *f;
    const char *A; /* architecture: the key prefix */
    sp_err *err;
} gctx;

#define KEYBUF 192

static const char *akey(char *buf, const gctx *g, const char *suffix) {
    snprintf(buf, KEYBUF, "%s.%s", g->A, suffix);
    return buf;
}

/* {arch}.suffix as a non-negative int; absent → def, or an error when required */
static int key_int(gctx *g, const char *suffix, int required, int def, int *out) {
    char key[KEYBUF];
    int64_t v = 0;
    int rc = sp_gguf_get_i64(g->f, akey(key, g, suffix), &v, g->err);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (required) return sp_err_set(g->err, "%s: missing required key %s", g->f->path, key);
        *out = def;
        return 0;
    }
    if (v < 0 || v > 0x7fffffff)
        return sp_err_set(g->err, "%s: key %s = %lld is out of range", g->f->path, key, (long long)v);
    *out = (int)v;
    return 0;
}

static int key_num(gctx *g, const char *suffix, int required, double def, double *out) {
    char key[KEYBUF];
    int rc = sp_gguf_get_f64(g->f, akey(key, g, suffix), out, g->err);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (required) return sp_err_set(g->err, "%s: missing required key %s", g->f->path, key);
        *out = def;
    }
    return 0;
}

/* a per-layer value: one integer for every layer, or an array of exactly L integers */
static int key_per_layer(gctx *g, const char *suffix, int required, int def, int L, int *out) {
    char key[KEYBUF];
    const gguf_kv *kv = sp_gguf_get(g->f, akey(key, g, suffix));
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_n != (uint64_t)L || kv->arr_type == GGUF_TYPE_STRING || kv->arr_type == GGUF_TYPE_ARRAY ||
            kv->arr_type == GGUF_TYPE_FLOAT32 || kv->arr_type == GGUF_TYPE_FLOAT64)
            return sp_err_set(g->err, "%s: key %s must be an integer or an array of %d integers (one per block)",
                              g->f->path, key, L);
        for (int i = 0; i < L; i++) {
            int64_t v = sp_gguf_arr_i64(kv, (uint64_t)i);
            if (v < 0 || v > 0x7fffffff)
                return sp_err_set(g->err, "%s: key %s[%d] = %lld is out of range", g->f->path, key, i, (long long)v);
            out[i] = (int)v;
        }
        return 0;
    }
    int v = 0;
    if (key_int(g, suffix, required, def, &v)) return -1;
    for (int i = 0; i < L; i++) out[i] = v;
    return 0;
}

/* the rope_freqs.weight table [n] as f32, or NULL when the file has none */
static int rope_freqs(gctx *g, int n, const float **out) {
    *out = NULL;
    const gguf_tensor_info *t = sp_gguf_find_tensor(g->f, "rope_freqs.weight");
    if (!t) return 0;
    if (t->type != 0 || t->n_dims != 1 || t->dims[0] != (uint64_t)n)
        return sp_err_set(g->err, "%s: rope_freqs.weight must be F32 [%d], found %s with %llu values", g->f->path, n,
                          sp_ggml_type_label(t->type), (unsigned long long)t->dims[0]);
    *out = sp_gguf_tensor_data(g->f, t, g->err);
    return *out ? 0 : -1;
}

static int divisors_match(const sp_rope_params *rp, int D, const float *div) {
    float want[1024];
    sp_export_llama3_rope_freqs(rp, D, want);
    for (int j = 0; j < D / 2; j++)
        if (fabsf(want[j] - div[j]) > 1e-6f * fabsf(div[j])) return 0;
    return 1;
}

/* llama: rope_freqs.weight holds llama3 scaling as per-frequency divisors. Recover factor (the
 * low-frequency divisor) and the original context C (from a frequency inside the smooth band),
 * with the low/high frequency factors 1 and 4 of every Llama-3 release, and accept them only
 * when they reproduce the table. */
static int llama3_from_divisors(gctx *g, int D, const float *div, sp_rope_params *rp) {
    const int half = D / 2;
    if (half > 1024) return sp_err_set(g->err, "%s: head dim %d too large for rope_freqs.weight", g->f->path, D);
    double f = div[half - 1];
    int scaled = 0;
    for (int j = 0; j < half; j++) scaled |= div[j] != 1.0f;
    if (!scaled) return 0; /* all ones: plain RoPE */
    double cands[24];
    int nc = 0;
    for (int j = 0; j < half && nc == 0; j++) {
        if (div[j] == 1.0f || div[j] == (float)f) continue;
        double s = (1.0 / div[j] - 1.0 / f) / (1.0 - 1.0 / f);
        double wl = 2.0 * M_PI / pow(rp->theta, -2.0 * j / D);
        cands[nc++] = round(wl * (s * 3.0 + 1.0));
    }
    for (double c = 256; c <= 1048576 && nc < 24; c *= 2) cands[nc++] = c;
    for (int i = 0; i < nc; i++) {
        sp_rope_params t = *rp;
        t.type = SP_ROPE_LLAMA3;
        t.factor = f;
        t.low_freq_factor = 1.0;
        t.high_freq_factor = 4.0;
        t.original_max_pos = cands[i];
        if (f > 0 && divisors_match(&t, D, div)) {
            *rp = t;
            return 0;
        }
    }
    return sp_err_set(g->err,
                      "%s: rope_freqs.weight is not llama3 RoPE scaling with low/high frequency factors 1 and 4 "
                      "(the only scaling specula reads from a llama GGUF)", g->f->path);
}

static int rope_plain_keys(gctx *g, int D, const char *dim_key) {
    char key[KEYBUF];
    int nrot = 0;
    if (key_int(g, dim_key, 0, D, &nrot)) return -1;
    if (nrot != D)
        return sp_err_set(g->err, "%s: %s = %d but the head dim is %d (partial rotation is not supported here)",
                          g->f->path, akey(key, g, dim_key), nrot, D);
    return 0;
}

static int no_rope_scaling(gctx *g) {
    char key[KEYBUF];
    gguf_str s;
    int rc = sp_gguf_get_str(g->f, akey(key, g, "rope.scaling.type"), &s, g->err);
    if (rc < 0) return -1;
    if (rc == 0 && !(s.len == 4 && !memcmp(s.ptr, "none", 4)))
        return sp_err_set(g->err, "%s: %s = \"%.*s\" is not supported", g->f->path, key, (int)(s.len > 32 ? 32 : s.len),
                          s.ptr);
    return 0;
}

static int parse_llama_qwen(gctx *g, sp_config *c) {
    const int L = c->n_layers;
    int kvh[SP_MAX_LAYERS], ffn[SP_MAX_LAYERS], vlen = 0;
    if (key_per_layer(g, "feed_forward_length", 1, 0, L, ffn) ||
        key_per_layer(g, "attention.head_count_kv", 0, c->n_heads, L, kvh) ||
        key_int(g, "attention.key_length", 0, c->n_heads > 0 ? c->hidden_size / c->n_heads : 0, &c->head_dim) ||
        key_int(g, "attention.value_length", 0, c->head_dim, &vlen) ||
        key_num(g, "rope.freq_base", 0, 10000.0, &c->rope.theta) || rope_plain_keys(g, c->head_dim, "rope.dimension_count") ||
        no_rope_scaling(g))
        return -1;
    if (vlen != c->head_dim)
        return sp_err_set(g->err, "%s: %s.attention.value_length %d != key_length %d", g->f->path, g->A, vlen,
                          c->head_dim);
    c->ffn_dim = ffn[0];
    c->n_kv_heads = kvh[0];
    for (int i = 0; i < L; i++) {
        if (ffn[i] != ffn[0] || kvh[i] != kvh[0])
            return sp_err_set(g->err, "%s: %s layers must share feed_forward_length and head_count_kv", g->f->path, g->A);
        c->layers[i] = (sp_layer_config){.sliding = 0, .head_dim = c->head_dim, .n_kv_heads = kvh[i],
                                         .ffn_dim = ffn[i], .has_v_proj = 1, .kv_source = i};
    }
    c->act = SP_ACT_SILU;
    c->qk_norm = c->arch == SP_ARCH_QWEN3;
    c->rope.type = SP_ROPE_DEFAULT;
    c->rope.factor = 1.0;
    c->rope.partial_rotary_factor = 1.0;
    if (!(c->rope.theta > 0)) return sp_err_set(g->err, "%s: %s.rope.freq_base must be > 0", g->f->path, g->A);
    if (c->arch == SP_ARCH_LLAMA && c->head_dim > 0 && c->head_dim % 2 == 0) {
        const float *div;
        if (rope_freqs(g, c->head_dim / 2, &div)) return -1;
        if (div && llama3_from_divisors(g, c->head_dim, div, &c->rope)) return -1;
    }
    c->rope_swa = c->rope;
    return 0;
}

/* qwen3moe, and gemma4 with expert_count: every layer is MoE (llama.cpp's layouts have no dense
 * layers), the chosen experts' weights renormalised unless expert_weights_norm says otherwise */
static int parse_moe_keys(gctx *g, sp_config *c) {
    char key[KEYBUF];
    if (key_int(g, "expert_count", 1, 0, &c->n_experts) || key_int(g, "expert_used_count", 1, 0, &c->n_experts_used) ||
        key_int(g, "expert_feed_forward_length", 1, 0, &c->moe_ffn_dim))
        return -1;
    c->norm_topk_prob = 1;
    if (sp_gguf_get_bool(g->f, akey(key, g, "expert_weights_norm"), &c->norm_topk_prob, g->err) < 0) return -1;
    if (c->n_experts <= 0 || c->n_experts > SP_CONFIG_MAX_EXPERTS || c->n_experts_used <= 0 ||
        c->n_experts_used > c->n_experts || c->moe_ffn_dim <= 0 || c->moe_ffn_dim > SP_CONFIG_MAX_DIM)
        return sp_err_set(g->err, "%s: %s %d, expert_used_count %d, expert_feed_forward_length %d: "
                          "expected 1 <= used <= count <= %d and a width in 1..%d", g->f->path,
                          akey(key, g, "expert_count"), c->n_experts,
                          c->n_experts_used, c->moe_ffn_dim, SP_CONFIG_MAX_EXPERTS, SP_CONFIG_MAX_DIM);
    for (int i = 0; i < c->n_layers; i++) c->layers[i].moe = 1;
    return 0;
}

/* full layers: proportional RoPE, the rotated part and its divisor read from rope_freqs */
static int gemma4_rope_full(gctx *g, sp_config *c) {
    const gguf_file *f = g->f;
    c->rope.type = SP_ROPE_PROPORTIONAL;
    c->rope.factor = 1.0;
    c->rope.partial_rotary_factor = 1.0;
    if (c->global_head_dim <= 0 || c->global_head_dim % 2)
        return sp_err_set(g->err, "%s: gemma4.attention.key_length %d must be even and > 0", f->path, c->global_head_dim);
    const float *div;
    if (rope_freqs(g, c->global_head_dim / 2, &div)) return -1;
    if (div) {
        int half = c->global_head_dim / 2, n_rot = 0;
        while (n_rot < half && div[n_rot] < GGUF_ROPE_FREQ_OFF_MIN) n_rot++;
        for (int j = 0; j < half; j++)
            if (j < n_rot ? div[j] != div[0] : div[j] < GGUF_ROPE_FREQ_OFF_MIN)
                return sp_err_set(g->err, "%s: rope_freqs.weight is not a proportional rotation (one divisor, then 1e30)",
                                  f->path);
        if (n_rot > 0) c->rope.factor = div[0];
        c->rope.partial_rotary_factor = (n_rot + 0.5) * 2.0 / c->global_head_dim; /* floor(ρ·Dg/2) = n_rot */
    }
    if (!(c->rope.theta > 0) || !(c->rope_swa.theta > 0) || !(c->rope.factor > 0))
        return sp_err_set(g->err, "%s: gemma4 rope.freq_base(_swa) and rope_freqs.weight must be > 0", f->path);
    return 0;
}

/* the per-layer table: sliding pattern, head dims, KV heads, V projections (absent on k_eq_v
 * full layers) and, for the KV-shared layers from first_shared on, the layer they read */
static int gemma4_layers(gctx *g, sp_config *c, const gguf_kv *pat, const int *kvh, const int *ffn, int first_shared) {
    const gguf_file *f = g->f;
    const int L = c->n_layers;
    int n_full = 0;
    for (int i = 0; i < L; i++) {
        sp_layer_config *l = &c->layers[i];
        l->sliding = sp_gguf_arr_i64(pat, (uint64_t)i) != 0;
        l->head_dim = l->sliding ? c->head_dim : c->global_head_dim;
        l->n_kv_heads = kvh[i];
        l->ffn_dim = ffn[i];
        l->kv_source = i;
        l->has_v_proj = 1;
        if (i < first_shared) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", i);
            l->has_v_proj = sp_gguf_find_tensor(f, nm) != NULL || l->sliding;
            if (!l->has_v_proj) c->attention_k_eq_v = 1;
        }
        if (!l->sliding && n_full++ == 0) c->n_global_kv_heads = kvh[i];
    }
    for (int i = first_shared; i < L; i++) /* as config.json reads: no V projection on k_eq_v full layers */
        c->layers[i].has_v_proj = c->layers[i].sliding || !c->attention_k_eq_v;
    c->n_kv_heads = kvh[0];
    for (int i = 0; i < L; i++)
        if (c->layers[i].sliding) {
            c->n_kv_heads = kvh[i];
            break;
        }
    c->ffn_dim = ffn[0];
    for (int i = first_shared; i < L; i++) {
        /* the last non-shared layer of the same type, which must be the layer llama.cpp reads */
        int src = -1, want = c->layers[i].sliding ? first_shared - 2 : first_shared - 1;
        for (int j = first_shared - 1; j >= 0 && src < 0; j--)
            if (c->layers[j].sliding == c->layers[i].sliding) src = j;
        if (src < 0 || src != want)
            return sp_err_set(g->err, "%s: KV-shared layer %d would read layer %d but llama.cpp reads layer %d", f->path,
                              i, src, want);
        c->layers[i].kv_source = src;
        c->double_wide_mlp |= ffn[i] != ffn[0];
    }
    return 0;
}

static int parse_gemma4(gctx *g, sp_config *c) {
    const gguf_file *f = g->f;
    const int L = c->n_layers;
    char key[KEYBUF];
    int kvh[SP_MAX_LAYERS], ffn[SP_MAX_LAYERS], vlen = 0, vlen_swa = 0;
    const gguf_kv *pat;
    int rc = sp_gguf_get_arr(f, akey(key, g, "attention.sliding_window_pattern"), -1, &pat, g->err);
    if (rc < 0) return -1;
    if (rc == 1) return sp_err_set(g->err, "%s: missing required key %s", f->path, key);
    if (pat->arr_n != (uint64_t)L || pat->arr_type == GGUF_TYPE_STRING || pat->arr_type == GGUF_TYPE_ARRAY)
        return sp_err_set(g->err, "%s: key %s must be an array of %d booleans", f->path, key, L);
    if (key_per_layer(g, "feed_forward_length", 1, 0, L, ffn) ||
        key_per_layer(g, "attention.head_count_kv", 0, c->n_heads, L, kvh) ||
        key_int(g, "attention.sliding_window", 1, 0, &c->sliding_window) ||
        key_int(g, "attention.key_length", 1, 0, &c->global_head_dim) ||
        key_int(g, "attention.value_length", 0, c->global_head_dim, &vlen) ||
        key_int(g, "attention.key_length_swa", 1, 0, &c->head_dim) ||
        key_int(g, "attention.value_length_swa", 0, c->head_dim, &vlen_swa) ||
        key_num(g, "rope.freq_base", 0, 10000.0, &c->rope.theta) ||
        key_num(g, "rope.freq_base_swa", 0, 10000.0, &c->rope_swa.theta) ||
        rope_plain_keys(g, c->global_head_dim, "rope.dimension_count") ||
        rope_plain_keys(g, c->head_dim, "rope.dimension_count_swa") ||
        key_int(g, "attention.shared_kv_layers", 0, 0, &c->n_kv_shared) ||
        key_int(g, "embedding_length_per_layer_input", 1, 0, &c->ple_dim) ||
        key_num(g, "final_logit_softcapping", 0, 30.0, &c->final_softcap) || no_rope_scaling(g))
        return -1;
    if (vlen != c->global_head_dim || vlen_swa != c->head_dim)
        return sp_err_set(g->err, "%s: gemma4 value_length must equal key_length (full and sliding)", f->path);
    c->act = SP_ACT_GELU_TANH;
    c->qk_norm = 1;
    c->rope_swa.type = SP_ROPE_DEFAULT;
    c->rope_swa.factor = 1.0;
    c->rope_swa.partial_rotary_factor = 1.0;
    if (gemma4_rope_full(g, c)) return -1;

    const int first_shared = L - c->n_kv_shared;
    if (first_shared < 1) return sp_err_set(g->err, "%s: gemma4.attention.shared_kv_layers %d out of range for %d blocks",
                                            f->path, c->n_kv_shared, L);
    if (gemma4_layers(g, c, pat, kvh, ffn, first_shared)) return -1;
    /* the 26B-A4B's expert block beside every dense MLP (docs/TRANSFORMER.md §5b) */
    if (sp_gguf_find(f, akey(key, g, "expert_count")) >= 0 && parse_moe_keys(g, c)) return -1;
    if (c->ple_dim > 0) {
        const gguf_tensor_info *t = sp_gguf_find_tensor(f, "per_layer_token_embd.weight");
        if (!t || t->n_dims != 2)
            return sp_err_set(g->err, "%s: embedding_length_per_layer_input is %d but per_layer_token_embd.weight is "
                              "missing or not 2-D", f->path, c->ple_dim);
        c->ple_vocab = (int)t->dims[1];
    }
    return 0;
}

static int tok_id(const gguf_file *f, const char *key, int *out, sp_err *err) {
    int64_t v = 0;
    int rc = sp_gguf_get_i64(f, key, &v, err);
    if (rc < 0) return -1;
    if (rc == 0) *out = v >= 0 && v <= 0x7fffffff ? (int)v : -1;
    return 0;
}

int sp_config_from_gguf(sp_config *cfg, const gguf_file *f, sp_err *err) {
    memset(cfg, 0, sizeof *cfg);
    gguf_str a;
    int rc = sp_gguf_get_str(f, "general.architecture", &a, err);
    if (rc < 0) return -1;
    if (rc == 1) return sp_err_set(err, "%s: missing required key general.architecture", f->path);
    char arch[32];
    snprintf(arch, sizeof arch, "%.*s", (int)(a.len < sizeof arch - 1 ? a.len : sizeof arch - 1), a.ptr);
    int moe = !strcmp(arch, "qwen3moe");
    if (!strcmp(arch, "llama")) cfg->arch = SP_ARCH_LLAMA;
    else if (!strcmp(arch, "qwen3") || moe) cfg->arch = SP_ARCH_QWEN3;
    else if (!strcmp(arch, "gemma4")) cfg->arch = SP_ARCH_GEMMA4;
    else if (!strcmp(arch, "dflash") || !strcmp(arch, "dspark") || !strcmp(arch, "eagle3") ||
             !strcmp(arch, "gemma4-assistant"))
        return sp_err_set(err, "%s is a %s drafter written for llama.cpp (export-gguf --target); specula reads a "
                               "drafter from its checkpoint directory: give that directory to -md", f->path, arch);
    else
        return sp_err_set(err, "%s: unsupported architecture \"%.*s\" (supported: llama, qwen3, qwen3moe, gemma4)", f->path,
                          (int)(a.len > 64 ? 64 : a.len), a.ptr);
    gctx g = {f, moe ? "qwen3moe" : sp_arch_name(cfg->arch), err};
    if (key_int(&g, "embedding_length", 1, 0, &cfg->hidden_size) || key_int(&g, "block_count", 1, 0, &cfg->n_layers) ||
        key_int(&g, "context_length", 0, 4096, &cfg->max_pos) ||
        key_num(&g, "attention.layer_norm_rms_epsilon", 1, 0, &cfg->rms_eps))
        return -1;
    if (cfg->n_layers <= 0 || cfg->n_layers > SP_MAX_LAYERS)
        return sp_err_set(err, "%s: %s.block_count %d out of range 1..%d", f->path, g.A, cfg->n_layers, SP_MAX_LAYERS);
    int nh[SP_MAX_LAYERS];
    if (key_per_layer(&g, "attention.head_count", 1, 0, cfg->n_layers, nh)) return -1;
    for (int i = 1; i < cfg->n_layers; i++)
        if (nh[i] != nh[0]) return sp_err_set(err, "%s: %s.attention.head_count differs between layers", f->path, g.A);
    cfg->n_heads = nh[0];
    if ((cfg->arch == SP_ARCH_GEMMA4 ? parse_gemma4(&g, cfg) : parse_llama_qwen(&g, cfg))) return -1;
    if (moe && parse_moe_keys(&g, cfg)) return -1;

    const gguf_tensor_info *emb = sp_gguf_find_tensor(f, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->dims[0] != (uint64_t)cfg->hidden_size || emb->dims[1] > 0x7fffffff)
        return sp_err_set(err, "%s: token_embd.weight must be a 2-D tensor [%d, vocab]", f->path, cfg->hidden_size);
    cfg->vocab_size = (int)emb->dims[1];
    if (cfg->arch == SP_ARCH_GEMMA4 && cfg->ple_dim == 0) cfg->ple_vocab = cfg->vocab_size;
    cfg->tie_embeddings = sp_gguf_find_tensor(f, "output.weight") == NULL;
    cfg->bos_id = cfg->pad_id = -1;
    int eos = -1, eot = -1, eom = -1;
    if (tok_id(f, "tokenizer.ggml.bos_token_id", &cfg->bos_id, err) ||
        tok_id(f, "tokenizer.ggml.padding_token_id", &cfg->pad_id, err) ||
        tok_id(f, "tokenizer.ggml.eos_token_id", &eos, err) || tok_id(f, "tokenizer.ggml.eot_token_id", &eot, err) ||
        tok_id(f, "tokenizer.ggml.eom_token_id", &eom, err))
        return -1;
    int ends[3] = {eos, eot, eom};
    for (int i = 0; i < 3; i++) {
        int dup = ends[i] < 0;
        for (int j = 0; j < cfg->n_eos; j++) dup |= cfg->eos_ids[j] == ends[i];
        if (!dup) cfg->eos_ids[cfg->n_eos++] = ends[i];
    }
    int64_t ft = -1;
    if (sp_gguf_get_i64(f, "general.file_type", &ft, err) < 0) return -1;
    snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s",
             ft == 0 ? "float32" : ft == 1 ? "float16" : ft == 32 ? "bfloat16" : "");
    return sp_config_check(cfg, f->path, err);
}

sp_dtype sp_gguf_ggml_to_dtype(uint32_t t) {
    switch (t) {
    case 0: return SP_DT_F32;
    case 1: return SP_DT_F16;
    case 30: return SP_DT_BF16;
    case 2: return SP_DT_Q4_0;
    case 6: return SP_DT_Q5_0;
    case 8: return SP_DT_Q8_0;
    case 12: return SP_DT_Q4_K;
    case 14: return SP_DT_Q6_K;
    case 7: return SP_DT_Q5_1;
    case 10: return SP_DT_Q2_K;
    case 11: return SP_DT_Q3_K;
    case 13: return SP_DT_Q5_K;
    case 20: return SP_DT_IQ4_NL;
    case 23: return SP_DT_IQ4_XS;
    default: return SP_DT_UNKNOWN;
    }
}
