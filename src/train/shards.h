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
 * safetensors file, itself atomic). Readers check every count, shape, dtype and sum.
 *
 * mlx-bun's two layouts (docs/MLX-BUN-SHARDS.md) are read too, told apart by the tensors present:
 *   v1 (DSpark)  hidden, ids, seq_lens                 shard.json {"nSeq", "nTokens", "hiddenSize"}
 *   DFlash       hidden_ml, ids, seq_lens, resp_starts shard.json {.., "m", "tapLayers"}
 * v1 has no taps of its own: its context is `hidden` (m = 1, tap TR_TAP_FINAL_NORM) and every
 * position is a response position. DFlash has no `hidden`: the last m-th block of hidden_ml
 * (the post-final-norm tap) stands for it. sp_tr_shard_write_mlxbun writes either. */
#ifndef SPECULA_TRAIN_SHARDS_H
#define SPECULA_TRAIN_SHARDS_H

#include <stdint.h>

#include "formats/safetensors.h"
#include "specula.h"

typedef enum { TR_SHARDS_SPECULA = 0, TR_SHARDS_MLXBUN_V1, TR_SHARDS_MLXBUN_DFLASH } tr_shard_layout;
/* the tap of an mlx-bun v1 shard: the target's final post-norm hidden (the trainer names it by
 * the target's layer count, the sentinel num_layers) */
#define TR_TAP_FINAL_NORM (-1)

typedef struct {
    st_set *st;
    int n_seq;
    int64_t n_tokens;
    const int32_t *ids, *seq_lens, *resp_starts;
    const uint16_t *hidden;    /* [n_tokens, H] bf16, rows hidden_stride apart */
    int64_t hidden_stride;     /* H, or m·H when hidden is the last block of hidden_ml */
    int32_t *resp0;            /* [n_seq] zeros standing for v1's absent resp_starts (owned) */
    const uint16_t *hidden_ml; /* [n_tokens, m·H] bf16 */
    int64_t *seq_off;          /* [n_seq] first row of each sequence (owned) */
} tr_shard;

typedef struct {
    int n_shards;
    tr_shard *shards;
    int H, m;
    int tap_layers[16];
    tr_shard_layout layout; /* every shard of the set has the same */
    int mlxbun_anchors;     /* 1 (default for mlx-bun layouts): training anchors drawn as mlx-bun
                               draws them (batch.h); the caller may change it before the batcher */
} tr_shardset;

/* "DIR/shard_%05d" */
void sp_tr_shard_dir(char *out, size_t cap, const char *dir, int index);
/* 1 if DIR/shard_NNNNN is complete (shard.json present and parseable) */
int sp_tr_shard_complete(const char *shard_dir);

/* Write one shard directory (model.safetensors, then shard.json; each atomic). */
int sp_tr_shard_write(const char *shard_dir, int n_seq, const int32_t *seq_lens, const int32_t *resp_starts,
                   const int32_t *ids, const uint16_t *hidden, const uint16_t *hidden_ml, int H, int m,
                   const int *tap_layers, sp_err *err);

/* The same in mlx-bun's layout: m = 1 writes v1 (hidden_ml [L, H] is stored as `hidden`, the final
 * post-norm hidden; resp_starts are not stored), m > 1 the DFlash layout (the last tap must be
 * the post-final-norm hidden). */
int sp_tr_shard_write_mlxbun(const char *shard_dir, int n_seq, const int32_t *seq_lens, const int32_t *resp_starts,
                             const int32_t *ids, const uint16_t *hidden_ml, int H, int m, const int *tap_layers,
                             sp_err *err);
/* the layout of a written shard directory, from the tensors of its model.safetensors */
int sp_tr_shard_layout(const char *shard_dir, tr_shard_layout *layout, sp_err *err);
const char *sp_tr_shard_layout_name(tr_shard_layout l);

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
