/* spec_cli.h — what the speculative subcommands (generate --spec, audit, bench-spec) share:
 * the --spec / -md / --draft-max flags, building the chosen drafter, and reading a prompt. */
#ifndef SPECULA_CLI_SPEC_H
#define SPECULA_CLI_SPEC_H

#include <stdint.h>

#include "api/drafter_kinds.h"
#include "drafters/drafters.h"
#include "decode/spec.h"

typedef struct {
    const char *spec;      /* none | ngram | draft | assistant | dflash | dspark; NULL until given or resolved */
    const char *draft_dir; /* -md */
    int draft_max, draft_min;
    int ngram_min, ngram_max;
    float draft_temp; /* > 0: the draft model samples at this temperature (lossless: q is reported) */
    float conf_threshold;  /* dflash / dspark: cut at the first confidence below it (0: off) */
    const char *schedule;  /* dspark: "auto" = the docs/DSPARK.md §10 prefix scheduler, NULL / "none" = off */
    int always;            /* --spec-always (generate, chat): draft every round, no never-slower policy */
    int bf16_dot;          /* --bf16-dot: the bf16-dot numerics for the target's and drafter's bf16 matmuls */
    const char *cache_type_k, *cache_type_v; /* -ctk / -ctv: the target's KV cache types (NULL: f32) */
} cli_spec_opts;

#define CLI_SPEC_OPTS_DEFAULT {NULL, NULL, 8, 0, 1, 4, 0.0f, 0.0f, NULL, 0, 0, NULL, NULL}
#define CLI_SPEC_OPT_ROWS 11
/* -ctk / -ctv into *k / *v (NULL: f32). Prints errors; returns 0/-1. */
int cli_kv_types(const char *cmd, const cli_spec_opts *o, sp_kv_type *k, sp_kv_type *v);

/* The option rows for these flags (to append to a command's cli_opt table); returns the count. */
int cli_spec_opt_rows(void *rows /* cli_opt[CLI_SPEC_OPT_ROWS] */, cli_spec_opts *o);

/* --tree N [--tree-k K] [--tree-shape dynamic|static]: token trees (docs/TREE.md) */
typedef struct {
    int nodes;         /* draft nodes per round (0: chains) */
    int k;             /* most children per node */
    const char *shape; /* "dynamic" (default) | "static" */
} cli_tree_opts;
#define CLI_TREE_OPTS_DEFAULT {0, 4, NULL}
#define CLI_TREE_OPT_ROWS 3
int cli_tree_opt_rows(void *rows /* cli_opt[CLI_TREE_OPT_ROWS] */, cli_tree_opts *o);
/* p->tree from the flags. Prints errors; returns 0/-1. */
int cli_tree_apply(const char *cmd, const cli_tree_opts *o, sp_spec_params *p);

/* Settle o->spec when --spec was not given: -md DIR alone turns speculation on with the kind its
 * config.json names (sp_drafter_kind_detect: a DSpark / DFlash / EAGLE-3 drafter, a Gemma-4
 * assistant, a draft model; a FILE.gguf is a draft model, as llama.cpp's -md takes); without
 * -md, def_kind. Prints errors; returns 0/-1. */
int cli_spec_resolve(const char *cmd, cli_spec_opts *o, const char *def_kind);

/* Build the drafter named by o->spec for `target` (NULL drafter for "none"). First sets the
 * target's numerics from --bf16-dot (sp_model_set_bf16_dot; the drafter takes the target's), so
 * call it before the target's first forward. A draft model is loaded into *draft_model (the
 * caller frees it after the drafter). Prints errors; returns 0/-1. */
int cli_make_drafter(const char *cmd, const cli_spec_opts *o, sp_model *target, const char *target_dir,
                     const sp_sample_params *sample, int max_ctx, int threads, sp_model **draft_model,
                     sp_drafter **drafter);

/* The factory's options (api/drafter_kinds.h) for these flags; spec NULL is "none". */
sp_drafter_opts cli_drafter_opts(const cli_spec_opts *o);

/* A drafter from a drafter source opened for these flags (sp_drafter_src_open, then one
 * sp_drafter_src_make for sample); the source lives until the process exits. A "draft" source's
 * model goes to *draft_model (the caller frees it after the drafter; draft_model may be NULL only
 * for other kinds). NULL with err (also for kind "none"). */
sp_drafter *cli_src_drafter(const cli_spec_opts *o, sp_model *target, const char *target_dir,
                            const sp_sample_params *sample, int max_ctx, int threads, sp_model **draft_model,
                            sp_err *err);

/* The prompt from -p TEXT (tokenized with the model's tokenizer, BOS as the model adds it) or
 * --prompt-ids; chat prompts go through cli_chat_prompt (chat_cli.h). Prints errors; returns 0/-1.
 * *ids malloc'd. */
int cli_load_prompt(const char *cmd, const char *model_dir, const char *text, const char *ids_str, int32_t **ids,
                    int *n);

/* The embedded default model directory (target/, drafter/, prompts.jsonl): $SPECULA_DEFAULT_MODEL,
 * then beside the binary (BIN/../models/default: the build tree), then its install prefix
 * (BIN/../share/specula/default), then ./models/default. Writes into buf and returns it. */
const char *cli_default_root(char *buf, size_t cap);

#endif
