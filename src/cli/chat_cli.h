/* chat_cli.h — the chat flags of `specula generate`: -sys TEXT (system prompt), -cnv
 * (interactive multi-turn chat in the terminal), --chat-template NAME|FILE and
 * --chat-template-kwargs '{"enable_thinking": false}', rendered with the model's own chat
 * template (src/chat/chat.h). */
#ifndef SPECULA_CLI_CHAT_H
#define SPECULA_CLI_CHAT_H

#include <jansson.h>
#include <stdint.h>

#include "sample/sample.h"
#include "decode/generate.h"
#include "spec_cli.h"

typedef struct {
    const char *system;   /* -sys */
    int cnv;              /* -cnv */
    const char *tmpl;     /* --chat-template NAME|FILE */
    const char *kwargs;   /* --chat-template-kwargs JSON: extra template variables */
} cli_chat_opts;

#define CLI_CHAT_OPT_ROWS 4

/* The option rows for these flags (to append to a command's cli_opt table); returns the count. */
int cli_chat_opt_rows(void *rows /* cli_opt[CLI_CHAT_OPT_ROWS] */, cli_chat_opts *o);

/* 1 when the prompt is to be rendered as a conversation: --chat, -sys, --chat-template or
 * --chat-template-kwargs with -p TEXT */
int cli_chat_wanted(const cli_chat_opts *o, int chat, const char *text);

/* --chat-template-kwargs TEXT as a JSON object of template variables (*vars NULL when kwargs is
 * NULL; the caller decrefs it). Prints errors; returns 0/-1. */
int cli_chat_vars(const char *cmd, const char *kwargs, json_t **vars);

/* Append {"role": role, "content": content} to the JSON array msgs; -1 when content is not valid
 * UTF-8 (or out of memory). */
int cli_chat_push(json_t *msgs, const char *role, const char *content);

/* What -cnv needs from generate's other flags. */
typedef struct {
    const char *model_dir;
    const char *first; /* -p TEXT: the first user turn, or NULL */
    int n_predict;     /* most tokens per reply; -1: until the end of the turn (or the context) */
    int threads, ctx;  /* ctx 0: 4096; above the model's context: capped to it, with a note */
    sp_sample_params sample;
    const cli_spec_opts *spec;
    const sp_gen_params *gen; /* penalties and extra eos ids (generate's flags), or NULL */
    const char *const *stops; /* --stop strings: a reply ends before the first (unprinted) */
    int n_stops;
} cli_chat_run_opts;

/* -cnv: read user turns from stdin (a line each; a line ending in '\' continues on the next;
 * "/exit" or end of input ends the chat), stream each reply to stdout without control tokens
 * (the end-of-turn token or a --stop string ends it), keep the conversation and re-render it
 * with the template every turn (the whole conversation is prefilled again each turn). "> "
 * prompts go to stderr. Ctrl-C during a reply ends the reply (what was said is kept) and the
 * chat goes on; Ctrl-C at the prompt, or a second one while the reply winds down, ends the chat
 * (exit status 130). When the conversation and room for a reply no longer fit the context, the
 * oldest turns are dropped (the system prompt stays) with a notice on stderr. Speculative
 * decoding works as in generate. Returns the exit status. */
int cli_chat_run(const char *cmd, const cli_chat_opts *o, const cli_chat_run_opts *r);

#endif
