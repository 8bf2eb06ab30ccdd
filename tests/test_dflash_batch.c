/* test_dflash_batch.c — DFlash / DSpark drafters sharing one checkpoint (src/drafters/dflash_batch.c).
 *
 * - batched drafting gives each drafter exactly its solo drafts: several clones of one loaded
 *   drafter (greedy and sampled, different prompts, seeds and lengths) propose together through
 *   propose_batch while independently loaded drafters fed the same prompts, taps and commits
 *   propose alone; every round's drafts and q rows are bit-identical, for z-lab DFlash and DSpark
 *   on the qwen3 and gemma4 fixture targets, including max_g 0, rounds split over work groups,
 *   and long runs without drafts (the clones' deferred context rows, from commit and extend,
 *   injected in a batch, or alone when their buffer fills);
 * - clones borrow the prototype's weights (no copies), and mixing drafters of two checkpoints in
 *   one batch is an error. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "drafters/dflash.h"
#include "fixtures.h"
#include "formats/newdrafter.h"
#include "harness.h"
#include "decode/spec.h"

static char TMP[] = "/tmp/specula-dflash-batch-XXXXXX";
static const char *TARGETS[] = {"qwen3", "gemma4"};
static const char *KINDS[][3] = {{"zlab", "dflash", "b16"}, {"dspark", "dspark", "b7"}};

enum { NS = 6 };

static void drafter_dir(char *out, size_t cap, const char *target, const char *kind) {
    snprintf(out, cap, "%s/%s-%s", TMP, target, kind);
}

static int make_drafters(void) {
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 2; k++) {
            char dir[256], tdir[256];
            drafter_dir(dir, sizeof dir, TARGETS[t], KINDS[k][0]);
            snprintf(tdir, sizeof tdir, "tests/data/ref-logits/%s", TARGETS[t]);
            newdrafter_opts o = {.arch = KINDS[k][1], .preset = KINDS[k][2], .dtype = SP_DT_UNKNOWN, .seed = 5 + k};
            sp_err err = {{0}};
            if (sp_newdrafter_write(dir, tdir, &o, &err)) {
                fprintf(stderr, "new drafter %s: %s\n", dir, err.msg);
                return -1;
            }
        }
    return 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float next_f(void) { return (float)(next_u32() % 20001) / 10000.0f - 1.0f; }

static sp_sample_params params_of(int i) {
    sp_sample_params p = sp_sample_params_default();
    if (i % 2) p = (sp_sample_params){0.8f + 0.1f * i, 0, 0.95f, 0, (uint64_t)(100 + i)};
    return p;
}

static void run_case(const char *target, const char *kind, int max_g) {
    sp_model *m = fixture_load(target);
    if (!m) { CHECK(0, "load %s", target); return; }
    const sp_config *c = sp_model_config(m);
    int V = c->vocab_size, H = c->hidden_size;
    char dir[256];
    drafter_dir(dir, sizeof dir, target, kind);
    sp_err err = {{0}};
    sp_sample_params greedy = sp_sample_params_default();
    sp_dflash_opts o = sp_dflash_opts_default();
    o.max_drafts = max_g;
    sp_drafter *proto = sp_drafter_dflash(dir, m, &greedy, &o, &err);
    CHECK(proto, "%s", err.msg);
    sp_drafter *bat[NS] = {0}, *solo[NS] = {0};
    for (int i = 0; proto && i < NS; i++) {
        sp_sample_params sp = params_of(i);
        bat[i] = sp_dflash_clone(proto, &sp, &err);
        CHECK(bat[i], "clone %d: %s", i, err.msg);
        solo[i] = sp_drafter_dflash(dir, m, &sp, &o, &err);
        CHECK(solo[i], "solo %d: %s", i, err.msg);
    }
    int ok = proto != NULL;
    for (int i = 0; i < NS; i++) ok = ok && bat[i] && solo[i];
    if (!ok) goto done;
    CHECK(bat[0]->batch_key == proto->batch_key && bat[0]->propose_batch, "a clone shares the prototype's batch key");
    int nt = proto->n_taps;
    size_t tw = (size_t)nt * H;
    /* begin: each drafter its own prompt (lengths 1 .. 20) with random taps rows */
    for (int i = 0; i < NS; i++) {
        int n = 1 + (i * 7) % 20;
        int32_t prompt[32];
        for (int t = 0; t < n; t++) prompt[t] = (int32_t)(next_u32() % (uint32_t)V);
        float *taps = malloc(sizeof(float) * (size_t)(n > 1 ? n - 1 : 1) * tw);
        for (size_t k = 0; k < (size_t)(n - 1) * tw; k++) taps[k] = next_f();
        sp_drafter_ctx ctx = {.target = m, .target_kv = NULL, .seed = 100 + (uint64_t)i, .penalty = NULL};
        CHECK(bat[i]->begin(bat[i], prompt, n, taps, NULL, &ctx, &err) == 0, "%s", err.msg);
        CHECK(solo[i]->begin(solo[i], prompt, n, taps, NULL, &ctx, &err) == 0, "%s", err.msg);
        free(taps);
    }
    int32_t db[NS][SP_SPEC_MAX_G], ds[NS][SP_SPEC_MAX_G];
    float *qb[NS], *qs[NS];
    for (int i = 0; i < NS; i++) {
        qb[i] = calloc((size_t)max_g * V, sizeof(float));
        qs[i] = calloc((size_t)max_g * V, sizeof(float));
    }
    float *taps = malloc(sizeof(float) * (size_t)(max_g + 1) * tw);
    int rounds = 0, drafted = 0, diff = 0;
    for (int r = 0; r < 64; r++) {
        /* rounds 6 .. 57: drafter 0 verifies no drafts (its context rows wait, then are injected
         * in a batch once many wait) and drafter 1 proposes alone without drafts (its rows wait
         * until its own buffer is full) */
        int quiet = r >= 6 && r < 58;
        int mg[NS], nb[NS], bm[NS], nbm = 0;
        int32_t *dbp[NS];
        float *qbp[NS];
        sp_drafter *bd[NS];
        for (int i = 0; i < NS; i++) {
            mg[i] = (r + i) % 5 == 0 ? 0 : 1 + (int)(next_u32() % (uint32_t)max_g); /* some rounds without drafts */
            if (r == 2) mg[i] = max_g;
            if (quiet && i < 2) mg[i] = 0;
            if (quiet && i == 1) continue;
            bd[nbm] = bat[i], dbp[nbm] = db[i], qbp[nbm] = bat[i]->provides_q ? qb[i] : NULL, bm[nbm++] = mg[i];
        }
        int got[NS];
        CHECK(bd[0]->propose_batch(bd, nbm, bm, dbp, qbp, got, &err) == 0, "%s", err.msg);
        for (int i = 0, k = 0; i < NS; i++) {
            if (quiet && i == 1) nb[i] = bat[1]->propose(bat[1], 0, db[1], NULL, &err);
            else nb[i] = got[k++];
        }
        for (int i = 0; i < NS; i++) {
            int n = solo[i]->propose(solo[i], mg[i], ds[i], solo[i]->provides_q ? qs[i] : NULL, &err);
            CHECK(n == nb[i], "%s %s round %d drafter %d: %d drafts batched, %d alone", target, kind, r, i, nb[i], n);
            if (n != nb[i] || n < 0) { diff++; continue; }
            if (memcmp(db[i], ds[i], sizeof(int32_t) * (size_t)n)) diff++;
            if (bat[i]->provides_q && memcmp(qb[i], qs[i], sizeof(float) * (size_t)n * V)) diff++;
            drafted += n;
            /* the same commit for both: a random number accepted, random taps rows */
            int acc = n ? (int)(next_u32() % (uint32_t)(n + 1)) : 0;
            int32_t next = (int32_t)(next_u32() % (uint32_t)V);
            for (size_t k = 0; k < (size_t)(acc + 1) * tw; k++) taps[k] = next_f();
            if (quiet && i == 1 && r % 2 && bat[i]->extend) { /* plain rounds told at once (drafter.h extend) */
                int ne = 1 + r % 5;
                int32_t toks[8];
                for (int k = 0; k < ne; k++) toks[k] = (int32_t)(next_u32() % (uint32_t)V);
                float *et = malloc(sizeof(float) * (size_t)ne * tw);
                for (size_t k = 0; k < (size_t)ne * tw; k++) et[k] = next_f();
                CHECK(bat[i]->extend(bat[i], toks, ne, et, NULL, &err) == 0, "%s", err.msg);
                CHECK(solo[i]->extend(solo[i], toks, ne, et, NULL, &err) == 0, "%s", err.msg);
                free(et);
                continue;
            }
            CHECK(bat[i]->commit(bat[i], acc, next, taps, NULL, &err) == 0, "%s", err.msg);
            CHECK(solo[i]->commit(solo[i], acc, next, taps, NULL, &err) == 0, "%s", err.msg);
        }
        rounds++;
    }
    CHECK(diff == 0, "%s %s: %d proposals differ between batched and solo", target, kind, diff);
    CHECK(drafted > NS * 3, "%s %s: only %d drafts", target, kind, drafted);
    printf("  %-6s %-6s G=%d: %d rounds x %d drafters, %d drafts, batched == solo\n", target, kind, max_g, rounds, NS,
           drafted);
    free(taps);
    for (int i = 0; i < NS; i++) free(qb[i]), free(qs[i]);
done:
    for (int i = 0; i < NS; i++) sp_drafter_free(bat[i]), sp_drafter_free(solo[i]);
    sp_drafter_free(proto);
    sp_model_free(m);
}

static void test_batched_equals_solo(void) {
    for (int t = 0; t < 2; t++) {
        run_case(TARGETS[t], "dspark", 7);
        run_case(TARGETS[t], "zlab", 12); /* 6 blocks of 13 rows: more than one work group */
    }
}

static void test_mixed_checkpoints(void) {
    sp_model *m = fixture_load("qwen3");
    if (!m) { CHECK(0, "load"); return; }
    char a[256], b[256];
    drafter_dir(a, sizeof a, "qwen3", "dspark");
    drafter_dir(b, sizeof b, "qwen3", "zlab");
    sp_err err = {{0}};
    sp_sample_params g = sp_sample_params_default();
    sp_drafter *pa = sp_drafter_dflash(a, m, &g, NULL, &err), *pb = sp_drafter_dflash(b, m, &g, NULL, &err);
    sp_drafter *ca = pa ? sp_dflash_clone(pa, &g, &err) : NULL;
    CHECK(pa && pb && ca, "%s", err.msg);
    if (pa && pb && ca) {
        sp_drafter *ds[2] = {ca, pb};
        int mg[2] = {3, 3}, n[2];
        int32_t d0[8], d1[8];
        int32_t *dp[2] = {d0, d1};
        float *qp[2] = {NULL, NULL};
        err.msg[0] = 0;
        CHECK(ca->propose_batch(ds, 2, mg, dp, qp, n, &err) == -1 && strstr(err.msg, "checkpoint"),
              "mixed checkpoints: want an error, got \"%s\"", err.msg);
        /* a clone reads the prototype's weights in place */
        sp_dflash_info ia, ib;
        CHECK(sp_dflash_info_get(ca, &ia) == 0 && sp_dflash_info_get(pa, &ib) == 0 && ia.block_size == ib.block_size,
              "clone info");
        int D0, D1;
        CHECK(sp_dflash_rope_inv_freq(ca, 0, &D0) == sp_dflash_rope_inv_freq(pa, 0, &D1), "a clone copied its weights");
        CHECK(sp_dflash_clone(NULL, &g, &err) == NULL && strstr(err.msg, "not a DFlash"), "clone of NULL: \"%s\"",
              err.msg);
    }
    sp_drafter_free(ca);
    sp_drafter_free(pa);
    sp_drafter_free(pb);
    sp_model_free(m);
}

int main(void) {
    if (!mkdtemp(TMP) || make_drafters()) {
        printf("FAIL setup\n");
        return 1;
    }
    RUN(test_batched_equals_solo);
    RUN(test_mixed_checkpoints);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", TMP);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", TMP);
    return harness_done("test_dflash_batch");
}
