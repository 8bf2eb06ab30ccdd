/* decode.c — ids -> text through the HF decoders (docs/TOKENIZER.md §4, §5): ByteLevel, Replace,
 * ByteFallback, Fuse, Strip, Metaspace, run over the list of token strings in order and then
 * concatenated. Also the streaming decoder: it re-decodes a short window of recent ids and
 * emits only the text that can no longer change (never half a character). */
#include <stdlib.h>

#include "tok_internal.h"

void sp_tok_dec_free(tok_dec *d) {
    free(d->a);
    free(d->b);
    memset(d, 0, sizeof *d);
}

/* list of strings in one arena */
typedef struct {
    tok_buf arena;
    tok_piece *p;
    int n, cap;
} strlist;

static int sl_add(strlist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        tok_piece *p = realloc(l->p, (size_t)cap * sizeof *p);
        if (!p) return -1;
        l->p = p;
        l->cap = cap;
    }
    if (sp_tok_buf_reserve(&l->arena, n)) return -1;
    l->p[l->n++] = (tok_piece){(uint32_t)l->arena.n, (uint32_t)n};
    return sp_tok_buf_put(&l->arena, s, n);
}

/* start a new string; append to it with sl_cat */
static int sl_begin(strlist *l) { return sl_add(l, "", 0); }
static int sl_cat(strlist *l, const char *s, size_t n) {
    if (sp_tok_buf_put(&l->arena, s, n)) return -1;
    l->p[l->n - 1].len += (uint32_t)n;
    return 0;
}
static void sl_free(strlist *l) {
    sp_tok_buf_free(&l->arena);
    free(l->p);
}
#define SL_STR(l, i) ((l)->arena.p + (l)->p[i].off)

static int byte_token(const char *s, size_t n) { /* "<0xHH>" -> HH, else -1 */
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int replace_all(strlist *o, const char *s, size_t n, const char *a, size_t an,
                       const char *b, size_t bn) {
    if (sl_begin(o)) return -1;
    size_t i = 0, st = 0;
    while (an && i + an <= n) {
        if (!memcmp(s + i, a, an)) {
            if (sl_cat(o, s + st, i - st) || sl_cat(o, b, bn)) return -1;
            i += an;
            st = i;
        } else {
            i++;
        }
    }
    return sl_cat(o, s + st, n - st);
}

/* ByteFallback: a run of "<0xHH>" tokens becomes its bytes when they are valid UTF-8, else one
 * U+FFFD per byte; other tokens pass through */
static int dec_bytefallback(strlist *in, strlist *o) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    for (int i = 0; i < in->n;) {
        if (byte_token(SL_STR(in, i), in->p[i].len) < 0) {
            if (sl_add(o, SL_STR(in, i), in->p[i].len)) return -1;
            i++;
            continue;
        }
        /* a run of byte tokens: valid UTF-8 as text, else one U+FFFD per byte */
        uint8_t bytes[256];
        int nb = 0, j = i;
        while (j < in->n && nb < (int)sizeof bytes) {
            int v = byte_token(SL_STR(in, j), in->p[j].len);
            if (v < 0) break;
            bytes[nb++] = (uint8_t)v;
            j++;
        }
        int ok = 1;
        for (int k = 0; k < nb && ok;) {
            int l = sp_tok_utf8_valid_len(bytes + k, (size_t)(nb - k));
            ok = l > 0;
            k += l;
        }
        if (ok) {
            if (sl_add(o, (const char *)bytes, (size_t)nb)) return -1;
        } else {
            for (int k = 0; k < nb; k++)
                if (sl_add(o, fffd, 3)) return -1;
        }
        i = j;
    }
    return 0;
}

/* ByteLevel: each token's characters mapped back to bytes (a token outside the alphabet as is),
 * the whole as one piece of lossy UTF-8 */
static int dec_bytelevel(strlist *in, strlist *o) {
    tok_buf raw = {0};
    int rc = 0;
    for (int i = 0; i < in->n && !rc; i++) {
        const char *s = SL_STR(in, i);
        size_t n = in->p[i].len, start = raw.n;
        for (size_t k = 0; k < n && !rc;) {
            int l;
            uint32_t cp = sp_tok_utf8_get(s + k, n - k, &l);
            int b = sp_tok_bytelevel_byte(cp);
            if (b < 0) { /* not in the alphabet: the token's text as is */
                raw.n = start;
                rc = sp_tok_buf_put(&raw, s, n);
                break;
            }
            uint8_t c = (uint8_t)b;
            rc = sp_tok_buf_put(&raw, &c, 1);
            k += (size_t)l;
        }
    }
    tok_buf fixed = {0};
    if (!rc) rc = sp_tok_utf8_lossy(&fixed, raw.p ? raw.p : "", raw.n, 0);
    if (!rc) rc = sl_add(o, fixed.p ? fixed.p : "", fixed.n);
    sp_tok_buf_free(&raw);
    sp_tok_buf_free(&fixed);
    return rc;
}

static int apply(const tok_dec *d, strlist *in, strlist *o) {
    switch (d->kind) {
    case DEC_REPLACE:
        for (int i = 0; i < in->n; i++)
            if (replace_all(o, SL_STR(in, i), in->p[i].len, d->a, d->alen, d->b, d->blen)) return -1;
        return 0;
    case DEC_METASPACE:
        for (int i = 0; i < in->n; i++) {
            if (replace_all(o, SL_STR(in, i), in->p[i].len, d->a, d->alen, " ", 1)) return -1;
            tok_piece *p = &o->p[o->n - 1];
            if (i == 0 && d->prepend_scheme != PREPEND_NEVER && p->len && o->arena.p[p->off] == ' ')
                p->off++, p->len--;
        }
        return 0;
    case DEC_FUSE:
        if (sl_begin(o)) return -1;
        for (int i = 0; i < in->n; i++)
            if (sl_cat(o, SL_STR(in, i), in->p[i].len)) return -1;
        return 0;
    case DEC_STRIP:
        for (int i = 0; i < in->n; i++) {
            const char *s = SL_STR(in, i);
            size_t a = 0, b = in->p[i].len;
            for (int k = 0; k < d->start && a < b && b - a >= d->alen && !memcmp(s + a, d->a, d->alen); k++)
                a += d->alen;
            for (int k = 0; k < d->stop && b > a && b - a >= d->alen && !memcmp(s + b - d->alen, d->a, d->alen); k++)
                b -= d->alen;
            if (sl_add(o, s + a, b - a)) return -1;
        }
        return 0;
    case DEC_BYTEFALLBACK:
        return dec_bytefallback(in, o);
    case DEC_BYTELEVEL:
        return dec_bytelevel(in, o);
    }
    return 0;
}

int sp_tok_decode_into(const tok_tokenizer *t, const int32_t *ids, int n, int flags, tok_buf *out,
                    sp_err *err) {
    strlist a = {0}, b = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab || (t->attr[id] & TOK_ATTR_HOLE)) {
            rc = sp_err_set(err, "%s: token id %d is not in the vocabulary (size %d)", t->source,
                            id, t->n_vocab);
            break;
        }
        if ((flags & TOK_DECODE_SKIP_SPECIAL) && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)))
            continue;
        if (sl_add(&a, t->text.p + t->off[id], t->len[id])) rc = sp_err_set(err, "out of memory");
    }
    for (int d = 0; d < t->n_dec && !rc; d++) {
        b.n = 0;
        b.arena.n = 0;
        if (apply(&t->dec[d], &a, &b)) rc = sp_err_set(err, "out of memory");
        strlist tmp = a;
        a = b;
        b = tmp;
    }
    for (int i = 0; i < a.n && !rc; i++) {
        if (!t->n_dec && i > 0 && sp_tok_buf_put(out, " ", 1)) rc = -1; /* HF: no decoder joins with spaces */
        if (!rc && sp_tok_buf_put(out, SL_STR(&a, i), a.p[i].len)) rc = -1;
    }
    if (!rc && !out->p && sp_tok_buf_put(out, "", 0)) rc = -1;
    if (rc && err && !err->msg[0]) sp_err_set(err, "out of memory");
    sl_free(&a);
    sl_free(&b);
    return rc ? -1 : 0;
}

/* One token's bytes as it adds them in the middle of a text: the decoders applied to it alone without
 * what acts on a whole text (Strip, Metaspace's leading-space rule, the lossy UTF-8 repair), so a
 * token holding half of a character gives its raw bytes. */
int sp_tok_token_bytes(const tok_tokenizer *t, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= t->n_vocab || (t->attr[id] & (TOK_ATTR_HOLE | TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) return -1;
    strlist a = {0}, b = {0};
    int rc = sl_add(&a, t->text.p + t->off[id], t->len[id]);
    for (int d = 0; d < t->n_dec && !rc; d++) {
        const tok_dec *dc = &t->dec[d];
        b.n = 0;
        b.arena.n = 0;
        const char *s = SL_STR(&a, 0);
        size_t n = a.p[0].len;
        if (dc->kind == DEC_REPLACE || dc->kind == DEC_METASPACE) {
            rc = dc->kind == DEC_REPLACE ? replace_all(&b, s, n, dc->a, dc->alen, dc->b, dc->blen)
                                         : replace_all(&b, s, n, dc->a, dc->alen, " ", 1);
        } else if (dc->kind == DEC_BYTEFALLBACK && byte_token(s, n) >= 0) {
            char c = (char)byte_token(s, n);
            rc = sl_add(&b, &c, 1);
        } else if (dc->kind == DEC_BYTELEVEL) {
            rc = sl_begin(&b);
            for (size_t k = 0; k < n && !rc;) {
                int l, v = sp_tok_bytelevel_byte(sp_tok_utf8_get(s + k, n - k, &l));
                if (v < 0) { /* not in the alphabet: the token's text as is */
                    b.arena.n = 0, b.p[0].len = 0;
                    rc = sl_cat(&b, s, n);
                    break;
                }
                char c = (char)v;
                rc = sl_cat(&b, &c, 1);
                k += (size_t)l;
            }
        } else {
            rc = sl_add(&b, s, n);
        }
        if (!rc && b.n != 1) { /* replace_all may split; join */
            size_t len = 0;
            for (int i = 0; i < b.n; i++) len += b.p[i].len;
            b.p[0] = (tok_piece){b.p[0].off, (uint32_t)len};
            b.n = 1;
        }
        strlist tmp = a;
        a = b;
        b = tmp;
    }
    int n = rc || a.n < 1 ? -1 : (int)a.p[0].len;
    if (n >= 0 && (size_t)n <= cap) memcpy(out, SL_STR(&a, 0), (size_t)n);
    sl_free(&a);
    sl_free(&b);
    return n;
}

int sp_tok_decode_ex(tok_tokenizer *t, const int32_t *ids, int n, int flags, char **text,
                  sp_err *err) {
    tok_buf out = {0};
    *text = NULL;
    if (sp_tok_decode_into(t, ids, n, flags, &out, err)) {
        sp_tok_buf_free(&out);
        return -1;
    }
    *text = out.p;
    return 0;
}

int sp_tok_decode(tok_tokenizer *t, const int32_t *ids, int n, char **text, sp_err *err) {
    return sp_tok_decode_ex(t, ids, n, 0, text, err);
}

/* ---- streaming ------------------------------------------------------------------------ */
struct tok_stream {
    tok_tokenizer *t;
    int flags;
    int32_t *ids;
    int n, cap, prefix_index;
    tok_buf prefix;  /* decode of ids[0..n) at the last emission */
    tok_buf pending; /* final text not yet handed out */
    size_t pending_off;
};

tok_stream *sp_tok_stream_new_ex(tok_tokenizer *t, int flags) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->flags = flags;
    return s;
}
tok_stream *sp_tok_stream_new(tok_tokenizer *t) { return sp_tok_stream_new_ex(t, 0); }

void sp_tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->ids);
    sp_tok_buf_free(&s->prefix);
    sp_tok_buf_free(&s->pending);
    free(s);
}

static int ends_with_fffd(const tok_buf *b) {
    return b->n >= 3 && !memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3);
}

/* hand out queued text up to cap-1 bytes, cut at a character boundary */
static int drain(tok_stream *s, char *out, size_t cap) {
    size_t avail = s->pending.n - s->pending_off, k = avail;
    if (!cap) return 0;
    if (k > cap - 1) {
        k = cap - 1;
        while (k > 0 && ((uint8_t)s->pending.p[s->pending_off + k] & 0xC0) == 0x80) k--;
    }
    if (k) memcpy(out, s->pending.p + s->pending_off, k);
    out[k] = 0;
    s->pending_off += k;
    if (s->pending_off == s->pending.n) s->pending.n = s->pending_off = 0;
    return (int)k;
}

int sp_tok_stream_push(tok_stream *s, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= s->t->n_vocab) return -1;
    if (s->n == s->cap) {
        int c = s->cap ? s->cap * 2 : 16;
        int32_t *p = realloc(s->ids, (size_t)c * sizeof *p);
        if (!p) return -1;
        s->ids = p;
        s->cap = c;
    }
    s->ids[s->n++] = id;
    tok_buf cur = {0};
    if (sp_tok_decode_into(s->t, s->ids, s->n, s->flags, &cur, NULL)) {
        sp_tok_buf_free(&cur);
        s->n--;
        return -1;
    }
    if (cur.n > s->prefix.n && !ends_with_fffd(&cur)) {
        /* HF DecodeStream: the new text is what follows the previous decode */
        if (sp_tok_buf_put(&s->pending, cur.p + s->prefix.n, cur.n - s->prefix.n)) {
            sp_tok_buf_free(&cur);
            return -1;
        }
        /* keep the ids after the old prefix as context for the next step */
        int keep_from = s->prefix_index, new_prefix = s->n - s->prefix_index;
        memmove(s->ids, s->ids + keep_from, (size_t)(s->n - keep_from) * sizeof *s->ids);
        s->n -= keep_from;
        s->prefix.n = 0;
        if (sp_tok_decode_into(s->t, s->ids, s->n, s->flags, &s->prefix, NULL)) {
            sp_tok_buf_free(&cur);
            return -1;
        }
        s->prefix_index = new_prefix;
    }
    sp_tok_buf_free(&cur);
    return drain(s, out, cap);
}

int sp_tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    if (s->n) {
        tok_buf cur = {0};
        if (sp_tok_decode_into(s->t, s->ids, s->n, s->flags, &cur, NULL) == 0 && cur.n > s->prefix.n)
            sp_tok_buf_put(&s->pending, cur.p + s->prefix.n, cur.n - s->prefix.n);
        sp_tok_buf_free(&cur);
        s->n = s->prefix_index = 0;
        s->prefix.n = 0;
    }
    return drain(s, out, cap);
}
