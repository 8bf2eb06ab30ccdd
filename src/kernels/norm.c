/* norm.c — RMSNorm over rows (docs/TRANSFORMER.md §3, §5).
 *
 *   y = x · (mean(x²) + eps)^(-1/2) [· w]
 * computed in f32: the sum of squares is the canonical 16-lane dot of x with itself (so a row's
 * result never depends on T, on the other rows or on the tier), r = 1 / sqrtf(ss / n + eps),
 * then y = (x · r) · w as HF does (normalise, then scale). w == NULL is the weightless variant
 * (Gemma-4 v_norm). No (1 + w) offset: Gemma-2/3 style norms are not used by our targets. */
#include "kernels_internal.h"

float sp_dot_f32(const float *x, const float *w, int K) {
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: return sp_dot_f32_avx512(x, w, K);
    case SP_CPU_AVX2: return sp_dot_f32_avx2(x, w, K);
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: return sp_dot_f32_neon(x, w, K);
#endif
    default: return sp_dot_f32_portable(x, w, K);
    }
}

void sp_rmsnorm(float *y, const float *x, const float *w, int T, int n, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        float *yr = y + (size_t)t * n;
        float ss = sp_dot_f32(xr, xr, n);
        float r = 1.0f / sqrtf(ss / (float)n + eps);
        if (w)
            for (int i = 0; i < n; i++) yr[i] = (xr[i] * r) * w[i];
        else
            for (int i = 0; i < n; i++) yr[i] = xr[i] * r;
    }
}

void sp_rmsnorm_ref(float *y, const float *x, const float *w, int T, int n, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        float *yr = y + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        double r = 1.0 / sqrt(ss / n + (double)eps);
        for (int i = 0; i < n; i++) yr[i] = (float)(xr[i] * r * (w ? (double)w[i] : 1.0));
    }
}
