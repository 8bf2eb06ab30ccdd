/* json_schema.h — JSON Schema → GBNF for the subset structured output uses (docs/GRAMMAR.md §3):
 * type (one or a list), object properties / required / additionalProperties false, array items /
 * minItems / maxItems, string minLength / maxLength, number, integer, boolean, null, enum, const,
 * anyOf / oneOf, nested to SP_SCHEMA_MAX_DEPTH. Annotations (title, description, $schema, $id,
 * $comment, default, examples) are ignored; any other keyword is an error naming it. */
#ifndef SPECULA_JSON_SCHEMA_H
#define SPECULA_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "specula.h"

#define SP_SCHEMA_MAX_DEPTH 32

/* The grammar (root rule "root") of the JSON texts schema allows; schema NULL: any JSON object (the
 * OpenAI json_object mode). The text is malloc'd (caller frees); NULL with err. */
char *sp_json_schema_gbnf(const json_t *schema, sp_err *err);
/* The same from schema text (len bytes). */
char *sp_json_schema_gbnf_text(const char *schema, size_t len, sp_err *err);
/* 1 when JSON value v satisfies schema (the same subset), 0 when not (a test's checker). */
int sp_json_schema_validate(const json_t *schema, const json_t *v);

#endif
