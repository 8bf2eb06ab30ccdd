/* mlxbun.c — mlx-bun's DSpark v1 and faithful DFlash drafters (mlxbun.h, docs/MLX-BUN-DRAFTERS.md).
 *
 *   faithful: context row i (taps of committed token i, [m·H]):
 *       c_i = RMSNorm(taps_i · W_c, ctx_norm); per layer ℓ: K_ℓ[i] = RMSNorm(c_i, attn_norm_ℓ) · k_ℓ,
 *       V_ℓ[i] = … · v_ℓ (cached: the context rows are never updated by a layer)
 *   v1: one context row ctx_proj(h) + pos_emb[0] that runs through the layers with the block
 *   block: anchor = embed_raw(pending) · tok_proj (+ block_pos[0] | pos_emb[1]), then mask_emb[j]
 *       (+ block_pos[j+1] | pos_emb[j+2]); per layer: pre-norm attention (no mask, no rotary;
 *       queries from the rows being updated, keys / values from [context ; rows]), pre-norm
 *       gelu_tanh FFN; h = RMSNorm(x, out_norm); U = target LM head(h · out_proj) (+ soft-cap)
 *   heads, k = 1..g: e = w1[x_{k-1}]; Z_k = U_k + e · w2 (rnn: s = tanh(s · wH + e + bH), + s · wO);
 *       c_k = σ([h_k ; e] · conf.w + conf.b); k ≥ 2 and c_k < threshold → stop; x_k ~ Z_k (masked by
 *       the engine's constraint, a grammar, when one is set: sp_draft_constraint).
 *
 * The files store matrices [in, out]; they are transposed once at load into the [out, in] layout
 * sp_matmul reads (markov.w1 is used as stored: its rows are gathered per token). */
#include "drafters/mlxbun.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "drafters/kind.h"
#include "formats/hfjson.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "model/model.h"

#define MB_CHUNK 64 /* context rows injected per pass */

/* ---- dspark.json ----------------------------------------------------------------------------- */

int sp_mlxbun_dir(const char *dir) {
    char p[4096];
    if (!dir || sp_path_join(p, sizeof p, dir, "dspark.json") || !sp_file_exists(p)) return 0;
    return sp_path_join(p, sizeof p, dir, "config.json") == 0 && !sp_file_exists(p);
}

static int cfg_int(json_t *o, const char *key, int lo, int hi, int *out, const char *path, sp_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v) return sp_err_set(err, "%s: config.%s missing", path, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return sp_err_set(err, "%s: config.%s must be an integer in %d..%d", path, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int cfg_taps(json_t *cfg, sp_mlxbun_cfg *c, const sp_model *target, const char *path, sp_err *err) {
    json_t *t = json_object_get(cfg, "tapLayers");
    if (!json_is_array(t) || json_array_size(t) < 1 || json_array_size(t) > SP_MLXBUN_MAX_TAPS)
        return sp_err_set(err, "%s: config.tapLayers must be a list of 1..%d layer indices (the faithful variant)", path,
                          SP_MLXBUN_MAX_TAPS);
    c->n_taps = (int)json_array_size(t);
    int L = target ? sp_model_config(target)->n_layers : 1 << 20;
    for (int i = 0; i < c->n_taps; i++) {
        json_t *e = json_array_get(t, (size_t)i);
        if (!json_is_integer(e)) return sp_err_set(err, "%s: config.tapLayers[%d] is not an integer", path, i);
        c->taps[i] = (int)json_integer_value(e);
        if (c->taps[i] < 0 || c->taps[i] > L)
            return sp_err_set(err, "%s: config.tapLayers[%d] = %d outside 0..%d (the target has %d layers; %d is the "
                                   "final norm)", path, i, c->taps[i], L, L, L);
        if (i > 0 && c->taps[i] <= c->taps[i - 1])
            return sp_err_set(err, "%s: config.tapLayers must be strictly increasing (entry %d = %d after %d)", path, i,
                              c->taps[i], c->taps[i - 1]);
    }
    return 0;
}

/* optional seqHead ("markov" | "rnn") and sts {thresholds[γ], ...} */
static int cfg_heads(json_t *cfg, sp_mlxbun_cfg *c, const char *path, sp_err *err) {
    json_t *sh = json_object_get(cfg, "seqHead");
    if (sh && !json_is_null(sh)) {
        const char *s = json_string_value(sh);
        if (!s || (strcmp(s, "markov") && strcmp(s, "rnn")))
            return sp_err_set(err, "%s: config.seqHead must be \"markov\" or \"rnn\"", path);
        c->rnn = !strcmp(s, "rnn");
    }
    json_t *sts = json_object_get(cfg, "sts");
    if (!sts || json_is_null(sts)) return 0;
    json_t *th = json_object_get(sts, "thresholds");
    if (!json_is_object(sts) || !json_is_array(th) || json_array_size(th) < 1 ||
        json_array_size(th) > (size_t)c->gamma)
        return sp_err_set(err, "%s: config.sts.thresholds must be a list of 1..%d probabilities (one per block "
                               "position)", path, c->gamma);
    c->n_sts = (int)json_array_size(th);
    for (int i = 0; i < c->n_sts; i++) {
        json_t *e = json_array_get(th, (size_t)i);
        double v = json_number_value(e);
        if (!json_is_number(e) || !(v >= 0 && v <= 1))
            return sp_err_set(err, "%s: config.sts.thresholds[%d] must be a number in 0..1", path, i);
        c->sts[i] = (float)v;
    }
    return 0;
}

/* param_names, when given: the canonical list of this config's tensors */
static int cfg_names(json_t *names, const sp_mlxbun_cfg *c, const char *path, sp_err *err) {
    if (!names || json_is_null(names)) return 0;
    static char want[SP_MAX_LAYERS * 9 + 16][32];
    int n = sp_mlxbun_param_names(c, want, (int)(sizeof want / sizeof want[0]));
    if (!json_is_array(names) || json_array_size(names) != (size_t)n)
        return sp_err_set(err, "%s: param_names must list the config's %d tensors", path, n);
    for (int i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(names, (size_t)i));
        if (!s || strcmp(s, want[i]))
            return sp_err_set(err, "%s: param_names[%d] is %s%s%s, expected \"%s\"", path, i, s ? "\"" : "",
                              s ? s : "not a string", s ? "\"" : "", want[i]);
    }
    return 0;
}

int sp_mlxbun_cfg_read(const char *dir, const sp_model *target, sp_mlxbun_cfg *c, sp_err *err) {
    char path[4096];
    memset(c, 0, sizeof *c);
    if (sp_path_join(path, sizeof path, dir, "dspark.json")) return sp_err_set(err, "%s: path too long", dir);
    if (!sp_file_exists(path))
        return sp_err_set(err, "%s: no dspark.json there (an mlx-bun drafter is a directory of dspark.json and "
                               "model.safetensors)", dir);
    json_t *root = sp_hf_json_load_file(path, JSON_REJECT_DUPLICATES, err);
    if (!root) return -1;
    int rc = -1;
    const char *kind = json_string_value(json_object_get(root, "kind"));
    json_t *var = json_object_get(root, "variant"), *cfg = json_object_get(root, "config"),
           *dims = json_object_get(root, "dims");
    const char *v = json_string_value(var);
    if (!kind || strcmp(kind, "dspark-drafter")) {
        sp_err_set(err, "%s: \"kind\" must be \"dspark-drafter\"", path);
        goto done;
    }
    if (var && !json_is_null(var) && (!v || (strcmp(v, "dspark") && strcmp(v, "dflash")))) {
        sp_err_set(err, "%s: \"variant\" %s%s%s: expected absent (v1), \"dspark\" or \"dflash\" (faithful)", path,
                   v ? "\"" : "", v ? v : "(not a string)", v ? "\"" : "");
        goto done;
    }
    c->faithful = v != NULL;
    if (!json_is_object(cfg) || !json_is_object(dims)) {
        sp_err_set(err, "%s: \"config\" and \"dims\" must be objects", path);
        goto done;
    }
    if (cfg_int(cfg, "gamma", 1, SP_SPEC_MAX_G, &c->gamma, path, err) ||
        cfg_int(cfg, "dDraft", 1, 1 << 16, &c->d, path, err) ||
        cfg_int(cfg, "nLayers", 1, 256, &c->n_layers, path, err) ||
        cfg_int(cfg, "nHeads", 1, 1 << 12, &c->n_heads, path, err) ||
        cfg_int(cfg, "markovRank", 1, 1 << 16, &c->rank, path, err) ||
        cfg_int(cfg, "ffMult", 1, 64, &c->ff_mult, path, err))
        goto done;
    if (c->d % c->n_heads) {
        sp_err_set(err, "%s: config.dDraft %d is not a multiple of config.nHeads %d", path, c->d, c->n_heads);
        goto done;
    }
    if ((c->faithful && cfg_taps(cfg, c, target, path, err)) || cfg_heads(cfg, c, path, err)) goto done;
    if (!c->faithful && json_object_get(cfg, "tapLayers") && !json_is_null(json_object_get(cfg, "tapLayers"))) {
        sp_err_set(err, "%s: config.tapLayers in a v1 checkpoint (no \"variant\"): v1 reads the final hidden only", path);
        goto done;
    }
    json_t *h = json_object_get(dims, "hiddenSize"), *V = json_object_get(dims, "vocabSize"),
           *e = json_object_get(dims, "eps");
    if (!json_is_integer(h) || !json_is_integer(V) || !json_is_number(e) || !(json_number_value(e) > 0)) {
        sp_err_set(err, "%s: dims must hold integers hiddenSize, vocabSize and a positive eps", path);
        goto done;
    }
    c->hidden = (int)json_integer_value(h);
    c->vocab = (int)json_integer_value(V);
    c->eps = (float)json_number_value(e);
    if (target) {
        const sp_config *tc = sp_model_config(target);
        if (c->hidden != tc->hidden_size || c->vocab != tc->vocab_size) {
            sp_err_set(err, "%s: dims hiddenSize %d / vocabSize %d must equal the target's (%d / %d): a drafter for "
                            "another target?", path, c->hidden, c->vocab, tc->hidden_size, tc->vocab_size);
            goto done;
        }
    }
    if (cfg_names(json_object_get(root, "param_names"), c, path, err)) goto done;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

int sp_mlxbun_param_names(const sp_mlxbun_cfg *c, char (*buf)[32], int cap) {
    static const char *part[9] = {"attn_norm", "q", "k", "v", "o", "ff_norm", "gate", "up", "down"};
    static const char *v1[] = {"ctx_proj", "tok_proj", "mask_emb", "pos_emb", "out_norm", "out_proj",
                               "markov.w1", "markov.w2", "conf.w", "conf.b"};
    static const char *fa[] = {"W_c", "ctx_norm", "tok_proj", "mask_emb", "block_pos", "out_norm", "out_proj",
                               "markov.w1", "markov.w2", "conf.w", "conf.b"};
    static const char *rnn[] = {"rnn.wH", "rnn.bH", "rnn.wO"};
    int n = 0;
    for (int i = 0; i < c->n_layers; i++)
        for (int j = 0; j < 9 && n < cap; j++) snprintf(buf[n++], 32, "bb.%d.%s", i, part[j]);
    const char **tail = c->faithful ? fa : v1;
    int nt = c->faithful ? 11 : 10;
    for (int j = 0; j < nt && n < cap; j++) snprintf(buf[n++], 32, "%s", tail[j]);
    for (int j = 0; c->rnn && j < 3 && n < cap; j++) snprintf(buf[n++], 32, "%s", rnn[j]);
    return n;
}

/* ---- weights ------------------------------------------------------------------------------------ */

typedef struct {
    float *attn_norm, *ff_norm;
    sp_mat q, k, v, o, gate, up, down;
} mb_layer;

typedef struct {
    sp_mlxbun_cfg c;
    int H, V, f;
    st_set *st;
    sp_owner owned;
    mb_layer *layers;
    sp_mat ctx, tok, out, w2, wH, wO; /* ctx: ctx_proj (v1) or W_c (faithful); wH / wO: rnn only */
    float *ctx_norm, *out_norm, *mask_emb, *pos; /* pos: pos_emb [γ+1, d] (v1) or block_pos [γ, d] */
    float *conf_w, conf_b, *bH;
    const float *w1; /* [V, r], as stored */
} mb_w;

/* tensor `name`: f32, of shape [a] (b 0) or [a, b]; NULL with err */
static const float *mb_tensor(const mb_w *w, const char *name, int64_t a, int64_t b, sp_err *err) {
    const st_tensor *t = sp_st_find(w->st, name);
    if (!t) {
        sp_err_set(err, "mlx-bun drafter: missing tensor %s", name);
        return NULL;
    }
    if (t->dtype != SP_DT_F32) {
        sp_err_set(err, "mlx-bun drafter: tensor %s is %s, expected F32", name, sp_st_tensor_dtype_name(t));
        return NULL;
    }
    if (t->ndim != (b ? 2 : 1) || t->shape[0] != a || (b && t->shape[1] != b)) {
        char got[96] = "";
        size_t n = 0;
        for (int i = 0; i < t->ndim && n < sizeof got; i++)
            n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (b) sp_err_set(err, "mlx-bun drafter: tensor %s has shape [%s], expected [%lld, %lld]", name, got,
                          (long long)a, (long long)b);
        else sp_err_set(err, "mlx-bun drafter: tensor %s has shape [%s], expected [%lld]", name, got, (long long)a);
        return NULL;
    }
    return t->data;
}

/* [in, out] stored → an [out, in] f32 matrix for sp_matmul */
static int mb_mat(mb_w *w, const char *name, int in, int out, sp_mat *m, sp_err *err) {
    const float *x = mb_tensor(w, name, in, out, err);
    if (!x) return -1;
    float *y = sp_owner_alloc64(&w->owned, sizeof(float) * (size_t)in * (size_t)out);
    if (!y) return sp_err_set(err, "mlx-bun drafter: out of memory (%s)", name);
    enum { B = 32 }; /* in tiles, so both sides stay in cache */
    for (int i0 = 0; i0 < in; i0 += B)
        for (int o0 = 0; o0 < out; o0 += B)
            for (int i = i0; i < in && i < i0 + B; i++)
                for (int o = o0; o < out && o < o0 + B; o++) y[(size_t)o * in + i] = x[(size_t)i * out + o];
    *m = (sp_mat){.data = y, .dt = SP_DT_F32, .n = out, .k = in};
    return 0;
}

static int mb_vec(mb_w *w, const char *name, int64_t a, int64_t b, float **out, sp_err *err) {
    const float *x = mb_tensor(w, name, a, b, err);
    if (!x) return -1;
    size_t n = (size_t)a * (size_t)(b ? b : 1);
    if (!(*out = sp_owner_calloc(&w->owned, sizeof(float) * n)))
        return sp_err_set(err, "mlx-bun drafter: out of memory (%s)", name);
    memcpy(*out, x, sizeof(float) * n);
    return 0;
}

static void mb_w_free(mb_w *w) {
    if (!w) return;
    sp_owner_free(&w->owned);
    sp_st_close(w->st);
    free(w);
}

static mb_w *mb_w_load(const char *dir, const sp_model *target, sp_err *err) {
    mb_w *w = calloc(1, sizeof *w);
    if (!w) {
        sp_err_set(err, "mlx-bun drafter: out of memory");
        return NULL;
    }
    char path[4096], nm[64];
    sp_mlxbun_cfg *c = &w->c;
    if (sp_mlxbun_cfg_read(dir, target, c, err)) goto fail;
    w->H = c->hidden, w->V = c->vocab, w->f = c->ff_mult * c->d;
    int d = c->d, H = w->H, V = w->V, r = c->rank, f = w->f, g = c->gamma;
    char index[4096]; /* mlx-bun writes one file, or shards named by an index when large */
    if (sp_path_join(path, sizeof path, dir, "model.safetensors") ||
        sp_path_join(index, sizeof index, dir, "model.safetensors.index.json") ||
        (!sp_file_exists(path) && !sp_file_exists(index))) {
        sp_err_set(err, "%s: no model.safetensors (or model.safetensors.index.json) beside dspark.json", dir);
        goto fail;
    }
    if (sp_st_open_dir(&w->st, dir, err)) goto fail;
    if (!(w->layers = sp_owner_calloc(&w->owned, sizeof(mb_layer) * (size_t)c->n_layers))) {
        sp_err_set(err, "mlx-bun drafter: out of memory");
        goto fail;
    }
    for (int i = 0; i < c->n_layers; i++) {
        mb_layer *l = &w->layers[i];
        struct { const char *p; sp_mat *m; int in, out; } mats[7] = {
            {"q", &l->q, d, d}, {"k", &l->k, d, d}, {"v", &l->v, d, d}, {"o", &l->o, d, d},
            {"gate", &l->gate, d, f}, {"up", &l->up, d, f}, {"down", &l->down, f, d}};
        snprintf(nm, sizeof nm, "bb.%d.attn_norm", i);
        if (mb_vec(w, nm, d, 0, &l->attn_norm, err)) goto fail;
        snprintf(nm, sizeof nm, "bb.%d.ff_norm", i);
        if (mb_vec(w, nm, d, 0, &l->ff_norm, err)) goto fail;
        for (int j = 0; j < 7; j++) {
            snprintf(nm, sizeof nm, "bb.%d.%s", i, mats[j].p);
            if (mb_mat(w, nm, mats[j].in, mats[j].out, mats[j].m, err)) goto fail;
        }
    }
    if (c->faithful ? mb_mat(w, "W_c", c->n_taps * H, d, &w->ctx, err) || mb_vec(w, "ctx_norm", d, 0, &w->ctx_norm, err)
                    : mb_mat(w, "ctx_proj", H, d, &w->ctx, err))
        goto fail;
    if (mb_mat(w, "tok_proj", H, d, &w->tok, err) ||
        (g > 1 ? mb_vec(w, "mask_emb", g - 1, d, &w->mask_emb, err) : 0) ||
        mb_vec(w, c->faithful ? "block_pos" : "pos_emb", g + !c->faithful, d, &w->pos, err) ||
        mb_vec(w, "out_norm", d, 0, &w->out_norm, err) || mb_mat(w, "out_proj", d, H, &w->out, err) ||
        !(w->w1 = mb_tensor(w, "markov.w1", V, r, err)) || mb_mat(w, "markov.w2", r, V, &w->w2, err) ||
        mb_vec(w, "conf.w", d + r, 1, &w->conf_w, err))
        goto fail;
    const float *cb = mb_tensor(w, "conf.b", 1, 0, err);
    if (!cb) goto fail;
    w->conf_b = cb[0];
    if (c->rnn && (mb_mat(w, "rnn.wH", r, r, &w->wH, err) || mb_vec(w, "rnn.bH", r, 0, &w->bH, err) ||
                   mb_mat(w, "rnn.wO", r, V, &w->wO, err)))
        goto fail;
    return w;
fail:
    mb_w_free(w);
    return NULL;
}

/* ---- one drafter ------------------------------------------------------------------------------ */

typedef struct {
    const mb_w *w;
    mb_w *own;            /* the weights when this drafter loaded them itself */
    sp_model *target;
    sp_pool *pool;
    int max_drafts;
    float conf_threshold;
    sp_sampler *smp;
    int greedy;
    uint64_t seed;
    sp_penalty *pen;
    int n_pushed;
    int32_t pending;
    int n_last;           /* drafts of the last proposal */
    /* context: v1 the final hidden [H] of the last verified position; faithful per-layer K / V */
    float *hctx;
    int have_ctx;
    float **K, **Vc;      /* [L][cap, d] */
    int n_ctx, cap;
    /* scratch over R = max(γ + 1, MB_CHUNK) rows */
    float *x, *xn, *q, *k, *v, *att, *o, *g, *u, *hout, *y, *U, *Z, *conf, *sc, *e, *s, *bias;
    float *zp;            /* [V]: a Z row with the request's penalties applied */
    int sc_cap;
    sp_owner owned;
} mb_t;

static void mb_destroy(sp_drafter *d) {
    mb_t *s = d ? d->self : NULL;
    if (s) {
        for (int i = 0; s->K && i < s->w->c.n_layers; i++) {
            free(s->K[i]);
            free(s->Vc[i]);
        }
        free(s->K);
        free(s->Vc);
        free(s->sc);
        sp_owner_free(&s->owned);
        sp_sampler_free(s->smp);
        mb_w_free(s->own);
        free(s);
    }
    free(d);
}

static int ensure_cap(mb_t *s, int rows, sp_err *err) {
    if (rows <= s->cap) return 0;
    int cap = s->cap ? s->cap : 256;
    while (cap < rows) cap *= 2;
    size_t bytes = sizeof(float) * (size_t)cap * (size_t)s->w->c.d;
    for (int i = 0; i < s->w->c.n_layers; i++) {
        float *K = realloc(s->K[i], bytes);
        if (K) s->K[i] = K;
        float *V = K ? realloc(s->Vc[i], bytes) : NULL;
        if (V) s->Vc[i] = V;
        if (!K || !V) return sp_err_set(err, "mlx-bun drafter: out of memory for a %d-row context", cap);
    }
    s->cap = cap;
    return 0;
}

/* the attention scores row: context rows + the block */
static int ensure_scores(mb_t *s, int n, sp_err *err) {
    if (n <= s->sc_cap) return 0;
    float *p = realloc(s->sc, sizeof(float) * (size_t)n);
    if (!p) return sp_err_set(err, "mlx-bun drafter: out of memory");
    s->sc = p;
    s->sc_cap = n;
    return 0;
}

/* faithful: absorb R context rows F [R, m·H] */
static int inject(mb_t *s, const float *F, int R, sp_err *err) {
    const mb_w *w = s->w;
    int d = w->c.d, mH = w->c.n_taps * w->H;
    if (R <= 0) return 0;
    if (!F) return sp_err_set(err, "mlx-bun drafter: %d context rows without the target's taps", R);
    if (ensure_cap(s, s->n_ctx + R, err)) return -1;
    for (int i = 0; i < R; i += MB_CHUNK) {
        int T = R - i < MB_CHUNK ? R - i : MB_CHUNK;
        sp_matmul(s->pool, s->x, F + (size_t)i * mH, T, &w->ctx);
        sp_rmsnorm(s->x, s->x, w->ctx_norm, T, d, w->c.eps);
        for (int l = 0; l < w->c.n_layers; l++) {
            sp_rmsnorm(s->xn, s->x, w->layers[l].attn_norm, T, d, w->c.eps);
            float *const kv[2] = {s->K[l] + (size_t)(s->n_ctx + i) * d, s->Vc[l] + (size_t)(s->n_ctx + i) * d};
            const sp_mat *const wkv[2] = {&w->layers[l].k, &w->layers[l].v};
            sp_matmul_multi(s->pool, kv, s->xn, T, wkv, 2);
        }
    }
    s->n_ctx += R;
    return 0;
}

/* softmax attention of T query rows q over nc cached rows (Kc, Vc) then the T rows (kb, vb) */
static void attend(mb_t *s, const float *Kc, const float *Vc, int nc, int T) {
    int d = s->w->c.d, NH = s->w->c.n_heads, D = d / NH, n = nc + T;
    float scale = 1.0f / sqrtf((float)D);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            const float *qq = s->q + (size_t)t * d + (size_t)h * D;
            float mx = -INFINITY, *sc = s->sc;
            for (int j = 0; j < n; j++) {
                const float *kk = j < nc ? Kc + (size_t)j * d + (size_t)h * D : s->k + (size_t)(j - nc) * d + (size_t)h * D;
                float a = 0;
                for (int i = 0; i < D; i++) a += qq[i] * kk[i];
                sc[j] = a * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            double sum = 0;
            for (int j = 0; j < n; j++) sum += sc[j] = expf(sc[j] - mx);
            float inv = (float)(1.0 / sum), *out = s->att + (size_t)t * d + (size_t)h * D;
            memset(out, 0, sizeof(float) * (size_t)D);
            for (int j = 0; j < n; j++) {
                const float *vv = j < nc ? Vc + (size_t)j * d + (size_t)h * D : s->v + (size_t)(j - nc) * d + (size_t)h * D;
                float p = sc[j] * inv;
                for (int i = 0; i < D; i++) out[i] += p * vv[i];
            }
        }
}

/* the backbone over T rows s->x, then out_norm, out_proj and the target's LM head: s->hout
 * [γ, d] and s->U [γ, V] for the γ block rows (v1 drops its context row 0) */
static void block_forward(mb_t *s) {
    const mb_w *w = s->w;
    const sp_mlxbun_cfg *c = &w->c;
    int d = c->d, g = c->gamma, f = w->f, T = g + !c->faithful, H = w->H;
    float *row = s->xn; /* the raw anchor embedding [H], then normalised rows */
    sp_mat_row_f32(sp_model_embed_table(s->target), s->pending, row);
    float *x = s->x;
    if (c->faithful) {
        sp_matmul(s->pool, x, row, 1, &w->tok);
    } else {
        sp_matmul(s->pool, x, s->hctx, 1, &w->ctx);
        sp_matmul(s->pool, x + d, row, 1, &w->tok);
    }
    int a0 = !c->faithful; /* the anchor's row */
    for (int j = 0; j < g - 1; j++) memcpy(x + (size_t)(a0 + 1 + j) * d, w->mask_emb + (size_t)j * d, sizeof(float) * d);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < d; i++) x[(size_t)t * d + i] += w->pos[(size_t)t * d + i];
    for (int l = 0; l < c->n_layers; l++) {
        const mb_layer *L = &w->layers[l];
        sp_rmsnorm(s->xn, x, L->attn_norm, T, d, c->eps);
        float *const qkv[3] = {s->q, s->k, s->v};
        const sp_mat *const wqkv[3] = {&L->q, &L->k, &L->v};
        sp_matmul_multi(s->pool, qkv, s->xn, T, wqkv, 3);
        attend(s, c->faithful ? s->K[l] : NULL, c->faithful ? s->Vc[l] : NULL, c->faithful ? s->n_ctx : 0, T);
        sp_matmul(s->pool, s->o, s->att, T, &L->o);
        for (size_t i = 0; i < (size_t)T * d; i++) x[i] += s->o[i];
        sp_rmsnorm(s->xn, x, L->ff_norm, T, d, c->eps);
        float *const gu[2] = {s->g, s->u};
        const sp_mat *const wgu[2] = {&L->gate, &L->up};
        sp_matmul_multi(s->pool, gu, s->xn, T, wgu, 2);
        sp_gelu_tanh_mul(s->g, s->g, s->u, (size_t)T * f);
        sp_matmul(s->pool, s->o, s->g, T, &L->down);
        for (size_t i = 0; i < (size_t)T * d; i++) x[i] += s->o[i];
    }
    sp_rmsnorm(s->hout, x + (size_t)a0 * d, w->out_norm, g, d, c->eps);
    sp_matmul(s->pool, s->y, s->hout, g, &w->out);
    sp_model_logits(s->target, s->U, s->y, g);
    (void)H;
}

static float sigm(double z) { return (float)(1.0 / (1.0 + exp(-z))); }

/* draw x from Z (q filled when sampling); penalties applied and the draft pushed */
static int draw(mb_t *s, float *Z, float *q, uint64_t pos, sp_err *err) {
    if (s->pen) sp_penalty_apply(s->pen, Z);
    int t;
    if (s->greedy) {
        t = sp_sample_argmax(Z, s->w->V);
    } else {
        if (sp_sampler_probs(s->smp, q, Z, err)) return -1;
        t = sp_sample_probs(q, s->w->V, sp_rng_uniform(s->seed, SP_RNG_STREAM_DRAFT, pos));
        if (t < 0) return sp_err_set(err, "mlx-bun drafter: empty draft distribution");
    }
    if (s->pen && sp_penalty_push(s->pen, t, err)) return -1;
    s->n_pushed += s->pen != NULL;
    return t;
}

static int mb_propose(sp_drafter *dr, int max_g, int32_t *drafts, float *q, sp_err *err) {
    mb_t *s = dr->self;
    const mb_w *w = s->w;
    const sp_mlxbun_cfg *c = &w->c;
    int g = max_g < s->max_drafts ? max_g : s->max_drafts, d = c->d, r = c->rank, V = w->V, n = 0;
    s->n_last = 0;
    if (g <= 0 || (!c->faithful && !s->have_ctx)) return 0; /* v1 needs a verified position */
    if (ensure_scores(s, (c->faithful ? s->n_ctx : 0) + c->gamma + 1, err)) return -1;
    block_forward(s);
    int32_t prev = s->pending;
    if (c->rnn) memset(s->s, 0, sizeof(float) * (size_t)r);
    uint64_t pos = (uint64_t)s->n_ctx; /* the pending token's position */
    const sp_draft_constraint *cons = dr->constraint; /* the engine's grammar: drafts drawn from masked logits */
    for (int k = 1; k <= g; k++) {
        const float *e = w->w1 + (size_t)prev * r;
        float *Z = s->Z + (size_t)(k - 1) * V;
        if (c->rnn) { /* s = tanh(s · wH + e + bH); bias = s · wO */
            sp_matmul(s->pool, s->e, s->s, 1, &w->wH);
            for (int i = 0; i < r; i++) s->s[i] = tanhf(s->e[i] + e[i] + w->bH[i]);
            sp_matmul(s->pool, s->bias, s->s, 1, &w->wO);
        } else {
            sp_matmul(s->pool, s->bias, e, 1, &w->w2);
        }
        const float *U = s->U + (size_t)(k - 1) * V;
        for (int v = 0; v < V; v++) Z[v] = U[v] + s->bias[v];
        const float *h = s->hout + (size_t)(k - 1) * d;
        double z = w->conf_b;
        for (int i = 0; i < d; i++) z += (double)w->conf_w[i] * h[i];
        for (int i = 0; i < r; i++) z += (double)w->conf_w[d + i] * e[i];
        float ck = sigm(z), thr = s->conf_threshold > 0 ? s->conf_threshold
                                  : k - 1 < c->n_sts ? c->sts[k - 1] : 0.0f;
        s->conf[k - 1] = ck;
        if (k > 1 && ck < thr) break; /* decided from c_k, before x_k is drawn */
        float *qk = q ? q + (size_t)(k - 1) * V : s->xn; /* a q row nobody reads: scratch */
        /* Z stays the drafter's logits: penalties and the constraint's mask go on a copy */
        float *Zp = s->pen || cons ? s->zp : Z;
        if (Zp != Z) memcpy(Zp, Z, sizeof(float) * (size_t)V);
        int cm = sp_draft_constraint_apply(cons, k - 1, Zp, V, err);
        if (cm < 0) return -1;
        if (cm) break;
        int x = draw(s, Zp, qk, pos + (uint64_t)k, err);
        if (x < 0 || (cons && cons->accept(cons->ctx, x, err))) return -1;
        drafts[n++] = x;
        prev = x;
    }
    if (s->pen) sp_penalty_pop(s->pen, s->n_pushed);
    s->n_pushed = 0;
    s->n_last = n;
    return n;
}

static int mb_begin(sp_drafter *dr, const int32_t *prompt, int n, const float *taps, const float *hidden,
                    const sp_drafter_ctx *ctx, sp_err *err) {
    mb_t *s = dr->self;
    if (ctx->target != s->target) return sp_err_set(err, "mlx-bun drafter: begun with another target");
    s->seed = ctx->seed;
    s->pen = ctx->penalty;
    s->n_ctx = 0;
    s->n_last = 0;
    s->have_ctx = 0;
    s->pending = prompt[n - 1];
    if (!s->w->c.faithful) {
        if (n >= 2 && hidden) {
            memcpy(s->hctx, hidden + (size_t)(n - 2) * s->w->H, sizeof(float) * (size_t)s->w->H);
            s->have_ctx = 1;
        }
        s->n_ctx = n - 1; /* v1 keeps no rows, only the count (the positions sampling draws at) */
        return 0;
    }
    return inject(s, taps, n - 1, err);
}

static int mb_commit(sp_drafter *dr, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    mb_t *s = dr->self;
    if (n_acc < 0 || n_acc > s->n_last)
        return sp_err_set(err, "mlx-bun drafter: %d drafts accepted of %d proposed", n_acc, s->n_last);
    s->pending = next;
    s->n_last = 0;
    if (!s->w->c.faithful) { /* row n_acc predicted `next` */
        if (!hidden) return sp_err_set(err, "mlx-bun drafter: committed without the target's hidden rows");
        memcpy(s->hctx, hidden + (size_t)n_acc * s->w->H, sizeof(float) * (size_t)s->w->H);
        s->have_ctx = 1;
        s->n_ctx += n_acc + 1;
        return 0;
    }
    return inject(s, taps, n_acc + 1, err);
}

static int mb_extend(sp_drafter *dr, const int32_t *tokens, int n, const float *taps, const float *hidden,
                     sp_err *err) {
    mb_t *s = dr->self;
    if (n < 1 || s->n_last) return sp_err_set(err, "mlx-bun drafter: extend by %d rows with drafts pending", n);
    s->pending = tokens[n - 1];
    if (!s->w->c.faithful) {
        if (!hidden) return sp_err_set(err, "mlx-bun drafter: extended without the target's hidden rows");
        memcpy(s->hctx, hidden + (size_t)(n - 1) * s->w->H, sizeof(float) * (size_t)s->w->H);
        s->have_ctx = 1;
        s->n_ctx += n;
        return 0;
    }
    return inject(s, taps, n, err);
}

/* a drafter over loaded weights w (own: freed with it) */
static sp_drafter *mb_make(const mb_w *w, mb_w *own, sp_model *target, const sp_sample_params *sample, int max_drafts,
                           float conf_threshold, sp_err *err) {
    sp_drafter *dr = calloc(1, sizeof *dr);
    mb_t *s = calloc(1, sizeof *s);
    if (!dr || !s) {
        free(dr);
        free(s);
        mb_w_free(own);
        sp_err_set(err, "mlx-bun drafter: out of memory");
        return NULL;
    }
    dr->self = s;
    dr->destroy = mb_destroy;
    s->w = w;
    s->own = own;
    s->target = target;
    s->pool = sp_model_pool(target);
    const sp_mlxbun_cfg *c = &w->c;
    s->max_drafts = max_drafts > 0 && max_drafts < c->gamma ? max_drafts : c->gamma;
    s->conf_threshold = conf_threshold;
    int d = c->d, g = c->gamma, R = g + 1 > MB_CHUNK ? g + 1 : MB_CHUNK, r = c->rank;
    size_t V = (size_t)w->V, H = (size_t)w->H;
    size_t wide = (size_t)(c->faithful ? (size_t)c->n_taps * H : H); /* the widest input row */
    if (wide < (size_t)d) wide = d;
    s->x = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * (wide > (size_t)d ? wide : (size_t)d));
    s->xn = sp_owner_calloc(&s->owned, sizeof(float) * ((size_t)R * d > V ? (size_t)R * d : V) + sizeof(float) * H);
    s->q = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * d);
    s->k = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * d);
    s->v = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * d);
    s->att = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * d);
    s->o = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * d);
    s->g = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * (size_t)w->f);
    s->zp = sp_owner_calloc(&s->owned, sizeof(float) * V);
    s->u = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)R * (size_t)w->f);
    s->hout = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)g * d);
    s->y = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)g * H);
    s->U = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)g * V);
    s->Z = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)g * V);
    s->conf = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)g);
    s->e = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)r);
    s->s = sp_owner_calloc(&s->owned, sizeof(float) * (size_t)r);
    s->bias = sp_owner_calloc(&s->owned, sizeof(float) * V);
    s->hctx = sp_owner_calloc(&s->owned, sizeof(float) * H);
    s->K = calloc((size_t)c->n_layers, sizeof(float *));
    s->Vc = calloc((size_t)c->n_layers, sizeof(float *));
    if (!s->x || !s->xn || !s->q || !s->k || !s->v || !s->att || !s->o || !s->g || !s->u || !s->hout || !s->y ||
        !s->U || !s->Z || !s->conf || !s->e || !s->s || !s->bias || !s->zp || !s->hctx || !s->K || !s->Vc) {
        sp_err_set(err, "mlx-bun drafter: out of memory");
        mb_destroy(dr);
        return NULL;
    }
    if ((c->faithful && ensure_cap(s, 256, err)) || ensure_scores(s, 256 + g + 1, err)) {
        mb_destroy(dr);
        return NULL;
    }
    s->greedy = sp_sample_is_greedy(sample);
    if (!(s->smp = sp_sampler_create(w->V, sample, err))) {
        mb_destroy(dr);
        return NULL;
    }
    dr->name = c->faithful ? "mlx-dspark (faithful)" : "mlx-dspark (v1)";
    dr->n_taps = c->faithful ? c->n_taps : 0;
    dr->tap_layers = c->faithful ? c->taps : NULL;
    dr->wants_hidden = !c->faithful;
    dr->provides_q = !s->greedy;
    dr->begin = mb_begin;
    dr->propose = mb_propose;
    dr->commit = mb_commit;
    dr->extend = mb_extend;
    return dr;
}

sp_drafter *sp_drafter_mlxbun(const char *dir, sp_model *target, const sp_sample_params *sample, int max_drafts,
                              float conf_threshold, sp_err *err) {
    mb_w *w = mb_w_load(dir, target, err);
    return w ? mb_make(w, w, target, sample, max_drafts, conf_threshold, err) : NULL;
}

int sp_mlxbun_last(const sp_drafter *d, const float **U, const float **Z, const float **c, int *n,
                   const sp_mlxbun_cfg **cfg) {
    if (!d || d->begin != mb_begin) return -1;
    const mb_t *s = d->self;
    *U = s->U;
    *Z = s->Z;
    *c = s->conf;
    *n = s->n_last;
    *cfg = &s->w->c;
    return 0;
}

/* ---- the kind (kind.h): one loaded checkpoint per source, shared by its drafters -------------- */

int sp_mlxbun_kind_open(void **state, const sp_drafter_env *env, sp_err *err) {
    if (env->o->schedule && strcmp(env->o->schedule, "none"))
        return sp_err_set(err, "--schedule %s: the mlx-bun drafters take --conf-threshold (or their config.sts), "
                               "not a verify schedule", env->o->schedule);
    mb_w *w = mb_w_load(env->o->dir, env->target, err);
    if (!w) return -1;
    *state = w;
    return 0;
}

sp_drafter *sp_mlxbun_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err) {
    (void)max_ctx;
    return mb_make(state, NULL, env->target, sample, env->o->draft_max, env->o->conf_threshold, err);
}

void sp_mlxbun_kind_close(void *state) { mb_w_free(state); }
