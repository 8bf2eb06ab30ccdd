/* test_server_round.c — the server steps the same speculative round as `specula generate`
 * (decode/round.h), so what the CLI does the server does, token for token:
 * - repetition penalties (repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n /
 *   penalty_last_n) through the server == `specula generate` with --repeat-penalty,
 *   --presence-penalty, --frequency-penalty, --repeat-last-n: greedy (speculative and plain) and
 *   sampled with a seed (speculative, the full block every round as --spec-always);
 * - token trees (`serve --tree N`): several concurrent tree requests, verified inside the batched
 *   forward, == plain greedy;
 * - every drafter kind the CLI serves (ngram, draft model, DFlash, DSpark, Gemma-4 assistant,
 *   EAGLE-3; random checkpoints from `specula new-drafter` for the embedded target), three
 *   concurrent greedy requests each == plain greedy.
 * The server runs from this test's own build; the references come from `specula generate` (from the
 * ASan build: the penalties and one tree case, the drafter sweep is left to the gcc build). */
#include <jansson.h>

#include "server_harness.h"

#define MAXOUT (1 << 20)
static char BIN[4096], TMP[64] = "/tmp/specula-srvround-XXXXXX";
static int ASAN; /* from the ASan build (several times slower): one tree case, no drafter sweep */
static const char *TARGET = "models/default/target";

typedef struct {
    FILE *f;
    char body[96];
} pending;

/* POST body to path on port with curl (in the background until req_finish) */
static int req_start(pending *p, int port, const char *path, const char *body) {
    static int n;
    snprintf(p->body, sizeof p->body, "/tmp/specula-round-body-%d-%d.json", (int)getpid(), n++);
    FILE *f = fopen(p->body, "w");
    if (!f) return -1;
    fputs(body, f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "curl -s -X POST -H 'Content-Type: application/json' --data-binary @%s -w '\\n%%{http_code}' "
             "http://127.0.0.1:%d%s", p->body, port, path);
    p->f = popen(cmd, "r");
    return p->f ? 0 : -1;
}

static int DRAFTED, ACCEPTED; /* the timings of the replies req_finish read: drafts verified, accepted */

/* the reply's token ids into ids (at most cap); returns their count, -1 on a failed request */
static int req_finish(pending *p, int32_t *ids, int cap) {
    char *out = malloc(MAXOUT);
    size_t n = fread(out, 1, MAXOUT - 1, p->f);
    out[n] = 0;
    pclose(p->f);
    unlink(p->body);
    char *nl = strrchr(out, '\n');
    int k = -1;
    if (nl && atoi(nl + 1) == 200) {
        *nl = 0;
        json_t *o = json_loads(out, 0, NULL), *a = json_object_get(o, "tokens");
        k = 0;
        for (size_t i = 0; i < json_array_size(a) && k < cap; i++) ids[k++] = (int32_t)json_integer_value(json_array_get(a, i));
        json_t *tm = json_object_get(o, "timings");
        DRAFTED += (int)json_integer_value(json_object_get(tm, "draft_n"));
        ACCEPTED += (int)json_integer_value(json_object_get(tm, "draft_n_accepted"));
        json_decref(o);
    } else {
        fprintf(stderr, "  request failed: %s\n", out);
    }
    free(out);
    return k;
}

static void ids_csv(const int32_t *ids, int n, char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at + 16 < cap; i++) at += (size_t)snprintf(out + at, cap - at, i ? ",%d" : "%d", ids[i]);
}

/* `specula generate` tokens for prompt ids with extra flags */
static int generate_ref(const int32_t *prompt, int n, int n_new, const char *flags, int32_t *out, int cap) {
    char csv[4096], cmd[16384], *buf = malloc(MAXOUT);
    ids_csv(prompt, n, csv, sizeof csv);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids %s -n %d -t 2 --ignore-eos --json %s 2>/dev/null", BIN,
             TARGET, csv, n_new, flags);
    int k = -1;
    if (harness_run(cmd, buf, MAXOUT) == 0) {
        json_t *o = json_loads(buf, 0, NULL), *a = json_object_get(o, "tokens");
        k = 0;
        for (size_t i = 0; o && i < json_array_size(a) && k < cap; i++)
            out[k++] = (int32_t)json_integer_value(json_array_get(a, i));
        json_decref(o);
    }
    free(buf);
    return k;
}

/* a completion body over prompt ids; extra: more JSON fields ("" or ",\"k\":v,...") */
static char *body_of(const int32_t *ids, int n, int max_tokens, double temp, int seed, int speculative,
                     const char *extra) {
    char csv[4096], *b = malloc(8192);
    ids_csv(ids, n, csv, sizeof csv);
    snprintf(b, 8192,
             "{\"prompt\":[%s],\"max_tokens\":%d,\"temperature\":%g,\"seed\":%d,\"return_tokens\":true,"
             "\"ignore_eos\":true,\"speculative\":%s%s}",
             csv, max_tokens, temp, seed, speculative ? "true" : "false", extra);
    return b;
}

/* three prompts of token ids, varied lengths */
#define NP 3
static int32_t PROMPT[NP][64];
static int NPROMPT[NP];
static int32_t REF[NP][64]; /* plain greedy, 40 tokens */

static void make_prompts(void) {
    for (int i = 0; i < NP; i++) {
        NPROMPT[i] = 6 + 5 * i;
        for (int t = 0; t < NPROMPT[i]; t++) PROMPT[i][t] = (int32_t)(3 + (t * 37 + i * 11) % 120);
        CHECK(generate_ref(PROMPT[i], NPROMPT[i], 40, "", REF[i], 64) == 40, "plain reference %d", i);
    }
}

/* Start a server with args, send every prompt at once (greedy, speculative), compare with REF;
 * the drafter must have had drafts verified, and accepted when must_accept. */
static void concurrent_identity(const char *what, const char *args, int must_accept) {
    test_server s;
    char full[1024];
    snprintf(full, sizeof full, "-m %s -np %d -c %d -t 2 --spec-max-slots 0 %s", TARGET, NP, NP * 512, args);
    int up = server_start(&s, BIN, full) == 0;
    CHECK(up, "%s: server did not start (log %s)", what, s.log);
    if (!up) return;
    pending p[NP];
    DRAFTED = ACCEPTED = 0;
    for (int i = 0; i < NP; i++) {
        char *b = body_of(PROMPT[i], NPROMPT[i], 40, 0.0, 0, 1, "");
        req_start(&p[i], s.port, "/v1/completions", b);
        free(b);
    }
    int bad = 0;
    for (int i = 0; i < NP; i++) {
        int32_t got[64];
        int k = req_finish(&p[i], got, 64);
        if (k != 40 || memcmp(got, REF[i], sizeof(int32_t) * 40)) {
            bad++;
            fprintf(stderr, "  %s: request %d: %d tokens, differs from plain\n", what, i, k);
        }
    }
    CHECK(bad == 0, "%s: %d of %d concurrent requests differ from plain greedy", what, bad, NP);
    printf("  %s: %d drafts verified, %d accepted\n", what, DRAFTED, ACCEPTED);
    CHECK(DRAFTED > 0 && (!must_accept || ACCEPTED > 0), "%s: %d drafts verified, %d accepted", what, DRAFTED, ACCEPTED);
    int rc = server_stop(&s);
    CHECK(rc == 0 && !server_log_has(&s, "Sanitizer"), "%s: exit %d (log %s)", what, rc, s.log);
    if (rc == 0 && !bad) unlink(s.log);
}

/* every drafter kind through the server == plain greedy */
static void test_drafter_kinds(void) {
    static const struct {
        const char *kind, *arch, *preset;
    } K[] = {{"dflash", "dflash", "b16"}, {"dspark", "dspark", "b7"}, {"eagle3", "eagle3", "specforge"},
             {"assistant", "gemma4_assistant", "centroid"}};
    char cmd[8192], out[4096], args[1024];
    for (int k = 0; k < 4; k++) {
        snprintf(cmd, sizeof cmd, "%s new-drafter --arch %s --preset %s -m %s --seed %d -o %s/%s 2>&1", BIN, K[k].arch,
                 K[k].preset, TARGET, 5 + k, TMP, K[k].kind);
        CHECK(harness_run(cmd, out, sizeof out) == 0, "new-drafter %s: %s", K[k].kind, out);
        snprintf(args, sizeof args, "--spec %s -md %s/%s --draft-max 5", K[k].kind, TMP, K[k].kind);
        concurrent_identity(K[k].kind, args, 0);
    }
    concurrent_identity("ngram", "--spec ngram --draft-max 5", 0);
    snprintf(args, sizeof args, "--spec draft -md %s --draft-max 4", TARGET); /* the target drafts for itself */
    concurrent_identity("draft model", args, 1);
}

/* token trees verified inside the batched forward == plain greedy (dspark, dflash, eagle3) */
static void test_trees(void) {
    char args[1024];
    concurrent_identity("tree dspark", "--spec dspark -md models/default/drafter --draft-max 7 --tree 12 --tree-k 3", 1);
    if (ASAN) return;
    concurrent_identity("tree dspark static",
                        "--spec dspark -md models/default/drafter --draft-max 5 --tree 10 --tree-k 2 --tree-shape static",
                        1);
    snprintf(args, sizeof args, "--spec dflash -md %s/dflash --draft-max 6 --tree 16 --tree-k 4", TMP);
    concurrent_identity("tree dflash", args, 0);
    snprintf(args, sizeof args, "--spec eagle3 -md %s/eagle3 --draft-max 5 --tree 8 --tree-k 2", TMP);
    concurrent_identity("tree eagle3", args, 0);
}

/* penalties: the server == specula generate with the same flags */
static void test_penalties(void) {
    test_server s;
    char full[1024];
    snprintf(full, sizeof full, "-m %s -np 4 -c 2048 -t 2 --spec-max-slots 0 --spec dspark -md models/default/drafter "
             "--draft-max 7", TARGET);
    int up = server_start(&s, BIN, full) == 0;
    CHECK(up, "penalty server did not start (log %s)", s.log);
    if (!up) return;
    const char *flags = "--repeat-penalty 1.5 --presence-penalty 0.5 --frequency-penalty 0.25 --repeat-last-n 24";
    const char *fields = ",\"repeat_penalty\":1.5,\"presence_penalty\":0.5,\"frequency_penalty\":0.25,"
                         "\"repeat_last_n\":24";
    const char *fields2 = ",\"repeat_penalty\":1.5,\"presence_penalty\":0.5,\"frequency_penalty\":0.25,"
                          "\"penalty_last_n\":24";
    char spec[1024], gflags[2048];
    snprintf(spec, sizeof spec, "--spec dspark -md models/default/drafter --draft-max 7 --spec-always");
    /* the references: greedy plain (the same tokens speculative), sampled speculative and plain */
    int32_t ref_g[64], ref_s[64], ref_p[64], got[64];
    int nref = generate_ref(PROMPT[0], NPROMPT[0], 40, flags, ref_g, 64);
    CHECK(nref == 40 && memcmp(ref_g, REF[0], sizeof ref_g[0] * 40), "penalties change nothing: test is void");
    snprintf(gflags, sizeof gflags, "%s --temp 0.9 --seed 11 %s", flags, spec);
    int ns = generate_ref(PROMPT[1], NPROMPT[1], 40, gflags, ref_s, 64);
    snprintf(gflags, sizeof gflags, "%s --temp 0.9 --seed 11", flags);
    int npl = generate_ref(PROMPT[1], NPROMPT[1], 40, gflags, ref_p, 64);
    struct {
        int prompt, spec;
        double temp;
        const char *fields;
        const int32_t *ref;
        int n;
    } C[] = {{0, 1, 0.0, fields, ref_g, nref}, {0, 0, 0.0, fields2, ref_g, nref}, {1, 1, 0.9, fields, ref_s, ns},
             {1, 0, 0.9, fields2, ref_p, npl}};
    pending p[4];
    for (int c = 0; c < 4; c++) { /* all four at once: batched with each other */
        char *b = body_of(PROMPT[C[c].prompt], NPROMPT[C[c].prompt], 40, C[c].temp, 11, C[c].spec, C[c].fields);
        req_start(&p[c], s.port, "/v1/completions", b);
        free(b);
    }
    for (int c = 0; c < 4; c++) {
        int k = req_finish(&p[c], got, 64);
        CHECK(C[c].n == 40 && k == C[c].n && !memcmp(got, C[c].ref, sizeof(int32_t) * 40),
              "case %d (%s, %s): %d tokens, differs from specula generate (%d)", c, C[c].spec ? "speculative" : "plain",
              C[c].temp > 0 ? "sampled" : "greedy", k, C[c].n);
    }
    int rc = server_stop(&s);
    CHECK(rc == 0, "penalty server: exit %d (log %s)", rc, s.log);
    if (rc == 0) unlink(s.log);
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    ASAN = strstr(BIN, "asan") != NULL;
    if (!mkdtemp(TMP)) {
        printf("FAIL mkdtemp\n");
        return 1;
    }
    make_prompts();
    RUN(test_penalties);
    if (!ASAN) RUN(test_drafter_kinds);
    RUN(test_trees);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
    if (system(cmd) != 0) harness_failed++;
    return harness_done("test_server_round");
}
