/* matmul_bf16dot.c — the portable path of the bf16-dot numerics (kernels_internal.h): the
 * activations rounded to bf16, each lane accumulating an (odd, even) pair of products per
 * 32-element chunk as vdpbf16ps does, then the canonical 16 → 1 tree. It is the reference
 * the vector tiers (matmul_bf16dot_avx512.c, _avx2.c, _neon.c) match bit for bit; matmul.c
 * dispatches to them for a bf16 matrix whose bf16_dot is set. One output at a time, in the
 * order of the definition; no blocking. */
#include "kernels_internal.h"

float sp_dot_bf16dot_portable(const float *x, const uint16_t *w, int K) {
    float acc[16] = {0};
    for (int k0 = 0; k0 < K; k0 += 32)
        for (int l = 0; l < 16; l++) {
            int e = k0 + 2 * l, o = e + 1;
            float xe = e < K ? sp_bf16dot_round(x[e]) : 0.0f, we = e < K ? sp_bf16dot_daz(sp_bf16_to_f32(w[e])) : 0.0f;
            float xo = o < K ? sp_bf16dot_round(x[o]) : 0.0f, wo = o < K ? sp_bf16dot_daz(sp_bf16_to_f32(w[o])) : 0.0f;
            acc[l] = sp_bf16dot_pair(acc[l], xo, wo, xe, we);
        }
    return sp_hsum16(acc);
}

void sp_mm_bf16dot_rows_portable(const sp_mm_ctx *c, int n0, int n1) {
    const uint16_t *W = c->W;
    for (int n = n0; n < n1; n++)
        for (int t = 0; t < c->T; t++)
            c->Y[(size_t)t * c->N + n] = sp_dot_bf16dot_portable(c->X + (size_t)t * c->K, W + (size_t)n * c->K, c->K);
}
