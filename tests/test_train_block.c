/* test_train_block.c — the training decoder block (src/train/block_train.h) against central finite
 * differences in double precision, for descriptions the drafter and LM tests do not reach on
 * their own: a Llama / Qwen3 layer (no post norms, SwiGLU, q/k norms, non-causal attention with
 * padded keys) and a Gemma-4 layer with V = v_norm(raw K) (k_eq_v), GeGLU, causal sliding
 * attention and a layer scalar != 1; then the float block against the double one.
 *
 * loss = Σ r ⊙ y for a random r; every input and trained parameter element is perturbed by ±EPS
 * and (f(x+) − f(x−)) / 2·EPS compared with the analytic gradient, which backward accumulates on
 * top of a random non-zero start. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "train/block_train.h"

#define EPS 1e-5
enum { NB = 2, T = 4, R = NB * T, H = 8, NH = 2, KVH = 1, D = 4, I = 12, QD = NH * D, KD = KVH * D };

static double *rnd(size_t n, double a, unsigned seed) {
    float *f = malloc(n * sizeof *f);
    double *x = malloc(n * sizeof *x);
    harness_fill(f, n, (float)a, seed);
    for (size_t i = 0; i < n; i++) x[i] = f[i];
    free(f);
    return x;
}
static double *zeros(size_t n) { return calloc(n, sizeof(double)); }

typedef struct {
    sp_block_desc d;
    tr_block_w_f64 w;
    tr_block_io_f64 io;
    tr_block_acts_f64 a;
    double *x, *y, *r;
    double *params[13]; /* the trained parameters in TR_BLOCK_PARAMS order (NULL: absent) */
    size_t sizes[13];
} block_case;

static double loss(block_case *c) {
    sp_tr_block_forward_f64(NULL, &c->d, &c->w, &c->io, c->x, c->y, &c->a);
    double s = 0;
    for (size_t i = 0; i < (size_t)R * H; i++) s += c->r[i] * c->y[i];
    return s;
}

static void setup(block_case *c, const sp_block_desc *d, const uint8_t *kmask, int causal, int window, double scalar,
                  const int *pos, const float *inv_freq, const double *ones) {
    memset(c, 0, sizeof *c);
    c->d = *d;
    size_t sizes[13] = {H, (size_t)QD * H, (size_t)KD * H, d->v_proj ? (size_t)KD * H : 0, (size_t)H * QD, D, D,
                        d->post_norms ? H : 0, H, d->post_norms ? H : 0, (size_t)I * H, (size_t)I * H, (size_t)H * I};
    for (int i = 0; i < 13; i++) {
        c->sizes[i] = sizes[i];
        /* norms near 1, matrices small: the layer stays in a range where the differences are accurate */
        int vec = i == 0 || i == 5 || i == 6 || i == 7 || i == 8 || i == 9;
        c->params[i] = sizes[i] ? rnd(sizes[i], vec ? 0.3 : 0.4, 100 + i) : NULL;
        if (vec && sizes[i])
            for (size_t j = 0; j < sizes[i]; j++) c->params[i][j] += 1.0;
    }
    double **p = c->params;
    c->w = (tr_block_w_f64){.attn_norm = p[0], .wq = p[1], .wk = p[2], .wv = p[3], .wo = p[4], .q_norm = p[5],
                            .k_norm = p[6], .attn_post_norm = p[7], .ffn_norm = p[8], .ffn_post_norm = p[9],
                            .w_gate = p[10], .w_up = p[11], .w_down = p[12], .layer_scalar = scalar,
                            .inv_freq = inv_freq, .ones = ones};
    c->io = (tr_block_io_f64){.R = R, .qpos = pos,
                              .shape = {.NB = NB, .Tq = T, .Tk = T, .NH = NH, .KVH = KVH, .D = D, .causal = causal,
                                        .window = window, .kmask = kmask, .scale = d->attn_scale}};
    tr_block_acts_f64 *a = &c->a;
    double **f[] = {&a->xn, &a->qp, &a->q, &a->kp, &a->k, &a->vp, &a->v, &a->ao, &a->o, &a->x1, &a->xn2, &a->g,
                    &a->u, &a->gu, &a->dn, &a->rstd_in, &a->rstd_q, &a->rstd_k, &a->rstd_v, &a->rstd_o,
                    &a->rstd_ffn, &a->rstd_dn, &a->att};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = zeros((size_t)R * (I + QD + H) * NH);
    c->x = rnd((size_t)R * H, 1.0, 7);
    c->y = zeros((size_t)R * H);
    c->r = rnd((size_t)R * H, 1.0, 8);
}

static void teardown(block_case *c) {
    tr_block_acts_f64 *a = &c->a;
    double *f[] = {a->xn, a->qp, a->q, a->kp, a->k, a->vp, a->v, a->ao, a->o, a->x1, a->xn2, a->g, a->u, a->gu,
                   a->dn, a->rstd_in, a->rstd_q, a->rstd_k, a->rstd_v, a->rstd_o, a->rstd_ffn, a->rstd_dn, a->att};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    for (int i = 0; i < 13; i++) free(c->params[i]);
    free(c->x), free(c->y), free(c->r);
}

/* analytic gradients of x and every parameter, then each checked against finite differences */
static void check_case(block_case *c, const char *name) {
    double *g0[13], *g[13];
    for (int i = 0; i < 13; i++) {
        g0[i] = c->sizes[i] ? rnd(c->sizes[i], 0.1, 200 + i) : NULL;
        g[i] = c->sizes[i] ? malloc(c->sizes[i] * sizeof(double)) : NULL;
        if (g[i]) memcpy(g[i], g0[i], c->sizes[i] * sizeof(double));
    }
    tr_block_g_f64 bg = {.attn_norm = g[0], .wq = g[1], .wk = g[2], .wv = g[3], .wo = g[4], .q_norm = g[5],
                         .k_norm = g[6], .attn_post_norm = g[7], .ffn_norm = g[8], .ffn_post_norm = g[9],
                         .w_gate = g[10], .w_up = g[11], .w_down = g[12]};
    tr_block_scratch_f64 s;
    double **f[] = {&s.dh, &s.dxn, &s.dgu, &s.dg, &s.du, &s.dao, &s.dq, &s.dq2, &s.dk, &s.dk2, &s.dv, &s.dv2, &s.dp};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = zeros((size_t)R * (I + QD + H) * NH);
    s.dkvin = NULL;
    double *dx = malloc((size_t)R * H * sizeof *dx);
    memcpy(dx, c->r, (size_t)R * H * sizeof *dx); /* dL/dy = r */
    loss(c);
    sp_tr_block_backward_f64(NULL, &c->d, &c->w, &bg, &c->io, c->x, &c->a, &s, dx);

    const char *names[14] = {"attn_norm", "wq", "wk", "wv", "wo", "q_norm", "k_norm", "attn_post_norm", "ffn_norm",
                             "ffn_post_norm", "w_gate", "w_up", "w_down", "x"};
    for (int i = 0; i < 14; i++) {
        double *p = i < 13 ? c->params[i] : c->x;
        size_t n = i < 13 ? c->sizes[i] : (size_t)R * H;
        int bad = 0;
        double worst = 0;
        for (size_t j = 0; j < n; j++) {
            double keep = p[j];
            p[j] = keep + EPS;
            double lp = loss(c);
            p[j] = keep - EPS;
            double lm = loss(c);
            p[j] = keep;
            double fd = (lp - lm) / (2 * EPS), an = i < 13 ? g[i][j] - g0[i][j] : dx[j];
            double err = fabs(an - fd);
            worst = fmax(worst, err);
            if (err > 1e-6 + 1e-5 * fabs(fd) && bad++ < 3)
                CHECK(0, "%s %s[%zu]: analytic %.10g vs finite difference %.10g", name, names[i], j, an, fd);
        }
        CHECK(bad == 0, "%s %s: %d of %zu elements off (worst %.3g)", name, names[i], bad, n, worst);
    }
    for (int i = 0; i < 13; i++) free(g0[i]), free(g[i]);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(*f[i]);
    free(dx);
}

static int pos[R];
static float inv_freq[D / 2];
static double ones[D];

static void init_common(void) {
    for (int i = 0; i < R; i++) pos[i] = i % T + 3;
    for (int j = 0; j < D / 2; j++) inv_freq[j] = (float)pow(10000.0, -2.0 * j / D);
    for (int j = 0; j < D; j++) ones[j] = 1;
}

/* Qwen3 / Llama: q/k norms, SwiGLU, no post norms, non-causal attention, key 0 of each group padded */
static void test_llama_block(void) {
    init_common();
    static const uint8_t kmask[NB * T] = {0, 1, 1, 1, 0, 1, 1, 1};
    sp_block_desc d = {.H = H, .NH = NH, .KVH = KVH, .D = D, .I = I, .kv_proj = 1, .v_proj = 1, .qk_norm = 1,
                       .act = SP_ACT_SILU, .attn = SP_ATTN_BLOCK, .attn_scale = 0.5f, .eps = 1e-6f};
    block_case c;
    setup(&c, &d, kmask, 0, 0, 1.0, pos, inv_freq, ones);
    check_case(&c, "llama");
    teardown(&c);
}

/* Gemma-4 with k_eq_v: four norms, V = v_norm(raw K), GeGLU, causal window 2, scale 1, layer scalar */
static void test_gemma_block(void) {
    init_common();
    sp_block_desc d = {.H = H, .NH = NH, .KVH = KVH, .D = D, .I = I, .post_norms = 1, .kv_proj = 1, .v_proj = 0,
                       .qk_norm = 1, .v_norm = 1, .act = SP_ACT_GELU_TANH, .attn = SP_ATTN_CAUSAL, .window = 2,
                       .attn_scale = 1.0f, .eps = 1e-6f};
    block_case c;
    setup(&c, &d, NULL, 1, 2, 0.7, pos, inv_freq, ones);
    check_case(&c, "gemma k_eq_v");
    /* causal + window: row i of a sequence sees rows i−1 and i only */
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                double p = c.a.att[((size_t)(0 * NH + h) * T + i) * T + j];
                int vis = j <= i && j > i - 2;
                CHECK(vis ? p > 0 : p == 0, "att[%d,%d,%d] = %g (visible %d)", h, i, j, p, vis);
            }
    /* the float block agrees with the double one */
    tr_block_w fw;
    float *fp[13], *fx = malloc((size_t)R * H * 4), *fy = malloc((size_t)R * H * 4), fones[D];
    for (int i = 0; i < 13; i++) {
        fp[i] = c.sizes[i] ? malloc(c.sizes[i] * 4) : NULL;
        for (size_t j = 0; j < c.sizes[i]; j++) fp[i][j] = (float)c.params[i][j];
    }
    for (int j = 0; j < D; j++) fones[j] = 1;
    for (int j = 0; j < R * H; j++) fx[j] = (float)c.x[j];
    fw = (tr_block_w){.attn_norm = fp[0], .wq = fp[1], .wk = fp[2], .wv = fp[3], .wo = fp[4], .q_norm = fp[5],
                      .k_norm = fp[6], .attn_post_norm = fp[7], .ffn_norm = fp[8], .ffn_post_norm = fp[9],
                      .w_gate = fp[10], .w_up = fp[11], .w_down = fp[12], .layer_scalar = 0.7f,
                      .inv_freq = inv_freq, .ones = fones};
    tr_block_io fio = {.R = R, .qpos = pos,
                       .shape = {.NB = NB, .Tq = T, .Tk = T, .NH = NH, .KVH = KVH, .D = D, .causal = 1, .window = 2,
                                 .scale = 1.0}};
    tr_block_acts fa;
    float **ff[] = {&fa.xn, &fa.qp, &fa.q, &fa.kp, &fa.k, &fa.vp, &fa.v, &fa.ao, &fa.o, &fa.x1, &fa.xn2, &fa.g,
                    &fa.u, &fa.gu, &fa.dn, &fa.rstd_in, &fa.rstd_q, &fa.rstd_k, &fa.rstd_v, &fa.rstd_o,
                    &fa.rstd_ffn, &fa.rstd_dn, &fa.att};
    for (size_t i = 0; i < sizeof ff / sizeof ff[0]; i++) *ff[i] = calloc((size_t)R * (I + QD + H) * NH, 4);
    fa.kvin = NULL;
    loss(&c);
    sp_pool *pool = sp_pool_create(2);
    sp_tr_block_forward(pool, &d, &fw, &fio, fx, fy, &fa);
    sp_pool_free(pool);
    double worst = 0, mx = 0;
    for (int j = 0; j < R * H; j++) {
        worst = fmax(worst, fabs(fy[j] - c.y[j]));
        mx = fmax(mx, fabs(c.y[j]));
    }
    CHECK(mx > 0.1 && worst < 1e-5 * mx, "float block vs double: max |diff| %g (max |y| %g)", worst, mx);
    for (size_t i = 0; i < sizeof ff / sizeof ff[0]; i++) free(*ff[i]);
    for (int i = 0; i < 13; i++) free(fp[i]);
    free(fx), free(fy);
    teardown(&c);
}

int main(void) {
    RUN(test_llama_block);
    RUN(test_gemma_block);
    return harness_done(__FILE__);
}
