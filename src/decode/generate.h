/* generate.h — plain (non-speculative) generation: prefill the prompt, then decode one token
 * per target forward, greedy or sampled, until EOS, a token limit, the context limit or the
 * caller's callback says stop.
 *
 * Token t of the sequence (prompt tokens are 0 .. n_prompt−1) is sampled with counter t on
 * stream SP_RNG_STREAM_SAMPLE (sample.h), so a seed gives the same tokens whatever the thread
 * count, and a speculative engine drawing the target's tokens the same way can be compared.
 *
 * Library code: nothing is printed; streaming goes through the on_token callback. */
#ifndef SPECULA_GENERATE_H
#define SPECULA_GENERATE_H

#include <stdint.h>

#include "sample/penalty.h"
#include "sample/sample.h"
#include "specula.h"

typedef enum {
    SP_STOP_NONE = 0,
    SP_STOP_MAX_NEW,  /* max_new tokens emitted */
    SP_STOP_EOS,      /* an EOS id of the config was emitted (it is part of the output) */
    SP_STOP_CTX,      /* the KV cache / max_position_embeddings is full */
    SP_STOP_CALLBACK  /* on_token returned non-zero */
} sp_stop_reason;

const char *sp_stop_reason_name(sp_stop_reason r);

/* Called for every emitted token, in order, right after it is sampled (before the next
 * forward). Return non-zero to stop after this token. */
typedef int (*sp_token_cb)(void *ctx, int32_t token);

typedef struct {
    int max_new;              /* most tokens to emit (> 0) */
    int ignore_eos;           /* 1: EOS ids do not stop generation */
    sp_sample_params sample;  /* temperature 0 = greedy */
    sp_penalty_params penalty; /* repetition penalties over prompt + output (penalty.h; zeroed: off) */
    int32_t extra_eos[SP_MAX_EOS]; /* more end-of-generation ids besides the config's (e.g. from
                                      generation_config.json) */
    int n_extra_eos;
    int prefill_chunk;        /* most prompt tokens per forward; 0 = 512 */
    int max_ctx;              /* KV capacity when sp_generate creates the cache; 0 = prompt + max_new */
    sp_token_cb on_token;     /* may be NULL */
    void *cb_ctx;
} sp_gen_params;

/* max_new 64, greedy, no penalties (llama.cpp's defaults), EOS honoured, default chunk and context */
sp_gen_params sp_gen_params_default(void);

typedef struct {
    int prompt_tokens;    /* tokens prefilled by this call */
    int emitted;          /* tokens emitted (written to out) */
    int decode_steps;     /* single-token forwards after the prefill (= emitted − 1 or emitted) */
    double prefill_ms;    /* prompt forwards, up to the first token's logits */
    double decode_ms;     /* from the end of the prefill to the last emitted token */
    double decode_tps;    /* decode_steps / decode_ms · 1000 (0 when no decode step ran) */
    double prefill_tps;   /* prompt_tokens / prefill_ms · 1000 */
    sp_stop_reason stop;
} sp_gen_stats;

/* Generate up to p->max_new tokens after prompt[0, n_prompt) (n_prompt >= 1) into
 * out[0, out_cap) (out_cap >= p->max_new).
 * kv: NULL to use a fresh cache owned by this call (sized p->max_ctx), or the caller's cache,
 * which must be empty or hold a sequence the prompt continues (its max_batch must be >=
 * p->prefill_chunk); on return it holds the prompt and every emitted token but the last.
 * The model's thread count is the model's (sp_model_load). Returns 0, or -1 with err. */
int sp_generate(sp_model *m, sp_kv *kv, const int32_t *prompt, int n_prompt,
                const sp_gen_params *p, int32_t *out, int out_cap, sp_gen_stats *stats,
                sp_err *err);

/* 1 when tok is one of cfg's EOS ids */
int sp_is_eos(const sp_config *cfg, int32_t tok);
/* 1 when tok ends generation under p: one of cfg's EOS ids or p's extra ones */
int sp_gen_is_eos(const sp_config *cfg, const sp_gen_params *p, int32_t tok);

#endif
