/* test_train_cli.c — the `specula regen / train / plot` commands end to end through the binary
 * of this build (next to tests/): exit codes, the one-line errors (malformed JSONL names
 * FILE:LINE, bad --arch, missing shards), a small run, and the gnuplot SVGs of its log. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/newmodel.h"
#include "harness.h"

static char root[256], bin[512];

/* run cmd with stderr captured into root/err.txt; returns the exit status */
static int run(const char *cmd) {
    char full[4096];
    snprintf(full, sizeof full, "%s 2>%s/err.txt >/dev/null", cmd, root);
    int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static int err_has(const char *what) {
    char p[400], *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/err.txt", root);
    if (sp_read_file(p, &text, &n, NULL)) return 0;
    int ok = strstr(text, what) != NULL;
    if (!ok) fprintf(stderr, "  stderr was: %s\n", text);
    free(text);
    return ok;
}

static void test_commands(void) {
    char target[400], cmd[4096], p[512];
    snprintf(target, sizeof target, "%s/target", root);
    sp_err err;
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 2, .n_threads = 2};
    CHECK(newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s/bad.jsonl", root);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"ids\": [1, 2, 3], \"resp_start\": 1}\n{\"ids\": [1, 2,\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s regen -m %s --data %s -o %s/bad -q", bin, target, p, root);
    CHECK(run(cmd) == 2 && err_has("specula: error: regen: ") && err_has("bad.jsonl:2: invalid JSON"), "malformed jsonl");
    snprintf(p, sizeof p, "%s/ok.jsonl", root);
    f = fopen(p, "w");
    for (int i = 0; i < 6; i++) fprintf(f, "{\"ids\": [1, %d, %d, %d], \"resp_start\": 4}\n", 50 + i, 60 + i, 50 + i);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s regen -m %s --data %s -o %s/sh --generate 20 --taps 0 -q", bin, target, p, root);
    CHECK(run(cmd) == 0 && err_has("1 shard(s) written"), "regen");
    CHECK(run(cmd) == 0 && err_has("0 shard(s) written, 1 already complete"), "regen rerun");
    snprintf(cmd, sizeof cmd, "%s train --arch eagle -m %s --data %s/sh -o %s/d", bin, target, root, root);
    CHECK(run(cmd) == 2 && err_has("--arch must be dspark, dflash, dflash-zlab or eagle3"), "bad arch");
    snprintf(cmd, sizeof cmd, "%s train -m %s --data %s/nothing -o %s/d -q", bin, target, root, root);
    CHECK(run(cmd) == 2 && err_has("nothing: cannot open the shard directory"), "missing shards");
    snprintf(cmd, sizeof cmd, "%s train -m %s --data %s/sh -o %s/d --markov-head lstm", bin, target, root, root);
    CHECK(run(cmd) == 2 && err_has("--markov-head must be vanilla, gated or rnn"), "bad --markov-head");
    snprintf(cmd, sizeof cmd,
             "%s train -m %s --data %s/sh -o %s/dg --steps 2 --batch 4 --block-size 3 --layers 1 --markov-rank 8 "
             "--markov-head gated --ctx 8 -q -t 1",
             bin, target, root, root);
    CHECK(run(cmd) == 0 && err_has("train: step 2"), "train --markov-head gated");
    {
        char *text = NULL;
        size_t n;
        snprintf(p, sizeof p, "%s/dg/config.json", root);
        CHECK(sp_read_file(p, &text, &n, NULL) == 0 && strstr(text, "\"markov_head_type\": \"gated\""),
              "--markov-head gated: config.json without markov_head_type gated");
        free(text);
    }
    snprintf(cmd, sizeof cmd,
             "%s train --arch dspark -m %s --data %s/sh -o %s/d --steps 6 --batch 4 --block-size 3 --layers 1 "
             "--markov-rank 8 --ctx 8 --eval-every 2 -q -t 1",
             bin, target, root, root);
    CHECK(run(cmd) == 0 && err_has("train: step 6") && err_has("train-set tau"), "train");
    /* the folder now holds a checkpoint: a rerun is refused without --resume or --force */
    CHECK(run(cmd) == 2 && err_has("already holds files") && err_has("--resume") && err_has("--force"),
          "rerun into an existing folder");
    char cmd2[4200];
    snprintf(cmd2, sizeof cmd2, "%s --resume", cmd);
    CHECK(run(cmd2) == 0 && err_has("train: step 6"), "--resume of a finished run");
    const char *files[] = {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json",
                           "train_log.csv"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/d/%s", root, files[i]);
        CHECK(sp_file_exists(p), "missing %s", files[i]);
    }
    char *state = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/d/trainer_state.json", root);
    CHECK(!sp_read_file(p, &state, &n, NULL) && strstr(state, "\"step\": 6"), "trainer_state: %s", state ? state : "");
    free(state);
    snprintf(cmd2, sizeof cmd2, "%s --force --steps 2", cmd);
    CHECK(run(cmd2) == 0 && err_has("train: step 2"), "--force starts over");
    if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd, "%s plot %s/d/train_log.csv -o %s/plots", bin, root, root);
        CHECK(run(cmd) == 0, "plot");
        const char *svg[] = {"loss.svg", "tau.svg", "acceptance.svg"};
        for (int i = 0; i < 3; i++) {
            char *t = NULL;
            snprintf(p, sizeof p, "%s/plots/%s", root, svg[i]);
            CHECK(!sp_read_file(p, &t, &n, NULL) && strstr(t, "<svg"), "%s is not an SVG", svg[i]);
            free(t);
        }
    }
    /* -t means threads in every command, train-lm included (its tokenizer is --tokenizer) */
    snprintf(cmd, sizeof cmd, "%s train-lm --help > %s/err.txt 2>&1", bin, root);
    {
        char *help = NULL;
        snprintf(p, sizeof p, "%s/err.txt", root);
        CHECK(system(cmd) == 0 && !sp_read_file(p, &help, &n, NULL) && strstr(help, "-t, --threads") &&
                  !strstr(help, "-t, --tokenizer") && strstr(help, "--tokenizer"),
              "train-lm -t: %s", help ? help : "");
        free(help);
    }
    snprintf(cmd, sizeof cmd, "%s plot %s/ok.jsonl -o %s/plots2", bin, root, root);
    CHECK(run(cmd) == 2 && err_has("not a `specula train` log"), "plot of a non-log");
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(root, sizeof root, "/tmp/specula_test_train_cli_%d", (int)getpid());
    snprintf(bin, sizeof bin, "%s", argv[0]);
    char *slash = strrchr(bin, '/');
    if (slash) *slash = 0;
    slash = strrchr(bin, '/');
    if (slash) strcpy(slash + 1, "specula");
    sp_err err;
    if (access(bin, X_OK) != 0 || sp_mkdir_p(root, &err)) {
        printf("skipped: no specula binary at %s\n", bin);
        return harness_done("test_train_cli");
    }
    RUN(test_commands);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_cli");
}
