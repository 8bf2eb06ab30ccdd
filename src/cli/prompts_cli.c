/* prompts_cli.c — prompt files (see prompts_cli.h). */
#include "prompts_cli.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "chat/chat.h"
#include "core/core.h"
#include "tokenizer/tokenizer.h"

void cli_prompts_free(cli_prompt *p, int n) {
    for (int i = 0; i < n; i++) {
        free(p[i].ids);
        free(p[i].label);
    }
    free(p);
}

typedef struct {
    const char *cmd, *path, *model_dir;
    tok_tokenizer *tok; /* loaded on first use */
    chat_template *tmpl; /* loaded on the first "messages" line */
    int line;
} reader;

static tok_tokenizer *need_tok(reader *r) {
    if (r->tok) return r->tok;
    if (!sp_tok_model_has_tokenizer(r->model_dir)) {
        cli_error(r->cmd, "%s:%d: a text prompt needs the model's tokenizer, and %s has no tokenizer.json "
                          "or GGUF vocabulary (use \"prompt_ids\")", r->path, r->line, r->model_dir);
        return NULL;
    }
    sp_err err = {{0}};
    if (!(r->tok = sp_tok_load_model(r->model_dir, &err))) cli_error(r->cmd, "%s", err.msg);
    return r->tok;
}

static int encode_text(reader *r, const char *text, cli_prompt *p) {
    tok_tokenizer *t = need_tok(r);
    if (!t) return -1;
    sp_err err = {{0}};
    if (sp_tok_encode(t, text, strlen(text), 1, 1, &p->ids, &p->n, &err))
        return cli_error(r->cmd, "%s:%d: %s", r->path, r->line, err.msg), -1;
    return 0;
}

/* a conversation, rendered with the model's own chat template (src/chat/) */
static int encode_messages(reader *r, json_t *arr, cli_prompt *p) {
    size_t n = json_array_size(arr);
    if (n == 0) return cli_error(r->cmd, "%s:%d: \"messages\" is empty", r->path, r->line), -1;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(arr, i);
        if (!json_is_string(json_object_get(m, "role")) || !json_is_string(json_object_get(m, "content")))
            return cli_error(r->cmd, "%s:%d: messages[%zu] needs \"role\" and \"content\" strings", r->path, r->line,
                             i), -1;
    }
    tok_tokenizer *t = need_tok(r);
    if (!t) return -1;
    sp_err err = {{0}};
    if (!r->tmpl && !(r->tmpl = sp_chat_template_load(r->model_dir, t, NULL, &err)))
        return cli_error(r->cmd, "%s:%d: %s", r->path, r->line, err.msg), -1;
    if (sp_chat_tokens(r->tmpl, t, arr, 1, NULL, &p->ids, &p->n, &err))
        return cli_error(r->cmd, "%s:%d: %s", r->path, r->line, err.msg), -1;
    p->label = strdup(json_string_value(json_object_get(json_array_get(arr, n - 1), "content")));
    return 0;
}

static int parse_json_line(reader *r, const char *line, cli_prompt *p) {
    json_error_t je;
    json_t *o = json_loads(line, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
    int rc = -1;
    json_t *ids = json_object_get(o, "prompt_ids"), *msgs = json_object_get(o, "messages");
    const char *tx = json_string_value(json_object_get(o, "prompt"));
    if (!json_is_object(o)) {
        cli_error(r->cmd, "%s:%d: not a JSON object%s%s; prompt files are JSONL ({\"prompt\": TEXT}, "
                          "{\"prompt_ids\": [...]} or {\"messages\": [...]}), or plain text lines with "
                          "--text-prompts or a .txt name", r->path, r->line, o ? "" : ": ", o ? "" : je.text);
    } else if (json_is_array(ids)) {
        p->n = (int)json_array_size(ids);
        p->ids = malloc(sizeof(int32_t) * (size_t)(p->n > 0 ? p->n : 1));
        rc = p->n > 0 && p->ids ? 0 : (cli_error(r->cmd, "%s:%d: \"prompt_ids\" is empty", r->path, r->line), -1);
        for (int i = 0; i < p->n && !rc; i++) {
            json_t *v = json_array_get(ids, (size_t)i);
            double x = json_is_number(v) ? json_number_value(v) : -1;
            if (x < 0 || x > INT32_MAX || x != (double)(int32_t)x)
                rc = -(cli_error(r->cmd, "%s:%d: prompt_ids[%d] is not a token id", r->path, r->line, i) > 0);
            else p->ids[i] = (int32_t)x;
        }
        if (!rc) p->label = strdup("(token ids)");
    } else if (tx) {
        rc = encode_text(r, tx, p);
        if (!rc) p->label = strdup(tx);
    } else if (json_is_array(msgs)) {
        rc = encode_messages(r, msgs, p);
    } else {
        cli_error(r->cmd, "%s:%d: needs \"prompt\" (text), \"prompt_ids\" (list) or \"messages\" (list)", r->path,
                  r->line);
    }
    json_decref(o);
    return rc;
}

int cli_prompts_read(const char *cmd, const char *path, const char *model_dir, int text_lines, cli_prompt **out,
                     int *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t pl = strlen(path);
    if (pl >= 4 && !strcmp(path + pl - 4, ".txt")) text_lines = 1;
    char *text;
    sp_err err = {{0}};
    if (sp_read_file(path, &text, NULL, &err)) return cli_error(cmd, "%s", err.msg), -1;
    reader r = {cmd, path, model_dir, NULL, NULL, 0};
    cli_prompt *ps = NULL;
    int n = 0, rc = 0;
    char *cur = text;
    while (cur && *cur && !rc) {
        char *line = cur, *nl = strchr(cur, '\n');
        if (nl) *nl = 0;
        cur = nl ? nl + 1 : NULL;
        r.line++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = 0;
        const char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) continue;
        cli_prompt p = {.line = r.line};
        rc = text_lines ? encode_text(&r, line, &p) : parse_json_line(&r, s, &p);
        if (!rc && text_lines) p.label = strdup(line);
        if (!rc && p.n == 0) rc = -(cli_error(cmd, "%s:%d: the prompt encodes to no tokens", path, r.line) > 0);
        cli_prompt *np = rc ? NULL : realloc(ps, sizeof *ps * (size_t)(n + 1));
        if (!rc && (!np || !p.label)) rc = -(cli_error(cmd, "out of memory") > 0);
        if (rc) {
            free(p.ids);
            free(p.label);
            break;
        }
        ps = np;
        ps[n++] = p;
    }
    free(text);
    sp_chat_template_free(r.tmpl);
    sp_tok_free(r.tok);
    if (!rc && n == 0) rc = -(cli_error(cmd, "%s: no prompts", path) > 0);
    if (rc) {
        cli_prompts_free(ps, n);
        return -1;
    }
    *out = ps;
    *n_out = n;
    return 0;
}
