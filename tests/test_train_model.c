/* test_train_model.c — the whole drafter step (src/train/model.c) wired correctly: the analytic
 * gradient of every parameter tensor against central finite differences of tr_forward's loss
 * (each op is checked in double in test_train_ops.c; this checks the composition: context
 * injection, padding mask, residuals, heads, loss weights). Float forward, so the tolerance
 * is looser: |a − fd| ≤ 2e-3·max|g| + 3e-2·|fd|. DSpark (vanilla, gated and rnn Markov heads)
 * and DFlash. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "train/model.h"

static void make_batch(tr_batch *b, const tr_dims *d, int NB, int C, unsigned seed) {
    sp_err err;
    int ok = tr_batch_alloc(b, NB, C, d->B, d->V, d->H, d->m * d->H, 1, &err) == 0;
    CHECK(ok, "%s", err.msg);
    harness_fill(b->F, (size_t)NB * C * d->m * d->H, 1.5f, seed);
    harness_fill(b->x0, (size_t)NB * d->B * d->H, 1.0f, seed + 1);
    for (int e = 0; e < NB; e++)
        for (int j = 0; j < C + d->B; j++) b->kmask[e * (C + d->B) + j] = !(e == 0 && j < 2); /* left padding */
    float *z = malloc(sizeof(float) * NB * d->B * d->V);
    harness_fill(z, (size_t)NB * d->B * d->V, 3.0f, seed + 2);
    for (int t = 0; t < NB * d->B; t++) {
        float *p = b->P + (size_t)t * d->V, mx = -1e30f, s = 0;
        for (int v = 0; v < d->V; v++) mx = z[t * d->V + v] > mx ? z[t * d->V + v] : mx;
        for (int v = 0; v < d->V; v++) s += p[v] = expf(z[t * d->V + v] - mx);
        for (int v = 0; v < d->V; v++) p[v] /= s;
        int k = t % d->B;
        b->labels[t] = (t * 7 + 3) % d->V;
        b->prev[t] = (t * 5 + 1) % d->V;
        b->wt[t] = (t == NB * d->B - 1) ? 0.0f : expf(-k / 4.0f); /* the last slot not evaluated */
    }
    free(z);
}

/* gemma: 0 Qwen3 block; 1 Gemma-4 block with k_eq_v; 2 Gemma-4 block with v_proj.
 * markov: the DSpark Markov head type */
static void check_model(tr_arch arch, int gemma, tr_markov_type markov) {
    tr_dims d = {.arch = arch, .H = 8, .NH = 2, .KVH = 1, .D = 4, .I = 12, .L = 2, .V = 17, .m = 2, .B = 3,
                 .r = arch == TR_ARCH_DSPARK ? 4 : 0, .conf = arch == TR_ARCH_DSPARK, .conf_with_markov = 1,
                 .mask_id = 16, .eps = 1e-6, .gemma = gemma > 0, .k_eq_v = gemma == 1, .gelu = gemma > 0,
                 .softcap = gemma ? 2.0 : 0, .markov = markov};
    d.rope.type = SP_ROPE_DEFAULT;
    d.rope.theta = 10000;
    d.rope.factor = 1;
    d.rope.partial_rotary_factor = 1;
    tr_model m;
    sp_err err;
    if (tr_model_init(&m, &d, 7, &err)) { CHECK(0, "%s", err.msg); return; }
    harness_fill(m.w, m.n, 0.4f, 3); /* larger than the 0.02 init: every path carries signal */
    for (int i = 0; i < m.n_params; i++) /* norms near 1 */
        if (strstr(m.params[i].name, "norm.weight"))
            for (size_t j = 0; j < m.params[i].n; j++) m.w[m.params[i].off + j] += 1.0f;
        else if (strstr(m.params[i].name, "layer_scalar")) m.w[m.params[i].off] = 1.0f;
    tr_batch b;
    make_batch(&b, &d, 2, 4, 11);
    tr_acts *a = tr_acts_create(&d, 2, 4, &err);
    CHECK(a, "%s", err.msg);
    float *Wlm = malloc(sizeof(float) * d.V * d.H);
    harness_fill(Wlm, (size_t)d.V * d.H, 1.0f, 5);
    float *grad = calloc(m.n, sizeof(float));
    tr_stats st;
    double denom = 0;
    for (int t = 0; t < 6; t++) denom += b.wt[t];
    denom += 1e-6;
    float cs[6];
    tr_forward(NULL, &m, a, &b, Wlm, denom, &st, cs);
    b.cstar_target = cs; /* c* is detached: hold it fixed for the finite differences */
    tr_stats st2;
    tr_forward(NULL, &m, a, &b, Wlm, denom, &st2, NULL);
    CHECK(st2.loss == st.loss, "fixed c* changes the loss: %.9g vs %.9g", st2.loss, st.loss);
    CHECK(isfinite(st.loss) && st.loss > 0, "loss %g", st.loss);
    tr_backward(NULL, &m, a, &b, Wlm, denom, grad);
    double gmax = 0;
    for (size_t i = 0; i < m.n; i++) gmax = fmax(gmax, fabs(grad[i]));
    CHECK(gmax > 0, "all-zero gradient");
    /* every tensor: up to 12 elements spread over it */
    int bad = 0, checked = 0;
    for (int pi = 0; pi < m.n_params; pi++) {
        const tr_param *p = &m.params[pi];
        if (strstr(p->name, "layer_scalar")) { /* frozen at 1: never gets a gradient */
            CHECK(grad[p->off] == 0 && m.w[p->off] != 0, "%s: gradient %g", p->name, grad[p->off]);
            continue;
        }
        int nz = 0;
        for (int s = 0; s < 12 && s < (int)p->n; s++) {
            size_t j = p->off + (p->n > 12 ? ((size_t)s * 7919u) % p->n : (size_t)s);
            float keep = m.w[j];
            double h = gemma ? 1e-3 : 1e-2; /* scale-1 attention is sharper: a smaller step */
            m.w[j] = keep + (float)h;
            tr_stats sp, sm;
            tr_forward(NULL, &m, a, &b, Wlm, denom, &sp, NULL);
            m.w[j] = keep - (float)h;
            tr_forward(NULL, &m, a, &b, Wlm, denom, &sm, NULL);
            m.w[j] = keep;
            double fd = (sp.loss - sm.loss) / (2 * h), an = grad[j];
            checked++;
            if (fabs(an) > 1e-3 * gmax) nz++;
            if (fabs(an - fd) > 2e-3 * gmax + 3e-2 * fabs(fd)) {
                if (bad++ < 6) CHECK(0, "%s[%zu]: analytic %.6g vs finite difference %.6g", p->name, j - p->off, an, fd);
            }
        }
        CHECK(nz > 0, "%s: no element with a non-negligible gradient", p->name);
    }
    CHECK(bad == 0, "%d of %d parameter elements off", bad, checked);
    free(grad); free(Wlm);
    tr_acts_free(a);
    tr_batch_free(&b);
    tr_model_free(&m);
}

static void test_dspark_gradients(void) { check_model(TR_ARCH_DSPARK, 0, TR_MARKOV_VANILLA); }
static void test_dspark_gated_gradients(void) { check_model(TR_ARCH_DSPARK, 0, TR_MARKOV_GATED); }
static void test_dspark_rnn_gradients(void) { check_model(TR_ARCH_DSPARK, 0, TR_MARKOV_RNN); }
static void test_dflash_gradients(void) { check_model(TR_ARCH_DFLASH, 0, TR_MARKOV_VANILLA); }
static void test_gemma_dspark_gradients(void) { check_model(TR_ARCH_DSPARK, 1, TR_MARKOV_VANILLA); }
static void test_gemma_rnn_gradients(void) { check_model(TR_ARCH_DSPARK, 1, TR_MARKOV_RNN); }
static void test_gemma_dflash_gradients(void) { check_model(TR_ARCH_DFLASH, 2, TR_MARKOV_VANILLA); }

int main(void) {
    RUN(test_dspark_gradients);
    RUN(test_dspark_gated_gradients);
    RUN(test_dspark_rnn_gradients);
    RUN(test_dflash_gradients);
    RUN(test_gemma_dspark_gradients);
    RUN(test_gemma_rnn_gradients);
    RUN(test_gemma_dflash_gradients);
    return harness_done("test_train_model");
}
