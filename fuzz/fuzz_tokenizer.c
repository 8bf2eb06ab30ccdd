/* fuzz_tokenizer.c — a tokenizer.json through sp_tok_load_json_mem; an accepted tokenizer encodes
 * and decodes a few fixed strings (plain, special-token, byte-fallback and Unicode text), and
 * its streaming decoder replays the ids. Every id encode returns must be a token of the vocab. */
#include "fuzz.h"
#include "tokenizer/tokenizer.h"

static const char *texts[] = {
    "Hello, world! 123 4567",
    "<|im_start|>user\nhi<|im_end|>\n<bos><start_of_turn>",
    "  leading  and\ttrailing \r\n\n  ",
    "\xc3\xbc" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xe2\x80\x8b",
    "\xff\xfe invalid \xc3 utf-8 \xed\xa0\x80 end",
};

/* Skip inputs naming a token id of 1,000,000 or more: the vocabulary is sized by its highest id
 * (the tokenizer's own bound on ids is separate work), and such an input only measures the
 * allocator. Returns 1 when a run of 7 or more digits occurs. */
static int has_huge_number(const uint8_t *d, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        run = (d[i] >= '0' && d[i] <= '9') ? run + 1 : 0;
        if (run >= 7) return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    if (has_huge_number(data, size)) return 0;
    sp_err err;
    tok_tokenizer *t = sp_tok_load_json_mem((const char *)data, size, NULL, "tokenizer.json", &err);
    if (!t) return 0;
    int V = sp_tok_vocab_size(t);
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            int n = 0;
            if (sp_tok_encode(t, texts[k], strlen(texts[k]), special, special, &ids, &n, &err) == 0) {
                for (int i = 0; i < n; i++)
                    if (ids[i] < 0 || ids[i] >= V) abort();
                char *text = NULL;
                if (sp_tok_decode(t, ids, n, &text, &err) == 0) free(text);
                tok_stream *s = sp_tok_stream_new(t);
                char buf[64];
                for (int i = 0; s && i < n; i++) sp_tok_stream_push(s, ids[i], buf, sizeof buf);
                while (s && sp_tok_stream_flush(s, buf, sizeof buf) > 0) {}
                sp_tok_stream_free(s);
            }
            free(ids);
        }
    }
    for (int id = 0; id < V && id < 512; id++) {
        size_t len = 0;
        const char *p = sp_tok_token_text(t, id, &len);
        if (p) fuzz_touch(p, len);
    }
    sp_tok_free(t);
    return 0;
}
