/* test_train_ops.c — every training backward (src/train/ops.h) against central finite
 * differences in double precision, on random non-zero inputs with fixed seeds; and the float
 * instantiation (the trainer's path, threaded GEMMs) against the double one.
 *
 * Each check: loss = Σ r ⊙ out for a random r (or the loss itself for loss ops); the analytic
 * gradient comes from backward run on top of a random non-zero starting gradient (so the
 * "accumulate, never overwrite" rule is checked too); every input element is perturbed by
 * ±EPS and (f(x+) − f(x−)) / 2·EPS compared with |a − fd| ≤ ATOL + RTOL·|fd|. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "train/ops.h"

#define EPS 1e-5
#define ATOL 1e-7
#define RTOL 1e-5

static void fill(double *x, size_t n, double a, unsigned seed) {
    float *f = malloc(n * sizeof(float));
    harness_fill(f, n, (float)a, seed);
    for (size_t i = 0; i < n; i++) x[i] = f[i];
    free(f);
}
static double *rnd(size_t n, double a, unsigned seed) {
    double *x = malloc(n * sizeof(double));
    fill(x, n, a, seed);
    return x;
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The op under test: recompute the scalar loss from the current inputs. */
typedef double (*loss_fn)(void *ctx);

/* grad0: the starting gradient the backward accumulated onto; grad: after backward. */
static void fd_check(const char *what, double *x, size_t n, const double *grad0, const double *grad,
                     loss_fn f, void *ctx) {
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + EPS;
        double fp = f(ctx);
        x[i] = keep - EPS;
        double fm = f(ctx);
        x[i] = keep;
        double fd = (fp - fm) / (2 * EPS), an = grad[i] - grad0[i];
        double err = fabs(an - fd);
        if (err > worst) worst = err;
        if (err > ATOL + RTOL * fabs(fd)) {
            if (bad++ < 3) CHECK(0, "%s[%zu]: analytic %.10g vs finite difference %.10g", what, i, an, fd);
        }
    }
    CHECK(bad == 0, "%s: %d of %zu elements off (worst abs error %.3g)", what, bad, n, worst);
}

/* a gradient buffer with a random non-zero start and its copy */
typedef struct { double *g, *g0; size_t n; } grad_buf;
static grad_buf gbuf(size_t n, unsigned seed) {
    grad_buf b = {rnd(n, 0.5, seed), malloc(n * sizeof(double)), n};
    memcpy(b.g0, b.g, n * sizeof(double));
    return b;
}
static void gfree(grad_buf *b) { free(b->g); free(b->g0); }

/* ---- linear ----------------------------------------------------------------------------- */
enum { T = 5, K = 7, N = 6 };
typedef struct { double *in, *W, *r, *out; } lin_ctx;
static double lin_loss(void *p) {
    lin_ctx *c = p;
    sp_tr_linear_forward_f64(NULL, c->out, c->in, c->W, T, K, N);
    return dot(c->out, c->r, T * N);
}
static void test_linear(void) {
    lin_ctx c = {rnd(T * K, 1, 1), rnd(N * K, 1, 2), rnd(T * N, 1, 3), malloc(T * N * sizeof(double))};
    grad_buf din = gbuf(T * K, 4), dW = gbuf(N * K, 5);
    lin_loss(&c);
    sp_tr_linear_backward_f64(NULL, din.g, dW.g, c.r, c.in, c.W, T, K, N);
    fd_check("linear din", c.in, T * K, din.g0, din.g, lin_loss, &c);
    fd_check("linear dW", c.W, N * K, dW.g0, dW.g, lin_loss, &c);
    free(c.in); free(c.W); free(c.r); free(c.out); gfree(&din); gfree(&dW);
}

/* ---- RMSNorm ------------------------------------------------------------------------------ */
typedef struct { double *in, *w, *r, *out, *rstd; } rms_ctx;
static double rms_loss(void *p) {
    rms_ctx *c = p;
    sp_tr_rmsnorm_forward_f64(c->out, c->rstd, c->in, c->w, T, K, 1e-6);
    return dot(c->out, c->r, T * K);
}
static void test_rmsnorm(void) {
    rms_ctx c = {rnd(T * K, 1, 11), rnd(K, 1, 12), rnd(T * K, 1, 13), malloc(T * K * 8), malloc(T * 8)};
    grad_buf din = gbuf(T * K, 14), dw = gbuf(K, 15);
    rms_loss(&c);
    sp_tr_rmsnorm_backward_f64(din.g, dw.g, c.r, c.in, c.w, c.rstd, T, K);
    fd_check("rmsnorm din", c.in, T * K, din.g0, din.g, rms_loss, &c);
    fd_check("rmsnorm dw", c.w, K, dw.g0, dw.g, rms_loss, &c);
    free(c.in); free(c.w); free(c.r); free(c.out); free(c.rstd); gfree(&din); gfree(&dw);
}

/* ---- RoPE --------------------------------------------------------------------------------- */
enum { RNH = 3, RD = 8 };
static const int rope_pos[T] = {0, 3, 7, 1, 12};
static const float rope_freq[RD / 2] = {1.0f, 0.3f, 0.05f, 0.001f};
typedef struct { double *in, *r, *out; } rope_ctx;
static double rope_loss(void *p) {
    rope_ctx *c = p;
    sp_tr_rope_forward_f64(c->out, c->in, T, RNH, RD, rope_pos, rope_freq);
    return dot(c->out, c->r, T * RNH * RD);
}
static void test_rope(void) {
    size_t n = T * RNH * RD;
    rope_ctx c = {rnd(n, 1, 21), rnd(n, 1, 22), malloc(n * 8)};
    grad_buf din = gbuf(n, 23);
    rope_loss(&c);
    sp_tr_rope_backward_f64(din.g, c.r, T, RNH, RD, rope_pos, rope_freq);
    fd_check("rope din", c.in, n, din.g0, din.g, rope_loss, &c);
    free(c.in); free(c.r); free(c.out); gfree(&din);
}

/* ---- attention with injected context K/V, block mask and key padding --------------------- */
enum { AQ = 4, AC = 5, AK = AC + AQ, ANH = 4, AKVH = 2, AD = 6 };
/* keys 0..AC-1 are context (first two are left padding, masked), AC.. are the block */
static const uint8_t att_mask[AK] = {0, 0, 1, 1, 1, 1, 1, 1, 1};
static const tr_attn_shape att_shape = {.NB = 1, .Tq = AQ, .Tk = AK, .NH = ANH, .KVH = AKVH, .D = AD, .kmask = att_mask,
                                        .scale = 0.4};
typedef struct { double *q, *k, *v, *r, *out, *att; } att_ctx;
static double att_loss(void *p) {
    att_ctx *c = p;
    sp_tr_attention_forward_f64(NULL, c->out, c->att, c->q, c->k, c->v, &att_shape);
    return dot(c->out, c->r, AQ * ANH * AD);
}
static void test_attention(void) {
    size_t nq = AQ * ANH * AD, nk = AK * AKVH * AD;
    att_ctx c = {rnd(nq, 1, 31), rnd(nk, 1, 32), rnd(nk, 1, 33), rnd(nq, 1, 34), malloc(nq * 8),
                 malloc(ANH * AQ * AK * 8)};
    grad_buf dq = gbuf(nq, 35), dk = gbuf(nk, 36), dv = gbuf(nk, 37);
    double dp[AKVH * AK];
    att_loss(&c);
    sp_tr_attention_backward_f64(NULL, dq.g, dk.g, dv.g, dp, c.r, c.q, c.k, c.v, c.att, &att_shape);
    fd_check("attention dq", c.q, nq, dq.g0, dq.g, att_loss, &c);
    fd_check("attention dk", c.k, nk, dk.g0, dk.g, att_loss, &c);
    fd_check("attention dv", c.v, nk, dv.g0, dv.g, att_loss, &c);
    /* padded keys get exactly no gradient and no weight */
    for (int i = 0; i < 2 * AKVH * AD; i++) CHECK(dk.g[i] == dk.g0[i] && dv.g[i] == dv.g0[i], "padded key %d", i);
    for (int i = 0; i < ANH * AQ; i++) CHECK(c.att[(size_t)i * AK] == 0, "att to padding");
    free(c.q); free(c.k); free(c.v); free(c.r); free(c.out); free(c.att); gfree(&dq); gfree(&dk); gfree(&dv);
}

/* ---- SiLU-gated MLP: down( silu(gate(x)) ⊙ up(x) ) --------------------------------------- */
enum { MI = 9 };
typedef struct { double *x, *wg, *wu, *wd, *r, *g, *u, *s, *out; } mlp_ctx;
static double mlp_loss(void *p) {
    mlp_ctx *c = p;
    sp_tr_linear_forward_f64(NULL, c->g, c->x, c->wg, T, K, MI);
    sp_tr_linear_forward_f64(NULL, c->u, c->x, c->wu, T, K, MI);
    sp_tr_swiglu_forward_f64(c->s, c->g, c->u, T * MI);
    sp_tr_linear_forward_f64(NULL, c->out, c->s, c->wd, T, MI, K);
    return dot(c->out, c->r, T * K);
}
static void test_mlp(void) {
    mlp_ctx c = {rnd(T * K, 1, 41), rnd(MI * K, 1, 42), rnd(MI * K, 1, 43), rnd(K * MI, 1, 44), rnd(T * K, 1, 45),
                 malloc(T * MI * 8), malloc(T * MI * 8), malloc(T * MI * 8), malloc(T * K * 8)};
    grad_buf dx = gbuf(T * K, 46), dwg = gbuf(MI * K, 47), dwu = gbuf(MI * K, 48), dwd = gbuf(K * MI, 49);
    double *ds = calloc(T * MI, 8), *dg = calloc(T * MI, 8), *du = calloc(T * MI, 8);
    mlp_loss(&c);
    sp_tr_linear_backward_f64(NULL, ds, dwd.g, c.r, c.s, c.wd, T, MI, K);
    sp_tr_swiglu_backward_f64(dg, du, ds, c.g, c.u, T * MI);
    sp_tr_linear_backward_f64(NULL, dx.g, dwg.g, dg, c.x, c.wg, T, K, MI);
    sp_tr_linear_backward_f64(NULL, dx.g, dwu.g, du, c.x, c.wu, T, K, MI);
    fd_check("mlp dx", c.x, T * K, dx.g0, dx.g, mlp_loss, &c);
    fd_check("mlp dgate", c.wg, MI * K, dwg.g0, dwg.g, mlp_loss, &c);
    fd_check("mlp dup", c.wu, MI * K, dwu.g0, dwu.g, mlp_loss, &c);
    fd_check("mlp ddown", c.wd, K * MI, dwd.g0, dwd.g, mlp_loss, &c);
    free(c.x); free(c.wg); free(c.wu); free(c.wd); free(c.r); free(c.g); free(c.u); free(c.s); free(c.out);
    free(ds); free(dg); free(du); gfree(&dx); gfree(&dwg); gfree(&dwu); gfree(&dwd);
}

/* ---- GeGLU (Gemma-4 MLP): gelu_tanh(g) ⊙ u, and against the inference kernel's formula ---- */
typedef struct { double *g, *u, *r, *out; } geglu_ctx;
static double geglu_loss(void *p) {
    geglu_ctx *c = p;
    sp_tr_geglu_forward_f64(c->out, c->g, c->u, T * MI);
    return dot(c->out, c->r, T * MI);
}
static void test_geglu(void) {
    geglu_ctx c = {rnd(T * MI, 3, 141), rnd(T * MI, 1, 142), rnd(T * MI, 1, 143), malloc(T * MI * 8)};
    grad_buf dg = gbuf(T * MI, 144), du = gbuf(T * MI, 145);
    geglu_loss(&c);
    sp_tr_geglu_backward_f64(dg.g, du.g, c.r, c.g, c.u, T * MI);
    fd_check("geglu dgate", c.g, T * MI, dg.g0, dg.g, geglu_loss, &c);
    fd_check("geglu dup", c.u, T * MI, du.g0, du.g, geglu_loss, &c);
    geglu_loss(&c); /* fd_check leaves out[] at its last perturbed input */
    /* the op equals the inference kernel sp_gelu_tanh_mul's definition */
    for (int i = 0; i < T * MI; i++) {
        double g = c.g[i], ref = 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * c.u[i];
        CHECK(fabs(c.out[i] - ref) < 1e-12, "geglu[%d] %.12g vs %.12g", i, c.out[i], ref);
    }
    free(c.g); free(c.u); free(c.r); free(c.out); gfree(&dg); gfree(&du);
}

/* ---- soft-capped LM head under CE: Z = c·tanh(h·Wᵀ / c), loss = CE(Z) ------------------- */
enum { SV = 11, SH = 6 };
typedef struct { double *h, *W, *U, *Z, *q, *wt; int32_t lab[T]; } cap_ctx;
static double cap_loss(void *p) {
    cap_ctx *c = p;
    sp_tr_lmhead_forward_f64(NULL, c->U, c->h, c->W, T, SH, SV);
    sp_tr_softcap_forward_f64(c->Z, c->U, T * SV, 3.0);
    return sp_tr_ce_forward_f64(c->q, c->Z, c->lab, c->wt, T, SV, 2.5);
}
static void test_softcap_lmhead(void) {
    cap_ctx c = {rnd(T * SH, 2, 151), rnd(SV * SH, 2, 152), malloc(T * SV * 8), malloc(T * SV * 8),
                 malloc(T * SV * 8), rnd(T, 1, 153), {0}};
    for (int t = 0; t < T; t++) { c.lab[t] = (t * 4 + 1) % SV; c.wt[t] = fabs(c.wt[t]) + 0.1; }
    grad_buf dh = gbuf(T * SH, 154);
    double *dZ = calloc(T * SV, 8), *dU = calloc(T * SV, 8);
    cap_loss(&c);
    double mx = 0;
    for (int i = 0; i < T * SV; i++) mx = fmax(mx, fabs(c.U[i]));
    CHECK(mx > 3.0, "logits %.3g never reach the cap: the test would not see tanh's curvature", mx);
    sp_tr_ce_backward_f64(dZ, c.q, c.lab, c.wt, T, SV, 2.5);
    sp_tr_softcap_backward_f64(dU, dZ, c.Z, T * SV, 3.0);
    sp_tr_lmhead_backward_f64(NULL, dh.g, dU, c.W, T, SH, SV);
    fd_check("softcap lmhead dh", c.h, T * SH, dh.g0, dh.g, cap_loss, &c);
    free(c.h); free(c.W); free(c.U); free(c.Z); free(c.q); free(c.wt); free(dZ); free(dU); gfree(&dh);
}

/* ---- fc fusion of m tapped layers: ctx = RMSNorm_hidden(F[T, m·H] · W_fcᵀ) --------------- */
enum { FM = 3, FH = 4 };
typedef struct { double *F, *W, *w, *r, *y, *out, *rstd; } fc_ctx;
static double fc_loss(void *p) {
    fc_ctx *c = p;
    sp_tr_linear_forward_f64(NULL, c->y, c->F, c->W, T, FM * FH, FH);
    sp_tr_rmsnorm_forward_f64(c->out, c->rstd, c->y, c->w, T, FH, 1e-6);
    return dot(c->out, c->r, T * FH);
}
static void test_fc_fusion(void) {
    fc_ctx c = {rnd(T * FM * FH, 2, 51), rnd(FH * FM * FH, 0.5, 52), rnd(FH, 1, 53), rnd(T * FH, 1, 54),
                malloc(T * FH * 8), malloc(T * FH * 8), malloc(T * 8)};
    grad_buf dW = gbuf(FH * FM * FH, 55), dw = gbuf(FH, 56);
    double *dy = calloc(T * FH, 8);
    fc_loss(&c);
    sp_tr_rmsnorm_backward_f64(dy, dw.g, c.r, c.y, c.w, c.rstd, T, FH);
    sp_tr_linear_backward_f64(NULL, NULL, dW.g, dy, c.F, c.W, T, FM * FH, FH);
    fd_check("fc dW_fc", c.W, FH * FM * FH, dW.g0, dW.g, fc_loss, &c);
    fd_check("fc dhidden_norm", c.w, FH, dw.g0, dw.g, fc_loss, &c);
    free(c.F); free(c.W); free(c.w); free(c.r); free(c.y); free(c.out); free(c.rstd); free(dy);
    gfree(&dW); gfree(&dw);
}

/* ---- Markov head + confidence head (sharing the code) + frozen LM head ------------------- */
enum { MV = 11, MR = 3, MH = 4 };
static const int32_t mk_prev[T] = {3, 7, 3, 10, 0}; /* a repeated row: dW1 scatter-adds */
typedef struct { double *W1, *W2, *wc, *bc, *h, *Wlm, *r, *rc, *bias, *code, *logit, *U; } mk_ctx;
static double mk_loss(void *p) {
    mk_ctx *c = p;
    sp_tr_markov_forward_f64(NULL, c->bias, c->code, mk_prev, c->W1, c->W2, T, MV, MR);
    sp_tr_lmhead_forward_f64(NULL, c->U, c->h, c->Wlm, T, MH, MV);
    sp_tr_conf_forward_f64(c->logit, c->h, c->code, c->wc, c->bc, T, MH, MR);
    double s = 0;
    for (int i = 0; i < T * MV; i++) s += (c->bias[i] + c->U[i]) * c->r[i];
    return s + dot(c->logit, c->rc, T);
}
static void test_heads(void) {
    mk_ctx c = {rnd(MV * MR, 1, 61), rnd(MV * MR, 1, 62), rnd(MH + MR, 1, 63), rnd(1, 1, 64), rnd(T * MH, 1, 65),
                rnd(MV * MH, 1, 66), rnd(T * MV, 1, 67), rnd(T, 1, 68), malloc(T * MV * 8), malloc(T * MR * 8),
                malloc(T * 8), malloc(T * MV * 8)};
    grad_buf dW1 = gbuf(MV * MR, 71), dW2 = gbuf(MV * MR, 72), dwc = gbuf(MH + MR, 73), dbc = gbuf(1, 74),
             dh = gbuf(T * MH, 75);
    double *dcode = calloc(T * MR, 8);
    mk_loss(&c);
    sp_tr_conf_backward_f64(dh.g, dcode, dwc.g, dbc.g, c.rc, c.h, c.code, c.wc, T, MH, MR);
    sp_tr_markov_backward_f64(NULL, dW1.g, dW2.g, dcode, c.r, c.code, mk_prev, c.W2, T, MV, MR);
    sp_tr_lmhead_backward_f64(NULL, dh.g, c.r, c.Wlm, T, MH, MV);
    fd_check("markov dW1", c.W1, MV * MR, dW1.g0, dW1.g, mk_loss, &c);
    fd_check("markov dW2", c.W2, MV * MR, dW2.g0, dW2.g, mk_loss, &c);
    fd_check("conf dw", c.wc, MH + MR, dwc.g0, dwc.g, mk_loss, &c);
    fd_check("conf db", c.bc, 1, dbc.g0, dbc.g, mk_loss, &c);
    fd_check("conf+lmhead dh", c.h, T * MH, dh.g0, dh.g, mk_loss, &c);
    free(c.W1); free(c.W2); free(c.wc); free(c.bc); free(c.h); free(c.Wlm); free(c.r); free(c.rc);
    free(c.bias); free(c.code); free(c.logit); free(c.U); free(dcode);
    gfree(&dW1); gfree(&dW2); gfree(&dwc); gfree(&dbc); gfree(&dh);
}

static double max_rel(const float *a, const double *b, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / scale);
    return worst;
}

/* ---- gated and rnn Markov heads (docs/DSPARK.md §4) on top of the gathered code W1[prev] ------
 * loss = Σ r ⊙ mix; both heads see h and the code, the rnn also its state across the B slots of
 * each block (rows e·B + k), so dh / dcode / dW1 of early slots collect later slots' terms. */
enum { GNB = 2, GB = 3, GT = GNB * GB, GV = 7, GR = 3, GH = 4 };
static const int32_t g_prev[GT] = {3, 5, 3, 0, 6, 5}; /* repeated rows: the scatter adds */
typedef struct { int rnn; double *W1, *h, *Wp, *bp, *r, *code, *mix, *save, *in; } gh_ctx;
static double gh_loss(void *p) {
    gh_ctx *c = p;
    sp_tr_gather_forward_f64(c->code, g_prev, c->W1, GT, GR);
    if (c->rnn) sp_tr_rnn_forward_f64(NULL, c->mix, c->save, c->in, c->h, c->code, c->Wp, c->bp, GNB, GB, GH, GR);
    else sp_tr_gated_forward_f64(NULL, c->mix, c->save, c->in, c->h, c->code, c->Wp, c->bp, GT, GH, GR);
    return dot(c->mix, c->r, GT * GR);
}
static void head_case(int rnn) {
    size_t np = rnn ? 3 * GR * (2 * GR + GH) : GR * (GH + GR), nb = rnn ? 3 * GR : GR;
    size_t nin = rnn ? GT * (2 * GR + GH) : GT * (GH + GR), nsave = rnn ? GT * 3 * GR : GT * GR;
    gh_ctx c = {rnn, rnd(GV * GR, 1, 161), rnd(GT * GH, 1, 162), rnd(np, 0.8, 163), rnd(nb, 0.5, 164),
                rnd(GT * GR, 1, 165), malloc(GT * GR * 8), malloc(GT * GR * 8), malloc(nsave * 8), malloc(nin * 8)};
    grad_buf dW1 = gbuf(GV * GR, 166), dh = gbuf(GT * GH, 167), dWp = gbuf(np, 168), dbp = gbuf(nb, 169);
    double *dcode = calloc(GT * GR, 8), *dpre = malloc(GT * 3 * GR * 8), *din = malloc(nin * 8), ds[GNB * GR];
    gh_loss(&c);
    if (rnn)
        sp_tr_rnn_backward_f64(NULL, dh.g, dcode, dWp.g, dbp.g, dpre, din, ds, c.r, c.save, c.in, c.Wp, GNB, GB, GH, GR);
    else sp_tr_gated_backward_f64(NULL, dh.g, dcode, dWp.g, dbp.g, dpre, din, c.r, c.in, c.save, c.code, c.Wp, GT, GH, GR);
    sp_tr_gather_backward_f64(dW1.g, dcode, g_prev, GT, GR);
    const char *n = rnn ? "rnn" : "gated";
    char what[64];
    snprintf(what, sizeof what, "%s dW1 (through the code)", n);
    fd_check(what, c.W1, GV * GR, dW1.g0, dW1.g, gh_loss, &c);
    snprintf(what, sizeof what, "%s dh", n);
    fd_check(what, c.h, GT * GH, dh.g0, dh.g, gh_loss, &c);
    snprintf(what, sizeof what, "%s dW", n);
    fd_check(what, c.Wp, np, dWp.g0, dWp.g, gh_loss, &c);
    snprintf(what, sizeof what, "%s db", n);
    fd_check(what, c.bp, nb, dbp.g0, dbp.g, gh_loss, &c);
    /* the rnn state carries: slot 0's h moves the mix of slot 2 */
    if (rnn) {
        gh_loss(&c);
        double keep = c.mix[2 * GR];
        c.h[0] += 0.5;
        gh_loss(&c);
        c.h[0] -= 0.5;
        CHECK(fabs(c.mix[2 * GR] - keep) > 1e-6, "rnn: slot 2 does not see slot 0 (%g)", fabs(c.mix[2 * GR] - keep));
    }
    /* the float instantiation (threaded GEMMs) matches: forward and every gradient */
    gh_loss(&c);
    float fW1[GV * GR], fh[GT * GH], fWp[3 * GR * (2 * GR + GH)], fbp[3 * GR], fr[GT * GR], fcode[GT * GR];
    float fmix[GT * GR], fsave[GT * 3 * GR], fin[GT * (2 * GR + GH)], fdpre[GT * 3 * GR], fdin[GT * (2 * GR + GH)];
    float fds[GNB * GR], fdh[GT * GH] = {0}, fdcode[GT * GR] = {0}, fdWp[3 * GR * (2 * GR + GH)] = {0};
    float fdbp[3 * GR] = {0}, fdW1[GV * GR] = {0};
    for (size_t i = 0; i < GV * GR; i++) fW1[i] = (float)c.W1[i];
    for (size_t i = 0; i < GT * GH; i++) fh[i] = (float)c.h[i];
    for (size_t i = 0; i < np; i++) fWp[i] = (float)c.Wp[i];
    for (size_t i = 0; i < nb; i++) fbp[i] = (float)c.bp[i];
    for (size_t i = 0; i < GT * GR; i++) fr[i] = (float)c.r[i];
    sp_pool *pool = sp_pool_create(2);
    sp_tr_gather_forward(fcode, g_prev, fW1, GT, GR);
    if (rnn) {
        sp_tr_rnn_forward(pool, fmix, fsave, fin, fh, fcode, fWp, fbp, GNB, GB, GH, GR);
        sp_tr_rnn_backward(pool, fdh, fdcode, fdWp, fdbp, fdpre, fdin, fds, fr, fsave, fin, fWp, GNB, GB, GH, GR);
    } else {
        sp_tr_gated_forward(pool, fmix, fsave, fin, fh, fcode, fWp, fbp, GT, GH, GR);
        sp_tr_gated_backward(pool, fdh, fdcode, fdWp, fdbp, fdpre, fdin, fr, fin, fsave, fcode, fWp, GT, GH, GR);
    }
    sp_tr_gather_backward(fdW1, fdcode, g_prev, GT, GR);
    sp_pool_free(pool);
    /* the double run of the same gradients from zero */
    double *zh = calloc(GT * GH, 8), *zc = calloc(GT * GR, 8), *zWp = calloc(np, 8), *zbp = calloc(nb, 8);
    double *zW1 = calloc(GV * GR, 8);
    if (rnn) sp_tr_rnn_backward_f64(NULL, zh, zc, zWp, zbp, dpre, din, ds, c.r, c.save, c.in, c.Wp, GNB, GB, GH, GR);
    else sp_tr_gated_backward_f64(NULL, zh, zc, zWp, zbp, dpre, din, c.r, c.in, c.save, c.code, c.Wp, GT, GH, GR);
    sp_tr_gather_backward_f64(zW1, zc, g_prev, GT, GR);
    CHECK(max_rel(fmix, c.mix, GT * GR) < 1e-5, "%s mix float vs double %g", n, max_rel(fmix, c.mix, GT * GR));
    CHECK(max_rel(fdh, zh, GT * GH) < 1e-5, "%s dh float vs double %g", n, max_rel(fdh, zh, GT * GH));
    CHECK(max_rel(fdW1, zW1, GV * GR) < 1e-5, "%s dW1 float vs double %g", n, max_rel(fdW1, zW1, GV * GR));
    CHECK(max_rel(fdWp, zWp, np) < 1e-5, "%s dW float vs double %g", n, max_rel(fdWp, zWp, np));
    CHECK(max_rel(fdbp, zbp, nb) < 1e-5, "%s db float vs double %g", n, max_rel(fdbp, zbp, nb));
    free(zh); free(zc); free(zWp); free(zbp); free(zW1);
    free(c.W1); free(c.h); free(c.Wp); free(c.bp); free(c.r); free(c.code); free(c.mix); free(c.save); free(c.in);
    free(dcode); free(dpre); free(din);
    gfree(&dW1); gfree(&dh); gfree(&dWp); gfree(&dbp);
}
static void test_gated_head(void) { head_case(0); }
static void test_rnn_head(void) { head_case(1); }

/* ---- losses ------------------------------------------------------------------------------- */
enum { LV = 13 };
static const int32_t ls_labels[T] = {4, 0, 12, 7, 7};
static const double ls_w[T] = {1.0, 0.7788007830714049, 0.6065306597126334, 0.0, 0.36787944117144233};
typedef struct { double *Z, *P, *conf, *q, *cstar; double alpha[3]; double denom; } ls_ctx;
static double ce_loss(void *p) {
    ls_ctx *c = p;
    return sp_tr_ce_forward_f64(c->q, c->Z, ls_labels, ls_w, T, LV, c->denom);
}
static double spark_loss(void *p) {
    ls_ctx *c = p;
    double terms[4];
    return sp_tr_spark_loss_forward_f64(terms, c->q, c->cstar, c->Z, c->P, ls_labels, c->conf, ls_w, T, LV,
                                     c->alpha, c->denom);
}
/* the c* the BCE target uses is detached: for the BCE check, hold it at its unperturbed value */
static double bce_only_loss(void *p) {
    ls_ctx *c = p;
    double s = 0;
    for (int t = 0; t < T; t++) {
        double z = c->conf[t], y = c->cstar[t];
        s += ls_w[t] * ((z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z))));
    }
    return c->alpha[2] * s / c->denom;
}
static ls_ctx ls_make(void) {
    ls_ctx c = {rnd(T * LV, 3, 81), malloc(T * LV * 8), rnd(T, 2, 82), malloc(T * LV * 8), malloc(T * 8), {0}, 0};
    double *pz = rnd(T * LV, 3, 83);
    sp_tr_softmax_rows_f64(c.P, pz, T, LV);
    free(pz);
    double sw = 0;
    for (int t = 0; t < T; t++) sw += ls_w[t];
    c.denom = sw + 1e-6;
    return c;
}
static void ls_free(ls_ctx *c) { free(c->Z); free(c->P); free(c->conf); free(c->q); free(c->cstar); }

static void test_ce(void) {
    ls_ctx c = ls_make();
    grad_buf dZ = gbuf(T * LV, 84);
    ce_loss(&c);
    sp_tr_ce_backward_f64(dZ.g, c.q, ls_labels, ls_w, T, LV, c.denom);
    fd_check("ce dZ", c.Z, T * LV, dZ.g0, dZ.g, ce_loss, &c);
    ls_free(&c); gfree(&dZ);
}

static void spark_case(const char *name, double a_ce, double a_l1, double a_conf) {
    ls_ctx c = ls_make();
    c.alpha[0] = a_ce; c.alpha[1] = a_l1; c.alpha[2] = a_conf;
    grad_buf dZ = gbuf(T * LV, 85), dconf = gbuf(T, 86);
    spark_loss(&c);
    sp_tr_spark_loss_backward_f64(dZ.g, dconf.g, c.q, c.cstar, c.P, ls_labels, c.conf, ls_w, T, LV, c.alpha, c.denom);
    char what[64];
    /* CE and L1 depend on Z; BCE on conf (c* detached, so its Z-dependence carries no gradient) */
    if (a_conf == 0) {
        snprintf(what, sizeof what, "%s dZ", name);
        fd_check(what, c.Z, T * LV, dZ.g0, dZ.g, spark_loss, &c);
    } else {
        snprintf(what, sizeof what, "%s dconf", name);
        fd_check(what, c.conf, T, dconf.g0, dconf.g, bce_only_loss, &c);
    }
    ls_free(&c); gfree(&dZ); gfree(&dconf);
}
static void test_spark_terms(void) {
    spark_case("dspark CE", 1, 0, 0);
    spark_case("dspark L1", 0, 1, 0);
    spark_case("dspark CE+L1 (0.1, 0.9)", 0.1, 0.9, 0);
    spark_case("dspark BCE", 0, 0, 1);
    /* the loss value: hand-computed per-slot terms, weights, c* clamp and normalisation */
    ls_ctx c = ls_make();
    c.alpha[0] = 0.1; c.alpha[1] = 0.9; c.alpha[2] = 1.0;
    double terms[4];
    double L = sp_tr_spark_loss_forward_f64(terms, c.q, c.cstar, c.Z, c.P, ls_labels, c.conf, ls_w, T, LV, c.alpha, c.denom);
    double sce = 0, sl1 = 0, sbce = 0, sw = 0;
    for (int t = 0; t < T; t++) {
        double mx = -1e300, se = 0, l1 = 0;
        for (int v = 0; v < LV; v++) if (c.Z[t * LV + v] > mx) mx = c.Z[t * LV + v];
        for (int v = 0; v < LV; v++) se += exp(c.Z[t * LV + v] - mx);
        for (int v = 0; v < LV; v++) l1 += fabs(exp(c.Z[t * LV + v] - mx) / se - c.P[t * LV + v]);
        double cs = fmin(1, fmax(0, 1 - 0.5 * l1)), z = c.conf[t], sg = 1 / (1 + exp(-z));
        CHECK(fabs(cs - c.cstar[t]) < 1e-12, "c*[%d] %g vs %g", t, c.cstar[t], cs);
        sce += ls_w[t] * -(c.Z[t * LV + ls_labels[t]] - mx - log(se));
        sl1 += ls_w[t] * l1;
        sbce += ls_w[t] * -(cs * log(sg) + (1 - cs) * log(1 - sg));
        sw += ls_w[t];
    }
    double want = (0.1 * sce + 0.9 * sl1 + 1.0 * sbce) / (sw + 1e-6);
    CHECK(fabs(L - want) < 1e-10 * fabs(want), "dspark loss %.12g vs %.12g", L, want);
    CHECK(fabs(terms[3] - sw) < 1e-12, "weight sum");
    ls_free(&c);
}

/* ---- the tempered loss: per-row inverse temperatures, P the target's tempered distribution ---- */
static const double lt_tinv[T] = {1 / 0.6, 1 / 0.8, 1.0, 1 / 1.3, 1 / 0.7};
typedef struct { ls_ctx c; double *qT; double alpha[4]; } lt_ctx;
static double spark_temp_loss(void *p) {
    lt_ctx *c = p;
    double terms[5];
    return sp_tr_spark_loss_temp_forward_f64(terms, c->c.q, c->qT, c->c.cstar, c->c.Z, c->c.P, ls_labels, c->c.conf,
                                          ls_w, lt_tinv, T, LV, c->alpha, c->c.denom);
}
/* P = softmax(β·pz) of a random target logit row, β the row's */
static lt_ctx lt_make(void) {
    lt_ctx c = {ls_make(), malloc(T * LV * 8), {0}};
    double *pz = rnd(T * LV, 3, 87);
    for (int t = 0; t < T; t++)
        for (int v = 0; v < LV; v++) pz[t * LV + v] *= lt_tinv[t];
    sp_tr_softmax_rows_f64(c.c.P, pz, T, LV);
    free(pz);
    return c;
}
static void spark_temp_case(const char *name, double a_ce, double a_l1, double a_conf, double a_kl) {
    lt_ctx c = lt_make();
    c.alpha[0] = a_ce; c.alpha[1] = a_l1; c.alpha[2] = a_conf; c.alpha[3] = a_kl;
    c.c.alpha[2] = a_conf; /* bce_only_loss reads the ls_ctx weights */
    grad_buf dZ = gbuf(T * LV, 88), dconf = gbuf(T, 89);
    spark_temp_loss(&c);
    sp_tr_spark_loss_temp_backward_f64(dZ.g, dconf.g, c.c.q, c.qT, c.c.cstar, c.c.P, ls_labels, c.c.conf, ls_w, lt_tinv,
                                    T, LV, c.alpha, c.c.denom);
    char what[80];
    if (a_conf == 0) {
        snprintf(what, sizeof what, "%s dZ", name);
        fd_check(what, c.c.Z, T * LV, dZ.g0, dZ.g, spark_temp_loss, &c);
    } else {
        snprintf(what, sizeof what, "%s dconf", name);
        fd_check(what, c.c.conf, T, dconf.g0, dconf.g, bce_only_loss, &c.c);
    }
    ls_free(&c.c); free(c.qT); gfree(&dZ); gfree(&dconf);
}
static void test_spark_temp_terms(void) {
    spark_temp_case("tempered CE", 1, 0, 0, 0);
    spark_temp_case("tempered TV", 0, 1, 0, 0);
    spark_temp_case("tempered KL", 0, 0, 0, 1);
    spark_temp_case("tempered CE+TV+KL (0.1, 0.9, 0.5)", 0.1, 0.9, 0, 0.5);
    spark_temp_case("tempered BCE", 0, 0, 1, 0);
    /* the loss value and c* against the definitions, computed here from the logits */
    lt_ctx c = lt_make();
    double alpha[4] = {0.1, 0.9, 1.0, 0.5}, terms[5];
    memcpy(c.alpha, alpha, sizeof alpha);
    double L = spark_temp_loss(&c);
    double sce = 0, sl1 = 0, sbce = 0, skl = 0, sw = 0;
    for (int t = 0; t < T; t++) {
        const double *z = c.c.Z + t * LV, *pt = c.c.P + t * LV;
        double b = lt_tinv[t], mx = -1e300, m2 = -1e300, se = 0, s2 = 0;
        for (int v = 0; v < LV; v++) mx = fmax(mx, z[v]), m2 = fmax(m2, b * z[v]);
        for (int v = 0; v < LV; v++) se += exp(z[v] - mx), s2 += exp(b * z[v] - m2);
        double acc = 0, kl = 0;
        for (int v = 0; v < LV; v++) {
            double qt = exp(b * z[v] - m2) / s2;
            CHECK(fabs(qt - c.qT[t * LV + v]) < 1e-14, "qT[%d,%d] %g vs %g", t, v, c.qT[t * LV + v], qt);
            acc += fmin(qt, pt[v]);
            kl += pt[v] * log(pt[v] / qt);
        }
        /* c* = Σ min(qT, P): the acceptance of a sampled draft at that temperature */
        CHECK(fabs(acc - c.c.cstar[t]) < 1e-12, "tempered c*[%d] %g vs Σ min %g", t, c.c.cstar[t], acc);
        double zc = c.c.conf[t], sg = 1 / (1 + exp(-zc));
        sce += ls_w[t] * -(z[ls_labels[t]] - mx - log(se));
        sl1 += ls_w[t] * 2 * (1 - acc);
        sbce += ls_w[t] * -(acc * log(sg) + (1 - acc) * log(1 - sg));
        skl += ls_w[t] * kl;
        sw += ls_w[t];
    }
    double want = (0.1 * sce + 0.9 * sl1 + 1.0 * sbce + 0.5 * skl) / (sw + 1e-6);
    CHECK(fabs(L - want) < 1e-10 * fabs(want), "tempered loss %.12g vs %.12g", L, want);
    sp_tr_spark_loss_temp_forward_f64(terms, c.c.q, c.qT, c.c.cstar, c.c.Z, c.c.P, ls_labels, c.c.conf, ls_w, lt_tinv,
                                   T, LV, alpha, c.c.denom);
    CHECK(fabs(terms[4] - skl) < 1e-12 && fabs(terms[3] - sw) < 1e-12, "KL term %g vs %g", terms[4], skl);
    /* at β = 1 everywhere the tempered loss is the untempered one */
    double ones[T] = {1, 1, 1, 1, 1}, t1[5], t0[4];
    ls_ctx u = ls_make();
    double *qT = malloc(T * LV * 8), a3[3] = {0.1, 0.9, 1.0}, a4[4] = {0.1, 0.9, 1.0, 0};
    double L0 = sp_tr_spark_loss_forward_f64(t0, u.q, u.cstar, u.Z, u.P, ls_labels, u.conf, ls_w, T, LV, a3, u.denom);
    double L1 = sp_tr_spark_loss_temp_forward_f64(t1, u.q, qT, u.cstar, u.Z, u.P, ls_labels, u.conf, ls_w, ones, T, LV,
                                               a4, u.denom);
    CHECK(fabs(L0 - L1) < 1e-12 * fabs(L0), "β = 1: tempered loss %.15g vs untempered %.15g", L1, L0);
    free(qT); ls_free(&u); ls_free(&c.c); free(c.qT);
}

/* the float instantiation of the tempered loss against the double one */
static void test_spark_temp_float(void) {
    lt_ctx c = lt_make();
    double alpha[4] = {0.1, 0.9, 1.0, 0.5};
    memcpy(c.alpha, alpha, sizeof alpha);
    double *dZ = calloc(T * LV, 8), *dc = calloc(T, 8);
    double L = spark_temp_loss(&c);
    sp_tr_spark_loss_temp_backward_f64(dZ, dc, c.c.q, c.qT, c.c.cstar, c.c.P, ls_labels, c.c.conf, ls_w, lt_tinv, T, LV,
                                    alpha, c.c.denom);
    float fZ[T * LV], fP[T * LV], fq[T * LV], fqT[T * LV], fc[T], fcs[T], fw[T], fb[T], fdZ[T * LV] = {0}, fdc[T] = {0};
    for (int i = 0; i < T * LV; i++) fZ[i] = (float)c.c.Z[i], fP[i] = (float)c.c.P[i];
    for (int t = 0; t < T; t++) fc[t] = (float)c.c.conf[t], fw[t] = (float)ls_w[t], fb[t] = (float)lt_tinv[t];
    double terms[5];
    double Lf = sp_tr_spark_loss_temp_forward(terms, fq, fqT, fcs, fZ, fP, ls_labels, fc, fw, fb, T, LV, alpha,
                                           c.c.denom);
    sp_tr_spark_loss_temp_backward(fdZ, fdc, fq, fqT, fcs, fP, ls_labels, fc, fw, fb, T, LV, alpha, c.c.denom);
    double worst = 0, scale = 0;
    for (int i = 0; i < T * LV; i++) worst = fmax(worst, fabs(fdZ[i] - dZ[i])), scale = fmax(scale, fabs(dZ[i]));
    for (int t = 0; t < T; t++) worst = fmax(worst, fabs(fdc[t] - dc[t])), scale = fmax(scale, fabs(dc[t]));
    CHECK(fabs(Lf - L) < 1e-5 * fabs(L), "tempered loss float %.9g vs double %.9g", Lf, L);
    CHECK(worst < 1e-5 * scale, "tempered gradient float vs double: worst %g of %g", worst, scale);
    free(dZ); free(dc); ls_free(&c.c); free(c.qT);
}

/* ---- the float path (trainer) vs the double reference ------------------------------------- */
static void test_float_matches_double(void) {
    sp_pool *pool = sp_pool_create(2);
    /* sizes off every tile boundary of gemm.c */
    int t = 37, k = 70, n = 530;
    size_t nx = (size_t)t * k, nw = (size_t)n * k, ny = (size_t)t * n;
    double *x = rnd(nx, 1, 91), *w = rnd(nw, 1, 92), *dy = rnd(ny, 1, 93), *y = malloc(ny * 8);
    double *dx = calloc(nx, 8), *dw = calloc(nw, 8);
    float *xf = malloc(nx * 4), *wf = malloc(nw * 4), *dyf = malloc(ny * 4), *yf = malloc(ny * 4);
    float *dxf = calloc(nx, 4), *dwf = calloc(nw, 4);
    for (size_t i = 0; i < nx; i++) xf[i] = (float)x[i];
    for (size_t i = 0; i < nw; i++) wf[i] = (float)w[i];
    for (size_t i = 0; i < ny; i++) dyf[i] = (float)dy[i];
    sp_tr_linear_forward_f64(NULL, y, x, w, t, k, n);
    sp_tr_linear_backward_f64(NULL, dx, dw, dy, x, w, t, k, n);
    sp_tr_linear_forward(pool, yf, xf, wf, t, k, n);
    sp_tr_linear_backward(pool, dxf, dwf, dyf, xf, wf, t, k, n);
    CHECK(max_rel(yf, y, ny) < 1e-5, "linear forward float vs double %g", max_rel(yf, y, ny));
    CHECK(max_rel(dxf, dx, nx) < 1e-5, "linear din float vs double %g", max_rel(dxf, dx, nx));
    CHECK(max_rel(dwf, dw, nw) < 1e-5, "linear dW float vs double %g", max_rel(dwf, dw, nw));
    /* thread-count invariance of the accumulating GEMMs (bit-identical resume depends on it) */
    float *dxf1 = calloc(nx, 4), *dwf1 = calloc(nw, 4);
    sp_tr_linear_backward(NULL, dxf1, dwf1, dyf, xf, wf, t, k, n);
    CHECK(memcmp(dxf1, dxf, nx * 4) == 0 && memcmp(dwf1, dwf, nw * 4) == 0, "gemm depends on thread count");
    /* attention float vs double */
    size_t nq = AQ * ANH * AD, nk = AK * AKVH * AD;
    double *q = rnd(nq, 1, 94), *kk = rnd(nk, 1, 95), *v = rnd(nk, 1, 96), *o = malloc(nq * 8), *att = malloc(ANH * AQ * AK * 8);
    float qf[AQ * ANH * AD], kf[AK * AKVH * AD], vf[AK * AKVH * AD], of[AQ * ANH * AD], attf[ANH * AQ * AK];
    for (size_t i = 0; i < nq; i++) qf[i] = (float)q[i];
    for (size_t i = 0; i < nk; i++) { kf[i] = (float)kk[i]; vf[i] = (float)v[i]; }
    sp_tr_attention_forward_f64(NULL, o, att, q, kk, v, &att_shape);
    sp_tr_attention_forward(NULL, of, attf, qf, kf, vf, &att_shape);
    CHECK(max_rel(of, o, nq) < 1e-5, "attention float vs double %g", max_rel(of, o, nq));
    free(x); free(w); free(dy); free(y); free(dx); free(dw); free(xf); free(wf); free(dyf); free(yf);
    free(dxf); free(dwf); free(dxf1); free(dwf1); free(q); free(kk); free(v); free(o); free(att);
    sp_pool_free(pool);
}

int main(void) {
    RUN(test_linear);
    RUN(test_rmsnorm);
    RUN(test_rope);
    RUN(test_attention);
    RUN(test_mlp);
    RUN(test_geglu);
    RUN(test_softcap_lmhead);
    RUN(test_fc_fusion);
    RUN(test_heads);
    RUN(test_gated_head);
    RUN(test_rnn_head);
    RUN(test_ce);
    RUN(test_spark_terms);
    RUN(test_spark_temp_terms);
    RUN(test_spark_temp_float);
    RUN(test_float_matches_double);
    return harness_done("test_train_ops");
}
