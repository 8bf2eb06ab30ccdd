/* jinja_lex.c — template text -> tokens, with the whitespace rules Hugging Face renders
 * chat templates under (docs/CHAT_TEMPLATES.md):
 *
 *   {{- / {%- / {#-   remove all whitespace (newlines too) before the tag
 *   -}} / -%} / -#}   remove all whitespace after the tag
 *   trim_blocks       the first newline right after a %} or #} is removed
 *   lstrip_blocks     spaces and tabs from the start of a line up to a {% or {# are removed
 *                     ({%+ turns this off for one tag, +%} turns trim_blocks off)
 *   {% raw %}         text up to {% endraw %} is one text token, tags in it are not read
 *   one newline at the very end of the template is dropped (keep_trailing_newline off)
 *
 * Comments produce no token. Inside a tag, a }} or %} closes the tag only outside brackets,
 * so a dict literal may end with }}. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

typedef struct {
    jx_arena *a;
    const char *src, *name;
    size_t len, pos;
    int line;
    jtok *t;
    int n, cap;
    sp_err *err;
} lexer;

static int lex_fail(lexer *L, const char *fmt, const char *what) {
    char m[200];
    snprintf(m, sizeof m, fmt, what);
    return sp_err_set(L->err, "%s:%d: %s", L->name, L->line, m);
}

static jtok *push(lexer *L, jtok_kind k) {
    if (L->n == L->cap) {
        int nc = L->cap ? 2 * L->cap : 256;
        jtok *nt = sp_jx_alloc(L->a, (size_t)nc * sizeof *nt);
        if (!nt) return sp_err_set(L->err, "%s: template too large", L->name), NULL;
        if (L->n) memcpy(nt, L->t, (size_t)L->n * sizeof *nt);
        L->t = nt, L->cap = nc;
    }
    jtok *t = &L->t[L->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = L->line;
    return t;
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static int is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) L->line += L->src[i] == '\n';
}

/* the next tag opening at or after `from`: returns its position (len when none), *kind '{', '%', '#' */
static size_t find_tag(const lexer *L, size_t from, char *kind) {
    for (size_t i = from; i + 1 < L->len; i++)
        if (L->src[i] == '{' && (L->src[i + 1] == '{' || L->src[i + 1] == '%' || L->src[i + 1] == '#')) {
            *kind = L->src[i + 1];
            return i;
        }
    return L->len;
}

/* emit text [a, b) after applying the strip rules of the tags around it */
static int emit_text(lexer *L, size_t a, size_t b, int strip_left, int strip_right, int lstrip_line) {
    int line0 = L->line;
    if (strip_left)
        while (a < b && is_ws(L->src[a])) a++;
    if (strip_right) {
        while (b > a && is_ws(L->src[b - 1])) b--;
    } else if (lstrip_line) {
        size_t k = b;
        while (k > a && (L->src[k - 1] == ' ' || L->src[k - 1] == '\t')) k--;
        int line_start = k > a ? L->src[k - 1] == '\n' : (k == 0 || L->src[k - 1] == '\n');
        if (line_start) b = k;
    }
    if (b > a) {
        jtok *t = push(L, TK_TEXT);
        if (!t) return -1;
        t->line = line0;
        t->s = L->src + a;
        t->n = b - a;
    }
    return 0;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63)), o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)), o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* a quoted string at L->pos; backslash escapes as Python reads them */
static int lex_string(lexer *L) {
    char q = L->src[L->pos];
    size_t i = L->pos + 1, start_line = (size_t)L->line;
    size_t end = i; /* the closing quote (or the end): the unescaped text is never longer than the raw */
    while (end < L->len && L->src[end] != q) end += L->src[end] == '\\' && end + 1 < L->len ? 2 : 1;
    char *o = sp_jx_alloc(L->a, end - i + 1);
    if (!o) return sp_err_set(L->err, "%s: template too large", L->name);
    size_t n = 0;
    for (;;) {
        if (i >= L->len) {
            L->line = (int)start_line;
            return lex_fail(L, "%s", "string literal is not closed");
        }
        char ch = L->src[i];
        if (ch == q) break;
        if (ch == '\n') L->line++;
        if (ch != '\\' || i + 1 >= L->len) {
            o[n++] = ch, i++;
            continue;
        }
        char e = L->src[i + 1];
        i += 2;
        switch (e) {
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'v': o[n++] = '\v'; break;
        case '0': o[n++] = '\0'; break;
        case '\\': case '\'': case '"': o[n++] = e; break;
        case '\n': L->line++; break; /* line continuation */
        case 'x': case 'u': case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + (size_t)k < L->len ? hexval(L->src[i + (size_t)k]) : -1;
                if (h < 0) return lex_fail(L, "bad \\%s escape in a string literal", e == 'x' ? "x" : "u");
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return lex_fail(L, "%s", "escape outside Unicode in a string literal");
            i += (size_t)digits;
            n += put_utf8(o + n, cp); /* never longer than the escape itself */
            break;
        }
        default: o[n++] = '\\', o[n++] = e; break;
        }
    }
    jtok *t = push(L, TK_STRING);
    if (!t) return -1;
    t->line = (int)start_line;
    o[n] = 0;
    t->s = o, t->n = n;
    L->pos = i + 1;
    return 0;
}

static const char *OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~<>()[]{},.:|=!";

/* an integer or float literal at p (left bytes to the tag's source end); '_' separates digits */
static int lex_number(lexer *L, const char *p, size_t left) {
    size_t k = 0;
    int is_float = 0;
    while (k < left && (is_digit(p[k]) || p[k] == '_')) k++;
    if (k + 1 < left && p[k] == '.' && is_digit(p[k + 1])) {
        is_float = 1, k++;
        while (k < left && (is_digit(p[k]) || p[k] == '_')) k++;
    }
    if (k < left && (p[k] == 'e' || p[k] == 'E')) {
        size_t e = k + 1;
        if (e < left && (p[e] == '+' || p[e] == '-')) e++;
        if (e < left && is_digit(p[e])) {
            is_float = 1, k = e;
            while (k < left && is_digit(p[k])) k++;
        }
    }
    char num[64];
    size_t m = 0;
    for (size_t j = 0; j < k && m < sizeof num - 1; j++)
        if (p[j] != '_') num[m++] = p[j];
    num[m] = 0;
    jtok *t = push(L, is_float ? TK_FLOAT : TK_INT);
    if (!t) return -1;
    char *end;
    if (is_float) {
        t->f = strtod(num, &end);
    } else {
        errno = 0;
        long long v = strtoll(num, &end, 10);
        if (errno || k >= sizeof num) return lex_fail(L, "integer literal %s is out of range", num);
        t->i = v;
    }
    L->pos += k;
    return 0;
}

/* the tokens of one tag up to its end marker; *strip_after / *no_trim from -%} / +%} */
static int lex_tag(lexer *L, char kind, int *strip_after, int *no_trim) {
    const char close = kind == '{' ? '}' : '%';
    int depth = 0;
    for (;;) {
        while (L->pos < L->len && is_ws(L->src[L->pos])) L->line += L->src[L->pos++] == '\n';
        if (L->pos >= L->len) return lex_fail(L, "%s", kind == '{' ? "'{{' is not closed by '}}'" : "'{%' is not closed by '%}'");
        const char *p = L->src + L->pos;
        size_t left = L->len - L->pos;
        if (depth == 0) {
            int mark = (p[0] == '-' || p[0] == '+') && left >= 3 && p[1] == close && p[2] == '}';
            if (mark || (left >= 2 && p[0] == close && p[1] == '}')) {
                *strip_after = mark && p[0] == '-';
                *no_trim = mark && p[0] == '+';
                L->pos += mark ? 3 : 2;
                return push(L, kind == '{' ? TK_VAR_END : TK_BLOCK_END) ? 0 : -1;
            }
        }
        if (p[0] == '\'' || p[0] == '"') {
            if (lex_string(L)) return -1;
            continue;
        }
        if (is_name0(p[0])) {
            size_t k = 1;
            while (k < left && (is_name0(p[k]) || is_digit(p[k]))) k++;
            jtok *t = push(L, TK_NAME);
            if (!t) return -1;
            t->s = p, t->n = k;
            L->pos += k;
            continue;
        }
        if (is_digit(p[0])) {
            if (lex_number(L, p, left)) return -1;
            continue;
        }
        size_t k = 0;
        for (size_t o = 0; o < sizeof OPS2 / sizeof *OPS2 && !k; o++)
            if (left >= 2 && p[0] == OPS2[o][0] && p[1] == OPS2[o][1]) k = 2;
        if (!k && strchr(OPS1, p[0]) && p[0]) k = 1;
        if (!k) {
            char what[8];
            snprintf(what, sizeof what, "%c", (unsigned char)p[0] >= 0x20 && (unsigned char)p[0] < 0x7F ? p[0] : '?');
            return lex_fail(L, "unexpected character '%s' in a tag", what);
        }
        if (k == 1 && (p[0] == '(' || p[0] == '[' || p[0] == '{')) depth++;
        if (k == 1 && (p[0] == ')' || p[0] == ']' || p[0] == '}') && depth > 0) depth--;
        jtok *t = push(L, TK_OP);
        if (!t) return -1;
        t->s = p, t->n = k;
        L->pos += k;
    }
}

/* after a block tag: trim_blocks removes one newline */
static void trim_newline(lexer *L) {
    if (L->pos < L->len && L->src[L->pos] == '\n') L->pos++, L->line++;
    else if (L->pos + 1 < L->len && L->src[L->pos] == '\r' && L->src[L->pos + 1] == '\n') L->pos += 2, L->line++;
}

/* {% raw %} just lexed: find the matching {% endraw %}; its text becomes one TK_TEXT */
static int lex_raw(lexer *L, int strip_after) {
    size_t from = L->pos;
    for (size_t i = from; i + 1 < L->len; i++) {
        if (L->src[i] != '{' || L->src[i + 1] != '%') continue;
        size_t j = i + 2;
        int strip_before = j < L->len && L->src[j] == '-';
        if (j < L->len && (L->src[j] == '-' || L->src[j] == '+')) j++;
        while (j < L->len && is_ws(L->src[j])) j++;
        if (L->len - j < 6 || memcmp(L->src + j, "endraw", 6)) continue;
        j += 6;
        while (j < L->len && is_ws(L->src[j])) j++;
        int strip_end = j < L->len && L->src[j] == '-', no_trim = j < L->len && L->src[j] == '+';
        if (strip_end || no_trim) j++;
        if (j + 1 >= L->len || L->src[j] != '%' || L->src[j + 1] != '}') continue;
        if (emit_text(L, from, i, strip_after, strip_before, 1)) return -1;
        count_lines(L, from, j + 2);
        L->pos = j + 2;
        if (!strip_end && !no_trim) trim_newline(L);
        return strip_end;
    }
    return lex_fail(L, "%s", "{% raw %} is not closed by {% endraw %}");
}

int sp_jx_lex(jx_arena *a, const char *src, size_t len, const char *name, jtok **toks, int *n, sp_err *err) {
    /* Jinja drops one newline at the very end of a template (keep_trailing_newline off) */
    if (len && src[len - 1] == '\n') len -= len > 1 && src[len - 2] == '\r' ? 2 : 1;
    lexer L = {.a = a, .src = src, .name = name, .len = len, .line = 1, .err = err};
    const char *nul = len ? memchr(src, 0, len) : NULL;
    if (nul) { /* Jinja reads the whole text; a C string would end here, so refuse it */
        count_lines(&L, 0, (size_t)(nul - src));
        return sp_err_set(err, "%s:%d: a NUL byte at offset %zu (a template is text)", name, L.line,
                          (size_t)(nul - src));
    }
    int strip_next = 0; /* the previous tag ended with '-' */
    while (L.pos < len) {
        char kind = 0;
        size_t tag = find_tag(&L, L.pos, &kind);
        int sign = tag + 2 < len ? src[tag + 2] : 0;
        int strip_before = tag < len && sign == '-';
        int lstrip = tag < len && kind != '{' && sign != '+';
        if (emit_text(&L, L.pos, tag, strip_next, strip_before, lstrip)) return -1;
        count_lines(&L, L.pos, tag);
        strip_next = 0;
        if (tag >= len) break;
        L.pos = tag + 2 + (sign == '-' || sign == '+');
        if (kind == '#') { /* comment */
            const char *end = NULL;
            for (size_t i = L.pos; i + 1 < len && !end; i++)
                if (src[i] == '#' && src[i + 1] == '}') end = src + i;
            if (!end) return lex_fail(&L, "%s", "comment '{#' is not closed by '#}'");
            size_t e = (size_t)(end - src);
            int strip_end = e > L.pos && src[e - 1] == '-', no_trim = e > L.pos && src[e - 1] == '+';
            count_lines(&L, L.pos, e + 2);
            L.pos = e + 2;
            strip_next = strip_end;
            if (!strip_end && !no_trim) trim_newline(&L);
            continue;
        }
        if (!push(&L, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN)) return -1;
        int first = L.n, strip_after = 0, no_trim = 0;
        if (lex_tag(&L, kind, &strip_after, &no_trim)) return -1;
        strip_next = strip_after;
        if (kind == '%' && !strip_after && !no_trim) trim_newline(&L);
        if (kind == '%' && L.n == first + 2 && L.t[first].k == TK_NAME && L.t[first].n == 3 &&
            !memcmp(L.t[first].s, "raw", 3)) {
            L.n = first - 1; /* drop {% raw %} itself */
            int r = lex_raw(&L, strip_after);
            if (r < 0) return -1;
            strip_next = r;
        }
    }
    if (!push(&L, TK_EOF)) return -1;
    *toks = L.t;
    *n = L.n;
    return 0;
}
