/* lm_impl.h — forward and backward of the target LM (lm.h), written once over `real` with the
 * float names and compiled by lm.c (real = float: threaded GEMMs and attention) and lm_f64.c
 * (real = double, every name renamed to its _f64 twin: naive loops, the finite-difference
 * reference). Every step is an op of ops.h; the backward runs them in reverse, quoting the
 * forward line it differentiates. */

typedef struct {
    real *x;                /* [N, H] layer input (the residual stream) */
    real *r1, *xn;          /* input norm: rstd [N], output [N, H] */
    real *qp, *rq, *q;      /* q_proj out [N, NH·D], q_norm rstd [N·NH], normed + roped q */
    real *kp, *rk, *k;      /* the same for K [N, KVH·D] */
    real *vp, *rv, *v;      /* v_proj out, v_norm rstd, normed v */
    real *att;              /* [NB, NH, T, T] attention probabilities */
    real *ao, *o, *rpa;     /* attention out [N, NH·D], o_proj out [N, H], post_attn rstd [N] */
    real *x2, *rpf, *xn2;   /* residual after attention, pre_ffn rstd, pre_ffn out */
    real *g, *u, *gu;       /* [N, I] gate, up, gelu(gate)·up */
    real *dn, *rpo;         /* down_proj out [N, H], post_ffn rstd [N] */
} lm_layer_acts;

struct lm_acts {
    int NB, T, n_layers;    /* capacity */
    int nb, t;              /* shape of the last forward */
    int32_t *tokens, *labels; /* [N] (labels: −1 replaced by 0 with weight 0) */
    real *wt;               /* [N] 1 = scored */
    double denom;           /* number of scored positions */
    int *pos;               /* [N] position of each row inside its sequence */
    real *ones;             /* [max_D] weightless-norm weight */
    lm_layer_acts *l;      /* [L] */
    real *xf, *rf, *hf;     /* final residual, final-norm rstd, normed hidden */
    real *logits, *probs;   /* [N, V] softcapped logits, softmax */
    /* backward scratch */
    real *dx, *dxn, *dh, *tmp, *dq, *dk, *dv, *dq2, *dk2, *dv2, *dao, *dg, *du, *dgu, *dp, *dZ;
};

struct lm_acts *lm_acts_create(const lm_layout *lay, int NB, int T, sp_err *err) {
    const sp_config *c = &lay->cfg;
    struct lm_acts *a = calloc(1, sizeof *a);
    if (!a) goto oom;
    size_t N = (size_t)NB * T, H = c->hidden_size, V = c->vocab_size, L = c->n_layers;
    size_t QD = lay->max_QD, KD = lay->max_KD, I = lay->max_I, NH = c->n_heads;
    int ok = 1;
#define ALLOC(p, count) ok &= ((p) = calloc((size_t)(count) + 1, sizeof *(p))) != NULL
    a->NB = NB;
    a->T = T;
    ALLOC(a->tokens, N);
    ALLOC(a->labels, N);
    ALLOC(a->wt, N);
    ALLOC(a->pos, N);
    ALLOC(a->ones, (size_t)lay->max_D);
    ALLOC(a->l, L);
    if (!ok) goto oom;
    a->n_layers = (int)L;
    for (size_t i = 0; i < (size_t)lay->max_D; i++) a->ones[i] = 1;
    for (size_t li = 0; li < L; li++) {
        lm_layer_acts *s = &a->l[li];
        ALLOC(s->x, N * H);
        ALLOC(s->r1, N);
        ALLOC(s->xn, N * H);
        ALLOC(s->qp, N * QD);
        ALLOC(s->rq, N * NH);
        ALLOC(s->q, N * QD);
        ALLOC(s->kp, N * KD);
        ALLOC(s->rk, N * NH);
        ALLOC(s->k, N * KD);
        ALLOC(s->vp, N * KD);
        ALLOC(s->rv, N * NH);
        ALLOC(s->v, N * KD);
        ALLOC(s->att, (size_t)NB * NH * T * T);
        ALLOC(s->ao, N * QD);
        ALLOC(s->o, N * H);
        ALLOC(s->rpa, N);
        ALLOC(s->x2, N * H);
        ALLOC(s->rpf, N);
        ALLOC(s->xn2, N * H);
        ALLOC(s->g, N * I);
        ALLOC(s->u, N * I);
        ALLOC(s->gu, N * I);
        ALLOC(s->dn, N * H);
        ALLOC(s->rpo, N);
    }
    ALLOC(a->xf, N * H);
    ALLOC(a->rf, N);
    ALLOC(a->hf, N * H);
    ALLOC(a->logits, N * V);
    ALLOC(a->probs, N * V);
    ALLOC(a->dx, N * H);
    ALLOC(a->dxn, N * H);
    ALLOC(a->dh, N * H);
    ALLOC(a->tmp, N * H);
    ALLOC(a->dq, N * QD);
    ALLOC(a->dk, N * KD);
    ALLOC(a->dv, N * KD);
    ALLOC(a->dq2, N * QD);
    ALLOC(a->dk2, N * KD);
    ALLOC(a->dv2, N * KD);
    ALLOC(a->dao, N * QD);
    ALLOC(a->dg, N * I);
    ALLOC(a->du, N * I);
    ALLOC(a->dgu, N * I);
    ALLOC(a->dp, (size_t)NB * NH * T);
    ALLOC(a->dZ, N * V);
#undef ALLOC
    if (ok) return a;
oom:
    lm_acts_free(a);
    sp_err_set(err, "training activations: out of memory for %d sequences of %d tokens", NB, T);
    return NULL;
}

void lm_acts_free(struct lm_acts *a) {
    if (!a) return;
    if (a->l)
        for (int li = 0; li < a->n_layers; li++) {
            lm_layer_acts *s = &a->l[li];
            real *p[] = {s->x, s->r1, s->xn, s->qp, s->rq, s->q, s->kp, s->rk, s->k, s->vp, s->rv, s->v,
                         s->att, s->ao, s->o, s->rpa, s->x2, s->rpf, s->xn2, s->g, s->u, s->gu, s->dn, s->rpo};
            for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
        }
    real *p[] = {a->wt, a->ones, a->xf, a->rf, a->hf, a->logits, a->probs, a->dx, a->dxn, a->dh, a->tmp,
                 a->dq, a->dk, a->dv, a->dq2, a->dk2, a->dv2, a->dao, a->dg, a->du, a->dgu, a->dp, a->dZ};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    free(a->tokens);
    free(a->labels);
    free(a->pos);
    free(a->l);
    free(a);
}

static void lm_zero(real *x, size_t n) { memset(x, 0, n * sizeof *x); }

double lm_forward(sp_pool *pool, const lm_layout *lay, const real *w, struct lm_acts *a, const int32_t *tokens,
                   const int32_t *labels, int NB, int T, real *logits) {
    const sp_config *c = &lay->cfg;
    SP_ASSERT(NB <= a->NB && T <= a->T && NB > 0 && T > 0);
    int H = c->hidden_size, V = c->vocab_size, L = c->n_layers, NH = c->n_heads, N = NB * T;
    double eps = c->rms_eps;
    a->nb = NB;
    a->t = T;
    a->denom = 0;
    for (int i = 0; i < N; i++) {
        a->tokens[i] = tokens[i];
        a->labels[i] = labels[i] >= 0 ? labels[i] : 0;
        a->wt[i] = labels[i] >= 0 ? 1 : 0;
        a->denom += labels[i] >= 0;
        a->pos[i] = i % T;
    }
    /* x0 = E[tok] · embed_scale */
    const real *E = w + lay->embed;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < H; j++)
            a->l[0].x[(size_t)i * H + j] = E[(size_t)tokens[i] * H + j] * (real)lay->embed_scale;

    for (int li = 0; li < L; li++) {
        const sp_layer_config *lc = &c->layers[li];
        const lm_layer_off *o = &lay->l[li];
        lm_layer_acts *s = &a->l[li];
        int D = lc->head_dim, KVH = lc->n_kv_heads, I = lc->ffn_dim, QD = NH * D, KD = KVH * D;
        real *xout = li + 1 < L ? a->l[li + 1].x : a->xf;
        tr_rmsnorm_forward(s->xn, s->r1, s->x, w + o->in_norm, N, H, eps);
        tr_linear_forward(pool, s->qp, s->xn, w + o->wq, N, H, QD);
        tr_rmsnorm_forward(s->q, s->rq, s->qp, w + o->q_norm, N * NH, D, eps);
        tr_rope_forward(s->q, s->q, N, NH, D, a->pos, lay->inv_freq[li]);
        tr_linear_forward(pool, s->kp, s->xn, w + o->wk, N, H, KD);
        tr_rmsnorm_forward(s->k, s->rk, s->kp, w + o->k_norm, N * KVH, D, eps);
        tr_rope_forward(s->k, s->k, N, KVH, D, a->pos, lay->inv_freq[li]);
        tr_linear_forward(pool, s->vp, s->xn, w + o->wv, N, H, KD);
        tr_rmsnorm_forward(s->v, s->rv, s->vp, a->ones, N * KVH, D, eps); /* weightless v_norm */
        tr_attn_shape sh = {.NB = NB, .Tq = T, .Tk = T, .NH = NH, .KVH = KVH, .D = D, .causal = 1,
                            .window = lc->sliding ? c->sliding_window : 0, .scale = 1.0};
        tr_attention_forward(pool, s->ao, s->att, s->q, s->k, s->v, &sh);
        tr_linear_forward(pool, s->o, s->ao, w + o->wo, N, QD, H);
        tr_rmsnorm_forward(a->tmp, s->rpa, s->o, w + o->post_attn, N, H, eps);
        for (size_t i = 0; i < (size_t)N * H; i++) s->x2[i] = s->x[i] + a->tmp[i];

        tr_rmsnorm_forward(s->xn2, s->rpf, s->x2, w + o->pre_ffn, N, H, eps);
        tr_linear_forward(pool, s->g, s->xn2, w + o->gate, N, H, I);
        tr_linear_forward(pool, s->u, s->xn2, w + o->up, N, H, I);
        tr_geglu_forward(s->gu, s->g, s->u, (size_t)N * I);
        tr_linear_forward(pool, s->dn, s->gu, w + o->down, N, I, H);
        tr_rmsnorm_forward(a->tmp, s->rpo, s->dn, w + o->post_ffn, N, H, eps);
        real scalar = w[o->scalar];
        for (size_t i = 0; i < (size_t)N * H; i++) {
            xout[i] = s->x2[i] + a->tmp[i];
            if (scalar != 1) xout[i] *= scalar;
        }
    }
    tr_rmsnorm_forward(a->hf, a->rf, a->xf, w + lay->final_norm, N, H, eps);
    tr_linear_forward(pool, a->logits, a->hf, E, N, H, V); /* tied LM head */
    if (c->final_softcap > 0)
        tr_softcap_forward(a->logits, a->logits, (size_t)N * V, (real)c->final_softcap);
    if (logits) memcpy(logits, a->logits, (size_t)N * V * sizeof(real));
    if (a->denom == 0) return 0;
    return tr_ce_forward(a->probs, a->logits, a->labels, a->wt, N, V, a->denom);
}

void lm_backward(sp_pool *pool, const lm_layout *lay, const real *w, struct lm_acts *a, real *grad) {
    const sp_config *c = &lay->cfg;
    int NB = a->nb, T = a->t, N = NB * T;
    int H = c->hidden_size, V = c->vocab_size, L = c->n_layers, NH = c->n_heads;
    size_t NHs = (size_t)N * H;
    if (a->denom == 0) return;
    const real *E = w + lay->embed;
    real *dE = grad + lay->embed;

    /* loss = CE(softcap(hf · Eᵀ)) */
    lm_zero(a->dZ, (size_t)N * V);
    tr_ce_backward(a->dZ, a->probs, a->labels, a->wt, N, V, a->denom);
    real *dlog = a->dZ;
    if (c->final_softcap > 0) { /* the probabilities are spent: reuse them for d(raw logits) */
        lm_zero(a->probs, (size_t)N * V);
        tr_softcap_backward(a->probs, a->dZ, a->logits, (size_t)N * V, (real)c->final_softcap);
        dlog = a->probs;
    }
    lm_zero(a->dh, NHs);
    tr_linear_backward(pool, a->dh, dE, dlog, a->hf, E, N, H, V); /* tied head: into dE too */
    lm_zero(a->dx, NHs);
    tr_rmsnorm_backward(a->dx, grad + lay->final_norm, a->dh, a->xf, w + lay->final_norm, a->rf, N, H);

    for (int li = L - 1; li >= 0; li--) {
        const sp_layer_config *lc = &c->layers[li];
        const lm_layer_off *o = &lay->l[li];
        lm_layer_acts *s = &a->l[li];
        int D = lc->head_dim, KVH = lc->n_kv_heads, I = lc->ffn_dim, QD = NH * D, KD = KVH * D;
        /* xout = (x2 + norm_post_ffn(dn)) · scalar  (scalar frozen) */
        real scalar = w[o->scalar];
        if (scalar != 1)
            for (size_t i = 0; i < NHs; i++) a->dx[i] *= scalar;
        lm_zero(a->dh, NHs);
        tr_rmsnorm_backward(a->dh, grad + o->post_ffn, a->dx, s->dn, w + o->post_ffn, s->rpo, N, H);
        /* dn = gu · Wdownᵀ;  gu = gelu(g)·u;  g, u = xn2 · W{gate,up}ᵀ */
        lm_zero(a->dgu, (size_t)N * I);
        tr_linear_backward(pool, a->dgu, grad + o->down, a->dh, s->gu, w + o->down, N, I, H);
        lm_zero(a->dg, (size_t)N * I);
        lm_zero(a->du, (size_t)N * I);
        tr_geglu_backward(a->dg, a->du, a->dgu, s->g, s->u, (size_t)N * I);
        lm_zero(a->dxn, NHs);
        tr_linear_backward(pool, a->dxn, grad + o->gate, a->dg, s->xn2, w + o->gate, N, H, I);
        tr_linear_backward(pool, a->dxn, grad + o->up, a->du, s->xn2, w + o->up, N, H, I);
        /* xn2 = norm_pre_ffn(x2); dx (= d x2 through the residual) gains the norm's gradient */
        tr_rmsnorm_backward(a->dx, grad + o->pre_ffn, a->dxn, s->x2, w + o->pre_ffn, s->rpf, N, H);

        /* x2 = x + norm_post_attn(o);  o = ao · Woᵀ */
        lm_zero(a->dh, NHs);
        tr_rmsnorm_backward(a->dh, grad + o->post_attn, a->dx, s->o, w + o->post_attn, s->rpa, N, H);
        lm_zero(a->dao, (size_t)N * QD);
        tr_linear_backward(pool, a->dao, grad + o->wo, a->dh, s->ao, w + o->wo, N, QD, H);
        lm_zero(a->dq, (size_t)N * QD);
        lm_zero(a->dk, (size_t)N * KD);
        lm_zero(a->dv, (size_t)N * KD);
        tr_attn_shape sh = {.NB = NB, .Tq = T, .Tk = T, .NH = NH, .KVH = KVH, .D = D, .causal = 1,
                            .window = lc->sliding ? c->sliding_window : 0, .scale = 1.0};
        tr_attention_backward(pool, a->dq, a->dk, a->dv, a->dp, a->dao, s->q, s->k, s->v, s->att, &sh);
        /* q = rope(norm_q(qp)), k = rope(norm_k(kp)), v = norm(vp) */
        lm_zero(a->dq2, (size_t)N * QD);
        tr_rope_backward(a->dq2, a->dq, N, NH, D, a->pos, lay->inv_freq[li]);
        lm_zero(a->dq, (size_t)N * QD);
        tr_rmsnorm_backward(a->dq, grad + o->q_norm, a->dq2, s->qp, w + o->q_norm, s->rq, N * NH, D);
        lm_zero(a->dk2, (size_t)N * KD);
        tr_rope_backward(a->dk2, a->dk, N, KVH, D, a->pos, lay->inv_freq[li]);
        lm_zero(a->dk, (size_t)N * KD);
        tr_rmsnorm_backward(a->dk, grad + o->k_norm, a->dk2, s->kp, w + o->k_norm, s->rk, N * KVH, D);
        lm_zero(a->dv2, (size_t)N * KD);
        tr_rmsnorm_backward(a->dv2, NULL, a->dv, s->vp, a->ones, s->rv, N * KVH, D);
        /* qp, kp, vp = xn · W{q,k,v}ᵀ;  xn = norm_in(x) */
        lm_zero(a->dxn, NHs);
        tr_linear_backward(pool, a->dxn, grad + o->wq, a->dq, s->xn, w + o->wq, N, H, QD);
        tr_linear_backward(pool, a->dxn, grad + o->wk, a->dk, s->xn, w + o->wk, N, H, KD);
        tr_linear_backward(pool, a->dxn, grad + o->wv, a->dv2, s->xn, w + o->wv, N, H, KD);
        tr_rmsnorm_backward(a->dx, grad + o->in_norm, a->dxn, s->x, w + o->in_norm, s->r1, N, H);
    }
    /* x0 = E[tok] · embed_scale */
    for (int i = 0; i < N; i++) {
        real *g = dE + (size_t)a->tokens[i] * H;
        const real *d = a->dx + (size_t)i * H;
        for (int j = 0; j < H; j++) g[j] += d[j] * (real)lay->embed_scale;
    }
}
