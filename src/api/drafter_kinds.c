/* drafter_kinds.c — the one table of drafter kinds (drafters/kind.h). A row names a kind and
 * points at its hooks, each in the kind's own files: detection and runtime in src/drafters/,
 * the random-checkpoint writer and GGUF export in src/formats/, training in src/train/. This
 * file sits in src/api/, above every layer a hook comes from. Adding a kind: its files plus one
 * row here (docs/DRAFTER_KINDS.md). */
#include <stdio.h>
#include <string.h>

#include "api/drafter_kinds.h"
#include "formats/export_drafter.h"
#include "formats/newdrafter_assistant.h"
#include "train/kind_hooks.h"

/* Detection order: the first row whose detect() accepts a config.json wins, so the draft model
 * (any llama / qwen3 / gemma4 causal LM) comes after the block drafters. */
const sp_drafter_kind sp_drafter_kinds[] = {
    {.name = "ngram", .identity = "prompt lookup, no checkpoint", .make = sp_ngram_kind_make},
    {.name = "suffix", .identity = "suffix automaton over the stream and earlier requests, no checkpoint",
     .open = sp_suffix_kind_open, .make = sp_suffix_kind_make, .close = sp_suffix_kind_close},
    {.name = "dspark", .identity = "architectures Qwen3DSparkModel / Gemma4DSparkModel (DeepSpec)", .needs_dir = 1,
     .detect = sp_dspark_kind_detect, .open = sp_dspark_kind_open, .make = sp_dflash_kind_make,
     .close = sp_dflash_kind_close, .write = sp_newdrafter_dspark_write,
     .export_gguf = sp_export_dspark_gguf, .train = &sp_tr_hooks_dspark},
    {.name = "dflash", .identity = "architectures DFlashDraftModel (z-lab)", .needs_dir = 1,
     .detect = sp_dflash_kind_detect, .open = sp_dflash_kind_open, .make = sp_dflash_kind_make,
     .close = sp_dflash_kind_close, .write = sp_newdrafter_dflash_write,
     .export_gguf = sp_export_dflash_gguf, .train = &sp_tr_hooks_dflash},
    {.name = "mlx-dspark", .alias = "mlxbun",
     .identity = "dspark.json without config.json (mlx-bun's DSpark v1 / faithful DFlash; also taken by --spec dspark "
                 "and dflash)", .needs_dir = 1,
     .open = sp_mlxbun_kind_open, .make = sp_mlxbun_kind_make, .close = sp_mlxbun_kind_close},
    {.name = "eagle3", .identity = "architectures LlamaForCausalLMEagle3 / Eagle3LlamaForCausalLM (SpecForge), Qwen3Eagle3Model / Gemma4Eagle3Model (DeepSpec)", .needs_dir = 1,
     .detect = sp_eagle3_kind_detect, .make = sp_eagle3_kind_make,
     .write = sp_newdrafter_eagle3_write, .export_gguf = sp_export_eagle3_gguf,
     .train = &sp_tr_hooks_eagle3},
    {.name = "assistant", .alias = "gemma4_assistant",
     .identity = "model_type gemma4_assistant / gemma4_unified_assistant (Gemma4[Unified]AssistantForCausalLM)", .needs_dir = 1,
     .detect = sp_assistant_kind_detect, .make = sp_assistant_kind_make,
     .write = sp_newdrafter_assistant_kind_write,
     .export_gguf = sp_export_assistant_gguf},
    {.name = "draft", .identity = "a llama / qwen3 / gemma4 causal LM, or a FILE.gguf", .needs_dir = 1,
     .detect = sp_draft_model_kind_detect, .open = sp_draft_model_kind_open, .make = sp_draft_model_kind_make,
     .close = sp_draft_model_kind_close},
};
const int sp_drafter_n_kinds = (int)(sizeof sp_drafter_kinds / sizeof sp_drafter_kinds[0]);

const sp_drafter_kind *sp_drafter_kind_find(const char *name) {
    for (int i = 0; name && i < sp_drafter_n_kinds; i++) {
        const sp_drafter_kind *k = &sp_drafter_kinds[i];
        if (!strcmp(name, k->name) || (k->alias && !strcmp(name, k->alias))) return k;
    }
    return NULL;
}

const char *sp_drafter_kind_names(char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "none");
    for (int i = 0; i < sp_drafter_n_kinds && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, ", %s", sp_drafter_kinds[i].name);
    return buf;
}

int sp_drafter_export_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                           sp_err *err) {
    const char *name;
    if (sp_drafter_kind_detect(dir, &name, err)) return -1;
    const sp_drafter_kind *k = sp_drafter_kind_find(name);
    if (k && k->export_gguf) return k->export_gguf(dir, target_dir, out_path, o, err);
    char with[256] = "";
    size_t n = 0;
    for (int i = 0; i < sp_drafter_n_kinds && n < sizeof with; i++)
        if (sp_drafter_kinds[i].export_gguf)
            n += (size_t)snprintf(with + n, sizeof with - n, "%s%s", n ? ", " : "", sp_drafter_kinds[i].name);
    return sp_err_set(err, "%s: a %s checkpoint is not a drafter export-gguf knows (kinds: %s)", dir, name, with);
}

int sp_drafter_train_arch(const char *name, int *arch, sp_err *err) {
    const char *all[16];
    int n = 0;
    for (int i = 0; i < sp_drafter_n_kinds; i++) {
        const struct sp_tr_kind_hooks *h = sp_drafter_kinds[i].train;
        for (int j = 0; h && j < h->n; j++) {
            if (name && !strcmp(name, h->v[j].name)) {
                *arch = (int)h->v[j].arch;
                return 0;
            }
            if (n < 16) all[n++] = h->v[j].name;
        }
    }
    char names[256] = "";
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof names; i++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", all[i]);
    return sp_err_set(err, "--arch must be %s, not '%s'", names, name ? name : "(none)");
}
