/* test_grammar.c — the GBNF parser and matcher, JSON Schema → GBNF, and token masks over the default
 * model's tokenizer: random walks through the allowed tokens end in texts the schema accepts. */
#include <jansson.h>

#include "core/core.h"
#include "harness.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "tokenizer/tokenizer.h"

static int match(const char *gbnf, const char *text) {
    sp_err err = {0};
    sp_grammar *g = sp_grammar_parse(gbnf, strlen(gbnf), NULL, &err);
    if (!g) {
        fprintf(stderr, "  parse: %s\n", err.msg);
        return -1;
    }
    int ok = sp_grammar_match_text(g, text, strlen(text), &err);
    sp_grammar_free(g);
    return ok;
}

/* the parse error of gbnf contains `want` */
static int parse_fails_with(const char *gbnf, const char *want) {
    sp_err err = {0};
    sp_grammar *g = sp_grammar_parse(gbnf, strlen(gbnf), NULL, &err);
    sp_grammar_free(g);
    if (g || !strstr(err.msg, want)) fprintf(stderr, "  for %s: got '%s'\n", gbnf, err.msg);
    return !g && strstr(err.msg, want) != NULL;
}

static void test_gbnf_match(void) {
    const char *g = "root ::= \"a\" b+ (\"x\" | [0-9]{2,3})? c\nb ::= [b-d]\n# comment\nc ::= \"\\n\" | \"\\u00e9\"\n";
    CHECK(match(g, "ab\n") == 1, "ab");
    CHECK(match(g, "abcd12\xc3\xa9") == 1, "é");
    CHECK(match(g, "abx\n") == 1, "x");
    CHECK(match(g, "ab1\n") == 0, "one digit");
    CHECK(match(g, "ab1234\n") == 0, "four digits");
    CHECK(match(g, "a\n") == 0, "b+");
    CHECK(match("root ::= [^\"]* \"\\\"\"", "h\xc3\xa9llo \"") == 1, "negated class");
    CHECK(match("root ::= ( \"ab\" |\n  \"cd\" )*\n", "abcdab") == 1, "group over lines");
    CHECK(match("root ::= .{3}", "\xe2\x82\xac" "ab") == 1, "any char counts characters");
    CHECK(match("root ::= x\nx ::= \"(\" x \")\" | \"\"", "((()))") == 1, "nesting");
    CHECK(match("root ::= x\nx ::= \"(\" x \")\" | \"\"", "(()") == 0, "unbalanced");
    /* a repetition of a repetition repeats the whole first one */
    CHECK(match("root ::= \"a\"{2}?", "") == 1 && match("root ::= \"a\"{2}?", "aa") == 1 &&
              match("root ::= \"a\"{2}?", "a") == 0, "{2}?");
    CHECK(match("root ::= (\"a\"{1,2}){2}", "aaa") == 1 && match("root ::= \"a\"{1,2}{2}", "aaa") == 1 &&
              match("root ::= \"a\"{1,2}{2}", "a") == 0, "{1,2}{2}");
    /* an item repeated {0} times is empty, and so is any repetition of it */
    CHECK(match("root ::= \"b\" (\"x\"{0}?) \"c\"", "bc") == 1 && match("root ::= \"b\" \"x\"{0}* \"c\"", "bc") == 1 &&
              match("root ::= \"\"* \"c\"", "c") == 1, "empty items");
    CHECK(parse_fails_with("root ::= (\"x\"{0}?,)", "expected ')'"), "a bad group after an empty repetition");
}

static void test_gbnf_errors(void) {
    CHECK(parse_fails_with("a ::= \"x\"", "no rule 'root'"), "root");
    CHECK(parse_fails_with("root ::= foo", "'foo' is used but not defined"), "undefined");
    CHECK(parse_fails_with("root ::= expr\nexpr ::= expr \"+\" t | t\nt ::= [0-9]", "'expr' is left-recursive"),
          "left recursion");
    CHECK(parse_fails_with("root ::= a \"x\"\na ::= b root\nb ::= \"x\"?", "left-recursive"), "through nullable");
    CHECK(parse_fails_with("root ::= (\"\")*", "left-recursive"), "empty repetition");
    CHECK(parse_fails_with("root ::= \"abc", "line 1: unterminated string"), "unterminated");
    CHECK(parse_fails_with("root ::= \"a\"\n\nx ::= [a-", "line 3"), "line number");
    CHECK(parse_fails_with("root ::= \"\\q\"", "unknown escape"), "escape");
    CHECK(parse_fails_with("root ::= \"a\"{5,2}", "n < m"), "counts");
    CHECK(parse_fails_with("root ::= \"abcdefghijk\"{99999}", "too many elements"), "budget");
    CHECK(parse_fails_with("root \"a\"", "'::='"), "::=");
    CHECK(parse_fails_with("", "no rule 'root'"), "empty");
    /* deep nesting is bounded at match time, not a crash */
    sp_err err = {0};
    const char *deep = "root ::= \"(\" root \")\" | \"x\"";
    sp_grammar *g = sp_grammar_parse(deep, strlen(deep), NULL, &err);
    CHECK(g != NULL, "%s", err.msg);
    char *t = malloc(20001);
    memset(t, '(', 20000);
    t[20000] = 0;
    CHECK(g && sp_grammar_match_text(g, t, 20000, &err) == -1 && strstr(err.msg, "deeper"), "%s", err.msg);
    free(t);
    sp_grammar_free(g);
}

static const char *SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3}},\"required\":[\"name\",\"age\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"inner\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"
    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"x\"]}},\"required\":[\"inner\"]}",
    "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"pt\"},"
    "\"v\":{\"type\":[\"null\",\"boolean\"]}}}]}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"minItems\":1,\"maxItems\":2}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[1,\"two\",null]},\"b\":{\"oneOf\":[{\"type\":\"null\"},"
    "{\"type\":\"string\",\"maxLength\":4}]}}}",
};

static sp_grammar *schema_grammar(const char *schema, sp_err *err) {
    char *gb = sp_json_schema_gbnf_text(schema, strlen(schema), err);
    if (!gb) return NULL;
    sp_grammar *g = sp_grammar_parse(gb, strlen(gb), NULL, err);
    if (!g) fprintf(stderr, "%s\n", gb);
    free(gb);
    return g;
}

static void test_schema_text(void) {
    static const char *ok[] = {"{\"name\":\"bob\",\"age\":3}", "{\"inner\":{\"x\":-1.5e3}}", "12",
                               "[\"ab\",\"\"]", "{\"a\":\"two\",\"b\":null}"};
    static const char *bad[] = {"{\"age\":3,\"name\":\"bob\"}", "{\"inner\":{\"ok\":true}}", "1.5", "[]",
                                "{\"a\":2}"};
    for (int i = 0; i < 5; i++) {
        sp_err err = {0};
        sp_grammar *g = schema_grammar(SCHEMAS[i], &err);
        CHECK(g != NULL, "schema %d: %s", i, err.msg);
        if (!g) continue;
        CHECK(sp_grammar_match_text(g, ok[i], strlen(ok[i]), &err) == 1, "schema %d accepts %s", i, ok[i]);
        CHECK(sp_grammar_match_text(g, bad[i], strlen(bad[i]), &err) == 0, "schema %d rejects %s", i, bad[i]);
        sp_grammar_free(g);
    }
    sp_err err = {0};
    const char *bads[] = {"{\"type\":\"integer\",\"minimum\":3}", "minimum", "{\"$ref\":\"#/x\"}", "$ref",
                          "{\"type\":\"date\"}", "date", "{\"additionalProperties\":{}}", "additionalProperties"};
    for (int i = 0; i < 8; i += 2) {
        char *gb = sp_json_schema_gbnf_text(bads[i], strlen(bads[i]), &err);
        CHECK(!gb && strstr(err.msg, bads[i + 1]), "%s: %s", bads[i], err.msg);
        free(gb);
    }
}

static tok_tokenizer *load_tok(void) {
    sp_err err = {0};
    tok_tokenizer *t = sp_tok_load_dir("models/default/target", &err);
    CHECK(t != NULL, "%s", err.msg);
    return t;
}

/* Seeded random walks over the allowed tokens: each ends (EOS allowed) in a text of the schema. */
static void test_token_walks(void) {
    tok_tokenizer *tk = load_tok();
    if (!tk) return;
    int V = sp_tok_vocab_size(tk), eos = sp_tok_eos(tk);
    sp_err err = {0};
    sp_gvocab *gv = sp_gvocab_create(tk, V, &eos, 1, &err);
    CHECK(gv != NULL, "%s", err.msg);
    uint8_t *allowed = malloc((size_t)V);
    int32_t *ids = malloc(sizeof(int32_t) * 400);
    for (int si = 0; gv && si < 5; si++) {
        sp_grammar *g = schema_grammar(SCHEMAS[si], &err);
        json_t *schema = json_loads(SCHEMAS[si], 0, NULL);
        for (int w = 0; g && w < 4; w++) {
            sp_gstate *st = sp_gstate_create(g, gv, &err);
            int n = 0, ended = 0;
            while (!ended && n < 400) {
                int32_t only;
                int cnt = sp_gstate_mask(st, allowed, &only, &err);
                CHECK(cnt > 0, "schema %d walk %d: %d allowed (%s)", si, w, cnt, err.msg);
                if (cnt <= 0) break;
                /* prefer ending, and short tokens, so that walks finish */
                int pick = -1, k = (int)(sp_rng_uniform(1234 + si, 9, (uint64_t)(w * 1000 + n)) * cnt);
                if (eos >= 0 && allowed[eos]) pick = eos;
                for (int i = 0; i < V && pick < 0; i++)
                    if (allowed[i] && k-- == 0) pick = i;
                CHECK(sp_gstate_allows(st, pick, &err) == 1, "mask and allows agree on %d", pick);
                CHECK(sp_gstate_accept(st, pick, &err) == 0, "accept %d", pick);
                if (pick == eos) ended = 1;
                else ids[n++] = pick;
            }
            char *text = NULL;
            sp_tok_decode(tk, ids, n, &text, &err);
            json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
            /* a walk may run out of steps inside an unbounded string: only finished walks must validate */
            if (ended) CHECK(v && sp_json_schema_validate(schema, v), "schema %d walk %d: '%s'", si, w, text);
            json_decref(v);
            free(text);
            sp_gstate_free(st);
        }
        json_decref(schema);
        sp_grammar_free(g);
    }
    free(allowed), free(ids);
    sp_gvocab_free(gv);
    sp_tok_free(tk);
}

/* The mask equals the per-token check on a state in the middle of a string (tokens spanning the
 * closing quote and the next key). */
static void test_mask_matches_allows(void) {
    tok_tokenizer *tk = load_tok();
    if (!tk) return;
    int V = sp_tok_vocab_size(tk);
    sp_err err = {0};
    sp_gvocab *gv = sp_gvocab_create(tk, V, NULL, 0, &err);
    sp_grammar *g = schema_grammar(SCHEMAS[0], &err);
    sp_gstate *st = g && gv ? sp_gstate_create(g, gv, &err) : NULL;
    int32_t *ids = NULL, n = 0;
    const char *pre = "{\"name\":\"ab";
    CHECK(st && sp_tok_encode(tk, pre, strlen(pre), 0, 0, &ids, &n, &err) == 0, "%s", err.msg);
    for (int i = 0; st && i < n; i++) CHECK(sp_gstate_accept(st, ids[i], &err) == 0, "prefix token %d", i);
    uint8_t *allowed = malloc((size_t)V);
    int32_t only;
    int cnt = st ? sp_gstate_mask(st, allowed, &only, &err) : -1, same = 1, n_ok = 0;
    for (int i = 0; st && i < V; i++) {
        int a = sp_gstate_allows(st, i, &err);
        same &= a == allowed[i];
        n_ok += a == 1;
    }
    CHECK(cnt > 10 && same && n_ok == cnt, "mask %d vs allows %d", cnt, n_ok);
    free(allowed), free(ids);
    sp_gstate_free(st);
    sp_grammar_free(g);
    sp_gvocab_free(gv);
    sp_tok_free(tk);
}

int main(void) {
    RUN(test_gbnf_match);
    RUN(test_gbnf_errors);
    RUN(test_schema_text);
    RUN(test_token_walks);
    RUN(test_mask_matches_allows);
    return harness_done("test_grammar");
}
