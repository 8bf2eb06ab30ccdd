/* test_train_e2e.c — end to end on a random tiny qwen3 target: regen a repetitive corpus (the
 * target's own greedy continuations of prompts over a 12-token alphabet), train DSpark and
 * DFlash drafters, and check that held-out τ (analytic, FORMATS.md §8.7) rises well above its
 * start; then exact resume: N steps straight vs a run stopped (in-process, and by SIGKILL at an
 * arbitrary moment) and resumed give byte-identical checkpoints, with anchors drawn 3 per
 * sequence sharing their context (units cut by batch and resume boundaries). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/newmodel.h"
#include "harness.h"
#include "train/regen.h"
#include "train/trainer.h"
#include "drafters/dflash.h"
#include "spec/spec.h"

static char root[256], target[300], shards[300], held[300];
static int alpha[12];

static void corpus(const char *path, int n, unsigned seed, const int *alpha) {
    FILE *f = fopen(path, "w");
    unsigned s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        int len = 4 + (int)((s >> 16) % 6);
        fprintf(f, "{\"ids\": [1");
        for (int j = 0; j < len; j++) {
            s = s * 1103515245u + 12345u;
            fprintf(f, ", %d", alpha[(s >> 16) % 12]);
        }
        fprintf(f, "], \"resp_start\": %d}\n", len + 1);
    }
    fclose(f);
}

static void setup(void) {
    snprintf(root, sizeof root, "/tmp/specula_test_train_e2e_%d", (int)getpid());
    snprintf(target, sizeof target, "%s/target", root);
    snprintf(shards, sizeof shards, "%s/shards", root);
    snprintf(held, sizeof held, "%s/held", root);
    sp_err err;
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 1, .n_threads = 2};
    CHECK(newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 12; i++) alpha[i] = 3 + (int)(sp_rng_u64(5, 0, (uint64_t)i) % 8000);
    char p1[400], p2[400];
    snprintf(p1, sizeof p1, "%s/train.jsonl", root);
    snprintf(p2, sizeof p2, "%s/held.jsonl", root);
    corpus(p1, 64, 1, alpha);
    corpus(p2, 12, 777, alpha);
    tr_regen_cfg c = {.model_dir = target, .data_path = p1, .out_dir = shards, .generate = 48, .threads = 2};
    CHECK(tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    c.data_path = p2;
    c.out_dir = held;
    CHECK(tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
}

static tr_train_cfg small_cfg(tr_arch arch, const char *out) {
    tr_train_cfg c = tr_train_defaults();
    c.arch = arch;
    c.model_dir = target;
    c.data_dir = shards;
    c.heldout_dir = held;
    c.out_dir = out;
    c.batch = 8;
    c.block = 4;
    c.layers = 1;
    c.markov_rank = 32;
    c.ctx = 32;
    c.lr = 3e-3;
    c.eval_blocks = 48;
    c.threads = 2;
    c.anchors_per_seq = 1; /* 64 short toy sequences: A anchors per sequence leaves 8 / A sequences in a
                              batch; test_dspark_shared_tau_rises trains with A = 2 */
    return c;
}

static void check_inference(const char *dir, const char *name);

static void check_tau_rises(tr_arch arch, const char *name, long steps, int anchors_per_seq) {
    char out[400];
    snprintf(out, sizeof out, "%s/%s", root, name);
    tr_train_cfg c = small_cfg(arch, out);
    c.steps = steps;
    c.anchors_per_seq = anchors_per_seq;
    tr_train_result r;
    sp_err err;
    CHECK(tr_train_run(&c, &r, &err) == 0, "%s", err.msg);
    int tau_max = arch == TR_ARCH_DFLASH_ZLAB ? c.block : c.block + 1; /* z-lab: B−1 drafts + bonus */
    printf("  %s: held-out tau %.3f -> %.3f (max %d), a_k", name, r.tau_first, r.tau_last, tau_max);
    for (int k = 0; k < c.block; k++) printf(" %.3f", r.a_last[k]);
    printf(", loss %.3f -> %.3f, %.0f block tok/s\n", r.loss_first, r.loss_last, r.tok_per_s);
    CHECK(r.tau_last > r.tau_first + 1.0 && r.tau_last > 0.5 * (tau_max + 1), "%s: tau %.3f -> %.3f", name,
          r.tau_first, r.tau_last);
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(sp_file_exists(p), "no checkpoint");
    check_inference(out, name);
}

/* the trained drafter, loaded by the INFERENCE path (drafters/dflash.c), accelerates greedy
 * generation on unseen prompts of the same kind: real acceptance, output identical to plain */
static void check_inference(const char *dir, const char *name) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    CHECK(sp_model_load(&m, target, 2, &err) == 0, "%s", err.msg);
    if (!m) return;
    sp_sample_params greedy = sp_sample_params_default();
    sp_dflash_opts o = sp_dflash_opts_default();
    sp_drafter *d = sp_drafter_dflash(dir, m, &greedy, &o, &err);
    CHECK(d != NULL, "%s: inference loader refused the trained drafter: %s", name, err.msg);
    long drafted = 0, accepted = 0;
    unsigned s = 4242;
    for (int k = 0; d && k < 8; k++) {
        int32_t prompt[12], ref[40], out[40];
        int n = 0;
        prompt[n++] = 1;
        int len = 4 + k % 6;
        for (int j = 0; j < len; j++) {
            s = s * 1103515245u + 12345u;
            prompt[n++] = alpha[(s >> 16) % 12];
        }
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = 40;
        gp.ignore_eos = 1;
        sp_gen_stats gs;
        CHECK(sp_generate(m, NULL, prompt, n, &gp, ref, 40, &gs, &err) == 0, "%s", err.msg);
        sp_spec_params sp = sp_spec_params_default();
        sp.gen = gp;
        sp.draft_max = 4;
        sp_spec_stats st;
        CHECK(sp_spec_generate(m, d, prompt, n, &sp, out, 40, &st, &err) == 0, "%s", err.msg);
        CHECK(st.emitted == gs.emitted && !memcmp(out, ref, sizeof(int32_t) * (size_t)gs.emitted),
              "%s: speculative output differs from plain", name);
        drafted += st.drafted;
        accepted += st.accepted;
    }
    double rate = drafted ? (double)accepted / drafted : 0;
    printf("  %s via the inference drafter: acceptance %.3f (%ld of %ld drafts), outputs identical\n", name, rate,
           accepted, drafted);
    CHECK(rate > 0.2, "%s: trained drafter accepts only %.3f at inference", name, rate);
    sp_drafter_free(d);
    sp_model_free(m);
}

static void test_dspark_tau_rises(void) { check_tau_rises(TR_ARCH_DSPARK, "dspark", 160, 1); }
static void test_dflash_tau_rises(void) { check_tau_rises(TR_ARCH_DFLASH, "dflash", 120, 1); }
static void test_dflash_zlab_tau_rises(void) { check_tau_rises(TR_ARCH_DFLASH_ZLAB, "dflash-zlab", 120, 1); }
/* two anchors per sequence sharing their context rows (model.h) */
static void test_dspark_shared_tau_rises(void) { check_tau_rises(TR_ARCH_DSPARK, "dspark-shared", 160, 2); }

static int same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = !sp_read_file(a, &x, &nx, NULL) && !sp_read_file(b, &y, &ny, NULL) && nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return same;
}

static void compare_dirs(const char *a, const char *b, const char *what) {
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "config.json"};
    for (int i = 0; i < 3; i++) {
        char pa[512], pb[512];
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        CHECK(same_file(pa, pb), "%s: %s differs from the uninterrupted run", what, files[i]);
    }
}

static void test_resume_bit_identical(void) {
    enum { N = 16 };
    char straight[400], stopped[400], killed[400];
    snprintf(straight, sizeof straight, "%s/straight", root);
    snprintf(stopped, sizeof stopped, "%s/stopped", root);
    snprintf(killed, sizeof killed, "%s/killed", root);
    sp_err err;
    tr_train_result r;
    tr_train_cfg c = small_cfg(TR_ARCH_DSPARK, straight);
    c.steps = N;
    c.anchors_per_seq = 3;
    CHECK(tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    /* stopped after step 9 with a checkpoint at step 5, then resumed */
    c.out_dir = stopped;
    c.save_every = 5;
    c.stop_after = 9;
    CHECK(tr_train_run(&c, &r, &err) == 0 && r.step == 9, "%s", err.msg);
    c.stop_after = 0;
    c.resume = 1;
    CHECK(tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    compare_dirs(straight, stopped, "stop + resume");
    /* resuming a finished run runs no step, reports the last one and changes nothing (a SIGKILL
     * below may come after the child already finished) */
    CHECK(tr_train_run(&c, &r, &err) == 0 && r.step == N, "resume of a finished run: step %ld", (long)r.step);
    compare_dirs(straight, stopped, "resume of a finished run");
    /* resuming with other settings is refused */
    tr_train_cfg other = c;
    other.batch = 4;
    CHECK(tr_train_run(&other, &r, &err) != 0 && strstr(err.msg, "other settings"), "other args: %s", err.msg);
    other.batch = c.batch;
    other.anchors_per_seq = 1;
    CHECK(tr_train_run(&other, &r, &err) != 0 && strstr(err.msg, "other settings"), "other A: %s", err.msg);
    /* SIGKILL at an arbitrary moment (checkpoints every 2 steps), then resume */
    c.out_dir = killed;
    c.save_every = 2;
    c.resume = 0;
    pid_t pid = fork();
    if (pid == 0) {
        tr_train_result rr;
        sp_err e2;
        _exit(tr_train_run(&c, &rr, &e2) == 0 ? 0 : 1);
    }
    usleep(250 * 1000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    c.resume = 1;
    CHECK(tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    compare_dirs(straight, killed, "SIGKILL + resume");
    printf("  child %s\n", WIFSIGNALED(status) ? "killed mid-run" : "finished before the kill");
}

int main(void) {
    setup();
    RUN(test_dspark_tau_rises);
    RUN(test_dflash_tau_rises);
    RUN(test_dflash_zlab_tau_rises);
    RUN(test_dspark_shared_tau_rises);
    RUN(test_resume_bit_identical);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_e2e");
}
