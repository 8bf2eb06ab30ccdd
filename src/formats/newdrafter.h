/* newdrafter.h — random DFlash / DSpark drafter checkpoints in the published layouts, built for
 * one target directory (docs/DFLASH.md §1–2 z-lab, docs/DSPARK.md §1–2 DeepSpec).
 *
 * The drafter takes the target's hidden size, vocabulary, RoPE and head shapes; tap layers
 * (target_layer_ids) default to the published rule (docs/DFLASH.md §1) for the target's depth; the mask
 * token is sp_newdrafter_mask_id. For a Llama target the drafter is the Qwen3 block (q_norm /
 * k_norm, model_type "qwen3") with the target's rope_theta, rope_scaling (llama3) and
 * rms_norm_eps, as the published drafter code builds it and `specula train` writes it.
 * Weights come from the counter-based RNG (seed, tensor index, element index), so a seed
 * gives byte-identical files. DeepSpec checkpoints carry copies of the target's embedding and
 * LM head (as published); z-lab ones carry neither. */
#ifndef SPECULA_NEWDRAFTER_H
#define SPECULA_NEWDRAFTER_H

#include <stdint.h>

#include "../core/core.h"

typedef struct {
    const char *arch;        /* "dflash" (z-lab DFlashDraftModel) | "dspark" (DeepSpec) | "eagle3" */
    const char *preset;      /* dflash: "b16" (default); dspark: "b7" (default, Markov + confidence
                                heads) | "dflash-b7" (DeepSpec dflash_*_block7: heads off);
                                eagle3: "specforge" (default, LlamaForCausalLMEagle3) | "deepspec" */
    const char *const *sets; /* "key=value" config overrides (JSON value, else string; dotted keys) */
    int n_sets;
    sp_dtype dtype;          /* SP_DT_F32 / SP_DT_BF16; SP_DT_UNKNOWN: the target's */
    uint64_t seed;
} newdrafter_opts;

/* The automatic mask token id for a target (also `specula train`'s): Gemma-4 → 4 (<mask>);
 * the Qwen3 vocabulary (V 151936) → 151669 (docs/DFLASH.md §1, docs/DSPARK.md §1); the Llama-3 vocabulary
 * (V 128256) → 128002 = <|reserved_special_token_0|>, an untrained reserved row (the published
 * configs have no Llama entry; third-party ports of the z-lab Llama-3.1 DFlash drafter use this id);
 * otherwise V-1. */
int sp_newdrafter_mask_id(const sp_config *tc);

/* Names of the presets of an arch, for --help ("b16", ...). NULL past the end. */
const char *sp_newdrafter_preset_at(const char *arch, int i);

/* Write config.json + model.safetensors for target_dir into dir (created). Atomic files.
 * arch "eagle3" goes to sp_newdrafter_eagle3_write. */
int sp_newdrafter_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err);

/* An EAGLE-3 drafter (newdrafter_eagle3.c): preset "specforge" (LlamaForCausalLMEagle3, reduced
 * draft vocabulary with d2t / t2d) or "deepspec" (Qwen3Eagle3Model / Gemma4Eagle3Model). */
int sp_newdrafter_eagle3_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err);

/* The writers of the dflash and dspark kinds: sp_newdrafter_write with o->arch set to the kind. */
int sp_newdrafter_dflash_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err);
int sp_newdrafter_dspark_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err);

/* `new-drafter --layout mlx-bun` (newdrafter_mlxbun.c, docs/MLX-BUN-DRAFTERS.md): mlx-bun's own
 * DSpark v1 (arch "dspark") or faithful DFlash (arch "dflash"): dspark.json + float32
 * model.safetensors with mlx-bun's names, shapes and initialisation; --set takes its config keys. */
int sp_newdrafter_mlxbun_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err);

/* The default tap layers for a target of N layers: m ids (m <= N-1), strictly increasing, never
 * the last layer. docs/DFLASH.md §1 rule when it yields distinct ids, else spread over 0..N-2. */
void sp_newdrafter_tap_ids(int N, int m, int *ids);

#endif
