/* kind.h — what a drafter kind is (docs/DRAFTER_KINDS.md): its names, its identity in a
 * checkpoint's config.json, how a loaded drafter source makes per-request drafters, and the
 * offline hooks of the kind (random checkpoint, GGUF export, training). The rows of the one
 * table of kinds live in src/api/drafter_kinds.c, above every layer a hook comes from; each
 * kind's code lives in its own files.
 *
 * The drafter options every front end knows (sp_drafter_opts) are declared here too: a kind's
 * runtime hooks read them through sp_drafter_env. */
#ifndef SPECULA_DRAFTERS_KIND_H
#define SPECULA_DRAFTERS_KIND_H

#include "decode/drafter.h"
#include "formats/export_gguf.h"
#include "formats/newdrafter.h"
#include "sample/sample.h"

typedef struct {                /* every drafter option the CLI, the server and the API know */
    const char *kind;           /* NULL: detected from dir's config.json (a FILE.gguf: a draft model) */
    const char *dir;            /* -md: the drafter's directory (draft model: also FILE.gguf) */
    int draft_max, draft_min;   /* drafts per round: 1 .. SP_SPEC_MAX_G; below draft_min none are verified */
    int ngram_min, ngram_max;   /* ngram: the n-gram lengths matched */
    float draft_temp;           /* > 0: drafts sampled at this temperature (lossless: q is reported) */
    float conf_threshold;       /* dflash / dspark: cut at the first confidence below it (0: off) */
    const char *schedule;       /* dspark: "auto" (docs/DSPARK.md §10 prefix scheduler) | NULL / "none" */
    int bf16_dot;               /* the bf16-dot numerics for the target's and the drafter's bf16 matmuls */
    size_t suffix_bytes;        /* suffix: the bound of the cross-request store (0: 64 MiB) */
} sp_drafter_opts;

/* draft_max 8, ngram 1..4, everything else off / NULL */
sp_drafter_opts sp_drafter_opts_default(void);

/* What a kind's runtime hooks are given: the source's options (kind resolved) and target. */
typedef struct {
    const sp_drafter_opts *o;
    sp_model *target;          /* borrowed: outlives the source and its drafters */
    const char *target_dir;
    int n_threads, max_ctx;    /* as given to sp_drafter_src_open */
} sp_drafter_env;

/* A checkpoint's identity, from its config.json: model_type and architectures[0] (NULL when absent). */
typedef struct {
    const char *model_type;
    const char *arch;
} sp_drafter_ident;

struct sp_tr_kind_hooks; /* the training hooks of a kind (src/train/kind_hooks.h) */

typedef struct {
    const char *name;          /* --spec NAME, sp_engine_params.drafter_kind */
    const char *alias;         /* another name for it (new-drafter --arch), or NULL */
    const char *identity;      /* what detect() accepts, in words, for error messages */
    int needs_dir;             /* 1: the kind loads files from opts.dir */

    /* ---- runtime (src/drafters/) ---- */
    /* 1 when a checkpoint with this identity is of this kind (NULL: never detected) */
    int (*detect)(const sp_drafter_ident *id);
    /* Load what every request's drafter shares into *state (NULL hook: nothing shared) and
     * check the kind's options; 0, or -1 with err. */
    int (*open)(void **state, const sp_drafter_env *env, sp_err *err);
    /* One drafter drawing with `sample` (draft temperature applied), for contexts of max_ctx. */
    sp_drafter *(*make)(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                        sp_err *err);
    void (*close)(void *state); /* NULL: nothing to free */

    /* ---- offline (NULL where the kind has none) ---- */
    /* `specula new-drafter --arch NAME`: a random checkpoint for target_dir, written into dir */
    int (*write)(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err);
    /* `specula export-gguf -m DIR --target T`: the drafter GGUF llama.cpp runs */
    int (*export_gguf)(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                       sp_err *err);
    const struct sp_tr_kind_hooks *train; /* `specula train --arch NAME` */
} sp_drafter_kind;

/* ---- each kind's hooks, in its own files -------------------------------------------------- */
/* ngram.c */
sp_drafter *sp_ngram_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                               sp_err *err);
/* suffix.c: suffix drafting over the stream and a cross-request store (the shared state), alone
 * or around another kind's drafter (`--spec KIND+suffix`: sp_suffix_wrap takes `inner`, and frees
 * it on failure) */
int sp_suffix_kind_open(void **state, const sp_drafter_env *env, sp_err *err);
sp_drafter *sp_suffix_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err);
void sp_suffix_kind_close(void *state);
sp_drafter *sp_suffix_wrap(void *state, const sp_drafter_env *env, sp_drafter *inner, sp_err *err);
/* draft_model.c: a llama / qwen3 / gemma4 causal LM (or a GGUF file) */
int sp_draft_model_kind_detect(const sp_drafter_ident *id);
int sp_draft_model_kind_open(void **state, const sp_drafter_env *env, sp_err *err);
sp_drafter *sp_draft_model_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample,
                                     int max_ctx, sp_err *err);
void sp_draft_model_kind_close(void *state);
/* assistant.c */
int sp_assistant_kind_detect(const sp_drafter_ident *id);
sp_drafter *sp_assistant_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample,
                                   int max_ctx, sp_err *err);
/* eagle3_kind.c */
int sp_eagle3_kind_detect(const sp_drafter_ident *id);
sp_drafter *sp_eagle3_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err);
/* dflash_kind.c: z-lab DFlash and DSpark / DeepSpec DFlash share one loaded checkpoint per source */
int sp_dflash_kind_detect(const sp_drafter_ident *id);
int sp_dspark_kind_detect(const sp_drafter_ident *id);
int sp_dflash_kind_open(void **state, const sp_drafter_env *env, sp_err *err);
int sp_dspark_kind_open(void **state, const sp_drafter_env *env, sp_err *err);
sp_drafter *sp_dflash_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err);
void sp_dflash_kind_close(void *state);
/* mlxbun.c: mlx-bun's own DSpark drafters (dspark.json; v1 and faithful DFlash) */
int sp_mlxbun_kind_open(void **state, const sp_drafter_env *env, sp_err *err);
sp_drafter *sp_mlxbun_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err);
void sp_mlxbun_kind_close(void *state);

#endif
