/* eagle3_internal.h — the EAGLE-3 drafter's state, shared by eagle3.c (load, chain proposals,
 * commit) and eagle3_tree.c (token-tree proposals). Private to src/drafters/. */
#ifndef SPECULA_EAGLE3_INTERNAL_H
#define SPECULA_EAGLE3_INTERNAL_H

#include "core/core.h"
#include "drafters/eagle3.h"
#include "formats/safetensors.h"
#include "formats/tensor_names.h"
#include "kernels/kernels.h"
#include "model/block.h"
#include "sample/penalty.h"
#include "decode/spec.h"

#define E3_CHUNK 64 /* committed rows run per pass; also the most tree nodes of one depth */
_Static_assert(E3_CHUNK >= SP_TREE_MAX_NODES, "a tree depth runs in one pass");

typedef struct {
    sp_eagle3_layout layout;
    sp_tn_layout names;         /* the checkpoint's tensor names (formats/tensor_names.h) */
    sp_model *target;
    sp_pool *pool;
    st_set *st;
    sp_config dc;
    int H, V, Vd, m, gemma;
    int taps[SP_MAX_LAYERS]; /* target layers tapped (outputs) */
    float softcap;
    /* weights; shapes in the comments, W [out, in] */
    sp_mat fc;                  /* [H, m·H] */
    float *input_norm;          /* [m·H] norm_before_fc, else NULL */
    float *final_norm;          /* [H] */
    sp_block_layer layer;       /* the decoder layer, SP_ATTN_IN_EMBED_STATE (model/block.h): Q/K/V [·, 2H] */
    sp_mat embed;               /* [V, H] own table (SpecForge, optional) */
    sp_mat lm_head;             /* [Vd, H] */
    int32_t *d2t;               /* [Vd] absolute target ids */
    /* sampling */
    sp_sampler *smp;
    int greedy, max_drafts;
    uint64_t seed;
    sp_penalty *pen;
    /* sequence state */
    float *K, *Vc;              /* [cap, KVH, D] */
    int cap, n_ctx, have;       /* have: h_last holds the out of row n_ctx-1 */
    int32_t last[SP_SPEC_MAX_G]; /* the last proposal's drafts (a tree's: the accepted path's) */
    int n_last;
    int32_t pending;            /* the token after the committed rows */
    /* the last tree proposal (eagle3_tree.c): node i is ttok[i] under tpar[i] (-1: the pending token) */
    int32_t ttok[SP_TREE_MAX_NODES], tpar[SP_TREE_MAX_NODES];
    int tree_n;
    unsigned char tdone[SP_TREE_MAX_NODES]; /* node i's layer output is in tout */
    float *tout;                /* [SP_TREE_MAX_NODES, H] each node's layer output */
    /* scratch for E3_CHUNK rows */
    sp_block_scratch bs;        /* the layer's: xn [R, 2H], q, att [R, NH·D], k, v [R, KVH·D], o [R, H],
                                 * g, u [R, I] */
    float *e, *g, *out, *tapn;  /* token embeddings, states, layer outputs [R, H]; normed taps [R, m·H] */
    float *h, *h_last, *dl, *full, *qrow; /* [H], [H], [Vd], [V], [V] */
    sp_eagle3_info info;
    sp_owner owned;
} e3_t;

/* The cache holds at least `rows` positions (grown, contents kept). 0, or -1 with err. */
int sp_e3_ensure_cap(e3_t *s, int rows, sp_err *err);
/* The layer (sp_block_forward) on T rows (tokens[t], state gin[t]) → s->out [T, H]; gin may be
 * s->out. tr NULL: a chain at positions pos0 .., K/V written at pos0 ..; else row t is tree node
 * tr->rows[t] after pos0 committed rows (node i: parent tr->parent[i], -1 for a child of the
 * pending token; position pos0 + depth − 1, K/V in cache slot pos0 + i). */
void sp_e3_layer_forward(e3_t *s, const int32_t *tokens, const float *gin, int T, int pos0,
                         const sp_block_tree_rows *tr);
/* out [V] = the draft logits of state h [H] at their target ids, -inf elsewhere */
void sp_e3_logits_row(e3_t *s, const float *h, float *out);

/* propose_tree and tree_accept (eagle3_tree.c) */
int sp_e3_propose_tree(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, sp_err *err);
void sp_e3_tree_accept(sp_drafter *d, const int32_t *path, int n);

#endif
