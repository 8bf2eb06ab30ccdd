/* gguf_quantize.h — `specula quantize`: a model (Hugging Face directory or GGUF file) → a GGUF
 * file with quantized weights that both specula and llama.cpp load.
 *
 * Which tensor gets which type is llama.cpp's rule for the same file type (docs/QUANTIZE.md):
 * norms, 1-D tensors and per_layer_model_proj keep their type; the LM head (or the embedding
 * tables when the head is tied) gets Q6_K unless the mix is Q8_0 (or not quantized); the _S / _M /
 * _L mixes and Q2_K, IQ4_NL, IQ4_XS give attn_v, attn_output and ffn_down more bits by layer (for
 * q4_k_m and q5_k_m: Q6_K on attn_v and ffn_down of the first and last eighth of the layers and
 * every third layer between); the rest gets the mix's type. Rows are dequantized to f32 and requantized by the quant kernels'
 * reference quantizers (src/kernels/quant.h). The output is written crash-safely (temp name,
 * fsync, rename); a directory input is exported to a temporary GGUF first (export_gguf.h). */
#ifndef SPECULA_GGUF_QUANTIZE_H
#define SPECULA_GGUF_QUANTIZE_H

#include "../core/core.h"
#include "gguf_write.h"

/* GGUF_MIX_F32 dequantizes every tensor to f32 (the exact twin of a quantized file); F16 and
 * BF16 convert every weight matrix (llama.cpp's MOSTLY_F16 / MOSTLY_BF16) */
typedef enum {
    GGUF_MIX_Q8_0 = 0,
    GGUF_MIX_Q4_0,
    GGUF_MIX_Q4_K_M,
    GGUF_MIX_Q6_K,
    GGUF_MIX_F32,
    GGUF_MIX_Q2_K,
    GGUF_MIX_Q3_K_S,
    GGUF_MIX_Q3_K_M,
    GGUF_MIX_Q3_K_L,
    GGUF_MIX_Q4_K_S,
    GGUF_MIX_Q5_K_S,
    GGUF_MIX_Q5_K_M,
    GGUF_MIX_Q5_0,
    GGUF_MIX_Q5_1,
    GGUF_MIX_IQ4_NL,
    GGUF_MIX_IQ4_XS,
    GGUF_MIX_F16,
    GGUF_MIX_BF16,
    GGUF_MIX_COUNT
} gguf_mix;

typedef struct {
    gguf_mix mix;
    int n_threads; /* <= 0: all cores */
    int progress;  /* 1: progress bar on stderr */
} gguf_quantize_opts;

/* llama-quantize's type names, any case: "Q4_K_M", "q5_k_s", "IQ4_XS", "F16", ... (and its
 * aliases Q3_K, Q4_K, Q5_K for the _M mixes) → mix; -1 when unknown */
int sp_gguf_mix_parse(const char *s, gguf_mix *out);
const char *sp_gguf_mix_name(gguf_mix m);

/* the accepted names, for messages: "Q2_K, Q3_K_S, ..." */
const char *sp_gguf_mix_names(void);

/* The type llama.cpp's rule gives one tensor. src_type: its type in the input; n_dims: its
 * dims; ne0: its row length; tied: the file has no output.weight; i_attn_v / n_attn_v: this
 * attn_v's index among the file's attn_v tensors and their count; i_ffn_down / n_layers: likewise
 * for ffn_down and the block count; n_gqa: attention heads per KV head (0 when unknown). */
ggml_type sp_gguf_mix_tensor_type(gguf_mix mix, const char *name, int n_dims, int64_t ne0, ggml_type src_type, int tied,
                               int i_attn_v, int n_attn_v, int i_ffn_down, int n_layers, int n_gqa);

/* Quantize in_path (a model directory or a GGUF file) into out_path. */
int sp_gguf_quantize(const char *in_path, const char *out_path, const gguf_quantize_opts *o, sp_err *err);

#endif
