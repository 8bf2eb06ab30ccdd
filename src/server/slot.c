/* slot.c — one request's speculative loop, stepped by the scheduler (see slot.h): prefill of all
 * prompt tokens but the pending one (taps / hidden rows kept for the drafter's begin), then rounds
 * of decode/round.h (propose → forward over [pending, drafts] → accept → trim → emit → commit),
 * whose forward is the scheduler's batched one. What is the server's own lives here: prefill
 * chunking, the dormant drafter and the rows held for it, logprobs, statistics. */
#include "server/slot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/sample.h"

struct srv_slot {
    sp_model *m;
    sp_kv *kv;
    int cap, chunk, V, H;
    slot_phase phase;
    slot_params p;
    int32_t *prompt;
    int spec;              /* a speculative request: src is its drafter's source */
    slot_drafter_src src;
    sp_drafter *d;         /* built when the slot first verifies drafts */
    sp_round *R;           /* the request's speculative round (decode/round.h) */
    int G, TN, greedy, nt, wh, max_ctx;
    /* prefill */
    int n_prefilled;       /* prompt rows forwarded (of n_prompt - 1) */
    float *ptaps, *phid;   /* [cap_rows, nt·H], [cap_rows, H]: held rows (below) */
    /* Rows held for the drafter: tokens prompt[0 .. n_ctx_tok) (the last one pending), taps / hidden
     * rows of all but the last. While dormant (the drafter not built) they are the whole context it
     * will begin on; once built, prompt[0] is the token it holds as pending and the rest came from
     * rounds that asked for no drafts, told to it by extend() before it next proposes. Either way a
     * round without drafts costs the drafter nothing: the forward writes its row straight here. */
    int dormant, n_ctx_tok, cap_rows;
    int asked;             /* the drafter was asked to propose this round (sp_slot_wake_drafter) */
    int proposed;          /* the round proposed itself this step (sp_slot_propose) */
    int hold_round;        /* this round's row goes to the held rows */
    /* decode */
    int32_t pending;
    int pos, T;             /* position of pending, rows added */
    sp_forward_out out;
    int n_emit, last_nd, last_acc;
    int g_room, row_room;   /* drafts / rows after pending this step may verify (sp_slot_plan), -1 before */
    long offered[SP_SPEC_MAX_G + 1], reached[SP_SPEC_MAX_G + 1]; /* rounds verifying >= k drafts / accepting >= k */
    slot_token emit[SP_SPEC_MAX_G + 1];
    sp_stop_reason stop;
    slot_stats st;
    /* The cache kept across requests: the tokens at KV positions [0, hist_n) (hist_n follows
     * sp_kv_len after every forward) and, for the first hist_rows of them, the target rows a drafter
     * begins on: taps of hist_layers[0 .. hist_nt) and, with hist_wh, the hidden rows. */
    int32_t *hist_tok;             /* [cap] */
    float *hist_taps, *hist_hid;   /* [hist_cap_rows, hist_nt·H], [hist_cap_rows, H] */
    int hist_n, hist_rows, hist_cap_rows, hist_nt, hist_wh;
    int *hist_layers;              /* [hist_nt] */
};

srv_slot *sp_slot_create(sp_model *m, int max_ctx, int prefill_chunk, sp_err *err) {
    srv_slot *s = calloc(1, sizeof *s);
    if (!s) {
        sp_err_set(err, "server: out of memory for a slot");
        return NULL;
    }
    const sp_config *c = sp_model_config(m);
    s->m = m;
    s->V = c->vocab_size;
    s->H = c->hidden_size;
    s->cap = c->max_pos > 0 && max_ctx > c->max_pos ? c->max_pos : max_ctx;
    s->chunk = prefill_chunk > SP_SPEC_MAX_G + 1 ? prefill_chunk : SP_SPEC_MAX_G + 1;
    /* a forward holds a prompt chunk, a chain block or a tree of up to SP_TREE_MAX_NODES nodes */
    s->kv = sp_kv_create(m, s->cap, s->chunk > SP_TREE_MAX_NODES + 1 ? s->chunk : SP_TREE_MAX_NODES + 1, err);
    s->hist_tok = malloc(sizeof(int32_t) * (size_t)s->cap);
    if (!s->kv || !s->hist_tok) {
        if (s->kv) sp_err_set(err, "server: out of memory for a slot's cached tokens");
        sp_slot_free(s);
        return NULL;
    }
    return s;
}

void sp_slot_reset(srv_slot *s) {
    if (!s) return;
    sp_round_free(s->R);
    sp_drafter_free(s->d);
    free(s->prompt), free(s->ptaps), free(s->phid);
    s->R = NULL, s->d = NULL, s->prompt = NULL, s->ptaps = s->phid = NULL;
    s->phase = SLOT_IDLE;
    s->dormant = s->spec = s->asked = s->proposed = s->hold_round = 0;
}

void sp_slot_forget(srv_slot *s) {
    if (s->kv) sp_kv_clear(s->kv);
    s->hist_n = s->hist_rows = 0;
}

void sp_slot_free(srv_slot *s) {
    if (!s) return;
    sp_slot_reset(s);
    sp_kv_free(s->kv);
    free(s->hist_tok), free(s->hist_taps), free(s->hist_hid), free(s->hist_layers);
    free(s);
}

/* 1 when the rows kept in the cache are the rows src's drafter begins on (or it begins on none) */
static int hist_rows_fit(const srv_slot *s, const slot_drafter_src *src) {
    if (!src || (!src->n_taps && !src->wants_hidden)) return 1;
    if (src->n_taps != s->hist_nt || !src->wants_hidden != !s->hist_wh) return 0;
    return !src->n_taps || !memcmp(src->tap_layers, s->hist_layers, sizeof(int) * (size_t)src->n_taps);
}

int sp_slot_cached_len(const srv_slot *s) { return s->hist_n; }

int sp_slot_cached_prefix(const srv_slot *s, const int32_t *prompt, int n, const slot_drafter_src *src) {
    int lim = s->hist_n < n - 1 ? s->hist_n : n - 1;
    if (src && (src->n_taps || src->wants_hidden)) lim = !hist_rows_fit(s, src) ? 0 : lim < s->hist_rows ? lim : s->hist_rows;
    int k = 0;
    while (k < lim && s->hist_tok[k] == prompt[k]) k++;
    return k;
}

/* Room for the rows of n positions in the cache's row history (the request's nt / wh). */
static int hist_reserve(srv_slot *s, int n, sp_err *err) {
    if ((!s->nt && !s->wh) || n <= s->hist_cap_rows) return 0;
    int cap = s->hist_cap_rows ? s->hist_cap_rows : 64;
    while (cap < n) cap *= 2;
    if (cap > s->cap) cap = s->cap;
    size_t wt = (size_t)s->nt * s->H;
    float *a = s->nt ? realloc(s->hist_taps, sizeof(float) * (size_t)cap * wt) : NULL;
    if (a) s->hist_taps = a;
    float *h = s->wh && (a || !s->nt) ? realloc(s->hist_hid, sizeof(float) * (size_t)cap * s->H) : NULL;
    if (h) s->hist_hid = h;
    if ((s->nt && !a) || (s->wh && !h)) return sp_err_set(err, "out of memory for the cached rows of %d positions", n);
    s->hist_cap_rows = cap;
    return 0;
}

/* Record n positions from pos on: their tokens and (a request with drafter rows) taps / hidden rows. */
static int hist_put(srv_slot *s, int pos, const int32_t *tok, int n, const float *taps, const float *hid,
                    sp_err *err) {
    if (hist_reserve(s, pos + n, err)) return -1;
    memcpy(s->hist_tok + pos, tok, sizeof(int32_t) * (size_t)n);
    size_t wt = (size_t)s->nt * s->H;
    if (s->nt) memcpy(s->hist_taps + (size_t)pos * wt, taps, sizeof(float) * (size_t)n * wt);
    if (s->wh) memcpy(s->hist_hid + (size_t)pos * s->H, hid, sizeof(float) * (size_t)n * s->H);
    s->hist_n = pos + n;
    if (s->nt || s->wh) s->hist_rows = s->hist_n;
    return 0;
}

/* The prefix of the new prompt kept from the cache (p->cache_prompt): the cache is cut back to it (a
 * sliding-window ring that recycled the slots the cut would expose: cleared instead). Returns the
 * positions kept. The row history switches to this request's taps when they differ. */
static int cache_keep(srv_slot *s, const slot_params *p, sp_err *err) {
    const slot_drafter_src *src = s->spec ? &s->src : NULL;
    if (sp_kv_len(s->kv) != s->hist_n) sp_slot_forget(s);
    int keep = p->cache_prompt ? sp_slot_cached_prefix(s, p->prompt, p->n_prompt, src) : 0;
    sp_err terr = {{0}};
    if (keep == 0 || sp_kv_trim(s->kv, sp_kv_len(s->kv) - keep, &terr)) {
        sp_kv_clear(s->kv);
        keep = 0;
    }
    s->hist_n = keep;
    if (s->hist_rows > keep) s->hist_rows = keep;
    if ((s->nt || s->wh) && !hist_rows_fit(s, src)) {
        int *l = s->nt ? malloc(sizeof(int) * (size_t)s->nt) : NULL;
        if (s->nt && !l) return sp_err_set(err, "out of memory for a slot's tap layers");
        if (s->nt) memcpy(l, src->tap_layers, sizeof(int) * (size_t)s->nt);
        free(s->hist_layers), free(s->hist_taps), free(s->hist_hid);
        s->hist_layers = l, s->hist_taps = s->hist_hid = NULL;
        s->hist_nt = s->nt, s->hist_wh = s->wh, s->hist_cap_rows = s->hist_rows = 0;
    }
    return keep;
}

/* The request's round: its sampling, penalties, drafts (a tree: nodes) and the rows its drafter takes. */
static int round_make(srv_slot *s, sp_err *err) {
    const slot_params *p = &s->p;
    sp_round_params rp = {.sample = p->sample, .penalty = p->penalty, .draft_max = s->G, .draft_min = p->draft_min,
                          .n_taps = s->nt, .tap_layers = s->nt ? s->src.tap_layers : NULL, .wants_hidden = s->wh,
                          .grammar = p->grammar, .gvocab = p->gvocab, .synth = s->spec ? p->synth : NULL};
    if (s->TN) rp.tree = p->tree;
    if (!(s->R = sp_round_create(s->m, s->kv, &rp, err))) return -1;
    return sp_round_push(s->R, p->prompt, p->n_prompt, err);
}

/* The request's checks: prompt, lengths, sampling and penalty params, draft and tree sizes. */
static int begin_check(srv_slot *s, const slot_params *p, sp_err *err) {
    if (p->n_prompt < 1) return sp_err_set(err, "the prompt is empty");
    if (p->max_new < 1) return sp_err_set(err, "max_tokens must be >= 1");
    if (sp_sample_params_check(&p->sample, err) || sp_penalty_params_check(&p->penalty, err)) return -1;
    if (s->spec && (s->G < 1 || s->G > SP_SPEC_MAX_G))
        return sp_err_set(err, "draft_max %d out of range 1..%d", s->G, SP_SPEC_MAX_G);
    if (s->TN > SP_TREE_MAX_NODES) return sp_err_set(err, "a tree of %d nodes (at most %d)", s->TN, SP_TREE_MAX_NODES);
    long want = (long)p->n_prompt + p->max_new + (s->TN > s->G ? s->TN : s->G) + 1;
    s->max_ctx = want < s->cap ? (int)want : s->cap;
    if (p->n_prompt >= s->max_ctx)
        return sp_err_set(err, "the prompt (%d tokens) does not fit the context (%d)", p->n_prompt, s->cap);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->V)
            return sp_err_set(err, "prompt token %d at index %d is outside the vocabulary [0, %d)", p->prompt[i], i,
                              s->V);
    return 0;
}

int sp_slot_begin(srv_slot *s, const slot_params *p, const slot_drafter_src *src, sp_err *err) {
    sp_slot_reset(s);
    s->spec = src != NULL;
    s->src = src ? *src : (slot_drafter_src){0};
    s->p = *p;
    memset(&s->st, 0, sizeof s->st);
    memset(s->offered, 0, sizeof s->offered);
    memset(s->reached, 0, sizeof s->reached);
    s->g_room = s->row_room = -1;
    s->stop = SP_STOP_NONE;
    s->n_emit = 0;
    /* a plain request under a grammar still drafts what the grammar forces (no drafter call), up to
     * draft_max a round */
    int g_forced = p->grammar && p->draft_max > 0 ? (p->draft_max < SP_SPEC_MAX_G ? p->draft_max : SP_SPEC_MAX_G) : 0;
    s->G = s->spec ? p->draft_max : g_forced;
    /* sampled requests under a grammar verify chains (greedy ones keep their trees) */
    s->TN = s->spec && p->tree.nodes > 0 && (!p->grammar || sp_sample_is_greedy(&p->sample)) ? p->tree.nodes : 0;
    if (begin_check(s, p, err)) return -1;
    s->greedy = sp_sample_is_greedy(&p->sample);
    s->nt = s->spec ? s->src.n_taps : 0;
    s->wh = s->spec && s->src.wants_hidden;
    size_t rows = (size_t)(p->n_prompt > 1 ? p->n_prompt - 1 : 1);
    s->cap_rows = (int)rows;
    s->prompt = malloc(sizeof(int32_t) * (rows + 1));
    if (s->nt) s->ptaps = malloc(sizeof(float) * rows * s->nt * s->H);
    if (s->wh) s->phid = malloc(sizeof(float) * rows * s->H);
    if (!s->prompt || (s->nt && !s->ptaps) || (s->wh && !s->phid))
        return sp_err_set(err, "out of memory for a request of %d prompt tokens", p->n_prompt);
    memcpy(s->prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    s->p.prompt = s->prompt;
    int keep = cache_keep(s, p, err);
    if (keep < 0 || hist_reserve(s, p->n_prompt, err) || round_make(s, err)) return -1;
    /* the kept prefix's rows are those its prefill would give (batch invariance) */
    if (s->nt) memcpy(s->ptaps, s->hist_taps, sizeof(float) * (size_t)keep * s->nt * s->H);
    if (s->wh) memcpy(s->phid, s->hist_hid, sizeof(float) * (size_t)keep * s->H);
    s->n_prefilled = keep;
    s->pending = s->prompt[p->n_prompt - 1];
    s->st.prompt_tokens = p->n_prompt;
    s->st.cached_tokens = keep;
    s->st.synthetic = s->spec && p->synth;
    s->st.t_begin = sp_time_ms();
    s->phase = SLOT_PREFILL;
    return 0;
}

slot_phase sp_slot_get_phase(const srv_slot *s) { return s->phase; }
sp_stop_reason sp_slot_stop_reason(const srv_slot *s) { return s->stop; }
const slot_stats *sp_slot_get_stats(const srv_slot *s) { return &s->st; }
int sp_slot_kv_used(const srv_slot *s) { return s->phase == SLOT_IDLE ? 0 : sp_kv_len(s->kv); }
int sp_slot_kv_capacity(const srv_slot *s) { return s->cap; }

int sp_slot_rows_wanted(const srv_slot *s) {
    if (s->phase == SLOT_PREFILL) {
        int left = s->p.n_prompt - 1 - s->n_prefilled;
        return left > 0 ? (left < s->chunk ? left : s->chunk) : 1 + (s->TN > s->G ? s->TN : s->G);
    }
    return s->phase == SLOT_DECODE ? 1 + (s->TN > s->G ? s->TN : s->G) : 0;
}

int sp_slot_plan_rows(const srv_slot *s) { return s->row_room < 0 ? 0 : 1 + s->row_room; }
int sp_slot_is_tree(const srv_slot *s) { return s->TN > 0; }
int sp_slot_has_grammar(const srv_slot *s) { return s->p.grammar != NULL; }

/* The prompt is in the cache: decoding starts, the drafter (if any) dormant — not built — with the
 * prompt and its rows as its context. */
static int begin_drafter(srv_slot *s, sp_err *err) {
    (void)err;
    s->st.t_prefilled = sp_time_ms();
    s->phase = SLOT_DECODE;
    s->dormant = s->spec;
    s->n_ctx_tok = s->p.n_prompt;
    return 0;
}

int sp_slot_drafter_dormant(const srv_slot *s) { return s->dormant; }
int sp_slot_is_speculative(const srv_slot *s) { return s->spec; }
int sp_slot_wake_rows(const srv_slot *s) { return s->dormant ? s->n_ctx_tok - 1 : 0; }
int sp_slot_tokens_left(const srv_slot *s) { return s->p.max_new - s->st.emitted; }

/* Tell the drafter the held rows: a dormant one is built and begun on the context so far (spec.c
 * prefill() hands it the prompt the same way; a context of prompt + generated tokens is a longer
 * prompt), a built one gets the rounds since its last commit through extend(). Then only the pending
 * token stays held. */
static int drafter_tell(srv_slot *s, sp_err *err) {
    int n = s->n_ctx_tok - 1;
    if (s->dormant) {
        s->dormant = 0;
        sp_drafter *d = s->src.make(s->src.ctx, &s->p.sample, s->cap, err);
        if (!d) return -1;
        s->d = d;
        int same = d->n_taps == s->nt && !d->wants_hidden == !s->wh;
        for (int j = 0; same && j < s->nt; j++) same = d->tap_layers[j] == s->src.tap_layers[j];
        if (!same)
            return sp_err_set(err, "drafter %s wants other target rows (%d taps%s) than the server keeps (%d taps%s)",
                              d->name, d->n_taps, d->wants_hidden ? " + hidden" : "", s->nt, s->wh ? " + hidden" : "");
        if (sp_round_set_drafter(s->R, d, err)) return -1;
        s->st.drafter_built = 1;
        sp_drafter_ctx ctx = {.target = s->m, .target_kv = s->kv, .seed = s->p.sample.seed,
                              .penalty = sp_round_penalty(s->R)};
        if (d->begin(d, s->prompt, s->n_ctx_tok, s->ptaps, s->phid, &ctx, err)) return -1;
    } else if (n > 0 && s->d->extend(s->d, s->prompt + 1, n, s->nt ? s->ptaps : NULL, s->wh ? s->phid : NULL, err)) {
        return -1;
    }
    s->prompt[0] = s->prompt[n];
    s->n_ctx_tok = 1;
    return 0;
}

int sp_slot_wake_drafter(srv_slot *s, sp_err *err) {
    if (!s->spec) return 0;
    s->asked = 1;
    return drafter_tell(s, err);
}

/* Room for one more held row (the held rows of a request that never drafts grow with it). */
static int hold_reserve(srv_slot *s, sp_err *err) {
    int need = s->n_ctx_tok;
    if (need <= s->cap_rows) return 0;
    size_t wt = (size_t)s->nt * s->H, wh = (size_t)s->H;
    int cap = s->cap_rows * 2;
    while (cap < need) cap *= 2;
    int32_t *t = realloc(s->prompt, sizeof(int32_t) * ((size_t)cap + 1));
    if (t) s->p.prompt = s->prompt = t;
    float *a = s->nt && t ? realloc(s->ptaps, sizeof(float) * (size_t)cap * wt) : s->ptaps;
    if (a) s->ptaps = a;
    float *h = s->wh && t && a ? realloc(s->phid, sizeof(float) * (size_t)cap * wh) : s->phid;
    if (h) s->phid = h;
    if (!t || (s->nt && !a) || (s->wh && !h)) return sp_err_set(err, "out of memory for %d held drafter rows", need);
    s->cap_rows = cap;
    return 0;
}

/* A round without drafts asked for: its row is already held (sp_slot_prepare pointed the forward at it);
 * hold its new pending token. Past HOLD_MAX held rounds the drafter is told (a dormant one begun),
 * and later rounds go on as before (bounded memory). */
#define HOLD_MAX 512
static int hold_append(srv_slot *s, int32_t next, sp_err *err) {
    s->prompt[s->n_ctx_tok++] = next;
    int base = s->dormant ? s->p.n_prompt : 1;
    return s->n_ctx_tok - base > HOLD_MAX ? drafter_tell(s, err) : 0;
}

int sp_slot_plan(srv_slot *s, int max_rows, int *g_room, sp_err *err) {
    *g_room = 0;
    s->T = 0;
    s->g_room = s->row_room = -1;
    s->proposed = 0;
    if (s->phase == SLOT_PREFILL && s->p.n_prompt - 1 - s->n_prefilled <= 0 && begin_drafter(s, err)) return -1;
    if (s->phase != SLOT_DECODE) return 0;
    /* the round's length: G capped by the context and max_new, then by the batch's rows */
    s->pos = sp_kv_len(s->kv);
    int g = sp_round_plan(s->R, s->pos, s->max_ctx, s->p.max_new - s->st.emitted);
    if (g < 0) { /* no room for the pending token */
        s->stop = SP_STOP_CTX;
        s->phase = SLOT_DONE;
        return 0;
    }
    int rows = s->TN ? s->TN : g; /* a tree's nodes: capped by the context's room only */
    if (rows > s->max_ctx - s->pos - 1) rows = s->max_ctx - s->pos - 1;
    if (rows > max_rows - 1) rows = max_rows - 1;
    if (g > rows) g = rows;
    if (g < 0) return 0; /* waits for the next forward */
    sp_round_begin(s->R, s->pending, s->spec || s->p.grammar ? rows : 0);
    if (s->p.grammar && g > 0) {
        /* the tokens the grammar forces are drafted now, whatever drafts the step gives the slot: they
         * cost no drafter call and are accepted for certain; a round that has them asks the drafter
         * for nothing (its rows are held for it as a plain round's are) */
        if (sp_round_propose(s->R, 0, err)) return -1;
        int f = sp_round_get_result(s->R)->forced;
        if (f > 0) {
            s->proposed = 1;
            s->g_room = *g_room = 0;
            s->row_room = f;
            return 1;
        }
    }
    s->g_room = *g_room = s->spec ? g : 0;
    s->row_room = s->spec ? rows : 0;
    return 1;
}

sp_drafter *sp_slot_drafter(const srv_slot *s) { return s->d; }
int sp_slot_length_free(const srv_slot *s) { return !s->TN && (s->greedy || !s->p.seeded); }
int32_t *sp_slot_draft_buf(srv_slot *s) { return sp_round_draft_buf(s->R); }
float *sp_slot_q_buf(srv_slot *s) { return sp_round_q_buf(s->R); }

int sp_slot_propose(srv_slot *s, int g, sp_err *err) {
    if (g > s->g_room) g = s->g_room;
    if (sp_round_propose(s->R, g, err)) return -1;
    s->proposed = 1;
    return sp_round_get_result(s->R)->nd;
}

void sp_slot_last_round(const srv_slot *s, int *nd, int *acc) {
    *nd = s->last_nd;
    *acc = s->last_acc;
}

void sp_slot_count_nodraft(srv_slot *s, slot_nodraft why) {
    if ((unsigned)why < SLOT_NODRAFT_N) s->st.rounds_nodraft[why]++;
}

void sp_slot_accept_counts(const srv_slot *s, const long **offered, const long **reached) {
    *offered = s->offered;
    *reached = s->reached;
}

/* A prompt chunk's rows (at most max_rows), their taps / hidden rows into the held rows. */
static int prepare_chunk(srv_slot *s, int max_rows, sp_forward_seq *seq) {
    s->T = 0;
    int left = s->p.n_prompt - 1 - s->n_prefilled;
    int b = left < s->chunk ? left : s->chunk;
    if (b > max_rows) b = max_rows;
    if (b <= 0) return 0;
    size_t r0 = (size_t)s->n_prefilled;
    s->out = (sp_forward_out){0};
    if (s->nt) {
        s->out.tap_layers = s->src.tap_layers;
        s->out.n_taps = s->nt;
        s->out.taps = s->ptaps + r0 * s->nt * s->H;
    }
    if (s->wh) s->out.hidden = s->phid + r0 * s->H;
    *seq = (sp_forward_seq){s->kv, s->prompt + r0, b, &s->out, NULL};
    return s->T = b;
}

int sp_slot_prepare(srv_slot *s, int max_rows, float *logits, int nd, sp_forward_seq *seq, sp_err *err) {
    if (s->phase == SLOT_PREFILL) return prepare_chunk(s, max_rows, seq);
    if (s->phase != SLOT_DECODE || s->g_room < 0) return 0;
    if (!s->proposed && sp_round_set_drafts(s->R, s->g_room, nd, err)) return -1;
    nd = sp_round_get_result(s->R)->nd;
    if (1 + nd > max_rows) return 0; /* waits for the next forward */
    s->g_room = -1;
    /* a round that asked for no drafts writes its row straight into the held rows (none for plain) */
    s->hold_round = s->spec && nd == 0 && !s->asked && (s->dormant || s->d->extend);
    float *taps = NULL, *hidden = NULL;
    if (s->hold_round) {
        if (hold_reserve(s, err)) return -1;
        size_t r = (size_t)s->n_ctx_tok - 1;
        taps = s->nt ? s->ptaps + r * s->nt * s->H : NULL;
        hidden = s->wh ? s->phid + r * s->H : NULL;
    }
    return s->T = sp_round_rows(s->R, logits, taps, hidden, &s->out, seq);
}

/* log-softmax of the logits row (penalised when penalties are on) at token tok, plus the k most
 * likely alternatives */
static void fill_logprobs(slot_token *e, const float *lg, int V, int k) {
    float mx = lg[0];
    for (int i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    double lse = mx + log(sum);
    e->logprob = (float)(lg[e->token] - lse);
    e->n_top = 0;
    for (int j = 0; j < k; j++) { /* k <= 20: repeated selection */
        int best = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int t = 0; t < j && !taken; t++) taken = e->top_id[t] == i;
            if (!taken && (best < 0 || lg[i] > lg[best])) best = i;
        }
        e->top_id[j] = best;
        e->top_logprob[j] = (float)(lg[best] - lse);
        e->n_top++;
    }
}

/* sp_round_emit's stop test: the token (with its logprobs) into the step's output, then EOS / max_new */
static int emit_token(void *ctx, int32_t tok, int i) {
    srv_slot *s = ctx;
    slot_token *e = &s->emit[s->n_emit++];
    e->token = tok;
    e->n_top = 0;
    e->logprob = 0;
    if (s->p.top_logprobs >= 0) fill_logprobs(e, sp_round_logits_row(s->R, i), s->V, s->p.top_logprobs);
    s->st.emitted++;
    if (!s->p.ignore_eos && sp_is_eos(sp_model_config(s->m), tok)) s->stop = SP_STOP_EOS;
    else if (s->st.emitted >= s->p.max_new) s->stop = SP_STOP_MAX_NEW;
    else return 0;
    return 1;
}

/* A round of forced drafts that asked the drafter for nothing: its acc + 1 rows (kept[j] and the
 * token after it) go to the held rows, as that many plain rounds' would; once the drafter is built
 * without extend(), the rest are committed to it one by one. */
static int hold_forced(srv_slot *s, const int32_t *kept, const sp_round_result *r, sp_err *err) {
    size_t wt = (size_t)s->nt * s->H, wh = (size_t)s->H;
    for (int j = 0; j <= r->acc; j++) {
        int32_t tok = j < r->acc ? kept[j + 1] : r->next;
        const float *taps = s->nt ? s->out.taps + (size_t)j * wt : NULL;
        const float *hid = s->wh ? s->out.hidden + (size_t)j * wh : NULL;
        if (!s->dormant && !s->d->extend) {
            if (s->d->commit(s->d, 0, tok, taps, hid, err)) return -1;
            continue;
        }
        if (hold_reserve(s, err)) return -1;
        size_t at = (size_t)s->n_ctx_tok - 1;
        if (taps) memcpy(s->ptaps + at * wt, taps, sizeof(float) * wt);
        if (hid) memcpy(s->phid + at * wh, hid, sizeof(float) * wh);
        if (hold_append(s, tok, err)) return -1;
    }
    return 0;
}

/* After a decode round's forward: accept, emit, then commit to the drafter (or hold the row). */
static int finish_round(srv_slot *s, sp_err *err) {
    s->st.target_calls++;
    if (sp_round_accept(s->R, err)) return -1;
    const sp_round_result *r = sp_round_get_result(s->R);
    /* the cache now holds [pending, the accepted drafts] at pos ..: their tokens and rows */
    int32_t kept[SP_TREE_MAX_NODES + 1];
    kept[0] = s->pending;
    memcpy(kept + 1, sp_round_accepted(s->R), sizeof(int32_t) * (size_t)r->acc);
    if (hist_put(s, s->pos, kept, r->acc + 1, s->out.taps, s->out.hidden, err)) return -1;
    s->st.drafted += r->nd;
    s->st.accepted += r->acc;
    s->st.forced += r->forced;
    s->st.cut += r->cut;
    int depth = r->forced ? 0 : r->depth; /* forced rounds tell the length policy nothing */
    for (int k = 1; k <= depth; k++) s->offered[k]++;
    for (int k = 1; k <= depth && k <= r->acc; k++) s->reached[k]++;
    if (sp_round_emit(s->R, emit_token, s, err) < 0) return -1;
    s->st.from_forced += r->from_forced;
    s->st.from_drafter += r->from_drafter;
    s->st.from_target += r->from_target;
    s->last_nd = depth;
    s->last_acc = r->acc;
    double now = sp_time_ms();
    if (s->st.t_first == 0) s->st.t_first = now;
    s->st.t_last = now;
    if (r->stopped) {
        s->phase = SLOT_DONE;
        return 0;
    }
    s->pending = r->next;
    if (!s->spec) return 0;
    if (r->forced && !s->asked && (s->dormant || s->d->extend)) {
        s->hold_round = 0;
        return hold_forced(s, kept, r, err);
    }
    int hold = s->hold_round;
    if (!hold && !s->asked) s->st.idle_drafter_rounds++; /* a drafter without extend commits every round */
    s->asked = s->hold_round = 0;
    return hold ? hold_append(s, r->next, err) : sp_round_commit(s->R, err);
}

int sp_slot_finish(srv_slot *s, const slot_token **out, sp_err *err) {
    *out = s->emit;
    s->n_emit = 0;
    if (s->T == 0) return 0;
    if (s->phase == SLOT_PREFILL) { /* a prompt chunk went through */
        size_t r0 = (size_t)s->n_prefilled;
        if (hist_put(s, s->n_prefilled, s->prompt + r0, s->T, s->nt ? s->ptaps + r0 * s->nt * s->H : NULL,
                     s->wh ? s->phid + r0 * s->H : NULL, err))
            return -1;
        s->n_prefilled += s->T;
        s->T = 0;
        if (s->n_prefilled == s->p.n_prompt - 1 && begin_drafter(s, err)) return -1;
        return 0;
    }
    s->T = 0;
    return finish_round(s, err) ? -1 : s->n_emit;
}

void sp_slot_stop(srv_slot *s, int kept) {
    if (kept < s->n_emit) s->st.emitted -= s->n_emit - kept;
    s->n_emit = kept;
    s->stop = SP_STOP_CALLBACK;
    s->phase = SLOT_DONE;
}
