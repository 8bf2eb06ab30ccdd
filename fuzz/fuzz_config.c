/* fuzz_config.c — a Hugging Face config.json through sp_config_parse; an accepted config must
 * satisfy the bounds the loader relies on (products of dimensions without overflow). */
#include "fuzz.h"
#include "specula.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    char *text = fuzz_cstr(data, size);
    if (!text) return 0;
    sp_config c;
    sp_err err;
    if (sp_config_parse(&c, text, "config.json", &err) == 0) {
        if (c.n_layers < 1 || c.n_layers > SP_MAX_LAYERS || c.hidden_size < 1 || c.vocab_size < 1) abort();
        for (int i = 0; i < c.n_layers; i++) {
            const sp_layer_config *l = &c.layers[i];
            if (l->head_dim < 1 || l->n_kv_heads < 1 || (int64_t)c.n_heads * l->head_dim > SP_CONFIG_MAX_DIM ||
                l->kv_source < 0 || l->kv_source > i)
                abort();
        }
    }
    free(text);
    return 0;
}
