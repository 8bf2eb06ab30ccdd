/* text.h — the server's text helpers: a growable byte buffer, the stop-string filter that never
 * lets a partial match reach the client, and the one place a chat is turned into prompt tokens. */
#ifndef SPECULA_SERVER_TEXT_H
#define SPECULA_SERVER_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "server/request.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    char *p;
    size_t n, cap;
} srv_buf;

/* Append n bytes (keeps a NUL after them). Returns 0, or -1 when out of memory. */
int sp_srv_buf_add(srv_buf *b, const char *s, size_t n);
int sp_srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sp_srv_buf_free(srv_buf *b);

/* Stop strings: text goes in as it is decoded; what comes out is the text that can no longer be
 * part of a stop string. The longest tail of the pending text that is a prefix of some stop string
 * is held back until the next push decides it; when a stop string appears, the text before it is
 * released and everything from it on is dropped. The stop strings are borrowed. */
typedef struct {
    char *const *stop;
    int n_stop;
    srv_buf held;
    int matched; /* 1 once a stop string was found */
} srv_stopper;

/* Returns 1 when a stop string matched (out got the text before it), 0 otherwise, -1 on OOM. */
int sp_srv_stopper_push(srv_stopper *s, const char *text, size_t n, srv_buf *out);
/* End of generation: release what was held. */
int sp_srv_stopper_flush(srv_stopper *s, srv_buf *out);
void sp_srv_stopper_free(srv_stopper *s);

/* The prompt tokens of a chat: rendered with the model's chat template (ct, from sp_chat_template_load:
 * the model's own Jinja template, else the tokenizer's hand-written renderer) and encoded as the
 * template text asks (no BOS added, special tokens parsed). ct NULL (a model with no template at
 * all): the message contents joined by blank lines, encoded as plain text with BOS. *ids
 * malloc'd. Returns 0, or -1 with err. */
struct chat_template;
int sp_srv_chat_tokens(const struct chat_template *ct, tok_tokenizer *t, const srv_msg *msgs, int n, int32_t **ids,
                    int *n_ids, sp_err *err);

#endif
