/* dflash_tree.c — token-tree proposals of DFlash / DSpark drafters (docs/TREE.md §2).
 *
 * One block forward gives every depth's draft logits; a node's children at depth j come from the
 * logits of slot j with the Markov head conditioned on the node's own token (DSpark: evaluated per
 * branch, the rnn head's state carried along each path; z-lab DFlash: the same distribution for
 * every node of a depth). Each placed node below the depth limit gets up to k candidate children:
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
 * A node's children are always a prefix of its candidate list, in list order.
 * Repetition penalties are not applied to tree drafts (they only steer the guess: the target's
 * rule applies them, and q is reported as drawn). The confidence head and schedulers are chains-only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "drafters/dflash_internal.h"

#define TREE_MAX_K 16

typedef struct {
    int32_t tok;
    int parent, depth, rank; /* rank: index among its parent's children */
    double logp;             /* log P of its path under the drafter */
    int ready;               /* its candidates are prepared (placed nodes wait until first needed) */
    int nc, next;            /* candidates prepared, next one to place */
    int32_t cand[TREE_MAX_K];
    double cscore[TREE_MAX_K]; /* placement score of each candidate */
} tnode;

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

/* the candidates of node v (its distribution at depth j = depth(v) + 1) */
static int prepare(sp_drafter *d, const df_tree_env *env, tnode *nodes, int v, int k, float *state, float *Z,
                   float *p, float *work, float *qrow, sp_err *err) {
    tnode *n = &nodes[v];
    int V = env->V;
    n->ready = 1;
    df_tree_logits(d, n->depth + 1, n->tok, state, Z);
    int32_t idx[TREE_MAX_K];
    float val[TREE_MAX_K];
    if (env->greedy) {
        softmax_into(p, Z, V);
        n->nc = top_k(p, V, k, idx, val);
        for (int i = 0; i < n->nc; i++) n->cand[i] = idx[i];
    } else {
        if (sp_sampler_probs(env->smp, qrow, Z, err)) return -1;
        n->nc = top_k(qrow, V, k, idx, val); /* how many draws can succeed, and the score proxies */
        memcpy(work, qrow, sizeof(float) * (size_t)V);
        for (int i = 0; i < n->nc; i++) { /* draws without replacement, each from its own counter */
            uint64_t ctr = env->pos << 13 | (uint64_t)(v + 1) << 6 | (uint64_t)i;
            int x = sp_sample_probs(work, V, sp_rng_uniform(env->seed, SP_RNG_STREAM_DRAFT, ctr));
            if (x < 0) {
                n->nc = i;
                break;
            }
            n->cand[i] = x;
            work[x] = 0.0f;
        }
    }
    for (int i = 0; i < n->nc; i++) n->cscore[i] = n->logp + log((double)val[i]);
    return 0;
}

int df_propose_tree(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, sp_err *err) {
    df_tree_env env;
    if (df_tree_block(d, sh->max_depth, &env, err)) return -1;
    int V = env.V, k = sh->k < TREE_MAX_K ? sh->k : TREE_MAX_K, budget = sh->nodes;
    if (env.depth <= 0 || budget <= 0) {
        df_tree_done(d, 0, 0);
        return 0;
    }
    if (budget > SP_TREE_MAX_NODES) budget = SP_TREE_MAX_NODES;
    if (!env.greedy && !q) return sp_err_set(err, "dflash tree: sampling needs q rows");
    int S = env.state_n;
    float *Z = malloc(sizeof(float) * (size_t)V * 3), *state = S ? calloc((size_t)(budget + 1) * S, sizeof(float)) : NULL;
    if (!Z || (S && !state)) {
        free(Z);
        free(state);
        return sp_err_set(err, "dflash tree: out of memory");
    }
    float *p = Z + V, *work = Z + 2 * (size_t)V;
    tnode nodes[SP_TREE_MAX_NODES + 1]; /* 0 = the pending token, i + 1 = draft node i */
    nodes[0] = (tnode){.tok = env.pending, .parent = -1, .depth = 0, .logp = 0};
    int n = 1, rc = -1, max_depth = 0;
    /* a node's state row is its children's input: the root's is zero (a fresh rnn state) */
    if (prepare(d, &env, nodes, 0, k, S ? state : NULL, Z, p, work, q, err)) goto out;
    while (n - 1 < budget) {
        int bv = -1;
        double best = -INFINITY;
        for (int v = 0; v < n; v++) {
            tnode *x = &nodes[v];
            double sc;
            if (!x->ready) { /* dynamic: its children score at most its own log P, so prepare it lazily */
                if (x->depth >= env.depth) continue;
                sc = x->logp;
            } else if (x->next >= x->nc) {
                continue;
            } else if (sh->kind == SP_TREE_STATIC) { /* the chain (rank 0) first, then siblings by depth */
                if (x->rank > 0 && v > 0) continue;
                sc = x->next == 0 ? 1e9 - x->depth : -(double)x->depth * TREE_MAX_K - x->next;
            } else {
                sc = x->cscore[x->next];
            }
            if (bv < 0 || sc > best) best = sc, bv = v;
        }
        if (bv < 0) break;
        tnode *pv = &nodes[bv];
        if (!pv->ready) {
            float *st = S ? state + (size_t)bv * S : NULL;
            if (prepare(d, &env, nodes, bv, k, st, Z, p, work, q ? q + (size_t)bv * V : NULL, err)) goto out;
            continue;
        }
        int c = pv->next++;
        tnode *ch = &nodes[n];
        *ch = (tnode){.tok = pv->cand[c], .parent = bv, .depth = pv->depth + 1, .rank = c, .logp = pv->cscore[c]};
        tok[n - 1] = ch->tok;
        parent[n - 1] = bv - 1;
        if (ch->depth > max_depth) max_depth = ch->depth;
        if (S) memcpy(state + (size_t)n * S, state + (size_t)bv * S, sizeof(float) * (size_t)S);
        if (sh->kind == SP_TREE_STATIC) { /* the chain's nodes at once; siblings are leaves */
            ch->ready = 1;
            if (ch->depth < env.depth && c == 0) {
                float *st = S ? state + (size_t)n * S : NULL;
                if (prepare(d, &env, nodes, n, k, st, Z, p, work, q ? q + (size_t)n * V : NULL, err)) goto out;
            }
        }
        n++;
    }
    df_tree_done(d, max_depth, n - 1);
    rc = n - 1;
out:
    free(Z);
    free(state);
    return rc;
}
