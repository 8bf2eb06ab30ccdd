/* test_train_data.c — regen, shards and batches (src/train/regen.c, shards.c, batch.c):
 * shards round-trip with the target's own hidden states; a rerun skips complete shards; a torn
 * shard (no shard.json, truncated file) is ignored and rewritten; malformed JSONL names the line;
 * a damaged shard is a clear error; batches follow the off-by-one rule (on greedy-regenerated
 * data the target distribution of slot k peaks exactly at its label), left padding and the
 * contiguous eval-mask prefix with weights exp(−k/γ). Random tiny qwen3 target. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat/chat.h"
#include "formats/newmodel.h"
#include "kernels/kernels.h"
#include "train/batch.h"
#include "train/regen.h"
#include "train/shards.h"
#include "train_harness.h"
#include "tokenizer/tokenizer.h"

static char corpus[300]; /* th_root/corpus.jsonl */

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}

static void setup(void) {
    th_paths("test_train_data", "");
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", th_root);
    sp_err err;
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 3, .n_threads = 2};
    CHECK(sp_newmodel_write(th_target, &o, &err) == 0, "%s", err.msg);
    /* 5 records of prompts; responses regenerated greedily by the target */
    char text[4096] = "";
    for (int i = 0; i < 5; i++) {
        char line[256];
        snprintf(line, sizeof line, "{\"ids\": [1, %d, %d, %d, %d], \"resp_start\": 5}\n%s", 100 + i, 200 + 3 * i,
                 100 + i, 17 * i + 5, i == 2 ? "\n" : "");
        strcat(text, line);
    }
    CHECK(write_text(corpus, text) == 0, "write %s", corpus);
}

static tr_regen_cfg regen_cfg(void) {
    tr_regen_cfg c = {.model_dir = th_target, .data_path = corpus, .out_dir = th_shards, .shard_records = 2,
                      .generate = 12, .temp = 0, .threads = 2};
    return c;
}

static void test_regen_shards(void) {
    tr_regen_cfg c = regen_cfg();
    sp_err err;
    int w = -1, s = -1;
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0, "%s", err.msg);
    CHECK(w == 3 && s == 0, "written %d skipped %d", w, s);
    tr_shardset set;
    CHECK(sp_tr_shardset_open(&set, th_shards, 8192, &err) == 0, "%s", err.msg);
    CHECK(set.n_shards == 3 && set.H == 64 && set.m == 1 && set.tap_layers[0] == 0, "shards %d H %d m %d",
          set.n_shards, set.H, set.m);
    CHECK(set.shards[0].n_seq == 2 && set.shards[2].n_seq == 1, "records per shard");
    CHECK(set.shards[0].seq_lens[0] == 17 && set.shards[0].resp_starts[0] == 5, "len %d resp %d",
          set.shards[0].seq_lens[0], set.shards[0].resp_starts[0]);
    /* hidden / taps equal a fresh target forward (bf16-rounded) */
    sp_model *m;
    CHECK(sp_model_load(&m, th_target, 2, &err) == 0, "%s", err.msg);
    const tr_shard *sh = &set.shards[1];
    int n = sh->seq_lens[1];
    const int32_t *ids = sh->ids + sh->seq_off[1];
    float *hid = malloc(sizeof(float) * n * 64), *tap = malloc(sizeof(float) * n * 64);
    sp_kv *kv = sp_kv_create(m, n, n, &err);
    int tl = 0;
    sp_forward_out o = {.hidden = hid, .tap_layers = &tl, .n_taps = 1, .taps = tap};
    CHECK(sp_model_forward(m, kv, ids, n, &o, &err) == 0, "%s", err.msg);
    int bad = 0;
    for (int i = 0; i < n * 64; i++) {
        bad += sp_bf16_to_f32(sh->hidden[(sh->seq_off[1]) * 64 + i]) != sp_bf16_to_f32(sp_f32_to_bf16(hid[i]));
        bad += sp_bf16_to_f32(sh->hidden_ml[(sh->seq_off[1]) * 64 + i]) != sp_bf16_to_f32(sp_f32_to_bf16(tap[i]));
    }
    CHECK(bad == 0, "%d hidden/tap values differ from the target forward", bad);
    /* the response is the target's greedy continuation */
    float *logits = malloc(sizeof(float) * 8192);
    for (int p = sh->resp_starts[1] - 1; p + 1 < n; p++) {
        sp_model_logits(m, logits, hid + (size_t)p * 64, 1);
        CHECK(sp_argmax(logits, 8192) == ids[p + 1], "position %d is not the greedy token", p + 1);
    }
    free(logits); free(hid); free(tap);
    sp_kv_free(kv);
    sp_model_free(m);
    sp_tr_shardset_close(&set);
}

static void test_rerun_and_torn_shard(void) {
    tr_regen_cfg c = regen_cfg();
    sp_err err;
    int w = -1, s = -1;
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0 && w == 0 && s == 3, "rerun: written %d skipped %d", w, s);
    /* a killed writer: shard 1 lost its shard.json and has a truncated tensor file + a temp file */
    char p[512], sd[400];
    sp_tr_shard_dir(sd, sizeof sd, th_shards, 1);
    snprintf(p, sizeof p, "%s/shard.json", sd);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", sd);
    CHECK(truncate(p, 100) == 0, "truncate");
    snprintf(p, sizeof p, "%s/model.safetensors.tmp.999", sd);
    write_text(p, "garbage");
    tr_shardset set;
    CHECK(sp_tr_shardset_open(&set, th_shards, 8192, &err) != 0 && strstr(err.msg, "incomplete shard (no shard.json)"),
          "a torn shard must be an error, not skipped: %s", err.msg);
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0 && w == 1 && s == 2, "torn: written %d skipped %d", w, s);
    CHECK(sp_tr_shardset_open(&set, th_shards, 8192, &err) == 0 && set.n_shards == 3, "after rewrite: %s", err.msg);
    sp_tr_shardset_close(&set);
    /* a damaged complete shard is an error naming the file */
    snprintf(p, sizeof p, "%s/model.safetensors", sd);
    CHECK(truncate(p, 100) == 0, "truncate");
    CHECK(sp_tr_shardset_open(&set, th_shards, 8192, &err) != 0 && strstr(err.msg, "shard_00001"), "damaged: %s", err.msg);
    /* ids outside the vocabulary */
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0, "%s", err.msg); /* shard.json present: skipped... */
    snprintf(p, sizeof p, "%s/shard.json", sd);
    unlink(p);
    CHECK(sp_tr_regen_run(&c, &w, &s, &err) == 0 && w == 1, "rewrite %d", w);
    CHECK(sp_tr_shardset_open(&set, th_shards, 50, &err) != 0 && strstr(err.msg, "outside the vocabulary"), "vocab: %s",
          err.msg);
}

static void test_malformed_jsonl(void) {
    char bad[400];
    snprintf(bad, sizeof bad, "%s/bad.jsonl", th_root);
    const char *cases[][2] = {
        {"{\"ids\": [1, 2, 3], \"resp_start\": 1}\n{\"ids\": [1, 2\n", "bad.jsonl:2: invalid JSON"},
        {"{\"ids\": [1, 2, 3], \"resp_start\": 1}\n\n{\"ids\": [1, 99999], \"resp_start\": 1}\n", "bad.jsonl:3: ids[1]"},
        {"{\"ids\": [1, 2, 3], \"resp_start\": 9}\n", "bad.jsonl:1: resp_start 9"},
        {"{\"foo\": 1}\n", "bad.jsonl:1: a record needs"},
        {"{\"text\": \"hello\"}\n", "bad.jsonl:1: text records need the target's tokenizer"},
        {"[1, 2]\n", "bad.jsonl:1: a record must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(bad, cases[i][0]);
        tr_regen_cfg c = regen_cfg();
        c.data_path = bad;
        char out[400];
        snprintf(out, sizeof out, "%s/bad_out", th_root);
        c.out_dir = out;
        sp_err err = {{0}};
        CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) != 0 && strstr(err.msg, cases[i][1]), "case %zu: '%s'", i, err.msg);
        struct stat st;
        CHECK(stat(out, &st) != 0, "case %zu: output written before the input was checked", i);
    }
}

static void test_batches(void) {
    sp_err err;
    tr_regen_cfg c = regen_cfg();
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    tr_shardset set;
    CHECK(sp_tr_shardset_open(&set, th_shards, 8192, &err) == 0, "%s", err.msg);
    sp_model *m;
    CHECK(sp_model_load(&m, th_target, 2, &err) == 0, "%s", err.msg);
    int B = 4, C = 6, NB = 5, V = 8192;
    tr_batcher bt;
    CHECK(sp_tr_batcher_init(&bt, &set, m, B, C, 8191, 0, 4.0, 0, 1, 9, NB, &err) == 0, "%s", err.msg);
    /* anchors: p in [resp_start, S-2] of every sequence: 5 sequences of 17 tokens → 11 each */
    CHECK(bt.n == 55, "anchors %lld", (long long)bt.n);
    tr_batch b;
    CHECK(sp_tr_batch_alloc(&b, NB, C, B, V, 64, 64, 1, &err) == 0, "%s", err.msg);
    float *emb = malloc(sizeof(float) * 64);
    int checked = 0;
    for (int64_t i0 = 0; i0 < 2 * bt.n; i0 += NB) { /* two epochs */
        sp_tr_batcher_fill(&bt, &b, i0, NB);
        for (int e = 0; e < NB; e++) {
            const tr_anchor *an = sp_tr_batcher_anchor(&bt, i0 + e, NULL);
            const tr_shard *sh = &set.shards[an->shard];
            int S = sh->seq_lens[an->seq], p = an->p;
            const int32_t *x = sh->ids + sh->seq_off[an->seq];
            for (int j = 0; j < C; j++) CHECK(b.kmask[e * (C + B) + j] == (p - C + j >= 0), "padding");
            sp_model_embed(m, emb, x[p]);
            CHECK(memcmp(emb, b.x0 + (size_t)e * B * 64, 256) == 0, "slot 0 input is not x_p");
            sp_model_embed(m, emb, 8191);
            CHECK(memcmp(emb, b.x0 + ((size_t)e * B + 1) * 64, 256) == 0, "slot 1 input is not the mask");
            for (int k = 0; k < B; k++) {
                int t = e * B + k, valid = p + k + 1 < S;
                CHECK(fabsf(b.wt[t] - (valid ? expf(-k / 4.0f) : 0)) < 1e-6f, "weight slot %d", k);
                if (!valid) continue;
                CHECK(b.labels[t] == x[p + k + 1] && b.prev[t] == x[p + k], "label/prev slot %d", k);
                /* off-by-one rule: greedy data, so P_k peaks at the label */
                CHECK(sp_argmax(b.P + (size_t)t * V, V) == b.labels[t], "P of slot %d does not predict its label", k);
                checked++;
            }
        }
    }
    CHECK(checked > 300, "checked %d slots", checked);
    /* the same stream position gives the same anchor; epochs are different permutations */
    const tr_anchor a0 = *sp_tr_batcher_anchor(&bt, 3, NULL), a1 = *sp_tr_batcher_anchor(&bt, 3 + bt.n, NULL);
    CHECK(sp_tr_batcher_anchor(&bt, 3, NULL)->p == a0.p, "not reproducible");
    int same = 0;
    for (int64_t i = 0; i < bt.n; i++) {
        const tr_anchor x = *sp_tr_batcher_anchor(&bt, i, NULL), y = *sp_tr_batcher_anchor(&bt, i + bt.n, NULL);
        same += x.p == y.p && x.seq == y.seq && x.shard == y.shard;
    }
    CHECK(same < bt.n / 2, "epoch 2 repeats epoch 1's order (%d same)", same);
    (void)a1;
    /* z-lab DFlash: slot k predicts x_{p+k}; slot 0 untrained; weights exp(−(k−1)/γ); P_k from h[p+k−1] */
    tr_batcher zb;
    CHECK(sp_tr_batcher_init(&zb, &set, m, B, C, 8191, 1, 4.0, 0, 1, 9, NB, &err) == 0, "%s", err.msg);
    int zchecked = 0;
    for (int64_t i0 = 0; i0 < zb.n; i0 += NB) {
        sp_tr_batcher_fill(&zb, &b, i0, NB);
        for (int e = 0; e < NB; e++) {
            const tr_anchor *an = sp_tr_batcher_anchor(&zb, i0 + e, NULL);
            const tr_shard *sh = &set.shards[an->shard];
            int S = sh->seq_lens[an->seq], p = an->p;
            const int32_t *x = sh->ids + sh->seq_off[an->seq];
            CHECK(b.wt[e * B] == 0, "z-lab slot 0 is trained");
            for (int k = 1; k < B; k++) {
                int t = e * B + k, valid = p + k < S;
                CHECK(fabsf(b.wt[t] - (valid ? expf(-(k - 1) / 4.0f) : 0)) < 1e-6f, "z-lab weight slot %d", k);
                if (!valid) continue;
                CHECK(b.labels[t] == x[p + k], "z-lab label slot %d", k);
                CHECK(sp_argmax(b.P + (size_t)t * V, V) == b.labels[t], "z-lab P of slot %d does not predict its label", k);
                zchecked++;
            }
        }
    }
    CHECK(zchecked > 100, "z-lab checked %d slots", zchecked);
    sp_tr_batcher_free(&zb);
    free(emb);
    sp_tr_batch_free(&b);
    sp_tr_batcher_free(&bt);
    sp_model_free(m);
    sp_tr_shardset_close(&set);
}

/* anchors per sequence A = 3: each epoch holds every anchor once, in units of at most A anchors
 * of one sequence sorted by p; A = 1 keeps the one permutation of all anchors of before. A batch
 * makes one group per unit run: the group's rows are the union of its windows without padding,
 * each element's visible window holds the taps of p−C .. p−1, and RoPE keeps p − q. */
static void test_shared_batches(void) {
    sp_err err;
    tr_shardset set;
    CHECK(sp_tr_shardset_open(&set, th_shards, 8192, &err) == 0, "%s", err.msg);
    sp_model *m;
    CHECK(sp_model_load(&m, th_target, 2, &err) == 0, "%s", err.msg);
    int B = 4, C = 6, NB = 5, V = 8192, A = 3, H = 64, mH = set.m * H;
    tr_batcher bt, b1;
    CHECK(sp_tr_batcher_init(&bt, &set, m, B, C, 8191, 0, 4.0, 0, A, 9, NB, &err) == 0, "%s", err.msg);
    CHECK(sp_tr_batcher_init(&b1, &set, m, B, C, 8191, 0, 4.0, 0, 1, 9, NB, &err) == 0, "%s", err.msg);
    int64_t n = bt.n, *ref = malloc(sizeof(int64_t) * n);
    int *seen = calloc((size_t)n, sizeof(int));
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        /* A = 1: Fisher–Yates of all anchors from the counter RNG, as the batcher always did */
        for (int64_t k = 0; k < n; k++) ref[k] = k;
        for (int64_t k = n - 1; k > 0; k--) {
            int64_t r = (int64_t)(sp_rng_u64(9, 0x5eed0000u + (uint64_t)epoch, (uint64_t)k) % (uint64_t)(k + 1));
            int64_t t = ref[k]; ref[k] = ref[r]; ref[r] = t;
        }
        int same1 = 1, run = 0, units = 0;
        memset(seen, 0, sizeof(int) * n);
        const tr_anchor *prev = NULL;
        for (int64_t j = 0; j < n; j++) {
            int us1, us;
            same1 = same1 && sp_tr_batcher_anchor(&b1, epoch * n + j, &us1) - b1.items == ref[j] && us1;
            const tr_anchor *an = sp_tr_batcher_anchor(&bt, epoch * n + j, &us);
            seen[an - bt.items]++;
            if (us) { run = 1; units++; }
            else {
                run++;
                CHECK(prev && an->shard == prev->shard && an->seq == prev->seq && an->p > prev->p,
                      "unit: not one sequence in increasing p at %lld", (long long)j);
            }
            CHECK(run <= A, "unit of %d anchors", run);
            prev = an;
        }
        CHECK(same1, "epoch %lld: the A = 1 stream is not the permutation of all anchors", (long long)epoch);
        int once = 1;
        for (int64_t k = 0; k < n; k++) once = once && seen[k] == 1;
        CHECK(once, "epoch %lld: not every anchor exactly once", (long long)epoch);
        CHECK(units == 5 * 4, "epoch %lld: %d units (5 sequences of 11 anchors in units of 3)", (long long)epoch, units);
    }
    tr_batch b;
    CHECK(sp_tr_batch_alloc(&b, NB, C, B, V, H, mH, 1, &err) == 0, "%s", err.msg);
    float *tap = malloc(sizeof(float) * mH), *emb = malloc(sizeof(float) * H);
    int rows = 0, checked = 0;
    for (int64_t i0 = 0; i0 + NB <= 2 * n; i0 += NB) {
        sp_tr_batcher_fill(&bt, &b, i0, NB);
        rows += b.NR;
        CHECK(b.NB == NB && b.g_elem[0] == 0 && b.g_elem[b.NG] == NB && b.g_row[b.NG] == b.NR, "layout");
        for (int g = 0; g < b.NG; g++)
            for (int e = b.g_elem[g]; e < b.g_elem[g + 1]; e++) {
                int us;
                const tr_anchor *an = sp_tr_batcher_anchor(&bt, i0 + e, &us);
                CHECK((e == b.g_elem[g]) == (us || e == 0), "group %d does not start at a unit", g);
                const tr_shard *sh = &set.shards[an->shard];
                int S = sh->seq_lens[an->seq], p = an->p;
                int64_t base = sh->seq_off[an->seq];
                const int32_t *x = sh->ids + base;
                for (int j = 0; j < C; j++) {
                    int q = p - C + j, r = b.ctx_row[e] + j;
                    CHECK(b.kmask[e * (C + B) + j] == (q >= 0), "padding");
                    if (q < 0) continue;
                    CHECK(r >= b.g_row[g] && r < b.g_row[g + 1], "window row %d outside its group", r);
                    if (r < b.g_row[g] || r >= b.g_row[g + 1]) continue;
                    sp_to_f32(tap, sh->hidden_ml + (size_t)(base + q) * mH, SP_DT_BF16, (size_t)mH);
                    CHECK(memcmp(tap, b.F + (size_t)r * mH, sizeof(float) * mH) == 0, "row of position %d", q);
                    CHECK(b.bpos[e] - b.rpos[r] == p - q, "RoPE distance %d, want %d", b.bpos[e] - b.rpos[r], p - q);
                    checked++;
                }
                sp_model_embed(m, emb, x[p]);
                CHECK(memcmp(emb, b.x0 + (size_t)e * B * H, sizeof(float) * H) == 0, "slot 0 input is not x_p");
                for (int k = 0; k < B; k++) {
                    int t = e * B + k, valid = p + k + 1 < S;
                    CHECK(b.kmask[e * (C + B) + C + k] == 1, "block mask");
                    CHECK(fabsf(b.wt[t] - (valid ? expf(-k / 4.0f) : 0)) < 1e-6f, "weight slot %d", k);
                    if (valid) CHECK(b.labels[t] == x[p + k + 1] && b.prev[t] == x[p + k], "label/prev slot %d", k);
                }
            }
        for (int r = b.g_row[0]; r < b.NR; r++) CHECK(b.rpos[r] >= 0, "negative position");
    }
    int nb = (int)(2 * n / NB);
    printf("  A = %d: %d context rows per batch of %d anchors (unshared %d)\n", A, rows / nb, NB, NB * C);
    CHECK(checked > 200 && rows < nb * NB * C * 3 / 4, "checked %d rows, %d rows in all", checked, rows);
    free(tap); free(emb); free(ref); free(seen);
    sp_tr_batch_free(&b);
    sp_tr_batcher_free(&bt);
    sp_tr_batcher_free(&b1);
    sp_model_free(m);
    sp_tr_shardset_close(&set);
}

/* text, prompt/response and messages records through a byte-level tokenizer with ChatML */
static void test_text_records(void) {
    char dir[300], tj[400], tc[400], data[400], out[400];
    snprintf(dir, sizeof dir, "%s/tok", th_root);
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    snprintf(data, sizeof data, "%s/text.jsonl", th_root);
    snprintf(out, sizeof out, "%s/text_shards", th_root);
    sp_err err;
    CHECK(sp_mkdir_p(dir, &err) == 0, "%s", err.msg);
    FILE *f = fopen(tj, "w");
    fprintf(f, "{\"added_tokens\":[{\"id\":256,\"content\":\"<|im_start|>\",\"special\":true},"
               "{\"id\":257,\"content\":\"<|im_end|>\",\"special\":true}],"
               "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
               "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = b;
        if (!printable) cp = b <= 0x20 ? 0x100 + b : b == 0xAD ? 0x100 + 67 : 0x100 + 33 + (b - 0x7F);
        fprintf(f, "%s\"\\u%04x\":%d", b ? "," : "", cp, b);
    }
    fprintf(f, "},\"merges\":[]}}");
    fclose(f);
    write_text(tc, "{\"eos_token\":\"<|im_end|>\",\"chat_template\":\"{% for m in messages %}<|im_start|>{{ m.role }}\\n"
                   "{{ m.content }}<|im_end|>\\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}\"}");
    char tdir[400];
    snprintf(tdir, sizeof tdir, "%s/ttarget", th_root);
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 4, .n_threads = 2, .tokenizer = tj};
    CHECK(sp_newmodel_write(tdir, &o, &err) == 0, "%s", err.msg);
    write_text(data, "{\"text\": \"hello world\"}\n"
                     "{\"prompt\": \"Q: hi\", \"response\": \" A: yo\"}\n"
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                     "{\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
    tr_regen_cfg c = {.model_dir = tdir, .data_path = data, .out_dir = out, .threads = 2};
    CHECK(sp_tr_regen_run(&c, NULL, NULL, &err) == 0, "%s", err.msg);
    tr_shardset set;
    if (sp_tr_shardset_open(&set, out, 8192, &err)) { CHECK(0, "%s", err.msg); return; }
    tok_tokenizer *tok = sp_tok_load_dir(tdir, &err);
    CHECK(tok != NULL, "%s", err.msg);
    const tr_shard *sh = &set.shards[0];
    CHECK(sh->n_seq == 3, "%d sequences", sh->n_seq);
    /* text: all response; prompt/response: the split at the prompt's tokens */
    CHECK(sh->resp_starts[0] == 0 && sh->seq_lens[0] == 11, "text: resp %d len %d", sh->resp_starts[0], sh->seq_lens[0]);
    CHECK(sh->resp_starts[1] == 5 && sh->seq_lens[1] == 11, "prompt/response: resp %d len %d", sh->resp_starts[1],
          sh->seq_lens[1]);
    /* messages: the prompt is the user turn rendered with the target's chat template and the generation
     * prompt; the rest decodes to the answer */
    const int32_t *ids = sh->ids + sh->seq_off[2];
    char *pt = NULL, *resp = NULL;
    tok_msg msg = {"user", "hi"};
    chat_template *ct = tok ? sp_chat_template_load(tdir, tok, NULL, &err) : NULL;
    CHECK(ct && sp_chat_render_msgs(ct, &msg, 1, 1, NULL, &pt, &err) == 0, "%s", err.msg);
    CHECK(pt && !strcmp(pt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), "prompt text '%s'", pt ? pt : "");
    sp_chat_template_free(ct);
    int32_t *pids = NULL;
    int np = 0;
    CHECK(pt && sp_tok_encode(tok, pt, strlen(pt), 0, 1, &pids, &np, &err) == 0, "%s", err.msg);
    CHECK(sh->resp_starts[2] == np && np > 0 && memcmp(ids, pids, sizeof(int32_t) * np) == 0,
          "messages: resp_start %d, prompt %d tokens", sh->resp_starts[2], np);
    CHECK(sp_tok_decode(tok, ids + np, sh->seq_lens[2] - np, &resp, &err) == 0 && strstr(resp, "yo"), "response '%s'",
          resp ? resp : "");
    free(pt); free(pids); free(resp);
    sp_tok_free(tok);
    sp_tr_shardset_close(&set);
}

/* --val-split: the two views hold every sequence of the shards exactly once (with its length and
 * response start), the same seed gives the same split, and a split leaving a side empty is refused */
static void test_val_split(void) {
    tr_shardset set, tr, va, tr2, va2;
    sp_err err;
    CHECK(sp_tr_shardset_open(&set, th_shards, 8192, &err) == 0, "%s", err.msg);
    int ok = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        if (sp_tr_shardset_split(&set, 0.5, seed, &tr, &va, &err)) {
            CHECK(strstr(err.msg, "--val-split"), "%s", err.msg);
            sp_tr_shardset_close_view(&tr), sp_tr_shardset_close_view(&va);
            continue;
        }
        ok++;
        CHECK(sp_tr_shardset_split(&set, 0.5, seed, &tr2, &va2, &err) == 0, "%s", err.msg);
        for (int i = 0; i < set.n_shards; i++) {
            const tr_shard *a = &set.shards[i], *t = &tr.shards[i], *v = &va.shards[i];
            CHECK(t->n_seq + v->n_seq == a->n_seq, "shard %d: %d + %d of %d", i, t->n_seq, v->n_seq, a->n_seq);
            CHECK(tr2.shards[i].n_seq == t->n_seq && va2.shards[i].n_seq == v->n_seq, "seed %d: not deterministic",
                  (int)seed);
            for (int q = 0; q < a->n_seq; q++) {
                int seen = 0;
                for (int k = 0; k < t->n_seq; k++)
                    seen += t->seq_off[k] == a->seq_off[q] && t->seq_lens[k] == a->seq_lens[q] &&
                            t->resp_starts[k] == a->resp_starts[q];
                for (int k = 0; k < v->n_seq; k++)
                    seen += v->seq_off[k] == a->seq_off[q] && v->seq_lens[k] == a->seq_lens[q] &&
                            v->resp_starts[k] == a->resp_starts[q];
                CHECK(seen == 1, "shard %d sequence %d is in %d views", i, q, seen);
            }
            for (int k = 0; k < v->n_seq; k++)
                CHECK(va2.shards[i].seq_off[k] == v->seq_off[k], "seed %d: another held-out set", (int)seed);
        }
        sp_tr_shardset_close_view(&tr2), sp_tr_shardset_close_view(&va2);
        sp_tr_shardset_close_view(&tr), sp_tr_shardset_close_view(&va);
    }
    CHECK(ok > 0, "no seed of 1..8 splits the shards in two");
    CHECK(sp_tr_shardset_split(&set, 1e-9, 1, &tr, &va, &err) != 0 && strstr(err.msg, "0 held-out"), "%s", err.msg);
    sp_tr_shardset_close_view(&tr), sp_tr_shardset_close_view(&va);
    sp_tr_shardset_close(&set);
}

int main(void) {
    setup();
    RUN(test_regen_shards);
    RUN(test_rerun_and_torn_shard);
    RUN(test_val_split);
    RUN(test_malformed_jsonl);
    RUN(test_batches);
    RUN(test_shared_batches);
    RUN(test_text_records);
    th_remove_root();
    return harness_done("test_train_data");
}
