/* load.c — bind a checkpoint to the decoder: a Hugging Face directory (config.json + safetensors,
 * docs/TRANSFORMER.md §2) or a GGUF file (metadata → sp_config, llama.cpp tensor names; docs/GGUF.md).
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
#include "formats/mlx_quant.h"
#include "formats/tensor_names.h"
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

/* Expert e's matrix of an expert role in layer li, as a 2-D tensor [n, k]: its slice of the
 * stacked tensor (llama.cpp's ffn_*_exps, dims [k, parts·n, E]; Gemma-4's HF experts.gate_up_proj /
 * experts.down_proj, [E, parts·n, k]), part `part` of `parts` along n (sp_tensor_expert_stack).
 * 0 found, 1 absent (or this container names experts one by one), -1 error. */
static int find_expert(sp_model *m, sp_tensor_role role, int li, int e, wt *out, sp_err *err) {
    char sn[128];
    int part, parts, E = m->cfg.n_experts;
    const char *stack = sp_tensor_expert_stack(m->cfg.arch, role, li, m->gg != NULL, sn, sizeof sn, &part, &parts);
    if (!stack) return 1;
    uint64_t k, rows;
    size_t nbytes;
    const unsigned char *data;
    if (m->gg) {
        const gguf_tensor_info *t = sp_gguf_find_tensor(m->gg, stack);
        if (!t) return 1;
        snprintf(out->name, sizeof out->name, "%s", stack);
        out->file = m->gg->path;
        if (t->n_dims != 3 || t->dims[2] != (uint64_t)E || t->dims[0] > INT32_MAX || t->dims[1] > INT32_MAX ||
            t->dims[1] % (uint64_t)parts)
            return sp_err_set(err, "tensor %s in %s: expected 3 dims [k, n%s, %d experts]", stack, m->gg->path,
                              parts > 1 ? " x 2" : "", E);
        out->dt = sp_gguf_ggml_to_dtype(t->type);
        if (out->dt == SP_DT_UNKNOWN)
            return sp_err_set(err, "tensor %s in %s: ggml type %s (%u) is not supported", stack, m->gg->path,
                              sp_ggml_type_label(t->type), t->type);
        if (!(data = sp_gguf_tensor_data(m->gg, t, err))) return -1;
        k = t->dims[0], rows = t->dims[1], nbytes = t->nbytes;
        m->gg_bound[t - m->gg->tensors] = 1;
    } else {
        char full[200];
        snprintf(full, sizeof full, "%s%s", m->cfg.tensor_prefix, stack);
        const st_tensor *t = sp_st_find(m->st, full);
        if (!t) return 1;
        snprintf(out->name, sizeof out->name, "%s", t->name);
        out->file = t->file;
        if (t->ndim != 3 || t->shape[0] != E || t->shape[1] <= 0 || t->shape[2] <= 0 || t->shape[1] > INT32_MAX ||
            t->shape[2] > INT32_MAX || t->shape[1] % parts)
            return sp_err_set(err, "tensor %s in %s: expected 3 dims [%d experts, n%s, k]", t->name, t->file, E,
                              parts > 1 ? " x 2" : "");
        if (t->dtype != SP_DT_F32 && t->dtype != SP_DT_BF16 && t->dtype != SP_DT_F16)
            return sp_err_set(err, "tensor %s in %s: dtype %s is not supported for weights (F32, BF16, F16)", t->name,
                              t->file, sp_st_tensor_dtype_name(t));
        out->dt = t->dtype;
        data = t->data, k = (uint64_t)t->shape[2], rows = (uint64_t)t->shape[1], nbytes = t->nbytes;
    }
    size_t row_bytes = sp_dtype_row_bytes(out->dt, (size_t)k);
    if (row_bytes == 0 || nbytes != (size_t)E * rows * row_bytes)
        return sp_err_set(err, "tensor %s in %s: %zu bytes do not hold %d experts of %llu rows of %llu", out->name,
                          out->file, nbytes, E, (unsigned long long)rows, (unsigned long long)k);
    uint64_t n = rows / (uint64_t)parts;
    snprintf(out->name + strlen(out->name), sizeof out->name - strlen(out->name), "[%d]%s", e,
             parts == 1 ? "" : part ? "(up)" : "(gate)");
    out->ndim = 2;
    out->shape[0] = (int64_t)n;
    out->shape[1] = (int64_t)k;
    out->nbytes = (size_t)n * row_bytes;
    out->data = data + ((size_t)e * rows + (size_t)part * n) * row_bytes;
    return 0;
}

static void *alloc_owned64(void *m, size_t bytes) { return sp_owner_alloc64(&((sp_model *)m)->owned, bytes); }

/* An MLX-quantized matrix (t is X.weight and X.scales is present): converted without changing a
 * value (src/formats/mlx_quant.h). 0 bound, 1 not quantized, -1 error. */
static int find_mlx(sp_model *m, const st_tensor *t, wt *out, sp_err *err) {
    char scales[200];
    size_t n = strlen(t->name);
    if (n < 7 || strcmp(t->name + n - 7, ".weight") || n + 1 > sizeof scales) return 1;
    snprintf(scales, sizeof scales, "%.*s.scales", (int)(n - 7), t->name);
    if (!sp_st_find(m->st, scales)) return 1;
    if (!m->mlxq)
        return sp_err_set(err, "tensor %s in %s is MLX-quantized (%s is present) but config.json has no "
                          "\"quantization\" object", t->name, t->file, scales);
    sp_mlxq_params p;
    sp_mlxq_mat q;
    int i = 0;
    while (i < m->n_mlx && m->mlx_keys[i] != t) i++;
    if (i < m->n_mlx) q = m->mlx_mats[i]; /* asked for again (the LM head is probed first) */
    else {
        scales[n - 7] = 0;
        if (sp_mlxq_params_for(m->mlxq, scales, &p, err) ||
            sp_mlxq_convert(m->st, t->name, &p, alloc_owned64, m, &q, err))
            return -1;
        sp_mlxq_mat *nm = realloc(m->mlx_mats, (size_t)(m->n_mlx + 1) * sizeof *nm);
        if (nm) m->mlx_mats = nm;
        const void **nk = nm ? realloc(m->mlx_keys, (size_t)(m->n_mlx + 1) * sizeof *nk) : NULL;
        if (!nk) return sp_err_set(err, "out of memory");
        m->mlx_keys = nk;
        m->mlx_keys[m->n_mlx] = t;
        m->mlx_mats[m->n_mlx++] = q;
    }
    *out = (wt){q.data, q.dt, 2, {q.n, q.k}, q.nbytes, "", t->file};
    snprintf(out->name, sizeof out->name, "%s", t->name);
    return 0;
}

/* The tensor `rel` (HF name without prefix). 0 found, 1 absent, -1 error (unsupported type, > 2 dims). */
static int find(sp_model *m, const char *rel, wt *out, sp_err *err) {
    memset(out, 0, sizeof *out);
    if (m->st) {
        char head[32]; /* the one name the checkpoint's prefix never applies to */
        sp_tensor_hf_name(m->cfg.arch, SP_TN_LM_HEAD, 0, head, sizeof head);
        snprintf(out->name, sizeof out->name, "%s%s", strcmp(rel, head) ? m->cfg.tensor_prefix : "", rel);
        const st_tensor *t = sp_st_find(m->st, out->name);
        int li, e, er = t ? -1 : sp_tensor_expert_of(m->cfg.arch, rel, &li, &e);
        if (er >= 0) return find_expert(m, (sp_tensor_role)er, li, e, out, err);
        if (!t) return 1;
        if (t->dtype == SP_DT_U32 || m->mlxq) {
            int rc = find_mlx(m, t, out, err);
            if (rc <= 0) return rc;
        }
        if (t->ndim > 2)
            return sp_err_set(err, "tensor %s in %s: %d dims, expected 1 or 2", out->name, t->file, t->ndim);
        if (t->dtype != SP_DT_F32 && t->dtype != SP_DT_BF16 && t->dtype != SP_DT_F16)
            return sp_err_set(err, "tensor %s in %s: dtype %s is not supported for weights (F32, BF16, F16)",
                              out->name, t->file, sp_st_tensor_dtype_name(t));
        *out = (wt){t->data, t->dtype, t->ndim, {t->ndim > 0 ? t->shape[0] : 1, t->ndim > 1 ? t->shape[1] : 1},
                    t->nbytes, "", t->file};
        snprintf(out->name, sizeof out->name, "%s", t->name);
        return 0;
    }
    char buf[160];
    int li, e, er = sp_tensor_expert_of(m->cfg.arch, rel, &li, &e);
    if (er >= 0) return find_expert(m, (sp_tensor_role)er, li, e, out, err);
    const char *gn = sp_gguf_tensor_name(m->cfg.arch, rel, buf, sizeof buf);
    const gguf_tensor_info *t = gn ? sp_gguf_find_tensor(m->gg, gn) : NULL;
    if (!t) return 1;
    snprintf(out->name, sizeof out->name, "%s", gn);
    out->file = m->gg->path;
    if (t->n_dims > 2)
        return sp_err_set(err, "tensor %s in %s: %u dims, expected 1 or 2", gn, m->gg->path, t->n_dims);
    out->dt = sp_gguf_ggml_to_dtype(t->type);
    if (out->dt == SP_DT_UNKNOWN)
        return sp_err_set(err, "tensor %s in %s: ggml type %s (%u) is not supported (F32, F16, BF16, Q8_0, Q4_0, Q5_0, "
                          "Q4_K, Q6_K)", gn, m->gg->path,
                          sp_ggml_type_label(t->type), t->type);
    if ((t->n_dims > 1 && t->dims[1] > INT32_MAX) || t->dims[0] > INT32_MAX)
        return sp_err_set(err, "tensor %s in %s: dims too large", gn, m->gg->path);
    out->ndim = (int)t->n_dims;
    out->shape[0] = t->n_dims == 2 ? (int64_t)t->dims[1] : (int64_t)t->dims[0];
    out->shape[1] = t->n_dims == 2 ? (int64_t)t->dims[0] : 1;
    out->nbytes = t->nbytes;
    if (!(out->data = sp_gguf_tensor_data(m->gg, t, err))) return -1;
    m->gg_bound[t - m->gg->tensors] = 1;
    return 0;
}

static int require(sp_model *m, const char *rel, wt *out, sp_err *err) {
    int rc = find(m, rel, out, err);
    if (rc == 1) {
        char buf[160];
        const char *gn = m->gg ? sp_gguf_tensor_name(m->cfg.arch, rel, buf, sizeof buf) : NULL;
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

/* W's copy in the fast tier's layout, when that tier has one (matrices a matmul reads; a lookup
 * table stays as it is) */
static int pack_mat(sp_model *m, sp_mat *W, const char *what, sp_err *err) {
    size_t pb = m->check_only ? 0 : sp_mat_pack_bytes(W);
    if (!pb) return 0;
    void *p = sp_owner_alloc64(&m->owned, pb); /* 64-byte rows and registers */
    if (!p) return sp_err_set(err, "out of memory repacking %s (%zu bytes)", what, pb);
    sp_mat_pack(W, p);
    W->pack = p;
    size_t nbytes = (size_t)W->n * sp_dtype_row_bytes(W->dt, (size_t)W->k);
    if (m->gg) sp_gguf_drop_pages(m->gg, W->data, nbytes); /* the packed copy serves every matmul */
    return 0;
}

/* a 2-D tensor; packed for the fast tier unless it is only a lookup table (table = 1) */
static int get_mat_as(sp_model *m, const char *rel, int n, int k, int table, sp_mat *out, sp_err *err) {
    wt t;
    if (require(m, rel, &t, err) || check_shape(&t, 2, n, k, err)) return -1;
    *out = (sp_mat){t.data, t.dt, n, k, 0, NULL};
    char what[256];
    snprintf(what, sizeof what, "tensor %s in %s", t.name, t.file);
    if (sp_mat_check(out, what, err) || (!table && pack_mat(m, out, what, err))) return -1;
    m->weight_bytes += t.nbytes;
    return 0;
}

static int get_mat(sp_model *m, const char *rel, int n, int k, sp_mat *out, sp_err *err) {
    return get_mat_as(m, rel, n, k, 0, out, err);
}

static int get_vec(sp_model *m, const char *rel, int n, float **out, sp_err *err) {
    wt t;
    if (require(m, rel, &t, err) || check_shape(&t, 1, n, 1, err)) return -1;
    if (t.dt != SP_DT_F32 && t.dt != SP_DT_F16 && t.dt != SP_DT_BF16) /* as llama.cpp: vectors are never quantized */
        return sp_err_set(err, "tensor %s in %s: a vector (norm weight) must be F32, F16 or BF16, not %s", t.name, t.file,
                          sp_dtype_name(t.dt));
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

/* the loader's tensor readers as sp_block_bind calls them */
static int bind_mat_cb(void *m, const char *rel, int n, int k, sp_mat *out, sp_err *err) {
    return get_mat(m, rel, n, k, out, err);
}

static int bind_vec_cb(void *m, const char *rel, int n, float **out, sp_err *err) {
    return get_vec(m, rel, n, out, err);
}

static int bind_scalar_cb(void *m, const char *rel, float *out, sp_err *err) {
    wt ls;
    int rc = find(m, rel, &ls, err);
    if (rc != 0) return rc;
    if (ls.ndim != 1 || ls.shape[0] != 1 || sp_dtype_is_quant(ls.dt))
        return sp_err_set(err, "tensor %s in %s: expected one float", ls.name, ls.file);
    sp_to_f32(out, ls.data, ls.dt, 1);
    return 0;
}

static int bind_layer(sp_model *m, int i, sp_err *err) {
    const sp_config *c = &m->cfg;
    const sp_layer_config *lc = &c->layers[i];
    sp_layer *l = &m->layers[i];
    char nm[256];
    l->d = sp_block_describe(c, i, SP_ATTN_CAUSAL);
    l->d.qk_interleaved = m->qk_interleaved;
    if (l->d.n_experts > 0) { /* the arrays sp_block_bind fills with each expert's matrices */
        size_t E = (size_t)l->d.n_experts;
        l->e_gate = own(m, E * sizeof(sp_mat));
        l->e_up = own(m, E * sizeof(sp_mat));
        l->e_down = own(m, E * sizeof(sp_mat));
        if (!l->e_gate || !l->e_up || !l->e_down) return sp_err_set(err, "out of memory");
    }
    sp_block_binder b = {m, "", bind_mat_cb, bind_vec_cb, bind_scalar_cb};
    if (sp_block_bind(l, c->arch, i, &b, err)) return -1;
    if (l->d.n_experts > 0) { /* a decoded token streams only its n_experts_used experts */
        size_t eb = 0;
        for (int e = 0; e < l->d.n_experts; e++) {
            const sp_mat *em[3] = {&l->e_gate[e], &l->e_up[e], &l->e_down[e]};
            for (int j = 0; j < 3; j++) eb += (size_t)em[j]->n * sp_dtype_row_bytes(em[j]->dt, (size_t)em[j]->k);
        }
        m->weight_bytes -= eb - eb / (size_t)l->d.n_experts * (size_t)l->d.n_experts_used;
    }
    if (!l->d.kv_proj && m->gg) { /* a KV-shared layer may still carry unused K/V tensors (llama.cpp allows them) */
        wt unused;
        const sp_tensor_role kv_roles[] = {SP_TN_K, SP_TN_V, SP_TN_K_NORM};
        for (int j = 0; j < 3; j++)
            if (sp_tensor_hf_name(c->arch, kv_roles[j], i, nm, sizeof nm) && find(m, nm, &unused, err) < 0) return -1;
    }
    /* RoPE table of this layer's type */
    int D = l->d.D;
    l->inv_freq = own(m, (size_t)(D / 2) * sizeof(float));
    if (!l->inv_freq) return sp_err_set(err, "out of memory");
    sp_rope_inv_freq(l->inv_freq, D, lc->sliding ? &c->rope_swa : &c->rope);
    return 0;
}

static int bind_model(sp_model *m, sp_err *err) {
    const sp_config *c = &m->cfg;
    int H = c->hidden_size, V = c->vocab_size;
    char nm[160], lm_name[160];
#define TN(role) sp_tensor_hf_name(c->arch, role, 0, nm, sizeof nm)
    /* the embedding is a lookup table: its bytes count only as the LM head when tied */
    if (get_mat_as(m, TN(SP_TN_EMBED), V, H, 1, &m->embed, err)) return -1;
    size_t embed_bytes = m->weight_bytes;
    m->weight_bytes = 0;
    m->embed_scale = 1.0f;
    /* Gemma: sqrt(H) rounded to the table's dtype as transformers does (see round_to_dtype) */
    if (c->arch == SP_ARCH_GEMMA4) m->embed_scale = round_to_dtype(sqrtf((float)H), m->embed.dt);
    if (get_vec(m, TN(SP_TN_FINAL_NORM), H, &m->final_norm, err)) return -1;
    wt lm;
    sp_tensor_hf_name(c->arch, SP_TN_LM_HEAD, 0, lm_name, sizeof lm_name);
    int has_lm = find(m, lm_name, &lm, err);
    if (has_lm < 0) return -1;
    has_lm = has_lm == 0;
    if (!c->tie_embeddings || (has_lm && c->arch != SP_ARCH_GEMMA4)) {
        if (!has_lm) return sp_err_set(err, "checkpoint has no lm_head.weight and tie_word_embeddings is false");
        if (get_mat(m, lm_name, V, H, &m->lm_head, err)) return -1;
    } else {
        if (pack_mat(m, &m->embed, "the tied embedding table", err)) return -1;
        m->lm_head = m->embed;
        m->weight_bytes += embed_bytes;
    }
    if (c->arch == SP_ARCH_GEMMA4 && c->ple_dim > 0) {
        int L = c->n_layers, Pd = c->ple_dim;
        size_t before = m->weight_bytes;
        if (get_mat_as(m, TN(SP_TN_PLE_EMBED), c->ple_vocab, L * Pd, 1, &m->ple_embed, err)) return -1;
        m->weight_bytes = before; /* a lookup table: one row per token, not streamed */
        m->ple_embed_scale = round_to_dtype(sqrtf((float)Pd), m->ple_embed.dt);
        if (get_mat(m, TN(SP_TN_PLE_MODEL_PROJ), L * Pd, H, &m->ple_model_proj, err) ||
            get_vec(m, TN(SP_TN_PLE_PROJ_NORM), Pd, &m->ple_proj_norm, err))
            return -1;
    }
#undef TN
    m->layers = own(m, (size_t)c->n_layers * sizeof(sp_layer));
    if (!m->layers) return sp_err_set(err, "out of memory");
    for (int i = 0; i < c->n_layers; i++)
        if (bind_layer(m, i, err)) return -1;
    return 0;
}

/* GGUF: metadata → config, then every tensor bound exactly once (rope_freqs is read by the config) */
static int open_gguf(sp_model *m, const char *path, sp_err *err) {
    if (!(m->gg = sp_gguf_open(path, err)) || sp_config_from_gguf(&m->cfg, m->gg, err)) return -1;
    if (!(m->gg_bound = calloc(m->gg->n_tensors ? m->gg->n_tensors : 1, 1))) return sp_err_set(err, "out of memory");
    const gguf_tensor_info *rf = sp_gguf_find_tensor(m->gg, "rope_freqs.weight");
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
    return sp_config_load(&m->cfg, path, err) || sp_mlxq_load(&m->mlxq, path, err) || sp_st_open_dir(&m->st, dir, err) ||
                   bind_model(m, err)
               ? -1
               : 0;
}

/* the config read and every tensor bound (check_only: without the packed copies); NULL with err
 * set on any failure */
static sp_model *open_model(const char *path, int check_only, sp_err *err) {
    sp_model *m = calloc(1, sizeof *m);
    if (!m) {
        sp_err_set(err, "out of memory");
        return NULL;
    }
    m->check_only = check_only;
    struct stat st;
    int is_file = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (is_file ? open_gguf(m, path, err) : open_dir(m, path, err)) {
        sp_err_wrap(err, "loading model %s", path);
        sp_model_free(m);
        return NULL;
    }
    return m;
}

int sp_model_check(const char *path, sp_err *err) {
    sp_model *m = open_model(path, 1, err);
    if (!m) return -1;
    sp_model_free(m);
    return 0;
}

int sp_model_load(sp_model **out, const char *path, int n_threads, sp_err *err) {
    *out = NULL;
    if (n_threads > sp_pool_max_threads())
        return sp_err_set(err, "threads: %d asked, at most %d allowed (%d per online CPU)", n_threads,
                          sp_pool_max_threads(), SP_POOL_THREADS_PER_CPU);
    sp_model *m = open_model(path, 0, err);
    if (!m) return -1;
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
    if (m->st) sp_st_close(m->st);
    sp_mlxq_free(m->mlxq);
    free(m->mlx_mats);
    free(m->mlx_keys);
    if (m->gg) sp_gguf_close(m->gg);
    free(m->gg_bound);
    sp_owner_free(&m->owned);
    free(m);
}

const sp_config *sp_model_config(const sp_model *m) { return &m->cfg; }
int sp_model_threads(const sp_model *m) { return m->n_threads; }
size_t sp_model_weight_bytes(const sp_model *m) { return m->weight_bytes; }

/* every matrix of the model: the LM head, the PLE projection and each layer's */
void sp_model_set_bf16_dot(sp_model *m, int on) {
    m->bf16_dot = on != 0;
    m->lm_head.bf16_dot = m->ple_model_proj.bf16_dot = m->bf16_dot;
    for (int i = 0; i < m->cfg.n_layers; i++) {
        sp_layer *l = &m->layers[i];
        sp_mat *mats[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down, &l->ple_gate, &l->ple_proj};
        for (size_t j = 0; j < sizeof mats / sizeof mats[0]; j++) mats[j]->bf16_dot = m->bf16_dot;
        l->router.bf16_dot = m->bf16_dot;
        for (int e = 0; e < l->d.n_experts; e++)
            l->e_gate[e].bf16_dot = l->e_up[e].bf16_dot = l->e_down[e].bf16_dot = m->bf16_dot;
    }
}
int sp_model_bf16_dot(const sp_model *m) { return m->bf16_dot; }

sp_pool *sp_model_pool(const sp_model *m) { return m->pool; }
const sp_mat *sp_model_lm_head(const sp_model *m) { return &m->lm_head; }
const sp_mat *sp_model_embed_table(const sp_model *m) { return &m->embed; }
const float *sp_model_final_norm(const sp_model *m) { return m->final_norm; }

const float *sp_model_rope_inv_freq(const sp_model *m, int layer, int *D) {
    if (layer < 0 || layer >= m->cfg.n_layers) return NULL;
    *D = m->layers[layer].d.D;
    return m->layers[layer].inv_freq;
}
