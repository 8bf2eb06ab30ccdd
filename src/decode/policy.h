/* policy.h — how many drafts each round asks for: the never-slower-than-plain rule.
 *
 * Per request, the policy measures what speculation pays: the acceptance at each draft position
 * (recent rounds weigh most) against the measured cost of a plain round and, per draft length, of
 * drafting and of the verify forward (a length not measured yet: a fitted model, with the drafter's
 * kind and, on a mixture-of-experts target, the expected distinct experts of its rows). Each round it asks for the k in 0..g that maximises expected tokens per
 * millisecond, τ(k) / cost(k); k = 0 is a plain decoding step. While k = 0 wins, drafting is off
 * and the drafter is only told what was committed; it is probed again with a short block after
 * an interval that doubles while probes keep failing. docs/ROUND_COST.md gives the rule and why
 * it stays lossless: k depends only on the past, never on the tokens being decided.
 *
 * SP_SPEC_POLICY_ALWAYS asks for g every round (the drafter still decides how many it returns). */
#ifndef SPECULA_SPEC_POLICY_H
#define SPECULA_SPEC_POLICY_H

#define SP_POLICY_MAX_G 32
#define SP_POLICY_WIN 8

typedef enum { SP_SPEC_POLICY_ALWAYS = 0, SP_SPEC_POLICY_ADAPTIVE = 1 } sp_spec_policy_kind;

/* why a round verified no drafts */
typedef enum {
    SP_NODRAFT_POLICY,  /* speculation did not pay: the policy asked for none */
    SP_NODRAFT_MEASURE, /* a plain round to time a plain step: the request's first, and a stale one
                         * timed afresh before drafting is switched off */
    SP_NODRAFT_ROOM,    /* no room: the last token of max_new or of the context, or too few
                         * tokens left for drafts to pay */
    SP_NODRAFT_DRAFTER, /* the drafter proposed none (or fewer than draft_min) */
    SP_NODRAFT_N
} sp_nodraft_reason;

const char *sp_nodraft_reason_name(int reason);

#define SP_POLICY_KWIN 4 /* samples kept per draft length */

typedef struct {
    int kind, G;
    int rounds;               /* rounds observed */
    /* costs (at load 1): the median of the last SP_POLICY_WIN samples of each */
    double t_plain;           /* ms of a round without drafts (verify of one row, engine, commit) */
    double t_v1;              /* ms of a one-row verify forward */
    int n_plain, n_spec;
    /* per length: verify ms of rounds that verified n drafts (index n = 1..G), drafting ms (propose +
     * commit) of rounds that asked for k (index k); the median of the last SP_POLICY_KWIN of each */
    double w_ver[SP_POLICY_MAX_G + 1][SP_POLICY_KWIN], w_drf[SP_POLICY_MAX_G + 1][SP_POLICY_KWIN];
    int n_ver[SP_POLICY_MAX_G + 1], n_drf[SP_POLICY_MAX_G + 1];
    double load;              /* recent observed / stored verify time (every sample is stored divided by it) */
    int step_cost;            /* 1: each draft runs its own drafter forward (drafting grows with k) */
    /* mixture-of-experts targets (n_experts 0: dense): experts per MoE layer, experts a token runs,
     * and the share of a one-row verify spent reading the experts it runs (the prior cost of one
     * more distinct expert); per row count r (index r = 1..G+1) the decayed mean of the distinct
     * experts an MoE layer ran in verifies of r rows, and its weight */
    int n_experts, n_used;
    double expert_share, ex_pool; /* ex_pool: the pool size fitted to the routing seen (pool_size_fit) */
    double ex_mean[SP_POLICY_MAX_G + 2], ex_w[SP_POLICY_MAX_G + 2];
    int since_plain;          /* rounds since the last plain round */
    int remeasure;            /* the next plain round restarts the plain windows */
    double w_plain[SP_POLICY_WIN], w_v1[SP_POLICY_WIN];
    double drafted[SP_POLICY_MAX_G], accepted[SP_POLICY_MAX_G]; /* decayed counts per position */
    int off;                  /* drafting paused: plain rounds until the next probe */
    int wait, backoff;        /* rounds left before the next probe; the interval after a failed one */
    int probing;              /* the current round is a probe */
    int exploring;            /* the current round tries a length never measured (its verify cost) */
} sp_policy;

/* A request's policy. from: NULL, or the state a previous request with the same drafter ended in
 * (sp_spec_params.policy_carry): its measurements and probe schedule continue. */
void sp_policy_begin(sp_policy *s, int kind, int G, const sp_policy *from);

/* Drafts to ask for this round given room for g (0..G); *reason is set when it returns 0 with
 * g > 0. */
int sp_policy_choose(sp_policy *s, int g, int *reason);

/* What the round did: k asked, nd drafts verified, acc accepted; ms spent drafting (propose +
 * commit), in the verify forward, and in the whole round. */
void sp_policy_observe(sp_policy *s, int k, int nd, int acc, double draft_ms, double verify_ms, double round_ms);
/* The same for a sampled round, with alpha[0..n_alpha) (n_alpha = min(acc + 1, nd)) the
 * acceptance probability Σ_v min(p, q) of each verified row: the acceptance counts then take
 * expected values instead of the 0/1 outcomes, whose variance at temperature > 0 would switch
 * drafting off after a few unlucky rounds (docs/ROUND_COST.md). */
void sp_policy_observe_sampled(sp_policy *s, int k, int nd, int acc, const double *alpha, int n_alpha,
                               double draft_ms, double verify_ms, double round_ms);

/* The drafter's cost model: step 1 when each draft runs a drafter forward of its own (a draft
 * model, EAGLE-3, the Gemma-4 assistant), 0 when one forward serves the block (DFlash / DSpark) or
 * there is no model (n-gram, suffix). It is the prior of how drafting time grows with k until two
 * lengths have been measured. Call after sp_policy_begin. */
void sp_policy_set_drafter(sp_policy *s, int step);
/* A mixture-of-experts target: n_experts per MoE layer, n_used per token, share (0..1) of a one-row
 * verify spent on the experts it runs. The verify cost of a length not measured yet then grows
 * with the expected distinct experts of its rows (docs/ROUND_COST.md). n_experts 0: dense. */
void sp_policy_set_moe(sp_policy *s, int n_experts, int n_used, double share);
/* A verify over `rows` rows ran a mean of `experts` distinct experts per MoE layer. */
void sp_policy_observe_experts(sp_policy *s, int rows, double experts);

/* The estimates the rate uses: ms of a verify forward with n drafts (n + 1 rows; n = 0 the one-row
 * verify), ms of drafting when k drafts are asked for (0 for k = 0), and the expected distinct
 * experts per MoE layer of a forward over r rows (0 on a dense target). */
double sp_policy_verify_ms(const sp_policy *s, int n);
double sp_policy_draft_ms(const sp_policy *s, int k);
double sp_policy_experts(const sp_policy *s, int rows);

/* τ(k) / cost(k) for k drafts under the current estimates (tokens per ms); 0 when unknown. */
double sp_policy_rate(const sp_policy *s, int k);

#endif
