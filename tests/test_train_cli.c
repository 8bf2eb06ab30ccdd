/* test_train_cli.c — the `specula regen / train / plot / train-lm` commands end to end through
 * the binary of this build (next to tests/): exit codes, the one-line errors (malformed JSONL
 * names FILE:LINE, bad --arch, missing shards), a small run, the gnuplot SVGs of its log, and a
 * train-lm run killed with SIGKILL mid-run and resumed, which ends bit-identical to an
 * uninterrupted one. */
#include <math.h>
#include <signal.h>
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
    char full[8192];
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
    CHECK(sp_newmodel_write(target, &o, &err) == 0, "%s", err.msg);
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

/* the lines of a CSV log, each cut to its first two fields (step, loss); *rows the line count */
static char *log_steps_losses(const char *path, int *rows) {
    char *text = NULL, *out = NULL;
    size_t n = 0, k = 0;
    *rows = 0;
    if (sp_read_file(path, &text, &n, NULL) || !(out = malloc(n + 1))) {
        free(text);
        return NULL;
    }
    for (char *line = text; line < text + n && *line;) {
        size_t len = strcspn(line, "\n"), f1 = strcspn(line, ",\n");
        size_t f2 = f1 < len ? f1 + 1 + strcspn(line + f1 + 1, ",\n") : f1;
        memcpy(out + k, line, f2);
        k += f2;
        out[k++] = '\n';
        ++*rows;
        line += len + (line[len] == '\n');
    }
    out[k] = 0;
    free(text);
    return out;
}

/* lines in path (0 when missing) */
static int count_lines(const char *path) {
    char *text = NULL;
    size_t n = 0;
    if (sp_read_file(path, &text, &n, NULL)) return 0;
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    free(text);
    return lines;
}

/* train-lm on a tiny Gemma-4 config: uninterrupted, then killed (SIGKILL) once its log shows
 * step 7 and resumed; the model, optimizer state and the logged losses are the same */
static void test_train_lm_kill_resume(void) {
    char cmd[4096], p[512], text[512], args[2048], a[512], b[512];
    snprintf(text, sizeof text, "%s/lm.txt", root);
    FILE *f = fopen(text, "w");
    CHECK(f != NULL, "%s", text);
    if (!f) return;
    for (int i = 0; i < 300; i++) fprintf(f, "def f%d(x):\n    return x * %d + %d\n\n", i % 13, i % 7, i % 5);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s train-tokenizer -f %s --vocab-size 300 -o %s/lmtok.json", bin, text, root);
    CHECK(run(cmd) == 0, "train-tokenizer");
    snprintf(cmd, sizeof cmd,
             "%s new-model --arch gemma4 --preset tiny --set hidden_size_per_layer_input=0 --set num_kv_shared_layers=0 "
             "--set attention_k_eq_v=false --set use_double_wide_mlp=false --set num_hidden_layers=2 --set hidden_size=32 "
             "--set intermediate_size=48 --set vocab_size=300 --seed 1 --threads 1 -o %s/lmcfg",
             bin, root);
    CHECK(run(cmd) == 0, "new-model");
    snprintf(args, sizeof args,
             "train-lm --config %s/lmcfg/config.json --tokenizer %s/lmtok.json --data %s --steps 40 --batch 2 --seq 16 "
             "--lr 1e-2 --save-every 5 --dtype f32 -q -t 1",
             root, root, text);
    snprintf(cmd, sizeof cmd, "%s %s -o %s/lm_a", bin, args, root);
    CHECK(run(cmd) == 0 && err_has("step 40"), "train-lm");
    snprintf(cmd, sizeof cmd, "%s %s -o %s/lm_b --resume", bin, args, root);
    CHECK(run(cmd) == 1 && err_has("no checkpoint"), "--resume without a checkpoint");
    snprintf(cmd, sizeof cmd, "exec %s %s -o %s/lm_b 2>/dev/null", bin, args, root);
    snprintf(p, sizeof p, "%s/lm_b/train_log.csv", root);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 60000 && count_lines(p) < 8; i++) usleep(500); /* header + 7 steps */
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("  train-lm child %s at %d log lines\n", WIFSIGNALED(status) ? "killed" : "finished", count_lines(p));
    snprintf(cmd, sizeof cmd, "%s %s -o %s/lm_b --resume", bin, args, root);
    CHECK(run(cmd) == 0 && err_has("step 40"), "train-lm --resume after SIGKILL");
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "config.json", "tokenizer.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(a, sizeof a, "%s/lm_a/%s", root, files[i]);
        snprintf(b, sizeof b, "%s/lm_b/%s", root, files[i]);
        CHECK(harness_same_file(a, b), "SIGKILL + resume: %s differs from the uninterrupted run", files[i]);
    }
    int ra = 0, rb = 0;
    snprintf(a, sizeof a, "%s/lm_a/train_log.csv", root);
    char *la = log_steps_losses(a, &ra), *lb = log_steps_losses(p, &rb);
    CHECK(la && lb && ra == 41 && rb == 41 && !strcmp(la, lb), "logs: %d and %d rows (41), step/loss %s", ra, rb,
          la && lb && !strcmp(la, lb) ? "equal" : "differ");
    free(la);
    free(lb);
}

/* the τ of each evaluated step > 0 of a train log into tau[step] (NAN elsewhere); the last step */
static long log_taus(const char *path, double *tau, long cap) {
    char *text = NULL;
    size_t n = 0;
    long last = 0;
    for (long i = 0; i < cap; i++) tau[i] = NAN;
    if (sp_read_file(path, &text, &n, NULL)) return -1;
    for (char *line = strchr(text, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        long step = strtol(line + 1, NULL, 10);
        char *f = line + 1;
        for (int k = 0; k < 9 && f; k++) f = strchr(f + 1, ',');
        if (step > 0 && step < cap && f && f[1] != ',' && f[1] != '\n') tau[step] = strtod(f + 1, NULL);
        if (step > last) last = step;
    }
    free(text);
    return last;
}

/* --patience 1 with an evaluation every step: training stops at the first evaluation that is not
 * better than the best; best/ holds the model of the best step (equal to the checkpoint a run
 * saving every step makes there), and a run killed and resumed keeps the same best and stop */
static void test_best_patience(void) {
    char target[400], cmd[4096], base[2048], p[512], q[512];
    snprintf(target, sizeof target, "%s/bt", root);
    sp_err err;
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 2, .n_threads = 2};
    CHECK(sp_newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s/bt.jsonl", root);
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 6; i++) fprintf(f, "{\"ids\": [1, %d, %d, %d], \"resp_start\": 4}\n", 50 + i, 60 + i, 50 + i);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s regen -m %s --data %s -o %s/bsh --generate 20 --taps 0 -q", bin, target, p, root);
    CHECK(run(cmd) == 0, "regen");
    snprintf(base, sizeof base,
             "%s train -m %s --data %s/bsh --steps 16 --batch 4 --block-size 3 --layers 1 --markov-rank 8 --ctx 8 "
             "--lr 0.05 --eval-every 1 -q -t 1",
             bin, target, root);
    snprintf(cmd, sizeof cmd, "%s -o %s/pa --patience 1", base, root);
    CHECK(run(cmd) == 0, "train --patience 1");
    double tau[32];
    snprintf(p, sizeof p, "%s/pa/train_log.csv", root);
    long last = log_taus(p, tau, 32), best = 0, stop = 16;
    for (long s = 1; s <= 16; s++) {
        if (isnan(tau[s])) break;
        if (best && !(tau[s] > tau[best])) { stop = s; break; }
        best = s;
    }
    CHECK(last == stop && stop < 16, "patience: the log ends at step %ld, expected %ld (of 16)", last, stop);
    char *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/pa/best/best.json", root);
    char want[64];
    snprintf(want, sizeof want, "\"step\": %ld,", best);
    CHECK(!sp_read_file(p, &text, &n, NULL) && strstr(text, want), "best.json %s, want step %ld", text ? text : "", best);
    free(text);
    snprintf(cmd, sizeof cmd, "%s -o %s/pb --save-every 1 --stop-after %ld", base, root, best);
    CHECK(run(cmd) == 0, "the run saved at the best step");
    snprintf(p, sizeof p, "%s/pa/best/model.safetensors", root);
    snprintf(q, sizeof q, "%s/pb/model.safetensors", root);
    CHECK(harness_same_file(p, q), "best/ differs from the checkpoint of step %ld", best);
    /* killed after step `best` (saving every step), resumed: the same stop and best */
    snprintf(cmd, sizeof cmd, "%s -o %s/pc --patience 1 --save-every 1 --stop-after %ld", base, root, best);
    CHECK(run(cmd) == 0, "killed run");
    snprintf(cmd, sizeof cmd, "%s -o %s/pc --patience 1 --save-every 1 --resume", base, root);
    CHECK(run(cmd) == 0, "resumed run");
    snprintf(p, sizeof p, "%s/pc/train_log.csv", root);
    CHECK(log_taus(p, tau, 32) == stop, "resumed: stops at step %ld", stop);
    snprintf(p, sizeof p, "%s/pa/best/best.json", root);
    snprintf(q, sizeof q, "%s/pc/best/best.json", root);
    CHECK(harness_same_file(p, q), "resumed: another best.json");
    /* --val-split: the monitor runs on the carved sequences, reported as held-out */
    snprintf(cmd, sizeof cmd, "%s -o %s/pv --val-split 0.5 --seed 1 --steps 2", base, root);
    CHECK(run(cmd) == 0 && err_has("held-out tau"), "--val-split");
    snprintf(cmd, sizeof cmd, "%s -o %s/pw --val-split 0.5 --held-out %s/bsh", base, root, root);
    CHECK(run(cmd) == 2 && err_has("--held-out or --val-split"), "--val-split with --held-out");
    /* the loss options: bad values named; mlx-bun's recipe runs; a resume with other settings refused */
    const char *bad[][2] = {{"--gamma 0", "--gamma expects"}, {"--gamma blok", "--gamma expects"},
                            {"--loss-weights 1,2", "--loss-weights expects"}, {"--loss-weights 0,0,0", "at least one"},
                            {"--loss-norm mean", "--loss-norm expects"}};
    for (int i = 0; i < 5; i++) {
        snprintf(cmd, sizeof cmd, "%s -o %s/px %s", base, root, bad[i][0]);
        CHECK(run(cmd) == 2 && err_has(bad[i][1]), "%s", bad[i][0]);
    }
    snprintf(cmd, sizeof cmd, "%s -o %s/py --steps 2 --gamma block --loss-norm anchors --loss-weights 0.1,0.9,1", base,
             root);
    CHECK(run(cmd) == 0 && err_has("train: step 2"), "mlx-bun recipe");
    snprintf(p, sizeof p, "%s/py/optimizer.safetensors", root);
    char *st = NULL;
    CHECK(!sp_read_file(p, &st, &n, NULL) && memmem(st, n, "gamma=3 ", 8) && memmem(st, n, "loss_norm=anchors", 17),
          "the run string lacks gamma=3 / loss_norm=anchors");
    free(st);
    snprintf(cmd, sizeof cmd, "%s -o %s/py --steps 2 --resume", base, root);
    CHECK(run(cmd) != 0, "resume with the default loss settings accepted");
    /* --temp: bad values and incompatible options named; a run records T; its resume needs the same T */
    const char *bad_temp[][2] = {{"--temp 0", "--temp expects"}, {"--temp -0.5", "--temp expects"},
                                 {"--temp nan", "--temp expects"}, {"--temp inf", "--temp expects"},
                                 {"--temp 0.8,", "--temp expects"}, {"--temp 0.8x", "--temp expects"},
                                 {"--temp 1,1,1,1,1,1,1,1,1", "at most 8"},
                                 {"--kl-weight 0.5", "--kl-weight needs --temp"},
                                 {"--temp 0.8 --kl-weight -1", "--kl-weight expects"},
                                 {"--temp 0.8 --arch dflash", "--temp trains"},
                                 {"--temp 0.8 --layout mlx-bun", "--temp trains"},
                                 {"--temp 0.8 --loss-weights 1,0,0", "--temp changes nothing"}};
    for (int i = 0; i < (int)(sizeof bad_temp / sizeof *bad_temp); i++) {
        snprintf(cmd, sizeof cmd, "%s -o %s/pt0 %s", base, root, bad_temp[i][0]);
        CHECK(run(cmd) == 2 && err_has(bad_temp[i][1]), "%s", bad_temp[i][0]);
    }
    snprintf(cmd, sizeof cmd, "%s -o %s/pt --steps 2 --temp 0.8", base, root);
    CHECK(run(cmd) == 0 && err_has("train: step 2"), "train --temp 0.8");
    snprintf(p, sizeof p, "%s/pt/config.json", root);
    CHECK(!sp_read_file(p, &st, &n, NULL) && strstr(st, "\"train_temperature\": 0.8,"), "config.json: %s",
          st ? st : "");
    free(st);
    st = NULL;
    snprintf(cmd, sizeof cmd, "%s -o %s/pt --steps 2 --resume", base, root);
    CHECK(run(cmd) != 0 && err_has("temp=0.8"), "resume without --temp accepted");
    snprintf(cmd, sizeof cmd, "%s -o %s/pt --steps 2 --temp 0.8 --resume", base, root);
    CHECK(run(cmd) == 0, "resume with the same --temp");
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
    RUN(test_train_lm_kill_resume);
    RUN(test_best_patience);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_cli");
}
