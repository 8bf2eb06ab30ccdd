/* test_server_grammar.c — structured output through `specula serve` and `specula generate`: seeded
 * sampled requests against five JSON schemas all give JSON the schema accepts (checked by
 * sp_json_schema_validate), greedy speculative output equals plain constrained output (server and
 * CLI), llama-server's grammar field, and bad grammars / schemas are 400s naming what is wrong.
 * Every drafter that draws from logits takes the grammar's constraint: none of its drafts is cut
 * (CLI, EAGLE-3, draft model, assistant, mlx-bun DSpark), and tokens_from (server timings, generate
 * --json) sums to the completion tokens. A server without a drafter drafts the forced tokens too. */
#include <jansson.h>

#include "sample/json_schema.h"
#include "server_harness.h"

#define MAXOUT (1 << 20)
static char BIN[4096];
static test_server SRV;

static const char *SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3}},\"required\":[\"name\",\"age\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"inner\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"
    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"x\"]}},\"required\":[\"inner\"]}",
    "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"pt\"},"
    "\"v\":{\"type\":[\"null\",\"boolean\"]}},\"required\":[\"kind\"]}]}",
    "{\"type\":\"object\",\"properties\":{\"list\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},"
    "\"minItems\":1,\"maxItems\":2}},\"required\":[\"list\"]}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[1,\"two\",null]},\"b\":{\"oneOf\":[{\"type\":\"null\"},"
    "{\"type\":\"string\",\"maxLength\":4}]}},\"required\":[\"a\",\"b\"]}",
};
#define NS 5

typedef struct {
    FILE *f;
    char body[96];
} pending;

static int post_start(pending *p, const char *path, const char *body) {
    static int n;
    snprintf(p->body, sizeof p->body, "/tmp/specula-gram-body-%d-%d.json", (int)getpid(), n++);
    FILE *f = fopen(p->body, "w");
    if (!f) return -1;
    fputs(body, f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "curl -s -X POST -H 'Content-Type: application/json' --data-binary @%s -w '\\n%%{http_code}' "
             "http://127.0.0.1:%d%s", p->body, SRV.port, path);
    p->f = popen(cmd, "r");
    return p->f ? 0 : -1;
}

/* the reply (malloc'd, the status line cut off) and its status */
static char *post_finish(pending *p, int *status) {
    char *out = malloc(MAXOUT);
    size_t n = p->f ? fread(out, 1, MAXOUT - 1, p->f) : 0;
    out[n] = 0;
    if (p->f) pclose(p->f);
    unlink(p->body);
    char *nl = strrchr(out, '\n');
    *status = nl ? atoi(nl + 1) : 0;
    if (nl) *nl = 0;
    return out;
}

static char *chat_body(int si, double temp, int seed, int spec) {
    char *b = malloc(8192);
    snprintf(b, 8192,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Describe item %d as JSON.\"}],\"max_tokens\":160,"
             "\"temperature\":%g,\"seed\":%d,\"speculative\":%s,\"return_tokens\":true,"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"schema\":%s}}}",
             seed, temp, seed, spec ? "true" : "false", SCHEMAS[si]);
    return b;
}

static const char *reply_content(json_t *o) {
    return json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message"),
                                             "content"));
}

/* tokens_from of a generate --json stats object or the server's timings: each count into from[3] (forced, drafter, target);
 * 1 when all three are present */
static int tokens_from(json_t *stats, json_int_t from[3]) {
    json_t *tf = json_object_get(stats, "tokens_from");
    static const char *const K[3] = {"forced", "drafter", "target"};
    int ok = json_is_object(tf);
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(tf, K[i]);
        ok = ok && json_is_integer(v);
        from[i] = json_integer_value(v);
    }
    return ok;
}

/* 50 seeded sampled speculative requests (10 per schema, 8 at a time): each content validates */
static void test_schema_sampled(void) {
    enum { N_ALL = 50, W = 8 };
    const int N = HARNESS_SANITIZED ? 2 * W : N_ALL; /* the sanitizer build: two batches */
    pending p[N_ALL];
    int ok = 0, forced = 0;
    for (int b = 0; b < N; b += W) {
        for (int i = b; i < N && i < b + W; i++) {
            char *body = chat_body(i % NS, 1.0, 100 + i, 1);
            CHECK(post_start(&p[i], "/v1/chat/completions", body) == 0, "curl");
            free(body);
        }
        for (int i = b; i < N && i < b + W; i++) {
            int st;
            char *out = post_finish(&p[i], &st);
            json_t *o = json_loads(out, 0, NULL), *schema = json_loads(SCHEMAS[i % NS], 0, NULL);
            const char *c = reply_content(o);
            json_t *v = c ? json_loads(c, JSON_DECODE_ANY, NULL) : NULL;
            int good = st == 200 && v && sp_json_schema_validate(schema, v);
            CHECK(good, "request %d (schema %d): status %d content '%s'", i, i % NS, st, c ? c : out);
            ok += good;
            json_t *tm = json_object_get(o, "timings");
            forced += (int)json_integer_value(json_object_get(tm, "draft_n_grammar_forced"));
            json_int_t from[3], ct = json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens"));
            CHECK(tokens_from(tm, from) && ct > 0 && from[0] + from[1] + from[2] == ct,
                  "request %d: timings.tokens_from does not sum to the %lld completion tokens: %s", i, (long long)ct, out);
            json_decref(v), json_decref(schema), json_decref(o);
            free(out);
        }
    }
    CHECK(ok == N, "%d of %d valid", ok, N);
    printf("  %d sampled requests: %d drafts forced by the grammar\n", N, forced);
    CHECK(forced > 0, "no draft was forced by the grammar");
}

static char *tokens_of(const char *out) {
    json_t *o = json_loads(out, 0, NULL);
    char *t = json_dumps(json_object_get(o, "tokens"), JSON_COMPACT);
    json_decref(o);
    return t;
}

/* greedy: speculative == plain, per schema */
static void test_greedy_spec_is_plain(void) {
    for (int si = 0; si < NS; si++) {
        pending a, b;
        char *ba = chat_body(si, 0, 1, 1), *bb = chat_body(si, 0, 1, 0);
        post_start(&a, "/v1/chat/completions", ba);
        post_start(&b, "/v1/chat/completions", bb);
        int sa, sb;
        char *oa = post_finish(&a, &sa), *ob = post_finish(&b, &sb);
        char *ta = tokens_of(oa), *tb = tokens_of(ob);
        CHECK(sa == 200 && sb == 200 && ta && tb && !strcmp(ta, tb), "schema %d: spec %s vs plain %s", si,
              ta ? ta : oa, tb ? tb : ob);
        /* the server's drafter (DSpark) draws from grammar-masked logits: the grammar cuts nothing */
        json_t *o = json_loads(oa, 0, NULL), *tm = json_object_get(o, "timings");
        CHECK(json_is_integer(json_object_get(tm, "draft_n_grammar_cut")) &&
                  json_integer_value(json_object_get(tm, "draft_n_grammar_cut")) == 0,
              "schema %d: drafts cut by the grammar: %s", si, oa);
        json_decref(o);
        free(ta), free(tb), free(oa), free(ob), free(ba), free(bb);
    }
}

/* A second server (ARGS) answers each schema's greedy request with the tokens of the first. plain: it
 * has no drafter, yet drafts the tokens the grammar forces (no drafter call, verified in the same
 * forward): tokens_from counts forced and target tokens only. Else it verifies token trees, which
 * under a grammar the drafter builds from grammar-masked logits: nothing is cut; and a sampled
 * request there (chains under a grammar) gives JSON the schema accepts. */
static void second_server_same(const char *args, int plain) {
    test_server o2;
    CHECK(server_start(&o2, BIN, args) == 0, "server_start %s (log %s)", args, o2.log);
    if (!o2.port) return;
    json_int_t forced_all = 0, drafter_all = 0;
    for (int si = 0; si < NS; si++) {
        pending a, b;
        char *body = chat_body(si, 0, 1, 1);
        post_start(&a, "/v1/chat/completions", body);
        int sa, sb;
        char *oa = post_finish(&a, &sa);
        int port = SRV.port;
        SRV.port = o2.port;
        post_start(&b, "/v1/chat/completions", body);
        char *ob = post_finish(&b, &sb);
        SRV.port = port;
        char *ta = tokens_of(oa), *tb = tokens_of(ob);
        CHECK(sa == 200 && sb == 200 && ta && tb && !strcmp(ta, tb), "schema %d: first server %s vs %s: %s", si,
              ta ? ta : oa, args, tb ? tb : ob);
        json_t *o = json_loads(ob, 0, NULL), *tm = json_object_get(o, "timings");
        json_int_t from[3], ct = json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens"));
        CHECK(tokens_from(tm, from) && ct > 0 && (!plain || from[1] == 0) && from[0] + from[1] + from[2] == ct,
              "schema %d: %s: tokens_from: %s", si, args, ob);
        CHECK(plain || json_integer_value(json_object_get(tm, "draft_n_grammar_cut")) == 0, "schema %d: tree drafts cut: %s",
              si, ob);
        forced_all += from[0], drafter_all += from[1];
        json_decref(o);
        free(ta), free(tb), free(oa), free(ob), free(body);
    }
    printf("  %s: tokens forced by the grammar %lld, from the drafter %lld over %d schemas\n", args,
           (long long)forced_all, (long long)drafter_all, NS);
    CHECK(plain ? forced_all > 0 : drafter_all > 0, "%s: no token %s", args, plain ? "forced" : "from the drafter");
    if (!plain) { /* sampled under the grammar: chains, and valid JSON */
        pending c;
        char *body = chat_body(0, 1.0, 5, 1);
        int port = SRV.port, sc;
        SRV.port = o2.port;
        post_start(&c, "/v1/chat/completions", body);
        char *oc = post_finish(&c, &sc);
        SRV.port = port;
        json_t *o = json_loads(oc, 0, NULL), *schema = json_loads(SCHEMAS[0], 0, NULL);
        const char *ct = o ? reply_content(o) : NULL;
        json_t *v = ct ? json_loads(ct, JSON_DECODE_ANY, NULL) : NULL;
        CHECK(sc == 200 && v && sp_json_schema_validate(schema, v), "sampled on %s: %d %s", args, sc, oc);
        json_decref(v), json_decref(schema), json_decref(o);
        free(oc), free(body);
    }
    CHECK(server_stop(&o2) == 0, "%s: server exit", args);
}

static void test_plain_server_forced(void) { second_server_same("--spec none -np 2 -c 1024 -t 2", 1); }

static void test_tree_server_grammar(void) { second_server_same("-np 2 -c 1024 -t 2 --spec-max-slots 0 --tree 8", 0); }

/* the CLI: --json-schema with the drafter gives the tokens of the plain run, and reports forced drafts */
static void test_cli_spec_is_plain(void) {
    char *a = malloc(MAXOUT), *b = malloc(MAXOUT), sf[64];
    snprintf(sf, sizeof sf, "/tmp/specula-gram-schema-%d.json", (int)getpid()); /* concurrent runs apart */
    FILE *f = fopen(sf, "w");
    fputs(SCHEMAS[0], f);
    fclose(f);
    const char *base = "generate -m models/default/target -p 'Person:' -n 80 -t 2 --temp 0 --json -q";
    int ra = harness_runf(a, MAXOUT, "%s %s -j %s --spec dspark -md models/default/drafter --spec-always 2>&1", BIN,
                          base, sf);
    int rb = harness_runf(b, MAXOUT, "%s %s -j %s 2>&1", BIN, base, sf);
    json_t *oa = json_loads(a, 0, NULL), *ob = json_loads(b, 0, NULL);
    char *ta = json_dumps(json_object_get(oa, "tokens"), JSON_COMPACT), *tb = json_dumps(json_object_get(ob, "tokens"), JSON_COMPACT);
    CHECK(ra == 0 && rb == 0 && ta && tb && !strcmp(ta, tb), "spec %s vs plain %s", a, b);
    /* DSpark draws its drafts from grammar-masked logits: none is cut by the grammar */
    json_t *sst = json_object_get(oa, "stats");
    CHECK(json_integer_value(json_object_get(sst, "drafted")) > 0 && json_is_integer(json_object_get(sst, "grammar_cut")) &&
              json_integer_value(json_object_get(sst, "grammar_cut")) == 0,
          "drafts under the schema: %s", a);
    char text[4096]; /* the text without the closing end-of-generation token's own text */
    snprintf(text, sizeof text, "%s", json_string_value(json_object_get(ob, "text")) ? json_string_value(json_object_get(ob, "text")) : "");
    char *eos = strstr(text, "<eos>");
    if (eos) *eos = 0;
    json_t *schema = json_loads(SCHEMAS[0], 0, NULL), *v = json_loads(text, JSON_DECODE_ANY, NULL);
    CHECK(v && sp_json_schema_validate(schema, v), "CLI text '%s'", b);
    json_decref(v), json_decref(schema), json_decref(oa), json_decref(ob);
    free(ta), free(tb);
    /* the last '!' is the one text the grammar allows there: drafted without the drafter, and the
     * tokens are still the plain ones */
    const char *g3 = "--grammar 'root ::= ([a-z] \"!\"){3}'";
    ra = harness_runf(a, MAXOUT, "%s %s %s --spec dspark -md models/default/drafter --spec-always 2>&1", BIN, base, g3);
    rb = harness_runf(b, MAXOUT, "%s %s %s 2>&1", BIN, base, g3);
    oa = json_loads(a, 0, NULL), ob = json_loads(b, 0, NULL);
    ta = json_dumps(json_object_get(oa, "tokens"), JSON_COMPACT), tb = json_dumps(json_object_get(ob, "tokens"), JSON_COMPACT);
    CHECK(ra == 0 && rb == 0 && ta && tb && !strcmp(ta, tb), "spec %s vs plain %s", a, b);
    CHECK(json_integer_value(json_object_get(json_object_get(oa, "stats"), "grammar_forced")) >= 1, "forced: %s", a);
    /* plain decoding under the grammar verifies the forced tokens in the same forward too */
    json_int_t fb[3];
    CHECK(tokens_from(json_object_get(ob, "stats"), fb) && fb[0] >= 1 && fb[0] + fb[2] == (json_int_t)json_array_size(json_object_get(ob, "tokens")),
          "plain under the grammar: no token forced: %s", b);
    const char *txt = json_string_value(json_object_get(ob, "text"));
    CHECK(txt && strlen(txt) >= 6 && txt[1] == '!' && txt[3] == '!' && txt[5] == '!', "text %s", b);
    json_decref(oa), json_decref(ob);
    free(ta), free(tb);
    /* errors: exit 2 with a message */
    int rc = harness_runf(a, MAXOUT, "%s %s --grammar 'root ::= root \"x\"' 2>&1", BIN, base);
    CHECK(rc != 0 && strstr(a, "left-recursive"), "%d %s", rc, a);
    rc = harness_runf(a, MAXOUT, "%s %s -j '{\"type\":\"string\",\"pattern\":\"x\"}' 2>&1", BIN, base);
    CHECK(rc != 0 && strstr(a, "'pattern' is not supported"), "%d %s", rc, a);
    unlink(sf);
    free(a), free(b);
}

/* the drafters that take the grammar's constraint besides DSpark (a random EAGLE-3 drafter with a
 * reduced draft vocabulary, the target as its own draft model, a random Gemma-4 assistant, a random
 * mlx-bun DSpark): greedy speculative output under the schema is the plain output and the grammar
 * cuts no draft; sampled, the text validates and nothing is cut; tokens_from sums to the tokens
 * emitted in every run */
static void test_cli_masked_drafters(void) {
    char dir[] = "/tmp/specula-gram-drafters-XXXXXX", *a = malloc(MAXOUT), sf[64];
    snprintf(sf, sizeof sf, "/tmp/specula-gram-schema2-%d.json", (int)getpid());
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    FILE *f = fopen(sf, "w");
    fputs(SCHEMAS[0], f);
    fclose(f);
    static const char *const MAKE[3][2] = {{"e3", "--arch eagle3 --preset specforge --set draft_vocab_size=4096"},
                                           {"asst", "--arch gemma4_assistant --preset centroid"},
                                           {"mb", "--arch dspark --layout mlx-bun"}};
    for (int k = 0; k < 3; k++) {
        int rc = harness_runf(a, MAXOUT, "%s new-drafter %s -m models/default/target --seed 3 -o %s/%s 2>&1", BIN,
                              MAKE[k][1], dir, MAKE[k][0]);
        CHECK(rc == 0, "new-drafter %s: %s", MAKE[k][0], a);
    }
    const char *base = "generate -m models/default/target -p 'Person:' -n 80 -t 2 --json -q";
    int rc = harness_runf(a, MAXOUT, "%s %s --temp 0 -j %s 2>&1", BIN, base, sf);
    json_t *plain = json_loads(a, 0, NULL);
    json_int_t from[3];
    json_int_t emitted = json_integer_value(json_object_get(json_object_get(plain, "stats"), "emitted"));
    /* plain decoding: the target's tokens, and those the grammar forced (verified in the same forward) */
    CHECK(rc == 0 && plain && tokens_from(json_object_get(plain, "stats"), from) && from[0] > 0 && from[1] == 0 &&
              from[0] + from[2] == emitted && emitted > 0,
          "plain: %s", a);
    char *tp = json_dumps(json_object_get(plain, "tokens"), JSON_COMPACT);
    struct {
        const char *kind, *md;
    } K[4] = {{"eagle3", "e3"}, {"draft", NULL}, {"assistant", "asst"}, {"mlx-dspark", "mb"}};
    for (int k = 0; k < 4; k++) {
        char md[256];
        if (K[k].md) snprintf(md, sizeof md, "%s/%s", dir, K[k].md);
        else snprintf(md, sizeof md, "models/default/target");
        for (int sampled = 0; sampled < 2; sampled++) {
            rc = harness_runf(a, MAXOUT, "%s %s %s -j %s --spec %s -md %s --spec-always 2>&1", BIN, base,
                              sampled ? "--temp 1 --seed 7" : "--temp 0", sf, K[k].kind, md);
            json_t *o = json_loads(a, 0, NULL), *st = json_object_get(o, "stats");
            char *t = json_dumps(json_object_get(o, "tokens"), JSON_COMPACT);
            json_int_t n = json_integer_value(json_object_get(st, "emitted"));
            int have = tokens_from(st, from);
            printf("  %-10s %s: drafted %lld, cut %lld, tokens from grammar %lld / drafter %lld / target %lld\n",
                   K[k].kind, sampled ? "sampled" : "greedy ", (long long)json_integer_value(json_object_get(st, "drafted")),
                   (long long)json_integer_value(json_object_get(st, "grammar_cut")), (long long)from[0],
                   (long long)from[1], (long long)from[2]);
            CHECK(rc == 0 && o && json_integer_value(json_object_get(st, "drafted")) > 0 &&
                      json_is_integer(json_object_get(st, "grammar_cut")) &&
                      json_integer_value(json_object_get(st, "grammar_cut")) == 0,
                  "%s (%s): drafts cut by the grammar: %s", K[k].kind, sampled ? "sampled" : "greedy", a);
            CHECK(have && n > 0 && from[0] + from[1] + from[2] == n && from[1] > 0, "%s tokens_from: %s", K[k].kind, a);
            if (!sampled) {
                CHECK(t && tp && !strcmp(t, tp), "%s: speculative %s vs plain %s", K[k].kind, t ? t : a, tp);
            } else {
                char text[4096]; /* without the closing end-of-generation token's own text */
                const char *s = json_string_value(json_object_get(o, "text"));
                snprintf(text, sizeof text, "%s", s ? s : "");
                char *eos = strstr(text, "<eos>");
                if (eos) *eos = 0;
                json_t *schema = json_loads(SCHEMAS[0], 0, NULL), *v = json_loads(text, JSON_DECODE_ANY, NULL);
                CHECK(v && sp_json_schema_validate(schema, v), "%s sampled text '%s'", K[k].kind, text);
                json_decref(v), json_decref(schema);
            }
            free(t);
            json_decref(o);
        }
    }
    /* greedy token trees under the schema: the plain tokens; DSpark and EAGLE-3 build each node's
     * children from grammar-masked logits (nothing cut); the suffix drafter's nodes are not masked
     * (the walk never follows a forbidden one) */
    struct {
        const char *args;
        int masked;
    } T[3] = {{"--spec dspark -md models/default/drafter --tree 8", 1}, {"--spec eagle3 -md %s/e3 --tree 8 --tree-k 2", 1},
              {"--spec dspark+suffix -md models/default/drafter --tree 8", 0}};
    for (int k = 0; k < 3; k++) {
        char args[512];
        snprintf(args, sizeof args, T[k].args, dir);
        rc = harness_runf(a, MAXOUT, "%s %s --temp 0 -j %s %s --spec-always 2>&1", BIN, base, sf, args);
        json_t *o = json_loads(a, 0, NULL), *st = json_object_get(o, "stats");
        char *t = json_dumps(json_object_get(o, "tokens"), JSON_COMPACT);
        int have = tokens_from(st, from);
        printf("  tree %-55s: drafted %lld, cut %lld, tokens from grammar %lld / drafter %lld / target %lld\n", args,
               (long long)json_integer_value(json_object_get(st, "drafted")),
               (long long)json_integer_value(json_object_get(st, "grammar_cut")), (long long)from[0], (long long)from[1],
               (long long)from[2]);
        CHECK(rc == 0 && o && t && tp && !strcmp(t, tp), "tree %s: speculative %s vs plain %s", args, t ? t : a, tp);
        CHECK(have && (!T[k].masked || json_integer_value(json_object_get(st, "grammar_cut")) == 0),
              "tree %s: cut or no tokens_from: %s", args, a);
        free(t);
        json_decref(o);
    }
    free(tp);
    json_decref(plain);
    unlink(sf);
    rc = harness_runf(a, MAXOUT, "rm -rf '%s'", dir);
    CHECK(rc == 0, "cleanup");
    free(a);
}

/* llama-server's grammar field on a completion */
static void test_grammar_field(void) {
    pending p;
    post_start(&p, "/v1/completions",
               "{\"prompt\":\"Answer:\",\"max_tokens\":20,\"temperature\":1,\"seed\":3,"
               "\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") \\\"!\\\"\"}");
    int st;
    char *out = post_finish(&p, &st);
    json_t *o = json_loads(out, 0, NULL);
    const char *t = json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text"));
    CHECK(st == 200 && t && (!strcmp(t, "yes!") || !strcmp(t, "no!")), "%d %s", st, out);
    json_decref(o);
    free(out);
}

static void expect_400(const char *path, const char *body, const char *want) {
    pending p;
    post_start(&p, path, body);
    int st;
    char *out = post_finish(&p, &st);
    CHECK(st == 400 && strstr(out, want), "%s: %d %s", body, st, out);
    free(out);
}

static void test_errors(void) {
    expect_400("/v1/completions", "{\"prompt\":\"a\",\"grammar\":\"root ::= x\\nx ::= x \\\"a\\\"\"}", "left-recursive");
    expect_400("/v1/completions", "{\"prompt\":\"a\",\"grammar\":\"root ::= \\\"a\"}", "unterminated string");
    expect_400("/v1/completions", "{\"prompt\":\"a\",\"json_schema\":{\"type\":\"integer\",\"minimum\":1}}",
               "'minimum' is not supported");
    expect_400("/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
               "\"json_schema\":{\"schema\":{\"$ref\":\"#/a\"}}}}",
               "'$ref' is not supported");
    expect_400("/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}",
               "response_format");
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    if (server_start(&SRV, BIN, "-np 4 -c 1024 -t 2 --spec-max-slots 0")) {
        printf("FAIL server_start (log %s)\n", SRV.log);
        return 1;
    }
    RUN(test_errors);
    RUN(test_grammar_field);
    RUN(test_greedy_spec_is_plain);
    RUN(test_schema_sampled);
    RUN(test_plain_server_forced);
    RUN(test_tree_server_grammar);
    RUN(test_cli_spec_is_plain);
    RUN(test_cli_masked_drafters);
    CHECK(server_stop(&SRV) == 0, "server exit");
    return harness_done("test_server_grammar");
}
