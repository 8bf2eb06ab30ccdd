/* hfjson.h — one reader for the JSON files Hugging Face tools write: config.json,
 * tokenizer.json, tokenizer_config.json, generation_config.json, special_tokens_map.json.
 *
 * These are valid JSON that jansson refuses as it stands (docs/hf-json.md):
 *   - integers beyond 64 bits ("model_max_length": 1000000000000000019884624838656 in most
 *     tokenizer configs) are read as reals (json_is_real; the value rounded to a double);
 *   - a \u escape of a lone UTF-16 surrogate (Python writes one for a string holding it) is
 *     read as U+FFFD, the replacement Python's own UTF-8 encoder would write;
 *   - \u0000 inside strings is kept (JSON_ALLOW_NUL); a leading UTF-8 byte-order mark is skipped.
 * Everything else is jansson's strict reader; `flags` are jansson decode flags
 * (e.g. JSON_REJECT_DUPLICATES) passed through.
 *
 * Ownership: the returned value is the caller's (json_decref). On failure NULL with a message
 * "WHAT: invalid JSON at line L column C: reason" in err. */
#ifndef SPECULA_HFJSON_H
#define SPECULA_HFJSON_H

#include <jansson.h>
#include <stddef.h>

#include "../core/core.h"

json_t *sp_hf_json_loadb(const char *text, size_t len, size_t flags, const char *what, sp_err *err);
/* the whole file at path; messages name path */
json_t *sp_hf_json_load_file(const char *path, size_t flags, sp_err *err);

#endif
