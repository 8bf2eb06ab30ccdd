/* prof.c — the round-cost profiler's thread-local cells (see prof.h). */
#include "core/prof.h"

#include <string.h>

#include "core/core.h"

_Thread_local sp_prof_state sp_prof_tls;

void sp_prof_start(void) {
    memset(&sp_prof_tls, 0, sizeof sp_prof_tls);
    sp_prof_tls.phase = SP_PROF_ENGINE;
    sp_prof_tls.part = SP_PROF_OTHER;
    sp_prof_tls.t = sp_time_ms();
    sp_prof_tls.on = 1;
}

void sp_prof_switch(int phase, int part) {
    double now = sp_time_ms();
    sp_prof_tls.acc.ms[sp_prof_tls.phase][sp_prof_tls.part] += now - sp_prof_tls.t;
    sp_prof_tls.t = now;
    sp_prof_tls.phase = phase;
    sp_prof_tls.part = part;
}

void sp_prof_stop(sp_prof_totals *out) {
    if (!sp_prof_tls.on) return;
    sp_prof_switch(sp_prof_tls.phase, sp_prof_tls.part);
    sp_prof_tls.on = 0;
    if (!out) return;
    for (int p = 0; p < SP_PROF_N_PHASES; p++)
        for (int q = 0; q < SP_PROF_N_PARTS; q++) out->ms[p][q] += sp_prof_tls.acc.ms[p][q];
}

const char *sp_prof_phase_name(int phase) {
    static const char *names[SP_PROF_N_PHASES] = {"engine", "draft", "verify"};
    return phase >= 0 && phase < SP_PROF_N_PHASES ? names[phase] : "?";
}

const char *sp_prof_part_name(int part) {
    static const char *names[SP_PROF_N_PARTS] = {"other", "matmul", "attn",  "lm_head",
                                                 "ctx_kv", "block", "heads", "sample"};
    return part >= 0 && part < SP_PROF_N_PARTS ? names[part] : "?";
}

double sp_prof_total_ms(const sp_prof_totals *t) {
    double s = 0;
    for (int p = 0; p < SP_PROF_N_PHASES; p++)
        for (int q = 0; q < SP_PROF_N_PARTS; q++) s += t->ms[p][q];
    return s;
}
