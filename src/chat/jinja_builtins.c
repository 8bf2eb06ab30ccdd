/* jinja_builtins.c — the filters the engine knows and the string / list helpers they share
 * with the tests, methods and global functions (jinja_methods.c): the ones the published chat
 * templates of the Gemma, Qwen, Llama, Mistral, Phi and DeepSeek families call (list in
 * docs/CHAT_TEMPLATES.md). Each behaves as Jinja2 / Python do, e.g. `trim` and `split()` treat
 * Unicode whitespace as Python's str.isspace does, `upper` / `lower` map every code point, and
 * `length` counts code points. A name not here is reported by the caller as an unknown filter
 * with its line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "jinja_internal.h"

int sp_jx_oom(jx_ctx *c) { return sp_jx_fail(c, "the template needs more memory than allowed"); }

/* keyword argument `key`, else positional argument `pos` (counting from 0 after the value) */
jv sp_jx_arg(jv *args, const char **kw, int n, int pos, const char *key) {
    for (int i = 0; i < n; i++)
        if (kw && kw[i] && key && !strcmp(kw[i], key)) return args[i];
    int p = 0;
    for (int i = 0; i < n; i++) {
        if (kw && kw[i]) continue;
        if (p++ == pos) return args[i];
    }
    return sp_jv_undef();
}

int sp_jx_need_str(jx_ctx *c, jv v, const char *what) {
    if (v.k == JV_STR) return 0;
    return sp_jx_fail(c, "%s needs a string, not %s", what, sp_jv_kind_name(v));
}

jv sp_jx_list_val(jlist *l) { return (jv){.k = JV_LIST, .u.l = l}; }

/* ---- Unicode helpers --------------------------------------------------------------------- */
static int is_space_cp(int32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* byte length of the whitespace character at p[i] (0 when it is not one) */
static size_t space_at(const char *p, size_t n, size_t i) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &cp);
    return k > 0 && is_space_cp(cp) ? (size_t)k : 0;
}

/* byte length of the whitespace character ending at p[e) (0 when none) */
static size_t space_before(const char *p, size_t e) {
    size_t s = e;
    while (s > 0 && e - s < 4) {
        s--;
        if (((unsigned char)p[s] & 0xC0) != 0x80) break;
    }
    return s < e && space_at(p, e, s) == e - s ? e - s : 0;
}

static int in_set(const jstr *chars, const char *p, size_t len) {
    for (size_t i = 0; i + len <= chars->n; i++) {
        size_t k = 1;
        while (i + k < chars->n && ((unsigned char)chars->p[i + k] & 0xC0) == 0x80) k++;
        if (k == len && !memcmp(chars->p + i, p, len)) return 1;
        i += k - 1;
    }
    return 0;
}

/* strip: which 1 left, 2 right, 3 both; chars NULL = whitespace */
int sp_jx_strip(jx_ctx *c, jv v, const jstr *chars, int which, jv *out) {
    if (sp_jx_need_str(c, v, "strip")) return -1;
    const char *p = v.u.s->p;
    size_t a = 0, b = v.u.s->n, k;
    if (which & 1)
        for (;;) {
            if (chars) {
                k = a < b ? 1 : 0;
                while (a + k < b && ((unsigned char)p[a + k] & 0xC0) == 0x80) k++;
                if (!k || !in_set(chars, p + a, k)) break;
            } else if (a >= b || !(k = space_at(p, b, a))) break;
            a += k;
        }
    if (which & 2)
        for (;;) {
            if (chars) {
                if (b <= a) break;
                size_t s = b - 1;
                while (s > a && ((unsigned char)p[s] & 0xC0) == 0x80) s--;
                k = b - s;
                if (!in_set(chars, p + s, k)) break;
            } else if (b <= a || !(k = space_before(p + a, b - a))) break;
            b -= k;
        }
    return sp_jx_str_val(c, p + a, b - a, out);
}

int sp_jx_map_case(jx_ctx *c, jv v, int mode /* 0 lower 1 upper 2 capitalize 3 title */, jv *out) {
    if (sp_jx_need_str(c, v, mode == 0 ? "lower" : mode == 1 ? "upper" : mode == 2 ? "capitalize" : "title")) return -1;
    jbuf b = {0};
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)v.u.s->p;
    utf8proc_ssize_t n = (utf8proc_ssize_t)v.u.s->n, i = 0;
    int rc = 0, word_start = 1, first = 1;
    while (i < n && !rc) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
        if (k <= 0) { /* an invalid byte passes through */
            rc = sp_jbuf_put(c, &b, (const char *)p + i, 1);
            i++;
            continue;
        }
        int32_t m = cp;
        if (mode == 0) m = utf8proc_tolower(cp);
        else if (mode == 1) m = utf8proc_toupper(cp);
        else if (mode == 2) m = first ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
        else {
            int alpha = utf8proc_category(cp) <= UTF8PROC_CATEGORY_LO;
            m = !alpha ? cp : word_start ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
            word_start = !alpha;
        }
        first = 0;
        utf8proc_uint8_t enc[4];
        rc = sp_jbuf_put(c, &b, (const char *)enc, (size_t)utf8proc_encode_char(m, enc));
        i += k;
    }
    rc = rc || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

int sp_jx_replace(jx_ctx *c, jv v, jv old, jv new_, jv count, jv *out) {
    if (sp_jx_need_str(c, v, "replace") || sp_jx_need_str(c, old, "replace") || sp_jx_need_str(c, new_, "replace"))
        return -1;
    int64_t left = count.k == JV_INT ? count.u.i : -1;
    const jstr *s = v.u.s, *o = old.u.s;
    jbuf b = {0};
    int rc = 0;
    size_t i = 0;
    if (o->n == 0) { /* Python inserts between every character */
        for (size_t k = 0; k <= s->n && !rc; k++) {
            if (left != 0 && (k == s->n || ((unsigned char)s->p[k] & 0xC0) != 0x80)) {
                rc = sp_jbuf_put(c, &b, new_.u.s->p, new_.u.s->n);
                if (left > 0) left--;
            }
            if (k < s->n) rc = rc || sp_jbuf_put(c, &b, s->p + k, 1);
        }
    } else {
        while (!rc) {
            const char *hit = left == 0 ? NULL : memmem(s->p + i, s->n - i, o->p, o->n);
            if (!hit) break;
            size_t h = (size_t)(hit - s->p);
            rc = sp_jbuf_put(c, &b, s->p + i, h - i) || sp_jbuf_put(c, &b, new_.u.s->p, new_.u.s->n);
            i = h + o->n;
            if (left > 0) left--;
        }
        rc = rc || sp_jbuf_put(c, &b, s->p + i, s->n - i);
    }
    rc = rc || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

/* str.split(sep=None, maxsplit=-1) */
int sp_jx_split(jx_ctx *c, jv v, jv sep, jv maxsplit, jv *out) {
    if (sp_jx_need_str(c, v, "split")) return -1;
    if (sep.k != JV_UNDEF && sep.k != JV_NONE && sp_jx_need_str(c, sep, "split")) return -1;
    int64_t left = maxsplit.k == JV_INT ? maxsplit.u.i : -1;
    jlist *l = sp_jx_list_new(c->a, 0);
    if (!l) return sp_jx_oom(c);
    const char *p = v.u.s->p;
    size_t n = v.u.s->n, i = 0;
    jv piece;
    if (sep.k == JV_STR) {
        if (sep.u.s->n == 0) return sp_jx_fail(c, "split: empty separator");
        for (;;) {
            const char *hit = left == 0 ? NULL : memmem(p + i, n - i, sep.u.s->p, sep.u.s->n);
            size_t e = hit ? (size_t)(hit - p) : n;
            if (sp_jx_str_val(c, p + i, e - i, &piece) || sp_jx_list_push(c, l, piece)) return -1;
            if (!hit) break;
            i = e + sep.u.s->n;
            if (left > 0) left--;
        }
    } else { /* runs of whitespace; no empty pieces */
        for (;;) {
            size_t k;
            while (i < n && (k = space_at(p, n, i))) i += k;
            if (i >= n) break;
            size_t e = i;
            if (left == 0) e = n;
            else
                while (e < n && !space_at(p, n, e)) e++;
            size_t end = e;
            if (left == 0)
                while (end > i && (k = space_before(p + i, end - i))) end -= k;
            if (sp_jx_str_val(c, p + i, end - i, &piece) || sp_jx_list_push(c, l, piece)) return -1;
            if (left > 0) left--;
            i = e;
        }
    }
    *out = sp_jx_list_val(l);
    return 0;
}

static int length_of(jx_ctx *c, jv v, int64_t *n) {
    switch (v.k) {
    case JV_STR: jx_charge(c, v.u.s->n), *n = (int64_t)sp_jx_utf8_len(v.u.s->p, v.u.s->n); return 0;
    case JV_LIST: *n = v.u.l->n; return 0;
    case JV_DICT: case JV_NS: *n = v.u.d->n; return 0;
    case JV_UNDEF: *n = 0; return 0;
    default: return sp_jx_fail(c, "length: %s has no length", sp_jv_kind_name(v));
    }
}

/* value.a.b for selectattr / map / join(attribute=) / sort(attribute=) */
static jv attr_path(jv v, const jstr *path) {
    size_t i = 0;
    while (i <= path->n) {
        const char *dot = memchr(path->p + i, '.', path->n - i);
        size_t e = dot ? (size_t)(dot - path->p) : path->n;
        if (v.k == JV_DICT || v.k == JV_NS) {
            int k = sp_jx_dict_find(v.u.d, path->p + i, e - i);
            v = k >= 0 ? v.u.d->val[k] : sp_jv_undef();
        } else if (v.k == JV_LIST) {
            char num[24];
            size_t len = e - i < sizeof num - 1 ? e - i : sizeof num - 1;
            memcpy(num, path->p + i, len), num[len] = 0;
            char *endp;
            long idx = strtol(num, &endp, 10);
            v = *num && !*endp && idx >= 0 && idx < v.u.l->n ? v.u.l->v[idx] : sp_jv_undef();
        } else {
            v = sp_jv_undef();
        }
        i = e + 1;
    }
    return v;
}

int sp_jx_items_of(jx_ctx *c, jv v, jv *out) {
    jlist *l = sp_jx_list_new(c->a, 0);
    if (!l) return sp_jx_oom(c);
    if (v.k == JV_DICT || v.k == JV_NS) {
        for (int i = 0; i < v.u.d->n; i++) {
            jlist *pair = sp_jx_list_new(c->a, 2);
            if (!pair) return sp_jx_oom(c);
            pair->v[0] = sp_jv_str(v.u.d->key[i]), pair->v[1] = v.u.d->val[i], pair->n = 2, pair->tuple = 1;
            if (sp_jx_list_push(c, l, sp_jx_list_val(pair))) return -1;
        }
    } else if (v.k != JV_UNDEF) {
        return sp_jx_fail(c, "items: %s is not a dict", sp_jv_kind_name(v));
    }
    *out = sp_jx_list_val(l);
    return 0;
}

static int to_list(jx_ctx *c, jv v, jlist **out) {
    jlist *l = sp_jx_list_new(c->a, 0);
    if (!l) return sp_jx_oom(c);
    if (v.k == JV_LIST) {
        for (int i = 0; i < v.u.l->n; i++)
            if (sp_jx_list_push(c, l, v.u.l->v[i])) return -1;
    } else if (v.k == JV_DICT || v.k == JV_NS) {
        for (int i = 0; i < v.u.d->n; i++)
            if (sp_jx_list_push(c, l, sp_jv_str(v.u.d->key[i]))) return -1;
    } else if (v.k == JV_STR) {
        for (size_t i = 0; i < v.u.s->n;) {
            size_t e = i + 1;
            while (e < v.u.s->n && ((unsigned char)v.u.s->p[e] & 0xC0) == 0x80) e++;
            jv ch;
            if (sp_jx_str_val(c, v.u.s->p + i, e - i, &ch) || sp_jx_list_push(c, l, ch)) return -1;
            i = e;
        }
    } else if (v.k != JV_UNDEF) {
        return sp_jx_fail(c, "list: cannot make a list of %s", sp_jv_kind_name(v));
    }
    *out = l;
    return 0;
}

/* select / reject / selectattr / rejectattr: items whose (attribute) passes the test */
static int select_items(jx_ctx *c, jv *args, int nargs, int by_attr, int keep, jv *out) {
    jlist *src, *l = sp_jx_list_new(c->a, 0);
    if (!l || to_list(c, args[0], &src)) return l ? -1 : sp_jx_oom(c);
    int first = 1 + by_attr;
    if (by_attr && (nargs < 2 || args[1].k != JV_STR)) return sp_jx_fail(c, "selectattr / rejectattr need an attribute name");
    if (nargs > first && args[first].k != JV_STR) return sp_jx_fail(c, "select / reject: the test name must be a string");
    const char *test = nargs > first ? args[first].u.s->p : NULL;
    int ntest_args = nargs > first + 1 ? nargs - first - 1 : 0;
    jv *targs = sp_jx_alloc(c->a, (size_t)(ntest_args + 1) * sizeof *targs);
    if (!targs) return sp_jx_oom(c);
    for (int i = 0; i < src->n; i++) {
        jv v = by_attr ? attr_path(src->v[i], args[1].u.s) : src->v[i];
        int res = sp_jv_truthy(v), found = 1;
        if (test) {
            targs[0] = v;
            for (int k = 0; k < ntest_args; k++) targs[k + 1] = args[first + 1 + k];
            if (sp_jx_test(c, test, targs, ntest_args + 1, &res, &found)) return -1;
            if (!found) return sp_jx_fail(c, "unknown test '%s'", test);
        }
        if (res == keep && sp_jx_list_push(c, l, src->v[i])) return -1;
    }
    *out = sp_jx_list_val(l);
    return 0;
}

int sp_jx_join(jx_ctx *c, jv v, jv sep, jv attribute, jv *out) {
    jlist *l;
    if (to_list(c, v, &l)) return -1;
    if (sep.k != JV_UNDEF && sp_jx_need_str(c, sep, "join")) return -1;
    jbuf b = {0};
    int rc = 0;
    for (int i = 0; i < l->n && !rc; i++) {
        jv x = attribute.k == JV_STR ? attr_path(l->v[i], attribute.u.s) : l->v[i];
        rc = (i && sep.k == JV_STR && sp_jbuf_put(c, &b, sep.u.s->p, sep.u.s->n)) || sp_jx_to_str(c, x, &b);
    }
    rc = rc || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int to_int(jx_ctx *c, jv v, jv dflt, jv *out) {
    *out = dflt.k == JV_UNDEF ? sp_jv_int(0) : dflt;
    if (v.k == JV_INT) *out = v;
    else if (v.k == JV_BOOL) *out = sp_jv_int(v.u.b);
    else if (v.k == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) *out = sp_jv_int((int64_t)v.u.f);
    else if (v.k == JV_FLOAT && !isnan(v.u.f)) /* Python's int() is exact: no 64-bit integer holds it */
        return sp_jx_fail(c, "int: %g does not fit a 64-bit integer", v.u.f);
    else if (v.k == JV_STR && v.u.s->n < 64) {
        char num[64], *end;
        memcpy(num, v.u.s->p, v.u.s->n), num[v.u.s->n] = 0;
        long long x = strtoll(num, &end, 10);
        if (end != num && !*end) *out = sp_jv_int(x);
        else {
            double f = strtod(num, &end);
            if (end != num && !*end && isfinite(f) && fabs(f) < 9.2e18) *out = sp_jv_int((int64_t)f);
            else if (end != num && !*end && !isnan(f))
                return sp_jx_fail(c, "int: '%s' does not fit a 64-bit integer", num);
        }
    }
    return 0;
}

static int html_escape(jx_ctx *c, jv v, jv *out) {
    jv s;
    if (sp_jx_stringify(c, v, &s)) return -1;
    jbuf b = {0};
    int rc = 0;
    for (size_t i = 0; i < s.u.s->n && !rc; i++) {
        char ch = s.u.s->p[i];
        const char *rep = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
                        : ch == '\'' ? "&#39;" : NULL;
        rc = rep ? sp_jbuf_put(c, &b, rep, strlen(rep)) : sp_jbuf_put(c, &b, &ch, 1);
    }
    rc = rc || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

/* indent(width=4, first=false, blank=false) */
static int indent(jx_ctx *c, jv v, jv width, jv first, jv blank, jv *out) {
    jv s;
    if (sp_jx_stringify(c, v, &s)) return -1;
    jbuf pad = {0}, b = {0};
    int rc = 0;
    if (width.k == JV_STR) rc = sp_jbuf_put(c, &pad, width.u.s->p, width.u.s->n);
    else
        for (int64_t k = 0; k < (width.k == JV_INT ? width.u.i : 4) && k < 1024 && !rc; k++) rc = sp_jbuf_put(c, &pad, " ", 1);
    const char *p = s.u.s->p;
    size_t n = s.u.s->n, i = 0;
    int line = 0;
    while (!rc && i <= n) {
        const char *nl = memchr(p + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - p) : n;
        int empty = e == i;
        if ((line > 0 || sp_jv_truthy(first)) && (!empty || sp_jv_truthy(blank)) && pad.n) rc = sp_jbuf_put(c, &b, pad.p, pad.n);
        rc = rc || sp_jbuf_put(c, &b, p + i, e - i) || (nl && sp_jbuf_put(c, &b, "\n", 1));
        if (!nl) break;
        i = e + 1, line++;
    }
    rc = rc || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(pad.p), free(b.p);
    return rc ? -1 : 0;
}

static int sort_list(jx_ctx *c, jv v, jv reverse, jv attribute, jv *out) {
    jlist *l;
    if (to_list(c, v, &l)) return -1;
    for (int i = 1; i < l->n; i++) /* insertion sort: stable, and errors can stop it */
        for (int j = i; j > 0; j--) {
            jv a = l->v[j - 1], b = l->v[j];
            jv ka = attribute.k == JV_STR ? attr_path(a, attribute.u.s) : a;
            jv kb = attribute.k == JV_STR ? attr_path(b, attribute.u.s) : b;
            int cmp;
            if (sp_jx_compare(c, ka, kb, &cmp)) return -1;
            if (sp_jv_truthy(reverse) ? cmp >= 0 : cmp <= 0) break;
            l->v[j - 1] = b, l->v[j] = a;
            if (++c->steps > c->max_steps) return sp_jx_fail(c, "the template ran for too many steps");
        }
    *out = sp_jx_list_val(l);
    return 0;
}

/* ---- filters: one function per filter (or per family), found by name in `filters` ---------- */
typedef struct {
    jx_ctx *c;
    jv v;          /* the filtered value */
    jv *a;         /* the arguments after it; k[i] names a[i] (NULL: positional) */
    const char **k;
    int n;
    jv *args;      /* the value and the arguments together, as select_items reads them */
    int nargs;
    int mode;      /* the table's mode: which member of a family of filters */
} fcall;

static jv farg(const fcall *f, int pos, const char *key) { return sp_jx_arg(f->a, f->k, f->n, pos, key); }

static int f_trim(const fcall *f, jv *out) {
    jv chars = farg(f, 0, "chars");
    return sp_jx_strip(f->c, f->v, chars.k == JV_STR ? chars.u.s : NULL, 3, out);
}

static int f_tojson(const fcall *f, jv *out) {
    jv ind = farg(f, 0, "indent");
    jbuf b = {0};
    int rc = sp_jx_to_json(f->c, f->v, ind.k == JV_INT ? (int)(ind.u.i > 64 ? 64 : ind.u.i < 0 ? 0 : ind.u.i) : -1,
                           sp_jv_truthy(farg(f, 99, "sort_keys")), &b) ||
             sp_jx_str_val(f->c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int f_length(const fcall *f, jv *out) {
    int64_t len = 0;
    return length_of(f->c, f->v, &len) ? -1 : (*out = sp_jv_int(len), 0);
}

static int f_case(const fcall *f, jv *out) { return sp_jx_map_case(f->c, f->v, f->mode, out); }

static int f_replace(const fcall *f, jv *out) {
    return sp_jx_replace(f->c, f->v, farg(f, 0, "old"), farg(f, 1, "new"), farg(f, 2, "count"), out);
}

static int f_split(const fcall *f, jv *out) {
    return sp_jx_split(f->c, f->v, farg(f, 0, "sep"), farg(f, 1, "maxsplit"), out);
}

static int f_join(const fcall *f, jv *out) {
    return sp_jx_join(f->c, f->v, farg(f, 0, "d"), farg(f, 1, "attribute"), out);
}

/* mode 0 first, 1 last */
static int f_first_last(const fcall *f, jv *out) {
    jlist *l;
    if (to_list(f->c, f->v, &l)) return -1;
    *out = l->n ? l->v[f->mode == 0 ? 0 : l->n - 1] : sp_jv_undef();
    return 0;
}

static int f_default(const fcall *f, jv *out) {
    int use = f->v.k == JV_UNDEF || (sp_jv_truthy(farg(f, 1, "boolean")) && !sp_jv_truthy(f->v));
    if (!use) return *out = f->v, 0;
    jv dv = farg(f, 0, "default_value");
    if (dv.k == JV_UNDEF) return sp_jx_str_val(f->c, "", 0, out);
    return *out = dv, 0;
}

static int f_items(const fcall *f, jv *out) { return sp_jx_items_of(f->c, f->v, out); }

static int f_list(const fcall *f, jv *out) {
    jlist *l;
    if (to_list(f->c, f->v, &l)) return -1;
    return *out = sp_jx_list_val(l), 0;
}

static int f_string(const fcall *f, jv *out) { return sp_jx_stringify(f->c, f->v, out); }

static int f_int(const fcall *f, jv *out) { return to_int(f->c, f->v, farg(f, 0, "default"), out); }

static int f_float(const fcall *f, jv *out) {
    jv v = f->v, d = farg(f, 0, "default");
    *out = d.k == JV_UNDEF ? sp_jv_float(0) : d;
    if (v.k == JV_FLOAT) *out = v;
    else if (v.k == JV_INT || v.k == JV_BOOL) *out = sp_jv_float(v.k == JV_INT ? (double)v.u.i : v.u.b);
    else if (v.k == JV_STR && v.u.s->n < 64) {
        char num[64], *end;
        memcpy(num, v.u.s->p, v.u.s->n), num[v.u.s->n] = 0;
        double x = strtod(num, &end);
        if (end != num && !*end) *out = sp_jv_float(x);
    }
    return 0;
}

static int f_abs(const fcall *f, jv *out) {
    jv v = f->v;
    if (v.k == JV_FLOAT) return *out = sp_jv_float(fabs(v.u.f)), 0;
    if (v.k == JV_INT && v.u.i != INT64_MIN) return *out = sp_jv_int(v.u.i < 0 ? -v.u.i : v.u.i), 0;
    return sp_jx_fail(f->c, "abs needs a number, not %s", sp_jv_kind_name(v));
}

static int f_round(const fcall *f, jv *out) {
    jv v = f->v, pr = farg(f, 0, "precision"), method = farg(f, 1, "method");
    double x = v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : 0, scale = pow(10, pr.k == JV_INT ? (double)pr.u.i : 0);
    if (v.k != JV_FLOAT && v.k != JV_INT) return sp_jx_fail(f->c, "round needs a number, not %s", sp_jv_kind_name(v));
    const char *m = method.k == JV_STR ? method.u.s->p : "common";
    int common = strcmp(m, "ceil") && strcmp(m, "floor");
    if (!isfinite(x * scale) || scale == 0) {
        /* Python's round keeps a value without digits that far down (and gives 0 above its digits);
         * ceil / floor of value * 10**precision overflow there, an error in Jinja too */
        if (!common) return sp_jx_fail(f->c, "round: %g with precision %lld overflows", x,
                                        (long long)(pr.k == JV_INT ? pr.u.i : 0));
        return *out = sp_jv_float(scale == 0 && isfinite(x) ? copysign(0.0, x) : x), 0;
    }
    double r = !common ? (!strcmp(m, "ceil") ? ceil(x * scale) : floor(x * scale)) : round(x * scale);
    return *out = sp_jv_float(r / scale), 0;
}

static int f_safe(const fcall *f, jv *out) { return *out = f->v, 0; }

static int f_escape(const fcall *f, jv *out) { return html_escape(f->c, f->v, out); }

/* mode: 2 when by attribute, + 1 when the matching items are kept */
static int f_select(const fcall *f, jv *out) {
    return select_items(f->c, f->args, f->nargs, f->mode >> 1, f->mode & 1, out);
}

static int f_map(const fcall *f, jv *out) {
    jx_ctx *c = f->c;
    jlist *src, *l = sp_jx_list_new(c->a, 0);
    jv attr = farg(f, 99, "attribute"), fname = farg(f, 0, NULL);
    if (!l || to_list(c, f->v, &src)) return l ? -1 : sp_jx_oom(c);
    for (int i = 0; i < src->n; i++) {
        jv x = src->v[i];
        if (attr.k == JV_STR) {
            x = attr_path(x, attr.u.s);
            if (x.k == JV_UNDEF) x = farg(f, 99, "default");
        } else if (fname.k == JV_STR) {
            jv fa[1] = {x};
            const char *fk[1] = {NULL};
            int found = 0;
            if (sp_jx_filter(c, fname.u.s->p, fa, fk, 1, &x, &found)) return -1;
            if (!found) return sp_jx_fail(c, "unknown filter '%s'", fname.u.s->p);
        } else {
            return sp_jx_fail(c, "map needs attribute='name' or a filter name");
        }
        if (sp_jx_list_push(c, l, x)) return -1;
    }
    return *out = sp_jx_list_val(l), 0;
}

static int f_reverse(const fcall *f, jv *out) {
    jlist *l;
    if (to_list(f->c, f->v, &l)) return -1;
    for (int i = 0; i < l->n / 2; i++) {
        jv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i], l->v[l->n - 1 - i] = t;
    }
    if (f->v.k == JV_STR) return sp_jx_join(f->c, sp_jx_list_val(l), sp_jv_undef(), sp_jv_undef(), out);
    return *out = sp_jx_list_val(l), 0;
}

static int f_sort(const fcall *f, jv *out) {
    return sort_list(f->c, f->v, farg(f, 0, "reverse"), farg(f, 2, "attribute"), out);
}

static int f_unique(const fcall *f, jv *out) {
    jx_ctx *c = f->c;
    jlist *src, *l = sp_jx_list_new(c->a, 0);
    if (!l || to_list(c, f->v, &src)) return l ? -1 : sp_jx_oom(c);
    for (int i = 0; i < src->n; i++) {
        int seen = 0;
        for (int j = 0; j < l->n && !seen; j++) seen = sp_jv_equal(l->v[j], src->v[i]);
        if (!seen && sp_jx_list_push(c, l, src->v[i])) return -1;
    }
    return *out = sp_jx_list_val(l), 0;
}

static int f_sum(const fcall *f, jv *out) {
    jlist *l;
    if (to_list(f->c, f->v, &l)) return -1;
    int64_t si = 0;
    double sf = 0;
    int is_f = 0;
    for (int i = 0; i < l->n; i++) {
        jv x = l->v[i];
        if (x.k == JV_FLOAT) is_f = 1, sf += x.u.f;
        else if (x.k == JV_INT) {
            if (__builtin_add_overflow(si, x.u.i, &si)) return sp_jx_fail(f->c, "integer overflow in sum");
        } else return sp_jx_fail(f->c, "sum needs numbers, not %s", sp_jv_kind_name(x));
    }
    return *out = is_f ? sp_jv_float(sf + (double)si) : sp_jv_int(si), 0;
}

/* mode 0 min, 1 max */
static int f_min_max(const fcall *f, jv *out) {
    jlist *l;
    if (to_list(f->c, f->v, &l)) return -1;
    *out = sp_jv_undef();
    for (int i = 0; i < l->n; i++) {
        int cmp = 0;
        if (i && sp_jx_compare(f->c, l->v[i], *out, &cmp)) return -1;
        if (!i || (f->mode == 0 ? cmp < 0 : cmp > 0)) *out = l->v[i];
    }
    return 0;
}

/* (key, value) pairs by key */
static int f_dictsort(const fcall *f, jv *out) {
    jv pairs, rev = farg(f, 2, "reverse");
    if (sp_jx_items_of(f->c, f->v, &pairs)) return -1;
    jstr *key0 = sp_jx_str_new(f->c->a, "0", 1); /* sort by item 0 of each pair */
    if (!key0) return sp_jx_oom(f->c);
    return sort_list(f->c, pairs, rev, sp_jv_str(key0), out);
}

/* "%s and %d" | format(a, b): printf-style with %s, %d, %i, %% */
static int f_format(const fcall *f, jv *out) {
    jx_ctx *c = f->c;
    jv v = f->v;
    if (sp_jx_need_str(c, v, "format")) return -1;
    jbuf b = {0};
    int rc = 0, next_arg = 0;
    for (size_t i = 0; i < v.u.s->n && !rc; i++) {
        char ch = v.u.s->p[i];
        if (ch != '%' || i + 1 >= v.u.s->n) {
            rc = sp_jbuf_put(c, &b, &ch, 1);
            continue;
        }
        char fc = v.u.s->p[++i];
        if (fc == '%') rc = sp_jbuf_put(c, &b, "%", 1);
        else if ((fc == 's' || fc == 'd' || fc == 'i') && next_arg < f->n) rc = sp_jx_to_str(c, f->a[next_arg++], &b);
        else rc = sp_jx_fail(c, "format: unsupported or unmatched '%%%c'", fc);
    }
    rc = rc || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int f_indent(const fcall *f, jv *out) {
    return indent(f->c, f->v, farg(f, 0, "width"), farg(f, 1, "first"), farg(f, 2, "blank"), out);
}

static int f_wordcount(const fcall *f, jv *out) {
    jv parts;
    if (sp_jx_need_str(f->c, f->v, "wordcount") || sp_jx_split(f->c, f->v, sp_jv_undef(), sp_jv_undef(), &parts))
        return -1;
    return *out = sp_jv_int(parts.u.l->n), 0;
}

/* name, function, mode, text: a text filter reads its value as str(value), as Jinja's do
 * (undefined is "") */
static const struct {
    const char *name;
    int (*fn)(const fcall *f, jv *out);
    int mode, text;
} filters[] = {
    {"trim", f_trim, 0, 1},          {"tojson", f_tojson, 0, 0},       {"length", f_length, 0, 0},
    {"count", f_length, 0, 0},       {"lower", f_case, 0, 1},          {"upper", f_case, 1, 1},
    {"capitalize", f_case, 2, 1},    {"title", f_case, 3, 1},          {"replace", f_replace, 0, 1},
    {"split", f_split, 0, 0},        {"join", f_join, 0, 0},           {"first", f_first_last, 0, 0},
    {"last", f_first_last, 1, 0},    {"default", f_default, 0, 0},     {"d", f_default, 0, 0},
    {"items", f_items, 0, 0},        {"list", f_list, 0, 0},           {"string", f_string, 0, 0},
    {"int", f_int, 0, 0},            {"float", f_float, 0, 0},         {"abs", f_abs, 0, 0},
    {"round", f_round, 0, 0},        {"safe", f_safe, 0, 0},           {"escape", f_escape, 0, 0},
    {"e", f_escape, 0, 0},           {"selectattr", f_select, 3, 0},   {"rejectattr", f_select, 2, 0},
    {"select", f_select, 1, 0},      {"reject", f_select, 0, 0},       {"map", f_map, 0, 0},
    {"reverse", f_reverse, 0, 0},    {"sort", f_sort, 0, 0},           {"unique", f_unique, 0, 0},
    {"sum", f_sum, 0, 0},            {"min", f_min_max, 0, 0},         {"max", f_min_max, 1, 0},
    {"dictsort", f_dictsort, 0, 0},  {"format", f_format, 0, 0},       {"indent", f_indent, 0, 1},
    {"wordcount", f_wordcount, 0, 1},
};

int sp_jx_filter(jx_ctx *c, const char *name, jv *args, const char **kw, int nargs, jv *out, int *found) {
    for (size_t i = 0; i < sizeof filters / sizeof *filters; i++) {
        if (strcmp(name, filters[i].name)) continue;
        fcall f = {c, args[0], args + 1, kw + 1, nargs - 1, args, nargs, filters[i].mode};
        *found = 1;
        if (filters[i].text && f.v.k != JV_STR && sp_jx_stringify(c, f.v, &f.v)) return -1;
        return filters[i].fn(&f, out);
    }
    *found = 0;
    return 0;
}
