/* grammar.h — grammar-constrained sampling: a GBNF grammar (llama.cpp's syntax) compiled to rules,
 * a parse position over it, and the tokens each position allows (docs/GRAMMAR.md).
 *
 *     sp_grammar_parse   GBNF text → rules (repetitions rewritten into rules); an undefined rule,
 *                        a missing root or left recursion is an error, so matching never loops
 *     sp_gvocab_create   every token's bytes (sp_tok_token_bytes) in a byte trie, built once per
 *                        tokenizer; end-of-generation tokens are allowed only where the grammar ends
 *     sp_gstate_*        a parse position: the set of rule stacks the text so far leaves open.
 *                        sp_gstate_mask walks the token trie through the stacks (a token's bytes
 *                        may span several grammar elements and half a UTF-8 character);
 *                        sp_gstate_accept advances by one token
 *
 * Work is bounded on any grammar and input: at most SP_GRAMMAR_MAX_STACKS open stacks, stacks of at
 * most SP_GRAMMAR_MAX_DEPTH elements and SP_GRAMMAR_MAX_STEPS expansion steps per character; past a
 * bound the call fails with an error naming it. Not thread-safe per state; a grammar and a vocabulary
 * are read-only once built and may be shared. */
#ifndef SPECULA_GRAMMAR_H
#define SPECULA_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "specula.h"
#include "tokenizer/tokenizer.h"

#define SP_GRAMMAR_MAX_STACKS 1024
#define SP_GRAMMAR_MAX_DEPTH 4096
#define SP_GRAMMAR_MAX_STEPS 200000
#define SP_GRAMMAR_MAX_ELEMS (1 << 20) /* elements after repetitions are expanded */

typedef struct sp_grammar sp_grammar;
typedef struct sp_gvocab sp_gvocab;
typedef struct sp_gstate sp_gstate;

/* Compile GBNF text (len bytes) whose start rule is `root` (NULL: "root"). NULL with err naming the
 * line and what is wrong. */
sp_grammar *sp_grammar_parse(const char *text, size_t len, const char *root, sp_err *err);
void sp_grammar_free(sp_grammar *g);
int sp_grammar_n_rules(const sp_grammar *g);

/* The token bytes of tokenizer t for a model of V logits (ids past the tokenizer's are never
 * allowed), plus the end-of-generation ids eog[0 .. n_eog) (the model's EOS ids; the tokenizer's
 * own are added). NULL with err. */
sp_gvocab *sp_gvocab_create(const tok_tokenizer *t, int V, const int *eog, int n_eog, sp_err *err);
void sp_gvocab_free(sp_gvocab *v);
int sp_gvocab_size(const sp_gvocab *v);

/* The position before any text (both borrowed: they must outlive the state). NULL with err. */
sp_gstate *sp_gstate_create(const sp_grammar *g, const sp_gvocab *v, sp_err *err);
void sp_gstate_free(sp_gstate *s);
/* dst = src (same grammar and vocabulary). 0, or -1 with err. */
int sp_gstate_copy(sp_gstate *dst, const sp_gstate *src, sp_err *err);
/* allowed[V] = 1 for each token the grammar allows next (an end-of-generation token where the text
 * may end). Returns the count; *only = the token when exactly one is allowed (tokens of identical
 * bytes count as one: a byte-fallback token "<0x21>" beside "!"; *only is the tokenizer's own, "!"),
 * else -1. -1 with err when a bound is hit. */
int sp_gstate_mask(sp_gstate *s, uint8_t *allowed, int32_t *only, sp_err *err);
/* 1 when token tok is allowed next, 0 when not; -1 with err. */
int sp_gstate_allows(sp_gstate *s, int32_t tok, sp_err *err);
/* Advance by token tok: 0, 1 when tok is not allowed (the state is unchanged), -1 with err. */
int sp_gstate_accept(sp_gstate *s, int32_t tok, sp_err *err);
/* 1 when the text so far is a complete sentence of the grammar. */
int sp_gstate_can_end(const sp_gstate *s);
/* 1 when the text so far matches the whole grammar and nothing more may follow. */
int sp_gstate_done(const sp_gstate *s);

/* Text check: 1 when text[0 .. len) is a sentence of g, 0 when not, -1 with err. */
int sp_grammar_match_text(const sp_grammar *g, const char *text, size_t len, sp_err *err);

/* logits[i] = -inf where allowed[i] is 0. */
void sp_grammar_apply(const uint8_t *allowed, float *logits, int V);

#endif
