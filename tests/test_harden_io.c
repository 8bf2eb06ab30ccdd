/* test_harden_io.c — outputs that are devices, models quantize must refuse, what a killed
 * quantize leaves, and load errors that name what is wrong; all through the `specula` binary:
 * - `-o` naming a FIFO or a character device (a private mknod node; skipped with a message where
 *   mknod is not permitted): export-gguf, quantize, logits and train-tokenizer write into it and
 *   it is still that node afterwards; a full device (/dev/full's numbers) is a write error;
 * - quantize of a GGUF that loading rejects (a missing ffn_down / token_embd, a wrong attn_q
 *   shape, a norm of the wrong length): the loader's error, non-zero exit, no output;
 * - quantize from a model directory: scratch files of dead runs (every name they took) removed,
 *   none of its own left, no doubled names;
 * - a broken GGUF with -p TEXT reports the load error, a zero dimension and a too large
 *   n_tensors are named as such. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "harness.h"

static char root[256], bin[512], target[400], gguf[400];

/* cmd's exit status, stderr in root/err.txt, stdout discarded unless redirected */
static int run(const char *cmd) {
    char full[8192];
    snprintf(full, sizeof full, "( %s ) >/dev/null 2>%s/err.txt", cmd, root);
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
static int err_has_quiet(const char *what) {
    char p[400], *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/err.txt", root);
    if (sp_read_file(p, &text, &n, NULL)) return 0;
    int found = strstr(text, what) != NULL;
    free(text);
    return found;
}
static mode_t file_type(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* ---- 1. device and FIFO outputs ------------------------------------------------------------ */
/* run cmd (whose output is the FIFO fifo) while a reader drains the FIFO into sink; returns the
 * command's exit status and the bytes read in *got */
static int run_into_fifo(const char *cmd, const char *fifo, const char *sink, long *got) {
    pid_t r = fork();
    if (r == 0) {
        char c[2048];
        snprintf(c, sizeof c, "cat '%s' > '%s'", fifo, sink);
        execl("/bin/sh", "sh", "-c", c, (char *)NULL);
        _exit(127);
    }
    int rc = run(cmd);
    int st;
    waitpid(r, &st, 0);
    struct stat s;
    *got = stat(sink, &s) == 0 ? (long)s.st_size : -1;
    return rc;
}

static void test_fifo_outputs(void) {
    char fifo[400], sink[400], cmd[4096], corpus[400];
    snprintf(fifo, sizeof fifo, "%s/out.fifo", root);
    snprintf(sink, sizeof sink, "%s/sink.bin", root);
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", root);
    write_text(corpus, "the quick brown fox jumps over the lazy dog\nhello world hello there\n");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    const char *what[] = {"export-gguf", "quantize", "logits", "train-tokenizer"};
    for (int i = 0; i < 4; i++) {
        if (i == 0) snprintf(cmd, sizeof cmd, "%s export-gguf -m %s -o %s --no-tokenizer", bin, target, fifo);
        if (i == 1) snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --type q8_0 -q -t 1", bin, target, fifo);
        if (i == 2) snprintf(cmd, sizeof cmd, "%s logits -m %s --prompt-ids 1,2,3 -o %s -t 1", bin, target, fifo);
        if (i == 3) snprintf(cmd, sizeof cmd, "%s train-tokenizer -f %s --vocab-size 280 -o %s", bin, corpus, fifo);
        long got = 0;
        int rc = run_into_fifo(cmd, fifo, sink, &got);
        CHECK(rc == 0 && got > 0, "%s into a FIFO: exit %d, %ld bytes read", what[i], rc, got);
        CHECK(file_type(fifo) == S_IFIFO, "%s replaced the FIFO", what[i]);
    }
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp", root);
    char out[64] = "";
    harness_run(cmd, out, sizeof out);
    CHECK(atoi(out) == 0, "temp files left beside the FIFO: %s", out);
}

/* a private character device node: /dev/null's numbers (written into, stays a node) and
 * /dev/full's (a write error, stays a node) */
static void test_device_node(void) {
    char nul[400], full[400], cmd[4096];
    snprintf(nul, sizeof nul, "%s/null.dev", root);
    snprintf(full, sizeof full, "%s/full.dev", root);
    if (mknod(nul, S_IFCHR | 0666, makedev(1, 3)) != 0 || mknod(full, S_IFCHR | 0666, makedev(1, 7)) != 0) {
        printf("  skipped: mknod not permitted here (%s)\n", strerror(errno));
        return;
    }
    snprintf(cmd, sizeof cmd, "%s export-gguf -m %s -o %s --no-tokenizer", bin, target, nul);
    CHECK(run(cmd) == 0, "export-gguf to a null device");
    CHECK(file_type(nul) == S_IFCHR, "export-gguf replaced the device node");
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --type q8_0 -q -t 1", bin, gguf, nul);
    CHECK(run(cmd) == 0, "quantize to a null device");
    CHECK(file_type(nul) == S_IFCHR, "quantize replaced the device node");
    snprintf(cmd, sizeof cmd, "%s logits -m %s --prompt-ids 1,2 -o %s -t 1", bin, target, full);
    CHECK(run(cmd) != 0 && err_has("No space left"), "logits to a full device must fail");
    CHECK(file_type(full) == S_IFCHR, "logits replaced the full device node");
}

/* ---- GGUF crafting ---------------------------------------------------------------------- */
/* a copy of gguf with tensor drop left out, and tensor shrink's first dimension halved */
static int rewrite(const char *out, const char *drop, const char *shrink) {
    sp_err err;
    gguf_file *f = sp_gguf_open(gguf, &err);
    if (!f) return -1;
    gguf_writer *w = sp_gguf_writer_create();
    int rc = 0;
    for (uint64_t i = 0; i < f->n_kv && !rc; i++) {
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)f->kv[i].key.len, f->kv[i].key.ptr);
        if (strcmp(key, "general.alignment"))
            rc = sp_gguf_writer_set_raw(w, key, (gguf_type)f->kv[i].type, f->kv[i].raw, (size_t)f->kv[i].raw_len, &err);
    }
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor_info *t = &f->tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (drop && !strcmp(name, drop)) continue;
        int64_t ne[4];
        for (uint32_t d = 0; d < t->n_dims; d++) ne[d] = (int64_t)t->dims[d];
        if (shrink && !strcmp(name, shrink)) ne[t->n_dims - 1] /= 2;
        rc = sp_gguf_writer_add_tensor(w, name, (ggml_type)t->type, (int)t->n_dims, ne, sp_gguf_tensor_data(f, t, &err),
                                       NULL, NULL, &err);
    }
    if (!rc) rc = sp_gguf_writer_save(w, out, &err);
    if (rc) fprintf(stderr, "  rewrite %s: %s\n", out, err.msg);
    sp_gguf_writer_free(w);
    sp_gguf_close(f);
    return rc;
}

/* the file's bytes with the first 8 bytes after `after` (a tensor name) or at offset `at` set to v */
static int patch_u64(const char *out, const char *after, long at, uint64_t v) {
    char *b = NULL;
    size_t n = 0;
    if (sp_read_file(gguf, &b, &n, NULL)) return -1;
    if (after) {
        char *p = memmem(b, n, after, strlen(after));
        at = p ? (long)(p - b) + (long)strlen(after) + 4 : -1; /* skip n_dims (u32) to dims[0] */
    }
    int rc = at < 0 ? -1 : 0;
    if (!rc) memcpy(b + at, &v, 8);
    if (!rc) rc = sp_write_file_atomic(out, b, n, NULL);
    free(b);
    return rc;
}

/* ---- 3. quantize validates as loading does --------------------------------------------------- */
static void test_quantize_validates(void) {
    struct {
        const char *drop, *shrink, *expect;
    } cases[] = {
        {"blk.0.ffn_down.weight", NULL, "missing tensor blk.0.ffn_down.weight"},
        {"token_embd.weight", NULL, "token_embd.weight"},
        {NULL, "blk.0.attn_q.weight", "attn_q.weight"},
        {NULL, "blk.1.attn_norm.weight", "attn_norm.weight"},
    };
    char in[400], out[400], cmd[4096];
    for (int i = 0; i < 4; i++) {
        snprintf(in, sizeof in, "%s/bad%d.gguf", root, i);
        snprintf(out, sizeof out, "%s/bad%d-q8.gguf", root, i);
        CHECK(rewrite(in, cases[i].drop, cases[i].shrink) == 0, "crafting %s", in);
        snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 -n 1 -t 1", bin, in);
        CHECK(run(cmd) != 0 && err_has(cases[i].expect), "generate accepted %s", in);
        snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --type q8_0 -q -t 1", bin, in, out);
        CHECK(run(cmd) != 0 && err_has(cases[i].expect), "quantize accepted %s", in);
        CHECK(!sp_file_exists(out), "quantize wrote %s for a model loading rejects", out);
    }
}

/* ---- 4. what killed quantize runs leave ---------------------------------------------------- */
static void test_quantize_scratch(void) {
    char out[400], stale[3][500], cmd[4096], listing[2048] = "";
    snprintf(out, sizeof out, "%s/q.gguf", root);
    long dp = dead_pid();
    snprintf(stale[0], sizeof stale[0], "%s.export.tmp.%ld", out, dp);
    snprintf(stale[1], sizeof stale[1], "%s.export.%ld.tmp", out, dp);
    snprintf(stale[2], sizeof stale[2], "%s.export.%ld.tmp.tmp.%ld", out, dp, dp);
    for (int i = 0; i < 3; i++) write_text(stale[i], "a killed run's scratch GGUF");
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --type q8_0 -q -t 1", bin, target, out);
    CHECK(run(cmd) == 0, "quantize from the directory");
    for (int i = 0; i < 3; i++) CHECK(!sp_file_exists(stale[i]), "stale %s not removed", stale[i]);
    CHECK(err_has("left by process"), "the removal is logged");
    snprintf(cmd, sizeof cmd, "ls %s | grep 'q.gguf.'", root);
    harness_run(cmd, listing, sizeof listing);
    CHECK(listing[0] == 0, "quantize left: %s", listing);

    /* killed while exporting or quantizing: its scratch file goes at the next run */
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        execl(bin, bin, "quantize", "-m", target, "-o", out, "--type", "q4_k_m", "-q", "-t", "1", (char *)NULL);
        _exit(127);
    }
    usleep(150 * 1000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --type q8_0 -q -t 1 && ls %s | grep 'q.gguf.'", bin, target,
             out, root);
    listing[0] = 0;
    harness_run(cmd, listing, sizeof listing);
    CHECK(listing[0] == 0, "after a killed quantize and a new run: %s", listing);
}

/* ---- 5. load errors first, naming the field -------------------------------------------- */
static void test_load_errors(void) {
    char bad[400], cmd[4096];
    /* a tensor past the end of the data: the load error, not the tokenizer's absence */
    snprintf(bad, sizeof bad, "%s/offset.gguf", root);
    char *b = NULL;
    size_t n = 0;
    CHECK(sp_read_file(gguf, &b, &n, NULL) == 0, "read %s", gguf);
    snprintf(cmd, sizeof cmd, "%s", "blk.1.ffn_down.weight");
    char *p = b ? memmem(b, n, cmd, strlen(cmd)) : NULL;
    CHECK(p != NULL, "no %s in %s", cmd, gguf);
    if (!p) return;
    uint32_t nd;
    memcpy(&nd, p + strlen(cmd), 4);
    uint64_t off = (uint64_t)n * 2;
    memcpy(p + strlen(cmd) + 4 + 8 * nd + 4, &off, 8); /* after n_dims, dims and type: the offset */
    CHECK(sp_write_file_atomic(bad, b, n, NULL) == 0, "write %s", bad);
    free(b);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hello -n 1 -t 1", bin, bad);
    CHECK(run(cmd) != 0 && err_has("blk.1.ffn_down.weight") && !err_has_quiet("needs a tokenizer"),
          "generate -p on a broken GGUF");
    snprintf(cmd, sizeof cmd, "%s audit -m %s -p hello -t 1", bin, bad);
    CHECK(run(cmd) != 0 && err_has("blk.1.ffn_down.weight") && !err_has_quiet("needs a tokenizer"),
          "audit -p on a broken GGUF");

    /* a zero dimension */
    snprintf(bad, sizeof bad, "%s/zero.gguf", root);
    CHECK(patch_u64(bad, "blk.0.attn_norm.weight", 0, 0) == 0, "craft %s", bad);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1 -n 1 -t 1", bin, bad);
    CHECK(run(cmd) != 0 && err_has("blk.0.attn_norm.weight': dimension 0 is 0"), "zero dimension");

    /* n_tensors one more than the file describes */
    gguf_file *f = sp_gguf_open(gguf, NULL);
    uint64_t nt = f ? f->n_tensors : 0;
    sp_gguf_close(f);
    snprintf(bad, sizeof bad, "%s/count.gguf", root);
    CHECK(patch_u64(bad, NULL, 8, nt + 1) == 0, "craft %s", bad);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1 -n 1 -t 1", bin, bad);
    char want[96];
    snprintf(want, sizeof want, "n_tensors = %llu", (unsigned long long)(nt + 1));
    CHECK(run(cmd) != 0 && err_has(want), "too large n_tensors");
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(root, sizeof root, "/tmp/specula_test_harden_io_%d", (int)getpid());
    snprintf(bin, sizeof bin, "%s", argv[0]);
    char *slash = strrchr(bin, '/');
    if (slash) *slash = 0;
    slash = strrchr(bin, '/');
    if (slash) strcpy(slash + 1, "specula");
    sp_err err;
    if (access(bin, X_OK) != 0 || sp_mkdir_p(root, &err)) {
        printf("skipped: no specula binary at %s\n", bin);
        return harness_done("test_harden_io");
    }
    char cmd[4096];
    snprintf(target, sizeof target, "%s/target", root);
    snprintf(gguf, sizeof gguf, "%s/target.gguf", root);
    /* a tiny qwen3 with a small trained vocabulary (text prompts work), and its GGUF export */
    char corpus[400];
    snprintf(corpus, sizeof corpus, "%s/tok-corpus.txt", root);
    write_text(corpus, "the quick brown fox jumps over the lazy dog\nhello world, speculative decoding\n");
    snprintf(cmd, sizeof cmd, "%s train-tokenizer -f %s --vocab-size 300 -o %s/tok.json && %s new-model --arch qwen3 "
             "--preset tiny --seed 3 --tokenizer %s/tok.json --set vocab_size=320 -o %s && %s export-gguf -m %s -o %s",
             bin, corpus, root, bin, root, target, bin, target, gguf);
    if (run(cmd) != 0) {
        printf("FAIL setup: %s\n", cmd);
        return 1;
    }
    RUN(test_fifo_outputs);
    RUN(test_device_node);
    RUN(test_quantize_validates);
    RUN(test_quantize_scratch);
    RUN(test_load_errors);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_harden_io");
}
