/* assistant.h — the Gemma-4 assistant drafter (`gemma4_assistant`, and
 * `gemma4_unified_assistant` of the 12B, docs/ASSISTANT.md, docs/GEMMA4-UNIFIED.md): a few Q-only
 * decoder layers that attend to the target's own KV cache, seeded each round with the target's
 * final hidden state.
 *
 * Output head by tensor presence, not config: the centroid head when the checkpoint has
 * masked_embedding.centroids.weight (score the centroids, keep the top-k clusters, score only
 * their tokens), else the tied embedding over the full vocabulary (released 26B/31B assistants
 * declare num_centroids but ship no centroid tensors). */
#ifndef SPECULA_DRAFTERS_ASSISTANT_H
#define SPECULA_DRAFTERS_ASSISTANT_H

#include "sample/sample.h"
#include "decode/drafter.h"

/* Load the assistant in dir (config.json + safetensors) for `target` (borrowed: it must outlive
 * the drafter, and requests must use it). Width, vocabulary, head-count, head-dim and window
 * mismatches with the target's borrowed layers are errors here. sample: the params drafts are
 * drawn with (greedy → argmax and no q; otherwise q is the head's masked distribution over the
 * full vocabulary, processed with these params). Returns NULL with err on failure. */
sp_drafter *sp_drafter_assistant(const char *dir, sp_model *target, const sp_sample_params *sample, sp_err *err);

/* ---- inspection and test hooks (d must come from sp_drafter_assistant) ------------------- */
/* *width = the assistant width d_a; *centroid = 1 when the centroid head is in use; *n_cand = the
 * candidate count of the centroid head (top-k clusters × tokens per cluster), else V. */
void sp_assistant_info(const sp_drafter *d, int *width, int *centroid, int *n_cand);
/* The greedy draft token for a post-norm assistant state h[d_a] — the fast path: for the centroid
 * head only the candidate tokens are scored. */
int sp_assistant_head_argmax(sp_drafter *d, const float *h);
/* The head's full-vocabulary logits for h[d_a], computed densely (reference path): tied head:
 * h·Eᵀ; centroid head: h·Eᵀ with every token outside the top-k clusters set to
 * (min over the kept tokens) − 1, as HF does (docs/ASSISTANT.md §3). */
int sp_assistant_head_dense(sp_drafter *d, const float *h, float *logits); /* 0, or -1 out of memory */

#endif
