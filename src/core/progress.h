/* progress.h — a progress bar for long work (regen, training, benchmarks) on stderr: a redrawn
 * bar with rate and ETA on a TTY, a plain line every few seconds otherwise. */
#ifndef SPECULA_PROGRESS_H
#define SPECULA_PROGRESS_H

typedef struct {
    const char *label;
    const char *unit;  /* e.g. "tok" */
    double total;      /* units of work; 0 = unknown */
    double t0, last_draw;
    int tty;
    int enabled;
} sp_progress;

void sp_progress_start(sp_progress *p, const char *label, double total, const char *unit);
/* done units so far; rate_units: units/s for the rate display (e.g. tokens), 0 = done/elapsed */
void sp_progress_update(sp_progress *p, double done, const char *extra);
void sp_progress_finish(sp_progress *p, double done, const char *extra);

#endif
