/* vlen.c — batch-aware verify lengths (see vlen.h): the forward-cost table and its calibration,
 * the costs learned online (forward load per row count, drafting per slot and per row), and the
 * exact choice of each slot's draft count. */
#include "server/vlen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define CALIB_CTX 64     /* context the calibration forwards attend to */
#define PRIOR_ROUNDS 4.0 /* weight of the server-wide rate in a slot's acceptance estimate */
#define PT_PRIOR 3.0     /* weight of the overall load in a row-count point's load ratio */
#define PT_DECAY 0.98    /* per forward: older observations of the load ratios fade */
#define DRAFT_DECAY 0.97 /* per proposal: older observations of the drafting cost fade */
#define DRAFT_FADE 0.99  /* per forward: ... and fade towards the prior while nothing drafts, so a cost
                          * measured once (a cold first proposal, a burst of other load) is measured
                          * again after some hundred steps instead of ruling drafting out for good */
#define DRAFT_CLIP 3.0   /* an observation counts as at most this many times the model's cost */
#define DRAFT_RIDGE 1.0  /* weight of the prior drafting coefficients in their fit */
#define GAIN_MIN 1e-3    /* a choice replaces a cheaper one only when J rises by more than this */

static void draft_fit(srv_vlen *v);

static double clampd(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

int sp_srv_vlen_init_table(srv_vlen *v, const int *pts, const double *ms_in, int np, int n_rows, sp_err *err) {
    memset(v, 0, sizeof *v);
    if (np < 1 || np > 16 || n_rows < 1)
        return sp_err_set(err, "server: verify-cost table of %d rows from %d points (expected 1..16)", n_rows, np);
    double ms[16];
    for (int i = 0; i < np; i++) {
        if (pts[i] < 1 || (i && pts[i] <= pts[i - 1]) || !(ms_in[i] > 0) || !isfinite(ms_in[i]))
            return sp_err_set(err, "server: verify-cost point %d (%d rows, %g ms): expected increasing rows >= 1 "
                                   "and a positive time", i, pts[i], ms_in[i]);
        ms[i] = ms_in[i];
    }
    v->fwd = calloc((size_t)n_rows + 1, sizeof *v->fwd);
    if (!v->fwd) return sp_err_set(err, "server: out of memory for the verify-cost table");
    v->n_rows = n_rows;
    v->load = 1.0;
    for (int j = 0; j < SRV_VLEN_PTS; j++) v->pt_ratio[j] = 1.0;
    /* the spikes other load leaves are cut: a point never costs more than a larger one, nor more
     * per row than a smaller one */
    for (int i = np - 2; i >= 0; i--)
        if (ms[i] > ms[i + 1]) ms[i] = ms[i + 1];
    for (int i = 1; i < np; i++) {
        double cap = ms[i - 1] * pts[i] / pts[i - 1];
        if (ms[i] > cap) ms[i] = cap;
    }
    for (int r = 1, i = 0; r <= n_rows; r++) {
        while (i + 1 < np && pts[i + 1] < r) i++;
        if (r <= pts[0]) v->fwd[r] = ms[0];
        else if (i + 1 < np) v->fwd[r] = ms[i] + (ms[i + 1] - ms[i]) * (r - pts[i]) / (pts[i + 1] - pts[i]);
        else { /* past the last point: the slope of the last segment */
            double slope = np > 1 ? (ms[np - 1] - ms[np - 2]) / (pts[np - 1] - pts[np - 2]) : ms[0];
            v->fwd[r] = ms[np - 1] + slope * (r - pts[np - 1]);
        }
    }
    /* drafting priors, replaced by the fit within a few proposals: a drafter of about a quarter of
     * the target's layers (its weights read once per batch), a small per-slot part (LM head rows,
     * heads, sampling) and a third of a target row per block row */
    double f1 = v->fwd[1], marg = n_rows > 1 ? (v->fwd[n_rows] - v->fwd[1]) / (n_rows - 1) : f1;
    v->c_slot = v->c0_slot = 0.3 * f1;
    v->c_row = v->c0_row = 0.35 * (marg > 0 ? marg : f1);
    v->c_ctx = 0.05 * (marg > 0 ? marg : f1); /* a context row: a projection of the taps, the K/V */
    return 0;
}

int sp_srv_vlen_init(srv_vlen *v, sp_model *m, sp_kv *scratch, float *logits, int calib_rows, int n_rows, sp_err *err) {
    memset(v, 0, sizeof *v);
    if (calib_rows < 1 || n_rows < calib_rows)
        return sp_err_set(err, "server: verify-cost table of %d rows calibrated to %d", n_rows, calib_rows);
    int V = sp_model_config(m)->vocab_size;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(CALIB_CTX + calib_rows));
    sp_kv *kv = sp_kv_create(m, CALIB_CTX + calib_rows, CALIB_CTX > calib_rows ? CALIB_CTX : calib_rows, err);
    int rc = 0;
    if (!tok || !kv) {
        rc = kv ? sp_err_set(err, "server: out of memory for the verify-cost table") : -1;
        goto done;
    }
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < CALIB_CTX + calib_rows; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)V);
    }
    if ((rc = sp_model_forward(m, kv, tok, CALIB_CTX, NULL, err))) goto done;
    /* measured points 1, 2, 4, 8, 16, 32 (at most calib_rows), the fastest of five sweeps */
    int pts[8], np = 0;
    for (int r = 1; r <= calib_rows && r <= 32; r *= 2) pts[np++] = r;
    double ms[8];
    for (int i = 0; i < np; i++) ms[i] = 1e30;
    for (int rep = 0; rep < 5; rep++)
        for (int i = 0; i < np; i++) {
            sp_forward_out out = {.logits = logits};
            sp_forward_seq seq = {kv, tok + CALIB_CTX, pts[i], &out, NULL};
            double t0 = sp_time_ms();
            if ((rc = sp_model_forward_batch(m, scratch, &seq, 1, err)) || (rc = sp_kv_trim(kv, pts[i], err))) goto done;
            double t = sp_time_ms() - t0;
            if (t < ms[i]) ms[i] = t;
        }
    for (int i = 0; i < np; i++)
        if (!(ms[i] > 1e-6)) ms[i] = 1e-6; /* a timer too coarse for the smallest forwards */
    if ((rc = sp_srv_vlen_init_table(v, pts, ms, np, n_rows, err))) goto done;
    sp_log(SP_LOG_DEBUG, "server: forward cost 1 row %.2f ms, %d rows %.2f ms, %d rows %.2f ms", v->fwd[1],
           pts[np > 3 ? 3 : np - 1], v->fwd[pts[np > 3 ? 3 : np - 1]], calib_rows, v->fwd[calib_rows]);
done:
    free(tok);
    sp_kv_free(kv);
    if (rc) sp_srv_vlen_free(v);
    return rc;
}

void sp_srv_vlen_free(srv_vlen *v) {
    free(v->fwd);
    v->fwd = NULL;
}

static double table_ms(const srv_vlen *v, int rows) {
    if (rows <= 0) return 0;
    if (rows <= v->n_rows) return v->fwd[rows];
    return v->fwd[v->n_rows] * rows / v->n_rows;
}

/* the point below rows (j, rows >= 2^j) and rows' place between it and the next, in log2 */
static void point_of(int rows, int *j, double *f) {
    double l = log2(rows > 1 ? rows : 1);
    int i = (int)l;
    if (i >= SRV_VLEN_PTS - 1) {
        *j = SRV_VLEN_PTS - 1, *f = 0;
        return;
    }
    *j = i, *f = l - i;
}

/* observed / tabled time at point j: the overall load times the point's shape, which falls back to
 * 1 (the table's shape) while the point has little recent weight */
static double point_ratio(const srv_vlen *v, int j) {
    return v->load * (v->pt_weight[j] * v->pt_ratio[j] + PT_PRIOR) / (v->pt_weight[j] + PT_PRIOR);
}

static double raw_ms(const srv_vlen *v, int rows) {
    int j;
    double f;
    point_of(rows, &j, &f);
    double ratio = f > 0 ? (1 - f) * point_ratio(v, j) + f * point_ratio(v, j + 1) : point_ratio(v, j);
    return ratio * table_ms(v, rows);
}

/* never less than at a smaller row count: more rows are never cheaper */
double sp_srv_vlen_forward_ms(const srv_vlen *v, int rows) {
    if (rows <= 0) return 0;
    double ms = raw_ms(v, rows);
    for (int p = 1; p < rows && p > 0; p *= 2) {
        double m = raw_ms(v, p);
        if (m > ms) ms = m;
    }
    return ms;
}

double sp_srv_vlen_draft_ms(const srv_vlen *v, int slots, int rows) {
    if (slots <= 0) return 0;
    return v->load * (v->c_slot * slots + v->c_row * rows);
}

void sp_srv_vlen_observe_forward(srv_vlen *v, int rows, double ms) {
    double t = table_ms(v, rows);
    if (!(t > 0) || !(ms > 0)) return;
    double x = clampd(ms / t, 0.1, 20.0);
    double shape = x / v->load; /* this row count against the recent load over all row counts */
    v->load = 0.9 * v->load + 0.1 * x;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 2; k++) v->sxx[i][k] *= DRAFT_FADE;
        v->sxy[i] *= DRAFT_FADE;
    }
    draft_fit(v);
    int j;
    double f;
    point_of(rows, &j, &f);
    for (int i = 0; i < SRV_VLEN_PTS; i++) v->pt_weight[i] *= PT_DECAY;
    for (int k = 0; k < 2; k++) {
        int i = j + k;
        double w = k ? f : 1 - f;
        if (w <= 0 || i >= SRV_VLEN_PTS) continue;
        v->pt_weight[i] += w;
        v->pt_ratio[i] += w / v->pt_weight[i] * (shape - v->pt_ratio[i]);
    }
}

/* the ridge fit of (c_slot, c_row) to the decayed sums, each coefficient kept >= 0 */
static void draft_fit(srv_vlen *v) {
    double a = v->sxx[0][0] + DRAFT_RIDGE, b = v->sxx[0][1], d = v->sxx[1][1] + DRAFT_RIDGE;
    double y0 = v->sxy[0] + DRAFT_RIDGE * v->c0_slot, y1 = v->sxy[1] + DRAFT_RIDGE * v->c0_row;
    double det = a * d - b * b;
    if (!(det > 1e-12)) return;
    double cs = (d * y0 - b * y1) / det, cr = (a * y1 - b * y0) / det;
    if (cs < 0) cs = 0, cr = y1 / d; /* the best with c_slot = 0 */
    if (cr < 0) cr = 0, cs = y0 / a;
    v->c_slot = cs > 0 ? cs : 0;
    v->c_row = cr > 0 ? cr : 0;
}

void sp_srv_vlen_observe_draft(srv_vlen *v, int draft_slots, int draft_rows, double ms) {
    if (draft_slots <= 0 || draft_rows <= 0 || !(ms > 0) || !(v->load > 0)) return;
    double x[2] = {draft_slots, draft_rows}, y = ms / v->load;
    double model = v->c_slot * draft_slots + v->c_row * draft_rows;
    if (model > 0 && y > DRAFT_CLIP * model) y = DRAFT_CLIP * model;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 2; k++) v->sxx[i][k] = DRAFT_DECAY * v->sxx[i][k] + x[i] * x[k];
        v->sxy[i] = DRAFT_DECAY * v->sxy[i] + x[i] * y;
    }
    draft_fit(v);
}

void sp_srv_vlen_observe_wake(srv_vlen *v, int rows, double ms) {
    if (rows < 16 || !(ms > 0) || !(v->load > 0)) return; /* short contexts: fixed costs dominate */
    v->c_ctx = 0.8 * v->c_ctx + 0.2 * clampd(ms / v->load / rows, 0.2 * v->c_ctx, 5 * v->c_ctx);
}

void sp_srv_vlen_observe_round(srv_vlen *v, int nd, int acc) {
    for (int k = 1; k <= nd && k <= SP_SPEC_MAX_G; k++) v->offered[k]++;
    for (int k = 1; k <= acc && k <= SP_SPEC_MAX_G; k++) v->reached[k]++;
}

typedef double slot_row[SP_SPEC_MAX_G + 1];

/* the model's ms of a step verifying g (vlen.h), less the prompt chunks' own forward (work the step
 * does whatever g is: only what the decode rows add is theirs); W[i][g]: slot i's own drafting ms */
static double step_ms(const srv_vlen *v, int n, const int *g, const slot_row *W, int base_rows) {
    int rows = base_rows, R = 0;
    double own = 0;
    for (int i = 0; i < n; i++) rows += g[i] + 1, R += g[i], own += W[i][g[i]];
    return sp_srv_vlen_forward_ms(v, rows) - sp_srv_vlen_forward_ms(v, base_rows) + own + v->load * v->c_row * R;
}

static double step_tokens(int n, const int *g, const slot_row *E) {
    double t = 0;
    for (int i = 0; i < n; i++) t += E[i][g[i]];
    return t;
}

/* max over g of tokens(g) - J · ms(g), the fixed slots at their room (a dynamic programme over the
 * free slots on their total draft count R: ms depends on the assignment only through R and a sum
 * of per-slot terms). The maximiser goes to g. */
static void best_for(const srv_vlen *v, int n, const int *room, const int *fixed, const slot_row *E, const slot_row *W,
                     int base_rows, double J, int Rmax, double *dp, double *nx, int *pick, int *g) {
    int rows0 = base_rows + n, R0 = 0;
    double e0 = 0, w0 = 0;
    for (int i = 0; i < n; i++)
        if (fixed[i]) rows0 += room[i], R0 += room[i], e0 += E[i][room[i]], w0 += W[i][room[i]];
    /* dp[R]: best Σ (E_i(g_i) - J·W_i(g_i)) over the free slots so far with Σ g_i = R */
    for (int R = 0; R <= Rmax; R++) dp[R] = R ? -INFINITY : 0;
    int top = 0;
    for (int i = 0; i < n; i++) {
        int *pk = pick + (size_t)i * (Rmax + 1);
        if (fixed[i]) {
            for (int R = 0; R <= Rmax; R++) pk[R] = 0;
            continue;
        }
        for (int R = 0; R <= Rmax; R++) nx[R] = -INFINITY, pk[R] = 0;
        for (int R = 0; R <= top; R++) {
            if (dp[R] == -INFINITY) continue;
            for (int c = 0; c <= room[i] && R + c <= Rmax; c++) {
                double val = dp[R] + E[i][c] - J * W[i][c];
                if (val > nx[R + c]) nx[R + c] = val, pk[R + c] = c;
            }
        }
        top += room[i];
        if (top > Rmax) top = Rmax;
        memcpy(dp, nx, sizeof(double) * (size_t)(Rmax + 1));
    }
    /* the R-dependent part: the forward over every row, the per-row drafting, the fixed slots' */
    int bestR = 0;
    double bestv = -INFINITY, fbase = sp_srv_vlen_forward_ms(v, base_rows);
    for (int R = 0; R <= top; R++) {
        if (dp[R] == -INFINITY) continue;
        double ms = sp_srv_vlen_forward_ms(v, rows0 + R) - fbase + w0 + v->load * v->c_row * (R0 + R);
        double val = dp[R] + e0 - J * ms;
        if (val > bestv) bestv = val, bestR = R;
    }
    for (int i = n - 1, R = bestR; i >= 0; i--) { /* walk the picks back */
        if (fixed[i]) {
            g[i] = room[i];
            continue;
        }
        g[i] = pick[(size_t)i * (Rmax + 1) + R];
        R -= g[i];
    }
}

void sp_srv_vlen_choose(const srv_vlen *v, int n, const int *room, const int *fixed, const long *const *offered,
                     const long *const *reached, const int *wake_rows, const int *left, int base_rows, int *g) {
    if (n <= 0) return;
    int Rmax = 0;
    for (int i = 0; i < n; i++) {
        g[i] = fixed[i] ? room[i] : 0;
        if (!fixed[i]) Rmax += room[i] < SP_SPEC_MAX_G ? room[i] : SP_SPEC_MAX_G;
    }
    slot_row *E = malloc(sizeof *E * (size_t)n), *W = malloc(sizeof *W * (size_t)n);
    double *dp = malloc(sizeof(double) * (size_t)(Rmax + 1) * 2);
    int *pick = malloc(sizeof(int) * (size_t)n * (size_t)(Rmax + 1));
    int *u = malloc(sizeof(int) * (size_t)n), *rm = malloc(sizeof(int) * (size_t)n);
    if (!E || !W || !dp || !pick || !u || !rm) goto done; /* no model: plain for the free slots */
    /* expected tokens E[i][g]: acceptance of at least k drafts, never rising with k */
    for (int i = 0; i < n; i++) {
        double p = 1, e = 1, prior = 1;
        E[i][0] = 1;
        for (int k = 1; k <= SP_SPEC_MAX_G; k++) {
            /* server-wide rate, itself shrunk towards an optimistic 0.8^k so new servers try drafting */
            prior *= 0.8;
            double pk = (v->reached[k] + 2.0 * prior) / (v->offered[k] + 2.0);
            if (offered && offered[i]) pk = (reached[i][k] + PRIOR_ROUNDS * pk) / (offered[i][k] + PRIOR_ROUNDS);
            p = pk < p ? pk : p;
            e += p;
            E[i][k] = e;
            /* the slot's own drafting: its share c_slot, and a dormant drafter's begin over its
             * context, spread over the rounds left to the request at this rate */
            double wake = wake_rows && wake_rows[i] > 0 ? v->c_ctx * wake_rows[i] : 0;
            double rounds = left && left[i] > e ? left[i] / e : 1;
            W[i][k] = v->load * (v->c_slot + wake / rounds);
        }
        W[i][0] = 0;
        rm[i] = room[i] < SP_SPEC_MAX_G ? room[i] : SP_SPEC_MAX_G;
    }
    /* Dinkelbach: from plain decoding, J = tokens / ms of the best so far; the assignment that
     * maximises tokens - J·ms has a higher J unless J is already the maximum */
    double J = step_tokens(n, g, E) / step_ms(v, n, g, W, base_rows);
    for (int it = 0; it < 32 && J > 0; it++) {
        best_for(v, n, rm, fixed, E, W, base_rows, J, Rmax, dp, dp + Rmax + 1, pick, u);
        double j = step_tokens(n, u, E) / step_ms(v, n, u, W, base_rows);
        if (!(j > J * (1 + GAIN_MIN))) break;
        J = j;
        memcpy(g, u, sizeof(int) * (size_t)n);
    }
done:
    free(E), free(W), free(dp), free(pick), free(u), free(rm);
}
