/* tokjson_scan.c — a fast path for the two big members of tokenizer.json, model.vocab and
 * model.merges (Gemma-3's file is 33 MB; a general JSON DOM takes over a second on it). The
 * scanner finds their byte spans, the rest of the document goes to jansson with them blanked
 * out, and these two are parsed here straight into the vocabulary and merge tables.
 *
 * It is a strict JSON reader for exactly these shapes ({"string": int, ...} and
 * ["a b", ...] or [["a", "b"], ...]); anything else is an error with a byte offset. */
#include <stdio.h>
#include <stdlib.h>

#include "tok_internal.h"
#include "tokjson_scan.h"

static const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const char *p, const char *e, uint32_t *v) {
    if (e - p < 4) return -1;
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexv(p[i]);
        if (h < 0) return -1;
        x = x << 4 | (uint32_t)h;
    }
    *v = x;
    return 0;
}

/* JSON string at *pp (on the opening quote) -> unescaped UTF-8 appended to out */
static int tj_string(const char **pp, const char *e, tok_buf *out) {
    const char *p = *pp;
    if (p >= e || *p != '"') return -1;
    p++;
    const char *run = p;
    while (p < e) {
        char c = *p;
        if (c == '"') {
            if (sp_tok_buf_put(out, run, (size_t)(p - run))) return -1;
            *pp = p + 1;
            return 0;
        }
        if ((uint8_t)c < 0x20) return -1;
        if (c != '\\') {
            p++;
            continue;
        }
        if (sp_tok_buf_put(out, run, (size_t)(p - run)) || ++p >= e) return -1;
        char u[4];
        int k = 1;
        switch (*p) {
        case '"': u[0] = '"'; break;
        case '\\': u[0] = '\\'; break;
        case '/': u[0] = '/'; break;
        case 'b': u[0] = '\b'; break;
        case 'f': u[0] = '\f'; break;
        case 'n': u[0] = '\n'; break;
        case 'r': u[0] = '\r'; break;
        case 't': u[0] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(p + 1, e, &cp)) return -1;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* surrogate pair */
                if (e - p < 7 || p[1] != '\\' || p[2] != 'u' || hex4(p + 3, e, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return -1;
            }
            k = sp_tok_utf8_put(u, cp);
            break;
        }
        default: return -1;
        }
        if (sp_tok_buf_put(out, u, (size_t)k)) return -1;
        run = ++p;
    }
    return -1;
}

/* skip a string without decoding */
static const char *skip_string(const char *p, const char *e) {
    for (p++; p < e; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

/* skip any value; NULL on malformed input (jansson reports details later) */
static const char *skip_value(const char *p, const char *e, int depth) {
    p = ws(p, e);
    if (p >= e || depth > 64) return NULL;
    if (*p == '"') return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1, e);
        if (p < e && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = ws(p, e);
                if (p >= e || *p != '"' || !(p = skip_string(p, e))) return NULL;
                p = ws(p, e);
                if (p >= e || *p != ':') return NULL;
                p++;
            }
            if (!(p = skip_value(p, e, depth + 1))) return NULL;
            p = ws(p, e);
            if (p >= e) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p++;
        }
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' && *p != '\r' &&
           *p != '\t')
        p++;
    return p;
}

/* walk the members of the object at p; record the value spans of keys k1 and k2 */
static int walk_object(const char *p, const char *e, const char *k1, tj_span *s1, const char *k2, tj_span *s2) {
    tok_buf key = {0};
    p = ws(p, e);
    if (p >= e || *p != '{') return -1;
    p = ws(p + 1, e);
    if (p < e && *p == '}') return 0;
    for (;;) {
        key.n = 0;
        p = ws(p, e);
        if (tj_string(&p, e, &key)) break;
        p = ws(p, e);
        if (p >= e || *p != ':') break;
        const char *v = ws(p + 1, e), *ve = skip_value(v, e, 0);
        if (!ve) break;
        tj_span *hit = key.n == strlen(k1) && !memcmp(key.p, k1, key.n)          ? s1
                       : k2 && key.n == strlen(k2) && !memcmp(key.p, k2, key.n) ? s2
                                                                                 : NULL;
        if (hit) hit->a = (size_t)(v - hit->base), hit->b = (size_t)(ve - hit->base);
        p = ws(ve, e);
        if (p < e && *p == '}') {
            sp_tok_buf_free(&key);
            return 0;
        }
        if (p >= e || *p != ',') break;
        p++;
    }
    sp_tok_buf_free(&key);
    return -1;
}

int sp_tj_find_model_members(const char *s, size_t n, tj_span *vocab, tj_span *merges) {
    tj_span model = {s, 0, 0};
    vocab->base = merges->base = s;
    vocab->a = vocab->b = merges->a = merges->b = 0;
    if (walk_object(s, s + n, "model", &model, NULL, NULL) || model.b == 0) return -1;
    return walk_object(s + model.a, s + model.b, "vocab", vocab, "merges", merges);
}

int sp_tj_vocab_each(const char *p, const char *e, tj_vocab_fn fn, void *ctx, size_t *bad_at) {
    const char *start = p;
    tok_buf key = {0};
    int rc = -1;
    p = ws(p, e);
    if (p >= e || *p != '{') goto out;
    p = ws(p + 1, e);
    if (p < e && *p == '}') {
        rc = 0;
        goto out;
    }
    for (;;) {
        key.n = 0;
        p = ws(p, e);
        if (tj_string(&p, e, &key)) goto out;
        p = ws(p, e);
        if (p >= e || *p != ':') goto out;
        p = ws(p + 1, e);
        long long v = 0;
        int digits = 0;
        while (p < e && *p >= '0' && *p <= '9' && digits < 12) v = v * 10 + (*p++ - '0'), digits++;
        if (!digits || (p < e && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))) goto out;
        if (fn(ctx, key.p ? key.p : "", key.n, v)) {
            rc = -2;
            goto out;
        }
        p = ws(p, e);
        if (p < e && *p == '}') {
            rc = 0;
            goto out;
        }
        if (p >= e || *p != ',') goto out;
        p++;
    }
out:
    if (rc == -1 && bad_at) *bad_at = (size_t)(p - start);
    sp_tok_buf_free(&key);
    return rc;
}

int sp_tj_merges_each(const char *p, const char *e, tj_merge_fn fn, void *ctx, size_t *bad_at) {
    const char *start = p;
    tok_buf a = {0}, b = {0};
    int rc = -1;
    long long idx = 0;
    p = ws(p, e);
    if (p >= e || *p != '[') goto out;
    p = ws(p + 1, e);
    if (p < e && *p == ']') {
        rc = 0;
        goto out;
    }
    for (;; idx++) {
        a.n = b.n = 0;
        p = ws(p, e);
        if (p < e && *p == '"') { /* "left right" */
            if (tj_string(&p, e, &a)) goto out;
            const char *sp = a.n > 1 ? memchr(a.p + 1, ' ', a.n - 1) : NULL;
            if (!sp) {
                if (bad_at) *bad_at = (size_t)(p - start);
                rc = -3;
                goto out;
            }
            size_t la = (size_t)(sp - a.p);
            if (fn(ctx, idx, a.p, la, sp + 1, a.n - la - 1)) {
                rc = -2;
                goto out;
            }
        } else if (p < e && *p == '[') { /* ["left", "right"] */
            p = ws(p + 1, e);
            if (tj_string(&p, e, &a)) goto out;
            p = ws(p, e);
            if (p >= e || *p != ',') goto out;
            p = ws(p + 1, e);
            if (tj_string(&p, e, &b)) goto out;
            p = ws(p, e);
            if (p >= e || *p != ']') goto out;
            p++;
            if (fn(ctx, idx, a.p ? a.p : "", a.n, b.p ? b.p : "", b.n)) {
                rc = -2;
                goto out;
            }
        } else {
            goto out;
        }
        p = ws(p, e);
        if (p < e && *p == ']') {
            rc = 0;
            goto out;
        }
        if (p >= e || *p != ',') goto out;
        p++;
    }
out:
    if (rc == -1 && bad_at) *bad_at = (size_t)(p - start);
    sp_tok_buf_free(&a);
    sp_tok_buf_free(&b);
    return rc;
}
