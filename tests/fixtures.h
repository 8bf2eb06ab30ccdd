/* fixtures.h — the random-weight reference fixtures (tests/data/ref-logits/{llama,qwen3,gemma4})
 * and the prompt the speculative tests share. Static inline functions. */
#ifndef SPECULA_TESTS_FIXTURES_H
#define SPECULA_TESTS_FIXTURES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "specula.h"

/* the model in dir on threads threads, or NULL (reason on stderr) */
static inline sp_model *fixture_load_dir(const char *dir, int threads) {
    sp_err err = {{0}};
    sp_model *m;
    if (sp_model_load(&m, dir, threads, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return NULL;
    }
    return m;
}

/* the fixture of arch ("llama", "qwen3", "gemma4", ...) on 2 threads, or NULL (reason on stderr) */
static inline sp_model *fixture_load(const char *arch) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", arch);
    return fixture_load_dir(dir, 2);
}

/* the first max token ids of a fixture's tokens.json (in dir); the count, -1 when unreadable */
static inline int fixture_tokens(const char *dir, int32_t *tok, int max) {
    char path[512], *text;
    snprintf(path, sizeof path, "%s/tokens.json", dir);
    if (sp_read_file(path, &text, NULL, NULL)) return -1;
    int n = 0;
    for (char *p = text; *p && n < max;) {
        if (*p >= '0' && *p <= '9') tok[n++] = (int32_t)strtol(p, &p, 10);
        else p++;
    }
    free(text);
    return n;
}

/* relative max error of [ntok, V] logits against the reference; argmax misses counted */
static inline double fixture_compare(const float *got, const float *ref, int ntok, int V, int *miss) {
    double maxref = 0, maxd = 0;
    *miss = 0;
    for (size_t i = 0; i < (size_t)ntok * V; i++) {
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
        if (fabs((double)got[i] - ref[i]) > maxd) maxd = fabs((double)got[i] - ref[i]);
    }
    for (int t = 0; t < ntok; t++)
        if (sp_argmax(got + (size_t)t * V, V) != sp_argmax(ref + (size_t)t * V, V)) (*miss)++;
    return maxd / maxref;
}

/* a fixture's reference check: its ntok tokens run as one prefill and as ntok single steps, each
 * compared with logits.ref.f32 in dir (relative max error, argmax misses); bitwise: prefill ==
 * steps bit for bit */
typedef struct {
    double rel_pre, rel_step;
    int miss_pre, miss_step, bitwise;
} fixture_ref;

/* 0, or -1 with the reason in msg */
static inline int fixture_ref_logits(const char *dir, int threads, int ntok, fixture_ref *r, char *msg, size_t cap) {
    char path[512], *ref = NULL;
    size_t nref = 0;
    int32_t tok[256];
    sp_err err = {{0}};
    sp_model *m = fixture_load_dir(dir, threads);
    if (!m) return snprintf(msg, cap, "load %.300s", dir), -1;
    size_t n = (size_t)ntok * (size_t)sp_model_config(m)->vocab_size;
    snprintf(path, sizeof path, "%s/logits.ref.f32", dir);
    float *pre = malloc(n * 4), *step = malloc(n * 4);
    sp_kv *kv = sp_kv_create(m, 64, ntok, &err), *kv1 = kv ? sp_kv_create(m, 64, 1, &err) : NULL;
    int rc = -1;
    if (ntok > 256 || fixture_tokens(dir, tok, ntok) != ntok) snprintf(msg, cap, "%.300s: tokens", dir);
    else if (sp_read_file(path, &ref, &nref, NULL) || nref != n * 4) snprintf(msg, cap, "%.300s: reference logits", path);
    else if (!pre || !step || !kv1) snprintf(msg, cap, "out of memory (%.300s)", err.msg);
    else if (sp_model_forward(m, kv, tok, ntok, &(sp_forward_out){.logits = pre}, &err))
        snprintf(msg, cap, "prefill: %.300s", err.msg);
    else {
        int t = 0, V = (int)(n / (size_t)ntok);
        while (t < ntok && !sp_model_forward(m, kv1, tok + t, 1, &(sp_forward_out){.logits = step + (size_t)t * V}, &err))
            t++;
        if (t < ntok) snprintf(msg, cap, "step %d: %.300s", t, err.msg);
        else {
            r->rel_pre = fixture_compare(pre, (const float *)ref, ntok, V, &r->miss_pre);
            r->rel_step = fixture_compare(step, (const float *)ref, ntok, V, &r->miss_step);
            r->bitwise = memcmp(pre, step, n * 4) == 0;
            rc = 0;
        }
    }
    sp_kv_free(kv);
    sp_kv_free(kv1);
    free(pre), free(step), free(ref);
    sp_model_free(m);
    return rc;
}

/* 21 ids with repeats (a 7-token cycle three times): longer than the gemma fixture's sliding
 * window (8), so generation wraps the ring; returns the count */
static inline int fixture_prompt(int32_t *p, int V) {
    int n = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 7; i++) p[n++] = (int32_t)((i * 977 + 31) % V);
    return n;
}

#endif
