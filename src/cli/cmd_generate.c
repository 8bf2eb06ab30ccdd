/* cmd_generate.c — `specula generate`: generation from a prompt (token ids, or text when the
 * model has a tokenizer: -p TEXT or -f FILE), plain or speculative (--spec KIND, or -md DIR
 * alone), streaming text (or token ids) to stdout or printing one JSON object. The command is
 * its flags and its output: the engine session (api/session.h) loads the model and drafter,
 * turns the prompt into tokens, runs the request and applies stop strings (--stop / -r: never
 * printed). Sampling settings the user does not give come from the model's
 * generation_config.json (sample_cli.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "chat_cli.h"
#include "core/core.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample_cli.h"
#include "session_cli.h"
#include "spec_cli.h"

static const char *CMD = "generate";

/* -n -1 without -c: the model's max_position_embeddings, capped (the KV cache is allocated whole) */
#define CLI_CTX_AUTO_MAX 4096
#define CLI_CTX_AUTO_MAX_STR "4096"

typedef struct {
    const char *dir, *text, *ids_arg, *file;
    const char *grammar, *grammar_file, *json_schema; /* structured output (one of them) */
    char *gbnf;                                       /* the grammar they give, resolved */
    int n_predict, threads, ignore_eos, json, ctx, chat, escape;
    cli_sample_opts samp;
    cli_list stops, bias_list;
    int32_t bias_ids[CLI_LIST_MAX]; /* -l: the logit biases (gp.penalty points here) */
    float bias[CLI_LIST_MAX];
    cli_spec_opts spec;
    cli_tree_opts tree;
    cli_chat_opts chat_o;
    sp_gen_params gp; /* resolved sampling, penalties, extra eos ids */
} gen_opts;

/* The flags. Returns 0 to run, 1 when --help was printed, -1 on a usage error (printed). */
static int gen_parse(gen_opts *g, int argc, char **argv) {
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &g->dir, "DIR", "model directory (config.json + safetensors) or FILE.gguf, required"},
        {"-p", "--prompt", CLI_STR, &g->text, "TEXT", "prompt text (needs the model's tokenizer)"},
        {"-f", "--file", CLI_STR, &g->file, "FILE", "read the prompt text from FILE (one trailing newline dropped)"},
        {NULL, "--prompt-ids", CLI_STR, &g->ids_arg, "IDS", "prompt as comma-separated token ids"},
        {"-n", "--n-predict", CLI_INT, &g->n_predict, "N",
         "most tokens to generate (default 64, in -cnv until the end of the turn; -1 = until EOS or the context is full)"},
        {"-t", "--threads", CLI_INT, &g->threads, "N", "threads (default: all cores)"},
        {"-c", "--ctx-size", CLI_INT, &g->ctx, "N",
         "KV cache size (default: prompt + N; with -n -1 the model's context, at most " CLI_CTX_AUTO_MAX_STR ")"},
        {"-r", "--stop", CLI_LIST, &g->stops, "STR",
         "stop when the text contains STR (repeatable; STR is not printed; \\n \\t escapes; also --reverse-prompt)"},
        {NULL, "--reverse-prompt", CLI_LIST, &g->stops, "STR", "same as --stop"},
        {NULL, "--ignore-eos", CLI_FLAG, &g->ignore_eos, NULL, "do not stop at EOS"},
        {NULL, "--json", CLI_FLAG, &g->json, NULL, "print one JSON object {tokens, text, stats, stop, seed}"},
        {NULL, "--chat", CLI_FLAG, &g->chat, NULL, "wrap the prompt in the model's chat template"},
        {NULL, "--spec-always", CLI_FLAG, &g->spec.always, NULL,
         "draft every round (default: stop drafting while it does not pay, probing now and then)"},
        {"-e", "--escape", CLI_FLAG, &g->escape, NULL, "process \\n \\t \\\\ escapes in the prompt (-p / -f), as llama.cpp"},
        {"-l", "--logit-bias", CLI_LIST, &g->bias_list, "ID(+|-)B",
         "add B to token ID's logit (15043+1, 15043-inf bans it; repeatable), as llama.cpp"},
        {NULL, "--grammar", CLI_STR, &g->grammar, "GBNF", "the output follows this GBNF grammar (llama.cpp's syntax)"},
        {NULL, "--grammar-file", CLI_STR, &g->grammar_file, "FILE", "the output follows the GBNF grammar in FILE"},
        {"-j", "--json-schema", CLI_STR, &g->json_schema, "SCHEMA",
         "the output is JSON following this JSON Schema (inline JSON, or a FILE holding it)"},
    };
    int n_opts = 18;
    n_opts += cli_sample_opt_rows(opts + n_opts, &g->samp);
    n_opts += cli_spec_opt_rows(opts + n_opts, &g->spec);
    n_opts += cli_tree_opt_rows(opts + n_opts, &g->tree);
    n_opts += cli_chat_opt_rows(opts + n_opts, &g->chat_o);
    n_opts += cli_log_opt_rows(opts + n_opts);
    int rc = cli_parse(CMD, "-m DIR (-p TEXT | -f FILE | --prompt-ids 1,2,3) [options]", opts, n_opts, argc, argv,
                       NULL, NULL, 0);
    if (rc) return rc > 0 ? 1 : -1;
    if (!g->dir) return cli_error(CMD, "-m DIR is required (see specula generate --help)"), -1;
    if (g->n_predict == INT_MIN) g->n_predict = g->chat_o.cnv ? -1 : 64; /* -n not given */
    if (g->chat_o.cnv && g->json)
        return cli_error(CMD, "--json does not go with -cnv (an interactive chat streams its replies as text)"), -1;
    if ((g->n_predict < 1 && g->n_predict != -1) || g->n_predict > CLI_MAX_TOKENS)
        return cli_error(CMD, "-n must be in [1, %d], or -1 (until EOS or the context is full), got %d",
                         CLI_MAX_TOKENS, g->n_predict), -1;
    if (g->ctx < 0 || g->ctx > CLI_MAX_TOKENS)
        return cli_error(CMD, "-c must be in [0, %d], got %d", CLI_MAX_TOKENS, g->ctx), -1;
    g->gp = sp_gen_params_default();
    sp_sample_params def = sp_sample_params_default();
    if (cli_sample_resolve(CMD, &g->samp, g->dir, &def, 1, &g->gp) || cli_spec_resolve(CMD, &g->spec, "none") ||
        cli_logit_bias_parse(CMD, &g->bias_list, g->bias_ids, g->bias, &g->gp))
        return -1;
    for (int i = 0; i < g->stops.n; i++) cli_unescape((char *)g->stops.v[i]); /* argv's own storage */
    return 0;
}

/* --grammar / --grammar-file / --json-schema into g->gbnf (checked by compiling it). Prints errors;
 * returns 0 / -1. */
static int gen_grammar(gen_opts *g) {
    int n = !!g->grammar + !!g->grammar_file + !!g->json_schema;
    if (n == 0) return 0;
    if (n > 1) return cli_error(CMD, "give one of --grammar, --grammar-file and --json-schema"), -1;
    sp_err err = {{0}};
    char *buf = NULL;
    size_t len = 0;
    const char *src = g->grammar_file ? g->grammar_file : g->json_schema;
    if (g->grammar) buf = strdup(g->grammar);
    else if (g->json_schema && g->json_schema[strspn(g->json_schema, " \t\n")] == '{') buf = strdup(g->json_schema);
    else if (sp_read_file(src, &buf, &len, &err)) return cli_error(CMD, "%s: %s", src, err.msg), -1;
    if (!buf) return cli_error(CMD, "out of memory"), -1;
    if (g->json_schema) {
        g->gbnf = sp_json_schema_gbnf_text(buf, strlen(buf), &err);
        free(buf);
        if (!g->gbnf) return cli_error(CMD, "--json-schema: %s", err.msg), -1;
    } else {
        g->gbnf = buf;
    }
    sp_grammar *gr = sp_grammar_parse(g->gbnf, strlen(g->gbnf), NULL, &err);
    sp_grammar_free(gr);
    if (!gr) return cli_error(CMD, "%s: %s", g->json_schema ? "--json-schema" : "--grammar", err.msg), -1;
    return 0;
}

/* -f FILE into g->text (*buf owns it). Prints errors; returns 0 / -1. */
static int gen_read_file(gen_opts *g, char **buf) {
    *buf = NULL;
    if (!g->file) return 0;
    if (g->text) return cli_error(CMD, "give either -p TEXT or -f FILE, not both"), -1;
    size_t len = 0;
    sp_err err = {{0}};
    off_t size = 0;
    int fd = sp_open_regular(g->file, &size, &err);
    if (fd < 0) return cli_error(CMD, "-f: %s", err.msg), -1;
    close(fd);
    if ((uint64_t)size > CLI_MAX_PROMPT_BYTES) /* more text than any context holds: refused unread */
        return cli_error(CMD, "-f: %s is %lld bytes; a prompt may be at most %d bytes (more than any context holds)",
                         g->file, (long long)size, CLI_MAX_PROMPT_BYTES), -1;
    if (sp_read_file(g->file, buf, &len, &err)) return cli_error(CMD, "-f: %s", err.msg), -1;
    if (len && (*buf)[len - 1] == '\n') (*buf)[--len] = 0;
    g->text = *buf;
    return 0;
}

/* -e: the prompt's escapes into their characters (a copy in *buf when the text is -p's) */
static int gen_escape(gen_opts *g, char **buf) {
    if (!g->escape || !g->text) return 0;
    if (!*buf && !(*buf = strdup(g->text))) return cli_error(CMD, "out of memory"), -1;
    cli_unescape(*buf);
    g->text = *buf;
    return 0;
}

/* streamed output: text as it is released, or token ids for a model without a tokenizer */
typedef struct {
    int stream, count, ids;
} gen_stream;

static int on_id(void *ctx, int32_t tok) {
    gen_stream *s = ctx;
    s->count++;
    if (s->stream && s->ids) {
        printf("%s%d", s->count > 1 ? " " : "", tok);
        fflush(stdout);
    }
    return 0;
}

static int on_text(void *ctx, int32_t tok, const char *text, size_t n) {
    gen_stream *s = ctx;
    if (s->stream) {
        fwrite(text, 1, n, stdout);
        fflush(stdout);
    }
    return 0;
}

/* plain and speculative runs report through one struct. spec: the speculative run's figures (NULL:
 * plain decoding); from: the counts of where the tokens came from (a plain run under a grammar has
 * the grammar's forced tokens too; NULL: all from the target) */
static int print_json(const int32_t *toks, int n, const char *text, const sp_gen_stats *st,
                      const sp_spec_stats *spec, const sp_spec_stats *from, double mean_conf, const char *stop,
                      uint64_t seed) {
    json_t *o = json_object(), *arr = json_array(), *js = json_object();
    for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer(toks[i]));
    json_object_set_new(o, "tokens", arr);
    if (text) json_object_set_new(o, "text", json_string(text));
    json_object_set_new(js, "prompt_tokens", json_integer(st->prompt_tokens));
    json_object_set_new(js, "emitted", json_integer(st->emitted));
    json_object_set_new(js, "prefill_ms", json_real(st->prefill_ms));
    json_object_set_new(js, "decode_ms", json_real(st->decode_ms));
    json_object_set_new(js, "decode_tps", json_real(st->decode_tps));
    if (spec) {
        json_t *pos = json_array();
        for (int k = 0; k < spec->n_pos; k++) json_array_append_new(pos, json_real(spec->accept_per_position[k]));
        json_object_set_new(js, "drafted", json_integer(spec->drafted));
        json_object_set_new(js, "accepted", json_integer(spec->accepted));
        json_object_set_new(js, "target_calls", json_integer(spec->target_calls));
        json_object_set_new(js, "acceptance_rate", json_real(spec->acceptance_rate));
        json_object_set_new(js, "mean_accept_len", json_real(spec->mean_accept_len));
        json_object_set_new(js, "accept_per_position", pos);
        json_object_set_new(js, "draft_ms", json_real(spec->draft_ms));
        json_object_set_new(js, "grammar_forced", json_integer(spec->forced));
        json_object_set_new(js, "grammar_cut", json_integer(spec->cut));
        json_object_set_new(js, "verify_ms", json_real(spec->verify_ms));
        json_t *nd = json_object();
        for (int r = 0; r < SP_NODRAFT_N; r++)
            json_object_set_new(nd, sp_nodraft_reason_name(r), json_integer(spec->rounds_nodraft[r]));
        json_object_set_new(js, "rounds_without_drafts", nd);
        json_t *vl = json_array();
        for (int k = 0; k <= spec->n_pos; k++) json_array_append_new(vl, json_integer(spec->verify_len_hist[k]));
        json_object_set_new(js, "verify_len_hist", vl);
        if (mean_conf >= 0) json_object_set_new(js, "mean_confidence", json_real(mean_conf));
    }
    /* where the emitted tokens came from: forced by the grammar, the drafter's accepted drafts, the target */
    json_object_set_new(js, "tokens_from", json_pack("{s:i, s:i, s:i}", "forced", from ? from->from_forced : 0, "drafter",
                                                     from ? from->from_drafter : 0, "target",
                                                     from ? from->from_target : st->emitted));
    json_object_set_new(o, "stats", js);
    json_object_set_new(o, "stop", json_string(stop));
    json_object_set_new(o, "seed", json_integer((json_int_t)seed));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!s) return cli_error(CMD, "out of memory writing JSON");
    puts(s);
    free(s);
    return 0;
}

/* the closing lines on stderr */
static void print_summary(const gen_opts *g, sp_session *s, const sp_session_out *o) {
    const sp_gen_stats *st = &o->gen;
    fprintf(stderr,
            "prompt %d tokens, prefill %.1f ms (%.1f tok/s) | %d emitted, decode %.1f ms (%.2f tok/s) | "
            "stop: %s | %d threads | seed %llu%s\n",
            st->prompt_tokens, st->prefill_ms, st->prefill_tps, st->emitted, st->decode_ms, st->decode_tps, o->stop,
            sp_model_threads(sp_session_model(s)), (unsigned long long)g->gp.sample.seed,
            g->samp.seed_random ? " (random)" : "");
    if (!o->speculative) return;
    const sp_spec_stats *ss = &o->spec;
    fprintf(stderr,
            "spec %s: drafted %d, accepted %d (%.3f), tau %.2f tokens per verify, %d target calls, "
            "draft %.1f ms, verify %.1f ms\n",
            sp_session_drafter_kind(s), ss->drafted, ss->accepted, ss->acceptance_rate, ss->mean_accept_len,
            ss->target_calls, ss->draft_ms, ss->verify_ms);
    fprintf(stderr, "verify lengths (rounds by drafts verified):");
    for (int k = 0; k <= ss->n_pos; k++)
        if (ss->verify_len_hist[k]) fprintf(stderr, " %d:%d", k, ss->verify_len_hist[k]);
    for (int r = 0; r < SP_NODRAFT_N; r++)
        if (ss->rounds_nodraft[r])
            fprintf(stderr, " | no drafts (%s): %d rounds", sp_nodraft_reason_name(r), ss->rounds_nodraft[r]);
    if (o->mean_conf >= 0) fprintf(stderr, " | mean confidence %.3f", o->mean_conf);
    if (g->gbnf)
        fprintf(stderr, " | grammar: %d drafts forced (no drafter call), %d drafts cut", ss->forced, ss->cut);
    fprintf(stderr, "\n");
}

/* -n -1: until EOS or the context is full (the loops stop at the context) */
static int gen_auto_len(gen_opts *g, sp_session *s, int n_prompt) {
    if (g->n_predict != -1) return 0;
    int mp = sp_model_config(sp_session_model(s))->max_pos;
    if (!g->ctx) g->ctx = mp > 0 && mp < CLI_CTX_AUTO_MAX ? mp : CLI_CTX_AUTO_MAX;
    if (n_prompt >= g->ctx)
        return cli_error(CMD, "the prompt (%d tokens) fills the context (%d): give a larger -c", n_prompt, g->ctx), -1;
    g->n_predict = g->ctx;
    return 0;
}

/* One request on an open session; the exit status. */
static int gen_request(gen_opts *g, sp_session *s, const int32_t *prompt, int n_prompt) {
    int mp = sp_model_config(sp_session_model(s))->max_pos;
    if (mp > 0 && g->ctx > mp) {
        fprintf(stderr, "specula: note: %s: -c %d is above the model's context (%d): using %d\n", CMD, g->ctx, mp, mp);
        g->ctx = mp;
    }
    if (gen_auto_len(g, s, n_prompt)) return 2;
    gen_stream gs = {.stream = !g->json, .ids = !sp_session_tokenizer(s)};
    sp_session_req r = sp_session_req_default();
    r.gen = g->gp;
    r.gen.max_new = g->n_predict;
    r.gen.ignore_eos = g->ignore_eos;
    r.gen.max_ctx = g->ctx;
    r.gen.on_token = on_id;
    r.gen.cb_ctx = &gs;
    r.stops = g->stops.v;
    r.n_stops = g->stops.n;
    r.keep_text = 1;
    r.grammar = g->gbnf;
    r.on_text = on_text;
    r.cb_ctx = &gs;
    sp_session_out o;
    sp_err err = {{0}};
    int rc = 0;
    if (sp_session_generate(s, prompt, n_prompt, &r, &o, &err)) {
        if (gs.count) putchar('\n');
        rc = cli_error(CMD, "%s", err.msg);
    } else if (g->json) {
        rc = print_json(o.tokens, o.n_tokens, o.text, &o.gen, o.speculative ? &o.spec : NULL,
                        o.speculative || o.spec.from_forced > 0 ? &o.spec : NULL, o.mean_conf, o.stop,
                        g->gp.sample.seed) ? 2 : 0;
    } else {
        putchar('\n');
        fflush(stdout);
        print_summary(g, s, &o);
    }
    sp_session_out_free(&o);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gen_opts g = {.n_predict = INT_MIN, .samp = CLI_SAMPLE_OPTS_UNSET, .spec = CLI_SPEC_OPTS_DEFAULT,
                  .tree = CLI_TREE_OPTS_DEFAULT};
    int rc = gen_parse(&g, argc, argv);
    if (rc) return rc > 0 ? 0 : 2;
    char *file_text = NULL;
    if (gen_grammar(&g)) return 2;
    if (gen_read_file(&g, &file_text) || gen_escape(&g, &file_text)) {
        free(file_text);
        free(g.gbnf);
        return 2;
    }
    if (g.chat_o.cnv) { /* -n -1 in a chat: each reply ends at its end of turn (or the context) */
        rc = cli_chat_run(CMD, &g.chat_o,
                          &(cli_chat_run_opts){g.dir, g.text, g.n_predict, g.threads, g.ctx, g.gp.sample, &g.spec, &g.gp,
                                               g.stops.v, g.stops.n});
        free(file_text);
        free(g.gbnf);
        return rc;
    }
    if (!g.text && !g.ids_arg) { /* before loading anything */
        free(file_text);
        return cli_error(CMD, "no prompt: give -p TEXT or --prompt-ids 1,2,3");
    }
    sp_session *s = NULL;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    rc = 2;
    int drafter_ctx = g.ctx > 0 ? g.ctx + g.spec.draft_max + 1 : 0;
    if (!cli_session_open(CMD, g.dir, g.threads, &g.spec, &g.tree, g.chat_o.tmpl, drafter_ctx, &s) &&
        !cli_session_prompt(CMD, s, &g.chat_o, g.chat, g.text, g.ids_arg, &prompt, &n_prompt))
        rc = gen_request(&g, s, prompt, n_prompt);
    free(file_text);
    free(g.gbnf);
    free(prompt);
    sp_session_free(s);
    return rc;
}
