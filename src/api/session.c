/* session.c — one engine session (see session.h): loading, the chat and text paths into
 * tokens, and a request run through the speculative round with its text streamed through the
 * tokenizer's streaming decoder and the stop-string matcher.
 *
 * A drafter is made for one set of sampling parameters (its draft distribution q is processed
 * with them) and one KV capacity, so the session keeps the last one made and makes a new one only
 * when a request's temperature / top-k / top-p / min-p / seed differ or it needs a larger cache. */
#include "api/session.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "decode/stopstr.h"
#include "drafters/dflash.h"

#define SESSION_DEFAULT_CTX 4096

struct sp_session {
    sp_session_params p;
    char *model_dir, *drafter_dir, *drafter_kind, *schedule, *chat_choice;
    sp_model *target;
    tok_tokenizer *tok;
    chat_template *chat;
    sp_drafter_src *src;
    sp_drafter *d;                /* the last drafter made, for built_for / built_ctx */
    sp_sample_params built_for;
    int built_ctx;
    sp_gvocab *gv;                /* token bytes for grammars (sp_session_gvocab) */
    sp_synth synth;               /* synth.n > 0: synthetic acceptance (benchmarks only) */
};

sp_session_params sp_session_params_default(void) {
    sp_session_params p;
    memset(&p, 0, sizeof p);
    p.drafter = sp_drafter_opts_default();
    p.policy = SP_SPEC_POLICY_ADAPTIVE;
    return p;
}

sp_session_req sp_session_req_default(void) {
    sp_session_req r;
    memset(&r, 0, sizeof r);
    r.gen = sp_gen_params_default();
    return r;
}

/* the params' strings, copied into the session */
static int copy_strings(sp_session *s, sp_err *err) {
    const sp_session_params *p = &s->p;
    s->model_dir = p->model ? strdup(p->model) : NULL;
    s->drafter_dir = p->drafter.dir ? strdup(p->drafter.dir) : NULL;
    s->drafter_kind = p->drafter.kind ? strdup(p->drafter.kind) : NULL;
    s->schedule = p->drafter.schedule ? strdup(p->drafter.schedule) : NULL;
    s->chat_choice = p->chat_template ? strdup(p->chat_template) : NULL;
    if (!s->model_dir || (p->drafter.dir && !s->drafter_dir) || (p->drafter.kind && !s->drafter_kind) ||
        (p->drafter.schedule && !s->schedule) || (p->chat_template && !s->chat_choice))
        return sp_err_set(err, "out of memory");
    s->p.model = s->model_dir;
    s->p.drafter.dir = s->drafter_dir;
    s->p.drafter.kind = s->drafter_kind;
    s->p.drafter.schedule = s->schedule;
    s->p.chat_template = s->chat_choice;
    return 0;
}

int sp_session_open(sp_session **out, const sp_session_params *p, sp_err *err) {
    *out = NULL;
    if (!p || !p->model) return sp_err_set(err, "session: no model given");
    const sp_drafter_opts *o = &p->drafter;
    if (o->draft_max < 1 || o->draft_max > SP_SPEC_MAX_G)
        return sp_err_set(err, "--draft-max %d out of range 1..%d", o->draft_max, SP_SPEC_MAX_G);
    sp_session *s = calloc(1, sizeof *s);
    if (!s) return sp_err_set(err, "out of memory");
    s->p = *p;
    if (copy_strings(s, err) || sp_model_load(&s->target, s->model_dir, p->n_threads, err)) goto fail;
    sp_model_set_bf16_dot(s->target, o->bf16_dot);
    if (sp_model_set_kv_types(s->target, p->kv_k, p->kv_v, err)) goto fail;
    if (sp_tok_model_has_tokenizer(s->model_dir) && !(s->tok = sp_tok_load_model(s->model_dir, err))) goto fail;
    if (s->tok && sp_tok_vocab_size(s->tok) > sp_model_config(s->target)->vocab_size) {
        sp_err_set(err, "%s: the tokenizer has %d tokens but the model's token table has %d rows (vocab_size): "
                        "tokens past it have no embedding", s->model_dir, sp_tok_vocab_size(s->tok),
                   sp_model_config(s->target)->vocab_size);
        goto fail;
    }
    int ctx = p->drafter_ctx > 0 ? p->drafter_ctx : SESSION_DEFAULT_CTX;
    if (sp_drafter_src_open(&s->src, &s->p.drafter, s->target, s->model_dir, p->n_threads, ctx, err)) goto fail;
    *out = s;
    return 0;
fail:
    sp_session_free(s);
    return -1;
}

void sp_session_free(sp_session *s) {
    if (!s) return;
    sp_drafter_free(s->d);
    sp_gvocab_free(s->gv);
    sp_drafter_src_free(s->src);
    sp_chat_template_free(s->chat);
    sp_tok_free(s->tok);
    sp_model_free(s->target);
    free(s->model_dir), free(s->drafter_dir), free(s->drafter_kind), free(s->schedule), free(s->chat_choice);
    free(s);
}

sp_model *sp_session_model(const sp_session *s) { return s->target; }
const char *sp_session_model_dir(const sp_session *s) { return s->model_dir; }
tok_tokenizer *sp_session_tokenizer(const sp_session *s) { return s->tok; }
sp_drafter_src *sp_session_drafter_src(const sp_session *s) { return s->src; }
const char *sp_session_drafter_kind(const sp_session *s) { return s->src ? sp_drafter_src_kind(s->src) : "none"; }
const sp_session_params *sp_session_params_get(const sp_session *s) { return &s->p; }

const chat_template *sp_session_chat_template(sp_session *s, sp_err *err) {
    if (s->chat) return s->chat;
    if (!s->tok) {
        sp_err_set(err, "chat needs a tokenizer, and %s has none (tokenizer.json / GGUF vocabulary)", s->model_dir);
        return NULL;
    }
    s->chat = sp_chat_template_load(s->model_dir, s->tok, s->chat_choice, err);
    return s->chat;
}

int sp_session_chat_tokens(sp_session *s, json_t *messages, json_t *vars, int32_t **ids, int *n, sp_err *err) {
    *ids = NULL;
    *n = 0;
    const chat_template *ct = sp_session_chat_template(s, err);
    if (!ct) return -1;
    return sp_chat_tokens(ct, s->tok, messages, 1, vars, ids, n, err);
}

const sp_gvocab *sp_session_gvocab(sp_session *s, sp_err *err) {
    if (s->gv) return s->gv;
    if (!s->tok) {
        sp_err_set(err, "a grammar needs the model's tokenizer, and %s has none", s->model_dir);
        return NULL;
    }
    const sp_config *c = sp_model_config(s->target);
    s->gv = sp_gvocab_create(s->tok, c->vocab_size, c->eos_ids, c->n_eos, err);
    return s->gv;
}

int sp_session_text_tokens(sp_session *s, const char *text, int32_t **ids, int *n, sp_err *err) {
    *ids = NULL;
    *n = 0;
    if (!s->tok)
        return sp_err_set(err, "text needs a tokenizer, and %s has none (no tokenizer.json / GGUF vocabulary): use token ids",
                          s->model_dir);
    int most = sp_model_config(s->target)->max_pos; /* a longer prompt can never run */
    if (most <= 0) most = 1 << 24;
    if (sp_tok_encode_max(s->tok, text, strlen(text), 1, 1, most, ids, n, err))
        return sp_err_wrap(err, "the prompt (the model's context is %d positions)", most);
    if (*n == 0) return sp_err_set(err, "the prompt encodes to no tokens");
    return 0;
}

static int same_sampling(const sp_sample_params *a, const sp_sample_params *b) {
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p &&
           a->min_p == b->min_p && a->seed == b->seed;
}

/* The drafter for this request's sampling and KV capacity: the last one made when they match. */
static sp_drafter *session_drafter(sp_session *s, const sp_sample_params *sample, int max_ctx, sp_err *err) {
    if (s->d && same_sampling(&s->built_for, sample) && s->built_ctx >= max_ctx) return s->d;
    sp_drafter_free(s->d);
    s->d = sp_drafter_src_make(s->src, sample, max_ctx, err);
    s->built_for = *sample;
    s->built_ctx = max_ctx;
    return s->d;
}

/* ---- a request's text: streaming decoder → stop strings → the caller ------------------------ */
typedef struct {
    sp_session *s;
    const sp_session_req *r;
    tok_stream *ts;
    sp_stopstr *stop;
    int stopped;       /* a stop string appeared, or the callback asked to stop */
    int stop_string;   /* a stop string appeared */
    int failed;
} req_text;

/* text that became final: through the stop strings, then kept and handed to the caller */
static void release(req_text *t, int32_t token, const char *p, size_t n) {
    if (t->stop_string) return;
    if (t->stop) {
        sp_err err = {{0}};
        int rc = sp_stopstr_feed(t->stop, p, n, &p, &n, &err);
        if (rc < 0) t->failed = 1;
        if (rc == 1) t->stop_string = t->stopped = 1;
    }
    if (t->r->on_text && (n || token >= 0) && t->r->on_text(t->r->cb_ctx, token, p, n)) t->stopped = 1;
}

static int on_token(void *ctx, int32_t tok) {
    req_text *t = ctx;
    const sp_session_req *r = t->r;
    if (r->gen.on_token && r->gen.on_token(r->gen.cb_ctx, tok)) t->stopped = 1;
    if (r->stop_at_eog && t->s->tok && sp_tok_is_eog(t->s->tok, tok)) return 1;
    /* the EOS that ends the generation is not text (it may be an ordinary token such as " is") */
    if (!r->gen.ignore_eos && sp_gen_is_eos(sp_model_config(t->s->target), &r->gen, tok)) return t->stopped;
    if (t->ts) {
        char buf[4096];
        int n = sp_tok_stream_push(t->ts, tok, buf, sizeof buf - 1); /* what does not fit stays queued */
        buf[n > 0 ? n : 0] = 0; /* callers may read the piece as a C string */
        release(t, tok, buf, n > 0 ? (size_t)n : 0);
    }
    return t->stopped;
}

static void text_finish(req_text *t) {
    if (!t->ts || t->stop_string) return;
    char buf[4096];
    int n;
    while (!t->stop_string && (n = sp_tok_stream_flush(t->ts, buf, sizeof buf - 1)) > 0) {
        buf[n] = 0;
        release(t, -1, buf, (size_t)n);
    }
    if (t->stop && !t->stop_string) {
        const char *rest;
        size_t k;
        sp_stopstr_flush(t->stop, &rest, &k);
        if (k && t->r->on_text) t->r->on_text(t->r->cb_ctx, -1, rest, k);
    }
}

static int text_begin(req_text *t, sp_session *s, const sp_session_req *r, sp_err *err) {
    memset(t, 0, sizeof *t);
    t->s = s, t->r = r;
    if (!s->tok) {
        if (r->n_stops)
            return sp_err_set(err, "--stop needs the model's tokenizer (%s has no tokenizer.json / GGUF vocabulary)",
                              s->model_dir);
        return 0;
    }
    if (!(t->ts = sp_tok_stream_new_ex(s->tok, r->skip_special ? TOK_DECODE_SKIP_SPECIAL : 0)))
        return sp_err_set(err, "out of memory");
    if (r->n_stops && !(t->stop = sp_stopstr_create(r->stops, r->n_stops, err))) return sp_err_wrap(err, "--stop");
    return 0;
}

static void text_free(req_text *t) {
    sp_tok_stream_free(t->ts);
    sp_stopstr_free(t->stop);
}

/* keep_text: the whole text of the tokens, cut at the first stop string (as the stream was) */
static int whole_text(sp_session *s, const sp_session_req *r, sp_session_out *out, sp_err *err) {
    if (!r->keep_text || !s->tok) return 0;
    int n = out->n_tokens; /* without the EOS that ended it, as streamed */
    if (n > 0 && out->gen.stop == SP_STOP_EOS) n--;
    if (sp_tok_decode(s->tok, out->tokens, n, &out->text, err)) return -1;
    if (r->n_stops) out->text[sp_stopstr_cut(out->text, strlen(out->text), r->stops, r->n_stops)] = 0;
    return 0;
}

int sp_session_set_synthetic(sp_session *s, const sp_synth *synth, sp_err *err) {
    if (!synth) {
        s->synth.n = 0;
        return 0;
    }
    if (sp_synth_check(synth, err)) return -1;
    if (s->p.tree.nodes > 0) return sp_err_set(err, "synthetic acceptance works on chains, not token trees");
    s->synth = *synth;
    return 0;
}

const sp_synth *sp_session_synthetic(const sp_session *s) { return s->synth.n > 0 ? &s->synth : NULL; }

/* ---- the run ----------------------------------------------------------------------------- */
/* the speculative loop (drafter d, or NULL: plain through the same round) */
static int run_spec(sp_session *s, sp_drafter *d, const int32_t *prompt, int n, const sp_session_req *r,
                    sp_gen_params gp, sp_session_out *out, sp_err *err) {
    const sp_drafter_opts *o = &s->p.drafter;
    sp_spec_params spp = sp_spec_params_default();
    spp.gen = gp;
    spp.draft_max = o->draft_max;
    spp.draft_min = o->draft_min;
    spp.policy = s->p.policy;
    spp.policy_carry = r->policy_carry;
    spp.profile = r->profile;
    spp.synth = d ? sp_session_synthetic(s) : NULL;
    if (d && s->p.tree.nodes > 0) {
        spp.tree = s->p.tree;
        spp.tree.max_depth = o->draft_max;
    }
    sp_grammar *g = NULL;
    if (r->grammar) {
        spp.gvocab = sp_session_gvocab(s, err);
        if (!spp.gvocab || !(g = sp_grammar_parse(r->grammar, strlen(r->grammar), NULL, err))) return -1;
        spp.grammar = g;
    }
    int rc = sp_spec_generate(s->target, d, prompt, n, &spp, out->tokens, gp.max_new, &out->spec, err);
    sp_grammar_free(g);
    sp_spec_stats *ss = &out->spec;
    out->gen = (sp_gen_stats){.prompt_tokens = ss->prompt_tokens, .emitted = ss->emitted, .prefill_ms = ss->prefill_ms,
                              .decode_ms = ss->decode_ms, .decode_tps = ss->decode_tps, .stop = ss->stop};
    out->gen.prefill_tps = ss->prefill_ms > 0 ? ss->prompt_tokens * 1000.0 / ss->prefill_ms : 0;
    out->speculative = d != NULL;
    sp_dflash_info di;
    if (d && sp_dflash_info_get(d, &di) == 0 && di.conf_n > 0) out->mean_conf = di.conf_sum / (double)di.conf_n;
    return rc;
}

int sp_session_generate(sp_session *s, const int32_t *prompt, int n, const sp_session_req *r, sp_session_out *out,
                        sp_err *err) {
    memset(out, 0, sizeof *out);
    out->mean_conf = -1;
    out->stop = "none";
    if (r->gen.max_new < 1) return sp_err_set(err, "max_new must be >= 1, got %d", r->gen.max_new);
    if (!(out->tokens = malloc(sizeof(int32_t) * (size_t)r->gen.max_new))) return sp_err_set(err, "out of memory");
    req_text t;
    if (text_begin(&t, s, r, err)) {
        text_free(&t);
        return -1;
    }
    sp_gen_params gp = r->gen;
    gp.on_token = on_token;
    gp.cb_ctx = &t;
    sp_drafter *d = NULL;
    int G = s->p.drafter.draft_max, rc = -1;
    if (s->src && !r->plain) {
        int need = gp.max_ctx > 0 ? gp.max_ctx + G + 1 : n + gp.max_new + G + 1;
        if (!(d = session_drafter(s, &gp.sample, need, err))) goto done;
    }
    if (d || r->profile || r->round_plain || r->grammar) rc = run_spec(s, d, prompt, n, r, gp, out, err);
    else rc = sp_generate(s->target, NULL, prompt, n, &gp, out->tokens, gp.max_new, &out->gen, err);
    out->n_tokens = out->gen.emitted;
    if (!rc) text_finish(&t);
    if (!rc && t.failed) rc = sp_err_set(err, "out of memory for the generated text");
    out->stop = t.stop_string ? "stop_string" : sp_stop_reason_name(out->gen.stop);
    if (!rc) rc = whole_text(s, r, out, err);
done:
    text_free(&t);
    return rc;
}

void sp_session_out_free(sp_session_out *o) {
    if (!o) return;
    free(o->tokens);
    free(o->text);
    o->tokens = NULL;
    o->text = NULL;
}
