/* slot.h — one request's decoding state in the server, stepped by the scheduler.
 *
 * A slot steps the speculative round of sp_spec_generate (decode/round.h, the one acceptance
 * code), cut at the target forward so that the forwards of all active slots can run as one
 * batched forward (sp_model_forward_batch); what is the server's own stays here: prefill
 * chunking, the dormant drafter and its held rows, logprobs, statistics:
 *
 *     sp_slot_plan     → how many drafts it could verify this step (the scheduler picks g per slot
 *                     and has the slots' drafters propose, batched when they share a checkpoint)
 *     sp_slot_prepare  → the rows this slot adds to the next forward: a chunk of the prompt while
 *                     prefilling, else [pending, d_1 .. d_g] (a token tree: its nodes, tree-masked)
 *     (the scheduler runs one sp_model_forward_batch over every slot's rows)
 *     sp_slot_finish   → the round's accept (same rule, same RNG counters and penalties as
 *                     spec.c), cache trim, emit of the kept tokens, drafter commit
 *
 * The verify rule, the RNG streams and counters, the draft-length limits, the repetition
 * penalties and the stop rules are round.c's, and the forward of each slot's rows is
 * bit-identical to its own forward, so a
 * request's tokens are those `specula generate` gives for the same prompt, params and drafter,
 * whatever else runs beside it. Without a drafter the slot is plain decoding (one token per
 * forward) through the same loop. Not thread-safe: one scheduler thread owns every slot. */
#ifndef SPECULA_SERVER_SLOT_H
#define SPECULA_SERVER_SLOT_H

#include <stdint.h>

#include "decode/drafter.h"
#include "decode/generate.h"
#include "decode/round.h"
#include "decode/spec.h"

#define SRV_MAX_TOP_LOGPROBS 20

/* What one request asks of its slot. */
typedef struct {
    const int32_t *prompt; /* [n_prompt] (copied by sp_slot_begin) */
    int n_prompt;
    sp_sample_params sample;
    sp_penalty_params penalty; /* repetition penalties (inactive: none) */
    int max_new;
    int ignore_eos;
    int draft_max, draft_min; /* G of the drafter (ignored without one) */
    sp_tree_shape tree;       /* tree.nodes > 0: token trees of that many nodes (a drafter with propose_tree) */
    int top_logprobs;         /* -1: no logprobs; 0..SRV_MAX_TOP_LOGPROBS: logprobs + that many alternatives */
    int cache_prompt;         /* 1: reuse the slot's cached prefix of the prompt (0: prefill it all) */
    const sp_grammar *grammar; /* NULL, or the grammar the output follows (borrowed; chains only) */
    const sp_gvocab *gvocab;
    const sp_synth *synth;     /* NULL, or synthetic acceptance (borrowed; benchmarks only, not lossless) */
    int seeded;                /* 1: the request gave its seed (a sampled one then verifies its full room) */
} slot_params;

/* One emitted token with its log-probability under the target's raw distribution (the logits before
 * temperature and truncation; with repetition penalties, after them). */
typedef struct {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_logprob[SRV_MAX_TOP_LOGPROBS];
} slot_token;

typedef enum { SLOT_IDLE = 0, SLOT_PREFILL, SLOT_DECODE, SLOT_DONE } slot_phase;

/* Why a decoding round of a speculative request verified no drafts (docs/server-batching.md). */
typedef enum {
    SLOT_NODRAFT_NOT_PAYING = 0, /* the verify-length policy chose none */
    SLOT_NODRAFT_NO_ROOM,        /* the request's last token, or the context's */
    SLOT_NODRAFT_DRAFTER_NONE,   /* the drafter proposed none (or fewer than --draft-min) */
    SLOT_NODRAFT_N
} slot_nodraft;

typedef struct {
    int prompt_tokens, emitted, drafted, accepted, target_calls;
    int cached_tokens;                  /* prompt tokens whose KV rows the slot kept from earlier requests */
    int rounds_nodraft[SLOT_NODRAFT_N]; /* rounds verifying no drafts, by reason (speculative requests) */
    int drafter_built;                  /* 1 once the request's drafter was built and begun */
    int idle_drafter_rounds;            /* rounds that asked for no drafts in which the drafter still ran
                                           (commit: a drafter without extend); 0 with DFlash / DSpark */
    double t_begin, t_prefilled, t_first, t_last; /* sp_time_ms() stamps (0 until reached) */
    int forced, cut;                    /* drafts the grammar forced / dropped */
    int from_forced, from_drafter, from_target; /* emitted tokens by source (sp_round_result) */
    int synthetic;                      /* 1: a speculative request under synthetic acceptance (not lossless) */
} slot_stats;

typedef struct srv_slot srv_slot;

/* Builds one request's drafter for its sampling params (the slot owns the result); NULL with err. */
typedef sp_drafter *(*slot_drafter_fn)(void *ctx, const sp_sample_params *sample, int max_ctx, sp_err *err);

/* Where a speculative request's drafter comes from. The slot builds it with make(ctx, sample,
 * capacity) only when it first verifies drafts (sp_slot_wake_drafter); until then it keeps the target
 * rows the drafter will begin on: n_taps rows of tap_layers[] and, with wants_hidden, the final
 * hidden row, per committed token. Every drafter make builds must want exactly these rows. */
typedef struct {
    slot_drafter_fn make;
    void *ctx;
    int n_taps;
    const int *tap_layers; /* [n_taps], borrowed */
    int wants_hidden;
} slot_drafter_src;

/* A slot with its own KV cache of max_ctx positions; prefill_chunk: most prompt rows it adds to one
 * forward. The model is borrowed. */
srv_slot *sp_slot_create(sp_model *m, int max_ctx, int prefill_chunk, sp_err *err);
void sp_slot_free(srv_slot *s);

/* Start a request. src: where its drafter comes from (NULL: plain decoding; borrowed, must outlive
 * the request). The prompt must leave room for one token in the cache. With p->cache_prompt the
 * KV rows of the longest prefix the slot still holds (sp_slot_cached_prefix) are kept and only the
 * rest of the prompt is forwarded; the cache is cut back to that prefix, or cleared when a sliding
 * window ring no longer holds what the cut would expose. */
int sp_slot_begin(srv_slot *s, const slot_params *p, const slot_drafter_src *src, sp_err *err);
/* Drop the request (finished or cancelled): frees its drafter. The KV cache and the tokens it holds
 * stay for the next request's prefix (sp_slot_forget drops them too). */
void sp_slot_reset(srv_slot *s);
void sp_slot_forget(srv_slot *s);
/* The prompt tokens a request with this prompt and drafter source would reuse from the slot's cache
 * (at most n - 1: the last prompt token is always forwarded). A request whose drafter begins on target
 * rows (taps / hidden) reuses only positions whose rows the slot kept for the same taps. */
int sp_slot_cached_prefix(const srv_slot *s, const int32_t *prompt, int n, const slot_drafter_src *src);
/* Positions the slot's cache holds (the tokens of finished requests included). */
int sp_slot_cached_len(const srv_slot *s);

slot_phase sp_slot_get_phase(const srv_slot *s);
/* Rows this slot would add to the next forward (0 when idle or done). */
int sp_slot_rows_wanted(const srv_slot *s);
/* After sp_slot_plan returned 1: the most rows this step's round may add (1 + its drafts or tree nodes). */
int sp_slot_plan_rows(const srv_slot *s);
/* 1 when this request verifies token trees (its drafts are proposed by sp_slot_propose). */
int sp_slot_is_tree(const srv_slot *s);
/* 1 when the request follows a grammar (its drafts are proposed by sp_slot_propose). */
int sp_slot_has_grammar(const srv_slot *s);
/* Propose g drafts (a tree: g levels) with the slot's own drafter (after sp_slot_wake_drafter), when
 * they are not proposed in a batch; returns the drafts (tree nodes) proposed, or -1 with err. */
int sp_slot_propose(srv_slot *s, int g, sp_err *err);

/* A step in three calls. sp_slot_plan: a decoding slot (a slot whose prompt is all in starts decoding
 * here, its drafter dormant) tells how many drafts it could verify this step, *g_room (its G capped
 * by the context, max_new and max_rows - 1; 0 for a plain request); returns 1 when it decodes this
 * step, 0 when not (prefilling, done, or no room), -1 with err. Then the caller proposes up to
 * g <= *g_room drafts with the slot's drafter (after sp_slot_wake_drafter) into sp_slot_draft_buf / sp_slot_q_buf (q only for sampled
 * requests with a q-providing drafter, else NULL), or none, and sp_slot_prepare fills *seq with its
 * rows: a prompt chunk (at most max_rows rows) while prefilling, else [pending, the nd drafts] (nd is
 * ignored after sp_slot_propose: the round holds its proposal).
 * logits: where its [T, V] logits go. Greedy output does not depend on nd; a sampled request with a
 * seed must be given its full *g_room proposal each step so that its seed reproduces whatever the
 * load (sp_slot_length_free).
 * sp_slot_prepare returns the row count, 0 when nothing to add, -1 with err. */
int sp_slot_plan(srv_slot *s, int max_rows, int *g_room, sp_err *err);
/* 1 when the step may choose the slot's draft count (greedy chains, and sampled chains of requests
 * that gave no seed); 0 when it must give the full room (token trees, and a sampled request with a
 * seed, so that its seed reproduces its output whatever the load: which uniforms decide a position
 * depends on whether the position was drafted). */
int sp_slot_length_free(const srv_slot *s);
/* The slot's drafter: NULL until it is built (by sp_slot_wake_drafter) and for plain requests. */
sp_drafter *sp_slot_drafter(const srv_slot *s);
/* 1 for a request with a drafter source (built or not). */
int sp_slot_is_speculative(const srv_slot *s);
/* 1 while a speculative slot's drafter is dormant: not built, not begun. */
int sp_slot_drafter_dormant(const srv_slot *s);
/* Before the slot's drafter is asked to propose this step (a speculative slot only): a dormant one is
 * built and begun on the prompt and every token since; a built one is told, by extend(), the rounds
 * since it last proposed. Rounds that ask for no drafts cost the drafter nothing: their rows are held
 * in the slot. 0, or -1 with err. */
int sp_slot_wake_drafter(srv_slot *s, sp_err *err);
/* The context rows a dormant drafter would be begun on (0 when begun or none); the tokens the
 * request may still emit. */
int sp_slot_wake_rows(const srv_slot *s);
int sp_slot_tokens_left(const srv_slot *s);
int32_t *sp_slot_draft_buf(srv_slot *s); /* [G] */
float *sp_slot_q_buf(srv_slot *s);       /* [G, V] or NULL */
int sp_slot_prepare(srv_slot *s, int max_rows, float *logits, int nd, sp_forward_seq *seq, sp_err *err);
/* This request's verify history: offered[k] rounds verified at least k drafts, reached[k] of them
 * accepted at least k (k = 1 .. SP_SPEC_MAX_G; index 0 unused). */
void sp_slot_accept_counts(const srv_slot *s, const long **offered, const long **reached);
/* The last decode round: positions verified (a chain's drafts, a tree's depth) and drafts accepted. */
void sp_slot_last_round(const srv_slot *s, int *nd, int *acc);
/* Count a prepared decoding round of a speculative request that verifies no drafts, for `why`. */
void sp_slot_count_nodraft(srv_slot *s, slot_nodraft why);
/* After the forward: verify, trim, commit, emit. The tokens kept by this step are in *out
 * (valid until the next call), their count returned; -1 with err. */
int sp_slot_finish(srv_slot *s, const slot_token **out, sp_err *err);
/* Mark the request done after the caller consumed only the first `kept` tokens of the last step
 * (a stop string matched): the rest are dropped from the statistics. */
void sp_slot_stop(srv_slot *s, int kept);

sp_stop_reason sp_slot_stop_reason(const srv_slot *s);
const slot_stats *sp_slot_get_stats(const srv_slot *s);
/* KV positions in use and the capacity (for the cache-use metric) */
int sp_slot_kv_used(const srv_slot *s);
int sp_slot_kv_capacity(const srv_slot *s);

#endif
