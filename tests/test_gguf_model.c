/* test_gguf_model.c — GGUF models (`-m FILE.gguf`): a file written by export-gguf gives exactly
 * the logits of the safetensors checkpoint it came from (tiny llama with llama3 RoPE scaling and
 * llama.cpp's Q/K row order, qwen3, gemma4 with KV sharing / k_eq_v / PLE; f32 and bf16), the
 * config read from the metadata equals config.json's, single-token steps equal the prefill, and
 * every malformed file (truncated, bad / overlapping offsets, wrong key or tensor types, missing
 * keys or tensors, shape mismatch, unknown architecture, leftover tensor) is a clear error.
 * Through the binary: generate (plain and speculative) gives the same tokens from the GGUF. */
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "core/core.h"
#include "formats/export_gguf.h"
#include "formats/newmodel.h"
#include "specula.h"

#define NTOK 12

static char tmp_root[256];
static char cli[200]; /* the specula binary beside this test's build folder */

static const char *tmppath(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", tmp_root, name);
    return b;
}

static int make_pair(const char *arch, sp_dtype dt, const char *dir, const char *gguf) {
    newmodel_opts o = {.arch = arch, .preset = "tiny", .dtype = dt, .seed = 42, .n_threads = 1};
    export_gguf_opts eo = {.weight_type = -1, .no_tokenizer = 1};
    sp_err err = {{0}};
    int rc = sp_newmodel_write(dir, &o, &err) || sp_export_gguf(dir, gguf, &eo, &err);
    CHECK(rc == 0, "%s: %s", arch, err.msg);
    return rc;
}

/* [NTOK, V] logits of a fixed token sequence: one prefill, or NTOK single steps */
static float *logits_of(const char *path, int threads, int steps, sp_config *cfg_out) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    if (sp_model_load(&m, path, threads, &err)) {
        CHECK(0, "load %s: %s", path, err.msg);
        return NULL;
    }
    const sp_config *c = sp_model_config(m);
    if (cfg_out) *cfg_out = *c;
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    float *lg = malloc(sizeof(float) * NTOK * (size_t)c->vocab_size);
    sp_kv *kv = sp_kv_create(m, 64, NTOK, &err);
    CHECK(kv != NULL, "%s", err.msg);
    for (int t = 0; kv && t < (steps ? NTOK : 1); t++) {
        sp_forward_out o = {.logits = lg + (size_t)t * c->vocab_size};
        CHECK(sp_model_forward(m, kv, tok + t, steps ? 1 : NTOK, &o, &err) == 0, "%s", err.msg);
    }
    sp_kv_free(kv);
    sp_model_free(m);
    return lg;
}

static void same_config(const sp_config *a, const sp_config *b, const char *what) {
    CHECK(a->arch == b->arch && a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
              a->n_layers == b->n_layers && a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
              a->head_dim == b->head_dim && a->ffn_dim == b->ffn_dim && a->tie_embeddings == b->tie_embeddings &&
              a->qk_norm == b->qk_norm && a->act == b->act && a->sliding_window == b->sliding_window &&
              a->ple_dim == b->ple_dim && a->n_kv_shared == b->n_kv_shared && (float)a->rms_eps == (float)b->rms_eps,
          "%s: config fields differ", what);
    CHECK(a->rope.type == b->rope.type && (float)a->rope.theta == (float)b->rope.theta &&
              a->rope.factor == b->rope.factor && a->rope.original_max_pos == b->rope.original_max_pos &&
              a->rope_swa.type == b->rope_swa.type && (float)a->rope_swa.theta == (float)b->rope_swa.theta,
          "%s: rope differs (type %d/%d factor %g/%g C %g/%g)", what, a->rope.type, b->rope.type, a->rope.factor,
          b->rope.factor, a->rope.original_max_pos, b->rope.original_max_pos);
    for (int i = 0; i < a->n_layers; i++)
        CHECK(!memcmp(&a->layers[i], &b->layers[i], sizeof a->layers[i]), "%s: layer %d config differs", what, i);
}

static void test_export_logits_exact(void) {
    const char *archs[] = {"llama", "qwen3", "gemma4"};
    const sp_dtype dts[] = {SP_DT_F32, SP_DT_BF16};
    for (int a = 0; a < 3; a++)
        for (int d = 0; d < 2; d++) {
            char name[64], what[64];
            snprintf(name, sizeof name, "%s_%d", archs[a], d);
            snprintf(what, sizeof what, "%s %s", archs[a], d ? "bf16" : "f32");
            const char *dir = tmppath(name);
            snprintf(name, sizeof name, "%s_%d.gguf", archs[a], d);
            const char *gg = tmppath(name);
            if (make_pair(archs[a], dts[d], dir, gg)) continue;
            sp_config ca, cb;
            float *ref = logits_of(dir, 2, 0, &ca), *got = logits_of(gg, 2, 0, &cb), *steps = logits_of(gg, 1, 1, NULL);
            if (ref && got && steps) {
                size_t n = (size_t)NTOK * ca.vocab_size;
                CHECK(!memcmp(ref, got, n * sizeof(float)), "%s: GGUF logits differ from the safetensors ones", what);
                CHECK(!memcmp(got, steps, n * sizeof(float)), "%s: GGUF single steps (1 thread) != prefill (2)", what);
                same_config(&ca, &cb, what);
            }
            free(ref);
            free(got);
            free(steps);
        }
}

/* ---- malformed files: byte patches of a valid export ------------------------------------- */
static char *file_bytes(const char *path, size_t *n) {
    char *b = NULL;
    if (sp_read_file(path, &b, n, NULL)) CHECK(0, "cannot read %s", path);
    return b;
}

/* offset just past the first occurrence of the length-prefixed string s (key or tensor name) */
static size_t after_str(const char *b, size_t n, const char *s) {
    size_t l = strlen(s);
    for (size_t i = 8; i + l <= n; i++)
        if (!memcmp(b + i, s, l) && b[i - 8] == (char)l && !b[i - 7]) return i + l;
    CHECK(0, "string %s not found", s);
    return 0;
}

/* 1 when msg contains one of the '|'-separated alternatives of want */
static int has_any(const char *msg, const char *want) {
    char alt[128];
    for (const char *p = want; *p;) {
        size_t l = strcspn(p, "|");
        snprintf(alt, sizeof alt, "%.*s", (int)l, p);
        if (strstr(msg, alt)) return 1;
        p += l + (p[l] == '|');
    }
    return 0;
}

/* write b[0..n) with the patch applied, load it, and expect an error containing want */
static void expect_error(const char *what, const char *b, size_t n, const char *want) {
    const char *p = tmppath("bad.gguf");
    sp_err err = {{0}};
    CHECK(sp_write_file_atomic(p, b, n, &err) == 0, "%s", err.msg);
    sp_model *m = NULL;
    int rc = sp_model_load(&m, p, 1, &err);
    CHECK(rc != 0 && m == NULL, "%s: loaded", what);
    CHECK(rc == 0 || has_any(err.msg, want), "%s: message \"%s\" lacks \"%s\"", what, err.msg, want);
    CHECK(rc == 0 || strstr(err.msg, "bad.gguf"), "%s: message \"%s\" does not name the file", what, err.msg);
    sp_model_free(m);
}

static void put_u32(char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(char *p, uint64_t v) { memcpy(p, &v, 8); }

/* tensor info of `name`: pointer to its n_dims field */
static char *tinfo(char *b, size_t n, const char *name) { return b + after_str(b, n, name); }

static void test_malformed(void) {
    const char *gq = tmppath("qwen3_0.gguf"), *gl = tmppath("llama_0.gguf");
    size_t n, nl;
    char *orig = file_bytes(gq, &n), *lorig = file_bytes(gl, &nl);
    char *b = malloc(n > nl ? n : nl);
    if (!orig || !lorig || !b) return;
#define FRESH() memcpy(b, orig, n)
    /* truncations: in the header, in the metadata, in the tensor infos, in the data */
    size_t cuts[] = {3, 20, 100, after_str(orig, n, "blk.0.attn_q.weight"), n - 1000, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        FRESH();
        char what[64];
        snprintf(what, sizeof what, "truncated at %zu", cuts[i]);
        expect_error(what, b, cuts[i], cuts[i] < 24 ? "too small" : cuts[i] < n - 2000 ? "truncated|exceed the file size" : "past the end");
    }
    FRESH();
    memcpy(b, "GGUX", 4);
    expect_error("bad magic", b, n, "magic");
    /* tensor infos: n_dims u32, dims u64[n_dims], type u32, offset u64 */
    char *q = tinfo(b, n, "blk.0.attn_q.weight");
    FRESH();
    put_u64(q + 4 + 16 + 4, 8);
    expect_error("misaligned offset", b, n, "aligned");
    FRESH();
    put_u64(q + 4 + 16 + 4, (uint64_t)n);
    expect_error("offset past the end", b, n, "past the end");
    FRESH();
    uint64_t off_k;
    memcpy(&off_k, tinfo(b, n, "blk.0.attn_k.weight") + 4 + 16 + 4, 8);
    put_u64(q + 4 + 16 + 4, off_k);
    expect_error("overlapping tensors", b, n, "overlap");
    FRESH();
    put_u32(q + 4 + 16, 3); /* Q4_1: fewer bytes, so the layout stays valid */
    expect_error("unsupported tensor type", b, n, "Q4_1");
    FRESH();
    put_u32(q + 4 + 16, 99);
    expect_error("unknown tensor type", b, n, "blk.0.attn_q.weight");
    FRESH();
    put_u64(tinfo(b, n, "blk.0.ffn_up.weight") + 4, 32); /* [64, 160] → [32, 320]: same bytes, wrong shape */
    put_u64(tinfo(b, n, "blk.0.ffn_up.weight") + 12, 320);
    expect_error("shape mismatch", b, n, "shape");
    FRESH();
    b[after_str(b, n, "blk.1.ffn_down.weight") - 17] = '0'; /* blk.1 → blk.0: a duplicate name */
    expect_error("duplicate tensor", b, n, "twice");
    FRESH();
    b[after_str(b, n, "blk.1.ffn_down.weight") - 17] = '7'; /* blk.1's tensor missing, blk.7 unknown */
    expect_error("missing tensor", b, n, "blk.1.ffn_down.weight");
    /* metadata */
    FRESH();
    put_u32(b + after_str(b, n, "qwen3.block_count"), 6); /* uint32 → float32 */
    expect_error("wrong key type", b, n, "qwen3.block_count");
    FRESH();
    b[after_str(b, n, "qwen3.embedding_length") - 1] = 'X';
    expect_error("missing key", b, n, "qwen3.embedding_length");
    FRESH();
    memcpy(b + after_str(b, n, "general.architecture") + 4 + 8, "qwen9", 5);
    expect_error("unsupported architecture", b, n, "qwen9");
    /* llama: renaming output.weight makes the head tied and leaves a tensor nobody binds */
    memcpy(b, lorig, nl);
    b[after_str(b, nl, "output.weight") - 8] = 'X';
    expect_error("leftover tensor", b, nl, "outpuX.weight");
#undef FRESH
    free(b);
    free(orig);
    free(lorig);
}

/* ---- through the binary --------------------------------------------------------------------- */
static void test_cli_generate(void) {
    const char *dir = tmppath("qwen3_1"), *gg = tmppath("qwen3_1.gguf");
    char cmd[2048], a[4096], b[4096];
    const char *spec[] = {"", "--spec ngram --draft-max 4"};
    for (int s = 0; s < 2; s++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 5,9,11,5,9,11,5,9 -n 24 -t 2 --json %s 2>&1",
                 cli, dir, spec[s]);
        int ra = harness_run(cmd, a, sizeof a);
        snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 5,9,11,5,9,11,5,9 -n 24 -t 2 --json %s 2>&1",
                 cli, gg, spec[s]);
        int rb = harness_run(cmd, b, sizeof b);
        char *ta = strstr(a, "\"tokens\""), *tb = strstr(b, "\"tokens\"");
        CHECK(ra == 0 && rb == 0 && ta && tb, "generate failed: %s / %s", a, b);
        if (ta && tb) {
            char *ea = strchr(ta, ']'), *eb = strchr(tb, ']');
            CHECK(ea && eb && ea - ta == eb - tb && !memcmp(ta, tb, (size_t)(ea - ta)), "tokens differ (%s): %.200s / %.200s",
                  spec[s], ta, tb);
        }
    }
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hello -n 4 2>&1", cli, gg);
    int rc = harness_run(cmd, a, sizeof a);
    CHECK(rc != 0 && strstr(a, "tokenizer"), "a GGUF without vocabulary and -p: rc %d, %s", rc, a);
    snprintf(cmd, sizeof cmd, "%s bench-decode -m %s -t 1 --json 2>&1", cli, gg);
    CHECK(harness_run(cmd, a, sizeof a) == 0, "bench-decode on a GGUF: %s", a);
    CHECK(strstr(a, "\"roofline_fraction\"") && strstr(a, "\"read_bw_gbs\""), "bench-decode --json: no roofline: %s", a);
    /* --no-roofline: the speeds without the bandwidth runs or the figures that need them */
    snprintf(cmd, sizeof cmd, "%s bench-decode -m %s -t 1 -n 4 --n-prefill 16 --no-roofline --json 2>&1", cli, gg);
    CHECK(harness_run(cmd, a, sizeof a) == 0, "bench-decode --no-roofline: %s", a);
    double dtps = -1, ptps = -1;
    const char *d = strstr(a, "\"decode_tps\":"), *p = strstr(a, "\"prefill_tps\":");
    if (d) dtps = atof(d + strlen("\"decode_tps\":"));
    if (p) ptps = atof(p + strlen("\"prefill_tps\":"));
    CHECK(dtps > 0 && ptps > 0, "bench-decode --no-roofline: decode %g, prefill %g tok/s: %s", dtps, ptps, a);
    CHECK(!strstr(a, "roofline_fraction") && !strstr(a, "read_bw_gbs"), "bench-decode --no-roofline still reports the roofline: %s", a);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]); /* BUILD/tests/test_x → BUILD/specula, BUILD/test_x.PID */
    char *slash = strrchr(cli, '/');
    if (slash) *slash = 0;
    snprintf(tmp_root, sizeof tmp_root, "%s/../test_gguf_model.%d", cli, (int)getpid());
    snprintf(cli + strlen(cli), sizeof cli - strlen(cli), "/../specula");
    sp_err err = {{0}};
    if (sp_mkdir_p(tmp_root, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    RUN(test_export_logits_exact);
    RUN(test_malformed);
    RUN(test_cli_generate);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", tmp_root);
    return harness_done("test_gguf_model");
}
