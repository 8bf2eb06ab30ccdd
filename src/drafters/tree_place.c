/* tree_place.c — placing a drafter's token tree (see tree_place.h, docs/TREE.md §2).
 *
 * Each placed node below the depth limit gets up to k candidate children from its draft
 * distribution (the drafter's logits for it):
 *   greedy   — the top-k of softmax(Z), most probable first;
 *   sampling — k draws without replacement from q = the sampler's processing of Z (q is
 *              reported for the node; the verifier's rule needs exactly these draws, in order).
 * Candidates are placed one at a time until the node budget is spent (a node's distribution is
 * computed only once one of its children could be the next placed: leaves cost nothing):
 *   dynamic — best first by score = log P(parent's path) + log p_(rank) where p_(rank) is the
 *             rank-th largest probability of the parent's distribution (for greedy that is the
 *             candidate's own probability; it never depends on a sampled child's identity, so
 *             whether a draw is kept does not depend on the draw — what the sampling rule needs);
 *   static  — the top-1 chain to the depth limit first, then rank-2.. candidates of each depth
 *             (shallowest first) as leaves beside it.
 * A node's children are always a prefix of its candidate list, in list order. With the engine's
 * tree constraint (drafter.h) a node's logits are masked before its candidates are chosen. */
#include "drafters/tree_place.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the k largest probabilities of p[V] in decreasing order (lowest index first on ties) → idx, val */
static int top_k(const float *p, int V, int k, int32_t *idx, float *val) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        if (!(p[i] > 0)) continue;
        if (n == k && !(p[i] > val[k - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && p[i] > val[j - 1]) {
            val[j] = val[j - 1], idx[j] = idx[j - 1];
            j--;
        }
        val[j] = p[i], idx[j] = i;
    }
    return n;
}

static void softmax_into(float *p, const float *z, int V) {
    float m = -INFINITY;
    for (int i = 0; i < V; i++)
        if (z[i] > m) m = z[i];
    double s = 0;
    for (int i = 0; i < V; i++) s += p[i] = expf(z[i] - m);
    float inv = (float)(1.0 / s);
    for (int i = 0; i < V; i++) p[i] *= inv;
}

/* the candidates of node v (its children's distribution); qrow: node v's q row when sampling */
static int prepare(const tp_env *env, tp_node *nodes, int n, int v, int k, float *Z, float *p, float *work,
                   float *qrow, sp_err *err) {
    tp_node *x = &nodes[v];
    int V = env->V;
    x->ready = 1;
    if (env->logits(env->ctx, nodes, n, v, Z, err)) return -1;
    if (env->tc) { /* only the tokens the constraint allows after v's path can be its children */
        int rc = env->tc->node(env->tc->ctx, v, x->parent, x->tok, Z, V, err);
        if (rc < 0) return -1;
        if (rc > 0) return x->nc = 0;
    }
    int32_t idx[TP_MAX_K];
    float val[TP_MAX_K];
    if (!qrow) { /* greedy verification (no q asked for): the top-k, whatever the drafter's params */
        softmax_into(p, Z, V);
        x->nc = top_k(p, V, k, idx, val);
        for (int i = 0; i < x->nc; i++) x->cand[i] = idx[i];
    } else {
        if (sp_sampler_probs(env->smp, qrow, Z, err)) return -1;
        x->nc = top_k(qrow, V, k, idx, val); /* how many draws can succeed, and the score proxies */
        memcpy(work, qrow, sizeof(float) * (size_t)V);
        for (int i = 0; i < x->nc; i++) { /* draws without replacement, each from its own counter */
            uint64_t ctr = env->pos << 13 | (uint64_t)(v + 1) << 6 | (uint64_t)i;
            int t = sp_sample_probs(work, V, sp_rng_uniform(env->seed, SP_RNG_STREAM_DRAFT, ctr));
            if (t < 0) {
                x->nc = i;
                break;
            }
            x->cand[i] = t;
            work[t] = 0.0f;
        }
    }
    for (int i = 0; i < x->nc; i++) x->cscore[i] = x->logp + log((double)val[i]);
    return 0;
}

int sp_tp_place(const tp_env *env, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, int *max_depth,
             sp_err *err) {
    int V = env->V, k = sh->k < TP_MAX_K ? sh->k : TP_MAX_K, budget = sh->nodes;
    *max_depth = 0;
    if (env->depth <= 0 || budget <= 0) return 0;
    if (budget > SP_TREE_MAX_NODES) budget = SP_TREE_MAX_NODES;
    if (env->greedy && q)
        return sp_err_set(err, "tree: the drafter was made for greedy drafts but the request samples (q asked for)");
    float *Z = malloc(sizeof(float) * (size_t)V * 3);
    if (!Z) return sp_err_set(err, "tree: out of memory");
    float *p = Z + V, *work = Z + 2 * (size_t)V;
    tp_node nodes[SP_TREE_MAX_NODES + 1];
    nodes[0] = (tp_node){.tok = env->pending, .parent = -1, .depth = 0, .logp = 0};
    int n = 1, rc = -1;
    if (prepare(env, nodes, n, 0, k, Z, p, work, q, err)) goto out;
    while (n - 1 < budget) {
        int bv = -1;
        double best = -INFINITY;
        for (int v = 0; v < n; v++) {
            tp_node *x = &nodes[v];
            double sc;
            if (!x->ready) { /* dynamic: its children score at most its own log P, so prepare it lazily */
                if (x->depth >= env->depth) continue;
                sc = x->logp;
            } else if (x->next >= x->nc) {
                continue;
            } else if (sh->kind == SP_TREE_STATIC) { /* the chain (rank 0) first, then siblings by depth */
                if (x->rank > 0 && v > 0) continue;
                sc = x->next == 0 ? 1e9 - x->depth : -(double)x->depth * TP_MAX_K - x->next;
            } else {
                sc = x->cscore[x->next];
            }
            if (bv < 0 || sc > best) best = sc, bv = v;
        }
        if (bv < 0) break;
        tp_node *pv = &nodes[bv];
        if (!pv->ready) {
            if (prepare(env, nodes, n, bv, k, Z, p, work, q ? q + (size_t)bv * V : NULL, err)) goto out;
            continue;
        }
        int c = pv->next++;
        tp_node *ch = &nodes[n];
        *ch = (tp_node){.tok = pv->cand[c], .parent = bv, .depth = pv->depth + 1, .rank = c, .logp = pv->cscore[c]};
        tok[n - 1] = ch->tok;
        parent[n - 1] = bv - 1;
        if (ch->depth > *max_depth) *max_depth = ch->depth;
        n++;
        if (sh->kind == SP_TREE_STATIC) { /* the chain's nodes at once; siblings are leaves */
            ch->ready = 1;
            if (ch->depth < env->depth && c == 0 &&
                prepare(env, nodes, n, n - 1, k, Z, p, work, q ? q + (size_t)(n - 1) * V : NULL, err))
                goto out;
        }
    }
    rc = n - 1;
out:
    free(Z);
    return rc;
}
