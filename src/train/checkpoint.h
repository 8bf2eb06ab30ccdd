/* checkpoint.h — a trained drafter on disk, in the published layout, plus what an exact resume
 * needs (docs/DSPARK.md §1, §2):
 *   DIR/config.json            the target's config with the DSpark / DFlash keys (docs/DSPARK.md §1)
 *   DIR/model.safetensors      bf16 weights under the published names (no embedding / LM head:
 *                              both are the target's and stay frozen)
 *   DIR/optimizer.safetensors  f32 master weights, AdamW moments ("master.", "adam_m.",
 *                              "adam_v." + name), metadata "step": the authoritative step
 *   DIR/trainer_state.json     {"step": n, ...} (informative; written last)
 * Every file is written atomically (temp + fsync + rename). Resume reads only the optimizer
 * file, so a kill between two of the writes leaves a consistent state. The optimizer file is
 * generic (a table of tensors of one flat array): train-lm's checkpoints use it too
 * (docs/TRAINING.md). */
#ifndef SPECULA_TRAIN_CHECKPOINT_H
#define SPECULA_TRAIN_CHECKPOINT_H

#include "train/drafter_net.h"

/* config.json text for the drafter: the target's config.json (its text, sp_model_config_json)
 * with the overrides of docs/DSPARK.md §1. *out is malloc'd (caller frees). */
int sp_tr_config_json(char **out, const char *target_config, const tr_dims *d, int num_anchors, sp_err *err);

/* One tensor of a flat parameter array: its name in the optimizer file (after the prefix), its
 * shape, its offset and count in floats. */
typedef struct {
    const char *name;
    int ndim;
    const int64_t *shape;
    size_t off, n;
} tr_ckpt_tensor;

/* DIR/optimizer.safetensors: "master." / "adam_m." / "adam_v." + name of each of the nt tensors
 * of w, m, v (f32), metadata "step" and "run" (a string naming every setting the training
 * trajectory depends on). Written last in a checkpoint: resume reads only this file. */
int sp_tr_optimizer_save(const char *dir, const tr_ckpt_tensor *t, int nt, const float *w, const float *m,
                      const float *v, long step, const char *run, sp_err *err);
/* Read w, m, v and the step back (every tensor's shape checked). A file made by a run with
 * another run string is refused, naming both: resume would not repeat the uninterrupted run. */
int sp_tr_optimizer_load(const char *dir, const tr_ckpt_tensor *t, int nt, float *w, float *m, float *v, long *step,
                      const char *run, sp_err *err);

/* The drafter's tensor table for sp_tr_optimizer_save / load: t[m->n_params] (caller's array of
 * at least that many). Returns m->n_params. */
int sp_tr_drafter_ckpt_tensors(const tr_model *m, tr_ckpt_tensor *t);

/* x in buf (n bytes, 32 suffice) with the fewest significant digits that read back as x: 0.8, not
 * 0.80000000000000004 (the trainer's temperatures in config.json and the run string). */
void sp_tr_format_double(char *buf, size_t n, double x);

/* Overwrite m's weights with DIR/model.safetensors (a drafter of the same layout, e.g. an earlier
 * export: every tensor of m's table with its shape, any float dtype). 0, or -1 with err naming the
 * file and tensor. */
int sp_tr_drafter_init_from(const char *dir, tr_model *m, sp_err *err);
/* DIR/model.safetensors (bf16 under the published names; EAGLE-3's d2t / t2d) and
 * DIR/config.json (config_json verbatim): the drafter as inference loads it. */
int sp_tr_drafter_export(const char *dir, const tr_model *m, const char *config_json, sp_err *err);

/* The four files, optimizer last: sp_tr_drafter_export, trainer_state.json (state_json verbatim),
 * sp_tr_optimizer_save. */
int sp_tr_checkpoint_save(const char *dir, const tr_model *m, const float *adam_m, const float *adam_v, long step,
                       const char *run, const char *config_json, const char *state_json, sp_err *err);
/* sp_tr_optimizer_load of a drafter checkpoint made for the same dims. */
int sp_tr_checkpoint_load(const char *dir, tr_model *m, float *adam_m, float *adam_v, long *step, const char *run,
                       sp_err *err);

#endif
