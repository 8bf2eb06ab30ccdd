/* tree.c — the token-tree phases of a speculative round (see tree.h, docs/TREE.md): propose and
 * check a tree, walk it on the tree-masked forward's logits, keep the accepted root path.
 *
 * Rows of the verify forward: row 0 is the pending token, row i + 1 is draft node i (parents
 * before children). The walk starts at row 0 and moves to a child while the rule accepts one; the
 * rows it visited are the accepted root path, kept in the target cache and gathered (taps /
 * hidden) for the drafter's commit(). */
#include "decode/tree.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/prof.h"

int sp_tree_propose(sp_tree *t, sp_drafter *d, const sp_tree_shape *sh, int32_t pending, int V, float *q, sp_err *err) {
    int32_t ptok[SP_TREE_MAX_NODES], ppar[SP_TREE_MAX_NODES];
    int n = 0;
    t->n = t->depth = 0;
    if (sh->nodes > 0 && sh->max_depth > 0) {
        n = d->propose_tree(d, sh, ptok, ppar, q, err);
        if (n < 0) return -1;
        if (n > sh->nodes) return sp_err_set(err, "tree: drafter %s proposed %d nodes (asked for %d)", d->name, n, sh->nodes);
    }
    /* rows: 0 = pending, i + 1 = node i; check what the drafter gave before forwarding it */
    t->tok[0] = pending;
    t->parent[0] = -1;
    int depth[SP_TREE_MAX_NODES + 1];
    depth[0] = 0;
    for (int i = 0; i < n; i++) {
        if (ptok[i] < 0 || ptok[i] >= V)
            return sp_err_set(err, "tree: drafter %s proposed token %d outside the vocabulary", d->name, ptok[i]);
        if (ppar[i] < -1 || ppar[i] >= i)
            return sp_err_set(err, "tree: drafter %s gave node %d the parent %d (expected -1 .. %d)", d->name, i,
                              ppar[i], i - 1);
        t->tok[i + 1] = ptok[i];
        t->parent[i + 1] = ppar[i] + 1;
        depth[i + 1] = depth[ppar[i] + 1] + 1;
        if (depth[i + 1] > sh->max_depth)
            return sp_err_set(err, "tree: drafter %s placed node %d at depth %d (at most %d)", d->name, i,
                              depth[i + 1], sh->max_depth);
        if (depth[i + 1] > t->depth) t->depth = depth[i + 1];
    }
    t->n = n;
    return 0;
}

/* q ← q with x removed, renormalised; 0 when nothing is left */
static int q_remove(float *q, int V, int32_t x) {
    q[x] = 0.0f;
    double s = 0;
    for (int i = 0; i < V; i++) s += q[i];
    if (!(s > 0)) return 0;
    float inv = (float)(1.0 / s);
    for (int i = 0; i < V; i++) q[i] *= inv;
    return 1;
}

int sp_tree_verify_node(float *p, float *q, int V, const int32_t *x, int n, const double *u_acc, double u_res,
                        int broken, int *child) {
    for (int j = 0; j < n; j++) {
        double px = p[x[j]], qx = q[x[j]];
        if (qx > 0 && u_acc[j] * qx < px) { /* accept with probability min(1, p/q) */
            *child = j;
            return x[j];
        }
        /* rejected: the target's remaining mass is normalize(max(0, p − q)); the next child was
         * drawn from q without x[j] */
        if (!broken) sp_sample_residual_probs(p, p, q, V);
        if (j + 1 < n && !q_remove(q, V, x[j])) break;
    }
    *child = -1;
    return sp_sample_probs(p, V, u_res);
}

/* children of row r in proposal order → x[], row ids */
static int children(const sp_tree *t, int r, int32_t *x, int *rows) {
    int n = 0;
    for (int i = r + 1; i <= t->n; i++)
        if (t->parent[i] == r) x[n] = t->tok[i], rows[n++] = i;
    return n;
}

/* The decision at row r: the emitted token, *c the accepted child's index among x[0..nc) or -1;
 * -1 when the distribution was empty, -2 on a sampler error (err set). */
static int32_t walk_node(const sp_tree_walk_in *in, int r, const int32_t *x, int nc, uint64_t tpos, int *c,
                         sp_err *err) {
    const int V = in->V;
    float *lg = in->logits + (size_t)r * V;
    *c = -1;
    if (in->greedy) {
        int32_t next = sp_sample_argmax(lg, V);
        for (int j = 0; j < nc && *c < 0; j++)
            if (x[j] == next) *c = j;
        return next;
    }
    if (sp_sampler_probs(in->smp, in->probs, lg, err)) return -2;
    double u[SP_TREE_MAX_NODES];
    for (int j = 0; j < nc; j++) u[j] = sp_rng_uniform(in->seed, SP_RNG_STREAM_ACCEPT, tpos << 6 | (uint64_t)j);
    return sp_tree_verify_node(in->probs, in->q + (size_t)r * V, V, x, nc, u,
                               sp_rng_uniform(in->seed, SP_RNG_STREAM_SAMPLE, tpos), in->broken, c);
}

int sp_tree_walk(sp_tree *t, const sp_tree_walk_in *in, int32_t *acc_tok, int *acc_out, int32_t *next_out,
                 sp_err *err) {
    /* walk from the pending row; with penalties, row r's logits see the path's tokens */
    int r = 0, acc = 0, pushed = 0, rc = -1;
    int32_t next = -1;
    t->rows[0] = 0;
    for (;;) {
        if (in->pen) {
            if (r > 0) {
                if (sp_penalty_push(in->pen, t->tok[r], err)) goto done;
                pushed++;
            }
            sp_penalty_apply(in->pen, in->logits + (size_t)r * in->V);
        }
        int32_t x[SP_TREE_MAX_NODES];
        int crow[SP_TREE_MAX_NODES], nc = children(t, r, x, crow), c;
        next = walk_node(in, r, x, nc, in->pos + 1 + (uint64_t)acc, &c, err); /* the token at pos + 1 + acc */
        if (next == -1) sp_err_set(err, "tree: sampling failed (empty distribution)");
        if (next < 0) goto done;
        if (c < 0) break;
        r = crow[c];
        acc_tok[acc++] = t->tok[r];
        t->rows[acc] = r;
    }
    *acc_out = acc;
    *next_out = next;
    rc = 0;
done:
    if (in->pen) sp_penalty_pop(in->pen, pushed);
    return rc;
}

int sp_tree_keep(const sp_tree *t, sp_kv *kv, sp_drafter *d, int acc, float *taps, int nt, float *hidden, int H,
                 sp_err *err) {
    if (d->tree_accept) {
        int32_t path[SP_TREE_MAX_NODES];
        for (int i = 0; i < acc; i++) path[i] = t->rows[i + 1] - 1;
        d->tree_accept(d, path, acc);
    }
    if (sp_kv_keep_rows(kv, t->n + 1, t->rows, acc + 1, err)) return -1;
    /* the path's rows in order for commit(): rows[i] >= i, so moving forward overwrites nothing needed */
    size_t w = (size_t)nt * H;
    for (int i = 1; i <= acc; i++) {
        if (taps) memcpy(taps + i * w, taps + t->rows[i] * w, w * sizeof(float));
        if (hidden) memcpy(hidden + (size_t)i * H, hidden + (size_t)t->rows[i] * H, (size_t)H * sizeof(float));
    }
    return 0;
}
