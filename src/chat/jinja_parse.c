/* jinja_parse.c — tokens -> syntax tree (jinja_internal.h), by recursive descent with Jinja's
 * operator precedence, lowest first:
 *
 *   x if c else y  <  or  <  and  <  not  <  comparisons (==, !=, <, <=, >, >=, in, not in)
 *   <  + -  <  ~  <  * / // %  <  **  <  unary - +  <  filters |f, tests `is`, calls, .attr, [i]
 *
 * Statements: if / elif / else, for (tuple targets, `if` filter, else), set (name, ns.attr,
 * tuple, block form), macro, break, continue, generation. Anything else (include, import,
 * extends, block, call, filter blocks...) is an error naming the statement and its line.
 * Nesting is bounded (JX_MAX_DEPTH) so no input can exhaust the stack. */
#include <stdio.h>
#include <string.h>

#include "jinja_internal.h"

typedef struct {
    jx_arena *a;
    const jtok *t;
    int n, i, depth;
    const char *name;
    sp_err *err;
} parser;

static const jtok *peek(parser *P) { return &P->t[P->i]; }
static const jtok *peek2(parser *P) { return &P->t[P->i + 1 < P->n ? P->i + 1 : P->n - 1]; }
static const jtok *next(parser *P) { return &P->t[P->i < P->n - 1 ? P->i++ : P->i]; }

static int is_op(const jtok *t, const char *op) {
    return t->k == TK_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}
static int is_name(const jtok *t, const char *w) {
    return t->k == TK_NAME && t->n == strlen(w) && !memcmp(t->s, w, t->n);
}

static void describe(const jtok *t, char *out, size_t cap) {
    switch (t->k) {
    case TK_EOF: snprintf(out, cap, "the end of the template"); break;
    case TK_TEXT: snprintf(out, cap, "template text"); break;
    case TK_VAR_BEGIN: snprintf(out, cap, "'{{'"); break;
    case TK_VAR_END: snprintf(out, cap, "'}}'"); break;
    case TK_BLOCK_BEGIN: snprintf(out, cap, "'{%%'"); break;
    case TK_BLOCK_END: snprintf(out, cap, "'%%}'"); break;
    case TK_INT: case TK_FLOAT: snprintf(out, cap, "a number"); break;
    case TK_STRING: snprintf(out, cap, "a string"); break;
    default: snprintf(out, cap, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->s); break;
    }
}

static int fail_at(parser *P, const jtok *t, const char *what) {
    char got[64];
    describe(t, got, sizeof got);
    return sp_err_set(P->err, "%s:%d: expected %s, got %s", P->name, t->line, what, got);
}

static int expect_op(parser *P, const char *op) {
    if (!is_op(peek(P), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        return fail_at(P, peek(P), w);
    }
    next(P);
    return 0;
}

static jnode *node(parser *P, jnode_kind k, int line) {
    jnode *e = sp_jx_alloc(P->a, sizeof *e);
    if (!e) sp_err_set(P->err, "%s: template too large", P->name);
    else e->k = k, e->line = line;
    return e;
}

/* append to a growing array of pointers kept in the arena */
static int grow(parser *P, void ***arr, int *n, int *cap, void *item) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        void **na = sp_jx_alloc(P->a, (size_t)nc * sizeof *na);
        if (!na) return sp_err_set(P->err, "%s: template too large", P->name);
        if (*n) memcpy(na, *arr, (size_t)*n * sizeof *na);
        *arr = na, *cap = nc;
    }
    (*arr)[(*n)++] = item;
    return 0;
}

static const char *name_dup(parser *P, const jtok *t) {
    char *s = sp_jx_alloc(P->a, t->n + 1);
    if (s) memcpy(s, t->s, t->n);
    else sp_err_set(P->err, "%s: template too large", P->name);
    return s;
}

static jnode *parse_expr(parser *P);
static jnode *parse_expr_nocond(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, int with_filter);

static int enter(parser *P) {
    if (++P->depth > JX_MAX_DEPTH)
        return sp_err_set(P->err, "%s:%d: expressions or blocks nested too deeply", P->name, peek(P)->line);
    return 0;
}

/* call / filter / test arguments: ( [expr | name=expr] , ... ) — the '(' already consumed */
static int parse_args(parser *P, jnode *e, int first_kid) {
    int kcap = e->nkids, ncap = 0;
    const char **names = NULL;
    int nn = 0;
    for (int k = 0; k < first_kid; k++) grow(P, (void ***)&names, &nn, &ncap, NULL);
    while (!is_op(peek(P), ")")) {
        const char *kw = NULL;
        if (peek(P)->k == TK_NAME && is_op(peek2(P), "=")) {
            kw = name_dup(P, next(P));
            next(P);
            if (!kw) return -1;
        }
        jnode *v = parse_expr(P);
        if (!v || grow(P, (void ***)&e->kids, &e->nkids, &kcap, v) || grow(P, (void ***)&names, &nn, &ncap, (void *)kw))
            return -1;
        if (!is_op(peek(P), ",")) break;
        next(P);
    }
    if (expect_op(P, ")")) return -1;
    e->names = names, e->nnames = nn;
    return 0;
}

/* a string literal t and the ones right after it, joined: "a" "b" */
static jnode *parse_strings(parser *P, const jtok *t) {
    jnode *e = NULL;
    size_t total = t->n;
    int k = P->i;
    while (P->t[k].k == TK_STRING) total += P->t[k++].n;
    char *s = sp_jx_alloc(P->a, total + 1);
    if (!s || !(e = node(P, N_CONST, t->line))) return sp_err_set(P->err, "%s: template too large", P->name), NULL;
    memcpy(s, t->s, t->n);
    size_t o = t->n;
    while (peek(P)->k == TK_STRING) {
        const jtok *u = next(P);
        memcpy(s + o, u->s, u->n), o += u->n;
    }
    jstr *js = sp_jx_str_new(P->a, s, o);
    if (!js) return sp_err_set(P->err, "%s: template too large", P->name), NULL;
    e->v = sp_jv_str(js);
    return e;
}

/* after "(" (token t): a parenthesised expression or a tuple */
static jnode *parse_paren(parser *P, const jtok *t) {
    jnode *e = NULL;
    if (is_op(peek(P), ")")) {
        next(P);
        if ((e = node(P, N_LIST, t->line))) e->op = 1; /* () is an empty tuple */
        return e;
    }
    jnode *x = parse_expr(P);
    if (!x) return NULL;
    if (is_op(peek(P), ",")) {
        if (!(e = node(P, N_LIST, t->line))) return NULL;
        e->op = 1; /* tuple */
        int cap = 0;
        if (grow(P, (void ***)&e->kids, &e->nkids, &cap, x)) return NULL;
        while (is_op(peek(P), ",")) {
            next(P);
            if (is_op(peek(P), ")")) break;
            jnode *y = parse_expr(P);
            if (!y || grow(P, (void ***)&e->kids, &e->nkids, &cap, y)) return NULL;
        }
        x = e;
    }
    return expect_op(P, ")") ? NULL : x;
}

/* after "[" or "{" (token t): a list or dict display */
static jnode *parse_collection(parser *P, const jtok *t) {
    jnode *e = NULL;
    int dict = is_op(t, "{"), cap = 0;
    const char *close = dict ? "}" : "]";
    if (!(e = node(P, dict ? N_DICT : N_LIST, t->line))) return NULL;
    while (!is_op(peek(P), close)) {
        jnode *x = parse_expr(P);
        if (!x || grow(P, (void ***)&e->kids, &e->nkids, &cap, x)) return NULL;
        if (dict) {
            if (expect_op(P, ":")) return NULL;
            jnode *y = parse_expr(P);
            if (!y || grow(P, (void ***)&e->kids, &e->nkids, &cap, y)) return NULL;
        }
        if (!is_op(peek(P), ",")) break;
        next(P);
    }
    return expect_op(P, close) ? NULL : e;
}

static jnode *parse_primary(parser *P) {
    const jtok *t = next(P);
    jnode *e = NULL;
    switch (t->k) {
    case TK_INT:
        if ((e = node(P, N_CONST, t->line))) e->v = sp_jv_int(t->i);
        return e;
    case TK_FLOAT:
        if ((e = node(P, N_CONST, t->line))) e->v = sp_jv_float(t->f);
        return e;
    case TK_STRING:
        return parse_strings(P, t);
    case TK_NAME:
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            if ((e = node(P, N_CONST, t->line))) e->v = sp_jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            if ((e = node(P, N_CONST, t->line))) e->v = sp_jv_none();
        } else if ((e = node(P, N_NAME, t->line))) {
            e->s = name_dup(P, t), e->sn = t->n;
            if (!e->s) return NULL;
        }
        return e;
    case TK_OP:
        if (is_op(t, "(")) return parse_paren(P, t);
        if (is_op(t, "[") || is_op(t, "{")) return parse_collection(P, t);
        break;
    default: break;
    }
    P->i--;
    fail_at(P, t, "an expression");
    return NULL;
}

/* .name, [index or slice], (call) after a primary */
static jnode *parse_postfix(parser *P, jnode *e) {
    for (;;) {
        const jtok *t = peek(P);
        if (is_op(t, ".")) {
            next(P);
            const jtok *n = next(P);
            jnode *x = node(P, N_ATTR, t->line);
            if (!x) return NULL;
            if (n->k == TK_NAME) {
                x->s = name_dup(P, n), x->sn = n->n;
                if (!x->s) return NULL;
                x->a = e;
            } else if (n->k == TK_INT) { /* x.0 is x[0] */
                x->k = N_INDEX, x->a = e;
                if (!(x->b = node(P, N_CONST, n->line))) return NULL;
                x->b->v = sp_jv_int(n->i);
            } else {
                P->i--;
                fail_at(P, n, "a member name after '.'");
                return NULL;
            }
            e = x;
        } else if (is_op(t, "[")) {
            next(P);
            jnode *parts[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (is_op(peek(P), ":")) {
                    if (colons == 2) return fail_at(P, peek(P), "']'"), NULL;
                    next(P), colons++;
                    continue;
                }
                if (is_op(peek(P), "]")) break;
                if (parts[colons]) return fail_at(P, peek(P), "':' or ']'"), NULL;
                if (!(parts[colons] = parse_expr(P))) return NULL;
            }
            next(P);
            jnode *x = node(P, colons ? N_SLICE : N_INDEX, t->line);
            if (!x) return NULL;
            x->a = e;
            if (colons) {
                if (!(x->kids = sp_jx_alloc(P->a, 3 * sizeof *x->kids))) return sp_err_set(P->err, "out of memory"), NULL;
                x->nkids = 3;
                for (int k = 0; k < 3; k++) x->kids[k] = parts[k];
            } else {
                if (!parts[0]) return fail_at(P, t, "an index inside '[ ]'"), NULL;
                x->b = parts[0];
            }
            e = x;
        } else if (is_op(t, "(")) {
            next(P);
            jnode *x = node(P, N_CALL, t->line);
            if (!x) return NULL;
            x->a = e;
            if (parse_args(P, x, 0)) return NULL;
            e = x;
        } else {
            return e;
        }
    }
}

/* |filter(args) and `is [not] test args` chains */
static jnode *parse_filters(parser *P, jnode *e) {
    for (;;) {
        const jtok *t = peek(P);
        int filter = is_op(t, "|"), test = is_name(t, "is");
        if (!filter && !test) return e;
        next(P);
        int neg = 0;
        if (test && is_name(peek(P), "not")) next(P), neg = 1;
        const jtok *n = next(P);
        if (n->k != TK_NAME) {
            P->i--;
            return fail_at(P, n, filter ? "a filter name after '|'" : "a test name after 'is'"), NULL;
        }
        jnode *x = node(P, filter ? N_FILTER : N_TEST, t->line);
        if (!x || !(x->s = name_dup(P, n))) return NULL;
        x->sn = n->n, x->op = neg;
        int cap = 0;
        if (grow(P, (void ***)&x->kids, &x->nkids, &cap, e)) return NULL;
        if (is_op(peek(P), "(")) {
            next(P);
            if (parse_args(P, x, 1)) return NULL;
        } else if (test) { /* one bare argument: `is divisibleby 3`, `is sameas false` */
            const jtok *a = peek(P);
            int arg = a->k == TK_INT || a->k == TK_FLOAT || a->k == TK_STRING || is_op(a, "[") || is_op(a, "{") ||
                      (a->k == TK_NAME && !is_name(a, "and") && !is_name(a, "or") && !is_name(a, "else") &&
                       !is_name(a, "if") && !is_name(a, "in") && !is_name(a, "is") && !is_name(a, "not"));
            if (arg) {
                jnode *y = parse_primary(P);
                if (!y || !(y = parse_postfix(P, y)) || grow(P, (void ***)&x->kids, &x->nkids, &cap, y)) return NULL;
            }
        }
        e = x;
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    if (enter(P)) return NULL;
    const jtok *t = peek(P);
    jnode *e;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        jnode *x = parse_unary(P, 0);
        if (!x || !(e = node(P, N_UNARY, t->line))) return NULL;
        e->op = t->s[0], e->a = x;
    } else {
        e = parse_primary(P);
    }
    if (e) e = parse_postfix(P, e);
    if (e && with_filter) e = parse_filters(P, e);
    P->depth--;
    return e;
}

static jnode *binary(parser *P, int op, int line, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *e = node(P, N_BINARY, line);
    if (e) e->op = op, e->a = a, e->b = b;
    return e;
}

static jnode *parse_pow(parser *P) {
    jnode *e = parse_unary(P, 1);
    while (e && is_op(peek(P), "**")) {
        int line = next(P)->line;
        e = binary(P, OP_POW, line, e, parse_unary(P, 1));
    }
    return e;
}

static jnode *parse_mul(parser *P) {
    jnode *e = parse_pow(P);
    for (;;) {
        const jtok *t = peek(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!e || !op) return e;
        next(P);
        e = binary(P, op, t->line, e, parse_pow(P));
    }
}

static jnode *parse_concat(parser *P) {
    jnode *e = parse_mul(P);
    while (e && is_op(peek(P), "~")) {
        int line = next(P)->line;
        e = binary(P, OP_CONCAT, line, e, parse_mul(P));
    }
    return e;
}

static jnode *parse_add(parser *P) {
    jnode *e = parse_concat(P);
    for (;;) {
        const jtok *t = peek(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!e || !op) return e;
        next(P);
        e = binary(P, op, t->line, e, parse_concat(P));
    }
}

/* a < b < c is (a < b) and (b < c), as in Python */
static jnode *parse_compare(parser *P) {
    jnode *e = parse_add(P), *prev = e, *chain = NULL;
    for (;;) {
        const jtok *t = peek(P);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
               : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN
               : (is_name(t, "not") && is_name(peek2(P), "in")) ? OP_NOTIN : 0;
        if (!e || !op) return chain ? chain : e;
        next(P);
        if (op == OP_NOTIN) next(P);
        jnode *rhs = parse_add(P);
        jnode *cmp = binary(P, op, t->line, prev, rhs);
        if (!cmp) return NULL;
        chain = chain ? binary(P, OP_AND, t->line, chain, cmp) : cmp;
        prev = rhs;
    }
}

static jnode *parse_not(parser *P) {
    if (is_name(peek(P), "not")) {
        if (enter(P)) return NULL;
        int line = next(P)->line;
        jnode *x = parse_not(P), *e = x ? node(P, N_UNARY, line) : NULL;
        if (e) e->op = 'n', e->a = x;
        P->depth--;
        return e;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *e = parse_not(P);
    while (e && is_name(peek(P), "and")) {
        int line = next(P)->line;
        e = binary(P, OP_AND, line, e, parse_not(P));
    }
    return e;
}

static jnode *parse_or(parser *P) {
    jnode *e = parse_and(P);
    while (e && is_name(peek(P), "or")) {
        int line = next(P)->line;
        e = binary(P, OP_OR, line, e, parse_and(P));
    }
    return e;
}

static jnode *parse_expr_nocond(parser *P) { return parse_or(P); }

static jnode *parse_expr(parser *P) {
    if (enter(P)) return NULL;
    jnode *e = parse_or(P);
    while (e && is_name(peek(P), "if")) {
        int line = next(P)->line;
        jnode *cond = parse_or(P), *x = cond ? node(P, N_COND, line) : NULL;
        if (!x) return NULL;
        x->a = cond, x->b = e;
        if (is_name(peek(P), "else")) {
            next(P);
            if (!(x->c = parse_expr(P))) return NULL;
        }
        e = x;
    }
    P->depth--;
    return e;
}

/* ---- statements ------------------------------------------------------------------------ */
static int parse_body(parser *P, const char *const *stops, jnode ***body, int *nbody, const char *opener, int line);

static int expect_block_end(parser *P) {
    if (peek(P)->k != TK_BLOCK_END) return fail_at(P, peek(P), "'%}'");
    next(P);
    return 0;
}

/* `{% end... %}` or another stop keyword: consumes '{%' and the keyword, returns its index */
static int take_stop(parser *P, const char *const *stops) {
    next(P);
    const jtok *k = next(P);
    for (int s = 0; stops[s]; s++)
        if (is_name(k, stops[s])) return s;
    return -1;
}

static int parse_targets(parser *P, jnode *st) {
    int cap = 0, paren = is_op(peek(P), "(");
    if (paren) next(P);
    for (;;) {
        const jtok *n = next(P);
        if (n->k != TK_NAME) return P->i--, fail_at(P, n, "a variable name");
        const char *s = name_dup(P, n);
        if (!s || grow(P, (void ***)&st->names, &st->nnames, &cap, (void *)s)) return -1;
        if (!is_op(peek(P), ",")) break;
        next(P);
    }
    return paren ? expect_op(P, ")") : 0;
}

/* {% if c %} ... {% elif c %} ... {% else %} ... {% endif %}: elif is a nested N_IF in the else slot */
static jnode *parse_if(parser *P, int line) {
    jnode *st = NULL;
    if (!(st = node(P, N_IF, line)) || !(st->a = parse_expr(P)) || expect_block_end(P)) return NULL;
    static const char *stops[] = {"elif", "else", "endif", NULL};
    jnode *cur = st;
    for (;;) {
        if (parse_body(P, stops, &cur->body, &cur->nbody, "if", line)) return NULL;
        int s = take_stop(P, stops);
        if (s == 0) { /* elif: a nested N_IF in the else slot */
            jnode *el = node(P, N_IF, peek(P)->line);
            if (!el || !(el->a = parse_expr(P)) || expect_block_end(P)) return NULL;
            cur->alt = el, cur = el;
            continue;
        }
        if (expect_block_end(P)) return NULL;
        if (s == 2) return st;
        jnode *el = node(P, N_BLOCK, peek(P)->line); /* else */
        static const char *endif[] = {"endif", NULL};
        if (!el || parse_body(P, endif, &el->body, &el->nbody, "if", line)) return NULL;
        cur->alt = el;
        take_stop(P, endif);
        return expect_block_end(P) ? NULL : st;
    }
}

/* {% for targets in expr [if cond] %} ... [{% else %} ...] {% endfor %} */
static jnode *parse_for(parser *P, int line) {
    jnode *st = NULL;
    if (!(st = node(P, N_FOR, line)) || parse_targets(P, st)) return NULL;
    if (!is_name(peek(P), "in")) return fail_at(P, peek(P), "'in'"), NULL;
    next(P);
    if (!(st->a = parse_expr_nocond(P))) return NULL;
    if (is_name(peek(P), "if") && !(next(P), st->b = parse_expr_nocond(P))) return NULL;
    if (is_name(peek(P), "recursive"))
        return sp_err_set(P->err, "%s:%d: recursive for loops are not supported", P->name, peek(P)->line), NULL;
    if (expect_block_end(P)) return NULL;
    static const char *stops[] = {"else", "endfor", NULL};
    if (parse_body(P, stops, &st->body, &st->nbody, "for", line)) return NULL;
    if (take_stop(P, stops) == 0) {
        if (expect_block_end(P) || !(st->alt = node(P, N_BLOCK, line))) return NULL;
        if (parse_body(P, stops + 1, &st->alt->body, &st->alt->nbody, "for", line)) return NULL;
        take_stop(P, stops + 1);
    }
    return expect_block_end(P) ? NULL : st;
}

/* {% set targets = expr %}, {% set ns.attr = expr %} or {% set name %} ... {% endset %} */
static jnode *parse_set(parser *P, int line) {
    jnode *st = NULL;
    if (!(st = node(P, N_SET, line)) || parse_targets(P, st)) return NULL;
    if (st->nnames == 1 && is_op(peek(P), ".")) { /* ns.attr */
        next(P);
        const jtok *m = next(P);
        int cap = 1;
        const char *s = m->k == TK_NAME ? name_dup(P, m) : NULL;
        if (m->k != TK_NAME) return P->i--, fail_at(P, m, "a member name after '.'"), NULL;
        if (!s || grow(P, (void ***)&st->names, &st->nnames, &cap, (void *)s)) return NULL;
        st->op = 1;
    }
    if (is_op(peek(P), "=")) {
        next(P);
        if (!(st->a = parse_expr(P))) return NULL;
        return expect_block_end(P) ? NULL : st;
    }
    if (st->nnames != 1 || st->op) return fail_at(P, peek(P), "'='"), NULL;
    static const char *stops[] = {"endset", NULL};
    if (expect_block_end(P) || parse_body(P, stops, &st->body, &st->nbody, "set", line)) return NULL;
    take_stop(P, stops);
    return expect_block_end(P) ? NULL : st;
}

/* {% macro name(param, param=default, ...) %} ... {% endmacro %} */
static jnode *parse_macro(parser *P, int line) {
    jnode *st = NULL;
    const jtok *n = next(P);
    if (n->k != TK_NAME) return P->i--, fail_at(P, n, "a macro name"), NULL;
    if (!(st = node(P, N_MACRO, line)) || !(st->s = name_dup(P, n)) || expect_op(P, "(")) return NULL;
    int pcap = 0, dcap = 0;
    while (!is_op(peek(P), ")")) {
        const jtok *pn = next(P);
        if (pn->k != TK_NAME) return P->i--, fail_at(P, pn, "a parameter name"), NULL;
        jnode *def = NULL;
        if (is_op(peek(P), "=") && (next(P), !(def = parse_expr(P)))) return NULL;
        const char *s = name_dup(P, pn);
        if (!s || grow(P, (void ***)&st->names, &st->nnames, &pcap, (void *)s) ||
            grow(P, (void ***)&st->kids, &st->nkids, &dcap, def))
            return NULL;
        if (!is_op(peek(P), ",")) break;
        next(P);
    }
    static const char *stops[] = {"endmacro", NULL};
    if (expect_op(P, ")") || expect_block_end(P) || parse_body(P, stops, &st->body, &st->nbody, "macro", line))
        return NULL;
    take_stop(P, stops);
    return expect_block_end(P) ? NULL : st;
}

static jnode *parse_statement(parser *P) {
    const jtok *open = next(P); /* '{%' */
    const jtok *kw = next(P);
    int line = open->line;
    jnode *st = NULL;
    if (kw->k != TK_NAME) return P->i--, fail_at(P, kw, "a statement name after '{%'"), NULL;
    if (is_name(kw, "if")) return parse_if(P, line);
    if (is_name(kw, "for")) return parse_for(P, line);
    if (is_name(kw, "set")) return parse_set(P, line);
    if (is_name(kw, "macro")) return parse_macro(P, line);
    if (is_name(kw, "break") || is_name(kw, "continue")) {
        if (!(st = node(P, is_name(kw, "break") ? N_BREAK : N_CONTINUE, line))) return NULL;
        return expect_block_end(P) ? NULL : st;
    }
    if (is_name(kw, "generation")) { /* Hugging Face's assistant-mask marker: renders its body */
        static const char *stops[] = {"endgeneration", NULL};
        if (!(st = node(P, N_BLOCK, line)) || expect_block_end(P) ||
            parse_body(P, stops, &st->body, &st->nbody, "generation", line))
            return NULL;
        take_stop(P, stops);
        return expect_block_end(P) ? NULL : st;
    }
    sp_err_set(P->err, "%s:%d: the '%.*s' statement is not supported by specula's template engine", P->name,
               kw->line, (int)(kw->n < 40 ? kw->n : 40), kw->s);
    return NULL;
}

/* statements up to a `{% STOP %}` (not consumed) or the end of the template */
static int parse_body(parser *P, const char *const *stops, jnode ***body, int *nbody, const char *opener, int line) {
    if (enter(P)) return -1;
    int cap = 0;
    for (;;) {
        const jtok *t = peek(P);
        jnode *st = NULL;
        if (t->k == TK_EOF) {
            if (!stops) break;
            int last = 0;
            while (stops[last + 1]) last++;
            return sp_err_set(P->err, "%s:%d: '{%% %s %%}' is not closed by '{%% %s %%}'", P->name, line, opener,
                              stops[last]);
        }
        if (t->k == TK_TEXT) {
            next(P);
            if (!(st = node(P, N_TEXT, t->line))) return -1;
            st->s = t->s, st->sn = t->n;
        } else if (t->k == TK_VAR_BEGIN) {
            next(P);
            if (!(st = node(P, N_OUTPUT, t->line)) || !(st->a = parse_expr(P))) return -1;
            if (peek(P)->k != TK_VAR_END) return fail_at(P, peek(P), "'}}'");
            next(P);
        } else if (t->k == TK_BLOCK_BEGIN) {
            const jtok *kw = peek2(P);
            int stop = 0;
            for (int s = 0; stops && stops[s]; s++) stop |= is_name(kw, stops[s]);
            if (stop) break;
            static const char *ends[] = {"endif", "endfor", "endset", "endmacro", "elif", "else", "endgeneration", NULL};
            for (int s = 0; ends[s]; s++)
                if (is_name(kw, ends[s]))
                    return sp_err_set(P->err, "%s:%d: unexpected '{%% %s %%}'%s", P->name, kw->line, ends[s],
                                      stops ? " inside another block" : " with no block open");
            if (!(st = parse_statement(P))) return -1;
        } else {
            return fail_at(P, t, "template text or a tag");
        }
        if (grow(P, (void ***)body, nbody, &cap, st)) return -1;
    }
    P->depth--;
    return 0;
}

int sp_jx_parse(jx_arena *a, const jtok *toks, int n, const char *name, jnode **root, sp_err *err) {
    parser P = {.a = a, .t = toks, .n = n, .name = name, .err = err};
    jnode *r = node(&P, N_BLOCK, 1);
    if (!r || parse_body(&P, NULL, &r->body, &r->nbody, NULL, 1)) return -1;
    *root = r;
    return 0;
}
