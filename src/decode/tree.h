/* tree.h — one speculative round over a token tree (docs/TREE.md): the drafter proposes a tree
 * (drafter.h, propose_tree), the target verifies every node in one tree-masked forward after its
 * cache, the accepted root path is kept in the cache (sp_kv_keep_rows) and its rows are handed
 * to the drafter's commit() exactly as after a chain of those drafts.
 *
 * Greedy: from the pending token, follow the child whose token is the target's argmax at the
 * current node; the first node without such a child emits the argmax. The tree forward is
 * batch-invariant (each node's logits are those of a chain over its root path), so the output is
 * bit-identical to plain greedy decoding.
 * Sampling: recursive rejection sampling over each node's children, drawn without replacement
 * from the drafter's q (docs/TREE.md states the rule and why the output is exactly the target's). */
#ifndef SPECULA_TREE_H
#define SPECULA_TREE_H

#include "sample/penalty.h"
#include "sample/sample.h"
#include "decode/drafter.h"

typedef struct sp_tree sp_tree;

/* Buffers for trees shaped by sh with target m and drafter d (taps / hidden rows as d wants them);
 * sampling: 1 when the request samples (q rows and residual scratch). NULL with err. */
sp_tree *sp_tree_create(const sp_model *m, const sp_drafter *d, const sp_tree_shape *sh, int sampling, sp_err *err);
void sp_tree_free(sp_tree *t);

/* What one round decided. */
typedef struct {
    int nodes;               /* draft nodes verified */
    int depth;               /* deepest node's depth (drafts on its root path) */
    int acc;                 /* drafts accepted (the kept root path's length) */
    int32_t next;            /* the target's token after them (now pending) */
    const float *taps;       /* [acc + 1, n_taps·H] rows of [pending, accepted drafts], or NULL */
    const float *hidden;     /* [acc + 1, H], or NULL */
    double draft_ms;         /* time in the drafter's propose_tree */
} sp_tree_result;

/* One round after the cache kv (every committed token but `pending`): propose a tree of at most
 * max_depth levels and max_nodes nodes (both also capped by the shape; 0: a plain step), forward
 * [pending, nodes], decide, keep [pending, accepted path] in kv.
 * acc_tok[0 .. res->acc) receives the accepted drafts. sample / seed: the request's params and
 * seed (greedy params → argmax walk); pen: the committed stream's penalties or NULL (pushes made
 * here are popped before return); broken: the audit's test hook (sp_tree_verify_node). Returns 0, or -1 with err. */
int sp_tree_round(sp_tree *t, sp_model *m, sp_kv *kv, sp_drafter *d, int32_t pending, int max_depth, int max_nodes,
                  sp_sampler *smp, int greedy, uint64_t seed, sp_penalty *pen, int broken, int32_t *acc_tok,
                  sp_tree_result *res, sp_err *err);

/* The sampling rule at one node, shared with the audit: target probs p[V] (scratch: overwritten
 * by the residual), the node's children x[0..n) drawn in that order without replacement from
 * q[V] (scratch: overwritten), uniforms u_acc[0..n) and u_res. Returns the emitted token and sets
 * *child to the index of the accepted child, or -1 when the token was drawn from the residual.
 * broken: skip the residual update after a rejection (test hook: the audit must catch it). */
int sp_tree_verify_node(float *p, float *q, int V, const int32_t *x, int n, const double *u_acc, double u_res,
                        int broken, int *child);

#endif
