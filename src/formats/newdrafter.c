/* newdrafter.c — random DFlash / DSpark drafter checkpoints for a target (see newdrafter.h).
 *
 * Pipeline: target config.json → draft config (z-lab: a fresh Qwen3-shaped config with a
 * dflash_config and the target's rope_theta / rope_scaling / rms_norm_eps; DeepSpec: a copy of
 * the target's (text) config with the docs/DSPARK.md §1 overrides, model_type "qwen3" for a Llama target) →
 * --set overrides → derived keys (layer_types, tap ids) unless overridden → sp_config (the
 * target parser, as a shape check) → tensors (the decoder layers of newmodel's list without
 * prefix, fc, hidden_norm, Markov and confidence heads; DeepSpec also the target's embedding
 * and LM head, referenced from the target's mmap, converted only when dtypes differ). */
#include "newdrafter.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfjson.h"
#include "newmodel.h"
#include "presets.h"
#include "safetensors.h"
#include "tensor_names.h"

static const char *ZLAB_PRESETS[] = {"b16", NULL};
static const char *DSPARK_PRESETS[] = {"b7", "dflash-b7", NULL};
static const char *EAGLE3_PRESETS[] = {"specforge", "deepspec", NULL};

const char *sp_newdrafter_preset_at(const char *arch, int i) {
    const char **v = !strcmp(arch, "dflash") ? ZLAB_PRESETS : !strcmp(arch, "dspark") ? DSPARK_PRESETS
                     : !strcmp(arch, "eagle3")                                  ? EAGLE3_PRESETS
                                                                                : NULL;
    if (!v || i < 0) return NULL;
    for (int k = 0; k <= i; k++)
        if (!v[k]) return NULL;
    return v[i];
}

int sp_newdrafter_mask_id(const sp_config *tc) {
    if (tc->arch == SP_ARCH_GEMMA4) return 4;          /* Gemma's <mask> (docs/DSPARK.md §1 table) */
    if (tc->vocab_size == 151936) return 151669;       /* Qwen3: first unused embedding row (docs/TOKENIZER.md §5, docs/DFLASH.md §1) */
    if (tc->vocab_size == 128256) return 128002;       /* Llama-3: <|reserved_special_token_0|> (newdrafter.h) */
    return tc->vocab_size - 1;
}

static int round_half_even(double x) {
    double r = floor(x + 0.5);
    if (r - x == 0.5 && fmod(r, 2.0) != 0) r -= 1.0;
    return (int)r;
}

void sp_newdrafter_tap_ids(int N, int m, int *ids) {
    if (m <= 0) return;
    if (m == 1) {
        ids[0] = N / 2 <= N - 2 ? N / 2 : 0;
        return;
    }
    int start = 1, end = N - 3;
    if (end - start < m - 1) start = 0, end = N - 2; /* shallow target: spread over 0..N-2 */
    for (int i = 0; i < m; i++) ids[i] = round_half_even(start + i * (double)(end - start) / (m - 1));
}

static int set_has(const newdrafter_opts *o, const char *key) {
    size_t k = strlen(key);
    for (int i = 0; i < o->n_sets; i++)
        if (!strncmp(o->sets[i], key, k) && (o->sets[i][k] == '=' || o->sets[i][k] == '.')) return 1;
    return 0;
}

static json_t *int_list(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static int json_int_or(json_t *o, const char *key, int def) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* The draft config as JSON text (malloc'd), and whether it is z-lab. */
static char *draft_config(const newdrafter_opts *o, const sp_config *tc, json_t *troot, int zlab, sp_err *err) {
    int gemma = tc->arch == SP_ARCH_GEMMA4, N = tc->n_layers, H = tc->hidden_size, V = tc->vocab_size;
    int tiny = H < 512;
    int mask = sp_newdrafter_mask_id(tc);
    const char *dtype = o->dtype == SP_DT_F32 ? "float32" : o->dtype == SP_DT_BF16 ? "bfloat16"
                        : !strcmp(tc->torch_dtype, "float32") ? "float32" : "bfloat16";
    json_t *d;
    if (zlab) { /* docs/DFLASH.md §1: a Qwen3 body of the target's widths */
        d = json_object();
        json_object_set_new(d, "architectures", json_pack("[s]", "DFlashDraftModel"));
        json_object_set_new(d, "model_type", json_string("qwen3"));
        json_object_set_new(d, "auto_map", json_pack("{s:s}", "AutoModel", "dflash.DFlashDraftModel"));
        json_object_set_new(d, "block_size", json_integer(16));
        json_object_set_new(d, "hidden_size", json_integer(H));
        json_object_set_new(d, "intermediate_size", json_integer(tc->ffn_dim));
        json_object_set_new(d, "num_attention_heads", json_integer(tc->n_heads));
        json_object_set_new(d, "num_key_value_heads", json_integer(tc->n_kv_heads));
        json_object_set_new(d, "head_dim", json_integer(gemma ? tc->global_head_dim : tc->head_dim));
        json_object_set_new(d, "rms_norm_eps", json_real(tc->rms_eps));
        json_object_set_new(d, "rope_theta", json_real(tc->rope.theta));
        if (!gemma) /* the target's RoPE as written (llama3 rope_scaling; transformers 5 rope_parameters) */
            for (int k = 0; k < 2; k++) {
                const char *key = k ? "rope_parameters" : "rope_scaling";
                json_t *v = json_object_get(troot, key);
                if (v) json_object_set_new(d, key, json_deep_copy(v));
            }
        json_object_set_new(d, "max_position_embeddings", json_integer(tc->max_pos));
        json_object_set_new(d, "vocab_size", json_integer(V));
        json_object_set_new(d, "attention_bias", json_false());
        json_object_set_new(d, "hidden_act", json_string("silu"));
        json_object_set_new(d, "tie_word_embeddings", json_false());
        json_object_set_new(d, "torch_dtype", json_string(dtype));
        json_object_set_new(d, "dflash_config", json_pack("{s:i}", "mask_token_id", mask));
    } else { /* docs/DSPARK.md §1: a copy of the target (text) config with overrides */
        json_t *src = troot;
        if (gemma && json_is_object(json_object_get(troot, "text_config"))) src = json_object_get(troot, "text_config");
        d = json_deep_copy(src);
        json_object_set_new(d, "architectures", json_pack("[s]", gemma ? "Gemma4DSparkModel" : "Qwen3DSparkModel"));
        if (!gemma) /* the Qwen3 block (q_norm / k_norm) for a Llama target too, as `specula train` writes */
            json_object_set_new(d, "model_type", json_string("qwen3"));
        if (gemma) {
            json_object_set_new(d, "model_type", json_string("gemma4_text"));
            json_object_set_new(d, "target_model_type", json_string("gemma4"));
            json_object_set_new(d, "target_text_model_type", json_string("gemma4_text"));
            json_object_set_new(d, "num_kv_shared_layers", json_integer(0));
            json_object_set_new(d, "hidden_size_per_layer_input", json_integer(0));
            json_object_del(d, "vocab_size_per_layer_input");
        }
        json_object_set_new(d, "block_size", json_integer(7));
        json_object_set_new(d, "mask_token_id", json_integer(mask));
        json_object_set_new(d, "num_anchors", json_integer(512));
        json_object_set_new(d, "tie_word_embeddings", json_false());
        int heads = strcmp(o->preset ? o->preset : "b7", "dflash-b7") != 0;
        json_object_set_new(d, "markov_rank", json_integer(heads ? (tiny ? 16 : 256) : 0));
        if (heads) json_object_set_new(d, "markov_head_type", json_string("vanilla"));
        json_object_set_new(d, "enable_confidence_head", json_boolean(heads));
        json_object_set_new(d, "confidence_head_with_markov", json_boolean(heads));
        json_object_del(d, "torch_dtype");
        json_object_set_new(d, "dtype", json_string(dtype));
    }
    json_object_set_new(d, "num_hidden_layers", json_integer(tiny ? 2 : 5));
    json_object_set_new(d, "num_target_layers", json_integer(N));
    int rc = 0;
    for (int i = 0; i < o->n_sets && !rc; i++) rc = sp_preset_apply_set(d, o->sets[i], err);
    /* derived keys, unless overridden */
    int L = json_int_or(d, "num_hidden_layers", 0);
    if (!rc && L <= 0) rc = sp_err_set(err, "draft config: num_hidden_layers must be > 0");
    if (!rc && !gemma && !zlab && !set_has(o, "layer_types")) json_object_del(d, "layer_types");
    if (!rc && gemma && !set_has(o, "layer_types")) {
        json_t *lt = json_array();
        for (int i = 0; i < L; i++) json_array_append_new(lt, json_string("full_attention"));
        json_object_set_new(d, "layer_types", lt);
    }
    if (!rc && !(zlab ? set_has(o, "dflash_config.target_layer_ids") : set_has(o, "target_layer_ids"))) {
        int m = N - 1 < 5 ? N - 1 : 5, ids[5];
        if (m < 1) rc = sp_err_set(err, "target has %d layers: a drafter needs at least 2", N);
        sp_newdrafter_tap_ids(N, m, ids);
        json_t *at = zlab ? json_object_get(d, "dflash_config") : d;
        if (!rc) json_object_set_new(at, "target_layer_ids", int_list(ids, m));
    }
    char *text = rc ? NULL : json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(d);
    if (!rc && !text) sp_err_set(err, "out of memory");
    if (text) { /* newline-terminated */
        size_t n = strlen(text);
        char *t2 = realloc(text, n + 2);
        if (t2) {
            t2[n] = '\n';
            t2[n + 1] = 0;
            text = t2;
        }
    }
    return text;
}

typedef struct {
    char name[112];
    int64_t shape[2];
    int ndim;
    hf_init init;
} extra_t;

static int target_tensor(st_set *ts, const char *name, int64_t V, int64_t H, const st_tensor **out, sp_err *err) {
    int64_t shape[2] = {V, H};
    return sp_st_get(ts, name, SP_DT_UNKNOWN, 2, shape, out, err);
}

int sp_newdrafter_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    if (o->arch && !strcmp(o->arch, "eagle3")) return sp_newdrafter_eagle3_write(dir, target_dir, o, err);
    if (!o->arch || (strcmp(o->arch, "dflash") && strcmp(o->arch, "dspark")))
        return sp_err_set(err, "new drafter: --arch must be dflash, dspark or eagle3 (got %s)", o->arch ? o->arch : "none");
    int zlab = !strcmp(o->arch, "dflash");
    if (o->preset) {
        int ok = 0;
        for (int i = 0; sp_newdrafter_preset_at(o->arch, i); i++)
            ok |= !strcmp(sp_newdrafter_preset_at(o->arch, i), o->preset);
        if (!ok) return sp_err_set(err, "new drafter: unknown preset \"%s\" for --arch %s", o->preset, o->arch);
    }
    char path[4096], *ttext = NULL, *text = NULL;
    size_t tn;
    sp_config tc, dc;
    json_t *troot = NULL, *dj = NULL;
    st_set *ts = NULL;
    st_writer *w = NULL;
    hf_tensor_spec *specs = NULL;
    void **bufs = NULL;
    int n_specs = 0, total = 0, rc = -1;
    if (sp_path_join(path, sizeof path, target_dir, "config.json") || sp_read_file(path, &ttext, &tn, err)) goto done;
    if (sp_config_parse(&tc, ttext, path, err)) goto done;
    if (!(troot = sp_hf_json_loadb(ttext, tn, JSON_REJECT_DUPLICATES, path, err))) goto done;
    if (!(text = draft_config(o, &tc, troot, zlab, err))) goto done;
    if (sp_config_parse(&dc, text, "draft config.json", err)) goto done;
    dc.tensor_prefix[0] = 0; /* drafter tensors carry no prefix (docs/DFLASH.md §2, docs/DSPARK.md §2) */
    if (dc.hidden_size != tc.hidden_size || dc.vocab_size != tc.vocab_size) {
        sp_err_set(err, "draft config: hidden_size %d / vocab_size %d must equal the target's (%d / %d)",
                   dc.hidden_size, dc.vocab_size, tc.hidden_size, tc.vocab_size);
        goto done;
    }
    dj = json_loads(text, 0, NULL);
    sp_dtype dt = !strcmp(dc.torch_dtype, "float32") ? SP_DT_F32 : SP_DT_BF16;
    int64_t H = dc.hidden_size, V = dc.vocab_size;
    json_t *taps = json_object_get(zlab ? json_object_get(dj, "dflash_config") : dj, "target_layer_ids");
    int64_t m = json_is_array(taps) ? (int64_t)json_array_size(taps) : 0;
    int r = zlab ? 0 : json_int_or(dj, "markov_rank", 0);
    const char *mtype = json_string_value(json_object_get(dj, "markov_head_type"));
    int conf = json_is_true(json_object_get(dj, "enable_confidence_head"));
    int conf_markov = json_is_true(json_object_get(dj, "confidence_head_with_markov"));
    if (m < 1 || r < 0) {
        sp_err_set(err, "draft config: target_layer_ids must be a non-empty list and markov_rank >= 0");
        goto done;
    }

    /* decoder layers (newmodel's list without embedding / LM head) + the drafter's own tensors */
    if (sp_hf_tensor_specs(&dc, &specs, &n_specs, err)) goto done;
    extra_t ex[8];
    int n_ex = 0;
    ex[n_ex++] = (extra_t){"fc.weight", {H, m * H}, 2, HF_INIT_PROJ};
    ex[n_ex++] = (extra_t){"hidden_norm.weight", {H, 0}, 1, HF_INIT_NORM};
    if (r > 0) {
        ex[n_ex++] = (extra_t){"markov_head.markov_w1.weight", {V, r}, 2, HF_INIT_EMBED};
        ex[n_ex++] = (extra_t){"markov_head.markov_w2.weight", {V, r}, 2, HF_INIT_PROJ};
        if (mtype && !strcmp(mtype, "gated")) {
            ex[n_ex++] = (extra_t){"markov_head.gate_proj.weight", {r, H + r}, 2, HF_INIT_PROJ};
            ex[n_ex++] = (extra_t){"markov_head.gate_proj.bias", {r, 0}, 1, HF_INIT_NORM};
        } else if (mtype && !strcmp(mtype, "rnn")) {
            ex[n_ex++] = (extra_t){"markov_head.joint_proj.weight", {3 * r, 2 * r + H}, 2, HF_INIT_PROJ};
            ex[n_ex++] = (extra_t){"markov_head.joint_proj.bias", {3 * r, 0}, 1, HF_INIT_NORM};
        } else if (mtype && strcmp(mtype, "vanilla")) {
            sp_err_set(err, "draft config: markov_head_type \"%s\" (expected vanilla, gated or rnn)", mtype);
            goto done;
        }
    }
    if (conf) {
        ex[n_ex++] = (extra_t){"confidence_head.proj.weight", {1, H + (conf_markov && r > 0 ? r : 0)}, 2, HF_INIT_PROJ};
        ex[n_ex++] = (extra_t){"confidence_head.proj.bias", {1, 0}, 1, HF_INIT_NORM};
    }
    total = n_specs + n_ex;
    bufs = calloc((size_t)total, sizeof *bufs);
    w = sp_st_writer_create();
    if (!bufs || !w) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    char embed_name[64], head_name[64]; /* the table's names, without a prefix (drafters carry none) */
    sp_tensor_hf_name(tc.arch, SP_TN_EMBED, 0, embed_name, sizeof embed_name);
    sp_tensor_hf_name(tc.arch, SP_TN_LM_HEAD, 0, head_name, sizeof head_name);
    for (int k = 0; k < total; k++) {
        hf_tensor_spec t;
        if (k < n_specs) {
            t = specs[k];
            if (!strcmp(t.name, embed_name) || !strcmp(t.name, head_name)) continue;
        } else {
            const extra_t *e = &ex[k - n_specs];
            memset(&t, 0, sizeof t);
            snprintf(t.name, sizeof t.name, "%s", e->name);
            t.ndim = e->ndim;
            t.shape[0] = e->shape[0];
            t.shape[1] = e->shape[1];
            t.init = e->init;
        }
        int64_t numel = t.shape[0] * (t.ndim > 1 ? t.shape[1] : 1);
        float *f = malloc((size_t)numel * sizeof(float));
        if (!f) {
            sp_err_set(err, "out of memory for %s", t.name);
            goto done;
        }
        sp_hf_tensor_fill(&t, k, o->seed, 1.0f, f, 0, numel);
        if (dt == SP_DT_BF16) {
            uint16_t *b = (uint16_t *)f; /* in place: element i is read before slot i is written */
            for (int64_t i = 0; i < numel; i++) b[i] = sp_f32_to_bf16(f[i]);
        }
        bufs[k] = f;
        if (sp_st_writer_add_ref(w, t.name, dt, t.ndim, t.shape, f, err)) goto done;
    }
    if (!zlab) { /* DeepSpec ships copies of the target's embedding and LM head (frozen, docs/DSPARK.md §2) */
        if (sp_st_open_dir(&ts, target_dir, err)) goto done;
        char en[160];
        snprintf(en, sizeof en, "%s%s", tc.tensor_prefix, embed_name);
        const st_tensor *te, *th;
        if (target_tensor(ts, en, V, H, &te, err)) goto done;
        if (tc.tie_embeddings) th = te;
        else if (target_tensor(ts, head_name, V, H, &th, err)) goto done;
        const st_tensor *src[2] = {te, th};
        const char *names[2] = {embed_name, head_name};
        int64_t shape[2] = {V, H};
        for (int i = 0; i < 2; i++) {
            if (src[i]->dtype == dt) {
                if (sp_st_writer_add_ref(w, names[i], dt, 2, shape, src[i]->data, err)) goto done;
                continue;
            }
            float *f = malloc((size_t)(V * H) * sizeof(float));
            if (!f) {
                sp_err_set(err, "out of memory");
                goto done;
            }
            sp_to_f32(f, src[i]->data, src[i]->dtype, (size_t)(V * H));
            if (dt == SP_DT_BF16) {
                uint16_t *b = (uint16_t *)f;
                for (int64_t j = 0; j < V * H; j++) b[j] = sp_f32_to_bf16(f[j]);
            }
            void **nb = realloc(bufs, (size_t)(total + 1) * sizeof *bufs);
            if (!nb) {
                free(f);
                sp_err_set(err, "out of memory");
                goto done;
            }
            bufs = nb;
            bufs[total++] = f;
            if (sp_st_writer_add_ref(w, names[i], dt, 2, shape, f, err)) goto done;
        }
    }
    if (sp_mkdir_p(dir, err) || sp_path_join(path, sizeof path, dir, "config.json") ||
        sp_write_file_atomic(path, text, strlen(text), err))
        goto done;
    if (sp_path_join(path, sizeof path, dir, "model.safetensors") || sp_st_writer_save(w, path, err)) goto done;
    rc = 0;
done:
    if (bufs)
        for (int k = 0; k < total; k++) free(bufs[k]);
    free(bufs);
    sp_st_writer_free(w);
    sp_st_close(ts);
    free(specs);
    json_decref(troot);
    json_decref(dj);
    free(ttext);
    free(text);
    return rc;
}

/* the new-drafter writers of the dflash and dspark kinds (the table of kinds, src/api/drafter_kinds.c) */
int sp_newdrafter_dflash_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    newdrafter_opts k = *o;
    k.arch = "dflash";
    return sp_newdrafter_write(dir, target_dir, &k, err);
}

int sp_newdrafter_dspark_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    newdrafter_opts k = *o;
    k.arch = "dspark";
    return sp_newdrafter_write(dir, target_dir, &k, err);
}
