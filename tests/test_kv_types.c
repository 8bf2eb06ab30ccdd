/* test_kv_types.c — KV caches of every type (f32, f16, bf16, q8_0; sp_model_set_kv_types):
 * - batched == solo, bit for bit: several sequences in one sp_model_forward_batch give each the
 *   logits of its own forward, through prefill chunks, verify blocks, rollbacks (trim) and, on the
 *   sliding-window fixture (gemma4, window 8), many wraps of the ring;
 * - prefill == steps and rollback after a wrap: a prompt in chunks past the ring, a block of
 *   drafts trimmed away, then the true tokens give exactly the logits of a fresh cache fed the
 *   final sequence one token at a time;
 * - prefill == steps before the ring wraps: a few tokens at once give the logits of the same tokens
 *   one at a time (the KV-shared layers of gemma4 read the rows of the forward that writes them);
 * - the logits stay within a stated tolerance of the f32 cache's (largest difference over the
 *   largest |logit|: f16 under 0.5%, bf16 under 2%, q8_0 under 5% on these fixtures; measured 0.13%,
 *   0.69% and 1.8% at most);
 * - a bad type name and q8_0 on a shape it cannot hold are errors that name the problem. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "specula.h"

#define NSEQ 3
#define STEPS 40

static sp_model *load(const char *arch) {
    char dir[256];
    sp_err err = {{0}};
    sp_model *m;
    snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", arch);
    if (sp_model_load(&m, dir, 2, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return NULL;
    }
    return m;
}

static int block_len(int s, int k) { return k == 0 ? 3 + 5 * s : 1 + (s * 7 + k * 3) % 6; }
static int32_t token_at(int s, int pos, int V) { return (int32_t)((pos * 131 + s * 977 + 7) % V); }

/* batched == solo over STEPS steps with trims; returns the shortest final cache length */
static int batch_vs_solo(sp_model *m, const char *what) {
    const sp_config *c = sp_model_config(m);
    int V = c->vocab_size, ctx = 160, mb = 24, fails = 0, mism = 0;
    sp_err err = {{0}};
    sp_kv *solo[NSEQ], *batch[NSEQ], *scratch = sp_kv_create(m, NSEQ * mb, NSEQ * mb, &err);
    for (int s = 0; s < NSEQ; s++) solo[s] = sp_kv_create(m, ctx, mb, &err), batch[s] = sp_kv_create(m, ctx, mb, &err);
    size_t rows = (size_t)NSEQ * mb;
    float *lg_solo = malloc(rows * V * sizeof(float)), *lg_batch = malloc(rows * V * sizeof(float));
    int32_t toks[NSEQ][32];
    for (int k = 0; k < STEPS; k++) {
        sp_forward_seq seqs[NSEQ];
        sp_forward_out outs[NSEQ];
        int n = 0, r0 = 0;
        for (int s = 0; s < NSEQ; s++) {
            if ((k + s) % 5 == 4) continue;
            int T = block_len(s, k), pos = sp_kv_len(batch[s]);
            if (pos + T > ctx) continue;
            for (int t = 0; t < T; t++) toks[s][t] = token_at(s, pos + t, V);
            sp_forward_out o = {.logits = lg_solo + (size_t)r0 * V};
            fails += sp_model_forward(m, solo[s], toks[s], T, &o, &err) != 0;
            outs[n] = (sp_forward_out){.logits = lg_batch + (size_t)r0 * V};
            seqs[n] = (sp_forward_seq){batch[s], toks[s], T, &outs[n], NULL};
            n++;
            r0 += T;
        }
        if (!n) continue;
        fails += sp_model_forward_batch(m, scratch, seqs, n, &err) != 0;
        mism += memcmp(lg_solo, lg_batch, (size_t)r0 * V * sizeof(float)) != 0;
        for (int s = 0; s < NSEQ; s++) {
            int cut = (k + s) % 3;
            if (k == 0 || !cut || sp_kv_len(solo[s]) < cut) continue;
            fails += sp_kv_trim(solo[s], cut, &err) != 0;
            fails += sp_kv_trim(batch[s], cut, &err) != 0;
        }
    }
    CHECK(fails == 0, "%s: %d calls failed: %s", what, fails, err.msg);
    CHECK(mism == 0, "%s: batched != solo at %d steps", what, mism);
    int shortest = ctx;
    for (int s = 0; s < NSEQ; s++) {
        if (sp_kv_len(batch[s]) < shortest) shortest = sp_kv_len(batch[s]);
        sp_kv_free(solo[s]), sp_kv_free(batch[s]);
    }
    sp_kv_free(scratch);
    free(lg_solo), free(lg_batch);
    return shortest;
}

/* Prompt of N tokens in chunks of 7 past the ring, 6 drafts forwarded and trimmed, 5 true tokens:
 * the last row's logits into out; the same from a fresh cache one token at a time into ref.
 * Returns the number of failed calls. */
#define N_PROMPT 50
static int rollback_after_wrap(sp_model *m, float *out, float *ref) {
    int V = sp_model_config(m)->vocab_size, fails = 0, n = N_PROMPT + 5;
    sp_err err = {{0}};
    int32_t seq[N_PROMPT + 5], drafts[6];
    for (int i = 0; i < n; i++) seq[i] = token_at(1, i, V);
    for (int i = 0; i < 6; i++) drafts[i] = token_at(2, i, V);
    float *lg = malloc((size_t)8 * V * sizeof(float));
    sp_kv *a = sp_kv_create(m, 96, 8, &err), *b = sp_kv_create(m, 96, 8, &err);
    for (int p = 0; p < N_PROMPT; p += 7) {
        sp_forward_out o = {.logits = lg};
        fails += sp_model_forward(m, a, seq + p, p + 7 <= N_PROMPT ? 7 : N_PROMPT - p, &o, &err) != 0;
    }
    sp_forward_out o = {.logits = lg};
    fails += sp_model_forward(m, a, drafts, 6, &o, &err) != 0;
    fails += sp_kv_trim(a, 6, &err) != 0;
    fails += sp_model_forward(m, a, seq + N_PROMPT, 5, &o, &err) != 0;
    memcpy(out, lg + (size_t)4 * V, sizeof(float) * V);
    for (int i = 0; i < n; i++) {
        sp_forward_out o1 = {.logits = ref};
        fails += sp_model_forward(m, b, seq + i, 1, &o1, &err) != 0;
    }
    if (fails) fprintf(stderr, "  rollback: %s\n", err.msg);
    sp_kv_free(a), sp_kv_free(b);
    free(lg);
    return fails;
}

/* Before any ring wraps: N_SHORT tokens forwarded at once into a fresh cache, and one at a time
 * into another; the last row's logits of the first into out, of the second into ref. The KV-shared
 * layers (gemma4) read the rows the forward itself writes from their source layer's cache here. */
#define N_SHORT 6
static int short_prefill(sp_model *m, float *out, float *ref) {
    int V = sp_model_config(m)->vocab_size, fails = 0;
    sp_err err = {{0}};
    int32_t seq[N_SHORT];
    for (int i = 0; i < N_SHORT; i++) seq[i] = token_at(3, i, V);
    float *lg = malloc((size_t)N_SHORT * V * sizeof(float));
    sp_kv *a = sp_kv_create(m, 96, 8, &err), *b = sp_kv_create(m, 96, 8, &err);
    sp_forward_out o = {.logits = lg};
    fails += sp_model_forward(m, a, seq, N_SHORT, &o, &err) != 0;
    memcpy(out, lg + (size_t)(N_SHORT - 1) * V, sizeof(float) * V);
    for (int i = 0; i < N_SHORT; i++) {
        sp_forward_out o1 = {.logits = ref};
        fails += sp_model_forward(m, b, seq + i, 1, &o1, &err) != 0;
    }
    if (fails) fprintf(stderr, "  short prefill: %s\n", err.msg);
    sp_kv_free(a), sp_kv_free(b);
    free(lg);
    return fails;
}

static void run_arch(const char *arch) {
    sp_model *m = load(arch);
    CHECK(m != NULL, "load %s", arch);
    if (!m) return;
    int V = sp_model_config(m)->vocab_size;
    float *f32_out = malloc(sizeof(float) * V), *out = malloc(sizeof(float) * V), *ref = malloc(sizeof(float) * V);
    float *f32_short = malloc(sizeof(float) * V), *short_out = malloc(sizeof(float) * V),
          *short_ref = malloc(sizeof(float) * V);
    static const double tol[] = {0, 0.005, 0.02, 0.05};
    sp_err err = {{0}};
    for (int t = 0; t < 4; t++) {
        char what[64];
        snprintf(what, sizeof what, "%s %s", arch, sp_kv_type_name((sp_kv_type)t));
        if (sp_model_set_kv_types(m, (sp_kv_type)t, (sp_kv_type)t, &err)) {
            CHECK(t == SP_KV_Q8_0 && strstr(err.msg, "multiple of 32"), "%s: %s", what, err.msg);
            printf("  %s: refused (%s)\n", what, err.msg);
            continue;
        }
        int len = batch_vs_solo(m, what);
        CHECK(len > 40, "%s: caches of %d positions: too short to wrap the ring", what, len);
        CHECK(rollback_after_wrap(m, out, ref) == 0, "%s: rollback calls failed", what);
        CHECK(!memcmp(out, ref, sizeof(float) * V), "%s: rollback after the wrap != a fresh cache fed step by step",
              what);
        CHECK(short_prefill(m, short_out, short_ref) == 0, "%s: short prefill calls failed", what);
        CHECK(!memcmp(short_out, short_ref, sizeof(float) * V),
              "%s: %d tokens at once != one at a time (before the ring wraps)", what, N_SHORT);
        if (t == SP_KV_F32) memcpy(f32_short, short_out, sizeof(float) * V);
        double sd = 0, sl = 0;
        for (int i = 0; i < V; i++) {
            if (fabs((double)short_out[i] - f32_short[i]) > sd) sd = fabs((double)short_out[i] - f32_short[i]);
            if (fabs(f32_short[i]) > sl) sl = fabs(f32_short[i]);
        }
        CHECK(sd <= tol[t] * sl, "%s: short prefill logits differ from f32 by %.3g (tolerance %.3g)", what, sd,
              tol[t] * sl);
        if (t == SP_KV_F32) memcpy(f32_out, out, sizeof(float) * V);
        double dmax = 0, lmax = 0;
        for (int i = 0; i < V; i++) {
            double d = fabs((double)out[i] - f32_out[i]);
            if (d > dmax) dmax = d;
            if (fabs(f32_out[i]) > lmax) lmax = fabs(f32_out[i]);
        }
        printf("  %s: largest logit difference from f32 %.3g (%.3g%% of the largest |logit| %.3g)\n", what, dmax,
               100 * dmax / lmax, lmax);
        CHECK(dmax <= tol[t] * lmax, "%s: logits differ from f32 by %.3g (tolerance %.3g)", what, dmax, tol[t] * lmax);
        CHECK(t == SP_KV_F32 || dmax > 0, "%s: logits identical to f32: the type is not applied", what);
    }
    sp_model_free(m);
    free(f32_out), free(out), free(ref), free(f32_short), free(short_out), free(short_ref);
}

static void test_types_qwen3(void) { run_arch("qwen3"); }
static void test_types_gemma4(void) { run_arch("gemma4"); }

static void test_type_names(void) {
    sp_kv_type t;
    sp_err err = {{0}};
    CHECK(sp_kv_type_parse("q8_0", &t, &err) == 0 && t == SP_KV_Q8_0, "q8_0");
    CHECK(sp_kv_type_parse("f16", &t, &err) == 0 && t == SP_KV_F16, "f16");
    CHECK(sp_kv_type_parse("q4_0", &t, &err) == -1 && strstr(err.msg, "q4_0") && strstr(err.msg, "bf16"),
          "q4_0: %s", err.msg);
}

int main(void) {
    RUN(test_type_names);
    RUN(test_types_qwen3);
    RUN(test_types_gemma4);
    return harness_done("test_kv_types");
}
