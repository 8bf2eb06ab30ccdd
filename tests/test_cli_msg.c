/* test_cli_msg.c — what the user sees, through the `specula` binary: errors that name the real
 * cause (a -m that does not exist, export-gguf of a drafter without --target, -md given a drafter
 * GGUF written for llama.cpp, regen records without responses, ShareGPT records, calibrate at
 * the end of its temperature grid), the model
 * summary on load (-v longer, -q / --log-disable none), an EOS that is an ordinary token never
 * printed (generate and serve; serve's drafter lines at debug level), the stop reason when the context fills, and `run`'s report (the embedded model named,
 * the per-prompt spread, the warning when speculation is slower than plain). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "server_harness.h"

static char cli[4096], root[256];
static const char *DEF = "models/default/target", *DRAFTER = "models/default/drafter";
static char out[1 << 16];
static char eos_want[4096]; /* test_eos_not_printed: the text before the EOS */
static int eos_ok, eos_id;

#define run(...) harness_runf(out, sizeof out, __VA_ARGS__)
#define write_file(name, text) harness_write_file(root, name, text)

static const char *PROMPT = "class Stack:\\n    def __init__(self):\\n        self.";

static void test_model_typo(void) {
    const char *cmds[] = {"generate -p hi", "generate --chat -p hi", "generate -cnv </dev/null", "tokenize -p hi",
                          "audit --prompt-ids 1,2 --spec ngram", "bench-spec --spec ngram --prompts /dev/null"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char a[64], rest[128];
        sscanf(cmds[i], "%63s %127[^\n]", a, rest);
        int rc = run("%s %s -m %s/no-such-model %s 2>&1", cli, a, root, rest);
        CHECK(rc != 0 && strcasestr(out, "no such file") && !strstr(out, "tokenizer") && !strstr(out, "template"),
              "%s: rc %d: %s", cmds[i], rc, out);
    }
    write_file("conv.json", "[{\"role\": \"user\", \"content\": \"hi\"}]");
    int rc = run("%s template -m %s/no-such-model --messages %s/conv.json 2>&1", cli, root, root);
    CHECK(rc != 0 && strstr(out, "no such file") && !strstr(out, "chat template"), "template: rc %d: %s", rc, out);
}

static void test_export_drafter(void) {
    int rc = run("%s export-gguf -m %s -o %s/d.gguf 2>&1", cli, DRAFTER, root);
    CHECK(rc != 0 && strstr(out, "--target") && strstr(out, "dspark"), "no --target: rc %d: %s", rc, out);
    rc = run("%s export-gguf -m %s --target %s -o %s/d.gguf 2>&1", cli, DRAFTER, DEF, root);
    CHECK(rc == 0, "export with --target: rc %d: %s", rc, out);
    rc = run("%s generate -m %s -md %s/d.gguf -p x -n 2 2>&1", cli, DEF, root);
    CHECK(rc != 0 && strstr(out, "drafter written for llama.cpp") && strstr(out, "directory"),
          "-md drafter.gguf: rc %d: %s", rc, out);
}

/* a random DSpark drafter: its confidences predict nothing, so every slot's fit reaches the
 * grid's upper end, and calibrate says so */
static void test_calibrate_bound(void) {
    write_file("cal.jsonl", "{\"prompt\": \"class Stack:\\n    def __init__(self):\\n        self.\"}\n"
                            "{\"prompt\": \"import os\\nimport sys\\n\"}\n");
    int rc = run("%s new-drafter --arch dspark -m %s --seed 1 -o %s/rd 2>&1", cli, DEF, root);
    CHECK(rc == 0, "new-drafter: %s", out);
    rc = run("%s calibrate -m %s -md %s/rd --prompts %s/cal.jsonl -n 16 --temp 0 --dry-run -t 1 2>&1", cli, DEF, root,
             root);
    CHECK(rc == 0 && strstr(out, "hit the upper bound 20") && strstr(out, "20.000"), "calibrate: rc %d: %s", rc, out);
}

static void test_summary(void) {
    int rc = run("%s generate -m %s -p x -n 2 -t 1 2>&1 >/dev/null", cli, DEF);
    CHECK(rc == 0 && strstr(out, "model: ") && strstr(out, "gemma4") && strstr(out, "M params") &&
              strstr(out, "types BF16") && strstr(out, "context 8192") && strstr(out, "loaded in") &&
              strstr(out, "cpu ") && !strstr(out, "rope theta"),
          "summary: %s", out);
    rc = run("%s generate -m %s -p x -n 2 -t 1 -v 2>&1 >/dev/null", cli, DEF);
    CHECK(rc == 0 && strstr(out, "model: ") && strstr(out, "rope theta") && strstr(out, "tensors"), "-v: %s", out);
    const char *quiet[] = {"-q", "--quiet", "--log-disable"};
    for (int i = 0; i < 3; i++) {
        rc = run("%s generate -m %s -p x -n 2 -t 1 %s 2>&1 >/dev/null", cli, DEF, quiet[i]);
        CHECK(rc == 0 && !strstr(out, "model: ") && strstr(out, "emitted"), "%s: %s", quiet[i], out);
    }
}

/* the "tokens":[...] of a JSON text: up to n ids into t; the count */
static int json_ids(const char *text, int *t, int n) {
    const char *p = strstr(text, "\"tokens\":[");
    int k = 0;
    for (p = p ? p + 10 : NULL; p && *p && *p != ']' && k < n; k++) {
        t[k] = (int)strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    return k;
}

/* an EOS id that is an ordinary token (generation_config.json's eos_token_id): the generation
 * stops there and its text is neither streamed nor in --json's text */
static void test_eos_not_printed(void) {
    int t[16];
    CHECK(run("%s generate -m %s -p \"$(printf '%s')\" -n 8 -t 1 --json 2>/dev/null", cli, DEF, PROMPT) == 0 &&
              json_ids(out, t, 16) == 8,
          "plain: %s", out);
    int eos = t[4];
    CHECK(run("mkdir -p %s/eos && for f in %s/*; do ln -sf \"$PWD/$f\" %s/eos/; done && rm -f %s/eos/generation_config.json",
              root, DEF, root, root) == 0, "link");
    char gc[128];
    snprintf(gc, sizeof gc, "{\"eos_token_id\": %d}", eos);
    write_file("eos/generation_config.json", gc);
    int n = 0, first = 0; /* the first time eos appears */
    while (first < 8 && t[first] != eos) first++;
    char want[4096] = "";
    if (first > 0) {
        char ids[256] = "";
        for (int i = 0; i < first; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", t[i]);
        run("%s detokenize -m %s --ids %s 2>/dev/null", cli, DEF, ids);
        snprintf(want, sizeof want, "%.4000s", out);
        size_t l = strlen(want);
        if (l && want[l - 1] == '\n') want[l - 1] = 0;
    }
    CHECK(run("%s generate -m %s/eos -p \"$(printf '%s')\" -n 8 -t 1 --json 2>/dev/null", cli, root, PROMPT) == 0 &&
              (n = json_ids(out, t, 16)) == first + 1 && strstr(out, "\"stop\":\"eos\""),
          "eos run: %d tokens (want %d): %s", n, first + 1, out);
    const char *tx = strstr(out, "\"text\":\"");
    CHECK(tx && tx[8] != 0, "text: %s", out);
    char streamed[4096];
    run("%s generate -m %s/eos -p \"$(printf '%s')\" -n 8 -t 1 -q 2>/dev/null", cli, root, PROMPT);
    snprintf(streamed, sizeof streamed, "%.4000s", out);
    size_t l = strlen(streamed);
    if (l && streamed[l - 1] == '\n') streamed[l - 1] = 0;
    CHECK(!strcmp(streamed, want), "streamed '%s', want the text before the EOS '%s'", streamed, want);
    snprintf(eos_want, sizeof eos_want, "%s", want);
    eos_ok = first > 0 && !strcmp(streamed, want);
    eos_id = eos;
}

/* serve: the same EOS is not in the completion's text; the drafter's per-request line is a
 * debug line (serve -v), not an info line */
static void test_serve(void) {
    if (!eos_ok) return;
    /* the serve target: config.json's own eos_token_id lists the ordinary token */
    CHECK(run("mkdir -p %s/eos2 && for f in %s/*; do ln -sf \"$PWD/$f\" %s/eos2/; done && rm %s/eos2/config.json && "
              "sed 's/\"eos_token_id\": 1,/\"eos_token_id\": [1, %d],/' %s/config.json > %s/eos2/config.json && "
              "grep -c '\"eos_token_id\": \\[1, %d\\]' %s/eos2/config.json",
              root, DEF, root, root, eos_id, DEF, root, eos_id, root) == 0,
          "eos2: %s", out);
    for (int verbose = 0; verbose < 2; verbose++) {
        test_server srv;
        char args[1024];
        snprintf(args, sizeof args, "-m %s/eos2 -md %s --parallel 1 --spec-max-slots 0 -t 1 %s", root, DRAFTER, verbose ? "-v" : "");
        CHECK(server_start(&srv, cli, args) == 0, "serve %s did not start", args);
        if (srv.port <= 0) continue;
        run("curl -s http://127.0.0.1:%d/v1/completions -H 'Content-Type: application/json' "
            "-d '{\"prompt\": \"%s\", \"max_tokens\": 8, \"temperature\": 0}'", srv.port, PROMPT);
        json_t *o = json_loads(out, 0, NULL);
        const char *text = json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text"));
        CHECK(text && !strcmp(text, eos_want), "serve text '%s', want '%s' (%s)", text ? text : "", eos_want, out);
        json_decref(o);
        server_stop(&srv);
        CHECK(server_log_has(&srv, "proposals,") == verbose, "drafter line with%s -v", verbose ? "" : "out");
        unlink(srv.log);
    }
}

static void test_stop_ctx(void) {
    for (int spec = 0; spec < 2; spec++) {
        int rc = run("%s generate -m %s -p \"$(printf '%s')\" -n -1 -c 24 -t 1 %s 2>&1 >/dev/null", cli, DEF, PROMPT,
                     spec ? "--spec ngram" : "");
        CHECK(rc == 0 && strstr(out, "stop: context"), "%s: %s", spec ? "ngram" : "plain", out);
    }
}

static void test_run_report(void) {
    write_file("two.jsonl", "{\"prompt\": \"class Stack:\\n    def __init__(self):\\n        self.\"}\n"
                            "{\"prompt\": \"import os\\nimport sys\\n\"}\n");
    int rc = run("%s run -n 8 -t 1 -q --prompts %s/two.jsonl 2>&1", cli, root);
    CHECK(rc == 0 && strstr(out, "the embedded model") && strstr(out, "Python code model") &&
              strstr(out, "per prompt") && !strstr(out, "M params"),
          "run (embedded): %s", out);
    /* the target as its own draft model, drafting every round: slower than plain, always */
    rc = run("%s run -m %s --spec draft -md %s --spec-always -n 12 -t 1 -q --prompts %s/two.jsonl 2>&1", cli, DEF, DEF,
             root);
    CHECK(rc == 0 && strstr(out, "warning: speculative decoding was slower than plain") && !strstr(out, "embedded"),
          "run (slower): %s", out);
}

static void test_regen_records(void) {
    write_file("prompts.jsonl", "{\"prompt\": \"import os\\n\"}\n");
    int rc = run("%s regen -m %s --data %s/prompts.jsonl -o %s/s1 -q 2>&1", cli, DEF, root, root);
    CHECK(rc != 0 && strstr(out, "--generate N"), "prompt only: rc %d: %s", rc, out);
    write_file("user.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
    rc = run("%s regen -m %s --data %s/user.jsonl -o %s/s2 -q 2>&1", cli, DEF, root, root);
    CHECK(rc != 0 && strstr(out, "no assistant reply") && strstr(out, "--generate N"), "user only: rc %d: %s", rc, out);
    write_file("sharegpt.jsonl",
               "{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"a stack\"}, "
               "{\"from\": \"gpt\", \"value\": \"class Stack:\\n    pass\"}]}\n"
               "{\"conversations\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
               "\"content\": \"import os\"}]}\n");
    rc = run("%s regen -m %s --data %s/sharegpt.jsonl -o %s/s3 -q 2>&1 && ls %s/s3", cli, DEF, root, root, root);
    CHECK(rc == 0 && strstr(out, "shard_"), "conversations: rc %d: %s", rc, out);
    write_file("bad.jsonl", "{\"conversations\": [{\"from\": \"human\"}]}\n");
    rc = run("%s regen -m %s --data %s/bad.jsonl -o %s/s4 -q 2>&1", cli, DEF, root, root);
    CHECK(rc != 0 && strstr(out, "conversations"), "bad conversations: rc %d: %s", rc, out);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    snprintf(root, sizeof root, "/tmp/specula_test_cli_msg_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", root);
    if (system(cmd) != 0 || access(cli, X_OK) != 0) {
        printf("skipped: no specula binary at %s\n", cli);
        return harness_done("test_cli_msg");
    }
    RUN(test_model_typo);
    RUN(test_export_drafter);
    RUN(test_calibrate_bound);
    RUN(test_summary);
    RUN(test_eos_not_printed);
    RUN(test_serve);
    RUN(test_stop_ctx);
    RUN(test_run_report);
    RUN(test_regen_records);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_cli_msg");
}
