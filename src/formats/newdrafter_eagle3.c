/* newdrafter_eagle3.c — random EAGLE-3 drafter checkpoints for a target (newdrafter.h;
 * the layouts in docs/EAGLE3.md §1).
 *
 * preset "specforge" (default): LlamaForCausalLMEagle3, a Llama layer of the target's head shape
 *   and the target's RoPE, tensors midlayer.* / fc / norm / lm_head [draft_vocab, H] / d2t / t2d,
 *   no embedding (the target's is used). draft_vocab_size: 32000 capped at V, a quarter of V on
 *   tiny targets (so the reduced map is exercised); the draft ids map to evenly spaced target ids.
 *   No eagle_aux_hidden_state_layer_ids (the loader's default taps apply), except for a target of
 *   fewer than 4 layers, where the default is invalid: three ids spread over 1..N.
 * preset "deepspec": Qwen3Eagle3Model / Gemma4Eagle3Model, a copy of the target (text) config with
 *   target_layer_ids (sp_newdrafter_tap_ids, up to 5), ttt_length 7, step_loss_decay 0.8,
 *   draft_num_hidden_layers 1; tensors layers.0.* (q/k norms; Gemma's four norms, no v_proj when
 *   k_eq_v) and copies of the target's embedding and LM head.
 * --set overrides apply to the config before the tensors are shaped from it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfjson.h"
#include "newdrafter.h"
#include "newmodel.h"
#include "presets.h"
#include "safetensors.h"
#include "tensor_names.h"

static char *config_text(const newdrafter_opts *o, const sp_config *tc, json_t *troot, int deepspec, sp_err *err) {
    int gemma = tc->arch == SP_ARCH_GEMMA4, N = tc->n_layers, H = tc->hidden_size, V = tc->vocab_size;
    const char *dtype = o->dtype == SP_DT_F32 ? "float32" : o->dtype == SP_DT_BF16 ? "bfloat16"
                        : !strcmp(tc->torch_dtype, "float32") ? "float32" : "bfloat16";
    json_t *d;
    if (!deepspec) {
        int Vd = H < 512 ? V / 4 : V < 32000 ? V : 32000;
        d = json_object();
        json_object_set_new(d, "architectures", json_pack("[s]", "LlamaForCausalLMEagle3"));
        json_object_set_new(d, "model_type", json_string("llama"));
        json_object_set_new(d, "hidden_size", json_integer(H));
        json_object_set_new(d, "intermediate_size", json_integer(tc->ffn_dim));
        json_object_set_new(d, "num_attention_heads", json_integer(tc->n_heads));
        json_object_set_new(d, "num_key_value_heads", json_integer(tc->n_kv_heads));
        json_object_set_new(d, "head_dim", json_integer(tc->head_dim));
        json_object_set_new(d, "num_hidden_layers", json_integer(1));
        json_object_set_new(d, "rms_norm_eps", json_real(tc->rms_eps));
        json_object_set_new(d, "rope_theta", json_real(tc->rope.theta));
        if (!gemma && json_object_get(troot, "rope_scaling"))
            json_object_set_new(d, "rope_scaling", json_deep_copy(json_object_get(troot, "rope_scaling")));
        json_object_set_new(d, "max_position_embeddings", json_integer(tc->max_pos));
        json_object_set_new(d, "vocab_size", json_integer(V));
        json_object_set_new(d, "draft_vocab_size", json_integer(Vd < 1 ? 1 : Vd));
        json_object_set_new(d, "target_hidden_size", json_integer(H));
        json_object_set_new(d, "hidden_act", json_string("silu"));
        json_object_set_new(d, "tie_word_embeddings", json_false());
        json_object_set_new(d, "torch_dtype", json_string(dtype));
        if (N < 4) { /* the loader's default taps (inputs of layers 2, N/2, N-3) need 4 layers: three spread over 1..N */
            json_t *a = json_array();
            for (int i = 0; i < 3; i++) json_array_append_new(a, json_integer(1 + i * (N - 1) / 2));
            json_object_set_new(d, "eagle_aux_hidden_state_layer_ids", a);
        }
    } else {
        json_t *src = troot;
        if (gemma && json_is_object(json_object_get(troot, "text_config"))) src = json_object_get(troot, "text_config");
        d = json_deep_copy(src);
        json_object_set_new(d, "architectures", json_pack("[s]", gemma ? "Gemma4Eagle3Model" : "Qwen3Eagle3Model"));
        if (!gemma) json_object_set_new(d, "model_type", json_string("qwen3")); /* the Qwen3 block, also for Llama */
        if (gemma) {
            json_object_set_new(d, "model_type", json_string("gemma4_text"));
            json_object_set_new(d, "num_kv_shared_layers", json_integer(0));
            json_object_set_new(d, "hidden_size_per_layer_input", json_integer(0));
            json_object_del(d, "vocab_size_per_layer_input");
        }
        int m = N - 1 < 5 ? N - 1 : 5, ids[5];
        if (m < 1) {
            json_decref(d);
            sp_err_set(err, "target has %d layers: a drafter needs at least 2", N);
            return NULL;
        }
        sp_newdrafter_tap_ids(N, m, ids);
        json_t *a = json_array();
        for (int i = 0; i < m; i++) json_array_append_new(a, json_integer(ids[i]));
        json_object_set_new(d, "target_layer_ids", a);
        json_object_set_new(d, "ttt_length", json_integer(7));
        json_object_set_new(d, "step_loss_decay", json_real(0.8));
        json_object_set_new(d, "draft_num_hidden_layers", json_integer(1));
        json_object_set_new(d, "tie_word_embeddings", json_false());
        json_object_del(d, "torch_dtype");
        json_object_set_new(d, "dtype", json_string(dtype));
    }
    int rc = 0;
    for (int i = 0; i < o->n_sets && !rc; i++) rc = sp_preset_apply_set(d, o->sets[i], err);
    char *text = rc ? NULL : json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(d);
    if (!rc && !text) sp_err_set(err, "out of memory");
    return text;
}

typedef struct {
    char name[112];
    int64_t shape[2];
    int ndim;
    hf_init init;
} spec_t;

static int json_int_or(json_t *o, const char *key, int def) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* what one writer call holds */
typedef struct {
    sp_config tc, dc;
    json_t *troot, *dj;
    char *ttext, *text;
    st_set *ts;
    st_writer *w;
    void *bufs[32]; /* every buffer w refers to */
    int nb, deepspec;
    sp_dtype dt;
    int64_t H, V, Vd, m;
} e3w_t;

static void e3w_free(e3w_t *e) {
    for (int k = 0; k < e->nb; k++) free(e->bufs[k]);
    sp_st_writer_free(e->w);
    sp_st_close(e->ts);
    json_decref(e->troot);
    json_decref(e->dj);
    free(e->ttext);
    free(e->text);
}

/* the target's config and the draft config, checked against each other */
static int e3w_configs(e3w_t *e, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    char path[4096];
    size_t tn;
    if (sp_path_join(path, sizeof path, target_dir, "config.json") || sp_read_file(path, &e->ttext, &tn, err))
        return -1;
    if (sp_config_parse(&e->tc, e->ttext, path, err)) return -1;
    if (!(e->troot = sp_hf_json_loadb(e->ttext, tn, JSON_REJECT_DUPLICATES, path, err))) return -1;
    if (!(e->text = config_text(o, &e->tc, e->troot, e->deepspec, err))) return -1;
    if (sp_config_parse(&e->dc, e->text, "draft config.json", err)) return -1;
    if (!(e->dj = json_loads(e->text, 0, NULL))) return sp_err_set(err, "out of memory");
    e->H = e->dc.hidden_size, e->V = e->tc.vocab_size;
    e->Vd = e->deepspec ? e->V : json_int_or(e->dj, "draft_vocab_size", (int)e->V);
    e->m = e->deepspec ? (int64_t)json_array_size(json_object_get(e->dj, "target_layer_ids")) : 3;
    e->dt = !strcmp(e->dc.torch_dtype, "float32") ? SP_DT_F32 : SP_DT_BF16;
    if (e->dc.hidden_size != e->tc.hidden_size || e->dc.vocab_size != e->tc.vocab_size || e->Vd < 1 ||
        e->Vd > e->V || e->m < 1)
        return sp_err_set(err, "draft config: hidden_size %d / vocab_size %d must equal the target's (%d / %d), "
                               "draft_vocab_size %lld must be in 1..%lld", e->dc.hidden_size, e->dc.vocab_size,
                          e->tc.hidden_size, e->tc.vocab_size, (long long)e->Vd, (long long)e->V);
    return 0;
}

/* the tensors of the layout: fc, the one layer (SpecForge midlayer.*, DeepSpec layers.0.*), the
 * norm and, for SpecForge, the reduced LM head; sp[24], returns the count */
static int e3w_specs(const e3w_t *e, spec_t *sp) {
    const sp_config *dc = &e->dc;
    int gemma = dc->arch == SP_ARCH_GEMMA4, kev = gemma && dc->attention_k_eq_v, deepspec = e->deepspec;
    int64_t H = e->H, NH = dc->n_heads, I = dc->ffn_dim, m = e->m, Vd = e->Vd;
    int64_t D = gemma ? dc->global_head_dim : dc->head_dim, KVH = kev ? dc->n_global_kv_heads : dc->n_kv_heads;
    const sp_tn_layout lay = deepspec ? SP_TN_EAGLE3_DEEPSPEC : SP_TN_EAGLE3_SPECFORGE; /* names: tensor_names.h */
    int n = 0;
#define ADD(role, s0, s1, nd, in) (sp[n] = (spec_t){"", {s0, s1}, nd, in}, \
                                   sp_tensor_hf_name_in(lay, dc->arch, role, -1, sp[n].name, sizeof sp[n].name), n++)
#define ADDL(role, s0, s1, nd, in) (sp[n] = (spec_t){"", {s0, s1}, nd, in}, \
                                    sp_tensor_hf_name_in(lay, dc->arch, role, 0, sp[n].name, sizeof sp[n].name), n++)
    ADD(SP_TN_FC, H, m * H, 2, HF_INIT_PROJ);
    ADDL(SP_TN_HIDDEN_NORM, H, 0, 1, HF_INIT_NORM);
    ADDL(SP_TN_ATTN_NORM, H, 0, 1, HF_INIT_NORM);
    ADDL(SP_TN_Q, NH * D, 2 * H, 2, HF_INIT_PROJ);
    ADDL(SP_TN_K, KVH * D, 2 * H, 2, HF_INIT_PROJ);
    if (!kev) ADDL(SP_TN_V, KVH * D, 2 * H, 2, HF_INIT_PROJ);
    ADDL(SP_TN_O, H, NH * D, 2, HF_INIT_PROJ);
    if (deepspec) {
        ADDL(SP_TN_Q_NORM, D, 0, 1, HF_INIT_NORM);
        ADDL(SP_TN_K_NORM, D, 0, 1, HF_INIT_NORM);
    }
    ADDL(gemma ? SP_TN_ATTN_POST_NORM : SP_TN_FFN_NORM, H, 0, 1, HF_INIT_NORM); /* post_attention_layernorm */
    if (gemma) {
        ADDL(SP_TN_FFN_NORM, H, 0, 1, HF_INIT_NORM);
        ADDL(SP_TN_FFN_POST_NORM, H, 0, 1, HF_INIT_NORM);
    }
    ADDL(SP_TN_GATE, I, H, 2, HF_INIT_PROJ);
    ADDL(SP_TN_UP, I, H, 2, HF_INIT_PROJ);
    ADDL(SP_TN_DOWN, H, I, 2, HF_INIT_PROJ);
    ADD(SP_TN_FINAL_NORM, H, 0, 1, HF_INIT_NORM);
    if (!deepspec) ADD(SP_TN_LM_HEAD, Vd, H, 2, HF_INIT_EMBED);
#undef ADD
#undef ADDL
    return n;
}

/* f[numel] → the writer's dtype, in place (element i is read before slot i is written) */
static void to_dtype(float *f, int64_t numel, sp_dtype dt) {
    if (dt != SP_DT_BF16) return;
    uint16_t *b = (uint16_t *)f;
    for (int64_t i = 0; i < numel; i++) b[i] = sp_f32_to_bf16(f[i]);
}

/* random weights for sp[0..n): tensor k's values depend on (seed, k) only */
static int e3w_random(e3w_t *e, const spec_t *sp, int n, uint64_t seed, sp_err *err) {
    for (int k = 0; k < n; k++) {
        hf_tensor_spec t = {.ndim = sp[k].ndim, .shape = {sp[k].shape[0], sp[k].shape[1]}, .init = sp[k].init,
                            .layer = -1};
        memcpy(t.name, sp[k].name, sizeof t.name); /* both 112 bytes, NUL-terminated */
        int64_t numel = t.shape[0] * (t.ndim > 1 ? t.shape[1] : 1);
        float *f = malloc((size_t)numel * sizeof(float));
        if (!f) return sp_err_set(err, "out of memory for %s", t.name);
        e->bufs[e->nb++] = f;
        sp_hf_tensor_fill(&t, k, seed, 1.0f, f, 0, numel);
        to_dtype(f, numel, e->dt);
        if (sp_st_writer_add_ref(e->w, t.name, e->dt, t.ndim, t.shape, f, err)) return -1;
    }
    return 0;
}

/* SpecForge's d2t / t2d: draft id i ↔ target id floor(i·V / Vd) */
static int e3w_vocab_map(e3w_t *e, sp_err *err) {
    int64_t V = e->V, Vd = e->Vd;
    int64_t *d2t = malloc(sizeof(int64_t) * (size_t)Vd);
    unsigned char *t2d = calloc((size_t)V, 1);
    if (d2t) e->bufs[e->nb++] = d2t;
    if (t2d) e->bufs[e->nb++] = t2d;
    if (!d2t || !t2d) return sp_err_set(err, "out of memory");
    for (int64_t i = 0; i < Vd; i++) {
        int64_t id = i * V / Vd;
        d2t[i] = id - i;
        t2d[id] = 1;
    }
    int64_t s1[1] = {Vd}, s2[1] = {V};
    char n1[32], n2[32];
    if (sp_st_writer_add_ref(e->w, sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECFORGE, e->dc.arch, SP_TN_D2T, -1, n1, sizeof n1),
                             SP_DT_I64, 1, s1, d2t, err) ||
        sp_st_writer_add_ref(e->w, sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECFORGE, e->dc.arch, SP_TN_T2D, -1, n2, sizeof n2),
                             SP_DT_BOOL, 1, s2, t2d, err))
        return -1;
    return 0;
}

/* DeepSpec ships copies of the target's embedding and LM head */
static int e3w_target_tables(e3w_t *e, const char *target_dir, sp_err *err) {
    int64_t V = e->V, H = e->H, shape[2] = {V, H};
    if (sp_st_open_dir(&e->ts, target_dir, err)) return -1;
    char en[160], rel[160], lm[160], names[2][64];
    snprintf(en, sizeof en, "%s%s", e->tc.tensor_prefix, sp_tensor_hf_name(e->tc.arch, SP_TN_EMBED, -1, rel, sizeof rel));
    sp_tensor_hf_name(e->tc.arch, SP_TN_LM_HEAD, -1, lm, sizeof lm); /* never prefixed */
    const st_tensor *src[2];
    if (sp_st_get(e->ts, en, SP_DT_UNKNOWN, 2, shape, &src[0], err)) return -1;
    if (e->tc.tie_embeddings) src[1] = src[0];
    else if (sp_st_get(e->ts, lm, SP_DT_UNKNOWN, 2, shape, &src[1], err)) return -1;
    sp_tensor_hf_name_in(SP_TN_EAGLE3_DEEPSPEC, e->dc.arch, SP_TN_EMBED, -1, names[0], sizeof names[0]);
    sp_tensor_hf_name_in(SP_TN_EAGLE3_DEEPSPEC, e->dc.arch, SP_TN_LM_HEAD, -1, names[1], sizeof names[1]);
    for (int i = 0; i < 2; i++) {
        float *f = malloc((size_t)(V * H) * sizeof(float));
        if (!f) return sp_err_set(err, "out of memory");
        e->bufs[e->nb++] = f;
        sp_to_f32(f, src[i]->data, src[i]->dtype, (size_t)(V * H));
        to_dtype(f, V * H, e->dt);
        if (sp_st_writer_add_ref(e->w, names[i], e->dt, 2, shape, f, err)) return -1;
    }
    return 0;
}

/* config.json (newline-terminated) and model.safetensors into dir */
static int e3w_save(e3w_t *e, const char *dir, sp_err *err) {
    char path[4096];
    size_t tl = strlen(e->text);
    if (sp_mkdir_p(dir, err) || sp_path_join(path, sizeof path, dir, "config.json")) return -1;
    char *t2 = realloc(e->text, tl + 2);
    if (!t2) return sp_err_set(err, "out of memory");
    e->text = t2;
    e->text[tl] = '\n';
    e->text[tl + 1] = 0;
    if (sp_write_file_atomic(path, e->text, tl + 1, err)) return -1;
    if (sp_path_join(path, sizeof path, dir, "model.safetensors") || sp_st_writer_save(e->w, path, err)) return -1;
    return 0;
}

int sp_newdrafter_eagle3_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    const char *preset = o->preset ? o->preset : "specforge";
    e3w_t e = {.deepspec = !strcmp(preset, "deepspec")};
    if (!e.deepspec && strcmp(preset, "specforge"))
        return sp_err_set(err, "new drafter: unknown preset \"%s\" for --arch eagle3 (specforge, deepspec)", preset);
    if (!(e.w = sp_st_writer_create())) return sp_err_set(err, "out of memory");
    spec_t sp[24];
    int rc = -1;
    if (e3w_configs(&e, target_dir, o, err) || e3w_random(&e, sp, e3w_specs(&e, sp), o->seed, err)) goto done;
    if (e.deepspec ? e3w_target_tables(&e, target_dir, err) : e3w_vocab_map(&e, err)) goto done;
    rc = e3w_save(&e, dir, err);
done:
    e3w_free(&e);
    return rc;
}
