/* attention_tree.c — tree-masked attention: the verify forward of a token tree (docs/TREE.md).
 *
 * T tree rows follow a prefix of pos0 cached positions. Row t has a parent parent[t] < t (or -1:
 * it hangs off the prefix); depth(t) = 0 for such a root, depth(parent) + 1 otherwise. Row t's
 * query and key are rotated for position pos0 + depth(t) (the caller's RoPE); its K/V rows sit in
 * the cache slot of position pos0 + t. For each (row t, query head h) independently:
 *   keys, in this order: prefix positions lo .. pos0-1, lo = window > 0 ? max(0, pos0 + depth(t)
 *   − window + 1) : 0; then the rows of t's root path (its ancestors and t) in increasing row
 *   order, those with depth(t) − depth(a) < window;
 *   s_k = canonical_dot(q, k_k) · scale;  m = max s_k;  e_k = exp(s_k − m);
 *   sum = Σ e_k and acc = Σ e_k · v_k in key order;  out = acc / sum.
 * That is the sequence of operations attention.c performs for a chain row at depth(t) whose
 * earlier rows are t's ancestors (the same positions in the same order), through the same tier
 * pieces (sp_attn_ops). So with the same K/V rows the output is bit-identical to the chain's,
 * whatever the tree around t, the thread count or t's index — what keeps greedy tree
 * verification bit-identical to plain decoding.
 *
 * Work unit: one row × up to 8 query heads of one KV head; threads claim units from a counter.
 * Scores live in a 128 KB stack buffer; a row with more keys than a tile takes two passes (the
 * first finds the maxima, the second recomputes each tile's scores: same bits), as attention.c. */
#include <stdatomic.h>

#include "core/prof.h"
#include "kernels_internal.h"

#define TREE_BUF 32768 /* floats of score scratch per unit */
#define TREE_MAX_HS 8  /* query heads per unit */
#define TREE_QK_ROWS 4
#define TREE_QK_KEYS 6
#define TREE_PV_ROWS 3

typedef struct {
    float *out;
    const float *q, *K, *V;
    const sp_attn_shape *s;
    const int32_t *parent;
    const int *depth;
    const int32_t *rows; /* the rows computed (q / out row i is tree row rows[i]), or NULL: all */
    int n_rows;
    const sp_attn_ops *ops;
    int hs, nsub; /* heads per unit, units per KV head */
    atomic_int next_unit;
} tree_ctx;

/* one unit's key list: npre prefix positions from lo, then na tree rows anc[] */
typedef struct {
    int t, qi, kvh, h0, nh; /* tree row t, read from q row qi and written to out row qi */
    int lo, npre, na;
    int anc[SP_ATTN_TREE_MAX];
} tree_unit;

static inline const float *key_row(const tree_ctx *c, const tree_unit *u, const float *KV, int k) {
    int p = k < u->npre ? u->lo + k : c->s->pos0 + u->anc[k - u->npre];
    return KV + sp_kv_off(c->s, p, u->kvh);
}

/* scores of keys k0 .. k1-1 into buf[i·ld + k − k0] for the unit's heads i; m[i] = max */
static void tree_scores(const tree_ctx *c, const tree_unit *u, int k0, int k1, float *buf, int ld, float *m) {
    const sp_attn_shape *s = c->s;
    for (int k = k0; k < k1;) {
        int nk = k1 - k >= TREE_QK_KEYS ? TREE_QK_KEYS : 1;
        const float *kr[TREE_QK_KEYS];
        for (int x = 0; x < nk; x++) kr[x] = key_row(c, u, c->K, k + x);
        for (int i0 = 0; i0 < u->nh; i0 += TREE_QK_ROWS) {
            int n = u->nh - i0 < TREE_QK_ROWS ? u->nh - i0 : TREE_QK_ROWS;
            const float *q[TREE_QK_ROWS];
            float *e[TREE_QK_ROWS], mm[TREE_QK_ROWS];
            for (int x = 0; x < n; x++) {
                q[x] = c->q + ((size_t)u->qi * s->NH + u->h0 + i0 + x) * s->D;
                e[x] = buf + (size_t)(i0 + x) * ld;
                mm[x] = m[i0 + x];
            }
            sp_attn_qk_fn f = nk == TREE_QK_KEYS ? c->ops->qk_wide[n - 1] : c->ops->qk_narrow[n - 1];
            f(q, kr, s->D, s->scale, e, k - k0, mm);
            for (int x = 0; x < n; x++) m[i0 + x] = mm[x];
        }
        k += nk;
    }
}

/* o += e·V over keys k0 .. k1-1 (positions a .. b-1 of the cache for each run of them) */
static void tree_pv(const tree_ctx *c, const tree_unit *u, int k0, int k1, float *buf, int ld) {
    const sp_attn_shape *s = c->s;
    const int D = s->D;
    for (int d0 = 0; d0 < D; d0 += 128) {
        int dn = D - d0 < 128 ? D - d0 : 128;
        for (int i0 = 0; i0 < u->nh; i0 += TREE_PV_ROWS) {
            int n = u->nh - i0 < TREE_PV_ROWS ? u->nh - i0 : TREE_PV_ROWS;
            float *o[TREE_PV_ROWS];
            const float *e[TREE_PV_ROWS];
            for (int x = 0; x < n; x++) {
                o[x] = c->out + ((size_t)u->qi * s->NH + u->h0 + i0 + x) * D;
                e[x] = buf + (size_t)(i0 + x) * ld;
            }
            /* the prefix keys of the tile are consecutive positions: one call */
            int a = k0, b = k1 < u->npre ? k1 : u->npre;
            if (a < b) c->ops->pv[n - 1](c->V, s, u->kvh, u->lo + a, u->lo + b, u->lo + k0, o, e, d0, dn);
            /* tree rows: one position each, in increasing order */
            for (int k = a > u->npre ? a : u->npre; k < k1; k++) {
                int p = s->pos0 + u->anc[k - u->npre];
                c->ops->pv[n - 1](c->V, s, u->kvh, p, p + 1, p - (k - k0), o, e, d0, dn);
            }
        }
    }
}

static void tree_run_unit(const tree_ctx *c, tree_unit *u) {
    const sp_attn_shape *s = c->s;
    const int D = s->D, d = c->depth[u->t], pos = s->pos0 + d;
    u->lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
    u->npre = s->pos0 > u->lo ? s->pos0 - u->lo : 0;
    u->na = 0;
    for (int a = u->t; a >= 0; a = c->parent[a])
        if (s->window <= 0 || d - c->depth[a] < s->window) u->anc[u->na++] = a;
    for (int i = 0, j = u->na - 1; i < j; i++, j--) { /* root first */
        int x = u->anc[i];
        u->anc[i] = u->anc[j];
        u->anc[j] = x;
    }
    const int nk = u->npre + u->na, tile = TREE_BUF / u->nh / 16 * 16, one_tile = nk <= tile;
    float buf[TREE_BUF], m[TREE_MAX_HS], sum[TREE_MAX_HS];
    for (int i = 0; i < u->nh; i++) m[i] = -INFINITY, sum[i] = 0.0f;
    for (int k0 = 0; k0 < nk; k0 += tile) tree_scores(c, u, k0, k0 + tile < nk ? k0 + tile : nk, buf, tile, m);
    for (int i = 0; i < u->nh; i++) {
        float *o = c->out + ((size_t)u->qi * s->NH + u->h0 + i) * D;
        for (int x = 0; x < D; x++) o[x] = 0.0f;
    }
    for (int k0 = 0; k0 < nk; k0 += tile) {
        int k1 = k0 + tile < nk ? k0 + tile : nk;
        if (!one_tile) {
            float mdummy[TREE_MAX_HS];
            for (int i = 0; i < u->nh; i++) mdummy[i] = -INFINITY;
            tree_scores(c, u, k0, k1, buf, tile, mdummy);
        }
        for (int i = 0; i < u->nh; i++) {
            float *e = buf + (size_t)i * tile;
            c->ops->exp(e, k1 - k0, m[i]);
            for (int k = 0; k < k1 - k0; k++) sum[i] += e[k];
        }
        tree_pv(c, u, k0, k1, buf, tile);
    }
    for (int i = 0; i < u->nh; i++) {
        float *o = c->out + ((size_t)u->qi * s->NH + u->h0 + i) * D;
        for (int x = 0; x < D; x++) o[x] = o[x] / sum[i];
    }
}

static void tree_task(void *arg, int i, int n) {
    (void)i, (void)n;
    tree_ctx *c = arg;
    const sp_attn_shape *s = c->s;
    const int G = s->NH / s->KVH, per_t = s->KVH * c->nsub;
    for (;;) {
        int x = atomic_fetch_add_explicit(&c->next_unit, 1, memory_order_relaxed);
        if (x >= c->n_rows * per_t) return;
        int qi = x / per_t, kvh = x % per_t / c->nsub, sg = x % c->nsub;
        int h0 = sg * c->hs, h1 = h0 + c->hs < G ? h0 + c->hs : G;
        tree_unit u = {.t = c->rows ? c->rows[qi] : qi, .qi = qi, .kvh = kvh, .h0 = kvh * G + h0, .nh = h1 - h0};
        tree_run_unit(c, &u);
    }
}

/* depth[t] from parent[]; the caller checked parent[t] < t */
static void tree_depths(const int32_t *parent, int T, int *depth) {
    for (int t = 0; t < T; t++) depth[t] = parent[t] < 0 ? 0 : depth[parent[t]] + 1;
}

static void tree_run(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                     const sp_attn_shape *s, const int32_t *parent, const int32_t *rows, int n_rows,
                     sp_cpu_tier tier) {
    SP_ASSERT(s->KVH > 0 && s->NH % s->KVH == 0 && s->T <= SP_ATTN_TREE_MAX && !s->noncausal);
    if (!rows) n_rows = s->T;
    if (s->T <= 0 || n_rows <= 0) return;
    int depth[SP_ATTN_TREE_MAX];
    for (int t = 0; t < s->T; t++) SP_ASSERT(parent[t] < t);
    for (int i = 0; rows && i < n_rows; i++) SP_ASSERT(rows[i] >= 0 && rows[i] < s->T);
    tree_depths(parent, s->T, depth);
    const int G = s->NH / s->KVH, nthr = sp_pool_size(pool);
    int hs = G < TREE_MAX_HS ? G : TREE_MAX_HS;
    while (hs > 1 && n_rows * s->KVH * ((G + hs - 1) / hs) < 2 * nthr) hs = (hs + 1) / 2;
    tree_ctx c = {out, q, K, V, s, parent, depth, rows, n_rows, sp_attn_ops_for(tier), hs, (G + hs - 1) / hs, 0};
    atomic_init(&c.next_unit, 0);
    sp_pool_run(pool, tree_task, &c);
}

void sp_attention_tree(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                       const sp_attn_shape *s, const int32_t *parent) {
    int prof = sp_prof_enter_kernel(SP_PROF_ATTN);
    tree_run(pool, out, q, K, V, s, parent, NULL, 0, sp_cpu_level());
    sp_prof_leave(prof);
}

void sp_attention_tree_rows(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                            const sp_attn_shape *s, const int32_t *parent, const int32_t *rows, int n_rows) {
    int prof = sp_prof_enter_kernel(SP_PROF_ATTN);
    tree_run(pool, out, q, K, V, s, parent, rows, n_rows, sp_cpu_level());
    sp_prof_leave(prof);
}

void sp_attention_tree_tier(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                            const sp_attn_shape *s, const int32_t *parent, sp_cpu_tier tier) {
    tree_run(pool, out, q, K, V, s, parent, NULL, 0, tier);
}

void sp_attention_tree_ref(float *out, const float *q, const float *K, const float *V, const sp_attn_shape *s,
                           const int32_t *parent) {
    const int D = s->D, group = s->NH / s->KVH;
    int depth[SP_ATTN_TREE_MAX];
    SP_ASSERT(s->T <= SP_ATTN_TREE_MAX && D <= 1024);
    tree_depths(parent, s->T, depth);
    for (int t = 0; t < s->T; t++)
        for (int h = 0; h < s->NH; h++) {
            const float *qh = q + ((size_t)t * s->NH + h) * D;
            /* visible positions: the prefix window, then t's root path */
            int pos[SP_ATTN_TREE_MAX + 1], np = 0, d = depth[t];
            int lo = s->window > 0 && s->pos0 + d - s->window + 1 > 0 ? s->pos0 + d - s->window + 1 : 0;
            for (int a = t; a >= 0; a = parent[a])
                if (s->window <= 0 || d - depth[a] < s->window) pos[np++] = s->pos0 + a;
            double m = -INFINITY, sum = 0, acc[1024] = {0};
            for (int pass = 0; pass < 2; pass++)
                for (int k = lo < s->pos0 ? lo : s->pos0; k < s->pos0 + np; k++) {
                    int p = k < s->pos0 ? k : pos[k - s->pos0];
                    const float *kr = K + sp_kv_off(s, p, h / group), *vr = V + sp_kv_off(s, p, h / group);
                    double x = 0;
                    for (int i = 0; i < D; i++) x += (double)qh[i] * kr[i];
                    x *= s->scale;
                    if (pass == 0) {
                        if (x > m) m = x;
                        continue;
                    }
                    double e = exp(x - m);
                    sum += e;
                    for (int i = 0; i < D; i++) acc[i] += e * vr[i];
                }
            float *o = out + ((size_t)t * s->NH + h) * D;
            for (int i = 0; i < D; i++) o[i] = (float)(acc[i] / sum);
        }
}
