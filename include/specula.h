/* specula.h — the public C API of libspecula.
 *
 * Ownership: every *_load / *_create returns an object the caller owns and releases with
 * the matching *_free. Functions returning int return 0 on success and -1 on failure with
 * a one-line message in the caller's sp_err (which may be NULL). Nothing in the library
 * prints to stdout or exits. */
#ifndef SPECULA_H
#define SPECULA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char msg[1024];
} sp_err;

typedef enum {
    SP_DT_F32 = 0,
    SP_DT_F16,
    SP_DT_BF16,
    SP_DT_I64,
    SP_DT_I32,
    SP_DT_U8,
    SP_DT_BOOL,
    SP_DT_I8,
    SP_DT_I16,
    SP_DT_U16,
    SP_DT_U32,
    SP_DT_U64,
    SP_DT_F64,
    SP_DT_UNKNOWN
} sp_dtype;

/* ---- model configuration (from config.json; FORMATS.md §4–5) ------------------------ */
typedef enum { SP_ARCH_LLAMA = 0, SP_ARCH_QWEN3, SP_ARCH_GEMMA4 } sp_arch;
typedef enum { SP_ROPE_DEFAULT = 0, SP_ROPE_LLAMA3, SP_ROPE_PROPORTIONAL } sp_rope_type;
typedef enum { SP_ACT_SILU = 0, SP_ACT_GELU_TANH } sp_act;

typedef struct {
    sp_rope_type type;
    double theta;
    double factor;                /* llama3 / proportional divisor (1 = none) */
    double low_freq_factor;       /* llama3 */
    double high_freq_factor;      /* llama3 */
    double original_max_pos;      /* llama3 */
    double partial_rotary_factor; /* proportional (1 = all) */
} sp_rope_params;

#define SP_MAX_LAYERS 256
/* config.json bounds (sp_config_parse): every dimension and heads × head_dim at most
 * SP_CONFIG_MAX_DIM, vocabularies at most SP_CONFIG_MAX_VOCAB */
#define SP_CONFIG_MAX_DIM (1 << 20)
#define SP_CONFIG_MAX_VOCAB (1 << 24)
#define SP_MAX_EOS 8

typedef struct {
    int sliding;     /* 1: sliding-window attention layer */
    int head_dim;    /* D of this layer */
    int n_kv_heads;  /* KV heads of this layer */
    int ffn_dim;     /* MLP width of this layer */
    int has_v_proj;  /* 0 on Gemma-4 k_eq_v full layers: V = raw K */
    int kv_source;   /* layer whose K/V cache this layer reads (itself unless KV-shared) */
} sp_layer_config;

typedef struct {
    sp_arch arch;
    int vocab_size, hidden_size, n_layers, n_heads;
    int n_kv_heads, head_dim, ffn_dim; /* base values (sliding / all layers) */
    int global_head_dim, n_global_kv_heads, attention_k_eq_v; /* Gemma-4 full layers */
    double rms_eps;
    int tie_embeddings;
    int max_pos;
    int qk_norm;            /* qwen3, gemma4 */
    sp_act act;
    sp_rope_params rope;    /* full / global layers (all layers for llama, qwen3) */
    sp_rope_params rope_swa; /* sliding layers (gemma4) */
    int sliding_window;     /* 0 = none */
    double final_softcap;   /* 0 = none */
    int ple_dim, ple_vocab; /* Gemma-4 per-layer inputs; ple_dim 0 = none */
    int n_kv_shared;
    int double_wide_mlp;
    int bos_id, pad_id;
    int eos_ids[SP_MAX_EOS];
    int n_eos;
    char tensor_prefix[64]; /* "model." or "model.language_model." */
    char torch_dtype[16];   /* as declared, informative */
    sp_layer_config layers[SP_MAX_LAYERS];
} sp_config;

/* Parse a Hugging Face config.json (llama, qwen3, gemma4 / gemma4_text). */
int sp_config_load(sp_config *cfg, const char *config_json_path, sp_err *err);
int sp_config_parse(sp_config *cfg, const char *json_text, const char *what, sp_err *err);
const char *sp_arch_name(sp_arch a);

/* ---- target model ------------------------------------------------------------------- */
typedef struct sp_model sp_model;
typedef struct sp_kv sp_kv;

/* Load a model directory (config.json + model.safetensors or a sharded index).
 * n_threads <= 0 means all cores. Weights are mmapped read-only. */
int sp_model_load(sp_model **out, const char *dir, int n_threads, sp_err *err);
void sp_model_free(sp_model *m);
const sp_config *sp_model_config(const sp_model *m);
int sp_model_threads(const sp_model *m);
/* bytes of weights streamed per decoded token (all matmul weights + LM head) */
size_t sp_model_weight_bytes(const sp_model *m);

/* KV cache for one sequence. max_ctx: longest sequence; max_batch: most tokens in one
 * forward (bounds trim across a sliding-window ring wrap: trim(n) works for n <= max_batch). */
sp_kv *sp_kv_create(const sp_model *m, int max_ctx, int max_batch, sp_err *err);
void sp_kv_free(sp_kv *kv);
int sp_kv_len(const sp_kv *kv);
/* Remove the newest n entries of every layer (rollback of rejected drafts). */
int sp_kv_trim(sp_kv *kv, int n, sp_err *err);
void sp_kv_clear(sp_kv *kv);

/* What a forward over T tokens returns. Any output pointer may be NULL. */
typedef struct {
    float *logits;      /* [T, V] logits of every position, or NULL */
    float *last_logits; /* [V] logits of the last position only, or NULL */
    float *hidden;      /* [T, H] final post-norm hidden */
    const int *tap_layers; /* layer indices to capture (outputs of decoder layer l) */
    int n_taps;
    float *taps;        /* [T, n_taps*H] */
} sp_forward_out;

/* Forward tokens[0..T) at positions kv_len .. kv_len+T-1, appending to the cache.
 * Per-position results are bit-identical to T single-token forwards. */
int sp_model_forward(sp_model *m, sp_kv *kv, const int32_t *tokens, int T, sp_forward_out *out,
                     sp_err *err);
/* logits[T, V] from post-norm hidden states [T, H] through the LM head (+ softcap). */
void sp_model_logits(sp_model *m, float *logits, const float *hidden, int T);
/* The input embedding row of a token, scaled as the model does (Gemma: · sqrt(H)). */
void sp_model_embed(const sp_model *m, float *out, int32_t token);

#ifdef __cplusplus
}
#endif
#endif
