/* batch.c — anchors and batch elements from shards (see batch.h for the exact rules). */
#include "train/batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"

int tr_batcher_init(tr_batcher *bt, const tr_shardset *data, sp_model *target, int B, int C, int mask_id,
                    int zlab, double gamma, int full_block, uint64_t seed, int max_elems, sp_err *err) {
    memset(bt, 0, sizeof *bt);
    bt->data = data; bt->target = target; bt->B = B; bt->C = C; bt->mask_id = mask_id; bt->zlab = zlab;
    bt->gamma = gamma; bt->seed = seed; bt->perm_epoch = -1;
    int64_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int si = 0; si < data->n_shards; si++) {
            const tr_shard *sh = &data->shards[si];
            for (int q = 0; q < sh->n_seq; q++) {
                int S = sh->seq_lens[q];
                for (int p = sh->resp_starts[q]; p + (full_block ? B : 1) < S; p++) {
                    if (pass) bt->items[n] = (tr_anchor){si, q, p};
                    n++;
                }
            }
        }
        if (pass == 0) {
            if (n == 0) return sp_err_set(err, "no anchor: no sequence has a response of at least %d tokens",
                                          full_block ? B + 1 : 2);
            bt->items = malloc(sizeof(tr_anchor) * n);
            bt->perm = malloc(sizeof(int64_t) * n);
            bt->max_rows = max_elems * B;
            bt->hrows = malloc(sizeof(float) * bt->max_rows * data->H);
            if (!bt->items || !bt->perm || !bt->hrows) {
                tr_batcher_free(bt);
                return sp_err_set(err, "anchors: out of memory (%lld)", (long long)n);
            }
        }
    }
    bt->n = n;
    return 0;
}

void tr_batcher_free(tr_batcher *bt) {
    free(bt->items); free(bt->perm); free(bt->hrows);
    memset(bt, 0, sizeof *bt);
}

const tr_anchor *tr_batcher_anchor(tr_batcher *bt, int64_t i) {
    int64_t epoch = i / bt->n, j = i % bt->n;
    if (epoch != bt->perm_epoch) { /* Fisher–Yates from the counter RNG (seed, stream = epoch) */
        for (int64_t k = 0; k < bt->n; k++) bt->perm[k] = k;
        for (int64_t k = bt->n - 1; k > 0; k--) {
            int64_t r = (int64_t)(sp_rng_u64(bt->seed, 0x5eed0000u + (uint64_t)epoch, (uint64_t)k) % (uint64_t)(k + 1));
            int64_t t = bt->perm[k]; bt->perm[k] = bt->perm[r]; bt->perm[r] = t;
        }
        bt->perm_epoch = epoch;
    }
    return &bt->items[bt->perm[j]];
}

void tr_batcher_fill(tr_batcher *bt, tr_batch *b, int64_t i0, int n) {
    const tr_shardset *ds = bt->data;
    int B = bt->B, C = bt->C, H = ds->H, mH = ds->m * H, V = b->V;
    SP_ASSERT(n <= b->cap && b->C == C && b->B == B && n * B <= bt->max_rows);
    b->NB = n;
    for (int e = 0; e < n; e++) {
        const tr_anchor *an = tr_batcher_anchor(bt, i0 + e);
        const tr_shard *sh = &ds->shards[an->shard];
        int S = sh->seq_lens[an->seq], p = an->p;
        int64_t base = sh->seq_off[an->seq];
        const int32_t *x = sh->ids + base;
        /* context: the C positions before p, left-padded */
        for (int j = 0; j < C; j++) {
            int q = p - C + j;
            float *f = b->F + ((size_t)e * C + j) * mH;
            b->kmask[e * (C + B) + j] = q >= 0;
            if (q >= 0) sp_to_f32(f, sh->hidden_ml + (size_t)(base + q) * mH, SP_DT_BF16, (size_t)mH);
            else memset(f, 0, sizeof(float) * mH);
        }
        /* slot k's label sits at position p + k + shift; the hidden predicting it at p + k + sh − 1 */
        int shift = bt->zlab ? 0 : 1, valid = 1;
        for (int k = 0; k < B; k++) {
            int t = e * B + k, lp = p + k + shift, hp = lp - 1;
            b->kmask[e * (C + B) + C + k] = 1;
            sp_model_embed(bt->target, b->x0 + (size_t)t * H, k == 0 ? x[p] : bt->mask_id);
            valid = valid && lp < S;
            int trained = valid && lp > p; /* z-lab slot 0 predicts the anchor itself: not trained */
            b->labels[t] = valid ? x[lp] : 0;
            b->prev[t] = hp >= 0 && hp < S ? x[hp] : 0;
            b->wt[t] = trained ? (float)exp(-(k - (1 - shift)) / bt->gamma) : 0.0f;
            float *hr = bt->hrows + (size_t)t * H;
            if (hp >= 0 && hp < S) sp_to_f32(hr, sh->hidden + (size_t)(base + hp) * H, SP_DT_BF16, (size_t)H);
            else memset(hr, 0, sizeof(float) * H);
        }
    }
    if (b->P) {
        sp_model_logits(bt->target, b->P, bt->hrows, n * B);
        for (int t = 0; t < n * B; t++) sp_softmax(b->P + (size_t)t * V, V);
    }
}
