/* eagle3_fixtures.h — random EAGLE-3 drafters, in both layouts, for each reference fixture target
 * (fixtures.h): the set the EAGLE-3 chain and tree tests share. Static inline functions. */
#ifndef SPECULA_TESTS_EAGLE3_FIXTURES_H
#define SPECULA_TESTS_EAGLE3_FIXTURES_H

#include <stdint.h>
#include <stdio.h>

#include "formats/newdrafter.h"

static const char *const TARGETS[] = {"llama", "qwen3", "gemma4"};
static const char *const LAYOUTS[] = {"specforge", "deepspec"};

/* the drafter directory of (target, layout) under tmp */
static inline void e3_fixture_dir(char *out, size_t cap, const char *tmp, const char *target, const char *layout) {
    snprintf(out, cap, "%s/%s-%s", tmp, target, layout);
}

/* writes every (target, layout) drafter under tmp, layout l with seed seed0 + l; 0 or -1 */
static inline int e3_fixture_write(const char *tmp, uint64_t seed0) {
    for (int t = 0; t < 3; t++)
        for (int l = 0; l < 2; l++) {
            char dir[256], tdir[256];
            e3_fixture_dir(dir, sizeof dir, tmp, TARGETS[t], LAYOUTS[l]);
            snprintf(tdir, sizeof tdir, "tests/data/ref-logits/%s", TARGETS[t]);
            newdrafter_opts o = {.arch = "eagle3", .preset = LAYOUTS[l], .dtype = SP_DT_UNKNOWN, .seed = seed0 + l};
            sp_err err = {{0}};
            if (sp_newdrafter_write(dir, tdir, &o, &err)) {
                fprintf(stderr, "new drafter %s: %s\n", dir, err.msg);
                return -1;
            }
        }
    return 0;
}

#endif
