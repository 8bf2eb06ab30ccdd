/* lm_train.c — the target-LM trainer (see lm_train.h): data, evaluation, export, and the
 * callbacks of the training loop (loop.h: schedule, AdamW, checkpoints, resume, log). The
 * training step itself is sp_lm_forward / sp_lm_backward (lm.h). */
#include "train/lm_train.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/progress.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "train/loop.h"

void sp_lm_train_defaults(lm_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->steps = 1000;
    o->batch = 8;
    o->seq = 256;
    o->warmup = -1; /* resolved: 4 % of the steps (sp_tr_warmup_default) */
    o->lr = 1e-3;
    o->min_lr_frac = 0.1;
    o->weight_decay = 0.1;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->adam_eps = 1e-8;
    o->clip = 1.0;
    o->seed = 1234;
    o->eval_seqs = 64;
    o->dtype = SP_DT_BF16;
}

long sp_lm_warmup_steps(const lm_train_opts *o) { return o->warmup >= 0 ? o->warmup : sp_tr_warmup_default(o->steps); }

/* ---- data -------------------------------------------------------------------------------- */
typedef struct {
    int32_t *tok;
    int64_t n, cap;
} tok_buf;

static int tokenize_files(tok_tokenizer *tk, const char *const *files, int n_files, tok_buf *out,
                          const char *what, int quiet, sp_err *err) {
    int eos = sp_tok_eos(tk);
    if (eos < 0) return sp_err_set(err, "train-lm: the tokenizer has no EOS token (needed between files)");
    sp_progress pr;
    if (!quiet) sp_progress_start(&pr, what, n_files, "files");
    for (int i = 0; i < n_files; i++) {
        char *text;
        size_t len;
        if (sp_read_file(files[i], &text, &len, err)) return -1;
        int32_t *ids;
        int n;
        int rc = sp_tok_encode(tk, text, len, 0, 0, &ids, &n, err);
        free(text);
        if (rc) return sp_err_wrap(err, "tokenizing %s", files[i]);
        if (out->n + n + 1 > out->cap) {
            int64_t cap = (out->cap ? out->cap * 2 : 1 << 20);
            while (cap < out->n + n + 1) cap *= 2;
            int32_t *p = realloc(out->tok, (size_t)cap * sizeof *p);
            if (!p) {
                free(ids);
                return sp_err_set(err, "train-lm: out of memory for %lld tokens", (long long)cap);
            }
            out->tok = p;
            out->cap = cap;
        }
        memcpy(out->tok + out->n, ids, (size_t)n * sizeof *ids);
        out->n += n;
        out->tok[out->n++] = eos;
        free(ids);
        if (!quiet) sp_progress_update(&pr, i + 1, NULL);
    }
    if (!quiet) {
        char extra[64];
        snprintf(extra, sizeof extra, "%lld tokens", (long long)out->n);
        sp_progress_finish(&pr, n_files, extra);
    }
    return 0;
}

/* sequence: [BOS, s[o] .. s[o+T-2]], labels s[o] .. s[o+T-1] */
static void make_seq(const tok_buf *s, int64_t o, int T, int bos, int32_t *tokens, int32_t *labels) {
    tokens[0] = bos;
    for (int t = 1; t < T; t++) tokens[t] = s->tok[o + t - 1];
    for (int t = 0; t < T; t++) labels[t] = s->tok[o + t];
}

static void train_batch(const tok_buf *s, const lm_train_opts *o, int step, int bos, int32_t *tokens,
                        int32_t *labels) {
    int T = o->seq;
    uint64_t span = (uint64_t)(s->n - T + 1);
    for (int b = 0; b < o->batch; b++) {
        int64_t off = (int64_t)(sp_rng_u64(o->seed, 11, (uint64_t)step * o->batch + b) % span);
        make_seq(s, off, T, bos, tokens + (size_t)b * T, labels + (size_t)b * T);
    }
}

/* ---- export / checkpoints ---------------------------------------------------------------- */
static int copy_file(const char *src, const char *dst, sp_err *err) {
    char *buf;
    size_t n;
    if (sp_read_file(src, &buf, &n, err)) return -1;
    int rc = sp_write_file_atomic(dst, buf, n, err);
    free(buf);
    return rc;
}

int sp_lm_export(const char *dir, const lm_layout *lay, const float *w, const char *config_text, sp_dtype dtype,
              const char *tokenizer_path, sp_err *err) {
    char path[4096];
    if (sp_mkdir_p(dir, err)) return -1;
    st_writer *wr = sp_st_writer_create();
    if (!wr) return sp_err_set(err, "out of memory");
    uint16_t *half = NULL;
    int rc = 0;
    if (dtype == SP_DT_BF16) {
        half = malloc(lay->n * sizeof *half);
        if (!half) rc = sp_err_set(err, "out of memory converting %zu weights to bf16", lay->n);
        for (size_t j = 0; !rc && j < lay->n; j++) half[j] = sp_f32_to_bf16(w[j]);
    }
    for (int i = 0; !rc && i < lay->n_params; i++) {
        const hf_tensor_spec *s = &lay->specs[i];
        const void *data = half ? (const void *)(half + lay->off[i]) : (const void *)(w + lay->off[i]);
        rc = sp_st_writer_add_ref(wr, s->name, half ? SP_DT_BF16 : SP_DT_F32, s->ndim, s->shape, data, err);
    }
    if (!rc && sp_path_join(path, sizeof path, dir, "model.safetensors")) rc = sp_err_set(err, "path too long: %s", dir);
    if (!rc) rc = sp_st_writer_save(wr, path, err);
    sp_st_writer_free(wr);
    free(half);
    if (!rc) {
        sp_path_join(path, sizeof path, dir, "config.json");
        rc = sp_write_file_atomic(path, config_text, strlen(config_text), err);
    }
    if (!rc && tokenizer_path) {
        sp_path_join(path, sizeof path, dir, "tokenizer.json");
        rc = copy_file(tokenizer_path, path, err);
    }
    return rc;
}

/* ---- evaluation -------------------------------------------------------------------------- */
static double evaluate(sp_pool *pool, const lm_layout *lay, const float *w, lm_acts *a, const tok_buf *ev,
                       const lm_train_opts *o, int bos, int32_t *tokens, int32_t *labels) {
    int T = o->seq, B = o->batch;
    int64_t avail = (ev->n - 1) / T; /* windows [k·T, k·T+T] */
    int n_seq = (int)(avail < o->eval_seqs ? avail : o->eval_seqs);
    double sum = 0;
    int64_t cnt = 0;
    for (int s0 = 0; s0 < n_seq; s0 += B) {
        int nb = n_seq - s0 < B ? n_seq - s0 : B;
        for (int b = 0; b < nb; b++) make_seq(ev, (int64_t)(s0 + b) * T, T, bos, tokens + (size_t)b * T, labels + (size_t)b * T);
        sum += sp_lm_forward(pool, lay, w, a, tokens, labels, nb, T, NULL) * nb * T;
        cnt += (int64_t)nb * T;
    }
    return cnt ? sum / cnt : 0;
}

/* ---- the run: the training loop's callbacks (loop.h) --------------------------------------- */
typedef struct {
    const lm_train_opts *o;
    lm_train_result *res;
    char *config_text;
    lm_layout lay;
    tr_ckpt_tensor *tensors;   /* [lay.n_params] the optimizer file's table */
    tok_tokenizer *tk;
    tok_buf train, eval;
    int bos;
    sp_pool *pool;
    lm_acts *acts;
    float *w;                  /* [lay.n] weights */
    int32_t *tokens, *labels;  /* [batch·seq] */
} lm_run;

static void lm_run_free(lm_run *r) {
    free(r->tokens);
    free(r->labels);
    free(r->w);
    free(r->tensors);
    sp_lm_acts_free(r->acts);
    if (r->pool) sp_pool_free(r->pool);
    free(r->train.tok);
    free(r->eval.tok);
    if (r->tk) sp_tok_free(r->tk);
    sp_lm_layout_free(&r->lay);
    free(r->config_text);
}

/* sequence b of step s (1-based) starts at an offset drawn from (seed, s − 1, b) */
static void lm_step(void *ctx, long step, float *grad, double *stats) {
    lm_run *r = ctx;
    const lm_train_opts *o = r->o;
    train_batch(&r->train, o, (int)(step - 1), r->bos, r->tokens, r->labels);
    stats[0] = sp_lm_forward(r->pool, &r->lay, r->w, r->acts, r->tokens, r->labels, o->batch, o->seq, NULL);
    sp_lm_backward(r->pool, &r->lay, r->w, r->acts, grad);
}

static int lm_has_eval(const lm_run *r) { return r->eval.n > r->o->seq; }

static int lm_eval(void *ctx, long step, sp_err *err) {
    (void)step, (void)err;
    lm_run *r = ctx;
    if (!lm_has_eval(r)) return 0;
    r->res->eval_loss = evaluate(r->pool, &r->lay, r->w, r->acts, &r->eval, r->o, r->bos, r->tokens, r->labels);
    r->res->eval_ppl = exp(r->res->eval_loss);
    return 0;
}

/* step,loss,lr,grad_norm,tokens_per_s,eval_loss,eval_ppl (tokens_per_s: this run's, since it started) */
static void lm_log_row(void *ctx, FILE *f, const tr_loop_row *w) {
    lm_run *r = ctx;
    const lm_train_opts *o = r->o;
    double el = w->elapsed_ms / 1000, tps = el > 0 ? (double)(w->step - w->step0) * o->batch * o->seq / el : 0;
    fprintf(f, "%ld,%.6f,%.6g,%.4f,%.1f", w->step, w->stats[0], w->lr, w->grad_norm, tps);
    if (w->evaluated && lm_has_eval(r)) fprintf(f, ",%.6f,%.4f\n", r->res->eval_loss, r->res->eval_ppl);
    else fprintf(f, ",,\n");
}

static void lm_progress_text(void *ctx, char *buf, size_t n, const tr_loop_row *w) {
    lm_run *r = ctx;
    snprintf(buf, n, "loss %.4f lr %.2e%s", w->stats[0], w->lr, w->evaluated && lm_has_eval(r) ? " (eval)" : "");
}

/* OUT/config.json, model.safetensors (the export dtype), tokenizer.json */
static int lm_export_model(void *ctx, const char *dir, sp_err *err) {
    lm_run *r = ctx;
    return sp_lm_export(dir, &r->lay, r->w, r->config_text, r->o->dtype, r->o->tokenizer_path, err);
}

static int lm_state(void *ctx, json_t *j) {
    lm_run *r = ctx;
    const lm_train_opts *o = r->o;
    json_t *more = json_pack("{s:I, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:s}", "seed", (json_int_t)o->seed, "batch",
                             o->batch, "seq", o->seq, "weight_decay", o->weight_decay, "beta1", o->beta1, "beta2",
                             o->beta2, "adam_eps", o->adam_eps, "clip", o->clip, "format", "specula-train-lm-2");
    int rc = more ? json_object_update(j, more) : -1;
    json_decref(more);
    return rc;
}

/* AdamW per tensor: weight decay on matrices only, frozen tensors (layer_scalar) skipped */
static void lm_update(void *ctx, float *w, const float *g, float *m, float *v, long step, double lr,
                      const tr_optim_cfg *oc) {
    lm_run *r = ctx;
    tr_optim_cfg c = *oc;
    for (int i = 0; i < r->lay.n_params; i++) {
        if (!sp_lm_param_trained(&r->lay, i)) continue;
        size_t off = r->tensors[i].off, n = r->tensors[i].n;
        c.weight_decay = sp_lm_param_decayed(&r->lay, i) ? oc->weight_decay : 0;
        sp_tr_adamw_step(w + off, g + off, m + off, v + off, n, step, lr, &c);
    }
}

/* ---- setup ------------------------------------------------------------------------------- */
/* the config, its layout, the tokenizer (BOS / EOS as the config's) and the tokenized files */
static int lm_load_inputs(lm_run *r, sp_err *err) {
    const lm_train_opts *o = r->o;
    size_t clen;
    sp_config cfg;
    if (sp_read_file(o->config_path, &r->config_text, &clen, err) ||
        sp_config_parse(&cfg, r->config_text, o->config_path, err) || sp_lm_layout_init(&r->lay, &cfg, o->dtype, err))
        return -1;
    if (!(r->tk = sp_tok_load_json(o->tokenizer_path, err))) return -1;
    if (sp_tok_vocab_size(r->tk) > cfg.vocab_size)
        return sp_err_set(err, "train-lm: tokenizer %s has %d ids but the config's vocab_size is %d",
                          o->tokenizer_path, sp_tok_vocab_size(r->tk), cfg.vocab_size);
    r->bos = sp_tok_bos(r->tk);
    if (r->bos < 0 || r->bos != cfg.bos_id)
        return sp_err_set(err, "train-lm: tokenizer BOS %d differs from the config's bos_token_id %d", r->bos,
                          cfg.bos_id);
    int eos_ok = 0;
    for (int i = 0; i < cfg.n_eos; i++) eos_ok |= cfg.eos_ids[i] == sp_tok_eos(r->tk);
    if (!eos_ok)
        return sp_err_set(err, "train-lm: tokenizer EOS %d is not among the config's eos_token_id", sp_tok_eos(r->tk));
    if (tokenize_files(r->tk, o->data, o->n_data, &r->train, "tokenize train", o->quiet, err) ||
        tokenize_files(r->tk, o->eval, o->n_eval, &r->eval, "tokenize eval", o->quiet, err))
        return -1;
    if (r->train.n < o->seq)
        return sp_err_set(err, "train-lm: %lld training tokens, fewer than one sequence of %d",
                          (long long)r->train.n, o->seq);
    return 0;
}

/* threads, activations, weights (initialised; resume overwrites them), batch buffers, the
 * optimizer file's tensor table */
static int lm_alloc(lm_run *r, sp_err *err) {
    const lm_train_opts *o = r->o;
    const lm_layout *lay = &r->lay;
    if (o->n_threads > sp_pool_max_threads())
        return sp_err_set(err, "train-lm: threads: %d asked, at most %d allowed (%d per online CPU)", o->n_threads,
                          sp_pool_max_threads(), SP_POOL_THREADS_PER_CPU);
    if (!(r->pool = sp_pool_create(o->n_threads))) return sp_err_set(err, "train-lm: cannot start %d threads", o->n_threads);
    r->acts = sp_lm_acts_create(lay, o->batch, o->seq, err);
    if (!r->acts) return -1;
    r->w = malloc(lay->n * sizeof *r->w);
    r->tokens = malloc((size_t)o->batch * o->seq * sizeof *r->tokens);
    r->labels = malloc((size_t)o->batch * o->seq * sizeof *r->labels);
    r->tensors = malloc((size_t)lay->n_params * sizeof *r->tensors);
    if (!r->w || !r->tokens || !r->labels || !r->tensors)
        return sp_err_set(err, "train-lm: out of memory for %zu parameters", lay->n);
    for (int i = 0; i < lay->n_params; i++) {
        const hf_tensor_spec *s = &lay->specs[i];
        size_t n = (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1);
        r->tensors[i] = (tr_ckpt_tensor){.name = s->name, .ndim = s->ndim, .shape = s->shape, .off = lay->off[i], .n = n};
    }
    sp_lm_init_weights(lay, r->w, o->seed);
    return 0;
}

static tr_loop_cfg lm_loop_cfg(const lm_train_opts *o, char *run, size_t n) {
    snprintf(run, n, "train-lm seed=%llu batch=%d seq=%d", (unsigned long long)o->seed, o->batch, o->seq);
    return (tr_loop_cfg){.oc = {.lr = o->lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->adam_eps,
                                .weight_decay = o->weight_decay, .warmup = sp_lm_warmup_steps(o), .total = o->steps,
                                .min_lr_frac = o->min_lr_frac, .clip = o->clip},
                         .n_stats = 1, .out_dir = o->out_dir,
                         .log_header = "step,loss,lr,grad_norm,tokens_per_s,eval_loss,eval_ppl\n", .run = run,
                         .resume = o->resume, .resume_needs_checkpoint = 1, .save_every = o->save_every,
                         .eval_every = o->eval_every, .stop_at = o->stop_after, .time_limit_s = o->time_limit_s,
                         .progress = o->quiet ? NULL : "train-lm"};
}

int sp_lm_train_run(const lm_train_opts *o, lm_train_result *res, sp_err *err) {
    memset(res, 0, sizeof *res);
    if (o->steps < 1 || o->batch < 1 || o->seq < 2 || o->lr <= 0)
        return sp_err_set(err, "train-lm: need steps >= 1, batch >= 1, seq >= 2, lr > 0");
    if (!o->n_data) return sp_err_set(err, "train-lm: no training files");
    lm_run r = {.o = o, .res = res};
    int rc = -1;
    if (lm_load_inputs(&r, err) || lm_alloc(&r, err)) goto done;
    res->train_tokens = r.train.n;
    res->eval_tokens = r.eval.n;
    res->n_params = r.lay.n;
    char run[256];
    tr_loop_cfg lc = lm_loop_cfg(o, run, sizeof run);
    tr_loop_params p = {.w = r.w, .n = r.lay.n, .t = r.tensors, .nt = r.lay.n_params};
    tr_loop_ops ops = {.step = lm_step, .eval = lm_eval, .log_row = lm_log_row, .progress_text = lm_progress_text,
                       .export_model = lm_export_model, .state = lm_state, .update = lm_update};
    tr_loop_result lr;
    rc = sp_tr_loop_run(&lc, &p, &ops, &r, &lr, err);
    res->step = (int)lr.step;
    res->first_loss = lr.loss_first;
    res->last_loss = lr.loss_last;
    res->tokens_per_s = (double)(lr.step - lr.step0) * o->batch * o->seq / (lr.train_ms / 1000 + 1e-9);
done:
    lm_run_free(&r);
    return rc;
}
