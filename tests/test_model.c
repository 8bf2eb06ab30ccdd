/* test_model.c — the target runtime against the reference fixtures and its own invariants.
 *
 * - logits of every position vs tests/data/ref-logits/ARCH/logits.numpy.f32 (an independent float64
 *   forward): max|Δ| <= 1e-5 · max|logit| and the same argmax, for prefill and token-by-token;
 * - prefill of T tokens == T single-token forwards, bit for bit (and for several block splits);
 * - trim then re-forward == fresh forward; a sliding-window ring driven over 3× its window with
 *   trims right at the wrap equals a fresh run;
 * - taps equal the layer outputs, thread count does not change a bit. */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "specula.h"

static const char *ARCHS[] = {"llama", "qwen3", "gemma4"};
#define NTOK 24

static int load_tokens(const char *arch, int32_t *tok) {
    char path[256], *text;
    snprintf(path, sizeof path, "tests/data/ref-logits/%s/tokens.json", arch);
    if (sp_read_file(path, &text, NULL, NULL)) return -1;
    int n = 0;
    for (char *p = text; *p && n < NTOK;) {
        if (*p >= '0' && *p <= '9') tok[n++] = (int32_t)strtol(p, &p, 10);
        else p++;
    }
    free(text);
    return n;
}

static float *load_ref(const char *arch, int V) {
    char path[256], *buf;
    size_t n;
    snprintf(path, sizeof path, "tests/data/ref-logits/%s/logits.numpy.f32", arch);
    if (sp_read_file(path, &buf, &n, NULL)) return NULL;
    if (n != (size_t)NTOK * V * 4) {
        free(buf);
        return NULL;
    }
    return (float *)buf;
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

/* compare [NTOK, V] logits with the reference: returns relative max error, counts argmax misses */
static double compare(const float *got, const float *ref, int V, int *argmax_miss) {
    double maxref = 0, maxd = 0;
    *argmax_miss = 0;
    for (size_t i = 0; i < (size_t)NTOK * V; i++) {
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
        double d = fabs((double)got[i] - ref[i]);
        if (d > maxd) maxd = d;
    }
    for (int t = 0; t < NTOK; t++)
        if (sp_argmax(got + (size_t)t * V, V) != sp_argmax(ref + (size_t)t * V, V)) (*argmax_miss)++;
    return maxd / maxref;
}

static void test_reference_logits(void) {
    for (int a = 0; a < 3; a++) {
        sp_model *m = load(ARCHS[a], 2);
        CHECK(m != NULL, "load %s", ARCHS[a]);
        if (!m) continue;
        int V = sp_model_config(m)->vocab_size;
        int32_t tok[NTOK];
        CHECK(load_tokens(ARCHS[a], tok) == NTOK, "tokens %s", ARCHS[a]);
        float *ref = load_ref(ARCHS[a], V);
        CHECK(ref != NULL, "reference logits %s", ARCHS[a]);
        float *pre = malloc((size_t)NTOK * V * 4), *step = malloc((size_t)NTOK * V * 4);
        sp_err err = {{0}};
        /* prefill: one forward over all 24 */
        sp_kv *kv = sp_kv_create(m, 64, NTOK, &err);
        sp_forward_out o = {.logits = pre};
        CHECK(sp_model_forward(m, kv, tok, NTOK, &o, &err) == 0, "%s", err.msg);
        /* decode: 24 single-token forwards */
        sp_kv *kv1 = sp_kv_create(m, 64, 1, &err);
        for (int t = 0; t < NTOK; t++) {
            sp_forward_out o1 = {.logits = step + (size_t)t * V};
            CHECK(sp_model_forward(m, kv1, tok + t, 1, &o1, &err) == 0, "%s", err.msg);
        }
        int miss_p = 0, miss_s = 0;
        double rp = ref ? compare(pre, ref, V, &miss_p) : 1, rs = ref ? compare(step, ref, V, &miss_s) : 1;
        printf("  %-6s prefill rel err %.2e (argmax misses %d), decode rel err %.2e (misses %d)\n", ARCHS[a], rp,
               miss_p, rs, miss_s);
        CHECK(rp <= 1e-5 && miss_p == 0, "%s prefill rel %.3g misses %d", ARCHS[a], rp, miss_p);
        CHECK(rs <= 1e-5 && miss_s == 0, "%s decode rel %.3g misses %d", ARCHS[a], rs, miss_s);
        CHECK(memcmp(pre, step, (size_t)NTOK * V * 4) == 0, "%s: prefill != single steps bitwise", ARCHS[a]);
        sp_kv_free(kv);
        sp_kv_free(kv1);
        free(pre);
        free(step);
        free(ref);
        sp_model_free(m);
    }
}

/* blocks of sizes 1..7 over a long stream (past several sliding windows) vs single steps, bitwise */
static void test_block_invariance_and_threads(void) {
    for (int a = 0; a < 3; a++) {
        sp_model *m1 = load(ARCHS[a], 1), *m2 = load(ARCHS[a], 2);
        CHECK(m1 && m2, "load");
        if (!m1 || !m2) continue;
        int V = sp_model_config(m1)->vocab_size, N = 60;
        int32_t tok[60];
        for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919 + 13) % V);
        float *a1 = malloc((size_t)N * V * 4), *a2 = malloc((size_t)N * V * 4);
        sp_err err = {{0}};
        sp_kv *k1 = sp_kv_create(m1, 128, 1, &err), *k2 = sp_kv_create(m2, 128, 8, &err);
        for (int t = 0; t < N; t++) {
            sp_forward_out o = {.logits = a1 + (size_t)t * V};
            sp_model_forward(m1, k1, tok + t, 1, &o, &err);
        }
        for (int t = 0, b = 1; t < N; t += b, b = b % 7 + 1) {
            int n = t + b > N ? N - t : b;
            sp_forward_out o = {.logits = a2 + (size_t)t * V};
            CHECK(sp_model_forward(m2, k2, tok + t, n, &o, &err) == 0, "%s", err.msg);
        }
        CHECK(memcmp(a1, a2, (size_t)N * V * 4) == 0, "%s: blocked 2-thread != single-step 1-thread", ARCHS[a]);
        sp_kv_free(k1);
        sp_kv_free(k2);
        free(a1);
        free(a2);
        sp_model_free(m1);
        sp_model_free(m2);
    }
}

/* generate with random trims (rejected drafts) and compare every kept position with a fresh run */
static void test_trim_rollback(void) {
    for (int a = 0; a < 3; a++) {
        sp_model *m = load(ARCHS[a], 2);
        if (!m) { CHECK(0, "load"); continue; }
        int V = sp_model_config(m)->vocab_size, B = 6, N = 3 * 8 * 3; /* > 3 windows of the gemma fixture */
        sp_err err = {{0}};
        /* the committed stream, decided by greedy argmax of the first run */
        int32_t *stream = malloc(sizeof(int32_t) * (N + B + 1));
        float *lg = malloc((size_t)B * V * 4), *ref = malloc((size_t)(N + B) * V * 4);
        sp_kv *kv = sp_kv_create(m, 256, B, &err);
        stream[0] = 5;
        int len = 0; /* committed tokens whose logits are final */
        float *got = malloc((size_t)(N + B) * V * 4);
        unsigned r = 12345;
        while (len < N) {
            /* forward [stream[len], junk...] as a "verify block" of b tokens, keep k of them */
            r = r * 1103515245 + 12345;
            int b = 1 + (int)((r >> 16) % B), keep = 1 + (int)((r >> 8) % b);
            int32_t blk[8];
            blk[0] = stream[len];
            for (int i = 1; i < b; i++) blk[i] = (int32_t)((r >> (i + 3)) % V);
            sp_forward_out o = {.logits = lg};
            CHECK(sp_model_forward(m, kv, blk, b, &o, &err) == 0, "%s", err.msg);
            /* keep the first `keep` positions (inputs are junk after 0, but the kept ones become committed) */
            for (int i = 0; i < keep; i++) {
                memcpy(got + (size_t)(len + i) * V, lg + (size_t)i * V, (size_t)V * 4);
                stream[len + i] = blk[i];
            }
            stream[len + keep] = (int32_t)sp_argmax(lg + (size_t)(keep - 1) * V, V);
            CHECK(sp_kv_trim(kv, b - keep, &err) == 0, "%s", err.msg);
            len += keep;
        }
        /* fresh single-step run over the committed stream */
        sp_kv *kv2 = sp_kv_create(m, 256, 1, &err);
        for (int t = 0; t < len; t++) {
            sp_forward_out o = {.logits = ref + (size_t)t * V};
            sp_model_forward(m, kv2, stream + t, 1, &o, &err);
        }
        CHECK(memcmp(got, ref, (size_t)len * V * 4) == 0, "%s: trimmed run differs from fresh run", ARCHS[a]);
        /* a trim deeper than max_batch behind the newest write must be refused on ring caches */
        if (sp_kv_layer_seg(kv, 0, 1, 0).ring) CHECK(sp_kv_trim(kv, B + 3, &err) != 0, "deep trim across a wrap accepted");
        sp_kv_free(kv);
        sp_kv_free(kv2);
        free(stream); free(lg); free(ref); free(got);
        sp_model_free(m);
    }
}

static void test_taps(void) {
    sp_model *m = load("gemma4", 2);
    if (!m) { CHECK(0, "load"); return; }
    const sp_config *c = sp_model_config(m);
    int H = c->hidden_size, T = 5;
    int taps[3] = {0, 2, 5};
    int32_t tok[5] = {1, 2, 3, 4, 5};
    float *tp = malloc(sizeof(float) * T * 3 * H), *hid = malloc(sizeof(float) * T * H);
    sp_err err = {{0}};
    sp_kv *kv = sp_kv_create(m, 32, 8, &err);
    sp_forward_out o = {.hidden = hid, .tap_layers = taps, .n_taps = 3, .taps = tp};
    CHECK(sp_model_forward(m, kv, tok, T, &o, &err) == 0, "%s", err.msg);
    /* the final post-norm hidden is the final norm of the last layer's tap */
    float *y = malloc(sizeof(float) * H);
    for (int t = 0; t < T; t++) {
        sp_rmsnorm(y, tp + ((size_t)t * 3 + 2) * H, sp_model_final_norm(m), 1, H, (float)c->rms_eps);
        CHECK(memcmp(y, hid + (size_t)t * H, H * 4) == 0, "hidden != norm(tap of last layer) at %d", t);
    }
    int bad = 99;
    sp_forward_out ob = {.tap_layers = &bad, .n_taps = 1, .taps = tp};
    CHECK(sp_model_forward(m, kv, tok, 1, &ob, &err) != 0 && strstr(err.msg, "tap layer"), "bad tap accepted");
    CHECK(sp_model_forward(m, kv, tok, 9, NULL, &err) != 0, "T > max_batch accepted");
    int32_t badtok = 1 << 30;
    CHECK(sp_model_forward(m, kv, &badtok, 1, NULL, &err) != 0 && strstr(err.msg, "token id"), "bad token");
    free(y); free(tp); free(hid);
    sp_kv_free(kv);
    sp_model_free(m);
}

/* a checkpoint missing a tensor, or with one mis-shaped, or an unknown architecture: a clear error
 * naming what is wrong, and no model */
static void write_variant(const char *dir, const char *drop, const char *reshape) {
    sp_err err = {{0}};
    st_set *src;
    CHECK(sp_st_open_file(&src, "tests/data/ref-logits/qwen3/model.safetensors", &err) == 0, "%s", err.msg);
    st_writer *w = sp_st_writer_create();
    for (int i = 0; i < sp_st_count(src); i++) {
        const st_tensor *t = sp_st_at(src, i);
        if (drop && !strcmp(t->name, drop)) continue;
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        int nd = t->ndim;
        if (reshape && !strcmp(t->name, reshape)) { /* same bytes, transposed shape */
            int64_t a = shape[0];
            shape[0] = shape[1];
            shape[1] = a;
        }
        sp_st_writer_add(w, t->name, t->dtype, nd, shape, t->data, &err);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(sp_st_writer_save(w, path, &err) == 0, "%s", err.msg);
    sp_st_writer_free(w);
    sp_st_close(src);
}

static void test_bad_checkpoints(void) {
    char dir[] = "/tmp/specula-test-XXXXXX", cmd[600];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cmd, sizeof cmd, "cp tests/data/ref-logits/qwen3/config.json %s/", dir);
    CHECK(system(cmd) == 0, "cp");
    sp_err err = {{0}};
    sp_model *m = NULL;
    write_variant(dir, "model.layers.2.self_attn.k_norm.weight", NULL);
    CHECK(sp_model_load(&m, dir, 1, &err) != 0 && m == NULL && strstr(err.msg, "model.layers.2.self_attn.k_norm.weight"),
          "missing tensor: %s", err.msg);
    write_variant(dir, NULL, "model.layers.1.mlp.up_proj.weight");
    CHECK(sp_model_load(&m, dir, 1, &err) != 0 && strstr(err.msg, "model.layers.1.mlp.up_proj.weight") &&
              strstr(err.msg, "expected"),
          "mis-shaped tensor: %s", err.msg);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"qwen3\"/\"mamba\"/' %s/config.json", dir);
    CHECK(system(cmd) == 0, "sed");
    CHECK(sp_model_load(&m, dir, 1, &err) != 0 && strstr(err.msg, "mamba"), "unknown arch: %s", err.msg);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
    RUN(test_reference_logits);
    RUN(test_block_invariance_and_threads);
    RUN(test_trim_rollback);
    RUN(test_taps);
    RUN(test_bad_checkpoints);
    return harness_done("test_model");
}
