/* test_cli_gen.c — the generating commands' llama.cpp-style flags, through the `specula` binary:
 * --stop / -r (never printed, plain and speculative, streamed and --json), -f FILE, -n -1,
 * --seed -1, -md without --spec, --version, penalties (speculative == plain, audit passes),
 * generation_config.json (eos ids, default sampling, --ignore-generation-config), the prompt-file
 * format and its errors, and `specula run` from another directory (--spec none, --help). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char cli[4096], root[256];
static const char *TINY = "tests/data/ref-logits/llama", *DEF = "models/default/target",
                  *DRAFTER = "models/default/drafter";
static char out[1 << 16], out2[1 << 16];

#define run(...) harness_runf(out, sizeof out, __VA_ARGS__)
#define write_file(name, text) harness_write_file(root, name, text)

/* the integer after "key": in a JSON text, or -1 */
static long json_int(const char *text, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(text, k);
    return p ? strtol(p + strlen(k), NULL, 10) : -1;
}

/* the "tokens":[...] array of a JSON text, as text */
static void json_tokens(const char *text, char *dst, size_t cap) {
    const char *p = strstr(text, "\"tokens\":[");
    const char *e = p ? strchr(p, ']') : NULL;
    snprintf(dst, cap, "%.*s", p && e ? (int)(e - p) : 0, p ? p : "");
}

static void test_version_and_file(void) {
    CHECK(run("%s --version", cli) == 0 && !strncmp(out, "specula ", 8), "--version: %s", out);
    CHECK(run("%s generate --version", cli) == 0 && !strncmp(out, "specula ", 8), "generate --version: %s", out);
    /* -f FILE: the file's text (one trailing newline dropped) is the prompt */
    write_file("p.txt", "import os\nimport sys\n\n\ndef main():\n    \n");
    char a[4096], b[4096];
    CHECK(run("%s generate -m %s -f %s/p.txt -n 12 -t 2 --json 2>/dev/null", cli, DEF, root) == 0, "-f: %s", out);
    json_tokens(out, a, sizeof a);
    CHECK(run("%s generate -m %s -p \"$(printf 'import os\\nimport sys\\n\\n\\ndef main():\\n    ')\" -n 12 -t 2 --json "
              "2>/dev/null", cli, DEF) == 0, "-p: %s", out);
    json_tokens(out, b, sizeof b);
    CHECK(a[0] && !strcmp(a, b), "-f and -p differ:\n%s\n%s", a, b);
    CHECK(run("%s generate -m %s -f %s/none.txt 2>&1", cli, DEF, root) == 2 && strstr(out, "none.txt"), "-f missing: %s",
          out);
}

/* a 6-byte window of letters and a space from offset 12 on (a stop string that spans tokens) */
static int pick_stop(const char *t, char *s) {
    size_t n = strlen(t);
    for (size_t i = 12; i + 6 < n; i++) {
        int ok = t[i] != ' ' && t[i + 5] != ' ' && memchr(t + i, ' ', 6);
        for (int k = 0; k < 6 && ok; k++) ok = (t[i + k] >= 'a' && t[i + k] <= 'z') || t[i + k] == ' ';
        if (ok) {
            memcpy(s, t + i, 6);
            s[6] = 0;
            return 1;
        }
    }
    return 0;
}

static void test_stop_strings(void) {
    const char *gen = "%s generate -m %s -f %s/p.txt -n 40 -t 2 --repeat-penalty 1.3 %s %s 2>/dev/null";
    CHECK(run(gen, cli, DEF, root, "", "") == 0, "plain: %s", out);
    static char full[1 << 16], want[1 << 16];
    char stop[8];
    snprintf(full, sizeof full, "%s", out);
    CHECK(pick_stop(full, stop), "no stop candidate in '%s'", full);
    char *hit = strstr(full, stop);
    size_t cut = hit ? (size_t)(hit - full) : 0;

    snprintf(want, sizeof want, "%.*s\n", (int)cut, full);
    printf("  stop string '%s' cuts the text at byte %zu of %zu\n", stop, cut, strlen(full));
    const char *modes[] = {"", "-md models/default/drafter", "--spec ngram"};
    for (int m = 0; m < 3; m++) {
        char flags[128];
        snprintf(flags, sizeof flags, "--stop '%s'", stop);
        CHECK(run(gen, cli, DEF, root, flags, modes[m]) == 0 && !strcmp(out, want),
              "--stop '%s' %s:\n got '%s'\nwant '%s'", stop, modes[m], out, want);
        snprintf(flags, sizeof flags, "-r never_there -r '%s' --json", stop);
        CHECK(run(gen, cli, DEF, root, flags, modes[m]) == 0 && strstr(out, "\"stop\":\"stop_string\""),
              "json stop: %s", out);
        char *tx = strstr(out, "\"text\":\"");
        CHECK(tx && !strstr(tx, stop), "--json text holds the stop string: %s", out);
    }
    /* an escaped newline: "\\n" on the command line is a newline, as in llama.cpp's reverse prompts */
    const char *nl = strrchr(full, '\n');
    while (nl && nl > full && !(nl[1] >= 'a' && nl[1] <= 'z' && nl[2] >= 'a' && nl[2] <= 'z')) {
        const char *p = nl - 1;
        while (p > full && *p != '\n') p--;
        nl = *p == '\n' ? p : NULL;
    }
    CHECK(nl != NULL, "no newline followed by two letters in '%s'", full);
    if (nl) {
        char raw[4] = {'\n', nl[1], nl[2], 0}, flags[64];
        cut = (size_t)(strstr(full, raw) - full);
        snprintf(want, sizeof want, "%.*s\n", (int)cut, full);
        snprintf(flags, sizeof flags, "--stop '\\n%c%c'", nl[1], nl[2]);
        CHECK(run(gen, cli, DEF, root, flags, "") == 0 && !strcmp(out, want), "%s:\n got '%s'\nwant '%s'", flags, out,
              want);
    }
    CHECK(run("%s generate -m %s --prompt-ids 1,2 --stop x 2>&1", cli, TINY) == 2 && strstr(out, "tokenizer"),
          "--stop without a tokenizer: %s", out);
}

static void test_n_and_seed(void) {
    for (int s = 0; s < 2; s++) {
        CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n -1 -c 20 --ignore-eos --json %s 2>/dev/null", cli, TINY,
                  s ? "--spec ngram" : "") == 0 &&
                  strstr(out, "\"stop\":\"context\"") && json_int(out, "emitted") == 18,
              "-n -1 %s: %s", s ? "spec" : "plain", out);
    }
    CHECK(run("%s generate -m %s --prompt-ids 1 -n -2 2>&1", cli, TINY) == 2, "-n -2 accepted");
    char t1[4096], t2[4096];
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n 12 --temp 1 --seed -1 --json 2>/dev/null", cli, TINY) == 0,
          "seed -1: %s", out);
    long s1 = json_int(out, "seed");
    json_tokens(out, t1, sizeof t1);
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n 12 --temp 1 --seed -1 --json 2>/dev/null", cli, TINY) == 0, "2");
    long s2 = json_int(out, "seed");
    CHECK(s1 >= 0 && s2 >= 0 && s1 != s2, "random seeds %ld %ld", s1, s2);
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n 12 --temp 1 --seed %ld --json 2>/dev/null", cli, TINY, s1) == 0,
          "3");
    json_tokens(out, t2, sizeof t2);
    CHECK(!strcmp(t1, t2), "the printed seed does not reproduce the run:\n%s\n%s", t1, t2);
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n 4 --temp 1 --seed -1 2>&1 >/dev/null", cli, TINY) == 0 &&
              strstr(out, "(random)"),
          "seed not printed: %s", out);
}

static void test_md_and_penalties(void) {
    /* -md alone: the drafter kind from its config.json; output identical to plain with penalties */
    const char *gen = "%s generate -m %s -f %s/p.txt -n 32 -t 2 --repeat-penalty 1.4 --frequency-penalty 0.2 "
                      "--presence-penalty 0.3 --repeat-last-n 32 %s 2>%s/err.txt";
    CHECK(run(gen, cli, DEF, root, "", root) == 0, "plain: %s", out);
    snprintf(out2, sizeof out2, "%s", out);
    char md[256];
    snprintf(md, sizeof md, "-md %s", DRAFTER);
    CHECK(run(gen, cli, DEF, root, md, root) == 0 && !strcmp(out, out2), "dspark with penalties differs:\n%s\n%s", out,
          out2);
    CHECK(run("cat %s/err.txt", root) == 0 && strstr(out, "spec dspark:"), "-md did not turn DSpark on: %s", out);
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3,1,2,3 -n 24 --ignore-eos --repeat-penalty 1.5 2>/dev/null", cli,
              TINY) == 0, "tiny plain");
    snprintf(out2, sizeof out2, "%s", out);
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3,1,2,3 -n 24 --ignore-eos --repeat-penalty 1.5 -md %s 2>%s/err.txt",
              cli, TINY, "tests/data/ref-logits/qwen3", root) == 0 && !strcmp(out, out2),
          "draft model with penalties differs:\n%s\n%s", out, out2);
    CHECK(run("cat %s/err.txt", root) == 0 && strstr(out, "spec draft:"), "-md did not turn the draft model on: %s", out);
    CHECK(run("%s generate -m %s --prompt-ids 1 --repeat-penalty 0 2>&1", cli, TINY) == 2 && strstr(out, "repeat"),
          "--repeat-penalty 0 accepted: %s", out);
    /* -cnv takes the penalties too: a penalised chat reply differs, and DSpark gives the same one */
    const char *cnv = "printf 'import os\\n/exit\\n' | %s generate -m %s -cnv -n 16 -t 2 %s 2>/dev/null";
    CHECK(run(cnv, cli, DEF, "") == 0, "-cnv: %s", out);
    snprintf(out2, sizeof out2, "%s", out);
    CHECK(run(cnv, cli, DEF, "--repeat-penalty 1.3") == 0 && strcmp(out, out2), "-cnv ignores --repeat-penalty: %s", out);
    snprintf(out2, sizeof out2, "%s", out);
    CHECK(run(cnv, cli, DEF, "--repeat-penalty 1.3 -md models/default/drafter") == 0 && !strcmp(out, out2),
          "-cnv with DSpark and penalties differs:\n%s\n%s", out, out2);
    /* the sampling path with penalties: the audit passes */
    CHECK(run("%s audit -m %s --spec draft -md %s --draft-temp 1.8 --temp 1.0 --draws 1000 --repeat-penalty 1.4 "
              "--presence-penalty 0.5 --frequency-penalty 0.3 --prompt-ids 5,9,5,9,5,9,7 -t 2 2>&1",
              cli, TINY, TINY) == 0 &&
              strstr(out, "audit: PASS") && strstr(out, "penalties: repeat 1.4"),
          "audit with penalties: %s", out);
}

static void test_generation_config(void) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/gc", root);
    CHECK(run("mkdir -p %s && ln -sf $PWD/%s/config.json $PWD/%s/model.safetensors %s/", dir, TINY, TINY, dir) == 0,
          "setup");
    const char *gen = "%s generate -m %s --prompt-ids 1,2,3 -n 16 --ignore-eos --json %s 2>&1";
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n 16 --json 2>/dev/null", cli, TINY) == 0, "plain");
    /* an eos id from generation_config.json: the first token that did not occur before index 3 */
    long toks[16];
    int n = 0;
    for (const char *p = strstr(out, "[") + 1; n < 16 && *p && *p != ']'; n++) {
        char *e;
        toks[n] = strtol(p, &e, 10);
        p = *e == ',' ? e + 1 : e;
    }
    int k = 3;
    for (; k < n; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= toks[j] == toks[k];
        if (!seen) break;
    }
    CHECK(n == 16 && k < n, "no eos candidate");
    char gc[512];
    snprintf(gc, sizeof gc,
             "{\"bos_token_id\": 1, \"eos_token_id\": [99999999, %ld], \"do_sample\": false,\n"
             " \"max_length\": 1000000000000000019884624838656, \"transformers_version\": \"4.51.0\"}\n", toks[k]);
    write_file("gc/generation_config.json", gc);
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n 16 --json 2>&1", cli, dir) == 0 &&
              strstr(out, "\"stop\":\"eos\"") && json_int(out, "emitted") == k + 1,
          "eos %ld at %d from generation_config.json: %s", toks[k], k, out);
    CHECK(run("%s generate -m %s --prompt-ids 1,2,3 -n 16 --json --ignore-generation-config 2>&1", cli, dir) == 0 &&
              json_int(out, "emitted") == 16,
          "--ignore-generation-config: %s", out);
    /* default sampling: do_sample true, temperature 0.7, top_k 5 == the same flags given by hand */
    write_file("gc/generation_config.json", "{\"do_sample\": true, \"temperature\": 0.7, \"top_k\": 5, \"top_p\": 0.9}");
    char a[4096], b[4096], g[4096];
    CHECK(run(gen, cli, dir, "--seed 3") == 0, "gc sampling: %s", out);
    json_tokens(out, a, sizeof a);
    CHECK(run(gen, cli, TINY, "--seed 3 --temp 0.7 --top-k 5 --top-p 0.9") == 0, "hand sampling: %s", out);
    json_tokens(out, b, sizeof b);
    CHECK(run(gen, cli, TINY, "") == 0, "greedy: %s", out);
    json_tokens(out, g, sizeof g);
    CHECK(a[0] && !strcmp(a, b) && strcmp(a, g), "generation_config sampling:\n%s\n%s\n(greedy %s)", a, b, g);
    CHECK(run(gen, cli, dir, "--temp 0") == 0, "user temp");
    json_tokens(out, b, sizeof b);
    CHECK(!strcmp(b, g), "--temp 0 must win over generation_config.json: %s", b);
    write_file("gc/generation_config.json", "{\"eos_token_id\": \"two\"}");
    CHECK(run(gen, cli, dir, "") == 2 && strstr(out, "generation_config.json") && strstr(out, "eos_token_id"),
          "bad generation_config.json: %s", out);
}

static void test_prompt_files(void) {
    write_file("bad.jsonl", "def f():\n    return 1\n");
    write_file("bad.txt", "def f():\n    return 1\n");
    write_file("msgs.jsonl", "{\"prompt\": \"import os\"}\n{\"messages\": [{\"role\": \"user\"}]}\n");
    write_file("ids.jsonl", "{\"prompt_ids\": [5, 6, 7]}\n\n{\"prompt\": \"import re\\nimport os\"}\n");
    CHECK(run("%s run -m %s --prompts %s/bad.jsonl -n 4 -q 2>&1", cli, DEF, root) == 2 &&
              strstr(out, "bad.jsonl:1: not a JSON object") && strstr(out, "--text-prompts"),
          "text read as JSONL: %s", out);
    CHECK(run("%s bench-spec -m %s --prompts %s/bad.jsonl -n 4 2>&1", cli, DEF, root) == 2 &&
              strstr(out, "bad.jsonl:1: not a JSON object"),
          "bench-spec: %s", out);
    CHECK(run("%s calibrate -m %s -md %s --prompts %s/bad.jsonl -n 4 --dry-run 2>&1", cli, DEF, DRAFTER, root) != 0 &&
              strstr(out, "bad.jsonl:1: not a JSON object"),
          "calibrate: %s", out);
    CHECK(run("%s run -m %s --prompts %s/msgs.jsonl -n 4 -q 2>&1", cli, DEF, root) == 2 &&
              strstr(out, "msgs.jsonl:2: messages[0] needs"),
          "bad messages: %s", out);
    CHECK(run("%s run -m %s --prompts %s/bad.txt -n 4 -q -t 2 2>&1", cli, DEF, root) == 0 && strstr(out, "yes"),
          ".txt prompts: %s", out);
    CHECK(run("%s run -m %s --prompts %s/bad.jsonl --text-prompts -n 4 -q -t 2 2>&1", cli, DEF, root) == 0,
          "--text-prompts: %s", out);
    CHECK(run("SPECULA_NO_PROGRESS=1 %s bench-spec -m %s --prompts %s/ids.jsonl -n 8 -t 2 2>&1", cli, DEF, root) == 0 &&
              strstr(out, "outputs identical: yes"),
          "ids + text JSONL: %s", out);
    /* "messages": rendered with the model's own template, the ids `specula template --ids` gives */
    const char *conv = "[{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": "
                       "\"import os\"}]";
    char line[512];
    snprintf(line, sizeof line, "{\"messages\": %s}\n", conv);
    write_file("conv.jsonl", line);
    write_file("conv.json", conv);
    CHECK(run("%s template -m %s --messages %s/conv.json --ids", cli, DEF, root) == 0, "template --ids: %s", out);
    long n_ids = 1;
    for (const char *c = out; *c; c++) n_ids += *c == ',';
    CHECK(run("SPECULA_NO_PROGRESS=1 %s bench-spec -m %s --prompts %s/conv.jsonl -n 4 -t 2 --json %s/rep.json "
              ">/dev/null 2>&1 && cat %s/rep.json", cli, DEF, root, root, root) == 0 &&
              strstr(out, "\"prompt_tokens\"") && json_int(out, "prompt_tokens") == n_ids,
          "messages: %ld prompt tokens, template --ids gives %ld: %s", json_int(out, "prompt_tokens"), n_ids, out);
}

static void test_run_anywhere(void) {
    char abs[4096];
    CHECK(realpath(cli, abs) != NULL, "realpath");
    /* the default target and drafter from another directory (one short prompt: a quick run) */
    write_file("one.jsonl", "{\"prompt\": \"import os\\nimport sys\\n\"}\n");
    CHECK(run("cd / && %s run -q -n 12 -t 2 --json --prompts %s/one.jsonl 2>&1", abs, root) == 0 &&
              strstr(out, "\"identical\":true") && strstr(out, "\"tau\""),
          "run from /: %s", out);
    /* and the default prompt file: plain decoding only */
    CHECK(run("cd / && %s run -q -n 1 -t 2 --spec none 2>&1", abs) == 0 && strstr(out, "plain decoding") &&
              strstr(out, "6 prompts") && !strstr(out, "speculative decoding"),
          "--spec none: %s", out);
    /* an installed binary: PREFIX/bin/specula finds PREFIX/share/specula/default (make install) */
    CHECK(run("mkdir -p %s/pfx/bin %s/pfx/share/specula && cp %s %s/pfx/bin/specula && "
              "ln -s $PWD/models/default %s/pfx/share/specula/default",
              root, root, abs, root, root) == 0,
          "install setup: %s", out);
    CHECK(run("cd / && %s/pfx/bin/specula run -q -n 2 -t 2 --spec none --prompts %s/one.jsonl 2>&1", root, root) == 0 &&
              strstr(out, "pfx/bin/../share/specula/default/target"),
          "installed binary: %s", out);
    CHECK(run("%s run --help", abs) == 0 && strstr(out, "default dspark") && strstr(out, "default 7") &&
              strstr(out, "prompts.jsonl") && strstr(out, "default 96"),
          "run --help: %s", out);
    CHECK(run("cd / && %s run -m /nonexistent 2>&1", abs) == 2 && !strstr(out, "issue") && !strstr(out, ".sh"),
          "message: %s", out);
    CHECK(run("cd / && SPECULA_DEFAULT_MODEL=/nonexistent %s run 2>&1", abs) == 2 &&
              strstr(out, "/nonexistent/target") && strstr(out, "SPECULA_DEFAULT_MODEL"),
          "SPECULA_DEFAULT_MODEL: %s", out);
    CHECK(run("d=$PWD; cd / && SPECULA_DEFAULT_MODEL=$d/models/default %s/pfx/bin/specula run -q -n 2 -t 2 --spec none "
              "--prompts %s/one.jsonl 2>&1", root, root) == 0 && strstr(out, "plain decoding"),
          "SPECULA_DEFAULT_MODEL: %s", out);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    snprintf(root, sizeof root, "/tmp/specula_test_cli_gen_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", root);
    if (system(cmd) != 0 || access(cli, X_OK) != 0) {
        printf("skipped: no specula binary at %s\n", cli);
        return harness_done("test_cli_gen");
    }
    RUN(test_version_and_file);
    RUN(test_stop_strings);
    RUN(test_n_and_seed);
    RUN(test_md_and_penalties);
    RUN(test_generation_config);
    RUN(test_prompt_files);
    RUN(test_run_anywhere);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_cli_gen");
}
