/* trainer.c — the drafter trainer (see trainer.h): target, shards, drafter dims and batches,
 * the held-out monitor, and the callbacks of the training loop (loop.h), which owns the steps,
 * schedule, checkpoints, resume and log. */
#include "train/trainer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/pool.h"
#include "formats/config_json.h"
#include "formats/newdrafter.h"
#include "model/model.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/eagle3_train.h"
#include "train/kind_hooks.h"
#include "train/loop.h"
#include "train/mlxbun_train.h"
#include "train/shards.h"

tr_train_cfg sp_tr_train_defaults(void) {
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

const char *sp_tr_arch_name(tr_arch a) {
    return a == TR_ARCH_DSPARK ? "dspark" : a == TR_ARCH_DFLASH ? "dflash" : a == TR_ARCH_EAGLE3 ? "eagle3"
                                                                                           : "dflash-zlab";
}

int sp_tr_eagle3_dims(const tr_train_cfg *c, const sp_model *target, int m, const int *taps, tr_dims *dout,
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
    int rc = sp_tr_e3_config_json(config_json, tcfg, &d, err);
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
        sp_tr_e3_fill(ev, b, i0, n);
        tr_stats st;
        sp_tr_e3_forward(pool, m, a, b, 1.0, &st, cstar);
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

double sp_tr_step_flops(const tr_dims *d, int NB, int C, int NR, int with_P) {
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

int sp_tr_drafter_dims(const tr_train_cfg *c, const sp_model *target, int m, const int *taps, tr_dims *dout,
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
                          sp_tr_markov_name(c->markov_head));
    if (m < 1 || m > TR_MAX_TAPS) return sp_err_set(err, "train: %d tapped layers (1..%d)", m, TR_MAX_TAPS);
    tr_dims d = {.arch = c->arch, .H = tc->hidden_size, .NH = tc->n_heads, .KVH = tc->n_kv_heads,
                 .D = tc->head_dim, .I = tc->ffn_dim, .L = c->layers, .V = tc->vocab_size, .m = m,
                 .B = c->block, .r = c->arch == TR_ARCH_DSPARK ? c->markov_rank : 0,
                 .conf = c->arch == TR_ARCH_DSPARK, .conf_with_markov = 1,
                 .mask_id = c->mask_id >= 0 ? c->mask_id : sp_newdrafter_mask_id(tc), .n_target_layers = tc->n_layers,
                 .eps = tc->rms_eps, .rope = tc->rope, .gemma = gemma, .markov = c->markov_head};
    for (int i = 0; i < m; i++) /* the last may be the sentinel n_layers: the post-final-norm hidden */
        if (taps[i] < 0 || (taps[i] >= tc->n_layers - 1 && !(i == m - 1 && taps[i] == tc->n_layers)) ||
            (i > 0 && taps[i] <= taps[i - 1]))
            return sp_err_set(err, "the shards' tap layer %d is not one of the target's layers 0..%d (strictly "
                                   "increasing, the final layer excluded) nor, last, the final norm %d",
                              taps[i], tc->n_layers - 2, tc->n_layers);
    memcpy(d.tap_layers, taps, sizeof(int) * m);
    if (c->loss_weights_set) memcpy(d.alpha, c->loss_weights, sizeof d.alpha), d.alpha_set = 1;
    d.n_temps = c->n_temps;
    memcpy(d.temps, c->temps, sizeof d.temps);
    d.alpha_kl = c->kl_weight;
    if (d.mask_id >= d.V) return sp_err_set(err, "--mask-id %d outside the vocabulary (%d)", d.mask_id, d.V);
    char *tcfg; /* the target's config.json: its directory's, or written from its GGUF metadata */
    if (sp_model_config_json(c->model_dir, &tcfg, err)) return -1;
    int rc = sp_tr_config_json(config_json, tcfg, &d, 512, err);
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

/* one `train` run: the target, the data, the drafter and its batches; the callbacks of the
 * training loop (loop.h) read and write it */
typedef struct {
    const tr_train_cfg *c;
    tr_train_result *res;
    sp_model *target;
    sp_pool *pool;
    tr_shardset data, held;
    tr_shardset all;           /* --val-split: the shards opened; data and held are views of it */
    const tr_shardset *evdata; /* held-out shards, else the training ones */
    tr_dims d;
    tr_model m;
    tr_ckpt_tensor *tensors;   /* [m.n_params] the optimizer file's table */
    float *Wlm, *cstar;        /* frozen LM head [V, H] f32; the monitor's c*_k */
    char *config_json;
    int lo, nloc, cap;         /* this rank's slice [lo, lo + nloc) of every global batch; cap: max slice */
    int eval_n;
    int64_t n_units;           /* anchors, or EAGLE-3 windows */
    /* DSpark / DFlash */
    tr_batcher bt, ev;
    tr_batch batch;
    tr_acts *acts;
    float *P_keep;             /* batch.P: DFlash steps train on CE only and go without it */
    int C;                     /* context slots per element (--ctx; 1 for mlx-bun's v1) */
    tr_mb_run mb;              /* --layout mlx-bun: the module's dims, activations, files */
    /* EAGLE-3 */
    tr_e3_sampler es, eev;
    tr_e3_batch eb;
    tr_e3_acts *eacts;
    int32_t *d2t;
    /* the last step and evaluation */
    double wsum, flops, tau, acc[64];
    double best_tau;      /* keep_best: the best τ of an evaluation after a step, its step (0: none) */
    long best_step;
    int since_best;       /* evaluations since best_step */
} drafter_run;

static void drafter_run_free(drafter_run *r) {
    free(r->config_json);
    free(r->Wlm);
    free(r->cstar);
    free(r->tensors);
    sp_tr_batch_free(&r->batch);
    sp_tr_acts_free(r->acts);
    sp_tr_mb_free(&r->mb);
    sp_tr_model_free(&r->m);
    sp_tr_batcher_free(&r->bt);
    sp_tr_batcher_free(&r->ev);
    sp_tr_e3_sampler_free(&r->es);
    sp_tr_e3_sampler_free(&r->eev);
    sp_tr_e3_batch_free(&r->eb);
    sp_tr_e3_acts_free(r->eacts);
    free(r->d2t);
    if (r->c->val_split > 0) {
        sp_tr_shardset_close_view(&r->data);
        sp_tr_shardset_close_view(&r->held);
        sp_tr_shardset_close(&r->all);
    } else {
        sp_tr_shardset_close(&r->data);
        sp_tr_shardset_close(&r->held);
    }
    sp_model_free(r->target);
}

/* the network of this run: the DeepSpec / z-lab modules (drafter_net.h) or mlx-bun's */
static void net_forward(drafter_run *r, double denom, tr_stats *st, float *cstar) {
    if (r->c->layout_mlxbun) {
        tr_mb_in in = sp_tr_mb_view(&r->mb, &r->batch, r->Wlm);
        sp_tr_mb_forward(r->pool, &r->mb.d, &r->mb.o, r->m.w, r->mb.acts, &in, denom, st, cstar);
    } else {
        sp_tr_forward(r->pool, &r->m, r->acts, &r->batch, r->Wlm, denom, st, cstar);
    }
}
static void net_backward(drafter_run *r, double denom, float *grad) {
    if (r->c->layout_mlxbun) {
        tr_mb_in in = sp_tr_mb_view(&r->mb, &r->batch, r->Wlm);
        sp_tr_mb_backward(r->pool, &r->mb.d, &r->mb.o, r->m.w, r->mb.acts, &in, denom, grad);
    } else {
        sp_tr_backward(r->pool, &r->m, r->acts, &r->batch, r->Wlm, denom, grad);
    }
}
static int net_export(drafter_run *r, const char *dir, sp_err *err) {
    return r->c->layout_mlxbun ? sp_tr_mb_export(dir, &r->m, &r->mb, err)
                               : sp_tr_drafter_export(dir, &r->m, r->config_json, err);
}

/* the held-out monitor: a_k and τ over eval_n full blocks */
static void evaluate(drafter_run *r, double *tau, double *acc) {
    const tr_model *m = &r->m;
    tr_batch *b = &r->batch;
    float *cstar = r->cstar;
    int eval_n = r->eval_n;
    int B = m->d.B, k0 = m->d.arch == TR_ARCH_DFLASH_ZLAB; /* z-lab drafts come from slots 1..B−1 */
    double tsum = 0;
    for (int k = 0; k < B; k++) acc[k] = 0;
    for (int i0 = 0; i0 < eval_n; i0 += b->cap) {
        int n = eval_n - i0 < b->cap ? eval_n - i0 : b->cap;
        sp_tr_batcher_fill(&r->ev, b, i0, n);
        double wsum = 1e-6;
        for (int t = 0; t < n * B; t++) wsum += b->wt[t];
        tr_stats st;
        net_forward(r, wsum, &st, cstar);
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

/* the position decay γ of the loss weights: the block size under gamma_block */
static double eff_gamma(const tr_train_cfg *c, const tr_dims *d) { return c->gamma_block ? d->B : c->gamma; }

/* the tempered loss's settings: temperatures finite and > 0, a KL weight only with them, and only
 * where the loss has a term they change (DSpark's TV, confidence or KL; DeepSpec layout) */
static int check_temps(const tr_train_cfg *c, sp_err *err) {
    if (c->n_temps < 0 || c->n_temps > TR_MAX_TEMPS)
        return sp_err_set(err, "--temp: %d temperatures (at most %d)", c->n_temps, TR_MAX_TEMPS);
    for (int i = 0; i < c->n_temps; i++)
        if (!(c->temps[i] > 0) || !isfinite(c->temps[i]))
            return sp_err_set(err, "--temp %g: a temperature must be a finite number > 0", c->temps[i]);
    if (!isfinite(c->kl_weight) || c->kl_weight < 0)
        return sp_err_set(err, "--kl-weight %g must be a finite number >= 0", c->kl_weight);
    if (c->kl_weight > 0 && c->n_temps == 0)
        return sp_err_set(err, "--kl-weight needs --temp (--temp 1: the untempered distribution)");
    if (c->n_temps == 0) return 0;
    if (c->arch != TR_ARCH_DSPARK || c->layout_mlxbun)
        return sp_err_set(err, "--temp trains the DSpark loss's TV, KL and confidence terms: it needs --arch dspark "
                               "and --layout deepspec, not --arch %s%s",
                          sp_tr_arch_name(c->arch), c->layout_mlxbun ? " --layout mlx-bun" : "");
    if (c->loss_weights_set && c->loss_weights[1] == 0 && c->loss_weights[2] == 0 && c->kl_weight == 0)
        return sp_err_set(err, "--temp changes nothing with --loss-weights %g,0,0 and no --kl-weight",
                          c->loss_weights[0]);
    return 0;
}

static int check_cfg(const tr_train_cfg *c, sp_err *err) {
    if (!(c->lr > 0) || !isfinite(c->lr) || !isfinite(c->gamma))
        return sp_err_set(err, "--lr %g must be a finite number > 0 and --gamma %g finite", c->lr, c->gamma);
    if (c->block < 1 || c->block > 64 || c->batch < 1 || c->layers < 1 || c->ctx < 0 || c->markov_rank < 0)
        return sp_err_set(err, "train: block %d (1..64), batch %d, layers %d, ctx %d, markov rank %d out of range",
                          c->block, c->batch, c->layers, c->ctx, c->markov_rank);
    if (c->init_dir && (c->arch == TR_ARCH_EAGLE3 || c->layout_mlxbun))
        return sp_err_set(err, "--init starts a DeepSpec-layout DSpark or DFlash drafter, not --arch %s%s",
                          sp_tr_arch_name(c->arch), c->layout_mlxbun ? " --layout mlx-bun" : "");
    return check_temps(c, err);
}

/* the training shards and the held-out ones (same taps and hidden size) */
static int open_data(drafter_run *r, sp_err *err) {
    const tr_train_cfg *c = r->c;
    const sp_config *tc = sp_model_config(r->target);
    if (c->val_split > 0) { /* the held-out sequences carved from the training shards */
        if (c->heldout_dir) return sp_err_set(err, "train: give --held-out or --val-split, not both");
        if (!(c->val_split < 1)) return sp_err_set(err, "--val-split %g must be in (0, 1)", c->val_split);
        if (sp_tr_shardset_open(&r->all, c->data_dir, tc->vocab_size, err) ||
            sp_tr_shardset_split(&r->all, c->val_split, c->seed, &r->data, &r->held, err))
            return -1;
        r->evdata = &r->held;
        return r->data.H != tc->hidden_size ? sp_err_set(err, "%s: shards have hidden size %d, the target %d",
                                                          c->data_dir, r->data.H, tc->hidden_size)
                                            : 0;
    }
    if (sp_tr_shardset_open(&r->data, c->data_dir, tc->vocab_size, err)) return -1;
    if (r->data.tap_layers[0] == TR_TAP_FINAL_NORM) r->data.tap_layers[0] = tc->n_layers; /* mlx-bun v1 */
    if (r->data.H != tc->hidden_size)
        return sp_err_set(err, "%s: shards have hidden size %d, the target %d", c->data_dir, r->data.H,
                          tc->hidden_size);
    r->evdata = &r->data;
    if (!c->heldout_dir) return 0;
    const tr_shardset *d = &r->data, *h = &r->held;
    if (sp_tr_shardset_open(&r->held, c->heldout_dir, tc->vocab_size, err)) return -1;
    if (h->tap_layers[0] == TR_TAP_FINAL_NORM) r->held.tap_layers[0] = tc->n_layers;
    if (h->H != d->H || h->m != d->m || memcmp(h->tap_layers, d->tap_layers, sizeof(int) * d->m))
        return sp_err_set(err, "%s: held-out shards have other taps / hidden size than %s", c->heldout_dir,
                          c->data_dir);
    r->evdata = h;
    return 0;
}

/* the drafter: the target's shapes, our depth / block / heads; the frozen LM head as f32
 * (docs/DSPARK.md §2: shared with the target, not stored) */
static int build_model(drafter_run *r, sp_err *err) {
    const tr_train_cfg *c = r->c;
    int e3 = c->arch == TR_ARCH_EAGLE3;
    tr_dims *d = &r->d;
    r->C = c->ctx;
    if (c->layout_mlxbun) { /* mlx-bun's module, sized and initialised its way (mlxbun_train.h) */
        int size = c->dist ? c->dist->size : 1; /* the elements of this rank's slice, at most */
        if (sp_tr_mb_setup(&r->mb, &r->m, c, r->target, r->data.m, r->data.tap_layers, (c->batch + size - 1) / size,
                           err))
            return -1;
        *d = r->m.d;
        d->mask_id = c->mask_id >= 0 ? c->mask_id : sp_newdrafter_mask_id(sp_model_config(r->target));
        if (d->mask_id >= d->V) return sp_err_set(err, "--mask-id %d outside the vocabulary (%d)", d->mask_id, d->V);
        r->C = r->mb.C;
        if (!(r->Wlm = malloc(sizeof(float) * d->V * d->H))) return sp_err_set(err, "train: out of memory");
        for (int i = 0; i < d->V; i++) sp_mat_row_f32(sp_model_lm_head(r->target), i, r->Wlm + (size_t)i * d->H);
        r->tensors = malloc(sizeof *r->tensors * (size_t)r->m.n_params);
        r->cstar = malloc(sizeof(float) * c->batch * d->B);
        if (!r->tensors || !r->cstar) return sp_err_set(err, "train: out of memory");
        sp_tr_drafter_ckpt_tensors(&r->m, r->tensors);
        return 0;
    }
    if (e3 ? sp_tr_eagle3_dims(c, r->target, r->data.m, r->data.tap_layers, d, &r->config_json, err)
           : sp_tr_drafter_dims(c, r->target, r->data.m, r->data.tap_layers, d, &r->config_json, err))
        return -1;
    if (!(r->Wlm = malloc(sizeof(float) * d->V * d->H))) return sp_err_set(err, "train: out of memory");
    for (int i = 0; i < d->V; i++) sp_mat_row_f32(sp_model_lm_head(r->target), i, r->Wlm + (size_t)i * d->H);
    if (e3) { /* the draft vocabulary from the training shards' token counts; lm_head starts from its rows */
        if (!(r->d2t = malloc(sizeof(int32_t) * (size_t)d->Vd))) return sp_err_set(err, "train: out of memory");
        if (sp_tr_e3_vocab(&r->data, d->V, d->Vd, r->d2t, err) ||
            sp_tr_e3_model_init(&r->m, d, c->seed, r->Wlm, r->d2t, err))
            return -1;
        r->m.d2t = r->d2t;
    } else if (sp_tr_model_init(&r->m, d, c->seed, err) || (c->init_dir && sp_tr_drafter_init_from(c->init_dir, &r->m, err)))
        return -1;
    r->tensors = malloc(sizeof *r->tensors * (size_t)r->m.n_params);
    r->cstar = malloc(sizeof(float) * c->batch * d->B * (e3 ? c->window : 1));
    if (!r->tensors || !r->cstar) return sp_err_set(err, "train: out of memory");
    sp_tr_drafter_ckpt_tensors(&r->m, r->tensors);
    return 0;
}

/* this rank's slice of every global batch, the batchers of training and of the monitor */
static int build_batches(drafter_run *r, sp_err *err) {
    const tr_train_cfg *c = r->c;
    const tr_dims *d = &r->d;
    int rank = c->dist ? c->dist->rank : 0, size = c->dist ? c->dist->size : 1;
    r->lo = c->batch * rank / size;
    r->nloc = c->batch * (rank + 1) / size - r->lo;
    r->cap = (c->batch + size - 1) / size;
    if (r->nloc < 1) return sp_err_set(err, "train: --batch %d is smaller than the %d ranks", c->batch, size);
    if (c->arch == TR_ARCH_EAGLE3) { /* windows of `window` positions, `block` training-time-test steps, weight 0.8^k */
        if (sp_tr_e3_sampler_init(&r->es, &r->data, r->target, c->window, d->B, 0.8, r->d2t, d->Vd, c->seed, err) ||
            sp_tr_e3_sampler_init(&r->eev, r->evdata, r->target, c->window, d->B, 0.8, r->d2t, d->Vd,
                               c->seed ^ 0xe7a1u, err) ||
            sp_tr_e3_batch_alloc(&r->eb, r->cap, c->window, d->B, d->H, 3 * d->H, d->Vd, err) ||
            !(r->eacts = sp_tr_e3_acts_create(d, r->cap, c->window, err)))
            return -1;
        r->n_units = r->es.n;
        r->eval_n = c->eval_blocks < r->eev.n ? c->eval_blocks : (int)r->eev.n;
    } else {
        int zlab = c->arch == TR_ARCH_DFLASH_ZLAB;
        if (sp_tr_batcher_init(&r->bt, &r->data, r->target, d->B, r->C, d->mask_id, zlab, eff_gamma(c, d), 0,
                            c->anchors_per_seq, c->seed, r->cap, err))
            return -1;
        /* the monitor keeps one anchor per unit: the same held-out blocks whatever A */
        if (sp_tr_batcher_init(&r->ev, r->evdata, r->target, d->B, r->C, d->mask_id, zlab, eff_gamma(c, d), 1, 1,
                            c->seed ^ 0xe7a1u, r->cap, err) ||
            (!c->layout_mlxbun && !(r->acts = sp_tr_acts_create(d, r->cap, r->C, err))) ||
            sp_tr_batch_alloc(&r->batch, r->cap, r->C, d->B, d->V, d->H, d->m * d->H, 1, err))
            return -1;
        if (d->n_temps > 0) { /* the tempered loss: each anchor's temperature, training and monitor alike */
            if (!(r->batch.tinv = malloc(sizeof(float) * (size_t)r->cap * d->B)))
                return sp_err_set(err, "train: out of memory");
            sp_tr_batcher_set_temps(&r->bt, d->n_temps, d->temps);
            sp_tr_batcher_set_temps(&r->ev, d->n_temps, d->temps);
        }
        r->n_units = r->bt.n;
        r->eval_n = c->eval_blocks < r->ev.n ? c->eval_blocks : (int)r->ev.n;
        r->P_keep = r->batch.P;
    }
    if (r->eval_n < 1) r->eval_n = 1;
    return 0;
}

/* every setting the trajectory depends on (resume refuses a checkpoint made with others) */
static void run_string(const drafter_run *r, const tr_optim_cfg *oc, char *run, size_t n) {
    const tr_train_cfg *c = r->c;
    const tr_dims *d = &r->d;
    snprintf(run, n,
             "arch=%s seed=%llu batch=%d block=%d layers=%d markov_rank=%d ctx=%d gamma=%g lr=%g warmup=%ld "
             "total=%ld mask=%d anchors=%lld",
             sp_tr_arch_name(c->arch), (unsigned long long)c->seed, c->batch, d->B, d->L, d->r, r->C, eff_gamma(c, d), c->lr,
             oc->warmup, oc->total, d->mask_id, (long long)r->n_units);
    if (c->arch == TR_ARCH_EAGLE3) snprintf(run + strlen(run), n - strlen(run), " window=%d draft_vocab=%d", c->window, d->Vd);
    if (d->r > 0 && d->markov != TR_MARKOV_VANILLA) /* vanilla runs keep the string older checkpoints hold */
        snprintf(run + strlen(run), n - strlen(run), " markov_head=%s", sp_tr_markov_name(d->markov));
    if (c->anchors_per_seq != 1) /* absent for A = 1: checkpoints from before A existed resume */
        snprintf(run + strlen(run), n - strlen(run), " anchors_per_seq=%d", c->anchors_per_seq);
    if (d->alpha_set) /* absent with the kind's weights and Σw: older checkpoints resume */
        snprintf(run + strlen(run), n - strlen(run), " loss_weights=%g,%g,%g", d->alpha[0], d->alpha[1], d->alpha[2]);
    if (c->loss_norm == TR_LOSS_NORM_ANCHORS) snprintf(run + strlen(run), n - strlen(run), " loss_norm=anchors");
    char num[32]; /* the tempered loss's settings, each read back exactly from its text; absent without */
    for (int i = 0; i < d->n_temps; i++) {
        sp_tr_format_double(num, sizeof num, d->temps[i]);
        snprintf(run + strlen(run), n - strlen(run), "%s%s", i ? "," : " temp=", num);
    }
    if (d->alpha_kl > 0) {
        sp_tr_format_double(num, sizeof num, d->alpha_kl);
        snprintf(run + strlen(run), n - strlen(run), " kl_weight=%s", num);
    }
    if (c->layout_mlxbun)
        snprintf(run + strlen(run), n - strlen(run), " layout=mlx-bun dDraft=%d heads=%d ffMult=%d", c->mb_dim,
                 c->mb_heads, c->mb_ff_mult);
}

/* ---- the loop's callbacks ---------------------------------------------------------------- */
static void dr_step(void *ctx, long step, float *grad, double *stats) {
    drafter_run *r = ctx;
    const tr_train_cfg *c = r->c;
    const tr_dims *d = &r->d;
    int64_t i0 = (step - 1) * (int64_t)c->batch + r->lo;
    double wsum = 0;
    tr_stats st = {0};
    if (c->arch == TR_ARCH_EAGLE3) {
        sp_tr_e3_fill(&r->es, &r->eb, i0, r->nloc);
        for (int k = 0; k < d->B; k++)
            for (int t = 0; t < r->nloc * c->window; t++) wsum += r->eb.wt[(size_t)k * r->cap * c->window + t];
        sp_tr_dist_sum_f64(c->dist, &wsum, 1); /* the normaliser is the global weight sum (docs/DSPARK.md §7) */
        wsum += 1e-6;
        double rows = (double)r->nloc * c->window * d->B, QD = (double)d->NH * d->D, KD = (double)d->KVH * d->D;
        r->flops += 6 * rows * (2.0 * d->H * (QD + 2 * KD) + QD * d->H + 3.0 * d->H * d->I + (double)d->Vd * d->H);
        sp_tr_e3_forward(r->pool, &r->m, r->eacts, &r->eb, wsum, &st, NULL);
        sp_tr_e3_backward(r->pool, &r->m, r->eacts, &r->eb, wsum, grad);
    } else {
        r->batch.P = c->arch == TR_ARCH_DSPARK || c->layout_mlxbun ? r->P_keep : NULL;
        sp_tr_batcher_fill(&r->bt, &r->batch, i0, r->nloc);
        double sums[2] = {0, r->nloc}; /* Σw and the anchors, summed over ranks */
        for (int t = 0; t < r->nloc * d->B; t++) sums[0] += r->batch.wt[t];
        sp_tr_dist_sum_f64(c->dist, sums, 2);
        wsum = sp_tr_loss_denom(c->loss_norm, sums[0], sums[1]);
        r->flops += c->layout_mlxbun ? sp_tr_mb_step_flops(&r->mb.d, r->nloc, r->C, r->batch.NR)
                                     : sp_tr_step_flops(d, r->nloc, r->C, r->batch.NR, c->arch == TR_ARCH_DSPARK);
        net_forward(r, wsum, &st, NULL);
        net_backward(r, wsum, grad);
        r->batch.P = r->P_keep;
    }
    r->wsum = wsum;
    stats[0] = st.loss, stats[1] = st.ce, stats[2] = st.l1, stats[3] = st.bce;
    if (d->n_temps > 0) stats[4] = st.kl;
}

/* after an evaluation at step > 0: a better τ is written to OUT/best/ (rank 0); 1 when the
 * patience is spent, 0, or -1 */
static int dr_best(drafter_run *r, long step, sp_err *err) {
    const tr_train_cfg *c = r->c;
    if (!c->keep_best && c->patience <= 0) return 0;
    if (r->best_step > 0 && !(r->tau > r->best_tau)) return c->patience > 0 && ++r->since_best >= c->patience;
    r->best_tau = r->tau, r->best_step = step, r->since_best = 0;
    if (c->dist && c->dist->rank != 0) return 0;
    char dir[4096], path[4200], text[128];
    sp_path_join(dir, sizeof dir, c->out_dir, "best");
    snprintf(path, sizeof path, "%s/best.json", dir);
    snprintf(text, sizeof text, "{\"step\": %ld, \"tau\": %.17g}\n", step, r->tau);
    if (sp_mkdir_p(dir, err) || net_export(r, dir, err) ||
        sp_write_file_atomic(path, text, strlen(text), err))
        return -1;
    return 0;
}

/* resume: the best τ, its step and the evaluations since, from OUT/trainer_state.json */
static void load_best(drafter_run *r) {
    char path[4096];
    sp_path_join(path, sizeof path, r->c->out_dir, "trainer_state.json");
    json_t *j = r->c->resume ? json_load_file(path, 0, NULL) : NULL;
    if (!j) return;
    r->best_tau = json_number_value(json_object_get(j, "best_tau"));
    r->best_step = (long)json_integer_value(json_object_get(j, "best_step"));
    r->since_best = (int)json_integer_value(json_object_get(j, "evals_since_best"));
    json_decref(j);
}

static int dr_eval(void *ctx, long step, sp_err *err) {
    drafter_run *r = ctx;
    if (r->c->arch == TR_ARCH_EAGLE3)
        e3_evaluate(r->pool, &r->m, r->eacts, &r->eb, &r->eev, r->eval_n, r->cstar, &r->tau, r->acc);
    else evaluate(r, &r->tau, r->acc);
    r->res->tau_last = r->tau;
    if (step == 0) r->res->tau_first = r->tau;
    for (int k = 0; step > 0 && k < r->d.B && k < 64; k++) r->res->a_last[k] = r->acc[k];
    return step > 0 ? dr_best(r, step, err) : 0;
}

/* block tokens (anchors × B, EAGLE-3: windows × positions × B) of one global step */
static double step_tokens(const drafter_run *r) {
    return (double)r->c->batch * r->d.B * (r->c->arch == TR_ARCH_EAGLE3 ? r->c->window : 1);
}

/* step,epoch,lr,loss,ce,l1,bce,grad_norm,tok_per_s,tau,a1..aB; tau and a_k only on monitor rows */
static void dr_log_row(void *ctx, FILE *f, const tr_loop_row *w) {
    drafter_run *r = ctx;
    const double *s = w->stats;
    if (w->step == 0) fprintf(f, "0,0,0,,,,,,");
    else
        fprintf(f, "%ld,%.4f,%.6g,%.6f,%.6f,%.6f,%.6f,%.4f,%.1f", w->step,
                (double)(w->step * r->c->batch) / (double)r->n_units, w->lr, s[0], s[1] / r->wsum, s[2] / r->wsum,
                s[3] / r->wsum, w->grad_norm, step_tokens(r) / (w->step_ms / 1000 + 1e-9));
    if (w->evaluated) {
        fprintf(f, ",%.6f", r->tau);
        for (int k = 0; k < r->d.B; k++) fprintf(f, ",%.6f", r->acc[k]);
    } else {
        fprintf(f, ",");
        for (int k = 0; k < r->d.B; k++) fprintf(f, ",");
    }
    if (r->d.n_temps > 0) { /* the tempered loss's KL column, last so that a1..aB keep their places */
        if (w->step == 0) fprintf(f, ",");
        else fprintf(f, ",%.6f", s[4] / r->wsum);
    }
    fprintf(f, "\n");
}

static void dr_progress_text(void *ctx, char *buf, size_t n, const tr_loop_row *w) {
    drafter_run *r = ctx;
    snprintf(buf, n, "loss %.4f tau %.3f %.0f tok/s", w->stats[0], r->res->tau_last,
             (double)(w->step - w->step0) * step_tokens(r) / (w->train_ms / 1000 + 1e-9));
}

static int dr_export(void *ctx, const char *dir, sp_err *err) {
    return net_export(ctx, dir, err);
}

static int dr_state(void *ctx, json_t *j) {
    drafter_run *r = ctx;
    const tr_train_cfg *c = r->c;
    char seed[24]; /* a u64: a JSON integer when it fits jansson's, else its decimal text */
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    json_t *sj = c->seed <= (uint64_t)INT64_MAX ? json_integer((json_int_t)c->seed) : json_string(seed);
    json_t *more = json_pack("{s:s, s:o, s:i, s:i, s:i, s:f}", "arch", sp_tr_arch_name(c->arch), "seed", sj, "batch",
                             c->batch, "anchors_per_seq", c->anchors_per_seq, "block_size", r->d.B, "tau",
                             r->res->tau_last);
    int rc = more ? json_object_update(j, more) : -1;
    json_decref(more);
    if (!rc && r->d.n_temps > 0) { /* the tempered loss's temperatures and KL weight */
        json_t *ts = json_array();
        for (int i = 0; i < r->d.n_temps; i++) json_array_append_new(ts, json_real(r->d.temps[i]));
        json_t *tj = json_pack("{s:o, s:f}", "temp", ts, "kl_weight", r->d.alpha_kl);
        rc = tj ? json_object_update(j, tj) : -1;
        json_decref(tj);
    }
    if (!rc && (c->keep_best || c->patience > 0)) {
        json_t *best = json_pack("{s:f, s:I, s:i}", "best_tau", r->best_tau, "best_step", (json_int_t)r->best_step,
                                 "evals_since_best", r->since_best);
        rc = best ? json_object_update(j, best) : -1;
        json_decref(best);
    }
    return rc;
}

/* the loop's settings for this run (run: the run string's buffer, n bytes) */
static tr_loop_cfg loop_cfg(const drafter_run *r, char *run, size_t n, char *header, size_t hn) {
    const tr_train_cfg *c = r->c;
    long total = c->steps > 0 ? c->steps : (long)c->epochs * (long)((r->n_units + c->batch - 1) / c->batch);
    tr_loop_cfg lc = {.oc = {.lr = c->lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0,
                             .warmup = c->warmup >= 0 ? c->warmup : sp_tr_warmup_default(total), .total = total,
                             .clip = 1.0},
                      .n_stats = r->d.n_temps > 0 ? 5 : 4, /* the KL term under --temp */
                      .out_dir = c->out_dir, .log_path = c->log_path, .log_header = header, .run = run,
                      .resume = c->resume, .save_every = c->save_every, .eval_every = c->eval_every,
                      .eval_at_start = 1, .kill_after = c->stop_after, .progress = c->progress ? "train" : NULL,
                      .dist = c->dist};
    run_string(r, &lc.oc, run, n);
    size_t k = (size_t)snprintf(header, hn, "step,epoch,lr,loss,ce,l1,bce,grad_norm,tok_per_s,tau");
    for (int i = 0; i < r->d.B && k < hn; i++) k += (size_t)snprintf(header + k, hn - k, ",a%d", i + 1);
    if (r->d.n_temps > 0 && k < hn) k += (size_t)snprintf(header + k, hn - k, ",kl");
    if (k < hn) snprintf(header + k, hn - k, "\n");
    return lc;
}

int sp_tr_train_run(const tr_train_cfg *c, tr_train_result *res, sp_err *err) {
    memset(res, 0, sizeof *res);
    drafter_run r = {.c = c, .res = res};
    int rc = -1;
    if (sp_model_load(&r.target, c->model_dir, c->threads, err)) return -1;
    r.pool = sp_model_pool(r.target);
    if (check_cfg(c, err) || open_data(&r, err) || build_model(&r, err) || build_batches(&r, err)) goto out;
    char run[1024], header[1024];
    tr_loop_cfg lc = loop_cfg(&r, run, sizeof run, header, sizeof header);
    tr_loop_params p = {.w = r.m.w, .n = r.m.n, .t = r.tensors, .nt = r.m.n_params};
    tr_loop_ops ops = {.step = dr_step, .eval = dr_eval, .log_row = dr_log_row, .progress_text = dr_progress_text,
                       .export_model = dr_export, .state = dr_state};
    tr_loop_result lr;
    load_best(&r);
    rc = sp_tr_loop_run(&lc, &p, &ops, &r, &lr, err);
    res->step = lr.step;
    res->loss_first = lr.loss_first;
    res->loss_last = lr.loss_last;
    res->tok_per_s = (double)(lr.step - lr.step0) * step_tokens(&r) / (lr.train_ms / 1000 + 1e-9);
    res->gflops = r.flops / (lr.train_ms / 1000 + 1e-9) / 1e9;
out:
    drafter_run_free(&r);
    return rc;
}

/* the training hooks of the dflash and dspark kinds (kind_hooks.h) */
const struct sp_tr_kind_hooks sp_tr_hooks_dflash = {1, {{"dflash-zlab", TR_ARCH_DFLASH_ZLAB, sp_tr_drafter_dims}}};
const struct sp_tr_kind_hooks sp_tr_hooks_dspark = {
    2, {{"dspark", TR_ARCH_DSPARK, sp_tr_drafter_dims}, {"dflash", TR_ARCH_DFLASH, sp_tr_drafter_dims}}};
