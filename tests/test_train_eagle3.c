/* test_train_eagle3.c — EAGLE-3 training (src/train/eagle3_train.c and its kind in trainer.c).
 *
 * - gradients: every parameter tensor of the training-time-test step (K steps over windows with
 *   padded rows and unweighted row-steps) against central finite differences of the loss;
 * - end to end on the toy corpus (tests/train_harness.h) with an 8-layer tiny qwen3 target whose
 *   shards regen wrote with --taps eagle3: held-out τ rises, the checkpoint carries d2t / t2d from
 *   the corpus counts, and the INFERENCE drafter (drafters/eagle3.c) loads it, accepts drafts and
 *   keeps greedy output identical to plain decoding;
 * - resume: a run stopped after a checkpoint (no final save, as a kill leaves it) and resumed
 *   ends with the same weights, bit for bit, as an uninterrupted run. */
#include <stdlib.h>
#include <string.h>

#include "drafters/eagle3.h"
#include "formats/safetensors.h"
#include "model/model.h" /* the target's embedding and LM head tables */
#include "train/checkpoint.h"
#include "train/eagle3_train.h"
#include "train_harness.h"

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static tr_dims tiny_dims(void) {
    tr_dims d = {.arch = TR_ARCH_EAGLE3, .H = 8, .NH = 2, .KVH = 1, .D = 4, .I = 12, .L = 1, .V = 20, .m = 3, .B = 3,
                 .eps = 1e-6, .Vd = 11};
    d.rope.type = SP_ROPE_DEFAULT;
    d.rope.theta = 10000;
    d.rope.factor = 1;
    d.rope.partial_rotary_factor = 1;
    return d;
}

static void test_gradients(void) {
    tr_dims d = tiny_dims();
    int S = 5, NW = 2, K = d.B, T = NW * S, H = d.H, Vd = d.Vd;
    sp_err err = {{0}};
    float *Wlm = malloc(sizeof(float) * d.V * H);
    int32_t d2t[11];
    for (int i = 0; i < Vd; i++) d2t[i] = 2 * i % d.V;
    harness_fill(Wlm, (size_t)d.V * H, 1.0f, 5);
    tr_model m;
    if (sp_tr_e3_model_init(&m, &d, 7, Wlm, d2t, &err)) { CHECK(0, "%s", err.msg); free(Wlm); return; }
    harness_fill(m.w, m.n, 0.4f, 3); /* larger than the init: every path carries signal */
    for (int i = 0; i < m.n_params; i++)
        if (m.params[i].ndim == 1)
            for (size_t j = 0; j < m.params[i].n; j++) m.w[m.params[i].off + j] += 1.0f;
    tr_e3_batch b;
    CHECK(sp_tr_e3_batch_alloc(&b, NW, S, K, H, 3 * H, Vd, &err) == 0, "%s", err.msg);
    tr_e3_acts *a = sp_tr_e3_acts_create(&d, NW, S, &err);
    CHECK(a, "%s", err.msg);
    if (!a) { sp_tr_model_free(&m); free(Wlm); return; }
    b.NW = NW;
    harness_fill(b.F, (size_t)T * 3 * H, 1.5f, 11);
    harness_fill(b.x0, (size_t)K * T * H, 1.0f, 12);
    float *z = malloc(sizeof(float) * Vd);
    for (int k = 0; k < K; k++)
        for (int t = 0; t < T; t++) {
            size_t kt = (size_t)k * T + t;
            harness_fill(z, (size_t)Vd, 3.0f, 100 + (unsigned)kt);
            double s = 0;
            for (int j = 0; j < Vd; j++) s += b.P[kt * Vd + j] = expf(z[j]);
            for (int j = 0; j < Vd; j++) b.P[kt * Vd + j] = (float)(b.P[kt * Vd + j] / s);
            b.mass[kt] = 0.7f;
            /* the second window's last row is padding; some row-steps are not evaluated */
            b.wt[kt] = (t == T - 1 || (t + k) % 4 == 3) ? 0.0f : powf(0.8f, (float)k);
        }
    free(z);
    double denom = 1e-6;
    for (int i = 0; i < K * T; i++) denom += b.wt[i];
    tr_stats st;
    float cs[3 * 10];
    sp_tr_e3_forward(NULL, &m, a, &b, denom, &st, cs);
    CHECK(isfinite(st.loss) && st.loss > 0, "loss %g", st.loss);
    for (int i = 0; i < K * T; i++) CHECK(cs[i] >= 0 && cs[i] <= 0.7f + 1e-5, "c* %g outside [0, mass]", cs[i]);
    float *grad = calloc(m.n, sizeof(float));
    sp_tr_e3_backward(NULL, &m, a, &b, denom, grad);
    double gmax = 0;
    for (size_t i = 0; i < m.n; i++) gmax = fmax(gmax, fabs(grad[i]));
    CHECK(gmax > 0, "all-zero gradient");
    int bad = 0, checked = 0;
    for (int pi = 0; pi < m.n_params; pi++) {
        const tr_param *p = &m.params[pi];
        int nz = 0;
        for (int s = 0; s < 12 && s < (int)p->n; s++) {
            size_t j = p->off + (p->n > 12 ? ((size_t)s * 7919u) % p->n : (size_t)s);
            float keep = m.w[j];
            double h = 1e-2;
            tr_stats sp, sm;
            m.w[j] = keep + (float)h;
            sp_tr_e3_forward(NULL, &m, a, &b, denom, &sp, NULL);
            m.w[j] = keep - (float)h;
            sp_tr_e3_forward(NULL, &m, a, &b, denom, &sm, NULL);
            m.w[j] = keep;
            double fd = (sp.loss - sm.loss) / (2 * h), an = grad[j];
            checked++;
            if (fabs(an) > 1e-3 * gmax) nz++;
            if (fabs(an - fd) > 2e-3 * gmax + 3e-2 * fabs(fd) && bad++ < 6)
                CHECK(0, "%s[%zu]: analytic %.6g vs finite difference %.6g", p->name, j - p->off, an, fd);
        }
        CHECK(nz > 0, "%s: no element with a non-negligible gradient", p->name);
    }
    CHECK(bad == 0, "%d of %d parameter elements off", bad, checked);
    free(grad);
    sp_tr_e3_acts_free(a);
    sp_tr_e3_batch_free(&b);
    sp_tr_model_free(&m);
    free(Wlm);
}

/* th_setup with EAGLE-3's taps (the target has 8 layers: outputs of 1, 3, 4) */
static void setup(void) {
    const char *sets[] = {"num_hidden_layers=8"};
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 1, .n_threads = 2, .sets = sets, .n_sets = 1};
    th_paths("test_train_eagle3", "");
    sp_err err = {{0}};
    CHECK(sp_newmodel_write(th_target, &o, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 12; i++) th_alpha[i] = 3 + (int)(sp_rng_u64(5, 0, (uint64_t)i) % 8000);
    char p1[400], p2[400];
    snprintf(p1, sizeof p1, "%s/train.jsonl", th_root);
    snprintf(p2, sizeof p2, "%s/held.jsonl", th_root);
    th_corpus(p1, 64, 1);
    th_corpus(p2, 12, 777);
    tr_regen_cfg c = {.model_dir = th_target, .data_path = p1, .out_dir = th_shards, .generate = 48, .threads = 2,
                      .n_taps = -1};
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    c.data_path = p2;
    c.out_dir = th_held;
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
}

static tr_train_cfg e3_cfg(char *out, size_t n, const char *name, long steps) {
    tr_train_cfg c = th_named_cfg(out, n, TR_ARCH_EAGLE3, name, steps);
    c.block = 3;     /* training-time-test steps */
    c.window = 16;
    c.draft_vocab = 64;
    c.batch = 4;
    c.lr = 3e-3;
    c.eval_blocks = 16;
    return c;
}

static void test_train_and_infer(void) {
    char dir[400];
    tr_train_cfg c = e3_cfg(dir, sizeof dir, "e3", TH_LEARN_STEPS(160));
    tr_train_result r;
    sp_err err = {{0}};
    CHECK(sp_tr_train_run(&c, &r, &err) == 0, "%s", err.msg);
    printf("  eagle3: held-out tau %.3f -> %.3f (max %d), a_k %.3f %.3f %.3f, loss %.3f -> %.3f, %.0f tok/s\n",
           r.tau_first, r.tau_last, c.block + 1, r.a_last[0], r.a_last[1], r.a_last[2], r.loss_first, r.loss_last,
           r.tok_per_s);
    CHECK(!TH_LEARNING || (r.tau_last > r.tau_first + 0.5 && r.tau_last > 2.0), "tau %.3f -> %.3f", r.tau_first, r.tau_last);
    sp_config dc;
    if (th_drafter_config(dir, "eagle3", "\"LlamaForCausalLMEagle3\"", &dc)) return;
    /* the vocabulary map: every corpus letter is in the draft vocabulary */
    sp_model *m = NULL;
    CHECK(sp_model_load(&m, th_target, 2, &err) == 0, "%s", err.msg);
    if (!m) return;
    sp_sample_params greedy = sp_sample_params_default();
    sp_drafter *d = sp_drafter_eagle3(dir, m, &greedy, 4, &err);
    CHECK(d, "inference loader refused the trained drafter: %s", err.msg);
    sp_eagle3_info info;
    if (d && sp_eagle3_info_get(d, &info) == 0) {
        CHECK(info.draft_vocab == 64 && info.tap_layers[0] == 1 && info.tap_layers[1] == 3 && info.tap_layers[2] == 4,
              "draft vocab %d, taps %d %d %d", info.draft_vocab, info.tap_layers[0], info.tap_layers[1],
              info.tap_layers[2]);
        int found = 0;
        for (int a = 0; a < 12; a++)
            for (int i = 0; i < info.draft_vocab; i++) found += info.d2t[i] == th_alpha[a];
        CHECK(found == 12, "%d of the 12 corpus tokens in the draft vocabulary", found);
    }
    long drafted = 0, accepted = 0;
    unsigned s = 4242;
    for (int k = 0; d && k < 8; k++) {
        int32_t prompt[12], ref[40], out[40];
        int n = 0;
        prompt[n++] = 1;
        for (int j = 0; j < 4 + k % 6; j++) {
            s = s * 1103515245u + 12345u;
            prompt[n++] = th_alpha[(s >> 16) % 12];
        }
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = 40;
        gp.ignore_eos = 1;
        sp_gen_stats gs;
        CHECK(sp_generate(m, NULL, prompt, n, &gp, ref, 40, &gs, &err) == 0, "%s", err.msg);
        sp_spec_params sp = sp_spec_params_default();
        sp.gen = gp;
        sp.draft_max = 4;
        sp_spec_stats st;
        CHECK(sp_spec_generate(m, d, prompt, n, &sp, out, 40, &st, &err) == 0, "%s", err.msg);
        CHECK(st.emitted == gs.emitted && !memcmp(out, ref, sizeof(int32_t) * (size_t)gs.emitted),
              "speculative output differs from plain");
        drafted += st.drafted;
        accepted += st.accepted;
    }
    double rate = drafted ? (double)accepted / drafted : 0;
    printf("  eagle3 via the inference drafter: acceptance %.3f (%ld of %ld drafts), outputs identical\n", rate,
           accepted, drafted);
    CHECK(rate > 0.2 || !TH_LEARNING, "trained drafter accepts only %.3f at inference", rate);
    sp_drafter_free(d);
    sp_model_free(m);
}

/* the training forward is the inference drafter's: a random drafter (weights rounded to bf16, as
 * the checkpoint stores them) saved by sp_tr_checkpoint_save; the inference drafter proposes 3
 * sampled drafts from a prompt; the training window over the prompt followed by those drafts
 * gives, at its last prompt row, step k's q equal to the inference q of draft k+1 */
static void test_train_equals_inference(void) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    CHECK(sp_model_load(&m, th_target, 2, &err) == 0, "%s", err.msg);
    if (!m) return;
    const sp_config *tc = sp_model_config(m);
    int H = tc->hidden_size, V = tc->vocab_size, K = 3, taps[3] = {1, 3, 4};
    char dir[400];
    tr_train_cfg c = e3_cfg(dir, sizeof dir, "equal", 1);
    tr_dims d;
    char *cfg = NULL;
    CHECK(sp_tr_eagle3_dims(&c, m, 3, taps, &d, &cfg, &err) == 0, "%s", err.msg);
    float *Wlm = malloc(sizeof(float) * (size_t)V * H);
    int32_t *d2t = malloc(sizeof(int32_t) * (size_t)d.Vd);
    for (int r = 0; r < V; r++) sp_mat_row_f32(sp_model_lm_head(m), r, Wlm + (size_t)r * H);
    for (int i = 0; i < d.Vd; i++) d2t[i] = i < 12 ? th_alpha[i] : 8000 + i; /* th_alpha ids are >= 3, < 8003 */
    for (int i = 0; i < d.Vd; i++)
        for (int j = 0; j < i; j++) CHECK(d2t[i] != d2t[j], "d2t %d twice", d2t[i]);
    qsort(d2t, (size_t)d.Vd, sizeof *d2t, cmp_i32);
    tr_model tm;
    CHECK(sp_tr_e3_model_init(&tm, &d, 9, Wlm, d2t, &err) == 0, "%s", err.msg);
    harness_fill(tm.w, tm.n, 0.3f, 21);
    for (int i = 0; i < tm.n_params; i++)
        if (tm.params[i].ndim == 1)
            for (size_t j = 0; j < tm.params[i].n; j++) tm.w[tm.params[i].off + j] += 1.0f;
    for (size_t i = 0; i < tm.n; i++) tm.w[i] = sp_bf16_to_f32(sp_f32_to_bf16(tm.w[i]));
    tm.d2t = d2t;
    float *zeros = calloc(tm.n, sizeof(float));
    CHECK(sp_tr_checkpoint_save(dir, &tm, zeros, zeros, 0, "test", cfg, "{}\n", &err) == 0, "%s", err.msg);
    sp_sample_params hot = {1.0f, 0, 1.0f, 0.0f, 3};
    sp_drafter *dr = sp_drafter_eagle3(dir, m, &hot, K, &err);
    CHECK(dr, "%s", err.msg);
    enum { N = 10 };
    int32_t y[N + 3];
    for (int i = 0; i < N; i++) y[i] = th_alpha[(i * 5 + 1) % 12];
    float *tap = malloc(sizeof(float) * N * 3 * (size_t)H), *q = malloc(sizeof(float) * K * (size_t)V);
    sp_kv *kv = sp_kv_create(m, 64, 64, &err);
    sp_forward_out o = {.tap_layers = taps, .n_taps = 3, .taps = tap};
    sp_drafter_ctx ctx = {.target = m, .target_kv = kv, .seed = 5};
    int ok = dr && kv && sp_model_forward(m, kv, y, N - 1, &o, &err) == 0 &&
             dr->begin(dr, y, N, tap, NULL, &ctx, &err) == 0 && dr->propose(dr, K, y + N, q, &err) == K;
    CHECK(ok, "inference: %s", err.msg);
    tr_e3_batch b;
    tr_e3_acts *a = sp_tr_e3_acts_create(&d, 1, N - 1, &err);
    ok = ok && a && sp_tr_e3_batch_alloc(&b, 1, N - 1, K, H, 3 * H, d.Vd, &err) == 0;
    if (ok) { /* one window: rows 0 .. N-2, step k's token at row i is y[i+1+k] */
        int S = N - 1;
        b.NW = 1;
        memcpy(b.F, tap, sizeof(float) * (size_t)S * 3 * H);
        memset(b.x0, 0, sizeof(float) * (size_t)K * S * H);
        memset(b.wt, 0, sizeof(float) * (size_t)K * S);
        memset(b.P, 0, sizeof(float) * (size_t)K * S * d.Vd);
        memset(b.mass, 0, sizeof(float) * (size_t)K * S);
        for (int k = 0; k < K; k++)
            for (int i = 0; i < S && i + 1 + k < N + K; i++)
                sp_mat_row_f32(sp_model_embed_table(m), y[i + 1 + k], b.x0 + ((size_t)k * S + i) * H);
        tr_stats st;
        sp_tr_e3_forward(NULL, &tm, a, &b, 1.0, &st, NULL);
        const float *pr = sp_tr_e3_acts_probs(a);
        double worst = 0, out_mass = 0;
        for (int k = 0; k < K; k++) {
            const float *pt = pr + ((size_t)k * S + (S - 1)) * d.Vd, *qi = q + (size_t)k * V;
            double in = 0;
            for (int j = 0; j < d.Vd; j++) {
                worst = fmax(worst, fabs((double)pt[j] - qi[d2t[j]]));
                in += qi[d2t[j]];
            }
            out_mass = fmax(out_mass, fabs(1 - in));
        }
        printf("  train vs inference q of 3 chained drafts: max |diff| %.2e\n", worst);
        CHECK(worst < 2e-4 && out_mass < 1e-4, "train / inference q differ by %.3g (mass outside %.3g)", worst,
              out_mass);
        sp_tr_e3_batch_free(&b);
    }
    sp_tr_e3_acts_free(a);
    sp_kv_free(kv);
    sp_drafter_free(dr);
    free(tap);
    free(q);
    free(zeros);
    sp_tr_model_free(&tm);
    free(Wlm);
    free(d2t);
    free(cfg);
    sp_model_free(m);
}

static void test_resume(void) {
    char d1[400], d2[400], p1[500], p2[500];
    tr_train_result r;
    sp_err err = {{0}};
    tr_train_cfg a = e3_cfg(d1, sizeof d1, "whole", 12);
    CHECK(sp_tr_train_run(&a, &r, &err) == 0, "%s", err.msg);
    tr_train_cfg b = e3_cfg(d2, sizeof d2, "killed", 12);
    b.save_every = 5;
    b.stop_after = 8; /* returns after step 8 with the step-5 checkpoint only */
    CHECK(sp_tr_train_run(&b, &r, &err) == 0 && r.step == 8, "%s (step %ld)", err.msg, r.step);
    b.stop_after = 0;
    b.resume = 1;
    CHECK(sp_tr_train_run(&b, &r, &err) == 0 && r.step == 12, "%s (step %ld)", err.msg, r.step);
    snprintf(p1, sizeof p1, "%s/optimizer.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/optimizer.safetensors", d2);
    CHECK(harness_same_file(p1, p2), "resumed optimizer state differs from the uninterrupted run's");
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/model.safetensors", d2);
    CHECK(harness_same_file(p1, p2), "resumed model.safetensors differs from the uninterrupted run's");
}

int main(void) {
    RUN(test_gradients);
    setup();
    RUN(test_train_equals_inference);
    RUN(test_train_and_infer);
    RUN(test_resume);
    th_remove_root();
    return harness_done("test_train_eagle3");
}
