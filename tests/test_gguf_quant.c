/* test_gguf_quant.c — `specula quantize` and quantized GGUF models.
 *
 * - the type rule: llama.cpp's choices for q8_0 / q4_0 / q4_k_m / q6_k on a 28-layer layout
 *   (LM head / tied embeddings, attn_v and ffn_down layers that get Q6_K, kept norms, fallbacks);
 * - tiny llama / qwen3 / gemma4 checkpoints (widths that are whole K-quant blocks) quantized to
 *   each type load and give logits close to the same file dequantized to f32 (`--type f32`):
 *   the only difference left is llama.cpp-style 8-bit quantization of the activations, bounded
 *   here by max|Δ| <= 3% of max|logit| (llama, qwen3; measured 0.4-1.8%) and 10% for gemma4
 *   (6 layers, logits saturated by the softcap at 30; measured 5-7.5%), with >= 75% of
 *   positions keeping their argmax;
 * - the written types follow the rule, the file type key is set, no temp file is left;
 * - through the binary: greedy speculative output (n-gram and self-drafting draft model) is
 *   bit-identical to plain decoding on every type; bad arguments are clear errors;
 * - a DSpark drafter stored with Q8_0 matrices (`quantize --drafter`) loads and keeps the output;
 * - the mapped pages of a tensor the loader repacked go back to the kernel (sp_gguf_drop_pages). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "core/core.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "formats/newmodel.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "specula.h"

#define NTOK 16

static char tmp_root[256];
static char cli[200]; /* the specula binary beside this test's build folder */

static const char *tmppath(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", tmp_root, name);
    return b;
}

static void test_mix_rule(void) {
    const int L = 28;
    struct {
        gguf_mix mix;
        const char *name;
        int n_dims, tied, i_v, i_down;
        int64_t ne0;
        ggml_type want;
    } cases[] = {
        {GGUF_MIX_Q4_K_M, "token_embd.weight", 2, 1, 0, 0, 1024, GGML_TYPE_Q6_K},  /* tied: the head's type */
        {GGUF_MIX_Q4_K_M, "token_embd.weight", 2, 0, 0, 0, 1024, GGML_TYPE_Q4_K},  /* untied: the mix's */
        {GGUF_MIX_Q4_K_M, "output.weight", 2, 0, 0, 0, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_0, "output.weight", 2, 0, 0, 0, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_0, "token_embd.weight", 2, 1, 0, 0, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q8_0, "output.weight", 2, 0, 0, 0, 1024, GGML_TYPE_Q8_0},
        {GGUF_MIX_Q6_K, "output.weight", 2, 0, 0, 0, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_K_M, "blk.0.attn_norm.weight", 1, 1, 0, 0, 1024, GGML_TYPE_F32},
        {GGUF_MIX_Q4_K_M, "blk.0.attn_q_norm.weight", 1, 1, 0, 0, 128, GGML_TYPE_F32},
        {GGUF_MIX_Q4_K_M, "blk.0.attn_q.weight", 2, 1, 0, 0, 1024, GGML_TYPE_Q4_K},
        /* more bits: i < L/8 (3), i >= 7L/8 (24), (i - 3) % 3 == 2 */
        {GGUF_MIX_Q4_K_M, "blk.2.attn_v.weight", 2, 1, 2, 2, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_K_M, "blk.3.attn_v.weight", 2, 1, 3, 3, 1024, GGML_TYPE_Q4_K},
        {GGUF_MIX_Q4_K_M, "blk.5.attn_v.weight", 2, 1, 5, 5, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_K_M, "blk.6.ffn_down.weight", 2, 1, 6, 6, 3072, GGML_TYPE_Q4_K},
        {GGUF_MIX_Q4_K_M, "blk.8.ffn_down.weight", 2, 1, 8, 8, 3072, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_K_M, "blk.24.ffn_down.weight", 2, 1, 24, 24, 3072, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_K_M, "blk.8.ffn_up.weight", 2, 1, 8, 8, 1024, GGML_TYPE_Q4_K},
        {GGUF_MIX_Q8_0, "blk.2.attn_v.weight", 2, 1, 2, 2, 1024, GGML_TYPE_Q8_0},
        {GGUF_MIX_Q4_K_M, "per_layer_model_proj.weight", 2, 1, 0, 0, 1024, GGML_TYPE_BF16}, /* kept */
        /* rows that are not whole blocks */
        {GGUF_MIX_Q4_K_M, "blk.0.attn_q.weight", 2, 1, 0, 0, 96, GGML_TYPE_Q5_0},
        {GGUF_MIX_Q4_K_M, "blk.2.attn_v.weight", 2, 1, 2, 2, 96, GGML_TYPE_Q8_0}, /* Q6_K's fallback */
        {GGUF_MIX_Q6_K, "blk.0.attn_q.weight", 2, 1, 0, 0, 96, GGML_TYPE_Q8_0},
        {GGUF_MIX_Q4_0, "blk.0.attn_q.weight", 2, 1, 0, 0, 16, GGML_TYPE_F16},
        {GGUF_MIX_F32, "blk.0.attn_q.weight", 2, 1, 0, 0, 1024, GGML_TYPE_F32},
        /* llama.cpp's other mixes (n_gqa = 2) */
        {GGUF_MIX_Q5_K_M, "blk.2.attn_v.weight", 2, 1, 2, 2, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q5_K_M, "blk.3.attn_v.weight", 2, 1, 3, 3, 1024, GGML_TYPE_Q5_K},
        {GGUF_MIX_Q5_K_M, "blk.8.ffn_down.weight", 2, 1, 8, 8, 3072, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q5_K_S, "blk.8.ffn_down.weight", 2, 1, 8, 8, 3072, GGML_TYPE_Q5_K},
        {GGUF_MIX_Q3_K_M, "blk.1.attn_v.weight", 2, 1, 1, 1, 1024, GGML_TYPE_Q5_K},
        {GGUF_MIX_Q3_K_M, "blk.2.attn_v.weight", 2, 1, 2, 2, 1024, GGML_TYPE_Q4_K},
        {GGUF_MIX_Q3_K_M, "blk.0.ffn_down.weight", 2, 1, 0, 0, 3072, GGML_TYPE_Q5_K},
        {GGUF_MIX_Q3_K_M, "blk.5.ffn_down.weight", 2, 1, 5, 5, 3072, GGML_TYPE_Q4_K},
        {GGUF_MIX_Q3_K_M, "blk.5.attn_output.weight", 2, 1, 5, 5, 1024, GGML_TYPE_Q4_K},
        {GGUF_MIX_Q3_K_M, "blk.5.attn_q.weight", 2, 1, 5, 5, 1024, GGML_TYPE_Q3_K},
        {GGUF_MIX_Q3_K_L, "blk.5.attn_output.weight", 2, 1, 5, 5, 1024, GGML_TYPE_Q5_K},
        {GGUF_MIX_Q3_K_S, "blk.0.attn_v.weight", 2, 1, 0, 0, 1024, GGML_TYPE_Q3_K},
        {GGUF_MIX_Q2_K, "blk.5.attn_v.weight", 2, 1, 5, 5, 1024, GGML_TYPE_Q3_K},
        {GGUF_MIX_Q2_K, "blk.5.ffn_down.weight", 2, 1, 5, 5, 3072, GGML_TYPE_Q3_K},
        {GGUF_MIX_Q2_K, "blk.5.ffn_up.weight", 2, 1, 5, 5, 1024, GGML_TYPE_Q2_K},
        {GGUF_MIX_Q2_K, "output.weight", 2, 0, 0, 0, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q4_K_S, "blk.3.attn_v.weight", 2, 1, 3, 3, 1024, GGML_TYPE_Q5_K},
        {GGUF_MIX_Q4_K_S, "blk.4.attn_v.weight", 2, 1, 4, 4, 1024, GGML_TYPE_Q4_K},
        {GGUF_MIX_IQ4_XS, "blk.0.ffn_down.weight", 2, 1, 0, 0, 3072, GGML_TYPE_Q5_K},
        {GGUF_MIX_IQ4_XS, "blk.9.ffn_down.weight", 2, 1, 9, 9, 3072, GGML_TYPE_IQ4_XS},
        {GGUF_MIX_IQ4_XS, "blk.0.attn_q.weight", 2, 1, 0, 0, 96, GGML_TYPE_IQ4_NL}, /* IQ4_XS's fallback */
        {GGUF_MIX_IQ4_NL, "output.weight", 2, 0, 0, 0, 1024, GGML_TYPE_Q6_K},
        {GGUF_MIX_Q5_K_S, "blk.0.attn_q.weight", 2, 1, 0, 0, 96, GGML_TYPE_Q5_1}, /* Q5_K's fallback */
        {GGUF_MIX_Q3_K_S, "blk.0.attn_q.weight", 2, 1, 0, 0, 96, GGML_TYPE_Q4_0}, /* Q3_K's fallback */
        {GGUF_MIX_Q5_1, "blk.0.attn_q.weight", 2, 1, 0, 0, 1024, GGML_TYPE_Q5_1},
        {GGUF_MIX_F16, "output.weight", 2, 0, 0, 0, 1024, GGML_TYPE_F16},
        {GGUF_MIX_BF16, "blk.0.attn_q.weight", 2, 1, 0, 0, 1024, GGML_TYPE_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ggml_type got = sp_gguf_mix_tensor_type(cases[i].mix, cases[i].name, cases[i].n_dims, cases[i].ne0,
                                             GGML_TYPE_BF16, cases[i].tied, cases[i].i_v, L, cases[i].i_down, L, 2);
        if (cases[i].n_dims == 1 && got == GGML_TYPE_BF16) got = GGML_TYPE_F32; /* kept: the source type */
        CHECK(got == cases[i].want, "case %zu (%s, %s): got %s, want %s", i, sp_gguf_mix_name(cases[i].mix),
              cases[i].name, sp_ggml_type_name(got), sp_ggml_type_name(cases[i].want));
    }
    gguf_mix m;
    CHECK(sp_gguf_mix_parse("q4_k_m", &m) == 0 && m == GGUF_MIX_Q4_K_M && sp_gguf_mix_parse("q5_k_x", &m) < 0, "parse");
    static const struct { const char *s; gguf_mix m; } names[] = {
        {"Q4_K_M", GGUF_MIX_Q4_K_M}, {"q5_k_m", GGUF_MIX_Q5_K_M}, {"Q4_k_s", GGUF_MIX_Q4_K_S}, {"Q5_0", GGUF_MIX_Q5_0},
        {"f16", GGUF_MIX_F16},       {"BF16", GGUF_MIX_BF16},     {"Q3_K", GGUF_MIX_Q3_K_M},   {"q4_k", GGUF_MIX_Q4_K_M},
        {"Q5_K", GGUF_MIX_Q5_K_M},   {"iq4_xs", GGUF_MIX_IQ4_XS}, {"IQ4_NL", GGUF_MIX_IQ4_NL}, {"Q3_K_L", GGUF_MIX_Q3_K_L},
        {"q2_k", GGUF_MIX_Q2_K},     {"Q3_K_S", GGUF_MIX_Q3_K_S}, {"Q5_K_S", GGUF_MIX_Q5_K_S}, {"Q5_1", GGUF_MIX_Q5_1}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(sp_gguf_mix_parse(names[i].s, &m) == 0 && m == names[i].m, "parse %s", names[i].s);
}

/* ---- quantized tiny models -------------------------------------------------------------- */
static const char *ARCHS[] = {"llama", "qwen3", "gemma4"};
static const char *TYPES[] = {"q8_0", "q4_0", "q4_k_m", "q6_k"};

static int make_model(const char *arch, const char *dir) {
    /* widths that are whole 256-element blocks; gemma4's 16-wide per-layer inputs exercise the fallbacks */
    const char *common[] = {"hidden_size=256", "intermediate_size=512", "head_dim=64", "global_head_dim=64"};
    newmodel_opts o = {.arch = arch, .preset = "tiny", .dtype = SP_DT_BF16, .seed = 7, .sets = common,
                       .n_sets = strcmp(arch, "gemma4") ? 3 : 4, .n_threads = 1};
    sp_err err = {{0}};
    int rc = sp_newmodel_write(dir, &o, &err);
    CHECK(rc == 0, "%s: %s", arch, err.msg);
    return rc;
}

static float *logits_of(const char *path, int *V) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    if (sp_model_load(&m, path, 2, &err)) {
        CHECK(0, "load %s: %s", path, err.msg);
        return NULL;
    }
    *V = sp_model_config(m)->vocab_size;
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)((i * 4099 + 17) % *V);
    float *lg = malloc(sizeof(float) * NTOK * (size_t)*V);
    sp_kv *kv = sp_kv_create(m, 64, NTOK, &err);
    sp_forward_out o = {.logits = lg};
    CHECK(kv && sp_model_forward(m, kv, tok, NTOK, &o, &err) == 0, "%s", err.msg);
    sp_kv_free(kv);
    sp_model_free(m);
    return lg;
}

static uint32_t tensor_type(const gguf_file *f, const char *name) {
    const gguf_tensor_info *t = sp_gguf_find_tensor(f, name);
    return t ? t->type : 999;
}

static void check_types(const char *path, const char *arch, const char *type) {
    sp_err err = {{0}};
    gguf_file *f = sp_gguf_open(path, &err);
    CHECK(f != NULL, "%s", err.msg);
    if (!f) return;
    int64_t ft = -1;
    sp_gguf_get_i64(f, "general.file_type", &ft, &err);
    int kq = !strcmp(type, "q4_k_m");
    uint32_t base = !strcmp(type, "q8_0") ? 8 : !strcmp(type, "q4_0") ? 2 : kq ? 12 : 14;
    CHECK(ft == (base == 8 ? 7 : base == 2 ? 2 : kq ? 15 : 18), "%s %s: general.file_type %lld", arch, type,
          (long long)ft);
    CHECK(tensor_type(f, "blk.0.attn_norm.weight") == 0, "%s %s: norm not F32", arch, type);
    CHECK(tensor_type(f, "blk.0.attn_q.weight") == base, "%s %s: attn_q type %u", arch, type,
          tensor_type(f, "blk.0.attn_q.weight"));
    /* 2 or 6 blocks: the last layer is in the last eighth (more bits), layer 0 of 2 is not */
    int last = strcmp(arch, "gemma4") ? 1 : 5;
    char nm[64];
    snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", last);
    CHECK(tensor_type(f, nm) == (kq ? 14u : base), "%s %s: %s type %u", arch, type, nm, tensor_type(f, nm));
    if (kq && !strcmp(arch, "qwen3"))
        CHECK(tensor_type(f, "blk.0.ffn_down.weight") == 12, "qwen3 q4_k_m: blk.0.ffn_down type %u",
              tensor_type(f, "blk.0.ffn_down.weight"));
    const char *head = sp_gguf_find_tensor(f, "output.weight") ? "output.weight" : "token_embd.weight";
    CHECK(tensor_type(f, head) == (base == 8 ? 8u : 14u), "%s %s: %s type %u", arch, type, head, tensor_type(f, head));
    sp_gguf_close(f);
}

static void test_quantized_close(void) {
    for (int a = 0; a < 3; a++) {
        char dir[512], q[600], d[600];
        snprintf(dir, sizeof dir, "%s", tmppath(ARCHS[a]));
        if (make_model(ARCHS[a], dir)) continue;
        for (int t = 0; t < 4; t++) {
            snprintf(q, sizeof q, "%s-%s.gguf", dir, TYPES[t]);
            snprintf(d, sizeof d, "%s-%s-f32.gguf", dir, TYPES[t]);
            gguf_quantize_opts o = {.n_threads = 2};
            sp_err err = {{0}};
            sp_gguf_mix_parse(TYPES[t], &o.mix);
            CHECK(sp_gguf_quantize(dir, q, &o, &err) == 0, "%s %s: %s", ARCHS[a], TYPES[t], err.msg);
            o.mix = GGUF_MIX_F32;
            CHECK(sp_gguf_quantize(q, d, &o, &err) == 0, "%s %s f32: %s", ARCHS[a], TYPES[t], err.msg);
            check_types(q, ARCHS[a], TYPES[t]);
            int V = 0, V2 = 0;
            float *lq = logits_of(q, &V), *ld = logits_of(d, &V2);
            if (lq && ld && V == V2) {
                double maxd = 0, maxref = 0;
                int same = 0;
                for (int i = 0; i < NTOK; i++) {
                    const float *x = lq + (size_t)i * V, *y = ld + (size_t)i * V;
                    for (int v = 0; v < V; v++) {
                        maxd = fmax(maxd, fabs((double)x[v] - y[v]));
                        maxref = fmax(maxref, fabs((double)y[v]));
                    }
                    same += sp_argmax(x, V) == sp_argmax(y, V);
                }
                printf("  %-6s %-6s max|dlogit| / max|logit| = %.4f, argmax kept %d/%d\n", ARCHS[a], TYPES[t],
                       maxd / maxref, same, NTOK);
                double bound = a == 2 ? 0.10 : 0.03;
                CHECK(maxd <= bound * maxref, "%s %s: max|d| %g > %g of %g", ARCHS[a], TYPES[t], maxd, bound, maxref);
                CHECK(same * 4 >= NTOK * 3, "%s %s: argmax kept on %d of %d positions", ARCHS[a], TYPES[t], same, NTOK);
            }
            free(lq);
            free(ld);
        }
    }
    /* nothing but the outputs in the folder: no temp file survives */
    DIR *dh = opendir(tmp_root);
    struct dirent *e;
    while (dh && (e = readdir(dh))) CHECK(!strstr(e->d_name, "tmp"), "left over: %s", e->d_name);
    if (dh) closedir(dh);
}

/* logits of a and b: max |difference| <= bound · max |logit of b|, argmax kept on 3/4 */
static void logits_close(const char *a, const char *b, double bound, const char *what) {
    int V = 0, V2 = 0;
    float *la = logits_of(a, &V), *lb = logits_of(b, &V2);
    if (la && lb && V == V2) {
        double maxd = 0, maxref = 0;
        int same = 0;
        for (int i = 0; i < NTOK; i++) {
            const float *x = la + (size_t)i * V, *y = lb + (size_t)i * V;
            for (int v = 0; v < V; v++) {
                maxd = fmax(maxd, fabs((double)x[v] - y[v]));
                maxref = fmax(maxref, fabs((double)y[v]));
            }
            same += sp_argmax(x, V) == sp_argmax(y, V);
        }
        printf("  %s max|dlogit| / max|logit| = %.4f, argmax kept %d/%d\n", what, maxd / maxref, same, NTOK);
        CHECK(maxd <= bound * maxref, "%s: max|d| %g > %g of %g", what, maxd, bound, maxref);
        CHECK(same * 4 >= NTOK * 3, "%s: argmax kept on %d of %d positions", what, same, NTOK);
    }
    free(la);
    free(lb);
}

/* greedy tokens of `generate ... --json` (the "tokens" array), or "" on failure */
static void gen_tokens(const char *model, const char *extra, char *out, size_t cap) {
    char cmd[1600], buf[8192];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --prompt-ids 5,9,11,5,9,11,5,9,11,5 -n 32 -t 2 --json %s 2>/dev/null", cli, model,
             extra);
    out[0] = 0;
    if (harness_run(cmd, buf, sizeof buf) != 0) return;
    char *s = strstr(buf, "\"tokens\""), *e = s ? strchr(s, ']') : NULL;
    if (s && e && (size_t)(e - s) < cap) snprintf(out, cap, "%.*s", (int)(e - s), s);
}

static void test_spec_identical(void) {
    for (int a = 0; a < 3; a++)
        for (int t = 0; t < 4; t++) {
            char q[600], plain[4096], ng[4096], dm[4096], extra[800];
            snprintf(q, sizeof q, "%s-%s.gguf", tmppath(ARCHS[a]), TYPES[t]);
            gen_tokens(q, "", plain, sizeof plain);
            gen_tokens(q, "--spec ngram --draft-max 6", ng, sizeof ng);
            snprintf(extra, sizeof extra, "--spec draft -md %s --draft-max 5", q);
            gen_tokens(q, extra, dm, sizeof dm);
            CHECK(plain[0] && !strcmp(plain, ng), "%s %s: ngram output differs: %s | %s", ARCHS[a], TYPES[t], plain, ng);
            CHECK(plain[0] && !strcmp(plain, dm), "%s %s: draft-model output differs: %s | %s", ARCHS[a], TYPES[t],
                  plain, dm);
        }
}

/* Q5_0: q4_k_m on 64-wide rows (the tiny qwen3 preset) writes Q5_0 where Q4_K does not fit, as
 * llama-quantize does; the file loads, its logits are close to the dequantized f32 model's and
 * speculative output equals plain */
static void test_q5_0_model(void) {
    char dir[512], q[600], d[600], plain[4096], dm[4096], extra[800];
    snprintf(dir, sizeof dir, "%s", tmppath("q5"));
    newmodel_opts no = {.arch = "qwen3", .preset = "tiny", .dtype = SP_DT_BF16, .seed = 9, .n_threads = 1};
    sp_err err = {{0}};
    CHECK(sp_newmodel_write(dir, &no, &err) == 0, "%s", err.msg);
    snprintf(q, sizeof q, "%s-q4_k_m.gguf", dir);
    snprintf(d, sizeof d, "%s-f32.gguf", dir);
    gguf_quantize_opts o = {.n_threads = 2};
    sp_gguf_mix_parse("q4_k_m", &o.mix);
    CHECK(sp_gguf_quantize(dir, q, &o, &err) == 0, "%s", err.msg);
    o.mix = GGUF_MIX_F32;
    CHECK(sp_gguf_quantize(q, d, &o, &err) == 0, "%s", err.msg);
    gguf_file *f = sp_gguf_open(q, &err);
    CHECK(f && tensor_type(f, "blk.0.attn_q.weight") == 6 && tensor_type(f, "blk.1.ffn_down.weight") == 8,
          "q5_0 model: attn_q type %u, ffn_down %u", f ? tensor_type(f, "blk.0.attn_q.weight") : 0,
          f ? tensor_type(f, "blk.1.ffn_down.weight") : 0);
    if (f) sp_gguf_close(f);
    logits_close(q, d, 0.03, "qwen3 Q5_0 mix");
    gen_tokens(q, "", plain, sizeof plain);
    snprintf(extra, sizeof extra, "--spec draft -md %s --draft-max 5", q);
    gen_tokens(q, extra, dm, sizeof dm);
    CHECK(plain[0] && !strcmp(plain, dm), "Q5_0: draft-model output differs: %s | %s", plain, dm);
}

/* Q5_K_M, Q3_K_M, Q2_K, Q5_1, IQ4_NL, IQ4_XS files of the qwen3 model, written through the
 * binary with llama-quantize's argument order and type names (any case): each holds its mix's
 * types, loads, gives logits within 0.03 of its dequantized f32 twin (the kernels against exact
 * weights: only the activation quantization differs) and within the type's bound of the
 * unquantized f32 model, and speculative output (n-gram, draft model) equals plain. */
static void test_lowbit_models(void) {
    static const struct { const char *type; unsigned base; double bound; } T[] = {
        {"Q5_K_M", 13, 0.05}, {"q3_k_m", 11, 0.15}, {"Q2_K", 10, 0.35},
        {"q5_1", 7, 0.05},    {"IQ4_NL", 20, 0.08}, {"iq4_xs", 23, 0.08}};
    char ref[600], q[600], d[600], cmd[1600], out[4096], plain[4096], ng[4096], dm[4096], extra[800];
    snprintf(ref, sizeof ref, "%s-ref-f32.gguf", tmppath("qwen3"));
    gguf_quantize_opts o = {.n_threads = 2, .mix = GGUF_MIX_F32};
    sp_err err = {{0}};
    CHECK(sp_gguf_quantize(tmppath("qwen3"), ref, &o, &err) == 0, "f32: %s", err.msg);
    for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
        snprintf(q, sizeof q, "%s-%s.gguf", tmppath("qwen3"), T[t].type);
        snprintf(d, sizeof d, "%s-%s-f32.gguf", tmppath("qwen3"), T[t].type);
        snprintf(cmd, sizeof cmd, "%s quantize %s %s %s -q 2>&1", cli, tmppath("qwen3"), q, T[t].type);
        CHECK(harness_run(cmd, out, sizeof out) == 0, "%s: %s", T[t].type, out);
        gguf_file *f = sp_gguf_open(q, &err);
        CHECK(f && tensor_type(f, "blk.0.attn_q.weight") == T[t].base, "%s: attn_q type %u", T[t].type,
              f ? tensor_type(f, "blk.0.attn_q.weight") : 0);
        if (f) sp_gguf_close(f);
        o.mix = GGUF_MIX_F32;
        CHECK(sp_gguf_quantize(q, d, &o, &err) == 0, "%s f32: %s", T[t].type, err.msg);
        char what[64];
        snprintf(what, sizeof what, "qwen3 %-6s vs its f32 twin", T[t].type);
        logits_close(q, d, 0.03, what);
        snprintf(what, sizeof what, "qwen3 %-6s vs the f32 model", T[t].type);
        logits_close(q, ref, T[t].bound, what);
        gen_tokens(q, "", plain, sizeof plain);
        gen_tokens(q, "--spec ngram --draft-max 6", ng, sizeof ng);
        snprintf(extra, sizeof extra, "--spec draft -md %s --draft-max 5", q);
        gen_tokens(q, extra, dm, sizeof dm);
        CHECK(plain[0] && !strcmp(plain, ng), "%s: ngram output differs: %s | %s", T[t].type, plain, ng);
        CHECK(plain[0] && !strcmp(plain, dm), "%s: draft-model output differs: %s | %s", T[t].type, plain, dm);
    }
}

static void test_cli_errors(void) {
    char cmd[1200], out[4096];
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --type q7_k 2>&1", cli, tmppath("qwen3"),
             tmppath("x.gguf"));
    CHECK(harness_run(cmd, out, sizeof out) == 2 && strstr(out, "q7_k") && strstr(out, "IQ4_XS"), "bad type: %s", out);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s q8_0 q8_0 2>&1", cli, tmppath("qwen3"), tmppath("x.gguf"));
    CHECK(harness_run(cmd, out, sizeof out) == 2 && strstr(out, "IN OUT TYPE"), "4 positionals: %s", out);
    snprintf(cmd, sizeof cmd, "%s quantize -m %s/none -o %s --type q8_0 2>&1", cli, tmp_root,
             tmppath("x.gguf"));
    CHECK(harness_run(cmd, out, sizeof out) != 0 && strstr(out, "none"), "missing input: %s", out);
    snprintf(cmd, sizeof cmd, "%s quantize -m %s --type q8_0 2>&1", cli, tmppath("qwen3"));
    CHECK(harness_run(cmd, out, sizeof out) == 2 && strstr(out, "-o"), "missing -o: %s", out);
    /* a quantized file quantizes again (dequantize, requantize) and says so */
    snprintf(cmd, sizeof cmd, "%s quantize -m %s-q8_0.gguf -o %s --type q4_0 -q 2>&1", cli, tmppath("qwen3"),
             tmppath("re.gguf"));
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "quantized again"), "requantize: %s", out);
    CHECK(access(tmppath("x.gguf"), F_OK) != 0, "an output appeared after a failure");
}

/* a DSpark drafter with Q8_0 matrices in safetensors: loads, and greedy output stays the target's */
static void test_drafter_q8(void) {
    const char *target = tmppath("qwen3"), *dr = tmppath("dspark"), *dq = tmppath("dspark-q8");
    char cmd[1600], out[4096];
    snprintf(cmd, sizeof cmd, "%s new-drafter --arch dspark -m %s --seed 3 -o %s 2>&1", cli, target, dr);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "new-drafter: %s", out);
    snprintf(cmd, sizeof cmd, "%s quantize --drafter -m %s -o %s --type q8_0 2>&1", cli, dr, dq);
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "Q8_0"), "quantize --drafter: %s", out);
    st_set *s = NULL;
    sp_err err = {{0}};
    CHECK(sp_st_open_dir(&s, dq, &err) == 0, "%s", err.msg);
    if (s) {
        const st_tensor *fc = sp_st_find(s, "fc.weight");
        const void *data = NULL;
        sp_dtype dt = SP_DT_UNKNOWN;
        CHECK(fc && fc->dtype == SP_DT_U8 && sp_st_metadata(s, "quant.fc.weight"), "fc.weight not stored as Q8_0 blocks");
        if (fc)
            CHECK(sp_st_get_weight(s, "fc.weight", fc->shape[0], fc->shape[1] / 34 * 32, &data, &dt, &err) == 0 &&
                      dt == SP_DT_Q8_0 && data == fc->data,
                  "sp_st_get_weight: %s", err.msg);
        sp_st_close(s);
    }
    char plain[4096], spec[4096], extra[800];
    gen_tokens(target, "", plain, sizeof plain);
    snprintf(extra, sizeof extra, "--spec dspark -md %s --draft-max 6", dq);
    gen_tokens(target, extra, spec, sizeof spec);
    CHECK(plain[0] && !strcmp(plain, spec), "Q8_0 drafter changed the output: %s | %s", plain, spec);
}

/* resident kB of the mapping that holds address p (/proc/self/smaps), -1 when not found */
static long mapping_rss_kb(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    long rss = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in && sscanf(line, "Rss: %ld kB", &rss) == 1) break;
    }
    fclose(f);
    return rss;
}

/* sp_gguf_drop_pages (what the loader calls once a tensor is packed): the mapped pages wholly inside
 * a tensor leave resident memory, its bytes read back unchanged from the file, and a range outside
 * the map is left alone */
static void test_drop_pages(void) {
    char q[600];
    snprintf(q, sizeof q, "%s-q8_0.gguf", tmppath("qwen3"));
    sp_err err = {{0}};
    if (access(q, F_OK) != 0) {
        CHECK(make_model("qwen3", tmppath("qwen3")) == 0, "qwen3 model");
        gguf_quantize_opts o = {.n_threads = 2};
        sp_gguf_mix_parse("q8_0", &o.mix);
        CHECK(sp_gguf_quantize(tmppath("qwen3"), q, &o, &err) == 0, "%s", err.msg);
    }
    gguf_file *f = sp_gguf_open(q, &err);
    CHECK(f != NULL, "%s", err.msg);
    if (!f) return;
    const gguf_tensor_info *big = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (!big || f->tensors[i].nbytes > big->nbytes) big = &f->tensors[i];
    const uint8_t *data = sp_gguf_tensor_data(f, big, &err);
    const long page = sysconf(_SC_PAGESIZE);
    long whole = (long)((((uintptr_t)data + big->nbytes) / page * page - ((uintptr_t)data + page - 1) / page * page) / page);
    CHECK(data && whole >= 4, "largest tensor spans %ld whole pages", whole);
    if (!data || whole < 4) {
        sp_gguf_close(f);
        return;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < big->nbytes; i++) sum = sum * 31 + data[i]; /* every page resident */
    long before = mapping_rss_kb(data);
    sp_gguf_drop_pages(f, data, big->nbytes);
    long after = mapping_rss_kb(data);
    CHECK(before > 0 && before - after >= whole * page / 1024, "resident %ld kB -> %ld kB, %ld whole pages", before,
          after, whole);
    uint64_t again = 0;
    for (size_t i = 0; i < big->nbytes; i++) again = again * 31 + data[i];
    CHECK(again == sum, "the tensor's bytes changed after its pages were dropped");
    uint8_t stack[3 * 4096];
    memset(stack, 7, sizeof stack);
    sp_gguf_drop_pages(f, stack, sizeof stack); /* not in the map: nothing happens */
    CHECK(stack[0] == 7 && stack[sizeof stack - 1] == 7 && stack[4096] == 7, "memory outside the map changed");
    sp_gguf_close(f);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]); /* BUILD/tests/test_x → BUILD/specula, BUILD/test_x.PID */
    char *slash = strrchr(cli, '/');
    if (slash) *slash = 0;
    snprintf(tmp_root, sizeof tmp_root, "%s/../test_gguf_quant.%d", cli, (int)getpid());
    snprintf(cli + strlen(cli), sizeof cli - strlen(cli), "/../specula");
    sp_err err = {{0}};
    if (sp_mkdir_p(tmp_root, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    RUN(test_mix_rule);
    RUN(test_quantized_close);
    RUN(test_spec_identical);
    RUN(test_q5_0_model);
    RUN(test_lowbit_models);
    RUN(test_cli_errors);
    RUN(test_drafter_q8);
    RUN(test_drop_pages);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", tmp_root);
    return harness_done("test_gguf_quant");
}
