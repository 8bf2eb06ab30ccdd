/* cmd_export_gguf.c — `specula export-gguf`: a Hugging Face checkpoint directory → GGUF for
 * llama.cpp (docs/GGUF.md); with --target, a drafter directory and its target → the drafter GGUF
 * llama.cpp speculates with (docs/EXPORT.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/drafter_kinds.h"
#include "core/core.h"
#include "formats/export_gguf.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: specula export-gguf -m DIR -o FILE.gguf [--type f32|f16|bf16]\n"
            "                           [--tokenizer-gguf FILE.gguf | --no-tokenizer] [--name NAME]\n"
            "       specula export-gguf -m DRAFTER --target TARGET -o drafter.gguf [--type ...] [--name NAME]\n"
            "  --target          -m is a drafter (DFlash, DSpark, Gemma-4 assistant) for this target directory;\n"
            "                    the file carries the target's tokenizer (llama.cpp: -md drafter.gguf)\n"
            "  --type            type of 2-D weights (default: as stored); norms etc. are always f32\n"
            "  --tokenizer-gguf  copy the tokenizer.* keys of another GGUF (when DIR has no tokenizer.json)\n"
            "  --no-tokenizer    allow a file without tokenizer keys (llama.cpp will not load it)\n");
}

/* what the tokenizer of DIR adds to raw text (BOS, EOS), as specula encodes it: the empty text
 * encodes to exactly those ids. 0 (nothing to learn without a tokenizer.json) or -1 (printed). */
static int tokenizer_adds(const char *tok_dir, export_gguf_opts *o) {
    char path[4096];
    if (sp_path_join(path, sizeof path, tok_dir, "tokenizer.json") || !sp_file_exists(path)) return 0;
    sp_err err = {{0}};
    tok_tokenizer *t = sp_tok_load_dir(tok_dir, &err);
    int32_t *ids = NULL;
    int n = 0;
    if (!t || sp_tok_encode(t, "", 0, 1, 0, &ids, &n, &err)) {
        sp_tok_free(t);
        fprintf(stderr, "specula: error: %s: %s\n", tok_dir, err.msg);
        return -1;
    }
    o->tok_adds_known = 1;
    o->tok_add_bos = sp_tok_adds_bos(t);
    o->tok_add_eos = n > o->tok_add_bos;
    free(ids);
    sp_tok_free(t);
    return 0;
}

int cmd_export_gguf(int argc, char **argv) {
    export_gguf_opts o = {.weight_type = -1};
    const char *dir = NULL, *out = NULL, *target = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-tokenizer")) {
            o.no_tokenizer = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "specula: error: %s needs a value (or is unknown; see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m")) dir = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--tokenizer-gguf")) o.tokenizer_gguf = v;
        else if (!strcmp(a, "--name")) o.name = v;
        else if (!strcmp(a, "--target")) target = v;
        else if (!strcmp(a, "--type")) {
            if (!strcmp(v, "f32")) o.weight_type = GGML_TYPE_F32;
            else if (!strcmp(v, "f16")) o.weight_type = GGML_TYPE_F16;
            else if (!strcmp(v, "bf16")) o.weight_type = GGML_TYPE_BF16;
            else {
                fprintf(stderr, "specula: error: --type '%s': expected f32, f16 or bf16\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "specula: error: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    if (!dir || !out) {
        fprintf(stderr, "specula: error: -m DIR and -o FILE are required (see --help)\n");
        return 2;
    }
    sp_err err = {{0}};
    if (target && o.no_tokenizer) {
        fprintf(stderr, "specula: error: --no-tokenizer with --target: llama.cpp needs the target's vocabulary in a drafter\n");
        return 2;
    }
    const char *kind = NULL;
    sp_err kerr = {{0}};
    if (!target && !sp_drafter_kind_detect(dir, &kind, &kerr) && sp_drafter_kind_find(kind)->export_gguf) {
        fprintf(stderr, "specula: error: %s is a %s drafter: give its target with --target TARGET_DIR "
                        "(the drafter GGUF carries the target's tokenizer)\n", dir, kind);
        return 2;
    }
    if (!o.tokenizer_gguf && tokenizer_adds(target ? target : dir, &o)) return 1;
    if (target ? sp_drafter_export_gguf(dir, target, out, &o, &err) : sp_export_gguf(dir, out, &o, &err)) {
        fprintf(stderr, "specula: error: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s\n", out);
    return 0;
}
