/* batch.h — anchor blocks from regenerated shards (docs/DSPARK.md §7, seeds' data path).
 *
 * Anchors: every position p of a sequence with p ≥ resp_start and p + 1 < S (the anchor token and
 * its first label are both response tokens); `full_block` keeps only p + B < S (all B labels
 * exist: the held-out monitor). The global stream of anchors is epoch after epoch; each epoch
 * is a seeded order of all anchors (counter RNG: the i-th anchor depends only on seed and i, so
 * a resumed run draws exactly the batches the uninterrupted one would).
 *
 * Anchors per sequence A (`specula train --anchors-per-seq`): each epoch, every sequence's
 * anchors are shuffled (stream 0x5eed4000 + epoch) and cut into units of A (the last one
 * shorter), each unit sorted by p; the epoch is a seeded permutation of the units (stream
 * 0x5eed0000 + epoch), read unit after unit. A = 1: units are single anchors in their stored
 * order, so the epoch is exactly the one permutation of all anchors used before A existed.
 * A batch (or an MPI rank's slice of it) is a contiguous range of the stream; the anchors of
 * one unit inside it form one element group sharing its context rows (model.h). A = 1 keeps
 * the padding rows of positions < 0 (the unshared layout, bit for bit); A > 1 leaves them out.
 *
 * One element for anchor p of sequence x (length S, taps F, final hidden h):
 *   context   F[p−C .. p−1], left-padded (kmask 0) where p−C+j < 0 — the most recent C kept;
 *   block     ids [x_p, M × (B−1)], embedded with the target's embedding;
 *   slot k    label x_{p+k+1}; Markov previous token x_{p+k} (teacher forcing);
 *             e_k = 1 while p+k+1 < S (a contiguous prefix); weight e_k·exp(−k/γ);
 *             target distribution P_k = softmax(lm_head(h[p+k])): the hidden that PREDICTS the
 *             label (the off-by-one rule: position p+k, not p+k+1); under the tempered loss
 *             P_k = softmax(lm_head(h[p+k]) / T) at the anchor's temperature T.
 * z-lab DFlash (zlab = 1, docs/DFLASH.md §5): slot k predicts x_{p+k} (its own position), from
 * P_k = softmax(lm_head(h[p+k−1])); slot 0 (the anchor itself) has weight 0 and the weights are
 * exp(−(k−1)/γ) for k ≥ 1.
 *
 * mlx-bun's draw (data->mlxbun_anchors, the default for shards in an mlx-bun layout; training
 * batchers only, the held-out monitor keeps the rule above): only full blocks (p ≥ resp_start,
 * p + B < S; v1 shards have resp_start 0), A = 1, and the i-th anchor of the stream is drawn with
 * replacement: a sequence uniformly among those with an anchor (counter RNG stream 0x5eed8000,
 * counter 2i), then one of its anchors uniformly (counter 2i + 1) — mlx-bun's sequence-then-
 * position draw, resumable like the rest. */
#ifndef SPECULA_TRAIN_BATCH_H
#define SPECULA_TRAIN_BATCH_H

#include "train/drafter_net.h"
#include "train/shards.h"

typedef struct {
    int shard, seq, p;
} tr_anchor;

typedef struct {
    const tr_shardset *data;
    sp_model *target;
    int B, C, mask_id;
    int zlab;       /* 1: z-lab labels (slot k predicts x_{p+k}) */
    int A;          /* anchors per sequence (unit size) */
    int mlx;        /* 1: mlx-bun's draw (see above) */
    double gamma;
    tr_anchor *items; /* [n] sorted by (shard, seq, p) */
    int64_t n;
    uint64_t seed;
    int64_t *perm, perm_epoch; /* [n] the stream of epoch perm_epoch (indices into items) */
    uint8_t *ustart;           /* [n] 1 where a unit starts in perm */
    int64_t *seq_first, n_seqs; /* [n_seqs+1] first item of each sequence with anchors */
    int64_t *tmp, *uoff, *uperm; /* [n], [n+1], [n] epoch scratch (A > 1) */
    float *hrows;   /* [max_rows, H] scratch for P */
    int max_rows;
    int n_temps;    /* > 0: the tempered loss's temperatures (sp_tr_batcher_set_temps) */
    double temps[TR_MAX_TEMPS];
} tr_batcher;

/* anchors_per_seq: A ≥ 1 (see the file comment). */
int sp_tr_batcher_init(tr_batcher *bt, const tr_shardset *data, sp_model *target, int B, int C, int mask_id,
                    int zlab, double gamma, int full_block, int anchors_per_seq, uint64_t seed, int max_elems,
                    sp_err *err);
void sp_tr_batcher_free(tr_batcher *bt);
/* the i-th anchor of the global stream; *unit_start (when not NULL) = 1 where its unit starts */
const tr_anchor *sp_tr_batcher_anchor(tr_batcher *bt, int64_t i, int *unit_start);
/* Fill b (allocated for at least n elements) with anchors i0 .. i0+n−1 of the stream: one group
 * per run of anchors of one unit. b->P is filled when b->P != NULL; with temperatures set and
 * b->tinv != NULL, the i-th anchor of the stream gets temperature T_i (the one set, or among
 * several the one the counter RNG draws for (seed, stream 0x7e390000, i)), its slots tinv 1/T_i
 * and P_k = softmax(lm_head(h)/T_i). */
void sp_tr_batcher_fill(tr_batcher *bt, tr_batch *b, int64_t i0, int n);
/* The tempered loss's n temperatures (each > 0, n ≤ TR_MAX_TEMPS; n = 0: untempered). */
void sp_tr_batcher_set_temps(tr_batcher *bt, int n, const double *temps);

#endif
