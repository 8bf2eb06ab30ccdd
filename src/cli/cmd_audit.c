/* cmd_audit.c — `specula audit`: check empirically that a drafter's sampling path emits exactly
 * the target's distribution (chi-square + total variation), or `--self-test` the verification
 * rule on synthetic adversarial (p, q) pairs. Exit 0 pass, 1 fail, 2 usage error. */
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "core/core.h"
#include "decode/audit.h"
#include "sample_cli.h"
#include "spec_cli.h"

static const char *CMD = "audit";

static void print_line(void *ctx, const char *line) {
    (void)ctx;
    printf("  %s\n", line);
}

static void print_test(const char *what, const sp_audit_test *t) {
    printf("  %-14s n %7d  chi2 %10.2f  dof %5d  p-value %.4f  TV %.5f (expected under H0 ~%.5f)\n", what, t->n,
           t->chi2, t->dof, t->p_value, t->tv, t->tv_null);
}

/* the options of one run, but the drafter, tree and penalty flags */
typedef struct {
    const char *model, *prompt, *ids;
    int self_test, draws, threads, broken, top_k;
    float temp, top_p, min_p, alpha;
    uint64_t seed;
} audit_args;

/* --self-test: the verification rule on synthetic (p, q) pairs; 0 pass, 1 fail */
static int self_test(const audit_args *a) {
    printf("audit self-test: verification rule on synthetic (p, q), %d draws per case, alpha %g\n", a->draws, a->alpha);
    int ok = sp_audit_self_test(a->draws < 1000 ? 200000 : a->draws * 50, a->alpha, print_line, NULL);
    printf("self-test: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

static void print_result(const audit_args *a, const cli_spec_opts *so, const cli_tree_opts *to,
                         const sp_spec_params *sp, const sp_audit_result *r, double seconds) {
    printf("audit: drafter %s%s, temp %g top-k %d top-p %g min-p %g, %d draws%s (%.1f s), draft acceptance %.3f\n",
           so->spec, to->nodes > 0 ? " (token trees)" : "", a->temp, a->top_k, a->top_p, a->min_p, a->draws,
           a->broken ? ", BROKEN residual rule" : "", seconds, r->acceptance_rate);
    if (sp_penalty_active(&sp->gen.penalty))
        printf("  penalties: repeat %g, last %d tokens, presence %g, frequency %g\n", (double)sp->gen.penalty.repeat,
               sp->gen.penalty.last_n, (double)sp->gen.penalty.presence, (double)sp->gen.penalty.frequency);
    print_test("first token", &r->first);
    if (r->second_groups) print_test("second token", &r->second);
    printf("  (second token: conditionals given the %d most frequent first tokens)\n", r->second_groups);
    printf("audit: %s at alpha %g\n", r->pass ? "PASS" : "FAIL", a->alpha);
}

/* load the target, the prompt and the drafter, run the audit, print; 0 pass, 1 fail, 2 error */
static int run_audit(const audit_args *a, const cli_spec_opts *so, const cli_tree_opts *to, cli_sample_opts *pen) {
    sp_err err = {{0}};
    sp_model *m = NULL, *dm = NULL;
    sp_drafter *d = NULL;
    int32_t *tok = NULL;
    int ntok = 0, status = 2;
    if (sp_model_load(&m, a->model, a->threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto out;
    }
    if (cli_load_prompt(CMD, a->model, a->prompt, a->ids, &tok, &ntok)) goto out;
    sp_spec_params sp = sp_spec_params_default();
    sp_sample_params sdef = {a->temp, a->top_k, a->top_p, a->min_p, a->seed};
    if (cli_sample_resolve(CMD, pen, NULL, &sdef, 0, &sp.gen)) goto out;
    sp.draft_max = so->draft_max;
    sp.broken_residual = a->broken;
    if (cli_tree_apply(CMD, to, &sp)) goto out;
    if (cli_make_drafter(CMD, so, m, a->model, &sp.gen.sample, ntok + so->draft_max + 8, a->threads, &dm, &d)) goto out;
    sp_audit_result r;
    double t0 = sp_time_ms();
    if (sp_audit_run(m, d, tok, ntok, &sp, a->draws, a->alpha, &r, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto out;
    }
    print_result(a, so, to, &sp, &r, (sp_time_ms() - t0) / 1000);
    status = r.pass ? 0 : 1;
out:
    sp_drafter_free(d);
    sp_model_free(dm);
    sp_model_free(m);
    free(tok);
    return status;
}

int cmd_audit(int argc, char **argv) {
    audit_args a = {.draws = 4000, .temp = 1.0f, .top_p = 1.0f, .min_p = 0.0f, .alpha = 0.001f, .seed = 1};
    cli_spec_opts so = CLI_SPEC_OPTS_DEFAULT;
    cli_tree_opts to = CLI_TREE_OPTS_DEFAULT;
    cli_sample_opts pen = CLI_SAMPLE_OPTS_UNSET;
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &a.model, "DIR", "target model directory"},
        {NULL, "--self-test", CLI_FLAG, &a.self_test, NULL, "test the verification rule alone, no model"},
        {NULL, "--temp", CLI_FLOAT, &a.temp, "T", "temperature (default 1.0, must be > 0)"},
        {NULL, "--top-k", CLI_INT, &a.top_k, "K", "top-k (default 0 = off)"},
        {NULL, "--top-p", CLI_FLOAT, &a.top_p, "P", "top-p (default 1 = off)"},
        {NULL, "--min-p", CLI_FLOAT, &a.min_p, "P", "min-p (default 0 = off)"},
        {NULL, "--draws", CLI_INT, &a.draws, "N", "independent trials (default 4000)"},
        {NULL, "--alpha", CLI_FLOAT, &a.alpha, "A", "significance level (default 0.001)"},
        {NULL, "--seed", CLI_U64, &a.seed, "S", "base seed"},
        {"-p", "--prompt", CLI_STR, &a.prompt, "TEXT", "context"},
        {NULL, "--prompt-ids", CLI_STR, &a.ids, "IDS", "context as token ids"},
        {"-t", "--threads", CLI_INT, &a.threads, "N", "threads"},
        {NULL, "--broken", CLI_FLAG, &a.broken, NULL, "deliberately break the residual rule (must FAIL)"},
    };
    int n = 13;
    int spec_row = n;
    n += cli_spec_opt_rows(opts + n, &so);
    opts[spec_row].help = "ngram | draft | assistant | dflash | dspark (default ngram, or the kind -md's config.json names)";
    n += cli_penalty_opt_rows(opts + n, &pen);
    n += cli_tree_opt_rows(opts + n, &to);
    int rc = cli_parse(CMD, "-m TARGET --spec KIND [-md DIR] --temp T [--draws N] (-p TEXT | --prompt-ids IDS) | --self-test",
                       opts, n, argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (a.self_test) return self_test(&a);
    if (!a.model) return cli_error(CMD, "-m TARGET is required (or --self-test)");
    if (!(a.temp > 0)) return cli_error(CMD, "--temp must be > 0: the audit checks the sampling path");
    if (cli_spec_resolve(CMD, &so, "ngram")) return 2;
    return run_audit(&a, &so, &to, &pen);
}
