/* test_assistant.c — the Gemma-4 assistant drafter (docs/ASSISTANT.md) drafts losslessly.
 *
 * Random assistants (sp_newdrafter_assistant_write) with both heads, on two random Gemma-4 targets
 * with KV sharing: the fixture tests/data/ref-logits/gemma4 (window 8, k_eq_v, PLE, V 32000) and a
 * `tiny` preset written here (window 16, V 8192).
 * - heads by tensor presence: centroid tensors → centroid head; a config declaring
 *   use_ordered_embeddings / num_centroids without the tensors → tied head;
 * - width / KV-head / head-dim mismatches with the target are load errors naming the key;
 * - the centroid shortcut's argmax equals the argmax of HF's dense masked logits on random inputs;
 * - greedy speculative output equals plain sp_generate for G = 1..8 with the smallest KV ring
 *   (prefill_chunk = G + 1), so generation runs through many window wraps;
 * - state after wraps and rollbacks: a wrapper forces partial acceptance (a prefix of the drafts
 *   replaced by the target's true continuation) and checks every proposal against a fresh
 *   assistant begun on a freshly prefilled, never-wrapped target cache — bit-identical drafts;
 * - the audit passes at temperature 1.0 (drafts at 2.0, so accepts and rejects both happen). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "drafters/assistant.h"
#include "formats/newdrafter_assistant.h"
#include "formats/newmodel.h"
#include "fixtures.h"
#include "harness.h"
#include "decode/audit.h"
#include "decode/spec.h"

#define FIXTURE "tests/data/ref-logits/gemma4"

static char tmp[64];           /* scratch directory for every checkpoint written here */
static char tiny_dir[128];     /* tiny gemma4 target */
static char asst_dir[2][2][128]; /* [target 0 fixture / 1 tiny][head 0 centroid / 1 tied] */
static const char *HEADS[2] = {"centroid", "tied"};

static const char *target_dir(int t) { return t == 0 ? FIXTURE : tiny_dir; }

static sp_model *load_target(int t) {
    sp_model *m = NULL;
    sp_err err = {{0}};
    if (sp_model_load(&m, target_dir(t), 2, &err)) fprintf(stderr, "  %s\n", err.msg);
    return m;
}

static int setup(void) {
    snprintf(tmp, sizeof tmp, "/tmp/specula-asst-XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    sp_err err = {{0}};
    snprintf(tiny_dir, sizeof tiny_dir, "%s/tiny", tmp);
    newmodel_opts o = {.arch = "gemma4", .preset = "tiny", .dtype = SP_DT_F32, .seed = 11};
    if (sp_newmodel_write(tiny_dir, &o, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return -1;
    }
    for (int t = 0; t < 2; t++)
        for (int h = 0; h < 2; h++) {
            snprintf(asst_dir[t][h], sizeof asst_dir[t][h], "%s/asst-%d-%s", tmp, t, HEADS[h]);
            if (sp_newdrafter_assistant_write(asst_dir[t][h], target_dir(t), HEADS[h], 100 + t, NULL, 0, &err)) {
                fprintf(stderr, "  %s\n", err.msg);
                return -1;
            }
        }
    return 0;
}

static void test_heads_by_tensor_presence(void) {
    sp_sample_params sp = sp_sample_params_default();
    sp_err err = {{0}};
    for (int t = 0; t < 2; t++) {
        sp_model *m = load_target(t);
        if (!m) { CHECK(0, "load target"); continue; }
        int V = sp_model_config(m)->vocab_size;
        for (int h = 0; h < 2; h++) {
            sp_drafter *d = sp_drafter_assistant(asst_dir[t][h], m, &sp, &err);
            CHECK(d != NULL, "%s", err.msg);
            if (!d) continue;
            int width, centroid, n_cand;
            sp_assistant_info(d, &width, &centroid, &n_cand);
            CHECK(centroid == (h == 0), "target %d %s: centroid head %d", t, HEADS[h], centroid);
            CHECK(h == 1 || (n_cand == 32 * 128 && n_cand < V), "candidates %d of %d", n_cand, V);
            CHECK(d->wants_hidden == 1 && d->provides_q == 0, "greedy drafter flags");
            sp_drafter_free(d);
        }
        /* config says ordered embeddings with 64 centroids, the file has no centroid tensors */
        char dir[160];
        snprintf(dir, sizeof dir, "%s/declared-%d", tmp, t);
        const char *sets[] = {"use_ordered_embeddings=true", "num_centroids=64"};
        CHECK(sp_newdrafter_assistant_write(dir, target_dir(t), "tied", 5, sets, 2, &err) == 0, "%s", err.msg);
        sp_drafter *d = sp_drafter_assistant(dir, m, &sp, &err);
        CHECK(d != NULL, "declared centroids without tensors must load: %s", err.msg);
        if (d) {
            int centroid;
            sp_assistant_info(d, NULL, &centroid, NULL);
            CHECK(centroid == 0, "no centroid tensors must give the tied head");
        }
        sp_drafter_free(d);
        sp_model_free(m);
    }
}

static void test_mismatch_errors(void) {
    sp_sample_params sp = sp_sample_params_default();
    sp_err err = {{0}};
    sp_model *fx = load_target(0), *tiny = load_target(1);
    if (!fx || !tiny) { CHECK(0, "load targets"); goto done; }
    /* the fixture's assistant (backbone 32) on the tiny target (H 64) */
    sp_drafter *d = sp_drafter_assistant(asst_dir[0][0], tiny, &sp, &err);
    CHECK(!d && strstr(err.msg, "backbone_hidden_size"), "width mismatch: %s", d ? "accepted" : err.msg);
    sp_drafter_free(d);
    struct { const char *set, *expect; } cases[] = {
        {"num_key_value_heads=1", "KV heads"},     /* the fixture's sliding layers have 2 */
        {"head_dim=32", "head_dim"},               /* sliding layers have 16 */
        {"sliding_window=16", "sliding_window"},   /* the fixture's window is 8 */
        {"backbone_hidden_size=48", "backbone_hidden_size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[160];
        snprintf(dir, sizeof dir, "%s/bad-%zu", tmp, i);
        CHECK(sp_newdrafter_assistant_write(dir, FIXTURE, "tied", 7, &cases[i].set, 1, &err) == 0, "%s", err.msg);
        d = sp_drafter_assistant(dir, fx, &sp, &err);
        CHECK(!d && strstr(err.msg, cases[i].expect), "%s: %s", cases[i].set, d ? "accepted" : err.msg);
        sp_drafter_free(d);
    }
done:
    sp_model_free(fx);
    sp_model_free(tiny);
}

static void test_centroid_argmax(void) {
    sp_sample_params sp = sp_sample_params_default();
    sp_err err = {{0}};
    for (int t = 0; t < 2; t++) {
        sp_model *m = load_target(t);
        if (!m) { CHECK(0, "load target"); continue; }
        sp_drafter *d = sp_drafter_assistant(asst_dir[t][0], m, &sp, &err);
        CHECK(d != NULL, "%s", err.msg);
        if (!d) { sp_model_free(m); continue; }
        int V = sp_model_config(m)->vocab_size, w, n_cand;
        sp_assistant_info(d, &w, NULL, &n_cand);
        float *h = malloc(sizeof(float) * (size_t)w), *dense = malloc(sizeof(float) * (size_t)V);
        for (int r = 0; r < 40; r++) {
            harness_fill(h, (size_t)w, 0.5f + 0.25f * (float)(r % 8), (unsigned)(1000 * t + r));
            int fast = sp_assistant_head_argmax(d, h);
            CHECK(sp_assistant_head_dense(d, h, dense) == 0, "dense head");
            int ref = sp_sample_argmax(dense, V);
            CHECK(fast == ref, "target %d input %d: shortcut argmax %d, dense masked argmax %d", t, r, fast, ref);
            /* the mask is real: V − n_cand tokens hold the single floor value min − 1 */
            float floor = dense[ref];
            for (int v = 0; v < V; v++)
                if (dense[v] < floor) floor = dense[v];
            int n_floor = 0;
            for (int v = 0; v < V; v++) n_floor += dense[v] == floor;
            CHECK(n_floor == V - n_cand, "masked tokens %d, expected %d", n_floor, V - n_cand);
        }
        free(h);
        free(dense);
        sp_drafter_free(d);
        sp_model_free(m);
    }
}

/* the fixture prompt into prompt[32] and N greedy tokens of plain decoding into ref[64] (gp: the
 * greedy params used, max_new N, EOS ignored); returns the prompt length */
static int plain_reference(sp_model *m, int N, int32_t *prompt, int32_t *ref, sp_gen_params *gp, sp_err *err) {
    int np = fixture_prompt(prompt, sp_model_config(m)->vocab_size);
    *gp = sp_gen_params_default();
    gp->max_new = N;
    gp->ignore_eos = 1;
    sp_gen_stats gs;
    CHECK(sp_generate(m, NULL, prompt, np, gp, ref, 64, &gs, err) == 0, "%s", err->msg);
    return np;
}

static void test_greedy_identity(void) {
    sp_err err = {{0}};
    for (int t = 0; t < 2; t++) {
        sp_model *m = load_target(t);
        if (!m) { CHECK(0, "load target"); continue; }
        int N = 40;
        int32_t prompt[32], ref[64], out[64];
        sp_gen_params gp;
        int np = plain_reference(m, N, prompt, ref, &gp, &err);
        for (int h = 0; h < 2; h++) {
            sp_drafter *d = sp_drafter_assistant(asst_dir[t][h], m, &gp.sample, &err);
            CHECK(d != NULL, "%s", err.msg);
            if (!d) continue;
            for (int G = 1; G <= 8; G++) {
                if (HARNESS_SANITIZED && G != 1 && G != 3 && G != 8) continue; /* a sample of G */
                sp_spec_params sp = sp_spec_params_default();
                sp.gen = gp;
                sp.draft_max = G;
                sp.gen.prefill_chunk = G + 1; /* smallest ring: wraps every few rounds */
                sp_spec_stats st;
                memset(out, 0xff, sizeof out);
                CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
                CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N),
                      "target %d %s G %d: speculative output differs from plain", t, HEADS[h], G);
                CHECK(st.drafted > 0, "no drafts proposed");
            }
            sp_drafter_free(d);
            /* a sampling drafter under a greedy engine (q not wanted): drafts are just proposals */
            sp_sample_params hot = {1.0f, 0, 1.0f, 0.0f, 9};
            d = sp_drafter_assistant(asst_dir[t][h], m, &hot, &err);
            CHECK(d != NULL, "%s", err.msg);
            if (!d) continue;
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = 4;
            sp.gen.prefill_chunk = 5;
            sp_spec_stats st;
            CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
            CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N), "target %d %s sampled drafts: differs",
                  t, HEADS[h]);
            sp_drafter_free(d);
        }
        sp_model_free(m);
    }
}

/* repetition penalties: the assistant's drafts see them too, output still equals plain decoding */
static void test_greedy_identity_penalties(void) {
    sp_err err = {{0}};
    sp_model *m = load_target(0);
    if (!m) {
        CHECK(0, "load target");
        return;
    }
    int N = 40;
    int32_t prompt[32], ref[64], nopen[64], out[64];
    sp_gen_params gp;
    int np = plain_reference(m, N, prompt, nopen, &gp, &err);
    gp.penalty = (sp_penalty_params){.repeat = 1.5f, .last_n = 16, .presence = 0.3f, .frequency = 0.2f};
    CHECK(sp_generate(m, NULL, prompt, np, &gp, ref, 64, NULL, &err) == 0, "%s", err.msg);
    CHECK(memcmp(ref, nopen, sizeof(int32_t) * N) != 0, "the penalties changed nothing");
    for (int h = 0; h < 2; h++) {
        sp_drafter *d = sp_drafter_assistant(asst_dir[0][h], m, &gp.sample, &err);
        CHECK(d != NULL, "%s", err.msg);
        for (int G = 2; d && G <= 6; G += 4) {
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = G;
            sp_spec_stats st;
            memset(out, 0xff, sizeof out);
            CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
            CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N),
                  "%s G %d: speculative output with penalties differs from plain", HEADS[h], G);
        }
        sp_drafter_free(d);
    }
    sp_model_free(m);
}

/* ---- the forcing wrapper ------------------------------------------------------------------ */

typedef struct {
    sp_drafter *a, *fresh;   /* the assistant under test; a second instance for fresh reference */
    sp_model *m;
    const int32_t *ref;      /* plain greedy continuation */
    int32_t stream[128];     /* committed stream: prompt + emitted (last = pending) */
    int len, n_prompt, round;
    int32_t last[SP_SPEC_MAX_G];
    int n_last;
    int compared, mismatches, forced;
    uint64_t seed;
    sp_err *err;
} wrap_t;

static int w_begin(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                   const sp_drafter_ctx *ctx, sp_err *err) {
    wrap_t *w = d->self;
    memcpy(w->stream, prompt, sizeof(int32_t) * (size_t)n);
    w->len = w->n_prompt = n;
    w->seed = ctx->seed;
    return w->a->begin(w->a, prompt, n, taps, hidden, ctx, err);
}

/* the drafts a fresh assistant proposes from a never-wrapped target cache of the same stream */
static int fresh_drafts(wrap_t *w, int max_g, int32_t *out, sp_err *err) {
    int t = w->len - 1, H = sp_model_config(w->m)->hidden_size;
    sp_kv *kv = sp_kv_create(w->m, 128, 128, err);
    float *hid = malloc(sizeof(float) * (size_t)(t > 0 ? t : 1) * H);
    int n = -1;
    if (!kv || !hid) goto done;
    sp_forward_out o = {.hidden = hid};
    if (t > 0 && sp_model_forward(w->m, kv, w->stream, t, &o, err)) goto done;
    sp_drafter_ctx ctx = {w->m, kv, w->seed, NULL};
    if (w->fresh->begin(w->fresh, w->stream, t + 1, NULL, hid, &ctx, err)) goto done;
    n = w->fresh->propose(w->fresh, max_g, out, NULL, err);
done:
    sp_kv_free(kv);
    free(hid);
    return n;
}

static int w_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    wrap_t *w = d->self;
    int n = w->a->propose(w->a, max_g, drafts, q, err);
    if (n < 0) return -1;
    int32_t fr[SP_SPEC_MAX_G];
    int nf = fresh_drafts(w, max_g, fr, err);
    if (nf < 0) return -1;
    w->compared++;
    if (nf != n || memcmp(fr, drafts, sizeof(int32_t) * (size_t)n)) w->mismatches++;
    /* force acceptance of a prefix: the target's true continuation for k = round % (n + 1) drafts */
    int emitted = w->len - w->n_prompt, k = w->round++ % (n + 1);
    for (int i = 0; i < k && emitted + i < 40; i++) drafts[i] = w->ref[emitted + i];
    w->forced += k;
    memcpy(w->last, drafts, sizeof(int32_t) * (size_t)n);
    w->n_last = n;
    return n;
}

static int w_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    wrap_t *w = d->self;
    for (int i = 0; i < n_acc; i++) w->stream[w->len++] = w->last[i];
    w->stream[w->len++] = next;
    return w->a->commit(w->a, n_acc, next, taps, hidden, err);
}

static void test_forced_acceptance_state(void) {
    sp_err err = {{0}};
    sp_model *m = load_target(0);
    if (!m) { CHECK(0, "load target"); return; }
    int N = 40;
    int32_t prompt[32], ref[64], out[64];
    sp_gen_params gp;
    int np = plain_reference(m, N, prompt, ref, &gp, &err);
    for (int h = 0; h < 2; h++)
        for (int G = 2; G <= 6; G += 4) {
            wrap_t w = {.m = m, .ref = ref, .err = &err};
            w.a = sp_drafter_assistant(asst_dir[0][h], m, &gp.sample, &err);
            w.fresh = sp_drafter_assistant(asst_dir[0][h], m, &gp.sample, &err);
            if (!w.a || !w.fresh) {
                CHECK(0, "%s", err.msg);
                sp_drafter_free(w.a);
                sp_drafter_free(w.fresh);
                continue;
            }
            sp_drafter wd = {.name = "wrap", .self = &w, .wants_hidden = 1, .begin = w_begin, .propose = w_propose,
                             .commit = w_commit};
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = G;
            sp.gen.prefill_chunk = G + 1;
            sp_spec_stats st;
            CHECK(sp_spec_generate(m, &wd, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
            CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N), "%s G %d: output differs", HEADS[h], G);
            CHECK(w.compared > 5 && w.mismatches == 0, "%s G %d: %d of %d proposals differ from a fresh assistant",
                  HEADS[h], G, w.mismatches, w.compared);
            CHECK(st.accepted >= w.forced / 2 && st.accepted > 3, "forced %d, accepted %d", w.forced, st.accepted);
            sp_drafter_free(w.a);
            sp_drafter_free(w.fresh);
        }
    sp_model_free(m);
}

/* q is the distribution drafts are drawn from: one state, many request seeds; the first draft's
 * histogram matches q (Pearson test); the centroid head's q is zero outside its candidates */
static void test_draft_distribution(void) {
    sp_err err = {{0}};
    sp_model *m = load_target(0);
    if (!m) { CHECK(0, "load target"); return; }
    int V = sp_model_config(m)->vocab_size, H = sp_model_config(m)->hidden_size;
    int32_t prompt[12];
    int np = 12, draws = HARNESS_AUDIT_DRAWS(4000);
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)((i * 7919 + 17) % V);
    sp_kv *kv = sp_kv_create(m, 64, 16, &err);
    float *hid = malloc(sizeof(float) * (size_t)np * H), *q = malloc(sizeof(float) * (size_t)V),
          *q0 = malloc(sizeof(float) * (size_t)V);
    int *counts = calloc((size_t)V, sizeof(int));
    sp_forward_out o = {.hidden = hid};
    CHECK(kv && sp_model_forward(m, kv, prompt, np - 1, &o, &err) == 0, "%s", err.msg);
    for (int h = 0; h < 2 && kv; h++) {
        sp_sample_params dq = {1.0f, 0, 1.0f, 0.0f, 0};
        sp_drafter *d = sp_drafter_assistant(asst_dir[0][h], m, &dq, &err);
        CHECK(d != NULL, "%s", err.msg);
        if (!d) continue;
        int n_cand;
        sp_assistant_info(d, NULL, NULL, &n_cand);
        memset(counts, 0, sizeof(int) * (size_t)V);
        int bad = 0;
        for (int r = 0; r < draws; r++) {
            sp_drafter_ctx ctx = {m, kv, 1000 + (uint64_t)r, NULL};
            int32_t t;
            if (d->begin(d, prompt, np, NULL, hid, &ctx, &err) || d->propose(d, 1, &t, q, &err) != 1) {
                CHECK(0, "%s", err.msg);
                break;
            }
            if (r == 0) memcpy(q0, q, sizeof(float) * (size_t)V);
            else bad += memcmp(q0, q, sizeof(float) * (size_t)V) != 0; /* q depends on the state only */
            bad += !(q[t] > 0);
            counts[t]++;
        }
        int nz = 0;
        double sum = 0;
        for (int v = 0; v < V; v++) nz += q0[v] > 0, sum += q0[v];
        CHECK(bad == 0, "%s: q changed with the seed or a draft had q = 0 (%d)", HEADS[h], bad);
        CHECK(fabs(sum - 1.0) < 1e-3, "%s: q sums to %f", HEADS[h], sum);
        CHECK(h == 1 || nz == n_cand, "%s: q has %d non-zero tokens, expected the %d candidates", HEADS[h], nz, n_cand);
        sp_audit_test at = sp_audit_compare(counts, q0, V, draws);
        printf("  %-8s draft histogram vs q: p=%.4f TV %.4f (null %.4f), support %d\n", HEADS[h], at.p_value, at.tv,
               at.tv_null, nz);
        CHECK(!HARNESS_AUDIT_VERDICTS || at.p_value > 0.001, "%s: drafts are not distributed as q (p=%.5f)", HEADS[h],
              at.p_value);
        sp_drafter_free(d);
    }
    sp_kv_free(kv);
    free(hid);
    free(q);
    free(q0);
    free(counts);
    sp_model_free(m);
}

static void test_audit(void) {
    sp_err err = {{0}};
    sp_model *m = load_target(1);
    if (!m) { CHECK(0, "load target"); return; }
    int V = sp_model_config(m)->vocab_size;
    int32_t prompt[12];
    int np = 12;
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)((i * 7919 + 17) % V);
    for (int h = 0; h < 2; h++) {
        sp_spec_params sp = sp_spec_params_default();
        sp.gen.sample = (sp_sample_params){1.0f, 0, 1.0f, 0.0f, 7};
        sp.draft_max = 3;
        sp_sample_params dq = sp.gen.sample;
        dq.temperature = 5.0f; /* random drafter vs peaked random target: hot q for partial acceptance */
        sp_drafter *d = sp_drafter_assistant(asst_dir[1][h], m, &dq, &err);
        CHECK(d != NULL && d->provides_q, "%s", err.msg);
        if (!d) continue;
        sp_audit_result r;
        CHECK(sp_audit_run(m, d, prompt, np, &sp, 2000, 0.001, &r, &err) == 0, "%s", err.msg);
        printf("  %-8s temp 1.0: first p=%.4f TV %.4f (null %.4f), second p=%.4f (%d groups), acceptance %.3f\n",
               HEADS[h], r.first.p_value, r.first.tv, r.first.tv_null, r.second.p_value, r.second_groups,
               r.acceptance_rate);
        CHECK(r.pass, "%s: audit failed", HEADS[h]);
        CHECK(r.acceptance_rate > 0.01 && r.acceptance_rate < 0.99, "%s: acceptance %.3f: accept and reject must "
              "both happen", HEADS[h], r.acceptance_rate);
        sp_drafter_free(d);
    }
    sp_model_free(m);
}

int main(void) {
    if (setup()) {
        printf("FAIL setup\n");
        return 1;
    }
    RUN(test_heads_by_tensor_presence);
    RUN(test_mismatch_errors);
    RUN(test_centroid_argmax);
    RUN(test_greedy_identity);
    RUN(test_greedy_identity_penalties);
    RUN(test_forced_acceptance_state);
    RUN(test_draft_distribution);
    RUN(test_audit);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmp);
    return harness_done("test_assistant");
}
