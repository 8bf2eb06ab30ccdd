/* checkpoint.h — a trained drafter on disk, in the published layout, plus what an exact resume
 * needs (docs/DSPARK.md §1, §2):
 *   DIR/config.json            the target's config with the DSpark / DFlash keys (docs/DSPARK.md §1)
 *   DIR/model.safetensors      bf16 weights under the published names (no embedding / LM head:
 *                              both are the target's and stay frozen)
 *   DIR/optimizer.safetensors  f32 master weights, AdamW moments ("master.", "adam_m.",
 *                              "adam_v." + name), metadata "step": the authoritative step
 *   DIR/trainer_state.json     {"step": n, ...} (informative; written last)
 * Every file is written atomically (temp + fsync + rename). Resume reads only the optimizer
 * file, so a kill between two of the writes leaves a consistent state. */
#ifndef SPECULA_TRAIN_CHECKPOINT_H
#define SPECULA_TRAIN_CHECKPOINT_H

#include "train/drafter_net.h"

/* config.json text for the drafter: the target's config.json (its text, sp_model_config_json)
 * with the overrides of docs/DSPARK.md §1. *out is malloc'd (caller frees). */
int tr_config_json(char **out, const char *target_config, const tr_dims *d, int num_anchors, sp_err *err);

/* Write the four files. state_json: the trainer_state.json text. run: a string naming every
 * setting the training trajectory depends on (stored in the optimizer file's metadata). */
int tr_checkpoint_save(const char *dir, const tr_model *m, const float *adam_m, const float *adam_v, long step,
                       const char *run, const char *config_json, const char *state_json, sp_err *err);
/* Read master weights and moments of a checkpoint made for the same dims (every tensor's
 * shape is checked); *step receives the step it was taken at. run: the settings of the
 * resuming run; a checkpoint made with other settings is refused (resume would not repeat the
 * uninterrupted run), naming both. */
int tr_checkpoint_load(const char *dir, tr_model *m, float *adam_m, float *adam_v, long *step, const char *run,
                       sp_err *err);

#endif
