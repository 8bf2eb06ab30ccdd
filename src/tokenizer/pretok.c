/* pretok.c — the HF pre-tokenizers (docs/TOKENIZER.md §2 step 3, docs/TOKENIZER.md §5): Split (literal or PCRE2
 * regex, every behavior, invert), ByteLevel (prefix space, GPT-2 regex), Metaspace, Digits,
 * WhitespaceSplit, and the GGUF gemma4 newline-run split; applied in order.
 *
 * Words are ranges into one arena. Splits only subdivide ranges; ops that rewrite text
 * (Metaspace, a prefix space) append the new text to the arena. ByteLevel's byte -> char
 * mapping is not done here: the model maps raw bytes itself (t->byte_level, bpe.c). */
#include <stdlib.h>
#include <utf8proc.h>

#include "tok_internal.h"

/* GPT-2 (also llama.cpp "gpt-2"), Qwen2 and Llama-3 patterns (docs/TOKENIZER.md §5) */
const char SP_TOK_REGEX_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char SP_TOK_REGEX_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char SP_TOK_REGEX_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

pcre2_code *sp_tok_regex_compile(const char *pattern, size_t len, sp_err *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        sp_err_set(err, "regex /%.*s/ does not compile at offset %zu: %s",
                   (int)(len > 200 ? 200 : len), pattern, (size_t)eo, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* best effort: falls back to the interpreter */
    return re;
}

void sp_tok_pre_free(tok_pre *p) {
    if (p->re) pcre2_code_free(p->re);
    free(p->lit);
    memset(p, 0, sizeof *p);
}

void sp_tok_pieces_free(tok_pieces *w) {
    sp_tok_buf_free(&w->arena);
    free(w->p);
    memset(w, 0, sizeof *w);
}

static int push(tok_pieces *w, uint32_t off, uint32_t len) {
    if (!len) return 0;
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 64;
        tok_piece *p = realloc(w->p, (size_t)cap * sizeof *p);
        if (!p) return -1;
        w->p = p;
        w->cap = cap;
    }
    w->p[w->n++] = (tok_piece){off, len};
    return 0;
}

/* pcre2_match with the default limits first; a match that runs into PCRE2's default match
 * limit (10 M backtracking steps: a 10 MB run of spaces against "\s*[\r\n]+|\s+(?!\S)" takes
 * one step per byte) is retried once with a limit proportional to the rest of the subject, so
 * a long run costs time linear in its length instead of failing. */
int sp_tok_regex_match(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t from) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, 0, md, NULL);
    if (rc != PCRE2_ERROR_MATCHLIMIT && rc != PCRE2_ERROR_JIT_STACKLIMIT && rc != PCRE2_ERROR_DEPTHLIMIT &&
        rc != PCRE2_ERROR_HEAPLIMIT)
        return rc;
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (!mc) return PCRE2_ERROR_NOMEMORY;
    size_t rest = n - from, limit = rest < (UINT32_MAX - 10000000u) / 64 ? 64 * rest + 10000000u : UINT32_MAX;
    pcre2_set_match_limit(mc, (uint32_t)limit);
    pcre2_set_depth_limit(mc, (uint32_t)limit);
    rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_JIT, md, mc);
    pcre2_match_context_free(mc);
    return rc;
}

/* next match of re in s[from..n): 1 found (ms, me), 0 none, -1 error */
static int regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n,
                      size_t from, size_t *ms, size_t *me) {
    int rc = sp_tok_regex_match(re, md, s, n, from);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return -1;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* one split interval: [a, b) and whether it is a match */
typedef struct {
    uint32_t a, b;
    int match;
} span;

typedef struct {
    span *v;
    int n, cap;
} spans;

static int span_push(spans *s, uint32_t a, uint32_t b, int match) {
    if (a == b) return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        span *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (span){a, b, match};
    return 0;
}

/* matches of op's pattern inside piece [off, off+len) of the arena, as spans */
static int find_spans(const tok_pre *op, pcre2_match_data *md, const char *base, uint32_t off,
                      uint32_t len, spans *out, sp_err *err) {
    out->n = 0;
    const char *s = base + off;
    uint32_t prev = 0;
    if (op->re) {
        size_t pos = 0, ms, me;
        while (pos <= len) {
            int rc = regex_next(op->re, md, s, len, pos, &ms, &me);
            if (rc < 0) return sp_err_set(err, "pre-tokenizer regex failed on a %u-byte piece", len);
            if (rc == 0) break;
            if (me == ms) { /* empty match: a cut at ms (HF and llama.cpp split there), step one character */
                if (ms > prev && span_push(out, off + prev, off + (uint32_t)ms, 0)) return sp_err_set(err, "out of memory");
                if (ms > prev) prev = (uint32_t)ms;
                if (ms >= len) break;
                int k;
                sp_tok_utf8_get(s + ms, len - ms, &k);
                pos = ms + (size_t)k;
                continue;
            }
            if (span_push(out, off + prev, off + (uint32_t)ms, 0) ||
                span_push(out, off + (uint32_t)ms, off + (uint32_t)me, 1))
                return sp_err_set(err, "out of memory");
            prev = (uint32_t)me;
            pos = me;
        }
    } else if (op->lit_len) {
        for (uint32_t i = 0; i + op->lit_len <= len;) {
            if (s[i] == op->lit[0] && !memcmp(s + i, op->lit, op->lit_len)) {
                if (span_push(out, off + prev, off + i, 0) ||
                    span_push(out, off + i, off + i + (uint32_t)op->lit_len, 1))
                    return sp_err_set(err, "out of memory");
                i += (uint32_t)op->lit_len;
                prev = i;
            } else {
                i++;
            }
        }
    }
    if (span_push(out, off + prev, off + len, 0)) return sp_err_set(err, "out of memory");
    return 0;
}

/* HF SplitDelimiterBehavior over the spans of one piece */
static int apply_behavior(tok_split_behavior b, int invert, spans *sp, tok_pieces *out) {
    if (invert)
        for (int i = 0; i < sp->n; i++) sp->v[i].match = !sp->v[i].match;
    int rc = 0;
    switch (b) {
    case SPLIT_REMOVED:
        for (int i = 0; i < sp->n && !rc; i++)
            if (!sp->v[i].match) rc = push(out, sp->v[i].a, sp->v[i].b - sp->v[i].a);
        break;
    case SPLIT_ISOLATED:
        for (int i = 0; i < sp->n && !rc; i++) rc = push(out, sp->v[i].a, sp->v[i].b - sp->v[i].a);
        break;
    case SPLIT_MERGED_PREV: { /* a match closes the current piece */
        uint32_t start = sp->n ? sp->v[0].a : 0;
        for (int i = 0; i < sp->n && !rc; i++)
            if (sp->v[i].match) {
                rc = push(out, start, sp->v[i].b - start);
                start = sp->v[i].b;
            }
        if (sp->n && !rc) rc = push(out, start, sp->v[sp->n - 1].b - start);
        break;
    }
    case SPLIT_MERGED_NEXT: { /* a match opens a new piece */
        uint32_t start = sp->n ? sp->v[0].a : 0;
        for (int i = 0; i < sp->n && !rc; i++)
            if (sp->v[i].match && sp->v[i].a > start) {
                rc = push(out, start, sp->v[i].a - start);
                start = sp->v[i].a;
            }
        if (sp->n && !rc) rc = push(out, start, sp->v[sp->n - 1].b - start);
        break;
    }
    case SPLIT_CONTIGUOUS: { /* adjacent matches fuse */
        for (int i = 0; i < sp->n && !rc;) {
            int j = i + 1;
            if (sp->v[i].match)
                while (j < sp->n && sp->v[j].match) j++;
            rc = push(out, sp->v[i].a, sp->v[j - 1].b - sp->v[i].a);
            i = j;
        }
        break;
    }
    }
    return rc;
}

static int is_space_char(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Rust's char::is_numeric (HF Digits): general category Nd, Nl or No */
static int is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    int cat = utf8proc_category((utf8proc_int32_t)c);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

/* character-class split: spans where cls(c) changes; used by Digits, WhitespaceSplit,
 * newline runs. isolated_each: every classed char is its own span. */
static int class_spans(const char *base, uint32_t off, uint32_t len, int kind, spans *out) {
    out->n = 0;
    const char *s = base + off;
    uint32_t i = 0, start = 0;
    int cur = -1;
    while (i < len) {
        int k;
        uint32_t c = sp_tok_utf8_get(s + i, len - i, &k);
        int cls = (kind == 0 || kind == 3) ? is_numeric(c) : kind == 1 ? is_space_char(c) : c == '\n';
        if (cur >= 0 && (cls != cur || (kind == 3 && cls))) {
            if (span_push(out, off + start, off + i, cur)) return -1;
            start = i;
        }
        cur = cls;
        i += (uint32_t)k;
    }
    if (cur >= 0 && span_push(out, off + start, off + len, cur)) return -1;
    return 0;
}

/* ByteLevel on the piece off..off+len of w's arena: a space prefix (a copy of the piece at
 * the arena's end), then the GPT-2 regex split when op->re */
static int pre_bytelevel(const tok_pre *op, pcre2_match_data *md, tok_pieces *w, uint32_t off, uint32_t len,
                         spans *sp, tok_pieces *next, sp_err *err) {
    if (op->add_prefix_space && w->arena.p[off] != ' ') {
        uint32_t noff = (uint32_t)w->arena.n;
        if (sp_tok_buf_reserve(&w->arena, (size_t)len + 1) || /* no realloc below */
            sp_tok_buf_put(&w->arena, " ", 1) ||
            sp_tok_buf_put(&w->arena, w->arena.p + off, len))
            return sp_err_set(err, "out of memory");
        off = noff;
        len++;
    }
    if (op->re) {
        int rc = find_spans(op, md, w->arena.p, off, len, sp, err);
        if (!rc && apply_behavior(SPLIT_ISOLATED, 0, sp, next)) rc = sp_err_set(err, "out of memory");
        return rc;
    }
    return push(next, off, len) ? sp_err_set(err, "out of memory") : 0;
}

/* Metaspace on the piece off..off+len: a copy at the arena's end with " " replaced by op->lit
 * (and op->lit prepended when prepend and the piece does not start with it), then split
 * before each op->lit when op->split */
static int pre_metaspace(const tok_pre *op, tok_pieces *w, uint32_t off, uint32_t len, int prepend, spans *sp,
                         tok_pieces *next, sp_err *err) {
    int rc = 0;
    uint32_t noff = (uint32_t)w->arena.n;
    if (sp_tok_buf_reserve(&w->arena, ((size_t)len + 1) * (op->lit_len + 1))) return sp_err_set(err, "out of memory");
    if (prepend && !(len >= op->lit_len && !memcmp(w->arena.p + off, op->lit, op->lit_len)))
        rc = sp_tok_buf_put(&w->arena, op->lit, op->lit_len);
    for (uint32_t j = 0; j < len && !rc; j++) {
        char c = w->arena.p[off + j];
        rc = c == ' ' ? sp_tok_buf_put(&w->arena, op->lit, op->lit_len) : sp_tok_buf_put(&w->arena, &c, 1);
    }
    if (rc) return sp_err_set(err, "out of memory");
    uint32_t nlen = (uint32_t)w->arena.n - noff;
    if (op->split) {
        tok_pre lit = {.kind = PRE_SPLIT, .lit = op->lit, .lit_len = op->lit_len};
        rc = find_spans(&lit, NULL, w->arena.p, noff, nlen, sp, err);
        if (!rc && apply_behavior(SPLIT_MERGED_NEXT, 0, sp, next)) rc = sp_err_set(err, "out of memory");
        return rc;
    }
    return push(next, noff, nlen) ? sp_err_set(err, "out of memory") : 0;
}

/* apply pre-tokenizer op to piece i of w, appending the resulting pieces to next */
static int pre_piece(const tok_pre *op, pcre2_match_data *md, tok_pieces *w, int i, int first, spans *sp,
                     tok_pieces *next, sp_err *err) {
    uint32_t off = w->p[i].off, len = w->p[i].len;
    int rc = 0;
    switch (op->kind) {
    case PRE_SPLIT:
        rc = find_spans(op, md, w->arena.p, off, len, sp, err);
        if (!rc && apply_behavior(op->behavior, op->invert, sp, next)) rc = sp_err_set(err, "out of memory");
        break;
    case PRE_BYTELEVEL:
        rc = pre_bytelevel(op, md, w, off, len, sp, next, err);
        break;
    case PRE_METASPACE: {
        int prepend = op->prepend_scheme == PREPEND_ALWAYS || (op->prepend_scheme == PREPEND_FIRST && first && i == 0);
        rc = pre_metaspace(op, w, off, len, prepend, sp, next, err);
        break;
    }
    case PRE_DIGITS:
        if (class_spans(w->arena.p, off, len, op->individual_digits ? 3 : 0, sp) ||
            apply_behavior(op->individual_digits ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS, 0, sp, next))
            rc = sp_err_set(err, "out of memory");
        break;
    case PRE_WHITESPACE_SPLIT:
        if (class_spans(w->arena.p, off, len, 1, sp) || apply_behavior(SPLIT_REMOVED, 0, sp, next))
            rc = sp_err_set(err, "out of memory");
        break;
    case PRE_NEWLINE_RUNS:
        if (class_spans(w->arena.p, off, len, 2, sp) || apply_behavior(SPLIT_ISOLATED, 0, sp, next))
            rc = sp_err_set(err, "out of memory");
        break;
    }
    return rc;
}

int sp_tok_pretokenize(const tok_tokenizer *t, const char *s, size_t n, int first, tok_pieces *w,
                    sp_err *err) {
    w->n = 0;
    w->arena.n = 0;
    if (n > UINT32_MAX / 4) return sp_err_set(err, "%s: text too long (%zu bytes)", t->source, n);
    if (sp_tok_buf_put(&w->arena, s, n) || push(w, 0, (uint32_t)n)) return sp_err_set(err, "out of memory");
    tok_pieces next = {0};
    spans sp = {0};
    pcre2_match_data *md = NULL;
    int rc = 0;
    for (int o = 0; o < t->n_pre && !rc; o++) {
        const tok_pre *op = &t->pre[o];
        next.n = 0;
        const pcre2_code *re = op->re;
        if (re) {
            if (md) pcre2_match_data_free(md);
            md = pcre2_match_data_create_from_pattern(re, NULL);
            if (!md) {
                rc = sp_err_set(err, "out of memory");
                break;
            }
        }
        for (int i = 0; i < w->n && !rc; i++) rc = pre_piece(op, md, w, i, first, &sp, &next, err);
        /* next's ranges index w's arena: swap the lists, keep the arena */
        tok_piece *p = w->p;
        int cap = w->cap;
        w->p = next.p;
        w->n = next.n;
        w->cap = next.cap;
        next.p = p;
        next.cap = cap;
        next.n = 0;
    }
    if (md) pcre2_match_data_free(md);
    free(sp.v);
    free(next.p);
    return rc;
}
