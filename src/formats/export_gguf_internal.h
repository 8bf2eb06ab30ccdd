/* export_gguf_internal.h — pieces of the GGUF exporter shared between its two files. */
#ifndef SPECULA_EXPORT_GGUF_INTERNAL_H
#define SPECULA_EXPORT_GGUF_INTERNAL_H

#include "export_gguf.h"

/* Write the tokenizer.* keys (FORMATS §12.A.6) for a model directory: from o->tokenizer_gguf
 * when given, else from DIR/tokenizer.json (+ tokenizer_config.json, chat_template.jinja);
 * with neither, an error unless o->no_tokenizer. The token list always has exactly
 * cfg->vocab_size entries (holes and the tail padded with [PAD{i}], type UNUSED). */
int export_tokenizer_keys(gguf_writer *w, const sp_config *cfg, const char *dir, const export_gguf_opts *o,
                          sp_err *err);

#endif
