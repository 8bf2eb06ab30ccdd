/* drafter_net.c — parameters, forward and backward of a DFlash / DSpark drafter in training
 * (docs/DFLASH.md §3, docs/DSPARK.md §3–5, §7). Each decoder layer is the training block
 * (block_train.h) on the drafter's description, with this file's kv rows (a group's shared context
 * rows in front of its blocks) and block attention; the fc projection, the heads and the losses
 * are ops of ops.h, wired in the order of the inference forward and run back in reverse. One
 * step's activations live in tr_acts, sized once for the largest batch (no allocation per step). */
#include "train/drafter_net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "formats/tensor_names.h"
#include "train/block_train.h"
#include "train/ops.h"

/* ---- parameters -------------------------------------------------------------------------- */
static void add_param(tr_model *m, const char *name, int64_t rows, int64_t cols) {
    tr_param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->n = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    p->off = m->n;
    m->n += p->n;
}

int sp_tr_model_init(tr_model *m, const tr_dims *d, uint64_t seed, sp_err *err) {
    memset(m, 0, sizeof *m);
    m->d = *d;
    if (d->L < 1 || d->L > TR_MAX_LAYERS || d->m < 1 || d->m > TR_MAX_TAPS || d->B < 1 || d->NH % d->KVH)
        return sp_err_set(err, "drafter dims: layers %d (1..%d), taps %d (1..%d), block %d, heads %d/%d",
                          d->L, TR_MAX_LAYERS, d->m, TR_MAX_TAPS, d->B, d->NH, d->KVH);
    if (d->markov < TR_MARKOV_VANILLA || d->markov > TR_MARKOV_RNN)
        return sp_err_set(err, "drafter dims: Markov head type %d", (int)d->markov);
    int H = d->H, QD = d->NH * d->D, KD = d->KVH * d->D;
    char nm[64];
    add_param(m, "fc.weight", H, (int64_t)d->m * H);
    add_param(m, "hidden_norm.weight", H, 0);
    sp_arch arch = d->gemma ? SP_ARCH_GEMMA4 : SP_ARCH_QWEN3; /* the published drafters' layer */
    for (int l = 0; l < d->L; l++) {
#define LP(role, r, c) (sp_tensor_hf_name(arch, role, l, nm, sizeof nm), add_param(m, nm, r, c))
        LP(SP_TN_Q, QD, H);
        LP(SP_TN_K, KD, H);
        if (!d->k_eq_v) LP(SP_TN_V, KD, H);
        LP(SP_TN_O, H, QD);
        LP(SP_TN_Q_NORM, d->D, 0);
        LP(SP_TN_K_NORM, d->D, 0);
        LP(SP_TN_GATE, d->I, H);
        LP(SP_TN_UP, d->I, H);
        LP(SP_TN_DOWN, H, d->I);
        LP(SP_TN_ATTN_NORM, H, 0);
        LP(d->gemma ? SP_TN_ATTN_POST_NORM : SP_TN_FFN_NORM, H, 0); /* post_attention_layernorm */
        if (d->gemma) {
            LP(SP_TN_FFN_NORM, H, 0);
            LP(SP_TN_FFN_POST_NORM, H, 0);
            LP(SP_TN_LAYER_SCALAR, 1, 0); /* a buffer of 1.0 in the published model: never trained */
        }
#undef LP
    }
    sp_tensor_hf_name(arch, SP_TN_FINAL_NORM, 0, nm, sizeof nm);
    add_param(m, nm, H, 0);
    if (d->r > 0) {
        add_param(m, "markov_head.markov_w1.weight", d->V, d->r);
        add_param(m, "markov_head.markov_w2.weight", d->V, d->r);
        if (d->markov == TR_MARKOV_GATED) { /* docs/DSPARK.md §2 */
            add_param(m, "markov_head.gate_proj.weight", d->r, (int64_t)H + d->r);
            add_param(m, "markov_head.gate_proj.bias", d->r, 0);
        } else if (d->markov == TR_MARKOV_RNN) {
            add_param(m, "markov_head.joint_proj.weight", 3 * (int64_t)d->r, 2 * (int64_t)d->r + H);
            add_param(m, "markov_head.joint_proj.bias", 3 * (int64_t)d->r, 0);
        }
    }
    if (d->conf) {
        add_param(m, "confidence_head.proj.weight", 1, H + (d->conf_with_markov ? d->r : 0));
        add_param(m, "confidence_head.proj.bias", 1, 0);
    }
    m->w = malloc(m->n * sizeof(float));
    m->inv_freq = malloc((size_t)d->D / 2 * sizeof(float));
    m->ones = malloc((size_t)(d->D > H ? d->D : H) * sizeof(float));
    if (!m->w || !m->inv_freq || !m->ones) {
        sp_tr_model_free(m);
        return sp_err_set(err, "drafter: out of memory for %zu parameters", m->n);
    }
    sp_rope_inv_freq(m->inv_freq, d->D, &d->rope);
    for (int i = 0; i < (d->D > H ? d->D : H); i++) m->ones[i] = 1.0f;
    /* norms 1 (their names end in "norm.weight" / "layernorm.weight"), bias 0, the rest N(0, 0.02) */
    for (int i = 0; i < m->n_params; i++) {
        const tr_param *p = &m->params[i];
        float *w = m->w + p->off;
        int is_norm = p->ndim == 1 && (strstr(p->name, "norm.weight") || strstr(p->name, "layer_scalar"));
        int is_bias = strstr(p->name, ".bias") != NULL;
        for (size_t j = 0; j < p->n; j++)
            w[j] = is_norm ? 1.0f : is_bias ? 0.0f : 0.02f * sp_rng_normal(seed, 1000 + (uint64_t)i, j);
    }
    return 0;
}

void sp_tr_model_free(tr_model *m) {
    free(m->w);
    free(m->inv_freq);
    free(m->ones);
    m->w = NULL;
    m->inv_freq = NULL;
    m->ones = NULL;
}

tr_view sp_tr_model_view(const tr_model *m, float *base) {
    tr_view v;
    memset(&v, 0, sizeof v);
    int i = 0;
    v.fc = base + m->params[i++].off;
    v.hidden_norm = base + m->params[i++].off;
    for (int l = 0; l < m->d.L; l++) {
        v.l[l].wq = base + m->params[i++].off;
        v.l[l].wk = base + m->params[i++].off;
        v.l[l].wv = m->d.k_eq_v ? NULL : base + m->params[i++].off;
        v.l[l].wo = base + m->params[i++].off;
        v.l[l].q_norm = base + m->params[i++].off;
        v.l[l].k_norm = base + m->params[i++].off;
        v.l[l].w_gate = base + m->params[i++].off;
        v.l[l].w_up = base + m->params[i++].off;
        v.l[l].w_down = base + m->params[i++].off;
        v.l[l].in_norm = base + m->params[i++].off;
        v.l[l].post_norm = base + m->params[i++].off;
        if (m->d.gemma) {
            v.l[l].pre_ffn_norm = base + m->params[i++].off;
            v.l[l].post_ffn_norm = base + m->params[i++].off;
            v.l[l].layer_scalar = base + m->params[i++].off;
        }
    }
    v.norm = base + m->params[i++].off;
    if (m->d.r > 0) {
        v.mw1 = base + m->params[i++].off;
        v.mw2 = base + m->params[i++].off;
        if (m->d.markov != TR_MARKOV_VANILLA) {
            v.mpw = base + m->params[i++].off;
            v.mpb = base + m->params[i++].off;
        }
    }
    if (m->d.conf) {
        v.cw = base + m->params[i++].off;
        v.cb = base + m->params[i++].off;
    }
    return v;
}

/* ---- batch ---------------------------------------------------------------------------------- */
int sp_tr_batch_alloc(tr_batch *b, int NB, int C, int B, int V, int H, int mH, int with_P, sp_err *err) {
    memset(b, 0, sizeof *b);
    b->NB = NB; b->cap = NB; b->C = C; b->B = B; b->V = V; b->H = H; b->mH = mH;
    size_t T = (size_t)NB * B, R = (size_t)NB * C;
    b->F = calloc(R * mH + 1, sizeof(float));
    b->rpos = calloc(R + 1, sizeof(int32_t));
    b->g_row = calloc((size_t)NB + 1, sizeof(int32_t));
    b->g_elem = calloc((size_t)NB + 1, sizeof(int32_t));
    b->ctx_row = calloc((size_t)NB + 1, sizeof(int32_t));
    b->bpos = calloc((size_t)NB + 1, sizeof(int32_t));
    b->kmask = calloc((size_t)NB * (C + B), 1);
    b->x0 = calloc(T * H, sizeof(float));
    b->prev = calloc(T, sizeof(int32_t));
    b->labels = calloc(T, sizeof(int32_t));
    b->wt = calloc(T, sizeof(float));
    if (with_P) b->P = calloc(T * V, sizeof(float));
    if (!b->F || !b->rpos || !b->g_row || !b->g_elem || !b->ctx_row || !b->bpos || !b->kmask || !b->x0 ||
        !b->prev || !b->labels || !b->wt || (with_P && !b->P)) {
        sp_tr_batch_free(b);
        return sp_err_set(err, "batch: out of memory (%d elements, context %d, block %d)", NB, C, B);
    }
    sp_tr_batch_unshared(b, NB);
    return 0;
}

void sp_tr_batch_free(tr_batch *b) {
    free(b->F); free(b->rpos); free(b->g_row); free(b->g_elem); free(b->ctx_row); free(b->bpos);
    free(b->kmask); free(b->x0); free(b->prev); free(b->labels); free(b->wt); free(b->P); free(b->tinv);
    memset(b, 0, sizeof *b);
}

void sp_tr_batch_clear(tr_batch *b) {
    b->NB = b->NR = b->NG = 0;
    b->g_row[0] = 0;
    b->g_elem[0] = 0;
}

int sp_tr_batch_push(tr_batch *b, int p, int new_group, int pad, int *e, int *row0, int *q0) {
    int C = b->C, B = b->B, lo = pad || p - C >= 0 ? p - C : 0;
    SP_ASSERT(b->NB < b->cap);
    if (new_group || b->NG == 0) {
        b->NG++;
        b->gbase = p - C; /* the first element's window starts at position 0 */
        b->glast = lo - 1;
    }
    SP_ASSERT(p - 1 < lo || p - 1 > b->glast); /* increasing p inside a group */
    int from = b->glast + 1 > lo ? b->glast + 1 : lo, n = p - from > 0 ? p - from : 0;
    SP_ASSERT(b->NR + n <= b->cap * C);
    *e = b->NB++;
    *row0 = b->NR;
    *q0 = from;
    for (int i = 0; i < n; i++) b->rpos[b->NR + i] = from + i - b->gbase;
    b->NR += n;
    if (n > 0) b->glast = p - 1;
    b->ctx_row[*e] = b->NR - C; /* position p−1 is the last row: p−C sits C rows back */
    b->bpos[*e] = p - b->gbase;
    for (int j = 0; j < C; j++) b->kmask[(size_t)*e * (C + B) + j] = p - C + j >= 0;
    for (int k = 0; k < B; k++) b->kmask[(size_t)*e * (C + B) + C + k] = 1;
    b->g_row[b->NG] = b->NR;
    b->g_elem[b->NG] = b->NB;
    return n;
}

void sp_tr_batch_unshared(tr_batch *b, int NB) {
    SP_ASSERT(NB <= b->cap);
    int C = b->C;
    b->NB = b->NG = NB;
    b->NR = NB * C;
    for (int e = 0; e <= NB; e++) {
        b->g_row[e] = e * C;
        b->g_elem[e] = e;
    }
    for (int e = 0; e < NB; e++) {
        b->ctx_row[e] = e * C;
        b->bpos[e] = C;
        for (int j = 0; j < C; j++) b->rpos[e * C + j] = j;
    }
}

/* ---- activations ---------------------------------------------------------------------------- */
/* one layer: its input and what the training block saves (block_train.h; R = T block rows,
 * S = NR + T kv rows: per group [its context rows ; its elements' block rows]) */
typedef struct {
    float *x;                 /* [T, H] layer input (residual stream) */
    tr_block_acts s;
} layer_acts;

/* the gated / rnn Markov heads' saved activations and scratch (ops_impl.h) */
typedef struct {
    float *mix;   /* [T, r] what W2 multiplies */
    float *save;  /* gated: gate [T, r]; rnn: (σ(g), tanh(c), tanh(o)) [T, 3r], slot-major */
    float *in;    /* gated: [h ; code] [T, H+r]; rnn: [s_prev ; code ; h] [T, 2r+H], slot-major */
    float *dmix, *dpre, *din, *ds; /* [T, r], [T, 3r], like in, [NB, r] */
} markov_acts;

struct tr_acts {
    int NB, C, T, S, Tc;          /* capacities: S = NB·(C+B) kv rows, Tc = NB·C context rows */
    float *fcout, *ctx, *rstd_c;  /* [Tc, H] ×2, [Tc] */
    float *scr;                   /* n_scr attention scratches (att_scratch) */
    int n_scr;
    layer_acts l[TR_MAX_LAYERS];
    float *xL;                    /* [T, H] last layer output */
    float *h, *rstd_h;            /* [T, H], [T] final norm */
    float *Z;                     /* [T, V] Markov-corrected logits (U + bias) */
    float *U, *dU;                /* [T, V] soft-capped LM-head logits and their gradient (softcap only) */
    float *bias, *code;           /* [T, V], [T, r] */
    float *conf;                  /* [T] confidence logits */
    markov_acts mk;               /* gated / rnn Markov head */
    float *q, *cstar;             /* [T, V] softmax(Z), [T] */
    float *qT;                    /* [T, V] softmax(β·Z) of the tempered loss (d.n_temps > 0), else NULL */
    int *qpos, *kpos;             /* [T], [S] positions of this batch */
    /* gradient scratch */
    float *dZ, *dconf, *dcode, *dh, *dx, *dctx, *dfc;
    tr_block_scratch bs;          /* the layers' */
    void **all;
    int n_all;
};

/* floats of one attention share's scratch: one element's keys, values, their gradients [C+B, KD]
 * each, and the attention backward's score gradients [KVH, C+B] (KD = KVH·D covers them) */
static size_t att_scratch(int CB, int KD) { return (size_t)CB * (5 * (size_t)KD); }

static float *take(tr_acts *a, size_t n, int *ok) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) *ok = 0;
    a->all[a->n_all++] = p;
    return p;
}

tr_acts *sp_tr_acts_create(const tr_dims *d, int NB, int C, sp_err *err) {
    tr_acts *a = calloc(1, sizeof *a);
    if (!a) { sp_err_set(err, "activations: out of memory"); return NULL; }
    a->all = calloc(64 + 32 * TR_MAX_LAYERS, sizeof(void *));
    if (!a->all) { free(a); sp_err_set(err, "activations: out of memory"); return NULL; }
    int ok = 1, H = d->H, B = d->B;
    size_t T = (size_t)NB * B, S = (size_t)NB * (C + B), Tc = (size_t)NB * C;
    size_t QD = (size_t)d->NH * d->D, KD = (size_t)d->KVH * d->D, V = d->V, I = d->I;
    a->NB = NB; a->C = C; a->T = (int)T; a->S = (int)S; a->Tc = (int)Tc;
    a->fcout = take(a, Tc * H, &ok); a->ctx = take(a, Tc * H, &ok); a->rstd_c = take(a, Tc, &ok);
    for (int l = 0; l < d->L; l++) {
        layer_acts *la = &a->l[l];
        tr_block_acts *t = &la->s;
        la->x = take(a, T * H, &ok);
        t->xn = take(a, T * H, &ok); t->rstd_in = take(a, T, &ok); t->kvin = take(a, S * H, &ok);
        t->qp = take(a, T * QD, &ok); t->rstd_q = take(a, T * d->NH, &ok); t->q = take(a, T * QD, &ok);
        t->kp = take(a, S * KD, &ok); t->rstd_k = take(a, S * d->KVH, &ok); t->k = take(a, S * KD, &ok);
        t->v = take(a, S * KD, &ok);
        t->att = take(a, (size_t)NB * d->NH * B * (C + B), &ok);
        t->ao = take(a, T * QD, &ok); t->o = take(a, T * H, &ok); t->x1 = take(a, T * H, &ok);
        t->xn2 = take(a, T * H, &ok); t->rstd_ffn = take(a, T, &ok);
        t->g = take(a, T * I, &ok); t->u = take(a, T * I, &ok); t->gu = take(a, T * I, &ok);
        t->dn = take(a, T * H, &ok);
        if (d->gemma) {
            t->vp = d->k_eq_v ? NULL : take(a, S * KD, &ok);
            t->rstd_v = take(a, S * d->KVH, &ok);
            t->rstd_o = take(a, T, &ok); t->rstd_dn = take(a, T, &ok);
        }
    }
    a->xL = take(a, T * H, &ok); a->h = take(a, T * H, &ok); a->rstd_h = take(a, T, &ok);
    a->Z = take(a, T * V, &ok); a->q = take(a, T * V, &ok); a->cstar = take(a, T, &ok);
    a->bias = take(a, d->r ? T * V : 0, &ok); a->code = take(a, T * (size_t)d->r, &ok);
    a->conf = take(a, T, &ok);
    if (d->n_temps > 0) a->qT = take(a, T * V, &ok);
    if (d->r > 0 && d->markov != TR_MARKOV_VANILLA) {
        size_t r = (size_t)d->r, wide = d->markov == TR_MARKOV_RNN ? 2 * r + H : r + H;
        a->mk.mix = take(a, T * r, &ok); a->mk.save = take(a, T * 3 * r, &ok); a->mk.in = take(a, T * wide, &ok);
        a->mk.dmix = take(a, T * r, &ok); a->mk.dpre = take(a, T * 3 * r, &ok); a->mk.din = take(a, T * wide, &ok);
        a->mk.ds = take(a, (size_t)NB * r, &ok);
    }
    if (d->softcap > 0) { a->U = take(a, T * V, &ok); a->dU = take(a, T * V, &ok); }
    a->qpos = (int *)take(a, T, &ok); a->kpos = (int *)take(a, S, &ok);
    a->dZ = take(a, T * V, &ok); a->dconf = take(a, T, &ok); a->dcode = take(a, T * (size_t)d->r, &ok);
    a->dh = take(a, T * H, &ok); a->dx = take(a, T * H, &ok);
    tr_block_scratch *bs = &a->bs;
    bs->dh = take(a, T * H, &ok); bs->dxn = take(a, T * H, &ok);
    bs->dgu = take(a, T * I, &ok); bs->dg = take(a, T * I, &ok); bs->du = take(a, T * I, &ok);
    bs->dao = take(a, T * QD, &ok); bs->dq = take(a, T * QD, &ok); bs->dq2 = take(a, T * QD, &ok);
    bs->dk = take(a, S * KD, &ok); bs->dk2 = take(a, S * KD, &ok); bs->dv = take(a, S * KD, &ok);
    bs->dv2 = take(a, S * KD, &ok); bs->dkvin = take(a, S * H, &ok);
    a->dctx = take(a, Tc * H, &ok); a->dfc = take(a, Tc * H, &ok);
    a->scr = calloc(att_scratch(C + B, KD), sizeof(float)); /* more on the first threaded forward */
    a->n_scr = 1;
    if (!a->scr) ok = 0;
    if (!ok) {
        sp_tr_acts_free(a);
        sp_err_set(err, "activations: out of memory for %d elements of context %d", NB, C);
        return NULL;
    }
    return a;
}

void sp_tr_acts_free(tr_acts *a) {
    if (!a) return;
    free(a->scr);
    for (int i = 0; i < a->n_all; i++) free(a->all[i]);
    free(a->all);
    free(a);
}

void sp_tr_dims_alpha(const tr_dims *d, double alpha[3]) {
    if (d->alpha_set) memcpy(alpha, d->alpha, sizeof d->alpha);
    else sp_tr_loss_alpha(d->arch, alpha);
}

double sp_tr_loss_denom(tr_loss_norm norm, double wsum, double anchors) {
    return norm == TR_LOSS_NORM_ANCHORS ? (anchors > 0 ? anchors : 1) : wsum + 1e-6;
}

void sp_tr_loss_alpha(tr_arch arch, double alpha[3]) {
    alpha[0] = arch == TR_ARCH_DSPARK ? 0.1 : 1.0;
    alpha[1] = arch == TR_ARCH_DSPARK ? 0.9 : 0.0;
    alpha[2] = arch == TR_ARCH_DSPARK ? 1.0 : 0.0;
}

static void zero(float *p, size_t n) { memset(p, 0, n * sizeof(float)); }

/* ---- Markov head (docs/DSPARK.md §4): bias [T, V] from code = W1[prev] (teacher forced) -------- */
const char *sp_tr_markov_name(tr_markov_type t) {
    return t == TR_MARKOV_GATED ? "gated" : t == TR_MARKOV_RNN ? "rnn" : "vanilla";
}

const float *sp_tr_acts_logits(const tr_acts *a) { return a->Z; }
const float *sp_tr_acts_conf(const tr_acts *a) { return a->conf; }

static void markov_head_forward(sp_pool *pool, const tr_dims *d, tr_acts *a, const tr_batch *b, const tr_view *w,
                                int T) {
    int r = d->r, V = d->V, H = d->H;
    markov_acts *k = &a->mk;
    if (d->markov == TR_MARKOV_VANILLA) {
        sp_tr_markov_forward(pool, a->bias, a->code, b->prev, w->mw1, w->mw2, T, V, r);
        return;
    }
    sp_tr_gather_forward(a->code, b->prev, w->mw1, T, r);
    if (d->markov == TR_MARKOV_GATED)
        sp_tr_gated_forward(pool, k->mix, k->save, k->in, a->h, a->code, w->mpw, w->mpb, T, H, r);
    else
        sp_tr_rnn_forward(pool, k->mix, k->save, k->in, a->h, a->code, w->mpw, w->mpb, T / d->B, d->B, H, r);
    sp_tr_linear_forward(pool, a->bias, k->mix, w->mw2, T, r, V); /* bias = W2 · mix */
}

/* a->dcode holds the confidence head's share on entry; adds into a->dh and the head's grads */
static void markov_head_backward(sp_pool *pool, const tr_dims *d, tr_acts *a, const tr_batch *b, const tr_view *w,
                                 const tr_view *g, int T) {
    int r = d->r, V = d->V, H = d->H;
    markov_acts *k = &a->mk;
    if (d->markov == TR_MARKOV_VANILLA) {
        sp_tr_markov_backward(pool, g->mw1, g->mw2, a->dcode, a->dZ, a->code, b->prev, w->mw2, T, V, r);
        return;
    }
    zero(k->dmix, (size_t)T * r);
    sp_tr_linear_backward(pool, k->dmix, g->mw2, a->dZ, k->mix, w->mw2, T, r, V);
    if (d->markov == TR_MARKOV_GATED)
        sp_tr_gated_backward(pool, a->dh, a->dcode, g->mpw, g->mpb, k->dpre, k->din, k->dmix, k->in, k->save, a->code,
                          w->mpw, T, H, r);
    else
        sp_tr_rnn_backward(pool, a->dh, a->dcode, g->mpw, g->mpb, k->dpre, k->din, k->ds, k->dmix, k->save, k->in,
                        w->mpw, T / d->B, d->B, H, r);
    sp_tr_gather_backward(g->mw1, a->dcode, b->prev, T, r);
}

/* ---- kv rows -------------------------------------------------------------------------------
 * The K / V projections' input rows, group by group: group g's context rows, then its elements'
 * block rows. Context row r of group g is kv row r + g_elem[g]·B; block slot k of element e is
 * kv row g_row[g+1] + e·B + k. S = NR + NB·B. */
static void kv_positions(tr_acts *a, const tr_batch *b) {
    int B = b->B;
    for (int g = 0; g < b->NG; g++) {
        int r0 = b->g_row[g], r1 = b->g_row[g + 1], e0 = b->g_elem[g], e1 = b->g_elem[g + 1];
        for (int r = r0; r < r1; r++) a->kpos[r + e0 * B] = b->rpos[r];
        for (int e = e0; e < e1; e++)
            for (int k = 0; k < B; k++) a->kpos[r1 + e * B + k] = a->qpos[e * B + k] = b->bpos[e] + k;
    }
}

/* element e (of group g): its C window rows and B block rows of k / v into kx / vx (zeros where
 * masked), the key order of tr_attention_*: [window ; block] */
static void gather_kv(float *kx, float *vx, const float *k, const float *v, const tr_batch *b, int g, int e,
                      int KD) {
    int C = b->C, B = b->B, off = b->g_elem[g] * B;
    const uint8_t *km = b->kmask + (size_t)e * (C + B);
    size_t row = sizeof(float) * KD;
    for (int j = 0; j < C; j++) {
        if (!km[j]) {
            memset(kx + (size_t)j * KD, 0, row);
            memset(vx + (size_t)j * KD, 0, row);
            continue;
        }
        size_t r = (size_t)(b->ctx_row[e] + j + off);
        SP_ASSERT(b->ctx_row[e] + j >= b->g_row[g] && b->ctx_row[e] + j < b->g_row[g + 1]);
        memcpy(kx + (size_t)j * KD, k + r * KD, row);
        memcpy(vx + (size_t)j * KD, v + r * KD, row);
    }
    size_t br = (size_t)b->g_row[g + 1] + (size_t)e * B;
    memcpy(kx + (size_t)C * KD, k + br * KD, row * B);
    memcpy(vx + (size_t)C * KD, v + br * KD, row * B);
}

/* the reverse: dk / dv of element e's visible keys added into the kv rows */
static void scatter_add_kv(float *dk, float *dv, const float *dkx, const float *dvx, const tr_batch *b, int g,
                           int e, int KD) {
    int C = b->C, B = b->B, off = b->g_elem[g] * B;
    const uint8_t *km = b->kmask + (size_t)e * (C + B);
    for (int j = 0; j < C + B; j++) {
        if (!km[j]) continue;
        size_t r = j < C ? (size_t)(b->ctx_row[e] + j + off) : (size_t)b->g_row[g + 1] + (size_t)e * B + (j - C);
        float *xk = dk + r * KD, *xv = dv + r * KD;
        const float *yk = dkx + (size_t)j * KD, *yv = dvx + (size_t)j * KD;
        for (int i = 0; i < KD; i++) {
            xk[i] += yk[i];
            xv[i] += yv[i];
        }
    }
}

/* ---- attention: every element's block over its window and its block -------------------------
 * Threaded over groups (a group's kv rows are only touched by its own elements, one after the
 * other, so results do not depend on the thread count). Backward: each element's dK / dV land
 * in its own key rows, then add into the group's kv rows. */
typedef struct {
    const tr_dims *d;
    tr_acts *a;
    const tr_batch *b;
    float *ao, *att, *dq, *dk, *dv;
    const float *q, *k, *v, *dao, *att_in;
    int bwd, nw;
    float scale;
} att_job;

static void att_share(void *ctx, int i, int n) {
    (void)n;
    att_job *j = ctx;
    if (i >= j->nw) return;
    const tr_dims *d = j->d;
    const tr_batch *b = j->b;
    tr_acts *a = j->a;
    int B = b->B, CB = b->C + B, QD = d->NH * d->D, KD = d->KVH * d->D, lo, hi;
    float *kx = a->scr + (size_t)i * att_scratch(CB, KD), *vx = kx + (size_t)CB * KD, *dkx = vx + (size_t)CB * KD;
    float *dvx = dkx + (size_t)CB * KD, *dp = dvx + (size_t)CB * KD;
    sp_pool_split(b->NB, 1, i, j->nw, &lo, &hi);
    for (int g = 0; g < b->NG; g++) {
        if (b->g_elem[g] < lo || b->g_elem[g] >= hi) continue; /* a group belongs to the share of its first element */
        for (int e = b->g_elem[g]; e < b->g_elem[g + 1]; e++) {
            const uint8_t *km = b->kmask + (size_t)e * CB;
            size_t att = (size_t)e * d->NH * B * CB;
            /* window and block already adjacent kv rows (an unshared element): no copies */
            int direct = e == b->g_elem[g] && b->ctx_row[e] >= b->g_row[g] && b->ctx_row[e] + b->C == b->g_row[g + 1];
            size_t off = ((size_t)b->ctx_row[e] + (size_t)e * B) * KD;
            if (!direct) gather_kv(kx, vx, j->k, j->v, b, g, e, KD);
            const float *kk = direct ? j->k + off : kx, *vv = direct ? j->v + off : vx;
            tr_attn_shape sh = {.NB = 1, .Tq = B, .Tk = CB, .NH = d->NH, .KVH = d->KVH, .D = d->D, .kmask = km,
                                .scale = j->scale};
            if (!j->bwd) {
                sp_tr_attention_forward(NULL, j->ao + (size_t)e * B * QD, j->att + att, j->q + (size_t)e * B * QD, kk, vv,
                                     &sh);
                continue;
            }
            if (!direct) {
                zero(dkx, (size_t)CB * KD);
                zero(dvx, (size_t)CB * KD);
            }
            float *dk = direct ? j->dk + off : dkx, *dv = direct ? j->dv + off : dvx;
            sp_tr_attention_backward(NULL, j->dq + (size_t)e * B * QD, dk, dv, dp, j->dao + (size_t)e * B * QD,
                                  j->q + (size_t)e * B * QD, kk, vv, j->att_in + att, &sh);
            if (!direct) scatter_add_kv(j->dk, j->dv, dkx, dvx, b, g, e, KD);
        }
    }
}

static void attention(sp_pool *pool, att_job *j) {
    tr_acts *a = j->a;
    int n = pool ? sp_pool_size(pool) : 1;
    if (n > a->n_scr) { /* once: a scratch per thread (on failure, fewer shares do the work) */
        float *more = calloc((size_t)n * att_scratch(a->C + j->b->B, j->d->KVH * j->d->D), sizeof(float));
        if (more) {
            free(a->scr);
            a->scr = more;
            a->n_scr = n;
        }
    }
    j->nw = n < a->n_scr ? n : a->n_scr;
    sp_pool_run(pool, att_share, j);
}

/* ---- the layers: the training block (block_train.h) on the drafter's description -------------- */
typedef struct {
    const tr_dims *d;
    tr_acts *a;
    const tr_batch *b;
    float scale;
} layer_ctx;

/* kv rows, group by group: [the group's context rows ; its elements' block rows of xn] */
static void layer_kv_rows(void *ctx, float *kvin, const float *xn) {
    const layer_ctx *c = ctx;
    const tr_batch *b = c->b;
    int B = b->B, H = c->d->H;
    for (int g = 0; g < b->NG; g++) {
        int r0 = b->g_row[g], r1 = b->g_row[g + 1], e0 = b->g_elem[g], e1 = b->g_elem[g + 1];
        memcpy(kvin + ((size_t)r0 + (size_t)e0 * B) * H, c->a->ctx + (size_t)r0 * H, sizeof(float) * (r1 - r0) * H);
        memcpy(kvin + ((size_t)r1 + (size_t)e0 * B) * H, xn + (size_t)e0 * B * H, sizeof(float) * (e1 - e0) * B * H);
    }
}

/* the kv rows' gradient back to the context rows (a->dctx) and the block rows (dxn) */
static void layer_kv_rows_backward(void *ctx, float *dxn, const float *dkvin) {
    const layer_ctx *c = ctx;
    const tr_batch *b = c->b;
    int B = b->B, H = c->d->H;
    for (int gi = 0; gi < b->NG; gi++) {
        int r0 = b->g_row[gi], r1 = b->g_row[gi + 1], e0 = b->g_elem[gi], e1 = b->g_elem[gi + 1];
        const float *kc = dkvin + ((size_t)r0 + (size_t)e0 * B) * H, *kb = dkvin + ((size_t)r1 + (size_t)e0 * B) * H;
        float *dc = c->a->dctx + (size_t)r0 * H, *da = dxn + (size_t)e0 * B * H;
        for (size_t i = 0; i < (size_t)(r1 - r0) * H; i++) dc[i] += kc[i];
        for (size_t i = 0; i < (size_t)(e1 - e0) * B * H; i++) da[i] += kb[i];
    }
}

static void layer_attn_forward(void *ctx, sp_pool *pool, float *ao, float *att, const float *q, const float *k,
                               const float *v) {
    const layer_ctx *c = ctx;
    att_job j = {.d = c->d, .a = c->a, .b = c->b, .ao = ao, .att = att, .q = q, .k = k, .v = v, .scale = c->scale};
    attention(pool, &j);
}

static void layer_attn_backward(void *ctx, sp_pool *pool, float *dq, float *dk, float *dv, const float *dao,
                                const float *q, const float *k, const float *v, const float *att) {
    const layer_ctx *c = ctx;
    att_job j = {.d = c->d, .a = c->a, .b = c->b, .dq = dq, .dk = dk, .dv = dv, .dao = dao, .q = q, .k = k, .v = v,
                 .att_in = att, .bwd = 1, .scale = c->scale};
    attention(pool, &j);
}

/* the drafter layer as sp_block_desc describes it: Qwen3's block (q/k norms, SwiGLU) or Gemma-4's
 * (four norms, weightless v_norm, V = raw K when k_eq_v, GeGLU, scale 1), non-causal block attention */
static sp_block_desc layer_desc(const tr_dims *d) {
    return (sp_block_desc){.H = d->H, .NH = d->NH, .KVH = d->KVH, .D = d->D, .I = d->I, .post_norms = d->gemma,
                           .kv_proj = 1, .v_proj = !d->k_eq_v, .qk_norm = 1, .v_norm = d->gemma,
                           .act = d->gelu ? SP_ACT_GELU_TANH : SP_ACT_SILU, .attn = SP_ATTN_BLOCK,
                           .attn_scale = d->gemma ? 1.0f : 1.0f / sqrtf((float)d->D), .eps = (float)d->eps};
}

/* layer l's weights in the block's roles: Llama / Qwen3's post_attention_layernorm is the pre-MLP
 * norm, Gemma's the post-attention one; layer_scalar is 1 */
static tr_block_w layer_w(const tr_model *m, const tr_view *w, int l) {
    int gm = m->d.gemma;
    return (tr_block_w){.attn_norm = w->l[l].in_norm, .wq = w->l[l].wq, .wk = w->l[l].wk, .wv = w->l[l].wv,
                        .wo = w->l[l].wo, .q_norm = w->l[l].q_norm, .k_norm = w->l[l].k_norm,
                        .attn_post_norm = gm ? w->l[l].post_norm : NULL,
                        .ffn_norm = gm ? w->l[l].pre_ffn_norm : w->l[l].post_norm,
                        .ffn_post_norm = gm ? w->l[l].post_ffn_norm : NULL, .w_gate = w->l[l].w_gate,
                        .w_up = w->l[l].w_up, .w_down = w->l[l].w_down, .layer_scalar = 1.0f, .inv_freq = m->inv_freq,
                        .ones = m->ones};
}

/* the same roles in a gradient view */
static tr_block_g layer_g(const tr_dims *d, const tr_view *g, int l) {
    int gm = d->gemma;
    return (tr_block_g){.attn_norm = g->l[l].in_norm, .wq = g->l[l].wq, .wk = g->l[l].wk, .wv = g->l[l].wv,
                        .wo = g->l[l].wo, .q_norm = g->l[l].q_norm, .k_norm = g->l[l].k_norm,
                        .attn_post_norm = gm ? g->l[l].post_norm : NULL,
                        .ffn_norm = gm ? g->l[l].pre_ffn_norm : g->l[l].post_norm,
                        .ffn_post_norm = gm ? g->l[l].post_ffn_norm : NULL, .w_gate = g->l[l].w_gate,
                        .w_up = g->l[l].w_up, .w_down = g->l[l].w_down};
}

/* the rows of one step: T block rows at qpos, S kv rows at kpos, the drafter's attention */
static tr_block_io layer_io(layer_ctx *c, int T, int S) {
    return (tr_block_io){.R = T, .S = S, .qpos = c->a->qpos, .kpos = c->a->kpos, .ctx = c,
                         .kv_rows = layer_kv_rows, .kv_rows_backward = layer_kv_rows_backward,
                         .attn_forward = layer_attn_forward, .attn_backward = layer_attn_backward};
}

/* ---- forward -------------------------------------------------------------------------------- */
void sp_tr_forward(sp_pool *pool, const tr_model *m, tr_acts *a, const tr_batch *b, const float *Wlm,
                double denom, tr_stats *st, float *cstar) {
    const tr_dims *d = &m->d;
    SP_ASSERT(b->NB <= a->NB && b->NR <= a->Tc && b->C == a->C && b->B == d->B);
    tr_view w = sp_tr_model_view(m, m->w);
    int NB = b->NB, B = d->B, H = d->H, V = d->V, r = d->r;
    int T = NB * B, Tc = b->NR, S = Tc + T;
    float eps = (float)d->eps;

    kv_positions(a, b);
    /* ctx = RMSNorm_hidden(F · W_fcᵀ), shared by every layer (docs/DFLASH.md §3) and every element of a group */
    if (Tc > 0) {
        sp_tr_linear_forward(pool, a->fcout, b->F, w.fc, Tc, d->m * H, H);
        sp_tr_rmsnorm_forward(a->ctx, a->rstd_c, a->fcout, w.hidden_norm, Tc, H, eps);
    }
    memcpy(a->l[0].x, b->x0, sizeof(float) * T * H);
    sp_block_desc bd = layer_desc(d);
    layer_ctx lc = {.d = d, .a = a, .b = b, .scale = bd.attn_scale};
    tr_block_io io = layer_io(&lc, T, S);
    for (int l = 0; l < d->L; l++) {
        tr_block_w bw = layer_w(m, &w, l);
        sp_tr_block_forward(pool, &bd, &bw, &io, a->l[l].x, l + 1 < d->L ? a->l[l + 1].x : a->xL, &a->l[l].s);
    }
    sp_tr_rmsnorm_forward(a->h, a->rstd_h, a->xL, w.norm, T, H, eps);
    /* Z = h · W_lmᵀ (+ Markov bias W2 · W1[prev]), docs/DSPARK.md §3–4 */
    sp_tr_lmhead_forward(pool, a->Z, a->h, Wlm, T, H, V);
    if (d->softcap > 0) { /* U = c·tanh(U/c) before the Markov bias, as the inference path (docs/DSPARK.md §3) */
        sp_tr_softcap_forward(a->Z, a->Z, (size_t)T * V, d->softcap);
        memcpy(a->U, a->Z, sizeof(float) * T * V);
    }
    if (r > 0) {
        markov_head_forward(pool, d, a, b, &w, T);
        for (size_t i = 0; i < (size_t)T * V; i++) a->Z[i] += a->bias[i];
    }
    if (d->conf) sp_tr_conf_forward(a->conf, a->h, d->conf_with_markov ? a->code : NULL, w.cw, w.cb, T, H,
                                 d->conf_with_markov ? r : 0);
    double alpha[4], terms[5] = {0};
    sp_tr_dims_alpha(d, alpha);
    alpha[3] = d->alpha_kl;
    if (b->tinv) {
        SP_ASSERT(a->qT && b->P);
        st->loss = sp_tr_spark_loss_temp_forward(terms, a->q, a->qT, a->cstar, a->Z, b->P, b->labels,
                                              d->conf ? a->conf : NULL, b->wt, b->tinv, T, V, alpha, denom);
    } else {
        st->loss = sp_tr_spark_loss_forward(terms, a->q, a->cstar, a->Z, b->P, b->labels, d->conf ? a->conf : NULL,
                                         b->wt, T, V, alpha, denom);
    }
    st->ce = terms[0]; st->l1 = terms[1]; st->bce = terms[2]; st->wsum = terms[3]; st->kl = terms[4];
    if (d->conf && b->cstar_target) { /* swap the BCE term for one against the fixed targets */
        double bce = 0;
        for (int t = 0; t < T; t++) {
            double z = a->conf[t], y = b->cstar_target[t];
            bce += b->wt[t] * ((z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z))));
        }
        st->loss += alpha[2] * (bce - terms[2]) / denom;
        st->bce = bce;
    }
    if (cstar && b->P) memcpy(cstar, a->cstar, sizeof(float) * T);
    if (d->conf && b->cstar_target) memcpy(a->cstar, b->cstar_target, sizeof(float) * T);
}

/* ---- backward ------------------------------------------------------------------------------- */

void sp_tr_backward(sp_pool *pool, const tr_model *m, tr_acts *a, const tr_batch *b, const float *Wlm,
                 double denom, float *grad) {
    const tr_dims *d = &m->d;
    tr_view w = sp_tr_model_view(m, m->w), g = sp_tr_model_view(m, grad);
    int NB = b->NB, B = d->B, H = d->H, V = d->V, r = d->r;
    int T = NB * B, Tc = b->NR, S = Tc + T;
    double alpha[4];
    sp_tr_dims_alpha(d, alpha);
    alpha[3] = d->alpha_kl;

    zero(a->dZ, (size_t)T * V);
    zero(a->dconf, T);
    if (b->tinv)
        sp_tr_spark_loss_temp_backward(a->dZ, a->dconf, a->q, a->qT, a->cstar, b->P, b->labels,
                                    d->conf ? a->conf : NULL, b->wt, b->tinv, T, V, alpha, denom);
    else
        sp_tr_spark_loss_backward(a->dZ, a->dconf, a->q, a->cstar, b->P, b->labels, d->conf ? a->conf : NULL, b->wt,
                               T, V, alpha, denom);
    zero(a->dh, (size_t)T * H);
    zero(a->dcode, (size_t)T * r);
    int cr = d->conf_with_markov ? r : 0;
    if (d->conf) sp_tr_conf_backward(a->dh, cr ? a->dcode : NULL, g.cw, g.cb, a->dconf, a->h, cr ? a->code : NULL,
                                  w.cw, T, H, cr);
    if (r > 0) markov_head_backward(pool, d, a, b, &w, &g, T);
    if (d->softcap > 0) {
        zero(a->dU, (size_t)T * V);
        sp_tr_softcap_backward(a->dU, a->dZ, a->U, (size_t)T * V, d->softcap);
        sp_tr_lmhead_backward(pool, a->dh, a->dU, Wlm, T, H, V);
    } else {
        sp_tr_lmhead_backward(pool, a->dh, a->dZ, Wlm, T, H, V);
    }
    zero(a->dx, (size_t)T * H);
    sp_tr_rmsnorm_backward(a->dx, g.norm, a->dh, a->xL, w.norm, a->rstd_h, T, H);

    zero(a->dctx, (size_t)Tc * H);
    sp_block_desc bd = layer_desc(d);
    layer_ctx lc = {.d = d, .a = a, .b = b, .scale = bd.attn_scale};
    tr_block_io io = layer_io(&lc, T, S);
    for (int l = d->L - 1; l >= 0; l--) {
        tr_block_w bw = layer_w(m, &w, l);
        tr_block_g bg = layer_g(d, &g, l);
        sp_tr_block_backward(pool, &bd, &bw, &bg, &io, a->l[l].x, &a->l[l].s, &a->bs, a->dx);
    }
    if (Tc > 0) {
        zero(a->dfc, (size_t)Tc * H);
        sp_tr_rmsnorm_backward(a->dfc, g.hidden_norm, a->dctx, a->fcout, w.hidden_norm, a->rstd_c, Tc, H);
        sp_tr_linear_backward(pool, NULL, g.fc, a->dfc, b->F, w.fc, Tc, d->m * H, H);
    }
}
