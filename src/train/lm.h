/* lm.h — a Gemma-4 text TARGET model in training: its parameter layout, the
 * activations one step saves, and the forward / backward pass over NB sequences of T tokens.
 *
 * The parameters are one contiguous array holding, in order, exactly the tensors
 * sp_hf_tensor_specs() lists for the config (docs/TRANSFORMER.md §2; HF names and shapes), so weights,
 * gradients and AdamW moments share one layout and the export is a straight copy. What the
 * forward computes is the inference forward of src/model/forward.c (docs/TRANSFORMER.md §4–5):
 *
 *   x0 = E[tok] · embed_scale                            (sqrt(H) rounded to the export dtype)
 *   per layer:  a = attn(norm_in(x))  with q/k norms, weightless v norm, scale 1, RoPE
 *                 (default on sliding layers, proportional partial on full layers), causal
 *                 attention within each sequence (sliding layers: the last `sliding_window`
 *                 positions);  x += norm_post_attn(o_proj(a))
 *               x += norm_post_ffn(down(gelu_tanh(gate(n)) · up(n))),  n = norm_pre_ffn(x)
 *               x *= layer_scalar
 *   logits = softcap(norm(x) · Eᵀ)                       (tied embeddings)
 *   loss = mean over labelled positions of −log softmax(logits)[label]
 *
 * Supported: what a small model needs. Refused by sp_lm_layout_init: per-layer inputs (PLE),
 * KV sharing, attention_k_eq_v, an untied head, a non-gemma4 architecture. layer_scalar is
 * kept (and exported) at 1.0 and is not trained. Every sequence starts at position 0. */
#ifndef SPECULA_TRAIN_LM_H
#define SPECULA_TRAIN_LM_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "formats/newmodel.h"
#include "specula.h"

/* offsets (in floats) of one decoder layer's tensors in the parameter array */
typedef struct {
    size_t in_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn, pre_ffn, gate, up, down, post_ffn, scalar;
} lm_layer_off;

typedef struct {
    sp_config cfg;
    hf_tensor_spec *specs; /* [n_params] HF names and shapes, in array order */
    size_t *off;           /* [n_params] offset of each tensor */
    int n_params;
    size_t n;              /* floats in the parameter array */
    size_t embed, final_norm;
    lm_layer_off *l;       /* [L] */
    float **inv_freq;      /* [L] → [D/2] RoPE frequencies of the layer's type */
    float embed_scale;     /* sqrt(H), rounded to the export dtype as the loader does */
    int max_D, max_QD, max_KD, max_I;
} lm_layout;

/* Build the layout for a parsed config; export_dtype (SP_DT_F32 / SP_DT_BF16) fixes the
 * embedding scale. Errors name the unsupported feature. */
int sp_lm_layout_init(lm_layout *lay, const sp_config *cfg, sp_dtype export_dtype, sp_err *err);
void sp_lm_layout_free(lm_layout *lay);
/* Index of tensor `name` in the layout, or -1. */
int sp_lm_layout_find(const lm_layout *lay, const char *name);
/* 1 when tensor i is trained (layer_scalar is not), 1 when it takes weight decay (matrices). */
int sp_lm_param_trained(const lm_layout *lay, int i);
int sp_lm_param_decayed(const lm_layout *lay, int i);
/* Initial weights: matrices and the embedding N(0, 0.02) from the counter RNG (seed, tensor
 * index, element), norms and layer_scalar 1. */
void sp_lm_init_weights(const lm_layout *lay, float *w, uint64_t seed);

/* Saved activations for at most NB sequences of at most T tokens (float and double). */
typedef struct lm_acts lm_acts;
typedef struct lm_acts_f64 lm_acts_f64;

/* Activations for at most NB sequences of at most T tokens. */
lm_acts *sp_lm_acts_create(const lm_layout *lay, int NB, int T, sp_err *err);
void sp_lm_acts_free(lm_acts *a);
/* Forward over tokens[NB·T] (NB sequences of T tokens; T <= the T of acts_create). labels[NB·T]:
 * the next token of each position, −1 = not scored. Returns the mean cross-entropy over the
 * scored positions (0 when none) and keeps what backward needs. logits: if non-NULL, receives
 * the (softcapped) logits [NB·T, V]. */
double sp_lm_forward(sp_pool *pool, const lm_layout *lay, const float *w, lm_acts *a, const int32_t *tokens,
                  const int32_t *labels, int NB, int T, float *logits);
/* Backward of the last forward: ACCUMULATES d(loss)/d(w) into grad (parameter layout). */
void sp_lm_backward(sp_pool *pool, const lm_layout *lay, const float *w, lm_acts *a, float *grad);

/* The double twins (lm_f64.c): the same with double weights, activations and gradients. */
lm_acts_f64 *sp_lm_acts_create_f64(const lm_layout *lay, int NB, int T, sp_err *err);
void sp_lm_acts_free_f64(lm_acts_f64 *a);
double sp_lm_forward_f64(sp_pool *pool, const lm_layout *lay, const double *w, lm_acts_f64 *a, const int32_t *tokens,
                      const int32_t *labels, int NB, int T, double *logits);
void sp_lm_backward_f64(sp_pool *pool, const lm_layout *lay, const double *w, lm_acts_f64 *a, double *grad);

#endif
