/* test_tokenizer_pre.c — pre-tokenizers, normalizers and special-token parsing as the
 * tokenizer declares them (docs/tokenizer-fidelity.md):
 *   - every tokenizer.ggml.pre name llama.cpp accepts loads (its regexes compile with PCRE2)
 *     and round-trips text on a bare vocabulary; an unknown name is an error naming it;
 *   - the pieces of chosen families and of each HF pre_tokenizer type on hand-checked text;
 *   - each HF normalizer type on hand-checked text; a decomposed "é" stays decomposed where
 *     the tokenizer declares no normalizer (Llama-3, Gemma, a GGUF vocab) and is composed where
 *     it declares NFC (Qwen3);
 *   - with parse_special off no control token comes out of text, for every vocabulary here,
 *     while user-defined (non-special) tokens still match. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "tok_test_gguf.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

#define CACHE ".cache/tokenizers/"
#define GGUF_PATH "build/test-pre-family.gguf"

/* a GGUF vocab: model gpt2, the given pre, 256 one-byte tokens (the GPT-2 alphabet, or
 * "<0xHH>" byte tokens and "▁" for raw-UTF-8 families), no merges; flags >= 0: also
 * bos_token_id 66 ("B"), eos_token_id 69 ("E"), add_bos_token = flags & 1, add_eos_token =
 * flags & 2 */
static tok_tokenizer *family_vocab_flags(const char *pre, int raw, int flags, sp_err *err) {
    wbuf b = {0};
    w32(&b, 0x46554747u), w32(&b, 3), w64(&b, 0), w64(&b, (raw ? 5 : 4) + (flags >= 0 ? 4 : 0));
    if (flags >= 0) {
        wkey(&b, "tokenizer.ggml.bos_token_id", 4), w32(&b, 66);
        wkey(&b, "tokenizer.ggml.eos_token_id", 4), w32(&b, 69);
        wkey(&b, "tokenizer.ggml.add_bos_token", 7), wput(&b, (uint8_t[]){(uint8_t)(flags & 1)}, 1);
        wkey(&b, "tokenizer.ggml.add_eos_token", 7), wput(&b, (uint8_t[]){(uint8_t)(flags >> 1 & 1)}, 1);
    }
    wkey(&b, "tokenizer.ggml.model", 8), wstr(&b, "gpt2");
    wkey(&b, "tokenizer.ggml.pre", 8), wstr(&b, pre);
    wkey(&b, "tokenizer.ggml.tokens", 9), w32(&b, 8), w64(&b, raw ? 257 : 256);
    for (int c = 0; c < 256; c++) {
        char u[8];
        if (raw) {
            snprintf(u, sizeof u, "<0x%02X>", c);
            wstrn(&b, u, 6);
            continue;
        }
        int pr = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        int cp = pr ? c : c <= 0x20 ? 0x100 + c : c == 0xAD ? 0x100 + 67 : 0x100 + 33 + (c - 0x7F);
        u[0] = (char)cp;
        if (cp >= 0x80) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        wstrn(&b, u, cp >= 0x80 ? 2 : 1);
    }
    if (raw) wstr(&b, "\xE2\x96\x81");
    wkey(&b, "tokenizer.ggml.merges", 9), w32(&b, 8), w64(&b, 0);
    if (raw) { /* token types: BYTE, and "▁" normal */
        wkey(&b, "tokenizer.ggml.token_type", 9), w32(&b, 5), w64(&b, 257);
        for (int c = 0; c < 257; c++) w32(&b, c < 256 ? 6 : 1);
    }
    sp_write_file_atomic(GGUF_PATH, b.p, b.n, err);
    free(b.p);
    return sp_tok_load_gguf(GGUF_PATH, err);
}

static tok_tokenizer *family_vocab(const char *pre, int raw, sp_err *err) {
    return family_vocab_flags(pre, raw, -1, err);
}

/* tokenizer.ggml.add_bos_token / add_eos_token decide, over the family's default */
static void test_gguf_bos_eos_keys(void) {
    static const struct {
        const char *pre;
        int flags; /* -1: keys absent */
        const char *want;
    } cases[] = {
        {"llama-bpe", 0, "x"}, {"llama-bpe", 1, "Bx"}, {"llama-bpe", 3, "BxE"}, {"qwen2", 2, "xE"},
        {"qwen2", 1, "Bx"},    {"glm4", 3, "xE"}, /* glm4: no BOS whatever the keys say */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sp_err err = {0};
        tok_tokenizer *t = family_vocab_flags(cases[k].pre, 0, cases[k].flags, &err);
        CHECK(t != NULL, "%s", err.msg);
        if (!t) continue;
        int32_t *ids = NULL;
        int n = 0;
        char got[16] = {0};
        CHECK(sp_tok_encode(t, "x", 1, 1, 0, &ids, &n, &err) == 0, "%s", err.msg);
        for (int i = 0; i < n && i < 15; i++) got[i] = (char)ids[i];
        CHECK(!strcmp(got, cases[k].want), "%s flags %d: '%s', want '%s'", cases[k].pre, cases[k].flags, got,
              cases[k].want);
        free(ids);
        sp_tok_free(t);
    }
    remove(GGUF_PATH);
}

/* the tokenizer's pieces of text (normalized first), joined with "|" */
static void pieces(tok_tokenizer *t, const char *text, char *out, size_t cap) {
    tok_buf norm = {0};
    tok_pieces w = {0};
    sp_err err = {0};
    out[0] = 0;
    if (sp_tok_normalize(t, text, strlen(text), &norm, &err) || sp_tok_pretokenize(t, norm.p, norm.n, 1, &w, &err)) {
        snprintf(out, cap, "error: %.200s", err.msg);
    } else {
        size_t o = 0;
        for (int i = 0; i < w.n && o + 2 < cap; i++) {
            size_t len = w.p[i].len < cap - o - 2 ? w.p[i].len : cap - o - 2;
            if (i) out[o++] = '|';
            memcpy(out + o, w.arena.p + w.p[i].off, len);
            o += len;
        }
        out[o] = 0;
    }
    sp_tok_buf_free(&norm);
    sp_tok_pieces_free(&w);
}

/* every name llama.cpp (de3ff81) accepts for tokenizer.ggml.pre */
static const char *const LLAMA_CPP_PRE[] = {
    "default", "minicpm5", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    "jina-v5-nano", "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "youtu", "falcon", "mpt",
    "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
    "modern-bert", "jais-2", "gemma4", "granite-embed-multi-311m", "sarvam-moe", "jina-v1-en", "jina-v2-code",
    "roberta-bpe", "whitespace", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "qwen35",
    "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking", "jais", "tekken",
    "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "exaone-moe", "chameleon", "minerva-7b",
    "megrez", "gpt-4o", "llama4", "kanana2", "talkie", "granite-embed-multi-97m", "tiny_aya", "cohere2moe",
    "superbpe", "trillion", "granite-docling", "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan",
    "hunyuan-dense", "hy_v4", "joyai-llm", "kimi-k2", "ufakzeka", "grok-2", "afmoe", "laguna", "minimax-m2",
    "solar-open", "mellum2"};

static void test_every_family(void) {
    const char *text = "Hello, World! 1234567 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E caf\xC3\xA9 it's\n\n  x\t<y>";
    size_t n_names = sizeof LLAMA_CPP_PRE / sizeof LLAMA_CPP_PRE[0];
    for (size_t k = 0; k < n_names; k++) {
        const char *name = LLAMA_CPP_PRE[k];
        const tok_pre_family *f = sp_tok_pre_family_find(name, strlen(name));
        CHECK(f != NULL, "'%s' is not in the family table", name);
        if (!f) continue;
        sp_err err = {0};
        tok_tokenizer *t = family_vocab(name, (f->flags & TOK_PRE_RAW_UTF8) != 0, &err);
        CHECK(t != NULL, "pre %s: %s", name, err.msg);
        if (!t) continue;
        int32_t *ids = NULL;
        int n = 0;
        char *dec = NULL;
        CHECK(sp_tok_encode(t, text, strlen(text), 0, 0, &ids, &n, &err) == 0, "pre %s: %s", name, err.msg);
        CHECK(sp_tok_decode(t, ids, n, &dec, &err) == 0 && dec && !strcmp(dec, text), "pre %s: round trip gave '%s'",
              name, dec ? dec : err.msg);
        CHECK(sp_tok_adds_bos(t) == 0 || (f->flags & TOK_PRE_ADD_BOS), "pre %s adds BOS", name);
        free(dec);
        free(ids);
        sp_tok_free(t);
    }
    /* every table row is reached by some name above */
    int rows = 0;
    for (const tok_pre_family *f; (f = sp_tok_pre_family_at(rows)); rows++) {
        int reached = 0;
        for (size_t k = 0; k < n_names && !reached; k++)
            reached = sp_tok_pre_family_find(LLAMA_CPP_PRE[k], strlen(LLAMA_CPP_PRE[k])) == f;
        CHECK(reached, "row '%s' has no llama.cpp name", f->names);
    }
    printf("  %zu llama.cpp pre-tokenizer names in %d families load and round-trip\n", n_names, rows);
    sp_err err = {0};
    tok_tokenizer *t = family_vocab("no-such-pre", 0, &err);
    CHECK(!t && strstr(err.msg, "'no-such-pre'") && strstr(err.msg, "tokenizer.ggml.pre"), "unknown pre: %s", err.msg);
    sp_tok_free(t);
    remove(GGUF_PATH);
}

/* the pieces of chosen families, worked out by hand from their regexes */
static void test_family_pieces(void) {
    static const struct {
        const char *pre, *text, *want;
    } cases[] = {
        {"gpt-2", "Hello world's  x", "Hello| world|'s| | x"},
        {"llama-bpe", "Hello 123456 worlds", "Hello| |123|456| worlds"},
        {"qwen2", "abc 12", "abc| |1|2"},
        {"deepseek-v3", "\xE4\xB8\xAD\xE6\x96\x87" "abc 12345!", "\xE4\xB8\xAD\xE6\x96\x87|abc| |123|45|!"},
        {"afmoe", "1234567", "1|234|567"},
        {"tiny_aya", "1234567 x", "1|234|567| x"},
        {"superbpe", "1234567", "1|234|567"},
        {"kimi-k2", "\xE4\xB8\xAD\xE6\x96\x87Hello world", "\xE4\xB8\xAD\xE6\x96\x87|Hello| world"},
        {"gpt-4o", "HelloWorld ABC", "Hello|World| ABC"},
        {"poro-chat", "Hello, world!", "Hello|,| world|!"},
        {"whitespace", "a  b", "a|  |b"},
        {"default", "a+b 1234", "a|+|b| |123|4"},
        {"deepseek-llm", "Hello \xE4\xB8\x96\xE7\x95\x8C\n12", "Hello| |\xE4\xB8\x96\xE7\x95\x8C|\n|12"},
        {"gemma4", "a b\n\nc", "a\xE2\x96\x81" "b|\n\n|c"},
        {"jais-2", "a     b", "a|    | b"},
        {"starcoder", "x 42", "x| |4|2"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const tok_pre_family *f = sp_tok_pre_family_find(cases[k].pre, strlen(cases[k].pre));
        sp_err err = {0};
        tok_tokenizer *t = f ? family_vocab(cases[k].pre, (f->flags & TOK_PRE_RAW_UTF8) != 0, &err) : NULL;
        CHECK(t != NULL, "%s: %s", cases[k].pre, err.msg);
        if (!t) continue;
        char got[512];
        pieces(t, cases[k].text, got, sizeof got);
        CHECK(!strcmp(got, cases[k].want), "%s: \"%s\" -> \"%s\", want \"%s\"", cases[k].pre, cases[k].text, got,
              cases[k].want);
        sp_tok_free(t);
    }
    remove(GGUF_PATH);
}

/* a tokenizer.json with the given normalizer and pre_tokenizer over a tiny byte-level vocab */
static tok_tokenizer *json_with(const char *norm, const char *pre) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"normalizer\":%s,\"pre_tokenizer\":%s,\"decoder\":null,\"model\":{\"type\":\"BPE\","
             "\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}}",
             norm, pre);
    sp_err err = {0};
    tok_tokenizer *t = sp_tok_load_json_mem(json, strlen(json), NULL, "test.json", &err);
    CHECK(t != NULL, "%s / %s: %s", norm, pre, err.msg);
    return t;
}

static void test_hf_pre_tokenizers(void) {
    static const struct {
        const char *pre, *text, *want;
    } cases[] = {
        {"{\"type\":\"Punctuation\"}", "Hi, you!!", "Hi|,| you|!|!"},
        {"{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"}", "Hi!!", "Hi|!!"},
        {"{\"type\":\"BertPreTokenizer\"}", "Hello, world!", "Hello|,|world|!"},
        {"{\"type\":\"Whitespace\"}", "Hello, world!  a,,b", "Hello|,|world|!|a|,,|b"},
        {"{\"type\":\"WhitespaceSplit\"}", "a  b\tc", "a|b|c"},
        {"{\"type\":\"Digits\",\"individual_digits\":true}", "a123", "a|1|2|3"},
        {"{\"type\":\"Digits\",\"individual_digits\":false}", "a123b", "a|123|b"},
        {"{\"type\":\"Digits\",\"individual_digits\":false}", "x\xD9\xA3\xC2\xBD" "7y", "x|\xD9\xA3\xC2\xBD" "7|y"},
        {"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"-\"},\"behavior\":\"MergedWithPrevious\"}", "a-b-c", "a-|b-|c"},
        {"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"-\"},\"behavior\":\"MergedWithNext\"}", "a-b-c", "a|-b|-c"},
        {"{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"Contiguous\"}", "a--b", "a|--|b"},
        {"{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"Removed\"}", "a-b-c", "a|b|c"},
        {"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":\"Removed\",\"invert\":true}", "ab, c",
         "ab|c"},
        {"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?=b)\"},\"behavior\":\"Isolated\"}", "abab", "a|ba|b"},
        {"{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\",\"split\":true}",
         "Hey friend", "\xE2\x96\x81Hey|\xE2\x96\x81" "friend"},
        {"{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"never\",\"split\":false}",
         "Hey friend", "Hey\xE2\x96\x81" "friend"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", "Hello world", " Hello| world"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", "Hello world", "Hello| world"},
        {"{\"type\":\"CharDelimiterSplit\",\"delimiter\":\"x\"}", "axbxc", "a|b|c"},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Digits\","
         "\"individual_digits\":true}]}",
         "ab 12", "ab|1|2"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tok_tokenizer *t = json_with("null", cases[k].pre);
        if (!t) continue;
        char got[512];
        pieces(t, cases[k].text, got, sizeof got);
        CHECK(!strcmp(got, cases[k].want), "%s: \"%s\" -> \"%s\", want \"%s\"", cases[k].pre, cases[k].text, got,
              cases[k].want);
        sp_tok_free(t);
    }
    sp_err err = {0};
    const char *bad = "{\"pre_tokenizer\":{\"type\":\"UnicodeScripts\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
                      "\"merges\":[]}}";
    tok_tokenizer *t = sp_tok_load_json_mem(bad, strlen(bad), NULL, "bad.json", &err);
    CHECK(!t && strstr(err.msg, "UnicodeScripts"), "unsupported type named: %s", err.msg);
    sp_tok_free(t);
}

static void test_hf_normalizers(void) {
    static const struct {
        const char *norm, *text, *want;
    } cases[] = {
        {"null", "cafe\xCC\x81", "cafe\xCC\x81"},
        {"{\"type\":\"NFC\"}", "cafe\xCC\x81", "caf\xC3\xA9"},
        {"{\"type\":\"NFD\"}", "caf\xC3\xA9", "cafe\xCC\x81"},
        {"{\"type\":\"NFKC\"}", "\xEF\xAC\x81x", "fix"},
        {"{\"type\":\"NFKD\"}", "\xE2\x91\xA0\xC3\xA9", "1e\xCC\x81"},
        {"{\"type\":\"Lowercase\"}", "H\xC3\x89LLO \xC4\xB0", "h\xC3\xA9llo i\xCC\x87"},
        {"{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", " \t a b \xE3\x80\x80", "a b"},
        {"{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":false}", "  a  ", "a  "},
        {"{\"type\":\"StripAccents\"}", "cafe\xCC\x81 caf\xC3\xA9", "cafe caf\xC3\xA9"},
        {"{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\" \"}", "a   b  c", "a b c"},
        {"{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}", "a b", "a\xE2\x96\x81" "b"},
        {"{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"}", "ab", "\xE2\x96\x81" "ab"},
        {"{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},{\"type\":"
         "\"Lowercase\"}]}",
         "\xC3\x89lan", "elan"},
        {"{\"type\":\"BertNormalizer\"}", "H\xC3\xA9llo\t\xE4\xB8\x96\xE7\x95\x8C\x01", "hello  \xE4\xB8\x96  \xE7\x95\x8C "},
        {"{\"type\":\"BertNormalizer\",\"lowercase\":false,\"strip_accents\":null,\"handle_chinese_chars\":false}",
         "H\xC3\xA9llo\t\xE4\xB8\x96", "H\xC3\xA9llo \xE4\xB8\x96"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tok_tokenizer *t = json_with(cases[k].norm, "null");
        if (!t) continue;
        tok_buf out = {0};
        sp_err err = {0};
        CHECK(sp_tok_normalize(t, cases[k].text, strlen(cases[k].text), &out, &err) == 0, "%s", err.msg);
        CHECK(out.p && !strcmp(out.p, cases[k].want), "%s: \"%s\" -> \"%s\", want \"%s\"", cases[k].norm,
              cases[k].text, out.p ? out.p : "", cases[k].want);
        sp_tok_buf_free(&out);
        sp_tok_free(t);
    }
}

static int same_ids(tok_tokenizer *t, const char *a, const char *b) {
    int32_t *x = NULL, *y = NULL;
    int nx = 0, ny = 0;
    sp_err err = {0};
    int ok = sp_tok_encode(t, a, strlen(a), 0, 0, &x, &nx, &err) == 0 && sp_tok_encode(t, b, strlen(b), 0, 0, &y, &ny, &err) == 0;
    int same = ok && nx == ny && !memcmp(x, y, (size_t)nx * sizeof *x);
    free(x);
    free(y);
    return same;
}

/* a decomposed "é" (e + U+0301) is composed only where the tokenizer declares NFC */
static void test_declared_normalizer(void) {
    static const struct {
        const char *where;
        int composes;
    } cases[] = {{CACHE "llama3_1", 0}, {CACHE "gemma3", 0}, {CACHE "qwen3", 1},
                 {"tests/data/peer-vectors/ggml-vocab-qwen2.gguf", 0}};
    const char *dec = "caf" "e\xCC\x81", *comp = "caf\xC3\xA9";
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sp_err err = {0};
        tok_tokenizer *t = strstr(cases[k].where, ".gguf") ? sp_tok_load_gguf(cases[k].where, &err)
                                                           : sp_tok_load_dir(cases[k].where, &err);
        CHECK(t != NULL, "%s: %s", cases[k].where, err.msg);
        if (!t) continue;
        CHECK(same_ids(t, dec, comp) == cases[k].composes, "%s: decomposed and composed %s", cases[k].where,
              cases[k].composes ? "differ" : "encode the same");
        int32_t *ids = NULL;
        int n = 0;
        char *back = NULL;
        CHECK(sp_tok_encode(t, dec, strlen(dec), 0, 0, &ids, &n, &err) == 0 && sp_tok_decode(t, ids, n, &back, &err) == 0,
              "%s", err.msg);
        CHECK(back && !strcmp(back, cases[k].composes ? comp : dec), "%s: decodes to '%s'", cases[k].where,
              back ? back : "");
        free(ids);
        free(back);
        sp_tok_free(t);
    }
}

/* parse_special off: no control token comes out of text, for every vocabulary; user-defined
 * tokens still match */
static void test_parse_special_off(void) {
    static const char *where[] = {CACHE "llama3", CACHE "llama3_1", CACHE "qwen3", CACHE "gemma3", CACHE "llama2",
                                  CACHE "deepseek_v3", "tests/data/peer-vectors/ggml-vocab-qwen2.gguf",
                                  "tests/data/peer-vectors/ggml-vocab-llama-spm.gguf",
                                  "tests/data/peer-vectors/ggml-vocab-gpt-2.gguf"};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        sp_err err = {0};
        tok_tokenizer *t = strstr(where[k], ".gguf") ? sp_tok_load_gguf(where[k], &err) : sp_tok_load_dir(where[k], &err);
        CHECK(t != NULL, "%s: %s", where[k], err.msg);
        if (!t) continue;
        int controls = 0, leaked = 0, users = 0, unmatched = 0;
        for (int32_t id = 0; id < sp_tok_vocab_size(t); id++) {
            size_t n;
            const char *s = sp_tok_token_text(t, id, &n);
            int control = sp_tok_is_special(t, id), user = s && (t->attr[id] & TOK_ATTR_USER);
            if (!s || n < 2 || (!control && !user)) continue;
            int32_t *ids = NULL, *with = NULL;
            int m = 0, mw = 0;
            CHECK(sp_tok_encode(t, s, n, 0, 0, &ids, &m, &err) == 0, "%s", err.msg);
            CHECK(sp_tok_encode(t, s, n, 0, 1, &with, &mw, &err) == 0, "%s", err.msg);
            if (control) {
                controls++;
                int any = 0;
                for (int j = 0; j < m; j++) any |= sp_tok_is_special(t, ids[j]);
                leaked += any;
                CHECK(mw == 1 && with[0] == id, "%s: '%.*s' with parse_special is not id %d", where[k], (int)n, s, id);
            } else {
                users++;
                unmatched += !(m == 1 && ids[0] == id);
            }
            free(ids);
            free(with);
        }
        CHECK(controls > 0 && leaked == 0, "%s: %d of %d control texts gave control ids", where[k], leaked, controls);
        CHECK(unmatched == 0, "%s: %d of %d user-defined tokens not matched", where[k], unmatched, users);
        sp_tok_free(t);
    }
    /* a merge that would build a control token out of text does not apply */
    const char *j = "{\"added_tokens\":[{\"id\":4,\"content\":\"<s>\",\"special\":true}],\"pre_tokenizer\":null,"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"<\":0,\"s\":1,\">\":2,\"<s\":3,\"<s>\":4},"
                    "\"merges\":[\"< s\",\"<s >\"]}}";
    sp_err err = {0};
    tok_tokenizer *t = sp_tok_load_json_mem(j, strlen(j), NULL, "merge.json", &err);
    CHECK(t != NULL, "%s", err.msg);
    int32_t *ids = NULL;
    int n = 0;
    CHECK(t && sp_tok_encode(t, "<s>", 3, 0, 0, &ids, &n, &err) == 0 && n == 2 && ids[0] == 3 && ids[1] == 2,
          "'<s>' without parse_special: %d ids", n);
    free(ids);
    CHECK(t && sp_tok_encode(t, "<s>", 3, 0, 1, &ids, &n, &err) == 0 && n == 1 && ids[0] == 4, "with parse_special");
    free(ids);
    sp_tok_free(t);
}

int main(void) {
    RUN(test_every_family);
    RUN(test_family_pieces);
    RUN(test_gguf_bos_eos_keys);
    RUN(test_hf_pre_tokenizers);
    RUN(test_hf_normalizers);
    RUN(test_declared_normalizer);
    RUN(test_parse_special_off);
    return harness_done("test_tokenizer_pre");
}
