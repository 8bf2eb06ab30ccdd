/* gguf_names.c — HF ↔ GGUF tensor names (see gguf_names.h, docs/GGUF.md). */
#include "gguf_names.h"

#include <stdio.h>
#include <string.h>

const char *gguf_tensor_name(sp_arch arch, const char *hf, char *buf, size_t cap) {
    static const struct {
        const char *hf, *gg;
    } global[] = {
        {"embed_tokens.weight", "token_embd.weight"},
        {"norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
        {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
        {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    };
    static const struct {
        const char *hf, *gg;
    } layer[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"layer_scalar", "layer_output_scale.weight"},
        {"per_layer_input_gate.weight", "inp_gate.weight"},
        {"per_layer_projection.weight", "proj.weight"},
        {"post_per_layer_input_norm.weight", "post_norm.weight"},
    };
    for (size_t i = 0; i < sizeof global / sizeof global[0]; i++)
        if (!strcmp(hf, global[i].hf)) return global[i].gg;
    int li, used = 0;
    if (sscanf(hf, "layers.%d.%n", &li, &used) != 1 || used == 0) return NULL;
    const char *rest = hf + used, *mapped = NULL;
    /* post_attention_layernorm is the pre-FFN norm in llama/qwen3, a real post-norm in gemma4 */
    if (!strcmp(rest, "post_attention_layernorm.weight"))
        mapped = arch == SP_ARCH_GEMMA4 ? "post_attention_norm.weight" : "ffn_norm.weight";
    for (size_t i = 0; !mapped && i < sizeof layer / sizeof layer[0]; i++)
        if (!strcmp(rest, layer[i].hf)) mapped = layer[i].gg;
    if (!mapped) return NULL;
    snprintf(buf, cap, "blk.%d.%s", li, mapped);
    return buf;
}
