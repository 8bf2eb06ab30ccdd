/* rope.c — rotary position embeddings, rotate-half convention (docs/TRANSFORMER.md §3, §4).
 *
 * sp_rope_inv_freq mirrors the f32 arithmetic of the Hugging Face rope initialisers so the
 * angles match theirs bit for bit where libm's powf agrees with torch's:
 *   default:       inv_f[j] = 1 / theta^(2j / D)                       (j < D/2)
 *   llama3:        default, then per-frequency rescaling by wavelength (docs/TRANSFORMER.md §4)
 *   proportional:  n_rot = floor(ρ·D/2); inv_f[j] = 1 / theta^(2j / D) for j < n_rot (the
 *                  exponent divides by the FULL D), 0 for n_rot <= j < D/2; all / factor (docs/TRANSFORMER.md §4)
 * sp_rope rotates pairs (j, j + D/2) by angle (float)pos · inv_f[j], cos/sin in f32; pairs
 * with a zero frequency are left untouched. Not here: interleaved (GPT-J) pairs, YaRN. */
#include "kernels_internal.h"

void sp_rope_inv_freq(float *inv_freq, int D, const sp_rope_params *rp) {
    int half = D / 2;
    int n_rot = half;
    if (rp->type == SP_ROPE_PROPORTIONAL) {
        double rho = rp->partial_rotary_factor > 0 ? rp->partial_rotary_factor : 1.0;
        n_rot = (int)floor(rho * D / 2.0);
        if (n_rot > half) n_rot = half;
    }
    float theta = (float)rp->theta;
    for (int j = 0; j < half; j++)
        inv_freq[j] = j < n_rot ? 1.0f / powf(theta, (float)(2 * j) / (float)D) : 0.0f;

    if (rp->type == SP_ROPE_PROPORTIONAL && rp->factor > 0 && rp->factor != 1.0) {
        float f = (float)rp->factor;
        for (int j = 0; j < half; j++) inv_freq[j] = inv_freq[j] / f;
    } else if (rp->type == SP_ROPE_LLAMA3) {
        /* transformers _compute_llama3_parameters, in f32 like the tensors there */
        float f = (float)rp->factor, lo = (float)rp->low_freq_factor, hi = (float)rp->high_freq_factor;
        float C = (float)rp->original_max_pos;
        float low_wl = (float)(rp->original_max_pos / rp->low_freq_factor);
        float high_wl = (float)(rp->original_max_pos / rp->high_freq_factor);
        for (int j = 0; j < half; j++) {
            float inv = inv_freq[j];
            float wl = (float)(2.0 * M_PI) / inv;
            float scaled = wl > low_wl ? inv / f : inv;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float s = (C / wl - lo) / (hi - lo);
                scaled = (1.0f - s) * scaled / f + s * scaled;
            }
            inv_freq[j] = scaled;
        }
    }
}

/* cos/sin of the angles for one position, in chunks so any D works without allocation */
#define ROPE_CHUNK 256

void sp_rope(float *x, int nh, int D, const float *inv_freq, int pos) {
    int half = D / 2;
    float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
    for (int j0 = 0; j0 < half; j0 += ROPE_CHUNK) {
        int j1 = j0 + ROPE_CHUNK < half ? j0 + ROPE_CHUNK : half;
        for (int j = j0; j < j1; j++) {
            float a = (float)pos * inv_freq[j];
            cs[j - j0] = cosf(a);
            sn[j - j0] = sinf(a);
        }
        for (int h = 0; h < nh; h++) {
            float *xh = x + (size_t)h * D;
            for (int j = j0; j < j1; j++) {
                if (inv_freq[j] == 0.0f) continue;
                float c = cs[j - j0], s = sn[j - j0];
                float x0 = xh[j], x1 = xh[j + half];
                float p0 = x0 * c, q0 = x1 * s;
                float p1 = x1 * c, q1 = x0 * s;
                xh[j] = p0 - q0;
                xh[j + half] = p1 + q1;
            }
        }
    }
}

void sp_rope_ref(float *x, int nh, int D, const float *inv_freq, int pos) {
    int half = D / 2;
    for (int h = 0; h < nh; h++) {
        float *xh = x + (size_t)h * D;
        for (int j = 0; j < half; j++) {
            if (inv_freq[j] == 0.0f) continue;
            double a = (double)((float)pos * inv_freq[j]);
            double c = cos(a), s = sin(a);
            double x0 = xh[j], x1 = xh[j + half];
            xh[j] = (float)(x0 * c - x1 * s);
            xh[j + half] = (float)(x1 * c + x0 * s);
        }
    }
}
