/* batch.c — anchors and batch elements from shards (see batch.h for the exact rules). */
#include "train/batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"

int sp_tr_batcher_init(tr_batcher *bt, const tr_shardset *data, sp_model *target, int B, int C, int mask_id,
                    int zlab, double gamma, int full_block, int anchors_per_seq, uint64_t seed, int max_elems,
                    sp_err *err) {
    memset(bt, 0, sizeof *bt);
    if (anchors_per_seq < 1) return sp_err_set(err, "anchors per sequence %d: must be at least 1", anchors_per_seq);
    if (data->mlxbun_anchors && !full_block) { /* mlx-bun's draw: full blocks, one anchor at a time */
        bt->mlx = 1;
        full_block = 1;
        anchors_per_seq = 1;
    }
    bt->data = data; bt->target = target; bt->B = B; bt->C = C; bt->mask_id = mask_id; bt->zlab = zlab;
    bt->A = anchors_per_seq; bt->gamma = gamma; bt->seed = seed; bt->perm_epoch = -1;
    int64_t n = 0, ns = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = ns = 0;
        for (int si = 0; si < data->n_shards; si++) {
            const tr_shard *sh = &data->shards[si];
            for (int q = 0; q < sh->n_seq; q++) {
                int S = sh->seq_lens[q];
                int64_t n0 = n;
                for (int p = sh->resp_starts[q]; p + (full_block ? B : 1) < S; p++) {
                    if (pass) bt->items[n] = (tr_anchor){si, q, p};
                    n++;
                }
                if (n > n0) {
                    if (pass) bt->seq_first[ns] = n0;
                    ns++;
                }
            }
        }
        if (pass == 0) {
            if (n == 0) return sp_err_set(err, "no anchor: no sequence has a response of at least %d tokens",
                                          full_block ? B + 1 : 2);
            bt->items = malloc(sizeof(tr_anchor) * n);
            bt->perm = malloc(sizeof(int64_t) * n);
            bt->ustart = malloc((size_t)n);
            bt->seq_first = malloc(sizeof(int64_t) * (ns + 1));
            bt->max_rows = max_elems * B;
            bt->hrows = malloc(sizeof(float) * bt->max_rows * data->H);
            if (bt->A > 1) {
                bt->tmp = malloc(sizeof(int64_t) * n);
                bt->uoff = malloc(sizeof(int64_t) * (n + 1));
                bt->uperm = malloc(sizeof(int64_t) * n);
            }
            if (!bt->items || !bt->perm || !bt->ustart || !bt->seq_first || !bt->hrows ||
                (bt->A > 1 && (!bt->tmp || !bt->uoff || !bt->uperm))) {
                sp_tr_batcher_free(bt);
                return sp_err_set(err, "anchors: out of memory (%lld)", (long long)n);
            }
        }
    }
    bt->n = n;
    bt->n_seqs = ns;
    bt->seq_first[ns] = n;
    return 0;
}

void sp_tr_batcher_free(tr_batcher *bt) {
    free(bt->items); free(bt->perm); free(bt->ustart); free(bt->seq_first); free(bt->tmp); free(bt->uoff);
    free(bt->uperm); free(bt->hrows);
    memset(bt, 0, sizeof *bt);
}

/* Fisher–Yates of x[0..n) from the counter RNG (seed, stream), counter = the position */
static void shuffle(int64_t *x, int64_t n, uint64_t seed, uint64_t stream, int64_t ctr0) {
    for (int64_t k = n - 1; k > 0; k--) {
        int64_t r = (int64_t)(sp_rng_u64(seed, stream, (uint64_t)(ctr0 + k)) % (uint64_t)(k + 1));
        int64_t t = x[k]; x[k] = x[r]; x[r] = t;
    }
}

/* the stream of one epoch (see batch.h) */
static void build_epoch(tr_batcher *bt, int64_t epoch) {
    int64_t n = bt->n;
    if (bt->A == 1) { /* units = anchors in stored order: one permutation of all anchors */
        for (int64_t k = 0; k < n; k++) bt->perm[k] = k;
        shuffle(bt->perm, n, bt->seed, 0x5eed0000u + (uint64_t)epoch, 0);
        memset(bt->ustart, 1, (size_t)n);
        return;
    }
    int64_t U = 0;
    for (int64_t s = 0; s < bt->n_seqs; s++) {
        int64_t f0 = bt->seq_first[s], f1 = bt->seq_first[s + 1];
        for (int64_t k = f0; k < f1; k++) bt->tmp[k] = k;
        shuffle(bt->tmp + f0, f1 - f0, bt->seed, 0x5eed4000u + (uint64_t)epoch, f0);
        for (int64_t c0 = f0; c0 < f1; c0 += bt->A) { /* a unit: A of them, sorted by p (= item order) */
            int64_t c1 = c0 + bt->A < f1 ? c0 + bt->A : f1;
            for (int64_t i = c0 + 1; i < c1; i++)
                for (int64_t j = i; j > c0 && bt->tmp[j - 1] > bt->tmp[j]; j--) {
                    int64_t t = bt->tmp[j]; bt->tmp[j] = bt->tmp[j - 1]; bt->tmp[j - 1] = t;
                }
            bt->uoff[U++] = c0;
        }
    }
    bt->uoff[U] = n;
    for (int64_t u = 0; u < U; u++) bt->uperm[u] = u;
    shuffle(bt->uperm, U, bt->seed, 0x5eed0000u + (uint64_t)epoch, 0);
    int64_t pos = 0;
    for (int64_t u = 0; u < U; u++) {
        int64_t a = bt->uoff[bt->uperm[u]], b = bt->uoff[bt->uperm[u] + 1];
        for (int64_t k = a; k < b; k++, pos++) {
            bt->perm[pos] = bt->tmp[k];
            bt->ustart[pos] = k == a;
        }
    }
}

const tr_anchor *sp_tr_batcher_anchor(tr_batcher *bt, int64_t i, int *unit_start) {
    if (bt->mlx) { /* a sequence with an anchor, uniformly; then one of its anchors, uniformly */
        int64_t s = (int64_t)(sp_rng_u64(bt->seed, 0x5eed8000u, 2 * (uint64_t)i) % (uint64_t)bt->n_seqs);
        int64_t f0 = bt->seq_first[s], f1 = bt->seq_first[s + 1];
        if (unit_start) *unit_start = 1;
        return &bt->items[f0 + (int64_t)(sp_rng_u64(bt->seed, 0x5eed8000u, 2 * (uint64_t)i + 1) % (uint64_t)(f1 - f0))];
    }
    int64_t epoch = i / bt->n, j = i % bt->n;
    if (epoch != bt->perm_epoch) {
        build_epoch(bt, epoch);
        bt->perm_epoch = epoch;
    }
    if (unit_start) *unit_start = bt->ustart[j];
    return &bt->items[bt->perm[j]];
}

/* the temperature of the i-th anchor of the stream (see batch.h; 1 when none is set) */
static double anchor_temp(const tr_batcher *bt, int64_t i) {
    if (bt->n_temps < 2) return bt->n_temps ? bt->temps[0] : 1.0;
    return bt->temps[sp_rng_u64(bt->seed, 0x7e390000u, (uint64_t)i) % (uint64_t)bt->n_temps];
}

void sp_tr_batcher_fill(tr_batcher *bt, tr_batch *b, int64_t i0, int n) {
    const tr_shardset *ds = bt->data;
    int B = bt->B, C = bt->C, H = ds->H, mH = ds->m * H, V = b->V;
    SP_ASSERT(n <= b->cap && b->C == C && b->B == B && n * B <= bt->max_rows);
    sp_tr_batch_clear(b);
    for (int i = 0; i < n; i++) {
        int ustart, e, row0, q0;
        const tr_anchor *an = sp_tr_batcher_anchor(bt, i0 + i, &ustart);
        const tr_shard *sh = &ds->shards[an->shard];
        int S = sh->seq_lens[an->seq], p = an->p;
        int64_t base = sh->seq_off[an->seq];
        const int32_t *x = sh->ids + base;
        /* context: the window p−C .. p−1, its rows not yet in the group (left padding when A = 1) */
        int nr = sp_tr_batch_push(b, p, ustart, bt->A == 1, &e, &row0, &q0);
        for (int j = 0; j < nr; j++) {
            int q = q0 + j;
            float *f = b->F + ((size_t)row0 + j) * mH;
            if (q >= 0) sp_to_f32(f, sh->hidden_ml + (size_t)(base + q) * mH, SP_DT_BF16, (size_t)mH);
            else memset(f, 0, sizeof(float) * mH);
        }
        /* slot k's label sits at position p + k + shift; the hidden predicting it at p + k + sh − 1 */
        int shift = bt->zlab ? 0 : 1, valid = 1;
        for (int k = 0; k < B; k++) {
            int t = e * B + k, lp = p + k + shift, hp = lp - 1;
            sp_model_embed(bt->target, b->x0 + (size_t)t * H, k == 0 ? x[p] : bt->mask_id);
            valid = valid && lp < S;
            int trained = valid && lp > p; /* z-lab slot 0 predicts the anchor itself: not trained */
            b->labels[t] = valid ? x[lp] : 0;
            b->prev[t] = hp >= 0 && hp < S ? x[hp] : 0;
            b->wt[t] = trained ? (float)exp(-(k - (1 - shift)) / bt->gamma) : 0.0f;
            if (b->tinv) b->tinv[t] = (float)(1.0 / anchor_temp(bt, i0 + i));
            float *hr = bt->hrows + (size_t)t * H;
            if (hp >= 0 && hp < S) sp_to_f32(hr, sh->hidden + (size_t)(base + hp) * sh->hidden_stride, SP_DT_BF16, (size_t)H);
            else memset(hr, 0, sizeof(float) * H);
        }
    }
    if (b->P) {
        sp_model_logits(bt->target, b->P, bt->hrows, n * B);
        for (int t = 0; t < n * B; t++) {
            float *pr = b->P + (size_t)t * V;
            if (b->tinv)
                for (int v = 0; v < V; v++) pr[v] *= b->tinv[t];
            sp_softmax(pr, V);
        }
    }
}

void sp_tr_batcher_set_temps(tr_batcher *bt, int n, const double *temps) {
    SP_ASSERT(n >= 0 && n <= TR_MAX_TEMPS);
    bt->n_temps = n;
    for (int i = 0; i < n; i++) bt->temps[i] = temps[i];
}
