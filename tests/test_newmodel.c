/* test_newmodel.c — random checkpoints: for each arch's tiny preset the safetensors hold exactly
 * the tensors (names, shapes, dtype) that the HF layout implies for that config — derived here
 * independently from the raw config.json —, values have the intended scales, a seed reproduces
 * the files byte for byte, --set overrides land in config.json and the config parser reads them
 * back, sharded output equals single-file output, --tokenizer copies the files, and the engine
 * runs every tiny preset. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "core/core.h"
#include "formats/newmodel.h"
#include "formats/presets.h"
#include "formats/safetensors.h"

static char tmp_root[256];

static const char *tmpdir(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", tmp_root, name);
    return b;
}

static int write_model(const char *dir, const char *arch, const char *preset, const char *const *sets, int n_sets,
                       sp_dtype dt, uint64_t seed, uint64_t shard_bytes) {
    newmodel_opts o = {.arch = arch, .preset = preset, .sets = sets, .n_sets = n_sets, .dtype = dt, .seed = seed,
                       .shard_bytes = shard_bytes, .n_threads = 2};
    sp_err err = {{0}};
    int rc = sp_newmodel_write(dir, &o, &err);
    CHECK(rc == 0, "%s/%s: %s", arch, preset, err.msg);
    return rc;
}

/* ---- the expected tensor list, from the raw config.json (not from sp_hf_tensor_specs) ---------- */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
} want_t;

static int nwant;
static want_t want[512];

static void W(int ndim, int64_t a, int64_t b, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void W(int ndim, int64_t a, int64_t b, const char *fmt, ...) {
    want_t *w = &want[nwant++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->name, sizeof w->name, fmt, ap);
    va_end(ap);
    w->ndim = ndim;
    w->shape[0] = a;
    w->shape[1] = b;
}

static int64_t geti(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

static void expected_tensors(const char *config_path) {
    json_t *root = json_load_file(config_path, 0, NULL);
    CHECK(root != NULL, "cannot read %s", config_path);
    if (!root) return;
    nwant = 0;
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    int gemma = !strcmp(mt, "gemma4");
    json_t *c = gemma ? json_object_get(root, "text_config") : root;
    const char *P = gemma ? "model.language_model." : "model.";
    int64_t V = geti(c, "vocab_size"), H = geti(c, "hidden_size"), L = geti(c, "num_hidden_layers");
    int64_t nH = geti(c, "num_attention_heads"), nKV = geti(c, "num_key_value_heads"), D = geti(c, "head_dim");
    int64_t I = geti(c, "intermediate_size");
    W(2, V, H, "%sembed_tokens.weight", P);
    if (!gemma) {
        for (int i = 0; i < L; i++) {
            W(1, H, 0, "%slayers.%d.input_layernorm.weight", P, i);
            W(2, nH * D, H, "%slayers.%d.self_attn.q_proj.weight", P, i);
            W(2, nKV * D, H, "%slayers.%d.self_attn.k_proj.weight", P, i);
            W(2, nKV * D, H, "%slayers.%d.self_attn.v_proj.weight", P, i);
            W(2, H, nH * D, "%slayers.%d.self_attn.o_proj.weight", P, i);
            if (!strcmp(mt, "qwen3")) {
                W(1, D, 0, "%slayers.%d.self_attn.q_norm.weight", P, i);
                W(1, D, 0, "%slayers.%d.self_attn.k_norm.weight", P, i);
            }
            W(1, H, 0, "%slayers.%d.post_attention_layernorm.weight", P, i);
            W(2, I, H, "%slayers.%d.mlp.gate_proj.weight", P, i);
            W(2, I, H, "%slayers.%d.mlp.up_proj.weight", P, i);
            W(2, H, I, "%slayers.%d.mlp.down_proj.weight", P, i);
        }
    } else {
        int64_t Pw = geti(c, "hidden_size_per_layer_input"), Dg = geti(c, "global_head_dim");
        int64_t nKVg = geti(c, "num_global_key_value_heads"), shared = geti(c, "num_kv_shared_layers");
        int keqv = json_is_true(json_object_get(c, "attention_k_eq_v"));
        int dw = json_is_true(json_object_get(c, "use_double_wide_mlp"));
        json_t *lt = json_object_get(c, "layer_types");
        if (Pw > 0) {
            W(2, geti(c, "vocab_size_per_layer_input"), L * Pw, "%sembed_tokens_per_layer.weight", P);
            W(2, L * Pw, H, "%sper_layer_model_projection.weight", P);
            W(1, Pw, 0, "%sper_layer_projection_norm.weight", P);
        }
        for (int i = 0; i < L; i++) {
            int full = !strcmp(json_string_value(json_array_get(lt, (size_t)i)), "full_attention");
            int64_t Dl = full ? Dg : D, kv = full && keqv && nKVg > 0 ? nKVg : nKV;
            int is_shared = i >= L - shared;
            int64_t Ii = is_shared && dw ? 2 * I : I;
            W(1, H, 0, "%slayers.%d.input_layernorm.weight", P, i);
            W(2, nH * Dl, H, "%slayers.%d.self_attn.q_proj.weight", P, i);
            W(1, Dl, 0, "%slayers.%d.self_attn.q_norm.weight", P, i);
            if (!is_shared) {
                W(2, kv * Dl, H, "%slayers.%d.self_attn.k_proj.weight", P, i);
                if (!(full && keqv)) W(2, kv * Dl, H, "%slayers.%d.self_attn.v_proj.weight", P, i);
                W(1, Dl, 0, "%slayers.%d.self_attn.k_norm.weight", P, i);
            }
            W(2, H, nH * Dl, "%slayers.%d.self_attn.o_proj.weight", P, i);
            W(1, H, 0, "%slayers.%d.post_attention_layernorm.weight", P, i);
            W(1, H, 0, "%slayers.%d.pre_feedforward_layernorm.weight", P, i);
            W(2, Ii, H, "%slayers.%d.mlp.gate_proj.weight", P, i);
            W(2, Ii, H, "%slayers.%d.mlp.up_proj.weight", P, i);
            W(2, H, Ii, "%slayers.%d.mlp.down_proj.weight", P, i);
            W(1, H, 0, "%slayers.%d.post_feedforward_layernorm.weight", P, i);
            W(1, 1, 0, "%slayers.%d.layer_scalar", P, i);
            if (Pw > 0) {
                W(2, Pw, H, "%slayers.%d.per_layer_input_gate.weight", P, i);
                W(2, H, Pw, "%slayers.%d.per_layer_projection.weight", P, i);
                W(1, H, 0, "%slayers.%d.post_per_layer_input_norm.weight", P, i);
            }
        }
    }
    W(1, H, 0, "%snorm.weight", P);
    if (!json_is_true(json_object_get(c, "tie_word_embeddings"))) W(2, V, H, "lm_head.weight");
    json_decref(root);
}

static void check_layout(const char *dir, sp_dtype dt) {
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    expected_tensors(cfg);
    st_set *s = NULL;
    sp_err err = {{0}};
    CHECK(sp_st_open_dir(&s, dir, &err) == 0, "%s", err.msg);
    if (!s) return;
    CHECK(sp_st_count(s) == nwant, "%s: %d tensors, expected %d", dir, sp_st_count(s), nwant);
    for (int i = 0; i < nwant; i++) {
        const st_tensor *t = sp_st_find(s, want[i].name);
        CHECK(t != NULL, "%s: missing %s", dir, want[i].name);
        if (!t) continue;
        CHECK(t->ndim == want[i].ndim && t->shape[0] == want[i].shape[0] &&
                  (t->ndim == 1 || t->shape[1] == want[i].shape[1]),
              "%s: %s shape [%lld, %lld], expected [%lld, %lld]", dir, want[i].name, (long long)t->shape[0],
              (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)want[i].shape[0], (long long)want[i].shape[1]);
        CHECK(t->dtype == dt, "%s: %s dtype %s", dir, want[i].name, sp_dtype_name(t->dtype));
    }
    sp_st_close(s);
}

/* mean and std of a tensor's values as doubles */
static void stats(const st_tensor *t, double *mean, double *sd) {
    float *f = malloc((size_t)t->numel * sizeof *f);
    sp_to_f32(f, t->data, t->dtype, (size_t)t->numel);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        s += f[i];
        s2 += (double)f[i] * f[i];
    }
    *mean = s / (double)t->numel;
    *sd = sqrt(fmax(0, s2 / (double)t->numel - *mean * *mean));
    free(f);
}

static void test_tiny_layouts(void) {
    const char *archs[] = {"llama", "qwen3", "gemma4"};
    for (int a = 0; a < 3; a++) {
        const char *dir = tmpdir(archs[a]);
        if (write_model(dir, archs[a], "tiny", NULL, 0, SP_DT_UNKNOWN, 7, 0)) continue;
        check_layout(dir, SP_DT_F32); /* tiny defaults to f32 */
        sp_config c;
        sp_err err = {{0}};
        char path[600];
        snprintf(path, sizeof path, "%s/config.json", dir);
        CHECK(sp_config_load(&c, path, &err) == 0, "%s", err.msg);
        /* every feature of the arch is on */
        if (a == 0) CHECK(c.rope.type == SP_ROPE_LLAMA3 && !c.tie_embeddings, "llama tiny features");
        if (a == 1) CHECK(c.qk_norm && c.head_dim * c.n_heads != c.hidden_size, "qwen3 tiny features");
        if (a == 2) {
            int n_sliding = 0;
            for (int i = 0; i < c.n_layers; i++) n_sliding += c.layers[i].sliding;
            CHECK(n_sliding > 0 && n_sliding < c.n_layers, "gemma4 tiny: both layer types");
            CHECK(c.sliding_window > 0 && c.sliding_window <= 32 && c.attention_k_eq_v && c.n_kv_shared > 0 &&
                      c.ple_dim > 0 && c.final_softcap == 30 && c.global_head_dim != c.head_dim &&
                      c.n_global_kv_heads > 0 && c.double_wide_mlp,
                  "gemma4 tiny features");
            /* llama.cpp's KV reuse rule (docs/GGUF-FORMAT.md §7) holds */
            int fs = c.n_layers - c.n_kv_shared;
            for (int i = fs; i < c.n_layers; i++)
                CHECK(c.layers[i].kv_source == (c.layers[i].sliding ? fs - 2 : fs - 1), "layer %d kv source %d", i,
                      c.layers[i].kv_source);
        }
        /* value scales */
        st_set *s = NULL;
        if (sp_st_open_dir(&s, dir, &err)) continue;
        for (int i = 0; i < sp_st_count(s); i++) {
            const st_tensor *t = sp_st_at(s, i);
            double m, sd;
            stats(t, &m, &sd);
            if (strstr(t->name, "layer_scalar")) {
                CHECK(m >= 0.5 && m < 1.0, "%s = %g", t->name, m);
            } else if (strstr(t->name, "norm")) {
                CHECK(fabs(m - 1) < 0.1 && sd > 0.02 && sd < 0.2, "%s mean %g sd %g", t->name, m, sd);
            } else if (strstr(t->name, "embed_tokens") || strstr(t->name, "lm_head")) {
                CHECK(fabs(sd - 1) < 0.05 && fabs(m) < 0.05, "%s sd %g", t->name, sd);
            } else {
                double want_sd = 1 / sqrt((double)t->shape[1]);
                CHECK(fabs(sd / want_sd - 1) < 0.15 && fabs(m) < 0.2 * want_sd + 0.01, "%s sd %g, expected %g",
                      t->name, sd, want_sd);
            }
        }
        sp_st_close(s);
    }
}

static int files_equal(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    if (sp_read_file(a, &x, &nx, NULL)) return -1;
    if (sp_read_file(b, &y, &ny, NULL)) {
        free(x);
        return -1;
    }
    int eq = nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return eq;
}

static void test_seed_reproducible(void) {
    const char *d1 = tmpdir("seed_a"), *d2 = tmpdir("seed_b"), *d3 = tmpdir("seed_c");
    if (write_model(d1, "gemma4", "tiny", NULL, 0, SP_DT_BF16, 11, 0) ||
        write_model(d2, "gemma4", "tiny", NULL, 0, SP_DT_BF16, 11, 0) ||
        write_model(d3, "gemma4", "tiny", NULL, 0, SP_DT_BF16, 12, 0))
        return;
    check_layout(d1, SP_DT_BF16);
    char a[600], b[600], c[600];
    snprintf(a, sizeof a, "%s/model.safetensors", d1);
    snprintf(b, sizeof b, "%s/model.safetensors", d2);
    snprintf(c, sizeof c, "%s/model.safetensors", d3);
    CHECK(files_equal(a, b) == 1, "same seed gave different files");
    CHECK(files_equal(a, c) == 0, "different seeds gave identical files");
    snprintf(a, sizeof a, "%s/config.json", d1);
    snprintf(b, sizeof b, "%s/config.json", d2);
    CHECK(files_equal(a, b) == 1, "config differs");
    /* thread count does not change the bytes */
    newmodel_opts o = {.arch = "gemma4", .preset = "tiny", .dtype = SP_DT_BF16, .seed = 11, .n_threads = 1};
    sp_err err = {{0}};
    const char *d4 = tmpdir("seed_d");
    CHECK(sp_newmodel_write(d4, &o, &err) == 0, "%s", err.msg);
    snprintf(a, sizeof a, "%s/model.safetensors", d1);
    snprintf(b, sizeof b, "%s/model.safetensors", d4);
    CHECK(files_equal(a, b) == 1, "1 thread vs 2 threads differ");
}

static void test_overrides(void) {
    const char *sets[] = {"num_hidden_layers=8", "sliding_window=8", "hidden_size_per_layer_input=8",
                          "rope_parameters.full_attention.partial_rotary_factor=0.5", "my_note=hello world"};
    const char *dir = tmpdir("over_gemma");
    if (write_model(dir, "gemma4", "tiny", sets, 5, SP_DT_UNKNOWN, 3, 0)) return;
    check_layout(dir, SP_DT_F32);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *tc = json_object_get(root, "text_config");
    CHECK(geti(tc, "num_hidden_layers") == 8 && geti(tc, "sliding_window") == 8, "overrides in text_config");
    CHECK(json_array_size(json_object_get(tc, "layer_types")) == 8, "layer_types regenerated");
    CHECK(!strcmp(json_string_value(json_object_get(tc, "my_note")) ?: "", "hello world"), "string fallback");
    CHECK(json_object_get(root, "num_hidden_layers") == NULL, "gemma override leaked to top level");
    json_decref(root);
    sp_config c;
    sp_err err = {{0}};
    CHECK(sp_config_load(&c, path, &err) == 0, "%s", err.msg);
    CHECK(c.n_layers == 8 && c.sliding_window == 8 && c.ple_dim == 8 && c.rope.partial_rotary_factor == 0.5,
          "parser reads overrides: L %d W %d P %d", c.n_layers, c.sliding_window, c.ple_dim);

    const char *lsets[] = {"rope_scaling.factor=16", "tie_word_embeddings=true", "hidden_size=48",
                           "eos_token_id=[2, 5]"};
    dir = tmpdir("over_llama");
    if (write_model(dir, "llama", "tiny", lsets, 4, SP_DT_UNKNOWN, 3, 0)) return;
    check_layout(dir, SP_DT_F32);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(sp_config_load(&c, path, &err) == 0, "%s", err.msg);
    CHECK(c.rope.factor == 16 && c.rope.type == SP_ROPE_LLAMA3 && c.tie_embeddings && c.hidden_size == 48 &&
              c.n_eos == 2 && c.eos_ids[1] == 5,
          "llama overrides");

    /* bad input is an error, not a crash */
    newmodel_opts o = {.arch = "qwen3", .preset = "nope", .dtype = SP_DT_UNKNOWN, .seed = 1};
    CHECK(sp_newmodel_write(tmpdir("bad"), &o, &err) != 0 && strstr(err.msg, "preset"), "%s", err.msg);
    o.arch = "mamba";
    o.preset = "tiny";
    CHECK(sp_newmodel_write(tmpdir("bad"), &o, &err) != 0 && strstr(err.msg, "architecture"), "%s", err.msg);
    const char *bad[] = {"noequals"};
    o = (newmodel_opts){.arch = "qwen3", .preset = "tiny", .sets = bad, .n_sets = 1, .seed = 1};
    CHECK(sp_newmodel_write(tmpdir("bad"), &o, &err) != 0 && strstr(err.msg, "key=value"), "%s", err.msg);
    const char *bad2[] = {"num_hidden_layers=0"};
    o.sets = bad2;
    CHECK(sp_newmodel_write(tmpdir("bad"), &o, &err) != 0 && strstr(err.msg, "num_hidden_layers"), "%s", err.msg);
}

static void test_real_presets_parse(void) {
    for (int i = 0; sp_preset_at(i); i++) {
        const preset_info *p = sp_preset_at(i);
        sp_err err = {{0}};
        char *text = sp_preset_config_json(p->arch, p->name, p->real ? "bfloat16" : "float32", NULL, 0, &err);
        CHECK(text != NULL, "%s/%s: %s", p->arch, p->name, err.msg);
        if (!text) continue;
        sp_config c;
        CHECK(sp_config_parse(&c, text, p->name, &err) == 0, "%s: %s", p->name, err.msg);
        free(text);
        if (!strcmp(p->name, "qwen3-0.6b"))
            CHECK(c.hidden_size == 1024 && c.n_layers == 28 && c.n_heads == 16 && c.n_kv_heads == 8 &&
                      c.head_dim == 128 && c.ffn_dim == 3072 && c.vocab_size == 151936 && c.tie_embeddings &&
                      c.rope.theta == 1e6 && c.rms_eps == 1e-6,
                  "qwen3-0.6b");
        if (!strcmp(p->name, "qwen3-4b"))
            CHECK(c.hidden_size == 2560 && c.n_layers == 36 && c.n_heads == 32 && c.ffn_dim == 9728 && c.max_pos == 40960,
                  "qwen3-4b");
        if (!strcmp(p->name, "llama3.2-1b"))
            CHECK(c.hidden_size == 2048 && c.n_layers == 16 && c.n_heads == 32 && c.n_kv_heads == 8 &&
                      c.head_dim == 64 && c.ffn_dim == 8192 && c.vocab_size == 128256 && c.rope.factor == 32 &&
                      c.rope.original_max_pos == 8192 && c.rope.theta == 5e5 && c.rms_eps == 1e-5 && c.tie_embeddings,
                  "llama3.2-1b");
        if (!strcmp(p->name, "gemma4-e2b")) {
            int full = 0;
            for (int l = 0; l < c.n_layers; l++) full += !c.layers[l].sliding;
            CHECK(c.hidden_size == 1536 && c.n_layers == 35 && c.ffn_dim == 6144 && c.n_heads == 8 &&
                      c.head_dim == 256 && c.global_head_dim == 512 && c.n_kv_heads == 1 && c.n_kv_shared == 20 &&
                      c.ple_dim == 256 && c.vocab_size == 262144 && c.sliding_window == 512 &&
                      c.final_softcap == 30 && c.double_wide_mlp && full == 7 && !c.layers[14].sliding &&
                      c.layers[13].sliding && c.layers[34].ffn_dim == 2 * 6144 && c.n_eos == 3,
                  "gemma4-e2b");
        }
    }
}

/* shards: same tensors and bytes as the single file */
static void test_sharded(void) {
    const char *d1 = tmpdir("one"), *d2 = tmpdir("sharded");
    if (write_model(d1, "qwen3", "tiny", NULL, 0, SP_DT_BF16, 5, 0) ||
        write_model(d2, "qwen3", "tiny", NULL, 0, SP_DT_BF16, 5, 300000))
        return;
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d2);
    CHECK(sp_file_exists(p), "no index");
    json_t *idx = json_load_file(p, 0, NULL);
    json_t *map = json_object_get(idx, "weight_map");
    const char *k;
    json_t *v;
    int n_files = 0;
    char seen[16][64];
    json_object_foreach(map, k, v) {
        const char *fn = json_string_value(v);
        int dup = 0;
        for (int i = 0; i < n_files; i++) dup |= !strcmp(seen[i], fn);
        if (!dup && n_files < 16) snprintf(seen[n_files++], 64, "%s", fn);
    }
    CHECK(n_files >= 2 && strstr(seen[0], "-of-0000"), "%d shard files", n_files);
    json_decref(idx);
    snprintf(p, sizeof p, "%s/model.safetensors", d2);
    CHECK(!sp_file_exists(p), "sharded dir also has model.safetensors");
    check_layout(d2, SP_DT_BF16);
    st_set *a = NULL, *b = NULL;
    sp_err err = {{0}};
    if (sp_st_open_dir(&a, d1, &err) || sp_st_open_dir(&b, d2, &err)) {
        CHECK(0, "%s", err.msg);
    } else {
        for (int i = 0; i < sp_st_count(a); i++) {
            const st_tensor *x = sp_st_at(a, i), *y = sp_st_find(b, x->name);
            CHECK(y && y->nbytes == x->nbytes && !memcmp(x->data, y->data, x->nbytes), "%s differs", x->name);
        }
    }
    if (a) sp_st_close(a);
    if (b) sp_st_close(b);
}

static void test_tokenizer_copy(void) {
    /* a synthetic byte-level tokenizer with 9000 ids (> tiny's 8192) */
    const char *src = tmpdir("tok_src");
    sp_mkdir_p(src, NULL);
    char p[600];
    snprintf(p, sizeof p, "%s/tokenizer.json", src);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]},"
               "\"added_tokens\":[{\"id\":8999,\"content\":\"<|end|>\",\"special\":true}]}");
    fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", src);
    f = fopen(p, "w");
    fprintf(f, "{\"eos_token\":\"<|end|>\"}");
    fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer.json", src);
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .tokenizer = p, .seed = 1, .dtype = SP_DT_UNKNOWN};
    sp_err err = {{0}};
    const char *dir = tmpdir("tok_model");
    CHECK(sp_newmodel_write(dir, &o, &err) == 0, "%s", err.msg);
    char q[600];
    snprintf(q, sizeof q, "%s/tokenizer.json", dir);
    CHECK(files_equal(p, q) == 1, "tokenizer.json not copied");
    snprintf(q, sizeof q, "%s/tokenizer_config.json", dir);
    CHECK(sp_file_exists(q), "tokenizer_config.json not copied");
    snprintf(q, sizeof q, "%s/config.json", dir);
    sp_config c;
    CHECK(sp_config_load(&c, q, &err) == 0 && c.vocab_size == 9000, "vocab_size %d, expected 9000", c.vocab_size);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 8999 && c.bos_id == 1, "eos %d bos %d: tokenizer_config ids not applied",
          c.eos_ids[0], c.bos_id);
    check_layout(dir, SP_DT_F32);
}

/* the engine runs every tiny preset, in f32 and bf16: finite logits, the Gemma-4 softcap bound,
 * and not a constant prediction (docs/TRANSFORMER.md through the real loader) */
static void test_engine_runs_tiny(void) {
    const char *archs[] = {"llama", "qwen3", "gemma4"};
    for (int a = 0; a < 3; a++)
        for (int d = 0; d < 2; d++) {
            char name[64];
            snprintf(name, sizeof name, "engine_%s_%d", archs[a], d);
            const char *dir = tmpdir(name);
            const char *sets[] = {"max_position_embeddings=64"};
            if (write_model(dir, archs[a], "tiny", sets, 1, d ? SP_DT_BF16 : SP_DT_F32, 9, 0)) continue;
            sp_model *m = NULL;
            sp_err err = {{0}};
            if (sp_model_load(&m, dir, 1, &err)) {
                CHECK(0, "%s: %s", dir, err.msg);
                continue;
            }
            const sp_config *c = sp_model_config(m);
            enum { T = 40 }; /* > the gemma4 tiny window of 16 */
            int32_t tok[T];
            for (int i = 0; i < T; i++) tok[i] = (int32_t)(1 + (i * 977) % (c->vocab_size - 1));
            sp_kv *kv = sp_kv_create(m, T, T, &err);
            float *logits = malloc((size_t)T * (size_t)c->vocab_size * sizeof *logits);
            sp_forward_out out = {.logits = logits};
            CHECK(kv && sp_model_forward(m, kv, tok, T, &out, &err) == 0, "%s: %s", dir, err.msg);
            int finite = 1, distinct = 0, prev = -1;
            float mx = 0;
            for (int t = 0; t < T; t++) {
                int best = 0;
                for (int v = 0; v < c->vocab_size; v++) {
                    float x = logits[(size_t)t * c->vocab_size + v];
                    finite &= isfinite(x);
                    if (fabsf(x) > mx) mx = fabsf(x);
                    if (x > logits[(size_t)t * c->vocab_size + best]) best = v;
                }
                distinct += best != prev;
                prev = best;
            }
            CHECK(finite && mx > 1, "%s: logits not finite or flat (max %g)", dir, mx);
            CHECK(c->arch != SP_ARCH_GEMMA4 || mx <= 30.0f, "%s: softcap exceeded (%g)", dir, mx);
            CHECK(distinct > T / 4, "%s: argmax changed only %d times in %d positions", dir, distinct, T);
            free(logits);
            sp_kv_free(kv);
            sp_model_free(m);
        }
}

/* --set parsing shared by new-model and new-drafter: dotted paths, JSON or string values, and
 * each malformed override named */
static void test_set_parsing(void) {
    json_t *o = json_object();
    sp_err err = {{0}};
    CHECK(sp_preset_apply_set(o, "a.b.c=3", &err) == 0 && sp_preset_apply_set(o, "name=plain text", &err) == 0 &&
              sp_preset_apply_set(o, "a.list=[1,2]", &err) == 0,
          "%s", err.msg);
    json_t *c = json_object_get(json_object_get(json_object_get(o, "a"), "b"), "c");
    CHECK(json_is_integer(c) && json_integer_value(c) == 3, "a.b.c is not 3");
    CHECK(json_is_string(json_object_get(o, "name")) && !strcmp(json_string_value(json_object_get(o, "name")), "plain text"),
          "a non-JSON value is not kept as a string");
    CHECK(json_array_size(json_object_get(json_object_get(o, "a"), "list")) == 2, "a JSON array value");
    const char *bad[][2] = {{"=3", "expected key=value"}, {"novalue", "expected key=value"},
                            {"a..b=1", "empty key component"}, {"a.=1", "empty key component"}};
    for (int i = 0; i < 4; i++) {
        err.msg[0] = 0;
        CHECK(sp_preset_apply_set(o, bad[i][0], &err) == -1 && strstr(err.msg, bad[i][1]) && strstr(err.msg, bad[i][0]),
              "--set '%s': %s", bad[i][0], err.msg);
    }
    char key[8];
    json_t *v = NULL;
    CHECK(sp_preset_parse_set("much_too_long_key=1", key, sizeof key, &v, &err) == -1 && strstr(err.msg, "key too long"),
          "a long key: %s", err.msg);
    json_decref(o);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/specula_test_newmodel.XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    sp_log_level = SP_LOG_WARN;
    RUN(test_tiny_layouts);
    RUN(test_seed_reproducible);
    RUN(test_overrides);
    RUN(test_set_parsing);
    RUN(test_real_presets_parse);
    RUN(test_sharded);
    RUN(test_tokenizer_copy);
    RUN(test_engine_runs_tiny);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return harness_done("test_newmodel");
}
