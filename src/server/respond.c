/* respond.c — response bodies (see respond.h). */
#include "server/respond.h"

#include "server/tools.h"

#include <stdlib.h>
#include <string.h>

char *sp_srv_error_json(const srv_error *e) {
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type", e->type, "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code[0] ? json_string(e->code) : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static const char *obj_id(const srv_job *j) { return j->req.route == SRV_ROUTE_CHAT ? "chatcmpl" : "cmpl"; }

static json_t *usage_json(const srv_job *j) {
    int c = j->n_toks;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens", c, "total_tokens",
                     j->n_prompt + c, "prompt_tokens_details", "cached_tokens", j->stats.cached_tokens);
}

/* llama-server style timings plus the speculative figures */
json_t *sp_srv_timings_json(const srv_job *j) {
    const slot_stats *st = &j->stats;
    double t0 = st->t_begin, t1 = st->t_prefilled > 0 ? st->t_prefilled : t0, t2 = st->t_last > 0 ? st->t_last : t1;
    double pms = t1 - t0, gms = t2 - t1;
    int pn = j->n_prompt - st->cached_tokens, gn = j->n_toks; /* prompt_n: the prompt tokens forwarded */
    json_t *o = json_object();
    json_object_set_new(o, "queue_ms", json_real(t0 > 0 ? t0 - j->t_submit : 0));
    json_object_set_new(o, "cache_n", json_integer(st->cached_tokens));
    json_object_set_new(o, "prompt_n", json_integer(pn));
    json_object_set_new(o, "prompt_ms", json_real(pms));
    json_object_set_new(o, "prompt_per_token_ms", json_real(pn ? pms / pn : 0));
    json_object_set_new(o, "prompt_per_second", json_real(pms > 0 ? pn * 1000.0 / pms : 0));
    json_object_set_new(o, "predicted_n", json_integer(gn));
    json_object_set_new(o, "predicted_ms", json_real(gms));
    json_object_set_new(o, "predicted_per_token_ms", json_real(gn ? gms / gn : 0));
    json_object_set_new(o, "predicted_per_second", json_real(gms > 0 ? gn * 1000.0 / gms : 0));
    json_object_set_new(o, "draft_n", json_integer(st->drafted));
    json_object_set_new(o, "draft_n_accepted", json_integer(st->accepted));
    json_object_set_new(o, "draft_n_grammar_forced", json_integer(st->forced));
    json_object_set_new(o, "draft_n_grammar_cut", json_integer(st->cut));
    json_object_set_new(o, "target_calls", json_integer(st->target_calls));
    json_object_set_new(o, "tokens_from", json_pack("{s:i, s:i, s:i}", "forced", st->from_forced, "drafter",
                                                    st->from_drafter, "target", st->from_target));
    json_object_set_new(o, "tau", json_real(st->target_calls ? (double)st->emitted / st->target_calls : 0));
    json_object_set_new(o, "rounds_without_drafts",
                        json_pack("{s:i, s:i, s:i}", "not_paying", st->rounds_nodraft[SLOT_NODRAFT_NOT_PAYING], "no_room",
                                  st->rounds_nodraft[SLOT_NODRAFT_NO_ROOM], "drafter_proposed_none",
                                  st->rounds_nodraft[SLOT_NODRAFT_DRAFTER_NONE]));
    json_object_set_new(o, "drafter_built", json_boolean(st->drafter_built));
    json_object_set_new(o, "synthetic", json_boolean(st->synthetic)); /* synthetic acceptance: benchmark only */
    json_object_set_new(o, "lossless", json_boolean(!st->synthetic));
    json_object_set_new(o, "idle_drafter_rounds", json_integer(st->idle_drafter_rounds));
    return o;
}

static json_t *token_str(srv *s, int32_t id) {
    char *t = NULL;
    if (sp_tok_decode(s->tok, &id, 1, &t, NULL)) return json_string("");
    json_t *v = json_string(t);
    if (!v) v = json_string("\xef\xbf\xbd");
    free(t);
    return v;
}

static json_t *bytes_of(json_t *str) {
    json_t *a = json_array();
    const char *p = json_string_value(str);
    for (size_t i = 0; p && p[i]; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* logprobs of tokens [a, b): chat: {"content": [...]}, completions: the legacy four arrays */
static json_t *logprobs_json(srv *s, const srv_job *j, int a, int b) {
    if (j->req.top_logprobs < 0 || !j->lp) return json_null();
    if (j->req.route == SRV_ROUTE_CHAT) {
        json_t *content = json_array();
        for (int i = a; i < b; i++) {
            const slot_token *t = &j->lp[i];
            json_t *tops = json_array(), *ts = token_str(s, t->token);
            for (int k = 0; k < t->n_top; k++) {
                json_t *tk = token_str(s, t->top_id[k]);
                json_array_append_new(tops, json_pack("{s:o, s:f, s:o}", "token", tk, "logprob", (double)t->top_logprob[k],
                                                      "bytes", bytes_of(tk)));
            }
            json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", ts, "logprob", (double)t->logprob,
                                                     "bytes", bytes_of(ts), "top_logprobs", tops));
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = a; i < b; i++) {
        const slot_token *t = &j->lp[i];
        json_array_append_new(toks, token_str(s, t->token));
        json_array_append_new(lps, json_real(t->logprob));
        json_array_append_new(offs, json_integer(0));
        json_t *top = json_object();
        for (int k = 0; k < t->n_top; k++) {
            json_t *tk = token_str(s, t->top_id[k]);
            json_object_set_new(top, json_string_value(tk), json_real(t->top_logprob[k]));
            json_decref(tk);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offs);
}

static json_t *envelope(srv *s, srv_job *j, time_t created, const char *object) {
    char id[64];
    snprintf(id, sizeof id, "%s-%ld", obj_id(j), j->id);
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", object, "created", (json_int_t)created, "model",
                     s->o.model_name);
}

/* the tool calls in a finished chat's text (NULL: none, or tools off); *ce = where the content ends */
static json_t *job_calls(const srv_job *j, size_t *ce) {
    *ce = j->text.n;
    if (j->req.route != SRV_ROUTE_CHAT || !j->tools_on) return NULL;
    return sp_srv_tool_calls_parse((srv_tool_fmt)j->tool_fmt, j->req.tools, j->text.p, j->text.n, j->id, ce);
}

/* Tokens [0, k) whose logprobs go with content that ends at byte end of the released text: all of
 * them when the decoded text was all released (nothing cut by a stop string or a tool call), else
 * those whose text begins before end (a token across the cut is content; the cut part's are not). */
static int content_toks(const srv_job *j, size_t end) {
    if (!j->tok_at || end >= j->raw_n) return j->n_toks;
    int k = 0;
    while (k < j->n_toks && j->tok_at[k] < end) k++;
    return k;
}

int sp_srv_stream_toks(const srv_job *j, int from, size_t to) {
    if (!j->tok_at) return j->n_toks;
    int k = from;
    while (k < j->n_toks && j->tok_at[k] < to && (k + 1 < j->n_toks ? j->tok_at[k + 1] : j->raw_n) <= to) k++;
    return k;
}

/* a finished chat's message: its text, or the text before the calls (null when none) and tool_calls */
static json_t *chat_message(const srv_job *j, const char **finish) {
    size_t ce;
    json_t *calls = job_calls(j, &ce);
    json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content", j->text.p ? j->text.p : "", ce);
    if (!calls) return m;
    if (ce == 0) json_object_set_new(m, "content", json_null());
    for (size_t k = 0; k < json_array_size(calls); k++) json_object_del(json_array_get(calls, k), "index");
    json_object_set_new(m, "tool_calls", calls);
    *finish = "tool_calls";
    return m;
}

char *sp_srv_response_final(srv *s, srv_job *j, time_t created) {
    if (j->req.route == SRV_ROUTE_NATIVE) return sp_srv_native_final(s, j);
    int chat = j->req.route == SRV_ROUTE_CHAT;
    json_t *o = envelope(s, j, created, chat ? "chat.completion" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    const char *finish = j->finish;
    if (chat) {
        json_object_set_new(choice, "message", chat_message(j, &finish));
    } else {
        srv_buf t = {0};
        if (j->echo) sp_srv_buf_add(&t, j->echo, strlen(j->echo));
        sp_srv_buf_add(&t, j->text.p ? j->text.p : "", j->text.n);
        json_object_set_new(choice, "text", json_stringn(t.p ? t.p : "", t.n));
        sp_srv_buf_free(&t);
    }
    size_t ce = j->text.n;
    if (chat) json_decref(job_calls(j, &ce));
    json_object_set_new(choice, "logprobs", logprobs_json(s, j, 0, content_toks(j, ce)));
    json_object_set_new(choice, "finish_reason", json_string(finish));
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage_json(j));
    json_object_set_new(o, "timings", sp_srv_timings_json(j));
    if (j->req.return_tokens) {
        json_t *a = json_array();
        for (int i = 0; i < j->n_toks; i++) json_array_append_new(a, json_integer(j->toks[i]));
        json_object_set_new(o, "tokens", a);
    }
    char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return txt;
}

static int add_event(json_t *o, srv_buf *out) {
    char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!txt) return -1;
    int rc = sp_srv_buf_printf(out, "data: %s\n\n", txt);
    free(txt);
    return rc;
}

int sp_srv_sse_chunk(srv *s, srv_job *j, time_t created, size_t from, size_t to, int tok_from, int tok_to,
                  const char *finish, int first, srv_buf *out) {
    if (j->req.route == SRV_ROUTE_NATIVE) return sp_srv_native_chunk(s, j, from, to, finish != NULL, out);
    int chat = j->req.route == SRV_ROUTE_CHAT;
    json_t *o = envelope(s, j, created, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    const char *txt = j->text.p ? j->text.p + from : "";
    if (chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (to > from || first) json_object_set_new(delta, "content", json_stringn(txt, to - from));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", json_stringn(txt, to - from));
    }
    json_object_set_new(choice, "logprobs", tok_to > tok_from ? logprobs_json(s, j, tok_from, tok_to) : json_null());
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (finish) json_object_set_new(o, "timings", sp_srv_timings_json(j));
    return add_event(o, out);
}

int sp_srv_sse_end(srv *s, srv_job *j, time_t created, srv_buf *out) {
    int rc = 0;
    if (j->req.route == SRV_ROUTE_NATIVE) return 0; /* llama-server's /completion stream ends at "stop": true */
    if (j->req.include_usage) {
        json_t *o = envelope(s, j, created, j->req.route == SRV_ROUTE_CHAT ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_json(j));
        rc = add_event(o, out);
    }
    return rc | sp_srv_buf_add(out, "data: [DONE]\n\n", 14);
}

/* one chunk whose delta is {"tool_calls": [call]} (call consumed) */
static int tool_call_event(srv *s, srv_job *j, time_t created, json_t *call, srv_buf *out) {
    json_t *o = envelope(s, j, created, "chat.completion.chunk");
    json_t *choice = json_pack("{s:i, s:{s:[o]}, s:n, s:n}", "index", 0, "delta", "tool_calls", call, "logprobs",
                               "finish_reason");
    if (!o || !choice) return json_decref(o), json_decref(choice), -1;
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    return add_event(o, out);
}

/* a call as two delta chunks: its index, id, type and name with empty arguments, then the arguments */
static int tool_call_events(srv *s, srv_job *j, time_t created, json_t *c, srv_buf *out) {
    json_t *f = json_object_get(c, "function");
    json_t *head = json_pack("{s:O, s:O, s:s, s:{s:O, s:s}}", "index", json_object_get(c, "index"), "id",
                             json_object_get(c, "id"), "type", "function", "function", "name", json_object_get(f, "name"),
                             "arguments", "");
    json_t *args = json_pack("{s:O, s:{s:O}}", "index", json_object_get(c, "index"), "function", "arguments",
                             json_object_get(f, "arguments"));
    if (!head || !args) return json_decref(head), json_decref(args), -1;
    int rc = tool_call_event(s, j, created, head, out);
    return rc ? json_decref(args), rc : tool_call_event(s, j, created, args, out);
}

int sp_srv_sse_finish(srv *s, srv_job *j, time_t created, size_t text_sent, int toks_sent, srv_buf *out) {
    size_t ce;
    json_t *calls = job_calls(j, &ce);
    if (!calls) ce = j->text.n;
    int rc = 0, tt = content_toks(j, ce);
    if (tt < toks_sent) tt = toks_sent;
    if (ce > text_sent || (j->lp && tt > toks_sent))
        rc = sp_srv_sse_chunk(s, j, created, text_sent, ce > text_sent ? ce : text_sent, toks_sent, tt, NULL, 0, out);
    for (size_t k = 0; !rc && k < json_array_size(calls); k++)
        rc = tool_call_events(s, j, created, json_array_get(calls, k), out);
    const char *finish = calls ? "tool_calls" : j->finish;
    json_decref(calls);
    if (!rc) rc = sp_srv_sse_chunk(s, j, created, j->text.n, j->text.n, j->n_toks, j->n_toks, finish, 0, out);
    return rc;
}
