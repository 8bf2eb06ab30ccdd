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

#include "core/core.h"
#include "formats/tensor_names.h"

sp_block_desc sp_block_describe(const sp_config *c, int li, sp_attn_mode attn) {
    const sp_layer_config *lc = &c->layers[li];
    int gemma = c->arch == SP_ARCH_GEMMA4, moe = lc->moe && c->n_experts > 0;
    return (sp_block_desc){
        .H = c->hidden_size, .NH = c->n_heads, .KVH = lc->n_kv_heads, .D = lc->head_dim,
        .I = moe && !gemma ? c->moe_ffn_dim : lc->ffn_dim, .n_experts = moe ? c->n_experts : 0,
        .n_experts_used = moe ? c->n_experts_used : 0, .norm_topk = moe && c->norm_topk_prob,
        .Ie = moe ? c->moe_ffn_dim : 0, .moe_dual = moe && gemma,
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

/* b's name for `role` in layer li of a `lay` checkpoint → nm */
static const char *tensor_name(const sp_block_binder *b, sp_tn_layout lay, sp_arch arch, sp_tensor_role role, int li,
                               char *nm, size_t cap) {
    char rel[160];
    if (!sp_tensor_hf_name_in(lay, arch, role, li, rel, sizeof rel)) return NULL;
    snprintf(nm, cap, "%s%s", b->prefix ? b->prefix : "", rel);
    return nm;
}

/* where a binding reads its names: the binder, the layout and architecture, the layer */
typedef struct {
    const sp_block_binder *b;
    sp_tn_layout lay;
    sp_arch arch;
    int li;
} bind_at;

static int bind_mat(const bind_at *at, sp_tensor_role role, int n, int k, sp_mat *out, sp_err *err) {
    char nm[256];
    if (!tensor_name(at->b, at->lay, at->arch, role, at->li, nm, sizeof nm))
        return sp_err_set(err, "layer %d: %s checkpoints have no tensor of role %d", at->li, sp_arch_name(at->arch),
                          (int)role);
    return at->b->mat(at->b->ctx, nm, n, k, out, err);
}

static int bind_vec(const bind_at *at, sp_tensor_role role, int n, float **out, sp_err *err) {
    char nm[256];
    if (!tensor_name(at->b, at->lay, at->arch, role, at->li, nm, sizeof nm))
        return sp_err_set(err, "layer %d: %s checkpoints have no tensor of role %d", at->li, sp_arch_name(at->arch),
                          (int)role);
    return at->b->vec(at->b->ctx, nm, n, out, err);
}

/* the dense MLP, or the router and every expert's three matrices, or (moe_dual) both with the
 * router's scales and the extra norms */
static int bind_mlp(const bind_at *at, sp_block_layer *l, sp_err *err) {
    const sp_block_desc *d = &l->d;
    int H = d->H, I = d->I, Ie = d->Ie;
    if ((!d->n_experts || d->moe_dual) &&
        (bind_mat(at, SP_TN_GATE, I, H, &l->w_gate, err) || bind_mat(at, SP_TN_UP, I, H, &l->w_up, err) ||
         bind_mat(at, SP_TN_DOWN, H, I, &l->w_down, err)))
        return -1;
    if (!d->n_experts) return 0;
    if (!l->e_gate || !l->e_up || !l->e_down)
        return sp_err_set(err, "layer %d: a mixture-of-experts layer, which this model kind does not run", at->li);
    if (bind_mat(at, SP_TN_ROUTER, d->n_experts, H, &l->router, err)) return -1;
    if (d->moe_dual &&
        (bind_vec(at, SP_TN_ROUTER_SCALE, H, &l->router_scale, err) ||
         bind_vec(at, SP_TN_EXP_SCALE, d->n_experts, &l->expert_scale, err) ||
         bind_vec(at, SP_TN_FFN_NORM_2, H, &l->ffn_norm_2, err) ||
         bind_vec(at, SP_TN_FFN_POST_NORM_1, H, &l->ffn_post_norm_1, err) ||
         bind_vec(at, SP_TN_FFN_POST_NORM_2, H, &l->ffn_post_norm_2, err)))
        return -1;
    const sp_tensor_role roles[3] = {SP_TN_EXP_GATE, SP_TN_EXP_UP, SP_TN_EXP_DOWN};
    sp_mat *mats[3] = {l->e_gate, l->e_up, l->e_down};
    for (int e = 0; e < d->n_experts; e++)
        for (int j = 0; j < 3; j++) {
            char rel[160], nm[256];
            if (!sp_tensor_hf_expert_name(at->arch, roles[j], at->li, e, rel, sizeof rel))
                return sp_err_set(err, "layer %d: no name for expert %d", at->li, e);
            snprintf(nm, sizeof nm, "%s%s", at->b->prefix ? at->b->prefix : "", rel);
            if (at->b->mat(at->b->ctx, nm, j == 2 ? H : Ie, j == 2 ? Ie : H, &mats[j][e], err)) return -1;
        }
    return 0;
}

int sp_block_bind_layout(sp_block_layer *l, sp_tn_layout layout, sp_arch arch, int li, const sp_block_binder *b,
                         sp_err *err) {
    const sp_block_desc *d = &l->d;
    const bind_at at = {b, layout, arch, li};
    int H = d->H, NH = d->NH, KVH = d->KVH, D = d->D, pair = d->attn_in == SP_ATTN_IN_EMBED_STATE;
    int Hin = pair ? 2 * H : H; /* what Q/K/V read */
    if (bind_vec(&at, SP_TN_ATTN_NORM, H, &l->attn_norm, err) ||
        (pair && bind_vec(&at, SP_TN_HIDDEN_NORM, H, &l->hidden_norm, err)) ||
        bind_mat(&at, SP_TN_Q, NH * D, Hin, &l->wq, err) || bind_mat(&at, SP_TN_O, H, NH * D, &l->wo, err) ||
        (d->post_norms && bind_vec(&at, SP_TN_ATTN_POST_NORM, H, &l->attn_post_norm, err)) ||
        bind_vec(&at, SP_TN_FFN_NORM, H, &l->ffn_norm, err) || bind_mlp(&at, l, err) ||
        (d->post_norms && bind_vec(&at, SP_TN_FFN_POST_NORM, H, &l->ffn_post_norm, err)) ||
        (d->qk_norm && bind_vec(&at, SP_TN_Q_NORM, D, &l->q_norm, err)))
        return -1;
    if (d->kv_proj && (bind_mat(&at, SP_TN_K, KVH * D, Hin, &l->wk, err) ||
                       (d->v_proj && bind_mat(&at, SP_TN_V, KVH * D, Hin, &l->wv, err)) ||
                       (d->qk_norm && bind_vec(&at, SP_TN_K_NORM, D, &l->k_norm, err))))
        return -1;
    if (d->ple_dim > 0 && (bind_mat(&at, SP_TN_PLE_GATE, d->ple_dim, H, &l->ple_gate, err) ||
                           bind_mat(&at, SP_TN_PLE_PROJ, H, d->ple_dim, &l->ple_proj, err) ||
                           bind_vec(&at, SP_TN_PLE_POST_NORM, H, &l->ple_post_norm, err)))
        return -1;
    l->layer_scalar = 1.0f;
    char nm[256];
    if (tensor_name(b, layout, arch, SP_TN_LAYER_SCALAR, li, nm, sizeof nm) &&
        b->scalar(b->ctx, nm, &l->layer_scalar, err) < 0)
        return -1;
    return 0;
}

int sp_block_bind(sp_block_layer *l, sp_arch arch, int li, const sp_block_binder *b, sp_err *err) {
    return sp_block_bind_layout(l, SP_TN_MODEL, arch, li, b, err);
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
    const float *side;  /* the second input per row (block.h), side_stride floats apart */
    size_t side_stride;
    const sp_block_tree_rows *tree; /* NULL, or the one segment's rows are these nodes of a tree */
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

/* the position and cache slot of row t of segment g (pos: seg_positions' or tree_positions'
 * result when the rows are a tree) */
static void row_place(const block_rows *c, const sp_block_seg *g, int t, const int *pos, int *p, int *slot) {
    if (c->tree) {
        int node = c->tree->rows[t];
        *p = pos[node];
        *slot = g->pos0 + node;
        return;
    }
    *p = g->parent ? pos[t] : g->pos0 + t;
    int q = g->pos0 + t; /* a tree row's slot is still pos0 + t */
    *slot = g->ring ? q % g->cap : q;
}

/* the position of each node of tr: pos0 + its number of ancestors */
static void tree_positions(const sp_block_tree_rows *tr, int pos0, int *pos) {
    for (int i = 0; i < tr->n; i++) pos[i] = tr->parent[i] < 0 ? pos0 : pos[tr->parent[i]] + 1;
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
        if (c->tree) tree_positions(c->tree, g->pos0, pos);
        else if (g->parent) seg_positions(g, pos);
        for (int t = t0; t < t1; t++) {
            int p, slot;
            row_place(c, g, t, pos, &p, &slot);
            float *xr = x + (size_t)(r0 + t) * row;
            sp_rope(xr, n_heads, l->d.D, l->inv_freq, p);
            if (!cache) continue;
            memcpy(g->K + (size_t)slot * row, xr, row * sizeof(float));
            memcpy(g->V + (size_t)slot * row, c->s->v + (size_t)(r0 + t) * row, row * sizeof(float));
            if (g->store) g->store(g->store_ctx, slot, g->K + (size_t)slot * row, g->V + (size_t)slot * row);
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
    block_rows c = {.l = l, .segs = segs, .n_segs = n_segs, .R = R, .s = s};
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
        float *att = s->att + (size_t)r0 * qrow;
        if (c->tree) {
            sh.T = c->tree->n;
            sp_attention_tree_rows(pool, att, q, g->K, g->V, &sh, c->tree->parent, c->tree->rows, g->T);
        } else if (g->parent) {
            sp_attention_tree(pool, att, q, g->K, g->V, &sh, g->parent);
        } else {
            sp_attention(pool, att, q, g->K, g->V, &sh);
        }
    }
    sp_matmul(pool, s->o, s->att, R, &l->wo);
}

/* rows [lo, hi) of x: the attention norm into s->xn; for SP_ATTN_IN_EMBED_STATE the pair
 * [attn_norm(e) ; hidden_norm(x)] of each row (2H), e the row's side input, and x ← hidden_norm(x)
 * when the residual is the normed state */
static void attn_norm_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    size_t H = (size_t)d->H, o = (size_t)lo * H;
    if (d->attn_in != SP_ATTN_IN_EMBED_STATE) {
        sp_rmsnorm(c->s->xn + o, c->x + o, c->l->attn_norm, hi - lo, d->H, d->eps);
        return;
    }
    for (int t = lo; t < hi; t++) {
        float *a = c->s->xn + (size_t)t * 2 * H, *x = c->x + (size_t)t * H;
        sp_rmsnorm(a, c->side + (size_t)t * c->side_stride, c->l->attn_norm, 1, d->H, d->eps);
        sp_rmsnorm(a + H, x, c->l->hidden_norm, 1, d->H, d->eps);
        if (d->norm_residual) memcpy(x, a + H, H * sizeof(float));
    }
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

/* ---- mixture of experts (docs/TRANSFORMER.md §5a) ------------------------------------------
 * Routing is per row; then each expert runs once per forward on the rows routed to it, gathered
 * into one block. The matmul kernels give a row the same bits whatever rows share the call, and
 * each row sums its experts' outputs in expert order, so a row's result does not depend on the
 * other rows of the forward (batch invariance, as for the dense MLP). */

/* rows [lo, hi): softmax of the router logits (s->router [R, E]), the n_experts_used experts of
 * highest probability (ties: the lower index) into esel with their probabilities in ew,
 * renormalised to sum 1 when norm_topk */
static void route_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    int E = d->n_experts, k = d->n_experts_used;
    for (int t = lo; t < hi; t++) {
        float *p = c->s->router + (size_t)t * E, *w = c->s->ew + (size_t)t * k;
        int32_t *sel = c->s->esel + (size_t)t * k;
        float mx = p[0], sum = 0;
        for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < E; e++) sum += p[e] = expf(p[e] - mx);
        for (int e = 0; e < E; e++) p[e] /= sum;
        float wsum = 0;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j && !taken; i++) taken = sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[j] = best;
            wsum += w[j] = p[best];
        }
        if (d->norm_topk)
            for (int j = 0; j < k; j++) w[j] /= wsum;
        if (c->l->expert_scale)
            for (int j = 0; j < k; j++) w[j] *= c->l->expert_scale[sel[j]];
    }
}

/* rows [lo, hi) of a moe_dual layer: mo = ffn_post_norm_1(the dense output in o); the experts'
 * input ffn_norm_2(x) into xn; the router's input, the weightless norm of x times router_scale
 * times H^-1/2, into ex */
static void dual_in_rows(const block_rows *c, int lo, int hi) {
    const sp_block_layer *l = c->l;
    const sp_block_desc *d = &l->d;
    size_t H = (size_t)d->H, o = (size_t)lo * H;
    sp_rmsnorm(c->s->mo + o, c->s->o + o, l->ffn_post_norm_1, hi - lo, d->H, d->eps);
    sp_rmsnorm(c->s->xn + o, c->x + o, l->ffn_norm_2, hi - lo, d->H, d->eps);
    sp_rmsnorm(c->s->ex + o, c->x + o, NULL, hi - lo, d->H, d->eps);
    float root = 1.0f / sqrtf((float)d->H);
    for (int t = lo; t < hi; t++) {
        float *r = c->s->ex + (size_t)t * H;
        for (size_t i = 0; i < H; i++) r[i] = r[i] * l->router_scale[i] * root;
    }
}

/* rows [lo, hi) of a moe_dual layer: o = ffn_post_norm_2(the experts' sum in o) + mo */
static void dual_out_rows(const block_rows *c, int lo, int hi) {
    const sp_block_desc *d = &c->l->d;
    size_t o = (size_t)lo * d->H;
    sp_rmsnorm(c->s->o + o, c->s->o + o, c->l->ffn_post_norm_2, hi - lo, d->H, d->eps);
    sp_add(c->s->o + o, c->s->mo + o, (size_t)(hi - lo) * d->H);
}

/* The rows routed to expert e (into s->erow, their weights into wr); returns how many. */
static int expert_rows(const block_rows *c, int e, float *wr) {
    int k = c->l->d.n_experts_used, n = 0;
    for (int t = 0; t < c->R; t++)
        for (int j = 0; j < k; j++)
            if (c->s->esel[(size_t)t * k + j] == e) {
                c->s->erow[n] = t;
                wr[n++] = c->s->ew[(size_t)t * k + j];
            }
    return n;
}

/* One row (R = 1) with its k experts' gate and up in one matmul call (one pass, one quantization
 * of the row), then each down; the same operations and summation order as moe_mlp's expert
 * loop, so the row gets the bits it gets in any block (the matmul kernels are batch-invariant). */
static void moe_mlp_row(sp_pool *pool, block_rows *c) {
    const sp_block_layer *l = c->l;
    const sp_block_desc *d = &l->d;
    const sp_block_scratch *s = c->s;
    int H = d->H, I = d->Ie, k = d->n_experts_used;
    int32_t sel[SP_MATMUL_MULTI_MAX / 2];
    float w[SP_MATMUL_MULTI_MAX / 2];
    for (int j = 0; j < k; j++) sel[j] = s->esel[j], w[j] = s->ew[j];
    for (int a = 1; a < k; a++) /* experts in increasing order, as the block loop adds them */
        for (int b = a; b > 0 && sel[b] < sel[b - 1]; b--) {
            int32_t ts = sel[b]; sel[b] = sel[b - 1]; sel[b - 1] = ts;
            float tw = w[b]; w[b] = w[b - 1]; w[b - 1] = tw;
        }
    const sp_mat *gu[SP_MATMUL_MULTI_MAX];
    float *out[SP_MATMUL_MULTI_MAX];
    for (int j = 0; j < k; j++) {
        gu[2 * j] = &l->e_gate[sel[j]], gu[2 * j + 1] = &l->e_up[sel[j]];
        out[2 * j] = s->eg + (size_t)j * I, out[2 * j + 1] = s->eu + (size_t)j * I;
    }
    sp_matmul_multi(pool, out, s->xn, 1, gu, 2 * k);
    if (d->act == SP_ACT_GELU_TANH) sp_gelu_tanh_mul(s->eg, s->eg, s->eu, (size_t)k * I);
    else sp_silu_mul(s->eg, s->eg, s->eu, (size_t)k * I);
    memset(s->o, 0, (size_t)H * sizeof(float));
    for (int j = 0; j < k; j++) {
        sp_matmul(pool, s->ey, s->eg + (size_t)j * I, 1, &l->e_down[sel[j]]);
        for (int h = 0; h < H; h++) s->o[h] += w[j] * s->ey[h];
    }
    if (s->moe_touched) *s->moe_touched += k;
}

/* the MoE MLP on s->xn [R, H] → s->o [R, H]: Σ over the row's experts (in expert order) of
 * w · down(act(gate(x)) · up(x)) */
static void moe_mlp(sp_pool *pool, block_rows *c) {
    const sp_block_layer *l = c->l;
    const sp_block_desc *d = &l->d;
    const sp_block_scratch *s = c->s;
    int H = d->H, I = d->Ie, R = c->R;
    SP_ASSERT(s->ex && s->ey && s->router && s->ew && s->esel && s->erow && (!d->moe_dual || s->mo));
    sp_matmul(pool, s->router, d->moe_dual ? s->ex : s->xn, R, &l->router);
    block_rows_run(pool, c, route_rows);
    if (R == 1 && s->eg && s->eu && 2 * d->n_experts_used <= SP_MATMUL_MULTI_MAX) {
        moe_mlp_row(pool, c);
        return;
    }
    memset(s->o, 0, (size_t)R * H * sizeof(float));
    float *wr = s->router; /* the router probabilities are no longer needed: [R] weights of one expert's rows */
    for (int e = 0; e < d->n_experts; e++) {
        int n = expert_rows(c, e, wr);
        if (!n) continue;
        if (s->moe_touched) ++*s->moe_touched;
        for (int i = 0; i < n; i++)
            memcpy(s->ex + (size_t)i * H, s->xn + (size_t)s->erow[i] * H, (size_t)H * sizeof(float));
        const sp_mat *gu[2] = {&l->e_gate[e], &l->e_up[e]};
        float *gu_out[2] = {s->g, s->u};
        sp_matmul_multi(pool, gu_out, s->ex, n, gu, 2);
        if (d->act == SP_ACT_GELU_TANH) sp_gelu_tanh_mul(s->g, s->g, s->u, (size_t)n * I);
        else sp_silu_mul(s->g, s->g, s->u, (size_t)n * I);
        sp_matmul(pool, s->ey, s->g, n, &l->e_down[e]);
        for (int i = 0; i < n; i++) {
            float *o = s->o + (size_t)s->erow[i] * H, *y = s->ey + (size_t)i * H;
            for (int h = 0; h < H; h++) o[h] += wr[i] * y[h];
        }
    }
}

/* the layer on c's rows (sp_block_forward, sp_block_forward_tree_rows) */
static void block_run(sp_pool *pool, block_rows *c) {
    const sp_block_layer *l = c->l;
    const sp_block_desc *d = &l->d;
    const sp_block_scratch *s = c->s;
    int H = d->H, R = c->R;
    size_t RH = (size_t)R * H;
    float *x = c->x;
    SP_ASSERT(d->attn_in != SP_ATTN_IN_EMBED_STATE || (d->ple_dim == 0 && c->side));

    block_rows_run(pool, c, attn_norm_rows);
    attention(pool, c);
    block_rows_run(pool, c, attn_out_rows);

    if (!d->n_experts || d->moe_dual) {
        const sp_mat *gu[2] = {&l->w_gate, &l->w_up};
        float *gu_out[2] = {s->g, s->u};
        sp_matmul_multi(pool, gu_out, s->xn, R, gu, 2);
        block_rows_run(pool, c, act_rows);
        sp_matmul(pool, s->o, s->g, R, &l->w_down);
    }
    if (d->moe_dual) block_rows_run(pool, c, dual_in_rows);
    if (d->n_experts) moe_mlp(pool, c);
    if (d->moe_dual) block_rows_run(pool, c, dual_out_rows);
    block_rows_run(pool, c, mlp_out_rows);

    if (d->ple_dim > 0) { /* gemma4 per-layer input */
        int P = d->ple_dim;
        sp_matmul(pool, s->g, x, R, &l->ple_gate); /* [R, P] */
        for (int t = 0; t < R; t++)
            sp_gelu_tanh_mul(s->g + (size_t)t * P, s->g + (size_t)t * P, c->side + (size_t)t * c->side_stride,
                             (size_t)P);
        sp_matmul(pool, s->o, s->g, R, &l->ple_proj);
        sp_rmsnorm(s->o, s->o, l->ple_post_norm, R, H, d->eps);
        sp_add(x, s->o, RH);
    }
    if (l->layer_scalar != 1.0f)
        for (size_t i = 0; i < RH; i++) x[i] *= l->layer_scalar;
}

void sp_block_forward(sp_pool *pool, const sp_block_layer *l, float *x, int R, const sp_block_seg *segs, int n_segs,
                      const float *side, size_t side_stride, const sp_block_scratch *s) {
    block_rows c = {.l = l, .segs = segs, .n_segs = n_segs, .R = R, .s = s, .x = x, .side = side,
                    .side_stride = side_stride};
    block_run(pool, &c);
}

void sp_block_forward_tree_rows(sp_pool *pool, const sp_block_layer *l, float *x, int R, const sp_block_seg *seg,
                                const sp_block_tree_rows *tr, const float *side, size_t side_stride,
                                const sp_block_scratch *s) {
    SP_ASSERT(seg->T == R && !seg->parent && !seg->ring && tr->n <= SP_ATTN_TREE_MAX && R <= tr->n);
    block_rows c = {.l = l, .segs = seg, .n_segs = 1, .R = R, .s = s, .x = x, .side = side,
                    .side_stride = side_stride, .tree = tr};
    block_run(pool, &c);
}
