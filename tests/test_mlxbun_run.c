/* test_mlxbun_run.c — mlx-bun's own DSpark drafters run (docs/MLX-BUN-DRAFTERS.md), on fixture
 * checkpoints this test writes itself from the documented layout (its own safetensors writer and
 * dspark.json, not specula's new-drafter writer), for the 4-layer llama and 6-layer gemma4
 * (soft-capped) reference targets:
 * - the block logits U, the Markov-corrected logits Z, the confidences and the greedy drafts of
 *   two rounds (the context grown by a commit between them) equal a double-precision reference
 *   forward written here from the documented equations, for v1, faithful and faithful with the
 *   rnn head; a confidence threshold (--conf-threshold, or config.sts.thresholds) cuts where the
 *   reference says;
 * - greedy speculative output == plain output (generate, also with a repetition penalty, and the
 *   server; v1 and faithful), with drafts accepted (a fixture whose Markov head holds the plain
 *   output's bigrams);
 * - the sampled audit passes for both variants (on a tiny target of its own);
 * - bad checkpoints (a missing tensor or tensor file, a wrong shape, dims or taps not the
 *   target's, a bad variant or seqHead) fail with an error naming what is wrong;
 * - the checkpoints `new-drafter --layout mlx-bun` writes load and run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "drafters/mlxbun.h"
#include "fixtures.h"
#include "harness.h"
#include "model/model.h"
#include "server_harness.h"
#include "specula.h"

static char BIN[4096];
static char ROOT[256];

/* ---- the fixture: config, tensors in mlx-bun's canonical order, written by hand --------------- */

typedef struct {
    int faithful, rnn, gamma, d, L, NH, r, ff, m, taps[8];
    int H, V;
    double eps;
    double sts; /* > 0: config.sts.thresholds all this value */
} fx_cfg;

typedef struct {
    char name[32];
    int a, b; /* shape [a] (b 0) or [a, b] */
    float *x;
} fx_t;

typedef struct {
    fx_cfg c;
    fx_t t[64];
    int n;
} fx;

static uint64_t RNG = 88172645463325252ull;
static double urand(void) { /* uniform in [-1, 1) */
    RNG ^= RNG << 13, RNG ^= RNG >> 7, RNG ^= RNG << 17;
    return (double)(RNG >> 11) / 4503599627370496.0 - 1.0;
}

/* kind: 'n' uniform ±scale, '1' 1 + ±0.1 (norm weights), 'z' zeros */
static void fx_add(fx *f, const char *name, int a, int b, char kind, double scale) {
    fx_t *t = &f->t[f->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->a = a, t->b = b;
    size_t n = (size_t)a * (size_t)(b ? b : 1);
    t->x = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        t->x[i] = kind == 'n' ? (float)(scale * urand()) : kind == '1' ? (float)(1.0 + 0.1 * urand()) : 0.0f;
}

static fx_t *fx_get(fx *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

static void fx_free(fx *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].x);
    f->n = 0;
}

/* every tensor of the config, in the documented order, random (Markov and confidence heads
 * nonzero so every head matters) */
static void fx_make(fx *f, const fx_cfg *c) {
    memset(f, 0, sizeof *f);
    f->c = *c;
    int d = c->d, fw = c->ff * c->d, H = c->H, V = c->V, r = c->r, g = c->gamma;
    char nm[32];
    static const char *qkvo[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < c->L; i++) {
        snprintf(nm, sizeof nm, "bb.%d.attn_norm", i), fx_add(f, nm, d, 0, '1', 0);
        for (int j = 0; j < 4; j++) snprintf(nm, sizeof nm, "bb.%d.%s", i, qkvo[j]), fx_add(f, nm, d, d, 'n', 0.4);
        snprintf(nm, sizeof nm, "bb.%d.ff_norm", i), fx_add(f, nm, d, 0, '1', 0);
        snprintf(nm, sizeof nm, "bb.%d.gate", i), fx_add(f, nm, d, fw, 'n', 0.4);
        snprintf(nm, sizeof nm, "bb.%d.up", i), fx_add(f, nm, d, fw, 'n', 0.4);
        snprintf(nm, sizeof nm, "bb.%d.down", i), fx_add(f, nm, fw, d, 'n', 0.3);
    }
    if (c->faithful) fx_add(f, "W_c", c->m * H, d, 'n', 0.3), fx_add(f, "ctx_norm", d, 0, '1', 0);
    else fx_add(f, "ctx_proj", H, d, 'n', 0.3);
    fx_add(f, "tok_proj", H, d, 'n', 0.5);
    fx_add(f, "mask_emb", g - 1, d, 'n', 1.0);
    if (c->faithful) fx_add(f, "block_pos", g, d, 'n', 0.5);
    else fx_add(f, "pos_emb", g + 1, d, 'n', 0.5);
    fx_add(f, "out_norm", d, 0, '1', 0);
    fx_add(f, "out_proj", d, H, 'n', 0.5);
    fx_add(f, "markov.w1", V, r, 'n', 1.0);
    fx_add(f, "markov.w2", r, V, 'n', 0.5);
    fx_add(f, "conf.w", d + r, 1, 'n', 0.5);
    fx_add(f, "conf.b", 1, 0, 'n', 0.5);
    if (c->rnn) fx_add(f, "rnn.wH", r, r, 'n', 0.5), fx_add(f, "rnn.bH", r, 0, 'n', 0.3), fx_add(f, "rnn.wO", r, V, 'n', 0.5);
}

/* model.safetensors by hand: 8-byte little-endian header length, the JSON header (padded with
 * spaces to a multiple of 8), then the data; skip: a tensor left out, bad: one whose second dim
 * is written one larger (its data padded) */
static int fx_write(const fx *f, const char *dir, const char *skip, const char *bad, const char *json_extra) {
    char p[600], cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0) return -1;
    size_t hcap = 1 << 16, hn = 0, off = 0;
    char *h = malloc(hcap);
    hn += (size_t)snprintf(h + hn, hcap - hn, "{");
    for (int i = 0; i < f->n; i++) {
        const fx_t *t = &f->t[i];
        if (skip && !strcmp(t->name, skip)) continue;
        int b = t->b + (bad && !strcmp(t->name, bad));
        size_t bytes = sizeof(float) * (size_t)t->a * (size_t)(b ? b : 1);
        if (b) hn += (size_t)snprintf(h + hn, hcap - hn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                      hn > 1 ? "," : "", t->name, t->a, b, off, off + bytes);
        else hn += (size_t)snprintf(h + hn, hcap - hn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                                    hn > 1 ? "," : "", t->name, t->a, off, off + bytes);
        off += bytes;
    }
    hn += (size_t)snprintf(h + hn, hcap - hn, "}");
    while (hn % 8) h[hn++] = ' ';
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *o = fopen(p, "wb");
    if (!o) { free(h); return -1; }
    uint64_t n64 = hn;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(n64 >> (8 * i));
    fwrite(le, 1, 8, o);
    fwrite(h, 1, hn, o);
    free(h);
    for (int i = 0; i < f->n; i++) {
        const fx_t *t = &f->t[i];
        if (skip && !strcmp(t->name, skip)) continue;
        int extra = bad && !strcmp(t->name, bad);
        if (!extra) {
            fwrite(t->x, sizeof(float), (size_t)t->a * (size_t)(t->b ? t->b : 1), o);
        } else { /* rows one wider */
            float z = 0;
            for (int r = 0; r < t->a; r++) {
                fwrite(t->x + (size_t)r * t->b, sizeof(float), (size_t)t->b, o);
                fwrite(&z, sizeof z, 1, o);
            }
        }
    }
    fclose(o);
    /* dspark.json */
    const fx_cfg *c = &f->c;
    snprintf(p, sizeof p, "%s/dspark.json", dir);
    o = fopen(p, "w");
    if (!o) return -1;
    fprintf(o, "{\"kind\": \"dspark-drafter\", %s\"version\": 1, \"target_id\": \"fixture\",\n \"config\": {\"gamma\": %d, "
               "\"dDraft\": %d, \"nLayers\": %d, \"nHeads\": %d, \"markovRank\": %d, \"ffMult\": %d",
            c->faithful ? "\"variant\": \"dspark\", " : "", c->gamma, c->d, c->L, c->NH, c->r, c->ff);
    if (c->faithful) {
        fprintf(o, ", \"tapLayers\": [");
        for (int i = 0; i < c->m; i++) fprintf(o, "%s%d", i ? ", " : "", c->taps[i]);
        fprintf(o, "]");
    }
    if (c->rnn) fprintf(o, ", \"seqHead\": \"rnn\"");
    if (c->sts > 0) {
        fprintf(o, ", \"sts\": {\"thresholds\": [");
        for (int i = 0; i < c->gamma; i++) fprintf(o, "%s%g", i ? ", " : "", c->sts);
        fprintf(o, "], \"target\": 0.9}");
    }
    fprintf(o, "},\n \"dims\": {\"hiddenSize\": %d, \"vocabSize\": %d, \"eps\": %.9g}%s,\n \"param_names\": [", c->H, c->V,
            c->eps, json_extra ? json_extra : "");
    for (int i = 0; i < f->n; i++) fprintf(o, "%s\"%s\"", i ? ", " : "", f->t[i].name);
    fprintf(o, "]}\n");
    fclose(o);
    return 0;
}

/* ---- the double-precision reference (docs/MLX-BUN-DRAFTERS.md "The computation") -------------- */

/* y[T, out] = x[T, in] · W[in, out] (the stored layout) */
static void ref_mm(double *y, const double *x, int T, const fx_t *W) {
    for (int t = 0; t < T; t++)
        for (int o = 0; o < W->b; o++) {
            double a = 0;
            for (int i = 0; i < W->a; i++) a += x[(size_t)t * W->a + i] * W->x[(size_t)i * W->b + o];
            y[(size_t)t * W->b + o] = a;
        }
}

static void ref_norm(double *y, const double *x, const float *w, int T, int n, double eps) {
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += x[(size_t)t * n + i] * x[(size_t)t * n + i];
        double k = 1.0 / sqrt(ss / n + eps);
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] = x[(size_t)t * n + i] * k * w[i];
    }
}

static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* U [γ, V] and hout [γ, d] for context (faithful: taps rows F [nc, m·H]; v1: hctx [H]) and anchor */
static void ref_block(fx *f, sp_model *m, const float *F, int nc, const float *hctx, int32_t anchor, double *U,
                      double *hout) {
    const fx_cfg *c = &f->c;
    int d = c->d, g = c->gamma, H = c->H, V = c->V, fw = c->ff * d, NH = c->NH, D = d / NH;
    int T = g + !c->faithful, a0 = !c->faithful;
    double *x = calloc((size_t)T * d, sizeof(double)), *xn = calloc((size_t)T * d, sizeof(double));
    double *ctx = calloc((size_t)(nc + 1) * d, sizeof(double)), *cn = calloc((size_t)(nc + 1) * d, sizeof(double));
    double *q = calloc((size_t)T * d, sizeof(double)), *K = calloc((size_t)(nc + T) * d, sizeof(double));
    double *Vv = calloc((size_t)(nc + T) * d, sizeof(double)), *att = calloc((size_t)T * d, sizeof(double));
    double *o = calloc((size_t)T * d, sizeof(double)), *gt = calloc((size_t)T * fw, sizeof(double));
    double *up = calloc((size_t)T * fw, sizeof(double)), *sc = calloc((size_t)(nc + T), sizeof(double));
    double *row = calloc((size_t)(c->m ? c->m : 1) * H, sizeof(double)), *y = calloc((size_t)g * H, sizeof(double));
    float *e = malloc(sizeof(float) * H), *lm = malloc(sizeof(float) * H);
    /* H_ctx (faithful) */
    for (int i = 0; c->faithful && i < nc; i++) {
        for (int j = 0; j < c->m * H; j++) row[j] = F[(size_t)i * c->m * H + j];
        ref_mm(ctx + (size_t)i * d, row, 1, fx_get(f, "W_c"));
    }
    if (c->faithful) ref_norm(ctx, ctx, fx_get(f, "ctx_norm")->x, nc, d, c->eps);
    /* the rows */
    sp_mat_row_f32(sp_model_embed_table(m), anchor, e);
    for (int j = 0; j < H; j++) row[j] = e[j];
    ref_mm(x + (size_t)a0 * d, row, 1, fx_get(f, "tok_proj"));
    if (!c->faithful) {
        for (int j = 0; j < H; j++) row[j] = hctx[j];
        ref_mm(x, row, 1, fx_get(f, "ctx_proj"));
    }
    const fx_t *me = fx_get(f, "mask_emb"), *pe = fx_get(f, c->faithful ? "block_pos" : "pos_emb");
    for (int j = 0; j < g - 1; j++)
        for (int i = 0; i < d; i++) x[(size_t)(a0 + 1 + j) * d + i] = me->x[(size_t)j * d + i];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < d; i++) x[(size_t)t * d + i] += pe->x[(size_t)t * d + i];
    char nm[32];
    for (int l = 0; l < c->L; l++) {
#define W(p) (snprintf(nm, sizeof nm, "bb.%d.%s", l, p), fx_get(f, nm))
        const float *an = W("attn_norm")->x;
        ref_norm(xn, x, an, T, d, c->eps);
        ref_mm(q, xn, T, W("q"));
        if (c->faithful) ref_norm(cn, ctx, an, nc, d, c->eps);
        int n_c = c->faithful ? nc : 0;
        ref_mm(K, cn, n_c, W("k"));
        ref_mm(Vv, cn, n_c, W("v"));
        ref_mm(K + (size_t)n_c * d, xn, T, W("k"));
        ref_mm(Vv + (size_t)n_c * d, xn, T, W("v"));
        for (int t = 0; t < T; t++)
            for (int hh = 0; hh < NH; hh++) {
                double mx = -1e300, sum = 0;
                for (int j = 0; j < n_c + T; j++) {
                    double a = 0;
                    for (int i = 0; i < D; i++) a += q[(size_t)t * d + hh * D + i] * K[(size_t)j * d + hh * D + i];
                    sc[j] = a / sqrt((double)D);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j < n_c + T; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < D; i++) {
                    double a = 0;
                    for (int j = 0; j < n_c + T; j++) a += sc[j] / sum * Vv[(size_t)j * d + hh * D + i];
                    att[(size_t)t * d + hh * D + i] = a;
                }
            }
        ref_mm(o, att, T, W("o"));
        for (size_t i = 0; i < (size_t)T * d; i++) x[i] += o[i];
        ref_norm(xn, x, W("ff_norm")->x, T, d, c->eps);
        ref_mm(gt, xn, T, W("gate"));
        ref_mm(up, xn, T, W("up"));
        for (size_t i = 0; i < (size_t)T * fw; i++) gt[i] = gelu(gt[i]) * up[i];
        ref_mm(o, gt, T, W("down"));
        for (size_t i = 0; i < (size_t)T * d; i++) x[i] += o[i];
#undef W
    }
    ref_norm(hout, x + (size_t)a0 * d, fx_get(f, "out_norm")->x, g, d, c->eps);
    ref_mm(y, hout, g, fx_get(f, "out_proj"));
    double cap = sp_model_config(m)->final_softcap;
    const sp_mat *head = sp_model_lm_head(m);
    for (int v = 0; v < V; v++) {
        sp_mat_row_f32(head, v, lm);
        for (int k = 0; k < g; k++) {
            double a = 0;
            for (int i = 0; i < H; i++) a += y[(size_t)k * H + i] * lm[i];
            U[(size_t)k * V + v] = cap > 0 ? cap * tanh(a / cap) : a;
        }
    }
    free(x); free(xn); free(ctx); free(cn); free(q); free(K); free(Vv); free(att); free(o); free(gt); free(up);
    free(sc); free(row); free(y); free(e); free(lm);
}

/* the heads for draft k given prev (rnn state s in / out): Z [V] and c_k */
static double ref_heads(fx *f, const double *Uk, const double *hk, int32_t prev, double *s, double *Z) {
    const fx_cfg *c = &f->c;
    int r = c->r, V = c->V, d = c->d;
    const float *e = fx_get(f, "markov.w1")->x + (size_t)prev * r;
    const fx_t *w2 = fx_get(f, c->rnn ? "rnn.wO" : "markov.w2");
    double mix[256];
    if (c->rnn) {
        const fx_t *wH = fx_get(f, "rnn.wH");
        const float *bH = fx_get(f, "rnn.bH")->x;
        for (int o = 0; o < r; o++) {
            double a = bH[o] + e[o];
            for (int i = 0; i < r; i++) a += s[i] * wH->x[(size_t)i * r + o];
            mix[o] = a;
        }
        for (int o = 0; o < r; o++) s[o] = mix[o] = tanh(mix[o]);
    } else {
        for (int i = 0; i < r; i++) mix[i] = e[i];
    }
    for (int v = 0; v < V; v++) {
        double a = Uk[v];
        for (int i = 0; i < r; i++) a += mix[i] * w2->x[(size_t)i * V + v];
        Z[v] = a;
    }
    const float *cw = fx_get(f, "conf.w")->x;
    double z = fx_get(f, "conf.b")->x[0];
    for (int i = 0; i < d; i++) z += cw[i] * hk[i];
    for (int i = 0; i < r; i++) z += cw[d + i] * e[i];
    return 1 / (1 + exp(-z));
}

static fx_cfg base_cfg(sp_model *m, int faithful, int rnn) {
    const sp_config *tc = sp_model_config(m);
    fx_cfg c = {.faithful = faithful, .rnn = rnn, .gamma = 4, .d = 16, .L = 2, .NH = 4, .r = 8, .ff = 2,
                .H = tc->hidden_size, .V = tc->vocab_size, .eps = tc->rms_eps};
    if (faithful) { /* an inner layer, the last decoder layer and the final-norm sentinel */
        c.m = 3;
        c.taps[0] = tc->n_layers > 2 ? 1 : 0, c.taps[1] = tc->n_layers - 1, c.taps[2] = tc->n_layers;
    }
    return c;
}

#define TOL(ref) (2e-4 + 1e-4 * fabs(ref))

/* one proposal against the reference: U rows, Z rows, confidences, drafts; conf_thr as loaded */
static void compare_round(fx *f, sp_drafter *d, sp_model *m, const float *F, int nc, const float *hctx, int32_t anchor,
                          float conf_thr, const char *what) {
    const fx_cfg *c = &f->c;
    int g = c->gamma, V = c->V;
    int32_t drafts[8];
    sp_err err = {{0}};
    int n = d->propose(d, g, drafts, NULL, &err);
    CHECK(n >= 1, "%s: propose: %d %s", what, n, err.msg);
    const float *U, *Z, *cc;
    int nl;
    const sp_mlxbun_cfg *mc;
    CHECK(sp_mlxbun_last(d, &U, &Z, &cc, &nl, &mc) == 0 && nl == n, "%s: last", what);
    double *Ur = malloc(sizeof(double) * (size_t)g * V), *hr = malloc(sizeof(double) * (size_t)g * c->d),
           *Zr = malloc(sizeof(double) * V), s[256] = {0};
    ref_block(f, m, F, nc, hctx, anchor, Ur, hr);
    double worst = 0;
    for (size_t i = 0; i < (size_t)g * V; i++) {
        double e = fabs(U[i] - Ur[i]) / TOL(Ur[i]);
        if (e > worst) worst = e;
    }
    CHECK(worst <= 1, "%s: U off the reference by %.3g tolerances", what, worst);
    int32_t prev = anchor;
    int want = g;
    for (int k = 1; k <= g; k++) {
        double ck = ref_heads(f, Ur + (size_t)(k - 1) * V, hr + (size_t)(k - 1) * c->d, prev, s, Zr);
        if (k > 1 && ck < conf_thr) { want = k - 1; break; }
        if (k > n) break;
        double wz = 0;
        int best = 0;
        for (int v = 0; v < V; v++) {
            double e = fabs(Z[(size_t)(k - 1) * V + v] - Zr[v]) / TOL(Zr[v]);
            if (e > wz) wz = e;
            if (Zr[v] > Zr[best]) best = v;
        }
        CHECK(wz <= 1, "%s: Z_%d off the reference by %.3g tolerances", what, k, wz);
        CHECK(fabs(cc[k - 1] - ck) < 1e-5, "%s: c_%d %g != %g", what, k, cc[k - 1], ck);
        CHECK(drafts[k - 1] == best, "%s: draft %d is %d, the reference's argmax %d", what, k, drafts[k - 1], best);
        prev = drafts[k - 1];
    }
    CHECK(n == want, "%s: %d drafts, the reference (threshold %g) %d", what, n, conf_thr, want);
    printf("  %s: %d drafts (c %.3f %.3f %.3f %.3f), U within %.2f of the tolerance 2e-4 + 1e-4|ref|\n", what, n,
           cc[0], n > 1 ? cc[1] : 0, n > 2 ? cc[2] : 0, n > 3 ? cc[3] : 0, worst);
    free(Ur); free(hr); free(Zr);
}

/* two rounds on one target: begin on a prompt, propose, commit 1 draft and a token, propose */
static void ref_case(const char *arch, int faithful, int rnn, float conf_thr, int from_sts) {
    sp_model *m = fixture_load(arch);
    if (!m) { CHECK(0, "load %s", arch); return; }
    fx f;
    fx_cfg c = base_cfg(m, faithful, rnn);
    RNG = 88172645463325252ull + (uint64_t)(arch[0] * 64 + faithful * 8 + rnn * 2 + (conf_thr > 0)); /* per case */
    if (from_sts) c.sts = conf_thr; /* the threshold from the checkpoint's config.sts, not the option */
    fx_make(&f, &c);
    char dir[400], what[96];
    snprintf(dir, sizeof dir, "%s/ref_%s_%d_%d", ROOT, arch, faithful, rnn);
    snprintf(what, sizeof what, "%s %s%s%s", arch, faithful ? "faithful" : "v1", rnn ? " rnn" : "",
             from_sts ? " sts thresholds" : conf_thr > 0 ? " threshold" : "");
    CHECK(fx_write(&f, dir, NULL, NULL, NULL) == 0, "write %s", dir);
    sp_err err = {{0}};
    sp_sample_params greedy = sp_sample_params_default();
    sp_drafter *d = sp_drafter_mlxbun(dir, m, &greedy, 0, from_sts ? 0 : conf_thr, &err);
    CHECK(d, "%s: %s", what, err.msg);
    if (!d) { fx_free(&f); sp_model_free(m); return; }
    int H = c.H, L = sp_model_config(m)->n_layers, mt = faithful ? c.m : 1;
    int tl[8] = {L};
    const int *taps = faithful ? c.taps : tl;
    int32_t P[6] = {1, 5493, 20509, 14029, 77, 901};
    float *F = malloc(sizeof(float) * 16 * mt * H), *hid = malloc(sizeof(float) * 16 * H);
    sp_kv *kv = sp_kv_create(m, 64, 8, &err);
    sp_forward_out o = {.hidden = hid, .tap_layers = taps, .n_taps = mt, .taps = F};
    CHECK(sp_model_forward(m, kv, P, 5, &o, &err) == 0, "forward: %s", err.msg);
    sp_drafter_ctx ctx = {.target = m, .target_kv = kv, .seed = 1};
    CHECK(d->begin(d, P, 6, faithful ? F : NULL, faithful ? NULL : hid, &ctx, &err) == 0, "begin: %s", err.msg);
    compare_round(&f, d, m, F, 5, hid + 4 * H, P[5], conf_thr, what);
    /* commit [901, d_1] (the first draft accepted) and a token; the context grows by two rows */
    const float *U, *Z, *cc;
    int nl;
    const sp_mlxbun_cfg *mc;
    sp_mlxbun_last(d, &U, &Z, &cc, &nl, &mc);
    int32_t two[2] = {P[5], 0};
    for (int v = 1; v < c.V; v++) /* d_1 is Z_1's argmax */
        if (Z[v] > Z[two[1]]) two[1] = v;
    sp_forward_out o2 = {.hidden = hid + 5 * H, .tap_layers = taps, .n_taps = mt, .taps = F + (size_t)5 * mt * H};
    CHECK(sp_model_forward(m, kv, two, 2, &o2, &err) == 0, "forward: %s", err.msg);
    CHECK(d->commit(d, 1, 4242, faithful ? o2.taps : NULL, faithful ? NULL : o2.hidden, &err) == 0, "commit: %s",
          err.msg);
    char w2[120];
    snprintf(w2, sizeof w2, "%s, round 2", what);
    compare_round(&f, d, m, F, 7, hid + 6 * H, 4242, conf_thr, w2);
    sp_drafter_free(d);
    sp_kv_free(kv);
    free(F);
    free(hid);
    fx_free(&f);
    sp_model_free(m);
}

static void test_reference_forward(void) {
    ref_case("llama", 0, 0, 0, 0);
    ref_case("llama", 1, 0, 0, 0);
    ref_case("llama", 1, 1, 0, 0);
    ref_case("gemma4", 0, 0, 0, 0);
    ref_case("gemma4", 1, 0, 0, 0);
    ref_case("llama", 1, 0, 0.6f, 0); /* c_1 .. c_4 of its rounds: see the log */
    ref_case("llama", 0, 0, 0.2f, 1); /* cuts round 1 after one draft, not round 2 */
}

/* ---- end to end through the binary ------------------------------------------------------------ */

static const char *TGT = "tests/data/ref-logits/llama";
static const char *PROMPT = "1,493,2050,1402,77,901"; /* inside both vocabularies */
static const int32_t PROMPT_IDS[6] = {1, 493, 2050, 1402, 77, 901};

static int LAST_RC; /* the exit status of the last gen_on */

/* generate --json: tokens into out (their count), the drafts verified / accepted */
static int gen_on(const char *tgt, const char *prompt, const char *flags, int32_t *out, int cap, int *drafted,
                  int *accepted, char *msg, size_t mcap) {
    static char buf[1 << 16];
    int rc = LAST_RC = harness_runf(buf, sizeof buf, "%s generate -m %s --prompt-ids %s -n 40 --temp 0 --ignore-eos -t 2 "
                                    "--json %s 2>&1", BIN, tgt, prompt, flags);
    snprintf(msg, mcap, "%.*s", (int)mcap - 1, buf);
    if (rc != 0) return -1;
    const char *js = strchr(buf, '{');
    json_t *o = js ? json_loads(js, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_t *a = json_object_get(o, "tokens");
    int k = 0;
    for (size_t i = 0; i < json_array_size(a) && k < cap; i++) out[k++] = (int32_t)json_integer_value(json_array_get(a, i));
    json_t *sp = json_object_get(o, "stats");
    if (drafted) *drafted = (int)json_integer_value(json_object_get(sp, "drafted"));
    if (accepted) *accepted = (int)json_integer_value(json_object_get(sp, "accepted"));
    json_decref(o);
    return k;
}

static int gen_tokens(const char *flags, int32_t *out, int cap, int *drafted, int *accepted, char *msg, size_t mcap) {
    return gen_on(TGT, PROMPT, flags, out, cap, drafted, accepted, msg, mcap);
}

static int32_t PLAIN[64];
static int NPLAIN;

/* a fixture whose Markov head holds the bigrams of the plain greedy output (rank 64: token a's
 * row of markov.w1 is a unit vector e_i, row i of markov.w2 puts 1000, above any logit U, on the
 * token that followed a), so drafts are accepted; every other weight random */
static void bigram_fixture(fx *f, sp_model *m, int faithful, const int32_t *prompt, const int32_t *plain, int nplain) {
    fx_cfg c = base_cfg(m, faithful, 0);
    c.r = 64;
    fx_make(f, &c);
    fx_t *w1 = fx_get(f, "markov.w1"), *w2 = fx_get(f, "markov.w2");
    memset(w1->x, 0, sizeof(float) * (size_t)w1->a * w1->b);
    memset(w2->x, 0, sizeof(float) * (size_t)w2->a * w2->b);
    int32_t seq[80], n = 0, used = 0;
    for (int i = 0; i < 6; i++) seq[n++] = prompt[i];
    for (int i = 0; i < nplain; i++) seq[n++] = plain[i];
    for (int i = 0; i + 1 < n && used < c.r; i++) {
        int32_t a = seq[i], b = seq[i + 1];
        int seen = 0;
        for (int j = 0; j < c.r; j++) seen |= w1->x[(size_t)a * c.r + j] != 0;
        if (seen) continue;
        w1->x[(size_t)a * c.r + used] = 1;
        w2->x[(size_t)used * c.V + b] = 1000;
        used++;
    }
}

/* the plain greedy output on TGT (once) */
static int plain_ref(void) {
    char msg[2048];
    if (NPLAIN != 40) NPLAIN = gen_tokens("--spec none", PLAIN, 64, NULL, NULL, msg, sizeof msg);
    CHECK(NPLAIN == 40, "plain generate: %s", msg);
    return NPLAIN == 40;
}

/* ROOT/bigram_<faithful>: the bigram fixture for TGT (written once); 0 or -1 */
static int bigram_dir(int faithful, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/bigram_%d", ROOT, faithful);
    char p[600];
    snprintf(p, sizeof p, "%s/dspark.json", dir);
    if (access(p, R_OK) == 0) return 0;
    if (!plain_ref()) return -1;
    sp_model *m = fixture_load("llama");
    if (!m) return -1;
    fx f;
    bigram_fixture(&f, m, faithful, PROMPT_IDS, PLAIN, NPLAIN);
    int rc = fx_write(&f, dir, NULL, NULL, NULL);
    fx_free(&f);
    sp_model_free(m);
    return rc;
}

static void test_generate_identity(void) {
    char msg[2048];
    if (!plain_ref()) return;
    for (int faithful = 0; faithful < 2; faithful++) {
        char dir[400], flags[700];
        CHECK(bigram_dir(faithful, dir, sizeof dir) == 0, "fixture");
        /* v1 by --spec dspark, faithful by --spec dflash, then both detected from dspark.json alone */
        for (int k = 0; k < 2; k++) {
            const char *spec = k ? "" : faithful ? "--spec dflash" : "--spec dspark";
            snprintf(flags, sizeof flags, "%s -md %s --draft-max %d", spec, dir, 3 + k);
            int32_t out[64];
            int dr = 0, ac = 0, n = gen_tokens(flags, out, 64, &dr, &ac, msg, sizeof msg);
            CHECK(n == 40 && !memcmp(out, PLAIN, sizeof(int32_t) * 40), "%s %s: spec output differs from plain: %s",
                  faithful ? "faithful" : "v1", flags, msg);
            CHECK(dr > 0 && ac > 0, "%s %s: %d drafted, %d accepted: %s", faithful ? "faithful" : "v1", flags, dr, ac,
                  msg);
            printf("  generate %s %s: identical to plain, %d drafted, %d accepted\n", faithful ? "faithful" : "v1",
                   flags, dr, ac);
        }
        /* with a repetition penalty (the drafter penalises its own logits; the verifier decides) */
        int32_t pp[64], ps[64];
        int np = gen_tokens("--spec none --repeat-penalty 1.5", pp, 64, NULL, NULL, msg, sizeof msg);
        snprintf(flags, sizeof flags, "-md %s --draft-max 4 --repeat-penalty 1.5", dir);
        int dr = 0, ns = gen_tokens(flags, ps, 64, &dr, NULL, msg, sizeof msg);
        CHECK(np == 40 && ns == 40 && !memcmp(pp, ps, sizeof(int32_t) * 40) && dr > 0,
              "%s with a repetition penalty: spec output differs from plain (%d drafted): %s",
              faithful ? "faithful" : "v1", dr, msg);
    }
}

/* the server needs a tokenizer: a tiny target (`new-model --preset tiny`) with the embedded
 * target's tokenizer, and bigram fixtures of its own */
static void test_server_identity(void) {
    char tgt[400], msg[2048];
    snprintf(tgt, sizeof tgt, "%s/tiny_tok", ROOT);
    CHECK(harness_runf(msg, sizeof msg, "%s new-model --arch qwen3 --preset tiny --tokenizer "
                       "models/default/target/tokenizer.json --seed 2 -o %s 2>&1", BIN, tgt) == 0, "new-model: %s", msg);
    int32_t plain[64];
    int np = gen_on(tgt, PROMPT, "--spec none", plain, 64, NULL, NULL, msg, sizeof msg);
    CHECK(np == 40, "plain generate (%s): %s", tgt, msg);
    sp_model *m = NULL;
    sp_err err = {{0}};
    if (np != 40 || sp_model_load(&m, tgt, 2, &err)) { CHECK(0, "setup: %s", err.msg); return; }
    for (int faithful = 0; faithful < 2; faithful++) {
        char dir[400], args[1024];
        fx f;
        bigram_fixture(&f, m, faithful, PROMPT_IDS, plain, np);
        snprintf(dir, sizeof dir, "%s/srv_%d", ROOT, faithful);
        CHECK(fx_write(&f, dir, NULL, NULL, NULL) == 0, "write");
        fx_free(&f);
        snprintf(args, sizeof args, "-m %s -np 2 -c 1024 -t 2 --spec-max-slots 0 -md %s --draft-max 4", tgt, dir);
        test_server s;
        int up = server_start(&s, BIN, args) == 0;
        CHECK(up, "server (%s) did not start (log %s)", faithful ? "faithful" : "v1", s.log);
        if (!up) continue;
        static char out[1 << 16];
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "curl -s -X POST -H 'Content-Type: application/json' http://127.0.0.1:%d/v1/completions -d "
                 "'{\"prompt\":[%s],\"max_tokens\":40,\"temperature\":0,\"return_tokens\":true,\"ignore_eos\":true,"
                 "\"speculative\":true}'", s.port, PROMPT);
        int rc = harness_run(cmd, out, sizeof out);
        json_t *o = json_loads(out, 0, NULL), *a = json_object_get(o, "tokens"), *tm = json_object_get(o, "timings");
        int same = rc == 0 && json_array_size(a) == 40;
        for (size_t i = 0; same && i < 40; i++) same = json_integer_value(json_array_get(a, i)) == plain[i];
        int dr = (int)json_integer_value(json_object_get(tm, "draft_n")),
            ac = (int)json_integer_value(json_object_get(tm, "draft_n_accepted"));
        CHECK(same, "server %s: output differs from plain: %.400s", faithful ? "faithful" : "v1", out);
        CHECK(dr > 0 && ac > 0, "server %s: %d drafted, %d accepted", faithful ? "faithful" : "v1", dr, ac);
        printf("  server %s: identical to plain, %d drafted, %d accepted\n", faithful ? "faithful" : "v1", dr, ac);
        json_decref(o);
        rc = server_stop(&s);
        CHECK(rc == 0 && !server_log_has(&s, "Sanitizer"), "server exit %d (log %s)", rc, s.log);
        if (rc == 0) unlink(s.log);
    }
    sp_model_free(m);
}

/* the sampled audit on a tiny target of its own (`new-model --preset tiny`, vocabulary 1024, so
 * the draws stay cheap under the sanitizers), with bigram fixtures for it */
static void test_audit(void) {
    static const int32_t ids[6] = {1, 493, 205, 140, 77, 901};
    const char *prompt = "1,493,205,140,77,901";
    char tgt[400], msg[2048];
    snprintf(tgt, sizeof tgt, "%s/tiny", ROOT);
    int rc = harness_runf(msg, sizeof msg, "%s new-model --arch llama --preset tiny --set vocab_size=1024 --seed 1 -o %s "
                          "2>&1", BIN, tgt);
    CHECK(rc == 0, "new-model: %s", msg);
    int32_t plain[64];
    int np = gen_on(tgt, prompt, "--spec none", plain, 64, NULL, NULL, msg, sizeof msg);
    sp_model *m = NULL;
    sp_err err = {{0}};
    if (np != 40 || sp_model_load(&m, tgt, 2, &err)) { CHECK(0, "setup: %s %s", msg, err.msg); return; }
    for (int faithful = 0; faithful < 2; faithful++) {
        static char out[1 << 16];
        char dir[400];
        fx f;
        bigram_fixture(&f, m, faithful, ids, plain, np);
        snprintf(dir, sizeof dir, "%s/audit_%d", ROOT, faithful);
        CHECK(fx_write(&f, dir, NULL, NULL, NULL) == 0, "write");
        fx_free(&f);
        rc = harness_runf(out, sizeof out, "%s audit -m %s -md %s --draft-temp 3 --temp 1.0 --draws 1000 "
                          "--prompt-ids %s -t 2 2>&1", BIN, tgt, dir, prompt);
        CHECK(rc == 0 && strstr(out, "audit: PASS"), "audit %s: %s", faithful ? "faithful" : "v1", out);
        const char *acc = strstr(out, "accept");
        printf("  audit %s: %s%.60s\n", faithful ? "faithful" : "v1", rc == 0 ? "PASS " : "FAIL ", acc ? acc : "");
    }
    sp_model_free(m);
}

/* a broken copy of the fixture: generate must fail with an error holding `says`, not crash */
static void bad_case(fx *f, const char *skip, const char *bad, const char *extra, const char *says) {
    char dir[400], flags[600], msg[4096];
    snprintf(dir, sizeof dir, "%s/bad", ROOT);
    CHECK(fx_write(f, dir, skip, bad, extra) == 0, "write");
    snprintf(flags, sizeof flags, "-md %s", dir);
    int32_t out[64];
    int rc = gen_tokens(flags, out, 64, NULL, NULL, msg, sizeof msg);
    CHECK(rc < 0 && strstr(msg, says), "expected an error naming \"%s\": %s", says, msg);
    CHECK(LAST_RC == 1 || LAST_RC == 2, "exit status %d (a crash is not an error)", LAST_RC);
}

static void test_bad_checkpoints(void) {
    sp_model *m = fixture_load("llama");
    if (!m) { CHECK(0, "load"); return; }
    fx f;
    fx_cfg c = base_cfg(m, 1, 0);
    fx_make(&f, &c);
    bad_case(&f, "conf.b", NULL, NULL, "missing tensor conf.b");
    bad_case(&f, "bb.1.q", NULL, NULL, "missing tensor bb.1.q");
    bad_case(&f, NULL, "out_proj", NULL, "tensor out_proj has shape [16, 33], expected [16, 32]");
    bad_case(&f, NULL, "W_c", NULL, "tensor W_c has shape");
    f.c.H = 64;
    bad_case(&f, NULL, NULL, NULL, "hiddenSize 64 / vocabSize 32000 must equal the target's (32 / 32000)");
    f.c.H = 32;
    f.c.taps[2] = 5;
    bad_case(&f, NULL, NULL, NULL, "tapLayers[2] = 5 outside 0..4");
    f.c.taps[2] = 4, f.c.taps[1] = 0;
    bad_case(&f, NULL, NULL, NULL, "strictly increasing");
    f.c.taps[1] = 3;
    fx_free(&f);
    /* bad json: the variant, the seqHead */
    char dir[400], p[1000], msg[4096];
    snprintf(dir, sizeof dir, "%s/badj", ROOT);
    fx_make(&f, &c);
    CHECK(fx_write(&f, dir, NULL, NULL, NULL) == 0, "write");
    fx_free(&f);
    char flags[600];
    snprintf(flags, sizeof flags, "-md %s", dir);
    int32_t out[64];
    snprintf(p, sizeof p, "mv %s/model.safetensors %s/m.bin", dir, dir);
    CHECK(system(p) == 0, "mv");
    CHECK(gen_tokens(flags, out, 64, NULL, NULL, msg, sizeof msg) < 0 && strstr(msg, "no model.safetensors"),
          "no tensors: %s", msg);
    snprintf(p, sizeof p, "mv %s/m.bin %s/model.safetensors", dir, dir);
    CHECK(system(p) == 0, "mv");
    snprintf(p, sizeof p, "sed -i 's/\"variant\": \"dspark\"/\"variant\": \"dspark2\"/' %s/dspark.json", dir);
    CHECK(system(p) == 0, "sed");
    CHECK(gen_tokens(flags, out, 64, NULL, NULL, msg, sizeof msg) < 0 && strstr(msg, "\"variant\" \"dspark2\""),
          "bad variant: %s", msg);
    snprintf(p, sizeof p, "sed -i 's/\"variant\": \"dspark2\"/\"variant\": \"dspark\"/; s/\"tapLayers\"/\"seqHead\": "
             "\"lstm\", \"tapLayers\"/' %s/dspark.json", dir);
    CHECK(system(p) == 0, "sed");
    CHECK(gen_tokens(flags, out, 64, NULL, NULL, msg, sizeof msg) < 0 && strstr(msg, "config.seqHead"),
          "bad seqHead: %s", msg);
    sp_model_free(m);
}

/* new-drafter --layout mlx-bun writes what this runtime loads: greedy output stays the plain one */
static void test_new_drafter_runs(void) {
    if (!plain_ref()) return;
    const char *arch[2] = {"dspark", "dflash"};
    for (int k = 0; k < 2; k++) {
        char dir[400], msg[2048], flags[600];
        snprintf(dir, sizeof dir, "%s/nd_%s", ROOT, arch[k]);
        int rc = harness_runf(msg, sizeof msg, "%s new-drafter --arch %s --layout mlx-bun -m %s --seed 3 --set dDraft=16 "
                              "--set nHeads=4 --set markovRank=8 --set gamma=4 --set nLayers=2 -o '%s' 2>&1",
                              BIN, arch[k], TGT, dir);
        CHECK(rc == 0, "new-drafter: %s", msg);
        snprintf(flags, sizeof flags, "--spec %s -md %s --draft-max 4", arch[k], dir);
        int32_t out[64];
        int dr = 0, n = gen_tokens(flags, out, 64, &dr, NULL, msg, sizeof msg);
        CHECK(n == 40 && !memcmp(out, PLAIN, sizeof(int32_t) * 40), "%s: output differs from plain: %s", arch[k], msg);
        CHECK(dr > 0, "%s: nothing drafted", arch[k]);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    server_bin(BIN, sizeof BIN, argv[0]);
    snprintf(ROOT, sizeof ROOT, "/tmp/specula_mlxbun_run_%d", (int)getpid());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", ROOT);
    if (system(cmd) != 0) return 1;
    RUN(test_reference_forward);
    RUN(test_generate_identity);
    RUN(test_server_identity);
    RUN(test_audit);
    RUN(test_bad_checkpoints);
    RUN(test_new_drafter_runs);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ROOT);
    if (!getenv("SPECULA_KEEP_FIXTURES") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", ROOT);
    return harness_done("test_mlxbun_run");
}
