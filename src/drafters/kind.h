/* kind.h — drafter kinds: detection from a checkpoint's files and the one runtime factory
 * (a drafter source loaded once, making each request's drafter). */
#ifndef SPECULA_DRAFTERS_KIND_H
#define SPECULA_DRAFTERS_KIND_H

#include "decode/drafter.h"
#include "sample/sample.h"

typedef struct {
    const char *kind;     /* NULL: detected from dir's config.json (a FILE.gguf: a draft model) */
    const char *dir;      /* -md */
    int draft_max, draft_min;
    int ngram_min, ngram_max;
    float draft_temp;     /* > 0: drafts sampled at this temperature */
    float conf_threshold; /* dflash / dspark */
    const char *schedule; /* dspark: "auto" | NULL / "none" */
    int bf16_dot;
} sp_drafter_opts;

sp_drafter_opts sp_drafter_opts_default(void);

typedef struct sp_drafter_src sp_drafter_src;

int sp_drafter_src_open(sp_drafter_src **out, const sp_drafter_opts *o, sp_model *target, const char *target_dir,
                        int n_threads, int max_ctx, sp_err *err);
sp_drafter *sp_drafter_src_make(sp_drafter_src *s, const sp_sample_params *sample, int max_ctx, sp_err *err);
const char *sp_drafter_src_kind(const sp_drafter_src *s);
void sp_drafter_src_free(sp_drafter_src *s);
int sp_drafter_kind_detect(const char *dir, const char **kind, sp_err *err);

#endif
