/* test_suffix.c — suffix drafting (docs/SUFFIX.md):
 * - the automaton's counts and proposals against a brute-force count over random documents;
 * - the cross-request store stays within its byte bound when fed more than the bound, keeps the
 *   newest documents and forgets the oldest;
 * - through the binary on the embedded model: greedy `--spec suffix` and `--spec dspark+suffix`,
 *   chains and trees, give plain decoding's tokens on a copy-heavy prompt and draft on it;
 * - the sampled audit at temperature 1 passes (alone, a tree, combined);
 * - a server whose store holds earlier requests answers a greedy request exactly as a fresh one. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drafters/suffix.h"
#include "server_harness.h"

static char BIN[4096];
static const char *M = "models/default/target";
static const char *MD = "models/default/drafter";
#define PROMPT "The ship sailed north along the coast, and the sailors sang as the wind rose."

static uint32_t rng_state = 12345;
static int rnd(int n) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (int)((rng_state >> 8) % (uint32_t)n);
}

/* occurrences of x[0..m) in the documents followed by t (t -1: by anything; t -2: all of them) */
static int brute_count(int32_t docs[][200], int nd, int len, const int32_t *x, int m, int32_t t) {
    int c = 0;
    for (int d = 0; d < nd; d++)
        for (int i = 0; i + m <= len; i++) {
            if (memcmp(docs[d] + i, x, sizeof(int32_t) * (size_t)m)) continue;
            if (t == -2 || (i + m < len && (t == -1 || docs[d][i + m] == t))) c++;
        }
    return c;
}

static void test_sam_counts(void) {
    sp_err err = {{0}};
    sp_sam a;
    sp_sam_init(&a);
    static int32_t docs[3][200];
    CHECK(sp_sam_reserve(&a, 16, &err) == 0, "%s", err.msg); /* grows past it */
    for (int d = 0; d < 3; d++) {
        sp_sam_doc(&a);
        for (int i = 0; i < 200; i++) {
            docs[d][i] = rnd(4);
            CHECK(sp_sam_extend(&a, docs[d][i], &err) == 0, "%s", err.msg);
        }
    }
    for (int trial = 0; trial < 300; trial++) { /* a substring's state counts its occurrences */
        int d = rnd(3), m = 1 + rnd(6), i = rnd(200 - m);
        int v = 0;
        for (int j = 0; j < m && v >= 0; j++) v = sp_sam_next(&a, v, docs[d][i + j]);
        CHECK(v > 0, "substring not found");
        if (v > 0) CHECK(a.cnt[v] == brute_count(docs, 3, 200, docs[d] + i, m, -2),
                         "count %d, brute force %d", a.cnt[v], brute_count(docs, 3, 200, docs[d] + i, m, -2));
    }
    int32_t absent[2] = {7, 7}; /* a token never seen */
    CHECK(sp_sam_next(&a, 0, absent[0]) < 0, "token 7 has an edge");
    /* the chain: the most frequent continuation of the matched context, its probability in the score */
    sp_sfx_params p = {.min_prob = 0.0f, .per_match = 8, .min_match = 1};
    int32_t ctx[3] = {docs[1][50], docs[1][51], docs[1][52]}, dr[4];
    sp_sam_match mt = sp_sam_match_suffix(&a, ctx, 3, 64);
    CHECK(mt.len == 3, "matched %d of 3 tokens", mt.len);
    double score;
    int n = sp_sfx_chain(&a, mt, &p, 1, dr, &score);
    int total = brute_count(docs, 3, 200, ctx, 3, -1), best = 0;
    for (int t = 0; t < 4; t++) {
        int c = brute_count(docs, 3, 200, ctx, 3, t);
        if (c > best) best = c;
    }
    CHECK(n == 1 && brute_count(docs, 3, 200, ctx, 3, dr[0]) == best, "chain proposed %d, not the most frequent", dr[0]);
    CHECK(total > 0 && score > (double)best / total - 1e-6 && score < (double)best / total + 1e-6,
          "score %g, expected %d/%d", score, best, total);
    /* a tree: distinct siblings, parents first, no more than asked */
    sp_tree_shape sh = {.nodes = 12, .k = 3, .max_depth = 4, .kind = SP_TREE_DYNAMIC};
    int32_t tok[SP_TREE_MAX_NODES], par[SP_TREE_MAX_NODES];
    n = sp_sfx_tree(&a, mt, &p, &sh, tok, par);
    CHECK(n > 1 && n <= 12, "tree of %d nodes", n);
    for (int i = 0; i < n; i++) {
        CHECK(par[i] >= -1 && par[i] < i, "node %d: parent %d", i, par[i]);
        for (int j = 0; j < i; j++) CHECK(!(par[j] == par[i] && tok[j] == tok[i]), "nodes %d, %d: same token", j, i);
    }
    sp_sam_free(&a);
}

static void test_store_bound(void) {
    sp_err err = {{0}};
    const size_t bound = 96 << 10;
    sp_sfx_store *s = sp_sfx_store_create(bound, &err);
    CHECK(s != NULL, "%s", err.msg);
    if (!s) return;
    static int32_t docs[40][600];
    for (int d = 0; d < 40; d++) { /* 40 * 600 tokens: several times what 96 KiB holds */
        for (int i = 0; i < 600; i++) docs[d][i] = 1000 * d + rnd(50000);
        CHECK(sp_sfx_store_add(s, docs[d], 600, &err) == 0, "add %d: %s", d, err.msg);
        CHECK(sp_sfx_store_bytes(s) <= bound, "doc %d: %zu bytes over the bound %zu", d, sp_sfx_store_bytes(s), bound);
    }
    CHECK(sp_sfx_store_tokens(s) < 40 * 600 && sp_sfx_store_tokens(s) >= 600, "%d tokens held",
          sp_sfx_store_tokens(s));
    sp_sfx_params p = {.min_prob = 0.1f, .per_match = 2, .min_match = 2};
    int32_t dr[8];
    double score;
    int ml;
    int n = sp_sfx_store_chain(s, docs[39], 300, &p, 8, dr, &score, &ml); /* the newest document is there */
    CHECK(n == 8 && !memcmp(dr, docs[39] + 300, sizeof dr), "newest document: %d drafts", n);
    n = sp_sfx_store_chain(s, docs[0], 300, &p, 8, dr, &score, &ml); /* the oldest was evicted */
    CHECK(n == 0 || memcmp(dr, docs[0] + 300, sizeof(int32_t) * (size_t)n), "oldest document still proposed");
    int32_t big[30000]; /* one stream longer than the whole store keeps its end */
    for (int i = 0; i < 30000; i++) big[i] = rnd(50000);
    CHECK(sp_sfx_store_add(s, big, 30000, &err) == 0, "%s", err.msg);
    CHECK(sp_sfx_store_bytes(s) <= bound, "%zu bytes over the bound", sp_sfx_store_bytes(s));
    n = sp_sfx_store_chain(s, big, 29990, &p, 8, dr, &score, &ml);
    CHECK(n > 0 && !memcmp(dr, big + 29990, sizeof(int32_t) * (size_t)n), "the big stream's end: %d drafts", n);
    sp_sfx_store_free(s);
    CHECK(sp_sfx_store_create(100, &err) == NULL && strstr(err.msg, "too small"), "tiny bound: %s", err.msg);
}

/* `generate --json` on the copy-heavy prompt (the model's own continuation repeated); the token
 * array into toks, the drafts verified into *drafted; 0 or -1 */
static int gen(const char *spec, const char *prompt, char *toks, size_t cap, int *drafted) {
    static char out[1 << 17], cmd[1 << 18];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p '%s' -n 40 --ignore-eos -t 2 --json %s 2>/dev/null", BIN, M,
             prompt, spec);
    if (harness_run(cmd, out, sizeof out) != 0) return -1;
    json_t *j = json_loads(out, 0, NULL);
    if (!j) return -1;
    char *t = json_dumps(json_object_get(j, "tokens"), JSON_COMPACT);
    json_t *sp = json_object_get(j, "stats");
    *drafted = (int)json_integer_value(json_object_get(sp ? sp : j, "drafted"));
    snprintf(toks, cap, "%s", t ? t : "");
    free(t);
    json_decref(j);
    return 0;
}

/* the copy-heavy prompt: PROMPT, the model's own greedy continuation of it, PROMPT again */
static void copy_prompt(char *buf, size_t cap) {
    static char out[2048], cmd[8192];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p '%s' -n 40 --ignore-eos -t 2 -q 2>/dev/null", BIN, M, PROMPT);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "plain generate failed");
    for (char *c = out; *c; c++)
        if (*c == '\'' || *c == '\n') *c = ' ';
    snprintf(buf, cap, "%s %s %s", PROMPT, out, PROMPT);
}

static void test_greedy_identity(void) {
    static char prompt[8192], plain[1 << 16], spec[1 << 16], args[8192];
    copy_prompt(prompt, sizeof prompt);
    int dr = 0;
    CHECK(gen("", prompt, plain, sizeof plain, &dr) == 0 && strlen(plain) > 40, "plain: %s", plain);
    const char *cases[] = {"--spec suffix", "--spec suffix --tree 8 --tree-k 2", "--spec dspark+suffix -md %s",
                           "--spec dspark+suffix -md %s --tree 8"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, cases[i], MD);
        strcat(args, " --spec-always --draft-max 6");
        dr = 0;
        CHECK(gen(args, prompt, spec, sizeof spec, &dr) == 0 && !strcmp(plain, spec), "%s differs:\n%s\n%s", args,
              plain, spec);
        CHECK(dr > 0, "%s: no drafts verified", args);
    }
    snprintf(args, sizeof args, "%s generate -m %s -p x --spec suffix+suffix 2>&1", BIN, M);
    CHECK(harness_run(args, spec, sizeof spec) == 2 && strstr(spec, "suffix+suffix"), "suffix+suffix: %s", spec);
}

static void test_audit(void) {
    static char out[1 << 16];
    char cmd[16384];
    const char *cases[] = {"--spec suffix", "--spec suffix --tree 6", "--spec dspark+suffix -md models/default/drafter"};
    for (int i = 0; i < 3; i++) { /* a prompt that repeats itself: the suffix drafts from the first token */
        snprintf(cmd, sizeof cmd, "%s audit -m %s %s --temp 1.0 --draws %d -t 2 "
                 "-p 'import os\nimport sys\nimport re\nimport os\nimport sys\nimport' 2>&1", BIN, M, cases[i],
                 HARNESS_AUDIT_DRAWS(200));
        int rc = harness_run(cmd, out, sizeof out);
        CHECK(harness_audit_verdict(rc, out, 1), "%s: %s", cases[i], out);
        const char *acc = strstr(out, "draft acceptance ");
        CHECK(acc && atof(acc + 17) > 0, "%s: no drafts accepted: %s", cases[i], out);
    }
}

/* the text of a greedy completion of prompt ("" on failure); *acc: drafts accepted of *drafted */
static void complete(int port, const char *prompt, char *text, size_t cap, int *drafted, int *acc) {
    static char out[1 << 16], body[1 << 15];
    char file[128], cmd[8192];
    json_t *b = json_pack("{s:s, s:i, s:i}", "prompt", prompt, "max_tokens", 32, "temperature", 0);
    char *s = json_dumps(b, JSON_COMPACT);
    snprintf(body, sizeof body, "%s", s);
    free(s), json_decref(b);
    snprintf(file, sizeof file, "/tmp/specula-suffix-body-%d.json", (int)getpid());
    FILE *f = fopen(file, "w");
    if (f) fputs(body, f), fclose(f);
    snprintf(cmd, sizeof cmd,
             "curl -s -X POST -H 'Content-Type: application/json' --data-binary @%s http://127.0.0.1:%d/v1/completions",
             file, port);
    text[0] = 0;
    if (harness_run(cmd, out, sizeof out) == 0) {
        json_t *j = json_loads(out, 0, NULL);
        const char *t = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
        snprintf(text, cap, "%s", t ? t : "");
        json_t *tm = json_object_get(j, "timings");
        *drafted = (int)json_integer_value(json_object_get(tm, "draft_n"));
        *acc = (int)json_integer_value(json_object_get(tm, "draft_n_accepted"));
        json_decref(j);
    }
    unlink(file);
}

static void test_server_cross_request(void) {
    static char prompt[8192], a[1 << 14], b[1 << 14], c[1 << 14];
    copy_prompt(prompt, sizeof prompt);
    const char *args = "-m models/default/target -np 2 -c 1024 -t 2 --spec suffix --draft-max 6";
    test_server s;
    int dr = 0, acc = 0;
    CHECK(server_start(&s, BIN, args) == 0, "server did not start (log %s)", s.log);
    complete(s.port, prompt, a, sizeof a, &dr, &acc); /* its stream goes to the store */
    complete(s.port, "Once upon a time", b, sizeof b, &dr, &acc);
    complete(s.port, prompt, b, sizeof b, &dr, &acc); /* the store holds its whole answer */
    CHECK(a[0] && !strcmp(a, b), "same request, other output:\n%s\n%s", a, b);
#ifdef __SANITIZE_ADDRESS__
    const int need_drafts = 0; /* an instrumented build is slow enough that the never-slower policy may not draft */
#else
    const int need_drafts = 1;
#endif
    CHECK((dr > 0 || !need_drafts) && acc == dr,
          "the repeated request: %d of %d drafts accepted (the store's answer is exact)", acc, dr);
    CHECK(server_stop(&s) == 0, "server exit (log %s)", s.log);
    CHECK(server_start(&s, BIN, args) == 0, "fresh server did not start (log %s)", s.log);
    complete(s.port, prompt, c, sizeof c, &dr, &acc);
    CHECK(!strcmp(b, c), "fresh server differs:\n%s\n%s", b, c);
    CHECK(server_stop(&s) == 0, "server exit (log %s)", s.log);
}

/* `serve --spec dspark+suffix` without -m or -md: the embedded pair's drafter, as with no --spec */
static void test_server_default_drafter(void) {
    test_server s;
    CHECK(server_start(&s, BIN, "--spec dspark+suffix -np 1 -c 512 -t 2") == 0, "server did not start (log %s)", s.log);
    CHECK(server_log_has(&s, "drafter: dspark+suffix from"), "the embedded drafter was not loaded (log %s)", s.log);
    CHECK(server_stop(&s) == 0, "server exit (log %s)", s.log);
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    RUN(test_sam_counts);
    RUN(test_server_default_drafter);
    RUN(test_store_bound);
    RUN(test_greedy_identity);
    RUN(test_audit);
    RUN(test_server_cross_request);
    return harness_done(__FILE__);
}
