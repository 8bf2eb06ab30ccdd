/* calibrate.c — STS calibration of DSpark confidences (see calibrate.h; docs/DSPARK.md §9). */
#include "decode/calibrate.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define ECE_BINS 20
#define GRID 161

void sp_sts_data_init(sp_sts_data *d, int B) {
    memset(d, 0, sizeof *d);
    d->B = B;
}

void sp_sts_data_free(sp_sts_data *d) {
    free(d->z);
    free(d->len);
    free(d->acc);
    memset(d, 0, sizeof *d);
}

int sp_sts_data_add(sp_sts_data *d, const float *z, int n, int n_acc) {
    if (n < 0 || n > d->B || n_acc < 0 || n_acc > n) return -1;
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 1024;
        float *zz = realloc(d->z, sizeof(float) * (size_t)cap * d->B);
        if (zz) d->z = zz;
        uint8_t *l = zz ? realloc(d->len, (size_t)cap) : NULL;
        if (l) d->len = l;
        uint8_t *a = l ? realloc(d->acc, (size_t)cap) : NULL;
        if (a) d->acc = a;
        if (!a) return -1;
        d->cap = cap;
    }
    memcpy(d->z + (size_t)d->n * d->B, z, sizeof(float) * (size_t)n);
    d->len[d->n] = (uint8_t)n;
    d->acc[d->n] = (uint8_t)n_acc;
    d->n++;
    return 0;
}

double sp_ece(const double *pred, const uint8_t *y, int n) {
    double sp[ECE_BINS] = {0}, sy[ECE_BINS] = {0};
    int cnt[ECE_BINS] = {0};
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++) {
        int b = (int)(pred[i] * ECE_BINS);
        if (b >= ECE_BINS) b = ECE_BINS - 1;
        if (b < 0) b = 0;
        sp[b] += pred[i];
        sy[b] += y[i];
        cnt[b]++;
    }
    double e = 0;
    for (int b = 0; b < ECE_BINS; b++)
        if (cnt[b]) e += fabs(sp[b] - sy[b]) / n; /* (n_b/N)·|mean pred − mean label| */
    return e;
}

static double sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

int sp_sts_fit(const sp_sts_data *d, float *T, double *ece_before, double *ece_after, sp_err *err) {
    int B = d->B, n = d->n;
    double *prefix = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));     /* Π_{i<k} c_i, calibrated */
    double *raw = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));        /* Π_{i<k} σ(z_i), raw */
    double *pred = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    uint8_t *y = malloc((size_t)(n > 0 ? n : 1));
    int *rows = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!prefix || !raw || !pred || !y || !rows) {
        free(prefix), free(raw), free(pred), free(y), free(rows);
        return sp_err_set(err, "calibrate: out of memory");
    }
    for (int i = 0; i < n; i++) prefix[i] = raw[i] = 1;
    for (int k = 1; k <= B; k++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (d->len[i] >= k) {
                rows[m] = i;
                y[m] = d->acc[i] >= k;
                m++;
            }
        T[k - 1] = 1.0f;
        if (m == 0) {
            if (ece_before) ece_before[k - 1] = 0;
            if (ece_after) ece_after[k - 1] = 0;
            continue;
        }
        for (int j = 0; j < m; j++) pred[j] = raw[rows[j]] * sigmoid(d->z[(size_t)rows[j] * B + k - 1]);
        if (ece_before) ece_before[k - 1] = sp_ece(pred, y, m);
        double best = INFINITY, bestT = 1;
        for (int g = 0; g < GRID; g++) {
            double t = SP_STS_T_MIN * pow(SP_STS_T_MAX / SP_STS_T_MIN, (double)g / (GRID - 1));
            for (int j = 0; j < m; j++) pred[j] = prefix[rows[j]] * sigmoid(d->z[(size_t)rows[j] * B + k - 1] / t);
            double e = sp_ece(pred, y, m);
            if (e < best - 1e-12 || (fabs(e - best) <= 1e-12 && fabs(log(t)) < fabs(log(bestT)))) best = e, bestT = t;
        }
        T[k - 1] = (float)bestT;
        if (ece_after) ece_after[k - 1] = best;
        for (int j = 0; j < m; j++) { /* fix T_k for the later slots */
            const float zz = d->z[(size_t)rows[j] * B + k - 1];
            prefix[rows[j]] *= sigmoid(zz / bestT);
            raw[rows[j]] *= sigmoid(zz);
        }
    }
    free(prefix), free(raw), free(pred), free(y), free(rows);
    return 0;
}

int sp_sts_write(const char *dir, const float *T, int B, sp_err *err) {
    char path[4200];
    if (sp_path_join(path, sizeof path, dir, "sts.json")) return sp_err_set(err, "calibrate: path too long");
    json_t *root = json_object(), *a = json_array();
    for (int k = 0; k < B; k++) json_array_append_new(a, json_real(T[k]));
    json_object_set_new(root, "temperatures", a);
    json_object_set_new(root, "method", json_string("STS, docs/DSPARK.md §9: c_k = sigmoid(z_k / T_k)"));
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text) return sp_err_set(err, "calibrate: out of memory");
    int rc = sp_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}
