/* test_eagle3_tree.c — token trees from EAGLE-3 drafters (src/drafters/eagle3_tree.c).
 *
 * - proposals: a one-child static tree is exactly the chain proposal; in a wide dynamic tree the
 *   rank-0 path from the root is the chain's drafts (each depth's nodes run as one batch with the
 *   tree mask, and every row gets the chain's bits); the tree is the same on 1 and 2 threads;
 * - greedy: `--tree N` output bit-identical to plain decoding on the tiny llama, qwen3 and gemma4
 *   targets, SpecForge and DeepSpec layouts, static and dynamic shapes, threads 1 and 2, and
 *   through the binary;
 * - commit after a tree round: the drafter's next chain and tree proposals (tokens, parents, q
 *   bit for bit) equal those of a fresh drafter begun on the committed stream, greedy and sampled;
 * - sampling: the model audit over the tree rule passes at temperature 1, and catches the
 *   broken tree rule. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "drafters/eagle3.h"
#include "eagle3_fixtures.h"
#include "fixtures.h"
#include "formats/newdrafter.h"
#include "harness.h"
#include "decode/audit.h"
#include "decode/generate.h"
#include "decode/spec.h"

static char TMP[] = "/tmp/specula-eagle3-tree-XXXXXX";
static char cli[4096];
static void drafter_dir(char *out, size_t cap, const char *target, const char *layout) {
    e3_fixture_dir(out, cap, TMP, target, layout);
}

static int make_drafters(void) { return e3_fixture_write(TMP, 31); }

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

static sp_drafter *open_drafter(const char *target, const char *layout, sp_model *m, const sp_sample_params *sp,
                                int max_g, sp_err *err) {
    char dir[256];
    drafter_dir(dir, sizeof dir, target, layout);
    return sp_drafter_eagle3(dir, m, sp, max_g, err);
}

/* a drafter begun on stream[0..n) (taps from a target forward into a fresh cache) */
static sp_drafter *begun(const char *target, const char *layout, sp_model *m, const sp_sample_params *sp, int G,
                         const int32_t *stream, int n, uint64_t seed, sp_err *err) {
    int H = sp_model_config(m)->hidden_size;
    sp_drafter *d = open_drafter(target, layout, m, sp, G, err);
    if (!d) return NULL;
    float *taps = malloc(sizeof(float) * (size_t)n * (size_t)d->n_taps * (size_t)H);
    sp_kv *kv = sp_kv_create(m, 512, 512, err);
    sp_forward_out o = {.tap_layers = d->tap_layers, .n_taps = d->n_taps, .taps = taps};
    sp_drafter_ctx c = {.target = m, .target_kv = kv, .seed = seed};
    int ok = taps && kv && sp_model_forward(m, kv, stream, n - 1, &o, err) == 0 &&
             d->begin(d, stream, n, taps, NULL, &c, err) == 0;
    free(taps);
    sp_kv_free(kv);
    if (!ok) sp_drafter_free(d), d = NULL;
    return d;
}

/* ---- proposals -------------------------------------------------------------------------------- */
static void test_tree_proposals(void) {
    for (int t = 0; t < 3; t++)
        for (int l = 0; l < 2; l++) {
            sp_model *m1 = load(TARGETS[t], 1), *m2 = load(TARGETS[t], 2);
            CHECK(m1 && m2, "load %s", TARGETS[t]);
            if (!m1 || !m2) { sp_model_free(m1); sp_model_free(m2); continue; }
            int32_t prompt[32], chain[8], tok[3][SP_TREE_MAX_NODES], par[3][SP_TREE_MAX_NODES];
            int np = fixture_prompt(prompt, sp_model_config(m1)->vocab_size), G = 6;
            sp_sample_params g = sp_sample_params_default();
            sp_err err = {{0}};
            sp_drafter *d = begun(TARGETS[t], LAYOUTS[l], m1, &g, G, prompt, np, 1, &err);
            int nc = d ? d->propose(d, G, chain, NULL, &err) : -1;
            sp_drafter_free(d);
            const sp_tree_shape one = {.nodes = G, .k = 1, .max_depth = G, .kind = SP_TREE_STATIC};
            const sp_tree_shape wide = {.nodes = 24, .k = 3, .max_depth = G, .kind = SP_TREE_DYNAMIC};
            int n[3] = {-1, -1, -1};
            for (int i = 0; i < 3; i++) { /* 0: one-child static; 1, 2: wide dynamic on 1 and 2 threads */
                d = begun(TARGETS[t], LAYOUTS[l], i == 2 ? m2 : m1, &g, G, prompt, np, 1, &err);
                n[i] = d ? d->propose_tree(d, i ? &wide : &one, tok[i], par[i], NULL, &err) : -1;
                sp_drafter_free(d);
            }
            CHECK(nc == G && n[0] == G, "%s %s: chain %d, one-child tree %d nodes (%s)", TARGETS[t], LAYOUTS[l], nc,
                  n[0], err.msg);
            int same = n[0] == nc;
            for (int i = 0; same && i < nc; i++) same = tok[0][i] == chain[i] && par[0][i] == i - 1;
            CHECK(same, "%s %s: the one-child static tree is not the chain", TARGETS[t], LAYOUTS[l]);
            /* the rank-0 path of the wide tree: the first child of each node */
            int depth = 0, v = -1, batched = 0;
            for (int i = 0; i < n[1]; i++) {
                if (par[1][i] != v) continue;
                CHECK(depth < nc && tok[1][i] == chain[depth], "%s %s: rank-0 node at depth %d is %d, the chain's %d",
                      TARGETS[t], LAYOUTS[l], depth + 1, tok[1][i], depth < nc ? chain[depth] : -1);
                v = i, depth++;
            }
            for (int i = 0; i < n[1]; i++) batched += par[1][i] >= 0 && par[1][i] != par[1][0];
            CHECK(n[1] == wide.nodes && depth >= 2 && batched > 0, "%s %s: %d nodes, rank-0 path %d deep",
                  TARGETS[t], LAYOUTS[l], n[1], depth);
            CHECK(n[2] == n[1] && !memcmp(tok[1], tok[2], sizeof(int32_t) * (size_t)n[1]) &&
                      !memcmp(par[1], par[2], sizeof(int32_t) * (size_t)n[1]),
                  "%s %s: the tree differs between 1 and 2 threads", TARGETS[t], LAYOUTS[l]);
            sp_model_free(m1);
            sp_model_free(m2);
        }
}

/* ---- greedy identity -------------------------------------------------------------------------- */
static void identity_case(const char *target, int threads) {
    sp_model *m = load(target, threads);
    CHECK(m != NULL, "load %s", target);
    if (!m) return;
    int V = sp_model_config(m)->vocab_size, N = 32;
    int32_t prompt[32], ref[64], out[64];
    int np = fixture_prompt(prompt, V);
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
    };
    for (int l = 0; l < 2; l++)
        for (int s = 0; s < 3; s++) {
            if (threads == 2 && s == 2) continue;
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = s == 2 ? 12 : 5;
            sp.tree = shapes[s];
            sp_drafter *d = open_drafter(target, LAYOUTS[l], m, &sp.gen.sample, sp.draft_max, &err);
            CHECK(d, "%s %s: %s", target, LAYOUTS[l], err.msg);
            if (!d) continue;
            sp_spec_stats st;
            memset(out, 0xff, sizeof out);
            CHECK(sp_spec_generate(m, d, prompt, np, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
            CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N),
                  "%s %s shape %d threads %d: tree output differs from plain", target, LAYOUTS[l], s, threads);
            CHECK(st.drafted > st.target_calls && st.drafted <= st.target_calls * shapes[s].nodes,
                  "%s %s shape %d: %d nodes in %d rounds", target, LAYOUTS[l], s, st.drafted, st.target_calls);
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

/* ---- commit after a tree round ---------------------------------------------------------------- */
typedef struct {
    int32_t tok[SP_TREE_MAX_NODES], par[SP_TREE_MAX_NODES], chain[8];
    int n, nc;
    float *q, *qc; /* sampled: [nodes + 1, V] tree q, [G, V] chain q */
} proposal_t;

/* a tree proposal, then a chain proposal from the same state (the tree must leave no trace) */
static void propose_both(sp_drafter *d, const sp_tree_shape *sh, int G, proposal_t *p, sp_err *err) {
    p->n = d->propose_tree(d, sh, p->tok, p->par, p->q, err);
    p->nc = d->propose(d, G, p->chain, p->qc, err);
}

static int same_proposal(const proposal_t *x, const proposal_t *y, int V) {
    if (x->n != y->n || x->nc != y->nc || x->n < 0 || x->nc < 0) return 0;
    if (memcmp(x->tok, y->tok, sizeof(int32_t) * (size_t)x->n) || memcmp(x->par, y->par, sizeof(int32_t) * (size_t)x->n) ||
        memcmp(x->chain, y->chain, sizeof(int32_t) * (size_t)x->nc))
        return 0;
    for (int v = 0; x->q && v <= x->n; v++) { /* q rows of the nodes with children (leaves have none) */
        int parent_of_some = v == 0;
        for (int i = 0; i < x->n && !parent_of_some; i++) parent_of_some = x->par[i] == v - 1;
        if (parent_of_some && memcmp(x->q + (size_t)v * V, y->q + (size_t)v * V, sizeof(float) * (size_t)V)) return 0;
    }
    if (x->qc && memcmp(x->qc, y->qc, sizeof(float) * (size_t)x->nc * (size_t)V)) return 0;
    return 1;
}

static void commit_case(const char *target, const char *layout, int sampled) {
    sp_model *m = fixture_load(target);
    if (!m) { CHECK(0, "load"); return; }
    int V = sp_model_config(m)->vocab_size, H = sp_model_config(m)->hidden_size, G = 5;
    sp_sample_params sp = sp_sample_params_default();
    if (sampled) sp = (sp_sample_params){1.0f, 0, 1.0f, 0.0f, 5};
    const sp_tree_shape sh = {.nodes = 10, .k = 3, .max_depth = G, .kind = SP_TREE_DYNAMIC};
    sp_err err = {{0}};
    int32_t stream[256];
    int n = fixture_prompt(stream, V), bad = 0, ok = 1;
    const uint64_t seed = 4;
    /* the drafter under test: a tree round, a commit of the path the test picks, repeated */
    sp_drafter *a = begun(target, layout, m, &sp, G, stream, n, seed, &err);
    sp_kv *kv = sp_kv_create(m, 512, 512, &err);
    proposal_t p = {0}, f = {0};
    if (sampled) {
        p.q = malloc(sizeof(float) * (size_t)(sh.nodes + 1) * V), f.q = malloc(sizeof(float) * (size_t)(sh.nodes + 1) * V);
        p.qc = malloc(sizeof(float) * (size_t)G * V), f.qc = malloc(sizeof(float) * (size_t)G * V);
    }
    float *taps = a ? malloc(sizeof(float) * 64 * (size_t)a->n_taps * (size_t)H) : NULL;
    sp_forward_out o = {.tap_layers = a ? a->tap_layers : NULL, .n_taps = a ? a->n_taps : 0, .taps = taps};
    ok = a && kv && taps && sp_model_forward(m, kv, stream, n - 1, &o, &err) == 0;
    for (int r = 0; ok && r < 6; r++) {
        int32_t tok[SP_TREE_MAX_NODES], par[SP_TREE_MAX_NODES], path[16], rows[17];
        int nn = a->propose_tree(a, &sh, tok, par, p.q, &err);
        ok = nn > 0;
        /* the accepted path: from the root, child number (r + depth) % children, up to r % 4 deep */
        int acc = 0, v = -1;
        while (ok && acc < r % 4) {
            int kids[SP_TREE_MAX_NODES], nk = 0;
            for (int i = 0; i < nn; i++)
                if (par[i] == v) kids[nk++] = i;
            if (!nk) break;
            v = kids[(r + acc) % nk];
            path[acc++] = v;
        }
        int32_t next = (int32_t)((r * 7919 + 11) % V);
        rows[0] = stream[n - 1];
        for (int i = 0; i < acc; i++) rows[i + 1] = tok[path[i]];
        a->tree_accept(a, path, acc);
        ok = ok && sp_model_forward(m, kv, rows, acc + 1, &o, &err) == 0 &&
             a->commit(a, acc, next, taps, NULL, &err) == 0;
        for (int i = 0; i < acc; i++) stream[n++] = rows[i + 1];
        stream[n++] = next;
        /* the next proposals, tree and chain, against a fresh drafter begun on the stream */
        sp_drafter *fresh = ok ? begun(target, layout, m, &sp, G, stream, n, seed, &err) : NULL;
        ok = fresh != NULL;
        if (ok) {
            propose_both(a, &sh, G, &p, &err);
            propose_both(fresh, &sh, G, &f, &err);
            if (!same_proposal(&p, &f, V)) {
                if (!bad) fprintf(stderr, "  round %d: %d nodes / %d drafts vs fresh %d / %d\n", r, p.n, p.nc, f.n, f.nc);
                bad++;
            }
        }
        sp_drafter_free(fresh);
    }
    CHECK(ok && bad == 0, "%s %s %s: %d of 6 tree rounds differ from a fresh drafter (%s)", target, layout,
          sampled ? "sampled" : "greedy", bad, err.msg);
    free(taps);
    free(p.q), free(p.qc), free(f.q), free(f.qc);
    sp_kv_free(kv);
    sp_drafter_free(a);
    sp_model_free(m);
}

static void test_tree_commit(void) {
    for (int t = 0; t < 3; t++)
        for (int l = 0; l < 2; l++) commit_case(TARGETS[t], LAYOUTS[l], t == 1);
    commit_case("qwen3", "specforge", 0);
}

/* ---- sampling: the audit over the tree rule ---------------------------------------------------- */
static void audit_case(const char *target, const char *layout, int broken, int draws, float dtemp) {
    sp_model *m = fixture_load(target);
    if (!m) { CHECK(0, "load"); return; }
    int32_t prompt[6] = {1, 5493, 20509, 14029, 77, 901};
    sp_err err = {{0}};
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.sample = (sp_sample_params){1.0f, 0, 1.0f, 0.0f, 7};
    sp.draft_max = 4;
    sp.tree = (sp_tree_shape){.nodes = 10, .k = 3, .kind = SP_TREE_DYNAMIC};
    sp.broken_residual = broken;
    sp_sample_params dq = sp.gen.sample;
    dq.temperature = dtemp; /* a hot q: some drafts rejected, some accepted */
    sp_drafter *d = open_drafter(target, layout, m, &dq, 4, &err);
    CHECK(d, "%s", err.msg);
    sp_audit_result r;
    if (d && sp_audit_run(m, d, prompt, 6, &sp, HARNESS_AUDIT_DRAWS(draws), 0.001, &r, &err) == 0) {
        printf("  %-6s %-9s tree%s: first p=%.4f TV %.4f (null %.4f), second p=%.4f (%d groups), acc %.3f\n", target,
               layout, broken ? " BROKEN" : "", r.first.p_value, r.first.tv, r.first.tv_null, r.second.p_value,
               r.second_groups, r.acceptance_rate);
        if (!HARNESS_AUDIT_VERDICTS) { /* the sanitizer build: fewer draws, verdicts unchecked */
        } else if (broken) CHECK(!r.pass, "%s %s: the audit did not catch the broken tree rule", target, layout);
        else CHECK(r.pass, "%s %s: tree audit failed", target, layout);
        CHECK(r.acceptance_rate > 0.005, "acceptance %.3f: the rule was not exercised", r.acceptance_rate);
    } else if (d) {
        CHECK(0, "audit: %s", err.msg);
    }
    sp_drafter_free(d);
    sp_model_free(m);
}

static void test_tree_audit(void) {
    /* the random DeepSpec drafter at 8 shares enough of the target's mass for the broken rule to show */
    audit_case("qwen3", "deepspec", 0, 1200, 8.0f);
    audit_case("qwen3", "deepspec", 1, 1500, 8.0f); /* power: the broken rule (no residual update) is caught */
    audit_case("qwen3", "specforge", 0, 600, 50.0f);
}

/* ---- the binary: generate --tree with an EAGLE-3 drafter == plain generate --------------------- */
static void test_tree_cli(void) {
    static char a[1 << 16], b[1 << 16];
    char cmd[16384], dir[256];
    drafter_dir(dir, sizeof dir, "llama", "specforge");
    const char *fmt = "%s generate -m tests/data/ref-logits/llama --prompt-ids 1,2,3,4,1,2,3,4 -n 32 --ignore-eos "
                      "-t 2 %s 2>/dev/null";
    snprintf(cmd, sizeof cmd, fmt, cli, "");
    CHECK(harness_run(cmd, a, sizeof a) == 0 && strlen(a) > 32, "plain: %s", a);
    char extra[512];
    snprintf(extra, sizeof extra, "-md %s --tree 10 --tree-k 3 --tree-shape dynamic", dir);
    snprintf(cmd, sizeof cmd, fmt, cli, extra);
    CHECK(harness_run(cmd, b, sizeof b) == 0, "tree: %s", b);
    char *ea = strchr(a, '\n'), *eb = strchr(b, '\n'); /* the first line is the ids */
    if (ea) *ea = 0;
    if (eb) *eb = 0;
    CHECK(!strcmp(a, b), "eagle3 --tree output differs from plain:\n%s\n%s", a, b);
}

int main(int argc, char **argv) {
    const char *slash = strrchr(argv[0], '/');
    snprintf(cli, sizeof cli, "%.*s/../specula", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    (void)argc;
    if (!mkdtemp(TMP) || make_drafters()) {
        fprintf(stderr, "cannot write test drafters under %s\n", TMP);
        return 1;
    }
    RUN(test_tree_proposals);
    RUN(test_tree_identity);
    RUN(test_tree_commit);
    RUN(test_tree_audit);
    RUN(test_tree_cli);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", TMP);
    return harness_done("test_eagle3_tree");
}
