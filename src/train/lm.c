/* lm.c — the target LM's parameter layout (lm.h) and the float instantiation of its forward /
 * backward (lm_impl.h): GEMMs and attention on the thread pool. */
#include "train/lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "formats/tensor_names.h"
#include "train/block_train.h"
#include "train/ops.h"

int sp_lm_layout_init(lm_layout *lay, const sp_config *c, sp_dtype export_dtype, sp_err *err) {
    memset(lay, 0, sizeof *lay);
    if (c->arch != SP_ARCH_GEMMA4) return sp_err_set(err, "train-lm: architecture %s: only gemma4 is supported", sp_arch_name(c->arch));
    if (c->n_experts > 0) return sp_err_set(err, "train-lm: a mixture-of-experts model (enable_moe_block) is not supported");
    if (c->ple_dim > 0) return sp_err_set(err, "train-lm: per-layer inputs (hidden_size_per_layer_input %d) are not supported; set 0", c->ple_dim);
    if (c->n_kv_shared > 0) return sp_err_set(err, "train-lm: KV sharing (num_kv_shared_layers %d) is not supported; set 0", c->n_kv_shared);
    if (c->attention_k_eq_v) return sp_err_set(err, "train-lm: attention_k_eq_v is not supported; set false");
    if (!c->tie_embeddings) return sp_err_set(err, "train-lm: an untied lm_head is not supported; set tie_word_embeddings true");
    if (c->act != SP_ACT_GELU_TANH || !c->qk_norm) return sp_err_set(err, "train-lm: expected gelu_pytorch_tanh and q/k norms (gemma4)");
    if (export_dtype != SP_DT_F32 && export_dtype != SP_DT_BF16) return sp_err_set(err, "train-lm: export dtype must be F32 or BF16");
    for (int i = 0; i < c->n_layers; i++)
        if (c->layers[i].n_kv_heads <= 0 || c->n_heads % c->layers[i].n_kv_heads)
            return sp_err_set(err, "train-lm: layer %d: %d heads not a multiple of %d KV heads", i, c->n_heads, c->layers[i].n_kv_heads);
    lay->cfg = *c;
    if (sp_hf_tensor_specs(c, &lay->specs, &lay->n_params, err)) return -1;
    int L = c->n_layers;
    lay->off = calloc((size_t)lay->n_params, sizeof *lay->off);
    lay->l = calloc((size_t)L, sizeof *lay->l);
    lay->inv_freq = calloc((size_t)L, sizeof *lay->inv_freq);
    if (!lay->off || !lay->l || !lay->inv_freq) goto oom;
    for (int i = 0; i < lay->n_params; i++) {
        const hf_tensor_spec *s = &lay->specs[i];
        lay->off[i] = lay->n;
        lay->n += (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1);
    }
    char nm[160];
    const char *P = c->tensor_prefix;
#define OFF(dst, ...)                                                                         \
    do {                                                                                      \
        snprintf(nm, sizeof nm, __VA_ARGS__);                                                 \
        int k_ = sp_lm_layout_find(lay, nm);                                                     \
        if (k_ < 0) {                                                                         \
            sp_lm_layout_free(lay);                                                              \
            return sp_err_set(err, "train-lm: tensor %s missing from the layout", nm);       \
        }                                                                                     \
        dst = lay->off[k_];                                                                   \
    } while (0)
#define OFF_ROLE(dst, role, i) OFF(dst, "%s%s", P, sp_tensor_hf_name(SP_ARCH_GEMMA4, role, i, rel, sizeof rel))
    char rel[128];
    OFF_ROLE(lay->embed, SP_TN_EMBED, 0);
    OFF_ROLE(lay->final_norm, SP_TN_FINAL_NORM, 0);
    for (int i = 0; i < L; i++) {
        lm_layer_off *o = &lay->l[i];
        OFF_ROLE(o->in_norm, SP_TN_ATTN_NORM, i);
        OFF_ROLE(o->wq, SP_TN_Q, i);
        OFF_ROLE(o->wk, SP_TN_K, i);
        OFF_ROLE(o->wv, SP_TN_V, i);
        OFF_ROLE(o->wo, SP_TN_O, i);
        OFF_ROLE(o->q_norm, SP_TN_Q_NORM, i);
        OFF_ROLE(o->k_norm, SP_TN_K_NORM, i);
        OFF_ROLE(o->post_attn, SP_TN_ATTN_POST_NORM, i);
        OFF_ROLE(o->pre_ffn, SP_TN_FFN_NORM, i);
        OFF_ROLE(o->gate, SP_TN_GATE, i);
        OFF_ROLE(o->up, SP_TN_UP, i);
        OFF_ROLE(o->down, SP_TN_DOWN, i);
        OFF_ROLE(o->post_ffn, SP_TN_FFN_POST_NORM, i);
        OFF_ROLE(o->scalar, SP_TN_LAYER_SCALAR, i);
#undef OFF_ROLE
#undef OFF
        const sp_layer_config *lc = &c->layers[i];
        int D = lc->head_dim;
        if (D > lay->max_D) lay->max_D = D;
        if (c->n_heads * D > lay->max_QD) lay->max_QD = c->n_heads * D;
        if (lc->n_kv_heads * D > lay->max_KD) lay->max_KD = lc->n_kv_heads * D;
        if (lc->ffn_dim > lay->max_I) lay->max_I = lc->ffn_dim;
        lay->inv_freq[i] = malloc((size_t)(D / 2 > 0 ? D / 2 : 1) * sizeof(float));
        if (!lay->inv_freq[i]) goto oom;
        sp_rope_inv_freq(lay->inv_freq[i], D, lc->sliding ? &c->rope_swa : &c->rope);
    }
    /* the loader casts sqrt(H) to the embedding's dtype (load.c round_to_dtype) */
    float sc = sqrtf((float)c->hidden_size);
    lay->embed_scale = export_dtype == SP_DT_BF16 ? sp_bf16_to_f32(sp_f32_to_bf16(sc)) : sc;
    return 0;
oom:
    sp_lm_layout_free(lay);
    return sp_err_set(err, "train-lm: out of memory building the parameter layout");
}

void sp_lm_layout_free(lm_layout *lay) {
    if (lay->inv_freq)
        for (int i = 0; i < lay->cfg.n_layers; i++) free(lay->inv_freq[i]);
    free(lay->inv_freq);
    free(lay->specs);
    free(lay->off);
    free(lay->l);
    memset(lay, 0, sizeof *lay);
}

int sp_lm_layout_find(const lm_layout *lay, const char *name) {
    for (int i = 0; i < lay->n_params; i++)
        if (!strcmp(lay->specs[i].name, name)) return i;
    return -1;
}

int sp_lm_param_trained(const lm_layout *lay, int i) { return lay->specs[i].init != HF_INIT_SCALAR; }
int sp_lm_param_decayed(const lm_layout *lay, int i) { return lay->specs[i].ndim == 2; }

void sp_lm_init_weights(const lm_layout *lay, float *w, uint64_t seed) {
    for (int i = 0; i < lay->n_params; i++) {
        const hf_tensor_spec *s = &lay->specs[i];
        size_t n = (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1);
        float *p = w + lay->off[i];
        int mat = s->init == HF_INIT_PROJ || s->init == HF_INIT_EMBED;
        for (size_t j = 0; j < n; j++) p[j] = mat ? 0.02f * sp_rng_normal(seed, 7000 + (uint64_t)i, j) : 1.0f;
    }
}

#define real float
#include "train/lm_impl.h"
