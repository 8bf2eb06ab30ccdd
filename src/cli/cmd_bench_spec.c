/* cmd_bench_spec.c — `specula bench-spec`: plain vs speculative decoding on every prompt of a
 * prompt file (prompts_cli.h: JSONL {"prompt"}, {"prompt_ids"} or {"messages"}). Greedy output must be
 * identical (checked: a mismatch is an error). Prints per prompt and overall wall speedup, τ,
 * acceptance and per-position acceptance; writes a JSON report and, when gnuplot is installed,
 * an SVG of acceptance per draft position. Speculation runs under the never-slower policy unless
 * --spec-always; the report carries the round-cost profile (round_report.h) and the rounds that
 * verified no drafts, by reason.
 * --spec-synthetic P[,P...] (benchmark only, synth_cli.h, docs/SYNTHETIC.md) sweeps synthetic
 * acceptance: one plain-vs-speculative pass over the prompts per P, every line and the report
 * marked synthetic and not lossless (outputs are not compared: they differ by design), and a
 * closing table of τ, speedup and the draft / verify cost per round by P. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "compare_cli.h"
#include "core/progress.h"
#include "prompts_cli.h"
#include "round_report.h"
#include "sample_cli.h"
#include "session_cli.h"
#include "spec_cli.h"
#include "synth_cli.h"

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

typedef struct {
    const char *model, *prompts, *json_path;
    int n_new, threads, text_prompts, ignore_eos; /* ignore_eos: the lossless passes' */
    cli_sample_opts pen;
    cli_spec_opts so;
    cli_tree_opts to;
    cli_synth_opts sy;
    const sp_synth *synth; /* the pass running now: synthetic acceptance, or NULL */
} bench_opts;

/* The flags. Returns 0 to run, 1 when --help was printed, -1 on a usage error (printed). */
static int bench_parse(bench_opts *o, int argc, char **argv) {
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &o->model, "DIR", "target model directory or FILE.gguf"},
        {NULL, "--prompts", CLI_STR, &o->prompts, "FILE", "JSONL prompts ({\"prompt\"}, {\"prompt_ids\"} or {\"messages\"})"},
        {NULL, "--text-prompts", CLI_FLAG, &o->text_prompts, NULL, "the prompt file is plain text, one prompt per line"},
        {"-n", "--n-predict", CLI_INT, &o->n_new, "N", "tokens per prompt (default 128)"},
        {"-t", "--threads", CLI_INT, &o->threads, "N", "threads"},
        {NULL, "--json", CLI_STR, &o->json_path, "FILE", "write the JSON report here"},
        {NULL, "--spec-always", CLI_FLAG, &o->so.always, NULL,
         "draft every round (default: stop drafting while it does not pay, probing now and then)"},
    };
    int n = 7, spec_row = n;
    n += cli_spec_opt_rows(opts + n, &o->so);
    opts[spec_row].help = "ngram | draft | assistant | dflash | dspark (default ngram, or the kind -md's config.json names)";
    n += cli_penalty_opt_rows(opts + n, &o->pen);
    n += cli_tree_opt_rows(opts + n, &o->to);
    n += cli_synth_opt_rows(opts + n, &o->sy);
    opts[n++] = (cli_opt){NULL, "--synthetic", CLI_STR, &o->sy.list, "P[,P...]", "the same as --spec-synthetic"};
    int rc = cli_parse(CMD, "-m TARGET --spec KIND [-md DIR] --prompts FILE.jsonl [-n N] [--json FILE]", opts, n, argc,
                       argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 1 : -1;
    if (!o->model || !o->prompts) return cli_error(CMD, "-m TARGET and --prompts FILE are required"), -1;
    if (o->n_new < 1) return cli_error(CMD, "-n must be >= 1"), -1;
    return cli_spec_resolve(CMD, &o->so, "ngram");
}

/* one prompt's line and its row of the report */
static json_t *prompt_row(int idx, int n_prompt, const sp_session_out *o0, const sp_session_out *o1, int same, int G,
                          int synth) {
    const sp_spec_stats *s0 = &o0->spec, *s1 = &o1->spec;
    double up = s1->decode_ms > 0 ? s0->decode_ms / s1->decode_ms : 0;
    printf("%-4d %7d %9.2f %9.2f %7.2fx %6.2f %6.3f %s\n", idx, s1->emitted, s0->decode_tps, s1->decode_tps, up,
           s1->mean_accept_len, s1->acceptance_rate, synth ? "SYNTHETIC" : same ? "yes" : "NO");
    json_t *row = json_object(), *pa = json_array();
    for (int k = 0; k < G; k++) json_array_append_new(pa, json_real(s1->accept_per_position[k]));
    json_object_set_new(row, "prompt_tokens", json_integer(n_prompt));
    json_object_set_new(row, "emitted", json_integer(s1->emitted));
    json_object_set_new(row, "plain_tps", json_real(s0->decode_tps));
    json_object_set_new(row, "spec_tps", json_real(s1->decode_tps));
    json_object_set_new(row, "speedup", json_real(up));
    json_object_set_new(row, "tau", json_real(s1->mean_accept_len));
    json_object_set_new(row, "acceptance_rate", json_real(s1->acceptance_rate));
    json_object_set_new(row, "accept_per_position", pa);
    json_object_set_new(row, "draft_ms", json_real(s1->draft_ms));
    json_object_set_new(row, "verify_ms", json_real(s1->verify_ms));
    if (!synth) json_object_set_new(row, "identical", json_boolean(same));
    return row;
}

/* Every prompt, plain then speculative: a line each, the sums and the rows of the report. */
static int bench_prompts(const bench_opts *o, sp_session *s, const sp_session_req *r, const cli_prompt *ps, int np,
                         cli_compare_sums *c, json_t *rows) {
    sp_progress pr;
    sp_progress_start(&pr, CMD, np, "prompts");
    printf("%-4s %7s %9s %9s %8s %6s %6s %s\n", "#", "tokens", "plain/s", "decode/s", "speedup", "tau", "acc",
           o->synth ? "acceptance" : "identical");
    for (int i = 0; i < np; i++) {
        sp_session_out o0, o1;
        sp_err err = {{0}};
        if (cli_compare_prompt(s, r, ps[i].ids, ps[i].n, 0, &o0, &o1, &err)) {
            sp_session_out_free(&o0);
            sp_session_out_free(&o1);
            return cli_error(CMD, "prompt %d: %s", i + 1, err.msg), -1;
        }
        int same = cli_compare_add(c, &o0, &o1, o->so.draft_max);
        json_array_append_new(rows, prompt_row(i + 1, ps[i].n, &o0, &o1, same, o->so.draft_max, o->synth != NULL));
        sp_session_out_free(&o0);
        sp_session_out_free(&o1);
        sp_progress_update(&pr, i + 1, NULL);
    }
    sp_progress_finish(&pr, np, NULL);
    return 0;
}

/* the report's marking of a synthetic pass: the profile asked for, what it predicts and the costs per round */
static void synth_fields(json_t *rep, const bench_opts *o, const cli_compare_sums *c) {
    json_object_set_new(rep, "synthetic", json_boolean(o->synth != NULL));
    json_object_set_new(rep, "lossless", json_boolean(o->synth == NULL));
    json_object_set_new(rep, "drafted", json_integer(c->drafted));
    json_object_set_new(rep, "accepted", json_integer(c->accepted));
    json_object_set_new(rep, "draft_ms_per_round", json_real(c->calls ? c->draft_ms / c->calls : 0));
    json_object_set_new(rep, "verify_ms_per_round", json_real(c->calls ? c->verify_ms / c->calls : 0));
    json_object_set_new(rep, "plain_ms_per_token", json_real(c->tok_plain ? c->plain_ms / c->tok_plain : 0));
    if (!o->synth) return;
    json_t *pa = json_array();
    for (int i = 0; i < o->synth->n; i++) json_array_append_new(pa, json_real(o->synth->p[i]));
    json_object_set_new(rep, "synthetic_p", pa);
    json_object_set_new(rep, "synthetic_seed", json_integer((json_int_t)o->synth->seed));
    json_object_set_new(rep, "expected_tau", json_real(sp_synth_tau(o->synth, o->so.draft_max)));
}

/* the overall line and the profile; returns the pass's report (new reference) */
static json_t *bench_report(const bench_opts *o, sp_session *s, const cli_compare_sums *c, json_t *rows) {
    int G = o->so.draft_max;
    double acc[SP_SPEC_MAX_G];
    json_t *rep = json_object(), *pa = json_array();
    double accept = c->drafted ? (double)c->accepted / c->drafted : 0;
    printf("overall%s: speedup %.2fx, tau %.2f, acceptance %.3f, per position:", o->synth ? " (SYNTHETIC)" : "",
           cli_compare_speedup(c), cli_compare_tau(c), accept);
    for (int k = 0; k < G; k++) {
        acc[k] = cli_compare_accept(c, k);
        printf(" %.2f", acc[k]);
        json_array_append_new(pa, json_real(acc[k]));
    }
    if (o->synth) printf("\noutputs: SYNTHETIC acceptance, not compared (not lossless)\n");
    else printf("\noutputs identical: %s\n", c->mismatches ? "NO" : "yes");
    double step = c->tok_plain ? c->plain_ms / c->tok_plain : 0;
    cli_round_print(&c->spec, step);
    json_object_set_new(rep, "spec", json_string(o->so.spec));
    json_object_set_new(rep, "draft_max", json_integer(G));
    json_object_set_new(rep, "threads", json_integer(sp_model_threads(sp_session_model(s))));
    json_object_set_new(rep, "speedup", json_real(cli_compare_speedup(c)));
    json_object_set_new(rep, "tau", json_real(cli_compare_tau(c)));
    json_object_set_new(rep, "acceptance_rate", json_real(accept));
    json_object_set_new(rep, "accept_per_position", pa);
    if (!o->synth) json_object_set_new(rep, "identical", json_boolean(!c->mismatches));
    synth_fields(rep, o, c);
    json_object_set_new(rep, "policy", json_string(o->so.always ? "always" : "adaptive"));
    json_object_set_new(rep, "rounds", json_integer(c->calls));
    json_object_set_new(rep, "rounds_without_drafts", cli_round_nodraft_json(&c->spec));
    json_object_set_new(rep, "profile", cli_round_profile_json(&c->spec, step));
    json_object_set_new(rep, "prompts", json_incref(rows));
    if (o->json_path && !o->synth) write_svg(o->json_path, acc, G);
    return rep;
}

/* The sweep's closing table: one line per P. */
static void synth_table(json_t *runs) {
    printf("synthetic sweep (benchmark only, NOT lossless):\n%-12s %8s %8s %8s %10s %10s %10s\n", "P", "tau_exp", "tau",
           "speedup", "draft/rnd", "verify/rnd", "plain/tok");
    size_t i;
    json_t *r;
    char name[512];
    json_array_foreach(runs, i, r) {
        sp_synth sy = {0};
        json_t *v;
        size_t j;
        json_array_foreach(json_object_get(r, "synthetic_p"), j, v) if (j < SP_SPEC_MAX_G) sy.p[sy.n++] = (float)json_real_value(v);
        cli_synth_name(&sy, name, sizeof name);
        printf("%-12s %8.2f %8.2f %7.2fx %8.2fms %8.2fms %8.2fms\n", name, json_real_value(json_object_get(r, "expected_tau")),
               json_real_value(json_object_get(r, "tau")), json_real_value(json_object_get(r, "speedup")),
               json_real_value(json_object_get(r, "draft_ms_per_round")),
               json_real_value(json_object_get(r, "verify_ms_per_round")),
               json_real_value(json_object_get(r, "plain_ms_per_token")));
    }
}

/* One pass over the prompts (synthetic acceptance o->synth, or none); its report into runs. The
 * exit status: 0, 1 when a lossless pass's outputs differ from plain decoding, 2 on an error. */
static int bench_pass(bench_opts *o, sp_session *s, sp_session_req *r, const cli_prompt *ps, int np, json_t *runs) {
    sp_err err = {{0}};
    if (sp_session_set_synthetic(s, o->synth, &err)) return cli_error(CMD, "%s", err.msg), 2;
    if (o->synth) {
        cli_synth_banner(stdout, CMD, o->synth);
        cli_synth_banner(stderr, CMD, o->synth);
    }
    sp_policy carry = {0}; /* the prompts run one after another: the policy's measurements carry over */
    r->policy_carry = &carry;
    r->gen.ignore_eos = o->synth ? 1 : o->ignore_eos; /* accepted drafts may be an EOS: a synthetic pass runs to -n */
    cli_compare_sums c = {0};
    json_t *rows = json_array();
    int status = 2;
    if (!bench_prompts(o, s, r, ps, np, &c, rows)) {
        json_array_append_new(runs, bench_report(o, s, &c, rows));
        status = c.mismatches && !o->synth ? 1 : 0;
        if (status) cli_error(CMD, "%d prompt(s) produced output different from plain decoding", c.mismatches);
    }
    json_decref(rows);
    return status;
}

/* The report (one pass's, or {"synthetic": true, "lossless": false, "sweep": [...]}) to --json. */
static void write_report(const bench_opts *o, json_t *runs, int synthetic) {
    if (!o->json_path || !json_array_size(runs)) return;
    json_t *rep = synthetic ? json_pack("{s:b, s:b, s:O}", "synthetic", 1, "lossless", 0, "sweep", runs)
                            : json_incref(json_array_get(runs, 0));
    sp_err err = {{0}};
    char *text = json_dumps(rep, JSON_INDENT(1));
    if (sp_write_file_atomic(o->json_path, text, strlen(text), &err)) cli_error(CMD, "%s", err.msg);
    free(text);
    json_decref(rep);
}

int cmd_bench_spec(int argc, char **argv) {
    bench_opts o = {.n_new = 128, .pen = CLI_SAMPLE_OPTS_UNSET, .so = CLI_SPEC_OPTS_DEFAULT, .to = CLI_TREE_OPTS_DEFAULT,
                    .sy = CLI_SYNTH_OPTS_DEFAULT};
    int rc = bench_parse(&o, argc, argv);
    if (rc) return rc > 0 ? 0 : 2;
    sp_synth synth[SP_SPEC_MAX_G];
    int n_synth = 0;
    if (cli_synth_resolve(CMD, &o.sy, synth, SP_SPEC_MAX_G, &n_synth)) return 2;
    if (n_synth && !strcmp(o.so.spec, "none")) return cli_error(CMD, "--spec-synthetic needs a drafter (--spec)"), 2;
    sp_session *s = NULL;
    cli_prompt *ps = NULL;
    int np = 0, status = 2;
    sp_session_req r = sp_session_req_default();
    sp_sample_params sdef = sp_sample_params_default();
    json_t *runs = json_array();
    if (!cli_session_open(CMD, o.model, o.threads, &o.so, &o.to, NULL, 0, &s) &&
        !cli_prompts_read(CMD, o.prompts, o.model, o.text_prompts, &ps, &np) &&
        !cli_sample_resolve(CMD, &o.pen, o.model, &sdef, 0, &r.gen)) {
        r.gen.max_new = o.n_new;
        o.ignore_eos = r.gen.ignore_eos;
        status = 0;
        for (int i = 0; i < (n_synth ? n_synth : 1) && status != 2; i++) {
            o.synth = n_synth ? &synth[i] : NULL;
            int st = bench_pass(&o, s, &r, ps, np, runs);
            if (st > status) status = st;
        }
        if (n_synth && json_array_size(runs)) synth_table(runs);
        write_report(&o, runs, n_synth > 0);
    }
    json_decref(runs);
    sp_session_free(s);
    cli_prompts_free(ps, np);
    return status;
}
