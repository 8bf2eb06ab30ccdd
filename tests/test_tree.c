/* test_tree.c — tree verification's batch invariance: a token tree forwarded in one pass gives
 * every node exactly (bit for bit) the logits, hidden rows and taps of a chain forward over its
 * root path, for llama, qwen3 and gemma4 (sliding + full layers, ring caches past the window),
 * threads 1 and 2; the tree attention kernel against its float64 reference and against the chain
 * kernel; sp_kv_keep_rows leaves the cache a chain forward would; bad trees are errors. */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "specula.h"

/* a random tree of n rows, deep enough to pass a sliding window: parent[t] = t − 1 two times in
 * three, else any of -1 .. t-1 (a few extra roots) */
static void random_tree(int32_t *parent, int n, unsigned seed) {
    unsigned s = seed * 2654435761u + 1;
    for (int t = 0; t < n; t++) {
        s = s * 1103515245u + 12345u;
        int any = (int)((s >> 8) % (unsigned)(t + 1)) - 1;
        parent[t] = t == 0 ? -1 : (s >> 20) % 3 ? t - 1 : any;
    }
}

/* the root path of row t, root first; returns its length */
static int root_path(const int32_t *parent, int t, int32_t *path) {
    int n = 0;
    for (int a = t; a >= 0; a = parent[a]) path[n++] = a;
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        int32_t x = path[i];
        path[i] = path[j];
        path[j] = x;
    }
    return n;
}

/* the kernel: every tree row equals the chain row over its root path, bitwise, and the float64
 * reference within tolerance; windows, rings and a prefix longer than one score tile */
static void kernel_case(int NH, int KVH, int D, int pos0, int T, int window, int ring, unsigned seed) {
    int cap = ring ? window + T + 3 : pos0 + T, threads[2] = {1, 2};
    size_t row = (size_t)KVH * D, qrow = (size_t)NH * D;
    float *K = malloc((size_t)cap * row * 4), *V = malloc((size_t)cap * row * 4);
    float *q = malloc((size_t)T * qrow * 4), *out = malloc((size_t)T * qrow * 4), *ref = malloc((size_t)T * qrow * 4);
    float *cK = malloc((size_t)cap * row * 4), *cV = malloc((size_t)cap * row * 4);
    float *cq = malloc((size_t)T * qrow * 4), *cout = malloc((size_t)T * qrow * 4);
    harness_fill(K, (size_t)cap * row, 1.0f, seed);
    harness_fill(V, (size_t)cap * row, 1.0f, seed + 1);
    harness_fill(q, (size_t)T * qrow, 1.0f, seed + 2);
    int32_t parent[64], path[64];
    random_tree(parent, T, seed);
    sp_attn_shape sh = {.T = T, .pos0 = pos0, .NH = NH, .KVH = KVH, .D = D, .cap = cap, .ring = ring,
                        .window = window, .scale = 0.25f};
    sp_attention_tree_ref(ref, q, K, V, &sh, parent);
    for (int th = 0; th < 2; th++) {
        sp_pool *pool = sp_pool_create(threads[th]);
        sp_attention_tree(pool, out, q, K, V, &sh, parent);
        double maxd = 0;
        for (size_t i = 0; i < (size_t)T * qrow; i++) maxd = fmax(maxd, fabs(out[i] - ref[i]));
        CHECK(maxd < 1e-5, "tree kernel vs reference: max |diff| %g (pos0 %d, T %d, window %d)", maxd, pos0, T, window);
        int bad = 0;
        for (int t = 0; t < T; t++) { /* chain over t's root path: ancestors at pos0, pos0+1, ... */
            int n = root_path(parent, t, path);
            memcpy(cK, K, (size_t)cap * row * 4);
            memcpy(cV, V, (size_t)cap * row * 4);
            for (int i = 0; i < n; i++) {
                int from = pos0 + path[i], to = pos0 + i;
                if (ring) from %= cap, to %= cap;
                memmove(cK + (size_t)to * row, K + (size_t)from * row, row * 4);
                memmove(cV + (size_t)to * row, V + (size_t)from * row, row * 4);
                memcpy(cq + (size_t)i * qrow, q + (size_t)path[i] * qrow, qrow * 4);
            }
            sp_attn_shape cs = sh;
            cs.T = n;
            sp_attention(pool, cout, cq, cK, cV, &cs);
            bad += memcmp(cout + (size_t)(n - 1) * qrow, out + (size_t)t * qrow, qrow * 4) != 0;
        }
        CHECK(bad == 0, "%d of %d tree rows differ from their chain rows (threads %d, pos0 %d, window %d, ring %d)",
              bad, T, threads[th], pos0, window, ring);
        sp_pool_free(pool);
    }
    free(K), free(V), free(q), free(out), free(ref), free(cK), free(cV), free(cq), free(cout);
}

static void test_tree_kernel(void) {
    kernel_case(4, 2, 16, 0, 12, 0, 0, 1);     /* no prefix: the tree alone */
    kernel_case(8, 2, 64, 37, 24, 0, 0, 2);    /* prefix + tree, GQA */
    kernel_case(4, 1, 32, 50, 20, 6, 0, 3);    /* window shorter than the tree's depth */
    kernel_case(4, 2, 16, 90, 16, 8, 1, 4);    /* ring cache past the window */
    kernel_case(8, 1, 16, 4500, 10, 0, 0, 5);  /* more keys than one score tile: two passes */
    kernel_case(6, 3, 48, 13, 31, 0, 0, 6);
}

static sp_model *load(const char *arch, int threads) {
    char dir[256];
    sp_err err = {{0}};
    sp_model *m;
    snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", arch);
    if (sp_model_load(&m, dir, threads, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return NULL;
    }
    return m;
}

#define NTREE 23
#define PREFIX 19

/* A tree after a prefix: every row's logits / hidden / taps equal those of a chain forward over
 * its root path; then keeping one root path and decoding on gives the chain's logits. */
static void forward_case(const char *arch, int threads) {
    sp_model *m = load(arch, threads);
    CHECK(m != NULL, "load %s", arch);
    if (!m) return;
    const sp_config *c = sp_model_config(m);
    int V = c->vocab_size, H = c->hidden_size, ctx = 96, mb = 24;
    int taps_l[2] = {0, c->n_layers - 1};
    sp_err err = {{0}};
    sp_kv *kt = sp_kv_create(m, ctx, mb, &err), *kc = sp_kv_create(m, ctx, mb, &err);
    int32_t prompt[PREFIX], tok[NTREE], parent[NTREE], path[NTREE], ptok[NTREE];
    for (int i = 0; i < PREFIX; i++) prompt[i] = (int32_t)((i * 131 + 7) % V);
    for (int i = 0; i < NTREE; i++) tok[i] = (int32_t)((i * 977 + 3) % V);
    random_tree(parent, NTREE, 11);
    float *lt = malloc((size_t)NTREE * V * 4), *ht = malloc((size_t)NTREE * H * 4), *tt = malloc((size_t)NTREE * 2 * H * 4);
    float *lc = malloc((size_t)NTREE * V * 4), *hc = malloc((size_t)NTREE * H * 4), *tc = malloc((size_t)NTREE * 2 * H * 4);
    CHECK(sp_model_forward(m, kt, prompt, PREFIX, NULL, &err) == 0, "prefill: %s", err.msg);
    sp_forward_out ot = {.logits = lt, .hidden = ht, .tap_layers = taps_l, .n_taps = 2, .taps = tt};
    CHECK(sp_model_forward_tree(m, kt, tok, parent, NTREE, &ot, &err) == 0, "tree forward: %s", err.msg);
    CHECK(sp_kv_len(kt) == PREFIX + NTREE, "cache holds %d rows after the tree", sp_kv_len(kt));
    int bad_l = 0, bad_h = 0, bad_t = 0;
    for (int t = 0; t < NTREE; t++) {
        if (t % 3 && t != NTREE - 1) continue; /* a third of the rows (each checks its whole path) */
        int n = root_path(parent, t, path);
        for (int i = 0; i < n; i++) ptok[i] = tok[path[i]];
        sp_kv_clear(kc);
        sp_forward_out oc = {.logits = lc, .hidden = hc, .tap_layers = taps_l, .n_taps = 2, .taps = tc};
        if (sp_model_forward(m, kc, prompt, PREFIX, NULL, &err) || sp_model_forward(m, kc, ptok, n, &oc, &err)) {
            CHECK(0, "chain forward: %s", err.msg);
            break;
        }
        for (int i = 0; i < n; i++) {
            bad_l += memcmp(lc + (size_t)i * V, lt + (size_t)path[i] * V, (size_t)V * 4) != 0;
            bad_h += memcmp(hc + (size_t)i * H, ht + (size_t)path[i] * H, (size_t)H * 4) != 0;
            bad_t += memcmp(tc + (size_t)i * 2 * H, tt + (size_t)path[i] * 2 * H, (size_t)2 * H * 4) != 0;
        }
    }
    CHECK(bad_l == 0 && bad_h == 0 && bad_t == 0, "%s threads %d: rows differing from the chain: logits %d hidden %d taps %d",
          arch, threads, bad_l, bad_h, bad_t);

    /* keep the deepest row's root path, then decode 12 tokens on both caches (past the window) */
    int deep = 0, n = 0;
    for (int t = 0; t < NTREE; t++) {
        int k = root_path(parent, t, path);
        if (k > n) n = k, deep = t;
    }
    n = root_path(parent, deep, path);
    for (int i = 0; i < n; i++) ptok[i] = tok[path[i]];
    CHECK(sp_kv_keep_rows(kt, NTREE, path, n, &err) == 0, "keep rows: %s", err.msg);
    CHECK(sp_kv_len(kt) == PREFIX + n, "cache holds %d after keeping %d rows", sp_kv_len(kt), n);
    sp_kv_clear(kc);
    CHECK(sp_model_forward(m, kc, prompt, PREFIX, NULL, &err) == 0 && sp_model_forward(m, kc, ptok, n, NULL, &err) == 0,
          "chain: %s", err.msg);
    int bad_next = 0;
    for (int s = 0; s < 12; s++) {
        int32_t x = (int32_t)((s * 71 + 5) % V);
        sp_forward_out a = {.logits = lt}, b = {.logits = lc};
        if (sp_model_forward(m, kt, &x, 1, &a, &err) || sp_model_forward(m, kc, &x, 1, &b, &err)) {
            CHECK(0, "decode: %s", err.msg);
            break;
        }
        bad_next += memcmp(lt, lc, (size_t)V * 4) != 0;
    }
    CHECK(bad_next == 0, "%s: %d decode steps after keep_rows differ from the chain", arch, bad_next);
    /* a tree after the kept path, then trim: rollback still works */
    CHECK(sp_model_forward_tree(m, kt, tok, parent, 8, NULL, &err) == 0, "second tree: %s", err.msg);
    CHECK(sp_kv_trim(kt, 8, &err) == 0, "trim after a tree: %s", err.msg);
    free(lt), free(ht), free(tt), free(lc), free(hc), free(tc);
    sp_kv_free(kt);
    sp_kv_free(kc);
    sp_model_free(m);
}

static void test_tree_forward_llama(void) { forward_case("llama", 1), forward_case("llama", 2); }
static void test_tree_forward_qwen3(void) { forward_case("qwen3", 1), forward_case("qwen3", 2); }
static void test_tree_forward_gemma4(void) { forward_case("gemma4", 1), forward_case("gemma4", 2); }

static void test_tree_errors(void) {
    sp_model *m = load("qwen3", 1);
    CHECK(m != NULL, "load");
    if (!m) return;
    sp_err err = {{0}};
    sp_kv *kv = sp_kv_create(m, 64, 16, &err);
    int32_t tok[4] = {1, 2, 3, 4}, bad_parent[4] = {-1, 0, 2, 1}, parent[4] = {-1, 0, 0, 1};
    CHECK(sp_model_forward_tree(m, kv, tok, bad_parent, 4, NULL, &err) == -1 && strstr(err.msg, "row 2 has parent 2"),
          "self-parent: %s", err.msg);
    CHECK(sp_model_forward_tree(m, kv, tok, NULL, 4, NULL, &err) == -1, "no parents accepted");
    CHECK(sp_kv_len(kv) == 0, "a refused tree appended rows");
    CHECK(sp_model_forward_tree(m, kv, tok, parent, 4, NULL, &err) == 0, "tree: %s", err.msg);
    int32_t rows_bad[2] = {1, 1}, rows_out[2] = {0, 4}, rows[2] = {0, 2};
    CHECK(sp_kv_keep_rows(kv, 4, rows_bad, 2, &err) == -1 && strstr(err.msg, "increasing"), "repeated rows: %s", err.msg);
    CHECK(sp_kv_keep_rows(kv, 4, rows_out, 2, &err) == -1, "row 4 of 4 accepted");
    CHECK(sp_kv_keep_rows(kv, 5, rows, 2, &err) == -1, "5 tree rows in a cache of 4 accepted");
    CHECK(sp_kv_keep_rows(kv, 4, rows, 2, &err) == 0 && sp_kv_len(kv) == 2, "keep: %s", err.msg);
    sp_kv_free(kv);
    sp_model_free(m);
}

int main(void) {
    RUN(test_tree_kernel);
    RUN(test_tree_forward_llama);
    RUN(test_tree_forward_qwen3);
    RUN(test_tree_forward_gemma4);
    RUN(test_tree_errors);
    return harness_done("test_tree");
}
