/* cmd_tokenize.c — `specula tokenize`: text -> token ids, like llama.cpp's llama-tokenize.
 *
 *   specula tokenize (-m DIR | --tokenizer FILE.json | --vocab FILE.gguf) (-p TEXT | -f FILE)
 *                    [--no-bos] [--no-parse-special] [--json] [--bench]
 *
 * Prints the ids space-separated on one line (--json: a JSON array). By default BOS is added
 * when the model adds one and special-token text is parsed as special. --bench instead
 * prints the load time and the encode throughput (MB/s, one thread) on the given text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_tok.h"
#include "core/core.h"

int cli_tok_parse_flag(cli_tok_source *src, int argc, char **argv, int *i) {
    const char *a = argv[*i], **dst = NULL;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) dst = &src->model_dir;
    else if (!strcmp(a, "--tokenizer")) dst = &src->json;
    else if (!strcmp(a, "--vocab")) dst = &src->gguf;
    else return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "specula: error: %s needs a value\n", a);
        return -1;
    }
    *dst = argv[++*i];
    return 1;
}

tok_tokenizer *cli_tok_load(const cli_tok_source *src) {
    sp_err err = {0};
    tok_tokenizer *t = NULL;
    int given = !!src->model_dir + !!src->json + !!src->gguf;
    if (given != 1) {
        fprintf(stderr, "specula: error: give exactly one of -m DIR, --tokenizer FILE.json, --vocab FILE.gguf\n");
        return NULL;
    }
    if (src->model_dir && !sp_file_exists(src->model_dir)) {
        fprintf(stderr, "specula: error: -m %s: no such file or directory (-m takes a model directory or a FILE.gguf)\n",
                src->model_dir);
        return NULL;
    }
    if (src->json) t = sp_tok_load_json(src->json, &err);
    else if (src->gguf) t = sp_tok_load_gguf(src->gguf, &err);
    else {
        size_t n = strlen(src->model_dir);
        t = n > 5 && !strcmp(src->model_dir + n - 5, ".gguf") ? sp_tok_load_gguf(src->model_dir, &err)
                                                               : sp_tok_load_dir(src->model_dir, &err);
    }
    if (!t) fprintf(stderr, "specula: error: %s\n", err.msg);
    return t;
}

static void usage(FILE *f) {
    fprintf(f, "usage: specula tokenize (-m DIR | --tokenizer FILE.json | --vocab FILE.gguf) "
               "(-p TEXT | -f FILE) [--no-bos] [--no-parse-special] [--json] [--bench]\n");
}

/* CPU time of this process in ms: on a shared machine wall time overstates the cost */
static double cpu_ms(void) { return (double)clock() * 1000.0 / CLOCKS_PER_SEC; }

static int bench(tok_tokenizer *t, const char *text, size_t len, double load_ms, double load_cpu_ms,
                 int add_bos, int ps) {
    sp_err err = {0};
    int32_t *ids;
    int n = 0, reps = 0;
    double t0 = sp_time_ms(), c0 = cpu_ms(), t1;
    long long tokens = 0;
    do { /* at least 1 s and 3 passes */
        if (sp_tok_encode(t, text, len, add_bos, ps, &ids, &n, &err)) {
            fprintf(stderr, "specula: error: %s\n", err.msg);
            return 1;
        }
        free(ids);
        tokens += n;
        reps++;
        t1 = sp_time_ms();
    } while (t1 - t0 < 1000.0 || reps < 3);
    double s = (t1 - t0) / 1000.0, cs = (cpu_ms() - c0) / 1000.0;
    printf("load %.0f ms (cpu %.0f ms); encode %.2f MB/s (cpu %.2f MB/s), %.0f tokens/s "
           "(%zu bytes x %d passes, %.2f bytes/token)\n",
           load_ms, load_cpu_ms, (double)len * reps / s / 1e6, cs > 0 ? (double)len * reps / cs / 1e6 : 0.0,
           (double)tokens / s, len, reps, n ? (double)len / n : 0.0);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    cli_tok_source src = {0};
    const char *prompt = NULL, *file = NULL;
    int add_bos = 1, parse_special = 1, json = 0, do_bench = 0;
    for (int i = 1; i < argc; i++) {
        int r = cli_tok_parse_flag(&src, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i];
        if ((!strcmp(a, "-p") || !strcmp(a, "--prompt") || !strcmp(a, "-f") || !strcmp(a, "--file")) &&
            i + 1 < argc) {
            if (a[1] == 'p' || a[2] == 'p') prompt = argv[++i];
            else file = argv[++i];
        } else if (!strcmp(a, "--no-bos")) add_bos = 0;
        else if (!strcmp(a, "--no-parse-special")) parse_special = 0;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--bench")) do_bench = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "specula: error: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!prompt == !file) {
        fprintf(stderr, "specula: error: give exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    char *buf = NULL;
    size_t len;
    sp_err err = {0};
    if (file) {
        if (sp_read_file(file, &buf, &len, &err)) {
            fprintf(stderr, "specula: error: %s\n", err.msg);
            return 1;
        }
    } else {
        len = strlen(prompt);
    }
    const char *text = file ? buf : prompt;
    double t0 = sp_time_ms(), c0 = cpu_ms();
    tok_tokenizer *t = cli_tok_load(&src);
    double load_ms = sp_time_ms() - t0, load_cpu = cpu_ms() - c0;
    if (!t) {
        free(buf);
        return 1;
    }
    int rc = 0;
    if (do_bench) {
        rc = bench(t, text, len, load_ms, load_cpu, add_bos, parse_special);
    } else {
        int32_t *ids;
        int n;
        if (sp_tok_encode(t, text, len, add_bos, parse_special, &ids, &n, &err)) {
            fprintf(stderr, "specula: error: %s\n", err.msg);
            rc = 1;
        } else {
            if (json) putchar('[');
            for (int i = 0; i < n; i++) printf(json ? "%s%d" : "%s%d", i ? (json ? ", " : " ") : "", ids[i]);
            printf(json ? "]\n" : "\n");
            free(ids);
        }
    }
    sp_tok_free(t);
    free(buf);
    return rc;
}
