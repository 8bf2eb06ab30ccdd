/* kind_hooks.h — the training hooks of a drafter kind (a row of the table of kinds,
 * src/api/drafter_kinds.c): each `specula train --arch NAME` variant the kind trains, the
 * network it is (tr_arch), and the function that sizes the drafter for a target and writes the
 * config.json of its checkpoints. Each kind defines its hooks beside its trainer code. */
#ifndef SPECULA_TRAIN_KIND_HOOKS_H
#define SPECULA_TRAIN_KIND_HOOKS_H

#include "train/trainer.h"

typedef struct {
    const char *name; /* `specula train --arch NAME` */
    tr_arch arch;
    /* the drafter's dims and its checkpoint's config.json (sp_tr_drafter_dims' contract) */
    int (*dims)(const tr_train_cfg *c, const sp_model *target, int m, const int *taps, tr_dims *d,
                char **config_json, sp_err *err);
} sp_tr_variant;

struct sp_tr_kind_hooks {
    int n;
    sp_tr_variant v[2];
};

extern const struct sp_tr_kind_hooks sp_tr_hooks_dflash; /* trainer.c: dflash-zlab */
extern const struct sp_tr_kind_hooks sp_tr_hooks_dspark; /* trainer.c: dspark, dflash (DeepSpec, no heads) */
extern const struct sp_tr_kind_hooks sp_tr_hooks_eagle3; /* eagle3_train.c: eagle3 */

#endif
