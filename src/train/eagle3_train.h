/* eagle3_train.h — training an EAGLE-3 drafter (docs/EAGLE3.md §6): the SpecForge layout's
 * parameters in a tr_model table, windows of consecutive positions from the shards, the
 * training-time-test forward / backward, the vocabulary map and the checkpoint's config.
 *
 * One batch element is a WINDOW: S consecutive positions p .. p+S−1 of one sequence. Step k
 * (k = 0 .. K−1) runs the layer on every row i with the token at p+i+1+k and, as its state,
 * fc(taps of p+i) for k = 0, the row's own output of step k−1 otherwise, at RoPE position i+k;
 * its query sees the step-0 keys of rows ≤ i and row i's keys of steps 1..k (the cache of a
 * chain drafted from row i grows by one key per step). Step k's logits over the draft
 * vocabulary are trained towards the target's distribution at position p+i+1+k, restricted to
 * the draft vocabulary and renormalised (soft cross-entropy), weight decay^k; a row-step counts
 * while its label lies inside the sequence's response. */
#ifndef SPECULA_TRAIN_EAGLE3_TRAIN_H
#define SPECULA_TRAIN_EAGLE3_TRAIN_H

#include <stdint.h>

#include "core/pool.h"
#include "train/drafter_net.h"
#include "train/shards.h"

/* Fill m's table with the SpecForge tensors for d (d->arch TR_ARCH_EAGLE3, d->m 3, d->B = K
 * steps, d->Vd draft vocabulary) and allocate w: matrices N(0, 0.02), norms 1, lm_head the
 * target LM head's rows of the draft ids (Wlm [V, H], d2t [Vd]). sp_tr_model_free releases it. */
int sp_tr_e3_model_init(tr_model *m, const tr_dims *d, uint64_t seed, const float *Wlm, const int32_t *d2t,
                     sp_err *err);

/* The draft vocabulary: the Vd ids most frequent in the shards' tokens (ties: lower id first),
 * padded with the lowest unseen ids, in increasing order → d2t [Vd] (absolute ids). */
int sp_tr_e3_vocab(const tr_shardset *data, int V, int Vd, int32_t *d2t, sp_err *err);

/* config.json of the drafter (LlamaForCausalLMEagle3) for the target's config.json text
 * (sp_model_config_json). *out malloc'd. */
int sp_tr_e3_config_json(char **out, const char *target_config, const tr_dims *d, sp_err *err);

typedef struct {
    int cap, NW, S, K, H, mH, Vd;
    float *F;      /* [NW·S, m·H] taps of positions p+i (zero past the sequence) */
    float *x0;     /* [K, NW·S, H] embedded input tokens of step k (the target's rows, unscaled) */
    float *P;      /* [K, NW·S, Vd] target distribution within the draft vocabulary, renormalised */
    float *mass;   /* [K, NW·S] the target's probability mass inside the draft vocabulary */
    float *wt;     /* [K, NW·S] loss weight (0: not evaluated) */
} tr_e3_batch;

/* Window sampler over a shard set: every window start p = j·S of every sequence with a label
 * after it, in a seeded order. */
typedef struct {
    const tr_shardset *data;
    sp_model *target;
    int S, K;
    double decay;
    int64_t n;        /* windows */
    int32_t *shard, *seq, *start; /* [n] in sampling order */
    const int32_t *d2t;
    int Vd;
    float *Wd;        /* [Vd, H] the target LM head rows of the draft ids */
    float *hid, *logit; /* scratch */
} tr_e3_sampler;

int sp_tr_e3_sampler_init(tr_e3_sampler *s, const tr_shardset *data, sp_model *target, int S, int K, double decay,
                       const int32_t *d2t, int Vd, uint64_t seed, sp_err *err);
void sp_tr_e3_sampler_free(tr_e3_sampler *s);
int sp_tr_e3_batch_alloc(tr_e3_batch *b, int cap, int S, int K, int H, int mH, int Vd, sp_err *err);
void sp_tr_e3_batch_free(tr_e3_batch *b);
/* windows i0 .. i0+n−1 (modulo the count) into b */
void sp_tr_e3_fill(tr_e3_sampler *s, tr_e3_batch *b, int64_t i0, int n);

typedef struct tr_e3_acts tr_e3_acts;
tr_e3_acts *sp_tr_e3_acts_create(const tr_dims *d, int cap, int S, sp_err *err);
void sp_tr_e3_acts_free(tr_e3_acts *a);
/* the last forward's draft distributions q [K, cap·S, Vd] (owned by a; tests compare them with
 * the inference drafter's) */
const float *sp_tr_e3_acts_probs(const tr_e3_acts *a);

/* Forward over b: returns Σ w·CE (unnormalised terms in st->ce, loss = Σ w·CE / denom), and when
 * cstar != NULL, cstar [K, NW·S] = Σ_v min(P_target(v), q(v)) (the acceptance of that draft). */
void sp_tr_e3_forward(sp_pool *pool, const tr_model *m, tr_e3_acts *a, const tr_e3_batch *b, double denom, tr_stats *st,
                   float *cstar);
/* Backward of the last forward; accumulates into grad. */
void sp_tr_e3_backward(sp_pool *pool, const tr_model *m, tr_e3_acts *a, const tr_e3_batch *b, double denom,
                    float *grad);

#endif
