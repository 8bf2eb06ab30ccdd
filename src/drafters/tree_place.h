/* tree_place.h — the shape of a drafter's token tree (docs/TREE.md §2), shared by the drafters
 * that propose trees (DFlash / DSpark in dflash_tree.c, EAGLE-3 in eagle3_tree.c). The drafter
 * supplies a node's draft logits on request; this code picks each node's candidate children
 * (top-k, or draws without replacement from q when sampling) and places them one at a time by
 * the static or dynamic rule until the node budget is spent. Private to src/drafters/. */
#ifndef SPECULA_TREE_PLACE_H
#define SPECULA_TREE_PLACE_H

#include "core/core.h"
#include "sample/sample.h"
#include "decode/drafter.h"

#define TP_MAX_K 16 /* most candidates per node */

/* A tree node; index 0 is the pending token, i + 1 is draft node i (parents before children). */
typedef struct {
    int32_t tok;
    int parent, depth, rank; /* parent's index (-1 for 0); depth (0 for the pending token); rank among siblings */
    double logp;             /* log P of its path under the drafter */
    int ready;               /* its candidates are prepared (placed nodes wait until first needed) */
    int nc, next;            /* candidates prepared, next one to place */
    int32_t cand[TP_MAX_K];
    double cscore[TP_MAX_K]; /* placement score of each candidate */
} tp_node;

/* Z[V] ← the raw draft logits of node v's children. nodes[0 .. n) are placed so far (v < n);
 * a node's logits are asked for at most once, and only after its parent's. 0, or -1 with err. */
typedef int (*tp_logits_fn)(void *ctx, const tp_node *nodes, int n, int v, float *Z, sp_err *err);

typedef struct {
    int depth;       /* most levels below the pending token */
    int V;
    int32_t pending; /* the root's token */
    uint64_t pos;    /* absolute position of the pending token (the DRAFT stream counters) */
    int greedy;      /* 1: the drafter's params are greedy (no q to give); else children are drawn from
                        q = smp's processing of the logits */
    uint64_t seed;
    sp_sampler *smp;
    tp_logits_fn logits;
    void *ctx;
    const sp_draft_tree_constraint *tc; /* the engine's constraint on each node's children (NULL: none) */
} tp_env;

/* Place a tree shaped by sh (drafter.h's propose_tree contract: tok / parent of each draft node,
 * q rows [sh->nodes + 1, V] when the request samples, row v the distribution of node v's children;
 * q NULL: greedy verification, children are the top-k even when the drafter samples; q with a
 * greedy drafter is an error).
 * *max_depth ← the deepest placed node's depth. Returns the node count or -1 with err. */
int sp_tp_place(const tp_env *env, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, int *max_depth,
             sp_err *err);

#endif
