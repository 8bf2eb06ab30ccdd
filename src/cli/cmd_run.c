/* cmd_run.c — `specula run`: the README's main job. Loads a target and a drafter (by default the
 * embedded pair under models/default/), generates from held-out prompts with plain and with
 * speculative decoding, streams the speculative text, and prints a short table: tokens, plain
 * tok/s, speculative tok/s, speedup, τ, acceptance per position and whether the greedy outputs are
 * identical. --temp T > 0 uses the sampling verifier (outputs then differ by design; τ is reported).
 * --json prints the figures as one object. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
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
    int n = s->ts ? tok_stream_push(s->ts, tok, buf, sizeof buf) : snprintf(buf, sizeof buf, " %d", tok);
    if (n > 0) fwrite(buf, 1, (size_t)n, stdout);
    fflush(stdout);
    return 0;
}

/* prompts: one per line of a text file (default models/default/prompts.txt) */
static int read_lines(const char *path, char ***out, int *n) {
    char *text;
    sp_err err = {{0}};
    if (sp_read_file(path, &text, NULL, &err)) return cli_error(CMD, "%s", err.msg), -1;
    char **v = NULL;
    int k = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!*line) continue;
        char **nv = realloc(v, sizeof *v * (size_t)(k + 1));
        if (!nv) break;
        v = nv;
        v[k] = strdup(line);
        for (char *p = v[k]; *p; p++) /* the file escapes newlines inside a prompt as \n */
            if (p[0] == '\\' && p[1] == 'n') p[0] = '\n', memmove(p + 1, p + 2, strlen(p + 2) + 1);
        k++;
    }
    free(text);
    *out = v;
    *n = k;
    return k ? 0 : (cli_error(CMD, "%s: no prompts", path), -1);
}

int cmd_run(int argc, char **argv) {
    const char *target = "models/default/target", *prompts = NULL;
    int n_new = 96, threads = 0, json = 0, quiet = 0;
    float temp = 0.0f;
    uint64_t seed = 1;
    cli_spec_opts so = CLI_SPEC_OPTS_DEFAULT;
    so.spec = "dspark";
    so.draft_dir = "models/default/drafter";
    so.draft_max = 7;
    cli_opt opts[20] = {
        {"-m", "--model", CLI_STR, &target, "DIR", "target (default models/default/target)"},
        {NULL, "--prompts", CLI_STR, &prompts, "FILE", "one prompt per line (default TARGET/../prompts.txt)"},
        {"-n", "--n-predict", CLI_INT, &n_new, "N", "tokens per prompt (default 96)"},
        {NULL, "--temp", CLI_FLOAT, &temp, "T", "0 = greedy (default); > 0 uses the sampling verifier"},
        {"-s", "--seed", CLI_U64, &seed, "S", "sampling seed"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {NULL, "--json", CLI_FLAG, &json, NULL, "print the figures as one JSON object"},
        {"-q", "--quiet", CLI_FLAG, &quiet, NULL, "do not stream the generated text"},
    };
    int n = 8;
    n += cli_spec_opt_rows(opts + n, &so);
    int rc = cli_parse(CMD, "[-m TARGET] [--spec KIND -md DRAFTER] [--prompts FILE] [--temp T] [--json]", opts, n, argc,
                       argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    char cfg[4096], pdef[4096];
    struct stat tst; /* a GGUF file, or a directory with config.json */
    int target_file = stat(target, &tst) == 0 && S_ISREG(tst.st_mode);
    if (!target_file && (sp_path_join(cfg, sizeof cfg, target, "config.json") || !sp_file_exists(cfg)))
        return cli_error(CMD, "no model at %s (the embedded default pair is built by issue 8's script; "
                              "pass -m DIR --spec ngram to run any model)", target);
    if (!prompts) {
        snprintf(pdef, sizeof pdef, "%s/../prompts.txt", target);
        prompts = pdef;
    }
    char **lines = NULL;
    int nl = 0, status = 2;
    sp_err err = {{0}};
    sp_model *m = NULL, *dm = NULL;
    sp_drafter *d = NULL;
    tok_tokenizer *tok = NULL;
    if (read_lines(prompts, &lines, &nl)) return 2;
    if (sp_model_load(&m, target, threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto out;
    }
    sp_spec_params sp = sp_spec_params_default();
    sp.gen.max_new = n_new;
    sp.gen.sample = (sp_sample_params){temp, 0, 1.0f, 0.0f, seed};
    sp.draft_max = so.draft_max;
    sp.draft_min = so.draft_min;
    if (cli_make_drafter(CMD, &so, m, target, &sp.gen.sample, 8192, threads, &dm, &d)) goto out;
    if (!d) {
        cli_error(CMD, "--spec none: nothing to compare");
        goto out;
    }
    if (tok_model_has_tokenizer(target)) {
        tok = tok_load_model(target, &err);
        if (!tok) {
            cli_error(CMD, "%s", err.msg);
            goto out;
        }
    }
    int32_t *a = malloc(sizeof(int32_t) * (size_t)n_new), *b = malloc(sizeof(int32_t) * (size_t)n_new);
    double plain_ms = 0, spec_ms = 0, draft_ms = 0, verify_ms = 0;
    long tok_plain = 0, tok_spec = 0, calls = 0, pd[SP_SPEC_MAX_G] = {0}, pa[SP_SPEC_MAX_G] = {0};
    int identical = 1, G = so.draft_max;
    for (int i = 0; i < nl; i++) {
        int32_t *ids = NULL;
        int nid = 0;
        if (cli_load_prompt(CMD, target, tok ? lines[i] : NULL, tok ? NULL : lines[i], 0, &ids, &nid)) goto out;
        run_stream rs = {tok ? tok_stream_new(tok) : NULL, !json && !quiet};
        sp_spec_stats s0, s1;
        sp_spec_params spp = sp;
        if (rs.stream) printf("\n--- prompt %d: %s\n", i + 1, lines[i]);
        int fail = sp_spec_generate(m, NULL, ids, nid, &sp, a, n_new, &s0, &err);
        spp.gen.on_token = on_token;
        spp.gen.cb_ctx = &rs;
        fail = fail || sp_spec_generate(m, d, ids, nid, &spp, b, n_new, &s1, &err);
        if (rs.ts) {
            char buf[512];
            int k;
            while (rs.stream && (k = tok_stream_flush(rs.ts, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)k, stdout);
            tok_stream_free(rs.ts);
        }
        free(ids);
        if (fail) {
            cli_error(CMD, "prompt %d: %s", i + 1, err.msg);
            goto out;
        }
        if (rs.stream) putchar('\n');
        identical &= s0.emitted == s1.emitted && !memcmp(a, b, sizeof(int32_t) * (size_t)s0.emitted);
        plain_ms += s0.decode_ms;
        spec_ms += s1.decode_ms;
        draft_ms += s1.draft_ms;
        verify_ms += s1.verify_ms;
        tok_plain += s0.emitted;
        tok_spec += s1.emitted;
        calls += s1.target_calls;
        for (int k = 0; k < G; k++) pd[k] += s1.pos_drafted[k], pa[k] += s1.pos_accepted[k];
    }
    double plain_tps = plain_ms > 0 ? tok_plain * 1000.0 / plain_ms : 0, spec_tps = spec_ms > 0 ? tok_spec * 1000.0 / spec_ms : 0;
    double tau = calls ? (double)tok_spec / calls : 0, speedup = plain_tps > 0 ? spec_tps / plain_tps : 0;
    /* where a speculative round's time goes, against one plain decoding step */
    double rd = calls ? draft_ms / calls : 0, rv = calls ? verify_ms / calls : 0;
    double ro = calls ? (spec_ms - draft_ms - verify_ms) / calls : 0, step = tok_plain ? plain_ms / tok_plain : 0;
    if (json) {
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
        json_object_set_new(o, "plain_ms_per_token", json_real(step));
        json_object_set_new(o, "draft_ms_per_round", json_real(rd));
        json_object_set_new(o, "verify_ms_per_round", json_real(rv));
        json_object_set_new(o, "other_ms_per_round", json_real(ro));
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        printf("\n%-34s %s\n", "target", target);
        printf("%-34s %s%s%s\n", "drafter", so.spec, so.draft_dir && strcmp(so.spec, "ngram") ? " " : "",
               so.draft_dir && strcmp(so.spec, "ngram") ? so.draft_dir : "");
        printf("%-34s %ld (%d prompts, %s)\n", "tokens", tok_spec, nl, temp > 0 ? "sampling" : "greedy");
        printf("%-34s %.2f tok/s\n", "plain decoding", plain_tps);
        printf("%-34s %.2f tok/s\n", "speculative decoding", spec_tps);
        printf("%-34s %.2fx\n", "speedup", speedup);
        printf("%-34s %.2f tokens per target forward\n", "tau", tau);
        printf("%-34s draft %.2f + verify %.2f + other %.2f ms (plain step %.2f ms)\n", "time per round", rd, rv, ro,
               step);
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
    for (int i = 0; i < nl; i++) free(lines[i]);
    free(lines);
    tok_free(tok);
    sp_drafter_free(d);
    sp_model_free(dm);
    sp_model_free(m);
    return status;
}
