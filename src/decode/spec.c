/* spec.c — the speculative decoding loop: propose → verify over [pending, drafts] → accept →
 * trim the target cache → tell the drafter. See spec.h for the rules and why they are lossless. */
#include "decode/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/sample.h"
#include "decode/tree.h"

#define EXT_ROWS 64 /* plain rounds held for one extend: one batched context update */

sp_spec_params sp_spec_params_default(void) {
    sp_spec_params p;
    memset(&p, 0, sizeof p);
    p.gen = sp_gen_params_default();
    p.draft_max = 8;
    p.draft_min = 0;
    return p;
}

int sp_spec_verify_one(float *p, const float *q, int V, int32_t x, double u_acc, double u_res, int broken,
                       int *accepted) {
    double px = p[x], qx = q ? q[x] : 1.0;
    /* accept with probability min(1, p/q); qx == 0 cannot be drawn from q, but guard anyway */
    if (qx > 0 && u_acc * qx < px) {
        *accepted = 1;
        return x;
    }
    *accepted = 0;
    if (broken) return sp_sample_probs(p, V, u_res);
    if (q) return sp_sample_residual(p, q, V, u_res);
    /* one-hot q: the residual is p with x removed, renormalised */
    float save = p[x];
    p[x] = 0;
    int tok = sp_sample_probs(p, V, u_res);
    p[x] = save;
    if (tok < 0) tok = x; /* p was one-hot at x: cannot be rejected (px/qx = 1) */
    return tok;
}

/* the chance that draft x, drawn from q[V] (NULL: one-hot at x), is accepted against p[V]:
 * Σ_v min(p, q) = 1 − TV(p, q) */
static double row_accept(const float *p, const float *q, int V, int32_t x) {
    if (!q) return p[x];
    double a = 0;
    for (int v = 0; v < V; v++) a += p[v] < q[v] ? p[v] : q[v];
    return a;
}

typedef struct {
    sp_model *m;
    sp_kv *kv;
    sp_drafter *d;
    const sp_spec_params *p;
    sp_sampler *smp;
    sp_penalty *pen; /* NULL: no repetition penalties; else the committed stream (penalty.h) */
    int V, H, greedy, chunk;
    float *logits, *probs, *q, *taps, *hidden;
    int32_t blk[SP_SPEC_MAX_G + 1];
    /* rounds that asked for no drafts, held for the drafter's extend (drafter.h) */
    int ext, n_ext; /* ext: the drafter has extend and the policy is adaptive */
    int32_t ext_tok[EXT_ROWS];
    float *ext_taps, *ext_hid; /* [EXT_ROWS, n_taps·H], [EXT_ROWS, H] */
    sp_tree *tree; /* token trees (p->tree.nodes > 0), else NULL: chains */
} loop_t;

/* Tell the drafter the plain rounds held since its last propose / commit. */
static int extend_flush(loop_t *L, sp_err *err) {
    if (!L->n_ext) return 0;
    int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
    int rc = L->d->extend(L->d, L->ext_tok, L->n_ext, L->ext_taps, L->ext_hid, err);
    sp_prof_phase_leave(prof);
    L->n_ext = 0;
    return rc;
}

/* A round without drafts asked for: hold its row for extend, or commit it now. */
static int commit_plain(loop_t *L, int k, int32_t next, sp_err *err) {
    if (k > 0 || !L->ext) {
        int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
        int rc = L->d->commit(L->d, 0, next, L->taps, L->hidden, err);
        sp_prof_phase_leave(prof);
        return rc;
    }
    int nt = L->d->n_taps, H = L->H;
    if (nt) memcpy(L->ext_taps + (size_t)L->n_ext * nt * H, L->taps, sizeof(float) * (size_t)nt * H);
    if (L->d->wants_hidden) memcpy(L->ext_hid + (size_t)L->n_ext * H, L->hidden, sizeof(float) * (size_t)H);
    L->ext_tok[L->n_ext++] = next;
    return L->n_ext == EXT_ROWS ? extend_flush(L, err) : 0;
}

/* Prefill prompt[0..n) (all but the pending token) and begin the drafter with the prompt's
 * taps / hidden rows when it wants them. */
static int prefill(loop_t *L, const int32_t *prompt, int n, sp_err *err) {
    int chunk = L->chunk, nt = L->d ? L->d->n_taps : 0, wh = L->d && L->d->wants_hidden;
    float *all_taps = NULL, *all_hid = NULL;
    size_t rows = (size_t)(n > 0 ? n : 1);
    if (nt) all_taps = malloc(sizeof(float) * rows * nt * L->H);
    if (wh) all_hid = malloc(sizeof(float) * rows * L->H);
    int rc = -1;
    if ((nt && !all_taps) || (wh && !all_hid)) {
        sp_err_set(err, "out of memory for the prompt's hidden states");
        goto done;
    }
    for (int i = 0; i < n; i += chunk) {
        int b = n - i < chunk ? n - i : chunk;
        sp_forward_out o = {0};
        if (nt) {
            o.tap_layers = L->d->tap_layers;
            o.n_taps = nt;
            o.taps = all_taps + (size_t)i * nt * L->H;
        }
        if (wh) o.hidden = all_hid + (size_t)i * L->H;
        if (sp_model_forward(L->m, L->kv, prompt + i, b, &o, err)) goto done;
    }
    sp_drafter_ctx ctx = {L->m, L->kv, L->p->gen.sample.seed, L->pen};
    rc = L->d ? L->d->begin(L->d, prompt, n + 1, all_taps, all_hid, &ctx, err) : 0;
done:
    free(all_taps);
    free(all_hid);
    return rc;
}

/* Emit acc accepted drafts (blk[1..acc]) then the target's token, stopping at EOS / max_new /
 * callback: *stop is set and st->stop says why. */
static int emit(loop_t *L, const int32_t *drafts, int acc, int32_t next, int32_t *out, int *n_out, int *stop,
                sp_spec_stats *st, sp_err *err) {
    const sp_spec_params *p = L->p;
    const sp_config *cfg = sp_model_config(L->m);
    for (int i = 0; i <= acc && !*stop; i++) {
        int32_t tok = i < acc ? drafts[i] : next;
        out[(*n_out)++] = tok;
        if (L->pen && sp_penalty_push(L->pen, tok, err)) return -1;
        if (p->gen.on_token && p->gen.on_token(p->gen.cb_ctx, tok)) st->stop = SP_STOP_CALLBACK, *stop = 1;
        else if (!p->gen.ignore_eos && sp_gen_is_eos(cfg, &p->gen, tok)) st->stop = SP_STOP_EOS, *stop = 1;
        else if (*n_out >= p->gen.max_new) st->stop = SP_STOP_MAX_NEW, *stop = 1;
    }
    return 0;
}

/* the counts of a round that verified `drafted` drafts (a tree: its nodes) over nd positions (a
 * tree: its depth) and accepted acc */
static void count_positions(sp_spec_stats *st, int drafted, int nd, int acc) {
    st->drafted += drafted;
    st->verify_len_hist[nd]++;
    st->accepted += acc;
    for (int i = 0; i < nd; i++) {
        st->pos_drafted[i]++;
        if (i < acc) st->pos_accepted[i]++;
    }
}

/* A round over a token tree of at most k levels (tree.c, docs/TREE.md): propose, verify in one
 * forward, keep the accepted path in the cache, emit, commit, and tell the policy (the tree's
 * depth stands for the drafts: its measured cost per level is what the tree costs). *stop: the
 * request ended. */
static int tree_step(loop_t *L, sp_policy *pol, int32_t *pending, int k, int max_ctx, int32_t *out, int *n_out,
                     int *stop, sp_spec_stats *st, double t_round, sp_err *err) {
    const sp_spec_params *p = L->p;
    double td = sp_time_ms();
    if (extend_flush(L, err)) return -1;
    st->draft_ms += sp_time_ms() - td;
    double tv = sp_time_ms();
    sp_tree_result tr;
    if (sp_tree_round(L->tree, L->m, L->kv, L->d, *pending, k, max_ctx - sp_kv_len(L->kv) - 1, L->smp, L->greedy,
                      p->gen.sample.seed, L->pen, p->broken_residual, L->blk + 1, &tr, err))
        return -1;
    double verify_ms = sp_time_ms() - tv - tr.draft_ms;
    st->target_calls++;
    if (tr.nodes == 0) st->rounds_nodraft[SP_NODRAFT_DRAFTER]++;
    st->verify_ms += verify_ms;
    count_positions(st, tr.nodes, tr.depth, tr.acc);
    if (emit(L, L->blk + 1, tr.acc, tr.next, out, n_out, stop, st, err)) return -1;
    if (*stop) return 0;
    *pending = tr.next;
    double tc = sp_time_ms();
    int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
    int crc = L->d->commit(L->d, tr.acc, tr.next, tr.taps, tr.hidden, err);
    sp_prof_phase_leave(prof);
    if (crc) return -1;
    double draft_ms = tr.draft_ms + sp_time_ms() - tc;
    st->draft_ms += draft_ms;
    sp_policy_observe(pol, k, tr.depth, tr.acc, draft_ms, verify_ms, sp_time_ms() - t_round);
    return 0;
}

/* One chain round's outcome, filled phase by phase. */
typedef struct {
    int k;                        /* drafts the policy asked for */
    int why;                      /* when none are verified: sp_nodraft_reason */
    int nd, acc;                  /* drafts verified, drafts accepted */
    int32_t next;                 /* the target's token after the accepted drafts */
    int n_alpha;                  /* sampling, adaptive policy: rows in alpha */
    double alpha[SP_SPEC_MAX_G];  /* Σ min(p, q) of each verified row */
    double draft_ms, forward_ms;  /* the drafter's time (propose + commit); the verify forward's */
} round_t;

/* Propose up to min(r->k, g) drafts into blk[1..]: r->nd (0 when fewer than draft_min). */
static int propose(loop_t *L, round_t *r, int g, sp_spec_stats *st, sp_err *err) {
    sp_drafter *d = L->d;
    double td = sp_time_ms();
    if (extend_flush(L, err)) return -1;
    /* the held rows' update is a one-time cost of turning drafting on: outside the round's draft
     * time the policy weighs */
    st->draft_ms += sp_time_ms() - td;
    td = sp_time_ms();
    int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
    int nd = d->propose(d, r->k, L->blk + 1, L->q, err);
    sp_prof_phase_leave(prof);
    r->draft_ms = sp_time_ms() - td;
    if (nd < 0) return -1;
    if (nd > r->k) nd = r->k;
    if (nd > g) nd = g;
    for (int i = 1; i <= nd; i++)
        if (L->blk[i] < 0 || L->blk[i] >= L->V)
            return sp_err_set(err, "spec: drafter %s proposed token %d outside the vocabulary", d->name, L->blk[i]);
    r->nd = nd < L->p->draft_min ? 0 : nd;
    return 0;
}

/* Decide the drafts left to right on the verify forward's logits: r->acc and r->next. With
 * penalties the logits of row i see drafts 1..i as part of the sequence (pushed one by one,
 * popped after the round). pos: the absolute position of blk[0]. */
static int accept(loop_t *L, round_t *r, int pos, int adaptive, sp_err *err) {
    const sp_spec_params *p = L->p;
    uint64_t seed = p->gen.sample.seed;
    int nd = r->nd, pushed = 0;
    r->acc = 0;
    r->next = -1;
    r->n_alpha = 0;
    for (int i = 0; i <= nd; i++) {
        float *lg = L->logits + (size_t)i * L->V;
        uint64_t tpos = (uint64_t)(pos + 1 + i); /* position of the token being decided */
        if (L->pen) {
            if (i > 0 && sp_penalty_push(L->pen, L->blk[i], err)) return -1;
            pushed += i > 0;
            sp_penalty_apply(L->pen, lg);
        }
        if (L->greedy) {
            int best = sp_sample_argmax(lg, L->V);
            if (i < nd && L->blk[i + 1] == best) {
                r->acc++;
                continue;
            }
            r->next = best;
            break;
        }
        if (sp_sampler_probs(L->smp, L->probs, lg, err)) return -1;
        if (i == nd) { /* bonus (or plain step) from p */
            r->next = sp_sample_probs(L->probs, L->V, sp_rng_uniform(seed, SP_RNG_STREAM_SAMPLE, tpos));
            break;
        }
        const float *q = L->q ? L->q + (size_t)i * L->V : NULL;
        if (p->on_verify) p->on_verify(p->on_verify_ctx, i, L->probs, L->V);
        if (adaptive) r->alpha[r->n_alpha++] = row_accept(L->probs, q, L->V, L->blk[i + 1]);
        int ok;
        int tok = sp_spec_verify_one(L->probs, q, L->V, L->blk[i + 1], sp_rng_uniform(seed, SP_RNG_STREAM_ACCEPT, tpos),
                                     sp_rng_uniform(seed, SP_RNG_STREAM_RESIDUAL, tpos), p->broken_residual, &ok);
        if (ok) {
            r->acc++;
            continue;
        }
        r->next = tok;
        break;
    }
    if (L->pen) sp_penalty_pop(L->pen, pushed);
    if (r->next < 0) return sp_err_set(err, "spec: sampling failed (empty distribution)");
    return 0;
}

/* The target forward over blk = [pending, drafts] (taps and hidden rows for the drafter), then
 * the acceptance rule, then the cache rolled back over the rejected drafts. pos: the absolute
 * position of pending. */
static int verify(loop_t *L, round_t *r, int pos, int adaptive, sp_spec_stats *st, sp_err *err) {
    sp_drafter *d = L->d;
    int nt = d ? d->n_taps : 0;
    double tv = sp_time_ms();
    sp_forward_out o = {.logits = L->logits, .tap_layers = nt ? d->tap_layers : NULL, .n_taps = nt, .taps = L->taps,
                        .hidden = L->hidden};
    int prof = sp_prof_phase_enter(SP_PROF_VERIFY);
    if (sp_model_forward(L->m, L->kv, L->blk, r->nd + 1, &o, err)) return -1;
    r->forward_ms = sp_time_ms() - tv;
    st->target_calls++;
    if (d && r->nd == 0) st->rounds_nodraft[r->why]++;
    sp_prof_enter(SP_PROF_SAMPLE);
    int rc = accept(L, r, pos, adaptive, err);
    sp_prof_phase_leave(prof);
    if (rc) return -1;
    st->verify_ms += sp_time_ms() - tv;
    count_positions(st, r->nd, r->nd, r->acc);
    return sp_kv_trim(L->kv, r->nd - r->acc, err); /* keep pending + the accepted drafts */
}

/* Tell the drafter what the round committed (a round without drafts may be held for extend). */
static int commit(loop_t *L, round_t *r, sp_err *err) {
    double tc = sp_time_ms();
    if (r->nd > 0) {
        int prof = sp_prof_phase_enter(SP_PROF_DRAFT);
        int crc = L->d->commit(L->d, r->acc, r->next, L->taps, L->hidden, err);
        sp_prof_phase_leave(prof);
        if (crc) return -1;
    } else if (commit_plain(L, r->k, r->next, err)) {
        return -1;
    }
    r->draft_ms += sp_time_ms() - tc;
    return 0;
}

/* Allocate the loop's buffers for G drafts per round (TN tree nodes) and a cache of max_ctx. */
static int loop_init(loop_t *L, int max_ctx, int G, int TN, sp_err *err) {
    sp_drafter *d = L->d;
    const sp_spec_params *p = L->p;
    int nt = d ? d->n_taps : 0, wh = d && d->wants_hidden;
    int want_q = d && d->provides_q && !L->greedy;
    L->kv = sp_kv_create(L->m, max_ctx, L->chunk, err);
    L->smp = sp_sampler_create(L->V, &p->gen.sample, err);
    L->logits = malloc(sizeof(float) * (size_t)(G + 1) * L->V);
    L->probs = malloc(sizeof(float) * (size_t)L->V);
    L->q = want_q ? malloc(sizeof(float) * (size_t)(G > 0 ? G : 1) * L->V) : NULL;
    L->taps = nt ? malloc(sizeof(float) * (size_t)(G + 1) * nt * L->H) : NULL;
    L->hidden = wh ? malloc(sizeof(float) * (size_t)(G + 1) * L->H) : NULL;
    int ext = L->ext = d && d->extend && p->policy == SP_SPEC_POLICY_ADAPTIVE;
    L->ext_taps = ext && nt ? malloc(sizeof(float) * EXT_ROWS * nt * L->H) : NULL;
    L->ext_hid = ext && wh ? malloc(sizeof(float) * EXT_ROWS * L->H) : NULL;
    if (!L->kv || !L->smp || !L->logits || !L->probs || (want_q && !L->q) || (nt && !L->taps) || (wh && !L->hidden) ||
        (ext && nt && !L->ext_taps) || (ext && wh && !L->ext_hid)) {
        if (L->kv && L->smp) sp_err_set(err, "spec: out of memory");
        return -1;
    }
    if (TN) {
        sp_tree_shape sh = p->tree;
        sh.max_depth = G;
        if (!(L->tree = sp_tree_create(L->m, d, &sh, !L->greedy, err))) return -1;
    }
    if (sp_penalty_active(&p->gen.penalty) && !(L->pen = sp_penalty_create(L->V, &p->gen.penalty, err))) return -1;
    return 0;
}

static void loop_free(loop_t *L) {
    sp_tree_free(L->tree);
    sp_kv_free(L->kv);
    sp_sampler_free(L->smp);
    sp_penalty_free(L->pen);
    free(L->logits);
    free(L->probs);
    free(L->q);
    free(L->taps);
    free(L->hidden);
    free(L->ext_taps);
    free(L->ext_hid);
}

/* the request's summary figures from its counts */
static void finish_stats(sp_spec_stats *st, int n_out, int G) {
    if (st->stop == SP_STOP_NONE) st->stop = SP_STOP_MAX_NEW;
    st->emitted = n_out;
    st->rounds = st->target_calls;
    st->decode_tps = st->decode_ms > 0 ? n_out * 1000.0 / st->decode_ms : 0;
    st->acceptance_rate = st->drafted ? (double)st->accepted / st->drafted : 0;
    st->mean_accept_len = st->target_calls ? (double)n_out / st->target_calls : 0;
    for (int i = 0; i < G; i++)
        st->accept_per_position[i] = st->pos_drafted[i] ? (double)st->pos_accepted[i] / st->pos_drafted[i] : 0;
}

int sp_spec_generate(sp_model *m, sp_drafter *d, const int32_t *prompt, int n_prompt, const sp_spec_params *p,
                     int32_t *out, int out_cap, sp_spec_stats *st, sp_err *err) {
    const sp_config *cfg = sp_model_config(m);
    sp_spec_stats s_local;
    if (!st) st = &s_local;
    memset(st, 0, sizeof *st);
    if (n_prompt < 1) return sp_err_set(err, "spec: empty prompt");
    if (p->draft_max < 1 || p->draft_max > SP_SPEC_MAX_G)
        return sp_err_set(err, "spec: draft_max %d out of range 1..%d", p->draft_max, SP_SPEC_MAX_G);
    if (p->gen.max_new < 1 || out_cap < p->gen.max_new)
        return sp_err_set(err, "spec: max_new %d must be >= 1 and fit the output (%d)", p->gen.max_new, out_cap);
    if (sp_sample_params_check(&p->gen.sample, err)) return -1;
    if (sp_penalty_params_check(&p->gen.penalty, err)) return -1;
    int G = d ? p->draft_max : 0;
    int TN = d && p->tree.nodes > 0 ? p->tree.nodes : 0; /* tree nodes per round (0: chains) */
    int max_ctx = p->gen.max_ctx > 0 ? p->gen.max_ctx : n_prompt + p->gen.max_new + (TN > G ? TN : G) + 1;
    if (cfg->max_pos > 0 && max_ctx > cfg->max_pos) max_ctx = cfg->max_pos;
    if (n_prompt >= max_ctx) return sp_err_set(err, "spec: prompt of %d tokens fills the context (%d)", n_prompt, max_ctx);
    int chunk = p->gen.prefill_chunk > 0 ? p->gen.prefill_chunk : 512;
    if (chunk < G + 1) chunk = G + 1;
    if (chunk < TN + 1) chunk = TN + 1;

    loop_t L = {.m = m, .d = d, .p = p, .V = cfg->vocab_size, .H = cfg->hidden_size, .chunk = chunk};
    L.greedy = sp_sample_is_greedy(&p->gen.sample);
    int rc = -1;
    if (loop_init(&L, max_ctx, G, TN, err)) goto done;
    for (int i = 0; L.pen && i < n_prompt; i++)
        if (sp_penalty_push(L.pen, prompt[i], err)) goto done;
    st->n_pos = G;
    st->prompt_tokens = n_prompt;

    double t0 = sp_time_ms();
    if (prefill(&L, prompt, n_prompt - 1, err)) goto done;
    double t1 = sp_time_ms();
    st->prefill_ms = t1 - t0;

    int32_t pending = prompt[n_prompt - 1];
    int n_out = 0, stop = 0;
    sp_policy pol;
    sp_policy_begin(&pol, d ? p->policy : SP_SPEC_POLICY_ALWAYS, G, p->policy_carry);
    int adaptive = pol.kind == SP_SPEC_POLICY_ADAPTIVE;
    if (p->profile) sp_prof_start();
    while (n_out < p->gen.max_new && !stop) {
        double t_round = sp_time_ms();
        int pos = sp_kv_len(L.kv); /* absolute position of `pending` */
        /* room: the block [pending, drafts] must fit the cache, and drafts beyond max_new are waste */
        int g = G;
        if (g > max_ctx - pos - 1) g = max_ctx - pos - 1;
        if (g > p->gen.max_new - n_out - 1) g = p->gen.max_new - n_out - 1;
        if (g < 0) {
            st->stop = SP_STOP_CTX;
            break;
        }
        round_t r = {.why = SP_NODRAFT_DRAFTER};
        r.k = d ? sp_policy_choose(&pol, g, &r.why) : 0;
        if (L.tree && r.k > 0) {
            if (tree_step(&L, &pol, &pending, r.k, max_ctx, out, &n_out, &stop, st, t_round, err)) goto done;
            continue;
        }
        if (d && r.k > 0 && propose(&L, &r, g, st, err)) goto done;
        L.blk[0] = pending;
        if (verify(&L, &r, pos, adaptive, st, err)) goto done;
        if (emit(&L, L.blk + 1, r.acc, r.next, out, &n_out, &stop, st, err)) goto done;
        if (stop) break;
        pending = r.next;
        if (d && commit(&L, &r, err)) goto done;
        st->draft_ms += r.draft_ms;
        if (L.greedy || r.nd == 0)
            sp_policy_observe(&pol, r.k, r.nd, r.acc, r.draft_ms, r.forward_ms, sp_time_ms() - t_round);
        else
            sp_policy_observe_sampled(&pol, r.k, r.nd, r.acc, r.alpha, r.n_alpha, r.draft_ms, r.forward_ms,
                                      sp_time_ms() - t_round);
    }
    st->decode_ms = sp_time_ms() - t1;
    if (p->profile) sp_prof_stop(&st->prof);
    if (p->policy_carry && d) *p->policy_carry = pol;
    finish_stats(st, n_out, G);
    rc = 0;
done:
    if (p->profile) sp_prof_stop(NULL); /* on an error path: the thread stops profiling */
    loop_free(&L);
    return rc;
}
