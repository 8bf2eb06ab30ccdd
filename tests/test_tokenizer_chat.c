/* test_tokenizer_chat.c — chat templates: exact rendered text for qwen3 (thinking off),
 * llama3, gemma3 and gemma4; detection from tokenizer_config.json's chat_template; a clear
 * error naming --chat-template when the template is unknown; and the rendered prompt
 * encodes its markers as single special tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "tokenizer/tokenizer.h"

/* a tiny byte-level tokenizer with ChatML markers; chat_template comes from the config */
static const char *json =
    "{\"added_tokens\":[{\"id\":256,\"content\":\"<|im_start|>\",\"special\":true},"
    "{\"id\":257,\"content\":\"<|im_end|>\",\"special\":true}],"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{VOCAB},\"merges\":[]}}";

static tok_tokenizer *make(const char *template_text) {
    /* vocab: the 256 byte-level characters */
    char *vocab = malloc(256 * 24), *doc = malloc(256 * 24 + 1024), cfg[512];
    size_t k = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = b;
        if (!printable) cp = b <= 0x20 ? 0x100 + b : b == 0xAD ? 0x100 + 67 : 0x100 + 33 + (b - 0x7F);
        k += (size_t)sprintf(vocab + k, "%s\"\\u%04x\":%d", b ? "," : "", cp, b);
    }
    const char *v = strstr(json, "VOCAB");
    size_t a = (size_t)(v - json);
    memcpy(doc, json, a);
    strcpy(doc + a, vocab);
    strcat(doc, v + 5);
    snprintf(cfg, sizeof cfg, "{\"eos_token\":\"<|im_end|>\",\"chat_template\":\"%s\"}", template_text);
    sp_err err = {0};
    tok_tokenizer *t = sp_tok_load_json_mem(doc, strlen(doc), template_text ? cfg : NULL, "chat.json", &err);
    CHECK(t != NULL, "%s", err.msg);
    free(vocab);
    free(doc);
    return t;
}

static void render_is(tok_tokenizer *t, const char *name, const tok_msg *m, int n, int gen, const char *want) {
    char *out = NULL;
    sp_err err = {0};
    CHECK(sp_tok_chat_render(t, name, m, n, gen, &out, &err) == 0, "%s: %s", name ? name : "auto", err.msg);
    CHECK(out && !strcmp(out, want), "%s rendered:\n%s\n--- expected:\n%s", name ? name : "auto", out ? out : "", want);
    free(out);
}

static const tok_msg conv[] = {
    {"system", "You are terse."},
    {"user", " Hi there "},
    {"assistant", "<think>\nhmm\n</think>\n\nHello!"},
    {"user", "2+2?"},
};

static void test_qwen3(void) {
    tok_tokenizer *t = make("{%- for message in messages %}<|im_start|>{{ message.role }}...");
    if (!t) return;
    CHECK(sp_tok_chat_detect(t) && !strcmp(sp_tok_chat_detect(t), "qwen3"), "detect qwen3");
    render_is(t, NULL, conv, 4, 1,
              "<|im_start|>system\nYou are terse.<|im_end|>\n"
              "<|im_start|>user\n Hi there <|im_end|>\n"
              "<|im_start|>assistant\nHello!<|im_end|>\n"
              "<|im_start|>user\n2+2?<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    /* the markers are single special tokens when encoded with parse_special */
    char *out = NULL;
    sp_err err = {0};
    sp_tok_chat_render(t, "qwen3", conv + 1, 1, 1, &out, &err);
    int32_t *ids;
    int n;
    CHECK(out && sp_tok_encode(t, out, strlen(out), 0, 1, &ids, &n, &err) == 0, "%s", err.msg);
    int starts = 0, ends = 0;
    for (int i = 0; out && i < n; i++) starts += ids[i] == 256, ends += ids[i] == 257;
    CHECK(starts == 2 && ends == 1, "markers: %d starts, %d ends", starts, ends);
    CHECK(sp_tok_is_eog(t, 257), "<|im_end|> is end of generation");
    free(ids);
    free(out);
    sp_tok_free(t);
}

static void test_llama3_gemma(void) {
    tok_tokenizer *t = make("{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>");
    if (!t) return;
    CHECK(sp_tok_chat_detect(t) && !strcmp(sp_tok_chat_detect(t), "llama3"), "detect llama3");
    render_is(t, NULL, conv + 1, 1, 1,
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    render_is(t, "gemma3", conv, 3, 0,
              "<bos><start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n"
              "<start_of_turn>model\n<think>\nhmm\n</think>\n\nHello!<end_of_turn>\n");
    render_is(t, "gemma4", conv, 2, 1,
              "<bos><|turn>system\nYou are terse.<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\n");
    /* gemma3 insists on alternating roles */
    tok_msg bad[2] = {{"user", "a"}, {"user", "b"}};
    char *out = NULL;
    sp_err err = {0};
    CHECK(sp_tok_chat_render(t, "gemma3", bad, 2, 1, &out, &err) == -1 && strstr(err.msg, "alternate"), "%s", err.msg);
    sp_tok_free(t);
    t = make("{{ messages[0]['content'] }}<start_of_turn>");
    CHECK(t && !strcmp(sp_tok_chat_detect(t), "gemma3"), "detect gemma3");
    sp_tok_free(t);
    t = make("{{ '<|turn>' + role }}");
    CHECK(t && !strcmp(sp_tok_chat_detect(t), "gemma4"), "detect gemma4");
    sp_tok_free(t);
}

static void test_unknown(void) {
    tok_tokenizer *t = make("{{ messages | something_else }}");
    if (!t) return;
    char *out = NULL;
    sp_err err = {0};
    CHECK(sp_tok_chat_render(t, NULL, conv, 2, 1, &out, &err) == -1, "unknown template rendered");
    CHECK(strstr(err.msg, "--chat-template") != NULL, "message does not name the flag: %s", err.msg);
    CHECK(sp_tok_chat_render(t, "vicuna", conv, 2, 1, &out, &err) == -1 && strstr(err.msg, "--chat-template"),
          "unknown name: %s", err.msg);
    sp_tok_free(t);
    t = make(NULL);
    CHECK(t && sp_tok_chat_render(t, NULL, conv, 2, 1, &out, &err) == -1 && strstr(err.msg, "no chat_template"),
          "no template: %s", err.msg);
    sp_tok_free(t);
}

int main(void) {
    RUN(test_qwen3);
    RUN(test_llama3_gemma);
    RUN(test_unknown);
    return harness_done("test_tokenizer_chat");
}
