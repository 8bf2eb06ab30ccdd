/* newdrafter_mlxbun.c — random drafters in mlx-bun's own layout (docs/MLX-BUN-DRAFTERS.md):
 * dspark.json beside a float32 model.safetensors, initialised as mlx-bun does (one xorshift32
 * stream, Box–Muller normals of std 0.02 in the canonical parameter order; norms 1; markov.w2 and
 * the confidence head 0). v1 DSpark for --arch dspark, the faithful DFlash module (variant
 * "dspark") for --arch dflash. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hfjson.h"
#include "formats/mlxbun_layout.h"
#include "formats/newdrafter.h"
#include "formats/safetensors.h"
#include "specula.h"

typedef sp_mlxbun_cfg mb_cfg;

typedef struct {
    uint32_t s;
} mb_rng;

static double mb_uniform(mb_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 17;
    r->s ^= r->s << 5;
    return r->s / 4294967296.0;
}

/* n values of N(0, std): Box–Muller pairs, the cosine then the sine */
static void mb_normal(mb_rng *r, float *x, size_t n, double std) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = fmax(mb_uniform(r), 1e-12), u2 = mb_uniform(r);
        double rad = sqrt(-2 * log(u1));
        x[i] = (float)(rad * cos(2 * M_PI * u2) * std);
        if (i + 1 < n) x[i + 1] = (float)(rad * sin(2 * M_PI * u2) * std);
    }
}

void sp_mlxbun_init_values(const sp_mlxbun_tensor *t, int n, uint64_t seed, float *const *dst) {
    mb_rng r = {(uint32_t)seed ? (uint32_t)seed : 0x9e3779b9u};
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].shape[0] * (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        if (t[i].init == 'n') mb_normal(&r, dst[i], cnt, 0.02);
        else
            for (size_t j = 0; j < cnt; j++) dst[i][j] = t[i].init == '1' ? 1.0f : 0.0f;
    }
}

/* append one tensor to t (1-D when b is 0) */
static void mb_push(sp_mlxbun_tensor *t, int *n, int cap, const char *name, char init, int64_t a, int64_t b) {
    if (*n < cap) {
        sp_mlxbun_tensor *x = &t[*n];
        snprintf(x->name, sizeof x->name, "%s", name);
        x->ndim = b ? 2 : 1;
        x->shape[0] = a, x->shape[1] = b;
        x->init = init;
    }
    (*n)++;
}

int sp_mlxbun_tensors(const sp_mlxbun_cfg *c, int faithful, int64_t H, int64_t V, sp_mlxbun_tensor *t, int cap) {
    int64_t d = c->d, f = (int64_t)c->ff * c->d, R = c->rank;
    int n = 0;
    char nm[32];
    static const char *qkvo[] = {"q", "k", "v", "o"};
    for (int i = 0; i < c->layers; i++) {
        snprintf(nm, sizeof nm, "bb.%d.attn_norm", i), mb_push(t, &n, cap, nm, '1', d, 0);
        for (int j = 0; j < 4; j++) snprintf(nm, sizeof nm, "bb.%d.%s", i, qkvo[j]), mb_push(t, &n, cap, nm, 'n', d, d);
        snprintf(nm, sizeof nm, "bb.%d.ff_norm", i), mb_push(t, &n, cap, nm, '1', d, 0);
        snprintf(nm, sizeof nm, "bb.%d.gate", i), mb_push(t, &n, cap, nm, 'n', d, f);
        snprintf(nm, sizeof nm, "bb.%d.up", i), mb_push(t, &n, cap, nm, 'n', d, f);
        snprintf(nm, sizeof nm, "bb.%d.down", i), mb_push(t, &n, cap, nm, 'n', f, d);
    }
    if (faithful) {
        mb_push(t, &n, cap, "W_c", 'n', (int64_t)c->n_taps * H, d);
        mb_push(t, &n, cap, "ctx_norm", '1', d, 0);
    } else {
        mb_push(t, &n, cap, "ctx_proj", 'n', H, d);
    }
    mb_push(t, &n, cap, "tok_proj", 'n', H, d);
    mb_push(t, &n, cap, "mask_emb", 'n', c->gamma - 1, d);
    mb_push(t, &n, cap, faithful ? "block_pos" : "pos_emb", 'n', c->gamma + !faithful, d);
    mb_push(t, &n, cap, "out_norm", '1', d, 0);
    mb_push(t, &n, cap, "out_proj", 'n', d, H);
    mb_push(t, &n, cap, "markov.w1", 'n', V, R);
    mb_push(t, &n, cap, "markov.w2", '0', R, V);
    mb_push(t, &n, cap, "conf.w", '0', d + R, 1);
    mb_push(t, &n, cap, "conf.b", '0', 1, 0);
    return n <= cap ? n : -1;
}

char *sp_mlxbun_json(const sp_mlxbun_cfg *c, int faithful, const char *target_id, int H, int V, double eps,
                     const sp_mlxbun_tensor *t, int n) {
    json_t *cfg = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "gamma", c->gamma, "dDraft", c->d, "nLayers", c->layers,
                            "nHeads", c->heads, "markovRank", c->rank, "ffMult", c->ff);
    if (faithful) {
        json_t *tl = json_array();
        for (int i = 0; i < c->n_taps; i++) json_array_append_new(tl, json_integer(c->taps[i]));
        json_object_set_new(cfg, "tapLayers", tl);
    }
    json_t *names = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(names, json_string(t[i].name));
    json_t *root = json_pack("{s:s}", "kind", "dspark-drafter");
    if (faithful) json_object_set_new(root, "variant", json_string("dspark"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "target_id", json_string(target_id));
    json_object_set_new(root, "config", cfg);
    json_object_set_new(root, "dims", json_pack("{s:i, s:i, s:f}", "hiddenSize", H, "vocabSize", V, "eps", eps));
    json_object_set_new(root, "param_names", names);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}

/* --set key=value over the config (integers; tapLayers=[a,b,..]) */
static int mb_set(mb_cfg *c, const char *kv, sp_err *err) {
    const char *eq = strchr(kv, '=');
    if (!eq) return sp_err_set(err, "--set %s: expected key=value", kv);
    size_t k = (size_t)(eq - kv);
    if (k == 9 && !strncmp(kv, "tapLayers", 9)) {
        json_t *a = json_loads(eq + 1, 0, NULL);
        int ok = json_is_array(a) && json_array_size(a) >= 1 && json_array_size(a) <= 16;
        for (size_t i = 0; ok && i < json_array_size(a); i++) {
            ok = json_is_integer(json_array_get(a, i));
            c->taps[i] = (int)json_integer_value(json_array_get(a, i));
        }
        if (ok) c->n_taps = (int)json_array_size(a);
        json_decref(a);
        return ok ? 0 : sp_err_set(err, "--set %s: expected a list of 1..16 layer indices", kv);
    }
    static const char *keys[] = {"gamma", "dDraft", "nLayers", "nHeads", "markovRank", "ffMult"};
    int *dst[] = {&c->gamma, &c->d, &c->layers, &c->heads, &c->rank, &c->ff};
    for (int i = 0; i < 6; i++)
        if (strlen(keys[i]) == k && !strncmp(kv, keys[i], k)) {
            char *end;
            long v = strtol(eq + 1, &end, 10);
            if (*end || v < 1 || v > 65536) return sp_err_set(err, "--set %s: expected an integer 1..65536", kv);
            *dst[i] = (int)v;
            return 0;
        }
    return sp_err_set(err, "--set %s: mlx-bun's config has gamma, dDraft, nLayers, nHeads, markovRank, ffMult, "
                           "tapLayers",
                      kv);
}

static int mb_check(const mb_cfg *c, const sp_config *tc, int faithful, sp_err *err) {
    if (c->d % c->heads) return sp_err_set(err, "mlx-bun drafter: dDraft %d not divisible by nHeads %d", c->d, c->heads);
    if (c->gamma < 2) return sp_err_set(err, "mlx-bun drafter: gamma %d (at least 2)", c->gamma);
    for (int i = 0; faithful && i < c->n_taps; i++)
        if (c->taps[i] < 0 || c->taps[i] > tc->n_layers || (i && c->taps[i] <= c->taps[i - 1]))
            return sp_err_set(err, "mlx-bun drafter: tapLayers[%d] = %d: strictly increasing in 0..%d (%d: the final "
                                   "norm)", i, c->taps[i], tc->n_layers, tc->n_layers);
    return 0;
}

int sp_newdrafter_mlxbun_write(const char *dir, const char *target_dir, const newdrafter_opts *o, sp_err *err) {
    int faithful = o->arch && !strcmp(o->arch, "dflash");
    if (!o->arch || (!faithful && strcmp(o->arch, "dspark")))
        return sp_err_set(err, "new drafter: --layout mlx-bun takes --arch dspark (v1) or dflash (faithful DFlash)");
    sp_config tc;
    char path[4096];
    if (sp_path_join(path, sizeof path, target_dir, "config.json") || sp_config_load(&tc, path, err)) return -1;
    mb_cfg c = {.gamma = 5, .d = 1024, .layers = faithful ? 5 : 2, .heads = 8, .rank = 256, .ff = 2};
    if (faithful) { /* three spread taps and the final norm, as mlx-bun's [20, 31, 41, 42] on E4B */
        c.n_taps = tc.n_layers >= 4 ? 3 : 1;
        sp_newdrafter_tap_ids(tc.n_layers, c.n_taps, c.taps);
        c.taps[c.n_taps++] = tc.n_layers;
    }
    for (int i = 0; i < o->n_sets; i++)
        if (mb_set(&c, o->sets[i], err)) return -1;
    if (mb_check(&c, &tc, faithful, err)) return -1;
    sp_mlxbun_tensor *t = malloc(sizeof *t * SP_MLXBUN_MAX_TENSORS);
    float **vals = calloc(SP_MLXBUN_MAX_TENSORS, sizeof *vals);
    st_writer *w = sp_st_writer_create();
    char *js = NULL;
    int rc = -1, n = 0;
    const char *base = strrchr(target_dir, '/');
    base = base && base[1] ? base + 1 : target_dir;
    if (!w || !t || !vals) { sp_err_set(err, "out of memory"); goto done; }
    if (c.layers > SP_MLXBUN_MAX_LAYERS) {
        sp_err_set(err, "mlx-bun drafter: nLayers %d (at most %d)", c.layers, SP_MLXBUN_MAX_LAYERS);
        goto done;
    }
    n = sp_mlxbun_tensors(&c, faithful, tc.hidden_size, tc.vocab_size, t, SP_MLXBUN_MAX_TENSORS);
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].shape[0] * (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        if (!(vals[i] = malloc(sizeof(float) * cnt))) { sp_err_set(err, "out of memory (%s)", t[i].name); goto done; }
    }
    sp_mlxbun_init_values(t, n, o->seed, vals);
    for (int i = 0; i < n; i++)
        if (sp_st_writer_add_ref(w, t[i].name, SP_DT_F32, t[i].ndim, t[i].shape, vals[i], err)) goto done;
    if (!(js = sp_mlxbun_json(&c, faithful, base, tc.hidden_size, tc.vocab_size, tc.rms_eps, t, n))) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    if (sp_mkdir_p(dir, err) || sp_path_join(path, sizeof path, dir, "model.safetensors") ||
        sp_st_writer_save(w, path, err) || sp_path_join(path, sizeof path, dir, "dspark.json") ||
        sp_write_file_atomic(path, js, strlen(js), err))
        goto done;
    rc = 0;
done:
    free(js);
    for (int i = 0; vals && i < n; i++) free(vals[i]);
    free(vals);
    free(t);
    if (w) sp_st_writer_free(w);
    return rc;
}
