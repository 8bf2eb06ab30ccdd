/* test_cli_bf16dot.c — the --bf16-dot numerics through the `specula` binary: on the embedded
 * pair (bf16 Gemma-4 target, DSpark drafter) and on tiny random bf16 llama / qwen3 / gemma4
 * targets, greedy speculative output equals plain decoding in the mode; the mode changes the
 * logits (the flag takes effect) and keeps them batch-invariant (a prefill forward gives the
 * bits of token-by-token forwards). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char cli[4096];
static char tmp[] = "/tmp/specula-bf16dot-XXXXXX";

/* 1 when the two files exist, have the same size and the same bytes */
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* logits of model over ids: the default numerics vs --bf16-dot differ; --bf16-dot prefill equals
 * --bf16-dot token by token */
static void check_logits(const char *model, const char *ids, const char *tag) {
    static char out[1 << 14];
    char cmd[8192], f0[512], f1[512], f2[512];
    snprintf(f0, sizeof f0, "%s/%s.f32", tmp, tag);
    snprintf(f1, sizeof f1, "%s/%s.dot.f32", tmp, tag);
    snprintf(f2, sizeof f2, "%s/%s.dot-steps.f32", tmp, tag);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --prompt-ids %s -o %s -t 2 2>&1", cli, model, ids, f0);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "%s logits: %s", tag, out);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --prompt-ids %s -o %s -t 2 --bf16-dot 2>&1", cli, model, ids, f1);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "%s logits --bf16-dot: %s", tag, out);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --prompt-ids %s -o %s -t 1 --bf16-dot --decode-steps 2>&1", cli, model,
             ids, f2);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "%s logits --bf16-dot --decode-steps: %s", tag, out);
    CHECK(!same_file(f0, f1), "%s: --bf16-dot left the logits unchanged", tag);
    CHECK(same_file(f1, f2), "%s: --bf16-dot prefill and token-by-token logits differ", tag);
}

static void test_embedded_pair(void) {
    static char out[1 << 16];
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "SPECULA_NO_PROGRESS=1 %s run -n 24 -q --spec-always --bf16-dot -t 2 2>&1", cli);
    CHECK(harness_run(cmd, out, sizeof out) == 0, "run --bf16-dot: %s", out);
    const char *id = strstr(out, "outputs identical");
    char word[8] = "";
    CHECK(id && sscanf(id, "outputs identical %7s", word) == 1 && !strcmp(word, "yes"),
          "run --bf16-dot: outputs not identical:\n%s", out);
    check_logits("models/default/target", "2,818,5279,529,506,1535,25,1217,3", "embedded");
}

static void test_tiny_targets(void) {
    static const char *archs[] = {"llama", "qwen3", "gemma4"};
    static char a[1 << 16], b[1 << 16];
    char cmd[8192], dir[512];
    for (int i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/%s", tmp, archs[i]);
        snprintf(cmd, sizeof cmd, "%s new-model --arch %s --preset tiny --dtype bf16 --seed 5 -o %s --threads 2 2>&1", cli,
                 archs[i], dir);
        if (harness_run(cmd, a, sizeof a) != 0) {
            CHECK(0, "new-model %s: %s", archs[i], a);
            continue;
        }
        /* a repetitive prompt: the draft (the target itself) is accepted often, so verify
         * forwards of several rows decide the output */
        const char *gen = "%s generate -m %s --prompt-ids 1,2,3,4,1,2,3,4,1,2 -n 40 --ignore-eos -t 2 --bf16-dot %s 2>/dev/null";
        snprintf(cmd, sizeof cmd, gen, cli, dir, "");
        CHECK(harness_run(cmd, a, sizeof a) == 0 && strlen(a) > 40, "%s plain: %s", archs[i], a);
        char spec[600];
        snprintf(spec, sizeof spec, "--spec draft -md %s --draft-max 6 --spec-always", dir);
        snprintf(cmd, sizeof cmd, gen, cli, dir, spec);
        CHECK(harness_run(cmd, b, sizeof b) == 0 && !strcmp(a, b), "%s: speculative output differs in the mode:\n%s\n%s",
              archs[i], a, b);
        check_logits(dir, "1,2,3,4,5,6,7,8,9,10,11,12", archs[i]);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    if (!mkdtemp(tmp)) return fprintf(stderr, "mkdtemp failed\n"), 1;
    RUN(test_embedded_pair);
    RUN(test_tiny_targets);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return harness_done("test_cli_bf16dot");
}
