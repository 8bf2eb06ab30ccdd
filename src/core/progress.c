/* progress.c — see progress.h. Output goes to stderr only; SPECULA_NO_PROGRESS=1 silences it. */
#include "core/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"

void sp_progress_start(sp_progress *p, const char *label, double total, const char *unit) {
    p->label = label;
    p->unit = unit ? unit : "it";
    p->total = total;
    p->t0 = sp_time_ms();
    p->last_draw = 0;
    p->tty = isatty(2);
    p->enabled = !getenv("SPECULA_NO_PROGRESS");
}

static void draw(sp_progress *p, double done, const char *extra, int final) {
    double el = (sp_time_ms() - p->t0) / 1000.0;
    double rate = el > 0 ? done / el : 0;
    char eta[32] = "";
    if (p->total > 0 && rate > 0 && done < p->total) snprintf(eta, sizeof eta, " ETA %.0fs", (p->total - done) / rate);
    if (p->tty) {
        int w = 30, fill = p->total > 0 ? (int)(w * (done / p->total)) : 0;
        if (fill > w) fill = w;
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        fprintf(stderr, "\r%s [%s] %.0f/%.0f %s  %.1f %s/s%s %s\033[K%s", p->label, bar, done, p->total, p->unit, rate,
                p->unit, eta, extra ? extra : "", final ? "\n" : "");
    } else {
        fprintf(stderr, "%s: %.0f/%.0f %s, %.1f %s/s%s %s\n", p->label, done, p->total, p->unit, rate, p->unit, eta,
                extra ? extra : "");
    }
    fflush(stderr);
}

void sp_progress_update(sp_progress *p, double done, const char *extra) {
    if (!p->enabled) return;
    double now = sp_time_ms();
    if (now - p->last_draw < (p->tty ? 100 : 5000)) return;
    p->last_draw = now;
    draw(p, done, extra, 0);
}

void sp_progress_finish(sp_progress *p, double done, const char *extra) {
    if (!p->enabled) return;
    draw(p, done, extra, 1);
}
