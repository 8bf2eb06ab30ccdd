/* jinja_internal.h — private to src/chat/: the values, tokens and syntax tree of the Jinja
 * engine (jinja.h), and the functions its files share.
 *
 * Memory: every value, string, list, dict and syntax node lives in one arena (jx_arena) that
 * is freed as a whole; nothing is freed one object at a time. The arena has a byte cap, so a
 * template that builds ever larger strings ends with an error, not an exhausted machine. */
#ifndef SPECULA_CHAT_JINJA_INTERNAL_H
#define SPECULA_CHAT_JINJA_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* ---- arena --------------------------------------------------------------------------- */
typedef struct jx_chunk jx_chunk;
typedef struct {
    jx_chunk *head;
    size_t used, cap; /* bytes handed out so far, and the most allowed */
} jx_arena;

void *sp_jx_alloc(jx_arena *a, size_t n); /* zeroed; NULL when the cap or malloc says no */
void sp_jx_arena_free(jx_arena *a);

/* ---- values -------------------------------------------------------------------------- */
typedef enum {
    JV_UNDEF = 0, /* a name or member that does not exist: falsy, renders "" */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* lists and tuples */
    JV_DICT,
    JV_NS,    /* namespace(): a dict whose members `set ns.x = ...` may change */
    JV_LOOP,  /* the `loop` variable of a for loop */
    JV_MACRO, /* a {% macro %} */
    JV_FUNC   /* a global function (range, namespace, raise_exception, ...) */
} jv_kind;

typedef struct jstr jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct jnode jnode;

typedef struct {
    jv_kind k;
    union {
        int b;
        int64_t i;
        double f;
        jstr *s;
        jlist *l;
        jdict *d;   /* JV_DICT, JV_NS */
        jloop *lp;
        jnode *mac; /* JV_MACRO: its N_MACRO node */
        int fn;     /* JV_FUNC: a JX_FN_* id */
    } u;
} jv;

struct jstr {
    size_t n;
    char p[]; /* n bytes, then a NUL */
};
struct jlist {
    int n, cap;
    int tuple; /* prints as (a, b): tuple literals and the pairs of items() */
    jv *v;
};
struct jdict { /* insertion order kept, as Python's dict */
    int n, cap;
    jstr **key;
    jv *val;
    /* past JX_DICT_SCAN keys, an open-addressing index: slot -> position + 1 (0: empty), hcap
     * slots (a power of two), covering key[0, hn); used only while hn == n */
    int *hidx;
    int hcap, hn;
};
#define JX_DICT_SCAN 16
struct jloop {
    int index0, length;
    const jlist *items;
};

enum { JX_FN_RANGE = 1, JX_FN_NAMESPACE, JX_FN_DICT, JX_FN_RAISE, JX_FN_STRFTIME };

/* ---- tokens -------------------------------------------------------------------------- */
typedef enum {
    TK_EOF = 0,
    TK_TEXT,        /* template text between tags (whitespace control already applied) */
    TK_VAR_BEGIN,   /* {{ */
    TK_VAR_END,     /* }} */
    TK_BLOCK_BEGIN, /* {% */
    TK_BLOCK_END,   /* %} */
    TK_NAME,
    TK_INT,
    TK_FLOAT,
    TK_STRING, /* value unescaped */
    TK_OP      /* one of the operator strings, in .s */
} jtok_kind;

typedef struct {
    jtok_kind k;
    int line;
    const char *s; /* TK_TEXT / TK_NAME / TK_STRING / TK_OP bytes (arena or template) */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* Template text -> tokens (arena-allocated array, ending with TK_EOF). Whitespace control,
 * trim_blocks, lstrip_blocks and {% raw %} are applied here. */
int sp_jx_lex(jx_arena *a, const char *src, size_t len, const char *name, jtok **toks, int *n, sp_err *err);

/* ---- syntax tree --------------------------------------------------------------------- */
typedef enum {
    /* statements */
    N_TEXT,   /* s */
    N_OUTPUT, /* a */
    N_IF,     /* a = condition, body = then, alt = else (an N_IF for elif) */
    N_FOR,    /* names[0..nnames) in a (filter b), body, alt = else */
    N_SET,    /* names[0..nnames) (attr: names[1] member of names[0]) = a, or = body when a NULL */
    N_MACRO,  /* s = name, names = parameters, kids = defaults (NULL where none), body */
    N_BREAK,
    N_CONTINUE,
    N_BLOCK, /* body only ({% generation %}, {% filter %}-free grouping) */
    /* expressions */
    N_CONST,  /* v */
    N_NAME,   /* s */
    N_LIST,   /* kids; op 1: a tuple */
    N_DICT,   /* kids: key, value, key, value, ... */
    N_ATTR,   /* a . s */
    N_INDEX,  /* a [ b ] */
    N_SLICE,  /* a [ kids[0] : kids[1] : kids[2] ] (NULL where omitted) */
    N_CALL,   /* a ( kids ), names = keyword of each argument (NULL: positional) */
    N_FILTER, /* s = filter name, kids[0] = value, kids[1..] args, names = keywords */
    N_TEST,   /* s = test name, kids[0] = value, kids[1..] args, op = 1 when negated */
    N_UNARY,  /* op: 'n' not, '-' , '+' ; a */
    N_BINARY, /* op; a, b */
    N_COND    /* b if a else c (c may be NULL: undefined) */
} jnode_kind;

/* binary operator codes */
enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN, OP_AND, OP_OR
};

struct jnode {
    jnode_kind k;
    int line;
    int op;
    const char *s;
    size_t sn;
    jv v;
    jnode *a, *b, *c;
    jnode **kids; /* nkids */
    int nkids;
    const char **names; /* nnames */
    int nnames;
    jnode **body; /* statements */
    int nbody;
    jnode *alt; /* else branch: an N_BLOCK, or an N_IF for elif */
};

int sp_jx_parse(jx_arena *a, const jtok *toks, int n, const char *name, jnode **root, sp_err *err);

/* ---- evaluation ---------------------------------------------------------------------- */
typedef struct jscope jscope;
struct jscope {
    jscope *up;
    jdict *vars;
};

typedef struct {
    char *p;
    size_t n, cap;
} jbuf;

typedef struct {
    jx_arena *a;
    const char *name; /* template name for messages */
    sp_err *err;
    int line; /* line of the node being evaluated */
    int depth;
    long long steps, max_steps;
    size_t out_cap; /* most output bytes */
    jscope *scope;  /* innermost scope: set writes here, names are looked up outward */
    jscope *root;   /* the template's top level (what a macro body sees besides its arguments) */
    int in_loop;    /* for loops open around the statement being run */
    int loop_ctl;   /* 1 break, 2 continue pending */
} jx_ctx;

#define JX_MAX_DEPTH 200

int sp_jx_fail(jx_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* work on long strings counts as steps (one per 64 bytes made or scanned), so a loop over a
 * huge string is bounded by the step limit like any other loop; checked at the next step */
static inline void jx_charge(jx_ctx *c, size_t bytes) { c->steps += (long long)(bytes >> 6); }

/* values (jinja_value.c) */
jv sp_jv_undef(void);
jv sp_jv_none(void);
jv sp_jv_bool(int b);
jv sp_jv_int(int64_t i);
jv sp_jv_float(double f);
jstr *sp_jx_str_new(jx_arena *a, const char *p, size_t n); /* NULL on arena exhaustion */
jv sp_jv_str(jstr *s);
int sp_jx_str_val(jx_ctx *c, const char *p, size_t n, jv *out); /* error when out of memory */
jlist *sp_jx_list_new(jx_arena *a, int cap);
int sp_jx_list_push(jx_ctx *c, jlist *l, jv v);
jdict *sp_jx_dict_new(jx_arena *a);
int sp_jx_dict_set(jx_ctx *c, jdict *d, const char *k, size_t kn, jv v);
int sp_jx_dict_find(const jdict *d, const char *k, size_t kn); /* index or -1 */
int sp_jv_truthy(jv v);
int sp_jv_equal(jv x, jv y);
int sp_jx_compare(jx_ctx *c, jv x, jv y, int *cmp); /* <0 / 0 / >0; error on unordered types */
const char *sp_jv_kind_name(jv v);
/* str(): how `{{ v }}` renders it (Python's str: True, None, 1.0, ['a']) */
int sp_jx_to_str(jx_ctx *c, jv v, jbuf *b);
int sp_jx_stringify(jx_ctx *c, jv v, jv *out); /* the same, as a string value */
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys) */
int sp_jx_to_json(jx_ctx *c, jv v, int indent, int sort_keys, jbuf *b);
int sp_jx_from_json(jx_ctx *c, json_t *j, jv *out, int depth);
int sp_jbuf_put(jx_ctx *c, jbuf *b, const char *p, size_t n);
size_t sp_jx_utf8_len(const char *p, size_t n);               /* code points */
size_t sp_jx_utf8_offset(const char *p, size_t n, int64_t cp); /* byte offset of code point cp */

/* evaluation (jinja_eval.c) */
int sp_jx_eval(jx_ctx *c, jnode *e, jv *out);
int sp_jx_render_body(jx_ctx *c, jnode **body, int n, jbuf *out);
int sp_jx_call_macro(jx_ctx *c, jnode *mac, jv *args, const char **kw, int nargs, jv *out);

/* helpers shared by the filters (jinja_builtins.c) and the methods (jinja_methods.c); each
 * returns 0, or -1 with the error set */
int sp_jx_oom(jx_ctx *c); /* the out-of-memory error; returns -1 */
/* keyword argument `key`, else positional argument `pos` (counting from 0 after the value) */
jv sp_jx_arg(jv *args, const char **kw, int n, int pos, const char *key);
int sp_jx_need_str(jx_ctx *c, jv v, const char *what); /* -1 with "WHAT needs a string" unless v is one */
jv sp_jx_list_val(jlist *l);
int sp_jx_strip(jx_ctx *c, jv v, const jstr *chars, int which /* 1 left 2 right 3 both */, jv *out);
int sp_jx_map_case(jx_ctx *c, jv v, int mode /* 0 lower 1 upper 2 capitalize 3 title */, jv *out);
int sp_jx_replace(jx_ctx *c, jv v, jv old, jv new_, jv count, jv *out);
int sp_jx_split(jx_ctx *c, jv v, jv sep, jv maxsplit, jv *out);
int sp_jx_join(jx_ctx *c, jv v, jv sep, jv attribute, jv *out);
int sp_jx_items_of(jx_ctx *c, jv v, jv *out); /* a dict's (key, value) pairs */

/* built-ins (jinja_builtins.c): each returns 0, or -1 with the error set; *found = 0 when the
 * name is not one the engine has (the caller reports it). */
int sp_jx_filter(jx_ctx *c, const char *name, jv *args, const char **kw, int nargs, jv *out, int *found);
int sp_jx_test(jx_ctx *c, const char *name, jv *args, int nargs, int *res, int *found);
int sp_jx_method(jx_ctx *c, jv self, const char *name, jv *args, const char **kw, int nargs, jv *out, int *found);
int sp_jx_call_global(jx_ctx *c, int fn, jv *args, const char **kw, int nargs, jv *out);
int sp_jx_global_fn(const char *name); /* JX_FN_* or 0 */

#endif
