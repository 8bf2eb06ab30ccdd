/* cmd_generate.c — `specula generate`: plain generation from a prompt (token ids, or text
 * once the tokenizer is wired in), streaming token ids to stdout or printing one JSON object.
 * Speculative decoding options (--spec ...) are a later addition. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "spec/generate.h"
#include "specula.h"

static const char *CMD = "generate";

/* Tokenizer hooks: the one place text meets ids. Until src/tokenizer is wired in, text
 * prompts are refused with a clear message and output stays as token ids (text = NULL). */
static int prompt_from_text(const char *dir, const char *text, int32_t **ids, int *n) {
    (void)text;
    *ids = NULL;
    *n = 0;
    char path[4096];
    if (sp_path_join(path, sizeof path, dir, "tokenizer.json") || !sp_file_exists(path))
        return cli_error(CMD, "-p needs a tokenizer, and %s has no tokenizer.json: use --prompt-ids", dir), -1;
    return cli_error(CMD, "-p: this build cannot read %s yet (no tokenizer support): use --prompt-ids", path), -1;
}

/* ids -> text, malloc'd; NULL when no tokenizer is available */
static char *text_from_ids(const char *dir, const int32_t *ids, int n) {
    (void)dir;
    (void)ids;
    (void)n;
    return NULL;
}

typedef struct {
    int stream; /* print each id as it arrives */
    int count;
} stream_ctx;

static int on_token(void *ctx, int32_t tok) {
    stream_ctx *s = ctx;
    if (s->stream) {
        printf("%s%d", s->count ? " " : "", tok);
        fflush(stdout);
    }
    s->count++;
    return 0;
}

static int print_json(const int32_t *toks, int n, const char *text, const sp_gen_stats *st) {
    json_t *o = json_object(), *arr = json_array(), *js = json_object();
    for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer(toks[i]));
    json_object_set_new(o, "tokens", arr);
    if (text) json_object_set_new(o, "text", json_string(text));
    json_object_set_new(js, "prompt_tokens", json_integer(st->prompt_tokens));
    json_object_set_new(js, "emitted", json_integer(st->emitted));
    json_object_set_new(js, "prefill_ms", json_real(st->prefill_ms));
    json_object_set_new(js, "decode_ms", json_real(st->decode_ms));
    json_object_set_new(js, "decode_tps", json_real(st->decode_tps));
    json_object_set_new(o, "stats", js);
    json_object_set_new(o, "stop", json_string(sp_stop_reason_name(st->stop)));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!s) return cli_error(CMD, "out of memory writing JSON");
    puts(s);
    free(s);
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *ids_arg = NULL;
    int n_predict = 64, threads = 0, ignore_eos = 0, json = 0, ctx = 0;
    sp_sample_params sp = sp_sample_params_default();
    const cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &dir, "DIR", "model directory (config.json + safetensors), required"},
        {"-p", "--prompt", CLI_STR, &text, "TEXT", "prompt text (needs the model's tokenizer)"},
        {NULL, "--prompt-ids", CLI_STR, &ids_arg, "IDS", "prompt as comma-separated token ids"},
        {"-n", "--n-predict", CLI_INT, &n_predict, "N", "most tokens to generate (default 64)"},
        {NULL, "--temp", CLI_FLOAT, &sp.temperature, "T", "temperature, 0 = greedy (default 0)"},
        {NULL, "--top-k", CLI_INT, &sp.top_k, "K", "keep the K most likely tokens (default 0 = off)"},
        {NULL, "--top-p", CLI_FLOAT, &sp.top_p, "P", "nucleus mass (default 1 = off)"},
        {NULL, "--min-p", CLI_FLOAT, &sp.min_p, "P", "drop tokens below P x the top probability (default 0)"},
        {"-s", "--seed", CLI_U64, &sp.seed, "S", "sampling seed (default 0)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {"-c", "--ctx-size", CLI_INT, &ctx, "N", "KV cache size (default: prompt + N)"},
        {NULL, "--ignore-eos", CLI_FLAG, &ignore_eos, NULL, "do not stop at EOS"},
        {NULL, "--json", CLI_FLAG, &json, NULL, "print one JSON object {tokens, text, stats}"},
    };
    int rc = cli_parse(CMD, "-m DIR (-p TEXT | --prompt-ids 1,2,3) [options]", opts,
                       (int)(sizeof opts / sizeof *opts), argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!dir) return cli_error(CMD, "-m DIR is required (see specula generate --help)");
    if (!text == !ids_arg) return cli_error(CMD, "give exactly one of -p TEXT and --prompt-ids IDS");
    if (n_predict < 1) return cli_error(CMD, "-n must be >= 1, got %d", n_predict);
    sp_err err = {{0}};
    if (sp_sample_params_check(&sp, &err)) return cli_error(CMD, "%s", err.msg);

    int32_t *prompt = NULL;
    int n_prompt = 0;
    if (ids_arg ? cli_parse_ids(CMD, "--prompt-ids", ids_arg, &prompt, &n_prompt)
                : prompt_from_text(dir, text, &prompt, &n_prompt))
        return 2;

    sp_model *m = NULL;
    if (sp_model_load(&m, dir, threads, &err)) {
        free(prompt);
        return cli_error(CMD, "%s", err.msg);
    }
    int32_t *out = malloc((size_t)n_predict * sizeof *out);
    stream_ctx sc = {.stream = !json};
    sp_gen_params gp = sp_gen_params_default();
    gp.max_new = n_predict;
    gp.ignore_eos = ignore_eos;
    gp.sample = sp;
    gp.max_ctx = ctx;
    gp.on_token = on_token;
    gp.cb_ctx = &sc;
    sp_gen_stats st;
    rc = 0;
    if (!out) {
        rc = cli_error(CMD, "out of memory");
    } else if (sp_generate(m, NULL, prompt, n_prompt, &gp, out, n_predict, &st, &err)) {
        if (sc.count) putchar('\n');
        rc = cli_error(CMD, "%s", err.msg);
    } else {
        char *gen_text = text_from_ids(dir, out, st.emitted);
        if (json) {
            rc = print_json(out, st.emitted, gen_text, &st) ? 2 : 0;
        } else {
            putchar('\n');
            if (gen_text) printf("%s\n", gen_text);
            fprintf(stderr,
                    "prompt %d tokens, prefill %.1f ms (%.1f tok/s) | %d emitted, decode %.1f ms "
                    "(%.2f tok/s) | stop: %s | %d threads\n",
                    st.prompt_tokens, st.prefill_ms, st.prefill_tps, st.emitted, st.decode_ms,
                    st.decode_tps, sp_stop_reason_name(st.stop), sp_model_threads(m));
        }
        free(gen_text);
    }
    free(out);
    free(prompt);
    sp_model_free(m);
    return rc;
}
