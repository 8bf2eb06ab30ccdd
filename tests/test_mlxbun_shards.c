/* test_mlxbun_shards.c — mlx-bun's hidden-state shards (docs/MLX-BUN-SHARDS.md):
 *   - fixtures of both layouts (v1: hidden/ids/seq_lens + {nSeq, nTokens, hiddenSize}; DFlash:
 *     hidden_ml/ids/seq_lens/resp_starts + {.., m, tapLayers}) written here byte by byte from the
 *     documented layout, read by specula: ids, lengths, response starts and hidden values equal;
 *   - a missing tensor or key is an error naming it;
 *   - a training run on each: its first loss equals the loss this test computes in double
 *     (softmax, CE, L1 to the target distribution, confidence BCE) from the drafter's logits on
 *     the batch the test builds itself — fixture arrays, mlx-bun's anchor draw re-derived here,
 *     target distributions in double from the LM head;
 *   - `regen --shard-layout mlx-bun` (v1 for one tap, DFlash for two) read back by this test's
 *     own safetensors reader: exactly the documented names, dtypes, shapes and shard.json keys;
 *     resume skips complete shards and refuses a layout change; through the binary too;
 *   - the same corpus regenerated in specula's layout and in mlx-bun's gives the same batches.
 * Random tiny qwen3 target (2 layers: taps 0 and the final norm 2). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/newmodel.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "train/batch.h"
#include "train/drafter_net.h"
#include "train/regen.h"
#include "train/shards.h"
#include "train/trainer.h"
#include "st_fixture.h"
#include "train_harness.h"

enum { H = 64, V = 8192, NL = 2, NSEQ = 3 };
static const int seq_len[NSEQ] = {12, 9, 15}, resp_start[NSEQ] = {3, 0, 5};
static int32_t fx_ids[12 + 9 + 15];
static uint16_t fx_hid[(12 + 9 + 15) * H], fx_ml[(12 + 9 + 15) * 2 * H]; /* ml: [tap 0 | final] */
static char dir_v1[400], dir_df[400], dir_bad[400], corpus[400];
enum { LTOT = 12 + 9 + 15 };

/* ---- the test's own safetensors reader ------------------------------------------------ */

/* the header of a safetensors file as a JSON object (caller decrefs), NULL when unreadable */
static json_t *read_st_header(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint64_t len = 0;
    json_t *j = NULL;
    if (fread(&len, 8, 1, f) == 1 && len < (1u << 20)) {
        char *h = malloc(len);
        if (h && fread(h, 1, len, f) == len) j = json_loadb(h, len, 0, NULL);
        free(h);
    }
    fclose(f);
    return j;
}

static const char *str_or_empty(json_t *j) { return json_is_string(j) ? json_string_value(j) : ""; }

/* tensor `name` of header j has dtype and shape {d0[, d1]} (ndim 1 or 2) */
static int st_has(json_t *j, const char *name, const char *dtype, int ndim, int64_t d0, int64_t d1) {
    json_t *t = json_object_get(j, name), *sh = json_object_get(t, "shape");
    if (!json_is_object(t) || strcmp(str_or_empty(json_object_get(t, "dtype")), dtype) ||
        (int)json_array_size(sh) != ndim)
        return 0;
    return json_integer_value(json_array_get(sh, 0)) == d0 &&
           (ndim == 1 || json_integer_value(json_array_get(sh, 1)) == d1);
}

/* the keys of object j, sorted and comma-joined, into out */
static void keys_of(json_t *j, char *out, size_t cap) {
    const char *names[32];
    int n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) if (n < 32) names[n++] = k;
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && strcmp(names[b - 1], names[b]) > 0; b--) {
            const char *t = names[b]; names[b] = names[b - 1]; names[b - 1] = t;
        }
    out[0] = 0;
    for (int i = 0; i < n; i++) snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", names[i]);
}

/* ---- fixtures ------------------------------------------------------------------------------ */
/* shard s of the v1 fixture: sequence 0 in shard 0, sequences 1..2 in shard 1 */
static void write_v1_shard(int s) {
    int q0 = s ? 1 : 0, q1 = s ? NSEQ : 1, L = 0, off = 0;
    for (int q = 0; q < q0; q++) off += seq_len[q];
    for (int q = q0; q < q1; q++) L += seq_len[q];
    int32_t lens[NSEQ];
    for (int q = q0; q < q1; q++) lens[q - q0] = seq_len[q];
    char sd[500], p[600], js[256];
    snprintf(sd, sizeof sd, "%s/shard_%05d", dir_v1, s);
    mkdir(sd, 0755);
    fx_tensor t[3] = {{"hidden", "BF16", 2, {L, H}, fx_hid + (size_t)off * H, sizeof(uint16_t) * L * H},
                      {"ids", "I32", 1, {L, 0}, fx_ids + off, sizeof(int32_t) * L},
                      {"seq_lens", "I32", 1, {q1 - q0, 0}, lens, sizeof(int32_t) * (q1 - q0)}};
    snprintf(p, sizeof p, "%s/model.safetensors", sd);
    write_st(p, t, 3);
    snprintf(js, sizeof js, "{\n  \"nSeq\": %d,\n  \"nTokens\": %d,\n  \"hiddenSize\": %d\n}", q1 - q0, L, H);
    snprintf(p, sizeof p, "%s/shard.json", sd);
    write_text(p, js);
}

/* the DFlash fixture (one shard, taps [0, 2]) into dir; drop: a tensor left out ("" none);
 * json: shard.json's text (NULL: the full one) */
static void write_dflash(const char *dir, const char *drop, const char *json) {
    char sd[500], p[600], js[256];
    snprintf(sd, sizeof sd, "%s/shard_00000", dir);
    mkdir(dir, 0755);
    mkdir(sd, 0755);
    int32_t lens[NSEQ], rs[NSEQ];
    for (int q = 0; q < NSEQ; q++) lens[q] = seq_len[q], rs[q] = resp_start[q];
    fx_tensor all[4] = {{"hidden_ml", "BF16", 2, {LTOT, 2 * H}, fx_ml, sizeof fx_ml},
                        {"ids", "I32", 1, {LTOT, 0}, fx_ids, sizeof fx_ids},
                        {"seq_lens", "I32", 1, {NSEQ, 0}, lens, sizeof lens},
                        {"resp_starts", "I32", 1, {NSEQ, 0}, rs, sizeof rs}};
    fx_tensor t[4];
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (strcmp(all[i].name, drop)) t[n++] = all[i];
    snprintf(p, sizeof p, "%s/model.safetensors", sd);
    write_st(p, t, n);
    snprintf(js, sizeof js,
             "{\n  \"nSeq\": %d,\n  \"nTokens\": %d,\n  \"hiddenSize\": %d,\n  \"m\": 2,\n  \"tapLayers\": [0, %d]\n}",
             NSEQ, LTOT, H, NL);
    snprintf(p, sizeof p, "%s/shard.json", sd);
    write_text(p, json ? json : js);
}

static void setup(void) {
    th_paths("test_mlxbun_shards", "");
    sp_err err;
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 11, .n_threads = 2};
    CHECK(sp_newmodel_write(th_target, &o, &err) == 0, "%s", err.msg);
    unsigned s = 99;
    for (int i = 0; i < LTOT; i++) {
        s = s * 1103515245u + 12345u;
        fx_ids[i] = 3 + (int)((s >> 12) % 8000);
    }
    for (int i = 0; i < LTOT * H; i++) fx_hid[i] = rnd_bf16(&s);
    for (int i = 0; i < LTOT; i++) /* DFlash: [tap 0 | final hidden] */
        for (int j = 0; j < H; j++) {
            fx_ml[(size_t)i * 2 * H + j] = rnd_bf16(&s);
            fx_ml[(size_t)i * 2 * H + H + j] = fx_hid[(size_t)i * H + j];
        }
    snprintf(dir_v1, sizeof dir_v1, "%s/v1", th_root);
    snprintf(dir_df, sizeof dir_df, "%s/dflash", th_root);
    snprintf(dir_bad, sizeof dir_bad, "%s/bad", th_root);
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", th_root);
    mkdir(dir_v1, 0755);
    write_v1_shard(0);
    write_v1_shard(1);
    write_dflash(dir_df, "", NULL);
    char text[1024] = "";
    for (int i = 0; i < 5; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "{\"ids\": [1, %d, %d, %d], \"resp_start\": 4}\n",
                 100 + i, 300 + 7 * i, 50 + i);
    write_text(corpus, text);
}

/* ---- reading -------------------------------------------------------------------------------- */
/* every sequence of set equals the fixture's: ids, lengths, response starts (v1: 0), the final
 * hidden (hidden) and the context rows (hidden_ml) */
static void check_set(const tr_shardset *set, int v1) {
    int q = 0, bad = 0;
    int64_t off = 0;
    for (int si = 0; si < set->n_shards; si++) {
        const tr_shard *sh = &set->shards[si];
        for (int k = 0; k < sh->n_seq; k++, q++) {
            CHECK(q < NSEQ && sh->seq_lens[k] == seq_len[q], "sequence %d length", q);
            CHECK(sh->resp_starts[k] == (v1 ? 0 : resp_start[q]), "sequence %d response start %d", q,
                  sh->resp_starts[k]);
            if (q >= NSEQ) return;
            for (int i = 0; i < seq_len[q]; i++) {
                int64_t r = sh->seq_off[k] + i, g = off + i;
                bad += sh->ids[r] != fx_ids[g];
                bad += memcmp(sh->hidden + r * sh->hidden_stride, fx_hid + g * H, sizeof(uint16_t) * H) != 0;
                bad += memcmp(sh->hidden_ml + r * set->m * H, v1 ? fx_hid + g * H : fx_ml + g * 2 * H,
                              sizeof(uint16_t) * set->m * H) != 0;
            }
            off += seq_len[q];
        }
    }
    CHECK(q == NSEQ && bad == 0, "%d sequences, %d rows differ from the fixture", q, bad);
}

static void test_read_v1(void) {
    tr_shardset set;
    sp_err err;
    CHECK(sp_tr_shardset_open(&set, dir_v1, V, &err) == 0, "%s", err.msg);
    if (!set.n_shards) return;
    CHECK(set.layout == TR_SHARDS_MLXBUN_V1 && set.n_shards == 2 && set.H == H && set.m == 1 &&
              set.tap_layers[0] == TR_TAP_FINAL_NORM && set.mlxbun_anchors == 1,
          "layout %d, %d shards, H %d, m %d, tap %d", set.layout, set.n_shards, set.H, set.m, set.tap_layers[0]);
    check_set(&set, 1);
    sp_tr_shardset_close(&set);
}

static void test_read_dflash(void) {
    tr_shardset set;
    sp_err err;
    CHECK(sp_tr_shardset_open(&set, dir_df, V, &err) == 0, "%s", err.msg);
    if (!set.n_shards) return;
    CHECK(set.layout == TR_SHARDS_MLXBUN_DFLASH && set.n_shards == 1 && set.H == H && set.m == 2 &&
              set.tap_layers[0] == 0 && set.tap_layers[1] == NL && set.mlxbun_anchors == 1,
          "layout %d, %d shards, H %d, m %d, taps %d %d", set.layout, set.n_shards, set.H, set.m, set.tap_layers[0],
          set.tap_layers[1]);
    check_set(&set, 0);
    sp_tr_shardset_close(&set);
}

/* a shard missing a tensor or a key: the error names it */
static void test_missing_parts(void) {
    static const char *const drops[] = {"resp_starts", "ids", "seq_lens", "hidden_ml"};
    static const char *const expect[] = {"\"resp_starts\"", "\"ids\"", "\"seq_lens\"", "\"hidden_ml\""};
    tr_shardset set;
    sp_err err;
    for (int i = 0; i < 4; i++) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_bad);
        CHECK(system(cmd) == 0, "rm");
        write_dflash(dir_bad, drops[i], NULL);
        CHECK(sp_tr_shardset_open(&set, dir_bad, V, &err) != 0 && strstr(err.msg, expect[i]),
              "without %s: %s", drops[i], err.msg);
    }
    write_dflash(dir_bad, "", "{\"nSeq\": 3, \"nTokens\": 36, \"hiddenSize\": 64, \"tapLayers\": [0, 2]}");
    CHECK(sp_tr_shardset_open(&set, dir_bad, V, &err) != 0 && strstr(err.msg, "\"m\""), "without m: %s", err.msg);
    write_dflash(dir_bad, "", "{\"nSeq\": 3, \"nTokens\": 36, \"m\": 2, \"tapLayers\": [0, 2]}");
    CHECK(sp_tr_shardset_open(&set, dir_bad, V, &err) != 0 && strstr(err.msg, "\"hiddenSize\""), "without hiddenSize: %s",
          err.msg);
    write_dflash(dir_bad, "", "{\"nSeq\": 3, \"nTokens\": 36, \"hiddenSize\": 64, \"m\": 2}");
    CHECK(sp_tr_shardset_open(&set, dir_bad, V, &err) != 0 && strstr(err.msg, "\"tapLayers\""), "without tapLayers: %s",
          err.msg);
}

/* ---- training: the first loss against the test's own batch and double-precision loss ---------- */
/* anchor i of mlx-bun's draw (docs/MLX-BUN-SHARDS.md): a sequence with a full block, uniformly,
 * then p uniformly in [resp_start, S − B − 1] */
static void mlx_anchor(uint64_t seed, int64_t i, int v1, int B, int *q_out, int *p_out) {
    int ok[NSEQ] = {0}, n = 0;
    for (int q = 0; q < NSEQ; q++)
        if ((v1 ? 0 : resp_start[q]) <= seq_len[q] - B - 1) ok[n++] = q;
    int q = ok[sp_rng_u64(seed, 0x5eed8000u, 2 * (uint64_t)i) % (uint64_t)n];
    int lo = v1 ? 0 : resp_start[q], cnt = seq_len[q] - B - lo;
    *q_out = q;
    *p_out = lo + (int)(sp_rng_u64(seed, 0x5eed8000u, 2 * (uint64_t)i + 1) % (uint64_t)cnt);
}

/* the target distribution of a bf16 hidden row in double: softmax(W_lm · h) */
static void target_dist(const float *Wlm, const uint16_t *h, double *P) {
    double mx = -1e300, s = 0;
    for (int v = 0; v < V; v++) {
        double z = 0;
        for (int j = 0; j < H; j++) z += (double)Wlm[(size_t)v * H + j] * sp_bf16_to_f32(h[j]);
        P[v] = z;
        mx = z > mx ? z : mx;
    }
    for (int v = 0; v < V; v++) s += P[v] = exp(P[v] - mx);
    for (int v = 0; v < V; v++) P[v] /= s;
}

/* the batch of step 1 from the fixture arrays: context rows p−C..p−1 (left-padded), slot k:
 * input x_p then the mask, label x_{p+k+1}, previous x_{p+k}, weight exp(−k/γ), P_k from h[p+k] */
static void build_batch(tr_batch *b, sp_model *tm, const float *Wlm, const tr_train_cfg *c, int v1, int mask_id,
                        double *Pd) {
    int B = c->block, mH = (v1 ? 1 : 2) * H;
    sp_tr_batch_clear(b);
    for (int i = 0; i < c->batch; i++) {
        int q, p, e, row0, q0, off = 0;
        mlx_anchor(c->seed, i, v1, B, &q, &p);
        for (int k = 0; k < q; k++) off += seq_len[k];
        const int32_t *x = fx_ids + off;
        int nr = sp_tr_batch_push(b, p, 1, 1, &e, &row0, &q0);
        for (int j = 0; j < nr; j++) {
            float *f = b->F + ((size_t)row0 + j) * mH;
            const uint16_t *src = v1 ? fx_hid + (size_t)(off + q0 + j) * H : fx_ml + (size_t)(off + q0 + j) * mH;
            for (int u = 0; u < mH; u++) f[u] = q0 + j >= 0 ? sp_bf16_to_f32(src[u]) : 0.0f;
        }
        for (int k = 0; k < B; k++) {
            int t = e * B + k;
            sp_model_embed(tm, b->x0 + (size_t)t * H, k == 0 ? x[p] : mask_id);
            b->labels[t] = x[p + k + 1];
            b->prev[t] = x[p + k];
            b->wt[t] = (float)exp(-k / c->gamma);
            target_dist(Wlm, fx_hid + (size_t)(off + p + k) * H, Pd + (size_t)t * V);
            for (int v = 0; v < V; v++) b->P[(size_t)t * V + v] = (float)Pd[(size_t)t * V + v];
        }
    }
}

/* DSpark's loss in double from logits Z and confidence logits: (0.1·Σw·CE + 0.9·Σw·L1 + Σw·BCE) / (Σw + 1e-6) */
static double ref_loss(const float *Z, const float *conf, const tr_batch *b, const double *Pd, int T) {
    double ce = 0, l1s = 0, bce = 0, sw = 0;
    double *q = malloc(sizeof(double) * V);
    for (int t = 0; t < T; t++) {
        double mx = -1e300, s = 0, l1 = 0, w = b->wt[t];
        for (int v = 0; v < V; v++) mx = Z[(size_t)t * V + v] > mx ? Z[(size_t)t * V + v] : mx;
        for (int v = 0; v < V; v++) s += q[v] = exp(Z[(size_t)t * V + v] - mx);
        for (int v = 0; v < V; v++) q[v] /= s, l1 += fabs(q[v] - Pd[(size_t)t * V + v]);
        double cs = 1 - 0.5 * l1, z = conf[t];
        cs = cs < 0 ? 0 : cs > 1 ? 1 : cs;
        ce += w * -log(q[b->labels[t]]);
        l1s += w * l1;
        bce += w * ((z > 0 ? z : 0) - z * cs + log1p(exp(-fabs(z))));
        sw += w;
    }
    free(q);
    return (0.1 * ce + 0.9 * l1s + bce) / (sw + 1e-6);
}

static void check_first_loss(const char *dir, int v1) {
    char out[500];
    snprintf(out, sizeof out, "%s/run_%s", th_root, v1 ? "v1" : "dflash");
    tr_train_cfg c = sp_tr_train_defaults();
    c.arch = TR_ARCH_DSPARK;
    c.model_dir = th_target; c.data_dir = dir; c.out_dir = out;
    c.steps = 1; c.batch = 6; c.block = 3; c.layers = 1; c.markov_rank = 16; c.ctx = 8;
    c.gamma = 4.0; c.seed = 7; c.threads = 2; c.eval_blocks = 4; c.progress = 0;
    tr_train_result res;
    sp_err err;
    CHECK(sp_tr_train_run(&c, &res, &err) == 0, "%s", err.msg);
    sp_model *tm = NULL;
    CHECK(sp_model_load(&tm, th_target, 2, &err) == 0, "%s", err.msg);
    if (!tm) return;
    int m = v1 ? 1 : 2, taps[2] = {v1 ? NL : 0, NL};
    tr_dims d;
    char *cj = NULL;
    tr_model mod;
    CHECK(sp_tr_drafter_dims(&c, tm, m, taps, &d, &cj, &err) == 0, "%s", err.msg);
    CHECK(sp_tr_model_init(&mod, &d, c.seed, &err) == 0, "%s", err.msg);
    float *Wlm = malloc(sizeof(float) * V * H);
    double *Pd = malloc(sizeof(double) * c.batch * c.block * V);
    for (int v = 0; v < V; v++) sp_mat_row_f32(sp_model_lm_head(tm), v, Wlm + (size_t)v * H);
    tr_batch b;
    tr_acts *a = sp_tr_acts_create(&d, c.batch, c.ctx, &err);
    CHECK(a && sp_tr_batch_alloc(&b, c.batch, c.ctx, d.B, V, H, m * H, 1, &err) == 0, "%s", err.msg);
    build_batch(&b, tm, Wlm, &c, v1, d.mask_id, Pd);
    double sw = 0;
    for (int t = 0; t < c.batch * c.block; t++) sw += b.wt[t];
    tr_stats st;
    sp_tr_forward(NULL, &mod, a, &b, Wlm, sw + 1e-6, &st, NULL);
    double ref = ref_loss(sp_tr_acts_logits(a), sp_tr_acts_conf(a), &b, Pd, c.batch * c.block);
    printf("  %s: first loss %.7f, double reference %.7f\n", v1 ? "v1" : "DFlash", res.loss_first, ref);
    CHECK(fabs(res.loss_first - ref) <= 1e-5 * fabs(ref) + 1e-6, "first loss %.8f, reference %.8f", res.loss_first,
          ref);
    free(Wlm); free(Pd); free(cj);
    sp_tr_batch_free(&b);
    sp_tr_acts_free(a);
    sp_tr_model_free(&mod);
    sp_model_free(tm);
}

static void test_train_v1(void) { check_first_loss(dir_v1, 1); }
static void test_train_dflash(void) { check_first_loss(dir_df, 0); }

/* ---- regen --shard-layout mlx-bun ------------------------------------------------------------ */
/* shard sd as read by this test: tensors and shard.json keys exactly the documented ones */
static void check_written(const char *sd, int v1, int n_seq, int64_t *L_out) {
    char p[600], keys[256];
    snprintf(p, sizeof p, "%s/model.safetensors", sd);
    json_t *h = read_st_header(p);
    CHECK(h != NULL, "%s: unreadable", p);
    if (!h) return;
    snprintf(p, sizeof p, "%s/shard.json", sd);
    json_t *js = json_load_file(p, 0, NULL);
    int64_t L = json_integer_value(json_object_get(js, "nTokens"));
    *L_out = L;
    CHECK(json_integer_value(json_object_get(js, "nSeq")) == n_seq &&
              json_integer_value(json_object_get(js, "hiddenSize")) == H && L > 0,
          "%s: counts", p);
    keys_of(js, keys, sizeof keys);
    CHECK(!strcmp(keys, v1 ? "hiddenSize,nSeq,nTokens" : "hiddenSize,m,nSeq,nTokens,tapLayers"), "%s keys: %s", p,
          keys);
    if (!v1) {
        json_t *tl = json_object_get(js, "tapLayers");
        CHECK(json_integer_value(json_object_get(js, "m")) == 2 && json_array_size(tl) == 2 &&
                  json_integer_value(json_array_get(tl, 0)) == 0 && json_integer_value(json_array_get(tl, 1)) == NL,
              "%s: m / tapLayers", p);
    }
    keys_of(h, keys, sizeof keys);
    CHECK(!strcmp(keys, v1 ? "__metadata__,hidden,ids,seq_lens" : "__metadata__,hidden_ml,ids,resp_starts,seq_lens"),
          "tensors: %s", keys);
    CHECK(v1 ? st_has(h, "hidden", "BF16", 2, L, H) : st_has(h, "hidden_ml", "BF16", 2, L, 2 * H), "hidden dtype/shape");
    CHECK(st_has(h, "ids", "I32", 1, L, 0) && st_has(h, "seq_lens", "I32", 1, n_seq, 0) &&
              (v1 || st_has(h, "resp_starts", "I32", 1, n_seq, 0)),
          "ids / seq_lens / resp_starts dtype or shape");
    CHECK(!strcmp(str_or_empty(json_object_get(json_object_get(h, "__metadata__"), "format")), "mlx"),
          "metadata format");
    json_decref(js);
    json_decref(h);
}

static void check_regen_layout(int v1) {
    char out[500], sd[600];
    snprintf(out, sizeof out, "%s/regen_%s", th_root, v1 ? "v1" : "dflash");
    tr_regen_cfg c = {.model_dir = th_target, .data_path = corpus, .out_dir = out, .shard_records = 2,
                      .generate = 6, .threads = 2, .mlxbun_layout = 1, .n_taps = v1 ? 1 : 2};
    c.taps[0] = v1 ? NL : 0;
    c.taps[1] = NL;
    sp_err err;
    int w = -1, s = -1;
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0 && w == 3 && s == 0, "written %d skipped %d: %s", w, s, err.msg);
    for (int i = 0; i < 3; i++) {
        int64_t L = 0;
        sp_tr_shard_dir(sd, sizeof sd, out, i);
        check_written(sd, v1, i < 2 ? 2 : 1, &L);
    }
    /* resume: complete shards are skipped, a removed shard.json is redone, another layout refused */
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0 && w == 0 && s == 3, "rerun: written %d skipped %d", w, s);
    char p[700];
    sp_tr_shard_dir(sd, sizeof sd, out, 1);
    snprintf(p, sizeof p, "%s/shard.json", sd);
    unlink(p);
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0 && w == 1 && s == 2, "resume: written %d skipped %d", w, s);
    tr_regen_cfg o = c;
    o.mlxbun_layout = 0;
    CHECK(sp_tr_regen_run(&o, &w, &s, &err) != 0 && strstr(err.msg, "layout"), "a layout change: %s", err.msg);
    tr_shardset set;
    CHECK(sp_tr_shardset_open(&set, out, V, &err) == 0 &&
              set.layout == (v1 ? TR_SHARDS_MLXBUN_V1 : TR_SHARDS_MLXBUN_DFLASH),
          "read back: %s", err.msg);
    sp_tr_shardset_close(&set);
}

static void test_regen_v1(void) { check_regen_layout(1); }
static void test_regen_dflash(void) { check_regen_layout(0); }

/* the last tap must be the final norm in mlx-bun's layout; automatic taps get it */
static void test_regen_taps(void) {
    char out[500];
    snprintf(out, sizeof out, "%s/regen_taps", th_root);
    tr_regen_cfg c = {.model_dir = th_target, .data_path = corpus, .out_dir = out, .threads = 2, .mlxbun_layout = 1,
                      .n_taps = 1};
    sp_err err;
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) != 0 && strstr(err.msg, "final norm"), "tap 0 alone: %s", err.msg);
    c.n_taps = 0;
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    tr_shardset set;
    CHECK(sp_tr_shardset_open(&set, out, V, &err) == 0 && set.layout == TR_SHARDS_MLXBUN_DFLASH && set.m == 2 &&
              set.tap_layers[1] == NL,
          "automatic taps: %s", err.msg);
    sp_tr_shardset_close(&set);
}

/* the CLI: --shard-layout through the binary; a bad value is refused */
static void test_regen_binary(void) {
    char buf[4096];
    int rc = harness_runf(buf, sizeof buf,
                          "build/specula regen -m '%s' --data '%s' -o '%s/bin' --shard-layout mlx-bun --taps %d -q 2>&1",
                          th_target, corpus, th_root, NL);
    CHECK(rc == 0, "regen: %s", buf);
    int64_t L = 0;
    char sd[600];
    snprintf(sd, sizeof sd, "%s/bin/shard_00000", th_root);
    check_written(sd, 1, 5, &L);
    rc = harness_runf(buf, sizeof buf, "build/specula regen -m '%s' --data '%s' -o '%s/bin2' --shard-layout mlx 2>&1",
                      th_target, corpus, th_root);
    CHECK(rc != 0 && strstr(buf, "--shard-layout"), "bad layout accepted: %s", buf);
}

/* ---- round trip: specula's layout and mlx-bun's give the same training batches ---------------- */
static void test_round_trip(void) {
    char a[500], bdir[500];
    snprintf(a, sizeof a, "%s/rt_specula", th_root);
    snprintf(bdir, sizeof bdir, "%s/rt_mlxbun", th_root);
    tr_regen_cfg c = {.model_dir = th_target, .data_path = corpus, .out_dir = a, .shard_records = 2, .generate = 8,
                      .threads = 2, .n_taps = 2};
    c.taps[0] = 0;
    c.taps[1] = NL;
    sp_err err;
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    c.out_dir = bdir;
    c.mlxbun_layout = 1;
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    tr_shardset s1, s2;
    CHECK(sp_tr_shardset_open(&s1, a, V, &err) == 0, "%s", err.msg);
    CHECK(sp_tr_shardset_open(&s2, bdir, V, &err) == 0, "%s", err.msg);
    CHECK(s1.layout == TR_SHARDS_SPECULA && s2.layout == TR_SHARDS_MLXBUN_DFLASH, "layouts %d %d", s1.layout,
          s2.layout);
    s1.mlxbun_anchors = 1; /* the same draw on both */
    sp_model *tm = NULL;
    CHECK(sp_model_load(&tm, th_target, 2, &err) == 0, "%s", err.msg);
    int B = 3, C = 6, NB = 4, bad = 0;
    tr_batcher b1, b2;
    tr_batch x1, x2;
    CHECK(sp_tr_batcher_init(&b1, &s1, tm, B, C, 8191, 0, 4.0, 0, 1, 5, NB, &err) == 0, "%s", err.msg);
    CHECK(sp_tr_batcher_init(&b2, &s2, tm, B, C, 8191, 0, 4.0, 0, 1, 5, NB, &err) == 0, "%s", err.msg);
    CHECK(sp_tr_batch_alloc(&x1, NB, C, B, V, H, 2 * H, 1, &err) == 0 &&
              sp_tr_batch_alloc(&x2, NB, C, B, V, H, 2 * H, 1, &err) == 0,
          "%s", err.msg);
    for (int step = 0; step < 6; step++) {
        sp_tr_batcher_fill(&b1, &x1, (int64_t)step * NB, NB);
        sp_tr_batcher_fill(&b2, &x2, (int64_t)step * NB, NB);
        bad += x1.NR != x2.NR || memcmp(x1.F, x2.F, sizeof(float) * x1.NR * 2 * H) ||
               memcmp(x1.labels, x2.labels, sizeof(int32_t) * NB * B) ||
               memcmp(x1.prev, x2.prev, sizeof(int32_t) * NB * B) || memcmp(x1.wt, x2.wt, sizeof(float) * NB * B) ||
               memcmp(x1.P, x2.P, sizeof(float) * NB * B * V) || memcmp(x1.x0, x2.x0, sizeof(float) * NB * B * H);
    }
    CHECK(bad == 0, "%d of 6 batches differ between the layouts", bad);
    sp_tr_batch_free(&x1); sp_tr_batch_free(&x2);
    sp_tr_batcher_free(&b1); sp_tr_batcher_free(&b2);
    sp_model_free(tm);
    sp_tr_shardset_close(&s1);
    sp_tr_shardset_close(&s2);
}

int main(void) {
    setup();
    RUN(test_read_v1);
    RUN(test_read_dflash);
    RUN(test_missing_parts);
    RUN(test_train_v1);
    RUN(test_train_dflash);
    RUN(test_regen_v1);
    RUN(test_regen_dflash);
    RUN(test_regen_taps);
    RUN(test_regen_binary);
    RUN(test_round_trip);
    th_remove_root();
    return harness_done("test_mlxbun_shards");
}
