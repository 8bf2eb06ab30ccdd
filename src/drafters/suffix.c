/* suffix.c — the suffix drafter (docs/SUFFIX.md): no model; drafts from a suffix automaton over
 * the request's own stream (prompt + committed output) and, when the source has one, the store
 * of earlier requests' streams. Each round the longest matched suffix of the stream proposes, in
 * each of the two automata, the most frequent continuation while its empirical probability stays
 * above a floor (a chain) or the most probable continuations best first (a token tree); the one
 * with the higher score (expected accepted drafts) is proposed. Proposals are deterministic, so
 * q is one-hot: under sampling a tree is a chain.
 *
 * Combined with another drafter (`--spec KIND+suffix`), the suffix proposal is used in a round
 * where its score, scaled by how well suffix scores have predicted acceptance so far, beats the
 * other drafter's mean accepted drafts; else the other drafter proposes. The other drafter
 * follows every committed token either way: through its own commit when it proposed, else
 * through extend() (or one plain commit per token when it has none), with the target rows. */
#include <stdlib.h>
#include <string.h>

#include "decode/spec.h"
#include "drafters/kind.h"
#include "drafters/suffix.h"

#define SFX_DEFAULT_STORE_BYTES ((size_t)64 << 20)
#define SFX_EMA 0.2 /* weight of a round in the running acceptance estimates */

enum { USE_NONE, USE_SUFFIX, USE_INNER };

typedef struct {
    sp_sam own;                 /* the stream's automaton */
    int32_t *tok;               /* [cap]: the committed stream (prompt + output) */
    int len, cap;
    sp_sfx_store *store;        /* borrowed from the source (NULL: none) */
    sp_sfx_params prm;
    int V, H;
    int32_t pend[SP_TREE_MAX_NODES]; /* the last chain's drafts; after tree_accept, the path's tokens */
    int n_pend;
    int32_t ttok[SP_TREE_MAX_NODES]; /* the last tree's tokens */
    int n_ttok;
    /* combined mode (inner != NULL) */
    sp_drafter *inner;
    int used;                   /* USE_*: who proposed the last round */
    double inner_acc, sfx_ratio; /* inner's mean accepted drafts; suffix accepted / score */
    double last_score;
} sfx_t;

static int push(sfx_t *s, int32_t t, sp_err *err) {
    if (s->len == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        int32_t *p = realloc(s->tok, sizeof(int32_t) * (size_t)cap);
        if (!p) return sp_err_set(err, "suffix: out of memory for a stream of %d tokens", cap);
        s->tok = p;
        s->cap = cap;
    }
    s->tok[s->len++] = t;
    return sp_sam_extend(&s->own, t, err);
}

/* the stream's longest suffix that occurred before: the suffix link of the whole stream's state */
static sp_sam_match own_match(const sfx_t *s) {
    sp_sam_match m = {0, 0};
    if (s->own.n_states > 1) m.v = s->own.link[s->own.last], m.len = s->own.len[m.v];
    return m;
}

/* The better chain of the two automata into drafts (the higher score; at equal scores the longer
 * matched context); *from_store tells which. Returns the count. */
static int best_chain(sfx_t *s, int max_g, int32_t *drafts, double *score, int *from_store) {
    double so = 0, ss = 0;
    int32_t alt[SP_SPEC_MAX_G];
    if (max_g > SP_SPEC_MAX_G) max_g = SP_SPEC_MAX_G;
    sp_sam_match mo = own_match(s);
    int no = sp_sfx_chain(&s->own, mo, &s->prm, max_g, drafts, &so), ms = 0;
    int ns = s->store ? sp_sfx_store_chain(s->store, s->tok, s->len, &s->prm, max_g, alt, &ss, &ms) : 0;
    *from_store = ns > 0 && (ss > so || (ss == so && ms > mo.len));
    *score = *from_store ? ss : so;
    if (!*from_store) return no;
    memcpy(drafts, alt, sizeof(int32_t) * (size_t)ns);
    return ns;
}

static void one_hot(float *q, int rows, int V, const int32_t *tok) {
    if (!q) return;
    memset(q, 0, sizeof(float) * (size_t)rows * (size_t)V);
    for (int i = 0; i < rows; i++) q[(size_t)i * V + tok[i]] = 1.0f;
}

static int sfx_propose_chain(sfx_t *s, int max_g, int32_t *drafts, float *q) {
    int from_store;
    int n = best_chain(s, max_g, drafts, &s->last_score, &from_store);
    one_hot(q, n, s->V, drafts);
    memcpy(s->pend, drafts, sizeof(int32_t) * (size_t)n);
    s->n_pend = n;
    return n;
}

/* A tree from the source whose chain scores higher; under sampling (q) the chain itself, each
 * node the child of the one before (q rows one-hot). */
static int sfx_propose_tree(sfx_t *s, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q) {
    int32_t chain[SP_SPEC_MAX_G];
    int from_store, g = sh->max_depth < sh->nodes ? sh->max_depth : sh->nodes;
    int n = best_chain(s, g, chain, &s->last_score, &from_store);
    if (q || sh->k <= 1) {
        for (int i = 0; i < n; i++) tok[i] = chain[i], parent[i] = i - 1;
        one_hot(q, n, s->V, tok);
    } else if (from_store) {
        n = sp_sfx_store_tree(s->store, s->tok, s->len, &s->prm, sh, tok, parent);
    } else {
        n = sp_sfx_tree(&s->own, own_match(s), &s->prm, sh, tok, parent);
    }
    memcpy(s->ttok, tok, sizeof(int32_t) * (size_t)n);
    s->n_ttok = n;
    s->n_pend = 0;
    return n;
}

/* the accepted root path's tokens become the drafts commit() takes */
static void sfx_tree_accept(sp_drafter *d, const int32_t *path, int n) {
    sfx_t *s = d->self;
    if (s->inner && s->used == USE_INNER && s->inner->tree_accept) s->inner->tree_accept(s->inner, path, n);
    s->n_pend = 0;
    for (int i = 0; i < n && path[i] >= 0 && path[i] < s->n_ttok; i++) s->pend[s->n_pend++] = s->ttok[path[i]];
}

/* ---- the drafter alone or combined ---------------------------------------------------------- */

static int sfx_begin(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                     const sp_drafter_ctx *ctx, sp_err *err) {
    sfx_t *s = d->self;
    if (s->store && sp_sfx_store_add(s->store, s->tok, s->len, err)) return -1; /* the previous stream */
    const sp_config *c = sp_model_config(ctx->target);
    s->V = c->vocab_size, s->H = c->hidden_size;
    s->len = 0, s->n_pend = s->n_ttok = 0, s->used = USE_NONE;
    s->inner_acc = 1.0, s->sfx_ratio = 1.0;
    sp_sam_clear(&s->own);
    if (sp_sam_reserve(&s->own, n + 256, err)) return -1;
    for (int i = 0; i < n; i++)
        if (push(s, prompt[i], err)) return -1;
    return s->inner ? s->inner->begin(s->inner, prompt, n, taps, hidden, ctx, err) : 0;
}

/* combined: 1 when the suffix proposal (score) should be used over the other drafter's */
static int suffix_wins(const sfx_t *s, int n, double score) {
    return n > 0 && score * s->sfx_ratio > s->inner_acc;
}

static int sfx_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    sfx_t *s = d->self;
    int n = sfx_propose_chain(s, max_g, drafts, q);
    s->used = USE_SUFFIX;
    if (!s->inner || suffix_wins(s, n, s->last_score)) return n;
    s->used = USE_INNER;
    s->inner->constraint = d->constraint; /* the engine's grammar, for an inner drafter that takes it */
    n = s->inner->propose(s->inner, max_g, drafts, q, err);
    s->inner->constraint = NULL;
    if (n > 0) memcpy(s->pend, drafts, sizeof(int32_t) * (size_t)n);
    s->n_pend = n < 0 ? 0 : n;
    return n;
}

static int sfx_propose_tree_hook(sp_drafter *d, const sp_tree_shape *sh, int32_t *tok, int32_t *parent, float *q,
                                 sp_err *err) {
    sfx_t *s = d->self;
    int n = sfx_propose_tree(s, sh, tok, parent, q);
    s->used = USE_SUFFIX;
    if (!s->inner || suffix_wins(s, n, s->last_score)) return n;
    s->used = USE_INNER;
    s->inner->tree_constraint = d->tree_constraint; /* the engine's grammar, for an inner drafter that takes it */
    n = s->inner->propose_tree(s->inner, sh, tok, parent, q, err);
    s->inner->tree_constraint = NULL;
    s->n_ttok = n < 0 ? 0 : n;
    if (n > 0) memcpy(s->ttok, tok, sizeof(int32_t) * (size_t)n);
    return n;
}

/* The other drafter follows tokens[0 .. n) (rows [old pending, tokens[0 .. n-2]]) it did not propose. */
static int inner_follow(sfx_t *s, const int32_t *tokens, int n, const float *taps, const float *hidden, sp_err *err) {
    sp_drafter *in = s->inner;
    if (in->extend) return in->extend(in, tokens, n, taps, hidden, err);
    size_t wt = (size_t)in->n_taps * s->H;
    for (int j = 0; j < n; j++)
        if (in->commit(in, 0, tokens[j], taps ? taps + j * wt : NULL, hidden ? hidden + (size_t)j * s->H : NULL, err))
            return -1;
    return 0;
}

static void learn(sfx_t *s, int n_acc) {
    if (s->used == USE_INNER) s->inner_acc += SFX_EMA * (n_acc - s->inner_acc);
    if (s->used == USE_SUFFIX && s->last_score > 0)
        s->sfx_ratio += SFX_EMA * (n_acc / s->last_score - s->sfx_ratio);
}

static int sfx_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    sfx_t *s = d->self;
    if (n_acc < 0 || n_acc > s->n_pend) return sp_err_set(err, "suffix: %d accepted of %d proposed", n_acc, s->n_pend);
    int32_t acc[SP_TREE_MAX_NODES + 1];
    memcpy(acc, s->pend, sizeof(int32_t) * (size_t)n_acc);
    acc[n_acc] = next;
    for (int i = 0; i <= n_acc; i++)
        if (push(s, acc[i], err)) return -1;
    int used = s->used, rc = 0;
    learn(s, n_acc);
    s->used = USE_NONE, s->n_pend = s->n_ttok = 0;
    if (!s->inner) return 0;
    if (used == USE_SUFFIX) rc = inner_follow(s, acc, n_acc + 1, taps, hidden, err);
    else rc = s->inner->commit(s->inner, used == USE_INNER ? n_acc : 0, next, taps, hidden, err);
    return rc;
}

static int sfx_extend(sp_drafter *d, const int32_t *tokens, int n, const float *taps, const float *hidden,
                      sp_err *err) {
    sfx_t *s = d->self;
    for (int i = 0; i < n; i++)
        if (push(s, tokens[i], err)) return -1;
    return s->inner ? s->inner->extend(s->inner, tokens, n, taps, hidden, err) : 0;
}

static void sfx_destroy(sp_drafter *d) {
    sfx_t *s = d->self;
    sp_err err;
    if (s->store) sp_sfx_store_add(s->store, s->tok, s->len, &err); /* a failed add leaves the store empty */
    sp_drafter_free(s->inner);
    sp_sam_free(&s->own);
    free(s->tok);
    free(s);
    free(d);
}

sp_drafter *sp_drafter_suffix(sp_sfx_store *store, const sp_sfx_params *prm, sp_drafter *inner, sp_err *err) {
    sp_drafter *d = calloc(1, sizeof *d);
    sfx_t *s = calloc(1, sizeof *s);
    if (!d || !s) {
        free(d), free(s);
        sp_drafter_free(inner);
        sp_err_set(err, "suffix: out of memory");
        return NULL;
    }
    sp_sam_init(&s->own);
    s->store = store, s->prm = *prm, s->inner = inner;
    *d = (sp_drafter){.name = inner ? "suffix (combined)" : "suffix", .self = s, .begin = sfx_begin, .propose = sfx_propose,
                      .commit = sfx_commit, .propose_tree = sfx_propose_tree_hook, .tree_accept = sfx_tree_accept,
                      .destroy = sfx_destroy};
    if (inner) {
        d->n_taps = inner->n_taps, d->tap_layers = inner->tap_layers, d->wants_hidden = inner->wants_hidden;
        d->provides_q = inner->provides_q, d->step_cost = inner->step_cost;
        if (!inner->propose_tree) d->propose_tree = NULL;
        if (inner->extend) d->extend = sfx_extend;
    }
    return d;
}

/* ---- the kind (kind.h) ----------------------------------------------------------------------- */

static sp_sfx_params params_of(const sp_drafter_opts *o) {
    return (sp_sfx_params){.min_prob = o->conf_threshold > 0 ? o->conf_threshold : 0.1f, .per_match = 2,
                           .min_match = o->ngram_min > 0 ? o->ngram_min : 1};
}

int sp_suffix_kind_open(void **state, const sp_drafter_env *env, sp_err *err) {
    size_t bytes = env->o->suffix_bytes ? env->o->suffix_bytes : SFX_DEFAULT_STORE_BYTES;
    *state = sp_sfx_store_create(bytes, err);
    return *state ? 0 : -1;
}

sp_drafter *sp_suffix_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err) {
    sp_sfx_params p = params_of(env->o);
    return sp_drafter_suffix(state, &p, NULL, err);
}

void sp_suffix_kind_close(void *state) { sp_sfx_store_free(state); }

sp_drafter *sp_suffix_wrap(void *state, const sp_drafter_env *env, sp_drafter *inner, sp_err *err) {
    sp_sfx_params p = params_of(env->o);
    return inner ? sp_drafter_suffix(state, &p, inner, err) : NULL;
}
