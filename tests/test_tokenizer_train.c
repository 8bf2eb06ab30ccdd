/* test_tokenizer_train.c — sp_tok_train_bpe: the written tokenizer.json loads back through the
 * loader, has the promised layout (specials 0..4, <0x00>.. at 5..260), round-trips the hard
 * corpus (uncovered characters through byte fallback), compresses its training text, and
 * training is deterministic (same bytes twice). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "tok_corpus.h"
#include "tokenizer/tokenizer.h"

/* a deterministic pseudo-English training text (fixed seed) */
static char *make_text(size_t n) {
    static const char *words[] = {"the", "model", "drafts", "tokens", "and", "verifies", "them", "in",
                                  "one", "pass", "speculative", "decoding", "is", "lossless", "when",
                                  "accepted", "prefix", "matches", "target", "\n", "of", "a", "to"};
    char *s = malloc(n + 32);
    size_t k = 0;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    while (k < n) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if ((x >> 40) % 3) { /* a dictionary word, or a made-up one of 1-4 syllables */
            const char *w = words[x % (sizeof words / sizeof words[0])];
            k += (size_t)sprintf(s + k, "%s%s", w, (x >> 20) % 7 == 0 ? ". " : " ");
        } else {
            for (uint64_t j = 0, y = x; j <= (x >> 50) % 4; j++, y /= 35)
                k += (size_t)sprintf(s + k, "%c%c", "bcdfghklmnprstvz"[y % 16], "aeiou"[(y >> 4) % 5]);
            s[k++] = ' ';
        }
    }
    s[k] = 0;
    return s;
}

static void test_train_and_load(void) {
    char *text = make_text(200000);
    const char *texts[2] = {text, "Ünïcödé ÄÖÜ äöü ß — “quotes” 12345 67890"};
    size_t lens[2] = {strlen(text), strlen(texts[1])};
    tok_train_opts o = {.vocab_size = 600, .char_coverage = 0.9995};
    sp_err err = {0};
    const char *p1 = "build/test-train-1.json", *p2 = "build/test-train-2.json";
    CHECK(sp_tok_train_bpe(texts, lens, 2, &o, p1, &err) == 0, "%s", err.msg);
    CHECK(sp_tok_train_bpe(texts, lens, 2, &o, p2, &err) == 0, "%s", err.msg);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    sp_read_file(p1, &a, &na, &err);
    sp_read_file(p2, &b, &nb, &err);
    CHECK(a && b && na == nb && !memcmp(a, b, na), "training is not deterministic");
    free(a);
    free(b);
    tok_tokenizer *t = sp_tok_load_json(p1, &err);
    CHECK(t != NULL, "trained tokenizer does not load: %s", err.msg);
    if (!t) {
        free(text);
        return;
    }
    CHECK(sp_tok_vocab_size(t) == 600, "vocab size %d", sp_tok_vocab_size(t));
    size_t l;
    const char *s = sp_tok_token_text(t, 2, &l);
    CHECK(s && l == 5 && !memcmp(s, "<bos>", 5) && sp_tok_bos(t) == 2 && sp_tok_adds_bos(t), "bos");
    s = sp_tok_token_text(t, 5 + 0x0A, &l);
    CHECK(s && l == 6 && !memcmp(s, "<0x0A>", 6), "byte token layout");
    CHECK(sp_tok_eos(t) == 1 && sp_tok_is_eog(t, 1), "eos");
    /* round trip, including characters never seen (byte fallback) */
    for (int i = 0; i < TOK_CORPUS_N; i++) {
        size_t n = tok_corpus[i].n ? tok_corpus[i].n : strlen(tok_corpus[i].s);
        int32_t *ids;
        int m;
        char *dec = NULL;
        CHECK(sp_tok_encode(t, tok_corpus[i].s, n, 0, 0, &ids, &m, &err) == 0, "%s", err.msg);
        CHECK(sp_tok_decode(t, ids, m, &dec, &err) == 0, "%s", err.msg);
        CHECK(dec && !memcmp(dec, tok_corpus[i].s, n), "round trip of corpus[%d] gave \"%.60s\"", i, dec ? dec : "");
        for (int j = 0; j < m; j++) CHECK(ids[j] != 3, "corpus[%d]: <unk> despite byte fallback", i);
        free(dec);
        free(ids);
    }
    /* it compresses what it was trained on */
    int32_t *ids;
    int m;
    CHECK(sp_tok_encode(t, text, lens[0], 1, 0, &ids, &m, &err) == 0, "%s", err.msg);
    CHECK(ids[0] == 2, "BOS first");
    double ratio = (double)lens[0] / m;
    printf("  trained 600 ids: %.2f bytes/token on the training text\n", ratio);
    CHECK(ratio > 3.0, "only %.2f bytes per token", ratio);
    free(ids);
    sp_tok_free(t);
    remove(p1);
    remove(p2);
    free(text);
}

static void test_train_errors(void) {
    const char *texts[1] = {"abc"};
    size_t lens[1] = {3};
    tok_train_opts o = {.vocab_size = 100};
    sp_err err = {0};
    CHECK(sp_tok_train_bpe(texts, lens, 1, &o, "build/never.json", &err) == -1 && strstr(err.msg, "vocab size"),
          "tiny vocab accepted: %s", err.msg);
    o.vocab_size = 300;
    CHECK(sp_tok_train_bpe(texts, lens, 1, &o, "/nonexistent-dir/x.json", &err) == -1, "unwritable path accepted");
}

int main(void) {
    RUN(test_train_and_load);
    RUN(test_train_errors);
    return harness_done("test_tokenizer_train");
}
