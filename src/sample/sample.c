/* sample.c — logits → probabilities (temperature, top-k, top-p, min-p) and inverse-CDF
 * sampling, including the residual max(0, p − q) of speculative verification.
 * The order of processing and the tie rule are documented in sample.h.
 *
 * Work happens on a candidate array of (x, e, id) triples: x the tempered logit, e =
 * exp(x − max). Candidates [0, n) are the kept set. top-k and top-p find their boundary by
 * bucketing x (one O(n) pass) and order only the bucket the boundary falls in. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"

#define SP_NB 4096            /* selection buckets (see "bucketed selection") */
#define SP_BUCKET_RANGE 40.0f /* bucketed span below the max x: e^-40 is negligible mass */

typedef struct {
    float x;    /* tempered logit */
    float e;    /* exp(x - max x) */
    int32_t id; /* token id */
} cand;

struct sp_sampler {
    sp_sample_params sp;
    int V;
    cand *c;      /* [V] candidates */
    float *probs; /* [V] scratch when the caller passes no probs_out */
    int *bin_count;   /* [SP_NB] top-k histogram */
    double *bin_mass; /* [SP_NB] top-p histogram */
};

sp_sample_params sp_sample_params_default(void) {
    sp_sample_params sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
    return sp;
}

int sp_sample_params_check(const sp_sample_params *sp, sp_err *err) {
    if (!(sp->temperature >= 0.0f) || !isfinite(sp->temperature))
        return sp_err_set(err, "sampling: temperature must be a finite value >= 0, got %g",
                          (double)sp->temperature);
    if (sp->top_k < 0) return sp_err_set(err, "sampling: top_k must be >= 0, got %d", sp->top_k);
    if (!(sp->top_p >= 0.0f && sp->top_p <= 1.0f))
        return sp_err_set(err, "sampling: top_p must be in [0, 1], got %g", (double)sp->top_p);
    if (!(sp->min_p >= 0.0f && sp->min_p <= 1.0f))
        return sp_err_set(err, "sampling: min_p must be in [0, 1], got %g", (double)sp->min_p);
    return 0;
}

int sp_sample_is_greedy(const sp_sample_params *sp) {
    return sp->temperature == 0.0f || sp->top_k == 1;
}

sp_sampler *sp_sampler_create(int V, const sp_sample_params *sp, sp_err *err) {
    if (V <= 0) {
        sp_err_set(err, "sampler: vocabulary size must be > 0, got %d", V);
        return NULL;
    }
    if (sp_sample_params_check(sp, err)) return NULL;
    sp_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->c = malloc((size_t)V * sizeof *s->c);
        s->probs = malloc((size_t)V * sizeof *s->probs);
        s->bin_count = malloc(SP_NB * sizeof *s->bin_count);
        s->bin_mass = malloc(SP_NB * sizeof *s->bin_mass);
    }
    if (!s || !s->c || !s->probs || !s->bin_count || !s->bin_mass) {
        sp_sampler_free(s);
        sp_err_set(err, "sampler: out of memory for V = %d", V);
        return NULL;
    }
    s->sp = *sp;
    s->V = V;
    return s;
}

void sp_sampler_free(sp_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->probs);
    free(s->bin_count);
    free(s->bin_mass);
    free(s);
}

const sp_sample_params *sp_sampler_params(const sp_sampler *s) { return &s->sp; }

int sp_sampler_set_temperature(sp_sampler *s, float T, sp_err *err) {
    if (!(T > 0.0f) || !isfinite(T)) return sp_err_set(err, "sampler: temperature must be finite and > 0, got %g", (double)T);
    if (sp_sample_is_greedy(&s->sp)) return sp_err_set(err, "sampler: a greedy sampler has no temperature to change");
    s->sp.temperature = T;
    return 0;
}
int sp_sampler_vocab(const sp_sampler *s) { return s->V; }

/* The argmax of src/kernels/act.c on the SIMD tier in use: greedy verification and drafting call
 * this for every position. */
int sp_sample_argmax(const float *x, int V) { return sp_argmax(x, V); }

int sp_sample_argmax_ref(const float *x, int V) { return sp_argmax_ref(x, V); }

/* ---- ordering and partial selection -------------------------------------------------- */

/* "a comes before b": larger x first, lower id on ties */
static inline int cand_before(const cand *a, const cand *b) {
    return a->x > b->x || (a->x == b->x && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

static inline void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorder c[0, n) so that c[0, k) holds the k first candidates in cand_before order (in
 * any order among themselves). Quickselect with a median-of-three pivot; keys are distinct
 * (ids break ties), so every partition step shrinks the range. Expected O(n). */
static void cand_select(cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (k > 0 && k < n && lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi], &c[lo])) cand_swap(&c[hi], &c[lo]);
        if (cand_before(&c[hi], &c[mid])) cand_swap(&c[hi], &c[mid]);
        cand pivot = c[mid]; /* median of three */
        int i = lo, j = hi;
        while (i <= j) { /* Hoare partition: [lo, j] before-or-equal pivot, [i, hi] after */
            while (cand_before(&c[i], &pivot)) i++;
            while (cand_before(&pivot, &c[j])) j--;
            if (i <= j) {
                cand_swap(&c[i], &c[j]);
                i++;
                j--;
            }
        }
        /* now every element of [lo, j] is before-or-equal every element of [i, hi] */
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break; /* k-1 sits on the pivot between the halves: done */
    }
}

/* ---- bucketed selection ----------------------------------------------------------------
 * A filter that keeps "the first N candidates" (top-k) or "the shortest prefix with mass M"
 * (top-p) needs the order only near its boundary. Candidates are binned by x into NB buckets
 * of width SP_BUCKET_RANGE / (NB − 1) below the max (everything further below shares the last
 * bucket); the bin is monotone in x, so all of bucket b comes before all of bucket b + 1. One
 * pass counts (or weighs) the bins, the crossing bin b* is found, candidates of bins < b* are
 * moved to the front unsorted, and only bin b* is ordered. Equal x always share a bin. */

static inline int bucket_of(float x, float m) {
    float d = (m - x) * ((SP_NB - 1) / SP_BUCKET_RANGE);
    return d < (float)(SP_NB - 1) ? (int)d : SP_NB - 1;
}

/* Move candidates of bins < bstar to c[0, *n1) and of bin bstar to c[*n1, *n2). */
static void cand_partition(cand *c, int n, float m, int bstar, int *n1, int *n2) {
    int w = 0;
    for (int j = 0; j < n; j++)
        if (bucket_of(c[j].x, m) < bstar) cand_swap(&c[w++], &c[j]);
    *n1 = w;
    for (int j = w; j < n; j++)
        if (bucket_of(c[j].x, m) == bstar) cand_swap(&c[w++], &c[j]);
    *n2 = w;
}

/* top-k: c[0, k) becomes the first k candidates in order (0 < k < n). */
static void cand_top_k(sp_sampler *s, cand *c, int n, float m, int k) {
    int *count = s->bin_count;
    memset(count, 0, SP_NB * sizeof *count);
    for (int j = 0; j < n; j++) count[bucket_of(c[j].x, m)]++;
    int before = 0, b = 0;
    while (before + count[b] < k) before += count[b++];
    int n1, n2;
    cand_partition(c, n, m, b, &n1, &n2);
    SP_ASSERT(n1 == before && n2 >= k);
    cand_select(c + n1, n2 - n1, k - n1); /* the first k − n1 of the crossing bin */
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
}

/* top-p on unsorted candidates with e filled: returns n', the length of the shortest
 * largest-first prefix whose mass reaches need, arranged in c[0, n') (order inside
 * is unspecified); *kept_mass receives its mass. */
static int cand_top_p(sp_sampler *s, cand *c, int n, float m, double need, double *kept_mass) {
    double *mass = s->bin_mass;
    memset(mass, 0, SP_NB * sizeof *mass);
    for (int j = 0; j < n; j++) mass[bucket_of(c[j].x, m)] += c[j].e;
    double cum = 0.0;
    int b = 0;
    while (b < SP_NB - 1 && !(cum + mass[b] >= need)) cum += mass[b++];
    /* (rounding can leave need unreached: then b is the last bin and everything is kept) */
    int n1, n2;
    cand_partition(c, n, m, b, &n1, &n2);
    qsort(c + n1, (size_t)(n2 - n1), sizeof *c, cand_cmp);
    int r = n1;
    while (r < n2) {
        cum += c[r++].e;
        if (cum >= need) break;
    }
    if (r == 0) cum += c[r++].e; /* at least one token (need <= 0) */
    *kept_mass = cum;
    return r;
}

/* ---- processing ------------------------------------------------------------------------ */

int sp_sampler_probs(sp_sampler *s, float *probs, const float *logits, sp_err *err) {
    const sp_sample_params *sp = &s->sp;
    const int V = s->V;
    memset(probs, 0, (size_t)V * sizeof *probs);
    if (sp_sample_is_greedy(sp)) {
        int a = sp_sample_argmax(logits, V);
        if (!(logits[a] > -INFINITY)) return sp_err_set(err, "sampler: every logit is -inf or NaN");
        probs[a] = 1.0f;
        return 0;
    }

    /* temperature */
    cand *c = s->c;
    const float inv_t = 1.0f / sp->temperature;
    float m = -INFINITY;
    int n = 0;
    for (int i = 0; i < V; i++) {
        float x = logits[i] * inv_t;
        if (!(x > -INFINITY)) continue; /* -inf (masked) and NaN never get mass */
        c[n].x = x;
        c[n].id = i;
        n++;
        if (x > m) m = x;
    }
    if (n == 0) return sp_err_set(err, "sampler: every logit is -inf or NaN");
    if (m == INFINITY) { /* +inf logits: they share all the mass */
        for (int j = 0; j < n; j++) c[j].x = c[j].x == INFINITY ? 0.0f : -INFINITY;
        m = 0.0f;
    }

    /* top-k: c[0, k) sorted */
    int sorted = 0;
    if (sp->top_k > 0 && sp->top_k < n) {
        cand_top_k(s, c, n, m, sp->top_k);
        n = sorted = sp->top_k;
    }

    double z = 0.0;
    for (int j = 0; j < n; j++) {
        c[j].e = expf(c[j].x - m);
        z += c[j].e;
    }

    /* top-p: the shortest largest-first prefix with mass >= top_p (at least one token) */
    if (sp->top_p < 1.0f && n > 1) {
        const double need = (double)sp->top_p * z;
        if (sorted == n) { /* after top-k: walk the sorted list */
            double cum = 0.0;
            int r = 0;
            while (r < n) {
                cum += c[r++].e;
                if (cum >= need) break;
            }
            n = r;
            z = cum;
        } else {
            n = cand_top_p(s, c, n, m, need, &z);
        }
    }

    /* min-p: p_i >= min_p · p_max  ⇔  e_i >= min_p (the kept set holds the max, e = 1) */
    if (sp->min_p > 0.0f && n > 1) {
        int w = 0;
        z = 0.0;
        for (int j = 0; j < n; j++) {
            if (c[j].e >= sp->min_p) {
                c[w++] = c[j];
                z += c[j].e;
            }
        }
        n = w;
    }
    SP_ASSERT(n > 0 && z > 0.0);

    const double inv_z = 1.0 / z;
    for (int j = 0; j < n; j++) probs[c[j].id] = (float)(c[j].e * inv_z);
    return 0;
}

int sp_sampler_sample(sp_sampler *s, const float *logits, uint64_t counter, float *probs_out,
                      sp_err *err) {
    if (sp_sample_is_greedy(&s->sp) && !probs_out) {
        int a = sp_sample_argmax(logits, s->V);
        if (!(logits[a] > -INFINITY)) return sp_err_set(err, "sampler: every logit is -inf or NaN");
        return a;
    }
    float *probs = probs_out ? probs_out : s->probs;
    if (sp_sampler_probs(s, probs, logits, err)) return -1;
    double u = sp_rng_uniform(s->sp.seed, SP_RNG_STREAM_SAMPLE, counter);
    int tok = sp_sample_probs(probs, s->V, u);
    SP_ASSERT(tok >= 0);
    return tok;
}

/* ---- inverse CDF --------------------------------------------------------------------- */

int sp_sample_probs(const float *probs, int V, double u) {
    double total = 0.0;
    for (int i = 0; i < V; i++) total += probs[i];
    if (!(total > 0.0)) return -1;
    const double target = u * total;
    double cum = 0.0;
    int last = -1;
    for (int i = 0; i < V; i++) {
        if (probs[i] <= 0.0f) continue;
        cum += probs[i];
        last = i;
        if (cum > target) return i;
    }
    return last; /* u·total rounded up to total: the last token with mass */
}

int sp_sample_residual(const float *p, const float *q, int V, double u) {
    double total = 0.0;
    for (int i = 0; i < V; i++) {
        float r = p[i] - q[i];
        if (r > 0.0f) total += r;
    }
    if (!(total > 0.0)) return sp_sample_probs(p, V, u); /* p == q: fall back to p */
    const double target = u * total;
    double cum = 0.0;
    int last = -1;
    for (int i = 0; i < V; i++) {
        float r = p[i] - q[i];
        if (!(r > 0.0f)) continue;
        cum += r;
        last = i;
        if (cum > target) return i;
    }
    return last;
}

int sp_sample_residual_probs(float *r, const float *p, const float *q, int V) {
    double total = 0.0;
    for (int i = 0; i < V; i++) {
        float d = p[i] - q[i];
        total += d > 0.0f ? d : 0.0f;
    }
    int fallback = !(total > 0.0);
    if (fallback) {
        total = 0.0;
        for (int i = 0; i < V; i++) total += p[i];
    }
    const double inv = total > 0.0 ? 1.0 / total : 0.0;
    for (int i = 0; i < V; i++) {
        float d = fallback ? p[i] : p[i] - q[i];
        r[i] = d > 0.0f ? (float)(d * inv) : 0.0f;
    }
    return fallback;
}
