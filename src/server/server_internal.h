/* server_internal.h — what the server's files share: the server, its jobs (one per generation
 * request, shared by the connection thread that answers it and the scheduler thread that runs
 * it), and the metrics. One mutex (srv.mu) guards every job's output and the counters. */
#ifndef SPECULA_SERVER_INTERNAL_H
#define SPECULA_SERVER_INTERNAL_H

#include <pthread.h>

#include "decode/stopstr.h"
#include "server/request.h"
#include "server/server.h"
#include "server/slot.h"
#include "server/text.h"
#include "server/vlen.h"

/* Prometheus histogram with fixed upper bounds */
#define SRV_HIST_MAX 16
typedef struct {
    int n;
    double le[SRV_HIST_MAX];
    unsigned long count[SRV_HIST_MAX + 1]; /* per bucket (last: +Inf) */
    double sum;
    unsigned long total;
} srv_hist;

void sp_srv_hist_init(srv_hist *h, const double *le, int n);
void sp_srv_hist_add(srv_hist *h, double v);

typedef struct srv_job srv_job;
struct srv_job {
    /* set by the connection thread before submit, then read-only */
    srv_request req;
    int32_t *prompt;
    int n_prompt;
    int max_new;
    long id;
    double t_submit;
    char *echo;               /* completions with echo: the prompt text */
    int tools_on;             /* chat with tools and tool_choice other than none: calls are parsed */
    int tool_fmt;             /* srv_tool_fmt of the server's template (server/tools.h) */
    /* written by the scheduler under srv.mu */
    srv_buf text;             /* released text (stop strings applied) */
    int32_t *toks;            /* every emitted token */
    slot_token *lp;           /* with logprobs: one entry per emitted token */
    size_t *tok_at;           /* with logprobs: where each token's text begins in the decoded text */
    size_t raw_n;             /* bytes of decoded text (before the stop strings cut it) */
    int n_toks, cap_toks;
    int queued, running, done;
    const char *finish;       /* "stop", "length", "cancelled" (the client left), "error", "shutdown" */
    char error[1024];
    slot_stats stats;
    /* the scheduler's own (no lock needed) */
    tok_stream *ts;
    sp_stopstr *stop;         /* the request's stop strings (NULL: none) */
    int stopped;              /* a stop string appeared */
    /* set by the connection thread under srv.mu */
    int cancelled;
    int refs;                 /* connection + scheduler; freed at 0 */
    srv_job *next;            /* queue link */
};

typedef struct srv_conns srv_conns;

struct srv {
    srv_opts o;
    struct MHD_Daemon *mhd;
    int port;
    sp_model *m;
    tok_tokenizer *tok;
    struct sp_gvocab *gv;     /* the vocabulary's token bytes for grammars (scheduler thread; built at the first) */
    const struct chat_template *chat; /* the session's; NULL: none (chats are the contents joined) */
    struct json_t *tmpl_vars;   /* --chat-template-kwargs as a JSON object, or NULL */
    pthread_mutex_t chat_mu;    /* chat rendering is serialized */
    int ready, stopping;
    pthread_t sched;
    int sched_started;
    pthread_mutex_t mu;
    pthread_cond_t work;      /* scheduler: a job arrived or stop */
    pthread_cond_t progress;  /* connections: some job advanced */
    srv_job *q_head, *q_tail;
    int n_queued, n_active;
    int n_requests_live;      /* HTTP requests between their first callback and their completion */
    long next_id;
    /* scheduler state */
    srv_slot **slots;
    srv_job **slot_job;
    sp_kv *scratch;
    float *logits;            /* [parallel · (G + 1), V] */
    int max_rows;
    slot_drafter_src dsrc;    /* speculative requests' drafter source (make NULL: plain server) */
    int *dtaps;               /* [dsrc.n_taps]: the target layers its drafters tap */
    srv_vlen vlen;            /* verify-length policy (fwd NULL: not in use) */
    double t_draft, t_forward, t_verify; /* scheduler time split (debug log every 50 steps) */
    long n_rows, n_steps, n_dec, n_drafts; /* rows, steps, decoding slots, drafts verified (the same log) */
    /* metrics (under mu) */
    unsigned long m_requests, m_ok, m_errors, m_rejected, m_prompt_tokens, m_gen_tokens, m_drafted, m_accepted;
    unsigned long m_drafters_built, m_idle_drafter_rounds; /* drafter work of speculative requests */
    unsigned long m_cached_tokens; /* prompt tokens whose KV rows came from a slot's cache */
    unsigned long m_nodraft[SLOT_NODRAFT_N]; /* rounds of speculative requests verifying no drafts, by reason */
    long m_kv_used, m_kv_cap;
    srv_hist h_tau, h_ttft, h_itl;
    srv_conns *conns;         /* the connection guard (conn.c) */
};

/* connection guard (conn.c): read deadlines and room for new requests. started / closed are
 * called from the daemon's connection notifications (socket_context: the connection's slot for
 * the guard's record); reading marks whether a connection is receiving a request (1) or has one
 * complete (0). */
struct MHD_Connection;
int sp_srv_conns_start(srv *s, sp_err *err);
void sp_srv_conns_stop(srv *s);
void sp_srv_conn_started(srv *s, struct MHD_Connection *c, void **socket_context);
void sp_srv_conn_closed(srv *s, void **socket_context);
void sp_srv_conn_reading(srv *s, struct MHD_Connection *c, int reading);

/* scheduler (sched.c) */
int sp_srv_sched_start(srv *s, sp_err *err);
void sp_srv_sched_stop(srv *s);
/* Queue a job (takes a reference). Returns 0, or -1 when the queue is full or the server stops. */
int sp_srv_job_submit(srv *s, srv_job *j);
/* Drop the caller's reference (the job is freed when no one holds it). Call with mu held. */
void sp_srv_job_release(srv *s, srv_job *j);

/* metrics text (metrics.c), mu held */
int sp_srv_metrics_text(srv *s, srv_buf *out);

/* llama-server's native routes and formats (native.c). */
/* The template variables of a chat: the server's --chat-template-kwargs with the request's
 * chat_template_kwargs (JSON text or NULL) over them; *vars NULL when there are none (caller
 * decrefs). -1 with a 400 error. */
int sp_srv_chat_vars(srv *s, const char *req_kwargs, struct json_t **vars, srv_error *e);
/* GET /props and GET /slots bodies (malloc'd text; /slots with mu held) */
char *sp_srv_props_json(srv *s);
char *sp_srv_slots_json(srv *s);
/* POST /apply-template: {"prompt": the rendered conversation} (malloc'd text), or NULL with *e */
char *sp_srv_apply_template(srv *s, const char *body, size_t n, srv_error *e);
/* /tokenize with with_pieces: [{"id", "piece"}] (a piece that is not UTF-8 text: its bytes) */
struct json_t *sp_srv_token_pieces(srv *s, const int32_t *ids, int n);
/* POST /completion: the finished job's body (malloc'd), and one SSE event of text [from, to)
 * (final: the closing event, with stop true and the timings) appended to out */
char *sp_srv_native_final(srv *s, srv_job *j);
int sp_srv_native_chunk(srv *s, srv_job *j, size_t from, size_t to, int final, srv_buf *out);

#endif
