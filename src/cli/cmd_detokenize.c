/* cmd_detokenize.c — `specula detokenize`: token ids -> text on stdout.
 *
 *   specula detokenize (-m DIR | --tokenizer FILE.json | --vocab FILE.gguf) --ids 1,2,3
 *                      [--skip-special] [--stream]
 *
 * Ids may be separated by commas and/or spaces. --stream decodes through the streaming
 * decoder (one id at a time), which must print the same text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_tok.h"
#include "core/core.h"

static void usage(FILE *f) {
    fprintf(f, "usage: specula detokenize (-m DIR | --tokenizer FILE.json | --vocab FILE.gguf) "
               "--ids 1,2,3 [--skip-special] [--stream]\n");
}

/* "1,2 3" -> *ids[*n] (malloc'd); 0, 2 (an entry is not a token id) or 1 (out of memory),
 * the error printed */
static int parse_id_list(const char *list, int32_t **out, int *n_out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    for (const char *p = list; ids && *p;) {
        if (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t') {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "specula: error: --ids: '%.20s' is not a token id\n", p);
            free(ids);
            return 2;
        }
        if (n == cap) ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
        if (ids) ids[n++] = (int32_t)v;
        p = end;
    }
    if (!ids) {
        fprintf(stderr, "specula: error: out of memory\n");
        return 1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* the text of ids[n] on stdout, whole or through the streaming decoder, then a newline; 0 or 1 */
static int print_text(tok_tokenizer *t, const int32_t *ids, int n, int flags, int stream) {
    int rc = 0;
    sp_err err = {0};
    if (stream) {
        tok_stream *s = sp_tok_stream_new_ex(t, flags);
        char out[256];
        for (int i = 0; i < n && rc == 0; i++) {
            int w = sp_tok_stream_push(s, ids[i], out, sizeof out);
            if (w < 0) {
                fprintf(stderr, "specula: error: token id %d is not in the vocabulary\n", ids[i]);
                rc = 1;
            } else {
                fwrite(out, 1, (size_t)w, stdout);
                fflush(stdout);
            }
        }
        int w;
        while (rc == 0 && (w = sp_tok_stream_flush(s, out, sizeof out)) > 0) fwrite(out, 1, (size_t)w, stdout);
        sp_tok_stream_free(s);
    } else {
        char *text;
        if (sp_tok_decode_ex(t, ids, n, flags, &text, &err)) {
            fprintf(stderr, "specula: error: %s\n", err.msg);
            rc = 1;
        } else {
            fputs(text, stdout);
            free(text);
        }
    }
    if (rc == 0) putchar('\n');
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    cli_tok_source src = {0};
    const char *list = NULL;
    int flags = 0, stream = 0;
    for (int i = 1; i < argc; i++) {
        int r = cli_tok_parse_flag(&src, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--ids") && i + 1 < argc) list = argv[++i];
        else if (!strcmp(argv[i], "--skip-special")) flags |= TOK_DECODE_SKIP_SPECIAL;
        else if (!strcmp(argv[i], "--stream")) stream = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "specula: error: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!list) {
        fprintf(stderr, "specula: error: --ids is required\n");
        return 2;
    }
    int32_t *ids = NULL;
    int n = 0;
    int rc = parse_id_list(list, &ids, &n);
    if (rc) return rc;
    tok_tokenizer *t = cli_tok_load(&src);
    if (!t) {
        free(ids);
        return 1;
    }
    rc = print_text(t, ids, n, flags, stream);
    sp_tok_free(t);
    free(ids);
    return rc;
}
