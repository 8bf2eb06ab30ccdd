/* test_server_tools.c — tool calls through `specula serve`: with a template that renders tools
 * (tests/data/tools_chat.jinja, the Hermes <tool_call> format) a request naming a function is
 * forced into a call whose arguments follow the function's schema, parsed back into tool_calls;
 * greedy speculative output equals plain output for it; tool_choice "required" picks a declared
 * function; the tools and a tool turn reach the template; the official `openai` npm client runs
 * the two-step tool loop streaming and not (tests/openai_tools.mjs). A server with the default
 * template (which does not read `tools`) gets them as a system message. Malformed tools are 400s.
 * The parsers of both formats (Hermes, Llama 3) and the streaming hold are checked directly. */
#include <jansson.h>

#include "sample/json_schema.h"
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
                 "\"function\":{\"name\":\"get_weather\"}},\"max_tokens\":200,\"temperature\":0,\"speculative\":%s,"
                 "\"return_tokens\":true}", spec ? "true" : "false");
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
                 "\"max_tokens\":200,\"temperature\":1,\"seed\":%d}", seed);
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
    CHECK(sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "abc <tool", 9) == 4 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "abc <tool_call>{", 16) == 4 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_HERMES, "a < b", 5) == 5 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_LLAMA3, " {\"na", 5) == 0 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_LLAMA3, "<|pyt", 5) == 0 &&
              sp_srv_tool_safe_prefix(SRV_TOOLS_LLAMA3, "Sunny", 5) == 5,
          "safe prefix");
    json_decref(tools);
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
    RUN(test_forced_call);
    RUN(test_required);
    if (!asan) RUN(test_openai_tools);
    CHECK(server_stop(&SRV) == 0, "server exit");
    CHECK(!server_log_has(&SRV, "Sanitizer") && !server_log_has(&SRV, "runtime error"), "sanitizer report in %s", SRV.log);
    if (!harness_failed) unlink(SRV.log);
    RUN(test_default_template);
    return harness_done("test_server_tools");
}
