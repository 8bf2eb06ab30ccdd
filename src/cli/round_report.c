/* round_report.c — see round_report.h. */
#include "round_report.h"

#include <stdio.h>

void cli_round_sums_add(cli_round_sums *s, const sp_spec_stats *st) {
    for (int p = 0; p < SP_PROF_N_PHASES; p++)
        for (int q = 0; q < SP_PROF_N_PARTS; q++) s->prof.ms[p][q] += st->prof.ms[p][q];
    s->rounds += st->rounds;
    for (int r = 0; r < SP_NODRAFT_N; r++) s->nodraft[r] += st->rounds_nodraft[r];
    s->decode_ms += st->decode_ms;
}

/* ms per round ÷ plain step */
static double frac(const cli_round_sums *s, double ms, double step) {
    return s->rounds && step > 0 ? ms / s->rounds / step : 0;
}

static double phase_ms(const cli_round_sums *s, int p) {
    double t = 0;
    for (int q = 0; q < SP_PROF_N_PARTS; q++) t += s->prof.ms[p][q];
    return t;
}

json_t *cli_round_profile_json(const cli_round_sums *s, double step) {
    json_t *o = json_object(), *parts = json_object();
    json_object_set_new(o, "plain_step_ms", json_real(step));
    json_object_set_new(o, "rounds", json_integer(s->rounds));
    json_object_set_new(o, "round_ms", json_real(s->rounds ? s->decode_ms / s->rounds : 0));
    json_object_set_new(o, "round", json_real(frac(s, s->decode_ms, step)));
    json_object_set_new(o, "sum", json_real(frac(s, sp_prof_total_ms(&s->prof), step)));
    for (int p = 0; p < SP_PROF_N_PHASES; p++) {
        json_object_set_new(o, sp_prof_phase_name(p), json_real(frac(s, phase_ms(s, p), step)));
        for (int q = 0; q < SP_PROF_N_PARTS; q++) {
            if (s->prof.ms[p][q] <= 0) continue;
            char key[64];
            snprintf(key, sizeof key, "%s.%s", sp_prof_phase_name(p), sp_prof_part_name(q));
            json_object_set_new(parts, key, json_real(frac(s, s->prof.ms[p][q], step)));
        }
    }
    json_object_set_new(o, "parts", parts);
    return o;
}

json_t *cli_round_nodraft_json(const cli_round_sums *s) {
    json_t *o = json_object();
    long total = 0;
    for (int r = 0; r < SP_NODRAFT_N; r++) {
        json_object_set_new(o, sp_nodraft_reason_name(r), json_integer(s->nodraft[r]));
        total += s->nodraft[r];
    }
    json_object_set_new(o, "total", json_integer(total));
    return o;
}

void cli_round_print(const cli_round_sums *s, double step) {
    printf("%-34s", "round cost / plain step");
    for (int p = 0; p < SP_PROF_N_PHASES; p++) {
        double ph = phase_ms(s, p);
        if (ph <= 0) continue;
        printf(" %s%s %.2f (", p ? "+ " : "", sp_prof_phase_name(p), frac(s, ph, step));
        const char *sep = "";
        for (int q = 0; q < SP_PROF_N_PARTS; q++) {
            if (s->prof.ms[p][q] <= 0) continue;
            printf("%s%s %.2f", sep, sp_prof_part_name(q), frac(s, s->prof.ms[p][q], step));
            sep = ", ";
        }
        printf(")");
    }
    printf(" = %.2f (measured %.2f)\n", frac(s, sp_prof_total_ms(&s->prof), step), frac(s, s->decode_ms, step));
    long total = 0;
    for (int r = 0; r < SP_NODRAFT_N; r++) total += s->nodraft[r];
    printf("%-34s %ld of %ld", "rounds without drafts", total, s->rounds);
    const char *sep = " (";
    for (int r = 0; r < SP_NODRAFT_N; r++)
        if (s->nodraft[r]) printf("%s%s %ld", sep, sp_nodraft_reason_name(r), s->nodraft[r]), sep = ", ";
    printf("%s\n", total ? ")" : "");
}
