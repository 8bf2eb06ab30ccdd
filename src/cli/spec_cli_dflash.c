/* spec_cli_dflash.c — a DFlash / DSpark drafter from the speculative CLI flags
 * (--spec dflash|dspark -md DIR [--draft-max B] [--conf-threshold t | --schedule auto]), built by
 * the drafter factory (api/drafter_kinds.h) through cli_src_drafter. */
#include "spec_cli_dflash.h"

#include <string.h>

sp_drafter *cli_make_dflash(const cli_spec_opts *o, sp_model *target, const char *target_dir,
                            const sp_sample_params *sample, sp_err *err) {
    if (!o->spec || (strcmp(o->spec, "dflash") && strcmp(o->spec, "dspark"))) {
        sp_err_set(err, "--spec %s is not a DFlash / DSpark drafter", o->spec ? o->spec : "none");
        return NULL;
    }
    return cli_src_drafter(o, target, target_dir, sample, 0, 1, NULL, err);
}
