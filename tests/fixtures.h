/* fixtures.h — the random-weight reference fixtures (tests/data/ref-logits/{llama,qwen3,gemma4})
 * and the prompt the speculative tests share. Static inline functions. */
#ifndef SPECULA_TESTS_FIXTURES_H
#define SPECULA_TESTS_FIXTURES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

/* 21 ids with repeats (a 7-token cycle three times): longer than the gemma fixture's sliding
 * window (8), so generation wraps the ring; returns the count */
static inline int fixture_prompt(int32_t *p, int V) {
    int n = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 7; i++) p[n++] = (int32_t)((i * 977 + 31) % V);
    return n;
}

#endif
