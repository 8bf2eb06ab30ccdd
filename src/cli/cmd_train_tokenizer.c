/* cmd_train_tokenizer.c — `specula train-tokenizer`: train a SentencePiece-style BPE with
 * byte fallback (Gemma's family) on text files and write a tokenizer.json.
 *
 *   specula train-tokenizer -f FILE [FILE...] --vocab-size N -o tokenizer.json
 *                           [--coverage 0.9995] [--max-token-chars 16]
 *
 * The result loads with `specula tokenize --tokenizer tokenizer.json`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: specula train-tokenizer -f FILE [FILE...] --vocab-size N -o tokenizer.json "
               "[--coverage 0.9995] [--max-token-chars 16]\n");
}

int cmd_train_tokenizer(int argc, char **argv) {
    const char **files = calloc((size_t)argc, sizeof *files), *out = NULL;
    int n_files = 0;
    tok_train_opts o = {.vocab_size = 0, .char_coverage = 0.9995, .max_token_chars = 16, .log_progress = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            while (i + 1 < argc && argv[i + 1][0] != '-') files[n_files++] = argv[++i];
        } else if (!strcmp(a, "--vocab-size") && i + 1 < argc) {
            o.vocab_size = atoi(argv[++i]);
        } else if (!strcmp(a, "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(a, "--coverage") && i + 1 < argc) {
            o.char_coverage = atof(argv[++i]);
        } else if (!strcmp(a, "--max-token-chars") && i + 1 < argc) {
            o.max_token_chars = atoi(argv[++i]);
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(files);
            return 0;
        } else {
            fprintf(stderr, "specula: error: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            free(files);
            return 2;
        }
    }
    if (!n_files || !out || o.vocab_size <= 0) {
        fprintf(stderr, "specula: error: -f FILE..., --vocab-size N and -o OUT are required\n");
        usage(stderr);
        free(files);
        return 2;
    }
    char **texts = calloc((size_t)n_files, sizeof *texts);
    size_t *lens = calloc((size_t)n_files, sizeof *lens);
    sp_err err = {0};
    int rc = 0;
    for (int i = 0; i < n_files && !rc; i++)
        if (sp_read_file(files[i], &texts[i], &lens[i], &err)) rc = 1;
    if (!rc && sp_tok_train_bpe((const char *const *)texts, lens, n_files, &o, out, &err)) rc = 1;
    if (rc) fprintf(stderr, "specula: error: %s\n", err.msg);
    for (int i = 0; i < n_files; i++) free(texts[i]);
    free(texts);
    free(lens);
    free(files);
    return rc;
}
