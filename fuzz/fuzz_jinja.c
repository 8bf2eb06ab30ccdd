/* fuzz_jinja.c — a chat template and its variables through the Jinja engine (sp_jinja_render with
 * tight limits): the input is the template, then optionally a NUL byte and a JSON object of
 * variables; without one the template renders a fixed conversation (system, user, assistant,
 * user; add_generation_prompt, bos_token). A rendered text must be as long as it says.
 *
 * Cost budget: whatever the template, one render stays inside the limits it is given. The step
 * limit bounds its time (an input over JINJA_FUZZ_MS is a finding, so work the step counter does
 * not see, such as a quadratic lookup, shows up) and the arena cap its memory (an input that raises
 * the process's peak resident size by more than JINJA_FUZZ_RSS_MB is a finding). */
#include <jansson.h>
#include <sys/resource.h>
#include <time.h>

#include "chat/jinja.h"
#include "fuzz.h"

static json_t *conversation;

/* 200000 steps take well under 100 ms even under ASan; the budget leaves room for a loaded machine */
#define JINJA_FUZZ_MS 3000.0
/* the limits below allow 32 MiB of arena and 1 MiB of output; four times that, for the output's
 * growth by doubling and the sanitizers' redzones */
#define JINJA_FUZZ_RSS_MB 132

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static long peak_rss_mb(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) ? 0 : u.ru_maxrss / 1024;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    conversation = json_loads(
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
        " {\"role\": \"user\", \"content\": \"Hi \\u00fc <b>\"},"
        " {\"role\": \"assistant\", \"content\": \"Hello.\"},"
        " {\"role\": \"user\", \"content\": \"2+2?\"}],"
        " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
        0, NULL);
    if (!conversation) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tl = nul ? (size_t)(nul - data) : size;
    json_t *ctx = conversation;
    if (nul) {
        ctx = json_loadb((const char *)nul + 1, size - tl - 1, 0, NULL);
        if (!ctx) return 0;
    }
    /* small limits: a hostile template ends in an error quickly instead of a 10 s timeout */
    jinja_limits lim = {.max_output = 1 << 20, .max_memory = 32u << 20, .max_steps = 200000};
    char *out = NULL;
    size_t n = 0;
    sp_err err;
    long rss0 = peak_rss_mb();
    double t0 = now_ms();
    int rc = sp_jinja_render((const char *)data, tl, "fuzz", ctx, &lim, &out, &n, &err);
    double ms = now_ms() - t0;
    long grew = peak_rss_mb() - rss0;
    if (ms > JINJA_FUZZ_MS || grew > JINJA_FUZZ_RSS_MB) {
        fprintf(stderr, "fuzz_jinja: over budget: %.0f ms (budget %.0f), peak RSS +%ld MiB (budget %d)\n", ms,
                JINJA_FUZZ_MS, grew, JINJA_FUZZ_RSS_MB);
        abort();
    }
    if (rc == 0) {
        if (!out || out[n] != 0) abort();
        fuzz_touch(out, n);
        free(out);
    }
    if (ctx != conversation) json_decref(ctx);
    return 0;
}
