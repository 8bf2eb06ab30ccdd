/* main.c — `specula SUBCOMMAND ...`: dispatch to the subcommand (src/cli/cmd_*.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "specula.h"

typedef struct {
    const char *name;
    cli_cmd_fn fn;
    const char *help;
} cli_entry;

#define X(n, h) {#n, NULL, h},
static cli_entry table[] = {CLI_COMMANDS(X)};
#undef X

static void bind(void) {
    int i = 0;
#define X(n, h) table[i++].fn = cmd_##n;
    CLI_COMMANDS(X)
#undef X
}

static void usage(FILE *f) {
    fprintf(f, "usage: specula COMMAND [options]   (specula COMMAND --help for its options; specula --version)\n\n");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (!table[i].fn) continue;
        char name[64];
        snprintf(name, sizeof name, "%s", table[i].name);
        for (char *p = name; *p; p++)
            if (*p == '_') *p = '-';
        fprintf(f, "  %-18s %s\n", name, table[i].help);
    }
}

/* Output that never reached its destination (a full disk, a closed pipe, /dev/full) is a failure:
 * flush and close stdout and turn a write error into exit status 2 with a message. */
static int stdout_close(const char *cmd, int rc) {
    int bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad) return rc;
    fprintf(stderr, "specula: error: %s: writing standard output: %s\n", cmd, e ? strerror(e) : "write error");
    return rc ? rc : 2;
}

int main(int argc, char **argv) {
    bind();
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        printf("specula %s\n", SPECULA_VERSION);
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    char want[64];
    snprintf(want, sizeof want, "%s", argv[1]);
    for (char *p = want; *p; p++)
        if (*p == '-') *p = '_';
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (table[i].fn && !strcmp(table[i].name, want))
            return stdout_close(argv[1], table[i].fn(argc - 1, argv + 1));
    }
    fprintf(stderr, "specula: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
