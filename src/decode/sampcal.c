/* sampcal.c — draft temperatures for sampled targets: the fit's statistics, the fit, and the
 * draft_temps.json file (see sampcal.h; docs/sampling.md). */
#include "decode/sampcal.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

double sp_sampcal_ratio(int k) {
    return pow(2.0, (k - (SP_SAMPCAL_GRID - 1) / 2) / 10.0);
}

/* ---- the file ------------------------------------------------------------------------------ */

int sp_sampcal_read(sp_sampcal *c, const char *path, sp_err *err) {
    char *text = NULL;
    size_t n;
    memset(c, 0, sizeof *c);
    if (sp_read_file(path, &text, &n, err)) return -1;
    json_error_t je;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) return sp_err_set(err, "%s: not JSON (line %d: %s)", path, je.line, je.text);
    json_t *t = json_object_get(root, "target_temperatures"), *d = json_object_get(root, "draft_temperatures");
    int rc = 0;
    size_t nt = json_array_size(t);
    if (!json_is_array(t) || nt < 1 || nt > SP_SAMPCAL_MAX_T) {
        rc = sp_err_set(err, "%s: expected \"target_temperatures\": [1..%d ascending numbers > 0]", path,
                        SP_SAMPCAL_MAX_T);
    } else if (!json_is_array(d) || json_array_size(d) != nt) {
        rc = sp_err_set(err, "%s: expected \"draft_temperatures\": one array per target temperature (%zu)", path, nt);
    }
    for (size_t i = 0; i < nt && !rc; i++) {
        json_t *e = json_array_get(t, i), *row = json_array_get(d, i);
        double v = json_number_value(e);
        if (!json_is_number(e) || !(v > 0) || !isfinite(v) || (i > 0 && !(v > c->t[i - 1]))) {
            rc = sp_err_set(err, "%s: target_temperatures[%zu] must be a number > 0 above the one before", path, i);
            break;
        }
        c->t[i] = (float)v;
        size_t B = json_array_size(row);
        if (!json_is_array(row) || B < 1 || B > SP_SAMPCAL_MAX_B || (i > 0 && (int)B != c->B)) {
            rc = sp_err_set(err, "%s: draft_temperatures[%zu] must be an array of 1..%d numbers, as long as the first",
                            path, i, SP_SAMPCAL_MAX_B);
            break;
        }
        c->B = (int)B;
        for (size_t j = 0; j < B; j++) {
            json_t *x = json_array_get(row, j);
            double w = json_number_value(x);
            if (!json_is_number(x) || !(w > 0) || !isfinite(w)) {
                rc = sp_err_set(err, "%s: draft_temperatures[%zu][%zu] must be a finite number > 0", path, i, j);
                break;
            }
            c->draft[i][j] = (float)w;
        }
    }
    if (!rc) c->n_t = (int)nt;
    else memset(c, 0, sizeof *c);
    json_decref(root);
    return rc;
}

static json_t *rows_json(const double (*a)[SP_SAMPCAL_MAX_B], int n_t, int B) {
    json_t *r = json_array();
    for (int i = 0; i < n_t; i++) {
        json_t *row = json_array();
        for (int j = 0; j < B; j++) json_array_append_new(row, json_real(round(a[i][j] * 1e4) / 1e4));
        json_array_append_new(r, row);
    }
    return r;
}

int sp_sampcal_write(const char *path, const sp_sampcal *c, const double (*acc_raw)[SP_SAMPCAL_MAX_B],
                     const double (*acc_fit)[SP_SAMPCAL_MAX_B], const double (*acc_onehot)[SP_SAMPCAL_MAX_B],
                     sp_err *err) {
    json_t *root = json_object(), *t = json_array(), *d = json_array();
    for (int i = 0; i < c->n_t; i++) {
        json_array_append_new(t, json_real(c->t[i]));
        json_t *row = json_array();
        for (int j = 0; j < c->B; j++) json_array_append_new(row, json_real(round(c->draft[i][j] * 1e4) / 1e4));
        json_array_append_new(d, row);
    }
    json_object_set_new(root, "target_temperatures", t);
    json_object_set_new(root, "draft_temperatures", d);
    json_object_set_new(root, "method",
                        json_string("per position j, the draft temperature maximising the mean "
                                    "sum_v min(p, q_j) on held-out prompts (docs/sampling.md)"));
    if (acc_raw) json_object_set_new(root, "accept_uncalibrated", rows_json(acc_raw, c->n_t, c->B));
    if (acc_fit) json_object_set_new(root, "accept_calibrated", rows_json(acc_fit, c->n_t, c->B));
    if (acc_onehot) json_object_set_new(root, "accept_onehot", rows_json(acc_onehot, c->n_t, c->B));
    char *text = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (!text) return sp_err_set(err, "%s: out of memory", path);
    int rc = sp_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

void sp_sampcal_draft_temps(const sp_sampcal *c, float T, int B, float *out) {
    for (int j = 0; j < B; j++) {
        if (!c || c->n_t < 1) {
            out[j] = T;
            continue;
        }
        int jj = j < c->B ? j : c->B - 1;
        double rho;
        if (T <= c->t[0]) {
            rho = c->draft[0][jj] / c->t[0];
        } else if (T >= c->t[c->n_t - 1]) {
            rho = c->draft[c->n_t - 1][jj] / c->t[c->n_t - 1];
        } else {
            int i = 0;
            while (T > c->t[i + 1]) i++;
            double a = (T - c->t[i]) / (c->t[i + 1] - c->t[i]);
            rho = (1 - a) * c->draft[i][jj] / c->t[i] + a * c->draft[i + 1][jj] / c->t[i + 1];
        }
        out[j] = (float)(rho * T);
    }
}

/* ---- the fit -------------------------------------------------------------------------------- */

int sp_sampcal_data_init(sp_sampcal_data *d, int B, int V, const sp_sample_params *sp, sp_err *err) {
    memset(d, 0, sizeof *d);
    if (B < 1 || B > SP_SAMPCAL_MAX_B) return sp_err_set(err, "calibrate: %d block positions (allowed 1..%d)", B, SP_SAMPCAL_MAX_B);
    if (sp_sample_is_greedy(sp)) return sp_err_set(err, "calibrate: draft temperatures need a sampling temperature > 0");
    d->B = B;
    d->V = V;
    d->T = sp->temperature;
    d->smp = sp_sampler_create(V, sp, err);
    if (!d->smp) return -1;
    d->Z = malloc(sizeof(float) * (size_t)B * V);
    d->q = malloc(sizeof(float) * (size_t)V);
    if (!d->Z || !d->q) {
        sp_sampcal_data_free(d);
        return sp_err_set(err, "calibrate: out of memory");
    }
    return 0;
}

void sp_sampcal_data_free(sp_sampcal_data *d) {
    sp_sampler_free(d->smp);
    free(d->Z);
    free(d->q);
    memset(d, 0, sizeof *d);
}

void sp_sampcal_data_logits(sp_sampcal_data *d, const float *Z, int n) {
    if (n > d->B) n = d->B;
    if (n < 0) n = 0;
    memcpy(d->Z, Z, sizeof(float) * (size_t)n * d->V);
    d->nz = n;
}

int sp_sampcal_data_verify(sp_sampcal_data *d, int i, const float *p, sp_err *err) {
    if (i < 0 || i >= d->nz) return sp_err_set(err, "calibrate: verified draft %d of a proposal of %d", i, d->nz);
    const float *Z = d->Z + (size_t)i * d->V;
    for (int k = 0; k < SP_SAMPCAL_GRID; k++) {
        if (sp_sampler_set_temperature(d->smp, (float)(sp_sampcal_ratio(k) * d->T), err) ||
            sp_sampler_probs(d->smp, d->q, Z, err))
            return -1;
        double a = 0;
        for (int v = 0; v < d->V; v++) a += p[v] < d->q[v] ? p[v] : d->q[v];
        d->alpha[i][k] += a;
    }
    d->onehot[i] += p[sp_sample_argmax(Z, d->V)];
    d->n[i]++;
    return 0;
}

/* the ratio with the largest Σ (ties: nearest ρ = 1) over the given sums */
static int best_ratio(const double *sum) {
    int mid = (SP_SAMPCAL_GRID - 1) / 2, best = mid;
    for (int k = 0; k < SP_SAMPCAL_GRID; k++)
        if (sum[k] > sum[best] + 1e-9 || (fabs(sum[k] - sum[best]) <= 1e-9 && abs(k - mid) < abs(best - mid)))
            best = k;
    return best;
}

void sp_sampcal_fit(const sp_sampcal_data *d, float *draft_t, double *acc_raw, double *acc_fit, double *acc_onehot) {
    int mid = (SP_SAMPCAL_GRID - 1) / 2;
    double all[SP_SAMPCAL_GRID] = {0};
    for (int j = 0; j < d->B; j++)
        for (int k = 0; k < SP_SAMPCAL_GRID; k++) all[k] += d->alpha[j][k];
    int kall = best_ratio(all);
    for (int j = 0; j < d->B; j++) {
        long n = d->n[j];
        int k = n >= SP_SAMPCAL_MIN_ROWS ? best_ratio(d->alpha[j]) : kall;
        draft_t[j] = (float)(sp_sampcal_ratio(k) * d->T);
        if (acc_raw) acc_raw[j] = n ? d->alpha[j][mid] / n : 0;
        if (acc_fit) acc_fit[j] = n ? d->alpha[j][k] / n : 0;
        if (acc_onehot) acc_onehot[j] = n ? d->onehot[j] / n : 0;
    }
}
