/* policy.h — how many drafts each round asks for: the never-slower-than-plain rule.
 *
 * Per request, the policy measures what speculation pays: the acceptance at each draft position
 * (recent rounds weigh most) against the measured cost of a plain round, of drafting, and of each
 * extra verified row. Each round it asks for the k in 0..g that maximises expected tokens per
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

typedef struct {
    int kind, G;
    int rounds;               /* rounds observed */
    /* costs: the median of the last SP_POLICY_WIN samples of each */
    double t_plain;           /* ms of a round without drafts (verify of one row, engine, commit) */
    double t_draft;           /* ms of drafting in a round with drafts (propose + commit) */
    double t_row;             /* ms each extra verified row adds */
    double t_v1;              /* ms of a one-row verify forward */
    int n_plain, n_spec, n_row;
    int since_plain;          /* rounds since the last plain round */
    int remeasure;            /* the next plain round restarts the plain windows */
    double w_plain[SP_POLICY_WIN], w_draft[SP_POLICY_WIN], w_row[SP_POLICY_WIN], w_v1[SP_POLICY_WIN];
    double drafted[SP_POLICY_MAX_G], accepted[SP_POLICY_MAX_G]; /* decayed counts per position */
    int off;                  /* drafting paused: plain rounds until the next probe */
    int wait, backoff;        /* rounds left before the next probe; the interval after a failed one */
    int probing;              /* the current round is a probe */
    double v_first;           /* verify ms of the first round with drafts, before a plain one was timed */
    int nd_first;
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

/* τ(k) / cost(k) for k drafts under the current estimates (tokens per ms); 0 when unknown. */
double sp_policy_rate(const sp_policy *s, int k);

#endif
