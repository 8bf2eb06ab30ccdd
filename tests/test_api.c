/* test_api.c — the high-level public API (sp_engine_*): loading errors, tokenize round trip,
 * greedy speculative output identical to plain decoding through the engine, sampled requests
 * reproducible by seed, the text callback (pieces add up to the decoded text; stopping early),
 * and bad requests refused with a message. Uses the embedded default pair. */
#include <string.h>

#include "harness.h"
#include "specula.h"

#define TARGET "models/default/target"
#define DRAFTER "models/default/drafter"

static void test_load_errors(void) {
    sp_engine *e = (sp_engine *)1;
    sp_err err = {{0}};
    sp_engine_params p = sp_engine_params_default();
    CHECK(sp_engine_load(&e, &p, &err) == -1 && e == NULL, "no model accepted");
    CHECK(strstr(err.msg, "no model"), "msg: %s", err.msg);
    p.model = "/nonexistent/specula-model";
    CHECK(sp_engine_load(&e, &p, &err) == -1 && strstr(err.msg, "/nonexistent/specula-model"), "msg: %s", err.msg);
    p.model = TARGET;
    p.drafter_kind = "eagle9";
    CHECK(sp_engine_load(&e, &p, &err) == -1 && strstr(err.msg, "eagle9"), "msg: %s", err.msg);
    p.drafter_kind = "dspark";
    CHECK(sp_engine_load(&e, &p, &err) == -1 && strstr(err.msg, "drafter directory"), "msg: %s", err.msg);
    p.drafter_kind = NULL;
    p.draft_max = 99;
    CHECK(sp_engine_load(&e, &p, &err) == -1 && strstr(err.msg, "draft_max"), "msg: %s", err.msg);
}

typedef struct {
    char text[8192];
    size_t len;
    int calls, stop_after;
} collect;

static int on_text(void *ctx, int32_t token, const char *piece, size_t len) {
    collect *c = ctx;
    if (len && c->len + len < sizeof c->text) {
        memcpy(c->text + c->len, piece, len);
        c->len += len;
        c->text[c->len] = 0;
    }
    if (token >= 0) c->calls++;
    return c->stop_after && c->calls >= c->stop_after;
}

static int load_mode(sp_engine **e, const char *drafter, int bf16_dot) {
    sp_err err = {{0}};
    sp_engine_params p = sp_engine_params_default();
    p.model = TARGET;
    p.drafter = drafter;
    p.n_threads = 2;
    p.bf16_dot = bf16_dot;
    int rc = sp_engine_load(e, &p, &err);
    CHECK(rc == 0, "load: %s", err.msg);
    return rc;
}

static int load(sp_engine **e, const char *drafter) { return load_mode(e, drafter, 0); }

/* sp_engine_params.bf16_dot: the target takes the mode (the default leaves it off) and greedy
 * speculative output still equals plain decoding in it */
static void test_bf16_dot_param(void) {
    sp_engine *plain, *spec;
    if (load_mode(&plain, NULL, 1) || load_mode(&spec, DRAFTER, 1)) return;
    CHECK(sp_model_bf16_dot(sp_engine_model(plain)) == 1 && sp_model_bf16_dot(sp_engine_model(spec)) == 1,
          "bf16_dot not set on the target");
    sp_err err = {{0}};
    int32_t *ids = NULL, *a = NULL, *b = NULL;
    int n = 0, na = 0, nb = 0;
    CHECK(sp_engine_tokenize(plain, "def fibonacci(n):", 1, 0, &ids, &n, &err) == 0, "%s", err.msg);
    sp_request r = sp_request_default();
    r.max_tokens = 40;
    sp_stats sa, sb;
    CHECK(sp_engine_generate(plain, ids, n, &r, &a, &na, &sa, &err) == 0, "plain: %s", err.msg);
    CHECK(sp_engine_generate(spec, ids, n, &r, &b, &nb, &sb, &err) == 0, "spec: %s", err.msg);
    CHECK(na == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a), "outputs differ in the mode (%d vs %d)", na, nb);
    CHECK(sb.tau > 1.5 && sb.drafted > 0, "tau %.2f drafted %d", sb.tau, sb.drafted);
    free(ids), free(a), free(b);
    sp_engine_free(plain);
    sp_engine_free(spec);
    sp_engine *def;
    if (load(&def, NULL)) return;
    CHECK(sp_model_bf16_dot(sp_engine_model(def)) == 0, "the default engine has the bf16-dot mode on");
    sp_engine_free(def);
}

static void test_tokenize_roundtrip(void) {
    sp_engine *e;
    if (load(&e, NULL)) return;
    sp_err err = {{0}};
    const char *text = "def add(a, b):\n    return a + b";
    int32_t *ids = NULL;
    int n = 0;
    CHECK(sp_engine_tokenize(e, text, 0, 0, &ids, &n, &err) == 0 && n > 3, "tokenize: %s", err.msg);
    char *back = NULL;
    CHECK(sp_engine_detokenize(e, ids, n, &back, &err) == 0, "detokenize: %s", err.msg);
    CHECK(back && !strcmp(back, text), "round trip gave '%s'", back ? back : "(null)");
    CHECK(!strcmp(sp_engine_drafter_kind(e), "none"), "kind %s", sp_engine_drafter_kind(e));
    free(back);
    free(ids);
    sp_engine_free(e);
}

static void test_chat(void) {
    sp_engine *e;
    if (load(&e, NULL)) return;
    sp_err err = {{0}};
    sp_chat_msg msgs[3] = {{"user", "Write a loop."}, {"assistant", "for i in range(3): pass"}, {"user", "Again."}};
    char *text = NULL;
    CHECK(sp_engine_chat(e, msgs, 3, 1, &text, &err) == 0, "chat: %s", err.msg);
    CHECK(text && strstr(text, "Write a loop.") && strstr(text, "for i in range(3): pass") && strstr(text, "Again."),
          "rendered: %s", text ? text : "(null)");
    const char *again = text ? strstr(text, "Again.") : NULL;
    CHECK(again && strlen(again) > strlen("Again."), "no generation prompt after the last turn: %s", text ? text : "");
    free(text);
    CHECK(sp_engine_chat(e, msgs, 0, 1, &text, &err) == -1, "no messages accepted");
    sp_engine_free(e);
}

static void test_spec_equals_plain(void) {
    sp_engine *plain, *spec;
    if (load(&plain, NULL) || load(&spec, DRAFTER)) return;
    CHECK(!strcmp(sp_engine_drafter_kind(spec), "dspark"), "kind %s", sp_engine_drafter_kind(spec));
    const char *prompts[] = {"def fibonacci(n):", "import os\n", "class Stack:\n    def __init__(self):"};
    for (int i = 0; i < 3; i++) {
        sp_err err = {{0}};
        int32_t *ids = NULL, *a = NULL, *b = NULL;
        int n = 0, na = 0, nb = 0;
        CHECK(sp_engine_tokenize(plain, prompts[i], 1, 0, &ids, &n, &err) == 0, "%s", err.msg);
        sp_request r = sp_request_default();
        r.max_tokens = 40;
        sp_stats sa, sb;
        collect ca = {{0}, 0, 0, 0};
        r.on_text = on_text;
        r.cb_ctx = &ca;
        CHECK(sp_engine_generate(plain, ids, n, &r, &a, &na, &sa, &err) == 0, "plain: %s", err.msg);
        r.on_text = NULL;
        CHECK(sp_engine_generate(spec, ids, n, &r, &b, &nb, &sb, &err) == 0, "spec: %s", err.msg);
        CHECK(na == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a), "prompt %d: outputs differ (%d vs %d)", i,
              na, nb);
        CHECK(sb.tau > 1.5 && sb.drafted > 0 && sa.drafted == 0, "prompt %d: tau %.2f drafted %d", i, sb.tau,
              sb.drafted);
        CHECK(ca.calls == na, "callback calls %d vs %d tokens", ca.calls, na);
        char *dec = NULL;
        CHECK(sp_engine_detokenize(plain, a, na, &dec, &err) == 0 && dec && !strcmp(dec, ca.text),
              "streamed text differs from the decoded text");
        free(dec);
        free(ids);
        free(a);
        free(b);
    }
    sp_engine_free(plain);
    sp_engine_free(spec);
}

static void test_sampled_reproducible_and_stop(void) {
    sp_engine *e;
    if (load(&e, DRAFTER)) return;
    sp_err err = {{0}};
    int32_t *ids = NULL, *a = NULL, *b = NULL, *c = NULL;
    int n = 0, na = 0, nb = 0, nc = 0;
    CHECK(sp_engine_tokenize(e, "for i in range(", 1, 0, &ids, &n, &err) == 0, "%s", err.msg);
    sp_request r = sp_request_default();
    r.max_tokens = 32;
    r.temperature = 0.8f;
    r.top_p = 0.95f;
    r.seed = 7;
    sp_stats st;
    CHECK(sp_engine_generate(e, ids, n, &r, &a, &na, &st, &err) == 0, "%s", err.msg);
    CHECK(sp_engine_generate(e, ids, n, &r, &b, &nb, &st, &err) == 0, "%s", err.msg);
    CHECK(na == nb && !memcmp(a, b, (size_t)na * sizeof *a), "same seed gave different tokens");
    collect col = {{0}, 0, 0, 5};
    r.on_text = on_text;
    r.cb_ctx = &col;
    r.ignore_eos = 1;
    CHECK(sp_engine_generate(e, ids, n, &r, &c, &nc, &st, &err) == 0, "%s", err.msg);
    CHECK(nc == 5 && !strcmp(st.stop, "callback"), "stopped after %d tokens, stop %s", nc, st.stop);
    free(ids);
    free(a);
    free(b);
    free(c);
    sp_engine_free(e);
}

static void test_bad_requests(void) {
    sp_engine *e;
    if (load(&e, NULL)) return;
    sp_err err = {{0}};
    int32_t bad[2] = {1, 1 << 30}, *out = NULL;
    int n = 0;
    sp_request r = sp_request_default();
    CHECK(sp_engine_generate(e, bad, 2, &r, &out, &n, NULL, &err) == -1 && strstr(err.msg, "vocabulary"), "msg: %s",
          err.msg);
    r.max_tokens = 0;
    CHECK(sp_engine_generate(e, bad, 1, &r, &out, &n, NULL, &err) == -1 && strstr(err.msg, "max_tokens"), "msg: %s",
          err.msg);
    r = sp_request_default();
    r.top_p = 3;
    CHECK(sp_engine_generate(e, bad, 1, &r, &out, &n, NULL, &err) == -1 && out == NULL, "top_p 3 accepted");
    CHECK(sp_engine_generate(e, bad, 0, &r, &out, &n, NULL, &err) == -1, "empty prompt accepted");
    sp_engine_free(e);
}

int main(void) {
    RUN(test_load_errors);
    RUN(test_tokenize_roundtrip);
    RUN(test_chat);
    RUN(test_spec_equals_plain);
    RUN(test_bf16_dot_param);
    RUN(test_sampled_reproducible_and_stop);
    RUN(test_bad_requests);
    return harness_done("test_api");
}
