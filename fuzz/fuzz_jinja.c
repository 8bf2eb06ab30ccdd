/* fuzz_jinja.c — a chat template and its variables through the Jinja engine (sp_jinja_render with
 * tight limits): the input is the template, then optionally a NUL byte and a JSON object of
 * variables; without one the template renders a fixed conversation (system, user, assistant,
 * user; add_generation_prompt, bos_token). A rendered text must be as long as it says. */
#include <jansson.h>

#include "chat/jinja.h"
#include "fuzz.h"

static json_t *conversation;

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
    if (sp_jinja_render((const char *)data, tl, "fuzz", ctx, &lim, &out, &n, &err) == 0) {
        if (!out || out[n] != 0) abort();
        fuzz_touch(out, n);
        free(out);
    }
    if (ctx != conversation) json_decref(ctx);
    return 0;
}
