/* test_sampcal.c — draft temperatures for sampled targets (decode/sampcal.h, docs/sampling.md) and
 * the policy's expected-acceptance counts at temperature > 0 (decode/policy.h):
 * - interpolation of the draft temperature between fitted target temperatures, and outside them;
 * - draft_temps.json round trip, and a bad file an error naming the key;
 * - the fit on synthetic rows whose drafter logits are the target's scaled by c: the fitted ratio
 *   is c (q = p), and its acceptance Σ min(p, q) is 1, above the uncalibrated one;
 * - the policy: sampled rounds whose drafts are all rejected by bad luck but had acceptance
 *   probability 0.9 keep drafting, where the 0/1 outcomes switch it off;
 * - the embedded drafter applies draft_temps.json for a sampled request (not with no_draft_temps),
 *   `specula calibrate --sampling` writes a file that reads back, and `specula audit` passes at
 *   temperature 0.6 and 1.0 with a draft temperature far from the target's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "decode/policy.h"
#include "decode/sampcal.h"
#include "drafters/dflash.h"
#include "harness.h"
#include "model/model.h"

static char cli[4096], dir[64] = "/tmp/specula-sampcal-XXXXXX", out[1 << 16];
static const char *TARGET = "models/default/target", *DRAFTER = "models/default/drafter";

#define run(...) harness_runf(out, sizeof out, __VA_ARGS__)
#define write_file(name, text) harness_write_file(dir, name, text)

static void test_interpolate(void) {
    sp_sampcal c = {.n_t = 2, .B = 2, .t = {0.5f, 1.0f}};
    c.draft[0][0] = 0.75f, c.draft[0][1] = 0.5f; /* ratios 1.5, 1.0 */
    c.draft[1][0] = 1.0f, c.draft[1][1] = 2.0f;  /* ratios 1.0, 2.0 */
    float o[4];
    sp_sampcal_draft_temps(&c, 0.75f, 4, o); /* halfway: ratios 1.25, 1.5; position 3, 4 take 2's */
    CHECK(fabsf(o[0] - 0.9375f) < 1e-5 && fabsf(o[1] - 1.125f) < 1e-5 && o[2] == o[1] && o[3] == o[1],
          "interpolated %g %g %g %g", o[0], o[1], o[2], o[3]);
    sp_sampcal_draft_temps(&c, 0.25f, 2, o); /* below: the first row's ratios */
    CHECK(fabsf(o[0] - 0.375f) < 1e-6 && fabsf(o[1] - 0.25f) < 1e-6, "below %g %g", o[0], o[1]);
    sp_sampcal_draft_temps(&c, 2.0f, 2, o); /* above: the last row's */
    CHECK(fabsf(o[0] - 2.0f) < 1e-6 && fabsf(o[1] - 4.0f) < 1e-6, "above %g %g", o[0], o[1]);
    sp_sampcal_draft_temps(NULL, 0.7f, 2, o);
    CHECK(o[0] == 0.7f && o[1] == 0.7f, "no table: %g %g", o[0], o[1]);
}

static void test_file(void) {
    sp_sampcal c = {.n_t = 2, .B = 3, .t = {0.6f, 1.0f}}, r;
    for (int j = 0; j < 3; j++) c.draft[0][j] = 0.6f + 0.1f * j, c.draft[1][j] = 1.1f + 0.1f * j;
    char p[256];
    snprintf(p, sizeof p, "%s/dt.json", dir);
    sp_err err = {{0}};
    CHECK(sp_sampcal_write(p, &c, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(sp_sampcal_read(&r, p, &err) == 0 && r.n_t == 2 && r.B == 3, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            CHECK(fabsf(r.draft[i][j] - c.draft[i][j]) < 1e-4, "[%d][%d] %g", i, j, r.draft[i][j]);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"draft_temperatures\": [[1]]}", "target_temperatures"},
        {"{\"target_temperatures\": [1.0, 0.5], \"draft_temperatures\": [[1], [1]]}", "target_temperatures[1]"},
        {"{\"target_temperatures\": [1.0], \"draft_temperatures\": [[1, -2]]}", "draft_temperatures[0][1]"},
        {"{\"target_temperatures\": [0.5, 1.0], \"draft_temperatures\": [[1, 1], [1]]}", "draft_temperatures[1]"},
        {"{\"target_temperatures\": [1.0]}", "draft_temperatures"},
        {"[1, 2", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("bad.json", bad[i].text);
        snprintf(p, sizeof p, "%s/bad.json", dir);
        err.msg[0] = 0;
        CHECK(sp_sampcal_read(&r, p, &err) == -1 && strstr(err.msg, bad[i].want) && strstr(err.msg, "bad.json") &&
                  r.n_t == 0,
              "bad %zu: %s", i, err.msg);
    }
}

static void test_fit(void) {
    enum { V = 64, B = 2 };
    const float T = 0.8f, c = (float)sp_sampcal_ratio(15); /* drafter logits = c · target logits */
    sp_sample_params sp = sp_sample_params_default();
    sp.temperature = T;
    sp_err err = {{0}};
    sp_sampcal_data d;
    CHECK(sp_sampcal_data_init(&d, B, V, &sp, &err) == 0, "%s", err.msg);
    sp_sampler *ps = sp_sampler_create(V, &sp, &err);
    float L[B * V], Z[B * V], p[V];
    for (int r = 0; r < SP_SAMPCAL_MIN_ROWS + 10; r++) {
        harness_fill(L, B * V, 4.0f, (unsigned)r + 1);
        for (int i = 0; i < B * V; i++) Z[i] = c * L[i];
        sp_sampcal_data_logits(&d, Z, B);
        for (int j = 0; j < B; j++) {
            sp_sampler_probs(ps, p, L + j * V, &err);
            CHECK(sp_sampcal_data_verify(&d, j, p, &err) == 0, "%s", err.msg);
        }
    }
    CHECK(sp_sampcal_data_verify(&d, B, p, &err) == -1, "a row beyond the proposal must be an error");
    float dt[B];
    double raw[B], fit[B], one[B];
    sp_sampcal_fit(&d, dt, raw, fit, one);
    for (int j = 0; j < B; j++) {
        CHECK(fabsf(dt[j] - c * T) < 1e-4, "position %d: draft temperature %g, want %g", j, dt[j], c * T);
        CHECK(fit[j] > 0.999 && raw[j] < fit[j] - 0.02 && one[j] > 0 && one[j] < fit[j], "acceptance %g / %g / %g",
              raw[j], fit[j], one[j]);
    }
    sp_sampler_free(ps);
    sp_sampcal_data_free(&d);
}

/* the policy after a plain round and sampled rounds of 4 drafts all rejected at the first row */
static int policy_after_unlucky_rounds(int expected) {
    sp_policy p;
    int why;
    sp_policy_begin(&p, SP_SPEC_POLICY_ADAPTIVE, 4, NULL);
    double alpha[1] = {0.9};
    for (int r = 0; r < 6; r++) {
        int k = sp_policy_choose(&p, 4, &why);
        if (k == 0) {
            sp_policy_observe(&p, 0, 0, 0, 0, 0.9, 1.0);
        } else if (expected) {
            sp_policy_observe_sampled(&p, k, k, 0, alpha, 1, 0.3, 1.0, 1.4);
        } else {
            sp_policy_observe(&p, k, k, 0, 0.3, 1.0, 1.4);
        }
    }
    return sp_policy_choose(&p, 4, &why);
}

static void test_policy_sampled(void) {
    CHECK(policy_after_unlucky_rounds(1) > 0, "expected acceptance 0.9 must keep drafting");
    CHECK(policy_after_unlucky_rounds(0) == 0, "0/1 outcomes of all-rejected rounds must switch drafting off");
}

static void test_embedded_drafter(void) {
    char d2[256];
    snprintf(d2, sizeof d2, "%s/drafter", dir);
    CHECK(run("mkdir -p %s && ln -sf \"$PWD/%s/config.json\" \"$PWD/%s/model.safetensors\" %s/", d2, DRAFTER, DRAFTER,
              d2) == 0,
          "link the drafter");
    write_file("drafter/draft_temps.json", "{\"target_temperatures\": [0.6, 1.0], \"draft_temperatures\": "
                                           "[[1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]]}");
    sp_err err = {{0}};
    sp_model *m = NULL;
    CHECK(sp_model_load(&m, TARGET, 2, &err) == 0, "%s", err.msg);
    if (!m) return;
    sp_sample_params sp = sp_sample_params_default();
    sp.temperature = 0.8f; /* ratios 2.0 and 0.5 → 1.25 */
    sp_dflash_opts o = sp_dflash_opts_default();
    for (int off = 0; off < 2; off++) {
        o.no_draft_temps = off;
        sp_drafter *d = sp_drafter_dflash(d2, m, &sp, &o, &err);
        CHECK(d != NULL, "%s", err.msg);
        sp_dflash_info info;
        if (d && sp_dflash_info_get(d, &info) == 0) {
            float want = off ? 0.8f : 1.0f;
            CHECK(info.draft_temps == !off && fabsf(info.draft_t[0] - want) < 1e-5 &&
                      fabsf(info.draft_t[6] - want) < 1e-5,
                  "no_draft_temps %d: applied %d, draft temperature %g", off, info.draft_temps, info.draft_t[0]);
        }
        sp_drafter_free(d);
    }
    sp_model_free(m);
    /* the audit with the table applied: at 0.6 q is drawn at 1.2, at 1.0 at 0.5 */
    for (int i = 0; i < 2; i++) {
        const char *t = i ? "1.0" : "0.6";
        int rc = run("%s audit -m %s -md %s --spec dspark --temp %s --draws %d -p 'def f(x):' -t 2 2>&1", cli, TARGET, d2,
                     t, HARNESS_AUDIT_DRAWS(200));
        CHECK(harness_audit_verdict(rc, out, 1), "audit at %s: %s", t, out);
    }
    /* calibrate --sampling on one short prompt writes a file that reads back */
    write_file("p.jsonl", "{\"prompt\": \"import os\\nimport sys\\n\"}\n");
    CHECK(run("%s calibrate --sampling -m %s -md %s --prompts %s/p.jsonl -n 8 --temps 0.7,0.9 -t 2 2>&1", cli, TARGET,
              d2, dir) == 0 &&
              strstr(out, "temperature 0.9: per position") && strstr(out, "wrote"),
          "calibrate --sampling: %s", out);
    char p[512];
    snprintf(p, sizeof p, "%s/draft_temps.json", d2);
    sp_sampcal c;
    CHECK(sp_sampcal_read(&c, p, &err) == 0 && c.n_t == 2 && c.B == 7 && fabsf(c.t[1] - 0.9f) < 1e-6, "%s", err.msg);
    CHECK(run("%s calibrate --sampling -m %s -md %s --prompts %s/p.jsonl --temps 0.9,0.7 2>&1", cli, TARGET, d2, dir) !=
                  0 &&
              strstr(out, "--temps"),
          "descending --temps: %s", out);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    if (!mkdtemp(dir)) {
        printf("FAIL mkdtemp\n");
        return 1;
    }
    RUN(test_interpolate);
    RUN(test_file);
    RUN(test_fit);
    RUN(test_policy_sampled);
    RUN(test_embedded_drafter);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return harness_done("test_sampcal");
}
