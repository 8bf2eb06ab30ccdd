/* cpu.c — run-time detection of the SIMD tier (see cpu.h). */
#include "cpu.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

static unsigned detect_features(void) {
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= SP_CPU_HAS_AVX2;
    if ((f & SP_CPU_HAS_AVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        f |= SP_CPU_HAS_AVX512;
    if ((f & SP_CPU_HAS_AVX512) && __builtin_cpu_supports("avx512vnni")) f |= SP_CPU_HAS_AVX512_VNNI;
    if ((f & SP_CPU_HAS_AVX512) && __builtin_cpu_supports("avx512bf16")) f |= SP_CPU_HAS_AVX512_BF16;
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
    if ((f & SP_CPU_HAS_AVX2) && __builtin_cpu_supports("avxvnni")) f |= SP_CPU_HAS_AVX_VNNI;
#endif
#elif defined(__aarch64__)
    f |= SP_CPU_HAS_NEON; /* Advanced SIMD is mandatory on AArch64 */
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    if (hw & HWCAP_ASIMDDP) f |= SP_CPU_HAS_DOTPROD;
#elif defined(__APPLE__)
    f |= SP_CPU_HAS_DOTPROD; /* every Apple-silicon core has it */
#endif
#endif
    return f;
}

static sp_cpu_tier best_tier(unsigned f) {
    if (f & SP_CPU_HAS_AVX512) return SP_CPU_AVX512;
    if (f & SP_CPU_HAS_AVX2) return SP_CPU_AVX2;
    if (f & SP_CPU_HAS_NEON) return SP_CPU_NEON;
    return SP_CPU_SCALAR;
}

static atomic_uint g_features;     /* detected bits | 1u << 31 once set */
static atomic_int g_tier = -1;     /* -1: not decided yet */

unsigned sp_cpu_features(void) {
    unsigned f = atomic_load(&g_features);
    if (!(f & (1u << 31))) {
        f = detect_features() | (1u << 31);
        atomic_store(&g_features, f);
    }
    return f & ~(1u << 31);
}

static int tier_supported(sp_cpu_tier t, unsigned f) {
    switch (t) {
    case SP_CPU_SCALAR: return 1;
    case SP_CPU_AVX2: return (f & SP_CPU_HAS_AVX2) != 0;
    case SP_CPU_AVX512: return (f & SP_CPU_HAS_AVX512) != 0;
    case SP_CPU_NEON: return (f & SP_CPU_HAS_NEON) != 0;
    }
    return 0;
}

sp_cpu_tier sp_cpu_level(void) {
    int t = atomic_load(&g_tier);
    if (t >= 0) return (sp_cpu_tier)t;
    unsigned f = sp_cpu_features();
    sp_cpu_tier best = best_tier(f), pick = best;
    const char *env = getenv("SPECULA_CPU");
    if (env && *env) {
        static const struct { const char *name; sp_cpu_tier t; } names[] = {
            {"scalar", SP_CPU_SCALAR}, {"avx2", SP_CPU_AVX2}, {"avx512", SP_CPU_AVX512}, {"neon", SP_CPU_NEON}};
        int found = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(env, names[i].name)) {
                found = 1;
                /* a cap: the asked tier when the processor has it, else the best it has */
                if (tier_supported(names[i].t, f) && (names[i].t == SP_CPU_SCALAR || names[i].t <= best))
                    pick = names[i].t;
            }
        if (!found) fprintf(stderr, "specula: warning: SPECULA_CPU=%s is not scalar, avx2, avx512 or neon; ignored\n", env);
    }
    int expect = -1;
    atomic_compare_exchange_strong(&g_tier, &expect, (int)pick);
    return (sp_cpu_tier)atomic_load(&g_tier);
}

int sp_cpu_force(sp_cpu_tier t) {
    if (!tier_supported(t, sp_cpu_features())) return -1;
    atomic_store(&g_tier, (int)t);
    return 0;
}

const char *sp_cpu_tier_name(sp_cpu_tier t) {
    switch (t) {
    case SP_CPU_SCALAR: return "scalar";
    case SP_CPU_AVX2: return "avx2";
    case SP_CPU_AVX512: return "avx512";
    case SP_CPU_NEON: return "neon";
    }
    return "?";
}
