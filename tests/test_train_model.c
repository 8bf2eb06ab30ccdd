/* test_train_model.c — the whole drafter step (src/train/drafter_net.c) wired correctly: the analytic
 * gradient of every parameter tensor against central finite differences of sp_tr_forward's loss
 * (each op is checked in double in test_train_ops.c; this checks the composition: context
 * injection, padding mask, residuals, heads, loss weights). Float forward, so the tolerance
 * is looser: |a − fd| ≤ 2e-3·max|g| + 3e-2·|fd|. DSpark (vanilla, gated and rnn Markov heads)
 * and DFlash.
 * Shared context (anchors of one sequence in one element group, model.h): the loss and every
 * gradient equal those of the same anchors laid out unshared, and finite differences hold
 * through the shared path. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "formats/st_quantize.h"
#include "kernels/quant.h"
#include "train/checkpoint.h"
#include "train/drafter_net.h"

static void make_batch(tr_batch *b, const tr_dims *d, int NB, int C, unsigned seed) {
    sp_err err;
    int ok = sp_tr_batch_alloc(b, NB, C, d->B, d->V, d->H, d->m * d->H, 1, &err) == 0;
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

/* Anchors of two sequences of random taps, context 4: group 1 = anchors 2, 4, 9 of sequence 0
 * (overlapping windows, a gap between 3 and 5, positions < 0 left out), group 2 = anchor 5 of
 * sequence 1. shared = 0: the same anchors unshared (each its own group of C rows with padding,
 * the A = 1 layout). Block inputs, labels and P depend only on the anchor, not the layout. */
enum { ANCHORS = 4, ACTX = 4 };
static const int anchor_seq[ANCHORS] = {0, 0, 0, 1}, anchor_p[ANCHORS] = {2, 4, 9, 5};

static void make_anchor_batch(tr_batch *b, const tr_dims *d, int shared, unsigned seed) {
    sp_err err;
    int C = ACTX, mH = d->m * d->H, B = d->B, V = d->V;
    int ok = sp_tr_batch_alloc(b, ANCHORS, C, B, V, d->H, mH, 1, &err) == 0;
    CHECK(ok, "%s", err.msg);
    if (!ok) return;
    float *taps = malloc(sizeof(float) * 2 * 12 * mH); /* [sequence, position 0..11, m·H] */
    harness_fill(taps, (size_t)2 * 12 * mH, 1.5f, seed);
    sp_tr_batch_clear(b);
    for (int i = 0; i < ANCHORS; i++) {
        int e, row0, q0, p = anchor_p[i];
        int nr = sp_tr_batch_push(b, p, !shared || i == 0 || anchor_seq[i] != anchor_seq[i - 1], !shared, &e, &row0, &q0);
        for (int j = 0; j < nr; j++) {
            float *f = b->F + (size_t)(row0 + j) * mH;
            if (q0 + j >= 0) memcpy(f, taps + ((size_t)anchor_seq[i] * 12 + q0 + j) * mH, sizeof(float) * mH);
            else memset(f, 0, sizeof(float) * mH);
        }
        harness_fill(b->x0 + (size_t)e * B * d->H, (size_t)B * d->H, 1.0f, seed + 10 + (unsigned)i);
        float *z = malloc(sizeof(float) * B * V);
        harness_fill(z, (size_t)B * V, 3.0f, seed + 20 + (unsigned)i);
        for (int k = 0; k < B; k++) {
            int t = e * B + k;
            float *pp = b->P + (size_t)t * V, mx = -1e30f, sum = 0;
            for (int v = 0; v < V; v++) mx = z[k * V + v] > mx ? z[k * V + v] : mx;
            for (int v = 0; v < V; v++) sum += pp[v] = expf(z[k * V + v] - mx);
            for (int v = 0; v < V; v++) pp[v] /= sum;
            b->labels[t] = (i * 7 + k * 3 + 1) % V;
            b->prev[t] = (i * 5 + k + 2) % V;
            b->wt[t] = (i == 2 && k == B - 1) ? 0.0f : expf(-k / 4.0f);
        }
        free(z);
    }
    free(taps);
    CHECK(b->NB == ANCHORS && b->NG == (shared ? 2 : ANCHORS) && b->NR == (shared ? 12 : ANCHORS * C),
          "layout: %d elements, %d groups, %d rows", b->NB, b->NG, b->NR);
}

/* gemma: 0 Qwen3 block; 1 Gemma-4 block with k_eq_v; 2 Gemma-4 block with v_proj.
 * markov: the DSpark Markov head type */
static tr_dims tiny_dims(tr_arch arch, int gemma, tr_markov_type markov) {
    tr_dims d = {.arch = arch, .H = 8, .NH = 2, .KVH = 1, .D = 4, .I = 12, .L = 2, .V = 17, .m = 2, .B = 3,
                 .r = arch == TR_ARCH_DSPARK ? 4 : 0, .conf = arch == TR_ARCH_DSPARK, .conf_with_markov = 1,
                 .mask_id = 16, .eps = 1e-6, .gemma = gemma > 0, .k_eq_v = gemma == 1, .gelu = gemma > 0,
                 .softcap = gemma ? 2.0 : 0, .markov = markov};
    d.rope.type = SP_ROPE_DEFAULT;
    d.rope.theta = 10000;
    d.rope.factor = 1;
    d.rope.partial_rotary_factor = 1;
    return d;
}

/* weights larger than the 0.02 init (every path carries signal), norms near 1 */
static void tiny_weights(tr_model *m) {
    harness_fill(m->w, m->n, 0.4f, 3);
    for (int i = 0; i < m->n_params; i++)
        if (strstr(m->params[i].name, "norm.weight"))
            for (size_t j = 0; j < m->params[i].n; j++) m->w[m->params[i].off + j] += 1.0f;
        else if (strstr(m->params[i].name, "layer_scalar")) m->w[m->params[i].off] = 1.0f;
}

/* shared: the grouped batch of make_anchor_batch instead of two unshared elements; temp: the
 * tempered loss (temperatures 0.7 and 1.3 on alternating slots, KL weight 0.5) */
static void check_model(tr_arch arch, int gemma, tr_markov_type markov, int shared, int temp) {
    tr_dims d = tiny_dims(arch, gemma, markov);
    if (temp) {
        d.n_temps = 2;
        d.temps[0] = 0.7, d.temps[1] = 1.3;
        d.alpha_kl = 0.5;
    }
    tr_model m;
    sp_err err;
    if (sp_tr_model_init(&m, &d, 7, &err)) { CHECK(0, "%s", err.msg); return; }
    tiny_weights(&m);
    tr_batch b;
    int NB = shared ? ANCHORS : 2, C = shared ? ACTX : 4;
    if (shared) make_anchor_batch(&b, &d, 1, 11);
    else make_batch(&b, &d, NB, C, 11);
    if (temp) {
        b.tinv = malloc(sizeof(float) * (size_t)NB * d.B);
        for (int t = 0; t < NB * d.B; t++) b.tinv[t] = (float)(1 / d.temps[t % 2]);
    }
    tr_acts *a = sp_tr_acts_create(&d, NB, C, &err);
    CHECK(a, "%s", err.msg);
    float *Wlm = malloc(sizeof(float) * d.V * d.H);
    harness_fill(Wlm, (size_t)d.V * d.H, 1.0f, 5);
    float *grad = calloc(m.n, sizeof(float));
    tr_stats st;
    double denom = 0;
    for (int t = 0; t < NB * d.B; t++) denom += b.wt[t];
    denom += 1e-6;
    float cs[ANCHORS * 3];
    sp_tr_forward(NULL, &m, a, &b, Wlm, denom, &st, cs);
    b.cstar_target = cs; /* c* is detached: hold it fixed for the finite differences */
    tr_stats st2;
    sp_tr_forward(NULL, &m, a, &b, Wlm, denom, &st2, NULL);
    CHECK(st2.loss == st.loss, "fixed c* changes the loss: %.9g vs %.9g", st2.loss, st.loss);
    CHECK(isfinite(st.loss) && st.loss > 0, "loss %g", st.loss);
    sp_tr_backward(NULL, &m, a, &b, Wlm, denom, grad);
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
            sp_tr_forward(NULL, &m, a, &b, Wlm, denom, &sp, NULL);
            m.w[j] = keep - (float)h;
            sp_tr_forward(NULL, &m, a, &b, Wlm, denom, &sm, NULL);
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
    sp_tr_acts_free(a);
    sp_tr_batch_free(&b);
    sp_tr_model_free(&m);
}

/* train --init: a drafter's exported weights (bf16) read back into a model of the same dims are
 * its weights rounded to bf16; a model of other dims is refused, naming the tensor */
static void test_init_from(void) {
    tr_dims d = tiny_dims(TR_ARCH_DSPARK, 1, TR_MARKOV_VANILLA);
    tr_model a, b, c;
    sp_err err;
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/specula_test_init_from_%d", (int)getpid());
    CHECK(sp_mkdir_p(dir, &err) == 0, "%s", err.msg);
    if (sp_tr_model_init(&a, &d, 7, &err) || sp_tr_model_init(&b, &d, 9, &err)) { CHECK(0, "%s", err.msg); return; }
    tiny_weights(&a);
    CHECK(sp_tr_drafter_export(dir, &a, "{}\n", &err) == 0, "%s", err.msg);
    CHECK(sp_tr_drafter_init_from(dir, &b, &err) == 0, "%s", err.msg);
    size_t off = 0;
    for (size_t i = 0; i < a.n; i++)
        if (b.w[i] != sp_bf16_to_f32(sp_f32_to_bf16(a.w[i])) && off++ < 3)
            CHECK(0, "weight %zu: %g read back, %g exported", i, b.w[i], a.w[i]);
    CHECK(off == 0, "%zu weights differ from the exported ones", off);
    d.r = 6;
    if (sp_tr_model_init(&c, &d, 9, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(sp_tr_drafter_init_from(dir, &c, &err) != 0 && strstr(err.msg, "markov_head"), "other dims: %s", err.msg);
    sp_tr_model_free(&a); sp_tr_model_free(&b); sp_tr_model_free(&c);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* train --init from a drafter quantized by `quantize --drafter`: each matrix stored as Q8_0
 * blocks reads back as those blocks dequantized, every other tensor as exported */
static void test_init_from_quantized(void) {
    tr_dims d = tiny_dims(TR_ARCH_DSPARK, 0, TR_MARKOV_VANILLA);
    d.H = 32, d.I = 64, d.D = 16, d.V = 40, d.mask_id = 39;
    tr_model a, b;
    sp_err err;
    char dir[128], qdir[160];
    snprintf(dir, sizeof dir, "/tmp/specula_test_init_q_%d", (int)getpid());
    snprintf(qdir, sizeof qdir, "%s/q8", dir);
    if (sp_tr_model_init(&a, &d, 7, &err) || sp_tr_model_init(&b, &d, 9, &err)) { CHECK(0, "%s", err.msg); return; }
    tiny_weights(&a);
    int nq = 0;
    CHECK(sp_tr_drafter_export(dir, &a, "{}\n", &err) == 0, "%s", err.msg);
    CHECK(sp_st_quantize_drafter(dir, qdir, SP_DT_Q8_0, &nq, &err) == 0 && nq >= 8, "quantize: %d: %s", nq, err.msg);
    CHECK(sp_tr_drafter_init_from(qdir, &b, &err) == 0, "%s", err.msg);
    int n_blocks = 0, bad = 0;
    for (int i = 0; i < a.n_params; i++) {
        const tr_param *p = &a.params[i];
        size_t nl = strlen(p->name);
        int blocks = p->ndim == 2 && p->shape[1] % 32 == 0 &&
                     ((nl > 12 && !strcmp(p->name + nl - 12, "_proj.weight")) || !strcmp(p->name, "fc.weight") ||
                      !strcmp(p->name, "markov_head.markov_w2.weight"));
        n_blocks += blocks;
        for (int64_t r = 0; r < (p->ndim == 2 ? p->shape[0] : 1); r++) {
            int64_t k = p->ndim == 2 ? p->shape[1] : (int64_t)p->n;
            float want[64], bf[64], *row = a.w + p->off + r * k;
            if (blocks) { /* the exported bf16 row, quantized */
                sp_block_q8_0 q[2];
                for (int64_t j = 0; j < k && j < 64; j++) bf[j] = sp_bf16_to_f32(sp_f32_to_bf16(row[j]));
                CHECK(k <= 64 && sp_quantize_row(q, bf, SP_DT_Q8_0, (size_t)k, &err) == 0, "%s", err.msg);
                sp_dequantize_row_q8_0(want, q, (size_t)k);
            }
            for (int64_t j = 0; j < k; j++) {
                float w = blocks ? want[j] : sp_bf16_to_f32(sp_f32_to_bf16(row[j]));
                if (b.w[p->off + r * k + j] != w && bad++ < 3)
                    CHECK(0, "%s [%lld, %lld]: %g read back, %g expected", p->name, (long long)r, (long long)j,
                          b.w[p->off + r * k + j], w);
            }
        }
    }
    CHECK(n_blocks == nq && bad == 0, "%d matrices as blocks (%d quantized), %d weights off", n_blocks, nq, bad);
    sp_tr_model_free(&a); sp_tr_model_free(&b);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void test_dspark_gradients(void) { check_model(TR_ARCH_DSPARK, 0, TR_MARKOV_VANILLA, 0, 0); }
static void test_dspark_gated_gradients(void) { check_model(TR_ARCH_DSPARK, 0, TR_MARKOV_GATED, 0, 0); }
static void test_dspark_rnn_gradients(void) { check_model(TR_ARCH_DSPARK, 0, TR_MARKOV_RNN, 0, 0); }
static void test_dspark_temp_gradients(void) { check_model(TR_ARCH_DSPARK, 0, TR_MARKOV_VANILLA, 0, 1); }
static void test_gemma_dspark_temp_gradients(void) { check_model(TR_ARCH_DSPARK, 1, TR_MARKOV_VANILLA, 0, 1); }
static void test_dflash_gradients(void) { check_model(TR_ARCH_DFLASH, 0, TR_MARKOV_VANILLA, 0, 0); }
static void test_gemma_dspark_gradients(void) { check_model(TR_ARCH_DSPARK, 1, TR_MARKOV_VANILLA, 0, 0); }
static void test_gemma_rnn_gradients(void) { check_model(TR_ARCH_DSPARK, 1, TR_MARKOV_RNN, 0, 0); }
static void test_gemma_dflash_gradients(void) { check_model(TR_ARCH_DFLASH, 2, TR_MARKOV_VANILLA, 0, 0); }
/* the Qwen3 block through the shared path with the smooth CE loss: this batch's DSpark L1 term
 * has kinks within the finite-difference step (its shared = unshared check is below) */
static void test_shared_dflash_gradients(void) { check_model(TR_ARCH_DFLASH, 0, TR_MARKOV_VANILLA, 1, 0); }
static void test_shared_gemma_dspark_gradients(void) { check_model(TR_ARCH_DSPARK, 1, TR_MARKOV_VANILLA, 1, 0); }
static void test_shared_gemma_dflash_gradients(void) { check_model(TR_ARCH_DFLASH, 2, TR_MARKOV_VANILLA, 1, 0); }

/* the shared layout computes what the unshared one does: loss, c* and every gradient element
 * (float; the layouts differ only in RoPE's absolute positions and summation order) */
static void check_shared_equals_unshared(tr_arch arch, int gemma, tr_markov_type markov) {
    tr_dims d = tiny_dims(arch, gemma, markov);
    tr_model m;
    sp_err err;
    if (sp_tr_model_init(&m, &d, 7, &err)) { CHECK(0, "%s", err.msg); return; }
    tiny_weights(&m);
    tr_batch bs, bu;
    make_anchor_batch(&bs, &d, 1, 21);
    make_anchor_batch(&bu, &d, 0, 21);
    tr_acts *a = sp_tr_acts_create(&d, ANCHORS, ACTX, &err);
    CHECK(a, "%s", err.msg);
    float *Wlm = malloc(sizeof(float) * d.V * d.H);
    harness_fill(Wlm, (size_t)d.V * d.H, 1.0f, 5);
    float *gs = calloc(m.n, sizeof(float)), *gu = calloc(m.n, sizeof(float));
    double denom = 1e-6;
    for (int t = 0; t < ANCHORS * d.B; t++) denom += bs.wt[t];
    tr_stats ss, su;
    float cs[ANCHORS * 3], cu[ANCHORS * 3];
    sp_tr_forward(NULL, &m, a, &bs, Wlm, denom, &ss, cs);
    sp_tr_backward(NULL, &m, a, &bs, Wlm, denom, gs);
    sp_tr_forward(NULL, &m, a, &bu, Wlm, denom, &su, cu);
    sp_tr_backward(NULL, &m, a, &bu, Wlm, denom, gu);
    CHECK(isfinite(ss.loss) && fabs(ss.loss - su.loss) <= 1e-5 * fabs(su.loss), "loss shared %.9g vs unshared %.9g",
          ss.loss, su.loss);
    for (int t = 0; t < ANCHORS * d.B; t++)
        CHECK(fabsf(cs[t] - cu[t]) <= 1e-5f, "c*[%d] shared %.7g vs unshared %.7g", t, cs[t], cu[t]);
    double gmax = 0;
    for (size_t i = 0; i < m.n; i++) gmax = fmax(gmax, fabs(gu[i]));
    CHECK(gmax > 0, "all-zero gradient");
    int bad = 0;
    for (int pi = 0; pi < m.n_params; pi++) {
        const tr_param *p = &m.params[pi];
        double pmax = 0;
        for (size_t j = 0; j < p->n; j++) pmax = fmax(pmax, fabs(gu[p->off + j]));
        CHECK(pmax > 0 || strstr(p->name, "layer_scalar"), "%s: zero gradient", p->name);
        for (size_t j = 0; j < p->n; j++) {
            double x = gs[p->off + j], y = gu[p->off + j];
            if (fabs(x - y) > 1e-5 * gmax + 1e-4 * fabs(y) && bad++ < 6)
                CHECK(0, "%s[%zu]: shared %.8g vs unshared %.8g", p->name, j, x, y);
        }
    }
    CHECK(bad == 0, "%d gradient elements differ", bad);
    free(gs); free(gu); free(Wlm);
    sp_tr_acts_free(a);
    sp_tr_batch_free(&bs);
    sp_tr_batch_free(&bu);
    sp_tr_model_free(&m);
}

static void test_shared_equals_unshared(void) {
    check_shared_equals_unshared(TR_ARCH_DSPARK, 0, TR_MARKOV_VANILLA);
    check_shared_equals_unshared(TR_ARCH_DSPARK, 0, TR_MARKOV_RNN); /* slots of a block stay rows e·B + k */
    check_shared_equals_unshared(TR_ARCH_DSPARK, 0, TR_MARKOV_GATED);
    check_shared_equals_unshared(TR_ARCH_DFLASH, 0, TR_MARKOV_VANILLA);
    check_shared_equals_unshared(TR_ARCH_DSPARK, 1, TR_MARKOV_VANILLA); /* Gemma, k_eq_v */
    check_shared_equals_unshared(TR_ARCH_DFLASH, 2, TR_MARKOV_VANILLA); /* Gemma, v_proj */
}

/* --loss-weights and --loss-norm: the loss under weights (0.3, 0.5, 2) divided by the number of
 * anchors equals, in double precision, the weighted per-term sums of the default run (which the
 * weights do not change) over NB; the default normaliser stays Σw + 1e-6 */
static void test_loss_options(void) {
    tr_dims d = tiny_dims(TR_ARCH_DSPARK, 0, TR_MARKOV_VANILLA);
    tr_model m;
    sp_err err;
    if (sp_tr_model_init(&m, &d, 7, &err)) { CHECK(0, "%s", err.msg); return; }
    tiny_weights(&m);
    tr_batch b;
    int NB = 2;
    make_batch(&b, &d, NB, 4, 11);
    tr_acts *a = sp_tr_acts_create(&d, NB, 4, &err);
    CHECK(a, "%s", err.msg);
    float *Wlm = malloc(sizeof(float) * d.V * d.H);
    harness_fill(Wlm, (size_t)d.V * d.H, 1.0f, 5);
    double wsum = 0;
    for (int t = 0; t < NB * d.B; t++) wsum += b.wt[t];
    CHECK(sp_tr_loss_denom(TR_LOSS_NORM_WEIGHTS, wsum, NB) == wsum + 1e-6, "weights norm");
    CHECK(sp_tr_loss_denom(TR_LOSS_NORM_ANCHORS, wsum, NB) == NB, "anchors norm");
    tr_stats s0, s1;
    sp_tr_forward(NULL, &m, a, &b, Wlm, wsum + 1e-6, &s0, NULL);
    double ref0 = (0.1 * s0.ce + 0.9 * s0.l1 + 1.0 * s0.bce) / (wsum + 1e-6);
    CHECK(fabs(s0.loss - ref0) <= 1e-6 * fabs(ref0), "default loss %.9g vs %.9g", s0.loss, ref0);
    m.d.alpha[0] = 0.3, m.d.alpha[1] = 0.5, m.d.alpha[2] = 2.0, m.d.alpha_set = 1;
    sp_tr_forward(NULL, &m, a, &b, Wlm, sp_tr_loss_denom(TR_LOSS_NORM_ANCHORS, wsum, NB), &s1, NULL);
    double ref1 = (0.3 * s0.ce + 0.5 * s0.l1 + 2.0 * s0.bce) / NB;
    CHECK(s1.ce == s0.ce && s1.l1 == s0.l1 && s1.bce == s0.bce, "the terms depend on the weights");
    CHECK(fabs(s1.loss - ref1) <= 1e-6 * fabs(ref1) && fabs(s1.loss - s0.loss) > 1e-3,
          "weighted, per anchor: %.9g vs %.9g (default %.9g)", s1.loss, ref1, s0.loss);
    free(Wlm);
    sp_tr_acts_free(a);
    sp_tr_batch_free(&b);
    sp_tr_model_free(&m);
}

int main(void) {
    RUN(test_loss_options);
    RUN(test_dspark_gradients);
    RUN(test_init_from);
    RUN(test_init_from_quantized);
    RUN(test_dspark_temp_gradients);
    RUN(test_gemma_dspark_temp_gradients);
    RUN(test_dspark_gated_gradients);
    RUN(test_dspark_rnn_gradients);
    RUN(test_dflash_gradients);
    RUN(test_gemma_dspark_gradients);
    RUN(test_gemma_rnn_gradients);
    RUN(test_gemma_dflash_gradients);
    RUN(test_shared_equals_unshared);
    RUN(test_shared_dflash_gradients);
    RUN(test_shared_gemma_dspark_gradients);
    RUN(test_shared_gemma_dflash_gradients);
    return harness_done("test_train_model");
}
