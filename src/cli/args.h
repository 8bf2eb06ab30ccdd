/* args.h — flag parsing shared by every `specula` subcommand (llama.cpp style).
 *
 *   int n = 64; const char *dir = NULL; int json = 0;
 *   cli_opt opts[] = {
 *       {"-m", "--model", CLI_STR, &dir, "DIR", "model directory (required)"},
 *       {"-n", "--n-predict", CLI_INT, &n, "N", "tokens to generate (default 64)"},
 *       {NULL, "--json", CLI_FLAG, &json, NULL, "print one JSON object"},
 *   };
 *   int rc = cli_parse("generate", "-m DIR [options]", opts, 3, argc, argv, NULL, NULL);
 *   if (rc) return rc > 0 ? 0 : 2;   // 1: --help printed, -1: error printed
 *
 * Accepted forms: `-n 5`, `--n-predict 5`, `--n-predict=5`; a CLI_LIST option may be repeated. Values are checked strictly
 * (the whole string must parse); an unknown flag, a missing or bad value prints
 * `specula: error: CMD: ...` on stderr. `-h` / `--help` prints the usage to stdout, `--version`
 * the version. */
#ifndef SPECULA_CLI_ARGS_H
#define SPECULA_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    CLI_FLAG,  /* int *: set to 1, takes no value */
    CLI_INT,   /* int * */
    CLI_U64,   /* uint64_t * */
    CLI_FLOAT, /* float * */
    CLI_STR,   /* const char **: points into argv */
    CLI_LIST   /* cli_list *: repeatable, every value kept in order (points into argv) */
} cli_kind;

#define CLI_LIST_MAX 32
typedef struct {
    const char *v[CLI_LIST_MAX];
    int n;
} cli_list;

typedef struct {
    const char *short_name; /* "-m", "-md", or NULL */
    const char *long_name;  /* "--model" or NULL */
    cli_kind kind;
    void *dst;
    const char *metavar; /* value name in the usage, NULL for flags */
    const char *help;
} cli_opt;

/* capacity of a command's option table that shared row groups (spec, penalty, tree) fill */
#define CLI_OPTS_MAX 64

/* Parse argv[1..argc) (argv[0] is the subcommand name). Positional arguments are stored
 * in positional[0, *n_positional) when positional is non-NULL (at most max_positional),
 * and are an error otherwise. Returns 0 on success, 1 when help or the version was printed, -1 on error
 * (already printed). */
int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int n_opts, int argc,
              char **argv, const char **positional, int *n_positional, int max_positional);

/* Print the usage and the option table to f. */
void cli_usage(const char *cmd, const char *usage, const cli_opt *opts, int n_opts, FILE *f);

/* "1,2,3" -> malloc'd int32 array (caller frees). Returns -1 and prints an error naming
 * `what` on an empty list, a bad number or a value outside [0, INT32_MAX]. */
int cli_parse_ids(const char *cmd, const char *what, const char *s, int32_t **out, int *n);

/* the help line of --bf16-dot, which every command that loads a model accepts */
#define CLI_BF16_DOT_HELP \
    "bf16 matmuls in the bf16-dot numerics: activations rounded to bf16, faster with AVX512_BF16 (docs/SIMD.md)"

/* the most tokens a flag may ask to generate or hold in context (-n, -c, --generate, --max-len):
 * far above any real model's context, far below where int token counts overflow */
#define CLI_MAX_TOKENS (1 << 24)
/* the largest prompt file: CLI_MAX_TOKENS tokens of 16 bytes, far more text than any context */
#define CLI_MAX_PROMPT_BYTES (CLI_MAX_TOKENS * 16)

/* Turn the escapes \n \t \r \\ \" \' of s into their characters, in place (llama.cpp processes
 * them in its reverse prompts); other backslashes are kept. */
void cli_unescape(char *s);

/* one-line error "specula: error: CMD: ..." on stderr; returns 2 (the exit status) */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
