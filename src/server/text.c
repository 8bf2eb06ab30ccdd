/* text.c — byte buffers, stop strings and chat prompts for the server (see text.h). */
#include "server/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/core.h"

int sp_srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int sp_srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof tmp) return sp_srv_buf_add(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = sp_srv_buf_add(b, big, (size_t)n);
    free(big);
    return rc;
}

void sp_srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* the first occurrence of any stop string in h[0, n), or -1 */
static long find_stop(const srv_stopper *s, const char *h, size_t n) {
    long best = -1;
    for (int i = 0; i < s->n_stop; i++) {
        size_t l = strlen(s->stop[i]);
        for (size_t at = 0; l <= n && at + l <= n; at++) {
            if (best >= 0 && (long)at >= best) break;
            if (!memcmp(h + at, s->stop[i], l)) {
                best = (long)at;
                break;
            }
        }
    }
    return best;
}

/* length of the longest tail of h[0, n) that is a proper prefix of a stop string */
static size_t partial_tail(const srv_stopper *s, const char *h, size_t n) {
    size_t keep = 0;
    for (int i = 0; i < s->n_stop; i++) {
        size_t l = strlen(s->stop[i]);
        for (size_t k = l - 1 < n ? l - 1 : n; k > keep; k--)
            if (!memcmp(h + n - k, s->stop[i], k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

int sp_srv_stopper_push(srv_stopper *s, const char *text, size_t n, srv_buf *out) {
    if (s->matched) return 1;
    if (s->n_stop == 0) return sp_srv_buf_add(out, text, n);
    if (sp_srv_buf_add(&s->held, text, n)) return -1;
    long at = find_stop(s, s->held.p, s->held.n);
    if (at >= 0) {
        s->matched = 1;
        int rc = sp_srv_buf_add(out, s->held.p, (size_t)at);
        s->held.n = 0;
        return rc ? -1 : 1;
    }
    size_t keep = partial_tail(s, s->held.p, s->held.n), give = s->held.n - keep;
    if (sp_srv_buf_add(out, s->held.p, give)) return -1;
    memmove(s->held.p, s->held.p + give, keep);
    s->held.n = keep;
    return 0;
}

int sp_srv_stopper_flush(srv_stopper *s, srv_buf *out) {
    if (s->matched || s->held.n == 0) return 0;
    int rc = sp_srv_buf_add(out, s->held.p, s->held.n);
    s->held.n = 0;
    return rc;
}

void sp_srv_stopper_free(srv_stopper *s) { sp_srv_buf_free(&s->held); }

int sp_srv_chat_tokens(const chat_template *ct, tok_tokenizer *t, const srv_msg *msgs, int n, int32_t **ids,
                    int *n_ids, sp_err *err) {
    *ids = NULL;
    *n_ids = 0;
    if (ct) {
        tok_msg *m = malloc(sizeof *m * (size_t)(n ? n : 1));
        if (!m) return sp_err_set(err, "out of memory");
        for (int i = 0; i < n; i++) m[i] = (tok_msg){msgs[i].role, msgs[i].content};
        char *text = NULL;
        int rc = sp_chat_render_msgs(ct, m, n, 1, NULL, &text, err);
        free(m);
        if (!rc) rc = sp_tok_encode(t, text, strlen(text), 0, 1, ids, n_ids, err);
        free(text);
        return rc;
    }
    srv_buf b = {0};
    for (int i = 0; i < n; i++)
        if ((i && sp_srv_buf_add(&b, "\n\n", 2)) || sp_srv_buf_add(&b, msgs[i].content, strlen(msgs[i].content))) {
            sp_srv_buf_free(&b);
            return sp_err_set(err, "out of memory");
        }
    int rc = sp_tok_encode(t, b.p ? b.p : "", b.n, 1, 0, ids, n_ids, err);
    sp_srv_buf_free(&b);
    return rc;
}
