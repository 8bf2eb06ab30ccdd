/* http.c — the HTTP side of the server on libmicrohttpd: one thread per connection (so a
 * connection may block waiting for its job), routing, authentication, body limits, and the
 * handlers of every endpoint. A generation request becomes a job for the scheduler (sched.c);
 * its connection thread waits for it (non-streaming) or streams its text as Server-Sent Events
 * from the response's content callback. A client that goes away is noticed by peeking at its
 * socket while waiting, and its job is cancelled: the slot is freed at the next step. */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "chat/chat.h"
#include "server/tools.h"
#include "core/core.h"
#include "server/respond.h"

srv_opts sp_srv_opts_default(void) {
    srv_opts o = {0};
    o.host = "127.0.0.1";
    o.port = 8080;
    o.parallel = 4;
    o.ctx = 4096;
    o.max_queue = 64;
    o.timeout_s = 60;
    o.read_timeout_s = 30;
    o.max_connections = 512;
    o.max_conn_per_ip = 128;
    o.max_body = 1 << 20;
    o.n_predict = 256;
    o.prefill_chunk = 128;
    o.model_name = "specula";
    o.spec_name = "none";
    o.draft_max = 8;
    o.spec_max_slots = -1;
    return o;
}

/* per-connection state: the request body as it arrives */
typedef struct {
    srv_buf body;
    int too_large;
} conn_state;

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type, const char *body, size_t n,
                                 const char *hname, const char *hval) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (hname) MHD_add_response_header(r, hname, hval);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, char *json) {
    if (!json) return send_text(c, 500, "text/plain", "out of memory\n", 14, NULL, NULL);
    enum MHD_Result rc = send_text(c, status, "application/json", json, strlen(json), NULL, NULL);
    free(json);
    return rc;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const srv_error *e, const char *hname, const char *hval) {
    char *j = sp_srv_error_json(e);
    if (!j) return send_text(c, 500, "text/plain", "out of memory\n", 14, NULL, NULL);
    enum MHD_Result rc = send_text(c, e->status, "application/json", j, strlen(j), hname, hval);
    free(j);
    return rc;
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *type, const char *code,
                            const char *msg) {
    srv_error e;
    sp_srv_error_set(&e, status, type, code, NULL, "%s", msg);
    return send_error(c, &e, NULL, NULL);
}

/* 1 when the client closed its end (EOF on a peek), 0 otherwise */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return 1;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* mu held: wait up to ms for progress */
static void wait_progress(srv *s, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&s->progress, &s->mu, &ts);
}

/* ---- streaming ----------------------------------------------------------------------
 * The content callback blocks until the job has new text. libmicrohttpd counts that time as
 * idle (its --timeout runs from the last write), so a stream that waits longer than
 * KEEPALIVE_MS (queued, or a long prefill) sends an SSE comment line, which clients ignore. */
#define KEEPALIVE_MS 500
typedef struct {
    srv *s;
    srv_job *j;
    int fd;
    time_t created;
    srv_buf out;         /* SSE bytes not yet handed to MHD */
    size_t out_at;
    size_t text_sent;    /* bytes of j->text already sent */
    size_t text_seen;    /* bytes of j->text looked at (a possible tool call is held back) */
    int toks_sent;       /* tokens whose logprobs were sent (with the text they make) */
    int toks_seen;       /* j->n_toks looked at */
    int started, ended, finished;
} stream_state;

/* a job that ended without its answer: an error, or the server stopping (queued or running) */
static int job_failed(const srv_job *j) {
    return j->finish && (!strcmp(j->finish, "error") || !strcmp(j->finish, "shutdown"));
}

/* the error of a failed job (job_failed): 503 when the server stopped, else 500 */
static void job_error(const srv_job *j, srv_error *e) {
    if (!strcmp(j->finish, "shutdown"))
        sp_srv_error_set(e, 503, "server_error", "unavailable", NULL, "the server stopped before the request finished");
    else
        sp_srv_error_set(e, 500, "server_error", NULL, NULL, "%s", j->error);
}

/* the SSE event of a failed job: data: {"error": {...}} */
static int sse_error(const srv_job *j, srv_buf *out) {
    srv_error e;
    job_error(j, &e);
    char *txt = sp_srv_error_json(&e);
    if (!txt) return -1;
    int rc = sp_srv_buf_printf(out, "data: %s\n\n", txt);
    free(txt);
    return rc;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_state *st = cls;
    srv *s = st->s;
    srv_job *j = st->j;
    (void)pos;
    while (st->out_at == st->out.n) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.n = st->out_at = 0;
        pthread_mutex_lock(&s->mu);
        double t0 = sp_time_ms();
        while (!j->done && j->text.n == st->text_seen && j->n_toks == st->toks_seen && st->started) {
            if (client_gone(st->fd)) {
                j->cancelled = 1;
                pthread_mutex_unlock(&s->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (sp_time_ms() - t0 > KEEPALIVE_MS) break;
            wait_progress(s, 100);
        }
        int rc = 0;
        if (!j->done && j->text.n == st->text_seen && j->n_toks == st->toks_seen && st->started)
            rc = sp_srv_buf_add(&st->out, ": keep-alive\n\n", 14); /* an SSE comment: the connection is not idle */
        else if (!j->done || j->text.n > st->text_seen || !st->started) {
            /* the text released so far (a delta chunk) with the logprobs of the tokens that make it,
             * holding back, with tools, the text from a call's opening on */
            size_t to = j->tools_on ? sp_srv_tool_safe_prefix(j->tool_fmt, j->text.p, j->text.n) : j->text.n;
            if (to < st->text_sent) to = st->text_sent;
            st->text_seen = j->text.n;
            st->toks_seen = j->n_toks;
            int tt = sp_srv_stream_toks(j, st->toks_sent, to);
            if (to > st->text_sent || !st->started || (j->lp && tt > st->toks_sent))
                rc = sp_srv_sse_chunk(s, j, st->created, st->text_sent, to, st->toks_sent, tt, NULL,
                                   !st->started && j->req.route == SRV_ROUTE_CHAT, &st->out);
            st->text_sent = to;
            st->toks_sent = tt;
            st->started = 1;
        }
        if (j->done && !rc && job_failed(j)) { /* an error event, no finish_reason: the answer is cut */
            rc = sse_error(j, &st->out);
            st->finished = 1;
        } else if (j->done && !rc) {
            rc = sp_srv_sse_finish(s, j, st->created, st->text_sent, st->toks_sent, &st->out);
            if (!rc) rc = sp_srv_sse_end(s, j, st->created, &st->out);
            st->finished = 1;
        }
        pthread_mutex_unlock(&s->mu);
        if (rc) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->out.n - st->out_at;
    if (n > max) n = max;
    memcpy(buf, st->out.p + st->out_at, n);
    st->out_at += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_state *st = cls;
    pthread_mutex_lock(&st->s->mu);
    if (!st->j->done) st->j->cancelled = 1;
    sp_srv_job_release(st->s, st->j);
    pthread_mutex_unlock(&st->s->mu);
    sp_srv_buf_free(&st->out);
    free(st);
}

/* ---- generation ---------------------------------------------------------------------- */
/* a chat's prompt tokens: the messages (and tools) through the template; with tool_choice required
 * or a named function, the grammar of a call */
static int chat_prompt(srv *s, srv_job *j, srv_error *e) {
    srv_request *r = &j->req;
    json_t *vars = NULL, *msgs = NULL;
    sp_err err = {{0}};
    if (sp_srv_chat_vars(s, r->tmpl_kwargs, &vars, e)) return -1;
    j->tool_fmt = sp_srv_tool_format(s->chat);
    j->tools_on = r->tools && r->tool_choice != SRV_TOOL_NONE;
    int rc = sp_srv_tools_render_input(s->chat, r, vars, &msgs, &vars, e) || sp_srv_tools_grammar(r, j->tool_fmt, e);
    if (!rc) {
        pthread_mutex_lock(&s->chat_mu);
        rc = sp_chat_tokens(s->chat, s->tok, msgs, 1, vars, &j->prompt, &j->n_prompt, &err);
        pthread_mutex_unlock(&s->chat_mu);
        if (rc) sp_srv_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", err.msg);
    }
    json_decref(vars), json_decref(msgs);
    return rc ? -1 : 0;
}

/* the prompt tokens of a chat or completion request; -1 with a 400 error */
static int prompt_tokens(srv *s, srv_job *j, srv_error *e) {
    sp_err err = {{0}};
    srv_request *r = &j->req;
    int V = sp_model_config(s->m)->vocab_size;
    if (r->route == SRV_ROUTE_CHAT) {
        if (chat_prompt(s, j, e)) return -1;
    } else if (r->prompt_text) {
        if (sp_tok_encode(s->tok, r->prompt_text, strlen(r->prompt_text), 1, 1, &j->prompt, &j->n_prompt, &err))
            return sp_srv_error_set(e, 400, "invalid_request_error", NULL, "prompt", "%s", err.msg);
        if (r->echo && !(j->echo = strdup(r->prompt_text))) return sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    } else {
        j->prompt = r->prompt_ids, j->n_prompt = r->n_prompt_ids;
        r->prompt_ids = NULL;
        for (int i = 0; i < j->n_prompt; i++)
            if (j->prompt[i] >= V)
                return sp_srv_error_set(e, 400, "invalid_request_error", NULL, "prompt",
                                     "prompt token %d at index %d is outside the vocabulary [0, %d)", j->prompt[i], i, V);
        if (r->echo && sp_tok_decode(s->tok, j->prompt, j->n_prompt, &j->echo, &err))
            return sp_srv_error_set(e, 400, "invalid_request_error", NULL, "prompt", "%s", err.msg);
    }
    if (j->n_prompt < 1) return sp_srv_error_set(e, 400, "invalid_request_error", NULL, "prompt", "the prompt is empty");
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= V)
            return sp_srv_error_set(e, 400, "invalid_request_error", NULL, "logit_bias",
                                    "'logit_bias' names token %d, outside the vocabulary [0, %d)", r->bias_ids[i], V);
    int cap = s->o.ctx, maxp = sp_model_config(s->m)->max_pos;
    if (maxp > 0 && cap > maxp) cap = maxp;
    if (j->n_prompt >= cap)
        return sp_srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                             "the prompt is %d tokens; this server's context is %d tokens per request", j->n_prompt, cap);
    j->max_new = r->max_tokens > 0 ? r->max_tokens : s->o.n_predict;
    if (j->max_new > cap - j->n_prompt) j->max_new = cap - j->n_prompt;
    return 0;
}

static enum MHD_Result handle_generate(srv *s, struct MHD_Connection *c, srv_route route, const char *body, size_t n) {
    srv_error e;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return fail(c, 500, "server_error", NULL, "out of memory");
    j->refs = 1;
    if (sp_srv_request_parse(route, body, n, &j->req, &e) || prompt_tokens(s, j, &e)) {
        pthread_mutex_lock(&s->mu);
        sp_srv_job_release(s, j);
        pthread_mutex_unlock(&s->mu);
        return send_error(c, &e, NULL, NULL);
    }
    if (sp_srv_job_submit(s, j)) {
        pthread_mutex_lock(&s->mu);
        sp_srv_job_release(s, j);
        pthread_mutex_unlock(&s->mu);
        sp_srv_error_set(&e, 503, "server_error", "queue_full", NULL, "the server is busy (every slot and the queue are full); retry later");
        return send_error(c, &e, "Retry-After", "1");
    }
    time_t created = time(NULL);
    if (j->req.stream) {
        stream_state *st = calloc(1, sizeof *st);
        struct MHD_Response *r = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free) : NULL;
        if (!r) {
            pthread_mutex_lock(&s->mu);
            j->cancelled = 1;
            sp_srv_job_release(s, j);
            pthread_mutex_unlock(&s->mu);
            free(st);
            return fail(c, 500, "server_error", NULL, "out of memory");
        }
        *st = (stream_state){.s = s, .j = j, .fd = conn_fd(c), .created = created};
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    int fd = conn_fd(c);
    pthread_mutex_lock(&s->mu);
    while (!j->done) {
        if (!j->cancelled && client_gone(fd)) j->cancelled = 1;
        wait_progress(s, 100);
    }
    char *out = NULL;
    int err = job_failed(j);
    if (err) job_error(j, &e);
    else out = sp_srv_response_final(s, j, created);
    sp_srv_job_release(s, j);
    pthread_mutex_unlock(&s->mu);
    if (err) return send_error(c, &e, NULL, NULL);
    return send_json(c, 200, out);
}

/* ---- the other endpoints -------------------------------------------------------------- */
static enum MHD_Result handle_tokenize(srv *s, struct MHD_Connection *c, srv_route route, const char *body, size_t n) {
    srv_request r;
    srv_error e;
    if (sp_srv_request_parse(route, body, n, &r, &e)) return send_error(c, &e, NULL, NULL);
    sp_err err = {{0}};
    json_t *o = NULL;
    if (route == SRV_ROUTE_TOKENIZE) {
        int32_t *ids = NULL;
        int k = 0;
        if (!sp_tok_encode(s->tok, r.content, strlen(r.content), r.add_special, 1, &ids, &k, &err)) {
            json_t *a = r.with_pieces ? sp_srv_token_pieces(s, ids, k) : json_array();
            for (int i = 0; !r.with_pieces && i < k; i++) json_array_append_new(a, json_integer(ids[i]));
            o = json_pack("{s:o}", "tokens", a);
        }
        free(ids);
    } else {
        char *text = NULL;
        int V = sp_model_config(s->m)->vocab_size, bad = -1;
        for (int i = 0; i < r.n_prompt_ids && bad < 0; i++)
            if (r.prompt_ids[i] >= V) bad = i;
        if (bad >= 0) snprintf(err.msg, sizeof err.msg, "token %d at index %d is outside the vocabulary [0, %d)", r.prompt_ids[bad], bad, V);
        else if (!sp_tok_decode(s->tok, r.prompt_ids, r.n_prompt_ids, &text, &err)) o = json_pack("{s:s}", "content", text);
        free(text);
    }
    sp_srv_request_free(&r);
    if (!o) {
        sp_srv_error_set(&e, 400, "invalid_request_error", NULL, route == SRV_ROUTE_TOKENIZE ? "content" : "tokens", "%s", err.msg);
        return send_error(c, &e, NULL, NULL);
    }
    char *txt = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return send_json(c, 200, txt);
}

static enum MHD_Result handle_models(srv *s, struct MHD_Connection *c) {
    json_t *o = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:{s:s, s:i, s:i}}]}", "object", "list", "data", "id",
                          s->o.model_name, "object", "model", "created", (json_int_t)time(NULL), "owned_by", "specula",
                          "meta", "spec", s->o.spec_name, "n_ctx", s->o.ctx, "parallel", s->o.parallel);
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return send_json(c, 200, txt);
}

/* ---- routing -------------------------------------------------------------------------- */
typedef enum {
    R_HEALTH, R_MODELS, R_METRICS, R_CHAT, R_COMPLETION, R_TOKENIZE, R_DETOKENIZE, R_NATIVE, R_PROPS, R_SLOTS, R_APPLY
} route_id;
static const struct {
    const char *path, *method;
    route_id id;
} ROUTES[] = {
    {"/health", "GET", R_HEALTH},           {"/v1/health", "GET", R_HEALTH},
    {"/health", "HEAD", R_HEALTH},          {"/v1/health", "HEAD", R_HEALTH},
    {"/v1/models", "GET", R_MODELS},        {"/models", "GET", R_MODELS},
    {"/metrics", "GET", R_METRICS},         {"/v1/chat/completions", "POST", R_CHAT},
    {"/chat/completions", "POST", R_CHAT},  {"/v1/completions", "POST", R_COMPLETION},
    {"/completions", "POST", R_COMPLETION}, {"/tokenize", "POST", R_TOKENIZE},
    {"/detokenize", "POST", R_DETOKENIZE},
    {"/completion", "POST", R_NATIVE},      {"/props", "GET", R_PROPS},
    {"/slots", "GET", R_SLOTS},             {"/apply-template", "POST", R_APPLY},
};

/* header iterator: clears *cls (a const char *) when a header's key starts there */
static enum MHD_Result key_at(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind, (void)value;
    const char **p = cls;
    if (key == *p) *p = NULL;
    return *p ? MHD_YES : MHD_NO;
}

/* A NUL inside a header value: libmicrohttpd ends the value at it (its length is the C string's)
 * and leaves the rest of the line after it in its read buffer, where it zeroes the CR LF that
 * end a line. So the byte after the value's end is 0 (CR LF), CR or LF (the empty line after a
 * bare-LF line), the first byte of the next header's key (a bare-LF line), or else the rest of
 * a line cut by a NUL. */
static int nul_inside(struct MHD_Connection *c, const char *v, size_t n) {
    char next = v[n + 1];
    if (next == 0 || next == '\r' || next == '\n') return 0;
    const char *p = v + n + 1;
    MHD_get_connection_values(c, MHD_HEADER_KIND, key_at, &p);
    return p != NULL;
}

/* GET /props, GET /slots, POST /apply-template (native.c) */
static enum MHD_Result handle_native(srv *s, struct MHD_Connection *c, int id, const char *body, size_t n) {
    srv_error e;
    char *txt;
    if (id == R_APPLY) {
        if (!(txt = sp_srv_apply_template(s, body, n, &e))) return send_error(c, &e, NULL, NULL);
        return send_json(c, 200, txt);
    }
    if (id == R_PROPS) return send_json(c, 200, sp_srv_props_json(s));
    pthread_mutex_lock(&s->mu);
    txt = sp_srv_slots_json(s);
    pthread_mutex_unlock(&s->mu);
    return send_json(c, 200, txt);
}

/* the whole header value: one that a NUL cuts short is wrong, never a shorter key */
static int authorized(srv *s, struct MHD_Connection *c) {
    if (!s->o.api_key || !*s->o.api_key) return 1;
    const char *h = NULL;
    size_t hn = 0;
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, "Authorization", 13, &h, &hn) != MHD_YES || !h) return 0;
    if (hn < 7 || strncmp(h, "Bearer ", 7) || memchr(h, 0, hn) || nul_inside(c, h, hn)) return 0;
    const char *k = h + 7, *want = s->o.api_key;
    size_t a = hn - 7, b = strlen(want);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned)(unsigned char)want[i] ^ (unsigned)(unsigned char)(i < a ? k[i] : 0);
    return diff == 0;
}

/* Content-Length headers that disagree (RFC 9112 §6.3: an error, a request smuggled past a proxy
 * otherwise): MHD would read the first */
typedef struct {
    const char *first;
    int conflict;
} length_scan;

static enum MHD_Result scan_length(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    length_scan *ls = cls;
    (void)kind;
    if (!key || strcasecmp(key, "Content-Length")) return MHD_YES;
    if (!ls->first) ls->first = value ? value : "";
    else if (strcmp(ls->first, value ? value : "")) ls->conflict = 1;
    return MHD_YES;
}

static int conflicting_lengths(struct MHD_Connection *c) {
    length_scan ls = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_length, &ls);
    return ls.conflict;
}

/* the methods a known path allows, for the Allow header of a 405 */
static void allowed_methods(const char *url, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0] && n < cap; i++)
        if (!strcmp(url, ROUTES[i].path)) n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", ROUTES[i].method);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    (void)version;
    conn_state *cs = *con_cls;
    if (!cs) { /* first call: headers only */
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        sp_srv_conn_reading(s, c, 1);
        pthread_mutex_lock(&s->mu);
        s->n_requests_live++;
        pthread_mutex_unlock(&s->mu);
        if (conflicting_lengths(c))
            return fail(c, 400, "invalid_request_error", "bad_request", "conflicting Content-Length headers");
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        if (!cs->too_large && cs->body.n + *upload_size > s->o.max_body) cs->too_large = 1, sp_srv_buf_free(&cs->body);
        if (!cs->too_large && sp_srv_buf_add(&cs->body, upload, *upload_size)) cs->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    sp_srv_conn_reading(s, c, 0); /* the whole request is here: no read deadline while it is answered */
    int found = -1, path_known = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (!strcmp(url, ROUTES[i].path)) {
            path_known = 1;
            if (!strcmp(method, ROUTES[i].method)) found = (int)i;
        }
    if (!path_known && !authorized(s, c)) /* which paths exist is not told without the key */
        return fail(c, 401, "invalid_request_error", "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
    if (!path_known) return fail(c, 404, "invalid_request_error", "not_found", "no such route");
    if (found < 0) {
        srv_error e;
        sp_srv_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "method %s is not allowed here", method);
        char allow[64];
        allowed_methods(url, allow, sizeof allow);
        return send_error(c, &e, "Allow", allow);
    }
    route_id id = ROUTES[found].id;
    if (id != R_HEALTH && !authorized(s, c))
        return fail(c, 401, "invalid_request_error", "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
    if (cs->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->o.max_body);
        return fail(c, 413, "invalid_request_error", "request_too_large", msg);
    }
    pthread_mutex_lock(&s->mu);
    int ready = s->ready && !s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (id == R_METRICS) {
        srv_buf b = {0};
        pthread_mutex_lock(&s->mu);
        int rc = sp_srv_metrics_text(s, &b);
        pthread_mutex_unlock(&s->mu);
        enum MHD_Result r = rc ? fail(c, 500, "server_error", NULL, "out of memory")
                               : send_text(c, 200, "text/plain; version=0.0.4", b.p, b.n, NULL, NULL);
        sp_srv_buf_free(&b);
        return r;
    }
    if (!ready) {
        srv_error e;
        sp_srv_error_set(&e, 503, "server_error", "unavailable", NULL, "%s", s->stopping ? "the server is stopping" : "the model is loading");
        return send_error(c, &e, "Retry-After", "1");
    }
    const char *body = cs->body.p ? cs->body.p : "";
    switch (id) {
    case R_HEALTH: return send_text(c, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, NULL);
    case R_MODELS: return handle_models(s, c);
    case R_CHAT: return handle_generate(s, c, SRV_ROUTE_CHAT, body, cs->body.n);
    case R_COMPLETION: return handle_generate(s, c, SRV_ROUTE_COMPLETION, body, cs->body.n);
    case R_TOKENIZE: return handle_tokenize(s, c, SRV_ROUTE_TOKENIZE, body, cs->body.n);
    case R_DETOKENIZE: return handle_tokenize(s, c, SRV_ROUTE_DETOKENIZE, body, cs->body.n);
    case R_NATIVE: return handle_generate(s, c, SRV_ROUTE_NATIVE, body, cs->body.n);
    case R_PROPS: /* fall through: GET /props, GET /slots, POST /apply-template */
    case R_SLOTS:
    case R_APPLY: return handle_native(s, c, id, body, cs->body.n);
    default: return fail(c, 404, "invalid_request_error", "not_found", "no such route");
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    (void)c, (void)toe;
    conn_state *cs = *con_cls;
    if (!cs) return;
    sp_srv_conn_reading(s, c, 1); /* a kept-alive connection waits for its next request */
    pthread_mutex_lock(&s->mu);
    s->n_requests_live--;
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
    sp_srv_buf_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

/* the daemon's connection notifications, to the connection guard (conn.c) */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    if (code == MHD_CONNECTION_NOTIFY_STARTED) sp_srv_conn_started(cls, c, socket_context);
    else sp_srv_conn_closed(cls, socket_context);
}

/* ---- lifetime ------------------------------------------------------------------------- */
/* --host: an IPv4 or IPv6 address or a host name (its first address) into *addr; 0 / -1 */
static int resolve_host(const char *host, int port, struct sockaddr_storage *addr, int *v6, sp_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res) return sp_err_set(err, "server: --host %s: %s", host, rc ? gai_strerror(rc) : "no address");
    memset(addr, 0, sizeof *addr);
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    if (*v6) ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
    return 0;
}

int sp_srv_start(srv **out, const srv_opts *o, sp_err *err) {
    *out = NULL;
    if (o->parallel < 1 || o->parallel > 64) return sp_err_set(err, "server: --parallel %d out of range 1..64", o->parallel);
    if (o->ctx != 0 && (o->ctx < 8 || o->ctx > SRV_MAX_CTX))
        return sp_err_set(err, "server: -c %d out of range 8..%d (0: the model's context)", o->ctx, SRV_MAX_CTX);
    if (o->max_queue < 0 || o->max_queue > SRV_MAX_QUEUE)
        return sp_err_set(err, "server: --max-queue %d out of range 0..%d", o->max_queue, SRV_MAX_QUEUE);
    if (o->port < 0 || o->port > 65535) return sp_err_set(err, "server: --port %d out of range 0..65535", o->port);
    if (o->read_timeout_s < 1) return sp_err_set(err, "server: --read-timeout must be >= 1");
    if (o->max_connections < 2 || o->max_connections > 65536)
        return sp_err_set(err, "server: --max-connections %d out of range 2..65536", o->max_connections);
    if (o->max_conn_per_ip < 0) return sp_err_set(err, "server: --max-conn-per-ip must be >= 0");
    json_t *vars = o->chat_template_kwargs ? json_loads(o->chat_template_kwargs, 0, NULL) : NULL;
    if (o->chat_template_kwargs && !json_is_object(vars)) { /* json_is_object evaluates its argument twice */
        json_decref(vars);
        return sp_err_set(err, "server: --chat-template-kwargs: expected a JSON object, got '%s'", o->chat_template_kwargs);
    }
    srv *s = calloc(1, sizeof *s);
    if (!s) return json_decref(vars), sp_err_set(err, "server: out of memory");
    s->o = *o;
    s->tmpl_vars = vars;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->chat_mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    static const double TAU_LE[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 12, 16};
    static const double TTFT_LE[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    static const double ITL_LE[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
    sp_srv_hist_init(&s->h_tau, TAU_LE, 11);
    sp_srv_hist_init(&s->h_ttft, TTFT_LE, 11);
    sp_srv_hist_init(&s->h_itl, ITL_LE, 10);
    struct sockaddr_storage addr;
    int v6 = 0;
    if (resolve_host(o->host, o->port, &addr, &v6, err)) {
        json_decref(s->tmpl_vars);
        free(s);
        return -1;
    }
    if (sp_srv_conns_start(s, err)) {
        json_decref(s->tmpl_vars);
        free(s);
        return -1;
    }
    s->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                                  (v6 ? MHD_USE_IPv6 : 0), 0, NULL,
                              NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)o->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                              (unsigned)o->max_conn_per_ip, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->mhd) {
        sp_srv_conns_stop(s);
        json_decref(s->tmpl_vars);
        free(s);
        return sp_err_set(err, "server: cannot listen on %s:%d (address in use or not permitted)", o->host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    *out = s;
    return 0;
}

/* one request's drafter, from the session's drafter source (the scheduler's thread makes them) */
static sp_drafter *make_drafter(void *ctx, const sp_sample_params *sample, int max_ctx, sp_err *err) {
    return sp_drafter_src_make(sp_session_drafter_src(ctx), sample, max_ctx, err);
}

int sp_srv_set_session(srv *s, sp_session *ss, sp_err *err) {
    s->m = sp_session_model(ss);
    if (s->o.ctx == 0) { /* -c 0: the model's context, split across the slots */
        int mp = sp_model_config(s->m)->max_pos;
        s->o.ctx = (mp > 0 ? mp : 4096) / s->o.parallel;
        if (s->o.ctx < 8) return sp_err_set(err, "server: the model's context (%d) split across %d slots is too small", mp, s->o.parallel);
    }
    s->tok = sp_session_tokenizer(ss);
    if (!s->tok) return sp_err_set(err, "%s has no tokenizer (tokenizer.json / GGUF vocabulary)", sp_session_model_dir(ss));
    if (sp_session_drafter_src(ss)) {
        s->o.make_drafter = make_drafter;
        s->o.drafter_ctx = ss;
    }
    sp_err cerr = {{0}};
    s->chat = sp_session_chat_template(ss, &cerr);
    if (!s->chat && sp_session_params_get(ss)->chat_template) return sp_err_set(err, "%s", cerr.msg);
    if (!s->chat) sp_log(SP_LOG_WARN, "server: %s; chats are the messages joined by blank lines", cerr.msg);
    if (sp_srv_sched_start(s, err)) return -1;
    pthread_mutex_lock(&s->mu);
    s->ready = 1;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int sp_srv_port(const srv *s) { return s->port; }

int sp_srv_slot_ctx(const srv *s) { return s->o.ctx; }

void sp_srv_stop(srv *s) {
    if (!s) return;
    MHD_socket ls = MHD_quiesce_daemon(s->mhd); /* no new connections */
    sp_srv_sched_stop(s);                           /* cancels every job: waiting connections finish */
    pthread_mutex_lock(&s->mu);                  /* let them send their responses (at most 10 s) */
    for (int i = 0; i < 100 && s->n_requests_live > 0; i++) wait_progress(s, 100);
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->mhd);
    sp_srv_conns_stop(s);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->progress);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->chat_mu);
    json_decref(s->tmpl_vars);
    free(s);
}
