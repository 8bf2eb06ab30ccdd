/* gguf_names.h — tensor names between a Hugging Face checkpoint and a GGUF
 * file as llama.cpp names it (docs/GGUF.md): `model.layers.3.self_attn.q_proj.weight` ↔
 * `blk.3.attn_q.weight`. The exporter maps HF → GGUF when writing; the model loader asks for
 * HF names and reads the GGUF ones. Not here: weight rewrites (export_gguf.c), keys. */
#ifndef SPECULA_GGUF_NAMES_H
#define SPECULA_GGUF_NAMES_H

#include <stddef.h>

#include "specula.h"

/* GGUF name of an HF tensor name given WITHOUT the checkpoint's prefix ("layers.0.mlp.up_proj.weight",
 * "embed_tokens.weight", "lm_head.weight"). Returns a static string or buf (cap bytes), or NULL
 * when the name has no GGUF counterpart. */
const char *sp_gguf_tensor_name(sp_arch arch, const char *hf, char *buf, size_t cap);

#endif
