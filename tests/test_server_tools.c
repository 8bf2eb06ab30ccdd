/* test_server_tools.c — tool calls through `specula serve`: with a template that renders tools
 * (tests/data/tools_chat.jinja, the Hermes <tool_call> format) a request naming a function is
 * forced into a call whose arguments follow the function's schema, parsed back into tool_calls;
 * greedy speculative output equals plain output for it; tool_choice "required" picks a declared
 * function; the tools and a tool turn reach the template; the official `openai` npm client runs
 * the two-step tool loop streaming and not (tests/openai_tools.mjs). A server with the default
 * template (which does not read `tools`) gets them as a system message. Malformed tools are 400s.
 * The parsers of both formats (Hermes, Llama 3, several Llama 3 calls joined by ';') and the
 * streaming hold are checked directly, and the forcing grammar with parallel_tool_calls true and
 * false. A server with the built-in llama3 renderer returns ';'-joined calls as several tool_calls,
 * streamed and not. Streamed logprobs equal the non-streamed ones token for token when a stop
 * string holds text back (matching in the end or never). */
#include <jansson.h>

#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "server/text.h"
#include "server/tools.h"
#include "server_harness.h"

#define MAXOUT (1 << 20)
static char BIN[4096];
static test_server SRV;

#define WEATHER                                                                                                   \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"The weather in a city\","    \
    "\"parameters\":" WEATHER_SCHEMA "}}"
#define WEATHER_SCHEMA                                                                                            \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},\"days\":{\"type\":"   \
    "\"integer\"}},\"required\":[\"city\"],\"additionalProperties\":false}"
#define CLOCK "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\"," \
              "\"properties\":{\"zone\":{\"enum\":[\"utc\",\"cet\"]}},\"required\":[\"zone\"]}}}"
#define USER "[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}]"

/* POST body to path on port; the reply body (malloc'd) and its status */
static char *post(int port, const char *path, const char *body, int *status) {
    char file[96], cmd[512];
    static int n;
    snprintf(file, sizeof file, "/tmp/specula-tools-body-%d-%d.json", (int)getpid(), n++);
    FILE *f = fopen(file, "w");
    if (f) fputs(body, f), fclose(f);
    snprintf(cmd, sizeof cmd,
             "curl -s -X POST -H 'Content-Type: application/json' --data-binary @%s -w '\\n%%{http_code}' "
             "http://127.0.0.1:%d%s", file, port, path);
    char *out = malloc(MAXOUT);
    FILE *p = popen(cmd, "r");
    size_t k = p ? fread(out, 1, MAXOUT - 1, p) : 0;
    out[k] = 0;
    if (p) pclose(p);
    unlink(file);
    char *nl = strrchr(out, '\n');
    *status = nl ? atoi(nl + 1) : 0;
    if (nl) *nl = 0;
    return out;
}

static json_t *choice0(json_t *o) { return json_array_get(json_object_get(o, "choices"), 0); }
static json_t *call0(json_t *o) {
    return json_array_get(json_object_get(json_object_get(choice0(o), "message"), "tool_calls"), 0);
}

/* forced (tool_choice naming get_weather): a call whose arguments follow its schema; speculative
 * and plain give the same tokens */
static void test_forced_call(void) {
    char body[4096], *out[2];
    json_t *o[2];
    for (int spec = 0; spec < 2; spec++) {
        snprintf(body, sizeof body,
                 "{\"messages\":" USER ",\"tools\":[" WEATHER "," CLOCK "],\"tool_choice\":{\"type\":\"function\","
                 "\"function\":{\"name\":\"get_weather\"}},\"parallel_tool_calls\":false,\"max_tokens\":200,"
                 "\"temperature\":0,\"speculative\":%s,\"return_tokens\":true}", spec ? "true" : "false");
        int st;
        out[spec] = post(SRV.port, "/v1/chat/completions", body, &st);
        o[spec] = json_loads(out[spec], 0, NULL);
        CHECK(st == 200 && o[spec], "spec %d: %d %s", spec, st, out[spec]);
    }
    json_t *c = call0(o[1]), *f = json_object_get(c, "function"), *msg = json_object_get(choice0(o[1]), "message");
    const char *args = json_string_value(json_object_get(f, "arguments"));
    json_t *schema = json_loads(WEATHER_SCHEMA, 0, NULL), *a = args ? json_loads(args, 0, NULL) : NULL;
    CHECK(c && !strcmp(json_string_value(json_object_get(f, "name")), "get_weather") && a &&
              sp_json_schema_validate(schema, a),
          "call %s", out[1]);
    CHECK(json_is_null(json_object_get(msg, "content")) && json_is_string(json_object_get(c, "id")) &&
              !strcmp(json_string_value(json_object_get(choice0(o[1]), "finish_reason")), "tool_calls"),
          "message %s", out[1]);
    char *t0 = json_dumps(json_object_get(o[0], "tokens"), JSON_COMPACT), *t1 = json_dumps(json_object_get(o[1], "tokens"), JSON_COMPACT);
    CHECK(t0 && t1 && !strcmp(t0, t1), "speculative %s vs plain %s", t1, t0);
    json_int_t forced = json_integer_value(json_object_get(json_object_get(o[1], "timings"), "draft_n_grammar_forced"));
    printf("  forced call: %s, %lld drafts forced by the grammar\n", args ? args : "-", (long long)forced);
    free(t0), free(t1);
    json_decref(a), json_decref(schema), json_decref(o[0]), json_decref(o[1]);
    free(out[0]), free(out[1]);
}

/* "required": a call of one of the declared functions, sampled; its arguments follow that schema */
static void test_required(void) {
    for (int seed = 1; seed <= 3; seed++) {
        char body[4096];
        snprintf(body, sizeof body,
                 "{\"messages\":" USER ",\"tools\":[" WEATHER "," CLOCK "],\"tool_choice\":\"required\","
                 "\"parallel_tool_calls\":false,\"max_tokens\":200,\"temperature\":1,\"seed\":%d}", seed);
        int st;
        char *out = post(SRV.port, "/v1/chat/completions", body, &st);
        json_t *o = json_loads(out, 0, NULL), *f = json_object_get(call0(o), "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        const char *args = json_string_value(json_object_get(f, "arguments"));
        json_t *a = args ? json_loads(args, 0, NULL) : NULL;
        int weather = name && !strcmp(name, "get_weather");
        json_t *schema = json_loads(weather ? WEATHER_SCHEMA : "{\"type\":\"object\",\"properties\":{\"zone\":{\"enum\":"
                                                               "[\"utc\",\"cet\"]}},\"required\":[\"zone\"]}", 0, NULL);
        CHECK(st == 200 && name && a && sp_json_schema_validate(schema, a), "seed %d: %s", seed, out);
        json_decref(a), json_decref(schema), json_decref(o);
        free(out);
    }
}

/* what the template gets: the tools, the assistant's call and the tool's result */
static void test_rendering(void) {
    int st;
    char *out = post(SRV.port, "/apply-template",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":null,"
                     "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                     "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                     "\"content\":\"rain\"}],\"tools\":[" WEATHER "]}", &st);
    CHECK(st == 200 && strstr(out, "# tools:") && strstr(out, "get_weather") &&
              strstr(out, "<tool_call>\\n{\\\"name\\\":\\\"get_weather\\\",\\\"arguments\\\":{\\\"city\\\": \\\"Oslo\\\"}}") &&
              strstr(out, "<tool_response>\\nrain\\n</tool_response>"),
          "%d %s", st, out);
    free(out);
    /* tool_choice none: the tools are not rendered */
    out = post(SRV.port, "/apply-template",
               "{\"messages\":" USER ",\"tools\":[" WEATHER "],\"tool_choice\":\"none\"}", &st);
    CHECK(st == 200 && !strstr(out, "# tools:"), "%d %s", st, out);
    free(out);
}

static void expect_400(const char *body, const char *want) {
    int st;
    char *out = post(SRV.port, "/v1/chat/completions", body, &st);
    CHECK(st == 400 && strstr(out, want), "%s: %d %s", body, st, out);
    free(out);
}

static void test_errors(void) {
    expect_400("{\"messages\":" USER ",\"tools\":{\"a\":1}}", "'tools' must be an array");
    expect_400("{\"messages\":" USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"x\"}}]}",
               "tools[0].function.name");
    expect_400("{\"messages\":" USER ",\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0]");
    expect_400("{\"messages\":" USER ",\"tools\":[" WEATHER "," WEATHER "]}", "declared twice");
    expect_400("{\"messages\":" USER ",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\",\"function\":"
               "{\"name\":\"nope\"}}}", "does not declare");
    expect_400("{\"messages\":" USER ",\"tool_choice\":\"required\"}", "declares no 'tools'");
    expect_400("{\"messages\":" USER ",\"tools\":[" WEATHER "],\"tool_choice\":\"always\"}", "'tool_choice' must be");
    expect_400("{\"messages\":" USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
               "{\"type\":\"string\",\"pattern\":\"a\"}}}],\"tool_choice\":\"required\"}", "'pattern' is not supported");
    expect_400("{\"messages\":" USER ",\"tools\":[" WEATHER "],\"tool_choice\":\"required\",\"response_format\":"
               "{\"type\":\"json_object\"}}", "cannot be combined");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "on an assistant message");
    expect_400("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":"
               "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{bad\"}}]}]}", "arguments' is not JSON");
    expect_400("{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "assistant or tool");
}

/* the parsers and the streaming hold of both formats, without a server */
static void test_parse(void) {
    json_t *tools = json_loads("[" WEATHER "," CLOCK "]", 0, NULL);
    size_t ce;
    const char *h = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                    "</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"zone\":\"utc\"}}";
    json_t *c = sp_srv_tool_calls_parse(SRV_TOOLS_HERMES, tools, h, strlen(h), 7, &ce);
    json_t *f1 = json_object_get(json_array_get(c, 1), "function");
    CHECK(json_array_size(c) == 2 && ce == strlen("Let me look.") &&
              !strcmp(json_string_value(json_object_get(json_array_get(c, 1), "id")), "call_7_1") &&
              !strcmp(json_string_value(json_object_get(f1, "arguments")), "{\"zone\":\"utc\"}"),
          "hermes: %zu calls, content end %zu", json_array_size(c), ce);
    json_decref(c);
    const char *undeclared = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>";
    CHECK(!sp_srv_tool_calls_parse(SRV_TOOLS_HERMES, tools, undeclared, strlen(undeclared), 1, &ce), "undeclared");
    const char *l = " <|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"zone\": \"cet\"}}\n";
    c = sp_srv_tool_calls_parse(SRV_TOOLS_LLAMA3, tools, l, strlen(l), 2, &ce);
    CHECK(json_array_size(c) == 1 && ce == 0, "llama3");
    json_decref(c);
    CHECK(!sp_srv_tool_calls_parse(SRV_TOOLS_LLAMA3, tools, "It is {warm}", 12, 2, &ce), "llama3 text");
    /* several Llama 3 calls joined by ';' (white space around it, a trailing ';') */
    const char *l2 = "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"utc\"}}; {\"name\": \"get_weather\", "
                     "\"parameters\": {\"city\": \"Rome\"}} ;\n{\"name\":\"get_time\",\"parameters\":{\"zone\":\"cet\"}};";
    c = sp_srv_tool_calls_parse(SRV_TOOLS_LLAMA3, tools, l2, strlen(l2), 3, &ce);
    const char *want[3][3] = {{"call_3_0", "get_time", "{\"zone\":\"utc\"}"},
                              {"call_3_1", "get_weather", "{\"city\":\"Rome\"}"},
                              {"call_3_2", "get_time", "{\"zone\":\"cet\"}"}};
    int ok = json_array_size(c) == 3 && ce == 0;
    for (size_t k = 0; ok && k < 3; k++) {
        json_t *ck = json_array_get(c, k), *fk = json_object_get(ck, "function");
        ok = !strcmp(json_string_value(json_object_get(ck, "id")), want[k][0]) &&
             json_integer_value(json_object_get(ck, "index")) == (json_int_t)k &&
             !strcmp(json_string_value(json_object_get(fk, "name")), want[k][1]) &&
             !strcmp(json_string_value(json_object_get(fk, "arguments")), want[k][2]);
    }
    CHECK(ok, "llama3 ';': %zu calls", json_array_size(c));
    json_decref(c);
    /* not all calls: text after a call, no separator, an undeclared function -> the text is content */
    const char *not_calls[] = {"{\"name\":\"get_time\",\"parameters\":{}}; and then", "{\"name\":\"get_time\",\"parameters\":{}} "
                               "{\"name\":\"get_time\",\"parameters\":{}}", "{\"name\":\"get_time\",\"parameters\":{}}; "
                               "{\"name\":\"rm_rf\",\"parameters\":{}}", "{\"name\":\"get_time\",\"parameters\":{}}; {\"name\":"};
    for (int k = 0; k < 4; k++) {
        ce = 99;
        c = sp_srv_tool_calls_parse(SRV_TOOLS_LLAMA3, tools, not_calls[k], strlen(not_calls[k]), 3, &ce);
        CHECK(!c && ce == strlen(not_calls[k]), "llama3 not calls %d: %zu calls", k, json_array_size(c));
        json_decref(c);
    }
    CHECK(sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "abc <tool", 9) == 3 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "abc <tool_call>{", 16) == 3 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "a < b", 5) == 5 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "Hi \n", 4) == 2 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "Hi \nyou", 7) == 7 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_LLAMA3, " {\"na", 5) == 0 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_LLAMA3, "<|pyt", 5) == 0 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_LLAMA3, "Sunny", 5) == 5,
          "safe prefix");
    json_decref(tools);
}

/* the forcing grammar with parallel_tool_calls true (the default) takes one or more calls, Llama 3's
 * joined by "; " and Hermes blocks on their own lines; with false exactly one */
static void test_parallel_grammar(void) {
    const char *one_l3 = "{\"name\":\"get_time\",\"parameters\":{\"zone\":\"utc\"}}";
    const char *two_l3 = "{\"name\":\"get_time\",\"parameters\":{\"zone\":\"utc\"}}; {\"name\":\"get_time\",\"parameters\":"
                         "{\"zone\":\"cet\"}}";
    const char *one_h = "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"zone\":\"utc\"}}\n</tool_call>";
    const char *two_h = "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"zone\":\"utc\"}}\n</tool_call>\n<tool_call>\n"
                        "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>";
    for (int par = 0; par < 3; par++) { /* 0: false, 1: true, 2: absent (true) */
        for (int fmt = 0; fmt < 2; fmt++) {
            char body[2048];
            snprintf(body, sizeof body, "{\"tools\":[" WEATHER "," CLOCK "],\"tool_choice\":\"required\"%s}",
                     par == 0 ? ",\"parallel_tool_calls\":false" : par == 1 ? ",\"parallel_tool_calls\":true" : "");
            json_t *o = json_loads(body, 0, NULL);
            srv_request r;
            memset(&r, 0, sizeof r);
            srv_error e;
            int rc = sp_srv_tools_parse(o, &r, &e) || sp_srv_tools_grammar(&r, fmt ? SRV_TOOLS_LLAMA3 : SRV_TOOLS_HERMES, &e);
            sp_err err = {{0}};
            const char *one = fmt ? one_l3 : one_h, *two = fmt ? two_l3 : two_h;
            int m1 = rc ? -1 : sp_grammar_match_text(r.grammar, one, strlen(one), &err);
            int m2 = rc ? -1 : sp_grammar_match_text(r.grammar, two, strlen(two), &err);
            CHECK(!rc && m1 == 1 && m2 == (par != 0), "parallel %d format %d: rc %d, one call %d, two calls %d", par, fmt,
                  rc, m1, m2);
            sp_grammar_free(r.grammar);
            json_decref(r.tools);
            json_decref(o);
        }
    }
    expect_400("{\"messages\":" USER ",\"tools\":[" WEATHER "],\"parallel_tool_calls\":\"yes\"}",
               "'parallel_tool_calls' must be a boolean");
}

/* the data: events of an SSE body, as JSON (the caller frees the array) */
static json_t *sse_events(const char *body) {
    json_t *a = json_array();
    for (const char *p = body; (p = strstr(p, "data: ")); p += 6) {
        const char *end = strstr(p, "\n\n");
        if (!end) break;
        json_t *o = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
        if (o) json_array_append_new(a, o);
    }
    return a;
}

/* a Llama 3 template (the built-in renderer): an answer of calls joined by ';' (forced here by a
 * fixed GBNF grammar with tool_choice auto) comes back as several tool_calls, and streamed as
 * delta.tool_calls chunks with indices 0, 1 that add up to them; no content logprobs for them */
static void test_llama3_calls(void) {
    test_server s3;
    if (server_start(&s3, BIN, "-np 1 -c 1024 -t 2 --chat-template llama3")) {
        CHECK(0, "llama3 server_start (log %s)", s3.log);
        return;
    }
    const char *calls = "{\"name\":\"get_time\",\"parameters\":{\"zone\":\"utc\"}}; "
                        "{\"name\":\"get_weather\",\"parameters\":{\"days\":2}}";
    json_t *g = json_string(calls);
    char *lit = json_dumps(g, JSON_ENCODE_ANY), body[4096];
    json_t *gram = json_pack("s++", "root ::= ", lit, "");
    char *gtext = json_dumps(gram, JSON_ENCODE_ANY);
    json_t *res[2] = {NULL, NULL};
    char *out[2];
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body, "{\"messages\":" USER ",\"tools\":[" WEATHER "," CLOCK "],\"grammar\":%s,"
                 "\"max_tokens\":100,\"temperature\":0,\"logprobs\":true,\"stream\":%s}", gtext, stream ? "true" : "false");
        int st;
        out[stream] = post(s3.port, "/v1/chat/completions", body, &st);
        CHECK(st == 200, "stream %d: %d %s", stream, st, out[stream]);
    }
    /* non-streamed: two calls, no content, no content logprobs */
    res[0] = json_loads(out[0], 0, NULL);
    json_t *msg = json_object_get(choice0(res[0]), "message"), *tc = json_object_get(msg, "tool_calls");
    const char *n0 = json_string_value(json_object_get(json_object_get(json_array_get(tc, 0), "function"), "name"));
    const char *a1 = json_string_value(json_object_get(json_object_get(json_array_get(tc, 1), "function"), "arguments"));
    json_t *lpc = json_object_get(json_object_get(choice0(res[0]), "logprobs"), "content");
    CHECK(json_array_size(tc) == 2 && n0 && !strcmp(n0, "get_time") && a1 && !strcmp(a1, "{\"days\":2}") &&
              json_is_null(json_object_get(msg, "content")) && json_is_array(lpc) && json_array_size(lpc) == 0 &&
              !strcmp(json_string_value(json_object_get(choice0(res[0]), "finish_reason")), "tool_calls"),
          "llama3 calls: %s", out[0]);
    /* streamed: the deltas, accumulated by index as the openai client does */
    json_t *ev = sse_events(out[1]), *acc = json_array();
    int content = 0, lps = 0, order_ok = 1;
    const char *finish = NULL;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *ch = choice0(json_array_get(ev, i)), *d = json_object_get(ch, "delta");
        const char *txt = json_string_value(json_object_get(d, "content"));
        content += txt && *txt;
        lps += (int)json_array_size(json_object_get(json_object_get(ch, "logprobs"), "content"));
        if (json_is_string(json_object_get(ch, "finish_reason"))) finish = json_string_value(json_object_get(ch, "finish_reason"));
        json_t *dtc = json_object_get(d, "tool_calls");
        for (size_t k = 0; k < json_array_size(dtc); k++) {
            json_t *x = json_array_get(dtc, k), *f = json_object_get(x, "function");
            size_t idx = (size_t)json_integer_value(json_object_get(x, "index"));
            if (idx > json_array_size(acc)) order_ok = 0;
            if (idx == json_array_size(acc)) json_array_append_new(acc, json_pack("{s:s, s:s, s:s}", "id", "", "name", "", "args", ""));
            json_t *c = json_array_get(acc, idx);
            const char *parts[3] = {json_string_value(json_object_get(x, "id")), json_string_value(json_object_get(f, "name")),
                                    json_string_value(json_object_get(f, "arguments"))};
            const char *keys[3] = {"id", "name", "args"};
            for (int q = 0; c && q < 3; q++)
                if (parts[q]) {
                    char *cat = malloc(strlen(json_string_value(json_object_get(c, keys[q]))) + strlen(parts[q]) + 1);
                    strcpy(cat, json_string_value(json_object_get(c, keys[q])));
                    strcat(cat, parts[q]);
                    json_object_set_new(c, keys[q], json_string(cat));
                    free(cat);
                }
        }
    }
    int same = json_array_size(acc) == 2 && order_ok;
    for (size_t k = 0; same && k < 2; k++) {
        json_t *c = json_array_get(acc, k), *f = json_object_get(json_array_get(tc, k), "function");
        same = json_equal(json_object_get(c, "name"), json_object_get(f, "name")) &&
               json_equal(json_object_get(c, "args"), json_object_get(f, "arguments")) &&
               strlen(json_string_value(json_object_get(c, "id"))) > 0; /* ids name the request: they differ */
    }
    CHECK(same && content == 0 && lps == 0 && finish && !strcmp(finish, "tool_calls"),
          "streamed llama3 calls: %zu calls, %d content chunks, %d logprobs, finish %s: %s", json_array_size(acc), content,
          lps, finish ? finish : "-", out[1]);
    json_decref(ev), json_decref(acc), json_decref(res[0]), json_decref(g), json_decref(gram);
    free(lit), free(gtext), free(out[0]), free(out[1]);
    CHECK(server_stop(&s3) == 0, "llama3 server exit");
    CHECK(!server_log_has(&s3, "Sanitizer") && !server_log_has(&s3, "runtime error"), "sanitizer report in %s", s3.log);
    unlink(s3.log);
}

/* the logprobs of one chat request: non-streamed, or the streamed chunks' in order; with stop (or
 * NULL) and n tokens at most; *text = the content (streamed: the deltas joined) */
static json_t *chat_logprobs(int stream, const char *stop, int n, char **text) {
    json_t *b = json_pack("{s:s, s:i, s:f, s:b, s:i, s:b}", "messages", "-", "max_tokens", n, "temperature", 0.0,
                          "logprobs", 1, "top_logprobs", 2, "stream", stream);
    json_object_set_new(b, "messages", json_loads(USER, 0, NULL));
    if (stop) json_object_set_new(b, "stop", json_string(stop));
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    int st;
    char *out = post(SRV.port, "/v1/chat/completions", body, &st);
    free(body);
    json_t *lp = json_array();
    srv_buf t = {0};
    if (!stream) {
        json_t *o = json_loads(out, 0, NULL), *ch = choice0(o);
        json_array_extend(lp, json_object_get(json_object_get(ch, "logprobs"), "content"));
        const char *c = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
        sp_srv_buf_add(&t, c ? c : "", c ? strlen(c) : 0);
        json_decref(o);
    } else {
        json_t *ev = sse_events(out);
        for (size_t i = 0; i < json_array_size(ev); i++) {
            json_t *ch = choice0(json_array_get(ev, i));
            const char *c = json_string_value(json_object_get(json_object_get(ch, "delta"), "content"));
            if (c) sp_srv_buf_add(&t, c, strlen(c));
            json_array_extend(lp, json_object_get(json_object_get(ch, "logprobs"), "content"));
        }
        json_decref(ev);
    }
    if (st != 200) printf("  status %d: %.300s\n", st, out);
    free(out);
    *text = t.p ? t.p : strdup("");
    return lp;
}

/* the tokens' text (the "bytes" of each logprobs entry) joined */
static char *lp_text(json_t *lp, int n) {
    srv_buf t = {0};
    sp_srv_buf_add(&t, "", 0);
    for (int i = 0; i < n; i++) {
        json_t *b = json_object_get(json_array_get(lp, (size_t)i), "bytes");
        for (size_t k = 0; k < json_array_size(b); k++) {
            char c = (char)json_integer_value(json_array_get(b, k));
            sp_srv_buf_add(&t, &c, 1);
        }
    }
    return t.p;
}

/* Streamed logprobs equal the non-streamed ones token for token when a stop string holds text back:
 * one that never matches in full (every token's logprobs come, as without a stop), and one that
 * matches after its first byte was held back several times (the tokens of the content come: those
 * that begin before the stop string; the stop string's own are not sent). */
static void test_stream_logprobs(void) {
    char *full;
    json_t *ref = chat_logprobs(0, NULL, 40, &full);
    int n = (int)json_array_size(ref);
    char *joined = lp_text(ref, n);
    CHECK(n > 8 && !strcmp(joined, full), "reference: %d tokens, '%s' vs '%s'", n, joined, full);
    /* the byte that ends the most tokens (in the first 3/4 of the text): each such end is a partial match */
    size_t cnt[256] = {0}, off = 0, len = strlen(joined), best = 0;
    for (int i = 0; i < n; i++) {
        size_t b = json_array_size(json_object_get(json_array_get(ref, (size_t)i), "bytes"));
        off += b;
        if (b && off * 4 < len * 3) cnt[(unsigned char)joined[off - 1]]++;
    }
    for (int c = 1; c < 256; c++)
        if (cnt[c] > cnt[best]) best = (size_t)c;
    CHECK(cnt[best] >= 3, "no byte ends 3 tokens in '%s'", joined);
    /* a stop string that matches: that byte at a late token end, then the next token's first bytes,
     * whose first occurrence is there */
    char never[4] = {(char)best, 1, 2, 0}, hit[8] = "";
    size_t at = 0, p = 0;
    off = 0;
    for (int i = 0; i < n && !hit[0]; i++) {
        off += json_array_size(json_object_get(json_array_get(ref, (size_t)i), "bytes"));
        if (off * 4 < len * 2 || off + 3 > len || (unsigned char)joined[off - 1] != best) continue;
        memcpy(hit, joined + off - 1, 4);
        hit[4] = 0;
        p = (size_t)(strstr(joined, hit) - joined);
        if (p != off - 1 || strlen(hit) < 4) hit[0] = 0;
        at = off - 1;
    }
    printf("  %d tokens; stop strings \"%s\\x01\\x02\" (never) and \"%s\" (at byte %zu; '%c' ends %zu tokens)\n", n,
           never[0] == '\n' ? "\\n" : (char[2]){never[0], 0}, hit, at, (int)best, cnt[best]);
    for (int which = 0; which < 2; which++) {
        const char *stop = which ? hit : never;
        if (which && !hit[0]) {
            CHECK(0, "no late stop string found in '%s'", joined);
            break;
        }
        char *t0, *t1;
        json_t *a = chat_logprobs(0, stop, 40, &t0), *b = chat_logprobs(1, stop, 40, &t1);
        /* the reference count: every token, or those that begin before the stop string */
        int want = n;
        if (which) {
            want = 0;
            for (size_t o2 = 0; want < n && o2 < at; want++)
                o2 += json_array_size(json_object_get(json_array_get(ref, (size_t)want), "bytes"));
        }
        int same = json_array_size(a) == json_array_size(b);
        for (size_t i = 0; same && i < json_array_size(a); i++)
            same = json_equal(json_array_get(a, i), json_array_get(b, i)) && json_equal(json_array_get(a, i), json_array_get(ref, i));
        CHECK(same && (int)json_array_size(a) == want && !strcmp(t0, t1) && strlen(t0) == (which ? at : len),
              "stop %d: %zu non-streamed, %zu streamed, %d expected; text '%s' / '%s'", which, json_array_size(a),
              json_array_size(b), want, t0, t1);
        json_decref(a), json_decref(b);
        free(t0), free(t1);
    }
    json_decref(ref);
    free(full), free(joined);
}

static void test_openai_tools(void) {
    int rc = system("sh tools/fetch-openai.sh >/dev/null");
    CHECK(rc == 0, "tools/fetch-openai.sh failed (status %d): npm missing or no network?", rc);
    if (rc) return;
    char cmd[512], *out = malloc(MAXOUT);
    snprintf(cmd, sizeof cmd, "node tests/openai_tools.mjs http://127.0.0.1:%d/v1 none 2>&1", SRV.port);
    rc = harness_run(cmd, out, MAXOUT);
    CHECK(rc == 0 && strstr(out, "tool loop ok") && strstr(out, "stream tool loop ok") && strstr(out, "errors ok"),
          "openai client: %s", out);
    fputs(out, stdout);
    free(out);
}

/* the default template does not read tools: they arrive as a system message, and a forced call
 * still comes back as tool_calls */
static void test_default_template(void) {
    test_server s2;
    if (server_start(&s2, BIN, "-np 1 -c 1024 -t 2")) {
        CHECK(0, "second server_start (log %s)", s2.log);
        return;
    }
    int st;
    char *out = post(s2.port, "/apply-template", "{\"messages\":" USER ",\"tools\":[" WEATHER "]}", &st);
    CHECK(st == 200 && strstr(out, "# system: # Tools") && strstr(out, "get_weather") && strstr(out, "<tool_call>"),
          "%d %s", st, out);
    free(out);
    out = post(s2.port, "/v1/chat/completions",
               "{\"messages\":" USER ",\"tools\":[" CLOCK "],\"tool_choice\":\"required\",\"max_tokens\":200,"
               "\"temperature\":0}", &st);
    json_t *o = json_loads(out, 0, NULL);
    const char *name = json_string_value(json_object_get(json_object_get(call0(o), "function"), "name"));
    CHECK(st == 200 && name && !strcmp(name, "get_time"), "%d %s", st, out);
    json_decref(o);
    free(out);
    CHECK(server_stop(&s2) == 0, "second server exit");
    CHECK(!server_log_has(&s2, "Sanitizer") && !server_log_has(&s2, "runtime error"), "sanitizer report in %s", s2.log);
    unlink(s2.log);
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    if (server_start(&SRV, BIN, "-np 2 -c 2048 -t 2 --spec-max-slots 0 --chat-template tests/data/tools_chat.jinja")) {
        printf("FAIL server_start (log %s)\n", SRV.log);
        return 1;
    }
    int asan = strstr(BIN, "asan") != NULL;
    RUN(test_parse);
    RUN(test_errors);
    RUN(test_rendering);
    RUN(test_parallel_grammar);
    RUN(test_forced_call);
    RUN(test_required);
    RUN(test_stream_logprobs);
    if (!asan) RUN(test_openai_tools);
    CHECK(server_stop(&SRV) == 0, "server exit");
    CHECK(!server_log_has(&SRV, "Sanitizer") && !server_log_has(&SRV, "runtime error"), "sanitizer report in %s", SRV.log);
    if (!harness_failed) unlink(SRV.log);
    RUN(test_default_template);
    RUN(test_llama3_calls);
    return harness_done("test_server_tools");
}
