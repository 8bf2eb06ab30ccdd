/* tok_test_gguf.h — a minimal GGUF writer for the tokenizer tests (little-endian host):
 * enough to build vocab-only files and tensor-info fixtures by hand. */
#ifndef SPECULA_TOK_TEST_GGUF_H
#define SPECULA_TOK_TEST_GGUF_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *p;
    size_t n, cap;
} wbuf;

static inline void wput(wbuf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) b->cap = (b->n + n) * 2, b->p = realloc(b->p, b->cap);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static inline void w32(wbuf *b, uint32_t v) { wput(b, &v, 4); }
static inline void w64(wbuf *b, uint64_t v) { wput(b, &v, 8); }
static inline void wstrn(wbuf *b, const char *s, size_t n) { w64(b, n), wput(b, s, n); }
static inline void wstr(wbuf *b, const char *s) { wstrn(b, s, strlen(s)); }
/* a key followed by its value type */
static inline void wkey(wbuf *b, const char *k, uint32_t type) { wstr(b, k), w32(b, type); }

#endif
