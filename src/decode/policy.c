/* policy.c — the never-slower-than-plain draft-length policy (see policy.h, docs/ROUND_COST.md). */
#include "decode/policy.h"

#include <math.h>
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
#define EXPLORE_GAIN 0.10 /* a length never verified is tried when, at the least verify cost it can have,
                           * it would beat the best estimate by more than this fraction */
#define STEP_SHARE 0.9   /* prior share of drafting that grows with k: a drafter forward per draft ... */
#define BLOCK_SHARE 0.1  /* ... and one forward per block (sampling, heads: the rest per draft) */
#define EX_DECAY 0.9     /* per verify of a row count: older distinct-expert counts fade */
#define LOAD_GAIN 0.7    /* weight of a verify's observed / stored time ratio in the load estimate */
#define POOL_PRIOR 0.05  /* weight of "every expert used alike" in the fitted pool size */

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
    s->load = 1;
}

/* Sample n of a cost into its window; *x = the window's median (the lower middle of an even
 * count). A cold first sample (first touch of the drafter's weights) or a round slowed by other
 * processes is outvoted; plain and drafted rounds see the same machine, so their medians compare. */
static double median(const double *w, int n, int win) {
    int m = n < win ? n : win;
    double s[SP_POLICY_WIN] = {0};
    for (int i = 0; i < m; i++) {
        int j = i;
        for (; j > 0 && s[j - 1] > w[i]; j--) s[j] = s[j - 1];
        s[j] = w[i];
    }
    return m > 0 ? s[(m - 1) / 2] : 0;
}

static void sample(double *x, double *w, int n, double v) {
    w[n % SP_POLICY_WIN] = v;
    *x = median(w, n + 1, SP_POLICY_WIN);
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

/* ---- the cost of a length -------------------------------------------------------------------- */

static double pool_size_fit(const sp_policy *s);

void sp_policy_set_drafter(sp_policy *s, int step) { s->step_cost = step != 0; }

void sp_policy_set_moe(sp_policy *s, int n_experts, int n_used, double share) {
    if (n_experts <= 0 || n_used <= 0 || n_used > n_experts) n_experts = n_used = 0;
    if (s->n_experts != n_experts || s->n_used != n_used) { /* another target: its routing starts afresh */
        memset(s->ex_mean, 0, sizeof s->ex_mean);
        memset(s->ex_w, 0, sizeof s->ex_w);
    }
    s->n_experts = n_experts;
    s->n_used = n_used;
    s->expert_share = n_experts ? (share < 0 ? 0 : share > 1 ? 1 : share) : 0;
    s->ex_pool = n_experts ? pool_size_fit(s) : 0;
}

void sp_policy_observe_experts(sp_policy *s, int rows, double experts) {
    if (!s->n_experts || rows < 1 || rows > s->G + 1 || !(experts > 0) || !isfinite(experts)) return;
    s->ex_w[rows] = EX_DECAY * s->ex_w[rows] + 1;
    s->ex_mean[rows] += (experts - s->ex_mean[rows]) / s->ex_w[rows];
    s->ex_pool = pool_size_fit(s);
}

/* distinct experts of r rows whose choices are independent draws of u distinct experts from an
 * equally used pool of e: e · (1 − (1 − u/e)^r) */
static double pool_experts(double e, double u, int r) { return e * (1 - pow(1 - u / e, r)); }

/* The pool size that explains the routing seen so far: per observed row count r >= 2, the e with
 * pool_experts(e, u, r) = the mean seen (bisection: increasing in e), averaged by weight with
 * the prior that every expert is used alike (e = n_experts, weight POOL_PRIOR). Routing that keeps
 * choosing the same experts shrinks the pool, and a block's rows then share more experts. */
static double pool_size_fit(const sp_policy *s) {
    double u = s->n_used, E = s->n_experts, num = POOL_PRIOR * E, den = POOL_PRIOR;
    for (int r = 2; r <= s->G + 1; r++) {
        if (!(s->ex_w[r] > 0)) continue;
        double x = s->ex_mean[r], lo = u, hi = E;
        if (x <= u) hi = u;
        else if (x >= pool_experts(E, u, r)) lo = E;
        for (int it = 0; it < 60 && hi - lo > 1e-9 * E; it++) {
            double mid = 0.5 * (lo + hi);
            if (pool_experts(mid, u, r) < x) lo = mid;
            else hi = mid;
        }
        num += s->ex_w[r] * 0.5 * (lo + hi);
        den += s->ex_w[r];
    }
    return num / den;
}

double sp_policy_experts(const sp_policy *s, int rows) {
    if (!s->n_experts || rows < 1) return 0;
    if (rows <= s->G + 1 && s->ex_w[rows] >= 1) return s->ex_mean[rows];
    return pool_experts(s->ex_pool, s->n_used, rows);
}

/* the measured median of a per-length window, with the spikes other load leaves cut: never more
 * than a longer measured length (more rows or drafts never cost less); -1 when not measured */
static double measured(const sp_policy *s, const double (*w)[SP_POLICY_KWIN], const int *n, int k) {
    if (k < 1 || k > s->G || !n[k]) return -1;
    double v = median(w[k], n[k], SP_POLICY_KWIN);
    for (int j = k + 1; j <= s->G; j++)
        if (n[j]) {
            double u = median(w[j], n[j], SP_POLICY_KWIN);
            if (u < v) v = u;
        }
    return v;
}

/* the nearest measured lengths below (its cost; `at0` for none) and above (-1 for none) k */
static void neighbours(const sp_policy *s, const double (*w)[SP_POLICY_KWIN], const int *n, int k, double at0,
                       double *lo, double *hi) {
    *lo = at0, *hi = -1;
    for (int j = k - 1; j >= 1; j--)
        if (n[j]) {
            *lo = measured(s, w, n, j);
            break;
        }
    for (int j = k + 1; j <= s->G; j++)
        if (n[j]) {
            *hi = measured(s, w, n, j);
            break;
        }
}

static double clamp_between(double v, double lo, double hi) {
    if (hi >= 0 && v > hi) v = hi;
    return v < lo ? lo : v;
}

/* Verify with n drafts, where not measured: t_v1 + c_row · n + c_exp · (X(n+1) − X(1)), X the expected
 * distinct experts per MoE layer (0 on a dense target), fitted by least squares to the measured
 * lengths; c_exp is pulled towards its prior (the share of a one-row verify its u experts cost,
 * per expert) with the weight of one length, so one measured length splits between the two
 * terms by the prior. Kept between the measured neighbours. */
static double verify_norm(const sp_policy *s, int n) {
    if (n <= 0) return s->t_v1;
    if (n > s->G) n = s->G;
    double m = measured(s, (const double (*)[SP_POLICY_KWIN])s->w_ver, s->n_ver, n);
    if (m >= 0) return m;
    double x1 = sp_policy_experts(s, 1), snn = 0, snd = 0, sdd = 0, sny = 0, sdy = 0;
    int any = 0, last = 0;
    for (int j = 1; j <= s->G; j++) {
        if (!s->n_ver[j]) continue;
        double y = measured(s, (const double (*)[SP_POLICY_KWIN])s->w_ver, s->n_ver, j) - s->t_v1;
        double d = sp_policy_experts(s, j + 1) - x1;
        snn += (double)j * j, snd += j * d, sdd += d * d, sny += j * y, sdy += d * y;
        any = 1, last = j;
    }
    double c_row = 0, c_exp = 0;
    if (any && s->n_experts) {
        double c0 = s->expert_share * s->t_v1 / s->n_used, dref = sp_policy_experts(s, last + 1) - x1;
        double a = snn, b = snd, d = sdd + dref * dref, y0 = sny, y1 = sdy + dref * dref * c0, det = a * d - b * b;
        if (det > 1e-12 * (a * d + 1e-300)) c_row = (d * y0 - b * y1) / det, c_exp = (a * y1 - b * y0) / det;
        else c_exp = c0, c_row = a > 0 ? (y0 - b * c0) / a : 0;
        if (c_row < 0) c_row = 0, c_exp = d > 0 ? y1 / d : 0; /* the best with c_row = 0 */
        if (c_exp < 0) c_exp = 0, c_row = a > 0 ? y0 / a : 0;
    } else if (any) {
        c_row = snn > 0 ? sny / snn : 0;
    }
    if (c_row < 0) c_row = 0;
    double v = s->t_v1 + c_row * n + c_exp * (sp_policy_experts(s, n + 1) - x1), lo, hi;
    neighbours(s, (const double (*)[SP_POLICY_KWIN])s->w_ver, s->n_ver, n, s->t_v1, &lo, &hi);
    return clamp_between(v, lo, hi);
}

/* Drafting for k asked, where not measured: a + b · k fitted to the measured lengths (a, b >= 0);
 * from one measured length k0 the drafter's kind splits it: b = share · D(k0) / k0, a the rest. */
static double draft_norm(const sp_policy *s, int k) {
    if (k <= 0) return 0;
    if (k > s->G) k = s->G;
    double m = measured(s, (const double (*)[SP_POLICY_KWIN])s->w_drf, s->n_drf, k);
    if (m >= 0) return m;
    double n = 0, sk = 0, skk = 0, sy = 0, sky = 0;
    int k0 = 0;
    for (int j = 1; j <= s->G; j++) {
        if (!s->n_drf[j]) continue;
        double y = measured(s, (const double (*)[SP_POLICY_KWIN])s->w_drf, s->n_drf, j);
        n += 1, sk += j, skk += (double)j * j, sy += y, sky += j * y, k0 = j;
    }
    if (n == 0) return 0;
    double a, b, var = n * skk - sk * sk;
    if (n >= 2 && var > 0) {
        b = (n * sky - sk * sy) / var, a = (sy - b * sk) / n;
        if (b < 0) b = 0, a = sy / n;
        if (a < 0) a = 0, b = sky / skk;
    } else {
        double share = s->step_cost ? STEP_SHARE : BLOCK_SHARE, y = sy / n;
        b = share * y / k0, a = (1 - share) * y;
    }
    double lo, hi;
    neighbours(s, (const double (*)[SP_POLICY_KWIN])s->w_drf, s->n_drf, k, 0, &lo, &hi);
    return clamp_between(a + b * k, lo, hi);
}

double sp_policy_verify_ms(const sp_policy *s, int n) { return s->load * verify_norm(s, n); }
double sp_policy_draft_ms(const sp_policy *s, int k) { return s->load * draft_norm(s, k); }

static double tau_of(const sp_policy *s, int k) {
    double a[SP_POLICY_MAX_G], tau = 1;
    alphas(s, a, k);
    for (int i = 0; i < k; i++) tau += a[i];
    return tau;
}

double sp_policy_rate(const sp_policy *s, int k) {
    if (s->n_plain == 0 || s->t_plain <= 0) return 0;
    if (k <= 0) return 1.0 / (s->load * s->t_plain);
    if (s->n_spec == 0) return 0;
    if (k > s->G) k = s->G;
    double extra = verify_norm(s, k) - s->t_v1;
    return tau_of(s, k) / (s->load * (s->t_plain + (extra > 0 ? extra : 0) + draft_norm(s, k)));
}

/* A length whose verify was never measured, worth trying: at the least verify it can cost (that
 * of the nearest measured length below, more rows never costing less) its rate would beat `best`
 * by more than EXPLORE_GAIN. The one with the highest such rate, or 0. A verify curve is flat
 * while the weights' reads dominate and steep once the integer compute does, so the fitted line
 * through the lengths measured so far can overprice the lengths between them; each length is
 * tried at most once before its own measurement decides. */
static int explore_k(const sp_policy *s, int g, double best) {
    if (s->n_plain == 0 || s->n_spec == 0) return 0;
    int pick = 0;
    double top = (1 + EXPLORE_GAIN) * best;
    for (int k = 1; k <= g && k <= s->G; k++) {
        if (s->n_ver[k]) continue;
        double lo, hi;
        neighbours(s, (const double (*)[SP_POLICY_KWIN])s->w_ver, s->n_ver, k, s->t_v1, &lo, &hi);
        double extra = lo - s->t_v1, r = tau_of(s, k) / (s->load * (s->t_plain + (extra > 0 ? extra : 0) + draft_norm(s, k)));
        if (r > top) top = r, pick = k;
    }
    return pick;
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
    s->exploring = 0;
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
    int k = best_k(s, g), e = explore_k(s, g, sp_policy_rate(s, k));
    if (e > 0) {
        s->exploring = 1;
        return e;
    }
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

/* The machine's speed drifts (other processes, frequency): a verify forward of a length already
 * measured updates `load`, the recent ratio of observed to stored time, and every sample is stored
 * divided by it. So lengths measured at different times compare at one speed, and a burst of
 * load on the length in use does not make the lengths measured before it look cheap. */
static void feed_load(sp_policy *s, double ms, double norm) {
    if (!(ms > 0) || !(norm > 1e-9)) return;
    double x = ms / norm;
    x = x < 0.1 ? 0.1 : x > 20 ? 20 : x;
    s->load = (1 - LOAD_GAIN) * s->load + LOAD_GAIN * x;
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
        if (s->n_plain >= 2) feed_load(s, verify_ms, s->t_v1);
        sample(&s->t_plain, s->w_plain, s->n_plain, round_ms / s->load);
        sample(&s->t_v1, s->w_v1, s->n_plain, verify_ms / s->load);
        s->n_plain++;
    } else if (nd > 0) {
        s->n_spec++;
        int kd = k >= 1 && k <= s->G ? k : nd <= s->G ? nd : s->G, nv = nd <= s->G ? nd : s->G;
        if (s->n_ver[nv] >= 2) feed_load(s, verify_ms, measured(s, (const double (*)[SP_POLICY_KWIN])s->w_ver, s->n_ver, nv));
        s->w_drf[kd][s->n_drf[kd]++ % SP_POLICY_KWIN] = draft_ms > 0 ? draft_ms / s->load : 0;
        s->w_ver[nv][s->n_ver[nv]++ % SP_POLICY_KWIN] = verify_ms > 0 ? verify_ms / s->load : 0;
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
