/* eagle3_tree.c — token-tree proposals of EAGLE-3 drafters (docs/TREE.md §2, docs/EAGLE3.md §3).
 *
 * A chain draft j+1 comes from the layer run on (draft j, the previous step's output) at
 * position c + j (c = the last committed row). A tree node at depth j is the same step with its
 * parent's output as the state: its distribution is logits(layer(node's token, parent's
 * output)) at position c + j, attending to the committed rows and its own root path only (the
 * layer over some nodes of a tree, sp_block_forward_tree_rows, whose attention is the target's
 * tree-masked one), so each node's output is bit for bit what a chain over its root path computes. The depth-1 nodes' distribution
 * is the committed state's, as for draft 1.
 *
 * Which candidates are placed where is tree_place.c's (static / dynamic; top-k when greedy,
 * draws without replacement from q when sampling). A node's layer step runs when its children's
 * distribution is first needed, batched with every other placed node of its depth that has not
 * run yet: one layer forward per depth (more only when the dynamic rule places a node at a depth
 * after that depth's forward). Node i's K/V sit in cache slot n_ctx + i, past the committed rows,
 * and are overwritten by the next commit — which, as after a chain, runs the layer on the
 * accepted tokens with their real taps (tree_accept tells it which path that is), so a tree
 * round leaves exactly the state a chain of the accepted drafts leaves.
 * Repetition penalties are not applied to tree drafts (the target's rule applies them). */
#include <string.h>

#include "drafters/eagle3_internal.h"
#include "drafters/tree_place.h"

/* Run the layer once over every placed node (nodes 1 .. n-1 = proposal nodes 0 .. n-2) at
 * `depth` whose output is not in s->tout yet. */
static void forward_depth(e3_t *s, const tp_node *nodes, int n, int depth) {
    const size_t H = (size_t)s->H;
    int32_t parent[SP_TREE_MAX_NODES], rows[SP_TREE_MAX_NODES], toks[SP_TREE_MAX_NODES] = {0};
    int T = 0;
    for (int i = 0; i < n - 1; i++) {
        const tp_node *x = &nodes[i + 1];
        parent[i] = x->parent - 1;
        if (x->depth != depth || s->tdone[i]) continue;
        const float *gin = x->parent > 0 ? s->tout + (size_t)(x->parent - 1) * H : s->h_last;
        memcpy(s->g + (size_t)T * H, gin, sizeof(float) * H); /* the state input: the parent's output */
        rows[T] = i, toks[T] = x->tok;
        T++;
    }
    sp_block_tree_rows tr = {.parent = parent, .n = n - 1, .rows = rows};
    sp_e3_layer_forward(s, toks, s->g, T, s->n_ctx, &tr);
    for (int t = 0; t < T; t++) {
        memcpy(s->tout + (size_t)rows[t] * H, s->out + (size_t)t * H, sizeof(float) * H);
        s->tdone[rows[t]] = 1;
    }
}

static int node_logits(void *ctx, const tp_node *nodes, int n, int v, float *Z, sp_err *err) {
    e3_t *s = ctx;
    (void)err;
    if (v == 0) {
        sp_e3_logits_row(s, s->h_last, Z);
        return 0;
    }
    if (!s->tdone[v - 1]) forward_depth(s, nodes, n, nodes[v].depth);
    sp_e3_logits_row(s, s->tout + (size_t)(v - 1) * s->H, Z);
    return 0;
}

int sp_e3_propose_tree(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, sp_err *err) {
    e3_t *s = d->self;
    int depth = sh->max_depth < s->max_drafts ? sh->max_depth : s->max_drafts;
    s->n_last = 0;
    s->tree_n = 0;
    if (depth <= 0 || sh->nodes <= 0 || !s->have) return 0; /* no committed row yet (one-token prompt) */
    if (sp_e3_ensure_cap(s, s->n_ctx + SP_TREE_MAX_NODES, err)) return -1;
    memset(s->tdone, 0, sizeof s->tdone);
    tp_env te = {.depth = depth, .V = s->V, .pending = s->pending, .pos = (uint64_t)s->n_ctx, .greedy = s->greedy,
                 .seed = s->seed, .smp = s->smp, .logits = node_logits, .ctx = s, .tc = d->tree_constraint};
    int max_depth = 0, n = sp_tp_place(&te, sh, tok, parent, q, &max_depth, err);
    if (n < 0) return -1;
    memcpy(s->ttok, tok, sizeof(int32_t) * (size_t)n);
    memcpy(s->tpar, parent, sizeof(int32_t) * (size_t)n);
    s->tree_n = n;
    s->info.proposals++;
    s->info.drafted += n;
    return n;
}

/* the accepted root path's tokens become the drafts commit() absorbs; a path that is not one of
 * the last tree's root paths accepts nothing (commit() then reports the mismatch) */
void sp_e3_tree_accept(sp_drafter *d, const int32_t *path, int n) {
    e3_t *s = d->self;
    s->n_last = 0;
    if (n < 0 || n > SP_SPEC_MAX_G) return;
    for (int i = 0; i < n; i++)
        if (path[i] < 0 || path[i] >= s->tree_n || s->tpar[path[i]] != (i ? path[i - 1] : -1)) return;
    for (int i = 0; i < n; i++) s->last[i] = s->ttok[path[i]];
    s->n_last = n;
}
