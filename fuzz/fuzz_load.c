/* fuzz_load.c — a GGUF model file through the loader's tensor binding: sp_model_check (the
 * config from the metadata, then every tensor the architecture names looked up, its type and
 * shape checked, and none left unbound) and, for a file it accepts, sp_model_load (the same
 * binding, then the packed copies of the matrices), whose every bound matrix and vector is read
 * back in full. The seeds are tiny exported models (qwen3, llama), so mutations reach the
 * binding and not only the GGUF header. */
#include "formats/gguf.h"
#include "fuzz.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    sp_err err;
    if (sp_model_check(path, &err) == 0) {
        sp_model *m = NULL;
        /* what check accepted, load must accept: the one binding, two callers */
        if (sp_model_load(&m, path, 1, &err)) abort();
        const sp_config *c = sp_model_config(m);
        const sp_mat *e = sp_model_embed_table(m), *lm = sp_model_lm_head(m);
        fuzz_touch(e->data, (size_t)e->n * sp_dtype_row_bytes(e->dt, (size_t)e->k));
        fuzz_touch(lm->data, (size_t)lm->n * sp_dtype_row_bytes(lm->dt, (size_t)lm->k));
        fuzz_touch(sp_model_final_norm(m), (size_t)c->hidden_size * sizeof(float));
        sp_model_free(m);
    }
    close(fd);
    return 0;
}
