/* export_gguf.h — convert a Hugging Face checkpoint directory to a GGUF file llama.cpp runs.
 *
 * Implements docs/GGUF-FORMAT.md §4 (keys, tensor names, weight rewrites for llama / qwen3 /
 * gemma4) and docs/GGUF-FORMAT.md §8 (exporter checklist): integer keys UINT32, floats FLOAT32, per-layer
 * lists INT32 arrays, the Gemma-4 sliding pattern a BOOL array; Llama Q/K rows permuted to
 * llama.cpp's adjacent-pair RoPE; `rope_freqs.weight` synthesized for llama3 scaling and for
 * Gemma-4 proportional RoPE; 1-D tensors stored F32; `output.weight` only when untied.
 * Tensors are streamed one chunk at a time from the mmapped safetensors.
 *
 * Tokenizer metadata (docs/GGUF-FORMAT.md §6) comes from DIR/tokenizer.json (+ tokenizer_config.json), or
 * is copied verbatim (every `tokenizer.*` key) from another GGUF given as tokenizer_gguf.
 * Without either, export fails unless no_tokenizer is set (llama.cpp cannot load such a
 * file; it is still useful to inspect weights). */
#ifndef SPECULA_EXPORT_GGUF_H
#define SPECULA_EXPORT_GGUF_H

#include "../core/core.h"
#include "gguf_write.h"

typedef struct {
    int weight_type;            /* ggml type of 2-D weights: GGML_TYPE_F32/F16/BF16, or -1 = as stored
                                   (F32 stays F32, BF16 stays BF16, F16 stays F16) */
    int no_tokenizer;           /* 1: write without tokenizer keys when DIR has no tokenizer.json */
    const char *tokenizer_gguf; /* copy tokenizer.* keys from this GGUF instead of tokenizer.json */
    const char *name;           /* general.name; NULL = the directory's base name */
    int in_place;               /* 1: write out_path itself (a scratch file), no temp name + rename */
    int tok_adds_known;         /* 1: tok_add_bos / tok_add_eos say what the source tokenizer adds to raw
                                   text (its post-processor, as specula encodes); 0: from
                                   tokenizer_config.json, else the architecture's default */
    int tok_add_bos, tok_add_eos;
} export_gguf_opts;

/* Read DIR (config.json + safetensors) and write out_path atomically. */
int sp_export_gguf(const char *dir, const char *out_path, const export_gguf_opts *o, sp_err *err);

/* The rope_freqs.weight divisor of a pair that does not rotate (Gemma-4's proportional RoPE, as
 * llama.cpp's converter writes it); a reader takes any divisor from ROPE_FREQ_OFF_MIN up as off. */
#define GGUF_ROPE_FREQ_OFF 1e30f
#define GGUF_ROPE_FREQ_OFF_MIN 1e20f

/* llama3 rope scaling as llama.cpp's per-frequency divisors (docs/GGUF-FORMAT.md §5): out[D/2]. */
void sp_export_llama3_rope_freqs(const sp_rope_params *rp, int head_dim, float *out);

/* HF row of the row that lands at GGUF row r under the Llama Q/K permutation (docs/GGUF-FORMAT.md §5):
 * GGUF row h·D + 2j + s holds HF row h·D + s·D/2 + j. */
int64_t sp_export_llama_qk_src_row(int64_t r, int head_dim);

#endif
