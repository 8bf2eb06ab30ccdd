/* test_simd.c — every SIMD tier this processor has (scalar, AVX2, AVX-512 on x86-64; scalar,
 * NEON on aarch64) gives the same bits as the portable scalar path, for every kernel with a
 * vector version: matmul (f32 / bf16 / f16, T = 1..16 and longer, 1 and 2 threads), attention
 * (causal, windowed, ring, noncausal, odd head dims, 1 and 2 threads), RMSNorm, the gated
 * activations, softcap, softmax, argmax, the canonical dot and the training GEMM tiles.
 * Inputs are random with a fixed seed plus edge values (±0, denormals, huge, ±inf, NaN where a
 * kernel passes them through) and exact cancellations. Also: SPECULA_CPU caps the tier. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "core/cpu.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "train/ops.h"

static sp_pool *pools[3]; /* pools[n]: n threads */
static sp_cpu_tier tiers[4];
static int n_tiers; /* tiers[0] is SP_CPU_SCALAR */

static float *falloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

static void use_tier(sp_cpu_tier t) {
    if (sp_cpu_force(t) != 0) abort();
}

/* equal bits, or both NaN */
static int same_bits(const float *a, const float *b, size_t n, size_t *at) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            *at = i;
            return 0;
        }
    return 1;
}

/* random values with a sprinkling of edge cases that are finite (matmul, attention) */
static void fill_finite(float *x, size_t n, float a, unsigned seed) {
    harness_fill(x, n, a, seed);
    for (size_t i = 0; i < n; i += 7) {
        switch ((i / 7 + seed) % 6) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = -0.0f; break;
        case 2: x[i] = 1e-39f; break;  /* denormal */
        case 3: x[i] *= 1e-20f; break; /* products that underflow */
        default: break;
        }
    }
}

/* ---- matmul ------------------------------------------------------------------------ */
static void *make_weights(const float *wf, size_t n, sp_dtype dt) {
    if (dt == SP_DT_F32) {
        float *w = falloc(n);
        memcpy(w, wf, n * sizeof(float));
        return w;
    }
    uint16_t *w = malloc((n ? n : 1) * 2);
    if (!w) abort();
    for (size_t i = 0; i < n; i++) w[i] = dt == SP_DT_BF16 ? sp_f32_to_bf16(wf[i]) : sp_f32_to_f16(wf[i]);
    return w;
}

static void check_matmul(int T, int N, int K, sp_dtype dt, unsigned seed) {
    float *wf = falloc((size_t)N * K), *X = falloc((size_t)T * K);
    fill_finite(wf, (size_t)N * K, 1.0f, seed);
    fill_finite(X, (size_t)T * K, 2.0f, seed + 1);
    /* exact cancellation in one row: w[n=0] = x[t=0] and w[n=1] = −x[t=0] lane by lane */
    if (N > 1 && K > 1)
        for (int k = 0; k < K; k++) wf[k] = X[k], wf[K + k] = k % 2 ? -X[k] : X[k];
    void *wd = make_weights(wf, (size_t)N * K, dt);
    sp_mat W = {wd, dt, N, K, 0, NULL};
    float *ref = falloc((size_t)T * N), *Y = falloc((size_t)T * N);
    use_tier(SP_CPU_SCALAR);
    sp_matmul(pools[1], ref, X, T, &W);
    for (int ti = 1; ti < n_tiers; ti++)
        for (int p = 1; p <= 2; p++) {
            use_tier(tiers[ti]);
            memset(Y, 0xff, (size_t)T * N * sizeof(float));
            sp_matmul(pools[p], Y, X, T, &W);
            size_t at;
            CHECK(same_bits(ref, Y, (size_t)T * N, &at), "%s matmul %s T=%d N=%d K=%d threads=%d: [%zu] %.9g vs scalar %.9g",
                  sp_cpu_tier_name(tiers[ti]), sp_dtype_name(dt), T, N, K, p, at, Y[at], ref[at]);
        }
    free(wf), free(X), free(wd), free(ref), free(Y);
}

static void test_matmul_tiers(void) {
    static const sp_dtype dts[3] = {SP_DT_F32, SP_DT_BF16, SP_DT_F16};
    int Ks[] = {1, 15, 16, 17, 40, 100};
    int Ns[] = {1, 7, 25, 50};
    unsigned seed = 1;
    for (int d = 0; d < 3; d++) {
        for (int T = 1; T <= 16; T++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
                check_matmul(T, Ns[(T + ki) % 4], Ks[ki], dts[d], seed++);
        check_matmul(1, 97, 1000, dts[d], seed++);
        check_matmul(8, 49, 1000, dts[d], seed++);
        check_matmul(40, 30, 2048, dts[d], seed++); /* token chunks on every tier */
    }
}

/* ---- attention --------------------------------------------------------------------- */
static void check_attn(int NH, int KVH, int D, int cap, int ring, int window, int T, int pos0, int nc, unsigned seed) {
    sp_attn_shape s = {T, pos0, NH, KVH, D, cap, ring, window, 1.0f / sqrtf((float)D), nc};
    size_t kvn = (size_t)cap * KVH * D, qn = (size_t)T * NH * D;
    float *K = falloc(kvn), *V = falloc(kvn), *q = falloc(qn), *ref = falloc(qn), *o = falloc(qn);
    fill_finite(K, kvn, 2.0f, seed);
    fill_finite(V, kvn, 1.0f, seed + 1);
    fill_finite(q, qn, 2.0f, seed + 2);
    use_tier(SP_CPU_SCALAR);
    sp_attention(pools[1], ref, q, K, V, &s);
    for (int ti = 1; ti < n_tiers; ti++)
        for (int p = 1; p <= 2; p++) {
            use_tier(tiers[ti]);
            sp_attention(pools[p], o, q, K, V, &s);
            size_t at;
            CHECK(same_bits(ref, o, qn, &at),
                  "%s attention NH=%d KVH=%d D=%d ring=%d win=%d T=%d pos0=%d nc=%d threads=%d: [%zu] %.9g vs %.9g",
                  sp_cpu_tier_name(tiers[ti]), NH, KVH, D, ring, window, T, pos0, nc, p, at, o[at], ref[at]);
        }
    free(K), free(V), free(q), free(ref), free(o);
}

static void test_attention_tiers(void) {
    unsigned seed = 300;
    for (int T = 1; T <= 16; T++) {
        check_attn(4, 2, 16, 64, 0, 0, T, 3 + T, 0, seed++);
        check_attn(3, 3, 17, 64, 0, T % 3 ? 0 : 5, T, 20, 0, seed++); /* odd D, MHA, window */
        check_attn(8, 1, 40, 80, 0, 0, T, 30, T % 4 == 0, seed++);    /* D tail of 8, noncausal */
    }
    check_attn(4, 2, 128, 700, 0, 0, 9, 600, 0, seed++);
    check_attn(2, 1, 256, 300, 0, 0, 3, 200, 0, seed++); /* two P·V slices of 128 */
    check_attn(4, 2, 33, 20, 1, 7, 12, 83, 0, seed++);   /* ring wraps */
    check_attn(16, 2, 64, 40, 0, 0, 3, 30, 0, seed++);
    check_attn(1, 1, 16, 33100, 0, 0, 2, 33000, 0, seed++); /* two-pass scores */
    /* whole 128- and 64-float P·V slices (the register-resident form): a causal prefill of
     * several token blocks from 0, and rings that wrap inside a run of keys */
    check_attn(4, 2, 128, 40, 0, 0, 40, 0, 0, seed++);
    check_attn(4, 2, 128, 30, 1, 16, 12, 95, 0, seed++);
    check_attn(8, 2, 64, 25, 1, 10, 9, 100, 0, seed++);
    check_attn(4, 1, 64, 50, 1, 0, 7, 20, 1, seed++);
}

/* ---- element-wise and row kernels ------------------------------------------------------ */
/* random values of scale a plus edge values, NaN included when nan */
static void fill_edges(float *x, size_t n, float a, unsigned seed, int nan) {
    static const float edge[] = {0.0f, -0.0f, 1e-39f, -1e-39f, 0.4999999f, 0.5f, -0.5f, 9.0f, -9.0f, 44.0f, -44.0f,
                                 88.72f, -88.72f, 100.0f, -104.5f, 1e30f, -1e30f, INFINITY, -INFINITY};
    harness_fill(x, n, a, seed);
    size_t ne = sizeof edge / sizeof *edge;
    for (size_t i = 0; i < n; i += 3) x[i] = edge[(i / 3 + seed) % ne];
    if (nan && n > 5) x[5] = NAN;
}

typedef void (*gated_fn)(float *out, const float *gate, const float *up, size_t n);

static void check_gated(const char *name, gated_fn f, size_t n, unsigned seed) {
    float *g = falloc(n), *u = falloc(n), *ref = falloc(n), *y = falloc(n);
    fill_edges(g, n, 12.0f, seed, 1);
    harness_fill(u, n, 2.0f, seed + 1);
    use_tier(SP_CPU_SCALAR);
    f(ref, g, u, n);
    for (int ti = 1; ti < n_tiers; ti++) {
        use_tier(tiers[ti]);
        f(y, g, u, n);
        size_t at;
        CHECK(same_bits(ref, y, n, &at), "%s %s n=%zu: [%zu] g=%.9g: %.9g vs %.9g", sp_cpu_tier_name(tiers[ti]), name, n,
              at, g[at], y[at], ref[at]);
        /* in place, as the forward pass calls it */
        memcpy(y, g, n * sizeof(float));
        f(y, y, u, n);
        CHECK(same_bits(ref, y, n, &at), "%s %s in place n=%zu: [%zu]", sp_cpu_tier_name(tiers[ti]), name, n, at);
    }
    free(g), free(u), free(ref), free(y);
}

static void test_elementwise_tiers(void) {
    size_t ns[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 1001};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        size_t n = ns[i];
        check_gated("silu_mul", sp_silu_mul, n, 10 + (unsigned)i);
        check_gated("gelu_tanh_mul", sp_gelu_tanh_mul, n, 30 + (unsigned)i);
        float *x = falloc(n), *ref = falloc(n), *y = falloc(n);
        size_t at;
        /* softcap (tanh) */
        fill_edges(x, n, 60.0f, 50 + (unsigned)i, 1);
        use_tier(SP_CPU_SCALAR);
        memcpy(ref, x, n * sizeof(float));
        sp_softcap(ref, n, 30.0f);
        for (int ti = 1; ti < n_tiers; ti++) {
            use_tier(tiers[ti]);
            memcpy(y, x, n * sizeof(float));
            sp_softcap(y, n, 30.0f);
            CHECK(same_bits(ref, y, n, &at), "%s softcap n=%zu: [%zu] x=%.9g: %.9g vs %.9g", sp_cpu_tier_name(tiers[ti]),
                  n, at, x[at], y[at], ref[at]);
        }
        /* softmax (exp and the lane sums), finite logits with a wide spread */
        harness_fill(x, n, 40.0f, 70 + (unsigned)i);
        use_tier(SP_CPU_SCALAR);
        memcpy(ref, x, n * sizeof(float));
        sp_softmax(ref, (int)n);
        for (int ti = 1; ti < n_tiers; ti++) {
            use_tier(tiers[ti]);
            memcpy(y, x, n * sizeof(float));
            sp_softmax(y, (int)n);
            CHECK(same_bits(ref, y, n, &at), "%s softmax n=%zu: [%zu]", sp_cpu_tier_name(tiers[ti]), n, at);
        }
        free(x), free(ref), free(y);
    }
}

static void test_rows_tiers(void) {
    int ns[] = {1, 7, 8, 15, 16, 17, 100, 1000, 2560};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        int n = ns[i], T = 3;
        float *x = falloc((size_t)T * n), *w = falloc(n), *ref = falloc((size_t)T * n), *y = falloc((size_t)T * n);
        fill_finite(x, (size_t)T * n, 3.0f, 90 + (unsigned)i);
        harness_fill(w, n, 1.5f, 91 + (unsigned)i);
        size_t at;
        for (int wi = 0; wi < 2; wi++) {
            use_tier(SP_CPU_SCALAR);
            sp_rmsnorm(ref, x, wi ? w : NULL, T, n, 1e-6f);
            float dref = sp_dot_f32(x, w, n);
            for (int ti = 1; ti < n_tiers; ti++) {
                use_tier(tiers[ti]);
                sp_rmsnorm(y, x, wi ? w : NULL, T, n, 1e-6f);
                CHECK(same_bits(ref, y, (size_t)T * n, &at), "%s rmsnorm n=%d w=%d: [%zu]", sp_cpu_tier_name(tiers[ti]), n,
                      wi, at);
                float d = sp_dot_f32(x, w, n);
                CHECK(memcmp(&d, &dref, 4) == 0, "%s dot n=%d: %.9g vs %.9g", sp_cpu_tier_name(tiers[ti]), n, d, dref);
            }
        }
        free(x), free(w), free(ref), free(y);
    }
}

static void test_argmax_tiers(void) {
    int ns[] = {1, 2, 63, 64, 65, 100, 1000, 151936};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        int n = ns[i];
        float *x = falloc(n);
        for (int c = 0; c < 5; c++) {
            harness_fill(x, n, 10.0f, 200 + (unsigned)(i * 5 + c));
            if (c == 1 && n > 3) x[n - 1] = x[n / 2] = x[n / 3] = 11.0f; /* ties: the lowest index */
            if (c == 2) x[0] = NAN, x[n / 2] = NAN;                    /* NaN never wins */
            if (c == 3)
                for (int k = 0; k < n; k++) x[k] = k % 2 ? NAN : -INFINITY; /* -inf is the largest non-NaN */
            if (c == 4)
                for (int k = 0; k < n; k++) x[k] = NAN;
            use_tier(SP_CPU_SCALAR);
            int want = sp_argmax(x, n);
            int rule = 0; /* the rule, spelled out */
            for (int k = 1; k < n; k++)
                if (x[k] > x[rule] || (isnan(x[rule]) && !isnan(x[k]))) rule = k;
            CHECK(want == rule, "scalar argmax n=%d case %d: %d, rule %d", n, c, want, rule);
            for (int ti = 1; ti < n_tiers; ti++) {
                use_tier(tiers[ti]);
                int got = sp_argmax(x, n);
                CHECK(got == want, "%s argmax n=%d case %d: %d vs %d", sp_cpu_tier_name(tiers[ti]), n, c, got, want);
            }
        }
        free(x);
    }
}

/* the training GEMMs' accumulating products (NN and TN) */
static void test_train_gemm_tiers(void) {
    int shapes[][3] = {{4, 5, 64}, {9, 300, 130}, {64, 17, 200}, {3, 2, 7}};
    for (int si = 0; si < 4; si++) {
        int M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
        float *A = falloc((size_t)M * K), *B = falloc((size_t)K * N), *C0 = falloc((size_t)M * N);
        float *ref = falloc((size_t)M * N), *y = falloc((size_t)M * N);
        fill_finite(A, (size_t)M * K, 1.0f, 400 + si);
        fill_finite(B, (size_t)K * N, 1.0f, 410 + si);
        harness_fill(C0, (size_t)M * N, 1.0f, 420 + si);
        for (int tn = 0; tn < 2; tn++) {
            /* TN reads A as [K, M]: same buffer, M·K values */
            memcpy(ref, C0, (size_t)M * N * sizeof(float));
            use_tier(SP_CPU_SCALAR);
            (tn ? sp_tr_gemm_tn_acc : sp_tr_gemm_nn_acc)(pools[1], ref, A, B, M, K, N);
            for (int ti = 1; ti < n_tiers; ti++)
                for (int p = 1; p <= 2; p++) {
                    use_tier(tiers[ti]);
                    memcpy(y, C0, (size_t)M * N * sizeof(float));
                    (tn ? sp_tr_gemm_tn_acc : sp_tr_gemm_nn_acc)(pools[p], y, A, B, M, K, N);
                    size_t at;
                    CHECK(same_bits(ref, y, (size_t)M * N, &at), "%s gemm %s M=%d K=%d N=%d threads=%d: [%zu]",
                          sp_cpu_tier_name(tiers[ti]), tn ? "tn" : "nn", M, K, N, p, at);
                }
        }
        free(A), free(B), free(C0), free(ref), free(y);
    }
}

/* SPECULA_CPU caps the tier, in a fresh process (this program with --tier prints its tier) */
static const char *self;

static void test_env_cap(void) {
    unsigned f = sp_cpu_features();
    sp_cpu_tier best = f & SP_CPU_HAS_AVX512 ? SP_CPU_AVX512
                       : f & SP_CPU_HAS_AVX2 ? SP_CPU_AVX2
                       : f & SP_CPU_HAS_NEON ? SP_CPU_NEON
                                             : SP_CPU_SCALAR;
    struct {
        const char *env;
        sp_cpu_tier want;
    } cases[] = {
        {"scalar", SP_CPU_SCALAR},
        {"avx2", f & SP_CPU_HAS_AVX2 ? SP_CPU_AVX2 : best},
        {"avx512", f & SP_CPU_HAS_AVX512 ? SP_CPU_AVX512 : best},
        {"neon", f & SP_CPU_HAS_NEON ? SP_CPU_NEON : best},
        {"bogus", best},
        {"", best},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[1024], out[256];
        /* SPECULA_TEST_EXEC: how to start a program of this build (qemu for a cross build) */
        const char *exec = getenv("SPECULA_TEST_EXEC");
        snprintf(cmd, sizeof cmd, "SPECULA_CPU=%s %s '%s' --tier 2>&1", cases[i].env, exec ? exec : "", self);
        int rc = harness_run(cmd, out, sizeof out);
        CHECK(rc == 0, "%s: exit %d", cmd, rc);
        char want[64];
        snprintf(want, sizeof want, "tier %s\n", sp_cpu_tier_name(cases[i].want));
        size_t ol = strlen(out), wl = strlen(want);
        CHECK(ol >= wl && !strcmp(out + ol - wl, want), "SPECULA_CPU=%s: got \"%s\", want \"%s\"", cases[i].env, out, want);
        if (!strcmp(cases[i].env, "bogus")) CHECK(strstr(out, "warning") != NULL, "no warning for a bad SPECULA_CPU: %s", out);
    }
}

int main(int argc, char **argv) {
    self = argv[0];
    if (argc > 1 && !strcmp(argv[1], "--tier")) {
        printf("tier %s\n", sp_cpu_tier_name(sp_cpu_level()));
        return 0;
    }
    for (int n = 1; n <= 2; n++) {
        pools[n] = sp_pool_create(n);
        if (!pools[n]) return 1;
    }
    sp_cpu_tier start = sp_cpu_level();
    tiers[n_tiers++] = SP_CPU_SCALAR;
    unsigned f = sp_cpu_features();
    if (f & SP_CPU_HAS_AVX2) tiers[n_tiers++] = SP_CPU_AVX2;
    if (f & SP_CPU_HAS_AVX512) tiers[n_tiers++] = SP_CPU_AVX512;
    if (f & SP_CPU_HAS_NEON) tiers[n_tiers++] = SP_CPU_NEON;
    printf("tiers:");
    for (int i = 0; i < n_tiers; i++) printf(" %s", sp_cpu_tier_name(tiers[i]));
    printf(" (in use: %s)\n", sp_cpu_tier_name(start));
    RUN(test_matmul_tiers);
    RUN(test_attention_tiers);
    RUN(test_elementwise_tiers);
    RUN(test_rows_tiers);
    RUN(test_argmax_tiers);
    RUN(test_train_gemm_tiers);
    RUN(test_env_cap);
    use_tier(start);
    for (int n = 1; n <= 2; n++) sp_pool_free(pools[n]);
    return harness_done("test_simd");
}
