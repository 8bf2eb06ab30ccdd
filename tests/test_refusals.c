/* test_refusals.c — input that used to succeed silently (or with garbage output) and must now be
 * a clear error, through the `specula` binary of this build: flag values out of range, training
 * without a run to do or resume, a drafter made for another target, a quantized norm, a token
 * table shorter than the tokenizer, non-finite logits, prompts larger than any context, costly
 * or non-Jinja templates; and what export-gguf and new-drafter now write. Each case checks the
 * exit status and the one-line error. */
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/gguf.h"
#include "harness.h"

static char root[256], bin[512], tq[400], shards[400];
#define TOK "models/default/target/tokenizer.json"

/* a shell line (the caller formats it) with stdout to out.txt and stderr to err.txt; the exit status */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    char cmd[8192], full[8192 + 2 * sizeof root + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "( %s ) >%s/out.txt 2>%s/err.txt", cmd, root, root);
    int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static int file_has(const char *name, const char *what) {
    char p[400], *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/%s", root, name);
    if (sp_read_file(p, &text, &n, NULL)) return 0;
    int ok = strstr(text, what) != NULL;
    if (!ok) fprintf(stderr, "  expected \"%s\" in %s: %.400s\n", what, name, text);
    free(text);
    return ok;
}
static int err_has(const char *what) { return file_has("err.txt", what); }
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* ---- item 10: flags and files that used to run anyway ---------------------------------- */
static void test_flag_ranges(void) {
    const char *G = "generate -m";
    CHECK(run("%s %s %s --prompt-ids 1,2 -n 2 -t -1", bin, G, tq) == 2 && err_has("--threads must be at least 1"), "-t -1");
    CHECK(run("%s %s %s --prompt-ids 1,2 -n 2 -t 0", bin, G, tq) == 2 && err_has("--threads must be at least 1"), "-t 0");
    CHECK(run("%s %s %s --prompt-ids 1,2 -n 2 -t 1", bin, G, tq) == 0, "-t 1 must run");
    CHECK(run("%s %s %s --prompt-ids 1,2 -n 2 --spec ngram --draft-min 10 --draft-max 4", bin, G, tq) == 2 &&
              err_has("--draft-min 10 out of range 0..4"), "--draft-min 10 --draft-max 4");
    CHECK(run("%s %s %s --prompt-ids 1,2 -n 2 --spec ngram --conf-threshold 2", bin, G, tq) == 2 &&
              err_has("--conf-threshold 2 out of range 0..1"), "--conf-threshold 2");
    CHECK(run("%s serve -m %s --port 0 -c 2000000000", bin, tq) == 2 && err_has("-c must be in [0, 16777216]"),
          "serve -c 2000000000");
    CHECK(run("%s serve -m %s --port 0 --max-queue 2000000000", bin, tq) == 2 && err_has("--max-queue must be in [0, 65536]"),
          "serve --max-queue 2000000000");
    char p[512];
    snprintf(p, sizeof p, "%s/big.jsonl", root);
    write_text(p, "{\"ids\": [1, 2, 3], \"resp_start\": 4294967297}\n");
    CHECK(run("%s regen -m %s --data %s -o %s/rbig -q", bin, tq, p, root) == 2 && err_has("resp_start 4294967297 outside [0, 3]"),
          "regen resp_start 4294967297");
}

static void test_train_refusals(void) {
    const char *T = "--steps 2 --batch 4 --block-size 3 --layers 1 --markov-rank 8 --ctx 8 -q -t 1";
    CHECK(run("%s train -m %s --data %s -o %s/t0 --steps 0 --batch 4 -q -t 1", bin, tq, shards, root) == 2 &&
              err_has("--steps must be at least 1, got 0"), "train --steps 0");
    CHECK(run("%s train -m %s --data %s -o %s/tr %s --resume", bin, tq, shards, root, T) != 0 &&
              err_has("no checkpoint to resume from"), "train --resume without a checkpoint");
    CHECK(run("cp -r %s %s/sh2 && rm %s/sh2/shard_00000/shard.json", shards, root, root) == 0, "copy shards");
    CHECK(run("%s train -m %s --data %s/sh2 -o %s/ts %s", bin, tq, root, root, T) != 0 &&
              err_has("incomplete shard (no shard.json)"), "a shard without shard.json");
}

/* a tied Qwen3 of width 128: its random head spreads the logits so far that the label's softmax
 * probability underflows to 0; the loss is computed from the logits, so it stays finite */
static void test_train_wide_tied(void) {
    CHECK(run("%s new-model --arch qwen3 --preset tiny --seed 1 --tokenizer " TOK " --set hidden_size=128 -o %s/h128 && "
              "%s regen -m %s/h128 --data %s/six.jsonl -o %s/sh128 --generate 8 --taps 0 -q",
              bin, root, bin, root, root, root) == 0, "setup h128");
    CHECK(run("%s train -m %s/h128 --data %s/sh128 -o %s/d128 --steps 2 --batch 4 --block-size 3 --layers 1 "
              "--markov-rank 8 --ctx 8 -q -t 1", bin, root, root, root) == 0, "train on a tied width-128 qwen3");
    CHECK(err_has("train: step 2, loss"), "train output");
}

/* ---- items 10, 11: drafters --------------------------------------------------------------- */
static void test_drafters(void) {
    /* a Gemma-4 DSpark drafter and a Qwen3 target of the same width, vocabulary and depth */
    CHECK(run("%s new-model --arch gemma4 --preset tiny --seed 1 --tokenizer " TOK " -o %s/g && "
              "%s new-drafter --arch dspark -m %s/g --seed 1 -o %s/dg && "
              "%s new-model --arch qwen3 --preset tiny --seed 2 --tokenizer " TOK " --set num_hidden_layers=6 -o %s/q6",
              bin, root, bin, root, root, bin, root) == 0, "setup: %s", root);
    CHECK(run("%s generate -m %s/q6 --spec dspark -md %s/dg --prompt-ids 1,2 -n 2", bin, root, root) == 2 &&
              err_has("drafter for another target"), "a Gemma-4 DSpark drafter on a Qwen3 target");
    /* EAGLE-3 (SpecForge layout) on a 2-layer target: valid taps written, and generate runs it */
    CHECK(run("%s new-drafter --arch eagle3 -m %s --seed 1 -o %s/e3", bin, tq, root) == 0, "new-drafter eagle3");
    char p[512];
    snprintf(p, sizeof p, "%s/e3/config.json", root);
    json_t *c = json_load_file(p, 0, NULL);
    json_t *ids = json_object_get(c, "eagle_aux_hidden_state_layer_ids");
    CHECK(json_array_size(ids) == 3 && json_integer_value(json_array_get(ids, 2)) == 2, "eagle3 taps on 2 layers: %s",
          ids ? "wrong" : "missing");
    json_decref(c);
    CHECK(run("%s generate -m %s --spec eagle3 -md %s/e3 --prompt-ids 1,2,3 -n 4", bin, tq, root) == 0,
          "generate with the new EAGLE-3 drafter");
}

/* add_bos / add_eos in an exported GGUF as the source tokenizer adds them */
static int gguf_bool(const char *path, const char *key) {
    sp_err err = {{0}};
    gguf_file *f = sp_gguf_open(path, &err);
    int v = -1;
    if (!f || sp_gguf_get_bool(f, key, &v, &err) != 0) v = -1;
    sp_gguf_close(f);
    return v;
}

static void test_export_bos(void) {
    /* a Llama target whose tokenizer.json adds nothing (post-processor ByteLevel only) */
    CHECK(run("%s new-model --arch llama --preset tiny --seed 1 --tokenizer " TOK " -o %s/lb", bin, root) == 0, "llama");
    char p[512];
    snprintf(p, sizeof p, "%s/lb/tokenizer.json", root);
    json_t *t = json_load_file(p, 0, NULL);
    json_object_set_new(t, "post_processor", json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                                       "trim_offsets", 1, "use_regex", 1));
    CHECK(t && json_dump_file(t, p, 0) == 0, "rewrite %s", p);
    json_decref(t);
    CHECK(run("%s export-gguf -m %s/lb -o %s/lb.gguf", bin, root, root) == 0, "export lb");
    snprintf(p, sizeof p, "%s/lb.gguf", root);
    CHECK(gguf_bool(p, "tokenizer.ggml.add_bos_token") == 0 && gguf_bool(p, "tokenizer.ggml.add_eos_token") == 0,
          "llama without a BOS post-processor: add_bos %d add_eos %d", gguf_bool(p, "tokenizer.ggml.add_bos_token"),
          gguf_bool(p, "tokenizer.ggml.add_eos_token"));
    /* a Qwen3 target whose tokenizer adds <bos> (the architecture's default would say no) */
    CHECK(run("%s export-gguf -m %s -o %s/tq.gguf", bin, tq, root) == 0, "export tq");
    snprintf(p, sizeof p, "%s/tq.gguf", root);
    CHECK(gguf_bool(p, "tokenizer.ggml.add_bos_token") == 1 && gguf_bool(p, "tokenizer.ggml.add_eos_token") == 0,
          "qwen3 with a BOS post-processor: add_bos %d", gguf_bool(p, "tokenizer.ggml.add_bos_token"));
}

/* ---- item 6: models that load but cannot give tokens ------------------------------------ */
/* the byte offset in a GGUF of tensor `name`'s ggml type field, or -1 */
static long gguf_type_at(const char *data, size_t n, const char *name) {
    size_t k = strlen(name);
    for (size_t i = 8; i + 8 + k + 4 <= n; i++) {
        uint64_t len;
        memcpy(&len, data + i, 8);
        if (len != k || memcmp(data + i + 8, name, k)) continue;
        uint32_t nd;
        memcpy(&nd, data + i + 8 + k, 4);
        return nd <= 4 ? (long)(i + 8 + k + 4 + 8 * nd) : -1;
    }
    return -1;
}

static void test_load_refusals(void) {
    /* output_norm retyped to Q4_K (H = 256, so the smaller payload fits its slot) */
    CHECK(run("%s new-model --arch qwen3 --preset tiny --seed 1 --tokenizer " TOK " --set hidden_size=256 --dtype f32 "
              "-o %s/q256 && %s export-gguf -m %s/q256 -o %s/q256.gguf", bin, root, bin, root, root) == 0, "q256");
    char p[512], *data = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/q256.gguf", root);
    long at = sp_read_file(p, &data, &n, NULL) ? -1 : gguf_type_at(data, n, "output_norm.weight");
    CHECK(at > 0, "no output_norm.weight in %s", p);
    if (at > 0) {
        uint32_t q4k = 12;
        memcpy(data + at, &q4k, 4);
        FILE *f = fopen(p, "wb");
        if (f) fwrite(data, 1, n, f), fclose(f);
        CHECK(run("%s generate -m %s --prompt-ids 1,2 -n 2", bin, p) == 2 &&
                  err_has("output_norm.weight") && err_has("must be F32, F16 or BF16, not Q4_K"), "Q4_K output_norm");
    }
    free(data);
    /* a token table of 4096 rows under a tokenizer of 8192 */
    CHECK(run("%s new-model --arch qwen3 --preset tiny --seed 1 --tokenizer " TOK " --set vocab_size=4096 -o %s/qs", bin,
              root) == 0, "qs");
    CHECK(run("%s generate -m %s/qs --prompt-ids 1,2 -n 2", bin, root) == 2 &&
              err_has("the tokenizer has 8192 tokens but the model's token table has 4096 rows"), "short token table");
}

/* half the token table NaN (odd ids), a prompt of even ids: logits partly NaN */
static void test_nan_logits(void) {
    CHECK(run("cp -r %s %s/qn", tq, root) == 0, "copy");
    char p[512], *data = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/qn/model.safetensors", root);
    if (sp_read_file(p, &data, &n, NULL) || n < 8) {
        CHECK(0, "read %s", p);
        free(data);
        return;
    }
    uint64_t hl;
    memcpy(&hl, data, 8);
    json_t *h = hl < n ? json_loadb(data + 8, hl, 0, NULL) : NULL;
    json_t *e = json_object_get(h, "model.embed_tokens.weight");
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    json_t *sh = json_object_get(e, "shape"), *off = json_object_get(e, "data_offsets");
    int64_t V = json_integer_value(json_array_get(sh, 0)), H = json_integer_value(json_array_get(sh, 1));
    size_t o0 = 8 + hl + (size_t)json_integer_value(json_array_get(off, 0));
    int es = dt && !strcmp(dt, "F32") ? 4 : 2;
    CHECK(dt && V == 8192 && H == 64 && o0 + (size_t)(V * H * es) <= n, "embed_tokens: %s", dt ? dt : "missing");
    if (dt && V == 8192 && o0 + (size_t)(V * H * es) <= n) {
        for (int64_t r = 1; r < V; r += 2)
            for (int64_t c = 0; c < H; c++) {
                char *x = data + o0 + (size_t)(r * H + c) * (size_t)es;
                if (es == 4) memcpy(x, &(uint32_t){0x7FC00000u}, 4);
                else memcpy(x, &(uint16_t){0x7FC0u}, 2);
            }
        FILE *f = fopen(p, "wb");
        if (f) fwrite(data, 1, n, f), fclose(f);
        CHECK(run("%s generate -m %s/qn --prompt-ids 2,4,6 -n 4", bin, root) != 0 &&
                  err_has("the logits of position 2 are not finite"), "partly-NaN logits must fail");
    }
    json_decref(h);
    free(data);
}

/* ---- item 7: prompts larger than any context -------------------------------------------- */
static void test_prompt_size(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/huge.txt", root);
    write_text(p, "");
    CHECK(truncate(p, (off_t)1 << 30) == 0, "sparse 1 GiB file");
    CHECK(run("%s generate -m %s -f %s -n 2", bin, tq, p) == 2 && err_has("a prompt may be at most 268435456 bytes"),
          "-f with a 1 GiB file");
    unlink(p);
    /* 2 MB of text for a context of 4096: refused by its length before any encoding */
    FILE *f = fopen(p, "w");
    for (int i = 0; f && i < 200000; i++) fputs("hello you ", f);
    if (f) fclose(f);
    CHECK(run("%s generate -m %s -f %s -n 2", bin, tq, p) == 2 && err_has("at least") && err_has("that fit"),
          "a 2 MB prompt for 4096 positions");
    /* 60 KB: short enough to encode, still more tokens than fit */
    f = fopen(p, "w");
    for (int i = 0; f && i < 6000; i++) fputs("hello you ", f);
    if (f) fclose(f);
    CHECK(run("%s generate -m %s -f %s -n 2", bin, tq, p) == 2 && err_has("more than the 4096 that fit"),
          "a 60 KB prompt for 4096 positions");
    unlink(p);
}

/* ---- item 8: Jinja through `specula template` -------------------------------------------- */
static int render(const char *tmpl, size_t n, int timeout_s) {
    char p[512], m[512];
    snprintf(p, sizeof p, "%s/t.jinja", root);
    snprintf(m, sizeof m, "%s/m.json", root);
    FILE *f = fopen(p, "wb");
    if (f) fwrite(tmpl, 1, n, f), fclose(f);
    write_text(m, "[{\"role\": \"user\", \"content\": \"hi\"}]");
    return run("timeout %d %s template -m %s --messages %s --chat-template %s", timeout_s, bin, tq, m, p);
}

static void test_jinja(void) {
    size_t cap = 1 << 21, n = 0;
    char *t = malloc(cap);
    /* a dict literal of 8000 keys (quadratic memory before: "template too large") */
    n = (size_t)snprintf(t, cap, "{%% set d = {");
    for (int i = 0; i < 8000; i++) n += (size_t)snprintf(t + n, cap - n, "%s\"k%d\": %d", i ? "," : "", i, i);
    n += (size_t)snprintf(t + n, cap - n, "} %%}{{ d|length }} {{ d.k7999 }}");
    CHECK(render(t, n, 20) == 0 && file_has("out.txt", "8000 7999"), "dict literal of 8000 keys");
    /* 20000 set statements and a namespace of 20000 keywords: linear, seconds before were minutes */
    n = 0;
    for (int i = 0; i < 20000; i++) n += (size_t)snprintf(t + n, cap - n, "{%% set x%d = %d %%}", i, i);
    n += (size_t)snprintf(t + n, cap - n, "{{ x19999 }}");
    CHECK(render(t, n, 20) == 0 && file_has("out.txt", "19999"), "20000 set statements");
    n = (size_t)snprintf(t, cap, "{%% set ns = namespace(");
    for (int i = 0; i < 20000; i++) n += (size_t)snprintf(t + n, cap - n, "%sa%d=%d", i ? "," : "", i, i);
    n += (size_t)snprintf(t + n, cap - n, ") %%}{{ ns.a19998 }}");
    CHECK(render(t, n, 20) == 0 && file_has("out.txt", "19998"), "20000 keyword arguments");
    /* as Jinja: a NUL byte, an int that no int64 holds, round past the digits, none.foo.bar */
    CHECK(render("abc\0{{ 1 }}", 11, 10) == 2 && err_has("a NUL byte at offset 3"), "NUL byte");
    CHECK(render("{{ 1e308|int }}", 15, 10) == 2 && err_has("does not fit a 64-bit integer"), "1e308|int");
    CHECK(render("{{ 1e308|round(1000) }}", 23, 10) == 0 && file_has("out.txt", "1e+308"), "1e308|round(1000)");
    CHECK(render("[{{ none.foo.bar }}]", 20, 10) == 2 && err_has("'foo' is undefined (reading .bar)"), "none.foo.bar");
    CHECK(render("[{{ none.foo }}]", 16, 10) == 0 && file_has("out.txt", "[]"), "none.foo stays undefined");
    free(t);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(root, sizeof root, "/tmp/specula_test_refusals_%d", (int)getpid());
    snprintf(bin, sizeof bin, "%s", argv[0]);
    char *slash = strrchr(bin, '/');
    if (slash) *slash = 0;
    slash = strrchr(bin, '/');
    if (slash) strcpy(slash + 1, "specula");
    sp_err err;
    if (access(bin, X_OK) != 0 || sp_mkdir_p(root, &err)) {
        printf("skipped: no specula binary at %s\n", bin);
        return harness_done("test_refusals");
    }
    /* the tiny Qwen3 target with the default tokenizer, and shards of its responses */
    snprintf(tq, sizeof tq, "%s/tq", root);
    snprintf(shards, sizeof shards, "%s/shards", root);
    char p[512];
    snprintf(p, sizeof p, "%s/six.jsonl", root);
    FILE *f = fopen(p, "w");
    for (int i = 0; f && i < 6; i++) fprintf(f, "{\"ids\": [1, %d, %d, %d], \"resp_start\": 4}\n", 50 + i, 60 + i, 50 + i);
    if (f) fclose(f);
    if (run("%s new-model --arch qwen3 --preset tiny --seed 1 --tokenizer " TOK " -o %s && "
            "%s regen -m %s --data %s -o %s --generate 8 --taps 0 -q", bin, tq, bin, tq, p, shards) != 0) {
        printf("FAIL setup (%s/err.txt)\n", root);
        return 1;
    }
    RUN(test_flag_ranges);
    RUN(test_train_refusals);
    RUN(test_train_wide_tied);
    RUN(test_drafters);
    RUN(test_export_bos);
    RUN(test_load_refusals);
    RUN(test_nan_logits);
    RUN(test_prompt_size);
    RUN(test_jinja);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (harness_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_refusals");
}
