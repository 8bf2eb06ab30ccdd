/* test_matmul_multi.c — sp_matmul_multi (kernels.h): several weights of one K over the same
 * activations, as the decoder layer runs Q, K, V and gate, up.
 *   - bitwise equal to one sp_matmul per weight, for every quantized type grouped by activation
 *     format (Q8_0 / Q4_0 / Q5_0; Q4_K / Q6_K), packed Q4_0, groups that cannot share (mixed
 *     formats, float weights), T = 1 .. a long T that goes through the scratch in chunks and
 *     quantizes its rows on every thread, 1, 2 and 3 threads;
 *   - sp_matmul_quant_shares_x says which groups share one quantization. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

static sp_pool *pools[3];

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

typedef struct {
    sp_mat m;
    void *data, *pack;
} wmat;

/* N rows of K random values stored as dt (quantized, or f32 / bf16), packed when the tier packs */
static wmat wmat_make(sp_dtype dt, int N, int K, unsigned seed) {
    wmat w = {{NULL, dt, N, K, 0, NULL}, NULL, NULL};
    size_t rb = sp_dtype_row_bytes(dt, (size_t)K);
    float *row = xmalloc((size_t)K * 4);
    w.data = xmalloc((size_t)N * rb);
    for (int n = 0; n < N; n++) {
        harness_fill(row, (size_t)K, 1.0f, seed * 1000 + (unsigned)n);
        char *dst = (char *)w.data + (size_t)n * rb;
        if (dt == SP_DT_F32) memcpy(dst, row, (size_t)K * 4);
        else if (dt == SP_DT_BF16)
            for (int k = 0; k < K; k++) ((uint16_t *)dst)[k] = sp_f32_to_bf16(row[k]);
        else if (sp_quantize_row(dst, row, dt, (size_t)K, NULL) != 0) abort();
    }
    free(row);
    w.m.data = w.data;
    size_t pb = sp_dtype_is_quant(dt) ? sp_mat_pack_bytes(&w.m) : 0;
    if (pb) {
        w.pack = xmalloc(pb);
        sp_mat_pack(&w.m, w.pack);
        w.m.pack = w.pack;
    }
    return w;
}

static void wmat_free(wmat *w) { free(w->data), free(w->pack); }

/* one group: sp_matmul_multi against one sp_matmul per weight on one thread */
static void check_group(const char *name, const sp_dtype *dts, const int *Ns, int n, int K, int T) {
    wmat w[SP_MATMUL_MULTI_MAX];
    const sp_mat *W[SP_MATMUL_MULTI_MAX];
    float *Y[SP_MATMUL_MULTI_MAX], *R[SP_MATMUL_MULTI_MAX];
    float *X = xmalloc((size_t)T * K * 4);
    harness_fill(X, (size_t)T * K, 2.0f, 77 + (unsigned)T);
    for (int i = 0; i < n; i++) {
        w[i] = wmat_make(dts[i], Ns[i], K, 11 + (unsigned)i);
        W[i] = &w[i].m;
        Y[i] = xmalloc((size_t)T * Ns[i] * 4);
        R[i] = xmalloc((size_t)T * Ns[i] * 4);
        sp_matmul(pools[0], R[i], X, T, W[i]);
    }
    for (int p = 0; p < 3; p++) {
        for (int i = 0; i < n; i++) memset(Y[i], 0xff, (size_t)T * Ns[i] * 4);
        sp_matmul_multi(pools[p], Y, X, T, W, n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += memcmp(Y[i], R[i], (size_t)T * Ns[i] * 4) != 0;
        CHECK(bad == 0, "%s K=%d T=%d, %d threads: %d of %d weights differ from sp_matmul", name, K, T, p + 1, bad, n);
    }
    for (int i = 0; i < n; i++) free(Y[i]), free(R[i]), wmat_free(&w[i]);
    free(X);
}

static void test_multi_equals_single(void) {
    static const struct {
        const char *name;
        int n;
        sp_dtype dt[3];
        int N[3];
    } groups[] = {
        {"q4_0 q4_0 q4_0", 3, {SP_DT_Q4_0, SP_DT_Q4_0, SP_DT_Q4_0}, {83, 40, 40}},
        {"q8_0 q4_0 q5_0", 3, {SP_DT_Q8_0, SP_DT_Q4_0, SP_DT_Q5_0}, {48, 19, 64}},
        {"q4_k q4_k q6_k", 3, {SP_DT_Q4_K, SP_DT_Q4_K, SP_DT_Q6_K}, {70, 33, 33}},
        {"q6_k q4_k", 2, {SP_DT_Q6_K, SP_DT_Q4_K}, {17, 96}},
        {"q5_k q3_k q6_k", 3, {SP_DT_Q5_K, SP_DT_Q3_K, SP_DT_Q6_K}, {40, 21, 33}},
        {"q4_k q2_k iq4_xs", 3, {SP_DT_Q4_K, SP_DT_Q2_K, SP_DT_IQ4_XS}, {36, 17, 29}},
        {"q8_0 q5_1 iq4_nl", 3, {SP_DT_Q8_0, SP_DT_Q5_1, SP_DT_IQ4_NL}, {30, 25, 18}},
        {"q4_1 qa8 q4_1", 3, {SP_DT_Q4_1, SP_DT_QA8, SP_DT_Q4_1}, {33, 20, 41}},
        {"q4_0 q4_k (two formats)", 2, {SP_DT_Q4_0, SP_DT_Q4_K}, {40, 24}},
        {"f32 bf16", 2, {SP_DT_F32, SP_DT_BF16}, {37, 20}},
        {"q8_0 alone", 1, {SP_DT_Q8_0}, {50}},
    };
    static const int Ts[] = {1, 3, 8, 17, 40};
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++)
            check_group(groups[g].name, groups[g].dt, groups[g].N, groups[g].n, 512, Ts[t]);
    /* wide K and long T: several scratch chunks, each quantized on every thread */
    check_group("q4_0 q8_0 (chunks)", (const sp_dtype[]){SP_DT_Q4_0, SP_DT_Q8_0}, (const int[]){21, 35}, 2, 4096, 70);
    check_group("q4_k q6_k (chunks)", (const sp_dtype[]){SP_DT_Q4_K, SP_DT_Q6_K}, (const int[]){35, 21}, 2, 4096, 70);
    /* SP_MATMUL_MULTI_MAX weights (a row's experts' gate and up, block.c) */
    sp_dtype dts[SP_MATMUL_MULTI_MAX];
    int Ns[SP_MATMUL_MULTI_MAX];
    for (int i = 0; i < SP_MATMUL_MULTI_MAX; i++) dts[i] = i % 5 == 4 ? SP_DT_Q6_K : SP_DT_Q4_K, Ns[i] = 9 + 7 * i;
    for (int T = 1; T <= 3; T += 2) check_group("16 k-quant weights", dts, Ns, SP_MATMUL_MULTI_MAX, 512, T);
}

static void test_shares_x(void) {
    sp_mat q4 = {NULL, SP_DT_Q4_0, 8, 256, 0, NULL}, q8 = q4, q4k = q4, q6k = q4, f = q4, wide = q4;
    q8.dt = SP_DT_Q8_0, q4k.dt = SP_DT_Q4_K, q6k.dt = SP_DT_Q6_K, f.dt = SP_DT_F32, wide.k = 512;
    CHECK(sp_matmul_quant_shares_x((const sp_mat *[]){&q4, &q8, &q4}, 3), "Q4_0 + Q8_0 share Q8_0 activations");
    CHECK(sp_matmul_quant_shares_x((const sp_mat *[]){&q4k, &q6k}, 2), "Q4_K + Q6_K share Q8_K activations");
    /* the packed K-quant layouts read the activation rows in their natural order too */
    static const char packed_bytes[1];
    sp_mat q4kp = q4k, q6kp = q6k;
    q4kp.pack = packed_bytes, q6kp.pack = packed_bytes;
    CHECK(sp_matmul_quant_shares_x((const sp_mat *[]){&q4kp, &q6kp, &q4k}, 3),
          "packed Q4_K + packed Q6_K + Q4_K share Q8_K activations");
    CHECK(!sp_matmul_quant_shares_x((const sp_mat *[]){&q4, &q4k}, 2), "Q4_0 + Q4_K do not share");
    CHECK(!sp_matmul_quant_shares_x((const sp_mat *[]){&q4, &f}, 2), "a float weight does not share");
    CHECK(!sp_matmul_quant_shares_x((const sp_mat *[]){&q4, &wide}, 2), "different K do not share");
    const sp_mat *many[SP_MATMUL_MULTI_MAX + 1];
    for (int i = 0; i <= SP_MATMUL_MULTI_MAX; i++) many[i] = &q4;
    CHECK(sp_matmul_quant_shares_x(many, SP_MATMUL_MULTI_MAX), "SP_MATMUL_MULTI_MAX weights share");
    CHECK(!sp_matmul_quant_shares_x(many, SP_MATMUL_MULTI_MAX + 1), "more than SP_MATMUL_MULTI_MAX weights do not share");
}

int main(void) {
    for (int i = 0; i < 3; i++) pools[i] = sp_pool_create(i + 1);
    RUN(test_multi_equals_single);
    RUN(test_shares_x);
    for (int i = 0; i < 3; i++) sp_pool_free(pools[i]);
    return harness_done("test_matmul_multi");
}
