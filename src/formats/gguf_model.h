/* gguf_model.h — what a GGUF model file says about the model (docs/GGUF.md): its metadata
 * turned into an sp_config, and the ggml tensor types specula can compute with.
 * Not here: tensor binding (src/model/load.c), the tokenizer (src/tokenizer/tokgguf.c). */
#ifndef SPECULA_GGUF_MODEL_H
#define SPECULA_GGUF_MODEL_H

#include "gguf.h"
#include "specula.h"

/* Fill cfg from f's `general.architecture` (llama | qwen3 | gemma4), `{arch}.*` keys and the
 * shapes / presence of a few tensors (token_embd rows = vocabulary; Gemma-4: which layers carry
 * attn_v, per_layer_token_embd rows; rope_freqs.weight for llama3 / proportional RoPE).
 * An unknown architecture, a missing required key, a key of the wrong type or a value specula
 * cannot run is an error naming the file and key. cfg->tensor_prefix is left empty. */
int sp_config_from_gguf(sp_config *cfg, const gguf_file *f, sp_err *err);

/* sp_dtype of a ggml tensor type specula computes with, or SP_DT_UNKNOWN */
sp_dtype sp_gguf_ggml_to_dtype(uint32_t ggml_type);

#endif
