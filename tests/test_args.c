/* test_args.c — the CLI flag parser (src/cli/args.c and its llama.cpp flag table llama_flags.c, compiled in: it is not part of
 * libspecula): short/long/--name=value forms, strict values, unknown flags, id lists. */
#include <stdint.h>
#include <string.h>

#include "../src/cli/args.c"
#include "../src/cli/llama_flags.c"
#include "harness.h"

typedef struct {
    const char *dir;
    int n, flag;
    float t;
    uint64_t seed;
} vals;

static int parse(vals *v, int argc, char **argv) {
    const cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &v->dir, "DIR", "model"},
        {"-n", "--n-predict", CLI_INT, &v->n, "N", "count"},
        {NULL, "--temp", CLI_FLOAT, &v->t, "T", "temperature"},
        {"-s", "--seed", CLI_U64, &v->seed, "S", "seed"},
        {"-md", "--flag", CLI_FLAG, &v->flag, NULL, "a flag"},
    };
    memset(v, 0, sizeof *v);
    return cli_parse("test", "[options]", opts, 5, argc, argv, NULL, NULL, 0);
}

static void test_forms(void) {
    vals v;
    char *a[] = {"test", "-m", "dir", "--n-predict=12", "--temp", "-0.5", "-s", "0x10", "-md"};
    CHECK(parse(&v, 9, a) == 0, "parse failed");
    CHECK(v.dir && !strcmp(v.dir, "dir") && v.n == 12 && v.t == -0.5f && v.seed == 16 && v.flag == 1,
          "values %s %d %g %llu %d", v.dir, v.n, (double)v.t, (unsigned long long)v.seed, v.flag);
}

static void test_errors(void) {
    vals v;
    char *unknown[] = {"test", "--nope"}, *missing[] = {"test", "-n"}, *bad_int[] = {"test", "-n", "12x"},
         *bad_float[] = {"test", "--temp", "nan"}, *neg_u64[] = {"test", "-s", "-3"},
         *flag_val[] = {"test", "--flag=1"}, *positional[] = {"test", "stray"},
         *overflow[] = {"test", "-n", "99999999999"};
    fprintf(stderr, "  (the error lines below are expected)\n");
    CHECK(parse(&v, 2, unknown) == -1, "unknown flag accepted");
    CHECK(parse(&v, 2, missing) == -1, "missing value accepted");
    CHECK(parse(&v, 3, bad_int) == -1, "12x accepted");
    CHECK(parse(&v, 3, bad_float) == -1, "nan accepted");
    CHECK(parse(&v, 3, neg_u64) == -1, "negative seed accepted");
    CHECK(parse(&v, 2, flag_val) == -1, "flag with value accepted");
    CHECK(parse(&v, 2, positional) == -1, "positional accepted");
    CHECK(parse(&v, 3, overflow) == -1, "int overflow accepted");
}

static void test_ids(void) {
    int32_t *ids;
    int n;
    CHECK(cli_parse_ids("test", "--ids", "1, 2,30000", &ids, &n) == 0 && n == 3 && ids[0] == 1 && ids[2] == 30000,
          "ids");
    free(ids);
    CHECK(cli_parse_ids("test", "--ids", "", &ids, &n) == -1 && !ids, "empty list accepted");
    CHECK(cli_parse_ids("test", "--ids", "1,,2", &ids, &n) == -1, "1,,2 accepted");
    CHECK(cli_parse_ids("test", "--ids", "1,-2", &ids, &n) == -1, "negative accepted");
    CHECK(cli_parse_ids("test", "--ids", "1;2", &ids, &n) == -1, "1;2 accepted");
}

static void test_unescape(void) {
    char s[] = "a\\nb\\tc\\\\d\\\"e\\qf\\";
    cli_unescape(s);
    CHECK(!strcmp(s, "a\nb\tc\\d\"e\\qf\\"), "unescape: '%s'", s);
}

int main(void) {
    RUN(test_forms);
    RUN(test_errors);
    RUN(test_ids);
    RUN(test_unescape);
    return harness_done("test_args");
}
