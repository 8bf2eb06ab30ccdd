/* tokmodel.c — the tokenizer of a model path, whichever form the model takes: a Hugging Face
 * directory (its tokenizer.json) or a GGUF model file (its tokenizer.ggml.* keys). */
#include <sys/stat.h>

#include "formats/gguf.h"
#include "tokenizer.h"

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int sp_tok_model_has_tokenizer(const char *model_path) {
    if (!is_file(model_path)) {
        char json[4096];
        return !sp_path_join(json, sizeof json, model_path, "tokenizer.json") && sp_file_exists(json);
    }
    gguf_file *g = sp_gguf_open(model_path, NULL);
    int has = g && sp_gguf_find(g, "tokenizer.ggml.tokens") >= 0;
    sp_gguf_close(g);
    return has;
}

tok_tokenizer *sp_tok_load_model(const char *model_path, sp_err *err) {
    return is_file(model_path) ? sp_tok_load_gguf(model_path, err) : sp_tok_load_dir(model_path, err);
}
