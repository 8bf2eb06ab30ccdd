/* prof.h — a per-thread round-cost profiler: where the time of a speculative round goes.
 *
 * Time is charged to one (phase, part) cell at a time: the phase says whose work it is (the
 * engine's, the drafter's, the target's verify), the part what kind (a matmul, attention, an LM
 * head, a drafter's heads...). Switching the cell charges the time since the last switch to the
 * cell being left, so the cells partition the wall time between sp_prof_start and sp_prof_stop
 * exactly: nothing is counted twice and nothing falls between hooks (docs/ROUND_COST.md).
 *
 * The state is thread-local: the thread that runs the loop profiles itself, and a pool's workers
 * (which run shares of a kernel the caller is waiting on) are never touched. When profiling is off
 * each hook is one thread-local load and a branch; nothing is timed.
 *
 * Hooks nest by restoring what they replaced:
 *     int tok = sp_prof_enter(SP_PROF_LM_HEAD);  ...  sp_prof_leave(tok);
 * A kernel's hook uses sp_prof_enter_kernel, which labels only time that nothing more specific
 * claims (the part is OTHER): a matmul inside a drafter's heads stays "heads". */
#ifndef SPECULA_PROF_H
#define SPECULA_PROF_H

typedef enum { SP_PROF_ENGINE, SP_PROF_DRAFT, SP_PROF_VERIFY, SP_PROF_N_PHASES } sp_prof_phase;

typedef enum {
    SP_PROF_OTHER,   /* norms, embeddings, element-wise work, bookkeeping */
    SP_PROF_MATMUL,  /* projections (kernel hook) */
    SP_PROF_ATTN,    /* attention over the cache (kernel hook) */
    SP_PROF_LM_HEAD, /* hidden → vocabulary logits (+ soft-cap) */
    SP_PROF_CTX_KV,  /* a block drafter's context K/V injection from the target's taps */
    SP_PROF_BLOCK,   /* a block drafter's block forward (its layers) */
    SP_PROF_HEADS,   /* a block drafter's Markov / confidence heads */
    SP_PROF_SAMPLE,  /* logits → probabilities, drawing, the acceptance rule */
    SP_PROF_N_PARTS
} sp_prof_part;

typedef struct {
    double ms[SP_PROF_N_PHASES][SP_PROF_N_PARTS];
} sp_prof_totals;

typedef struct {
    int on, phase, part;
    double t; /* when the current cell began (ms, sp_time_ms clock) */
    sp_prof_totals acc;
} sp_prof_state;

extern _Thread_local sp_prof_state sp_prof_tls;

/* Start profiling on this thread (cells zeroed, phase ENGINE, part OTHER). */
void sp_prof_start(void);
/* Stop profiling on this thread; adds the cells' totals into *out (may be NULL). */
void sp_prof_stop(sp_prof_totals *out);
/* Charge the time so far to the current cell and make (phase, part) current. */
void sp_prof_switch(int phase, int part);

/* Enter a phase (part OTHER); returns a token for sp_prof_phase_leave, or -1 when off. */
static inline int sp_prof_phase_enter(int phase) {
    if (!sp_prof_tls.on) return -1;
    int tok = sp_prof_tls.phase * SP_PROF_N_PARTS + sp_prof_tls.part;
    sp_prof_switch(phase, SP_PROF_OTHER);
    return tok;
}
static inline void sp_prof_phase_leave(int tok) {
    if (tok >= 0 && sp_prof_tls.on) sp_prof_switch(tok / SP_PROF_N_PARTS, tok % SP_PROF_N_PARTS);
}
/* Enter a part of the current phase; returns the part it replaced, or -1 when off. */
static inline int sp_prof_enter(int part) {
    if (!sp_prof_tls.on) return -1;
    int tok = sp_prof_tls.part;
    sp_prof_switch(sp_prof_tls.phase, part);
    return tok;
}
/* Enter a kernel's part only where the current part is OTHER; -1 (nothing to undo) otherwise. */
static inline int sp_prof_enter_kernel(int part) {
    if (!sp_prof_tls.on || sp_prof_tls.part != SP_PROF_OTHER) return -1;
    sp_prof_switch(sp_prof_tls.phase, part);
    return SP_PROF_OTHER;
}
static inline void sp_prof_leave(int tok) {
    if (tok >= 0 && sp_prof_tls.on) sp_prof_switch(sp_prof_tls.phase, tok);
}

/* Names for reports: "engine", "draft", "verify"; "other", "matmul", "attn", "lm_head", "ctx_kv",
 * "block", "heads", "sample". */
const char *sp_prof_phase_name(int phase);
const char *sp_prof_part_name(int part);
/* The sum of every cell. */
double sp_prof_total_ms(const sp_prof_totals *t);

#endif
