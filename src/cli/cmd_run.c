/* cmd_run.c — `specula run`: the README's main job. Loads a target and a drafter (by default the
 * embedded pair, models/default/, found from any working directory: $SPECULA_DEFAULT_MODEL, next to
 * the binary (build/specula → ../models/default) or under its install prefix (PREFIX/bin/specula →
 * PREFIX/share/specula/default, where `make install` puts it)), generates from held-out prompts with
 * plain and with speculative decoding, streams the speculative text, and prints a short table:
 * tokens, plain tok/s, speculative tok/s, speedup, τ, acceptance per position and whether the
 * greedy outputs are identical. A default drafter and prompt file are looked up beside the target
 * (TARGET/../drafter, TARGET/../prompts.jsonl), not in the working directory. --spec none runs
 * plain decoding alone. --temp T > 0 uses the sampling verifier (outputs then differ by design; τ
 * is reported). --json prints the figures as one object. Speculation runs under the never-slower
 * policy unless --spec-always; both runs are profiled, and the report splits a speculative round
 * into draft / verify / engine parts as fractions of a plain step (round_report.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "compare_cli.h"
#include "core/core.h"
#include "prompts_cli.h"
#include "sample_cli.h"
#include "session_cli.h"
#include "spec_cli.h"

static const char *CMD = "run";

typedef struct {
    const char *target, *prompts, *seed_arg;
    int n_new, threads, json, quiet, text_prompts;
    float temp;
    uint64_t seed;
    int seed_random, plain_only;
    cli_sample_opts pen;
    cli_spec_opts so;
    cli_tree_opts to;
    char root[4096], tdef[4300], pdef[4400], ddef[4400];
} run_opts;

/* The flags. Returns 0 to run, 1 when --help was printed, -1 on a usage error (printed). */
static int run_parse(run_opts *o, int argc, char **argv) {
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &o->target, "DIR", "target (default: the embedded model, models/default/target)"},
        {NULL, "--prompts", CLI_STR, &o->prompts, "FILE",
         "JSONL prompts ({\"prompt\"}, {\"prompt_ids\"} or {\"messages\"}) (default TARGET/../prompts.jsonl)"},
        {NULL, "--text-prompts", CLI_FLAG, &o->text_prompts, NULL, "the prompt file is plain text, one prompt per line"},
        {"-n", "--n-predict", CLI_INT, &o->n_new, "N", "tokens per prompt (default 96)"},
        {NULL, "--temp", CLI_FLOAT, &o->temp, "T", "0 = greedy (default); > 0 uses the sampling verifier"},
        {"-s", "--seed", CLI_STR, &o->seed_arg, "S", "sampling seed (default 1; -1 = random, printed)"},
        {"-t", "--threads", CLI_INT, &o->threads, "N", "threads (default: all cores)"},
        {NULL, "--json", CLI_FLAG, &o->json, NULL, "print the figures as one JSON object"},
        {"-q", "--quiet", CLI_FLAG, &o->quiet, NULL, "do not stream the generated text; no model summary"},
        {NULL, "--spec-always", CLI_FLAG, &o->so.always, NULL,
         "draft every round (default: stop drafting while it does not pay, probing now and then)"},
        {"-v", "--verbose", CLI_FLAG, &cli_log_verbose, NULL, "a longer model summary on load"},
        {NULL, "--log-disable", CLI_FLAG, &cli_log_quiet, NULL, "no model summary on load"},
    };
    int n = 12, spec_row = n;
    n += cli_spec_opt_rows(opts + n, &o->so);
    opts[spec_row].help = "none (plain decoding only) | ngram | draft | assistant | dflash | dspark "
                          "(default dspark, or the kind -md's config.json names)";
    opts[spec_row + 1].help = "drafter directory (default TARGET/../drafter)";
    opts[spec_row + 2].help = "most drafts per verify (default 7, max 32)";
    n += cli_penalty_opt_rows(opts + n, &o->pen);
    n += cli_tree_opt_rows(opts + n, &o->to);
    int rc = cli_parse(CMD, "[-m TARGET] [--spec KIND -md DRAFTER] [--prompts FILE] [--temp T] [--json]", opts, n, argc,
                       argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 1 : -1;
    if (o->seed_arg && cli_seed_parse(CMD, o->seed_arg, &o->seed, &o->seed_random)) return -1;
    if (o->quiet) cli_log_quiet = 1;
    return 0;
}

/* The embedded pair's defaults: the target, its drafter and prompt file beside it (not in the
 * working directory). Prints errors; returns 0 / -1. */
static int run_defaults(run_opts *o) {
    char cfg[4096];
    if (!o->target) {
        snprintf(o->tdef, sizeof o->tdef, "%s/target", cli_default_root(o->root, sizeof o->root));
        o->target = o->tdef;
    }
    struct stat tst; /* a GGUF file, or a directory with config.json */
    int target_file = stat(o->target, &tst) == 0 && S_ISREG(tst.st_mode);
    if (!target_file && (sp_path_join(cfg, sizeof cfg, o->target, "config.json") || !sp_file_exists(cfg)))
        return cli_error(CMD, "no model at %s (set SPECULA_DEFAULT_MODEL to the embedded model's directory, or "
                              "pass -m DIR --spec ngram to run any model)", o->target), -1;
    if (cli_spec_resolve(CMD, &o->so, "dspark")) return -1;
    o->plain_only = !strcmp(o->so.spec, "none");
    if (!o->so.draft_dir && strcmp(o->so.spec, "ngram") && strcmp(o->so.spec, "suffix") && !o->plain_only) {
        snprintf(o->ddef, sizeof o->ddef, "%s/../drafter", o->target);
        o->so.draft_dir = o->ddef;
    }
    if (!o->prompts) {
        snprintf(o->pdef, sizeof o->pdef, "%s/../prompts.jsonl", o->target);
        o->prompts = o->pdef;
    }
    return 0;
}

static int on_text(void *ctx, int32_t tok, const char *text, size_t n) {
    fwrite(text, 1, n, stdout);
    fflush(stdout);
    return 0;
}

static int on_id(void *ctx, int32_t tok) {
    printf(" %d", tok);
    fflush(stdout);
    return 0;
}

/* Every prompt, plain then speculative, into the sums; the speculative text streams. */
static int run_prompts(run_opts *o, sp_session *s, const sp_session_req *r0, const cli_prompt *ps, int nl,
                       cli_compare_sums *c) {
    int stream = !o->json && !o->quiet;
    sp_session_req r = *r0;
    if (stream) {
        if (sp_session_tokenizer(s)) r.on_text = on_text;
        else r.gen.on_token = on_id;
    }
    for (int i = 0; i < nl; i++) {
        if (stream) printf("\n--- prompt %d: %s\n", i + 1, ps[i].label);
        sp_session_out o0, o1;
        sp_err err = {{0}};
        int fail = cli_compare_prompt(s, &r, ps[i].ids, ps[i].n, o->plain_only, &o0, &o1, &err);
        if (!fail) cli_compare_add(c, &o0, &o1, o->so.draft_max);
        sp_session_out_free(&o0);
        sp_session_out_free(&o1);
        if (fail) return cli_error(CMD, "prompt %d: %s", i + 1, err.msg), -1;
        if (stream) putchar('\n');
    }
    return 0;
}

/* the table's target line; the embedded model says what it is */
static void run_print_target(const run_opts *o) {
    printf("\n%-34s %s\n", "target", o->target);
    if (o->target == o->tdef)
        printf("%-34s the embedded model: a tiny Python code model (36M parameters) trained here to show\n"
               "%-34s speed and lossless identity on any machine; its text is code-shaped, not meaningful\n",
               "", "");
}

static void run_print_plain(const run_opts *o, const cli_compare_sums *c, int nl) {
    double plain_tps = c->plain_ms > 0 ? c->tok_plain * 1000.0 / c->plain_ms : 0;
    double step = c->tok_plain ? c->plain_ms / c->tok_plain : 0;
    if (o->json) {
        printf("{\"spec\":\"none\",\"plain_tps\":%.6g,\"tokens\":%ld,\"temperature\":%g,\"plain_ms_per_token\":%.6g}\n",
               plain_tps, c->tok_plain, (double)o->temp, step);
        return;
    }
    run_print_target(o);
    printf("%-34s none (plain decoding only)\n", "drafter");
    printf("%-34s %ld (%d prompts, %s)\n", "tokens", c->tok_plain, nl, o->temp > 0 ? "sampling" : "greedy");
    printf("%-34s %.2f tok/s\n", "plain decoding", plain_tps);
}

/* the speculative figures: tok/s, speedup, τ and where a round's time goes against a plain step */
typedef struct {
    double plain_tps, spec_tps, speedup, tau, step, rd, rv, ro;
} run_figures;

static run_figures run_figures_of(const cli_compare_sums *c) {
    run_figures f;
    f.plain_tps = c->plain_ms > 0 ? c->tok_plain * 1000.0 / c->plain_ms : 0;
    f.spec_tps = c->spec_ms > 0 ? c->tok_spec * 1000.0 / c->spec_ms : 0;
    f.tau = cli_compare_tau(c);
    f.speedup = f.plain_tps > 0 ? f.spec_tps / f.plain_tps : 0;
    f.rd = c->calls ? c->draft_ms / c->calls : 0;
    f.rv = c->calls ? c->verify_ms / c->calls : 0;
    f.ro = c->calls ? (c->spec_ms - c->draft_ms - c->verify_ms) / c->calls : 0;
    f.step = c->tok_plain ? c->plain_ms / c->tok_plain : 0;
    return f;
}

static void run_print_json(const run_opts *o, const cli_compare_sums *c) {
    run_figures f = run_figures_of(c);
    json_t *j = json_object(), *ap = json_array();
    for (int k = 0; k < o->so.draft_max; k++) json_array_append_new(ap, json_real(cli_compare_accept(c, k)));
    json_object_set_new(j, "speedup", json_real(f.speedup));
    json_object_set_new(j, "tau", json_real(f.tau));
    if (o->temp == 0) json_object_set_new(j, "identical", json_boolean(!c->mismatches));
    json_object_set_new(j, "plain_tps", json_real(f.plain_tps));
    json_object_set_new(j, "spec_tps", json_real(f.spec_tps));
    json_object_set_new(j, "accept_per_position", ap);
    json_object_set_new(j, "tokens", json_integer(c->tok_spec));
    json_object_set_new(j, "temperature", json_real(o->temp));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(j, "plain_ms_per_token", json_real(f.step));
    json_object_set_new(j, "draft_ms_per_round", json_real(f.rd));
    json_object_set_new(j, "verify_ms_per_round", json_real(f.rv));
    json_object_set_new(j, "other_ms_per_round", json_real(f.ro));
    json_object_set_new(j, "policy", json_string(o->so.always ? "always" : "adaptive"));
    json_object_set_new(j, "rounds", json_integer(c->calls));
    json_object_set_new(j, "rounds_without_drafts", cli_round_nodraft_json(&c->spec));
    json_object_set_new(j, "profile", cli_round_profile_json(&c->spec, f.step));
    json_object_set_new(j, "plain_profile", cli_round_profile_json(&c->plain, f.step));
    char *s = json_dumps(j, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* a warning on stderr when speculation was slower than plain decoding (by more than timing noise,
 * RUN_SLOW): how many rounds drafted nothing, and why */
#define RUN_SLOW 0.95
static void run_warn_slow(const run_opts *o, const cli_compare_sums *c, const run_figures *f) {
    if (f->speedup <= 0 || f->speedup >= RUN_SLOW) return;
    long none = 0;
    for (int r = 0; r < SP_NODRAFT_N; r++) none += c->spec.nodraft[r];
    fprintf(stderr, "warning: speculative decoding was slower than plain here (%.2fx; per prompt %.2fx .. %.2fx): "
                    "%ld of %ld rounds drafted nothing", f->speedup, c->speedup_min, c->speedup_max, none,
            c->spec.rounds);
    for (int r = 0; r < SP_NODRAFT_N; r++)
        if (c->spec.nodraft[r]) fprintf(stderr, ", %s %ld", sp_nodraft_reason_name(r), c->spec.nodraft[r]);
    fprintf(stderr, ". This drafter does not pay on these prompts%s; use --spec none for plain decoding\n",
            o->so.always ? "" : " (the policy stopped drafting where it lost)");
}

static void run_print_table(const run_opts *o, const cli_compare_sums *c, int nl) {
    run_figures f = run_figures_of(c);
    int md = o->so.draft_dir && strcmp(o->so.spec, "ngram") && strcmp(o->so.spec, "suffix");
    run_print_target(o);
    printf("%-34s %s%s%s\n", "drafter", o->so.spec, md ? " " : "", md ? o->so.draft_dir : "");
    printf("%-34s %ld (%d prompts, %s)\n", "tokens", c->tok_spec, nl, o->temp > 0 ? "sampling" : "greedy");
    if (o->temp > 0) printf("%-34s %llu%s\n", "seed", (unsigned long long)o->seed, o->seed_random ? " (random)" : "");
    printf("%-34s %.2f tok/s\n", "plain decoding", f.plain_tps);
    printf("%-34s %.2f tok/s\n", "speculative decoding", f.spec_tps);
    printf("%-34s %.2fx (per prompt %.2fx .. %.2fx)\n", "speedup", f.speedup, c->speedup_min, c->speedup_max);
    printf("%-34s %.2f tokens per target forward\n", "tau", f.tau);
    printf("%-34s draft %.2f + verify %.2f + other %.2f ms (plain step %.2f ms)\n", "time per round", f.rd, f.rv, f.ro,
           f.step);
    cli_round_print(&c->spec, f.step);
    printf("%-34s", "acceptance per position");
    for (int k = 0; k < o->so.draft_max; k++) printf(" %.2f", cli_compare_accept(c, k));
    printf("\n");
    if (o->temp == 0) printf("%-34s %s\n", "outputs identical", c->mismatches ? "NO" : "yes");
    else printf("%-34s %s\n", "outputs identical", "n/a (sampling: same distribution, not same tokens)");
    run_warn_slow(o, c, &f);
}

/* the requests' common settings; prints errors */
static int run_request(run_opts *o, sp_session_req *r, sp_policy *carry) {
    *r = sp_session_req_default();
    sp_sample_params sdef = {o->temp, 0, 1.0f, 0.0f, o->seed};
    if (cli_sample_resolve(CMD, &o->pen, o->target, &sdef, 0, &r->gen)) return -1;
    r->gen.max_new = o->n_new;
    r->policy_carry = carry; /* the prompts run one after another: the policy's measurements carry over */
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {.n_new = 96, .seed = 1, .pen = CLI_SAMPLE_OPTS_UNSET, .so = CLI_SPEC_OPTS_DEFAULT,
                  .to = CLI_TREE_OPTS_DEFAULT};
    o.so.draft_max = 7;
    int rc = run_parse(&o, argc, argv);
    if (rc) return rc > 0 ? 0 : 2;
    if (run_defaults(&o)) return 2;
    cli_prompt *ps = NULL;
    int nl = 0, status = 2;
    sp_session *s = NULL;
    sp_session_req r;
    sp_policy carry = {0};
    cli_compare_sums c = {0};
    if (run_request(&o, &r, &carry) || cli_prompts_read(CMD, o.prompts, o.target, o.text_prompts, &ps, &nl)) return 2;
    if (!o.json && o.target == o.tdef)
        printf("specula run: the embedded model, a tiny Python code model trained here to show speed and lossless "
               "identity (its text is code-shaped, not meaningful)\n");
    if (!cli_session_open(CMD, o.target, o.threads, &o.so, &o.to, NULL, 8192, &s) && !run_prompts(&o, s, &r, ps, nl, &c)) {
        if (o.plain_only) run_print_plain(&o, &c, nl);
        else if (o.json) run_print_json(&o, &c);
        else run_print_table(&o, &c, nl);
        status = o.temp == 0 && c.mismatches ? 1 : 0;
    }
    cli_prompts_free(ps, nl);
    sp_session_free(s);
    return status;
}
