/* describe.c — what a loaded target is made of, for the model summary the CLI prints on load:
 * its parameter count and its tensors' types with how many tensors and bytes each, read from the
 * file's own tensor table (safetensors or GGUF). Nothing here reads tensor data. */
#include <stdio.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "model_internal.h"

/* one type's row of the census; names are static strings */
static void census_add(sp_model_census *c, const char *name, int64_t elems, uint64_t bytes) {
    int i = 0;
    while (i < c->n_types && strcmp(c->types[i].name, name)) i++;
    if (i == c->n_types) {
        if (c->n_types == SP_CENSUS_MAX_TYPES) return;
        c->types[c->n_types++] = (sp_model_type_count){.name = name};
    }
    c->types[i].tensors++;
    c->types[i].params += elems;
    c->types[i].bytes += bytes;
    c->params += elems;
    c->bytes += bytes;
}

void sp_model_census_of(const sp_model *m, sp_model_census *c) {
    memset(c, 0, sizeof *c);
    c->format = m->gg ? "gguf" : "safetensors";
    if (m->gg) {
        for (uint64_t i = 0; i < m->gg->n_tensors; i++) {
            const gguf_tensor_info *t = &m->gg->tensors[i];
            int64_t e = 1;
            for (uint32_t d = 0; d < t->n_dims; d++) e *= (int64_t)t->dims[d];
            census_add(c, sp_ggml_type_name((ggml_type)t->type), e, t->nbytes);
        }
        return;
    }
    for (int i = 0; m->st && i < sp_st_count(m->st); i++) {
        const st_tensor *t = sp_st_at(m->st, i);
        census_add(c, sp_st_tensor_dtype_name(t), t->numel, t->nbytes);
    }
}
