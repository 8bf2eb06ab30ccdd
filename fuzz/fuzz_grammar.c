/* fuzz_grammar.c — GBNF text through the grammar compiler (sp_grammar_parse); a grammar it accepts
 * then matches a text built from the input's tail (sp_grammar_match_text), which must stay within
 * its bounds (stacks, depth, steps) and never loop. */
#include "fuzz.h"
#include "sample/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    /* the grammar is the input up to the first NUL, the text what follows */
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    sp_err err = {{0}};
    sp_grammar *g = sp_grammar_parse((const char *)data, glen, NULL, &err);
    if (!g) {
        if (!err.msg[0]) abort(); /* a rejected grammar always says why */
        return 0;
    }
    if (sp_grammar_n_rules(g) < 1) abort();
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? size - glen - 1 : 0;
    if (tlen > 4096) tlen = 4096;
    int ok = sp_grammar_match_text(g, text, tlen, &err);
    if (ok < -1 || ok > 1) abort();
    sp_grammar_free(g);
    return 0;
}
