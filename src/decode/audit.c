/* audit.c — chi-square / total-variation audit of the speculative sampling path (see audit.h). */
#include "decode/audit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/sample.h"
#include "decode/tree.h"

/* regularized upper incomplete gamma Q(a, x): series below a+1, Lentz continued fraction above */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    if (isinf(x)) return 0.0;
    double lg = lgamma(a);
    if (x < a + 1) {
        double sum = 1.0 / a, term = sum;
        for (int n = 1; n < 100000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15) break;
        }
        double pval = sum * exp(-x + a * log(x) - lg);
        return pval >= 1 ? 0 : 1 - pval;
    }
    double tiny = 1e-300, b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

double sp_chi2_pvalue(double x, int dof) {
    if (dof <= 0) return 1.0;
    return gamma_q(dof / 2.0, x / 2.0);
}

/* One comparison's bins under the reference: each token whose expected count is 5 or more, then
 * the rest pooled (bin probabilities p[nb], nb -1 when out of memory; n draws). */
typedef struct {
    int n, nb;
    double *p;
} audit_bins;

/* Pearson statistic, TV and its null expectation of counts[V] against probs[V]; b receives the
 * bins (owned by the caller: audit_bins_free). */
static sp_audit_test pearson(const int *counts, const float *probs, int V, int total, audit_bins *b) {
    sp_audit_test t = {0};
    t.n = total;
    double chi2 = 0, pool_e = 0, pool_o = 0, tv = 0, tvn = 0;
    int bins = 0;
    b->n = total;
    b->p = malloc(sizeof(double) * (size_t)(total / 5 + 2)); /* bins of expected count >= 5, and the pool */
    b->nb = b->p ? 0 : -1;
    for (int i = 0; i < V; i++) {
        double e = (double)probs[i] * total, o = counts[i];
        tv += fabs(o / total - probs[i]);
        tvn += sqrt(2.0 * probs[i] * (1.0 - probs[i]) / (M_PI * total));
        if (e >= 5) {
            chi2 += (o - e) * (o - e) / e;
            if (b->nb >= 0) b->p[b->nb++] = probs[i];
            bins++;
        } else {
            pool_e += e;
            pool_o += o;
        }
    }
    if (pool_e > 0 || pool_o > 0) {
        if (pool_e <= 0) chi2 = INFINITY; /* an impossible token was emitted */
        else chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        if (b->nb >= 0) b->p[b->nb++] = pool_e / total;
        bins++;
    }
    t.chi2 = chi2;
    t.dof = bins > 1 ? bins - 1 : 1;
    t.tv = tv / 2;
    t.tv_null = tvn / 2;
    return t;
}

static void audit_bins_free(audit_bins *b) {
    free(b->p);
    b->p = NULL;
}

/* Expected counts from which the chi-square distribution is trusted for the p-value. Below it
 * (a dominant token beside a rare remainder, the usual case for a language model) the
 * approximation's tail is too light: at 200 draws with 0.4 % of the mass outside one token,
 * p < 0.001 happened in 1.3 % of samples drawn from the reference itself. */
enum { AUDIT_E_ASYMPTOTIC = 50, AUDIT_MC_MAX = 20000, AUDIT_MC_HITS = 20 };

/* Pearson statistic of one multinomial sample of each group under its bin probabilities (in
 * descending order, so the search for a draw's bin stops early), summed; c: scratch counts */
static double simulate(const audit_bins *g, int ng, int *c, uint64_t *ctr) {
    double chi2 = 0;
    for (int k = 0; k < ng; k++) {
        const audit_bins *b = &g[k];
        memset(c, 0, sizeof(int) * (size_t)b->nb);
        for (int i = 0; i < b->n; i++) {
            double u = sp_rng_uniform(0x5EED, 11, (*ctr)++), cum = b->p[0];
            int j = 0;
            while (j < b->nb - 1 && cum <= u) cum += b->p[++j];
            c[j]++;
        }
        for (int j = 0; j < b->nb; j++) {
            double e = b->p[j] * b->n;
            if (e > 0) chi2 += (c[j] - e) * (c[j] - e) / e;
        }
    }
    return chi2;
}

static int by_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* p-value of the summed statistic chi2 over groups g[ng] with dof degrees of freedom: the
 * chi-square tail when every bin expects AUDIT_E_ASYMPTOTIC draws or more, else a sequential Monte
 * Carlo estimate under the reference (Besag and Clifford: simulate until AUDIT_MC_HITS statistics
 * reach chi2, p = hits / simulations, or up to AUDIT_MC_MAX, p = (hits + 1) / (AUDIT_MC_MAX + 1)).
 * Sorts each group's bin probabilities. docs/sampling.md, "The audit". */
static double audit_pvalue(audit_bins *g, int ng, double chi2, int dof) {
    if (isinf(chi2)) return 0.0;
    int small = 0, bins = 0, most = 1;
    for (int k = 0; k < ng; k++) {
        if (g[k].nb < 0) return sp_chi2_pvalue(chi2, dof); /* out of memory for the bins */
        bins += g[k].nb - 1;
        if (g[k].nb > most) most = g[k].nb;
        for (int j = 0; j < g[k].nb; j++) small |= g[k].p[j] * g[k].n < AUDIT_E_ASYMPTOTIC;
        qsort(g[k].p, (size_t)g[k].nb, sizeof(double), by_desc);
    }
    if (bins <= 0) return 1.0;
    int *c = small ? malloc(sizeof(int) * (size_t)most) : NULL;
    if (!c) return sp_chi2_pvalue(chi2, dof);
    uint64_t ctr = 0;
    int hits = 0, s = 1;
    for (; s <= AUDIT_MC_MAX; s++) {
        if (simulate(g, ng, c, &ctr) >= chi2 * (1 - 1e-12)) hits++;
        if (hits == AUDIT_MC_HITS) break;
    }
    free(c);
    return hits == AUDIT_MC_HITS ? (double)hits / s : (hits + 1.0) / (AUDIT_MC_MAX + 1.0);
}

sp_audit_test sp_audit_compare(const int *counts, const float *probs, int n, int total) {
    audit_bins b;
    sp_audit_test t = pearson(counts, probs, n, total, &b);
    t.p_value = audit_pvalue(&b, 1, t.chi2, t.dof);
    audit_bins_free(&b);
    return t;
}

/* processed target distribution after context tokens[0..n), repetition penalties included, then
 * masked to the tokens allowed[V] marks (NULL: no grammar), in the round's order */
static int target_probs(sp_model *m, const int32_t *tok, int n, const sp_gen_params *gp, const uint8_t *allowed,
                        float *probs, sp_err *err) {
    int V = sp_model_config(m)->vocab_size;
    sp_kv *kv = sp_kv_create(m, n + 1, 256, err);
    float *lg = malloc(sizeof(float) * (size_t)V);
    sp_sampler *s = sp_sampler_create(V, &gp->sample, err);
    sp_penalty *pen = NULL;
    int rc = -1;
    if (!kv || !lg || !s) goto done;
    for (int i = 0; i < n; i += 256) {
        sp_forward_out o = {.last_logits = lg};
        if (sp_model_forward(m, kv, tok + i, n - i < 256 ? n - i : 256, &o, err)) goto done;
    }
    if (sp_penalty_active(&gp->penalty)) {
        if (!(pen = sp_penalty_create(V, &gp->penalty, err))) goto done;
        for (int i = 0; i < n; i++)
            if (sp_penalty_push(pen, tok[i], err)) goto done;
        sp_penalty_apply(pen, lg);
    }
    if (allowed) sp_grammar_apply(allowed, lg, V);
    rc = sp_sampler_probs(s, probs, lg, err);
done:
    sp_kv_free(kv);
    free(lg);
    sp_sampler_free(s);
    sp_penalty_free(pen);
    return rc;
}

/* draws independent two-token generations (seed = base + i): the tokens x1, x2, the first's
 * histogram c1 and the drafts' acceptance rate */
static int draw_trials(sp_model *target, sp_drafter *d, const int32_t *prompt, int n_prompt, const sp_spec_params *p,
                       int draws, int32_t *x1, int32_t *x2, int *c1, double *acc, sp_err *err) {
    long drafted = 0, accepted = 0;
    for (int i = 0; i < draws; i++) {
        sp_spec_params q = *p;
        q.gen.max_new = 2;
        q.gen.ignore_eos = 1;
        q.gen.on_token = NULL;
        q.gen.sample.seed = p->gen.sample.seed * 1000003ull + (uint64_t)i + 1;
        int32_t out[2];
        sp_spec_stats st;
        if (sp_spec_generate(target, d, prompt, n_prompt, &q, out, 2, &st, err)) return -1;
        x1[i] = out[0];
        x2[i] = out[1];
        c1[out[0]]++;
        drafted += st.drafted;
        accepted += st.accepted;
    }
    *acc = drafted ? (double)accepted / drafted : 0;
    return 0;
}

int sp_audit_run(sp_model *target, sp_drafter *d, const int32_t *prompt, int n_prompt, const sp_spec_params *p,
                 int draws, double alpha, sp_audit_result *r, sp_err *err) {
    memset(r, 0, sizeof *r);
    r->alpha = alpha;
    int V = sp_model_config(target)->vocab_size;
    if (draws < 100) return sp_err_set(err, "audit: need at least 100 draws (got %d)", draws);
    int *c1 = calloc((size_t)V, sizeof(int));
    int32_t *x1 = malloc(sizeof(int32_t) * (size_t)draws), *x2 = malloc(sizeof(int32_t) * (size_t)draws);
    float *probs = malloc(sizeof(float) * (size_t)V);
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)(n_prompt + 1));
    int *c2 = calloc((size_t)V, sizeof(int));
    int rc = -1;
    sp_gstate *g0 = NULL, *g1 = NULL; /* with a grammar: the state at the first and second token */
    uint8_t *mask = NULL;
    int32_t only;
    audit_bins grp[6] = {{0}}; /* the second token's groups */
    if (!c1 || !x1 || !x2 || !probs || !ctx || !c2) {
        sp_err_set(err, "audit: out of memory");
        goto done;
    }
    if (draw_trials(target, d, prompt, n_prompt, p, draws, x1, x2, c1, &r->acceptance_rate, err)) goto done;
    if (p->grammar && !(g0 = sp_gstate_create(p->grammar, p->gvocab, err))) goto done;
    if (p->grammar && (!(g1 = sp_gstate_create(p->grammar, p->gvocab, err)) || !(mask = malloc((size_t)V)))) goto done;
    if (g0 && sp_gstate_mask(g0, mask, &only, err) < 0) goto done;
    if (target_probs(target, prompt, n_prompt, &p->gen, mask, probs, err)) goto done;
    r->first = sp_audit_compare(c1, probs, V, draws);

    /* second token: conditionals of the most frequent first tokens (>= 200 samples, at most 6) */
    memcpy(ctx, prompt, sizeof(int32_t) * (size_t)n_prompt);
    double chi2 = 0, tvw = 0, tvnw = 0;
    int dof = 0, nsec = 0;
    for (int g = 0; g < 6; g++) {
        int best = -1;
        for (int v = 0; v < V; v++)
            if (c1[v] >= 200 && (best < 0 || c1[v] > c1[best])) best = v;
        if (best < 0) break;
        int n = c1[best];
        c1[best] = -c1[best]; /* mark used */
        memset(c2, 0, sizeof(int) * (size_t)V);
        for (int i = 0; i < draws; i++)
            if (x1[i] == best) c2[x2[i]]++;
        ctx[n_prompt] = best;
        if (g0 && (sp_gstate_copy(g1, g0, err) || sp_gstate_accept(g1, best, err) || sp_gstate_mask(g1, mask, &only, err) < 0)) {
            if (!err->msg[0]) sp_err_set(err, "audit: the grammar does not allow the sampled token %d", best);
            goto done;
        }
        if (target_probs(target, ctx, n_prompt + 1, &p->gen, mask, probs, err)) goto done;
        sp_audit_test t = pearson(c2, probs, V, n, &grp[g]);
        chi2 += t.chi2;
        dof += t.dof;
        tvw += t.tv * n;
        tvnw += t.tv_null * n;
        nsec += n;
        r->second_groups++;
    }
    if (r->second_groups) {
        r->second.chi2 = chi2;
        r->second.dof = dof;
        r->second.p_value = audit_pvalue(grp, r->second_groups, chi2, dof);
        r->second.tv = tvw / nsec;
        r->second.tv_null = tvnw / nsec;
        r->second.n = nsec;
    }
    r->pass = r->first.p_value > alpha && (!r->second_groups || r->second.p_value > alpha);
    rc = 0;
done:
    free(c1);
    free(c2);
    free(x1);
    free(x2);
    free(probs);
    free(ctx);
    free(mask);
    for (int g = 0; g < 6; g++) audit_bins_free(&grp[g]);
    sp_gstate_free(g0);
    sp_gstate_free(g1);
    return rc;
}

/* ---- self-test on synthetic (p, q) ----------------------------------------------------------- */
enum { ST_V = 24 };

static void normalize(float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] / s);
}

/* draws x ~ q (or x = fixed when q is one-hot), applies the rule, tests the output against p */
static sp_audit_test run_case(float *p, const float *q, int onehot_x, int broken, int draws, uint64_t seed) {
    int counts[ST_V] = {0};
    for (int i = 0; i < draws; i++) {
        int x = q ? sp_sample_probs(q, ST_V, sp_rng_uniform(seed, 9, (uint64_t)i)) : onehot_x;
        int ok;
        int t = sp_spec_verify_one(p, q, ST_V, x, sp_rng_uniform(seed, SP_RNG_STREAM_ACCEPT, (uint64_t)i),
                                   sp_rng_uniform(seed, SP_RNG_STREAM_RESIDUAL, (uint64_t)i), broken, &ok);
        counts[t]++;
    }
    return sp_audit_compare(counts, p, ST_V, draws);
}

/* the tree rule at one node: k children drawn without replacement from q, verified in order
 * (sp_tree_verify_node); the emitted token is tested against p */
static sp_audit_test run_tree_case(const float *p, const float *q, int k, int broken, int draws, uint64_t seed) {
    int counts[ST_V] = {0};
    for (int i = 0; i < draws; i++) {
        float pw[ST_V], qw[ST_V], left[ST_V];
        int32_t x[ST_V];
        double u[ST_V];
        memcpy(pw, p, sizeof pw);
        memcpy(qw, q, sizeof qw);
        memcpy(left, q, sizeof left);
        int n = 0;
        for (; n < k; n++) {
            int t = sp_sample_probs(left, ST_V, sp_rng_uniform(seed, 9, (uint64_t)i * 32 + (uint64_t)n));
            if (t < 0) break;
            x[n] = t;
            left[t] = 0;
            u[n] = sp_rng_uniform(seed, SP_RNG_STREAM_ACCEPT, (uint64_t)i * 32 + (uint64_t)n);
        }
        int child;
        int t = sp_tree_verify_node(pw, qw, ST_V, x, n, u, sp_rng_uniform(seed, SP_RNG_STREAM_RESIDUAL, (uint64_t)i),
                                    broken, &child);
        counts[t]++;
    }
    return sp_audit_compare(counts, p, ST_V, draws);
}

int sp_audit_self_test(int draws, double alpha, void (*report)(void *ctx, const char *line), void *ctx) {
    float p[ST_V], q[ST_V];
    int all = 1;
    char line[256];
    for (int c = 0; c < 7 + 6; c++) {
        const char *name = "";
        int tree_k = 0; /* > 0: the tree rule with this many children */
        int onehot = -1, broken = 0, expect_fail = 0;
        for (int i = 0; i < ST_V; i++) {
            p[i] = (float)(0.05 + sp_rng_uniform(77, (uint64_t)c, (uint64_t)i));
            q[i] = (float)(0.05 + sp_rng_uniform(78, (uint64_t)c, (uint64_t)i));
        }
        switch (c) {
        case 0: name = "disjoint supports";
            for (int i = 0; i < ST_V; i++) (i < ST_V / 2 ? q : p)[i] = 0;
            break;
        case 1: name = "one-hot q";
            onehot = 5;
            break;
        case 2: name = "p == q";
            memcpy(q, p, sizeof p);
            break;
        case 3: name = "tiny p where q is large";
            p[3] = 1e-5f;
            q[3] = 20;
            break;
        case 4: name = "top-p truncated p, full q";
            for (int i = ST_V / 3; i < ST_V; i++) p[i] = 0;
            break;
        case 5: name = "peaked p, flat q";
            for (int i = 0; i < ST_V; i++) q[i] = 1;
            p[7] = 30;
            break;
        case 6: name = "BROKEN rule (residual replaced by p) must be detected";
            broken = 1;
            expect_fail = 1;
            q[2] = 10; /* q over-weights a token p rarely wants */
            p[2] = 0.05f;
            break;
        }
        if (c >= 7) { /* the same pairs through the tree rule (docs/TREE.md) */
            static const char *tree_names[] = {"tree k=3: disjoint supports", "tree k=2: p == q",
                                               "tree k=4: tiny p where q is large", "tree k=3: peaked p, flat q",
                                               "tree k=24: every token a child",
                                               "tree BROKEN rule (no residual update) must be detected"};
            static const int tree_ks[] = {3, 2, 4, 3, 24, 3};
            name = tree_names[c - 7];
            tree_k = tree_ks[c - 7];
            if (c == 7) for (int i = 0; i < ST_V; i++) (i < ST_V / 2 ? q : p)[i] = 0;
            if (c == 8) memcpy(q, p, sizeof p);
            if (c == 9) p[3] = 1e-5f, q[3] = 20;
            if (c == 10) {
                for (int i = 0; i < ST_V; i++) q[i] = 1;
                p[7] = 30;
            }
            if (c == 12) broken = 1, expect_fail = 1, q[2] = 10, q[4] = 8, p[2] = 0.05f;
        }
        normalize(p, ST_V);
        normalize(q, ST_V);
        sp_audit_test t = tree_k ? run_tree_case(p, q, tree_k, broken, draws, 1234 + (uint64_t)c)
                                 : run_case(p, onehot >= 0 ? NULL : q, onehot, broken, draws, 1234 + (uint64_t)c);
        int pass = expect_fail ? t.p_value < alpha : t.p_value > alpha;
        all &= pass;
        snprintf(line, sizeof line, "%-52s chi2 %10.2f dof %2d p-value %.4f  TV %.5f (null %.5f)  %s", name, t.chi2,
                 t.dof, t.p_value, t.tv, t.tv_null, pass ? "ok" : "FAIL");
        if (report) report(ctx, line);
    }
    return all;
}
