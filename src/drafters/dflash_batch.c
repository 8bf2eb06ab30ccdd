/* dflash_batch.c — DFlash / DSpark drafters that share one loaded checkpoint, and their batched
 * proposal (docs/server-batching.md).
 *
 * sp_dflash_clone makes a drafter that borrows every weight of a loaded one (the mapped
 * safetensors and the small converted arrays) and owns only its sequence state: context K/V
 * caches, scratch, sampler, Markov bias cache. The server clones one per request.
 *
 * sp_dflash_propose_batch proposes for several such drafters with one block forward: the blocks
 * [pending, mask …] of every drafter are stacked into N = Σ T_i rows, and every matmul, norm and
 * activation runs over all N rows at once (so each weight is read once per layer for the whole
 * batch); RoPE, the K/V writes and the non-causal block attention run per drafter, against that
 * drafter's own context cache and positions; the LM head and the heads / sampling run per drafter.
 * A clone also defers its context updates: commit() keeps the taps rows of the committed tokens,
 * and they are injected (fc, hidden norm, each layer's K/V) just before the clone's next block
 * forward — for all the drafters of a batch in one pass over their stacked rows — or once LAZY_MAX
 * rows wait, so a request that verifies no drafts for a while pays one batched injection now and
 * then instead of one small one per step.
 * The kernels are batch-invariant (each row is computed with the same operations whatever the row
 * count), so every drafter's context, hidden rows, logits and drafts are bit-identical to those of
 * a drafter loaded alone; tests/test_dflash_batch.c checks this. The layers run through the one
 * decoder-layer executor (model/block.h), one segment per drafter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/prof.h"
#include "drafters/dflash_internal.h"
#include "model/block.h"
#include "decode/spec.h"

#define LAZY_MAX 48 /* context rows a clone lets wait before injecting them (bounded memory) */

static int inject_batch(df_t *const *ss, int n, sp_err *err);
static void block_forward_batch(df_t *w, df_t *const *ss, int n, int32_t (*blk)[SP_SPEC_MAX_G + 2], const int *T);
static int lazy_append(df_t *s, const float *taps, int R, sp_err *err);

/* a clone's propose: its waiting context rows, then dflash.c's proposal around the block forward */
static int clone_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    df_t *s = d->self;
    int32_t blk[1][SP_SPEC_MAX_G + 2];
    int g, T = sp_df_block_prepare(s, max_g, blk[0], &g);
    if (T <= 0) return 0;
    if (s->n_lazy && inject_batch(&s, 1, err)) return -1;
    double t0 = sp_time_ms();
    block_forward_batch(s, &s, 1, blk, &T);
    s->info.ms_block += sp_time_ms() - t0;
    return sp_df_block_drafts(s, max_g, g, drafts, q, d->constraint, err);
}

/* a clone's commit: df_commit's bookkeeping; the rows wait in s->lazy */
static int clone_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    df_t *s = d->self;
    (void)hidden;
    if (n_acc < 0 || n_acc > s->n_last)
        return sp_err_set(err, "dflash: %d drafts accepted of %d proposed", n_acc, s->n_last);
    if (s->o.on_round && s->conf) s->o.on_round(s->o.on_round_ctx, s->z_last, s->n_last, n_acc);
    s->pending = next;
    s->n_last = 0;
    return lazy_append(s, taps, n_acc + 1, err);
}

/* rows [R, m·H] join the waiting ones (injected first when they would not fit) */
static int lazy_append(df_t *s, const float *taps, int R, sp_err *err) {
    size_t w = (size_t)s->m * s->H;
    while (R > 0) {
        if (s->n_lazy == s->cap_lazy && inject_batch(&s, 1, err)) return -1;
        int c = R < s->cap_lazy - s->n_lazy ? R : s->cap_lazy - s->n_lazy;
        memcpy(s->lazy + (size_t)s->n_lazy * w, taps, (size_t)c * w * sizeof(float));
        s->n_lazy += c, taps += (size_t)c * w, R -= c;
    }
    return 0;
}

/* a clone's extend (drafter.h): df_extend's bookkeeping; the rows wait in s->lazy */
static int clone_extend(sp_drafter *d, const int32_t *tokens, int n, const float *taps, const float *hidden,
                        sp_err *err) {
    df_t *s = d->self;
    (void)hidden;
    if (n < 1 || s->n_last) return sp_err_set(err, "dflash: extend by %d rows with %d drafts pending", n, s->n_last);
    s->pending = tokens[n - 1];
    return lazy_append(s, taps, n, err);
}

sp_drafter *sp_dflash_clone(const sp_drafter *proto, const sp_sample_params *sample, sp_err *err) {
    sp_dflash_info info;
    if (!proto || sp_dflash_info_get(proto, &info)) {
        sp_err_set(err, "dflash clone: the prototype is not a DFlash / DSpark drafter");
        return NULL;
    }
    const df_t *p = proto->self;
    sp_drafter *d = malloc(sizeof *d);
    df_t *s = malloc(sizeof *s);
    if (!d || !s) {
        free(d), free(s);
        sp_err_set(err, "dflash clone: out of memory");
        return NULL;
    }
    *d = *proto; /* name, hooks, taps wanted, batch key */
    *s = *p;     /* weights, config, options: borrowed */
    d->self = s;
    d->tap_layers = s->taps;
    /* what a clone owns: nothing yet */
    s->st = NULL;
    s->owned = (sp_owner){0};
    s->smp = NULL;
    s->kept = NULL, s->n_kept = s->cap_kept = 0;
    s->cap = s->n_ctx = s->n_last = s->n_pushed = 0;
    s->pen = NULL;
    s->bc = NULL, s->bc_tag = NULL, s->n_bc = 0;
    s->info = (sp_dflash_info){.kind = s->kind, .block_size = s->block_size, .max_drafts = s->max_drafts,
                               .markov_rank = s->r, .has_conf = s->conf, .n_taps = s->m, .tap_layers = s->taps,
                               .qk_norm = s->qk_norm};
    s->layers = sp_owner_calloc(&s->owned, sizeof(df_layer) * (size_t)s->L);
    if (s->layers) {
        for (int i = 0; i < s->L; i++) {
            s->layers[i] = p->layers[i];
            s->layers[i].K = s->layers[i].V = NULL;
        }
    }
    s->lazy = s->gather = NULL, s->n_lazy = s->cap_lazy = 0;
    if (!s->o.keep_taps) { /* (keep_taps records rows as they are injected: eager, as loaded) */
        size_t w = (size_t)s->m * s->H;
        s->cap_lazy = LAZY_MAX + s->max_drafts + 1;
        s->lazy = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)s->cap_lazy * w);
        s->gather = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)s->R * w);
        d->propose = clone_propose;
        d->commit = clone_commit;
        if (d->extend) d->extend = clone_extend;
    }
    if (!s->layers || sp_df_scratch_alloc(s) || (!s->o.keep_taps && (!s->lazy || !s->gather))) {
        sp_err_set(err, "dflash clone: out of memory");
        goto fail;
    }
    if (sp_df_sampling_setup(s, sample, err)) goto fail;
    d->provides_q = !s->greedy;
    if (sp_df_ensure_cap(s, 256, err)) goto fail;
    return d;
fail:
    sp_drafter_free(d);
    return NULL;
}

/* Inject the waiting context rows of the n drafters ss[] (inject in dflash.c, row-stacked): the
 * rows go through fc and the hidden norm, then each layer's K/V, in passes of at most R rows (R of
 * ss[0], whose scratch is the work area); each drafter's rows land at its own positions. */
static int inject_batch(df_t *const *ss, int n, sp_err *err) {
    df_t *w = ss[0];
    int H = w->H;
    size_t mw = (size_t)w->m * H;
    float eps = (float)w->dc.rms_eps;
    double t0 = sp_time_ms();
    for (int i = 0; i < n; i++)
        if (ss[i]->n_lazy && sp_df_ensure_cap(ss[i], ss[i]->n_ctx + ss[i]->n_lazy + ss[i]->max_drafts + 1, err)) return -1;
    int prof = sp_prof_enter(SP_PROF_CTX_KV);
    int si = 0, r0 = 0; /* next row: drafter si, its row r0 */
    while (si < n) {
        /* a pass: segments (drafter, first row, rows) gathered up to R rows */
        int seg_s[n], seg_r[n], seg_c[n], ns = 0, N = 0;
        for (; si < n && N < w->R; si++, r0 = 0) {
            int c = ss[si]->n_lazy - r0;
            if (c <= 0) continue;
            if (c > w->R - N) c = w->R - N;
            memcpy(w->gather + (size_t)N * mw, ss[si]->lazy + (size_t)r0 * mw, (size_t)c * mw * sizeof(float));
            seg_s[ns] = si, seg_r[ns] = r0, seg_c[ns] = c, ns++;
            N += c;
            if (r0 + c < ss[si]->n_lazy) { /* the pass is full: this drafter goes on in the next */
                r0 += c;
                break;
            }
        }
        if (N == 0) break;
        sp_matmul(w->pool, w->x, w->gather, N, &w->fc);
        sp_rmsnorm(w->x, w->x, w->hidden_norm, N, H, eps);
        sp_block_scratch scr = {.xn = w->xn, .q = w->q, .k = w->k, .v = w->v,
                            .att = w->att, .o = w->o2, .g = w->g, .u = w->u};
        sp_block_seg segs[n];
        for (int li = 0; li < w->L; li++) { /* write_kv over every segment, each into its own cache */
            for (int k = 0; k < ns; k++) {
                df_t *s = ss[seg_s[k]];
                segs[k] = (sp_block_seg){seg_c[k], s->n_ctx + seg_r[k], s->layers[li].K, s->layers[li].V, s->cap, 0, NULL, NULL, NULL};
            }
            sp_block_kv_write(w->pool, &w->layers[li].b, w->x, N, segs, ns, &scr);
        }
    }
    for (int i = 0; i < n; i++) {
        ss[i]->n_ctx += ss[i]->n_lazy;
        ss[i]->n_lazy = 0;
    }
    sp_prof_leave(prof);
    w->info.ms_inject += sp_time_ms() - t0;
    return 0;
}

/* One batched block forward over the n drafters ss[] (blocks blk[i][0..T[i]) at their positions
 * n_ctx ..), in w's scratch (Σ T ≤ w->R rows): each drafter's s->hid [T, H] and s->logits [T, V],
 * its block K/V in its own cache (dropped by not advancing n_ctx, as in block_forward). */
static void block_forward_batch(df_t *w, df_t *const *ss, int n, int32_t (*blk)[SP_SPEC_MAX_G + 2], const int *T) {
    int H = w->H, N = 0, prof = sp_prof_enter(SP_PROF_BLOCK);
    float eps = (float)w->dc.rms_eps;
    int off[n];
    for (int i = 0; i < n; i++) {
        off[i] = N;
        for (int t = 0; t < T[i]; t++) sp_model_embed(w->target, w->x + (size_t)(N + t) * H, blk[i][t]);
        N += T[i];
    }
    sp_block_scratch scr = {.xn = w->xn, .q = w->q, .k = w->k, .v = w->v,
                            .att = w->att, .o = w->o2, .g = w->g, .u = w->u};
    sp_block_seg segs[n];
    int ns = 0;
    for (int li = 0; li < w->L; li++) { /* the shared layer over every block; each its own cache */
        ns = 0;
        for (int i = 0; i < n; i++)
            if (T[i] > 0)
                segs[ns++] = (sp_block_seg){T[i], ss[i]->n_ctx, ss[i]->layers[li].K, ss[i]->layers[li].V, ss[i]->cap, 0, NULL, NULL, NULL};
        sp_block_forward(w->pool, &w->layers[li].b, w->x, N, segs, ns, NULL, 0, &scr);
    }
    /* final norm into xn (w->hid is w's own output, and a later group must not overwrite it) */
    sp_rmsnorm(w->xn, w->x, w->final_norm, N, H, eps);
    sp_prof_leave(prof);
    for (int i = 0; i < n; i++) {
        df_t *s = ss[i];
        if (T[i] <= 0) continue;
        memcpy(s->hid, w->xn + (size_t)off[i] * H, (size_t)T[i] * H * sizeof(float));
        sp_model_logits(s->target, s->logits, s->hid, T[i]); /* the target's LM head (+ soft-cap) */
    }
}

int sp_dflash_propose_batch(sp_drafter *const *ds, int n, const int *max_g, int32_t *const *drafts, float *const *q,
                            int *n_drafts, sp_err *err) {
    if (n <= 0) return 0;
    sp_dflash_info info;
    for (int i = 0; i < n; i++) {
        if (sp_dflash_info_get(ds[i], &info) || !ds[i]->batch_key || ds[i]->batch_key != ds[0]->batch_key)
            return sp_err_set(err, "dflash batch: drafter %d of %d does not share the first one's checkpoint", i, n);
        for (int j = 0; j < i; j++)
            if (ds[j] == ds[i]) return sp_err_set(err, "dflash batch: drafter %d appears twice", i);
    }
    df_t *w = ds[0]->self; /* its scratch is the work area */
    df_t *ss[n];
    int32_t(*blk)[SP_SPEC_MAX_G + 2] = malloc(sizeof *blk * (size_t)n);
    int T[n], g[n];
    if (!blk) return sp_err_set(err, "dflash batch: out of memory");
    df_t *fl[n];
    int nfl = 0;
    for (int i = 0; i < n; i++) {
        ss[i] = ds[i]->self;
        n_drafts[i] = 0;
        T[i] = sp_df_block_prepare(ss[i], max_g[i], blk[i], &g[i]);
        /* context rows wait until a block needs them, or until many wait */
        if (ss[i]->n_lazy && (T[i] > 0 || ss[i]->n_lazy >= LAZY_MAX)) fl[nfl++] = ss[i];
    }
    if (nfl && inject_batch(fl, nfl, err)) {
        free(blk);
        return -1;
    }
    /* groups of consecutive drafters whose blocks fit the work area */
    for (int i0 = 0; i0 < n;) {
        int i1 = i0, rows = 0;
        while (i1 < n && (i1 == i0 || rows + T[i1] <= w->R)) rows += T[i1++]; /* T <= R always */
        double t0 = sp_time_ms();
        block_forward_batch(w, ss + i0, i1 - i0, blk + i0, T + i0);
        double ms = sp_time_ms() - t0;
        for (int i = i0; i < i1 && rows > 0; i++) ss[i]->info.ms_block += ms * T[i] / rows;
        i0 = i1;
    }
    free(blk);
    for (int i = 0; i < n; i++) {
        if (T[i] <= 0) continue;
        n_drafts[i] = sp_df_block_drafts(ss[i], max_g[i], g[i], drafts[i], q[i], NULL, err);
        if (n_drafts[i] < 0) return -1;
    }
    return 0;
}
