/* model.h — what other folders may use of the target beyond include/specula.h: its thread pool
 * (drafters run between its forwards), LM head, final norm and RoPE tables (the trainer and the
 * tests), and a read-only view of one layer of a KV cache (the Gemma-4 assistant attends to the
 * target's cache). model_internal.h is private to src/model/. */
#ifndef SPECULA_MODEL_H
#define SPECULA_MODEL_H

#include "core/pool.h"
#include "kernels/kernels.h"
#include "model/block.h"
#include "specula.h"

sp_pool *sp_model_pool(const sp_model *m);
const sp_mat *sp_model_lm_head(const sp_model *m); /* [V, H] (the embedding when tied) */
const sp_mat *sp_model_embed_table(const sp_model *m); /* [V, H] unscaled (sp_model_embed scales) */
const float *sp_model_final_norm(const sp_model *m); /* [H] */
/* layer's RoPE inverse frequencies [D/2], D its head dim; NULL for a layer out of range */
const float *sp_model_rope_inv_freq(const sp_model *m, int layer, int *D);

/* What a target's file holds, per tensor type: the model summary printed on load. */
#define SP_CENSUS_MAX_TYPES 16
typedef struct {
    const char *name; /* "BF16", "Q4_K", ... (static) */
    int tensors;
    int64_t params;
    uint64_t bytes;
} sp_model_type_count;
typedef struct {
    const char *format; /* "safetensors" or "gguf" */
    int64_t params;     /* every tensor's elements */
    uint64_t bytes;
    int n_types;
    sp_model_type_count types[SP_CENSUS_MAX_TYPES]; /* in the order first met */
} sp_model_census;
void sp_model_census_of(const sp_model *m, sp_model_census *c);

/* row r of W [N, K] as K floats */
void sp_mat_row_f32(const sp_mat *w, int r, float *out);

/* The cache layer `layer` attends to (its own, or the one it shares) as a block segment of T rows
 * from pos0; layer must be in range. */
sp_block_seg sp_kv_layer_seg(const sp_kv *kv, int layer, int T, int pos0);
int sp_kv_high(const sp_kv *kv);      /* highest position count ever written */
int sp_kv_max_batch(const sp_kv *kv); /* tokens per forward it was created for */

#endif
