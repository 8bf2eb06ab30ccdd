/* test_cli_spec.c — the speculative subcommands end to end through the `specula` binary:
 * audit (pass on a correct verifier, FAIL with --broken, --self-test), generate --spec (same
 * tokens as plain), bench-spec (identical outputs, JSON report), bench-verify --json (one sequence
 * and batched slots). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char cli[4096];
static const char *M = "tests/data/ref-logits/llama";

static void test_audit_cli(void) {
    static char out[1 << 16];
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s audit --self-test 2>&1", cli);
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "self-test: PASS"), "self-test: %s", out);
    const char *audit = "%s audit -m %s --spec draft -md %s --draft-temp 2.5 --temp 1.0 --draws %d "
                        "--prompt-ids 1,5493,20509 -t 2 %s 2>&1";
    const int draws = HARNESS_AUDIT_DRAWS(3000);
    snprintf(cmd, sizeof cmd, audit, cli, M, M, draws, "");
    int rc = harness_run(cmd, out, sizeof out);
    CHECK(harness_audit_verdict(rc, out, 1), "audit: %s", out);
    snprintf(cmd, sizeof cmd, audit, cli, M, M, draws, "--broken");
    rc = harness_run(cmd, out, sizeof out);
    CHECK(harness_audit_verdict(rc, out, 0), "broken audit must fail: %s", out);
    snprintf(cmd, sizeof cmd, "%s audit -m %s --temp 0 --prompt-ids 1 2>&1", cli, M);
    CHECK(harness_run(cmd, out, sizeof out) == 2, "temp 0 must be a usage error");
}

static void test_generate_spec_cli(void) {
    static char a[1 << 16], b[1 << 16];
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2,3,4,1,2,3,4 -n 40 --ignore-eos 2>/dev/null", cli, M);
    CHECK(harness_run(cmd, a, sizeof a) == 0 && strlen(a) > 40, "plain: %s", a);
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --prompt-ids 1,2,3,4,1,2,3,4 -n 40 --ignore-eos --spec draft -md %s "
             "--draft-max 5 2>/dev/null", cli, M, "tests/data/ref-logits/qwen3");
    CHECK(harness_run(cmd, b, sizeof b) == 0 && !strcmp(a, b), "draft spec differs:\n%s\n%s", a, b);
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --prompt-ids 1,2,3,4,1,2,3,4 -n 40 --ignore-eos --spec ngram --json 2>/dev/null", cli, M);
    CHECK(harness_run(cmd, b, sizeof b) == 0 && strstr(b, "\"acceptance_rate\"") && strstr(b, "\"tokens\""), "json: %s", b);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1 --spec bogus 2>&1", cli, M);
    CHECK(harness_run(cmd, b, sizeof b) == 2 && strstr(b, "bogus"), "unknown drafter: %s", b);
}

static void test_bench_cli(void) {
    static char out[1 << 16];
    char cmd[16384], dir[] = "/tmp/specula-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char prompts[512], rep[512];
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", dir);
    snprintf(rep, sizeof rep, "%s/r.json", dir);
    FILE *f = fopen(prompts, "w");
    fprintf(f, "{\"prompt_ids\": [1, 2, 3, 4, 1, 2, 3]}\n{\"prompt_ids\": [9, 8, 7]}\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "SPECULA_NO_PROGRESS=1 %s bench-spec -m %s --spec ngram --prompts %s -n 24 --json %s 2>&1",
             cli, M, prompts, rep);
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "outputs identical: yes"), "bench-spec: %s", out);
    CHECK(access(rep, R_OK) == 0, "no JSON report");
    f = fopen(prompts, "w");
    fprintf(f, "{\"prompt_ids\": [1, -2]}\n");
    fclose(f);
    CHECK(harness_run(cmd, out, sizeof out) == 2 && strstr(out, "p.jsonl:1"), "bad prompt file: %s", out);
    snprintf(cmd, sizeof cmd, "%s bench-verify -m %s --k-max 4 --reps 2 --json 2>&1", cli, M);
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "\"k\":[1,2,3,4]") && strstr(out, "\"ratio\""),
          "bench-verify: %s", out);
    snprintf(cmd, sizeof cmd, "%s bench-verify -m %s --k-max 3 --reps 2 --slots 3 --json 2>&1", cli, M);
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "\"k\":[1,2,3]") && strstr(out, "\"slots\":3"),
          "bench-verify --slots 3: %s", out);
    snprintf(cmd, sizeof cmd, "%s bench-verify -m %s --slots 2 --tree 2>&1", cli, M);
    CHECK(harness_run(cmd, out, sizeof out) != 0 && strstr(out, "--slots"), "bench-verify --slots --tree: %s", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    RUN(test_audit_cli);
    RUN(test_generate_spec_cli);
    RUN(test_bench_cli);
    return harness_done("test_cli_spec");
}
