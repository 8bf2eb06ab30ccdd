/* tree.h — the token-tree pieces of a speculative round (docs/TREE.md), driven by round.c: the
 * drafter proposes a tree (drafter.h, propose_tree), the target verifies every node in one
 * tree-masked forward after its cache, the accepted root path is kept in the cache
 * (sp_kv_keep_rows) and its rows are handed to the drafter's commit() exactly as after a chain of
 * those drafts.
 *
 * Greedy: from the pending token, follow the child whose token is the target's argmax at the
 * current node; the first node without such a child emits the argmax. The tree forward is
 * batch-invariant (each node's logits are those of a chain over its root path), so the output is
 * bit-identical to plain greedy decoding.
 * Sampling: recursive rejection sampling over each node's children, drawn without replacement
 * from the drafter's q (docs/TREE.md states the rule and why the output is exactly the target's).
 *
 * This file holds no buffers of its own: the round owns the logits, taps, hidden and q rows. */
#ifndef SPECULA_TREE_H
#define SPECULA_TREE_H

#include "sample/penalty.h"
#include "sample/sample.h"
#include "decode/drafter.h"

/* One round's tree as forward rows: row 0 is the pending token, row i + 1 is draft node i
 * (parents before children: a valid tree-masked forward input). */
typedef struct {
    int n;                                   /* draft nodes */
    int depth;                               /* deepest node's depth (drafts on its root path) */
    int32_t tok[SP_TREE_MAX_NODES + 1];      /* the rows' tokens */
    int32_t parent[SP_TREE_MAX_NODES + 1];   /* the rows' parent rows (-1: row 0) */
    int32_t rows[SP_TREE_MAX_NODES + 1];     /* after the walk: the accepted root path's rows, from 0 */
} sp_tree;

/* Propose a tree shaped by sh with drafter d after `pending` and check it (tokens in [0, V),
 * parents before children, depth <= sh->max_depth). sh->nodes < 1 or sh->max_depth < 1: no nodes.
 * q: NULL (greedy), else [sh->nodes + 1, V] filled by the drafter. Returns 0 with t filled, or -1
 * with err. */
int sp_tree_propose(sp_tree *t, sp_drafter *d, const sp_tree_shape *sh, int32_t pending, int V, float *q, sp_err *err);

/* What the walk reads and uses as scratch. */
typedef struct {
    float *logits;     /* [n + 1, V] the tree forward's logits (penalised in place along the path) */
    float *q;          /* sampling: [n + 1, V] the drafter's q per parent row (scratch); greedy: NULL */
    float *probs;      /* sampling: [V] target probs / residual */
    sp_sampler *smp;   /* the request's sampler (sampling) */
    int V, greedy, broken;
    uint64_t seed, pos; /* the request's seed; the absolute position of the pending token */
    sp_penalty *pen;   /* the committed stream's penalties or NULL (pushes here are popped on return) */
} sp_tree_walk_in;

/* Decide the tree on the forward's logits: from row 0, move to a child while the rule accepts one.
 * acc_tok[0 .. *acc) receives the accepted drafts, t->rows[0 .. *acc] the path's rows, *next the
 * target's token after them. Returns 0, or -1 with err. */
int sp_tree_walk(sp_tree *t, const sp_tree_walk_in *in, int32_t *acc_tok, int *acc, int32_t *next, sp_err *err);

/* After the walk: tell d the path (tree_accept), keep the path's rows in kv and move their taps
 * ([rows, nt·H]) and hidden ([rows, H]) rows to the front, in path order (either may be NULL). */
int sp_tree_keep(const sp_tree *t, sp_kv *kv, sp_drafter *d, int acc, float *taps, int nt, float *hidden, int H,
                 sp_err *err);

/* The sampling rule at one node, shared with the audit: target probs p[V] (scratch: overwritten
 * by the residual), the node's children x[0..n) drawn in that order without replacement from
 * q[V] (scratch: overwritten), uniforms u_acc[0..n) and u_res. Returns the emitted token and sets
 * *child to the index of the accepted child, or -1 when the token was drawn from the residual.
 * broken: skip the residual update after a rejection (test hook: the audit must catch it). */
int sp_tree_verify_node(float *p, float *q, int V, const int32_t *x, int n, const double *u_acc, double u_res,
                        int broken, int *child);

#endif
