/* test_eagle3.c — EAGLE-3 drafters (src/drafters/eagle3.c) and new-drafter --arch eagle3.
 *
 * - random SpecForge (reduced draft vocabulary, d2t / t2d) and DeepSpec drafters on the tiny
 *   llama, qwen3 and gemma4 fixture targets: greedy output identical to plain decoding for
 *   G = 1..16;
 * - rollback: after every round (and every round without drafts, told through extend) the
 *   drafter's next proposal (drafts and q, bit for bit) equals that of a fresh drafter begun on
 *   the whole committed stream with freshly computed taps;
 * - sampling: the audit passes at temperature 1 (q zero outside the draft vocabulary);
 * - loading: every missing tensor, a wrong shape, missing d2t, out-of-range and duplicate d2t,
 *   an inconsistent t2d and bad config keys are errors naming the tensor / key;
 * - the CLI: new-drafter writes both layouts, -md alone picks eagle3, output equals plain. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "drafters/eagle3.h"
#include "eagle3_fixtures.h"
#include "fixtures.h"
#include "formats/newdrafter.h"
#include "formats/safetensors.h"
#include "harness.h"
#include "decode/audit.h"
#include "decode/generate.h"
#include "decode/spec.h"

static char TMP[] = "/tmp/specula-eagle3-XXXXXX";
static void drafter_dir(char *out, size_t cap, const char *target, const char *layout) {
    e3_fixture_dir(out, cap, TMP, target, layout);
}

static int make_drafters(void) { return e3_fixture_write(TMP, 21); }

static sp_drafter *open_drafter(const char *target, const char *layout, sp_model *m, const sp_sample_params *sp,
                                int max_g, sp_err *err) {
    char dir[256];
    drafter_dir(dir, sizeof dir, target, layout);
    return sp_drafter_eagle3(dir, m, sp, max_g, err);
}

static void test_layouts(void) {
    sp_model *m = fixture_load("qwen3");
    if (!m) { CHECK(0, "load"); return; }
    sp_sample_params g = sp_sample_params_default();
    sp_err err = {{0}};
    sp_eagle3_info info;
    sp_drafter *d = open_drafter("qwen3", "specforge", m, &g, 8, &err);
    CHECK(d && sp_eagle3_info_get(d, &info) == 0, "%s", err.msg);
    if (d) {
        /* default taps: inputs of layers 2, N/2, N-3 of a 4-layer target = outputs of 1, 1, 0 */
        CHECK(info.layout == SP_EAGLE3_SPECFORGE && info.n_taps == 3 && info.tap_layers[0] == 1 &&
                  info.tap_layers[1] == 1 && info.tap_layers[2] == 0, "specforge taps %d: %d %d %d", info.n_taps,
              info.tap_layers[0], info.tap_layers[1], info.tap_layers[2]);
        CHECK(info.draft_vocab == 8000 && info.d2t[0] == 0 && info.d2t[1] == 4 && info.d2t[7999] == 31996,
              "draft vocab %d, d2t %d %d %d", info.draft_vocab, info.d2t[0], info.d2t[1], info.d2t[7999]);
    }
    sp_drafter_free(d);
    /* sampling: q is over the target vocabulary, zero outside the draft vocabulary, sums to 1 */
    sp_sample_params hot = {1.0f, 0, 1.0f, 0.0f, 3};
    d = open_drafter("qwen3", "specforge", m, &hot, 3, &err);
    int V = sp_model_config(m)->vocab_size, H = sp_model_config(m)->hidden_size;
    float *q = malloc(sizeof(float) * 3 * (size_t)V), *taps = malloc(sizeof(float) * 32 * 3 * (size_t)H);
    sp_kv *kv = sp_kv_create(m, 64, 64, &err);
    int32_t prompt[32], dr[3];
    int np = fixture_prompt(prompt, V);
    CHECK(d && q && taps && kv, "%s", err.msg);
    if (d && q && taps && kv) {
        sp_forward_out o = {.tap_layers = d->tap_layers, .n_taps = d->n_taps, .taps = taps};
        sp_drafter_ctx c = {.target = m, .target_kv = kv, .seed = 4};
        CHECK(d->provides_q && sp_model_forward(m, kv, prompt, np - 1, &o, &err) == 0 &&
                  d->begin(d, prompt, np, taps, NULL, &c, &err) == 0 && d->propose(d, 3, dr, q, &err) == 3,
              "%s", err.msg);
        int outside = 0;
        for (int j = 0; j < 3; j++) {
            double sum = 0;
            for (int v = 0; v < V; v++) {
                sum += q[(size_t)j * V + v];
                outside += v % 4 != 0 && q[(size_t)j * V + v] != 0; /* draft ids map to 4·i */
            }
            CHECK(fabs(sum - 1) < 1e-4 && dr[j] % 4 == 0 && q[(size_t)j * V + dr[j]] > 0,
                  "q row %d sums to %f, draft %d", j, sum, dr[j]);
        }
        CHECK(outside == 0, "%d q entries outside the draft vocabulary are non-zero", outside);
    }
    free(q);
    free(taps);
    sp_kv_free(kv);
    sp_drafter_free(d);
    d = open_drafter("qwen3", "deepspec", m, &g, 8, &err);
    CHECK(d && sp_eagle3_info_get(d, &info) == 0, "%s", err.msg);
    if (d)
        CHECK(info.layout == SP_EAGLE3_DEEPSPEC && info.n_taps == 3 && info.draft_vocab == 32000 &&
                  info.tap_layers[0] == 0 && info.tap_layers[2] == 2, "deepspec: %d taps (%d..%d), vocab %d",
              info.n_taps, info.tap_layers[0], info.tap_layers[info.n_taps - 1], info.draft_vocab);
    sp_drafter_free(d);
    sp_model_free(m);
}

static void test_greedy_identity(void) {
    for (int t = 0; t < 3; t++) {
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
        for (int l = 0; l < 2; l++)
            for (int G = 1; G <= 16; G++) {
                if (HARNESS_SANITIZED && G != 1 && G != 5 && G != 16) continue; /* a sample of G */
                sp_spec_params sp = sp_spec_params_default();
                sp.gen = gp;
                sp.draft_max = G;
                sp.gen.prefill_chunk = G + 1;
                sp_drafter *d = open_drafter(TARGETS[t], LAYOUTS[l], m, &sp.gen.sample, G, &err);
                CHECK(d, "%s %s: %s", TARGETS[t], LAYOUTS[l], err.msg);
                if (!d) continue;
                sp_spec_stats st;
                memset(out, 0xff, sizeof out);
                CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
                CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N), "%s %s G %d: output differs from plain",
                      TARGETS[t], LAYOUTS[l], G);
                CHECK(st.drafted > 0, "%s %s G %d: nothing drafted", TARGETS[t], LAYOUTS[l], G);
                sp_drafter_free(d);
            }
        sp_model_free(m);
    }
}

/* ---- rollback: the proposal after each round equals a fresh drafter's on the committed stream -- */
typedef struct {
    sp_drafter *in; /* the drafter under test */
    sp_model *m;
    const char *target, *layout;
    const sp_sample_params *sp;
    int32_t stream[256];
    int n, G, rounds, bad, V;
    float *q1, *q2;
    uint64_t seed;
} wrap_t;

/* a fresh drafter begun on stream[0..n) (taps from a fresh target forward) proposes exactly what
 * the running one does */
static void compare_fresh(wrap_t *w) {
    sp_err err = {{0}};
    int n = w->n, nt = w->in->n_taps, H = sp_model_config(w->m)->hidden_size;
    float *taps = malloc(sizeof(float) * (size_t)(n - 1) * (size_t)nt * (size_t)H + 1);
    sp_kv *kv = sp_kv_create(w->m, 512, 512, &err);
    sp_forward_out o = {.tap_layers = w->in->tap_layers, .n_taps = nt, .taps = taps};
    sp_drafter *f = open_drafter(w->target, w->layout, w->m, w->sp, w->G, &err);
    sp_drafter_ctx c = {.target = w->m, .target_kv = kv, .seed = w->seed};
    int32_t a[32], b[32];
    int na = -1, nb = -2;
    if (taps && kv && f && sp_model_forward(w->m, kv, w->stream, n - 1, &o, &err) == 0 &&
        f->begin(f, w->stream, n, taps, NULL, &c, &err) == 0) {
        nb = f->propose(f, w->G, b, w->q2, &err);
        na = w->in->propose(w->in, w->G, a, w->q1, &err);
    }
    size_t qn = w->q1 ? (size_t)(na > 0 ? na : 0) * (size_t)w->V * sizeof(float) : 0;
    if (na != nb || memcmp(a, b, sizeof(int32_t) * (size_t)(na > 0 ? na : 0)) || (qn && memcmp(w->q1, w->q2, qn))) {
        if (!w->bad) fprintf(stderr, "  round %d (stream %d): %d vs fresh %d drafts differ (%s)\n", w->rounds, n, na,
                             nb, err.msg);
        w->bad++;
    }
    sp_drafter_free(f);
    sp_kv_free(kv);
    free(taps);
}

static void test_rollback(void) {
    /* drive the drafter by hand: propose, accept a prefix chosen by the test, commit with the
     * taps of the committed rows, then compare with a fresh drafter */
    for (int t = 0; t < 3; t++) {
        sp_model *m = fixture_load(TARGETS[t]);
        if (!m) { CHECK(0, "load"); continue; }
        int V = sp_model_config(m)->vocab_size, H = sp_model_config(m)->hidden_size;
        for (int l = 0; l < 2; l++)
            for (int s = 0; s < 2; s++) {
                sp_sample_params sp = sp_sample_params_default();
                if (s) sp = (sp_sample_params){1.0f, 0, 1.0f, 0.0f, 5};
                wrap_t w = {.m = m, .target = TARGETS[t], .layout = LAYOUTS[l], .sp = &sp, .G = 5, .V = V};
                sp_err err = {{0}};
                w.in = open_drafter(TARGETS[t], LAYOUTS[l], m, &sp, w.G, &err);
                sp_kv *kv = sp_kv_create(m, 512, 512, &err);
                if (s) {
                    w.q1 = malloc(sizeof(float) * 32 * (size_t)V);
                    w.q2 = malloc(sizeof(float) * 32 * (size_t)V);
                }
                CHECK(w.in && kv, "%s", err.msg);
                if (!w.in || !kv) { sp_kv_free(kv); sp_drafter_free(w.in); free(w.q1); free(w.q2); continue; }
                int nt = w.in->n_taps;
                float *taps = malloc(sizeof(float) * 64 * (size_t)nt * (size_t)H);
                int np = fixture_prompt(w.stream, V);
                w.n = np;
                w.seed = 9;
                sp_forward_out o = {.tap_layers = w.in->tap_layers, .n_taps = nt, .taps = taps};
                sp_drafter_ctx c = {.target = m, .target_kv = kv, .seed = 9};
                int ok = sp_model_forward(m, kv, w.stream, np - 1, &o, &err) == 0 &&
                         w.in->begin(w.in, w.stream, np, taps, NULL, &c, &err) == 0;
                for (int r = 0; ok && r < 8; r++) {
                    int32_t dr[32];
                    if (r % 3 == 2) { /* a round without drafts, told through extend: 2 tokens */
                        int32_t tk[2] = {(int32_t)((r * 31 + 5) % V), (int32_t)((r * 17 + 9) % V)}, rows[2];
                        rows[0] = w.stream[w.n - 1];
                        rows[1] = tk[0];
                        ok = sp_model_forward(m, kv, rows, 2, &o, &err) == 0 &&
                             w.in->extend(w.in, tk, 2, taps, NULL, &err) == 0;
                        w.stream[w.n++] = tk[0];
                        w.stream[w.n++] = tk[1];
                        w.rounds = r;
                        if (ok) compare_fresh(&w);
                        continue;
                    }
                    int g = w.in->propose(w.in, w.G, dr, w.q1, &err);
                    ok = g >= 0;
                    int acc = g > 0 ? (r * 3) % (g + 1) : 0, next = (int32_t)((r * 7919 + 11) % V);
                    /* committed rows: old pending and the accepted drafts */
                    int32_t rows[33];
                    rows[0] = w.stream[w.n - 1];
                    memcpy(rows + 1, dr, sizeof(int32_t) * (size_t)acc);
                    ok = ok && sp_model_forward(m, kv, rows, acc + 1, &o, &err) == 0 &&
                         w.in->commit(w.in, acc, next, taps, NULL, &err) == 0;
                    memcpy(w.stream + w.n, dr, sizeof(int32_t) * (size_t)acc);
                    w.n += acc;
                    w.stream[w.n++] = next;
                    w.rounds = r;
                    if (ok) compare_fresh(&w);
                }
                CHECK(ok && w.bad == 0, "%s %s %s: %d of 8 rounds differ from a fresh drafter (%s)", TARGETS[t],
                      LAYOUTS[l], s ? "sampled" : "greedy", w.bad, err.msg);
                free(taps);
                free(w.q1);
                free(w.q2);
                sp_kv_free(kv);
                sp_drafter_free(w.in);
            }
        sp_model_free(m);
    }
}

/* ---- audit ------------------------------------------------------------------------------------ */
static void audit_case(const char *target, const char *layout, float dtemp, int draws) {
    sp_model *m = fixture_load(target);
    if (!m) { CHECK(0, "load"); return; }
    int32_t prompt[6] = {1, 5493, 20509, 14029, 77, 901};
    sp_err err = {{0}};
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.sample = (sp_sample_params){1.0f, 0, 1.0f, 0.0f, 7};
    sp.draft_max = 4;
    sp_sample_params dq = sp.gen.sample;
    dq.temperature = dtemp;
    sp_drafter *d = open_drafter(target, layout, m, &dq, 4, &err);
    CHECK(d, "%s", err.msg);
    sp_audit_result r;
    if (d) {
        CHECK(sp_audit_run(m, d, prompt, 6, &sp, HARNESS_AUDIT_DRAWS(draws), 0.001, &r, &err) == 0, "%s", err.msg);
        printf("  %-6s %-9s first p=%.4f TV %.4f (null %.4f), second p=%.4f (%d groups), acc %.2f\n", target, layout,
               r.first.p_value, r.first.tv, r.first.tv_null, r.second.p_value, r.second_groups, r.acceptance_rate);
        CHECK(!HARNESS_AUDIT_VERDICTS || r.pass, "%s %s: audit failed", target, layout);
        CHECK(r.acceptance_rate > 0.01, "%s %s: acceptance %.3f: the rule was not exercised", target, layout,
              r.acceptance_rate);
    }
    sp_drafter_free(d);
    sp_model_free(m);
}

static void test_audit(void) {
    audit_case("qwen3", "specforge", 50.0f, 2000);
    audit_case("qwen3", "deepspec", 50.0f, 2000);
    audit_case("gemma4", "deepspec", 50.0f, 1000);
}

/* ---- malformed checkpoints -------------------------------------------------------------------- */
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

typedef enum { PATCH_NONE = 0, PATCH_D2T_RANGE, PATCH_D2T_DUP, PATCH_T2D } patch_t;

/* copy src's checkpoint to dst without the tensors in `drop`, with `reshape` one row shorter,
 * d2t / t2d patched, and config.json with the key `set` (KEY=JSON, or KEY=- to delete) */
static int write_variant(const char *src, const char *dst, const char *drop, const char *reshape, patch_t patch,
                         const char *set) {
    char p[512], cmd[1200];
    sp_err err = {{0}};
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dst, dst);
    if (system(cmd) != 0) return -1;
    snprintf(p, sizeof p, "%s/config.json", src);
    json_t *cfg = json_load_file(p, 0, NULL);
    if (!cfg) return -1;
    if (set) {
        char key[128];
        const char *eq = strchr(set, '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - set), set);
        if (!strcmp(eq + 1, "-")) json_object_del(cfg, key);
        else json_object_set_new(cfg, key, json_loads(eq + 1, JSON_DECODE_ANY, NULL));
    }
    snprintf(p, sizeof p, "%s/config.json", dst);
    int rc = json_dump_file(cfg, p, 0);
    json_decref(cfg);
    st_set *st;
    if (rc || sp_st_open_dir(&st, src, &err)) return -1;
    st_writer *w = sp_st_writer_create();
    void *copy = NULL;
    for (int i = 0; i < sp_st_count(st) && !rc; i++) {
        const st_tensor *t = sp_st_at(st, i);
        if (drop && in_list(drop, t->name)) continue;
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (reshape && !strcmp(t->name, reshape)) shape[0] = t->shape[0] - 1;
        const void *data = t->data;
        if ((patch == PATCH_T2D && !strcmp(t->name, "t2d")) ||
            ((patch == PATCH_D2T_RANGE || patch == PATCH_D2T_DUP) && !strcmp(t->name, "d2t"))) {
            copy = malloc(t->nbytes);
            memcpy(copy, t->data, t->nbytes);
            if (patch == PATCH_D2T_RANGE) ((int64_t *)copy)[7] = 1 << 20;       /* target id 7 + 2^20 */
            if (patch == PATCH_D2T_DUP) ((int64_t *)copy)[3] = ((int64_t *)copy)[2] - 1; /* id of 2 again */
            if (patch == PATCH_T2D) ((unsigned char *)copy)[1] = 1;             /* 1 is not a draft id */
            data = copy;
        }
        rc = sp_st_writer_add(w, t->name, t->dtype, t->ndim, shape, data, &err);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    if (!rc) rc = sp_st_writer_save(w, p, &err);
    free(copy);
    sp_st_writer_free(w);
    sp_st_close(st);
    return rc;
}

static void expect_error(sp_model *m, const char *dir, const char *want, const char *what) {
    sp_err err = {{0}};
    sp_sample_params sp = sp_sample_params_default();
    sp_drafter *d = sp_drafter_eagle3(dir, m, &sp, 8, &err);
    CHECK(d == NULL && strstr(err.msg, want), "%s: loaded=%d, message \"%s\" does not name %s", what, d != NULL,
          err.msg, want);
    sp_drafter_free(d);
}

static void test_load_errors(void) {
    sp_model *m = fixture_load("qwen3");
    if (!m) { CHECK(0, "load"); return; }
    char src[256], dst[300];
    snprintf(dst, sizeof dst, "%s/broken", TMP);
    sp_err err = {{0}};
    for (int l = 0; l < 2; l++) {
        drafter_dir(src, sizeof src, "qwen3", LAYOUTS[l]);
        st_set *st;
        CHECK(sp_st_open_dir(&st, src, &err) == 0, "%s", err.msg);
        if (!st) continue;
        int tested = 0;
        for (int i = 0; i < sp_st_count(st); i++) {
            char name[160];
            snprintf(name, sizeof name, "%s", sp_st_at(st, i)->name);
            if (!strcmp(name, "t2d") || !strcmp(name, "embed_tokens.weight")) continue; /* optional */
            CHECK(write_variant(src, dst, name, NULL, PATCH_NONE, NULL) == 0, "write without %s", name);
            expect_error(m, dst, name, "missing tensor");
            tested++;
        }
        CHECK(tested >= 12, "%s: only %d tensors", LAYOUTS[l], tested);
        sp_st_close(st);
    }
    drafter_dir(src, sizeof src, "qwen3", "specforge");
    const char *shapes[] = {"fc.weight", "midlayer.self_attn.q_proj.weight", "midlayer.mlp.down_proj.weight",
                            "lm_head.weight", "d2t", "t2d"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        CHECK(write_variant(src, dst, NULL, shapes[i], PATCH_NONE, NULL) == 0, "write");
        expect_error(m, dst, shapes[i], "wrong shape");
    }
    CHECK(write_variant(src, dst, NULL, NULL, PATCH_D2T_RANGE, NULL) == 0, "write");
    expect_error(m, dst, "d2t[7]", "d2t out of range");
    CHECK(write_variant(src, dst, NULL, NULL, PATCH_D2T_DUP, NULL) == 0, "write");
    expect_error(m, dst, "d2t maps two draft ids", "duplicate d2t");
    CHECK(write_variant(src, dst, NULL, NULL, PATCH_T2D, NULL) == 0, "write");
    expect_error(m, dst, "t2d[1]", "t2d inconsistent");
    /* config keys */
    const struct { const char *set, *want; } keys[] = {
        {"eagle_aux_hidden_state_layer_ids=[1, 2]", "exactly 3"},
        {"eagle_aux_hidden_state_layer_ids=[0, 1, 2]", "eagle_aux_hidden_state_layer_ids[0]"},
        {"eagle_aux_hidden_state_layer_ids=[1, 2, 5]", "eagle_aux_hidden_state_layer_ids[2]"},
        {"draft_vocab_size=40000", "draft_vocab_size"},
        {"num_hidden_layers=2", "num_hidden_layers"},
        {"target_hidden_size=64", "target_hidden_size"},
        {"architectures=[\"LlamaForCausalLM\"]", "not an EAGLE-3 drafter"},
        {"norm_before_fc=true", "input_norm.weight"},
        {"norm_before_residual=1", "norm_before_residual"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        CHECK(write_variant(src, dst, NULL, NULL, PATCH_NONE, keys[i].set) == 0, "write");
        expect_error(m, dst, keys[i].want, keys[i].set);
    }
    /* a full-vocabulary SpecForge file needs no d2t; a reduced one does */
    CHECK(write_variant(src, dst, "d2t|t2d", NULL, PATCH_NONE, NULL) == 0, "write");
    expect_error(m, dst, "missing tensor d2t", "missing d2t");
    drafter_dir(src, sizeof src, "qwen3", "deepspec");
    CHECK(write_variant(src, dst, NULL, NULL, PATCH_NONE, "target_layer_ids=-") == 0, "write");
    expect_error(m, dst, "target_layer_ids", "deepspec without taps");
    CHECK(write_variant(src, dst, NULL, NULL, PATCH_NONE, "draft_num_hidden_layers=2") == 0, "write");
    expect_error(m, dst, "draft_num_hidden_layers", "deepspec with 2 layers");
    sp_model_free(m);
}

/* ---- the CLI ---------------------------------------------------------------------------------- */
static char cli[4096];

static void test_cli(void) {
    static char a[1 << 16], b[1 << 16], c[1 << 16];
    char cmd[8192];
    const char *M = "tests/data/ref-logits/llama";
    for (int l = 0; l < 2; l++) {
        snprintf(cmd, sizeof cmd, "%s new-drafter --arch eagle3 --preset %s -m %s --seed 3 -o %s/cli-%s 2>&1", cli,
                 LAYOUTS[l], M, TMP, LAYOUTS[l]);
        CHECK(harness_run(cmd, c, sizeof c) == 0, "new-drafter: %s", c);
    }
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2,3,4,1,2,3,4 -n 40 --ignore-eos 2>/dev/null", cli, M);
    CHECK(harness_run(cmd, a, sizeof a) == 0 && strlen(a) > 40, "plain: %s", a);
    for (int l = 0; l < 2; l++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s --prompt-ids 1,2,3,4,1,2,3,4 -n 40 --ignore-eos -md %s/cli-%s --draft-max 6 "
                 "--json 2>/dev/null", cli, M, TMP, LAYOUTS[l]);
        CHECK(harness_run(cmd, c, sizeof c) == 0 && strstr(c, "\"drafted\""), "-md alone (%s): %s", LAYOUTS[l], c);
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s --prompt-ids 1,2,3,4,1,2,3,4 -n 40 --ignore-eos --spec eagle3 -md %s/cli-%s "
                 "--draft-max 6 2>/dev/null", cli, M, TMP, LAYOUTS[l]);
        CHECK(harness_run(cmd, b, sizeof b) == 0 && !strcmp(a, b), "eagle3 (%s) differs from plain:\n%s\n%s",
              LAYOUTS[l], a, b);
    }
    snprintf(cmd, sizeof cmd, "%s new-drafter --arch eagle3 --preset tree -m %s --seed 3 -o %s/cli-bad 2>&1", cli, M,
             TMP);
    CHECK(harness_run(cmd, c, sizeof c) == 1 && strstr(c, "specforge"), "bad preset: %s", c);
}

int main(int argc, char **argv) {
    const char *slash = strrchr(argv[0], '/');
    snprintf(cli, sizeof cli, "%.*s/../specula", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    (void)argc;
    if (!mkdtemp(TMP) || make_drafters()) {
        fprintf(stderr, "cannot write test drafters under %s\n", TMP);
        return 1;
    }
    RUN(test_layouts);
    RUN(test_greedy_identity);
    RUN(test_rollback);
    RUN(test_audit);
    RUN(test_load_errors);
    RUN(test_cli);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", TMP);
    return harness_done("test_eagle3");
}
