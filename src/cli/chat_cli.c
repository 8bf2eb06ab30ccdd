/* chat_cli.c — -sys, -cnv and --chat-template for `specula generate` (chat_cli.h). */
#include "chat_cli.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "chat/chat.h"
#include "core/core.h"
#include "decode/generate.h"
#include "decode/spec.h"
#include "decode/stopstr.h"
#include "session_cli.h"
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

int cli_chat_vars(const char *cmd, const char *kwargs, json_t **vars) {
    *vars = NULL;
    if (!kwargs) return 0;
    json_error_t je;
    *vars = json_loads(kwargs, 0, &je);
    if (json_is_object(*vars)) return 0;
    json_decref(*vars);
    *vars = NULL;
    return cli_error(cmd, "--chat-template-kwargs: expected a JSON object, got '%s'", kwargs), -1;
}

int cli_chat_push(json_t *msgs, const char *role, const char *content) {
    json_t *m = json_object();
    if (!m || json_object_set_new(m, "role", json_string(role)) ||
        json_object_set_new(m, "content", json_string(content)) || json_array_append_new(msgs, m))
        return -1;
    return 0;
}

/* ---- -cnv --------------------------------------------------------------------------------- */
/* Ctrl-C: during a reply it ends the reply (the callbacks below see the flag); at the prompt, or
 * a second time before the reply has ended, it ends the chat */
static volatile sig_atomic_t chat_in_reply, chat_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    if (chat_in_reply && !chat_interrupted) {
        chat_interrupted = 1;
        return;
    }
    ssize_t w = write(STDERR_FILENO, "\n", 1);
    (void)w;
    _exit(130);
}

static void chat_catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* streams the reply (control tokens unprinted; the end-of-turn token ends it) */
static int on_reply_text(void *ctx, int32_t id, const char *text, size_t n) {
    fwrite(text, 1, n, stdout);
    fflush(stdout);
    return chat_interrupted;
}

static int on_reply_token(void *ctx, int32_t tok) { return chat_interrupted; }

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

/* the next user turn: the first one from -p, then stdin; NULL when the chat ends */
static char *next_turn(const cli_chat_run_opts *r, int turn) {
    char *user;
    for (;;) {
        if (turn == 0 && r->first) {
            user = strdup(r->first);
        } else {
            fprintf(stderr, "> ");
            fflush(stderr);
            user = read_turn();
        }
        if (!user || !strcmp(user, "/exit")) {
            free(user);
            return NULL;
        }
        if (user[0]) return user;
        free(user);
        turn++;
    }
}

typedef struct {
    const char *cmd;
    const cli_chat_run_opts *r;
    sp_session *s;
    json_t *msgs, *vars;
    int max_ctx;
} chat_state;

/* The conversation as tokens, the oldest turns dropped (the system prompt kept, a notice on
 * stderr) while it and room for a reply do not fit the context: llama-cli's context shift, by
 * whole turns. 0, 1 when even the new turn alone does not fit (it is dropped, the chat goes on),
 * or -1 (printed). */
static int chat_fit(chat_state *c, int32_t **ids, int *n) {
    const cli_chat_run_opts *r = c->r;
    int want = r->n_predict > 0 ? r->n_predict : c->max_ctx / 4;
    if (want > c->max_ctx / 2) want = c->max_ctx / 2;
    int reserve = want + r->spec->draft_max + 1, dropped = 0;
    sp_err err = {{0}};
    for (;;) {
        if (sp_session_chat_tokens(c->s, c->msgs, c->vars, ids, n, &err)) return cli_error(c->cmd, "%s", err.msg), -1;
        if (*n + reserve <= c->max_ctx) break;
        free(*ids);
        *ids = NULL;
        const char *role0 = json_string_value(json_object_get(json_array_get(c->msgs, 0), "role"));
        size_t first = role0 && !strcmp(role0, "system") ? 1 : 0;
        size_t size = json_array_size(c->msgs);
        if (size - first <= 1) { /* only the new turn is left */
            json_array_remove(c->msgs, size - 1);
            cli_error(c->cmd, "this turn (%d tokens) and a reply of up to %d tokens do not fit the context of %d "
                              "(-c N); it was dropped", *n, want, c->max_ctx);
            return 1;
        }
        json_array_remove(c->msgs, first), dropped++;
        const char *role = json_string_value(json_object_get(json_array_get(c->msgs, first), "role"));
        if (first + 1 < json_array_size(c->msgs) && role && !strcmp(role, "assistant"))
            json_array_remove(c->msgs, first), dropped++;
    }
    if (dropped)
        fprintf(stderr, "[context full: dropped the %d oldest messages; the conversation is now %d tokens of %d]\n",
                dropped, *n, c->max_ctx);
    return 0;
}

/* One reply to the conversation so far, streamed, then kept as the assistant's turn. 0, 1 when
 * the turn was dropped (it does not fit), -1 (printed). */
static int chat_reply(chat_state *c) {
    const cli_chat_run_opts *r = c->r;
    sp_err err = {{0}};
    int32_t *ids = NULL;
    int n = 0, fit = chat_fit(c, &ids, &n);
    if (fit) return fit;
    int room = c->max_ctx - n - r->spec->draft_max - 1;
    sp_session_req q = sp_session_req_default();
    if (r->gen) q.gen = *r->gen; /* repetition penalties, generation_config.json's eos ids */
    q.gen.max_new = r->n_predict > 0 && r->n_predict < room ? r->n_predict : room;
    q.gen.sample = r->sample;
    q.gen.max_ctx = c->max_ctx;
    q.gen.on_token = on_reply_token;
    q.stops = r->stops;
    q.n_stops = r->n_stops;
    q.stop_at_eog = q.skip_special = 1;
    q.on_text = on_reply_text;
    sp_session_out o;
    chat_interrupted = 0, chat_in_reply = 1;
    int rc = sp_session_generate(c->s, ids, n, &q, &o, &err);
    chat_in_reply = 0;
    free(ids);
    fputc('\n', stdout);
    fflush(stdout);
    if (chat_interrupted) fprintf(stderr, "[reply interrupted; Ctrl-C at the prompt ends the chat]\n");
    chat_interrupted = 0;
    if (rc) {
        sp_session_out_free(&o);
        return cli_error(c->cmd, "%s", err.msg), -1;
    }
    tok_tokenizer *tok = sp_session_tokenizer(c->s);
    int kept = o.n_tokens;
    while (kept > 0 && sp_tok_is_eog(tok, o.tokens[kept - 1])) kept--;
    char *reply = NULL;
    rc = sp_tok_decode_ex(tok, o.tokens, kept, TOK_DECODE_SKIP_SPECIAL, &reply, &err);
    if (!rc && r->n_stops) reply[sp_stopstr_cut(reply, strlen(reply), r->stops, r->n_stops)] = 0;
    if (rc) cli_error(c->cmd, "%s", err.msg);
    else if ((rc = cli_chat_push(c->msgs, "assistant", reply))) cli_error(c->cmd, "out of memory");
    free(reply);
    if (!rc && o.speculative)
        fprintf(stderr, "[%d tokens, %.2f tok/s, tau %.2f]\n", o.n_tokens, o.gen.decode_tps, o.spec.mean_accept_len);
    else if (!rc)
        fprintf(stderr, "[%d tokens, %.2f tok/s]\n", o.n_tokens, o.gen.decode_tps);
    sp_session_out_free(&o);
    return rc;
}

/* the turns of a chat on an open session */
static int chat_loop(chat_state *c, const cli_chat_opts *o) {
    sp_err err = {{0}};
    const chat_template *ct = sp_session_chat_template(c->s, &err);
    if (!ct) return cli_error(c->cmd, "%s", err.msg), -1;
    if (o->system && cli_chat_push(c->msgs, "system", o->system)) return cli_error(c->cmd, "-sys: not valid UTF-8 text"), -1;
    fprintf(stderr, "chat with %s (template: %s); /exit or end of input ends it\n", c->r->model_dir,
            sp_chat_template_source(ct));
    char *user;
    for (int turn = 0; (user = next_turn(c->r, turn)); turn++) {
        int bad = cli_chat_push(c->msgs, "user", user);
        free(user);
        if (bad) return cli_error(c->cmd, "the input is not valid UTF-8 text"), -1;
        if (chat_reply(c) < 0) return -1;
    }
    return 0;
}

int cli_chat_run(const char *cmd, const cli_chat_opts *o, const cli_chat_run_opts *r) {
    chat_state c = {cmd, r, NULL, json_array(), NULL, r->ctx > 0 ? r->ctx : 4096};
    int rc = 2;
    if (!c.msgs) {
        cli_error(cmd, "out of memory");
    } else if (!cli_chat_vars(cmd, o->kwargs, &c.vars) && !cli_session_open(cmd, r->model_dir, r->threads, r->spec, NULL, o->tmpl,
                                                                c.max_ctx, &c.s)) {
        int mp = sp_model_config(sp_session_model(c.s))->max_pos;
        if (mp > 0 && c.max_ctx > mp) {
            if (r->ctx > 0)
                fprintf(stderr, "specula: note: %s: -c %d is above the model's context (%d): using %d\n", cmd, r->ctx, mp, mp);
            c.max_ctx = mp;
        }
        if (!sp_session_tokenizer(c.s)) {
            cli_error(cmd, "chat needs a tokenizer, and %s has none (tokenizer.json / GGUF vocabulary)", r->model_dir);
        } else {
            chat_catch_sigint();
            rc = chat_loop(&c, o) ? 2 : 0;
        }
    }
    json_decref(c.msgs);
    json_decref(c.vars);
    sp_session_free(c.s);
    return rc;
}
