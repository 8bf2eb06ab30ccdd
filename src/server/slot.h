/* slot.h — one request's decoding state in the server, stepped by the scheduler.
 *
 * A slot runs exactly the speculative loop of sp_spec_generate (spec.c), cut at the target
 * forward so that the forwards of all active slots can run as one batched forward
 * (sp_model_forward_batch):
 *
 *     slot_prepare  → the rows this slot adds to the next forward: a chunk of the prompt while
 *                     prefilling, else [pending, d_1 .. d_g] with drafts from its own drafter
 *     (the scheduler runs one sp_model_forward_batch over every slot's rows)
 *     slot_finish   → verify the drafts against the logits (same rule, same RNG counters as
 *                     spec.c), trim the cache, commit to the drafter, emit the kept tokens
 *
 * The verify rule, the RNG streams and counters, the draft-length limits and the stop rules are
 * those of spec.c, and the forward of each slot's rows is bit-identical to its own forward, so a
 * request's tokens are those `specula generate` gives for the same prompt, params and drafter,
 * whatever else runs beside it. Without a drafter the slot is plain decoding (one token per
 * forward) through the same loop. Not thread-safe: one scheduler thread owns every slot. */
#ifndef SPECULA_SERVER_SLOT_H
#define SPECULA_SERVER_SLOT_H

#include <stdint.h>

#include "spec/drafter.h"
#include "spec/generate.h"
#include "spec/spec.h"

#define SRV_MAX_TOP_LOGPROBS 20

/* What one request asks of its slot. */
typedef struct {
    const int32_t *prompt; /* [n_prompt] (copied by slot_begin) */
    int n_prompt;
    sp_sample_params sample;
    int max_new;
    int ignore_eos;
    int draft_max, draft_min; /* G of the drafter (ignored without one) */
    int top_logprobs;         /* -1: no logprobs; 0..SRV_MAX_TOP_LOGPROBS: logprobs + that many alternatives */
} slot_params;

/* One emitted token with its log-probability under the target's raw distribution. */
typedef struct {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_logprob[SRV_MAX_TOP_LOGPROBS];
} slot_token;

typedef enum { SLOT_IDLE = 0, SLOT_PREFILL, SLOT_DECODE, SLOT_DONE } slot_phase;

typedef struct {
    int prompt_tokens, emitted, drafted, accepted, target_calls;
    double t_begin, t_prefilled, t_first, t_last; /* sp_time_ms() stamps (0 until reached) */
} slot_stats;

typedef struct srv_slot srv_slot;

/* A slot with its own KV cache of max_ctx positions; prefill_chunk: most prompt rows it adds to one
 * forward. The model is borrowed. */
srv_slot *slot_create(sp_model *m, int max_ctx, int prefill_chunk, sp_err *err);
void slot_free(srv_slot *s);

/* Start a request. d: its drafter (NULL: plain decoding), owned by the slot from now on, even on
 * failure. The prompt must leave room for one token in the cache. */
int slot_begin(srv_slot *s, const slot_params *p, sp_drafter *d, sp_err *err);
/* Drop the request (finished or cancelled): frees its drafter, clears the cache. */
void slot_reset(srv_slot *s);

slot_phase slot_get_phase(const srv_slot *s);
/* Rows this slot would add to the next forward (0 when idle or done). */
int slot_rows_wanted(const srv_slot *s);

/* Fill *seq with this slot's next rows (at most max_rows of them; decode blocks always fit when
 * max_rows >= draft_max + 1). logits: where its [T, V] logits go when it needs them. Proposes the
 * drafts, unless draft is 0 and the request is greedy: then this round verifies no drafts (a plain
 * step; the drafter is still committed to, as spec.c does when there is no room for drafts).
 * Greedy output is the same either way; sampled requests always draft, so a seed reproduces.
 * Returns the row count, 0 when nothing to add, -1 with err. */
int slot_prepare(srv_slot *s, int max_rows, float *logits, int draft, sp_forward_seq *seq, sp_err *err);
/* After the forward: verify, trim, commit, emit. The tokens kept by this step are in *out
 * (valid until the next call), their count returned; -1 with err. */
int slot_finish(srv_slot *s, const slot_token **out, sp_err *err);
/* Mark the request done after the caller consumed only the first `kept` tokens of the last step
 * (a stop string matched): the rest are dropped from the statistics. */
void slot_stop(srv_slot *s, int kept);

sp_stop_reason slot_stop_reason(const srv_slot *s);
const slot_stats *slot_get_stats(const srv_slot *s);
/* KV positions in use and the capacity (for the cache-use metric) */
int slot_kv_used(const srv_slot *s);
int slot_kv_capacity(const srv_slot *s);

#endif
