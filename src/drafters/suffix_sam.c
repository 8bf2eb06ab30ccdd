/* suffix_sam.c — a suffix automaton over token ids with occurrence counts, and the suffix
 * drafter's proposals read from it (suffix.h, docs/SUFFIX.md §1-2).
 *
 * The automaton is the usual online construction (each token: one new state, edges added up
 * the suffix-link chain, a clone where a state splits), generalized to several documents: a
 * document starts again from the root, and a token whose edge already exists there reuses (or
 * clones) its target instead of making a state no string reaches. Edges live in one array,
 * chained per source state (to enumerate continuations) and indexed by an open-addressing hash
 * on (source, token) (to follow one).
 *
 * Counts: cnt[v] is the number of end positions of v's strings. A new token adds one end
 * position to every state on the suffix-link chain from the new state; the walk stops after
 * SAM_CNT_WALK states, so on very repetitive input the counts of short strings (states far up
 * the chain) are lower bounds. Proposals divide by the sum of the children's counts, never by
 * the parent's, so a ratio stays a probability either way. */
#include <stdlib.h>
#include <string.h>

#include "drafters/suffix.h"

#define SAM_CNT_WALK 256

void sp_sam_init(sp_sam *a) { memset(a, 0, sizeof *a); }

void sp_sam_free(sp_sam *a) {
    free(a->len), free(a->link), free(a->cnt), free(a->first);
    free(a->efrom), free(a->etok), free(a->eto), free(a->enext);
    free(a->hash);
    sp_sam_init(a);
}

static int hash_slots(int edges) {
    int h = 16;
    while (h < 2 * edges) h *= 2;
    return h;
}

size_t sp_sam_bytes_for(int n) {
    size_t st = 2 * (size_t)n + 2, ed = 3 * (size_t)n + 4;
    return st * 4 * sizeof(int32_t) + ed * 4 * sizeof(int32_t) + (size_t)hash_slots((int)ed) * sizeof(int32_t);
}

static uint32_t hash_of(int32_t v, int32_t t) {
    uint32_t h = (uint32_t)v * 0x9E3779B1u ^ ((uint32_t)t + 0x7F4A7C15u) * 0x85EBCA77u;
    return h ^ (h >> 15);
}

static void hash_put(sp_sam *a, int e) {
    uint32_t i = hash_of(a->efrom[e], a->etok[e]) & (uint32_t)a->hmask;
    while (a->hash[i] >= 0) i = (i + 1) & (uint32_t)a->hmask;
    a->hash[i] = e;
}

/* the edge index of (v, t), or -1 */
static int edge_find(const sp_sam *a, int v, int32_t t) {
    if (!a->hash) return -1;
    uint32_t i = hash_of(v, t) & (uint32_t)a->hmask;
    for (int e; (e = a->hash[i]) >= 0; i = (i + 1) & (uint32_t)a->hmask)
        if (a->efrom[e] == v && a->etok[e] == t) return e;
    return -1;
}

int sp_sam_next(const sp_sam *a, int v, int32_t t) {
    int e = edge_find(a, v, t);
    return e < 0 ? -1 : a->eto[e];
}

static int grow(int32_t **p, int cap) {
    int32_t *q = realloc(*p, sizeof(int32_t) * (size_t)cap);
    if (!q) return -1;
    *p = q;
    return 0;
}

/* capacity for `states` states and `edges` edges (never shrinks); the hash rebuilt when it grows */
static int sam_room(sp_sam *a, int states, int edges, sp_err *err) {
    if (states > a->cap_states) {
        if (grow(&a->len, states) || grow(&a->link, states) || grow(&a->cnt, states) || grow(&a->first, states))
            return sp_err_set(err, "suffix: out of memory for %d automaton states", states);
        a->cap_states = states;
    }
    if (edges > a->cap_edges) {
        if (grow(&a->efrom, edges) || grow(&a->etok, edges) || grow(&a->eto, edges) || grow(&a->enext, edges))
            return sp_err_set(err, "suffix: out of memory for %d automaton edges", edges);
        a->cap_edges = edges;
    }
    int h = hash_slots(a->cap_edges);
    if (h - 1 > a->hmask) {
        int32_t *nh = malloc(sizeof(int32_t) * (size_t)h);
        if (!nh) return sp_err_set(err, "suffix: out of memory for a hash of %d slots", h);
        free(a->hash);
        a->hash = nh;
        a->hmask = h - 1;
        memset(a->hash, 0xff, sizeof(int32_t) * (size_t)h);
        for (int e = 0; e < a->n_edges; e++) hash_put(a, e);
    }
    a->bytes = ((size_t)a->cap_states * 4 + (size_t)a->cap_edges * 4 + (size_t)h) * sizeof(int32_t);
    if (a->n_states == 0) sp_sam_clear(a);
    return 0;
}

int sp_sam_reserve(sp_sam *a, int n, sp_err *err) {
    if (n < 1) n = 1;
    return sam_room(a, 2 * n + 2, 3 * n + 4, err);
}

void sp_sam_clear(sp_sam *a) {
    if (!a->cap_states) return;
    a->n_states = 1, a->n_edges = 0, a->last = 0;
    a->len[0] = 0, a->link[0] = -1, a->cnt[0] = 0, a->first[0] = -1;
    memset(a->hash, 0xff, sizeof(int32_t) * (size_t)(a->hmask + 1));
}

static int new_state(sp_sam *a, int len, int link, int cnt, sp_err *err) {
    if (a->n_states == a->cap_states && sam_room(a, 2 * a->cap_states, a->cap_edges, err)) return -1;
    int v = a->n_states++;
    a->len[v] = len, a->link[v] = link, a->cnt[v] = cnt, a->first[v] = -1;
    return v;
}

static int add_edge(sp_sam *a, int v, int32_t t, int to, sp_err *err) {
    if (a->n_edges == a->cap_edges && sam_room(a, a->cap_states, 2 * a->cap_edges, err)) return -1;
    int e = a->n_edges++;
    a->efrom[e] = v, a->etok[e] = t, a->eto[e] = to, a->enext[e] = a->first[v];
    a->first[v] = e;
    hash_put(a, e);
    return 0;
}

/* q split at length len(p) + 1: a clone with q's edges and counts; the edges on t from p and
 * its suffix-link ancestors that pointed at q point at the clone. Returns the clone or -1. */
static int split(sp_sam *a, int p, int q, int32_t t, sp_err *err) {
    int c = new_state(a, a->len[p] + 1, a->link[q], a->cnt[q], err);
    if (c < 0) return -1;
    for (int e = a->first[q]; e >= 0; e = a->enext[e])
        if (add_edge(a, c, a->etok[e], a->eto[e], err)) return -1;
    for (int e; p >= 0 && (e = edge_find(a, p, t)) >= 0 && a->eto[e] == q; p = a->link[p]) a->eto[e] = c;
    a->link[q] = c;
    return c;
}

/* one more end position for v and its suffix-link ancestors (the first SAM_CNT_WALK) */
static void count_up(sp_sam *a, int v) {
    for (int i = 0; v > 0 && i < SAM_CNT_WALK; i++, v = a->link[v]) a->cnt[v]++;
}

int sp_sam_extend(sp_sam *a, int32_t t, sp_err *err) {
    if (!a->cap_states && sp_sam_reserve(a, 64, err)) return -1;
    int p = a->last, q = sp_sam_next(a, p, t);
    if (q >= 0) { /* a document restarted at a string that exists already */
        int cur = a->len[p] + 1 == a->len[q] ? q : split(a, p, q, t, err);
        if (cur < 0) return -1;
        a->last = cur;
        count_up(a, cur);
        return 0;
    }
    int cur = new_state(a, a->len[p] + 1, 0, 0, err);
    if (cur < 0) return -1;
    for (; p >= 0 && (q = sp_sam_next(a, p, t)) < 0; p = a->link[p])
        if (add_edge(a, p, t, cur, err)) return -1;
    if (p >= 0) {
        int l = a->len[p] + 1 == a->len[q] ? q : split(a, p, q, t, err);
        if (l < 0) return -1;
        a->link[cur] = l;
    }
    a->last = cur;
    count_up(a, cur);
    return 0;
}

sp_sam_match sp_sam_match_suffix(const sp_sam *a, const int32_t *ctx, int n, int most) {
    sp_sam_match m = {0, 0};
    if (!a->n_states) return m;
    for (int i = n > most ? n - most : 0; i < n; i++) {
        int to;
        while (m.v > 0 && (to = sp_sam_next(a, m.v, ctx[i])) < 0) {
            m.v = a->link[m.v];
            m.len = a->len[m.v];
        }
        if ((to = sp_sam_next(a, m.v, ctx[i])) >= 0) m.v = to, m.len++;
        else m.len = 0; /* at the root, nothing continues with this token */
    }
    return m;
}

/* ---- proposals ----------------------------------------------------------------------------- */

/* continuation (count c1, token t1) ranks before (c2, t2) */
static int better(int32_t c1, int32_t t1, int32_t c2, int32_t t2) { return c1 > c2 || (c1 == c2 && t1 < t2); }

/* v's k most frequent continuations (decreasing count, ties by token id), their probabilities
 * cnt / Σ cnt of all children; returns how many (0: v has no continuation). */
static int top_children(const sp_sam *a, int v, int k, int32_t *tok, int32_t *to, float *prob) {
    double sum = 0;
    int n = 0;
    int32_t c[SP_TREE_MAX_NODES];
    for (int e = a->first[v]; e >= 0; e = a->enext[e]) {
        int32_t w = a->eto[e], cw = a->cnt[w], t = a->etok[e];
        sum += cw;
        int j;
        if (n < k) j = n++;
        else if (better(cw, t, c[k - 1], tok[k - 1])) j = k - 1;
        else continue;
        for (; j > 0 && better(cw, t, c[j - 1], tok[j - 1]); j--)
            c[j] = c[j - 1], tok[j] = tok[j - 1], to[j] = to[j - 1];
        c[j] = cw, tok[j] = t, to[j] = w;
    }
    for (int j = 0; j < n; j++) prob[j] = sum > 0 ? (float)(c[j] / sum) : 0.0f;
    return sum > 0 ? n : 0;
}

/* the most drafts a match of this length may propose */
static int length_cap(const sp_sfx_params *p, int match, int max_g) {
    if (match < p->min_match) return 0;
    long cap = (long)p->per_match * match;
    return cap < max_g ? (int)cap : max_g;
}

int sp_sfx_chain(const sp_sam *a, sp_sam_match m, const sp_sfx_params *p, int max_g, int32_t *drafts,
                 double *score) {
    int cap = length_cap(p, m.len, max_g), n = 0, v = m.v;
    double cum = 1;
    *score = 0;
    while (n < cap) {
        int32_t tok, to;
        float pr;
        if (!top_children(a, v, 1, &tok, &to, &pr)) break;
        cum *= pr;
        if (cum < p->min_prob) break;
        drafts[n++] = tok;
        *score += cum;
        v = to;
    }
    return n;
}

typedef struct {
    int v, depth, rank, n_kids; /* automaton state; depth; next child to place; children known */
    double cum;
    int32_t kid_tok[SP_TREE_MAX_NODES], kid_to[SP_TREE_MAX_NODES];
    float kid_p[SP_TREE_MAX_NODES];
} sfx_node;

int sp_sfx_tree(const sp_sam *a, sp_sam_match m, const sp_sfx_params *p, const sp_tree_shape *sh, int32_t *tok,
                int32_t *parent) {
    int depth_cap = length_cap(p, m.len, sh->max_depth), k = sh->k < SP_TREE_MAX_NODES ? sh->k : SP_TREE_MAX_NODES;
    int most = sh->nodes < SP_TREE_MAX_NODES ? sh->nodes : SP_TREE_MAX_NODES;
    if (depth_cap <= 0 || most <= 0 || k <= 0) return 0;
    sfx_node *nd = malloc(sizeof(sfx_node) * (SP_TREE_MAX_NODES + 1)); /* [0]: the pending token */
    if (!nd) return 0;
    nd[0] = (sfx_node){.v = m.v, .depth = 0, .cum = 1};
    nd[0].n_kids = top_children(a, m.v, k, nd[0].kid_tok, nd[0].kid_to, nd[0].kid_p);
    int n = 0;
    while (n < most) {
        int best = -1;
        double bc = 0;
        for (int i = 0; i <= n; i++) { /* the open node whose next child is most probable */
            if (nd[i].rank >= nd[i].n_kids || nd[i].depth >= depth_cap) continue;
            double c = nd[i].cum * nd[i].kid_p[nd[i].rank];
            if (c > bc) best = i, bc = c;
        }
        if (best < 0 || bc < p->min_prob) break;
        sfx_node *par = &nd[best], *ch = &nd[n + 1];
        int r = par->rank++;
        *ch = (sfx_node){.v = par->kid_to[r], .depth = par->depth + 1, .cum = bc};
        ch->n_kids = top_children(a, ch->v, k, ch->kid_tok, ch->kid_to, ch->kid_p);
        tok[n] = par->kid_tok[r];
        parent[n] = best - 1;
        n++;
    }
    free(nd);
    return n;
}
