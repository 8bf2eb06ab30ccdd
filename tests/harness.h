/* harness.h — the minimal test harness every tests/test_*.c uses.
 *
 *   static void test_something(void) { CHECK(x == 1, "x=%d", x); }
 *   int main(void) { RUN(test_something); return harness_done("test_file"); }
 *
 * Each RUN prints "ok NAME" or "FAIL NAME" (with its time when a second or more); harness_done
 * prints "N passed, N failed" for the file's test cases and returns non-zero on any failure.
 * tests/run.sh adds them up. */
#ifndef SPECULA_HARNESS_H
#define SPECULA_HARNESS_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static int harness_case_failed, harness_passed, harness_failed;
/* The sanitizer build (ASan + UBSan) looks for memory errors, not statistical power or coverage of
 * every combination: the paths a test takes matter there, not how many times. So in that build
 * (HARNESS_SANITIZED) the statistical audits run a sixteenth of their draws (at least 100, the
 * audit's own floor) and their verdicts are not checked, and the larger grids (every draft length, every thread count,
 * training to a rising τ) run a few points of the grid, chosen to take each path at least once;
 * the optimised build runs them at full size and checks every verdict. */
#if defined(__SANITIZE_ADDRESS__)
#define HARNESS_SANITIZED 1
#define HARNESS_AUDIT_VERDICTS 0
#define HARNESS_AUDIT_DRAWS(n) ((n) / 16 > 100 ? (n) / 16 : 100)
#else
#define HARNESS_SANITIZED 0
#define HARNESS_AUDIT_VERDICTS 1
#define HARNESS_AUDIT_DRAWS(n) (n)
#endif

/* The verdict of `specula audit` run through the binary (exit status rc, output out): with
 * verdicts checked, it must say "audit: PASS" and exit 0 (want_pass) or "audit: FAIL" and exit 1;
 * in the sanitizer build only that it ran to a verdict. */
static inline int harness_audit_verdict(int rc, const char *out, int want_pass) {
    if (!HARNESS_AUDIT_VERDICTS) return (rc == 0 || rc == 1) && strstr(out, "audit: ") != NULL;
    return want_pass ? rc == 0 && strstr(out, "audit: PASS") != NULL : rc == 1 && strstr(out, "audit: FAIL") != NULL;
}

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            harness_case_failed++;                                                        \
            if (harness_case_failed <= 10) {                                              \
                fprintf(stderr, "  check failed %s:%d: %s: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                             \
                fputc('\n', stderr);                                                      \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* SPECULA_TESTS=name,name,...: run only those cases (the others are skipped silently) */
static inline int harness_selected(const char *name) {
    const char *only = getenv("SPECULA_TESTS");
    if (!only || !*only) return 1;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

/* wall-clock seconds; a case that took a second or more says how long (" (12.3 s)"), so a
 * slow CI log shows where its time went */
static inline double harness_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static inline void harness_duration(char *out, size_t cap, double secs) {
    if (secs >= 1.0) snprintf(out, cap, " (%.1f s)", secs);
}

#define RUN(fn)                                                                           \
    do {                                                                                  \
        if (!harness_selected(#fn)) break;                                                \
        harness_case_failed = 0;                                                          \
        double harness_t0 = harness_now();                                                \
        fn();                                                                             \
        char harness_took[32] = "";                                                       \
        harness_duration(harness_took, sizeof harness_took, harness_now() - harness_t0);  \
        if (harness_case_failed) {                                                        \
            harness_failed++;                                                             \
            printf("FAIL %s (%d checks failed)%s\n", #fn, harness_case_failed, harness_took); \
        } else {                                                                          \
            harness_passed++;                                                             \
            printf("ok %s%s\n", #fn, harness_took);                                       \
        }                                                                                 \
        fflush(stdout);                                                                   \
    } while (0)

static inline int harness_done(const char *file) {
    printf("%s: %d passed, %d failed\n", file, harness_passed, harness_failed);
    return harness_failed ? 1 : 0;
}

/* the specula binary beside a test program: BUILD/tests/test_x -> BUILD/tests/../specula */
static inline void harness_cli_path(char *out, size_t cap, const char *argv0) {
    snprintf(out, cap, "%s", argv0);
    char *slash = strrchr(out, '/');
    if (slash) snprintf(slash, cap - (size_t)(slash - out), "/../specula");
}
/* deterministic random inputs: uniform in [-a, a], never all-zero */
static inline void harness_fill(float *x, size_t n, float a, unsigned seed) {
    unsigned long long s = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x[i] = a * (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}
/* run a shell command, capture its stdout (up to cap − 1 bytes, NUL-terminated); returns the
 * exit status, or -1 when it could not run or did not exit normally */
static inline int harness_run(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
/* harness_run on a printf-formatted command (up to 16 KiB) */
static inline int harness_runf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int harness_runf(char *out, size_t cap, const char *fmt, ...) {
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return harness_run(cmd, out, cap);
}
/* write text to dir/name (a test's fixture file) */
static inline void harness_write_file(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}
/* 1 when files a and b both exist and hold the same bytes */
static inline int harness_same_file(const char *a, const char *b) {
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    while (same) {
        int cx = getc(x), cy = getc(y);
        if (cx != cy) same = 0;
        else if (cx == EOF) break;
    }
    if (x) fclose(x);
    if (y) fclose(y);
    return same;
}

#endif
