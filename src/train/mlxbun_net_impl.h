/* mlxbun_net_impl.h — the body of the mlx-bun modules' forward / backward (mlxbun_net.h), written
 * once over `real` with the float names and compiled by mlxbun_net.c (float) and
 * mlxbun_net_f64.c (double; every name renamed to its _f64 twin). The includer defines real and
 * the names MB_ACTS (the acts struct), MB_IN (the batch view). Shapes: NB elements, γ = G block
 * slots, T = NB·G output rows, Rr rows per element in the backbone (v1 G+1, faithful G),
 * R = NB·Rr, S = the K/V rows of a layer (v1 R; faithful NR + NB·G: every context row once, then
 * the block rows), NR context rows. A faithful element attends to the rows of its own window
 * (gathered per element, so context rows shared by several anchors are projected once). */

struct MB_ACTS {
    int NB, C, NR;
    real *anc_p, *cin, *ctx_p;         /* [NB,d] tok_proj(anchor); v1: [NB,Ht] h_ctx, [NB,d] ctx_proj(h_ctx) */
    real *hc_pre, *hc, *rstd_hc;        /* faithful: [NR,d] W_c·taps, ctx_norm of it, [NR] */
    real *x[TR_MAX_LAYERS + 1];         /* [R,d] layer inputs; x[L] the backbone output */
    real *cn[TR_MAX_LAYERS], *rstd_cn[TR_MAX_LAYERS]; /* faithful: [NR,d] attn_norm(H_ctx), [NR] */
    tr_block_acts la[TR_MAX_LAYERS];
    tr_block_scratch sc;
    real *hb, *on, *rstd_on, *ho;       /* [T,d] block outputs, out_norm of them, [T], [T,Ht] out_proj */
    real *U, *Z, *bias, *code, *conf, *q, *cstar; /* [T,V] capped base logits, logits, Markov bias; [T,r]; [T]; [T,V]; [T] */
    real *dZ, *dU, *dconf, *don, *dho, *dhb, *dcode, *dx, *dhc, *dhc_pre, *danc, *dctx;
    real *kg, *vg, *dkg, *dvg;          /* faithful: [C+G, d] one element's gathered keys / values */
    int *zpos;                          /* [max(R, S)] zeros: the positions (no rotation) */
    float *inv_freq;                    /* [Dh/2] zeros */
};

static real *mb_take(size_t n, int *ok) {
    real *p = calloc(n ? n : 1, sizeof(real));
    if (!p) *ok = 0;
    return p;
}

static int mb_rows(const tr_mb_dims *d) { return d->faithful ? d->G : d->G + 1; }

/* the layer description: mlx-bun's backbone layer (mlxbun_net.h) */
static sp_block_desc mb_desc(const tr_mb_dims *d) {
    sp_block_desc bd;
    memset(&bd, 0, sizeof bd);
    bd.H = d->d, bd.NH = d->NH, bd.KVH = d->NH, bd.D = d->Dh, bd.I = d->I;
    bd.kv_proj = 1, bd.v_proj = 1, bd.act = SP_ACT_GELU_TANH, bd.attn = SP_ATTN_BLOCK;
    bd.attn_scale = (float)(1.0 / sqrt((double)d->Dh));
    bd.eps = (float)d->eps;
    return bd;
}

static void mb_acts_free_impl(struct MB_ACTS *a) {
    if (!a) return;
    real **all[] = {&a->anc_p, &a->cin, &a->ctx_p, &a->hc_pre, &a->hc, &a->rstd_hc, &a->hb, &a->on, &a->rstd_on,
                    &a->ho, &a->U, &a->Z, &a->bias, &a->code, &a->conf, &a->q, &a->cstar, &a->dZ, &a->dU,
                    &a->dconf, &a->don, &a->dho, &a->dhb, &a->dcode, &a->dx, &a->dhc, &a->dhc_pre,
                    &a->danc, &a->dctx, &a->kg, &a->vg, &a->dkg, &a->dvg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(*all[i]);
    for (int l = 0; l <= TR_MAX_LAYERS; l++) free(a->x[l]);
    for (int l = 0; l < TR_MAX_LAYERS; l++) {
        free(a->cn[l]), free(a->rstd_cn[l]);
        tr_block_acts *b = &a->la[l];
        real *bl[] = {b->xn, b->rstd_in, b->kvin, b->qp, b->q, b->kp, b->k, b->v, b->att, b->ao, b->o,
                      b->x1, b->xn2, b->rstd_ffn, b->g, b->u, b->gu, b->dn};
        for (size_t i = 0; i < sizeof bl / sizeof *bl; i++) free(bl[i]);
    }
    tr_block_scratch *s = &a->sc;
    real *sl[] = {s->dh, s->dxn, s->dgu, s->dg, s->du, s->dao, s->dq, s->dq2, s->dk, s->dk2, s->dv, s->dv2,
                  s->dkvin, s->dp};
    for (size_t i = 0; i < sizeof sl / sizeof *sl; i++) free(sl[i]);
    free(a->zpos);
    free(a->inv_freq);
    free(a);
}

static struct MB_ACTS *mb_acts_create_impl(const tr_mb_dims *d, int NB, int C, int NR, sp_err *err) {
    if (d->L < 1 || d->L > TR_MAX_LAYERS || NB < 1 || C < 0 || NR < 0) {
        sp_err_set(err, "mlx-bun drafter: %d layers (1..%d), batch %d, context %d", d->L, TR_MAX_LAYERS, NB, C);
        return NULL;
    }
    struct MB_ACTS *a = calloc(1, sizeof *a);
    if (!a) {
        sp_err_set(err, "mlx-bun drafter: out of memory");
        return NULL;
    }
    int ok = 1, G = d->G, Rr = mb_rows(d);
    size_t D = (size_t)d->d, I = (size_t)d->I, T = (size_t)NB * G, R = (size_t)NB * Rr;
    size_t S = d->faithful ? (size_t)NR + (size_t)NB * G : R, Tk = d->faithful ? (size_t)(C + G) : (size_t)Rr;
    size_t att = (size_t)NB * d->NH * Rr * Tk;
    a->NB = NB, a->C = C, a->NR = NR;
    a->anc_p = mb_take((size_t)NB * D, &ok), a->danc = mb_take((size_t)NB * D, &ok);
    if (!d->faithful) {
        a->cin = mb_take((size_t)NB * d->Ht, &ok);
        a->ctx_p = mb_take((size_t)NB * D, &ok), a->dctx = mb_take((size_t)NB * D, &ok);
    } else {
        a->hc_pre = mb_take((size_t)NR * D, &ok), a->hc = mb_take((size_t)NR * D, &ok);
        a->rstd_hc = mb_take((size_t)NR, &ok);
        a->dhc = mb_take((size_t)NR * D, &ok);
        a->dhc_pre = mb_take((size_t)NR * D, &ok);
        size_t kn = (size_t)(C + G) * D;
        a->kg = mb_take(kn, &ok), a->vg = mb_take(kn, &ok), a->dkg = mb_take(kn, &ok), a->dvg = mb_take(kn, &ok);
    }
    for (int l = 0; l <= d->L; l++) a->x[l] = mb_take(R * D, &ok);
    for (int l = 0; l < d->L; l++) {
        tr_block_acts *b = &a->la[l];
        if (d->faithful) {
            a->cn[l] = mb_take((size_t)NR * D, &ok), a->rstd_cn[l] = mb_take((size_t)NR, &ok);
            b->kvin = mb_take(S * D, &ok);
        }
        b->xn = mb_take(R * D, &ok), b->rstd_in = mb_take(R, &ok);
        b->qp = mb_take(R * D, &ok), b->q = mb_take(R * D, &ok);
        b->kp = mb_take(S * D, &ok), b->k = mb_take(S * D, &ok), b->v = mb_take(S * D, &ok);
        b->att = mb_take(att, &ok), b->ao = mb_take(R * D, &ok), b->o = mb_take(R * D, &ok);
        b->x1 = mb_take(R * D, &ok), b->xn2 = mb_take(R * D, &ok), b->rstd_ffn = mb_take(R, &ok);
        b->g = mb_take(R * I, &ok), b->u = mb_take(R * I, &ok), b->gu = mb_take(R * I, &ok);
        b->dn = mb_take(R * D, &ok);
    }
    tr_block_scratch *s = &a->sc;
    s->dh = mb_take(R * D, &ok), s->dxn = mb_take(R * D, &ok);
    s->dgu = mb_take(R * I, &ok), s->dg = mb_take(R * I, &ok), s->du = mb_take(R * I, &ok);
    s->dao = mb_take(R * D, &ok), s->dq = mb_take(R * D, &ok), s->dq2 = mb_take(R * D, &ok);
    s->dk = mb_take(S * D, &ok), s->dk2 = mb_take(S * D, &ok), s->dv = mb_take(S * D, &ok);
    s->dv2 = mb_take(S * D, &ok), s->dp = mb_take(att, &ok);
    if (d->faithful) s->dkvin = mb_take(S * D, &ok);
    size_t V = (size_t)d->V, r = (size_t)d->r;
    a->hb = mb_take(T * D, &ok), a->on = mb_take(T * D, &ok), a->rstd_on = mb_take(T, &ok);
    a->ho = mb_take(T * d->Ht, &ok);
    a->U = mb_take(T * V, &ok), a->Z = mb_take(T * V, &ok), a->bias = mb_take(T * V, &ok);
    a->code = mb_take(T * r, &ok), a->conf = mb_take(T, &ok), a->q = mb_take(T * V, &ok);
    a->cstar = mb_take(T, &ok);
    a->dZ = mb_take(T * V, &ok), a->dU = mb_take(T * V, &ok), a->dconf = mb_take(T, &ok);
    a->don = mb_take(T * D, &ok), a->dho = mb_take(T * d->Ht, &ok), a->dhb = mb_take(T * D, &ok);
    a->dcode = mb_take(T * r, &ok), a->dx = mb_take(R * D, &ok);
    a->zpos = calloc(S > R ? S : R, sizeof(int));
    a->inv_freq = calloc((size_t)d->Dh / 2 + 1, sizeof(float));
    if (!ok || !a->zpos || !a->inv_freq) {
        mb_acts_free_impl(a);
        sp_err_set(err, "mlx-bun drafter: out of memory for the activations of %d anchors", NB);
        return NULL;
    }
    return a;
}

/* one layer's weights / gradients out of a parameter-layout array */
static tr_block_w mb_layer_w(const tr_mb_off *o, const real *w, int l, const float *inv_freq) {
    tr_block_w bw;
    memset(&bw, 0, sizeof bw);
    bw.attn_norm = w + o->attn_norm[l], bw.wq = w + o->q[l], bw.wk = w + o->k[l], bw.wv = w + o->v[l];
    bw.wo = w + o->o[l], bw.ffn_norm = w + o->ff_norm[l];
    bw.w_gate = w + o->gate[l], bw.w_up = w + o->up[l], bw.w_down = w + o->down[l];
    bw.layer_scalar = 1, bw.inv_freq = inv_freq;
    return bw;
}
static tr_block_g mb_layer_g(const tr_mb_off *o, real *g, int l) {
    tr_block_g bg;
    memset(&bg, 0, sizeof bg);
    bg.attn_norm = g + o->attn_norm[l], bg.wq = g + o->q[l], bg.wk = g + o->k[l], bg.wv = g + o->v[l];
    bg.wo = g + o->o[l], bg.ffn_norm = g + o->ff_norm[l];
    bg.w_gate = g + o->gate[l], bg.w_up = g + o->up[l], bg.w_down = g + o->down[l];
    return bg;
}

/* the faithful layer's K/V input rows: every context row (attn_norm(H_ctx)) once, then the block
 * rows (the normed block); each element's attention gathers the rows of its window */
typedef struct {
    const tr_mb_dims *d;
    struct MB_ACTS *a;
    const struct MB_IN *in;
    int l;
    const real *attn_norm; /* the layer's weight */
    real *g_attn_norm;     /* its gradient (backward) */
} mb_kv_ctx;

static void mb_kv_rows(void *vctx, real *kvin, const real *xn) {
    const mb_kv_ctx *c = vctx;
    size_t D = (size_t)c->d->d, NR = (size_t)c->in->NR;
    memcpy(kvin, c->a->cn[c->l], sizeof(real) * NR * D);
    memcpy(kvin + NR * D, xn, sizeof(real) * (size_t)c->in->NB * c->d->G * D);
}

/* dkvin's block rows into dxn; its context rows through the layer's attn_norm into dhc */
static void mb_kv_rows_backward(void *vctx, real *dxn, const real *dkvin) {
    const mb_kv_ctx *c = vctx;
    int D = c->d->d, NR = c->in->NR;
    size_t nb = (size_t)c->in->NB * c->d->G * D;
    for (size_t i = 0; i < nb; i++) dxn[i] += dkvin[(size_t)NR * D + i];
    /* cn = attn_norm(H_ctx) */
    sp_tr_rmsnorm_backward(c->a->dhc, c->g_attn_norm, dkvin, c->a->hc, c->attn_norm, c->a->rstd_cn[c->l], NR, D);
}

/* element e's keys or values [C+G, d] from the shared rows src [S, d]: its window rows (zero where
 * padding), then its block rows */
static void mb_gather(const mb_kv_ctx *c, int e, real *dst, const real *src) {
    int C = c->in->C, G = c->d->G;
    size_t D = (size_t)c->d->d;
    for (int j = 0; j < C; j++) {
        if (c->in->kmask[(size_t)e * (C + G) + j])
            memcpy(dst + j * D, src + ((size_t)c->in->ctx_row[e] + j) * D, sizeof(real) * D);
        else memset(dst + j * D, 0, sizeof(real) * D);
    }
    memcpy(dst + C * D, src + ((size_t)c->in->NR + (size_t)e * G) * D, sizeof(real) * G * D);
}
/* the reverse: dsrc [S, d] += element e's dkv [C+G, d] */
static void mb_scatter(const mb_kv_ctx *c, int e, real *dsrc, const real *dkv) {
    int C = c->in->C, G = c->d->G;
    size_t D = (size_t)c->d->d;
    for (int j = 0; j < C + G; j++) {
        if (j < C && !c->in->kmask[(size_t)e * (C + G) + j]) continue;
        real *dst = dsrc + (j < C ? (size_t)c->in->ctx_row[e] + j : (size_t)c->in->NR + (size_t)e * G + (j - C)) * D;
        for (size_t i = 0; i < D; i++) dst[i] += dkv[j * D + i];
    }
}
static tr_attn_shape mb_elem_shape(const mb_kv_ctx *c, int e) {
    const tr_mb_dims *d = c->d;
    int Tk = c->in->C + d->G;
    return (tr_attn_shape){.NB = 1, .Tq = d->G, .Tk = Tk, .NH = d->NH, .KVH = d->NH, .D = d->Dh, .causal = 0,
                           .kmask = c->in->kmask + (size_t)e * Tk, .scale = 1.0 / sqrt((double)d->Dh)};
}
/* attention of each element's block queries over its window and its block */
static void mb_attn_forward(void *vctx, sp_pool *pool, real *ao, real *att, const real *q, const real *k,
                            const real *v) {
    const mb_kv_ctx *c = vctx;
    size_t GD = (size_t)c->d->G * c->d->d, per = (size_t)c->d->NH * c->d->G * (c->in->C + c->d->G);
    for (int e = 0; e < c->in->NB; e++) {
        tr_attn_shape sh = mb_elem_shape(c, e);
        mb_gather(c, e, c->a->kg, k);
        mb_gather(c, e, c->a->vg, v);
        sp_tr_attention_forward(pool, ao + e * GD, att + e * per, q + e * GD, c->a->kg, c->a->vg, &sh);
    }
}
static void mb_attn_backward(void *vctx, sp_pool *pool, real *dq, real *dk, real *dv, const real *dao, const real *q,
                             const real *k, const real *v, const real *att) {
    const mb_kv_ctx *c = vctx;
    size_t GD = (size_t)c->d->G * c->d->d, per = (size_t)c->d->NH * c->d->G * (c->in->C + c->d->G);
    size_t kn = (size_t)(c->in->C + c->d->G) * c->d->d;
    for (int e = 0; e < c->in->NB; e++) {
        tr_attn_shape sh = mb_elem_shape(c, e);
        mb_gather(c, e, c->a->kg, k);
        mb_gather(c, e, c->a->vg, v);
        memset(c->a->dkg, 0, sizeof(real) * kn);
        memset(c->a->dvg, 0, sizeof(real) * kn);
        sp_tr_attention_backward(pool, dq + e * GD, c->a->dkg, c->a->dvg, c->a->sc.dp, dao + e * GD, q + e * GD,
                                 c->a->kg, c->a->vg, att + e * per, &sh);
        mb_scatter(c, e, dk, c->a->dkg);
        mb_scatter(c, e, dv, c->a->dvg);
    }
}

static tr_block_io mb_io(const tr_mb_dims *d, struct MB_ACTS *a, const struct MB_IN *in, mb_kv_ctx *kc) {
    tr_block_io io;
    memset(&io, 0, sizeof io);
    int Rr = mb_rows(d);
    io.R = in->NB * Rr;
    io.qpos = a->zpos, io.kpos = a->zpos;
    io.shape = (tr_attn_shape){.NB = in->NB, .Tq = Rr, .Tk = Rr, .NH = d->NH, .KVH = d->NH, .D = d->Dh,
                               .causal = 0, .scale = 1.0 / sqrt((double)d->Dh)};
    io.S = io.R;
    if (d->faithful) {
        io.S = in->NR + in->NB * d->G;
        io.shape.Tk = in->C + d->G;
        io.shape.kmask = in->kmask;
        io.ctx = kc;
        io.kv_rows = mb_kv_rows;
        io.kv_rows_backward = mb_kv_rows_backward;
        io.attn_forward = mb_attn_forward;
        io.attn_backward = mb_attn_backward;
    }
    return io;
}

void sp_tr_mb_forward(sp_pool *pool, const tr_mb_dims *d, const tr_mb_off *o, const real *w, struct MB_ACTS *a,
                      const struct MB_IN *in, double denom, tr_stats *st, real *cstar) {
    int NB = in->NB, G = d->G, D = d->d, Ht = d->Ht, V = d->V, r = d->r, Rr = mb_rows(d), C = in->C;
    int T = NB * G;
    double eps = d->eps;
    /* the block's input rows (docs/MLX-BUN-DRAFTERS.md, "The computation") */
    sp_tr_linear_forward(pool, a->anc_p, in->anchor, w + o->tok, NB, Ht, D);
    if (!d->faithful) { /* h_ctx: the final-norm block of the element's last window row */
        for (int e = 0; e < NB; e++) {
            real *c = a->cin + (size_t)e * Ht;
            if (C > 0 && in->kmask[(size_t)e * (C + G) + C - 1])
                memcpy(c, in->F + ((size_t)in->ctx_row[e] + C - 1) * d->m * Ht + (size_t)(d->m - 1) * Ht,
                       sizeof(real) * Ht);
            else memset(c, 0, sizeof(real) * Ht);
        }
        sp_tr_linear_forward(pool, a->ctx_p, a->cin, w + o->ctx, NB, Ht, D);
    } else { /* H_ctx = RMSNorm(W_c · taps, ctx_norm) */
        sp_tr_linear_forward(pool, a->hc_pre, in->F, w + o->ctx, in->NR, d->m * Ht, D);
        sp_tr_rmsnorm_forward(a->hc, a->rstd_hc, a->hc_pre, w + o->ctx_norm, in->NR, D, eps);
    }
    const real *pos = w + o->pos, *mask = w + o->mask;
    for (int e = 0; e < NB; e++) {
        real *x = a->x[0] + (size_t)e * Rr * D;
        int k0 = 0;
        if (!d->faithful) { /* row 0: ctx_proj(h_ctx) + pos_emb[0] */
            for (int i = 0; i < D; i++) x[i] = a->ctx_p[(size_t)e * D + i] + pos[i];
            k0 = 1;
        }
        for (int j = 0; j < G; j++) { /* the anchor, then the mask rows */
            real *xr = x + (size_t)(k0 + j) * D;
            const real *src = j == 0 ? a->anc_p + (size_t)e * D : mask + (size_t)(j - 1) * D;
            const real *pr = pos + (size_t)(k0 + j) * D;
            for (int i = 0; i < D; i++) xr[i] = src[i] + pr[i];
        }
    }
    sp_block_desc bd = mb_desc(d);
    mb_kv_ctx kc = {.d = d, .a = a, .in = in};
    tr_block_io io = mb_io(d, a, in, &kc);
    for (int l = 0; l < d->L; l++) {
        tr_block_w bw = mb_layer_w(o, w, l, a->inv_freq);
        if (d->faithful) { /* the context rows through this layer's attn_norm */
            sp_tr_rmsnorm_forward(a->cn[l], a->rstd_cn[l], a->hc, bw.attn_norm, in->NR, D, eps);
            kc.l = l;
        }
        sp_tr_block_forward(pool, &bd, &bw, &io, a->x[l], a->x[l + 1], &a->la[l]);
    }
    /* the block rows (v1 drops its context row) → out_norm → out_proj → LM head (soft-capped) */
    for (int e = 0; e < NB; e++)
        memcpy(a->hb + (size_t)e * G * D, a->x[d->L] + ((size_t)e * Rr + (Rr - G)) * D, sizeof(real) * G * D);
    sp_tr_rmsnorm_forward(a->on, a->rstd_on, a->hb, w + o->out_norm, T, D, eps);
    sp_tr_linear_forward(pool, a->ho, a->on, w + o->out_proj, T, D, Ht);
    sp_tr_lmhead_forward(pool, a->U, a->ho, in->Wlm, T, Ht, V);
    if (d->softcap > 0) sp_tr_softcap_forward(a->U, a->U, (size_t)T * V, (real)d->softcap);
    /* Z = U + W2 · W1[prev];  conf = [on ; W1[prev]] · conf.w + conf.b */
    sp_tr_markov_forward(pool, a->bias, a->code, in->prev, w + o->w1, w + o->w2, T, V, r);
    for (size_t i = 0; i < (size_t)T * V; i++) a->Z[i] = a->U[i] + a->bias[i];
    sp_tr_conf_forward(a->conf, a->on, a->code, w + o->cw, w + o->cb, T, D, r);
    double terms[4];
    st->loss = sp_tr_spark_loss_forward(terms, a->q, a->cstar, a->Z, in->P, in->labels, a->conf, in->wt, T, V,
                                        d->alpha, denom);
    st->ce = terms[0], st->l1 = terms[1], st->bce = terms[2], st->wsum = terms[3];
    if (in->cstar_target) { /* the BCE term against fixed targets (the finite-difference test) */
        double bce = 0;
        for (int t = 0; t < T; t++) {
            double z = a->conf[t], y = in->cstar_target[t];
            bce += in->wt[t] * ((z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z))));
        }
        st->loss += d->alpha[2] * (bce - terms[2]) / denom;
        st->bce = bce;
    }
    if (cstar && in->P) memcpy(cstar, a->cstar, sizeof(real) * T);
    if (in->cstar_target) memcpy(a->cstar, in->cstar_target, sizeof(real) * T);
}

void sp_tr_mb_backward(sp_pool *pool, const tr_mb_dims *d, const tr_mb_off *o, const real *w, struct MB_ACTS *a,
                       const struct MB_IN *in, double denom, real *grad) {
    int NB = in->NB, G = d->G, D = d->d, Ht = d->Ht, V = d->V, r = d->r, Rr = mb_rows(d);
    int T = NB * G;
    size_t TV = (size_t)T * V;
    memset(a->dZ, 0, sizeof(real) * TV);
    memset(a->dconf, 0, sizeof(real) * T);
    sp_tr_spark_loss_backward(a->dZ, a->dconf, a->q, a->cstar, in->P, in->labels, a->conf, in->wt, T, V, d->alpha,
                              denom);
    /* conf = [on ; code] · conf.w + conf.b */
    memset(a->don, 0, sizeof(real) * T * D);
    memset(a->dcode, 0, sizeof(real) * T * r);
    sp_tr_conf_backward(a->don, a->dcode, grad + o->cw, grad + o->cb, a->dconf, a->on, a->code, w + o->cw, T, D, r);
    /* Z = U + bias: the Markov head (dcode holds the confidence head's part) */
    sp_tr_markov_backward(pool, grad + o->w1, grad + o->w2, a->dcode, a->dZ, a->code, in->prev, w + o->w2, T, V, r);
    const real *dU = a->dZ;
    if (d->softcap > 0) {
        memset(a->dU, 0, sizeof(real) * TV);
        sp_tr_softcap_backward(a->dU, a->dZ, a->U, TV, (real)d->softcap);
        dU = a->dU;
    }
    /* U = ho · Wlmᵀ (frozen);  ho = on · out_projᵀ;  on = out_norm(hb) */
    memset(a->dho, 0, sizeof(real) * T * Ht);
    sp_tr_lmhead_backward(pool, a->dho, dU, in->Wlm, T, Ht, V);
    sp_tr_linear_backward(pool, a->don, grad + o->out_proj, a->dho, a->on, w + o->out_proj, T, D, Ht);
    memset(a->dhb, 0, sizeof(real) * T * D);
    sp_tr_rmsnorm_backward(a->dhb, grad + o->out_norm, a->don, a->hb, w + o->out_norm, a->rstd_on, T, D);
    /* the backbone, last layer first; dx: dL/d(layer output) → dL/d(layer input) */
    memset(a->dx, 0, sizeof(real) * NB * Rr * D);
    for (int e = 0; e < NB; e++)
        memcpy(a->dx + ((size_t)e * Rr + (Rr - G)) * D, a->dhb + (size_t)e * G * D, sizeof(real) * G * D);
    if (d->faithful) memset(a->dhc, 0, sizeof(real) * in->NR * D);
    sp_block_desc bd = mb_desc(d);
    mb_kv_ctx kc = {.d = d, .a = a, .in = in};
    tr_block_io io = mb_io(d, a, in, &kc);
    for (int l = d->L - 1; l >= 0; l--) {
        tr_block_w bw = mb_layer_w(o, w, l, a->inv_freq);
        tr_block_g bg = mb_layer_g(o, grad, l);
        kc.l = l, kc.attn_norm = bw.attn_norm, kc.g_attn_norm = bg.attn_norm;
        sp_tr_block_backward(pool, &bd, &bw, &bg, &io, a->x[l], &a->la[l], &a->sc, a->dx);
    }
    /* x0 = [ctx_p + pos_emb[0]] (v1), anchor + pos[k0], mask_emb[j−1] + pos[k0+j] */
    real *gpos = grad + o->pos, *gmask = grad + o->mask;
    int k0 = d->faithful ? 0 : 1;
    for (int e = 0; e < NB; e++) {
        const real *dx = a->dx + (size_t)e * Rr * D;
        for (int k = 0; k < Rr; k++)
            for (int i = 0; i < D; i++) gpos[(size_t)k * D + i] += dx[(size_t)k * D + i];
        if (!d->faithful) memcpy(a->dctx + (size_t)e * D, dx, sizeof(real) * D);
        memcpy(a->danc + (size_t)e * D, dx + (size_t)k0 * D, sizeof(real) * D);
        for (int j = 1; j < G; j++)
            for (int i = 0; i < D; i++) gmask[(size_t)(j - 1) * D + i] += dx[(size_t)(k0 + j) * D + i];
    }
    sp_tr_linear_backward(pool, NULL, grad + o->tok, a->danc, in->anchor, w + o->tok, NB, Ht, D);
    if (!d->faithful) {
        sp_tr_linear_backward(pool, NULL, grad + o->ctx, a->dctx, a->cin, w + o->ctx, NB, Ht, D);
    } else { /* hc = ctx_norm(hc_pre);  hc_pre = F · W_cᵀ */
        memset(a->dhc_pre, 0, sizeof(real) * in->NR * D);
        sp_tr_rmsnorm_backward(a->dhc_pre, grad + o->ctx_norm, a->dhc, a->hc_pre, w + o->ctx_norm, a->rstd_hc, in->NR,
                               D);
        sp_tr_linear_backward(pool, NULL, grad + o->ctx, a->dhc_pre, in->F, w + o->ctx, in->NR, d->m * Ht, D);
    }
}
