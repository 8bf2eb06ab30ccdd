/* test_moe.c — Qwen3-MoE targets (docs/TRANSFORMER.md §5a) and Gemma-4's expert block (§5b:
 * test_gemma4, on tests/data/ref-logits/gemma4moe).
 *
 * - logits of every position vs tests/data/ref-logits/qwen3moe/logits.ref.f32 (an independent
 *   float64 forward, make_fixture.py): max|Δ| <= 1e-5 · max|logit| and the same argmax, prefill
 *   and token by token;
 * - batch invariance: blocks of 1..7 rows == single steps bit for bit, 1 thread == 2 threads, and
 *   one sequence in a batched forward beside another == its solo forward; each node of a
 *   tree-masked forward == a chain forward over its root path;
 * - the config: dense layers from mlp_only_layers / decoder_sparse_step, bad MoE keys refused
 *   with the key named;
 * - greedy speculative == plain with the n-gram drafter and two draft models (a dense qwen3 of the
 *   same vocabulary, and the MoE itself);
 * - through the binary: every drafter kind that runs on a Qwen3 target (n-gram, DSpark, DFlash,
 *   EAGLE-3 drafters made by new-drafter for the MoE fixture, the MoE as its own draft model) gives
 *   the plain greedy tokens, with a repetition penalty so the output is not one repeated token;
 * - the distinct-expert count (sp_kv_moe_experts): k per layer for one token, growing with the
 *   block and at most E, 0 on a dense model; bench-verify --json reports it per block size;
 * - drafter training against the MoE: regen, then train a DSpark drafter (a dense Qwen3 block:
 *   the draft config carries no MoE keys), whose greedy output equals plain;
 * - new-model's qwen3_moe tiny preset loads and runs;
 * - through the binary: export-gguf writes llama.cpp's qwen3moe layout (stacked ffn_*_exps, the
 *   router ffn_gate_inp) whose logits equal the safetensors model's bit for bit; quantize q4_k_m
 *   stores the experts in Q4_K / Q6_K and keeps the router f32; its logits stay close to the same
 *   file dequantized to f32 (the activations' 8-bit quantization is the only difference; it can
 *   flip a near-tied routing choice, so the bound is per position: >= 9 of 12 positions within 3%
 *   of max|logit|); greedy speculative output (n-gram, self-drafting draft model) equals plain. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decode/spec.h"
#include "drafters/drafters.h"
#include "formats/gguf.h"
#include "formats/newmodel.h"
#include "model/model.h"
#include "fixtures.h"
#include "harness.h"
#include "specula.h"

#define FIX "tests/data/ref-logits/qwen3moe"
#define NTOK 24

static char cli[256]; /* the specula binary beside this test's build folder */

static sp_model *load(const char *dir, int threads) { return fixture_load_dir(dir, threads); }

static void test_config(void) {
    sp_model *m = load(FIX, 1);
    CHECK(m != NULL, "load the fixture");
    if (!m) return;
    const sp_config *c = sp_model_config(m);
    CHECK(c->arch == SP_ARCH_QWEN3 && c->n_experts == 8 && c->n_experts_used == 2 && c->moe_ffn_dim == 24 &&
              c->norm_topk_prob == 1,
          "MoE keys: %d experts, %d used, width %d, norm %d", c->n_experts, c->n_experts_used, c->moe_ffn_dim,
          c->norm_topk_prob);
    CHECK(c->layers[0].moe && !c->layers[1].moe && c->layers[2].moe, "mlp_only_layers [1]: layer 1 dense");
    sp_model_free(m);
    static const struct {
        const char *extra, *want;
    } bad[] = {
        {"\"num_experts\": 8, \"num_experts_per_tok\": 9, \"moe_intermediate_size\": 8", "num_experts_per_tok"},
        {"\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8", "num_experts"},
        {"\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 0", "moe_intermediate_size"},
        {"\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8, \"mlp_only_layers\": [5]",
         "mlp_only_layers"},
        {"\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8, \"decoder_sparse_step\": 0",
         "decoder_sparse_step"},
        {"\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8, "
         "\"shared_expert_intermediate_size\": 16",
         "shared"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 64, \"hidden_size\": 16, \"intermediate_size\": 32,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8, %s}",
                 bad[i].extra);
        sp_config cfg;
        sp_err err = {{0}};
        CHECK(sp_config_parse(&cfg, json, "config.json", &err) != 0 && strstr(err.msg, bad[i].want),
              "bad config %zu accepted or unclear: %s", i, err.msg);
    }
}

static void check_reference(const char *fix, int ntok, const char *name) {
    fixture_ref r;
    char msg[512];
    int ok = fixture_ref_logits(fix, 2, ntok, &r, msg, sizeof msg) == 0;
    CHECK(ok, "%s", msg);
    if (!ok) return;
    printf("  %s prefill rel err %.2e (argmax misses %d), decode rel err %.2e (misses %d)\n", name, r.rel_pre,
           r.miss_pre, r.rel_step, r.miss_step);
    CHECK(r.rel_pre <= 1e-5 && r.miss_pre == 0, "prefill rel %.3g misses %d", r.rel_pre, r.miss_pre);
    CHECK(r.rel_step <= 1e-5 && r.miss_step == 0, "decode rel %.3g misses %d", r.rel_step, r.miss_step);
    CHECK(r.bitwise, "prefill != single steps bitwise");
}

static void test_reference_logits(void) { check_reference(FIX, NTOK, "qwen3moe"); }

/* blocks of 1..7 rows over a stream == single steps (1 thread), bitwise; then a batched forward of
 * two sequences gives the first its solo logits */
static void check_batch_invariance(const char *fix) {
    sp_model *m1 = load(fix, 1), *m2 = load(fix, 2);
    CHECK(m1 && m2, "load");
    if (!m1 || !m2) goto done;
    int V = sp_model_config(m1)->vocab_size, N = 48;
    int32_t tok[48], other[7];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919 + 13) % V);
    for (int i = 0; i < 7; i++) other[i] = (int32_t)((i * 389 + 101) % V);
    float *a1 = malloc((size_t)N * V * 4), *a2 = malloc((size_t)N * V * 4), *ob = malloc((size_t)7 * V * 4);
    sp_err err = {{0}};
    sp_kv *k1 = sp_kv_create(m1, 128, 1, &err), *k2 = sp_kv_create(m2, 128, 16, &err);
    sp_kv *k3 = sp_kv_create(m2, 128, 16, &err);
    for (int t = 0; t < N; t++) {
        sp_forward_out o = {.logits = a1 + (size_t)t * V};
        CHECK(sp_model_forward(m1, k1, tok + t, 1, &o, &err) == 0, "%s", err.msg);
    }
    for (int t = 0, b = 1; t < N; t += b, b = b % 7 + 1) {
        int n = t + b > N ? N - t : b;
        if (n == 5) { /* this block shares its forward with another sequence's 7 rows */
            sp_forward_out o = {.logits = a2 + (size_t)t * V}, oo = {.logits = ob};
            sp_forward_seq seqs[2] = {{.kv = k2, .tokens = tok + t, .T = n, .out = &o},
                                      {.kv = k3, .tokens = other, .T = 7, .out = &oo}};
            CHECK(sp_model_forward_batch(m2, k2, seqs, 2, &err) == 0, "%s", err.msg);
            sp_kv_trim(k3, 0, &err);
        } else {
            sp_forward_out o = {.logits = a2 + (size_t)t * V};
            CHECK(sp_model_forward(m2, k2, tok + t, n, &o, &err) == 0, "%s", err.msg);
        }
    }
    CHECK(memcmp(a1, a2, (size_t)N * V * 4) == 0, "blocks / batches on 2 threads != single steps on 1");
    sp_kv_free(k1);
    sp_kv_free(k2);
    sp_kv_free(k3);
    free(a1);
    free(a2);
    free(ob);
done:
    sp_model_free(m1);
    sp_model_free(m2);
}

static void test_batch_invariance(void) { check_batch_invariance(FIX); }

/* a binary tree of 15 nodes after an 8-token prompt: node t's logits == the chain over its root path */
static void test_tree(void) {
    sp_model *m = load(FIX, 2);
    CHECK(m != NULL, "load");
    if (!m) return;
    int V = 512, T = 15;
    int32_t prompt[8], tok[15], parent[15];
    for (int i = 0; i < 8; i++) prompt[i] = (int32_t)((i * 389 + 7) % V);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)((t * 7919 + 11) % V), parent[t] = t ? (t - 1) / 2 : -1;
    float *tree = malloc((size_t)T * V * 4), *chain = malloc((size_t)8 * V * 4);
    sp_err err = {{0}};
    sp_kv *kv = sp_kv_create(m, 64, 16, &err);
    sp_forward_out o = {.logits = tree};
    CHECK(kv && sp_model_forward(m, kv, prompt, 8, NULL, &err) == 0 &&
              sp_model_forward_tree(m, kv, tok, parent, T, &o, &err) == 0,
          "%s", err.msg);
    for (int t = 0; t < T && kv; t++) {
        int32_t path[8];
        int n = 0;
        for (int u = t; u >= 0; u = parent[u]) path[n++] = tok[u];
        for (int i = 0; i < n / 2; i++) {
            int32_t x = path[i];
            path[i] = path[n - 1 - i];
            path[n - 1 - i] = x;
        }
        sp_kv *kc = sp_kv_create(m, 64, 16, &err);
        sp_forward_out oc = {.logits = chain};
        CHECK(kc && sp_model_forward(m, kc, prompt, 8, NULL, &err) == 0 &&
                  sp_model_forward(m, kc, path, n, &oc, &err) == 0,
              "%s", err.msg);
        CHECK(!memcmp(tree + (size_t)t * V, chain + (size_t)(n - 1) * V, (size_t)V * 4),
              "tree node %d != the chain over its root path", t);
        sp_kv_free(kc);
    }
    sp_kv_free(kv);
    free(tree);
    free(chain);
    sp_model_free(m);
}

static int logits_of(const char *path, const int32_t *p, float *lg);

/* a dense qwen3 of the fixture's vocabulary (a draft model that disagrees sometimes) into dir */
static int write_dense_draft(char *dir) {
    if (!mkdtemp(dir)) return -1;
    const char *sets[] = {"vocab_size=512"};
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .sets = sets, .n_sets = 1, .dtype = SP_DT_F32, .seed = 5};
    sp_err err = {{0}};
    if (sp_newmodel_write(dir, &o, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void test_greedy_identity(void) {
    char dir[] = "/tmp/specula-moe-XXXXXX";
    sp_model *m = load(FIX, 2), *dm = NULL;
    CHECK(m != NULL && write_dense_draft(dir) == 0 && (dm = load(dir, 1)) != NULL, "load");
    if (!m || !dm) goto done;
    int32_t prompt[21], ref[64], out[64];
    for (int i = 0; i < 21; i++) prompt[i] = (int32_t)(((i % 7) * 977 + 31) % 512);
    int N = 40;
    sp_err err = {{0}};
    sp_gen_params gp = sp_gen_params_default();
    gp.max_new = N;
    gp.ignore_eos = 1;
    sp_gen_stats gs;
    CHECK(sp_generate(m, NULL, prompt, 21, &gp, ref, 64, &gs, &err) == 0 && gs.emitted == N, "%s", err.msg);
    const char *names[3] = {"ngram", "dense draft", "self draft"};
    for (int kind = 0; kind < 3; kind++)
        for (int G = 1; G <= 8; G += kind == 0 ? 1 : 3) {
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = G;
            sp_drafter *d = kind == 0   ? sp_drafter_ngram(1, 3, &err)
                            : kind == 1 ? sp_drafter_draft_model(dm, m, NULL, NULL, 128, &sp.gen.sample, &err)
                                        : sp_drafter_draft_model(m, m, NULL, NULL, 128, &sp.gen.sample, &err);
            CHECK(d != NULL, "%s: %s", names[kind], err.msg);
            sp_spec_stats st;
            memset(out, 0xff, sizeof out);
            CHECK(sp_spec_generate(m, d, prompt, 21, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
            CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N), "%s G %d: speculative != plain",
                  names[kind], G);
            if (kind == 2) CHECK(st.accepted == st.drafted && st.drafted > 0, "self draft must accept all");
            sp_drafter_free(d);
        }
done:
    sp_model_free(m);
    sp_model_free(dm);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* new-model --preset qwen3_moe:tiny: a checkpoint the loader takes, whose forward runs; written
 * again in 256 KB shards (experts split across files), it gives the same logits */
static void test_preset(void) {
    char dir[] = "/tmp/specula-moe-XXXXXX", sharded[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    newmodel_opts o = {.arch = "qwen3_moe", .preset = "tiny", .dtype = SP_DT_F32, .seed = 7};
    sp_err err = {{0}};
    CHECK(sp_newmodel_write(dir, &o, &err) == 0, "%s", err.msg);
    snprintf(sharded, sizeof sharded, "%s/sharded", dir);
    o.shard_bytes = 256 << 10;
    CHECK(sp_newmodel_write(sharded, &o, &err) == 0, "%s", err.msg);
    char idx[128];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", sharded);
    CHECK(sp_file_exists(idx), "no shard index written");
    {
        int32_t p[12];
        for (int i = 0; i < 12; i++) p[i] = (int32_t)(i * 613 + 5);
        float *a = malloc((size_t)12 * 8192 * 4), *b = malloc((size_t)12 * 8192 * 4);
        CHECK(logits_of(dir, p, a) == 8192 && logits_of(sharded, p, b) == 8192 &&
                  !memcmp(a, b, (size_t)12 * 8192 * 4),
              "the sharded checkpoint's logits differ");
        free(a);
        free(b);
    }
    sp_model *m = load(dir, 2);
    CHECK(m != NULL, "load the tiny preset");
    if (m) {
        const sp_config *c = sp_model_config(m);
        CHECK(c->n_experts > c->n_experts_used && c->n_experts_used > 1, "preset experts %d / %d", c->n_experts,
              c->n_experts_used);
        int32_t p[4] = {1, 2, 3, 4};
        float *lg = malloc((size_t)4 * c->vocab_size * 4);
        sp_kv *kv = sp_kv_create(m, 32, 4, &err);
        sp_forward_out fo = {.logits = lg};
        CHECK(kv && sp_model_forward(m, kv, p, 4, &fo, &err) == 0, "%s", err.msg);
        int finite = 1;
        for (size_t i = 0; i < (size_t)4 * c->vocab_size; i++) finite &= isfinite(lg[i]) != 0;
        CHECK(finite, "tiny preset logits not finite");
        free(lg);
        sp_kv_free(kv);
        sp_model_free(m);
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* logits of the 12 tokens p in model path (a directory or GGUF) into lg [12, V]; V returned, 0 on failure */
static int logits_of(const char *path, const int32_t *p, float *lg) {
    sp_model *m = load(path, 2);
    if (!m) return 0;
    int V = sp_model_config(m)->vocab_size;
    sp_err err = {{0}};
    sp_kv *kv = sp_kv_create(m, 32, 12, &err);
    sp_forward_out o = {.logits = lg};
    int ok = kv && sp_model_forward(m, kv, p, 12, &o, &err) == 0;
    sp_kv_free(kv);
    sp_model_free(m);
    return ok ? V : 0;
}

/* the ggml type of tensor `name` in a GGUF file, or -1 */
static int tensor_type(const char *path, const char *name, int *n_dims) {
    sp_err err = {{0}};
    gguf_file *f = sp_gguf_open(path, &err);
    const gguf_tensor_info *t = f ? sp_gguf_find_tensor(f, name) : NULL;
    int ty = t ? (int)t->type : -1;
    *n_dims = t ? (int)t->n_dims : 0;
    sp_gguf_close(f);
    return ty;
}

/* greedy tokens of `generate ... --json` (the "tokens" array), or "" on failure */
static void gen_tokens(const char *model, const char *extra, char *out, size_t cap) {
    char cmd[1600], buf[8192];
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 5,9,11,5,9,11,5,9,11,5 -n 24 -t 2 --json %s 2>/dev/null",
             cli, model, extra);
    out[0] = 0;
    if (harness_run(cmd, buf, sizeof buf) != 0) return;
    char *s = strstr(buf, "\"tokens\""), *e = s ? strchr(s, ']') : NULL;
    if (s && e && (size_t)(e - s) < cap) snprintf(out, cap, "%.*s", (int)(e - s), s);
}

static void test_gguf(void) {
    char dir[] = "/tmp/specula-moe-XXXXXX", cmd[4096], out[4096], f32[64], q4[64], dq[64], mdir[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(mdir, sizeof mdir, "%s/m", dir);
    snprintf(f32, sizeof f32, "%s/m.gguf", dir);
    snprintf(q4, sizeof q4, "%s/m-q4_k_m.gguf", dir);
    snprintf(dq, sizeof dq, "%s/m-dq.gguf", dir);
    /* widths of whole K-quant blocks; every layer MoE (llama.cpp's qwen3moe has no dense layers) */
    snprintf(cmd, sizeof cmd,
             "%s new-model --arch qwen3_moe --preset tiny --set hidden_size=256 --set moe_intermediate_size=256 "
             "--set 'mlp_only_layers=[]' --tokenizer models/default/target/tokenizer.json --seed 3 -o %s 2>&1 && "
             "%s export-gguf -m %s -o %s 2>&1 && %s quantize %s %s q4_k_m -q 2>&1 && %s quantize %s %s f32 -q 2>&1",
             cli, mdir, cli, mdir, f32, cli, f32, q4, cli, q4, dq);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "new-model / export-gguf / quantize: %s", out);
    int nd = 0;
    CHECK(tensor_type(f32, "blk.0.ffn_gate_exps.weight", &nd) == GGML_TYPE_F32 && nd == 3, "stacked experts (f32)");
    CHECK(tensor_type(q4, "blk.0.ffn_up_exps.weight", &nd) == GGML_TYPE_Q4_K && nd == 3, "q4_k_m experts: Q4_K");
    int down = tensor_type(q4, "blk.0.ffn_down_exps.weight", &nd);
    CHECK(down == GGML_TYPE_Q4_K || down == GGML_TYPE_Q6_K, "q4_k_m ffn_down_exps type %d", down);
    CHECK(tensor_type(q4, "blk.1.ffn_gate_inp.weight", &nd) == GGML_TYPE_F32, "the router stays f32");
    int32_t p[12];
    for (int i = 0; i < 12; i++) p[i] = (int32_t)((i * 977 + 31) % 8192);
    size_t n = (size_t)12 * 8192;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *d = malloc(n * 4);
    int V = logits_of(mdir, p, a);
    CHECK(V == 8192 && logits_of(f32, p, b) == V && logits_of(q4, p, c) == V && logits_of(dq, p, d) == V,
          "load the four models");
    if (V == 8192) {
        CHECK(memcmp(a, b, n * 4) == 0, "the f32 GGUF's logits differ from the safetensors model's");
        double mx = 0;
        for (size_t i = 0; i < n; i++) mx = fabs(d[i]) > mx ? fabs(d[i]) : mx;
        int close = 0;
        for (int t = 0; t < 12; t++) {
            double md = 0;
            for (int i = 0; i < V; i++) md = fmax(md, fabs(c[(size_t)t * V + i] - d[(size_t)t * V + i]));
            close += md <= 0.03 * mx;
        }
        printf("  q4_k_m vs its f32 dequantization: %d of 12 positions within 3%% of max|logit| %.3g\n", close, mx);
        CHECK(close >= 9, "q4_k_m logits too far from the dequantized model's (%d of 12 positions close)", close);
    }
    char plain[4096], ng[4096], dm[4096], extra[800];
    gen_tokens(q4, "", plain, sizeof plain);
    gen_tokens(q4, "--spec ngram --draft-max 6", ng, sizeof ng);
    snprintf(extra, sizeof extra, "--spec draft -md %s --draft-max 5", q4);
    gen_tokens(q4, extra, dm, sizeof dm);
    CHECK(plain[0] && !strcmp(plain, ng), "ngram differs: %s | %s", plain, ng);
    CHECK(plain[0] && !strcmp(plain, dm), "draft model differs: %s | %s", plain, dm);
    free(a);
    free(b);
    free(c);
    free(d);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void test_every_drafter(void) {
    char dir[] = "/tmp/specula-moe-XXXXXX", cmd[2048], out[4096], ref[4096];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *kinds[] = {"", "ngram", "dspark", "dflash", "eagle3", "draft"};
    for (int i = 0; i < 6; i++) {
        char extra[512] = "";
        if (i >= 2 && i <= 4) {
            snprintf(cmd, sizeof cmd, "%s new-drafter --arch %s -m %s --seed 3 -o %s/%s 2>&1", cli, kinds[i], FIX, dir,
                     kinds[i]);
            CHECK(harness_run(cmd, out, sizeof out) == 0, "new-drafter %s: %s", kinds[i], out);
            snprintf(extra, sizeof extra, "--spec %s -md %s/%s --draft-max 4", kinds[i], dir, kinds[i]);
        } else if (i == 1) {
            snprintf(extra, sizeof extra, "--spec ngram --draft-max 6");
        } else if (i == 5) {
            snprintf(extra, sizeof extra, "--spec draft -md %s --draft-max 5", FIX);
        }
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s --prompt-ids 5,9,11,5,9,11,5,9,11,5 -n 40 -t 2 --json --repeat-penalty 1.3 %s "
                 "2>/dev/null",
                 cli, FIX, extra);
        char *s = NULL, *e = NULL;
        if (harness_run(cmd, out, sizeof out) == 0 && (s = strstr(out, "\"tokens\"")) != NULL) e = strchr(s, ']');
        CHECK(s && e, "%s: no tokens", i ? kinds[i] : "plain");
        if (!s || !e) continue;
        *e = 0;
        if (i == 0) snprintf(ref, sizeof ref, "%s", s);
        else CHECK(!strcmp(ref, s), "%s: speculative != plain: %s | %s", kinds[i], s, ref);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void test_expert_count(void) {
    sp_model *m = load(FIX, 1), *dense = load("tests/data/ref-logits/qwen3", 1);
    CHECK(m && dense, "load");
    if (m && dense) {
        sp_err err = {{0}};
        int32_t tok[16];
        for (int i = 0; i < 16; i++) tok[i] = (int32_t)((i * 7919 + 13) % 512);
        double prev = 0;
        for (int k = 1; k <= 16; k *= 2) {
            sp_kv *kv = sp_kv_create(m, 64, 16, &err);
            CHECK(kv && sp_model_forward(m, kv, tok, k, NULL, &err) == 0, "%s", err.msg);
            double ex = kv ? sp_kv_moe_experts(kv) : 0;
            CHECK(k > 1 || ex == 2.0, "one token runs k = 2 experts per layer, not %.2f", ex);
            CHECK(ex >= prev && ex <= 8.0, "block of %d: %.2f distinct experts (previous %.2f)", k, ex, prev);
            prev = ex;
            sp_kv_free(kv);
        }
        CHECK(prev > 2.0, "a block of 16 tokens should touch more than one token's experts (%.2f)", prev);
        sp_kv *kd = sp_kv_create(dense, 64, 4, &err);
        CHECK(kd && sp_model_forward(dense, kd, tok, 4, NULL, &err) == 0 && sp_kv_moe_experts(kd) == 0.0,
              "a dense model reports no experts");
        sp_kv_free(kd);
    }
    sp_model_free(m);
    sp_model_free(dense);
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s bench-verify -m %s -t 1 --k-max 4 --reps 1 --ctx 8 --json 2>&1", cli, FIX);
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "\"experts\":[2.0,") != NULL,
          "bench-verify --json has no experts array starting at 2: %s", out);
}

static void check_train_drafter(const char *fix) {
    char dir[] = "/tmp/specula-moe-XXXXXX", cmd[4096], out[8192], p[128];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(p, sizeof p, "%s/ok.jsonl", dir);
    FILE *f = fopen(p, "w");
    for (int i = 0; f && i < 6; i++) fprintf(f, "{\"ids\": [1, %d, %d, %d], \"resp_start\": 4}\n", 50 + i, 60 + i, 50 + i);
    if (f) fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s regen -m %s --data %s -o %s/sh --generate 20 -q 2>&1 && %s train --arch dspark -m %s --data %s/sh "
             "-o %s/d --steps 6 --batch 4 --block-size 3 --layers 1 --markov-rank 8 --ctx 8 -q -t 1 2>&1",
             cli, fix, p, dir, cli, fix, dir, dir);
    CHECK(harness_run(cmd, out, sizeof out) == 0 && strstr(out, "train: step 6"), "regen + train: %s", out);
    char *cfg = NULL;
    snprintf(p, sizeof p, "%s/d/config.json", dir);
    CHECK(sp_read_file(p, &cfg, NULL, NULL) == 0 && !strstr(cfg, "num_experts") && !strstr(cfg, "qwen3_moe") &&
              !strstr(cfg, "\"enable_moe_block\": true"),
          "the drafter's config carries MoE keys");
    free(cfg);
    char ref[4096] = "";
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s --prompt-ids 5,9,11,5,9,11,5,9,11,5 -n 40 -t 2 --json --repeat-penalty 1.3 %s%s%s "
                 "2>/dev/null",
                 cli, fix, i ? "--spec dspark -md " : "", i ? dir : "", i ? "/d" : "");
        char *s = NULL, *e = NULL;
        if (harness_run(cmd, out, sizeof out) == 0 && (s = strstr(out, "\"tokens\"")) != NULL) e = strchr(s, ']');
        CHECK(s && e, "no tokens");
        if (!s || !e) break;
        *e = 0;
        if (!i) snprintf(ref, sizeof ref, "%s", s);
        else CHECK(!strcmp(ref, s), "trained DSpark: speculative != plain");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void test_train_drafter(void) { check_train_drafter(FIX); }

/* Gemma-4's expert block (the 26B-A4B's, docs/TRANSFORMER.md §5b) on the gemma4moe fixture:
 * the config, bad keys named, logits against the float64 reference, batch invariance, k experts
 * per token, and greedy speculative == plain (n-gram, the model as its own draft model) */
static void test_gemma4(void) {
    const char *fix = "tests/data/ref-logits/gemma4moe";
    sp_model *m = load(fix, 2);
    CHECK(m != NULL, "load the gemma4moe fixture");
    if (!m) return;
    const sp_config *c = sp_model_config(m);
    int all = 1;
    for (int i = 0; i < c->n_layers; i++) all &= c->layers[i].moe;
    CHECK(c->arch == SP_ARCH_GEMMA4 && c->n_experts == 8 && c->n_experts_used == 2 && c->moe_ffn_dim == 16 &&
              c->norm_topk_prob && all,
          "gemma4 MoE keys: %d experts, %d used, width %d, every layer %d", c->n_experts, c->n_experts_used,
          c->moe_ffn_dim, all);
    static const struct {
        const char *extra, *want;
    } bad[] = {
        {"\"num_experts\": 8, \"top_k_experts\": 9, \"moe_intermediate_size\": 8", "top_k_experts"},
        {"\"top_k_experts\": 2, \"moe_intermediate_size\": 8", "num_experts"},
        {"\"num_experts\": 4, \"top_k_experts\": 2", "moe_intermediate_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"model_type\": \"gemma4_text\", \"vocab_size\": 64, \"hidden_size\": 16, \"intermediate_size\": 32,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8,"
                 " \"global_head_dim\": 8, \"layer_types\": [\"sliding_attention\", \"full_attention\"],"
                 " \"enable_moe_block\": true, %s}",
                 bad[i].extra);
        sp_config cfg;
        sp_err err = {{0}};
        CHECK(sp_config_parse(&cfg, json, "config.json", &err) != 0 && strstr(err.msg, bad[i].want),
              "bad gemma4 MoE config %zu accepted or unclear: %s", i, err.msg);
    }
    check_reference(fix, 16, "gemma4moe");
    check_batch_invariance(fix);

    sp_err err = {{0}};
    int32_t prompt[21], ref[64], out[64];
    for (int i = 0; i < 21; i++) prompt[i] = (int32_t)(((i % 7) * 977 + 31) % 512);
    sp_kv *kv = sp_kv_create(m, 64, 16, &err);
    CHECK(kv && sp_model_forward(m, kv, prompt, 1, NULL, &err) == 0 && sp_kv_moe_experts(kv) == 2.0,
          "one token runs k = 2 experts per layer, not %.2f", kv ? sp_kv_moe_experts(kv) : -1.0);
    sp_kv_free(kv);
    int N = 40;
    sp_gen_params gp = sp_gen_params_default();
    gp.max_new = N;
    gp.ignore_eos = 1;
    sp_gen_stats gs;
    CHECK(sp_generate(m, NULL, prompt, 21, &gp, ref, 64, &gs, &err) == 0 && gs.emitted == N, "%s", err.msg);
    for (int kind = 0; kind < 2; kind++)
        for (int G = 1; G <= 7; G += 3) {
            sp_spec_params sp = sp_spec_params_default();
            sp.gen = gp;
            sp.draft_max = G;
            sp_drafter *d = kind == 0 ? sp_drafter_ngram(1, 3, &err)
                                      : sp_drafter_draft_model(m, m, NULL, NULL, 128, &sp.gen.sample, &err);
            CHECK(d != NULL, "%s", err.msg);
            if (!d) continue;
            sp_spec_stats st;
            memset(out, 0xff, sizeof out);
            CHECK(sp_spec_generate(m, d, prompt, 21, &sp, out, 64, &st, &err) == 0, "%s", err.msg);
            CHECK(st.emitted == N && !memcmp(out, ref, sizeof(int32_t) * N), "gemma4 MoE %s G %d: speculative != plain",
                  kind ? "self draft" : "ngram", G);
            sp_drafter_free(d);
        }
    sp_model_free(m);
    check_train_drafter(fix); /* the drafter is a dense Gemma-4 block */

    /* export-gguf writes the stacked experts as ffn_gate_up_exps / ffn_down_exps: the same logits */
    char dir[] = "/tmp/specula-g4moe-XXXXXX", cmd[2048], log[4096];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cmd, sizeof cmd,
             "%s export-gguf -m %s -o %s/m.gguf --no-tokenizer 2>&1 && "
             "%s logits -m %s --prompt-ids 2,40,77,301,5,9 -o %s/a.f32 2>&1 && "
             "%s logits -m %s/m.gguf --prompt-ids 2,40,77,301,5,9 -o %s/b.f32 2>&1 && cmp %s/a.f32 %s/b.f32 2>&1",
             cli, fix, dir, cli, fix, dir, cli, dir, dir, dir, dir);
    CHECK(harness_run(cmd, log, sizeof log) == 0, "gemma4 MoE GGUF export: logits differ or a step failed: %s", log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(int argc, char **argv) {
    (void)argc;
    harness_cli_path(cli, sizeof cli, argv[0]);
    RUN(test_config);
    RUN(test_reference_logits);
    RUN(test_batch_invariance);
    RUN(test_tree);
    RUN(test_greedy_identity);
    RUN(test_expert_count);
    RUN(test_every_drafter);
    RUN(test_train_drafter);
    RUN(test_preset);
    RUN(test_gguf);
    RUN(test_gemma4);
    return harness_done("test_moe");
}
