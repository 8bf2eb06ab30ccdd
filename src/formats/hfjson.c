/* hfjson.c — Hugging Face JSON files through jansson (hfjson.h, docs/hf-json.md).
 *
 * One linear scan finds what jansson would refuse in otherwise valid JSON: integer literals
 * outside int64 and \u escapes of lone surrogates. When there are none the text goes to
 * jansson untouched; otherwise a copy is made with ".0" after each such integer (so jansson
 * reads a real) and "\uFFFD" in place of each lone surrogate escape (same length). The scan
 * only looks at tokens; anything malformed is left for jansson to report. */
#include <stdio.h>
#include <stdlib.h>

#include "hfjson.h"

static int hex4(const char *p, const char *e, unsigned *v) {
    if (e - p < 4) return -1;
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        x = x << 4 | (unsigned)h;
    }
    *v = x;
    return 0;
}

/* Scan text; with out != NULL also write the repaired copy there (room: len + 2 per edit).
 * Returns the number of edits; *out_len gets the copy's length. */
static size_t scan(const char *text, size_t len, char *out, size_t *out_len) {
    const char *p = text, *e = text + len, *copied = text;
    size_t edits = 0, o = 0;
#define COPY_TO(q)                                                                         \
    do {                                                                                   \
        if (out) memcpy(out + o, copied, (size_t)((q) - copied));                          \
        o += (size_t)((q) - copied);                                                       \
        copied = (q);                                                                      \
    } while (0)
    while (p < e) {
        char c = *p;
        if (c == '"') {
            for (p++; p < e && *p != '"'; p++) {
                if (*p != '\\') continue;
                if (++p >= e) break;
                unsigned u, lo;
                if (*p != 'u' || hex4(p + 1, e, &u)) continue;
                const char *esc = p - 1; /* the backslash */
                p += 4;                  /* on the last hex digit */
                if (u >= 0xD800 && u <= 0xDBFF && e - p >= 7 && p[1] == '\\' && p[2] == 'u' &&
                    !hex4(p + 3, e, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                    p += 6; /* a proper pair */
                    continue;
                }
                if (u < 0xD800 || u > 0xDFFF) continue;
                edits++; /* lone surrogate -> U+FFFD, same length */
                COPY_TO(esc);
                if (out) memcpy(out + o, "\\uFFFD", 6);
                o += 6;
                copied = esc + 6;
            }
            p++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            int neg = c == '-';
            const char *d = p + neg, *q = d;
            while (q < e && *q >= '0' && *q <= '9') q++;
            size_t nd = (size_t)(q - d);
            if (q < e && (*q == '.' || *q == 'e' || *q == 'E')) {
                while (q < e && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' || *q == '-')) q++;
            } else if (nd > 19 || (nd == 19 && memcmp(d, neg ? "9223372036854775808" : "9223372036854775807", 19) > 0)) {
                edits++; /* beyond int64: read it as a real */
                COPY_TO(q);
                if (out) memcpy(out + o, ".0", 2);
                o += 2;
            }
            p = q > p ? q : p + 1;
        } else {
            p++;
        }
    }
    COPY_TO(e);
#undef COPY_TO
    if (out_len) *out_len = o;
    return edits;
}

json_t *sp_hf_json_loadb(const char *text, size_t len, size_t flags, const char *what, sp_err *err) {
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) text += 3, len -= 3;
    char *fixed = NULL;
    size_t edits = scan(text, len, NULL, NULL), n = len;
    if (edits) {
        if (!(fixed = malloc(len + 2 * edits + 1))) {
            sp_err_set(err, "%s: out of memory", what);
            return NULL;
        }
        scan(text, len, fixed, &n);
    }
    json_error_t je;
    json_t *root = json_loadb(fixed ? fixed : text, n, flags | JSON_ALLOW_NUL, &je);
    free(fixed);
    if (!root) sp_err_set(err, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column, je.text);
    return root;
}

json_t *sp_hf_json_load_file(const char *path, size_t flags, sp_err *err) {
    char *text = NULL;
    size_t n = 0;
    if (sp_read_file(path, &text, &n, err)) return NULL;
    json_t *root = sp_hf_json_loadb(text, n, flags, path, err);
    free(text);
    return root;
}
