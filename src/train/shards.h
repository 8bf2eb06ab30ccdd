/* shards.h — regenerated target states on disk (the seeds' layout), read back for training.
 *
 *   SHARDS/shard_NNNNN/model.safetensors
 *       hidden      [Ltot, H]    bf16  the target's final post-norm hidden of every position
 *       hidden_ml   [Ltot, m·H]  bf16  outputs of the tapped layers, in tapLayers order
 *       ids         [Ltot]       i32   tokens, the sequences back to back
 *       seq_lens    [nSeq]       i32
 *       resp_starts [nSeq]       i32   first response position of each sequence
 *   SHARDS/shard_NNNNN/shard.json  {"nSeq", "nTokens", "hiddenSize", "m", "tapLayers"}
 * A shard is complete when shard.json exists (it is written, atomically, after the
 * safetensors file, itself atomic). Readers check every count, shape, dtype and sum. */
#ifndef SPECULA_TRAIN_SHARDS_H
#define SPECULA_TRAIN_SHARDS_H

#include <stdint.h>

#include "formats/safetensors.h"
#include "specula.h"

typedef struct {
    st_set *st;
    int n_seq;
    int64_t n_tokens;
    const int32_t *ids, *seq_lens, *resp_starts;
    const uint16_t *hidden;    /* [n_tokens, H] bf16 */
    const uint16_t *hidden_ml; /* [n_tokens, m·H] bf16 */
    int64_t *seq_off;          /* [n_seq] first row of each sequence (owned) */
} tr_shard;

typedef struct {
    int n_shards;
    tr_shard *shards;
    int H, m;
    int tap_layers[16];
} tr_shardset;

/* "DIR/shard_%05d" */
void sp_tr_shard_dir(char *out, size_t cap, const char *dir, int index);
/* 1 if DIR/shard_NNNNN is complete (shard.json present and parseable) */
int sp_tr_shard_complete(const char *shard_dir);

/* Write one shard directory (model.safetensors, then shard.json; each atomic). */
int sp_tr_shard_write(const char *shard_dir, int n_seq, const int32_t *seq_lens, const int32_t *resp_starts,
                   const int32_t *ids, const uint16_t *hidden, const uint16_t *hidden_ml, int H, int m,
                   const int *tap_layers, sp_err *err);

/* Open every complete shard_NNNNN under dir (incomplete ones are skipped with a warning).
 * vocab: ids must be < vocab (0: unchecked). Fails when there is none, or when shards
 * disagree on H / taps. */
int sp_tr_shardset_open(tr_shardset *s, const char *dir, int vocab, sp_err *err);
void sp_tr_shardset_close(tr_shardset *s);

/* Split s's sequences into two views of the same mapped data (train --val-split): a sequence
 * goes to val when sp_rng_uniform(seed, shard, sequence) < frac, so the split depends only on
 * (seed, frac) and the shards. Close both views with sp_tr_shardset_close_view before s. -1 when
 * either side would hold no sequence. */
int sp_tr_shardset_split(const tr_shardset *s, double frac, uint64_t seed, tr_shardset *train, tr_shardset *val,
                         sp_err *err);
void sp_tr_shardset_close_view(tr_shardset *v);

#endif
