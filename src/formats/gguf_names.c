/* gguf_names.c — HF → GGUF tensor names through the one table (tensor_names.h, docs/GGUF.md). */
#include "gguf_names.h"

#include "tensor_names.h"

const char *sp_gguf_tensor_name(sp_arch arch, const char *hf, char *buf, size_t cap) {
    int layer, role = sp_tensor_role_of(arch, hf, &layer);
    return role < 0 ? NULL : sp_tensor_gguf_name(arch, (sp_tensor_role)role, layer, buf, cap);
}
