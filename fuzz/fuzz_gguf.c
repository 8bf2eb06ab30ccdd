/* fuzz_gguf.c — a GGUF file through sp_gguf_open (header, metadata key/values, tensor table) and
 * sp_tok_load_gguf (the tokenizer.ggml.* vocabulary); every accepted key, array and tensor is
 * read back in full. */
#include "formats/gguf.h"
#include "fuzz.h"
#include "tokenizer/tokenizer.h"

static void walk(const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        fuzz_touch(kv->key.ptr, kv->key.len);
        if (kv->type == GGUF_TYPE_STRING) fuzz_touch(kv->v.s.ptr, kv->v.s.len);
        if (kv->type != GGUF_TYPE_ARRAY) continue;
        if (kv->arr_strs) {
            for (uint64_t j = 0; j < kv->arr_n; j++) fuzz_touch(kv->arr_strs[j].ptr, kv->arr_strs[j].len);
        } else if (kv->arr_type != GGUF_TYPE_ARRAY && kv->arr_n > 0) {
            (void)sp_gguf_arr_f64(kv, kv->arr_n - 1);
            (void)sp_gguf_arr_i64(kv, 0);
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor_info *t = &f->tensors[i];
        fuzz_touch(t->name.ptr, t->name.len);
        sp_err err;
        const void *p = sp_gguf_tensor_data(f, t, &err);
        if (p) fuzz_touch(p, t->nbytes);
    }
    int64_t v;
    gguf_str s;
    sp_err err;
    (void)sp_gguf_get_i64(f, "general.alignment", &v, &err);
    if (sp_gguf_get_str(f, "general.architecture", &s, &err) == 0) fuzz_touch(s.ptr, s.len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    sp_err err;
    gguf_file *f = sp_gguf_open(path, &err);
    if (f) {
        walk(f);
        sp_gguf_close(f);
    }
    tok_tokenizer *t = sp_tok_load_gguf(path, &err);
    if (t) {
        int32_t *ids = NULL;
        int n = 0;
        const char *text = "Hello world, 123 \xc3\xbc";
        if (sp_tok_encode(t, text, strlen(text), 1, 1, &ids, &n, &err) == 0) {
            for (int i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= sp_tok_vocab_size(t)) abort();
            char *out = NULL;
            if (sp_tok_decode(t, ids, n, &out, &err) == 0) free(out);
        }
        free(ids);
        sp_tok_free(t);
    }
    close(fd);
    return 0;
}
