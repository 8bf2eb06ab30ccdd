/* jinja_eval.c — runs a parsed template (jinja_internal.h): expressions to values, statements
 * to text, with Jinja's rules where the chat templates rely on them:
 *
 *   - an unknown name, member or index is undefined: falsy, renders "", `is defined` is false,
 *     and a member of it is undefined too; using it in arithmetic is an error naming the op;
 *   - `and` / `or` return one of their operands, as Python does;
 *   - a for loop's body has its own scope, new each iteration (a `set` in it is gone after
 *     the loop: templates carry state out with namespace()); if-blocks have none;
 *   - `loop` gives index, index0, revindex, revindex0, first, last, length, previtem, nextitem.
 *
 * Every evaluation step counts against the step limit and nesting against JX_MAX_DEPTH, so any
 * template ends, with its output or an error. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

static int enter(jx_ctx *c, jnode *e) {
    c->line = e->line;
    if (++c->steps > c->max_steps) return sp_jx_fail(c, "the template ran for too many steps");
    if (++c->depth > JX_MAX_DEPTH) return sp_jx_fail(c, "the template nests or recurses too deeply");
    return 0;
}

static int oom(jx_ctx *c) { return sp_jx_fail(c, "the template needs more memory than allowed"); }

static jv lookup(jx_ctx *c, const char *name, size_t n) {
    for (jscope *s = c->scope; s; s = s->up) {
        int i = sp_jx_dict_find(s->vars, name, n);
        if (i >= 0) return s->vars->val[i];
    }
    int fn = sp_jx_global_fn(name);
    if (fn) return (jv){.k = JV_FUNC, .u.fn = fn};
    return sp_jv_undef();
}

static jscope *scope_push(jx_ctx *c) {
    jscope *s = sp_jx_alloc(c->a, sizeof *s);
    if (!s || !(s->vars = sp_jx_dict_new(c->a))) return NULL;
    s->up = c->scope;
    return s;
}

static jv get_attr(jv obj, const char *name, size_t n) {
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        int i = sp_jx_dict_find(obj.u.d, name, n);
        return i >= 0 ? obj.u.d->val[i] : sp_jv_undef();
    }
    if (obj.k == JV_LOOP) {
        const jloop *lp = obj.u.lp;
        int i = lp->index0, len = lp->length;
#define IS(w) (n == sizeof(w) - 1 && !memcmp(name, w, n))
        if (IS("index0")) return sp_jv_int(i);
        if (IS("index")) return sp_jv_int(i + 1);
        if (IS("revindex")) return sp_jv_int(len - i);
        if (IS("revindex0")) return sp_jv_int(len - i - 1);
        if (IS("first")) return sp_jv_bool(i == 0);
        if (IS("last")) return sp_jv_bool(i == len - 1);
        if (IS("length")) return sp_jv_int(len);
        if (IS("previtem")) return i > 0 ? lp->items->v[i - 1] : sp_jv_undef();
        if (IS("nextitem")) return i + 1 < len ? lp->items->v[i + 1] : sp_jv_undef();
#undef IS
    }
    return sp_jv_undef();
}

/* Python's index rules: negative counts from the end; outside -> -1 */
static int64_t norm_index(int64_t i, int64_t n) {
    if (i < 0) i += n;
    return i < 0 || i >= n ? -1 : i;
}

static int get_item(jx_ctx *c, jv obj, jv key, jv *out) {
    *out = sp_jv_undef();
    if ((obj.k == JV_DICT || obj.k == JV_NS) && key.k == JV_STR) {
        *out = get_attr(obj, key.u.s->p, key.u.s->n);
    } else if (obj.k == JV_LOOP && key.k == JV_STR) {
        *out = get_attr(obj, key.u.s->p, key.u.s->n);
    } else if ((obj.k == JV_LIST || obj.k == JV_STR) && (key.k == JV_INT || key.k == JV_BOOL)) {
        int64_t k = key.k == JV_INT ? key.u.i : key.u.b;
        if (obj.k == JV_LIST) {
            int64_t i = norm_index(k, obj.u.l->n);
            if (i >= 0) *out = obj.u.l->v[i];
        } else {
            const jstr *s = obj.u.s;
            jx_charge(c, s->n);
            int64_t i = norm_index(k, (int64_t)sp_jx_utf8_len(s->p, s->n));
            if (i >= 0) {
                size_t a = sp_jx_utf8_offset(s->p, s->n, i), b = sp_jx_utf8_offset(s->p, s->n, i + 1);
                return sp_jx_str_val(c, s->p + a, b - a, out);
            }
        }
    }
    return 0;
}

/* a member or item of an undefined value (e->a evaluated to one): an error, as in Jinja, which
 * lets `x.missing` be undefined but raises on `x.missing.more` */
static int undefined_member(jx_ctx *c, const jnode *e) {
    c->line = e->line;
    const jnode *a = e->a;
    const char *what = e->k == N_ATTR ? e->s : "[...]";
    if (a->k == N_NAME) return sp_jx_fail(c, "'%s' is undefined (reading %s%s)", a->s, e->k == N_ATTR ? "." : "", what);
    if (a->k == N_ATTR) return sp_jx_fail(c, "'%s' is undefined (reading %s%s)", a->s, e->k == N_ATTR ? "." : "", what);
    return sp_jx_fail(c, "reading %s%s of an undefined value", e->k == N_ATTR ? "." : "", what);
}

/* obj[start:stop:step] on a list or string (code points), Python's rules */
static int get_slice(jx_ctx *c, jv obj, jv *parts, jv *out) {
    int64_t idx[3] = {0, 0, 1};
    int given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = parts[k].k != JV_UNDEF && parts[k].k != JV_NONE;
        if (given[k] && parts[k].k != JV_INT) return sp_jx_fail(c, "slice bounds must be integers, not %s", sp_jv_kind_name(parts[k]));
        if (given[k]) idx[k] = parts[k].u.i;
    }
    if (obj.k == JV_UNDEF) {
        *out = sp_jv_undef();
        return 0;
    }
    if (obj.k != JV_LIST && obj.k != JV_STR) return sp_jx_fail(c, "cannot slice %s", sp_jv_kind_name(obj));
    int64_t step = idx[2];
    if (step == 0) return sp_jx_fail(c, "slice step cannot be zero");
    int64_t n = obj.k == JV_LIST ? obj.u.l->n : (int64_t)sp_jx_utf8_len(obj.u.s->p, obj.u.s->n);
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? n : n - 1;
    int64_t start = given[0] ? idx[0] : (step > 0 ? lo : hi), stop = given[1] ? idx[1] : (step > 0 ? hi : lo);
    if (given[0]) {
        if (start < 0) start += n;
        start = start < lo ? lo : start > hi ? hi : start;
    }
    if (given[1]) {
        if (stop < 0) stop += n;
        stop = stop < lo ? lo : stop > hi ? hi : stop;
    }
    if (obj.k == JV_LIST) {
        jlist *l = sp_jx_list_new(c->a, 0);
        if (!l) return oom(c);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (sp_jx_list_push(c, l, obj.u.l->v[i])) return -1;
        *out = (jv){.k = JV_LIST, .u.l = l};
        return 0;
    }
    const jstr *s = obj.u.s;
    size_t *at = malloc(((size_t)n + 1) * sizeof *at); /* byte offset of each code point, and the end */
    if (!at) return sp_jx_fail(c, "out of memory");
    for (size_t i = 0, k = 0; i < s->n; i++)
        if (((unsigned char)s->p[i] & 0xC0) != 0x80) at[k++] = i;
    at[n] = s->n;
    jbuf b = {0};
    int rc = 0;
    for (int64_t i = start; !rc && (step > 0 ? i < stop : i > stop); i += step)
        rc = sp_jbuf_put(c, &b, s->p + at[i], at[i + 1] - at[i]);
    free(at);
    rc = rc || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return rc ? -1 : 0;
}

/* call / filter arguments kids[from..): into buf (ARGS_ON_STACK of them) when they fit, else the arena */
#define ARGS_ON_STACK 8
typedef struct {
    jv v[ARGS_ON_STACK];
    const char *kw[ARGS_ON_STACK];
} argbuf;

static int eval_args(jx_ctx *c, jnode *e, int from, argbuf *buf, jv **args, const char ***kw, int *n) {
    int k = e->nkids - from;
    if (k <= ARGS_ON_STACK) {
        *args = buf->v, *kw = buf->kw;
    } else {
        *args = sp_jx_alloc(c->a, (size_t)k * sizeof **args);
        *kw = sp_jx_alloc(c->a, (size_t)k * sizeof **kw);
        if (!*args || !*kw) return oom(c);
    }
    for (int i = 0; i < k; i++) {
        if (sp_jx_eval(c, e->kids[from + i], &(*args)[i])) return -1;
        (*kw)[i] = e->names && from + i < e->nnames ? e->names[from + i] : NULL;
    }
    *n = k;
    return 0;
}

static int eval_call(jx_ctx *c, jnode *e, jv *out) {
    argbuf ab;
    jv *args;
    const char **kw;
    int n;
    if (e->a->k == N_ATTR) { /* obj.method(...) */
        jv obj;
        if (sp_jx_eval(c, e->a->a, &obj)) return -1;
        jv member = get_attr(obj, e->a->s, e->a->sn);
        if (member.k == JV_UNDEF || obj.k == JV_STR || obj.k == JV_LIST) {
            int found = 0;
            if (eval_args(c, e, 0, &ab, &args, &kw, &n)) return -1;
            c->line = e->line;
            if (sp_jx_method(c, obj, e->a->s, args, kw, n, out, &found)) return -1;
            if (found) return 0;
            return sp_jx_fail(c, "%s has no method '%s'", sp_jv_kind_name(obj),
                           e->a->s);
        }
        if (eval_args(c, e, 0, &ab, &args, &kw, &n)) return -1;
        c->line = e->line;
        if (member.k == JV_MACRO) return sp_jx_call_macro(c, member.u.mac, args, kw, n, out);
        if (member.k == JV_FUNC) return sp_jx_call_global(c, member.u.fn, args, kw, n, out);
        return sp_jx_fail(c, "'%s' is %s, not something to call", e->a->s, sp_jv_kind_name(member));
    }
    jv fn;
    if (sp_jx_eval(c, e->a, &fn) || eval_args(c, e, 0, &ab, &args, &kw, &n)) return -1;
    c->line = e->line;
    if (fn.k == JV_FUNC) return sp_jx_call_global(c, fn.u.fn, args, kw, n, out);
    if (fn.k == JV_MACRO) return sp_jx_call_macro(c, fn.u.mac, args, kw, n, out);
    if (e->a->k == N_NAME && fn.k == JV_UNDEF) return sp_jx_fail(c, "'%s' is undefined, so it cannot be called", e->a->s);
    return sp_jx_fail(c, "%s is not something to call", sp_jv_kind_name(fn));
}

static const char *arith_names[] = {"", "+", "-", "*", "/", "//", "%", "**"};

/* a op b on integers (not '/'), as Python: floor division and modulo round toward -inf, a
 * negative power is a float, an overflow is an error */
static int arith_int(jx_ctx *c, int op, int64_t a, int64_t b, jv *out) {
    int64_t r = 0;
    int ovf = 0;
    switch (op) {
    case OP_ADD: ovf = __builtin_add_overflow(a, b, &r); break;
    case OP_SUB: ovf = __builtin_sub_overflow(a, b, &r); break;
    case OP_MUL: ovf = __builtin_mul_overflow(a, b, &r); break;
    case OP_FLOORDIV: case OP_MOD:
        if (b == 0) return sp_jx_fail(c, "division by zero");
        if (a == INT64_MIN && b == -1) { ovf = 1; break; }
        r = op == OP_MOD ? a % b : a / b;
        if (op == OP_MOD && r != 0 && ((r < 0) != (b < 0))) r += b;
        if (op == OP_FLOORDIV && (a % b != 0) && ((a < 0) != (b < 0))) r--;
        break;
    case OP_POW:
        if (b < 0) {
            *out = sp_jv_float(pow((double)a, (double)b));
            return 0;
        }
        r = 1;
        for (int64_t k = 0; k < b && !ovf; k++) ovf = __builtin_mul_overflow(r, a, &r);
        if (b > 64 && (a == 0 || a == 1 || a == -1)) ovf = 0, r = a == 0 ? 0 : a == 1 ? 1 : (b % 2 ? -1 : 1);
        break;
    }
    if (ovf) return sp_jx_fail(c, "integer overflow in '%s'", arith_names[op]);
    *out = sp_jv_int(r);
    return 0;
}

/* a op b on floats */
static int arith_float(jx_ctx *c, int op, double a, double b, jv *out) {
    double r = 0;
    switch (op) {
    case OP_ADD: r = a + b; break;
    case OP_SUB: r = a - b; break;
    case OP_MUL: r = a * b; break;
    case OP_DIV:
        if (b == 0) return sp_jx_fail(c, "division by zero");
        r = a / b;
        break;
    case OP_FLOORDIV:
        if (b == 0) return sp_jx_fail(c, "division by zero");
        r = floor(a / b);
        break;
    case OP_MOD:
        if (b == 0) return sp_jx_fail(c, "division by zero");
        r = fmod(a, b);
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        break;
    case OP_POW: r = pow(a, b); break;
    }
    *out = sp_jv_float(r);
    return 0;
}

static int arith(jx_ctx *c, int op, jv x, jv y, jv *out) {
    int xi = x.k == JV_INT || x.k == JV_BOOL, yi = y.k == JV_INT || y.k == JV_BOOL;
    int xn = xi || x.k == JV_FLOAT, yn = yi || y.k == JV_FLOAT;
    if (op == OP_ADD && x.k == JV_STR && y.k == JV_STR) {
        jstr *s = sp_jx_str_new(c->a, NULL, x.u.s->n + y.u.s->n);
        if (!s || x.u.s->n > c->out_cap) return oom(c);
        memcpy(s->p, x.u.s->p, x.u.s->n), memcpy(s->p + x.u.s->n, y.u.s->p, y.u.s->n);
        *out = sp_jv_str(s);
        return 0;
    }
    if (op == OP_ADD && x.k == JV_LIST && y.k == JV_LIST) {
        jlist *l = sp_jx_list_new(c->a, x.u.l->n + y.u.l->n);
        if (!l) return oom(c);
        for (int i = 0; i < x.u.l->n; i++) l->v[l->n++] = x.u.l->v[i];
        for (int i = 0; i < y.u.l->n; i++) l->v[l->n++] = y.u.l->v[i];
        *out = (jv){.k = JV_LIST, .u.l = l};
        return 0;
    }
    if (op == OP_MUL && ((x.k == JV_STR && yi) || (xi && y.k == JV_STR))) { /* "ab" * 3 */
        jv s = x.k == JV_STR ? x : y;
        int64_t times = x.k == JV_STR ? (y.k == JV_INT ? y.u.i : y.u.b) : (x.k == JV_INT ? x.u.i : x.u.b);
        if (times < 0) times = 0;
        if (s.u.s->n && (uint64_t)times > c->out_cap / s.u.s->n) return sp_jx_fail(c, "string repetition too large");
        jstr *r = sp_jx_str_new(c->a, NULL, s.u.s->n * (size_t)times);
        if (!r) return oom(c);
        for (int64_t k = 0; k < times; k++) memcpy(r->p + (size_t)k * s.u.s->n, s.u.s->p, s.u.s->n);
        *out = sp_jv_str(r);
        return 0;
    }
    if (!xn || !yn)
        return sp_jx_fail(c, "cannot apply '%s' to %s and %s", arith_names[op], sp_jv_kind_name(x), sp_jv_kind_name(y));
    if (xi && yi && op != OP_DIV)
        return arith_int(c, op, x.k == JV_INT ? x.u.i : x.u.b, y.k == JV_INT ? y.u.i : y.u.b, out);
    double a = x.k == JV_FLOAT ? x.u.f : (double)(x.k == JV_INT ? x.u.i : x.u.b);
    double b = y.k == JV_FLOAT ? y.u.f : (double)(y.k == JV_INT ? y.u.i : y.u.b);
    return arith_float(c, op, a, b, out);
}

static int contains(jx_ctx *c, jv item, jv box, int *res) {
    *res = 0;
    if (box.k == JV_STR) {
        jx_charge(c, box.u.s->n);
        if (item.k != JV_STR) return sp_jx_fail(c, "'in <string>' needs a string on the left, not %s", sp_jv_kind_name(item));
        *res = item.u.s->n == 0 || memmem(box.u.s->p, box.u.s->n, item.u.s->p, item.u.s->n) != NULL;
    } else if (box.k == JV_LIST) {
        for (int i = 0; i < box.u.l->n && !*res; i++) *res = sp_jv_equal(item, box.u.l->v[i]);
    } else if (box.k == JV_DICT || box.k == JV_NS) {
        *res = item.k == JV_STR && sp_jx_dict_find(box.u.d, item.u.s->p, item.u.s->n) >= 0;
    } else if (box.k != JV_UNDEF && box.k != JV_NONE) {
        return sp_jx_fail(c, "'in' needs a string, list or dict on the right, not %s", sp_jv_kind_name(box));
    }
    return 0;
}

static int eval_binary(jx_ctx *c, jnode *e, jv *out) {
    jv x, y;
    if (sp_jx_eval(c, e->a, &x)) return -1;
    if (e->op == OP_AND || e->op == OP_OR) {
        if (sp_jv_truthy(x) == (e->op == OP_OR)) return *out = x, 0;
        return sp_jx_eval(c, e->b, out);
    }
    if (sp_jx_eval(c, e->b, &y)) return -1;
    c->line = e->line;
    int r, cmp;
    switch (e->op) {
    case OP_CONCAT: {
        jbuf b = {0};
        int rc = sp_jx_to_str(c, x, &b) || sp_jx_to_str(c, y, &b) || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
        free(b.p);
        return rc ? -1 : 0;
    }
    case OP_EQ: case OP_NE:
        if (x.k == JV_STR && y.k == JV_STR) jx_charge(c, x.u.s->n);
        *out = sp_jv_bool(sp_jv_equal(x, y) == (e->op == OP_EQ));
        return 0;
    case OP_LT: case OP_LE: case OP_GT: case OP_GE:
        if (sp_jx_compare(c, x, y, &cmp)) return -1;
        r = e->op == OP_LT ? cmp < 0 : e->op == OP_LE ? cmp <= 0 : e->op == OP_GT ? cmp > 0 : cmp >= 0;
        *out = sp_jv_bool(r);
        return 0;
    case OP_IN: case OP_NOTIN:
        if (contains(c, x, y, &r)) return -1;
        *out = sp_jv_bool(e->op == OP_IN ? r : !r);
        return 0;
    default: return arith(c, e->op, x, y, out);
    }
}

static int eval_list(jx_ctx *c, jnode *e, jv *out) {
    jlist *l = sp_jx_list_new(c->a, e->nkids);
    if (!l) return oom(c);
    l->tuple = e->op;
    for (int i = 0; i < e->nkids; i++)
        if (sp_jx_eval(c, e->kids[i], &l->v[l->n++])) return -1;
    *out = (jv){.k = JV_LIST, .u.l = l};
    return 0;
}

static int eval_dict(jx_ctx *c, jnode *e, jv *out) {
    jdict *d = sp_jx_dict_new(c->a);
    if (!d) return oom(c);
    for (int i = 0; i + 1 < e->nkids; i += 2) {
        jv k, v;
        if (sp_jx_eval(c, e->kids[i], &k) || sp_jx_eval(c, e->kids[i + 1], &v)) return -1;
        if (k.k != JV_STR) return sp_jx_fail(c, "dict keys must be strings here, not %s", sp_jv_kind_name(k));
        if (sp_jx_dict_set(c, d, k.u.s->p, k.u.s->n, v)) return -1;
    }
    *out = (jv){.k = JV_DICT, .u.d = d};
    return 0;
}

/* `x is [not] name(args)` */
static int eval_test(jx_ctx *c, jnode *e, jv *out) {
    argbuf ab;
    jv *args;
    const char **kw;
    int n, found = 0, res = 0;
    if (eval_args(c, e, 0, &ab, &args, &kw, &n)) return -1;
    c->line = e->line;
    if (sp_jx_test(c, e->s, args, n, &res, &found)) return -1;
    if (!found) return sp_jx_fail(c, "unknown test '%s'", e->s);
    *out = sp_jv_bool(e->op ? !res : res);
    return 0;
}

/* not x, -x, +x */
static int eval_unary(jx_ctx *c, jnode *e, jv *out) {
    jv x;
    if (sp_jx_eval(c, e->a, &x)) return -1;
    if (e->op == 'n') {
        *out = sp_jv_bool(!sp_jv_truthy(x));
        return 0;
    }
    c->line = e->line;
    if (x.k == JV_FLOAT) *out = sp_jv_float(e->op == '-' ? -x.u.f : x.u.f);
    else if (x.k == JV_INT || x.k == JV_BOOL) {
        int64_t v = x.k == JV_INT ? x.u.i : x.u.b;
        if (e->op == '-' && v == INT64_MIN) return sp_jx_fail(c, "integer overflow in unary '-'");
        *out = sp_jv_int(e->op == '-' ? -v : v);
    } else return sp_jx_fail(c, "cannot apply unary '%c' to %s", e->op, sp_jv_kind_name(x));
    return 0;
}

static int eval_node(jx_ctx *c, jnode *e, jv *out) {
    argbuf ab;
    jv x, *args;
    const char **kw;
    int n, found = 0;
    switch (e->k) {
    case N_CONST: *out = e->v; return 0;
    case N_NAME: *out = lookup(c, e->s, e->sn); return 0;
    case N_LIST: return eval_list(c, e, out);
    case N_DICT: return eval_dict(c, e, out);
    case N_ATTR:
        if (sp_jx_eval(c, e->a, &x)) return -1;
        if (x.k == JV_UNDEF) return undefined_member(c, e);
        *out = get_attr(x, e->s, e->sn);
        return 0;
    case N_INDEX: {
        jv k;
        if (sp_jx_eval(c, e->a, &x) || sp_jx_eval(c, e->b, &k)) return -1;
        if (x.k == JV_UNDEF) return undefined_member(c, e);
        return get_item(c, x, k, out);
    }
    case N_SLICE: {
        jv parts[3] = {sp_jv_undef(), sp_jv_undef(), sp_jv_undef()};
        if (sp_jx_eval(c, e->a, &x)) return -1;
        for (int k = 0; k < 3; k++)
            if (e->kids[k] && sp_jx_eval(c, e->kids[k], &parts[k])) return -1;
        c->line = e->line;
        return get_slice(c, x, parts, out);
    }
    case N_CALL: return eval_call(c, e, out);
    case N_FILTER:
        if (eval_args(c, e, 0, &ab, &args, &kw, &n)) return -1;
        c->line = e->line;
        if (sp_jx_filter(c, e->s, args, kw, n, out, &found)) return -1;
        return found ? 0 : sp_jx_fail(c, "unknown filter '%s'", e->s);
    case N_TEST: return eval_test(c, e, out);
    case N_UNARY: return eval_unary(c, e, out);
    case N_BINARY: return eval_binary(c, e, out);
    case N_COND:
        if (sp_jx_eval(c, e->a, &x)) return -1;
        if (sp_jv_truthy(x)) return sp_jx_eval(c, e->b, out);
        if (e->c) return sp_jx_eval(c, e->c, out);
        *out = sp_jv_undef();
        return 0;
    default: return sp_jx_fail(c, "a statement where an expression was expected");
    }
}

int sp_jx_eval(jx_ctx *c, jnode *e, jv *out) {
    if (enter(c, e)) return -1;
    int rc = eval_node(c, e, out);
    c->depth--;
    return rc;
}

/* ---- statements ------------------------------------------------------------------------ */
static int assign(jx_ctx *c, jscope *s, const char *const *names, int n, jv v) {
    if (n == 1) return sp_jx_dict_set(c, s->vars, names[0], strlen(names[0]), v);
    if (v.k != JV_LIST || v.u.l->n != n)
        return sp_jx_fail(c, "cannot unpack %s into %d names", sp_jv_kind_name(v), n);
    for (int i = 0; i < n; i++)
        if (sp_jx_dict_set(c, s->vars, names[i], strlen(names[i]), v.u.l->v[i])) return -1;
    return 0;
}

static int iter_items(jx_ctx *c, jv v, jlist **items) {
    jlist *l = NULL;
    if (v.k == JV_LIST) {
        *items = v.u.l;
        return 0;
    }
    if (!(l = sp_jx_list_new(c->a, 0))) return oom(c);
    if (v.k == JV_DICT || v.k == JV_NS) {
        for (int i = 0; i < v.u.d->n; i++)
            if (sp_jx_list_push(c, l, sp_jv_str(v.u.d->key[i]))) return -1;
    } else if (v.k == JV_STR) {
        const jstr *s = v.u.s;
        for (size_t i = 0; i < s->n;) {
            size_t e = i + 1;
            while (e < s->n && ((unsigned char)s->p[e] & 0xC0) == 0x80) e++;
            jv ch;
            if (sp_jx_str_val(c, s->p + i, e - i, &ch) || sp_jx_list_push(c, l, ch)) return -1;
            i = e;
        }
    } else if (v.k != JV_UNDEF) {
        return sp_jx_fail(c, "cannot loop over %s", sp_jv_kind_name(v));
    }
    *items = l;
    return 0;
}

static int exec_for(jx_ctx *c, jnode *st, jbuf *out) {
    jv seq;
    jlist *items = NULL;
    if (sp_jx_eval(c, st->a, &seq) || iter_items(c, seq, &items)) return -1;
    jscope *outer = c->scope;
    if (st->b) { /* for x in xs if cond: filter first, loop.length counts what passed */
        jlist *kept = sp_jx_list_new(c->a, 0);
        jscope *s = scope_push(c);
        if (!kept || !s) return oom(c);
        for (int i = 0; i < items->n; i++) {
            jv ok;
            s->vars->n = 0;
            if (assign(c, s, st->names, st->nnames, items->v[i])) return -1;
            c->scope = s;
            int rc = sp_jx_eval(c, st->b, &ok);
            c->scope = outer;
            if (rc) return -1;
            if (sp_jv_truthy(ok) && sp_jx_list_push(c, kept, items->v[i])) return -1;
        }
        items = kept;
    }
    jloop *lp = sp_jx_alloc(c->a, sizeof *lp);
    if (!lp) return oom(c);
    lp->items = items, lp->length = items->n;
    jscope *s = scope_push(c); /* one scope, emptied each iteration: a long loop costs no memory */
    if (!s) return oom(c);
    c->in_loop++;
    int rc = 0;
    for (int i = 0; i < items->n && !rc; i++) {
        if (++c->steps > c->max_steps) {
            rc = sp_jx_fail(c, "the template ran for too many steps");
            break;
        }
        s->vars->n = 0;
        lp->index0 = i;
        rc = sp_jx_dict_set(c, s->vars, "loop", 4, (jv){.k = JV_LOOP, .u.lp = lp}) ||
             assign(c, s, st->names, st->nnames, items->v[i]);
        if (rc) break;
        c->scope = s;
        rc = sp_jx_render_body(c, st->body, st->nbody, out);
        c->scope = outer;
        int ctl = c->loop_ctl;
        c->loop_ctl = 0;
        if (ctl == 1) break;
    }
    c->in_loop--;
    if (!rc && items->n == 0 && st->alt) rc = sp_jx_render_body(c, st->alt->body, st->alt->nbody, out);
    return rc;
}

static int exec_set(jx_ctx *c, jnode *st) {
    jv v;
    if (st->a) {
        if (sp_jx_eval(c, st->a, &v)) return -1;
    } else { /* {% set x %}...{% endset %} */
        jbuf b = {0};
        int rc = sp_jx_render_body(c, st->body, st->nbody, &b) || sp_jx_str_val(c, b.p ? b.p : "", b.n, &v);
        free(b.p);
        if (rc) return -1;
    }
    c->line = st->line;
    if (st->op) { /* ns.attr = v */
        jv ns = lookup(c, st->names[0], strlen(st->names[0]));
        if (ns.k != JV_NS)
            return sp_jx_fail(c, "cannot set '%s.%s': '%s' is %s, not a namespace()", st->names[0], st->names[1],
                           st->names[0], sp_jv_kind_name(ns));
        return sp_jx_dict_set(c, ns.u.d, st->names[1], strlen(st->names[1]), v);
    }
    return assign(c, c->scope, st->names, st->nnames, v);
}

static int exec_stmt(jx_ctx *c, jnode *st, jbuf *out) {
    jv v;
    switch (st->k) {
    case N_TEXT: return sp_jbuf_put(c, out, st->s, st->sn);
    case N_OUTPUT: return sp_jx_eval(c, st->a, &v) || sp_jx_to_str(c, v, out) ? -1 : 0;
    case N_IF:
        for (jnode *b = st; b;) {
            if (b->k == N_BLOCK) return sp_jx_render_body(c, b->body, b->nbody, out);
            if (sp_jx_eval(c, b->a, &v)) return -1;
            if (sp_jv_truthy(v)) return sp_jx_render_body(c, b->body, b->nbody, out);
            b = b->alt;
        }
        return 0;
    case N_FOR: return exec_for(c, st, out);
    case N_SET: return exec_set(c, st);
    case N_MACRO: return sp_jx_dict_set(c, c->scope->vars, st->s, strlen(st->s), (jv){.k = JV_MACRO, .u.mac = st});
    case N_BREAK: case N_CONTINUE:
        if (!c->in_loop) return sp_jx_fail(c, "'%s' outside a for loop", st->k == N_BREAK ? "break" : "continue");
        c->loop_ctl = st->k == N_BREAK ? 1 : 2;
        return 0;
    case N_BLOCK: return sp_jx_render_body(c, st->body, st->nbody, out);
    default: return sp_jx_fail(c, "an expression where a statement was expected");
    }
}

int sp_jx_render_body(jx_ctx *c, jnode **body, int n, jbuf *out) {
    for (int i = 0; i < n; i++) {
        if (enter(c, body[i])) return -1;
        int rc = exec_stmt(c, body[i], out);
        c->depth--;
        if (rc) return -1;
        if (c->loop_ctl) return 0; /* break / continue: unwind to the loop */
    }
    return 0;
}

int sp_jx_call_macro(jx_ctx *c, jnode *mac, jv *args, const char **kw, int nargs, jv *out) {
    jscope *saved = c->scope;
    int saved_loop = c->in_loop;
    c->scope = c->root;
    jscope *s = scope_push(c);
    if (!s) return c->scope = saved, oom(c);
    int npos = 0;
    for (int i = 0; i < nargs; i++) {
        if (kw[i]) {
            int k = 0;
            while (k < mac->nnames && strcmp(mac->names[k], kw[i])) k++;
            c->steps += k; /* the scan counts: a macro of many parameters called with many keywords */
            if (c->steps > c->max_steps) return c->scope = saved, sp_jx_fail(c, "the template ran for too many steps");
            if (k == mac->nnames) return c->scope = saved, sp_jx_fail(c, "macro '%s' has no parameter '%s'", mac->s, kw[i]);
            if (sp_jx_dict_set(c, s->vars, kw[i], strlen(kw[i]), args[i])) return c->scope = saved, -1;
        } else {
            if (npos >= mac->nnames) return c->scope = saved, sp_jx_fail(c, "macro '%s' takes %d arguments", mac->s, mac->nnames);
            if (sp_jx_dict_set(c, s->vars, mac->names[npos], strlen(mac->names[npos]), args[i])) return c->scope = saved, -1;
            npos++;
        }
    }
    c->scope = s;
    int rc = 0;
    for (int k = 0; k < mac->nnames && !rc; k++) { /* defaults for what was not passed */
        if (sp_jx_dict_find(s->vars, mac->names[k], strlen(mac->names[k])) >= 0) continue;
        jv d = sp_jv_undef();
        rc = (mac->kids[k] && sp_jx_eval(c, mac->kids[k], &d)) || sp_jx_dict_set(c, s->vars, mac->names[k], strlen(mac->names[k]), d);
    }
    jbuf b = {0};
    c->in_loop = 0;
    rc = rc || sp_jx_render_body(c, mac->body, mac->nbody, &b) || sp_jx_str_val(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    c->scope = saved;
    c->in_loop = saved_loop;
    c->loop_ctl = 0;
    return rc ? -1 : 0;
}
