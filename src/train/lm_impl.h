/* lm_impl.h — forward and backward of the target LM (lm.h), written once over `real` with the
 * float names and compiled by lm.c (real = float: threaded GEMMs and attention) and lm_f64.c
 * (real = double, every name renamed to its _f64 twin: naive loops, the finite-difference
 * reference). Each decoder layer is the training block (block_train.h) on the layer's
 * sp_block_describe description with causal / sliding attention over the NB sequences; around
 * it the embedding, the final norm, the tied head, the soft-cap and the loss are ops of ops.h. */

struct lm_acts {
    int NB, T, n_layers;    /* capacity */
    int nb, t;              /* shape of the last forward */
    int32_t *tokens, *labels; /* [N] (labels: −1 replaced by 0 with weight 0) */
    real *wt;               /* [N] 1 = scored */
    double denom;           /* number of scored positions */
    int *pos;               /* [N] position of each row inside its sequence */
    real *ones;             /* [max_D] weightless-norm weight */
    real **x;               /* [L + 1] → [N, H] the residual stream: x[i] layer i's input, x[L] the last output */
    tr_block_acts *l;       /* [L] what each layer saves */
    real *rf, *hf;          /* final-norm rstd [N], normed hidden [N, H] */
    real *logits, *probs;   /* [N, V] softcapped logits, softmax */
    tr_block_scratch s;     /* backward scratch of the layers */
    real *dx, *dh, *dZ;     /* [N, H] residual gradient, [N, H] head gradient, [N, V] logit gradient */
};

/* every buffer of one layer's saved activations (or of the backward scratch) with its length
 * (lay NULL: lengths 0, for freeing); kvin and dkvin are not used: the K/V rows are the query
 * rows. p = NULL ends the list. */
typedef struct {
    real **p;
    size_t n;
} lm_buf;

static int lm_layer_bufs(tr_block_acts *s, const lm_layout *lay, int NB, int T, lm_buf *out) {
    size_t N = (size_t)NB * T, H = lay ? lay->cfg.hidden_size : 0, NH = lay ? lay->cfg.n_heads : 0;
    size_t QD = lay ? lay->max_QD : 0, KD = lay ? lay->max_KD : 0, I = lay ? lay->max_I : 0;
    lm_buf b[] = {{&s->xn, N * H}, {&s->rstd_in, N},   {&s->qp, N * QD}, {&s->rstd_q, N * NH}, {&s->q, N * QD},
                  {&s->kp, N * KD}, {&s->rstd_k, N * NH}, {&s->k, N * KD}, {&s->vp, N * KD},   {&s->rstd_v, N * NH},
                  {&s->v, N * KD},  {&s->att, (size_t)NB * NH * T * T}, {&s->ao, N * QD}, {&s->o, N * H},
                  {&s->rstd_o, N},  {&s->x1, N * H},   {&s->xn2, N * H}, {&s->rstd_ffn, N},  {&s->g, N * I},
                  {&s->u, N * I},   {&s->gu, N * I},   {&s->dn, N * H},  {&s->rstd_dn, N},   {NULL, 0}};
    memcpy(out, b, sizeof b);
    return (int)(sizeof b / sizeof b[0]);
}

static int lm_scratch_bufs(tr_block_scratch *s, const lm_layout *lay, int NB, int T, lm_buf *out) {
    size_t N = (size_t)NB * T, H = lay ? lay->cfg.hidden_size : 0, NH = lay ? lay->cfg.n_heads : 0;
    size_t QD = lay ? lay->max_QD : 0, KD = lay ? lay->max_KD : 0, I = lay ? lay->max_I : 0;
    lm_buf b[] = {{&s->dh, N * H},   {&s->dxn, N * H},  {&s->dgu, N * I}, {&s->dg, N * I},  {&s->du, N * I},
                  {&s->dao, N * QD}, {&s->dq, N * QD},  {&s->dq2, N * QD}, {&s->dk, N * KD}, {&s->dk2, N * KD},
                  {&s->dv, N * KD},  {&s->dv2, N * KD}, {&s->dp, (size_t)NB * NH * T}, {NULL, 0}};
    memcpy(out, b, sizeof b);
    return (int)(sizeof b / sizeof b[0]);
}

struct lm_acts *sp_lm_acts_create(const lm_layout *lay, int NB, int T, sp_err *err) {
    const sp_config *c = &lay->cfg;
    struct lm_acts *a = calloc(1, sizeof *a);
    if (!a) goto oom;
    size_t N = (size_t)NB * T, H = c->hidden_size, V = c->vocab_size, L = c->n_layers;
    int ok = 1;
#define ALLOC(p, count) ok &= ((p) = calloc((size_t)(count) + 1, sizeof *(p))) != NULL
    a->NB = NB;
    a->T = T;
    ALLOC(a->tokens, N);
    ALLOC(a->labels, N);
    ALLOC(a->wt, N);
    ALLOC(a->pos, N);
    ALLOC(a->ones, (size_t)lay->max_D);
    ALLOC(a->x, L + 1);
    ALLOC(a->l, L);
    if (!ok) goto oom;
    a->n_layers = (int)L;
    for (size_t i = 0; i < (size_t)lay->max_D; i++) a->ones[i] = 1;
    lm_buf b[32];
    for (size_t li = 0; li <= L; li++) ALLOC(a->x[li], N * H);
    for (size_t li = 0; li < L; li++) {
        lm_layer_bufs(&a->l[li], lay, NB, T, b);
        for (lm_buf *p = b; p->p; p++) ALLOC(*p->p, p->n);
    }
    lm_scratch_bufs(&a->s, lay, NB, T, b);
    for (lm_buf *p = b; p->p; p++) ALLOC(*p->p, p->n);
    ALLOC(a->rf, N);
    ALLOC(a->hf, N * H);
    ALLOC(a->logits, N * V);
    ALLOC(a->probs, N * V);
    ALLOC(a->dx, N * H);
    ALLOC(a->dh, N * H);
    ALLOC(a->dZ, N * V);
#undef ALLOC
    if (ok) return a;
oom:
    sp_lm_acts_free(a);
    sp_err_set(err, "training activations: out of memory for %d sequences of %d tokens", NB, T);
    return NULL;
}

void sp_lm_acts_free(struct lm_acts *a) {
    if (!a) return;
    lm_buf b[32];
    if (a->l)
        for (int li = 0; li < a->n_layers; li++) {
            lm_layer_bufs(&a->l[li], NULL, 0, 0, b);
            for (lm_buf *p = b; p->p; p++) free(*p->p);
        }
    if (a->x)
        for (int li = 0; li <= a->n_layers; li++) free(a->x[li]);
    lm_scratch_bufs(&a->s, NULL, 0, 0, b);
    for (lm_buf *p = b; p->p; p++) free(*p->p);
    real *p[] = {a->wt, a->ones, a->rf, a->hf, a->logits, a->probs, a->dx, a->dh, a->dZ};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    free(a->tokens);
    free(a->labels);
    free(a->pos);
    free(a->x);
    free(a->l);
    free(a);
}

static void lm_zero(real *x, size_t n) { memset(x, 0, n * sizeof *x); }

/* layer li as the block executes it: its description, weights (and gradients, when grad is
 * given) and rows: NB sequences of T tokens, causal (sliding on sliding layers) */
static void lm_layer(const lm_layout *lay, int li, const real *w, real *grad, const struct lm_acts *a,
                     sp_block_desc *d, tr_block_w *bw, tr_block_g *bg, tr_block_io *io) {
    const lm_layer_off *o = &lay->l[li];
    *d = sp_block_describe(&lay->cfg, li, SP_ATTN_CAUSAL);
    *bw = (tr_block_w){.attn_norm = w + o->in_norm, .wq = w + o->wq, .wk = w + o->wk, .wv = w + o->wv,
                       .wo = w + o->wo, .q_norm = w + o->q_norm, .k_norm = w + o->k_norm,
                       .attn_post_norm = w + o->post_attn, .ffn_norm = w + o->pre_ffn, .ffn_post_norm = w + o->post_ffn,
                       .w_gate = w + o->gate, .w_up = w + o->up, .w_down = w + o->down,
                       .layer_scalar = w[o->scalar], .inv_freq = lay->inv_freq[li], .ones = a->ones};
    if (grad) /* layer_scalar is frozen */
        *bg = (tr_block_g){.attn_norm = grad + o->in_norm, .wq = grad + o->wq, .wk = grad + o->wk, .wv = grad + o->wv,
                           .wo = grad + o->wo, .q_norm = grad + o->q_norm, .k_norm = grad + o->k_norm,
                           .attn_post_norm = grad + o->post_attn, .ffn_norm = grad + o->pre_ffn,
                           .ffn_post_norm = grad + o->post_ffn, .w_gate = grad + o->gate, .w_up = grad + o->up,
                           .w_down = grad + o->down};
    *io = (tr_block_io){.R = a->nb * a->t, .qpos = a->pos,
                        .shape = {.NB = a->nb, .Tq = a->t, .Tk = a->t, .NH = d->NH, .KVH = d->KVH, .D = d->D,
                                  .causal = 1, .window = d->window, .scale = d->attn_scale}};
}

double sp_lm_forward(sp_pool *pool, const lm_layout *lay, const real *w, struct lm_acts *a, const int32_t *tokens,
                  const int32_t *labels, int NB, int T, real *logits) {
    const sp_config *c = &lay->cfg;
    SP_ASSERT(NB <= a->NB && T <= a->T && NB > 0 && T > 0);
    int H = c->hidden_size, V = c->vocab_size, L = c->n_layers, N = NB * T;
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
            a->x[0][(size_t)i * H + j] = E[(size_t)tokens[i] * H + j] * (real)lay->embed_scale;
    for (int li = 0; li < L; li++) {
        sp_block_desc d;
        tr_block_w bw;
        tr_block_io io;
        lm_layer(lay, li, w, NULL, a, &d, &bw, NULL, &io);
        sp_tr_block_forward(pool, &d, &bw, &io, a->x[li], a->x[li + 1], &a->l[li]);
    }
    /* the final norm with the float epsilon of inference, as the layers' */
    sp_tr_rmsnorm_forward(a->hf, a->rf, a->x[L], w + lay->final_norm, N, H, (float)c->rms_eps);
    sp_tr_linear_forward(pool, a->logits, a->hf, E, N, H, V); /* tied LM head */
    if (c->final_softcap > 0)
        sp_tr_softcap_forward(a->logits, a->logits, (size_t)N * V, (real)c->final_softcap);
    if (logits) memcpy(logits, a->logits, (size_t)N * V * sizeof(real));
    if (a->denom == 0) return 0;
    return sp_tr_ce_forward(a->probs, a->logits, a->labels, a->wt, N, V, a->denom);
}

void sp_lm_backward(sp_pool *pool, const lm_layout *lay, const real *w, struct lm_acts *a, real *grad) {
    const sp_config *c = &lay->cfg;
    int N = a->nb * a->t, H = c->hidden_size, V = c->vocab_size, L = c->n_layers;
    size_t NHs = (size_t)N * H;
    if (a->denom == 0) return;
    const real *E = w + lay->embed;
    real *dE = grad + lay->embed;

    /* loss = CE(softcap(hf · Eᵀ)) */
    lm_zero(a->dZ, (size_t)N * V);
    sp_tr_ce_backward(a->dZ, a->probs, a->labels, a->wt, N, V, a->denom);
    real *dlog = a->dZ;
    if (c->final_softcap > 0) { /* the probabilities are spent: reuse them for d(raw logits) */
        lm_zero(a->probs, (size_t)N * V);
        sp_tr_softcap_backward(a->probs, a->dZ, a->logits, (size_t)N * V, (real)c->final_softcap);
        dlog = a->probs;
    }
    lm_zero(a->dh, NHs);
    sp_tr_linear_backward(pool, a->dh, dE, dlog, a->hf, E, N, H, V); /* tied head: into dE too */
    lm_zero(a->dx, NHs);
    sp_tr_rmsnorm_backward(a->dx, grad + lay->final_norm, a->dh, a->x[L], w + lay->final_norm, a->rf, N, H);
    for (int li = L - 1; li >= 0; li--) {
        sp_block_desc d;
        tr_block_w bw;
        tr_block_g bg;
        tr_block_io io;
        lm_layer(lay, li, w, grad, a, &d, &bw, &bg, &io);
        sp_tr_block_backward(pool, &d, &bw, &bg, &io, a->x[li], &a->l[li], &a->s, a->dx);
    }
    /* x0 = E[tok] · embed_scale */
    for (int i = 0; i < N; i++) {
        real *g = dE + (size_t)a->tokens[i] * H;
        const real *d = a->dx + (size_t)i * H;
        for (int j = 0; j < H; j++) g[j] += d[j] * (real)lay->embed_scale;
    }
}
