/* test_mlx_quant.c — MLX affine group-quantized safetensors (docs/MLX-QUANT.md).
 *
 * The fixtures are written here from the documented layout, not by specula's writer: this
 * file's own quantizer (plain min / max per group), its own packing of B-bit values into
 * uint32 words (value j of a word at bits B·j), its own dequantizer, and config.json with the
 * "quantization" object. Beside each fixture an f32 "twin" holds this file's dequantized values.
 *
 * - the loaded matrices dequantize to exactly this file's reference values (4-bit with G 32, 64,
 *   128 and BF16 / F16 / F32 scales; 8-bit; embedding, LM head, layers);
 * - logits: the Q4_1 / QA8 paths within 3 % of the twin (only the 8-bit activation quantization
 *   differs), the f32 path bit-identical to the twin; within a stated bound of the bf16 model;
 * - batch == solo: one forward of 16 tokens equals 16 single-token forwards, bitwise;
 * - through the binary: `quantize --type mlx4|mlx8` on llama, qwen3 and gemma4 writes a
 *   checkpoint whose matrices are this file's dequantization of what it wrote and lie within one
 *   step of the original; greedy speculative output (n-gram, draft model) equals plain;
 * - malformed files (scales of the wrong shape, 3 bits, a group size that does not divide the
 *   width, scales without the config key) are clear errors. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "core/core.h"
#include "formats/newmodel.h"
#include "formats/safetensors.h"
#include "kernels/quant.h"
#include "model/model_internal.h"
#include "specula.h"

#define NTOK 16

static char tmp_root[256];
static char cli[200];

static const char *tmppath(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", tmp_root, name);
    return b;
}

static int make_model(const char *arch, const char *dir, int inter) {
    char is[64];
    snprintf(is, sizeof is, "intermediate_size=%d", inter);
    const char *sets[] = {"hidden_size=256", is, "head_dim=64", "global_head_dim=64"};
    newmodel_opts o = {.arch = arch, .preset = "tiny", .dtype = SP_DT_BF16, .seed = 11, .sets = sets,
                       .n_sets = strcmp(arch, "gemma4") ? 3 : 4, .n_threads = 1};
    sp_err err = {{0}};
    int rc = sp_newmodel_write(dir, &o, &err);
    CHECK(rc == 0, "new model %s: %s", arch, err.msg);
    return rc;
}

/* ---- the reference layout -------------------------------------------------------------- */
static float sc_get(const void *v, sp_dtype dt, size_t i) {
    if (dt == SP_DT_F32) return ((const float *)v)[i];
    uint16_t h = ((const uint16_t *)v)[i];
    return dt == SP_DT_BF16 ? sp_bf16_to_f32(h) : sp_f16_to_f32(h);
}

static void sc_put(void *v, sp_dtype dt, size_t i, float x) {
    if (dt == SP_DT_F32) ((float *)v)[i] = x;
    else ((uint16_t *)v)[i] = dt == SP_DT_BF16 ? sp_f32_to_bf16(x) : sp_f32_to_f16(x);
}

/* value j of a row of B-bit values packed little-endian into 32-bit words */
static unsigned ref_q(const uint32_t *w, int bits, size_t j) {
    size_t per = 32 / (size_t)bits;
    return (w[j / per] >> (bits * (j % per))) & ((1u << bits) - 1);
}

static void ref_dequant(float *y, const uint32_t *w, const void *s, const void *b, sp_dtype sdt, int bits, int G,
                        size_t k) {
    for (size_t j = 0; j < k; j++) {
        float prod = (float)ref_q(w, bits, j) * sc_get(s, sdt, j / G);
        y[j] = prod + sc_get(b, sdt, j / G);
    }
}

typedef struct {
    int bits, G;
    sp_dtype sdt;
    int bad_scales;        /* write layer 0's q_proj scales one column too wide */
    const char *cfg_extra; /* JSON merged into the quantization object */
    int no_quant_key;
} fixture;

/* min / max affine quantization of one row with this file's own packing */
static void ref_quant_row(uint32_t *w, void *s, void *b, const float *x, size_t k, const fixture *f) {
    unsigned top = (1u << f->bits) - 1;
    size_t per = 32 / (size_t)f->bits;
    memset(w, 0, k / per * 4);
    for (size_t g = 0; g < k / (size_t)f->G; g++) {
        float lo = x[g * f->G], hi = lo;
        for (int j = 1; j < f->G; j++) lo = fminf(lo, x[g * f->G + j]), hi = fmaxf(hi, x[g * f->G + j]);
        sc_put(s, f->sdt, g, (hi - lo) / (float)top);
        sc_put(b, f->sdt, g, lo);
        float sv = sc_get(s, f->sdt, g), bv = sc_get(b, f->sdt, g);
        for (int j = 0; j < f->G; j++) {
            float q = sv > 0 ? rintf((x[g * f->G + j] - bv) / sv) : 0;
            unsigned u = q < 0 ? 0 : q > (float)top ? top : (unsigned)q;
            size_t e = g * f->G + j;
            w[e / per] |= (uint32_t)u << (f->bits * (e % per));
        }
    }
}

static void write_config(const char *src_dir, const char *dir, const fixture *f) {
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", src_dir);
    json_t *root = json_load_file(p, 0, NULL);
    if (f) {
        json_t *q = json_pack("{s:i, s:i}", "group_size", f->G, "bits", f->bits);
        if (f->cfg_extra) {
            json_t *extra = json_loads(f->cfg_extra, 0, NULL);
            json_object_update(q, extra);
            json_decref(extra);
        }
        if (!f->no_quant_key) json_object_set_new(root, "quantization", q);
        else json_decref(q);
    }
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_dump_file(root, p, JSON_INDENT(1));
    json_decref(root);
}

/* src_dir (a bf16 checkpoint) → dir (MLX-quantized by this file) and twin (its f32 dequantization) */
static void write_fixture(const char *src_dir, const char *dir, const char *twin, const fixture *f) {
    sp_err err = {{0}};
    st_set *s = NULL;
    CHECK(sp_st_open_dir(&s, src_dir, &err) == 0, "%s", err.msg);
    if (!s) return;
    st_writer *w = sp_st_writer_create(), *tw = sp_st_writer_create();
    for (int i = 0; i < sp_st_count(s); i++) {
        const st_tensor *t = sp_st_at(s, i);
        size_t n = strlen(t->name);
        if (t->ndim != 2 || t->shape[1] % f->G || strcmp(t->name + n - 7, ".weight")) {
            sp_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, &err);
            sp_st_writer_add(tw, t->name, t->dtype, t->ndim, t->shape, t->data, &err);
            continue;
        }
        size_t rows = (size_t)t->shape[0], k = (size_t)t->shape[1], ng = k / f->G, nw = k * f->bits / 32;
        size_t es = sp_dtype_size(f->sdt), wide = f->bad_scales && strstr(t->name, "layers.0.self_attn.q_proj");
        uint32_t *wq = calloc(rows * nw, 4);
        char *sc = calloc(rows * (ng + 1), es), *bi = calloc(rows * (ng + 1), es);
        float *x = malloc(k * 4), *deq = malloc(rows * k * 4);
        for (size_t r = 0; r < rows; r++) {
            sp_to_f32(x, (const char *)t->data + r * k * sp_dtype_size(t->dtype), t->dtype, k);
            ref_quant_row(wq + r * nw, sc + r * (ng + wide) * es, bi + r * (ng + wide) * es, x, k, f);
            ref_dequant(deq + r * k, wq + r * nw, sc + r * (ng + wide) * es, bi + r * (ng + wide) * es, f->sdt, f->bits,
                        f->G, k);
        }
        char nm[300];
        int64_t ws[2] = {(int64_t)rows, (int64_t)nw}, gs[2] = {(int64_t)rows, (int64_t)(ng + wide)};
        snprintf(nm, sizeof nm, "%.*s.scales", (int)(n - 7), t->name);
        sp_st_writer_add(w, nm, f->sdt, 2, gs, sc, &err);
        snprintf(nm, sizeof nm, "%.*s.biases", (int)(n - 7), t->name);
        sp_st_writer_add(w, nm, f->sdt, 2, gs, bi, &err);
        sp_st_writer_add(w, t->name, SP_DT_U32, 2, ws, wq, &err);
        sp_st_writer_add(tw, t->name, SP_DT_F32, 2, t->shape, deq, &err);
        free(wq), free(sc), free(bi), free(x), free(deq);
    }
    char p[600];
    sp_mkdir_p(dir, &err);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(sp_st_writer_save(w, p, &err) == 0, "%s", err.msg);
    write_config(src_dir, dir, f);
    if (twin) {
        sp_mkdir_p(twin, &err);
        snprintf(p, sizeof p, "%s/model.safetensors", twin);
        CHECK(sp_st_writer_save(tw, p, &err) == 0, "%s", err.msg);
        write_config(src_dir, twin, NULL);
    }
    sp_st_writer_free(w);
    sp_st_writer_free(tw);
    sp_st_close(s);
}

/* every row of the loaded matrix equals this file's dequantization of X.weight in dir */
static void check_mat(const st_set *s, const char *wname, const sp_mat *M, int bits, int G, const char *what) {
    char nm[300];
    size_t n = strlen(wname);
    const st_tensor *w = sp_st_find(s, wname), *sc, *bi;
    snprintf(nm, sizeof nm, "%.*s.scales", (int)(n - 7), wname);
    sc = sp_st_find(s, nm);
    snprintf(nm, sizeof nm, "%.*s.biases", (int)(n - 7), wname);
    bi = sp_st_find(s, nm);
    CHECK(w && sc && bi && w->dtype == SP_DT_U32, "%s: %s not quantized in the file", what, wname);
    if (!w || !sc || !bi) return;
    size_t k = (size_t)M->k, nw = k * bits / 32, ng = k / G, es = sp_dtype_size(sc->dtype), bad = 0;
    CHECK(w->shape[0] == M->n && (size_t)w->shape[1] == nw, "%s: shape", what);
    float *ref = malloc(k * 4), *got = malloc(k * 4);
    sp_err err = {{0}};
    for (int r = 0; r < M->n; r++) {
        ref_dequant(ref, (const uint32_t *)w->data + r * nw, (const char *)sc->data + r * ng * es,
                    (const char *)bi->data + r * ng * es, sc->dtype, bits, G, k);
        sp_row_to_f32(got, (const char *)M->data + r * sp_dtype_row_bytes(M->dt, k), M->dt, k, &err);
        bad += memcmp(ref, got, k * 4) != 0;
    }
    CHECK(bad == 0, "%s: %zu of %d rows of %s differ from the reference dequantization (%s)", what, bad, M->n, wname,
          sp_dtype_name(M->dt));
    free(ref);
    free(got);
}

/* logits of NTOK tokens in one forward (or one token per forward when solo) */
static float *logits_of(const char *path, int solo, int *V) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    if (sp_model_load(&m, path, 2, &err)) {
        CHECK(0, "load %s: %s", path, err.msg);
        return NULL;
    }
    *V = sp_model_config(m)->vocab_size;
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (int32_t)((i * 4099 + 17) % *V);
    float *lg = malloc(sizeof(float) * NTOK * (size_t)*V);
    sp_kv *kv = sp_kv_create(m, 64, NTOK, &err);
    for (int i = 0; kv && i < (solo ? NTOK : 1); i++) {
        sp_forward_out o = {.logits = lg + (size_t)i * *V};
        CHECK(sp_model_forward(m, kv, tok + i, solo ? 1 : NTOK, &o, &err) == 0, "%s", err.msg);
    }
    sp_kv_free(kv);
    sp_model_free(m);
    return lg;
}

/* max |a − b| / max |b| over the logits, and the positions whose argmax agrees */
static double rel_diff(const float *a, const float *b, int V, int *same) {
    double maxd = 0, maxref = 0;
    *same = 0;
    for (int i = 0; i < NTOK; i++) {
        for (int v = 0; v < V; v++) {
            maxd = fmax(maxd, fabs((double)a[(size_t)i * V + v] - b[(size_t)i * V + v]));
            maxref = fmax(maxref, fabs((double)b[(size_t)i * V + v]));
        }
        *same += sp_argmax(a + (size_t)i * V, V) == sp_argmax(b + (size_t)i * V, V);
    }
    return maxd / maxref;
}

/* ---- cases ----------------------------------------------------------------------------- */
static const struct {
    fixture f;
    sp_dtype want; /* the type the loader must choose */
    const char *name;
} FIX[] = {
    {{4, 32, SP_DT_BF16, 0, NULL, 0}, SP_DT_Q4_1, "q4g32-bf16"},
    {{4, 64, SP_DT_BF16, 0, NULL, 0}, SP_DT_Q4_1, "q4g64-bf16"},
    {{4, 128, SP_DT_F16, 0, NULL, 0}, SP_DT_Q4_1, "q4g128-f16"},
    {{4, 64, SP_DT_F32, 0, NULL, 0}, SP_DT_F32, "q4g64-f32"},
    {{8, 64, SP_DT_BF16, 0, NULL, 0}, SP_DT_QA8, "q8g64-bf16"},
    {{8, 32, SP_DT_F32, 0, NULL, 0}, SP_DT_F32, "q8g32-f32"},
};
#define NFIX (sizeof FIX / sizeof FIX[0])

/* dequantized matrices equal the reference: embedding (the tied head), layer 0 and 1 matrices */
static void test_dequant_exact(void) {
    if (make_model("qwen3", tmppath("qwen3"), 512)) return;
    for (size_t i = 0; i < NFIX; i++) {
        char dir[600], twin[640];
        snprintf(dir, sizeof dir, "%s", tmppath(FIX[i].name));
        snprintf(twin, sizeof twin, "%s-twin", dir);
        write_fixture(tmppath("qwen3"), dir, twin, &FIX[i].f);
        sp_err err = {{0}};
        sp_model *m = NULL;
        st_set *s = NULL;
        CHECK(sp_model_load(&m, dir, 1, &err) == 0, "%s: %s", FIX[i].name, err.msg);
        CHECK(sp_st_open_dir(&s, dir, &err) == 0, "%s", err.msg);
        if (!m || !s) continue;
        const sp_mat *E = sp_model_embed_table(m);
        CHECK(E->dt == FIX[i].want && m->layers[0].wq.dt == FIX[i].want, "%s: loaded as %s, expected %s", FIX[i].name,
              sp_dtype_name(E->dt), sp_dtype_name(FIX[i].want));
        int b = FIX[i].f.bits, G = FIX[i].f.G;
        check_mat(s, "model.embed_tokens.weight", E, b, G, FIX[i].name);
        check_mat(s, "model.layers.0.self_attn.q_proj.weight", &m->layers[0].wq, b, G, FIX[i].name);
        check_mat(s, "model.layers.0.self_attn.k_proj.weight", &m->layers[0].wk, b, G, FIX[i].name);
        check_mat(s, "model.layers.1.mlp.down_proj.weight", &m->layers[1].w_down, b, G, FIX[i].name);
        check_mat(s, "model.layers.1.mlp.gate_proj.weight", &m->layers[1].w_gate, b, G, FIX[i].name);
        sp_st_close(s);
        sp_model_free(m);
    }
}

/* logits against the twin and the bf16 model; batch == solo */
static void test_logits(void) {
    int V = 0, V2 = 0, V3 = 0, same = 0;
    float *orig = logits_of(tmppath("qwen3"), 0, &V3);
    for (size_t i = 0; i < NFIX; i++) {
        char dir[600], twin[640];
        snprintf(dir, sizeof dir, "%s", tmppath(FIX[i].name));
        snprintf(twin, sizeof twin, "%s-twin", dir);
        float *q = logits_of(dir, 0, &V), *t = logits_of(twin, 0, &V2), *solo = logits_of(dir, 1, &V2);
        if (!q || !t || !solo || !orig) goto next;
        CHECK(!memcmp(q, solo, sizeof(float) * NTOK * (size_t)V), "%s: batch of %d != %d single-token forwards",
              FIX[i].name, NTOK, NTOK);
        if (FIX[i].want == SP_DT_F32) {
            CHECK(!memcmp(q, t, sizeof(float) * NTOK * (size_t)V), "%s: f32 path differs from the f32 twin", FIX[i].name);
        } else {
            double d = rel_diff(q, t, V, &same);
            printf("  %-10s vs twin: max|dlogit| / max|logit| = %.4f, argmax kept %d/%d\n", FIX[i].name, d, same, NTOK);
            CHECK(d <= 0.03 && same * 4 >= NTOK * 3, "%s: %.4f from the twin, argmax %d/%d", FIX[i].name, d, same, NTOK);
        }
        double d = rel_diff(q, orig, V, &same), bound = FIX[i].f.bits == 8 ? 0.03 : 0.15;
        printf("  %-10s vs bf16 model: max|dlogit| / max|logit| = %.4f, argmax kept %d/%d\n", FIX[i].name, d, same, NTOK);
        CHECK(d <= bound && same * 2 >= NTOK, "%s: %.4f from the bf16 model (bound %.2f), argmax %d/%d", FIX[i].name, d,
              bound, same, NTOK);
    next:
        free(q), free(t), free(solo);
    }
    free(orig);
}

static int load_error(const char *dir, const char *want, const char *what) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    int rc = sp_model_load(&m, dir, 1, &err);
    CHECK(rc != 0 && strstr(err.msg, want), "%s: expected an error with \"%s\", got rc %d: %s", what, want, rc, err.msg);
    sp_model_free(m);
    return rc;
}

static void test_malformed(void) {
    if (make_model("qwen3", tmppath("w320"), 320)) return;
    fixture bad = {4, 64, SP_DT_BF16, 1, NULL, 0};
    write_fixture(tmppath("qwen3"), tmppath("bad-scales"), NULL, &bad);
    load_error(tmppath("bad-scales"), "expected [", "scales of the wrong shape");
    load_error(tmppath("bad-scales"), "q_proj.scales", "scales of the wrong shape");
    fixture b3 = {4, 64, SP_DT_BF16, 0, "{\"bits\": 3}", 0};
    write_fixture(tmppath("qwen3"), tmppath("bits3"), NULL, &b3);
    load_error(tmppath("bits3"), "3 bits is not supported", "bits 3");
    /* down_proj's input is 320 wide: packed with G 64, declared G 128 for that module */
    fixture over = {4, 64, SP_DT_BF16, 0, "{\"model.layers.1.mlp.down_proj\": {\"group_size\": 128, \"bits\": 4}}", 0};
    write_fixture(tmppath("w320"), tmppath("g128o"), NULL, &over);
    load_error(tmppath("g128o"), "group size 128 does not divide the input width 320", "G not dividing");
    fixture nokey = {4, 64, SP_DT_BF16, 0, NULL, 1};
    write_fixture(tmppath("qwen3"), tmppath("nokey"), NULL, &nokey);
    load_error(tmppath("nokey"), "no \"quantization\"", "scales without the config key");
    fixture mode = {4, 64, SP_DT_BF16, 0, "{\"mode\": \"mxfp4\"}", 0};
    write_fixture(tmppath("qwen3"), tmppath("mode"), NULL, &mode);
    load_error(tmppath("mode"), "mode mxfp4 is not supported", "mxfp4 mode");
    /* the binary says so too, with a non-zero exit */
    char out[4096];
    int rc = harness_runf(out, sizeof out, "%s generate -m %s --prompt-ids 1,2,3 -n 2 2>&1", cli, tmppath("bits3"));
    CHECK(rc != 0 && strstr(out, "3 bits"), "generate on a 3-bit file: rc %d: %s", rc, out);
    rc = harness_runf(out, sizeof out, "%s quantize -m %s -o %s --type mlx4 --group-size 48 2>&1", cli,
                      tmppath("qwen3"), tmppath("g48"));
    CHECK(rc != 0 && strstr(out, "group size 48"), "quantize --group-size 48: rc %d: %s", rc, out);
    rc = harness_runf(out, sizeof out, "%s quantize -m %s -o %s --type mlx4 2>&1", cli, tmppath("q4g64-bf16"),
                      tmppath("again"));
    CHECK(rc != 0 && strstr(out, "already MLX-quantized"), "quantize of an MLX checkpoint: rc %d: %s", rc, out);
}

/* greedy tokens of `generate ... --json` (the "tokens" array), or "" on failure */
static void gen_tokens(const char *model, const char *extra, char *out, size_t cap) {
    char buf[8192];
    out[0] = 0;
    if (harness_runf(buf, sizeof buf, "%s generate -m %s --prompt-ids 5,9,11,5,9,11,5,9,11,5 -n 32 -t 2 --json %s 2>/dev/null",
                     cli, model, extra) != 0)
        return;
    char *s = strstr(buf, "\"tokens\""), *e = s ? strchr(s, ']') : NULL;
    if (s && e && (size_t)(e - s) < cap) snprintf(out, cap, "%.*s", (int)(e - s), s);
}

/* `quantize --type mlxB` through the binary on each architecture: the matrices are the
 * reference dequantization of what was written and within one step of the original values
 * (mlx's quantizer puts the edge of larger magnitude exactly on a level, so the other edge may
 * be clipped by up to a step; plus the bf16 rounding of scale and bias); speculative == plain */
static void test_cli_quantize(void) {
    static const char *archs[] = {"llama", "qwen3", "gemma4"};
    static const struct { const char *type; int bits, G; } Q[] = {{"mlx4", 4, 32}, {"MLX8", 8, 128}};
    for (int a = 0; a < 3; a++) {
        char src[600], dir[700], out[4096];
        snprintf(src, sizeof src, "%s-src", tmppath(archs[a]));
        if (make_model(archs[a], src, 512)) continue;
        for (int t = 0; t < 2; t++) {
            snprintf(dir, sizeof dir, "%s-%s", src, Q[t].type);
            int rc = harness_runf(out, sizeof out, "%s quantize -m %s -o %s --type %s --group-size %d 2>&1", cli, src,
                                  dir, Q[t].type, Q[t].G);
            CHECK(rc == 0, "%s %s: %s", archs[a], Q[t].type, out);
            sp_err err = {{0}};
            sp_model *m = NULL, *m0 = NULL;
            st_set *s = NULL;
            if (rc || sp_model_load(&m, dir, 1, &err) || sp_model_load(&m0, src, 1, &err) || sp_st_open_dir(&s, dir, &err)) {
                CHECK(0, "%s %s: %s", archs[a], Q[t].type, err.msg);
                sp_model_free(m), sp_model_free(m0);
                continue;
            }
            char what[64];
            snprintf(what, sizeof what, "%s %s", archs[a], Q[t].type);
            const char *pre = m->cfg.tensor_prefix;
            char nm[200];
            snprintf(nm, sizeof nm, "%sembed_tokens.weight", pre);
            check_mat(s, nm, &m->embed, Q[t].bits, Q[t].G, what);
            snprintf(nm, sizeof nm, "%slayers.1.self_attn.o_proj.weight", pre);
            check_mat(s, nm, &m->layers[1].wo, Q[t].bits, Q[t].G, what);
            if (sp_st_find(s, "lm_head.weight")) check_mat(s, "lm_head.weight", &m->lm_head, Q[t].bits, Q[t].G, what);
            /* within half a quantization step of the original weights (plus rounding) */
            const sp_mat *A = &m->layers[1].wo, *B = &m0->layers[1].wo;
            size_t k = (size_t)A->k, far = 0;
            float *x = malloc(k * 4), *y = malloc(k * 4);
            double step_max = 0;
            for (int r = 0; r < A->n; r++) {
                sp_row_to_f32(x, (const char *)A->data + r * sp_dtype_row_bytes(A->dt, k), A->dt, k, &err);
                sp_row_to_f32(y, (const char *)B->data + r * sp_dtype_row_bytes(B->dt, k), B->dt, k, &err);
                for (size_t g = 0; g < k / Q[t].G; g++) {
                    float lo = y[g * Q[t].G], hi = lo;
                    for (int j = 0; j < Q[t].G; j++) lo = fminf(lo, y[g * Q[t].G + j]), hi = fmaxf(hi, y[g * Q[t].G + j]);
                    double step = (hi - lo) / ((1 << Q[t].bits) - 1);
                    step_max = fmax(step_max, step);
                    for (int j = 0; j < Q[t].G; j++)
                        far += fabs((double)x[g * Q[t].G + j] - y[g * Q[t].G + j]) >
                               1.01 * step + 0.004 * (fabs(lo) + fabs(hi));
                }
            }
            CHECK(far == 0, "%s: %zu values of o_proj more than one step from the original", what, far);
            free(x), free(y);
            sp_st_close(s);
            sp_model_free(m);
            sp_model_free(m0);
            char plain[4096], ng[4096], dm[4096], extra[800];
            gen_tokens(dir, "", plain, sizeof plain);
            gen_tokens(dir, "--spec ngram --draft-max 6", ng, sizeof ng);
            snprintf(extra, sizeof extra, "--spec draft -md %s --draft-max 5", dir);
            gen_tokens(dir, extra, dm, sizeof dm);
            CHECK(plain[0] && !strcmp(plain, ng), "%s: ngram output differs: %s | %s", what, plain, ng);
            CHECK(plain[0] && !strcmp(plain, dm), "%s: draft-model output differs: %s | %s", what, plain, dm);
        }
    }
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) {
        *slash = 0;
        slash = strrchr(cli, '/');
        if (slash) *slash = 0;
    }
    strncat(cli, "/specula", sizeof cli - strlen(cli) - 1);
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_mlx_quant.XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    RUN(test_dequant_exact);
    RUN(test_logits);
    RUN(test_malformed);
    RUN(test_cli_quantize);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (system(cmd)) { /* nothing to do: a leftover temp folder */
    }
    return harness_done("test_mlx_quant");
}
