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
 * Under the engine's constraint (a grammar, sp_draft_constraint) each chain draft is drawn from
 * its logits masked in target-id space (the draft vocabulary placed at d2t ids first); the
 * proposal ends where the mask leaves no draft-vocabulary token. Trees ignore the constraint (the
 * engine drafts chains under a grammar).
 *
 * The layer is model/block.c's (sp_block_forward, attention input SP_ATTN_IN_EMBED_STATE), its
 * tensors bound by name through the tensor table's EAGLE-3 layouts (formats/tensor_names.h).
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
        if (json_bool(root, "norm_before_residual", &s->layer.d.norm_residual, what, err)) return -1;
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

/* the checkpoint's name of a model-wide role (no layer) or of the layer's → buf [160], returned;
 * "(none)" for a role the layout lacks (d2t / t2d in DeepSpec's, which the loader never reads) */
static const char *e3_name(const e3_t *s, sp_tensor_role role, char *buf) {
    if (!sp_tensor_hf_name_in(s->names, s->dc.arch, role, role < SP_TN_FIRST_LAYER_ROLE ? -1 : 0, buf, 160))
        snprintf(buf, 160, "(none)");
    return buf;
}

/* d2t [Vd] int64 offsets → absolute ids s->d2t, each in range (identity when absent: Vd == V) */
static int bind_d2t(e3_t *s, const char *dir, sp_err *err) {
    int Vd = s->Vd, V = s->V;
    char d2t[160];
    e3_name(s, SP_TN_D2T, d2t);
    if (!(s->d2t = own(s, sizeof(int32_t) * (size_t)Vd))) return sp_err_set(err, "out of memory");
    const st_tensor *t = s->names == SP_TN_EAGLE3_DEEPSPEC ? NULL : sp_st_find(s->st, d2t);
    if (!t) {
        if (Vd != V)
            return sp_err_set(err, "%s: missing tensor %s (draft_vocab_size %d < vocab_size %d needs the draft → "
                                   "target map)", dir, d2t, Vd, V);
        for (int i = 0; i < Vd; i++) s->d2t[i] = i;
        return 0;
    }
    int64_t shape[1] = {Vd};
    if (sp_st_get(s->st, d2t, SP_DT_I64, 1, shape, &t, err)) return -1;
    const int64_t *off = t->data;
    for (int i = 0; i < Vd; i++) {
        int64_t id = i + off[i];
        if (off[i] < -(int64_t)V || off[i] > V || id < 0 || id >= V)
            return sp_err_set(err, "%s: %s[%d] = %lld maps draft id %d to target id %lld, outside 0..%d", dir, d2t, i,
                              (long long)off[i], i, (long long)id, V - 1);
        s->d2t[i] = (int32_t)id;
    }
    return 0;
}

/* d2t (bind_d2t) used once per target id; t2d [V] bool, when present, must mark exactly those ids */
static int bind_vocab(e3_t *s, const char *dir, sp_err *err) {
    int Vd = s->Vd, V = s->V;
    if (bind_d2t(s, dir, err)) return -1;
    unsigned char *seen = calloc((size_t)V, 1);
    if (!seen) return sp_err_set(err, "out of memory");
    int rc = 0;
    char d2t[160], t2d[160];
    e3_name(s, SP_TN_D2T, d2t);
    e3_name(s, SP_TN_T2D, t2d);
    for (int i = 0; i < Vd && !rc; i++) {
        if (seen[s->d2t[i]]) rc = sp_err_set(err, "%s: %s maps two draft ids to target id %d (draft id %d)", dir, d2t,
                                             s->d2t[i], i);
        seen[s->d2t[i]] = 1;
    }
    const st_tensor *m = rc || s->names == SP_TN_EAGLE3_DEEPSPEC ? NULL : sp_st_find(s->st, t2d);
    if (m) {
        int64_t shape[1] = {V};
        if (m->dtype == SP_DT_U8) rc = sp_st_get(s->st, t2d, SP_DT_U8, 1, shape, &m, err);
        else rc = sp_st_get(s->st, t2d, SP_DT_BOOL, 1, shape, &m, err);
        const unsigned char *b = rc ? NULL : m->data;
        for (int i = 0; i < V && !rc; i++)
            if ((b[i] != 0) != seen[i])
                rc = sp_err_set(err, "%s: %s[%d] = %d but %s %s target id %d", dir, t2d, i, b[i], d2t,
                                seen[i] ? "maps a draft id to" : "maps no draft id to", i);
    }
    free(seen);
    return rc;
}

/* sp_block_bind's readers over the drafter's safetensors (ctx: the e3_t) */
static int bind_mat_cb(void *ctx, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    return get_mat(ctx, name, n, k, out, err);
}

static int bind_vec_cb(void *ctx, const char *name, int n, float **out, sp_err *err) {
    return get_vec(ctx, name, n, out, err);
}

static int bind_scalar_cb(void *ctx, const char *name, float *out, sp_err *err) {
    e3_t *s = ctx;
    float *v;
    if (!sp_st_find(s->st, name)) return 1;
    if (get_vec(s, name, 1, &v, err)) return -1;
    *out = v[0];
    return 0;
}

/* the decoder layer (sp_block_bind by the layout's names), fc, the tap norm, the final norm, the
 * head, the optional own embedding and the vocabulary map */
static int bind(e3_t *s, const char *dir, int norm_before_fc, sp_err *err) {
    int H = s->H;
    char nm[160];
    if (s->layout == SP_EAGLE3_SPECFORGE && sp_st_find(s->st, e3_name(s, SP_TN_Q_NORM, nm)))
        return sp_err_set(err, "%s: %s present: the original EAGLE-3 layer has no q/k norms (a DeepSpec checkpoint "
                               "says Qwen3Eagle3Model)", dir, nm);
    sp_block_binder b = {s, "", bind_mat_cb, bind_vec_cb, bind_scalar_cb};
    if (get_mat(s, e3_name(s, SP_TN_FC, nm), H, s->m * H, &s->fc, err) ||
        sp_block_bind_layout(&s->layer, s->names, s->dc.arch, 0, &b, err) ||
        get_vec(s, e3_name(s, SP_TN_FINAL_NORM, nm), H, &s->final_norm, err))
        return -1;
    if (norm_before_fc && get_vec(s, e3_name(s, SP_TN_TAP_NORM, nm), s->m * H, &s->input_norm, err)) return -1;
    if (get_mat(s, e3_name(s, SP_TN_LM_HEAD, nm), s->Vd, H, &s->lm_head, err)) return -1;
    if (sp_st_find(s->st, e3_name(s, SP_TN_EMBED, nm)) && get_mat(s, nm, s->V, H, &s->embed, err)) return -1;
    if (s->layout == SP_EAGLE3_DEEPSPEC) s->embed.data = NULL; /* the target's (scaled) embedding; the copy is checked */
    return bind_vocab(s, dir, err);
}

/* ---- the layer -------------------------------------------------------------------------------- */

int sp_e3_ensure_cap(e3_t *s, int rows, sp_err *err) {
    if (rows <= s->cap) return 0;
    int cap = s->cap ? s->cap : 256;
    while (cap < rows) cap *= 2;
    size_t bytes = (size_t)cap * s->layer.d.KVH * s->layer.d.D * sizeof(float);
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

void sp_e3_layer_forward(e3_t *s, const int32_t *tokens, const float *gin, int T, int pos0,
                         const sp_block_tree_rows *tr) {
    size_t H = (size_t)s->H;
    for (int t = 0; t < T; t++) embed_row(s, s->e + (size_t)t * H, tokens[t]);
    if (gin != s->out) memcpy(s->out, gin, sizeof(float) * (size_t)T * H);
    sp_block_seg seg = {.T = T, .pos0 = pos0, .K = s->K, .V = s->Vc, .cap = s->cap};
    if (tr) sp_block_forward_tree_rows(s->pool, &s->layer, s->out, T, &seg, tr, s->e, H, &s->bs);
    else sp_block_forward(s->pool, &s->layer, s->out, T, &seg, 1, s->e, H, &s->bs);
}

void sp_e3_logits_row(e3_t *s, const float *h, float *out) {
    sp_rmsnorm(s->g, h, s->final_norm, 1, s->H, s->layer.d.eps);
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
            sp_rmsnorm(s->tapn, f, s->input_norm, T, mH, s->layer.d.eps);
            f = s->tapn;
        }
        sp_matmul(s->pool, s->out, f, T, &s->fc); /* the states, run by the layer in place */
        sp_e3_layer_forward(s, tokens + i, s->out, T, s->n_ctx + i, NULL);
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
    const sp_draft_constraint *c = d->constraint; /* the engine's grammar: drafts drawn from masked logits */
    for (int j = 1; j <= g; j++) {
        sp_e3_logits_row(s, s->h, s->full); /* target-id space: the mask applies as it is */
        int cm = sp_draft_constraint_apply(c, j - 1, s->full, s->V, err);
        if (cm) {
            rc = cm < 0 ? -1 : 0;
            break;
        }
        int x = draw(s, q ? q + (size_t)(j - 1) * s->V : s->qrow, (uint64_t)s->n_ctx + (uint64_t)j, err);
        if (x < 0 || (s->pen && sp_penalty_push(s->pen, x, err))) {
            rc = -1;
            break;
        }
        pushed += s->pen != NULL;
        if (c && c->accept(c->ctx, x, err)) {
            rc = -1;
            break;
        }
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

/* config.json → s->dc, the layout and its keys (parse_keys), norm_before_fc → *nbf */
static int read_config(e3_t *s, const char *dir, int *nbf, sp_err *err) {
    char path[4096], *text = NULL;
    size_t tn;
    json_t *root = NULL;
    int rc = -1;
    if (sp_path_join(path, sizeof path, dir, "config.json") || sp_read_file(path, &text, &tn, err)) goto done;
    if (sp_config_parse(&s->dc, text, path, err)) goto done;
    root = sp_hf_json_loadb(text, tn, JSON_REJECT_DUPLICATES, path, err);
    if (!root || parse_keys(s, root, path, err) || json_bool(root, "norm_before_fc", nbf, path, err)) goto done;
    s->gemma = s->dc.arch == SP_ARCH_GEMMA4;
    if (s->gemma && s->layout == SP_EAGLE3_SPECFORGE) {
        sp_err_set(err, "%s: a LlamaForCausalLMEagle3 drafter must have model_type llama", path);
        goto done;
    }
    rc = 0;
done:
    json_decref(root);
    free(text);
    return rc;
}

/* The layer's description (docs/EAGLE3.md §2): the [embedding ; state] input, the target family's
 * block (Gemma: four norms, v_norm, k_eq_v, the full-attention head shape, scale 1), one causal
 * cache; and where its tensors' names come from. */
static int describe(e3_t *s, const char *dir, sp_err *err) {
    const sp_config *c = &s->dc;
    int g = s->gemma, kev = g && c->attention_k_eq_v;
    sp_block_desc d = {
        .H = s->H, .NH = c->n_heads, .KVH = kev ? c->n_global_kv_heads : c->n_kv_heads,
        .D = g ? c->global_head_dim : c->head_dim, .I = c->ffn_dim, .post_norms = g, .kv_proj = 1, .v_proj = !kev,
        .qk_norm = s->layout == SP_EAGLE3_DEEPSPEC, .v_norm = g, .act = c->act, .attn = SP_ATTN_CAUSAL,
        .eps = (float)c->rms_eps, .attn_in = SP_ATTN_IN_EMBED_STATE, .norm_residual = s->layer.d.norm_residual,
    };
    if (d.D < 2 || d.D > SP_BLOCK_MAX_HEAD_DIM || d.KVH < 1 || d.NH % d.KVH)
        return sp_err_set(err, "%s: head_dim %d / heads %d / kv heads %d unusable", dir, d.D, d.NH, d.KVH);
    d.attn_scale = g ? 1.0f : 1.0f / sqrtf((float)d.D);
    s->layer.d = d;
    s->softcap = s->layout == SP_EAGLE3_DEEPSPEC && g ? (float)c->final_softcap : 0.0f;
    char nm[160];
    if (s->layout == SP_EAGLE3_DEEPSPEC) s->names = SP_TN_EAGLE3_DEEPSPEC;
    else if (sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECULATORS, c->arch, SP_TN_HIDDEN_NORM, 0, nm, sizeof nm) &&
             sp_st_find(s->st, nm))
        s->names = SP_TN_EAGLE3_SPECULATORS; /* the layer stored as layers.0.* */
    else s->names = SP_TN_EAGLE3_SPECFORGE;
    return 0;
}

/* the RoPE table and the scratch of E3_CHUNK rows; 0, or -1 out of memory */
static int alloc_scratch(e3_t *s) {
    const sp_block_desc *d = &s->layer.d;
    size_t H = (size_t)s->H, R = E3_CHUNK, Dq = (size_t)d->NH * d->D, Dkv = (size_t)d->KVH * d->D, I = (size_t)d->I;
    if (!(s->layer.inv_freq = own(s, sizeof(float) * (size_t)(d->D / 2)))) return -1;
    sp_rope_inv_freq(s->layer.inv_freq, d->D, &s->dc.rope);
    s->bs = (sp_block_scratch){.xn = own(s, sizeof(float) * R * 2 * H), .q = own(s, sizeof(float) * R * Dq),
                               .k = own(s, sizeof(float) * R * Dkv), .v = own(s, sizeof(float) * R * Dkv),
                               .att = own(s, sizeof(float) * R * Dq), .o = own(s, sizeof(float) * R * H),
                               .g = own(s, sizeof(float) * R * I), .u = own(s, sizeof(float) * R * I)};
    s->e = own(s, sizeof(float) * R * H);
    s->g = own(s, sizeof(float) * R * H);
    s->out = own(s, sizeof(float) * R * H);
    s->tapn = own(s, sizeof(float) * R * (size_t)s->m * H);
    s->h = own(s, sizeof(float) * H);
    s->h_last = own(s, sizeof(float) * H);
    s->dl = own(s, sizeof(float) * (size_t)s->Vd);
    s->full = own(s, sizeof(float) * (size_t)s->V);
    s->qrow = own(s, sizeof(float) * (size_t)s->V);
    s->tout = own(s, sizeof(float) * SP_TREE_MAX_NODES * H);
    const sp_block_scratch *b = &s->bs;
    return b->xn && b->q && b->k && b->v && b->att && b->o && b->g && b->u && s->e && s->g && s->out && s->tapn &&
                   s->h && s->h_last && s->dl && s->full && s->qrow && s->tout
               ? 0
               : -1;
}

/* the drafter interface over a loaded s */
static void set_interface(sp_drafter *d, e3_t *s) {
    s->info = (sp_eagle3_info){.layout = s->layout, .n_taps = s->m, .tap_layers = s->taps, .draft_vocab = s->Vd,
                               .d2t = s->d2t};
    d->name = "eagle3";
    d->step_cost = 1; /* one EAGLE-3 layer step per draft */
    d->n_taps = s->m;
    d->tap_layers = s->taps;
    d->provides_q = !s->greedy;
    d->begin = e3_begin;
    d->propose = e3_propose;
    d->commit = e3_commit;
    d->extend = e3_extend;
    d->propose_tree = sp_e3_propose_tree;
    d->tree_accept = sp_e3_tree_accept;
}

sp_drafter *sp_drafter_eagle3(const char *dir, sp_model *target, const sp_sample_params *sample, int max_drafts,
                              sp_err *err) {
    sp_drafter *d = calloc(1, sizeof *d);
    e3_t *s = calloc(1, sizeof *s);
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
    if (read_config(s, dir, &nbf, err) || sp_st_open_dir(&s->st, dir, err) || describe(s, dir, err) ||
        bind(s, dir, nbf, err))
        goto fail;
    if (alloc_scratch(s)) {
        sp_err_set(err, "eagle3: out of memory");
        goto fail;
    }
    if (sp_e3_ensure_cap(s, 256, err)) goto fail;
    s->greedy = sp_sample_is_greedy(sample);
    if (!(s->smp = sp_sampler_create(s->V, sample, err))) goto fail;
    set_interface(d, s);
    return d;
fail:
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
