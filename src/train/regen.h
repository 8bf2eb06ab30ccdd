/* regen.h — run the target over a JSONL corpus and write hidden-state shards (shards.h).
 *
 * Records (one JSON object per line; blank lines skipped):
 *   {"text": "..."}                      the whole text is the response (resp_start 0)
 *   {"prompt": "...", "response": "..."} resp_start = number of prompt tokens
 *   {"messages": [{"role", "content"}…]}  rendered with the target's chat template (src/chat/); the response is
 *                                         everything after the last non-assistant turn
 *   {"ids": [..], "resp_start": n}       pre-tokenized
 * With generate > 0 the response is replaced by up to `generate` tokens the target itself
 * samples after the prompt (temperature temp, seeded per record), as DeepSpec does.
 * Record i goes to shard i / shard_records. A shard already complete (in the layout this run
 * writes: another is an error) is skipped, so a rerun
 * after a kill (even kill -9 mid-write) redoes only what is missing; every line is parsed and
 * checked before any work, and a malformed one is an error naming FILE:LINE. */
#ifndef SPECULA_TRAIN_REGEN_H
#define SPECULA_TRAIN_REGEN_H

#include <stdint.h>

#include "specula.h"
#include "tokenizer/tokenizer.h"
#include "train/dist.h"

/* the largest --shard-records, and the largest --max-len / --generate (tokens) regen accepts */
#define TR_REGEN_MAX_RECORDS (1 << 20)
#define TR_REGEN_MAX_TOKENS (1 << 24)

typedef struct {
    const char *model_dir, *data_path, *out_dir;
    int n_taps;          /* 0: auto (docs/DFLASH.md §1 rule for 5 draft layers); -1: EAGLE-3's three */
    int taps[16];
    int mlxbun_layout;   /* 1: shards in mlx-bun's layout (shards.h): v1 for one tap, DFlash for more;
                            the last tap must be the final norm n_layers (automatic taps get it added) */
    int shard_records;   /* records per shard (default 256) */
    int max_len;         /* sequences are cut to this many tokens (default 4096) */
    int generate;        /* > 0: regenerate responses with the target, up to this many tokens */
    float temp;
    uint64_t seed;
    int threads;
    int progress;        /* 1: progress bar on stderr */
    const tr_dist *dist; /* NULL: one process; with N ranks, rank r does shards s with s % N == r */
} tr_regen_cfg;

/* The automatic tap layers for a target of n_layers: docs/DFLASH.md §1 with 5 draft layers
 * (round-half-even of 1 + i·(N−4)/4), duplicates dropped. Returns the count. */
int sp_tr_auto_taps(int *taps, int n_layers);
/* EAGLE-3's published taps (docs/EAGLE3.md §1): the inputs of layers 2, N/2 and N−3, i.e. the
 * outputs of 1, N/2−1, N−4. Returns 3, or 0 when they are not distinct (N < 8). */
int sp_tr_eagle3_taps(int *taps, int n_layers);

/* Parse and check the JSONL records of text[0, n) as sp_tr_regen_run does before any work (path names
 * the source in messages; model_dir, whose chat template renders "messages" records, may be NULL;
 * tok may be NULL, then text records are an error; vocab bounds "ids"). Returns 0 with the record
 * count in *n_records (may be NULL), or -1 naming PATH:LINE. */
int sp_tr_regen_check_records(const char *text, size_t n, const char *path, const char *model_dir, tok_tokenizer *tok,
                           int vocab, int generate, int *n_records, sp_err *err);

/* Returns 0, or -1 with err. *written / *skipped receive this rank's shard counts (may be NULL). */
int sp_tr_regen_run(const tr_regen_cfg *c, int *written, int *skipped, sp_err *err);

#endif
