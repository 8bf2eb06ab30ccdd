/* test_tree.c — tree verification's batch invariance: a token tree forwarded in one pass gives
 * every node exactly (bit for bit) the logits, hidden rows and taps of a chain forward over its
 * root path, for llama, qwen3 and gemma4 (sliding + full layers, ring caches past the window),
 * threads 1 and 2; the tree attention kernel against its float64 reference and against the chain
 * kernel, and its some-rows form (sp_attention_tree_rows) against the full call; sp_kv_keep_rows
 * leaves the cache a chain forward would; bad trees are errors.
 * Tree speculation (decode/tree.c, DSpark / DFlash tree proposals): greedy output bit-identical to
 * plain decoding for every target, drafter head, shape and thread count, in the library and
 * through the binary (`generate --tree`); the sampling rule passes the model audit, and the audit
 * catches a broken tree rule. */
#include <stdint.h>
#include <string.h>

#include "core/cpu.h"
#include "drafters/dflash.h"
#include "drafters/drafters.h"
#include "formats/newdrafter.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "decode/audit.h"
#include "decode/generate.h"
#include "decode/spec.h"
#include "specula.h"

static char TMP[] = "/tmp/specula-tree-XXXXXX";
static char cli[4096];

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
        /* every SIMD tier the processor has gives the same bits */
        sp_cpu_tier level = sp_cpu_level();
        for (int tier = SP_CPU_SCALAR; tier <= SP_CPU_NEON; tier++) {
            if (sp_cpu_force((sp_cpu_tier)tier) != 0) continue;
            sp_attention_tree(pool, cout, q, K, V, &sh, parent);
            CHECK(!memcmp(cout, out, (size_t)T * qrow * 4), "tier %s: tree rows differ from tier %s",
                  sp_cpu_tier_name((sp_cpu_tier)tier), sp_cpu_tier_name(level));
        }
        sp_cpu_force(level);
        /* some rows only (sp_attention_tree_rows), last first: each the full call's row, bitwise */
        int32_t rows[64];
        int nr = 0;
        for (int t = T - 1; t >= 0; t -= 2) rows[nr] = t, memcpy(cq + (size_t)nr++ * qrow, q + (size_t)t * qrow, qrow * 4);
        sp_attention_tree_rows(pool, cout, cq, K, V, &sh, parent, rows, nr);
        bad = 0;
        for (int i = 0; i < nr; i++) bad += memcmp(cout + (size_t)i * qrow, out + (size_t)rows[i] * qrow, qrow * 4) != 0;
        CHECK(bad == 0, "%d of %d rows of sp_attention_tree_rows differ from the full tree call", bad, nr);
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


/* ---- tree speculation ------------------------------------------------------------------------ */
static const char *TARGETS[] = {"llama", "qwen3", "gemma4"};
static const struct {
    const char *name, *arch, *preset, *set;
} KINDS[] = {
    {"zlab", "dflash", "b16", NULL},
    {"dspark", "dspark", "b7", NULL},
    {"dspark-rnn", "dspark", "b7", "markov_head_type=rnn"},
};
enum { N_KINDS = 3 };

static void drafter_dir(char *out, size_t cap, const char *target, int k) {
    snprintf(out, cap, "%s/%s-%s", TMP, target, KINDS[k].name);
}

static int make_drafters(void) {
    if (!mkdtemp(TMP)) return -1;
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < N_KINDS; k++) {
            char dir[256], tdir[256];
            drafter_dir(dir, sizeof dir, TARGETS[t], k);
            snprintf(tdir, sizeof tdir, "tests/data/ref-logits/%s", TARGETS[t]);
            const char *sets[1] = {KINDS[k].set};
            newdrafter_opts o = {.arch = KINDS[k].arch, .preset = KINDS[k].preset, .sets = sets,
                                 .n_sets = KINDS[k].set ? 1 : 0, .dtype = SP_DT_UNKNOWN, .seed = 21 + k};
            sp_err err = {{0}};
            if (sp_newdrafter_write(dir, tdir, &o, &err)) {
                fprintf(stderr, "new drafter %s: %s\n", dir, err.msg);
                return -1;
            }
        }
    return 0;
}

/* greedy: tree speculation == plain decoding, bit for bit */
static void identity_case(const char *target, int threads) {
    sp_model *m = load(target, threads);
    CHECK(m != NULL, "load %s", target);
    if (!m) return;
    int V = sp_model_config(m)->vocab_size, N = 32;
    int32_t prompt[24], ref[64], out[64];
    int np = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 7; i++) prompt[np++] = (int32_t)((i * 977 + 31) % V);
    sp_err err = {{0}};
    sp_gen_params gp = sp_gen_params_default();
    gp.max_new = N;
    gp.ignore_eos = 1;
    sp_gen_stats gs;
    CHECK(sp_generate(m, NULL, prompt, np, &gp, ref, 64, &gs, &err) == 0, "%s", err.msg);
    static const sp_tree_shape shapes[] = {
        {.nodes = 12, .k = 3, .kind = SP_TREE_DYNAMIC},
        {.nodes = 9, .k = 3, .kind = SP_TREE_STATIC},
        {.nodes = 32, .k = 4, .kind = SP_TREE_DYNAMIC},
        {.nodes = 1, .k = 1, .kind = SP_TREE_DYNAMIC},
    };
    for (int k = 0; k < N_KINDS; k++)
        for (int s = 0; s < 4; s++) {
            if (threads == 2 && (k != 1 || s == 1 || s == 3)) continue; /* 2 threads: DSpark, two shapes */
            char dir[256];
            drafter_dir(dir, sizeof dir, target, k);
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = s == 2 ? 16 : 7;
            sp.tree = shapes[s];
            sp_dflash_opts o = sp_dflash_opts_default();
            sp_drafter *d = sp_drafter_dflash(dir, m, &sp.gen.sample, &o, &err);
            CHECK(d, "%s %s: %s", target, KINDS[k].name, err.msg);
            if (!d) continue;
            sp_spec_stats st;
            memset(out, 0xff, sizeof out);
            CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
            CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N),
                  "%s %s shape %d threads %d: tree output differs from plain", target, KINDS[k].name, s, threads);
            CHECK(st.drafted >= st.target_calls - 1 && st.drafted <= st.target_calls * shapes[s].nodes,
                  "%s %s shape %d: %d nodes in %d rounds", target, KINDS[k].name, s, st.drafted, st.target_calls);
            sp_drafter_free(d);
        }
    /* a one-child static tree is the chain: the same drafts, so the same acceptance */
    for (int k = 0; k < N_KINDS && threads == 1; k++) {
        char dir[256];
        drafter_dir(dir, sizeof dir, target, k);
        sp_spec_stats sc, stt;
        sp_spec_params sp = sp_spec_params_default();
        sp.gen = gp;
        sp.draft_max = 7;
        sp_dflash_opts o = sp_dflash_opts_default();
        sp_drafter *d = sp_drafter_dflash(dir, m, &sp.gen.sample, &o, &err);
        if (!d) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        int ok = sp_spec_generate(m, d, prompt, np, &sp, out, 64, &sc, &err) == 0;
        sp.tree = (sp_tree_shape){.nodes = 7, .k = 1, .kind = SP_TREE_STATIC};
        ok = ok && sp_spec_generate(m, d, prompt, np, &sp, out, 64, &stt, &err) == 0;
        CHECK(ok, "%s", err.msg);
        CHECK(sc.accepted == stt.accepted && sc.target_calls == stt.target_calls,
              "%s %s: chain accepted %d in %d rounds, 1-child tree %d in %d", target, KINDS[k].name, sc.accepted,
              sc.target_calls, stt.accepted, stt.target_calls);
        sp_drafter_free(d);
    }
    sp_model_free(m);
}

static void test_tree_identity(void) {
    /* the sanitizer build: one thread count per target (2 threads on the last one) */
    for (int t = 0; t < 3; t++) {
        if (!HARNESS_SANITIZED || t < 2) identity_case(TARGETS[t], 1);
        if (!HARNESS_SANITIZED || t == 2) identity_case(TARGETS[t], 2);
    }
}

/* a drafter without propose_tree is an error when trees are asked for */
static void test_tree_needs_drafter(void) {
    sp_model *m = load("qwen3", 1);
    CHECK(m != NULL, "load");
    if (!m) return;
    sp_err err = {{0}};
    sp_drafter *d = sp_drafter_ngram(1, 3, &err);
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.max_new = 4;
    sp.tree = (sp_tree_shape){.nodes = 8, .k = 2};
    int32_t prompt[3] = {1, 2, 3}, out[4];
    CHECK(sp_spec_generate(m, d, prompt, 3, &sp, out, 4, NULL, &err) == -1 && strstr(err.msg, "proposes no trees"),
          "ngram trees: %s", err.msg);
    sp_drafter_free(d);
    sp_model_free(m);
}

/* sampling: the model audit over the tree rule (hot drafter q: partial acceptance), and the
 * broken tree rule must be caught */
static void audit_case(const char *target, int k, int broken, int expect_pass, int draws, float dtemp) {
    sp_model *m = load(target, 2);
    CHECK(m != NULL, "load");
    if (!m) return;
    int32_t prompt[6] = {1, 5493, 20509, 14029, 77, 901};
    sp_err err = {{0}};
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.sample = (sp_sample_params){1.0f, 0, 1.0f, 0.0f, 7};
    sp.draft_max = 4;
    sp.tree = (sp_tree_shape){.nodes = 10, .k = 3, .kind = SP_TREE_DYNAMIC};
    sp.broken_residual = broken;
    sp_sample_params dq = sp.gen.sample;
    dq.temperature = dtemp; /* a hot q: some drafts rejected, some accepted */
    char dir[256];
    drafter_dir(dir, sizeof dir, target, k);
    sp_dflash_opts o = sp_dflash_opts_default();
    sp_drafter *d = sp_drafter_dflash(dir, m, &dq, &o, &err);
    CHECK(d, "%s", err.msg);
    sp_audit_result r;
    if (d && sp_audit_run(m, d, prompt, 6, &sp, HARNESS_AUDIT_DRAWS(draws), 0.001, &r, &err) == 0) {
        printf("  %-6s %-10s tree%s: first p=%.4f TV %.4f (null %.4f), second p=%.4f (%d groups), acc %.2f\n", target,
               KINDS[k].name, broken ? " BROKEN" : "", r.first.p_value, r.first.tv, r.first.tv_null, r.second.p_value,
               r.second_groups, r.acceptance_rate);
        if (!HARNESS_AUDIT_VERDICTS) { /* the sanitizer build: fewer draws, verdicts unchecked */
        } else if (expect_pass) CHECK(r.pass, "%s %s: tree audit failed", target, KINDS[k].name);
        else CHECK(!r.pass, "%s %s: the audit did not catch the broken tree rule", target, KINDS[k].name);
        /* drafted counts every node (10 a round): 0.005 is about one accepted draft in 20 rounds */
        CHECK(r.acceptance_rate > 0.005, "acceptance %.3f: the rule was not exercised", r.acceptance_rate);
    } else {
        CHECK(0, "audit: %s", err.msg);
    }
    sp_drafter_free(d);
    sp_model_free(m);
}

static void test_tree_audit(void) {
    audit_case("qwen3", 1, 0, 1, 1200, 8.0f);
    audit_case("gemma4", 2, 0, 1, 600, 8.0f);
    audit_case("qwen3", 0, 0, 1, 600, 8.0f);
    audit_case("qwen3", 1, 1, 0, 1500, 8.0f); /* power: the broken rule (no residual update) is caught */
}

/* the binary: generate --tree == plain generate, per target and thread count */
static void test_tree_cli(void) {
    static char a[1 << 16], b[1 << 16];
    char cmd[16384];
    for (int t = 0; t < 3; t++)
        for (int th = 1; th <= 2; th++) {
            char dir[256];
            drafter_dir(dir, sizeof dir, TARGETS[t], 1);
            const char *fmt = "%s generate -m tests/data/ref-logits/%s --prompt-ids 1,2,3,4,1,2,3,4 -n 32 --ignore-eos "
                              "-t %d %s 2>/dev/null";
            snprintf(cmd, sizeof cmd, fmt, cli, TARGETS[t], th, "");
            CHECK(harness_run(cmd, a, sizeof a) == 0 && strlen(a) > 32, "plain: %s", a);
            char extra[512];
            snprintf(extra, sizeof extra, "-md %s --tree %d --tree-k 3 --tree-shape %s", dir, 6 + 7 * th,
                     th == 1 ? "static" : "dynamic");
            snprintf(cmd, sizeof cmd, fmt, cli, TARGETS[t], th, extra);
            CHECK(harness_run(cmd, b, sizeof b) == 0, "tree: %s", b);
            /* the first line is the generated ids (the next ones are timings) */
            char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
            if (ea) *ea = 0;
            if (eb) *eb = 0;
            CHECK(!strcmp(a, b), "%s threads %d: --tree output differs from plain:\n%s\n%s", TARGETS[t], th, a, b);
        }
    snprintf(cmd, sizeof cmd, "%s generate -m tests/data/ref-logits/qwen3 --prompt-ids 1,2 --spec ngram --tree 4 2>&1",
             cli);
    CHECK(harness_run(cmd, b, sizeof b) != 0 && strstr(b, "proposes no trees"), "ngram --tree: %s", b);
    snprintf(cmd, sizeof cmd, "%s generate -m tests/data/ref-logits/qwen3 --prompt-ids 1,2 --spec ngram --tree 99 2>&1",
             cli);
    CHECK(harness_run(cmd, b, sizeof b) == 2 && strstr(b, "out of range"), "--tree 99: %s", b);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    if (make_drafters()) {
        printf("FAIL make_drafters\n");
        return 1;
    }
    RUN(test_tree_kernel);
    RUN(test_tree_forward_llama);
    RUN(test_tree_forward_qwen3);
    RUN(test_tree_forward_gemma4);
    RUN(test_tree_errors);
    RUN(test_tree_identity);
    RUN(test_tree_needs_drafter);
    RUN(test_tree_audit);
    RUN(test_tree_cli);
    char rm[512];
    snprintf(rm, sizeof rm, "rm -rf '%s'", TMP);
    if (system(rm) != 0) printf("FAIL cleanup\n");
    return harness_done("test_tree");
}
