/* cmd_new_drafter.c — `specula new-drafter`: write a random drafter checkpoint for a target in
 * a published layout (DFlash z-lab, DSpark / DeepSpec DFlash, EAGLE-3, or the Gemma-4 assistant). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/drafter_kinds.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: specula new-drafter --arch {dflash,dspark,eagle3,gemma4_assistant} -m TARGET_DIR [--preset NAME]\n"
            "                           [--set key=value ...] [--dtype f32|bf16] --seed S -o DIR\n"
            "  --arch dflash            z-lab DFlashDraftModel (block 16, B-1 drafts per block)\n"
            "  --arch dspark            DeepSpec Qwen3/Gemma4DSparkModel (block 7, Markov + confidence heads)\n"
            "  --arch eagle3            EAGLE-3 (presets: specforge = LlamaForCausalLMEagle3 with d2t / t2d, default;\n"
            "                           deepspec = Qwen3Eagle3Model / Gemma4Eagle3Model, full vocabulary)\n"
            "  --arch gemma4_assistant  Gemma-4 assistant (presets: centroid, tied)\n"
            "  --layout mlx-bun         mlx-bun's own layout (dspark.json): --arch dspark = DSpark v1, --arch dflash =\n"
            "                           faithful DFlash; --set gamma|dDraft|nLayers|nHeads|markovRank|ffMult=N,\n"
            "                           tapLayers=[..] (docs/MLX-BUN-DRAFTERS.md)\n"
            "  --set key=value          override a draft config key (JSON value, else a string; dotted keys)\n"
            "  --dtype                  weight dtype (default: the target's)\n"
            "presets:\n"
            "  dflash  b16        z-lab layout, block_size 16\n"
            "  dspark  b7         DSpark, block 7, vanilla Markov head (rank 256; 16 on tiny targets), confidence head\n"
            "  dspark  dflash-b7  DeepSpec dflash_*_block7: the same backbone with the heads off\n"
            "a Llama target's drafter is the Qwen3 block (q_norm / k_norm, model_type \"qwen3\") with the target's\n"
            "rope_theta, rope_scaling and rms_norm_eps, as `specula train` writes it. Mask token: 151669 (Qwen3\n"
            "vocabulary), 128002 (Llama-3 vocabulary), 4 (Gemma-4), else the last id; --set changes it.\n");
}

/* the kind's writer, or mlx-bun's (--layout mlx-bun, docs/MLX-BUN-DRAFTERS.md) */
static int write_layout(const sp_drafter_kind *kind, const char *layout, const char *dir, const char *target,
                        const newdrafter_opts *o, sp_err *err) {
    if (layout && strcmp(layout, "mlx-bun") && strcmp(layout, "published"))
        return sp_err_set(err, "new-drafter: --layout '%s': expected mlx-bun or published", layout);
    if (layout && !strcmp(layout, "mlx-bun")) return sp_newdrafter_mlxbun_write(dir, target, o, err);
    return kind->write(dir, target, o, err);
}

int cmd_new_drafter(int argc, char **argv) {
    newdrafter_opts o = {.dtype = SP_DT_UNKNOWN};
    const char *out = NULL, *target = NULL, *layout = NULL, **sets = calloc((size_t)argc, sizeof *sets);
    int have_seed = 0, rc = 2;
    if (!sets) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(sets);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "specula: error: new-drafter: %s needs a value (or is unknown; see --help)\n", a);
            goto done;
        }
        i++;
        if (!strcmp(a, "--arch")) o.arch = v;
        else if (!strcmp(a, "--preset")) o.preset = v;
        else if (!strcmp(a, "--layout")) layout = v;
        else if (!strcmp(a, "--set")) sets[o.n_sets++] = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) target = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--seed")) {
            char *end;
            o.seed = strtoull(v, &end, 0);
            have_seed = *v && !*end;
            if (!have_seed) {
                fprintf(stderr, "specula: error: new-drafter: --seed '%s' is not a number\n", v);
                goto done;
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f32")) o.dtype = SP_DT_F32;
            else if (!strcmp(v, "bf16")) o.dtype = SP_DT_BF16;
            else {
                fprintf(stderr, "specula: error: new-drafter: --dtype '%s': expected f32 or bf16\n", v);
                goto done;
            }
        } else {
            fprintf(stderr, "specula: error: new-drafter: unknown option %s (see --help)\n", a);
            goto done;
        }
    }
    if (!o.arch || !target || !out || !have_seed) {
        fprintf(stderr, "specula: error: new-drafter: --arch, -m, --seed and -o are required (see --help)\n");
        goto done;
    }
    o.sets = sets;
    sp_err err = {{0}};
    int wrc;
    const sp_drafter_kind *kind = sp_drafter_kind_find(o.arch); /* the kind's own writer */
    if (!kind || !kind->write) {
        fprintf(stderr, "specula: error: new-drafter: --arch %s: no drafter kind writes that (see --help)\n", o.arch);
        goto done;
    }
    /* written into OUT.tmp.PID, then published whole (sp_dir_publish): a failed or killed run
     * leaves no half-written drafter, and the next run removes a killed one's temp */
    char tmp[4200];
    if (sp_tmp_name(tmp, sizeof tmp, out)) {
        fprintf(stderr, "specula: error: new-drafter: path too long: %s\n", out);
        goto done;
    }
    sp_remove_stale_tmp(out);
    sp_remove_tree(tmp);
    wrc = write_layout(kind, layout, tmp, target, &o, &err);
    if (!wrc) wrc = sp_dir_publish(tmp, out, &err);
    if (wrc) sp_remove_tree(tmp);
    if (wrc) {
        fprintf(stderr, "specula: error: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    fprintf(stderr, "wrote %s (%s drafter for %s, seed %llu)\n", out, o.arch, target, (unsigned long long)o.seed);
    rc = 0;
done:
    free(sets);
    return rc;
}
