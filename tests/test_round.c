/* test_round.c — the round-cost profile (core/prof.h), the never-slower policy (decode/policy.h)
 * and their reports in `specula run --json`:
 * - the profiler's cells partition the wall time, and a kernel hook never relabels a drafter's part;
 * - the policy on synthetic rounds: a drafter that pays keeps its full block, one that does not is
 *   switched off and probed at doubling intervals, and a good probe switches it back on; a strong
 *   drafter keeps its full block through an unlucky first round and a burst of load;
 * - `run --json --spec-always` on a random DSpark drafter: the profile's parts add up to the
 *   measured round within 5% and carry the draft / verify / engine fields;
 * - `run --json` under the default policy with the same untrained drafter: output identical to
 *   plain, and most rounds verify no drafts (the bound is derived in the case). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "core/prof.h"
#include "harness.h"
#include "decode/policy.h"

static char cli[4096], dir[64] = "/tmp/specula-round-XXXXXX";
static const char *TARGET = "tests/data/ref-logits/qwen3";

static void spin_ms(double ms) {
    double t0 = sp_time_ms();
    while (sp_time_ms() - t0 < ms) {
    }
}

static void test_prof_cells(void) {
    sp_prof_start();
    double t0 = sp_prof_tls.t; /* the clock reading the cells start from */
    spin_ms(2);                                      /* engine.other */
    int ph = sp_prof_phase_enter(SP_PROF_DRAFT);
    int a = sp_prof_enter(SP_PROF_HEADS);
    int k = sp_prof_enter_kernel(SP_PROF_MATMUL);    /* inside heads: stays heads */
    CHECK(k == -1 && sp_prof_tls.part == SP_PROF_HEADS, "a kernel hook relabelled heads as %d", sp_prof_tls.part);
    spin_ms(3);
    sp_prof_leave(k);
    sp_prof_leave(a);
    k = sp_prof_enter_kernel(SP_PROF_MATMUL);        /* draft.other → draft.matmul */
    spin_ms(1);
    sp_prof_leave(k);
    sp_prof_phase_leave(ph);
    spin_ms(1);                                      /* engine.other again */
    sp_prof_totals t = {{{0}}};
    sp_prof_stop(&t);
    double wall = sp_prof_tls.t - t0, sum = sp_prof_total_ms(&t); /* stop's last clock reading */
    CHECK(fabs(sum - wall) < 1e-6 * (1 + wall), "cells %.6f ms, wall %.6f ms", sum, wall);
    /* lower bounds only: a loaded machine may deschedule the spin, never shorten it */
    CHECK(t.ms[SP_PROF_DRAFT][SP_PROF_HEADS] >= 3, "heads %.3f", t.ms[SP_PROF_DRAFT][SP_PROF_HEADS]);
    CHECK(t.ms[SP_PROF_DRAFT][SP_PROF_MATMUL] >= 1, "matmul %.3f", t.ms[SP_PROF_DRAFT][SP_PROF_MATMUL]);
    CHECK(t.ms[SP_PROF_ENGINE][SP_PROF_OTHER] >= 3, "engine %.3f", t.ms[SP_PROF_ENGINE][SP_PROF_OTHER]);
    /* off: hooks are no-ops and nothing is charged */
    CHECK(sp_prof_enter(SP_PROF_BLOCK) == -1 && sp_prof_phase_enter(SP_PROF_VERIFY) == -1, "hooks active when off");
}

/* one synthetic round: k asked (the policy's choice), acceptance decided by `acc_of` */
static int policy_round(sp_policy *p, int g, int acc_all, int *reason) {
    int k = sp_policy_choose(p, g, reason);
    int acc = acc_all ? k : 0;
    /* costs: plain round 1.0 ms (verify 0.9); drafting 0.5 ms; each extra verified row 0.05 ms */
    if (k == 0) sp_policy_observe(p, 0, 0, 0, 0, 0.9, 1.0);
    else sp_policy_observe(p, k, k, acc, 0.5, 0.9 + 0.05 * k, 1.5 + 0.05 * k);
    return k;
}

static void test_policy_unit(void) {
    sp_policy p;
    int why = -1, G = 7;
    /* a drafter whose drafts are all accepted: round 0 drafts, round 1 measures, then full blocks */
    sp_policy_begin(&p, SP_SPEC_POLICY_ADAPTIVE, G, NULL);
    CHECK(policy_round(&p, G, 1, &why) == G, "first round must draft");
    CHECK(policy_round(&p, G, 1, &why) == 0 && why == SP_NODRAFT_MEASURE, "second round measures (%d)", why);
    int full = 0;
    for (int r = 0; r < 30; r++) full += policy_round(&p, G, 1, &why) == G;
    CHECK(full == 30, "a paying drafter keeps its block (%d of 30 full)", full);
    CHECK(sp_policy_rate(&p, G) > 3 * sp_policy_rate(&p, 0), "rate %g vs plain %g", sp_policy_rate(&p, G),
          sp_policy_rate(&p, 0));
    /* the same drafter turning useless: off within a few rounds (after one plain round timing a
     * plain step afresh: the last was timed 30 rounds ago), then probes at doubling intervals */
    int first_off = -1, probes[8], np = 0, off_rounds = 0, remeasured = 0;
    for (int r = 0; r < 200; r++) {
        why = -1;
        int k = policy_round(&p, G, 0, &why);
        if (k == 0 && why == SP_NODRAFT_MEASURE && first_off < 0 && !remeasured) {
            remeasured = 1;
            continue;
        }
        if (k == 0) {
            CHECK(why == SP_NODRAFT_POLICY, "round %d: reason %d", r, why);
            off_rounds++;
            if (first_off < 0) first_off = r;
        } else if (first_off >= 0 && np < 8) {
            probes[np++] = r;
            CHECK(k <= 4, "a probe asks for %d drafts", k);
        }
    }
    CHECK(remeasured && first_off >= 0 && first_off <= 24, "switched off after %d rounds (plain step timed afresh: %d)",
          first_off, remeasured);
    CHECK(np >= 2 && probes[1] - probes[0] > 16, "probes at %d, %d: the interval must grow", np > 0 ? probes[0] : -1,
          np > 1 ? probes[1] : -1);
    CHECK(off_rounds >= 170, "%d of 200 rounds without drafts", off_rounds);
    /* the drafter good again: the next probe switches drafting back on */
    int back = -1;
    for (int r = 0; r < 300 && back < 0; r++)
        if (policy_round(&p, G, 1, &why) > 0 && policy_round(&p, G, 1, &why) > 0) back = r;
    CHECK(back >= 0, "drafting never came back after a good probe");
    /* always: every round asks for g; no room: reason ROOM */
    sp_policy_begin(&p, SP_SPEC_POLICY_ALWAYS, G, NULL);
    for (int r = 0; r < 10; r++) CHECK(policy_round(&p, G, 0, &why) == G, "always: round %d", r);
    CHECK(sp_policy_choose(&p, 0, &why) == 0 && why == SP_NODRAFT_ROOM, "no room: reason %d", why);
}

/* A strong drafter (about 5.5 of 7 drafts accepted, rejections at any position) whose first
 * round is unlucky (3 accepted), and whose rounds 30..44 meet a load that makes every cost 2.5
 * times as long, plain rounds included. Each rate is τ(k) / cost(k) with, unloaded, a plain
 * round of 2.0 ms, drafting 1.4 ms and 0.3 ms per verified row: the full block (τ ≈ 6.5 in 5.5
 * ms) pays 3× a plain step, and 7 drafts beat 4 by ~20%, so every round shorter than 7 after
 * the first few (while the unlucky start is outvoted) is a round shortened without cause. */
static void test_policy_strong_drafter(void) {
    static const int acc_seq[] = {7, 7, 5, 7, 6, 7, 4, 7, 7, 2, 7, 6, 7, 7, 5, 7};
    int G = 7, why, short_late = 0, off = 0, measure = 0, n = (int)(sizeof acc_seq / sizeof *acc_seq);
    sp_policy p;
    sp_policy_begin(&p, SP_SPEC_POLICY_ADAPTIVE, G, NULL);
    for (int r = 0; r < 80; r++) {
        double load = r >= 30 && r < 45 ? 2.5 : 1.0;
        why = -1;
        int k = sp_policy_choose(&p, G, &why);
        if (k == 0) {
            sp_policy_observe(&p, 0, 0, 0, 0, 1.8 * load, 2.0 * load);
            off += why == SP_NODRAFT_POLICY;
            measure += why == SP_NODRAFT_MEASURE;
            continue;
        }
        int acc = r == 0 ? 3 : acc_seq[r % n];
        if (acc > k) acc = k;
        sp_policy_observe(&p, k, k, acc, 1.4 * load, (1.8 + 0.3 * k) * load, (3.4 + 0.3 * k) * load);
        short_late += r >= 8 && k < G;
    }
    CHECK(off == 0, "a paying drafter switched off for %d rounds", off);
    CHECK(measure <= 2, "%d plain measuring rounds", measure);
    CHECK(short_late <= 3, "%d rounds after the 8th asked for fewer than %d drafts", short_late, G);
    /* the end of a request: one token of room, where a draft (drafting 2.4 ms here) costs more
     * than it brings; a plain round for lack of room, and the next request drafts again */
    sp_policy_begin(&p, SP_SPEC_POLICY_ADAPTIVE, G, NULL);
    for (int r = 0; r < 20; r++) {
        int k = sp_policy_choose(&p, G, &why);
        if (k == 0) sp_policy_observe(&p, 0, 0, 0, 0, 1.8, 2.0);
        else sp_policy_observe(&p, k, k, acc_seq[r % n] < k ? acc_seq[r % n] : k, 2.4, 1.8 + 0.3 * k, 4.4 + 0.3 * k);
    }
    why = -1;
    int k_end = sp_policy_choose(&p, 1, &why);
    CHECK(k_end == 0 && why == SP_NODRAFT_ROOM, "one token of room: %d drafts, reason %d", k_end, why);
    sp_policy_observe(&p, 0, 0, 0, 0, 1.8, 2.0);
    sp_policy next;
    sp_policy_begin(&next, SP_SPEC_POLICY_ADAPTIVE, G, &p);
    CHECK(sp_policy_choose(&next, G, &why) == G, "the next request does not draft (reason %d)", why);
}

static char drafter[256], prompts[256];

static int setup(void) {
    if (!mkdtemp(dir)) return -1;
    snprintf(drafter, sizeof drafter, "%s/dspark", dir);
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", dir);
    FILE *f = fopen(prompts, "w");
    if (!f) return -1;
    fprintf(f, "{\"prompt_ids\": [1, 2, 3, 4, 5, 6, 7, 8]}\n{\"prompt_ids\": [9, 8, 7, 6]}\n");
    fclose(f);
    char cmd[8192], out[4096];
    snprintf(cmd, sizeof cmd, "%s new-drafter --arch dspark -m %s --seed 5 -o %s 2>&1", cli, TARGET, drafter);
    return harness_run(cmd, out, sizeof out) == 0 ? 0 : -1;
}

static json_t *run_json(const char *extra) {
    static char out[1 << 16];
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s run -m %s --spec dspark -md %s --prompts %s -n 48 -t 2 -q --json %s 2>/dev/null", cli,
             TARGET, drafter, prompts, extra);
    if (harness_run(cmd, out, sizeof out) != 0) {
        fprintf(stderr, "  run failed: %s\n", out);
        return NULL;
    }
    return json_loads(out, 0, NULL);
}

static double num(json_t *o, const char *key) {
    return json_number_value(json_object_get(o, key));
}

static void test_profile_run(void) {
    json_t *r = run_json("--spec-always");
    CHECK(r != NULL, "no JSON");
    if (!r) return;
    json_t *pf = json_object_get(r, "profile"), *parts = json_object_get(pf, "parts");
    CHECK(json_is_object(pf) && json_is_object(parts), "no profile object");
    double sum = num(pf, "sum"), round = num(pf, "round");
    CHECK(round > 0 && fabs(sum - round) <= 0.05 * round, "parts add up to %.4f of a plain step, the round to %.4f", sum,
          round);
    double phases = num(pf, "draft") + num(pf, "verify") + num(pf, "engine");
    CHECK(fabs(phases - sum) <= 1e-6 * (1 + sum), "phases %.6f vs sum %.6f", phases, sum);
    const char *need[] = {"draft.ctx_kv", "draft.block", "draft.heads", "draft.lm_head", "verify.matmul",
                          "verify.attn", "verify.lm_head", "verify.sample", "engine.other"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        CHECK(num(parts, need[i]) > 0, "profile part %s missing or zero", need[i]);
    CHECK(num(pf, "plain_step_ms") > 0 && num(pf, "rounds") > 0, "plain step / rounds missing");
    json_t *pp = json_object_get(r, "plain_profile");
    CHECK(fabs(num(pp, "round") - 1) < 0.05 && num(json_object_get(pp, "parts"), "verify.matmul") > 0,
          "plain profile: round %.3f", num(pp, "round"));
    CHECK(!strcmp(json_string_value(json_object_get(r, "policy")), "always"), "policy field");
    printf("  profile (plain steps per round): draft %.3f verify %.3f engine %.3f = %.3f (measured %.3f)\n",
           num(pf, "draft"), num(pf, "verify"), num(pf, "engine"), sum, round);
    json_decref(r);
}

static void test_policy_random_drafter(void) {
    json_t *r = run_json("");
    CHECK(r != NULL, "no JSON");
    if (!r) return;
    CHECK(json_is_true(json_object_get(r, "identical")), "output differs from plain decoding");
    long rounds = (long)num(r, "rounds");
    json_t *nd = json_object_get(r, "rounds_without_drafts");
    long off = (long)num(nd, "total"), policy = (long)num(nd, "not paying");
    /* two prompts of 48 tokens (~96 rounds: an untrained drafter is almost never accepted), the
     * policy carried from the first to the second: round 0 drafts, round 1 is the one plain
     * measurement, round 2 drafts once more (two rounds with drafts before switching off), then
     * probes after 16, 32 and 64 plain rounds: about 6 rounds with drafts, so ≥ 75% is a wide
     * margin that still fails if drafting is never switched off or switched back on for good */
    CHECK(rounds > 0 && off >= 0.75 * rounds && policy > 0, "%ld of %ld rounds without drafts (%ld not paying)", off,
          rounds, policy);
    printf("  untrained drafter, default policy: %ld of %ld rounds without drafts, speed %.3fx plain (not asserted)\n",
           off, rounds, num(r, "speedup"));
    json_decref(r);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    RUN(test_prof_cells);
    RUN(test_policy_unit);
    RUN(test_policy_strong_drafter);
    int ok = setup() == 0;
    if (!ok) printf("FAIL setup (new-drafter in %s)\n", dir);
    if (ok) {
        RUN(test_profile_run);
        RUN(test_policy_random_drafter);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("  could not remove %s\n", dir);
    return harness_done("test_round") || !ok;
}
