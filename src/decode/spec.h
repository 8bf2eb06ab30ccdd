/* spec.h — the draft → verify → accept loop (speculative decoding), lossless in both modes.
 *
 * Greedy (temperature 0): the longest prefix of drafts equal to the target's argmax is kept, then
 * the target's own token (the correction at the first mismatch, or the bonus after a full
 * accept). Because the target forward is batch-invariant, the output is bit-identical to plain
 * greedy generation.
 * Sampling: draft x_i is accepted with probability min(1, p(x_i)/q(x_i)); on rejection the token
 * is drawn from normalize(max(0, p − q)); after a full accept the bonus is drawn from p. p and q
 * go through the same sample params (temperature, top-k, top-p, min-p) and the same repetition
 * penalties, whose sequence at draft i holds the drafts before it (penalty.h). A drafter without q is
 * treated as one-hot q. The emitted distribution is exactly the target's.
 *
 * Randomness is counter-based: the decision about the token at absolute position t uses
 * (seed, stream, t) with the streams of sample.h, so runs reproduce whatever the thread count. */
#ifndef SPECULA_SPEC_H
#define SPECULA_SPEC_H

#include "core/prof.h"
#include "decode/drafter.h"
#include "decode/generate.h"
#include "decode/policy.h"
#include "sample/grammar.h"

#define SP_SPEC_MAX_G 32

/* Synthetic acceptance, for benchmarks only (docs/SYNTHETIC.md): the round accepts draft i with
 * the chance p[i] once draft i - 1 was accepted (i.i.d. when every entry is the same), drawn from
 * (seed, SP_RNG_STREAM_SYNTH, absolute position), instead of comparing it with the target. The
 * drafter and the verify forward run as in a real round, so every cost is real; the accepted
 * drafts are the drafter's own tokens, so the output is NOT the target's (not lossless). No
 * default turns it on: a caller sets sp_spec_params.synth (and the server's srv_opts.synth). */
typedef struct {
    int n;                 /* entries of p, 1 .. SP_SPEC_MAX_G; positions past n use p[n - 1] */
    float p[SP_SPEC_MAX_G]; /* in [0, 1] */
    uint64_t seed;         /* mixed with the request's sampling seed */
} sp_synth;

/* 0 when s is a valid synthetic profile, else -1 with err naming the bad entry. */
int sp_synth_check(const sp_synth *s, sp_err *err);
/* Expected tokens per verify forward with k drafts under s: Σ_{j=0..k} Π_{i<j} p[i]. */
double sp_synth_tau(const sp_synth *s, int k);

typedef struct {
    sp_gen_params gen;   /* max_new, ignore_eos, sample params, callback, prefill chunk, max_ctx */
    int draft_max;       /* G: most drafts per round (1 .. SP_SPEC_MAX_G) */
    int draft_min;       /* fewer proposed drafts than this → verify none of them (plain step) */
    sp_tree_shape tree;  /* tree.nodes > 0: token trees of at most tree.nodes nodes and draft_max levels
                            (tree.c, docs/TREE.md; the drafter must have propose_tree); 0: chains */
    /* test hook: break the residual rule (sample the correction from p instead of p − q) so the
     * audit can prove it detects a lossy verifier. Never set outside tests / audit --broken. */
    int broken_residual;
    /* SP_SPEC_POLICY_ALWAYS (0, the default here): ask the drafter for draft_max every round.
     * SP_SPEC_POLICY_ADAPTIVE: the never-slower policy of policy.h (the CLI's default). */
    int policy;
    /* NULL, or state the adaptive policy starts from and is saved to at the end: requests in
     * a row with one drafter share what was measured (run, bench-spec) */
    sp_policy *policy_carry;
    int profile; /* 1: fill stats.prof with the round-cost profile (core/prof.h) */
    /* calibration hook, sampling chains only (NULL: none): the processed target probs p[V] of the
     * row that verifies draft i (0-based) of the round, before its accept test (calibrate) */
    void (*on_verify)(void *ctx, int i, const float *p, int V);
    void *on_verify_ctx;
    /* NULL, or the grammar the output follows and the token bytes of the model's vocabulary (both
     * borrowed; round.h: masked rows and drafts, forced drafts, chains only) */
    const sp_grammar *grammar;
    const sp_gvocab *gvocab;
    /* NULL (the default), or synthetic acceptance: benchmarks only, not lossless (above; chains only) */
    const sp_synth *synth;
} sp_spec_params;

sp_spec_params sp_spec_params_default(void);

typedef struct {
    int prompt_tokens, emitted;
    int drafted, accepted, target_calls;
    double acceptance_rate;  /* accepted / drafted */
    double mean_accept_len;  /* τ: tokens emitted per verify forward, counting the bonus */
    int n_pos;               /* = draft_max */
    int pos_drafted[SP_SPEC_MAX_G], pos_accepted[SP_SPEC_MAX_G];
    double accept_per_position[SP_SPEC_MAX_G]; /* accepted / drafted at draft index k */
    int verify_len_hist[SP_SPEC_MAX_G + 1];    /* rounds by number of drafts verified (the chosen length) */
    /* prefill_ms: up to the first emitted token, as plain decoding's (the prompt but its last
     * token, then the first round); decode_ms: from the end of that prompt forward to the end */
    double prefill_ms, decode_ms, decode_tps, draft_ms, verify_ms;
    int rounds;                             /* target forwards of the decode (= target_calls) */
    int rounds_nodraft[SP_NODRAFT_N];       /* rounds that verified no drafts, by reason */
    sp_prof_totals prof;                    /* params.profile: ms by (phase, part) over the decode */
    sp_stop_reason stop;
    int forced;                             /* drafts the grammar forced (no drafter call) */
    int cut;                                /* drafts dropped because the grammar forbids them */
    int from_forced, from_drafter, from_target; /* emitted tokens by source (sp_round_result) */
} sp_spec_stats;

/* Speculative generation after prompt[0, n_prompt) with drafter d (NULL: plain decoding through
 * the same loop, one token per target forward). Writes up to p->gen.max_new tokens to out.
 * Returns 0, or -1 with err. The drafter is begun by this call. */
int sp_spec_generate(sp_model *m, sp_drafter *d, const int32_t *prompt, int n_prompt, const sp_spec_params *p,
                     int32_t *out, int out_cap, sp_spec_stats *stats, sp_err *err);

/* The verification rule for one position, shared by the loop, the audit and its self-test:
 * given processed target probs p[V], draft token x with draft probs q[V] (NULL = one-hot at x),
 * and two uniforms, returns x when accepted, else the corrected token drawn with u_res.
 * *accepted tells which. broken: use p instead of the residual (test hook). p is used as scratch
 * (one entry zeroed and restored) when q is one-hot. */
int sp_spec_verify_one(float *p, const float *q, int V, int32_t x, double u_acc, double u_res, int broken,
                       int *accepted);

#endif
