/* schedule.c — verify-length schedulers and the SPS table (see schedule.h; docs/DSPARK.md §10). */
#include "decode/schedule.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"

double sp_sps_at(const sp_sps_table *t, int b) {
    if (t->n < 1) return 0;
    if (b < 1) b = 1;
    if (b <= t->n) return t->sps[b];
    return t->sps[t->n] * t->n / b;
}

void sp_sched_begin(sp_sched *s, const sp_sps_table *t) {
    memset(s, 0, sizeof *s);
    s->t = t;
    s->R = 1;
    s->a = 1;
    s->bt = 1;
    s->tau = 1;
    s->best = sp_sps_at(t, 1);
}

int sp_sched_admit(sp_sched *s, double c) {
    if (s->stopped) return 0;
    double a = s->a * c;
    if (!(a > 0)) return s->stopped = 1, 0;
    double theta = (s->tau + a) * sp_sps_at(s->t, s->bt + 1);
    if (!(theta > s->best)) return s->stopped = 1, 0; /* the early stop (required) */
    s->a = a;
    s->tau += a;
    s->bt++;
    s->best = theta;
    s->len++;
    return 1;
}

typedef struct {
    double a;
    int r, j;
} cand;

static int cand_cmp(const void *x, const void *y) {
    const cand *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? 1 : -1;
    if (p->j != q->j) return p->j - q->j; /* equal a: the earlier slot first (keeps prefixes) */
    return p->r - q->r;
}

void sp_sched_prefix(int R, int B, const double *c, const sp_sps_table *t, int *len) {
    cand *e = malloc(sizeof(cand) * (size_t)(R > 0 && B > 0 ? R * B : 1));
    int ne = 0;
    for (int r = 0; r < R; r++) {
        len[r] = 0;
        double a = 1;
        for (int j = 1; j <= B; j++) {
            a *= c[r * B + j - 1];
            if (a > 0 && e) e[ne++] = (cand){a, r, j};
        }
    }
    if (!e) return; /* out of memory: verify no drafts (always lossless) */
    qsort(e, (size_t)ne, sizeof *e, cand_cmp);
    int bt = R;
    double tau = R, best = R * sp_sps_at(t, R);
    for (int i = 0; i < ne; i++) {
        bt++;
        tau += e[i].a;
        double theta = tau * sp_sps_at(t, bt);
        if (!(theta > best)) break;
        best = theta;
        len[e[i].r] = e[i].j; /* ℓ* = ℓ: every admitted slot so far */
    }
    free(e);
}

int sp_sched_retrospective(const double *c, int n, const sp_sps_table *t) {
    double a = 1, tau = 1, best = sp_sps_at(t, 1);
    int best_len = 0;
    for (int j = 1; j <= n; j++) {
        a *= c[j - 1];
        tau += a;
        double theta = tau * sp_sps_at(t, 1 + j);
        if (theta > best) best = theta, best_len = j; /* no early stop: looks past the first dip */
    }
    return best_len;
}

/* ---- profiling ---------------------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int sp_sps_profile(sp_model *m, int max_b, int reps, sp_sps_table *t, sp_err *err) {
    if (max_b < 1 || max_b > SP_SPS_MAX) return sp_err_set(err, "sps: width %d out of range 1..%d", max_b, SP_SPS_MAX);
    if (reps < 1) reps = 1;
    if (reps > 32) reps = 32;
    const sp_config *c = sp_model_config(m);
    int ctx = 64;
    sp_kv *kv = sp_kv_create(m, ctx + max_b + 1, ctx > max_b ? ctx : max_b, err);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(ctx > max_b ? ctx : max_b));
    float *logits = malloc(sizeof(float) * (size_t)max_b * c->vocab_size);
    int rc = -1;
    if (!kv || !tok || !logits) {
        if (kv) sp_err_set(err, "sps: out of memory");
        goto done;
    }
    for (int i = 0; i < ctx || i < max_b; i++) tok[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    sp_forward_out o0 = {0};
    if (sp_model_forward(m, kv, tok, ctx, &o0, err)) goto done;
    t->n = max_b;
    for (int b = 1; b <= max_b; b++) {
        double ms[32];
        for (int r = 0; r < reps; r++) {
            sp_forward_out o = {.logits = logits}; /* a verify forward returns every row's logits */
            double t0 = sp_time_ms();
            if (sp_model_forward(m, kv, tok, b, &o, err)) goto done;
            ms[r] = sp_time_ms() - t0;
            if (sp_kv_trim(kv, b, err)) goto done;
        }
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
        double med = ms[reps / 2] > 1e-6 ? ms[reps / 2] : 1e-6;
        t->sps[b] = 1000.0 / med;
    }
    rc = 0;
done:
    sp_kv_free(kv);
    free(tok);
    free(logits);
    return rc;
}

static uint64_t fnv1a(const char *s, uint64_t h) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

int sp_sps_cached(sp_model *m, const char *model_dir, int max_b, sp_sps_table *t, char *path_out, size_t cap,
                  sp_err *err) {
    char real[PATH_MAX], dir[4096], path[4200], key[128];
    if (!realpath(model_dir, real)) snprintf(real, sizeof real, "%s", model_dir);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/specula", xdg);
    else snprintf(dir, sizeof dir, "%s/.cache/specula", home && *home ? home : "/tmp");
    /* the table is a property of this model, thread count AND this build of the kernels: the
     * running binary's size and mtime key it, so a rebuilt (faster or slower) engine profiles again */
    struct stat exe = {0};
    if (stat("/proc/self/exe", &exe)) exe.st_size = 0, exe.st_mtime = 0;
    snprintf(key, sizeof key, "%zu-t%d-%lld-%lld", sp_model_weight_bytes(m), sp_model_threads(m),
             (long long)exe.st_size, (long long)exe.st_mtime);
    uint64_t h = fnv1a(key, fnv1a(real, 0xcbf29ce484222325ull));
    snprintf(path, sizeof path, "%s/sps-%016llx.json", dir, (unsigned long long)h);
    if (path_out) snprintf(path_out, cap, "%s", path);
    char *text = NULL;
    size_t n;
    if (sp_file_exists(path) && !sp_read_file(path, &text, &n, NULL)) {
        json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, NULL), *a = json_object_get(root, "sps");
        free(text);
        int ok = json_is_array(a) && (int)json_array_size(a) >= max_b && json_array_size(a) <= SP_SPS_MAX;
        for (size_t i = 0; ok && i < json_array_size(a); i++) {
            double v = json_number_value(json_array_get(a, i));
            ok = v > 0;
            t->sps[i + 1] = v;
        }
        if (ok) t->n = (int)json_array_size(a);
        json_decref(root);
        if (ok) return 0;
        sp_log(SP_LOG_WARN, "%s: stale or malformed SPS table, profiling again", path);
    }
    if (sp_sps_profile(m, max_b, 5, t, err)) return -1;
    json_t *root = json_object(), *a = json_array();
    for (int b = 1; b <= t->n; b++) json_array_append_new(a, json_real(t->sps[b]));
    json_object_set_new(root, "model", json_string(real));
    json_object_set_new(root, "threads", json_integer(sp_model_threads(m)));
    json_object_set_new(root, "sps", a);
    char *out = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (!out) return sp_err_set(err, "out of memory");
    int rc = sp_mkdir_p(dir, err) || sp_write_file_atomic(path, out, strlen(out), err) ? -1 : 0;
    free(out);
    if (rc) sp_log(SP_LOG_WARN, "could not cache the SPS table in %s: %s", path, err ? err->msg : "");
    return 0; /* the table is good even when caching failed */
}
