/* block_train_impl.h — the body of sp_tr_block_forward / sp_tr_block_backward (block_train.h), written
 * once over `real` with the float names and compiled by block_train.c (real = float) and
 * block_train_f64.c (real = double, every name renamed to its _f64 twin by ops_f64_names.h).
 * The includer defines real and includes block_train.h (and, for double, the rename list).
 *
 * The backward quotes the forward line it differentiates. Sums that reach one gradient from
 * several ops (dxn from the Q, K and V projections) run in a fixed order, so a run is
 * reproducible bit for bit whatever the thread count. */

static void tr_block_zero(real *x, size_t n) { memset(x, 0, n * sizeof *x); }

void sp_tr_block_attn_forward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_io *io,
                           const real *x, const tr_block_acts *a) {
    int R = io->R, S = io->kv_rows ? io->S : io->R, H = d->H, NH = d->NH, KVH = d->KVH, D = d->D;
    int QD = NH * D, KD = KVH * D;
    const int *kpos = io->kv_rows ? io->kpos : io->qpos;
    double eps = d->eps; /* the description's float epsilon, as inference uses it */
    size_t RH = (size_t)R * H;

    /* xn = norm_attn(x); the K/V input rows are xn or built from it */
    sp_tr_rmsnorm_forward(a->xn, a->rstd_in, x, w->attn_norm, R, H, eps);
    const real *kvin = a->xn;
    if (io->kv_rows) {
        io->kv_rows(io->ctx, a->kvin, a->xn);
        kvin = a->kvin;
    }
    /* q = rope(q_norm(xn · Wqᵀ)), k = rope(k_norm(kvin · Wkᵀ)) */
    sp_tr_linear_forward(pool, a->qp, a->xn, w->wq, R, H, QD);
    if (d->qk_norm) sp_tr_rmsnorm_forward(a->q, a->rstd_q, a->qp, w->q_norm, R * NH, D, eps);
    sp_tr_rope_forward(a->q, d->qk_norm ? a->q : a->qp, R, NH, D, io->qpos, w->inv_freq);
    sp_tr_linear_forward(pool, a->kp, kvin, w->wk, S, H, KD);
    if (d->qk_norm) sp_tr_rmsnorm_forward(a->k, a->rstd_k, a->kp, w->k_norm, S * KVH, D, eps);
    sp_tr_rope_forward(a->k, d->qk_norm ? a->k : a->kp, S, KVH, D, kpos, w->inv_freq);
    /* v = kvin · Wvᵀ, or v_norm (weightless) of that or of the raw K projection */
    if (!d->v_norm) {
        sp_tr_linear_forward(pool, a->v, kvin, w->wv, S, H, KD);
    } else {
        if (d->v_proj) sp_tr_linear_forward(pool, a->vp, kvin, w->wv, S, H, KD);
        sp_tr_rmsnorm_forward(a->v, a->rstd_v, d->v_proj ? a->vp : a->kp, w->ones, S * KVH, D, eps);
    }
    if (io->attn_forward) io->attn_forward(io->ctx, pool, a->ao, a->att, a->q, a->k, a->v);
    else sp_tr_attention_forward(pool, a->ao, a->att, a->q, a->k, a->v, &io->shape);

    /* x1 = x + [norm_attn_post](ao · Woᵀ) */
    sp_tr_linear_forward(pool, a->o, a->ao, w->wo, R, QD, H);
    if (d->post_norms) {
        sp_tr_rmsnorm_forward(a->x1, a->rstd_o, a->o, w->attn_post_norm, R, H, eps);
        for (size_t i = 0; i < RH; i++) a->x1[i] = x[i] + a->x1[i];
    } else {
        for (size_t i = 0; i < RH; i++) a->x1[i] = x[i] + a->o[i];
    }
}

void sp_tr_block_mlp_forward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, int R, const real *x1, real *y,
                          const tr_block_acts *a) {
    int H = d->H, I = d->I;
    double eps = d->eps;
    size_t RH = (size_t)R * H;
    /* y = (x1 + [norm_ffn_post](down(act(gate(n)) ⊙ up(n)))) · layer_scalar,  n = norm_ffn(x1) */
    sp_tr_rmsnorm_forward(a->xn2, a->rstd_ffn, x1, w->ffn_norm, R, H, eps);
    sp_tr_linear_forward(pool, a->g, a->xn2, w->w_gate, R, H, I);
    sp_tr_linear_forward(pool, a->u, a->xn2, w->w_up, R, H, I);
    if (d->act == SP_ACT_GELU_TANH) sp_tr_geglu_forward(a->gu, a->g, a->u, (size_t)R * I);
    else sp_tr_swiglu_forward(a->gu, a->g, a->u, (size_t)R * I);
    sp_tr_linear_forward(pool, a->dn, a->gu, w->w_down, R, I, H);
    if (d->post_norms) {
        sp_tr_rmsnorm_forward(y, a->rstd_dn, a->dn, w->ffn_post_norm, R, H, eps);
        for (size_t i = 0; i < RH; i++) y[i] = x1[i] + y[i];
    } else {
        for (size_t i = 0; i < RH; i++) y[i] = x1[i] + a->dn[i];
    }
    if (w->layer_scalar != 1)
        for (size_t i = 0; i < RH; i++) y[i] *= w->layer_scalar;
}

void sp_tr_block_forward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_io *io,
                      const real *x, real *y, const tr_block_acts *a) {
    sp_tr_block_attn_forward(pool, d, w, io, x, a);
    sp_tr_block_mlp_forward(pool, d, w, io->R, a->x1, y, a);
}

void sp_tr_block_mlp_backward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_g *g, int R,
                           const real *x1, const tr_block_acts *a, const tr_block_scratch *s, real *dx) {
    int H = d->H, I = d->I;
    size_t RH = (size_t)R * H;

    /* y = (x1 + [norm_ffn_post](dn)) · layer_scalar  (scalar frozen) */
    if (w->layer_scalar != 1)
        for (size_t i = 0; i < RH; i++) dx[i] *= w->layer_scalar;
    const real *ddn = dx;
    if (d->post_norms) {
        tr_block_zero(s->dh, RH);
        sp_tr_rmsnorm_backward(s->dh, g->ffn_post_norm, dx, a->dn, w->ffn_post_norm, a->rstd_dn, R, H);
        ddn = s->dh;
    }
    /* dn = gu · Wdownᵀ;  gu = act(g) ⊙ u;  g, u = n · W{gate,up}ᵀ */
    tr_block_zero(s->dgu, (size_t)R * I);
    sp_tr_linear_backward(pool, s->dgu, g->w_down, ddn, a->gu, w->w_down, R, I, H);
    tr_block_zero(s->dg, (size_t)R * I);
    tr_block_zero(s->du, (size_t)R * I);
    if (d->act == SP_ACT_GELU_TANH) sp_tr_geglu_backward(s->dg, s->du, s->dgu, a->g, a->u, (size_t)R * I);
    else sp_tr_swiglu_backward(s->dg, s->du, s->dgu, a->g, a->u, (size_t)R * I);
    tr_block_zero(s->dxn, RH);
    sp_tr_linear_backward(pool, s->dxn, g->w_gate, s->dg, a->xn2, w->w_gate, R, H, I);
    sp_tr_linear_backward(pool, s->dxn, g->w_up, s->du, a->xn2, w->w_up, R, H, I);
    /* n = norm_ffn(x1): dx becomes dL/dx1 (the residual carries dL/dy) */
    sp_tr_rmsnorm_backward(dx, g->ffn_norm, s->dxn, x1, w->ffn_norm, a->rstd_ffn, R, H);
}

void sp_tr_block_attn_backward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_g *g,
                            const tr_block_io *io, const real *x, const tr_block_acts *a, const tr_block_scratch *s,
                            real *dx) {
    int R = io->R, S = io->kv_rows ? io->S : io->R, H = d->H, NH = d->NH, KVH = d->KVH, D = d->D;
    int QD = NH * D, KD = KVH * D;
    const int *kpos = io->kv_rows ? io->kpos : io->qpos;
    size_t RH = (size_t)R * H;

    /* x1 = x + [norm_attn_post](o);  o = ao · Woᵀ */
    const real *dout = dx;
    if (d->post_norms) {
        tr_block_zero(s->dh, RH);
        sp_tr_rmsnorm_backward(s->dh, g->attn_post_norm, dx, a->o, w->attn_post_norm, a->rstd_o, R, H);
        dout = s->dh;
    }
    tr_block_zero(s->dao, (size_t)R * QD);
    sp_tr_linear_backward(pool, s->dao, g->wo, dout, a->ao, w->wo, R, QD, H);
    tr_block_zero(s->dq, (size_t)R * QD);
    tr_block_zero(s->dk, (size_t)S * KD);
    tr_block_zero(s->dv, (size_t)S * KD);
    if (io->attn_backward) io->attn_backward(io->ctx, pool, s->dq, s->dk, s->dv, s->dao, a->q, a->k, a->v, a->att);
    else sp_tr_attention_backward(pool, s->dq, s->dk, s->dv, s->dp, s->dao, a->q, a->k, a->v, a->att, &io->shape);

    /* q = rope(q_norm(qp)), k = rope(k_norm(kp)): dqp, dkp the gradients of the raw projections */
    tr_block_zero(s->dq2, (size_t)R * QD);
    sp_tr_rope_backward(s->dq2, s->dq, R, NH, D, io->qpos, w->inv_freq);
    real *dqp = s->dq2;
    if (d->qk_norm) {
        tr_block_zero(s->dq, (size_t)R * QD);
        sp_tr_rmsnorm_backward(s->dq, g->q_norm, s->dq2, a->qp, w->q_norm, a->rstd_q, R * NH, D);
        dqp = s->dq;
    }
    tr_block_zero(s->dk2, (size_t)S * KD);
    sp_tr_rope_backward(s->dk2, s->dk, S, KVH, D, kpos, w->inv_freq);
    real *dkp = s->dk2;
    if (d->qk_norm) {
        tr_block_zero(s->dk, (size_t)S * KD);
        sp_tr_rmsnorm_backward(s->dk, g->k_norm, s->dk2, a->kp, w->k_norm, a->rstd_k, S * KVH, D);
        dkp = s->dk;
    }
    /* v = v_norm(vp or kp): into dv2 (its own projection) or into dkp (the raw K) */
    const real *dvp = s->dv;
    if (d->v_norm) {
        real *dsrc = dkp;
        if (d->v_proj) {
            tr_block_zero(s->dv2, (size_t)S * KD);
            dsrc = s->dv2;
        }
        sp_tr_rmsnorm_backward(dsrc, NULL, s->dv, d->v_proj ? a->vp : a->kp, w->ones, a->rstd_v, S * KVH, D);
        dvp = d->v_proj ? s->dv2 : NULL;
    }
    /* qp = xn · Wqᵀ;  kp, vp = kvin · W{k,v}ᵀ */
    const real *xn = a->xn;
    if (io->kv_rows) {
        tr_block_zero(s->dkvin, (size_t)S * H);
        if (dvp) sp_tr_linear_backward(pool, s->dkvin, g->wv, dvp, a->kvin, w->wv, S, H, KD);
        sp_tr_linear_backward(pool, s->dkvin, g->wk, dkp, a->kvin, w->wk, S, H, KD);
        tr_block_zero(s->dxn, RH);
        sp_tr_linear_backward(pool, s->dxn, g->wq, dqp, xn, w->wq, R, H, QD);
        io->kv_rows_backward(io->ctx, s->dxn, s->dkvin);
    } else {
        tr_block_zero(s->dxn, RH);
        sp_tr_linear_backward(pool, s->dxn, g->wq, dqp, xn, w->wq, R, H, QD);
        sp_tr_linear_backward(pool, s->dxn, g->wk, dkp, xn, w->wk, R, H, KD);
        if (dvp) sp_tr_linear_backward(pool, s->dxn, g->wv, dvp, xn, w->wv, R, H, KD);
    }
    /* xn = norm_attn(x): dx becomes dL/dx */
    sp_tr_rmsnorm_backward(dx, g->attn_norm, s->dxn, x, w->attn_norm, a->rstd_in, R, H);
}

void sp_tr_block_backward(sp_pool *pool, const sp_block_desc *d, const tr_block_w *w, const tr_block_g *g,
                       const tr_block_io *io, const real *x, const tr_block_acts *a, const tr_block_scratch *s,
                       real *dx) {
    sp_tr_block_mlp_backward(pool, d, w, g, io->R, a->x1, a, s, dx);
    sp_tr_block_attn_backward(pool, d, w, g, io, x, a, s, dx);
}
