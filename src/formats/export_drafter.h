/* export_drafter.h — a drafter checkpoint and its target → the GGUF llama.cpp runs as a
 * speculative drafter (docs/EXPORT.md: keys, tensor names, shapes and types per kind).
 *
 * Kinds, by architectures[0] of the drafter's config.json:
 *   DFlashDraftModel (z-lab DFlash)             → arch "dflash", no Markov tensors
 *   Qwen3DSparkModel (DeepSpec DSpark / DFlash) → arch "dflash" (+ markov_w1/w2, conf_proj)
 *   Gemma4DSparkModel (DeepSpec Gemma-4 DSpark) → arch "dflash" with Gemma's block keys
 *   Gemma4AssistantForCausalLM                  → arch "gemma4-assistant"
 * The tokenizer block comes from the target (llama.cpp sizes the drafter's vocabulary from its
 * token list), so the target directory needs tokenizer.json, or opts->tokenizer_gguf.
 * What llama.cpp cannot run as written (gated / rnn Markov heads, a confidence head without the
 * Markov code, sliding draft layers, reduced vocabularies, a drafter for another target) is an
 * error naming the field or tensor; nothing is exported then. */
#ifndef SPECULA_EXPORT_DRAFTER_H
#define SPECULA_EXPORT_DRAFTER_H

#include <stddef.h>

#include "export_gguf.h"

/* Read the drafter in dir and the target in target_dir (config.json + tokenizer) and write
 * out_path atomically. o: weight type, tokenizer source and general.name as for sp_export_gguf. */
int sp_export_drafter_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                        sp_err *err);

/* llama.cpp's name for a drafter tensor (HF name as stored, "model." prefix or not); block_arch
 * names the decoder block (qwen3 / gemma4) for the per-layer names. Returns a static string or
 * buf, or NULL when the name has no GGUF counterpart. */
const char *sp_export_drafter_tensor_name(sp_arch block_arch, const char *hf, char *buf, size_t cap);

#endif
