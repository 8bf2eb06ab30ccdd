/* dflash_kind.c — the dflash (z-lab DFlashDraftModel) and dspark (DeepSpec Qwen3DSparkModel /
 * Gemma4DSparkModel, with or without the Markov and confidence heads) drafter kinds (kind.h).
 *
 * A source loads the checkpoint once, as a prototype drafter built with the source's options
 * (drafts capped by draft_max, the confidence threshold, the verify schedule); every request's
 * drafter is a clone sharing its weights (dflash_batch.c), so drafters of one source can propose
 * in one batched forward. --schedule auto profiles the target's verify cost by width first
 * (decode/schedule.h), which needs a confidence head. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "drafters/dflash.h"
#include "drafters/kind.h"

typedef struct {
    sp_dflash_opts dfo;
    sp_sps_table sps;  /* the verify cost table of --schedule auto */
    sp_drafter *proto; /* the loaded checkpoint the clones share */
} df_src;

int sp_dflash_kind_detect(const sp_drafter_ident *id) { return id->arch && !strcmp(id->arch, "DFlashDraftModel"); }

int sp_dspark_kind_detect(const sp_drafter_ident *id) {
    return id->arch && (!strcmp(id->arch, "Qwen3DSparkModel") || !strcmp(id->arch, "Gemma4DSparkModel"));
}

/* --schedule auto: check that the checkpoint has a confidence head, then profile (or read the
 * cached) verify cost table, and have the prototype schedule by it */
static int schedule_setup(df_src *s, const sp_drafter_env *env, const sp_sample_params *ds, sp_err *err) {
    const sp_drafter_opts *o = env->o;
    if (strcmp(o->schedule, "auto")) return sp_err_set(err, "--schedule %s: expected auto or none", o->schedule);
    if (o->conf_threshold > 0) return sp_err_set(err, "give either --conf-threshold or --schedule auto, not both");
    /* a drafter without a confidence head cannot be scheduled: say so before profiling */
    sp_drafter *probe = sp_drafter_dflash(o->dir, env->target, ds, &s->dfo, err);
    sp_dflash_info pi;
    int has_conf = probe && !sp_dflash_info_get(probe, &pi) && pi.has_conf;
    sp_drafter_free(probe);
    if (!probe) return -1;
    if (!has_conf)
        return sp_err_set(err, "%s: --schedule auto needs a drafter with a confidence head (DSpark)", o->dir);
    char path[4300];
    int max_b = o->draft_max + 1 <= SP_SPS_MAX ? o->draft_max + 1 : SP_SPS_MAX;
    if (sp_sps_cached(env->target, env->target_dir, max_b, &s->sps, path, sizeof path, err)) return -1;
    sp_log(SP_LOG_INFO, "verify cost table (SPS by width) from %s", path);
    s->dfo.policy = SP_VERIFY_SCHEDULE;
    s->dfo.sps = &s->sps;
    return 0;
}

static int df_open(void **state, const sp_drafter_env *env, int dspark_only, sp_err *err) {
    const sp_drafter_opts *o = env->o;
    df_src *s = calloc(1, sizeof *s);
    if (!s) return sp_err_set(err, "dflash: out of memory");
    s->dfo = sp_dflash_opts_default();
    s->dfo.no_draft_temps = o->draft_temp > 0; /* an explicit draft temperature wins over draft_temps.json */
    s->dfo.max_drafts = o->draft_max;
    s->dfo.clamp_to_block = 1; /* draft_max caps the checkpoint's block, never extends it */
    s->dfo.conf_threshold = o->conf_threshold;
    sp_sample_params ds = sp_sample_params_default();
    if (o->draft_temp > 0) ds.temperature = o->draft_temp;
    if (o->schedule && strcmp(o->schedule, "none") && schedule_setup(s, env, &ds, err)) goto fail;
    s->proto = sp_drafter_dflash(o->dir, env->target, &ds, &s->dfo, err);
    if (!s->proto) goto fail;
    sp_dflash_info info;
    if (dspark_only && (sp_dflash_info_get(s->proto, &info) || info.kind != SP_DFLASH_DSPARK)) {
        sp_err_set(err, "%s is a z-lab DFlash drafter: use --spec dflash", o->dir);
        goto fail;
    }
    *state = s;
    return 0;
fail:
    sp_dflash_kind_close(s);
    return -1;
}

int sp_dflash_kind_open(void **state, const sp_drafter_env *env, sp_err *err) { return df_open(state, env, 0, err); }

int sp_dspark_kind_open(void **state, const sp_drafter_env *env, sp_err *err) { return df_open(state, env, 1, err); }

sp_drafter *sp_dflash_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err) {
    const df_src *s = state;
    return sp_dflash_clone(s->proto, sample, err);
}

void sp_dflash_kind_close(void *state) {
    df_src *s = state;
    if (!s) return;
    sp_drafter_free(s->proto);
    free(s);
}
