/* train_harness.h — what the drafter-training tests share (test_train_e2e.c, test_train_gemma.c,
 * test_train_llama.c; test_train_data.c its folders): a run folder under /tmp; a random tiny
 * target that regenerates a repetitive corpus (prompts over a 12-token alphabet, responses its
 * own greedy continuations) into training and held-out shards; the small training run; its
 * held-out τ report and check; reading a trained drafter's config.json; and the check that the
 * INFERENCE path loads a trained drafter and speeds up greedy decoding with output identical to
 * plain decoding.
 *
 * Like harness.h: static state and static inline functions, included once by each test program
 * (the Makefile builds every tests/test_*.c as its own program). Checks go through CHECK, so a
 * failure counts against the test case that called. */
#ifndef SPECULA_TRAIN_HARNESS_H
#define SPECULA_TRAIN_HARNESS_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "drafters/dflash.h"
#include "formats/newmodel.h"
#include "harness.h"
#include "decode/spec.h"
#include "train/regen.h"
#include "train/trainer.h"

/* the run's folders: th_root = /tmp/specula_TEST_PID; in it the target, its training shards and
 * its held-out shards, each name followed by a suffix (test_train_gemma: one per target variant) */
static char th_root[256], th_target[300], th_shards[300], th_held[300];
static int th_alpha[12]; /* the corpus alphabet: 12 token ids in [3, 8003) */

static inline void th_paths(const char *test, const char *suffix) {
    snprintf(th_root, sizeof th_root, "/tmp/specula_%s_%d", test, (int)getpid());
    snprintf(th_target, sizeof th_target, "%s/target%s", th_root, suffix);
    snprintf(th_shards, sizeof th_shards, "%s/shards%s", th_root, suffix);
    snprintf(th_held, sizeof th_held, "%s/held%s", th_root, suffix);
}

/* main's last step: remove th_root and all in it */
static inline void th_remove_root(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", th_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", th_root);
}

/* n JSONL records {"ids": [1, a…], "resp_start": len + 1}: BOS and 4..9 tokens of th_alpha drawn
 * by an LCG from seed; regen writes the responses */
static inline void th_corpus(const char *path, int n, unsigned seed) {
    FILE *f = fopen(path, "w");
    unsigned s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        int len = 4 + (int)((s >> 16) % 6);
        fprintf(f, "{\"ids\": [1");
        for (int j = 0; j < len; j++) {
            s = s * 1103515245u + 12345u;
            fprintf(f, ", %d", th_alpha[(s >> 16) % 12]);
        }
        fprintf(f, "], \"resp_start\": %d}\n", len + 1);
    }
    fclose(f);
}

/* th_paths(test, suffix); the random tiny target o describes, written to th_target; then 64
 * training records regenerated (48 greedy tokens each) into th_shards and 12 held-out ones into
 * th_held. The caller checks the target's config for the shape it intended. */
static inline void th_setup(const char *test, const char *suffix, const newmodel_opts *o) {
    th_paths(test, suffix);
    sp_err err;
    CHECK(sp_newmodel_write(th_target, o, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 12; i++) th_alpha[i] = 3 + (int)(sp_rng_u64(5, 0, (uint64_t)i) % 8000);
    char p1[400], p2[400];
    snprintf(p1, sizeof p1, "%s/train.jsonl", th_root);
    snprintf(p2, sizeof p2, "%s/held.jsonl", th_root);
    th_corpus(p1, 64, 1);
    th_corpus(p2, 12, 777);
    tr_regen_cfg c = {.model_dir = th_target, .data_path = p1, .out_dir = th_shards, .generate = 48, .threads = 2};
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    c.data_path = p2;
    c.out_dir = th_held;
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
}

/* the small run on th_target's shards, into out: 1 layer, block 4, batch 8, rank 32, ctx 32,
 * lr 3e-3, τ on 48 held-out blocks, 2 threads; one anchor per sequence (64 short toy sequences:
 * A anchors per sequence leave only 8 / A sequences in a batch) */
/* whether a test checks that training learned (τ rose, the drafter is accepted): not in the
 * sanitizer build, which trains for fewer steps */
#define TH_LEARNING (!HARNESS_SANITIZED)
/* the steps of a run that checks learning: a quarter of them (at least 8) in the sanitizer build */
#define TH_LEARN_STEPS(n) (TH_LEARNING ? (n) : (n) / 4 > 8 ? (n) / 4 : 8)

static inline tr_train_cfg th_small_cfg(tr_arch arch, const char *out) {
    tr_train_cfg c = sp_tr_train_defaults();
    c.arch = arch;
    c.model_dir = th_target;
    c.data_dir = th_shards;
    c.heldout_dir = th_held;
    c.out_dir = out;
    c.batch = 8;
    c.block = 4;
    c.layers = 1;
    c.markov_rank = 32;
    c.ctx = 32;
    c.lr = 3e-3;
    c.eval_blocks = 48;
    c.threads = 2;
    c.anchors_per_seq = 1;
    return c;
}

/* th_small_cfg for steps steps into th_root/name (written to out, n bytes) */
static inline tr_train_cfg th_named_cfg(char *out, size_t n, tr_arch arch, const char *name, long steps) {
    snprintf(out, n, "%s/%s", th_root, name);
    tr_train_cfg c = th_small_cfg(arch, out);
    c.steps = steps;
    return c;
}

/* trains c (named name) into *r and prints held-out τ first -> last, a_k, loss and speed; with
 * check_tau, checks that held-out τ rose by more than 1 and reached half its maximum (z-lab:
 * B−1 drafts + bonus; the others B drafts + bonus) */
static inline void th_train(const tr_train_cfg *c, const char *name, int check_tau, tr_train_result *r) {
    sp_err err;
    CHECK(sp_tr_train_run(c, r, &err) == 0, "%s", err.msg);
    int tau_max = c->arch == TR_ARCH_DFLASH_ZLAB ? c->block : c->block + 1;
    printf("  %s: held-out tau %.3f -> %.3f (max %d), a_k", name, r->tau_first, r->tau_last, tau_max);
    for (int k = 0; k < c->block; k++) printf(" %.3f", r->a_last[k]);
    printf(", loss %.3f -> %.3f, %.0f block tok/s\n", r->loss_first, r->loss_last, r->tok_per_s);
    if (check_tau && TH_LEARNING)
        CHECK(r->tau_last > r->tau_first + 1.0 && r->tau_last > 0.5 * (tau_max + 1), "%s: tau %.3f -> %.3f", name,
              r->tau_first, r->tau_last);
}

/* reads dir/config.json of the trained drafter name: "architectures" holds arch (the quoted JSON
 * string) and the file parses into *dc (both checked). -1 when the file cannot be read (checked;
 * the caller has nothing to look at), else 0 */
static inline int th_drafter_config(const char *dir, const char *name, const char *arch, sp_config *dc) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text = NULL;
    size_t n;
    sp_err err;
    CHECK(sp_read_file(p, &text, &n, &err) == 0, "%s", err.msg);
    if (!text) return -1;
    CHECK(strstr(text, arch) != NULL, "%s: architectures is not %s", name, arch);
    CHECK(sp_config_parse(dc, text, p, &err) == 0, "%s", err.msg);
    free(text);
    return 0;
}

/* the trained drafter in dir, loaded by the INFERENCE path (drafters/dflash.c), accelerates greedy
 * generation on unseen prompts of the same kind: real acceptance, output identical to plain */
static inline void th_check_inference(const char *dir, const char *name) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    CHECK(sp_model_load(&m, th_target, 2, &err) == 0, "%s", err.msg);
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
              "%s: speculative output differs from plain", name);
        drafted += st.drafted;
        accepted += st.accepted;
    }
    double rate = drafted ? (double)accepted / drafted : 0;
    printf("  %s via the inference drafter: acceptance %.3f (%ld of %ld drafts), outputs identical\n", name, rate,
           accepted, drafted);
    CHECK(rate > 0.2 || !TH_LEARNING, "%s: trained drafter accepts only %.3f at inference", name, rate);
    sp_drafter_free(d);
    sp_model_free(m);
}
#endif
