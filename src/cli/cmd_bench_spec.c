/* cmd_bench_spec.c — `specula bench-spec`: plain vs speculative decoding on every prompt of a
 * prompt file (prompts_cli.h: JSONL {"prompt"}, {"prompt_ids"} or {"messages"}). Greedy output must be
 * identical (checked: a mismatch is an error). Prints per prompt and overall wall speedup, τ,
 * acceptance and per-position acceptance; writes a JSON report and, when gnuplot is installed,
 * an SVG of acceptance per draft position. Speculation runs under the never-slower policy unless
 * --spec-always; the report carries the round-cost profile (round_report.h) and the rounds that
 * verified no drafts, by reason. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "core/progress.h"
#include "prompts_cli.h"
#include "round_report.h"
#include "sample_cli.h"
#include "spec_cli.h"

static const char *CMD = "bench-spec";

static void write_svg(const char *json_path, const double *acc, int G) {
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) return;
    char dat[4200], svg[4200], gp[4200], cmd[8600];
    snprintf(dat, sizeof dat, "%s.accept.dat", json_path);
    snprintf(svg, sizeof svg, "%s.accept.svg", json_path);
    snprintf(gp, sizeof gp, "%s.accept.gp", json_path);
    FILE *f = fopen(dat, "w");
    if (!f) return;
    for (int i = 0; i < G; i++) fprintf(f, "%d %.6f\n", i + 1, acc[i]);
    fclose(f);
    f = fopen(gp, "w");
    if (!f) return;
    fprintf(f,
            "set terminal svg size 640,400\nset output '%s'\nset title 'acceptance per draft position'\n"
            "set xlabel 'draft position'\nset ylabel 'acceptance rate'\nset yrange [0:1]\nset grid\n"
            "plot '%s' using 1:2 with linespoints title 'accepted / drafted'\n",
            svg, dat);
    fclose(f);
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>/dev/null", gp);
    if (system(cmd) == 0) fprintf(stderr, "%s: wrote %s\n", CMD, svg);
    remove(gp);
    remove(dat);
}

int cmd_bench_spec(int argc, char **argv) {
    const char *model = NULL, *prompts = NULL, *json_path = NULL;
    int n_new = 128, threads = 0, text_prompts = 0, always = 0;
    cli_sample_opts pen = CLI_SAMPLE_OPTS_UNSET;
    cli_spec_opts so = CLI_SPEC_OPTS_DEFAULT;
    cli_tree_opts to = CLI_TREE_OPTS_DEFAULT;
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &model, "DIR", "target model directory or FILE.gguf"},
        {NULL, "--prompts", CLI_STR, &prompts, "FILE", "JSONL prompts ({\"prompt\"}, {\"prompt_ids\"} or {\"messages\"})"},
        {NULL, "--text-prompts", CLI_FLAG, &text_prompts, NULL, "the prompt file is plain text, one prompt per line"},
        {"-n", "--n-predict", CLI_INT, &n_new, "N", "tokens per prompt (default 128)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads"},
        {NULL, "--json", CLI_STR, &json_path, "FILE", "write the JSON report here"},
        {NULL, "--spec-always", CLI_FLAG, &always, NULL,
         "draft every round (default: stop drafting while it does not pay, probing now and then)"},
    };
    int n = 7;
    int spec_row = n;
    n += cli_spec_opt_rows(opts + n, &so);
    opts[spec_row].help = "ngram | draft | assistant | dflash | dspark (default ngram, or the kind -md's config.json names)";
    n += cli_penalty_opt_rows(opts + n, &pen);
    n += cli_tree_opt_rows(opts + n, &to);
    int rc = cli_parse(CMD, "-m TARGET --spec KIND [-md DIR] --prompts FILE.jsonl [-n N] [--json FILE]", opts, n, argc,
                       argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || !prompts) return cli_error(CMD, "-m TARGET and --prompts FILE are required");
    if (n_new < 1) return cli_error(CMD, "-n must be >= 1");
    if (cli_spec_resolve(CMD, &so, "ngram")) return 2;
    sp_err err = {{0}};
    sp_model *m = NULL, *dm = NULL;
    sp_drafter *d = NULL;
    cli_prompt *ps = NULL;
    int np = 0, status = 2;
    if (sp_model_load(&m, model, threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto out;
    }
    if (cli_prompts_read(CMD, prompts, model, text_prompts, &ps, &np)) goto out;
    int maxp = 0;
    for (int i = 0; i < np; i++) maxp = ps[i].n > maxp ? ps[i].n : maxp;
    sp_spec_params sp = sp_spec_params_default();
    sp_sample_params sdef = sp_sample_params_default();
    if (cli_sample_resolve(CMD, &pen, model, &sdef, 0, &sp.gen)) goto out;
    sp.gen.max_new = n_new;
    sp.draft_max = so.draft_max;
    sp.draft_min = so.draft_min;
    sp.policy = always ? SP_SPEC_POLICY_ALWAYS : SP_SPEC_POLICY_ADAPTIVE;
    sp_policy carry = {0}; /* the prompts run one after another: the policy's measurements carry over */
    sp.policy_carry = &carry;
    sp.profile = 1;
    if (cli_tree_apply(CMD, &to, &sp)) goto out;
    if (cli_make_drafter(CMD, &so, m, model, &sp.gen.sample, maxp + n_new + so.draft_max + 2, threads, &dm, &d))
        goto out;
    int32_t *a = malloc(sizeof(int32_t) * (size_t)n_new), *b = malloc(sizeof(int32_t) * (size_t)n_new);
    json_t *rep = json_object(), *rows = json_array();
    double tot_plain = 0, tot_spec = 0;
    long tot_tok = 0, tot_drafted = 0, tot_acc = 0, tot_calls = 0, pos_d[SP_SPEC_MAX_G] = {0}, pos_a[SP_SPEC_MAX_G] = {0};
    int G = so.draft_max, mismatches = 0;
    cli_round_sums rsum = {0};
    long plain_tok = 0;
    sp_progress pr;
    sp_progress_start(&pr, CMD, np, "prompts");
    printf("%-4s %7s %9s %9s %8s %6s %6s %s\n", "#", "tokens", "plain/s", "decode/s", "speedup", "tau", "acc", "identical");
    for (int i = 0; i < np; i++) {
        sp_spec_stats s0, s1;
        if (sp_spec_generate(m, NULL, ps[i].ids, ps[i].n, &sp, a, n_new, &s0, &err) ||
            sp_spec_generate(m, d, ps[i].ids, ps[i].n, &sp, b, n_new, &s1, &err)) {
            cli_error(CMD, "prompt %d: %s", i + 1, err.msg);
            goto out;
        }
        int same = s0.emitted == s1.emitted && !memcmp(a, b, sizeof(int32_t) * (size_t)s0.emitted);
        mismatches += !same;
        double sp_up = s1.decode_ms > 0 ? s0.decode_ms / s1.decode_ms : 0;
        printf("%-4d %7d %9.2f %9.2f %7.2fx %6.2f %6.3f %s\n", i + 1, s1.emitted, s0.decode_tps, s1.decode_tps, sp_up,
               s1.mean_accept_len, s1.acceptance_rate, same ? "yes" : "NO");
        tot_plain += s0.decode_ms;
        tot_spec += s1.decode_ms;
        tot_tok += s1.emitted;
        tot_drafted += s1.drafted;
        tot_acc += s1.accepted;
        tot_calls += s1.target_calls;
        plain_tok += s0.emitted;
        cli_round_sums_add(&rsum, &s1);
        json_t *row = json_object(), *pa = json_array();
        for (int k = 0; k < G; k++) {
            pos_d[k] += s1.pos_drafted[k];
            pos_a[k] += s1.pos_accepted[k];
            json_array_append_new(pa, json_real(s1.accept_per_position[k]));
        }
        json_object_set_new(row, "prompt_tokens", json_integer(ps[i].n));
        json_object_set_new(row, "emitted", json_integer(s1.emitted));
        json_object_set_new(row, "plain_tps", json_real(s0.decode_tps));
        json_object_set_new(row, "spec_tps", json_real(s1.decode_tps));
        json_object_set_new(row, "speedup", json_real(sp_up));
        json_object_set_new(row, "tau", json_real(s1.mean_accept_len));
        json_object_set_new(row, "acceptance_rate", json_real(s1.acceptance_rate));
        json_object_set_new(row, "accept_per_position", pa);
        json_object_set_new(row, "draft_ms", json_real(s1.draft_ms));
        json_object_set_new(row, "verify_ms", json_real(s1.verify_ms));
        json_object_set_new(row, "identical", json_boolean(same));
        json_array_append_new(rows, row);
        sp_progress_update(&pr, i + 1, NULL);
    }
    sp_progress_finish(&pr, np, NULL);
    double acc[SP_SPEC_MAX_G];
    json_t *pa = json_array();
    printf("overall: speedup %.2fx, tau %.2f, acceptance %.3f, per position:", tot_spec > 0 ? tot_plain / tot_spec : 0,
           tot_calls ? (double)tot_tok / tot_calls : 0, tot_drafted ? (double)tot_acc / tot_drafted : 0);
    for (int k = 0; k < G; k++) {
        acc[k] = pos_d[k] ? (double)pos_a[k] / pos_d[k] : 0;
        printf(" %.2f", acc[k]);
        json_array_append_new(pa, json_real(acc[k]));
    }
    printf("\noutputs identical: %s\n", mismatches ? "NO" : "yes");
    double step = plain_tok ? tot_plain / plain_tok : 0;
    cli_round_print(&rsum, step);
    json_object_set_new(rep, "spec", json_string(so.spec));
    json_object_set_new(rep, "draft_max", json_integer(G));
    json_object_set_new(rep, "threads", json_integer(sp_model_threads(m)));
    json_object_set_new(rep, "speedup", json_real(tot_spec > 0 ? tot_plain / tot_spec : 0));
    json_object_set_new(rep, "tau", json_real(tot_calls ? (double)tot_tok / tot_calls : 0));
    json_object_set_new(rep, "acceptance_rate", json_real(tot_drafted ? (double)tot_acc / tot_drafted : 0));
    json_object_set_new(rep, "accept_per_position", pa);
    json_object_set_new(rep, "identical", json_boolean(!mismatches));
    json_object_set_new(rep, "policy", json_string(always ? "always" : "adaptive"));
    json_object_set_new(rep, "rounds", json_integer(tot_calls));
    json_object_set_new(rep, "rounds_without_drafts", cli_round_nodraft_json(&rsum));
    json_object_set_new(rep, "profile", cli_round_profile_json(&rsum, step));
    json_object_set_new(rep, "prompts", rows);
    if (json_path) {
        char *s = json_dumps(rep, JSON_INDENT(1));
        if (sp_write_file_atomic(json_path, s, strlen(s), &err)) cli_error(CMD, "%s", err.msg);
        free(s);
        write_svg(json_path, acc, G);
    }
    json_decref(rep);
    free(a);
    free(b);
    status = mismatches ? 1 : 0;
    if (mismatches) cli_error(CMD, "%d prompt(s) produced output different from plain decoding", mismatches);
out:
    sp_drafter_free(d);
    sp_model_free(dm);
    sp_model_free(m);
    cli_prompts_free(ps, np);
    return status;
}
