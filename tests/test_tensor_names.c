/* test_tensor_names.c — the tensor-name table (src/formats/tensor_names.c): per architecture the
 * Hugging Face and GGUF names of each role, the reverse lookup, and the HF → GGUF mapping the
 * exporter and the GGUF loader use (docs/TRANSFORMER.md §2); EAGLE-3's layouts (docs/EAGLE3.md §1). */
#include "harness.h"
#include "formats/gguf_names.h"
#include "formats/tensor_names.h"

static const char *hf(sp_arch a, sp_tensor_role r, int li) {
    static char buf[160];
    return sp_tensor_hf_name(a, r, li, buf, sizeof buf);
}

static const char *gg(sp_arch a, sp_tensor_role r, int li) {
    static char buf[160];
    return sp_tensor_gguf_name(a, r, li, buf, sizeof buf);
}

/* post_attention_layernorm means the pre-MLP norm in llama / qwen3 and the attention post-norm in
 * gemma4; GGUF names follow the meaning */
static void test_norm_roles(void) {
    const char *s;
    CHECK((s = hf(SP_ARCH_QWEN3, SP_TN_FFN_NORM, 3)) && !strcmp(s, "layers.3.post_attention_layernorm.weight"), "%s", s);
    CHECK((s = gg(SP_ARCH_LLAMA, SP_TN_FFN_NORM, 3)) && !strcmp(s, "blk.3.ffn_norm.weight"), "%s", s);
    CHECK(!hf(SP_ARCH_LLAMA, SP_TN_ATTN_POST_NORM, 0), "llama has no attention post-norm");
    CHECK((s = hf(SP_ARCH_GEMMA4, SP_TN_ATTN_POST_NORM, 7)) && !strcmp(s, "layers.7.post_attention_layernorm.weight"),
          "%s", s);
    CHECK((s = gg(SP_ARCH_GEMMA4, SP_TN_ATTN_POST_NORM, 7)) && !strcmp(s, "blk.7.post_attention_norm.weight"), "%s", s);
    CHECK((s = hf(SP_ARCH_GEMMA4, SP_TN_FFN_NORM, 0)) && !strcmp(s, "layers.0.pre_feedforward_layernorm.weight"), "%s",
          s);
    CHECK((s = gg(SP_ARCH_GEMMA4, SP_TN_LAYER_SCALAR, 2)) && !strcmp(s, "blk.2.layer_output_scale.weight"), "%s", s);
    CHECK((s = hf(SP_ARCH_GEMMA4, SP_TN_EMBED, 5)) && !strcmp(s, "embed_tokens.weight"), "model-wide: %s", s);
    CHECK((s = gg(SP_ARCH_QWEN3, SP_TN_LM_HEAD, 0)) && !strcmp(s, "output.weight"), "%s", s);
    char small[8];
    CHECK(!sp_tensor_hf_name(SP_ARCH_QWEN3, SP_TN_Q, 12, small, sizeof small), "truncated name accepted");
    CHECK(!sp_tensor_hf_name(SP_ARCH_QWEN3, SP_TN_COUNT, 0, small, sizeof small), "role out of range accepted");
}

/* Qwen3-MoE experts: one HF tensor per expert, one stacked GGUF tensor per role; Gemma-4's stacked in both */
static void test_expert_names(void) {
    char buf[160];
    const char *s = sp_tensor_hf_expert_name(SP_ARCH_QWEN3, SP_TN_EXP_UP, 3, 17, buf, sizeof buf);
    CHECK(s && !strcmp(s, "layers.3.mlp.experts.17.up_proj.weight"), "%s", s ? s : "(null)");
    int li = -1, e = -1;
    CHECK(sp_tensor_expert_of(SP_ARCH_QWEN3, "layers.3.mlp.experts.17.down_proj.weight", &li, &e) == SP_TN_EXP_DOWN &&
              li == 3 && e == 17,
          "expert name parsed as layer %d expert %d", li, e);
    CHECK(sp_tensor_expert_of(SP_ARCH_QWEN3, "layers.3.mlp.experts.17.bias", &li, &e) < 0, "not an expert tensor");
    CHECK(!sp_tensor_hf_name(SP_ARCH_QWEN3, SP_TN_EXP_GATE, 0, buf, sizeof buf), "an expert role has no single name");
    CHECK((s = gg(SP_ARCH_QWEN3, SP_TN_EXP_GATE, 2)) && !strcmp(s, "blk.2.ffn_gate_exps.weight"), "%s", s);
    CHECK((s = gg(SP_ARCH_QWEN3, SP_TN_ROUTER, 2)) && !strcmp(s, "blk.2.ffn_gate_inp.weight"), "%s", s);
    /* Gemma-4: per-expert names that exist as slices of the stacked tensors (gate and up in one) */
    CHECK((s = sp_tensor_hf_expert_name(SP_ARCH_GEMMA4, SP_TN_EXP_UP, 4, 9, buf, sizeof buf)) &&
              !strcmp(s, "layers.4.experts.9.up_proj"),
          "%s", s ? s : "(null)");
    CHECK(sp_tensor_expert_of(SP_ARCH_GEMMA4, "layers.4.experts.9.gate_proj", &li, &e) == SP_TN_EXP_GATE && li == 4 &&
              e == 9,
          "gemma4 expert name parsed as layer %d expert %d", li, e);
    int part = -1, parts = -1;
    CHECK((s = sp_tensor_expert_stack(SP_ARCH_GEMMA4, SP_TN_EXP_UP, 4, 0, buf, sizeof buf, &part, &parts)) &&
              !strcmp(s, "layers.4.experts.gate_up_proj") && part == 1 && parts == 2,
          "gemma4 up: %s part %d of %d", s ? s : "(null)", part, parts);
    CHECK((s = sp_tensor_expert_stack(SP_ARCH_GEMMA4, SP_TN_EXP_DOWN, 4, 1, buf, sizeof buf, &part, &parts)) &&
              !strcmp(s, "blk.4.ffn_down_exps.weight") && part == 0 && parts == 1,
          "gemma4 down (GGUF): %s part %d of %d", s ? s : "(null)", part, parts);
    CHECK(!sp_tensor_expert_stack(SP_ARCH_QWEN3, SP_TN_EXP_UP, 4, 0, buf, sizeof buf, &part, &parts),
          "Qwen3-MoE's HF experts are one tensor each, not stacked");
}

/* every name of every architecture maps back to its role and layer, and to its GGUF name */
static void test_round_trip(void) {
    const sp_arch archs[] = {SP_ARCH_LLAMA, SP_ARCH_QWEN3, SP_ARCH_GEMMA4};
    int n_names = 0;
    for (int a = 0; a < 3; a++)
        for (int r = 0; r < SP_TN_COUNT; r++) {
            int li = r >= SP_TN_FIRST_LAYER_ROLE ? 11 : -1;
            char h[160], g[160], buf[160];
            if (!sp_tensor_hf_name(archs[a], (sp_tensor_role)r, li, h, sizeof h)) continue;
            n_names++;
            int layer = -2, role = sp_tensor_role_of(archs[a], h, &layer);
            CHECK(role == r && layer == li, "%s: role %d layer %d, expected %d %d", h, role, layer, r, li);
            CHECK(sp_tensor_gguf_name(archs[a], (sp_tensor_role)r, li, g, sizeof g), "%s has no GGUF name", h);
            const char *m = sp_gguf_tensor_name(archs[a], h, buf, sizeof buf);
            CHECK(m && !strcmp(m, g), "%s → %s, expected %s", h, m ? m : "(null)", g);
        }
    CHECK(n_names == 15 + 15 + 29, "%d names in the tables", n_names); /* llama / qwen3 with the MoE router; gemma4 with its MoE block */
    int layer;
    CHECK(sp_tensor_role_of(SP_ARCH_QWEN3, "layers.1.mlp.experts.weight", &layer) < 0, "unknown name has a role");
    CHECK(sp_tensor_role_of(SP_ARCH_QWEN3, "input_layernorm.weight", &layer) < 0, "layer name without a layer");
    char buf[64];
    CHECK(!sp_gguf_tensor_name(SP_ARCH_LLAMA, "layers.0.per_layer_input_gate.weight", buf, sizeof buf),
          "a gemma4-only tensor named in llama");
}

static const char *hf_in(sp_tn_layout lay, sp_arch a, sp_tensor_role r, int li) {
    static char buf[160];
    return sp_tensor_hf_name_in(lay, a, r, li, buf, sizeof buf);
}

static const char *gg_in(sp_tn_layout lay, sp_arch a, sp_tensor_role r, int li) {
    static char buf[160];
    return sp_tensor_gguf_name_in(lay, a, r, li, buf, sizeof buf);
}

/* EAGLE-3's layouts (docs/EAGLE3.md §1): SpecForge's midlayer.* with fc, input_norm, d2t, t2d; the
 * same as layers.0.*; DeepSpec's layers.0.* in the target family's block with fc and hidden_norm */
static void test_eagle3_names(void) {
    const sp_tn_layout SF = SP_TN_EAGLE3_SPECFORGE, SV = SP_TN_EAGLE3_SPECULATORS, DS = SP_TN_EAGLE3_DEEPSPEC;
    const char *s;
    CHECK((s = hf_in(SF, SP_ARCH_LLAMA, SP_TN_HIDDEN_NORM, 0)) && !strcmp(s, "midlayer.hidden_norm.weight"), "%s", s);
    CHECK((s = hf_in(SF, SP_ARCH_LLAMA, SP_TN_Q, 0)) && !strcmp(s, "midlayer.self_attn.q_proj.weight"), "%s", s);
    CHECK((s = hf_in(SF, SP_ARCH_LLAMA, SP_TN_FFN_NORM, 0)) && !strcmp(s, "midlayer.post_attention_layernorm.weight"),
          "%s", s);
    CHECK(!hf_in(SF, SP_ARCH_LLAMA, SP_TN_Q, 1), "SpecForge has one layer");
    CHECK((s = hf_in(SV, SP_ARCH_LLAMA, SP_TN_HIDDEN_NORM, 0)) && !strcmp(s, "layers.0.hidden_norm.weight"), "%s", s);
    CHECK((s = hf_in(SF, SP_ARCH_LLAMA, SP_TN_FC, -1)) && !strcmp(s, "fc.weight"), "%s", s);
    CHECK((s = hf_in(SF, SP_ARCH_LLAMA, SP_TN_TAP_NORM, -1)) && !strcmp(s, "input_norm.weight"), "%s", s);
    CHECK((s = hf_in(SV, SP_ARCH_LLAMA, SP_TN_D2T, -1)) && !strcmp(s, "d2t"), "%s", s);
    CHECK((s = hf_in(SF, SP_ARCH_LLAMA, SP_TN_T2D, -1)) && !strcmp(s, "t2d"), "%s", s);
    CHECK((s = hf_in(SF, SP_ARCH_LLAMA, SP_TN_LM_HEAD, -1)) && !strcmp(s, "lm_head.weight"), "%s", s);
    CHECK((s = hf_in(DS, SP_ARCH_QWEN3, SP_TN_HIDDEN_NORM, 0)) && !strcmp(s, "layers.0.hidden_norm.weight"), "%s", s);
    CHECK((s = hf_in(DS, SP_ARCH_QWEN3, SP_TN_K_NORM, 0)) && !strcmp(s, "layers.0.self_attn.k_norm.weight"), "%s", s);
    CHECK((s = hf_in(DS, SP_ARCH_GEMMA4, SP_TN_FFN_POST_NORM, 0)) &&
              !strcmp(s, "layers.0.post_feedforward_layernorm.weight"), "%s", s);
    CHECK((s = hf_in(DS, SP_ARCH_GEMMA4, SP_TN_LAYER_SCALAR, 0)) && !strcmp(s, "layers.0.layer_scalar"), "%s", s);
    CHECK((s = hf_in(DS, SP_ARCH_QWEN3, SP_TN_FC, -1)) && !strcmp(s, "fc.weight"), "%s", s);
    CHECK(!hf_in(DS, SP_ARCH_QWEN3, SP_TN_D2T, -1) && !hf_in(DS, SP_ARCH_QWEN3, SP_TN_TAP_NORM, -1),
          "DeepSpec has no reduced vocabulary and no tap norm");
    CHECK(!hf_in(DS, SP_ARCH_GEMMA4, SP_TN_PLE_GATE, 0), "the EAGLE-3 layer has no per-layer input");
    CHECK(!hf(SP_ARCH_LLAMA, SP_TN_HIDDEN_NORM, 0) && !hf(SP_ARCH_QWEN3, SP_TN_FC, 0) &&
              !hf(SP_ARCH_LLAMA, SP_TN_D2T, 0), "EAGLE-3 roles named in a model");
    /* llama.cpp's eagle3 GGUF names */
    CHECK((s = gg_in(SF, SP_ARCH_LLAMA, SP_TN_HIDDEN_NORM, 0)) && !strcmp(s, "blk.0.attn_norm_2.weight"), "%s", s);
    CHECK((s = gg_in(SF, SP_ARCH_LLAMA, SP_TN_TAP_NORM, -1)) && !strcmp(s, "enc.output_norm.weight"), "%s", s);
    CHECK((s = gg_in(SF, SP_ARCH_LLAMA, SP_TN_Q, 0)) && !strcmp(s, "blk.0.attn_q.weight"), "%s", s);
    CHECK((s = gg_in(SF, SP_ARCH_LLAMA, SP_TN_D2T, -1)) && !strcmp(s, "d2t"), "%s", s);
    CHECK(!gg_in(SF, SP_ARCH_LLAMA, SP_TN_T2D, -1), "t2d is not exported");
    /* every name of every layout maps back to its role and layer */
    const sp_tn_layout lays[] = {SF, SV, DS};
    const sp_arch archs[] = {SP_ARCH_LLAMA, SP_ARCH_QWEN3, SP_ARCH_GEMMA4};
    int n_names[3] = {0};
    for (int k = 0; k < 3; k++)
        for (int a = 0; a < 3; a++)
            for (int r = 0; r < SP_TN_COUNT; r++) {
                int li = r >= SP_TN_FIRST_LAYER_ROLE ? 0 : -1;
                char h[160];
                if (!sp_tensor_hf_name_in(lays[k], archs[a], (sp_tensor_role)r, li, h, sizeof h)) continue;
                if (a == 0) n_names[k]++;
                int layer = -2, role = sp_tensor_role_of_in(lays[k], archs[a], h, &layer);
                CHECK(role == r && layer == li, "layout %d: %s: role %d layer %d, expected %d %d", k, h, role, layer, r,
                      li);
            }
    /* llama: 3 model-wide + 11 per layer; SpecForge adds fc, input_norm, d2t, t2d, hidden_norm; DeepSpec fc and
     * hidden_norm */
    CHECK(n_names[0] == 14 + 5 && n_names[1] == 14 + 5 && n_names[2] == 14 + 2, "%d / %d / %d names", n_names[0],
          n_names[1], n_names[2]);
    int layer;
    CHECK(sp_tensor_role_of_in(SF, SP_ARCH_LLAMA, "layers.0.hidden_norm.weight", &layer) < 0,
          "a layers.0 name in the midlayer layout");
    CHECK(sp_tensor_role_of_in(DS, SP_ARCH_QWEN3, "midlayer.hidden_norm.weight", &layer) < 0,
          "a midlayer name in the DeepSpec layout");
    CHECK(sp_tensor_role_of(SP_ARCH_LLAMA, "fc.weight", &layer) < 0, "fc.weight has a role in a model");
}

int main(void) {
    RUN(test_norm_roles);
    RUN(test_round_trip);
    RUN(test_expert_names);
    RUN(test_eagle3_names);
    return harness_done("test_tensor_names");
}
