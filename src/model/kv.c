/* kv.c — per-sequence KV caches and forward scratch.
 *
 * Full-attention layers keep a linear cache of max_ctx positions. Sliding layers keep a ring of
 * window + max_batch slots (position p in slot p % cap) when that is smaller than max_ctx. The
 * extra max_batch slots are what make rollback safe right after a wrap: a forward over T <=
 * max_batch tokens overwrites only positions older than any query of the batch — or of the
 * sequence after trimming up to max_batch of them — can see, so trim(n) only moves `len` back.
 * `high` records the furthest position ever written; trim refuses to expose a slot that a
 * later write already recycled. KV-shared layers (Gemma-4) own no cache.
 *
 * Typed caches (f16, bf16, q8_0: sp_model_set_kv_types) hold each row in that type. A forward sees
 * a layer's cache through an f32 view (stK / stV) that sp_kv_layer_seg fills from the rows written
 * so far; a row the forward writes is stored in the type and rounded in the view at once (the
 * segment's store hook), so attention reads the same values whichever forward wrote a row. */
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model_internal.h"

/* zeroed, 64-byte aligned floats: kernels then never split a vector load across cache lines */
static float *falloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0) return NULL;
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

/* zeroed, 64-byte aligned bytes */
static void *balloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 1) != 0) return NULL;
    memset(p, 0, n ? n : 1);
    return p;
}

const char *sp_kv_type_name(sp_kv_type t) {
    static const char *names[] = {"f32", "f16", "bf16", "q8_0"};
    return (unsigned)t < 4 ? names[t] : "?";
}

int sp_kv_type_parse(const char *name, sp_kv_type *t, sp_err *err) {
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, sp_kv_type_name((sp_kv_type)i))) {
            *t = (sp_kv_type)i;
            return 0;
        }
    return sp_err_set(err, "KV cache type '%s' (expected f32, f16, bf16 or q8_0)", name ? name : "");
}

int sp_model_set_kv_types(sp_model *m, sp_kv_type k, sp_kv_type v, sp_err *err) {
    if ((unsigned)k > SP_KV_Q8_0 || (unsigned)v > SP_KV_Q8_0) return sp_err_set(err, "KV cache type out of range");
    for (int i = 0; (k == SP_KV_Q8_0 || v == SP_KV_Q8_0) && i < m->cfg.n_layers; i++) {
        const sp_layer_config *l = &m->cfg.layers[i];
        if ((l->n_kv_heads * l->head_dim) % SP_QK8_0)
            return sp_err_set(err, "KV cache type q8_0: layer %d has %d x %d = %d K/V values per row, not a multiple of %d",
                              i, l->n_kv_heads, l->head_dim, l->n_kv_heads * l->head_dim, SP_QK8_0);
    }
    m->kv_k = k, m->kv_v = v;
    return 0;
}

/* bytes of n values of type t (n a multiple of SP_QK8_0 for q8_0) */
static size_t type_bytes(sp_kv_type t, size_t n) {
    if (t == SP_KV_Q8_0) return n / SP_QK8_0 * sizeof(sp_block_q8_0);
    return n * (t == SP_KV_F32 ? 4 : 2);
}

/* x [n] stored into dst in type t; x rounded in place to the stored values */
static void row_put(sp_kv_type t, void *dst, float *x, size_t n) {
    uint16_t *h = dst;
    if (t == SP_KV_F16)
        for (size_t i = 0; i < n; i++) h[i] = sp_f32_to_f16(x[i]), x[i] = sp_f16_to_f32(h[i]);
    else if (t == SP_KV_BF16)
        for (size_t i = 0; i < n; i++) h[i] = sp_f32_to_bf16(x[i]), x[i] = sp_bf16_to_f32(h[i]);
    else if (t == SP_KV_Q8_0) {
        sp_quantize_row_q8_0(dst, x, n);
        sp_dequantize_row_q8_0(x, dst, n);
    } else {
        memcpy(dst, x, n * sizeof(float));
    }
}

/* n values of type t from src as f32 into y */
static void rows_get(sp_kv_type t, float *y, const void *src, size_t n) {
    const uint16_t *h = src;
    if (t == SP_KV_F16)
        for (size_t i = 0; i < n; i++) y[i] = sp_f16_to_f32(h[i]);
    else if (t == SP_KV_BF16)
        for (size_t i = 0; i < n; i++) y[i] = sp_bf16_to_f32(h[i]);
    else if (t == SP_KV_Q8_0)
        sp_dequantize_row_q8_0(y, src, n);
    else
        memcpy(y, src, n * sizeof(float));
}

/* the store hook of a typed layer's segment (block.h): the rows at slot into the cache, rounded */
static void kv_store(const void *ctx, int slot, float *k, float *v) {
    const sp_kv_store_ctx *c = ctx;
    const sp_kv *kv = c->kv;
    const sp_layer_config *l = &kv->m->cfg.layers[c->layer];
    size_t row = (size_t)l->n_kv_heads * l->head_dim;
    row_put(kv->kt, (char *)kv->Kc[c->layer] + type_bytes(kv->kt, row) * (size_t)slot, k, row);
    row_put(kv->vt, (char *)kv->Vc[c->layer] + type_bytes(kv->vt, row) * (size_t)slot, v, row);
}

/* layer i's cache of cap rows of `row` values: f32 arrays, or typed ones (and the view's size) */
static int layer_alloc(sp_kv *kv, int i, int cap, size_t row, size_t *view) {
    size_t n = (size_t)cap * row;
    kv->store[i] = (sp_kv_store_ctx){kv, i};
    if (kv->kt == SP_KV_F32 && kv->vt == SP_KV_F32) {
        kv->K[i] = falloc(n);
        kv->V[i] = falloc(n);
        return kv->K[i] && kv->V[i] ? 0 : -1;
    }
    if (n > *view) *view = n;
    kv->Kc[i] = balloc(type_bytes(kv->kt, n));
    kv->Vc[i] = balloc(type_bytes(kv->vt, n));
    return kv->Kc[i] && kv->Vc[i] ? 0 : -1;
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
    if (c->n_experts > 0 && c->moe_ffn_dim > *maxI) *maxI = c->moe_ffn_dim; /* and one expert's rows */
}

/* the MoE scratch (block.h): ex, ey, mo [B, H]; router [B, E]; ew, esel [B, k]; erow [B]; eg, eu [k, Ie] */
static size_t kv_moe_floats(const sp_config *c, size_t B) {
    if (c->n_experts <= 0) return 0;
    size_t H = (size_t)c->hidden_size, E = (size_t)c->n_experts, k = (size_t)c->n_experts_used;
    return 3 * up16(B * H) + up16(B * E) + 2 * up16(B * k) + up16(B) + 2 * up16(k * (size_t)c->moe_ffn_dim);
}

static size_t kv_scratch_floats(const sp_config *c, int b) {
    int maxD, maxKV, maxI;
    max_dims(c, &maxD, &maxKV, &maxI);
    size_t B = (size_t)b, H = (size_t)c->hidden_size, Q = (size_t)c->n_heads * maxD;
    size_t ple = c->ple_dim > 0 ? (size_t)c->n_layers * c->ple_dim : 0;
    /* x, xn, o, hid: H; q, att: Q; k, v: KV; g, u: I; ple: L·P per token; pg: L·P once */
    return 4 * up16(B * H) + 2 * up16(B * Q) + 2 * up16(B * (size_t)maxKV) + 2 * up16(B * (size_t)maxI) +
           up16(B * ple) + up16(ple) + kv_moe_floats(c, B);
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
    kv->Kc = calloc((size_t)L, sizeof(void *));
    kv->Vc = calloc((size_t)L, sizeof(void *));
    kv->store = calloc((size_t)L, sizeof *kv->store);
    if (!kv->cap || !kv->ring || !kv->K || !kv->V || !kv->Kc || !kv->Vc || !kv->store) goto oom;
    kv->kt = m->kv_k, kv->vt = m->kv_v;
    size_t view = 0;
    for (int i = 0; i < L; i++) {
        const sp_layer_config *l = &c->layers[i];
        if (l->kv_source != i) continue;
        int cap = max_ctx;
        if (l->sliding && c->sliding_window > 0 && (long)c->sliding_window + max_batch < max_ctx) {
            cap = c->sliding_window + max_batch;
            kv->ring[i] = 1;
        }
        kv->cap[i] = cap;
        if (layer_alloc(kv, i, cap, (size_t)l->n_kv_heads * l->head_dim, &view)) goto oom;
    }
    if (view && (!(kv->stK = falloc(view)) || !(kv->stV = falloc(view)))) goto oom;
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
    kv->pg = s; s += c->ple_dim > 0 ? up16((size_t)c->n_layers * c->ple_dim) : 0;
    if (c->n_experts > 0) { /* int32 arrays share the float block (both 4 bytes) */
        size_t E = (size_t)c->n_experts, k = (size_t)c->n_experts_used;
        kv->ex = s; s += up16(B * H);
        kv->ey = s; s += up16(B * H);
        kv->mo = s; s += up16(B * H);
        kv->router = s; s += up16(B * E);
        kv->ew = s; s += up16(B * k);
        kv->esel = (int32_t *)s; s += up16(B * k);
        kv->erow = (int32_t *)s; s += up16(B);
        kv->eg = s; s += up16(k * (size_t)c->moe_ffn_dim);
        kv->eu = s;
    }
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
    for (int i = 0; kv->Kc && i < L; i++) free(kv->Kc[i]);
    for (int i = 0; kv->Vc && i < L; i++) free(kv->Vc[i]);
    free(kv->K);
    free(kv->V);
    free(kv->Kc), free(kv->Vc), free(kv->store), free(kv->stK), free(kv->stV);
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
    if (!kv->Kc[src]) return (sp_block_seg){T, pos0, kv->K[src], kv->V[src], kv->cap[src], kv->ring[src], NULL, NULL, NULL};
    /* a typed cache: its written slots into the f32 view, the rows this forward writes included:
     * a KV-shared layer reads them from its source layer's cache, where the source layer stored
     * them earlier in the same forward (the view itself last held another layer's rows) */
    const sp_layer_config *l = &kv->m->cfg.layers[src];
    size_t row = (size_t)l->n_kv_heads * l->head_dim;
    int n = kv->high > pos0 + T ? kv->high : pos0 + T;
    if (n > kv->cap[src]) n = kv->cap[src];
    rows_get(kv->kt, kv->stK, kv->Kc[src], (size_t)n * row);
    rows_get(kv->vt, kv->stV, kv->Vc[src], (size_t)n * row);
    return (sp_block_seg){T, pos0, kv->stK, kv->stV, kv->cap[src], kv->ring[src], NULL, kv_store, &kv->store[src]};
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
        if (!kv->cap[li]) continue; /* KV-shared layer */
        size_t row = (size_t)c->layers[li].n_kv_heads * c->layers[li].head_dim;
        size_t kb = type_bytes(kv->kt, row), vb = type_bytes(kv->vt, row);
        char *K = kv->K[li] ? (char *)kv->K[li] : kv->Kc[li], *V = kv->V[li] ? (char *)kv->V[li] : kv->Vc[li];
        for (int i = 0; i < k; i++) {
            if (rows[i] == i) continue;
            size_t from = (size_t)(pos0 + rows[i]), to = (size_t)(pos0 + i);
            if (kv->ring[li]) from %= (size_t)kv->cap[li], to %= (size_t)kv->cap[li];
            memcpy(K + to * kb, K + from * kb, kb);
            memcpy(V + to * vb, V + from * vb, vb);
        }
    }
    kv->len = pos0 + k;
    return 0;
}

double sp_kv_moe_experts(const sp_kv *kv) {
    return kv->moe_layers > 0 ? (double)kv->moe_touched / kv->moe_layers : 0.0;
}
