/* server.h — `specula serve`: an OpenAI-compatible HTTP server (libmicrohttpd) with continuous
 * batching of speculative decoding.
 *
 * Up to `parallel` requests decode at once, each in its own slot (KV cache, drafter, sampler,
 * RNG stream by its seed); every step the scheduler thread runs one target forward over the rows
 * of all active slots (sp_model_forward_batch): prompt chunks of slots still prefilling and the
 * verify blocks [pending, drafts] of the others. Drafting runs per slot. Requests join and leave
 * between steps; beyond the slots they wait in a bounded queue (past max_queue: 503).
 *
 * Endpoints: POST /v1/chat/completions, /v1/completions (streaming as Server-Sent Events),
 * /tokenize, /detokenize; GET /v1/models, /health, /metrics (Prometheus text); llama-server's
 * native POST /completion, /apply-template and GET /props, /slots (native.c). Errors are
 * OpenAI-style JSON. The library prints nothing to stdout: one line per request goes to stderr
 * through sp_log. */
#ifndef SPECULA_SERVER_H
#define SPECULA_SERVER_H

#include "api/session.h"
#include "sample/sample.h"
#include "decode/drafter.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"

/* Builds one request's drafter for its sampling params (the server owns the result). NULL with
 * err on failure. */
typedef sp_drafter *(*srv_drafter_fn)(void *ctx, const sp_sample_params *sample, int max_ctx, sp_err *err);

/* the largest -c (KV positions per slot) and --max-queue a server accepts */
#define SRV_MAX_CTX (1 << 24)
#define SRV_MAX_QUEUE 65536

typedef struct {
    const char *host;        /* address to bind (default 127.0.0.1) */
    int port;                /* 0: any free port (sp_srv_port tells which) */
    int parallel;            /* slots (default 4) */
    int ctx;                 /* KV positions per slot (default 4096; 0: the model's context split across the slots) */
    const char *api_key;     /* NULL: no authentication */
    int max_queue;           /* requests waiting for a slot before 503 (default 64) */
    int timeout_s;           /* idle connection timeout (default 60) */
    int read_timeout_s;      /* a request's line, headers and body must arrive within this (default 30) */
    int max_connections;     /* connections at once (default 512); an eighth is kept free for new requests */
    int max_conn_per_ip;     /* connections from one client address (default 128; 0: no cap) */
    size_t max_body;         /* bytes (default 1 MiB; larger: 413) */
    int n_predict;           /* max_tokens when a request gives none (default 256) */
    int prefill_chunk;       /* most prompt rows a slot adds to one forward (default 128) */
    const char *model_name;  /* id reported by /v1/models */
    const char *chat_template_kwargs; /* JSON object text: template variables of every chat (a request's
                                         chat_template_kwargs add to them), or NULL */
    const char *spec_name;   /* drafter kind, for /v1/models and the log ("none" = plain) */
    int draft_max, draft_min;
    sp_tree_shape tree;      /* tree.nodes > 0: speculative requests verify token trees of that many nodes and
                                draft_max levels, verified inside the batched forward (docs/TREE.md) */
    int spec_max_slots;      /* greedy requests' drafts per step: -1 (default) chosen by the verify-length
                                policy (vlen.h); 0 always the full G; N > 0 the full G while at most N
                                slots are busy, else none. Sampled requests always draft the full G */
    const sp_synth *synth;   /* NULL, or synthetic acceptance for speculative requests (decode/spec.h;
                                borrowed; benchmarks only: timings and the log mark it, not lossless) */
    srv_drafter_fn make_drafter; /* set by sp_srv_set_session from its drafter source (NULL: plain) */
    void *drafter_ctx;
} srv_opts;

srv_opts sp_srv_opts_default(void);

typedef struct srv srv;

/* Start listening (the model may come later: until sp_srv_set_session, /health and generation
 * answer 503). Returns 0 with *out, or -1 with err (e.g. the port is taken). */
int sp_srv_start(srv **out, const srv_opts *o, sp_err *err);
/* Serve the engine session (borrowed: it must outlive the server; it must have a tokenizer): its
 * model, tokenizer, chat template and drafter source (each request's drafter is made from it;
 * none: plain decoding). Starts the scheduler. Returns 0, or -1 with err. */
int sp_srv_set_session(srv *s, sp_session *session, sp_err *err);
int sp_srv_port(const srv *s);
/* KV positions per slot (opts.ctx, or what 0 resolved to once the session is set) */
int sp_srv_slot_ctx(const srv *s);
/* Stop accepting connections, cancel queued and in-flight requests (their clients get what was
 * generated, finish_reason "cancelled"), wait for every connection and the scheduler, free. */
void sp_srv_stop(srv *s);

#endif
