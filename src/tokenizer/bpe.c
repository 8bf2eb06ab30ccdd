/* bpe.c — the model step on one word (docs/TOKENIZER.md §3): symbols in a linked list, candidate
 * pairs in a binary min-heap, O(n log n) per word.
 *
 *   TOK_MODEL_BPE  HF BPE: pairs ranked by merge index, ties to the leftmost; byte fallback
 *                  to "<0xHH>", unk / fuse_unk, ignore_merges; byte-level words are raw bytes
 *                  whose initial symbols are the GPT-2 alphabet tokens (t->bl_tok).
 *   TOK_MODEL_SPM  llama.cpp's SentencePiece tokenizer for GGUF "llama" vocabs: the pair whose
 *                  concatenation is a vocab piece with the highest score merges first (ties
 *                  to the leftmost); a final symbol that is no piece becomes byte tokens. */
#include <stdlib.h>

#include "tok_internal.h"

/* Control and unknown tokens come only from the added-token matcher (parse_special) or the
 * post-processor, never from merging text: with parse_special off, "<|im_end|>" or "<s>"
 * written in the text stays text for every vocabulary (llama.cpp's parse_special contract). */
#define NOT_FROM_TEXT (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)

typedef struct {
    int32_t id;         /* token id; -1 = not a piece (SPM) / unknown */
    int32_t prev, next; /* neighbours, -1 at the ends */
    uint32_t start, len; /* bytes of the word; len 0 = merged away */
} sym;

/* 16 bytes: a long word's heap is the bulk of the memory and of the cache misses */
typedef struct {
    uint64_t key;   /* priority (rank or score) << 32 | left position: smaller pops first */
    int32_t right;  /* the left symbol is the key's low half */
    uint32_t len;   /* bytes of the pair when pushed: a pair whose sides changed is stale */
} cand;

struct tok_bpe_scratch {
    sym *s;
    int ns, cap_s;
    cand *h;
    int nh, cap_h;
    tok_buf mapped;
};

tok_bpe_scratch *sp_tok_bpe_scratch_new(void) { return calloc(1, sizeof(tok_bpe_scratch)); }

void sp_tok_bpe_scratch_free(tok_bpe_scratch *s) {
    if (!s) return;
    free(s->s);
    free(s->h);
    sp_tok_buf_free(&s->mapped);
    free(s);
}

static int heap_push(tok_bpe_scratch *sc, cand c) {
    if (sc->nh == sc->cap_h) {
        int cap = sc->cap_h ? sc->cap_h * 2 : 256;
        cand *h = realloc(sc->h, (size_t)cap * sizeof *h);
        if (!h) return -1;
        sc->h = h;
        sc->cap_h = cap;
    }
    int i = sc->nh++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (sc->h[p].key <= c.key) break;
        sc->h[i] = sc->h[p];
        i = p;
    }
    sc->h[i] = c;
    return 0;
}

static cand heap_pop(tok_bpe_scratch *sc) {
    cand top = sc->h[0], last = sc->h[--sc->nh];
    int i = 0, n = sc->nh;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        uint64_t km = last.key;
        if (l < n && sc->h[l].key < km) m = l, km = sc->h[l].key;
        if (r < n && sc->h[r].key < km) m = r;
        if (m == i) break;
        sc->h[i] = sc->h[m];
        i = m;
    }
    if (n) sc->h[i] = last;
    return top;
}

static int sym_push(tok_bpe_scratch *sc, int32_t id, uint32_t start, uint32_t len) {
    if (sc->ns == sc->cap_s) {
        int cap = sc->cap_s ? sc->cap_s * 2 : 256;
        sym *s = realloc(sc->s, (size_t)cap * sizeof *s);
        if (!s) return -1;
        sc->s = s;
        sc->cap_s = cap;
    }
    int i = sc->ns++;
    sc->s[i] = (sym){id, i - 1, -1, start, len};
    if (i > 0) sc->s[i - 1].next = i;
    return 0;
}

/* order-preserving map of a float to uint32 (bigger float -> bigger key) */
static uint32_t float_key(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* the token the pair (l, r) merges into, -1 if none: SPM a vocabulary piece, BPE a merge rule;
 * never a control or unknown token */
static int32_t merged_id(const tok_tokenizer *t, const tok_bpe_scratch *sc, const char *w, int l, int r) {
    const sym *a = &sc->s[l], *b = &sc->s[r];
    int32_t id;
    if (t->model == TOK_MODEL_SPM) {
        id = sp_tok_vocab_find(t, w + a->start, a->len + b->len);
    } else {
        const tok_merge *m = sp_tok_merges_find(t, a->id, b->id);
        id = m ? m->id : -1;
    }
    return id < 0 || (t->attr[id] & NOT_FROM_TEXT) ? -1 : id;
}

/* candidate for the pair (l, r) if it merges */
static int try_pair(const tok_tokenizer *t, tok_bpe_scratch *sc, const char *w, int l, int r) {
    if (l < 0 || r < 0) return 0;
    const sym *a = &sc->s[l], *b = &sc->s[r];
    cand c = {0, r, a->len + b->len};
    int32_t id = merged_id(t, sc, w, l, r);
    if (id < 0) return 0;
    if (t->model == TOK_MODEL_SPM) {
        c.key = (uint64_t)(~float_key(t->score[id])) << 32 | (uint32_t)l;
    } else {
        c.key = (uint64_t)(uint32_t)sp_tok_merges_find(t, a->id, b->id)->rank << 32 | (uint32_t)l;
    }
    return heap_push(sc, c);
}

static int out_push(int32_t **out, int *n, int *cap, int32_t id) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        int32_t *p = realloc(*out, (size_t)nc * sizeof *p);
        if (!p) return -1;
        *out = p;
        *cap = nc;
    }
    (*out)[(*n)++] = id;
    return 0;
}

/* llama.cpp's character length from the lead byte alone (no validation) */
static uint32_t lead_len(uint8_t c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* initial symbols of the word; returns -1 on OOM */
static int build_symbols(const tok_tokenizer *t, tok_bpe_scratch *sc, const char *w, uint32_t n) {
    sc->ns = 0;
    if (t->byte_level) {
        for (uint32_t i = 0; i < n; i++) {
            int32_t id = t->bl_tok[(uint8_t)w[i]];
            if (id < 0) id = t->unk_id;
            if (sym_push(sc, id, i, 1)) return -1;
        }
        return 0;
    }
    for (uint32_t i = 0; i < n;) {
        uint32_t k;
        if (t->model == TOK_MODEL_SPM) {
            k = lead_len((uint8_t)w[i]);
            if (k > n - i) k = n - i;
        } else {
            k = (uint32_t)sp_tok_utf8_valid_len((const uint8_t *)w + i, n - i);
            if (!k) k = 1;
        }
        int32_t id = k == 1 && (uint8_t)w[i] < 128 ? t->ascii_tok[(uint8_t)w[i]] : sp_tok_vocab_find(t, w + i, k);
        if (id >= 0 || t->model == TOK_MODEL_SPM) {
            if (sym_push(sc, id, i, k)) return -1;
        } else {
            int all = t->byte_fallback;
            for (uint32_t j = 0; j < k && all; j++) all = t->byte_tok[(uint8_t)w[i + j]] >= 0;
            if (all) {
                for (uint32_t j = 0; j < k; j++)
                    if (sym_push(sc, t->byte_tok[(uint8_t)w[i + j]], i + j, 1)) return -1;
            } else if (t->fuse_unk && sc->ns > 0 && sc->s[sc->ns - 1].id == t->unk_id &&
                       t->unk_id >= 0) {
                sc->s[sc->ns - 1].len += k; /* consecutive unknowns collapse */
            } else if (sym_push(sc, t->unk_id, i, k)) {
                return -1;
            }
        }
        i += k;
    }
    return 0;
}

int sp_tok_bpe_word(const tok_tokenizer *t, tok_bpe_scratch *sc, const char *w, size_t n,
                 int32_t **out, int *n_out, int *cap_out, sp_err *err) {
    if (!n) return 0;
    if (n > UINT32_MAX / 2) return sp_err_set(err, "%s: word too long", t->source);
    /* ignore_merges: a word that is a whole token is emitted as is (docs/TOKENIZER.md §3 step 1) */
    if (t->ignore_merges) {
        const char *key = w;
        size_t klen = n;
        if (t->byte_level) {
            sc->mapped.n = 0;
            for (size_t i = 0; i < n; i++) {
                char u[4];
                int k = sp_tok_utf8_put(u, sp_tok_bytelevel_cp((uint8_t)w[i]));
                if (sp_tok_buf_put(&sc->mapped, u, (size_t)k)) return sp_err_set(err, "out of memory");
            }
            key = sc->mapped.p;
            klen = sc->mapped.n;
        }
        int32_t id = sp_tok_vocab_find(t, key, klen);
        if (id >= 0 && !(t->attr[id] & NOT_FROM_TEXT)) return out_push(out, n_out, cap_out, id) ? sp_err_set(err, "out of memory") : 0;
    }
    if (build_symbols(t, sc, w, (uint32_t)n)) return sp_err_set(err, "out of memory");
    sc->nh = 0;
    for (int i = 0; i + 1 < sc->ns; i++)
        if (try_pair(t, sc, w, i, i + 1)) return sp_err_set(err, "out of memory");
    while (sc->nh) {
        cand c = heap_pop(sc);
        int left = (int)(uint32_t)c.key;
        sym *a = &sc->s[left], *b = &sc->s[c.right];
        /* stale: a was merged away or grew (its next moved), or b grew (the length changed) */
        if (!a->len || a->next != c.right || a->len + b->len != c.len) continue;
        a->id = merged_id(t, sc, w, left, c.right);
        a->len += b->len;
        a->next = b->next;
        if (b->next >= 0) sc->s[b->next].prev = left;
        b->len = 0;
        if (try_pair(t, sc, w, a->prev, left) || try_pair(t, sc, w, left, a->next))
            return sp_err_set(err, "out of memory");
    }
    for (int i = 0; i >= 0 && i < sc->ns; i = sc->s[i].next) {
        const sym *s = &sc->s[i];
        int rc = 0;
        if (s->id >= 0) {
            rc = out_push(out, n_out, cap_out, s->id);
        } else if (t->model == TOK_MODEL_SPM) { /* no piece: byte tokens (llama.cpp resegment) */
            for (uint32_t j = 0; j < s->len && !rc; j++) {
                uint8_t byte = (uint8_t)w[s->start + j];
                int32_t id = t->byte_tok[byte] >= 0 ? t->byte_tok[byte] : t->unk_id;
                if (id < 0)
                    return sp_err_set(err, "byte 0x%02X has no token: no byte token <0x%02X> and no unknown token",
                                      byte, byte);
                rc = out_push(out, n_out, cap_out, id);
            }
        } else if (t->unk_id >= 0) {
            rc = out_push(out, n_out, cap_out, t->unk_id);
        }
        if (rc) return sp_err_set(err, "out of memory");
    }
    return 0;
}
