/* export_drafter.c — drafter checkpoint + target → llama.cpp drafter GGUF (see export_drafter.h,
 * docs/EXPORT.md).
 *
 * Steps: the drafter's config.json → kind → the list of tensors that config implies, each with
 * its llama.cpp name and PyTorch shape (decoder layers from sp_hf_tensor_specs, the same list
 * new-drafter writes; the drafter's own tensors added here) → every stored tensor must be on the
 * list (or deliberately dropped) with that shape, every required one present → keys (the decoder
 * block's hyper-parameters, the drafter's keys, the target's tokenizer + the mask token) →
 * tensors streamed through the target exporter's row converter (2-D weights as stored or
 * --type, 1-D always F32) → one atomic file.
 *
 * The drafter's names all live in drafter_names[] below; per-layer names come from the one
 * HF ↔ GGUF table (gguf_names.c). Not here: reduced (d2t) vocabularies of DFlash / DSpark
 * drafters (specula runs none), DeepSpec's EAGLE-3 layout (llama.cpp runs none). */
#include "export_drafter.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_gguf_internal.h"
#include "gguf_names.h"
#include "hfjson.h"
#include "newdrafter_assistant.h"
#include "newmodel.h"
#include "safetensors.h"
#include "tensor_names.h"

typedef enum { EXD_ZLAB = 0, EXD_DSPARK, EXD_ASSISTANT, EXD_EAGLE3 } exd_kind;

/* ---- names ----------------------------------------------------------------------------------- */

/* Drafter tensors outside the decoder layers, HF name (without "model.") → llama.cpp name. */
static const struct {
    const char *hf, *gg;
} drafter_names[] = {
    {"fc.weight", "fc.weight"},                                  /* taps → hidden (DFlash / DSpark) */
    {"hidden_norm.weight", "enc.output_norm.weight"},            /* RMSNorm after fc */
    {"norm.weight", "output_norm.weight"},                       /* final norm */
    {"embed_tokens.weight", "token_embd.weight"},                /* own copy of the embedding */
    {"lm_head.weight", "output.weight"},                         /* own LM head */
    {"markov_head.markov_w1.weight", "markov_w1.weight"},        /* DSpark Markov code table [V, r] */
    {"markov_head.markov_w2.weight", "markov_w2.weight"},        /* DSpark Markov bias [V, r] */
    {"confidence_head.proj.weight", "conf_proj.weight"},         /* DSpark confidence [1, H + r] */
    {"confidence_head.proj.bias", "conf_proj.bias"},
    {"pre_projection.weight", "nextn.pre_projection.weight"},    /* assistant [d_a, 2 Hb] */
    {"post_projection.weight", "nextn.post_projection.weight"},  /* assistant [Hb, d_a] */
};

const char *sp_export_drafter_tensor_name(sp_arch block_arch, const char *hf, char *buf, size_t cap) {
    if (!strncmp(hf, "model.", 6)) hf += 6;
    for (size_t i = 0; i < sizeof drafter_names / sizeof drafter_names[0]; i++)
        if (!strcmp(hf, drafter_names[i].hf)) return drafter_names[i].gg;
    /* EAGLE-3's own tensors and its midlayer.* / layers.0.* layer: the table's eagle3 GGUF names */
    int li, r = sp_tensor_role_of_in(SP_TN_EAGLE3_SPECFORGE, block_arch, hf, &li);
    if (r < 0 && sp_tensor_role_of_in(SP_TN_EAGLE3_SPECULATORS, block_arch, hf, &li) == SP_TN_HIDDEN_NORM)
        r = SP_TN_HIDDEN_NORM;
    if (r >= 0) return sp_tensor_gguf_name_in(SP_TN_EAGLE3_SPECFORGE, block_arch, (sp_tensor_role)r, li, buf, cap);
    return sp_gguf_tensor_name(block_arch, hf, buf, cap);
}

/* Stored tensors dropped on purpose: unused at run time in llama.cpp (docs/EXPORT.md). */
static int droppable(const char *name) {
    size_t n = strlen(name);
    char t2d[16];
    sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECFORGE, SP_ARCH_LLAMA, SP_TN_T2D, -1, t2d, sizeof t2d);
    return !strcmp(name, t2d) || !strncmp(name, "masked_embedding.", 17) ||
           (n >= 19 && !strcmp(name + n - 19, "rotary_emb.inv_freq"));
}

/* ---- the expected tensor list ----------------------------------------------------------------- */

typedef struct {
    char hf[112];
    char gg[96];
    int ndim;
    int64_t shape[2]; /* PyTorch order */
    int optional;     /* may be absent */
    int skip;         /* allowed in the checkpoint, not exported */
    sp_dtype dtype;   /* required dtype; SP_DT_UNKNOWN = any float */
    const st_tensor *t;
    sp_dtype qt;       /* a 2-D weight stored as llama.cpp blocks (quantize --drafter): their type, else 0 */
    const void *qdata; /* those blocks, copied into the GGUF as they are */
} exd_tensor;

typedef struct {
    exd_tensor *v;
    int n, cap;
} exd_list;

static int want(exd_list *l, sp_arch block, const char *hf, int ndim, int64_t d0, int64_t d1, int optional,
                sp_err *err) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        exd_tensor *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return sp_err_set(err, "out of memory");
        l->v = v;
        l->cap = cap;
    }
    exd_tensor *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    const char *gg = sp_export_drafter_tensor_name(block, hf, t->gg, sizeof t->gg);
    if (!gg) return sp_err_set(err, "export: no llama.cpp name for drafter tensor %s", hf);
    if (gg != t->gg) snprintf(t->gg, sizeof t->gg, "%s", gg);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->optional = optional;
    t->dtype = SP_DT_UNKNOWN;
    return 0;
}

static exd_tensor *find(exd_list *l, const char *hf) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].hf, hf)) return &l->v[i];
    return NULL;
}

/* ---- drafter config keys ----------------------------------------------------------------------- */

/* DFlash / DSpark facts from config.json (the keys dflash.c reads). */
typedef struct {
    int mask_id, block_size, n_taps, taps[SP_MAX_LAYERS];
    int markov_rank, conf, conf_markov, sample_from_anchor;
    const char *markov_type;
    int causal;             /* -1 = not declared */
    double embedding_scale; /* 0 = none */
    double logit_scale;     /* 0 = none */
} exd_dflash;

static json_t *dfc_or_root(json_t *root, const char *key) {
    json_t *dfc = json_object_get(root, "dflash_config"), *v = json_is_object(dfc) ? json_object_get(dfc, key) : NULL;
    return v && !json_is_null(v) ? v : json_object_get(root, key);
}

static int int_key(json_t *root, const char *key, int def, int *out, const char *what, sp_err *err) {
    json_t *v = dfc_or_root(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return sp_err_set(err, "%s: \"%s\" must be an integer", what, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int dflash_keys(exd_dflash *k, json_t *root, exd_kind kind, const sp_config *tc, const char *what,
                       sp_err *err) {
    memset(k, 0, sizeof *k);
    int ntl = 0;
    if (int_key(root, "mask_token_id", -1, &k->mask_id, what, err) ||
        int_key(root, "block_size", kind == EXD_ZLAB ? 16 : -1, &k->block_size, what, err) ||
        int_key(root, "num_target_layers", tc->n_layers, &ntl, what, err) ||
        int_key(root, "markov_rank", 0, &k->markov_rank, what, err))
        return -1;
    if (k->mask_id < 0 || k->mask_id >= tc->vocab_size)
        return sp_err_set(err, "%s: mask_token_id missing or outside the target's vocabulary 0..%d", what,
                          tc->vocab_size - 1);
    if (k->block_size < 1 || k->block_size > 1024)
        return sp_err_set(err, "%s: block_size missing or outside 1..1024", what);
    if (ntl != tc->n_layers)
        return sp_err_set(err, "%s: num_target_layers %d but the target has %d layers (drafter for another target?)",
                          what, ntl, tc->n_layers);
    json_t *ids = dfc_or_root(root, "target_layer_ids");
    if (json_is_array(ids)) {
        k->n_taps = (int)json_array_size(ids);
        if (k->n_taps < 1 || k->n_taps > SP_MAX_LAYERS)
            return sp_err_set(err, "%s: target_layer_ids must be a non-empty list", what);
        for (int i = 0; i < k->n_taps; i++) {
            json_t *e = json_array_get(ids, (size_t)i);
            if (!json_is_integer(e)) return sp_err_set(err, "%s: target_layer_ids[%d] is not an integer", what, i);
            k->taps[i] = (int)json_integer_value(e);
        }
    } else if (ids && !json_is_null(ids)) {
        return sp_err_set(err, "%s: target_layer_ids must be a list", what);
    }
    for (int i = 0; i < k->n_taps; i++) /* llama.cpp taps the input of layer id+1: the last layer has none */
        if (k->taps[i] < 0 || k->taps[i] > tc->n_layers - 2)
            return sp_err_set(err, "%s: target_layer_ids[%d] = %d outside 0..%d (the target has %d layers)", what, i,
                              k->taps[i], tc->n_layers - 2, tc->n_layers);
    k->markov_type = json_string_value(json_object_get(root, "markov_head_type"));
    k->conf = json_is_true(json_object_get(root, "enable_confidence_head"));
    json_t *cm = json_object_get(root, "confidence_head_with_markov");
    k->conf_markov = cm && !json_is_null(cm) ? json_is_true(cm) : 1;
    json_t *sa = json_object_get(root, "sample_from_anchor");
    k->sample_from_anchor = sa && !json_is_null(sa) ? json_is_true(sa) : 1;
    json_t *c = json_object_get(root, "is_causal");
    if (!c || json_is_null(c)) c = json_object_get(json_object_get(root, "dflash_config"), "causal");
    k->causal = json_is_boolean(c) ? json_is_true(c) : -1;
    json_t *es = dfc_or_root(root, "input_embedding_scale"), *ls = dfc_or_root(root, "output_multiplier");
    k->embedding_scale = json_is_number(es) ? json_number_value(es) : 0;
    k->logit_scale = json_is_number(ls) ? json_number_value(ls) : 0;
    if (kind == EXD_DSPARK && k->markov_rank > 0 && k->markov_type && strcmp(k->markov_type, "vanilla"))
        return sp_err_set(err, "%s: markov_head_type \"%s\": llama.cpp runs only the vanilla Markov head", what,
                          k->markov_type);
    if (kind == EXD_DSPARK && k->conf && (k->markov_rank == 0 || !k->conf_markov))
        return sp_err_set(err, "%s: a confidence head without the Markov code (confidence_head_with_markov false or "
                               "markov_rank 0): llama.cpp's conf_proj is [1, H + r]", what);
    json_t *sw = json_object_get(root, "use_sliding_window"), *us = dfc_or_root(root, "use_swa");
    if (json_is_true(sw) || json_is_true(us))
        return sp_err_set(err, "%s: sliding-window draft layers are not exported (specula does not run them)", what);
    return 0;
}

/* the z-lab default tap layers when target_layer_ids is absent (as dflash.c) */
static void zlab_default_taps(exd_dflash *k, int N, int Ld) {
    k->n_taps = Ld;
    if (Ld == 1) {
        k->taps[0] = N / 2;
        return;
    }
    for (int i = 0; i < Ld; i++) {
        double x = 1 + i * (double)(N - 4) / (Ld - 1), r = floor(x + 0.5);
        if (r - x == 0.5 && fmod(r, 2.0) != 0) r -= 1;
        k->taps[i] = (int)r;
    }
}

#define KEY(buf, fmt) (snprintf(buf, sizeof buf, "%s." fmt, A), buf)

/* The keys llama.cpp's converter writes for arch "dflash" (docs/EXPORT.md, "DFlash and DSpark"). */
static int dflash_gguf_keys(gguf_writer *w, exd_kind kind, const sp_config *dc, const exd_dflash *k, int has_conf,
                            sp_err *err) {
    const char *A = "dflash";
    char b[128];
    const int L = dc->n_layers;
    int32_t ffn[SP_MAX_LAYERS], kvh[SP_MAX_LAYERS], taps[SP_MAX_LAYERS];
    for (int i = 0; i < L; i++) {
        ffn[i] = dc->layers[i].ffn_dim;
        kvh[i] = dc->layers[i].n_kv_heads;
    }
    for (int i = 0; i < k->n_taps; i++) taps[i] = k->taps[i] + 1; /* llama.cpp: the input of layer id + 1 */
    int gemma = dc->arch == SP_ARCH_GEMMA4, D = dc->layers[0].head_dim;
    if (sp_gguf_writer_set_u32(w, KEY(b, "block_count"), (uint32_t)L, err) ||
        sp_gguf_writer_set_u32(w, KEY(b, "context_length"), (uint32_t)dc->max_pos, err) ||
        sp_gguf_writer_set_u32(w, KEY(b, "embedding_length"), (uint32_t)dc->hidden_size, err) ||
        sp_export_set_per_layer(w, KEY(b, "feed_forward_length"), ffn, L, err) ||
        sp_gguf_writer_set_u32(w, KEY(b, "attention.head_count"), (uint32_t)dc->n_heads, err) ||
        sp_export_set_per_layer(w, KEY(b, "attention.head_count_kv"), kvh, L, err) ||
        sp_gguf_writer_set_f32(w, KEY(b, "rope.freq_base"), (float)dc->rope.theta, err) ||
        (gemma && sp_gguf_writer_set_f32(w, KEY(b, "rope.freq_base_swa"), (float)dc->rope_swa.theta, err)) ||
        sp_gguf_writer_set_f32(w, KEY(b, "attention.layer_norm_rms_epsilon"), (float)dc->rms_eps, err) ||
        sp_gguf_writer_set_u32(w, KEY(b, "attention.key_length"), (uint32_t)D, err) ||
        sp_gguf_writer_set_u32(w, KEY(b, "attention.value_length"), (uint32_t)D, err) ||
        (gemma && sp_gguf_writer_set_u32(w, KEY(b, "rope.dimension_count"), (uint32_t)D, err)) ||
        sp_gguf_writer_set_u32(w, KEY(b, "block_size"), (uint32_t)k->block_size, err))
        return -1;
    double es = gemma ? sqrt((double)dc->hidden_size) : k->embedding_scale;
    if ((k->logit_scale > 0 && sp_gguf_writer_set_f32(w, KEY(b, "logit_scale"), (float)k->logit_scale, err)) ||
        (es > 0 && sp_gguf_writer_set_f32(w, KEY(b, "embedding_scale"), (float)es, err)) ||
        sp_gguf_writer_set_arr(w, KEY(b, "target_layers"), GGUF_TYPE_INT32, taps, (size_t)k->n_taps, err) ||
        (k->causal >= 0 && sp_gguf_writer_set_bool(w, KEY(b, "attention.causal"), k->causal, err)))
        return -1;
    if (gemma && (sp_gguf_writer_set_f32(w, KEY(b, "attention.scale"), 1.0f, err) ||
                  sp_gguf_writer_set_str(w, KEY(b, "hidden_activation"), "gelu_pytorch_tanh", err)))
        return -1;
    if (kind == EXD_DSPARK && (sp_gguf_writer_set_bool(w, KEY(b, "sample_from_anchor"), k->sample_from_anchor, err) ||
                               sp_gguf_writer_set_bool(w, KEY(b, "has_confidence_head"), has_conf, err)))
        return -1;
    return 0;
}

/* ---- per kind: checks, the tensor list, the keys ---------------------------------------------- */

typedef struct {
    exd_kind kind;
    sp_config tc, dc;   /* target; drafter block (assistant: its text_config) */
    exd_dflash k;
    sp_assistant_config ac;
    int eagle_taps[3], draft_vocab, norm_before_residual, norm_before_fc;
    sp_tn_layout eagle_names; /* SP_TN_EAGLE3_SPECFORGE (midlayer.*) or _SPECULATORS (layers.0.*), as stored */
    int64_t *d2t; /* EAGLE-3: absolute target ids [draft_vocab] */
    exd_list list;
    float *rope_freqs;
    int n_freqs;
} exd_t;

/* what llama.cpp's dflash graph runs: the drafter's block against the target's */
static int dflash_check(const exd_t *x, const char *what, sp_err *err) {
    const sp_config *dc = &x->dc, *tc = &x->tc;
    if (dc->hidden_size != tc->hidden_size || dc->vocab_size != tc->vocab_size)
        return sp_err_set(err, "%s: hidden_size %d / vocab_size %d must equal the target's (%d / %d)", what,
                          dc->hidden_size, dc->vocab_size, tc->hidden_size, tc->vocab_size);
    if (dc->arch == SP_ARCH_LLAMA)
        return sp_err_set(err, "%s: model_type llama: llama.cpp's dflash block needs q_norm / k_norm (qwen3 block)",
                          what);
    if (dc->arch == SP_ARCH_GEMMA4 && (x->kind == EXD_ZLAB || tc->arch != SP_ARCH_GEMMA4))
        return sp_err_set(err, "%s: a Gemma-4 drafter block is exported only as Gemma4DSparkModel for a Gemma-4 target",
                          what);
    if (dc->arch == SP_ARCH_QWEN3 && tc->arch == SP_ARCH_GEMMA4)
        return sp_err_set(err, "%s: a Qwen3-block drafter for a Gemma-4 target: llama.cpp would not scale the "
                               "target's embedding as specula does", what);
    for (int i = 0; i < dc->n_layers; i++) {
        if (dc->layers[i].sliding)
            return sp_err_set(err, "%s: layer %d is sliding_attention (not exported)", what, i);
        if (dc->layers[i].head_dim != dc->layers[0].head_dim)
            return sp_err_set(err, "%s: layer %d head dim %d != layer 0's %d (llama.cpp's dflash has one)", what, i,
                              dc->layers[i].head_dim, dc->layers[0].head_dim);
    }
    if (dc->rope.type == SP_ROPE_DEFAULT && dc->rope.factor != 1.0)
        return sp_err_set(err, "%s: rope factor %g without llama3 / proportional scaling is not exported", what,
                          dc->rope.factor);
    if (dc->arch == SP_ARCH_GEMMA4 && dc->final_softcap > 0)
        sp_log(SP_LOG_WARN, "export: %s declares final_logit_softcapping %g; llama.cpp's dflash graph never caps "
                            "DSpark logits (specula caps before the Markov bias), so drafts can differ", what,
               dc->final_softcap);
    return 0;
}

static int dflash_prepare(exd_t *x, const char *text, json_t *root, const char *what, sp_err *err) {
    sp_config *dc = &x->dc;
    const sp_config *tc = &x->tc;
    if (sp_config_parse(dc, text, what, err)) return -1;
    dc->tensor_prefix[0] = 0; /* drafter tensors carry no prefix */
    if (dflash_keys(&x->k, root, x->kind, tc, what, err)) return -1;
    if (x->k.n_taps == 0) {
        if (x->kind != EXD_ZLAB) return sp_err_set(err, "%s: missing \"target_layer_ids\"", what);
        zlab_default_taps(&x->k, tc->n_layers, dc->n_layers);
    }
    if (dflash_check(x, what, err)) return -1;
    /* tensors: the decoder layers new-drafter writes, then the drafter's own */
    hf_tensor_spec *specs = NULL;
    int n = 0;
    if (sp_hf_tensor_specs(dc, &specs, &n, err)) return -1;
    sp_arch ba = dc->arch;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const hf_tensor_spec *s = &specs[i];
        int table = !strcmp(s->name, "embed_tokens.weight") || !strcmp(s->name, "lm_head.weight");
        rc = want(&x->list, ba, s->name, s->ndim, s->shape[0], s->shape[1], table, err);
    }
    free(specs);
    if (rc) return -1;
    if (!find(&x->list, "lm_head.weight") &&
        want(&x->list, ba, "lm_head.weight", 2, tc->vocab_size, tc->hidden_size, 1, err))
        return -1;
    /* A Qwen3 DeepSpec drafter's LM head copy: the converter drops it for a full vocabulary and
     * llama.cpp then reads token_embd as the head — right only for a tied target, so it is kept
     * as output.weight when the target's head is its own (docs/EXPORT.md). */
    if (x->kind == EXD_DSPARK && dc->arch == SP_ARCH_QWEN3 && tc->tie_embeddings)
        find(&x->list, "lm_head.weight")->skip = 1;
    int64_t H = dc->hidden_size, V = dc->vocab_size, r = x->k.markov_rank;
    if (want(&x->list, ba, "fc.weight", 2, H, x->k.n_taps * H, 0, err) ||
        want(&x->list, ba, "hidden_norm.weight", 1, H, 0, 0, err))
        return -1;
    if (x->kind == EXD_DSPARK && r > 0 &&
        (want(&x->list, ba, "markov_head.markov_w1.weight", 2, V, r, 0, err) ||
         want(&x->list, ba, "markov_head.markov_w2.weight", 2, V, r, 0, err)))
        return -1;
    if (x->kind == EXD_DSPARK && x->k.conf &&
        (want(&x->list, ba, "confidence_head.proj.weight", 2, 1, H + r, 0, err) ||
         want(&x->list, ba, "confidence_head.proj.bias", 1, 1, 0, 0, err)))
        return -1;

    /* RoPE divisors: Gemma's proportional mask, or llama3 scaling of a Llama target's drafter */
    int D = dc->layers[0].head_dim;
    if (dc->rope.type == SP_ROPE_PROPORTIONAL || dc->rope.type == SP_ROPE_LLAMA3) {
        x->n_freqs = D / 2;
        if (!(x->rope_freqs = malloc(sizeof(float) * (size_t)x->n_freqs))) return sp_err_set(err, "out of memory");
        if (dc->rope.type == SP_ROPE_PROPORTIONAL) sp_export_proportional_rope_freqs(&dc->rope, D, x->rope_freqs);
        else sp_export_llama3_rope_freqs(&dc->rope, D, x->rope_freqs);
    }
    return 0;
}

static int assistant_prepare(exd_t *x, const char *text, const char *what, sp_err *err) {
    const sp_config *tc = &x->tc;
    if (tc->arch != SP_ARCH_GEMMA4) return sp_err_set(err, "%s: a Gemma-4 assistant needs a Gemma-4 target", what);
    if (sp_assistant_config_parse(&x->ac, text, what, err)) return -1;
    const sp_config *c = &x->ac.text;
    x->dc = *c;
    if (x->ac.backbone_hidden != tc->hidden_size || c->vocab_size != tc->vocab_size)
        return sp_err_set(err, "%s: backbone_hidden_size %d / vocab_size %d must equal the target's (%d / %d)", what,
                          x->ac.backbone_hidden, c->vocab_size, tc->hidden_size, tc->vocab_size);
    /* llama.cpp borrows the K/V of target layers L-2 (sliding) and L-1 (full), resolved through
     * the target's own KV sharing; specula the last non-shared layer of each type (docs/EXPORT.md) */
    int sl, fu, Lt = tc->n_layers;
    if (sp_assistant_borrowed_layers(tc, &sl, &fu)) return sp_err_set(err, "%s: the target has no full layer", what);
    int ll_sl = Lt >= 2 ? tc->layers[Lt - 2].kv_source : -1, ll_fu = tc->layers[Lt - 1].kv_source;
    for (int i = 0; i < c->n_layers; i++) {
        int src = c->layers[i].sliding ? sl : fu, ll = c->layers[i].sliding ? ll_sl : ll_fu;
        if (src < 0 || src != ll)
            return sp_err_set(err, "%s: assistant layer %d reads target layer %d, llama.cpp would read layer %d (it "
                                   "needs the target's last layer full and the one before it sliding)",
                              what, i, src, ll);
        if (c->layers[i].head_dim != tc->layers[src].head_dim || c->layers[i].n_kv_heads != tc->layers[src].n_kv_heads)
            return sp_err_set(err, "%s: assistant layer %d: head dim %d / KV heads %d, target layer %d has %d / %d", what,
                              i, c->layers[i].head_dim, c->layers[i].n_kv_heads, src, tc->layers[src].head_dim,
                              tc->layers[src].n_kv_heads);
    }
    int64_t d = c->hidden_size, Hb = x->ac.backbone_hidden, V = c->vocab_size, nH = c->n_heads;
    sp_arch g = SP_ARCH_GEMMA4;
    exd_list *l = &x->list;
    char nm[112];
#define NM(fmt) (snprintf(nm, sizeof nm, "model.layers.%d." fmt, i), nm)
    if (want(l, g, "model.embed_tokens.weight", 2, V, d, 0, err) ||
        want(l, g, "pre_projection.weight", 2, d, 2 * Hb, 0, err) ||
        want(l, g, "post_projection.weight", 2, Hb, d, 0, err) || want(l, g, "model.norm.weight", 1, d, 0, 0, err))
        return -1;
    for (int i = 0; i < c->n_layers; i++) {
        int64_t D = c->layers[i].head_dim, I = c->layers[i].ffn_dim;
        if (want(l, g, NM("input_layernorm.weight"), 1, d, 0, 0, err) ||
            want(l, g, NM("self_attn.q_proj.weight"), 2, nH * D, d, 0, err) ||
            want(l, g, NM("self_attn.q_norm.weight"), 1, D, 0, 0, err) ||
            want(l, g, NM("self_attn.o_proj.weight"), 2, d, nH * D, 0, err) ||
            want(l, g, NM("post_attention_layernorm.weight"), 1, d, 0, 0, err) ||
            want(l, g, NM("pre_feedforward_layernorm.weight"), 1, d, 0, 0, err) ||
            want(l, g, NM("mlp.gate_proj.weight"), 2, I, d, 0, err) ||
            want(l, g, NM("mlp.up_proj.weight"), 2, I, d, 0, err) ||
            want(l, g, NM("mlp.down_proj.weight"), 2, d, I, 0, err) ||
            want(l, g, NM("post_feedforward_layernorm.weight"), 1, d, 0, 0, err) ||
            want(l, g, NM("layer_scalar"), 1, 1, 0, 0, err))
            return -1;
    }
#undef NM
    int Dg = -1;
    for (int i = 0; i < c->n_layers; i++)
        if (!c->layers[i].sliding) Dg = c->layers[i].head_dim;
    if (Dg > 0) {
        x->n_freqs = Dg / 2;
        if (!(x->rope_freqs = malloc(sizeof(float) * (size_t)x->n_freqs))) return sp_err_set(err, "out of memory");
        sp_export_proportional_rope_freqs(&c->rope, Dg, x->rope_freqs);
    }
    return 0;
}

static int assistant_gguf_keys(gguf_writer *w, const exd_t *x, sp_err *err) {
    const char *A = "gemma4-assistant";
    char b[128];
    sp_config c = x->ac.text;
    c.n_kv_shared = c.n_layers; /* every assistant layer reads borrowed K/V (config num_kv_shared_layers) */
    return sp_export_arch_keys(w, A, &c, err) ||
           sp_gguf_writer_set_u32(w, KEY(b, "embedding_length_out"), (uint32_t)x->ac.backbone_hidden, err) ||
           sp_gguf_writer_set_u32(w, KEY(b, "nextn_predict_layers"), (uint32_t)c.n_layers, err);
}


/* EAGLE-3, the SpecForge layout (llama.cpp arch "eagle3", docs/EXPORT.md): the Llama block on
 * [embedding ; fused state] (q/k/v over 2H, Q/K rows permuted as for a Llama target), three
 * taps used as layer-input indices as stored, the reduced head with d2t as absolute ids. */
static int eagle3_prepare(exd_t *x, const char *text, json_t *root, const char *what, sp_err *err) {
    sp_config *dc = &x->dc;
    const sp_config *tc = &x->tc;
    if (sp_config_parse(dc, text, what, err)) return -1;
    if (dc->arch != SP_ARCH_LLAMA || dc->n_layers != 1)
        return sp_err_set(err, "%s: an EAGLE-3 drafter must be one Llama-block layer (model_type llama, "
                               "num_hidden_layers 1)", what);
    if (dc->vocab_size != tc->vocab_size) /* hidden sizes: target_hidden_size below */
        return sp_err_set(err, "%s: vocab_size %d must equal the target's %d", what, dc->vocab_size, tc->vocab_size);
    json_t *th = json_object_get(root, "target_hidden_size");
    int Ht = json_is_integer(th) ? (int)json_integer_value(th) : tc->hidden_size;
    if (Ht != tc->hidden_size || dc->hidden_size != tc->hidden_size)
        return sp_err_set(err, "%s: hidden_size %d / target_hidden_size %d must equal the target's %d", what,
                          dc->hidden_size, Ht, tc->hidden_size);
    json_t *dv = json_object_get(root, "draft_vocab_size");
    x->draft_vocab = json_is_integer(dv) ? (int)json_integer_value(dv) : dc->vocab_size;
    if (x->draft_vocab < 1 || x->draft_vocab > dc->vocab_size)
        return sp_err_set(err, "%s: draft_vocab_size %d outside 1..%d", what, x->draft_vocab, dc->vocab_size);
    json_t *ids = json_object_get(root, "eagle_aux_hidden_state_layer_ids");
    if (!json_is_array(ids)) ids = json_object_get(json_object_get(root, "eagle_config"),
                                                   "eagle_aux_hidden_state_layer_ids");
    int N = tc->n_layers;
    if (json_is_array(ids)) {
        if (json_array_size(ids) != 3)
            return sp_err_set(err, "%s: eagle_aux_hidden_state_layer_ids has %zu entries; llama.cpp's eagle3 takes 3",
                              what, json_array_size(ids));
        for (int i = 0; i < 3; i++) {
            json_t *e = json_array_get(ids, (size_t)i);
            if (!json_is_integer(e))
                return sp_err_set(err, "%s: eagle_aux_hidden_state_layer_ids[%d] is not an integer", what, i);
            x->eagle_taps[i] = (int)json_integer_value(e);
        }
    } else { /* the published default */
        x->eagle_taps[0] = 2;
        x->eagle_taps[1] = N / 2;
        x->eagle_taps[2] = N - 3;
    }
    for (int i = 0; i < 3; i++)
        if (x->eagle_taps[i] < 0 || x->eagle_taps[i] > N)
            return sp_err_set(err, "%s: EAGLE-3 tap %d = %d outside 0..%d for a %d-layer target", what, i,
                              x->eagle_taps[i], N, N);
    x->norm_before_residual = json_is_true(json_object_get(root, "norm_before_residual"));
    x->norm_before_fc = json_is_true(json_object_get(root, "norm_before_fc"));

    const sp_layer_config *lc = &dc->layers[0];
    int64_t H = dc->hidden_size, V = dc->vocab_size, Vd = x->draft_vocab, NH = dc->n_heads, D = lc->head_dim;
    int64_t KVH = lc->n_kv_heads, I = lc->ffn_dim;
    sp_arch b = SP_ARCH_LLAMA;
    exd_list *l = &x->list;
    /* the layer is stored as midlayer.* (SpecForge) or layers.0.* (speculators): listed under the
     * name the checkpoint uses */
    char nm[112];
    const sp_tn_layout lay = x->eagle_names; /* names: tensor_names.h */
#define NM(role) sp_tensor_hf_name_in(lay, b, role, (role) < SP_TN_FIRST_LAYER_ROLE ? -1 : 0, nm, sizeof nm)
    if (want(l, b, NM(SP_TN_FC), 2, H, 3 * H, 0, err) ||
        (x->norm_before_fc && want(l, b, NM(SP_TN_TAP_NORM), 1, 3 * H, 0, 0, err)) ||
        want(l, b, NM(SP_TN_HIDDEN_NORM), 1, H, 0, 0, err) || want(l, b, NM(SP_TN_ATTN_NORM), 1, H, 0, 0, err) ||
        want(l, b, NM(SP_TN_Q), 2, NH * D, 2 * H, 0, err) || want(l, b, NM(SP_TN_K), 2, KVH * D, 2 * H, 0, err) ||
        want(l, b, NM(SP_TN_V), 2, KVH * D, 2 * H, 0, err) || want(l, b, NM(SP_TN_O), 2, H, NH * D, 0, err) ||
        want(l, b, NM(SP_TN_FFN_NORM), 1, H, 0, 0, err) || want(l, b, NM(SP_TN_GATE), 2, I, H, 0, err) ||
        want(l, b, NM(SP_TN_UP), 2, I, H, 0, err) || want(l, b, NM(SP_TN_DOWN), 2, H, I, 0, err) ||
        want(l, b, NM(SP_TN_FINAL_NORM), 1, H, 0, 0, err) || want(l, b, NM(SP_TN_LM_HEAD), 2, Vd, H, 0, err) ||
        want(l, b, NM(SP_TN_EMBED), 2, V, H, 1, err) || want(l, b, NM(SP_TN_D2T), 1, Vd, 0, Vd == V, err))
        return -1;
    find(l, NM(SP_TN_D2T))->skip = 1; /* written as absolute ids, below */
    find(l, NM(SP_TN_D2T))->dtype = SP_DT_I64;
#undef NM
    if (dc->rope.type == SP_ROPE_LLAMA3) {
        x->n_freqs = (int)D / 2;
        if (!(x->rope_freqs = malloc(sizeof(float) * (size_t)x->n_freqs))) return sp_err_set(err, "out of memory");
        sp_export_llama3_rope_freqs(&dc->rope, (int)D, x->rope_freqs);
    } else if (dc->rope.factor != 1.0) {
        return sp_err_set(err, "%s: rope factor %g without llama3 scaling is not exported", what, dc->rope.factor);
    }
    return 0;
}

/* d2t as llama.cpp stores it: absolute target ids (stored offsets + draft id), each in range, no repeats */
static int eagle3_d2t(exd_t *x, const char *dir, sp_err *err) {
    char d2t[16];
    sp_tensor_hf_name_in(x->eagle_names, SP_ARCH_LLAMA, SP_TN_D2T, -1, d2t, sizeof d2t);
    const exd_tensor *t = find(&x->list, d2t);
    if (!t->t) return 0;
    int64_t Vd = x->draft_vocab, V = x->tc.vocab_size;
    uint8_t *seen = calloc((size_t)V, 1);
    if (!(x->d2t = malloc(sizeof(int64_t) * (size_t)Vd)) || !seen) {
        free(seen);
        return sp_err_set(err, "out of memory");
    }
    memcpy(x->d2t, t->t->data, sizeof(int64_t) * (size_t)Vd);
    for (int64_t j = 0; j < Vd; j++) {
        int64_t id = x->d2t[j] + j;
        if (id < 0 || id >= V || seen[id]) {
            free(seen);
            return sp_err_set(err, "%s: %s[%lld] maps draft id %lld to target id %lld (%s)", dir, d2t, (long long)j,
                              (long long)j, (long long)id, id < 0 || id >= V ? "outside the vocabulary" : "twice");
        }
        seen[id] = 1;
        x->d2t[j] = id;
    }
    free(seen);
    return 0;
}

static int eagle3_gguf_keys(gguf_writer *w, const exd_t *x, sp_err *err) {
    const char *A = "eagle3";
    char b[128];
    int32_t taps[3] = {x->eagle_taps[0], x->eagle_taps[1], x->eagle_taps[2]};
    return sp_export_arch_keys(w, A, &x->dc, err) ||
           sp_gguf_writer_set_arr(w, KEY(b, "target_layers"), GGUF_TYPE_INT32, taps, 3, err) ||
           sp_gguf_writer_set_u32(w, KEY(b, "target_hidden_size"), (uint32_t)x->tc.hidden_size, err) ||
           sp_gguf_writer_set_bool(w, KEY(b, "norm_before_residual"), x->norm_before_residual, err) ||
           sp_gguf_writer_set_bool(w, KEY(b, "norm_before_fc"), x->norm_before_fc, err);
}

/* ---- the export ---------------------------------------------------------------------------------- */

static int check_stored(exd_t *x, st_set *st, const char *dir, sp_err *err) {
    for (int i = 0; i < sp_st_count(st); i++) {
        const char *name = sp_st_at(st, i)->name;
        exd_tensor *t = find(&x->list, name);
        if (t) {
            char key[160];
            snprintf(key, sizeof key, "quant.%s", name);
            if (t->ndim == 2 && sp_st_metadata(st, key)) { /* blocks of a quantized drafter, checked as a weight */
                if (sp_st_get_weight(st, name, t->shape[0], t->shape[1], &t->qdata, &t->qt, err)) return -1;
                t->t = sp_st_find(st, name);
            } else if (sp_st_get(st, name, t->dtype, t->ndim, t->shape, &t->t, err))
                return -1;
            continue;
        }
        if (droppable(name)) continue;
        return sp_err_set(err, "%s: tensor %s is not part of this drafter's layout (config.json; llama.cpp would "
                               "refuse it)", dir, name);
    }
    for (int i = 0; i < x->list.n; i++)
        if (!x->list.v[i].t && !x->list.v[i].optional)
            return sp_err_set(err, "%s: missing tensor %s", dir, x->list.v[i].hf);
    return 0;
}

/* what one export holds besides x: the drafter's config text and JSON, its tensors, the writer */
typedef struct {
    char *text;
    json_t *root;
    st_set *st;
    gguf_writer *w;
    export_tensor_src *srcs;
} exd_io;

/* the target's config, the drafter's config and tensors, checked against the layout of `kind` */
static int exd_load(exd_t *x, exd_io *io, const char *dir, const char *target_dir, sp_err *err) {
    char path[4096];
    size_t tn;
    if (sp_path_join(path, sizeof path, target_dir, "config.json") || sp_config_load(&x->tc, path, err)) return -1;
    if (sp_path_join(path, sizeof path, dir, "config.json") || sp_read_file(path, &io->text, &tn, err)) return -1;
    if (!(io->root = sp_hf_json_loadb(io->text, tn, JSON_REJECT_DUPLICATES, path, err))) return -1;
    const char *a = json_string_value(json_array_get(json_object_get(io->root, "architectures"), 0));
    if (x->kind == EXD_EAGLE3 && a && (!strcmp(a, "Qwen3Eagle3Model") || !strcmp(a, "Gemma4Eagle3Model")))
        return sp_err_set(err, "%s: %s (DeepSpec EAGLE-3: q/k norms, %s taps) is not exported: llama.cpp's eagle3 runs "
                               "only the three-tap Llama-block layout (LlamaForCausalLMEagle3)", path, a,
                          "any number of");
    if (sp_st_open_dir(&io->st, dir, err)) return -1;
    char hn[64];
    x->eagle_names = sp_st_find(io->st, sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECULATORS, SP_ARCH_LLAMA, SP_TN_HIDDEN_NORM, 0,
                                                             hn, sizeof hn))
                         ? SP_TN_EAGLE3_SPECULATORS
                         : SP_TN_EAGLE3_SPECFORGE;
    if (x->kind == EXD_ASSISTANT ? assistant_prepare(x, io->text, path, err)
        : x->kind == EXD_EAGLE3  ? eagle3_prepare(x, io->text, io->root, path, err)
                                 : dflash_prepare(x, io->text, io->root, path, err))
        return -1;
    if (check_stored(x, io->st, dir, err) || (x->kind == EXD_EAGLE3 && eagle3_d2t(x, dir, err))) return -1;
    return 0;
}

/* general.* and the kind's metadata keys */
static int exd_keys(gguf_writer *w, exd_t *x, const char *dir, const export_gguf_opts *o, sp_err *err) {
    char base_buf[256]; /* general.name default: the drafter directory's base name */
    snprintf(base_buf, sizeof base_buf, "%s", dir);
    for (size_t n = strlen(base_buf); n > 1 && base_buf[n - 1] == '/'; n--) base_buf[n - 1] = 0;
    const char *base = strrchr(base_buf, '/') ? strrchr(base_buf, '/') + 1 : base_buf;
    int has_conf = find(&x->list, "confidence_head.proj.weight") != NULL;
    const char *arch = x->kind == EXD_ASSISTANT ? "gemma4-assistant" : x->kind == EXD_EAGLE3 ? "eagle3" : "dflash";
    if (sp_gguf_writer_set_str(w, "general.architecture", arch, err) ||
        sp_gguf_writer_set_str(w, "general.name", o->name ? o->name : base, err))
        return -1;
    return x->kind == EXD_ASSISTANT ? assistant_gguf_keys(w, x, err)
           : x->kind == EXD_EAGLE3  ? eagle3_gguf_keys(w, x, err)
                                    : dflash_gguf_keys(w, x->kind, &x->dc, &x->k, has_conf, err);
}

/* the quantized weight types a drafter may store (quantize --drafter) with their llama_ftype */
static const struct {
    sp_dtype dt;
    ggml_type type;
    uint32_t file_type;
} QUANT_TYPES[] = {{SP_DT_Q8_0, GGML_TYPE_Q8_0, 7},
                   {SP_DT_Q4_0, GGML_TYPE_Q4_0, 2},
                   {SP_DT_Q4_K, GGML_TYPE_Q4_K, 15},
                   {SP_DT_Q6_K, GGML_TYPE_Q6_K, 18}};
#define N_QUANT_TYPES (int)(sizeof QUANT_TYPES / sizeof QUANT_TYPES[0])

/* a weight stored as llama.cpp blocks goes into the GGUF byte for byte, in its own type (counted
 * in n_q, one count per QUANT_TYPES entry); --type cannot re-encode it */
static int exd_quantized(gguf_writer *w, const exd_tensor *t, const char *dir, const export_gguf_opts *o, int *n_q,
                         sp_err *err) {
    int q = 0;
    while (q < N_QUANT_TYPES && QUANT_TYPES[q].dt != t->qt) q++;
    if (q == N_QUANT_TYPES)
        return sp_err_set(err, "%s: tensor %s is stored as %s blocks, which export does not write", dir, t->hf,
                          sp_dtype_name(t->qt));
    ggml_type type = QUANT_TYPES[q].type;
    if (o->weight_type >= 0 && o->weight_type != (int)type)
        return sp_err_set(err, "%s: tensor %s is stored as %s blocks; export writes them as they are, so --type %s "
                               "cannot apply (leave --type out, or export the unquantized drafter)",
                          dir, t->hf, sp_dtype_name(t->qt), sp_ggml_type_name((ggml_type)o->weight_type));
    n_q[q]++;
    int64_t ne[2] = {t->shape[1], t->shape[0]};
    return sp_gguf_writer_add_tensor(w, t->gg, type, 2, ne, t->qdata, NULL, NULL, err);
}

/* general.file_type: the quantized type most weights have, else from the float counts */
static uint32_t exd_file_type(const int *n_2d, const int *n_q) {
    int best = 0;
    for (int q = 1; q < N_QUANT_TYPES; q++)
        if (n_q[q] > n_q[best]) best = q;
    return n_q[best] > n_2d[0] + n_2d[1] + n_2d[2] ? QUANT_TYPES[best].file_type : sp_export_file_type(n_2d);
}

/* every tensor of the list in its GGUF type (2-D weights: as stored when quantized (counted in
 * n_q), else o->weight_type or as stored (counted in n_2d[f32, f16, bf16])), then d2t and the
 * RoPE divisors */
static int exd_tensors(gguf_writer *w, exd_t *x, export_tensor_src *srcs, const char *dir, const export_gguf_opts *o,
                       int *n_2d, int *n_q, sp_err *err) {
    for (int i = 0; i < x->list.n; i++) {
        const exd_tensor *t = &x->list.v[i];
        if (!t->t || t->skip) continue;
        if (t->qt) {
            if (x->kind == EXD_EAGLE3 && (strstr(t->hf, "self_attn.q_proj.") || strstr(t->hf, "self_attn.k_proj.")))
                return sp_err_set(err, "%s: tensor %s is stored as %s blocks; llama.cpp's eagle3 needs its rows "
                                       "permuted, which export does only for float weights",
                                  dir, t->hf, sp_dtype_name(t->qt));
            if (exd_quantized(w, t, dir, o, n_q, err)) return -1;
            continue;
        }
        ggml_type type = GGML_TYPE_F32;
        if (t->ndim == 2) {
            sp_dtype dt = t->t->dtype;
            if (o->weight_type >= 0) type = (ggml_type)o->weight_type;
            else type = dt == SP_DT_BF16 ? GGML_TYPE_BF16 : dt == SP_DT_F16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
            n_2d[type == GGML_TYPE_F32 ? 0 : type == GGML_TYPE_F16 ? 1 : 2]++;
        }
        if (t->t->dtype != SP_DT_F32 && t->t->dtype != SP_DT_F16 && t->t->dtype != SP_DT_BF16)
            return sp_err_set(err, "%s: tensor %s is stored as %s (export takes f32 / f16 / bf16)", dir, t->hf,
                              sp_dtype_name(t->t->dtype));
        int64_t row = t->ndim == 2 ? t->shape[1] : t->shape[0], ne[2] = {row, t->shape[0]};
        srcs[i] = (export_tensor_src){.src = t->t, .type = type, .row = row};
        if (x->kind == EXD_EAGLE3 && (strstr(t->hf, "self_attn.q_proj.") || strstr(t->hf, "self_attn.k_proj.")))
            srcs[i].perm_head_dim = x->dc.layers[0].head_dim; /* llama.cpp's adjacent-pair RoPE */
        if (sp_gguf_writer_add_tensor(w, t->gg, type, t->ndim, ne, NULL, sp_export_fill_tensor, &srcs[i], err))
            return -1;
    }
    if (x->d2t) {
        int64_t ne[1] = {x->draft_vocab};
        char gd[16];
        sp_tensor_gguf_name_in(SP_TN_EAGLE3_SPECFORGE, SP_ARCH_LLAMA, SP_TN_D2T, -1, gd, sizeof gd);
        if (sp_gguf_writer_add_tensor(w, gd, GGML_TYPE_I64, 1, ne, x->d2t, NULL, NULL, err)) return -1;
    }
    if (x->n_freqs > 0) {
        int64_t ne[1] = {x->n_freqs};
        if (sp_gguf_writer_add_tensor(w, "rope_freqs.weight", GGML_TYPE_F32, 1, ne, x->rope_freqs, NULL, NULL, err))
            return -1;
    }
    return 0;
}

static int export_kind(exd_kind kind, const char *dir, const char *target_dir, const char *out_path,
                       const export_gguf_opts *o, sp_err *err) {
    exd_t *x = calloc(1, sizeof *x);
    exd_io io = {0};
    int rc = -1, n_2d[3] = {0}, n_q[N_QUANT_TYPES] = {0};
    if (!x) return sp_err_set(err, "out of memory");
    x->kind = kind;
    if (exd_load(x, &io, dir, target_dir, err)) goto done;
    io.w = sp_gguf_writer_create();
    io.srcs = calloc((size_t)x->list.n, sizeof *io.srcs);
    if (!io.w || !io.srcs) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    if (exd_keys(io.w, x, dir, o, err) || exd_tensors(io.w, x, io.srcs, dir, o, n_2d, n_q, err)) goto done;
    /* the target's vocabulary: llama.cpp sizes token_embd / output by its token list */
    if (sp_export_tokenizer_keys(io.w, &x->tc, target_dir, o, err)) goto done;
    if ((x->kind == EXD_ZLAB || x->kind == EXD_DSPARK) &&
        sp_gguf_writer_set_u32(io.w, "tokenizer.ggml.mask_token_id", (uint32_t)x->k.mask_id, err))
        goto done;
    if (sp_gguf_writer_set_u32(io.w, "general.file_type", exd_file_type(n_2d, n_q), err)) goto done;
    if (sp_gguf_writer_save(io.w, out_path, err)) goto done;
    rc = 0;
done:
    sp_gguf_writer_free(io.w);
    free(io.srcs);
    if (io.st) sp_st_close(io.st);
    json_decref(io.root);
    free(io.text);
    free(x->list.v);
    free(x->rope_freqs);
    free(x->d2t);
    free(x);
    return rc;
}

/* ---- the export entries of the drafter kinds (the table of kinds, src/api/drafter_kinds.c) ---- */

int sp_export_dflash_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                          sp_err *err) {
    return export_kind(EXD_ZLAB, dir, target_dir, out_path, o, err);
}

int sp_export_dspark_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                          sp_err *err) {
    return export_kind(EXD_DSPARK, dir, target_dir, out_path, o, err);
}

int sp_export_assistant_gguf(const char *dir, const char *target_dir, const char *out_path,
                             const export_gguf_opts *o, sp_err *err) {
    return export_kind(EXD_ASSISTANT, dir, target_dir, out_path, o, err);
}

int sp_export_eagle3_gguf(const char *dir, const char *target_dir, const char *out_path, const export_gguf_opts *o,
                          sp_err *err) {
    return export_kind(EXD_EAGLE3, dir, target_dir, out_path, o, err);
}
