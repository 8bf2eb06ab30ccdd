/* grammar.c — matching text and tokens against a compiled grammar (grammar.h, docs/GRAMMAR.md §2).
 *
 * A parse position is a set of stacks (grammar_internal.h) whose tops are all character elements,
 * plus a flag for an empty stack (the text may end) and the bytes of a UTF-8 character begun but not
 * finished. Stacks live as nodes (position, node below) in an arena with hash-consing, so equal
 * stacks are one node and a set's copy is its list of node ids. Advancing by a character matches
 * each top, pops finished alternatives and expands rule references until every top is a character
 * element again. The tokens allowed next come from one walk of the vocabulary's byte trie: each trie
 * edge advances the set by a byte, an empty set prunes the subtree, and every token at a node reached
 * with a non-empty set is allowed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/grammar_internal.h"

/* ---- the vocabulary's byte trie ----------------------------------------------------------- */
typedef struct {
    int32_t child, next, tok; /* first child, next sibling, first token ending here (-1: none) */
    uint8_t byte;
} tnode;

struct sp_gvocab {
    int V;
    tnode *t;
    int nt, capt;
    int32_t *tok_next; /* [V]: the next token with the same bytes */
    uint8_t *eog;      /* [V] */
    int32_t *tok_node; /* [V]: the trie node of each token (-1: none) */
    uint8_t *bytes;    /* every token's bytes, token i at off[i] .. off[i] + len[i] */
    int64_t *off;
    int *len;
    int64_t nbytes, capbytes;
};

static int32_t trie_child(sp_gvocab *v, int32_t n, uint8_t b) {
    int32_t c = v->t[n].child, prev = -1;
    for (; c >= 0 && v->t[c].byte < b; c = v->t[c].next) prev = c;
    if (c >= 0 && v->t[c].byte == b) return c;
    if (v->nt == v->capt) {
        int cap = v->capt * 2;
        tnode *t = realloc(v->t, sizeof(tnode) * (size_t)cap);
        if (!t) return -1;
        v->t = t, v->capt = cap;
    }
    int32_t id = v->nt++;
    v->t[id] = (tnode){-1, c, -1, b};
    if (prev < 0) v->t[n].child = id;
    else v->t[prev].next = id;
    return id;
}

static int bytes_add(sp_gvocab *v, int32_t id, const char *b, int n) {
    if (v->nbytes + n > v->capbytes) {
        int64_t cap = v->capbytes ? v->capbytes * 2 : 65536;
        while (cap < v->nbytes + n) cap *= 2;
        uint8_t *p = realloc(v->bytes, (size_t)cap);
        if (!p) return -1;
        v->bytes = p, v->capbytes = cap;
    }
    memcpy(v->bytes + v->nbytes, b, (size_t)n);
    v->off[id] = v->nbytes, v->len[id] = n;
    v->nbytes += n;
    return 0;
}

void sp_gvocab_free(sp_gvocab *v) {
    if (!v) return;
    free(v->t), free(v->tok_next), free(v->eog), free(v->tok_node), free(v->bytes), free(v->off), free(v->len);
    free(v);
}

int sp_gvocab_size(const sp_gvocab *v) { return v->V; }

sp_gvocab *sp_gvocab_create(const tok_tokenizer *tk, int V, const int *eog, int n_eog, sp_err *err) {
    sp_gvocab *v = calloc(1, sizeof *v);
    if (v) {
        v->V = V, v->capt = 1024;
        v->t = malloc(sizeof(tnode) * (size_t)v->capt);
        v->tok_next = malloc(sizeof(int32_t) * (size_t)V);
        v->tok_node = malloc(sizeof(int32_t) * (size_t)V);
        v->eog = calloc((size_t)V, 1);
        v->off = calloc((size_t)V, sizeof *v->off);
        v->len = calloc((size_t)V, sizeof *v->len);
    }
    if (!v || !v->t || !v->tok_next || !v->tok_node || !v->eog || !v->off || !v->len) goto oom;
    v->t[0] = (tnode){-1, -1, -1, 0};
    v->nt = 1;
    int nv = sp_tok_vocab_size(tk);
    char buf[1024];
    for (int32_t id = 0; id < V; id++) {
        v->tok_next[id] = -1, v->tok_node[id] = -1;
        if (id < nv && sp_tok_is_eog(tk, id)) v->eog[id] = 1;
        int n = id < nv ? sp_tok_token_bytes(tk, id, buf, sizeof buf) : -1;
        if (n <= 0 || n > (int)sizeof buf) continue;
        int32_t node = 0;
        for (int i = 0; i < n && node >= 0; i++) node = trie_child(v, node, (uint8_t)buf[i]);
        if (node < 0 || bytes_add(v, id, buf, n)) goto oom;
        v->tok_node[id] = node;
        /* the head of a node's tokens is the one the tokenizer writes the bytes with: a byte-fallback
         * token ("<0x21>") goes behind a token of the same bytes ("!") */
        size_t tl;
        const char *tt = sp_tok_token_text(tk, id, &tl);
        int head = v->t[node].tok, byte_tok = tt && tl == 6 && !memcmp(tt, "<0x", 3);
        if (head >= 0 && byte_tok) {
            v->tok_next[id] = v->tok_next[head];
            v->tok_next[head] = id;
        } else {
            v->tok_next[id] = head;
            v->t[node].tok = id;
        }
    }
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < V) v->eog[eog[i]] = 1;
    return v;
oom:
    sp_gvocab_free(v);
    sp_err_set(err, "grammar: out of memory for a vocabulary of %d tokens", V);
    return NULL;
}

/* ---- stacks: hash-consed nodes ------------------------------------------------------------ */
typedef struct {
    uint32_t pos;
    int32_t up; /* the node below (-1: the bottom) */
    int32_t depth;
} gnode;

typedef struct {
    int32_t id;
    uint32_t pos;
    int32_t up;
} htslot;

/* A set of stacks: node ids in the scratch buffer, plus "the text may end here". */
typedef struct {
    int off, n, accept;
} gset;

struct sp_gstate {
    const sp_grammar *g;
    const sp_gvocab *v;
    /* the position, stored as stacks of positions: each [len, pos_bottom .. pos_top] */
    uint32_t *st;
    int nst, capst, n_stacks, accept;
    uint32_t cp, need; /* a UTF-8 character begun: its bits so far, continuation bytes still due */
    /* the working arena */
    gnode *nd;
    int nn, capn;
    htslot *ht;
    int htcap, ht_used;
    int32_t *sb; /* set scratch */
    int nsb, capsb;
    int32_t *work;
    int capw;
    sp_err *err;
    int failed;
};

static int fail(sp_gstate *s, const char *what) {
    if (!s->failed) sp_err_set(s->err, "grammar: %s", what);
    s->failed = 1;
    return -1;
}

static uint32_t hash2(uint32_t a, int32_t b) {
    uint64_t x = ((uint64_t)a << 32) ^ (uint32_t)b;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33;
    return (uint32_t)x;
}

/* The hash table over the arena's nodes: a slot is live while its node id still holds its key. */
static void ht_rebuild(sp_gstate *s) {
    memset(s->ht, 0xff, sizeof(htslot) * (size_t)s->htcap);
    uint32_t m = (uint32_t)s->htcap - 1;
    for (int32_t i = 0; i < s->nn; i++) {
        uint32_t k = hash2(s->nd[i].pos, s->nd[i].up) & m;
        while (s->ht[k].id >= 0) k = (k + 1) & m;
        s->ht[k] = (htslot){i, s->nd[i].pos, s->nd[i].up};
    }
    s->ht_used = s->nn;
}

static int arena_grow(sp_gstate *s) {
    int cap = s->capn * 2;
    gnode *nd = realloc(s->nd, sizeof(gnode) * (size_t)cap);
    if (nd) s->nd = nd, s->capn = cap;
    htslot *ht = nd ? malloc(sizeof(htslot) * (size_t)cap * 4) : NULL;
    if (!ht) return fail(s, "out of memory for parse stacks");
    free(s->ht);
    s->ht = ht, s->htcap = cap * 4;
    ht_rebuild(s);
    return 0;
}

/* The node (pos, up), one id per distinct stack. */
static int32_t intern(sp_gstate *s, uint32_t pos, int32_t up) {
    int32_t depth = up < 0 ? 1 : s->nd[up].depth + 1;
    if (depth > SP_GRAMMAR_MAX_DEPTH) return fail(s, "a parse stack deeper than SP_GRAMMAR_MAX_DEPTH (4096)");
    if (s->nn == s->capn && arena_grow(s)) return -1;
    if (2 * s->ht_used >= s->htcap) ht_rebuild(s);
    uint32_t m = (uint32_t)s->htcap - 1, h = hash2(pos, up) & m, put = UINT32_MAX;
    for (;; h = (h + 1) & m) {
        htslot *e = &s->ht[h];
        if (e->id < 0) break;
        int live = e->id < s->nn && s->nd[e->id].pos == e->pos && s->nd[e->id].up == e->up;
        if (live && e->pos == pos && e->up == up) return e->id;
        if (!live && put == UINT32_MAX) put = h;
    }
    if (put == UINT32_MAX) put = h, s->ht_used++;
    s->nd[s->nn] = (gnode){pos, up, depth};
    s->ht[put] = (htslot){s->nn, pos, up};
    return s->nn++;
}

static int set_push(sp_gstate *s, gset *o, int32_t id) {
    for (int i = 0; i < o->n; i++)
        if (s->sb[o->off + i] == id) return 0;
    if (o->n >= SP_GRAMMAR_MAX_STACKS) return fail(s, "more than SP_GRAMMAR_MAX_STACKS (1024) open parse stacks");
    if (s->nsb == s->capsb) {
        int cap = s->capsb * 2;
        int32_t *b = realloc(s->sb, sizeof(int32_t) * (size_t)cap);
        if (!b) return fail(s, "out of memory");
        s->sb = b, s->capsb = cap;
    }
    s->sb[s->nsb++] = id;
    o->n++;
    return 0;
}

static int work_push(sp_gstate *s, int *nw, int32_t id) {
    if (*nw == s->capw) {
        int cap = s->capw * 2;
        int32_t *w = realloc(s->work, sizeof(int32_t) * (size_t)cap);
        if (!w) return fail(s, "out of memory");
        s->work = w, s->capw = cap;
    }
    s->work[(*nw)++] = id;
    return 0;
}

/* Expand node id (-1: an empty stack) into set o: pop finished alternatives, expand references,
 * until each top is a character element. The set o must be the last one in the scratch. */
static int expand(sp_gstate *s, int32_t id, gset *o) {
    const sp_grammar *g = s->g;
    int nw = 0;
    long steps = 0;
    if (work_push(s, &nw, id)) return -1;
    while (nw > 0) {
        if (++steps > SP_GRAMMAR_MAX_STEPS) return fail(s, "more than SP_GRAMMAR_MAX_STEPS expansion steps for a character");
        int32_t n = s->work[--nw];
        if (n < 0) {
            o->accept = 1;
            continue;
        }
        const sp_gel *e = g->el + s->nd[n].pos;
        if (e->type == GE_CHR) {
            if (set_push(s, o, n)) return -1;
        } else if (e->type == GE_END) {
            if (work_push(s, &nw, s->nd[n].up)) return -1;
        } else {
            uint32_t pos = s->nd[n].pos;
            int32_t cont = g->el[pos + 1].type == GE_END ? s->nd[n].up : intern(s, pos + 1, s->nd[n].up);
            if (s->failed) return -1;
            for (int a = g->n_alt[e->a] - 1; a >= 0; a--) {
                int32_t c = intern(s, (uint32_t)g->alt_start[g->alt0[e->a] + a], cont);
                if (c < 0 || work_push(s, &nw, c)) return -1;
            }
        }
    }
    return 0;
}

static int chr_match(const sp_grammar *g, const sp_gel *e, uint32_t lo, uint32_t hi) {
    /* some code point in [lo, hi] matches the element */
    for (uint32_t i = 0; i < e->b; i++) {
        uint32_t a = g->rng[2 * (e->a + i)], b = g->rng[2 * (e->a + i) + 1];
        if (!e->neg && a <= hi && lo <= b) return 1;
        if (e->neg && a <= lo && hi <= b) return 0; /* the whole span excluded */
    }
    return e->neg;
}

/* o = the set after code point cp from set in (o appended to the scratch). */
static int advance(sp_gstate *s, const gset *in, uint32_t cp, gset *o) {
    *o = (gset){s->nsb, 0, 0};
    for (int i = 0; i < in->n; i++) {
        int32_t n = s->sb[in->off + i];
        const sp_gel *e = s->g->el + s->nd[n].pos;
        if (!chr_match(s->g, e, cp, cp)) continue;
        int32_t nx = intern(s, s->nd[n].pos + 1, s->nd[n].up);
        if (nx < 0 || expand(s, nx, o)) return -1;
    }
    return 0;
}

/* A byte: *cp / *need carry a partial character. Returns 1 when the set goes on (o filled: a new
 * set, or *o = *in for a partial character that some top may still match), 0 when it dies. */
static int step_byte(sp_gstate *s, const gset *in, uint8_t b, uint32_t *cp, uint32_t *need, gset *o) {
    /* *need: continuation bytes still due (low 4 bits) and the character's length (the bits above) */
    uint32_t rem = *need & 15, len = *need >> 4;
    if (rem == 0) {
        if (b < 0x80) return advance(s, in, b, o) ? -1 : o->n > 0 || o->accept;
        int n = (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : 0;
        if (!n || b == 0xC0 || b == 0xC1 || b > 0xF4) return 0; /* overlong or past U+10FFFF */
        *cp = b & (0x3F >> n), rem = (uint32_t)n, len = (uint32_t)n + 1;
    } else {
        if ((b & 0xC0) != 0x80) return 0;
        /* the first continuation byte: no overlong form, no surrogate, nothing past U+10FFFF */
        if (len == 3 && rem == 2 && ((*cp == 0 && b < 0xA0) || (*cp == 0x0D && b >= 0xA0))) return 0;
        if (len == 4 && rem == 3 && ((*cp == 0 && b < 0x90) || (*cp == 4 && b >= 0x90))) return 0;
        *cp = (*cp << 6) | (b & 0x3F);
        if (--rem == 0) {
            *need = 0;
            return advance(s, in, *cp, o) ? -1 : o->n > 0 || o->accept;
        }
    }
    *need = rem | len << 4;
    uint32_t sh = 6 * rem, lo = *cp << sh, hi = lo | ((1u << sh) - 1);
    uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (lo < min) lo = min;
    for (int i = 0; i < in->n; i++)
        if (chr_match(s->g, s->g->el + s->nd[s->sb[in->off + i]].pos, lo, hi)) {
            *o = *in;
            return 1;
        }
    return 0;
}

/* ---- the state ---------------------------------------------------------------------------- */
static int arena_init(sp_gstate *s) {
    s->capn = 256, s->htcap = 1024, s->capsb = 256, s->capw = 256;
    s->nd = malloc(sizeof(gnode) * (size_t)s->capn);
    s->ht = malloc(sizeof(htslot) * (size_t)s->htcap);
    s->sb = malloc(sizeof(int32_t) * (size_t)s->capsb);
    s->work = malloc(sizeof(int32_t) * (size_t)s->capw);
    if (!s->nd || !s->ht || !s->sb || !s->work) return -1;
    memset(s->ht, 0xff, sizeof(htslot) * (size_t)s->htcap);
    return 0;
}

void sp_gstate_free(sp_gstate *s) {
    if (!s) return;
    free(s->st), free(s->nd), free(s->ht), free(s->sb), free(s->work);
    free(s);
}

/* The stored position into the arena (emptied first) as set *o. */
static int load(sp_gstate *s, gset *o) {
    s->nn = 0, s->nsb = 0, s->failed = 0;
    ht_rebuild(s);
    *o = (gset){0, 0, s->accept};
    for (int i = 0, k = 0; i < s->n_stacks; i++) {
        uint32_t len = s->st[k++];
        int32_t n = -1;
        for (uint32_t j = 0; j < len; j++)
            if ((n = intern(s, s->st[k++], n)) < 0) return -1;
        if (set_push(s, o, n)) return -1;
    }
    return 0;
}

/* Set *o (in the arena) into the stored position. */
static int store(sp_gstate *s, const gset *o) {
    int need = 0;
    for (int i = 0; i < o->n; i++) need += 1 + s->nd[s->sb[o->off + i]].depth;
    if (need > s->capst) {
        uint32_t *st = realloc(s->st, sizeof(uint32_t) * (size_t)need);
        if (!st) return fail(s, "out of memory");
        s->st = st, s->capst = need;
    }
    int k = 0;
    for (int i = 0; i < o->n; i++) {
        int32_t n = s->sb[o->off + i];
        int d = s->nd[n].depth;
        s->st[k] = (uint32_t)d;
        for (int j = d; j >= 1; j--, n = s->nd[n].up) s->st[k + j] = s->nd[n].pos;
        k += 1 + d;
    }
    s->nst = k, s->n_stacks = o->n, s->accept = o->accept;
    return 0;
}

static sp_gstate *state_new(const sp_grammar *g, const sp_gvocab *v, sp_err *err) {
    sp_gstate *s = calloc(1, sizeof *s);
    if (!s || arena_init(s)) {
        sp_gstate_free(s);
        sp_err_set(err, "grammar: out of memory");
        return NULL;
    }
    s->g = g, s->v = v, s->err = err;
    return s;
}

sp_gstate *sp_gstate_create(const sp_grammar *g, const sp_gvocab *v, sp_err *err) {
    sp_gstate *s = state_new(g, v, err);
    if (!s) return NULL;
    gset o = {0, 0, 0};
    int rc = 0;
    for (int a = 0; a < g->n_alt[g->root] && !rc; a++) {
        int32_t n = intern(s, (uint32_t)g->alt_start[g->alt0[g->root] + a], -1);
        rc = n < 0 || expand(s, n, &o);
    }
    if (rc || store(s, &o)) {
        sp_gstate_free(s);
        return NULL;
    }
    return s;
}

int sp_gstate_copy(sp_gstate *dst, const sp_gstate *src, sp_err *err) {
    if (src->nst > dst->capst) {
        uint32_t *st = realloc(dst->st, sizeof(uint32_t) * (size_t)src->nst);
        if (!st) return sp_err_set(err, "grammar: out of memory");
        dst->st = st, dst->capst = src->nst;
    }
    if (src->nst) memcpy(dst->st, src->st, sizeof(uint32_t) * (size_t)src->nst);
    dst->nst = src->nst, dst->n_stacks = src->n_stacks, dst->accept = src->accept;
    dst->cp = src->cp, dst->need = src->need;
    return 0;
}

int sp_gstate_can_end(const sp_gstate *s) { return s->accept && s->need == 0; }
int sp_gstate_done(const sp_gstate *s) { return s->accept && s->need == 0 && s->n_stacks == 0; }

/* Walk bytes b[0 .. n) from set *cur; 1 and *cur the final set when every byte is matched. */
static int walk_bytes(sp_gstate *s, gset *cur, const uint8_t *b, int n, uint32_t *cp, uint32_t *need) {
    for (int i = 0; i < n; i++) {
        gset o;
        int ok = step_byte(s, cur, b[i], cp, need, &o);
        if (ok <= 0) return ok;
        *cur = o;
    }
    return 1;
}

/* Advance the stored position by bytes; 1 when matched (stored), 0 when not (unchanged), -1. */
static int accept_bytes(sp_gstate *s, const uint8_t *b, int n, int commit) {
    gset cur;
    if (load(s, &cur)) return -1;
    uint32_t cp = s->cp, need = s->need;
    int ok = walk_bytes(s, &cur, b, n, &cp, &need);
    if (ok <= 0 || !commit) return ok;
    if (store(s, &cur)) return -1;
    s->cp = cp, s->need = need;
    return 1;
}

static int tok_check(const sp_gstate *s, int32_t tok) {
    if (!s->v) return sp_err_set(s->err, "grammar: a state without a vocabulary takes no tokens");
    if (tok < 0 || tok >= s->v->V) return sp_err_set(s->err, "grammar: token %d outside the vocabulary", tok);
    return 0;
}

/* 1 when tok is allowed (commit: and the state advanced by it), 0 when not, -1. */
static int take_token(sp_gstate *s, int32_t tok, int commit, sp_err *err) {
    s->err = err;
    if (tok_check(s, tok)) return -1;
    const sp_gvocab *v = s->v;
    if (v->eog[tok]) {
        if (!sp_gstate_can_end(s)) return 0;
        if (commit) s->n_stacks = 0, s->nst = 0; /* the text ends: nothing more may follow */
        return 1;
    }
    if (v->tok_node[tok] < 0) return 0;
    return accept_bytes(s, v->bytes + v->off[tok], v->len[tok], commit);
}

int sp_gstate_allows(sp_gstate *s, int32_t tok, sp_err *err) { return take_token(s, tok, 0, err); }

int sp_gstate_accept(sp_gstate *s, int32_t tok, sp_err *err) {
    int ok = take_token(s, tok, 1, err);
    return ok < 0 ? -1 : !ok;
}

/* The trie walk under node t from set *in (partial character cp / need): marks allowed tokens. */
static int mask_walk(sp_gstate *s, int32_t t, const gset *in, uint32_t cp, uint32_t need, uint8_t *allowed,
                     int *count, int32_t *only) {
    /* *count: tokens allowed; *only: the head token of the last allowed byte string, and count[1]
     * the number of distinct byte strings allowed */
    const sp_gvocab *v = s->v;
    for (int32_t c = v->t[t].child; c >= 0; c = v->t[c].next) {
        int mark_n = s->nn, mark_sb = s->nsb;
        uint32_t cp2 = cp, need2 = need;
        gset o;
        int ok = step_byte(s, in, v->t[c].byte, &cp2, &need2, &o);
        if (ok < 0) return -1;
        if (ok) {
            if (v->t[c].tok >= 0) count[1]++, *only = v->t[c].tok;
            for (int32_t k = v->t[c].tok; k >= 0; k = v->tok_next[k]) {
                if (!allowed[k]) count[0]++;
                allowed[k] = 1;
            }
            if (v->t[c].child >= 0 && mask_walk(s, c, &o, cp2, need2, allowed, count, only)) return -1;
        }
        s->nn = mark_n, s->nsb = mark_sb; /* the subtree's nodes and sets are dropped */
    }
    return 0;
}

int sp_gstate_mask(sp_gstate *s, uint8_t *allowed, int32_t *only, sp_err *err) {
    s->err = err;
    *only = -1;
    if (!s->v) return sp_err_set(err, "grammar: a state without a vocabulary has no token mask");
    memset(allowed, 0, (size_t)s->v->V);
    int count[2] = {0, 0}; /* tokens, distinct byte strings (each end-of-generation token one) */
    gset cur;
    if (load(s, &cur)) return -1;
    if (sp_gstate_can_end(s))
        for (int32_t k = 0; k < s->v->V; k++)
            if (s->v->eog[k]) allowed[k] = 1, count[0]++, count[1]++, *only = k;
    if ((cur.n > 0 || s->need) && mask_walk(s, 0, &cur, s->cp, s->need, allowed, count, only)) return -1;
    if (count[1] != 1) *only = -1;
    return count[0];
}

int sp_grammar_match_text(const sp_grammar *g, const char *text, size_t len, sp_err *err) {
    sp_gstate *s = sp_gstate_create(g, NULL, err);
    if (!s) return -1;
    s->err = err;
    int ok = accept_bytes(s, (const uint8_t *)text, (int)(len > 0x7fffffff ? 0x7fffffff : len), 1);
    if (ok > 0) ok = sp_gstate_can_end(s);
    sp_gstate_free(s);
    return ok;
}

void sp_grammar_apply(const uint8_t *allowed, float *logits, int V) {
    for (int i = 0; i < V; i++)
        if (!allowed[i]) logits[i] = -INFINITY;
}
