/* test_server_vlen.c — the server's verify-length chooser (src/server/vlen.c) on given cost
 * tables and acceptance profiles: no drafts when extra rows cost their full price, the full block
 * when they are nearly free, the batch optimum found (checked against every assignment of small
 * batches), the costs learned from observations, bad tables refused. */
#include "harness.h"
#include "server/vlen.h"

/* acceptance counts of a slot that accepted at least k drafts in a fraction a^k of 100 rounds */
static void profile(long *off, long *rch, double a) {
    double p = 1;
    off[0] = rch[0] = 0;
    for (int k = 1; k <= SP_SPEC_MAX_G; k++) {
        p *= a;
        off[k] = 100;
        rch[k] = (long)(100 * p + 0.5);
    }
}

/* a table of forward costs: fixed ms plus per-row ms (points 1, 2, 4 .. 64) */
static int table(srv_vlen *v, double fixed, double per_row, int n_rows) {
    int pts[7];
    double ms[7];
    for (int i = 0; i < 7; i++) pts[i] = 1 << i, ms[i] = fixed + per_row * pts[i];
    sp_err err = {{0}};
    return sp_srv_vlen_init_table(v, pts, ms, 7, n_rows, &err);
}

static double J_of(const srv_vlen *v, int n, const int *g, const long (*off)[SP_SPEC_MAX_G + 1],
                   const long (*rch)[SP_SPEC_MAX_G + 1], int base) {
    /* the chooser's own expected tokens: per-slot rates shrunk towards the (empty) server-wide
     * prior 0.8^k with weight 2, then towards it with weight 4 */
    double tok = 0;
    int rows = base, R = 0, S = 0;
    for (int i = 0; i < n; i++) {
        double p = 1, e = 1, prior = 1;
        for (int k = 1; k <= g[i]; k++) {
            prior *= 0.8;
            double pk = (v->reached[k] + 2.0 * prior) / (v->offered[k] + 2.0);
            pk = (rch[i][k] + 4.0 * pk) / (off[i][k] + 4.0);
            p = pk < p ? pk : p;
            e += p;
        }
        tok += e;
        rows += g[i] + 1, R += g[i], S += g[i] > 0;
    }
    return tok / (sp_srv_vlen_forward_ms(v, rows) - sp_srv_vlen_forward_ms(v, base) + sp_srv_vlen_draft_ms(v, S, R));
}

static void choose(const srv_vlen *v, int n, const int *room, const int *fixed, long (*off)[SP_SPEC_MAX_G + 1],
                   long (*rch)[SP_SPEC_MAX_G + 1], int base, int *g) {
    const long *o[16], *r[16];
    for (int i = 0; i < n; i++) o[i] = off[i], r[i] = rch[i];
    sp_srv_vlen_choose(v, n, room, fixed, o, r, NULL, NULL, base, g);
}

/* compute-bound forward (every row costs its full price): drafting cannot pay at 8 slots */
static void test_expensive_rows_choose_plain(void) {
    srv_vlen v;
    CHECK(table(&v, 0.05, 0.5, 128) == 0, "table");
    long off[8][SP_SPEC_MAX_G + 1], rch[8][SP_SPEC_MAX_G + 1];
    int room[8], fixed[8] = {0}, g[8];
    for (int i = 0; i < 8; i++) profile(off[i], rch[i], 0.9), room[i] = 7;
    choose(&v, 8, room, fixed, off, rch, 0, g);
    for (int i = 0; i < 8; i++) CHECK(g[i] == 0, "slot %d drafts %d with rows at full price", i, g[i]);
    sp_srv_vlen_free(&v);
}

/* memory-bound forward (rows nearly free) and cheap drafting: the full block, at 1 and 4 slots */
static void test_cheap_rows_choose_full(void) {
    srv_vlen v;
    CHECK(table(&v, 4.0, 0.01, 128) == 0, "table");
    long off[4][SP_SPEC_MAX_G + 1], rch[4][SP_SPEC_MAX_G + 1];
    int room[4], fixed[4] = {0}, g[4];
    for (int i = 0; i < 4; i++) profile(off[i], rch[i], 0.95), room[i] = 7;
    for (int n = 1; n <= 4; n += 3) {
        choose(&v, n, room, fixed, off, rch, 0, g);
        for (int i = 0; i < n; i++) CHECK(g[i] == 7, "%d slots: slot %d drafts %d of 7 with free rows", n, i, g[i]);
    }
    /* a slot that never accepts stays plain beside them */
    profile(off[2], rch[2], 0.0);
    choose(&v, 4, room, fixed, off, rch, 0, g);
    CHECK(g[0] == 7 && g[1] == 7 && g[3] == 7 && g[2] == 0, "g = %d %d %d %d", g[0], g[1], g[2], g[3]);
    sp_srv_vlen_free(&v);
}

static double rnd(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return (double)(*x >> 11) / 9007199254740992.0;
}

/* a dormant drafter's begin is a one-off cost spread over the request's rounds left: it rules
 * drafting out for a request about to end, not for one with many tokens to go */
static void test_wake_cost_spread(void) {
    srv_vlen v;
    CHECK(table(&v, 4.0, 0.01, 128) == 0, "table");
    v.c_ctx = 0.2; /* 400 context rows: 80 ms, twenty plain steps */
    long off[1][SP_SPEC_MAX_G + 1], rch[1][SP_SPEC_MAX_G + 1];
    profile(off[0], rch[0], 0.9);
    int room[1] = {7}, fixed[1] = {0}, g[1], wake[1] = {400}, left[1] = {8};
    const long *o[1] = {off[0]}, *r[1] = {rch[0]};
    sp_srv_vlen_choose(&v, 1, room, fixed, o, r, wake, left, 0, g);
    CHECK(g[0] == 0, "8 tokens left: drafts %d (the begin costs more than they save)", g[0]);
    left[0] = 4000;
    sp_srv_vlen_choose(&v, 1, room, fixed, o, r, wake, left, 0, g);
    CHECK(g[0] == 7, "4000 tokens left: drafts %d of 7", g[0]);
    wake[0] = 0, left[0] = 8;
    sp_srv_vlen_choose(&v, 1, room, fixed, o, r, wake, left, 0, g);
    CHECK(g[0] == 7, "begun drafter, 8 tokens left: drafts %d of 7", g[0]);
    sp_srv_vlen_free(&v);
}

/* the choice is the best of every assignment (up to the chooser's 0.1 % preference for fewer
 * drafts) on random tables, drafting costs and acceptance, with a fixed (sampled) slot */
static void test_batch_optimum_found(void) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
#define RND() rnd(&x)
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + trial % 3, room[3], fixed[3], g[3], u[3];
        srv_vlen v;
        CHECK(table(&v, 0.2 + 4 * RND(), 0.05 + 0.6 * RND(), 64) == 0, "table");
        v.c_slot = 2 * RND(), v.c_row = 0.3 * RND(), v.load = 0.5 + RND();
        long off[3][SP_SPEC_MAX_G + 1], rch[3][SP_SPEC_MAX_G + 1];
        for (int i = 0; i < n; i++) {
            profile(off[i], rch[i], RND());
            room[i] = (int)(RND() * 6);
            fixed[i] = i == 2 && trial % 2;
        }
        int base = trial % 5 ? 0 : 16;
        choose(&v, n, room, fixed, off, rch, base, g);
        double best = 0;
        for (int a = 0; a <= room[0]; a++)
            for (int b = 0; b <= (n > 1 ? room[1] : 0); b++)
                for (int c = 0; c <= (n > 2 ? room[2] : 0); c++) {
                    u[0] = a, u[1] = b, u[2] = c;
                    if (n > 2 && fixed[2] && c != room[2]) continue;
                    double j = J_of(&v, n, u, off, rch, base);
                    if (j > best) best = j;
                }
        double got = J_of(&v, n, g, off, rch, base);
        for (int i = 0; i < n; i++) CHECK(g[i] >= 0 && g[i] <= room[i], "trial %d slot %d: g %d room %d", trial, i, g[i], room[i]);
        if (n > 2 && fixed[2]) CHECK(g[2] == room[2], "trial %d: fixed slot g %d room %d", trial, g[2], room[2]);
        CHECK(got >= best / 1.0011, "trial %d (%d slots): J %.6f, best %.6f", trial, n, got, best);
        sp_srv_vlen_free(&v);
    }
#undef RND
}

/* observations move the model: a forward of 16+ rows three times slower than its table, a fast
 * single row; drafting that costs 0.5 ms per slot and 0.1 ms per row */
static void test_costs_learned(void) {
    srv_vlen v;
    CHECK(table(&v, 1.0, 0.1, 128) == 0, "table");
    double t1 = sp_srv_vlen_forward_ms(&v, 1), t32 = sp_srv_vlen_forward_ms(&v, 32);
    for (int k = 0; k < 300; k++) {
        sp_srv_vlen_observe_forward(&v, 1, t1);
        sp_srv_vlen_observe_forward(&v, 32, 3 * t32);
    }
    double r1 = sp_srv_vlen_forward_ms(&v, 1) / t1, r32 = sp_srv_vlen_forward_ms(&v, 32) / t32;
    CHECK(r1 < 1.6, "1 row: model %.2f x its table, observed 1 x", r1);
    CHECK(r32 > 2.5 && r32 < 3.2, "32 rows: model %.2f x its table, observed 3 x", r32);
    /* more rows are never cheaper, even when a smaller row count was observed slower */
    for (int k = 0; k < 300; k++) {
        sp_srv_vlen_observe_forward(&v, 8, 5 * t32);
        sp_srv_vlen_observe_forward(&v, 32, t32);
    }
    for (int r = 2; r <= 128; r++)
        CHECK(sp_srv_vlen_forward_ms(&v, r) >= sp_srv_vlen_forward_ms(&v, r - 1), "%d rows %.3f ms < %d rows %.3f ms", r,
              sp_srv_vlen_forward_ms(&v, r), r - 1, sp_srv_vlen_forward_ms(&v, r - 1));
    double load = v.load;
    for (int k = 0; k < 200; k++) {
        int S = 1 + k % 8, R = S * (1 + k % 5);
        sp_srv_vlen_observe_draft(&v, S, R, load * (0.5 * S + 0.1 * R));
    }
    CHECK(fabs(v.c_slot - 0.5) < 0.02 && fabs(v.c_row - 0.1) < 0.01, "fit c_slot %.3f c_row %.3f, expected 0.5 0.1",
          v.c_slot, v.c_row);
    CHECK(fabs(sp_srv_vlen_draft_ms(&v, 4, 20) - load * 4.0) < 0.1 * load, "draft ms %.3f", sp_srv_vlen_draft_ms(&v, 4, 20));
    CHECK(sp_srv_vlen_draft_ms(&v, 0, 0) == 0, "no drafting costs nothing");
    sp_srv_vlen_free(&v);
    /* one cold proposal 50 times its cost counts as at most 3 times it, and while nothing drafts the
     * estimate returns to the prior (so drafting is measured again) */
    CHECK(table(&v, 1.0, 0.1, 128) == 0, "table");
    double prior = sp_srv_vlen_draft_ms(&v, 1, 7);
    sp_srv_vlen_observe_draft(&v, 1, 7, 50 * prior);
    double cold = sp_srv_vlen_draft_ms(&v, 1, 7);
    CHECK(cold > 1.2 * prior && cold <= 3 * prior, "after a cold proposal: %.3f ms, prior %.3f", cold, prior);
    for (int k = 0; k < 1000; k++) sp_srv_vlen_observe_forward(&v, 8, sp_srv_vlen_forward_ms(&v, 8));
    double later = sp_srv_vlen_draft_ms(&v, 1, 7);
    CHECK(fabs(later - prior) < 0.05 * prior, "1000 plain steps later: %.3f ms, prior %.3f", later, prior);
    sp_srv_vlen_free(&v);
}

static void test_bad_table_refused(void) {
    srv_vlen v;
    sp_err err = {{0}};
    int pts[3] = {1, 4, 2};
    double ms[3] = {1, 2, 3};
    CHECK(sp_srv_vlen_init_table(&v, pts, ms, 3, 64, &err) == -1 && strstr(err.msg, "point 2"), "unordered: %s", err.msg);
    pts[2] = 8, ms[1] = -1;
    CHECK(sp_srv_vlen_init_table(&v, pts, ms, 3, 64, &err) == -1 && strstr(err.msg, "positive"), "negative: %s", err.msg);
    CHECK(sp_srv_vlen_init_table(&v, pts, ms, 0, 64, &err) == -1, "no points");
    CHECK(v.fwd == NULL, "nothing allocated");
}

int main(void) {
    RUN(test_expensive_rows_choose_plain);
    RUN(test_cheap_rows_choose_full);
    RUN(test_wake_cost_spread);
    RUN(test_batch_optimum_found);
    RUN(test_costs_learned);
    RUN(test_bad_table_refused);
    return harness_done("test_server_vlen");
}
