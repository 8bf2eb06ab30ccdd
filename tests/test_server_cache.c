/* test_server_cache.c — prompt caching in the server (`cache_prompt`): a slot keeps its KV cache
 * after a request, and the next request that shares a prefix with it forwards only the rest.
 * The output must not change, bit for bit:
 * - two 6-turn conversations (token-id prompts: each turn's prompt is the last prompt, its reply
 *   and a new user part), sent turn by turn side by side on a 2-slot server, once with the cache
 *   and once with "cache_prompt": false, give identical tokens and text, on a sliding-window target
 *   (gemma4 tiny: window 16) whose ring wraps, for plain decoding, DSpark, EAGLE-3 and n-gram;
 *   one chat greedy, the other sampled with a seed; and the embedded pair (window 128, a trained
 *   DSpark drafter, whose drafts depend on the context rows the slot keeps with its cache), and
 *   DSpark with q8_0 K / f16 V caches (-ctk / -ctv);
 * - turn 4 of the first chat edits the last reply (the cache is cut back within the ring's
 *   rollback reach: some positions reused), turn 6 of the second goes back to its first prompt
 *   (the ring recycled what the cut would expose: nothing reused, the slot starts over);
 * - usage.prompt_tokens_details.cached_tokens and timings.cache_n report the reuse, /metrics
 *   counts it, and a chat request through the chat template reuses the previous turn. */
#include <jansson.h>

#include "server_harness.h"

#define MAXOUT (1 << 20)
#define TURNS 6
#define NEW 12  /* tokens per reply */
#define USER 24 /* tokens per user part: the ring (16 + 128 slots) wraps by turn 5 */
static char BIN[4096], TMP[64] = "/tmp/specula-srvcache-XXXXXX";

/* POST body to path; the reply's JSON (NULL on a failed request). */
static json_t *post(int port, const char *path, const char *body) {
    static int n;
    char file[128], cmd[1024];
    snprintf(file, sizeof file, "/tmp/specula-cache-body-%d-%d.json", (int)getpid(), n++);
    FILE *f = fopen(file, "w");
    if (!f) return NULL;
    fputs(body, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "curl -s -X POST -H 'Content-Type: application/json' --data-binary @%s -w '\\n%%{http_code}' "
             "http://127.0.0.1:%d%s",
             file, port, path);
    char *out = malloc(MAXOUT);
    harness_run(cmd, out, MAXOUT);
    unlink(file);
    char *nl = strrchr(out, '\n');
    json_t *o = NULL;
    if (nl && atoi(nl + 1) == 200) {
        *nl = 0;
        o = json_loads(out, 0, NULL);
    } else {
        fprintf(stderr, "  request failed: %s\n", out);
    }
    free(out);
    return o;
}

typedef struct {
    FILE *f;
    char file[128];
} pending;

static int post_start(pending *p, int port, const char *body) {
    static int n;
    snprintf(p->file, sizeof p->file, "/tmp/specula-cache-bg-%d-%d.json", (int)getpid(), n++);
    FILE *f = fopen(p->file, "w");
    if (!f) return -1;
    fputs(body, f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "curl -s -X POST -H 'Content-Type: application/json' --data-binary @%s -w '\\n%%{http_code}' "
             "http://127.0.0.1:%d/v1/completions",
             p->file, port);
    p->f = popen(cmd, "r");
    return p->f ? 0 : -1;
}

static json_t *post_finish(pending *p) {
    char *out = malloc(MAXOUT);
    size_t n = fread(out, 1, MAXOUT - 1, p->f);
    out[n] = 0;
    pclose(p->f);
    unlink(p->file);
    char *nl = strrchr(out, '\n');
    json_t *o = NULL;
    if (nl && atoi(nl + 1) == 200) {
        *nl = 0;
        o = json_loads(out, 0, NULL);
    } else {
        fprintf(stderr, "  request failed: %s\n", out);
    }
    free(out);
    return o;
}

/* one chat's state: the prompt so far, and per turn the reply's ids, text and cached count */
typedef struct {
    int32_t prompt[1024];
    int n;
    int32_t reply[TURNS][NEW];
    char text[TURNS][512];
    int plen[TURNS], cached[TURNS], drafted;
} chat;

static void user_part(chat *c, int chat_id, int turn) {
    for (int t = 0; t < USER; t++) c->prompt[c->n++] = (int32_t)(5 + (t * 29 + turn * 13 + chat_id * 7) % 200);
}

static char *body_of(const chat *c, double temp, int cache) {
    char *b = malloc(16384);
    size_t at = (size_t)snprintf(b, 16384, "{\"prompt\":[");
    for (int i = 0; i < c->n; i++) at += (size_t)snprintf(b + at, 16384 - at, i ? ",%d" : "%d", c->prompt[i]);
    snprintf(b + at, 16384 - at,
             "],\"max_tokens\":%d,\"temperature\":%g,\"seed\":7,\"return_tokens\":true,\"ignore_eos\":true,"
             "\"cache_prompt\":%s}",
             NEW, temp, cache ? "true" : "false");
    return b;
}

/* the reply into turn k of c; the prompt grows by it (turn 4 of chat 0 keeps only 5 of the last
 * reply's tokens: an edit; turn 6 of chat 1 goes back to the first prompt) */
static int take_reply(chat *c, int id, int k, json_t *o) {
    if (!o) return -1;
    json_t *a = json_object_get(o, "tokens");
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    snprintf(c->text[k], sizeof c->text[k], "%s", json_string_value(json_object_get(ch, "text")));
    int n = (int)json_array_size(a);
    for (int i = 0; i < n && i < NEW; i++) c->reply[k][i] = (int32_t)json_integer_value(json_array_get(a, i));
    c->cached[k] = (int)json_integer_value(
        json_object_get(json_object_get(json_object_get(o, "usage"), "prompt_tokens_details"), "cached_tokens"));
    int cache_n = (int)json_integer_value(json_object_get(json_object_get(o, "timings"), "cache_n"));
    c->drafted += (int)json_integer_value(json_object_get(json_object_get(o, "timings"), "draft_n"));
    json_decref(o);
    if (cache_n != c->cached[k]) return -1;
    return n == NEW ? 0 : -1;
}

static void next_prompt(chat *c, int id, int k, int n_first) {
    int keep = NEW;
    if (id == 0 && k + 1 == 3) keep = 5; /* the prompt of turn 4 edits turn 3's reply */
    if (id == 1 && k + 1 == 5) {         /* turn 6: back to the first prompt */
        c->n = n_first;
        user_part(c, 9, k + 1);
        return;
    }
    for (int i = 0; i < keep; i++) c->prompt[c->n++] = c->reply[k][i];
    user_part(c, id, k + 1);
}

/* both chats, turn by turn, the two turns of a step sent at once */
static int converse(int port, chat *cs, int cache) {
    int n_first[2];
    for (int id = 0; id < 2; id++) {
        memset(&cs[id], 0, sizeof cs[id]);
        for (int t = 0; t < 20 + 6 * id; t++) cs[id].prompt[cs[id].n++] = (int32_t)(3 + (t * 37 + id * 11) % 180);
        n_first[id] = cs[id].n;
    }
    for (int k = 0; k < TURNS; k++) {
        pending p[2];
        for (int id = 0; id < 2; id++) {
            cs[id].plen[k] = cs[id].n;
            char *b = body_of(&cs[id], id ? 0.8 : 0.0, cache);
            post_start(&p[id], port, b);
            free(b);
        }
        int bad = 0;
        for (int id = 0; id < 2; id++) bad |= take_reply(&cs[id], id, k, post_finish(&p[id]));
        if (bad) return -1;
        for (int id = 0; id < 2; id++) next_prompt(&cs[id], id, k, n_first[id]);
    }
    return 0;
}

static double metric_value(int port, const char *name) {
    char cmd[256], *out = malloc(MAXOUT);
    snprintf(cmd, sizeof cmd, "curl -s http://127.0.0.1:%d/metrics", port);
    harness_run(cmd, out, MAXOUT);
    double v = -1;
    for (char *l = strstr(out, name); l; l = strstr(l + 1, name))
        if (l[strlen(name)] == ' ') v = atof(l + strlen(name) + 1);
    free(out);
    return v;
}

/* the conversations with the cache == without, for the server started with args */
static void cache_identity(const char *what, const char *model, const char *args, int spec) {
    test_server s;
    char full[2048];
    snprintf(full, sizeof full, "-m %s -np 2 -c 1024 -t 2 %s", model, args);
    int up = server_start(&s, BIN, full) == 0;
    CHECK(up, "%s: server did not start (log %s)", what, s.log);
    if (!up) return;
    static chat on[2], off[2];
    CHECK(converse(s.port, on, 1) == 0, "%s: the conversation with the cache failed", what);
    CHECK(converse(s.port, off, 0) == 0, "%s: the conversation without the cache failed", what);
    for (int id = 0; id < 2; id++)
        for (int k = 0; k < TURNS; k++) {
            CHECK(!memcmp(on[id].reply[k], off[id].reply[k], sizeof on[id].reply[k]) &&
                      !strcmp(on[id].text[k], off[id].text[k]),
                  "%s: chat %d turn %d differs with the cache", what, id, k + 1);
            CHECK(off[id].cached[k] == 0, "%s: chat %d turn %d: %d cached tokens with cache_prompt false", what, id,
                  k + 1, off[id].cached[k]);
        }
    /* a turn reuses the last turn's prompt and reply but its last token (never forwarded); turn 4 of
     * chat 0 (an edit of the last reply) only 5 of the reply's tokens; chat 1's turn 6 (back to the
     * start) nothing: the ring has recycled what that cut would expose */
    for (int id = 0; id < 2; id++)
        for (int k = 1; k < TURNS; k++) {
            int want = id == 0 && k == 3 ? on[id].plen[k - 1] + 5 : id == 1 && k == 5 ? 0 : on[id].plen[k - 1] + NEW - 1;
            CHECK(on[id].cached[k] == want, "%s: chat %d turn %d reused %d tokens, expected %d", what, id, k + 1,
                  on[id].cached[k], want);
        }
    if (spec) CHECK(on[0].drafted + on[1].drafted > 0, "%s: no drafts verified", what);
    double m = metric_value(s.port, "specula_prompt_tokens_cached_total");
    long sum = 0;
    for (int id = 0; id < 2; id++)
        for (int k = 0; k < TURNS; k++) sum += on[id].cached[k];
    CHECK(m == (double)sum, "%s: /metrics counts %.0f cached tokens, the replies %ld", what, m, sum);
    printf("  %s: cached tokens per turn (chat 0) %d %d %d %d %d %d, drafts %d\n", what, on[0].cached[0],
           on[0].cached[1], on[0].cached[2], on[0].cached[3], on[0].cached[4], on[0].cached[5],
           on[0].drafted + on[1].drafted);
    int rc = server_stop(&s);
    CHECK(rc == 0 && !server_log_has(&s, "Sanitizer"), "%s: exit %d (log %s)", what, rc, s.log);
    if (rc == 0) unlink(s.log);
}

static void test_sliding_conversations(void) {
    char cmd[8192], out[4096], args[1024];
    snprintf(cmd, sizeof cmd,
             "%s new-model --arch gemma4 --preset tiny --tokenizer models/default/target/tokenizer.json --seed 3 "
             "-o %s/swa 2>&1",
             BIN, TMP);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "new-model: %s", out);
    char swa[128];
    snprintf(swa, sizeof swa, "%s/swa", TMP);
    cache_identity("plain", swa, "", 0);
    cache_identity("ngram", swa, "--spec ngram --draft-max 5", 1);
    static const struct {
        const char *kind, *arch, *preset;
    } K[] = {{"dspark", "dspark", "b7"}, {"eagle3", "eagle3", "specforge"}};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s new-drafter --arch %s --preset %s -m %s/swa --seed %d -o %s/%s 2>&1", BIN,
                 K[k].arch, K[k].preset, TMP, 5 + k, TMP, K[k].kind);
        CHECK(harness_run(cmd, out, sizeof out) == 0, "new-drafter %s: %s", K[k].kind, out);
        snprintf(args, sizeof args, "--spec %s -md %s/%s --draft-max 5 --spec-max-slots 0", K[k].kind, TMP, K[k].kind);
        cache_identity(K[k].kind, swa, args, 1);
    }
    /* typed KV caches (q8_0 K, f16 V) under the same cuts, wraps and fallbacks */
    snprintf(args, sizeof args, "--spec dspark -md %s/dspark --draft-max 5 -ctk q8_0 -ctv f16", TMP);
    cache_identity("dspark, -ctk q8_0 -ctv f16", swa, args, 1);
    /* the embedded pair: a trained DSpark drafter, whose drafts (and so the sampled chat's tokens)
     * follow the context rows it is begun on */
    cache_identity("dspark (embedded pair)", "models/default/target",
                   "--spec dspark -md models/default/drafter --draft-max 7 --spec-max-slots 0", 1);
}

/* the chat route: turn 2 reuses turn 1's prompt through the chat template; usage and timings say so */
static void test_chat_usage(void) {
    test_server s;
    int up = server_start(&s, BIN, "-m models/default/target -np 1 -c 512 -t 2") == 0;
    CHECK(up, "chat server did not start (log %s)", s.log);
    if (!up) return;
    const char *b1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about the sea.\"}],\"max_tokens\":8,"
                     "\"temperature\":0}";
    json_t *o1 = post(s.port, "/v1/chat/completions", b1);
    const char *reply = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(o1, "choices"), 0), "message"), "content"));
    json_t *b2 = json_pack("{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}], s:i, s:i}", "messages", "role", "user", "content",
                           "Tell me about the sea.", "role", "assistant", "content", reply ? reply : "", "role",
                           "user", "content", "And the sky?", "max_tokens", 8, "temperature", 0);
    char *b2s = json_dumps(b2, JSON_COMPACT);
    json_t *o2 = post(s.port, "/v1/chat/completions", b2s);
    json_t *u1 = json_object_get(json_object_get(o1, "usage"), "prompt_tokens_details");
    json_t *u2 = json_object_get(json_object_get(o2, "usage"), "prompt_tokens_details");
    int c1 = (int)json_integer_value(json_object_get(u1, "cached_tokens"));
    int c2 = (int)json_integer_value(json_object_get(u2, "cached_tokens"));
    int p1 = (int)json_integer_value(json_object_get(json_object_get(o1, "usage"), "prompt_tokens"));
    int n2 = (int)json_integer_value(json_object_get(json_object_get(o2, "timings"), "cache_n"));
    CHECK(o1 && o2 && u1 && c1 == 0, "turn 1: %d cached tokens", c1);
    CHECK(c2 >= p1 - 1 && n2 == c2, "turn 2: %d cached tokens (turn 1's prompt: %d), cache_n %d", c2, p1, n2);
    printf("  chat: turn 2 reused %d tokens (turn 1's prompt %d)\n", c2, p1);
    free(b2s);
    json_decref(b2), json_decref(o1), json_decref(o2);
    int rc = server_stop(&s);
    CHECK(rc == 0, "chat server: exit %d (log %s)", rc, s.log);
    if (rc == 0) unlink(s.log);
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    if (!mkdtemp(TMP)) {
        printf("FAIL mkdtemp\n");
        return 1;
    }
    RUN(test_chat_usage);
    RUN(test_sliding_conversations);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
    if (system(cmd) != 0) harness_failed++;
    return harness_done("test_server_cache");
}
