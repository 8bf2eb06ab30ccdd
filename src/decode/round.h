/* round.h — one speculative round in explicit phases, the one acceptance code of the engine: the
 * CLI's loop (sp_spec_generate, spec.c) and the server's slots (src/server/slot.c) both step it.
 *
 *     sp_round_begin      the pending token and the rows the cache has room for this round
 *     sp_round_plan       (a helper) the drafts a round may verify: G capped by the context and max_new
 *     sp_round_propose    the drafter proposes k drafts (a chain) or a tree of k levels; or the
 *                         caller proposed them itself into sp_round_draft_buf / sp_round_q_buf (the
 *                         server's batched proposal) and tells the count with sp_round_set_drafts
 *     sp_round_rows       the rows to forward: [pending, drafts] (a tree: with parent rows); the
 *                         caller forwards them (sp_model_forward / _tree, or inside its one
 *                         sp_model_forward_batch)
 *     sp_round_accept     decide on the logits: greedy longest prefix / tree walk, sampling min(1, p/q)
 *                         with the residual (sp_spec_verify_one, sp_tree_verify_node), penalties
 *                         pushed per draft and popped; then the cache trimmed (chain) or the
 *                         accepted path kept (tree)
 *     sp_round_emit       the accepted drafts and the target's token, pushed onto the penalty
 *                         sequence, each offered to the caller's stop test
 *     sp_round_commit     the drafter told what was committed (or, with hold_plain, a round that asked
 *                         for no drafts held for the drafter's extend)
 *
 * The verification rule, the RNG streams and counters and the penalty semantics are those spec.h
 * describes; a request's tokens do not depend on who steps the round. Not thread-safe. */
#ifndef SPECULA_ROUND_H
#define SPECULA_ROUND_H

#include "decode/drafter.h"
#include "decode/spec.h"
#include "decode/tree.h"
#include "sample/grammar.h"
#include "sample/penalty.h"
#include "sample/sample.h"

typedef struct {
    sp_sample_params sample;   /* the request's sampling (temperature 0: greedy) */
    sp_penalty_params penalty; /* repetition penalties (inactive: none) */
    int draft_max;             /* G: most drafts (levels of a tree) per round, 0 .. SP_SPEC_MAX_G */
    int draft_min;             /* fewer proposed drafts than this: none verified */
    sp_tree_shape tree;        /* tree.nodes > 0: token trees (max_depth is set to draft_max) */
    int n_taps;                /* target rows the drafter takes: taps of tap_layers[0 .. n_taps) */
    const int *tap_layers;     /* borrowed */
    int wants_hidden;          /* and the final hidden rows */
    int own_logits;            /* 1: the round holds the logits rows (else the caller gives them to sp_round_rows) */
    int hold_plain;            /* 1: rounds that asked for no drafts are held for the drafter's extend() */
    int want_alpha;            /* 1: sampling chains fill alpha (the adaptive policy's Σ min(p, q)) */
    int broken_residual;       /* the audit's test hook (spec.h) */
    void (*on_verify)(void *ctx, int i, const float *p, int V); /* spec.h; NULL: none */
    void *on_verify_ctx;
    /* A grammar the output follows (NULL: none; both borrowed). Each verified row's logits and each
     * draft's q are masked to the tokens the grammar allows there, so greedy speculative output is
     * plain constrained output and sampled output has the constrained target distribution; a draft
     * the grammar forbids ends the block; where exactly one token is allowed it is drafted without
     * asking the drafter. Token trees are turned off under a grammar (chains only). */
    const sp_grammar *grammar;
    const sp_gvocab *gvocab;
    /* NULL, or synthetic acceptance (spec.h; borrowed; benchmarks only, not lossless): a chain's
     * drafts are accepted by chance instead of by the target; chains only */
    const sp_synth *synth;
} sp_round_params;

/* What the last round did. */
typedef struct {
    int k;                       /* drafts (tree: levels) asked of the drafter; 0: a plain step */
    int tree;                    /* 1: the drafts form a tree */
    int nd;                      /* drafts verified (a tree: its nodes) */
    int depth;                   /* positions verified (a chain: nd; a tree: its depth) */
    int acc;                     /* drafts accepted */
    int32_t next;                /* the target's token after them (the new pending token) */
    int n_alpha;                 /* sampling chains with want_alpha: rows in alpha */
    double alpha[SP_SPEC_MAX_G]; /* Σ min(p, q) of each verified row */
    double hold_ms;              /* the held rows' extend() before the proposal */
    double draft_ms;             /* the drafter's propose and commit */
    int stopped;                 /* sp_round_emit: the caller's stop test ended the request */
    int forced;                  /* drafts the grammar forced (drafted without the drafter) */
    int cut;                     /* drafts dropped because the grammar forbids them */
    /* sp_round_emit: the tokens emitted by source, summing to its count: accepted drafts the
     * grammar forced, accepted drafts of the drafter, and tokens the target chose (the token after
     * the accepted drafts) */
    int from_forced, from_drafter, from_target;
} sp_round_result;

typedef struct sp_round sp_round;

/* A round over target m and its cache kv (both borrowed) for one request's params. The drafter is
 * set apart (sp_round_set_drafter): the server builds it later. NULL with err. */
sp_round *sp_round_create(sp_model *m, sp_kv *kv, const sp_round_params *p, sp_err *err);
void sp_round_free(sp_round *r);
/* The request's drafter (borrowed; NULL: plain). It must take the rows of the params (n_taps,
 * wants_hidden), and propose trees when the params ask for them. 0, or -1 with err. */
int sp_round_set_drafter(sp_round *r, sp_drafter *d, sp_err *err);
/* The penalty sequence (NULL without penalties): for the drafter's begin (sp_drafter_ctx). */
sp_penalty *sp_round_penalty(sp_round *r);
/* Append committed tokens (the prompt) to the penalty sequence (nothing without penalties). */
int sp_round_push(sp_round *r, const int32_t *tok, int n, sp_err *err);

/* The drafts a round after position pos may verify: G capped by the cache (max_ctx positions: the
 * block [pending, drafts] must fit) and by the tokens left (drafts beyond the last are waste); -1
 * when not even the pending token fits. */
int sp_round_plan(const sp_round *r, int pos, int max_ctx, int tokens_left);

/* Start a round: `pending` is the token after the cache; room: most rows after it the cache (and
 * the caller's batch) has room for. The result is cleared. */
void sp_round_begin(sp_round *r, int32_t pending, int room);
/* Ask the drafter for k drafts (a tree: k levels, at most tree.nodes and room nodes); k = 0: none.
 * Under a grammar the tokens it forces from the pending token on (one token allowed at a time) are
 * the drafts instead, without a drafter call: up to k, or with k = 0 up to draft_max (room caps
 * both). The forced tokens are looked for once per round: a second call (the server looks at plan
 * time with k = 0, then asks its drafter) goes straight to the drafter when none was forced, and
 * does nothing after a forced proposal. Rounds held for extend() are told to the drafter first. 0,
 * or -1 with err. */
int sp_round_propose(sp_round *r, int k, sp_err *err);
/* Chains proposed by the caller: drafts in sp_round_draft_buf ([G]) and, sampling with a
 * q-providing drafter, q rows in sp_round_q_buf ([G, V], else NULL). k asked, nd proposed. */
int32_t *sp_round_draft_buf(sp_round *r);
float *sp_round_q_buf(sp_round *r);
int sp_round_set_drafts(sp_round *r, int k, int nd, sp_err *err);
/* The rows to forward, into *seq (with *out, which must outlive the forward): logits go to `logits`
 * ([rows, V]; NULL: the round's own), taps / hidden to the given rows or, NULL, to the round's.
 * Returns the row count. */
int sp_round_rows(sp_round *r, float *logits, float *taps, float *hidden, sp_forward_out *out, sp_forward_seq *seq);
/* After the forward: decide, then trim the cache to pending + the accepted drafts. 0, or -1. */
int sp_round_accept(sp_round *r, sp_err *err);
/* Emit the accepted drafts then the target's token: each is pushed onto the penalty sequence and
 * given to stop(ctx, tok, i), which returns 1 to end the request (res.stopped is then set). Returns
 * the tokens emitted, or -1 with err. */
int sp_round_emit(sp_round *r, int (*stop)(void *ctx, int32_t tok, int i), void *ctx, sp_err *err);
/* After sp_round_accept: the accepted drafts, [res.acc] (now in the cache after the pending token). */
const int32_t *sp_round_accepted(const sp_round *r);
/* The logits row that decided emitted token i (penalised when penalties are on), [V]. */
const float *sp_round_logits_row(const sp_round *r, int i);
/* Tell the drafter the round (a no-draft round with hold_plain: held for extend). 0, or -1. */
int sp_round_commit(sp_round *r, sp_err *err);
const sp_round_result *sp_round_get_result(const sp_round *r);

#endif
