/* export_gguf_internal.h — pieces of the GGUF exporter shared between its two files. */
#ifndef SPECULA_EXPORT_GGUF_INTERNAL_H
#define SPECULA_EXPORT_GGUF_INTERNAL_H

#include "export_gguf.h"
#include "safetensors.h"

/* One exported tensor: where its rows come from and how they are converted. */
typedef struct {
    const st_tensor *src;
    ggml_type type;
    int64_t row;       /* elements per row (ne[0]) */
    int perm_head_dim; /* > 0: Llama Q/K row permutation with this head dim */
    const st_tensor *const *experts; /* non-NULL: a stacked MoE tensor, row r from experts[r / rows] */
    int64_t rows;      /* rows per expert */
} export_tensor_src;

/* gguf_fill_fn over an export_tensor_src: rows converted to t->type (and permuted) */
int sp_export_fill_tensor(void *ctx, void *dst, size_t offset, size_t n, sp_err *err);

/* The architecture keys of a llama / qwen3 / gemma4 decoder stack (docs/GGUF.md)
 * under key prefix A ("llama", "gemma4", "gemma4-assistant", ...). */
int sp_export_arch_keys(gguf_writer *w, const char *A, const sp_config *c, sp_err *err);

/* one UINT32 when every layer agrees, else an INT32 array of length L */
int sp_export_set_per_layer(gguf_writer *w, const char *key, const int32_t *v, int L, sp_err *err);

/* general.file_type from the counts of 2-D weights stored F32, F16, BF16 (llama_ftype) */
uint32_t sp_export_file_type(const int n_2d_types[3]);

/* Gemma-4 proportional RoPE as llama.cpp's divisors: out[Dg/2] = factor for the rotated pairs,
 * 1e30 (no rotation) for the rest. */
void sp_export_proportional_rope_freqs(const sp_rope_params *rp, int Dg, float *out);

/* Write the tokenizer.* keys (docs/GGUF-FORMAT.md §6) for a model directory: from o->tokenizer_gguf
 * when given, else from DIR/tokenizer.json (+ tokenizer_config.json, chat_template.jinja);
 * with neither, an error unless o->no_tokenizer. The token list always has exactly
 * cfg->vocab_size entries (holes and the tail padded with [PAD{i}], type UNUSED). */
int sp_export_tokenizer_keys(gguf_writer *w, const sp_config *cfg, const char *dir, const export_gguf_opts *o,
                          sp_err *err);

#endif
