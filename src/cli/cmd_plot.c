/* cmd_plot.c — `specula plot LOG.csv -o DIR`: loss and tau curves and per-position acceptance
 * of a `specula train` log, rendered by gnuplot (SVG). Writes DIR/plot.gp and runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli/args.h"
#include "core/core.h"

/* the number of a1..aB columns in the header (columns 11..) */
static int count_acc_columns(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    if (fgets(line, sizeof line, f))
        for (char *p = strstr(line, ",a"); p; p = strstr(p + 1, ",a")) n++;
    fclose(f);
    return n;
}

int cmd_plot(int argc, char **argv) {
    const char *out = NULL, *pos[1];
    int npos = 0;
    cli_opt opts[] = {{"-o", "--out", CLI_STR, &out, "DIR", "output directory for the SVG files (required)"}};
    int rc = cli_parse("plot", "LOG.csv -o DIR", opts, 1, argc, argv, pos, &npos, 1);
    if (rc) return rc > 0 ? 0 : 2;
    if (npos != 1 || !out) return cli_error("plot", "give one LOG.csv and -o DIR");
    int nacc = count_acc_columns(pos[0]);
    if (nacc < 0) return cli_error("plot", "%s: cannot read", pos[0]);
    if (nacc == 0) return cli_error("plot", "%s: not a `specula train` log (no a1.. columns)", pos[0]);
    sp_err err = {{0}};
    if (sp_mkdir_p(out, &err)) return cli_error("plot", "%s", err.msg);
    char gp[4096];
    snprintf(gp, sizeof gp, "%s/plot.gp", out);
    FILE *f = fopen(gp, "w");
    if (!f) return cli_error("plot", "%s: cannot write", gp);
    fprintf(f,
            "set datafile separator ','\nset key autotitle columnhead\nset terminal svg size 900,500\n"
            "set grid\nset xlabel 'step'\n"
            "set output '%s/loss.svg'\nset title 'training loss'\n"
            "plot '%s' using 1:4 with lines title 'loss', '' using 1:5 with lines title 'CE', "
            "'' using 1:6 with lines title 'L1', '' using 1:7 with lines title 'BCE'\n"
            "set output '%s/tau.svg'\nset title 'held-out tau (analytic accepted length)'\n"
            "plot '%s' using 1:10 with linespoints title 'tau'\n"
            "set output '%s/acceptance.svg'\nset title 'per-position acceptance a_k'\nset yrange [0:1]\nplot ",
            out, pos[0], out, pos[0], out);
    for (int k = 0; k < nacc; k++)
        fprintf(f, "%s'%s' using 1:%d with linespoints title 'a%d'", k ? ", " : "", pos[0], 11 + k, k + 1);
    fprintf(f, "\n");
    fclose(f);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return cli_error("plot", "gnuplot failed on %s (is gnuplot installed?)", gp);
    fprintf(stderr, "plot: %s/loss.svg, %s/tau.svg, %s/acceptance.svg\n", out, out, out);
    return 0;
}
