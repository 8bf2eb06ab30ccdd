/* fixtures.h — the random-weight reference fixtures (tests/data/ref-logits/{llama,qwen3,gemma4})
 * and the prompt the speculative tests share. Static inline functions. */
#ifndef SPECULA_TESTS_FIXTURES_H
#define SPECULA_TESTS_FIXTURES_H

#include <stdint.h>
#include <stdio.h>

#include "specula.h"

/* the fixture of arch ("llama", "qwen3", "gemma4") on 2 threads, or NULL (reason on stderr) */
static inline sp_model *fixture_load(const char *arch) {
    char dir[256];
    sp_err err = {{0}};
    sp_model *m;
    snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", arch);
    if (sp_model_load(&m, dir, 2, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return NULL;
    }
    return m;
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
