/* test_jinja.c — the chat-template engine (src/chat/jinja.h) on its own: every statement,
 * filter, test, method and whitespace rule the published chat templates use, each against
 * the text Jinja2 renders (Hugging Face's settings: trim_blocks, lstrip_blocks; members of an
 * undefined value are undefined); errors that name the construct and its line; and the
 * bounds (nesting, steps, memory, output) that keep any input safe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "harness.h"

typedef struct {
    const char *what, *tmpl, *ctx, *want;
} jcase;

/* expected texts as Jinja2 3.1 renders them with trim_blocks and lstrip_blocks */
static const jcase CASES[] = {
    {"output and arithmetic",
     "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 10 / 5 }} {{ 1.5 + 1 }}",
     NULL,
     "7 3 -4 -2 1024 3.5 2.0 2.5"},
    {"str() of values",
     "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' * 3 }} {{ [1, 'b', none, true, 1.0] }} {{ {'k': 'v', 'n': [1]} }} {{ (1, 2) }} {{ (1,) }}",
     NULL,
     "a1NoneTrue xxx [1, 'b', None, True, 1.0] {'k': 'v', 'n': [1]} (1, 2) (1,)"},
    {"repr quoting and floats",
     "{{ [\"it's\", 'say \"hi\"', 'a\\nb'] }} {{ 0.1 }} {{ 1e20 }} {{ 1e-5 }} {{ 123456.789 }} {{ 100.0 }} {{ 1.5e16 }}",
     NULL,
     "[\"it's\", 'say \"hi\"', 'a\\nb'] 0.1 1e+20 1e-05 123456.789 100.0 1.5e+16"},
    {"if elif else",
     "{% for v in [1, 2, 3, 4] %}{% if v == 1 %}a{% elif v == 2 %}b{% elif v == 3 %}c{% else %}d{% endif %}{% endfor %}",
     NULL,
     "abcd"},
    {"for loop variables",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
     NULL,
     "10TrueFalse332|21FalseFalse321|32FalseTrue310|"},
    {"for previtem nextitem",
     "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
     NULL,
     "-2;1-3;2-;"},
    {"for else",
     "{% for x in [] %}no{% else %}empty{% endfor %}{% for x in undefined_list %}no{% else %}!{% endfor %}",
     NULL,
     "empty!"},
    {"for tuple target over items",
     "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for (k, v) in d | items %}{{ k }}{{ v }}{% endfor %}",
     "{\"d\": {\"x\": 9}}",
     "a=1;b=2;x9"},
    {"for with if filter",
     "{% for x in range(10) if x is odd %}{{ x }}/{{ loop.length }},{% endfor %}",
     NULL,
     "1/5,3/5,5/5,7/5,9/5,"},
    {"break and continue",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     NULL,
     "0134"},
    {"nested loops",
     "{% for m in [1, 2] %}{% for n in [3, 4] %}{{ loop.index }}{{ m }}{{ n }} {% endfor %}{{ loop.index }}|{% endfor %}",
     NULL,
     "113 214 1|123 224 2|"},
    {"loop scope and namespace",
     "{% set ns = namespace(a=1, b='x') %}{% set b = 'outer' %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% set b = 'inner' %}{% endfor %}{{ ns.a }} {{ ns.b }} {{ b }}",
     NULL,
     "4 x outer"},
    {"set in if is visible after",
     "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}",
     NULL,
     "2"},
    {"set tuple and block set",
     "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]",
     NULL,
     "12[block 2]"},
    {"macro",
     "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} {{ greet('Al', greeting='Hi') }} {{ greet(name='Z') }}",
     NULL,
     "Hello, Bob! Hi, Al! Hello, Z!"},
    {"raw",
     "{% raw %}{{ not rendered }}{% if %}{% endraw %}",
     NULL,
     "{{ not rendered }}{% if %}"},
    {"comments",
     "a{# a comment #}b\n  {# own line #}\nc",
     NULL,
     "ab\nc"},
    {"whitespace control",
     "a   {%- if true -%}   b   {%- endif -%}   c\n{{- ' d ' -}}\n  e",
     NULL,
     "abc d e"},
    {"trim_blocks and lstrip_blocks",
     "line1\n    {% if true %}\n    indented\n    {% endif %}\nline2\n  {%+ if true %}keep{% endif %}\n",
     NULL,
     "line1\n    indented\nline2\n  keep"},
    {"trailing newline dropped",
     "x\n",
     NULL,
     "x"},
    {"slices",
     "{{ 'abcdef'[1:3] }} {{ 'abcdef'[::-1] }} {{ [1, 2, 3, 4][1:] }} {{ [1, 2, 3, 4][-2:] }} {{ [1, 2, 3, 4][::2] }} {{ 'h\303\251llo'[1] }} {{ 'abc'[-1] }} {{ [1, 2, 3, 4, 5][4:1:-2] }}",
     NULL,
     "bc fedcba [2, 3, 4] [3, 4] [1, 3] \303\251 c [5, 3]"},
    {"subscript and attribute",
     "{{ messages[0]['role'] }} {{ messages[-1].content }} {{ messages[5] }}|{{ messages[0].nope }}|{{ d.k[0] }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"k\": [\"K0\"]}}",
     "user yo ||K0"},
    {"string filters",
     "{{ '  hi \\n' | trim }}|{{ 'Hello' | upper }}|{{ 'HeLLo' | lower }}|{{ 'hello world' | capitalize }}|{{ 'hello world' | title }}|{{ 'a-b-c' | replace('-', '+') }}|{{ 'xx' | trim('x') }}",
     NULL,
     "hi|HELLO|hello|Hello world|Hello World|a+b+c|"},
    {"length first last join",
     "{{ [1, 2, 3] | length }} {{ 'h\303\251llo' | length }} {{ {'a': 1} | length }} {{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ [1, 2] | join(', ') }} {{ ['a', 'b'] | join }} {{ 'abc' | count }}",
     NULL,
     "3 5 1 3 2 1, 2 ab 3"},
    {"default",
     "{{ undefined_var | default('dflt') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ 0 | d('zero', boolean=true) }}",
     NULL,
     "dflt e None zero"},
    {"tojson",
     "{{ {'a': 1, 'b': [1, 2, {'c': none}], 'd': '\303\251\"\\n'} | tojson }} {{ [1, 2] | tojson(indent=2) }} {{ {'z': 1, 'a': {'b': true}} | tojson(indent=4) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ 1.0 | tojson }} {{ 'x\\u0001' | tojson }}",
     NULL,
     "{\"a\": 1, \"b\": [1, 2, {\"c\": null}], \"d\": \"\303\251\\\"\\n\"} [\n  1,\n  2\n] {\n    \"z\": 1,\n    \"a\": {\n        \"b\": true\n    }\n} {\"a\": 2, \"b\": 1} 1.0 \"x\\u0001\""},
    {"items list string int float",
     "{{ {'a': 1} | items | list }} {{ 'ab' | list }} {{ 5 | string }} {{ '42' | int }} {{ 3.9 | int }} {{ 'x' | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 'a<b>' | e }} {{ 'raw' | safe }}",
     NULL,
     "[('a', 1)] ['a', 'b'] 5 42 3 0 2.5 3 2.57 a&lt;b&gt; raw"},
    {"selectattr rejectattr map",
     "{% set ms = [{'role': 'user', 'x': 1}, {'role': 'system'}, {'role': 'user'}] %}{{ ms | selectattr('role', 'equalto', 'user') | list | length }} {{ ms | rejectattr('role', 'equalto', 'user') | list }} {{ ms | map(attribute='role') | join(',') }} {{ ms | selectattr('x') | list }} {{ [1, 2, 3, 4] | select('even') | list }} {{ ['a', 'B'] | map('upper') | list }}",
     NULL,
     "2 [{'role': 'system'}] user,system,user [{'role': 'user', 'x': 1}] [2, 4] ['A', 'B']"},
    {"sort unique sum min max reverse",
     "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 1, 2] | unique | list }} {{ [1, 2, 3] | sum }} {{ [1, 5, 3] | max }} {{ [1, 5, 3] | min }} {{ 'abc' | reverse }} {{ [1, 2] | reverse | list }}",
     NULL,
     "[1, 2, 3] [3, 2, 1] [1, 2] 6 5 1 cba [2, 1]"},
    {"indent wordcount",
     "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'one two  three' | wordcount }}",
     NULL,
     "a\n  b\n\n  c|  a\n  b|3"},
    {"string methods",
     "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'xxhixx'.strip('x') }} {{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ 'hi\\n\\n'.rstrip() }}|{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('lo', 'x')) }} {{ 'hello'.upper() }} {{ 'Hello'.lower() }} {{ 'a-b'.replace('-', '_') }} {{ 'hello'.find('l') }} {{ ', '.join(['a', 'b']) }} {{ 'a b'.title() }} {{ 'x,y'.split(',')[-1] }} {{ 'abb'.count('b') }}",
     NULL,
     "['a', 'b', '', 'c'] ['a', 'b', 'c'] ['a', 'b c'] hi hi\n|hi|True True HELLO hello a_b 2 a, b A B y 2"},
    {"dict methods",
     "{% set d = {'a': 1} %}{{ d.get('a') }} {{ d.get('b') }} {{ d.get('b', 5) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }}",
     NULL,
     "1 None 5 ['a'] [1] [('a', 1)]"},
    {"tests",
     "{{ 1 is defined }} {{ nope is defined }} {{ nope is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'x' is sequence }} {{ 1 is number }} {{ 1.5 is float }} {{ 2 is integer }} {{ true is boolean }} {{ 1 is boolean }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 1 is eq 2 }} {{ false is false }} {{ true is true }} {{ 1 is true }} {{ x is not defined }} {{ 2 is in [1, 2] }} {{ 'ab' is lower }}",
     NULL,
     "True False True True True True True True True True True True False True True True True False True True False True True True"},
    {"operators",
     "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ not true }} {{ true and 'x' }} {{ false or 'y' }} {{ '' or none }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1] + [2] }} {{ 'ab' + 'cd' }} {{ 3 - 5 }} {{ -(3) }} {{ -2 ** 2 }} {{ 2 + 3 | string | length }} {{ 'a' | upper ~ 'b' }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'abc' < 'abd' }}",
     NULL,
     "True True True True False x y None True False [1, 2] abcd -2 -3 4 3 Ab True True True"},
    {"inline if",
     "{{ 'yes' if true else 'no' }} {{ 'yes' if false else 'no' }} [{{ 'y' if false }}] {{ 'a' if 1 else 'b' if 0 else 'c' }}",
     NULL,
     "yes no [] a"},
    {"range dict namespace",
     "{{ range(5) | list }} {{ range(2, 8, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b=2) }} {% set ns = namespace(d) %}{{ ns.k }}",
     "{\"d\": {\"k\": \"v\"}}",
     "[0, 1, 2, 3, 4] [2, 5] [5, 3, 1] {'a': 1, 'b': 2} v"},
    {"string escapes and concatenation",
     "{{ \"multi\" \"part\" }} {{ 'a\\tb\\u00e9\\x41' }}",
     NULL,
     "multipart a\tb\303\251A"},
    {"iteration over strings and dicts",
     "{% for c in 'h\303\251y' %}[{{ c }}]{% endfor %} {% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}",
     NULL,
     "[h][\303\251][y] xy"},
    {"context values",
     "{{ n }} {{ f }} {{ b }} {{ s }} {{ l }} {{ o.k }} {{ z }}",
     "{\"n\": 3, \"f\": 0.5, \"b\": false, \"s\": \"str\", \"l\": [1, \"a\"], \"o\": {\"k\": null}, \"z\": null}",
     "3 0.5 False str [1, 'a'] None None"},
    {"loop.cycle",
     "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}",
     NULL,
     "ababa"},
    {"dictsort and format",
     "{{ {'b': 1, 'a': 2} | dictsort }} {% for k, v in {'b': 1, 'a': 2} | dictsort(reverse=true) %}{{ k }}{{ v }}{% endfor %} {{ '%s is %d%%' | format('x', 5) }}",
     NULL,
     "[('a', 2), ('b', 1)] b1a2 x is 5%"},
};

/* text filters read str(value): undefined is "" (an assistant turn with tool calls and no content) */
static void test_text_filters_on_non_strings(void) {
    sp_err err = {{0}};
    char *out = NULL;
    size_t n;
    const char *t = "[{{ nope | trim }}|{{ 5 | upper }}|{{ none | lower }}|{{ m.content | trim ~ '</s>' }}]";
    CHECK(sp_jinja_render_bytes(t, strlen(t), "{\"m\": {}}", 9, &out, &n, &err) == 0 && !strcmp(out, "[|5|none|</s>]"),
          "%s", out ? out : err.msg);
    free(out);
}

static char *render(const char *tmpl, const char *ctx, sp_err *err) {
    char *out = NULL;
    size_t n;
    if (sp_jinja_render_bytes(tmpl, strlen(tmpl), ctx, ctx ? strlen(ctx) : 0, &out, &n, err)) return NULL;
    return out;
}

static void test_cases(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        sp_err err = {{0}};
        char *out = render(CASES[i].tmpl, CASES[i].ctx, &err);
        CHECK(out && !strcmp(out, CASES[i].want), "%s:\n  got  [%s]\n  want [%s]", CASES[i].what,
              out ? out : err.msg, CASES[i].want);
        free(out);
    }
}

/* Hugging Face's {% generation %} marker renders its body; strftime_now formats today */
static void test_hf_extensions(void) {
    sp_err err = {{0}};
    char *out = render("{% generation %}kept{% endgeneration %}", NULL, &err);
    CHECK(out && !strcmp(out, "kept"), "%s", out ? out : err.msg);
    free(out);
    out = render("{{ strftime_now('%Y') | length }} {{ strftime_now('%d %b %Y') | length > 9 }}", NULL, &err);
    CHECK(out && !strcmp(out, "4 True"), "%s", out ? out : err.msg);
    free(out);
}

/* each error names what went wrong and the line it is on */
static void test_errors(void) {
    static const struct {
        const char *tmpl, *want;
    } E[] = {
        {"ok\n{{ x | nosuchfilter }}", "template:2: unknown filter 'nosuchfilter'"},
        {"\n\n{{ 1 is nosuchtest }}", "template:3: unknown test 'nosuchtest'"},
        {"{% include 'x.jinja' %}", "template:1: the 'include' statement is not supported"},
        {"a\n{% extends 'b' %}", "template:2: the 'extends' statement is not supported"},
        {"{% for x in y %}\n\n{% if x %}", "template:3: '{% if %}' is not closed by '{% endif %}'"},
        {"{% for x in y %}\nx", "template:1: '{% for %}' is not closed by '{% endfor %}'"},
        {"x\n{% endif %}", "template:2: unexpected '{% endif %}' with no block open"},
        {"{{ 1 + }}", "template:1: expected an expression, got '}}'"},
        {"{{ 'abc }}", "template:1: string literal is not closed"},
        {"line\n{{ x", "template:2: '{{' is not closed by '}}'"},
        {"{# open", "template:1: comment '{#' is not closed by '#}'"},
        {"{% raw %}x", "template:1: {% raw %} is not closed by {% endraw %}"},
        {"{{ raise_exception('roles must alternate') }}", "template:1: the template raised an error: roles must alternate"},
        {"\n{{ 1 // 0 }}", "template:2: division by zero"},
        {"{{ 'a' + 1 }}", "template:1: cannot apply '+' to a string and an integer"},
        {"{{ x.strip() }}", "template:1: an undefined value has no method 'strip'"},
        {"{{ [1].nosuch() }}", "template:1: a list has no method 'nosuch'"},
        {"{% set x.y = 1 %}", "template:1: cannot set 'x.y': 'x' is an undefined value, not a namespace()"},
        {"{% break %}", "template:1: 'break' outside a for loop"},
        {"{{ 9223372036854775807 + 1 }}", "template:1: integer overflow in '+'"},
        {"{% for x in 5 %}{% endfor %}", "template:1: cannot loop over an integer"},
        {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "template:1: macro 'm' takes 1 arguments"},
        {"{{ undefined_fn() }}", "template:1: 'undefined_fn' is undefined, so it cannot be called"},
        {"{{ 1 < 'a' }}", "template:1: cannot order an integer and a string"},
        {"{{ x @ y }}", "template:1: unexpected character '@' in a tag"},
    };
    for (size_t i = 0; i < sizeof E / sizeof *E; i++) {
        sp_err err = {{0}};
        char *out = render(E[i].tmpl, NULL, &err);
        CHECK(!out && strstr(err.msg, E[i].want), "%s\n  got  [%s]\n  want [%s]", E[i].tmpl, out ? out : err.msg,
              E[i].want);
        free(out);
    }
    sp_err err = {{0}};
    char *out = NULL;
    size_t n;
    CHECK(sp_jinja_render_bytes("x", 1, "[1]", 3, &out, &n, &err) == -1 && strstr(err.msg, "JSON object"), "%s", err.msg);
    CHECK(sp_jinja_render_bytes("x", 1, "{bad", 4, &out, &n, &err) == -1 && strstr(err.msg, "invalid JSON"), "%s", err.msg);
}

/* hostile templates end with an error, not a crash or a hang */
static void test_bounds(void) {
    sp_err err = {{0}};
    char *out = NULL;
    size_t n;
    /* nesting: 5000 parentheses, 5000 nested ifs, a macro calling itself */
    char *deep = malloc(40000);
    size_t k = 0;
    k += (size_t)sprintf(deep + k, "{{ ");
    for (int i = 0; i < 5000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 5000; i++) deep[k++] = ')';
    strcpy(deep + k, " }}");
    CHECK(!render(deep, NULL, &err) && strstr(err.msg, "nested too deeply"), "%s", err.msg);
    k = 0;
    for (int i = 0; i < 3000; i++) k += (size_t)sprintf(deep + k, "{%%if 1%%}");
    deep[k] = 0;
    CHECK(!render(deep, NULL, &err) && strstr(err.msg, "nested too deeply"), "%s", err.msg);
    free(deep);
    CHECK(!render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &err) &&
          strstr(err.msg, "recurses too deeply"), "%s", err.msg);
    /* steps, memory and output caps */
    jinja_limits lim = {.max_output = 1000, .max_memory = 1 << 20, .max_steps = 100000};
    const char *slow = "{% set r = range(1000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}";
    CHECK(sp_jinja_render(slow, strlen(slow), "slow", NULL, &lim, &out, &n, &err) == -1 && strstr(err.msg, "too many steps"),
          "%s", err.msg);
    /* work on long strings counts: a loop scanning a 64 KiB string 20000 times stops */
    jinja_limits lim2 = {.max_steps = 100000};
    const char *scan = "{% set ns = namespace(s='ab') %}{% for i in range(15) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                       "{% for i in range(20000) %}{{ 'z' in ns.s }}{% endfor %}";
    CHECK(sp_jinja_render(scan, strlen(scan), "scan", NULL, &lim2, &out, &n, &err) == -1 && strstr(err.msg, "too many steps"),
          "%s", err.msg);
    const char *big = "{% for i in range(200) %}0123456789{% endfor %}";
    CHECK(sp_jinja_render(big, strlen(big), "big", NULL, &lim, &out, &n, &err) == -1 && strstr(err.msg, "exceeds 1000 bytes"),
          "%s", err.msg);
    const char *grow = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}";
    CHECK(sp_jinja_render(grow, strlen(grow), "grow", NULL, &lim, &out, &n, &err) == -1 && strstr(err.msg, "memory"),
          "%s", err.msg);
    CHECK(!render("{{ range(100000000) | length }}", NULL, &err) && strstr(err.msg, "range of more than"), "%s", err.msg);
    CHECK(!render("{{ 'ab' * 1000000000000 }}", NULL, &err) && strstr(err.msg, "too large"), "%s", err.msg);
    /* bytes that are not text: invalid UTF-8 passes through, a NUL is an error (a C string would
     * end there), never a crash */
    const char bin[] = "ab{{ '\xff\xfe' | upper }}{{ '\xc3' | length }}";
    CHECK(sp_jinja_render_bytes(bin, sizeof bin - 1, NULL, 0, &out, &n, &err) == 0 && n == 5 && !memcmp(out, "ab\xff\xfe" "1", 5),
          "%s", err.msg);
    free(out);
    out = NULL;
    const char nul[] = "a\0b{{ 1 }}";
    CHECK(sp_jinja_render_bytes(nul, sizeof nul - 1, NULL, 0, &out, &n, &err) == -1 && strstr(err.msg, "NUL byte at offset 1"),
          "%s", err.msg);
    /* a member of an undefined member raises, as in Jinja */
    CHECK(!render("{{ nope.deeper.still }}", NULL, &err) && strstr(err.msg, "'nope' is undefined (reading .deeper)"), "%s",
          err.msg);
    free(out);
}

/* random byte soup built from template fragments: every run returns (output or error) */
static void test_fragment_soup(void) {
    static const char *frag[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "if", "for", "x", "in", "else",
                                 "endif", "endfor", "set", "=", "'s'", "(", ")", "[", "]", "|", "trim", "1", ".",
                                 " ", "\n", "loop", "is", "not", "macro", "ns", ":", ",", "~", "*", "raw", "endraw"};
    unsigned s = 12345;
    int ok = 0, errs = 0;
    for (int it = 0; it < 3000; it++) {
        char t[512];
        size_t k = 0;
        int nf = 1 + (int)((s = s * 1103515245u + 12345u) >> 16) % 40;
        for (int f = 0; f < nf; f++) {
            const char *p = frag[((s = s * 1103515245u + 12345u) >> 16) % (sizeof frag / sizeof *frag)];
            size_t l = strlen(p);
            if (k + l >= sizeof t) break;
            memcpy(t + k, p, l), k += l;
        }
        char *out = NULL;
        size_t n;
        sp_err err = {{0}};
        if (sp_jinja_render_bytes(t, k, "{\"x\": [1, 2]}", 13, &out, &n, &err) == 0) ok++;
        else errs += err.msg[0] != 0;
        free(out);
    }
    CHECK(ok + errs == 3000 && ok > 0 && errs > 0, "ok %d, errors %d", ok, errs);
}

int main(void) {
    RUN(test_cases);
    RUN(test_hf_extensions);
    RUN(test_text_filters_on_non_strings);
    RUN(test_errors);
    RUN(test_bounds);
    RUN(test_fragment_soup);
    return harness_done("test_jinja");
}
