/* cmd_export_gguf.c — `specula export-gguf`: a Hugging Face checkpoint directory → GGUF for
 * llama.cpp (docs/GGUF.md); with --target, a drafter directory and its target → the drafter GGUF
 * llama.cpp speculates with (docs/EXPORT.md). */
#include <stdio.h>
#include <string.h>

#include "api/drafter_kinds.h"
#include "formats/export_gguf.h"

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
    if (target ? sp_drafter_export_gguf(dir, target, out, &o, &err) : sp_export_gguf(dir, out, &o, &err)) {
        fprintf(stderr, "specula: error: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s\n", out);
    return 0;
}
