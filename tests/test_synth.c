/* test_synth.c — synthetic acceptance (benchmark only, docs/SYNTHETIC.md):
 * - the profile checks and the expected τ;
 * - through the session on the embedded pair (DSpark): P = 1 accepts every draft, P = 0 none
 *   (counts checked, greedy and sampled, with penalties), a profile's per-position rates follow it,
 *   P = 0.5 gives rates near 0.5 and 0.25 at the first two positions;
 *   a session opens with it off (output == plain) and setting NULL turns it off again;
 * - it cannot be turned on by `generate` or `run` (unknown flag), and the public header has no
 *   way to it;
 * - bench-spec --spec-synthetic 1,0: counts in the --json sweep, marked synthetic and not lossless
 *   in every pass and on stdout;
 * - serve --spec-synthetic: the timings of a reply carry synthetic true / lossless false with all
 *   (P = 1) or no (P = 0) drafts accepted, /props and the log mark it; serve refuses it without a
 *   drafter or with a tree. */
#include <jansson.h>
#include <math.h>

#include "api/session.h"
#include "server_harness.h"

static char BIN[4096], TMP[64] = "/tmp/specula-synth-XXXXXX";
static const char *TARGET = "models/default/target", *DRAFTER = "models/default/drafter";

static void test_check_tau(void) {
    sp_err err = {{0}};
    sp_synth s = {.n = 2, .p = {0.5f, 1.5f}};
    CHECK(sp_synth_check(&s, &err) == -1 && strstr(err.msg, "entry 2"), "1.5 accepted: %s", err.msg);
    s.p[1] = NAN;
    CHECK(sp_synth_check(&s, &err) == -1, "NaN accepted");
    s.n = 0;
    CHECK(sp_synth_check(&s, &err) == -1, "an empty profile accepted");
    s = (sp_synth){.n = 1, .p = {0.85f}};
    CHECK(sp_synth_check(&s, &err) == 0, "%s", err.msg);
    double want = (1 - pow(0.85, 8)) / (1 - 0.85); /* Σ_{j=0..7} P^j */
    CHECK(fabs(sp_synth_tau(&s, 7) - want) < 1e-5, "tau %.6f, want %.6f", sp_synth_tau(&s, 7), want);
    s = (sp_synth){.n = 3, .p = {1, 0.5f, 0}};
    CHECK(fabs(sp_synth_tau(&s, 7) - 2.5) < 1e-9, "profile tau %.6f, want 2.5", sp_synth_tau(&s, 7));
}

static sp_session *open_pair(void) {
    sp_session_params p = sp_session_params_default();
    p.model = TARGET;
    p.n_threads = 2;
    p.drafter.kind = "dspark";
    p.drafter.dir = DRAFTER;
    p.drafter.draft_max = 7;
    p.policy = SP_SPEC_POLICY_ALWAYS;
    sp_session *s = NULL;
    sp_err err = {{0}};
    CHECK(sp_session_open(&s, &p, &err) == 0, "open: %s", err.msg);
    return s;
}

static const int32_t PROMPT[] = {11, 42, 97, 5, 300, 12, 42, 97};

/* one request of n tokens (temp > 0: sampled, with a repetition penalty) into o */
static int run_n(sp_session *s, float temp, int plain, int n, sp_session_out *o) {
    sp_session_req r = sp_session_req_default();
    r.gen.max_new = n;
    r.gen.ignore_eos = 1;
    r.gen.sample.temperature = temp;
    r.gen.sample.seed = 7;
    if (temp > 0) r.gen.penalty.repeat = 1.3f, r.gen.penalty.last_n = 16;
    r.plain = plain;
    r.round_plain = 1;
    sp_err err = {{0}};
    int rc = sp_session_generate(s, PROMPT, 8, &r, o, &err);
    CHECK(rc == 0, "generate: %s", err.msg);
    return rc;
}

static int run(sp_session *s, float temp, int plain, sp_session_out *o) { return run_n(s, temp, plain, 40, o); }

/* P = 0.5 over about 100 rounds: the first draft's acceptance near 0.5, the second's near 0.25 */
static void check_half(sp_session *s) {
    sp_synth half = {.n = 1, .p = {0.5f}, .seed = 11};
    sp_err err = {{0}};
    sp_session_out o;
    CHECK(sp_session_set_synthetic(s, &half, &err) == 0, "%s", err.msg);
    run_n(s, 0, 0, 200, &o);
    double a0 = o.spec.accept_per_position[0], a1 = o.spec.accept_per_position[1];
    CHECK(o.spec.pos_drafted[0] >= 80 && fabs(a0 - 0.5) < 0.2 && fabs(a1 - 0.25) < 0.17,
          "P=0.5: %d rounds, first %.3f, second %.3f", o.spec.pos_drafted[0], a0, a1);
    sp_session_out_free(&o);
}

static void test_session_counts(void) {
    sp_session *s = open_pair();
    if (!s) return;
    CHECK(sp_session_synthetic(s) == NULL, "a session opens with synthetic acceptance on");
    sp_session_out plain, spec;
    sp_err err = {{0}};
    run(s, 0, 1, &plain);
    run(s, 0, 0, &spec); /* the normal path: lossless */
    CHECK(spec.n_tokens == 40 && !memcmp(plain.tokens, spec.tokens, 40 * sizeof(int32_t)), "spec != plain");
    sp_session_out_free(&spec);
    for (int temp = 0; temp < 2; temp++) {
        sp_synth one = {.n = 1, .p = {1}, .seed = 3}, zero = {.n = 1, .p = {0}, .seed = 3};
        CHECK(sp_session_set_synthetic(s, &one, &err) == 0, "%s", err.msg);
        run(s, (float)temp, 0, &spec);
        CHECK(spec.spec.drafted > 0 && spec.spec.accepted == spec.spec.drafted, "P=1 temp %d: accepted %d of %d", temp,
              spec.spec.accepted, spec.spec.drafted);
        CHECK(spec.n_tokens == 40 && spec.spec.target_calls == 5, "P=1: %d tokens in %d rounds (want 40 in 5)",
              spec.n_tokens, spec.spec.target_calls);
        sp_session_out_free(&spec);
        CHECK(sp_session_set_synthetic(s, &zero, &err) == 0, "%s", err.msg);
        run(s, (float)temp, 0, &spec);
        CHECK(spec.spec.drafted >= 7 * 33 && spec.spec.accepted == 0, "P=0 temp %d: accepted %d of %d", temp,
              spec.spec.accepted, spec.spec.drafted);
        CHECK(spec.spec.target_calls == 40, "P=0: %d rounds for 40 tokens", spec.spec.target_calls);
        if (!temp) CHECK(!memcmp(plain.tokens, spec.tokens, sizeof(int32_t)), "P=0: the first token is not the target's");
        sp_session_out_free(&spec);
    }
    sp_synth prof = {.n = 3, .p = {1, 1, 0}, .seed = 3};
    CHECK(sp_session_set_synthetic(s, &prof, &err) == 0, "%s", err.msg);
    run(s, 0, 0, &spec);
    CHECK(spec.spec.accept_per_position[0] == 1 && spec.spec.accept_per_position[1] == 1 &&
              spec.spec.accept_per_position[2] == 0 && spec.spec.accept_per_position[3] == 0,
          "profile 1,1,0: per position %.2f %.2f %.2f %.2f", spec.spec.accept_per_position[0],
          spec.spec.accept_per_position[1], spec.spec.accept_per_position[2], spec.spec.accept_per_position[3]);
    sp_session_out_free(&spec);
    if (!HARNESS_SANITIZED) check_half(s); /* statistical: the optimised build */
    sp_synth bad = {.n = 1, .p = {-0.1f}};
    CHECK(sp_session_set_synthetic(s, &bad, &err) == -1 && strstr(err.msg, "probability"), "P=-0.1: %s", err.msg);
    CHECK(sp_session_set_synthetic(s, NULL, &err) == 0 && !sp_session_synthetic(s), "NULL does not turn it off");
    run(s, 0, 0, &spec);
    CHECK(!memcmp(plain.tokens, spec.tokens, 40 * sizeof(int32_t)), "turned off: spec != plain");
    sp_session_out_free(&spec);
    sp_session_out_free(&plain);
    sp_session_free(s);
}

static void test_not_in_generate(void) {
    static char out[1 << 16];
    const char *cmds[] = {"generate", "run"};
    for (int i = 0; i < 2; i++) {
        int rc = harness_runf(out, sizeof out, "%s %s --spec-synthetic 1 -m %s -md %s -n 4 2>&1", BIN,
                              cmds[i], TARGET, DRAFTER);
        CHECK(rc == 2 && strstr(out, "--spec-synthetic"), "%s --spec-synthetic: rc %d: %s", cmds[i], rc, out);
    }
    /* the public API has no way to it */
    CHECK(harness_runf(out, sizeof out, "grep -ci synth include/specula.h") == 1 && atoi(out) == 0,
          "include/specula.h mentions synth: %s", out);
}

static void test_bench_spec(void) {
    static char out[1 << 16];
    char prompts[256], rep[256];
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", TMP);
    snprintf(rep, sizeof rep, "%s/r.json", TMP);
    FILE *f = fopen(prompts, "w");
    fprintf(f, "{\"prompt_ids\": [11, 42, 97, 5, 300, 12, 42, 97]}\n{\"prompt_ids\": [9, 8, 7]}\n");
    fclose(f);
    int rc = harness_runf(out, sizeof out,
                          "SPECULA_NO_PROGRESS=1 %s bench-spec -m %s -md %s --draft-max 7 --spec-always -t 2 "
                          "--prompts %s -n 24 --spec-synthetic 1,0 --json %s 2>/dev/null",
                          BIN, TARGET, DRAFTER, prompts, rep);
    CHECK(rc == 0 && strstr(out, "SYNTHETIC ACCEPTANCE P=1") && strstr(out, "SYNTHETIC ACCEPTANCE P=0") &&
              strstr(out, "synthetic sweep"), "bench-spec: rc %d: %s", rc, out);
    CHECK(!strstr(out, "outputs identical"), "a synthetic pass claims identical outputs: %s", out);
    json_t *o = json_load_file(rep, 0, NULL), *sw = json_object_get(o, "sweep");
    CHECK(o && json_is_false(json_object_get(o, "lossless")) && json_is_true(json_object_get(o, "synthetic")) &&
              json_array_size(sw) == 2, "report not marked, or not 2 passes");
    for (size_t i = 0; i < json_array_size(sw); i++) {
        json_t *r = json_array_get(sw, i);
        long d = (long)json_integer_value(json_object_get(r, "drafted"));
        long a = (long)json_integer_value(json_object_get(r, "accepted"));
        CHECK(json_is_true(json_object_get(r, "synthetic")) && json_is_false(json_object_get(r, "lossless")) &&
                  !json_object_get(r, "identical"), "pass %zu not marked", i);
        CHECK(d > 0 && a == (i == 0 ? d : 0), "pass %zu: accepted %ld of %ld", i, a, d);
        double tau = json_real_value(json_object_get(r, "tau"));
        CHECK(i == 0 ? tau > 5 : fabs(tau - 1) < 1e-9, "pass %zu: tau %.3f", i, tau);
    }
    json_decref(o);
    rc = harness_runf(out, sizeof out, "%s bench-spec -m %s --spec none --prompts %s --spec-synthetic 0.5 2>&1", BIN,
                      TARGET, prompts);
    CHECK(rc == 2 && strstr(out, "needs a drafter"), "no drafter: rc %d: %s", rc, out);
    rc = harness_runf(out, sizeof out, "%s bench-spec -m %s -md %s --prompts %s --spec-synthetic 0.5,x 2>&1", BIN,
                      TARGET, DRAFTER, prompts);
    CHECK(rc == 2 && strstr(out, "entry 2"), "bad list: rc %d: %s", rc, out);
}

/* serve with args (synthetic acceptance P): one greedy completion, its timings checked */
static void serve_one(const char *args, double p) {
    static char out[1 << 16];
    test_server s;
    char full[1024];
    snprintf(full, sizeof full, "-m %s -md %s --draft-max 7 -np 1 -t 2 --spec-max-slots 0 %s", TARGET, DRAFTER, args);
    int up = server_start(&s, BIN, full) == 0;
    CHECK(up, "serve %s did not start", args);
    if (!up) return;
    CHECK(server_log_has(&s, "SYNTHETIC ACCEPTANCE"), "no synthetic banner in the log");
    int rc = harness_runf(out, sizeof out,
                          "curl -s -X POST -H 'Content-Type: application/json' -d '{\"prompt\":[11,42,97,5,300],"
                          "\"max_tokens\":24,\"ignore_eos\":true,\"temperature\":0}' http://127.0.0.1:%d/v1/completions",
                          s.port);
    json_t *o = json_loads(out, 0, NULL), *t = json_object_get(o, "timings");
    long d = (long)json_integer_value(json_object_get(t, "draft_n"));
    long a = (long)json_integer_value(json_object_get(t, "draft_n_accepted"));
    CHECK(rc == 0 && json_is_true(json_object_get(t, "synthetic")) && json_is_false(json_object_get(t, "lossless")),
          "timings not marked: %s", out);
    CHECK(d > 0 && a == (p == 1 ? d : 0), "P=%g: accepted %ld of %ld", p, a, d);
    json_decref(o);
    rc = harness_runf(out, sizeof out, "curl -s http://127.0.0.1:%d/props", s.port);
    CHECK(rc == 0 && strstr(out, "\"lossless\":false") && strstr(out, "\"synthetic_acceptance\":["),
          "/props not marked: %s", out);
    server_stop(&s);
    CHECK(server_log_has(&s, "SYNTHETIC acceptance (benchmark only"), "the request's log line is not marked");
    unlink(s.log);
}

static void test_serve(void) {
    serve_one("--spec-synthetic 1", 1);
    serve_one("--spec-synthetic 0", 0);
    static char out[1 << 16];
    int rc = harness_runf(out, sizeof out, "%s serve -m %s --spec none --spec-synthetic 0.5 --port 0 2>&1", BIN, TARGET);
    CHECK(rc == 2 && strstr(out, "needs a drafter"), "serve without a drafter: rc %d: %s", rc, out);
    rc = harness_runf(out, sizeof out, "%s serve -m %s -md %s --tree 4 --spec-synthetic 0.5 --port 0 2>&1", BIN, TARGET,
                      DRAFTER);
    CHECK(rc == 2 && strstr(out, "chains"), "serve with a tree: rc %d: %s", rc, out);
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    if (!mkdtemp(TMP)) {
        printf("FAIL mkdtemp\n");
        return 1;
    }
    RUN(test_check_tau);
    RUN(test_session_counts);
    RUN(test_not_in_generate);
    RUN(test_bench_spec);
    RUN(test_serve);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
    if (system(cmd) != 0) harness_failed++;
    return harness_done("test_synth");
}
