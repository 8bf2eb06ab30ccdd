/* jinja_value.c — the engine's values (jinja_internal.h): the arena they live in, equality and
 * ordering, and the three ways a value becomes text, each as Python writes it because that is
 * what Hugging Face's Jinja2 rendering prints:
 *   str()    `{{ v }}`: True, None, 1.0, ['a', 1], {'k': 'v'}; undefined renders ""
 *   repr()   strings inside lists and dicts: quoted with ' (or " when the text has a ' only)
 *   tojson   json.dumps(v, ensure_ascii=False): ", " and ": " separators, or indent=N. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

/* ---- arena ----------------------------------------------------------------------------- */
struct jx_chunk {
    jx_chunk *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

void *sp_jx_alloc(jx_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > a->cap || a->used > a->cap - n) return NULL;
    jx_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + size);
        if (!c) return NULL;
        c->next = a->head, c->used = 0, c->size = size;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void sp_jx_arena_free(jx_arena *a) {
    for (jx_chunk *c = a->head, *nx; c; c = nx) nx = c->next, free(c);
    a->head = NULL;
    a->used = 0;
}

int sp_jx_fail(jx_ctx *c, const char *fmt, ...) {
    char m[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return sp_err_set(c->err, "%s:%d: %s", c->name, c->line, m);
}

/* ---- constructors ---------------------------------------------------------------------- */
jv sp_jv_undef(void) { return (jv){.k = JV_UNDEF}; }
jv sp_jv_none(void) { return (jv){.k = JV_NONE}; }
jv sp_jv_bool(int b) { return (jv){.k = JV_BOOL, .u.b = !!b}; }
jv sp_jv_int(int64_t i) { return (jv){.k = JV_INT, .u.i = i}; }
jv sp_jv_float(double f) { return (jv){.k = JV_FLOAT, .u.f = f}; }
jv sp_jv_str(jstr *s) { return (jv){.k = JV_STR, .u.s = s}; }

jstr *sp_jx_str_new(jx_arena *a, const char *p, size_t n) {
    if (n > a->cap) return NULL;
    jstr *s = sp_jx_alloc(a, sizeof *s + n + 1);
    if (!s) return NULL;
    s->n = n;
    if (p && n) memcpy(s->p, p, n);
    return s;
}

int sp_jx_str_val(jx_ctx *c, const char *p, size_t n, jv *out) {
    jx_charge(c, n);
    jstr *s = sp_jx_str_new(c->a, p, n);
    if (!s) return sp_jx_fail(c, "the template needs more memory than allowed");
    *out = sp_jv_str(s);
    return 0;
}

jlist *sp_jx_list_new(jx_arena *a, int cap) {
    jlist *l = sp_jx_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap > 0 && !(l->v = sp_jx_alloc(a, (size_t)cap * sizeof *l->v))) return NULL;
    l->cap = cap > 0 ? cap : 0;
    return l;
}

int sp_jx_list_push(jx_ctx *c, jlist *l, jv v) {
    if (l->n == l->cap) {
        if (l->cap > (1 << 24)) return sp_jx_fail(c, "a list grew past 16M items");
        int nc = l->cap ? l->cap * 2 : 4;
        jv *nv = sp_jx_alloc(c->a, (size_t)nc * sizeof *nv);
        if (!nv) return sp_jx_fail(c, "the template needs more memory than allowed");
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
        l->v = nv, l->cap = nc;
    }
    l->v[l->n++] = v;
    return 0;
}

jdict *sp_jx_dict_new(jx_arena *a) { return sp_jx_alloc(a, sizeof(jdict)); }

static uint32_t key_hash(const char *k, size_t n) { /* FNV-1a */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 16777619u;
    return h;
}

int sp_jx_dict_find(const jdict *d, const char *k, size_t kn) {
    if (d->hidx && d->hn == d->n) {
        for (uint32_t h = key_hash(k, kn) & (uint32_t)(d->hcap - 1);; h = (h + 1) & (uint32_t)(d->hcap - 1)) {
            int i = d->hidx[h] - 1;
            if (i < 0) return -1;
            if (d->key[i]->n == kn && !memcmp(d->key[i]->p, k, kn)) return i;
        }
    }
    for (int i = 0; i < d->n; i++)
        if (d->key[i]->n == kn && !memcmp(d->key[i]->p, k, kn)) return i;
    return -1;
}

static void index_put(jdict *d, int i) {
    uint32_t h = key_hash(d->key[i]->p, d->key[i]->n) & (uint32_t)(d->hcap - 1);
    while (d->hidx[h]) h = (h + 1) & (uint32_t)(d->hcap - 1);
    d->hidx[h] = i + 1;
}

/* after appending key[n - 1]: keep the index of a dict past JX_DICT_SCAN keys (at most half full;
 * rebuilt when it grows, or when the dict was emptied for reuse and refilled) */
static int dict_index(jx_ctx *c, jdict *d) {
    if (d->n < JX_DICT_SCAN) return 0;
    if (d->hidx && d->hn == d->n - 1 && 2 * d->n <= d->hcap) {
        index_put(d, d->n - 1);
        d->hn = d->n;
        return 0;
    }
    int cap = 64;
    while (cap < 4 * d->n) cap *= 2;
    int *idx = sp_jx_alloc(c->a, (size_t)cap * sizeof *idx); /* zeroed: every slot empty */
    if (!idx) return sp_jx_fail(c, "the template needs more memory than allowed");
    d->hidx = idx, d->hcap = cap;
    for (int i = 0; i < d->n; i++) index_put(d, i);
    d->hn = d->n;
    return 0;
}

/* append key k (not already in d) */
static int dict_append(jx_ctx *c, jdict *d, const char *k, size_t kn, jv v) {
    if (d->n == d->cap) {
        if (d->cap > (1 << 22)) return sp_jx_fail(c, "a dict grew past 4M keys");
        int nc = d->cap ? d->cap * 2 : 4;
        jstr **nk = sp_jx_alloc(c->a, (size_t)nc * sizeof *nk);
        jv *nv = nk ? sp_jx_alloc(c->a, (size_t)nc * sizeof *nv) : NULL;
        if (!nv) return sp_jx_fail(c, "the template needs more memory than allowed");
        if (d->n) memcpy(nk, d->key, (size_t)d->n * sizeof *nk), memcpy(nv, d->val, (size_t)d->n * sizeof *nv);
        d->key = nk, d->val = nv, d->cap = nc;
    }
    jstr *ks = d->key[d->n]; /* a slot emptied for reuse (loop scopes) may hold this key already */
    if (!ks || ks->n != kn || memcmp(ks->p, k, kn)) ks = sp_jx_str_new(c->a, k, kn);
    if (!ks) return sp_jx_fail(c, "the template needs more memory than allowed");
    d->key[d->n] = ks;
    d->val[d->n++] = v;
    return dict_index(c, d);
}

int sp_jx_dict_set(jx_ctx *c, jdict *d, const char *k, size_t kn, jv v) {
    int i = sp_jx_dict_find(d, k, kn);
    if (i >= 0) {
        d->val[i] = v;
        return 0;
    }
    return dict_append(c, d, k, kn, v);
}

/* ---- truth, equality, order ------------------------------------------------------------ */
int sp_jv_truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s->n > 0;
    case JV_LIST: return v.u.l->n > 0;
    case JV_DICT: return v.u.d->n > 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num_of(jv v) { return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : v.u.b; }

int sp_jv_equal(jv x, jv y) {
    if (is_num(x) && is_num(y)) {
        if (x.k != JV_FLOAT && y.k != JV_FLOAT)
            return (x.k == JV_INT ? x.u.i : x.u.b) == (y.k == JV_INT ? y.u.i : y.u.b);
        return num_of(x) == num_of(y);
    }
    if (x.k != y.k) return 0;
    switch (x.k) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return x.u.s->n == y.u.s->n && !memcmp(x.u.s->p, y.u.s->p, x.u.s->n);
    case JV_LIST:
        if (x.u.l->n != y.u.l->n) return 0;
        for (int i = 0; i < x.u.l->n; i++)
            if (!sp_jv_equal(x.u.l->v[i], y.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (x.u.d->n != y.u.d->n) return 0;
        for (int i = 0; i < x.u.d->n; i++) {
            int j = sp_jx_dict_find(y.u.d, x.u.d->key[i]->p, x.u.d->key[i]->n);
            if (j < 0 || !sp_jv_equal(x.u.d->val[i], y.u.d->val[j])) return 0;
        }
        return 1;
    case JV_NS: return x.u.d == y.u.d;
    case JV_LOOP: return x.u.lp == y.u.lp;
    case JV_MACRO: return x.u.mac == y.u.mac;
    case JV_FUNC: return x.u.fn == y.u.fn;
    default: return 0;
    }
}

const char *sp_jv_kind_name(jv v) {
    static const char *names[] = {"an undefined value", "none", "a boolean", "an integer", "a float", "a string",
                                  "a list", "a dict", "a namespace", "a loop", "a macro", "a function"};
    return names[v.k];
}

int sp_jx_compare(jx_ctx *c, jv x, jv y, int *cmp) {
    if (is_num(x) && is_num(y)) {
        if (x.k == JV_INT && y.k == JV_INT) *cmp = (x.u.i > y.u.i) - (x.u.i < y.u.i);
        else *cmp = (num_of(x) > num_of(y)) - (num_of(x) < num_of(y));
        return 0;
    }
    if (x.k == JV_STR && y.k == JV_STR) { /* UTF-8 byte order is code point order */
        size_t n = x.u.s->n < y.u.s->n ? x.u.s->n : y.u.s->n;
        int r = memcmp(x.u.s->p, y.u.s->p, n);
        *cmp = r ? (r > 0) - (r < 0) : (x.u.s->n > y.u.s->n) - (x.u.s->n < y.u.s->n);
        return 0;
    }
    if (x.k == JV_LIST && y.k == JV_LIST) {
        for (int i = 0; i < x.u.l->n && i < y.u.l->n; i++) {
            if (sp_jx_compare(c, x.u.l->v[i], y.u.l->v[i], cmp)) return -1;
            if (*cmp) return 0;
        }
        *cmp = (x.u.l->n > y.u.l->n) - (x.u.l->n < y.u.l->n);
        return 0;
    }
    return sp_jx_fail(c, "cannot order %s and %s", sp_jv_kind_name(x), sp_jv_kind_name(y));
}

/* ---- text ------------------------------------------------------------------------------ */
int sp_jbuf_put(jx_ctx *c, jbuf *b, const char *p, size_t n) {
    jx_charge(c, n);
    if (n > c->out_cap || b->n > c->out_cap - n)
        return sp_jx_fail(c, "the rendered text exceeds %zu bytes", c->out_cap);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return sp_jx_fail(c, "out of memory");
        b->p = np, b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int puts_(jx_ctx *c, jbuf *b, const char *s) { return sp_jbuf_put(c, b, s, strlen(s)); }

/* Python's repr of a float: the shortest digits that read back the same, written fixed when
 * the exponent is in [-4, 16), else as d.ddde+XX; a whole number keeps ".0" */
static void float_repr(double f, char *out, size_t cap) {
    if (isnan(f)) { snprintf(out, cap, "nan"); return; }
    if (isinf(f)) { snprintf(out, cap, f > 0 ? "inf" : "-inf"); return; }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            o += (size_t)snprintf(out + o, cap - o, "0.");
            for (int k = 0; k < -exp - 1; k++) out[o++] = '0';
            snprintf(out + o, cap - o, "%s", digits);
        } else {
            for (int k = 0; k <= exp; k++) out[o++] = k < nd ? digits[k] : '0';
            out[o++] = '.';
            if (nd > exp + 1) snprintf(out + o, cap - o, "%s", digits + exp + 1);
            else snprintf(out + o, cap - o, "0");
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) o += (size_t)snprintf(out + o, cap - o, ".%s", digits + 1);
        snprintf(out + o, cap - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static int repr_str(jx_ctx *c, jbuf *b, const jstr *s) {
    int has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (sp_jbuf_put(c, b, &q, 1)) return -1;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        char esc[8];
        const char *rep = NULL;
        if (ch == '\\') rep = "\\\\";
        else if (ch == (unsigned char)q) rep = q == '\'' ? "\\'" : "\\\"";
        else if (ch == '\n') rep = "\\n";
        else if (ch == '\r') rep = "\\r";
        else if (ch == '\t') rep = "\\t";
        else if (ch < 0x20 || ch == 0x7F) snprintf(esc, sizeof esc, "\\x%02x", ch), rep = esc;
        if (rep ? puts_(c, b, rep) : sp_jbuf_put(c, b, (const char *)&s->p[i], 1)) return -1;
    }
    return sp_jbuf_put(c, b, &q, 1);
}

static int to_text(jx_ctx *c, jv v, jbuf *b, int repr, int depth) {
    char num[64];
    if (depth > JX_MAX_DEPTH) return sp_jx_fail(c, "a value nested too deeply to print");
    switch (v.k) {
    case JV_UNDEF: return repr ? puts_(c, b, "Undefined") : 0;
    case JV_NONE: return puts_(c, b, "None");
    case JV_BOOL: return puts_(c, b, v.u.b ? "True" : "False");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return puts_(c, b, num);
    case JV_FLOAT: float_repr(v.u.f, num, sizeof num); return puts_(c, b, num);
    case JV_STR: return repr ? repr_str(c, b, v.u.s) : sp_jbuf_put(c, b, v.u.s->p, v.u.s->n);
    case JV_LIST:
        if (puts_(c, b, v.u.l->tuple ? "(" : "[")) return -1;
        for (int i = 0; i < v.u.l->n; i++)
            if ((i && puts_(c, b, ", ")) || to_text(c, v.u.l->v[i], b, 1, depth + 1)) return -1;
        if (v.u.l->tuple && v.u.l->n == 1 && puts_(c, b, ",")) return -1;
        return puts_(c, b, v.u.l->tuple ? ")" : "]");
    case JV_DICT: case JV_NS:
        if (puts_(c, b, v.k == JV_NS ? "<Namespace {" : "{")) return -1;
        for (int i = 0; i < v.u.d->n; i++)
            if ((i && puts_(c, b, ", ")) || repr_str(c, b, v.u.d->key[i]) || puts_(c, b, ": ") ||
                to_text(c, v.u.d->val[i], b, 1, depth + 1))
                return -1;
        return puts_(c, b, v.k == JV_NS ? "}>" : "}");
    case JV_LOOP: return puts_(c, b, "<LoopContext>");
    case JV_MACRO: return puts_(c, b, "<Macro>");
    default: return puts_(c, b, "<built-in function>");
    }
}

int sp_jx_to_str(jx_ctx *c, jv v, jbuf *b) { return to_text(c, v, b, 0, 0); }

int sp_jx_stringify(jx_ctx *c, jv v, jv *out) {
    if (v.k == JV_STR) {
        *out = v;
        return 0;
    }
    jbuf b = {0};
    int rc = sp_jx_to_str(c, v, &b) || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int json_str(jx_ctx *c, jbuf *b, const char *p, size_t n) {
    if (puts_(c, b, "\"")) return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        if (sp_jbuf_put(c, b, p + run, i - run)) return -1;
        char esc[8];
        switch (ch) {
        case '"': strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        case '\b': strcpy(esc, "\\b"); break;
        case '\f': strcpy(esc, "\\f"); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", ch); break;
        }
        if (puts_(c, b, esc)) return -1;
        run = i + 1;
    }
    return sp_jbuf_put(c, b, p + run, n - run) || puts_(c, b, "\"");
}

static int json_newline(jx_ctx *c, jbuf *b, int indent, int level) {
    if (puts_(c, b, "\n")) return -1;
    for (int k = 0; k < indent * level; k++)
        if (puts_(c, b, " ")) return -1;
    return 0;
}

static int cmp_keys(const void *x, const void *y) {
    const jstr *a = **(jstr *const *const *)x, *b = **(jstr *const *const *)y;
    size_t n = a->n < b->n ? a->n : b->n;
    int r = memcmp(a->p, b->p, n);
    return r ? r : (a->n > b->n) - (a->n < b->n);
}

static int to_json(jx_ctx *c, jv v, int indent, int sort_keys, jbuf *b, int level) {
    char num[64];
    if (level > JX_MAX_DEPTH) return sp_jx_fail(c, "a value nested too deeply for tojson");
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return puts_(c, b, "null");
    case JV_BOOL: return puts_(c, b, v.u.b ? "true" : "false");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return puts_(c, b, num);
    case JV_FLOAT:
        if (isnan(v.u.f)) return puts_(c, b, "NaN");
        if (isinf(v.u.f)) return puts_(c, b, v.u.f > 0 ? "Infinity" : "-Infinity");
        float_repr(v.u.f, num, sizeof num);
        return puts_(c, b, num);
    case JV_STR: return json_str(c, b, v.u.s->p, v.u.s->n);
    case JV_LIST: {
        if (v.u.l->n == 0) return puts_(c, b, "[]");
        if (puts_(c, b, "[")) return -1;
        for (int i = 0; i < v.u.l->n; i++) {
            if (i && puts_(c, b, indent >= 0 ? "," : ", ")) return -1;
            if (indent >= 0 && json_newline(c, b, indent, level + 1)) return -1;
            if (to_json(c, v.u.l->v[i], indent, sort_keys, b, level + 1)) return -1;
        }
        if (indent >= 0 && json_newline(c, b, indent, level)) return -1;
        return puts_(c, b, "]");
    }
    case JV_DICT: case JV_NS: {
        const jdict *d = v.u.d;
        if (d->n == 0) return puts_(c, b, "{}");
        int *order = malloc((size_t)d->n * sizeof *order);
        jstr ***keys = sort_keys ? malloc((size_t)d->n * sizeof *keys) : NULL;
        if (!order || (sort_keys && !keys)) {
            free(order), free(keys);
            return sp_jx_fail(c, "out of memory");
        }
        for (int i = 0; i < d->n; i++) order[i] = i;
        if (sort_keys) {
            for (int i = 0; i < d->n; i++) keys[i] = &d->key[i];
            qsort(keys, (size_t)d->n, sizeof *keys, cmp_keys);
            for (int i = 0; i < d->n; i++) order[i] = (int)(keys[i] - d->key);
            free(keys);
        }
        int rc = puts_(c, b, "{");
        for (int k = 0; k < d->n && !rc; k++) {
            int i = order[k];
            rc = (k && puts_(c, b, indent >= 0 ? "," : ", ")) ||
                 (indent >= 0 && json_newline(c, b, indent, level + 1)) ||
                 json_str(c, b, d->key[i]->p, d->key[i]->n) || puts_(c, b, ": ") ||
                 to_json(c, d->val[i], indent, sort_keys, b, level + 1);
        }
        free(order);
        if (rc || (indent >= 0 && json_newline(c, b, indent, level))) return -1;
        return puts_(c, b, "}");
    }
    default: return sp_jx_fail(c, "tojson: %s has no JSON form", sp_jv_kind_name(v));
    }
}

int sp_jx_to_json(jx_ctx *c, jv v, int indent, int sort_keys, jbuf *b) { return to_json(c, v, indent, sort_keys, b, 0); }

int sp_jx_from_json(jx_ctx *c, json_t *j, jv *out, int depth) {
    if (depth > JX_MAX_DEPTH) return sp_jx_fail(c, "the context JSON is nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: *out = sp_jv_none(); return 0;
    case JSON_TRUE: *out = sp_jv_bool(1); return 0;
    case JSON_FALSE: *out = sp_jv_bool(0); return 0;
    case JSON_INTEGER: *out = sp_jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = sp_jv_float(json_real_value(j)); return 0;
    case JSON_STRING: return sp_jx_str_val(c, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        jlist *l = sp_jx_list_new(c->a, (int)json_array_size(j));
        if (!l) return sp_jx_fail(c, "the template needs more memory than allowed");
        for (size_t i = 0; i < json_array_size(j); i++)
            if (sp_jx_from_json(c, json_array_get(j, i), &l->v[l->n++], depth + 1)) return -1;
        *out = (jv){.k = JV_LIST, .u.l = l};
        return 0;
    }
    case JSON_OBJECT: {
        jdict *d = sp_jx_dict_new(c->a);
        if (!d) return sp_jx_fail(c, "the template needs more memory than allowed");
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) { /* JSON object keys are unique: no lookup needed */
            jv x;
            if (sp_jx_from_json(c, v, &x, depth + 1) || dict_append(c, d, k, strlen(k), x)) return -1;
        }
        *out = (jv){.k = JV_DICT, .u.d = d};
        return 0;
    }
    }
    return sp_jx_fail(c, "unknown JSON value");
}

size_t sp_jx_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t sp_jx_utf8_offset(const char *p, size_t n, int64_t cp) {
    size_t i = 0;
    for (int64_t k = 0; i < n; i++) {
        if (((unsigned char)p[i] & 0xC0) == 0x80) continue;
        if (k++ == cp) return i;
    }
    return n;
}
