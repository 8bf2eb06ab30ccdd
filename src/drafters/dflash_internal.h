/* dflash_internal.h — the DFlash / DSpark drafter's state, shared by dflash.c (one drafter: load,
 * propose, commit) and dflash_batch.c (drafters of one checkpoint sharing its weights, proposing
 * together in one batched block forward). Private to src/drafters/. */
#ifndef SPECULA_DFLASH_INTERNAL_H
#define SPECULA_DFLASH_INTERNAL_H

#include "core/core.h"
#include "drafters/dflash.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "model/block.h"
#include "sample/sample.h"
#include "decode/drafter.h"
#include "decode/sampcal.h"

#define CTX_CHUNK 64 /* context rows injected per pass */

typedef struct {
    sp_block_layer b; /* the decoder layer (model/block.h), attention over a non-causal block */
    float *K, *V;     /* context cache [cap, KVH, D] (+ the block's rows while proposing) */
} df_layer;

typedef enum { MARKOV_NONE = 0, MARKOV_VANILLA, MARKOV_GATED, MARKOV_RNN } markov_type;

typedef struct {
    sp_dflash_kind kind;
    sp_model *target;
    sp_pool *pool;
    st_set *st;
    sp_config dc;
    int H, V, L, NH, I_max, m, block_size, max_drafts, mask_id, gemma;
    int qk_norm;          /* q_norm / k_norm in every layer (decided by the tensors, see qk_norm_decide) */
    int taps[SP_MAX_LAYERS];
    sp_mat fc;            /* [H, m·H] */
    float *hidden_norm, *final_norm;
    df_layer *layers;
    /* heads */
    markov_type mtype;
    int r;
    const st_tensor *w1;  /* [V, r] rows gathered per token */
    sp_mat w2;            /* [V, r] */
    sp_mat gate_w, joint_w; /* [r, H+r], [3r, 2r+H] */
    float *gate_b, *joint_b;
    int conf, conf_markov;
    float *conf_w, conf_b; /* [H (+r)] */
    float sts[SP_SPS_MAX]; int n_sts;
    sp_dflash_opts o;
    sp_sps_table sps;
    /* sampling */
    sp_sampler *smp;
    int greedy;
    sp_sampcal cal;       /* draft_temps.json (n_t 0: none) */
    float draft_t[SP_SAMPCAL_MAX_B]; /* sampling: the draft temperature of each block position */
    uint64_t seed;
    sp_penalty *pen;      /* the request's repetition penalties (NULL: none) */
    int n_pushed;         /* drafts pushed onto pen during this proposal */
    /* sequence state */
    int n_ctx, cap;       /* committed context rows; rows allocated per layer cache */
    int32_t pending;
    int n_last;           /* drafts of the last proposal */
    float z_last[SP_SPS_MAX]; /* their raw confidence logits */
    float *kept; int n_kept, cap_kept; /* keep_taps */
    /* scratch for R = max(block, CTX_CHUNK) rows */
    int R;
    float *x, *xn, *q, *k, *v, *att, *o2, *g, *u, *hid, *logits, *z, *code, *vec, *state;
    float *bias, *qrow; /* [V] each: Markov bias, a q row nobody asked for */
    /* vanilla Markov head: bias = W2·W1[prev] depends on prev alone, so recent ones are kept
     * (direct-mapped by prev; ~4 MB in all): a hit reads V floats instead of W2 [V, r] */
    int n_bc;
    int32_t *bc_tag; /* [n_bc] prev cached in the slot, -1 none */
    float *bc;       /* [n_bc, V] */
    sp_dflash_info info;
    sp_owner owned; /* small converted arrays, freed together */
    /* clones (dflash_batch.c): committed taps rows not injected yet, and a gather area */
    float *lazy;    /* [cap_lazy, m·H] */
    int n_lazy, cap_lazy;
    float *gather;  /* [R, m·H] */
} df_t;

/* The sampler of the request's params `sample` (s->smp, s->greedy) and, when sampling, the draft
 * temperatures draft_t from s->cal; 0 or -1 with err. */
int sp_df_sampling_setup(df_t *s, const sp_sample_params *sample, sp_err *err);
/* Scratch for R rows (and the vanilla Markov bias cache), from s->owned; 0 or -1 (out of memory). */
int sp_df_scratch_alloc(df_t *s);
/* The per-layer context caches hold at least `rows` rows; 0 or -1 with err. */
int sp_df_ensure_cap(df_t *s, int rows, sp_err *err);
/* A proposal in two halves around the block forward. sp_df_block_prepare: the block tokens blk[T] and
 * the draft count g of a proposal of at most max_g drafts (returns T; 0: no proposal). After the
 * block forward has left s->hid [T, H] and s->logits [T, V], sp_df_block_drafts draws the drafts
 * (heads, verify policy, sampling) and returns their count, or -1 with err. */
int sp_df_block_prepare(df_t *s, int max_g, int32_t *blk, int *g);
int sp_df_block_drafts(df_t *s, int max_g, int g, int32_t *drafts, float *q, const sp_draft_constraint *c, sp_err *err);

/* Token trees (dflash_tree.c): one block forward per proposal, then each depth's draft logits
 * given the parent node's token (the Markov head conditions on it, so DSpark evaluates it per
 * branch). */
#include "decode/drafter.h"

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
int sp_df_tree_block(sp_drafter *d, int max_depth, df_tree_env *env, sp_err *err);
/* Z[V]: raw draft logits at depth j (1 .. env->depth) for a child of a node whose token is prev.
 * state (env->state_n floats or NULL): the parent's Markov state in, the child level's out. */
void sp_df_tree_logits(sp_drafter *d, int j, int32_t prev, float *state, float *Z);
/* The proposal had `nodes` nodes and reached `depth`: commit() may accept up to depth drafts. */
void sp_df_tree_done(sp_drafter *d, int depth, int nodes);

/* propose_tree of DFlash / DSpark drafters (dflash_tree.c) */
int sp_df_propose_tree(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q, sp_err *err);

#endif
