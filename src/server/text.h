/* text.h — the server's growable byte buffer (response bodies, SSE chunks, a job's released text).
 * Stop strings go through decode/stopstr.h and chats become tokens through chat/chat.h, as in the
 * CLI. */
#ifndef SPECULA_SERVER_TEXT_H
#define SPECULA_SERVER_TEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *p;
    size_t n, cap;
} srv_buf;

/* Append n bytes (keeps a NUL after them). Returns 0, or -1 when out of memory. */
int sp_srv_buf_add(srv_buf *b, const char *s, size_t n);
int sp_srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sp_srv_buf_free(srv_buf *b);

#endif
