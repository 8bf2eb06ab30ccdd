/* export_gguf.c — Hugging Face checkpoint → GGUF for llama.cpp (docs/GGUF-FORMAT.md §4, §8).
 *
 * Steps: parse config.json (the engine's own parser) → list the tensors that config implies
 * (sp_hf_tensor_specs, shared with new-model) and check each one's shape in the safetensors →
 * refuse any tensor nobody claims (llama.cpp aborts on leftovers; vision/audio towers,
 * rotary inv_freq buffers, a tied lm_head and K/V weights of KV-shared Gemma layers are dropped
 * on purpose) → architecture keys → tokenizer keys (export_gguf_tok.c) → tensors, streamed
 * with the row rewrites below. Does not quantize. */
#include "export_gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_gguf_internal.h"
#include "gguf_names.h"
#include "tensor_names.h"
#include "newmodel.h"
#include "safetensors.h"

/* ---- weight rewrites ------------------------------------------------------------------- */

int64_t sp_export_llama_qk_src_row(int64_t r, int head_dim) {
    int64_t h = r / head_dim, w = r % head_dim;
    int64_t j = w / 2, s = w % 2;
    return h * head_dim + s * (head_dim / 2) + j;
}

void sp_export_proportional_rope_freqs(const sp_rope_params *rp, int Dg, float *out) {
    int n_rot = (int)floor(Dg * rp->partial_rotary_factor / 2.0);
    for (int j = 0; j < Dg / 2; j++) out[j] = j < n_rot ? (float)rp->factor : GGUF_ROPE_FREQ_OFF;
}

void sp_export_llama3_rope_freqs(const sp_rope_params *rp, int D, float *out) {
    const double C = rp->original_max_pos, lo = rp->low_freq_factor, hi = rp->high_freq_factor, f = rp->factor;
    for (int j = 0; j < D / 2; j++) {
        double inv = pow(rp->theta, -2.0 * j / D), wl = 2.0 * M_PI / inv, div;
        if (wl < C / hi) div = 1.0;
        else if (wl > C / lo) div = f;
        else {
            double s = (C / wl - lo) / (hi - lo);
            div = 1.0 / ((1.0 - s) / f + s);
        }
        out[j] = (float)div;
    }
}

static void convert_row(void *dst, ggml_type type, const void *src, sp_dtype st, int64_t n, float *tmp) {
    if ((type == GGML_TYPE_F32 && st == SP_DT_F32) || (type == GGML_TYPE_F16 && st == SP_DT_F16) ||
        (type == GGML_TYPE_BF16 && st == SP_DT_BF16)) {
        memcpy(dst, src, (size_t)n * sp_ggml_type_size(type));
        return;
    }
    float *f = type == GGML_TYPE_F32 ? dst : tmp;
    sp_to_f32(f, src, st, (size_t)n);
    if (type == GGML_TYPE_F16)
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = sp_f32_to_f16(f[i]);
    else if (type == GGML_TYPE_BF16)
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = sp_f32_to_bf16(f[i]);
}

int sp_export_fill_tensor(void *ctx, void *dst, size_t offset, size_t n, sp_err *err) {
    const export_tensor_src *t = ctx;
    size_t out_row = (size_t)t->row * sp_ggml_type_size(t->type), in_row = (size_t)t->row * sp_dtype_size(t->src->dtype);
    SP_ASSERT(offset % out_row == 0 && n % out_row == 0);
    float *tmp = malloc((size_t)t->row * sizeof(float));
    if (!tmp) return sp_err_set(err, "out of memory converting %s", t->src->name);
    for (size_t r = offset / out_row, k = 0; k < n / out_row; r++, k++) {
        int64_t sr = t->perm_head_dim > 0 ? sp_export_llama_qk_src_row((int64_t)r, t->perm_head_dim) : (int64_t)r;
        const st_tensor *src = t->src;
        if (t->experts) { /* expert r / rows, its row r % rows */
            src = t->experts[r / (size_t)t->rows];
            sr = (int64_t)(r % (size_t)t->rows);
            in_row = (size_t)t->row * sp_dtype_size(src->dtype);
        }
        convert_row((char *)dst + k * out_row, t->type, (const char *)src->data + (size_t)sr * in_row, src->dtype,
                    t->row, tmp);
    }
    free(tmp);
    return 0;
}

/* HF tensors that are deliberately not exported (docs/GGUF-FORMAT.md §5, §8). */
static int droppable(const sp_config *c, const char *name) {
    if (strstr(name, "vision") || strstr(name, "audio")) return 1;
    size_t n = strlen(name);
    if (n >= 20 && !strcmp(name + n - 20, "rotary_emb.inv_freq")) return 1;
    if (c->tie_embeddings && !strcmp(name, "lm_head.weight")) return 1;
    size_t pl = strlen(c->tensor_prefix);
    int li, role = strncmp(name, c->tensor_prefix, pl) ? -1 : sp_tensor_role_of(c->arch, name + pl, &li);
    /* KV-shared layers compute no K/V; HF may still save the unused projections */
    return c->arch == SP_ARCH_GEMMA4 && (role == SP_TN_K || role == SP_TN_V || role == SP_TN_K_NORM) &&
           li >= c->n_layers - c->n_kv_shared && li < c->n_layers;
}

uint32_t sp_export_file_type(const int n_2d_types[3]) {
    return n_2d_types[2] > n_2d_types[0] && n_2d_types[2] >= n_2d_types[1] ? 32 : n_2d_types[1] > n_2d_types[0] ? 1 : 0;
}

/* ---- architecture keys ------------------------------------------------------------------- */

#define KEY(buf, fmt) (snprintf(buf, sizeof buf, "%s." fmt, A), buf)

/* u32 scalar when every layer agrees, else an INT32 array of length L (docs/GGUF-FORMAT.md §4 rule 2) */
int sp_export_set_per_layer(gguf_writer *w, const char *key, const int32_t *v, int L, sp_err *err) {
    int same = 1;
    for (int i = 1; i < L; i++) same &= v[i] == v[0];
    if (same) return sp_gguf_writer_set_u32(w, key, (uint32_t)v[0], err);
    return sp_gguf_writer_set_arr(w, key, GGUF_TYPE_INT32, v, (size_t)L, err);
}

int sp_export_arch_keys(gguf_writer *w, const char *A, const sp_config *c, sp_err *err) {
    char k[128];
    const int L = c->n_layers;
    int32_t ffn[SP_MAX_LAYERS], kvh[SP_MAX_LAYERS];
    for (int i = 0; i < L; i++) {
        ffn[i] = c->layers[i].ffn_dim;
        kvh[i] = c->layers[i].n_kv_heads;
    }
    if (sp_gguf_writer_set_u32(w, KEY(k, "context_length"), (uint32_t)c->max_pos, err) ||
        sp_gguf_writer_set_u32(w, KEY(k, "embedding_length"), (uint32_t)c->hidden_size, err) ||
        sp_gguf_writer_set_u32(w, KEY(k, "block_count"), (uint32_t)L, err) ||
        sp_export_set_per_layer(w, KEY(k, "feed_forward_length"), ffn, L, err) ||
        sp_gguf_writer_set_u32(w, KEY(k, "attention.head_count"), (uint32_t)c->n_heads, err) ||
        sp_export_set_per_layer(w, KEY(k, "attention.head_count_kv"), kvh, L, err) ||
        sp_gguf_writer_set_f32(w, KEY(k, "attention.layer_norm_rms_epsilon"), (float)c->rms_eps, err) ||
        sp_gguf_writer_set_f32(w, KEY(k, "rope.freq_base"), (float)c->rope.theta, err))
        return -1;
    if (c->n_experts > 0 &&
        (sp_gguf_writer_set_u32(w, KEY(k, "expert_count"), (uint32_t)c->n_experts, err) ||
         sp_gguf_writer_set_u32(w, KEY(k, "expert_used_count"), (uint32_t)c->n_experts_used, err) ||
         sp_gguf_writer_set_u32(w, KEY(k, "expert_feed_forward_length"), (uint32_t)c->moe_ffn_dim, err)))
        return -1;
    if (c->arch != SP_ARCH_GEMMA4) {
        /* key_length: llama.cpp's default H/nH is wrong whenever head_dim is set (Qwen3-4B) */
        return sp_gguf_writer_set_u32(w, KEY(k, "vocab_size"), (uint32_t)c->vocab_size, err) ||
               sp_gguf_writer_set_u32(w, KEY(k, "rope.dimension_count"), (uint32_t)c->head_dim, err) ||
               sp_gguf_writer_set_u32(w, KEY(k, "attention.key_length"), (uint32_t)c->head_dim, err) ||
               sp_gguf_writer_set_u32(w, KEY(k, "attention.value_length"), (uint32_t)c->head_dim, err);
    }
    /* gemma4 (docs/GGUF-FORMAT.md §5): full-layer dims in key_length / rope.*, sliding ones in *_swa */
    uint8_t pattern[SP_MAX_LAYERS];
    int Dg = -1;
    for (int i = 0; i < L; i++) {
        pattern[i] = (uint8_t)c->layers[i].sliding;
        if (!c->layers[i].sliding) {
            if (Dg >= 0 && Dg != c->layers[i].head_dim)
                return sp_err_set(err, "gemma4: full layers have different head dims (%d, %d); llama.cpp has one",
                                  Dg, c->layers[i].head_dim);
            Dg = c->layers[i].head_dim;
        }
        if (c->layers[i].sliding && c->layers[i].head_dim != c->head_dim)
            return sp_err_set(err, "gemma4: sliding layer %d head dim %d != head_dim %d", i, c->layers[i].head_dim,
                              c->head_dim);
    }
    if (Dg < 0) Dg = c->global_head_dim;
    return sp_gguf_writer_set_u32(w, KEY(k, "attention.sliding_window"), (uint32_t)c->sliding_window, err) ||
           sp_gguf_writer_set_arr(w, KEY(k, "attention.sliding_window_pattern"), GGUF_TYPE_BOOL, pattern, (size_t)L,
                               err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "attention.key_length"), (uint32_t)Dg, err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "attention.value_length"), (uint32_t)Dg, err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "attention.key_length_swa"), (uint32_t)c->head_dim, err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "attention.value_length_swa"), (uint32_t)c->head_dim, err) ||
           sp_gguf_writer_set_f32(w, KEY(k, "rope.freq_base_swa"), (float)c->rope_swa.theta, err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "rope.dimension_count"), (uint32_t)Dg, err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "rope.dimension_count_swa"), (uint32_t)c->head_dim, err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "attention.shared_kv_layers"), (uint32_t)c->n_kv_shared, err) ||
           sp_gguf_writer_set_u32(w, KEY(k, "embedding_length_per_layer_input"), (uint32_t)c->ple_dim, err) ||
           /* absent would mean 30.0 to llama.cpp, so 0.0 is written to disable */
           sp_gguf_writer_set_f32(w, KEY(k, "final_logit_softcapping"), (float)c->final_softcap, err);
}

/* What llama.cpp cannot represent: refuse rather than export a different model. */
static int check_supported(const sp_config *c, sp_err *err) {
    if (c->arch == SP_ARCH_QWEN3 && c->rope.type != SP_ROPE_DEFAULT)
        return sp_err_set(err, "qwen3: rope scaling is not exported (llama.cpp's qwen3 reads no rope_freqs)");
    for (int i = 0; c->n_experts > 0 && i < c->n_layers; i++)
        if (!c->layers[i].moe)
            return sp_err_set(err, "qwen3_moe: layer %d is dense (mlp_only_layers / decoder_sparse_step), which "
                                   "llama.cpp's qwen3moe cannot hold", i);
    if (c->n_experts > 0 && !c->norm_topk_prob)
        return sp_err_set(err, "qwen3_moe: norm_topk_prob = false is not exported (llama.cpp's qwen3moe always "
                               "renormalises the chosen experts' weights)");
    if (c->arch == SP_ARCH_LLAMA && c->rope.type == SP_ROPE_DEFAULT && c->rope.factor != 1.0)
        return sp_err_set(err, "llama: rope factor %g without llama3 scaling is not exported", c->rope.factor);
    if (c->arch != SP_ARCH_GEMMA4) return 0;
    if (c->rope_swa.type != SP_ROPE_DEFAULT || c->rope_swa.factor != 1.0 || c->rope_swa.partial_rotary_factor != 1.0)
        return sp_err_set(err, "gemma4: sliding-layer rope must be plain default (llama.cpp applies no scaling there)");
    if (c->rope.type == SP_ROPE_LLAMA3) return sp_err_set(err, "gemma4: llama3 rope on full layers is not exported");
    /* llama.cpp's hard-coded KV reuse (docs/GGUF-FORMAT.md §7) must equal HF's "last non-shared layer of the type" */
    const int L = c->n_layers, first_shared = L - c->n_kv_shared;
    for (int i = first_shared; c->n_kv_shared > 0 && i < L; i++) {
        int want = c->layers[i].sliding ? first_shared - 2 : first_shared - 1;
        if (c->layers[i].kv_source != want)
            return sp_err_set(err,
                              "gemma4: KV-shared layer %d reads layer %d, but llama.cpp reads layer %d "
                              "(it needs the last non-shared layer full and the one before it sliding)",
                              i, c->layers[i].kv_source, want);
    }
    return 0;
}

/* ---- the export ---------------------------------------------------------------------------- */

/* every tensor the config implies, with its shape; then nothing unclaimed */
static int check_tensors(const char *dir, const sp_config *cfg, st_set *st, const hf_tensor_spec *specs, int n_specs,
                         sp_err *err) {
    for (int i = 0; i < n_specs; i++) {
        const st_tensor *t;
        if (sp_st_get(st, specs[i].name, SP_DT_UNKNOWN, specs[i].ndim, specs[i].shape, &t, err)) return -1;
    }
    for (int i = 0; i < sp_st_count(st); i++) {
        const char *name = sp_st_at(st, i)->name;
        int known = 0;
        for (int j = 0; j < n_specs && !known; j++) known = !strcmp(specs[j].name, name);
        if (known) continue;
        if (droppable(cfg, name)) {
            sp_log(SP_LOG_DEBUG, "export: dropping %s", name);
            continue;
        }
        return sp_err_set(err, "%s: tensor %s is not part of a %s checkpoint with this config.json (llama.cpp would "
                               "refuse it)",
                          dir, name, sp_arch_name(cfg->arch));
    }
    return 0;
}

/* A stacked MoE tensor (llama.cpp's ffn_*_exps, ggml dims [k, n, E]) of `role` in layer li, its
 * rows from each expert's HF tensor (s: expert 0's spec); ex[li·3·E + ...] holds the sources. */
static int add_expert_tensor(gguf_writer *w, const sp_config *cfg, st_set *st, const hf_tensor_spec *s,
                             sp_tensor_role role, int li, const export_gguf_opts *o, export_tensor_src *src,
                             const st_tensor **ex, int *n_2d_types, sp_err *err) {
    int E = cfg->n_experts;
    const st_tensor **srcs = ex + ((size_t)li * 3 + (size_t)(role - SP_TN_EXP_GATE)) * (size_t)E;
    for (int e = 0; e < E; e++) {
        char rel[160], nm[256];
        sp_tensor_hf_expert_name(cfg->arch, role, li, e, rel, sizeof rel);
        snprintf(nm, sizeof nm, "%s%s", cfg->tensor_prefix, rel);
        if (!(srcs[e] = sp_st_find(st, nm))) return sp_err_set(err, "missing tensor %s", nm);
    }
    ggml_type type = o->weight_type >= 0                  ? (ggml_type)o->weight_type
                     : srcs[0]->dtype == SP_DT_BF16 ? GGML_TYPE_BF16
                     : srcs[0]->dtype == SP_DT_F16  ? GGML_TYPE_F16
                                                    : GGML_TYPE_F32;
    n_2d_types[type == GGML_TYPE_F32 ? 0 : type == GGML_TYPE_F16 ? 1 : 2]++;
    *src = (export_tensor_src){srcs[0], type, s->shape[1], 0, srcs, s->shape[0]};
    char gg[96];
    if (!sp_tensor_gguf_name(cfg->arch, role, li, gg, sizeof gg)) return sp_err_set(err, "no GGUF name for %s", s->name);
    int64_t ne[3] = {s->shape[1], s->shape[0], E};
    return sp_gguf_writer_add_tensor(w, gg, type, 3, ne, NULL, sp_export_fill_tensor, src, err);
}

/* the weight tensors, filled from the checkpoint at save time through srcs[i]; tensor types:
 * 1-D always F32 (docs/GGUF-FORMAT.md §4 rule 5); 2-D as asked or as stored, counted in
 * n_2d_types (F32, F16, BF16) for general.file_type */
static int add_weight_tensors(gguf_writer *w, const sp_config *cfg, st_set *st, const hf_tensor_spec *specs,
                              int n_specs, const export_gguf_opts *o, export_tensor_src *srcs,
                              const st_tensor **ex, int *n_2d_types, sp_err *err) {
    size_t pl = strlen(cfg->tensor_prefix);
    for (int i = 0; i < n_specs; i++) {
        const hf_tensor_spec *s = &specs[i];
        const st_tensor *t = sp_st_find(st, s->name);
        const char *hf = strncmp(s->name, cfg->tensor_prefix, pl) ? s->name : s->name + pl;
        char buf[96];
        int eli, ee, er = sp_tensor_expert_of(cfg->arch, hf, &eli, &ee);
        if (s->ndim == 3) { /* Gemma-4's stacked experts: the same bytes, ggml dims reversed */
            int part, parts;
            sp_tensor_role role = strstr(hf, "down_proj") ? SP_TN_EXP_DOWN : SP_TN_EXP_GATE;
            const char *gg = sp_tensor_expert_stack(cfg->arch, role, s->layer, 1, buf, sizeof buf, &part, &parts);
            SP_ASSERT(gg != NULL);
            ggml_type type = o->weight_type >= 0       ? (ggml_type)o->weight_type
                             : t->dtype == SP_DT_BF16 ? GGML_TYPE_BF16
                             : t->dtype == SP_DT_F16  ? GGML_TYPE_F16
                                                      : GGML_TYPE_F32;
            n_2d_types[type == GGML_TYPE_F32 ? 0 : type == GGML_TYPE_F16 ? 1 : 2]++;
            srcs[i] = (export_tensor_src){.src = t, .type = type, .row = s->shape[2]};
            int64_t ne[3] = {s->shape[2], s->shape[1], s->shape[0]};
            if (sp_gguf_writer_add_tensor(w, gg, type, 3, ne, NULL, sp_export_fill_tensor, &srcs[i], err)) return -1;
            continue;
        }
        if (er >= 0) { /* expert 0's spec adds the stacked tensor of every expert; the others add nothing */
            if (ee == 0 && add_expert_tensor(w, cfg, st, s, (sp_tensor_role)er, eli, o, &srcs[i], ex, n_2d_types, err))
                return -1;
            continue;
        }
        const char *gg = sp_gguf_tensor_name(cfg->arch, hf, buf, sizeof buf);
        SP_ASSERT(gg != NULL); /* every spec name has a mapping */
        ggml_type type = GGML_TYPE_F32;
        if (s->ndim == 2) {
            if (o->weight_type >= 0) type = (ggml_type)o->weight_type;
            else type = t->dtype == SP_DT_BF16 ? GGML_TYPE_BF16 : t->dtype == SP_DT_F16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
            n_2d_types[type == GGML_TYPE_F32 ? 0 : type == GGML_TYPE_F16 ? 1 : 2]++;
        }
        srcs[i] = (export_tensor_src){.src = t, .type = type, .row = s->ndim == 2 ? s->shape[1] : s->shape[0]};
        int li, role = sp_tensor_role_of(cfg->arch, hf, &li);
        if (cfg->arch == SP_ARCH_LLAMA && (role == SP_TN_Q || role == SP_TN_K)) /* Q/K rows in llama.cpp's order */
            srcs[i].perm_head_dim = cfg->layers[s->layer].head_dim;
        int64_t ne[2] = {s->ndim == 2 ? s->shape[1] : s->shape[0], s->shape[0]};
        if (sp_gguf_writer_add_tensor(w, gg, type, s->ndim, ne, NULL, sp_export_fill_tensor, &srcs[i], err)) return -1;
    }
    return 0;
}

/* rope_freqs.weight: llama3 divisors, or Gemma-4's proportional mask (1/factor x n_rot, 1e30
 * after); *freqs (the caller frees it after the save) holds the values the writer points at */
static int add_rope_freqs(gguf_writer *w, const sp_config *cfg, float **freqs, sp_err *err) {
    int n_freqs = 0;
    if (cfg->arch == SP_ARCH_LLAMA && cfg->rope.type == SP_ROPE_LLAMA3) {
        n_freqs = cfg->head_dim / 2;
        if (!(*freqs = malloc((size_t)n_freqs * sizeof(float)))) return sp_err_set(err, "out of memory");
        sp_export_llama3_rope_freqs(&cfg->rope, cfg->head_dim, *freqs);
    } else if (cfg->arch == SP_ARCH_GEMMA4) {
        int Dg = -1;
        for (int i = 0; i < cfg->n_layers; i++)
            if (!cfg->layers[i].sliding) Dg = cfg->layers[i].head_dim;
        if (Dg > 0) {
            n_freqs = Dg / 2;
            if (!(*freqs = malloc((size_t)n_freqs * sizeof(float)))) return sp_err_set(err, "out of memory");
            sp_export_proportional_rope_freqs(&cfg->rope, Dg, *freqs);
        }
    }
    if (n_freqs > 0) {
        int64_t ne[1] = {n_freqs};
        if (sp_gguf_writer_add_tensor(w, "rope_freqs.weight", GGML_TYPE_F32, 1, ne, *freqs, NULL, NULL, err))
            return -1;
    }
    return 0;
}

int sp_export_gguf(const char *dir, const char *out_path, const export_gguf_opts *o, sp_err *err) {
    sp_config cfg;
    st_set *st = NULL;
    gguf_writer *w = NULL;
    hf_tensor_spec *specs = NULL;
    export_tensor_src *srcs = NULL;
    const st_tensor **ex = NULL; /* each stacked MoE tensor's sources */
    float *rope_freqs = NULL;
    int n_specs = 0, rc = -1;
    char path[4096];

    if (sp_path_join(path, sizeof path, dir, "config.json") || sp_config_load(&cfg, path, err)) return -1;
    if (check_supported(&cfg, err) || sp_hf_tensor_specs(&cfg, &specs, &n_specs, err)) goto done;
    if (sp_st_open_dir(&st, dir, err)) goto done;
    if (check_tensors(dir, &cfg, st, specs, n_specs, err)) goto done;

    w = sp_gguf_writer_create();
    srcs = calloc((size_t)n_specs, sizeof *srcs);
    if (!w || !srcs) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    char base_buf[256]; /* general.name default: the directory's base name */
    snprintf(base_buf, sizeof base_buf, "%s", dir);
    for (size_t n = strlen(base_buf); n > 1 && base_buf[n - 1] == '/'; n--) base_buf[n - 1] = 0;
    const char *base = strrchr(base_buf, '/') ? strrchr(base_buf, '/') + 1 : base_buf;
    const char *A = cfg.n_experts > 0 && cfg.arch != SP_ARCH_GEMMA4 ? "qwen3moe" : sp_arch_name(cfg.arch); /* llama.cpp's */
    if (sp_gguf_writer_set_str(w, "general.architecture", A, err) ||
        sp_gguf_writer_set_str(w, "general.name", o->name ? o->name : base, err) || sp_export_arch_keys(w, A, &cfg, err))
        goto done;
    int n_2d_types[3] = {0}; /* F32, F16, BF16 counts for general.file_type */
    ex = calloc((size_t)cfg.n_layers * 3 * (size_t)(cfg.n_experts > 0 ? cfg.n_experts : 1), sizeof *ex);
    if (!ex) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    if (add_weight_tensors(w, &cfg, st, specs, n_specs, o, srcs, ex, n_2d_types, err)) goto done;
    if (add_rope_freqs(w, &cfg, &rope_freqs, err)) goto done;

    if (sp_export_tokenizer_keys(w, &cfg, dir, o, err)) goto done;
    /* general.file_type: 0 all F32, 1 mostly F16, 32 mostly BF16 (llama_ftype) */
    if (sp_gguf_writer_set_u32(w, "general.file_type", sp_export_file_type(n_2d_types), err)) goto done;
    if (cfg.arch == SP_ARCH_GEMMA4 && !strcmp(cfg.torch_dtype, "bfloat16"))
        sp_log(SP_LOG_INFO, "gemma4: llama.cpp scales embeddings by sqrtf(H) in f32, HF by bf16(sqrt(H)) "
                            "(docs/GGUF-FORMAT.md §7): expect ~0.1%% differences");
    if (o->in_place ? sp_gguf_writer_save_in_place(w, out_path, err) : sp_gguf_writer_save(w, out_path, err))
        goto done;
    rc = 0;
done:
    sp_gguf_writer_free(w);
    free(srcs);
    free(ex);
    free(specs);
    free(rope_freqs);
    if (st) sp_st_close(st);
    return rc;
}
