/* act.c — element-wise activations, gated-MLP glue, softcap, softmax and argmax.
 *
 * All in f32 with libm's expf / tanhf (no tables): silu(x) = x / (1 + e^-x) (FORMATS §4.3),
 * gelu_tanh(x) = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) (§5.3). Each element's result
 * depends only on that element, so these are trivially batch-invariant. sp_softmax sums in
 * index order. The _ref twins compute in double. */
#include <float.h>

#include "kernels_internal.h"

#define GELU_K 0.7978845608028654 /* sqrt(2/π) */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

float sp_gelu_tanh(float x) {
    float x3 = x * x * x;
    float inner = (float)GELU_K * (x + 0.044715f * x3);
    return 0.5f * x * (1.0f + tanhf(inner));
}

void sp_silu_mul(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = silu(gate[i]) * up[i];
}

void sp_gelu_tanh_mul(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = sp_gelu_tanh(gate[i]) * up[i];
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
        out[i] = (float)(0.5 * g * (1.0 + tanh(GELU_K * (g + 0.044715 * g * g * g))) * up[i]);
    }
}

void sp_softcap(float *x, size_t n, float c) {
    for (size_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

void sp_softmax(float *x, int n) {
    if (n <= 0) return;
    float m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    float s = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

int sp_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}
