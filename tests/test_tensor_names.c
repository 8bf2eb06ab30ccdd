/* test_tensor_names.c — the tensor-name table (src/formats/tensor_names.c): per architecture the
 * Hugging Face and GGUF names of each role, the reverse lookup, and the HF → GGUF mapping the
 * exporter and the GGUF loader use (docs/TRANSFORMER.md §2). */
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
    CHECK(n_names == 14 + 14 + 23, "%d names in the tables", n_names);
    int layer;
    CHECK(sp_tensor_role_of(SP_ARCH_QWEN3, "layers.1.mlp.experts.weight", &layer) < 0, "unknown name has a role");
    CHECK(sp_tensor_role_of(SP_ARCH_QWEN3, "input_layernorm.weight", &layer) < 0, "layer name without a layer");
    char buf[64];
    CHECK(!sp_gguf_tensor_name(SP_ARCH_LLAMA, "layers.0.per_layer_input_gate.weight", buf, sizeof buf),
          "a gemma4-only tensor named in llama");
}

int main(void) {
    RUN(test_norm_roles);
    RUN(test_round_trip);
    return harness_done("test_tensor_names");
}
