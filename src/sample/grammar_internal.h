/* grammar_internal.h — the compiled form of a grammar, shared by the parser (grammar_parse.c) and the
 * matcher (grammar.c). Private to src/sample/.
 *
 * A rule is a list of alternatives; an alternative is a run of elements in el[] ended by GE_END.
 * Elements: GE_CHR matches one code point against ranges rng[a .. a + b) (pairs lo, hi), negated
 * when neg; GE_REF expands rule a. A parse stack is a list of positions in el[]: the top is the
 * next element to match, each one below it is where its caller continues. */
#ifndef SPECULA_GRAMMAR_INTERNAL_H
#define SPECULA_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "sample/grammar.h"

enum { GE_END = 0, GE_REF = 1, GE_CHR = 2 };

typedef struct {
    uint8_t type, neg;
    uint32_t a, b;
} sp_gel;

struct sp_grammar {
    sp_gel *el;
    int n_el;
    uint32_t *rng; /* [n_rng, 2]: lo, hi */
    int n_rng;
    int n_rules;
    int *alt0, *n_alt; /* rule r: alternatives alt_start[alt0[r] .. alt0[r] + n_alt[r]) */
    int *alt_start;
    int root;
    char **names; /* [n_rules] (for messages) */
};

#endif
