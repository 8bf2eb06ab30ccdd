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

/* ---- the per-row stages -------------------------------------------------------------------
 * Between the matmuls and attention a layer's work is per row (norms, RoPE, the cache writes,
 * residual adds, the MLP activation): a stage over at least BLOCK_PAR_ROWS rows runs as one
 * region with the rows split over the threads; fewer rows (decode) run on the caller. A row's
 * operations are the same either way, so the bits are. */
#define BLOCK_PAR_ROWS 16

typedef struct block_rows block_rows;
typedef void (*block_rows_fn)(const block_rows *c, int lo, int hi);
struct block_rows {
    const sp_block_layer *l;
    const sp_block_seg *segs;
    int n_segs, R;
    const sp_block_scratch *s;
    float *x; /* the residual rows [R, H] */
    block_rows_fn fn;
};

static void block_rows_task(void *arg, int i, int n) {
    const block_rows *c = arg;
    int lo, hi;
    sp_pool_split(c->R, 1, i, n, &lo, &hi);
    if (lo < hi) c->fn(c, lo, hi);
}

static void block_rows_run(sp_pool *pool, block_rows *c, block_rows_fn fn) {
    c->fn = fn;
    if (c->R >= BLOCK_PAR_ROWS && sp_pool_size(pool) > 1) sp_pool_run(pool, block_rows_task, c);
    else fn(c, 0, c->R);
}

/* rows [lo, hi) of each segment: RoPE of `n_heads` heads of `row` floats at each row's position;
 * cache: also write K (x) and V rows to the segment's cache slots */
static void seg_rows_rope(const block_rows *c, int lo, int hi, float *x, int n_heads, size_t row, int cache) {
    const sp_block_layer *l = c->l;
    for (int i = 0, r0 = 0; i < c->n_segs; r0 += c->segs[i].T, i++) {
        const sp_block_seg *g = &c->segs[i];
        int t0 = lo > r0 ? lo - r0 : 0, t1 = hi < r0 + g->T ? hi - r0 : g->T;
        if (t0 >= t1) continue;
        int pos[SP_ATTN_TREE_MAX];
        if (g->parent) seg_positions(g, pos);
        for (int t = t0; t < t1; t++) {
            int p = g->pos0 + t, slot = g->ring ? p % g->cap : p; /* a tree row's slot is still pos0 + t */
            float *xr = x + (size_t)(r0 + t) * row;
            sp_rope(xr, n_heads, l->d.D, l->inv_freq, g->parent ? pos[t] : p);
            if (!cache) continue;
            memcpy(g->K + (size_t)slot * row, xr, row * sizeof(float));
            memcpy(g->V + (size_t)slot * row, c->s->v + (size_t)(r0 + t) * row, row * sizeof(float));
        }
    }
}

/* K and V rows [lo, hi), already projected into s->k (and s->v when the layer has V): head order,
 * norms, RoPE, then into their segments' caches */
static void kv_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    const sp_block_scratch *s = c->s;
    int KVH = d->KVH, D = d->D, n = hi - lo;
    size_t row = (size_t)KVH * D;
    float *k = s->k + (size_t)lo * row, *v = s->v + (size_t)lo * row;
    if (d->qk_interleaved) heads_from_interleaved(k, n * KVH, D);
    if (!d->v_proj) memcpy(v, k, (size_t)n * row * sizeof(float)); /* k_eq_v: V = raw K */
    if (c->l->k_norm) sp_rmsnorm(k, k, c->l->k_norm, n * KVH, D, d->eps);
    if (d->v_norm) sp_rmsnorm(v, v, NULL, n * KVH, D, d->eps);
    seg_rows_rope(c, lo, hi, s->k, KVH, row, 1);
}

/* Q rows [lo, hi): head order, norm, RoPE; then K/V when the layer projects its own */
static void qkv_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    int NH = d->NH, D = d->D, n = hi - lo;
    size_t qrow = (size_t)NH * D;
    float *q = c->s->q + (size_t)lo * qrow;
    if (d->qk_interleaved) heads_from_interleaved(q, n * NH, D);
    if (c->l->q_norm) sp_rmsnorm(q, q, c->l->q_norm, n * NH, D, d->eps);
    seg_rows_rope(c, lo, hi, c->s->q, NH, qrow, 0);
    if (d->kv_proj) kv_rows(c, lo, hi);
}

void sp_block_kv_write(sp_pool *pool, const sp_block_layer *l, const float *xn, int R, const sp_block_seg *segs,
                       int n_segs, const sp_block_scratch *s) {
    const sp_mat *w[2] = {&l->wk, &l->wv};
    float *y[2] = {s->k, s->v};
    sp_matmul_multi(pool, y, xn, R, w, l->d.v_proj ? 2 : 1);
    block_rows c = {l, segs, n_segs, R, s, NULL, NULL};
    block_rows_run(pool, &c, kv_rows);
}

/* attention of R rows s->xn → s->o [R, H] */
static void attention(sp_pool *pool, block_rows *c) {
    const sp_block_layer *l = c->l;
    const sp_block_desc *d = &l->d;
    const sp_block_scratch *s = c->s;
    int NH = d->NH, D = d->D, R = c->R;
    size_t qrow = (size_t)NH * D;
    /* Q, K and V in one region when the layer projects its own K/V */
    const sp_mat *w[3] = {&l->wq, &l->wk, &l->wv};
    float *y[3] = {s->q, s->k, s->v};
    sp_matmul_multi(pool, y, s->xn, R, w, !d->kv_proj ? 1 : d->v_proj ? 3 : 2);
    block_rows_run(pool, c, qkv_rows);
    for (int i = 0, r0 = 0; i < c->n_segs; r0 += c->segs[i].T, i++) {
        const sp_block_seg *g = &c->segs[i];
        const float *q = s->q + (size_t)r0 * qrow;
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

/* rows [lo, hi) of x: the attention norm into s->xn */
static void attn_norm_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    size_t o = (size_t)lo * d->H;
    sp_rmsnorm(c->s->xn + o, c->x + o, c->l->attn_norm, hi - lo, d->H, d->eps);
}

/* x += (post-norm of) the attention output; the MLP's input norm into s->xn */
static void attn_out_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    size_t o = (size_t)lo * d->H;
    float *so = c->s->o + o;
    if (d->post_norms) sp_rmsnorm(so, so, c->l->attn_post_norm, hi - lo, d->H, d->eps);
    sp_add(c->x + o, so, (size_t)(hi - lo) * d->H);
    sp_rmsnorm(c->s->xn + o, c->x + o, c->l->ffn_norm, hi - lo, d->H, d->eps);
}

/* the MLP activation: g = act(g) · u */
static void act_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    size_t o = (size_t)lo * d->I, n = (size_t)(hi - lo) * d->I;
    if (d->act == SP_ACT_GELU_TANH) sp_gelu_tanh_mul(c->s->g + o, c->s->g + o, c->s->u + o, n);
    else sp_silu_mul(c->s->g + o, c->s->g + o, c->s->u + o, n);
}

/* x += (post-norm of) the MLP output */
static void mlp_out_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    size_t o = (size_t)lo * d->H;
    float *so = c->s->o + o;
    if (d->post_norms) sp_rmsnorm(so, so, c->l->ffn_post_norm, hi - lo, d->H, d->eps);
    sp_add(c->x + o, so, (size_t)(hi - lo) * d->H);
}

void sp_block_forward(sp_pool *pool, const sp_block_layer *l, float *x, int R, const sp_block_seg *segs, int n_segs,
                      const float *ple, size_t ple_stride, const sp_block_scratch *s) {
    const sp_block_desc *d = &l->d;
    int H = d->H;
    size_t RH = (size_t)R * H;
    float eps = d->eps;
    block_rows c = {l, segs, n_segs, R, s, x, NULL};

    block_rows_run(pool, &c, attn_norm_rows);
    attention(pool, &c);
    block_rows_run(pool, &c, attn_out_rows);

    const sp_mat *gu[2] = {&l->w_gate, &l->w_up};
    float *gu_out[2] = {s->g, s->u};
    sp_matmul_multi(pool, gu_out, s->xn, R, gu, 2);
    block_rows_run(pool, &c, act_rows);
    sp_matmul(pool, s->o, s->g, R, &l->w_down);
    block_rows_run(pool, &c, mlp_out_rows);

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
