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

#define SPECULA_VERSION "0.3.0" /* the library's version; sp_version() returns it */

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
    /* block-quantized weights with llama.cpp's layouts (docs/QUANT.md): K = elements per
     * row must be a multiple of the block (32 for Q8_0 / Q4_0 / Q5_0, 256 for the K-quants) */
    SP_DT_Q8_0, /* 32 values in 34 bytes: f16 scale + 32 int8 */
    SP_DT_Q4_0, /* 32 values in 18 bytes: f16 scale + 32 nibbles */
    SP_DT_Q4_K, /* 256 values in 144 bytes: f16 scale and min, 8 × 6-bit sub-scales/mins, nibbles */
    SP_DT_Q6_K, /* 256 values in 210 bytes: 6-bit values, 16 int8 sub-scales, f16 scale */
    SP_DT_Q8_K, /* 256 values in 292 bytes: f32 scale, 256 int8, 16 int16 group sums (activations) */
    SP_DT_Q5_0, /* 32 values in 22 bytes: f16 scale, 32 fifth bits, 32 nibbles */
    SP_DT_Q5_K, /* 256 values in 176 bytes: Q4_K's scales and nibbles plus 32 bytes of fifth bits */
    SP_DT_Q3_K, /* 256 values in 110 bytes: high-bit mask, 2-bit values, 16 × 6-bit scales, f16 scale */
    SP_DT_Q2_K, /* 256 values in 84 bytes: 16 × 4-bit scales and mins, 2-bit values, f16 scale and min */
    SP_DT_Q5_1, /* 32 values in 24 bytes: f16 scale and min, 32 fifth bits, 32 nibbles */
    SP_DT_IQ4_NL, /* 32 values in 18 bytes: f16 scale, 32 nibbles indexing a fixed 16-value table */
    SP_DT_IQ4_XS, /* 256 values in 136 bytes: f16 scale, 8 × 6-bit scales, nibbles into IQ4_NL's table */
    SP_DT_Q4_1, /* 32 values in 20 bytes: f16 scale and min, 32 nibbles (value q·d + m) */
    SP_DT_QA8,  /* 32 values in 36 bytes: f16 scale and min, 32 uint8 (value q·d + m; MLX 8-bit, docs/MLX-QUANT.md) */
    SP_DT_UNKNOWN
} sp_dtype;

/* ---- model configuration (from config.json; docs/TRANSFORMER.md) ------------------------ */
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
#define SP_CONFIG_MAX_EXPERTS 1024 /* experts per MoE layer */
#define SP_MAX_EOS 8

typedef struct {
    int sliding;     /* 1: sliding-window attention layer */
    int head_dim;    /* D of this layer */
    int n_kv_heads;  /* KV heads of this layer */
    int ffn_dim;     /* MLP width of this layer */
    int has_v_proj;  /* 0 on Gemma-4 k_eq_v full layers: V = raw K */
    int kv_source;   /* layer whose K/V cache this layer reads (itself unless KV-shared) */
    int moe;         /* 1: a mixture-of-experts MLP (the config's n_experts, moe_ffn_dim), else dense */
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
    /* mixture of experts (qwen3_moe; n_experts 0 = dense): each MoE layer routes a token to the
     * top n_experts_used of n_experts SwiGLU experts of width moe_ffn_dim (docs/TRANSFORMER.md §5a) */
    int n_experts, n_experts_used, moe_ffn_dim;
    int norm_topk_prob;     /* renormalise the chosen experts' probabilities to sum 1 */
    int bos_id, pad_id;
    int eos_ids[SP_MAX_EOS];
    int n_eos;
    char tensor_prefix[64]; /* "model." or "model.language_model." */
    char torch_dtype[16];   /* as declared, informative */
    sp_layer_config layers[SP_MAX_LAYERS];
} sp_config;

/* Parse a Hugging Face config.json (llama, qwen3, qwen3_moe, gemma4 / gemma4_text). */
int sp_config_load(sp_config *cfg, const char *config_json_path, sp_err *err);
int sp_config_parse(sp_config *cfg, const char *json_text, const char *what, sp_err *err);
/* The invariants every loaded config satisfies (positive sizes, heads divisible by KV heads,
 * even head dims, ...); used by config sources other than config.json. */
int sp_config_check(sp_config *cfg, const char *what, sp_err *err);
const char *sp_arch_name(sp_arch a);

/* ---- target model ------------------------------------------------------------------- */
typedef struct sp_model sp_model;
typedef struct sp_kv sp_kv;

/* Load a model directory (config.json + model.safetensors or a sharded index).
 * n_threads <= 0 means all cores. Weights are mmapped read-only. */
int sp_model_load(sp_model **out, const char *dir, int n_threads, sp_err *err);
void sp_model_free(sp_model *m);
/* Validate path (a model directory or GGUF file) exactly as sp_model_load does (config, every
 * tensor present with its type and shape, no tensor left unbound) without keeping anything:
 * 0, or -1 with the same error sp_model_load gives. */
int sp_model_check(const char *path, sp_err *err);
const sp_config *sp_model_config(const sp_model *m);
int sp_model_threads(const sp_model *m);
/* bytes of weights streamed per decoded token (all matmul weights + LM head; of an MoE layer's
 * experts, the n_experts_used a token runs) */
size_t sp_model_weight_bytes(const sp_model *m);
/* The numerics of the model's bf16 matmuls: 0 (default) the f32 order, every activation kept
 * in f32; 1 the bf16-dot order, activations rounded to bf16 and products accumulated in pairs
 * as the AVX512_BF16 dot instruction does (docs/SIMD.md) — faster where the processor has it,
 * the same bits on every processor, different bits from mode 0. The mode covers every forward
 * of the model whatever its batch; drafters loaded after the call take the target's mode for
 * their own bf16 matrices. Call it before loading a drafter and before any forward. */
void sp_model_set_bf16_dot(sp_model *m, int on);
int sp_model_bf16_dot(const sp_model *m);

/* The element type of KV caches (llama.cpp's -ctk / -ctv names: f32, f16, bf16, q8_0). A cache
 * of a type other than f32 stores every K / V row rounded to it when the row is written, and
 * attention reads the rounded rows (dequantized per layer into an f32 view), so a row's value does
 * not depend on the batch that wrote it: batched == solo and prefill == steps still hold bit for bit.
 * q8_0 needs KV heads × head dim a multiple of 32 in every layer. */
typedef enum { SP_KV_F32 = 0, SP_KV_F16, SP_KV_BF16, SP_KV_Q8_0 } sp_kv_type;
const char *sp_kv_type_name(sp_kv_type t);
/* "f32" | "f16" | "bf16" | "q8_0" → *t; -1 with err naming the accepted values. */
int sp_kv_type_parse(const char *name, sp_kv_type *t, sp_err *err);
/* The types of the K and V caches that sp_kv_create makes for this model from now on (default f32);
 * -1 with err when the model's shapes do not allow one. */
int sp_model_set_kv_types(sp_model *m, sp_kv_type k, sp_kv_type v, sp_err *err);

/* KV cache for one sequence. max_ctx: longest sequence; max_batch: most tokens in one
 * forward (bounds trim across a sliding-window ring wrap: trim(n) works for n <= max_batch). */
sp_kv *sp_kv_create(const sp_model *m, int max_ctx, int max_batch, sp_err *err);
void sp_kv_free(sp_kv *kv);
int sp_kv_len(const sp_kv *kv);
/* Mixture-of-experts models: the mean number of distinct experts each MoE layer ran in the last
 * forward whose scratch was this cache (a verify block of k rows runs up to k × experts per token);
 * 0 for a dense model or before any forward. */
double sp_kv_moe_experts(const sp_kv *kv);
/* Remove the newest n entries of every layer (rollback of rejected drafts). */
int sp_kv_trim(sp_kv *kv, int n, sp_err *err);
void sp_kv_clear(sp_kv *kv);
/* After a tree forward of n_tree rows (sp_forward_seq.parent), keep rows[0..k) (increasing: a
 * root path of the tree) as the k positions after the prefix and drop the other rows: the cache
 * then holds prefix + k positions, exactly as if a chain over those tokens had been forwarded. */
int sp_kv_keep_rows(sp_kv *kv, int n_tree, const int32_t *rows, int k, sp_err *err);

/* What a forward over T tokens returns. Any output pointer may be NULL. */
typedef struct {
    float *logits;      /* [T, V] logits of every position, or NULL */
    float *last_logits; /* [V] logits of the last position only, or NULL */
    float *hidden;      /* [T, H] final post-norm hidden */
    const int *tap_layers; /* layer indices to capture (outputs of decoder layer l; n_layers: the
                            * final post-norm hidden) */
    int n_taps;
    float *taps;        /* [T, n_taps*H] */
} sp_forward_out;

/* Forward tokens[0..T) at positions kv_len .. kv_len+T-1, appending to the cache.
 * Per-position results are bit-identical to T single-token forwards. */
int sp_model_forward(sp_model *m, sp_kv *kv, const int32_t *tokens, int T, sp_forward_out *out,
                     sp_err *err);
/* Forward a token tree (docs/TREE.md): parent[t] < t is token t's parent, -1 for a token that
 * follows the cache directly. Token t sits at position kv_len + depth(t) and attends the cache and
 * its root path only; its results (logits, hidden, taps) are bit-identical to those of a chain
 * forward over its root path. T <= 256 (SP_TREE_MAX_ROWS). The cache then holds all T rows (row t
 * in the slot after the prefix + t); sp_kv_keep_rows keeps one root path. */
#define SP_TREE_MAX_ROWS 256
int sp_model_forward_tree(sp_model *m, sp_kv *kv, const int32_t *tokens, const int32_t *parent, int T,
                          sp_forward_out *out, sp_err *err);
/* One sequence's part of a batched forward: tokens[0..T) appended to kv, results in out. */
typedef struct {
    sp_kv *kv;
    const int32_t *tokens;
    int T;
    sp_forward_out *out;   /* may be NULL */
    const int32_t *parent; /* NULL: a chain; else the rows are a token tree, as sp_model_forward_tree
                              takes them (parent[t] < t, -1: follows the cache; T <= SP_TREE_MAX_ROWS) */
} sp_forward_seq;

/* Forward n sequences in one pass: every matmul and norm runs once over the rows of all of them
 * (sequence by sequence), attention runs per sequence on its own cache. Each sequence's results
 * are bit-identical to sp_model_forward on it alone. scratch: a cache of this model whose
 * max_batch >= Σ T (only its scratch buffers are used; it may be one of the sequences). When the
 * logits buffers of consecutive sequences follow one another in memory, the LM head runs once
 * over them. A sequence with parent rows is a token tree, attended with the tree mask, and gets
 * exactly the results of sp_model_forward_tree on it alone. Each kv must be distinct. Returns 0, or -1 with err (nothing is appended then). */
int sp_model_forward_batch(sp_model *m, sp_kv *scratch, const sp_forward_seq *seqs, int n, sp_err *err);
/* logits[T, V] from post-norm hidden states [T, H] through the LM head (+ softcap). */
void sp_model_logits(sp_model *m, float *logits, const float *hidden, int T);
/* The input embedding row of a token, scaled as the model does (Gemma: · sqrt(H)). */
void sp_model_embed(const sp_model *m, float *out, int32_t token);

/* ==== high-level API: an engine that tokenizes, renders chats and generates ================
 *
 * sp_engine bundles a target model, its tokenizer and (optionally) a drafter, and generates
 * with speculative decoding: the output is exactly the target's (bit-identical to plain decoding
 * under greedy, the target's distribution under sampling). A typical program:
 *
 *     sp_engine_params ep = sp_engine_params_default();
 *     ep.model = "models/default/target"; ep.drafter = "models/default/drafter";
 *     sp_engine *e; sp_err err;
 *     if (sp_engine_load(&e, &ep, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *     int32_t *ids; int n;
 *     sp_engine_tokenize(e, "def main():", 1, 0, &ids, &n, &err);
 *     sp_request rq = sp_request_default(); rq.max_tokens = 64; rq.on_text = print_piece;
 *     sp_stats st; int32_t *out; int n_out;
 *     sp_engine_generate(e, ids, n, &rq, &out, &n_out, &st, &err);
 *     free(ids); free(out); sp_engine_free(e);
 *
 * Thread-safety: one engine runs one request at a time (calls on the same engine must not
 * overlap); different engines are independent. sp_engine_tokenize and sp_engine_detokenize may
 * run concurrently with each other and with a generation. Strings and arrays this API returns through `**out` pointers
 * are malloc'd: the caller frees them with free(). */

typedef struct sp_engine sp_engine;

typedef struct {
    const char *model;        /* target model directory (config.json + safetensors + tokenizer) */
    const char *drafter;      /* drafter directory, or NULL for none (plain or n-gram decoding) */
    const char *drafter_kind; /* "none" | "ngram" | "draft" | "dflash" | "dspark" | "assistant" | "eagle3";
                                 NULL: "none" without a drafter directory, else decided from its
                                 files (Gemma-4 assistant, DFlash / DSpark block drafter, or a
                                 smaller draft model with the target's vocabulary) */
    int draft_max;            /* most drafts verified per target forward (0: 8; at most 32) */
    int n_threads;            /* <= 0: all cores */
    int max_ctx;              /* longest sequence (prompt + generated); 0: 4096, capped by the model */
    int bf16_dot;             /* 1: the bf16-dot numerics for the bf16 matmuls of the target and the
                                 drafter (sp_model_set_bf16_dot); 0 (default): the f32 order */
} sp_engine_params;

sp_engine_params sp_engine_params_default(void);
/* Load the target, its tokenizer (tokenizer.json in the model directory) and the drafter.
 * The strings in p are copied. Returns 0 with *out owned by the caller (sp_engine_free), or -1. */
int sp_engine_load(sp_engine **out, const sp_engine_params *p, sp_err *err);
void sp_engine_free(sp_engine *e);
/* The loaded target (owned by the engine; valid until sp_engine_free). */
sp_model *sp_engine_model(sp_engine *e);
/* The drafter kind in use: "none", "ngram", "draft", "dflash", "dspark" or "assistant". */
const char *sp_engine_drafter_kind(const sp_engine *e);

/* text → ids. add_special: add what the tokenizer adds to raw text (BOS…); parse_special: the
 * text of special tokens (e.g. "<|im_end|>") becomes those tokens. *ids is malloc'd. */
int sp_engine_tokenize(sp_engine *e, const char *text, int add_special, int parse_special, int32_t **ids,
                       int *n, sp_err *err);
/* ids → UTF-8 text; *text is malloc'd and NUL-terminated. */
int sp_engine_detokenize(sp_engine *e, const int32_t *ids, int n, char **text, sp_err *err);

typedef struct {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content;
} sp_chat_msg;

/* Render a conversation with the model's own chat template (chat_template.jinja or the Jinja
 * template of tokenizer_config.json; a built-in renderer for tokenizers that ship none), as
 * Hugging Face's apply_chat_template does (add_generation_prompt: end with the assistant turn's
 * opening). *out is malloc'd text to tokenize with add_special 0, parse_special 1. */
int sp_engine_chat(sp_engine *e, const sp_chat_msg *msgs, int n, int add_generation_prompt, char **out,
                   sp_err *err);

/* Called for each generated token in order with the text that became final with it (possibly
 * empty: a multi-byte character can span tokens). Return non-zero to stop after this token. */
typedef int (*sp_text_cb)(void *ctx, int32_t token, const char *piece, size_t len);

typedef struct {
    int max_tokens;    /* most tokens to generate (> 0) */
    int ignore_eos;    /* 1: end-of-generation tokens do not stop */
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    uint64_t seed;     /* sampling seed: the same seed gives the same tokens */
    sp_text_cb on_text; /* may be NULL */
    void *cb_ctx;
} sp_request;

/* 64 tokens, greedy, EOS honoured, no callback */
sp_request sp_request_default(void);

typedef struct {
    int prompt_tokens, generated;
    int drafted, accepted;   /* draft tokens proposed / accepted */
    int target_forwards;     /* verify forwards after the prompt */
    double tau;              /* tokens generated per target forward (mean accepted length + 1) */
    double acceptance;       /* accepted / drafted */
    double prefill_ms, decode_ms, decode_tok_per_s;
    const char *stop;        /* "eos", "max_tokens", "context", "callback" */
} sp_stats;

/* Generate after prompt[0, n_prompt) (n_prompt >= 1). *out (malloc'd) receives the generated ids,
 * *n_out their count; stats may be NULL. The engine's KV cache starts empty for every call. */
int sp_engine_generate(sp_engine *e, const int32_t *prompt, int n_prompt, const sp_request *r, int32_t **out,
                       int *n_out, sp_stats *stats, sp_err *err);

/* "MAJOR.MINOR.PATCH" of the library */
const char *sp_version(void);

#ifdef __cplusplus
}
#endif
#endif
