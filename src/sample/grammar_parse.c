/* grammar_parse.c — GBNF text → the compiled rules of grammar_internal.h (docs/GRAMMAR.md §1).
 *
 * The syntax is llama.cpp's: `name ::= alternatives` one rule per line (a rule continues over
 * newlines inside parentheses and after `|` or `::=`), "literals" and [classes] with \x \u \U \t
 * \n \r escapes, `.` (any character), groups, `|`, and the repetitions * + ? {m} {m,} {m,n}, each
 * rewritten into generated rules (x* → R ::= x R | ε). Checks after parsing: every referenced rule
 * is defined, the root exists, and no rule reaches itself without consuming a character (left
 * recursion), which is what keeps the matcher's expansion finite. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/grammar_internal.h"

typedef struct {
    sp_gel *e;
    int n, cap;
} seqb;

typedef struct {
    char *name;
    seqb *alts;
    int n, cap, defined, n_anon;
} ruleb;

typedef struct {
    const char *s, *end;
    int line;
    sp_err *err;
    int failed;
    ruleb *r;
    int nr, capr;
    uint32_t *rng;
    int nrng, caprng;
    long total; /* elements so far (budget SP_GRAMMAR_MAX_ELEMS) */
} pstate;

static int perr(pstate *P, const char *what) {
    if (!P->failed) sp_err_set(P->err, "grammar: line %d: %s", P->line, what);
    P->failed = 1;
    return -1;
}

static int grow(void **p, int *cap, int need, size_t sz) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int seq_push(pstate *P, seqb *q, sp_gel g) {
    if (++P->total > SP_GRAMMAR_MAX_ELEMS) return perr(P, "the grammar expands to too many elements");
    if (grow((void **)&q->e, &q->cap, q->n + 1, sizeof *q->e)) return perr(P, "out of memory");
    q->e[q->n++] = g;
    return 0;
}

static int rule_new(pstate *P, const char *name, size_t len) {
    if (P->nr >= 65536) return perr(P, "more than 65536 rules");
    if (grow((void **)&P->r, &P->capr, P->nr + 1, sizeof *P->r)) return perr(P, "out of memory");
    ruleb *r = &P->r[P->nr];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(len + 1))) return perr(P, "out of memory");
    memcpy(r->name, name, len);
    r->name[len] = 0;
    return P->nr++;
}

static int sym(pstate *P, const char *name, size_t len) {
    for (int i = 0; i < P->nr; i++)
        if (strlen(P->r[i].name) == len && !memcmp(P->r[i].name, name, len)) return i;
    return rule_new(P, name, len);
}

static int anon(pstate *P, int parent) {
    char buf[160];
    int n = snprintf(buf, sizeof buf, "%.120s_%d", P->r[parent].name, ++P->r[parent].n_anon);
    int id = rule_new(P, buf, (size_t)n);
    if (id >= 0) P->r[id].defined = 1;
    return id;
}

/* Append alternative q (moved) to rule r. */
static int alt_add(pstate *P, int r, seqb *q) {
    ruleb *R = &P->r[r];
    if (grow((void **)&R->alts, &R->cap, R->n + 1, sizeof *R->alts)) {
        free(q->e);
        return perr(P, "out of memory");
    }
    R->alts[R->n++] = *q;
    *q = (seqb){0};
    return 0;
}

static void skip_space(pstate *P, int newline_ok) {
    while (P->s < P->end) {
        char c = *P->s;
        if (c == ' ' || c == '\t' || (newline_ok && c == '\r')) {
            P->s++;
        } else if (newline_ok && c == '\n') {
            P->line++, P->s++;
        } else if (c == '#') {
            while (P->s < P->end && *P->s != '\n') P->s++;
        } else {
            break;
        }
    }
}

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One UTF-8 code point, or one escape. */
static int parse_char(pstate *P, uint32_t *cp) {
    if (P->s >= P->end) return perr(P, "unexpected end of the grammar");
    unsigned char c = (unsigned char)*P->s++;
    if (c == '\\') {
        if (P->s >= P->end) return perr(P, "unexpected end after '\\'");
        char e = *P->s++;
        int nd = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nd) {
            uint32_t v = 0;
            for (int i = 0; i < nd; i++) {
                int h = P->s < P->end ? hexval(*P->s) : -1;
                if (h < 0) return perr(P, "bad hex escape");
                v = v * 16 + (uint32_t)h, P->s++;
            }
            if (v > 0x10FFFF) return perr(P, "escape beyond U+10FFFF");
            *cp = v;
            return 0;
        }
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 't': *cp = '\t'; return 0;
        case 'r': *cp = '\r'; return 0;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': *cp = (uint32_t)e; return 0;
        default: return perr(P, "unknown escape");
        }
    }
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) return perr(P, "invalid UTF-8");
    uint32_t v = n == 0 ? c : n == 1 ? c & 0x1F : n == 2 ? c & 0x0F : c & 0x07;
    for (int i = 0; i < n; i++) {
        if (P->s >= P->end || ((unsigned char)*P->s & 0xC0) != 0x80) return perr(P, "invalid UTF-8");
        v = (v << 6) | ((unsigned char)*P->s++ & 0x3F);
    }
    *cp = v;
    return 0;
}

static int range_add(pstate *P, uint32_t lo, uint32_t hi) {
    if (grow((void **)&P->rng, &P->caprng, 2 * (P->nrng + 1), sizeof *P->rng)) return perr(P, "out of memory");
    P->rng[2 * P->nrng] = lo, P->rng[2 * P->nrng + 1] = hi;
    P->nrng++;
    return 0;
}

static int push_chr(pstate *P, seqb *q, uint32_t lo, uint32_t hi) {
    sp_gel g = {GE_CHR, 0, (uint32_t)P->nrng, 1};
    return range_add(P, lo, hi) || seq_push(P, q, g) ? -1 : 0;
}

/* [abc], [^a-z], after the '['. */
static int parse_class(pstate *P, seqb *q) {
    sp_gel g = {GE_CHR, 0, (uint32_t)P->nrng, 0};
    if (P->s < P->end && *P->s == '^') g.neg = 1, P->s++;
    while (P->s < P->end && *P->s != ']') {
        uint32_t lo, hi;
        if (parse_char(P, &lo)) return -1;
        hi = lo;
        if (P->s + 1 < P->end && *P->s == '-' && P->s[1] != ']') {
            P->s++;
            if (parse_char(P, &hi)) return -1;
            if (hi < lo) return perr(P, "a character range whose end is below its start");
        }
        if (range_add(P, lo, hi)) return -1;
        g.b++;
    }
    if (P->s >= P->end) return perr(P, "unterminated character class");
    P->s++;
    return seq_push(P, q, g);
}

static int parse_alternates(pstate *P, int rule, int nested);

/* Copy elements it[0 .. n) onto q. */
static int seq_cat(pstate *P, seqb *q, const sp_gel *it, int n) {
    for (int i = 0; i < n; i++)
        if (seq_push(P, q, it[i])) return -1;
    return 0;
}

/* R ::= item R | ε  (x*), or R ::= item | ε  (x?); returns R. */
static int rep_rule(pstate *P, int parent, const sp_gel *it, int n, int star, int inner) {
    int R = anon(P, parent);
    if (R < 0) return -1;
    seqb a = {0}, b = {0};
    if (seq_cat(P, &a, it, n) || (star && seq_push(P, &a, (sp_gel){GE_REF, 0, (uint32_t)R, 0})) ||
        (inner >= 0 && seq_push(P, &a, (sp_gel){GE_REF, 0, (uint32_t)inner, 0})) || alt_add(P, R, &a) ||
        alt_add(P, R, &b)) {
        free(a.e);
        return -1;
    }
    return R;
}

/* {m}, {m,}, {m,n} after the '{'. */
static int parse_count(pstate *P, int *m, int *n) {
    long v[2] = {0, -1};
    int k = 0, any = 0;
    for (;;) {
        skip_space(P, 0);
        while (P->s < P->end && *P->s >= '0' && *P->s <= '9') {
            v[k] = (k && v[k] < 0 ? 0 : v[k]) * 10 + (*P->s++ - '0');
            if (v[k] > 100000) return perr(P, "a repetition count above 100000");
            any = 1;
        }
        skip_space(P, 0);
        if (P->s < P->end && *P->s == ',' && k == 0) {
            P->s++, k = 1;
            continue;
        }
        break;
    }
    if (P->s >= P->end || *P->s != '}' || !any) return perr(P, "expected {m}, {m,} or {m,n}");
    P->s++;
    *m = (int)v[0];
    *n = k == 0 ? (int)v[0] : (int)v[1];
    if (*n >= 0 && *n < *m) return perr(P, "a repetition {m,n} with n < m");
    return 0;
}

/* The repetition operator after the item q->e[start ..): rewrite it into rules. An item with no
 * elements (an empty literal, or a repetition {0} of something) stays empty. */
static int parse_repeat(pstate *P, int rule, seqb *q, int start) {
    char op = *P->s++;
    int n = q->n - start, lo = 0, hi = -1;
    if (op == '*') lo = 0, hi = -1;
    else if (op == '+') lo = 1, hi = -1;
    else if (op == '?') lo = 0, hi = 1;
    else if (parse_count(P, &lo, &hi)) return -1;
    if (n <= 0) return 0;
    sp_gel it[64], *item = n <= 64 ? it : malloc(sizeof(sp_gel) * (size_t)n);
    if (!item) return perr(P, "out of memory");
    memcpy(item, q->e + start, sizeof(sp_gel) * (size_t)n);
    q->n = start;
    int rc = 0;
    for (int i = 0; i < lo && !rc; i++) rc = seq_cat(P, q, item, n);
    int R = -1;
    if (!rc && hi < 0) R = rep_rule(P, rule, item, n, 1, -1);
    for (int i = lo; !rc && hi >= 0 && i < hi && (R = rep_rule(P, rule, item, n, 0, R)) >= 0; i++) {
    }
    if (!rc && (hi < 0 || hi > lo) && (R < 0 || seq_push(P, q, (sp_gel){GE_REF, 0, (uint32_t)R, 0}))) rc = -1;
    if (item != it) free(item);
    return rc;
}

/* One item of a sequence; 1 when none starts here. */
static int parse_item(pstate *P, int rule, seqb *q) {
    char c = *P->s;
    if (c == '"') {
        P->s++;
        while (P->s < P->end && *P->s != '"') {
            uint32_t cp;
            if (parse_char(P, &cp) || push_chr(P, q, cp, cp)) return -1;
        }
        if (P->s >= P->end) return perr(P, "unterminated string literal");
        P->s++;
        return 0;
    }
    if (c == '[') return P->s++, parse_class(P, q);
    if (c == '.') {
        P->s++;
        return seq_push(P, q, (sp_gel){GE_CHR, 1, (uint32_t)P->nrng, 0});
    }
    if (c == '(') {
        P->s++;
        skip_space(P, 1);
        int sub = anon(P, rule);
        if (sub < 0 || parse_alternates(P, sub, 1)) return -1;
        if (P->s >= P->end || *P->s != ')') return perr(P, "expected ')'");
        P->s++;
        return seq_push(P, q, (sp_gel){GE_REF, 0, (uint32_t)sub, 0});
    }
    if (is_word(c)) {
        const char *b = P->s;
        while (P->s < P->end && is_word(*P->s)) P->s++;
        int id = sym(P, b, (size_t)(P->s - b));
        return id < 0 ? -1 : seq_push(P, q, (sp_gel){GE_REF, 0, (uint32_t)id, 0});
    }
    return 1;
}

static int parse_sequence(pstate *P, int rule, seqb *q, int nested) {
    while (P->s < P->end) {
        int start = q->n, rc = parse_item(P, rule, q);
        if (rc < 0) return -1;
        if (rc == 1) break;
        skip_space(P, nested);
        /* a repetition of a repetition repeats all the first one expanded to (q->e[start ..)) */
        while (P->s < P->end && (*P->s == '*' || *P->s == '+' || *P->s == '?' || *P->s == '{')) {
            if (parse_repeat(P, rule, q, start)) return -1;
            skip_space(P, nested);
        }
    }
    return 0;
}

static int parse_alternates(pstate *P, int rule, int nested) {
    for (;;) {
        seqb q = {0};
        if (parse_sequence(P, rule, &q, nested) || alt_add(P, rule, &q)) {
            free(q.e);
            return -1;
        }
        if (P->s >= P->end || *P->s != '|') return 0;
        P->s++;
        skip_space(P, 1);
    }
}

static int parse_rule(pstate *P) {
    const char *b = P->s;
    while (P->s < P->end && is_word(*P->s)) P->s++;
    if (P->s == b) return perr(P, "expected a rule name");
    size_t len = (size_t)(P->s - b);
    skip_space(P, 0);
    if (P->end - P->s < 3 || memcmp(P->s, "::=", 3)) return perr(P, "expected '::=' after the rule name");
    P->s += 3;
    skip_space(P, 1);
    int r = sym(P, b, len);
    if (r < 0) return -1;
    if (P->r[r].defined) return perr(P, "a rule defined twice");
    P->r[r].defined = 1;
    if (parse_alternates(P, r, 0)) return -1;
    skip_space(P, 0);
    if (P->s < P->end && *P->s != '\n' && *P->s != '\r') return perr(P, "unexpected character; expected a newline");
    return 0;
}

/* Rules that can match the empty string, by fixpoint. */
static void find_nullable(const sp_grammar *g, uint8_t *nul) {
    memset(nul, 0, (size_t)g->n_rules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++) {
            for (int a = 0; a < g->n_alt[r] && !nul[r]; a++) {
                const sp_gel *e = g->el + g->alt_start[g->alt0[r] + a];
                while (e->type == GE_REF && nul[e->a]) e++;
                if (e->type == GE_END) nul[r] = 1, changed = 1;
            }
        }
    }
}

/* Left recursion: a rule reaching itself through alternatives' nullable prefixes. Rules with no
 * such edge to a remaining rule are removed until none is left; what remains holds a cycle. */
static int check_left_recursion(const sp_grammar *g, sp_err *err) {
    int n = g->n_rules, rc = 0;
    uint8_t *nul = malloc((size_t)n), *gone = calloc((size_t)n, 1);
    if (!nul || !gone) {
        free(nul), free(gone);
        return sp_err_set(err, "grammar: out of memory");
    }
    find_nullable(g, nul);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (gone[r]) continue;
            int live = 0;
            for (int a = 0; a < g->n_alt[r] && !live; a++)
                for (const sp_gel *e = g->el + g->alt_start[g->alt0[r] + a]; e->type == GE_REF && !live; e++) {
                    live = !gone[e->a];
                    if (!nul[e->a]) break;
                }
            if (!live) gone[r] = 1, changed = 1;
        }
    }
    int r = 0;
    while (r < n && gone[r]) r++;
    /* walk edges between remaining rules until one repeats: that rule is on a cycle */
    for (int step = 0; r < n && step < n && gone[r] != 2; step++) {
        gone[r] = 2;
        int nx = -1;
        for (int a = 0; a < g->n_alt[r] && nx < 0; a++)
            for (const sp_gel *e = g->el + g->alt_start[g->alt0[r] + a]; e->type == GE_REF && nx < 0; e++) {
                if (gone[e->a] != 1) nx = (int)e->a;
                if (!nul[e->a]) break;
            }
        if (nx < 0) break;
        r = nx;
    }
    if (r < n)
        rc = sp_err_set(err, "grammar: rule '%s' is left-recursive (it can reach itself without matching a "
                        "character, e.g. through an empty alternative or a repetition of something empty)",
                        g->names[r]);
    free(nul), free(gone);
    return rc;
}

void sp_grammar_free(sp_grammar *g) {
    if (!g) return;
    for (int i = 0; g->names && i < g->n_rules; i++) free(g->names[i]);
    free(g->names), free(g->el), free(g->rng), free(g->alt0), free(g->n_alt), free(g->alt_start);
    free(g);
}

int sp_grammar_n_rules(const sp_grammar *g) { return g->n_rules; }

/* The builder's rules → the flat arrays (names moved). */
static sp_grammar *flatten(pstate *P, sp_err *err) {
    sp_grammar *g = calloc(1, sizeof *g);
    int na = 0;
    long ne = 0;
    for (int r = 0; r < P->nr; r++) {
        na += P->r[r].n;
        for (int a = 0; a < P->r[r].n; a++) ne += P->r[r].alts[a].n + 1;
    }
    if (g) {
        g->n_rules = P->nr;
        g->names = calloc((size_t)P->nr, sizeof *g->names);
        g->alt0 = malloc(sizeof(int) * (size_t)P->nr);
        g->n_alt = malloc(sizeof(int) * (size_t)P->nr);
        g->alt_start = malloc(sizeof(int) * (size_t)(na + 1));
        g->el = malloc(sizeof(sp_gel) * (size_t)(ne + 1));
    }
    if (!g || !g->names || !g->alt0 || !g->n_alt || !g->alt_start || !g->el) {
        sp_grammar_free(g);
        sp_err_set(err, "grammar: out of memory");
        return NULL;
    }
    int ia = 0, ie = 0;
    for (int r = 0; r < P->nr; r++) {
        g->names[r] = P->r[r].name, P->r[r].name = NULL;
        g->alt0[r] = ia, g->n_alt[r] = P->r[r].n;
        for (int a = 0; a < P->r[r].n; a++) {
            g->alt_start[ia++] = ie;
            if (P->r[r].alts[a].n) memcpy(g->el + ie, P->r[r].alts[a].e, sizeof(sp_gel) * (size_t)P->r[r].alts[a].n);
            ie += P->r[r].alts[a].n;
            g->el[ie++] = (sp_gel){GE_END, 0, 0, 0};
        }
    }
    g->n_el = ie;
    g->rng = P->rng, g->n_rng = P->nrng, P->rng = NULL;
    return g;
}

static void pstate_free(pstate *P) {
    for (int r = 0; r < P->nr; r++) {
        free(P->r[r].name);
        for (int a = 0; a < P->r[r].n; a++) free(P->r[r].alts[a].e);
        free(P->r[r].alts);
    }
    free(P->r), free(P->rng);
}

sp_grammar *sp_grammar_parse(const char *text, size_t len, const char *root, sp_err *err) {
    pstate P = {.s = text, .end = text + len, .line = 1, .err = err};
    if (!root) root = "root";
    for (skip_space(&P, 1); P.s < P.end && !P.failed; skip_space(&P, 1))
        parse_rule(&P);
    sp_grammar *g = NULL;
    int r0 = P.failed ? -1 : -2;
    for (int r = 0; r < P.nr && r0 == -2; r++)
        if (!P.r[r].defined) r0 = -1, sp_err_set(err, "grammar: rule '%s' is used but not defined", P.r[r].name);
    for (int r = 0; r < P.nr && r0 == -2; r++)
        if (!strcmp(P.r[r].name, root)) r0 = r;
    if (r0 == -2) sp_err_set(err, "grammar: no rule '%s' (the start rule)", root);
    if (r0 >= 0 && (g = flatten(&P, err))) {
        g->root = r0;
        if (check_left_recursion(g, err)) sp_grammar_free(g), g = NULL;
    }
    pstate_free(&P);
    return g;
}
