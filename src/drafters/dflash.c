/* dflash.c — DFlash / DSpark block drafters (see dflash.h; docs/DFLASH.md §3–4, docs/DSPARK.md §3–6, §10).
 *
 *   context rows F [R, m·H] (taps of committed tokens, from the engine):
 *       ctx = RMSNorm_hidden(F · W_fcᵀ);  per layer ℓ: K = RoPE(k_norm(ctx·Wk)), V = ctx·Wv → cache
 *   block [pending, M, …] at positions n .. n+T-1 (n = committed rows):
 *       x = target_embed(block); per layer: the Qwen3 (or Gemma-4) block whose attention sees
 *       every cached context row and the whole block (non-causal); h = RMSNorm_final(x);
 *       U = target LM head(h) (+ Gemma soft-cap)
 *   DSpark heads, left to right over drafts j = 1..g (x_0 = pending):
 *       code = W1[x_{j-1}];  Z_j = U_j + W2·code (vanilla; gated / rnn variants);  c_j = σ(w·[h_j; code] + b)
 *       the verify policy decides from c_1..c_j whether draft j is offered, then x_j ~ q_j = proc(Z_j)
 *
 * Where llama.cpp differs (docs/DFLASH.md §6), this follows the papers / HF code: at temperature > 0
 * drafts and the Markov chain are sampled from q (llama.cpp: argmax always) and verified by the
 * p/q rule; Gemma DSpark logits are soft-capped before the Markov bias (llama.cpp: never capped);
 * the block length follows the checkpoint's block_size (llama.cpp: --spec-draft-n-max, default 3);
 * a DeepSpec DFlash file keeps the anchor-first layout (llama.cpp reads it as z-lab: off by one).
 * Like llama.cpp: context K/V are injected from the taps of every committed row, the threshold
 * compares each c_j (not the product). Missing z-lab target_layer_ids take the docs/DFLASH.md §1 default (llama.cpp:
 * an error).
 *
 * q_norm / k_norm come from the checkpoint's tensors, not from model_type alone (qk_norm_decide):
 * the published drafter code (z-lab DFlashDraftModel, DeepSpec Qwen3DSparkModel) builds the Qwen3
 * block even for a Llama target, and `specula train` / `new-drafter` write such drafters with
 * model_type "qwen3" and the target's rope_theta / rope_scaling (llama3) / rms_norm_eps. Both norms
 * in every layer → used (whatever model_type says); none → not used, an error if model_type is
 * qwen3 / gemma4; in some layers only, or q without k → an error naming the missing tensor.
 * RoPE and eps are the drafter config's (docs/DSPARK.md §3: theta from the target).
 *
 * Not here: sliding-window draft layers, the llama.cpp "bonus anchor" layout, reduced vocabularies. */
#include "drafters/dflash.h"
#include "drafters/dflash_internal.h"
#include "drafters/kind.h"
#include "drafters/weights.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/prof.h"
#include "formats/hfjson.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "formats/tensor_names.h"
#include "model/block.h"
#include "model/model.h"
#include "decode/spec.h"

sp_dflash_opts sp_dflash_opts_default(void) {
    sp_dflash_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

/* ---- loading -------------------------------------------------------------------------------- */

static void *own(df_t *s, size_t bytes) { return sp_owner_calloc(&s->owned, bytes); }

static int get_mat(df_t *s, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    if (sp_drafter_weight_mat(s->st, name, n, k, out, err)) return -1;
    out->bf16_dot = sp_model_bf16_dot(s->target); /* the target's numerics */
    return 0;
}

static int get_vec(df_t *s, const char *name, int n, float **out, sp_err *err) {
    return sp_drafter_weight_vec(s->st, &s->owned, name, n, out, err);
}

#define QK_NORM(i, j) sp_tensor_hf_name(s->dc.arch, (j) ? SP_TN_K_NORM : SP_TN_Q_NORM, i, nm, sizeof nm)

/* the checkpoint's tensor readers as sp_block_bind calls them */
static int bind_mat_cb(void *s, const char *name, int n, int k, sp_mat *out, sp_err *err) {
    return get_mat(s, name, n, k, out, err);
}

static int bind_vec_cb(void *s, const char *name, int n, float **out, sp_err *err) {
    return get_vec(s, name, n, out, err);
}

static int bind_scalar_cb(void *s, const char *name, float *out, sp_err *err) {
    float *sc;
    if (!sp_st_find(((df_t *)s)->st, name)) return 1;
    if (get_vec(s, name, 1, &sc, err)) return -1;
    *out = sc[0];
    return 0;
}

static int bind_layer(df_t *s, int i, sp_err *err) {
    const sp_config *c = &s->dc;
    const sp_layer_config *lc = &c->layers[i];
    sp_block_layer *l = &s->layers[i].b;
    if (lc->sliding)
        return sp_err_set(err, "drafter layer %d: sliding-window draft layers are not supported", i);
    l->d = sp_block_describe(c, i, SP_ATTN_BLOCK);
    l->d.kv_proj = 1;
    l->d.qk_norm = s->qk_norm;
    sp_block_binder b = {s, "", bind_mat_cb, bind_vec_cb, bind_scalar_cb};
    if (sp_block_bind(l, c->arch, i, &b, err)) return -1;
    int D = l->d.D;
    if (!(l->inv_freq = own(s, sizeof(float) * (size_t)(D / 2)))) return sp_err_set(err, "out of memory");
    sp_rope_inv_freq(l->inv_freq, D, &c->rope);
    if (D > SP_BLOCK_MAX_HEAD_DIM)
        return sp_err_set(err, "drafter layer %d: head_dim %d above %d", i, D, SP_BLOCK_MAX_HEAD_DIM);
    return 0;
}

/* Whether the draft layers carry q_norm / k_norm, from the checkpoint's tensors, not from
 * model_type alone: the published drafter code builds the Qwen3 block (with both norms) even for
 * Llama targets (docs/DFLASH.md §2, docs/DSPARK.md §2), and a config may still say "llama". Both norms in every
 * layer → used; none → not used, unless the config's model_type is one whose block has them
 * (qwen3, gemma4): then the first one is reported missing; any other mix (some layers only, q
 * without k or k without q) is an error naming the first missing tensor. */
static int qk_norm_decide(df_t *s, const char *dir, sp_err *err) {
    char nm[160];
    int n_found = 0;
    for (int i = 0; i < s->L; i++)
        for (int j = 0; j < 2; j++)
            n_found += sp_st_find(s->st, QK_NORM(i, j)) != NULL;
    if (n_found == 0 && !s->dc.qk_norm) {
        s->qk_norm = 0;
        return 0;
    }
    s->qk_norm = 1;
    if (n_found == 2 * s->L) return 0;
    char present[160] = "";
    for (int i = 0; i < s->L && !present[0]; i++)
        for (int j = 0; j < 2 && !present[0]; j++)
            if (sp_st_find(s->st, QK_NORM(i, j)))
                snprintf(present, sizeof present, "%s", nm);
    for (int i = 0; i < s->L; i++)
        for (int j = 0; j < 2; j++) {
            if (sp_st_find(s->st, QK_NORM(i, j))) continue;
            if (!present[0])
                return sp_err_set(err, "%s: missing tensor %s (config model_type %s has q_norm / k_norm in every "
                                       "layer)", dir, nm, sp_arch_name(s->dc.arch));
            return sp_err_set(err, "%s: missing tensor %s while %s is present (q_norm / k_norm must be in every "
                                   "draft layer, both, or in none)", dir, nm, present);
        }
    return 0; /* not reached: n_found < 2L means one is missing */
}

static int json_get_int(json_t *o, const char *key, int *out, const char *what, sp_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 1; /* absent */
    if (!json_is_integer(v)) return sp_err_set(err, "%s: key \"%s\" must be an integer", what, key), -1;
    *out = (int)json_integer_value(v);
    return 0;
}

/* z-lab or DeepSpec, by the identity the dflash and dspark kinds detect (dflash_kind.c) */
static int parse_identity(df_t *s, json_t *root, const char *what, sp_err *err) {
    sp_drafter_ident id = {json_string_value(json_object_get(root, "model_type")),
                           json_string_value(json_array_get(json_object_get(root, "architectures"), 0))};
    if (!id.arch) return sp_err_set(err, "%s: missing \"architectures\" (expected DFlashDraftModel, Qwen3DSparkModel or "
                                      "Gemma4DSparkModel)", what);
    if (sp_dflash_kind_detect(&id)) s->kind = SP_DFLASH_ZLAB;
    else if (sp_dspark_kind_detect(&id)) s->kind = SP_DFLASH_DSPARK;
    else return sp_err_set(err, "%s: architectures[0] \"%s\" is not a DFlash / DSpark drafter (DFlashDraftModel, "
                                "Qwen3DSparkModel, Gemma4DSparkModel)", what, id.arch);
    return 0;
}

/* a DeepSpec drafter names its target's family: Gemma4DSparkModel reads a Gemma-4 target's taps
 * (checked after the depth, whose message is the more telling one) */
static int check_family(const df_t *s, json_t *root, const char *what, sp_err *err) {
    const char *arch = json_string_value(json_array_get(json_object_get(root, "architectures"), 0));
    int gemma_drafter = arch && !strcmp(arch, "Gemma4DSparkModel");
    int gemma_target = sp_model_config(s->target)->arch == SP_ARCH_GEMMA4;
    if (s->kind == SP_DFLASH_DSPARK && gemma_drafter != gemma_target)
        return sp_err_set(err, "%s: a %s drafter is made for a %s target, and this target is %s (drafter for another "
                               "target?)", what, arch, gemma_drafter ? "Gemma-4" : "Qwen3 / Llama",
                          sp_arch_name(sp_model_config(s->target)->arch));
    return 0;
}

/* mask token, block size, and the target depth the drafter was made for */
static int parse_block(df_t *s, json_t *root, json_t *dfc, const char *what, sp_err *err) {
    const sp_config *tc = sp_model_config(s->target);
    int rc;
    /* mask token */
    rc = dfc ? json_get_int(dfc, "mask_token_id", &s->mask_id, what, err) : 1;
    if (rc == 1) rc = json_get_int(root, "mask_token_id", &s->mask_id, what, err);
    if (rc < 0) return -1;
    if (rc == 1) return sp_err_set(err, "%s: missing \"mask_token_id\"%s", what,
                                   s->kind == SP_DFLASH_ZLAB ? " (dflash_config.mask_token_id)" : "");
    if (s->mask_id < 0 || s->mask_id >= s->V)
        return sp_err_set(err, "%s: mask_token_id %d outside the vocabulary 0..%d", what, s->mask_id, s->V - 1);
    /* block size */
    rc = dfc ? json_get_int(dfc, "block_size", &s->block_size, what, err) : 1;
    if (rc == 1) rc = json_get_int(root, "block_size", &s->block_size, what, err);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (s->kind == SP_DFLASH_DSPARK) return sp_err_set(err, "%s: missing \"block_size\"", what);
        s->block_size = 16;
    }
    int min_b = s->kind == SP_DFLASH_ZLAB ? 2 : 1;
    if (s->block_size < min_b || s->block_size > SP_SPEC_MAX_G + 1)
        return sp_err_set(err, "%s: block_size %d out of range %d..%d", what, s->block_size, min_b, SP_SPEC_MAX_G + 1);
    /* num_target_layers must be the target's */
    int ntl = 0;
    if ((rc = json_get_int(root, "num_target_layers", &ntl, what, err)) < 0) return -1;
    if (rc == 0 && ntl != tc->n_layers)
        return sp_err_set(err, "%s: num_target_layers %d but the target has %d layers (drafter for another target?)",
                          what, ntl, tc->n_layers);
    return 0;
}

/* the target layers tapped (target_layer_ids; z-lab's default rule when absent) */
static int parse_taps(df_t *s, json_t *root, json_t *dfc, const char *what, sp_err *err) {
    const sp_config *tc = sp_model_config(s->target);
    json_t *ids = dfc ? json_object_get(dfc, "target_layer_ids") : NULL;
    if (!ids) ids = json_object_get(root, "target_layer_ids");
    if (!ids || json_is_null(ids)) {
        if (s->kind == SP_DFLASH_DSPARK) return sp_err_set(err, "%s: missing \"target_layer_ids\"", what);
        /* z-lab default (docs/DFLASH.md §1) */
        int N = tc->n_layers, Ld = s->dc.n_layers;
        s->m = Ld;
        if (Ld == 1) s->taps[0] = N / 2;
        else
            for (int i = 0; i < Ld; i++) {
                double x = 1 + i * (double)(N - 4) / (Ld - 1), r = floor(x + 0.5);
                if (r - x == 0.5 && fmod(r, 2.0) != 0) r -= 1;
                s->taps[i] = (int)r;
            }
    } else {
        if (!json_is_array(ids) || json_array_size(ids) < 1 || json_array_size(ids) > SP_MAX_LAYERS)
            return sp_err_set(err, "%s: \"target_layer_ids\" must be a non-empty list of layer indices", what);
        s->m = (int)json_array_size(ids);
        for (int i = 0; i < s->m; i++) {
            json_t *e = json_array_get(ids, (size_t)i);
            if (!json_is_integer(e)) return sp_err_set(err, "%s: target_layer_ids[%d] is not an integer", what, i);
            s->taps[i] = (int)json_integer_value(e);
        }
    }
    for (int i = 0; i < s->m; i++) {
        if (s->taps[i] < 0 || s->taps[i] >= tc->n_layers - 1)
            return sp_err_set(err, "%s: target_layer_ids[%d] = %d outside 0..%d (the target has %d layers; the last "
                                   "one and -1 cannot be tapped)", what, i, s->taps[i], tc->n_layers - 2, tc->n_layers);
        if (i > 0 && s->taps[i] <= s->taps[i - 1])
            return sp_err_set(err, "%s: target_layer_ids must be strictly increasing (entry %d = %d after %d)", what, i,
                              s->taps[i], s->taps[i - 1]);
    }
    return 0;
}

/* DSpark heads: declared by the config, confirmed by the tensors */
static int parse_heads(df_t *s, json_t *root, const char *what, sp_err *err) {
    int rc, rank = 0;
    if ((rc = json_get_int(root, "markov_rank", &rank, what, err)) < 0) return -1;
    if (rank < 0) return sp_err_set(err, "%s: markov_rank %d must be >= 0", what, rank);
    s->r = rank;
    const char *mt = json_string_value(json_object_get(root, "markov_head_type"));
    if (json_object_get(root, "markov_head_type") && !json_is_null(json_object_get(root, "markov_head_type")) && !mt)
        return sp_err_set(err, "%s: \"markov_head_type\" must be a string", what);
    if (rank == 0) s->mtype = MARKOV_NONE;
    else if (!mt || !strcmp(mt, "vanilla")) s->mtype = MARKOV_VANILLA;
    else if (!strcmp(mt, "gated")) s->mtype = MARKOV_GATED;
    else if (!strcmp(mt, "rnn")) s->mtype = MARKOV_RNN;
    else return sp_err_set(err, "%s: markov_head_type \"%s\" (expected vanilla, gated or rnn)", what, mt);
    json_t *ec = json_object_get(root, "enable_confidence_head");
    json_t *cm = json_object_get(root, "confidence_head_with_markov");
    if ((ec && !json_is_boolean(ec) && !json_is_null(ec)) || (cm && !json_is_boolean(cm) && !json_is_null(cm)))
        return sp_err_set(err, "%s: enable_confidence_head / confidence_head_with_markov must be true or false", what);
    s->conf = json_is_true(ec);
    s->conf_markov = cm ? json_is_true(cm) : 1;
    if (s->conf_markov && rank == 0) s->conf_markov = 0;
    return 0;
}

/* the drafter-specific keys of config.json (docs/DFLASH.md §1, docs/DSPARK.md §1) */
static int parse_keys(df_t *s, json_t *root, const char *what, sp_err *err) {
    if (parse_identity(s, root, what, err)) return -1;
    json_t *dfc = json_object_get(root, "dflash_config");
    if (dfc && !json_is_object(dfc)) return sp_err_set(err, "%s: \"dflash_config\" must be an object", what);
    if (parse_block(s, root, dfc, what, err) || check_family(s, root, what, err) || parse_taps(s, root, dfc, what, err))
        return -1;
    return s->kind == SP_DFLASH_ZLAB ? 0 : parse_heads(s, root, what, err);
}

static int bind_heads(df_t *s, sp_err *err) {
    int H = s->H, V = s->V, r = s->r;
    char nm[160];
    if (get_mat(s, "fc.weight", H, s->m * H, &s->fc, err) ||
        get_vec(s, "hidden_norm.weight", H, &s->hidden_norm, err) ||
        get_vec(s, "norm.weight", H, &s->final_norm, err))
        return -1;
    if (s->kind == SP_DFLASH_DSPARK) { /* the published copies of the target's tables: shape only */
        const st_tensor *t;
        int64_t shape[2] = {V, H};
        for (int i = 0; i < 2; i++) {
            const char *n = i ? "lm_head.weight" : "embed_tokens.weight";
            if (sp_st_find(s->st, n) && sp_st_get(s->st, n, SP_DT_UNKNOWN, 2, shape, &t, err)) return -1;
        }
    }
    int has_w1 = sp_st_find(s->st, "markov_head.markov_w1.weight") != NULL;
    if (s->kind == SP_DFLASH_ZLAB && has_w1)
        return sp_err_set(err, "DFlashDraftModel checkpoint has markov_head tensors: is it a DSpark drafter?");
    if (s->mtype != MARKOV_NONE) {
        const st_tensor *t;
        int64_t shape[2] = {V, r};
        if (sp_st_get(s->st, "markov_head.markov_w1.weight", SP_DT_UNKNOWN, 2, shape, &t, err)) return -1;
        s->w1 = t;
        if (get_mat(s, "markov_head.markov_w2.weight", V, r, &s->w2, err)) return -1;
        if (s->mtype == MARKOV_GATED && (get_mat(s, "markov_head.gate_proj.weight", r, H + r, &s->gate_w, err) ||
                                         get_vec(s, "markov_head.gate_proj.bias", r, &s->gate_b, err)))
            return -1;
        if (s->mtype == MARKOV_RNN &&
            (get_mat(s, "markov_head.joint_proj.weight", 3 * r, 2 * r + H, &s->joint_w, err) ||
             get_vec(s, "markov_head.joint_proj.bias", 3 * r, &s->joint_b, err)))
            return -1;
    } else if (has_w1) {
        return sp_err_set(err, "tensor markov_head.markov_w1.weight present but config markov_rank is 0 / missing");
    }
    if (s->conf) {
        int w = H + (s->conf_markov ? r : 0);
        const st_tensor *t;
        int64_t shape[2] = {1, w}, one[1] = {1};
        if (sp_st_get(s->st, "confidence_head.proj.weight", SP_DT_UNKNOWN, 2, shape, &t, err)) return -1;
        if (!(s->conf_w = own(s, sizeof(float) * (size_t)w))) return sp_err_set(err, "out of memory");
        sp_to_f32(s->conf_w, t->data, t->dtype, (size_t)w);
        if (sp_st_get(s->st, "confidence_head.proj.bias", SP_DT_UNKNOWN, 1, one, &t, err)) return -1;
        sp_to_f32(&s->conf_b, t->data, t->dtype, 1);
    }
    (void)nm;
    return 0;
}

/* sts.json beside the drafter: {"temperatures": [T_1 .. T_B]} (docs/DSPARK.md §9) */
static int load_sts(df_t *s, const char *dir, sp_err *err) {
    char path[4096], *text = NULL;
    size_t n;
    s->n_sts = 0;
    if (s->o.no_sts || sp_path_join(path, sizeof path, dir, "sts.json") || !sp_file_exists(path)) return 0;
    if (sp_read_file(path, &text, &n, err)) return -1;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    free(text);
    json_t *t = json_object_get(root, "temperatures");
    int rc = 0;
    if (!json_is_array(t) || json_array_size(t) < 1 || json_array_size(t) > SP_SPS_MAX) {
        rc = sp_err_set(err, "%s: expected {\"temperatures\": [1..%d positive numbers]}", path, SP_SPS_MAX);
    } else {
        for (size_t i = 0; i < json_array_size(t) && !rc; i++) {
            json_t *e = json_array_get(t, i);
            double v = json_number_value(e);
            if (!json_is_number(e) || !(v > 0)) rc = sp_err_set(err, "%s: temperatures[%zu] must be > 0", path, i);
            s->sts[i] = (float)v;
        }
        if (!rc) s->n_sts = (int)json_array_size(t);
    }
    json_decref(root);
    return rc;
}

_Static_assert(SP_SAMPCAL_MAX_B >= SP_SPEC_MAX_G, "a draft temperature for every draft position");

/* draft_temps.json beside the drafter (decode/sampcal.h) */
static int load_draft_temps(df_t *s, const char *dir, sp_err *err) {
    char path[4096];
    memset(&s->cal, 0, sizeof s->cal);
    if (s->o.no_draft_temps || sp_path_join(path, sizeof path, dir, "draft_temps.json") || !sp_file_exists(path))
        return 0;
    return sp_sampcal_read(&s->cal, path, err);
}

int sp_df_sampling_setup(df_t *s, const sp_sample_params *sample, sp_err *err) {
    s->greedy = sp_sample_is_greedy(sample);
    if (!(s->smp = sp_sampler_create(s->V, sample, err))) return -1;
    if (s->greedy) return 0;
    sp_sampcal_draft_temps(s->cal.n_t ? &s->cal : NULL, sample->temperature, SP_SAMPCAL_MAX_B, s->draft_t);
    return sp_sampler_set_temperature(s->smp, s->draft_t[0], err);
}

/* ---- forward pieces --------------------------------------------------------------------------- */

/* layer li as the block executor sees it: the drafter's cache, rows from pos0 */
static sp_block_seg layer_seg(const df_t *s, const df_layer *l, int T, int pos0) {
    return (sp_block_seg){T, pos0, l->K, l->V, s->cap, 0, NULL, NULL, NULL};
}

static sp_block_scratch scratch_of(const df_t *s) {
    return (sp_block_scratch){.xn = s->xn, .q = s->q, .k = s->k, .v = s->v,
                              .att = s->att, .o = s->o2, .g = s->g, .u = s->u};
}

/* K/V of T rows xn (already normalized) at positions pos0.. into layer l's cache rows pos0.. */
static void write_kv(df_t *s, df_layer *l, const float *xn, int T, int pos0) {
    sp_block_seg seg = layer_seg(s, l, T, pos0);
    sp_block_scratch scr = scratch_of(s);
    sp_block_kv_write(s->pool, &l->b, xn, T, &seg, 1, &scr);
}

int sp_df_ensure_cap(df_t *s, int rows, sp_err *err) {
    if (rows <= s->cap) return 0;
    int cap = s->cap ? s->cap : 256;
    while (cap < rows) cap *= 2;
    for (int i = 0; i < s->L; i++) {
        df_layer *l = &s->layers[i];
        size_t bytes = (size_t)cap * l->b.d.KVH * l->b.d.D * sizeof(float);
        float *K = realloc(l->K, bytes);
        if (K) l->K = K;
        float *V = K ? realloc(l->V, bytes) : NULL;
        if (V) l->V = V;
        if (!K || !V) return sp_err_set(err, "dflash: out of memory for a %d-row draft context", cap);
    }
    s->cap = cap;
    return 0;
}

/* Absorb R context rows F [R, m·H] (taps of committed tokens) at positions n_ctx.. */
static int inject(df_t *s, const float *F, int R, sp_err *err) {
    if (R <= 0) return 0;
    if (sp_df_ensure_cap(s, s->n_ctx + R + s->max_drafts + 1, err)) return -1;
    int H = s->H, prof = sp_prof_enter(SP_PROF_CTX_KV);
    if (s->o.keep_taps) {
        size_t w = (size_t)s->m * H;
        if (s->n_kept + R > s->cap_kept) {
            int cap = s->cap_kept ? s->cap_kept : 256;
            while (cap < s->n_kept + R) cap *= 2;
            float *k = realloc(s->kept, (size_t)cap * w * sizeof(float));
            if (!k) {
                sp_prof_leave(prof);
                return sp_err_set(err, "dflash: out of memory");
            }
            s->kept = k;
            s->cap_kept = cap;
        }
        memcpy(s->kept + (size_t)s->n_kept * w, F, (size_t)R * w * sizeof(float));
        s->n_kept += R;
    }
    for (int i = 0; i < R; i += CTX_CHUNK) {
        int T = R - i < CTX_CHUNK ? R - i : CTX_CHUNK;
        sp_matmul(s->pool, s->x, F + (size_t)i * s->m * H, T, &s->fc);
        sp_rmsnorm(s->x, s->x, s->hidden_norm, T, H, (float)s->dc.rms_eps);
        for (int li = 0; li < s->L; li++) write_kv(s, &s->layers[li], s->x, T, s->n_ctx + i);
    }
    sp_prof_leave(prof);
    s->n_ctx += R;
    return 0;
}

/* The block forward: tokens[T] at positions n_ctx.. → s->hid [T, H] and s->logits [T, V]. The
 * block's K/V rows land after the context and are dropped by not advancing n_ctx; every block
 * query sees the context 0..n_ctx-1 and the whole block (docs/DFLASH.md §3). */
static void block_forward(df_t *s, const int32_t *tokens, int T) {
    int H = s->H;
    sp_block_scratch scr = scratch_of(s);
    for (int t = 0; t < T; t++) sp_model_embed(s->target, s->x + (size_t)t * H, tokens[t]);
    for (int li = 0; li < s->L; li++) {
        sp_block_seg seg = layer_seg(s, &s->layers[li], T, s->n_ctx);
        sp_block_forward(s->pool, &s->layers[li].b, s->x, T, &seg, 1, NULL, 0, &scr);
    }
    sp_rmsnorm(s->hid, s->x, s->final_norm, T, H, (float)s->dc.rms_eps);
    sp_model_logits(s->target, s->logits, s->hid, T); /* the target's LM head (+ soft-cap) */
}

static float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* DSpark heads for draft j from slot row h [H] and previous token: Z (in place on U [V]) and the
 * raw confidence logit (docs/DSPARK.md §4–5). */
static float heads(df_t *s, float *U, const float *h, int32_t prev) {
    int H = s->H, r = s->r;
    float *code = s->code, *vec = s->vec; /* [r], [2r + H] */
    if (s->mtype != MARKOV_NONE) {
        sp_to_f32(code, (const char *)s->w1->data + (size_t)prev * r * sp_dtype_size(s->w1->dtype), s->w1->dtype,
                  (size_t)r);
        if (s->n_bc) { /* vanilla: the cached bias is the same sp_matmul result, bit for bit */
            int slot = (int)((uint32_t)prev % (uint32_t)s->n_bc);
            float *b = s->bc + (size_t)slot * s->V;
            if (s->bc_tag[slot] != prev) {
                sp_matmul(s->pool, b, code, 1, &s->w2);
                s->bc_tag[slot] = prev;
            }
            for (int v = 0; v < s->V; v++) U[v] += b[v];
            goto conf;
        }
        float *mix = s->z; /* [r] or [3r] */
        if (s->mtype == MARKOV_VANILLA) {
            memcpy(mix, code, sizeof(float) * (size_t)r);
        } else if (s->mtype == MARKOV_GATED) { /* gate = σ(W_g·[h; code] + b) */
            memcpy(vec, h, sizeof(float) * (size_t)H);
            memcpy(vec + H, code, sizeof(float) * (size_t)r);
            sp_matmul(s->pool, mix, vec, 1, &s->gate_w);
            for (int i = 0; i < r; i++) mix[i] = sigmoidf(mix[i] + s->gate_b[i]) * code[i];
        } else { /* rnn: z = [s; code; h] → [g|c|o]; s = σ(g)s + (1-σ(g))tanh(c); mix = tanh(o) */
            memcpy(vec, s->state, sizeof(float) * (size_t)r);
            memcpy(vec + r, code, sizeof(float) * (size_t)r);
            memcpy(vec + 2 * r, h, sizeof(float) * (size_t)H);
            sp_matmul(s->pool, mix, vec, 1, &s->joint_w);
            for (int i = 0; i < r; i++) {
                float g = sigmoidf(mix[i] + s->joint_b[i]), cc = tanhf(mix[r + i] + s->joint_b[r + i]);
                s->state[i] = g * s->state[i] + (1 - g) * cc;
                mix[i] = tanhf(mix[2 * r + i] + s->joint_b[2 * r + i]);
            }
        }
        sp_matmul(s->pool, s->bias, mix, 1, &s->w2); /* bias [V] = W2 · mix */
        for (int v = 0; v < s->V; v++) U[v] += s->bias[v];
    }
conf:
    if (!s->conf) return INFINITY;
    double acc = s->conf_b;
    for (int i = 0; i < H; i++) acc += (double)s->conf_w[i] * h[i];
    if (s->conf_markov)
        for (int i = 0; i < r; i++) acc += (double)s->conf_w[H + i] * code[i];
    return (float)acc;
}

/* ---- the drafter interface --------------------------------------------------------------------- */

static int df_begin(sp_drafter *d, const int32_t *prompt, int n, const float *taps, const float *hidden,
                    const sp_drafter_ctx *ctx, sp_err *err) {
    df_t *s = d->self;
    if (ctx->target != s->target) return sp_err_set(err, "dflash: begun with another target than it was loaded for");
    s->seed = ctx->seed;
    s->pen = ctx->penalty;
    s->n_ctx = 0;
    s->n_kept = 0;
    s->n_last = 0;
    s->pending = prompt[n - 1];
    return inject(s, taps, n - 1, err);
}

/* draw draft x from logits Z (q row filled when sampling); with repetition penalties Z is
 * penalised for the sequence so far and x pushed onto it (propose pops the pushes) */
static int draw(df_t *s, float *Z, float *q, int j, uint64_t pos, sp_err *err) {
    if (s->pen) sp_penalty_apply(s->pen, Z);
    int t;
    if (s->greedy) {
        t = sp_sample_argmax(Z, s->V);
    } else {
        if (sp_sampler_set_temperature(s->smp, s->draft_t[j], err) || sp_sampler_probs(s->smp, q, Z, err)) return -1;
        t = sp_sample_probs(q, s->V, sp_rng_uniform(s->seed, SP_RNG_STREAM_DRAFT, pos));
        if (t < 0) return sp_err_set(err, "dflash: empty draft distribution");
    }
    if (s->pen && sp_penalty_push(s->pen, t, err)) return -1;
    s->n_pushed += s->pen != NULL;
    return t;
}

int sp_df_block_prepare(df_t *s, int max_g, int32_t *blk, int *g_out) {
    int g = max_g < s->max_drafts ? max_g : s->max_drafts;
    s->n_last = 0;
    *g_out = 0;
    if (g <= 0) return 0;
    int zlab = s->kind == SP_DFLASH_ZLAB, retro = !zlab && s->conf && s->o.policy == SP_VERIFY_RETRO;
    if (retro) g = s->max_drafts; /* the retrospective search sees the whole block, then truncates */
    int T = zlab ? g + 1 : g;
    blk[0] = s->pending;
    for (int t = 1; t < T; t++) blk[t] = s->mask_id;
    *g_out = g;
    return T;
}

int sp_df_block_drafts(df_t *s, int max_g, int g, int32_t *drafts, float *q, const sp_draft_constraint *c, sp_err *err) {
    int V = s->V, H = s->H, prof;
    int zlab = s->kind == SP_DFLASH_ZLAB, retro = !zlab && s->conf && s->o.policy == SP_VERIFY_RETRO;
    double t1 = sp_time_ms();
    s->info.proposals++;
    float *qrow = s->qrow; /* scratch q row when the engine wants none */
    uint64_t pos = (uint64_t)s->n_ctx; /* position of pending */
    int n = 0;
    if (zlab) { /* slot t predicts the token at its own position (docs/DFLASH.md §4) */
        for (int t = 1; t <= g; t++) {
            float *qt = q ? q + (size_t)(t - 1) * V : qrow;
            int cm = sp_draft_constraint_apply(c, t - 1, s->logits + (size_t)t * V, V, err);
            if (cm < 0) return -1;
            if (cm) break;
            prof = sp_prof_enter(SP_PROF_SAMPLE);
            int x = draw(s, s->logits + (size_t)t * V, qt, t - 1, pos + (uint64_t)t, err);
            sp_prof_leave(prof);
            if (x < 0 || (c && c->accept(c->ctx, x, err))) return -1;
            drafts[n++] = x;
        }
    } else { /* slot j-1 predicts draft j; heads left to right (docs/DSPARK.md §4–6, §10) */
        sp_sched sch;
        sp_sched_begin(&sch, &s->sps);
        int32_t prev = s->pending;
        double cs[SP_SPEC_MAX_G + 1];
        if (s->mtype == MARKOV_RNN) memset(s->state, 0, sizeof(float) * (size_t)s->r);
        for (int j = 1; j <= g; j++) {
            float *Z = s->logits + (size_t)(j - 1) * V;
            prof = sp_prof_enter(SP_PROF_HEADS);
            float zc = heads(s, Z, s->hid + (size_t)(j - 1) * H, prev);
            sp_prof_leave(prof);
            if (s->conf) {
                float Tj = s->n_sts ? s->sts[j - 1 < s->n_sts ? j - 1 : s->n_sts - 1] : 1.0f;
                double c = sigmoidf(zc / Tj);
                s->z_last[j - 1] = zc;
                s->info.conf_sum += c;
                s->info.conf_n++;
                cs[j - 1] = c;
                /* decisions from c_1..c_j only: taken before x_j is drawn */
                if (s->o.conf_threshold > 0 && c < s->o.conf_threshold) break;
                if (s->o.policy == SP_VERIFY_SCHEDULE && !sp_sched_admit(&sch, c)) break;
            }
            float *qt = q && j <= max_g ? q + (size_t)(j - 1) * V : qrow;
            int cm = c ? (j <= max_g ? sp_draft_constraint_apply(c, j - 1, Z, V, err) : 1) : 0;
            if (cm < 0) return -1;
            if (cm) break;
            prof = sp_prof_enter(SP_PROF_SAMPLE);
            int x = draw(s, Z, qt, j - 1, pos + (uint64_t)j, err);
            sp_prof_leave(prof);
            if (x < 0 || (c && c->accept(c->ctx, x, err))) return -1;
            if (j <= max_g) drafts[j - 1] = x;
            n++;
            prev = x;
        }
        if (retro) { /* LOSSY: c_{k+1} (which saw x_k) decides whether x_k is verified */
            n = sp_sched_retrospective(cs, n, &s->sps);
            if (n > max_g) n = max_g;
        }
    }
    s->info.ms_heads += sp_time_ms() - t1;
    if (!s->greedy) { /* token trees (dflash_tree.c) draw every depth at the first position's */
        if (sp_sampler_set_temperature(s->smp, s->draft_t[0], err)) return -1;
        if (s->o.on_logits) s->o.on_logits(s->o.on_logits_ctx, s->logits + (zlab ? (size_t)V : 0), n, V);
    }
    if (s->pen) sp_penalty_pop(s->pen, s->n_pushed);
    s->n_pushed = 0;
    s->n_last = n;
    s->info.drafted += n;
    s->info.len_hist[n < SP_SPS_MAX ? n : SP_SPS_MAX]++;
    return n;
}

static int df_propose(sp_drafter *d, int max_g, int32_t *drafts, float *q, sp_err *err) {
    df_t *s = d->self;
    int32_t blk[SP_SPEC_MAX_G + 2];
    int g, T = sp_df_block_prepare(s, max_g, blk, &g);
    if (T <= 0) return 0;
    double t0 = sp_time_ms();
    int prof = sp_prof_enter(SP_PROF_BLOCK);
    block_forward(s, blk, T);
    sp_prof_leave(prof);
    s->info.ms_block += sp_time_ms() - t0;
    return sp_df_block_drafts(s, max_g, g, drafts, q, d->constraint, err);
}

static int df_commit(sp_drafter *d, int n_acc, int32_t next, const float *taps, const float *hidden, sp_err *err) {
    df_t *s = d->self;
    if (n_acc < 0 || n_acc > s->n_last)
        return sp_err_set(err, "dflash: %d drafts accepted of %d proposed", n_acc, s->n_last);
    if (s->o.on_round && s->conf) s->o.on_round(s->o.on_round_ctx, s->z_last, s->n_last, n_acc);
    s->pending = next;
    s->n_last = 0;
    double t0 = sp_time_ms();
    int rc = inject(s, taps, n_acc + 1, err); /* H_ctx grows by the committed rows only */
    s->info.ms_inject += sp_time_ms() - t0;
    return rc;
}

static int df_extend(sp_drafter *d, const int32_t *tokens, int n, const float *taps, const float *hidden,
                     sp_err *err) {
    df_t *s = d->self;
    if (n < 1 || s->n_last) return sp_err_set(err, "dflash: extend by %d rows with %d drafts pending", n, s->n_last);
    s->pending = tokens[n - 1];
    double t0 = sp_time_ms();
    int rc = inject(s, taps, n, err); /* n committed rows in one batch */
    s->info.ms_inject += sp_time_ms() - t0;
    return rc;
}

static void df_destroy(sp_drafter *d) {
    df_t *s = d ? d->self : NULL;
    if (s && s->info.proposals > 0) { /* per request: debug level (serve -v, generate -v) */
        char hist[512];
        int at = 0;
        for (int i = 0; i <= s->max_drafts && i <= SP_SPS_MAX && at < (int)sizeof hist - 32; i++)
            if (s->info.len_hist[i])
                at += snprintf(hist + at, sizeof hist - (size_t)at, " %d:%ld", i, s->info.len_hist[i]);
        sp_log(SP_LOG_DEBUG,
               "%s: %ld proposals, %.2f drafts each, mean confidence %s%.3f, proposal lengths%s; per proposal: block "
               "%.2f ms, heads %.2f ms, context %.2f ms",
               d->name, s->info.proposals, (double)s->info.drafted / s->info.proposals, s->info.conf_n ? "" : "n/a ",
               s->info.conf_n ? s->info.conf_sum / s->info.conf_n : 0.0, hist, s->info.ms_block / s->info.proposals,
               s->info.ms_heads / s->info.proposals, s->info.ms_inject / s->info.proposals);
    }
    if (s) {
        for (int i = 0; s->layers && i < s->L; i++) {
            free(s->layers[i].K);
            free(s->layers[i].V);
        }
        sp_owner_free(&s->owned);
        free(s->kept);
        sp_sampler_free(s->smp);
        sp_st_close(s->st);
        free(s);
    }
    free(d);
}

int sp_df_scratch_alloc(df_t *s) {
    int R = s->max_drafts + 1 > CTX_CHUNK ? s->max_drafts + 1 : CTX_CHUNK, Dq = 0, Dkv = 0;
    for (int i = 0; i < s->L; i++) {
        const sp_block_desc *ld = &s->layers[i].b.d;
        int a = ld->NH * ld->D, b = ld->KVH * ld->D;
        if (a > Dq) Dq = a;
        if (b > Dkv) Dkv = b;
    }
    s->R = R;
    size_t H = (size_t)s->H;
    int r = s->r;
    s->x = own(s, sizeof(float) * R * H);
    s->xn = own(s, sizeof(float) * R * H);
    s->bias = own(s, sizeof(float) * (size_t)s->V);
    s->qrow = own(s, sizeof(float) * (size_t)s->V);
    s->q = own(s, sizeof(float) * R * (size_t)Dq);
    s->att = own(s, sizeof(float) * R * (size_t)Dq);
    s->k = own(s, sizeof(float) * R * (size_t)Dkv);
    s->v = own(s, sizeof(float) * R * (size_t)Dkv);
    s->o2 = own(s, sizeof(float) * R * H);
    s->g = own(s, sizeof(float) * R * (size_t)s->I_max);
    s->u = own(s, sizeof(float) * R * (size_t)s->I_max);
    s->hid = own(s, sizeof(float) * R * H);
    s->logits = own(s, sizeof(float) * (size_t)(s->max_drafts + 1) * (size_t)s->V);
    s->z = own(s, sizeof(float) * (size_t)(3 * r + 1));
    s->code = own(s, sizeof(float) * (size_t)(r + 1));
    s->vec = own(s, sizeof(float) * (size_t)(2 * r + H));
    s->state = own(s, sizeof(float) * (size_t)(r + 1));
    if (s->mtype == MARKOV_VANILLA && !s->o.no_bias_cache) {
        s->n_bc = (int)((4u << 20) / (sizeof(float) * (size_t)s->V));
        if (s->n_bc > 256) s->n_bc = 256;
        if (s->n_bc > 0) {
            s->bc_tag = own(s, sizeof(int32_t) * (size_t)s->n_bc);
            s->bc = own(s, sizeof(float) * (size_t)s->n_bc * (size_t)s->V);
            if (!s->bc_tag || !s->bc) s->n_bc = 0;
            for (int i = 0; i < s->n_bc; i++) s->bc_tag[i] = -1;
        }
    }
    return !s->x || !s->xn || !s->bias || !s->qrow || !s->q || !s->att || !s->k || !s->v || !s->o2 || !s->g || !s->u ||
                   !s->hid || !s->logits || !s->z || !s->code || !s->vec || !s->state
               ? -1
               : 0;
}

/* the drafter's block against the target's: width, vocabulary, no Gemma-4 extras */
static int check_config(df_t *s, const char *path, sp_err *err) {
    const sp_config *c = &s->dc;
    if (c->hidden_size != s->H || c->vocab_size != s->V)
        return sp_err_set(err, "%s: hidden_size %d / vocab_size %d must equal the target's (%d / %d)", path,
                          c->hidden_size, c->vocab_size, s->H, s->V);
    if (c->arch == SP_ARCH_GEMMA4 && (c->ple_dim > 0 || c->n_kv_shared > 0))
        return sp_err_set(err, "%s: a Gemma-4 drafter must have hidden_size_per_layer_input 0 and num_kv_shared_layers 0",
                          path);
    s->gemma = c->arch == SP_ARCH_GEMMA4;
    s->L = c->n_layers;
    s->NH = c->n_heads;
    return 0;
}

/* every tensor of dir bound: the layers, then fc, the norms and the heads */
static int bind_all(df_t *s, const char *dir, sp_err *err) {
    if (sp_st_open_dir(&s->st, dir, err) || qk_norm_decide(s, dir, err)) return -1;
    if (!(s->layers = own(s, sizeof(df_layer) * (size_t)s->L))) return sp_err_set(err, "dflash: out of memory");
    for (int i = 0; i < s->L; i++) {
        if (bind_layer(s, i, err)) return -1;
        if (s->layers[i].b.d.I > s->I_max) s->I_max = s->layers[i].b.d.I;
    }
    return bind_heads(s, err);
}

/* drafts per block, the verify policy and the confidence threshold, checked against the heads */
static int apply_opts(df_t *s, const char *path, sp_err *err) {
    int def = s->kind == SP_DFLASH_ZLAB ? s->block_size - 1 : s->block_size;
    s->max_drafts = s->o.max_drafts > 0 && !(s->o.clamp_to_block && s->o.max_drafts > def) ? s->o.max_drafts : def;
    if (s->max_drafts > SP_SPEC_MAX_G)
        return sp_err_set(err, "dflash: %d drafts per block (allowed 1..%d)", s->max_drafts, SP_SPEC_MAX_G);
    if (s->o.policy != SP_VERIFY_ALL) {
        if (!s->conf)
            return sp_err_set(err, "%s: a verify schedule needs a confidence head (enable_confidence_head)", path);
        if (!s->o.sps || s->o.sps->n < 1) return sp_err_set(err, "dflash: the verify schedule needs an SPS table");
        s->sps = *s->o.sps;
    }
    if (s->o.conf_threshold > 0 && !s->conf)
        return sp_err_set(err, "%s: --conf-threshold needs a confidence head (enable_confidence_head)", path);
    return 0;
}

sp_drafter *sp_drafter_dflash(const char *dir, sp_model *target, const sp_sample_params *sample,
                              const sp_dflash_opts *o, sp_err *err) {
    sp_drafter *d = calloc(1, sizeof *d);
    df_t *s = calloc(1, sizeof *s);
    char path[4096], *text = NULL;
    size_t tn;
    json_t *root = NULL;
    if (!d || !s) {
        free(d);
        free(s);
        sp_err_set(err, "dflash: out of memory");
        return NULL;
    }
    d->self = s;
    d->destroy = df_destroy;
    s->o = o ? *o : sp_dflash_opts_default();
    s->target = target;
    s->pool = sp_model_pool(target);
    const sp_config *tc = sp_model_config(target);
    s->V = tc->vocab_size;
    s->H = tc->hidden_size;
    if (sp_path_join(path, sizeof path, dir, "config.json") || sp_read_file(path, &text, &tn, err)) goto fail;
    if (sp_config_parse(&s->dc, text, path, err)) goto fail;
    root = sp_hf_json_loadb(text, tn, JSON_REJECT_DUPLICATES, path, err);
    if (!root || parse_keys(s, root, path, err) || check_config(s, path, err)) goto fail;
    if (bind_all(s, dir, err) || load_sts(s, dir, err) || load_draft_temps(s, dir, err)) goto fail;
    if (apply_opts(s, path, err)) goto fail;
    /* scratch */
    if (sp_df_scratch_alloc(s)) {
        sp_err_set(err, "dflash: out of memory");
        goto fail;
    }
    if (sp_df_sampling_setup(s, sample, err)) goto fail;
    if (sp_df_ensure_cap(s, 256, err)) {
        sp_err_set(err, "dflash: out of memory");
        goto fail;
    }
    s->info = (sp_dflash_info){.kind = s->kind, .block_size = s->block_size, .max_drafts = s->max_drafts,
                               .markov_rank = s->r, .has_conf = s->conf, .n_taps = s->m, .tap_layers = s->taps,
                               .qk_norm = s->qk_norm};
    d->name = s->kind == SP_DFLASH_ZLAB ? "dflash" : s->mtype != MARKOV_NONE || s->conf ? "dspark" : "dflash-deepspec";
    d->n_taps = s->m;
    d->tap_layers = s->taps;
    d->provides_q = !s->greedy;
    d->begin = df_begin;
    d->propose = df_propose;
    d->propose_tree = sp_df_propose_tree;
    d->commit = df_commit;
    d->extend = df_extend;
    d->propose_batch = sp_dflash_propose_batch;
    d->batch_key = s; /* clones (dflash_batch.c) share it */
    json_decref(root);
    free(text);
    return d;
fail:
    json_decref(root);
    free(text);
    df_destroy(d);
    return NULL;
}

int sp_dflash_info_get(const sp_drafter *d, sp_dflash_info *info) {
    if (!d || d->begin != df_begin) return -1;
    const df_t *s = d->self;
    *info = s->info;
    info->draft_temps = !s->greedy && s->cal.n_t > 0;
    if (!s->greedy) memcpy(info->draft_t, s->draft_t, sizeof info->draft_t);
    return 0;
}

const float *sp_dflash_context(const sp_drafter *d, int *n) {
    if (!d || d->begin != df_begin) return NULL;
    const df_t *s = d->self;
    *n = s->n_kept;
    return s->o.keep_taps ? s->kept : NULL;
}

const float *sp_dflash_rope_inv_freq(const sp_drafter *d, int layer, int *D) {
    if (!d || d->begin != df_begin) return NULL;
    const df_t *s = d->self;
    if (layer < 0 || layer >= s->L) return NULL;
    *D = s->layers[layer].b.d.D;
    return s->layers[layer].b.inv_freq;
}

/* ---- token trees (dflash_internal.h; the tree builder is dflash_tree.c) ------------------------- */

int sp_df_tree_block(sp_drafter *d, int max_depth, df_tree_env *env, sp_err *err) {
    df_t *s = d->self;
    int g = max_depth < s->max_drafts ? max_depth : s->max_drafts, zlab = s->kind == SP_DFLASH_ZLAB;
    *env = (df_tree_env){.depth = g > 0 ? g : 0, .V = s->V, .state_n = s->mtype == MARKOV_RNN ? s->r : 0,
                         .pending = s->pending, .pos = (uint64_t)s->n_ctx, .greedy = s->greedy, .seed = s->seed,
                         .smp = s->smp};
    s->n_last = 0;
    if (g <= 0) return 0;
    int T = zlab ? g + 1 : g;
    int32_t blk[SP_SPEC_MAX_G + 2];
    blk[0] = s->pending;
    for (int t = 1; t < T; t++) blk[t] = s->mask_id;
    double t0 = sp_time_ms();
    block_forward(s, blk, T);
    s->info.ms_block += sp_time_ms() - t0;
    s->info.proposals++;
    (void)err;
    return 0;
}

void sp_df_tree_logits(sp_drafter *d, int j, int32_t prev, float *state, float *Z) {
    df_t *s = d->self;
    size_t V = (size_t)s->V;
    if (s->kind == SP_DFLASH_ZLAB) { /* slot j predicts its own position, whatever the parent */
        memcpy(Z, s->logits + (size_t)j * V, V * sizeof(float));
        return;
    }
    memcpy(Z, s->logits + (size_t)(j - 1) * V, V * sizeof(float));
    if (state) memcpy(s->state, state, sizeof(float) * (size_t)s->r);
    (void)heads(s, Z, s->hid + (size_t)(j - 1) * s->H, prev);
    if (state) memcpy(state, s->state, sizeof(float) * (size_t)s->r);
}

void sp_df_tree_done(sp_drafter *d, int depth, int nodes) {
    df_t *s = d->self;
    s->n_last = depth;
    s->info.drafted += nodes;
}
