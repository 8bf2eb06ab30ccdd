/* round.c — one speculative round in phases (see round.h): propose → rows → accept → emit →
 * commit, for chains and token trees, greedy and sampled, with repetition penalties. */
#include "decode/round.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/prof.h"

#define HOLD_ROWS 64 /* plain rounds held for one extend: one batched context update */

struct sp_round {
    sp_model *m;
    sp_kv *kv;
    sp_drafter *d;
    sp_round_params p;
    sp_sampler *smp;
    sp_penalty *pen;   /* NULL: no repetition penalties; else the committed stream (penalty.h) */
    int V, H, greedy, rows_max; /* rows_max: 1 + the most drafts (tree nodes) of a round */
    int room, pos;     /* this round: rows after pending the cache has room for; pending's position */
    float *own_logits, *logits, *probs, *q, *taps, *hidden; /* logits: this round's rows */
    int q_chain;       /* q rows are the chain drafts' (the drafter provides q and the request samples) */
    int32_t blk[SP_SPEC_MAX_G + 1]; /* [pending, chain drafts] */
    sp_tree tree;      /* this round's tree (res.tree) */
    int32_t acc_tok[SP_TREE_MAX_NODES + 1];
    /* rounds that asked for no drafts, held for the drafter's extend (hold_plain) */
    int hold, n_hold;
    int32_t hold_tok[HOLD_ROWS];
    float *hold_taps, *hold_hid; /* [HOLD_ROWS, n_taps·H], [HOLD_ROWS, H] */
    /* the grammar (p.grammar): the position after the committed tokens, a working copy, the allowed
     * tokens of this round's rows [rows_max, V] (rows 0 .. n_gmask computed) */
    sp_gstate *gs, *gw;
    sp_gstate **gnode; /* greedy trees: the position after each row's root path ([rows_max], made on first use) */
    uint8_t gstat[SP_TREE_MAX_NODES + 1]; /* per tree row this round: 0 not looked at, 1 masked, 2 forbidden */
    uint8_t *gmask;
    int n_gmask, forced_round, forced_seen; /* forced_seen: this round's forced drafts were looked for */
    sp_round_result res;
};

/* the chance that draft x, drawn from q[V] (NULL: one-hot at x), is accepted against p[V]:
 * Σ_v min(p, q) = 1 − TV(p, q) */
static double row_accept(const float *p, const float *q, int V, int32_t x) {
    if (!q) return p[x];
    double a = 0;
    for (int v = 0; v < V; v++) a += p[v] < q[v] ? p[v] : q[v];
    return a;
}

sp_round *sp_round_create(sp_model *m, sp_kv *kv, const sp_round_params *p, sp_err *err) {
    if (p->draft_max < 0 || p->draft_max > SP_SPEC_MAX_G) {
        sp_err_set(err, "round: draft_max %d out of range 0..%d", p->draft_max, SP_SPEC_MAX_G);
        return NULL;
    }
    if (p->tree.nodes < 0 || p->tree.nodes > SP_TREE_MAX_NODES || (p->tree.nodes > 0 && p->tree.k < 1)) {
        sp_err_set(err, "round: a tree of %d nodes (allowed 0..%d) with %d children per node (>= 1)", p->tree.nodes,
                   SP_TREE_MAX_NODES, p->tree.k);
        return NULL;
    }
    if (p->synth && sp_synth_check(p->synth, err)) return NULL;
    if (p->synth && p->tree.nodes > 0) {
        sp_err_set(err, "round: synthetic acceptance works on chains, not token trees");
        return NULL;
    }
    sp_round *r = calloc(1, sizeof *r);
    if (!r) {
        sp_err_set(err, "round: out of memory");
        return NULL;
    }
    const sp_config *c = sp_model_config(m);
    r->m = m, r->kv = kv, r->p = *p;
    r->p.tree.max_depth = p->draft_max;
    r->V = c->vocab_size, r->H = c->hidden_size;
    r->greedy = sp_sample_is_greedy(&p->sample);
    r->rows_max = 1 + (p->tree.nodes > p->draft_max ? p->tree.nodes : p->draft_max);
    size_t R = (size_t)r->rows_max, V = (size_t)r->V, H = (size_t)r->H, nt = (size_t)p->n_taps;
    int rc = 0;
    if (!(r->smp = sp_sampler_create(r->V, &p->sample, err))) rc = -1;
    if (!rc && sp_penalty_active(&p->penalty) && !(r->pen = sp_penalty_create(r->V, &p->penalty, err))) rc = -1;
    if (!rc && p->grammar) {
        if (!r->greedy) r->p.tree.nodes = 0; /* sampled requests: chains only under a grammar */
        r->rows_max = 1 + (r->p.tree.nodes > p->draft_max ? r->p.tree.nodes : p->draft_max);
        r->gmask = malloc((size_t)r->rows_max * V);
        r->gnode = r->p.tree.nodes > 0 ? calloc((size_t)r->rows_max, sizeof *r->gnode) : NULL;
        if (!p->gvocab) rc = sp_err_set(err, "round: a grammar without the vocabulary's token bytes");
        else if (sp_gvocab_size(p->gvocab) != r->V)
            rc = sp_err_set(err, "round: grammar vocabulary of %d tokens for a model of %d", sp_gvocab_size(p->gvocab), r->V);
        else if (!r->gmask || (r->p.tree.nodes > 0 && !r->gnode))
            rc = sp_err_set(err, "round: out of memory for the grammar's masks");
        else if (!(r->gs = sp_gstate_create(p->grammar, p->gvocab, err)) || !(r->gw = sp_gstate_create(p->grammar, p->gvocab, err)))
            rc = -1;
        R = (size_t)r->rows_max;
    }
    if (rc) {
        sp_round_free(r);
        return NULL;
    }
    r->probs = malloc(sizeof(float) * V);
    r->own_logits = p->own_logits ? malloc(sizeof(float) * R * V) : NULL;
    r->taps = nt ? malloc(sizeof(float) * R * nt * H) : NULL;
    r->hidden = p->wants_hidden ? malloc(sizeof(float) * R * H) : NULL;
    r->hold = p->hold_plain && p->draft_max > 0;
    r->hold_taps = r->hold && nt ? malloc(sizeof(float) * HOLD_ROWS * nt * H) : NULL;
    r->hold_hid = r->hold && p->wants_hidden ? malloc(sizeof(float) * HOLD_ROWS * H) : NULL;
    if (!r->probs || (p->own_logits && !r->own_logits) || (nt && !r->taps) || (p->wants_hidden && !r->hidden) ||
        (r->hold && nt && !r->hold_taps) || (r->hold && p->wants_hidden && !r->hold_hid)) {
        sp_err_set(err, "round: out of memory for %zu rows", R);
        sp_round_free(r);
        return NULL;
    }
    return r;
}

void sp_round_free(sp_round *r) {
    if (!r) return;
    sp_sampler_free(r->smp);
    sp_penalty_free(r->pen);
    free(r->probs), free(r->own_logits), free(r->q), free(r->taps), free(r->hidden);
    free(r->hold_taps), free(r->hold_hid);
    sp_gstate_free(r->gs), sp_gstate_free(r->gw), free(r->gmask);
    for (int i = 0; r->gnode && i < r->rows_max; i++) sp_gstate_free(r->gnode[i]);
    free(r->gnode);
    free(r);
}

int sp_round_set_drafter(sp_round *r, sp_drafter *d, sp_err *err) {
    r->d = d;
    if (!d) return 0;
    if (d->n_taps != r->p.n_taps || !d->wants_hidden != !r->p.wants_hidden)
        return sp_err_set(err, "round: drafter %s wants %d taps%s, the round keeps %d%s", d->name, d->n_taps,
                          d->wants_hidden ? " + hidden" : "", r->p.n_taps, r->p.wants_hidden ? " + hidden" : "");
    if (r->p.tree.nodes > 0 && !d->propose_tree) return sp_err_set(err, "tree: drafter %s proposes no trees", d->name);
    if (r->hold && !d->extend) r->hold = 0;
    r->q_chain = d->provides_q && !r->greedy;
    int want_q = !r->greedy && (d->provides_q || r->p.tree.nodes > 0);
    if (want_q && !r->q && !(r->q = malloc(sizeof(float) * (size_t)r->rows_max * r->V)))
        return sp_err_set(err, "round: out of memory for the draft distributions of %d rows", r->rows_max);
    return 0;
}

sp_penalty *sp_round_penalty(sp_round *r) { return r->pen; }
int32_t *sp_round_draft_buf(sp_round *r) { return r->blk + 1; }
float *sp_round_q_buf(sp_round *r) { return r->q_chain ? r->q : NULL; }
const sp_round_result *sp_round_get_result(const sp_round *r) { return &r->res; }

int sp_round_push(sp_round *r, const int32_t *tok, int n, sp_err *err) {
    for (int i = 0; r->pen && i < n; i++)
        if (sp_penalty_push(r->pen, tok[i], err)) return -1;
    return 0;
}

int sp_round_plan(const sp_round *r, int pos, int max_ctx, int tokens_left) {
    int g = r->p.draft_max;
    if (g > max_ctx - pos - 1) g = max_ctx - pos - 1;
    if (g > tokens_left - 1) g = tokens_left - 1;
    return g < 0 ? -1 : g;
}

void sp_round_begin(sp_round *r, int32_t pending, int room) {
    memset(&r->res, 0, sizeof r->res);
    r->res.next = -1;
    r->blk[0] = pending;
    r->room = room;
    r->pos = sp_kv_len(r->kv);
    r->n_gmask = r->forced_round = r->forced_seen = 0;
}

/* ---- the grammar -------------------------------------------------------------------------- */
/* The masks of rows 0 .. nd along the chain drafts (rows the forced proposal computed are kept); a
 * draft the grammar forbids ends the chain there. Returns the drafts kept. */
static int gram_chain(sp_round *r, int nd, sp_err *err) {
    if (sp_gstate_copy(r->gw, r->gs, err)) return -1;
    for (int i = 0;; i++) {
        uint8_t *m = r->gmask + (size_t)i * r->V;
        int32_t only;
        if (i >= r->n_gmask && sp_gstate_mask(r->gw, m, &only, err) < 0) return -1;
        if (i >= r->n_gmask) r->n_gmask = i + 1;
        if (i == nd) return nd;
        if (!m[r->blk[i + 1]]) {
            r->res.cut = nd - i;
            return i;
        }
        if (sp_gstate_accept(r->gw, r->blk[i + 1], err)) return -1;
    }
}

/* The drafts the grammar forces from the pending token on (exactly one token allowed), at most k:
 * drafted without the drafter. Their rows' masks stay computed. Returns the count. */
static int gram_forced(sp_round *r, int k, sp_err *err) {
    if (sp_gstate_copy(r->gw, r->gs, err)) return -1;
    int j = 0;
    for (;; j++) {
        int32_t only;
        if (sp_gstate_mask(r->gw, r->gmask + (size_t)j * r->V, &only, err) < 0) return -1;
        r->n_gmask = j + 1;
        if (j == k || only < 0 || sp_gstate_done(r->gw)) return j;
        r->blk[j + 1] = only;
        if (sp_gstate_accept(r->gw, only, err)) return -1;
    }
}

/* Tree row v's position (its parent's and v's token) and mask; gstat[v] ← 1, or 2 when the grammar
 * forbids v's token there (v and its subtree are never followed). 0, or -1 with err. */
static int gram_row(sp_round *r, int v, int pr, int32_t tok, sp_err *err) {
    uint8_t *m = r->gmask + (size_t)v * r->V;
    if (v > 0 && (r->gstat[pr] != 1 || !r->gmask[(size_t)pr * r->V + (size_t)tok])) {
        memset(m, 1, (size_t)r->V); /* never read: the walk only moves to allowed tokens */
        r->gstat[v] = 2;
        return 0;
    }
    if (!r->gnode[v] && !(r->gnode[v] = sp_gstate_create(r->p.grammar, r->p.gvocab, err))) return -1;
    if (sp_gstate_copy(r->gnode[v], v ? r->gnode[pr] : r->gs, err)) return -1;
    if (v > 0 && sp_gstate_accept(r->gnode[v], tok, err)) return -1;
    int32_t only;
    if (sp_gstate_mask(r->gnode[v], m, &only, err) < 0) return -1;
    r->gstat[v] = 1;
    return 0;
}

/* The drafter's tree constraint (sp_draft_tree_constraint): node v's children only among the tokens
 * the grammar allows after v's root path; the row's mask stays for the verification. */
static int gram_tree_node(void *ctx, int v, int parent, int32_t tok, float *logits, int V, sp_err *err) {
    sp_round *r = ctx;
    if (v >= r->rows_max || V != r->V) return 1;
    if (!r->gstat[v] && gram_row(r, v, parent, tok, err)) return -1;
    if (r->gstat[v] != 1) return 1;
    const uint8_t *m = r->gmask + (size_t)v * r->V;
    int any = 0;
    for (int t = 0; t < V; t++)
        if (!m[t]) logits[t] = -INFINITY;
        else any |= logits[t] > -INFINITY;
    return !any;
}

/* A greedy tree under the grammar: the masks of the rows the drafter's constraint did not reach
 * (leaves, or nodes of a drafter that ignores it); res.cut counts the nodes the grammar forbids.
 * Returns 0, or -1 with err. */
static int gram_tree(sp_round *r, sp_err *err) {
    const sp_tree *t = &r->tree;
    r->res.cut = 0;
    for (int v = 0; v <= t->n; v++) {
        if (!r->gstat[v] && gram_row(r, v, v ? t->parent[v] : -1, t->tok[v], err)) return -1;
        r->res.cut += r->gstat[v] == 2;
    }
    r->n_gmask = t->n + 1;
    return 0;
}

/* The drafter's constraint (sp_draft_constraint): before draft j, the grammar's mask of row j (the
 * position after drafts 0 .. j-1, which accept() fed to the working state) applied to the drafter's
 * logits; 1 (end the proposal) when the row allows nothing or the round has no row for it. */
static int gram_draft_mask(void *ctx, int j, float *logits, int V, sp_err *err) {
    sp_round *r = ctx;
    if (j >= r->rows_max - 1 || V != r->V) return 1;
    if (j == 0 && sp_gstate_copy(r->gw, r->gs, err)) return -1;
    uint8_t *m = r->gmask + (size_t)j * r->V;
    int32_t only;
    if (j >= r->n_gmask) { /* row 0 may be left from gram_forced, for the same state */
        if (sp_gstate_mask(r->gw, m, &only, err) < 0) return -1;
        r->n_gmask = j + 1;
    }
    int any = 0;
    for (int v = 0; v < V; v++)
        if (!m[v]) logits[v] = -INFINITY;
        else any = 1;
    return !any;
}

static int gram_draft_accept(void *ctx, int32_t x, sp_err *err) {
    sp_round *r = ctx;
    return sp_gstate_accept(r->gw, x, err);
}

/* A draft distribution row q[V] restricted to the tokens allowed (m) and renormalised; one-hot at the
 * draft x when nothing allowed is left. */
static void gram_mask_q(float *q, const uint8_t *m, int V, int32_t x) {
    double z = 0;
    for (int v = 0; v < V; v++) {
        if (!m[v]) q[v] = 0;
        z += q[v];
    }
    if (z <= 0) {
        memset(q, 0, sizeof(float) * (size_t)V);
        q[x] = 1;
        return;
    }
    for (int v = 0; v < V; v++) q[v] = (float)(q[v] / z);
}

/* Tell the drafter the plain rounds held since its last propose / commit. */
static int hold_flush(sp_round *r, sp_err *err) {
    if (!r->n_hold) return 0;
    int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
    int rc = r->d->extend(r->d, r->hold_tok, r->n_hold, r->hold_taps, r->hold_hid, err);
    sp_prof_phase_leave(prof);
    r->n_hold = 0;
    return rc;
}

int sp_round_set_drafts(sp_round *r, int k, int nd, sp_err *err) {
    r->res.k = k;
    if (nd > k) nd = k;
    if (nd > r->room) nd = r->room;
    if (nd < 0) nd = 0;
    for (int i = 1; i <= nd; i++)
        if (r->blk[i] < 0 || r->blk[i] >= r->V)
            return sp_err_set(err, "spec: drafter %s proposed token %d outside the vocabulary", r->d ? r->d->name : "(grammar)", r->blk[i]);
    if (r->gs && (nd = gram_chain(r, nd, err)) < 0) return -1;
    if (nd < r->p.draft_min && !r->forced_round) nd = 0;
    for (int i = 0; r->gs && r->q_chain && i < nd; i++) {
        float *q = r->q + (size_t)i * r->V;
        if (r->forced_round) memset(q, 0, sizeof(float) * (size_t)r->V), q[r->blk[i + 1]] = 1;
        else gram_mask_q(q, r->gmask + (size_t)i * r->V, r->V, r->blk[i + 1]);
    }
    r->res.nd = r->res.depth = nd;
    return 0;
}

int sp_round_propose(sp_round *r, int k, sp_err *err) {
    r->res.k = k;
    /* tokens the grammar forces cost no drafter call, so they are drafted even when no drafts were
     * asked for (k = 0: up to draft_max); each is accepted for certain (the constrained p is one-hot) */
    int fk = k > 0 ? k : r->p.draft_max;
    if (fk > r->room) fk = r->room;
    if (r->gs && fk > 0 && !r->forced_seen) { /* looked for once per round: none now, none later */
        r->forced_seen = 1;
        int f = gram_forced(r, fk, err);
        if (f < 0) return -1;
        if (f > 0) {
            r->forced_round = 1;
            r->res.forced = f;
            int rc = sp_round_set_drafts(r, fk, f, err);
            r->res.k = k; /* the drafts asked of the drafter */
            return rc;
        }
    }
    if (!r->d || k <= 0 || r->forced_round) return 0;
    /* the held rows' update is a one-time cost of turning drafting on: apart from draft_ms */
    double t0 = sp_time_ms();
    if (hold_flush(r, err)) return -1;
    r->res.hold_ms = sp_time_ms() - t0;
    t0 = sp_time_ms();
    int prof = sp_prof_phase_enter(SP_PROF_DRAFT), nd;
    if (r->p.tree.nodes > 0) {
        sp_tree_shape sh = r->p.tree;
        if (k < sh.max_depth) sh.max_depth = k;
        if (r->room < sh.nodes) sh.nodes = r->room;
        sp_draft_tree_constraint tc = {gram_tree_node, r};
        if (r->gs) memset(r->gstat, 0, sizeof r->gstat);
        r->d->tree_constraint = r->gs ? &tc : NULL;
        nd = sp_tree_propose(&r->tree, r->d, &sh, r->blk[0], r->V, r->greedy ? NULL : r->q, err);
        r->d->tree_constraint = NULL;
        r->res.tree = 1;
        r->res.nd = r->tree.n;
        r->res.depth = r->tree.depth;
        if (nd >= 0 && r->gs && gram_tree(r, err)) nd = -1;
    } else {
        /* under a grammar the drafter draws from grammar-masked logits (when it takes the constraint):
         * its later drafts follow the grammar instead of being cut */
        sp_draft_constraint gc = {gram_draft_mask, gram_draft_accept, r};
        r->d->constraint = r->gs ? &gc : NULL;
        nd = r->d->propose(r->d, k, r->blk + 1, r->q_chain ? r->q : NULL, err);
        r->d->constraint = NULL;
    }
    sp_prof_phase_leave(prof);
    r->res.draft_ms = sp_time_ms() - t0;
    if (nd < 0) return -1;
    return r->res.tree ? 0 : sp_round_set_drafts(r, k, nd, err);
}

int sp_round_rows(sp_round *r, float *logits, float *taps, float *hidden, sp_forward_out *out, sp_forward_seq *seq) {
    int nt = r->p.n_taps, T = 1 + r->res.nd;
    r->logits = logits ? logits : r->own_logits;
    *out = (sp_forward_out){.logits = r->logits, .tap_layers = nt ? r->p.tap_layers : NULL, .n_taps = nt,
                            .taps = nt ? (taps ? taps : r->taps) : NULL,
                            .hidden = r->p.wants_hidden ? (hidden ? hidden : r->hidden) : NULL};
    *seq = (sp_forward_seq){r->kv, r->res.tree ? r->tree.tok : r->blk, T, out, r->res.tree ? r->tree.parent : NULL};
    return T;
}

/* The verification rule at chain row i (sampling): accept draft i + 1 or draw the correction. */
static int chain_sample_row(sp_round *r, int i, int nd, uint64_t tpos, int *next, sp_err *err) {
    uint64_t seed = r->p.sample.seed;
    if (sp_sampler_probs(r->smp, r->probs, r->logits + (size_t)i * r->V, err)) return -1;
    if (i == nd) { /* bonus (or plain step) from p */
        *next = sp_sample_probs(r->probs, r->V, sp_rng_uniform(seed, SP_RNG_STREAM_SAMPLE, tpos));
        return 0;
    }
    const float *q = r->q_chain ? r->q + (size_t)i * r->V : NULL;
    if (r->p.on_verify) r->p.on_verify(r->p.on_verify_ctx, i, r->probs, r->V);
    if (r->p.want_alpha) r->res.alpha[r->res.n_alpha++] = row_accept(r->probs, q, r->V, r->blk[i + 1]);
    int ok;
    int tok = sp_spec_verify_one(r->probs, q, r->V, r->blk[i + 1], sp_rng_uniform(seed, SP_RNG_STREAM_ACCEPT, tpos),
                                 sp_rng_uniform(seed, SP_RNG_STREAM_RESIDUAL, tpos), r->p.broken_residual, &ok);
    if (ok) return 1;
    *next = tok;
    return 0;
}

/* Decide the chain left to right: res.acc and res.next. With penalties the logits of row i see
 * drafts 1..i as part of the sequence (pushed one by one, popped after the round). */
static int chain_accept(sp_round *r, sp_err *err) {
    int nd = r->res.nd, pushed = 0, acc = 0, next = -1, rc = 0;
    for (int i = 0; i <= nd; i++) {
        float *lg = r->logits + (size_t)i * r->V;
        uint64_t tpos = (uint64_t)(r->pos + 1 + i); /* position of the token being decided */
        if (r->pen) {
            if (i > 0 && (rc = sp_penalty_push(r->pen, r->blk[i], err))) break;
            pushed += i > 0;
            sp_penalty_apply(r->pen, lg);
        }
        if (r->gs) sp_grammar_apply(r->gmask + (size_t)i * r->V, lg, r->V);
        if (r->greedy) {
            int best = sp_sample_argmax(lg, r->V);
            if (i < nd && r->blk[i + 1] == best) {
                acc++;
                continue;
            }
            next = best;
            break;
        }
        int ok = chain_sample_row(r, i, nd, tpos, &next, err);
        if (ok < 0) rc = -1;
        if (ok != 1) break;
        acc++;
    }
    if (r->pen) sp_penalty_pop(r->pen, pushed);
    if (rc) return -1;
    if (next < 0) return sp_err_set(err, "spec: sampling failed (empty distribution)");
    r->res.acc = acc;
    r->res.next = next;
    for (int i = 0; i < acc; i++) r->acc_tok[i] = r->blk[i + 1];
    return sp_kv_trim(r->kv, nd - acc, err); /* keep pending + the accepted drafts */
}

/* Synthetic acceptance (benchmarks only, spec.h, docs/SYNTHETIC.md): draft i + 1 is accepted with
 * the chance synth->p[i] once draft i was, by a uniform of (seed, SP_RNG_STREAM_SYNTH, its position).
 * The accepted drafts are the drafter's own tokens: the cache holds exactly them after the pending
 * token and the drafter is told them as a real round's, so every later round is a consistent one.
 * The token after them is the target's own from row acc (argmax, or drawn from p), under the same
 * penalties and grammar mask as a real round's. Sampling chains report p[i] as alpha. */
static int synth_accept(sp_round *r, sp_err *err) {
    const sp_synth *sy = r->p.synth;
    uint64_t seed = sy->seed ^ (r->p.sample.seed * 0x9E3779B97F4A7C15ull);
    int nd = r->res.nd, acc = 0, next, rc = 0, pushed = 0;
    for (; acc < nd; acc++) {
        double pa = sy->p[acc < sy->n ? acc : sy->n - 1];
        if (r->p.want_alpha && !r->greedy) r->res.alpha[r->res.n_alpha++] = pa;
        if (!(sp_rng_uniform(seed, SP_RNG_STREAM_SYNTH, (uint64_t)(r->pos + 1 + acc)) < pa)) break;
    }
    float *lg = r->logits + (size_t)acc * r->V;
    for (int i = 1; r->pen && i <= acc && !rc; i++) rc = sp_penalty_push(r->pen, r->blk[i], err), pushed += !rc;
    if (r->pen && !rc) sp_penalty_apply(r->pen, lg);
    if (r->pen) sp_penalty_pop(r->pen, pushed);
    if (rc) return -1;
    if (r->gs) sp_grammar_apply(r->gmask + (size_t)acc * r->V, lg, r->V);
    if (r->greedy) {
        next = sp_sample_argmax(lg, r->V);
    } else {
        if (sp_sampler_probs(r->smp, r->probs, lg, err)) return -1;
        next = sp_sample_probs(r->probs, r->V,
                               sp_rng_uniform(r->p.sample.seed, SP_RNG_STREAM_SAMPLE, (uint64_t)(r->pos + 1 + acc)));
    }
    if (next < 0) return sp_err_set(err, "spec: sampling failed (empty distribution)");
    r->res.acc = acc;
    r->res.next = next;
    for (int i = 0; i < acc; i++) r->acc_tok[i] = r->blk[i + 1];
    return sp_kv_trim(r->kv, nd - acc, err); /* keep pending + the accepted drafts */
}

int sp_round_accept(sp_round *r, sp_err *err) {
    if (r->gs && r->n_gmask < r->res.nd + 1 && gram_chain(r, r->res.nd, err) < 0) return -1; /* a plain step's row */
    if (!r->res.tree && r->p.synth) return synth_accept(r, err);
    if (!r->res.tree) return chain_accept(r, err);
    for (int row = 0; r->gs && row <= r->tree.n; row++) /* greedy trees: each row's own position */
        sp_grammar_apply(r->gmask + (size_t)row * r->V, r->logits + (size_t)row * r->V, r->V);
    sp_tree_walk_in in = {.logits = r->logits, .q = r->greedy ? NULL : r->q, .probs = r->probs, .smp = r->smp,
                          .V = r->V, .greedy = r->greedy, .broken = r->p.broken_residual, .seed = r->p.sample.seed,
                          .pos = (uint64_t)r->pos, .pen = r->pen};
    if (sp_tree_walk(&r->tree, &in, r->acc_tok, &r->res.acc, &r->res.next, err)) return -1;
    return sp_tree_keep(&r->tree, r->kv, r->d, r->res.acc, r->taps, r->p.n_taps, r->hidden, r->H, err);
}

const int32_t *sp_round_accepted(const sp_round *r) { return r->acc_tok; }

const float *sp_round_logits_row(const sp_round *r, int i) {
    int row = r->res.tree ? r->tree.rows[i] : i;
    return r->logits + (size_t)row * r->V;
}

int sp_round_emit(sp_round *r, int (*stop)(void *ctx, int32_t tok, int i), void *ctx, sp_err *err) {
    int n = 0;
    for (int i = 0; i <= r->res.acc && !r->res.stopped; i++) {
        int32_t tok = i < r->res.acc ? r->acc_tok[i] : r->res.next;
        if (r->pen && sp_penalty_push(r->pen, tok, err)) return -1;
        int bad = r->gs ? sp_gstate_accept(r->gs, tok, err) : 0;
        if (bad) return bad < 0 ? -1 : sp_err_set(err, "grammar: token %d emitted where the grammar forbids it", tok);
        n++;
        if (i == r->res.acc) r->res.from_target++;
        else if (r->forced_round) r->res.from_forced++;
        else r->res.from_drafter++;
        if (stop(ctx, tok, i)) r->res.stopped = 1;
    }
    return n;
}

/* A round without drafts asked for: hold its row for extend. */
static int hold_row(sp_round *r, sp_err *err) {
    int nt = r->p.n_taps, H = r->H;
    if (nt) memcpy(r->hold_taps + (size_t)r->n_hold * nt * H, r->taps, sizeof(float) * (size_t)nt * H);
    if (r->p.wants_hidden) memcpy(r->hold_hid + (size_t)r->n_hold * H, r->hidden, sizeof(float) * (size_t)H);
    r->hold_tok[r->n_hold++] = r->res.next;
    return r->n_hold == HOLD_ROWS ? hold_flush(r, err) : 0;
}

/* A round the grammar drafted: to the drafter it is acc + 1 plain steps, each token held for extend
 * or committed with its own row. */
static int forced_commit(sp_round *r, sp_err *err) {
    int nt = r->p.n_taps, H = r->H;
    for (int j = 0; j <= r->res.acc; j++) {
        int32_t tok = j < r->res.acc ? r->acc_tok[j] : r->res.next;
        const float *taps = nt ? r->taps + (size_t)j * nt * H : NULL;
        const float *hid = r->p.wants_hidden ? r->hidden + (size_t)j * H : NULL;
        if (!r->hold) {
            if (r->d->commit(r->d, 0, tok, taps, hid, err)) return -1;
            continue;
        }
        if (nt) memcpy(r->hold_taps + (size_t)r->n_hold * nt * H, taps, sizeof(float) * (size_t)nt * H);
        if (hid) memcpy(r->hold_hid + (size_t)r->n_hold * H, hid, sizeof(float) * (size_t)H);
        r->hold_tok[r->n_hold++] = tok;
        if (r->n_hold == HOLD_ROWS && hold_flush(r, err)) return -1;
    }
    return 0;
}

int sp_round_commit(sp_round *r, sp_err *err) {
    if (!r->d) return 0;
    double t0 = sp_time_ms();
    int rc;
    if (r->forced_round) {
        int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
        rc = forced_commit(r, err);
        sp_prof_phase_leave(prof);
    } else if (r->res.k > 0 || !r->hold) {
        int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
        rc = r->d->commit(r->d, r->res.acc, r->res.next, r->taps, r->hidden, err);
        sp_prof_phase_leave(prof);
    } else {
        rc = hold_row(r, err);
    }
    r->res.draft_ms += sp_time_ms() - t0;
    return rc;
}
