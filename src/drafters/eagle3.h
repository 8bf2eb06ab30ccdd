/* eagle3.h — EAGLE-3 drafters (docs/EAGLE3.md).
 *
 * One decoder layer over [input_layernorm(embed(token)) ; hidden_norm(g)], where g is the fused
 * target state fc(taps) for committed positions and the layer's own (pre-norm) output for the
 * positions it drafts. Two checkpoint layouts, chosen by architectures[0] of config.json:
 *   "LlamaForCausalLMEagle3" / "Eagle3LlamaForCausalLM" (original, SpecForge): tensors midlayer.*,
 *       Llama attention (no q/k norms), three taps (eagle_aux_hidden_state_layer_ids, the
 *       indices of the target layers whose *input* is tapped, default [2, N/2, N-3]), a reduced
 *       draft vocabulary: lm_head [draft_vocab, H] and d2t (target id = draft id + d2t[draft id]);
 *   "Qwen3Eagle3Model" / "Gemma4Eagle3Model" (DeepSpec): tensors layers.0.*, the target family's
 *       block (q/k norms; Gemma's four norms, weightless v_norm, scale 1), target_layer_ids
 *       (outputs of those target layers, any count), the full vocabulary, Gemma soft-cap.
 *
 * The drafter keeps its own KV cache over its positions (one row per committed token but the
 * pending one: row i pairs token i+1 with the taps of position i); drafts live past the end of
 * it and are dropped by commit(), which re-extends the cache with the committed tokens and their
 * taps. q (when sampling) is over the target vocabulary, zero outside the draft vocabulary. */
#ifndef SPECULA_EAGLE3_H
#define SPECULA_EAGLE3_H

#include "sample/sample.h"
#include "decode/drafter.h"

typedef enum {
    SP_EAGLE3_SPECFORGE = 0, /* LlamaForCausalLMEagle3 */
    SP_EAGLE3_DEEPSPEC,      /* Qwen3Eagle3Model / Gemma4Eagle3Model */
} sp_eagle3_layout;

/* Load the drafter in dir for `target` (borrowed: it must outlive the drafter). sample: the
 * params drafts are drawn with (greedy → argmax). max_drafts: drafts per proposal (<= 0: 8;
 * at most SP_SPEC_MAX_G). Every missing or mis-shaped tensor, bad config key and bad d2t / t2d
 * entry is an error naming it. Returns a drafter the caller frees with sp_drafter_free, or NULL
 * with err. */
sp_drafter *sp_drafter_eagle3(const char *dir, sp_model *target, const sp_sample_params *sample, int max_drafts,
                              sp_err *err);

typedef struct {
    sp_eagle3_layout layout;
    int n_taps;
    const int *tap_layers;   /* target layers whose outputs are tapped (sp_forward_out convention) */
    int draft_vocab;         /* rows of the LM head */
    const int32_t *d2t;      /* [draft_vocab] absolute target ids */
    long proposals, drafted;
} sp_eagle3_info;

/* Facts and statistics of a drafter made by sp_drafter_eagle3 (0), else -1. */
int sp_eagle3_info_get(const sp_drafter *d, sp_eagle3_info *info);

#endif
