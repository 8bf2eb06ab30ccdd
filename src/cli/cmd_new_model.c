/* cmd_new_model.c — `specula new-model`: write a random-weight checkpoint (config.json +
 * safetensors, + tokenizer) in the Hugging Face layout from a preset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/newmodel.h"
#include "formats/presets.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: specula new-model --arch {llama,qwen3,qwen3_moe,gemma4,gemma4_unified} --preset NAME [--set key=value ...]\n"
            "                         [--dtype f32|bf16] [--tokenizer tokenizer.json] --seed S -o DIR\n"
            "  --set key=value  override a config key (value parsed as JSON, else a string;\n"
            "                   dotted keys reach nested objects; gemma4 / gemma4_unified: keys of text_config)\n"
            "  --dtype          weight dtype (default: bf16 for real shapes, f32 for tiny)\n"
            "  --tokenizer      copy this tokenizer.json (and tokenizer_config.json beside it)\n"
            "  --threads N      generation threads (default: all cores)\n"
            "presets:\n");
    for (int i = 0; sp_preset_at(i); i++) {
        const preset_info *p = sp_preset_at(i);
        fprintf(f, "  %-7s %-12s %s\n", p->arch, p->name, p->summary);
    }
}

int cmd_new_model(int argc, char **argv) {
    newmodel_opts o = {.dtype = SP_DT_UNKNOWN};
    const char *out = NULL, **sets = calloc((size_t)argc, sizeof *sets);
    int have_seed = 0;
    if (!sets) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(sets);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "specula: error: %s needs a value (or is unknown; see --help)\n", a);
            free(sets);
            return 2;
        }
        i++;
        if (!strcmp(a, "--arch")) o.arch = v;
        else if (!strcmp(a, "--preset")) o.preset = v;
        else if (!strcmp(a, "--set")) sets[o.n_sets++] = v;
        else if (!strcmp(a, "--tokenizer")) o.tokenizer = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) o.n_threads = atoi(v);
        else if (!strcmp(a, "--seed")) {
            char *end;
            o.seed = strtoull(v, &end, 0);
            have_seed = *v && !*end;
            if (!have_seed) {
                fprintf(stderr, "specula: error: --seed '%s' is not a number\n", v);
                free(sets);
                return 2;
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f32")) o.dtype = SP_DT_F32;
            else if (!strcmp(v, "bf16")) o.dtype = SP_DT_BF16;
            else {
                fprintf(stderr, "specula: error: --dtype '%s': expected f32 or bf16\n", v);
                free(sets);
                return 2;
            }
        } else {
            fprintf(stderr, "specula: error: unknown option %s (see --help)\n", a);
            free(sets);
            return 2;
        }
    }
    if (!o.arch || !o.preset || !out || !have_seed) {
        fprintf(stderr, "specula: error: --arch, --preset, --seed and -o are required (see --help)\n");
        free(sets);
        return 2;
    }
    o.sets = sets;
    sp_err err = {{0}};
    int rc = sp_newmodel_write(out, &o, &err);
    free(sets);
    if (rc) {
        fprintf(stderr, "specula: error: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s %s, seed %llu)\n", out, o.arch, o.preset, (unsigned long long)o.seed);
    return 0;
}
