/* model_internal.h — the target model's weights, KV cache and scratch, shared by the loader
 * (load.c), the cache (kv.c) and the forward pass (forward.c). One decoder layer (block.h)
 * serves Llama-3, Qwen3 and Gemma-4 text: the architectures differ only in its description
 * (q/k norms, post norms, PLE, KV sharing, sliding layers) and the final softcap. */
#ifndef SPECULA_MODEL_INTERNAL_H
#define SPECULA_MODEL_INTERNAL_H

#include "core/core.h"
#include "core/pool.h"
#include "formats/gguf.h"
#include "formats/mlx_quant.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "model/block.h"
#include "model/model.h"

/* a target layer: the one decoder layer of block.h (the description and the weights) */
typedef sp_block_layer sp_layer;

struct sp_model {
    sp_config cfg;
    st_set *st;                /* a safetensors checkpoint, or NULL */
    gguf_file *gg;             /* a GGUF file, or NULL (exactly one of st / gg) */
    struct sp_mlxq *mlxq;      /* config.json's MLX quantization (formats/mlx_quant.h), or NULL */
    sp_mlxq_mat *mlx_mats;     /* the MLX matrices converted so far, each once (mlx_keys: their X.weight) */
    const void **mlx_keys;
    int n_mlx;
    unsigned char *gg_bound;   /* [gg->n_tensors] 1 once a tensor is bound (all must be) */
    int qk_interleaved;        /* llama GGUF: attn_q / attn_k rows in llama.cpp's pair order */
    int check_only;            /* sp_model_check: bind and validate, no packed copies */
    sp_pool *pool;
    int n_threads;
    sp_mat embed;              /* [V, H] token embedding; rows converted to f32 per lookup */
    float embed_scale;         /* gemma4: sqrt(H) rounded to the weight dtype; else 1 */
    sp_mat lm_head;            /* [V, H] (the embedding when tied) */
    float *final_norm;         /* [H] */
    /* gemma4 PLE */
    sp_mat ple_embed;           /* [ple_vocab, L·P] */
    float ple_embed_scale;      /* sqrt(P) rounded to the weight dtype */
    sp_mat ple_model_proj;      /* [L·P, H] */
    float *ple_proj_norm;       /* [P] */
    sp_layer *layers;
    sp_owner owned;             /* every small f32 array above (freed with the model) */
    size_t weight_bytes;
    int bf16_dot;               /* the numerics of bf16 matmuls (sp_model_set_bf16_dot) */
    sp_kv_type kv_k, kv_v;      /* element types of the caches sp_kv_create makes */
};

/* A typed cache layer's store hook context (sp_block_seg.store). */
typedef struct {
    const sp_kv *kv;
    int layer;
} sp_kv_store_ctx;

/* Per-sequence state: KV caches plus the scratch of a forward over up to max_batch tokens. */
struct sp_kv {
    const sp_model *m;
    int max_ctx, max_batch;
    int len;       /* committed positions */
    int high;      /* highest position count ever written (bounds trim across a ring wrap) */
    int *cap;      /* [L] slots per layer's cache; 0 for KV-shared layers */
    int *ring;     /* [L] 1 if the cache is a ring (sliding layer with window + max_batch < max_ctx) */
    float **K, **V; /* [L] → [cap, KVH, D] (f32 caches; NULL for typed ones) */
    sp_kv_type kt, vt; /* element types (f32: K / V above; else Kc / Vc) */
    void **Kc, **Vc;   /* [L] → cap rows of the type (typed caches) */
    float *stK, *stV;  /* typed: the f32 view of one layer, [max cap, max KVH·D] each */
    sp_kv_store_ctx *store; /* [L] */
    /* scratch, sized for max_batch tokens */
    float *x, *xn, *q, *k, *v, *att, *o, *g, *u, *ple, *pg, *hid;
    float *ex, *ey, *mo, *router, *ew, *eg, *eu; /* MoE models (block.h); NULL otherwise */
    int32_t *esel, *erow;
    int moe_touched, moe_layers;  /* the last forward through this scratch: distinct experts run, MoE layers */
};

#endif
