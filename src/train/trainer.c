/* trainer.c — the training loop (see trainer.h). */
#include "train/trainer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/pool.h"
#include "core/progress.h"
#include "formats/config_json.h"
#include "formats/newdrafter.h"
#include "model/model.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/eagle3_train.h"
#include "train/optim.h"
#include "train/shards.h"
#include "train/trainlog.h"

tr_train_cfg tr_train_defaults(void) {
    tr_train_cfg c;
    memset(&c, 0, sizeof c);
    c.arch = TR_ARCH_DSPARK;
    c.epochs = 1;
    c.lr = 6e-4;
    c.warmup = -1;
    c.batch = 16;
    c.anchors_per_seq = TR_ANCHORS_PER_SEQ_DEFAULT;
    c.block = 7;
    c.layers = 5;
    c.markov_rank = 256;
    c.ctx = 512;
    c.gamma = 4.0;
    c.seed = 42;
    c.eval_blocks = 64;
    c.mask_id = -1;
    c.window = 64;
    return c;
}

/* the held-out monitor: a_k and τ over eval_n full blocks */
static void evaluate(sp_pool *pool, const tr_model *m, tr_acts *a, tr_batch *b, tr_batcher *ev, int eval_n,
                     const float *Wlm, float *cstar, double *tau, double *acc) {
    int B = m->d.B, k0 = m->d.arch == TR_ARCH_DFLASH_ZLAB; /* z-lab drafts come from slots 1..B−1 */
    double tsum = 0;
    for (int k = 0; k < B; k++) acc[k] = 0;
    for (int i0 = 0; i0 < eval_n; i0 += b->cap) {
        int n = eval_n - i0 < b->cap ? eval_n - i0 : b->cap;
        tr_batcher_fill(ev, b, i0, n);
        double wsum = 1e-6;
        for (int t = 0; t < n * B; t++) wsum += b->wt[t];
        tr_stats st;
        tr_forward(pool, m, a, b, Wlm, wsum, &st, cstar);
        for (int e = 0; e < n; e++) {
            double prod = 1, te = 1;
            for (int k = k0; k < B; k++) {
                prod *= cstar[e * B + k];
                te += prod;
                acc[k] += cstar[e * B + k];
            }
            tsum += te;
        }
    }
    *tau = tsum / eval_n;
    for (int k = 0; k < B; k++) acc[k] /= eval_n;
}

const char *tr_arch_name(tr_arch a) {
    return a == TR_ARCH_DSPARK ? "dspark" : a == TR_ARCH_DFLASH ? "dflash" : a == TR_ARCH_EAGLE3 ? "eagle3"
                                                                                           : "dflash-zlab";
}

int tr_eagle3_dims(const tr_train_cfg *c, const sp_model *target, int m, const int *taps, tr_dims *dout,
                   char **config_json, sp_err *err) {
    const sp_config *tc = sp_model_config(target);
    *config_json = NULL;
    if (m != 3)
        return sp_err_set(err, "%s: the shards tap %d layers; EAGLE-3 needs 3 (regen --taps eagle3)", c->data_dir, m);
    int Vd = c->draft_vocab > 0 ? c->draft_vocab : tc->vocab_size < 32000 ? tc->vocab_size : 32000;
    if (Vd > tc->vocab_size) return sp_err_set(err, "--draft-vocab %d above the vocabulary (%d)", Vd, tc->vocab_size);
    if (c->window < 1 || c->window > 4096 || c->block > 64)
        return sp_err_set(err, "train: --window %d (1..4096), --block-size %d (1..64)", c->window, c->block);
    tr_dims d = {.arch = TR_ARCH_EAGLE3, .H = tc->hidden_size, .NH = tc->n_heads, .KVH = tc->n_kv_heads,
                 .D = tc->head_dim, .I = tc->ffn_dim, .L = 1, .V = tc->vocab_size, .m = 3, .B = c->block,
                 .n_target_layers = tc->n_layers, .eps = tc->rms_eps, .rope = tc->rope, .Vd = Vd};
    memcpy(d.tap_layers, taps, sizeof(int) * 3);
    char *tcfg; /* the target's config.json: its directory's, or written from its GGUF metadata */
    if (sp_model_config_json(c->model_dir, &tcfg, err)) return -1;
    int rc = tr_e3_config_json(config_json, tcfg, &d, err);
    free(tcfg);
    if (rc) return -1;
    sp_config dc;
    if (sp_config_parse(&dc, *config_json, "draft config.json", err)) {
        free(*config_json);
        *config_json = NULL;
        return -1;
    }
    d.rope = dc.rope;
    d.eps = dc.rms_eps;
    *dout = d;
    return 0;
}

/* the held-out monitor of an EAGLE-3 drafter: a_k = mean acceptance of draft k, τ = mean over
 * rows whose drafts all count of 1 + Σ_k Π_{j<=k} a */
static void e3_evaluate(sp_pool *pool, const tr_model *m, tr_e3_acts *a, tr_e3_batch *b, tr_e3_sampler *ev,
                        int eval_n, float *cstar, double *tau, double *acc) {
    int K = m->d.B, S = b->S;
    double tsum = 0, nrow = 0, cnt[64] = {0};
    for (int k = 0; k < K; k++) acc[k] = 0;
    for (int i0 = 0; i0 < eval_n; i0 += b->cap) {
        int n = eval_n - i0 < b->cap ? eval_n - i0 : b->cap, Tn = n * S;
        tr_e3_fill(ev, b, i0, n);
        tr_stats st;
        tr_e3_forward(pool, m, a, b, 1.0, &st, cstar);
        for (int t = 0; t < Tn; t++) {
            double prod = 1, te = 1;
            int full = 1;
            for (int k = 0; k < K; k++) {
                float w = b->wt[(size_t)k * b->cap * S + t];
                if (w == 0) { full = 0; continue; }
                acc[k] += cstar[(size_t)k * Tn + t];
                cnt[k]++;
                prod *= cstar[(size_t)k * Tn + t];
                te += prod;
            }
            if (full) tsum += te, nrow++;
        }
    }
    *tau = nrow > 0 ? tsum / nrow : 1.0;
    for (int k = 0; k < K; k++) acc[k] = cnt[k] > 0 ? acc[k] / cnt[k] : 0;
}

double tr_step_flops(const tr_dims *d, int NB, int C, int NR, int with_P) {
    double T = (double)NB * d->B, S = (double)NR + T, Tc = NR;
    double H = d->H, QD = (double)d->NH * d->D, KD = (double)d->KVH * d->D, I = d->I, V = d->V, r = d->r;
    /* multiply-adds of the forward; backward: ×2 for trained matmuls (input + weight grads) */
    double layer = T * H * QD + 2 * S * H * KD + T * QD * H + 3 * T * H * I; /* q, k+v, o, MLP */
    double attn = 2 * T * (C + d->B) * QD;                                   /* QKᵀ and PV */
    double head = d->markov == TR_MARKOV_GATED ? T * (H + r) * r                /* gate_proj */
                  : d->markov == TR_MARKOV_RNN ? T * (2 * r + H) * 3 * r : 0; /* joint_proj */
    double fwd = Tc * d->m * H * H + d->L * (layer + attn) + T * H * V + T * r * V + head;
    double bwd = Tc * d->m * H * H + 2 * d->L * (layer + attn) + T * H * V + 2 * T * r * V + 2 * head;
    double target = with_P ? T * H * V : 0;
    return 2 * (fwd + bwd + target);
}

int tr_drafter_dims(const tr_train_cfg *c, const sp_model *target, int m, const int *taps, tr_dims *dout,
                    char **config_json, sp_err *err) {
    const sp_config *tc = sp_model_config(target);
    int gemma = tc->arch == SP_ARCH_GEMMA4;
    *config_json = NULL;
    if (tc->arch != SP_ARCH_QWEN3 && tc->arch != SP_ARCH_LLAMA && !gemma)
        return sp_err_set(err, "%s: training supports llama, qwen3 and gemma4 targets; this is %s", c->model_dir,
                          sp_arch_name(tc->arch));
    if (gemma && c->arch == TR_ARCH_DFLASH_ZLAB)
        return sp_err_set(err, "%s: --arch dflash-zlab has a Qwen3 body; a gemma4 target trains dspark or dflash",
                          c->model_dir);
    if (c->markov_head != TR_MARKOV_VANILLA && (c->arch != TR_ARCH_DSPARK || c->markov_rank < 1))
        return sp_err_set(err, "train: a %s Markov head needs --arch dspark and --markov-rank > 0",
                          tr_markov_name(c->markov_head));
    if (m < 1 || m > TR_MAX_TAPS) return sp_err_set(err, "train: %d tapped layers (1..%d)", m, TR_MAX_TAPS);
    tr_dims d = {.arch = c->arch, .H = tc->hidden_size, .NH = tc->n_heads, .KVH = tc->n_kv_heads,
                 .D = tc->head_dim, .I = tc->ffn_dim, .L = c->layers, .V = tc->vocab_size, .m = m,
                 .B = c->block, .r = c->arch == TR_ARCH_DSPARK ? c->markov_rank : 0,
                 .conf = c->arch == TR_ARCH_DSPARK, .conf_with_markov = 1,
                 .mask_id = c->mask_id >= 0 ? c->mask_id : newdrafter_mask_id(tc), .n_target_layers = tc->n_layers,
                 .eps = tc->rms_eps, .rope = tc->rope, .gemma = gemma, .markov = c->markov_head};
    for (int i = 0; i < m; i++)
        if (taps[i] < 0 || taps[i] >= tc->n_layers - 1 || (i > 0 && taps[i] <= taps[i - 1]))
            return sp_err_set(err, "the shards' tap layer %d is not one of the target's layers 0..%d (strictly "
                                   "increasing, the final layer excluded)", taps[i], tc->n_layers - 2);
    memcpy(d.tap_layers, taps, sizeof(int) * m);
    if (d.mask_id >= d.V) return sp_err_set(err, "--mask-id %d outside the vocabulary (%d)", d.mask_id, d.V);
    char *tcfg; /* the target's config.json: its directory's, or written from its GGUF metadata */
    if (sp_model_config_json(c->model_dir, &tcfg, err)) return -1;
    int rc = tr_config_json(config_json, tcfg, &d, 512, err);
    free(tcfg);
    if (rc) return -1;
    /* RoPE and eps as the inference loader reads them from the written config: a Llama target's
     * drafter is a Qwen3 block (q/k norm) with the target's llama3 rope scaling (checkpoint.c) */
    sp_config dc;
    if (sp_config_parse(&dc, *config_json, "draft config.json", err)) goto fail;
    if (!dc.qk_norm) {
        sp_err_set(err, "%s: the draft config would load without q_norm / k_norm (model_type %s)", c->model_dir,
                   sp_arch_name(dc.arch));
        goto fail;
    }
    d.rope = dc.rope;
    d.eps = dc.rms_eps;
    if (gemma) { /* the draft layers' shapes as the loader reads them from the written config (docs/DSPARK.md §3) */
        const sp_layer_config *lc = &dc.layers[0];
        d.D = lc->head_dim;
        d.KVH = lc->n_kv_heads;
        d.I = lc->ffn_dim;
        d.k_eq_v = !lc->has_v_proj;
        d.gelu = dc.act == SP_ACT_GELU_TANH;
        d.softcap = tc->final_softcap;
    }
    *dout = d;
    return 0;
fail:
    free(*config_json);
    *config_json = NULL;
    return -1;
}

/* trainer_state.json (informative; resume reads the optimizer file): malloc'd text or NULL */
static char *state_json(const tr_train_cfg *c, long step, long total, int block, double tau) {
    char seed[24]; /* a u64: a JSON integer when it fits jansson's, else its decimal text */
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    json_t *sj = c->seed <= (uint64_t)INT64_MAX ? json_integer((json_int_t)c->seed) : json_string(seed);
    json_t *j = json_pack("{s:I, s:I, s:s, s:o, s:i, s:i, s:i, s:f, s:f}", "step", (json_int_t)step, "total_steps",
                          (json_int_t)total, "arch", tr_arch_name(c->arch), "seed", sj, "batch", c->batch,
                          "anchors_per_seq", c->anchors_per_seq, "block_size", block, "lr", c->lr, "tau", tau);
    char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    json_decref(j);
    return s;
}

int tr_train_run(const tr_train_cfg *c, tr_train_result *res, sp_err *err) {
    memset(res, 0, sizeof *res);
    int rc = -1;
    sp_model *target = NULL;
    tr_shardset data = {0}, held = {0};
    tr_batcher bt = {0}, ev = {0};
    tr_model m = {0};
    tr_acts *acts = NULL;
    tr_batch batch = {0};
    float *grad = NULL, *am = NULL, *av = NULL, *Wlm = NULL, *cstar = NULL;
    char *config_json = NULL;
    FILE *log = NULL;
    double acc[64];
    /* EAGLE-3 */
    int e3 = c->arch == TR_ARCH_EAGLE3;
    tr_e3_sampler es = {0}, eev = {0};
    tr_e3_batch eb = {0};
    tr_e3_acts *eacts = NULL;
    int32_t *d2t = NULL;

    if (sp_model_load(&target, c->model_dir, c->threads, err)) return -1;
    const sp_config *tc = sp_model_config(target);
    if (!(c->lr > 0) || !isfinite(c->lr) || !isfinite(c->gamma)) {
        sp_err_set(err, "--lr %g must be a finite number > 0 and --gamma %g finite", c->lr, c->gamma);
        goto out;
    }
    if (c->block < 1 || c->block > 64 || c->batch < 1 || c->layers < 1 || c->ctx < 0 || c->markov_rank < 0) {
        sp_err_set(err, "train: block %d (1..64), batch %d, layers %d, ctx %d, markov rank %d out of range", c->block,
                   c->batch, c->layers, c->ctx, c->markov_rank);
        goto out;
    }
    if (tr_shardset_open(&data, c->data_dir, tc->vocab_size, err)) goto out;
    if (data.H != tc->hidden_size) {
        sp_err_set(err, "%s: shards have hidden size %d, the target %d", c->data_dir, data.H, tc->hidden_size);
        goto out;
    }
    const tr_shardset *evdata = &data;
    if (c->heldout_dir) {
        if (tr_shardset_open(&held, c->heldout_dir, tc->vocab_size, err)) goto out;
        if (held.H != data.H || held.m != data.m || memcmp(held.tap_layers, data.tap_layers, sizeof(int) * data.m)) {
            sp_err_set(err, "%s: held-out shards have other taps / hidden size than %s", c->heldout_dir, c->data_dir);
            goto out;
        }
        evdata = &held;
    }

    /* the drafter: the target's shapes, our depth / block / heads */
    tr_dims d;
    if (e3 ? tr_eagle3_dims(c, target, data.m, data.tap_layers, &d, &config_json, err)
           : tr_drafter_dims(c, target, data.m, data.tap_layers, &d, &config_json, err))
        goto out;
    Wlm = malloc(sizeof(float) * d.V * d.H);
    if (!Wlm) { sp_err_set(err, "train: out of memory"); goto out; }
    /* the frozen LM head as f32 (docs/DSPARK.md §2: shared with the target, not stored) */
    for (int r = 0; r < d.V; r++) sp_mat_row_f32(sp_model_lm_head(target), r, Wlm + (size_t)r * d.H);
    if (e3) { /* the draft vocabulary from the training shards' token counts; lm_head starts from its rows */
        if (!(d2t = malloc(sizeof(int32_t) * (size_t)d.Vd))) { sp_err_set(err, "train: out of memory"); goto out; }
        if (tr_e3_vocab(&data, d.V, d.Vd, d2t, err) || tr_e3_model_init(&m, &d, c->seed, Wlm, d2t, err)) goto out;
        m.d2t = d2t;
    } else if (tr_model_init(&m, &d, c->seed, err)) goto out;
    grad = calloc(m.n, sizeof(float));
    am = calloc(m.n, sizeof(float));
    av = calloc(m.n, sizeof(float));
    cstar = malloc(sizeof(float) * c->batch * d.B * (e3 ? c->window : 1));
    if (!grad || !am || !av || !cstar) { sp_err_set(err, "train: out of memory"); goto out; }

    /* this rank's slice [lo, hi) of every global batch */
    int rank = c->dist ? c->dist->rank : 0, size = c->dist ? c->dist->size : 1;
    int lo = c->batch * rank / size, hi = c->batch * (rank + 1) / size, nloc = hi - lo;
    int cap = (c->batch + size - 1) / size;
    if (nloc < 1) { sp_err_set(err, "train: --batch %d is smaller than the %d ranks", c->batch, size); goto out; }
    int zlab = c->arch == TR_ARCH_DFLASH_ZLAB, eval_n;
    int64_t n_units; /* anchors, or EAGLE-3 windows */
    if (e3) { /* windows of `window` positions, `block` training-time-test steps, weight 0.8^k */
        if (tr_e3_sampler_init(&es, &data, target, c->window, d.B, 0.8, d2t, d.Vd, c->seed, err) ||
            tr_e3_sampler_init(&eev, evdata, target, c->window, d.B, 0.8, d2t, d.Vd, c->seed ^ 0xe7a1u, err) ||
            tr_e3_batch_alloc(&eb, cap, c->window, d.B, d.H, 3 * d.H, d.Vd, err) ||
            !(eacts = tr_e3_acts_create(&d, cap, c->window, err)))
            goto out;
        n_units = es.n;
        eval_n = c->eval_blocks < eev.n ? c->eval_blocks : (int)eev.n;
    } else {
        if (tr_batcher_init(&bt, &data, target, d.B, c->ctx, d.mask_id, zlab, c->gamma, 0, c->anchors_per_seq,
                            c->seed, cap, err))
            goto out;
        /* the monitor keeps one anchor per unit: the same held-out blocks whatever A */
        if (tr_batcher_init(&ev, evdata, target, d.B, c->ctx, d.mask_id, zlab, c->gamma, 1, 1, c->seed ^ 0xe7a1u,
                            cap, err))
            goto out;
        if (!(acts = tr_acts_create(&d, cap, c->ctx, err))) goto out;
        if (tr_batch_alloc(&batch, cap, c->ctx, d.B, d.V, d.H, d.m * d.H, 1, err)) goto out;
        n_units = bt.n;
        eval_n = c->eval_blocks < ev.n ? c->eval_blocks : (int)ev.n;
    }
    if (eval_n < 1) eval_n = 1;
    /* DFlash trains on CE only: no target distribution needed except for the monitor */
    float *P_keep = batch.P;

    long total = c->steps > 0 ? c->steps : (long)c->epochs * (long)((n_units + c->batch - 1) / c->batch);
    tr_optim_cfg oc = {.lr = c->lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0,
                       .warmup = c->warmup >= 0 ? c->warmup : (long)ceil(0.04 * total), .total = total, .clip = 1.0};

    /* every setting the trajectory depends on (resume refuses a checkpoint made with others) */
    char run[1024];
    snprintf(run, sizeof run,
             "arch=%s seed=%llu batch=%d block=%d layers=%d markov_rank=%d ctx=%d gamma=%g lr=%g warmup=%ld "
             "total=%ld mask=%d anchors=%lld",
             tr_arch_name(c->arch), (unsigned long long)c->seed, c->batch, d.B, d.L, d.r,
             c->ctx, c->gamma, c->lr, oc.warmup, oc.total, d.mask_id, (long long)n_units);
    if (e3) snprintf(run + strlen(run), sizeof run - strlen(run), " window=%d draft_vocab=%d", c->window, d.Vd);
    if (d.r > 0 && d.markov != TR_MARKOV_VANILLA) /* vanilla runs keep the string older checkpoints hold */
        snprintf(run + strlen(run), sizeof run - strlen(run), " markov_head=%s", tr_markov_name(d.markov));
    if (c->anchors_per_seq != 1) /* absent for A = 1: checkpoints from before A existed resume */
        snprintf(run + strlen(run), sizeof run - strlen(run), " anchors_per_seq=%d", c->anchors_per_seq);
    long step0 = 0;
    char path[4096];
    sp_path_join(path, sizeof path, c->out_dir, "optimizer.safetensors");
    if (c->resume && sp_file_exists(path)) {
        if (tr_checkpoint_load(c->out_dir, &m, am, av, &step0, run, err)) goto out;
        sp_log(SP_LOG_INFO, "train: resuming %s at step %ld", c->out_dir, step0);
        res->step = step0; /* a finished run resumed again runs no step and stays at its last one */
    } else if (rank == 0 && sp_mkdir_p(c->out_dir, err)) goto out;

    char logpath[4096];
    if (c->log_path) snprintf(logpath, sizeof logpath, "%s", c->log_path);
    else sp_path_join(logpath, sizeof logpath, c->out_dir, "train_log.csv");
    if (rank == 0) {
        if (step0 > 0 && tr_log_truncate(logpath, step0, err)) goto out;
        log = fopen(logpath, step0 > 0 && sp_file_exists(logpath) ? "a" : "w");
        if (!log) { sp_err_set(err, "%s: cannot open the log for writing", logpath); goto out; }
    } else {
        log = fopen("/dev/null", "w"); /* only rank 0 logs */
        if (!log) { sp_err_set(err, "/dev/null: cannot open"); goto out; }
    }
    if (rank == 0 && ftell(log) == 0) {
        fprintf(log, "step,epoch,lr,loss,ce,l1,bce,grad_norm,tok_per_s,tau");
        for (int k = 0; k < d.B; k++) fprintf(log, ",a%d", k + 1);
        fprintf(log, "\n");
    }

    sp_pool *pool = sp_model_pool(target);
    double tau;
    if (e3) e3_evaluate(pool, &m, eacts, &eb, &eev, eval_n, cstar, &tau, acc);
    else evaluate(pool, &m, acts, &batch, &ev, eval_n, Wlm, cstar, &tau, acc);
    res->tau_first = res->tau_last = tau;
    if (step0 == 0) {
        fprintf(log, "0,0,0,,,,,,,%.6f", tau);
        for (int k = 0; k < d.B; k++) fprintf(log, ",%.6f", acc[k]);
        fprintf(log, "\n");
        fflush(log);
    }
    sp_progress pr;
    if (c->progress && rank == 0) sp_progress_start(&pr, "train", (double)total, "step");
    double train_ms = 0, tokens = 0, flops = 0;
    for (long step = step0 + 1; step <= total; step++) {
        double t0 = sp_time_ms();
        batch.P = c->arch == TR_ARCH_DSPARK ? P_keep : NULL;
        double wsum = 0;
        if (e3) {
            tr_e3_fill(&es, &eb, (step - 1) * (int64_t)c->batch + lo, nloc);
            for (int k = 0; k < d.B; k++)
                for (int t = 0; t < nloc * c->window; t++) wsum += eb.wt[(size_t)k * cap * c->window + t];
        } else {
            tr_batcher_fill(&bt, &batch, (step - 1) * (int64_t)c->batch + lo, nloc);
            for (int t = 0; t < nloc * d.B; t++) wsum += batch.wt[t];
        }
        tr_dist_sum_f64(c->dist, &wsum, 1); /* the normaliser is the global weight sum (docs/DSPARK.md §7) */
        wsum += 1e-6;
        tr_stats st;
        memset(grad, 0, sizeof(float) * m.n);
        if (e3) {
            double rows = (double)nloc * c->window * d.B, QD = (double)d.NH * d.D, KD = (double)d.KVH * d.D;
            flops += 6 * rows * (2.0 * d.H * (QD + 2 * KD) + QD * d.H + 3.0 * d.H * d.I + (double)d.Vd * d.H);
            tr_e3_forward(pool, &m, eacts, &eb, wsum, &st, NULL);
            tr_e3_backward(pool, &m, eacts, &eb, wsum, grad);
        } else {
            flops += tr_step_flops(&d, nloc, c->ctx, batch.NR, c->arch == TR_ARCH_DSPARK);
            tr_forward(pool, &m, acts, &batch, Wlm, wsum, &st, NULL);
            tr_backward(pool, &m, acts, &batch, Wlm, wsum, grad);
        }
        double sums[4] = {st.loss, st.ce, st.l1, st.bce};
        tr_dist_sum_f64(c->dist, sums, 4);
        st.loss = sums[0]; st.ce = sums[1]; st.l1 = sums[2]; st.bce = sums[3];
        tr_dist_sum_f32(c->dist, grad, m.n);
        double gn = tr_clip_grad(grad, m.n, oc.clip);
        if (!isfinite(st.loss) || !isfinite(gn)) {
            sp_err_set(err, "step %ld: loss %g, gradient norm %g: training diverged (lower --lr); nothing "
                            "saved after the last checkpoint", step, st.loss, gn);
            goto out;
        }
        double lr = tr_lr_at(&oc, step);
        tr_adamw_step(m.w, grad, am, av, m.n, step, lr, &oc);
        batch.P = P_keep;
        double ms = sp_time_ms() - t0;
        train_ms += ms;
        tokens += (double)c->batch * d.B * (e3 ? c->window : 1);
        if (step == step0 + 1) res->loss_first = st.loss;
        res->loss_last = st.loss;
        res->step = step;
        int do_eval = step == total || (c->eval_every > 0 && step % c->eval_every == 0);
        if (do_eval) {
            if (e3) e3_evaluate(pool, &m, eacts, &eb, &eev, eval_n, cstar, &tau, acc);
            else evaluate(pool, &m, acts, &batch, &ev, eval_n, Wlm, cstar, &tau, acc);
            res->tau_last = tau;
            for (int k = 0; k < d.B && k < 64; k++) res->a_last[k] = acc[k];
        }
        fprintf(log, "%ld,%.4f,%.6g,%.6f,%.6f,%.6f,%.6f,%.4f,%.1f", step,
                (double)(step * c->batch) / (double)n_units, lr, st.loss, st.ce / wsum, st.l1 / wsum, st.bce / wsum, gn,
                c->batch * d.B * (e3 ? c->window : 1) / (ms / 1000 + 1e-9));
        if (do_eval) {
            fprintf(log, ",%.6f", tau);
            for (int k = 0; k < d.B; k++) fprintf(log, ",%.6f", acc[k]);
        } else {
            fprintf(log, ",");
            for (int k = 0; k < d.B; k++) fprintf(log, ",");
        }
        fprintf(log, "\n");
        fflush(log);
        if (c->progress && rank == 0) {
            char extra[96];
            snprintf(extra, sizeof extra, "loss %.4f tau %.3f %.0f tok/s", st.loss, res->tau_last,
                     tokens / (train_ms / 1000 + 1e-9));
            sp_progress_update(&pr, (double)step, extra);
        }
        int save = rank == 0 && (step == total || (c->save_every > 0 && step % c->save_every == 0));
        for (size_t i = 0; save && i < m.n; i++)
            if (!isfinite(m.w[i])) {
                sp_err_set(err, "step %ld: parameter %zu is %g: training diverged (lower --lr); the last "
                                "checkpoint is kept", step, i, m.w[i]);
                goto out;
            }
        if (save) {
            char *state = state_json(c, step, total, d.B, res->tau_last);
            int rc = state ? tr_checkpoint_save(c->out_dir, &m, am, av, step, run, config_json, state, err)
                           : sp_err_set(err, "train: out of memory writing trainer_state.json");
            free(state);
            if (rc) goto out;
        }
        if (c->stop_after > 0 && step - step0 >= c->stop_after) break;
    }
    if (c->progress && rank == 0) sp_progress_finish(&pr, (double)res->step, NULL);
    res->tok_per_s = tokens / (train_ms / 1000 + 1e-9);
    res->gflops = flops / (train_ms / 1000 + 1e-9) / 1e9;
    rc = 0;
out:
    if (log) { /* a log that could not be written fails the run */
        int bad = ferror(log);
        if (fclose(log) != 0) bad = 1;
        if (bad && rc == 0) rc = sp_err_set(err, "%s: cannot write the training log", c->log_path ? c->log_path :
                                            "train_log.csv");
    }
    free(config_json); free(grad); free(am); free(av); free(Wlm); free(cstar);
    tr_batch_free(&batch);
    tr_acts_free(acts);
    tr_model_free(&m);
    tr_batcher_free(&bt);
    tr_batcher_free(&ev);
    tr_e3_sampler_free(&es);
    tr_e3_sampler_free(&eev);
    tr_e3_batch_free(&eb);
    tr_e3_acts_free(eacts);
    free(d2t);
    tr_shardset_close(&data);
    tr_shardset_close(&held);
    sp_model_free(target);
    return rc;
}
