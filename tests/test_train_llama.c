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

#include "core/core.h"
#include "drafters/dflash.h"
#include "formats/newmodel.h"
#include "formats/safetensors.h"
#include "harness.h"
#include "spec/spec.h"
#include "train/regen.h"
#include "train/trainer.h"

static char root[256], target[300], shards[300], held[300];
static int alpha[12];

static void corpus(const char *path, int n, unsigned seed) {
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

static void setup(void) {
    snprintf(root, sizeof root, "/tmp/specula_test_train_llama_%d", (int)getpid());
    snprintf(target, sizeof target, "%s/target", root);
    snprintf(shards, sizeof shards, "%s/shards", root);
    snprintf(held, sizeof held, "%s/held", root);
    sp_err err;
    /* tied like Llama-3.2-1B / 3B: a random untied head makes the greedy continuations a
     * pseudo-random walk over the vocabulary that no drafter learns in a few hundred steps */
    static const char *sets[] = {"tie_word_embeddings=true"};
    newmodel_opts o = {.arch = "llama", .preset = "tiny", .seed = 1, .n_threads = 2, .sets = sets, .n_sets = 1};
    CHECK(newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    char cfg[400], p1[400], p2[400];
    snprintf(cfg, sizeof cfg, "%s/config.json", target);
    sp_config tc;
    CHECK(sp_config_load(&tc, cfg, &err) == 0 && tc.arch == SP_ARCH_LLAMA && !tc.qk_norm &&
              tc.rope.type == SP_ROPE_LLAMA3 && tc.tie_embeddings,
          "target: not the llama shape intended (llama3 rope, no q/k norm, tied)");
    for (int i = 0; i < 12; i++) alpha[i] = 3 + (int)(sp_rng_u64(5, 0, (uint64_t)i) % 8000);
    snprintf(p1, sizeof p1, "%s/train.jsonl", root);
    snprintf(p2, sizeof p2, "%s/held.jsonl", root);
    corpus(p1, 64, 1);
    corpus(p2, 12, 777);
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
    c.anchors_per_seq = 1; /* toy corpus: as test_train_e2e (A > 1 leaves few sequences per batch) */
    c.lr = 3e-3;
    c.eval_blocks = 48;
    c.threads = 2;
    return c;
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

/* the checkpoint is the Qwen3 drafter block with the target's llama3 RoPE and eps */
static void check_layout(const char *dir, const char *name, const char *arch0) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text = NULL;
    size_t n;
    sp_err err;
    CHECK(sp_read_file(p, &text, &n, &err) == 0, "%s", err.msg);
    if (!text) return;
    CHECK(strstr(text, arch0) != NULL, "%s: architectures is not %s", name, arch0);
    sp_config dc;
    CHECK(sp_config_parse(&dc, text, p, &err) == 0, "%s", err.msg);
    free(text);
    CHECK(dc.arch == SP_ARCH_QWEN3 && dc.qk_norm && dc.rope.type == SP_ROPE_LLAMA3 && dc.rope.factor == 8.0 &&
              dc.rope.theta == 500000.0 && dc.rms_eps == 1e-5,
          "%s: draft config is not a Qwen3 block with the target's llama3 rope (arch %d, rope type %d)", name,
          (int)dc.arch, (int)dc.rope.type);
    st_set *st = NULL;
    CHECK(st_open_dir(&st, dir, &err) == 0, "%s", err.msg);
    if (!st) return;
    CHECK(st_find(st, "layers.0.self_attn.q_norm.weight") && st_find(st, "layers.0.self_attn.k_norm.weight") &&
              st_find(st, "fc.weight") && !st_find(st, "embed_tokens.weight"),
          "%s: tensors are not the drafter layout", name);
    st_close(st);
}

static void check_tau_rises(tr_arch arch, tr_markov_type markov, const char *name, long steps, const char *arch0) {
    char out[400];
    snprintf(out, sizeof out, "%s/%s", root, name);
    tr_train_cfg c = small_cfg(arch, out);
    c.steps = steps;
    c.markov_head = markov;
    tr_train_result r;
    sp_err err;
    CHECK(tr_train_run(&c, &r, &err) == 0, "%s", err.msg);
    int tau_max = arch == TR_ARCH_DFLASH_ZLAB ? c.block : c.block + 1; /* z-lab: B−1 drafts + bonus */
    printf("  %s: held-out tau %.3f -> %.3f (max %d), a_k", name, r.tau_first, r.tau_last, tau_max);
    for (int k = 0; k < c.block; k++) printf(" %.3f", r.a_last[k]);
    printf(", loss %.3f -> %.3f, %.0f block tok/s\n", r.loss_first, r.loss_last, r.tok_per_s);
    CHECK(r.tau_last > r.tau_first + 1.0 && r.tau_last > 0.5 * (tau_max + 1), "%s: tau %.3f -> %.3f", name,
          r.tau_first, r.tau_last);
    check_layout(out, name, arch0);
    if (arch == TR_ARCH_DSPARK) { /* markov_head_type and the head's tensors (FORMATS.md §8.1, §8.2) */
        char p[512], want[64], *text = NULL;
        size_t n;
        snprintf(p, sizeof p, "%s/config.json", out);
        snprintf(want, sizeof want, "\"markov_head_type\": \"%s\"", tr_markov_name(markov));
        CHECK(sp_read_file(p, &text, &n, &err) == 0 && strstr(text, want), "%s: config.json lacks %s", name, want);
        free(text);
        st_set *st = NULL;
        CHECK(st_open_dir(&st, out, &err) == 0, "%s", err.msg);
        if (st) {
            int gate = st_find(st, "markov_head.gate_proj.weight") && st_find(st, "markov_head.gate_proj.bias");
            int joint = st_find(st, "markov_head.joint_proj.weight") && st_find(st, "markov_head.joint_proj.bias");
            CHECK(gate == (markov == TR_MARKOV_GATED) && joint == (markov == TR_MARKOV_RNN),
                  "%s: head tensors gate_proj %d joint_proj %d", name, gate, joint);
            st_close(st);
        }
    }
    check_inference(out, name);
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
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_llama");
}
