/* json_schema.c — JSON Schema → GBNF (json_schema.h, docs/GRAMMAR.md §3), and a checker of the same
 * subset for tests.
 *
 * Each sub-schema becomes one rule rN; the shared rules (value, object, array, string, number,
 * integer, boolean, null, ws) close the text. Objects list the required properties first (in the
 * schema's order), then each optional one as optional; no other property is generated. The JSON is
 * compact (no whitespace between tokens, so the text between values is forced) and numbers have at
 * most 16 digits per part and 2 of exponent, so every string of the grammar is short unless a
 * string or array is unbounded in the schema. */
#include "sample/json_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct {
    char *buf;
    size_t n, cap;
    int next;
    sp_err *err;
    int failed;
} gbuf;

static int gfail(gbuf *b, const char *fmt, const char *arg) {
    if (!b->failed) sp_err_set(b->err, fmt, arg);
    b->failed = 1;
    return -1;
}

static int put(gbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->buf, cap);
        if (!p) return gfail(b, "json_schema: %sout of memory", "");
        b->buf = p, b->cap = cap;
    }
    memcpy(b->buf + b->n, s, n);
    b->n += n;
    b->buf[b->n] = 0;
    return 0;
}

static int putf(gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int putf(gbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return n < 0 || n >= (int)sizeof tmp ? gfail(b, "json_schema: %sa rule too long", "") : put(b, tmp, (size_t)n);
}

/* s[0 .. n) as a GBNF literal "..." */
static int put_lit(gbuf *b, const char *s, size_t n) {
    if (put(b, "\"", 1)) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc = c == '"' ? put(b, "\\\"", 2) : c == '\\' ? put(b, "\\\\", 2)
                 : c < 0x20 ? putf(b, "\\x%02X", c) : put(b, (const char *)&c, 1);
        if (rc) return -1;
    }
    return put(b, "\"", 1);
}

/* The compact JSON text of v as a GBNF literal. */
static int put_json_lit(gbuf *b, const json_t *v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) return gfail(b, "json_schema: %sa value that cannot be written", "");
    int rc = put_lit(b, t, strlen(t));
    free(t);
    return rc;
}

static const char *const KNOWN[] = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                    "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "title",
                                    "description", "$schema", "$id", "$comment", "default", "examples", NULL};

static int check_keys(gbuf *b, const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        int ok = 0;
        for (int i = 0; KNOWN[i] && !ok; i++) ok = !strcmp(KNOWN[i], k);
        if (!ok) return gfail(b, "json_schema: the keyword '%s' is not supported", k);
        (void)v;
    }
    const json_t *ap = json_object_get(s, "additionalProperties");
    if (ap && !json_is_boolean(ap))
        return gfail(b, "json_schema: '%s' other than true / false is not supported", "additionalProperties");
    return 0;
}

static int gen(gbuf *b, const json_t *s, int depth); /* the rule id of schema s, or -1 */

static int count_of(gbuf *b, const json_t *s, const char *key, long dflt, long *out) {
    const json_t *v = json_object_get(s, key);
    if (!v) return *out = dflt, 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 10000)
        return gfail(b, "json_schema: '%s' must be an integer in 0..10000", key);
    *out = (long)json_integer_value(v);
    return 0;
}

/* {m,n} text for a repetition (n < 0: unbounded). */
static int put_count(gbuf *b, long m, long n) { return n < 0 ? putf(b, "{%ld,}", m) : putf(b, "{%ld,%ld}", m, n); }

static int gen_array(gbuf *b, const json_t *s, int depth, int id) {
    long lo, hi;
    if (count_of(b, s, "minItems", 0, &lo) || count_of(b, s, "maxItems", -1, &hi)) return -1;
    if (hi >= 0 && hi < lo) return gfail(b, "json_schema: %smaxItems below minItems", "");
    const json_t *it = json_object_get(s, "items");
    int item = it ? gen(b, it, depth + 1) : -1;
    if (it && item < 0) return -1;
    char iname[32];
    snprintf(iname, sizeof iname, item >= 0 ? "r%d" : "value", item);
    if (putf(b, "r%d ::= \"[\" ws ", id)) return -1;
    if (hi == 0) return put(b, "\"]\"\n", 4);
    if (lo == 0 && putf(b, "( %s ws (\",\" ws %s ws)", iname, iname)) return -1;
    if (lo > 0 && putf(b, "%s ws (\",\" ws %s ws)", iname, iname)) return -1;
    if (put_count(b, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1)) return -1;
    return put(b, lo == 0 ? " )? \"]\"\n" : " \"]\"\n", lo == 0 ? 8 : 5);
}

/* "key" ws ":" ws r<rule> */
static int put_kv(gbuf *b, const char *k, int rule) {
    json_t *ks = json_string(k);
    char *t = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
    json_decref(ks);
    int rc = t ? put_lit(b, t, strlen(t)) : gfail(b, "json_schema: %sa property name that is not UTF-8", "");
    free(t);
    return rc ? -1 : putf(b, " ws \":\" ws r%d", rule);
}

static int gen_object(gbuf *b, const json_t *s, int depth, int id) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    if (props && !json_is_object(props)) return gfail(b, "json_schema: '%s' must be an object", "properties");
    if (req && !json_is_array(req)) return gfail(b, "json_schema: '%s' must be an array", "required");
    if (!props) return putf(b, "r%d ::= object\n", id);
    size_t n = json_object_size(props), i = 0, nr = 0;
    const char **keys = calloc(n + 1, sizeof *keys);
    int *rules = calloc(n + 1, sizeof *rules), *isreq = calloc(n + 1, sizeof *isreq), rc = 0;
    if (!keys || !rules || !isreq) rc = gfail(b, "json_schema: %sout of memory", "");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        if (rc) break;
        keys[i] = k;
        rc = (rules[i] = gen(b, v, depth + 1)) < 0;
        for (size_t j = 0; req && j < json_array_size(req); j++)
            if (json_is_string(json_array_get(req, j)) && !strcmp(json_string_value(json_array_get(req, j)), k))
                isreq[i] = 1;
        nr += isreq[i++];
    }
    for (size_t j = 0; !rc && req && j < json_array_size(req); j++) {
        const json_t *r = json_array_get(req, j);
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r)))
            rc = gfail(b, "json_schema: '%s' names a property not in 'properties'", "required");
    }
    /* optional ones: o<id>_<i> ::= ( "," ws kv_i )? o<id>_<i+1> after a first property, or
     * f<id>_<i> ::= kv_i o<id>_<i+1> | f<id>_<i+1> choosing the first one present */
    for (size_t j = 0; !rc && j <= n; j++) {
        rc = putf(b, "o%d-%zu ::= ", id, j);
        if (!rc && j < n && !isreq[j]) rc = put(b, "( \",\" ws ", 9) || put_kv(b, keys[j], rules[j]) || put(b, " ws )? ", 7);
        if (!rc) rc = j < n ? putf(b, "o%d-%zu\n", id, j + 1) : put(b, "\"\"\n", 3);
        if (!rc && nr == 0) {
            rc = putf(b, "f%d-%zu ::= ", id, j);
            if (!rc && j < n) rc = put_kv(b, keys[j], rules[j]) || putf(b, " ws o%d-%zu | f%d-%zu", id, j + 1, id, j + 1);
            if (!rc) rc = j < n ? put(b, "\n", 1) : put(b, "\"\"\n", 3);
        }
    }
    if (!rc) rc = putf(b, "r%d ::= \"{\" ws ", id);
    for (size_t j = 0, first = 1; !rc && j < n; j++) {
        if (!isreq[j]) continue;
        if (!first) rc = put(b, "\",\" ws ", 7);
        if (!rc) rc = put_kv(b, keys[j], rules[j]) || put(b, " ws ", 4);
        first = 0;
    }
    if (!rc) rc = nr ? putf(b, "o%d-0 \"}\"\n", id) : putf(b, "f%d-0 \"}\"\n", id);
    free(keys), free(rules), free(isreq);
    return rc ? -1 : 0;
}

static int gen_type(gbuf *b, const json_t *s, const char *t, int depth, int id) {
    if (!strcmp(t, "object")) return gen_object(b, s, depth, id);
    if (!strcmp(t, "array")) return gen_array(b, s, depth, id);
    if (!strcmp(t, "string")) {
        long lo, hi;
        if (count_of(b, s, "minLength", 0, &lo) || count_of(b, s, "maxLength", -1, &hi)) return -1;
        if (!json_object_get(s, "minLength") && !json_object_get(s, "maxLength")) return putf(b, "r%d ::= string\n", id);
        if (hi >= 0 && hi < lo) return gfail(b, "json_schema: %smaxLength below minLength", "");
        return putf(b, "r%d ::= \"\\\"\" char", id) || put_count(b, lo, hi) || put(b, " \"\\\"\"\n", 6);
    }
    static const char *const prim[] = {"number", "integer", "boolean", "null"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(t, prim[i])) return putf(b, "r%d ::= %s\n", id, prim[i]);
    return gfail(b, "json_schema: the type '%s' is not supported", t);
}

/* Alternatives: rule id ::= r_a | r_b ... for the sub-rules of list (anyOf / oneOf / type / enum). */
static int gen_alts(gbuf *b, const json_t *s, int depth, int id) {
    const json_t *l = json_object_get(s, "anyOf"), *t = json_object_get(s, "type");
    if (!l) l = json_object_get(s, "oneOf");
    int n = l ? (int)json_array_size(l) : (int)json_array_size(t), *sub = calloc((size_t)n + 1, sizeof *sub);
    if (!sub) return gfail(b, "json_schema: %sout of memory", "");
    if (l && !json_is_array(l)) n = 0;
    int rc = n == 0 ? gfail(b, "json_schema: %san empty anyOf / oneOf / type list", "") : 0;
    for (int i = 0; i < n && !rc; i++) {
        if (l) {
            rc = (sub[i] = gen(b, json_array_get(l, i), depth + 1)) < 0;
        } else {
            const json_t *ti = json_array_get(t, (size_t)i);
            if (!json_is_string(ti)) rc = gfail(b, "json_schema: %sa type list of non-strings", "");
            else rc = gen_type(b, s, json_string_value(ti), depth, sub[i] = b->next++);
        }
    }
    if (!rc) rc = putf(b, "r%d ::= ", id);
    for (int i = 0; i < n && !rc; i++) rc = putf(b, i ? " | r%d" : "r%d", sub[i]);
    free(sub);
    return rc || put(b, "\n", 1) ? -1 : 0;
}

static int gen(gbuf *b, const json_t *s, int depth) {
    if (depth > SP_SCHEMA_MAX_DEPTH) return gfail(b, "json_schema: %sschemas nested deeper than 32", "");
    int id = b->next++;
    if (json_is_true(s)) return putf(b, "r%d ::= value\n", id) ? -1 : id;
    if (!json_is_object(s)) return gfail(b, "json_schema: %sa schema must be an object or true", "");
    if (check_keys(b, s)) return -1;
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const"), *t = json_object_get(s, "type");
    int rc;
    if (cn || en) {
        if (en && (!json_is_array(en) || !json_array_size(en))) return gfail(b, "json_schema: '%s' must be a non-empty array", "enum");
        rc = putf(b, "r%d ::= ", id);
        for (size_t i = 0; !rc && i < (cn ? 1 : json_array_size(en)); i++)
            rc = (i && put(b, " | ", 3)) || put_json_lit(b, cn ? cn : json_array_get(en, i));
        rc = rc || put(b, "\n", 1);
    } else if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf") || json_is_array(t)) {
        rc = gen_alts(b, s, depth, id);
    } else if (t && !json_is_string(t)) {
        rc = gfail(b, "json_schema: '%s' must be a string or a list of strings", "type");
    } else {
        const char *ts = t ? json_string_value(t) : json_object_get(s, "properties") ? "object"
                                                  : json_object_get(s, "items") ? "array" : NULL;
        rc = ts ? gen_type(b, s, ts, depth, id) : putf(b, "r%d ::= value\n", id);
    }
    return rc ? -1 : id;
}

static const char JSON_RULES[] =
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "ws ::= \"\"\n";

char *sp_json_schema_gbnf(const json_t *schema, sp_err *err) {
    gbuf b = {.err = err};
    int root = schema ? gen(&b, schema, 0) : -1;
    if (b.failed || (schema && root < 0)) {
        free(b.buf);
        return NULL;
    }
    if ((schema ? putf(&b, "root ::= r%d\n", root) : put(&b, "root ::= object\n", 16)) ||
        put(&b, JSON_RULES, sizeof JSON_RULES - 1)) {
        free(b.buf);
        return NULL;
    }
    return b.buf;
}

char *sp_json_schema_gbnf_text(const char *schema, size_t len, sp_err *err) {
    json_error_t je;
    json_t *s = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!s) {
        sp_err_set(err, "json_schema: not JSON (line %d: %s)", je.line, je.text);
        return NULL;
    }
    char *g = sp_json_schema_gbnf(s, err);
    json_decref(s);
    return g;
}

/* ---- the checker ---------------------------------------------------------------------------- */
static long utf8_len(const char *s) {
    long n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int type_ok(const char *t, const json_t *v) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return 0;
}

static int object_ok(const json_t *s, const json_t *v) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return 0;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        const json_t *ps = props ? json_object_get(props, k) : NULL;
        if (ps && !sp_json_schema_validate(ps, x)) return 0;
        if (!ps && json_is_false(json_object_get(s, "additionalProperties"))) return 0;
    }
    return 1;
}

static int kind_ok(const json_t *s, const json_t *v) {
    const json_t *mn, *mx, *it = json_object_get(s, "items");
    if (json_is_object(v)) return object_ok(s, v);
    if (json_is_array(v)) {
        mn = json_object_get(s, "minItems"), mx = json_object_get(s, "maxItems");
        if ((mn && (long)json_array_size(v) < json_integer_value(mn)) || (mx && (long)json_array_size(v) > json_integer_value(mx))) return 0;
        for (size_t i = 0; it && i < json_array_size(v); i++)
            if (!sp_json_schema_validate(it, json_array_get(v, i))) return 0;
    }
    if (json_is_string(v)) {
        long n = utf8_len(json_string_value(v));
        mn = json_object_get(s, "minLength"), mx = json_object_get(s, "maxLength");
        if ((mn && n < json_integer_value(mn)) || (mx && n > json_integer_value(mx))) return 0;
    }
    return 1;
}

int sp_json_schema_validate(const json_t *s, const json_t *v) {
    if (json_is_true(s)) return 1;
    if (!json_is_object(s)) return 0;
    const json_t *c = json_object_get(s, "const"), *e = json_object_get(s, "enum"), *t = json_object_get(s, "type");
    if (c && !json_equal((json_t *)c, (json_t *)v)) return 0;
    if (e) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(e) && !any; i++) any = json_equal(json_array_get(e, i), (json_t *)v);
        if (!any) return 0;
    }
    const json_t *l = json_object_get(s, "anyOf"), *o = json_object_get(s, "oneOf");
    if (l || o) {
        int n = 0;
        for (size_t i = 0; i < json_array_size(l ? l : o); i++) n += sp_json_schema_validate(json_array_get(l ? l : o, i), v);
        if (l ? n < 1 : n != 1) return 0;
    }
    if (json_is_string(t) && !type_ok(json_string_value(t), v)) return 0;
    if (json_is_array(t)) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(t) && !any; i++) any = type_ok(json_string_value(json_array_get(t, i)), v);
        if (!any) return 0;
    }
    return kind_ok(s, v);
}
