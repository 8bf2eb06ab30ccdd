/* audit.h — empirical check that speculative sampling emits exactly the target's distribution.
 *
 * sp_audit_run: many independent trials (seed = base + i) of speculative generation of two
 * tokens from a fixed context. The first token's histogram is compared with the target's
 * processed distribution p(x1 | context); the second token's, for each frequent first token a,
 * with p(x2 | context, a), computed by a separate target forward. Each comparison is a Pearson
 * chi-square test (bins with expected count < 5 pooled); the groups of the second token are
 * combined by adding statistics and degrees of freedom. Total-variation distance is reported
 * beside its expected value under the null (sampling error), so a reader sees the effect size.
 * With a grammar (p->grammar, p->gvocab) the reference distributions are the target's masked to
 * the tokens the grammar allows at each position (after the first token for the second), which is
 * the constrained distribution speculation must reproduce.
 *
 * sp_audit_self_test: the verification rule alone (sp_spec_verify_one) on synthetic adversarial
 * (p, q) pairs — disjoint supports, one-hot q, p = q, tiny p, top-p-truncated p — and, to prove
 * the test has power, the deliberately broken rule on a pair where it must fail. */
#ifndef SPECULA_AUDIT_H
#define SPECULA_AUDIT_H

#include "decode/spec.h"

typedef struct {
    double chi2;
    int dof;
    double p_value;
    double tv, tv_null; /* observed TV distance and its expected value under the null */
    int n;              /* samples in the comparison */
} sp_audit_test;

typedef struct {
    sp_audit_test first, second;
    int second_groups;  /* first-token values whose conditional was tested */
    double alpha;
    int pass;
    double acceptance_rate; /* of the drafts over all trials (shows the rule was exercised) */
} sp_audit_result;

/* chi-square upper tail Q(dof/2, x/2) */
double sp_chi2_pvalue(double x, int dof);

/* Pearson test of counts[n] against probs[n] (sums to 1) over total draws. */
sp_audit_test sp_audit_compare(const int *counts, const float *probs, int n, int total);

int sp_audit_run(sp_model *target, sp_drafter *d, const int32_t *prompt, int n_prompt, const sp_spec_params *p,
                 int draws, double alpha, sp_audit_result *r, sp_err *err);

/* One line per case to the callback (may be NULL). Returns 1 when every case passes and the
 * broken-rule case is detected, else 0. */
int sp_audit_self_test(int draws, double alpha, void (*report)(void *ctx, const char *line), void *ctx);

#endif
