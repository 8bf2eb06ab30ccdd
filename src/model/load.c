/* load.c — bind a checkpoint to the decoder: a Hugging Face directory (config.json + safetensors,
 * FORMATS.md §4.2, §5.2) or a GGUF file (metadata → sp_config, llama.cpp tensor names; docs/GGUF.md).
 *
 * Tensors are asked for by their Hugging Face names without the checkpoint prefix; find() reads
 * them from whichever container was opened (the GGUF name comes from formats/gguf_names.c, the
 * dims are reversed to PyTorch order). Big matrices stay in the read-only mmap and are used in
 * place; the small vectors (norm weights, layer scalars, RoPE tables) are converted to owned f32
 * arrays. Every tensor is checked for presence, type and shape before any pointer is formed, a
 * GGUF tensor nobody binds is an error (it would be silently ignored otherwise), and a failure
 * releases everything: there is no half-loaded model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "formats/gguf_model.h"
#include "formats/gguf_names.h"
#include "kernels/quant.h"
#include "model_internal.h"

static void *own(sp_model *m, size_t bytes) { return sp_owner_calloc(&m->owned, bytes); }

/* one tensor as the binder sees it, whichever file it lives in */
typedef struct {
    const void *data;
    sp_dtype dt;
    int ndim;
    int64_t shape[2]; /* PyTorch order */
    size_t nbytes;
    char name[160];   /* as stored in the file */
    const char *file;
} wt;

/* The tensor `rel` (HF name without prefix). 0 found, 1 absent, -1 error (unsupported type, > 2 dims). */
static int find(sp_model *m, const char *rel, wt *out, sp_err *err) {
    memset(out, 0, sizeof *out);
    if (m->st) {
        snprintf(out->name, sizeof out->name, "%s%s", strcmp(rel, "lm_head.weight") ? m->cfg.tensor_prefix : "", rel);
        const st_tensor *t = st_find(m->st, out->name);
        if (!t) return 1;
        if (t->ndim > 2)
            return sp_err_set(err, "tensor %s in %s: %d dims, expected 1 or 2", out->name, t->file, t->ndim);
        if (t->dtype != SP_DT_F32 && t->dtype != SP_DT_BF16 && t->dtype != SP_DT_F16)
            return sp_err_set(err, "tensor %s in %s: dtype %s is not supported for weights (F32, BF16, F16)",
                              out->name, t->file, st_tensor_dtype_name(t));
        *out = (wt){t->data, t->dtype, t->ndim, {t->ndim > 0 ? t->shape[0] : 1, t->ndim > 1 ? t->shape[1] : 1},
                    t->nbytes, "", t->file};
        snprintf(out->name, sizeof out->name, "%s", t->name);
        return 0;
    }
    char buf[160];
    const char *gn = gguf_tensor_name(m->cfg.arch, rel, buf, sizeof buf);
    const gguf_tensor_info *t = gn ? gguf_find_tensor(m->gg, gn) : NULL;
    if (!t) return 1;
    snprintf(out->name, sizeof out->name, "%s", gn);
    out->file = m->gg->path;
    if (t->n_dims > 2)
        return sp_err_set(err, "tensor %s in %s: %u dims, expected 1 or 2", gn, m->gg->path, t->n_dims);
    out->dt = gguf_ggml_to_dtype(t->type);
    if (out->dt == SP_DT_UNKNOWN)
        return sp_err_set(err, "tensor %s in %s: ggml type %s (%u) is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, "
                          "Q6_K)", gn, m->gg->path,
                          ggml_type_label(t->type), t->type);
    if ((t->n_dims > 1 && t->dims[1] > INT32_MAX) || t->dims[0] > INT32_MAX)
        return sp_err_set(err, "tensor %s in %s: dims too large", gn, m->gg->path);
    out->ndim = (int)t->n_dims;
    out->shape[0] = t->n_dims == 2 ? (int64_t)t->dims[1] : (int64_t)t->dims[0];
    out->shape[1] = t->n_dims == 2 ? (int64_t)t->dims[0] : 1;
    out->nbytes = t->nbytes;
    if (!(out->data = gguf_tensor_data(m->gg, t, err))) return -1;
    m->gg_bound[t - m->gg->tensors] = 1;
    return 0;
}

static int require(sp_model *m, const char *rel, wt *out, sp_err *err) {
    int rc = find(m, rel, out, err);
    if (rc == 1) {
        char buf[160];
        const char *gn = m->gg ? gguf_tensor_name(m->cfg.arch, rel, buf, sizeof buf) : NULL;
        if (m->gg) return sp_err_set(err, "%s: missing tensor %s", m->gg->path, gn ? gn : rel);
        return sp_err_set(err, "missing tensor %s", out->name);
    }
    return rc;
}

static int check_shape(const wt *t, int ndim, int64_t n, int64_t k, sp_err *err) {
    if (t->ndim == ndim && t->shape[0] == n && (ndim == 1 || t->shape[1] == k)) return 0;
    char want[64], got[64];
    if (ndim == 1) snprintf(want, sizeof want, "[%lld]", (long long)n);
    else snprintf(want, sizeof want, "[%lld, %lld]", (long long)n, (long long)k);
    if (t->ndim == 1) snprintf(got, sizeof got, "[%lld]", (long long)t->shape[0]);
    else snprintf(got, sizeof got, "[%lld, %lld]", (long long)t->shape[0], (long long)t->shape[1]);
    return sp_err_set(err, "tensor %s in %s: shape %s, expected %s%s", t->name, t->file, got, want,
                      t->file && strstr(t->file, ".gguf") ? " (PyTorch order; GGUF dims are reversed)" : "");
}

static int get_mat(sp_model *m, const char *rel, int n, int k, sp_mat *out, sp_err *err) {
    wt t;
    if (require(m, rel, &t, err) || check_shape(&t, 2, n, k, err)) return -1;
    *out = (sp_mat){t.data, t.dt, n, k};
    char what[256];
    snprintf(what, sizeof what, "tensor %s in %s", t.name, t.file);
    if (sp_mat_check(out, what, err)) return -1;
    m->weight_bytes += t.nbytes;
    return 0;
}

static int get_vec(sp_model *m, const char *rel, int n, float **out, sp_err *err) {
    wt t;
    if (require(m, rel, &t, err) || check_shape(&t, 1, n, 1, err)) return -1;
    float *x = own(m, (size_t)n * sizeof(float));
    if (!x) return sp_err_set(err, "out of memory loading %s", t.name);
    if (sp_row_to_f32(x, t.data, t.dt, (size_t)n, err)) return sp_err_wrap(err, "tensor %s in %s", t.name, t.file);
    *out = x;
    return 0;
}

/* a scalar cast to a dtype, as transformers does for Gemma's embedding scales; a quantized
 * table keeps it in f32 (as llama.cpp does, and as its dequantized f32 twin) */
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
    char nm[256];
    l->d = sp_block_describe(c, i, SP_ATTN_CAUSAL);
    l->d.qk_interleaved = m->qk_interleaved;
    const sp_block_desc *d = &l->d;
    int H = d->H, D = d->D, NH = d->NH, KVH = d->KVH, I = d->I;
    if (get_vec(m, NAME("layers.%d.input_layernorm.weight", i), H, &l->attn_norm, err) ||
        get_mat(m, NAME("layers.%d.self_attn.q_proj.weight", i), NH * D, H, &l->wq, err) ||
        get_mat(m, NAME("layers.%d.self_attn.o_proj.weight", i), H, NH * D, &l->wo, err) ||
        get_vec(m, NAME("layers.%d.post_attention_layernorm.weight", i), H,
                d->post_norms ? &l->attn_post_norm : &l->ffn_norm, err) ||
        get_mat(m, NAME("layers.%d.mlp.gate_proj.weight", i), I, H, &l->w_gate, err) ||
        get_mat(m, NAME("layers.%d.mlp.up_proj.weight", i), I, H, &l->w_up, err) ||
        get_mat(m, NAME("layers.%d.mlp.down_proj.weight", i), H, I, &l->w_down, err))
        return -1;
    if (d->qk_norm && get_vec(m, NAME("layers.%d.self_attn.q_norm.weight", i), D, &l->q_norm, err)) return -1;
    if (lc->kv_source == i) { /* this layer computes its own K/V */
        if (get_mat(m, NAME("layers.%d.self_attn.k_proj.weight", i), KVH * D, H, &l->wk, err)) return -1;
        if (lc->has_v_proj && get_mat(m, NAME("layers.%d.self_attn.v_proj.weight", i), KVH * D, H, &l->wv, err))
            return -1;
        if (d->qk_norm && get_vec(m, NAME("layers.%d.self_attn.k_norm.weight", i), D, &l->k_norm, err)) return -1;
    } else if (m->gg) { /* a KV-shared layer may still carry unused K/V tensors (llama.cpp allows them) */
        wt unused;
        const char *kv_names[] = {"k_proj", "v_proj", "k_norm"};
        for (int j = 0; j < 3; j++)
            if (find(m, NAME("layers.%d.self_attn.%s.weight", i, kv_names[j]), &unused, err) < 0) return -1;
    }
    l->layer_scalar = 1.0f;
    if (d->post_norms) {
        if (get_vec(m, NAME("layers.%d.pre_feedforward_layernorm.weight", i), H, &l->ffn_norm, err) ||
            get_vec(m, NAME("layers.%d.post_feedforward_layernorm.weight", i), H, &l->ffn_post_norm, err))
            return -1;
        wt ls;
        int rc = find(m, NAME("layers.%d.layer_scalar", i), &ls, err);
        if (rc < 0) return -1;
        if (rc == 0) {
            if (ls.ndim != 1 || ls.shape[0] != 1 || sp_dtype_is_quant(ls.dt))
                return sp_err_set(err, "tensor %s in %s: expected one float", ls.name, ls.file);
            sp_to_f32(&l->layer_scalar, ls.data, ls.dt, 1);
        }
    }
    if (d->ple_dim > 0) {
        int Pd = d->ple_dim;
        if (get_mat(m, NAME("layers.%d.per_layer_input_gate.weight", i), Pd, H, &l->ple_gate, err) ||
            get_mat(m, NAME("layers.%d.per_layer_projection.weight", i), H, Pd, &l->ple_proj, err) ||
            get_vec(m, NAME("layers.%d.post_per_layer_input_norm.weight", i), H, &l->ple_post_norm, err))
            return -1;
    }
    /* RoPE table of this layer's type */
    l->inv_freq = own(m, (size_t)(D / 2) * sizeof(float));
    if (!l->inv_freq) return sp_err_set(err, "out of memory");
    sp_rope_inv_freq(l->inv_freq, D, lc->sliding ? &c->rope_swa : &c->rope);
    return 0;
}

static int bind_model(sp_model *m, sp_err *err) {
    const sp_config *c = &m->cfg;
    int H = c->hidden_size, V = c->vocab_size;
    /* the embedding is a lookup table: its bytes count only as the LM head when tied */
    if (get_mat(m, "embed_tokens.weight", V, H, &m->embed, err)) return -1;
    size_t embed_bytes = m->weight_bytes;
    m->weight_bytes = 0;
    m->embed_scale = 1.0f;
    /* Gemma: sqrt(H) rounded to the table's dtype as transformers does (see round_to_dtype) */
    if (c->arch == SP_ARCH_GEMMA4) m->embed_scale = round_to_dtype(sqrtf((float)H), m->embed.dt);
    if (get_vec(m, "norm.weight", H, &m->final_norm, err)) return -1;
    wt lm;
    int has_lm = find(m, "lm_head.weight", &lm, err);
    if (has_lm < 0) return -1;
    has_lm = has_lm == 0;
    if (!c->tie_embeddings || (has_lm && c->arch != SP_ARCH_GEMMA4)) {
        if (!has_lm) return sp_err_set(err, "checkpoint has no lm_head.weight and tie_word_embeddings is false");
        if (get_mat(m, "lm_head.weight", V, H, &m->lm_head, err)) return -1;
    } else {
        m->lm_head = m->embed;
        m->weight_bytes += embed_bytes;
    }
    if (c->arch == SP_ARCH_GEMMA4 && c->ple_dim > 0) {
        int L = c->n_layers, Pd = c->ple_dim;
        size_t before = m->weight_bytes;
        if (get_mat(m, "embed_tokens_per_layer.weight", c->ple_vocab, L * Pd, &m->ple_embed, err)) return -1;
        m->weight_bytes = before; /* a lookup table: one row per token, not streamed */
        m->ple_embed_scale = round_to_dtype(sqrtf((float)Pd), m->ple_embed.dt);
        if (get_mat(m, "per_layer_model_projection.weight", L * Pd, H, &m->ple_model_proj, err) ||
            get_vec(m, "per_layer_projection_norm.weight", Pd, &m->ple_proj_norm, err))
            return -1;
    }
    m->layers = own(m, (size_t)c->n_layers * sizeof(sp_layer));
    if (!m->layers) return sp_err_set(err, "out of memory");
    for (int i = 0; i < c->n_layers; i++)
        if (bind_layer(m, i, err)) return -1;
    return 0;
}

/* GGUF: metadata → config, then every tensor bound exactly once (rope_freqs is read by the config) */
static int open_gguf(sp_model *m, const char *path, sp_err *err) {
    if (!(m->gg = gguf_open(path, err)) || sp_config_from_gguf(&m->cfg, m->gg, err)) return -1;
    if (!(m->gg_bound = calloc(m->gg->n_tensors ? m->gg->n_tensors : 1, 1))) return sp_err_set(err, "out of memory");
    const gguf_tensor_info *rf = gguf_find_tensor(m->gg, "rope_freqs.weight");
    if (rf) m->gg_bound[rf - m->gg->tensors] = 1;
    if (m->cfg.arch == SP_ARCH_LLAMA) {
        m->qk_interleaved = 1;
        for (int i = 0; i < m->cfg.n_layers; i++)
            if (m->cfg.layers[i].head_dim > SP_BLOCK_MAX_HEAD_DIM)
                return sp_err_set(err, "%s: head dim %d exceeds %d", path, m->cfg.layers[i].head_dim,
                                  SP_BLOCK_MAX_HEAD_DIM);
    }
    if (bind_model(m, err)) return -1;
    for (uint64_t i = 0; i < m->gg->n_tensors; i++)
        if (!m->gg_bound[i]) {
            const gguf_tensor_info *t = &m->gg->tensors[i];
            return sp_err_set(err, "%s: tensor %.*s is not part of a %s model specula runs", path,
                              (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr, sp_arch_name(m->cfg.arch));
        }
    return 0;
}

static int open_dir(sp_model *m, const char *dir, sp_err *err) {
    char path[4096];
    if (sp_path_join(path, sizeof path, dir, "config.json")) return sp_err_set(err, "model path too long: %s", dir);
    return sp_config_load(&m->cfg, path, err) || st_open_dir(&m->st, dir, err) || bind_model(m, err) ? -1 : 0;
}

int sp_model_load(sp_model **out, const char *path, int n_threads, sp_err *err) {
    *out = NULL;
    if (n_threads > sp_pool_max_threads())
        return sp_err_set(err, "threads: %d asked, at most %d allowed (%d per online CPU)", n_threads,
                          sp_pool_max_threads(), SP_POOL_THREADS_PER_CPU);
    sp_model *m = calloc(1, sizeof *m);
    if (!m) return sp_err_set(err, "out of memory");
    struct stat st;
    int is_file = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (is_file ? open_gguf(m, path, err) : open_dir(m, path, err)) {
        sp_err_wrap(err, "loading model %s", path);
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
    if (m->gg) gguf_close(m->gg);
    free(m->gg_bound);
    sp_owner_free(&m->owned);
    free(m);
}

const sp_config *sp_model_config(const sp_model *m) { return &m->cfg; }
int sp_model_threads(const sp_model *m) { return m->n_threads; }
size_t sp_model_weight_bytes(const sp_model *m) { return m->weight_bytes; }
