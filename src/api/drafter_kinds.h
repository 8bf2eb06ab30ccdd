/* drafter_kinds.h — the one table of drafter kinds (rows in drafter_kinds.c, the row type in
 * drafters/kind.h) and the one runtime factory every front end builds drafters with: a drafter
 * source, loaded once (a draft model, a DFlash / DSpark checkpoint that requests clone, ...),
 * makes each request's drafter for its sampling parameters (drafter_src.c). docs/DRAFTER_KINDS.md. */
#ifndef SPECULA_API_DRAFTER_KINDS_H
#define SPECULA_API_DRAFTER_KINDS_H

#include "drafters/kind.h"

/* The table, in detection order (the first row whose detect() accepts a config.json wins). */
extern const sp_drafter_kind sp_drafter_kinds[];
extern const int sp_drafter_n_kinds;

/* The row named `name` (its name or alias), or NULL. */
const sp_drafter_kind *sp_drafter_kind_find(const char *name);
/* "none, ngram, dflash, ...": every kind's name, for messages and --help, written into buf (returned). */
const char *sp_drafter_kind_names(char *buf, size_t cap);

/* The kind a drafter directory holds, from its config.json (model_type, architectures[0]); a
 * regular file (FILE.gguf) is a draft model. *kind: a row's name (static). A missing config.json
 * or an identity no kind claims is -1 with a message naming the file and what it says. */
int sp_drafter_kind_detect(const char *dir, const char **kind, sp_err *err);

/* `specula export-gguf -m DIR --target T`: the drafter's kind detected, then its export hook
 * (formats/export_drafter.h). A kind without one is an error naming it. 0, or -1 with err. */
int sp_drafter_export_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                           sp_err *err);

/* `specula train --arch NAME`: the network (a tr_arch of train/drafter_net.h) of the training
 * variant NAME some kind lists in its training hooks (train/kind_hooks.h). An unknown name is -1
 * with a message listing every variant. */
int sp_drafter_train_arch(const char *name, int *arch, sp_err *err);

typedef struct sp_drafter_src sp_drafter_src;

/* Load what every request's drafter shares and validate the options and the files now (one
 * drafter is built at once, so a bad -md fails here, not at the first request). o->kind NULL:
 * detected from o->dir (sp_drafter_kind_detect), "none" when there is no o->dir either; kind
 * "none" gives *out = NULL and 0. Sets the target's numerics from o->bf16_dot first (drafters take
 * the target's), so call it before the target's first forward. target and target_dir are borrowed
 * and must outlive the source; the strings of *o are copied. max_ctx: the context the validation
 * drafter is built for. Free with sp_drafter_src_free after every drafter it made. 0, or -1 with err. */
int sp_drafter_src_open(sp_drafter_src **out, const sp_drafter_opts *o, sp_model *target, const char *target_dir,
                        int n_threads, int max_ctx, sp_err *err);

/* One request's drafter, drawing with `sample` (with o->draft_temp > 0: at that temperature),
 * for contexts of max_ctx positions (a draft model's own KV cache). The caller frees it with
 * sp_drafter_free before freeing s. Drafters of one source may run on one thread at a time
 * (they share the source's buffers only read-only, but a DFlash / DSpark batch shares scratch).
 * NULL with err. */
sp_drafter *sp_drafter_src_make(sp_drafter_src *s, const sp_sample_params *sample, int max_ctx, sp_err *err);

/* The kind's name ("ngram", "dspark", ...); "none" for s NULL. */
const char *sp_drafter_src_kind(const sp_drafter_src *s);

/* The draft model a "draft" source loaded, handed to the caller, who frees it after every drafter
 * of s and after s; NULL for other kinds. After it, s makes no more drafters. */
sp_model *sp_drafter_src_take_model(sp_drafter_src *s);

void sp_drafter_src_free(sp_drafter_src *s);

#endif
