/* draft_model.c — a smaller model of the same vocabulary drafts autoregressively.
 *
 * State: the committed stream and how much of it the draft's KV cache holds (`fed`). propose()
 * first feeds the unfed committed tokens (the pending one at least), then drafts g tokens one
 * forward each, feeding d_1 .. d_{g-1}. commit() trims the draft cache back to the committed
 * prefix it holds: rejected drafts leave no trace. Draft sampling uses stream
 * SP_RNG_STREAM_DRAFT at the draft token's absolute position, independent of the verifier's
 * accept / residual streams. Under the engine's constraint (a grammar, sp_draft_constraint) each
 * draft is drawn from its logits masked to the tokens allowed after the drafts before it, and the
 * proposal ends where the mask says so. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "drafters/drafters.h"
#include "drafters/kind.h"
#include "decode/spec.h"

#define FEED_CHUNK 256

typedef struct {
    sp_model *m;
    sp_kv *kv;
    sp_sampler *smp;
    int greedy, V, max_ctx;
    uint64_t seed; /* the request's seed (begin) */
    sp_penalty *pen; /* the request's repetition penalties (begin; NULL: none) */
    int32_t *tok; /* committed stream */
    int len, cap;
    int fed;      /* committed tokens held by the draft cache */
    int32_t last[SP_SPEC_MAX_G];
    int n_last;
    float *logits, *probs; /* [V] each */
} dm_t;

static int push(dm_t *s, int32_t t, sp_err *err) {
    if (s->len == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        int32_t *p = realloc(s->tok, sizeof(int32_t) * (size_t)cap);
        if (!p) return sp_err_set(err, "draft model: out of memory");
        s->tok = p;
        s->cap = cap;
    }
    s->tok[s->len++] = t;
    return 0;
}

static int dm_begin(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                    const sp_drafter_ctx *ctx, sp_err *err) {
    dm_t *s = d->self;
    s->seed = ctx->seed;
    s->pen = ctx->penalty;
    s->len = 0;
    s->fed = 0;
    sp_kv_clear(s->kv);
    for (int i = 0; i < n; i++)
        if (push(s, prompt[i], err)) return -1;
    return 0;
}

static int dm_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    dm_t *s = d->self;
    s->n_last = 0;
    /* leave room in the draft cache: the unfed tokens plus g-1 drafts */
    if (max_g > s->max_ctx - s->len) max_g = s->max_ctx - s->len;
    if (max_g <= 0) return 0;
    while (s->fed < s->len) { /* feed committed tokens; logits of the last one */
        int b = s->len - s->fed < FEED_CHUNK ? s->len - s->fed : FEED_CHUNK;
        sp_forward_out o = {.last_logits = s->logits};
        if (sp_model_forward(s->m, s->kv, s->tok + s->fed, b, &o, err)) return sp_err_wrap(err, "draft model");
        s->fed += b;
    }
    const sp_draft_constraint *c = d->constraint; /* the engine's grammar: drafts drawn from masked logits */
    int pushed = 0, i;
    for (i = 0; i < max_g; i++) {
        int32_t t;
        uint64_t pos = (uint64_t)(s->len + i);
        int cm = sp_draft_constraint_apply(c, i, s->logits, s->V, err);
        if (cm < 0) return -1;
        if (cm) break;
        if (s->pen) sp_penalty_apply(s->pen, s->logits); /* the sequence holds d_1 .. d_{i-1} */
        if (s->greedy) {
            t = sp_sample_argmax(s->logits, s->V);
        } else {
            float *qi = q ? q + (size_t)i * s->V : s->probs; /* q_i: the distribution d_i is drawn from */
            if (sp_sampler_probs(s->smp, qi, s->logits, err)) return -1;
            t = sp_sample_probs(qi, s->V, sp_rng_uniform(s->seed, SP_RNG_STREAM_DRAFT, pos));
            if (t < 0) return sp_err_set(err, "draft model: empty draft distribution");
        }
        if (c && c->accept(c->ctx, t, err)) return -1;
        drafts[i] = t;
        s->last[s->n_last++] = t;
        if (s->pen && i + 1 < max_g && sp_penalty_push(s->pen, t, err)) return -1;
        pushed += s->pen && i + 1 < max_g;
        if (i + 1 < max_g) {
            sp_forward_out o = {.last_logits = s->logits};
            if (sp_model_forward(s->m, s->kv, &t, 1, &o, err)) return sp_err_wrap(err, "draft model");
        }
    }
    if (s->pen) sp_penalty_pop(s->pen, pushed);
    /* a proposal the constraint ended early fed its last draft too: the cache holds n_last - 1 */
    if (i < max_g && i > 0 && sp_kv_trim(s->kv, 1, err)) return sp_err_wrap(err, "draft model");
    return i;
}

static int dm_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    dm_t *s = d->self;
    if (n_acc > s->n_last) return sp_err_set(err, "draft model: %d accepted of %d proposed", n_acc, s->n_last);
    int in_cache = s->n_last > 0 ? s->n_last - 1 : 0; /* drafts fed to the cache */
    int keep = n_acc < in_cache ? n_acc : in_cache;
    if (sp_kv_trim(s->kv, in_cache - keep, err)) return sp_err_wrap(err, "draft model");
    for (int i = 0; i < n_acc; i++)
        if (push(s, s->last[i], err)) return -1;
    s->fed += keep;
    s->n_last = 0;
    return push(s, next, err);
}

static void dm_destroy(sp_drafter *d) {
    dm_t *s = d->self;
    if (s) {
        sp_kv_free(s->kv);
        sp_sampler_free(s->smp);
        free(s->tok);
        free(s->logits);
        free(s->probs);
        free(s);
    }
    free(d);
}

/* 1 when both files exist and differ */
static int tokenizers_differ(const char *a_dir, const char *b_dir) {
    char pa[4096], pb[4096], *ta = NULL, *tb = NULL;
    size_t na, nb;
    if (!a_dir || !b_dir || sp_path_join(pa, sizeof pa, a_dir, "tokenizer.json") ||
        sp_path_join(pb, sizeof pb, b_dir, "tokenizer.json"))
        return 0;
    if (sp_read_file(pa, &ta, &na, NULL) || sp_read_file(pb, &tb, &nb, NULL)) {
        free(ta);
        free(tb);
        return 0;
    }
    int differ = na != nb || memcmp(ta, tb, na) != 0;
    free(ta);
    free(tb);
    return differ;
}

sp_drafter *sp_drafter_draft_model(sp_model *draft, const sp_model *target, const char *draft_dir,
                                   const char *target_dir, int max_ctx, const sp_sample_params *sample, sp_err *err) {
    const sp_config *dc = sp_model_config(draft), *tc = sp_model_config(target);
    if (dc->vocab_size != tc->vocab_size) {
        sp_err_set(err, "draft model vocabulary (%d tokens) differs from the target's (%d): they must share a tokenizer",
                   dc->vocab_size, tc->vocab_size);
        return NULL;
    }
    if (tokenizers_differ(draft_dir, target_dir)) {
        sp_err_set(err, "draft model tokenizer.json (%s) differs from the target's (%s)", draft_dir, target_dir);
        return NULL;
    }
    sp_model_set_bf16_dot(draft, sp_model_bf16_dot(target)); /* the target's numerics */
    sp_drafter *d = calloc(1, sizeof *d);
    dm_t *s = calloc(1, sizeof *s);
    if (!d || !s) {
        free(d);
        free(s);
        sp_err_set(err, "draft model: out of memory");
        return NULL;
    }
    d->self = s;
    d->destroy = dm_destroy;
    s->m = draft;
    s->V = dc->vocab_size;
    s->max_ctx = max_ctx;
    s->greedy = sp_sample_is_greedy(sample);
    s->kv = sp_kv_create(draft, max_ctx, FEED_CHUNK, err);
    s->smp = s->kv ? sp_sampler_create(s->V, sample, err) : NULL;
    s->logits = malloc(sizeof(float) * (size_t)s->V);
    s->probs = malloc(sizeof(float) * (size_t)s->V);
    if (!s->kv || !s->smp || !s->logits || !s->probs) {
        if (s->kv && s->smp) sp_err_set(err, "draft model: out of memory");
        dm_destroy(d);
        return NULL;
    }
    d->name = "draft";
    d->step_cost = 1; /* one draft-model forward per draft */
    d->provides_q = !s->greedy;
    d->begin = dm_begin;
    d->propose = dm_propose;
    d->commit = dm_commit;
    return d;
}

/* ---- the draft kind (kind.h) ---------------------------------------------------------------- */

/* a causal LM of an architecture the target loader runs; the table asks the block drafters first */
int sp_draft_model_kind_detect(const sp_drafter_ident *id) {
    const char *mt = id->model_type, *a = id->arch;
    static const char *const TYPES[] = {"llama", "qwen3", "gemma4", "gemma4_text", "gemma4_unified",
                                        "gemma4_unified_text"};
    int known = 0;
    for (size_t i = 0; mt && i < sizeof TYPES / sizeof TYPES[0]; i++) known |= !strcmp(mt, TYPES[i]);
    if (!known) return 0;
    return !a || strstr(a, "ForCausalLM") || strstr(a, "ForConditionalGeneration");
}

/* the draft model every request's drafter borrows (its own KV cache per drafter) */
int sp_draft_model_kind_open(void **state, const sp_drafter_env *env, sp_err *err) {
    sp_model *m = NULL;
    if (sp_model_load(&m, env->o->dir, env->n_threads, err)) return -1;
    *state = m;
    return 0;
}

sp_drafter *sp_draft_model_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample,
                                     int max_ctx, sp_err *err) {
    return sp_drafter_draft_model(state, env->target, env->o->dir, env->target_dir, max_ctx, sample, err);
}

void sp_draft_model_kind_close(void *state) { sp_model_free(state); }
