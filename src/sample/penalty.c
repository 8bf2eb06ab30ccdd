/* penalty.c — repetition penalties over a pushable / poppable token sequence (see penalty.h).
 *
 * State: seq[0, len) the whole sequence, count[V] the occurrences of each token in the window
 * seq[max(0, len − N), len). push and pop slide the window by one token at its end and, when
 * the window is full, at its start, so counts always describe exactly that window. */
#include "sample/penalty.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct sp_penalty {
    sp_penalty_params pp;
    int V;
    int32_t *seq; /* [cap] the sequence */
    int len, cap;
    int *count;       /* [V] occurrences in the window */
    uint32_t *stamp;  /* [V] last application that penalised the token */
    uint32_t epoch;
    int32_t *bias_ids; /* [pp.n_bias] sorted ascending, one entry per token */
    float *bias;       /* [pp.n_bias] */
};

sp_penalty_params sp_penalty_params_default(void) {
    sp_penalty_params pp = {.repeat = 1.0f, .last_n = 64, .presence = 0.0f, .frequency = 0.0f};
    return pp;
}

/* 1 when the window penalties change a logit */
static int window_active(const sp_penalty_params *pp) {
    return pp->last_n != 0 &&
           ((pp->repeat != 1.0f && pp->repeat != 0.0f) || pp->presence != 0.0f || pp->frequency != 0.0f);
}

int sp_penalty_active(const sp_penalty_params *pp) { return window_active(pp) || pp->n_bias > 0; }

int sp_penalty_params_check(const sp_penalty_params *pp, sp_err *err) {
    if (!(pp->repeat > 0.0f) || !isfinite(pp->repeat) || !isfinite(1.0f / pp->repeat))
        if (pp->repeat != 0.0f) /* 0: a zeroed struct, penalties off */
            return sp_err_set(err, "sampling: repeat penalty must be finite and > 0, got %g", (double)pp->repeat);
    if (pp->last_n < -1) return sp_err_set(err, "sampling: repeat-last-n must be >= -1, got %d", pp->last_n);
    if (!isfinite(pp->presence)) return sp_err_set(err, "sampling: presence penalty must be finite");
    if (!isfinite(pp->frequency)) return sp_err_set(err, "sampling: frequency penalty must be finite");
    if (pp->n_bias < 0 || (pp->n_bias > 0 && (!pp->bias_ids || !pp->bias)))
        return sp_err_set(err, "sampling: logit bias list of %d entries without its arrays", pp->n_bias);
    for (int i = 0; i < pp->n_bias; i++) {
        if (pp->bias_ids[i] < 0) return sp_err_set(err, "sampling: logit bias for token id %d (< 0)", pp->bias_ids[i]);
        if (!isfinite(pp->bias[i]) && pp->bias[i] != -INFINITY)
            return sp_err_set(err, "sampling: logit bias for token %d must be finite or -inf", pp->bias_ids[i]);
    }
    return 0;
}

/* the bias list, copied sorted by id (a later entry for the same id wins); 0 / -1 */
static int bias_copy(sp_penalty *p, const sp_penalty_params *pp, sp_err *err) {
    p->pp.n_bias = 0, p->pp.bias_ids = NULL, p->pp.bias = NULL;
    if (pp->n_bias == 0) return 0;
    p->bias_ids = malloc(sizeof *p->bias_ids * (size_t)pp->n_bias);
    p->bias = malloc(sizeof *p->bias * (size_t)pp->n_bias);
    if (!p->bias_ids || !p->bias) return sp_err_set(err, "penalty: out of memory for %d logit biases", pp->n_bias);
    int n = 0;
    for (int i = 0; i < pp->n_bias; i++) {
        int32_t t = pp->bias_ids[i];
        if (t >= p->V) return sp_err_set(err, "sampling: logit bias for token %d outside the vocabulary [0, %d)", t, p->V);
        int at = 0;
        while (at < n && p->bias_ids[at] < t) at++;
        if (at < n && p->bias_ids[at] == t) {
            p->bias[at] = pp->bias[i];
            continue;
        }
        memmove(p->bias_ids + at + 1, p->bias_ids + at, sizeof *p->bias_ids * (size_t)(n - at));
        memmove(p->bias + at + 1, p->bias + at, sizeof *p->bias * (size_t)(n - at));
        p->bias_ids[at] = t, p->bias[at] = pp->bias[i], n++;
    }
    p->pp.n_bias = n, p->pp.bias_ids = p->bias_ids, p->pp.bias = p->bias;
    return 0;
}

sp_penalty *sp_penalty_create(int V, const sp_penalty_params *pp, sp_err *err) {
    if (V <= 0) {
        sp_err_set(err, "penalty: vocabulary size must be > 0, got %d", V);
        return NULL;
    }
    if (sp_penalty_params_check(pp, err)) return NULL;
    sp_penalty *p = calloc(1, sizeof *p);
    if (p) {
        p->count = calloc((size_t)V, sizeof *p->count);
        p->stamp = calloc((size_t)V, sizeof *p->stamp);
    }
    if (!p || !p->count || !p->stamp) {
        sp_penalty_free(p);
        sp_err_set(err, "penalty: out of memory for V = %d", V);
        return NULL;
    }
    p->pp = *pp;
    p->V = V;
    if (bias_copy(p, pp, err)) {
        sp_penalty_free(p);
        return NULL;
    }
    return p;
}

void sp_penalty_free(sp_penalty *p) {
    if (!p) return;
    free(p->seq);
    free(p->count);
    free(p->stamp);
    free(p->bias_ids);
    free(p->bias);
    free(p);
}

/* window length for a sequence of len tokens */
static int window(const sp_penalty *p, int len) {
    return p->pp.last_n < 0 || p->pp.last_n > len ? len : p->pp.last_n;
}

void sp_penalty_reset(sp_penalty *p) {
    for (int i = p->len - window(p, p->len); i < p->len; i++) p->count[p->seq[i]]--;
    p->len = 0;
}

int sp_penalty_len(const sp_penalty *p) { return p->len; }

int sp_penalty_push(sp_penalty *p, int32_t tok, sp_err *err) {
    if (tok < 0 || tok >= p->V) return sp_err_set(err, "penalty: token %d outside the vocabulary [0, %d)", tok, p->V);
    if (p->len == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        int32_t *s = realloc(p->seq, sizeof *s * (size_t)cap);
        if (!s) return sp_err_set(err, "penalty: out of memory for %d tokens", cap);
        p->seq = s;
        p->cap = cap;
    }
    if (p->pp.last_n > 0 && p->len >= p->pp.last_n) p->count[p->seq[p->len - p->pp.last_n]]--; /* leaves */
    p->seq[p->len++] = tok;
    p->count[tok]++;
    return 0;
}

void sp_penalty_pop(sp_penalty *p, int n) {
    SP_ASSERT(n >= 0 && n <= p->len);
    for (int k = 0; k < n; k++) {
        p->count[p->seq[--p->len]]--;
        if (p->pp.last_n > 0 && p->len >= p->pp.last_n) p->count[p->seq[p->len - p->pp.last_n]]++; /* re-enters */
    }
}

static inline float penalise(const sp_penalty_params *pp, float x, int c) {
    if (pp->repeat != 0.0f) x = x <= 0.0f ? x * pp->repeat : x / pp->repeat;
    return x - ((float)c * pp->frequency + (float)(c > 0) * pp->presence);
}

/* the bias of token tok (0 when it has none): a binary search of the sorted list */
static float bias_of(const sp_penalty *p, int32_t tok) {
    int lo = 0, hi = p->pp.n_bias;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (p->bias_ids[mid] < tok) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->pp.n_bias && p->bias_ids[lo] == tok ? p->bias[lo] : 0.0f;
}

float sp_penalty_adjust(const sp_penalty *p, int32_t tok, float logit) {
    if (!sp_penalty_active(&p->pp) || tok < 0 || tok >= p->V) return logit;
    float x = p->pp.n_bias ? logit + bias_of(p, tok) : logit;
    int c = window_active(&p->pp) ? p->count[tok] : 0;
    return c > 0 ? penalise(&p->pp, x, c) : x;
}

void sp_penalty_apply(sp_penalty *p, float *logits) {
    for (int i = 0; i < p->pp.n_bias; i++) logits[p->bias_ids[i]] += p->bias[i];
    if (!window_active(&p->pp)) return;
    if (++p->epoch == 0) { /* the stamps wrapped: start them over */
        memset(p->stamp, 0, sizeof *p->stamp * (size_t)p->V);
        p->epoch = 1;
    }
    for (int i = p->len - window(p, p->len); i < p->len; i++) {
        int32_t t = p->seq[i];
        if (p->stamp[t] == p->epoch) continue; /* each distinct token once */
        p->stamp[t] = p->epoch;
        logits[t] = penalise(&p->pp, logits[t], p->count[t]);
    }
}
