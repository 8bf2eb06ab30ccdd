/* loop.c — the one training loop (see loop.h): steps, schedule, clipping, AdamW, evaluation
 * and checkpoint cadence, resume, the CSV log and the progress bar. */
#include "train/loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/progress.h"
#include "train/trainlog.h"

typedef struct {
    const tr_loop_cfg *c;
    const tr_loop_params *p;
    const tr_loop_ops *ops;
    void *ctx;
    float *grad, *m, *v; /* [n] gradient and AdamW moments */
    FILE *log;           /* rank 0's log; NULL on the other ranks */
    char log_path[4096];
    int rank;
    long step0;          /* the step resumed from */
} loop_state;

static int rank_of(const tr_dist *d) { return d ? d->rank : 0; }

/* resume from OUT's optimizer file when asked and present; else a fresh start (rank 0 makes OUT) */
static int loop_resume(loop_state *s, long *step0, sp_err *err) {
    const tr_loop_cfg *c = s->c;
    char path[4096];
    sp_path_join(path, sizeof path, c->out_dir, "optimizer.safetensors");
    *step0 = 0;
    if (c->resume && sp_file_exists(path)) {
        const tr_loop_params *p = s->p;
        if (sp_tr_optimizer_load(c->out_dir, p->t, p->nt, p->w, s->m, s->v, step0, c->run, err)) return -1;
        if (*step0 > c->oc.total)
            return sp_err_set(err, "%s: step %ld is past this run's %ld steps", path, *step0, c->oc.total);
        sp_log(SP_LOG_INFO, "train: resuming %s at step %ld", c->out_dir, *step0);
        return 0;
    }
    if (c->resume && c->resume_needs_checkpoint)
        return sp_err_set(err, "--resume: %s: no checkpoint to resume from", path);
    /* no checkpoint: a run killed before its first one left its log, and starts over; without
     * even that, nothing was ever started here (a mistyped directory) */
    char log[4096];
    if (c->log_path) snprintf(log, sizeof log, "%s", c->log_path);
    else sp_path_join(log, sizeof log, c->out_dir, "train_log.csv");
    if (c->resume && !sp_file_exists(log))
        return sp_err_set(err, "--resume: %s: no checkpoint to resume from, and no run was started there (no %s); "
                               "leave out --resume to start one", path, log);
    return s->rank == 0 ? sp_mkdir_p(c->out_dir, err) : 0;
}

/* rank 0: the log cut back to step0's rows (a torn last line dropped) and opened for appending,
 * or started with its header */
static int loop_open_log(loop_state *s, long step0, sp_err *err) {
    const tr_loop_cfg *c = s->c;
    if (s->rank != 0) return 0;
    if (c->log_path) snprintf(s->log_path, sizeof s->log_path, "%s", c->log_path);
    else sp_path_join(s->log_path, sizeof s->log_path, c->out_dir, "train_log.csv");
    if (step0 > 0 && sp_tr_log_truncate(s->log_path, step0, err)) return -1;
    s->log = fopen(s->log_path, step0 > 0 && sp_file_exists(s->log_path) ? "a" : "w");
    if (!s->log) return sp_err_set(err, "%s: cannot open the log for writing", s->log_path);
    if (ftell(s->log) == 0) fputs(c->log_header, s->log);
    return 0;
}

static void loop_log(loop_state *s, const tr_loop_row *r) {
    if (!s->log) return;
    s->ops->log_row(s->ctx, s->log, r);
    fflush(s->log);
}

/* trainer_state.json: the loop's fields and the trainer's (informative; resume reads the
 * optimizer file) */
static int loop_write_state(loop_state *s, long step, sp_err *err) {
    const tr_optim_cfg *oc = &s->c->oc;
    json_t *j = json_pack("{s:I, s:I, s:f, s:I, s:f}", "step", (json_int_t)step, "total_steps",
                          (json_int_t)oc->total, "lr", oc->lr, "warmup", (json_int_t)oc->warmup, "min_lr_frac",
                          oc->min_lr_frac);
    int bad = !j || (s->ops->state && s->ops->state(s->ctx, j));
    char *text = bad ? NULL : json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    if (!text) return sp_err_set(err, "trainer_state.json: out of memory");
    char path[4096];
    sp_path_join(path, sizeof path, s->c->out_dir, "trainer_state.json");
    int rc = sp_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* rank 0: the model files, trainer_state.json, then the optimizer file (last) */
static int loop_save(loop_state *s, long step, sp_err *err) {
    const tr_loop_params *p = s->p;
    if (s->rank != 0) return 0;
    for (size_t i = 0; i < p->n; i++)
        if (!isfinite(p->w[i]))
            return sp_err_set(err, "step %ld: parameter %zu is %g: training diverged (lower --lr); the last "
                                   "checkpoint is kept", step, i, p->w[i]);
    if (sp_mkdir_p(s->c->out_dir, err) || s->ops->export_model(s->ctx, s->c->out_dir, err) ||
        loop_write_state(s, step, err))
        return -1;
    return sp_tr_optimizer_save(s->c->out_dir, p->t, p->nt, p->w, s->m, s->v, step, s->c->run, err);
}

/* one optimizer step: loss + gradient, sums over ranks, clipping, schedule, AdamW */
static int loop_step(loop_state *s, long step, tr_loop_row *r, sp_err *err) {
    const tr_loop_cfg *c = s->c;
    const tr_loop_params *p = s->p;
    double t0 = sp_time_ms();
    memset(r, 0, sizeof *r);
    r->step = step;
    r->step0 = s->step0;
    memset(s->grad, 0, sizeof(float) * p->n);
    s->ops->step(s->ctx, step, s->grad, r->stats);
    sp_tr_dist_sum_f64(c->dist, r->stats, (size_t)c->n_stats);
    sp_tr_dist_sum_f32(c->dist, s->grad, p->n);
    r->grad_norm = sp_tr_clip_grad(s->grad, p->n, c->oc.clip);
    if (!isfinite(r->stats[0]) || !isfinite(r->grad_norm))
        return sp_err_set(err, "step %ld: loss %g, gradient norm %g: training diverged (lower --lr); nothing "
                               "saved after the last checkpoint", step, r->stats[0], r->grad_norm);
    r->lr = sp_tr_lr_at(&c->oc, step);
    if (s->ops->update) s->ops->update(s->ctx, p->w, s->grad, s->m, s->v, step, r->lr, &c->oc);
    else sp_tr_adamw_step(p->w, s->grad, s->m, s->v, p->n, step, r->lr, &c->oc);
    r->step_ms = sp_time_ms() - t0;
    return 0;
}

/* the steps after step0; stops at total, stop_at, kill_after or the time limit */
static int loop_steps(loop_state *s, long step0, tr_loop_result *res, sp_err *err) {
    const tr_loop_cfg *c = s->c;
    long total = c->oc.total;
    sp_progress pr;
    int show = c->progress && s->rank == 0;
    if (show) sp_progress_start(&pr, c->progress, (double)total, "step");
    double t_start = sp_time_ms();
    for (long step = step0 + 1; step <= total; step++) {
        tr_loop_row r;
        if (loop_step(s, step, &r, err)) return -1;
        res->train_ms += r.step_ms;
        r.train_ms = res->train_ms;
        if (step == step0 + 1) res->loss_first = r.stats[0];
        res->loss_last = r.stats[0];
        res->step = step;
        r.evaluated = step == total || (c->eval_every > 0 && step % c->eval_every == 0);
        int ev = r.evaluated ? s->ops->eval(s->ctx, step, err) : 0;
        if (ev < 0) return -1;
        r.elapsed_ms = sp_time_ms() - t_start;
        loop_log(s, &r);
        if (show) {
            char extra[128] = "";
            if (s->ops->progress_text) s->ops->progress_text(s->ctx, extra, sizeof extra, &r);
            sp_progress_update(&pr, (double)step, extra);
        }
        int out_of_time = c->time_limit_s > 0 && r.elapsed_ms >= 1000 * c->time_limit_s;
        int stop = out_of_time || step == c->stop_at || ev > 0;
        if ((step == total || stop || (c->save_every > 0 && step % c->save_every == 0)) && loop_save(s, step, err))
            return -1;
        if (stop || (c->kill_after > 0 && step - step0 >= c->kill_after)) break;
    }
    if (show) sp_progress_finish(&pr, (double)res->step, NULL);
    return 0;
}

int sp_tr_loop_run(const tr_loop_cfg *c, const tr_loop_params *p, const tr_loop_ops *ops, void *ctx,
                tr_loop_result *res, sp_err *err) {
    memset(res, 0, sizeof *res);
    if (c->n_stats < 1 || c->n_stats > TR_LOOP_MAX_STATS) return sp_err_set(err, "train: %d loss terms", c->n_stats);
    loop_state s = {.c = c, .p = p, .ops = ops, .ctx = ctx, .rank = rank_of(c->dist)};
    s.grad = calloc(p->n, sizeof(float));
    s.m = calloc(p->n, sizeof(float));
    s.v = calloc(p->n, sizeof(float));
    int rc = -1;
    long step0 = 0;
    if (!s.grad || !s.m || !s.v) {
        sp_err_set(err, "train: out of memory for %zu parameters", p->n);
        goto out;
    }
    if (loop_resume(&s, &step0, err) || loop_open_log(&s, step0, err)) goto out;
    s.step0 = res->step0 = res->step = step0; /* a finished run resumed again runs no step and stays at its last one */
    if (c->eval_at_start) {
        if (ops->eval(ctx, 0, err) < 0) goto out;
        tr_loop_row r0 = {.step = 0, .evaluated = 1};
        if (step0 == 0) loop_log(&s, &r0);
    }
    rc = loop_steps(&s, step0, res, err);
out:
    if (s.log) { /* a log that could not be written fails the run */
        int bad = ferror(s.log);
        if (fclose(s.log) != 0) bad = 1;
        if (bad && rc == 0) rc = sp_err_set(err, "%s: cannot write the training log", s.log_path);
    }
    free(s.grad);
    free(s.m);
    free(s.v);
    return rc;
}
