/* session.h — one engine session: the front door the CLI commands (generate, run, bench-spec,
 * serve, the chat), the server and the public sp_engine_* API all drive.
 *
 * A session owns the target model, its tokenizer and chat template, the drafter source (the
 * drafter's kind detected from its files, every drafter option, the checkpoint shared by the
 * requests' drafters: drafters/kind.h) and the speculative options (tree shape, length policy).
 * A request brings its sampling and penalties, stop strings and callbacks, and gets tokens, text
 * and statistics back: sp_session_generate runs it through the one speculative round of
 * decode/round.h (sp_spec_generate), or plain decoding (sp_generate) when there is no drafter.
 * The server steps the same round itself for batching; it takes the model, tokenizer, chat
 * template and drafter source from here.
 *
 * Ownership: sp_session_open returns a session the caller frees with sp_session_free; the
 * strings of its params are copied. Getters return borrowed pointers valid until the free.
 * Threading: a session is not thread-safe; one thread drives it (the server's scheduler thread
 * steps rounds while connection threads only tokenize, under the server's own lock). */
#ifndef SPECULA_API_SESSION_H
#define SPECULA_API_SESSION_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/chat.h"
#include "decode/spec.h"
#include "api/drafter_kinds.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *model;         /* target directory or FILE.gguf (required) */
    int n_threads;             /* 0: every core */
    sp_drafter_opts drafter;   /* drafter.kind NULL and drafter.dir NULL, or kind "none": plain decoding */
    sp_tree_shape tree;        /* tree.nodes 0: chains */
    int policy;                /* SP_SPEC_POLICY_ADAPTIVE (the CLI's default) or SP_SPEC_POLICY_ALWAYS */
    const char *chat_template; /* NULL: the model's own (chat/chat.h) */
    int drafter_ctx;           /* KV positions a draft model is first built for (0: 4096); grows with requests */
    sp_kv_type kv_k, kv_v;     /* the target's KV cache types (sp_model_set_kv_types; default f32) */
} sp_session_params;

sp_session_params sp_session_params_default(void);

typedef struct sp_session sp_session;

/* Load the target (and its tokenizer, when it has one), set the bf16-dot numerics, open the
 * drafter source (validating its files and options now). Returns 0, or -1 with err. */
int sp_session_open(sp_session **out, const sp_session_params *p, sp_err *err);
void sp_session_free(sp_session *s);

sp_model *sp_session_model(const sp_session *s);
const char *sp_session_model_dir(const sp_session *s);
tok_tokenizer *sp_session_tokenizer(const sp_session *s);  /* NULL: the model has none */
sp_drafter_src *sp_session_drafter_src(const sp_session *s); /* NULL: plain decoding */
const char *sp_session_drafter_kind(const sp_session *s);  /* "none" without a drafter */
const sp_session_params *sp_session_params_get(const sp_session *s); /* as opened (strings owned by the session) */
/* The chat template (loaded at the first call); NULL with err when the model has no tokenizer. */
const chat_template *sp_session_chat_template(sp_session *s, sp_err *err);
/* A conversation (JSON array of {role, content}) as prompt tokens, with the generation prompt:
 * the one chat-to-token path (sp_chat_tokens). vars: extra template variables or NULL. */
int sp_session_chat_tokens(sp_session *s, json_t *messages, json_t *vars, int32_t **ids, int *n, sp_err *err);
/* The token bytes of the model's vocabulary for grammars (built at the first call, owned by the
 * session); NULL with err when the model has no tokenizer. */
const sp_gvocab *sp_session_gvocab(sp_session *s, sp_err *err);
/* Text as prompt tokens (BOS as the model adds it, special tokens parsed). */
int sp_session_text_tokens(sp_session *s, const char *text, int32_t **ids, int *n, sp_err *err);

/* Called for every token of a request (with a tokenizer) with the text that became final with it:
 * complete UTF-8, never part of a stop string, possibly empty; then for text flushed at the end
 * with token -1. Return non-zero to end the request after this token. */
typedef int (*sp_session_text_cb)(void *ctx, int32_t token, const char *text, size_t n);

typedef struct {
    sp_gen_params gen;             /* max_new, ignore_eos, sampling, penalties, extra EOS ids, max_ctx;
                                      gen.on_token (may be NULL) sees every token first */
    const char *const *stops;      /* stop strings over the text (borrowed; needs a tokenizer) */
    int n_stops;
    int plain;                     /* 1: no drafter for this request */
    int stop_at_eog;               /* 1: an end-of-generation token (end of turn) ends it unprinted */
    int skip_special;              /* 1: control tokens are left out of the text */
    int keep_text;                 /* 1: out->text holds the whole text (stop strings applied) */
    int profile;                   /* 1: round-cost profile in out->spec.prof (through the round even plain) */
    int round_plain;               /* 1: without a drafter, plain decoding through the speculative round
                                      (out->spec filled) rather than sp_generate */
    sp_policy *policy_carry;       /* NULL, or the adaptive policy's state carried between requests */
    const char *grammar;           /* NULL, or GBNF the output follows (compiled per request) */
    sp_session_text_cb on_text;    /* NULL: no streamed text */
    void *cb_ctx;
} sp_session_req;

sp_session_req sp_session_req_default(void);

typedef struct {
    int32_t *tokens;      /* [n_tokens], malloc'd */
    int n_tokens;
    char *text;           /* keep_text with a tokenizer: malloc'd, else NULL */
    int speculative;      /* 1: spec holds the speculative figures */
    sp_spec_stats spec;   /* speculative runs (and profiled plain runs) */
    sp_gen_stats gen;     /* every run: prompt, emitted, prefill / decode times, stop */
    const char *stop;     /* "eos", "max_new", "context", "callback", "stop_string" */
    double mean_conf;     /* DSpark: mean confidence of the drafts offered, else -1 */
} sp_session_out;

/* Synthetic acceptance for the session's speculative requests (decode/spec.h; copied; NULL: off,
 * the state every session opens in). For benchmark commands only: their output is not lossless and
 * they say so. Chains only (an error with a tree). Returns 0, or -1 with err. */
int sp_session_set_synthetic(sp_session *s, const sp_synth *synth, sp_err *err);
/* The synthetic acceptance set, or NULL (off). */
const sp_synth *sp_session_synthetic(const sp_session *s);

/* Run one request after prompt[0, n). out is filled (release with sp_session_out_free) even on
 * error, with what was generated. Returns 0, or -1 with err. */
int sp_session_generate(sp_session *s, const int32_t *prompt, int n, const sp_session_req *r, sp_session_out *out,
                        sp_err *err);
void sp_session_out_free(sp_session_out *o);

#endif
