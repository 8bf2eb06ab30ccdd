/* chat.c — hand-written renderers for the chat formats specula's targets use: the fallback of
 * src/chat/ (which renders the model's own Jinja template) for tokenizers that ship no
 * template, and `--chat-template NAME`. Each follows the model's published chat_template for
 * plain system / user / assistant turns:
 *
 *   qwen3   ChatML with thinking off: <|im_start|>ROLE\nTEXT<|im_end|>\n; the generation prompt
 *           is <|im_start|>assistant\n<think>\n\n</think>\n\n (enable_thinking=false). Earlier
 *           assistant turns lose their <think>…</think> part, as the Qwen3 template does.
 *   llama3  <|begin_of_text|> then <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|>
 *           (TEXT trimmed); prompt <|start_header_id|>assistant<|end_header_id|>\n\n.
 *   gemma3  <bos><start_of_turn>user|model\nTEXT<end_of_turn>\n, a system turn is prefixed to
 *           the first user turn; prompt <start_of_turn>model\n.
 *   gemma4  <bos><|turn>system|user|model\nTEXT<turn|>\n; prompt <|turn>model\n
 *           (docs/TOKENIZER.md §4; thinking off = no <|think|> marker in the system turn). */
#include <stdio.h>
#include <stdlib.h>

#include "tok_internal.h"

static int put(tok_buf *b, const char *s) { return sp_tok_buf_put(b, s, strlen(s)); }

static int put_trimmed(tok_buf *b, const char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && (s[a] == ' ' || (s[a] >= '\t' && s[a] <= '\r'))) a++;
    while (n > a && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r'))) n--;
    return sp_tok_buf_put(b, s + a, n - a);
}

static int render_qwen3(const tok_msg *m, int n, int gen, tok_buf *b) {
    int rc = 0, last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(m[i].role, "user")) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n && !rc; i++) {
        if (strcmp(m[i].role, "assistant")) {
            rc = put(b, "<|im_start|>") || put(b, m[i].role) || put(b, "\n") || put(b, m[i].content) ||
                 put(b, "<|im_end|>\n");
            continue;
        }
        /* assistant: split off a <think>…</think> part */
        const char *c = m[i].content, *end = NULL, *p = c;
        while ((p = strstr(p, "</think>"))) end = p, p += 8;
        const char *content = c, *reason = "";
        size_t reason_len = 0;
        if (end) {
            content = end + 8;
            while (*content == '\n') content++;
            const char *r = c, *q = c;
            while ((q = strstr(q, "<think>")) && q < end) r = q + 7, q += 7;
            size_t rl = (size_t)(end - r);
            while (rl && r[rl - 1] == '\n') rl--;
            while (rl && *r == '\n') r++, rl--;
            reason = r;
            reason_len = rl;
        }
        rc = put(b, "<|im_start|>assistant\n");
        if (!rc && i > last_query && (i == n - 1 || reason_len)) {
            rc = put(b, "<think>\n") || sp_tok_buf_put(b, reason, reason_len) || put(b, "\n</think>\n\n");
            while (*content == '\n') content++;
        }
        rc = rc || put(b, content) || put(b, "<|im_end|>\n");
    }
    if (gen && !rc) rc = put(b, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return rc;
}

static int render_llama3(const tok_tokenizer *t, const tok_msg *m, int n, int gen, tok_buf *b) {
    (void)t;
    int rc = put(b, "<|begin_of_text|>");
    for (int i = 0; i < n && !rc; i++)
        rc = put(b, "<|start_header_id|>") || put(b, m[i].role) || put(b, "<|end_header_id|>\n\n") ||
             put_trimmed(b, m[i].content) || put(b, "<|eot_id|>");
    if (gen && !rc) rc = put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return rc;
}

static int render_gemma3(const tok_msg *m, int n, int gen, tok_buf *b, sp_err *err) {
    int rc = put(b, "<bos>"), start = 0;
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) sys = m[0].content, start = 1;
    for (int i = start; i < n && !rc; i++) {
        int is_user = !strcmp(m[i].role, "user");
        if (is_user != ((i - start) % 2 == 0))
            return sp_err_set(err, "gemma3 chat template: roles must alternate user/assistant "
                              "(message %d is '%s')", i, m[i].role);
        rc = put(b, "<start_of_turn>") || put(b, is_user ? "user" : "model") || put(b, "\n");
        if (!rc && sys && i == start) rc = put(b, sys) || put(b, "\n\n");
        rc = rc || put_trimmed(b, m[i].content) || put(b, "<end_of_turn>\n");
    }
    if (gen && !rc) rc = put(b, "<start_of_turn>model\n");
    return rc;
}

static int render_gemma4(const tok_msg *m, int n, int gen, tok_buf *b) {
    int rc = put(b, "<bos>");
    for (int i = 0; i < n && !rc; i++) {
        const char *role = !strcmp(m[i].role, "assistant") ? "model" : m[i].role;
        rc = put(b, "<|turn>") || put(b, role) || put(b, "\n") || put_trimmed(b, m[i].content) ||
             put(b, "<turn|>\n");
    }
    if (gen && !rc) rc = put(b, "<|turn>model\n");
    return rc;
}

const char *sp_tok_chat_detect(const tok_tokenizer *t) {
    const char *ct = t->chat_template;
    if (!ct) return NULL;
    if (strstr(ct, "<|turn>")) return "gemma4";
    if (strstr(ct, "<start_of_turn>")) return "gemma3";
    if (strstr(ct, "<|im_start|>")) return "qwen3";
    if (strstr(ct, "<|start_header_id|>")) return "llama3";
    return NULL;
}

int sp_tok_chat_render(tok_tokenizer *t, const char *name, const tok_msg *msgs, int n,
                    int add_generation_prompt, char **out, sp_err *err) {
    *out = NULL;
    if (!name) {
        name = sp_tok_chat_detect(t);
        if (!name)
            return sp_err_set(err, "%s: %s; choose one with --chat-template NAME (gemma4, gemma3, "
                              "qwen3, llama3)", t->source,
                              t->chat_template ? "the model's chat_template is not one specula knows"
                                               : "the model has no chat_template");
    }
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return sp_err_set(err, "chat message %d has no role or content", i);
    tok_buf b = {0};
    int rc;
    if (!strcmp(name, "qwen3") || !strcmp(name, "chatml")) rc = render_qwen3(msgs, n, add_generation_prompt, &b);
    else if (!strcmp(name, "llama3")) rc = render_llama3(t, msgs, n, add_generation_prompt, &b);
    else if (!strcmp(name, "gemma3")) rc = render_gemma3(msgs, n, add_generation_prompt, &b, err);
    else if (!strcmp(name, "gemma4")) rc = render_gemma4(msgs, n, add_generation_prompt, &b);
    else {
        return sp_err_set(err, "unknown chat template '%s' (--chat-template accepts gemma4, gemma3, "
                          "qwen3, llama3)", name);
    }
    if (rc) {
        sp_tok_buf_free(&b);
        if (err && !strstr(err->msg, "chat template")) sp_err_set(err, "out of memory rendering chat");
        return -1;
    }
    if (!b.p && sp_tok_buf_put(&b, "", 0)) return sp_err_set(err, "out of memory");
    *out = b.p;
    return 0;
}
