/* chat.c — finds a model's chat template and renders conversations with it (chat.h). */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "jinja.h"

struct chat_template {
    char *text; /* Jinja text, or NULL for a hand-written renderer */
    size_t len;
    char *config_text; /* tokenizer_config.json's chat_template, until it is chosen */
    size_t config_len;
    char builtin[16];
    char source[1200];
    json_t *specials; /* {"bos_token": "<s>", ...} */
    const tok_tokenizer *tok;
};

static const char *BUILTINS[] = {"gemma4", "gemma3", "qwen3", "chatml", "llama3", NULL};

/* the hand-written renderer whose turn markers the vocabulary has */
static const char *builtin_for_vocab(const tok_tokenizer *t) {
    static const struct { const char *marker, *name; } by_marker[] = {
        {"<|turn>", "gemma4"}, {"<start_of_turn>", "gemma3"}, {"<|im_start|>", "qwen3"}, {"<|start_header_id|>", "llama3"}};
    for (size_t i = 0; t && i < sizeof by_marker / sizeof *by_marker; i++)
        if (sp_tok_token_id(t, by_marker[i].marker, strlen(by_marker[i].marker)) >= 0) return by_marker[i].name;
    return NULL;
}

/* special-token text as Hugging Face passes it to templates: tokenizer_config.json's
 * "bos_token": "<s>" or {"content": "<s>"}, else the tokenizer's own BOS / EOS */
static int load_specials(chat_template *ct, const char *model_dir, const tok_tokenizer *tok, sp_err *err) {
    static const char *keys[] = {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"};
    ct->specials = json_object();
    if (!ct->specials) return sp_err_set(err, "out of memory");
    char path[1100];
    json_t *cfg = NULL;
    if (model_dir && !sp_path_join(path, sizeof path, model_dir, "tokenizer_config.json") && sp_file_exists(path)) {
        json_error_t je;
        cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je); /* model_max_length may pass 64 bits */
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return sp_err_set(err, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
        }
    }
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = cfg ? json_object_get(cfg, keys[i]) : NULL;
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v)) json_object_set(ct->specials, keys[i], v);
    }
    /* "chat_template": "..." or [{"name": "default", "template": "..."}, ...] */
    json_t *tv = cfg ? json_object_get(cfg, "chat_template") : NULL;
    for (size_t i = 0; json_is_array(tv) && i < json_array_size(tv); i++) {
        json_t *e = json_array_get(tv, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, "default")) tv = json_object_get(e, "template");
    }
    if (json_is_string(tv)) {
        ct->config_len = json_string_length(tv);
        if (!(ct->config_text = malloc(ct->config_len + 1))) {
            json_decref(cfg);
            return sp_err_set(err, "out of memory");
        }
        memcpy(ct->config_text, json_string_value(tv), ct->config_len + 1);
    } else if (tv) {
        json_decref(cfg);
        return sp_err_set(err, "%s: \"chat_template\" must be a string or a list with a \"default\" template", path);
    }
    json_decref(cfg);
    int ids[2] = {tok ? sp_tok_bos(tok) : -1, tok ? sp_tok_eos(tok) : -1};
    for (int k = 0; k < 2; k++) {
        size_t n;
        const char *s = ids[k] >= 0 ? sp_tok_token_text(tok, ids[k], &n) : NULL;
        if (s && !json_object_get(ct->specials, keys[k])) json_object_set_new(ct->specials, keys[k], json_stringn(s, n));
    }
    return 0;
}

static int read_text(chat_template *ct, const char *path, sp_err *err) {
    if (sp_read_file(path, &ct->text, &ct->len, err)) return -1;
    snprintf(ct->source, sizeof ct->source, "%s", path);
    return 0;
}

chat_template *sp_chat_template_load(const char *model_dir, const tok_tokenizer *tok, const char *choice, sp_err *err) {
    chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return sp_err_set(err, "out of memory"), NULL;
    ct->tok = tok;
    char path[1100];
    int rc = load_specials(ct, model_dir, tok, err);
    if (!rc && choice) {
        int named = 0;
        for (int i = 0; BUILTINS[i]; i++) named |= !strcmp(choice, BUILTINS[i]);
        if (named && !sp_file_exists(choice)) {
            snprintf(ct->builtin, sizeof ct->builtin, "%s", choice);
            snprintf(ct->source, sizeof ct->source, "built-in %s", choice);
        } else if (sp_file_exists(choice)) {
            rc = read_text(ct, choice, err);
        } else {
            rc = sp_err_set(err, "--chat-template %s: no such file, and not a built-in template (gemma4, gemma3, "
                                 "qwen3, chatml, llama3)", choice);
        }
    } else if (!rc && model_dir && !sp_path_join(path, sizeof path, model_dir, "chat_template.jinja") &&
               sp_file_exists(path)) {
        rc = read_text(ct, path, err);
    } else if (!rc && model_dir && !sp_path_join(path, sizeof path, model_dir, "chat_template.json") &&
               sp_file_exists(path)) { /* processors' {"chat_template": "..."} (multimodal checkpoints) */
        json_error_t je;
        json_t *doc = json_load_file(path, 0, &je);
        json_t *tv = json_object_get(doc, "chat_template");
        if (!json_is_string(tv)) {
            rc = sp_err_set(err, "%s: expected an object with a \"chat_template\" string%s%s", path, doc ? "" : ": ",
                            doc ? "" : je.text);
        } else if (!(ct->text = malloc(json_string_length(tv) + 1))) {
            rc = sp_err_set(err, "out of memory");
        } else { /* the whole string: a \u0000 inside reaches the engine, which refuses it */
            ct->len = json_string_length(tv);
            memcpy(ct->text, json_string_value(tv), ct->len + 1);
            snprintf(ct->source, sizeof ct->source, "%s", path);
        }
        json_decref(doc);
    } else if (!rc && ct->config_text) {
        ct->text = ct->config_text, ct->len = ct->config_len, ct->config_text = NULL;
        snprintf(ct->source, sizeof ct->source, "%s/tokenizer_config.json chat_template", model_dir);
    } else if (!rc && tok && sp_tok_chat_template(tok)) {
        const char *t = sp_tok_chat_template(tok);
        ct->len = strlen(t);
        if (!(ct->text = malloc(ct->len + 1))) rc = sp_err_set(err, "out of memory");
        else memcpy(ct->text, t, ct->len + 1);
        snprintf(ct->source, sizeof ct->source, "the tokenizer's chat_template");
    } else if (!rc) {
        const char *name = builtin_for_vocab(tok);
        if (name) {
            snprintf(ct->builtin, sizeof ct->builtin, "%s", name);
            snprintf(ct->source, sizeof ct->source, "built-in %s", name);
        } else {
            rc = sp_err_set(err, "%s: the model ships no chat template (no chat_template.jinja, no chat_template in "
                                 "tokenizer_config.json) and its vocabulary has no turn markers specula knows; give "
                                 "one with --chat-template FILE.jinja",
                            model_dir ? model_dir : "tokenizer");
        }
    }
    free(ct->config_text);
    ct->config_text = NULL;
    if (rc) {
        sp_chat_template_free(ct);
        return NULL;
    }
    return ct;
}

void sp_chat_template_free(chat_template *ct) {
    if (!ct) return;
    free(ct->text);
    json_decref(ct->specials);
    free(ct);
}

const char *sp_chat_template_source(const chat_template *ct) { return ct->source; }
int sp_chat_template_is_jinja(const chat_template *ct) { return ct->text != NULL; }
const char *sp_chat_template_text(const chat_template *ct) { return ct->text; }
const char *sp_chat_template_builtin(const chat_template *ct) { return ct->text ? "" : ct->builtin; }

int sp_chat_render(const chat_template *ct, json_t *messages, int add_generation_prompt, json_t *vars, char **out,
                sp_err *err) {
    *out = NULL;
    if (!json_is_array(messages)) return sp_err_set(err, "chat messages must be a JSON array");
    size_t n = json_array_size(messages);
    if (!ct->text) { /* hand-written renderer: plain role / content strings */
        tok_msg *m = calloc(n ? n : 1, sizeof *m);
        if (!m) return sp_err_set(err, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(messages, i);
            m[i].role = json_string_value(json_object_get(e, "role"));
            m[i].content = json_string_value(json_object_get(e, "content"));
            if (!m[i].role || !m[i].content) {
                free(m);
                return sp_err_set(err, "chat message %zu: the %s template needs \"role\" and \"content\" strings", i,
                                  ct->source);
            }
        }
        int rc = sp_tok_chat_render((tok_tokenizer *)ct->tok, ct->builtin, m, (int)n, add_generation_prompt, out, err);
        free(m);
        return rc;
    }
    json_t *ctx = json_deep_copy(ct->specials);
    if (!ctx || json_object_set(ctx, "messages", messages) ||
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt)) ||
        (vars && json_object_update(ctx, vars))) {
        json_decref(ctx);
        return sp_err_set(err, "out of memory");
    }
    size_t len;
    int rc = sp_jinja_render(ct->text, ct->len, ct->source, ctx, NULL, out, &len, err);
    json_decref(ctx);
    return rc;
}


/* ct NULL: the message contents joined by blank lines, encoded as plain text with BOS */
static int plain_tokens(tok_tokenizer *t, json_t *messages, int32_t **ids, int *n, sp_err *err) {
    size_t len = 0, cap = 1;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const char *c = json_string_value(json_object_get(json_array_get(messages, i), "content"));
        cap += (c ? strlen(c) : 0) + 2;
    }
    char *text = malloc(cap);
    if (!text) return sp_err_set(err, "out of memory");
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const char *c = json_string_value(json_object_get(json_array_get(messages, i), "content"));
        size_t k = c ? strlen(c) : 0;
        if (i) memcpy(text + len, "\n\n", 2), len += 2;
        if (k) memcpy(text + len, c, k), len += k;
    }
    text[len] = 0;
    int rc = sp_tok_encode(t, text, len, 1, 0, ids, n, err);
    free(text);
    return rc;
}

int sp_chat_tokens(const chat_template *ct, tok_tokenizer *t, json_t *messages, int add_generation_prompt, json_t *vars,
                   int32_t **ids, int *n, sp_err *err) {
    *ids = NULL;
    *n = 0;
    if (!json_is_array(messages)) return sp_err_set(err, "chat messages must be a JSON array");
    if (!ct) return plain_tokens(t, messages, ids, n, err);
    char *text = NULL;
    int rc = sp_chat_render(ct, messages, add_generation_prompt, vars, &text, err);
    if (!rc) rc = sp_tok_encode(t, text, strlen(text), 0, 1, ids, n, err);
    free(text);
    return rc;
}

/* role / content pairs as the JSON array the renderers take */
static json_t *msgs_json(const tok_msg *msgs, int n, sp_err *err) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        json_t *m = json_object();
        if (!m || json_object_set_new(m, "role", json_string(msgs[i].role ? msgs[i].role : "")) ||
            json_object_set_new(m, "content", json_string(msgs[i].content ? msgs[i].content : "")) ||
            json_array_append_new(arr, m)) {
            json_decref(m);
            json_decref(arr);
            sp_err_set(err, "chat message %d is not valid UTF-8 text", i);
            return NULL;
        }
    }
    if (!arr) sp_err_set(err, "out of memory");
    return arr;
}

int sp_chat_tokens_msgs(const chat_template *ct, tok_tokenizer *t, const tok_msg *msgs, int n,
                        int add_generation_prompt, json_t *vars, int32_t **ids, int *n_ids, sp_err *err) {
    *ids = NULL;
    *n_ids = 0;
    json_t *arr = msgs_json(msgs, n, err);
    if (!arr) return -1;
    int rc = sp_chat_tokens(ct, t, arr, add_generation_prompt, vars, ids, n_ids, err);
    json_decref(arr);
    return rc;
}

int sp_chat_render_msgs(const chat_template *ct, const tok_msg *msgs, int n, int add_generation_prompt, json_t *vars,
                        char **out, sp_err *err) {
    *out = NULL;
    json_t *arr = msgs_json(msgs, n, err);
    if (!arr) return -1;
    int rc = sp_chat_render(ct, arr, add_generation_prompt, vars, out, err);
    json_decref(arr);
    return rc;
}
