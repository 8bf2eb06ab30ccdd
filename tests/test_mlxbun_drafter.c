/* test_mlxbun_drafter.c — what mlx-bun's drafters need of the target (docs/MLX-BUN-DRAFTERS.md):
 * - the sentinel tap (index = num_layers) is the final post-norm hidden, bit for bit, in a
 *   single forward and in a batched one, beside ordinary taps; num_layers + 1 is refused;
 * - regen (library and `specula regen --taps` through the binary) accepts a tap list ending with
 *   the sentinel, and the shard's last tap slot equals its "hidden" tensor; a sentinel that is not
 *   last, and the final decoder layer itself, are refused;
 * - a directory in mlx-bun's own drafter layout (dspark.json) is taken for mlx-bun's drafter kind:
 *   an incomplete one fails naming dspark.json and the missing key, an unknown variant is named
 *   (running them: test_mlxbun_run.c);
 * - `new-drafter --layout mlx-bun` (v1 and faithful) writes exactly the documented json keys,
 *   tensor names, shapes, dtypes and initial values (the random stream re-derived here). */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "fixtures.h"
#include "formats/safetensors.h"
#include "harness.h"
#include "specula.h"
#include "train/regen.h"
#include "train/shards.h"

/* taps {0, L}: the slot of L equals .hidden exactly, in one forward and in a batch of two */
static void sentinel_one(const char *arch) {
    sp_model *m = fixture_load(arch);
    if (!m) { CHECK(0, "load %s", arch); return; }
    const sp_config *c = sp_model_config(m);
    int H = c->hidden_size, L = c->n_layers, T = 5;
    int taps[2] = {0, L};
    int32_t tok[5] = {1, 2, 3, 4, 5};
    float *tp = malloc(sizeof(float) * T * 2 * H), *hid = malloc(sizeof(float) * T * H);
    float *tp2 = malloc(sizeof(float) * T * 2 * H), *hid2 = malloc(sizeof(float) * T * H);
    sp_err err = {{0}};
    sp_kv *kv = sp_kv_create(m, 32, 8, &err), *kv2 = sp_kv_create(m, 32, 8, &err), *kv3 = sp_kv_create(m, 32, 8, &err);
    sp_forward_out o = {.hidden = hid, .tap_layers = taps, .n_taps = 2, .taps = tp};
    CHECK(sp_model_forward(m, kv, tok, T, &o, &err) == 0, "%s: %s", arch, err.msg);
    for (int t = 0; t < T; t++)
        CHECK(memcmp(tp + ((size_t)t * 2 + 1) * H, hid + (size_t)t * H, H * sizeof(float)) == 0,
              "%s: sentinel tap != final post-norm hidden at %d", arch, t);
    /* batched: the second sequence's taps equal the solo ones */
    sp_forward_out ob = {.hidden = hid2, .tap_layers = taps, .n_taps = 2, .taps = tp2};
    sp_forward_seq seqs[2] = {{.kv = kv2, .tokens = tok, .T = 3, .out = NULL},
                              {.kv = kv3, .tokens = tok, .T = T, .out = &ob}};
    CHECK(sp_model_forward_batch(m, kv2, seqs, 2, &err) == 0, "%s: %s", arch, err.msg);
    CHECK(memcmp(tp2, tp, sizeof(float) * T * 2 * H) == 0, "%s: batched taps differ from solo", arch);
    int bad = L + 1;
    sp_forward_out obad = {.tap_layers = &bad, .n_taps = 1, .taps = tp};
    CHECK(sp_model_forward(m, kv, tok, 1, &obad, &err) != 0 && strstr(err.msg, "tap layer"), "%s: L+1 accepted",
          arch);
    free(tp); free(hid); free(tp2); free(hid2);
    sp_kv_free(kv); sp_kv_free(kv2); sp_kv_free(kv3);
    sp_model_free(m);
}

static void test_sentinel_tap(void) {
    sentinel_one("llama");
    sentinel_one("gemma4");
}

static char root[256];

static void write_corpus(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"ids\": [1, 5, 9, 12, 40, 7], \"resp_start\": 2}\n{\"ids\": [1, 3, 3, 8, 21], \"resp_start\": 1}\n");
    fclose(f);
}

/* the shards under dir: taps as listed, and the last slot equal to "hidden" */
static void check_shards(const char *dir, const int *taps, int nt) {
    tr_shardset s;
    sp_err err = {{0}};
    if (sp_tr_shardset_open(&s, dir, 0, &err)) { CHECK(0, "%s: %s", dir, err.msg); return; }
    CHECK(s.m == nt, "m %d != %d", s.m, nt);
    for (int i = 0; i < nt && i < s.m; i++) CHECK(s.tap_layers[i] == taps[i], "tap %d: %d != %d", i, s.tap_layers[i], taps[i]);
    int H = s.H;
    for (int k = 0; k < s.n_shards; k++) {
        const tr_shard *sh = &s.shards[k];
        for (int64_t r = 0; r < sh->n_tokens; r++)
            CHECK(memcmp(sh->hidden_ml + ((size_t)r * s.m + (size_t)(s.m - 1)) * H, sh->hidden + (size_t)r * H,
                         (size_t)H * 2) == 0, "row %lld: last tap != hidden", (long long)r);
    }
    sp_tr_shardset_close(&s);
}

static void test_regen_sentinel(void) {
    snprintf(root, sizeof root, "/tmp/specula_mlxbun_%d", (int)getpid());
    char data[400], out[400], out2[400], cmd[1400];
    snprintf(data, sizeof data, "%s/d.jsonl", root);
    snprintf(out, sizeof out, "%s/shards", root);
    snprintf(out2, sizeof out2, "%s/shards_cli", root);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", root);
    CHECK(system(cmd) == 0, "mkdir");
    write_corpus(data);
    /* the llama fixture has 4 layers: taps 1 and the sentinel 4 */
    sp_err err = {{0}};
    tr_regen_cfg c = {.model_dir = "tests/data/ref-logits/llama", .data_path = data, .out_dir = out, .n_taps = 2,
                      .taps = {1, 4}, .threads = 2};
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    int want[2] = {1, 4};
    check_shards(out, want, 2);
    tr_regen_cfg bad = c;
    bad.taps[0] = 4, bad.taps[1] = 1;
    CHECK(sp_tr_regen_run(&bad, NULL, NULL, &err) != 0 && strstr(err.msg, "--taps"), "sentinel before a tap accepted");
    bad.n_taps = 1, bad.taps[0] = 3;
    CHECK(sp_tr_regen_run(&bad, NULL, NULL, &err) != 0 && strstr(err.msg, "final norm"), "final layer accepted: %s",
          err.msg);
    /* through the binary */
    snprintf(cmd, sizeof cmd, "build/specula regen -m tests/data/ref-logits/llama --data '%s' -o '%s' --taps 0,2,4 -q -t 2"
             " >/dev/null 2>&1", data, out2);
    CHECK(system(cmd) == 0, "specula regen --taps 0,2,4 failed");
    int want2[3] = {0, 2, 4};
    check_shards(out2, want2, 3);
    snprintf(cmd, sizeof cmd, "build/specula regen -m tests/data/ref-logits/llama --data '%s' -o '%s/x' --taps 0,5 -q"
             " >/dev/null 2>&1", data, root);
    CHECK(system(cmd) != 0, "specula regen --taps 0,5 accepted (the llama fixture has 4 layers)");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

/* 1 when file p holds what */
static int file_has(const char *p, const char *what) {
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, what) != NULL;
}

/* a directory in mlx-bun's layout (dspark.json; the variant as given, NULL: v1) is taken for
 * mlx-bun's own drafter by `specula generate -md` (never for another kind): an incomplete one fails
 * with an error naming dspark.json and what is missing, an unknown variant names the variant */
static void detected_one(const char *variant, const char *says) {
    char dir[400], p[500], cmd[1400];
    snprintf(dir, sizeof dir, "%s/mb", root);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0, "mkdir");
    snprintf(p, sizeof p, "%s/dspark.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) { CHECK(0, "%s", p); return; }
    fprintf(f, "{\"kind\": \"dspark-drafter\", %s%s%s\"version\": 1, \"target_id\": \"t\", \"config\": {\"gamma\": 4}, "
               "\"dims\": {\"hiddenSize\": 64, \"vocabSize\": 512, \"eps\": 1e-6}, \"param_names\": []}\n",
            variant ? "\"variant\": \"" : "", variant ? variant : "", variant ? "\", " : "");
    fclose(f);
    snprintf(cmd, sizeof cmd, "build/specula generate -m tests/data/ref-logits/llama -md '%s' --prompt-ids 1,2 -n 2 "
             ">/dev/null 2>'%s/err.txt'", dir, root);
    CHECK(system(cmd) != 0, "an incomplete mlx-bun checkpoint (%s) accepted", variant ? variant : "v1");
    snprintf(p, sizeof p, "%s/err.txt", root);
    CHECK(file_has(p, "dspark.json") && file_has(p, says), "the error does not name %s", says);
}

static void test_mlxbun_dir_detected(void) {
    snprintf(root, sizeof root, "/tmp/specula_mlxbun_%d", (int)getpid());
    detected_one(NULL, "config.dDraft missing");
    detected_one("dspark", "config.dDraft missing");
    detected_one("dflash", "config.dDraft missing");
    detected_one("other", "\"variant\" \"other\"");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

/* mlx-bun's init stream, written here from its description (docs/MLX-BUN-DRAFTERS.md): the
 * first n normals of std 0.02 from xorshift32 seeded with seed (0 → 0x9e3779b9) */
static void ref_normals(uint32_t seed, double *out, int n) {
    uint32_t s = seed ? seed : 0x9e3779b9u;
    for (int i = 0; i < n; i += 2) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            u[j] = s / 4294967296.0;
        }
        double rad = sqrt(-2 * log(u[0] > 1e-12 ? u[0] : 1e-12));
        out[i] = rad * cos(2 * M_PI * u[1]) * 0.02;
        if (i + 1 < n) out[i + 1] = rad * sin(2 * M_PI * u[1]) * 0.02;
    }
}

/* the documented tensors of one variant (d 16, f 32, H 32, V 32000, r 8, γ 4, m taps, 2 layers) */
typedef struct { const char *name; int64_t a, b; char init; } want_t;

static int want_list(want_t *w, int faithful, int m) {
    static char nm[2][9][32];
    static const char *part[9] = {"attn_norm", "q", "k", "v", "o", "ff_norm", "gate", "up", "down"};
    static const int64_t sa[9] = {16, 16, 16, 16, 16, 16, 16, 16, 32}, sb[9] = {0, 16, 16, 16, 16, 0, 32, 32, 16};
    int n = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 9; j++) {
            snprintf(nm[i][j], sizeof nm[i][j], "bb.%d.%s", i, part[j]);
            w[n++] = (want_t){nm[i][j], sa[j], sb[j], sb[j] ? 'n' : '1'};
        }
    if (faithful) w[n++] = (want_t){"W_c", 32 * m, 16, 'n'}, w[n++] = (want_t){"ctx_norm", 16, 0, '1'};
    else w[n++] = (want_t){"ctx_proj", 32, 16, 'n'};
    w[n++] = (want_t){"tok_proj", 32, 16, 'n'};
    w[n++] = (want_t){"mask_emb", 3, 16, 'n'};
    w[n++] = faithful ? (want_t){"block_pos", 4, 16, 'n'} : (want_t){"pos_emb", 5, 16, 'n'};
    w[n++] = (want_t){"out_norm", 16, 0, '1'};
    w[n++] = (want_t){"out_proj", 16, 32, 'n'};
    w[n++] = (want_t){"markov.w1", 32000, 8, 'n'};
    w[n++] = (want_t){"markov.w2", 8, 32000, '0'};
    w[n++] = (want_t){"conf.w", 24, 1, '0'};
    w[n++] = (want_t){"conf.b", 1, 0, '0'};
    return n;
}

static void check_written(const char *dir, int faithful) {
    char p[600];
    snprintf(p, sizeof p, "%s/dspark.json", dir);
    json_t *j = json_load_file(p, 0, NULL);
    if (!j) { CHECK(0, "%s unreadable", p); return; }
    const char *keys[] = {"kind", "version", "target_id", "config", "dims", "param_names", "variant"};
    CHECK(json_object_size(j) == (size_t)(6 + faithful), "dspark.json has %zu keys", json_object_size(j));
    for (int i = 0; i < 6 + faithful; i++) CHECK(json_object_get(j, keys[i]) != NULL, "dspark.json lacks %s", keys[i]);
    CHECK(!strcmp(json_string_value(json_object_get(j, "kind")), "dspark-drafter"), "kind");
    CHECK(!faithful || !strcmp(json_string_value(json_object_get(j, "variant")), "dspark"), "variant");
    json_t *cfg = json_object_get(j, "config"), *dims = json_object_get(j, "dims");
    CHECK(json_object_size(cfg) == (size_t)(6 + faithful), "config keys %zu", json_object_size(cfg));
    CHECK(json_integer_value(json_object_get(cfg, "dDraft")) == 16 && json_integer_value(json_object_get(cfg, "gamma")) == 4 &&
          json_integer_value(json_object_get(cfg, "markovRank")) == 8 && json_integer_value(json_object_get(cfg, "ffMult")) == 2,
          "config values");
    CHECK(json_integer_value(json_object_get(dims, "hiddenSize")) == 32 &&
          json_integer_value(json_object_get(dims, "vocabSize")) == 32000 && json_object_get(dims, "eps"), "dims");
    json_t *taps = json_object_get(cfg, "tapLayers");
    int m = faithful ? (int)json_array_size(taps) : 0;
    CHECK(!faithful || json_integer_value(json_array_get(taps, (size_t)m - 1)) == 4, "last tap is not the sentinel 4");
    want_t w[40];
    int n = want_list(w, faithful, m);
    json_t *names = json_object_get(j, "param_names");
    CHECK(json_array_size(names) == (size_t)n, "param_names %zu != %d", json_array_size(names), n);
    st_set *st;
    sp_err err = {{0}};
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (sp_st_open_file(&st, p, &err)) { CHECK(0, "%s", err.msg); json_decref(j); return; }
    CHECK(sp_st_count(st) == n, "%d tensors, documented %d", sp_st_count(st), n);
    double ref[4];
    ref_normals(1, ref, 4);
    for (int i = 0; i < n; i++) {
        CHECK(!strcmp(json_string_value(json_array_get(names, (size_t)i)), w[i].name), "param_names[%d]", i);
        const st_tensor *t = sp_st_find(st, w[i].name);
        if (!t) { CHECK(0, "%s missing", w[i].name); continue; }
        CHECK(t->dtype == SP_DT_F32 && t->ndim == (w[i].b ? 2 : 1) && t->shape[0] == w[i].a && (!w[i].b || t->shape[1] == w[i].b),
              "%s: dtype / shape", w[i].name);
        const float *x = t->data;
        if (w[i].init == '1') CHECK(x[0] == 1.0f && x[t->numel - 1] == 1.0f, "%s not ones", w[i].name);
        if (w[i].init == '0') CHECK(x[0] == 0.0f && x[t->numel - 1] == 0.0f, "%s not zeros", w[i].name);
    }
    /* the first matrix drawn is bb.0.q: its first values are the stream's first normals */
    const st_tensor *q = sp_st_find(st, "bb.0.q");
    for (int k = 0; q && k < 4; k++)
        CHECK(((const float *)q->data)[k] == (float)ref[k], "bb.0.q[%d] %g != %g", k, ((const float *)q->data)[k], ref[k]);
    sp_st_close(st);
    json_decref(j);
}

static void test_new_drafter_layout(void) {
    snprintf(root, sizeof root, "/tmp/specula_mlxbun_%d", (int)getpid());
    const char *arch[2] = {"dspark", "dflash"};
    for (int f = 0; f < 2; f++) {
        char dir[400], cmd[1400];
        snprintf(dir, sizeof dir, "%s/nd_%s", root, arch[f]);
        snprintf(cmd, sizeof cmd, "build/specula new-drafter --arch %s --layout mlx-bun -m tests/data/ref-logits/llama "
                 "--seed 1 --set dDraft=16 --set nHeads=4 --set markovRank=8 --set gamma=4 --set nLayers=2 -o '%s' "
                 ">/dev/null 2>&1", arch[f], dir);
        CHECK(system(cmd) == 0, "new-drafter --arch %s --layout mlx-bun", arch[f]);
        check_written(dir, f);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

int main(void) {
    RUN(test_sentinel_tap);
    RUN(test_regen_sentinel);
    RUN(test_mlxbun_dir_detected);
    RUN(test_new_drafter_layout);
    return harness_done("test_mlxbun_drafter");
}
