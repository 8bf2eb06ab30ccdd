/* presets.h — model shapes for random checkpoints, as Hugging Face config.json text.
 *
 * A preset is a named config for one architecture: `tiny` (a few MB, every feature of the
 * architecture switched on) or a real model's shape for benchmarks (`qwen3-0.6b`,
 * `qwen3-4b`, `llama3.2-1b`, `gemma4-e2b`). The text uses the real HF keys
 * (docs/TRANSFORMER.md §1) so the config parser reads it like a downloaded checkpoint. Gemma-4 presets are
 * written as Gemma4ForConditionalGeneration with a `text_config` (tensor prefix
 * `model.language_model.`).
 *
 * This module only produces text; newmodel.c writes the weights. */
#ifndef SPECULA_PRESETS_H
#define SPECULA_PRESETS_H

#include <jansson.h>
#include <stddef.h>

#include "../core/core.h"

typedef struct {
    const char *arch;    /* "llama", "qwen3", "qwen3_moe", "gemma4" */
    const char *name;    /* "tiny", "qwen3-0.6b", ... */
    int real;            /* 1: a real model's shape (default dtype bf16); 0: tiny (f32) */
    const char *summary; /* one line for --help */
} preset_info;

/* Preset number i (0, 1, ...), or NULL past the end. Static storage. */
const preset_info *sp_preset_at(int i);
/* The entry for (arch, name), or NULL. */
const preset_info *sp_preset_find(const char *arch, const char *name);

/* A --set override "key=value": *key (cap bytes) gets the key, *value a new reference to the
 * value parsed as JSON, else taken as a string. Returns 0 or -1 with err naming kv. */
int sp_preset_parse_set(const char *kv, char *key, size_t cap, json_t **value, sp_err *err);
/* Apply "a.b.c=value" to obj (missing objects on the path are created). Returns 0 / -1. */
int sp_preset_apply_set(json_t *obj, const char *kv, sp_err *err);

/* config.json text (pretty-printed, newline-terminated) for arch/preset.
 * dtype: "float32" or "bfloat16" (written as torch_dtype / dtype).
 * sets: n_sets strings "key=value"; value is parsed as JSON, else taken as a string; a dotted
 * key ("rope_scaling.factor") walks into nested objects, creating them. For gemma4 the keys
 * go into text_config. When an override changes num_hidden_layers (gemma4) and layer_types is
 * not overridden too, layer_types is regenerated with the preset's pattern; an override of
 * vocab_size also moves vocab_size_per_layer_input unless that is overridden too.
 * Returns a malloc'd string the caller frees, or NULL with err set. */
char *sp_preset_config_json(const char *arch, const char *preset, const char *dtype,
                         const char *const *sets, int n_sets, sp_err *err);

#endif
