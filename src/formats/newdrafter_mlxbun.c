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
#include "formats/newdrafter.h"
#include "formats/safetensors.h"
#include "specula.h"

typedef struct {
    int gamma, d, layers, heads, rank, ff;
    int taps[16], n_taps; /* faithful only */
} mb_cfg;

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

/* one tensor: kind 'n' normal, '1' ones, '0' zeros; its name appended to names */
static int mb_add(st_writer *w, json_t *names, mb_rng *r, const char *name, char kind, int64_t a, int64_t b,
                  sp_err *err) {
    int64_t shape[2] = {a, b};
    size_t n = (size_t)a * (size_t)(b ? b : 1);
    float *x = calloc(n ? n : 1, sizeof *x);
    if (!x) return sp_err_set(err, "out of memory (%s)", name);
    if (kind == 'n') mb_normal(r, x, n, 0.02);
    for (size_t i = 0; kind == '1' && i < n; i++) x[i] = 1.0f;
    int rc = sp_st_writer_add(w, name, SP_DT_F32, b ? 2 : 1, shape, x, err);
    free(x);
    if (!rc) json_array_append_new(names, json_string(name));
    return rc;
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

/* every tensor, in mlx-bun's canonical order (the order the random stream is drawn in) */
static int mb_tensors(st_writer *w, json_t *names, const mb_cfg *c, const sp_config *tc, int faithful, uint64_t seed,
                      sp_err *err) {
    mb_rng r = {(uint32_t)seed ? (uint32_t)seed : 0x9e3779b9u};
    int64_t d = c->d, f = (int64_t)c->ff * c->d, H = tc->hidden_size, V = tc->vocab_size, R = c->rank;
    int rc = 0;
    char nm[64];
    static const char *qkvo[] = {"q", "k", "v", "o"};
    for (int i = 0; i < c->layers && !rc; i++) {
        snprintf(nm, sizeof nm, "bb.%d.attn_norm", i), rc = mb_add(w, names, &r, nm, '1', d, 0, err);
        for (int j = 0; j < 4 && !rc; j++) snprintf(nm, sizeof nm, "bb.%d.%s", i, qkvo[j]), rc = mb_add(w, names, &r, nm, 'n', d, d, err);
        if (!rc) snprintf(nm, sizeof nm, "bb.%d.ff_norm", i), rc = mb_add(w, names, &r, nm, '1', d, 0, err);
        if (!rc) snprintf(nm, sizeof nm, "bb.%d.gate", i), rc = mb_add(w, names, &r, nm, 'n', d, f, err);
        if (!rc) snprintf(nm, sizeof nm, "bb.%d.up", i), rc = mb_add(w, names, &r, nm, 'n', d, f, err);
        if (!rc) snprintf(nm, sizeof nm, "bb.%d.down", i), rc = mb_add(w, names, &r, nm, 'n', f, d, err);
    }
    if (!rc && faithful) rc = mb_add(w, names, &r, "W_c", 'n', (int64_t)c->n_taps * H, d, err);
    if (!rc && faithful) rc = mb_add(w, names, &r, "ctx_norm", '1', d, 0, err);
    if (!rc && !faithful) rc = mb_add(w, names, &r, "ctx_proj", 'n', H, d, err);
    if (!rc) rc = mb_add(w, names, &r, "tok_proj", 'n', H, d, err);
    if (!rc) rc = mb_add(w, names, &r, "mask_emb", 'n', c->gamma - 1, d, err);
    if (!rc) rc = mb_add(w, names, &r, faithful ? "block_pos" : "pos_emb", 'n', c->gamma + !faithful, d, err);
    if (!rc) rc = mb_add(w, names, &r, "out_norm", '1', d, 0, err);
    if (!rc) rc = mb_add(w, names, &r, "out_proj", 'n', d, H, err);
    if (!rc) rc = mb_add(w, names, &r, "markov.w1", 'n', V, R, err);
    if (!rc) rc = mb_add(w, names, &r, "markov.w2", '0', R, V, err);
    if (!rc) rc = mb_add(w, names, &r, "conf.w", '0', d + R, 1, err);
    if (!rc) rc = mb_add(w, names, &r, "conf.b", '0', 1, 0, err);
    return rc;
}

/* dspark.json: kind, variant (faithful only), version, target_id, config, dims, param_names */
static char *mb_json(const mb_cfg *c, const sp_config *tc, const char *target_dir, int faithful, json_t *names) {
    const char *base = strrchr(target_dir, '/');
    base = base && base[1] ? base + 1 : target_dir;
    json_t *cfg = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "gamma", c->gamma, "dDraft", c->d, "nLayers", c->layers,
                            "nHeads", c->heads, "markovRank", c->rank, "ffMult", c->ff);
    if (faithful) {
        json_t *t = json_array();
        for (int i = 0; i < c->n_taps; i++) json_array_append_new(t, json_integer(c->taps[i]));
        json_object_set_new(cfg, "tapLayers", t);
    }
    json_t *root = json_pack("{s:s}", "kind", "dspark-drafter");
    if (faithful) json_object_set_new(root, "variant", json_string("dspark"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "target_id", json_string(base));
    json_object_set_new(root, "config", cfg);
    json_object_set_new(root, "dims", json_pack("{s:i, s:i, s:f}", "hiddenSize", tc->hidden_size, "vocabSize",
                                                tc->vocab_size, "eps", tc->rms_eps));
    json_object_set(root, "param_names", names);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
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
    st_writer *w = sp_st_writer_create();
    json_t *names = json_array();
    char *js = NULL;
    int rc = -1;
    if (!w || !names) { sp_err_set(err, "out of memory"); goto done; }
    if (mb_tensors(w, names, &c, &tc, faithful, o->seed, err)) goto done;
    if (!(js = mb_json(&c, &tc, target_dir, faithful, names))) { sp_err_set(err, "out of memory"); goto done; }
    if (sp_mkdir_p(dir, err) || sp_path_join(path, sizeof path, dir, "model.safetensors") ||
        sp_st_writer_save(w, path, err) || sp_path_join(path, sizeof path, dir, "dspark.json") ||
        sp_write_file_atomic(path, js, strlen(js), err))
        goto done;
    rc = 0;
done:
    free(js);
    json_decref(names);
    if (w) sp_st_writer_free(w);
    return rc;
}
