/* test_train_infer.c — the training forward (src/train/drafter_net.c) computes what the inference
 * drafter (src/drafters/dflash.c) computes, for the same weights: a drafter with random weights
 * (rounded to bf16, as the checkpoint stores them) is saved by sp_tr_checkpoint_save with the
 * config sp_tr_drafter_dims writes, loaded by sp_drafter_dflash, begun on a prompt and asked for one
 * block at temperature 1 (so it returns its q rows); the training forward runs on the batch
 * element of the same anchor (context = the prompt's taps, block [pending, M, …], Markov
 * previous tokens = the drafts the inference path drew) and its softmax(Z) and confidence
 * logits must equal the inference q and confidence logits. Covers the vanilla, gated and rnn
 * Markov heads, the Llama-3 drafter (q/k norm, llama3 RoPE), Gemma-4 (soft-cap, scale 1) and
 * z-lab DFlash, on the tiny fixture targets of tests/data/ref-logits. A negative control (other
 * previous tokens) shows the comparison sees the Markov path. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "drafters/dflash.h"
#include "harness.h"
#include "model/model.h"
#include "decode/drafter.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

static char root[256];

typedef struct {
    float z[64];
    int n;
} conf_rec;

static void on_round(void *ctx, const float *z, int n, int n_acc) {
    conf_rec *c = ctx;
    (void)n_acc;
    c->n = n < 64 ? n : 64;
    memcpy(c->z, z, sizeof(float) * (size_t)c->n);
}

/* max |log q_inf − log softmax(Z_train)| over the rows compared (q rows qrow0.., Z rows zrow0..) */
static double max_logp_diff(const float *q, const float *Z, int rows, int V) {
    double worst = 0;
    for (int t = 0; t < rows; t++) {
        const float *z = Z + (size_t)t * V, *p = q + (size_t)t * V;
        double mx = -1e300, se = 0;
        for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        for (int v = 0; v < V; v++) se += exp(z[v] - mx);
        for (int v = 0; v < V; v++) {
            double lt = z[v] - mx - log(se), li = log(p[v] > 1e-38f ? p[v] : 1e-38f);
            if (lt < -60) continue; /* beyond float's reach in q */
            worst = fmax(worst, fabs(lt - li));
        }
    }
    return worst;
}

static void check_case(const char *target_dir, const char *name, tr_arch arch, tr_markov_type markov) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    CHECK(sp_model_load(&m, target_dir, 1, &err) == 0, "%s", err.msg);
    if (!m) return;
    const sp_config *tc = sp_model_config(m);
    int V = tc->vocab_size, H = tc->hidden_size, taps[2] = {0, 2}, nt = 2;
    tr_train_cfg c = sp_tr_train_defaults();
    c.arch = arch;
    c.model_dir = target_dir;
    c.block = 4;
    c.layers = 2;
    c.markov_rank = 8;
    c.markov_head = markov;
    tr_dims d;
    char *cfg = NULL;
    CHECK(sp_tr_drafter_dims(&c, m, nt, taps, &d, &cfg, &err) == 0, "%s: %s", name, err.msg);
    if (!cfg) { sp_model_free(m); return; }
    /* weights: larger than the init so every path carries signal, norms near 1, then bf16 */
    tr_model mod;
    CHECK(sp_tr_model_init(&mod, &d, 3, &err) == 0, "%s", err.msg);
    harness_fill(mod.w, mod.n, 0.3f, 17);
    for (int i = 0; i < mod.n_params; i++) {
        const tr_param *p = &mod.params[i];
        int norm = strstr(p->name, "norm.weight") != NULL, scalar = strstr(p->name, "layer_scalar") != NULL;
        for (size_t j = 0; j < p->n; j++) {
            float *w = &mod.w[p->off + j];
            if (norm) *w += 1.0f;
            if (scalar) *w = 1.0f;
            *w = sp_bf16_to_f32(sp_f32_to_bf16(*w));
        }
    }
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    float *zeros = calloc(mod.n, sizeof(float));
    CHECK(sp_tr_checkpoint_save(dir, &mod, zeros, zeros, 0, "test", cfg, "{}\n", &err) == 0, "%s", err.msg);
    free(zeros);
    free(cfg);

    /* inference: begin on the prompt, one proposal of B (DSpark) / B-1 (z-lab) drafts */
    enum { NP = 11 };
    int32_t prompt[NP] = {1, 5493, 20509, 14029, 25386, 7076, 1488, 12897, 20346, 19520, 10172};
    int C = NP - 1, B = d.B, zlab = arch == TR_ARCH_DFLASH_ZLAB;
    sp_sample_params sp = sp_sample_params_default();
    sp.temperature = 1.0f;
    sp_dflash_opts o = sp_dflash_opts_default();
    conf_rec cr = {{0}, 0};
    o.on_round = on_round;
    o.on_round_ctx = &cr;
    sp_drafter *dr = sp_drafter_dflash(dir, m, &sp, &o, &err);
    CHECK(dr != NULL, "%s: the inference path refused the checkpoint: %s", name, err.msg);
    float *tap = malloc(sizeof(float) * (size_t)C * nt * H), *q = malloc(sizeof(float) * (size_t)B * V);
    sp_kv *kv = sp_kv_create(m, 64, 64, &err);
    sp_forward_out fo = {.tap_layers = taps, .n_taps = nt, .taps = tap};
    CHECK(kv && sp_model_forward(m, kv, prompt, C, &fo, &err) == 0, "%s", err.msg);
    int32_t drafts[16] = {0};
    int g = 0;
    if (dr) {
        sp_drafter_ctx ctx = {.target = m, .target_kv = kv, .seed = 5};
        CHECK(dr->begin(dr, prompt, NP, tap, NULL, &ctx, &err) == 0, "%s", err.msg);
        g = dr->propose(dr, zlab ? B - 1 : B, drafts, q, &err);
        CHECK(g == (zlab ? B - 1 : B), "%s: %d drafts (%s)", name, g, err.msg);
        CHECK(dr->commit(dr, 0, drafts[0], tap, NULL, &err) == 0, "%s", err.msg);
        CHECK(!d.conf || cr.n == g, "%s: %d confidences for %d drafts", name, cr.n, g);
    }

    /* training: the batch element of anchor p = NP-1 (context = its taps, nothing padded) */
    tr_batch b;
    CHECK(sp_tr_batch_alloc(&b, 1, C, B, V, H, nt * H, 1, &err) == 0, "%s", err.msg);
    memcpy(b.F, tap, sizeof(float) * (size_t)C * nt * H);
    memset(b.kmask, 1, (size_t)(C + B));
    for (int k = 0; k < B; k++) {
        sp_model_embed(m, b.x0 + (size_t)k * H, k == 0 ? prompt[NP - 1] : d.mask_id);
        b.prev[k] = k == 0 ? prompt[NP - 1] : drafts[k - 1]; /* the tokens the inference heads saw */
        b.labels[k] = (k * 7 + 3) % V;
        b.wt[k] = 1;
        for (int v = 0; v < V; v++) b.P[(size_t)k * V + v] = 1.0f / V;
    }
    float *Wlm = malloc(sizeof(float) * (size_t)V * H);
    sp_to_f32(Wlm, sp_model_lm_head(m)->data, sp_model_lm_head(m)->dt, (size_t)V * H);
    tr_acts *a = sp_tr_acts_create(&d, 1, C, &err);
    CHECK(a != NULL, "%s", err.msg);
    if (a && g > 0) {
        tr_stats st;
        sp_tr_forward(NULL, &mod, a, &b, Wlm, B + 1e-6, &st, NULL);
        const float *Z = sp_tr_acts_logits(a) + (zlab ? V : 0); /* z-lab: slot t predicts draft t */
        double dl = max_logp_diff(q, Z, g, V), dc = 0;
        for (int j = 0; d.conf && j < g; j++) dc = fmax(dc, fabs(sp_tr_acts_conf(a)[j] - cr.z[j]));
        /* negative control: other previous tokens for slots 1.. (the Markov path must show) */
        double dneg = 0;
        if (d.r > 0) {
            for (int k = 1; k < B; k++) b.prev[k] = (b.prev[k] + 1 + k) % V;
            sp_tr_forward(NULL, &mod, a, &b, Wlm, B + 1e-6, &st, NULL);
            dneg = max_logp_diff(q + V, sp_tr_acts_logits(a) + V, g - 1, V);
        }
        printf("  %-18s max |log q_infer - log q_train| %.2e, confidence logits %.2e, other prev %.2e\n", name, dl,
               dc, dneg);
        CHECK(dl < 2e-4, "%s: training log-probs differ from the inference path by %g", name, dl);
        CHECK(dc < 2e-4, "%s: confidence logits differ by %g", name, dc);
        CHECK(d.r == 0 || dneg > 0.05, "%s: the comparison does not see the Markov head (%g)", name, dneg);
    }
    sp_tr_acts_free(a);
    sp_tr_batch_free(&b);
    free(Wlm);
    free(tap);
    free(q);
    sp_kv_free(kv);
    sp_drafter_free(dr);
    sp_tr_model_free(&mod);
    sp_model_free(m);
}

#define Q3 "tests/data/ref-logits/qwen3"
#define LL "tests/data/ref-logits/llama"
#define G4 "tests/data/ref-logits/gemma4"
static void test_qwen3_vanilla(void) { check_case(Q3, "qwen3-vanilla", TR_ARCH_DSPARK, TR_MARKOV_VANILLA); }
static void test_qwen3_gated(void) { check_case(Q3, "qwen3-gated", TR_ARCH_DSPARK, TR_MARKOV_GATED); }
static void test_qwen3_rnn(void) { check_case(Q3, "qwen3-rnn", TR_ARCH_DSPARK, TR_MARKOV_RNN); }
static void test_llama_gated(void) { check_case(LL, "llama-gated", TR_ARCH_DSPARK, TR_MARKOV_GATED); }
static void test_llama_rnn(void) { check_case(LL, "llama-rnn", TR_ARCH_DSPARK, TR_MARKOV_RNN); }
static void test_llama_dflash(void) { check_case(LL, "llama-dflash", TR_ARCH_DFLASH, TR_MARKOV_VANILLA); }
static void test_llama_zlab(void) { check_case(LL, "llama-dflash-zlab", TR_ARCH_DFLASH_ZLAB, TR_MARKOV_VANILLA); }
static void test_gemma_rnn(void) { check_case(G4, "gemma4-rnn", TR_ARCH_DSPARK, TR_MARKOV_RNN); }
static void test_gemma_gated(void) { check_case(G4, "gemma4-gated", TR_ARCH_DSPARK, TR_MARKOV_GATED); }

int main(void) {
    snprintf(root, sizeof root, "/tmp/specula_test_train_infer_%d", (int)getpid());
    RUN(test_qwen3_vanilla);
    RUN(test_qwen3_gated);
    RUN(test_qwen3_rnn);
    RUN(test_llama_gated);
    RUN(test_llama_rnn);
    RUN(test_llama_dflash);
    RUN(test_llama_zlab);
    RUN(test_gemma_rnn);
    RUN(test_gemma_gated);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_infer");
}
