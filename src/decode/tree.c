/* tree.c — one speculative round over a token tree (see tree.h, docs/TREE.md).
 *
 * Rows of the verify forward: row 0 is the pending token, row i + 1 is draft node i (parents
 * before children, so the rows are a valid sp_model_forward_tree input). The walk starts at row 0
 * and moves to a child while the rule accepts one; the rows it visited are the accepted root
 * path, kept in the target cache and gathered (taps / hidden) for the drafter's commit(). */
#include "decode/tree.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/prof.h"

struct sp_tree {
    sp_tree_shape sh;
    int V, H, n_taps, wants_hidden;
    int32_t rows[SP_TREE_MAX_NODES + 1], parent[SP_TREE_MAX_NODES + 1], tok[SP_TREE_MAX_NODES + 1];
    float *logits; /* [nodes + 1, V] */
    float *taps;   /* [nodes + 1, n_taps·H] or NULL */
    float *hidden; /* [nodes + 1, H] or NULL */
    float *q;      /* sampling: [nodes + 1, V] the drafter's q per parent row; else NULL */
    float *p;      /* sampling: [V] target probs / residual */
};

sp_tree *sp_tree_create(const sp_model *m, const sp_drafter *d, const sp_tree_shape *sh, int sampling, sp_err *err) {
    if (sh->nodes < 1 || sh->nodes > SP_TREE_MAX_NODES || sh->k < 1 || sh->max_depth < 1) {
        sp_err_set(err, "tree: %d nodes (allowed 1..%d), %d children per node and depth %d (both >= 1)", sh->nodes,
                   SP_TREE_MAX_NODES, sh->k, sh->max_depth);
        return NULL;
    }
    if (!d || !d->propose_tree) {
        sp_err_set(err, "tree: drafter %s proposes no trees", d ? d->name : "(none)");
        return NULL;
    }
    sp_tree *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    const sp_config *c = sp_model_config(m);
    t->sh = *sh;
    t->V = c->vocab_size;
    t->H = c->hidden_size;
    t->n_taps = d->n_taps;
    t->wants_hidden = d->wants_hidden;
    size_t R = (size_t)sh->nodes + 1;
    t->logits = malloc(R * t->V * sizeof(float));
    if (!t->logits) goto oom;
    if (t->n_taps && !(t->taps = malloc(R * t->n_taps * t->H * sizeof(float)))) goto oom;
    if (t->wants_hidden && !(t->hidden = malloc(R * t->H * sizeof(float)))) goto oom;
    if (sampling && (!(t->q = malloc(R * t->V * sizeof(float))) || !(t->p = malloc((size_t)t->V * sizeof(float)))))
        goto oom;
    return t;
oom:
    sp_err_set(err, "tree: out of memory for a %d-node tree", sh->nodes);
    sp_tree_free(t);
    return NULL;
}

void sp_tree_free(sp_tree *t) {
    if (!t) return;
    free(t->logits);
    free(t->taps);
    free(t->hidden);
    free(t->q);
    free(t->p);
    free(t);
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

/* children of row r (rows are 0 = pending, i + 1 = node i) in proposal order → x[], row ids */
static int children(const sp_tree *t, int n_rows, int r, int32_t *x, int *rows) {
    int n = 0;
    for (int i = r + 1; i < n_rows; i++)
        if (t->parent[i] == r) x[n] = t->tok[i], rows[n++] = i;
    return n;
}

int sp_tree_round(sp_tree *t, sp_model *m, sp_kv *kv, sp_drafter *d, int32_t pending, int max_depth, int max_nodes,
                  sp_sampler *smp, int greedy, uint64_t seed, sp_penalty *pen, int broken, int32_t *acc_tok,
                  sp_tree_result *res, sp_err *err) {
    const int V = t->V, H = t->H;
    memset(res, 0, sizeof *res);
    sp_tree_shape sh = t->sh;
    if (max_depth < sh.max_depth) sh.max_depth = max_depth;
    if (max_nodes < sh.nodes) sh.nodes = max_nodes;
    if (sh.nodes < 1) sh.max_depth = 0;
    int32_t ptok[SP_TREE_MAX_NODES], ppar[SP_TREE_MAX_NODES];
    int n = 0;
    if (sh.max_depth > 0) {
        double t0 = sp_time_ms();
        int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
        n = d->propose_tree(d, &sh, ptok, ppar, greedy ? NULL : t->q, err);
        sp_prof_phase_leave(prof);
        res->draft_ms = sp_time_ms() - t0;
        if (n < 0) return -1;
        if (n > sh.nodes) return sp_err_set(err, "tree: drafter %s proposed %d nodes (asked for %d)", d->name, n, sh.nodes);
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
        if (depth[i + 1] > sh.max_depth)
            return sp_err_set(err, "tree: drafter %s placed node %d at depth %d (at most %d)", d->name, i,
                              depth[i + 1], sh.max_depth);
        if (depth[i + 1] > res->depth) res->depth = depth[i + 1];
    }
    const int R = n + 1;
    sp_forward_out o = {.logits = t->logits, .tap_layers = d->tap_layers, .n_taps = t->n_taps, .taps = t->taps,
                        .hidden = t->hidden};
    int prof = sp_prof_phase_enter(SP_PROF_VERIFY);
    if (sp_model_forward_tree(m, kv, t->tok, t->parent, R, &o, err)) {
        sp_prof_phase_leave(prof);
        return -1;
    }
    sp_prof_enter(SP_PROF_SAMPLE);

    /* walk from the pending row; with penalties, row r's logits see the path's tokens */
    int r = 0, acc = 0, pushed = 0, next = -1;
    t->rows[0] = 0;
    const uint64_t pos = (uint64_t)(sp_kv_len(kv) - R); /* position of pending */
    for (;;) {
        float *lg = t->logits + (size_t)r * V;
        if (pen) {
            if (r > 0) {
                if (sp_penalty_push(pen, t->tok[r], err)) goto fail;
                pushed++;
            }
            sp_penalty_apply(pen, lg);
        }
        int32_t x[SP_TREE_MAX_NODES];
        int crow[SP_TREE_MAX_NODES], nc = children(t, R, r, x, crow), c = -1;
        uint64_t tpos = pos + 1 + (uint64_t)acc; /* position of the token being decided */
        if (greedy) {
            next = sp_sample_argmax(lg, V);
            for (int j = 0; j < nc && c < 0; j++)
                if (x[j] == next) c = j;
        } else {
            if (sp_sampler_probs(smp, t->p, lg, err)) goto fail;
            double u[SP_TREE_MAX_NODES];
            for (int j = 0; j < nc; j++) u[j] = sp_rng_uniform(seed, SP_RNG_STREAM_ACCEPT, tpos << 6 | (uint64_t)j);
            next = sp_tree_verify_node(t->p, t->q + (size_t)r * V, V, x, nc, u,
                                       sp_rng_uniform(seed, SP_RNG_STREAM_SAMPLE, tpos), broken, &c);
        }
        if (next < 0) {
            sp_err_set(err, "tree: sampling failed (empty distribution)");
            goto fail;
        }
        if (c < 0) break;
        r = crow[c];
        acc_tok[acc++] = t->tok[r];
        t->rows[acc] = r;
    }
    if (pen) sp_penalty_pop(pen, pushed);
    sp_prof_phase_leave(prof);
    if (d->tree_accept) {
        int32_t path[SP_TREE_MAX_NODES];
        for (int i = 0; i < acc; i++) path[i] = t->rows[i + 1] - 1;
        d->tree_accept(d, path, acc);
    }
    if (sp_kv_keep_rows(kv, R, t->rows, acc + 1, err)) return -1;
    /* the path's rows in order for commit(): rows[i] >= i, so moving forward overwrites nothing needed */
    for (int i = 1; i <= acc; i++) {
        size_t w = (size_t)t->n_taps * H;
        if (t->taps) memcpy(t->taps + i * w, t->taps + t->rows[i] * w, w * sizeof(float));
        if (t->hidden) memcpy(t->hidden + (size_t)i * H, t->hidden + (size_t)t->rows[i] * H, (size_t)H * sizeof(float));
    }
    res->nodes = n;
    res->acc = acc;
    res->next = next;
    res->taps = t->taps;
    res->hidden = t->hidden;
    return 0;
fail:
    if (pen) sp_penalty_pop(pen, pushed);
    sp_prof_phase_leave(prof);
    return -1;
}
