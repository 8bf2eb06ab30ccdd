/* fuzz_regen.c — a regen corpus (JSONL records: ids + resp_start, text, prompt/response,
 * messages) through sp_tr_regen_check_records, with the embedded default model's tokenizer (and
 * its chat template) when models/default/target is reachable from the working directory, and
 * once more without a tokenizer. */
#include "fuzz.h"
#include "train/regen.h"

static tok_tokenizer *tok;
static const char *model_dir;
static int vocab = 32000;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    sp_err err;
    const char *dir = getenv("SPECULA_FUZZ_MODEL");
    model_dir = dir ? dir : "models/default/target";
    tok = sp_tok_load_dir(model_dir, &err);
    if (tok) vocab = sp_tok_vocab_size(tok);
    else fprintf(stderr, "fuzz_regen: no tokenizer (%s); text records are rejected\n", err.msg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sp_err err;
    int n = 0;
    for (int generate = 0; generate < 2; generate++)
        (void)sp_tr_regen_check_records((const char *)data, size, "corpus.jsonl", tok ? model_dir : NULL, tok, vocab,
                                     generate, &n, &err);
    (void)sp_tr_regen_check_records((const char *)data, size, "corpus.jsonl", NULL, NULL, vocab, 0, &n, &err);
    return 0;
}
