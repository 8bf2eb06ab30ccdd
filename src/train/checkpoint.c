/* checkpoint.c — drafter checkpoints in the published layout + exact-resume state (checkpoint.h). */
#include "train/checkpoint.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "formats/safetensors.h"
#include "formats/hfjson.h"
#include "kernels/quant.h"
#include "formats/tensor_names.h"

#define TEMP_PLACEHOLDER "@train_temperature@"

void sp_tr_format_double(char *buf, size_t n, double x) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* replace the quoted placeholder in *text with d's temperatures: a number, or an array of them;
 * 0 / -1 (out of memory) */
static int temps_text(char **text, const tr_dims *d) {
    char val[TR_MAX_TEMPS * 32 + 8], num[32];
    size_t k = 0;
    if (d->n_temps > 1) val[k++] = '[';
    for (int i = 0; i < d->n_temps; i++) {
        sp_tr_format_double(num, sizeof num, d->temps[i]);
        k += (size_t)snprintf(val + k, sizeof val - k, "%s%s", i ? ", " : "", num);
    }
    if (d->n_temps > 1) val[k++] = ']';
    val[k] = 0;
    char *at = strstr(*text, "\"" TEMP_PLACEHOLDER "\"");
    if (!at) return 0;
    size_t pre = (size_t)(at - *text), old = strlen(TEMP_PLACEHOLDER) + 2, rest = strlen(at + old);
    char *s = malloc(pre + k + rest + 1);
    if (!s) return -1;
    memcpy(s, *text, pre);
    memcpy(s + pre, val, k);
    memcpy(s + pre + k, at + old, rest + 1);
    free(*text);
    *text = s;
    return 0;
}

/* A mixture-of-experts target's drafter is a dense block of the same architecture: a Qwen3-MoE
 * target's a Qwen3 block of intermediate_size, a Gemma-4 MoE target's a Gemma-4 block without the
 * expert block. Its config drops the expert keys. */
static void drop_moe_keys(json_t *c) {
    const char *mt = json_string_value(json_object_get(c, "model_type"));
    if (mt && !strcmp(mt, "qwen3_moe")) {
        json_object_set_new(c, "model_type", json_string("qwen3")); /* frees mt */
        const char *moe_keys[] = {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                                  "decoder_sparse_step", "mlp_only_layers", "output_router_logits",
                                  "router_aux_loss_coef", "shared_expert_intermediate_size"};
        for (size_t i = 0; i < sizeof moe_keys / sizeof *moe_keys; i++) json_object_del(c, moe_keys[i]);
    }
    json_t *tc = json_object_get(c, "text_config");
    json_t *g = json_is_object(tc) ? tc : c;
    if (json_is_true(json_object_get(g, "enable_moe_block"))) {
        json_object_set_new(g, "enable_moe_block", json_false());
        const char *gk[] = {"num_experts", "top_k_experts", "moe_intermediate_size"};
        for (size_t i = 0; i < sizeof gk / sizeof *gk; i++) json_object_del(g, gk[i]);
    }
}

int sp_tr_config_json(char **out, const char *target_config, const tr_dims *d, int num_anchors, sp_err *err) {
    json_t *c = sp_hf_json_loadb(target_config, strlen(target_config), JSON_REJECT_DUPLICATES, "target config.json", err);
    if (!c) return -1;
    if (!json_is_object(c)) {
        json_decref(c);
        return sp_err_set(err, "target config.json: the top level must be an object");
    }
    /* A Llama target's drafter keeps the Qwen3 block of the published drafter code (z-lab
     * DFlashDraftModel and DeepSpec Qwen3DSparkModel always build q_norm / k_norm): the config
     * says model_type "qwen3" so loaders read those norms, and keeps the target's rope_theta,
     * rope_scaling (llama3) and rms_norm_eps, which the drafter's RoPE and norms use. */
    const char *mt = json_string_value(json_object_get(c, "model_type"));
    if (mt && !strcmp(mt, "llama")) json_object_set_new(c, "model_type", json_string("qwen3"));
    drop_moe_keys(c);
    json_t *taps = json_array(), *types = json_array();
    for (int i = 0; i < d->m; i++) json_array_append_new(taps, json_integer(d->tap_layers[i]));
    for (int i = 0; i < d->L; i++) json_array_append_new(types, json_string("full_attention"));
    if (d->arch == TR_ARCH_DFLASH_ZLAB) { /* z-lab layout (docs/DFLASH.md §1) */
        json_object_set_new(c, "architectures", json_pack("[s]", "DFlashDraftModel"));
        json_object_set_new(c, "num_hidden_layers", json_integer(d->L));
        json_object_set_new(c, "num_target_layers", json_integer(d->n_target_layers));
        json_object_set_new(c, "block_size", json_integer(d->B));
        json_object_set_new(c, "dflash_config", json_pack("{s:i, s:o}", "mask_token_id", d->mask_id,
                                                           "target_layer_ids", taps));
        json_object_set_new(c, "layer_types", types);
        json_object_set_new(c, "tie_word_embeddings", json_false());
        json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
        goto dump;
    }
    if (d->gemma) { /* Gemma4DSparkModel: the text config, no PLE / KV sharing, k_eq_v (docs/DSPARK.md §3, docs/EXPORT.md) */
        json_t *text = json_object_get(c, "text_config");
        if (json_is_object(text)) {
            json_incref(text);
            json_decref(c);
            c = text;
        }
        json_object_set_new(c, "architectures", json_pack("[s]", "Gemma4DSparkModel"));
        json_object_set_new(c, "model_type", json_string("gemma4_text"));
        json_object_set_new(c, "target_model_type", json_string("gemma4"));
        json_object_set_new(c, "target_text_model_type", json_string("gemma4_text"));
        json_object_set_new(c, "num_kv_shared_layers", json_integer(0));
        json_object_set_new(c, "hidden_size_per_layer_input", json_integer(0));
        json_object_del(c, "vocab_size_per_layer_input");
        json_object_set_new(c, "attention_k_eq_v", json_true());
    } else {
        json_object_set_new(c, "architectures", json_pack("[s]", "Qwen3DSparkModel"));
    }
    json_object_set_new(c, "num_hidden_layers", json_integer(d->L));
    json_object_set_new(c, "num_target_layers", json_integer(d->n_target_layers));
    json_object_set_new(c, "block_size", json_integer(d->B));
    json_object_set_new(c, "target_layer_ids", taps);
    json_object_set_new(c, "mask_token_id", json_integer(d->mask_id));
    json_object_set_new(c, "num_anchors", json_integer(num_anchors));
    json_object_set_new(c, "layer_types", types);
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "markov_rank", json_integer(d->r));
    if (d->r > 0) json_object_set_new(c, "markov_head_type", json_string(sp_tr_markov_name(d->markov)));
    else json_object_del(c, "markov_head_type");
    json_object_set_new(c, "enable_confidence_head", json_boolean(d->conf));
    json_object_set_new(c, "confidence_head_with_markov", json_boolean(d->conf && d->conf_with_markov));
    /* the sampling temperature(s) the drafter was trained for (train --temp): a placeholder that
     * temps_text replaces, so that 0.8 reads 0.8 and not jansson's 17 digits */
    if (d->n_temps > 0) json_object_set_new(c, "train_temperature", json_string(TEMP_PLACEHOLDER));
    json_object_set_new(c, "dtype", json_string("bfloat16"));
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
dump:
    *out = json_dumps(c, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(c);
    if (!*out) return sp_err_set(err, "config.json: out of memory");
    if (d->n_temps > 0 && temps_text(out, d)) return sp_err_set(err, "config.json: out of memory");
    return 0;
}

static int write_text(const char *dir, const char *name, const char *text, sp_err *err) {
    char path[4096];
    sp_path_join(path, sizeof path, dir, name);
    return sp_write_file_atomic(path, text, strlen(text), err);
}

int sp_tr_drafter_ckpt_tensors(const tr_model *m, tr_ckpt_tensor *t) {
    for (int i = 0; i < m->n_params; i++) {
        const tr_param *p = &m->params[i];
        t[i] = (tr_ckpt_tensor){.name = p->name, .ndim = p->ndim, .shape = p->shape, .off = p->off, .n = p->n};
    }
    return m->n_params;
}

/* EAGLE-3: the vocabulary map as offsets (d2t) and its inverse mask (t2d), added to w */
static int add_vocab_map(st_writer *w, const tr_model *m, int64_t **d2t, uint8_t **t2d, sp_err *err) {
    *d2t = malloc(sizeof(int64_t) * (size_t)m->d.Vd);
    *t2d = calloc((size_t)m->d.V, 1);
    if (!*d2t || !*t2d) return sp_err_set(err, "d2t / t2d: out of memory");
    for (int i = 0; i < m->d.Vd; i++) {
        (*d2t)[i] = (int64_t)m->d2t[i] - i;
        (*t2d)[m->d2t[i]] = 1;
    }
    int64_t s1[1] = {m->d.Vd}, s2[1] = {m->d.V};
    char n1[16], n2[16]; /* the SpecForge names (formats/tensor_names.h) */
    sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECFORGE, SP_ARCH_LLAMA, SP_TN_D2T, -1, n1, sizeof n1);
    sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECFORGE, SP_ARCH_LLAMA, SP_TN_T2D, -1, n2, sizeof n2);
    return sp_st_writer_add_ref(w, n1, SP_DT_I64, 1, s1, *d2t, err) ||
           sp_st_writer_add_ref(w, n2, SP_DT_BOOL, 1, s2, *t2d, err) ? -1 : 0;
}

int sp_tr_drafter_init_from(const char *dir, tr_model *m, sp_err *err) {
    char path[4096];
    sp_path_join(path, sizeof path, dir, "model.safetensors");
    st_set *s;
    if (sp_st_open_file(&s, path, err)) return -1;
    int rc = 0;
    for (int i = 0; i < m->n_params && !rc; i++) {
        const tr_param *p = &m->params[i];
        const st_tensor *t;
        if (p->ndim == 2) { /* a weight, possibly as blocks (quantize --drafter): dequantized row by row */
            const void *data;
            sp_dtype dt;
            int64_t n = p->shape[0], k = p->shape[1];
            rc = sp_st_get_weight(s, p->name, n, k, &data, &dt, err);
            size_t row = rc ? 0 : sp_dtype_row_bytes(dt, (size_t)k); /* dt is set only on success */
            for (int64_t r = 0; r < n && !rc; r++)
                rc = sp_row_to_f32(m->w + p->off + (size_t)(r * k), (const char *)data + (size_t)r * row, dt, (size_t)k,
                                   err);
        } else if (sp_st_get(s, p->name, SP_DT_UNKNOWN, p->ndim, p->shape, &t, err))
            rc = -1;
        else
            sp_to_f32(m->w + p->off, t->data, t->dtype, p->n);
    }
    sp_st_close(s);
    return rc;
}

int sp_tr_drafter_export(const char *dir, const tr_model *m, const char *config_json, sp_err *err) {
    if (sp_mkdir_p(dir, err)) return -1;
    char path[4096];
    st_writer *w = sp_st_writer_create();
    uint16_t *bf = malloc(m->n * sizeof(uint16_t));
    int64_t *d2t = NULL;
    uint8_t *t2d = NULL;
    int bad = !w || !bf ? sp_err_set(err, "%s: out of memory", dir) : 0;
    for (size_t i = 0; !bad && i < m->n; i++) bf[i] = sp_f32_to_bf16(m->w[i]);
    for (int i = 0; i < m->n_params && !bad; i++) {
        const tr_param *p = &m->params[i];
        bad = sp_st_writer_add_ref(w, p->name, SP_DT_BF16, p->ndim, p->shape, bf + p->off, err);
    }
    if (!bad && m->d2t) bad = add_vocab_map(w, m, &d2t, &t2d, err);
    sp_path_join(path, sizeof path, dir, "model.safetensors");
    if (!bad) bad = sp_st_writer_save(w, path, err);
    sp_st_writer_free(w);
    free(bf);
    free(d2t);
    free(t2d);
    return bad ? -1 : write_text(dir, "config.json", config_json, err);
}

int sp_tr_optimizer_save(const char *dir, const tr_ckpt_tensor *t, int nt, const float *w, const float *m,
                      const float *v, long step, const char *run, sp_err *err) {
    char path[4096], name[160], stepbuf[32];
    st_writer *wr = sp_st_writer_create();
    if (!wr) return sp_err_set(err, "%s: out of memory", dir);
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    int rc = sp_st_writer_set_metadata(wr, "step", stepbuf, err) || sp_st_writer_set_metadata(wr, "run", run, err) ? -1 : 0;
    const char *pfx[3] = {"master.", "adam_m.", "adam_v."};
    const float *src[3] = {w, m, v};
    for (int k = 0; k < 3 && !rc; k++)
        for (int i = 0; i < nt && !rc; i++) {
            snprintf(name, sizeof name, "%s%s", pfx[k], t[i].name);
            rc = sp_st_writer_add_ref(wr, name, SP_DT_F32, t[i].ndim, t[i].shape, src[k] + t[i].off, err);
        }
    sp_path_join(path, sizeof path, dir, "optimizer.safetensors");
    if (!rc) rc = sp_st_writer_save(wr, path, err);
    sp_st_writer_free(wr);
    return rc;
}

int sp_tr_checkpoint_save(const char *dir, const tr_model *m, const float *adam_m, const float *adam_v, long step,
                       const char *run, const char *config_json, const char *state_json, sp_err *err) {
    /* optimizer.safetensors last: everything resume needs, the step in its metadata. Written
     * after the files derived from it, so a run killed part-way through a checkpoint resumes
     * from the previous one and rewrites them all (a finished run's model.safetensors can never
     * lag behind its optimizer state). */
    if (sp_tr_drafter_export(dir, m, config_json, err) || write_text(dir, "trainer_state.json", state_json, err))
        return -1;
    tr_ckpt_tensor t[sizeof m->params / sizeof m->params[0]];
    int nt = sp_tr_drafter_ckpt_tensors(m, t);
    return sp_tr_optimizer_save(dir, t, nt, m->w, adam_m, adam_v, step, run, err);
}

int sp_tr_optimizer_load(const char *dir, const tr_ckpt_tensor *t, int nt, float *w, float *m, float *v, long *step,
                      const char *run, sp_err *err) {
    char path[4096], name[160];
    sp_path_join(path, sizeof path, dir, "optimizer.safetensors");
    st_set *s;
    if (sp_st_open_file(&s, path, err)) return -1;
    const char *sv = sp_st_metadata(s, "step");
    char *end = NULL;
    long st = sv ? strtol(sv, &end, 10) : -1;
    if (!sv || *end || st < 0) {
        sp_st_close(s);
        return sp_err_set(err, "%s: metadata \"step\" missing or not a non-negative integer", path);
    }
    const char *stored = sp_st_metadata(s, "run");
    if (!stored || strcmp(stored, run) != 0) {
        sp_err_set(err, "%s: made by a run with other settings (%s) than this one (%s); resume needs the same "
                        "arguments", path, stored ? stored : "none recorded", run);
        sp_st_close(s);
        return -1;
    }
    const char *pfx[3] = {"master.", "adam_m.", "adam_v."};
    float *dst[3] = {w, m, v};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < nt; i++) {
            const st_tensor *tt;
            snprintf(name, sizeof name, "%s%s", pfx[k], t[i].name);
            if (sp_st_get(s, name, SP_DT_F32, t[i].ndim, t[i].shape, &tt, err)) {
                sp_st_close(s);
                return sp_err_wrap(err, "resume (the checkpoint was made with other model settings?)");
            }
            memcpy(dst[k] + t[i].off, tt->data, t[i].n * sizeof(float));
        }
    sp_st_close(s);
    *step = st;
    return 0;
}

int sp_tr_checkpoint_load(const char *dir, tr_model *m, float *adam_m, float *adam_v, long *step, const char *run,
                       sp_err *err) {
    tr_ckpt_tensor t[sizeof m->params / sizeof m->params[0]];
    int nt = sp_tr_drafter_ckpt_tensors(m, t);
    return sp_tr_optimizer_load(dir, t, nt, m->w, adam_m, adam_v, step, run, err);
}
