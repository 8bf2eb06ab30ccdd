/* test_train_loop.c — the one training loop (src/train/loop.c) and schedule (optim.c) on a toy
 * trainer whose loss is ½·Σ(w − t_s)² with targets t_s drawn from the step: the schedule's
 * warm-up, peak, cosine and floor; a run stopped at a step and resumed, and one ended without
 * a save (as a kill) with a torn log line and resumed, both bit-identical to an uninterrupted
 * run, weights and log; a checkpoint from other settings refused; a diverged step an error that
 * keeps the last checkpoint; resume without a checkpoint where one is required. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "harness.h"
#include "train/loop.h"

enum { N = 10 };
static const int64_t shape_a[2] = {2, 3}, shape_b[1] = {4};
static const tr_ckpt_tensor toy_tensors[2] = {{"a", 2, shape_a, 0, 6}, {"b", 1, shape_b, 6, 4}};
static char root[256];

typedef struct {
    float w[N];
    long nan_at; /* > 0: this step's loss is NaN */
    int evals;
} toy;

static void toy_step(void *ctx, long step, float *grad, double *stats) {
    toy *t = ctx;
    double loss = 0;
    for (int i = 0; i < N; i++) {
        float d = t->w[i] - (float)(0.5 * cos(i) + 0.1 * sin(0.7 * (double)step + i));
        grad[i] = d;
        loss += 0.5 * d * d;
    }
    stats[0] = step == t->nan_at ? NAN : loss;
}
static int toy_eval(void *ctx, long step, sp_err *err) {
    (void)step, (void)err;
    ((toy *)ctx)->evals++;
    return 0;
}
static void toy_log_row(void *ctx, FILE *f, const tr_loop_row *r) {
    (void)ctx;
    fprintf(f, "%ld,%.9g,%.9g,%.9g,%d\n", r->step, r->stats[0], r->lr, r->grad_norm, r->evaluated);
}
static int toy_export(void *ctx, const char *dir, sp_err *err) {
    char p[512], text[64];
    snprintf(p, sizeof p, "%s/model.txt", dir);
    snprintf(text, sizeof text, "%.9g\n", ((toy *)ctx)->w[0]);
    return sp_write_file_atomic(p, text, strlen(text), err);
}
static int toy_state(void *ctx, json_t *j) {
    (void)ctx;
    return json_object_set_new(j, "toy", json_true());
}

static const tr_loop_ops toy_ops = {.step = toy_step, .eval = toy_eval, .log_row = toy_log_row,
                                    .export_model = toy_export, .state = toy_state};

static tr_loop_cfg toy_cfg(const char *out) {
    return (tr_loop_cfg){.oc = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .warmup = 3, .total = 12,
                                .min_lr_frac = 0.1, .clip = 1.0},
                         .n_stats = 1, .out_dir = out, .log_header = "step,loss,lr,grad_norm,evaluated\n",
                         .run = "toy v=1", .save_every = 4, .eval_every = 5};
}

/* a toy run into root/name with c's settings; *res its result; returns sp_tr_loop_run's status */
static int toy_run(toy *t, tr_loop_cfg c, const char *name, tr_loop_result *res, sp_err *err) {
    char out[400];
    snprintf(out, sizeof out, "%s/%s", root, name);
    c.out_dir = out;
    tr_loop_params p = {.w = t->w, .n = N, .t = toy_tensors, .nt = 2};
    return sp_tr_loop_run(&c, &p, &toy_ops, t, res, err);
}

static void toy_init(toy *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < N; i++) t->w[i] = 0.1f * (float)i;
}

static char *read_text(const char *name, const char *file) {
    char p[512], *text = NULL;
    size_t n;
    snprintf(p, sizeof p, "%s/%s/%s", root, name, file);
    return sp_read_file(p, &text, &n, NULL) ? NULL : text;
}

static void test_schedule(void) {
    tr_optim_cfg c = {.lr = 1.0, .warmup = 4, .total = 12, .min_lr_frac = 0.1};
    CHECK(sp_tr_lr_at(&c, 1) == 0.25 && sp_tr_lr_at(&c, 4) == 1.0, "warm-up: %g %g", sp_tr_lr_at(&c, 1), sp_tr_lr_at(&c, 4));
    CHECK(fabs(sp_tr_lr_at(&c, 8) - 0.55) < 1e-12 && fabs(sp_tr_lr_at(&c, 12) - 0.1) < 1e-15, "cosine: %.17g %.17g",
          sp_tr_lr_at(&c, 8), sp_tr_lr_at(&c, 12));
    CHECK(sp_tr_lr_at(&c, 5) < 1.0 && sp_tr_lr_at(&c, 5) > sp_tr_lr_at(&c, 6), "decay after the peak");
    c.min_lr_frac = 0;
    CHECK(sp_tr_lr_at(&c, 12) == 0 && sp_tr_lr_at(&c, 10) == 1.0 * 0.5 * (1 + cos(M_PI * 0.75)), "floor 0: %g",
          sp_tr_lr_at(&c, 12));
    CHECK(sp_tr_warmup_default(100) == 4 && sp_tr_warmup_default(12) == 1 && sp_tr_warmup_default(30) == 2, "default warm-up");
}

static void test_resume_identical(void) {
    sp_err err;
    toy a, b, k;
    tr_loop_result ra, rb, rk;
    toy_init(&a), toy_init(&b), toy_init(&k);
    CHECK(toy_run(&a, toy_cfg(NULL), "a", &ra, &err) == 0 && ra.step == 12, "%s", err.msg);
    CHECK(a.evals == 3 && ra.loss_first > ra.loss_last, "evals %d (steps 5, 10, 12), loss %g -> %g", a.evals,
          ra.loss_first, ra.loss_last);
    /* stopped after step 6 (a checkpoint), resumed */
    tr_loop_cfg c = toy_cfg(NULL);
    c.stop_at = 6;
    CHECK(toy_run(&b, c, "b", &rb, &err) == 0 && rb.step == 6, "%s (step %ld)", err.msg, rb.step);
    toy_init(&b);
    c.stop_at = 0;
    c.resume = 1;
    CHECK(toy_run(&b, c, "b", &rb, &err) == 0 && rb.step0 == 6 && rb.step == 12, "%s", err.msg);
    CHECK(!memcmp(a.w, b.w, sizeof a.w), "stop + resume: weights differ");
    /* ended after step 7 without a save (a kill; the checkpoint is step 4), a torn log line */
    c = toy_cfg(NULL);
    c.kill_after = 7;
    CHECK(toy_run(&k, c, "k", &rk, &err) == 0 && rk.step == 7, "%s", err.msg);
    char p[512];
    snprintf(p, sizeof p, "%s/k/train_log.csv", root);
    FILE *f = fopen(p, "a");
    if (f) fputs("8,0.12", f), fclose(f);
    toy_init(&k);
    c.kill_after = 0;
    c.resume = 1;
    CHECK(toy_run(&k, c, "k", &rk, &err) == 0 && rk.step0 == 4 && rk.step == 12, "%s (from %ld)", err.msg, rk.step0);
    CHECK(!memcmp(a.w, k.w, sizeof a.w), "kill + resume: weights differ");
    const char *names[] = {"b", "k"};
    char *la = read_text("a", "train_log.csv"), *lm = read_text("a", "model.txt");
    for (int i = 0; i < 2; i++) {
        char *lb = read_text(names[i], "train_log.csv"), *mb = read_text(names[i], "model.txt");
        CHECK(la && lb && !strcmp(la, lb), "%s: log differs:\n%s\nvs\n%s", names[i], la, lb);
        CHECK(lm && mb && !strcmp(lm, mb), "%s: model.txt differs", names[i]);
        free(lb), free(mb);
    }
    free(la), free(lm);
    char *st = read_text("k", "trainer_state.json");
    json_t *j = st ? json_loads(st, 0, NULL) : NULL;
    CHECK(j && json_integer_value(json_object_get(j, "step")) == 12 && json_is_true(json_object_get(j, "toy")) &&
              json_integer_value(json_object_get(j, "warmup")) == 3,
          "trainer_state.json: %s", st ? st : "missing");
    json_decref(j);
    free(st);
    /* other settings: refused, naming both */
    c.run = "toy v=2";
    CHECK(toy_run(&k, c, "k", &rk, &err) != 0 && strstr(err.msg, "other settings") && strstr(err.msg, "toy v=1"),
          "other run string: %s", err.msg);
}

static void test_errors(void) {
    sp_err err;
    toy t;
    tr_loop_result r;
    toy_init(&t);
    t.nan_at = 5;
    tr_loop_cfg c = toy_cfg(NULL);
    c.save_every = 2;
    CHECK(toy_run(&t, c, "nan", &r, &err) != 0 && strstr(err.msg, "step 5") && strstr(err.msg, "diverged"),
          "NaN loss: %s", err.msg);
    char *st = read_text("nan", "trainer_state.json");
    CHECK(st && strstr(st, "\"step\": 4"), "the last checkpoint (step 4) kept: %s", st ? st : "missing");
    free(st);
    toy_init(&t);
    c = toy_cfg(NULL);
    c.resume = c.resume_needs_checkpoint = 1;
    CHECK(toy_run(&t, c, "none", &r, &err) != 0 && strstr(err.msg, "no checkpoint"), "resume of nothing: %s", err.msg);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/specula_test_train_loop_%d", (int)getpid());
    sp_err err;
    if (sp_mkdir_p(root, &err)) {
        printf("FAIL cannot make %s: %s\n", root, err.msg);
        return 1;
    }
    RUN(test_schedule);
    RUN(test_resume_identical);
    RUN(test_errors);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_loop");
}
