/* bench_dflash.c — cost of one DFlash / DSpark draft block relative to one target decode step.
 *
 *   make && cc -O2 -Iinclude -Isrc bench/bench_dflash.c build/libspecula.a -ljansson -lpcre2-8 -lutf8proc -lm \
 *        -pthread -o build/bench_dflash
 *   build/bench_dflash TARGET_DIR DRAFTER_DIR [threads=2] [tokens=24] [block=7]
 *
 * Greedy plain decoding gives the decode step; greedy speculative decoding with the drafter gives
 * the time per proposal split into block forward, heads (Markov + confidence + sampling) and
 * context injection (the taps of committed rows). Random weights accept nothing, so every round
 * is one proposal of `block` drafts. Prints the ratios; the aim is block <= 0.3.
 *
 * Then the verify-length policies on a synthetic, calibrated confidence stream (c_j = σ(2 − 0.35 j + n),
 * n ~ N(0, 1); acceptance drawn from the c's) with this machine's SPS table: mean verified length
 * and tokens per second of the full block, static thresholds and the docs/DSPARK.md §10 scheduler. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "drafters/dflash.h"
#include "decode/generate.h"
#include "decode/schedule.h"
#include "decode/spec.h"

/* expected throughput of a policy over R synthetic rounds: Σ accepted+1 / Σ (verify + draft time) */
static void policy_row(const char *name, const sp_sps_table *t, double draft_s, double thr, int sched, int B) {
    double tok = 0, sec = 0, len = 0;
    int R = 20000;
    for (int r = 0; r < R; r++) {
        double c[64];
        for (int j = 0; j < B; j++)
            c[j] = 1.0 / (1.0 + exp(-(2.0 - 0.35 * (j + 1) + sp_rng_normal(9, (uint64_t)r, (uint64_t)j))));
        int l = B;
        if (sched) {
            sp_sched s;
            sp_sched_begin(&s, t);
            l = 0;
            while (l < B && sp_sched_admit(&s, c[l])) l++;
        } else if (thr > 0) {
            l = 0;
            while (l < B && c[l] >= thr) l++;
        }
        int acc = 0;
        while (acc < l && sp_rng_uniform(10, (uint64_t)r, (uint64_t)acc) < c[acc]) acc++;
        tok += acc + 1;
        sec += 1.0 / sp_sps_at(t, l + 1) + draft_s;
        len += l;
    }
    printf("  %-18s mean verified %.2f  tokens/verify %.2f  tokens/s %.3f\n", name, len / R, tok / R, tok / sec);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TARGET_DIR DRAFTER_DIR [threads] [tokens] [block]\n", argv[0]);
        return 2;
    }
    int threads = argc > 3 ? atoi(argv[3]) : 2, n = argc > 4 ? atoi(argv[4]) : 24, B = argc > 5 ? atoi(argv[5]) : 7;
    sp_err err = {{0}};
    sp_model *m;
    if (sp_model_load(&m, argv[1], threads, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    int V = sp_model_config(m)->vocab_size;
    int32_t prompt[64], *out = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    sp_gen_params gp = sp_gen_params_default();
    gp.max_new = n;
    gp.ignore_eos = 1;
    sp_gen_stats gs;
    if (sp_generate(m, NULL, prompt, 64, &gp, out, n, &gs, &err)) return fprintf(stderr, "%s\n", err.msg), 1; /* warm */
    if (sp_generate(m, NULL, prompt, 64, &gp, out, n, &gs, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    double step = gs.decode_ms / gs.emitted;
    sp_dflash_opts o = sp_dflash_opts_default();
    o.max_drafts = B;
    sp_drafter *d = sp_drafter_dflash(argv[2], m, &gp.sample, &o, &err);
    if (!d) return fprintf(stderr, "%s\n", err.msg), 1;
    sp_spec_params sp = sp_spec_params_default();
    sp.gen = gp;
    sp.draft_max = B;
    sp_spec_stats st;
    if (sp_spec_generate(m, d, prompt, 64, &sp, out, n, &st, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    sp_dflash_info in;
    sp_dflash_info_get(d, &in);
    double np = (double)in.proposals, blk = in.ms_block / np, hd = in.ms_heads / np, ctx = in.ms_inject / np;
    printf("target decode step      %8.2f ms   (%d threads, %d tokens)\n", step, threads, gs.emitted);
    printf("draft block (B=%d)       %8.2f ms   = %.3f x decode step\n", B, blk + hd, (blk + hd) / step);
    printf("  block forward         %8.2f ms   = %.3f\n", blk, blk / step);
    printf("  heads + sampling      %8.2f ms   = %.3f\n", hd, hd / step);
    printf("context injection/round %8.2f ms   = %.3f\n", ctx, ctx / step);
    printf("verify of %d tokens      %8.2f ms   = %.3f\n", B + 1, st.verify_ms / st.target_calls,
           st.verify_ms / st.target_calls / step);
    sp_sps_table t;
    if (sp_sps_profile(m, B + 1, 3, &t, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    printf("SPS (verify forwards/s by width):");
    for (int b = 1; b <= t.n; b++) printf(" %d:%.2f", b, t.sps[b]);
    printf("\nverify-length policies on a synthetic calibrated confidence stream (B=%d):\n", B);
    double ds = (blk + hd) / 1000.0;
    policy_row("full block", &t, ds, 0, 0, B);
    policy_row("threshold 0.3", &t, ds, 0.3, 0, B);
    policy_row("threshold 0.5", &t, ds, 0.5, 0, B);
    policy_row("threshold 0.7", &t, ds, 0.7, 0, B);
    policy_row("scheduler (8.10)", &t, ds, 0, 1, B);
    sp_drafter_free(d);
    sp_model_free(m);
    free(out);
    return 0;
}
