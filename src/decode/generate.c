/* generate.c — plain generation: chunked prefill, then one forward per token.
 * See generate.h for the RNG counter convention and the stop rules. */
#include "generate.h"

#include <limits.h>
#include <stdlib.h>

#include "core/core.h"

const char *sp_stop_reason_name(sp_stop_reason r) {
    switch (r) {
    case SP_STOP_NONE: return "none";
    case SP_STOP_MAX_NEW: return "max_new";
    case SP_STOP_EOS: return "eos";
    case SP_STOP_CTX: return "context";
    case SP_STOP_CALLBACK: return "callback";
    }
    return "?";
}

sp_gen_params sp_gen_params_default(void) {
    sp_gen_params p = {0};
    p.max_new = 64;
    p.sample = sp_sample_params_default();
    p.penalty = sp_penalty_params_default();
    return p;
}

int sp_is_eos(const sp_config *cfg, int32_t tok) {
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] == tok) return 1;
    return 0;
}

int sp_gen_is_eos(const sp_config *cfg, const sp_gen_params *p, int32_t tok) {
    for (int i = 0; i < p->n_extra_eos && i < SP_MAX_EOS; i++)
        if (p->extra_eos[i] == tok) return 1;
    return sp_is_eos(cfg, tok);
}

/* the call's checks: prompt, max_new, output room, sampling and penalty params */
static int check_call(const sp_config *cfg, const int32_t *prompt, int n_prompt, const sp_gen_params *p, int out_cap,
                      sp_err *err) {
    if (n_prompt < 1) return sp_err_set(err, "generate: the prompt is empty (need at least one token)");
    if (p->max_new < 1) return sp_err_set(err, "generate: max_new must be >= 1, got %d", p->max_new);
    if (out_cap < p->max_new)
        return sp_err_set(err, "generate: output buffer holds %d tokens, max_new is %d", out_cap, p->max_new);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= cfg->vocab_size)
            return sp_err_set(err, "generate: prompt token %d at index %d is outside the vocabulary [0, %d)",
                              prompt[i], i, cfg->vocab_size);
    if (sp_sample_params_check(&p->sample, err)) return -1;
    return sp_penalty_params_check(&p->penalty, err);
}

/* Prefill prompt[0, n) in chunks; only the last chunk's last position needs logits. */
static int prefill(sp_model *m, sp_kv *kv, const int32_t *prompt, int n, int chunk, float *logits, sp_err *err) {
    for (int i = 0; i < n; i += chunk) {
        int T = n - i < chunk ? n - i : chunk;
        sp_forward_out fo = {0};
        if (i + T == n) fo.last_logits = logits;
        if (sp_model_forward(m, kv, prompt + i, T, &fo, err))
            return sp_err_wrap(err, "generate: prefill of prompt tokens %d..%d", i, i + T - 1);
    }
    return 0;
}

/* The decode loop: sample the token at position pos, emit, forward it unless done. */
static int decode(sp_model *m, sp_kv *kv, const sp_gen_params *p, sp_sampler *smp, sp_penalty *pen, float *logits,
                  long pos, long limit, int32_t *out, sp_gen_stats *st, sp_err *err) {
    const sp_config *cfg = sp_model_config(m);
    for (;;) {
        if (pen) sp_penalty_apply(pen, logits);
        int32_t tok = sp_sampler_sample(smp, logits, (uint64_t)pos, NULL, err);
        if (tok < 0) return sp_err_wrap(err, "generate: sampling token %d", st->emitted);
        out[st->emitted++] = tok;
        if (pen && sp_penalty_push(pen, tok, err)) return -1;
        if (p->on_token && p->on_token(p->cb_ctx, tok)) { st->stop = SP_STOP_CALLBACK; return 0; }
        if (!p->ignore_eos && sp_gen_is_eos(cfg, p, tok)) { st->stop = SP_STOP_EOS; return 0; }
        if (st->emitted >= p->max_new) { st->stop = SP_STOP_MAX_NEW; return 0; }
        if (pos + 1 > limit) { st->stop = SP_STOP_CTX; return 0; }
        sp_forward_out fo = {.last_logits = logits};
        if (sp_model_forward(m, kv, &tok, 1, &fo, err)) return sp_err_wrap(err, "generate: decode step at position %ld", pos);
        st->decode_steps++;
        pos++;
    }
}

int sp_generate(sp_model *m, sp_kv *kv, const int32_t *prompt, int n_prompt,
                const sp_gen_params *p, int32_t *out, int out_cap, sp_gen_stats *stats,
                sp_err *err) {
    const sp_config *cfg = sp_model_config(m);
    const int V = cfg->vocab_size;
    sp_gen_stats st = {0};
    if (stats) *stats = st;
    if (check_call(cfg, prompt, n_prompt, p, out_cap, err)) return -1;
    const int chunk = p->prefill_chunk > 0 ? p->prefill_chunk : 512;

    /* context limit: the cache capacity and the model's max_position_embeddings */
    const int kv0 = kv ? sp_kv_len(kv) : 0;
    long limit = p->max_ctx > 0 ? p->max_ctx : (kv ? LONG_MAX : (long)n_prompt + p->max_new);
    if (cfg->max_pos > 0 && cfg->max_pos < limit) limit = cfg->max_pos;
    if (kv0 + (long)n_prompt > limit)
        return sp_err_set(err, "generate: the prompt (%d tokens after %d cached) exceeds the context limit %ld",
                          n_prompt, kv0, limit);

    sp_kv *own_kv = NULL;
    if (!kv) {
        int cap = (int)(limit < INT_MAX ? limit : INT_MAX);
        own_kv = kv = sp_kv_create(m, cap, chunk, err);
        if (!kv) return sp_err_wrap(err, "generate");
    }
    float *logits = malloc((size_t)V * sizeof *logits);
    sp_sampler *smp = sp_sampler_create(V, &p->sample, err);
    sp_penalty *pen = NULL; /* the window covers this call's prompt and output */
    int rc = -1;
    if (!logits) sp_err_set(err, "generate: out of memory for logits [%d]", V);
    if (!logits || !smp) goto done;
    if (sp_penalty_active(&p->penalty)) {
        if (!(pen = sp_penalty_create(V, &p->penalty, err))) goto done;
        for (int i = 0; i < n_prompt; i++)
            if (sp_penalty_push(pen, prompt[i], err)) goto done;
    }
    st.prompt_tokens = n_prompt;
    double t0 = sp_time_ms();
    if (prefill(m, kv, prompt, n_prompt, chunk, logits, err)) goto done;
    double t1 = sp_time_ms();
    st.prefill_ms = t1 - t0;
    if (decode(m, kv, p, smp, pen, logits, kv0 + n_prompt, limit, out, &st, err)) goto done;
    st.decode_ms = sp_time_ms() - t1;
    st.decode_tps = st.decode_steps > 0 && st.decode_ms > 0 ? st.decode_steps * 1000.0 / st.decode_ms : 0;
    st.prefill_tps = st.prefill_ms > 0 ? n_prompt * 1000.0 / st.prefill_ms : 0;
    rc = 0;
done:
    if (stats) *stats = st;
    sp_sampler_free(smp);
    sp_penalty_free(pen);
    free(logits);
    if (own_kv) sp_kv_free(own_kv);
    return rc;
}
