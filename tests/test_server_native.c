/* test_server_native.c — what llama-server's clients send, through `specula serve`:
 * - OpenAI's logit_bias (object form, and llama-server's [[id, false]] form) with presence /
 *   frequency penalties: the speculative server's tokens == `specula generate -l ...
 *   --presence-penalty --frequency-penalty` (plain), greedy;
 * - llama-server's fields: n_predict (the length), repeat_penalty, samplers, id_slot, typical_p 1,
 *   mirostat 0, timings_per_token accepted; typical_p 0.5 refused naming the field; a bad
 *   logit_bias refused;
 * - chat_template_kwargs per request over serve --chat-template-kwargs (seen in /apply-template
 *   and in a chat's prompt length);
 * - the native routes: POST /completion (body and stream), GET /props, GET /slots,
 *   POST /apply-template, /tokenize with with_pieces and llama-server's add_special default (off);
 * - serve --host localhost and --host ::1, -c as the total split across -np, -c 0 = the model's
 *   context. */
#include <jansson.h>

#include "server_harness.h"

#define MAXOUT (1 << 20)
static char BIN[4096], TPL[128];
static const char *DEF = "models/default/target", *DRAFTER = "models/default/drafter";
static test_server SRV;
static char *out;

/* METHOD path (body or NULL) on the server by name; the reply into out; the HTTP status */
static int http(const char *host, int port, const char *method, const char *path, const char *body) {
    static int n;
    char bf[128], cmd[1024];
    snprintf(bf, sizeof bf, "/tmp/specula-native-%d-%d.json", (int)getpid(), n++);
    FILE *f = fopen(bf, "w");
    if (f) fputs(body ? body : "", f), fclose(f);
    snprintf(cmd, sizeof cmd, "curl -sg -X %s -H 'Content-Type: application/json' %s%s -w '\\n%%{http_code}' http://%s:%d%s",
             method, body ? "--data-binary @" : "", body ? bf : "", host, port, path);
    harness_run(cmd, out, MAXOUT);
    unlink(bf);
    char *nl = strrchr(out, '\n');
    int st = nl ? atoi(nl + 1) : 0;
    if (nl) *nl = 0;
    return st;
}
#define POST(path, body) http("localhost", SRV.port, "POST", path, body)
#define GET(path) http("localhost", SRV.port, "GET", path, NULL)

static json_t *reply_json(void) { return json_loads(out, 0, NULL); }

/* the ids of a JSON array as "a,b,c" */
static void ids_csv(json_t *a, char *dst, size_t cap) {
    size_t at = 0;
    dst[0] = 0;
    for (size_t i = 0; i < json_array_size(a) && at + 16 < cap; i++)
        at += (size_t)snprintf(dst + at, cap - at, i ? ",%lld" : "%lld", (long long)json_integer_value(json_array_get(a, i)));
}

static void test_logit_bias_matches_cli(void) {
    const char *prompt = "2,547,3029,270,547,2188,270,270,1132";
    char body[1024], srv_ids[4096], cli_ids[4096];
    /* object form with a ban and a boost, and llama-server's array form with false */
    const char *forms[] = {"{\"287\": -100, \"292\": 3}", "[[287, false], [292, 3]]"};
    for (int f = 0; f < 2; f++) {
        snprintf(body, sizeof body,
                 "{\"prompt\": [%s], \"max_tokens\": 24, \"temperature\": 0, \"return_tokens\": true, "
                 "\"presence_penalty\": 0.4, \"frequency_penalty\": 0.3, \"logit_bias\": %s}", prompt, forms[f]);
        CHECK(POST("/v1/completions", body) == 200, "completion: %s", out);
        json_t *o = reply_json();
        ids_csv(json_object_get(o, "tokens"), srv_ids, sizeof srv_ids);
        json_t *tm = json_object_get(o, "timings");
        CHECK(json_integer_value(json_object_get(tm, "draft_n")) > 0, "no drafts verified: %s", out);
        json_decref(o);
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids %s -n 24 -t 2 --temp 0 --json --presence-penalty 0.4 "
                 "--frequency-penalty 0.3 -l 287%s -l 292+3 2>/dev/null", BIN, DEF, prompt, f ? "-inf" : "-100");
        harness_run(cmd, out, MAXOUT);
        o = reply_json();
        ids_csv(json_object_get(o, "tokens"), cli_ids, sizeof cli_ids);
        json_decref(o);
        CHECK(srv_ids[0] && !strcmp(srv_ids, cli_ids), "form %d: server %s != CLI %s", f, srv_ids, cli_ids);
        /* unbiased, this prompt continues 287,282,428,...: the ban and the boost show */
        CHECK(!strstr(srv_ids, "287") && !strncmp(srv_ids, "292,", 4), "form %d: the biases did not apply: %s", f, srv_ids);
    }
    CHECK(POST("/v1/completions", "{\"prompt\": \"x\", \"logit_bias\": {\"99999999\": 1}}") == 400 &&
              strstr(out, "logit_bias"), "out-of-vocabulary bias: %s", out);
    CHECK(POST("/v1/completions", "{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}") == 400 && strstr(out, "abc"),
          "bad key: %s", out);
}

static void test_llama_fields(void) {
    const char *body = "{\"prompt\": \"def fib(n):\", \"n_predict\": 5, \"temperature\": 0, \"repeat_penalty\": 1.1, "
                       "\"samplers\": [\"top_k\", \"temperature\"], \"id_slot\": 1, \"typical_p\": 1, \"mirostat\": 0, "
                       "\"timings_per_token\": false, \"dry_multiplier\": 0}";
    CHECK(POST("/v1/completions", body) == 200, "llama-server fields: %s", out);
    json_t *o = reply_json();
    CHECK(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")) == 5, "n_predict 5: %s", out);
    json_decref(o);
    CHECK(POST("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n_predict\": 3, "
                                        "\"id_slot\": 0, \"samplers\": \"kt\"}") == 200 &&
              strstr(out, "\"completion_tokens\":3"), "chat n_predict: %s", out);
    CHECK(POST("/v1/completions", "{\"prompt\": \"x\", \"typical_p\": 0.5}") == 400 && strstr(out, "typical_p"),
          "typical_p 0.5: %s", out);
    CHECK(POST("/v1/completions", "{\"prompt\": \"x\", \"no_such_field\": 1}") == 400 && strstr(out, "no_such_field"),
          "unknown field: %s", out);
}

static void test_template_kwargs(void) {
    const char *msgs = "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]";
    char body[512];
    snprintf(body, sizeof body, "{%s}", msgs);
    CHECK(POST("/apply-template", body) == 200 && strstr(out, "[srv]"), "server kwargs: %s", out);
    snprintf(body, sizeof body, "{%s, \"chat_template_kwargs\": {\"greeting\": \"request\"}}", msgs);
    CHECK(POST("/apply-template", body) == 200 && strstr(out, "[request]") && !strstr(out, "[srv]"), "request kwargs: %s",
          out);
    /* a chat request renders with them: a longer greeting, a longer prompt */
    snprintf(body, sizeof body, "{%s, \"max_tokens\": 1}", msgs);
    CHECK(POST("/v1/chat/completions", body) == 200, "chat: %s", out);
    json_t *o = reply_json();
    long a = (long)json_integer_value(json_object_get(json_object_get(o, "usage"), "prompt_tokens"));
    json_decref(o);
    snprintf(body, sizeof body, "{%s, \"max_tokens\": 1, \"chat_template_kwargs\": {\"greeting\": \"a much longer greeting\"}}",
             msgs);
    CHECK(POST("/v1/chat/completions", body) == 200, "chat kwargs: %s", out);
    o = reply_json();
    long b = (long)json_integer_value(json_object_get(json_object_get(o, "usage"), "prompt_tokens"));
    json_decref(o);
    CHECK(a > 0 && b > a, "prompt tokens %ld with the server's kwargs, %ld with the request's", a, b);
    CHECK(POST("/v1/completions", "{\"prompt\": \"x\", \"chat_template_kwargs\": {}}") == 400, "kwargs on completions: %s",
          out);
}

static void test_native_routes(void) {
    CHECK(POST("/completion", "{\"prompt\": \"def fib(n):\", \"n_predict\": 4, \"temperature\": 0}") == 200, "%s", out);
    json_t *o = reply_json();
    CHECK(json_is_string(json_object_get(o, "content")) && json_is_true(json_object_get(o, "stop")) &&
              json_integer_value(json_object_get(o, "tokens_predicted")) == 4 &&
              !strcmp(json_string_value(json_object_get(o, "stop_type")), "limit") && json_object_get(o, "timings"),
          "/completion: %s", out);
    json_decref(o);
    CHECK(POST("/completion", "{\"prompt\": \"def fib(n):\", \"n_predict\": 3, \"temperature\": 0, \"stream\": true}") == 200,
          "stream: %s", out);
    CHECK(strstr(out, "data: {\"content\"") && strstr(out, "\"stop\":true") && !strstr(out, "[DONE]"), "stream: %s", out);
    CHECK(GET("/props") == 200, "/props: %s", out);
    o = reply_json();
    CHECK(json_integer_value(json_object_get(o, "total_slots")) == 2 &&
              json_integer_value(json_object_get(json_object_get(o, "default_generation_settings"), "n_ctx")) == 512,
          "/props: %s", out);
    json_decref(o);
    CHECK(GET("/slots") == 200, "/slots: %s", out);
    o = reply_json();
    CHECK(json_array_size(o) == 2 && json_is_false(json_object_get(json_array_get(o, 0), "is_processing")), "/slots: %s", out);
    json_decref(o);
    CHECK(POST("/slots", "{}") == 405, "POST /slots: %s", out);
    /* /tokenize: no BOS by default (llama-server), BOS with add_special, pieces that spell the text */
    CHECK(POST("/tokenize", "{\"content\": \"def fib\"}") == 200 && !strstr(out, "[2,"), "no BOS: %s", out);
    CHECK(POST("/tokenize", "{\"content\": \"def fib\", \"add_special\": true}") == 200 && strstr(out, "[2,"), "BOS: %s", out);
    CHECK(POST("/tokenize", "{\"content\": \"def fib\", \"with_pieces\": true}") == 200, "pieces: %s", out);
    o = reply_json();
    json_t *t = json_object_get(o, "tokens");
    char spelled[256] = "";
    for (size_t i = 0; i < json_array_size(t); i++) {
        json_t *p = json_array_get(t, i);
        CHECK(json_is_integer(json_object_get(p, "id")), "piece %zu without id: %s", i, out);
        strncat(spelled, json_string_value(json_object_get(p, "piece")) ? json_string_value(json_object_get(p, "piece")) : "?",
                sizeof spelled - strlen(spelled) - 1);
    }
    CHECK(!strcmp(spelled, "def fib"), "pieces spell '%s': %s", spelled, out);
    json_decref(o);
}

static void test_hosts_and_ctx(void) {
    CHECK(server_log_has(&SRV, "2 slots of 512 positions (-c 1024)"), "-c 1024 -np 2 (log %s)", SRV.log);
    test_server s6;
    if (server_start(&s6, BIN, "-m models/default/target --host ::1 -np 2 -c 0 -t 1")) {
        CHECK(server_log_has(&s6, "cannot listen"), "--host ::1 did not start for another reason (log %s)", s6.log);
        printf("note: no IPv6 loopback here; --host ::1 not checked\n");
        return;
    }
    CHECK(http("[::1]", s6.port, "GET", "/health", NULL) == 200, "--host ::1: /health: %s", out);
    CHECK(server_log_has(&s6, "2 slots of 4096 positions (-c 8192)"), "-c 0: the model's 8192 split (log %s)", s6.log);
    CHECK(server_log_has(&s6, "listening on http://\\[::1\\]"), "::1 in the log (log %s)", s6.log);
    CHECK(server_stop(&s6) == 0, "::1 server exit status");
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    out = malloc(MAXOUT);
    snprintf(TPL, sizeof TPL, "/tmp/specula-native-tpl-%d.jinja", (int)getpid());
    FILE *f = fopen(TPL, "w");
    if (f) {
        fputs("{%- for m in messages %}# {{ m.role }}: {{ m.content }}\n{% endfor %}"
              "{%- if greeting is defined %}# [{{ greeting }}]\n{% endif %}", f);
        fclose(f);
    }
    char args[1024];
    snprintf(args, sizeof args,
             "-m %s --host localhost -np 2 -c 1024 -t 2 --spec-max-slots 0 --spec dspark -md %s --draft-max 6 "
             "--chat-template %s --chat-template-kwargs '{\"greeting\": \"srv\"}'", DEF, DRAFTER, TPL);
    if (server_start(&SRV, BIN, args)) {
        printf("FAIL server_start (log %s)\n", SRV.log);
        return 1;
    }
    RUN(test_logit_bias_matches_cli);
    RUN(test_llama_fields);
    RUN(test_template_kwargs);
    RUN(test_native_routes);
    RUN(test_hosts_and_ctx);
    CHECK(server_stop(&SRV) == 0, "server exit status");
    unlink(TPL);
    free(out);
    return harness_done("test_server_native");
}
