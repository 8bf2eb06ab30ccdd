/* sample.h — logits processing and sampling, shared by the target's p and a drafter's q.
 *
 * Processing (sp_sampler_probs) turns logits [V] into a full probability vector [V] with
 * zeros outside the kept set, in Hugging Face's warper order:
 *
 *     temperature → top-k → top-p → min-p → softmax over the kept set
 *
 *   temperature  x = logits / T. T == 0 is greedy: a one-hot vector at the argmax (lowest
 *                index on ties); the other settings are then ignored.
 *   top-k        keep the k largest x (0 or >= V: off).
 *   top-p        keep the smallest prefix of the kept tokens, largest first, whose softmax
 *                mass reaches p (always at least one token; 1: off).
 *   min-p        keep tokens whose probability is >= min_p · (largest probability) (0: off).
 *
 * "Largest first" is the total order (x descending, token id ascending), so ties at a top-k
 * or top-p boundary always keep the lower ids: the result is a pure function of the logits.
 * No full sort: top-k and top-p find their boundary with one bucketing pass over the
 * candidates and order only the bucket it falls in (O(V) + O(k log k) for top-k), so
 * V = 262144 costs a few passes over the logits even when the nucleus is most of it.
 *
 * Sampling is by inverse CDF over token ids in index order from one uniform u in [0, 1):
 * the token is the first i with Σ_{j<=i} probs[j] > u · Σ probs. The uniform comes from the
 * counter-based RNG of core.h, sp_rng_uniform(seed, stream, counter), so a seed reproduces
 * the output whatever the thread count or call order. Plain generation uses
 * stream SP_RNG_STREAM_SAMPLE and counter = the position of the token being sampled.
 *
 * Residual sampling (speculative verification, after a rejected draft): sample from
 * normalize(max(0, p − q)); when that residual is all zero (p == q up to rounding) fall back
 * to p. p and q must be processed with the same sp_sample_params.
 *
 * Repetition penalties act on the logits before this processing (penalty.h). Not here: grammars,
 * typical / eta sampling. */
#ifndef SPECULA_SAMPLE_H
#define SPECULA_SAMPLE_H

#include <stdint.h>

#include "specula.h"

/* RNG streams (the `stream` argument of sp_rng_uniform) used by sampling code, so draws of
 * different purposes at the same counter never share a uniform. */
enum {
    SP_RNG_STREAM_SAMPLE = 1,   /* the emitted token (target's sample, bonus token) */
    SP_RNG_STREAM_ACCEPT = 2,   /* speculative accept test u < p(x)/q(x) */
    SP_RNG_STREAM_RESIDUAL = 3, /* sample from the residual after a rejection */
    SP_RNG_STREAM_DRAFT = 4,    /* a drafter's own samples from q */
    SP_RNG_STREAM_SYNTH = 5     /* synthetic acceptance's accept test (benchmarks only, spec.h) */
};

typedef struct {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off; in [0, 1] */
    float min_p;       /* 0: off; in [0, 1] */
    uint64_t seed;
} sp_sample_params;

/* greedy, every filter off, seed 0 */
sp_sample_params sp_sample_params_default(void);
/* 0 if the values are in range, else -1 naming the bad field */
int sp_sample_params_check(const sp_sample_params *sp, sp_err *err);
/* 1 when these params give a one-hot distribution (temperature 0 or top_k 1) */
int sp_sample_is_greedy(const sp_sample_params *sp);

/* A sampler: the params plus scratch for one vocabulary of size V. Not thread-safe: one
 * per sequence (or per drafter). Caller owns it; free with sp_sampler_free. */
typedef struct sp_sampler sp_sampler;

sp_sampler *sp_sampler_create(int V, const sp_sample_params *sp, sp_err *err);
void sp_sampler_free(sp_sampler *s);
const sp_sample_params *sp_sampler_params(const sp_sampler *s);
/* Change the temperature of a sampling (non-greedy) sampler for later calls; the other settings
 * stay. A drafter draws its positions at their own temperatures this way (any q is lossless:
 * the engine verifies with the q drawn from). 0, or -1 when T is not finite and > 0 or the
 * sampler is greedy (greedy stays greedy). */
int sp_sampler_set_temperature(sp_sampler *s, float T, sp_err *err);
int sp_sampler_vocab(const sp_sampler *s);

/* probs[V] = processed distribution of logits[V] (see top of file). probs must not alias
 * logits. Fails (-1) only when no logit is finite or above -inf. */
int sp_sampler_probs(sp_sampler *s, float *probs, const float *logits, sp_err *err);

/* Process logits and draw one token with u = sp_rng_uniform(seed, SP_RNG_STREAM_SAMPLE,
 * counter). probs_out[V] (may be NULL) receives the distribution sampled from. Greedy
 * params skip the softmax entirely. Returns the token id, or -1 on error. */
int sp_sampler_sample(sp_sampler *s, const float *logits, uint64_t counter, float *probs_out,
                      sp_err *err);

/* Inverse-CDF draw from a non-negative vector probs[V] (need not sum to 1) with u in
 * [0, 1). Returns the first i with Σ_{j<=i} probs[j] > u·Σ probs and probs[i] > 0; -1 when
 * every entry is zero. */
int sp_sample_probs(const float *probs, int V, double u);

/* Inverse-CDF draw from normalize(max(0, p − q)) with u in [0, 1), falling back to p when
 * the residual mass is zero. Returns -1 only when p is all zero. */
int sp_sample_residual(const float *p, const float *q, int V, double u);
/* r[V] = normalize(max(0, p − q)), or a copy of normalize(p) when that is all zero.
 * r may alias p or q. Returns 1 when the fallback to p was taken, else 0. */
int sp_sample_residual_probs(float *r, const float *p, const float *q, int V);

/* argmax with the lowest index winning ties (NaN never wins; 0 when all are NaN) */
int sp_sample_argmax(const float *x, int V);
/* the same rule, one scalar pass (the reference of the tests) */
int sp_sample_argmax_ref(const float *x, int V);

#endif
