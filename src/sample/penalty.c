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
};

sp_penalty_params sp_penalty_params_default(void) {
    sp_penalty_params pp = {.repeat = 1.0f, .last_n = 64, .presence = 0.0f, .frequency = 0.0f};
    return pp;
}

int sp_penalty_active(const sp_penalty_params *pp) {
    return pp->last_n != 0 &&
           ((pp->repeat != 1.0f && pp->repeat != 0.0f) || pp->presence != 0.0f || pp->frequency != 0.0f);
}

int sp_penalty_params_check(const sp_penalty_params *pp, sp_err *err) {
    if (!(pp->repeat > 0.0f) || !isfinite(pp->repeat) || !isfinite(1.0f / pp->repeat))
        if (pp->repeat != 0.0f) /* 0: a zeroed struct, penalties off */
            return sp_err_set(err, "sampling: repeat penalty must be finite and > 0, got %g", (double)pp->repeat);
    if (pp->last_n < -1) return sp_err_set(err, "sampling: repeat-last-n must be >= -1, got %d", pp->last_n);
    if (!isfinite(pp->presence)) return sp_err_set(err, "sampling: presence penalty must be finite");
    if (!isfinite(pp->frequency)) return sp_err_set(err, "sampling: frequency penalty must be finite");
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
    return p;
}

void sp_penalty_free(sp_penalty *p) {
    if (!p) return;
    free(p->seq);
    free(p->count);
    free(p->stamp);
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

float sp_penalty_adjust(const sp_penalty *p, int32_t tok, float logit) {
    if (!sp_penalty_active(&p->pp) || tok < 0 || tok >= p->V) return logit;
    int c = p->count[tok];
    return c > 0 ? penalise(&p->pp, logit, c) : logit;
}

void sp_penalty_apply(sp_penalty *p, float *logits) {
    if (!sp_penalty_active(&p->pp)) return;
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
