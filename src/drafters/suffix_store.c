/* suffix_store.c — the cross-request store of suffix drafting (suffix.h, docs/SUFFIX.md §3):
 * earlier requests' streams in one suffix automaton, every allocation counted against a byte
 * bound. The capacity grows by doubling up to the most tokens the bound allows (tokens, document
 * records and the automaton reserved for them); a stream that does not fit evicts the oldest
 * documents — down to half the capacity, so the rebuild of the automaton from the documents
 * left is paid once per half a store of new tokens. A mutex serialises adds and lookups. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "drafters/suffix.h"

#define STORE_MATCH_MOST 64 /* context tokens matched against the store */

typedef struct {
    int off, n; /* tokens tok[off .. off + n) */
} sfx_doc;

struct sp_sfx_store {
    pthread_mutex_t mu;
    size_t max_bytes;
    int max_tokens;     /* the most tokens the bound allows */
    int cap;            /* tokens reserved (tok, docs, automaton) */
    int32_t *tok;       /* [cap]: the documents, oldest first */
    sfx_doc *docs;      /* [cap] */
    int n_tok, n_docs;
    sp_sam sam;
};

/* everything a store reserved for n tokens allocates */
static size_t bytes_for(int n) {
    return sizeof(sp_sfx_store) + (size_t)n * (sizeof(int32_t) + sizeof(sfx_doc)) + sp_sam_bytes_for(n);
}

sp_sfx_store *sp_sfx_store_create(size_t max_bytes, sp_err *err) {
    if (bytes_for(16) > max_bytes) {
        sp_err_set(err, "suffix store: %zu bytes is too small (at least %zu)", max_bytes, bytes_for(16));
        return NULL;
    }
    sp_sfx_store *s = calloc(1, sizeof *s);
    if (!s) {
        sp_err_set(err, "suffix store: out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->max_bytes = max_bytes;
    long lo = 16, hi = 1L << 28; /* the largest n with bytes_for(n) <= max_bytes */
    while (lo < hi) {
        long mid = (lo + hi + 1) / 2;
        if (bytes_for((int)mid) <= max_bytes) lo = mid;
        else hi = mid - 1;
    }
    s->max_tokens = (int)lo;
    sp_sam_init(&s->sam);
    return s;
}

void sp_sfx_store_free(sp_sfx_store *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    sp_sam_free(&s->sam);
    free(s->tok), free(s->docs);
    free(s);
}

/* capacity for n tokens (n <= max_tokens): the automaton's arrays are reallocated exactly */
static int reserve(sp_sfx_store *s, int n, sp_err *err) {
    if (n <= s->cap) return 0;
    int cap = s->cap ? 2 * s->cap : 1024;
    if (cap < n) cap = n;
    if (cap > s->max_tokens) cap = s->max_tokens;
    int32_t *t = realloc(s->tok, sizeof(int32_t) * (size_t)cap);
    if (t) s->tok = t;
    sfx_doc *d = t ? realloc(s->docs, sizeof(sfx_doc) * (size_t)cap) : NULL;
    if (d) s->docs = d;
    if (!t || !d) return sp_err_set(err, "suffix store: out of memory for %d tokens", cap);
    s->cap = cap;
    return sp_sam_reserve(&s->sam, cap, err);
}

/* drop the oldest documents until `keep` tokens are left at most; the automaton rebuilt */
static int evict(sp_sfx_store *s, int keep, sp_err *err) {
    int d = 0, drop = 0;
    while (d < s->n_docs && s->n_tok - drop > keep) drop += s->docs[d++].n;
    memmove(s->tok, s->tok + drop, sizeof(int32_t) * (size_t)(s->n_tok - drop));
    memmove(s->docs, s->docs + d, sizeof(sfx_doc) * (size_t)(s->n_docs - d));
    s->n_tok -= drop, s->n_docs -= d;
    sp_sam_clear(&s->sam);
    for (int i = 0; i < s->n_docs; i++) {
        s->docs[i].off -= drop;
        sp_sam_doc(&s->sam);
        for (int j = 0; j < s->docs[i].n; j++)
            if (sp_sam_extend(&s->sam, s->tok[s->docs[i].off + j], err)) return -1;
    }
    return 0;
}

static int add_locked(sp_sfx_store *s, const int32_t *tok, int n, sp_err *err) {
    if (n > s->max_tokens) tok += n - s->max_tokens, n = s->max_tokens;
    if (s->n_tok + n > s->max_tokens) {
        int keep = s->max_tokens / 2 < s->max_tokens - n ? s->max_tokens / 2 : s->max_tokens - n;
        if (evict(s, keep, err)) return -1;
    }
    if (reserve(s, s->n_tok + n, err)) return -1;
    memcpy(s->tok + s->n_tok, tok, sizeof(int32_t) * (size_t)n);
    s->docs[s->n_docs++] = (sfx_doc){s->n_tok, n};
    s->n_tok += n;
    sp_sam_doc(&s->sam);
    for (int j = 0; j < n; j++)
        if (sp_sam_extend(&s->sam, tok[j], err)) return -1;
    if (sp_sfx_store_bytes(s) > s->max_bytes) /* the automaton outgrew its bounds: start over */
        return sp_err_set(err, "suffix store: %zu bytes over its bound of %zu", sp_sfx_store_bytes(s), s->max_bytes);
    return 0;
}

int sp_sfx_store_add(sp_sfx_store *s, const int32_t *tok, int n, sp_err *err) {
    if (n < 2) return 0;
    pthread_mutex_lock(&s->mu);
    int rc = add_locked(s, tok, n, err);
    if (rc) { /* empty and within bounds again */
        sp_sam_free(&s->sam);
        free(s->tok), free(s->docs);
        s->tok = NULL, s->docs = NULL;
        s->cap = s->n_tok = s->n_docs = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

size_t sp_sfx_store_bytes(sp_sfx_store *s) {
    return sizeof *s + (size_t)s->cap * (sizeof(int32_t) + sizeof(sfx_doc)) + s->sam.bytes;
}

int sp_sfx_store_tokens(sp_sfx_store *s) { return s->n_tok; }

int sp_sfx_store_chain(sp_sfx_store *s, const int32_t *ctx, int n, const sp_sfx_params *p, int max_g,
                       int32_t *drafts, double *score, int *match) {
    pthread_mutex_lock(&s->mu);
    sp_sam_match m = sp_sam_match_suffix(&s->sam, ctx, n, STORE_MATCH_MOST);
    *match = m.len;
    int got = sp_sfx_chain(&s->sam, m, p, max_g, drafts, score);
    pthread_mutex_unlock(&s->mu);
    return got;
}

int sp_sfx_store_tree(sp_sfx_store *s, const int32_t *ctx, int n, const sp_sfx_params *p, const sp_tree_shape *sh,
                      int32_t *tok, int32_t *parent) {
    pthread_mutex_lock(&s->mu);
    sp_sam_match m = sp_sam_match_suffix(&s->sam, ctx, n, STORE_MATCH_MOST);
    int got = sp_sfx_tree(&s->sam, m, p, sh, tok, parent);
    pthread_mutex_unlock(&s->mu);
    return got;
}
