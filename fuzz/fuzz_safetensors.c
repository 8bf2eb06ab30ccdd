/* fuzz_safetensors.c — a .safetensors file (8-byte header length, JSON header, tensor table,
 * data) through sp_st_open_file; every accepted tensor's bytes are read and looked up again. */
#include "formats/safetensors.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    st_set *s = NULL;
    sp_err err;
    if (sp_st_open_file(&s, path, &err) == 0) {
        for (int i = 0; i < sp_st_count(s); i++) {
            const st_tensor *t = sp_st_at(s, i);
            if (sp_st_find(s, t->name) != t) abort(); /* the sorted table must find its own entries */
            fuzz_touch(t->name, strlen(t->name));
            fuzz_touch(t->data, t->nbytes);
            (void)sp_st_tensor_dtype_name(t);
            (void)sp_st_tensor_file_offset(t);
            const st_tensor *g;
            if (sp_st_get(s, t->name, t->dtype, t->ndim, t->shape, &g, &err) == 0 && g != t) abort();
        }
        const char *fmt = sp_st_metadata(s, "format");
        if (fmt) fuzz_touch(fmt, strlen(fmt));
        sp_st_close(s);
    }
    close(fd);
    return 0;
}
