/* test_gemma4_unified.c — the Gemma-4 12B family: gemma4_unified targets and
 * gemma4_unified_assistant drafters (docs/GEMMA4-UNIFIED.md).
 *
 * - config: gemma4_unified (text_config gemma4_unified_text or gemma4_text) and a bare
 *   gemma4_unified_text parse as a Gemma-4 stack; a foreign text_config model_type and the
 *   MoE block (the 26B-A4B) are refused with the key named;
 * - the unshrunk gemma4-12b preset's config has the published 12B geometry;
 * - logits of every position vs tests/data/ref-logits/gemma4unified/logits.ref.f32 (an
 *   independent float64 forward, make_fixture.py): max|Δ| <= 1e-5 · max|logit| and the same
 *   argmax, prefill and token by token;
 * - the assistant fixture (written by make_fixture.py) declares 16 centroids and ships no
 *   centroid tensors: it loads with the tied head; through the binary its greedy speculative
 *   output equals plain;
 * - through the binary: new-model --arch gemma4_unified --preset gemma4-12b shrunk with --set,
 *   new-drafter writes a gemma4_unified_assistant for it (tied head), greedy speculative ==
 *   plain; export-gguf writes general.architecture "gemma4" and the GGUF's greedy tokens equal
 *   the safetensors model's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drafters/assistant.h"
#include "drafters/drafters.h"
#include "formats/gguf.h"
#include "formats/presets.h"
#include "model/model.h"
#include "fixtures.h"
#include "harness.h"
#include "specula.h"

#define FIX "tests/data/ref-logits/gemma4unified"
#define NTOK 24

static char cli[256]; /* the specula binary beside this test's build folder */

static sp_model *load(const char *dir, int threads) { return fixture_load_dir(dir, threads); }

#define TEXT_KEYS                                                                                            \
    "\"vocab_size\": 64, \"hidden_size\": 16, \"intermediate_size\": 32, \"num_hidden_layers\": 2, "     \
    "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8, \"global_head_dim\": 16, " \
    "\"layer_types\": [\"sliding_attention\", \"full_attention\"]"

static void test_config(void) {
    sp_model *m = load(FIX, 1);
    CHECK(m != NULL, "load the fixture");
    if (m) {
        const sp_config *c = sp_model_config(m);
        CHECK(c->arch == SP_ARCH_GEMMA4 && c->n_layers == 6 && c->ple_dim == 0 && c->n_kv_shared == 0 &&
                  c->attention_k_eq_v && c->sliding_window == 8 && c->final_softcap == 30.0,
              "fixture config: arch %d, %d layers, ple %d, shared %d", c->arch, c->n_layers, c->ple_dim,
              c->n_kv_shared);
        CHECK(c->layers[4].sliding && !c->layers[5].sliding && c->layers[5].head_dim == 32 &&
                  c->layers[5].n_kv_heads == 1 && !c->layers[5].has_v_proj && c->layers[0].has_v_proj,
              "layer geometry");
        CHECK(!strcmp(c->tensor_prefix, "model.language_model."), "prefix %s", c->tensor_prefix);
        sp_model_free(m);
    }
    static const struct {
        const char *json, *want; /* want NULL: accepted */
    } cases[] = {
        {"{\"model_type\": \"gemma4_unified\", \"text_config\": {\"model_type\": \"gemma4_text\", " TEXT_KEYS "}}",
         NULL},
        {"{\"model_type\": \"gemma4_unified_text\", " TEXT_KEYS "}", NULL},
        {"{\"model_type\": \"gemma4_unified\", \"text_config\": {\"model_type\": \"qwen3\", " TEXT_KEYS "}}",
         "text_config.model_type"},
        {"{\"model_type\": \"gemma4_unified\"}", "text_config"},
        {"{\"model_type\": \"gemma4_unified\", \"text_config\": {\"enable_moe_block\": true, " TEXT_KEYS "}}",
         "num_experts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sp_config cfg;
        sp_err err = {{0}};
        int rc = sp_config_parse(&cfg, cases[i].json, "config.json", &err);
        if (!cases[i].want) {
            CHECK(rc == 0 && cfg.arch == SP_ARCH_GEMMA4, "case %zu refused: %s", i, err.msg);
            if (rc == 0 && i == 1) CHECK(!strcmp(cfg.tensor_prefix, "model."), "bare prefix %s", cfg.tensor_prefix);
        } else {
            CHECK(rc != 0 && strstr(err.msg, cases[i].want), "case %zu accepted or unclear: %s", i, err.msg);
        }
    }
}

/* the unshrunk gemma4-12b preset's config: the published 12B geometry (§2 of the doc) */
static void test_preset_shape(void) {
    sp_err err = {{0}};
    char *json = sp_preset_config_json("gemma4_unified", "gemma4-12b", "bfloat16", NULL, 0, &err);
    CHECK(json != NULL, "%s", err.msg);
    if (!json) return;
    sp_config c;
    CHECK(sp_config_parse(&c, json, "gemma4-12b", &err) == 0, "%s", err.msg);
    int full = 0, ok = 1;
    for (int i = 0; i < c.n_layers; i++) {
        const sp_layer_config *l = &c.layers[i];
        full += !l->sliding;
        ok &= l->sliding == ((i + 1) % 6 != 0) && l->kv_source == i;
        ok &= l->sliding ? l->head_dim == 256 && l->n_kv_heads == 8 && l->has_v_proj
                         : l->head_dim == 512 && l->n_kv_heads == 1 && !l->has_v_proj;
    }
    CHECK(c.arch == SP_ARCH_GEMMA4 && c.n_layers == 48 && full == 8 && ok && c.hidden_size == 3840 &&
              c.n_heads == 16 && c.ffn_dim == 15360 && c.vocab_size == 262144 && c.sliding_window == 1024 &&
              c.ple_dim == 0 && c.tie_embeddings && c.final_softcap == 30.0,
          "12b geometry: %d layers (%d full), H %d, window %d", c.n_layers, full, c.hidden_size, c.sliding_window);
    CHECK(strstr(json, "\"gemma4_unified_text\"") && strstr(json, "Gemma4UnifiedForConditionalGeneration"),
          "model types");
    free(json);
}

static void test_reference_logits(void) {
    fixture_ref r;
    char msg[512];
    int ok = fixture_ref_logits(FIX, 2, NTOK, &r, msg, sizeof msg) == 0;
    CHECK(ok, "%s", msg);
    if (!ok) return;
    printf("  gemma4_unified prefill rel err %.2e (argmax misses %d), decode rel err %.2e (misses %d)\n", r.rel_pre,
           r.miss_pre, r.rel_step, r.miss_step);
    CHECK(r.rel_pre <= 1e-5 && r.miss_pre == 0, "prefill rel %.3g misses %d", r.rel_pre, r.miss_pre);
    CHECK(r.rel_step <= 1e-5 && r.miss_step == 0, "decode rel %.3g misses %d", r.rel_step, r.miss_step);
}

/* the "tokens" array of `generate ... --json`, or "" on failure */
static void gen_tokens(const char *model, const char *extra, char *out, size_t cap) {
    char cmd[1600], buf[8192];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --prompt-ids 2,5,9,11,5,9,11,5,9,11,5 -n 24 -t 2 --json --repeat-penalty 1.3 %s "
             "2>/dev/null", cli,
             model, extra);
    out[0] = 0;
    if (harness_run(cmd, buf, sizeof buf) != 0) return;
    char *s = strstr(buf, "\"tokens\""), *e = s ? strchr(s, ']') : NULL;
    if (s && e && (size_t)(e - s) < cap) snprintf(out, cap, "%.*s", (int)(e - s), s);
}

static void test_tied_assistant_fixture(void) {
    sp_model *m = load(FIX, 2);
    CHECK(m != NULL, "load");
    if (!m) return;
    sp_sample_params sp = sp_sample_params_default();
    sp_err err = {{0}};
    sp_drafter *d = sp_drafter_assistant(FIX "/assistant", m, &sp, &err);
    CHECK(d != NULL, "the declared-centroids assistant must load: %s", err.msg);
    if (d) {
        int width, centroid, n_cand;
        sp_assistant_info(d, &width, &centroid, &n_cand);
        CHECK(centroid == 0 && n_cand == 512, "tied head expected: centroid %d, %d candidates", centroid, n_cand);
        sp_drafter_free(d);
    }
    sp_model_free(m);
    char plain[4096], spec[4096];
    gen_tokens(FIX, "", plain, sizeof plain);
    gen_tokens(FIX, "--spec assistant -md " FIX "/assistant --draft-max 4", spec, sizeof spec);
    CHECK(plain[0] && !strcmp(plain, spec), "assistant greedy != plain: %s | %s", spec, plain);
}

static void test_preset_and_gguf(void) {
    char dir[] = "/tmp/specula-g4u-XXXXXX", cmd[4096], out[8192], t[64], a[64], g[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(t, sizeof t, "%s/t", dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(g, sizeof g, "%s/t.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "%s new-model --arch gemma4_unified --preset gemma4-12b --dtype f32 --set vocab_size=512 "
             "--set hidden_size=64 --set intermediate_size=128 --set num_hidden_layers=6 "
             "--set num_attention_heads=4 --set num_key_value_heads=2 --set head_dim=16 --set global_head_dim=32 "
             "--set sliding_window=8 --set max_position_embeddings=4096 --seed 5 -o %s 2>&1 && "
             "%s new-drafter --arch gemma4_assistant --preset tied -m %s --seed 6 -o %s 2>&1 && "
             "%s export-gguf -m %s -o %s --no-tokenizer 2>&1",
             cli, t, cli, t, a, cli, t, g);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "new-model / new-drafter / export-gguf: %s", out);
    char *text = NULL;
    snprintf(cmd, sizeof cmd, "%s/config.json", t);
    CHECK(sp_read_file(cmd, &text, NULL, NULL) == 0 && strstr(text, "\"gemma4_unified\"") &&
              strstr(text, "\"gemma4_unified_text\"") && strstr(text, "Gemma4UnifiedForConditionalGeneration"),
          "target config names gemma4_unified");
    free(text);
    text = NULL;
    snprintf(cmd, sizeof cmd, "%s/config.json", a);
    CHECK(sp_read_file(cmd, &text, NULL, NULL) == 0 && strstr(text, "\"gemma4_unified_assistant\""),
          "assistant config names gemma4_unified_assistant");
    free(text);
    char plain[4096], spec[4096], viagguf[4096], extra[256];
    gen_tokens(t, "", plain, sizeof plain);
    snprintf(extra, sizeof extra, "--spec assistant -md %s --draft-max 4", a);
    gen_tokens(t, extra, spec, sizeof spec);
    CHECK(plain[0] && !strcmp(plain, spec), "12b preset: assistant greedy != plain: %s | %s", spec, plain);
    sp_err err = {{0}};
    gguf_file *f = sp_gguf_open(g, &err);
    gguf_str arch = {0};
    int got = f && sp_gguf_get_str(f, "general.architecture", &arch, &err) == 0;
    CHECK(got && arch.len == 6 && !memcmp(arch.ptr, "gemma4", 6), "GGUF architecture %.*s", got ? (int)arch.len : 6,
          got ? arch.ptr : "(none)");
    sp_gguf_close(f);
    gen_tokens(g, "", viagguf, sizeof viagguf);
    CHECK(plain[0] && !strcmp(plain, viagguf), "GGUF greedy != safetensors: %s | %s", viagguf, plain);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(int argc, char **argv) {
    (void)argc;
    harness_cli_path(cli, sizeof cli, argv[0]);
    RUN(test_config);
    RUN(test_preset_shape);
    RUN(test_reference_logits);
    RUN(test_tied_assistant_fixture);
    RUN(test_preset_and_gguf);
    return harness_done("test_gemma4_unified");
}
