/* fuzz_schema.c — JSON Schema text through the schema → GBNF converter (sp_json_schema_gbnf_text);
 * whatever GBNF it writes must compile (sp_grammar_parse), since the server hands it on unchecked
 * by the user. */
#include "fuzz.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    sp_err err = {{0}};
    char *gbnf = sp_json_schema_gbnf_text((const char *)data, size, &err);
    if (!gbnf) {
        if (!err.msg[0]) abort();
        return 0;
    }
    sp_grammar *g = sp_grammar_parse(gbnf, strlen(gbnf), NULL, &err);
    if (!g) {
        fprintf(stderr, "schema gave a grammar that does not compile: %s\n%s\n", err.msg, gbnf);
        abort();
    }
    sp_grammar_free(g);
    free(gbnf);
    return 0;
}
