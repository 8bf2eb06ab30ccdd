/* stopstr.h — stop strings over streamed text (llama.cpp's `--stop` / `-r`).
 *
 * Generation is token by token, but a stop string is text: it may span several tokens or end in
 * the middle of one. The matcher receives the decoded text as it streams (complete UTF-8 pieces,
 * e.g. from sp_tok_stream_push) and releases only text that can no longer be part of a stop string:
 * a tail that is a prefix of some stop string is held back until the next piece decides it.
 * When a stop string appears, the text before it is released, the stop string and everything
 * after it never are, and the caller ends generation (the on_token callback returns non-zero, so
 * the speculative loop drops the rest of an accepted block too).
 *
 * Library code: nothing is printed; released text goes to the caller's buffer. */
#ifndef SPECULA_STOPSTR_H
#define SPECULA_STOPSTR_H

#include <stddef.h>

#include "specula.h"

typedef struct sp_stopstr sp_stopstr;

/* A matcher for stops[0, n) (each non-empty; copied). NULL with err on an empty string or no
 * memory. Caller owns it; free with sp_stopstr_free. */
sp_stopstr *sp_stopstr_create(const char *const *stops, int n, sp_err *err);
void sp_stopstr_free(sp_stopstr *s);

/* Append text[0, n). *out / *n_out receive the text released by this call (valid until the
 * next call; may be empty). Returns 1 when a stop string has appeared (the text before it is
 * released, nothing after), 0 otherwise, -1 on no memory. After a stop, further pieces are
 * ignored and released nothing. */
int sp_stopstr_feed(sp_stopstr *s, const char *text, size_t n, const char **out, size_t *n_out, sp_err *err);

/* End of generation without a stop: release the held-back tail. */
void sp_stopstr_flush(sp_stopstr *s, const char **out, size_t *n_out);

/* The offset of the earliest occurrence of any of stops[0, n) in text[0, len), or len when none
 * occurs (to cut a whole decoded text the same way the matcher cuts the stream). */
size_t sp_stopstr_cut(const char *text, size_t len, const char *const *stops, int n);

#endif
