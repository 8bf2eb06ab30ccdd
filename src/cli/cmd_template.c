/* cmd_template.c — `specula template`: render a conversation with a model's chat template and
 * print the text exactly (no newline added), so it can be compared with Hugging Face's
 * apply_chat_template(messages, tokenize=False).
 *
 *   specula template -m DIR --messages conv.json [--no-generation-prompt] [--ids]
 *                    [--set enable_thinking=false] [--chat-template NAME|FILE]
 *
 * --ids prints the token ids instead (comma-separated, for generate --prompt-ids).
 *
 * conv.json is a JSON array of messages, or an object {"messages": [...], other variables
 * such as "tools"}; "-" reads it from stdin. --set KEY=VALUE (repeatable) adds a variable:
 * VALUE is read as JSON when it parses (true, 3, "x", [..]), else as a string. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "session_cli.h"
#include "chat/chat.h"
#include "core/core.h"
#include "tokenizer/tokenizer.h"

static const char *CMD = "template";

/* KEY=VALUE -> vars[KEY] */
static int add_set(json_t *vars, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) return cli_error(CMD, "--set expects KEY=VALUE, got '%s'", kv);
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!v) v = json_string(eq + 1);
    if (!v) return cli_error(CMD, "--set %s: the value is not valid UTF-8", kv);
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    json_object_set_new(vars, key, v);
    return 0;
}

static json_t *read_messages(const char *path, json_t *vars) {
    json_error_t je;
    char *text = NULL;
    size_t n = 0;
    if (!strcmp(path, "-")) { /* stdin, read whole */
        size_t cap = 0;
        for (;;) {
            if (n + 4096 > cap) {
                char *t = realloc(text, cap = 2 * cap + 4096);
                if (!t) break;
                text = t;
            }
            size_t got = fread(text + n, 1, cap - n, stdin);
            n += got;
            if (!got) break;
        }
    } else {
        sp_err err = {{0}};
        if (sp_read_file(path, &text, &n, &err)) {
            cli_error(CMD, "%s", err.msg);
            return NULL;
        }
    }
    /* integers as integers (a template may print them); past 64 bits, as numbers */
    json_t *doc = text ? json_loadb(text, n, 0, &je) : NULL;
    if (!doc && text) doc = json_loadb(text, n, JSON_DECODE_INT_AS_REAL, &je);
    free(text);
    if (!doc) {
        cli_error(CMD, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
        return NULL;
    }
    json_t *msgs = doc;
    if (json_is_object(doc)) { /* {"messages": [...], "tools": [...], ...} */
        msgs = json_object_get(doc, "messages");
        const char *k;
        json_t *v;
        json_object_foreach(doc, k, v) if (strcmp(k, "messages") && !json_object_get(vars, k)) json_object_set(vars, k, v);
    }
    if (!json_is_array(msgs)) {
        cli_error(CMD, "%s: expected a JSON array of messages or an object with \"messages\"", path);
        json_decref(doc);
        return NULL;
    }
    json_incref(msgs);
    json_decref(doc);
    return msgs;
}

/* --set may repeat: take those out of argv into vars before parsing; the rest to av[*ac] */
static int pull_sets(int argc, char **argv, json_t *vars, char **av, int *ac) {
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) return cli_error(CMD, "option '--set' needs KEY=VALUE"), -1;
            if (add_set(vars, argv[++i])) return -1;
        } else if (i > 0 && !strncmp(argv[i], "--set=", 6)) {
            if (add_set(vars, argv[i] + 6)) return -1;
        } else {
            av[(*ac)++] = argv[i];
        }
    }
    return 0;
}

/* print the text of msgs rendered by the template of dir (a directory or a .gguf) or choice,
 * or with ids its token ids; 0, or 2 after an error */
static int render_template(const char *dir, const char *choice, json_t *msgs, json_t *vars, int no_gen, int ids) {
    int rc = 2;
    sp_err err = {{0}};
    tok_tokenizer *tok = NULL;
    size_t dl = strlen(dir);
    int gguf = dl > 5 && !strcmp(dir + dl - 5, ".gguf");
    char path[4096];
    if (gguf) tok = sp_tok_load_gguf(dir, &err);
    else if (!sp_path_join(path, sizeof path, dir, "tokenizer.json") && sp_file_exists(path)) tok = sp_tok_load_dir(dir, &err);
    if (!tok && err.msg[0]) {
        cli_error(CMD, "%s", err.msg);
        return rc;
    }
    chat_template *ct = sp_chat_template_load(gguf ? NULL : dir, tok, choice, &err);
    char *text = NULL;
    if (!ct || sp_chat_render(ct, msgs, !no_gen, vars, &text, &err)) {
        cli_error(CMD, "%s", err.msg);
    } else if (!ids) {
        fwrite(text, 1, strlen(text), stdout);
        fflush(stdout);
        rc = 0;
    } else if (!tok) {
        cli_error(CMD, "--ids needs the model's tokenizer (tokenizer.json or a .gguf)");
    } else { /* the text carries its own BOS: no BOS added, special-token text parsed */
        int32_t *v = NULL;
        int n = 0;
        if (sp_tok_encode(tok, text, strlen(text), 0, 1, &v, &n, &err)) {
            cli_error(CMD, "%s", err.msg);
        } else {
            for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", v[i]);
            printf("\n");
            rc = 0;
        }
        free(v);
    }
    free(text);
    sp_chat_template_free(ct);
    sp_tok_free(tok);
    return rc;
}

int cmd_template(int argc, char **argv) {
    const char *dir = NULL, *messages = NULL, *choice = NULL, *set_help = NULL;
    int no_gen = 0, ids = 0;
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &dir, "DIR", "model directory (tokenizer files), or a .gguf file"},
        {NULL, "--messages", CLI_STR, &messages, "FILE", "conversation: JSON array of {role, content} ('-': stdin)"},
        {NULL, "--no-generation-prompt", CLI_FLAG, &no_gen, NULL, "render without add_generation_prompt"},
        {NULL, "--ids", CLI_FLAG, &ids, NULL, "print the token ids of the text (as generate encodes it: 1,2,3)"},
        {NULL, "--set", CLI_STR, &set_help, "KEY=VALUE", "template variable, repeatable (value read as JSON if it parses)"},
        {NULL, "--chat-template", CLI_STR, &choice, "NAME|FILE",
         "use this template: a Jinja file, or gemma4 / gemma3 / qwen3 / llama3 (default: the model's)"},
    };
    json_t *vars = json_object(), *msgs = NULL;
    char **av = malloc((size_t)(argc + 1) * sizeof *av);
    int ac = 0, rc = 2;
    if (!vars || !av) {
        free(av);
        json_decref(vars);
        return cli_error(CMD, "out of memory");
    }
    if (pull_sets(argc, argv, vars, av, &ac)) goto out;
    int prc = cli_parse(CMD, "-m DIR --messages FILE.json [--no-generation-prompt] [--set KEY=VALUE ...]", opts,
                        (int)(sizeof opts / sizeof *opts), ac, av, NULL, NULL, 0);
    if (prc) {
        rc = prc > 0 ? 0 : 2;
        goto out;
    }
    if (!dir) {
        cli_error(CMD, "-m DIR is required (see specula template --help)");
        goto out;
    }
    if (!messages) {
        cli_error(CMD, "--messages FILE.json is required (see specula template --help)");
        goto out;
    }
    if (cli_model_path_check(CMD, dir)) goto out;
    if (!(msgs = read_messages(messages, vars))) goto out;
    rc = render_template(dir, choice, msgs, vars, no_gen, ids);
out:
    json_decref(msgs);
    json_decref(vars);
    free(av);
    return rc;
}
