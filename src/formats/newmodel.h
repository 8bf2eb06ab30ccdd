/* newmodel.h — random-weight checkpoints in the exact Hugging Face layout.
 *
 * sp_hf_tensor_specs() lists the tensors a checkpoint of a given config holds (names with the
 * config's prefix, PyTorch shapes; docs/TRANSFORMER.md §2 for llama/qwen3, docs/TRANSFORMER.md §2 for gemma4: KV-shared
 * Gemma layers carry no k_proj/v_proj/k_norm, k_eq_v full layers no v_proj, PLE tensors only
 * when hidden_size_per_layer_input > 0, lm_head only when untied). The GGUF exporter uses the
 * same list to validate a checkpoint before converting it.
 *
 * sp_newmodel_write() turns a preset (+ overrides) into config.json and model.safetensors
 * (or shards of about 2 GB plus model.safetensors.index.json) with weights drawn from the
 * counter-based RNG: value i of tensor number k is a function of (seed, k, i) only, so files
 * are byte-identical for a seed whatever the thread count. Tensors are generated one shard
 * at a time, so memory stays near one shard. */
#ifndef SPECULA_NEWMODEL_H
#define SPECULA_NEWMODEL_H

#include <stdint.h>

#include "../core/core.h"

typedef enum {
    HF_INIT_PROJ = 0, /* linear weight: normal, std 1/sqrt(fan_in) */
    HF_INIT_NORM,     /* norm weight: 1 + 0.1·normal */
    HF_INIT_EMBED,    /* embedding table / untied LM head: normal, std embed_std */
    HF_INIT_SCALAR,   /* Gemma-4 layer_scalar: uniform in [0.5, 1) */
} hf_init;

typedef struct {
    char name[112];   /* full HF name, prefix included */
    int ndim;         /* 1, 2, or 3 (Gemma-4's stacked experts) */
    int64_t shape[3]; /* PyTorch order (outermost first) */
    hf_init init;
    int layer;        /* decoder layer, or -1 for global tensors */
} hf_tensor_spec;

/* the number of values of a listed tensor */
static inline int64_t sp_hf_spec_numel(const hf_tensor_spec *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* The tensors of a checkpoint for cfg, in a fixed order (embedding, PLE globals, layers in
 * order, final norm, lm_head). *out is malloc'd (caller frees); *n its length. */
int sp_hf_tensor_specs(const sp_config *cfg, hf_tensor_spec **out, int *n, sp_err *err);

/* Fill values [lo, hi) of tensor spec (index k in the list) as float32. */
void sp_hf_tensor_fill(const hf_tensor_spec *spec, int k, uint64_t seed, float embed_std, float *dst,
                    int64_t lo, int64_t hi);

typedef struct {
    const char *arch;         /* "llama" | "qwen3" | "gemma4" */
    const char *preset;       /* see presets.h */
    const char *const *sets;  /* "key=value" overrides */
    int n_sets;
    sp_dtype dtype;           /* SP_DT_F32 or SP_DT_BF16; SP_DT_UNKNOWN = preset default
                                 (bf16 for real shapes, f32 for tiny) */
    const char *tokenizer;    /* tokenizer.json to copy (+ tokenizer_config.json, special_tokens_map.json,
                                 chat_template.jinja beside it), or NULL. vocab_size grows to fit its
                                 ids; tiny presets also take bos/eos ids from tokenizer_config.json
                                 (explicit --set overrides win) */
    uint64_t seed;
    uint64_t shard_bytes;     /* 0: 2 GB */
    int n_threads;            /* generation threads; <= 0: online CPUs (max 16) */
} newmodel_opts;

/* Create dir (and parents) and write config.json, the weights and the tokenizer files.
 * Every file is written atomically. */
int sp_newmodel_write(const char *dir, const newmodel_opts *o, sp_err *err);

#endif
