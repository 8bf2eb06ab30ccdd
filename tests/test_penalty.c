/* test_penalty.c — repetition penalties (src/sample/penalty.c) and stop strings
 * (src/decode/stopstr.c) as units, and penalties in the speculative loop:
 *
 * - sp_penalty_apply equals a direct evaluation of llama.cpp's rule on random logits and
 *   sequences, for windows 1, 5, 64 and the whole sequence, after pushes and pops;
 * - greedy speculative output with penalties (n-gram and draft-model drafters, several G) equals
 *   plain generation with the same penalties, the penalties do change the output, and the target
 *   drafting for itself accepts every draft (its q sees the drafts before it, as p does);
 * - the audit of a draft model passes with penalties on (the sampling path stays lossless);
 * - stop strings: every split of a text into pieces releases exactly the text before the first
 *   stop string, never a byte of it, and holds back a tail only while it may start one. */
#include <stdlib.h>
#include <string.h>

#include "drafters/drafters.h"
#include "fixtures.h"
#include "harness.h"
#include "sample/penalty.h"
#include "decode/audit.h"
#include "decode/spec.h"
#include "decode/stopstr.h"

/* llama.cpp's rule, evaluated directly from the sequence */
static void penalise_ref(float *x, int V, const int32_t *seq, int len, const sp_penalty_params *pp) {
    int w = pp->last_n < 0 || pp->last_n > len ? len : pp->last_n;
    int *c = calloc((size_t)V, sizeof *c);
    for (int i = len - w; i < len; i++) c[seq[i]]++;
    for (int t = 0; t < V; t++) {
        if (!c[t]) continue;
        x[t] = x[t] <= 0 ? x[t] * pp->repeat : x[t] / pp->repeat;
        x[t] -= (float)c[t] * pp->frequency + pp->presence;
    }
    free(c);
}

static void test_penalty_rule(void) {
    const int V = 50;
    const int windows[] = {1, 5, 64, -1};
    sp_err err = {{0}};
    for (int wi = 0; wi < 4; wi++) {
        sp_penalty_params pp = {.repeat = 1.3f, .last_n = windows[wi], .presence = 0.4f, .frequency = 0.25f};
        sp_penalty *p = sp_penalty_create(V, &pp, &err);
        CHECK(p != NULL, "%s", err.msg);
        if (!p) continue;
        int32_t seq[300];
        int len = 0;
        unsigned s = 7u + (unsigned)wi;
        for (int step = 0; step < 400; step++) {
            s = s * 1103515245u + 12345u;
            if (((s >> 16) % 4 == 0) && len > 0) { /* pop 1..3 */
                int k = 1 + (int)((s >> 8) % 3);
                if (k > len) k = len;
                sp_penalty_pop(p, k);
                len -= k;
            } else if (len < 300) {
                seq[len] = (int32_t)((s >> 12) % 12); /* few distinct ids: many repeats */
                CHECK(sp_penalty_push(p, seq[len], &err) == 0, "%s", err.msg);
                len++;
            }
            CHECK(sp_penalty_len(p) == len, "len %d vs %d", sp_penalty_len(p), len);
            float x[50], y[50];
            harness_fill(x, V, 3.0f, (unsigned)step);
            memcpy(y, x, sizeof x);
            sp_penalty_apply(p, x);
            penalise_ref(y, V, seq, len, &pp);
            for (int t = 0; t < V; t++) CHECK(x[t] == y[t], "window %d step %d token %d: %g vs %g", pp.last_n, step, t,
                                             (double)x[t], (double)y[t]);
            float z[50];
            for (int t = 0; t < V; t++) z[t] = t % 2 ? 1.5f : -1.5f;
            penalise_ref(z, V, seq, len, &pp);
            for (int t = 0; t < V; t++)
                CHECK(sp_penalty_adjust(p, t, t % 2 ? 1.5f : -1.5f) == z[t], "adjust token %d", t);
        }
        sp_penalty_free(p);
    }
    /* the sign rule alone: 2 → 2 / 2, -2 → -2 · 2; presence once, frequency per occurrence */
    sp_penalty_params pp = {.repeat = 2.0f, .last_n = 64, .presence = 0.5f, .frequency = 0.25f};
    sp_penalty *p = sp_penalty_create(4, &pp, &err);
    int32_t seq[] = {1, 2, 2, 2};
    for (int i = 0; i < 4; i++) sp_penalty_push(p, seq[i], &err);
    float x[4] = {3.0f, 2.0f, -2.0f, 1.0f};
    sp_penalty_apply(p, x);
    CHECK(x[0] == 3.0f && x[1] == 2.0f / 2 - 0.25f - 0.5f && x[2] == -2.0f * 2 - 0.75f - 0.5f && x[3] == 1.0f,
          "rule: %g %g %g %g", (double)x[0], (double)x[1], (double)x[2], (double)x[3]);
    sp_penalty_free(p);
    /* off: repeat 1, no presence / frequency, or last_n 0 */
    sp_penalty_params off = sp_penalty_params_default();
    CHECK(!sp_penalty_active(&off), "defaults must be off");
    off.repeat = 1.5f;
    off.last_n = 0;
    CHECK(!sp_penalty_active(&off), "last_n 0 must be off");
    sp_penalty_params bad = {.repeat = -1.0f, .last_n = 64};
    CHECK(sp_penalty_params_check(&bad, &err) == -1 && strstr(err.msg, "repeat"), "negative repeat accepted");
    bad = (sp_penalty_params){.repeat = 1.0f, .last_n = -2};
    CHECK(sp_penalty_params_check(&bad, &err) == -1 && strstr(err.msg, "last-n"), "last_n -2 accepted");
}

/* greedy: speculative == plain with penalties, on the llama and gemma4 fixtures; the target as
 * its own draft model accepts every draft only when its q sees the same penalties as p */
static void test_penalty_spec_greedy(void) {
    const char *archs[] = {"llama", "gemma4"};
    for (int a = 0; a < 2; a++) {
        sp_model *m = fixture_load(archs[a]);
        if (!m) {
            CHECK(0, "load");
            continue;
        }
        int V = sp_model_config(m)->vocab_size, N = 40;
        int32_t prompt[32], ref[64], nopen[64], out[64];
        int np = fixture_prompt(prompt, V);
        sp_err err = {{0}};
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = N;
        gp.ignore_eos = 1;
        CHECK(sp_generate(m, NULL, prompt, np, &gp, nopen, 64, NULL, &err) == 0, "%s", err.msg);
        gp.penalty = (sp_penalty_params){.repeat = 1.5f, .last_n = 16, .presence = 0.3f, .frequency = 0.2f};
        sp_gen_stats gs;
        CHECK(sp_generate(m, NULL, prompt, np, &gp, ref, 64, &gs, &err) == 0, "%s", err.msg);
        CHECK(memcmp(ref, nopen, sizeof(int32_t) * N) != 0, "%s: the penalties changed nothing", archs[a]);
        const int Gs[] = {2, 6};
        for (int kind = 1; kind < 3; kind++)
            for (int gi = 0; gi < 2; gi++) {
                sp_spec_params sp = sp_spec_params_default();
                sp.gen = gp;
                sp.draft_max = Gs[gi];
                sp_drafter *d = NULL;
                if (kind == 1) d = sp_drafter_ngram(1, 3, &err);
                if (kind == 2) d = sp_drafter_draft_model(m, m, NULL, NULL, 128, &sp.gen.sample, &err);
                CHECK(kind == 0 || d != NULL, "drafter: %s", err.msg);
                sp_spec_stats st;
                memset(out, 0xff, sizeof out);
                CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
                CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N),
                      "%s kind %d G %d: speculative output with penalties differs from plain", archs[a], kind, Gs[gi]);
                if (kind == 2)
                    CHECK(st.drafted > 0 && st.accepted == st.drafted, "%s G %d: self-draft accepted %d of %d",
                          archs[a], Gs[gi], st.accepted, st.drafted);
                if (gi == 1)
                    printf("  %-6s %s G=6 with penalties: tau %.2f\n", archs[a], kind == 1 ? "ngram" : "self-draft",
                           st.mean_accept_len);
                sp_drafter_free(d);
            }
        sp_model_free(m);
    }
}

/* sampling: the audit of a draft model passes with penalties on the prompt's repeats */
static void test_penalty_audit(void) {
    sp_model *m = fixture_load("llama");
    if (!m) {
        CHECK(0, "load");
        return;
    }
    int V = sp_model_config(m)->vocab_size;
    int32_t prompt[32];
    int np = fixture_prompt(prompt, V);
    sp_err err = {{0}};
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.sample.temperature = 1.0f;
    sp.gen.sample.seed = 11;
    sp.gen.penalty = (sp_penalty_params){.repeat = 1.4f, .last_n = 64, .presence = 0.5f, .frequency = 0.3f};
    sp.draft_max = 4;
    sp_sample_params ds = sp.gen.sample;
    ds.temperature = 1.8f; /* the target itself, flattened: q differs from p, many rejections */
    sp_drafter *d = sp_drafter_draft_model(m, m, NULL, NULL, 64, &ds, &err);
    CHECK(d != NULL, "%s", err.msg);
    sp_audit_result r;
    CHECK(d && sp_audit_run(m, d, prompt, np, &sp, HARNESS_AUDIT_DRAWS(2000), 0.001, &r, &err) == 0, "%s", err.msg);
    printf("  audit with penalties: first-token p-value %.4f, acceptance %.3f -> %s\n", r.first.p_value,
           r.acceptance_rate, r.pass ? "PASS" : "FAIL");
    CHECK((!HARNESS_AUDIT_VERDICTS || r.pass) && r.acceptance_rate > 0.05 && r.acceptance_rate < 0.95, "audit with penalties: pass %d acc %.3f",
          r.pass, r.acceptance_rate);
    sp.broken_residual = 1;
    CHECK(d && sp_audit_run(m, d, prompt, np, &sp, HARNESS_AUDIT_DRAWS(2000), 0.001, &r, &err) == 0 && (!HARNESS_AUDIT_VERDICTS || !r.pass),
          "the broken residual rule must fail with penalties too");
    sp_drafter_free(d);
    sp_model_free(m);
}

/* every 2- and 3-piece split of text: what the matcher releases, concatenated */
static void test_stopstr_splits(void) {
    const char *stops[] = {"</s>", "STOP", "ab"};
    const char *texts[] = {"hello </s> world", "xx<S>T</sTOP STOP after", "no stop at all </", "a", "abab",
                           "x\xc3\xa9STO\xc3\xa9STOP"};
    sp_err err = {{0}};
    for (size_t ti = 0; ti < sizeof texts / sizeof texts[0]; ti++) {
        const char *t = texts[ti];
        size_t n = strlen(t), cut = sp_stopstr_cut(t, n, stops, 3);
        for (size_t i = 0; i <= n; i++)
            for (size_t j = i; j <= n; j++) {
                sp_stopstr *s = sp_stopstr_create(stops, 3, &err);
                char got[128] = {0};
                size_t g = 0;
                int stopped = 0;
                size_t bounds[4] = {0, i, j, n};
                for (int k = 0; k < 3 && !stopped; k++) {
                    const char *o;
                    size_t on;
                    int r = sp_stopstr_feed(s, t + bounds[k], bounds[k + 1] - bounds[k], &o, &on, &err);
                    memcpy(got + g, o, on);
                    g += on;
                    stopped = r == 1;
                    /* released text is always a prefix of the answer */
                    CHECK(g <= cut && !memcmp(got, t, g), "text %zu split %zu/%zu: released '%.*s' beyond the cut",
                          ti, i, j, (int)g, got);
                }
                if (!stopped) {
                    const char *o;
                    size_t on;
                    sp_stopstr_flush(s, &o, &on);
                    memcpy(got + g, o, on);
                    g += on;
                }
                CHECK(stopped == (cut < n), "text %zu split %zu/%zu: stopped %d", ti, i, j, stopped);
                CHECK(g == cut && !memcmp(got, t, cut), "text %zu split %zu/%zu: got '%.*s' want '%.*s'", ti, i, j,
                      (int)g, got, (int)cut, t);
                sp_stopstr_free(s);
            }
    }
    /* the held-back tail is released once the next piece rules it out */
    sp_stopstr *s = sp_stopstr_create(stops, 3, &err);
    const char *o;
    size_t on;
    CHECK(sp_stopstr_feed(s, "x</", 3, &o, &on, &err) == 0 && on == 1 && o[0] == 'x', "hold '</': '%.*s'", (int)on, o);
    CHECK(sp_stopstr_feed(s, "p>", 2, &o, &on, &err) == 0 && on == 4 && !memcmp(o, "</p>", 4), "release '</p>'");
    sp_stopstr_free(s);
    const char *empty[] = {""};
    CHECK(sp_stopstr_create(empty, 1, &err) == NULL && strstr(err.msg, "empty"), "empty stop accepted");
}

int main(void) {
    RUN(test_penalty_rule);
    RUN(test_stopstr_splits);
    RUN(test_penalty_spec_greedy);
    RUN(test_penalty_audit);
    return harness_done("test_penalty");
}
