/* drafter.h — the interface every drafter implements (n-gram, draft model, DFlash, DSpark,
 * Gemma-4 assistant). The speculative loop (spec.c) knows drafters only through this struct.
 *
 * The committed stream is the prompt followed by every emitted token. At each round the
 * engine asks for up to G drafts continuing the stream, verifies them with one target forward
 * over [pending, d_1 .. d_g], and reports back how many were accepted and which token the
 * target emitted after them. The drafter then rolls back or extends its own state; rejected
 * drafts must leave no trace in it.
 *
 * Target hidden-state taps (for DFlash / DSpark): a drafter that sets n_taps > 0 receives the
 * outputs of target layers tap_layers[] for every token the target has committed to its KV
 * cache — the prompt rows in begin(), and in commit() the rows of [pending, d_1 .. d_acc]
 * (acc + 1 rows): never the rows of rejected drafts. */
#ifndef SPECULA_DRAFTER_H
#define SPECULA_DRAFTER_H

#include <math.h>
#include <stdint.h>

#include "sample/penalty.h"
#include "specula.h"

typedef struct sp_drafter sp_drafter;

/* The token tree a drafter is asked for (docs/TREE.md). */
typedef enum {
    SP_TREE_DYNAMIC = 0, /* best first: expand the most probable open node until `nodes` are placed */
    SP_TREE_STATIC,      /* the top-1 chain, each depth's next k − 1 candidates as leaves beside it */
} sp_tree_kind;

typedef struct {
    int nodes;      /* most draft nodes (1 .. SP_TREE_MAX_NODES) */
    int k;          /* most children of one node */
    int max_depth;  /* most drafts along one root path */
    sp_tree_kind kind;
} sp_tree_shape;

#define SP_TREE_MAX_NODES 64

/* What the engine shares with a drafter for one request. The target and its KV cache are the
 * engine's: a drafter may read them (the Gemma-4 assistant attends to the target's K/V) but must
 * never forward, trim or free them. */
typedef struct {
    sp_model *target;
    sp_kv *target_kv;   /* holds every committed token but the pending one */
    uint64_t seed;      /* the request's sampling seed: a sampling drafter draws from it
                           (stream SP_RNG_STREAM_DRAFT), so independent requests are independent */
    sp_penalty *penalty; /* repetition penalties of the request (NULL: none). At propose() it holds
                            the committed stream; a drafter that draws from logits applies
                            sp_penalty_apply to the logits of each draft, pushes the draft, and
                            pops all its pushes before propose() returns (penalty.h) */
} sp_drafter_ctx;

/* A constraint on a chain proposal (the engine's grammar), set on the drafter around propose().
 * Before draft j (0-based) is drawn, mask(ctx, j, logits, V) sets the logits of the tokens the
 * constraint forbids after drafts 0 .. j-1 to -inf and returns 0, or returns 1 when the proposal
 * must end before draft j, -1 on error; accept(ctx, x) then gives the draft drawn. A drafter
 * draws from the masked logits (its q rows are then the masked distributions). A drafter that
 * ignores the constraint proposes as without it (the engine cuts the drafts it forbids). */
typedef struct {
    int (*mask)(void *ctx, int j, float *logits, int V, sp_err *err);
    int (*accept)(void *ctx, int32_t x, sp_err *err);
    void *ctx;
} sp_draft_constraint;

/* A constraint on a tree proposal (the engine's grammar, greedy requests), set on the drafter around
 * propose_tree(). Before node v's children are chosen from its logits [V] (target-id space),
 * node(ctx, v, parent, tok, logits, V) sets the tokens the constraint forbids after v's root path
 * to -inf: v = 0 is the pending token (parent -1), v > 0 the v-th node placed (its parent's index
 * and its token; tree row v); parents are asked before their children. Returns 0, 1 when no token
 * is allowed (v gets no children), or -1 with err. A drafter that ignores it proposes as without
 * it (the engine never follows a node the constraint forbids). */
typedef struct {
    int (*node)(void *ctx, int v, int parent, int32_t tok, float *logits, int V, sp_err *err);
    void *ctx;
} sp_draft_tree_constraint;

/* The constraint c (NULL: none) on the logits [V] of draft j, in target-id space: the tokens it
 * forbids set to -inf. Returns 0 (draw draft j from the logits), 1 (end the proposal before draft
 * j: the constraint says so, or no finite logit is left, as when a drafter's reduced vocabulary
 * holds none of the allowed tokens), or -1 with err. After drawing x from the masked logits the
 * drafter calls c->accept(c->ctx, x, err). */
static inline int sp_draft_constraint_apply(const sp_draft_constraint *c, int j, float *logits, int V, sp_err *err) {
    if (!c) return 0;
    int rc = c->mask(c->ctx, j, logits, V, err);
    if (rc) return rc < 0 ? -1 : 1;
    for (int v = 0; v < V; v++)
        if (logits[v] > -INFINITY) return 0;
    return 1;
}

struct sp_drafter {
    const char *name;
    void *self;          /* the implementation's state */
    int n_taps;          /* target taps wanted (0: none) */
    const int *tap_layers;
    int wants_hidden;    /* 1: begin/commit also receive the target's final post-norm hidden rows */
    int provides_q;      /* 1: propose() fills draft distributions q (else the engine uses one-hot q) */
    const sp_draft_constraint *constraint; /* set by the engine for one propose() (NULL: none) */
    const sp_draft_tree_constraint *tree_constraint; /* set by the engine for one propose_tree() (NULL: none) */
    int step_cost;       /* 1: each draft runs a drafter forward of its own, so proposing k drafts costs
                          * about k times one (a draft model, EAGLE-3, the assistant); 0: one forward
                          * serves the block (DFlash / DSpark) or no model runs (n-gram, suffix) */

    /* New sequence. prompt[0..n) is committed; the last prompt token is "pending" (the target
     * has not forwarded it yet), so the row arrays hold rows for prompt[0..n-1) only:
     * taps [n-1, n_taps·H] when n_taps > 0, hidden [n-1, H] when wants_hidden (else NULL). */
    int (*begin)(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                 const sp_drafter_ctx *ctx, sp_err *err);
    /* Propose up to max_g drafts. q: NULL, or [max_g, V] to fill with the processed draft
     * distribution each draft was sampled from (only when provides_q). Returns the count
     * (0 .. max_g) or -1 on error. */
    int (*propose)(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err);
    /* n_acc of the last proposal were accepted, then the target emitted `next` (now pending).
     * taps [n_acc + 1, n_taps·H] / hidden [n_acc + 1, H]: rows of the tokens just committed to
     * the target cache, [old pending, d_1 .. d_acc]; row n_acc is the state that predicted `next`. */
    int (*commit)(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err);
    /* Optional (NULL: none). Propose for n drafters at once: ds[0..n) all have this drafter's
     * batch_key (drafters made from one loaded checkpoint, sharing its weights). Each ds[i] gets
     * exactly what ds[i]->propose(ds[i], max_g[i], drafts[i], q[i]) would give it, bit for bit,
     * its count in n_drafts[i]; the work is shared (one batched forward over every block's rows).
     * Returns 0, or -1 with err (then the drafters' proposals are undefined: reset them). */
    int (*propose_batch)(sp_drafter *const *ds, int n, const int *max_g, int32_t *const *drafts, float *const *q,
                         int *n_drafts, sp_err *err);
    const void *batch_key; /* drafters with the same non-NULL key can share a propose_batch call */
    /* Optional (NULL: chains only). Propose a token tree shaped by sh: node i is tok[i] with parent
     * parent[i] < i (-1: a child of the pending token); siblings in decreasing draft probability,
     * distinct tokens. Under greedy params children are the top-k of the node's draft distribution;
     * when sampling (q non-NULL, [sh->nodes + 1, V]) they are drawn without replacement from it, and
     * q row 0 is the distribution of the pending token's children, row i + 1 that of node i's.
     * Returns the node count (0 .. sh->nodes) or -1. The next commit() gives the accepted root
     * path's length as n_acc and its rows, exactly as after a chain of those drafts. */
    int (*propose_tree)(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q,
                        sp_err *err);
    /* Optional (NULL: not needed). After a tree round's decision and before its commit(): the
     * accepted root path as proposal node indices path[0 .. n) (root first; n is the commit's
     * n_acc). For a drafter whose commit() needs the accepted tokens (EAGLE-3 runs its layer on
     * them); commit() alone tells only how many were accepted. */
    void (*tree_accept)(sp_drafter *d, const int32_t *path, int n);
    /* Optional (NULL: commit after every round). Rounds that asked for no drafts, told at once
     * before the next propose: the target committed the old pending token and tokens[0 .. n-2],
     * then emitted tokens[n-1], now pending. taps [n, n_taps·H] / hidden [n, H]: rows of
     * [old pending, tokens[0 .. n-2]]. Lets a drafter whose commit runs a forward batch the rows
     * while the engine's policy has drafting off. */
    int (*extend)(sp_drafter *d, const int32_t *tokens, int n, const float *taps, const float *hidden, sp_err *err);
    void (*destroy)(sp_drafter *d);
};

static inline void sp_drafter_free(sp_drafter *d) {
    if (d && d->destroy) d->destroy(d);
}

#endif
