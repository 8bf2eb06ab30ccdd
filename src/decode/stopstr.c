/* stopstr.c — stop strings over streamed text (see stopstr.h).
 *
 * State: buf holds the text not yet released — at most the longest stop string minus one byte
 * between calls, since anything longer that still matches no stop can be released. Each feed
 * appends the piece, looks for the earliest whole stop string, and otherwise keeps the longest
 * tail that is a prefix of a stop string. */
#include "decode/stopstr.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct sp_stopstr {
    char **stops;
    size_t *lens;
    int n;
    char *buf; /* held-back text */
    size_t len, cap;
    char *rel; /* the text released by the last call */
    size_t rel_cap;
    int stopped;
};

void sp_stopstr_free(sp_stopstr *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    free(s->rel);
    free(s);
}

sp_stopstr *sp_stopstr_create(const char *const *stops, int n, sp_err *err) {
    sp_stopstr *s = calloc(1, sizeof *s);
    if (!s || !(s->stops = calloc((size_t)(n > 0 ? n : 1), sizeof *s->stops)) ||
        !(s->lens = calloc((size_t)(n > 0 ? n : 1), sizeof *s->lens))) {
        sp_stopstr_free(s);
        sp_err_set(err, "stop strings: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !*stops[i]) {
            sp_stopstr_free(s);
            sp_err_set(err, "stop strings: stop string %d is empty", i + 1);
            return NULL;
        }
        if (!(s->stops[i] = strdup(stops[i]))) {
            sp_stopstr_free(s);
            sp_err_set(err, "stop strings: out of memory");
            return NULL;
        }
        s->lens[i] = strlen(stops[i]);
        s->n = i + 1;
    }
    return s;
}

static int grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *q = realloc(*p, c);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* first occurrence of any stop in text[0, len) (len when none) */
static size_t earliest(const char *text, size_t len, char *const *stops, const size_t *lens, int n) {
    size_t best = len;
    for (int i = 0; i < n; i++) {
        const char *hit = memmem(text, len, stops[i], lens[i]);
        if (hit && (size_t)(hit - text) < best) best = (size_t)(hit - text);
    }
    return best;
}

size_t sp_stopstr_cut(const char *text, size_t len, const char *const *stops, int n) {
    size_t best = len;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(stops[i]);
        const char *hit = k ? memmem(text, len, stops[i], k) : NULL;
        if (hit && (size_t)(hit - text) < best) best = (size_t)(hit - text);
    }
    return best;
}

/* release buf[0, k): copy it to rel, shift the rest down */
static int release(sp_stopstr *s, size_t k, const char **out, size_t *n_out) {
    if (grow(&s->rel, &s->rel_cap, k + 1)) return -1;
    memcpy(s->rel, s->buf, k);
    s->rel[k] = 0;
    memmove(s->buf, s->buf + k, s->len - k);
    s->len -= k;
    *out = s->rel;
    *n_out = k;
    return 0;
}

int sp_stopstr_feed(sp_stopstr *s, const char *text, size_t n, const char **out, size_t *n_out, sp_err *err) {
    *out = "";
    *n_out = 0;
    if (s->stopped) return 1;
    if (grow(&s->buf, &s->cap, s->len + n + 1)) return sp_err_set(err, "stop strings: out of memory");
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    size_t at = earliest(s->buf, s->len, s->stops, s->lens, s->n);
    if (at < s->len) {
        s->stopped = 1;
        s->len = at; /* the stop string and what follows are dropped */
        if (release(s, at, out, n_out)) return sp_err_set(err, "stop strings: out of memory");
        return 1;
    }
    /* hold the longest tail that a stop string starts with */
    size_t hold = 0;
    for (int i = 0; i < s->n; i++) {
        size_t k = s->lens[i] - 1 < s->len ? s->lens[i] - 1 : s->len;
        for (; k > hold; k--)
            if (!memcmp(s->buf + s->len - k, s->stops[i], k)) break;
        if (k > hold) hold = k;
    }
    if (release(s, s->len - hold, out, n_out)) return sp_err_set(err, "stop strings: out of memory");
    return 0;
}

void sp_stopstr_flush(sp_stopstr *s, const char **out, size_t *n_out) {
    *out = "";
    *n_out = 0;
    if (s->stopped || s->len == 0) return;
    if (release(s, s->len, out, n_out)) { /* no memory for a copy: hand out the buffer itself */
        *out = s->buf;
        *n_out = s->len;
        s->len = 0;
    }
}
