/* test_gguf_export.c — GGUF export checked by a small validating GGUF reader written here:
 * header, every expected key with its type and value (docs/GGUF-FORMAT.md §4), every tensor with
 * reversed dims, 32-byte alignment, data equal to the safetensors (after undoing the Llama Q/K
 * permutation), rope_freqs (llama3 divisors of the llama fixture: 1, 1.3753, 8, 8), tokenizer
 * metadata from tokenizer.json (byte-level and SentencePiece-style) and from another GGUF, and
 * a clear error for each unexportable input. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "core/core.h"
#include "formats/export_gguf.h"
#include "formats/newmodel.h"
#include "formats/safetensors.h"

static char tmp_root[256];

static const char *tmppath(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", tmp_root, name);
    return b;
}

/* ---- a validating GGUF reader --------------------------------------------------------------- */
typedef struct {
    char key[128];
    uint32_t type, arr_type;
    uint64_t arr_n;
    const uint8_t *val; /* value bytes (after the type tag); for arrays: the first element */
    size_t vlen;        /* bytes of the whole value (arrays: including the 12-byte array header) */
} rkv;

typedef struct {
    char name[80];
    uint32_t nd, type;
    uint64_t ne[4], off, nbytes;
} rten;

typedef struct {
    uint8_t *buf;
    size_t n;
    int nkv, nt;
    rkv kv[256];
    rten t[512];
    size_t data;
} rgguf;

static size_t scalar_size(uint32_t t) {
    static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : 0;
}

/* size of a value at p of type t, or 0 if it does not fit in [p, end) */
static size_t rsize(const uint8_t *p, const uint8_t *end, uint32_t t) {
    if (scalar_size(t)) return (size_t)(end - p) >= scalar_size(t) ? scalar_size(t) : 0;
    uint64_t n;
    if (t == 8) {
        if (end - p < 8) return 0;
        memcpy(&n, p, 8);
        return n <= (uint64_t)(end - p) - 8 ? 8 + n : 0;
    }
    if (t != 9 || end - p < 12) return 0;
    uint32_t et;
    memcpy(&et, p, 4);
    memcpy(&n, p + 4, 8);
    size_t at = 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t s = rsize(p + at, end, et);
        if (!s) return 0;
        at += s;
    }
    return at;
}

static uint64_t ggml_size(uint32_t type) { return type == 0 ? 4 : (type == 1 || type == 30) ? 2 : 0; }

static int rg_open(rgguf *g, const char *path) {
    memset(g, 0, sizeof *g);
    if (sp_read_file(path, (char **)&g->buf, &g->n, NULL)) return -1;
    const uint8_t *p = g->buf, *end = p + g->n;
    uint32_t magic, ver;
    uint64_t nt, nkv;
    CHECK(g->n >= 24, "short file");
    memcpy(&magic, p, 4);
    memcpy(&ver, p + 4, 4);
    memcpy(&nt, p + 8, 8);
    memcpy(&nkv, p + 16, 8);
    CHECK(!memcmp(p, "GGUF", 4) && magic == 0x46554747u, "magic");
    CHECK(ver == 3, "version %u", ver);
    CHECK(nkv <= 256 && nt <= 512, "counts %llu %llu", (unsigned long long)nkv, (unsigned long long)nt);
    if (nkv > 256 || nt > 512) return -1;
    p += 24;
    for (uint64_t i = 0; i < nkv; i++) {
        rkv *k = &g->kv[g->nkv++];
        uint64_t kl;
        memcpy(&kl, p, 8);
        if (kl >= sizeof k->key || (uint64_t)(end - p) < 12 + kl) { CHECK(0, "bad key"); return -1; }
        memcpy(k->key, p + 8, kl);
        memcpy(&k->type, p + 8 + kl, 4);
        p += 12 + kl;
        k->vlen = rsize(p, end, k->type);
        if (!k->vlen) { CHECK(0, "bad value of %s", k->key); return -1; }
        k->val = p;
        if (k->type == 9) {
            memcpy(&k->arr_type, p, 4);
            memcpy(&k->arr_n, p + 4, 8);
            k->val = p + 12;
        }
        p += k->vlen;
    }
    for (uint64_t i = 0; i < nt; i++) {
        rten *t = &g->t[g->nt++];
        uint64_t nl;
        memcpy(&nl, p, 8);
        if (nl >= sizeof t->name || (uint64_t)(end - p) < 8 + nl + 4) { CHECK(0, "bad tensor name"); return -1; }
        memcpy(t->name, p + 8, nl);
        p += 8 + nl;
        memcpy(&t->nd, p, 4);
        p += 4;
        if (t->nd < 1 || t->nd > 4 || end - p < 8 * t->nd + 12) { CHECK(0, "%s: bad dims", t->name); return -1; }
        t->nbytes = ggml_size(0);
        memcpy(t->ne, p, 8 * t->nd);
        p += 8 * t->nd;
        memcpy(&t->type, p, 4);
        memcpy(&t->off, p + 4, 8);
        p += 12;
        t->nbytes = ggml_size(t->type);
        CHECK(t->nbytes, "%s: type %u", t->name, t->type);
        for (uint32_t d = 0; d < t->nd; d++) t->nbytes *= t->ne[d];
    }
    g->data = (size_t)(p - g->buf);
    g->data += (32 - g->data % 32) % 32;
    for (int i = 0; i < g->nt; i++) {
        const rten *t = &g->t[i];
        CHECK(t->off % 32 == 0, "%s offset %llu not aligned", t->name, (unsigned long long)t->off);
        CHECK(g->data + t->off + t->nbytes <= g->n, "%s runs past the end", t->name);
        for (int j = 0; j < i; j++) /* no overlap */
            CHECK(t->off >= g->t[j].off + g->t[j].nbytes || g->t[j].off >= t->off + t->nbytes, "%s overlaps %s",
                  t->name, g->t[j].name);
    }
    return 0;
}

static const rkv *rg_kv(const rgguf *g, const char *key) {
    for (int i = 0; i < g->nkv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

static const rten *rg_t(const rgguf *g, const char *name) {
    for (int i = 0; i < g->nt; i++)
        if (!strcmp(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

static const void *rg_data(const rgguf *g, const rten *t) { return g->buf + g->data + t->off; }

/* typed key checks */
static void key_u32(const rgguf *g, const char *k, uint32_t want) {
    const rkv *v = rg_kv(g, k);
    uint32_t x = 0;
    if (v && v->type == 4) memcpy(&x, v->val, 4);
    CHECK(v && v->type == 4 && x == want, "%s: type %d value %u, expected UINT32 %u", k, v ? (int)v->type : -1, x,
          want);
}
static void key_f32(const rgguf *g, const char *k, float want) {
    const rkv *v = rg_kv(g, k);
    float x = 0;
    if (v && v->type == 6) memcpy(&x, v->val, 4);
    CHECK(v && v->type == 6 && fabsf(x - want) <= 1e-6f * fabsf(want), "%s: %g, expected FLOAT32 %g", k, x, want);
}
static void key_str(const rgguf *g, const char *k, const char *want) {
    const rkv *v = rg_kv(g, k);
    uint64_t n = 0;
    if (v && v->type == 8) memcpy(&n, v->val, 8);
    CHECK(v && v->type == 8 && n == strlen(want) && !memcmp(v->val + 8, want, n), "%s: expected STRING %s", k, want);
}
static void key_arr(const rgguf *g, const char *k, uint32_t et, const int32_t *want, int n) {
    const rkv *v = rg_kv(g, k);
    CHECK(v && v->type == 9 && v->arr_type == et && v->arr_n == (uint64_t)n, "%s: expected array of %d type %u", k,
          n, et);
    if (!v || v->type != 9 || v->arr_type != et || v->arr_n != (uint64_t)n) return;
    for (int i = 0; i < n; i++) {
        int32_t x = 0;
        if (et == 7) x = v->val[i];
        else memcpy(&x, v->val + 4 * i, 4);
        CHECK(x == want[i], "%s[%d] = %d, expected %d", k, i, x, want[i]);
    }
}
/* string i of a string array */
static int arr_str(const rkv *v, uint64_t idx, char *out, size_t cap) {
    if (!v || v->type != 9 || v->arr_type != 8 || idx >= v->arr_n) return -1;
    const uint8_t *p = v->val;
    uint64_t n;
    for (uint64_t i = 0;; i++) {
        memcpy(&n, p, 8);
        if (i == idx) break;
        p += 8 + n;
    }
    snprintf(out, cap, "%.*s", (int)n, (const char *)p + 8);
    return 0;
}

/* ---- the expected GGUF name of an HF tensor (written independently of export_gguf.c) ---------- */
static int map_name(const sp_config *c, const char *hf, char *out, size_t cap) {
    size_t pl = strlen(c->tensor_prefix);
    if (!strcmp(hf, "lm_head.weight")) return snprintf(out, cap, "output.weight"), 0;
    if (strncmp(hf, c->tensor_prefix, pl)) return -1;
    hf += pl;
    const char *g[][2] = {{"embed_tokens.weight", "token_embd.weight"},
                          {"norm.weight", "output_norm.weight"},
                          {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
                          {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
                          {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"}};
    for (int i = 0; i < 5; i++)
        if (!strcmp(hf, g[i][0])) return snprintf(out, cap, "%s", g[i][1]), 0;
    int li, used = 0;
    if (sscanf(hf, "layers.%d.%n", &li, &used) != 1 || !used) return -1;
    const char *r = hf + used, *m = NULL;
    const char *l[][2] = {{"input_layernorm.weight", "attn_norm"},     {"self_attn.q_proj.weight", "attn_q"},
                          {"self_attn.k_proj.weight", "attn_k"},       {"self_attn.v_proj.weight", "attn_v"},
                          {"self_attn.o_proj.weight", "attn_output"},  {"self_attn.q_norm.weight", "attn_q_norm"},
                          {"self_attn.k_norm.weight", "attn_k_norm"},  {"mlp.gate_proj.weight", "ffn_gate"},
                          {"mlp.up_proj.weight", "ffn_up"},            {"mlp.down_proj.weight", "ffn_down"},
                          {"pre_feedforward_layernorm.weight", "ffn_norm"},
                          {"post_feedforward_layernorm.weight", "post_ffw_norm"},
                          {"layer_scalar", "layer_output_scale"},      {"per_layer_input_gate.weight", "inp_gate"},
                          {"per_layer_projection.weight", "proj"},     {"post_per_layer_input_norm.weight", "post_norm"}};
    if (!strcmp(r, "post_attention_layernorm.weight"))
        m = c->arch == SP_ARCH_GEMMA4 ? "post_attention_norm" : "ffn_norm";
    for (int i = 0; !m && i < 16; i++)
        if (!strcmp(r, l[i][0])) m = l[i][1];
    if (!m) return -1;
    snprintf(out, cap, "blk.%d.%s.weight", li, m);
    return 0;
}

/* Compare a whole export against its source directory. weight_type: -1 as stored. */
static void check_export(const char *dir, const char *gguf, int weight_type) {
    sp_config c;
    sp_err err = {{0}};
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (sp_config_load(&c, path, &err)) { CHECK(0, "%s", err.msg); return; }
    rgguf g;
    if (rg_open(&g, gguf)) { CHECK(0, "cannot read %s", gguf); return; }
    st_set *s = NULL;
    if (sp_st_open_dir(&s, dir, &err)) {
        free(g.buf);
        { CHECK(0, "%s", err.msg); return; }
    }
    const char *A = sp_arch_name(c.arch);
    char k[128];
#define K(suffix) (snprintf(k, sizeof k, "%s.%s", A, suffix), k)
    key_str(&g, "general.architecture", A);
    key_u32(&g, K("context_length"), (uint32_t)c.max_pos);
    key_u32(&g, K("embedding_length"), (uint32_t)c.hidden_size);
    key_u32(&g, K("block_count"), (uint32_t)c.n_layers);
    key_u32(&g, K("attention.head_count"), (uint32_t)c.n_heads);
    key_f32(&g, K("attention.layer_norm_rms_epsilon"), (float)c.rms_eps);
    key_f32(&g, K("rope.freq_base"), (float)c.rope.theta);
    int L = c.n_layers;
    if (c.arch != SP_ARCH_GEMMA4) {
        key_u32(&g, K("feed_forward_length"), (uint32_t)c.ffn_dim);
        key_u32(&g, K("attention.head_count_kv"), (uint32_t)c.n_kv_heads);
        key_u32(&g, K("attention.key_length"), (uint32_t)c.head_dim);
        key_u32(&g, K("attention.value_length"), (uint32_t)c.head_dim);
        key_u32(&g, K("rope.dimension_count"), (uint32_t)c.head_dim);
    } else {
        int32_t pat[SP_MAX_LAYERS], kvh[SP_MAX_LAYERS], ffn[SP_MAX_LAYERS];
        int Dg = 0;
        for (int i = 0; i < L; i++) {
            pat[i] = c.layers[i].sliding;
            kvh[i] = c.layers[i].n_kv_heads;
            ffn[i] = c.layers[i].ffn_dim;
            if (!pat[i]) Dg = c.layers[i].head_dim;
        }
        key_arr(&g, K("attention.sliding_window_pattern"), 7, pat, L);
        if (c.n_global_kv_heads && c.attention_k_eq_v) key_arr(&g, K("attention.head_count_kv"), 5, kvh, L);
        else key_u32(&g, K("attention.head_count_kv"), (uint32_t)c.n_kv_heads);
        if (c.double_wide_mlp && c.n_kv_shared) key_arr(&g, K("feed_forward_length"), 5, ffn, L);
        else key_u32(&g, K("feed_forward_length"), (uint32_t)c.ffn_dim);
        key_u32(&g, K("attention.sliding_window"), (uint32_t)c.sliding_window);
        key_u32(&g, K("attention.key_length"), (uint32_t)Dg);
        key_u32(&g, K("attention.value_length"), (uint32_t)Dg);
        key_u32(&g, K("attention.key_length_swa"), (uint32_t)c.head_dim);
        key_u32(&g, K("attention.value_length_swa"), (uint32_t)c.head_dim);
        key_f32(&g, K("rope.freq_base_swa"), (float)c.rope_swa.theta);
        key_u32(&g, K("rope.dimension_count"), (uint32_t)Dg);
        key_u32(&g, K("rope.dimension_count_swa"), (uint32_t)c.head_dim);
        key_u32(&g, K("attention.shared_kv_layers"), (uint32_t)c.n_kv_shared);
        key_u32(&g, K("embedding_length_per_layer_input"), (uint32_t)c.ple_dim);
        key_f32(&g, K("final_logit_softcapping"), (float)c.final_softcap);
    }
#undef K
    /* tensors: every source tensor (except the deliberately dropped ones) + rope_freqs */
    int expected = 0;
    for (int i = 0; i < sp_st_count(s); i++) {
        const st_tensor *t = sp_st_at(s, i);
        char name[96];
        CHECK(map_name(&c, t->name, name, sizeof name) == 0, "no mapping for %s", t->name);
        const rten *r = rg_t(&g, name);
        int li = -1;
        sscanf(name, "blk.%d.", &li);
        int dropped = c.arch == SP_ARCH_GEMMA4 && li >= L - c.n_kv_shared &&
                      (strstr(name, "attn_k.") || strstr(name, "attn_v.") || strstr(name, "attn_k_norm"));
        if (dropped) {
            CHECK(!r, "%s of a KV-shared layer exported", name);
            continue;
        }
        expected++;
        CHECK(r != NULL, "%s (from %s) missing", name, t->name);
        if (!r) continue;
        CHECK((int)r->nd == t->ndim, "%s: %u dims", name, r->nd);
        for (int d = 0; d < t->ndim && d < 4; d++)
            CHECK(r->ne[d] == (uint64_t)t->shape[t->ndim - 1 - d], "%s: ne[%d] = %llu, expected %lld", name, d,
                  (unsigned long long)r->ne[d], (long long)t->shape[t->ndim - 1 - d]);
        uint32_t want_type = t->ndim == 1 ? 0
                             : weight_type >= 0 ? (uint32_t)weight_type
                             : t->dtype == SP_DT_BF16 ? 30 : t->dtype == SP_DT_F16 ? 1 : 0;
        CHECK(r->type == want_type, "%s: type %u, expected %u", name, r->type, want_type);
        if (r->type != want_type || (int)r->nd != t->ndim) continue;
        /* data: GGUF row `row` of a Llama Q/K weight came from HF row h·D + s·D/2 + j, row = h·D + 2j + s */
        int perm = c.arch == SP_ARCH_LLAMA && (strstr(name, "attn_q.") || strstr(name, "attn_k."));
        int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0], rows = t->ndim == 2 ? t->shape[0] : 1;
        int D = c.head_dim, bad = 0;
        float *src = malloc((size_t)t->numel * 4);
        sp_to_f32(src, t->data, t->dtype, (size_t)t->numel);
        const uint8_t *dst = rg_data(&g, r);
        for (int64_t hr = 0; hr < rows && !bad; hr++) {
            int64_t h = hr / D, s2 = (hr % D) / (D / 2), j = hr % (D / 2);
            int64_t gr = perm ? h * D + 2 * j + s2 : hr;
            for (int64_t x = 0; x < cols && !bad; x++) {
                float want = src[hr * cols + x], got;
                size_t at = (size_t)(gr * cols + x);
                if (r->type == 0) memcpy(&got, dst + 4 * at, 4);
                else {
                    uint16_t h16;
                    memcpy(&h16, dst + 2 * at, 2);
                    got = r->type == 1 ? sp_f16_to_f32(h16) : sp_bf16_to_f32(h16);
                    want = r->type == 1 ? sp_f16_to_f32(sp_f32_to_f16(want)) : sp_bf16_to_f32(sp_f32_to_bf16(want));
                }
                if (memcmp(&got, &want, 4)) {
                    bad = 1;
                    CHECK(0, "%s: value [%lld, %lld] = %g, expected %g", name, (long long)hr, (long long)x, got, want);
                }
            }
        }
        free(src);
    }
    int has_freqs = (c.arch == SP_ARCH_LLAMA && c.rope.type == SP_ROPE_LLAMA3) || c.arch == SP_ARCH_GEMMA4;
    CHECK(g.nt == expected + has_freqs, "%d tensors, expected %d", g.nt, expected + has_freqs);
    const rten *rf = rg_t(&g, "rope_freqs.weight");
    CHECK(!rf == !has_freqs, "rope_freqs presence");
    if (rf && c.arch == SP_ARCH_GEMMA4) {
        int Dg = (int)rf->ne[0] * 2, n_rot = (int)(Dg * c.rope.partial_rotary_factor / 2);
        const float *f = rg_data(&g, rf);
        CHECK(rf->type == 0 && rf->nd == 1, "rope_freqs type");
        for (int j = 0; j < Dg / 2; j++) CHECK(f[j] == (j < n_rot ? 1.0f : 1e30f), "rope_freqs[%d] = %g", j, f[j]);
    }
    if (rf && c.arch == SP_ARCH_LLAMA) {
        CHECK(rf->ne[0] == (uint64_t)c.head_dim / 2, "rope_freqs length");
        const float *f = rg_data(&g, rf);
        /* docs/TRANSFORMER.md §4 rule, as divisors: inv_f / new_inv_f */
        for (int j = 0; j < c.head_dim / 2; j++) {
            double inv = pow(c.rope.theta, -2.0 * j / c.head_dim), wl = 2 * M_PI / inv, C = c.rope.original_max_pos;
            double lo = c.rope.low_freq_factor, hi = c.rope.high_freq_factor, fa = c.rope.factor, nf;
            if (wl < C / hi) nf = inv;
            else if (wl > C / lo) nf = inv / fa;
            else {
                double sm = (C / wl - lo) / (hi - lo);
                nf = (1 - sm) * inv / fa + sm * inv;
            }
            CHECK(fabs(f[j] - inv / nf) < 1e-5 * (inv / nf), "rope_freqs[%d] = %g, expected %g", j, f[j], inv / nf);
        }
    }
    sp_st_close(s);
    free(g.buf);
}

static int do_export(const char *dir, const char *out, int type, int no_tok, const char *tok_gguf, sp_err *err) {
    export_gguf_opts o = {.weight_type = type, .no_tokenizer = no_tok, .tokenizer_gguf = tok_gguf};
    return sp_export_gguf(dir, out, &o, err);
}

static int make_model(const char *dir, const char *arch, sp_dtype dt, const char *const *sets, int n) {
    newmodel_opts o = {.arch = arch, .preset = "tiny", .dtype = dt, .seed = 42, .sets = sets, .n_sets = n,
                       .n_threads = 1};
    sp_err err = {{0}};
    int rc = sp_newmodel_write(dir, &o, &err);
    CHECK(rc == 0, "%s", err.msg);
    return rc;
}

/* the writer alone: every scalar type, arrays, raw values, two tensors, and its input checks */
static void test_writer_types(void) {
    gguf_writer *w = sp_gguf_writer_create();
    sp_err err = {{0}};
    int rc = sp_gguf_writer_set_u8(w, "t.u8", 200, &err) | sp_gguf_writer_set_i8(w, "t.i8", -5, &err) |
             sp_gguf_writer_set_u16(w, "t.u16", 60000, &err) | sp_gguf_writer_set_i16(w, "t.i16", -30000, &err) |
             sp_gguf_writer_set_u32(w, "t.u32", 4000000000u, &err) | sp_gguf_writer_set_i32(w, "t.i32", -7, &err) |
             sp_gguf_writer_set_u64(w, "t.u64", 1ull << 40, &err) | sp_gguf_writer_set_i64(w, "t.i64", -(1ll << 40), &err) |
             sp_gguf_writer_set_f32(w, "t.f32", 0.25f, &err) | sp_gguf_writer_set_f64(w, "t.f64", -1.5, &err) |
             sp_gguf_writer_set_bool(w, "t.bool", 1, &err) | sp_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo", &err);
    CHECK(rc == 0, "%s", err.msg);
    const float fa[3] = {1, -2, 3.5f};
    const char *sa[2] = {"a b", ""};
    const uint8_t raw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(sp_gguf_writer_set_arr(w, "t.arr_f32", GGUF_TYPE_FLOAT32, fa, 3, &err) == 0, "%s", err.msg);
    CHECK(sp_gguf_writer_set_arr_str(w, "t.arr_str", sa, 2, &err) == 0, "%s", err.msg);
    CHECK(sp_gguf_writer_set_arr(w, "t.arr_empty", GGUF_TYPE_INT32, NULL, 0, &err) == 0, "%s", err.msg);
    CHECK(sp_gguf_writer_set_raw(w, "t.raw_u64", GGUF_TYPE_UINT64, raw, 8, &err) == 0, "%s", err.msg);
    /* refused: duplicate key, BOOL other than 0/1, non-scalar array element, bad tensors */
    uint8_t two = 2;
    CHECK(sp_gguf_writer_set_u8(w, "t.u8", 1, &err) != 0 && strstr(err.msg, "t.u8"), "duplicate key: %s", err.msg);
    CHECK(sp_gguf_writer_set_arr(w, "t.b", GGUF_TYPE_BOOL, &two, 1, &err) != 0, "BOOL 2 accepted");
    CHECK(sp_gguf_writer_set_arr(w, "t.s", GGUF_TYPE_STRING, sa, 1, &err) != 0, "string via set_arr accepted");
    int64_t ne[2] = {3, 2}, ne5[5] = {1, 1, 1, 1, 1};
    float data[6] = {1, 2, 3, 4, 5, 6};
    const char *long_name = "a_tensor_name_that_is_much_longer_than_sixty_three_bytes_allowed_x";
    CHECK(sp_gguf_writer_add_tensor(w, "w", GGML_TYPE_F32, 2, ne, data, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(sp_gguf_writer_add_tensor(w, "w", GGML_TYPE_F32, 2, ne, data, NULL, NULL, &err) != 0, "duplicate tensor");
    CHECK(sp_gguf_writer_add_tensor(w, long_name, GGML_TYPE_F32, 2, ne, data, NULL, NULL, &err) != 0, "long name");
    CHECK(sp_gguf_writer_add_tensor(w, "x", GGML_TYPE_F32, 5, ne5, data, NULL, NULL, &err) != 0, "5 dims");
    CHECK(sp_gguf_writer_add_tensor(w, "x", GGML_TYPE_F32, 2, ne, NULL, NULL, NULL, &err) != 0, "no data");
    int64_t ne1[1] = {1};
    CHECK(sp_gguf_writer_add_tensor(w, "one", GGML_TYPE_F16, 1, ne1, data, NULL, NULL, &err) == 0, "%s", err.msg);
    const char *out = tmppath("types.gguf");
    CHECK(sp_gguf_writer_save(w, out, &err) == 0, "%s", err.msg);
    sp_gguf_writer_free(w);
    rgguf g;
    if (rg_open(&g, out)) return;
    CHECK(g.nkv == 16 && g.nt == 2, "%d keys, %d tensors", g.nkv, g.nt);
    const struct {
        const char *k;
        uint32_t type;
        int64_t v;
    } ints[] = {{"t.u8", 0, 200},          {"t.i8", 1, -5},           {"t.u16", 2, 60000},
                {"t.i16", 3, -30000},      {"t.u32", 4, 4000000000ll}, {"t.i32", 5, -7},
                {"t.u64", 10, 1ll << 40},  {"t.i64", 11, -(1ll << 40)}, {"t.bool", 7, 1}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const rkv *v = rg_kv(&g, ints[i].k);
        int64_t x = 0;
        if (v) switch (v->type) {
            case 0: x = v->val[0]; break;
            case 1: x = (int8_t)v->val[0]; break;
            case 2: { uint16_t y; memcpy(&y, v->val, 2); x = y; } break;
            case 3: { int16_t y; memcpy(&y, v->val, 2); x = y; } break;
            case 4: { uint32_t y; memcpy(&y, v->val, 4); x = y; } break;
            case 5: { int32_t y; memcpy(&y, v->val, 4); x = y; } break;
            case 7: x = v->val[0]; break;
            default: memcpy(&x, v->val, 8);
            }
        CHECK(v && v->type == ints[i].type && x == ints[i].v, "%s", ints[i].k);
    }
    key_f32(&g, "t.f32", 0.25f);
    const rkv *f64 = rg_kv(&g, "t.f64");
    double d = 0;
    if (f64) memcpy(&d, f64->val, 8);
    CHECK(f64 && f64->type == 12 && d == -1.5, "f64");
    key_str(&g, "t.str", "h\xc3\xa9llo");
    const rkv *af = rg_kv(&g, "t.arr_f32");
    CHECK(af && af->arr_type == 6 && af->arr_n == 3 && !memcmp(af->val, fa, 12), "float array");
    char s0[16], s1[16];
    const rkv *as = rg_kv(&g, "t.arr_str");
    CHECK(arr_str(as, 0, s0, 16) == 0 && arr_str(as, 1, s1, 16) == 0 && !strcmp(s0, "a b") && !s1[0], "string array");
    const rkv *ae = rg_kv(&g, "t.arr_empty");
    CHECK(ae && ae->arr_type == 5 && ae->arr_n == 0, "empty array");
    const rkv *rw = rg_kv(&g, "t.raw_u64");
    CHECK(rw && rw->type == 10 && !memcmp(rw->val, raw, 8), "raw value");
    const rten *t = rg_t(&g, "w");
    CHECK(t && t->nd == 2 && t->ne[0] == 3 && t->ne[1] == 2 && t->off == 0 && !memcmp(rg_data(&g, t), data, 24), "w");
    t = rg_t(&g, "one");
    CHECK(t && t->type == 1 && t->off == 32 && t->nbytes == 2, "second tensor at the next 32-byte boundary");
    CHECK(g.data % 32 == 0 && g.n == g.data + 64, "file size %zu, data at %zu", g.n, g.data);
    free(g.buf);
}

static void test_tiny_exports(void) {
    const char *archs[] = {"llama", "qwen3", "gemma4"};
    for (int a = 0; a < 3; a++) {
        char name[64];
        snprintf(name, sizeof name, "%s_f32", archs[a]);
        const char *dir = tmppath(name), *out = tmppath("out.gguf");
        if (make_model(dir, archs[a], SP_DT_F32, NULL, 0)) continue;
        sp_err err = {{0}};
        CHECK(do_export(dir, out, -1, 1, NULL, &err) == 0, "%s: %s", archs[a], err.msg);
        check_export(dir, out, -1);
        CHECK(do_export(dir, out, GGML_TYPE_F16, 1, NULL, &err) == 0, "%s: %s", archs[a], err.msg);
        check_export(dir, out, GGML_TYPE_F16);
        snprintf(name, sizeof name, "%s_bf16", archs[a]);
        dir = tmppath(name);
        if (make_model(dir, archs[a], SP_DT_BF16, NULL, 0)) continue;
        CHECK(do_export(dir, out, -1, 1, NULL, &err) == 0, "%s: %s", archs[a], err.msg);
        check_export(dir, out, -1); /* bf16 stays bf16 */
        CHECK(do_export(dir, out, GGML_TYPE_F32, 1, NULL, &err) == 0, "%s: %s", archs[a], err.msg);
        check_export(dir, out, GGML_TYPE_F32);
    }
}

/* The fixtures, with the vocabulary of llama.cpp's llama-spm GGUF (the README's recipe). */
static void test_fixtures(void) {
    const char *vocab = "tests/data/peer-vectors/ggml-vocab-llama-spm.gguf";
    const char *archs[] = {"llama", "qwen3", "gemma4"};
    rgguf v;
    if (rg_open(&v, vocab)) { CHECK(0, "cannot read %s", vocab); return; }
    for (int a = 0; a < 3; a++) {
        char dir[128];
        snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", archs[a]);
        const char *out = tmppath("fixture.gguf");
        sp_err err = {{0}};
        CHECK(do_export(dir, out, -1, 0, vocab, &err) == 0, "%s: %s", dir, err.msg);
        check_export(dir, out, -1);
        rgguf g;
        if (rg_open(&g, out)) continue;
        /* every tokenizer.* key copied byte for byte */
        int n_tok = 0;
        for (int i = 0; i < v.nkv; i++) {
            if (strncmp(v.kv[i].key, "tokenizer.", 10)) continue;
            n_tok++;
            const rkv *x = rg_kv(&g, v.kv[i].key);
            CHECK(x && x->type == v.kv[i].type && x->vlen == v.kv[i].vlen &&
                      !memcmp(x->val - (x->type == 9 ? 12 : 0), v.kv[i].val - (v.kv[i].type == 9 ? 12 : 0), x->vlen),
                  "%s not copied", v.kv[i].key);
        }
        CHECK(n_tok >= 5, "only %d tokenizer keys in %s", n_tok, vocab);
        if (a == 0) {
            const rten *rf = rg_t(&g, "rope_freqs.weight");
            CHECK(rf && rf->ne[0] == 4, "llama fixture rope_freqs");
            if (rf) {
                const float *f = rg_data(&g, rf), want[4] = {1.0f, 1.3753f, 8.0f, 8.0f};
                for (int j = 0; j < 4; j++) CHECK(fabsf(f[j] - want[j]) < 1e-3f, "rope_freqs[%d] = %.5f", j, f[j]);
            }
        }
        if (a == 2) { /* the README's gemma4 key values */
            int32_t kv[6] = {2, 1, 2, 1, 2, 1};
            key_arr(&g, "gemma4.attention.head_count_kv", 5, kv, 6);
            key_u32(&g, "gemma4.rope.dimension_count", 32);
            key_u32(&g, "gemma4.rope.dimension_count_swa", 16);
            key_u32(&g, "gemma4.attention.shared_kv_layers", 2);
        }
        free(g.buf);
    }
    free(v.buf);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_tokenizer_json(void) {
    /* byte-level BPE (Qwen3 style) */
    const char *dir = tmppath("qwen3_tok"), *out = tmppath("tok.gguf");
    if (make_model(dir, "qwen3", SP_DT_F32, NULL, 0)) return;
    char p[600];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    write_text(p, "{\"added_tokens\":[{\"id\":300,\"content\":\"<|endoftext|>\",\"special\":true},"
                  "{\"id\":301,\"content\":\"<think>\",\"special\":false}],"
                  "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\"},"
                  "{\"type\":\"ByteLevel\"}]},"
                  "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\\u0120\":3},"
                  "\"merges\":[\"a b\"]}}");
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    write_text(p, "{\"eos_token\":\"<|endoftext|>\",\"chat_template\":\"{{ messages }}\"}");
    sp_err err = {{0}};
    CHECK(do_export(dir, out, -1, 0, NULL, &err) == 0, "%s", err.msg);
    rgguf g;
    if (rg_open(&g, out) == 0) {
        key_str(&g, "tokenizer.ggml.model", "gpt2");
        key_str(&g, "tokenizer.ggml.pre", "qwen2");
        key_str(&g, "tokenizer.chat_template", "{{ messages }}");
        key_u32(&g, "tokenizer.ggml.eos_token_id", 300);
        const rkv *t = rg_kv(&g, "tokenizer.ggml.tokens");
        char s[64];
        CHECK(t && t->arr_n == 8192, "token list length %llu", t ? (unsigned long long)t->arr_n : 0ull);
        CHECK(arr_str(t, 2, s, sizeof s) == 0 && !strcmp(s, "ab"), "token 2 = %s", s);
        CHECK(arr_str(t, 3, s, sizeof s) == 0 && !strcmp(s, "\xc4\xa0"), "token 3 = %s", s);
        CHECK(arr_str(t, 299, s, sizeof s) == 0 && !strcmp(s, "[PAD299]"), "token 299 = %s", s);
        CHECK(arr_str(t, 300, s, sizeof s) == 0 && !strcmp(s, "<|endoftext|>"), "token 300 = %s", s);
        const rkv *ty = rg_kv(&g, "tokenizer.ggml.token_type");
        int32_t types[302] = {0};
        if (ty && ty->type == 9 && ty->arr_type == 5 && ty->arr_n == 8192) memcpy(types, ty->val, sizeof types);
        CHECK(types[0] == 1 && types[299] == 5 && types[300] == 3 && types[301] == 4, "token types %d %d %d %d",
              types[0], types[299], types[300], types[301]);
        const rkv *m = rg_kv(&g, "tokenizer.ggml.merges");
        CHECK(m && m->arr_n == 1 && arr_str(m, 0, s, sizeof s) == 0 && !strcmp(s, "a b"), "merges");
        CHECK(rg_kv(&g, "tokenizer.ggml.scores") == NULL, "gpt2 has no scores");
        const rkv *ab = rg_kv(&g, "tokenizer.ggml.add_bos_token");
        CHECK(ab && ab->type == 7 && ab->val[0] == 0, "qwen3 add_bos false");
        free(g.buf);
    }

    /* SentencePiece-style BPE with byte fallback (Gemma style) */
    dir = tmppath("gemma_tok");
    if (make_model(dir, "gemma4", SP_DT_F32, NULL, 0)) return;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    write_text(p, "{\"added_tokens\":[{\"id\":0,\"content\":\"<pad>\",\"special\":true},"
                  "{\"id\":1,\"content\":\"<eos>\",\"special\":true},{\"id\":2,\"content\":\"<bos>\",\"special\":true},"
                  "{\"id\":3,\"content\":\"<unk>\",\"special\":true},"
                  "{\"id\":9,\"content\":\"<|channel>\",\"special\":true}],"
                  "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\"},{\"type\":\"ByteFallback\"}]},"
                  "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"<unk>\",\"vocab\":{\"<pad>\":0,"
                  "\"<eos>\":1,\"<bos>\":2,\"<unk>\":3,\"<0x00>\":4,\"<0x0A>\":5,\"\\u2581\":6,\"a\":7,"
                  "\"\\u2581a\":8},\"merges\":[[\"\\u2581\",\"a\"]]}}");
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    write_text(p, "{\"bos_token\":{\"content\":\"<bos>\"},\"eos_token\":\"<eos>\",\"pad_token\":\"<pad>\"}");
    CHECK(do_export(dir, out, -1, 0, NULL, &err) == 0, "%s", err.msg);
    if (rg_open(&g, out) == 0) {
        key_str(&g, "tokenizer.ggml.model", "gemma4");
        key_u32(&g, "tokenizer.ggml.bos_token_id", 2);
        key_u32(&g, "tokenizer.ggml.eos_token_id", 1);
        key_u32(&g, "tokenizer.ggml.padding_token_id", 0);
        key_u32(&g, "tokenizer.ggml.unknown_token_id", 3);
        const rkv *ty = rg_kv(&g, "tokenizer.ggml.token_type");
        int32_t types[10] = {0};
        if (ty && ty->type == 9 && ty->arr_type == 5) memcpy(types, ty->val, sizeof types);
        CHECK(types[2] == 3 && types[3] == 2 && types[4] == 6 && types[5] == 6 && types[7] == 1 && types[9] == 4,
              "gemma token types %d %d %d %d %d %d", types[2], types[3], types[4], types[5], types[7], types[9]);
        const rkv *sc = rg_kv(&g, "tokenizer.ggml.scores");
        CHECK(sc && sc->arr_type == 6 && sc->arr_n == 8192, "scores");
        const rkv *m = rg_kv(&g, "tokenizer.ggml.merges");
        char s[64];
        CHECK(m && m->arr_n == 1 && arr_str(m, 0, s, sizeof s) == 0 && !strcmp(s, "\xe2\x96\x81 a"), "merges");
        const rkv *sp = rg_kv(&g, "tokenizer.ggml.add_space_prefix");
        CHECK(sp && sp->type == 7 && sp->val[0] == 0, "add_space_prefix false");
        free(g.buf);
    }

    /* the same SentencePiece-style vocabulary under llama: SPM model "llama", merges as scores */
    char text[2048];
    size_t n;
    char *src;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (sp_read_file(p, &src, &n, NULL)) return;
    snprintf(text, sizeof text, "{\"normalizer\":{\"type\":\"Prepend\",\"prepend\":\"x\"},%s", src + 1);
    free(src);
    dir = tmppath("llama_spm");
    if (make_model(dir, "llama", SP_DT_F32, NULL, 0)) return;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    write_text(p, text);
    CHECK(do_export(dir, out, -1, 0, NULL, &err) == 0, "%s", err.msg);
    if (rg_open(&g, out) == 0) {
        key_str(&g, "tokenizer.ggml.model", "llama");
        CHECK(rg_kv(&g, "tokenizer.ggml.merges") == NULL, "SPM has no merges");
        const rkv *sc = rg_kv(&g, "tokenizer.ggml.scores");
        float s8 = 0, s7 = 1;
        if (sc && sc->arr_type == 6 && sc->arr_n == 8192) {
            memcpy(&s8, sc->val + 4 * 8, 4);
            memcpy(&s7, sc->val + 4 * 7, 4);
        }
        CHECK(s8 == -1.0f && s7 == 0.0f, "scores: token made by merge 0 = %g, base token = %g", s8, s7);
        const rkv *sp = rg_kv(&g, "tokenizer.ggml.add_space_prefix");
        CHECK(sp && sp->type == 7 && sp->val[0] == 1, "add_space_prefix true with a Prepend normalizer");
        free(g.buf);
    }
}

/* copy a model dir's safetensors with one tensor left out (skip) or one extra tensor (extra) */
static void rewrite_model(const char *src, const char *dst, const char *skip, const char *extra) {
    sp_mkdir_p(dst, NULL);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/config.json", src);
    snprintf(b, sizeof b, "%s/config.json", dst);
    char *text;
    size_t n;
    if (sp_read_file(a, &text, &n, NULL) == 0) {
        sp_write_file_atomic(b, text, n, NULL);
        free(text);
    }
    st_set *s = NULL;
    if (sp_st_open_dir(&s, src, NULL)) { CHECK(0, "open %s", src); return; }
    st_writer *w = sp_st_writer_create();
    for (int i = 0; i < sp_st_count(s); i++) {
        const st_tensor *t = sp_st_at(s, i);
        if (skip && !strcmp(t->name, skip)) continue;
        sp_st_writer_add_ref(w, t->name, t->dtype, t->ndim, t->shape, t->data, NULL);
    }
    float x[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    if (extra) sp_st_writer_add(w, extra, SP_DT_F32, 1, shape, x, NULL);
    snprintf(b, sizeof b, "%s/model.safetensors", dst);
    sp_err err = {{0}};
    CHECK(sp_st_writer_save(w, b, &err) == 0, "%s", err.msg);
    sp_st_writer_free(w);
    sp_st_close(s);
}

static void test_errors(void) {
    const char *dir = tmppath("err_base"), *out = tmppath("err.gguf");
    if (make_model(dir, "gemma4", SP_DT_F32, NULL, 0)) return;
    sp_err err = {{0}};
    CHECK(do_export(dir, out, -1, 0, NULL, &err) != 0 && strstr(err.msg, "--no-tokenizer"), "%s", err.msg);
    CHECK(access(out, F_OK) != 0, "a failed export left %s behind", out);
    CHECK(do_export(dir, out, -1, 0, "tests/data/peer-vectors/ggml-vocab-llama-spm.gguf", &err) != 0 &&
              strstr(err.msg, "vocab_size"),
          "%s", err.msg);
    const char *d2 = tmppath("err_missing");
    rewrite_model(dir, d2, "model.language_model.layers.1.mlp.up_proj.weight", NULL);
    CHECK(do_export(d2, out, -1, 1, NULL, &err) != 0 && strstr(err.msg, "layers.1.mlp.up_proj"), "%s", err.msg);
    const char *d3 = tmppath("err_extra");
    rewrite_model(dir, d3, NULL, "model.language_model.layers.0.mystery.weight");
    CHECK(do_export(d3, out, -1, 1, NULL, &err) != 0 && strstr(err.msg, "mystery"), "%s", err.msg);
    /* vision tensors and a KV-shared layer's unused k_proj are dropped, not refused */
    const char *d4 = tmppath("err_dropped");
    rewrite_model(dir, d4, NULL, "model.vision_tower.patch.weight");
    CHECK(do_export(d4, out, -1, 1, NULL, &err) == 0, "%s", err.msg);
    const char *d5 = tmppath("err_shared_k");
    rewrite_model(dir, d5, NULL, "model.language_model.layers.5.self_attn.k_norm.weight");
    CHECK(do_export(d5, out, -1, 1, NULL, &err) == 0, "%s", err.msg);
    /* a KV-sharing layout llama.cpp cannot represent (docs/GGUF-FORMAT.md §7) */
    const char *bad_layout[] = {"num_kv_shared_layers=2"};
    const char *d6 = tmppath("err_layout");
    if (make_model(d6, "gemma4", SP_DT_F32, bad_layout, 1) == 0)
        CHECK(do_export(d6, out, -1, 1, NULL, &err) != 0 && strstr(err.msg, "llama.cpp"), "%s", err.msg);
    CHECK(do_export(tmppath("nonexistent"), out, -1, 1, NULL, &err) != 0 && strstr(err.msg, "config.json"), "%s",
          err.msg);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/specula_test_gguf.XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    sp_log_level = SP_LOG_ERROR;
    RUN(test_writer_types);
    RUN(test_tiny_exports);
    RUN(test_fixtures);
    RUN(test_tokenizer_json);
    RUN(test_errors);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return harness_done("test_gguf_export");
}
