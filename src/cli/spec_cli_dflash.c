/* spec_cli_dflash.c — building a DFlash / DSpark drafter from the speculative CLI flags:
 * --spec dflash|dspark -md DIR [--draft-max B] [--conf-threshold t | --schedule auto]. */
#include "spec_cli_dflash.h"

#include <string.h>

#include "core/core.h"
#include "drafters/dflash.h"

sp_drafter *cli_make_dflash(const cli_spec_opts *o, sp_model *target, const char *target_dir,
                            const sp_sample_params *sample, sp_err *err) {
    if (!o->draft_dir) {
        sp_err_set(err, "--spec %s needs -md DRAFTER_DIR", o->spec);
        return NULL;
    }
    sp_dflash_opts dfo = sp_dflash_opts_default();
    dfo.no_draft_temps = o->draft_temp > 0; /* an explicit --draft-temp wins over draft_temps.json */
    dfo.max_drafts = o->draft_max;
    dfo.clamp_to_block = 1; /* --draft-max caps the checkpoint's block, never extends it */
    dfo.conf_threshold = o->conf_threshold;
    sp_sps_table sps;
    if (o->schedule && strcmp(o->schedule, "none")) {
        if (strcmp(o->schedule, "auto")) {
            sp_err_set(err, "--schedule %s: expected auto or none", o->schedule);
            return NULL;
        }
        if (o->conf_threshold > 0) {
            sp_err_set(err, "give either --conf-threshold or --schedule auto, not both");
            return NULL;
        }
        /* a drafter without a confidence head cannot be scheduled: say so before profiling */
        sp_drafter *probe = sp_drafter_dflash(o->draft_dir, target, sample, &dfo, err);
        sp_dflash_info pi;
        int has_conf = probe && !sp_dflash_info_get(probe, &pi) && pi.has_conf;
        sp_drafter_free(probe);
        if (!probe) return NULL;
        if (!has_conf) {
            sp_err_set(err, "%s: --schedule auto needs a drafter with a confidence head (DSpark)", o->draft_dir);
            return NULL;
        }
        char path[4300];
        if (sp_sps_cached(target, target_dir, o->draft_max + 1 <= SP_SPS_MAX ? o->draft_max + 1 : SP_SPS_MAX, &sps,
                          path, sizeof path, err))
            return NULL;
        sp_log(SP_LOG_INFO, "verify cost table (SPS by width) from %s", path);
        dfo.policy = SP_VERIFY_SCHEDULE;
        dfo.sps = &sps;
    }
    sp_drafter *d = sp_drafter_dflash(o->draft_dir, target, sample, &dfo, err);
    sp_dflash_info info;
    if (d && !strcmp(o->spec, "dspark") && (sp_dflash_info_get(d, &info) || info.kind != SP_DFLASH_DSPARK)) {
        sp_drafter_free(d);
        sp_err_set(err, "%s is a z-lab DFlash drafter: use --spec dflash", o->draft_dir);
        return NULL;
    }
    return d;
}
