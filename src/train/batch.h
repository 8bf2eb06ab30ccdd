/* batch.h — anchor blocks from regenerated shards (FORMATS.md §8.7, seeds' data path).
 *
 * Anchors: every position p of a sequence with p ≥ resp_start and p + 1 < S (the anchor token and
 * its first label are both response tokens); `full_block` keeps only p + B < S (all B labels
 * exist: the held-out monitor). The global stream of anchors is epoch after epoch, each epoch a
 * seeded permutation of all anchors (counter RNG: the i-th anchor depends only on seed and i,
 * so a resumed run draws exactly the batches the uninterrupted one would).
 *
 * One element for anchor p of sequence x (length S, taps F, final hidden h):
 *   context   F[p−C .. p−1], left-padded (kmask 0) where p−C+j < 0 — the most recent C kept;
 *   block     ids [x_p, M × (B−1)], embedded with the target's embedding;
 *   slot k    label x_{p+k+1}; Markov previous token x_{p+k} (teacher forcing);
 *             e_k = 1 while p+k+1 < S (a contiguous prefix); weight e_k·exp(−k/γ);
 *             target distribution P_k = softmax(lm_head(h[p+k])): the hidden that PREDICTS the
 *             label (the off-by-one rule: position p+k, not p+k+1).
 * z-lab DFlash (zlab = 1, FORMATS.md §7.5): slot k predicts x_{p+k} (its own position), from
 * P_k = softmax(lm_head(h[p+k−1])); slot 0 (the anchor itself) has weight 0 and the weights are
 * exp(−(k−1)/γ) for k ≥ 1. */
#ifndef SPECULA_TRAIN_BATCH_H
#define SPECULA_TRAIN_BATCH_H

#include "train/model.h"
#include "train/shards.h"

typedef struct {
    int shard, seq, p;
} tr_anchor;

typedef struct {
    const tr_shardset *data;
    sp_model *target;
    int B, C, mask_id;
    int zlab;       /* 1: z-lab labels (slot k predicts x_{p+k}) */
    double gamma;
    tr_anchor *items;
    int64_t n;
    uint64_t seed;
    int64_t *perm, perm_epoch;
    float *hrows;   /* [max_rows, H] scratch for P */
    int max_rows;
} tr_batcher;

int tr_batcher_init(tr_batcher *bt, const tr_shardset *data, sp_model *target, int B, int C, int mask_id,
                    int zlab, double gamma, int full_block, uint64_t seed, int max_elems, sp_err *err);
void tr_batcher_free(tr_batcher *bt);
/* the i-th anchor of the global stream */
const tr_anchor *tr_batcher_anchor(tr_batcher *bt, int64_t i);
/* Fill b (allocated for at least n elements) with anchors i0 .. i0+n−1 of the stream.
 * b->P is filled when b->P != NULL. */
void tr_batcher_fill(tr_batcher *bt, tr_batch *b, int64_t i0, int n);

#endif
