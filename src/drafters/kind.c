/* kind.c — the default drafter options (kind.h); the kinds' hooks live in their own files. */
#include "drafters/kind.h"

sp_drafter_opts sp_drafter_opts_default(void) {
    return (sp_drafter_opts){.kind = NULL, .dir = NULL, .draft_max = 8, .draft_min = 0, .ngram_min = 1,
                             .ngram_max = 4, .draft_temp = 0.0f, .conf_threshold = 0.0f, .schedule = NULL,
                             .bf16_dot = 0, .suffix_bytes = 0};
}
