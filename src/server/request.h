/* request.h — an OpenAI-style request body (JSON) → a checked request struct, without a socket:
 * the server's one entry point for untrusted bytes, so it can be fuzzed on its own.
 *
 * Every field is type-checked and range-checked; fields OpenAI's API defines but the server
 * does not implement are accepted only at their neutral value (n = 1), and fields OpenAI does not define are rejected as OpenAI rejects them (400 naming the
 * field), except llama-server's fields listed in request.c: those with a meaning here work, the
 * others are accepted and ignored (or, where they would change the sampling, accepted at their
 * neutral value only).
 * Errors carry the HTTP status and an OpenAI error type / code / message. */
#ifndef SPECULA_SERVER_REQUEST_H
#define SPECULA_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "sample/grammar.h"
#include "sample/penalty.h"
#include "sample/sample.h"

/* NATIVE: llama-server's POST /completion; APPLY_TEMPLATE: its POST /apply-template (a chat body) */
typedef enum {
    SRV_ROUTE_CHAT = 0,
    SRV_ROUTE_COMPLETION,
    SRV_ROUTE_TOKENIZE,
    SRV_ROUTE_DETOKENIZE,
    SRV_ROUTE_NATIVE,
    SRV_ROUTE_APPLY_TEMPLATE
} srv_route;

#define SRV_MAX_STOP 16
#define SRV_MAX_STOP_LEN 256

/* tool_choice: AUTO parses a call when the output holds one, NONE renders no tools and parses
 * nothing, REQUIRED / NAMED force one call through a grammar (server/tools.h) */
typedef enum { SRV_TOOL_AUTO = 0, SRV_TOOL_NONE, SRV_TOOL_REQUIRED, SRV_TOOL_NAMED } srv_tool_choice;

typedef struct {
    char *role;    /* "system", "user", "assistant", "tool" ("developer" is read as "system") */
    char *content; /* text parts joined */
} srv_msg;

typedef struct {
    srv_route route;
    char *model;                /* as given (informative), may be NULL */
    srv_msg *msgs;              /* chat */
    int n_msgs;
    char *prompt_text;          /* completions: text prompt, or NULL */
    int32_t *prompt_ids;        /* completions: token-id prompt, or NULL; detokenize: the tokens */
    int n_prompt_ids;
    char *content;              /* tokenize */
    int add_special;            /* tokenize: add BOS as the tokenizer does (default 0, as llama-server) */
    int with_pieces;            /* tokenize: each token as {"id", "piece"} */
    char *tmpl_kwargs;          /* chat_template_kwargs as JSON object text, or NULL */
    int32_t *bias_ids;          /* logit_bias: n_bias token ids and their biases (penalty.bias_* point here) */
    float *bias;
    int n_bias;
    int echo;                   /* completions: prepend the prompt text to the output */
    int max_tokens;             /* -1: the server's default */
    sp_sample_params sample;    /* temperature default 1 (OpenAI), top_p 1, top_k 0, min_p 0 */
    sp_penalty_params penalty;  /* presence / frequency / repeat_penalty, window repeat_last_n (default 64) */
    int seed_given;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int top_logprobs;           /* -1: no logprobs; else logprobs with this many alternatives */
    int return_tokens;          /* extension: the emitted token ids in the response */
    int ignore_eos;             /* extension */
    int speculative;            /* extension: 0 decodes this request without the drafter (default 1) */
    int cache_prompt;           /* llama-server's: 0 forwards the whole prompt, not reusing a slot's cache (default 1) */
    struct json_t *messages;    /* chat: the messages as the template gets them (tool fields included) */
    struct json_t *tools;       /* chat: the request's tools array, or NULL */
    srv_tool_choice tool_choice;
    char *tool_name;            /* tool_choice naming a function */
    int parallel_tools;         /* parallel_tool_calls (default 1): a forced call may be followed by more */
    sp_grammar *grammar;        /* response_format json_object / json_schema, or llama-server's json_schema /
                                   grammar: the compiled grammar the output follows (NULL: none) */
} srv_request;

typedef struct {
    int status;        /* HTTP status */
    char type[40];     /* "invalid_request_error", ... */
    char code[40];     /* OpenAI's code, or "" */
    char param[64];    /* the offending field, or "" */
    char message[512];
} srv_error;

/* Parse body[0, len) for route. Returns 0 with *r filled (free with sp_srv_request_free), or -1 with
 * *e set (*r then holds nothing to free). */
int sp_srv_request_parse(srv_route route, const char *body, size_t len, srv_request *r, srv_error *e);
void sp_srv_request_free(srv_request *r);

/* Fill *e and return -1. */
int sp_srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                  ...) __attribute__((format(printf, 6, 7)));

#endif
