/* request.c — parse and check request bodies (see request.h). jansson parses; every field is
 * looked up in one table of what the route accepts, so an unknown field is found by one loop. */
#include "server/request.h"

#include "sample/json_schema.h"
#include "server/tools.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sp_srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                  ...) {
    if (!e) return -1;
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD(e, param, ...) sp_srv_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* Fields each route accepts. Beyond OpenAI's: top_k, min_p, ignore_eos, repeat_penalty, repeat_last_n /
 * penalty_last_n (llama-server's), return_tokens
 * (the emitted ids in the response), speculative (false: this request decodes without the
 * drafter) and cache_prompt (false: no reuse of a slot's cached prefix); tokenize / detokenize follow llama-server. */
static const char *CHAT_FIELDS[] = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature",
                                    "top_p", "top_k", "min_p", "seed", "stop", "n", "stream", "stream_options",
                                    "logprobs", "top_logprobs", "response_format", "frequency_penalty",
                                    "presence_penalty", "logit_bias", "user", "tools", "tool_choice",
                                    "parallel_tool_calls", "store", "metadata", "service_tier", "ignore_eos",
                                    "return_tokens", "speculative", "repeat_penalty", "repeat_last_n",
                                    "penalty_last_n", "cache_prompt", "json_schema", "grammar", NULL};
static const char *COMPLETION_FIELDS[] = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
                                          "seed", "stop", "n", "stream", "stream_options", "logprobs", "echo",
                                          "best_of", "suffix", "frequency_penalty", "presence_penalty",
                                          "logit_bias", "user", "ignore_eos", "return_tokens",
                                          "speculative", "repeat_penalty", "repeat_last_n", "penalty_last_n",
                                          "cache_prompt", "json_schema", "grammar", NULL};
static const char *NATIVE_FIELDS[] = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
                                      "stop", "stream", "frequency_penalty", "presence_penalty", "logit_bias",
                                      "ignore_eos", "return_tokens", "speculative", "repeat_penalty",
                                      "repeat_last_n", "penalty_last_n", "n_probs", "cache_prompt", "json_schema", "grammar", NULL};
/* llama-server's fields on every generation route (chat, completions, /completion): n_predict
 * (= max_tokens; -1: until the end or the context), chat_template_kwargs (chat); the sampling
 * extensions it has and specula has not, accepted at their neutral value only (NEUTRAL_FIELDS);
 * and fields that change nothing here, accepted and ignored (README, "llama-server fields"). */
static const char *LLAMA_FIELDS[] = {"n_predict", "chat_template_kwargs", "samplers", "id_slot", "n_keep",
                                     "timings_per_token", "return_progress", "reasoning_format", "t_max_predict_ms",
                                     "t_max_prompt_ms", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
                                     "dry_sequence_breakers", "xtc_threshold", "mirostat_tau", "mirostat_eta",
                                     "dynatemp_exponent", "post_sampling_probs", "n_indent", NULL};
static const struct {
    const char *name;
    double neutral;
} NEUTRAL_FIELDS[] = {{"typical_p", 1},      {"mirostat", 0},       {"dry_multiplier", 0},
                      {"xtc_probability", 0}, {"dynatemp_range", 0}, {"top_n_sigma", -1}};
static const char *TOKENIZE_FIELDS[] = {"content", "add_special", "with_pieces", "model", NULL};
static const char *DETOKENIZE_FIELDS[] = {"tokens", "model", NULL};

static int in_list(const char *k, const char **list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return 1;
    return 0;
}

static int is_neutral_field(const char *k) {
    for (size_t i = 0; i < sizeof NEUTRAL_FIELDS / sizeof NEUTRAL_FIELDS[0]; i++)
        if (!strcmp(k, NEUTRAL_FIELDS[i].name)) return 1;
    return 0;
}

/* 1 when route accepts field k */
static int route_accepts(srv_route route, const char *k) {
    static const char *APPLY_FIELDS[] = {"messages", "model", "chat_template_kwargs", NULL};
    switch (route) {
    case SRV_ROUTE_TOKENIZE: return in_list(k, TOKENIZE_FIELDS);
    case SRV_ROUTE_DETOKENIZE: return in_list(k, DETOKENIZE_FIELDS);
    case SRV_ROUTE_APPLY_TEMPLATE: return in_list(k, APPLY_FIELDS) || in_list(k, CHAT_FIELDS) || in_list(k, LLAMA_FIELDS);
    default: break;
    }
    const char **own = route == SRV_ROUTE_CHAT ? CHAT_FIELDS : route == SRV_ROUTE_COMPLETION ? COMPLETION_FIELDS : NATIVE_FIELDS;
    if (route != SRV_ROUTE_CHAT && !strcmp(k, "chat_template_kwargs")) return 0;
    return in_list(k, own) || in_list(k, LLAMA_FIELDS) || is_neutral_field(k);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* optional number in [lo, hi] (null = absent) */
static int get_num(json_t *o, const char *k, double lo, double hi, double *v, srv_error *e) {
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) return 0;
    if (!json_is_number(x)) return BAD(e, k, "'%s' must be a number", k);
    double d = json_number_value(x);
    if (!(d >= lo && d <= hi)) return BAD(e, k, "'%s' is %g, expected a value in [%g, %g]", k, d, lo, hi);
    *v = d;
    return 0;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *v, srv_error *e) {
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) return 0;
    if (!json_is_integer(x)) return BAD(e, k, "'%s' must be an integer", k);
    long long d = json_integer_value(x);
    if (d < lo || d > hi) return BAD(e, k, "'%s' is %lld, expected an integer in [%lld, %lld]", k, d, lo, hi);
    *v = d;
    return 0;
}

static int get_bool(json_t *o, const char *k, int *v, srv_error *e) {
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) return 0;
    if (!json_is_boolean(x)) return BAD(e, k, "'%s' must be a boolean", k);
    *v = json_is_true(x);
    return 0;
}

static int parse_stop(json_t *o, srv_request *r, srv_error *e) {
    json_t *x = json_object_get(o, "stop");
    if (!x || json_is_null(x)) return 0;
    json_t *one[1] = {x};
    size_t n = json_is_string(x) ? 1 : json_is_array(x) ? json_array_size(x) : 0;
    if (!json_is_string(x) && !json_is_array(x)) return BAD(e, "stop", "'stop' must be a string or an array of strings");
    if (n > SRV_MAX_STOP) return BAD(e, "stop", "'stop' has %zu strings, at most %d are allowed", n, SRV_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(x) ? one[0] : json_array_get(x, i);
        if (!json_is_string(s)) return BAD(e, "stop", "'stop[%zu]' must be a string", i);
        size_t len = json_string_length(s);
        if (len == 0 || len > SRV_MAX_STOP_LEN)
            return BAD(e, "stop", "'stop[%zu]' must be 1..%d bytes long", i, SRV_MAX_STOP_LEN);
        if (strlen(json_string_value(s)) != len) return BAD(e, "stop", "'stop[%zu]' contains a NUL byte", i);
        r->stop[r->n_stop] = dup_str(json_string_value(s));
        if (!r->stop[r->n_stop]) return sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* message content: a string, null, or an array of {"type": "text", "text": ...} parts */
static int parse_content(json_t *c, int i, char **out, srv_error *e) {
    if (!c || json_is_null(c)) {
        *out = dup_str("");
        return 0;
    }
    if (json_is_string(c)) {
        if (strlen(json_string_value(c)) != json_string_length(c))
            return BAD(e, "messages", "'messages[%d].content' contains a NUL byte", i);
        *out = dup_str(json_string_value(c));
        return 0;
    }
    if (!json_is_array(c)) return BAD(e, "messages", "'messages[%d].content' must be a string or an array of parts", i);
    size_t total = 1, n = json_array_size(c);
    for (size_t j = 0; j < n; j++) {
        json_t *p = json_array_get(c, j), *t = json_object_get(p, "type"), *tx = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(t) || strcmp(json_string_value(t), "text") || !json_is_string(tx))
            return BAD(e, "messages", "'messages[%d].content[%zu]' must be a {\"type\": \"text\", \"text\": ...} part", i, j);
        total += json_string_length(tx);
    }
    char *s = malloc(total);
    if (!s) return sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t at = 0;
    for (size_t j = 0; j < n; j++) {
        json_t *tx = json_object_get(json_array_get(c, j), "text");
        size_t l = strlen(json_string_value(tx));
        memcpy(s + at, json_string_value(tx), l);
        at += l;
    }
    s[at] = 0;
    *out = s;
    return 0;
}

/* the JSON message a template renders: role, content, and the tool fields (tools.h) */
static int message_json(json_t *msg, size_t i, const srv_msg *m, json_t *all, srv_error *e) {
    json_t *out = json_pack("{s:s, s:s}", "role", m->role, "content", m->content);
    if (!out || json_array_append_new(all, out))
        return BAD(e, "messages", "'messages[%zu].content' is not valid UTF-8 text", i);
    return sp_srv_tools_msg(msg, i, m->role, out, e);
}

static int parse_messages(json_t *o, srv_request *r, srv_error *e) {
    json_t *m = json_object_get(o, "messages");
    if (!m) return BAD(e, "messages", "'messages' is required");
    if (!json_is_array(m) || json_array_size(m) == 0) return BAD(e, "messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(m);
    if (n > 4096) return BAD(e, "messages", "'messages' has %zu entries, at most 4096 are allowed", n);
    r->msgs = calloc(n, sizeof *r->msgs);
    r->messages = json_array();
    if (!r->msgs || !r->messages) return sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i), *role = json_object_get(msg, "role");
        if (!json_is_object(msg)) return BAD(e, "messages", "'messages[%zu]' must be an object", i);
        const char *k;
        json_t *v;
        json_object_foreach(msg, k, v) {
            if (strcmp(k, "role") && strcmp(k, "content") && strcmp(k, "name") && strcmp(k, "tool_calls") &&
                strcmp(k, "tool_call_id"))
                return BAD(e, "messages", "'messages[%zu].%s' is not supported", i, k);
        }
        if (!json_is_string(role)) return BAD(e, "messages", "'messages[%zu].role' must be a string", i);
        const char *rs = json_string_value(role);
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return BAD(e, "messages", "'messages[%zu].role' is '%s', expected system, developer, user, assistant or tool",
                       i, json_string_value(role));
        r->msgs[i].role = dup_str(rs);
        r->n_msgs = (int)i + 1;
        if (!r->msgs[i].role) return sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        if (parse_content(json_object_get(msg, "content"), (int)i, &r->msgs[i].content, e)) return -1;
        if (!r->msgs[i].content) return sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        if (message_json(msg, i, &r->msgs[i], r->messages, e)) return -1;
    }
    return 0;
}

/* an array of token ids (each 0 .. 2^31-1; the vocabulary check is the server's) */
static int parse_ids(json_t *a, const char *k, srv_request *r, srv_error *e) {
    size_t n = json_array_size(a);
    r->prompt_ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!r->prompt_ids) return sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return BAD(e, k, "'%s[%zu]' must be a non-negative integer token id", k, i);
        r->prompt_ids[i] = (int32_t)json_integer_value(x);
    }
    r->n_prompt_ids = (int)n;
    return 0;
}

static int parse_prompt(json_t *o, srv_request *r, srv_error *e) {
    json_t *p = json_object_get(o, "prompt");
    if (!p) return BAD(e, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) {
        if (strlen(json_string_value(p)) != json_string_length(p)) return BAD(e, "prompt", "'prompt' contains a NUL byte");
        r->prompt_text = dup_str(json_string_value(p));
        return r->prompt_text ? 0 : sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return BAD(e, "prompt", "'prompt' must be a string or a non-empty array of token ids");
    if (!json_is_integer(json_array_get(p, 0)))
        return BAD(e, "prompt", "'prompt' must be one string or one array of token ids (batched prompts are not supported)");
    return parse_ids(p, "prompt", r, e);
}

/* repetition penalties (penalty.h): OpenAI's presence_penalty / frequency_penalty in [-2, 2],
 * llama-server's repeat_penalty (> 0, 1 = off) and its window repeat_last_n or penalty_last_n
 * (-1: the whole sequence, 0: penalties off; default 64) */
static int parse_penalties(json_t *o, srv_request *r, srv_error *e) {
    double rp = 1.0, pp = 0.0, fp = 0.0;
    long long n = 64;
    r->penalty = sp_penalty_params_default();
    if (get_num(o, "presence_penalty", -2, 2, &pp, e) || get_num(o, "frequency_penalty", -2, 2, &fp, e) ||
        get_num(o, "repeat_penalty", 0, 1e6, &rp, e))
        return -1;
    if (!(rp > 0)) return BAD(e, "repeat_penalty", "'repeat_penalty' must be > 0 (1 = off)");
    int two = json_object_get(o, "repeat_last_n") && json_object_get(o, "penalty_last_n");
    if (two) return BAD(e, "penalty_last_n", "give one of 'repeat_last_n' and 'penalty_last_n'");
    if (get_int(o, "repeat_last_n", -1, 1 << 30, &n, e) || get_int(o, "penalty_last_n", -1, 1 << 30, &n, e)) return -1;
    r->penalty.repeat = (float)rp;
    r->penalty.presence = (float)pp;
    r->penalty.frequency = (float)fp;
    r->penalty.last_n = (int)n;
    return 0;
}

/* max_tokens and max_completion_tokens: each checked when given (a null one hides no error in
 * the other); max_completion_tokens wins. *v stays -1 when neither gives a number. */
static int max_tokens_field(json_t *o, long long *v, srv_error *e) {
    static const char *keys[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < 2; i++) {
        json_t *mx = json_object_get(o, keys[i]);
        if (mx && json_is_integer(mx) && json_integer_value(mx) < 1)
            return BAD(e, keys[i], "'%s' must be at least 1, got %lld", keys[i], (long long)json_integer_value(mx));
        if (get_int(o, keys[i], 1, 1 << 30, v, e)) return -1;
    }
    return 0;
}

#define OOM(e) sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory")

/* one logit_bias entry: id, and a number or false (the token banned: -inf) */
static int bias_entry(srv_request *r, long long id, json_t *v, const char *what, srv_error *e) {
    if (id < 0 || id > INT32_MAX) return BAD(e, "logit_bias", "'logit_bias': %s is not a token id", what);
    float b;
    if (json_is_false(v)) b = -INFINITY;
    else if (json_is_number(v) && isfinite(json_number_value(v))) b = (float)json_number_value(v);
    else return BAD(e, "logit_bias", "'logit_bias' of token %lld must be a number (or false: banned)", id);
    r->bias_ids[r->n_bias] = (int32_t)id;
    r->bias[r->n_bias++] = b;
    return 0;
}

/* OpenAI's {"ID": bias, ...} or llama-server's [[ID, bias | false], ...]; ids are checked against
 * the vocabulary by the server */
static int parse_logit_bias(json_t *o, srv_request *r, srv_error *e) {
    json_t *x = json_object_get(o, "logit_bias");
    if (!x || json_is_null(x)) return 0;
    size_t n = json_is_object(x) ? json_object_size(x) : json_is_array(x) ? json_array_size(x) : 0;
    if (!json_is_object(x) && !json_is_array(x))
        return BAD(e, "logit_bias", "'logit_bias' must be an object {\"token id\": bias} or an array [[id, bias], ...]");
    if (n > 4096) return BAD(e, "logit_bias", "'logit_bias' has %zu entries, at most 4096 are allowed", n);
    if (!n) return 0;
    r->bias_ids = malloc(sizeof *r->bias_ids * n);
    r->bias = malloc(sizeof *r->bias * n);
    if (!r->bias_ids || !r->bias) return OOM(e);
    if (json_is_object(x)) {
        const char *k;
        json_t *v;
        json_object_foreach(x, k, v) {
            char *end;
            long long id = strtoll(k, &end, 10);
            if (!*k || *end) return BAD(e, "logit_bias", "'logit_bias' key '%s' is not a token id", k);
            if (bias_entry(r, id, v, k, e)) return -1;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            json_t *p = json_array_get(x, i), *id = json_array_get(p, 0);
            if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(id))
                return BAD(e, "logit_bias", "'logit_bias[%zu]' must be [token id, bias]", i);
            if (bias_entry(r, json_integer_value(id), json_array_get(p, 1), "an entry", e)) return -1;
        }
    }
    r->penalty.n_bias = r->n_bias;
    r->penalty.bias_ids = r->bias_ids;
    r->penalty.bias = r->bias;
    return 0;
}

/* llama-server's fields: n_predict (-1: until the end or the context), chat_template_kwargs, and
 * the sampling extensions at their neutral value */
static int parse_llama_fields(json_t *o, srv_request *r, srv_error *e) {
    long long np = -2;
    if (get_int(o, "n_predict", -1, 1 << 30, &np, e)) return -1;
    if (np == 0) return BAD(e, "n_predict", "'n_predict' must be at least 1, or -1 (until the end)");
    if (np != -2 && r->max_tokens < 0) r->max_tokens = np < 0 ? 1 << 30 : (int)np;
    for (size_t i = 0; i < sizeof NEUTRAL_FIELDS / sizeof NEUTRAL_FIELDS[0]; i++) {
        const char *k = NEUTRAL_FIELDS[i].name;
        json_t *x = json_object_get(o, k);
        if (!x || json_is_null(x)) continue;
        if (!json_is_number(x)) return BAD(e, k, "'%s' must be a number", k);
        double v = json_number_value(x), z = NEUTRAL_FIELDS[i].neutral;
        if (v != z && !(z < 0 && v <= 0))
            return BAD(e, k, "'%s' is not supported by this server: only %g (off) is accepted", k, z);
    }
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        if (!(r->tmpl_kwargs = json_dumps(kw, JSON_COMPACT))) return OOM(e);
    }
    json_t *sm = json_object_get(o, "samplers");
    if (sm && !json_is_null(sm) && !json_is_array(sm) && !json_is_string(sm))
        return BAD(e, "samplers", "'samplers' must be an array of names or a string");
    long long slot = -1;
    return get_int(o, "id_slot", -1, 1 << 20, &slot, e);
}

/* the sampling and output fields shared by chat and completions */
static int parse_generation(json_t *o, srv_request *r, srv_error *e) {
    double t = 1.0, tp = 1.0, mp = 0.0;
    long long v = -1, n = 1, tk = 0, seed = 0;
    if (get_num(o, "temperature", 0, 2, &t, e) || get_num(o, "top_p", 0, 1, &tp, e) ||
        get_num(o, "min_p", 0, 1, &mp, e) || get_int(o, "top_k", 0, 1 << 30, &tk, e))
        return -1;
    if (get_int(o, "n", 1, 1, &n, e)) return sp_srv_error_set(e, 400, "invalid_request_error", NULL, "n", "only n = 1 is supported");
    if (get_int(o, "best_of", 1, 1, &n, e)) return -1;
    json_t *sx = json_object_get(o, "seed");
    if (sx && !json_is_null(sx)) {
        if (!json_is_integer(sx)) return BAD(e, "seed", "'seed' must be an integer");
        seed = json_integer_value(sx);
        r->seed_given = 1;
    }
    if (max_tokens_field(o, &v, e)) return -1;
    r->max_tokens = (int)v;
    r->sample = sp_sample_params_default();
    r->sample.temperature = (float)t;
    r->sample.top_p = (float)tp;
    r->sample.min_p = (float)mp;
    r->sample.top_k = (int)tk;
    r->sample.seed = (uint64_t)seed;
    if (parse_stop(o, r, e) || get_bool(o, "stream", &r->stream, e) || get_bool(o, "ignore_eos", &r->ignore_eos, e) ||
        get_bool(o, "return_tokens", &r->return_tokens, e) || get_bool(o, "speculative", &r->speculative, e) ||
        get_bool(o, "cache_prompt", &r->cache_prompt, e))
        return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD(e, "stream_options", "'stream_options' must be an object");
        const char *k;
        json_t *x;
        json_object_foreach(so, k, x) {
            if (strcmp(k, "include_usage")) return BAD(e, "stream_options", "'stream_options.%s' is not supported", k);
        }
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    if (parse_penalties(o, r, e) || parse_logit_bias(o, r, e) || parse_llama_fields(o, r, e)) return -1;
    return 0;
}

/* Structured output, one of: response_format {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"schema": S}} (OpenAI; chat only), llama-server's json_schema (S) or grammar (GBNF
 * text). The schema becomes GBNF (sample/json_schema.h) and the GBNF is compiled into r->grammar; an
 * unsupported keyword or a grammar error is a 400 naming the field. */
static int parse_structured(json_t *o, srv_request *r, srv_error *e) {
    json_t *rf = json_object_get(o, "response_format"), *js = json_object_get(o, "json_schema");
    json_t *gr = json_object_get(o, "grammar"), *schema = NULL;
    const char *param = NULL;
    if (rf && !json_is_null(rf)) {
        json_t *ty = json_object_get(rf, "type");
        const char *t = json_is_object(rf) && json_is_string(ty) ? json_string_value(ty) : "";
        if (!strcmp(t, "json_schema")) {
            json_t *w = json_object_get(rf, "json_schema");
            if (!json_is_object(w) || !(schema = json_object_get(w, "schema")))
                return BAD(e, "response_format", "'response_format' of type json_schema needs json_schema.schema");
        } else if (strcmp(t, "json_object") && strcmp(t, "text")) {
            return BAD(e, "response_format", "'response_format' type must be \"text\", \"json_object\" or \"json_schema\"");
        }
        if (strcmp(t, "text")) param = "response_format";
    }
    int n_given = !!param + (js && !json_is_null(js)) + (gr && !json_is_null(gr));
    if (n_given > 1) return BAD(e, "grammar", "give one of response_format, json_schema and grammar");
    if (js && !json_is_null(js)) schema = js, param = "json_schema";
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr)) return BAD(e, "grammar", "'grammar' must be a string (GBNF)");
        param = "grammar";
    }
    if (!param) return 0;
    sp_err err = {{0}};
    char *text = gr && !json_is_null(gr) ? dup_str(json_string_value(gr)) : sp_json_schema_gbnf(schema, &err);
    if (!text) return BAD(e, param, "'%s': %s", param, err.msg[0] ? err.msg : "out of memory");
    r->grammar = sp_grammar_parse(text, strlen(text), NULL, &err);
    free(text);
    return r->grammar ? 0 : BAD(e, param, "'%s': %s", param, err.msg);
}

static int parse_chat(json_t *o, srv_request *r, srv_error *e) {
    if (parse_messages(o, r, e) || parse_generation(o, r, e)) return -1;
    int lp = 0;
    long long top = -1;
    if (get_bool(o, "logprobs", &lp, e) || get_int(o, "top_logprobs", 0, 20, &top, e)) return -1;
    if (top >= 0 && !lp) return BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = lp ? (top >= 0 ? (int)top : 0) : -1;
    return parse_structured(o, r, e) || sp_srv_tools_parse(o, r, e) ? -1 : 0;
}

static int parse_completion(json_t *o, srv_request *r, srv_error *e) {
    if (parse_prompt(o, r, e) || parse_generation(o, r, e) || get_bool(o, "echo", &r->echo, e)) return -1;
    long long lp = -1;
    if (get_int(o, "logprobs", 0, 5, &lp, e) || parse_structured(o, r, e)) return -1;
    r->top_logprobs = (int)lp;
    json_t *sfx = json_object_get(o, "suffix");
    if (sfx && !json_is_null(sfx)) return BAD(e, "suffix", "'suffix' is not supported");
    return 0;
}

int sp_srv_request_parse(srv_route route, const char *body, size_t len, srv_request *r, srv_error *e) {
    memset(r, 0, sizeof *r);
    r->route = route;
    r->max_tokens = -1;
    r->top_logprobs = -1;
    r->add_special = 0;
    r->speculative = 1;
    r->cache_prompt = 1;
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) return BAD(e, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = -1;
    if (!json_is_object(o)) {
        BAD(e, NULL, "the body must be a JSON object");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!route_accepts(route, k)) {
            BAD(e, k, "Unrecognized request argument supplied: %s", k);
            goto done;
        }
    }
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            BAD(e, "model", "'model' must be a string");
            goto done;
        }
        r->model = dup_str(json_string_value(model));
    }
    if (route == SRV_ROUTE_CHAT) rc = parse_chat(o, r, e);
    else if (route == SRV_ROUTE_COMPLETION || route == SRV_ROUTE_NATIVE) rc = parse_completion(o, r, e);
    else if (route == SRV_ROUTE_APPLY_TEMPLATE) rc = parse_messages(o, r, e) || parse_llama_fields(o, r, e) || sp_srv_tools_parse(o, r, e) ? -1 : 0;
    else if (route == SRV_ROUTE_TOKENIZE) {
        json_t *c = json_object_get(o, "content");
        if (!json_is_string(c)) BAD(e, "content", "'content' must be a string");
        else if (strlen(json_string_value(c)) != json_string_length(c)) BAD(e, "content", "'content' contains a NUL byte");
        else if (!get_bool(o, "add_special", &r->add_special, e) && !get_bool(o, "with_pieces", &r->with_pieces, e)) {
            r->content = dup_str(json_string_value(c));
            rc = r->content ? 0 : sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
    } else {
        json_t *t = json_object_get(o, "tokens");
        if (!json_is_array(t)) BAD(e, "tokens", "'tokens' must be an array of token ids");
        else rc = parse_ids(t, "tokens", r, e);
    }
done:
    json_decref(o);
    if (rc) sp_srv_request_free(r);
    return rc;
}

void sp_srv_request_free(srv_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_msgs; i++) free(r->msgs[i].role), free(r->msgs[i].content);
    free(r->msgs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model), free(r->prompt_text), free(r->prompt_ids), free(r->content);
    free(r->tmpl_kwargs), free(r->bias_ids), free(r->bias), free(r->tool_name);
    json_decref(r->messages), json_decref(r->tools);
    sp_grammar_free(r->grammar);
    memset(r, 0, sizeof *r);
}
