/* vlen.c — batch-aware verify lengths (see vlen.h): the forward-cost table, its calibration, and
 * the choice of each slot's draft count. */
#include "server/vlen.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define CALIB_CTX 64     /* context the calibration forwards attend to */
#define PRIOR_ROUNDS 4.0 /* weight of the server-wide rate in a slot's acceptance estimate */

static double clampd(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

int srv_vlen_init(srv_vlen *v, sp_model *m, sp_kv *scratch, float *logits, int calib_rows, int n_rows, sp_err *err) {
    memset(v, 0, sizeof *v);
    if (calib_rows < 1 || n_rows < calib_rows)
        return sp_err_set(err, "server: verify-cost table of %d rows calibrated to %d", n_rows, calib_rows);
    int V = sp_model_config(m)->vocab_size;
    v->n_rows = n_rows;
    v->load = 1.0;
    v->kappa = 0.35; /* until the first proposals are timed */
    v->fwd = calloc((size_t)n_rows + 1, sizeof *v->fwd);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(CALIB_CTX + calib_rows));
    sp_kv *kv = sp_kv_create(m, CALIB_CTX + calib_rows, CALIB_CTX > calib_rows ? CALIB_CTX : calib_rows, err);
    int rc = 0;
    if (!v->fwd || !tok || !kv) {
        rc = kv ? sp_err_set(err, "server: out of memory for the verify-cost table") : -1;
        goto done;
    }
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < CALIB_CTX + calib_rows; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)V);
    }
    if ((rc = sp_model_forward(m, kv, tok, CALIB_CTX, NULL, err))) goto done;
    /* measured points 1, 4, 8, 16, 32, ... calib_rows (the curve is flat while the weights'
     * traffic dominates, then close to linear); the table interpolates between them */
    int pts[40], np = 0;
    for (int r = 1; r < calib_rows && np < 39; r = r < 4 ? 4 : 2 * r) pts[np++] = r;
    pts[np++] = calib_rows;
    /* two sweeps over every point, the fastest of each: a burst of other load spoils one
     * sweep's figure of a point, not the curve's shape */
    double ms[40];
    for (int i = 0; i < np; i++) ms[i] = 1e30;
    for (int rep = 0; rep < 2; rep++)
        for (int i = 0; i < np; i++) {
            sp_forward_out out = {.logits = logits};
            sp_forward_seq seq = {kv, tok + CALIB_CTX, pts[i], &out};
            double t0 = sp_time_ms();
            if ((rc = sp_model_forward_batch(m, scratch, &seq, 1, err)) || (rc = sp_kv_trim(kv, pts[i], err))) goto done;
            double t = sp_time_ms() - t0;
            if (t < ms[i]) ms[i] = t;
        }
    for (int i = 1; i < np; i++)
        if (ms[i] < ms[i - 1]) ms[i] = ms[i - 1]; /* more rows never cost less */
    for (int r = 1, i = 0; r <= n_rows; r++) {
        while (i + 1 < np && pts[i + 1] < r) i++;
        if (r <= pts[0]) v->fwd[r] = ms[0];
        else if (i + 1 < np) v->fwd[r] = ms[i] + (ms[i + 1] - ms[i]) * (r - pts[i]) / (pts[i + 1] - pts[i]);
        else { /* past the last point: the slope of the last segment */
            double slope = np > 1 ? (ms[np - 1] - ms[np - 2]) / (pts[np - 1] - pts[np - 2]) : ms[0];
            v->fwd[r] = ms[np - 1] + slope * (r - pts[np - 1]);
        }
    }
    sp_log(SP_LOG_DEBUG, "server: forward cost 1 row %.2f ms, %d rows %.2f ms, %d rows %.2f ms", v->fwd[1],
           calib_rows / 2 > 0 ? calib_rows / 2 : 1, v->fwd[calib_rows / 2 > 0 ? calib_rows / 2 : 1], calib_rows,
           v->fwd[calib_rows]);
done:
    free(tok);
    sp_kv_free(kv);
    if (rc) srv_vlen_free(v);
    return rc;
}

void srv_vlen_free(srv_vlen *v) {
    free(v->fwd);
    v->fwd = NULL;
}

static double table_ms(const srv_vlen *v, int rows) {
    if (rows <= 0) return 0;
    if (rows <= v->n_rows) return v->fwd[rows];
    return v->fwd[v->n_rows] * rows / v->n_rows;
}

double srv_vlen_forward_ms(const srv_vlen *v, int rows) { return v->load * table_ms(v, rows); }

void srv_vlen_observe_forward(srv_vlen *v, int rows, double ms) {
    double t = table_ms(v, rows);
    if (t > 0 && ms > 0) v->load = clampd(0.9 * v->load + 0.1 * ms / t, 0.2, 5.0);
}

void srv_vlen_observe_draft(srv_vlen *v, int draft_rows, double ms) {
    double t = srv_vlen_forward_ms(v, draft_rows);
    if (t > 0 && ms > 0) v->kappa = clampd(0.9 * v->kappa + 0.1 * ms / t, 0.02, 5.0);
}

void srv_vlen_observe_round(srv_vlen *v, int nd, int acc) {
    for (int k = 1; k <= nd && k <= SP_SPEC_MAX_G; k++) v->offered[k]++;
    for (int k = 1; k <= acc && k <= SP_SPEC_MAX_G; k++) v->reached[k]++;
}

/* J of the assignment g (vlen.h) */
static double objective(const srv_vlen *v, int n, const int *g, double (*E)[SP_SPEC_MAX_G + 1], int base_rows) {
    double tok = 0;
    int rows = base_rows, drows = 0;
    for (int i = 0; i < n; i++) {
        tok += E[i][g[i]];
        rows += g[i] + 1;
        drows += g[i];
    }
    double ms = srv_vlen_forward_ms(v, rows) + (drows ? v->kappa * srv_vlen_forward_ms(v, drows) : 0);
    return ms > 0 ? tok / ms : 0;
}

void srv_vlen_choose(const srv_vlen *v, int n, const int *room, const int *fixed, const long *const *offered,
                     const long *const *reached, int base_rows, int *g) {
    if (n <= 0) return;
    /* expected tokens E[i][g]: acceptance of at least k drafts, never rising with k */
    double(*E)[SP_SPEC_MAX_G + 1] = malloc(sizeof *E * (size_t)n);
    if (!E) { /* no model: plain for the free slots */
        for (int i = 0; i < n; i++) g[i] = fixed[i] ? room[i] : 0;
        return;
    }
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
        }
        g[i] = fixed[i] ? room[i] : 0;
    }
    /* start: the best of plain and every common g (drafting has a fixed cost that only many slots
     * drafting together amortise); then ascent: the single change of one slot's g that raises J
     * most, while one does */
    double best = objective(v, n, g, E, base_rows);
    int *u = malloc(sizeof(int) * (size_t)n);
    for (int c = 1; u && c <= SP_SPEC_MAX_G; c++) {
        for (int i = 0; i < n; i++) u[i] = fixed[i] ? room[i] : c < room[i] ? c : room[i];
        double j = objective(v, n, u, E, base_rows);
        if (j > best * 1.001) {
            best = j;
            memcpy(g, u, sizeof(int) * (size_t)n);
        }
    }
    free(u);
    for (int it = 0; it < n * (SP_SPEC_MAX_G + 1); it++) {
        int bi = -1, bg = 0;
        double bj = best * 1.001;
        for (int i = 0; i < n; i++) {
            if (fixed[i]) continue;
            int keep = g[i];
            for (int c = 0; c <= room[i]; c++) {
                if (c == keep) continue;
                g[i] = c;
                double j = objective(v, n, g, E, base_rows);
                if (j > bj) bj = j, bi = i, bg = c;
            }
            g[i] = keep;
        }
        if (bi < 0) break;
        g[bi] = bg;
        best = bj;
    }
    free(E);
}
