/* cpu.h — which SIMD path the kernels take, decided once at run time.
 *
 * One x86-64 binary carries a portable scalar path, an AVX2+FMA path and an AVX-512 path;
 * an aarch64 binary carries the scalar path and a NEON path. Kernels ask sp_cpu_level() and
 * call the variant for that tier; every variant of a kernel gives the same bits (the
 * canonical reductions of src/kernels/kernels_internal.h), so the tier changes speed only.
 *
 * Source files named *_avx512.c, *_avx2.c and *_neon.c are compiled with that instruction set
 * enabled (see the Makefile) and must only be entered after the matching tier is selected.
 *
 * The environment variable SPECULA_CPU=scalar|avx2|avx512|neon caps the tier (it never raises
 * it above what the processor supports), so the AVX2 and scalar paths can be tested on an
 * AVX-512 machine. */
#ifndef SPECULA_CPU_H
#define SPECULA_CPU_H

typedef enum {
    SP_CPU_SCALAR = 0, /* portable C, the reference the others must equal */
    SP_CPU_AVX2 = 1,   /* x86-64: AVX2 + FMA + F16C */
    SP_CPU_AVX512 = 2, /* x86-64: AVX-512 F/BW/VL/DQ (VNNI and BF16 reported separately) */
    SP_CPU_NEON = 3    /* aarch64: Advanced SIMD (dotprod reported separately) */
} sp_cpu_tier;

/* processor features, as detected (not capped by SPECULA_CPU) */
enum {
    SP_CPU_HAS_AVX2 = 1 << 0, /* AVX2, FMA and F16C together */
    SP_CPU_HAS_AVX512 = 1 << 1, /* AVX-512 F, BW, VL and DQ together */
    SP_CPU_HAS_AVX512_VNNI = 1 << 2,
    SP_CPU_HAS_AVX512_BF16 = 1 << 3,
    SP_CPU_HAS_AVX_VNNI = 1 << 4, /* VEX-encoded VNNI (Alder Lake and later) */
    SP_CPU_HAS_NEON = 1 << 5,
    SP_CPU_HAS_DOTPROD = 1 << 6, /* aarch64 SDOT/UDOT */
};

/* Detected feature bits (SP_CPU_HAS_*). Thread-safe; detection runs once. */
unsigned sp_cpu_features(void);
/* The tier in use: the best the processor supports, capped by SPECULA_CPU (an unknown value
 * is ignored with a warning on stderr). Thread-safe; decided once, unless sp_cpu_force. */
sp_cpu_tier sp_cpu_level(void);
/* Tests and benchmarks: use tier t from now on. Returns 0, or -1 (tier unchanged) when the
 * processor lacks it. Not thread-safe against kernels running at the same time. */
int sp_cpu_force(sp_cpu_tier t);
const char *sp_cpu_tier_name(sp_cpu_tier t);

#endif
