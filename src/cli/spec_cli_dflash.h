/* spec_cli_dflash.h — a DFlash / DSpark drafter from the --spec flags (spec_cli_dflash.c). */
#ifndef SPECULA_CLI_SPEC_DFLASH_H
#define SPECULA_CLI_SPEC_DFLASH_H

#include "spec_cli.h"

/* Load the DFlash / DSpark drafter in o->draft_dir for target. Returns NULL with err. */
sp_drafter *cli_make_dflash(const cli_spec_opts *o, sp_model *target, const char *target_dir,
                            const sp_sample_params *sample, sp_err *err);

#endif
