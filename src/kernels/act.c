/* act.c — element-wise activations, gated-MLP glue, softcap, softmax and argmax.
 *
 * All in f32, no tables: silu(x) = x / (1 + e^-x) (FORMATS §4.3), gelu_tanh(x) =
 * 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) (§5.3), with the lane-wise e^x (~1 ulp) and
 * tanh (~2 ulp) of kernels_internal.h rather than libm's: a verify pass over 8 tokens calls
 * them 8× as often, and scalar tanhf was ~20% of the embedded model's. Each element's result
 * depends only on that element, and every tier (act_avx512.c, act_avx2.c, act_neon.c, the
 * portable loops here) computes the same operations, so results are batch-invariant and the
 * same on every tier. sp_softmax's sum has a fixed order for a given n (16 lane sums + the
 * canonical tree). The _ref twins compute in double. */
#include <float.h>

#include "kernels_internal.h"

float sp_gelu_tanh(float x) {
    float inner = (float)SP_GELU_K * fmaf((float)SP_GELU_A * x, x * x, x);
    return 0.5f * x * (1.0f + sp_tanh_lane(inner));
}

void sp_silu_mul(float *out, const float *gate, const float *up, size_t n) {
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: sp_silu_mul_avx512(out, gate, up, n); return;
    case SP_CPU_AVX2: sp_silu_mul_avx2(out, gate, up, n); return;
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: sp_silu_mul_neon(out, gate, up, n); return;
#endif
    default:
        for (size_t i = 0; i < n; i++) out[i] = sp_silu_mul_lane(gate[i], up[i]);
    }
}

void sp_gelu_tanh_mul(float *out, const float *gate, const float *up, size_t n) {
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: sp_gelu_tanh_mul_avx512(out, gate, up, n); return;
    case SP_CPU_AVX2: sp_gelu_tanh_mul_avx2(out, gate, up, n); return;
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: sp_gelu_tanh_mul_neon(out, gate, up, n); return;
#endif
    default:
        for (size_t i = 0; i < n; i++) out[i] = sp_gelu_mul_lane(gate[i], up[i]);
    }
}

void sp_silu_mul_ref(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
}

void sp_gelu_tanh_mul_ref(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(0.5 * g * (1.0 + tanh(SP_GELU_K * (g + SP_GELU_A * g * g * g))) * up[i]);
    }
}

void sp_softcap(float *x, size_t n, float c) {
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: sp_softcap_avx512(x, n, c); return;
    case SP_CPU_AVX2: sp_softcap_avx2(x, n, c); return;
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: sp_softcap_neon(x, n, c); return;
#endif
    default:
        for (size_t i = 0; i < n; i++) x[i] = c * sp_tanh_lane(x[i] / c);
    }
}

/* x[i] = e^(x[i] − m); Σ as 16 lane sums (element i into lane i % 16) and the canonical tree */
static float exp_sum_portable(float *x, int n, float m) {
    float acc[16] = {0};
    for (int i = 0; i < n; i++) {
        x[i] = sp_exp_lane(x[i] - m);
        acc[i % 16] += x[i];
    }
    return sp_hsum16(acc);
}

void sp_softmax(float *x, int n) {
    if (n <= 0) return;
    float m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    float s;
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: s = sp_exp_sum_avx512(x, n, m); break;
    case SP_CPU_AVX2: s = sp_exp_sum_avx2(x, n, m); break;
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: s = sp_exp_sum_neon(x, n, m); break;
#endif
    default: s = exp_sum_portable(x, n, m); break;
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void sp_add(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* the rule every tier follows: the first index of the largest non-NaN value, 0 when all are NaN */
int sp_argmax_ref(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i;
    return best;
}

int sp_argmax(const float *x, int n) {
    if (n < 64) return sp_argmax_ref(x, n);
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: return sp_argmax_avx512(x, n);
    case SP_CPU_AVX2: return sp_argmax_avx2(x, n);
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: return sp_argmax_neon(x, n);
#endif
    default: return sp_argmax_ref(x, n);
    }
}
