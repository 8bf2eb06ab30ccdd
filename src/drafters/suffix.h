/* suffix.h — the pieces of suffix drafting (docs/SUFFIX.md), private to src/drafters/:
 *
 * - sp_sam: a suffix automaton over token ids (several documents: a generalized automaton) with,
 *   per state, the number of end positions of its strings — how often each continuation of a
 *   matched context occurred;
 * - sp_sfx_store: the cross-request store of one drafter source: earlier requests' streams
 *   (prompt + output) in one automaton, bounded in bytes, the oldest documents evicted first;
 * - the proposals: from a matched state, a chain (the most frequent continuation while its
 *   empirical probability stays above a floor) or a token tree (best first by that probability),
 *   each with a score: the expected number of accepted drafts under the empirical counts. */
#ifndef SPECULA_DRAFTERS_SUFFIX_H
#define SPECULA_DRAFTERS_SUFFIX_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "decode/drafter.h"

typedef struct {
    /* states [cap_states]: longest string length, suffix link (-1 at the root), end positions
     * (occurrences), first outgoing edge (-1: none) */
    int32_t *len, *link, *cnt, *first;
    /* edges [cap_edges]: source state, token, target state, next edge of the same source */
    int32_t *efrom, *etok, *eto, *enext;
    int32_t *hash;  /* [hmask + 1]: edge index or -1, open addressing on (source, token) */
    int n_states, n_edges, cap_states, cap_edges, hmask;
    int last;       /* the state of the whole current document */
    size_t bytes;   /* allocated */
} sp_sam;

void sp_sam_init(sp_sam *a);
void sp_sam_free(sp_sam *a);
/* Room for n tokens in all (states and edges sized by the automaton's bounds); 0 or -1. */
int sp_sam_reserve(sp_sam *a, int n, sp_err *err);
/* Forget everything (capacity kept); one empty document. */
void sp_sam_clear(sp_sam *a);
/* Start a new document: the next token extends the empty string. */
static inline void sp_sam_doc(sp_sam *a) { a->last = 0; }
/* Append token t to the current document; 0 or -1 (out of memory). */
int sp_sam_extend(sp_sam *a, int32_t t, sp_err *err);
/* The target of state v's edge on token t, or -1. */
int sp_sam_next(const sp_sam *a, int v, int32_t t);
/* The bytes an automaton reserved for n tokens allocates. */
size_t sp_sam_bytes_for(int n);

/* A matched context: state v, the matched length (a string of v). */
typedef struct {
    int v, len;
} sp_sam_match;

/* The longest suffix of ctx[0..n) (at most `most` tokens looked at) that occurs in a. */
sp_sam_match sp_sam_match_suffix(const sp_sam *a, const int32_t *ctx, int n, int most);

/* ---- proposals --------------------------------------------------------------------------- */
typedef struct {
    float min_prob;   /* a draft's cumulative empirical probability must stay >= this */
    int per_match;    /* most drafts per matched token (speculation length grows with the match) */
    int min_match;    /* shortest matched context that drafts */
} sp_sfx_params;

/* The chain from match m: up to max_g drafts, each the most frequent continuation; *score: the
 * sum of their cumulative probabilities. Returns the count. */
int sp_sfx_chain(const sp_sam *a, sp_sam_match m, const sp_sfx_params *p, int max_g, int32_t *drafts,
                 double *score);
/* A token tree from match m shaped by sh (docs/TREE.md §2: parents first, siblings by decreasing
 * probability, distinct tokens), best first by cumulative probability. Returns the node count. */
int sp_sfx_tree(const sp_sam *a, sp_sam_match m, const sp_sfx_params *p, const sp_tree_shape *sh, int32_t *tok,
                int32_t *parent);

/* ---- the cross-request store ------------------------------------------------------------- */
typedef struct sp_sfx_store sp_sfx_store;

/* A store of at most max_bytes (everything it allocates counted); NULL with err. */
sp_sfx_store *sp_sfx_store_create(size_t max_bytes, sp_err *err);
void sp_sfx_store_free(sp_sfx_store *s);
/* Add one finished stream (prompt + output). The oldest documents are evicted (the automaton
 * rebuilt) when it would not fit; a stream longer than the whole store keeps its last tokens.
 * Streams under 2 tokens are ignored. 0, or -1 with err (the store is then empty, still usable). */
int sp_sfx_store_add(sp_sfx_store *s, const int32_t *tok, int n, sp_err *err);
size_t sp_sfx_store_bytes(sp_sfx_store *s);     /* allocated now (<= max_bytes) */
int sp_sfx_store_tokens(sp_sfx_store *s);       /* tokens held */
/* The store's chain / tree continuing ctx[0..n) (as sp_sfx_chain / sp_sfx_tree; 0 when it holds
 * nothing that matches); *match: the matched length. Thread-safe against add. */
int sp_sfx_store_chain(sp_sfx_store *s, const int32_t *ctx, int n, const sp_sfx_params *p, int max_g,
                       int32_t *drafts, double *score, int *match);
int sp_sfx_store_tree(sp_sfx_store *s, const int32_t *ctx, int n, const sp_sfx_params *p, const sp_tree_shape *sh,
                      int32_t *tok, int32_t *parent);

#endif
