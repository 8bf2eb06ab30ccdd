/* train.c — train a SentencePiece-style BPE tokenizer with byte fallback (Gemma's family,
 * docs/TOKENIZER.md §4) and write it as a tokenizer.json that sp_tok_load_json reads back.
 *
 * Layout of the ids: <pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4, the 256 byte tokens
 * <0x00>..<0xFF>, then the characters that cover char_coverage of the corpus (most frequent
 * first), then one token per merge in merge order. Pipeline written: normalizer Replace
 * " " -> "▁", pre_tokenizer Split " " MergedWithPrevious, BPE (byte_fallback, fuse_unk,
 * unk "<unk>"), decoder Replace "▁" -> " " + ByteFallback + Fuse, post-processor <bos> $A.
 *
 * Training words are the text cut before every "▁" that follows another character and around
 * newline runs, so no merge spans such a boundary (which is also what lets the encoder cut
 * there). Merges: the most frequent adjacent pair (ties: smallest ids) with a lazy max-heap
 * and per-pair word lists, so each merge only touches the words that contain it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "tok_internal.h"

#define N_SPECIAL 5
static const char *specials[N_SPECIAL] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>"};
static const char MARK[] = "\xE2\x96\x81";

/* ---- word counting ---------------------------------------------------------------------- */
typedef struct {
    uint64_t hash;
    uint32_t off, len; /* into words.text */
    int64_t count;
} word_slot;

typedef struct {
    tok_buf text;
    word_slot *slots;
    uint64_t mask, used;
} word_table;

static int wt_add(word_table *w, const char *s, size_t n) {
    if (!n) return 0;
    if ((w->used + 1) * 2 > w->mask + 1) { /* grow */
        uint64_t cap = (w->mask + 1) * 2;
        word_slot *ns = calloc(cap, sizeof *ns);
        if (!ns) return -1;
        for (uint64_t i = 0; i <= w->mask; i++) {
            if (!w->slots[i].hash) continue;
            uint64_t h = w->slots[i].hash & (cap - 1);
            while (ns[h].hash) h = (h + 1) & (cap - 1);
            ns[h] = w->slots[i];
        }
        free(w->slots);
        w->slots = ns;
        w->mask = cap - 1;
    }
    uint64_t hv = tok_hash(s, n) | 1, h = hv & w->mask;
    for (; w->slots[h].hash; h = (h + 1) & w->mask) {
        word_slot *e = &w->slots[h];
        if (e->hash == hv && e->len == n && !memcmp(w->text.p + e->off, s, n)) {
            e->count++;
            return 0;
        }
    }
    w->slots[h] = (word_slot){hv, (uint32_t)w->text.n, (uint32_t)n, 1};
    w->used++;
    return sp_tok_buf_put(&w->text, s, n);
}

/* normalize (" " -> "▁") and cut into words; max_len bounds a word in bytes */
static int count_words(word_table *w, const char *s, size_t n) {
    tok_buf norm = {0};
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ' ? sp_tok_buf_put(&norm, MARK, 3) : sp_tok_buf_put(&norm, s + i, 1)) return -1;
    const char *p = norm.p ? norm.p : "";
    size_t m = norm.n, start = 0;
    for (size_t i = 0; i < m;) {
        int is_mark = i + 3 <= m && !memcmp(p + i, MARK, 3);
        int nl = p[i] == '\n', prev_nl = i > 0 && p[i - 1] == '\n';
        int prev_mark = i >= 3 && !memcmp(p + i - 3, MARK, 3);
        int cut = i > start && ((is_mark && !prev_mark) || nl != prev_nl || i - start >= 64);
        if (cut && !is_mark && !nl && !prev_nl) /* length cut: only at a character start */
            cut = ((uint8_t)p[i] & 0xC0) != 0x80;
        if (cut) {
            if (wt_add(w, p + start, i - start)) return -1;
            start = i;
        }
        i += is_mark ? 3 : 1;
    }
    int rc = wt_add(w, p + start, m - start);
    sp_tok_buf_free(&norm);
    return rc;
}

/* ---- pair statistics ---------------------------------------------------------------------- */
typedef struct {
    uint64_t key; /* a << 32 | b; UINT64_MAX empty */
    int64_t count;
    int32_t *words; /* word indices (may repeat / go stale) */
    int n_words, cap_words;
} pair_slot;

typedef struct {
    pair_slot *s;
    uint64_t mask, used;
} pair_table;

static pair_slot *pt_get(pair_table *t, uint64_t key, int create) {
    if (create && (t->used + 1) * 2 > t->mask + 1) {
        uint64_t cap = (t->mask + 1) * 2;
        pair_slot *ns = malloc(cap * sizeof *ns);
        if (!ns) return NULL;
        for (uint64_t i = 0; i < cap; i++) ns[i].key = UINT64_MAX;
        for (uint64_t i = 0; i <= t->mask; i++) {
            if (t->s[i].key == UINT64_MAX) continue;
            uint64_t h = tok_hash_u64(t->s[i].key) & (cap - 1);
            while (ns[h].key != UINT64_MAX) h = (h + 1) & (cap - 1);
            ns[h] = t->s[i];
        }
        free(t->s);
        t->s = ns;
        t->mask = cap - 1;
    }
    for (uint64_t h = tok_hash_u64(key) & t->mask;; h = (h + 1) & t->mask) {
        if (t->s[h].key == key) return &t->s[h];
        if (t->s[h].key == UINT64_MAX) {
            if (!create) return NULL;
            t->s[h] = (pair_slot){key, 0, NULL, 0, 0};
            t->used++;
            return &t->s[h];
        }
    }
}

typedef struct {
    int64_t count;
    uint64_t key;
} heap_e;

typedef struct {
    heap_e *v;
    size_t n, cap;
} maxheap;

static int better(heap_e a, heap_e b) { return a.count > b.count || (a.count == b.count && a.key < b.key); }

static int heap_push(maxheap *h, heap_e e) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 4096;
        heap_e *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && better(e, h->v[(i - 1) / 2])) h->v[i] = h->v[(i - 1) / 2], i = (i - 1) / 2;
    h->v[i] = e;
    return 0;
}

static heap_e heap_pop(maxheap *h) {
    heap_e top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        heap_e best = last;
        if (l < h->n && better(h->v[l], best)) m = l, best = h->v[l];
        if (r < h->n && better(h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* add delta to pair (a, b) seen in word wi */
static int pair_add(pair_table *pt, maxheap *hp, int32_t a, int32_t b, int64_t delta, int32_t wi) {
    if (a < 0 || b < 0) return 0; /* uncovered characters never merge */
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    pair_slot *p = pt_get(pt, key, 1);
    if (!p) return -1;
    p->count += delta;
    if (delta > 0) {
        if (p->n_words == p->cap_words) {
            int cap = p->cap_words ? p->cap_words * 2 : 4;
            int32_t *w = realloc(p->words, (size_t)cap * sizeof *w);
            if (!w) return -1;
            p->words = w;
            p->cap_words = cap;
        }
        p->words[p->n_words++] = wi;
        if (heap_push(hp, (heap_e){p->count, key})) return -1;
    }
    return 0;
}

/* ---- vocabulary being built ---------------------------------------------------------------- */
typedef struct {
    tok_buf text;
    uint32_t *off, *len, *chars;
    int n, cap;
} vocab_b;

static int vb_add(vocab_b *v, const char *s, size_t n, uint32_t chars) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 1024;
        uint32_t *o = realloc(v->off, (size_t)cap * 4), *l = o ? realloc(v->len, (size_t)cap * 4) : NULL;
        if (o) v->off = o;
        if (l) v->len = l;
        uint32_t *c = l ? realloc(v->chars, (size_t)cap * 4) : NULL;
        if (!c) return -1;
        v->chars = c;
        v->cap = cap;
    }
    v->off[v->n] = (uint32_t)v->text.n;
    v->len[v->n] = (uint32_t)n;
    v->chars[v->n++] = chars;
    return sp_tok_buf_put(&v->text, s, n);
}

typedef struct {
    uint32_t cp;
    int64_t count;
} char_count;

static int cmp_char_count(const void *a, const void *b) {
    const char_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->cp < y->cp ? -1 : x->cp > y->cp;
}

/* ---- output ---------------------------------------------------------------------------------- */
static json_t *jstr(const char *s, size_t n) { return json_stringn(s, n); }

static int write_json(const vocab_b *v, const int32_t (*merges)[2], int n_merges, const char *path, sp_err *err) {
    json_t *root = json_object(), *added = json_array(), *vocab = json_object(), *ml = json_array();
    for (int i = 0; i < N_SPECIAL; i++) {
        json_t *a = json_object();
        json_object_set_new(a, "id", json_integer(i));
        json_object_set_new(a, "content", json_string(specials[i]));
        json_object_set_new(a, "single_word", json_false());
        json_object_set_new(a, "lstrip", json_false());
        json_object_set_new(a, "rstrip", json_false());
        json_object_set_new(a, "normalized", json_false());
        json_object_set_new(a, "special", json_true());
        json_array_append_new(added, a);
    }
    for (int i = 0; i < v->n; i++) {
        char *k = sp_tok_strndup(v->text.p + v->off[i], v->len[i]);
        if (!k) return sp_err_set(err, "out of memory");
        json_object_set_new(vocab, k, json_integer(i));
        free(k);
    }
    for (int i = 0; i < n_merges; i++) {
        json_t *pair = json_array();
        json_array_append_new(pair, jstr(v->text.p + v->off[merges[i][0]], v->len[merges[i][0]]));
        json_array_append_new(pair, jstr(v->text.p + v->off[merges[i][1]], v->len[merges[i][1]]));
        json_array_append_new(ml, pair);
    }
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_object_set_new(root, "added_tokens", added);
    json_object_set_new(root, "normalizer",
                        json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", " ", "content", MARK));
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", " ", "behavior",
                                  "MergedWithPrevious", "invert", 0));
    json_object_set_new(root, "post_processor",
                        json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:[], s:{s:{s:s, s:[i], s:[s]}}}",
                                  "type", "TemplateProcessing", "single", "SpecialToken", "id", "<bos>", "type_id", 0,
                                  "Sequence", "id", "A", "type_id", 0, "pair", "special_tokens", "<bos>", "id", "<bos>",
                                  "ids", 2, "tokens", "<bos>"));
    json_object_set_new(root, "decoder",
                        json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]}", "type", "Sequence", "decoders",
                                  "type", "Replace", "pattern", "String", MARK, "content", " ", "type",
                                  "ByteFallback", "type", "Fuse"));
    json_t *model = json_object();
    json_object_set_new(model, "type", json_string("BPE"));
    json_object_set_new(model, "dropout", json_null());
    json_object_set_new(model, "unk_token", json_string("<unk>"));
    json_object_set_new(model, "continuing_subword_prefix", json_null());
    json_object_set_new(model, "end_of_word_suffix", json_null());
    json_object_set_new(model, "fuse_unk", json_true());
    json_object_set_new(model, "byte_fallback", json_true());
    json_object_set_new(model, "ignore_merges", json_false());
    json_object_set_new(model, "vocab", vocab);
    json_object_set_new(model, "merges", ml);
    json_object_set_new(root, "model", model);
    char *text = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(root);
    if (!text) return sp_err_set(err, "%s: cannot serialize the tokenizer", path);
    int rc = sp_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* ---- training ------------------------------------------------------------------------------- */
/* Everything one training run owns; trainer_free releases it all. */
typedef struct {
    word_table wt;
    /* character counts: cc sorted later; cidx maps a code point's hash to its index in cc */
    char_count *cc;
    size_t n_cc, cap_cc;
    uint64_t cmask;
    int32_t *cidx;
    int64_t total_chars;
    vocab_b vb;
    tok_tokenizer *tmp; /* the base vocabulary as a map, to look characters up */
    /* words as symbol arrays: sym[w][0..nsym[w]), each word seen wcount[w] times */
    int n_words;
    int32_t **sym;
    int *nsym;
    int64_t *wcount;
    pair_table pt;
    maxheap hp;
    int32_t (*merges)[2];
    int n_merges, target;
    int *seen; /* seen[w] == n_merges: word w already rewritten by this merge */
} trainer;

static void trainer_free(trainer *t) {
    for (int w = 0; t->sym && w < t->n_words; w++) free(t->sym[w]);
    free(t->sym);
    free(t->nsym);
    free(t->wcount);
    free(t->seen);
    free(t->merges);
    for (uint64_t i = 0; t->pt.s && i <= t->pt.mask; i++)
        if (t->pt.s[i].key != UINT64_MAX) free(t->pt.s[i].words);
    free(t->pt.s);
    free(t->hp.v);
    sp_tok_free(t->tmp);
    sp_tok_buf_free(&t->vb.text);
    free(t->vb.off);
    free(t->vb.len);
    free(t->vb.chars);
    free(t->cc);
    free(t->cidx);
    free(t->wt.slots);
    sp_tok_buf_free(&t->wt.text);
}

/* double the code point index and return the free slot for cp in it */
static int char_index_grow(trainer *t, uint32_t cp, uint64_t *h) {
    uint64_t nm = t->cmask * 2 + 1;
    int32_t *ni = malloc((nm + 1) * sizeof *ni);
    if (!ni) return -1;
    memset(ni, 0xff, (nm + 1) * sizeof *ni);
    for (size_t j = 0; j < t->n_cc; j++) {
        uint64_t hh = tok_hash_u64(t->cc[j].cp) & nm;
        while (ni[hh] >= 0) hh = (hh + 1) & nm;
        ni[hh] = (int32_t)j;
    }
    free(t->cidx);
    t->cidx = ni;
    t->cmask = nm;
    *h = tok_hash_u64(cp) & t->cmask;
    while (t->cidx[*h] >= 0) *h = (*h + 1) & t->cmask;
    return 0;
}

/* add count occurrences of code point cp */
static int char_add(trainer *t, uint32_t cp, int64_t count) {
    uint64_t h = tok_hash_u64(cp) & t->cmask;
    while (t->cidx[h] >= 0 && t->cc[t->cidx[h]].cp != cp) h = (h + 1) & t->cmask;
    if (t->cidx[h] >= 0) {
        t->cc[t->cidx[h]].count += count;
        return 0;
    }
    if (t->n_cc == t->cap_cc) {
        t->cap_cc = t->cap_cc ? t->cap_cc * 2 : 256;
        char_count *ncc = realloc(t->cc, t->cap_cc * sizeof *ncc);
        if (!ncc) return -1;
        t->cc = ncc;
    }
    if ((t->n_cc + 1) * 2 > t->cmask + 1 && char_index_grow(t, cp, &h)) return -1;
    t->cc[t->n_cc] = (char_count){cp, count};
    t->cidx[h] = (int32_t)t->n_cc++;
    return 0;
}

/* character counts (invalid bytes are not characters: they stay byte tokens) */
static int count_chars(trainer *t, int rc, sp_err *err) {
    t->cmask = 4095;
    t->cidx = malloc((t->cmask + 1) * sizeof *t->cidx);
    if (!rc && !t->cidx) rc = sp_err_set(err, "out of memory");
    if (t->cidx) memset(t->cidx, 0xff, (t->cmask + 1) * sizeof *t->cidx);
    for (uint64_t s = 0; !rc && s <= t->wt.mask; s++) {
        const word_slot *e = &t->wt.slots[s];
        if (!e->hash) continue;
        const char *p = t->wt.text.p + e->off;
        for (uint32_t i = 0; i < e->len && !rc;) {
            int k = sp_tok_utf8_valid_len((const uint8_t *)p + i, e->len - i);
            if (!k) {
                i++;
                continue;
            }
            int kk;
            uint32_t cp = sp_tok_utf8_get(p + i, e->len - i, &kk);
            i += (uint32_t)k;
            t->total_chars += e->count;
            if (char_add(t, cp, e->count)) rc = sp_err_set(err, "out of memory");
        }
    }
    return rc;
}

/* vocabulary: specials, bytes, the characters that reach the coverage; then its lookup map */
static int base_vocab(trainer *t, int rc, int vocab_size, double coverage, sp_err *err) {
    vocab_b *vb = &t->vb;
    for (int i = 0; i < N_SPECIAL && !rc; i++) rc = vb_add(vb, specials[i], strlen(specials[i]), 1);
    for (int b = 0; b < 256 && !rc; b++) {
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        rc = vb_add(vb, hex, 6, 1);
    }
    if (t->cc) qsort(t->cc, t->n_cc, sizeof *t->cc, cmp_char_count);
    int64_t covered = 0;
    for (size_t i = 0; i < t->n_cc && !rc && vb->n < vocab_size; i++) {
        if (covered >= (int64_t)(coverage * (double)t->total_chars) && i > 0) break;
        char u[4];
        int k = sp_tok_utf8_put(u, t->cc[i].cp);
        rc = vb_add(vb, u, (size_t)k, 1);
        covered += t->cc[i].count;
    }
    if (rc && !err->msg[0]) sp_err_set(err, "out of memory");
    /* char id lookup through a temporary tokenizer map */
    t->tmp = rc ? NULL : sp_tok_alloc("train");
    if (!rc && (!t->tmp || sp_tok_vocab_init(t->tmp, vb->n, err))) rc = -1;
    for (int i = 0; i < vb->n && !rc; i++) rc = sp_tok_vocab_set(t->tmp, i, vb->text.p + vb->off[i], vb->len[i], err);
    if (!rc) rc = sp_tok_vocab_finish(t->tmp, err);
    return rc;
}

/* words as symbol arrays (-1: a character outside the vocabulary), then the initial pair counts */
static int words_to_pairs(trainer *t, int rc, sp_err *err) {
    int n_words = t->n_words = (int)t->wt.used;
    t->sym = rc ? NULL : calloc((size_t)n_words + 1, sizeof *t->sym);
    t->nsym = rc ? NULL : calloc((size_t)n_words + 1, sizeof *t->nsym);
    t->wcount = rc ? NULL : calloc((size_t)n_words + 1, sizeof *t->wcount);
    if (!rc && (!t->sym || !t->nsym || !t->wcount)) rc = sp_err_set(err, "out of memory");
    int wi = 0;
    for (uint64_t s = 0; !rc && s <= t->wt.mask; s++) {
        const word_slot *e = &t->wt.slots[s];
        if (!e->hash) continue;
        const char *p = t->wt.text.p + e->off;
        t->sym[wi] = malloc((size_t)e->len * sizeof **t->sym);
        if (!t->sym[wi]) {
            rc = sp_err_set(err, "out of memory");
            break;
        }
        for (uint32_t i = 0; i < e->len;) {
            int k = sp_tok_utf8_valid_len((const uint8_t *)p + i, e->len - i);
            if (!k) k = 1;
            t->sym[wi][t->nsym[wi]++] = sp_tok_vocab_find(t->tmp, p + i, (size_t)k); /* -1: uncovered */
            i += (uint32_t)k;
        }
        t->wcount[wi++] = e->count;
    }
    t->pt = (pair_table){NULL, 1023, 0};
    if (!rc) {
        t->pt.s = malloc(1024 * sizeof *t->pt.s);
        if (!t->pt.s) rc = sp_err_set(err, "out of memory");
        for (int i = 0; t->pt.s && i < 1024; i++) t->pt.s[i].key = UINT64_MAX;
    }
    for (int w = 0; w < n_words && !rc; w++)
        for (int i = 0; i + 1 < t->nsym[w] && !rc; i++)
            if (pair_add(&t->pt, &t->hp, t->sym[w][i], t->sym[w][i + 1], t->wcount[w], w))
                rc = sp_err_set(err, "out of memory");
    return rc;
}

/* replace every (a, b) in word w by c, moving the neighbouring pair counts to c */
static int rewrite_word(trainer *t, int w, int32_t a, int32_t b, int32_t c) {
    int rc = 0;
    int32_t *s = t->sym[w];
    int64_t wc = t->wcount[w];
    int n = t->nsym[w], o2 = 0;
    for (int i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            int32_t prev = o2 > 0 ? s[o2 - 1] : -1, next = i + 2 < n ? s[i + 2] : -1;
            if (prev >= 0 && (pair_add(&t->pt, &t->hp, prev, a, -wc, w) || pair_add(&t->pt, &t->hp, prev, c, wc, w)))
                rc = -1;
            if (next >= 0 && (pair_add(&t->pt, &t->hp, b, next, -wc, w) || pair_add(&t->pt, &t->hp, c, next, wc, w)))
                rc = -1;
            s[o2++] = c;
            i += 2;
        } else {
            s[o2++] = s[i++];
        }
    }
    t->nsym[w] = o2;
    return rc;
}

/* apply the merge (a, b) held by pair slot p: a new token, then every word holding the pair */
static int apply_merge(trainer *t, pair_slot *p, uint64_t key, sp_err *err) {
    int rc = 0;
    vocab_b *vb = &t->vb;
    int32_t a = (int32_t)(key >> 32), b = (int32_t)(uint32_t)key;
    int32_t c = vb->n;
    size_t la = vb->len[a], lb = vb->len[b];
    char *cat = malloc(la + lb); /* vb->text may move while it grows: copy first */
    if (cat) memcpy(cat, vb->text.p + vb->off[a], la), memcpy(cat + la, vb->text.p + vb->off[b], lb);
    if (!cat || vb_add(vb, cat, la + lb, vb->chars[a] + vb->chars[b])) {
        free(cat);
        return sp_err_set(err, "out of memory");
    }
    free(cat);
    t->merges[t->n_merges][0] = a, t->merges[t->n_merges][1] = b, t->n_merges++;
    /* rewrite every word holding (a, b); the list may hold repeats and stale entries */
    int nw = p->n_words;
    int32_t *list = p->words;
    p->words = NULL, p->n_words = p->cap_words = 0;
    for (int k = 0; k < nw && !rc; k++) {
        int w = list[k];
        if (t->seen[w] == t->n_merges) continue;
        t->seen[w] = t->n_merges;
        rc = rewrite_word(t, w, a, b, c);
    }
    free(list);
    if ((p = pt_get(&t->pt, key, 0))) p->count = 0; /* every occurrence is merged now */
    if (rc) sp_err_set(err, "out of memory");
    return rc;
}

/* merge the most frequent pair until the vocabulary is full or no pair is left */
static int merge_loop(trainer *t, int rc, const tok_train_opts *o, int max_chars, sp_err *err) {
    t->target = o->vocab_size - t->vb.n;
    if (!rc && t->target > 0 && !(t->merges = malloc((size_t)t->target * sizeof *t->merges)))
        rc = sp_err_set(err, "out of memory");
    t->seen = rc ? NULL : calloc((size_t)t->n_words + 1, sizeof *t->seen);
    if (!rc && !t->seen) rc = sp_err_set(err, "out of memory");
    double t0 = sp_time_ms(), last_log = t0;
    while (!rc && t->n_merges < t->target && t->hp.n) {
        heap_e top = heap_pop(&t->hp);
        pair_slot *p = pt_get(&t->pt, top.key, 0);
        if (!p || p->count != top.count || p->count <= 0) continue; /* stale */
        int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(uint32_t)top.key;
        if (t->vb.chars[a] + t->vb.chars[b] > (uint32_t)max_chars) {
            p->count = 0; /* too long: never again */
            continue;
        }
        int before = t->n_merges;
        rc = apply_merge(t, p, top.key, err);
        if (rc && t->n_merges == before) break; /* no new token: stop without a progress line */
        if (o->log_progress && sp_time_ms() - last_log > 2000) {
            last_log = sp_time_ms();
            fprintf(stderr, "train-tokenizer: %d/%d merges (%.0f merges/s)\n", t->n_merges, t->target,
                    t->n_merges / ((last_log - t0) / 1000.0));
        }
    }
    return rc;
}

int sp_tok_train_bpe(const char *const *texts, const size_t *lens, int n_texts, const tok_train_opts *o,
                  const char *out_path, sp_err *err) {
    double coverage = o->char_coverage > 0 && o->char_coverage <= 1 ? o->char_coverage : 0.9995;
    int max_chars = o->max_token_chars > 0 ? o->max_token_chars : 16;
    if (o->vocab_size < N_SPECIAL + 256 + 1 || o->vocab_size > (1 << 22))
        return sp_err_set(err, "vocab size %d out of range (%d..%d)", o->vocab_size, N_SPECIAL + 257, 1 << 22);
    trainer t = {.wt = {.mask = 1023}};
    t.wt.slots = calloc(1024, sizeof *t.wt.slots);
    int rc = t.wt.slots ? 0 : sp_err_set(err, "out of memory");
    for (int i = 0; i < n_texts && !rc; i++)
        if (count_words(&t.wt, texts[i], lens[i])) rc = sp_err_set(err, "out of memory counting words");
    rc = count_chars(&t, rc, err);
    rc = base_vocab(&t, rc, o->vocab_size, coverage, err);
    rc = words_to_pairs(&t, rc, err);
    rc = merge_loop(&t, rc, o, max_chars, err);
    if (!rc) rc = write_json(&t.vb, (const int32_t (*)[2])t.merges, t.n_merges, out_path, err);
    if (!rc && o->log_progress)
        fprintf(stderr, "train-tokenizer: %d words, %zu characters (%d kept), %d merges -> %s (%d ids)\n",
                t.n_words, t.n_cc, t.vb.n - N_SPECIAL - 256 - t.n_merges, t.n_merges, out_path, t.vb.n);
    trainer_free(&t);
    return rc ? -1 : 0;
}
