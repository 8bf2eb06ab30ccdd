/* chat_cli.c — -sys, -cnv and --chat-template for `specula generate` (chat_cli.h). */
#include "chat_cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "chat/chat.h"
#include "core/core.h"
#include "decode/generate.h"
#include "decode/spec.h"
#include "tokenizer/tokenizer.h"

int cli_chat_opt_rows(void *rows, cli_chat_opts *o) {
    cli_opt *r = rows;
    r[0] = (cli_opt){"-sys", "--system-prompt", CLI_STR, &o->system, "TEXT", "system prompt (renders -p as a chat turn)"};
    r[1] = (cli_opt){"-cnv", "--conversation", CLI_FLAG, &o->cnv, NULL,
                     "interactive chat: user turns from stdin, /exit ends it"};
    r[2] = (cli_opt){NULL, "--chat-template", CLI_STR, &o->tmpl, "NAME|FILE",
                     "chat template: a Jinja file, or gemma4 / gemma3 / qwen3 / llama3 (default: the model's)"};
    r[3] = (cli_opt){NULL, "--chat-template-kwargs", CLI_STR, &o->kwargs, "JSON",
                     "template variables, e.g. '{\"enable_thinking\": false}'"};
    return CLI_CHAT_OPT_ROWS;
}

int cli_chat_wanted(const cli_chat_opts *o, int chat, const char *text) {
    return text && (chat || o->system || o->tmpl || o->kwargs);
}

/* the model's tokenizer and chat template; prints errors */
static int load_chat(const char *cmd, const char *model_dir, const cli_chat_opts *o, tok_tokenizer **tok,
                     chat_template **ct, json_t **vars) {
    sp_err err = {{0}};
    *ct = NULL;
    *vars = NULL;
    if (o->kwargs) {
        json_error_t je;
        *vars = json_loads(o->kwargs, 0, &je);
        if (!json_is_object(*vars)) {
            json_decref(*vars);
            *vars = NULL;
            return cli_error(cmd, "--chat-template-kwargs: expected a JSON object, got '%s'", o->kwargs), -1;
        }
    }
    if (!sp_tok_model_has_tokenizer(model_dir)) {
        json_decref(*vars);
        *vars = NULL;
        return cli_error(cmd, "chat needs a tokenizer, and %s has none (tokenizer.json / GGUF vocabulary)", model_dir),
               -1;
    }
    if (!(*tok = sp_tok_load_model(model_dir, &err)) || !(*ct = sp_chat_template_load(model_dir, *tok, o->tmpl, &err))) {
        sp_tok_free(*tok);
        *tok = NULL;
        json_decref(*vars);
        *vars = NULL;
        return cli_error(cmd, "%s", err.msg), -1;
    }
    return 0;
}

static int push_msg(json_t *msgs, const char *role, const char *content) {
    json_t *m = json_object();
    if (!m || json_object_set_new(m, "role", json_string(role)) ||
        json_object_set_new(m, "content", json_string(content)) || json_array_append_new(msgs, m))
        return -1;
    return 0;
}

static int render_encode(const char *cmd, const chat_template *ct, tok_tokenizer *tok, json_t *msgs, json_t *vars,
                         int32_t **ids, int *n) {
    sp_err err = {{0}};
    if (sp_chat_tokens(ct, tok, msgs, 1, vars, ids, n, &err)) return cli_error(cmd, "%s", err.msg), -1;
    return 0;
}

int cli_chat_prompt(const char *cmd, const char *model_dir, const cli_chat_opts *o, const char *text, int32_t **ids,
                    int *n) {
    tok_tokenizer *tok = NULL;
    chat_template *ct;
    json_t *vars;
    *ids = NULL, *n = 0;
    if (load_chat(cmd, model_dir, o, &tok, &ct, &vars)) return -1;
    json_t *msgs = json_array();
    int rc = -1;
    if (!msgs || (o->system && push_msg(msgs, "system", o->system)) || push_msg(msgs, "user", text))
        cli_error(cmd, "the prompt is not valid UTF-8 text");
    else
        rc = render_encode(cmd, ct, tok, msgs, vars, ids, n);
    json_decref(msgs);
    json_decref(vars);
    sp_chat_template_free(ct);
    sp_tok_free(tok);
    return rc;
}

/* ---- -cnv --------------------------------------------------------------------------------- */
typedef struct {
    tok_tokenizer *tok;
    tok_stream *ts;
} reply_ctx;

/* streams the reply; an end-of-generation token (end of turn) stops it unprinted */
static int on_reply_token(void *ctx, int32_t id) {
    reply_ctx *r = ctx;
    if (sp_tok_is_eog(r->tok, id)) return 1;
    char buf[512];
    int n = sp_tok_stream_push(r->ts, id, buf, sizeof buf);
    if (n > 0) fwrite(buf, 1, (size_t)n, stdout);
    fflush(stdout);
    return 0;
}

/* one user turn from stdin: a line; a trailing '\' joins the next line. NULL at end of input. */
static char *read_turn(void) {
    char *line = NULL, *turn = NULL;
    size_t cap = 0, len = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        size_t k = (size_t)got;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r')) k--;
        int more = k && line[k - 1] == '\\';
        if (more) k--;
        char *t = realloc(turn, len + k + 2);
        if (!t) break;
        turn = t;
        memcpy(turn + len, line, k);
        len += k;
        if (more) turn[len++] = '\n';
        turn[len] = 0;
        if (!more) break;
        fprintf(stderr, "  ");
    }
    free(line);
    if (got < 0 && !turn) return NULL;
    return turn;
}

int cli_chat_run(const char *cmd, const cli_chat_opts *o, const cli_chat_run_opts *r) {
    tok_tokenizer *tok = NULL;
    chat_template *ct = NULL;
    sp_model *m = NULL, *dm = NULL;
    sp_drafter *d = NULL;
    json_t *msgs = json_array(), *vars = NULL;
    int32_t *ids = NULL, *out = malloc((size_t)r->n_predict * sizeof *out);
    sp_err err = {{0}};
    int rc = 2;
    if (!msgs || !out) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    if (load_chat(cmd, r->model_dir, o, &tok, &ct, &vars)) goto done;
    if (sp_model_load(&m, r->model_dir, r->threads, &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    const int max_ctx = r->ctx > 0 ? r->ctx : 4096;
    if (cli_make_drafter(cmd, r->spec, m, r->model_dir, &r->sample, max_ctx, r->threads, &dm, &d)) goto done;
    if (o->system && push_msg(msgs, "system", o->system)) {
        cli_error(cmd, "-sys: not valid UTF-8 text");
        goto done;
    }
    fprintf(stderr, "chat with %s (template: %s); /exit or end of input ends it\n", r->model_dir,
            sp_chat_template_source(ct));
    for (int turn = 0;; turn++) {
        char *user = NULL;
        if (turn == 0 && r->first) {
            user = strdup(r->first);
        } else {
            fprintf(stderr, "> ");
            fflush(stderr);
            user = read_turn();
        }
        if (!user || !strcmp(user, "/exit")) {
            free(user);
            break;
        }
        if (!user[0]) {
            free(user);
            continue;
        }
        int bad = push_msg(msgs, "user", user);
        free(user);
        if (bad) {
            cli_error(cmd, "the input is not valid UTF-8 text");
            goto done;
        }
        int n = 0;
        free(ids);
        ids = NULL;
        if (render_encode(cmd, ct, tok, msgs, vars, &ids, &n)) goto done;
        if (n + r->n_predict + r->spec->draft_max + 1 > max_ctx) {
            cli_error(cmd, "the conversation (%d tokens) and a reply of up to %d no longer fit the context of %d "
                           "(-c N)", n, r->n_predict, max_ctx);
            goto done;
        }
        reply_ctx rx = {tok, sp_tok_stream_new_ex(tok, TOK_DECODE_SKIP_SPECIAL)}; /* control tokens unprinted */
        if (!rx.ts) {
            cli_error(cmd, "out of memory");
            goto done;
        }
        sp_spec_params spp = sp_spec_params_default();
        spp.gen.max_new = r->n_predict;
        spp.gen.sample = r->sample;
        if (r->gen) { /* repetition penalties, generation_config.json's eos ids */
            spp.gen.penalty = r->gen->penalty;
            memcpy(spp.gen.extra_eos, r->gen->extra_eos, sizeof spp.gen.extra_eos);
            spp.gen.n_extra_eos = r->gen->n_extra_eos;
        }
        spp.gen.max_ctx = max_ctx;
        spp.gen.on_token = on_reply_token;
        spp.gen.cb_ctx = &rx;
        spp.draft_max = r->spec->draft_max;
        spp.draft_min = r->spec->draft_min;
        spp.policy = r->spec->always ? SP_SPEC_POLICY_ALWAYS : SP_SPEC_POLICY_ADAPTIVE;
        sp_spec_stats ss;
        int failed = sp_spec_generate(m, d, ids, n, &spp, out, r->n_predict, &ss, &err);
        char buf[512];
        int k;
        while (!failed && (k = sp_tok_stream_flush(rx.ts, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)k, stdout);
        sp_tok_stream_free(rx.ts);
        fputc('\n', stdout);
        fflush(stdout);
        if (failed) {
            cli_error(cmd, "%s", err.msg);
            goto done;
        }
        int kept = ss.emitted;
        while (kept > 0 && sp_tok_is_eog(tok, out[kept - 1])) kept--;
        char *reply = NULL;
        if (sp_tok_decode_ex(tok, out, kept, TOK_DECODE_SKIP_SPECIAL, &reply, &err)) {
            cli_error(cmd, "%s", err.msg);
            goto done;
        }
        bad = push_msg(msgs, "assistant", reply);
        free(reply);
        if (bad) {
            cli_error(cmd, "out of memory");
            goto done;
        }
        if (d)
            fprintf(stderr, "[%d tokens, %.2f tok/s, tau %.2f]\n", ss.emitted, ss.decode_tps, ss.mean_accept_len);
        else
            fprintf(stderr, "[%d tokens, %.2f tok/s]\n", ss.emitted, ss.decode_tps);
    }
    rc = 0;
done:
    free(ids);
    free(out);
    json_decref(msgs);
    json_decref(vars);
    sp_drafter_free(d);
    sp_model_free(dm);
    sp_model_free(m);
    sp_chat_template_free(ct);
    sp_tok_free(tok);
    return rc;
}
