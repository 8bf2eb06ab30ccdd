/* mlxbun_train.c — mlx-bun's modules in the drafter trainer (mlxbun_train.h): sizing, mlx-bun's
 * initialisation (formats/mlxbun_layout.h's stream, transposed into the ops' layout), the batch
 * view, and the checkpoint in mlx-bun's files. */
#include "train/mlxbun_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "model/model.h"

void sp_tr_mlxbun_defaults(tr_train_cfg *c, tr_arch arch) {
    c->layout_mlxbun = 1;
    c->block = 5;
    c->layers = arch == TR_ARCH_DFLASH ? 5 : 2;
    c->mb_dim = 1024;
    c->mb_heads = 8;
    c->mb_ff_mult = 2;
    c->markov_rank = 256;
    c->gamma_block = 1;
    c->loss_norm = TR_LOSS_NORM_ANCHORS;
}

/* src [a, b] → dst [b, a] */
static void transpose(float *dst, const float *src, int64_t a, int64_t b) {
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++) dst[j * a + i] = src[i * b + j];
}

int sp_tr_mb_setup(tr_mb_run *mb, tr_model *m, const tr_train_cfg *c, sp_model *target, int n_taps,
                   const int *taps, int cap, sp_err *err) {
    const sp_config *tc = sp_model_config(target);
    memset(mb, 0, sizeof *mb);
    memset(m, 0, sizeof *m);
    int faithful = c->arch == TR_ARCH_DFLASH;
    if (c->arch != TR_ARCH_DSPARK && !faithful)
        return sp_err_set(err, "train --layout mlx-bun: --arch dspark (v1) or dflash (faithful DFlash), not %s",
                          sp_tr_arch_name(c->arch));
    if (c->markov_head != TR_MARKOV_VANILLA)
        return sp_err_set(err, "train --layout mlx-bun: its Markov head is the vanilla one (markov.w1 / markov.w2); "
                               "--markov-head %s is a DeepSpec head", sp_tr_markov_name(c->markov_head));
    if (!faithful && taps[n_taps - 1] != tc->n_layers)
        return sp_err_set(err, "train --layout mlx-bun --arch dspark (v1): the context is the post-final-norm hidden, "
                               "so the shards' last tap must be the final norm %d (mlx-bun v1 shards, or regen "
                               "--taps ...,%d); it is %d", tc->n_layers, tc->n_layers, taps[n_taps - 1]);
    if (faithful && n_taps > SP_MLXBUN_MAX_TAPS)
        return sp_err_set(err, "train --layout mlx-bun: %d taps (at most %d)", n_taps, SP_MLXBUN_MAX_TAPS);
    if (c->mb_dim < 1 || c->mb_heads < 1 || c->mb_dim % c->mb_heads || (c->mb_dim / c->mb_heads) % 2 ||
        c->mb_ff_mult < 1 || c->layers > TR_MAX_LAYERS || c->block < 2 || c->markov_rank < 1)
        return sp_err_set(err, "train --layout mlx-bun: dDraft %d must split into %d heads of an even size, ffMult "
                               "%d >= 1, layers %d (1..%d), block %d >= 2, Markov rank %d >= 1",
                          c->mb_dim, c->mb_heads, c->mb_ff_mult, c->layers, TR_MAX_LAYERS, c->block, c->markov_rank);
    tr_mb_dims *d = &mb->d;
    *d = (tr_mb_dims){.faithful = faithful, .d = c->mb_dim, .NH = c->mb_heads, .Dh = c->mb_dim / c->mb_heads,
                      .I = c->mb_ff_mult * c->mb_dim, .L = c->layers, .Ht = tc->hidden_size, .V = tc->vocab_size,
                      .m = n_taps, .G = c->block, .r = c->markov_rank, .eps = tc->rms_eps,
                      .softcap = tc->final_softcap, .alpha = {0.1, 0.9, 1.0}};
    if (c->loss_weights_set) memcpy(d->alpha, c->loss_weights, sizeof d->alpha);
    mb->cfg = (sp_mlxbun_cfg){.gamma = d->G, .d = d->d, .layers = d->L, .heads = d->NH, .rank = d->r,
                              .ff = c->mb_ff_mult, .n_taps = faithful ? n_taps : 0};
    for (int i = 0; faithful && i < n_taps; i++) mb->cfg.taps[i] = taps[i];
    const char *base = strrchr(c->model_dir, '/');
    snprintf(mb->target_id, sizeof mb->target_id, "%s", base && base[1] ? base + 1 : c->model_dir);
    mb->embed = sp_model_embed_table(target);
    mb->C = faithful ? c->ctx : 1;
    mb->cap = cap;
    if (faithful && mb->C < 1) return sp_err_set(err, "train --layout mlx-bun --arch dflash: --ctx must be at least 1");
    m->n_params = sp_tr_mb_layout(d, &mb->o, m->params, (int)(sizeof m->params / sizeof *m->params));
    if (m->n_params < 0) return sp_err_set(err, "train --layout mlx-bun: the module does not fit the parameter table");
    m->n = mb->o.n;
    m->d = (tr_dims){.arch = c->arch, .H = d->Ht, .NH = d->NH, .KVH = d->NH, .D = d->Dh, .I = d->I, .L = d->L,
                     .V = d->V, .m = n_taps, .B = d->G, .r = d->r, .conf = 1, .conf_with_markov = 1,
                     .n_target_layers = tc->n_layers, .eps = d->eps, .softcap = d->softcap};
    memcpy(m->d.alpha, d->alpha, sizeof d->alpha), m->d.alpha_set = 1;
    memcpy(m->d.tap_layers, taps, sizeof(int) * (size_t)n_taps);
    /* mlx-bun's initial values in the file's layout, then into the array's */
    sp_mlxbun_tensor t[9 * TR_MAX_LAYERS + 16];
    int nt = sp_mlxbun_tensors(&mb->cfg, faithful, d->Ht, d->V, t, (int)(sizeof t / sizeof *t));
    float **vals = calloc((size_t)nt, sizeof *vals);
    int ok = vals && nt == m->n_params && (m->w = malloc(sizeof(float) * m->n));
    for (int i = 0; ok && i < nt; i++) ok = (vals[i] = malloc(sizeof(float) * m->params[i].n)) != NULL;
    if (ok) {
        sp_mlxbun_init_values(t, nt, c->seed, vals);
        for (int i = 0; i < nt; i++) {
            const tr_param *p = &m->params[i];
            if (sp_tr_mb_param_transposed(p)) transpose(m->w + p->off, vals[i], t[i].shape[0], t[i].shape[1]);
            else memcpy(m->w + p->off, vals[i], sizeof(float) * p->n);
        }
    }
    for (int i = 0; vals && i < nt; i++) free(vals[i]);
    free(vals);
    if (!ok) return sp_err_set(err, "train --layout mlx-bun: out of memory for %zu parameters", m->n);
    if (!(mb->anchor = malloc(sizeof(float) * (size_t)cap * d->Ht)))
        return sp_err_set(err, "train --layout mlx-bun: out of memory");
    if (!(mb->acts = sp_tr_mb_acts_create(d, cap, mb->C, cap * mb->C, err))) return -1;
    return 0;
}

void sp_tr_mb_free(tr_mb_run *mb) {
    sp_tr_mb_acts_free(mb->acts);
    free(mb->anchor);
    mb->acts = NULL, mb->anchor = NULL;
}

tr_mb_in sp_tr_mb_view(tr_mb_run *mb, const tr_batch *b, const float *Wlm) {
    int G = mb->d.G, Ht = mb->d.Ht;
    for (int e = 0; e < b->NB; e++) /* slot 0's previous token is the anchor x_p */
        sp_mat_row_f32(mb->embed, b->prev[e * G], mb->anchor + (size_t)e * Ht);
    return (tr_mb_in){.NB = b->NB, .C = b->C, .NR = b->NR, .F = b->F, .ctx_row = b->ctx_row, .kmask = b->kmask,
                      .anchor = mb->anchor, .prev = b->prev, .labels = b->labels, .wt = b->wt, .P = b->P,
                      .Wlm = Wlm, .cstar_target = b->cstar_target};
}

int sp_tr_mb_export(const char *dir, const tr_model *m, const tr_mb_run *mb, sp_err *err) {
    sp_mlxbun_tensor t[9 * TR_MAX_LAYERS + 16];
    int nt = sp_mlxbun_tensors(&mb->cfg, mb->d.faithful, mb->d.Ht, mb->d.V, t, (int)(sizeof t / sizeof *t));
    if (nt != m->n_params) return sp_err_set(err, "%s: the parameter table does not match mlx-bun's layout", dir);
    if (sp_mkdir_p(dir, err)) return -1;
    float *buf = malloc(sizeof(float) * m->n);
    st_writer *w = sp_st_writer_create();
    char *js = sp_mlxbun_json(&mb->cfg, mb->d.faithful, mb->target_id, mb->d.Ht, mb->d.V, mb->d.eps, t, nt);
    char path[4096];
    int rc = !buf || !w || !js ? sp_err_set(err, "%s: out of memory", dir) : 0;
    for (int i = 0; !rc && i < nt; i++) {
        const tr_param *p = &m->params[i];
        if (sp_tr_mb_param_transposed(p)) transpose(buf + p->off, m->w + p->off, p->shape[0], p->shape[1]);
        else memcpy(buf + p->off, m->w + p->off, sizeof(float) * p->n);
        rc = sp_st_writer_add_ref(w, t[i].name, SP_DT_F32, t[i].ndim, t[i].shape, buf + p->off, err);
    }
    if (!rc) rc = sp_path_join(path, sizeof path, dir, "model.safetensors") || sp_st_writer_save(w, path, err);
    if (!rc) rc = sp_path_join(path, sizeof path, dir, "dspark.json") || sp_write_file_atomic(path, js, strlen(js), err);
    if (w) sp_st_writer_free(w);
    free(buf);
    free(js);
    return rc ? -1 : 0;
}

double sp_tr_mb_step_flops(const tr_mb_dims *d, int NB, int C, int NR) {
    double Rr = d->faithful ? d->G : d->G + 1, R = NB * Rr, T = (double)NB * d->G;
    double S = d->faithful ? (double)NR + T : R, D = d->d, I = d->I, Ht = d->Ht, V = d->V, r = d->r;
    double layer = R * D * D * 2 + 2 * S * D * D + 3 * R * D * I + 2 * R * (d->faithful ? C + d->G : Rr) * D;
    double ctx = d->faithful ? (double)NR * d->m * Ht * D : NB * Ht * D;
    double fwd = ctx + NB * Ht * D + d->L * layer + T * D * Ht + T * Ht * V + T * r * V;
    double bwd = ctx + NB * Ht * D + 2 * d->L * layer + 2 * T * D * Ht + T * Ht * V + 2 * T * r * V;
    return 2 * (fwd + bwd + T * Ht * V);
}
