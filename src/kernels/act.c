/* act.c — element-wise activations, gated-MLP glue, softcap, softmax and argmax.
 *
 * All in f32, no tables: silu(x) = x / (1 + e^-x) (FORMATS §4.3), gelu_tanh(x) =
 * 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) (§5.3). With AVX-512, silu and softmax
 * use the lane-wise sp_exp_avx512 (~1 ulp; libm's expf otherwise), GeGLU and the softcap
 * the lane-wise sp_tanh_avx512 (~2 ulp; libm's tanhf otherwise): a verify pass over 8
 * tokens calls them 8× as often, and scalar tanhf was ~20% of the embedded model's. Each
 * element's result depends only on that element (the same formula in every lane and in the
 * masked tail), so these are batch-invariant. sp_softmax's sum has a fixed order for a given
 * n (16 lanes + the canonical tree). The _ref twins compute in double. */
#include <float.h>

#include "kernels_internal.h"

#define GELU_K 0.7978845608028654 /* sqrt(2/π) */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* sp_exp_avx512 and sp_tanh_avx512 of one lane, operation for operation (fmaf is the fused
 * multiply-add, rintf rounds to nearest even as roundscale does, ldexpf scales as scalef does,
 * the comparisons keep NaN as min/max do), so scalar and vector results are bit-identical:
 * the training forward's GeGLU (sp_gelu_tanh) equals the kernel, and so does a build without
 * AVX-512. */
static float exp_lane(float x) {
    x = 88.7228390f < x ? 88.7228390f : x;
    x = -104.0f > x ? -104.0f : x;
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    return n == n ? ldexpf(p, (int)n) : p;
}

static float tanh_lane(float x) {
    float ax = fabsf(x);
    if (!(ax < 0.5f)) return copysignf(1.0f - 2.0f / (exp_lane(ax + ax) + 1.0f), x);
    float x2 = x * x, p = -1.4558343870e-3f;
    p = fmaf(p, x2, 3.5921280366e-3f);
    p = fmaf(p, x2, -8.8632355299e-3f);
    p = fmaf(p, x2, 2.1869488536e-2f);
    p = fmaf(p, x2, -5.3968253968e-2f);
    p = fmaf(p, x2, 1.3333333333e-1f);
    p = fmaf(p, x2, -3.3333333333e-1f);
    return fmaf(x * x2, p, x);
}

float sp_gelu_tanh(float x) {
    float inner = (float)GELU_K * fmaf(0.044715f * x, x * x, x);
    return 0.5f * x * (1.0f + tanh_lane(inner));
}

static float silu_mul1(float g, float u) { return silu(g) * u; }
static float gelu_mul1(float g, float u) { return sp_gelu_tanh(g) * u; }

#if SP_AVX512
static SP_ALWAYS_INLINE __m512 silu_mul16(__m512 g, __m512 u) {
    __m512 e = sp_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

static SP_ALWAYS_INLINE __m512 gelu_mul16(__m512 g, __m512 u) {
    __m512 inner = _mm512_mul_ps(_mm512_set1_ps((float)GELU_K),
                                 _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), g), _mm512_mul_ps(g, g), g));
    __m512 t = _mm512_add_ps(_mm512_set1_ps(1.0f), sp_tanh_avx512(inner));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), g), t), u);
}
#endif

/* out = f(gate) ⊙ up: 16 lanes at a time, the tail masked (out may alias gate or up); the
 * scalar f1 only without AVX-512. Inlined with constant f16/f1, so no indirect calls remain. */
static SP_ALWAYS_INLINE void gated_apply(float *out, const float *gate, const float *up, size_t n,
#if SP_AVX512
                                         __m512 (*f16)(__m512, __m512),
#endif
                                         float (*f1)(float, float)) {
    size_t i = 0;
#if SP_AVX512
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        __mmask16 m = sp_tail_mask((int)(n - i));
        _mm512_mask_storeu_ps(out + i, m, f16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
        i = n;
    }
#endif
    for (; i < n; i++) out[i] = f1(gate[i], up[i]);
}

#if SP_AVX512
#define GATED(f) f##16, f##1
#else
#define GATED(f) f##1
#endif

void sp_silu_mul(float *out, const float *gate, const float *up, size_t n) {
    gated_apply(out, gate, up, n, GATED(silu_mul));
}

void sp_gelu_tanh_mul(float *out, const float *gate, const float *up, size_t n) {
    gated_apply(out, gate, up, n, GATED(gelu_mul));
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
    size_t i = 0;
#if SP_AVX512
    __m512 vc = _mm512_set1_ps(c);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(vc, sp_tanh_avx512(_mm512_div_ps(_mm512_loadu_ps(x + i), vc))));
    if (i < n) {
        __mmask16 m = sp_tail_mask((int)(n - i));
        __m512 r = _mm512_mul_ps(vc, sp_tanh_avx512(_mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), vc)));
        _mm512_mask_storeu_ps(x + i, m, r);
        i = n;
    }
#endif
    for (; i < n; i++) x[i] = c * tanh_lane(x[i] / c);
}

void sp_softmax(float *x, int n) {
    if (n <= 0) return;
    float m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    float s = 0;
    int i = 0;
#if SP_AVX512
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m512 e = sp_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 k = sp_tail_mask(n - i);
        __m512 e = sp_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(x + i, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
        i = n;
    }
    s = sp_hsum16_avx512(acc);
#endif
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (i = 0; i < n; i++) x[i] *= inv;
}

int sp_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}
