/* policy.c — the never-slower-than-plain draft-length policy (see policy.h, docs/ROUND_COST.md). */
#include "decode/policy.h"

#include <string.h>

#define DECAY 0.9        /* per round with drafts: older acceptance counts fade (~10-round memory) */
#define MIN_SPEC 2       /* rounds with drafts measured before drafting may be switched off */
#define MIN_EVIDENCE 2.5 /* ... and this much (decayed) evidence at the first position: a probe that
                          * paid is followed by two more rounds before one unlucky round can end it */
#define PRIOR_N 1.0      /* pseudo-count pulling a position's estimate towards its extrapolation */
#define PROBE_K 4        /* drafts a probe asks for while drafting is off */
#define BACKOFF_FIRST 16 /* plain rounds before the first probe ... */
#define BACKOFF_MAX 256  /* ... doubling after each failed probe, up to this */
#define LONG_TOL 0.03    /* the longest block whose rate is within this fraction of the best wins */
#define PLAIN_STALE 16   /* rounds after which the plain step is measured again before switching off */

const char *sp_nodraft_reason_name(int reason) {
    static const char *names[SP_NODRAFT_N] = {"not paying", "measuring a plain step", "no room", "drafter proposed none"};
    return reason >= 0 && reason < SP_NODRAFT_N ? names[reason] : "?";
}

void sp_policy_begin(sp_policy *s, int kind, int G, const sp_policy *from) {
    if (from && from->kind == kind && from->G == (G < SP_POLICY_MAX_G ? G : SP_POLICY_MAX_G) && from->rounds > 0) {
        *s = *from; /* costs, acceptance, on / off and the probe schedule go on from the last request */
        s->probing = 0;
        return;
    }
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->G = G < SP_POLICY_MAX_G ? G : SP_POLICY_MAX_G;
    s->backoff = BACKOFF_FIRST;
}

/* Sample n of a cost into its window; *x = the window's median (the lower middle of an even
 * count). A cold first sample (first touch of the drafter's weights) or a round slowed by other
 * processes is outvoted; plain and drafted rounds see the same machine, so their medians compare. */
static void sample(double *x, double *w, int n, double v) {
    w[n % SP_POLICY_WIN] = v;
    int m = n + 1 < SP_POLICY_WIN ? n + 1 : SP_POLICY_WIN;
    double s[SP_POLICY_WIN] = {0};
    for (int i = 0; i < m; i++) {
        int j = i;
        for (; j > 0 && s[j - 1] > w[i]; j--) s[j] = s[j - 1];
        s[j] = w[i];
    }
    *x = s[(m - 1) / 2];
}

/* α_i: the chance that the first i+1 drafts are all accepted. Measured positions blend their
 * decayed counts with the extrapolation of the positions before (the last conditional rate
 * continued), so a position never drafted yet is neither free nor worthless. */
static void alphas(const sp_policy *s, double *a, int k) {
    double prev = 1, prev2 = 1;
    for (int i = 0; i < k; i++) {
        double ext = i == 0 ? 0.5 : prev * (prev2 > 0 ? prev / prev2 : 0);
        double v = (s->accepted[i] + PRIOR_N * ext) / (s->drafted[i] + PRIOR_N);
        if (v > prev) v = prev;
        a[i] = v;
        prev2 = prev;
        prev = v;
    }
}

double sp_policy_rate(const sp_policy *s, int k) {
    if (s->n_plain == 0 || s->t_plain <= 0) return 0;
    if (k <= 0) return 1.0 / s->t_plain;
    if (s->n_spec == 0) return 0;
    double a[SP_POLICY_MAX_G], tau = 1;
    if (k > s->G) k = s->G;
    alphas(s, a, k);
    for (int i = 0; i < k; i++) tau += a[i];
    double row = s->n_row ? s->t_row : 0;
    return tau / (s->t_plain + s->t_draft + row * k);
}

/* drafting off: the next probe after `backoff` plain rounds, the one after twice as many */
static void pause(sp_policy *s) {
    s->wait = s->backoff;
    s->backoff = s->backoff * 2 < BACKOFF_MAX ? s->backoff * 2 : BACKOFF_MAX;
}

/* The k in 0..g with the best rate; among the k > 0 within LONG_TOL of it, the longest. The rate
 * is flat near its maximum, and the estimates of late positions are pessimistic once they stop
 * being drafted (a position not drafted is never corrected): one unlucky early round would
 * otherwise shorten a strong drafter's blocks for many rounds. */
static int best_k(const sp_policy *s, int g) {
    int best = 0;
    double r[SP_POLICY_MAX_G + 1], br = sp_policy_rate(s, 0);
    for (int k = 1; k <= g; k++) {
        r[k] = sp_policy_rate(s, k);
        if (r[k] > br) br = r[k], best = k;
    }
    for (int k = g; k > best && best > 0; k--)
        if (r[k] >= (1 - LONG_TOL) * br) return k;
    return best;
}

int sp_policy_choose(sp_policy *s, int g, int *reason) {
    s->probing = 0;
    if (g > s->G) g = s->G;
    if (g <= 0) {
        *reason = SP_NODRAFT_ROOM;
        return 0;
    }
    if (s->kind == SP_SPEC_POLICY_ALWAYS || s->rounds == 0) return g; /* the first round measures drafting */
    if (s->n_plain == 0) {
        *reason = SP_NODRAFT_MEASURE;
        return 0;
    }
    if (s->off && s->wait > 0) {
        s->wait--;
        *reason = SP_NODRAFT_POLICY;
        return 0;
    }
    if (s->off) {
        s->probing = 1;
        return g < PROBE_K ? g : PROBE_K;
    }
    int k = best_k(s, g);
    if (k == 0 && g < s->G && best_k(s, s->G) > 0) {
        /* too little room left (the end of the request or the context) for drafts to pay; a
         * full block still would: drafting stays on for the next request */
        *reason = SP_NODRAFT_ROOM;
        return 0;
    }
    if (k == 0 && (s->n_spec < MIN_SPEC || s->drafted[0] < MIN_EVIDENCE))
        return g < PROBE_K ? g : PROBE_K; /* more measurement first */
    if (k == 0 && s->since_plain > PLAIN_STALE) {
        /* the plain step was timed long ago, perhaps on a quieter machine than the drafted rounds
         * now see: time it afresh before drafting is switched off on the comparison */
        s->remeasure = 1;
        *reason = SP_NODRAFT_MEASURE;
        return 0;
    }
    if (k == 0) {
        s->off = 1;
        pause(s);
        *reason = SP_NODRAFT_POLICY;
    }
    return k;
}

/* alpha NULL: the 0/1 outcomes (greedy, trees); else the expected ones (sp_policy_observe_sampled) */
static void observe(sp_policy *s, int k, int nd, int acc, const double *alpha, int n_alpha, double draft_ms,
                    double verify_ms, double round_ms) {
    s->rounds++;
    s->since_plain++;
    if (k == 0 && nd == 0) { /* a plain round */
        if (s->remeasure) s->n_plain = 0; /* the fresh time replaces the old window */
        s->remeasure = 0;
        s->since_plain = 0;
        sample(&s->t_plain, s->w_plain, s->n_plain, round_ms);
        sample(&s->t_v1, s->w_v1, s->n_plain, verify_ms);
        s->n_plain++;
        if (s->n_row == 0 && s->nd_first > 0) {
            double row = (s->v_first - s->t_v1) / s->nd_first;
            sample(&s->t_row, s->w_row, s->n_row++, row > 0 ? row : 0);
        }
    } else if (nd > 0) {
        sample(&s->t_draft, s->w_draft, s->n_spec++, draft_ms);
        double keep = s->probing ? 0 : DECAY; /* a probe measures afresh: the past said "off" */
        /* expected "first i+1 accepted": Π α_j over the verified rows, continued past the
         * rejected row by the conditional rates estimated so far */
        double ex[SP_POLICY_MAX_G], est[SP_POLICY_MAX_G];
        if (alpha) {
            int m = nd < s->G ? nd : s->G;
            alphas(s, est, m);
            double pr = 1;
            for (int i = 0; i < m; i++) {
                if (i < n_alpha) pr *= alpha[i] < 0 ? 0 : alpha[i] > 1 ? 1 : alpha[i];
                else pr *= i > 0 && est[i - 1] > 0 ? est[i] / est[i - 1] : est[i];
                ex[i] = pr;
            }
        }
        for (int i = 0; i < s->G; i++) s->drafted[i] *= keep, s->accepted[i] *= keep;
        for (int i = 0; i < nd && i < s->G; i++) {
            s->drafted[i] += 1;
            s->accepted[i] += alpha ? ex[i] : i < acc;
        }
        if (s->n_plain > 0) { /* what each verified row beyond the first costs */
            double row = (verify_ms - s->t_v1) / nd;
            sample(&s->t_row, s->w_row, s->n_row++, row > 0 ? row : 0);
        } else if (s->nd_first == 0) {
            s->v_first = verify_ms;
            s->nd_first = nd;
        }
    }
    if (!s->probing) return;
    if (best_k(s, s->G) > 0) { /* the probe paid: drafting back on */
        s->off = 0;
        s->backoff = BACKOFF_FIRST;
    } else {
        pause(s);
    }
}

void sp_policy_observe(sp_policy *s, int k, int nd, int acc, double draft_ms, double verify_ms, double round_ms) {
    observe(s, k, nd, acc, NULL, 0, draft_ms, verify_ms, round_ms);
}

void sp_policy_observe_sampled(sp_policy *s, int k, int nd, int acc, const double *alpha, int n_alpha,
                               double draft_ms, double verify_ms, double round_ms) {
    observe(s, k, nd, acc, alpha, n_alpha, draft_ms, verify_ms, round_ms);
}
