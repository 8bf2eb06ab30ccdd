/* test_kernels.c — every fast kernel against its double-precision _ref on random non-zero
 * inputs, bitwise batch invariance (matmul over T rows vs each row alone, attention over T
 * queries vs one at a time, for pool sizes 1, 2, 3), the portable matmul path bit for bit
 * against the SIMD one, RoPE frequency fixtures (docs/TRANSFORMER.md §4) and the pool. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

static sp_pool *pools[4]; /* pools[n]: n threads, n = 1..3 */

static float *falloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

/* ---- pool ---------------------------------------------------------------------------- */
typedef struct {
    atomic_int hits[8];
    atomic_int calls;
} pool_probe;

static void probe_fn(void *ctx, int i, int n) {
    pool_probe *p = ctx;
    if (i >= 0 && i < 8 && n <= 8) atomic_fetch_add(&p->hits[i], 1);
    atomic_fetch_add(&p->calls, 1);
}

static void test_pool(void) {
    for (int n = 1; n <= 3; n++) {
        sp_pool *pool = pools[n];
        CHECK(sp_pool_size(pool) == n, "size %d", sp_pool_size(pool));
        pool_probe pr;
        memset(&pr, 0, sizeof pr);
        int runs = 3000;
        for (int r = 0; r < runs; r++) sp_pool_run(pool, probe_fn, &pr);
        CHECK(atomic_load(&pr.calls) == runs * n, "n=%d calls %d", n, atomic_load(&pr.calls));
        for (int i = 0; i < n; i++) CHECK(atomic_load(&pr.hits[i]) == runs, "n=%d thread %d", n, i);
    }
    /* a pool idle long enough for its workers to fall asleep still answers */
    pool_probe pr;
    memset(&pr, 0, sizeof pr);
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    sp_pool_run(pools[3], probe_fn, &pr);
    CHECK(atomic_load(&pr.calls) == 3, "after sleep: %d", atomic_load(&pr.calls));
    /* a region published before the workers first run (create, run at once, free) */
    for (int r = 0; r < 200; r++) {
        sp_pool *q = sp_pool_create(3);
        memset(&pr, 0, sizeof pr);
        sp_pool_run(q, probe_fn, &pr);
        sp_pool_run(q, probe_fn, &pr);
        sp_pool_free(q);
        CHECK(atomic_load(&pr.calls) == 6, "fresh pool run %d: %d calls", r, atomic_load(&pr.calls));
    }
    /* NULL pool runs on the caller */
    memset(&pr, 0, sizeof pr);
    sp_pool_run(NULL, probe_fn, &pr);
    CHECK(atomic_load(&pr.calls) == 1 && atomic_load(&pr.hits[0]) == 1, "NULL pool");
    CHECK(sp_pool_size(NULL) == 1, "NULL size");
}

static void test_pool_split(void) {
    int totals[] = {0, 1, 7, 64, 65, 1000, 3072};
    int aligns[] = {1, 8, 24};
    for (size_t a = 0; a < 3; a++)
        for (size_t ti = 0; ti < sizeof totals / sizeof *totals; ti++)
            for (int n = 1; n <= 5; n++) {
                int total = totals[ti], prev = 0;
                for (int i = 0; i < n; i++) {
                    int lo, hi;
                    sp_pool_split(total, aligns[a], i, n, &lo, &hi);
                    CHECK(lo == prev && hi >= lo && hi <= total, "split %d/%d of %d: [%d,%d)", i, n, total, lo, hi);
                    CHECK(lo % aligns[a] == 0 || lo == total, "lo %d not aligned to %d", lo, aligns[a]);
                    prev = hi;
                }
                CHECK(prev == total, "split of %d by %d covers %d", total, n, prev);
            }
}

/* ---- matmul -------------------------------------------------------------------------- */
/* W as stored in dtype dt; *wf gets the exact f32 values (for the error scale) */
static void *make_weights(int N, int K, sp_dtype dt, unsigned seed, float *wf) {
    harness_fill(wf, (size_t)N * K, 1.0f, seed);
    size_t n = (size_t)N * K;
    if (dt == SP_DT_F32) {
        float *w = falloc(n);
        memcpy(w, wf, n * sizeof(float));
        return w;
    }
    uint16_t *w = malloc((n ? n : 1) * 2);
    if (!w) abort();
    for (size_t i = 0; i < n; i++) {
        w[i] = dt == SP_DT_BF16 ? sp_f32_to_bf16(wf[i]) : sp_f32_to_f16(wf[i]);
        wf[i] = dt == SP_DT_BF16 ? sp_bf16_to_f32(w[i]) : sp_f16_to_f32(w[i]);
    }
    return w;
}

static const sp_dtype DTS[3] = {SP_DT_F32, SP_DT_BF16, SP_DT_F16};

static void check_matmul_shape(int T, int N, int K, sp_dtype dt, unsigned seed) {
    float *wf = falloc((size_t)N * K), *X = falloc((size_t)T * K);
    void *wd = make_weights(N, K, dt, seed, wf);
    harness_fill(X, (size_t)T * K, 2.0f, seed + 1000);
    sp_mat W = {wd, dt, N, K, 0, NULL};
    float *Y = falloc((size_t)T * N), *R = falloc((size_t)T * N), *P = falloc((size_t)T * N);
    sp_matmul_ref(R, X, T, &W);
    sp_matmul(pools[2], Y, X, T, &W);
    sp_matmul_portable(pools[1], P, X, T, &W);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double scale = 0;
            for (int k = 0; k < K; k++) scale += fabs((double)X[(size_t)t * K + k] * wf[(size_t)n * K + k]);
            double err = fabs((double)Y[(size_t)t * N + n] - R[(size_t)t * N + n]);
            if (err > 1e-5 * scale + 1e-30 && bad++ < 3)
                CHECK(0, "%s T=%d N=%d K=%d y[%d,%d]=%g ref %g scale %g", sp_dtype_name(dt), T, N, K, t, n,
                      Y[(size_t)t * N + n], R[(size_t)t * N + n], scale);
        }
    CHECK(memcmp(Y, P, (size_t)T * N * sizeof(float)) == 0, "%s T=%d N=%d K=%d: portable path differs",
          sp_dtype_name(dt), T, N, K);
    free(wf), free(X), free(wd), free(Y), free(R), free(P);
}

static void test_matmul_vs_ref(void) {
    int Ks[] = {1, 16, 17, 33, 1000};
    int Ns[] = {1, 3, 65};
    int Ts[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 64};
    unsigned seed = 1;
    for (int d = 0; d < 3; d++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
                for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
                    check_matmul_shape(Ts[ti], Ns[ni], Ks[ki], DTS[d], seed++);
    /* token chunking of the prefill path (chunk = 128 tokens at K = 1000) */
    check_matmul_shape(300, 13, 1000, SP_DT_BF16, 77);
}

/* Y over T rows with pools of 1, 2, 3 threads == each row alone, bit for bit */
static void check_matmul_invariance(int T, int N, int K, sp_dtype dt, unsigned seed) {
    float *wf = falloc((size_t)N * K), *X = falloc((size_t)T * K);
    void *wd = make_weights(N, K, dt, seed, wf);
    harness_fill(X, (size_t)T * K, 2.0f, seed + 7);
    sp_mat W = {wd, dt, N, K, 0, NULL};
    float *one = falloc((size_t)T * N), *Y = falloc((size_t)T * N);
    for (int t = 0; t < T; t++) sp_matmul(pools[1], one + (size_t)t * N, X + (size_t)t * K, 1, &W);
    for (int p = 1; p <= 3; p++) {
        sp_matmul(pools[p], Y, X, T, &W);
        for (int t = 0; t < T; t++)
            CHECK(memcmp(Y + (size_t)t * N, one + (size_t)t * N, (size_t)N * sizeof(float)) == 0,
                  "%s T=%d N=%d K=%d threads=%d: row %d differs from its single-token result",
                  sp_dtype_name(dt), T, N, K, p, t);
    }
    /* a row at a different index of a different batch */
    if (T > 3) {
        sp_matmul(pools[3], Y, X + K, 3, &W);
        CHECK(memcmp(Y, one + N, (size_t)3 * N * sizeof(float)) == 0, "offset batch differs");
    }
    free(wf), free(X), free(wd), free(one), free(Y);
}

static void test_matmul_batch_invariance(void) {
    unsigned seed = 500;
    for (int d = 0; d < 3; d++) {
        for (int T = 1; T <= 17; T++) check_matmul_invariance(T, 65, 33, DTS[d], seed++);
        check_matmul_invariance(64, 65, 1000, DTS[d], seed++);
        check_matmul_invariance(9, 3, 17, DTS[d], seed++);
        check_matmul_invariance(6, 200, 1, DTS[d], seed++);
    }
    check_matmul_invariance(200, 37, 1000, SP_DT_BF16, seed++); /* crosses a token chunk */
}

/* ---- rmsnorm ------------------------------------------------------------------------- */
static void test_rmsnorm(void) {
    int ns[] = {1, 7, 16, 128, 1000};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        int n = ns[i], T = 5;
        float *x = falloc((size_t)T * n), *w = falloc(n), *y = falloc((size_t)T * n), *r = falloc((size_t)T * n);
        harness_fill(x, (size_t)T * n, 3.0f, 11 + i);
        harness_fill(w, n, 1.5f, 12 + i);
        for (int wi = 0; wi < 2; wi++) {
            const float *ww = wi ? w : NULL;
            sp_rmsnorm(y, x, ww, T, n, 1e-6f);
            sp_rmsnorm_ref(r, x, ww, T, n, 1e-6f);
            for (int j = 0; j < T * n; j++)
                CHECK(fabsf(y[j] - r[j]) <= 1e-5f * (fabsf(r[j]) + 1e-3f), "n=%d w=%d y[%d]=%g ref %g", n, wi, j, y[j], r[j]);
            /* aliasing y == x, and each row alone, bit for bit */
            float *z = falloc((size_t)T * n);
            memcpy(z, x, (size_t)T * n * sizeof(float));
            sp_rmsnorm(z, z, ww, T, n, 1e-6f);
            CHECK(memcmp(z, y, (size_t)T * n * sizeof(float)) == 0, "in-place differs");
            sp_rmsnorm(z, x + n, ww, 1, n, 1e-6f);
            CHECK(memcmp(z, y + n, (size_t)n * sizeof(float)) == 0, "single row differs");
            free(z);
        }
        free(x), free(w), free(y), free(r);
    }
}

/* ---- RoPE ---------------------------------------------------------------------------- */
static void test_rope_inv_freq(void) {
    float f[256];
    /* default */
    sp_rope_params d = {.type = SP_ROPE_DEFAULT, .theta = 10000, .factor = 1};
    sp_rope_inv_freq(f, 128, &d);
    for (int j = 0; j < 64; j++) {
        double e = pow(10000.0, -2.0 * j / 128);
        CHECK(fabs(f[j] - e) <= 2e-7 * e, "default j=%d %g vs %g", j, f[j], e);
    }
    /* llama3 fixture: divisors 1, 1.3753, 8, 8 */
    sp_rope_params l = {.type = SP_ROPE_LLAMA3, .theta = 5e5, .factor = 8, .low_freq_factor = 1,
                        .high_freq_factor = 4, .original_max_pos = 512};
    sp_rope_inv_freq(f, 8, &l);
    double want[4] = {1, 1.3753, 8, 8};
    for (int j = 0; j < 4; j++) {
        double base = pow(5e5, -2.0 * j / 8);
        CHECK(fabs(base / f[j] - want[j]) <= 1e-3, "llama3 j=%d divisor %g want %g", j, base / f[j], want[j]);
    }
    /* proportional: D 32, rho .25, theta 1e6 → 4 nonzero (exponent over the full D), 12 zero */
    sp_rope_params p = {.type = SP_ROPE_PROPORTIONAL, .theta = 1e6, .factor = 1, .partial_rotary_factor = 0.25};
    sp_rope_inv_freq(f, 32, &p);
    for (int j = 0; j < 16; j++) {
        double e = j < 4 ? pow(1e6, -2.0 * j / 32) : 0;
        CHECK(fabs(f[j] - e) <= 2e-7 * e, "proportional j=%d %g vs %g", j, f[j], e);
    }
    p.factor = 4;
    sp_rope_inv_freq(f, 32, &p);
    CHECK(fabs(f[1] - pow(1e6, -2.0 / 32) / 4) <= 1e-7, "proportional factor: %g", f[1]);
}

static void test_rope(void) {
    int Ds[] = {2, 8, 64, 128, 512};
    int poss[] = {0, 1, 17, 1000, 40000};
    sp_rope_params rps[2] = {{.type = SP_ROPE_DEFAULT, .theta = 10000, .factor = 1},
                             {.type = SP_ROPE_PROPORTIONAL, .theta = 1e6, .factor = 1, .partial_rotary_factor = 0.25}};
    for (int r = 0; r < 2; r++)
        for (size_t di = 0; di < 5; di++)
            for (size_t pi = 0; pi < 5; pi++) {
                int D = Ds[di], nh = 3, pos = poss[pi];
                float inv[256], *x = falloc((size_t)nh * D), *a = falloc((size_t)nh * D), *b = falloc((size_t)nh * D);
                sp_rope_inv_freq(inv, D, &rps[r]);
                harness_fill(x, (size_t)nh * D, 2.0f, 40 + di * 7 + pi);
                memcpy(a, x, (size_t)nh * D * sizeof(float));
                memcpy(b, x, (size_t)nh * D * sizeof(float));
                sp_rope(a, nh, D, inv, pos);
                sp_rope_ref(b, nh, D, inv, pos);
                for (int h = 0; h < nh; h++)
                    for (int j = 0; j < D / 2; j++) {
                        int i0 = h * D + j, i1 = i0 + D / 2;
                        float sc = fabsf(x[i0]) + fabsf(x[i1]);
                        CHECK(fabsf(a[i0] - b[i0]) <= 1e-6f * sc && fabsf(a[i1] - b[i1]) <= 1e-6f * sc,
                              "rope r=%d D=%d pos=%d j=%d", r, D, pos, j);
                        if (inv[j] == 0.0f) CHECK(a[i0] == x[i0] && a[i1] == x[i1], "zero-freq pair moved");
                    }
                free(x), free(a), free(b);
            }
}

/* ---- activations --------------------------------------------------------------------- */
static void test_activations(void) {
    size_t n = 1001;
    float *g = falloc(n), *u = falloc(n), *y = falloc(n), *r = falloc(n);
    harness_fill(g, n, 12.0f, 3);
    harness_fill(u, n, 2.0f, 4);
    g[0] = 0.0f, g[1] = -30.0f, g[2] = 30.0f, g[3] = -100.0f;
    sp_silu_mul(y, g, u, n);
    sp_silu_mul_ref(r, g, u, n);
    for (size_t i = 0; i < n; i++)
        CHECK(fabsf(y[i] - r[i]) <= 1e-6f * fabsf(u[i]) * (fabsf(g[i]) + 1e-3f), "silu %zu: %g vs %g", i, y[i], r[i]);
    /* an element's value does not depend on its position or on n (vector body vs tail) */
    float part[40];
    sp_silu_mul(part, g + 5, u + 5, 37);
    CHECK(memcmp(part, y + 5, 37 * sizeof(float)) == 0, "silu_mul of a slice differs");
    /* in place (out == gate, as the forward pass calls it), through the masked tail */
    float inpl[40];
    memcpy(inpl, g + 5, 37 * sizeof(float));
    sp_silu_mul(inpl, inpl, u + 5, 37);
    CHECK(memcmp(part, inpl, 37 * sizeof(float)) == 0, "silu_mul in place differs");
    sp_gelu_tanh_mul(y, g, u, n);
    sp_gelu_tanh_mul(part, g + 5, u + 5, 37);
    memcpy(inpl, g + 5, 37 * sizeof(float));
    sp_gelu_tanh_mul(inpl, inpl, u + 5, 37);
    CHECK(memcmp(part, inpl, 37 * sizeof(float)) == 0, "gelu_tanh_mul in place differs");
    CHECK(memcmp(part, y + 5, 37 * sizeof(float)) == 0, "gelu_tanh_mul of a slice differs");
    sp_gelu_tanh_mul_ref(r, g, u, n);
    for (size_t i = 0; i < n; i++)
        CHECK(fabsf(y[i] - r[i]) <= 1e-6f * fabsf(u[i]) * (fabsf(g[i]) + 1e-3f), "gelu %zu: %g vs %g", i, y[i], r[i]);
    CHECK(fabsf(sp_gelu_tanh(1.0f) - 0.8411920f) < 1e-6f, "gelu(1) = %.8f", sp_gelu_tanh(1.0f));
    /* the scalar GeGLU (the training forward's, and builds without AVX-512) is the kernel's lane */
    for (size_t i = 0; i < n; i++)
        CHECK(sp_gelu_tanh(g[i]) * u[i] == y[i], "scalar gelu %zu: %.9g vs %.9g", i, sp_gelu_tanh(g[i]) * u[i], y[i]);
    /* softcap */
    memcpy(y, g, n * sizeof(float));
    sp_softcap(y, n, 30.0f);
    for (size_t i = 0; i < n; i++) {
        double e = 30.0 * tanh(g[i] / 30.0);
        CHECK(fabs(y[i] - e) <= 1e-6 * fabs(e) + 1e-7, "softcap %zu", i);
    }
    /* tanh (softcap with c = 1) on a log sweep over both signs, through the 0.5 switch, to
     * saturation, plus 0, ±inf and NaN: within 3e-7 relative of double tanh */
    {
        enum { NS = 4003 };
        float *x = falloc(NS), *t = falloc(NS);
        for (int i = 0; i < NS - 3; i++) x[i] = (i & 1 ? -1.0f : 1.0f) * powf(10.0f, -8.0f + 10.0f * (float)i / (NS - 4));
        x[NS - 3] = INFINITY, x[NS - 2] = -INFINITY, x[NS - 1] = 0.0f;
        memcpy(t, x, NS * sizeof(float));
        sp_softcap(t, NS, 1.0f);
        double worst = 0;
        for (int i = 0; i < NS; i++) {
            double e = tanh((double)x[i]), rel = fabs(t[i] - e) / (fabs(e) > 1e-30 ? fabs(e) : 1.0);
            worst = rel > worst ? rel : worst;
        }
        CHECK(worst <= 3e-7, "tanh: worst relative error %g", worst);
        t[0] = NAN;
        sp_softcap(t, 1, 1.0f);
        CHECK(isnan(t[0]), "tanh(NaN) is not NaN");
        free(x), free(t);
    }
    /* softmax */
    memcpy(y, g, n * sizeof(float));
    sp_softmax(y, (int)n);
    double m = g[0], s = 0;
    for (size_t i = 0; i < n; i++) m = g[i] > m ? g[i] : m;
    for (size_t i = 0; i < n; i++) s += exp(g[i] - m);
    for (size_t i = 0; i < n; i++) {
        double e = exp(g[i] - m) / s;
        CHECK(fabs(y[i] - e) <= 1e-5 * e + 1e-12, "softmax %zu: %g vs %g", i, y[i], e);
    }
    /* argmax: lowest index wins ties */
    float a[6] = {1, 5, 2, 5, -1, 5};
    CHECK(sp_argmax(a, 6) == 1, "argmax tie %d", sp_argmax(a, 6));
    CHECK(sp_argmax(a, 1) == 0, "argmax n=1");
    free(g), free(u), free(y), free(r);
}

/* ---- attention ----------------------------------------------------------------------- */
typedef struct {
    int NH, KVH, D, cap, ring, window, T, pos0;
} attn_case;

/* nc = 1: noncausal (a drafter block) */
static void check_attention_nc(attn_case c, int nc, unsigned seed) {
    sp_attn_shape s = {c.T, c.pos0, c.NH, c.KVH, c.D, c.cap, c.ring, c.window, 1.0f / sqrtf((float)c.D), nc};
    size_t kvn = (size_t)c.cap * c.KVH * c.D, qn = (size_t)c.T * c.NH * c.D;
    float *K = falloc(kvn), *V = falloc(kvn), *q = falloc(qn);
    float *o = falloc(qn), *r = falloc(qn), *one = falloc(qn);
    /* fill the cache as a run of appends would: position p in slot p % cap (or p) */
    harness_fill(K, kvn, 2.0f, seed);
    harness_fill(V, kvn, 1.0f, seed + 1);
    harness_fill(q, qn, 2.0f, seed + 2);
    sp_attention_ref(r, q, K, V, &s);
    for (int p = 1; p <= 3; p++) {
        sp_attention(pools[p], o, q, K, V, &s);
        int bad = 0;
        for (size_t i = 0; i < qn; i++)
            if (fabsf(o[i] - r[i]) > 2e-6f && bad++ < 3)
                CHECK(0, "attn NH=%d KVH=%d D=%d cap=%d ring=%d win=%d T=%d pos0=%d: o[%zu]=%g ref %g", c.NH,
                      c.KVH, c.D, c.cap, c.ring, c.window, c.T, c.pos0, i, o[i], r[i]);
        if (p == 1) {
            /* one query at a time: bit-identical */
            for (int t = 0; t < c.T; t++) {
                sp_attn_shape s1 = s;
                s1.T = 1, s1.pos0 = nc ? c.pos0 + c.T - 1 : c.pos0 + t, s1.noncausal = 0;
                sp_attention(pools[1], one + (size_t)t * c.NH * c.D, q + (size_t)t * c.NH * c.D, K, V, &s1);
            }
        }
        CHECK(memcmp(o, one, qn * sizeof(float)) == 0, "attn T=%d threads=%d ring=%d win=%d: batch differs from single",
              c.T, p, c.ring, c.window);
    }
    free(K), free(V), free(q), free(o), free(r), free(one);
}

static void check_attention(attn_case c, unsigned seed) { check_attention_nc(c, 0, seed); }

static void test_attention(void) {
    unsigned seed = 900;
    int windows[] = {0, 4, 7};
    for (int wi = 0; wi < 3; wi++)
        for (int T = 1; T <= 6; T += (T < 3 ? 1 : 3)) {
            int w = windows[wi];
            /* linear cache, GQA 4:2, D 16 */
            check_attention((attn_case){4, 2, 16, 64, 0, w, T, 3}, seed++);
            check_attention((attn_case){4, 2, 16, 64, 0, w, T, 40}, seed++);
            /* odd head dim, MHA and MQA */
            check_attention((attn_case){3, 3, 17, 32, 0, w, T, 5}, seed++);
            check_attention((attn_case){6, 1, 64, 48, 0, w, T, 20}, seed++);
            if (w > 0) {
                /* ring cache of window + T − 1 slots (+1), positions past several wraps */
                int cap = w + T;
                check_attention((attn_case){4, 2, 16, cap, 1, w, T, 5 * cap + 3}, seed++);
                check_attention((attn_case){4, 1, 32, cap + 5, 1, w, T, 7 * (cap + 5) + 1}, seed++);
                check_attention((attn_case){2, 2, 16, cap, 1, w, T, 0}, seed++);
            } else {
                check_attention((attn_case){4, 2, 16, 64, 1, 0, T, 50}, seed++); /* ring, not yet wrapped */
            }
        }
    /* noncausal blocks (a drafter's): every token sees up to pos0+T-1 */
    for (int T = 1; T <= 9; T += 4) {
        check_attention_nc((attn_case){8, 2, 64, 300, 0, 0, T, 200}, 1, seed++);
        check_attention_nc((attn_case){4, 1, 17, 40, 0, 0, T, 0}, 1, seed++);
    }
    /* large GQA groups: 16 query heads on one KV head (split into subgroups), 8 on 2 */
    check_attention((attn_case){16, 1, 32, 40, 0, 0, 3, 30}, seed++);
    check_attention((attn_case){16, 2, 16, 24, 1, 9, 1, 100}, seed++);
    /* more than one token block (8 tokens), window edges inside a unit, ring wraps */
    check_attention((attn_case){4, 2, 16, 64, 0, 0, 12, 7}, seed++);
    check_attention((attn_case){4, 2, 16, 20, 1, 7, 12, 83}, seed++);
    check_attention((attn_case){8, 1, 24, 40, 0, 5, 9, 0}, seed++);
    check_attention((attn_case){4, 2, 32, 700, 0, 0, 10, 600}, seed++);
    check_attention((attn_case){4, 2, 32, 320, 1, 300, 10, 1000}, seed++);
    /* long contexts: fewer tokens per unit so scores fit the scratch */
    check_attention((attn_case){16, 2, 16, 2600, 0, 0, 8, 2500}, seed++);
    check_attention((attn_case){16, 2, 16, 1200, 1, 1100, 9, 5000}, seed++);
    /* more keys than the scratch holds even for one row (32768): the two-pass path */
    check_attention((attn_case){1, 1, 16, 33100, 0, 0, 2, 33000}, seed++);
    check_attention((attn_case){2, 1, 16, 33100, 1, 33050, 3, 70000}, seed++);
    check_attention((attn_case){2, 1, 16, 5000, 0, 0, 2, 4500}, seed++);
    check_attention((attn_case){2, 1, 16, 5000, 0, 4200, 2, 4900}, seed++);
}

int main(void) {
    for (int n = 1; n <= 3; n++) {
        pools[n] = sp_pool_create(n);
        if (!pools[n]) return 1;
    }
    RUN(test_pool);
    RUN(test_pool_split);
    RUN(test_matmul_vs_ref);
    RUN(test_matmul_batch_invariance);
    RUN(test_rmsnorm);
    RUN(test_rope_inv_freq);
    RUN(test_rope);
    RUN(test_activations);
    RUN(test_attention);
    for (int n = 1; n <= 3; n++) sp_pool_free(pools[n]);
    return harness_done("test_kernels");
}
