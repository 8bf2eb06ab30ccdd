/* test_llama_flags.c — llama.cpp's flags as copied from real llama-cli / llama-server command
 * lines, through the `specula` binary (src/cli/llama_flags.c):
 * - a table of generate command lines: each is accepted (exit 0) and prints exactly the warning
 *   lines its no-op flags call for, naming the flag and its value;
 * - the flags with an equivalent work under llama.cpp's name: --predict N (= -n), -e (escapes in
 *   -p), --chat-template-file (= --chat-template), -l / --logit-bias;
 * - run accepts them too; an unknown flag is still refused, a no-op flag without its value too;
 * - serve from a copied llama-server line (-a, -to, --metrics, -ngl, -fa on, --jinja, -cb,
 *   --spec-type draft-dspark, --chat-template-kwargs): it starts, warns once per no-op flag,
 *   speculates with DSpark and answers under the -a alias; --spec-type ngram-simple gives the
 *   n-gram drafter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_harness.h"

static char cli[4096], errf[128];
static const char *DEF = "models/default/target", *DRAFTER = "models/default/drafter";
static char out[1 << 16], err[1 << 16];

/* run the command with its stderr into err[]; the exit status */
static int run2(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run2(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>%s", errf);
    int rc = harness_run(cmd, out, sizeof out);
    FILE *f = fopen(errf, "r");
    size_t k = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[k] = 0;
    if (f) fclose(f);
    return rc;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

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

/* copied generate command lines: the flags, the warning lines expected, a text each must hold */
static const struct {
    const char *flags;
    int warnings;
    const char *warn1, *warn2;
} GEN[] = {
    {"-ngl 99", 1, "-ngl 99 ignored", "GPU"},
    {"--n-gpu-layers 999", 1, "--n-gpu-layers 999 ignored", NULL},
    {"--gpu-layers 99", 1, "--gpu-layers 99 ignored", NULL},
    {"--jinja", 1, "--jinja ignored", "Jinja"},
    {"-fa on", 1, "-fa on ignored", NULL},
    {"-fa", 1, "-fa ignored", NULL},
    {"--flash-attn auto", 1, "--flash-attn auto ignored", NULL},
    {"--no-mmap", 1, "--no-mmap ignored", NULL},
    {"--mlock", 1, "--mlock ignored", NULL},
    {"-no-cnv", 1, "-no-cnv ignored", NULL},
    {"--no-conversation", 1, "--no-conversation ignored", NULL},
    {"-b 2048", 1, "-b 2048 ignored", NULL},
    {"--batch-size=512", 1, "--batch-size 512 ignored", NULL},
    {"-ub 512", 1, "-ub 512 ignored", NULL},
    {"--no-display-prompt", 1, "--no-display-prompt ignored", NULL},
    {"-tb 2", 1, "-tb 2 ignored", NULL},
    {"--no-warmup", 1, "--no-warmup ignored", NULL},
    {"--predict 3", 0, NULL, NULL},
    {"-e", 0, NULL, NULL},
    {"--chat-template-file models/default/target/chat_template.jinja", 0, NULL, NULL},
    /* a whole llama-cli line */
    {"-ngl 99 -fa on --jinja --no-mmap -no-cnv -b 512 --no-display-prompt -e --predict 3", 7, "-b 512 ignored",
     "-fa on ignored"},
};

static void test_generate_table(void) {
    for (size_t i = 0; i < sizeof GEN / sizeof GEN[0]; i++) {
        int rc = run2("%s generate -m %s -p 'def fib(n):' -n 3 -t 2 --temp 0 --json %s", cli, DEF, GEN[i].flags);
        CHECK(rc == 0, "generate %s: exit %d: %s", GEN[i].flags, rc, err);
        int w = count(err, "specula: warning: generate: ");
        CHECK(w == GEN[i].warnings, "generate %s: %d warning lines, expected %d: %s", GEN[i].flags, w, GEN[i].warnings, err);
        CHECK(!GEN[i].warn1 || strstr(err, GEN[i].warn1), "generate %s: no '%s' in: %s", GEN[i].flags, GEN[i].warn1, err);
        CHECK(!GEN[i].warn2 || strstr(err, GEN[i].warn2), "generate %s: no '%s' in: %s", GEN[i].flags, GEN[i].warn2, err);
        CHECK(strstr(out, "\"emitted\":3"), "generate %s: not 3 tokens: %s", GEN[i].flags, out);
    }
}

static void test_equivalents(void) {
    char a[4096], b[4096];
    /* --predict N is -n N */
    CHECK(run2("%s generate -m %s -p 'def fib(n):' -t 2 --temp 0 --json --predict 5", cli, DEF) == 0 &&
              strstr(out, "\"emitted\":5"), "--predict 5: %s %s", out, err);
    /* -e: "\n" in -p is a newline: the same prompt and output as the prompt written with real
     * newlines, and another output than the prompt with the backslashes kept */
    const char *esc = "def f(x):\\n    return x\\n\\ndef g(y):";
    CHECK(run2("%s generate -m %s -p '%s' -e -n 10 -t 2 --temp 0 --json", cli, DEF, esc) == 0, "-e: %s", err);
    json_tokens(out, a, sizeof a);
    long pe = json_int(out, "prompt_tokens");
    CHECK(run2("%s generate -m %s -p \"$(printf '%s')\" -n 10 -t 2 --temp 0 --json", cli, DEF, esc) == 0, "newlines: %s",
          err);
    json_tokens(out, b, sizeof b);
    CHECK(pe > 0 && pe == json_int(out, "prompt_tokens") && !strcmp(a, b), "-e: %s, real newlines: %s", a, b);
    CHECK(run2("%s generate -m %s -p '%s' -n 10 -t 2 --temp 0 --json", cli, DEF, esc) == 0, "no -e: %s", err);
    json_tokens(out, b, sizeof b);
    CHECK(strcmp(a, b), "-e and no -e give the same output: %s", a);
    /* --chat-template-file FILE renders as --chat-template FILE */
    const char *tf = "models/default/target/chat_template.jinja";
    CHECK(run2("%s generate -m %s -p 'hi' -sys 'You write Python.' --chat-template-file %s -n 4 -t 2 --temp 0 --json", cli,
               DEF, tf) == 0, "--chat-template-file: %s", err);
    json_tokens(out, a, sizeof a);
    CHECK(run2("%s generate -m %s -p 'hi' -sys 'You write Python.' --chat-template %s -n 4 -t 2 --temp 0 --json", cli, DEF,
               tf) == 0, "--chat-template: %s", err);
    json_tokens(out, b, sizeof b);
    CHECK(a[0] && !strcmp(a, b), "--chat-template-file != --chat-template:\n%s\n%s", a, b);
    /* -l / --logit-bias: +100 makes the token the greedy choice; -inf bans it */
    CHECK(run2("%s generate -m %s -p 'def fib(n):' -n 4 -t 2 --temp 0 --json -l 300+100", cli, DEF) == 0 &&
              strstr(out, "\"tokens\":[300,300,300,300]"), "-l 300+100: %s %s", out, err);
    CHECK(run2("%s generate -m %s -p 'def fib(n):' -n 1 -t 2 --temp 0 --json", cli, DEF) == 0, "plain: %s", err);
    json_tokens(out, a, sizeof a);
    int first = atoi(a + strlen("\"tokens\":["));
    CHECK(run2("%s generate -m %s -p 'def fib(n):' -n 1 -t 2 --temp 0 --json --logit-bias %d-inf", cli, DEF, first) == 0,
          "-l ban: %s", err);
    json_tokens(out, b, sizeof b);
    CHECK(atoi(b + strlen("\"tokens\":[")) != first, "-l %d-inf: still %s", first, b);
    CHECK(run2("%s generate -m %s -p x -l 12x", cli, DEF) == 2 && strstr(err, "--logit-bias expects"), "-l 12x: %s", err);
}

static void test_refusals_and_run(void) {
    CHECK(run2("%s generate -m %s -p x --no-such-flag", cli, DEF) == 2 && strstr(err, "unknown option '--no-such-flag'"),
          "unknown flag: %s", err);
    CHECK(run2("%s generate -m %s -p x -ngl", cli, DEF) == 2 && strstr(err, "'-ngl' needs a value"), "-ngl alone: %s", err);
    /* a command that loads no model does not take them */
    CHECK(run2("%s plot -ngl 99 --help", cli) == 2 && strstr(err, "unknown option '-ngl'"), "plot -ngl: %s", err);
    /* run: accepted with the warning (--help after them: parsed, nothing loaded) */
    CHECK(run2("%s run -ngl 99 -fa on --predict 4 --help", cli) == 0 && count(err, "specula: warning: run: ") == 2,
          "run: %s", err);
    CHECK(run2("%s generate --help", cli) == 0 && strstr(out, "llama.cpp flags also accepted") && strstr(out, "-ngl"),
          "--help: %s", out);
}

/* GET path on the server: the body into out; the HTTP status */
static int get(int port, const char *path) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -s -w '\\n%%{http_code}' http://127.0.0.1:%d%s", port, path);
    harness_run(cmd, out, sizeof out);
    char *nl = strrchr(out, '\n');
    return nl ? atoi(nl + 1) : 0;
}

static void test_serve_line(void) {
    test_server s;
    char args[1024];
    snprintf(args, sizeof args,
             "-m %s -a myalias -to 30 --metrics -ngl 99 -fa on --jinja -cb -c 2048 -np 2 -t 2 "
             "--chat-template-kwargs '{\"enable_thinking\": false}' --spec-type draft-dspark -md %s",
             DEF, DRAFTER);
    int up = server_start(&s, cli, args) == 0;
    CHECK(up, "serve did not start (log %s)", s.log);
    if (!up) return;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "grep -c 'specula: warning: serve: ' %s", s.log);
    harness_run(cmd, out, sizeof out);
    CHECK(atoi(out) == 5, "serve: %d warning lines, expected 5 (--metrics -ngl -fa --jinja -cb)", atoi(out));
    CHECK(server_log_has(&s, "fa on ignored") && server_log_has(&s, "metrics ignored"), "serve warnings (log %s)", s.log);
    CHECK(server_log_has(&s, "speculating with dspark"), "--spec-type draft-dspark (log %s)", s.log);
    CHECK(server_log_has(&s, "2 slots of 1024 positions"), "-c 2048 -np 2 (log %s)", s.log);
    CHECK(get(s.port, "/v1/models") == 200 && strstr(out, "\"myalias\""), "-a: %s", out);
    CHECK(get(s.port, "/metrics") == 200, "/metrics");
    CHECK(server_stop(&s) == 0, "serve exit status");
    snprintf(args, sizeof args, "-m %s -np 1 -t 2 --spec-type ngram-simple", DEF);
    up = server_start(&s, cli, args) == 0;
    CHECK(up && server_log_has(&s, "speculating with ngram"), "--spec-type ngram-simple (log %s)", s.log);
    if (up) server_stop(&s);
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(cli, sizeof cli, argv[0]);
    snprintf(errf, sizeof errf, "/tmp/specula-llama-flags-%d.err", (int)getpid());
    if (access(cli, X_OK) != 0) {
        printf("skipped: no specula binary at %s\n", cli);
        return harness_done("test_llama_flags");
    }
    RUN(test_generate_table);
    RUN(test_equivalents);
    RUN(test_refusals_and_run);
    RUN(test_serve_line);
    unlink(errf);
    return harness_done("test_llama_flags");
}
