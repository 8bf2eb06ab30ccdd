/* test_config.c — config.json parsing for llama, qwen3, gemma4: the fixtures, both key forms,
 * Gemma-4 layer typing and KV-sharing rules, and a clear error for each bad input. */
#include <string.h>

#include "harness.h"
#include "core/core.h"
#include "specula.h"

static void test_fixtures(void) {
    sp_config c;
    sp_err err = {{0}};
    CHECK(sp_config_load(&c, "tests/data/ref-logits/llama/config.json", &err) == 0, "%s", err.msg);
    CHECK(c.arch == SP_ARCH_LLAMA && c.head_dim == 8 && c.n_kv_heads == 2 && c.rope.type == SP_ROPE_LLAMA3, "llama");
    CHECK(c.rope.factor == 8 && c.rope.original_max_pos == 512 && c.rope.theta == 500000, "llama rope");
    CHECK(c.tie_embeddings && !c.qk_norm && fabs(c.rms_eps - 1e-5) < 1e-12, "llama misc");

    CHECK(sp_config_load(&c, "tests/data/ref-logits/qwen3/config.json", &err) == 0, "%s", err.msg);
    CHECK(c.arch == SP_ARCH_QWEN3 && c.head_dim == 32 && c.qk_norm && c.rope.type == SP_ROPE_DEFAULT, "qwen3");
    CHECK(c.rope.theta == 1e6 && c.n_eos == 1 && c.eos_ids[0] == 2, "qwen3 rope/eos");

    CHECK(sp_config_load(&c, "tests/data/ref-logits/gemma4/config.json", &err) == 0, "%s", err.msg);
    CHECK(c.arch == SP_ARCH_GEMMA4 && !strcmp(c.tensor_prefix, "model.language_model."), "gemma4 prefix");
    CHECK(c.n_layers == 6 && c.sliding_window == 8 && c.final_softcap == 30 && c.ple_dim == 16, "gemma4 dims");
    for (int i = 0; i < 6; i++) {
        CHECK(c.layers[i].sliding == (i % 2 == 0), "layer %d type", i);
        CHECK(c.layers[i].head_dim == (i % 2 ? 32 : 16), "layer %d head_dim", i);
        CHECK(c.layers[i].n_kv_heads == (i % 2 ? 1 : 2), "layer %d kv heads", i);
        CHECK(c.layers[i].has_v_proj == (i % 2 == 0), "layer %d v_proj", i);
    }
    CHECK(c.layers[4].kv_source == 2 && c.layers[5].kv_source == 3 && c.layers[3].kv_source == 3, "kv sharing");
    CHECK(c.rope.type == SP_ROPE_PROPORTIONAL && c.rope.partial_rotary_factor == 0.25, "gemma4 full rope");
    CHECK(c.rope_swa.type == SP_ROPE_DEFAULT && c.rope_swa.theta == 10000, "gemma4 sliding rope");
}

static const char *BASE_Q = "{\"model_type\":\"qwen3\",\"vocab_size\":100,\"hidden_size\":16,"
                            "\"intermediate_size\":32,\"num_hidden_layers\":2,\"num_attention_heads\":2,"
                            "\"num_key_value_heads\":1,\"head_dim\":8%s}";

static int parse_q(const char *extra, sp_err *err) {
    char buf[2048];
    snprintf(buf, sizeof buf, BASE_Q, extra);
    sp_config c;
    return sp_config_parse(&c, buf, "cfg", err);
}

static void test_errors(void) {
    sp_err err = {{0}};
    sp_config c;
    CHECK(parse_q("", &err) == 0, "base: %s", err.msg);
    CHECK(sp_config_parse(&c, "{\"model_type\":\"mamba\"}", "cfg", &err) && strstr(err.msg, "unknown architecture"),
          "%s", err.msg);
    CHECK(sp_config_parse(&c, "{\"model_type\":\"qwen3\"}", "cfg", &err) && strstr(err.msg, "vocab_size"), "%s",
          err.msg);
    CHECK(sp_config_parse(&c, "{not json", "cfg", &err) && strstr(err.msg, "invalid JSON"), "%s", err.msg);
    CHECK(sp_config_parse(&c, "[1]", "cfg", &err) && strstr(err.msg, "not a JSON object"), "%s", err.msg);
    CHECK(sp_config_parse(&c, "{\"a\":1,\"a\":2}", "cfg", &err), "duplicate keys accepted");
    CHECK(parse_q(",\"hidden_size\":\"x\"", &err), "duplicate hidden_size accepted");
    CHECK(parse_q(",\"attention_bias\":true", &err) && strstr(err.msg, "attention_bias"), "%s", err.msg);
    CHECK(parse_q(",\"hidden_act\":\"relu\"", &err) && strstr(err.msg, "relu"), "%s", err.msg);
    CHECK(parse_q(",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}", &err) && strstr(err.msg, "yarn"), "%s",
          err.msg);
    CHECK(parse_q(",\"rope_theta\":\"big\"", &err) && strstr(err.msg, "rope_theta"), "%s", err.msg);
    CHECK(parse_q(",\"use_sliding_window\":true", &err) && strstr(err.msg, "sliding"), "%s", err.msg);
    /* num_attention_heads not divisible by kv heads */
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":12,\"intermediate_size\":8,"
             "\"num_hidden_layers\":1,\"num_attention_heads\":3,\"num_key_value_heads\":2}");
    CHECK(sp_config_parse(&c, buf, "cfg", &err) && strstr(err.msg, "divisible"), "%s", err.msg);
    /* transformers v5 rope_parameters form */
    CHECK(parse_q(",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":12345}", &err) == 0, "%s", err.msg);
    snprintf(buf, sizeof buf, BASE_Q, ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":12345}");
    sp_config_parse(&c, buf, "cfg", &err);
    CHECK(c.rope.theta == 12345, "rope_parameters theta");
}

static const char *G = "{\"model_type\":\"gemma4_text\",\"hidden_size\":16,\"intermediate_size\":32,"
                       "\"num_hidden_layers\":%d,\"num_attention_heads\":2,\"num_key_value_heads\":1%s}";

static void test_gemma_rules(void) {
    char buf[2048];
    sp_err err = {{0}};
    sp_config c;
    /* default layer pattern (i+1)%6 and last layer forced full; bare prefix */
    snprintf(buf, sizeof buf, G, 8, "");
    int old = sp_log_level;
    sp_log_level = -1;
    CHECK(sp_config_parse(&c, buf, "cfg", &err) == 0, "%s", err.msg);
    sp_log_level = old;
    CHECK(!strcmp(c.tensor_prefix, "model."), "bare gemma4_text prefix");
    for (int i = 0; i < 8; i++) CHECK(c.layers[i].sliding == (i != 5 && i != 7), "default type of layer %d", i);
    /* the expert block needs its sizes */
    snprintf(buf, sizeof buf, G, 6, ",\"enable_moe_block\":true");
    CHECK(sp_config_parse(&c, buf, "cfg", &err) && strstr(err.msg, "num_experts"), "%s", err.msg);
    /* per_layer_config form for the full layer head dim / kv heads */
    snprintf(buf, sizeof buf, G, 6,
             ",\"attention_k_eq_v\":true,\"per_layer_config\":{\"5\":{\"head_dim\":64,\"num_key_value_heads\":1}}");
    CHECK(sp_config_parse(&c, buf, "cfg", &err) == 0, "%s", err.msg);
    CHECK(c.layers[5].head_dim == 64 && c.global_head_dim == 64 && !c.layers[5].has_v_proj, "per_layer_config");
    /* KV sharing: E2B-like 4:1 pattern, 10 layers, 4 shared → sliding read 4? full read 4 */
    snprintf(buf, sizeof buf, G, 10,
             ",\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
             "\"full_attention\",\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
             "\"sliding_attention\",\"full_attention\"],\"num_kv_shared_layers\":4,\"use_double_wide_mlp\":true");
    CHECK(sp_config_parse(&c, buf, "cfg", &err) == 0, "%s", err.msg);
    CHECK(c.layers[6].kv_source == 5 && c.layers[9].kv_source == 4 && c.layers[5].kv_source == 5, "sharing");
    CHECK(c.layers[6].ffn_dim == 64 && c.layers[5].ffn_dim == 32, "double-wide MLP on shared layers");
    snprintf(buf, sizeof buf, G, 3, ",\"num_kv_shared_layers\":3");
    CHECK(sp_config_parse(&c, buf, "cfg", &err) && strstr(err.msg, "num_kv_shared_layers"), "%s", err.msg);
    snprintf(buf, sizeof buf, G, 2, ",\"layer_types\":[\"sliding_attention\"]");
    CHECK(sp_config_parse(&c, buf, "cfg", &err) && strstr(err.msg, "layer_types"), "%s", err.msg);
    snprintf(buf, sizeof buf, "{\"model_type\":\"gemma4\",\"text_config\":5}");
    CHECK(sp_config_parse(&c, buf, "cfg", &err) && strstr(err.msg, "text_config"), "%s", err.msg);
}

int main(void) {
    RUN(test_fixtures);
    RUN(test_errors);
    RUN(test_gemma_rules);
    return harness_done("test_config");
}
