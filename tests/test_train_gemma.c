/* test_train_gemma.c — drafter training for Gemma-4 targets end to end (the pattern of
 * test_train_e2e.c): random tiny gemma4 targets (the preset as is: sliding window, KV sharing,
 * k_eq_v, PLE, soft-cap 30; and the issue-8 shape: no PLE / KV sharing / k_eq_v), regen a
 * repetitive corpus, train DSpark / DFlash drafters in the Gemma4DSparkModel layout, check that
 * held-out τ rises, and that sp_drafter_dflash loads the checkpoint and gives output identical
 * to plain decoding with real acceptance. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/safetensors.h"
#include "formats/newmodel.h"
#include "harness.h"
#include "train/regen.h"
#include "train/trainer.h"
#include "drafters/dflash.h"
#include "spec/spec.h"

static char root[256], target[300], shards[300], held[300];
static const char *plain_sets[] = {"hidden_size_per_layer_input=0", "num_kv_shared_layers=0",
                                   "attention_k_eq_v=false"};
static int alpha[12];

static void corpus(const char *path, int n, unsigned seed, const int *alpha) {
    FILE *f = fopen(path, "w");
    unsigned s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        int len = 4 + (int)((s >> 16) % 6);
        fprintf(f, "{\"ids\": [1");
        for (int j = 0; j < len; j++) {
            s = s * 1103515245u + 12345u;
            fprintf(f, ", %d", alpha[(s >> 16) % 12]);
        }
        fprintf(f, "], \"resp_start\": %d}\n", len + 1);
    }
    fclose(f);
}

/* variant 0: the tiny gemma4 preset as is; 1: without PLE / KV sharing / k_eq_v (issue 8) */
static void setup(int variant) {
    snprintf(root, sizeof root, "/tmp/specula_test_train_gemma_%d", (int)getpid());
    snprintf(target, sizeof target, "%s/target%d", root, variant);
    snprintf(shards, sizeof shards, "%s/shards%d", root, variant);
    snprintf(held, sizeof held, "%s/held%d", root, variant);
    sp_err err;
    newmodel_opts o = {.arch = "gemma4", .preset = "tiny", .seed = 1, .n_threads = 2,
                       .sets = variant ? plain_sets : NULL, .n_sets = variant ? 3 : 0};
    CHECK(newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 12; i++) alpha[i] = 3 + (int)(sp_rng_u64(5, 0, (uint64_t)i) % 8000);
    char p1[400], p2[400], cfg[400];
    snprintf(cfg, sizeof cfg, "%s/config.json", target);
    sp_config tc;
    CHECK(sp_config_load(&tc, cfg, &err) == 0 && tc.arch == SP_ARCH_GEMMA4 && tc.final_softcap == 30.0 &&
              (variant ? tc.ple_dim == 0 && tc.n_kv_shared == 0 && !tc.attention_k_eq_v
                       : tc.ple_dim > 0 && tc.n_kv_shared > 0 && tc.attention_k_eq_v),
          "target variant %d: not the gemma4 shape intended", variant);
    snprintf(p1, sizeof p1, "%s/train.jsonl", root);
    snprintf(p2, sizeof p2, "%s/held.jsonl", root);
    corpus(p1, 64, 1, alpha);
    corpus(p2, 12, 777, alpha);
    tr_regen_cfg c = {.model_dir = target, .data_path = p1, .out_dir = shards, .generate = 48, .threads = 2};
    CHECK(tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    c.data_path = p2;
    c.out_dir = held;
    CHECK(tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
}

static tr_train_cfg small_cfg(tr_arch arch, const char *out) {
    tr_train_cfg c = tr_train_defaults();
    c.arch = arch;
    c.model_dir = target;
    c.data_dir = shards;
    c.heldout_dir = held;
    c.out_dir = out;
    c.batch = 8;
    c.block = 4;
    c.layers = 1;
    c.markov_rank = 32;
    c.ctx = 32;
    c.lr = 3e-2; /* the sqrt(H)-scaled embedding dominates the residual stream at first: a higher rate */
    c.eval_blocks = 48;
    c.threads = 2;
    c.anchors_per_seq = 1; /* 64 short toy sequences: one anchor per sequence keeps 8 in a batch */
    return c;
}

static void check_inference(const char *dir, const char *name);

/* strict: held-out τ must rise by > 1 and reach half its maximum; otherwise only: the training
 * loss at least halves and τ does not fall */
static void check_tau_rises(tr_arch arch, const char *name, long steps, int strict) {
    char out[400];
    snprintf(out, sizeof out, "%s/%s", root, name);
    tr_train_cfg c = small_cfg(arch, out);
    c.steps = steps;
    tr_train_result r;
    sp_err err;
    CHECK(tr_train_run(&c, &r, &err) == 0, "%s", err.msg);
    int tau_max = arch == TR_ARCH_DFLASH_ZLAB ? c.block : c.block + 1; /* z-lab: B−1 drafts + bonus */
    printf("  %s: held-out tau %.3f -> %.3f (max %d), a_k", name, r.tau_first, r.tau_last, tau_max);
    for (int k = 0; k < c.block; k++) printf(" %.3f", r.a_last[k]);
    printf(", loss %.3f -> %.3f, %.0f block tok/s\n", r.loss_first, r.loss_last, r.tok_per_s);
    if (strict)
        CHECK(r.tau_last > r.tau_first + 1.0 && r.tau_last > 0.5 * (tau_max + 1), "%s: tau %.3f -> %.3f", name,
              r.tau_first, r.tau_last);
    else
        CHECK(r.loss_last < 0.5 * r.loss_first && r.tau_last >= r.tau_first, "%s: loss %.3f -> %.3f, tau %.3f -> %.3f",
              name, r.loss_first, r.loss_last, r.tau_first, r.tau_last);
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(sp_file_exists(p), "no checkpoint");
    check_inference(out, name);
}

/* the trained drafter, loaded by the INFERENCE path (drafters/dflash.c), accelerates greedy
 * generation on unseen prompts of the same kind: real acceptance, output identical to plain */
static void check_inference(const char *dir, const char *name) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    CHECK(sp_model_load(&m, target, 2, &err) == 0, "%s", err.msg);
    if (!m) return;
    sp_sample_params greedy = sp_sample_params_default();
    sp_dflash_opts o = sp_dflash_opts_default();
    sp_drafter *d = sp_drafter_dflash(dir, m, &greedy, &o, &err);
    CHECK(d != NULL, "%s: inference loader refused the trained drafter: %s", name, err.msg);
    long drafted = 0, accepted = 0;
    unsigned s = 4242;
    for (int k = 0; d && k < 8; k++) {
        int32_t prompt[12], ref[40], out[40];
        int n = 0;
        prompt[n++] = 1;
        int len = 4 + k % 6;
        for (int j = 0; j < len; j++) {
            s = s * 1103515245u + 12345u;
            prompt[n++] = alpha[(s >> 16) % 12];
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
              "%s: speculative output differs from plain", name);
        drafted += st.drafted;
        accepted += st.accepted;
    }
    double rate = drafted ? (double)accepted / drafted : 0;
    printf("  %s via the inference drafter: acceptance %.3f (%ld of %ld drafts), outputs identical\n", name, rate,
           accepted, drafted);
    CHECK(rate > 0.2, "%s: trained drafter accepts only %.3f at inference", name, rate);
    sp_drafter_free(d);
    sp_model_free(m);
}

/* the checkpoint is the Gemma-4 DSpark layout: Gemma4DSparkModel, k_eq_v (no v_proj), the four
 * Gemma norms and layer_scalar 1, no PLE / KV sharing, full-attention layers */
static void check_layout(const char *name) {
    char dir[400], p[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text = NULL;
    size_t n;
    sp_err err;
    CHECK(sp_read_file(p, &text, &n, &err) == 0, "%s", err.msg);
    if (!text) return;
    CHECK(strstr(text, "\"Gemma4DSparkModel\"") != NULL, "%s: architectures is not Gemma4DSparkModel", name);
    sp_config dc;
    CHECK(sp_config_parse(&dc, text, p, &err) == 0, "%s", err.msg);
    free(text);
    CHECK(dc.arch == SP_ARCH_GEMMA4 && dc.attention_k_eq_v && dc.ple_dim == 0 && dc.n_kv_shared == 0 &&
              !dc.layers[0].sliding && !dc.layers[0].has_v_proj && dc.act == SP_ACT_GELU_TANH,
          "%s: draft config is not the Gemma-4 DSpark shape", name);
    st_set *st = NULL;
    CHECK(st_open_dir(&st, dir, &err) == 0, "%s", err.msg);
    if (!st) return;
    CHECK(st_find(st, "layers.0.pre_feedforward_layernorm.weight") &&
              st_find(st, "layers.0.post_feedforward_layernorm.weight") && st_find(st, "layers.0.layer_scalar") &&
              !st_find(st, "layers.0.self_attn.v_proj.weight"),
          "%s: tensors are not the Gemma-4 DSpark layout", name);
    const st_tensor *t = st_find(st, "layers.0.layer_scalar");
    float one = 0;
    if (t) sp_to_f32(&one, t->data, t->dtype, 1);
    CHECK(one == 1.0f, "%s: layer_scalar %g (frozen at 1)", name, one);
    st_close(st);
}

/* the preset target (PLE, KV sharing, k_eq_v): its held-out continuations generalise less
 * from 64 records, so the training loss is checked here and τ on the issue-8 shape below */
static void test_gemma_dspark(void) {
    check_tau_rises(TR_ARCH_DSPARK, "dspark", 160, 0);
    check_layout("dspark");
}
static void test_plain_gemma_dspark(void) {
    check_tau_rises(TR_ARCH_DSPARK, "dspark-plain", 160, 1);
    check_layout("dspark-plain");
}
static void test_plain_gemma_dflash(void) {
    check_tau_rises(TR_ARCH_DFLASH, "dflash-plain", 160, 1);
    check_layout("dflash-plain");
}
static void test_zlab_refused(void) {
    char out[400];
    snprintf(out, sizeof out, "%s/zlab", root);
    tr_train_cfg c = small_cfg(TR_ARCH_DFLASH_ZLAB, out);
    c.steps = 1;
    tr_train_result r;
    sp_err err = {{0}};
    CHECK(tr_train_run(&c, &r, &err) != 0 && strstr(err.msg, "dflash-zlab"), "z-lab on gemma4: %s", err.msg);
}

int main(void) {
    setup(0);
    RUN(test_gemma_dspark);
    RUN(test_zlab_refused);
    setup(1);
    RUN(test_plain_gemma_dspark);
    RUN(test_plain_gemma_dflash);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_gemma");
}
