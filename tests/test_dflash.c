/* test_dflash.c — DFlash / DSpark drafters (src/drafters/dflash.c), new-drafter, schedulers.
 *
 * - random z-lab DFlash, DSpark (vanilla / gated / rnn Markov heads + confidence) and DeepSpec
 *   DFlash drafters on the tiny qwen3 and gemma4 fixture targets: greedy output identical to
 *   plain decoding for B = 1..16, prompt longer than gemma's sliding window, small KV ring;
 * - audit at temperature 1.0 passes for each kind; the docs/DSPARK.md §10 scheduler passes the audit and the
 *   retrospective variant is caught by it (paper Appendix A);
 * - H_ctx grows by accepted + 1 rows per round and equals the taps of a fresh forward;
 * - loading: missing / mis-shaped tensors and bad config keys are errors naming them; q_norm /
 *   k_norm follow the tensors (a "llama" config with them uses them; a partial set is an error);
 * - a Llama-3 target (llama3 rope): new-drafter writes the Qwen3 block with the target's RoPE,
 *   which the loaded drafter applies exactly; greedy output identical to plain;
 * - scheduler unit cases (Algorithm 1 vs the step-by-step form, early stop). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drafters/dflash.h"
#include "formats/newdrafter.h"
#include "formats/safetensors.h"
#include "core/core.h"
#include "fixtures.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "model/model.h" /* the target's RoPE frequencies (test_llama_target) */
#include "decode/audit.h"
#include "decode/calibrate.h"
#include "decode/generate.h"
#include "decode/schedule.h"
#include "decode/spec.h"

static char TMP[] = "/tmp/specula-dflash-XXXXXX";

typedef struct {
    const char *name, *arch, *preset;
    const char *sets[2];
} kind_t;

static const kind_t KINDS[] = {
    {"zlab", "dflash", "b16", {NULL}},
    {"dspark", "dspark", "b7", {NULL}},
    {"dspark-gated", "dspark", "b7", {"markov_head_type=gated"}},
    {"dspark-rnn", "dspark", "b7", {"markov_head_type=rnn"}},
    {"deepspec-dflash", "dspark", "dflash-b7", {NULL}},
};
enum { N_KINDS = sizeof KINDS / sizeof KINDS[0] };
static const char *TARGETS[] = {"qwen3", "gemma4"};

static void drafter_dir(char *out, size_t cap, const char *target, const char *kind) {
    snprintf(out, cap, "%s/%s-%s", TMP, target, kind);
}

static int make_drafters(void) {
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < N_KINDS; k++) {
            char dir[256], tdir[256];
            drafter_dir(dir, sizeof dir, TARGETS[t], KINDS[k].name);
            snprintf(tdir, sizeof tdir, "tests/data/ref-logits/%s", TARGETS[t]);
            newdrafter_opts o = {.arch = KINDS[k].arch, .preset = KINDS[k].preset, .sets = KINDS[k].sets,
                                 .n_sets = KINDS[k].sets[0] ? 1 : 0, .dtype = SP_DT_UNKNOWN, .seed = 11 + k};
            sp_err err = {{0}};
            if (sp_newdrafter_write(dir, tdir, &o, &err)) {
                fprintf(stderr, "new drafter %s: %s\n", dir, err.msg);
                return -1;
            }
        }
    return 0;
}

static sp_drafter *open_drafter(const char *target, const char *kind, sp_model *m, const sp_sample_params *sp,
                                const sp_dflash_opts *o, sp_err *err) {
    char dir[256];
    drafter_dir(dir, sizeof dir, target, kind);
    return sp_drafter_dflash(dir, m, sp, o, err);
}

static void test_new_drafter_layout(void) {
    char dir[256];
    drafter_dir(dir, sizeof dir, "qwen3", "dspark");
    st_set *st;
    sp_err err = {{0}};
    CHECK(sp_st_open_dir(&st, dir, &err) == 0, "%s", err.msg);
    if (!st) return;
    const char *names[] = {"fc.weight", "hidden_norm.weight", "norm.weight", "embed_tokens.weight", "lm_head.weight",
                           "markov_head.markov_w1.weight", "markov_head.markov_w2.weight",
                           "confidence_head.proj.weight", "confidence_head.proj.bias",
                           "layers.1.self_attn.q_norm.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) CHECK(sp_st_find(st, names[i]), "no %s", names[i]);
    const st_tensor *fc = sp_st_find(st, "fc.weight");
    CHECK(fc && fc->shape[0] == 32 && fc->shape[1] == 3 * 32, "fc shape");
    sp_st_close(st);
    int ids[5];
    sp_newdrafter_tap_ids(36, 5, ids);
    CHECK(ids[0] == 1 && ids[1] == 9 && ids[2] == 17 && ids[3] == 25 && ids[4] == 33, "N=36 taps");
    sp_newdrafter_tap_ids(40, 5, ids);
    CHECK(ids[1] == 10 && ids[4] == 37, "N=40 taps");
    sp_newdrafter_tap_ids(32, 5, ids);
    CHECK(ids[1] == 8 && ids[2] == 15 && ids[4] == 29, "N=32 taps");
}

static void test_greedy_identity(void) {
    for (int t = 0; t < 2; t++) {
        sp_model *m = fixture_load(TARGETS[t]);
        if (!m) { CHECK(0, "load"); continue; }
        int V = sp_model_config(m)->vocab_size, N = 32;
        int32_t prompt[32], ref[64], out[64];
        int np = fixture_prompt(prompt, V);
        sp_err err = {{0}};
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = N;
        gp.ignore_eos = 1;
        sp_gen_stats gs;
        CHECK(sp_generate(m, NULL, prompt, np, &gp, ref, 64, &gs, &err) == 0, "%s", err.msg);
        for (int k = 0; k < N_KINDS; k++)
            for (int B = 1; B <= 16; B++) {
                if (k >= 2 && B != 4 && B != 16) continue; /* other heads: a few B */
                /* the sanitizer build: B 1, 3 (the confidence cut), 4, 7 and 16 */
                if (HARNESS_SANITIZED && B != 1 && B != 3 && B != 4 && B != 7 && B != 16) continue;
                sp_spec_params sp = sp_spec_params_default();
                sp.gen = gp;
                sp.draft_max = B;
                sp.gen.prefill_chunk = B + 1;
                sp_dflash_opts o = sp_dflash_opts_default();
                o.max_drafts = B;
                if (B % 3 == 0 && k >= 1 && k <= 3) o.conf_threshold = 0.6f; /* exercise the cut too */
                sp_drafter *d = open_drafter(TARGETS[t], KINDS[k].name, m, &sp.gen.sample, &o, &err);
                CHECK(d, "%s %s: %s", TARGETS[t], KINDS[k].name, err.msg);
                if (!d) continue;
                sp_spec_stats st;
                memset(out, 0xff, sizeof out);
                CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
                CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N), "%s %s B %d: output differs from plain",
                      TARGETS[t], KINDS[k].name, B);
                CHECK(st.drafted > 0, "%s %s B %d: nothing drafted", TARGETS[t], KINDS[k].name, B);
                if (B == 7)
                    printf("  %-6s %-15s B=7: tau %.2f acceptance %.2f (%d drafted)\n", TARGETS[t], KINDS[k].name,
                           st.mean_accept_len, st.acceptance_rate, st.drafted);
                sp_drafter_free(d);
            }
        sp_model_free(m);
    }
}

#define V_OF(m) (sp_model_config(m)->vocab_size)

/* ---- H_ctx: a wrapper that checks the context after every round -------------------------- */
typedef struct {
    sp_drafter *in;
    int rounds, bad;
    int V;         /* > 0: fold every proposal (drafts and q rows) into sum */
    uint64_t sum;
} wrap_t;

static int w_begin(sp_drafter *d, const int32_t *p, int n, const float *taps, const float *hid, const sp_drafter_ctx *c,
                   sp_err *err) {
    wrap_t *w = d->self;
    int rc = w->in->begin(w->in, p, n, taps, hid, c, err), rows;
    sp_dflash_context(w->in, &rows);
    if (rows != n - 1) w->bad++;
    return rc;
}
static int w_propose(sp_drafter *d, int g, int32_t *dr, float *q, sp_err *err) {
    wrap_t *w = d->self;
    int n = w->in->propose(w->in, g, dr, q, err);
    for (int j = 0; w->V > 0 && j < n; j++) {
        w->sum = w->sum * 1000003u + (uint32_t)dr[j];
        for (int v = 0; q && v < w->V; v++) {
            uint32_t u;
            memcpy(&u, q + (size_t)j * w->V + v, 4);
            w->sum = (w->sum ^ u) * 0x100000001b3ull;
        }
    }
    return n;
}
static int w_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hid, sp_err *err) {
    wrap_t *w = d->self;
    int before, after;
    sp_dflash_context(w->in, &before);
    int rc = w->in->commit(w->in, n_acc, next, taps, hid, err);
    sp_dflash_context(w->in, &after);
    if (after != before + n_acc + 1) w->bad++;
    w->rounds++;
    return rc;
}

/* the drafter that runs w->in through w_begin / w_propose / w_commit */
static sp_drafter wrap_drafter(wrap_t *w) {
    sp_drafter d = {.name = "wrap", .self = w, .n_taps = w->in->n_taps, .tap_layers = w->in->tap_layers,
                    .provides_q = w->in->provides_q, .begin = w_begin, .propose = w_propose, .commit = w_commit};
    return d;
}

/* sampled decoding (temperature 1, the given seed) of max_new tokens, EOS ignored, up to 7 drafts */
static sp_spec_params sampled_params(int max_new, uint64_t seed) {
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.max_new = max_new;
    sp.gen.ignore_eos = 1;
    sp.gen.sample = (sp_sample_params){1.0f, 0, 1.0f, 0, seed};
    sp.draft_max = 7;
    return sp;
}

static void test_context_growth(void) {
    for (int t = 0; t < 2; t++) {
        sp_model *m = fixture_load(TARGETS[t]);
        if (!m) { CHECK(0, "load"); continue; }
        const sp_config *c = sp_model_config(m);
        int V = c->vocab_size, H = c->hidden_size;
        int32_t prompt[32], out[64], stream[128];
        int np = fixture_prompt(prompt, V);
        sp_err err = {{0}};
        sp_spec_params sp = sampled_params(30, 5); /* sampling: partial acceptance */
        sp_dflash_opts o = sp_dflash_opts_default();
        o.keep_taps = 1;
        sp_sample_params dq = sp.gen.sample;
        dq.temperature = 2.0f;
        sp_drafter *in = open_drafter(TARGETS[t], "dspark", m, &dq, &o, &err);
        CHECK(in, "%s", err.msg);
        if (!in) { sp_model_free(m); continue; }
        wrap_t w = {in, 0, 0, 0, 0};
        sp_drafter d = wrap_drafter(&w);
        sp_spec_stats st;
        CHECK(sp_spec_generate(m, &d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
        CHECK(w.bad == 0 && w.rounds > 3, "%s: context grew wrongly in %d of %d rounds", TARGETS[t], w.bad, w.rounds);
        CHECK(st.accepted > 0 && st.accepted < st.drafted, "%s: want partial acceptance (%d of %d)", TARGETS[t],
              st.accepted, st.drafted);
        /* the rows equal the taps of one fresh forward over the committed stream */
        int rows;
        const float *ctx = sp_dflash_context(in, &rows);
        memcpy(stream, prompt, sizeof(int32_t) * np);
        memcpy(stream + np, out, sizeof(int32_t) * st.emitted);
        CHECK(rows >= np - 1 && rows <= np + st.emitted - 1, "%s: %d context rows", TARGETS[t], rows);
        sp_kv *kv = sp_kv_create(m, 128, 128, &err);
        int m_t = in->n_taps;
        float *taps = malloc(sizeof(float) * (size_t)rows * m_t * H);
        sp_forward_out fo = {.tap_layers = in->tap_layers, .n_taps = m_t, .taps = taps};
        CHECK(kv && taps && sp_model_forward(m, kv, stream, rows, &fo, &err) == 0, "%s", err.msg);
        double maxd = 0;
        for (size_t i = 0; i < (size_t)rows * m_t * H; i++) {
            double dd = fabs((double)taps[i] - ctx[i]);
            if (dd > maxd) maxd = dd;
        }
        CHECK(maxd == 0, "%s: H_ctx differs from a fresh forward by %g", TARGETS[t], maxd);
        printf("  %-6s H_ctx: %d rows after %d rounds (accepted %d of %d), max diff %g\n", TARGETS[t], rows, w.rounds,
               st.accepted, st.drafted, maxd);
        free(taps);
        sp_kv_free(kv);
        sp_drafter_free(in);
        sp_model_free(m);
    }
}

/* the vanilla Markov bias cache changes nothing: every draft and q row of a sampled run (many
 * previous tokens, direct-mapped slots that collide) equals the run that recomputes each bias */
static void test_bias_cache(void) {
    for (int t = 0; t < 2; t++) {
        sp_model *m = fixture_load(TARGETS[t]);
        if (!m) { CHECK(0, "load"); continue; }
        int32_t prompt[32], out[2][96];
        int np = fixture_prompt(prompt, V_OF(m));
        uint64_t sums[2];
        int emitted[2];
        for (int c = 0; c < 2; c++) {
            sp_err err = {{0}};
            sp_spec_params sp = sampled_params(80, 9);
            sp_dflash_opts o = sp_dflash_opts_default();
            o.no_bias_cache = c;
            sp_drafter *in = open_drafter(TARGETS[t], "dspark", m, &sp.gen.sample, &o, &err);
            CHECK(in, "%s", err.msg);
            if (!in) break;
            wrap_t w = {in, 0, 0, V_OF(m), 0};
            sp_drafter d = wrap_drafter(&w);
            sp_spec_stats st;
            CHECK(sp_spec_generate(m, &d, prompt, np, &sp, out[c], 96, &st, &err) == 0, "%s", err.msg);
            sums[c] = w.sum, emitted[c] = st.emitted;
            sp_drafter_free(in);
        }
        CHECK(sums[0] == sums[1] && emitted[0] == emitted[1] && !memcmp(out[0], out[1], sizeof(int32_t) * emitted[0]),
              "%s: proposals with the Markov bias cache differ from recomputed ones", TARGETS[t]);
        sp_model_free(m);
    }
}

/* ---- audit ------------------------------------------------------------------------------------ */
static void audit_case(sp_model *m, const char *target, const char *kind, sp_verify_policy pol, const sp_sps_table *sps,
                       float dtemp, int expect_pass, const char *label, int draws) {
    int32_t prompt[6] = {1, 5493, 20509, 14029, 77, 901};
    sp_err err = {{0}};
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.sample = (sp_sample_params){1.0f, 0, 1.0f, 0.0f, 7};
    sp.draft_max = 4;
    sp_sample_params dq = sp.gen.sample;
    dq.temperature = dtemp;
    sp_dflash_opts o = sp_dflash_opts_default();
    o.policy = pol;
    o.sps = sps;
    o.max_drafts = 4;
    sp_drafter *d = open_drafter(target, kind, m, &dq, &o, &err);
    CHECK(d, "%s", err.msg);
    if (!d) return;
    sp_audit_result r;
    CHECK(sp_audit_run(m, d, prompt, 6, &sp, HARNESS_AUDIT_DRAWS(draws), 0.001, &r, &err) == 0, "%s", err.msg);
    printf("  %-6s %-15s %-10s first p=%.4f TV %.4f (null %.4f), second p=%.4f (%d groups), acc %.2f\n", target, kind,
           label, r.first.p_value, r.first.tv, r.first.tv_null, r.second.p_value, r.second_groups, r.acceptance_rate);
    if (expect_pass < 0 || !HARNESS_AUDIT_VERDICTS) { /* report only (the sanitizer build: fewer draws) */
    } else if (expect_pass) CHECK(r.pass, "%s %s %s: audit failed", target, kind, label);
    else CHECK(!r.pass, "%s %s %s: the audit did not catch the lossy variant", target, kind, label);
    CHECK(r.acceptance_rate > 0.01, "%s %s: acceptance %.3f: the rule was not exercised", target, kind,
          r.acceptance_rate);
    sp_drafter_free(d);
}

/* the drafters at target temperature 1.0 (drafts from a hot q: partial acceptance, still lossless) */
static void test_audit(void) {
    sp_model *m = fixture_load("qwen3");
    if (!m) { CHECK(0, "load"); return; }
    audit_case(m, "qwen3", "zlab", SP_VERIFY_ALL, NULL, 50.0f, 1, "all", 2000);
    audit_case(m, "qwen3", "dspark", SP_VERIFY_ALL, NULL, 50.0f, 1, "all", 2000);
    /* the docs/DSPARK.md §10 scheduler on a cost table where extra verify tokens are dear */
    sp_sps_table sps = {.n = 8};
    for (int b = 1; b <= 8; b++) sps.sps[b] = 1.0 / (1.0 + 0.12 * (b - 1));
    audit_case(m, "qwen3", "dspark", SP_VERIFY_SCHEDULE, &sps, 50.0f, 1, "schedule", 2000);
    sp_model_free(m);
    m = fixture_load("gemma4");
    if (!m) { CHECK(0, "load"); return; }
    audit_case(m, "gemma4", "dspark", SP_VERIFY_ALL, NULL, 50.0f, 1, "all", 1000);
    sp_model_free(m);
}

/* ---- scheduler audit with a controlled drafter (paper Appendix A) ----------------------------
 * Two drafts from q = ½/½ over the target's two likeliest tokens A, B. c_1 is a constant; c_2
 * depends on x_1 (as DSpark's Markov embedding makes it): 1 after A, 0.01 after B. With c_1 = 0.7
 * and the table below the causal scheduler verifies nothing; the retrospective one verifies x_1
 * exactly when x_1 = A, so A is emitted too often. With c_1 = 0.95 the causal scheduler verifies
 * x_1 always and x_2 only after A: lossless, because x_2's admission depends on x_1 alone. */
typedef struct {
    int A, B, V, retro;
    double c1;
    const sp_sps_table *t;
    uint64_t seed, pos;
} toy_t;

static int toy_begin(sp_drafter *d, const int32_t *p, int n, const float *taps, const float *hid,
                     const sp_drafter_ctx *c, sp_err *err) {
    toy_t *s = d->self;
    s->seed = c->seed;
    s->pos = (uint64_t)(n - 1);
    return 0;
}
static int toy_propose(sp_drafter *d, int max_g, int32_t *dr, float *q, sp_err *err) {
    toy_t *s = d->self;
    sp_sched sch;
    sp_sched_begin(&sch, s->t);
    double cs[2];
    int n = 0;
    int32_t x[2];
    /* the block holds 2 drafts whatever max_g (the engine may allow fewer near the end) */
    for (int j = 1; j <= 2; j++) {
        cs[j - 1] = j == 1 ? s->c1 : x[0] == s->A ? 1.0 : 0.01;
        if (!s->retro && (j > max_g || !sp_sched_admit(&sch, cs[j - 1]))) break;
        x[j - 1] = sp_rng_uniform(s->seed, SP_RNG_STREAM_DRAFT, s->pos + (uint64_t)j) < 0.5 ? s->A : s->B;
        n++;
    }
    if (s->retro) n = sp_sched_retrospective(cs, n, s->t);
    if (n > max_g) n = max_g;
    for (int j = 0; j < n; j++) {
        float *qj = q + (size_t)j * s->V;
        memset(qj, 0, sizeof(float) * (size_t)s->V);
        qj[s->A] = qj[s->B] = 0.5f;
        dr[j] = x[j];
    }
    return n;
}
static int toy_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hid, sp_err *err) {
    toy_t *s = d->self;
    s->pos += (uint64_t)n_acc + 1;
    return 0;
}

static void test_scheduler_audit(void) {
    sp_model *m = fixture_load("qwen3");
    if (!m) { CHECK(0, "load"); return; }
    int32_t prompt[6] = {1, 5493, 20509, 14029, 77, 901};
    int V = sp_model_config(m)->vocab_size;
    sp_err err = {{0}};
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.sample = (sp_sample_params){0.5f, 0, 1.0f, 0.0f, 9}; /* a peaked p gives the test power */
    sp.draft_max = 2;
    float *lg = malloc(sizeof(float) * (size_t)V);
    sp_kv *kv = sp_kv_create(m, 16, 16, &err);
    sp_forward_out fo = {.last_logits = lg};
    CHECK(kv && lg && sp_model_forward(m, kv, prompt, 6, &fo, &err) == 0, "%s", err.msg);
    toy_t toy = {.V = V, .A = sp_sample_argmax(lg, V)};
    lg[toy.A] = -INFINITY;
    toy.B = sp_sample_argmax(lg, V);
    sp_sps_table t = {.n = 3, .sps = {0, 1.0, 0.55, 0.5}};
    toy.t = &t;
    struct { double c1; int retro, expect_pass; const char *name; } cases[3] = {
        {0.95, 0, 1, "causal c1=0.95"}, {0.7, 0, 1, "causal c1=0.7"}, {0.7, 1, 0, "RETROSPECTIVE c1=0.7"}};
    for (int c = 0; c < 3; c++) {
        toy.c1 = cases[c].c1;
        toy.retro = cases[c].retro;
        sp_drafter d = {.name = "toy", .self = &toy, .provides_q = 1, .begin = toy_begin, .propose = toy_propose,
                        .commit = toy_commit};
        sp_audit_result r;
        CHECK(sp_audit_run(m, &d, prompt, 6, &sp, HARNESS_AUDIT_DRAWS(2000), 0.001, &r, &err) == 0, "%s", err.msg);
        printf("  %-22s first p=%.4g TV %.4f (null %.4f), second p=%.4g, acc %.2f\n", cases[c].name, r.first.p_value,
               r.first.tv, r.first.tv_null, r.second.p_value, r.acceptance_rate);
        if (!HARNESS_AUDIT_VERDICTS) { /* the sanitizer build: fewer draws, verdicts unchecked */
        } else if (cases[c].expect_pass) CHECK(r.pass, "%s: audit failed", cases[c].name);
        else CHECK(!r.pass, "%s: the audit did not catch the retrospective scheduler", cases[c].name);
    }
    free(lg);
    sp_kv_free(kv);
    sp_model_free(m);
}

static void test_scheduler_unit(void) {
    sp_sps_table t = {.n = 8};
    for (int b = 1; b <= 8; b++) t.sps[b] = 1.0 / (1.0 + 0.2 * (b - 1));
    /* one request: Algorithm 1 == the step-by-step form, on random confidences */
    for (int trial = 0; trial < 200; trial++) {
        double c[8];
        for (int j = 0; j < 8; j++) c[j] = sp_rng_uniform(42, (uint64_t)trial, (uint64_t)j);
        int len;
        sp_sched_prefix(1, 8, c, &t, &len);
        sp_sched s;
        sp_sched_begin(&s, &t);
        int n = 0;
        while (n < 8 && sp_sched_admit(&s, c[n])) n++;
        CHECK(len == n, "trial %d: prefix %d vs step %d", trial, len, n);
        CHECK(sp_sched_retrospective(c, 8, &t) >= n, "retrospective shorter than causal");
    }
    /* early stop: a dip then a gain — causal stops at the dip, retrospective looks past it */
    double c[3] = {0.5, 1.0, 1.0};
    sp_sps_table t2 = {.n = 4, .sps = {0, 1.0, 0.6, 0.6, 0.6}};
    int len;
    sp_sched_prefix(1, 3, c, &t2, &len);
    CHECK(len == 0, "causal admitted %d after a non-improving step", len);
    CHECK(sp_sched_retrospective(c, 3, &t2) == 3, "retrospective %d", sp_sched_retrospective(c, 3, &t2));
    /* two requests: slots admitted in order of prefix survival across requests */
    double c2[6] = {0.9, 0.9, 0.9, 0.5, 0.5, 0.5};
    int l2[2];
    sp_sps_table t3 = {.n = 8};
    for (int b = 1; b <= 8; b++) t3.sps[b] = 1.0 / (1.0 + 0.1 * (b - 2 > 0 ? b - 2 : 0));
    sp_sched_prefix(2, 3, c2, &t3, l2);
    CHECK(l2[0] >= l2[1] && l2[0] > 0, "two requests: %d %d", l2[0], l2[1]);
}

/* ---- loading errors ----------------------------------------------------------------------- */
/* name is one of the '|'-separated names in list */
static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* copy src's checkpoint to dst without the tensors in `drop` ('|'-separated) and with `reshape`
 * cut to one row fewer */
static int write_variant(const char *src, const char *dst, const char *drop, const char *reshape, const char *config) {
    char p[512], cmd[1200];
    sp_err err = {{0}};
    st_set *st;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dst, dst);
    if (system(cmd) != 0) return -1;
    snprintf(p, sizeof p, "%s/config.json", dst);
    if (config) {
        if (sp_write_file_atomic(p, config, strlen(config), &err)) return -1;
    } else {
        snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/config.json'", src, dst);
        if (system(cmd) != 0) return -1;
    }
    if (!drop && !reshape) {
        snprintf(cmd, sizeof cmd, "ln -s \"$(realpath '%s/model.safetensors')\" '%s/model.safetensors'", src, dst);
        return system(cmd) == 0 ? 0 : -1;
    }
    if (sp_st_open_dir(&st, src, &err)) return -1;
    st_writer *w = sp_st_writer_create();
    int rc = 0;
    for (int i = 0; i < sp_st_count(st) && !rc; i++) {
        const st_tensor *t = sp_st_at(st, i);
        if (drop && in_list(drop, t->name)) continue;
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (reshape && !strcmp(t->name, reshape)) shape[0] = t->shape[0] > 1 ? t->shape[0] - 1 : 2;
        if (shape[0] == 2 && t->shape[0] == 1) { /* grow a one-row tensor: duplicate the data */
            static float buf[1 << 16];
            memcpy(buf, t->data, t->nbytes);
            memcpy((char *)buf + t->nbytes, t->data, t->nbytes);
            rc = sp_st_writer_add(w, t->name, t->dtype, t->ndim, shape, buf, &err);
        } else {
            rc = sp_st_writer_add_ref(w, t->name, t->dtype, t->ndim, shape, t->data, &err);
        }
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    if (!rc) rc = sp_st_writer_save(w, p, &err);
    sp_st_writer_free(w);
    sp_st_close(st);
    return rc;
}

static void expect_load_error(sp_model *m, const char *dir, const char *want, const char *what) {
    sp_err err = {{0}};
    sp_sample_params sp = sp_sample_params_default();
    sp_drafter *d = sp_drafter_dflash(dir, m, &sp, NULL, &err);
    CHECK(d == NULL && strstr(err.msg, want), "%s: loaded=%d, message \"%s\" does not name %s", what, d != NULL,
          err.msg, want);
    sp_drafter_free(d);
}

static void test_load_errors(void) {
    sp_model *m = fixture_load("qwen3");
    if (!m) { CHECK(0, "load"); return; }
    char src[256], dst[300];
    drafter_dir(src, sizeof src, "qwen3", "dspark");
    snprintf(dst, sizeof dst, "%s/broken", TMP);
    st_set *st;
    sp_err err = {{0}};
    CHECK(sp_st_open_dir(&st, src, &err) == 0, "%s", err.msg);
    if (!st) { sp_model_free(m); return; }
    int n = sp_st_count(st), tested = 0;
    for (int i = 0; i < n; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s", sp_st_at(st, i)->name);
        if (!strcmp(name, "embed_tokens.weight") || !strcmp(name, "lm_head.weight")) continue; /* optional copies */
        CHECK(write_variant(src, dst, name, NULL, NULL) == 0, "write without %s", name);
        expect_load_error(m, dst, name, "missing tensor");
        if (strstr(name, "layers.1.") || strstr(name, "layers.0.self_attn.q_norm")) continue; /* enough shapes */
        CHECK(write_variant(src, dst, NULL, name, NULL) == 0, "write reshaped %s", name);
        expect_load_error(m, dst, name, "mis-shaped tensor");
        tested++;
    }
    CHECK(tested >= 10, "only %d tensors tested", tested);
    sp_st_close(st);
    /* config keys */
    char path[300], *text = NULL;
    snprintf(path, sizeof path, "%s/config.json", src);
    CHECK(sp_read_file(path, &text, NULL, &err) == 0, "%s", err.msg);
    struct { const char *key, *value, *want; } cases[] = {
        {"architectures", "[\"LlamaForCausalLM\"]", "architectures"},
        {"mask_token_id", "99999", "mask_token_id"},
        {"mask_token_id", NULL, "mask_token_id"},
        {"mask_token_id", "\"x\"", "mask_token_id"},
        {"target_layer_ids", "[2, 1, 0]", "target_layer_ids"},
        {"target_layer_ids", "[0, 1, 3]", "target_layer_ids"},
        {"target_layer_ids", "[-1, 1]", "target_layer_ids"},
        {"target_layer_ids", NULL, "target_layer_ids"},
        {"num_target_layers", "9", "num_target_layers"},
        {"block_size", "0", "block_size"},
        {"block_size", NULL, "block_size"},
        {"markov_head_type", "\"lstm\"", "markov_head_type"},
        {"markov_rank", "8", "markov_head.markov_w1.weight"},
        {"markov_rank", "0", "markov_rank"},
        {"enable_confidence_head", "\"yes\"", "enable_confidence_head"},
        {"hidden_size", "64", "hidden_size"},
        {"num_hidden_layers", "3", "layers.2."},
    };
    for (size_t c = 0; text && c < sizeof cases / sizeof cases[0]; c++) {
        json_t *root = json_loads(text, 0, NULL);
        if (cases[c].value) json_object_set_new(root, cases[c].key, json_loads(cases[c].value, JSON_DECODE_ANY, NULL));
        else json_object_del(root, cases[c].key);
        char *cfg = json_dumps(root, 0);
        json_decref(root);
        CHECK(write_variant(src, dst, NULL, NULL, cfg) == 0, "write config");
        char what[128];
        snprintf(what, sizeof what, "config %s = %s", cases[c].key, cases[c].value ? cases[c].value : "(absent)");
        expect_load_error(m, dst, cases[c].want, what);
        free(cfg);
    }
    /* q_norm / k_norm decided by the tensors (dflash.c qk_norm_decide): a partial set is an error
     * naming the first missing tensor whatever model_type says; none at all with model_type qwen3 */
    struct { const char *model_type, *drop, *want; } qk[] = {
        {"llama", "layers.1.self_attn.q_norm.weight|layers.1.self_attn.k_norm.weight",
         "missing tensor layers.1.self_attn.q_norm.weight while layers.0.self_attn.q_norm.weight"},
        {"llama", "layers.0.self_attn.k_norm.weight|layers.1.self_attn.k_norm.weight",
         "missing tensor layers.0.self_attn.k_norm.weight while layers.0.self_attn.q_norm.weight"},
        {"llama", "layers.0.self_attn.q_norm.weight|layers.1.self_attn.q_norm.weight",
         "missing tensor layers.0.self_attn.q_norm.weight while layers.0.self_attn.k_norm.weight"},
        {"qwen3", "layers.1.self_attn.k_norm.weight", "missing tensor layers.1.self_attn.k_norm.weight while"},
        {"qwen3",
         "layers.0.self_attn.q_norm.weight|layers.0.self_attn.k_norm.weight|layers.1.self_attn.q_norm.weight|"
         "layers.1.self_attn.k_norm.weight",
         "missing tensor layers.0.self_attn.q_norm.weight (config model_type qwen3"},
    };
    for (size_t c = 0; text && c < sizeof qk / sizeof qk[0]; c++) {
        json_t *root = json_loads(text, 0, NULL);
        json_object_set_new(root, "model_type", json_string(qk[c].model_type));
        char *cfg = json_dumps(root, 0);
        json_decref(root);
        CHECK(write_variant(src, dst, qk[c].drop, NULL, cfg) == 0, "write qk variant");
        char what[400];
        snprintf(what, sizeof what, "model_type %s without %s", qk[c].model_type, qk[c].drop);
        expect_load_error(m, dst, qk[c].want, what);
        free(cfg);
    }
    free(text);
    /* a z-lab drafter refuses the DSpark-only verify schedule (no confidence head) */
    char zl[256];
    drafter_dir(zl, sizeof zl, "qwen3", "zlab");
    sp_sps_table t = {.n = 2, .sps = {0, 1, 0.9}};
    sp_dflash_opts o = sp_dflash_opts_default();
    o.policy = SP_VERIFY_SCHEDULE;
    o.sps = &t;
    sp_sample_params sp = sp_sample_params_default();
    sp_drafter *d = sp_drafter_dflash(zl, m, &sp, &o, &err);
    CHECK(!d && strstr(err.msg, "confidence"), "schedule without confidence head: %s", err.msg);
    sp_drafter_free(d);
    /* a drafter for another target */
    drafter_dir(zl, sizeof zl, "gemma4", "dspark");
    expect_load_error(m, zl, "num_target_layers", "drafter of another target");
    sp_model_free(m);
}

/* ---- q/k norms by tensor presence, a Llama target ----------------------------------------------- */
/* checksum of every draft and q row of a sampled run of the drafter in dir (-> *qk its qk_norm) */
static uint64_t proposal_sum(sp_model *m, const char *dir, int *qk) {
    int32_t prompt[32], out[64];
    int np = fixture_prompt(prompt, V_OF(m));
    sp_err err = {{0}};
    sp_spec_params sp = sampled_params(24, 3);
    sp_drafter *in = sp_drafter_dflash(dir, m, &sp.gen.sample, NULL, &err);
    CHECK(in, "%s: %s", dir, err.msg);
    if (!in) return 0;
    sp_dflash_info info;
    CHECK(sp_dflash_info_get(in, &info) == 0, "info");
    *qk = info.qk_norm;
    wrap_t w = {in, 0, 0, V_OF(m), 0};
    sp_drafter d = wrap_drafter(&w);
    sp_spec_stats st;
    CHECK(sp_spec_generate(m, &d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
    CHECK(st.drafted > 0, "%s: nothing drafted", dir);
    sp_drafter_free(in);
    return w.sum;
}

/* a checkpoint whose config says "llama" but ships q_norm / k_norm in every layer uses them (its
 * proposals equal those of the same tensors under model_type qwen3); without them it loads and
 * runs without norms (other proposals) */
static void test_qk_norm_presence(void) {
    sp_model *m = fixture_load("qwen3");
    if (!m) { CHECK(0, "load"); return; }
    char src[256], dst[300], path[300], *text = NULL;
    sp_err err = {{0}};
    drafter_dir(src, sizeof src, "qwen3", "dspark");
    snprintf(dst, sizeof dst, "%s/qk-llama", TMP);
    snprintf(path, sizeof path, "%s/config.json", src);
    CHECK(sp_read_file(path, &text, NULL, &err) == 0, "%s", err.msg);
    if (!text) { sp_model_free(m); return; }
    json_t *root = json_loads(text, 0, NULL);
    json_object_set_new(root, "model_type", json_string("llama"));
    char *cfg = json_dumps(root, 0);
    json_decref(root);
    int qk_ref = -1, qk_llama = -1, qk_none = -1;
    uint64_t ref = proposal_sum(m, src, &qk_ref);
    CHECK(write_variant(src, dst, NULL, NULL, cfg) == 0, "write llama config");
    uint64_t with = proposal_sum(m, dst, &qk_llama);
    CHECK(write_variant(src, dst,
                        "layers.0.self_attn.q_norm.weight|layers.0.self_attn.k_norm.weight|"
                        "layers.1.self_attn.q_norm.weight|layers.1.self_attn.k_norm.weight",
                        NULL, cfg) == 0, "write llama config without norms");
    uint64_t without = proposal_sum(m, dst, &qk_none);
    CHECK(qk_ref == 1 && qk_llama == 1 && qk_none == 0, "qk_norm: qwen3 %d, llama with norms %d, without %d", qk_ref,
          qk_llama, qk_none);
    CHECK(with == ref, "model_type llama with q/k norm tensors: proposals differ from model_type qwen3 (norms ignored?)");
    CHECK(without != ref, "without q/k norm tensors the proposals should change");
    free(cfg);
    free(text);
    sp_model_free(m);
}

/* new-drafter for a Llama-3 target (tests/data/ref-logits/llama: llama3 rope scaling, eps 1e-5,
 * no q/k norm): the drafter is the Qwen3 block as `specula train` writes it (model_type qwen3,
 * rope_scaling kept, q_norm / k_norm in every layer), it rotates exactly like the target, and
 * greedy speculative output equals plain decoding for z-lab DFlash and DSpark */
static void test_llama_target(void) {
    const char *tdir = "tests/data/ref-logits/llama";
    sp_model *m = fixture_load("llama");
    if (!m) { CHECK(0, "load"); return; }
    const sp_config *tc = sp_model_config(m);
    CHECK(tc->arch == SP_ARCH_LLAMA && !tc->qk_norm && tc->rope.type == SP_ROPE_LLAMA3, "fixture is not llama3");
    int V = tc->vocab_size;
    for (int k = 0; k < 2; k++) {
        const char *kind = k ? "dspark" : "zlab";
        char dir[256], p[300], *text = NULL;
        drafter_dir(dir, sizeof dir, "llama", kind);
        newdrafter_opts o = {.arch = k ? "dspark" : "dflash", .preset = k ? "b7" : "b16", .dtype = SP_DT_UNKNOWN,
                             .seed = 29 + k};
        sp_err err = {{0}};
        CHECK(sp_newdrafter_write(dir, tdir, &o, &err) == 0, "new drafter %s: %s", kind, err.msg);
        /* config.json: model_type qwen3, the target's llama3 rope_scaling, rope_theta and eps */
        snprintf(p, sizeof p, "%s/config.json", dir);
        CHECK(sp_read_file(p, &text, NULL, &err) == 0, "%s", err.msg);
        json_t *root = text ? json_loads(text, 0, NULL) : NULL;
        json_t *rs = json_object_get(root, "rope_scaling");
        const char *mt = json_string_value(json_object_get(root, "model_type"));
        const char *rt = json_string_value(json_object_get(rs, "rope_type"));
        json_t *mask = k ? json_object_get(root, "mask_token_id")
                         : json_object_get(json_object_get(root, "dflash_config"), "mask_token_id");
        CHECK(mt && !strcmp(mt, "qwen3"), "%s: model_type %s (want qwen3)", kind, mt ? mt : "(none)");
        CHECK(rt && !strcmp(rt, "llama3") && json_number_value(json_object_get(rs, "factor")) == 8.0 &&
                  json_integer_value(json_object_get(rs, "original_max_position_embeddings")) == 512,
              "%s: rope_scaling is not the target's llama3 scaling", kind);
        CHECK(json_integer_value(mask) == V - 1, "%s: mask_token_id %d (want V-1 = %d for a non-Llama-3 vocab)", kind,
              (int)json_integer_value(mask), V - 1);
        json_decref(root);
        sp_config dc;
        CHECK(text && sp_config_parse(&dc, text, p, &err) == 0, "%s", err.msg);
        free(text);
        CHECK(dc.arch == SP_ARCH_QWEN3 && dc.qk_norm && dc.rope.type == SP_ROPE_LLAMA3 &&
                  dc.rope.theta == tc->rope.theta && dc.rope.factor == tc->rope.factor &&
                  dc.rope.low_freq_factor == tc->rope.low_freq_factor &&
                  dc.rope.high_freq_factor == tc->rope.high_freq_factor &&
                  dc.rope.original_max_pos == tc->rope.original_max_pos && dc.rms_eps == tc->rms_eps,
              "%s: draft config is not the Qwen3 block with the target's rope / eps", kind);
        /* tensors: q_norm / k_norm in every layer */
        st_set *st = NULL;
        CHECK(sp_st_open_dir(&st, dir, &err) == 0, "%s", err.msg);
        for (int i = 0; st && i < dc.n_layers; i++) {
            char nm[96];
            for (int j = 0; j < 2; j++) {
                snprintf(nm, sizeof nm, "layers.%d.self_attn.%s_norm.weight", i, j ? "k" : "q");
                CHECK(sp_st_find(st, nm), "%s: no %s", kind, nm);
            }
        }
        sp_st_close(st);
        /* at inference: norms on, RoPE frequencies equal to the target's, bit for bit */
        sp_sample_params greedy = sp_sample_params_default();
        sp_drafter *d = sp_drafter_dflash(dir, m, &greedy, NULL, &err);
        CHECK(d, "%s: %s", kind, err.msg);
        if (!d) continue;
        sp_dflash_info info;
        CHECK(sp_dflash_info_get(d, &info) == 0 && info.qk_norm == 1, "%s: q/k norms not used", kind);
        int D = 0;
        const float *fd = sp_dflash_rope_inv_freq(d, 0, &D);
        int Dt = 0;
        const float *ft = sp_model_rope_inv_freq(m, 0, &Dt);
        CHECK(fd && ft && D == tc->head_dim && Dt == D && !memcmp(fd, ft, sizeof(float) * (size_t)(D / 2)),
              "%s: draft RoPE frequencies differ from the target's", kind);
        float plain[64];
        sp_rope_params def = tc->rope;
        def.type = SP_ROPE_DEFAULT;
        sp_rope_inv_freq(plain, tc->head_dim, &def);
        CHECK(fd && memcmp(fd, plain, sizeof(float) * (size_t)(D / 2)), "%s: llama3 scaling has no effect here", kind);
        sp_drafter_free(d);
        /* greedy identity */
        int32_t prompt[32], ref[64], out[64];
        int np = fixture_prompt(prompt, V), N = 32;
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = N;
        gp.ignore_eos = 1;
        sp_gen_stats gs;
        CHECK(sp_generate(m, NULL, prompt, np, &gp, ref, 64, &gs, &err) == 0, "%s", err.msg);
        for (int B = 2; B <= 8; B *= 2) {
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = B;
            sp_dflash_opts dop = sp_dflash_opts_default();
            dop.max_drafts = B;
            d = sp_drafter_dflash(dir, m, &sp.gen.sample, &dop, &err);
            CHECK(d, "%s: %s", kind, err.msg);
            if (!d) continue;
            sp_spec_stats sst;
            memset(out, 0xff, sizeof out);
            CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &sst, &err) == 0, "%s", err.msg);
            CHECK(sst.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N) && sst.drafted > 0,
                  "llama %s B %d: output differs from plain", kind, B);
            sp_drafter_free(d);
        }
    }
    /* the automatic mask token per vocabulary (newdrafter.h; `specula train` uses the same) */
    sp_config c = *tc;
    c.vocab_size = 128256;
    CHECK(sp_newdrafter_mask_id(&c) == 128002, "Llama-3 vocab mask id %d", sp_newdrafter_mask_id(&c));
    c.vocab_size = 151936;
    CHECK(sp_newdrafter_mask_id(&c) == 151669, "Qwen3 vocab mask id %d", sp_newdrafter_mask_id(&c));
    c.vocab_size = 32000;
    CHECK(sp_newdrafter_mask_id(&c) == 31999, "other vocab mask id %d", sp_newdrafter_mask_id(&c));
    c.arch = SP_ARCH_GEMMA4;
    c.vocab_size = 262144;
    CHECK(sp_newdrafter_mask_id(&c) == 4, "Gemma-4 mask id %d", sp_newdrafter_mask_id(&c));
    sp_model_free(m);
}

/* STS recovers the temperature of synthetic confidences: accept prob σ(z/2), z ~ N(0, 3²) */
static void test_sts_fit(void) {
    sp_sts_data d;
    sp_sts_data_init(&d, 4);
    for (int i = 0; i < 20000; i++) {
        float z[4];
        int acc = 0, alive = 1;
        for (int k = 0; k < 4; k++) {
            z[k] = 3.0f * sp_rng_normal(5, (uint64_t)i, (uint64_t)k);
            double pa = 1.0 / (1.0 + exp(-z[k] / 2.0));
            if (alive && sp_rng_uniform(6, (uint64_t)i, (uint64_t)k) < pa) acc++;
            else alive = 0;
        }
        CHECK(sp_sts_data_add(&d, z, 4, acc) == 0, "add");
    }
    float T[4];
    double eb[4], ea[4];
    sp_err err = {{0}};
    CHECK(sp_sts_fit(&d, T, eb, ea, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 4; k++) {
        /* deeper slots: the prefix product leaves ECE nearly flat in T, so only the first three pin it */
        if (k < 3) CHECK(T[k] > 1.6f && T[k] < 2.5f, "slot %d: T %.3f (want ~2)", k + 1, T[k]);
        CHECK(ea[k] < eb[k] && ea[k] < 0.03, "slot %d: ECE %.4f -> %.4f", k + 1, eb[k], ea[k]);
    }
    printf("  STS: T = %.2f %.2f %.2f %.2f, ECE slot 1 %.4f -> %.4f\n", T[0], T[1], T[2], T[3], eb[0], ea[0]);
    /* ECE by hand: two bins */
    double pred[4] = {0.1, 0.1, 0.9, 0.9};
    uint8_t y[4] = {0, 1, 1, 1};
    CHECK(fabs(sp_ece(pred, y, 4) - (0.5 * 0.4 + 0.5 * 0.1)) < 1e-12, "ece %g", sp_ece(pred, y, 4));
    sp_sts_data_free(&d);
}

int main(void) {
    if (!mkdtemp(TMP) || make_drafters()) {
        fprintf(stderr, "cannot write test drafters under %s\n", TMP);
        return 1;
    }
    RUN(test_new_drafter_layout);
    RUN(test_greedy_identity);
    RUN(test_context_growth);
    RUN(test_bias_cache);
    RUN(test_audit);
    RUN(test_load_errors);
    RUN(test_qk_norm_presence);
    RUN(test_llama_target);
    RUN(test_scheduler_unit);
    RUN(test_sts_fit);
    RUN(test_scheduler_audit);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", TMP);
    return harness_done("test_dflash");
}
