/* dflash_tree.c — token-tree proposals of DFlash / DSpark drafters (docs/TREE.md §2).
 *
 * One block forward gives every depth's draft logits; a node's children at depth j come from the
 * logits of slot j with the Markov head conditioned on the node's own token (DSpark: evaluated per
 * branch, the rnn head's state carried along each path; z-lab DFlash: the same distribution for
 * every node of a depth). Which candidates are placed where is tree_place.c's (static / dynamic).
 * Repetition penalties are not applied to tree drafts (they only steer the guess: the target's
 * rule applies them, and q is reported as drawn). The confidence head and schedulers are chains-only. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "drafters/dflash_internal.h"
#include "drafters/tree_place.h"

typedef struct {
    sp_drafter *d;
    float *state; /* [nodes + 1, S] Markov state per node, or NULL (S = 0) */
    int S;
} df_tree_ctx;

/* node v's children's logits; v's state row starts as its parent's (which its parent's logits
 * left as the state of v's level) and leaves as the state of v's children's level */
static int node_logits(void *ctx, const tp_node *nodes, int n, int v, float *Z, sp_err *err) {
    df_tree_ctx *c = ctx;
    (void)n, (void)err;
    float *st = c->S ? c->state + (size_t)v * c->S : NULL;
    if (st && v > 0) memcpy(st, c->state + (size_t)nodes[v].parent * c->S, sizeof(float) * (size_t)c->S);
    sp_df_tree_logits(c->d, nodes[v].depth + 1, nodes[v].tok, st, Z);
    return 0;
}

int sp_df_propose_tree(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, sp_err *err) {
    df_tree_env env;
    if (sp_df_tree_block(d, sh->max_depth, &env, err)) return -1;
    df_tree_ctx c = {.d = d, .S = env.state_n};
    /* the root's state row is zero (a fresh rnn state) */
    if (c.S && !(c.state = calloc((size_t)(SP_TREE_MAX_NODES + 1) * c.S, sizeof(float))))
        return sp_err_set(err, "dflash tree: out of memory");
    tp_env te = {.depth = env.depth, .V = env.V, .pending = env.pending, .pos = env.pos, .greedy = env.greedy,
                 .seed = env.seed, .smp = env.smp, .logits = node_logits, .ctx = &c, .tc = d->tree_constraint};
    int max_depth = 0, n = sp_tp_place(&te, sh, tok, parent, q, &max_depth, err);
    free(c.state);
    if (n < 0) return -1;
    sp_df_tree_done(d, max_depth, n);
    return n;
}
