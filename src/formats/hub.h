/* hub.h — models named by their Hugging Face hub name, found in the local caches (no network).
 *
 *   char path[4096];
 *   int r = sp_hub_resolve("Qwen/Qwen3-0.6B", path, sizeof path, &err);
 *   // r == 1: path is the snapshot directory (or a .gguf file); 0: the name is a path, kept;
 *   // -1: err lists every path tried
 *
 * A name is ORG/NAME with an optional ":TAG" (pick the .gguf file whose name contains TAG) and
 * an optional "@REV" (a ref under refs/, or a snapshot hash). Anything that exists on disk is
 * a path and wins over a hub name. Searched, in order: the Hugging Face hub cache
 * ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub; models--ORG--NAME/
 * snapshots/<rev>/ with the revision read from refs/main), then llama.cpp's cache for GGUF
 * files ($LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp, else ~/.cache/llama.cpp; files named
 * ORG_NAME_FILE.gguf). docs/HUB.md. */
#ifndef SPECULA_FORMATS_HUB_H
#define SPECULA_FORMATS_HUB_H

#include "specula.h"

#include <stddef.h>

int sp_hub_resolve(const char *name, char *out, size_t cap, sp_err *err);

#endif
