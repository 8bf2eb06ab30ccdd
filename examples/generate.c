/* generate.c — a program outside specula that links the installed library through pkg-config:
 *
 *     cc generate.c $(pkg-config --cflags --libs specula) -o generate
 *     ./generate MODEL_DIR [DRAFTER_DIR] ["prompt text"]
 *
 * It generates a continuation of the prompt twice — plain decoding, then speculative decoding
 * with the drafter — streams the speculative text to stdout, prints both runs' figures to
 * stderr, and exits 0 only when the two outputs are the same tokens (greedy speculative decoding
 * is lossless: bit-identical to plain decoding). */
#include <specula.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_piece(void *ctx, int32_t token, const char *piece, size_t len) {
    (void)ctx;
    (void)token;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return 0; /* keep going */
}

static int run(const char *model, const char *drafter, const char *text, int stream, int32_t **out, int *n_out,
               sp_stats *st) {
    sp_engine_params ep = sp_engine_params_default();
    ep.model = model;
    ep.drafter = drafter; /* NULL: plain decoding */
    sp_engine *e;
    sp_err err;
    if (sp_engine_load(&e, &ep, &err)) {
        fprintf(stderr, "generate: %s\n", err.msg);
        return -1;
    }
    int32_t *ids = NULL;
    int n = 0, rc = -1;
    if (sp_engine_tokenize(e, text, 1, 0, &ids, &n, &err) == 0) {
        sp_request rq = sp_request_default();
        rq.max_tokens = 48;
        if (stream) rq.on_text = print_piece;
        rc = sp_engine_generate(e, ids, n, &rq, out, n_out, st, &err);
    }
    if (rc) fprintf(stderr, "generate: %s\n", err.msg);
    else fprintf(stderr, "%s: %d tokens, drafter %s, tau %.2f, %.1f tok/s, stop %s\n", drafter ? "speculative" : "plain",
                 st->generated, sp_engine_drafter_kind(e), st->tau, st->decode_tok_per_s, st->stop);
    free(ids);
    sp_engine_free(e);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [DRAFTER_DIR] [PROMPT]\n", argv[0]);
        return 2;
    }
    const char *model = argv[1], *drafter = argc > 2 ? argv[2] : NULL;
    /* the embedded model is a tiny Python code model: it continues code, so the default prompt is code */
    const char *text = argc > 3 ? argv[3] : "class Stack:\n    def __init__(self):\n        self.";
    fprintf(stderr, "libspecula %s\n", sp_version());
    int32_t *plain = NULL, *spec = NULL;
    int n_plain = 0, n_spec = 0;
    sp_stats st;
    if (run(model, NULL, text, 0, &plain, &n_plain, &st)) return 1;
    if (run(model, drafter, text, 1, &spec, &n_spec, &st)) return 1;
    printf("\n");
    int same = n_plain == n_spec && !memcmp(plain, spec, (size_t)n_plain * sizeof *plain);
    fprintf(stderr, "outputs identical: %s\n", same ? "yes" : "NO");
    free(plain);
    free(spec);
    return same ? 0 : 1;
}
