/* drafter_net.h — a DFlash / DSpark drafter being trained: its dimensions, its parameters (one
 * contiguous f32 array whose layout the gradients and AdamW moments share, llm.c style), the
 * activations one step saves, and the forward / backward pass over a batch of anchor blocks.
 *
 * Layout and names are the published ones (docs/DFLASH.md §2, docs/DSPARK.md §2: fc.weight, hidden_norm.weight,
 * layers.i.*, norm.weight, markov_head.*, confidence_head.*). The target's embedding and LM head
 * are NOT parameters: the batch carries embedded block inputs and the forward takes the target's
 * LM head as a frozen f32 matrix (gradient flows to the drafter's hidden only).
 *
 * What one batch element is (docs/DSPARK.md §3, §7; the anchor p of a sequence x):
 *   context: target taps of positions p−C .. p−1 (kmask 0 where p−C+j < 0);
 *   block: ids [x_p, M, …, M] (B slots); slot k predicts x_{p+k+1}.
 * Elements come in GROUPS that share their context rows (one sequence window, several anchors:
 * `specula train --anchors-per-seq`). A group's context rows are the union of its elements'
 * windows, in position order, each row once; element e's window is the C consecutive rows from
 * ctx_row[e] (slots whose position is < 0 may have no row: kmask 0, never read). fc,
 * hidden_norm and the per-layer K / V projections (+ k_norm, RoPE) run once per row; each
 * element's block attends to its own window and its own block, and in backward the elements'
 * dK / dV of a shared row add up before the projections' backward. One group of one element
 * with C rows (padding rows included) is the unshared layout: sp_tr_batch_alloc sets it up.
 * Positions: a row at sequence position q has rpos = q − base, the block slot k has
 * bpos + k = p − base + k, with base = p_1 − C of the group's first element; RoPE only sees
 * differences, so this equals the absolute positions the inference path uses (an unshared
 * element: context 0 .. C−1, block C .. C+B−1). */
#ifndef SPECULA_TRAIN_DRAFTER_NET_H
#define SPECULA_TRAIN_DRAFTER_NET_H

#include <stdint.h>

#include "core/pool.h"
#include "specula.h"

/* DSPARK: DeepSpec DSpark (Markov + confidence heads); DFLASH: DeepSpec's DFlash (the DSpark
 * backbone and file format without heads, slot k predicts x_{p+k+1}); DFLASH_ZLAB: z-lab's
 * "DFlashDraftModel" (docs/DFLASH.md §5: slot k ≥ 1 predicts x_{p+k}, slot 0 is not trained). */
typedef enum { TR_ARCH_DSPARK = 0, TR_ARCH_DFLASH, TR_ARCH_DFLASH_ZLAB, TR_ARCH_EAGLE3 } tr_arch;
/* TR_ARCH_EAGLE3 (train/eagle3_train.h) uses tr_dims with L 1, m 3, B = training-time-test steps,
 * Vd the draft vocabulary, and a tr_model whose table holds its own (SpecForge) tensors. */

/* The DSpark Markov head (docs/DSPARK.md §4, config markov_head_type): vanilla bias W2·W1[prev];
 * gated W2·(σ(W_g·[h ; code] + b) ⊙ code); rnn W2·tanh(o) of a gated state run over the block. */
typedef enum { TR_MARKOV_VANILLA = 0, TR_MARKOV_GATED, TR_MARKOV_RNN } tr_markov_type;

/* "vanilla", "gated", "rnn" */
const char *sp_tr_markov_name(tr_markov_type t);

#define TR_MAX_LAYERS 32
#define TR_MAX_TAPS 16
#define TR_MAX_TEMPS 8

typedef struct {
    tr_arch arch;
    int H, NH, KVH, D, I, L; /* drafter backbone (H, heads, head dim, MLP width from the target) */
    int V;                   /* target vocab */
    int m;                   /* tapped target layers; fc is [H, m·H] */
    int B;                   /* block size */
    int r;                   /* Markov rank (0: no Markov head) */
    int conf;                /* 1: confidence head */
    int conf_with_markov;    /* confidence head reads [h ; code] */
    int mask_id;
    int n_target_layers;
    int tap_layers[TR_MAX_TAPS];
    double eps;
    sp_rope_params rope;
    /* Gemma-4 DSpark / DFlash block (docs/DSPARK.md §3, Gemma4DSparkModel): the four Gemma norms,
     * weightless v_norm, attention scale 1, layers.i.layer_scalar (frozen at 1). 0 = Qwen3. */
    int gemma;
    int k_eq_v;     /* Gemma: no v_proj, V = v_norm(raw K) */
    int gelu;       /* GeGLU MLP (gelu_pytorch_tanh) instead of SwiGLU */
    double softcap; /* final logit soft-cap c of the target's LM head (0 = none) */
    tr_markov_type markov; /* with r > 0: markov_head.gate_proj (gated) / joint_proj (rnn) too */
    int Vd;                /* EAGLE-3: draft vocabulary (rows of its lm_head) */
    double alpha[3];       /* loss weights α_ce, α_l1, α_conf when alpha_set (train --loss-weights) */
    int alpha_set;         /* 0: the arch's defaults (sp_tr_loss_alpha) */
    /* the tempered loss (docs/TRAINING.md §7, train --temp): n_temps > 0 trains TV, KL and the
     * confidence target against the target's distribution at temperature temps[i], one drawn per
     * anchor (the batch's tinv); 0: the untempered loss */
    int n_temps;
    double temps[TR_MAX_TEMPS];
    double alpha_kl;       /* the tempered loss's KL weight (train --kl-weight) */
} tr_dims;

/* one named tensor of the parameter array */
typedef struct {
    char name[64];
    int ndim;
    int64_t shape[2];
    size_t off, n; /* offset and count in floats */
} tr_param;

/* pointers to every tensor inside one parameter-shaped array (weights, grads, moments) */
typedef struct {
    float *fc, *hidden_norm, *norm;
    struct {
        float *wq, *wk, *wv, *wo, *q_norm, *k_norm, *w_gate, *w_up, *w_down, *in_norm, *post_norm;
        float *pre_ffn_norm, *post_ffn_norm, *layer_scalar; /* Gemma only (wv NULL when k_eq_v) */
    } l[TR_MAX_LAYERS];
    float *mw1, *mw2, *cw, *cb;
    float *mpw, *mpb; /* gated: gate_proj [r, H+r], [r]; rnn: joint_proj [3r, 2r+H], [3r]; else NULL */
} tr_view;

typedef struct {
    tr_dims d;
    int n_params;
    tr_param params[16 + 14 * TR_MAX_LAYERS];
    size_t n;        /* floats in the parameter array */
    float *w;        /* [n] weights (fp32 master copy) */
    float *inv_freq; /* [D/2] RoPE */
    float *ones;     /* [max(D, H)] weight of the weightless v_norm (Gemma) */
    const int32_t *d2t; /* EAGLE-3: [d.Vd] draft id → target id, written as d2t / t2d (else NULL) */
} tr_model;

/* Fill the parameter table from d and allocate w (initialised: matrices N(0, 0.02) from the
 * counter RNG with `seed`, norms 1, biases 0). Returns 0 / -1. */
int sp_tr_model_init(tr_model *m, const tr_dims *d, uint64_t seed, sp_err *err);
void sp_tr_model_free(tr_model *m);
tr_view sp_tr_model_view(const tr_model *m, float *base);

/* One batch of NB elements in NG groups over NR context rows (see the file comment). All arrays
 * are owned by the batch. */
typedef struct {
    int NB, C, B, V, H, mH; /* NB: elements in use */
    int cap;                /* elements allocated; context rows allocated: cap·C */
    int NR, NG;             /* context rows and groups in use */
    float *F;          /* [NR, m·H] context taps (rows of group g: g_row[g] .. g_row[g+1]−1) */
    int32_t *rpos;     /* [NR] RoPE position of each context row */
    int32_t *g_row;    /* [NG+1] first context row of each group; g_row[NG] = NR */
    int32_t *g_elem;   /* [NG+1] first element of each group; g_elem[NG] = NB */
    int32_t *ctx_row;  /* [NB] row of element e's window slot 0 (rows of slots with kmask 1 lie in
                          its group; may be < g_row of its group, even < 0, when slots are masked) */
    int32_t *bpos;     /* [NB] RoPE position of block slot 0 */
    uint8_t *kmask;    /* [NB, C+B] 1 = visible key (window slots, then block slots) */
    float *x0;         /* [NB·B, H] embedded block inputs (target embedding) */
    int32_t *prev;     /* [NB·B] Markov previous token (teacher forcing) */
    int32_t *labels;   /* [NB·B] */
    float *wt;         /* [NB·B] loss weight (0 = slot not evaluated) */
    float *P;          /* [NB·B, V] target distribution per slot, or NULL (not needed) */
    float *tinv;       /* [NB·B] inverse temperature per slot: the tempered loss against P (which then
                          is the target's distribution at that temperature), or NULL (untempered) */
    const float *cstar_target; /* NULL (training: BCE targets are this forward's detached c*), or
                                  [NB·B] fixed BCE targets (tests hold c* fixed under finite
                                  differences, which is what "detached" means for the gradient) */
    int gbase, glast;  /* layout builder state (sp_tr_batch_push): the open group's base position and
                          the position of its last row */
} tr_batch;

/* Allocate for NB elements; the layout is the unshared one of NB elements (each its own group of
 * C rows, positions as the file comment says): callers may fill F / kmask directly. */
int sp_tr_batch_alloc(tr_batch *b, int NB, int C, int B, int V, int H, int mH, int with_P, sp_err *err);
void sp_tr_batch_free(tr_batch *b);
/* Start an empty layout (NB = NR = NG = 0). */
void sp_tr_batch_clear(tr_batch *b);
/* Append an element for anchor position p (window p−C .. p−1): in a new group when new_group
 * (always for the first element), else in the open group, whose elements must come in
 * increasing p. pad = 1: the rows of positions < 0 exist (zero taps, as the unshared layout);
 * pad = 0: they are left out. Sets the element's ctx_row, bpos, window kmask (block kmask 1)
 * and the new rows' rpos; the caller fills F rows [*row0, *row0 + n) with the taps of positions
 * *q0 .., n the return value, and the element's block arrays. Returns the element index in *e. */
int sp_tr_batch_push(tr_batch *b, int p, int new_group, int pad, int *e, int *row0, int *q0);
/* The unshared layout of NB elements (what sp_tr_batch_alloc sets up). */
void sp_tr_batch_unshared(tr_batch *b, int NB);

/* Saved activations and gradient scratch for batches of at most NB elements (and so at most
 * NB·C context rows) of context C. */
typedef struct tr_acts tr_acts;
tr_acts *sp_tr_acts_create(const tr_dims *d, int NB, int C, sp_err *err);
void sp_tr_acts_free(tr_acts *a);

/* The last sp_tr_forward's Markov-corrected logits Z [T, V] and confidence logits [T] (rows e·B + k;
 * owned by a). Tests compare them with the inference path. */
const float *sp_tr_acts_logits(const tr_acts *a);
const float *sp_tr_acts_conf(const tr_acts *a);

/* Loss weights (docs/DSPARK.md §7): DSpark (0.1, 0.9, 1.0), DFlash (1, 0, 0). */
void sp_tr_loss_alpha(tr_arch arch, double alpha[3]);
/* d's loss weights: d->alpha when d->alpha_set, else sp_tr_loss_alpha(d->arch) */
void sp_tr_dims_alpha(const tr_dims *d, double alpha[3]);

/* The loss normaliser (the denom of sp_tr_forward / sp_tr_backward): TR_LOSS_NORM_WEIGHTS divides
 * by the weight sum Σw + 1e-6 (DeepSpec), TR_LOSS_NORM_ANCHORS by the number of anchors (mlx-bun:
 * the mean over anchors of Σ_k w_k·term_k). Both counts are global (summed over ranks). */
typedef enum { TR_LOSS_NORM_WEIGHTS, TR_LOSS_NORM_ANCHORS } tr_loss_norm;
double sp_tr_loss_denom(tr_loss_norm norm, double wsum, double anchors);

/* Per-step results. */
typedef struct {
    double loss;
    double ce, l1, bce, wsum; /* Σw·term, Σw (unnormalised) */
    double kl;                /* Σw·KL (the tempered loss; else 0) */
} tr_stats;

/* Forward over the batch; fills st and, when cstar != NULL, cstar[NB·B] = clamp(1 − ½·L1, 0, 1)
 * of each slot (needs b->P). With b->tinv the loss is the tempered one (d.n_temps > 0: the
 * activations hold its softmax), and L1 and c* are taken at each slot's temperature. Wlm: the target LM head [V, H] f32 (frozen). denom: the
 * normaliser of the loss (Σw over the global batch + 1e-6). */
void sp_tr_forward(sp_pool *pool, const tr_model *m, tr_acts *a, const tr_batch *b, const float *Wlm,
                double denom, tr_stats *st, float *cstar);
/* Backward of the last sp_tr_forward; ACCUMULATES into grad (parameter layout). */
void sp_tr_backward(sp_pool *pool, const tr_model *m, tr_acts *a, const tr_batch *b, const float *Wlm,
                 double denom, float *grad);

#endif
