/* act_neon.c — AArch64 NEON versions of the element-wise and row primitives of act.c and norm.c
 * (gated activations, softcap, softmax's exp and sum, argmax, the canonical dot): 4 lanes at a
 * time, the tail by the portable lane functions, each lane computing exactly what they compute. */
#include "kernels_neon.h"

static SP_ALWAYS_INLINE float32x4_t silu_mul4(float32x4_t g, float32x4_t u) {
    float32x4_t e = sp_exp_neon(vnegq_f32(g));
    return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
}

static SP_ALWAYS_INLINE float32x4_t gelu_mul4(float32x4_t g, float32x4_t u) {
    float32x4_t inner = vmulq_f32(vdupq_n_f32((float)SP_GELU_K),
                                  vfmaq_f32(g, vmulq_f32(vdupq_n_f32((float)SP_GELU_A), g), vmulq_f32(g, g)));
    float32x4_t t = vaddq_f32(vdupq_n_f32(1.0f), sp_tanh_neon(inner));
    return vmulq_f32(vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), g), t), u);
}

void sp_silu_mul_neon(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, silu_mul4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    for (; i < n; i++) out[i] = sp_silu_mul_lane(gate[i], up[i]);
}

void sp_gelu_tanh_mul_neon(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, gelu_mul4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    for (; i < n; i++) out[i] = sp_gelu_mul_lane(gate[i], up[i]);
}

void sp_softcap_neon(float *x, size_t n, float c) {
    float32x4_t vc = vdupq_n_f32(c);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vc, sp_tanh_neon(vdivq_f32(vld1q_f32(x + i), vc))));
    for (; i < n; i++) x[i] = c * sp_tanh_lane(x[i] / c);
}

/* 16 lane sums in four q registers; the last n % 16 values through the lane code */
float sp_exp_sum_neon(float *x, int n, float m) {
    float32x4_t vm = vdupq_n_f32(m);
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int v = 0; v < 4; v++) {
            float32x4_t e = sp_exp_neon(vsubq_f32(vld1q_f32(x + i + 4 * v), vm));
            vst1q_f32(x + i + 4 * v, e);
            acc[v] = vaddq_f32(acc[v], e);
        }
    if (i < n) {
        float a[16];
        for (int v = 0; v < 4; v++) vst1q_f32(a + 4 * v, acc[v]);
        for (int l = 0; i + l < n; l++) {
            x[i + l] = sp_exp_lane(x[i + l] - m);
            a[l] += x[i + l];
        }
        for (int v = 0; v < 4; v++) acc[v] = vld1q_f32(a + 4 * v);
    }
    return sp_hsum16_neon(acc);
}

float sp_dot_f32_neon(const float *x, const float *w, int K) { return sp_dot_inline_neon(x, w, K); }

/* one pass for the maximum (maxNum ignores NaN), one for the first index equal to it */
int sp_argmax_neon(const float *x, int n) {
    float32x4_t acc = vdupq_n_f32(-INFINITY);
    int i = 0;
    for (; i + 4 <= n; i += 4) acc = vmaxnmq_f32(acc, vld1q_f32(x + i));
    float m = vmaxnmvq_f32(acc);
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    float32x4_t vm = vdupq_n_f32(m);
    for (i = 0; i + 4 <= n; i += 4)
        if (vmaxvq_u32(vceqq_f32(vld1q_f32(x + i), vm)))
            for (int l = 0; l < 4; l++)
                if (x[i + l] == m) return i + l;
    for (; i < n; i++)
        if (x[i] == m) return i;
    return 0; /* every value NaN */
}
