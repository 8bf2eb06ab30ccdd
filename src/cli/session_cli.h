/* session_cli.h — the speculative commands' way into the engine session (api/session.h): the
 * --spec / -md / --draft-* / --tree / --chat-template flags become session params, and a prompt
 * from -p TEXT, --prompt-ids or a chat turn becomes tokens through the session. Errors are
 * printed as the command's one-line error. */
#ifndef SPECULA_CLI_SESSION_H
#define SPECULA_CLI_SESSION_H

#include <stdint.h>

#include "api/session.h"
#include "args.h"
#include "chat_cli.h"
#include "spec_cli.h"

/* The drafter options of the speculative flags. */
sp_drafter_opts cli_spec_drafter_opts(const cli_spec_opts *so);

/* The session for model (a directory or FILE.gguf) with the drafter and tree flags (tree NULL:
 * chains); chat_tmpl: --chat-template or NULL; drafter_ctx: the KV capacity a draft model is
 * first built for (0: 4096). Prints errors; returns 0 / -1. */
int cli_session_open(const char *cmd, const char *model, int threads, const cli_spec_opts *so,
                     const cli_tree_opts *tree, const char *chat_tmpl, int drafter_ctx, sp_session **out);

/* A model path (-m) that does not exist: the error "-m PATH: no such file or directory" is
 * printed and -1 returned (before any message about what the model lacks); 0 otherwise. */
int cli_model_path_check(const char *cmd, const char *path);

/* The model summary printed on load (one block on stderr: architecture, parameters, tensor
 * types, context, load time, CPU tier; -v adds the rest of the configuration; -q /
 * --log-disable none). cli_log_opt_rows fills 3 rows of a command's table with those flags. */
extern int cli_log_verbose, cli_log_quiet;
int cli_log_opt_rows(cli_opt *rows);
void cli_session_summary(sp_session *s, const cli_spec_opts *so, double load_ms);

/* The prompt: -p TEXT (rendered as a chat turn with -sys / --chat / --chat-template[-kwargs]) or
 * --prompt-ids. Prints errors; returns 0 / -1. *ids malloc'd. */
int cli_session_prompt(const char *cmd, sp_session *s, const cli_chat_opts *co, int chat, const char *text,
                       const char *ids_str, int32_t **ids, int *n);

/* [system,] user TEXT as tokens with the generation prompt; kwargs: --chat-template-kwargs or
 * NULL. Prints errors; returns 0 / -1. */
int cli_session_chat_turn(const char *cmd, sp_session *s, const char *system, const char *text, const char *kwargs,
                          int32_t **ids, int *n);

#endif
