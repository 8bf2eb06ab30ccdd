/* test_hub.c — models named by their hub name, through the `specula` binary: a Hugging Face
 * cache tree fabricated here (models--ORG--NAME/refs/main, snapshots/<rev>/ linking to the
 * embedded target) resolves and generates exactly what the path does; refs/main and @REV choose
 * among two snapshots; $HF_HOME/hub is the fallback; a llama.cpp cache file ORG_NAME_FILE.gguf is
 * found by -hf ORG/NAME:TAG; a path on disk wins; a missing name lists every path tried. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char cli[4096], root[256], target[PATH_MAX];
static char out[1 << 16], want[1 << 16];
static const char *GEN = "generate -p 'def add(a, b):' -n 12 -t 1 --temp 0";

#define run(...) harness_runf(out, sizeof out, __VA_ARGS__)

/* the cache tree: org/tiny with snapshot "good" (the embedded target) and "bad" (a broken
 * config.json), refs/main naming `main_rev` */
static void make_tree(const char *hub, const char *main_rev) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "set -e; r=%s/models--org--tiny; mkdir -p $r/refs $r/snapshots/bad; "
             "ln -sfn %s $r/snapshots/good; echo '{not json' > $r/snapshots/bad/config.json; "
             "printf '%%s' %s > $r/refs/main",
             hub, target, main_rev);
    CHECK(system(cmd) == 0, "%s", cmd);
}

static void test_resolve(void) {
    CHECK(run("%s %s -m %s 2>/dev/null", cli, GEN, target) == 0 && out[0], "by path: %s", out);
    snprintf(want, sizeof want, "%s", out);
    make_tree(root, "good");
    int rc = run("HF_HUB_CACHE=%s %s %s -m org/tiny 2>&1", root, cli, GEN);
    CHECK(rc == 0 && strstr(out, want), "by name: rc %d: %s", rc, out);
    rc = run("HF_HUB_CACHE=%s %s %s -hf org/tiny 2>/dev/null", root, cli, GEN);
    CHECK(rc == 0 && !strcmp(out, want), "-hf: rc %d: %s", rc, out);
    /* refs/main now names the broken snapshot; @good still reaches the good one */
    make_tree(root, "bad");
    rc = run("HF_HUB_CACHE=%s %s %s -m org/tiny 2>&1", root, cli, GEN);
    CHECK(rc != 0 && strstr(out, "snapshots/bad"), "refs/main -> bad: rc %d: %s", rc, out);
    rc = run("HF_HUB_CACHE=%s %s %s -m org/tiny@good 2>/dev/null", root, cli, GEN);
    CHECK(rc == 0 && !strcmp(out, want), "@good: rc %d: %s", rc, out);
}

static void test_hf_home(void) {
    char hub[512];
    snprintf(hub, sizeof hub, "%s/home/hub", root);
    make_tree(hub, "good");
    int rc = run("env -u HF_HUB_CACHE HF_HOME=%s/home %s %s -m org/tiny 2>/dev/null", root, cli, GEN);
    CHECK(rc == 0 && !strcmp(out, want), "$HF_HOME/hub: rc %d: %s", rc, out);
}

/* a directory org/tiny on disk is a path and wins over the cache */
static void test_path_wins(void) {
    make_tree(root, "bad");
    int rc = run("cd %s && mkdir -p org && ln -sfn %s org/tiny && HF_HUB_CACHE=%s %s %s -m org/tiny 2>/dev/null", root,
                 target, root, cli, GEN);
    CHECK(rc == 0 && !strcmp(out, want), "path wins: rc %d: %s", rc, out);
}

static void test_llama_cache(void) {
    int rc = run("mkdir -p %s/ll && %s export-gguf -m %s -o %s/ll/org_g_tiny-Q8_0.gguf 2>&1 && "
                 "echo junk > %s/ll/org_g_tiny-F16.gguf",
                 root, cli, target, root, root);
    CHECK(rc == 0, "export-gguf: %s", out);
    rc = run("HF_HUB_CACHE=%s LLAMA_CACHE=%s/ll %s %s -hf org/g:q8_0 2>&1", root, root, cli, GEN);
    CHECK(rc == 0 && strstr(out, want), "-hf org/g:q8_0: rc %d: %s", rc, out);
    rc = run("HF_HUB_CACHE=%s LLAMA_CACHE=%s/ll %s %s -hf org/g:F16 2>&1", root, root, cli, GEN);
    CHECK(rc != 0 && strstr(out, "org_g_tiny-F16.gguf"), "-hf org/g:F16 (junk): rc %d: %s", rc, out);
}

static void test_missing(void) {
    int rc = run("HF_HUB_CACHE=%s/hc LLAMA_CACHE=%s/lc %s %s -m org/none 2>&1", root, root, cli, GEN);
    char hf[512], ll[512];
    snprintf(hf, sizeof hf, "%s/hc/models--org--none/refs/main", root);
    snprintf(ll, sizeof ll, "%s/lc/org_none_", root);
    CHECK(rc != 0 && strstr(out, "org/none") && strstr(out, hf) && strstr(out, ll), "missing: rc %d: %s", rc, out);
    make_tree(root, "good");
    rc = run("HF_HUB_CACHE=%s %s %s -m org/tiny@nosuch 2>&1", root, cli, GEN);
    CHECK(rc != 0 && strstr(out, "snapshots/nosuch"), "missing rev: rc %d: %s", rc, out);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    snprintf(root, sizeof root, "/tmp/specula_test_hub_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", root);
    char abs[PATH_MAX];
    if (system(cmd) != 0 || !realpath(cli, abs) || access(abs, X_OK) != 0 || !realpath("models/default/target", target)) {
        printf("skipped: no specula binary at %s or no models/default/target\n", cli);
        return harness_done("test_hub");
    }
    snprintf(cli, sizeof cli, "%s", abs); /* test_path_wins runs it from another directory */
    RUN(test_resolve);
    RUN(test_hf_home);
    RUN(test_path_wins);
    RUN(test_llama_cache);
    RUN(test_missing);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_hub");
}
