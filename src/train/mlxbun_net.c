/* mlxbun_net.c — mlx-bun's DSpark v1 / faithful DFlash modules in training, float (mlxbun_net.h;
 * the forward / backward body is mlxbun_net_impl.h), and the parameter layout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/mlxbun_layout.h"
#include "train/block_train.h"
#include "train/mlxbun_net.h"

/* 2-D tensors the file stores as the array's transpose: every linear map ([in, out] in the file,
 * [out, in] here) and markov.w2; the embedding tables, markov.w1 and conf.w are kept as stored */
static int mb_transposed(const char *name) {
    return strcmp(name, "mask_emb") && strcmp(name, "pos_emb") && strcmp(name, "block_pos") &&
           strcmp(name, "markov.w1") && strcmp(name, "conf.w");
}

int sp_tr_mb_layout(const tr_mb_dims *d, tr_mb_off *o, tr_param *p, int cap) {
    if (d->L < 1 || d->L > TR_MAX_LAYERS || d->G < 2 || d->d < 1 || d->NH < 1 || d->d % d->NH || d->r < 1 ||
        d->m < 1 || d->m > SP_MLXBUN_MAX_TAPS)
        return -1;
    sp_mlxbun_cfg c = {.gamma = d->G, .d = d->d, .layers = d->L, .heads = d->NH, .rank = d->r,
                       .ff = d->I / d->d, .n_taps = d->m};
    sp_mlxbun_tensor t[9 * TR_MAX_LAYERS + 16];
    int n = sp_mlxbun_tensors(&c, d->faithful, d->Ht, d->V, t, (int)(sizeof t / sizeof *t));
    if (n < 0 || (p && n > cap)) return -1;
    memset(o, 0, sizeof *o);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].shape[0] * (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        const char *nm = t[i].name;
        int l = -1;
        char part[16] = "";
        if (sscanf(nm, "bb.%d.%15s", &l, part) == 2) {
            size_t *dst = !strcmp(part, "attn_norm") ? o->attn_norm : !strcmp(part, "q") ? o->q
                        : !strcmp(part, "k") ? o->k : !strcmp(part, "v") ? o->v : !strcmp(part, "o") ? o->o
                        : !strcmp(part, "ff_norm") ? o->ff_norm : !strcmp(part, "gate") ? o->gate
                        : !strcmp(part, "up") ? o->up : o->down;
            dst[l] = off;
        } else {
            size_t *dst = !strcmp(nm, "ctx_proj") || !strcmp(nm, "W_c") ? &o->ctx : !strcmp(nm, "ctx_norm") ? &o->ctx_norm
                        : !strcmp(nm, "tok_proj") ? &o->tok : !strcmp(nm, "mask_emb") ? &o->mask
                        : !strcmp(nm, "out_norm") ? &o->out_norm : !strcmp(nm, "out_proj") ? &o->out_proj
                        : !strcmp(nm, "markov.w1") ? &o->w1 : !strcmp(nm, "markov.w2") ? &o->w2
                        : !strcmp(nm, "conf.w") ? &o->cw : !strcmp(nm, "conf.b") ? &o->cb : &o->pos;
            *dst = off;
        }
        if (p) {
            tr_param *q = &p[i];
            memset(q, 0, sizeof *q);
            snprintf(q->name, sizeof q->name, "%.31s", t[i].name);
            q->ndim = t[i].ndim;
            int tr = t[i].ndim == 2 && mb_transposed(nm);
            q->shape[0] = tr ? t[i].shape[1] : t[i].shape[0];
            q->shape[1] = tr ? t[i].shape[0] : t[i].shape[1];
            q->off = off, q->n = cnt;
        }
        off += cnt;
    }
    o->n = off;
    return n;
}

int sp_tr_mb_param_transposed(const tr_param *p) { return p->ndim == 2 && mb_transposed(p->name); }

#define real float
#define MB_ACTS tr_mb_acts
#define MB_IN tr_mb_in
#include "train/mlxbun_net_impl.h"

tr_mb_acts *sp_tr_mb_acts_create(const tr_mb_dims *d, int NB, int C, int NR, sp_err *err) {
    return mb_acts_create_impl(d, NB, C, NR, err);
}
void sp_tr_mb_acts_free(tr_mb_acts *a) { mb_acts_free_impl(a); }
