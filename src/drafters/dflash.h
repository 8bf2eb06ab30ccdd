/* dflash.h — DFlash and DSpark block drafters (docs/DFLASH.md, docs/DSPARK.md).
 *
 * One network, two conventions, chosen by architectures[0] of the drafter's config.json:
 *   "DFlashDraftModel" (z-lab): block [pending, M × g], slot t (1..g) predicts the token at its
 *       own position: g = B-1 drafts per block, sampled independently.
 *   "Qwen3DSparkModel" / "Gemma4DSparkModel" (DeepSpec): block [pending, M × (g-1)], slot t
 *       predicts the next position (anchor first: g = B drafts). With markov_head tensors the
 *       drafts are sampled left to right through the Markov head (vanilla / gated / rnn), with
 *       confidence_head tensors each draft has a confidence c_j; DeepSpec's dflash_*_block7 are
 *       the same files with both heads off.
 * The target's embedding and LM head (+ Gemma soft-cap) are used through the target (DeepSpec
 * copies in the checkpoint are shape-checked, never used). The draft KV cache holds context
 * K/V of committed tokens only (taps given by the engine in begin/commit); the block's own K/V
 * live in scratch and are dropped after each proposal.
 *
 * Sampling: greedy params → argmax drafts; else drafts are drawn from q = the drafter's logits
 * (Markov-corrected) processed with `sample`, and q goes to the engine (provides_q). With a
 * draft_temps.json beside the drafter (decode/sampcal.h, docs/sampling.md) position j is
 * processed at its fitted draft temperature for the request's temperature instead; any q is
 * lossless, since the engine verifies with the q each draft was drawn from. */
#ifndef SPECULA_DFLASH_H
#define SPECULA_DFLASH_H

#include "sample/sample.h"
#include "decode/drafter.h"
#include "decode/sampcal.h"
#include "decode/schedule.h"

typedef enum {
    SP_DFLASH_ZLAB = 0,  /* DFlashDraftModel */
    SP_DFLASH_DSPARK,    /* DeepSpec backbone (with or without heads) */
} sp_dflash_kind;

typedef enum {
    SP_VERIFY_ALL = 0,     /* verify every draft (a confidence threshold may still cut) */
    SP_VERIFY_SCHEDULE,    /* docs/DSPARK.md §10 prefix scheduler (needs sps) */
    SP_VERIFY_RETRO,       /* LOSSY test variant: best length over all prefixes (paper App. A) */
} sp_verify_policy;

typedef struct {
    int max_drafts;          /* drafts per block (0: the checkpoint's, B-1 z-lab / B DSpark) */
    int clamp_to_block;      /* 1: max_drafts is at most the checkpoint's */
    float conf_threshold;    /* DSpark: cut at the first c_k < t (0: off) */
    sp_verify_policy policy;
    const sp_sps_table *sps; /* for SP_VERIFY_SCHEDULE / RETRO (copied) */
    int no_sts;              /* 1: ignore sts.json beside the drafter (raw confidences) */
    int keep_taps;           /* tests: keep every context tap row (sp_dflash_context) */
    int no_bias_cache;       /* tests: recompute the vanilla Markov bias every time */
    /* calibration hook: after every commit, the raw confidence logits z[0..n) of the last
     * proposal (n drafts) and how many were accepted */
    void (*on_round)(void *ctx, const float *z, int n, int n_acc);
    void *on_round_ctx;
    /* 1: ignore draft_temps.json beside the drafter (q at the request's own temperature) */
    int no_draft_temps;
    /* calibration hook (sampling only): after every proposal, the logits Z[n, V] its n drafts
     * were drawn from (penalties and the Markov head applied, before the temperature) */
    void (*on_logits)(void *ctx, const float *Z, int n, int V);
    void *on_logits_ctx;
} sp_dflash_opts;

sp_dflash_opts sp_dflash_opts_default(void);

/* Load the drafter in dir for `target` (borrowed: it must outlive the drafter). sample: the
 * params drafts are drawn with. Every missing / mis-shaped tensor and bad config key is an error
 * naming it. Returns a drafter the caller frees with sp_drafter_free, or NULL with err. */
sp_drafter *sp_drafter_dflash(const char *dir, sp_model *target, const sp_sample_params *sample,
                              const sp_dflash_opts *o, sp_err *err);

/* A drafter sharing every weight of `proto` (made by sp_drafter_dflash or this function, which
 * must outlive it), with its own sequence state and sampling params. It proposes exactly as a
 * drafter loaded from proto's directory with proto's options would, and has proto's batch_key
 * (drafters of one checkpoint can propose together). Free with sp_drafter_free; NULL with err. */
sp_drafter *sp_dflash_clone(const sp_drafter *proto, const sp_sample_params *sample, sp_err *err);

/* The propose_batch of DFlash / DSpark drafters (decode/drafter.h): one batched block forward over
 * the blocks of all ds[] (clones of one checkpoint), each drafter's drafts bit-identical to its
 * own propose(). */
int sp_dflash_propose_batch(sp_drafter *const *ds, int n, const int *max_g, int32_t *const *drafts, float *const *q,
                            int *n_drafts, sp_err *err);

typedef struct {
    sp_dflash_kind kind;
    int block_size, max_drafts, markov_rank, has_conf, n_taps;
    const int *tap_layers;
    int qk_norm;      /* the draft layers apply q_norm / k_norm (decided by the checkpoint's tensors) */
    int draft_temps;  /* draft_temps.json applied (sampling only) */
    float draft_t[SP_SAMPCAL_MAX_B]; /* then: the draft temperature per position, [max_drafts] */
    /* over all proposals since load */
    long proposals, drafted;
    double conf_sum;  /* Σ c_j over drafts offered (mean = conf_sum / conf_n) */
    long conf_n;
    long len_hist[SP_SPS_MAX + 1]; /* proposals by length returned */
    double ms_block, ms_heads, ms_inject; /* time in the block forward, the heads + sampling, context injection */
} sp_dflash_info;

/* Facts and statistics of a drafter made by sp_drafter_dflash (0), else -1. */
int sp_dflash_info_get(const sp_drafter *d, sp_dflash_info *info);

/* The RoPE inverse frequencies [*D / 2] draft layer `layer` applies (owned by the drafter),
 * NULL if d is not a DFlash / DSpark drafter or layer is out of range. For tests: a Llama
 * target's drafter must rotate exactly like the target (llama3 rope scaling included). */
const float *sp_dflash_rope_inv_freq(const sp_drafter *d, int layer, int *D);

/* keep_taps only: the context rows H_ctx [*n, n_taps·H] the drafter has absorbed (row i =
 * taps of committed token i). NULL otherwise. */
const float *sp_dflash_context(const sp_drafter *d, int *n);

#endif
