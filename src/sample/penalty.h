/* penalty.h — repetition penalties on logits, as llama.cpp defines them (docs/sampling.md):
 *
 *   for every token t that occurs c > 0 times among the last N tokens of the sequence:
 *       x_t = x_t ≤ 0 ? x_t · repeat : x_t / repeat
 *       x_t = x_t − c · frequency − presence
 *
 * applied to the raw logits before temperature and the truncation filters of sample.h (and
 * before the argmax of greedy decoding). The sequence is the prompt followed by every emitted
 * token. The same penalised logits feed the target's p and a drafter's q, position by position:
 * inside a speculative block the logits at draft i see the drafts before it as part of the
 * sequence, exactly the sequence plain decoding would have there, so speculation stays lossless.
 *
 * sp_penalty holds the sequence (grows as tokens are pushed) and the counts of its last N
 * tokens; push / pop move the end of the sequence, so a speculative round pushes drafts and pops
 * them again. Cost per application: O(N), independent of the vocabulary size. */
#ifndef SPECULA_PENALTY_H
#define SPECULA_PENALTY_H

#include <stdint.h>

#include "specula.h"

typedef struct {
    float repeat;    /* multiplicative repeat penalty (> 0; 1: off; 0 in a zeroed struct: off) */
    int last_n;      /* window: the last N tokens (0: penalties off; -1: the whole sequence) */
    float presence;  /* subtracted once from every token in the window (0: off) */
    float frequency; /* subtracted per occurrence in the window (0: off) */
    /* logit bias (OpenAI's logit_bias, llama.cpp's --logit-bias): bias[i] added to the logit of
     * token bias_ids[i] before the penalties (llama.cpp's order), at every position whatever the window. The arrays
     * are borrowed until sp_penalty_create copies them. */
    int n_bias;
    const int32_t *bias_ids;
    const float *bias;
} sp_penalty_params;

/* llama.cpp's defaults: repeat 1 (off), last_n 64, presence 0, frequency 0 */
sp_penalty_params sp_penalty_params_default(void);
/* 1 when these params change any logit (a penalty or a logit bias) */
int sp_penalty_active(const sp_penalty_params *pp);
/* 0 if the values are in range (repeat > 0 and finite, last_n >= -1, finite presence and
 * frequency, finite biases of ids >= 0), else -1 naming the bad field */
int sp_penalty_params_check(const sp_penalty_params *pp, sp_err *err);

typedef struct sp_penalty sp_penalty;

/* Empty sequence over a vocabulary of V tokens. NULL with err on bad params or no memory.
 * Caller owns it; free with sp_penalty_free. */
sp_penalty *sp_penalty_create(int V, const sp_penalty_params *pp, sp_err *err);
void sp_penalty_free(sp_penalty *p);
/* back to the empty sequence */
void sp_penalty_reset(sp_penalty *p);
/* append tok (0 <= tok < V) to the sequence; -1 on a bad id or no memory */
int sp_penalty_push(sp_penalty *p, int32_t tok, sp_err *err);
/* remove the last n tokens (n <= the sequence length) */
void sp_penalty_pop(sp_penalty *p, int n);
/* tokens in the sequence */
int sp_penalty_len(const sp_penalty *p);
/* penalise logits[V] in place for the current sequence (see top of file) */
void sp_penalty_apply(sp_penalty *p, float *logits);
/* the penalised value of one logit of token tok (for drafters that score a candidate subset) */
float sp_penalty_adjust(const sp_penalty *p, int32_t tok, float logit);

#endif
