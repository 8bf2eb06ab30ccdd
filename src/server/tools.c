/* tools.c — tool calls on the chat route (see tools.h, docs/TOOLS.md). */
#include "server/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "sample/json_schema.h"

#define BAD(e, param, ...) sp_srv_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)
#define OOM(e) sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory")
#define MAX_TOOLS 128

static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>", PYTHON_TAG[] = "<|python_tag|>";

static const char *tool_name_of(json_t *tool) {
    return json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
}

static json_t *find_tool(const json_t *tools, const char *name) {
    for (size_t i = 0; name && i < json_array_size(tools); i++) {
        const char *n = tool_name_of(json_array_get(tools, i));
        if (n && !strcmp(n, name)) return json_array_get(tools, i);
    }
    return NULL;
}

/* a function name as OpenAI allows it: 1..64 of [A-Za-z0-9_-] */
static int name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", s[i])) return 0;
    return 1;
}

static int check_tool(json_t *t, size_t i, json_t *tools, srv_error *e) {
    json_t *ty = json_object_get(t, "type"), *f = json_object_get(t, "function");
    if (!json_is_object(t) || !json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_object(f))
        return BAD(e, "tools", "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
    json_t *name = json_object_get(f, "name"), *d = json_object_get(f, "description"), *p = json_object_get(f, "parameters");
    if (!json_is_string(name) || !name_ok(json_string_value(name)))
        return BAD(e, "tools", "'tools[%zu].function.name' must be 1 to 64 letters, digits, '_' or '-'", i);
    if (d && !json_is_null(d) && !json_is_string(d))
        return BAD(e, "tools", "'tools[%zu].function.description' must be a string", i);
    if (p && !json_is_null(p) && !json_is_object(p))
        return BAD(e, "tools", "'tools[%zu].function.parameters' must be a JSON schema object", i);
    for (size_t k = 0; k < i; k++)
        if (!strcmp(tool_name_of(json_array_get(tools, k)), json_string_value(name)))
            return BAD(e, "tools", "'tools[%zu]': the function '%s' is declared twice", i, json_string_value(name));
    return 0;
}

static int parse_choice(json_t *c, srv_request *r, srv_error *e) {
    if (!c || json_is_null(c)) return 0;
    const char *s = json_string_value(c);
    if (s && !strcmp(s, "auto")) r->tool_choice = SRV_TOOL_AUTO;
    else if (s && !strcmp(s, "none")) r->tool_choice = SRV_TOOL_NONE;
    else if (s && !strcmp(s, "required")) r->tool_choice = SRV_TOOL_REQUIRED;
    else if (json_is_object(c)) {
        json_t *ty = json_object_get(c, "type"), *n = json_object_get(json_object_get(c, "function"), "name");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_string(n))
            return BAD(e, "tool_choice", "'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!find_tool(r->tools, json_string_value(n)))
            return BAD(e, "tool_choice", "'tool_choice' names the function '%s', which 'tools' does not declare",
                       json_string_value(n));
        r->tool_choice = SRV_TOOL_NAMED;
        if (!(r->tool_name = strdup(json_string_value(n)))) return OOM(e);
    } else {
        return BAD(e, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                                     "\"function\": {\"name\": ...}}");
    }
    if (r->tool_choice == SRV_TOOL_REQUIRED && !r->tools)
        return BAD(e, "tool_choice", "'tool_choice' is \"required\" but the request declares no 'tools'");
    return 0;
}

int sp_srv_tools_parse(json_t *o, srv_request *r, srv_error *e) {
    json_t *t = json_object_get(o, "tools"), *par = json_object_get(o, "parallel_tool_calls");
    if (par && !json_is_null(par) && !json_is_boolean(par))
        return BAD(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    r->parallel_tools = !par || json_is_null(par) || json_is_true(par);
    if (t && !json_is_null(t)) {
        if (!json_is_array(t)) return BAD(e, "tools", "'tools' must be an array of {\"type\": \"function\", ...}");
        if (json_array_size(t) > MAX_TOOLS)
            return BAD(e, "tools", "'tools' has %zu functions, at most %d are allowed", json_array_size(t), MAX_TOOLS);
        for (size_t i = 0; i < json_array_size(t); i++)
            if (check_tool(json_array_get(t, i), i, t, e)) return -1;
        if (json_array_size(t)) r->tools = json_deep_copy(t);
        if (json_array_size(t) && !r->tools) return OOM(e);
    }
    return parse_choice(json_object_get(o, "tool_choice"), r, e);
}

/* one assistant tool call, checked, as the template gets it (arguments as a JSON value) */
static json_t *call_in(json_t *c, size_t i, size_t k, srv_error *e) {
    json_t *f = json_object_get(c, "function"), *id = json_object_get(c, "id"), *ty = json_object_get(c, "type");
    json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
    if (!json_is_object(c) || !json_is_object(f) || !json_is_string(name) || (id && !json_is_string(id)) ||
        (ty && (!json_is_string(ty) || strcmp(json_string_value(ty), "function")))) {
        BAD(e, "messages", "'messages[%zu].tool_calls[%zu]' must be {\"id\", \"type\": \"function\", \"function\": "
                           "{\"name\", \"arguments\"}}", i, k);
        return NULL;
    }
    json_t *a = NULL;
    if (json_is_string(args)) {
        json_error_t je;
        a = json_loads(json_string_value(args), JSON_DECODE_ANY, &je);
        if (!a) {
            BAD(e, "messages", "'messages[%zu].tool_calls[%zu].function.arguments' is not JSON: %s", i, k, je.text);
            return NULL;
        }
    } else if (json_is_object(args)) {
        a = json_incref(args);
    } else if (!args || json_is_null(args)) {
        a = json_object();
    } else {
        BAD(e, "messages", "'messages[%zu].tool_calls[%zu].function.arguments' must be a JSON string", i, k);
        return NULL;
    }
    json_t *out = json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function", "name", name, "arguments", a);
    if (out && id) json_object_set(out, "id", id);
    if (!out) OOM(e);
    return out;
}

int sp_srv_tools_msg(json_t *msg, size_t i, const char *role, json_t *out, srv_error *e) {
    json_t *tc = json_object_get(msg, "tool_calls"), *tid = json_object_get(msg, "tool_call_id");
    json_t *name = json_object_get(msg, "name");
    if (name && !json_is_null(name)) {
        if (!json_is_string(name)) return BAD(e, "messages", "'messages[%zu].name' must be a string", i);
        json_object_set(out, "name", name);
    }
    if (tid && !json_is_null(tid)) {
        if (strcmp(role, "tool") || !json_is_string(tid))
            return BAD(e, "messages", "'messages[%zu].tool_call_id' must be a string, on a tool message", i);
        json_object_set(out, "tool_call_id", tid);
    }
    if (!tc || json_is_null(tc)) return 0;
    if (strcmp(role, "assistant") || !json_is_array(tc))
        return BAD(e, "messages", "'messages[%zu].tool_calls' must be an array, on an assistant message", i);
    json_t *calls = json_array();
    if (!calls || json_object_set_new(out, "tool_calls", calls)) return OOM(e);
    for (size_t k = 0; k < json_array_size(tc); k++) {
        json_t *c = call_in(json_array_get(tc, k), i, k, e);
        if (!c || json_array_append_new(calls, c)) return -1;
    }
    return 0;
}

srv_tool_fmt sp_srv_tool_format(const struct chat_template *ct) {
    const char *t = ct ? sp_chat_template_text(ct) : NULL;
    if (t && strstr(t, HERMES_OPEN)) return SRV_TOOLS_HERMES;
    if (t && (strstr(t, PYTHON_TAG) || (strstr(t, "<|start_header_id|>") && strstr(t, "parameters"))))
        return SRV_TOOLS_LLAMA3;
    if (ct && !t && !strcmp(sp_chat_template_builtin(ct), "llama3")) return SRV_TOOLS_LLAMA3;
    return SRV_TOOLS_HERMES;
}

/* one call as the model writes it: {"name":N,"arguments":A} (Llama 3: "parameters"), compact */
static char *call_text(srv_tool_fmt fmt, const char *name, json_t *args) {
    json_t *o = json_pack("{s:s, s:O}", "name", name, fmt == SRV_TOOLS_LLAMA3 ? "parameters" : "arguments", args);
    char *t = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return t;
}

static int buf_cat(char **s, const char *a, const char *b, const char *c) {
    size_t n = strlen(*s), na = strlen(a), nb = strlen(b), nc = strlen(c);
    char *p = realloc(*s, n + na + nb + nc + 1);
    if (!p) return -1;
    memcpy(p + n, a, na), memcpy(p + n + na, b, nb), memcpy(p + n + na + nb, c, nc);
    p[n + na + nb + nc] = 0;
    *s = p;
    return 0;
}

/* an assistant turn's calls appended to its text, for templates that do not read tool_calls */
static int calls_into_text(srv_tool_fmt fmt, json_t *m) {
    json_t *calls = json_object_get(m, "tool_calls");
    char *s = strdup(json_string_value(json_object_get(m, "content")));
    int rc = s ? 0 : -1;
    for (size_t k = 0; !rc && k < json_array_size(calls); k++) {
        json_t *f = json_object_get(json_array_get(calls, k), "function");
        char *t = call_text(fmt, json_string_value(json_object_get(f, "name")), json_object_get(f, "arguments"));
        const char *sep = *s ? "\n" : "";
        rc = !t || (fmt == SRV_TOOLS_HERMES ? buf_cat(&s, sep, HERMES_OPEN, "\n") || buf_cat(&s, t, "\n", HERMES_CLOSE)
                                            : buf_cat(&s, sep, t, ""));
        free(t);
    }
    if (!rc) rc = json_object_set_new(m, "content", json_string(s)) || json_object_del(m, "tool_calls");
    free(s);
    return rc;
}

/* the system text that declares the tools, for templates that do not read `tools` */
static char *tools_text(srv_tool_fmt fmt, const json_t *tools) {
    char *s = strdup("# Tools\n\nYou may call the functions below. Each is described by a JSON object:\n");
    for (size_t i = 0; s && i < json_array_size(tools); i++) {
        char *t = json_dumps(json_object_get(json_array_get(tools, i), "function"), JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!t || buf_cat(&s, t, "\n", "")) free(s), s = NULL;
        free(t);
    }
    const char *how = fmt == SRV_TOOLS_HERMES
                          ? "\nTo call one, answer with <tool_call>\n{\"name\":NAME,\"arguments\":ARGUMENTS}\n</tool_call>"
                          : "\nTo call one, answer with only {\"name\":NAME,\"parameters\":ARGUMENTS}";
    if (s && buf_cat(&s, how, "", "")) free(s), s = NULL;
    return s;
}

/* the tools as the first system message's text (prepended to it, or a new first message) */
static int tools_into_system(srv_tool_fmt fmt, const json_t *tools, json_t *msgs) {
    char *s = tools_text(fmt, tools);
    if (!s) return -1;
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    int rc;
    if (role && !strcmp(role, "system")) {
        rc = buf_cat(&s, "\n\n", json_string_value(json_object_get(first, "content")), "") ||
             json_object_set_new(first, "content", json_string(s));
    } else {
        rc = json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", s));
    }
    free(s);
    return rc;
}

/* tool messages for hand-written renderers, which know only plain roles */
static int tool_msg_plain(srv_tool_fmt fmt, json_t *m) {
    const char *c = json_string_value(json_object_get(m, "content"));
    char *s = strdup(fmt == SRV_TOOLS_HERMES ? "<tool_response>\n" : "");
    int rc = !s || buf_cat(&s, c ? c : "", fmt == SRV_TOOLS_HERMES ? "\n</tool_response>" : "", "") ||
             json_object_set_new(m, "content", json_string(s)) ||
             json_object_set_new(m, "role", json_string(fmt == SRV_TOOLS_LLAMA3 ? "ipython" : "user"));
    free(s);
    return rc;
}

int sp_srv_tools_render_input(const struct chat_template *ct, const srv_request *r, json_t *base, json_t **messages,
                              json_t **vars, srv_error *e) {
    *vars = base;
    *messages = json_deep_copy(r->messages);
    if (!*messages) return OOM(e);
    srv_tool_fmt fmt = sp_srv_tool_format(ct);
    const char *text = ct ? sp_chat_template_text(ct) : NULL;
    int reads_tools = text && strstr(text, "tools"), reads_calls = text && strstr(text, "tool_calls");
    for (size_t i = 0; i < json_array_size(*messages); i++) {
        json_t *m = json_array_get(*messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (json_object_get(m, "tool_calls") && !reads_calls && calls_into_text(fmt, m)) return OOM(e);
        if (!text && !strcmp(role, "tool") && tool_msg_plain(fmt, m)) return OOM(e);
    }
    if (!r->tools || r->tool_choice == SRV_TOOL_NONE) return 0;
    if (!reads_tools) return tools_into_system(fmt, r->tools, *messages) ? OOM(e) : 0;
    if (!*vars && !(*vars = json_object())) return OOM(e);
    return json_object_set(*vars, "tools", r->tools) ? OOM(e) : 0;
}

/* the schema of one call's JSON object: {"name": the function, "arguments" / "parameters": its schema} */
static json_t *call_schema(json_t *tool, srv_tool_fmt fmt) {
    json_t *f = json_object_get(tool, "function"), *p = json_object_get(f, "parameters");
    const char *key = fmt == SRV_TOOLS_LLAMA3 ? "parameters" : "arguments";
    json_t *args = p && !json_is_null(p) ? json_incref(p) : json_pack("{s:s}", "type", "object");
    return json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s, s], s:b}", "type", "object", "properties", "name", "const",
                     json_object_get(f, "name"), key, args, "required", "name", key, "additionalProperties", 0);
}

int sp_srv_tools_grammar(srv_request *r, srv_tool_fmt fmt, srv_error *e) {
    if (!r->tools || (r->tool_choice != SRV_TOOL_REQUIRED && r->tool_choice != SRV_TOOL_NAMED)) return 0;
    if (r->grammar)
        return BAD(e, "tool_choice", "'tool_choice' forcing a call cannot be combined with response_format, "
                                     "json_schema or grammar");
    json_t *alts = json_array();
    for (size_t i = 0; alts && i < json_array_size(r->tools); i++) {
        json_t *t = json_array_get(r->tools, i);
        if (r->tool_choice == SRV_TOOL_NAMED && strcmp(tool_name_of(t), r->tool_name)) continue;
        json_array_append_new(alts, call_schema(t, fmt));
    }
    json_t *schema = json_array_size(alts) == 1 ? json_incref(json_array_get(alts, 0)) : json_pack("{s:O}", "anyOf", alts);
    json_decref(alts);
    if (!schema) return OOM(e);
    sp_err err = {{0}};
    char *g = sp_json_schema_gbnf(schema, &err);
    json_decref(schema);
    if (!g) return BAD(e, "tools", "'tools': a function's parameters: %s", err.msg);
    /* one call, or with parallel_tool_calls one or more: Hermes blocks on their own lines, Llama 3
     * objects joined by "; " */
    const char *wrap = fmt == SRV_TOOLS_HERMES ? "tool-call ::= \"<tool_call>\\n\" root \"\\n</tool_call>\""
                                               : "tool-call ::= root";
    const char *more = !r->parallel_tools ? "\n"
                       : fmt == SRV_TOOLS_HERMES ? " (\"\\n<tool_call>\\n\" root \"\\n</tool_call>\")*\n"
                                                 : " (\"; \" root)*\n";
    if (buf_cat(&g, wrap, more, "")) return free(g), OOM(e);
    r->grammar = sp_grammar_parse(g, strlen(g), "tool-call", &err);
    free(g);
    return r->grammar ? 0 : BAD(e, "tools", "'tools': %s", err.msg);
}

/* ---- the model's text → tool_calls ---------------------------------------------------------- */
static const char *find(const char *s, size_t n, const char *what) {
    size_t k = strlen(what);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, what, k)) return s + i;
    return NULL;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* one OpenAI tool call from the JSON object at the start of body[0 .. n) (*used: the bytes it takes,
 * when used is not NULL), or NULL when it is not a declared call */
static json_t *call_out(const json_t *tools, const char *body, size_t n, long job, size_t k, size_t *used) {
    json_error_t je;
    json_t *o = json_loadb(body, n, JSON_DISABLE_EOF_CHECK, &je); /* text may follow the object */
    if (used) *used = o ? (size_t)je.position : n;
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *a = json_object_get(o, "arguments");
    if (!a) a = json_object_get(o, "parameters");
    json_t *out = NULL;
    if (name && find_tool(tools, name) && (!a || json_is_object(a) || json_is_string(a))) {
        char *args = !a ? strdup("{}") : json_is_string(a) ? strdup(json_string_value(a)) : json_dumps(a, JSON_COMPACT);
        char id[64];
        snprintf(id, sizeof id, "call_%ld_%zu", job, k);
        if (args)
            out = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", (int)k, "id", id, "type", "function", "function",
                            "name", name, "arguments", args);
        free(args);
    }
    json_decref(o);
    return out;
}

static json_t *parse_hermes(const json_t *tools, const char *text, size_t n, long job, size_t *content_end) {
    const char *p = find(text, n, HERMES_OPEN), *end = text + n;
    if (!p) return NULL;
    size_t ce = (size_t)(p - text);
    while (ce > 0 && is_ws(text[ce - 1])) ce--;
    json_t *calls = json_array();
    while (calls && p) {
        const char *b = p + strlen(HERMES_OPEN), *c = find(b, (size_t)(end - b), HERMES_CLOSE);
        json_t *call = call_out(tools, b, (size_t)((c ? c : end) - b), job, json_array_size(calls), NULL);
        if (!call) break;
        json_array_append_new(calls, call);
        p = c ? find(c, (size_t)(end - c), HERMES_OPEN) : NULL;
    }
    if (!json_array_size(calls) || p) { /* a block that is not a declared call: the text is content */
        json_decref(calls);
        return NULL;
    }
    *content_end = ce;
    return calls;
}

static size_t skip_ws(const char *s, size_t at, size_t n) {
    while (at < n && is_ws(s[at])) at++;
    return at;
}

/* Llama 3: the whole answer is calls, after white space and an optional <|python_tag|>: one JSON
 * object, or several joined by ';' (white space around it allowed, a trailing ';' too) */
static json_t *parse_llama3(const json_t *tools, const char *text, size_t n, long job, size_t *content_end) {
    size_t k = strlen(PYTHON_TAG), at = skip_ws(text, 0, n);
    if (n - at >= k && !memcmp(text + at, PYTHON_TAG, k)) at = skip_ws(text, at + k, n);
    if (at >= n || text[at] != '{') return NULL;
    json_t *calls = json_array();
    while (calls && at < n && text[at] == '{') {
        size_t used;
        json_t *call = call_out(tools, text + at, n - at, job, json_array_size(calls), &used);
        if (!call || json_array_append_new(calls, call)) break;
        at = skip_ws(text, at + used, n);
        if (at < n && text[at] == ';') at = skip_ws(text, at + 1, n);
        else break; /* no separator: only the end may follow */
    }
    if (!json_array_size(calls) || at < n) { /* text that is not a declared call: all of it is content */
        json_decref(calls);
        return NULL;
    }
    *content_end = 0;
    return calls;
}

json_t *sp_srv_tool_calls_parse(srv_tool_fmt fmt, const json_t *tools, const char *text, size_t n, long job,
                                size_t *content_end) {
    *content_end = n;
    if (!tools || !text) return NULL;
    if (fmt == SRV_TOOLS_HERMES) return parse_hermes(tools, text, n, job, content_end);
    return parse_llama3(tools, text, n, job, content_end);
}

size_t sp_srv_tool_safe_prefix(srv_tool_fmt fmt, const char *text, size_t n) {
    if (fmt == SRV_TOOLS_LLAMA3) { /* a call is the whole answer: hold an answer that may start one */
        size_t at = 0, k = strlen(PYTHON_TAG);
        while (at < n && is_ws(text[at])) at++;
        size_t m = n - at < k ? n - at : k;
        return at == n || text[at] == '{' || !memcmp(text + at, PYTHON_TAG, m) ? 0 : n;
    }
    const char *p = find(text, n, HERMES_OPEN);
    size_t at = p ? (size_t)(p - text) : n;
    for (size_t k = strlen(HERMES_OPEN) - 1; !p && k > 0; k--) /* the opening's first k bytes at the end */
        if (n >= k && !memcmp(text + n - k, HERMES_OPEN, k)) {
            at = n - k;
            break;
        }
    while (at > 0 && is_ws(text[at - 1])) at--; /* white space before a call is not content */
    return at;
}
