/* test_harden.c — bad input and failing output through the `specula` binary of this build:
 * directories and FIFOs where files belong, out-of-range flags and config values, write errors
 * on stdout, diverging training, corrupt shard metadata, and the temp files and half-written
 * directories a killed run leaves (removed by the next run; new-model publishes whole or not
 * at all). Each case checks the exit status and the one-line error. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "harness.h"

static char root[256], bin[512], target[400], shards[400];

/* run cmd (a shell line; the binary is %s-substituted by the caller) with stdout to /dev/null
 * unless the command redirects it, stderr captured into root/err.txt; returns the exit status */
static int run(const char *cmd) {
    char full[8192];
    snprintf(full, sizeof full, "( %s ) 2>%s/err.txt", cmd, root);
    int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static int err_has(const char *what) {
    char p[400], *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/err.txt", root);
    if (sp_read_file(p, &text, &n, NULL)) return 0;
    int ok = strstr(text, what) != NULL;
    if (!ok) fprintf(stderr, "  expected \"%s\" in stderr: %s\n", what, text);
    free(text);
    return ok;
}
static int err_lacks(const char *what) {
    char p[400], *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/err.txt", root);
    if (sp_read_file(p, &text, &n, NULL)) return 0;
    int ok = strstr(text, what) == NULL;
    free(text);
    return ok;
}
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}
static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
/* a pid that no process has now: a child that has exited and been reaped */
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

/* a directory, a FIFO or a device where a regular file is expected: an error naming it, no hang
 * (every command runs under `timeout`, which would exit 124) */
static void test_not_regular_files(void) {
    char d[512], cmd[4096];
    snprintf(d, sizeof d, "%s/dirmodel/config.json", root);
    sp_err err;
    CHECK(sp_mkdir_p(d, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "timeout 20 %s generate -m %s/dirmodel --prompt-ids 1,2 -n 2", bin, root);
    CHECK(run(cmd) == 2 && err_has("config.json: not a regular file (a directory)"), "directory as config.json");

    snprintf(d, sizeof d, "%s/fifomodel", root);
    CHECK(sp_mkdir_p(d, &err) == 0, "%s", err.msg);
    snprintf(d, sizeof d, "%s/fifomodel/config.json", root);
    CHECK(mkfifo(d, 0644) == 0, "mkfifo %s", d);
    snprintf(cmd, sizeof cmd, "timeout 20 %s generate -m %s/fifomodel --prompt-ids 1,2 -n 2", bin, root);
    CHECK(run(cmd) == 2 && err_has("config.json: not a regular file (a FIFO)"), "FIFO as config.json");

    /* the target with a directory as tokenizer.json */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/tokdir && cp %s/config.json %s/model.safetensors %s/tokdir/ && "
             "mkdir %s/tokdir/tokenizer.json", root, target, target, root, root);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "timeout 20 %s generate -m %s/tokdir -p hello -n 2", bin, root);
    CHECK(run(cmd) == 2 && err_has("tokenizer.json: not a regular file (a directory)"), "directory as tokenizer.json");
    snprintf(cmd, sizeof cmd, "timeout 20 %s tokenize -m models/default/target -f %s >/dev/null", bin, root);
    CHECK(run(cmd) != 0 && err_has("not a regular file (a directory)"), "tokenize -f DIR");
    snprintf(cmd, sizeof cmd, "timeout 20 %s tokenize -m models/default/target -f %s/fifomodel/config.json", bin, root);
    CHECK(run(cmd) != 0 && err_has("not a regular file (a FIFO)"), "tokenize -f FIFO");
    snprintf(cmd, sizeof cmd, "timeout 20 %s regen -m %s --data %s -o %s/x -q", bin, target, root, root);
    CHECK(run(cmd) == 2 && err_has("not a regular file (a directory)"), "regen --data DIR");
    snprintf(cmd, sizeof cmd, "timeout 20 %s new-model --arch qwen3 --preset tiny --seed 1 --tokenizer "
             "%s/fifomodel/config.json -o %s/nmf", bin, root, root);
    CHECK(run(cmd) != 0 && err_has("not a regular file (a FIFO)"), "new-model --tokenizer FIFO");
    snprintf(cmd, sizeof cmd, "timeout 20 %s regen -m %s --data /dev/zero -o %s/x -q", bin, target, root);
    CHECK(run(cmd) == 2 && err_has("/dev/zero: not a regular file (a device)"), "regen --data /dev/zero");
}

/* output that cannot be written is a failure, stdout included */
static void test_stdout_errors(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 -n 3 --json >/dev/full", bin, target);
    CHECK(run(cmd) == 2 && err_has("writing standard output: No space left on device"), "generate --json > /dev/full");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 -n 3 >/dev/full", bin, target);
    CHECK(run(cmd) == 2 && err_has("writing standard output"), "generate (streaming) > /dev/full");
    snprintf(cmd, sizeof cmd, "%s tokenize -m models/default/target -p 'hello world' >/dev/full", bin);
    CHECK(run(cmd) == 2 && err_has("writing standard output"), "tokenize > /dev/full");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 -n 3 --json >/dev/null", bin, target);
    CHECK(run(cmd) == 0, "generate --json > /dev/null must succeed");
}

/* flags and config values that overflowed int arithmetic or asked for absurd resources */
static void test_ranges(void) {
    char cmd[4096], p[512];
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 -n 2 -t 100000", bin, target);
    CHECK(run(cmd) == 2 && err_has("threads: 100000 asked, at most"), "-t 100000");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 -n 2147483647", bin, target);
    CHECK(run(cmd) == 2 && err_has("-n must be in [1, 16777216], or -1 (until EOS or the context is full), got 2147483647"), "-n 2147483647");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 -n 2 -c -1", bin, target);
    CHECK(run(cmd) == 2 && err_has("-c must be in"), "-c -1");

    /* a config whose heads x head_dim overflowed a signed int into negative shapes */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/big && cp %s/model.safetensors %s/big/", root, target, root);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(p, sizeof p, "%s/big/config.json", root);
    write_text(p, "{\"model_type\": \"qwen3\", \"vocab_size\": 8192, \"hidden_size\": 64, \"intermediate_size\": 192,"
                  " \"num_hidden_layers\": 2, \"num_attention_heads\": 65536, \"num_key_value_heads\": 65536,"
                  " \"head_dim\": 65536}");
    snprintf(cmd, sizeof cmd, "%s generate -m %s/big --prompt-ids 1,2 -n 2", bin, root);
    CHECK(run(cmd) == 2 && err_has("\"num_attention_heads x head_dim\" = 4294967296 exceeds the supported 1048576"),
          "65536 heads of 65536");
    write_text(p, "{\"model_type\": \"qwen3\", \"vocab_size\": 8192, \"hidden_size\": 64, \"intermediate_size\": 192,"
                  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                  " \"head_dim\": 16, \"eos_token_id\": 99999999999}");
    CHECK(run(cmd) == 2 && err_has("\"eos_token_id\" 99999999999 is not a token id"), "eos id beyond int32");

    /* regen flags */
    const char *bad[] = {"--shard-records 2147483647", "--generate 2147483647", "--generate -5", "--max-len -1",
                         "--shard-records -3"};
    snprintf(p, sizeof p, "%s/one.jsonl", root);
    write_text(p, "{\"ids\": [1, 2, 3], \"resp_start\": 1}\n");
    for (int i = 0; i < 5; i++) {
        snprintf(cmd, sizeof cmd, "%s regen -m %s --data %s -o %s/r -q %s", bin, target, p, root, bad[i]);
        CHECK(run(cmd) == 2 && err_has("a value is out of range"), "regen %s", bad[i]);
    }
    snprintf(cmd, sizeof cmd, "%s regen -m %s --data %s -o %s/r -q --shard-records 1048576", bin, target, p, root);
    CHECK(run(cmd) == 0 && err_has("1 shard(s) written"), "regen --shard-records 1048576 writes its shard");
}

/* shard metadata the trainer must refuse, and a diverging run that must fail without saving */
static void test_training(void) {
    char cmd[4096], p[512], *orig = NULL;
    size_t n = 0;
    const char *T = "--steps 3 --batch 4 --block-size 3 --layers 1 --markov-rank 8 --ctx 8 -q -t 1";
    snprintf(cmd, sizeof cmd, "%s train -m %s --data %s -o %s/d %s", bin, target, shards, root, T);
    CHECK(run(cmd) == 0, "a good run");
    char model[512], *before = NULL, *after = NULL;
    size_t nb = 0, na = 0;
    snprintf(model, sizeof model, "%s/d/model.safetensors", root);
    CHECK(sp_read_file(model, &before, &nb, NULL) == 0, "no checkpoint");
    snprintf(cmd, sizeof cmd, "%s train -m %s --data %s -o %s/d %s --lr 1e30 --force", bin, target, shards, root, T);
    CHECK(run(cmd) == 2 && err_has("training diverged"), "--lr 1e30 must fail");
    CHECK(sp_read_file(model, &after, &na, NULL) == 0 && na == nb && before && !memcmp(before, after, nb),
          "--lr 1e30 changed the last good checkpoint");
    free(before);
    free(after);

    snprintf(p, sizeof p, "%s/shard_00000/shard.json", shards);
    CHECK(sp_read_file(p, &orig, &n, NULL) == 0, "no shard.json");
    if (!orig) return;
    char *at = strstr(orig, "\"tapLayers\": [0]");
    CHECK(at != NULL, "shard.json without tapLayers [0]: %s", orig);
    if (!at) return;
    /* tiny target: 2 layers, so layer 1 is the final one (never tapped) */
    const char *taps[] = {"999", "-1", "1", "\"x\"", "0, 0"};
    const char *msg[] = {"is not a layer index", "is not a layer index", "is not one of the target's layers 0..0",
                         "is not a layer index", "is not a layer index"};
    for (int i = 0; i < 5; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%.*s\"tapLayers\": [%s]%s", (int)(at - orig), orig, taps[i],
                 at + strlen("\"tapLayers\": [0]"));
        if (i == 4) { /* two taps: m must agree */
            char *m = strstr(text, "\"m\": 1");
            if (m) m[5] = '2';
        }
        write_text(p, text);
        snprintf(cmd, sizeof cmd, "%s train -m %s --data %s -o %s/t%d %s", bin, target, shards, root, i, T);
        CHECK(run(cmd) == 2 && err_has(msg[i]), "tapLayers [%s]", taps[i]);
    }
    write_text(p, "{\"nSeq\": 6, \"nTo");
    snprintf(cmd, sizeof cmd, "%s train -m %s --data %s -o %s/tc %s", bin, target, shards, root, T);
    CHECK(run(cmd) == 2 && err_has("shard_00000/shard.json: ") && err_lacks("no shard.json"), "corrupt shard.json");
    write_text(p, orig);
    free(orig);
}

/* temp files of dead writers go away on the next run; new-model output is whole or absent */
static void test_leftovers(void) {
    char cmd[4096], p[1024], live[1024], out[400];
    /* export-gguf: a dead process's OUT.tmp.PID is removed, a live one's is kept */
    snprintf(out, sizeof out, "%s/m.gguf", root);
    snprintf(p, sizeof p, "%s.tmp.%ld", out, dead_pid());
    snprintf(live, sizeof live, "%s.tmp.%ld", out, (long)getpid());
    write_text(p, "partial");
    write_text(live, "in progress");
    snprintf(cmd, sizeof cmd, "%s export-gguf -m %s -o %s --no-tokenizer", bin, target, out);
    CHECK(run(cmd) == 0, "export-gguf");
    CHECK(!sp_file_exists(p) && err_has("left by process"), "stale %s not removed", p);
    CHECK(sp_file_exists(live), "a live process's %s was removed", live);
    unlink(live);

    /* new-model killed mid-write: no DIR, only DIR.tmp.PID, removed by the next new-model */
    snprintf(out, sizeof out, "%s/nm", root);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        execl(bin, bin, "new-model", "--arch", "qwen3", "--preset", "tiny", "--seed", "1", "--set",
              "vocab_size=400000", "-o", out, "--threads", "1", (char *)NULL);
        _exit(127);
    }
    snprintf(p, sizeof p, "%s.tmp.%ld/config.json", out, (long)pid);
    for (int i = 0; i < 2000 && !sp_file_exists(p); i++) usleep(1000); /* it has started writing */
    kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    int killed = WIFSIGNALED(st);
    snprintf(p, sizeof p, "%s.tmp.%ld", out, (long)pid);
    if (killed) {
        CHECK(!sp_file_exists(out), "a killed new-model left %s", out);
        CHECK(is_dir(p), "a killed new-model left no %s", p);
    } else {
        printf("  new-model finished before the kill; checking it published whole\n");
    }
    snprintf(cmd, sizeof cmd, "%s new-model --arch qwen3 --preset tiny --seed 1 -o %s", bin, out);
    CHECK(run(cmd) == 0, "new-model");
    CHECK(!sp_file_exists(p), "the next new-model left the stale %s", p);
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(is_dir(out) && sp_file_exists(p), "new-model: %s incomplete", out);

    /* new-drafter publishes the same way: whole on success, nothing on failure */
    snprintf(out, sizeof out, "%s/dr", root);
    snprintf(cmd, sizeof cmd, "%s new-drafter --arch dspark -m %s --seed 1 -o %s", bin, target, out);
    CHECK(run(cmd) == 0, "new-drafter");
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(sp_file_exists(p), "new-drafter: no %s", p);
    snprintf(cmd, sizeof cmd, "ls -d %s.tmp.* 2>/dev/null", out);
    char left[512];
    CHECK(harness_run(cmd, left, sizeof left) != 0 && left[0] == 0, "new-drafter left %s", left);
    snprintf(cmd, sizeof cmd, "%s new-drafter --arch dspark -m %s/nothing --seed 1 -o %s/dr_bad; ls -d %s/dr_bad* "
             "2>/dev/null", bin, root, root, root);
    CHECK(harness_run(cmd, left, sizeof left) != 0 && left[0] == 0, "failed new-drafter left: %s", left);

    /* a failing new-model (an unknown preset) leaves nothing behind */
    snprintf(out, sizeof out, "%s/nm_bad", root);
    snprintf(cmd, sizeof cmd, "%s new-model --arch qwen3 --preset nosuch --seed 1 -o %s; ls -d %s* 2>/dev/null",
             bin, out, out);
    char listing[512];
    CHECK(harness_run(cmd, listing, sizeof listing) != 0 && listing[0] == 0, "failed new-model left: %s", listing);
}

/* the library's file helpers: regular-file checks, stale temp removal, directory publishing */
static void test_core_files(void) {
    sp_err err;
    off_t size = -1;
    CHECK(sp_open_regular("/dev/null", &size, &err) < 0 && strstr(err.msg, "a device"), "/dev/null: %s", err.msg);
    CHECK(sp_open_regular(root, &size, &err) < 0 && strstr(err.msg, "a directory"), "dir: %s", err.msg);
    char p[600], q[600], t[900], dead[700], live[700];
    snprintf(p, sizeof p, "%s/f.txt", root);
    write_text(p, "12345");
    int fd = sp_open_regular(p, &size, &err);
    CHECK(fd >= 0 && size == 5, "regular file: fd %d size %lld", fd, (long long)size);
    if (fd >= 0) close(fd);
    char *text = NULL;
    size_t n = 0;
    CHECK(sp_read_file(p, &text, &n, &err) == 0 && n == 5 && !strcmp(text, "12345"), "sp_read_file");
    free(text);

    /* stale temps: a dead writer's file and directory go, a live writer's stay, others untouched */
    snprintf(q, sizeof q, "%s/out", root);
    long dp = dead_pid();
    snprintf(dead, sizeof dead, "%s.tmp.%ld", q, dp);
    snprintf(live, sizeof live, "%s.tmp.%ld", q, (long)getppid());
    snprintf(t, sizeof t, "%s/inner", dead);
    CHECK(sp_mkdir_p(t, &err) == 0, "%s", err.msg);
    write_text(live, "x");
    snprintf(t, sizeof t, "%s.tmp.notapid", q);
    write_text(t, "x");
    CHECK(sp_remove_stale_tmp(q) == 1, "one stale temp expected");
    CHECK(!sp_file_exists(dead) && sp_file_exists(live) && sp_file_exists(t), "stale temp removal");
    unlink(live);
    unlink(t);

    /* publishing a directory: into nothing (one rename), then over an existing one (per entry) */
    char tmp[700];
    CHECK(sp_tmp_name(tmp, sizeof tmp, q) == 0, "tmp name");
    CHECK(sp_mkdir_p(tmp, &err) == 0, "%s", err.msg);
    snprintf(t, sizeof t, "%s/a.txt", tmp);
    write_text(t, "new a");
    CHECK(sp_dir_publish(tmp, q, &err) == 0 && !sp_file_exists(tmp), "publish: %s", err.msg);
    snprintf(t, sizeof t, "%s/keep.txt", q);
    write_text(t, "kept");
    CHECK(sp_mkdir_p(tmp, &err) == 0, "%s", err.msg);
    snprintf(t, sizeof t, "%s/a.txt", tmp);
    write_text(t, "newer a");
    CHECK(sp_dir_publish(tmp, q, &err) == 0 && !sp_file_exists(tmp), "publish over: %s", err.msg);
    snprintf(t, sizeof t, "%s/a.txt", q);
    CHECK(sp_read_file(t, &text, &n, &err) == 0 && !strcmp(text, "newer a"), "a.txt not replaced");
    free(text);
    snprintf(t, sizeof t, "%s/keep.txt", q);
    CHECK(sp_file_exists(t), "publish removed an unrelated file");
    /* the name of a directory given with a trailing slash stays beside it, not inside */
    char slash[620];
    snprintf(slash, sizeof slash, "%s/", q);
    CHECK(sp_tmp_name(tmp, sizeof tmp, slash) == 0 && strncmp(tmp, q, strlen(q)) == 0 && tmp[strlen(q)] == '.',
          "tmp name of %s: %s", slash, tmp);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(root, sizeof root, "/tmp/specula_test_harden_%d", (int)getpid());
    snprintf(bin, sizeof bin, "%s", argv[0]);
    char *slash = strrchr(bin, '/');
    if (slash) *slash = 0;
    slash = strrchr(bin, '/');
    if (slash) strcpy(slash + 1, "specula");
    sp_err err;
    if (access(bin, X_OK) != 0 || sp_mkdir_p(root, &err)) {
        printf("skipped: no specula binary at %s\n", bin);
        return harness_done("test_harden");
    }
    /* the tiny target and its shards (6 records, responses generated) */
    char cmd[4096], p[512];
    snprintf(target, sizeof target, "%s/target", root);
    snprintf(shards, sizeof shards, "%s/shards", root);
    snprintf(p, sizeof p, "%s/six.jsonl", root);
    FILE *f = fopen(p, "w");
    for (int i = 0; f && i < 6; i++) fprintf(f, "{\"ids\": [1, %d, %d, %d], \"resp_start\": 4}\n", 50 + i, 60 + i, 50 + i);
    if (f) fclose(f);
    snprintf(cmd, sizeof cmd, "%s new-model --arch qwen3 --preset tiny --seed 2 -o %s && "
             "%s regen -m %s --data %s -o %s --generate 20 --taps 0 -q", bin, target, bin, target, p, shards);
    if (run(cmd) != 0) {
        printf("FAIL setup: %s\n", cmd);
        return 1;
    }
    RUN(test_core_files);
    RUN(test_not_regular_files);
    RUN(test_stdout_errors);
    RUN(test_ranges);
    RUN(test_training);
    RUN(test_leftovers);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_harden");
}
