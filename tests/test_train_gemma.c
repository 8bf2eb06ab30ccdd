/* test_train_gemma.c — drafter training for Gemma-4 targets end to end (the pattern of
 * test_train_e2e.c): random tiny gemma4 targets (the preset as is: sliding window, KV sharing,
 * k_eq_v, PLE, soft-cap 30; and the issue-8 shape: no PLE / KV sharing / k_eq_v), regen a
 * repetitive corpus, train DSpark / DFlash drafters in the Gemma4DSparkModel layout, check that
 * held-out τ rises, and that sp_drafter_dflash loads the checkpoint and gives output identical
 * to plain decoding with real acceptance. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "train_harness.h"

static const char *plain_sets[] = {"hidden_size_per_layer_input=0", "num_kv_shared_layers=0",
                                   "attention_k_eq_v=false"};

/* variant 0: the tiny gemma4 preset as is; 1: without PLE / KV sharing / k_eq_v */
static void setup(int variant) {
    newmodel_opts o = {.arch = "gemma4", .preset = "tiny", .seed = 1, .n_threads = 2,
                       .sets = variant ? plain_sets : NULL, .n_sets = variant ? 3 : 0};
    th_setup("test_train_gemma", variant ? "1" : "0", &o);
    sp_err err;
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/config.json", th_target);
    sp_config tc;
    CHECK(sp_config_load(&tc, cfg, &err) == 0 && tc.arch == SP_ARCH_GEMMA4 && tc.final_softcap == 30.0 &&
              (variant ? tc.ple_dim == 0 && tc.n_kv_shared == 0 && !tc.attention_k_eq_v
                       : tc.ple_dim > 0 && tc.n_kv_shared > 0 && tc.attention_k_eq_v),
          "target variant %d: not the gemma4 shape intended", variant);
}

/* th_small_cfg's rate is raised: the sqrt(H)-scaled embedding dominates the residual stream at first */
#define GEMMA_LR 3e-2

/* strict: held-out τ must rise by > 1 and reach half its maximum; otherwise only: the training
 * loss at least halves and τ does not fall */
static void check_tau_rises(tr_arch arch, const char *name, long steps, int strict) {
    char out[400];
    tr_train_cfg c = th_named_cfg(out, sizeof out, arch, name, TH_LEARN_STEPS(steps));
    c.lr = GEMMA_LR;
    tr_train_result r;
    th_train(&c, name, strict, &r);
    if (!strict && TH_LEARNING)
        CHECK(r.loss_last < 0.5 * r.loss_first && r.tau_last >= r.tau_first, "%s: loss %.3f -> %.3f, tau %.3f -> %.3f",
              name, r.loss_first, r.loss_last, r.tau_first, r.tau_last);
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(sp_file_exists(p), "no checkpoint");
    th_check_inference(out, name);
}

/* the checkpoint is the Gemma-4 DSpark layout: Gemma4DSparkModel, k_eq_v (no v_proj), the four
 * Gemma norms and layer_scalar 1, no PLE / KV sharing, full-attention layers */
static void check_layout(const char *name) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", th_root, name);
    sp_config dc;
    if (th_drafter_config(dir, name, "\"Gemma4DSparkModel\"", &dc) != 0) return;
    CHECK(dc.arch == SP_ARCH_GEMMA4 && dc.attention_k_eq_v && dc.ple_dim == 0 && dc.n_kv_shared == 0 &&
              !dc.layers[0].sliding && !dc.layers[0].has_v_proj && dc.act == SP_ACT_GELU_TANH,
          "%s: draft config is not the Gemma-4 DSpark shape", name);
    sp_err err;
    st_set *st = NULL;
    CHECK(sp_st_open_dir(&st, dir, &err) == 0, "%s", err.msg);
    if (!st) return;
    CHECK(sp_st_find(st, "layers.0.pre_feedforward_layernorm.weight") &&
              sp_st_find(st, "layers.0.post_feedforward_layernorm.weight") && sp_st_find(st, "layers.0.layer_scalar") &&
              !sp_st_find(st, "layers.0.self_attn.v_proj.weight"),
          "%s: tensors are not the Gemma-4 DSpark layout", name);
    const st_tensor *t = sp_st_find(st, "layers.0.layer_scalar");
    float one = 0;
    if (t) sp_to_f32(&one, t->data, t->dtype, 1);
    CHECK(one == 1.0f, "%s: layer_scalar %g (frozen at 1)", name, one);
    sp_st_close(st);
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
    tr_train_cfg c = th_named_cfg(out, sizeof out, TR_ARCH_DFLASH_ZLAB, "zlab", 1);
    c.lr = GEMMA_LR;
    tr_train_result r;
    sp_err err = {{0}};
    CHECK(sp_tr_train_run(&c, &r, &err) != 0 && strstr(err.msg, "dflash-zlab"), "z-lab on gemma4: %s", err.msg);
}

int main(void) {
    setup(0);
    RUN(test_gemma_dspark);
    RUN(test_zlab_refused);
    setup(1);
    RUN(test_plain_gemma_dspark);
    RUN(test_plain_gemma_dflash);
    th_remove_root();
    return harness_done("test_train_gemma");
}
