/* test_sample.c — logits processing vs a naive full-sort reference, sampling histograms
 * (chi-square), seed reproducibility and residual sampling. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "sample/sample.h"

/* ---- naive reference: full sort, double sums -------------------------------------------- */
typedef struct {
    float x;
    int id;
} ref_cand;

static int ref_cmp(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->x != b->x) return a->x > b->x ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static void probs_ref(float *probs, const float *logits, int V, const sp_sample_params *sp) {
    memset(probs, 0, (size_t)V * sizeof *probs);
    if (sp->temperature == 0.0f || sp->top_k == 1) {
        int a = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[a]) a = i;
        probs[a] = 1.0f;
        return;
    }
    ref_cand *c = malloc((size_t)V * sizeof *c);
    double *e = malloc((size_t)V * sizeof *e);
    const float inv_t = 1.0f / sp->temperature;
    int n = 0;
    for (int i = 0; i < V; i++) {
        float x = logits[i] * inv_t;
        if (x > -INFINITY) c[n++] = (ref_cand){x, i};
    }
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
    double z = 0;
    for (int j = 0; j < n; j++) z += e[j] = expf(c[j].x - c[0].x);
    if (sp->top_p < 1.0f) { /* HF: remove while the mass before a token already reaches p */
        double before = 0;
        int keep = 0;
        while (keep < n && (keep == 0 || before < sp->top_p * z)) before += e[keep++];
        n = keep;
    }
    int keep[n > 0 ? n : 1];
    double zk = 0;
    for (int j = 0; j < n; j++) {
        keep[j] = e[j] >= sp->min_p * e[0];
        if (keep[j]) zk += e[j];
    }
    for (int j = 0; j < n; j++)
        if (keep[j]) probs[c[j].id] = (float)(e[j] / zk);
    free(c);
    free(e);
}

/* max deviation of a against the reference; kept sets must match exactly */
static int compare_probs(const float *a, const float *ref, int V, double *maxd) {
    int set_mismatch = 0;
    *maxd = 0;
    for (int i = 0; i < V; i++) {
        if ((a[i] > 0) != (ref[i] > 0)) set_mismatch++;
        double d = fabs((double)a[i] - ref[i]);
        if (d > *maxd) *maxd = d;
    }
    return set_mismatch;
}

static void fill_logits(float *x, int V, unsigned seed, int ties) {
    harness_fill(x, (size_t)V, 8.0f, seed);
    if (ties)
        for (int i = 0; i < V; i++) x[i] = roundf(x[i] * 2.0f) * 0.5f; /* ~33 distinct values */
}

static void check_config(int V, const sp_sample_params *sp, unsigned seed, int ties) {
    float *logits = malloc((size_t)V * sizeof *logits);
    float *p = malloc((size_t)V * sizeof *p), *r = malloc((size_t)V * sizeof *r);
    fill_logits(logits, V, seed, ties);
    sp_err err = {{0}};
    sp_sampler *s = sp_sampler_create(V, sp, &err);
    CHECK(s, "%s", err.msg);
    if (s) {
        CHECK(sp_sampler_probs(s, p, logits, &err) == 0, "%s", err.msg);
        probs_ref(r, logits, V, sp);
        double maxd, sum = 0;
        int mism = compare_probs(p, r, V, &maxd);
        for (int i = 0; i < V; i++) sum += p[i];
        CHECK(mism == 0 && maxd < 1e-6 && fabs(sum - 1) < 1e-5,
              "V=%d T=%g k=%d p=%g minp=%g ties=%d: %d set mismatches, max|d|=%g, sum=%.8f", V,
              (double)sp->temperature, sp->top_k, (double)sp->top_p, (double)sp->min_p, ties, mism,
              maxd, sum);
    }
    sp_sampler_free(s);
    free(logits);
    free(p);
    free(r);
}

/* the vector argmax against the scalar rule: ties (few distinct values), NaN, ±inf, all-NaN,
 * every length 1..200 (tails) and a vocabulary-sized row */
static void test_argmax(void) {
    float *x = malloc(sizeof(float) * 9000);
    uint64_t r = 12345;
    for (int trial = 0; trial < 400; trial++) {
        int V = trial < 200 ? trial + 1 : 8192 + (trial % 7);
        for (int i = 0; i < V; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            unsigned u = (unsigned)(r >> 33);
            x[i] = (float)(u % 13) - 6.0f; /* many ties */
            if (u % 97 == 0) x[i] = NAN;
            if (u % 89 == 0) x[i] = -INFINITY;
            if (trial % 50 == 7 && u % 101 == 0) x[i] = INFINITY;
        }
        if (trial % 40 == 3) x[0] = NAN;
        if (trial % 60 == 11)
            for (int i = 0; i < V; i++) x[i] = NAN;
        if (trial % 60 == 13)
            for (int i = 0; i < V; i++) x[i] = i % 3 ? -INFINITY : NAN;
        int a = sp_sample_argmax(x, V), b = sp_sample_argmax_ref(x, V);
        CHECK(a == b, "argmax V=%d trial %d: %d vs reference %d", V, trial, a, b);
    }
    free(x);
}

static void test_process_vs_ref(void) {
    const int Vs[] = {1, 2, 7, 1000, 32000};
    const float temps[] = {0.0f, 0.6f, 1.0f, 1.7f};
    const int ks[] = {0, 1, 3, 40, 999, 5000};
    const float tps[] = {1.0f, 0.95f, 0.5f, 0.0f};
    const float mps[] = {0.0f, 0.05f, 0.5f, 1.0f};
    unsigned seed = 1;
    for (size_t a = 0; a < sizeof Vs / sizeof *Vs; a++)
        for (size_t b = 0; b < sizeof temps / sizeof *temps; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
                for (size_t d = 0; d < sizeof tps / sizeof *tps; d++)
                    for (size_t e = 0; e < sizeof mps / sizeof *mps; e++) {
                        if (Vs[a] == 32000 && (d + e) % 3) continue; /* keep the run short */
                        sp_sample_params sp = {temps[b], ks[c], tps[d], mps[e], 0};
                        check_config(Vs[a], &sp, seed, (int)(seed % 2));
                        seed++;
                    }
}

/* V = 262144 (Gemma vocabulary): top-k small (partial selection) and top-p alone (doubling) */
static void test_process_large_vocab(void) {
    const int V = 262144;
    sp_sample_params cfgs[] = {
        {1.0f, 40, 1.0f, 0.0f, 0},  {0.7f, 50, 0.9f, 0.05f, 0}, {1.0f, 0, 0.95f, 0.0f, 0},
        {1.0f, 0, 0.999f, 0.0f, 0}, {0.8f, 0, 1.0f, 0.1f, 0},   {1.0f, 0, 1.0f, 0.0f, 0},
        {0.0f, 0, 1.0f, 0.0f, 0},   {1.0f, 20, 1.0f, 0.0f, 0},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) check_config(V, &cfgs[i], 100 + (unsigned)i, (int)(i % 2));
    /* temperature 2 flattens: the 0.95 nucleus is a large share of V (long doubling path) */
    sp_sample_params flat = {4.0f, 0, 0.95f, 0.0f, 0};
    check_config(V, &flat, 200, 0);
}

/* the bucketed selection at its limits: a boundary inside the far tail (more than 40 below
 * the max), all logits equal (one bucket), a tiny spread (everything in bucket 0) */
static void check_logits(const float *logits, int V, const sp_sample_params *sp, const char *what) {
    float *p = malloc((size_t)V * sizeof *p), *r = malloc((size_t)V * sizeof *r);
    sp_err err = {{0}};
    sp_sampler *s = sp_sampler_create(V, sp, &err);
    CHECK(s && sp_sampler_probs(s, p, logits, &err) == 0, "%s: %s", what, err.msg);
    probs_ref(r, logits, V, sp);
    double maxd;
    int mism = compare_probs(p, r, V, &maxd);
    CHECK(mism == 0 && maxd < 1e-6, "%s (k=%d p=%g minp=%g): %d set mismatches, max|d| %g", what, sp->top_k,
          (double)sp->top_p, (double)sp->min_p, mism, maxd);
    sp_sampler_free(s);
    free(p);
    free(r);
}

static void test_process_extremes(void) {
    enum { V = 5000 };
    static float l[V];
    const sp_sample_params cfgs[] = {{1.0f, 2600, 1.0f, 0.0f, 0}, {1.0f, 0, 1.0f - 1e-7f, 0.0f, 0},
                                     {1.0f, 17, 0.9f, 0.0f, 0},   {1.0f, 0, 0.5f, 0.0f, 0},
                                     {1.0f, 0, 0.3f, 0.2f, 0},    {1.0f, 4999, 0.999f, 0.0f, 0}};
    const int nc = (int)(sizeof cfgs / sizeof *cfgs);
    harness_fill(l, V, 1.0f, 31); /* half near 0, half near -1e4: a huge far tail */
    for (int i = 0; i < V; i += 2) l[i] -= 1e4f;
    for (int c = 0; c < nc; c++) check_logits(l, V, &cfgs[c], "far tail");
    for (int i = 0; i < V; i++) l[i] = 0.25f;
    for (int c = 0; c < nc; c++) check_logits(l, V, &cfgs[c], "all equal");
    harness_fill(l, V, 1e-3f, 32);
    for (int c = 0; c < nc; c++) check_logits(l, V, &cfgs[c], "tiny spread");
    for (int i = 0; i < V; i++) l[i] = (float)(i % 7) * 100.0f - 300.0f; /* 7 values, 100 apart */
    for (int c = 0; c < nc; c++) check_logits(l, V, &cfgs[c], "7 far levels");
}

static void test_edge_cases(void) {
    sp_err err = {{0}};
    float p[8];
    /* ties at the max: greedy and top-k pick the lowest id; min-p 1 keeps every tied max */
    const float l[8] = {1.0f, 3.0f, 0.5f, 3.0f, -2.0f, 3.0f, 2.9f, -INFINITY};
    sp_sample_params g = sp_sample_params_default();
    sp_sampler *s = sp_sampler_create(8, &g, &err);
    CHECK(sp_sampler_probs(s, p, l, &err) == 0 && p[1] == 1.0f && p[3] == 0.0f, "greedy tie");
    CHECK(sp_sampler_sample(s, l, 0, NULL, &err) == 1, "greedy sample");
    sp_sampler_free(s);

    sp_sample_params k2 = {1.0f, 2, 1.0f, 0.0f, 0};
    s = sp_sampler_create(8, &k2, &err);
    sp_sampler_probs(s, p, l, &err);
    CHECK(p[1] == 0.5f && p[3] == 0.5f && p[5] == 0.0f && p[6] == 0.0f, "top-k tie boundary: %g %g %g",
          (double)p[1], (double)p[3], (double)p[5]);
    sp_sampler_free(s);

    sp_sample_params mp1 = {1.0f, 0, 1.0f, 1.0f, 0};
    s = sp_sampler_create(8, &mp1, &err);
    sp_sampler_probs(s, p, l, &err);
    CHECK(fabsf(p[1] - 1.0f / 3) < 1e-7f && p[1] == p[3] && p[3] == p[5] && p[6] == 0.0f, "min-p 1");
    sp_sampler_free(s);

    /* top-p 0 keeps exactly one token; a top-p just below the top token's mass keeps one,
     * just above keeps two */
    const float l2[4] = {0.0f, 2.0f, 1.0f, -1.0f};
    double e[4], z = 0;
    for (int i = 0; i < 4; i++) z += e[i] = exp(l2[i]);
    const float tps[3] = {0.0f, (float)(e[1] / z) - 1e-4f, (float)(e[1] / z) + 1e-4f};
    const int want[3] = {1, 1, 2};
    for (int t = 0; t < 3; t++) {
        sp_sample_params sp = {1.0f, 0, tps[t], 0.0f, 0};
        s = sp_sampler_create(4, &sp, &err);
        sp_sampler_probs(s, p, l2, &err);
        int kept = 0;
        for (int i = 0; i < 4; i++) kept += p[i] > 0;
        CHECK(kept == want[t] && p[1] > 0, "top-p %g kept %d want %d", (double)tps[t], kept, want[t]);
        if (kept == 2) CHECK(p[2] > 0 && fabs(p[1] + p[2] - 1) < 1e-6, "renormalized");
        sp_sampler_free(s);
    }
    /* -inf never gets mass; all -inf is an error, not a crash */
    sp_sample_params t1 = {1.0f, 0, 1.0f, 0.0f, 0};
    s = sp_sampler_create(8, &t1, &err);
    CHECK(sp_sampler_probs(s, p, l, &err) == 0 && p[7] == 0.0f && p[4] > 0.0f, "-inf masked");
    const float ninf[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(sp_sampler_probs(s, p, ninf, &err) == -1 && strstr(err.msg, "-inf"), "all -inf: %s", err.msg);
    sp_sampler_free(s);
    /* bad params are rejected with the field's name */
    sp_sample_params bad = {1.0f, 0, 1.5f, 0.0f, 0};
    CHECK(!sp_sampler_create(8, &bad, &err) && strstr(err.msg, "top_p"), "bad top_p: %s", err.msg);
    bad = (sp_sample_params){-1.0f, 0, 1.0f, 0.0f, 0};
    CHECK(!sp_sampler_create(8, &bad, &err) && strstr(err.msg, "temperature"), "bad temp: %s", err.msg);
    /* inverse CDF: zeros skipped, u = 0 gives the first token with mass, u -> 1 the last */
    const float pr[6] = {0.0f, 0.25f, 0.0f, 0.5f, 0.25f, 0.0f};
    CHECK(sp_sample_probs(pr, 6, 0.0) == 1, "u=0");
    CHECK(sp_sample_probs(pr, 6, 0.2499) == 1 && sp_sample_probs(pr, 6, 0.25) == 3, "u=0.25 boundary");
    CHECK(sp_sample_probs(pr, 6, 0.75) == 4 && sp_sample_probs(pr, 6, 1.0 - 1e-16) == 4, "u->1");
    const float zero[3] = {0, 0, 0};
    CHECK(sp_sample_probs(zero, 3, 0.5) == -1, "all-zero probs");
}

/* ---- histograms -------------------------------------------------------------------------- */

/* chi-square upper quantile at 1 − 1e-4 (Wilson–Hilferty) */
static double chi2_crit(int df) {
    double a = 2.0 / (9.0 * df), z = 3.719;
    return df * pow(1 - a + z * sqrt(a), 3);
}

/* chi-square of counts against expected probabilities; df = cells with mass − 1. Counts in
 * a zero-probability cell return +inf. */
static double chi2(const int *count, const float *prob, int V, int N, int *df) {
    double x = 0;
    *df = -1;
    for (int i = 0; i < V; i++) {
        if (prob[i] <= 0) {
            if (count[i]) return INFINITY;
            continue;
        }
        double ex = (double)N * prob[i];
        x += (count[i] - ex) * (count[i] - ex) / ex;
        (*df)++;
    }
    return x;
}

static void test_histogram(void) {
    const int V = 64, N = 200000;
    float logits[64], probs[64], probs2[64];
    int count[64] = {0};
    harness_fill(logits, V, 2.0f, 7);
    sp_sample_params sp = {0.9f, 30, 0.95f, 0.02f, 1234};
    sp_err err = {{0}};
    sp_sampler *s = sp_sampler_create(V, &sp, &err);
    for (int n = 0; n < N; n++) {
        int t = sp_sampler_sample(s, logits, (uint64_t)n, probs, &err);
        CHECK(t >= 0 && t < V && probs[t] > 0, "token %d", t);
        if (t >= 0) count[t]++;
    }
    int df;
    double x = chi2(count, probs, V, N, &df);
    CHECK(df > 5 && x < chi2_crit(df), "chi2 %.2f df %d crit %.2f", x, df, chi2_crit(df));
    /* the test can fail: the same counts against a different distribution (T = 1.1) */
    sp_sample_params other = sp;
    other.temperature = 1.1f;
    sp_sampler *s2 = sp_sampler_create(V, &other, &err);
    sp_sampler_probs(s2, probs2, logits, &err);
    double x2 = chi2(count, probs2, V, N, &df);
    CHECK(x2 > chi2_crit(df), "wrong distribution not detected: chi2 %.2f", x2);
    sp_sampler_free(s);
    sp_sampler_free(s2);
}

static void test_seed_reproducible(void) {
    const int V = 1000;
    float logits[1000];
    harness_fill(logits, V, 3.0f, 11);
    sp_err err = {{0}};
    sp_sample_params sp = {1.0f, 0, 1.0f, 0.0f, 42};
    sp_sampler *a = sp_sampler_create(V, &sp, &err), *b = sp_sampler_create(V, &sp, &err);
    sp.seed = 43;
    sp_sampler *c = sp_sampler_create(V, &sp, &err);
    int same = 1, diff = 0;
    for (uint64_t n = 0; n < 200; n++) { /* interleave and reverse the order: counters alone decide */
        int ta = sp_sampler_sample(a, logits, n, NULL, &err);
        int tb = sp_sampler_sample(b, logits, 199 - n, NULL, &err);
        int tb2 = sp_sampler_sample(b, logits, n, NULL, &err);
        int tc = sp_sampler_sample(c, logits, n, NULL, &err);
        same &= ta == tb2;
        diff += ta != tc;
        (void)tb;
    }
    CHECK(same, "same seed and counter gave different tokens");
    CHECK(diff > 100, "seed 42 vs 43 agree too often: %d of 200 differ", diff);
    sp_sampler_free(a);
    sp_sampler_free(b);
    sp_sampler_free(c);
}

/* residual: empirical distribution of sp_sample_residual vs normalize(max(0, p − q)) in
 * double; and the whole speculative step (x ~ q, accept with min(1, p/q), else residual)
 * reproducing p. */
static void test_residual(void) {
    enum { V = 40, N = 200000 };
    float lp[V], lq[V], p[V], q[V], r[V], want[V];
    harness_fill(lp, V, 2.0f, 21);
    harness_fill(lq, V, 2.0f, 22);
    sp_err err = {{0}};
    sp_sample_params sp = {1.0f, 25, 1.0f, 0.0f, 9};
    sp_sampler *s = sp_sampler_create(V, &sp, &err);
    sp_sampler_probs(s, p, lp, &err);
    sp_sampler_probs(s, q, lq, &err); /* different top-25 supports: partly disjoint */
    double tot = 0;
    for (int i = 0; i < V; i++) tot += fmax(0.0, (double)p[i] - q[i]);
    for (int i = 0; i < V; i++) want[i] = (float)(fmax(0.0, (double)p[i] - q[i]) / tot);
    CHECK(sp_sample_residual_probs(r, p, q, V) == 0, "no fallback expected");
    double maxd = 0;
    for (int i = 0; i < V; i++) maxd = fmax(maxd, fabs((double)r[i] - want[i]));
    CHECK(maxd < 1e-6, "residual probs max|d| %g", maxd);

    int count[V] = {0}, df;
    for (int n = 0; n < N; n++) {
        int t = sp_sample_residual(p, q, V, sp_rng_uniform(5, SP_RNG_STREAM_RESIDUAL, (uint64_t)n));
        CHECK(t >= 0 && want[t] > 0, "residual token %d outside support", t);
        if (t >= 0) count[t]++;
    }
    double x = chi2(count, want, V, N, &df);
    CHECK(x < chi2_crit(df), "residual chi2 %.2f df %d", x, df);

    /* speculative sampling step: emitted tokens distributed as p */
    int spec[V] = {0};
    for (int n = 0; n < N; n++) {
        int d = sp_sample_probs(q, V, sp_rng_uniform(5, SP_RNG_STREAM_DRAFT, (uint64_t)n));
        double u = sp_rng_uniform(5, SP_RNG_STREAM_ACCEPT, (uint64_t)n);
        int t = u < fmin(1.0, (double)p[d] / q[d])
                    ? d
                    : sp_sample_residual(p, q, V, sp_rng_uniform(5, SP_RNG_STREAM_RESIDUAL, (uint64_t)n));
        spec[t]++;
    }
    x = chi2(spec, p, V, N, &df);
    CHECK(x < chi2_crit(df), "speculative step chi2 vs p %.2f df %d", x, df);
    /* ... and it can fail: replacing the residual by p breaks the identity */
    int broken[V] = {0};
    for (int n = 0; n < N; n++) {
        int d = sp_sample_probs(q, V, sp_rng_uniform(5, SP_RNG_STREAM_DRAFT, (uint64_t)n));
        double u = sp_rng_uniform(5, SP_RNG_STREAM_ACCEPT, (uint64_t)n);
        int t = u < fmin(1.0, (double)p[d] / q[d])
                    ? d
                    : sp_sample_probs(p, V, sp_rng_uniform(5, SP_RNG_STREAM_RESIDUAL, (uint64_t)n));
        broken[t]++;
    }
    x = chi2(broken, p, V, N, &df);
    CHECK(x > chi2_crit(df), "broken verifier not detected: chi2 %.2f", x);

    /* degenerate residual (p == q): fall back to p */
    CHECK(sp_sample_residual_probs(r, p, p, V) == 1, "fallback flag");
    maxd = 0;
    for (int i = 0; i < V; i++) maxd = fmax(maxd, fabs((double)r[i] - p[i]));
    CHECK(maxd < 1e-6, "fallback equals p: %g", maxd);
    for (int n = 0; n < 1000; n++) {
        double u = sp_rng_uniform(6, 0, (uint64_t)n);
        CHECK(sp_sample_residual(p, p, V, u) == sp_sample_probs(p, V, u), "fallback draw");
    }
    sp_sampler_free(s);
}

int main(void) {
    RUN(test_argmax);
    RUN(test_process_vs_ref);
    RUN(test_process_large_vocab);
    RUN(test_process_extremes);
    RUN(test_edge_cases);
    RUN(test_histogram);
    RUN(test_seed_reproducible);
    RUN(test_residual);
    return harness_done("test_sample");
}
