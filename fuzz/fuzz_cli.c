/* fuzz_cli.c — argument vectors through the CLI's flag parser (cli_parse with a table of every
 * value kind plus the shared speculative-decoding rows, as `specula generate` builds it) and the
 * token-id list parser (cli_parse_ids). The input is the argument vector, NUL-separated. Parse
 * only: no command runs. Help and error lines go to /dev/null. */
#include "cli/args.h"
#include "cli/spec_cli.h"
#include "fuzz.h"

static FILE *null_out;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    null_out = fopen("/dev/null", "w");
    if (!null_out) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = fuzz_cstr(data, size);
    if (!buf) return 0;
    char *args[65];
    int argc = 0;
    args[argc++] = "generate";
    for (size_t i = 0; i < size && argc < 64;) { /* NUL-separated arguments */
        args[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    args[argc] = NULL;

    const char *dir = NULL, *text = NULL, *ids = NULL, *pos[4];
    int n = 64, flag = 0, n_pos = 0;
    float temp = 0;
    uint64_t seed = 0;
    cli_spec_opts so = CLI_SPEC_OPTS_DEFAULT;
    cli_opt opts[32] = {
        {"-m", "--model", CLI_STR, &dir, "DIR", "model"},
        {"-p", "--prompt", CLI_STR, &text, "TEXT", "prompt"},
        {NULL, "--prompt-ids", CLI_STR, &ids, "IDS", "ids"},
        {"-n", "--n-predict", CLI_INT, &n, "N", "count"},
        {NULL, "--temp", CLI_FLOAT, &temp, "T", "temperature"},
        {"-s", "--seed", CLI_U64, &seed, "S", "seed"},
        {NULL, "--json", CLI_FLAG, &flag, NULL, "flag"},
    };
    int n_opts = 7;
    n_opts += cli_spec_opt_rows(opts + n_opts, &so);
    FILE *keep_out = stdout, *keep_err = stderr;
    stdout = null_out;
    stderr = null_out;
    int rc = cli_parse("generate", "-m DIR", opts, n_opts, argc, args, pos, &n_pos, 4);
    if (rc == 0 && n_pos > 4) abort();
    for (int i = 1; i < argc; i++) {
        int32_t *v = NULL;
        int k = 0;
        if (cli_parse_ids("generate", "--prompt-ids", args[i], &v, &k) == 0)
            for (int j = 0; j < k; j++)
                if (v[j] < 0) abort();
        free(v);
    }
    stdout = keep_out;
    stderr = keep_err;
    free(buf);
    return 0;
}
