/* tensor_names.c — the tensor-name table (see tensor_names.h, docs/TRANSFORMER.md §2, docs/EAGLE3.md §1). */
#include "tensor_names.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *hf, *gguf; /* per-layer names without the "layers.N." / "blk.N." part */
} tn_entry;

/* the names every architecture shares */
static const tn_entry common_names[SP_TN_COUNT] = {
    [SP_TN_EMBED] = {"embed_tokens.weight", "token_embd.weight"},
    [SP_TN_FINAL_NORM] = {"norm.weight", "output_norm.weight"},
    [SP_TN_LM_HEAD] = {"lm_head.weight", "output.weight"},
    [SP_TN_ATTN_NORM] = {"input_layernorm.weight", "attn_norm.weight"},
    [SP_TN_Q] = {"self_attn.q_proj.weight", "attn_q.weight"},
    [SP_TN_K] = {"self_attn.k_proj.weight", "attn_k.weight"},
    [SP_TN_V] = {"self_attn.v_proj.weight", "attn_v.weight"},
    [SP_TN_O] = {"self_attn.o_proj.weight", "attn_output.weight"},
    [SP_TN_Q_NORM] = {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    [SP_TN_K_NORM] = {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    [SP_TN_GATE] = {"mlp.gate_proj.weight", "ffn_gate.weight"},
    [SP_TN_UP] = {"mlp.up_proj.weight", "ffn_up.weight"},
    [SP_TN_DOWN] = {"mlp.down_proj.weight", "ffn_down.weight"},
    /* EAGLE-3 only (layout_has); GGUF: llama.cpp's eagle3 names */
    [SP_TN_FC] = {"fc.weight", "fc.weight"},
    [SP_TN_TAP_NORM] = {"input_norm.weight", "enc.output_norm.weight"},
    [SP_TN_D2T] = {"d2t", "d2t"},
    [SP_TN_T2D] = {"t2d", NULL},
    [SP_TN_HIDDEN_NORM] = {"hidden_norm.weight", "attn_norm_2.weight"},
};

/* Llama-3 and Qwen3: post_attention_layernorm is the pre-MLP norm */
static const tn_entry llama_names[SP_TN_COUNT] = {
    [SP_TN_FFN_NORM] = {"post_attention_layernorm.weight", "ffn_norm.weight"},
    /* Qwen3-MoE; an expert's HF name is "mlp.experts.E." + this (sp_tensor_hf_expert_name) */
    [SP_TN_ROUTER] = {"mlp.gate.weight", "ffn_gate_inp.weight"},
    [SP_TN_EXP_GATE] = {"gate_proj.weight", "ffn_gate_exps.weight"},
    [SP_TN_EXP_UP] = {"up_proj.weight", "ffn_up_exps.weight"},
    [SP_TN_EXP_DOWN] = {"down_proj.weight", "ffn_down_exps.weight"},
};

/* Gemma-4 text: norms on the sublayer outputs, the layer scalar, per-layer inputs */
static const tn_entry gemma4_names[SP_TN_COUNT] = {
    [SP_TN_PLE_EMBED] = {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    [SP_TN_PLE_MODEL_PROJ] = {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    [SP_TN_PLE_PROJ_NORM] = {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    [SP_TN_ATTN_POST_NORM] = {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    [SP_TN_FFN_NORM] = {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    [SP_TN_FFN_POST_NORM] = {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    [SP_TN_LAYER_SCALAR] = {"layer_scalar", "layer_output_scale.weight"},
    [SP_TN_PLE_GATE] = {"per_layer_input_gate.weight", "inp_gate.weight"},
    [SP_TN_PLE_PROJ] = {"per_layer_projection.weight", "proj.weight"},
    [SP_TN_PLE_POST_NORM] = {"post_per_layer_input_norm.weight", "post_norm.weight"},
    /* the 26B-A4B's routed experts beside the dense MLP (docs/TRANSFORMER.md §5b); an expert's
     * gate / up / down are slices of the stacked experts.gate_up_proj / experts.down_proj */
    [SP_TN_ROUTER] = {"router.proj.weight", "ffn_gate_inp.weight"},
    [SP_TN_ROUTER_SCALE] = {"router.scale", "ffn_gate_inp.scale"},
    [SP_TN_EXP_SCALE] = {"router.per_expert_scale", "ffn_down_exps.scale"},
    [SP_TN_EXP_GATE] = {"gate_proj", "ffn_gate_up_exps.weight"},
    [SP_TN_EXP_UP] = {"up_proj", "ffn_gate_up_exps.weight"},
    [SP_TN_EXP_DOWN] = {"down_proj", "ffn_down_exps.weight"},
    [SP_TN_FFN_NORM_2] = {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
    [SP_TN_FFN_POST_NORM_1] = {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
    [SP_TN_FFN_POST_NORM_2] = {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
};

/* role's entry for arch (role in range): the architecture's own, else the shared one */
static const tn_entry *entry(sp_arch arch, int role) {
    const tn_entry *own = arch == SP_ARCH_GEMMA4 ? gemma4_names : llama_names;
    return own[role].hf ? &own[role] : &common_names[role];
}

static int is_expert_role(int r) { return r == SP_TN_EXP_GATE || r == SP_TN_EXP_UP || r == SP_TN_EXP_DOWN; }

/* whether a checkpoint of layout lay can hold a tensor of role r */
static int layout_has(sp_tn_layout lay, int r) {
    int specforge = lay == SP_TN_EAGLE3_SPECFORGE || lay == SP_TN_EAGLE3_SPECULATORS;
    switch (r) {
    case SP_TN_FC:
    case SP_TN_HIDDEN_NORM: return lay != SP_TN_MODEL;
    case SP_TN_TAP_NORM:
    case SP_TN_D2T:
    case SP_TN_T2D: return specforge;
    case SP_TN_PLE_EMBED:
    case SP_TN_PLE_MODEL_PROJ:
    case SP_TN_PLE_PROJ_NORM:
    case SP_TN_PLE_GATE:
    case SP_TN_PLE_PROJ:
    case SP_TN_PLE_POST_NORM: /* the EAGLE-3 layer has no per-layer input */
    case SP_TN_ROUTER:
    case SP_TN_ROUTER_SCALE:
    case SP_TN_EXP_SCALE:
    case SP_TN_FFN_NORM_2:
    case SP_TN_FFN_POST_NORM_1:
    case SP_TN_FFN_POST_NORM_2:
    case SP_TN_EXP_GATE:
    case SP_TN_EXP_UP:
    case SP_TN_EXP_DOWN: return lay == SP_TN_MODEL;
    default: return 1;
    }
}

/* name for role in layer (per-layer roles: after the layer's prefix, "midlayer." in the SpecForge
 * layout's HF names, else `layers` + ".N.") into buf */
static const char *format(const char *name, sp_tn_layout lay, int hf, sp_tensor_role role, int layer, char *buf,
                          size_t cap) {
    if (!name || (unsigned)role >= SP_TN_COUNT || (unsigned)lay >= SP_TN_LAYOUT_COUNT || !layout_has(lay, role))
        return NULL;
    int n;
    if (role < SP_TN_FIRST_LAYER_ROLE) n = snprintf(buf, cap, "%s", name);
    else if (hf && lay == SP_TN_EAGLE3_SPECFORGE) n = layer == 0 ? snprintf(buf, cap, "midlayer.%s", name) : -1;
    else n = snprintf(buf, cap, "%s.%d.%s", hf ? "layers" : "blk", layer, name);
    return n >= 0 && (size_t)n < cap ? buf : NULL;
}

const char *sp_tensor_hf_name_in(sp_tn_layout lay, sp_arch arch, sp_tensor_role role, int layer, char *buf,
                                 size_t cap) {
    if ((unsigned)role >= SP_TN_COUNT || is_expert_role(role)) return NULL;
    return format(entry(arch, role)->hf, lay, 1, role, layer, buf, cap);
}

const char *sp_tensor_hf_expert_name(sp_arch arch, sp_tensor_role role, int layer, int expert, char *buf,
                                     size_t cap) {
    if (!is_expert_role(role) || expert < 0 || layer < 0 || !entry(arch, role)->hf) return NULL;
    int n = snprintf(buf, cap, arch == SP_ARCH_GEMMA4 ? "layers.%d.experts.%d.%s" : "layers.%d.mlp.experts.%d.%s",
                     layer, expert, entry(arch, role)->hf);
    return n >= 0 && (size_t)n < cap ? buf : NULL;
}

int sp_tensor_expert_of(sp_arch arch, const char *hf, int *layer, int *expert) {
    int li, e, used = 0;
    const char *pat = arch == SP_ARCH_GEMMA4 ? "layers.%d.experts.%d.%n" : "layers.%d.mlp.experts.%d.%n";
    if (sscanf(hf, pat, &li, &e, &used) != 2 || used == 0 || li < 0 || e < 0) return -1;
    for (int r = SP_TN_EXP_GATE; r <= SP_TN_EXP_DOWN; r++)
        if (entry(arch, r)->hf && !strcmp(hf + used, entry(arch, r)->hf)) {
            *layer = li;
            *expert = e;
            return r;
        }
    return -1;
}

const char *sp_tensor_expert_stack(sp_arch arch, sp_tensor_role role, int layer, int gguf, char *buf, size_t cap,
                                   int *part, int *parts) {
    if (!is_expert_role(role) || layer < 0) return NULL;
    int gemma = arch == SP_ARCH_GEMMA4;
    *parts = gemma && role != SP_TN_EXP_DOWN ? 2 : 1;
    *part = gemma && role == SP_TN_EXP_UP ? 1 : 0;
    if (gguf) return sp_tensor_gguf_name(arch, role, layer, buf, cap);
    if (!gemma) return NULL;
    int n = snprintf(buf, cap, "layers.%d.experts.%s", layer, role == SP_TN_EXP_DOWN ? "down_proj" : "gate_up_proj");
    return n >= 0 && (size_t)n < cap ? buf : NULL;
}

const char *sp_tensor_gguf_name_in(sp_tn_layout lay, sp_arch arch, sp_tensor_role role, int layer, char *buf,
                                   size_t cap) {
    if ((unsigned)role >= SP_TN_COUNT) return NULL;
    return format(entry(arch, role)->gguf, lay, 0, role, layer, buf, cap);
}

int sp_tensor_role_of_in(sp_tn_layout lay, sp_arch arch, const char *hf, int *layer) {
    int li = -1, used = 0;
    const char *rest = hf;
    if (lay == SP_TN_EAGLE3_SPECFORGE) {
        if (!strncmp(hf, "midlayer.", 9)) li = 0, rest = hf + 9;
    } else if (sscanf(hf, "layers.%d.%n", &li, &used) == 1 && used > 0) {
        rest = hf + used;
    } else {
        li = -1;
    }
    if ((unsigned)lay >= SP_TN_LAYOUT_COUNT) return -1;
    for (int r = 0; r < SP_TN_COUNT; r++) {
        const tn_entry *t = entry(arch, r);
        if ((r >= SP_TN_FIRST_LAYER_ROLE) != (li >= 0) || !t->hf || !layout_has(lay, r) || is_expert_role(r) ||
            strcmp(rest, t->hf))
            continue;
        *layer = li;
        return r;
    }
    return -1;
}

const char *sp_tensor_hf_name(sp_arch arch, sp_tensor_role role, int layer, char *buf, size_t cap) {
    return sp_tensor_hf_name_in(SP_TN_MODEL, arch, role, layer, buf, cap);
}

const char *sp_tensor_gguf_name(sp_arch arch, sp_tensor_role role, int layer, char *buf, size_t cap) {
    return sp_tensor_gguf_name_in(SP_TN_MODEL, arch, role, layer, buf, cap);
}

int sp_tensor_role_of(sp_arch arch, const char *hf, int *layer) {
    return sp_tensor_role_of_in(SP_TN_MODEL, arch, hf, layer);
}
