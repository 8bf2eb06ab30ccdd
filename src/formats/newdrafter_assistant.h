/* newdrafter_assistant.h — a random-weight Gemma-4 assistant drafter (`gemma4_assistant`,
 * docs/ASSISTANT.md §1–2) in the published layout, shaped for a given Gemma-4 target.
 *
 * The assistant borrows the K/V of the target's last non-shared sliding and full layers, so its
 * KV-head counts, head dims, k_eq_v and sliding window are copied from those layers; its width is
 * its own. Defaults: for real-size targets (H >= 1024) the E2B/E4B assistant shape (d_a 256,
 * I_a 2048, 4 query heads, 4 layers S,S,S,F); for tiny targets d_a = 3H/4, I_a = 2·d_a + 16 and
 * the target's query-head count. The query-head count is rounded up to a multiple of both
 * borrowed KV-head counts. */
#ifndef SPECULA_NEWDRAFTER_ASSISTANT_H
#define SPECULA_NEWDRAFTER_ASSISTANT_H

#include <stdint.h>

#include "../core/core.h"
#include "newdrafter.h"

/* Write dir/config.json and dir/model.safetensors (dir created if needed; files atomic).
 * target_dir: the Gemma-4 target (its config.json is read, weights are not).
 * head: "centroid" writes masked_embedding.centroids.weight [V/128, d_a] and
 *   masked_embedding.token_ordering [V] (a random permutation, int64) with
 *   use_ordered_embeddings = true (V must be a multiple of 128); "tied" writes neither and sets
 *   use_ordered_embeddings = false (num_centroids is still declared, as the released 26B/31B
 *   configs do).
 * sets: "key=value" overrides (value parsed as JSON, else a string). Keys backbone_hidden_size,
 *   use_ordered_embeddings, num_centroids, centroid_intermediate_top_k, tie_word_embeddings go to
 *   the top level; "text_config.KEY" or any other KEY goes into text_config.
 * Weights use the target's dtype (bf16 or f32) and are a function of seed only. */
int sp_newdrafter_assistant_write(const char *dir, const char *target_dir, const char *head /* "centroid"|"tied" */,
                               uint64_t seed, const char *const *sets, int n_sets, sp_err *err);

/* The assistant kind's writer (the table of kinds): o->preset is the head ("centroid" when NULL),
 * o->seed, o->sets / n_sets as above; o->dtype is not used (the target's). */
int sp_newdrafter_assistant_kind_write(const char *dir, const char *target_dir, const newdrafter_opts *o,
                                       sp_err *err);

/* ---- assistant config.json (shared with the loader, drafters/assistant.c) ------------------ */
typedef struct {
    sp_config text;              /* text_config, parsed as unshared gemma4_text layers */
    int backbone_hidden;         /* backbone_hidden_size (must equal the target's H) */
    int use_ordered_embeddings;  /* as declared; the loader picks the head by tensor presence */
    int num_centroids;           /* default 2048 */
    int centroid_top_k;          /* centroid_intermediate_top_k, default 32 */
} sp_assistant_config;

/* Parse a gemma4_assistant config.json (docs/ASSISTANT.md §1): model_type, backbone_hidden_size,
 * text_config (no PLE, no MoE, no double-wide MLP). Every assistant layer is KV-shared; the
 * layers are parsed as if unshared (kv_source = itself). what names the file in messages. */
int sp_assistant_config_parse(sp_assistant_config *ac, const char *json_text, const char *what, sp_err *err);

/* The target layers whose K/V an assistant borrows (docs/ASSISTANT.md §3): the last non-shared
 * sliding layer (-1 when the target has none) and the last non-shared full layer. */
int sp_assistant_borrowed_layers(const sp_config *target, int *sliding_src, int *full_src);

#endif
