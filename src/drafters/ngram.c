/* ngram.c — prompt-lookup drafter: no model, drafts by copying what followed the most recent
 * earlier occurrence of the stream's longest matching suffix (n_max .. n_min tokens), extended
 * periodically past the end of the stream (a loop of period p drafts p, 2p, ... tokens ahead).
 *
 * Search is a backwards scan, O(len · n) per proposal — for the contexts this engine runs
 * (a few thousand tokens) that costs microseconds next to a target forward. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "drafters/drafters.h"
#include "drafters/kind.h"
#include "decode/spec.h"

typedef struct {
    int n_min, n_max;
    int32_t *tok;  /* the committed stream */
    int len, cap;
    int32_t last[SP_SPEC_MAX_G];
    int n_last;
} ngram_t;

static int push(ngram_t *s, int32_t t, sp_err *err) {
    if (s->len == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        int32_t *p = realloc(s->tok, sizeof(int32_t) * (size_t)cap);
        if (!p) return sp_err_set(err, "ngram: out of memory");
        s->tok = p;
        s->cap = cap;
    }
    s->tok[s->len++] = t;
    return 0;
}

static int ng_begin(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                    const sp_drafter_ctx *ctx, sp_err *err) {
    ngram_t *s = d->self;
    s->len = 0;
    for (int i = 0; i < n; i++)
        if (push(s, prompt[i], err)) return -1;
    return 0;
}

static int ng_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    ngram_t *s = d->self;
    int L = s->len, got = 0;
    if (max_g > SP_SPEC_MAX_G) max_g = SP_SPEC_MAX_G;
    for (int n = s->n_max; n >= s->n_min && !got; n--) {
        if (n > L - 1) continue;
        const int32_t *suf = s->tok + L - n;
        /* most recent start j < L - n with tok[j .. j+n) == suffix */
        for (int j = L - n - 1; j >= 0; j--) {
            if (memcmp(s->tok + j, suf, sizeof(int32_t) * (size_t)n) != 0) continue;
            /* copy what followed; past the end of the stream keep copying from the drafts
             * themselves, so a repeating cycle of period L - j - n yields a full block */
            for (int k = j + n; got < max_g; k++) drafts[got++] = k < L ? s->tok[k] : drafts[k - L];
            break;
        }
    }
    memcpy(s->last, drafts, sizeof(int32_t) * (size_t)got);
    s->n_last = got;
    return got;
}

static int ng_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    ngram_t *s = d->self;
    if (n_acc > s->n_last) return sp_err_set(err, "ngram: %d accepted of %d proposed", n_acc, s->n_last);
    for (int i = 0; i < n_acc; i++)
        if (push(s, s->last[i], err)) return -1;
    return push(s, next, err);
}

static void ng_destroy(sp_drafter *d) {
    ngram_t *s = d->self;
    free(s->tok);
    free(s);
    free(d);
}

sp_drafter *sp_drafter_ngram(int n_min, int n_max, sp_err *err) {
    if (n_min < 1 || n_max < n_min || n_max > 64) {
        sp_err_set(err, "ngram: need 1 <= n_min <= n_max <= 64 (got %d..%d)", n_min, n_max);
        return NULL;
    }
    sp_drafter *d = calloc(1, sizeof *d);
    ngram_t *s = calloc(1, sizeof *s);
    if (!d || !s) {
        free(d);
        free(s);
        sp_err_set(err, "ngram: out of memory");
        return NULL;
    }
    s->n_min = n_min;
    s->n_max = n_max;
    d->name = "ngram";
    d->self = s;
    d->begin = ng_begin;
    d->propose = ng_propose;
    d->commit = ng_commit;
    d->destroy = ng_destroy;
    return d;
}

/* the ngram kind (kind.h): nothing shared, nothing detected from a checkpoint */
sp_drafter *sp_ngram_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                               sp_err *err) {
    return sp_drafter_ngram(env->o->ngram_min, env->o->ngram_max, err);
}
