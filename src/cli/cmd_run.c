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
#include "core/core.h"
#include "prompts_cli.h"
#include "round_report.h"
#include "sample_cli.h"
#include "spec_cli.h"
#include "tokenizer/tokenizer.h"

static const char *CMD = "run";

typedef struct {
    tok_stream *ts;
    int stream;
} run_stream;

static int on_token(void *ctx, int32_t tok) {
    run_stream *s = ctx;
    if (!s->stream) return 0;
    char buf[512];
    int n = s->ts ? sp_tok_stream_push(s->ts, tok, buf, sizeof buf) : snprintf(buf, sizeof buf, " %d", tok);
    if (n > 0) fwrite(buf, 1, (size_t)n, stdout);
    fflush(stdout);
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *target = NULL, *prompts = NULL;
    int n_new = 96, threads = 0, json = 0, quiet = 0, text_prompts = 0, always = 0;
    float temp = 0.0f;
    uint64_t seed = 1;
    const char *seed_arg = NULL;
    int seed_random = 0;
    cli_sample_opts pen = CLI_SAMPLE_OPTS_UNSET;
    cli_spec_opts so = CLI_SPEC_OPTS_DEFAULT;
    cli_tree_opts to = CLI_TREE_OPTS_DEFAULT;
    so.draft_max = 7;
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &target, "DIR", "target (default: the embedded model, models/default/target)"},
        {NULL, "--prompts", CLI_STR, &prompts, "FILE",
         "JSONL prompts ({\"prompt\"}, {\"prompt_ids\"} or {\"messages\"}) (default TARGET/../prompts.jsonl)"},
        {NULL, "--text-prompts", CLI_FLAG, &text_prompts, NULL, "the prompt file is plain text, one prompt per line"},
        {"-n", "--n-predict", CLI_INT, &n_new, "N", "tokens per prompt (default 96)"},
        {NULL, "--temp", CLI_FLOAT, &temp, "T", "0 = greedy (default); > 0 uses the sampling verifier"},
        {"-s", "--seed", CLI_STR, &seed_arg, "S", "sampling seed (default 1; -1 = random, printed)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {NULL, "--json", CLI_FLAG, &json, NULL, "print the figures as one JSON object"},
        {"-q", "--quiet", CLI_FLAG, &quiet, NULL, "do not stream the generated text"},
        {NULL, "--spec-always", CLI_FLAG, &always, NULL,
         "draft every round (default: stop drafting while it does not pay, probing now and then)"},
    };
    int n = 10;
    int spec_row = n;
    n += cli_spec_opt_rows(opts + n, &so);
    opts[spec_row].help = "none (plain decoding only) | ngram | draft | assistant | dflash | dspark "
                          "(default dspark, or the kind -md's config.json names)";
    opts[spec_row + 1].help = "drafter directory (default TARGET/../drafter)";
    opts[spec_row + 2].help = "most drafts per verify (default 7, max 32)";
    n += cli_penalty_opt_rows(opts + n, &pen);
    n += cli_tree_opt_rows(opts + n, &to);
    int rc = cli_parse(CMD, "[-m TARGET] [--spec KIND -md DRAFTER] [--prompts FILE] [--temp T] [--json]", opts, n, argc,
                       argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (seed_arg && cli_seed_parse(CMD, seed_arg, &seed, &seed_random)) return 2;
    char root[4096], tdef[4300], cfg[4096], pdef[4400], ddef[4400];
    if (!target) {
        snprintf(tdef, sizeof tdef, "%s/target", cli_default_root(root, sizeof root));
        target = tdef;
    }
    struct stat tst; /* a GGUF file, or a directory with config.json */
    int target_file = stat(target, &tst) == 0 && S_ISREG(tst.st_mode);
    if (!target_file && (sp_path_join(cfg, sizeof cfg, target, "config.json") || !sp_file_exists(cfg)))
        return cli_error(CMD, "no model at %s (set SPECULA_DEFAULT_MODEL to the embedded model's directory, or "
                              "pass -m DIR --spec ngram to run any model)", target);
    if (cli_spec_resolve(CMD, &so, "dspark")) return 2;
    int plain_only = !strcmp(so.spec, "none");
    if (!so.draft_dir && strcmp(so.spec, "ngram") && !plain_only) {
        snprintf(ddef, sizeof ddef, "%s/../drafter", target); /* beside the target, not in the cwd */
        so.draft_dir = ddef;
    }
    if (!prompts) {
        snprintf(pdef, sizeof pdef, "%s/../prompts.jsonl", target);
        prompts = pdef;
    }
    cli_prompt *ps = NULL;
    int nl = 0, status = 2;
    sp_err err = {{0}};
    sp_model *m = NULL, *dm = NULL;
    sp_drafter *d = NULL;
    tok_tokenizer *tok = NULL;
    sp_spec_params sp = sp_spec_params_default();
    sp_sample_params sdef = {temp, 0, 1.0f, 0.0f, seed};
    if (cli_sample_resolve(CMD, &pen, target, &sdef, 0, &sp.gen)) return 2;
    if (cli_prompts_read(CMD, prompts, target, text_prompts, &ps, &nl)) return 2;
    if (sp_model_load(&m, target, threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto out;
    }
    sp.gen.max_new = n_new;
    sp.draft_max = so.draft_max;
    sp.draft_min = so.draft_min;
    sp.policy = always ? SP_SPEC_POLICY_ALWAYS : SP_SPEC_POLICY_ADAPTIVE;
    sp_policy carry = {0}; /* the prompts run one after another: the policy's measurements carry over */
    sp.policy_carry = &carry;
    sp.profile = 1;
    if (cli_tree_apply(CMD, &to, &sp)) goto out;
    if (cli_make_drafter(CMD, &so, m, target, &sp.gen.sample, 8192, threads, &dm, &d)) goto out;
    if (sp_tok_model_has_tokenizer(target)) {
        tok = sp_tok_load_model(target, &err);
        if (!tok) {
            cli_error(CMD, "%s", err.msg);
            goto out;
        }
    }
    int32_t *a = malloc(sizeof(int32_t) * (size_t)n_new), *b = malloc(sizeof(int32_t) * (size_t)n_new);
    double plain_ms = 0, spec_ms = 0, draft_ms = 0, verify_ms = 0;
    long tok_plain = 0, tok_spec = 0, calls = 0, pd[SP_SPEC_MAX_G] = {0}, pa[SP_SPEC_MAX_G] = {0};
    int identical = 1, G = so.draft_max;
    cli_round_sums rsum = {0}, rplain = {0};
    for (int i = 0; i < nl; i++) {
        const int32_t *ids = ps[i].ids;
        int nid = ps[i].n;
        run_stream rs = {tok ? sp_tok_stream_new(tok) : NULL, !json && !quiet};
        sp_spec_stats s0, s1 = {0};
        sp_spec_params spp = sp;
        if (rs.stream) printf("\n--- prompt %d: %s\n", i + 1, ps[i].label);
        spp.gen.on_token = on_token;
        spp.gen.cb_ctx = &rs;
        /* plain only: the plain run streams; else the speculative one does */
        int fail = sp_spec_generate(m, NULL, ids, nid, plain_only ? &spp : &sp, a, n_new, &s0, &err);
        if (plain_only) s1 = s0;
        else fail = fail || sp_spec_generate(m, d, ids, nid, &spp, b, n_new, &s1, &err);
        if (rs.ts) {
            char buf[512];
            int k;
            while (rs.stream && (k = sp_tok_stream_flush(rs.ts, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)k, stdout);
            sp_tok_stream_free(rs.ts);
        }
        if (fail) {
            cli_error(CMD, "prompt %d: %s", i + 1, err.msg);
            goto out;
        }
        if (rs.stream) putchar('\n');
        identical &= plain_only || (s0.emitted == s1.emitted && !memcmp(a, b, sizeof(int32_t) * (size_t)s0.emitted));
        plain_ms += s0.decode_ms;
        spec_ms += s1.decode_ms;
        draft_ms += s1.draft_ms;
        verify_ms += s1.verify_ms;
        tok_plain += s0.emitted;
        tok_spec += s1.emitted;
        calls += s1.target_calls;
        cli_round_sums_add(&rsum, &s1);
        cli_round_sums_add(&rplain, &s0);
        for (int k = 0; k < G; k++) pd[k] += s1.pos_drafted[k], pa[k] += s1.pos_accepted[k];
    }
    double plain_tps = plain_ms > 0 ? tok_plain * 1000.0 / plain_ms : 0, spec_tps = spec_ms > 0 ? tok_spec * 1000.0 / spec_ms : 0;
    double tau = calls ? (double)tok_spec / calls : 0, speedup = plain_tps > 0 ? spec_tps / plain_tps : 0;
    /* where a speculative round's time goes, against one plain decoding step */
    double rd = calls ? draft_ms / calls : 0, rv = calls ? verify_ms / calls : 0;
    double ro = calls ? (spec_ms - draft_ms - verify_ms) / calls : 0, step = tok_plain ? plain_ms / tok_plain : 0;
    if (plain_only && json) {
        printf("{\"spec\":\"none\",\"plain_tps\":%.6g,\"tokens\":%ld,\"temperature\":%g,\"plain_ms_per_token\":%.6g}\n",
               plain_tps, tok_plain, (double)temp, step);
    } else if (plain_only) {
        printf("\n%-34s %s\n", "target", target);
        printf("%-34s none (plain decoding only)\n", "drafter");
        printf("%-34s %ld (%d prompts, %s)\n", "tokens", tok_plain, nl, temp > 0 ? "sampling" : "greedy");
        printf("%-34s %.2f tok/s\n", "plain decoding", plain_tps);
    } else if (json) {
        json_t *o = json_object(), *ap = json_array();
        for (int k = 0; k < G; k++) json_array_append_new(ap, json_real(pd[k] ? (double)pa[k] / pd[k] : 0));
        json_object_set_new(o, "speedup", json_real(speedup));
        json_object_set_new(o, "tau", json_real(tau));
        if (temp == 0) json_object_set_new(o, "identical", json_boolean(identical));
        json_object_set_new(o, "plain_tps", json_real(plain_tps));
        json_object_set_new(o, "spec_tps", json_real(spec_tps));
        json_object_set_new(o, "accept_per_position", ap);
        json_object_set_new(o, "tokens", json_integer(tok_spec));
        json_object_set_new(o, "temperature", json_real(temp));
        json_object_set_new(o, "seed", json_integer((json_int_t)seed));
        json_object_set_new(o, "plain_ms_per_token", json_real(step));
        json_object_set_new(o, "draft_ms_per_round", json_real(rd));
        json_object_set_new(o, "verify_ms_per_round", json_real(rv));
        json_object_set_new(o, "other_ms_per_round", json_real(ro));
        json_object_set_new(o, "policy", json_string(always ? "always" : "adaptive"));
        json_object_set_new(o, "rounds", json_integer(calls));
        json_object_set_new(o, "rounds_without_drafts", cli_round_nodraft_json(&rsum));
        json_object_set_new(o, "profile", cli_round_profile_json(&rsum, step));
        json_object_set_new(o, "plain_profile", cli_round_profile_json(&rplain, step));
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        printf("\n%-34s %s\n", "target", target);
        printf("%-34s %s%s%s\n", "drafter", so.spec, so.draft_dir && strcmp(so.spec, "ngram") ? " " : "",
               so.draft_dir && strcmp(so.spec, "ngram") ? so.draft_dir : "");
        printf("%-34s %ld (%d prompts, %s)\n", "tokens", tok_spec, nl, temp > 0 ? "sampling" : "greedy");
        if (temp > 0) printf("%-34s %llu%s\n", "seed", (unsigned long long)seed, seed_random ? " (random)" : "");
        printf("%-34s %.2f tok/s\n", "plain decoding", plain_tps);
        printf("%-34s %.2f tok/s\n", "speculative decoding", spec_tps);
        printf("%-34s %.2fx\n", "speedup", speedup);
        printf("%-34s %.2f tokens per target forward\n", "tau", tau);
        printf("%-34s draft %.2f + verify %.2f + other %.2f ms (plain step %.2f ms)\n", "time per round", rd, rv, ro,
               step);
        cli_round_print(&rsum, step);
        printf("%-34s", "acceptance per position");
        for (int k = 0; k < G; k++) printf(" %.2f", pd[k] ? (double)pa[k] / pd[k] : 0);
        printf("\n");
        if (temp == 0) printf("%-34s %s\n", "outputs identical", identical ? "yes" : "NO");
        else printf("%-34s %s\n", "outputs identical", "n/a (sampling: same distribution, not same tokens)");
    }
    free(a);
    free(b);
    status = temp == 0 && !identical ? 1 : 0;
out:
    cli_prompts_free(ps, nl);
    sp_tok_free(tok);
    sp_drafter_free(d);
    sp_model_free(dm);
    sp_model_free(m);
    return status;
}
