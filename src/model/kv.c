/* kv.c — per-sequence KV caches and forward scratch.
 *
 * Full-attention layers keep a linear cache of max_ctx positions. Sliding layers keep a ring of
 * window + max_batch slots (position p in slot p % cap) when that is smaller than max_ctx. The
 * extra max_batch slots are what make rollback safe right after a wrap: a forward over T <=
 * max_batch tokens overwrites only positions older than any query of the batch — or of the
 * sequence after trimming up to max_batch of them — can see, so trim(n) only moves `len` back.
 * `high` records the furthest position ever written; trim refuses to expose a slot that a
 * later write already recycled. KV-shared layers (Gemma-4) own no cache. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

/* zeroed, 64-byte aligned floats: kernels then never split a vector load across cache lines */
static float *falloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0) return NULL;
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

/* each scratch buffer starts on a 64-byte boundary */
static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* the largest per-layer widths, which size the scratch */
static void max_dims(const sp_config *c, int *maxD, int *maxKV, int *maxI) {
    *maxD = *maxKV = *maxI = 0;
    for (int i = 0; i < c->n_layers; i++) {
        const sp_layer_config *l = &c->layers[i];
        if (l->head_dim > *maxD) *maxD = l->head_dim;
        if (l->n_kv_heads * l->head_dim > *maxKV) *maxKV = l->n_kv_heads * l->head_dim;
        if (l->ffn_dim > *maxI) *maxI = l->ffn_dim;
    }
    if (c->ple_dim > *maxI) *maxI = c->ple_dim; /* g also holds the PLE gate [T, P] */
}

static size_t kv_scratch_floats(const sp_config *c, int b) {
    int maxD, maxKV, maxI;
    max_dims(c, &maxD, &maxKV, &maxI);
    size_t B = (size_t)b, H = (size_t)c->hidden_size, Q = (size_t)c->n_heads * maxD;
    size_t ple = c->ple_dim > 0 ? (size_t)c->n_layers * c->ple_dim : 0;
    /* x, xn, o, hid: H; q, att: Q; k, v: KV; g, u: I; ple: L·P per token; pg: L·P once */
    return 4 * up16(B * H) + 2 * up16(B * Q) + 2 * up16(B * (size_t)maxKV) + 2 * up16(B * (size_t)maxI) +
           up16(B * ple) + up16(ple);
}

sp_kv *sp_kv_create(const sp_model *m, int max_ctx, int max_batch, sp_err *err) {
    const sp_config *c = &m->cfg;
    if (max_ctx <= 0 || max_batch <= 0) {
        sp_err_set(err, "kv cache: max_ctx (%d) and max_batch (%d) must be > 0", max_ctx, max_batch);
        return NULL;
    }
    if (max_batch > max_ctx) max_batch = max_ctx;
    sp_kv *kv = calloc(1, sizeof *kv);
    int L = c->n_layers;
    if (!kv) goto oom;
    kv->m = m;
    kv->max_ctx = max_ctx;
    kv->max_batch = max_batch;
    kv->cap = calloc((size_t)L, sizeof(int));
    kv->ring = calloc((size_t)L, sizeof(int));
    kv->K = calloc((size_t)L, sizeof(float *));
    kv->V = calloc((size_t)L, sizeof(float *));
    if (!kv->cap || !kv->ring || !kv->K || !kv->V) goto oom;
    for (int i = 0; i < L; i++) {
        const sp_layer_config *l = &c->layers[i];
        if (l->kv_source != i) continue;
        int cap = max_ctx;
        if (l->sliding && c->sliding_window > 0 && (long)c->sliding_window + max_batch < max_ctx) {
            cap = c->sliding_window + max_batch;
            kv->ring[i] = 1;
        }
        kv->cap[i] = cap;
        size_t n = (size_t)cap * l->n_kv_heads * l->head_dim;
        kv->K[i] = falloc(n);
        kv->V[i] = falloc(n);
        if (!kv->K[i] || !kv->V[i]) goto oom;
    }
    float *s = falloc(kv_scratch_floats(c, max_batch));
    if (!s) goto oom;
    int maxD, maxKV, maxI;
    max_dims(c, &maxD, &maxKV, &maxI);
    size_t B = (size_t)max_batch, H = (size_t)c->hidden_size, Q = (size_t)c->n_heads * maxD;
    kv->x = s; s += up16(B * H);
    kv->xn = s; s += up16(B * H);
    kv->o = s; s += up16(B * H);
    kv->hid = s; s += up16(B * H);
    kv->q = s; s += up16(B * Q);
    kv->att = s; s += up16(B * Q);
    kv->k = s; s += up16(B * maxKV);
    kv->v = s; s += up16(B * maxKV);
    kv->g = s; s += up16(B * maxI);
    kv->u = s; s += up16(B * maxI);
    kv->ple = s; s += c->ple_dim > 0 ? up16(B * c->n_layers * c->ple_dim) : 0;
    kv->pg = s;
    return kv;
oom:
    sp_err_set(err, "out of memory creating a KV cache for %d positions", max_ctx);
    sp_kv_free(kv);
    return NULL;
}

void sp_kv_free(sp_kv *kv) {
    if (!kv) return;
    int L = kv->m->cfg.n_layers;
    for (int i = 0; kv->K && i < L; i++) free(kv->K[i]);
    for (int i = 0; kv->V && i < L; i++) free(kv->V[i]);
    free(kv->K);
    free(kv->V);
    free(kv->cap);
    free(kv->ring);
    free(kv->x);
    free(kv);
}

int sp_kv_len(const sp_kv *kv) { return kv->len; }

void sp_kv_clear(sp_kv *kv) {
    kv->len = 0;
    kv->high = 0;
}

int sp_kv_trim(sp_kv *kv, int n, sp_err *err) {
    if (n < 0 || n > kv->len) return sp_err_set(err, "kv trim: cannot remove %d of %d entries", n, kv->len);
    /* ring slots of positions >= newlen - window were recycled only if high - newlen > max_batch */
    if (kv->high - (kv->len - n) > kv->max_batch) {
        for (int i = 0; i < kv->m->cfg.n_layers; i++)
            if (kv->ring[i])
                return sp_err_set(err,
                                  "kv trim: removing %d entries would expose sliding-window slots already "
                                  "overwritten (at most %d positions behind the newest write can be rolled back)",
                                  n, kv->max_batch);
    }
    kv->len -= n;
    return 0;
}

sp_block_seg sp_kv_layer_seg(const sp_kv *kv, int layer, int T, int pos0) {
    int src = kv->m->cfg.layers[layer].kv_source;
    return (sp_block_seg){T, pos0, kv->K[src], kv->V[src], kv->cap[src], kv->ring[src], NULL};
}

int sp_kv_high(const sp_kv *kv) { return kv->high; }
int sp_kv_max_batch(const sp_kv *kv) { return kv->max_batch; }

int sp_kv_keep_rows(sp_kv *kv, int n_tree, const int32_t *rows, int k, sp_err *err) {
    int pos0 = kv->len - n_tree;
    if (n_tree < 1 || pos0 < 0 || k < 0 || k > n_tree)
        return sp_err_set(err, "kv keep rows: keeping %d of %d tree rows in a cache of %d", k, n_tree, kv->len);
    for (int i = 0; i < k; i++)
        if (rows[i] < 0 || rows[i] >= n_tree || (i > 0 && rows[i] <= rows[i - 1]))
            return sp_err_set(err, "kv keep rows: row %d at index %d (expected increasing rows in 0..%d)", rows[i], i,
                              n_tree - 1);
    /* rows[i] >= i, so copying in increasing i never overwrites a row still to be moved */
    const sp_config *c = &kv->m->cfg;
    for (int li = 0; li < c->n_layers; li++) {
        if (!kv->K[li]) continue; /* KV-shared layer */
        size_t row = (size_t)c->layers[li].n_kv_heads * c->layers[li].head_dim;
        for (int i = 0; i < k; i++) {
            if (rows[i] == i) continue;
            int from = pos0 + rows[i], to = pos0 + i;
            if (kv->ring[li]) from %= kv->cap[li], to %= kv->cap[li];
            memcpy(kv->K[li] + (size_t)to * row, kv->K[li] + (size_t)from * row, row * sizeof(float));
            memcpy(kv->V[li] + (size_t)to * row, kv->V[li] + (size_t)from * row, row * sizeof(float));
        }
    }
    kv->len = pos0 + k;
    return 0;
}
