/* kernels_neon.h — AArch64 Advanced SIMD building blocks of the *_neon.c kernel files
 * (include nowhere else). A canonical 16-lane accumulator (kernels_internal.h) is four q
 * registers a[0..3] holding lanes 0..3, 4..7, 8..11, 12..15. Tails shorter than a vector go
 * through the portable lane code (fmaf is one fused instruction here), which computes the
 * same operations. */
#ifndef SPECULA_KERNELS_NEON_H
#define SPECULA_KERNELS_NEON_H

#include <arm_neon.h>
#include <string.h>

#include "kernels_internal.h"

/* the canonical 16 → 1 tree: (i, i+8), (i, i+4), (i, i+2), (0, 1) */
static SP_ALWAYS_INLINE float sp_hsum16_neon(const float32x4_t *a) {
    float32x4_t s4 = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
    float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

/* acc[l] = fma(x[l], w[l], acc[l]) for the lanes l < m only (a K tail), the rest unchanged */
static SP_ALWAYS_INLINE void sp_fma_tail_neon(float32x4_t *acc, const float *x, const float *w, int m) {
    float a[16];
    for (int v = 0; v < 4; v++) vst1q_f32(a + 4 * v, acc[v]);
    for (int l = 0; l < m; l++) a[l] = fmaf(x[l], w[l], a[l]);
    for (int v = 0; v < 4; v++) acc[v] = vld1q_f32(a + 4 * v);
}

/* the canonical dot of x and w, length K */
static SP_ALWAYS_INLINE float sp_dot_inline_neon(const float *x, const float *w, int K) {
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int k = 0;
    for (; k + 16 <= K; k += 16)
        for (int v = 0; v < 4; v++) acc[v] = vfmaq_f32(acc[v], vld1q_f32(x + k + 4 * v), vld1q_f32(w + k + 4 * v));
    if (k < K) sp_fma_tail_neon(acc, x + k, w + k, K - k);
    return sp_hsum16_neon(acc);
}

/* sp_exp_lane on 4 lanes, operation for operation; 2^n applied as 2^(n>>1) · 2^(n − (n>>1)),
 * the first product exact, so the result is rounded once as ldexpf rounds */
static SP_ALWAYS_INLINE float32x4_t sp_exp_neon(float32x4_t x) {
    x = vminq_f32(vdupq_n_f32(88.7228390f), x); /* NaN stays NaN */
    x = vmaxq_f32(vdupq_n_f32(-104.0f), x);
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    int32x4_t ni = vcvtq_s32_f32(n);
    int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

/* sp_tanh_lane on 4 lanes, operation for operation */
static SP_ALWAYS_INLINE float32x4_t sp_tanh_neon(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    float32x4_t ax = vabsq_f32(x);
    float32x4_t e = sp_exp_neon(vaddq_f32(ax, ax));
    float32x4_t big = vsubq_f32(one, vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, one)));
    big = vbslq_f32(vdupq_n_u32(0x80000000u), x, big); /* copysign(big, x) */
    float32x4_t x2 = vmulq_f32(x, x);
    float32x4_t p = vdupq_n_f32(-1.4558343870e-3f);
    p = vfmaq_f32(vdupq_n_f32(3.5921280366e-3f), p, x2);
    p = vfmaq_f32(vdupq_n_f32(-8.8632355299e-3f), p, x2);
    p = vfmaq_f32(vdupq_n_f32(2.1869488536e-2f), p, x2);
    p = vfmaq_f32(vdupq_n_f32(-5.3968253968e-2f), p, x2);
    p = vfmaq_f32(vdupq_n_f32(1.3333333333e-1f), p, x2);
    p = vfmaq_f32(vdupq_n_f32(-3.3333333333e-1f), p, x2);
    float32x4_t small = vfmaq_f32(x, vmulq_f32(x, x2), p);
    return vbslq_f32(vcltq_f32(ax, vdupq_n_f32(0.5f)), small, big);
}

#endif
