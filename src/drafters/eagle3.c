/* eagle3.c — EAGLE-3 drafters (see eagle3.h; the equations in docs/EAGLE3.md §2).
 *
 *   committed row i (target position i, paired with token i+1, RoPE position i):
 *       g_i = fc(taps_i)                       (RMSNorm over the taps first when norm_before_fc)
 *   one layer on a row (token x, state g) at position p:
 *       a = [input_layernorm(embed(x)) ; hidden_norm(g)]                       [2H]
 *       q, k, v = a·Wq, a·Wk, a·Wv;  RoPE(q, k) at p;  attention over the cache, causal
 *       h = r + o_proj(attn)          r = g (hidden_norm(g) when norm_before_residual)
 *       out = h + MLP(post_attention_layernorm(h))          (Gemma: its four-norm block)
 *   logits = lm_head(norm(out)) over the draft vocabulary, placed at target ids d2t[·]
 *
 * Drafting from the last committed row c = n_ctx−1 (its out predicts the token after pending):
 * draft 1 from out_c; draft j+1 from the layer run on (draft j, out of the previous step) at
 * position c+j. Those rows sit past n_ctx in the cache and are overwritten later, so a rejected
 * draft leaves nothing behind; commit() writes the committed rows with their real taps.
 *
 * Token trees (one layer step per depth over that depth's nodes) are eagle3_tree.c's.
 * What is not here: the llama.cpp p_min early stop (every proposal runs the
 * requested number of drafts), a draft hidden size different from the target's. */
#include "drafters/eagle3_internal.h"
#include "drafters/weights.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "formats/hfjson.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "model/model.h" /* the target's pool and embedding table */
#include "decode/spec.h"


/* ---- loading -------------------------------------------------------------------------------- */

static void *own(e3_t *s, size_t bytes) { return sp_owner_calloc(&s->owned, bytes); }

static int get_mat(e3_t *s, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    if (sp_drafter_weight_mat(s->st, name, n, k, out, err)) return -1;
    out->bf16_dot = sp_model_bf16_dot(s->target); /* the target's numerics */
    return 0;
}

static int get_vec(e3_t *s, const char *name, int n, float **out, sp_err *err) {
    return sp_drafter_weight_vec(s->st, &s->owned, name, n, out, err);
}

static int json_int(json_t *o, const char *key, int *out, const char *what, sp_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 1;
    if (!json_is_integer(v) || json_integer_value(v) < -(1 << 30) || json_integer_value(v) > (1 << 30))
        return sp_err_set(err, "%s: \"%s\" must be an integer", what, key), -1;
    *out = (int)json_integer_value(v);
    return 0;
}

static int json_bool(json_t *o, const char *key, int *out, const char *what, sp_err *err) {
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return sp_err_set(err, "%s: \"%s\" must be true or false", what, key);
    *out = json_is_true(v);
    return 0;
}

/* the layer ids list at `ids` into s->taps: SpecForge ids name the target layer whose input is
 * tapped (1..N, N = the last layer's output), DeepSpec ids the layer whose output is (0..N-1) */
static int parse_taps(e3_t *s, json_t *ids, const char *key, const char *what, sp_err *err) {
    int N = sp_model_config(s->target)->n_layers, spec = s->layout == SP_EAGLE3_SPECFORGE;
    if (!json_is_array(ids) || json_array_size(ids) < 1 || json_array_size(ids) > SP_MAX_LAYERS)
        return sp_err_set(err, "%s: \"%s\" must be a non-empty list of layer indices", what, key);
    s->m = (int)json_array_size(ids);
    if (spec && s->m != 3) return sp_err_set(err, "%s: \"%s\" has %d entries, EAGLE-3 taps exactly 3", what, key, s->m);
    for (int i = 0; i < s->m; i++) {
        json_t *e = json_array_get(ids, (size_t)i);
        int lo = spec ? 1 : 0, hi = spec ? N : N - 1;
        if (!json_is_integer(e) || json_integer_value(e) < lo || json_integer_value(e) > hi)
            return sp_err_set(err, "%s: %s[%d] must be an integer in %d..%d (the target has %d layers)", what, key, i,
                              lo, hi, N);
        s->taps[i] = (int)json_integer_value(e) - spec;
    }
    return 0;
}

static int parse_keys(e3_t *s, json_t *root, const char *what, sp_err *err) {
    const sp_config *tc = sp_model_config(s->target);
    const char *a = json_string_value(json_array_get(json_object_get(root, "architectures"), 0));
    if (!a) return sp_err_set(err, "%s: missing \"architectures\" (expected LlamaForCausalLMEagle3, Qwen3Eagle3Model "
                                   "or Gemma4Eagle3Model)", what);
    if (!strcmp(a, "LlamaForCausalLMEagle3") || !strcmp(a, "Eagle3LlamaForCausalLM")) s->layout = SP_EAGLE3_SPECFORGE;
    else if (!strcmp(a, "Qwen3Eagle3Model") || !strcmp(a, "Gemma4Eagle3Model")) s->layout = SP_EAGLE3_DEEPSPEC;
    else return sp_err_set(err, "%s: architectures[0] \"%s\" is not an EAGLE-3 drafter (LlamaForCausalLMEagle3, "
                                "Qwen3Eagle3Model, Gemma4Eagle3Model)", what, a);
    int rc, n = 1, th = tc->hidden_size;
    if (s->layout == SP_EAGLE3_SPECFORGE) {
        if (s->dc.n_layers != 1)
            return sp_err_set(err, "%s: num_hidden_layers %d, an EAGLE-3 drafter has 1", what, s->dc.n_layers);
        s->Vd = s->V;
        if ((rc = json_int(root, "draft_vocab_size", &s->Vd, what, err)) < 0) return -1;
        if (s->Vd < 1 || s->Vd > s->V)
            return sp_err_set(err, "%s: draft_vocab_size %d outside 1..%d (the target vocabulary)", what, s->Vd, s->V);
        json_t *ids = json_object_get(root, "eagle_aux_hidden_state_layer_ids");
        const char *key = "eagle_aux_hidden_state_layer_ids";
        json_t *ec = json_object_get(root, "eagle_config");
        if ((!ids || json_is_null(ids)) && json_is_object(ec)) {
            ids = json_object_get(ec, "eagle_aux_hidden_state_layer_ids");
            key = "eagle_config.eagle_aux_hidden_state_layer_ids";
        }
        if (ids && !json_is_null(ids)) {
            if (parse_taps(s, ids, key, what, err)) return -1;
        } else { /* the published default: inputs of layers 2, N/2, N-3 */
            int N = tc->n_layers;
            if (N < 4) return sp_err_set(err, "%s: no %s and the target has %d layers (the default taps need 4)", what,
                                         key, N);
            s->m = 3;
            s->taps[0] = 1, s->taps[1] = N / 2 - 1, s->taps[2] = N - 4;
        }
        if (json_bool(root, "norm_before_residual", &s->norm_before_residual, what, err)) return -1;
        if ((rc = json_int(root, "target_hidden_size", &th, what, err)) < 0) return -1;
    } else {
        if ((rc = json_int(root, "draft_num_hidden_layers", &n, what, err)) < 0) return -1;
        if (n != 1) return sp_err_set(err, "%s: draft_num_hidden_layers %d, an EAGLE-3 drafter has 1", what, n);
        s->Vd = s->V;
        json_t *ids = json_object_get(root, "target_layer_ids");
        if (!ids || json_is_null(ids)) return sp_err_set(err, "%s: missing \"target_layer_ids\"", what);
        if (parse_taps(s, ids, "target_layer_ids", what, err)) return -1;
    }
    if (th != tc->hidden_size || s->dc.hidden_size != tc->hidden_size)
        return sp_err_set(err, "%s: hidden_size %d / target_hidden_size %d must equal the target's hidden_size %d", what,
                          s->dc.hidden_size, th, tc->hidden_size);
    if (s->dc.vocab_size != s->V)
        return sp_err_set(err, "%s: vocab_size %d must equal the target's %d", what, s->dc.vocab_size, s->V);
    return 0;
}

/* d2t [Vd] int64 offsets (target id = draft id + d2t[draft id]) → absolute ids, each in range and
 * used once; t2d [V] bool, when present, must mark exactly those ids. */
static int bind_vocab(e3_t *s, const char *dir, sp_err *err) {
    int Vd = s->Vd, V = s->V;
    if (!(s->d2t = own(s, sizeof(int32_t) * (size_t)Vd))) return sp_err_set(err, "out of memory");
    const st_tensor *t = sp_st_find(s->st, "d2t");
    if (!t) {
        if (Vd != V)
            return sp_err_set(err, "%s: missing tensor d2t (draft_vocab_size %d < vocab_size %d needs the draft → "
                                   "target map)", dir, Vd, V);
        for (int i = 0; i < Vd; i++) s->d2t[i] = i;
    } else {
        int64_t shape[1] = {Vd};
        if (sp_st_get(s->st, "d2t", SP_DT_I64, 1, shape, &t, err)) return -1;
        const int64_t *off = t->data;
        for (int i = 0; i < Vd; i++) {
            int64_t id = i + off[i];
            if (off[i] < -(int64_t)V || off[i] > V || id < 0 || id >= V)
                return sp_err_set(err, "%s: d2t[%d] = %lld maps draft id %d to target id %lld, outside 0..%d", dir, i,
                                  (long long)off[i], i, (long long)id, V - 1);
            s->d2t[i] = (int32_t)id;
        }
    }
    unsigned char *seen = calloc((size_t)V, 1);
    if (!seen) return sp_err_set(err, "out of memory");
    int rc = 0;
    for (int i = 0; i < Vd && !rc; i++) {
        if (seen[s->d2t[i]]) rc = sp_err_set(err, "%s: d2t maps two draft ids to target id %d (draft id %d)", dir,
                                             s->d2t[i], i);
        seen[s->d2t[i]] = 1;
    }
    const st_tensor *m = rc ? NULL : sp_st_find(s->st, "t2d");
    if (m) {
        int64_t shape[1] = {V};
        if (m->dtype == SP_DT_U8) rc = sp_st_get(s->st, "t2d", SP_DT_U8, 1, shape, &m, err);
        else rc = sp_st_get(s->st, "t2d", SP_DT_BOOL, 1, shape, &m, err);
        const unsigned char *b = rc ? NULL : m->data;
        for (int i = 0; i < V && !rc; i++)
            if ((b[i] != 0) != seen[i])
                rc = sp_err_set(err, "%s: t2d[%d] = %d but d2t %s target id %d", dir, i, b[i],
                                seen[i] ? "maps a draft id to" : "maps no draft id to", i);
    }
    free(seen);
    return rc;
}

static int bind(e3_t *s, const char *dir, int norm_before_fc, sp_err *err) {
    int H = s->H, NH = s->NH, KVH = s->KVH, D = s->D, I = s->I, m = s->m;
    char nm[160];
    const char *p = "layers.0.";
    if (s->layout == SP_EAGLE3_SPECFORGE && !sp_st_find(s->st, "layers.0.hidden_norm.weight")) p = "midlayer.";
#define NAME(suffix) (snprintf(nm, sizeof nm, "%s%s", p, suffix), nm)
    if (get_mat(s, "fc.weight", H, m * H, &s->fc, err) || get_vec(s, NAME("hidden_norm.weight"), H, &s->hidden_norm, err) ||
        get_vec(s, NAME("input_layernorm.weight"), H, &s->attn_norm, err) ||
        get_mat(s, NAME("self_attn.q_proj.weight"), NH * D, 2 * H, &s->wq, err) ||
        get_mat(s, NAME("self_attn.k_proj.weight"), KVH * D, 2 * H, &s->wk, err) ||
        get_mat(s, NAME("self_attn.o_proj.weight"), H, NH * D, &s->wo, err) ||
        get_vec(s, NAME("post_attention_layernorm.weight"), H, &s->post_attn_norm, err) ||
        get_mat(s, NAME("mlp.gate_proj.weight"), I, H, &s->w_gate, err) ||
        get_mat(s, NAME("mlp.up_proj.weight"), I, H, &s->w_up, err) ||
        get_mat(s, NAME("mlp.down_proj.weight"), H, I, &s->w_down, err) ||
        get_vec(s, "norm.weight", H, &s->final_norm, err))
        return -1;
    if (!(s->gemma && s->dc.attention_k_eq_v) && get_mat(s, NAME("self_attn.v_proj.weight"), KVH * D, 2 * H, &s->wv, err))
        return -1;
    if (s->layout == SP_EAGLE3_DEEPSPEC && (get_vec(s, NAME("self_attn.q_norm.weight"), D, &s->q_norm, err) ||
                                            get_vec(s, NAME("self_attn.k_norm.weight"), D, &s->k_norm, err)))
        return -1;
    if (s->layout == SP_EAGLE3_SPECFORGE && sp_st_find(s->st, NAME("self_attn.q_norm.weight")))
        return sp_err_set(err, "%s: %s present: the original EAGLE-3 layer has no q/k norms (a DeepSpec checkpoint "
                               "says Qwen3Eagle3Model)", dir, nm);
    s->layer_scalar = 1.0f;
    if (s->gemma) {
        if (get_vec(s, NAME("pre_feedforward_layernorm.weight"), H, &s->pre_ffn_norm, err) ||
            get_vec(s, NAME("post_feedforward_layernorm.weight"), H, &s->post_ffn_norm, err))
            return -1;
        float *sc;
        if (sp_st_find(s->st, NAME("layer_scalar"))) {
            if (get_vec(s, nm, 1, &sc, err)) return -1;
            s->layer_scalar = sc[0];
        }
    }
#undef NAME
    if (norm_before_fc && get_vec(s, "input_norm.weight", m * H, &s->input_norm, err)) return -1;
    if (get_mat(s, "lm_head.weight", s->Vd, H, &s->lm_head, err)) return -1;
    if (sp_st_find(s->st, "embed_tokens.weight") && get_mat(s, "embed_tokens.weight", s->V, H, &s->embed, err)) return -1;
    if (s->layout == SP_EAGLE3_DEEPSPEC) s->embed.data = NULL; /* the target's (scaled) embedding; the copy is checked */
    return bind_vocab(s, dir, err);
}

/* ---- the layer -------------------------------------------------------------------------------- */

int sp_e3_ensure_cap(e3_t *s, int rows, sp_err *err) {
    if (rows <= s->cap) return 0;
    int cap = s->cap ? s->cap : 256;
    while (cap < rows) cap *= 2;
    size_t bytes = (size_t)cap * s->KVH * s->D * sizeof(float);
    float *K = realloc(s->K, bytes);
    if (K) s->K = K;
    float *V = K ? realloc(s->Vc, bytes) : NULL;
    if (V) s->Vc = V;
    if (!K || !V) return sp_err_set(err, "eagle3: out of memory for a %d-row draft cache", cap);
    s->cap = cap;
    return 0;
}

static void embed_row(e3_t *s, float *out, int32_t tok) {
    if (s->layout == SP_EAGLE3_DEEPSPEC) sp_model_embed(s->target, out, tok);
    else sp_mat_row_f32(s->embed.data ? &s->embed : sp_model_embed_table(s->target), tok, out); /* unscaled, as SpecForge */
}

void sp_e3_layer_forward(e3_t *s, const int32_t *tokens, const float *gin, int T, int pos0, const e3_tree_rows *tr) {
    int H = s->H, NH = s->NH, KVH = s->KVH, D = s->D, I = s->I;
    size_t TH = (size_t)T * H, row = (size_t)KVH * D;
    for (int t = 0; t < T; t++) embed_row(s, s->e + (size_t)t * H, tokens[t]);
    sp_rmsnorm(s->xn, s->e, s->attn_norm, T, H, s->eps);
    sp_rmsnorm(s->x, gin, s->hidden_norm, T, H, s->eps);
    for (int t = 0; t < T; t++) { /* a = [input_layernorm(embed) ; hidden_norm(g)] */
        memcpy(s->a + (size_t)t * 2 * H, s->xn + (size_t)t * H, sizeof(float) * (size_t)H);
        memcpy(s->a + (size_t)t * 2 * H + H, s->x + (size_t)t * H, sizeof(float) * (size_t)H);
    }
    sp_matmul(s->pool, s->q, s->a, T, &s->wq);
    sp_matmul(s->pool, s->k, s->a, T, &s->wk);
    if (s->wv.data) sp_matmul(s->pool, s->v, s->a, T, &s->wv);
    else memcpy(s->v, s->k, (size_t)T * row * sizeof(float)); /* k_eq_v: V = raw K */
    if (s->q_norm) sp_rmsnorm(s->q, s->q, s->q_norm, T * NH, D, s->eps);
    if (s->k_norm) sp_rmsnorm(s->k, s->k, s->k_norm, T * KVH, D, s->eps);
    if (s->gemma) sp_rmsnorm(s->v, s->v, NULL, T * KVH, D, s->eps); /* weightless v_norm */
    for (int t = 0; t < T; t++) { /* a tree node at depth j sits where chain draft j does */
        int pos = tr ? pos0 + tr->depth[t] - 1 : pos0 + t;
        sp_rope(s->q + (size_t)t * NH * D, NH, D, s->inv_freq, pos);
        sp_rope(s->k + (size_t)t * row, KVH, D, s->inv_freq, pos);
        size_t slot = (size_t)(tr ? pos0 + tr->rows[t] : pos0 + t) * row;
        memcpy(s->K + slot, s->k + (size_t)t * row, row * sizeof(float));
        memcpy(s->Vc + slot, s->v + (size_t)t * row, row * sizeof(float));
    }
    sp_attn_shape sh = {.T = tr ? tr->n : T, .pos0 = pos0, .NH = NH, .KVH = KVH, .D = D, .cap = s->cap,
                        .scale = s->scale};
    if (tr) sp_attention_tree_rows(s->pool, s->att, s->q, s->K, s->Vc, &sh, tr->parent, tr->rows, T);
    else sp_attention(s->pool, s->att, s->q, s->K, s->Vc, &sh);
    sp_matmul(s->pool, s->o, s->att, T, &s->wo);
    if (s->gemma) sp_rmsnorm(s->o, s->o, s->post_attn_norm, T, H, s->eps);
    const float *res = s->norm_before_residual ? s->x : gin;
    for (size_t i = 0; i < TH; i++) s->out[i] = res[i] + s->o[i];
    sp_rmsnorm(s->xn, s->out, s->gemma ? s->pre_ffn_norm : s->post_attn_norm, T, H, s->eps);
    sp_matmul(s->pool, s->gt, s->xn, T, &s->w_gate);
    sp_matmul(s->pool, s->up, s->xn, T, &s->w_up);
    if (s->dc.act == SP_ACT_GELU_TANH) sp_gelu_tanh_mul(s->gt, s->gt, s->up, (size_t)T * I);
    else sp_silu_mul(s->gt, s->gt, s->up, (size_t)T * I);
    sp_matmul(s->pool, s->o, s->gt, T, &s->w_down);
    if (s->gemma) sp_rmsnorm(s->o, s->o, s->post_ffn_norm, T, H, s->eps);
    for (size_t i = 0; i < TH; i++) s->out[i] += s->o[i];
    if (s->layer_scalar != 1.0f)
        for (size_t i = 0; i < TH; i++) s->out[i] *= s->layer_scalar;
}

void sp_e3_logits_row(e3_t *s, const float *h, float *out) {
    sp_rmsnorm(s->g, h, s->final_norm, 1, s->H, s->eps);
    sp_matmul(s->pool, s->dl, s->g, 1, &s->lm_head);
    if (s->softcap > 0) sp_softcap(s->dl, (size_t)s->Vd, s->softcap);
    if (s->Vd < s->V)
        for (int i = 0; i < s->V; i++) out[i] = -INFINITY;
    for (int i = 0; i < s->Vd; i++) out[s->d2t[i]] = s->dl[i];
}

/* committed rows: tokens[R] (each the token after the tap's position), taps F [R, m·H] */
static int absorb(e3_t *s, const int32_t *tokens, const float *F, int R, sp_err *err) {
    if (R <= 0) return 0;
    if (sp_e3_ensure_cap(s, s->n_ctx + R + s->max_drafts + 1, err)) return -1;
    int H = s->H, mH = s->m * s->H;
    for (int i = 0; i < R; i += E3_CHUNK) {
        int T = R - i < E3_CHUNK ? R - i : E3_CHUNK;
        const float *f = F + (size_t)i * mH;
        if (s->input_norm) {
            sp_rmsnorm(s->tapn, f, s->input_norm, T, mH, s->eps);
            f = s->tapn;
        }
        sp_matmul(s->pool, s->g, f, T, &s->fc);
        sp_e3_layer_forward(s, tokens + i, s->g, T, s->n_ctx + i, NULL);
        memcpy(s->h_last, s->out + (size_t)(T - 1) * H, sizeof(float) * (size_t)H);
    }
    s->n_ctx += R;
    s->have = 1;
    return 0;
}

/* ---- the drafter interface --------------------------------------------------------------------- */

static int e3_begin(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                    const sp_drafter_ctx *ctx, sp_err *err) {
    e3_t *s = d->self;
    if (ctx->target != s->target) return sp_err_set(err, "eagle3: begun with another target than it was loaded for");
    s->seed = ctx->seed;
    s->pen = ctx->penalty;
    s->n_ctx = 0;
    s->have = 0;
    s->n_last = 0;
    s->tree_n = 0;
    s->pending = prompt[n - 1];
    return absorb(s, prompt + 1, taps, n - 1, err); /* row i pairs the taps of token i with token i+1 */
}

static int draw(e3_t *s, float *q, uint64_t pos, sp_err *err) {
    float *Z = s->full;
    if (s->pen) sp_penalty_apply(s->pen, Z);
    int t;
    if (s->greedy) {
        t = sp_sample_argmax(Z, s->V);
    } else {
        if (sp_sampler_probs(s->smp, q, Z, err)) return -1;
        t = sp_sample_probs(q, s->V, sp_rng_uniform(s->seed, SP_RNG_STREAM_DRAFT, pos));
        if (t < 0) return sp_err_set(err, "eagle3: empty draft distribution");
    }
    return t;
}

static int e3_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    e3_t *s = d->self;
    int g = max_g < s->max_drafts ? max_g : s->max_drafts, H = s->H, n = 0, pushed = 0, rc = 0;
    s->n_last = 0;
    if (g <= 0 || !s->have) return 0; /* no committed row yet (one-token prompt) */
    if (sp_e3_ensure_cap(s, s->n_ctx + g, err)) return -1;
    memcpy(s->h, s->h_last, sizeof(float) * (size_t)H);
    for (int j = 1; j <= g; j++) {
        sp_e3_logits_row(s, s->h, s->full);
        int x = draw(s, q ? q + (size_t)(j - 1) * s->V : s->qrow, (uint64_t)s->n_ctx + (uint64_t)j, err);
        if (x < 0 || (s->pen && sp_penalty_push(s->pen, x, err))) {
            rc = -1;
            break;
        }
        pushed += s->pen != NULL;
        drafts[n++] = x;
        if (j == g) break;
        sp_e3_layer_forward(s, &drafts[j - 1], s->h, 1, s->n_ctx + j - 1, NULL); /* past n_ctx: dropped at commit */
        memcpy(s->h, s->out, sizeof(float) * (size_t)H);
    }
    if (s->pen) sp_penalty_pop(s->pen, pushed);
    if (rc) return -1;
    memcpy(s->last, drafts, sizeof(int32_t) * (size_t)n);
    s->n_last = n;
    s->info.proposals++;
    s->info.drafted += n;
    return n;
}

static int e3_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    e3_t *s = d->self;
    if (n_acc < 0 || n_acc > s->n_last)
        return sp_err_set(err, "eagle3: %d drafts accepted of %d proposed", n_acc, s->n_last);
    int32_t tok[SP_SPEC_MAX_G + 1];
    memcpy(tok, s->last, sizeof(int32_t) * (size_t)n_acc);
    tok[n_acc] = next; /* rows [old pending, d_1 .. d_acc] pair with [d_1 .. d_acc, next] */
    s->n_last = 0;
    s->tree_n = 0;
    s->pending = next;
    return absorb(s, tok, taps, n_acc + 1, err);
}

/* rounds without drafts: rows [old pending, tokens[0 .. n-2]] pair with tokens[0 .. n-1] */
static int e3_extend(sp_drafter *d, const int32_t *tokens, int n, const float *taps, const float *hidden, sp_err *err) {
    e3_t *s = d->self;
    s->n_last = 0;
    s->tree_n = 0;
    if (n < 1) return 0;
    s->pending = tokens[n - 1];
    return absorb(s, tokens, taps, n, err);
}

static void e3_destroy(sp_drafter *d) {
    e3_t *s = d ? d->self : NULL;
    if (s) {
        free(s->K);
        free(s->Vc);
        sp_owner_free(&s->owned);
        sp_sampler_free(s->smp);
        sp_st_close(s->st);
        free(s);
    }
    free(d);
}

sp_drafter *sp_drafter_eagle3(const char *dir, sp_model *target, const sp_sample_params *sample, int max_drafts,
                              sp_err *err) {
    sp_drafter *d = calloc(1, sizeof *d);
    e3_t *s = calloc(1, sizeof *s);
    char path[4096], *text = NULL;
    size_t tn;
    json_t *root = NULL;
    int nbf = 0;
    if (!d || !s) {
        free(d);
        free(s);
        sp_err_set(err, "eagle3: out of memory");
        return NULL;
    }
    d->self = s;
    d->destroy = e3_destroy;
    s->target = target;
    s->pool = sp_model_pool(target);
    const sp_config *tc = sp_model_config(target);
    s->V = tc->vocab_size;
    s->H = tc->hidden_size;
    s->max_drafts = max_drafts > 0 ? max_drafts : 8;
    if (s->max_drafts > SP_SPEC_MAX_G) {
        sp_err_set(err, "eagle3: %d drafts per proposal (allowed 1..%d)", s->max_drafts, SP_SPEC_MAX_G);
        goto fail;
    }
    if (sp_path_join(path, sizeof path, dir, "config.json") || sp_read_file(path, &text, &tn, err)) goto fail;
    if (sp_config_parse(&s->dc, text, path, err)) goto fail;
    root = sp_hf_json_loadb(text, tn, JSON_REJECT_DUPLICATES, path, err);
    if (!root || parse_keys(s, root, path, err) || json_bool(root, "norm_before_fc", &nbf, path, err)) goto fail;
    const sp_config *c = &s->dc;
    s->gemma = c->arch == SP_ARCH_GEMMA4;
    if (s->gemma && s->layout == SP_EAGLE3_SPECFORGE) {
        sp_err_set(err, "%s: a LlamaForCausalLMEagle3 drafter must have model_type llama", path);
        goto fail;
    }
    s->NH = c->n_heads;
    s->D = s->gemma ? c->global_head_dim : c->head_dim; /* Gemma: the full-attention shape */
    s->KVH = s->gemma && c->attention_k_eq_v ? c->n_global_kv_heads : c->n_kv_heads;
    s->I = c->ffn_dim;
    s->eps = (float)c->rms_eps;
    s->scale = s->gemma ? 1.0f : 1.0f / sqrtf((float)s->D);
    s->softcap = s->layout == SP_EAGLE3_DEEPSPEC && s->gemma ? (float)c->final_softcap : 0.0f;
    if (s->D < 2 || s->D > 1024 || s->KVH < 1 || s->NH % s->KVH) {
        sp_err_set(err, "%s: head_dim %d / heads %d / kv heads %d unusable", path, s->D, s->NH, s->KVH);
        goto fail;
    }
    if (sp_st_open_dir(&s->st, dir, err) || bind(s, dir, nbf, err)) goto fail;
    if (!(s->inv_freq = own(s, sizeof(float) * (size_t)(s->D / 2)))) goto oom;
    sp_rope_inv_freq(s->inv_freq, s->D, &c->rope);
    size_t H = (size_t)s->H, R = E3_CHUNK, Dq = (size_t)s->NH * s->D, Dkv = (size_t)s->KVH * s->D;
    s->e = own(s, sizeof(float) * R * H);
    s->a = own(s, sizeof(float) * R * 2 * H);
    s->q = own(s, sizeof(float) * R * Dq);
    s->att = own(s, sizeof(float) * R * Dq);
    s->k = own(s, sizeof(float) * R * Dkv);
    s->v = own(s, sizeof(float) * R * Dkv);
    s->o = own(s, sizeof(float) * R * H);
    s->x = own(s, sizeof(float) * R * H);
    s->xn = own(s, sizeof(float) * R * H);
    s->gt = own(s, sizeof(float) * R * (size_t)s->I);
    s->up = own(s, sizeof(float) * R * (size_t)s->I);
    s->g = own(s, sizeof(float) * R * H);
    s->out = own(s, sizeof(float) * R * H);
    s->tapn = own(s, sizeof(float) * R * (size_t)s->m * H);
    s->h = own(s, sizeof(float) * H);
    s->h_last = own(s, sizeof(float) * H);
    s->dl = own(s, sizeof(float) * (size_t)s->Vd);
    s->full = own(s, sizeof(float) * (size_t)s->V);
    s->qrow = own(s, sizeof(float) * (size_t)s->V);
    s->tout = own(s, sizeof(float) * SP_TREE_MAX_NODES * H);
    if (!s->e || !s->a || !s->q || !s->att || !s->k || !s->v || !s->o || !s->x || !s->xn || !s->gt || !s->up ||
        !s->g || !s->out || !s->tapn || !s->h || !s->h_last || !s->dl || !s->full || !s->qrow || !s->tout)
        goto oom;
    if (sp_e3_ensure_cap(s, 256, err)) goto fail;
    s->greedy = sp_sample_is_greedy(sample);
    if (!(s->smp = sp_sampler_create(s->V, sample, err))) goto fail;
    s->info = (sp_eagle3_info){.layout = s->layout, .n_taps = s->m, .tap_layers = s->taps, .draft_vocab = s->Vd,
                               .d2t = s->d2t};
    d->name = "eagle3";
    d->n_taps = s->m;
    d->tap_layers = s->taps;
    d->provides_q = !s->greedy;
    d->begin = e3_begin;
    d->propose = e3_propose;
    d->commit = e3_commit;
    d->extend = e3_extend;
    d->propose_tree = sp_e3_propose_tree;
    d->tree_accept = sp_e3_tree_accept;
    json_decref(root);
    free(text);
    return d;
oom:
    sp_err_set(err, "eagle3: out of memory");
fail:
    json_decref(root);
    free(text);
    e3_destroy(d);
    return NULL;
}

int sp_eagle3_info_get(const sp_drafter *d, sp_eagle3_info *info) {
    if (!d || d->begin != e3_begin) return -1;
    const e3_t *s = d->self;
    *info = s->info;
    info->proposals = s->info.proposals;
    info->drafted = s->info.drafted;
    return 0;
}
