/* tensor_names.h — the one table of a checkpoint's tensor names, per architecture: each tensor's
 * role in the layer (model/block.h) with its Hugging Face name and its GGUF name side by side
 * (docs/TRANSFORMER.md §2). The target loader, the drafter loaders, the GGUF exporter and reader
 * (gguf_names.h), the random-checkpoint writers and the trainers name tensors through it. */
#ifndef SPECULA_TENSOR_NAMES_H
#define SPECULA_TENSOR_NAMES_H

#include <stddef.h>

#include "specula.h"

typedef enum {
    /* model-wide */
    SP_TN_EMBED = 0,      /* [V, H] */
    SP_TN_FINAL_NORM,     /* [H] */
    SP_TN_LM_HEAD,        /* [V, H] (absent when tied) */
    SP_TN_PLE_EMBED,      /* gemma4 per-layer input: [V_ple, L·P] */
    SP_TN_PLE_MODEL_PROJ, /* [L·P, H] */
    SP_TN_PLE_PROJ_NORM,  /* [P] */
    SP_TN_FC,             /* [H, m·H] EAGLE-3: the m taps fused into the state */
    SP_TN_TAP_NORM,       /* [m·H] EAGLE-3 norm_before_fc: RMSNorm on the taps */
    SP_TN_D2T,            /* [Vd] int64 EAGLE-3: draft id → target id, as an offset */
    SP_TN_T2D,            /* [V] bool EAGLE-3: the target ids of the draft vocabulary */
    /* per layer */
    SP_TN_ATTN_NORM,      /* [H] */
    SP_TN_Q,              /* [NH·D, H] */
    SP_TN_K,              /* [KVH·D, H] */
    SP_TN_V,              /* [KVH·D, H] */
    SP_TN_O,              /* [H, NH·D] */
    SP_TN_Q_NORM,         /* [D] */
    SP_TN_K_NORM,         /* [D] */
    SP_TN_ATTN_POST_NORM, /* [H] gemma4 */
    SP_TN_FFN_NORM,       /* [H] the pre-MLP norm */
    SP_TN_FFN_POST_NORM,  /* [H] gemma4 */
    SP_TN_GATE,           /* [I, H] */
    SP_TN_UP,             /* [I, H] */
    SP_TN_DOWN,           /* [H, I] */
    SP_TN_LAYER_SCALAR,   /* [1] gemma4 */
    SP_TN_PLE_GATE,       /* [P, H] gemma4 */
    SP_TN_PLE_PROJ,       /* [H, P] */
    SP_TN_PLE_POST_NORM,  /* [H] */
    SP_TN_HIDDEN_NORM,    /* [H] EAGLE-3: norm of the state half of the [embedding ; state] input */
    SP_TN_ROUTER,         /* [E, H] MoE router (qwen3_moe mlp.gate) */
    SP_TN_EXP_GATE,       /* [Ie, H] per expert (HF: one tensor per expert; GGUF: stacked [E, Ie, H]) */
    SP_TN_EXP_UP,         /* [Ie, H] */
    SP_TN_EXP_DOWN,       /* [H, Ie] */
    SP_TN_ROUTER_SCALE,   /* [H] gemma4 MoE: the router input's per-channel scale */
    SP_TN_EXP_SCALE,      /* [E] gemma4 MoE: each expert's output scale */
    SP_TN_FFN_NORM_2,     /* [H] gemma4 MoE: the experts' input norm */
    SP_TN_FFN_POST_NORM_1, /* [H] gemma4 MoE: the dense MLP's output norm */
    SP_TN_FFN_POST_NORM_2, /* [H] gemma4 MoE: the experts' output norm */
    SP_TN_COUNT
} sp_tensor_role;

#define SP_TN_FIRST_LAYER_ROLE SP_TN_ATTN_NORM

/* Whose checkpoint the names are of (docs/EAGLE3.md §1). The EAGLE-3 roles (fc, the tap norm,
 * d2t, t2d, hidden_norm) exist only in the EAGLE-3 layouts, the per-layer input only in models. */
typedef enum {
    SP_TN_MODEL = 0,          /* a target, a DFlash / DSpark drafter, an assistant: "layers.N." */
    SP_TN_EAGLE3_SPECFORGE,   /* LlamaForCausalLMEagle3: the layer as "midlayer.", fc, input_norm, d2t, t2d */
    SP_TN_EAGLE3_SPECULATORS, /* the same tensors with the layer as "layers.0." */
    SP_TN_EAGLE3_DEEPSPEC,    /* Qwen3Eagle3Model / Gemma4Eagle3Model: fc, hidden_norm, the block as "layers.0." */
    SP_TN_LAYOUT_COUNT
} sp_tn_layout;

/* The Hugging Face name of `role` in layer `layer` (ignored for model-wide roles) of an `arch`
 * checkpoint, without the checkpoint's prefix ("layers.3.mlp.up_proj.weight", "norm.weight"):
 * written to buf (cap bytes) and returned, or NULL when the architecture has no such tensor.
 * lm_head.weight is the one name a checkpoint's prefix never applies to. */
const char *sp_tensor_hf_name(sp_arch arch, sp_tensor_role role, int layer, char *buf, size_t cap);

/* The HF name of expert `expert`'s tensor of an expert role (SP_TN_EXP_*) in layer `layer`
 * ("layers.3.mlp.experts.5.up_proj.weight"), or NULL; sp_tensor_hf_name gives NULL for these
 * roles. Their GGUF name (sp_tensor_gguf_name) is the stacked tensor of all experts
 * ("blk.3.ffn_up_exps.weight"). */
const char *sp_tensor_hf_expert_name(sp_arch arch, sp_tensor_role role, int layer, int expert, char *buf, size_t cap);
/* The role, layer and expert of an expert tensor's HF name; -1 when hf is not one. */
int sp_tensor_expert_of(sp_arch arch, const char *hf, int *layer, int *expert);
/* The stacked tensor that holds every expert's matrix of an expert role in layer `layer`: its
 * GGUF name (gguf = 1; dims [k, parts·n, E]) or HF name (gguf = 0; [E, parts·n, k]), with the
 * matrix being part *part of *parts stacked along n (Gemma-4 stores gate and up as one
 * gate_up_proj, gate first). NULL where the container holds one tensor per expert (Qwen3-MoE's
 * HF checkpoints). Gemma-4's per-expert HF names (sp_tensor_hf_expert_name,
 * "layers.3.experts.5.up_proj") exist only as slices of these. */
const char *sp_tensor_expert_stack(sp_arch arch, sp_tensor_role role, int layer, int gguf, char *buf, size_t cap,
                                   int *part, int *parts);

/* The GGUF name (llama.cpp's: "blk.3.ffn_up.weight", "output_norm.weight"), or NULL. */
const char *sp_tensor_gguf_name(sp_arch arch, sp_tensor_role role, int layer, char *buf, size_t cap);

/* The role of an HF name (without prefix) in an `arch` checkpoint and its layer (-1 for
 * model-wide tensors); -1 when the name is not in the table. */
int sp_tensor_role_of(sp_arch arch, const char *hf, int *layer);

/* The same three in a given layout; the functions above are these with SP_TN_MODEL. In the
 * SpecForge layout the layer's names are "midlayer.…" and only layer 0 has names; GGUF names are
 * llama.cpp's eagle3 ones ("blk.0.attn_norm_2.weight" for hidden_norm, "enc.output_norm.weight"
 * for the tap norm; t2d has none). */
const char *sp_tensor_hf_name_in(sp_tn_layout lay, sp_arch arch, sp_tensor_role role, int layer, char *buf,
                                 size_t cap);
const char *sp_tensor_gguf_name_in(sp_tn_layout lay, sp_arch arch, sp_tensor_role role, int layer, char *buf,
                                   size_t cap);
int sp_tensor_role_of_in(sp_tn_layout lay, sp_arch arch, const char *hf, int *layer);

#endif
