/* sched.c — the scheduler thread: admits queued jobs into free slots, runs one batched target
 * forward per step over the rows of every active slot, turns each slot's kept tokens into text
 * (streaming decoder, then the stop-string filter) and publishes them to the job under srv.mu.
 * Decode blocks go first in the batch (their logits rows are contiguous, so the LM head runs once
 * over them), prompt chunks of slots still prefilling fill the remaining rows. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "server/server_internal.h"
#include "server/vlen.h"

void sp_srv_job_release(srv *s, srv_job *j) {
    (void)s;
    if (--j->refs > 0) return;
    sp_srv_request_free(&j->req);
    free(j->prompt), free(j->echo), free(j->toks), free(j->lp), free(j->tok_at);
    sp_srv_buf_free(&j->text);
    sp_tok_stream_free(j->ts);
    sp_stopstr_free(j->stop);
    free(j);
}

int sp_srv_job_submit(srv *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    int free_slots = s->o.parallel - s->n_active;
    if (s->stopping || !s->ready || s->n_queued >= s->o.max_queue + (free_slots > 0 ? free_slots : 0)) {
        s->m_rejected++;
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    j->refs++;
    j->queued = 1;
    j->id = ++s->next_id;
    j->t_submit = sp_time_ms();
    if (s->q_tail) s->q_tail->next = j;
    else s->q_head = j;
    s->q_tail = j;
    s->n_queued++;
    s->m_requests++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* mu held: the job is over; tell its connection, count it, log it */
static void job_done(srv *s, srv_job *j, const char *finish) {
    j->done = 1;
    j->running = 0;
    j->finish = finish;
    const slot_stats *st = &j->stats;
    double ms = sp_time_ms() - j->t_submit;
    double tau = st->target_calls ? (double)st->emitted / st->target_calls : 0;
    if (!strcmp(finish, "error") || !strcmp(finish, "shutdown")) s->m_errors++;
    else s->m_ok++;
    if (st->target_calls) sp_srv_hist_add(&s->h_tau, tau);
    sp_log(SP_LOG_INFO, "request %ld: prompt %d tokens, emitted %d, tau %.2f, %.1f ms, %s%s", j->id, j->n_prompt,
           st->emitted, tau, ms, finish, st->synthetic ? ", SYNTHETIC acceptance (benchmark only, not lossless)" : "");
    pthread_cond_broadcast(&s->progress);
}

/* scheduler thread, mu held: start a queued job in slot i (sp_slot_begin runs with mu released; a
 * speculative request's drafter is built only when its slot first verifies drafts) */
static void admit(srv *s, int i, srv_job *j) {
    j->queued = 0;
    j->running = 1;
    s->n_queued--;
    s->n_active++;
    s->slot_job[i] = j;
    pthread_mutex_unlock(&s->mu);
    sp_err err = {{0}};
    slot_params p = {.prompt = j->prompt, .n_prompt = j->n_prompt, .sample = j->req.sample,
                     .penalty = j->req.penalty, .max_new = j->max_new, .ignore_eos = j->req.ignore_eos,
                     .draft_max = s->o.draft_max, .draft_min = s->o.draft_min, .tree = s->o.tree,
                     .top_logprobs = j->req.top_logprobs, .cache_prompt = j->req.cache_prompt, .grammar = j->req.grammar,
                     .synth = s->o.synth, .seeded = j->req.seed_given};
    int rc = 0;
    if (p.grammar && !s->gv) { /* the vocabulary's token bytes, once */
        const sp_config *c = sp_model_config(s->m);
        if (!s->tok) rc = sp_err_set(&err, "a grammar needs the model's tokenizer");
        else rc = !(s->gv = sp_gvocab_create(s->tok, c->vocab_size, c->eos_ids, c->n_eos, &err));
    }
    p.gvocab = s->gv;
    if (!rc) rc = sp_slot_begin(s->slots[i], &p, s->o.make_drafter && j->req.speculative ? &s->dsrc : NULL, &err);
    j->ts = sp_tok_stream_new_ex(s->tok, TOK_DECODE_SKIP_SPECIAL);
    if (!rc && j->req.n_stop)
        rc = !(j->stop = sp_stopstr_create((const char *const *)j->req.stop, j->req.n_stop, &err));
    pthread_mutex_lock(&s->mu);
    s->m_prompt_tokens += (unsigned long)j->n_prompt;
    if (!rc) s->m_cached_tokens += (unsigned long)sp_slot_get_stats(s->slots[i])->cached_tokens;
    if (rc || !j->ts) {
        snprintf(j->error, sizeof j->error, "%s", rc ? err.msg : "out of memory");
        sp_slot_reset(s->slots[i]);
        s->slot_job[i] = NULL;
        s->n_active--;
        job_done(s, j, "error");
        sp_srv_job_release(s, j);
    }
}

/* mu held: free slot i (its job is finished or abandoned) */
static void vacate(srv *s, int i) {
    srv_job *j = s->slot_job[i];
    sp_slot_reset(s->slots[i]);
    s->slot_job[i] = NULL;
    s->n_active--;
    if (j) sp_srv_job_release(s, j);
}

/* mu held: decoded text through the request's stop strings into the job's released text; 1 when a
 * stop string appeared, -1 when out of memory */
static int job_text(srv_job *j, const char *text, size_t n) {
    if (j->stopped) return 1;
    j->raw_n += n;
    if (!j->stop) return sp_srv_buf_add(&j->text, text, n);
    const char *out;
    size_t k;
    sp_err err = {{0}};
    int r = sp_stopstr_feed(j->stop, text, n, &out, &k, &err);
    if (r < 0 || sp_srv_buf_add(&j->text, out, k)) return -1;
    j->stopped = r == 1;
    return r;
}

/* mu held: append a step's kept tokens to the job; 1 when a stop string ended it */
static int publish(srv *s, srv_job *j, srv_slot *sl, const slot_token *t, int n, double dt_ms) {
    int stopped = 0, kept = n;
    if (j->n_toks + n > j->cap_toks) {
        int cap = j->cap_toks ? j->cap_toks * 2 : 64;
        while (cap < j->n_toks + n) cap *= 2;
        int32_t *nt = realloc(j->toks, sizeof *nt * (size_t)cap);
        if (nt) j->toks = nt;
        slot_token *nl = j->req.top_logprobs >= 0 ? realloc(j->lp, sizeof *nl * (size_t)cap) : j->lp;
        if (nl) j->lp = nl;
        size_t *na = j->req.top_logprobs >= 0 ? realloc(j->tok_at, sizeof *na * (size_t)cap) : j->tok_at;
        if (na) j->tok_at = na;
        if (!nt || (j->req.top_logprobs >= 0 && (!nl || !na))) return -1;
        j->cap_toks = cap;
    }
    for (int i = 0; i < n && !stopped; i++) {
        j->toks[j->n_toks] = t[i].token;
        if (j->lp) j->lp[j->n_toks] = t[i], j->tok_at[j->n_toks] = j->raw_n;
        j->n_toks++;
        char buf[1024];
        /* the EOS that ends the request is not text (it may be an ordinary token such as " is") */
        int eos = !j->req.ignore_eos && sp_is_eos(sp_model_config(s->m), t[i].token);
        int len = eos ? 0 : sp_tok_stream_push(j->ts, t[i].token, buf, sizeof buf); /* the rest stays queued */
        if (len > 0 && job_text(j, buf, (size_t)len) == 1) {
            stopped = 1;
            kept = i + 1;
        }
        sp_srv_hist_add(&s->h_itl, dt_ms / n / 1000.0);
    }
    if (stopped) sp_slot_stop(sl, kept);
    s->m_gen_tokens += (unsigned long)kept;
    return stopped;
}

/* mu held: the slot's generation is over: flush the decoder and the held text */
static void finish_text(srv_job *j) {
    char buf[1024];
    int len;
    while (!j->stopped && (len = sp_tok_stream_flush(j->ts, buf, sizeof buf)) > 0) job_text(j, buf, (size_t)len);
    if (j->stop && !j->stopped) {
        const char *rest;
        size_t k;
        sp_stopstr_flush(j->stop, &rest, &k);
        sp_srv_buf_add(&j->text, rest, k);
    }
}

static const char *finish_name(sp_stop_reason r) {
    return r == SP_STOP_MAX_NEW || r == SP_STOP_CTX ? "length" : "stop";
}

/* The drafts of this step: g[i] for each decoding slot i (dec[i]), proposed through each slot's
 * drafter: chain drafters that share a batch_key propose together (one batched block forward),
 * the others (and every token tree) one by one through the slot's round. nd[i]: drafts (tree
 * nodes) proposed; failed[i] set on error. Returns the drafts asked. */
static int propose_all(srv *s, const int *dec, const int *g, int *nd, int *failed, sp_err *err) {
    int P = s->o.parallel, rows = 0;
    int done[P];
    memset(done, 0, sizeof done);
    for (int i = 0; i < P; i++) { /* only drafters asked for drafts run (sp_slot_wake_drafter told them) */
        nd[i] = 0;
        done[i] = !dec[i] || g[i] <= 0 || !sp_slot_drafter(s->slots[i]);
    }
    for (int i = 0; i < P; i++) {
        if (done[i]) continue;
        sp_drafter *d = sp_slot_drafter(s->slots[i]);
        rows += g[i];
        if (!d->propose_batch || !d->batch_key || sp_slot_is_tree(s->slots[i]) || sp_slot_has_grammar(s->slots[i])) {
            /* one by one (trees, and grammars: their forced drafts skip the drafter) */
            done[i] = 1;
            nd[i] = sp_slot_propose(s->slots[i], g[i], err);
            if (nd[i] < 0) failed[i] = 1, nd[i] = 0;
            continue;
        }
        /* every later slot whose drafter shares this one's checkpoint joins the batch */
        sp_drafter *ds[P];
        int who[P], mg[P], n = 0, got[P];
        int32_t *dr[P];
        float *q[P];
        for (int k = i; k < P; k++) {
            if (done[k] || sp_slot_is_tree(s->slots[k]) || sp_slot_has_grammar(s->slots[k]) ||
                sp_slot_drafter(s->slots[k])->batch_key != d->batch_key)
                continue;
            if (k > i) rows += g[k];
            done[k] = 1;
            ds[n] = sp_slot_drafter(s->slots[k]), who[n] = k, mg[n] = g[k];
            dr[n] = sp_slot_draft_buf(s->slots[k]), q[n] = sp_slot_q_buf(s->slots[k]);
            n++;
        }
        int rc = d->propose_batch(ds, n, mg, dr, q, got, err);
        for (int k = 0; k < n; k++) {
            if (rc) failed[who[k]] = 1;
            else nd[who[k]] = got[k];
        }
    }
    return rows;
}

/* The drafts each decoding slot verifies this step (g[i] <= room[i]): token trees and sampled requests
 * that gave a seed their full room; other chains (greedy, or sampled without a seed) by the
 * verify-length policy (vlen.h), or, with --spec-max-slots N > 0, their full room while at most N
 * slots are busy, or always with N = 0. */
static void choose_lengths(srv *s, const int *dec, const int *room, int base_rows, int *g) {
    int P = s->o.parallel, n = 0, idx[P], rm[P], fx[P], gg[P], wk[P], lf[P];
    const long *off[P], *rch[P];
    int cap = s->o.spec_max_slots;
    for (int i = 0; i < P; i++) {
        g[i] = 0;
        if (!dec[i]) continue;
        srv_slot *sl = s->slots[i];
        int chosen = sp_slot_length_free(sl);
        int fixed = !chosen || cap >= 0 || !s->vlen.fwd;
        if (fixed && (!chosen || cap <= 0 || s->n_active <= cap)) g[i] = room[i];
        idx[n] = i, rm[n] = room[i], fx[n] = fixed, gg[n] = g[i];
        wk[n] = sp_slot_wake_rows(sl), lf[n] = sp_slot_tokens_left(sl);
        sp_slot_accept_counts(sl, &off[n], &rch[n]);
        n++;
    }
    if (cap >= 0 || !s->vlen.fwd) return;
    sp_srv_vlen_choose(&s->vlen, n, rm, fx, off, rch, wk, lf, base_rows, gg);
    for (int k = 0; k < n; k++) g[idx[k]] = gg[k];
}

/* Plan the step: which slots decode (dec), the drafts each could verify (room); failed[i] on error.
 * Returns the rows the prompt chunks of prefilling slots would take beside the decode rows. */
static int plan_slots(srv *s, int *dec, int *room, int *failed, sp_err *err) {
    int planned = 0, base_rows = 0;
    for (int i = 0; i < s->o.parallel; i++) {
        dec[i] = room[i] = 0;
        if (!s->slot_job[i]) continue;
        int r = sp_slot_plan(s->slots[i], s->max_rows - planned, &room[i], err);
        if (r < 0) failed[i] = 1;
        dec[i] = r == 1;
        if (dec[i]) planned += sp_slot_plan_rows(s->slots[i]);
        else if (sp_slot_get_phase(s->slots[i]) == SLOT_PREFILL) base_rows += sp_slot_rows_wanted(s->slots[i]);
    }
    return base_rows > s->max_rows - planned ? s->max_rows - planned : base_rows;
}

/* A slot given drafts tells its drafter the rounds it held: a slot that verifies drafts for the
 * first time builds and begins its drafter on the context so far (a one-off cost, kept out of the
 * timed proposal the drafting cost is learned from); slots given none leave their drafter alone. */
static void wake_drafters(srv *s, int *dec, const int *g, int *failed, sp_err *err) {
    for (int i = 0; i < s->o.parallel; i++) {
        if (!dec[i] || g[i] <= 0) continue;
        int wrows = sp_slot_wake_rows(s->slots[i]), dormant = sp_slot_drafter_dormant(s->slots[i]);
        double tw = sp_time_ms();
        if (sp_slot_wake_drafter(s->slots[i], err)) {
            failed[i] = 1, dec[i] = 0;
            continue;
        }
        if (!dormant) continue;
        double ms = sp_time_ms() - tw;
        if (s->vlen.fwd) sp_srv_vlen_observe_wake(&s->vlen, wrows, ms);
        sp_log(SP_LOG_DEBUG, "request %ld: drafter built and begun on %d rows in %.2f ms", s->slot_job[i]->id, wrows, ms);
    }
}

/* The step's plan per slot (arrays of s->o.parallel). */
typedef struct {
    const int *dec, *room, *g, *nd;
    int *failed;
} step_plan;

/* The sequences of the batched forward: decode blocks first, then prompt chunks; who[k]: the slot of
 * seqs[k]; *rows: their rows; nodraft counts the speculative rounds without drafts by reason.
 * Returns the sequence count. */
static int prepare_all(srv *s, const step_plan *sp, sp_forward_seq *seqs, int *who, int *rows,
                       unsigned long *nodraft, sp_err *err) {
    int n = 0, lrows = 0, V = sp_model_config(s->m)->vocab_size;
    for (int pass = 0; pass < 2; pass++) /* decode blocks, then prompt chunks */
        for (int i = 0; i < s->o.parallel; i++) {
            srv_slot *sl = s->slots[i];
            if (!s->slot_job[i] || sp->failed[i] || (sp_slot_get_phase(sl) == SLOT_PREFILL) != pass) continue;
            if (pass == 0 && !sp->dec[i]) continue;
            if (pass == 1 && sp_slot_rows_wanted(sl) > s->max_rows - *rows) continue;
            int r = sp_slot_prepare(sl, s->max_rows - *rows, s->logits + (size_t)lrows * V, sp->nd[i], &seqs[n], err);
            if (r < 0) sp->failed[i] = 1;
            if (r <= 0) continue;
            if (seqs[n].out && seqs[n].out->logits) lrows += r;
            who[n++] = i;
            *rows += r;
            if (pass == 0 && sp_slot_is_speculative(sl) && r == 1) { /* a speculative round without drafts: why */
                slot_nodraft why = sp->room[i] == 0 ? SLOT_NODRAFT_NO_ROOM
                                   : sp->g[i] == 0  ? SLOT_NODRAFT_NOT_PAYING
                                                    : SLOT_NODRAFT_DRAFTER_NONE;
                sp_slot_count_nodraft(sl, why);
                nodraft[why]++;
            }
        }
    return n;
}

/* the debug line over the last 50 steps; the counters start again */
static void log_steps(srv *s) {
    sp_log(SP_LOG_DEBUG,
           "scheduler: last 50 steps: %.1f rows, %.2f drafts per decoding slot, plan+propose %.2f ms, forward "
           "%.2f ms, verify+commit %.2f ms per step; policy: load %.2f (8 rows %.2f, 32 rows %.2f ms), drafting "
           "%.3f ms per slot + %.3f ms per row",
           s->n_rows / 50.0, s->n_dec ? (double)s->n_drafts / s->n_dec : 0.0, s->t_draft / 50, s->t_forward / 50,
           s->t_verify / 50, s->vlen.load, s->vlen.fwd ? sp_srv_vlen_forward_ms(&s->vlen, 8) : 0.0,
           s->vlen.fwd ? sp_srv_vlen_forward_ms(&s->vlen, 32) : 0.0, s->vlen.load * s->vlen.c_slot,
           s->vlen.load * s->vlen.c_row);
    s->t_draft = s->t_forward = s->t_verify = 0, s->n_rows = s->n_dec = s->n_drafts = 0;
}

/* mu held, after a step: failed slots end with an error, finished ones with their reason; the
 * cache-use metric from the others */
static void retire_all(srv *s, const int *failed, const sp_err *err) {
    long used = 0;
    for (int i = 0; i < s->o.parallel; i++) {
        srv_job *j = s->slot_job[i];
        if (!j) continue;
        slot_phase ph = sp_slot_get_phase(s->slots[i]);
        if (failed[i]) {
            snprintf(j->error, sizeof j->error, "%s", err->msg);
            j->stats = *sp_slot_get_stats(s->slots[i]);
            sp_slot_forget(s->slots[i]); /* a failed step may leave the cache unlike its tokens */
            job_done(s, j, "error");
            vacate(s, i);
        } else if (ph == SLOT_DONE) {
            const slot_stats *st = sp_slot_get_stats(s->slots[i]);
            j->stats = *st;
            s->m_drafted += (unsigned long)st->drafted;
            s->m_drafters_built += (unsigned long)st->drafter_built;
            s->m_idle_drafter_rounds += (unsigned long)st->idle_drafter_rounds;
            s->m_accepted += (unsigned long)st->accepted;
            finish_text(j);
            job_done(s, j, finish_name(sp_slot_stop_reason(s->slots[i])));
            vacate(s, i);
        } else {
            used += sp_slot_kv_used(s->slots[i]);
        }
    }
    s->m_kv_used = used;
}

/* one step over every active slot; mu held on entry and exit, released for the forward */
static void step(srv *s) {
    int P = s->o.parallel;
    sp_forward_seq seqs[P];
    int who[P], n = 0, rows = 0;
    /* abandoned jobs leave first */
    for (int i = 0; i < P; i++)
        if (s->slot_job[i] && s->slot_job[i]->cancelled) {
            srv_job *j = s->slot_job[i];
            j->stats = *sp_slot_get_stats(s->slots[i]);
            job_done(s, j, "cancelled");
            vacate(s, i);
        }
    pthread_mutex_unlock(&s->mu);
    double t0 = sp_time_ms();
    sp_err err = {{0}};
    int failed[P], dec[P], room[P], g[P], nd[P];
    unsigned long nodraft[SLOT_NODRAFT_N] = {0};
    memset(failed, 0, sizeof failed);
    choose_lengths(s, dec, room, plan_slots(s, dec, room, failed, &err), g);
    wake_drafters(s, dec, g, failed, &err);
    double tp = sp_time_ms();
    int draft_rows = propose_all(s, dec, g, nd, failed, &err);
    double t_prop = sp_time_ms() - tp;
    for (int i = 0; i < P; i++) s->n_dec += dec[i], s->n_drafts += dec[i] ? nd[i] : 0;
    step_plan sp = {dec, room, g, nd, failed};
    n = prepare_all(s, &sp, seqs, who, &rows, nodraft, &err);
    double t1 = sp_time_ms();
    int fwd_failed = 0;
    if (n > 0 && sp_model_forward_batch(s->m, s->scratch, seqs, n, &err)) fwd_failed = 1;
    double t2 = sp_time_ms();
    if (n > 0 && !fwd_failed && s->vlen.fwd) {
        sp_srv_vlen_observe_forward(&s->vlen, rows, t2 - t1);
        int draft_slots = 0;
        for (int i = 0; i < P; i++) draft_slots += dec[i] && g[i] > 0;
        if (draft_rows > 0) sp_srv_vlen_observe_draft(&s->vlen, draft_slots, draft_rows, t_prop);
    }
    const slot_token *toks[P];
    int n_toks[P];
    for (int k = 0; k < n; k++) {
        int i = who[k];
        int was_decode = sp_slot_get_phase(s->slots[i]) == SLOT_DECODE;
        n_toks[i] = fwd_failed ? -1 : sp_slot_finish(s->slots[i], &toks[i], &err);
        if (n_toks[i] < 0) failed[i] = 1;
        int r_nd, r_acc;
        sp_slot_last_round(s->slots[i], &r_nd, &r_acc);
        if (n_toks[i] > 0 && was_decode && r_nd > 0 && s->vlen.fwd) sp_srv_vlen_observe_round(&s->vlen, r_nd, r_acc);
    }
    double now = sp_time_ms();
    s->t_draft += t1 - t0, s->t_forward += t2 - t1, s->t_verify += now - t2, s->n_rows += rows, s->n_steps++;
    if (s->n_steps % 50 == 0) log_steps(s);
    pthread_mutex_lock(&s->mu);
    for (int w = 0; w < SLOT_NODRAFT_N; w++) s->m_nodraft[w] += nodraft[w];
    for (int k = 0; k < n; k++) {
        int i = who[k];
        srv_job *j = s->slot_job[i];
        if (failed[i] || n_toks[i] <= 0) continue;
        const slot_stats *st = sp_slot_get_stats(s->slots[i]);
        double prev = j->stats.t_last > 0 ? j->stats.t_last : st->t_first;
        if (j->n_toks == 0) sp_srv_hist_add(&s->h_ttft, (now - j->t_submit) / 1000.0);
        if (publish(s, j, s->slots[i], toks[i], n_toks[i], now - prev) < 0) failed[i] = 1;
        j->stats = *st;
        j->stats.t_last = now;
    }
    retire_all(s, failed, &err);
    if (n > 0) pthread_cond_broadcast(&s->progress);
}

/* mu held: the free slot for job j: the one whose cache holds the longest prefix of its prompt, then
 * the one holding the fewest positions (the least to lose); -1 when none is free */
static int pick_slot(srv *s, const srv_job *j) {
    const slot_drafter_src *src = s->o.make_drafter && j->req.speculative ? &s->dsrc : NULL;
    int best = -1, best_k = -1, best_n = 0;
    for (int i = 0; i < s->o.parallel; i++) {
        if (s->slot_job[i]) continue;
        int k = j->req.cache_prompt ? sp_slot_cached_prefix(s->slots[i], j->prompt, j->n_prompt, src) : 0;
        int n = sp_slot_cached_len(s->slots[i]);
        if (k > best_k || (k == best_k && n < best_n)) best = i, best_k = k, best_n = n;
    }
    return best;
}

static void *sched_main(void *arg) {
    srv *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->stopping) break;
        for (int f = 0; f < s->o.parallel && s->q_head; f++) {
            int i = pick_slot(s, s->q_head);
            if (i < 0) break;
            srv_job *j = s->q_head;
            s->q_head = j->next;
            if (!s->q_head) s->q_tail = NULL;
            j->next = NULL;
            if (j->cancelled) {
                s->n_queued--;
                job_done(s, j, "cancelled");
                sp_srv_job_release(s, j);
                continue;
            }
            admit(s, i, j);
        }
        if (s->n_active == 0) {
            /* idle: hand the freed request buffers of every thread's malloc arena back to the OS */
            malloc_trim(0);
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        step(s);
    }
    /* stopping: end what is queued or running without its answer (503, or an error event) */
    for (int i = 0; i < s->o.parallel; i++)
        if (s->slot_job[i]) {
            srv_job *j = s->slot_job[i];
            j->stats = *sp_slot_get_stats(s->slots[i]);
            finish_text(j);
            job_done(s, j, "shutdown");
            vacate(s, i);
        }
    while (s->q_head) {
        srv_job *j = s->q_head;
        s->q_head = j->next;
        s->n_queued--;
        job_done(s, j, "shutdown");
        sp_srv_job_release(s, j);
    }
    s->q_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The target rows every request's drafter wants (taps, hidden), read from one drafter built now:
 * a dormant slot keeps them for the drafter it builds later. */
static int drafter_src_init(srv *s, sp_err *err) {
    sp_sample_params greedy = sp_sample_params_default();
    sp_drafter *d = s->o.make_drafter(s->o.drafter_ctx, &greedy, sp_slot_kv_capacity(s->slots[0]), err);
    if (!d) return -1;
    if (s->o.tree.nodes > 0 && !d->propose_tree) {
        sp_err_set(err, "tree: drafter %s proposes no trees", d->name);
        sp_drafter_free(d);
        return -1;
    }
    int nt = d->n_taps > 0 ? d->n_taps : 0;
    s->dtaps = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    if (s->dtaps && nt) memcpy(s->dtaps, d->tap_layers, sizeof(int) * (size_t)nt);
    s->dsrc = (slot_drafter_src){s->o.make_drafter, s->o.drafter_ctx, nt, s->dtaps, d->wants_hidden};
    sp_drafter_free(d);
    return s->dtaps ? 0 : sp_err_set(err, "server: out of memory for the drafter's tap list");
}

int sp_srv_sched_start(srv *s, sp_err *err) {
    const sp_config *c = sp_model_config(s->m);
    int G = s->o.make_drafter ? s->o.draft_max : 0, TN = s->o.make_drafter ? s->o.tree.nodes : 0;
    int P = s->o.parallel, G1 = (TN > G ? TN : G) + 1; /* a slot's most rows in one step */
    s->slots = calloc((size_t)P, sizeof *s->slots);
    s->slot_job = calloc((size_t)P, sizeof *s->slot_job);
    if (!s->slots || !s->slot_job) return sp_err_set(err, "server: out of memory for %d slots", P);
    for (int i = 0; i < P; i++) {
        s->slots[i] = sp_slot_create(s->m, s->o.ctx, s->o.prefill_chunk, err);
        if (!s->slots[i]) return -1;
    }
    s->m_kv_cap = (long)P * sp_slot_kv_capacity(s->slots[0]);
    if (s->o.make_drafter && drafter_src_init(s, err)) return -1;
    s->max_rows = P * G1 + (s->o.prefill_chunk > SP_SPEC_MAX_G + 1 ? s->o.prefill_chunk : SP_SPEC_MAX_G + 1);
    s->scratch = sp_kv_create(s->m, s->max_rows, s->max_rows, err);
    /* logits rows: a slot's most rows, or without a drafter 1 + the forced drafts of a grammar */
    int GF = s->o.draft_max < SP_SPEC_MAX_G ? s->o.draft_max : SP_SPEC_MAX_G, GL = G1 > GF + 1 ? G1 : GF + 1;
    s->logits = malloc(sizeof(float) * (size_t)P * GL * c->vocab_size);
    if (!s->scratch) return -1;
    if (!s->logits) return sp_err_set(err, "server: out of memory for the logits of %d rows", P * GL);
    if (s->o.make_drafter && s->o.spec_max_slots < 0 && sp_srv_vlen_init(&s->vlen, s->m, s->scratch, s->logits, P * G1, s->max_rows, err))
        return -1;
    if (pthread_create(&s->sched, NULL, sched_main, s)) return sp_err_set(err, "server: cannot start the scheduler thread");
    s->sched_started = 1;
    return 0;
}

void sp_srv_sched_stop(srv *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->sched_started) pthread_join(s->sched, NULL);
    s->sched_started = 0;
    for (int i = 0; s->slots && i < s->o.parallel; i++) sp_slot_free(s->slots[i]);
    free(s->slots), free(s->slot_job);
    s->slots = NULL, s->slot_job = NULL;
    sp_kv_free(s->scratch);
    sp_gvocab_free(s->gv);
    s->gv = NULL;
    s->scratch = NULL;
    free(s->logits);
    s->logits = NULL;
    sp_srv_vlen_free(&s->vlen);
    free(s->dtaps);
    s->dtaps = NULL;
}
