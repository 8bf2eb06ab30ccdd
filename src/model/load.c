/* load.c — bind a Hugging Face checkpoint to the decoder (FORMATS.md §4.2, §5.2).
 *
 * Big matrices stay in the read-only mmap (f32, bf16 or f16) and are used in place; the small
 * vectors (norm weights, layer scalars, RoPE tables) are converted to owned f32 arrays. Every
 * tensor is checked for presence, dtype and shape before any pointer is formed, and a failure
 * releases everything: there is no half-loaded model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model_internal.h"

static void *own(sp_model *m, size_t bytes) { return sp_owner_calloc(&m->owned, bytes); }

static int get_mat(sp_model *m, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    const st_tensor *t;
    int64_t shape[2] = {n, k};
    if (st_get(m->st, name, SP_DT_UNKNOWN, 2, shape, &t, err)) return -1;
    if (t->dtype != SP_DT_F32 && t->dtype != SP_DT_BF16 && t->dtype != SP_DT_F16)
        return sp_err_set(err, "tensor %s in %s: dtype %s is not supported for weights (F32, BF16, F16)", name,
                          t->file, sp_dtype_name(t->dtype));
    *out = (sp_mat){t->data, t->dtype, n, k};
    m->weight_bytes += t->nbytes;
    return 0;
}

static int get_vec(sp_model *m, const char *name, int n, float **out, sp_err *err) {
    const st_tensor *t;
    int64_t shape[1] = {n};
    if (st_get(m->st, name, SP_DT_UNKNOWN, 1, shape, &t, err)) return -1;
    float *x = own(m, (size_t)n * sizeof(float));
    if (!x) return sp_err_set(err, "out of memory loading %s", name);
    sp_to_f32(x, t->data, t->dtype, (size_t)n);
    *out = x;
    return 0;
}

/* a scalar cast to a dtype, as transformers does for Gemma's embedding scales */
static float round_to_dtype(float x, sp_dtype dt) {
    if (dt == SP_DT_BF16) return sp_bf16_to_f32(sp_f32_to_bf16(x));
    if (dt == SP_DT_F16) return sp_f16_to_f32(sp_f32_to_f16(x));
    return x;
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static int bind_layer(sp_model *m, int i, sp_err *err) {
    const sp_config *c = &m->cfg;
    const sp_layer_config *lc = &c->layers[i];
    sp_layer *l = &m->layers[i];
    const char *P = c->tensor_prefix;
    char nm[256];
    int H = c->hidden_size, D = lc->head_dim, NH = c->n_heads, KVH = lc->n_kv_heads, I = lc->ffn_dim;
    int gemma = c->arch == SP_ARCH_GEMMA4;
    if (get_vec(m, NAME("%slayers.%d.input_layernorm.weight", P, i), H, &l->attn_norm, err) ||
        get_mat(m, NAME("%slayers.%d.self_attn.q_proj.weight", P, i), NH * D, H, &l->wq, err) ||
        get_mat(m, NAME("%slayers.%d.self_attn.o_proj.weight", P, i), H, NH * D, &l->wo, err) ||
        get_vec(m, NAME("%slayers.%d.post_attention_layernorm.weight", P, i), H, &l->post_attn_norm, err) ||
        get_mat(m, NAME("%slayers.%d.mlp.gate_proj.weight", P, i), I, H, &l->w_gate, err) ||
        get_mat(m, NAME("%slayers.%d.mlp.up_proj.weight", P, i), I, H, &l->w_up, err) ||
        get_mat(m, NAME("%slayers.%d.mlp.down_proj.weight", P, i), H, I, &l->w_down, err))
        return -1;
    if (c->qk_norm && get_vec(m, NAME("%slayers.%d.self_attn.q_norm.weight", P, i), D, &l->q_norm, err)) return -1;
    if (lc->kv_source == i) { /* this layer computes its own K/V */
        if (get_mat(m, NAME("%slayers.%d.self_attn.k_proj.weight", P, i), KVH * D, H, &l->wk, err)) return -1;
        if (lc->has_v_proj &&
            get_mat(m, NAME("%slayers.%d.self_attn.v_proj.weight", P, i), KVH * D, H, &l->wv, err))
            return -1;
        if (c->qk_norm && get_vec(m, NAME("%slayers.%d.self_attn.k_norm.weight", P, i), D, &l->k_norm, err))
            return -1;
    }
    l->layer_scalar = 1.0f;
    if (gemma) {
        if (get_vec(m, NAME("%slayers.%d.pre_feedforward_layernorm.weight", P, i), H, &l->pre_ffn_norm, err) ||
            get_vec(m, NAME("%slayers.%d.post_feedforward_layernorm.weight", P, i), H, &l->post_ffn_norm, err))
            return -1;
        const st_tensor *ls = st_find(m->st, NAME("%slayers.%d.layer_scalar", P, i));
        if (ls) {
            if (ls->numel != 1 || (ls->dtype != SP_DT_F32 && ls->dtype != SP_DT_BF16 && ls->dtype != SP_DT_F16))
                return sp_err_set(err, "tensor %s in %s: expected one float, found %s with %lld elements", nm,
                                  ls->file, sp_dtype_name(ls->dtype), (long long)ls->numel);
            sp_to_f32(&l->layer_scalar, ls->data, ls->dtype, 1);
        }
        if (c->ple_dim > 0) {
            int Pd = c->ple_dim;
            if (get_mat(m, NAME("%slayers.%d.per_layer_input_gate.weight", P, i), Pd, H, &l->ple_gate, err) ||
                get_mat(m, NAME("%slayers.%d.per_layer_projection.weight", P, i), H, Pd, &l->ple_proj, err) ||
                get_vec(m, NAME("%slayers.%d.post_per_layer_input_norm.weight", P, i), H, &l->ple_post_norm, err))
                return -1;
        }
    }
    /* RoPE table of this layer's type */
    l->inv_freq = own(m, (size_t)(D / 2) * sizeof(float));
    if (!l->inv_freq) return sp_err_set(err, "out of memory");
    sp_rope_inv_freq(l->inv_freq, D, lc->sliding ? &c->rope_swa : &c->rope);
    return 0;
}

static int bind_model(sp_model *m, sp_err *err) {
    const sp_config *c = &m->cfg;
    const char *P = c->tensor_prefix;
    char nm[256];
    int H = c->hidden_size, V = c->vocab_size;
    const st_tensor *t;
    int64_t eshape[2] = {V, H};
    if (st_get(m->st, NAME("%sembed_tokens.weight", P), SP_DT_UNKNOWN, 2, eshape, &t, err)) return -1;
    m->embed = t;
    m->embed_scale = 1.0f;
    if (c->arch == SP_ARCH_GEMMA4) m->embed_scale = round_to_dtype(sqrtf((float)H), t->dtype);
    if (get_vec(m, NAME("%snorm.weight", P), H, &m->final_norm, err)) return -1;
    const st_tensor *lm = st_find(m->st, "lm_head.weight");
    if (!c->tie_embeddings || (lm && c->arch != SP_ARCH_GEMMA4)) {
        if (!lm && !c->tie_embeddings)
            return sp_err_set(err, "checkpoint has no lm_head.weight and tie_word_embeddings is false");
        if (get_mat(m, "lm_head.weight", V, H, &m->lm_head, err)) return -1;
    } else {
        m->lm_head = (sp_mat){t->data, t->dtype, V, H};
        m->weight_bytes += t->nbytes;
    }
    if (c->arch == SP_ARCH_GEMMA4 && c->ple_dim > 0) {
        int L = c->n_layers, Pd = c->ple_dim;
        int64_t pshape[2] = {c->ple_vocab, (int64_t)L * Pd};
        if (st_get(m->st, NAME("%sembed_tokens_per_layer.weight", P), SP_DT_UNKNOWN, 2, pshape, &m->ple_embed, err))
            return -1;
        m->ple_embed_scale = round_to_dtype(sqrtf((float)Pd), m->ple_embed->dtype);
        if (get_mat(m, NAME("%sper_layer_model_projection.weight", P), L * Pd, H, &m->ple_model_proj, err) ||
            get_vec(m, NAME("%sper_layer_projection_norm.weight", P), Pd, &m->ple_proj_norm, err))
            return -1;
    }
    m->layers = own(m, (size_t)c->n_layers * sizeof(sp_layer));
    if (!m->layers) return sp_err_set(err, "out of memory");
    for (int i = 0; i < c->n_layers; i++)
        if (bind_layer(m, i, err)) return -1;
    return 0;
}

int sp_model_load(sp_model **out, const char *dir, int n_threads, sp_err *err) {
    *out = NULL;
    if (n_threads > sp_pool_max_threads())
        return sp_err_set(err, "threads: %d asked, at most %d allowed (%d per online CPU)", n_threads,
                          sp_pool_max_threads(), SP_POOL_THREADS_PER_CPU);
    sp_model *m = calloc(1, sizeof *m);
    if (!m) return sp_err_set(err, "out of memory");
    char path[4096];
    if (sp_path_join(path, sizeof path, dir, "config.json")) {
        free(m);
        return sp_err_set(err, "model path too long: %s", dir);
    }
    if (sp_config_load(&m->cfg, path, err) || st_open_dir(&m->st, dir, err) || bind_model(m, err)) {
        sp_err_wrap(err, "loading model %s", dir);
        sp_model_free(m);
        return -1;
    }
    m->pool = sp_pool_create(n_threads);
    if (!m->pool) {
        sp_model_free(m);
        return sp_err_set(err, "cannot create thread pool");
    }
    m->n_threads = sp_pool_size(m->pool);
    *out = m;
    return 0;
}

void sp_model_free(sp_model *m) {
    if (!m) return;
    if (m->pool) sp_pool_free(m->pool);
    if (m->st) st_close(m->st);
    sp_owner_free(&m->owned);
    free(m);
}

const sp_config *sp_model_config(const sp_model *m) { return &m->cfg; }
int sp_model_threads(const sp_model *m) { return m->n_threads; }
size_t sp_model_weight_bytes(const sp_model *m) { return m->weight_bytes; }
