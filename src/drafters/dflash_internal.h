/* dflash_internal.h — what dflash_tree.c (token-tree proposals) needs of a DFlash / DSpark
 * drafter in dflash.c: one block forward per proposal, then each depth's draft logits given the
 * parent node's token (the Markov head conditions on it, so DSpark evaluates it per branch). */
#ifndef SPECULA_DFLASH_INTERNAL_H
#define SPECULA_DFLASH_INTERNAL_H

#include "sample/sample.h"
#include "spec/drafter.h"

typedef struct {
    int depth;        /* levels the block offers (<= the depth asked for) */
    int V;
    int state_n;      /* floats of Markov state a node carries to its children (rnn head), else 0 */
    int32_t pending;  /* the root's token */
    uint64_t pos;     /* absolute position of the pending token */
    int greedy;       /* 1: children are top-k; else drawn from q = smp's processing of the logits */
    uint64_t seed;
    sp_sampler *smp;
} df_tree_env;

/* Run the block forward for a tree of at most max_depth levels and describe it in env. */
int df_tree_block(sp_drafter *d, int max_depth, df_tree_env *env, sp_err *err);
/* Z[V]: raw draft logits at depth j (1 .. env->depth) for a child of a node whose token is prev.
 * state (env->state_n floats or NULL): the parent's Markov state in, the child level's out. */
void df_tree_logits(sp_drafter *d, int j, int32_t prev, float *state, float *Z);
/* The proposal had `nodes` nodes and reached `depth`: commit() may accept up to depth drafts. */
void df_tree_done(sp_drafter *d, int depth, int nodes);

/* propose_tree of DFlash / DSpark drafters (dflash_tree.c) */
int df_propose_tree(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, sp_err *err);

#endif
