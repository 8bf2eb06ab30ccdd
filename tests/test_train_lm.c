/* test_train_lm.c — target-LM training (src/train/lm*.c):
 *   - the target-only ops (causal + sliding-window attention, GeGLU, softcap): analytic gradients
 *     against central finite differences in double;
 *   - the whole model (both layer types, q/k/v norms, partial RoPE, sandwich norms, GeGLU,
 *     layer_scalar, tied embedding, softcap, ignored labels): every trained tensor's gradient
 *     against finite differences of the double forward, and the float backward against it;
 *   - the float training forward equals the inference engine: weights exported with sp_lm_export,
 *     loaded with sp_model_load, logits of sp_model_forward ≈ sp_lm_forward's (1e-5 relative);
 *   - the trainer: loss falls, an interrupted + resumed run ends bit-identical to an
 *     uninterrupted one (on a different thread count), the exported model loads. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/presets.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"
#include "train/lm.h"
#include "train/lm_train.h"
#include "train/ops.h"

static void fill_d(double *x, size_t n, double a, unsigned seed) {
    float *f = malloc(n * sizeof *f);
    harness_fill(f, n, (float)a, seed);
    for (size_t i = 0; i < n; i++) x[i] = f[i];
    free(f);
}

static double dot_d(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- ops ---------------------------------------------------------------------------------- */
static void check_attention(int window) {
    enum { NB = 2, T = 7, NH = 4, KVH = 2, D = 3 };
    size_t nq = NB * T * NH * D, nk = NB * T * KVH * D;
    double *q = malloc(nq * 8), *k = malloc(nk * 8), *v = malloc(nk * 8), *R = malloc(nq * 8);
    double *out = malloc(nq * 8), *att = malloc((size_t)NB * NH * T * T * 8), *dp = malloc(NB * NH * T * 8);
    double *dq = calloc(nq, 8), *dk = calloc(nk, 8), *dv = calloc(nk, 8);
    fill_d(q, nq, 1.0, 1);
    fill_d(k, nk, 1.0, 2);
    fill_d(v, nk, 1.0, 3);
    fill_d(R, nq, 1.0, 4);
    double scale = 0.7;
    tr_attn_shape sh = {.NB = NB, .Tq = T, .Tk = T, .NH = NH, .KVH = KVH, .D = D, .causal = 1, .window = window,
                        .scale = scale};
    sp_tr_attention_forward_f64(NULL, out, att, q, k, v, &sh);
    sp_tr_attention_backward_f64(NULL, dq, dk, dv, dp, R, q, k, v, att, &sh);
    /* masked probabilities are exactly zero, visible ones sum to 1 */
    for (int b = 0; b < NB; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double s = 0;
                for (int j = 0; j < T; j++) {
                    double p = att[(((size_t)b * NH + h) * T + i) * T + j];
                    int vis = j <= i && (window == 0 || j > i - window);
                    if (!vis) CHECK(p == 0, "att[%d,%d,%d,%d] = %g outside the window", b, h, i, j, p);
                    s += p;
                }
                CHECK(fabs(s - 1) < 1e-12, "row sum %g", s);
            }
    double *arrs[3] = {q, k, v}, *grads[3] = {dq, dk, dv};
    size_t ns[3] = {nq, nk, nk};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < ns[a]; i++) {
            double x0 = arrs[a][i], h = 1e-6;
            arrs[a][i] = x0 + h;
            sp_tr_attention_forward_f64(NULL, out, att, q, k, v, &sh);
            double lp = dot_d(out, R, nq);
            arrs[a][i] = x0 - h;
            sp_tr_attention_forward_f64(NULL, out, att, q, k, v, &sh);
            double lm = dot_d(out, R, nq);
            arrs[a][i] = x0;
            double fd = (lp - lm) / (2 * h);
            CHECK(fabs(fd - grads[a][i]) < 1e-7 * (1 + fabs(fd)), "window %d array %d [%zu]: fd %.10g an %.10g", window,
                  a, i, fd, grads[a][i]);
        }
    /* float twin (threaded) agrees with double */
    float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4), *of = malloc(nq * 4);
    float *af = malloc((size_t)NB * NH * T * T * 4);
    for (size_t i = 0; i < nq; i++) qf[i] = (float)q[i];
    for (size_t i = 0; i < nk; i++) kf[i] = (float)k[i], vf[i] = (float)v[i];
    sp_tr_attention_forward_f64(NULL, out, att, q, k, v, &sh);
    sp_pool *pool = sp_pool_create(2);
    sp_tr_attention_forward(pool, of, af, qf, kf, vf, &sh);
    sp_pool_free(pool);
    for (size_t i = 0; i < nq; i++) CHECK(fabs(of[i] - out[i]) < 1e-5, "float out[%zu] %g vs %g", i, of[i], out[i]);
    free(qf), free(kf), free(vf), free(of), free(af);
    free(q), free(k), free(v), free(R), free(out), free(att), free(dp), free(dq), free(dk), free(dv);
}

static void test_attention_causal(void) { check_attention(0); }
static void test_attention_sliding(void) { check_attention(3); }

static void test_geglu_softcap(void) {
    enum { N = 40 };
    double g[N], u[N], R[N], dg[N] = {0}, du[N] = {0}, dx[N] = {0}, y[N];
    fill_d(g, N, 3.0, 5);
    fill_d(u, N, 2.0, 6);
    fill_d(R, N, 1.0, 7);
    sp_tr_geglu_backward_f64(dg, du, R, g, u, N);
    for (int i = 0; i < N; i++) {
        double h = 1e-6, o1, o2, g0 = g[i], u0 = u[i];
        g[i] = g0 + h; sp_tr_geglu_forward_f64(&o1, &g[i], &u[i], 1);
        g[i] = g0 - h; sp_tr_geglu_forward_f64(&o2, &g[i], &u[i], 1);
        g[i] = g0;
        double fd = R[i] * (o1 - o2) / (2 * h);
        CHECK(fabs(fd - dg[i]) < 1e-7 * (1 + fabs(fd)), "geglu dgate[%d]: fd %g an %g", i, fd, dg[i]);
        u[i] = u0 + h; sp_tr_geglu_forward_f64(&o1, &g[i], &u[i], 1);
        u[i] = u0 - h; sp_tr_geglu_forward_f64(&o2, &g[i], &u[i], 1);
        u[i] = u0;
        fd = R[i] * (o1 - o2) / (2 * h);
        CHECK(fabs(fd - du[i]) < 1e-7 * (1 + fabs(fd)), "geglu dup[%d]: fd %g an %g", i, fd, du[i]);
    }
    /* float GeGLU equals the inference kernel bit for bit */
    float gf[N], uf[N], a[N], b[N];
    for (int i = 0; i < N; i++) gf[i] = (float)g[i], uf[i] = (float)u[i];
    sp_tr_geglu_forward(a, gf, uf, N);
    sp_gelu_tanh_mul(b, gf, uf, N);
    for (int i = 0; i < N; i++) CHECK(a[i] == b[i], "geglu float [%d] %.9g vs kernel %.9g", i, a[i], b[i]);
    /* softcap */
    double c = 2.5, x[N];
    fill_d(x, N, 6.0, 8);
    sp_tr_softcap_forward_f64(y, x, N, c);
    sp_tr_softcap_backward_f64(dx, R, y, N, c);
    for (int i = 0; i < N; i++) {
        double h = 1e-6, y1, y2, x0 = x[i];
        x[i] = x0 + h; sp_tr_softcap_forward_f64(&y1, &x[i], 1, c);
        x[i] = x0 - h; sp_tr_softcap_forward_f64(&y2, &x[i], 1, c);
        x[i] = x0;
        double fd = R[i] * (y1 - y2) / (2 * h);
        CHECK(fabs(fd - dx[i]) < 1e-7 * (1 + fabs(fd)), "softcap dx[%d]: fd %g an %g", i, fd, dx[i]);
    }
}

/* ---- the model ---------------------------------------------------------------------------- */
/* a tiny Gemma-4 text config: layers S,S,F (window 3), D 8 / global D 16 (partial RoPE 0.25) */
static char *tiny_config(int H, int V, double softcap) {
    char sh[32], sv[32], si[32], sc[48];
    snprintf(sh, sizeof sh, "hidden_size=%d", H);
    snprintf(sv, sizeof sv, "vocab_size=%d", V);
    snprintf(si, sizeof si, "intermediate_size=%d", H * 3 / 2);
    snprintf(sc, sizeof sc, "final_logit_softcapping=%g", softcap);
    const char *sets[] = {"hidden_size_per_layer_input=0", "num_kv_shared_layers=0", "attention_k_eq_v=false",
                          "use_double_wide_mlp=false", "num_hidden_layers=3", "sliding_window=3",
                          "num_attention_heads=4", "num_key_value_heads=2", "head_dim=8", "global_head_dim=16",
                          sh, sv, si, sc};
    sp_err err;
    char *s = sp_preset_config_json("gemma4", "tiny", "float32", sets, (int)(sizeof sets / sizeof sets[0]), &err);
    CHECK(s != NULL, "%s", err.msg);
    return s;
}

static int tiny_layout(lm_layout *lay, const char *json, sp_dtype dt) {
    sp_config cfg;
    sp_err err;
    int ok = sp_config_parse(&cfg, json, "tiny", &err) == 0 && sp_lm_layout_init(lay, &cfg, dt, &err) == 0;
    CHECK(ok, "%s", err.msg);
    return ok ? 0 : -1;
}

/* weights with signal on every path: matrices U(±0.4), norms 1 ± 0.2, layer_scalar in (0.5, 1) */
static void random_weights(const lm_layout *lay, float *w, unsigned seed) {
    harness_fill(w, lay->n, 0.4f, seed);
    for (int i = 0; i < lay->n_params; i++) {
        const hf_tensor_spec *s = &lay->specs[i];
        float *p = w + lay->off[i];
        if (s->init == HF_INIT_NORM) p[0] += 1.0f;
        if (s->init == HF_INIT_NORM)
            for (int64_t j = 1; j < s->shape[0]; j++) p[j] = 1.0f + 0.5f * p[j];
        if (s->init == HF_INIT_SCALAR) p[0] = 0.75f + 0.5f * p[0];
    }
}

static void test_model_gradients(void) {
    char *json = tiny_config(16, 29, 3.0);
    lm_layout lay;
    if (!json || tiny_layout(&lay, json, SP_DT_F32)) { free(json); return; }
    enum { NB = 2, T = 6 };
    sp_err err;
    float *wf = malloc(lay.n * 4), *gf = calloc(lay.n, 4);
    double *w = malloc(lay.n * 8), *g = calloc(lay.n, 8);
    random_weights(&lay, wf, 11);
    for (size_t i = 0; i < lay.n; i++) w[i] = wf[i];
    int32_t tok[NB * T], lab[NB * T];
    for (int i = 0; i < NB * T; i++) {
        tok[i] = (i * 7 + 3) % 29;
        lab[i] = i % 5 == 4 ? -1 : (i * 11 + 5) % 29; /* some positions not scored */
    }
    lm_acts_f64 *a = sp_lm_acts_create_f64(&lay, NB, T, &err);
    lm_acts *af = sp_lm_acts_create(&lay, NB, T, &err);
    CHECK(a && af, "%s", err.msg);
    if (!a || !af) return;
    double L0 = sp_lm_forward_f64(NULL, &lay, w, a, tok, lab, NB, T, NULL);
    CHECK(L0 > 0 && isfinite(L0), "loss %g", L0);
    sp_lm_backward_f64(NULL, &lay, w, a, g);
    sp_pool *pool = sp_pool_create(2);
    double Lf = sp_lm_forward(pool, &lay, wf, af, tok, lab, NB, T, NULL);
    sp_lm_backward(pool, &lay, wf, af, gf);
    CHECK(fabs(Lf - L0) < 1e-5 * L0, "float loss %.9g vs double %.9g", Lf, L0);
    int checked = 0;
    for (int p = 0; p < lay.n_params; p++) {
        const hf_tensor_spec *s = &lay.specs[p];
        size_t n = (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1), off = lay.off[p];
        double gmax = 0;
        for (size_t j = 0; j < n; j++) gmax = fmax(gmax, fabs(g[off + j]));
        if (!sp_lm_param_trained(&lay, p)) {
            CHECK(gmax == 0, "%s is frozen but got gradient %g", s->name, gmax);
            continue;
        }
        CHECK(gmax > 0, "%s: zero gradient", s->name);
        /* embedding: the rows of used tokens (input and head) and one unused row (head only) */
        for (int c = 0; c < 6; c++) {
            size_t j = (size_t)((c * 2654435761u + p * 40503u) % n);
            if (s->init == HF_INIT_EMBED && c < 3) j = (size_t)tok[c * 3] * s->shape[1] + (size_t)c;
            double x0 = w[off + j], h = 1e-5;
            w[off + j] = x0 + h;
            double lp = sp_lm_forward_f64(NULL, &lay, w, a, tok, lab, NB, T, NULL);
            w[off + j] = x0 - h;
            double lm = sp_lm_forward_f64(NULL, &lay, w, a, tok, lab, NB, T, NULL);
            w[off + j] = x0;
            double fd = (lp - lm) / (2 * h), an = g[off + j];
            CHECK(fabs(fd - an) < 1e-6 * (gmax + fabs(fd)), "%s[%zu]: fd %.10g analytic %.10g", s->name, j, fd, an);
            double fl = gf[off + j];
            CHECK(fabs(fl - an) < 2e-3 * gmax + 1e-3 * fabs(an), "%s[%zu]: float %.6g double %.6g", s->name, j, fl, an);
            checked++;
        }
    }
    CHECK(checked > 40, "only %d entries checked", checked);
    sp_pool_free(pool);
    sp_lm_acts_free_f64(a);
    sp_lm_acts_free(af);
    free(wf), free(gf), free(w), free(g);
    sp_lm_layout_free(&lay);
    free(json);
}

static void tmpdir(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/specula-test-trainlm-%d-%s", (int)getpid(), tag);
}

static void rm_rf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
}

/* the float training forward and the inference engine give the same logits */
static void test_forward_matches_inference(void) {
    char *json = tiny_config(64, 301, 30.0);
    lm_layout lay;
    if (!json || tiny_layout(&lay, json, SP_DT_F32)) { free(json); return; }
    enum { NB = 2, T = 11 };
    sp_err err = {0};
    float *w = malloc(lay.n * 4);
    sp_lm_init_weights(&lay, w, 5);
    float *noise = malloc(lay.n * 4);
    harness_fill(noise, lay.n, 0.1f, 9);
    for (int i = 0; i < lay.n_params; i++) /* norms away from 1, matrices larger than the init */
        for (size_t j = lay.off[i]; j < lay.off[i] + (size_t)lay.specs[i].shape[0] * (lay.specs[i].ndim == 2 ? lay.specs[i].shape[1] : 1); j++)
            w[j] = lay.specs[i].init == HF_INIT_SCALAR ? w[j] : lay.specs[i].init == HF_INIT_NORM ? 1 + 2 * noise[j] : w[j] * 4;
    int32_t tok[NB * T], lab[NB * T];
    for (int i = 0; i < NB * T; i++) tok[i] = (i * 37 + 2) % 301, lab[i] = 0;
    int V = 301;
    float *lg = malloc((size_t)NB * T * V * 4), *ref = malloc((size_t)T * V * 4);
    lm_acts *a = sp_lm_acts_create(&lay, NB, T, &err);
    sp_pool *pool = sp_pool_create(2);
    sp_lm_forward(pool, &lay, w, a, tok, lab, NB, T, lg);
    char dir[256];
    tmpdir(dir, sizeof dir, "match");
    int ok = sp_lm_export(dir, &lay, w, json, SP_DT_F32, NULL, &err) == 0;
    CHECK(ok, "%s", err.msg);
    sp_model *m = NULL;
    if (ok && sp_model_load(&m, dir, 2, &err)) CHECK(0, "%s", err.msg);
    for (int b = 0; m && b < NB; b++) {
        sp_kv *kv = sp_kv_create(m, 64, T, &err);
        sp_forward_out out = {.logits = ref};
        CHECK(kv && sp_model_forward(m, kv, tok + b * T, T, &out, &err) == 0, "%s", err.msg);
        double mx = 0, dmax = 0;
        for (size_t i = 0; i < (size_t)T * V; i++) {
            mx = fmax(mx, fabs(ref[i]));
            dmax = fmax(dmax, fabs(ref[i] - lg[(size_t)b * T * V + i]));
        }
        CHECK(mx > 1e-2, "logits too small to compare (%g)", mx);
        CHECK(dmax <= 1e-5 * mx, "sequence %d: max |train − inference| %g (max |logit| %g)", b, dmax, mx);
        sp_kv_free(kv);
    }
    sp_model_free(m);
    rm_rf(dir);
    sp_pool_free(pool);
    sp_lm_acts_free(a);
    free(w), free(noise), free(lg), free(ref);
    sp_lm_layout_free(&lay);
    free(json);
}

/* ---- the trainer -------------------------------------------------------------------------- */
static int write_text(const char *path, const char *s) {
    sp_err err;
    return sp_write_file_atomic(path, s, strlen(s), &err);
}

static int files_equal(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    sp_err err;
    if (sp_read_file(a, &x, &nx, &err)) return 0;
    if (sp_read_file(b, &y, &ny, &err)) { free(x); return 0; }
    int eq = nx == ny && !memcmp(x, y, nx);
    free(x), free(y);
    return eq;
}

static void test_trainer_resume(void) {
    char root[256], path[700], tokp[512], cfgp[512], da[512], db[512];
    tmpdir(root, sizeof root, "trainer");
    sp_err err = {0};
    CHECK(sp_mkdir_p(root, &err) == 0, "%s", err.msg);
    /* corpus: a repetitive program text, train and held-out files */
    char *text = malloc(40000);
    size_t n = 0;
    for (int i = 0; n < 30000; i++)
        n += (size_t)snprintf(text + n, 40000 - n, "def f%d(x):\n    return x * %d + %d\n\n", i % 13, i % 7, i % 5);
    snprintf(path, sizeof path, "%s/train.py", root);
    CHECK(write_text(path, text) == 0, "write");
    char evp[512];
    snprintf(evp, sizeof evp, "%s/held.py", root);
    CHECK(write_text(evp, text + 20000) == 0, "write");
    const char *texts[1] = {text};
    size_t lens[1] = {n};
    tok_train_opts to = {.vocab_size = 320, .char_coverage = 1.0, .max_token_chars = 8};
    snprintf(tokp, sizeof tokp, "%s/tokenizer.json", root);
    CHECK(sp_tok_train_bpe(texts, lens, 1, &to, tokp, &err) == 0, "%s", err.msg);
    char *json = tiny_config(32, 320, 30.0);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", root);
    CHECK(json && write_text(cfgp, json) == 0, "config");
    const char *data[] = {path}, *ev[] = {evp};
    lm_train_opts o;
    sp_lm_train_defaults(&o);
    o.config_path = cfgp;
    o.tokenizer_path = tokp;
    o.data = data;
    o.n_data = 1;
    o.eval = ev;
    o.n_eval = 1;
    o.steps = 12;
    o.batch = 3;
    o.seq = 16;
    o.warmup = 2;
    o.lr = 1e-2;
    o.save_every = 4;
    o.eval_seqs = 8;
    o.quiet = 1;
    o.dtype = SP_DT_F32;
    /* A: uninterrupted, 2 threads */
    snprintf(da, sizeof da, "%s/a", root);
    o.out_dir = da;
    o.n_threads = 2;
    lm_train_result ra, rb;
    CHECK(sp_lm_train_run(&o, &ra, &err) == 0, "%s", err.msg);
    CHECK(ra.step == 12 && ra.last_loss < ra.first_loss - 0.5, "loss %g -> %g", ra.first_loss, ra.last_loss);
    CHECK(ra.eval_ppl > 1 && ra.eval_ppl < 320, "held-out ppl %g", ra.eval_ppl);
    /* B: stops after step 6 (checkpoint), resumes on 1 thread */
    snprintf(db, sizeof db, "%s/b", root);
    o.out_dir = db;
    o.stop_after = 6;
    CHECK(sp_lm_train_run(&o, &rb, &err) == 0, "%s", err.msg);
    CHECK(rb.step == 6, "stopped at %d", rb.step);
    { /* as if the run had crashed after logging step 7 but before saving it */
        char lp[600];
        snprintf(lp, sizeof lp, "%s/train_log.csv", db);
        FILE *f = fopen(lp, "a");
        CHECK(f != NULL, "%s", lp);
        if (f) fputs("7,1.000000,0.01,0.5,100.0,,\n", f), fclose(f);
    }
    o.stop_after = 0;
    o.resume = 1;
    o.n_threads = 1;
    CHECK(sp_lm_train_run(&o, &rb, &err) == 0, "%s", err.msg);
    CHECK(rb.step == 12 && rb.last_loss == ra.last_loss, "resumed loss %.9g vs %.9g", rb.last_loss, ra.last_loss);
    const char *files[] = {"optimizer.safetensors", "model.safetensors", "config.json"};
    for (int i = 0; i < 3; i++) {
        char pa[600], pb[600];
        snprintf(pa, sizeof pa, "%s/%s", da, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", db, files[i]);
        CHECK(files_equal(pa, pb), "%s differs after resume", files[i]);
    }
    /* the logs agree on step and loss (throughput differs); no duplicated rows */
    char pa[600], pb[600], *la = NULL, *lb = NULL;
    size_t na, nb;
    snprintf(pa, sizeof pa, "%s/train_log.csv", da);
    snprintf(pb, sizeof pb, "%s/train_log.csv", db);
    CHECK(!sp_read_file(pa, &la, &na, &err) && !sp_read_file(pb, &lb, &nb, &err), "%s", err.msg);
    if (la && lb) {
        int rows = 0;
        for (char *x = la, *y = lb; x && y && *x && *y; rows++) {
            size_t kx = strcspn(x, ",\n"), ky = strcspn(y, ",\n");
            kx += strcspn(x + kx + 1, ",\n") + 1; /* step,loss */
            ky += strcspn(y + ky + 1, ",\n") + 1;
            CHECK(kx == ky && !memcmp(x, y, kx), "log row %d: %.*s vs %.*s", rows, (int)kx, x, (int)ky, y);
            x = strchr(x, '\n'), y = strchr(y, '\n');
            x = x ? x + 1 : NULL, y = y ? y + 1 : NULL;
        }
        CHECK(rows == 13, "%d log rows (header + 12 steps)", rows);
    }
    free(la), free(lb);
    { /* trainer_state.json: the step and the schedule of the checkpoint */
        char sp[600];
        snprintf(sp, sizeof sp, "%s/trainer_state.json", db);
        json_error_t je;
        json_t *j = json_load_file(sp, 0, &je);
        CHECK(j && json_integer_value(json_object_get(j, "step")) == 12 &&
                  json_integer_value(json_object_get(j, "warmup")) == 2 &&
                  json_integer_value(json_object_get(j, "seq")) == 16,
              "%s: %s", sp, j ? "wrong step / warmup / seq" : je.text);
        json_decref(j);
    }
    /* the exported model loads and runs */
    sp_model *m = NULL;
    if (sp_model_load(&m, da, 1, &err)) CHECK(0, "%s", err.msg);
    tok_tokenizer *tk = sp_tok_load_dir(da, &err);
    CHECK(tk != NULL, "%s", err.msg);
    sp_model_free(m);
    if (tk) sp_tok_free(tk);
    /* a mismatched resume is refused */
    o.seq = 8;
    err.msg[0] = 0;
    int rc = sp_lm_train_run(&o, &rb, &err);
    CHECK(rc != 0 && strstr(err.msg, "seq"), "resume with other seq: rc %d, %s", rc, err.msg);
    free(json);
    free(text);
    rm_rf(root);
}

static void test_refuses_unsupported(void) {
    const char *sets[] = {"num_kv_shared_layers=0", "attention_k_eq_v=false"}; /* PLE left on */
    sp_err err;
    char *s = sp_preset_config_json("gemma4", "tiny", "float32", sets, 2, &err);
    sp_config cfg;
    lm_layout lay;
    CHECK(s && sp_config_parse(&cfg, s, "x", &err) == 0, "%s", err.msg);
    CHECK(sp_lm_layout_init(&lay, &cfg, SP_DT_F32, &err) != 0 && strstr(err.msg, "per-layer"), "%s", err.msg);
    free(s);
}

int main(void) {
    RUN(test_attention_causal);
    RUN(test_attention_sliding);
    RUN(test_geglu_softcap);
    RUN(test_model_gradients);
    RUN(test_forward_matches_inference);
    RUN(test_trainer_resume);
    RUN(test_refuses_unsupported);
    return harness_done("test_train_lm");
}
