/* tools.h — OpenAI tool calls on the chat route (docs/TOOLS.md): the request's `tools` and
 * `tool_choice` checked, the conversation rendered with them through the model's chat template,
 * the grammar that forces a call (tool_choice "required" or a named function), and the model's
 * tool-call text parsed back into OpenAI `tool_calls`.
 *
 * Two text formats are parsed, picked from the chat template:
 *   SRV_TOOLS_HERMES  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one block per call
 *                     (Qwen2.5 / Qwen3, Hermes; also the format for templates that name no format)
 *   SRV_TOOLS_LLAMA3  {"name": N, "parameters": {...}}, optionally after <|python_tag|>, several
 *                     joined by ';' (Llama 3.1+)
 * A template that does not read `tools` gets the tool list as a system message written here; one
 * that does not read `tool_calls` gets an assistant turn's calls as its text in the format. */
#ifndef SPECULA_SERVER_TOOLS_H
#define SPECULA_SERVER_TOOLS_H

#include <jansson.h>

#include "server/request.h"

typedef enum { SRV_TOOLS_HERMES = 0, SRV_TOOLS_LLAMA3 } srv_tool_fmt;

struct chat_template;

/* request side: `tools` (an array of {"type": "function", "function": {"name", "description",
 * "parameters"}}) and `tool_choice` ("auto", "none", "required", {"type": "function", "function":
 * {"name"}}) into r->tools / r->tool_choice / r->tool_name; a 400 naming the field when malformed. */
int sp_srv_tools_parse(json_t *o, srv_request *r, srv_error *e);
/* one message's tool fields: an assistant's `tool_calls`, a tool message's `tool_call_id` / `name`,
 * checked and copied into the JSON message out (arguments given as JSON text become the object). */
int sp_srv_tools_msg(json_t *msg, size_t i, const char *role, json_t *out, srv_error *e);

/* the format a template's calls are written in (ct NULL: Hermes) */
srv_tool_fmt sp_srv_tool_format(const struct chat_template *ct);
/* The messages and template variables of r for template ct (both new references; *vars may stay
 * NULL when base is NULL and nothing is added): tools in `tools` or in a system message, calls in
 * assistant text where the template cannot render them. base: the variables so far (consumed). */
int sp_srv_tools_render_input(const struct chat_template *ct, const srv_request *r, json_t *base, json_t **messages,
                              json_t **vars, srv_error *e);
/* With tool_choice required / a named function: r->grammar = the grammar of one call in format fmt
 * (with r->parallel_tools, one or more) whose arguments follow the function's parameters schema. Nothing to do otherwise; a 400 when a
 * schema is outside the supported subset or response_format is given too. */
int sp_srv_tools_grammar(srv_request *r, srv_tool_fmt fmt, srv_error *e);

/* The calls in text[0 .. n): an array of OpenAI tool_calls (ids "call_<job>_<k>"), or NULL when the
 * text holds no complete call of a declared function; *content_end = where the text before the
 * first call ends. */
json_t *sp_srv_tool_calls_parse(srv_tool_fmt fmt, const json_t *tools, const char *text, size_t n, long job,
                                size_t *content_end);
/* How much of text[0 .. n) may be streamed as content: up to the first call's opening (or a part of
 * the opening at the end), less the white space before it (Hermes: white space at the end is held,
 * as a call may follow); Llama 3: nothing while the answer may be a call. */
size_t sp_srv_tool_safe_prefix(srv_tool_fmt fmt, const char *text, size_t n);

#endif
