/* engine.c — the high-level public API (include/specula.h, "high-level API"): a thin client of
 * the engine session (session.h). The public structs are mapped onto the session's params and
 * requests; the session owns the target, tokenizer, chat template and drafter. */
#include <stdlib.h>
#include <string.h>

#include "api/session.h"
#include "core/core.h"
#include "specula.h"

#define ENGINE_DEFAULT_CTX 4096
#define ENGINE_DEFAULT_DRAFT_MAX 8

struct sp_engine {
    sp_session *s;
    int max_ctx, draft_max;
};

const char *sp_version(void) { return SPECULA_VERSION; }

sp_engine_params sp_engine_params_default(void) {
    return (sp_engine_params){.model = NULL, .drafter = NULL, .drafter_kind = NULL, .draft_max = 0,
                              .n_threads = 0, .max_ctx = 0, .bf16_dot = 0};
}

sp_request sp_request_default(void) {
    return (sp_request){.max_tokens = 64, .ignore_eos = 0, .temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0,
                        .seed = 0, .on_text = NULL, .cb_ctx = NULL};
}

/* the API's checks of its params, before anything loads */
static int check_params(const sp_engine_params *p, sp_err *err) {
    if (!p || !p->model) return sp_err_set(err, "sp_engine_load: no model directory given");
    if (p->draft_max < 0 || p->draft_max > SP_SPEC_MAX_G)
        return sp_err_set(err, "sp_engine_load: draft_max %d out of range 0..%d", p->draft_max, SP_SPEC_MAX_G);
    if (p->max_ctx < 0) return sp_err_set(err, "sp_engine_load: max_ctx %d is negative", p->max_ctx);
    const char *k = p->drafter_kind;
    if (k && strcmp(k, "none") && strcmp(k, "ngram") && strcmp(k, "suffix") && !p->drafter)
        return sp_err_set(err, "drafter kind '%s' needs a drafter directory", k);
    return 0;
}

int sp_engine_load(sp_engine **out, const sp_engine_params *p, sp_err *err) {
    *out = NULL;
    if (check_params(p, err)) return -1;
    sp_engine *e = calloc(1, sizeof *e);
    if (!e) return sp_err_set(err, "out of memory");
    e->draft_max = p->draft_max ? p->draft_max : ENGINE_DEFAULT_DRAFT_MAX;
    e->max_ctx = p->max_ctx ? p->max_ctx : ENGINE_DEFAULT_CTX;
    sp_session_params sp = sp_session_params_default();
    sp.model = p->model;
    sp.n_threads = p->n_threads;
    sp.policy = SP_SPEC_POLICY_ALWAYS;
    sp.drafter.kind = p->drafter_kind;
    sp.drafter.dir = p->drafter;
    sp.drafter.draft_max = e->draft_max;
    sp.drafter.bf16_dot = p->bf16_dot;
    sp.drafter_ctx = e->max_ctx + SP_SPEC_MAX_G + 1;
    if (sp_session_open(&e->s, &sp, err)) {
        sp_engine_free(e);
        return -1;
    }
    if (!sp_session_tokenizer(e->s)) {
        sp_err_set(err, "%s: no tokenizer (tokenizer.json / GGUF vocabulary)", p->model);
        sp_engine_free(e);
        return -1;
    }
    int max_pos = sp_model_config(sp_session_model(e->s))->max_pos;
    if (max_pos > 0 && e->max_ctx > max_pos) e->max_ctx = max_pos;
    *out = e;
    return 0;
}

void sp_engine_free(sp_engine *e) {
    if (!e) return;
    sp_session_free(e->s);
    free(e);
}

sp_model *sp_engine_model(sp_engine *e) { return sp_session_model(e->s); }
const char *sp_engine_drafter_kind(const sp_engine *e) { return sp_session_drafter_kind(e->s); }

int sp_engine_tokenize(sp_engine *e, const char *text, int add_special, int parse_special, int32_t **ids, int *n,
                       sp_err *err) {
    if (!text) return sp_err_set(err, "sp_engine_tokenize: text is NULL");
    return sp_tok_encode(sp_session_tokenizer(e->s), text, strlen(text), add_special, parse_special, ids, n, err);
}

int sp_engine_detokenize(sp_engine *e, const int32_t *ids, int n, char **text, sp_err *err) {
    return sp_tok_decode(sp_session_tokenizer(e->s), ids, n, text, err);
}

int sp_engine_chat(sp_engine *e, const sp_chat_msg *msgs, int n, int add_generation_prompt, char **out,
                   sp_err *err) {
    if (n < 1) return sp_err_set(err, "sp_engine_chat: no messages");
    const chat_template *ct = sp_session_chat_template(e->s, err);
    if (!ct) return -1;
    tok_msg *m = malloc((size_t)n * sizeof *m);
    if (!m) return sp_err_set(err, "out of memory");
    for (int i = 0; i < n; i++) m[i] = (tok_msg){msgs[i].role, msgs[i].content};
    int rc = sp_chat_render_msgs(ct, m, n, add_generation_prompt, NULL, out, err);
    free(m);
    return rc;
}

static const char *stop_name(sp_stop_reason s) {
    switch (s) {
    case SP_STOP_EOS: return "eos";
    case SP_STOP_MAX_NEW: return "max_tokens";
    case SP_STOP_CTX: return "context";
    case SP_STOP_CALLBACK: return "callback";
    case SP_STOP_NONE: break;
    }
    return "none";
}

/* the request's checks and its session request */
static int engine_request(sp_engine *e, const int32_t *prompt, int n_prompt, const sp_request *r,
                          sp_session_req *q, sp_err *err) {
    if (!r) return sp_err_set(err, "sp_engine_generate: no request");
    if (n_prompt < 1) return sp_err_set(err, "sp_engine_generate: the prompt is empty");
    if (r->max_tokens < 1) return sp_err_set(err, "sp_engine_generate: max_tokens must be >= 1, got %d", r->max_tokens);
    if (n_prompt >= e->max_ctx)
        return sp_err_set(err, "sp_engine_generate: prompt of %d tokens does not fit the context of %d", n_prompt,
                          e->max_ctx);
    int vocab = sp_model_config(sp_session_model(e->s))->vocab_size;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= vocab)
            return sp_err_set(err, "sp_engine_generate: prompt token %d at index %d is outside the vocabulary (%d)",
                              prompt[i], i, vocab);
    *q = sp_session_req_default();
    q->gen.sample = (sp_sample_params){r->temperature, r->top_k, r->top_p, r->min_p, r->seed};
    if (sp_sample_params_check(&q->gen.sample, err)) return -1;
    q->gen.max_new = r->max_tokens < e->max_ctx - n_prompt ? r->max_tokens : e->max_ctx - n_prompt;
    q->gen.ignore_eos = r->ignore_eos;
    q->gen.max_ctx = e->max_ctx + SP_SPEC_MAX_G + 1;
    q->round_plain = 1; /* without a drafter: plain decoding through the same round */
    q->on_text = r->on_text;
    q->cb_ctx = r->cb_ctx;
    return 0;
}

int sp_engine_generate(sp_engine *e, const int32_t *prompt, int n_prompt, const sp_request *r, int32_t **out,
                       int *n_out, sp_stats *stats, sp_err *err) {
    *out = NULL;
    *n_out = 0;
    sp_session_req q;
    if (engine_request(e, prompt, n_prompt, r, &q, err)) return -1;
    sp_session_out o;
    if (sp_session_generate(e->s, prompt, n_prompt, &q, &o, err)) {
        sp_session_out_free(&o);
        return -1;
    }
    *out = o.tokens;
    *n_out = o.n_tokens;
    const sp_spec_stats *ss = &o.spec;
    if (stats)
        *stats = (sp_stats){.prompt_tokens = ss->prompt_tokens, .generated = ss->emitted, .drafted = ss->drafted,
                            .accepted = ss->accepted, .target_forwards = ss->target_calls, .tau = ss->mean_accept_len,
                            .acceptance = ss->acceptance_rate, .prefill_ms = ss->prefill_ms,
                            .decode_ms = ss->decode_ms, .decode_tok_per_s = ss->decode_tps, .stop = stop_name(ss->stop)};
    o.tokens = NULL;
    sp_session_out_free(&o);
    return 0;
}
