/* config_json.h — a model's Hugging Face-style config.json text, for a target given as a
 * checkpoint directory or as a GGUF file (docs/GGUF.md, "config.json from a GGUF file").
 *
 * What reads it: the drafter trainer, whose drafter config starts from the target's config.json.
 * A GGUF file carries no config.json; its metadata becomes the sp_config the GGUF loader builds
 * (sp_config_from_gguf), and that sp_config is written back as the config.json keys
 * sp_config_parse reads, so parsing the text gives the same sp_config (tensor_prefix aside). */
#ifndef SPECULA_CONFIG_JSON_H
#define SPECULA_CONFIG_JSON_H

#include "specula.h"

/* cfg as config.json text: model_type, the dimensions, eps, RoPE (rope_theta + rope_scaling for
 * llama / qwen3, rope_parameters per layer type for gemma4), layer types, special ids. Returns a
 * malloc'd NUL-terminated string the caller frees, or NULL with err set. */
char *sp_config_to_json(const sp_config *cfg, sp_err *err);

/* The config.json text of the model at path: DIR/config.json as written when path is a
 * directory, else the GGUF file's metadata through sp_config_to_json. On success *out is a
 * malloc'd string the caller frees; -1 with err naming the file otherwise. */
int sp_model_config_json(const char *path, char **out, sp_err *err);

#endif
