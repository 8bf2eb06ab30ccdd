/* test_train_llama.c — drafter training for a Llama-3 target end to end (the pattern of
 * test_train_e2e.c): a random tiny llama target (no q/k norm, llama3 rope scaling; tied head,
 * see setup), regen a repetitive corpus, train DSpark and z-lab DFlash drafters, check that
 * held-out τ rises well above its start, that the checkpoint is the Qwen3 drafter block
 * (q_norm / k_norm, model_type "qwen3") with the target's llama3 RoPE, and that
 * sp_drafter_dflash loads it and gives output identical to plain decoding with real acceptance;
 * the same for DSpark with the gated and rnn Markov heads (markov_head_type in config.json).
 * (test_train_infer.c checks the trained forward against the inference one on an untied llama.) */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "train_harness.h"

static void setup(void) {
    /* tied like Llama-3.2-1B / 3B: a random untied head makes the greedy continuations a
     * pseudo-random walk over the vocabulary that no drafter learns in a few hundred steps */
    static const char *sets[] = {"tie_word_embeddings=true"};
    newmodel_opts o = {.arch = "llama", .preset = "tiny", .seed = 1, .n_threads = 2, .sets = sets, .n_sets = 1};
    th_setup("test_train_llama", "", &o);
    sp_err err;
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/config.json", th_target);
    sp_config tc;
    CHECK(sp_config_load(&tc, cfg, &err) == 0 && tc.arch == SP_ARCH_LLAMA && !tc.qk_norm &&
              tc.rope.type == SP_ROPE_LLAMA3 && tc.tie_embeddings,
          "target: not the llama shape intended (llama3 rope, no q/k norm, tied)");
}

/* the checkpoint is the Qwen3 drafter block with the target's llama3 RoPE and eps */
static void check_layout(const char *dir, const char *name, const char *arch0) {
    sp_config dc;
    if (th_drafter_config(dir, name, arch0, &dc) != 0) return;
    CHECK(dc.arch == SP_ARCH_QWEN3 && dc.qk_norm && dc.rope.type == SP_ROPE_LLAMA3 && dc.rope.factor == 8.0 &&
              dc.rope.theta == 500000.0 && dc.rms_eps == 1e-5,
          "%s: draft config is not a Qwen3 block with the target's llama3 rope (arch %d, rope type %d)", name,
          (int)dc.arch, (int)dc.rope.type);
    sp_err err;
    st_set *st = NULL;
    CHECK(sp_st_open_dir(&st, dir, &err) == 0, "%s", err.msg);
    if (!st) return;
    CHECK(sp_st_find(st, "layers.0.self_attn.q_norm.weight") && sp_st_find(st, "layers.0.self_attn.k_norm.weight") &&
              sp_st_find(st, "fc.weight") && !sp_st_find(st, "embed_tokens.weight"),
          "%s: tensors are not the drafter layout", name);
    sp_st_close(st);
}

static void check_tau_rises(tr_arch arch, tr_markov_type markov, const char *name, long steps, const char *arch0) {
    char out[400];
    tr_train_cfg c = th_named_cfg(out, sizeof out, arch, name, TH_LEARN_STEPS(steps));
    c.markov_head = markov;
    tr_train_result r;
    th_train(&c, name, 1, &r);
    check_layout(out, name, arch0);
    if (arch == TR_ARCH_DSPARK) { /* markov_head_type and the head's tensors (docs/DSPARK.md §1, §2) */
        char p[512], want[64], *text = NULL;
        size_t n;
        sp_err err;
        snprintf(p, sizeof p, "%s/config.json", out);
        snprintf(want, sizeof want, "\"markov_head_type\": \"%s\"", sp_tr_markov_name(markov));
        CHECK(sp_read_file(p, &text, &n, &err) == 0 && strstr(text, want), "%s: config.json lacks %s", name, want);
        free(text);
        st_set *st = NULL;
        CHECK(sp_st_open_dir(&st, out, &err) == 0, "%s", err.msg);
        if (st) {
            int gate = sp_st_find(st, "markov_head.gate_proj.weight") && sp_st_find(st, "markov_head.gate_proj.bias");
            int joint = sp_st_find(st, "markov_head.joint_proj.weight") && sp_st_find(st, "markov_head.joint_proj.bias");
            CHECK(gate == (markov == TR_MARKOV_GATED) && joint == (markov == TR_MARKOV_RNN),
                  "%s: head tensors gate_proj %d joint_proj %d", name, gate, joint);
            sp_st_close(st);
        }
    }
    th_check_inference(out, name);
}

#define DSPARK "\"Qwen3DSparkModel\""
static void test_llama_dspark(void) { check_tau_rises(TR_ARCH_DSPARK, TR_MARKOV_VANILLA, "dspark", 160, DSPARK); }
static void test_llama_dflash_zlab(void) {
    check_tau_rises(TR_ARCH_DFLASH_ZLAB, TR_MARKOV_VANILLA, "dflash-zlab", 120, "\"DFlashDraftModel\"");
}
/* the gated and rnn Markov heads train too and load with their markov_head_type */
static void test_llama_dspark_gated(void) {
    check_tau_rises(TR_ARCH_DSPARK, TR_MARKOV_GATED, "dspark-gated", 160, DSPARK);
}
static void test_llama_dspark_rnn(void) { check_tau_rises(TR_ARCH_DSPARK, TR_MARKOV_RNN, "dspark-rnn", 160, DSPARK); }

int main(void) {
    setup();
    RUN(test_llama_dspark);
    RUN(test_llama_dflash_zlab);
    RUN(test_llama_dspark_gated);
    RUN(test_llama_dspark_rnn);
    th_remove_root();
    return harness_done("test_train_llama");
}
