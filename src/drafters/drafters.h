/* drafters.h — constructors of the drafters that plug into the speculative loop (decode/drafter.h).
 * Each returns a drafter the caller owns (release with sp_drafter_free), or NULL with err. */
#ifndef SPECULA_DRAFTERS_H
#define SPECULA_DRAFTERS_H

#include "sample/sample.h"
#include "decode/drafter.h"

/* N-gram / prompt lookup: the most recent earlier occurrence of the longest suffix of the
 * committed stream (n from n_max down to n_min tokens) proposes the tokens that followed it.
 * No model, no q (one-hot). */
sp_drafter *sp_drafter_ngram(int n_min, int n_max, sp_err *err);

/* Draft model: a smaller model with the same vocabulary, run autoregressively with its own KV
 * cache (max_ctx positions). draft is borrowed (the caller frees it after the drafter).
 * sample: the params drafts are sampled with (greedy → argmax; the engine's params for lossless
 * sampling, which need q). A vocabulary mismatch with `target` (size, or differing tokenizer.json
 * files when both directories have one) is an error here, before any generation. */
sp_drafter *sp_drafter_draft_model(sp_model *draft, const sp_model *target, const char *draft_dir,
                                   const char *target_dir, int max_ctx, const sp_sample_params *sample, sp_err *err);

#endif
