/* normalize.c — the HF normalizers (docs/TOKENIZER.md §2 step 2): NFC/NFD/NFKC/NFKD (utf8proc),
 * Lowercase, Replace (literal or regex), Prepend, Strip, StripAccents, BertNormalizer, applied
 * in the order the tokenizer declares them; none when it declares none.
 * Text that is not valid UTF-8 passes the Unicode forms unchanged (only byte-fallback
 * models can see it; byte-level ones repaired it to U+FFFD first). */
#include <stdlib.h>
#include <utf8proc.h>

#include "tok_internal.h"

void sp_tok_norm_free(tok_norm *n) {
    free(n->a);
    free(n->b);
    if (n->re) pcre2_code_free(n->re);
    memset(n, 0, sizeof *n);
}

/* Unicode White_Space (what Rust's char::is_whitespace tests) */
static int is_ws(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static int unicode_form(tok_norm_kind k, const char *s, size_t n, tok_buf *out) {
    int compat = k == NORM_NFKC || k == NORM_NFKD;
    int compose = k == NORM_NFC || k == NORM_NFKC;
    /* fast paths: ASCII is invariant under every form; code points below U+0300 (lead
     * bytes < 0xCC) are invariant under NFC */
    int ascii = 1, below300 = 1;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        ascii &= c < 0x80;
        below300 &= c < 0xCC;
    }
    if (ascii || (k == NORM_NFC && below300)) return sp_tok_buf_put(out, s, n);
    utf8proc_uint8_t *dst = NULL;
    int opts = UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
               (compat ? UTF8PROC_COMPAT : 0);
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)opts);
    if (m < 0) return sp_tok_buf_put(out, s, n); /* invalid UTF-8: leave as is */
    int rc = sp_tok_buf_put(out, dst, (size_t)m);
    free(dst);
    return rc;
}

/* Rust's char::to_lowercase: one character to one, except U+0130 (İ) -> "i" U+0307 */
static int lowercase(const char *s, size_t n, tok_buf *out) {
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t c = sp_tok_utf8_get(s + i, n - i, &k);
        if (c == 0xFFFD && k == 1 && (uint8_t)s[i] >= 0x80) { /* invalid byte: keep */
            if (sp_tok_buf_put(out, s + i, 1)) return -1;
        } else if (c == 0x130) {
            if (sp_tok_buf_put(out, "i\xCC\x87", 3)) return -1;
        } else {
            char u[4];
            int m = sp_tok_utf8_put(u, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c));
            if (sp_tok_buf_put(out, u, (size_t)m)) return -1;
        }
        i += (size_t)k;
    }
    return 0;
}

static int strip_accents(const char *s, size_t n, tok_buf *out) {
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t c = sp_tok_utf8_get(s + i, n - i, &k);
        if (utf8proc_category((utf8proc_int32_t)c) != UTF8PROC_CATEGORY_MN)
            if (sp_tok_buf_put(out, s + i, (size_t)k)) return -1;
        i += (size_t)k;
    }
    return 0;
}

/* HF's BertNormalizer, in its order: clean_text (drop NUL, U+FFFD and control characters
 * other than \t \n \r; whitespace becomes " "), handle_chinese_chars (" c " around each CJK
 * ideograph), strip_accents (NFD, then drop Mn), lowercase */
static int is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int bert(const tok_norm *op, const char *s, size_t n, tok_buf *out) {
    tok_buf a = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        int k;
        uint32_t c = sp_tok_utf8_get(s + i, n - i, &k);
        const char *src = s + i;
        i += (size_t)k;
        if (op->clean_text) {
            int cat = utf8proc_category((utf8proc_int32_t)c);
            int control = c != '\t' && c != '\n' && c != '\r' &&
                          (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CN ||
                           cat == UTF8PROC_CATEGORY_CO);
            if (c == 0 || c == 0xFFFD || control) continue;
            if (c == '\t' || c == '\n' || c == '\r' || is_ws(c)) {
                rc = sp_tok_buf_put(&a, " ", 1);
                continue;
            }
        }
        if (op->chinese && is_cjk(c)) rc = sp_tok_buf_put(&a, " ", 1) || sp_tok_buf_put(&a, src, (size_t)k) || sp_tok_buf_put(&a, " ", 1);
        else rc = sp_tok_buf_put(&a, src, (size_t)k);
    }
    tok_buf b = {0};
    if (!rc && op->strip_accents) {
        rc = unicode_form(NORM_NFD, a.p ? a.p : "", a.n, &b) || (a.n = 0, strip_accents(b.p ? b.p : "", b.n, &a));
    }
    if (!rc) rc = op->lowercase ? lowercase(a.p ? a.p : "", a.n, out) : sp_tok_buf_put(out, a.p ? a.p : "", a.n);
    sp_tok_buf_free(&a);
    sp_tok_buf_free(&b);
    return rc;
}

static int replace(const tok_norm *op, const char *s, size_t n, tok_buf *out) {
    size_t i = 0, start = 0;
    if (!op->re) {
        if (!op->alen) return sp_tok_buf_put(out, s, n);
        while (i + op->alen <= n) {
            if (s[i] == op->a[0] && !memcmp(s + i, op->a, op->alen)) {
                if (sp_tok_buf_put(out, s + start, i - start) || sp_tok_buf_put(out, op->b, op->blen))
                    return -1;
                i += op->alen;
                start = i;
            } else {
                i++;
            }
        }
        return sp_tok_buf_put(out, s + start, n - start);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(op->re, NULL);
    if (!md) return -1;
    while (i <= n) {
        int rc = sp_tok_regex_match(op->re, md, s, n, i);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            pcre2_match_data_free(md);
            return -2;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (sp_tok_buf_put(out, s + start, ov[0] - start) || sp_tok_buf_put(out, op->b, op->blen)) {
            pcre2_match_data_free(md);
            return -1;
        }
        start = ov[1];
        if (ov[1] == ov[0]) { /* empty match: step one character */
            if (ov[1] >= n) break;
            int k;
            sp_tok_utf8_get(s + ov[1], n - ov[1], &k);
            if (sp_tok_buf_put(out, s + ov[1], (size_t)k)) {
                pcre2_match_data_free(md);
                return -1;
            }
            start = ov[1] + (size_t)k;
        }
        i = start;
    }
    pcre2_match_data_free(md);
    return sp_tok_buf_put(out, s + (start < n ? start : n), start < n ? n - start : 0);
}

static int strip(const tok_norm *op, const char *s, size_t n, tok_buf *out) {
    size_t a = 0, b = n;
    while (op->left && a < b) {
        int k;
        uint32_t c = sp_tok_utf8_get(s + a, b - a, &k);
        if (!is_ws(c)) break;
        a += (size_t)k;
    }
    while (op->right && b > a) {
        size_t j = b - 1;
        while (j > a && ((uint8_t)s[j] & 0xC0) == 0x80) j--;
        int k;
        uint32_t c = sp_tok_utf8_get(s + j, b - j, &k);
        if (!is_ws(c)) break;
        b = j;
    }
    return sp_tok_buf_put(out, s + a, b - a);
}

int sp_tok_normalize(const tok_tokenizer *t, const char *s, size_t n, tok_buf *out, sp_err *err) {
    out->n = 0;
    if (!t->n_norm) return sp_tok_buf_put(out, s, n) ? sp_err_set(err, "out of memory") : 0;
    tok_buf tmp = {0};
    int rc = sp_tok_buf_put(&tmp, s, n);
    for (int i = 0; i < t->n_norm && !rc; i++) {
        const tok_norm *op = &t->norm[i];
        out->n = 0;
        switch (op->kind) {
        case NORM_NFC:
        case NORM_NFD:
        case NORM_NFKC:
        case NORM_NFKD: rc = unicode_form(op->kind, tmp.p, tmp.n, out); break;
        case NORM_LOWERCASE: rc = lowercase(tmp.p, tmp.n, out); break;
        case NORM_STRIP_ACCENTS: rc = strip_accents(tmp.p, tmp.n, out); break;
        case NORM_REPLACE: rc = replace(op, tmp.p, tmp.n, out); break;
        case NORM_PREPEND:
            rc = tmp.n ? (sp_tok_buf_put(out, op->a, op->alen) || sp_tok_buf_put(out, tmp.p, tmp.n))
                       : sp_tok_buf_put(out, "", 0);
            break;
        case NORM_STRIP: rc = strip(op, tmp.p, tmp.n, out); break;
        case NORM_BERT: rc = bert(op, tmp.p, tmp.n, out); break;
        }
        tok_buf swap = tmp;
        tmp = *out;
        *out = swap;
    }
    /* the result is in tmp; hand it over */
    sp_tok_buf_free(out);
    *out = tmp;
    if (!out->p) rc = rc || sp_tok_buf_put(out, "", 0);
    if (rc == -2) return sp_err_set(err, "%s: a Replace normalizer's regex failed on %zu bytes", t->source, n);
    return rc ? sp_err_set(err, "%s: out of memory while normalizing", t->source) : 0;
}
