/* cmd_generate.c — `specula generate`: generation from a prompt (token ids, or text when the
 * model has a tokenizer: -p TEXT or -f FILE), plain (sp_generate) or speculative (--spec KIND, or
 * -md DIR alone: sp_spec_generate), streaming text (or token ids) to stdout or printing one JSON
 * object. Stop strings (--stop / -r) end generation and are never printed: the streamed text
 * holds back a tail that may be the start of one (decode/stopstr.h). Sampling settings the user
 * does not give come from the model's generation_config.json (sample_cli.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "chat_cli.h"
#include "core/core.h"
#include "decode/generate.h"
#include "sample_cli.h"
#include "decode/spec.h"
#include "decode/stopstr.h"
#include "spec_cli.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"
#include "drafters/dflash.h"

static const char *CMD = "generate";

/* -n -1 without -c: the model's max_position_embeddings, capped (the KV cache is allocated whole) */
#define CLI_CTX_AUTO_MAX 4096
#define CLI_CTX_AUTO_MAX_STR "4096"

/* With a tokenizer, generated text streams to stdout as it becomes complete UTF-8 (never half a
 * character); without one, token ids do. */
typedef struct {
    int stream;          /* print as tokens arrive */
    int count;
    tok_tokenizer *tok;  /* NULL: print ids */
    tok_stream *ts;
    sp_stopstr *stop;    /* NULL: no stop strings */
    int stopped;         /* a stop string appeared */
} stream_ctx;

/* text that became final: through the stop-string matcher, then to stdout when streaming */
static void emit_text(stream_ctx *s, const char *text, size_t n) {
    if (s->stop && !s->stopped) {
        sp_err err = {{0}};
        int r = sp_stopstr_feed(s->stop, text, n, &text, &n, &err);
        if (r < 0) sp_log(SP_LOG_WARN, "%s", err.msg);
        if (r == 1) s->stopped = 1;
    } else if (s->stopped) {
        n = 0;
    }
    if (s->stream && n) fwrite(text, 1, n, stdout);
}

static int on_token(void *ctx, int32_t tok) {
    stream_ctx *s = ctx;
    s->count++;
    if (s->ts) {
        char buf[4096];
        int n = sp_tok_stream_push(s->ts, tok, buf, sizeof buf); /* what does not fit stays queued */
        if (n > 0) emit_text(s, buf, (size_t)n);
    } else if (s->stream) {
        printf("%s%d", s->count > 1 ? " " : "", tok);
    }
    if (s->stream) fflush(stdout);
    return s->stopped; /* a stop string ends generation after this token */
}

static void stream_finish(stream_ctx *s) {
    if (!s->ts) return;
    char buf[4096];
    int n;
    while ((n = sp_tok_stream_flush(s->ts, buf, sizeof buf)) > 0) emit_text(s, buf, (size_t)n);
    if (s->stop && !s->stopped) {
        const char *rest;
        size_t k;
        sp_stopstr_flush(s->stop, &rest, &k);
        if (s->stream && k) fwrite(rest, 1, k, stdout);
    }
}

/* plain and speculative runs report through one struct; spec == NULL for plain decoding */
static int print_json(const int32_t *toks, int n, const char *text, const sp_gen_stats *st,
                      const sp_spec_stats *spec, double mean_conf, const char *stop, uint64_t seed) {
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

int cmd_generate(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *ids_arg = NULL, *file = NULL;
    int n_predict = 64, threads = 0, ignore_eos = 0, json = 0, ctx = 0, chat = 0;
    cli_sample_opts so_s = CLI_SAMPLE_OPTS_UNSET;
    cli_list stops = {{0}, 0};
    cli_spec_opts so = CLI_SPEC_OPTS_DEFAULT;
    cli_tree_opts to = CLI_TREE_OPTS_DEFAULT;
    cli_chat_opts co = {0};
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &dir, "DIR", "model directory (config.json + safetensors) or FILE.gguf, required"},
        {"-p", "--prompt", CLI_STR, &text, "TEXT", "prompt text (needs the model's tokenizer)"},
        {"-f", "--file", CLI_STR, &file, "FILE", "read the prompt text from FILE (one trailing newline dropped)"},
        {NULL, "--prompt-ids", CLI_STR, &ids_arg, "IDS", "prompt as comma-separated token ids"},
        {"-n", "--n-predict", CLI_INT, &n_predict, "N",
         "most tokens to generate (default 64; -1 = until EOS or the context is full)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {"-c", "--ctx-size", CLI_INT, &ctx, "N",
         "KV cache size (default: prompt + N; with -n -1 the model's context, at most " CLI_CTX_AUTO_MAX_STR ")"},
        {"-r", "--stop", CLI_LIST, &stops, "STR",
         "stop when the text contains STR (repeatable; STR is not printed; \\n \\t escapes; also --reverse-prompt)"},
        {NULL, "--reverse-prompt", CLI_LIST, &stops, "STR", "same as --stop"},
        {NULL, "--ignore-eos", CLI_FLAG, &ignore_eos, NULL, "do not stop at EOS"},
        {NULL, "--json", CLI_FLAG, &json, NULL, "print one JSON object {tokens, text, stats, stop, seed}"},
        {NULL, "--chat", CLI_FLAG, &chat, NULL, "wrap the prompt in the model's chat template"},
        {NULL, "--spec-always", CLI_FLAG, &so.always, NULL,
         "draft every round (default: stop drafting while it does not pay, probing now and then)"},
    };
    int n_opts = 13;
    n_opts += cli_sample_opt_rows(opts + n_opts, &so_s);
    n_opts += cli_spec_opt_rows(opts + n_opts, &so);
    n_opts += cli_tree_opt_rows(opts + n_opts, &to);
    n_opts += cli_chat_opt_rows(opts + n_opts, &co);
    int rc = cli_parse(CMD, "-m DIR (-p TEXT | -f FILE | --prompt-ids 1,2,3) [options]", opts, n_opts, argc, argv,
                       NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!dir) return cli_error(CMD, "-m DIR is required (see specula generate --help)");
    if ((n_predict < 1 && n_predict != -1) || n_predict > CLI_MAX_TOKENS)
        return cli_error(CMD, "-n must be in [1, %d], or -1 (until EOS or the context is full), got %d", CLI_MAX_TOKENS,
                         n_predict);
    if (ctx < 0 || ctx > CLI_MAX_TOKENS) return cli_error(CMD, "-c must be in [0, %d], got %d", CLI_MAX_TOKENS, ctx);
    sp_err err = {{0}};
    sp_gen_params gp = sp_gen_params_default();
    sp_sample_params sp_def = sp_sample_params_default();
    if (cli_sample_resolve(CMD, &so_s, dir, &sp_def, 1, &gp)) return 2;
    if (cli_spec_resolve(CMD, &so, "none")) return 2;
    sp_sample_params sp = gp.sample;

    char *file_text = NULL;
    if (file) {
        if (text) return cli_error(CMD, "give either -p TEXT or -f FILE, not both");
        size_t len = 0;
        if (sp_read_file(file, &file_text, &len, &err)) return cli_error(CMD, "-f: %s", err.msg);
        if (len && file_text[len - 1] == '\n') file_text[--len] = 0;
        text = file_text;
    }
    int32_t *prompt = NULL, *out = NULL;
    int n_prompt = 0;
    if (co.cnv) { /* -n -1 in a chat: replies of up to 1024 tokens, each ending at its end of turn */
        rc = cli_chat_run(CMD, &co,
                          &(cli_chat_run_opts){dir, text, n_predict > 0 ? n_predict : 1024, threads, ctx, sp, &so, &gp});
        free(file_text);
        return rc;
    }
    rc = cli_chat_wanted(&co, chat, text) ? cli_chat_prompt(CMD, dir, &co, text, &prompt, &n_prompt)
                                          : cli_load_prompt(CMD, dir, text, ids_arg, &prompt, &n_prompt);
    free(file_text);
    if (rc) return 2;
    stream_ctx sc = {.stream = !json};
    if (sp_tok_model_has_tokenizer(dir)) {
        sc.tok = sp_tok_load_model(dir, &err);
        if (!sc.tok) {
            free(prompt);
            return cli_error(CMD, "%s", err.msg);
        }
        sc.ts = sp_tok_stream_new(sc.tok);
    }
    for (int i = 0; i < stops.n; i++) cli_unescape((char *)stops.v[i]); /* argv's own storage */
    if (stops.n && !sc.tok) {
        free(prompt);
        sp_tok_free(sc.tok);
        return cli_error(CMD, "--stop needs the model's tokenizer (%s has no tokenizer.json / GGUF vocabulary)", dir);
    }
    if (stops.n && !(sc.stop = sp_stopstr_create(stops.v, stops.n, &err))) {
        free(prompt);
        sp_tok_stream_free(sc.ts);
        sp_tok_free(sc.tok);
        return cli_error(CMD, "--stop: %s", err.msg);
    }

    sp_model *m = NULL, *dm = NULL;
    sp_drafter *d = NULL;
    rc = 2;
    if (sp_model_load(&m, dir, threads, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    if (n_predict == -1) { /* until EOS or the context is full: the loops stop at the context */
        int mp = sp_model_config(m)->max_pos;
        if (!ctx) ctx = mp > 0 && mp < CLI_CTX_AUTO_MAX ? mp : CLI_CTX_AUTO_MAX;
        if (n_prompt >= ctx) {
            cli_error(CMD, "the prompt (%d tokens) fills the context (%d): give a larger -c", n_prompt, ctx);
            goto done;
        }
        n_predict = ctx;
    }
    const int max_ctx = ctx > 0 ? ctx + so.draft_max + 1 : n_prompt + n_predict + so.draft_max + 1;
    if (cli_make_drafter(CMD, &so, m, dir, &sp, max_ctx, threads, &dm, &d)) goto done;
    out = malloc((size_t)n_predict * sizeof *out);
    if (!out) {
        cli_error(CMD, "out of memory");
        goto done;
    }
    gp.max_new = n_predict;
    gp.ignore_eos = ignore_eos;
    gp.sample = sp;
    gp.max_ctx = ctx;
    gp.on_token = on_token;
    gp.cb_ctx = &sc;
    sp_gen_stats st;
    sp_spec_stats ss;
    int failed;
    if (d) {
        sp_spec_params spp = sp_spec_params_default();
        spp.gen = gp;
        spp.draft_max = so.draft_max;
        spp.draft_min = so.draft_min;
        spp.policy = so.always ? SP_SPEC_POLICY_ALWAYS : SP_SPEC_POLICY_ADAPTIVE;
        if (cli_tree_apply(CMD, &to, &spp)) goto done;
        failed = sp_spec_generate(m, d, prompt, n_prompt, &spp, out, n_predict, &ss, &err);
        st = (sp_gen_stats){.prompt_tokens = ss.prompt_tokens, .emitted = ss.emitted, .prefill_ms = ss.prefill_ms,
                            .decode_ms = ss.decode_ms, .decode_tps = ss.decode_tps, .stop = ss.stop};
        st.prefill_tps = ss.prefill_ms > 0 ? ss.prompt_tokens * 1000.0 / ss.prefill_ms : 0;
    } else {
        failed = sp_generate(m, NULL, prompt, n_prompt, &gp, out, n_predict, &st, &err);
    }
    const char *stop_name = sc.stopped ? "stop_string" : sp_stop_reason_name(st.stop);
    if (failed) {
        if (sc.count) putchar('\n');
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    stream_finish(&sc);
    char *gen_text = NULL;
    if (sc.tok && sp_tok_decode(sc.tok, out, st.emitted, &gen_text, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    if (gen_text && stops.n) gen_text[sp_stopstr_cut(gen_text, strlen(gen_text), stops.v, stops.n)] = 0;
    rc = 0;
    double mean_conf = -1; /* DSpark confidence head: mean confidence of the drafts offered */
    sp_dflash_info di;
    if (d && sp_dflash_info_get(d, &di) == 0 && di.conf_n > 0) mean_conf = di.conf_sum / (double)di.conf_n;
    if (json) {
        rc = print_json(out, st.emitted, gen_text, &st, d ? &ss : NULL, mean_conf, stop_name, sp.seed) ? 2 : 0;
    } else {
        putchar('\n');
        fflush(stdout);
        fprintf(stderr,
                "prompt %d tokens, prefill %.1f ms (%.1f tok/s) | %d emitted, decode %.1f ms (%.2f tok/s) | "
                "stop: %s | %d threads | seed %llu%s\n",
                st.prompt_tokens, st.prefill_ms, st.prefill_tps, st.emitted, st.decode_ms, st.decode_tps, stop_name,
                sp_model_threads(m), (unsigned long long)sp.seed, so_s.seed_random ? " (random)" : "");
        if (d)
            fprintf(stderr,
                    "spec %s: drafted %d, accepted %d (%.3f), tau %.2f tokens per verify, %d target calls, "
                    "draft %.1f ms, verify %.1f ms\n",
                    so.spec, ss.drafted, ss.accepted, ss.acceptance_rate, ss.mean_accept_len, ss.target_calls,
                    ss.draft_ms, ss.verify_ms);
        if (d) {
            fprintf(stderr, "verify lengths (rounds by drafts verified):");
            for (int k = 0; k <= ss.n_pos; k++)
                if (ss.verify_len_hist[k]) fprintf(stderr, " %d:%d", k, ss.verify_len_hist[k]);
            for (int r = 0; r < SP_NODRAFT_N; r++)
                if (ss.rounds_nodraft[r])
                    fprintf(stderr, " | no drafts (%s): %d rounds", sp_nodraft_reason_name(r), ss.rounds_nodraft[r]);
            if (mean_conf >= 0) fprintf(stderr, " | mean confidence %.3f", mean_conf);
            fprintf(stderr, "\n");
        }
    }
    free(gen_text);
done:
    sp_tok_stream_free(sc.ts);
    sp_stopstr_free(sc.stop);
    sp_tok_free(sc.tok);
    free(out);
    free(prompt);
    sp_drafter_free(d);
    sp_model_free(dm);
    sp_model_free(m);
    return rc;
}
