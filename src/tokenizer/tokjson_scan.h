/* tokjson_scan.h — fast reader for tokenizer.json's model.vocab and model.merges
 * (tokjson_scan.c). Internal to the tokenizer. */
#ifndef SPECULA_TOKJSON_SCAN_H
#define SPECULA_TOKJSON_SCAN_H

#include <stddef.h>

typedef struct {
    const char *base;
    size_t a, b; /* value bytes [a, b) of base; b == 0: absent */
} tj_span;

/* Spans of model.vocab and model.merges in the document; -1 when the document is not a
 * well-formed object with a "model" object (the caller then lets jansson report why). */
int sp_tj_find_model_members(const char *s, size_t n, tj_span *vocab, tj_span *merges);

/* callbacks return non-zero to stop with an error they have already reported */
typedef int (*tj_vocab_fn)(void *ctx, const char *tok, size_t len, long long id);
typedef int (*tj_merge_fn)(void *ctx, long long idx, const char *a, size_t la, const char *b, size_t lb);

/* 0 ok; -1 malformed at *bad_at (offset in the span); -2 the callback failed;
 * -3 (merges) a string merge without a space */
int sp_tj_vocab_each(const char *p, const char *e, tj_vocab_fn fn, void *ctx, size_t *bad_at);
int sp_tj_merges_each(const char *p, const char *e, tj_merge_fn fn, void *ctx, size_t *bad_at);

#endif
