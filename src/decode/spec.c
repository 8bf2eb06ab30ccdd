/* spec.c — the speculative decoding loop: prefill, then rounds of round.h (propose → verify
 * over [pending, drafts] → accept → trim the target cache → emit → tell the drafter), stepped
 * with the target forward run here. See spec.h for the rules and why they are lossless. */
#include "decode/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/sample.h"
#include "decode/round.h"

sp_spec_params sp_spec_params_default(void) {
    sp_spec_params p;
    memset(&p, 0, sizeof p);
    p.gen = sp_gen_params_default();
    p.draft_max = 8;
    p.draft_min = 0;
    return p;
}

int sp_synth_check(const sp_synth *s, sp_err *err) {
    if (s->n < 1 || s->n > SP_SPEC_MAX_G)
        return sp_err_set(err, "synthetic acceptance: %d entries (allowed 1..%d)", s->n, SP_SPEC_MAX_G);
    for (int i = 0; i < s->n; i++)
        if (!(s->p[i] >= 0 && s->p[i] <= 1))
            return sp_err_set(err, "synthetic acceptance: entry %d is %g, not a probability in [0, 1]", i + 1, s->p[i]);
    return 0;
}

double sp_synth_tau(const sp_synth *s, int k) {
    double tau = 1, reach = 1;
    for (int i = 0; i < k; i++) {
        reach *= s->p[i < s->n ? i : s->n - 1];
        tau += reach;
    }
    return tau;
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

typedef struct {
    sp_model *m;
    sp_kv *kv;
    sp_drafter *d;
    const sp_spec_params *p;
    sp_round *R;
    sp_policy pol;
    int H, chunk, max_ctx, n_out;
    int32_t *out;
    sp_spec_stats *st;
} loop_t;

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
    sp_drafter_ctx ctx = {L->m, L->kv, L->p->gen.sample.seed, sp_round_penalty(L->R)};
    rc = L->d ? L->d->begin(L->d, prompt, n + 1, all_taps, all_hid, &ctx, err) : 0;
done:
    free(all_taps);
    free(all_hid);
    return rc;
}

/* sp_round_emit's stop test: write the token, then stop at the callback / EOS / max_new */
static int emit_token(void *ctx, int32_t tok, int i) {
    (void)i;
    loop_t *L = ctx;
    const sp_spec_params *p = L->p;
    L->out[L->n_out++] = tok;
    if (p->gen.on_token && p->gen.on_token(p->gen.cb_ctx, tok)) L->st->stop = SP_STOP_CALLBACK;
    else if (!p->gen.ignore_eos && sp_gen_is_eos(sp_model_config(L->m), &p->gen, tok)) L->st->stop = SP_STOP_EOS;
    else if (L->n_out >= p->gen.max_new) L->st->stop = SP_STOP_MAX_NEW;
    else return 0;
    return 1;
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

/* The target forward over the round's rows (a chain, or a tree-masked forward), then the
 * acceptance rule. why: the policy's reason when no drafts were asked for. *forward_ms: the
 * forward's time (a tree: with its decision, the time its levels cost). */
static int verify(loop_t *L, int why, double *forward_ms, sp_err *err) {
    sp_forward_out o;
    sp_forward_seq q;
    int T = sp_round_rows(L->R, NULL, NULL, NULL, &o, &q);
    double tv = sp_time_ms();
    int prof = sp_prof_phase_enter(SP_PROF_VERIFY);
    int rc = q.parent ? sp_model_forward_tree(L->m, L->kv, q.tokens, q.parent, T, &o, err)
                      : sp_model_forward(L->m, L->kv, q.tokens, T, &o, err);
    *forward_ms = sp_time_ms() - tv;
    if (!rc && !q.parent && L->pol.n_experts) sp_policy_observe_experts(&L->pol, T, sp_kv_moe_experts(L->kv));
    sp_prof_enter(SP_PROF_SAMPLE);
    if (!rc) rc = sp_round_accept(L->R, err);
    sp_prof_phase_leave(prof);
    if (rc) return -1;
    const sp_round_result *res = sp_round_get_result(L->R);
    sp_spec_stats *st = L->st;
    st->target_calls++;
    if (L->d && res->nd == 0) st->rounds_nodraft[res->tree ? SP_NODRAFT_DRAFTER : why]++;
    st->verify_ms += sp_time_ms() - tv;
    if (res->tree) *forward_ms = sp_time_ms() - tv;
    count_positions(st, res->nd, res->depth, res->acc);
    st->forced += res->forced;
    st->cut += res->cut;
    return 0;
}

/* The share of a one-row forward's weight reads that are the experts its token runs, from the
 * shapes (every weight taken at the same bytes per value): the policy's prior cost of one more
 * distinct expert per MoE layer (docs/ROUND_COST.md). */
static double expert_share(const sp_config *c) {
    double H = c->hidden_size, ex = 0, other = (double)c->vocab_size * H; /* the LM head */
    for (int li = 0; li < c->n_layers && li < SP_MAX_LAYERS; li++) {
        const sp_layer_config *lc = &c->layers[li];
        double D = lc->head_dim > 0 ? lc->head_dim : c->head_dim, kvh = lc->n_kv_heads > 0 ? lc->n_kv_heads : c->n_kv_heads;
        other += 2 * H * c->n_heads * D + 2 * H * kvh * D; /* q, o; k, v */
        if (lc->moe) ex += 3 * H * c->moe_ffn_dim * c->n_experts_used, other += H * c->n_experts; /* experts; router */
        if (!lc->moe || c->arch == SP_ARCH_GEMMA4) /* the dense MLP (Gemma-4 runs one beside its experts) */
            other += 3 * H * (lc->ffn_dim > 0 ? lc->ffn_dim : c->ffn_dim);
    }
    return ex + other > 0 ? ex / (ex + other) : 0;
}

/* The policy's cost model for this drafter and target: SPECULA_POLICY_EXPERTS=0 in the
 * environment leaves out the expected distinct experts of a mixture-of-experts target (a
 * benchmark switch: the policy then models its verify as a dense one's) */
static void policy_costs(loop_t *L) {
    const sp_config *c = sp_model_config(L->m);
    const char *ex = getenv("SPECULA_POLICY_EXPERTS");
    sp_policy_set_drafter(&L->pol, L->d ? L->d->step_cost : 0);
    if (c->n_experts > 0 && !(ex && strcmp(ex, "0") == 0))
        sp_policy_set_moe(&L->pol, c->n_experts, c->n_experts_used, expert_share(c));
    else
        sp_policy_set_moe(&L->pol, 0, 0, 0);
}

/* One round: plan its length (room, policy), propose, verify, emit, commit, tell the policy.
 * *stop: the request ended. */
static int spec_round(loop_t *L, int32_t *pending, int *stop, sp_err *err) {
    const sp_spec_params *p = L->p;
    sp_spec_stats *st = L->st;
    double t_round = sp_time_ms(), forward_ms;
    int pos = sp_kv_len(L->kv); /* absolute position of `pending` */
    int g = sp_round_plan(L->R, pos, L->max_ctx, p->gen.max_new - L->n_out);
    if (g < 0) {
        st->stop = SP_STOP_CTX;
        return *stop = 1, 0;
    }
    int why = SP_NODRAFT_DRAFTER, k = L->d ? sp_policy_choose(&L->pol, g, &why) : 0;
    sp_round_begin(L->R, *pending, L->max_ctx - pos - 1);
    const sp_round_result *r = sp_round_get_result(L->R);
    if (sp_round_propose(L->R, k, err)) return -1;
    st->draft_ms += r->hold_ms;
    if (verify(L, why, &forward_ms, err) || sp_round_emit(L->R, emit_token, L, err) < 0) return -1;
    st->from_forced += r->from_forced;
    st->from_drafter += r->from_drafter;
    st->from_target += r->from_target;
    if (r->stopped) return *stop = 1, 0;
    *pending = r->next;
    if (sp_round_commit(L->R, err)) return -1;
    st->draft_ms += r->draft_ms;
    double round_ms = sp_time_ms() - t_round;
    if (k == 0 && r->forced) /* the grammar drafted where no drafts were asked for: not the policy's */
        return 0;
    if (r->tree || sp_sample_is_greedy(&p->gen.sample) || r->nd == 0)
        sp_policy_observe(&L->pol, k, r->depth, r->acc, r->draft_ms, forward_ms, round_ms);
    else
        sp_policy_observe_sampled(&L->pol, k, r->nd, r->acc, r->alpha, r->n_alpha, r->draft_ms, forward_ms, round_ms);
    return 0;
}

/* The cache and the round for G drafts per round (TN tree nodes) and a cache of max_ctx. */
static int loop_init(loop_t *L, int G, int TN, sp_err *err) {
    sp_drafter *d = L->d;
    const sp_spec_params *p = L->p;
    sp_round_params rp = {.sample = p->gen.sample, .penalty = p->gen.penalty, .draft_max = G, .draft_min = p->draft_min,
                          .n_taps = d ? d->n_taps : 0, .tap_layers = d ? d->tap_layers : NULL,
                          .wants_hidden = d && d->wants_hidden, .own_logits = 1,
                          .hold_plain = p->policy == SP_SPEC_POLICY_ADAPTIVE,
                          .want_alpha = p->policy == SP_SPEC_POLICY_ADAPTIVE, .broken_residual = p->broken_residual,
                          .on_verify = p->on_verify, .on_verify_ctx = p->on_verify_ctx, .grammar = p->grammar,
                          .gvocab = p->gvocab, .synth = d ? p->synth : NULL};
    if (TN) {
        rp.tree = p->tree;
        if (rp.tree.nodes < 1 || rp.tree.nodes > SP_TREE_MAX_NODES || rp.tree.k < 1)
            return sp_err_set(err, "tree: %d nodes (allowed 1..%d), %d children per node (>= 1)", rp.tree.nodes,
                              SP_TREE_MAX_NODES, rp.tree.k);
    }
    if (!(L->kv = sp_kv_create(L->m, L->max_ctx, L->chunk, err))) return -1;
    if (!(L->R = sp_round_create(L->m, L->kv, &rp, err))) return -1;
    return sp_round_set_drafter(L->R, d, err);
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

/* The checks of sp_spec_generate's arguments, then the cache size and the prefill chunk. */
static int check_args(sp_model *m, int n_prompt, const sp_spec_params *p, int out_cap, int G, int TN, int *max_ctx,
                      int *chunk, sp_err *err) {
    const sp_config *cfg = sp_model_config(m);
    if (n_prompt < 1) return sp_err_set(err, "spec: empty prompt");
    if (p->draft_max < 1 || p->draft_max > SP_SPEC_MAX_G)
        return sp_err_set(err, "spec: draft_max %d out of range 1..%d", p->draft_max, SP_SPEC_MAX_G);
    if (p->gen.max_new < 1 || out_cap < p->gen.max_new)
        return sp_err_set(err, "spec: max_new %d must be >= 1 and fit the output (%d)", p->gen.max_new, out_cap);
    if (sp_sample_params_check(&p->gen.sample, err)) return -1;
    if (sp_penalty_params_check(&p->gen.penalty, err)) return -1;
    *max_ctx = p->gen.max_ctx > 0 ? p->gen.max_ctx : n_prompt + p->gen.max_new + (TN > G ? TN : G) + 1;
    if (cfg->max_pos > 0 && *max_ctx > cfg->max_pos) *max_ctx = cfg->max_pos;
    if (n_prompt >= *max_ctx) return sp_err_set(err, "spec: prompt of %d tokens fills the context (%d)", n_prompt, *max_ctx);
    *chunk = p->gen.prefill_chunk > 0 ? p->gen.prefill_chunk : 512;
    if (*chunk < G + 1) *chunk = G + 1;
    if (*chunk < TN + 1) *chunk = TN + 1;
    return 0;
}

int sp_spec_generate(sp_model *m, sp_drafter *d, const int32_t *prompt, int n_prompt, const sp_spec_params *p,
                     int32_t *out, int out_cap, sp_spec_stats *st, sp_err *err) {
    sp_spec_stats s_local;
    if (!st) st = &s_local;
    memset(st, 0, sizeof *st);
    /* drafts per round: a drafter's; plain decoding under a grammar verifies the tokens it forces */
    int G = d || p->grammar ? p->draft_max : 0;
    /* tree nodes per round (0: chains; under a grammar, greedy requests only) */
    int TN = d && p->tree.nodes > 0 && (!p->grammar || sp_sample_is_greedy(&p->gen.sample)) ? p->tree.nodes : 0;
    loop_t L = {.m = m, .d = d, .p = p, .H = sp_model_config(m)->hidden_size, .out = out, .st = st};
    if (check_args(m, n_prompt, p, out_cap, G, TN, &L.max_ctx, &L.chunk, err)) return -1;
    int rc = -1;
    if (loop_init(&L, G, TN, err) || sp_round_push(L.R, prompt, n_prompt, err)) goto done;
    st->n_pos = G;
    st->prompt_tokens = n_prompt;

    /* prefill_ms is timed as plain decoding's is, up to the first token: the prompt but its last
     * token, then the first round (which forwards that token through the LM head and emits the
     * first tokens; decode_ms counts that round too, from t1) */
    double t0 = sp_time_ms(), t_first = 0;
    if (prefill(&L, prompt, n_prompt - 1, err)) goto done;
    double t1 = sp_time_ms();

    int32_t pending = prompt[n_prompt - 1];
    int stop = 0;
    sp_policy_begin(&L.pol, d ? p->policy : SP_SPEC_POLICY_ALWAYS, G, p->policy_carry);
    policy_costs(&L);
    if (p->profile) sp_prof_start();
    while (L.n_out < p->gen.max_new && !stop) {
        if (spec_round(&L, &pending, &stop, err)) goto done;
        if (t_first == 0) t_first = sp_time_ms();
    }
    st->decode_ms = sp_time_ms() - t1;
    st->prefill_ms = (t_first > 0 ? t_first : t1) - t0;
    if (p->profile) sp_prof_stop(&st->prof);
    if (p->policy_carry && d) *p->policy_carry = L.pol;
    finish_stats(st, L.n_out, G);
    rc = 0;
done:
    if (p->profile) sp_prof_stop(NULL); /* on an error path: the thread stops profiling */
    sp_round_free(L.R);
    sp_kv_free(L.kv);
    return rc;
}
