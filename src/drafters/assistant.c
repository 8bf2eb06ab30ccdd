/* assistant.c — the Gemma-4 assistant drafter (docs/ASSISTANT.md; see assistant.h).
 *
 * One draft step (docs/ASSISTANT.md §3), d = d_a the assistant width, Hb the target width:
 *   z  = [target_embed(tok)·sqrt(Hb) ; g] · W_preᵀ                      [d]
 *   h  = L × Gemma-4 decoder layer on z (docs/TRANSFORMER.md §5) with Q-only attention:
 *          q = RoPE_t(q_norm(q_proj(x))) at the round's constant position p,
 *          keys/values = the target's cache of its last non-shared layer of type t
 *   h  = norm(h);   logits = head(h) (no softcap);   g' = h · W_postᵀ      [Hb]
 *
 * Stepping (docs/ASSISTANT.md §4, the "clean engine" reading): the committed stream is x_0..x_t with x_t pending
 * (not yet forwarded by the target, so the target cache holds positions 0..t−1). A round starts
 * from tok = x_t, g = the target's final-norm hidden state at position t−1 (the state that
 * produced x_t), and runs every step at p = t; each step feeds its draft and its g' to the next.
 * The assistant keeps no cache of its own: rejected drafts leave nothing to roll back, and commit
 * only takes the new pending token and hidden row.
 *
 * Which target keys a step sees: full layers all of positions 0..t−1; sliding layers the W most
 * recent ones, t−W..t−1 (W = sliding_window) — the count docs/ASSISTANT.md §3 describes for HF ("the most
 * recent sliding_window borrowed keys"); llama.cpp sees W−1 (docs/ASSISTANT.md §5), HF's overlay may admit W+1
 * (docs/ASSISTANT.md §5). The stale row of a rejected draft is never visible: the engine trims the target cache
 * before the next round and the step reads only positions < t. Reading t−W..t−1 out of the
 * target's ring is safe right after a wrap: the ring holds W + max_batch slots and the cache
 * never runs more than max_batch positions past its length (sp_kv_trim enforces it), so slot
 * (t−W) mod cap was last written by position t−W itself.
 *
 * Draft choice: greedy params → argmax (lowest id on ties); otherwise the token is drawn from q,
 * the head's distribution processed with the drafter's sample params: for the centroid head every
 * token outside the kept clusters has q = 0 (its logit is −inf), and q is what the engine's
 * rejection rule receives, so verification stays lossless. Draws use stream SP_RNG_STREAM_DRAFT at
 * the draft's absolute position. A round stops early after an EOS draft (as HF does). Under the
 * engine's constraint (a grammar, sp_draft_constraint) each draft comes from the full head row
 * masked to the tokens allowed after the drafts before it, and the round ends where the mask says so. */
#include "drafters/assistant.h"
#include "drafters/kind.h"
#include "drafters/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/prof.h"
#include "formats/newdrafter_assistant.h"
#include "formats/safetensors.h"
#include "model/block.h"
#include "model/model.h"
#include "decode/spec.h"

typedef struct {
    sp_block_layer b;          /* the Gemma-4 decoder layer (model/block.h), Q-only: no wk / wv / k_norm */
    int src;                   /* target layer whose K/V cache this layer reads */
} asst_layer;

typedef struct {
    sp_assistant_config ac;
    st_set *st;
    sp_model *target;
    int d, Hb, V, NH, L, window;
    float eps;
    sp_mat pre;                /* [d, 2·Hb] */
    sp_mat post;               /* [Hb, d] */
    sp_mat lm;                 /* [V, d] tied head (the assistant's own embed_tokens) */
    float *final_norm;         /* [d] */
    asst_layer *layers;        /* [L] */
    /* centroid head (centroid = 1) */
    int centroid;
    sp_mat cent;               /* [NC, d] */
    int32_t *order;            /* [V] token_ordering: cluster c lists order[c·per .. (c+1)·per) */
    int NC, per, topk, n_cand; /* n_cand = topk · per */
    /* drafting */
    int greedy;
    sp_sampler *smp;
    const sp_kv *kv;           /* the request's target cache (read only) */
    uint64_t seed;
    sp_penalty *pen;           /* the request's repetition penalties (NULL: none) */
    int32_t pending;
    int have_g;                /* 0 until a hidden row is known (one-token prompt) */
    int n_last;                /* drafts of the last proposal */
    /* state and scratch */
    float *g;                  /* [Hb] the carried state for the pending token */
    float *ga, *gb;            /* [Hb] per-step g in / out */
    float *cat;                /* [2·Hb] */
    float *x, *xn, *o, *h;     /* [d] */
    float *q, *att;            /* [NH · maxD] */
    float *gate, *up;          /* [maxI] */
    float *cscore;             /* [NC] */
    int *clusters;             /* [topk] */
    int32_t *cand;             /* [n_cand] candidate token ids */
    float *cand_logit;         /* [n_cand] */
    float *logits, *probs;     /* [V] */
    sp_owner owned; /* small converted arrays, freed together */
} asst_t;

/* ---- loading ----------------------------------------------------------------------------- */

static void *own(asst_t *s, size_t bytes) { return sp_owner_calloc(&s->owned, bytes); }

static int get_mat(asst_t *s, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    const st_tensor *t;
    int64_t shape[2] = {n, k};
    if (sp_st_get(s->st, name, SP_DT_UNKNOWN, 2, shape, &t, err)) return -1;
    *out = (sp_mat){t->data, t->dtype, n, k, sp_model_bf16_dot(s->target), NULL}; /* the target's numerics */
    return 0;
}

static int get_vec(asst_t *s, const char *name, int n, float **out, sp_err *err) {
    return sp_drafter_weight_vec(s->st, &s->owned, name, n, out, err);
}

/* shapes of the target layer `src` must match assistant layer i (docs/ASSISTANT.md §1 table note) */
static int check_borrowed(const asst_t *s, int i, const sp_config *tc, sp_err *err) {
    const sp_layer_config *al = &s->ac.text.layers[i];
    const char *type = al->sliding ? "sliding" : "full";
    int src = s->layers[i].src;
    if (src < 0)
        return sp_err_set(err, "assistant layer %d is a sliding layer but the target has no sliding layers", i);
    const sp_layer_config *tl = &tc->layers[src];
    if (tl->head_dim != al->head_dim)
        return sp_err_set(err, "assistant layer %d (%s): head_dim %d differs from the target's borrowed layer %d (%d)",
                          i, type, al->head_dim, src, tl->head_dim);
    if (tl->n_kv_heads != al->n_kv_heads)
        return sp_err_set(err,
                          "assistant layer %d (%s): %d KV heads in config, but the target's borrowed layer %d has %d",
                          i, type, al->n_kv_heads, src, tl->n_kv_heads);
    if (s->NH % tl->n_kv_heads)
        return sp_err_set(err, "assistant: %d query heads are not a multiple of the target layer %d's %d KV heads",
                          s->NH, src, tl->n_kv_heads);
    if (al->sliding && s->window != tc->sliding_window)
        return sp_err_set(err, "assistant sliding_window %d differs from the target's %d", s->window,
                          tc->sliding_window);
    return 0;
}

/* the checkpoint's tensor readers as sp_block_bind calls them */
static int bind_mat_cb(void *s, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    return get_mat(s, name, n, k, out, err);
}

static int bind_vec_cb(void *s, const char *name, int n, float **out, sp_err *err) {
    return get_vec(s, name, n, out, err);
}

static int bind_scalar_cb(void *s, const char *name, float *out, sp_err *err) {
    const st_tensor *ls = sp_st_find(((asst_t *)s)->st, name);
    if (!ls) return 1;
    if (ls->numel != 1 || (ls->dtype != SP_DT_F32 && ls->dtype != SP_DT_BF16 && ls->dtype != SP_DT_F16))
        return sp_err_set(err, "tensor %s in %s: expected one float, found %s with %lld elements", name, ls->file,
                          sp_dtype_name(ls->dtype), (long long)ls->numel);
    sp_to_f32(out, ls->data, ls->dtype, 1);
    return 0;
}

static int bind(asst_t *s, const sp_config *tc, sp_err *err) {
    const sp_config *c = &s->ac.text;
    int d = s->d, Hb = s->Hb, V = s->V;
    if (tc->arch != SP_ARCH_GEMMA4)
        return sp_err_set(err, "the assistant drafts for Gemma-4 targets, not %s", sp_arch_name(tc->arch));
    if (Hb != tc->hidden_size)
        return sp_err_set(err, "assistant backbone_hidden_size %d differs from the target's hidden_size %d", Hb,
                          tc->hidden_size);
    if (V != tc->vocab_size)
        return sp_err_set(err, "assistant vocab_size %d differs from the target's %d", V, tc->vocab_size);
    int src_s, src_f;
    sp_assistant_borrowed_layers(tc, &src_s, &src_f);
    if (get_mat(s, "pre_projection.weight", d, 2 * Hb, &s->pre, err) ||
        get_mat(s, "post_projection.weight", Hb, d, &s->post, err) ||
        get_vec(s, "model.norm.weight", d, &s->final_norm, err))
        return -1;
    const char *lm_name = sp_st_find(s->st, "lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";
    if (get_mat(s, lm_name, V, d, &s->lm, err)) return -1;

    s->layers = own(s, (size_t)s->L * sizeof *s->layers);
    if (!s->layers) return sp_err_set(err, "out of memory");
    for (int i = 0; i < s->L; i++) {
        const sp_layer_config *lc = &c->layers[i];
        sp_block_layer *l = &s->layers[i].b;
        /* a Gemma-4 layer whatever the config's other keys say: post norms, GeGLU, q·k unscaled */
        l->d = sp_block_describe(c, i, SP_ATTN_BORROWED);
        l->d.post_norms = 1;
        l->d.qk_norm = 1;
        l->d.kv_proj = 0;
        l->d.act = SP_ACT_GELU_TANH;
        l->d.attn_scale = 1.0f;
        l->d.window = lc->sliding ? s->window : 0;
        l->d.ple_dim = 0;
        s->layers[i].src = lc->sliding ? src_s : src_f;
        if (check_borrowed(s, i, tc, err)) return -1;
        const sp_rope_params *ar = lc->sliding ? &c->rope_swa : &c->rope, *tr = lc->sliding ? &tc->rope_swa : &tc->rope;
        if (ar->type != tr->type || ar->theta != tr->theta || ar->partial_rotary_factor != tr->partial_rotary_factor ||
            ar->factor != tr->factor)
            sp_log(SP_LOG_WARN, "assistant layer %d: rope parameters differ from the target's %s layers (the query "
                   "is rotated with the assistant's, the borrowed keys were rotated with the target's)", i,
                   lc->sliding ? "sliding" : "full");
        sp_block_binder b = {s, "model.", bind_mat_cb, bind_vec_cb, bind_scalar_cb};
        if (sp_block_bind(l, SP_ARCH_GEMMA4, i, &b, err)) return -1;
        int D = l->d.D;
        l->inv_freq = own(s, (size_t)(D / 2) * sizeof(float));
        if (!l->inv_freq) return sp_err_set(err, "out of memory");
        sp_rope_inv_freq(l->inv_freq, D, lc->sliding ? &c->rope_swa : &c->rope);
    }

    /* the head, by tensor presence */
    const st_tensor *ct = sp_st_find(s->st, "masked_embedding.centroids.weight");
    if (!ct) return 0;
    if (ct->ndim != 2 || ct->shape[1] != d || ct->shape[0] <= 0 || V % ct->shape[0])
        return sp_err_set(err, "tensor masked_embedding.centroids.weight in %s: expected [NC, %d] with NC dividing "
                          "the vocabulary (%d)", ct->file, d, V);
    s->centroid = 1;
    s->NC = (int)ct->shape[0];
    s->per = V / s->NC;
    s->topk = s->ac.centroid_top_k < s->NC ? s->ac.centroid_top_k : s->NC;
    s->n_cand = s->topk * s->per;
    if (get_mat(s, "masked_embedding.centroids.weight", s->NC, d, &s->cent, err)) return -1;
    const st_tensor *ot = sp_st_find(s->st, "masked_embedding.token_ordering");
    if (!ot) return sp_err_set(err, "checkpoint has masked_embedding.centroids.weight but no "
                               "masked_embedding.token_ordering");
    if (ot->ndim != 1 || ot->shape[0] != V || (ot->dtype != SP_DT_I64 && ot->dtype != SP_DT_I32))
        return sp_err_set(err, "tensor masked_embedding.token_ordering in %s: expected int64 [%d], found %s with %lld "
                          "elements", ot->file, V, sp_dtype_name(ot->dtype), (long long)ot->numel);
    s->order = own(s, (size_t)V * sizeof(int32_t));
    if (!s->order) return sp_err_set(err, "out of memory");
    for (int i = 0; i < V; i++) {
        int64_t id = ot->dtype == SP_DT_I64 ? ((const int64_t *)ot->data)[i] : ((const int32_t *)ot->data)[i];
        if (id < 0 || id >= V)
            return sp_err_set(err, "masked_embedding.token_ordering[%d] = %lld is outside the vocabulary (%d)", i,
                              (long long)id, V);
        s->order[i] = (int32_t)id;
    }
    return 0;
}

static int alloc_scratch(asst_t *s) {
    int maxD = 0, maxI = 0;
    for (int i = 0; i < s->L; i++) {
        if (s->layers[i].b.d.D > maxD) maxD = s->layers[i].b.d.D;
        if (s->layers[i].b.d.I > maxI) maxI = s->layers[i].b.d.I;
    }
    size_t Hb = (size_t)s->Hb, d = (size_t)s->d, Q = (size_t)s->NH * maxD, V = (size_t)s->V;
    s->g = own(s, Hb * sizeof(float));
    s->ga = own(s, Hb * sizeof(float));
    s->gb = own(s, Hb * sizeof(float));
    s->cat = own(s, 2 * Hb * sizeof(float));
    s->x = own(s, d * sizeof(float));
    s->xn = own(s, d * sizeof(float));
    s->o = own(s, d * sizeof(float));
    s->h = own(s, d * sizeof(float));
    s->q = own(s, Q * sizeof(float));
    s->att = own(s, Q * sizeof(float));
    s->gate = own(s, (size_t)maxI * sizeof(float));
    s->up = own(s, (size_t)maxI * sizeof(float));
    s->logits = own(s, V * sizeof(float));
    s->probs = own(s, V * sizeof(float));
    if (!s->g || !s->ga || !s->gb || !s->cat || !s->x || !s->xn || !s->o || !s->h || !s->q || !s->att || !s->gate ||
        !s->up || !s->logits || !s->probs)
        return -1;
    if (s->centroid) {
        s->cscore = own(s, (size_t)s->NC * sizeof(float));
        s->clusters = own(s, (size_t)s->topk * sizeof(int));
        s->cand = own(s, (size_t)s->n_cand * sizeof(int32_t));
        s->cand_logit = own(s, (size_t)s->n_cand * sizeof(float));
        if (!s->cscore || !s->clusters || !s->cand || !s->cand_logit) return -1;
    }
    return 0;
}

/* ---- one draft step (docs/ASSISTANT.md §3) --------------------------------------------------------------- */

/* h = norm(layers(z)) for tok, g at position pos; g_out = h · W_postᵀ. Each layer's query sits at
 * pos and reads the borrowed cache's positions < pos (see the file comment). */
static void asst_step(asst_t *s, int32_t tok, const float *g, int pos, float *g_out) {
    sp_model *tm = s->target;
    sp_pool *pool = sp_model_pool(tm);
    const sp_kv *kv = s->kv;
    int Hb = s->Hb;
    sp_block_scratch scr = {.xn = s->xn, .q = s->q, .att = s->att, .o = s->o, .g = s->gate, .u = s->up};
    sp_model_embed(tm, s->cat, tok); /* target's scaled embedding, then g */
    memcpy(s->cat + Hb, g, (size_t)Hb * sizeof(float));
    sp_matmul(pool, s->x, s->cat, 1, &s->pre);
    for (int li = 0; li < s->L; li++) {
        int src = s->layers[li].src;
        sp_block_seg seg = sp_kv_layer_seg(kv, src, 1, pos);
        sp_block_forward(pool, &s->layers[li].b, s->x, 1, &seg, 1, NULL, 0, &scr);
    }
    sp_rmsnorm(s->h, s->x, s->final_norm, 1, s->d, s->eps);
    sp_matmul(pool, g_out, s->h, 1, &s->post);
}

/* ---- heads ------------------------------------------------------------------------------- */

/* a before b in the order (score descending, index ascending); NaN sorts last */
static int ranks_before(float a, int ia, float b, int ib) {
    if (a == b) return ia < ib;
    if (isnan(b)) return !isnan(a) || ia < ib;
    return a > b;
}

typedef struct {
    asst_t *s;
    const float *h;
} gather_ctx;

/* cand_logit[c] = h · E[cand[c]]: one 1-row matmul per candidate, so every value is the same
 * canonical dot product the dense h·Eᵀ computes (kernels.h) */
static void gather_task(void *arg, int i, int n) {
    gather_ctx *g = arg;
    asst_t *s = g->s;
    int lo, hi;
    sp_pool_split(s->n_cand, 16, i, n, &lo, &hi);
    size_t row = (size_t)s->d * sp_dtype_size(s->lm.dt);
    for (int c = lo; c < hi; c++) {
        sp_mat w = {(const char *)s->lm.data + (size_t)s->cand[c] * row, s->lm.dt, 1, s->d, s->lm.bf16_dot, NULL};
        sp_matmul(NULL, &s->cand_logit[c], g->h, 1, &w);
    }
}

/* centroid head, fast path: the top-k clusters of h·Cᵀ and the logits of their tokens */
static void centroid_candidates(asst_t *s, const float *h) {
    sp_matmul(sp_model_pool(s->target), s->cscore, h, 1, &s->cent);
    int k = 0; /* clusters[0..k) sorted best first (insertion into a short list) */
    for (int c = 0; c < s->NC; c++) {
        float x = s->cscore[c];
        if (k == s->topk && !ranks_before(x, c, s->cscore[s->clusters[k - 1]], s->clusters[k - 1])) continue;
        int j = k < s->topk ? k++ : k - 1;
        while (j > 0 && ranks_before(x, c, s->cscore[s->clusters[j - 1]], s->clusters[j - 1])) {
            s->clusters[j] = s->clusters[j - 1];
            j--;
        }
        s->clusters[j] = c;
    }
    for (int j = 0; j < s->topk; j++)
        memcpy(s->cand + (size_t)j * s->per, s->order + (size_t)s->clusters[j] * s->per,
               (size_t)s->per * sizeof(int32_t));
    gather_ctx g = {s, h};
    sp_pool_run(sp_model_pool(s->target), gather_task, &g);
}

/* the argmax over the candidates (lowest token id on ties, NaN never wins); -1 if all NaN */
static int candidates_argmax(const asst_t *s) {
    int best = -1;
    float bx = 0;
    for (int c = 0; c < s->n_cand; c++) {
        float x = s->cand_logit[c];
        if (isnan(x)) continue;
        if (best < 0 || x > bx || (x == bx && s->cand[c] < best)) {
            best = s->cand[c];
            bx = x;
        }
    }
    return best;
}

int sp_assistant_head_argmax(sp_drafter *d, const float *h) {
    asst_t *s = d->self;
    if (s->centroid) {
        centroid_candidates(s, h);
        return candidates_argmax(s);
    }
    sp_matmul(sp_model_pool(s->target), s->logits, h, 1, &s->lm);
    return sp_sample_argmax(s->logits, s->V);
}

static int cmp_score_desc(const void *a, const void *b, void *scores) {
    const float *x = scores;
    int ia = *(const int *)a, ib = *(const int *)b;
    return ranks_before(x[ia], ia, x[ib], ib) ? -1 : 1;
}

int sp_assistant_head_dense(sp_drafter *d, const float *h, float *logits) {
    asst_t *s = d->self;
    sp_matmul(sp_model_pool(s->target), logits, h, 1, &s->lm);
    if (!s->centroid) return 0;
    float *score = malloc((size_t)s->NC * sizeof(float));
    int *idx = malloc((size_t)s->NC * sizeof(int));
    char *keep = calloc((size_t)s->V, 1);
    if (!score || !idx || !keep) {
        free(score);
        free(idx);
        free(keep);
        return -1;
    }
    for (int c = 0; c < s->NC; c++) idx[c] = c;
    sp_matmul(sp_model_pool(s->target), score, h, 1, &s->cent);
    qsort_r(idx, (size_t)s->NC, sizeof(int), cmp_score_desc, score);
    float mn = INFINITY;
    for (int j = 0; j < s->topk; j++)
        for (int t = 0; t < s->per; t++) {
            int id = s->order[(size_t)idx[j] * s->per + t];
            keep[id] = 1;
            if (logits[id] < mn) mn = logits[id];
        }
    for (int v = 0; v < s->V; v++)
        if (!keep[v]) logits[v] = mn - 1.0f;
    free(score);
    free(idx);
    free(keep);
    return 0;
}

void sp_assistant_info(const sp_drafter *d, int *width, int *centroid, int *n_cand) {
    const asst_t *s = d->self;
    if (width) *width = s->d;
    if (centroid) *centroid = s->centroid;
    if (n_cand) *n_cand = s->centroid ? s->n_cand : s->V;
}

/* s->logits = the head's logits for h (-inf outside the centroid candidates), penalised when the
 * request has repetition penalties */
static void head_logits(asst_t *s, const float *h) {
    if (s->centroid) {
        centroid_candidates(s, h);
        for (int v = 0; v < s->V; v++) s->logits[v] = -INFINITY;
        for (int c = 0; c < s->n_cand; c++) s->logits[s->cand[c]] = s->cand_logit[c];
    } else {
        sp_matmul(sp_model_pool(s->target), s->logits, h, 1, &s->lm);
    }
    if (s->pen) sp_penalty_apply(s->pen, s->logits);
}

/* draw a draft from s->logits (head_logits, then masked or not) processed into q (row [V]) */
static int sample_logits(asst_t *s, float *q, uint64_t counter, sp_err *err) {
    if (sp_sampler_probs(s->smp, q, s->logits, err)) return sp_err_wrap(err, "assistant");
    int t = sp_sample_probs(q, s->V, sp_rng_uniform(s->seed, SP_RNG_STREAM_DRAFT, counter));
    return t >= 0 ? t : sp_err_set(err, "assistant: empty draft distribution");
}

/* draw draft i from the head's processed distribution into q (row [V]) */
static int sample_draft(asst_t *s, const float *h, float *q, uint64_t counter, sp_err *err) {
    head_logits(s, h);
    return sample_logits(s, q, counter, err);
}

/* ---- the drafter interface --------------------------------------------------------------- */

static int asst_begin(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                      const sp_drafter_ctx *ctx, sp_err *err) {
    asst_t *s = d->self;
    if (ctx->target != s->target)
        return sp_err_set(err, "assistant: loaded for another target model than the request's");
    if (n < 1) return sp_err_set(err, "assistant: empty prompt");
    s->kv = ctx->target_kv;
    s->seed = ctx->seed;
    s->pen = ctx->penalty;
    s->pending = prompt[n - 1];
    s->n_last = 0;
    s->have_g = n >= 2 && hidden != NULL; /* g_0 = the row of the last forwarded prompt token */
    if (s->have_g) memcpy(s->g, hidden + (size_t)(n - 2) * s->Hb, (size_t)s->Hb * sizeof(float));
    return 0;
}

static int is_eos(const asst_t *s, int32_t t) {
    const sp_config *c = sp_model_config(s->target);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == t) return 1;
    return 0;
}

static int asst_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    asst_t *s = d->self;
    s->n_last = 0;
    const sp_kv *kv = s->kv;
    int pos = kv ? sp_kv_len(kv) : 0; /* the pending token's position t: the target holds 0..t−1 */
    if (!s->have_g || pos < 1 || max_g <= 0) return 0;
    for (int li = 0; li < s->L; li++) /* the ring invariant the file comment relies on */
        if (sp_kv_layer_seg(kv, s->layers[li].src, 1, pos).ring && sp_kv_high(kv) - pos > sp_kv_max_batch(kv))
            return sp_err_set(err, "assistant: the target cache was written %d positions past its length (max %d): "
                              "sliding-window keys may be overwritten", sp_kv_high(kv) - pos, sp_kv_max_batch(kv));
    int pen_len0 = s->pen ? sp_penalty_len(s->pen) : 0;
    float *gin = s->ga, *gout = s->gb;
    memcpy(gin, s->g, (size_t)s->Hb * sizeof(float));
    int32_t tok = s->pending;
    const sp_draft_constraint *c = d->constraint; /* the engine's grammar: drafts drawn from masked logits */
    for (int i = 0; i < max_g; i++) {
        int prof = sp_prof_enter(SP_PROF_BLOCK);
        asst_step(s, tok, gin, pos, gout);
        if (prof >= 0) sp_prof_switch(sp_prof_tls.phase, SP_PROF_LM_HEAD); /* the head and the draw */
        int32_t t;
        if (c) { /* the full (penalised) head row, masked by the constraint */
            head_logits(s, s->h);
            int cm = sp_draft_constraint_apply(c, i, s->logits, s->V, err);
            if (cm) {
                sp_prof_leave(prof);
                if (cm < 0) return -1;
                break;
            }
            float *qi = q ? q + (size_t)i * s->V : s->probs;
            t = s->greedy ? sp_sample_argmax(s->logits, s->V) : sample_logits(s, qi, (uint64_t)(pos + 1 + i), err);
            if (t >= 0 && c->accept(c->ctx, t, err)) t = -1;
        } else if (s->greedy && s->pen) { /* penalised logits: the argmax over the full row */
            head_logits(s, s->h);
            t = sp_sample_argmax(s->logits, s->V);
        } else if (s->greedy) {
            t = sp_assistant_head_argmax(d, s->h);
            if (t < 0) sp_err_set(err, "assistant: every draft logit is NaN");
        } else {
            float *qi = q ? q + (size_t)i * s->V : s->probs; /* the engine may not want q (greedy verify) */
            t = sample_draft(s, s->h, qi, (uint64_t)(pos + 1 + i), err);
        }
        sp_prof_leave(prof);
        if (t < 0) return -1;
        drafts[s->n_last++] = t;
        if (is_eos(s, t)) break;
        if (s->pen && sp_penalty_push(s->pen, t, err)) return -1;
        tok = t;
        float *sw = gin;
        gin = gout;
        gout = sw;
    }
    if (s->pen) sp_penalty_pop(s->pen, sp_penalty_len(s->pen) - pen_len0);
    return s->n_last;
}

static int asst_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden,
                       sp_err *err) {
    asst_t *s = d->self;
    if (n_acc < 0 || n_acc > s->n_last)
        return sp_err_set(err, "assistant: %d accepted of %d proposed", n_acc, s->n_last);
    s->pending = next;
    s->n_last = 0;
    s->have_g = hidden != NULL; /* row n_acc produced `next` */
    if (s->have_g) memcpy(s->g, hidden + (size_t)n_acc * s->Hb, (size_t)s->Hb * sizeof(float));
    return 0;
}

static void asst_destroy(sp_drafter *d) {
    if (!d) return;
    asst_t *s = d->self;
    if (s) {
        sp_sampler_free(s->smp);
        sp_st_close(s->st);
        sp_owner_free(&s->owned);
        free(s);
    }
    free(d);
}

sp_drafter *sp_drafter_assistant(const char *dir, sp_model *target, const sp_sample_params *sample, sp_err *err) {
    sp_drafter *d = calloc(1, sizeof *d);
    asst_t *s = calloc(1, sizeof *s);
    char path[4096], *text = NULL;
    if (!d || !s) {
        free(d);
        free(s);
        sp_err_set(err, "assistant: out of memory");
        return NULL;
    }
    d->self = s;
    d->destroy = asst_destroy;
    s->target = target;
    if (sp_path_join(path, sizeof path, dir, "config.json")) {
        sp_err_set(err, "path too long: %s", dir);
        goto fail;
    }
    if (sp_read_file(path, &text, NULL, err) || sp_assistant_config_parse(&s->ac, text, path, err) ||
        sp_st_open_dir(&s->st, dir, err))
        goto fail;
    free(text);
    text = NULL;
    const sp_config *c = &s->ac.text;
    s->d = c->hidden_size;
    s->Hb = s->ac.backbone_hidden;
    s->V = c->vocab_size;
    s->NH = c->n_heads;
    s->L = c->n_layers;
    s->window = c->sliding_window;
    s->eps = (float)c->rms_eps;
    if (bind(s, sp_model_config(target), err)) goto fail;
    if (alloc_scratch(s)) {
        sp_err_set(err, "out of memory");
        goto fail;
    }
    s->greedy = sp_sample_is_greedy(sample);
    if (!s->greedy && !(s->smp = sp_sampler_create(s->V, sample, err))) goto fail;
    d->name = "assistant";
    d->step_cost = 1; /* one assistant step per draft */
    d->wants_hidden = 1;
    d->provides_q = !s->greedy;
    d->begin = asst_begin;
    d->propose = asst_propose;
    d->commit = asst_commit;
    return d;
fail:
    sp_err_wrap(err, "loading assistant %s", dir);
    free(text);
    asst_destroy(d);
    return NULL;
}

/* ---- the assistant kind (kind.h): each drafter maps the checkpoint itself ------------------- */

int sp_assistant_kind_detect(const sp_drafter_ident *id) {
    const char *mt = id->model_type;
    return (mt && (!strcmp(mt, "gemma4_assistant") || !strcmp(mt, "gemma4_unified_assistant"))) ||
           (id->arch && strstr(id->arch, "Assistant"));
}

sp_drafter *sp_assistant_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample,
                                   int max_ctx, sp_err *err) {
    return sp_drafter_assistant(env->o->dir, env->target, sample, err);
}
