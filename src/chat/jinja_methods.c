/* jinja_methods.c — the tests (`x is odd`), methods (`s.strip()`, `d.items()`, `loop.cycle()`)
 * and global functions (range, namespace, dict, raise_exception, strftime_now) the engine knows;
 * the filters and the string / list helpers they share are in jinja_builtins.c. Each behaves as
 * Jinja2 / Python do. A name not here is reported by the caller as an unknown test / method with
 * its line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_internal.h"

#define NAMED(s) (!strcmp(name, s))

/* s.startswith(what) / s.endswith(what); what may be a list of prefixes / suffixes */
static int affix(jx_ctx *c, jv v, jv what, int end, jv *out) {
    if (sp_jx_need_str(c, v, end ? "endswith" : "startswith")) return -1;
    int hit = 0;
    int n = what.k == JV_LIST ? what.u.l->n : 1;
    for (int i = 0; i < n && !hit; i++) {
        jv w = what.k == JV_LIST ? what.u.l->v[i] : what;
        if (sp_jx_need_str(c, w, end ? "endswith" : "startswith")) return -1;
        size_t wn = w.u.s->n, sn = v.u.s->n;
        hit = wn <= sn && !memcmp(v.u.s->p + (end ? sn - wn : 0), w.u.s->p, wn);
    }
    *out = sp_jv_bool(hit);
    return 0;
}

int sp_jx_test(jx_ctx *c, const char *name, jv *args, int nargs, int *res, int *found) {
    jv v = args[0], o = nargs > 1 ? args[1] : sp_jv_undef();
    int cmp;
    *found = 1;
    if (NAMED("defined")) *res = v.k != JV_UNDEF;
    else if (NAMED("undefined")) *res = v.k == JV_UNDEF;
    else if (NAMED("none")) *res = v.k == JV_NONE;
    else if (NAMED("string")) *res = v.k == JV_STR;
    else if (NAMED("mapping")) *res = v.k == JV_DICT;
    else if (NAMED("iterable")) *res = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT;
    else if (NAMED("sequence")) *res = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT;
    else if (NAMED("number")) *res = v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL;
    else if (NAMED("integer")) *res = v.k == JV_INT;
    else if (NAMED("float")) *res = v.k == JV_FLOAT;
    else if (NAMED("boolean")) *res = v.k == JV_BOOL;
    else if (NAMED("true")) *res = v.k == JV_BOOL && v.u.b;
    else if (NAMED("false")) *res = v.k == JV_BOOL && !v.u.b;
    else if (NAMED("callable")) *res = v.k == JV_MACRO || v.k == JV_FUNC;
    else if (NAMED("equalto") || NAMED("eq") || NAMED("==")) *res = sp_jv_equal(v, o);
    else if (NAMED("ne") || NAMED("!=")) *res = !sp_jv_equal(v, o);
    else if (NAMED("sameas")) *res = v.k == o.k && sp_jv_equal(v, o);
    else if (NAMED("lt") || NAMED("le") || NAMED("gt") || NAMED("ge") || NAMED("lessthan") || NAMED("greaterthan")) {
        if (sp_jx_compare(c, v, o, &cmp)) return -1;
        *res = NAMED("lt") || NAMED("lessthan") ? cmp < 0 : NAMED("le") ? cmp <= 0 : NAMED("ge") ? cmp >= 0 : cmp > 0;
    } else if (NAMED("in")) {
        *res = 0;
        if (o.k == JV_LIST)
            for (int i = 0; i < o.u.l->n && !*res; i++) *res = sp_jv_equal(v, o.u.l->v[i]);
        else if (o.k == JV_STR && v.k == JV_STR) *res = memmem(o.u.s->p, o.u.s->n, v.u.s->p, v.u.s->n) != NULL || !v.u.s->n;
        else if (o.k == JV_DICT && v.k == JV_STR) *res = sp_jx_dict_find(o.u.d, v.u.s->p, v.u.s->n) >= 0;
    } else if (NAMED("odd") || NAMED("even") || NAMED("divisibleby")) {
        if (v.k != JV_INT) return sp_jx_fail(c, "test '%s' needs an integer, not %s", name, sp_jv_kind_name(v));
        if (NAMED("divisibleby")) {
            if (o.k != JV_INT || o.u.i == 0) return sp_jx_fail(c, "divisibleby needs a non-zero integer");
            *res = o.u.i == -1 || v.u.i % o.u.i == 0;
        } else {
            *res = (v.u.i % 2 != 0) == NAMED("odd");
        }
    } else if (NAMED("lower") || NAMED("upper")) {
        jv m;
        if (sp_jx_need_str(c, v, name) || sp_jx_map_case(c, v, NAMED("upper"), &m)) return -1;
        *res = sp_jv_equal(m, v);
    } else {
        *found = 0;
    }
    return 0;
}

int sp_jx_method(jx_ctx *c, jv self, const char *name, jv *a, const char **k, int n, jv *out, int *found) {
    *found = 1;
    if (self.k == JV_STR) {
        if (NAMED("strip") || NAMED("lstrip") || NAMED("rstrip")) {
            jv chars = sp_jx_arg(a, k, n, 0, "chars");
            if (chars.k != JV_UNDEF && chars.k != JV_NONE && sp_jx_need_str(c, chars, name)) return -1;
            return sp_jx_strip(c, self, chars.k == JV_STR ? chars.u.s : NULL, name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3, out);
        }
        if (NAMED("split"))
            return sp_jx_split(c, self, sp_jx_arg(a, k, n, 0, "sep"), sp_jx_arg(a, k, n, 1, "maxsplit"), out);
        if (NAMED("startswith") || NAMED("endswith"))
            return affix(c, self, sp_jx_arg(a, k, n, 0, NULL), name[0] == 'e', out);
        if (NAMED("upper")) return sp_jx_map_case(c, self, 1, out);
        if (NAMED("lower")) return sp_jx_map_case(c, self, 0, out);
        if (NAMED("capitalize")) return sp_jx_map_case(c, self, 2, out);
        if (NAMED("title")) return sp_jx_map_case(c, self, 3, out);
        if (NAMED("replace"))
            return sp_jx_replace(c, self, sp_jx_arg(a, k, n, 0, NULL), sp_jx_arg(a, k, n, 1, NULL),
                                 sp_jx_arg(a, k, n, 2, "count"), out);
        if (NAMED("find") || NAMED("rfind") || NAMED("count")) {
            jv sub = sp_jx_arg(a, k, n, 0, NULL);
            if (sp_jx_need_str(c, sub, name)) return -1;
            const jstr *s = self.u.s;
            int64_t pos = -1, count = 0;
            jx_charge(c, s->n);
            for (size_t i = 0; i + sub.u.s->n <= s->n;) {
                if (!memcmp(s->p + i, sub.u.s->p, sub.u.s->n)) {
                    if (pos < 0 || name[0] == 'r') pos = (int64_t)sp_jx_utf8_len(s->p, i);
                    count++;
                    if (name[0] == 'f') break;
                    i += sub.u.s->n ? sub.u.s->n : 1;
                } else i++;
            }
            return *out = sp_jv_int(NAMED("count") ? count : pos), 0;
        }
        if (NAMED("join")) return sp_jx_join(c, sp_jx_arg(a, k, n, 0, NULL), self, sp_jv_undef(), out);
        if (NAMED("splitlines")) {
            jlist *l = sp_jx_list_new(c->a, 0);
            if (!l) return sp_jx_oom(c);
            const jstr *s = self.u.s;
            for (size_t i = 0; i < s->n;) {
                const char *e = memchr(s->p + i, '\n', s->n - i);
                size_t end = e ? (size_t)(e - s->p) : s->n;
                size_t cut = end > i && s->p[end - 1] == '\r' ? end - 1 : end;
                jv line;
                if (sp_jx_str_val(c, s->p + i, cut - i, &line) || sp_jx_list_push(c, l, line)) return -1;
                i = end + 1;
            }
            return *out = sp_jx_list_val(l), 0;
        }
    }
    if (self.k == JV_LOOP && NAMED("cycle")) { /* loop.cycle('odd', 'even') */
        if (n < 1) return sp_jx_fail(c, "loop.cycle needs at least one value");
        *out = a[self.u.lp->index0 % n];
        return 0;
    }
    if (self.k == JV_DICT || self.k == JV_NS) {
        if (NAMED("get")) {
            jv key = sp_jx_arg(a, k, n, 0, NULL);
            int i = key.k == JV_STR ? sp_jx_dict_find(self.u.d, key.u.s->p, key.u.s->n) : -1;
            if (i >= 0) return *out = self.u.d->val[i], 0;
            jv d = sp_jx_arg(a, k, n, 1, "default");
            return *out = d.k == JV_UNDEF ? sp_jv_none() : d, 0;
        }
        if (NAMED("items")) return sp_jx_items_of(c, self, out);
        if (NAMED("keys") || NAMED("values")) {
            jlist *l = sp_jx_list_new(c->a, self.u.d->n);
            if (!l) return sp_jx_oom(c);
            for (int i = 0; i < self.u.d->n; i++) l->v[l->n++] = NAMED("keys") ? sp_jv_str(self.u.d->key[i]) : self.u.d->val[i];
            return *out = sp_jx_list_val(l), 0;
        }
    }
    *found = 0;
    return 0;
}

int sp_jx_global_fn(const char *name) {
    if (NAMED("range")) return JX_FN_RANGE;
    if (NAMED("namespace")) return JX_FN_NAMESPACE;
    if (NAMED("dict")) return JX_FN_DICT;
    if (NAMED("raise_exception")) return JX_FN_RAISE;
    if (NAMED("strftime_now")) return JX_FN_STRFTIME;
    return 0;
}

int sp_jx_call_global(jx_ctx *c, int fn, jv *args, const char **kw, int n, jv *out) {
    if (fn == JX_FN_RANGE) {
        int64_t r[3] = {0, 0, 1};
        int np = 0;
        for (int i = 0; i < n; i++) {
            if (kw[i] || args[i].k != JV_INT || np == 3) return sp_jx_fail(c, "range takes 1 to 3 integers");
            r[np++] = args[i].u.i;
        }
        if (np == 0) return sp_jx_fail(c, "range takes 1 to 3 integers");
        if (np == 1) r[1] = r[0], r[0] = 0;
        if (r[2] == 0) return sp_jx_fail(c, "range step cannot be zero");
        jlist *l = sp_jx_list_new(c->a, 0);
        if (!l) return sp_jx_oom(c);
        for (int64_t x = r[0]; r[2] > 0 ? x < r[1] : x > r[1]; x += r[2]) {
            if (l->n >= 1000000) return sp_jx_fail(c, "range of more than 1000000 numbers");
            if (sp_jx_list_push(c, l, sp_jv_int(x))) return -1;
            if ((r[2] > 0 && x > INT64_MAX - r[2]) || (r[2] < 0 && x < INT64_MIN - r[2])) break;
        }
        *out = sp_jx_list_val(l);
        return 0;
    }
    if (fn == JX_FN_NAMESPACE || fn == JX_FN_DICT) {
        jdict *d = sp_jx_dict_new(c->a);
        if (!d) return sp_jx_oom(c);
        for (int i = 0; i < n; i++) {
            if (!kw[i] && (args[i].k == JV_DICT || args[i].k == JV_NS)) { /* namespace(some_dict) */
                for (int j = 0; j < args[i].u.d->n; j++)
                    if (sp_jx_dict_set(c, d, args[i].u.d->key[j]->p, args[i].u.d->key[j]->n, args[i].u.d->val[j])) return -1;
                continue;
            }
            if (!kw[i]) return sp_jx_fail(c, "%s() takes keyword arguments", fn == JX_FN_DICT ? "dict" : "namespace");
            if (sp_jx_dict_set(c, d, kw[i], strlen(kw[i]), args[i])) return -1;
        }
        *out = (jv){.k = fn == JX_FN_DICT ? JV_DICT : JV_NS, .u.d = d};
        return 0;
    }
    if (fn == JX_FN_RAISE) {
        jbuf b = {0};
        if (n > 0 && sp_jx_to_str(c, args[0], &b)) return free(b.p), -1;
        sp_jx_fail(c, "the template raised an error: %s", b.p ? b.p : "");
        free(b.p);
        return -1;
    }
    if (fn == JX_FN_STRFTIME) {
        if (n < 1 || args[0].k != JV_STR || args[0].u.s->n > 200) return sp_jx_fail(c, "strftime_now takes a format string");
        char fmt[256], buf[512];
        memcpy(fmt, args[0].u.s->p, args[0].u.s->n), fmt[args[0].u.s->n] = 0;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t len = strftime(buf, sizeof buf, fmt, &tm);
        return sp_jx_str_val(c, buf, len, out);
    }
    return sp_jx_fail(c, "unknown function");
}
