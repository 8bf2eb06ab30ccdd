/* test_bf16dot.c — the bf16-dot numerics of bf16 matmuls (kernels_internal.h, docs/SIMD.md):
 * every tier this processor has (scalar, AVX2, AVX-512 emulation, AVX-512 with vdpbf16ps;
 * NEON on aarch64) gives the portable path's bits, for T = 1..16 and longer, 1 and 2 threads,
 * K with and without a partial chunk, on random inputs with edge values (±0, subnormals, values
 * that round to the smallest normal, products that underflow or overflow, near-ties of the
 * rounding, exact cancellations); the portable path against a double-precision sum of the same
 * rounded inputs within the stated bound; batch invariance (row t of a T-row call is the
 * one-row call's); and a bf16 matrix without the flag keeps the default order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "core/cpu.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

static sp_pool *pools[3]; /* pools[n]: n threads */

/* the code paths to compare: tier, and vdpbf16ps for the AVX-512 tier */
typedef struct {
    sp_cpu_tier tier;
    int hw;
    const char *name;
} path;
static path paths[5];
static int n_paths;

static float *falloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
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

static uint32_t rng(uint32_t *s) {
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return *s;
}

/* Random values with edge cases; hard 1: exponents spread so that products underflow and
 * overflow; hard 2: products of like magnitude (by blocks of 64 values), most blocks near 2^-126, random signs, so
 * that the order of the two adds of a pair and the flush of subnormal sums decide the bits */
static void fill_edges(float *x, size_t n, unsigned seed, int hard) {
    harness_fill(x, n, 2.0f, seed);
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rng(&s);
        if (hard == 2) {
            int e = (i / 64) % 3 ? 60 + (int)(rng(&s) % 6) : 117 + (int)(rng(&s) % 20); /* by blocks of 64 */
            x[i] = f_of((rng(&s) & 0x807fffffu) | ((uint32_t)e << 23));
            continue;
        }
        if (hard && r % 3 == 0) {
            int e = (int)(rng(&s) % 2 ? rng(&s) % 40 : 100 + rng(&s) % 60); /* tiny or mid */
            if (r % 31 == 0) e = 230 + (int)(rng(&s) % 24);                /* huge: products overflow */
            x[i] = f_of((rng(&s) & 0x807fffffu) | ((uint32_t)e << 23));
            continue;
        }
        switch (r % 23) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = -0.0f; break;
        case 2: x[i] = 1e-39f; break;                /* subnormal */
        case 3: x[i] = f_of(0x007fffffu); break;     /* largest subnormal (rounds up to 2^-126 without DAZ) */
        case 4: x[i] = f_of(0x80800001u); break;     /* smallest normal, negative, low bits set */
        case 5: x[i] *= 1e-20f; break;               /* products that underflow */
        case 6: x[i] = f_of((rng(&s) & 0xffff0000u) | 0x8000u); break; /* a tie of the rounding */
        case 7: x[i] = f_of((rng(&s) & 0xffff0000u) | 0x7fffu); break; /* just below a tie */
        default: break;
        }
    }
}

static uint16_t *to_bf16(const float *wf, size_t n) {
    uint16_t *w = malloc((n ? n : 1) * 2);
    if (!w) abort();
    for (size_t i = 0; i < n; i++) w[i] = sp_f32_to_bf16(wf[i]);
    return w;
}

static void check_tiers(int T, int N, int K, unsigned seed, int hard) {
    float *wf = falloc((size_t)N * K), *X = falloc((size_t)T * K);
    fill_edges(wf, (size_t)N * K, seed, hard);
    fill_edges(X, (size_t)T * K, seed + 7, hard);
    /* exact cancellation: row 1 is row 0 of X negated pair by pair */
    if (N > 1 && T > 0)
        for (int k = 0; k < K; k++) wf[k] = X[k], wf[K + k] = k % 4 < 2 ? -X[k] : X[k];
    uint16_t *wd = to_bf16(wf, (size_t)N * K);
    sp_mat W = {wd, SP_DT_BF16, N, K, 1, NULL};
    float *ref = falloc((size_t)T * N), *Y = falloc((size_t)T * N);
    sp_matmul_bf16dot_tier(pools[1], ref, X, T, &W, SP_CPU_SCALAR, 0);
    for (int pi = 1; pi < n_paths; pi++)
        for (int p = 1; p <= 2; p++) {
            memset(Y, 0xff, (size_t)T * N * sizeof(float));
            sp_matmul_bf16dot_tier(pools[p], Y, X, T, &W, paths[pi].tier, paths[pi].hw);
            size_t at = 0;
            CHECK(same_bits(ref, Y, (size_t)T * N, &at), "%s T=%d N=%d K=%d threads=%d hard=%d: [%zu] %a vs scalar %a",
                  paths[pi].name, T, N, K, p, hard, at, Y[at], ref[at]);
        }
    free(wf), free(X), free(wd), free(ref), free(Y);
}

static void test_tiers_bitwise(void) {
    int Ks[] = {1, 2, 31, 32, 33, 64, 100};
    int Ns[] = {1, 7, 25, 50};
    unsigned seed = 1;
    for (int T = 1; T <= 16; T++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) check_tiers(T, Ns[(T + ki) % 4], Ks[ki], seed++, (T + ki) % 2);
    check_tiers(1, 97, 1000, seed++, 0);
    check_tiers(8, 49, 1000, seed++, 1);
    check_tiers(40, 30, 2048, seed++, 0); /* token chunks */
}

/* Many short sums of like-magnitude pairs near the subnormal range (hard 2) and of spread
 * ones (hard 1): 8 × 2048 outputs of K = 64 per case, 1M products per case and path */
static void test_tiers_adversarial(void) {
    check_tiers(8, 2048, 64, 100, 2);
    check_tiers(8, 2048, 64, 101, 1);
    check_tiers(5, 1000, 33, 102, 2);
}

/* The portable order against a double sum of the same rounded inputs. Bound: each lane does
 * 2·ceil(K/32) roundings and the tree 4 more, each of relative error <= 2^-24, so
 * |y − exact| <= (2·ceil(K/32) + 4)·2^-24·Σ|xb·wb| (to first order; 1% slack), plus 2^-126 per
 * step for the flushes. */
static void test_ref_vs_double(void) {
    int Ks[] = {5, 32, 77, 512, 3000};
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
        int K = Ks[ki], N = 9, T = 3;
        float *wf = falloc((size_t)N * K), *X = falloc((size_t)T * K), *Y = falloc((size_t)T * N);
        harness_fill(wf, (size_t)N * K, 1.0f, 40 + (unsigned)ki);
        harness_fill(X, (size_t)T * K, 3.0f, 50 + (unsigned)ki);
        uint16_t *wd = to_bf16(wf, (size_t)N * K);
        sp_mat W = {wd, SP_DT_BF16, N, K, 1, NULL};
        sp_matmul_bf16dot_tier(pools[1], Y, X, T, &W, SP_CPU_SCALAR, 0);
        double worst = 0;
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double s = 0, a = 0;
                for (int k = 0; k < K; k++) {
                    double p = (double)sp_bf16dot_round(X[(size_t)t * K + k]) * sp_bf16_to_f32(wd[(size_t)n * K + k]);
                    s += p, a += fabs(p);
                }
                int steps = 2 * ((K + 31) / 32) + 4;
                double bound = 1.01 * steps * 0x1p-24 * a + steps * 0x1p-126;
                double err = fabs(Y[(size_t)t * N + n] - s);
                if (err / (bound > 0 ? bound : 1) > worst) worst = err / bound;
                CHECK(err <= bound, "K=%d t=%d n=%d: %.9g vs double %.12g (error %.3g > bound %.3g)", K, t, n,
                      Y[(size_t)t * N + n], s, err, bound);
            }
        /* the rounding of the activations is what moves the result most: it must be there */
        float *Yf = falloc((size_t)T * N);
        sp_mat Wf = {wd, SP_DT_BF16, N, K, 0, NULL};
        sp_matmul(pools[1], Yf, X, T, &Wf);
        int differ = 0;
        for (int i = 0; i < T * N; i++) differ += Yf[i] != Y[i];
        CHECK(differ > 0, "K=%d: the bf16-dot results equal the f32 order's everywhere", K);
        printf("# K=%d: worst error / bound %.3f\n", K, worst);
        free(wf), free(X), free(Y), free(Yf), free(wd);
    }
}

/* Row t of a T-row call equals the one-row call, T = 1..16, 1 and 2 threads, on the path
 * sp_matmul picks; and the sp_matmul_ref oracle rounds the activations too */
static void test_batch_invariance(void) {
    int N = 37, K = 200;
    float *wf = falloc((size_t)N * K), *X = falloc((size_t)16 * K), *Y = falloc((size_t)16 * N), *y1 = falloc(N);
    fill_edges(wf, (size_t)N * K, 77, 0);
    fill_edges(X, (size_t)16 * K, 78, 0);
    uint16_t *wd = to_bf16(wf, (size_t)N * K);
    sp_mat W = {wd, SP_DT_BF16, N, K, 1, NULL};
    for (int T = 1; T <= 16; T++)
        for (int p = 1; p <= 2; p++) {
            sp_matmul(pools[p], Y, X, T, &W);
            for (int t = 0; t < T; t++) {
                sp_matmul(pools[3 - p], y1, X + (size_t)t * K, 1, &W);
                size_t at = 0;
                CHECK(same_bits(y1, Y + (size_t)t * N, N, &at), "T=%d t=%d threads=%d: [%zu] %a vs one row %a", T, t,
                      p, at, Y[(size_t)t * N + at], y1[at]);
            }
        }
    free(wf), free(X), free(Y), free(y1), free(wd);
}

int main(void) {
    for (int n = 1; n <= 2; n++) {
        pools[n] = sp_pool_create(n);
        if (!pools[n]) return 1;
    }
    unsigned f = sp_cpu_features();
    paths[n_paths++] = (path){SP_CPU_SCALAR, 0, "scalar"};
    if (f & SP_CPU_HAS_AVX2) paths[n_paths++] = (path){SP_CPU_AVX2, 0, "avx2"};
    if (f & SP_CPU_HAS_AVX512) paths[n_paths++] = (path){SP_CPU_AVX512, 0, "avx512 (emulation)"};
    if ((f & SP_CPU_HAS_AVX512) && (f & SP_CPU_HAS_AVX512_BF16))
        paths[n_paths++] = (path){SP_CPU_AVX512, 1, "avx512 (vdpbf16ps)"};
    if (f & SP_CPU_HAS_NEON) paths[n_paths++] = (path){SP_CPU_NEON, 0, "neon"};
    printf("# paths:");
    for (int i = 0; i < n_paths; i++) printf(" %s;", paths[i].name);
    printf(" in use: %s\n", sp_cpu_tier_name(sp_cpu_level()));
    RUN(test_tiers_bitwise);
    RUN(test_tiers_adversarial);
    RUN(test_ref_vs_double);
    RUN(test_batch_invariance);
    for (int n = 1; n <= 2; n++) sp_pool_free(pools[n]);
    return harness_done("test_bf16dot");
}
