/* encode.c — text -> ids (docs/TOKENIZER.md §2): added-token split on the raw text, then for each
 * gap: UTF-8 repair (byte-level models), normalizers, pre-tokenizers, BPE per word; the
 * post-processor's BOS/EOS around the whole. */
#include <stdlib.h>

#include "tok_internal.h"

/* Per-call cache of encoded words (HF keeps one too): short words repeat a lot. */
#define CACHE_SLOTS 16384
#define CACHE_MAX_WORD 128
typedef struct {
    uint64_t hash; /* 0 = empty */
    uint32_t key_off, key_len, ids_off, n_ids;
} cache_entry;

typedef struct {
    tok_buf clean, norm;
    cache_entry *cache;
    int cache_used;
    tok_buf cache_keys;
    int32_t *cache_ids;
    int cache_nids, cache_cap;
    tok_pieces words;
    tok_bpe_scratch *bpe;
    int32_t *ids;
    int n, cap;
} enc_ctx;

static int push_id(enc_ctx *c, int32_t id) {
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 256;
        int32_t *p = realloc(c->ids, (size_t)cap * sizeof *p);
        if (!p) return -1;
        c->ids = p;
        c->cap = cap;
    }
    c->ids[c->n++] = id;
    return 0;
}

static int utf8_all_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        int k = sp_tok_utf8_valid_len((const uint8_t *)s + i, n - i);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* encode one word through the cache */
static int encode_cached(const tok_tokenizer *t, enc_ctx *c, const char *w, size_t n, sp_err *err) {
    if (n > CACHE_MAX_WORD) return sp_tok_bpe_word(t, c->bpe, w, n, &c->ids, &c->n, &c->cap, err);
    if (!c->cache && !(c->cache = calloc(CACHE_SLOTS, sizeof *c->cache))) return sp_err_set(err, "out of memory");
    uint64_t h = tok_hash(w, n) | 1, i;
    for (i = h & (CACHE_SLOTS - 1); c->cache[i].hash; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const cache_entry *e = &c->cache[i];
        if (e->hash == h && e->key_len == n && !memcmp(c->cache_keys.p + e->key_off, w, n)) {
            for (uint32_t k = 0; k < e->n_ids; k++)
                if (push_id(c, c->cache_ids[e->ids_off + k])) return sp_err_set(err, "out of memory");
            return 0;
        }
    }
    int before = c->n;
    if (sp_tok_bpe_word(t, c->bpe, w, n, &c->ids, &c->n, &c->cap, err)) return -1;
    if (c->cache_used >= CACHE_SLOTS / 2) { /* full: start over */
        memset(c->cache, 0, CACHE_SLOTS * sizeof *c->cache);
        c->cache_used = 0;
        c->cache_keys.n = 0;
        c->cache_nids = 0;
        for (i = h & (CACHE_SLOTS - 1); c->cache[i].hash; i = (i + 1) & (CACHE_SLOTS - 1)) {}
    }
    int k = c->n - before;
    if (c->cache_nids + k > c->cache_cap) {
        int cap = (c->cache_nids + k) * 2 + 1024;
        int32_t *p = realloc(c->cache_ids, (size_t)cap * sizeof *p);
        if (!p) return 0; /* no caching; the result stands */
        c->cache_ids = p;
        c->cache_cap = cap;
    }
    cache_entry e = {h, (uint32_t)c->cache_keys.n, (uint32_t)n, (uint32_t)c->cache_nids, (uint32_t)k};
    if (sp_tok_buf_put(&c->cache_keys, w, n)) return 0;
    if (k > 0) /* a word may encode to no id; cache_ids is still NULL then */
        memcpy(c->cache_ids + c->cache_nids, c->ids + before, (size_t)k * sizeof *c->ids);
    c->cache_nids += k;
    c->cache[i] = e;
    c->cache_used++;
    return 0;
}

/* one pre-tokenized word; SentencePiece-style words are cut before each safe "▁" */
static int encode_word(const tok_tokenizer *t, enc_ctx *c, const char *w, size_t n, sp_err *err) {
    if (!t->cut_ok) return encode_cached(t, c, w, n, err);
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++) {
        if ((uint8_t)w[i] != 0xE2 || (uint8_t)w[i + 1] != 0x96 || (uint8_t)w[i + 2] != 0x81) continue;
        size_t j = i - 1;
        while (j > start && ((uint8_t)w[j] & 0xC0) == 0x80) j--;
        size_t cl = i - j;
        if (cl == 3 && (uint8_t)w[j] == 0xE2 && (uint8_t)w[j + 1] == 0x96 && (uint8_t)w[j + 2] == 0x81)
            continue; /* inside a run of marks */
        int ok = sp_tok_utf8_valid_len((const uint8_t *)w + j, cl) == (int)cl &&
                 sp_tok_vocab_find(t, w + j, cl) >= 0; /* a byte-fallback char never precedes a cut */
        for (int k = 0; k < t->n_cut_bad && ok; k++)
            ok = !(t->cut_bad_len[k] == cl && !memcmp(t->cut_bad[k], w + j, cl));
        if (!ok) continue;
        if (encode_cached(t, c, w + start, i - start, err)) return -1;
        start = i;
    }
    return encode_cached(t, c, w + start, n - start, err);
}

static int is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int is_word_byte(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c >= 0x80;
}

/* the added token that matches at s[i] (longest first), or -1 */
static int match_added(const tok_tokenizer *t, const char *s, size_t n, size_t i,
                       int parse_special, int normalized) {
    uint8_t b = (uint8_t)s[i];
    for (int k = 0; k < t->n_first_lens[b]; k++) {
        size_t L = t->first_lens[b][k];
        if (i + L > n) continue;
        for (uint64_t h = tok_hash(s + i, L) & t->added_map_mask;; h = (h + 1) & t->added_map_mask) {
            int32_t a = t->added_map[h];
            if (a < 0) break;
            const tok_added *ad = &t->added[a];
            if (ad->len != L || memcmp(ad->text, s + i, L)) continue;
            if ((ad->special && !parse_special) || ad->normalized != normalized) break;
            if (ad->single_word && ((i > 0 && is_word_byte((uint8_t)s[i - 1])) ||
                                    (i + L < n && is_word_byte((uint8_t)s[i + L]))))
                break;
            return a;
        }
    }
    return -1;
}

/* pre-tokenize and encode one normalized piece */
static int encode_piece(const tok_tokenizer *t, enc_ctx *c, const char *s, size_t n, int first, sp_err *err) {
    if (!n) return 0;
    if (sp_tok_pretokenize(t, s, n, first, &c->words, err)) return -1;
    for (int i = 0; i < c->words.n; i++) {
        const tok_piece *p = &c->words.p[i];
        if (encode_word(t, c, c->words.arena.p + p->off, p->len, err)) return -1;
    }
    return 0;
}

/* one stretch of text between added tokens: repair, normalize, then split on the added tokens
 * that match normalized text ("normalized": true), then the pre-tokenizer and the model */
static int encode_gap(const tok_tokenizer *t, enc_ctx *c, const char *s, size_t n, int first,
                      int parse_special, sp_err *err) {
    if (!n) return 0;
    if (t->sanitize_utf8 && !utf8_all_valid(s, n)) {
        c->clean.n = 0;
        if (sp_tok_utf8_lossy(&c->clean, s, n, 1)) return sp_err_set(err, "out of memory");
        s = c->clean.p;
        n = c->clean.n;
    }
    if (sp_tok_normalize(t, s, n, &c->norm, err)) return -1;
    const char *ns = c->norm.p;
    size_t nn = c->norm.n, gap = 0;
    for (size_t i = 0; t->n_norm_added && i < nn; i++) {
        int a = t->n_first_lens[(uint8_t)ns[i]] ? match_added(t, ns, nn, i, parse_special, 1) : -1;
        if (a < 0) continue;
        const tok_added *ad = &t->added[a];
        size_t ms = i, me = i + ad->len;
        if (ad->lstrip)
            while (ms > gap && is_ascii_space(ns[ms - 1])) ms--;
        if (ad->rstrip)
            while (me < nn && is_ascii_space(ns[me])) me++;
        if (encode_piece(t, c, ns + gap, ms - gap, first && gap == 0, err)) return -1;
        if (push_id(c, ad->id)) return sp_err_set(err, "out of memory");
        gap = me;
        i = me - 1;
    }
    return encode_piece(t, c, ns + gap, nn - gap, first && gap == 0, err);
}

int sp_tok_encode(tok_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, int *n, sp_err *err) {
    *ids = NULL;
    *n = 0;
    if (!text && len) return sp_err_set(err, "sp_tok_encode: NULL text");
    if (len > (size_t)INT32_MAX / 2) return sp_err_set(err, "%s: text too long (%zu bytes)", t->source, len);
    enc_ctx c = {0};
    c.bpe = sp_tok_bpe_scratch_new();
    int rc = c.bpe ? 0 : sp_err_set(err, "out of memory");
    for (int i = 0; add_bos && i < t->n_post_pre && !rc; i++) rc = push_id(&c, t->post_pre[i]);
    size_t gap = 0, i = 0;
    while (!rc && i < len && t->n_added) {
        int a = t->n_first_lens[(uint8_t)text[i]] ? match_added(t, text, len, i, parse_special, 0) : -1;
        if (a < 0) {
            i++;
            continue;
        }
        const tok_added *ad = &t->added[a];
        size_t ms = i, me = i + ad->len;
        if (ad->lstrip)
            while (ms > gap && is_ascii_space(text[ms - 1])) ms--;
        if (ad->rstrip)
            while (me < len && is_ascii_space(text[me])) me++;
        rc = encode_gap(t, &c, text + gap, ms - gap, gap == 0, parse_special, err);
        if (!rc && push_id(&c, ad->id)) rc = sp_err_set(err, "out of memory");
        i = gap = me;
    }
    if (!rc) rc = encode_gap(t, &c, text + gap, len - gap, gap == 0, parse_special, err);
    for (int k = 0; add_bos && k < t->n_post_post && !rc; k++) rc = push_id(&c, t->post_post[k]);
    if (!rc && !c.ids && push_id(&c, 0) == 0) c.n = 0; /* non-NULL even when empty */
    if (rc && c.ids && rc != -1) rc = -1;
    sp_tok_buf_free(&c.clean);
    sp_tok_buf_free(&c.norm);
    sp_tok_pieces_free(&c.words);
    sp_tok_bpe_scratch_free(c.bpe);
    free(c.cache);
    free(c.cache_ids);
    sp_tok_buf_free(&c.cache_keys);
    if (rc) {
        free(c.ids);
        if (!err || !err->msg[0]) sp_err_set(err, "%s: out of memory while encoding", t->source);
        return -1;
    }
    *ids = c.ids;
    *n = c.n;
    return 0;
}

/* The longest token's text in bytes: a token never covers more input than that (its stored text
 * is at least as long as the bytes it stands for: byte-level BPE spells a byte in one or two
 * bytes, SentencePiece a space as three), so a text of len bytes is at least len / longest
 * tokens, short of normalizers that delete text. */
static size_t longest_token(const tok_tokenizer *t) {
    size_t m = 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t k = 0;
        if (sp_tok_token_text(t, id, &k) && k > m) m = k;
    }
    return m;
}

int sp_tok_encode_max(tok_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int max_tokens,
                      int32_t **ids, int *n, sp_err *err) {
    *ids = NULL;
    *n = 0;
    size_t longest = longest_token(t);
    if (max_tokens > 0 && len / longest > (size_t)max_tokens)
        return sp_err_set(err, "the text is %zu bytes, at least %zu tokens (the longest token is %zu bytes): more "
                               "than the %d that fit", len, len / longest, longest, max_tokens);
    if (sp_tok_encode(t, text, len, add_bos, parse_special, ids, n, err)) return -1;
    if (max_tokens > 0 && *n > max_tokens) {
        sp_err_set(err, "the text is %d tokens: more than the %d that fit", *n, max_tokens);
        free(*ids);
        *ids = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}
