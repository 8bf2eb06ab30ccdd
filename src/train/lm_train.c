/* lm_train.c — the target-LM trainer (see lm_train.h): data, AdamW, schedule, checkpoints,
 * resume, evaluation, export. The training step itself is lm_forward / lm_backward (lm.h). */
#include "train/lm_train.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "core/progress.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "train/optim.h"
#include "train/trainlog.h"

void lm_train_defaults(lm_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->steps = 1000;
    o->batch = 8;
    o->seq = 256;
    o->warmup = -1; /* resolved: min(100, steps / 10) */
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

static int warmup_steps(const lm_train_opts *o) {
    if (o->warmup >= 0) return o->warmup;
    int w = o->steps / 10;
    return w < 100 ? w : 100;
}

double lm_lr_at(const lm_train_opts *o, int s) {
    int W = warmup_steps(o);
    if (s < W) return o->lr * (s + 1) / W;
    double span = o->steps - W;
    double t = span > 0 ? (s - W) / span : 1.0;
    if (t > 1) t = 1;
    double min_lr = o->lr * o->min_lr_frac;
    return min_lr + 0.5 * (o->lr - min_lr) * (1 + cos(M_PI * t));
}

/* ---- data -------------------------------------------------------------------------------- */
typedef struct {
    int32_t *tok;
    int64_t n, cap;
} tok_buf;

static int tokenize_files(tok_tokenizer *tk, const char *const *files, int n_files, tok_buf *out,
                          const char *what, int quiet, sp_err *err) {
    int eos = tok_eos(tk);
    if (eos < 0) return sp_err_set(err, "train-lm: the tokenizer has no EOS token (needed between files)");
    sp_progress pr;
    if (!quiet) sp_progress_start(&pr, what, n_files, "files");
    for (int i = 0; i < n_files; i++) {
        char *text;
        size_t len;
        if (sp_read_file(files[i], &text, &len, err)) return -1;
        int32_t *ids;
        int n;
        int rc = tok_encode(tk, text, len, 0, 0, &ids, &n, err);
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

/* ---- AdamW: optim.h's tr_adamw_step per tensor (weight decay on matrices only; frozen
 * tensors skipped) ------------------------------------------------------------------------ */
static void adamw_step(const lm_layout *lay, float *w, const float *g, float *m, float *v, int t, double lr,
                       const lm_train_opts *o) {
    tr_optim_cfg c = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->adam_eps, .clip = o->clip};
    for (int i = 0; i < lay->n_params; i++) {
        if (!lm_param_trained(lay, i)) continue;
        const hf_tensor_spec *s = &lay->specs[i];
        size_t n = (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1), off = lay->off[i];
        c.weight_decay = lm_param_decayed(lay, i) ? o->weight_decay : 0;
        tr_adamw_step(w + off, g + off, m + off, v + off, n, t, lr, &c);
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

static size_t param_count(const hf_tensor_spec *s) {
    return (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1);
}

int lm_export(const char *dir, const lm_layout *lay, const float *w, const char *config_text, sp_dtype dtype,
              const char *tokenizer_path, sp_err *err) {
    char path[4096];
    if (sp_mkdir_p(dir, err)) return -1;
    st_writer *wr = st_writer_create();
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
        rc = st_writer_add_ref(wr, s->name, half ? SP_DT_BF16 : SP_DT_F32, s->ndim, s->shape, data, err);
    }
    if (!rc && sp_path_join(path, sizeof path, dir, "model.safetensors")) rc = sp_err_set(err, "path too long: %s", dir);
    if (!rc) rc = st_writer_save(wr, path, err);
    st_writer_free(wr);
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

/* a safetensors file of parameter-shaped arrays: names NAME + suffix */
static int save_params(const char *path, const lm_layout *lay, const float *const *arrays, const char *const *suffix,
                       int n_arrays, sp_err *err) {
    st_writer *wr = st_writer_create();
    if (!wr) return sp_err_set(err, "out of memory");
    int rc = 0;
    char nm[200];
    for (int a = 0; a < n_arrays && !rc; a++)
        for (int i = 0; i < lay->n_params && !rc; i++) {
            snprintf(nm, sizeof nm, "%s%s", lay->specs[i].name, suffix[a]);
            rc = st_writer_add_ref(wr, nm, SP_DT_F32, lay->specs[i].ndim, lay->specs[i].shape,
                                   arrays[a] + lay->off[i], err);
        }
    if (!rc) rc = st_writer_save(wr, path, err);
    st_writer_free(wr);
    return rc;
}

static int load_params(const char *path, const lm_layout *lay, float *const *arrays, const char *const *suffix,
                       int n_arrays, sp_err *err) {
    st_set *st;
    if (st_open_file(&st, path, err)) return -1;
    int rc = 0;
    char nm[200];
    for (int a = 0; a < n_arrays && !rc; a++)
        for (int i = 0; i < lay->n_params && !rc; i++) {
            const st_tensor *t;
            snprintf(nm, sizeof nm, "%s%s", lay->specs[i].name, suffix[a]);
            rc = st_get(st, nm, SP_DT_F32, lay->specs[i].ndim, lay->specs[i].shape, &t, err);
            if (!rc) memcpy(arrays[a] + lay->off[i], t->data, param_count(&lay->specs[i]) * sizeof(float));
        }
    st_close(st);
    return rc;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[8400];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

typedef struct {
    const lm_train_opts *o;
    const lm_layout *lay;
    const char *config_text;
    float *w, *m, *v;
} trainer;

static char *state_json(const trainer *tr, int step, double loss) {
    const lm_train_opts *o = tr->o;
    json_t *j = json_pack("{s:i, s:I, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:s}",
                          "step", step, "seed", (json_int_t)o->seed, "steps", o->steps, "batch", o->batch, "seq",
                          o->seq, "warmup", warmup_steps(o), "lr", o->lr, "min_lr_frac", o->min_lr_frac,
                          "weight_decay", o->weight_decay, "beta1", o->beta1, "beta2", o->beta2, "adam_eps",
                          o->adam_eps, "clip", o->clip, "loss", loss, "tokens_seen",
                          (json_int_t)step * o->batch * o->seq, "format", "specula-train-lm-1");
    char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    json_decref(j);
    return s;
}

static int save_checkpoint(const trainer *tr, int step, double loss, sp_err *err) {
    const lm_train_opts *o = tr->o;
    char dir[4096], path[4200], name[64], prev[256] = "";
    snprintf(name, sizeof name, "checkpoint-%08d", step);
    if (sp_path_join(dir, sizeof dir, o->out_dir, name)) return sp_err_set(err, "path too long: %s", o->out_dir);
    if (sp_mkdir_p(dir, err)) return -1;
    const float *wa[] = {tr->w};
    const char *ws[] = {""};
    const float *ma[] = {tr->m, tr->v};
    const char *ms[] = {".exp_avg", ".exp_avg_sq"};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (save_params(path, tr->lay, wa, ws, 1, err)) return -1;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (save_params(path, tr->lay, ma, ms, 2, err)) return -1;
    char *js = state_json(tr, step, loss);
    if (!js) return sp_err_set(err, "out of memory");
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    int rc = sp_write_file_atomic(path, js, strlen(js), err);
    free(js);
    if (rc) return -1;
    /* the checkpoint is complete: point latest_checkpoint at it, then drop the previous one */
    snprintf(path, sizeof path, "%s/latest_checkpoint", o->out_dir);
    char *old;
    size_t n;
    sp_err e2;
    if (!sp_read_file(path, &old, &n, &e2)) {
        snprintf(prev, sizeof prev, "%.*s", (int)strcspn(old, "\n"), old);
        free(old);
    }
    char line[80];
    snprintf(line, sizeof line, "%s\n", name);
    if (sp_write_file_atomic(path, line, strlen(line), err)) return -1;
    if (prev[0] && strcmp(prev, name) && !strncmp(prev, "checkpoint-", 11)) {
        snprintf(path, sizeof path, "%s/%s", o->out_dir, prev);
        remove_dir(path);
    }
    return lm_export(o->out_dir, tr->lay, tr->w, tr->config_text, o->dtype, o->tokenizer_path, err);
}

static int load_checkpoint(trainer *tr, int *step, sp_err *err) {
    const lm_train_opts *o = tr->o;
    char path[4400], name[256], *txt;
    size_t n;
    snprintf(path, sizeof path, "%s/latest_checkpoint", o->out_dir);
    if (sp_read_file(path, &txt, &n, err)) return sp_err_wrap(err, "--resume");
    snprintf(name, sizeof name, "%.*s", (int)strcspn(txt, "\n"), txt);
    free(txt);
    snprintf(path, sizeof path, "%s/%s/trainer_state.json", o->out_dir, name);
    json_error_t je;
    if (sp_check_regular(path, err)) return -1;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j) return sp_err_set(err, "%s: %s (line %d)", path, je.text, je.line);
    json_int_t s = json_integer_value(json_object_get(j, "step"));
    json_int_t seed = json_integer_value(json_object_get(j, "seed"));
    int batch = (int)json_integer_value(json_object_get(j, "batch")), seq = (int)json_integer_value(json_object_get(j, "seq"));
    json_decref(j);
    if ((uint64_t)seed != o->seed || batch != o->batch || seq != o->seq)
        return sp_err_set(err, "%s: saved with seed %lld, batch %d, seq %d; this run has seed %llu, batch %d, seq %d", path,
                          (long long)seed, batch, seq, (unsigned long long)o->seed, o->batch, o->seq);
    if (s < 0 || s > o->steps) return sp_err_set(err, "%s: step %lld outside 0..%d", path, (long long)s, o->steps);
    float *wa[] = {tr->w};
    const char *ws[] = {""};
    float *ma[] = {tr->m, tr->v};
    const char *ms[] = {".exp_avg", ".exp_avg_sq"};
    snprintf(path, sizeof path, "%s/%s/model.safetensors", o->out_dir, name);
    if (load_params(path, tr->lay, wa, ws, 1, err)) return -1;
    snprintf(path, sizeof path, "%s/%s/optimizer.safetensors", o->out_dir, name);
    if (load_params(path, tr->lay, ma, ms, 2, err)) return -1;
    *step = (int)s;
    return 0;
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
        sum += lm_forward(pool, lay, w, a, tokens, labels, nb, T, NULL) * nb * T;
        cnt += (int64_t)nb * T;
    }
    return cnt ? sum / cnt : 0;
}

/* ---- the run ----------------------------------------------------------------------------- */
int lm_train_run(const lm_train_opts *o, lm_train_result *res, sp_err *err) {
    memset(res, 0, sizeof *res);
    if (o->steps < 1 || o->batch < 1 || o->seq < 2 || o->lr <= 0)
        return sp_err_set(err, "train-lm: need steps >= 1, batch >= 1, seq >= 2, lr > 0");
    if (!o->n_data) return sp_err_set(err, "train-lm: no training files");
    char *config_text = NULL;
    size_t clen;
    sp_config cfg;
    lm_layout lay = {0};
    tok_tokenizer *tk = NULL;
    tok_buf tr_data = {0}, ev_data = {0};
    sp_pool *pool = NULL;
    lm_acts *acts = NULL;
    float *w = NULL, *g = NULL, *m = NULL, *v = NULL;
    int32_t *tokens = NULL, *labels = NULL;
    FILE *csv = NULL;
    int rc = -1;

    if (sp_read_file(o->config_path, &config_text, &clen, err) ||
        sp_config_parse(&cfg, config_text, o->config_path, err) || lm_layout_init(&lay, &cfg, o->dtype, err))
        goto done;
    if (!(tk = tok_load_json(o->tokenizer_path, err))) goto done;
    if (tok_vocab_size(tk) > cfg.vocab_size) {
        sp_err_set(err, "train-lm: tokenizer %s has %d ids but the config's vocab_size is %d", o->tokenizer_path,
                   tok_vocab_size(tk), cfg.vocab_size);
        goto done;
    }
    int bos = tok_bos(tk);
    if (bos < 0 || bos != cfg.bos_id) {
        sp_err_set(err, "train-lm: tokenizer BOS %d differs from the config's bos_token_id %d", bos, cfg.bos_id);
        goto done;
    }
    int eos_ok = 0;
    for (int i = 0; i < cfg.n_eos; i++) eos_ok |= cfg.eos_ids[i] == tok_eos(tk);
    if (!eos_ok) {
        sp_err_set(err, "train-lm: tokenizer EOS %d is not among the config's eos_token_id", tok_eos(tk));
        goto done;
    }
    if (tokenize_files(tk, o->data, o->n_data, &tr_data, "tokenize train", o->quiet, err) ||
        tokenize_files(tk, o->eval, o->n_eval, &ev_data, "tokenize eval", o->quiet, err))
        goto done;
    if (tr_data.n < o->seq) {
        sp_err_set(err, "train-lm: %lld training tokens, fewer than one sequence of %d", (long long)tr_data.n, o->seq);
        goto done;
    }
    res->train_tokens = tr_data.n;
    res->eval_tokens = ev_data.n;
    res->n_params = lay.n;

    if (o->n_threads > sp_pool_max_threads()) {
        sp_err_set(err, "train-lm: threads: %d asked, at most %d allowed (%d per online CPU)", o->n_threads,
                   sp_pool_max_threads(), SP_POOL_THREADS_PER_CPU);
        goto done;
    }
    pool = sp_pool_create(o->n_threads);
    acts = lm_acts_create(&lay, o->batch, o->seq, err);
    w = malloc(lay.n * sizeof *w);
    g = malloc(lay.n * sizeof *g);
    m = calloc(lay.n, sizeof *m);
    v = calloc(lay.n, sizeof *v);
    tokens = malloc((size_t)o->batch * o->seq * sizeof *tokens);
    labels = malloc((size_t)o->batch * o->seq * sizeof *labels);
    if (!pool || !acts || !w || !g || !m || !v || !tokens || !labels) {
        if (acts || !pool) sp_err_set(err, "train-lm: out of memory for %zu parameters", lay.n);
        goto done;
    }
    trainer tr = {o, &lay, config_text, w, m, v};
    int step = 0;
    if (o->resume) {
        if (load_checkpoint(&tr, &step, err)) goto done;
    } else {
        lm_init_weights(&lay, w, o->seed);
    }
    if (sp_mkdir_p(o->out_dir, err)) goto done;
    char path[4200];
    snprintf(path, sizeof path, "%s/train_log.csv", o->out_dir);
    int fresh = !o->resume || !sp_file_exists(path);
    if (!fresh && tr_log_truncate(path, step, err)) goto done;
    csv = fopen(path, fresh ? "w" : "a");
    if (!csv) {
        sp_err_set(err, "cannot open %s for writing", path);
        goto done;
    }
    if (fresh) fprintf(csv, "step,loss,lr,grad_norm,tokens_per_s,eval_loss,eval_ppl\n");

    sp_progress pr;
    int start = step, stop = o->stop_after > 0 && o->stop_after < o->steps ? o->stop_after : o->steps;
    if (!o->quiet) sp_progress_start(&pr, "train-lm", (double)(stop - start) * o->batch * o->seq, "tok");
    double t0 = sp_time_ms(), loss = 0;
    while (step < stop) {
        train_batch(&tr_data, o, step, bos, tokens, labels);
        loss = lm_forward(pool, &lay, w, acts, tokens, labels, o->batch, o->seq, NULL);
        memset(g, 0, lay.n * sizeof *g);
        lm_backward(pool, &lay, w, acts, g);
        double nrm = tr_clip_grad(g, lay.n, o->clip); /* frozen tensors have zero gradient */
        double lr = lm_lr_at(o, step);
        adamw_step(&lay, w, g, m, v, step + 1, lr, o);
        step++;
        if (step == start + 1) res->first_loss = loss;
        double el = (sp_time_ms() - t0) / 1000;
        double tps = el > 0 ? (double)(step - start) * o->batch * o->seq / el : 0;
        int do_eval = ev_data.n > o->seq && ((o->eval_every > 0 && step % o->eval_every == 0) || step == o->steps);
        if (do_eval) {
            res->eval_loss = evaluate(pool, &lay, w, acts, &ev_data, o, bos, tokens, labels);
            res->eval_ppl = exp(res->eval_loss);
            fprintf(csv, "%d,%.6f,%.6g,%.4f,%.1f,%.6f,%.4f\n", step, loss, lr, nrm, tps, res->eval_loss, res->eval_ppl);
        } else {
            fprintf(csv, "%d,%.6f,%.6g,%.4f,%.1f,,\n", step, loss, lr, nrm, tps);
        }
        fflush(csv);
        if (!o->quiet) {
            char extra[128];
            snprintf(extra, sizeof extra, "step %d/%d loss %.4f lr %.2e%s", step, o->steps, loss, lr,
                     do_eval ? " (eval)" : "");
            sp_progress_update(&pr, (double)(step - start) * o->batch * o->seq, extra);
        }
        int out_of_time = o->time_limit_s > 0 && el >= o->time_limit_s;
        if ((o->save_every > 0 && step % o->save_every == 0) || step == stop || out_of_time)
            if (save_checkpoint(&tr, step, loss, err)) goto done;
        res->tokens_per_s = tps;
        if (out_of_time) break;
    }
    if (!o->quiet) {
        char extra[96];
        snprintf(extra, sizeof extra, "loss %.4f", loss);
        sp_progress_finish(&pr, (double)(step - start) * o->batch * o->seq, extra);
    }
    res->step = step;
    res->last_loss = loss;
    rc = 0;
done:
    if (csv) fclose(csv);
    free(tokens);
    free(labels);
    free(w);
    free(g);
    free(m);
    free(v);
    lm_acts_free(acts);
    if (pool) sp_pool_free(pool);
    free(tr_data.tok);
    free(ev_data.tok);
    if (tk) tok_free(tk);
    lm_layout_free(&lay);
    free(config_text);
    return rc;
}
