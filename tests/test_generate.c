/* test_generate.c — plain generation on the tiny reference checkpoints
 * (tests/data/ref-logits/{qwen3,llama,gemma4}): greedy tokens equal the argmax of the
 * logits of one forward over prompt + generated tokens; sampling is reproducible from its
 * seed and independent of the thread count and of the prefill chunking; EOS stops unless
 * ignore_eos; the context limit and the callback stop generation. */
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "harness.h"
#include "decode/generate.h"

static const char *ARCHS[] = {"qwen3", "llama", "gemma4"};
enum { NP = 10, NGEN = 20 };

static const int32_t PROMPT[NP] = {1, 5493, 20509, 14029, 25386, 7076, 1488, 12897, 20346, 19520};

static sp_model *load(const char *dir, int threads) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    if (sp_model_load(&m, dir, threads, &err)) {
        CHECK(0, "load %s: %s", dir, err.msg);
        return NULL;
    }
    return m;
}

static int argmax_ref(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int gen(sp_model *m, const sp_gen_params *gp, int32_t *out, sp_gen_stats *st) {
    sp_err err = {{0}};
    int rc = sp_generate(m, NULL, PROMPT, NP, gp, out, NGEN, st, &err);
    CHECK(rc == 0, "generate: %s", err.msg);
    return rc;
}

/* greedy generation == argmax of a single forward over prompt + generated[0 .. n-2] */
static void test_greedy_matches_logits(void) {
    for (size_t a = 0; a < sizeof ARCHS / sizeof *ARCHS; a++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", ARCHS[a]);
        sp_model *m = load(dir, 1);
        if (!m) continue;
        const int V = sp_model_config(m)->vocab_size;
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = NGEN;
        gp.ignore_eos = 1;
        gp.prefill_chunk = 4; /* several prefill chunks */
        int32_t out[NGEN];
        sp_gen_stats st;
        if (gen(m, &gp, out, &st)) goto next;
        CHECK(st.emitted == NGEN && st.prompt_tokens == NP && st.decode_steps == NGEN - 1 &&
                  st.stop == SP_STOP_MAX_NEW,
              "%s: emitted %d steps %d stop %s", ARCHS[a], st.emitted, st.decode_steps, sp_stop_reason_name(st.stop));

        const int T = NP + NGEN - 1;
        int32_t seq[NP + NGEN];
        memcpy(seq, PROMPT, sizeof PROMPT);
        memcpy(seq + NP, out, (NGEN - 1) * sizeof *out);
        sp_err err = {{0}};
        sp_kv *kv = sp_kv_create(m, T, T, &err);
        float *logits = malloc((size_t)T * V * sizeof *logits);
        sp_forward_out fo = {.logits = logits};
        CHECK(kv && sp_model_forward(m, kv, seq, T, &fo, &err) == 0, "%s forward: %s", ARCHS[a], err.msg);
        int bad = 0;
        for (int i = 0; i < NGEN; i++) bad += argmax_ref(logits + (size_t)(NP - 1 + i) * V, V) != out[i];
        CHECK(bad == 0, "%s: %d of %d greedy tokens differ from the argmax of the logits", ARCHS[a], bad, NGEN);
        free(logits);
        if (kv) sp_kv_free(kv);
    next:
        sp_model_free(m);
    }
}

/* a seed reproduces the tokens, for 1 or 2 threads and any prefill chunking */
static void test_sampling_reproducible(void) {
    for (size_t a = 0; a < sizeof ARCHS / sizeof *ARCHS; a++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", ARCHS[a]);
        sp_model *m1 = load(dir, 1), *m2 = load(dir, 2);
        if (!m1 || !m2) {
            if (m1) sp_model_free(m1);
            if (m2) sp_model_free(m2);
            continue;
        }
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = NGEN;
        gp.ignore_eos = 1;
        gp.sample = (sp_sample_params){.temperature = 1.5f, .top_k = 200, .top_p = 0.95f, .min_p = 0.01f, .seed = 77};
        int32_t a1[NGEN], a2[NGEN], b[NGEN], c[NGEN], d[NGEN];
        sp_gen_stats st;
        gen(m1, &gp, a1, &st);
        gen(m1, &gp, a2, &st);
        gen(m2, &gp, b, &st);
        gp.prefill_chunk = 3;
        gen(m2, &gp, c, &st);
        gp.sample.seed = 78;
        gen(m1, &gp, d, &st);
        CHECK(!memcmp(a1, a2, sizeof a1), "%s: same seed, two runs differ", ARCHS[a]);
        CHECK(!memcmp(a1, b, sizeof a1), "%s: 1 vs 2 threads differ", ARCHS[a]);
        CHECK(!memcmp(a1, c, sizeof a1), "%s: prefill chunking changed the sample", ARCHS[a]);
        CHECK(memcmp(a1, d, sizeof a1), "%s: seeds 77 and 78 gave the same %d tokens", ARCHS[a], NGEN);
        /* sampling really samples: not the greedy sequence */
        gp.sample = sp_sample_params_default();
        int32_t g[NGEN];
        gen(m1, &gp, g, &st);
        CHECK(memcmp(a1, g, sizeof a1), "%s: T=1.5 sample equals the greedy sequence", ARCHS[a]);
        sp_model_free(m1);
        sp_model_free(m2);
    }
}

/* A copy of the qwen3 fixture whose config names `eos` as its EOS id (weights symlinked). */
static int make_eos_dir(char *tmpl, int32_t eos) {
    char src[PATH_MAX], path[PATH_MAX + 64];
    if (!mkdtemp(tmpl) || !realpath("tests/data/ref-logits/qwen3/model.safetensors", src)) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", tmpl);
    if (symlink(src, path)) return -1;
    json_error_t je;
    json_t *cfg = json_load_file("tests/data/ref-logits/qwen3/config.json", 0, &je);
    if (!cfg) return -1;
    json_object_set_new(cfg, "eos_token_id", json_integer(eos));
    snprintf(path, sizeof path, "%s/config.json", tmpl);
    int rc = json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    return rc;
}

static void remove_eos_dir(const char *dir) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

typedef struct {
    int n, stop_at;
} cb_state;

static int count_cb(void *ctx, int32_t tok) {
    cb_state *s = ctx;
    (void)tok;
    return ++s->n == s->stop_at;
}

static void test_stops(void) {
    sp_model *m = load("tests/data/ref-logits/qwen3", 2);
    if (!m) return;
    sp_gen_params gp = sp_gen_params_default();
    gp.max_new = NGEN;
    gp.ignore_eos = 1;
    int32_t ref[NGEN], out[NGEN];
    sp_gen_stats st;
    if (gen(m, &gp, ref, &st)) {
        sp_model_free(m);
        return;
    }
    /* EOS = the 6th greedy token: generation stops at its first occurrence */
    int32_t eos = ref[5];
    int first = 0;
    while (ref[first] != eos) first++;
    char dir[] = "/tmp/specula-test-eos-XXXXXX";
    CHECK(make_eos_dir(dir, eos) == 0, "could not build %s", dir);
    sp_model *me = load(dir, 2);
    if (me) {
        CHECK(sp_is_eos(sp_model_config(me), eos), "config eos not %d", eos);
        gp.ignore_eos = 0;
        gen(me, &gp, out, &st);
        CHECK(st.stop == SP_STOP_EOS && st.emitted == first + 1 && !memcmp(out, ref, (size_t)st.emitted * 4),
              "EOS %d: stop %s after %d tokens, want eos after %d", eos, sp_stop_reason_name(st.stop),
              st.emitted, first + 1);
        gp.ignore_eos = 1;
        gen(me, &gp, out, &st);
        CHECK(st.stop == SP_STOP_MAX_NEW && st.emitted == NGEN && !memcmp(out, ref, sizeof ref),
              "ignore_eos: stop %s after %d", sp_stop_reason_name(st.stop), st.emitted);
        sp_model_free(me);
    }
    remove_eos_dir(dir);

    /* context limit: a cache of NP + 3 positions emits 4 tokens (the last is never stored) */
    gp.max_ctx = NP + 3;
    gen(m, &gp, out, &st);
    CHECK(st.stop == SP_STOP_CTX && st.emitted == 4 && !memcmp(out, ref, 4 * sizeof *out),
          "ctx: stop %s after %d", sp_stop_reason_name(st.stop), st.emitted);
    gp.max_ctx = 0;

    /* the callback sees every token and can stop */
    cb_state cs = {0, 7};
    gp.on_token = count_cb;
    gp.cb_ctx = &cs;
    gen(m, &gp, out, &st);
    CHECK(st.stop == SP_STOP_CALLBACK && st.emitted == 7 && cs.n == 7, "callback: %d", st.emitted);

    /* a caller-owned cache continues a sequence: prompt in two parts == prompt at once */
    sp_err err = {{0}};
    gp.on_token = NULL;
    sp_kv *kv = sp_kv_create(m, NP + NGEN, 512, &err);
    sp_forward_out none = {0};
    CHECK(kv && sp_model_forward(m, kv, PROMPT, 4, &none, &err) == 0, "%s", err.msg);
    CHECK(sp_generate(m, kv, PROMPT + 4, NP - 4, &gp, out, NGEN, &st, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(out, ref, sizeof ref) && sp_kv_len(kv) == NP + NGEN - 1, "continued sequence differs (kv %d)",
          sp_kv_len(kv));
    if (kv) sp_kv_free(kv);

    /* bad input */
    int32_t bad[2] = {1, 1 << 30};
    CHECK(sp_generate(m, NULL, bad, 2, &gp, out, NGEN, &st, &err) == -1 && strstr(err.msg, "vocabulary"),
          "out-of-vocab prompt: %s", err.msg);
    CHECK(sp_generate(m, NULL, bad, 0, &gp, out, NGEN, &st, &err) == -1 && strstr(err.msg, "empty"),
          "empty prompt: %s", err.msg);
    CHECK(sp_generate(m, NULL, PROMPT, NP, &gp, out, NGEN - 1, &st, &err) == -1, "small buffer accepted");
    sp_model_free(m);
}

int main(void) {
    RUN(test_greedy_matches_logits);
    RUN(test_sampling_reproducible);
    RUN(test_stops);
    return harness_done("test_generate");
}
