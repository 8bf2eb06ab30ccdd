/* export_drafter.h — a drafter checkpoint and its target → the GGUF llama.cpp runs as a
 * speculative drafter (docs/EXPORT.md: keys, tensor names, shapes and types per kind).
 *
 * One entry per drafter kind (the kind is told by the table of kinds, src/api/drafter_kinds.c,
 * from the drafter's config.json):
 *   dflash: DFlashDraftModel (z-lab DFlash)             → arch "dflash", no Markov tensors
 *   dspark: Qwen3DSparkModel (DeepSpec DSpark / DFlash) → arch "dflash" (+ markov_w1/w2, conf_proj)
 *           Gemma4DSparkModel (DeepSpec Gemma-4 DSpark) → arch "dflash" with Gemma's block keys
 *   assistant: Gemma4AssistantForCausalLM               → arch "gemma4-assistant"
 *   eagle3: LlamaForCausalLMEagle3 (SpecForge)          → arch "eagle3" (DeepSpec EAGLE-3 is an error)
 * The tokenizer block comes from the target (llama.cpp sizes the drafter's vocabulary from its
 * token list), so the target directory needs tokenizer.json, or opts->tokenizer_gguf.
 * What llama.cpp cannot run as written (gated / rnn Markov heads, a confidence head without the
 * Markov code, sliding draft layers, reduced vocabularies, a drafter for another target) is an
 * error naming the field or tensor; nothing is exported then. */
#ifndef SPECULA_EXPORT_DRAFTER_H
#define SPECULA_EXPORT_DRAFTER_H

#include <stddef.h>

#include "export_gguf.h"

/* Read the drafter of that kind in dir and the target in target_dir (config.json + tokenizer) and
 * write out_path atomically. o: weight type, tokenizer source and general.name as for sp_export_gguf. */
int sp_export_dflash_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                          sp_err *err);
int sp_export_dspark_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                          sp_err *err);
int sp_export_assistant_gguf(const char *dir, const char *target_dir, const char *out_path,
                             const export_gguf_opts *o, sp_err *err);
int sp_export_eagle3_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                          sp_err *err);

/* llama.cpp's name for a drafter tensor (HF name as stored, "model." prefix or not); block_arch
 * names the decoder block (qwen3 / gemma4) for the per-layer names. Returns a static string or
 * buf, or NULL when the name has no GGUF counterpart. */
const char *sp_export_drafter_tensor_name(sp_arch block_arch, const char *hf, char *buf, size_t cap);

#endif
