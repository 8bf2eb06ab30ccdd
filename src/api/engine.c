/* engine.c — the high-level public API (include/specula.h, "high-level API"): a target, its
 * tokenizer and a drafter behind one handle, generating through the speculative loop.
 *
 * A drafter is built for one set of sampling parameters (its draft distribution q is processed
 * with them), so the engine builds it at the first request and again only when a request's
 * temperature / top-k / top-p / min-p differ from the previous one's. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/core.h"
#include "drafters/assistant.h"
#include "drafters/eagle3.h"
#include "drafters/dflash.h"
#include "drafters/drafters.h"
#include "decode/spec.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"

#define ENGINE_DEFAULT_CTX 4096
#define ENGINE_NGRAM_MIN 1
#define ENGINE_NGRAM_MAX 4

typedef enum { KIND_NONE = 0, KIND_NGRAM, KIND_DRAFT, KIND_DFLASH, KIND_DSPARK, KIND_ASSISTANT, KIND_EAGLE3 } drafter_kind;
static const char *const KIND_NAMES[] = {"none", "ngram", "draft", "dflash", "dspark", "assistant", "eagle3"};

struct sp_engine {
    char *model_dir, *drafter_dir;
    drafter_kind kind;
    int draft_max, max_ctx;
    sp_model *target;
    sp_model *draft_model; /* KIND_DRAFT only */
    tok_tokenizer *tok;
    chat_template *chat;   /* the model's own template; loaded at the first sp_engine_chat */
    sp_drafter *drafter;   /* built for `built_for`; NULL until the first request */
    sp_sample_params built_for;
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

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* The kind a drafter directory holds when none is named: a Gemma-4 assistant by its
 * model_type, a DFlash / DSpark block drafter by its architectures[0], else a draft model. */
static int detect_kind(const char *dir, drafter_kind *kind, sp_err *err) {
    char path[4096];
    if (sp_path_join(path, sizeof path, dir, "config.json")) return sp_err_set(err, "%s: path too long", dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
    if (!cfg) return sp_err_set(err, "%s: cannot read the drafter's config (%s)", path, je.text);
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    const char *arch = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
    if (mt && !strcmp(mt, "gemma4_assistant"))
        *kind = KIND_ASSISTANT;
    else if (arch && !strcmp(arch, "DFlashDraftModel"))
        *kind = KIND_DFLASH;
    else if (arch && strstr(arch, "DSpark"))
        *kind = KIND_DSPARK;
    else if (arch && strstr(arch, "Eagle3"))
        *kind = KIND_EAGLE3;
    else
        *kind = KIND_DRAFT;
    json_decref(cfg);
    return 0;
}

int sp_engine_load(sp_engine **out, const sp_engine_params *p, sp_err *err) {
    *out = NULL;
    if (!p || !p->model) return sp_err_set(err, "sp_engine_load: no model directory given");
    if (p->draft_max < 0 || p->draft_max > SP_SPEC_MAX_G)
        return sp_err_set(err, "sp_engine_load: draft_max %d out of range 0..%d", p->draft_max, SP_SPEC_MAX_G);
    if (p->max_ctx < 0) return sp_err_set(err, "sp_engine_load: max_ctx %d is negative", p->max_ctx);
    sp_engine *e = calloc(1, sizeof *e);
    if (!e) return sp_err_set(err, "out of memory");
    e->model_dir = dup_str(p->model);
    e->drafter_dir = dup_str(p->drafter);
    e->draft_max = p->draft_max ? p->draft_max : 8;
    if (!e->model_dir || (p->drafter && !e->drafter_dir)) goto oom;
    if (p->drafter_kind) {
        int found = 0;
        for (int k = 0; k < (int)(sizeof KIND_NAMES / sizeof KIND_NAMES[0]); k++)
            if (!strcmp(p->drafter_kind, KIND_NAMES[k])) e->kind = (drafter_kind)k, found = 1;
        if (!found) {
            sp_err_set(err, "unknown drafter kind '%s' (none, ngram, draft, dflash, dspark, assistant)", p->drafter_kind);
            goto fail;
        }
        if (e->kind != KIND_NONE && e->kind != KIND_NGRAM && !e->drafter_dir) {
            sp_err_set(err, "drafter kind '%s' needs a drafter directory", p->drafter_kind);
            goto fail;
        }
    } else if (e->drafter_dir && detect_kind(e->drafter_dir, &e->kind, err)) {
        goto fail;
    }
    if (sp_model_load(&e->target, e->model_dir, p->n_threads, err)) goto fail;
    sp_model_set_bf16_dot(e->target, p->bf16_dot);
    int max_pos = sp_model_config(e->target)->max_pos;
    e->max_ctx = p->max_ctx ? p->max_ctx : ENGINE_DEFAULT_CTX;
    if (max_pos > 0 && e->max_ctx > max_pos) e->max_ctx = max_pos;
    e->tok = sp_tok_load_model(e->model_dir, err);
    if (!e->tok) goto fail;
    if (e->kind == KIND_DRAFT && sp_model_load(&e->draft_model, e->drafter_dir, p->n_threads, err)) goto fail;
    *out = e;
    return 0;
oom:
    sp_err_set(err, "out of memory");
fail:
    sp_engine_free(e);
    return -1;
}

void sp_engine_free(sp_engine *e) {
    if (!e) return;
    sp_drafter_free(e->drafter);
    sp_model_free(e->draft_model);
    sp_model_free(e->target);
    sp_chat_template_free(e->chat);
    sp_tok_free(e->tok);
    free(e->model_dir);
    free(e->drafter_dir);
    free(e);
}

sp_model *sp_engine_model(sp_engine *e) { return e->target; }
const char *sp_engine_drafter_kind(const sp_engine *e) { return KIND_NAMES[e->kind]; }

int sp_engine_tokenize(sp_engine *e, const char *text, int add_special, int parse_special, int32_t **ids, int *n,
                       sp_err *err) {
    if (!text) return sp_err_set(err, "sp_engine_tokenize: text is NULL");
    return sp_tok_encode(e->tok, text, strlen(text), add_special, parse_special, ids, n, err);
}

int sp_engine_detokenize(sp_engine *e, const int32_t *ids, int n, char **text, sp_err *err) {
    return sp_tok_decode(e->tok, ids, n, text, err);
}

int sp_engine_chat(sp_engine *e, const sp_chat_msg *msgs, int n, int add_generation_prompt, char **out,
                   sp_err *err) {
    if (n < 1) return sp_err_set(err, "sp_engine_chat: no messages");
    if (!e->chat && !(e->chat = sp_chat_template_load(e->model_dir, e->tok, NULL, err))) return -1;
    tok_msg *m = malloc((size_t)n * sizeof *m);
    if (!m) return sp_err_set(err, "out of memory");
    for (int i = 0; i < n; i++) m[i] = (tok_msg){msgs[i].role, msgs[i].content};
    int rc = sp_chat_render_msgs(e->chat, m, n, add_generation_prompt, NULL, out, err);
    free(m);
    return rc;
}

static int same_sampling(const sp_sample_params *a, const sp_sample_params *b) {
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p && a->min_p == b->min_p;
}

/* (Re)build the drafter for these sampling parameters. */
static int engine_drafter(sp_engine *e, const sp_sample_params *sp, sp_err *err) {
    if (e->kind == KIND_NONE) return 0;
    if (e->drafter && same_sampling(&e->built_for, sp)) return 0;
    sp_drafter_free(e->drafter);
    e->drafter = NULL;
    switch (e->kind) {
    case KIND_NGRAM: e->drafter = sp_drafter_ngram(ENGINE_NGRAM_MIN, ENGINE_NGRAM_MAX, err); break;
    case KIND_DRAFT:
        e->drafter = sp_drafter_draft_model(e->draft_model, e->target, e->drafter_dir, e->model_dir,
                                            e->max_ctx + SP_SPEC_MAX_G + 1, sp, err);
        break;
    case KIND_ASSISTANT: e->drafter = sp_drafter_assistant(e->drafter_dir, e->target, sp, err); break;
    case KIND_EAGLE3: e->drafter = sp_drafter_eagle3(e->drafter_dir, e->target, sp, e->draft_max, err); break;
    case KIND_DFLASH:
    case KIND_DSPARK: {
        sp_dflash_opts o = sp_dflash_opts_default();
        o.max_drafts = e->draft_max;
        o.clamp_to_block = 1;
        e->drafter = sp_drafter_dflash(e->drafter_dir, e->target, sp, &o, err);
        break;
    }
    case KIND_NONE: break;
    }
    if (!e->drafter) return -1;
    e->built_for = *sp;
    return 0;
}

typedef struct {
    sp_engine *e;
    const sp_request *r;
    tok_stream *ts;
} text_ctx;

static int on_token(void *ctx, int32_t token) {
    text_ctx *c = ctx;
    char buf[1024];
    int n = sp_tok_stream_push(c->ts, token, buf, sizeof buf - 1);
    if (n < 0) n = 0;
    buf[n] = 0;
    return c->r->on_text(c->r->cb_ctx, token, buf, (size_t)n);
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

int sp_engine_generate(sp_engine *e, const int32_t *prompt, int n_prompt, const sp_request *r, int32_t **out,
                       int *n_out, sp_stats *stats, sp_err *err) {
    *out = NULL;
    *n_out = 0;
    if (!r) return sp_err_set(err, "sp_engine_generate: no request");
    if (n_prompt < 1) return sp_err_set(err, "sp_engine_generate: the prompt is empty");
    if (r->max_tokens < 1) return sp_err_set(err, "sp_engine_generate: max_tokens must be >= 1, got %d", r->max_tokens);
    if (n_prompt >= e->max_ctx)
        return sp_err_set(err, "sp_engine_generate: prompt of %d tokens does not fit the context of %d", n_prompt,
                          e->max_ctx);
    int vocab = sp_model_config(e->target)->vocab_size;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= vocab)
            return sp_err_set(err, "sp_engine_generate: prompt token %d at index %d is outside the vocabulary (%d)",
                              prompt[i], i, vocab);
    sp_sample_params sp = sp_sample_params_default();
    sp.temperature = r->temperature;
    sp.top_k = r->top_k;
    sp.top_p = r->top_p;
    sp.min_p = r->min_p;
    sp.seed = r->seed;
    if (sp_sample_params_check(&sp, err)) return -1;
    if (engine_drafter(e, &sp, err)) return -1;
    int max_new = r->max_tokens;
    if (max_new > e->max_ctx - n_prompt) max_new = e->max_ctx - n_prompt;
    int32_t *buf = malloc((size_t)max_new * sizeof *buf);
    if (!buf) return sp_err_set(err, "out of memory");
    text_ctx tc = {e, r, NULL};
    sp_spec_params spp = sp_spec_params_default();
    spp.gen.max_new = max_new;
    spp.gen.ignore_eos = r->ignore_eos;
    spp.gen.sample = sp;
    spp.gen.max_ctx = e->max_ctx + SP_SPEC_MAX_G + 1;
    if (r->on_text) {
        tc.ts = sp_tok_stream_new(e->tok);
        if (!tc.ts) {
            free(buf);
            return sp_err_set(err, "out of memory");
        }
        spp.gen.on_token = on_token;
        spp.gen.cb_ctx = &tc;
    }
    spp.draft_max = e->draft_max;
    sp_spec_stats ss;
    int rc = sp_spec_generate(e->target, e->drafter, prompt, n_prompt, &spp, buf, max_new, &ss, err);
    if (!rc && tc.ts) { /* text still held back by the streaming decoder */
        char piece[1024];
        int n;
        while ((n = sp_tok_stream_flush(tc.ts, piece, sizeof piece - 1)) > 0) {
            piece[n] = 0;
            r->on_text(r->cb_ctx, -1, piece, (size_t)n);
        }
    }
    sp_tok_stream_free(tc.ts);
    if (rc) {
        free(buf);
        return -1;
    }
    *out = buf;
    *n_out = ss.emitted;
    if (stats)
        *stats = (sp_stats){.prompt_tokens = ss.prompt_tokens, .generated = ss.emitted, .drafted = ss.drafted,
                            .accepted = ss.accepted, .target_forwards = ss.target_calls, .tau = ss.mean_accept_len,
                            .acceptance = ss.acceptance_rate, .prefill_ms = ss.prefill_ms,
                            .decode_ms = ss.decode_ms, .decode_tok_per_s = ss.decode_tps, .stop = stop_name(ss.stop)};
    return 0;
}
