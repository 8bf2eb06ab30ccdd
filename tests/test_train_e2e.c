/* test_train_e2e.c — end to end on a random tiny qwen3 target: regen a repetitive corpus (the
 * target's own greedy continuations of prompts over a 12-token alphabet), train DSpark and
 * DFlash drafters, and check that held-out τ (analytic, docs/DSPARK.md §7) rises well above its
 * start; then exact resume: N steps straight vs a run stopped (in-process, and by SIGKILL at an
 * arbitrary moment) and resumed give byte-identical checkpoints, with anchors drawn 3 per
 * sequence sharing their context (units cut by batch and resume boundaries). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train_harness.h"

static void setup(void) {
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 1, .n_threads = 2};
    th_setup("test_train_e2e", "", &o);
}

/* trains name for steps steps with anchors_per_seq anchors drawn per sequence (1 but in
 * test_dspark_shared_tau_rises): held-out τ rises, the checkpoint is written, inference speeds up */
static void check_tau_rises(tr_arch arch, const char *name, long steps, int anchors_per_seq) {
    char out[400];
    tr_train_cfg c = th_named_cfg(out, sizeof out, arch, name, TH_LEARN_STEPS(steps));
    c.anchors_per_seq = anchors_per_seq;
    tr_train_result r;
    th_train(&c, name, 1, &r);
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(sp_file_exists(p), "no checkpoint");
    th_check_inference(out, name);
}

static void test_dspark_tau_rises(void) { check_tau_rises(TR_ARCH_DSPARK, "dspark", 160, 1); }
static void test_dflash_tau_rises(void) { check_tau_rises(TR_ARCH_DFLASH, "dflash", 120, 1); }
static void test_dflash_zlab_tau_rises(void) { check_tau_rises(TR_ARCH_DFLASH_ZLAB, "dflash-zlab", 120, 1); }
/* two anchors per sequence sharing their context rows (model.h) */
static void test_dspark_shared_tau_rises(void) { check_tau_rises(TR_ARCH_DSPARK, "dspark-shared", 160, 2); }

static void compare_dirs(const char *a, const char *b, const char *what) {
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "config.json"};
    for (int i = 0; i < 3; i++) {
        char pa[512], pb[512];
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        CHECK(harness_same_file(pa, pb), "%s: %s differs from the uninterrupted run", what, files[i]);
    }
}

static void test_resume_bit_identical(void) {
    enum { N = 16 };
    char straight[400], stopped[400], killed[400];
    snprintf(straight, sizeof straight, "%s/straight", th_root);
    snprintf(stopped, sizeof stopped, "%s/stopped", th_root);
    snprintf(killed, sizeof killed, "%s/killed", th_root);
    sp_err err;
    tr_train_result r;
    tr_train_cfg c = th_small_cfg(TR_ARCH_DSPARK, straight);
    c.steps = N;
    c.anchors_per_seq = 3;
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    /* stopped after step 9 with a checkpoint at step 5, then resumed */
    c.out_dir = stopped;
    c.save_every = 5;
    c.stop_after = 9;
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == 9, "%s", err.msg);
    c.stop_after = 0;
    c.resume = 1;
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    compare_dirs(straight, stopped, "stop + resume");
    /* resuming a finished run runs no step, reports the last one and changes nothing (a SIGKILL
     * below may come after the child already finished) */
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == N, "resume of a finished run: step %ld", (long)r.step);
    compare_dirs(straight, stopped, "resume of a finished run");
    /* resuming with other settings is refused */
    tr_train_cfg other = c;
    other.batch = 4;
    CHECK(sp_tr_train_run(&other, &r, &err) != 0 && strstr(err.msg, "other settings"), "other args: %s", err.msg);
    other.batch = c.batch;
    other.anchors_per_seq = 1;
    CHECK(sp_tr_train_run(&other, &r, &err) != 0 && strstr(err.msg, "other settings"), "other A: %s", err.msg);
    /* SIGKILL at an arbitrary moment (checkpoints every 2 steps), then resume */
    c.out_dir = killed;
    c.save_every = 2;
    c.resume = 0;
    pid_t pid = fork();
    if (pid == 0) {
        tr_train_result rr;
        sp_err e2;
        _exit(sp_tr_train_run(&c, &rr, &e2) == 0 ? 0 : 1);
    }
    usleep(250 * 1000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    c.resume = 1;
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    compare_dirs(straight, killed, "SIGKILL + resume");
    printf("  child %s\n", WIFSIGNALED(status) ? "killed mid-run" : "finished before the kill");
}

/* the tempered loss (train --temp) with a mix of temperatures and a KL weight: stopped and resumed
 * it ends bit-identical to the uninterrupted run; its temperatures are in config.json and the run
 * string (a resume with another --temp is refused); and it trains another drafter than the
 * untempered loss does */
static void test_resume_temp(void) {
    enum { N = 10 };
    char straight[400], stopped[400], plain[400], p[512], q[512];
    snprintf(straight, sizeof straight, "%s/temp_straight", th_root);
    snprintf(stopped, sizeof stopped, "%s/temp_stopped", th_root);
    snprintf(plain, sizeof plain, "%s/temp_plain", th_root);
    sp_err err;
    tr_train_result r;
    tr_train_cfg c = th_small_cfg(TR_ARCH_DSPARK, plain);
    c.steps = N;
    c.eval_blocks = 8;
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    c.out_dir = straight;
    c.n_temps = 3;
    c.temps[0] = 0.6, c.temps[1] = 0.8, c.temps[2] = 1.0;
    c.kl_weight = 0.25;
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    snprintf(p, sizeof p, "%s/model.safetensors", straight);
    snprintf(q, sizeof q, "%s/model.safetensors", plain);
    CHECK(!harness_same_file(p, q), "--temp trained the same weights as the untempered loss");
    char *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/config.json", straight);
    CHECK(!sp_read_file(p, &text, &n, NULL) && strstr(text, "\"train_temperature\": [") && strstr(text, "0.6"),
          "config.json lacks train_temperature: %s", text ? text : "");
    free(text);
    text = NULL;
    snprintf(p, sizeof p, "%s/train_log.csv", straight);
    CHECK(!sp_read_file(p, &text, &n, NULL) && strstr(text, ",a4,kl\n"), "the log has no kl column");
    free(text);
    /* stopped after step 7 with a checkpoint at step 4, then resumed */
    c.out_dir = stopped;
    c.save_every = 4;
    c.stop_after = 7;
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == 7, "%s", err.msg);
    c.stop_after = 0;
    c.resume = 1;
    tr_train_cfg other = c;
    other.temps[1] = 0.9;
    CHECK(sp_tr_train_run(&other, &r, &err) != 0 && strstr(err.msg, "other settings") && strstr(err.msg, "temp="),
          "resume with another --temp: %s", err.msg);
    other = c;
    other.kl_weight = 0;
    CHECK(sp_tr_train_run(&other, &r, &err) != 0 && strstr(err.msg, "other settings"), "other --kl-weight: %s",
          err.msg);
    CHECK(sp_tr_train_run(&c, &r, &err) == 0 && r.step == N, "%s", err.msg);
    compare_dirs(straight, stopped, "--temp stop + resume");
}

int main(void) {
    setup();
    RUN(test_dspark_tau_rises);
    RUN(test_dflash_tau_rises);
    RUN(test_dflash_zlab_tau_rises);
    RUN(test_dspark_shared_tau_rises);
    RUN(test_resume_bit_identical);
    RUN(test_resume_temp);
    th_remove_root();
    return harness_done("test_train_e2e");
}
