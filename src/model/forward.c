/* forward.c — the decoder forward over T tokens (prefill, decode, verify), FORMATS.md §4.3, §5.3–5.6.
 *
 *   llama / qwen3:  h += o_proj(attn(norm_in(h)));        h += mlp(norm_post(h))
 *   gemma4:         h += norm_post_attn(o_proj(attn(norm_in(h))))
 *                   h += norm_post_ffn(mlp(norm_pre_ffn(h)))
 *                   h += norm_ple(proj(gelu(gate(h)) ⊙ ple[l]))      (if PLE)
 *                   h *= layer_scalar
 *
 * Every kernel used here is batch-invariant, so each position's logits are bit-identical whether
 * it is computed alone or inside a block of T — the property lossless greedy verification needs. */
#include <math.h>
#include <stdlib.h>

#include "kernels/quant.h"
#include "model_internal.h"

void sp_mat_row_f32(const sp_mat *w, int r, float *out) {
    size_t row = sp_dtype_row_bytes(w->dt, (size_t)w->k);
    int rc = sp_row_to_f32(out, (const char *)w->data + (size_t)r * row, w->dt, (size_t)w->k, NULL);
    SP_ASSERT(rc == 0); /* types and row lengths were checked at load (sp_mat_check) */
}

void sp_model_embed(const sp_model *m, float *out, int32_t token) {
    int H = m->cfg.hidden_size;
    sp_mat_row_f32(&m->embed, token, out);
    if (m->embed_scale != 1.0f)
        for (int i = 0; i < H; i++) out[i] *= m->embed_scale;
}

void sp_model_logits(sp_model *m, float *logits, const float *hidden, int T) {
    sp_matmul(m->pool, logits, hidden, T, &m->lm_head);
    if (m->cfg.final_softcap > 0) sp_softcap(logits, (size_t)T * m->cfg.vocab_size, (float)m->cfg.final_softcap);
}

/* Gemma-4 per-layer inputs for T tokens → ple[T, L, P] (FORMATS.md §5.6) */
static void ple_inputs(sp_model *m, sp_kv *kv, const int32_t *tokens, int T) {
    const sp_config *c = &m->cfg;
    int L = c->n_layers, P = c->ple_dim, H = c->hidden_size;
    float eps = (float)c->rms_eps;
    sp_matmul(m->pool, kv->ple, kv->x, T, &m->ple_model_proj); /* [T, L·P] = e · W_pmpᵀ */
    float proj_scale = 1.0f / sqrtf((float)H), in_scale = 1.0f / sqrtf(2.0f);
    float *tok = kv->pg; /* [L·P] scratch, one token at a time */
    for (int t = 0; t < T; t++) {
        float *ctx = kv->ple + (size_t)t * L * P;
        for (int i = 0; i < L * P; i++) ctx[i] *= proj_scale;
        sp_rmsnorm(ctx, ctx, m->ple_proj_norm, L, P, eps);
        int32_t id = tokens[t] < c->ple_vocab ? tokens[t] : 0;
        sp_mat_row_f32(&m->ple_embed, id, tok);
        for (int i = 0; i < L * P; i++) ctx[i] = (ctx[i] + tok[i] * m->ple_embed_scale) * in_scale;
    }
}

/* llama GGUF: attn_q / attn_k rows come in llama.cpp's order, where pair (2j, 2j+1) of a head
 * holds HF dims (j, j + D/2) (docs/GGUF.md). Each projected head is put back in HF order, so RoPE,
 * the cache and every later float operation are those of the safetensors checkpoint. */
static void heads_from_interleaved(float *x, int n_heads, int D) {
    float tmp[SP_MODEL_MAX_HEAD_DIM];
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * D;
        for (int j = 0; j < D / 2; j++) {
            tmp[j] = v[2 * j];
            tmp[j + D / 2] = v[2 * j + 1];
        }
        memcpy(v, tmp, (size_t)D * sizeof(float));
    }
}

static void attention_block(sp_model *m, sp_kv *kv, int li, int T, int pos0) {
    const sp_config *c = &m->cfg;
    const sp_layer_config *lc = &c->layers[li];
    const sp_layer *l = &m->layers[li];
    int NH = c->n_heads, D = lc->head_dim, KVH = lc->n_kv_heads, src = lc->kv_source;
    float eps = (float)c->rms_eps;
    sp_pool *pool = m->pool;

    sp_matmul(pool, kv->q, kv->xn, T, &l->wq);
    if (m->qk_interleaved) heads_from_interleaved(kv->q, T * NH, D);
    if (l->q_norm) sp_rmsnorm(kv->q, kv->q, l->q_norm, T * NH, D, eps);
    for (int t = 0; t < T; t++) sp_rope(kv->q + (size_t)t * NH * D, NH, D, l->inv_freq, pos0 + t);

    if (src == li) { /* project K/V and append them to this layer's cache */
        sp_matmul(pool, kv->k, kv->xn, T, &l->wk);
        if (m->qk_interleaved) heads_from_interleaved(kv->k, T * KVH, D);
        if (l->wv.data) sp_matmul(pool, kv->v, kv->xn, T, &l->wv);
        else memcpy(kv->v, kv->k, (size_t)T * KVH * D * sizeof(float)); /* k_eq_v: V = raw K */
        if (l->k_norm) sp_rmsnorm(kv->k, kv->k, l->k_norm, T * KVH, D, eps);
        if (c->arch == SP_ARCH_GEMMA4) sp_rmsnorm(kv->v, kv->v, NULL, T * KVH, D, eps); /* weightless v_norm */
        for (int t = 0; t < T; t++) sp_rope(kv->k + (size_t)t * KVH * D, KVH, D, l->inv_freq, pos0 + t);
        size_t row = (size_t)KVH * D;
        for (int t = 0; t < T; t++) {
            int p = pos0 + t, slot = kv->ring[li] ? p % kv->cap[li] : p;
            memcpy(kv->K[li] + (size_t)slot * row, kv->k + (size_t)t * row, row * sizeof(float));
            memcpy(kv->V[li] + (size_t)slot * row, kv->v + (size_t)t * row, row * sizeof(float));
        }
    }
    sp_attn_shape s = {
        .T = T, .pos0 = pos0, .NH = NH, .KVH = KVH, .D = D, .cap = kv->cap[src], .ring = kv->ring[src],
        .window = lc->sliding ? c->sliding_window : 0,
        .scale = c->arch == SP_ARCH_GEMMA4 ? 1.0f : 1.0f / sqrtf((float)D),
    };
    sp_attention(pool, kv->att, kv->q, kv->K[src], kv->V[src], &s);
    sp_matmul(pool, kv->o, kv->att, T, &l->wo);
}

static void add(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

int sp_model_forward(sp_model *m, sp_kv *kv, const int32_t *tokens, int T, sp_forward_out *out, sp_err *err) {
    const sp_config *c = &m->cfg;
    int H = c->hidden_size, L = c->n_layers, pos0 = kv->len;
    float eps = (float)c->rms_eps;
    int gemma = c->arch == SP_ARCH_GEMMA4;
    if (kv->m != m) return sp_err_set(err, "forward: KV cache belongs to another model");
    if (T <= 0 || T > kv->max_batch)
        return sp_err_set(err, "forward: %d tokens in one call (allowed 1..%d)", T, kv->max_batch);
    if (pos0 + T > kv->max_ctx)
        return sp_err_set(err, "forward: context full (%d + %d tokens > %d)", pos0, T, kv->max_ctx);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return sp_err_set(err, "forward: token id %d out of range 0..%d", tokens[t], c->vocab_size - 1);
    for (int j = 0; out && j < out->n_taps; j++)
        if (out->tap_layers[j] < 0 || out->tap_layers[j] >= L)
            return sp_err_set(err, "forward: tap layer %d out of range 0..%d", out->tap_layers[j], L - 1);

    for (int t = 0; t < T; t++) sp_model_embed(m, kv->x + (size_t)t * H, tokens[t]);
    if (gemma && c->ple_dim > 0) ple_inputs(m, kv, tokens, T);
    size_t TH = (size_t)T * H;

    for (int li = 0; li < L; li++) {
        const sp_layer *l = &m->layers[li];
        int I = c->layers[li].ffn_dim;
        sp_rmsnorm(kv->xn, kv->x, l->attn_norm, T, H, eps);
        attention_block(m, kv, li, T, pos0);
        if (gemma) sp_rmsnorm(kv->o, kv->o, l->post_attn_norm, T, H, eps);
        add(kv->x, kv->o, TH);

        sp_rmsnorm(kv->xn, kv->x, gemma ? l->pre_ffn_norm : l->post_attn_norm, T, H, eps);
        sp_matmul(m->pool, kv->g, kv->xn, T, &l->w_gate);
        sp_matmul(m->pool, kv->u, kv->xn, T, &l->w_up);
        if (c->act == SP_ACT_GELU_TANH) sp_gelu_tanh_mul(kv->g, kv->g, kv->u, (size_t)T * I);
        else sp_silu_mul(kv->g, kv->g, kv->u, (size_t)T * I);
        sp_matmul(m->pool, kv->o, kv->g, T, &l->w_down);
        if (gemma) sp_rmsnorm(kv->o, kv->o, l->post_ffn_norm, T, H, eps);
        add(kv->x, kv->o, TH);

        if (gemma && c->ple_dim > 0) {
            int P = c->ple_dim;
            sp_matmul(m->pool, kv->g, kv->x, T, &l->ple_gate); /* [T, P] */
            for (int t = 0; t < T; t++) {
                const float *ple = kv->ple + ((size_t)t * L + li) * P;
                sp_gelu_tanh_mul(kv->g + (size_t)t * P, kv->g + (size_t)t * P, ple, (size_t)P);
            }
            sp_matmul(m->pool, kv->o, kv->g, T, &l->ple_proj);
            sp_rmsnorm(kv->o, kv->o, l->ple_post_norm, T, H, eps);
            add(kv->x, kv->o, TH);
        }
        if (l->layer_scalar != 1.0f)
            for (size_t i = 0; i < TH; i++) kv->x[i] *= l->layer_scalar;

        for (int j = 0; out && j < out->n_taps; j++) {
            if (out->tap_layers[j] != li) continue;
            for (int t = 0; t < T; t++)
                memcpy(out->taps + ((size_t)t * out->n_taps + j) * H, kv->x + (size_t)t * H, H * sizeof(float));
        }
    }
    kv->len = pos0 + T;
    if (kv->len > kv->high) kv->high = kv->len;

    sp_rmsnorm(kv->hid, kv->x, m->final_norm, T, H, eps);
    if (!out) return 0;
    if (out->hidden) memcpy(out->hidden, kv->hid, TH * sizeof(float));
    if (out->logits) sp_model_logits(m, out->logits, kv->hid, T);
    if (out->last_logits) sp_model_logits(m, out->last_logits, kv->hid + (size_t)(T - 1) * H, 1);
    return 0;
}
