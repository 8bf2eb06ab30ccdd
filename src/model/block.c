/* block.c — the one executor of a decoder layer (see block.h, docs/TRANSFORMER.md).
 *
 * Every kernel used here is batch-invariant, so a row's result does not depend on how many rows,
 * segments or threads share the call: the target's prefill equals its steps, a verify block equals
 * single-token forwards, and one sequence in a batch gets its solo bits. Not here: embeddings, the
 * final norm and heads, cache allocation (the callers own those). */
#include "model/block.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/tensor_names.h"

sp_block_desc sp_block_describe(const sp_config *c, int li, sp_attn_mode attn) {
    const sp_layer_config *lc = &c->layers[li];
    int gemma = c->arch == SP_ARCH_GEMMA4;
    return (sp_block_desc){
        .H = c->hidden_size, .NH = c->n_heads, .KVH = lc->n_kv_heads, .D = lc->head_dim, .I = lc->ffn_dim,
        .kv_proj = lc->kv_source == li, .v_proj = lc->has_v_proj, .post_norms = gemma, .qk_norm = c->qk_norm, .v_norm = gemma, .act = c->act, .attn = attn,
        .window = lc->sliding ? c->sliding_window : 0,
        .attn_scale = gemma ? 1.0f : 1.0f / sqrtf((float)lc->head_dim),
        .eps = (float)c->rms_eps, .ple_dim = gemma ? c->ple_dim : 0,
    };
}

/* Q/K rows in llama.cpp's pair order, where pair (2j, 2j+1) of a head holds HF dims (j, j + D/2)
 * (docs/GGUF.md), put back in HF order: RoPE, the cache and every later float operation are then
 * those of the safetensors checkpoint. */
static void heads_from_interleaved(float *x, int n_heads, int D) {
    float tmp[SP_BLOCK_MAX_HEAD_DIM];
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * D;
        for (int j = 0; j < D / 2; j++) {
            tmp[j] = v[2 * j];
            tmp[j + D / 2] = v[2 * j + 1];
        }
        memcpy(v, tmp, (size_t)D * sizeof(float));
    }
}

/* b's name for `role` in layer li → nm */
static const char *tensor_name(const sp_block_binder *b, sp_arch arch, sp_tensor_role role, int li, char *nm,
                               size_t cap) {
    char rel[160];
    if (!sp_tensor_hf_name(arch, role, li, rel, sizeof rel)) return NULL;
    snprintf(nm, cap, "%s%s", b->prefix ? b->prefix : "", rel);
    return nm;
}

static int bind_mat(const sp_block_binder *b, sp_arch arch, sp_tensor_role role, int li, int n, int k, sp_mat *out,
                    sp_err *err) {
    char nm[256];
    if (!tensor_name(b, arch, role, li, nm, sizeof nm))
        return sp_err_set(err, "layer %d: %s checkpoints have no tensor of role %d", li, sp_arch_name(arch), (int)role);
    return b->mat(b->ctx, nm, n, k, out, err);
}

static int bind_vec(const sp_block_binder *b, sp_arch arch, sp_tensor_role role, int li, int n, float **out,
                    sp_err *err) {
    char nm[256];
    if (!tensor_name(b, arch, role, li, nm, sizeof nm))
        return sp_err_set(err, "layer %d: %s checkpoints have no tensor of role %d", li, sp_arch_name(arch), (int)role);
    return b->vec(b->ctx, nm, n, out, err);
}

int sp_block_bind(sp_block_layer *l, sp_arch arch, int li, const sp_block_binder *b, sp_err *err) {
    const sp_block_desc *d = &l->d;
    int H = d->H, NH = d->NH, KVH = d->KVH, D = d->D, I = d->I;
    if (bind_vec(b, arch, SP_TN_ATTN_NORM, li, H, &l->attn_norm, err) ||
        bind_mat(b, arch, SP_TN_Q, li, NH * D, H, &l->wq, err) ||
        bind_mat(b, arch, SP_TN_O, li, H, NH * D, &l->wo, err) ||
        (d->post_norms && bind_vec(b, arch, SP_TN_ATTN_POST_NORM, li, H, &l->attn_post_norm, err)) ||
        bind_vec(b, arch, SP_TN_FFN_NORM, li, H, &l->ffn_norm, err) ||
        bind_mat(b, arch, SP_TN_GATE, li, I, H, &l->w_gate, err) ||
        bind_mat(b, arch, SP_TN_UP, li, I, H, &l->w_up, err) ||
        bind_mat(b, arch, SP_TN_DOWN, li, H, I, &l->w_down, err) ||
        (d->post_norms && bind_vec(b, arch, SP_TN_FFN_POST_NORM, li, H, &l->ffn_post_norm, err)) ||
        (d->qk_norm && bind_vec(b, arch, SP_TN_Q_NORM, li, D, &l->q_norm, err)))
        return -1;
    if (d->kv_proj && (bind_mat(b, arch, SP_TN_K, li, KVH * D, H, &l->wk, err) ||
                       (d->v_proj && bind_mat(b, arch, SP_TN_V, li, KVH * D, H, &l->wv, err)) ||
                       (d->qk_norm && bind_vec(b, arch, SP_TN_K_NORM, li, D, &l->k_norm, err))))
        return -1;
    if (d->ple_dim > 0 && (bind_mat(b, arch, SP_TN_PLE_GATE, li, d->ple_dim, H, &l->ple_gate, err) ||
                           bind_mat(b, arch, SP_TN_PLE_PROJ, li, H, d->ple_dim, &l->ple_proj, err) ||
                           bind_vec(b, arch, SP_TN_PLE_POST_NORM, li, H, &l->ple_post_norm, err)))
        return -1;
    l->layer_scalar = 1.0f;
    char nm[256];
    if (tensor_name(b, arch, SP_TN_LAYER_SCALAR, li, nm, sizeof nm) && b->scalar(b->ctx, nm, &l->layer_scalar, err) < 0)
        return -1;
    return 0;
}

/* the position of each row of g: pos0 + t, or pos0 + depth(t) for a token tree */
static void seg_positions(const sp_block_seg *g, int *pos) {
    for (int t = 0; t < g->T; t++)
        pos[t] = !g->parent ? g->pos0 + t : g->parent[t] < 0 ? g->pos0 : pos[g->parent[t]] + 1;
}

/* K and V of R rows, already projected into s->k (and s->v when the layer has V): head order,
 * norms, RoPE, then each segment's rows into its cache */
static void kv_store(const sp_block_layer *l, int R, const sp_block_seg *segs, int n_segs,
                     const sp_block_scratch *s) {
    const sp_block_desc *d = &l->d;
    int KVH = d->KVH, D = d->D;
    size_t row = (size_t)KVH * D;
    if (d->qk_interleaved) heads_from_interleaved(s->k, R * KVH, D);
    if (!d->v_proj) memcpy(s->v, s->k, (size_t)R * row * sizeof(float)); /* k_eq_v: V = raw K */
    if (l->k_norm) sp_rmsnorm(s->k, s->k, l->k_norm, R * KVH, D, d->eps);
    if (d->v_norm) sp_rmsnorm(s->v, s->v, NULL, R * KVH, D, d->eps);
    for (int i = 0, r0 = 0; i < n_segs; r0 += segs[i].T, i++) {
        const sp_block_seg *g = &segs[i];
        float *k = s->k + (size_t)r0 * row, *v = s->v + (size_t)r0 * row;
        int pos[SP_ATTN_TREE_MAX];
        if (g->parent) seg_positions(g, pos);
        for (int t = 0; t < g->T; t++) {
            int p = g->pos0 + t, slot = g->ring ? p % g->cap : p; /* a tree row's slot is still pos0 + t */
            sp_rope(k + (size_t)t * row, KVH, D, l->inv_freq, g->parent ? pos[t] : p);
            memcpy(g->K + (size_t)slot * row, k + (size_t)t * row, row * sizeof(float));
            memcpy(g->V + (size_t)slot * row, v + (size_t)t * row, row * sizeof(float));
        }
    }
}

void sp_block_kv_write(sp_pool *pool, const sp_block_layer *l, const float *xn, int R, const sp_block_seg *segs,
                       int n_segs, const sp_block_scratch *s) {
    const sp_mat *w[2] = {&l->wk, &l->wv};
    float *y[2] = {s->k, s->v};
    sp_matmul_multi(pool, y, xn, R, w, l->d.v_proj ? 2 : 1);
    kv_store(l, R, segs, n_segs, s);
}

/* attention of R rows s->xn → s->o [R, H] */
static void attention(sp_pool *pool, const sp_block_layer *l, int R, const sp_block_seg *segs, int n_segs,
                      const sp_block_scratch *s) {
    const sp_block_desc *d = &l->d;
    int NH = d->NH, D = d->D;
    size_t qrow = (size_t)NH * D;
    /* Q, K and V in one region when the layer projects its own K/V */
    const sp_mat *w[3] = {&l->wq, &l->wk, &l->wv};
    float *y[3] = {s->q, s->k, s->v};
    sp_matmul_multi(pool, y, s->xn, R, w, !d->kv_proj ? 1 : d->v_proj ? 3 : 2);
    if (d->qk_interleaved) heads_from_interleaved(s->q, R * NH, D);
    if (l->q_norm) sp_rmsnorm(s->q, s->q, l->q_norm, R * NH, D, d->eps);
    if (d->kv_proj) kv_store(l, R, segs, n_segs, s);
    for (int i = 0, r0 = 0; i < n_segs; r0 += segs[i].T, i++) {
        const sp_block_seg *g = &segs[i];
        float *q = s->q + (size_t)r0 * qrow;
        int pos[SP_ATTN_TREE_MAX];
        if (g->parent) seg_positions(g, pos);
        for (int t = 0; t < g->T; t++)
            sp_rope(q + (size_t)t * qrow, NH, D, l->inv_freq, g->parent ? pos[t] : g->pos0 + t);
        /* a borrowed cache holds positions < pos0 only: the query is masked as if at pos0 − 1 */
        sp_attn_shape sh = {
            .T = g->T, .pos0 = d->attn == SP_ATTN_BORROWED ? g->pos0 - 1 : g->pos0, .NH = NH, .KVH = d->KVH,
            .D = D, .cap = g->cap, .ring = g->ring, .window = d->window, .scale = d->attn_scale,
            .noncausal = d->attn == SP_ATTN_BLOCK,
        };
        if (g->parent) sp_attention_tree(pool, s->att + (size_t)r0 * qrow, q, g->K, g->V, &sh, g->parent);
        else sp_attention(pool, s->att + (size_t)r0 * qrow, q, g->K, g->V, &sh);
    }
    sp_matmul(pool, s->o, s->att, R, &l->wo);
}

void sp_block_forward(sp_pool *pool, const sp_block_layer *l, float *x, int R, const sp_block_seg *segs, int n_segs,
                      const float *ple, size_t ple_stride, const sp_block_scratch *s) {
    const sp_block_desc *d = &l->d;
    int H = d->H;
    size_t RH = (size_t)R * H;
    float eps = d->eps;

    sp_rmsnorm(s->xn, x, l->attn_norm, R, H, eps);
    attention(pool, l, R, segs, n_segs, s);
    if (d->post_norms) sp_rmsnorm(s->o, s->o, l->attn_post_norm, R, H, eps);
    sp_add(x, s->o, RH);

    sp_rmsnorm(s->xn, x, l->ffn_norm, R, H, eps);
    const sp_mat *gu[2] = {&l->w_gate, &l->w_up};
    float *gu_out[2] = {s->g, s->u};
    sp_matmul_multi(pool, gu_out, s->xn, R, gu, 2);
    if (d->act == SP_ACT_GELU_TANH) sp_gelu_tanh_mul(s->g, s->g, s->u, (size_t)R * d->I);
    else sp_silu_mul(s->g, s->g, s->u, (size_t)R * d->I);
    sp_matmul(pool, s->o, s->g, R, &l->w_down);
    if (d->post_norms) sp_rmsnorm(s->o, s->o, l->ffn_post_norm, R, H, eps);
    sp_add(x, s->o, RH);

    if (d->ple_dim > 0) { /* gemma4 per-layer input */
        int P = d->ple_dim;
        sp_matmul(pool, s->g, x, R, &l->ple_gate); /* [R, P] */
        for (int t = 0; t < R; t++)
            sp_gelu_tanh_mul(s->g + (size_t)t * P, s->g + (size_t)t * P, ple + (size_t)t * ple_stride, (size_t)P);
        sp_matmul(pool, s->o, s->g, R, &l->ple_proj);
        sp_rmsnorm(s->o, s->o, l->ple_post_norm, R, H, eps);
        sp_add(x, s->o, RH);
    }
    if (l->layer_scalar != 1.0f)
        for (size_t i = 0; i < RH; i++) x[i] *= l->layer_scalar;
}
