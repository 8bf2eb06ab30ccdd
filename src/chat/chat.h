/* chat.h — a conversation -> the prompt text a model expects, rendered with the model's own
 * chat template (used by `generate --chat`, `-sys`, `-cnv`, `specula template`, and meant for
 * the HTTP server).
 *
 * Where the template comes from, first found wins:
 *   1. an explicit choice (--chat-template): a file of Jinja text, or the name of a
 *      hand-written renderer (gemma4, gemma3, qwen3 / chatml, llama3);
 *   2. DIR/chat_template.jinja, else DIR/chat_template.json ({"chat_template": "..."});
 *   3. the tokenizer's chat_template (tokenizer_config.json, its string or the "default" of
 *      the list-of-named-templates form; GGUF tokenizer.chat_template);
 *   4. a hand-written renderer (sp_tok_chat_render) picked by the turn markers in the
 *      vocabulary — the fallback for tokenizers that ship no template.
 * Jinja templates see what Hugging Face's apply_chat_template passes: messages,
 * add_generation_prompt, the special tokens' text (bos_token, eos_token, ... from
 * tokenizer_config.json, else the tokenizer's BOS / EOS), and any extra variables
 * (enable_thinking, tools, ...). Encode the result with add_bos=0 and parse_special=1: the
 * text carries its own BOS where the template writes one.
 *
 * Ownership: sp_chat_template_load returns an object the caller frees with sp_chat_template_free;
 * it borrows the tokenizer (which must outlive it) and copies everything else. Rendered text
 * is malloc'd and the caller frees it. JSON arguments are borrowed. */
#ifndef SPECULA_CHAT_H
#define SPECULA_CHAT_H

#include <jansson.h>

#include "specula.h"
#include "tokenizer/tokenizer.h"

typedef struct chat_template chat_template;

/* model_dir and tok may be NULL (not both); choice NULL = the model's own. */
chat_template *sp_chat_template_load(const char *model_dir, const tok_tokenizer *tok, const char *choice, sp_err *err);
void sp_chat_template_free(chat_template *ct);
/* where the template came from, e.g. "DIR/tokenizer_config.json chat_template" or "built-in qwen3" */
const char *sp_chat_template_source(const chat_template *ct);
/* 1 when it is Jinja text, 0 for a hand-written renderer */
int sp_chat_template_is_jinja(const chat_template *ct);
/* the Jinja text, or NULL for a hand-written renderer */
const char *sp_chat_template_text(const chat_template *ct);
/* the hand-written renderer's name ("qwen3", "llama3", ...), or "" for Jinja text */
const char *sp_chat_template_builtin(const chat_template *ct);

/* messages: a JSON array of {"role": ..., "content": ..., ...}. vars: a JSON object of extra
 * variables, or NULL; they override the defaults above. */
int sp_chat_render(const chat_template *ct, json_t *messages, int add_generation_prompt, json_t *vars, char **out,
                sp_err *err);

/* The same for plain role / content pairs. */
int sp_chat_render_msgs(const chat_template *ct, const tok_msg *msgs, int n, int add_generation_prompt, json_t *vars,
                     char **out, sp_err *err);

/* The prompt tokens of a conversation — the one way a chat becomes tokens (CLI, server, prompt
 * files, the API): rendered with ct and encoded as the template text asks (no BOS added, special
 * tokens parsed). ct NULL (a model with no template at all): the message contents joined by blank
 * lines, encoded as plain text with BOS. *ids malloc'd. Returns 0, or -1 with err. */
int sp_chat_tokens(const chat_template *ct, tok_tokenizer *t, json_t *messages, int add_generation_prompt, json_t *vars,
                   int32_t **ids, int *n, sp_err *err);
int sp_chat_tokens_msgs(const chat_template *ct, tok_tokenizer *t, const tok_msg *msgs, int n,
                        int add_generation_prompt, json_t *vars, int32_t **ids, int *n_ids, sp_err *err);

#endif
