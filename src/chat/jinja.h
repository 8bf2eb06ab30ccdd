/* jinja.h — a small Jinja engine, enough for the chat templates models ship (the subset, and
 * how it matches Hugging Face's rendering, is in docs/CHAT_TEMPLATES.md).
 *
 * Rendering is as Hugging Face's apply_chat_template does it: trim_blocks and lstrip_blocks on,
 * raise_exception(msg) and strftime_now(fmt) available, tojson as json.dumps with
 * ensure_ascii off. Undefined names are falsy and render "". A construct outside the subset
 * is an error naming it and its line ("NAME:LINE: ...").
 *
 * Safe on any input: nesting, steps, memory and output size are bounded, so a hostile
 * template ends with an error rather than a crash or a hang.
 *
 * Ownership: the caller owns the template text and the context; on success *out is
 * malloc'd, NUL-terminated, and the caller frees it. Nothing is kept between calls. */
#ifndef SPECULA_CHAT_JINJA_H
#define SPECULA_CHAT_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "specula.h"

typedef struct {
    size_t max_output; /* most bytes of rendered text (0: 16 MiB) */
    size_t max_memory; /* most bytes of values the template may build (0: 256 MiB) */
    long long max_steps; /* most evaluation steps (0: 20 million) */
} jinja_limits;

/* Render tmpl[0, len) with the variables of ctx (a JSON object, or NULL for none). name names
 * the template in messages. lim may be NULL (defaults). Returns 0, or -1 with err. */
int sp_jinja_render(const char *tmpl, size_t len, const char *name, json_t *ctx, const jinja_limits *lim,
                 char **out, size_t *out_len, sp_err *err);

/* The same from raw bytes: template text and a JSON object of variables (ctx_len 0: none).
 * Meant for fuzzing: any bytes give a result or an error. */
int sp_jinja_render_bytes(const char *tmpl, size_t tmpl_len, const char *ctx_json, size_t ctx_len,
                       char **out, size_t *out_len, sp_err *err);

#endif
