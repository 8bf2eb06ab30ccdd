/* test_model_batch.c — sp_model_forward_batch: a forward over the rows of several sequences gives
 * each sequence exactly (bit for bit) the logits, hidden rows and taps of its own forward, for
 * every architecture of the reference fixtures, through prefill chunks, mixed block lengths,
 * rollbacks (trim) and more positions than a sliding window; and bad calls are errors. */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "specula.h"

static const char *ARCHS[] = {"llama", "qwen3", "gemma4"};
#define NSEQ 4
#define STEPS 14

static sp_model *load(const char *arch, int threads) {
    char dir[256];
    sp_err err = {{0}};
    sp_model *m;
    snprintf(dir, sizeof dir, "tests/data/ref-logits/%s", arch);
    if (sp_model_load(&m, dir, threads, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return NULL;
    }
    return m;
}

/* block length of sequence s at step k: a mix of prefill chunks, verify blocks and single steps */
static int block_len(int s, int k) {
    if (k == 0) return 3 + 5 * s; /* prompts of different lengths */
    return 1 + (s * 7 + k * 3) % 6;
}

static int32_t token_at(int s, int pos, int V) { return (int32_t)((pos * 131 + s * 977 + 7) % V); }

static void run_arch(const char *arch) {
    sp_model *m = load(arch, 2);
    CHECK(m != NULL, "load %s", arch);
    if (!m) return;
    const sp_config *c = sp_model_config(m);
    int V = c->vocab_size, H = c->hidden_size, ctx = 160, mb = 24;
    int taps_l[2] = {0, c->n_layers - 1};
    sp_err err = {{0}};
    sp_kv *solo[NSEQ], *batch[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        solo[s] = sp_kv_create(m, ctx, mb, &err);
        batch[s] = sp_kv_create(m, ctx, mb, &err);
    }
    sp_kv *scratch = sp_kv_create(m, NSEQ * mb, NSEQ * mb, &err);
    size_t rows = (size_t)NSEQ * mb;
    float *lg_solo = malloc(rows * V * sizeof(float)), *lg_batch = malloc(rows * V * sizeof(float));
    float *hid_solo = malloc(rows * H * sizeof(float)), *hid_batch = malloc(rows * H * sizeof(float));
    float *tap_solo = malloc(rows * 2 * H * sizeof(float)), *tap_batch = malloc(rows * 2 * H * sizeof(float));
    int mism_logits = 0, mism_hid = 0, mism_taps = 0, fails = 0;
    int32_t toks[NSEQ][32];
    for (int k = 0; k < STEPS; k++) {
        sp_forward_seq seqs[NSEQ];
        sp_forward_out outs[NSEQ];
        int n = 0, r0 = 0;
        for (int s = 0; s < NSEQ; s++) {
            if ((k + s) % 5 == 4) continue; /* sequences sit out some steps (join and leave) */
            int T = block_len(s, k), pos = sp_kv_len(batch[s]);
            if (pos + T > ctx) continue;
            for (int t = 0; t < T; t++) toks[s][t] = token_at(s, pos + t, V);
            /* solo reference: the sequence's own forward */
            sp_forward_out o = {.logits = lg_solo + (size_t)r0 * V, .hidden = hid_solo + (size_t)r0 * H,
                                .tap_layers = taps_l, .n_taps = 2, .taps = tap_solo + (size_t)r0 * 2 * H};
            fails += sp_model_forward(m, solo[s], toks[s], T, &o, &err) != 0;
            outs[n] = (sp_forward_out){.logits = lg_batch + (size_t)r0 * V, .hidden = hid_batch + (size_t)r0 * H,
                                       .tap_layers = taps_l, .n_taps = 2, .taps = tap_batch + (size_t)r0 * 2 * H};
            seqs[n] = (sp_forward_seq){batch[s], toks[s], T, &outs[n], NULL};
            n++;
            r0 += T;
        }
        if (!n) continue;
        fails += sp_model_forward_batch(m, scratch, seqs, n, &err) != 0;
        mism_logits += memcmp(lg_solo, lg_batch, (size_t)r0 * V * sizeof(float)) != 0;
        mism_hid += memcmp(hid_solo, hid_batch, (size_t)r0 * H * sizeof(float)) != 0;
        mism_taps += memcmp(tap_solo, tap_batch, (size_t)r0 * 2 * H * sizeof(float)) != 0;
        /* roll back part of the newest block of some sequences (rejected drafts) */
        for (int s = 0; s < NSEQ; s++) {
            int cut = (k + s) % 3;
            if (k == 0 || cut == 0 || sp_kv_len(solo[s]) != sp_kv_len(batch[s]) || sp_kv_len(solo[s]) < cut) continue;
            fails += sp_kv_trim(solo[s], cut, &err) != 0;
            fails += sp_kv_trim(batch[s], cut, &err) != 0;
        }
    }
    CHECK(fails == 0, "%s: %d calls failed: %s", arch, fails, err.msg);
    CHECK(mism_logits == 0 && mism_hid == 0 && mism_taps == 0, "%s: batched != solo at %d/%d/%d steps", arch,
          mism_logits, mism_hid, mism_taps);
    int len_ok = 1;
    for (int s = 0; s < NSEQ; s++) len_ok &= sp_kv_len(solo[s]) == sp_kv_len(batch[s]) && sp_kv_len(solo[s]) > 12;
    fprintf(stderr, "  %s: cache lengths %d %d %d %d\n", arch, sp_kv_len(batch[0]), sp_kv_len(batch[1]), sp_kv_len(batch[2]), sp_kv_len(batch[3]));
    CHECK(len_ok, "%s: cache lengths differ or too short", arch);

    /* errors: too many rows for the scratch, a shared cache, a bad token — nothing appended */
    int32_t t2[2] = {1, 2}, bad[1] = {V};
    int len0 = sp_kv_len(batch[0]);
    sp_kv *small = sp_kv_create(m, 4, 2, &err);
    sp_forward_seq a[2] = {{batch[0], t2, 2, NULL, NULL}, {batch[1], t2, 2, NULL, NULL}};
    CHECK(sp_model_forward_batch(m, small, a, 2, &err) == -1 && strstr(err.msg, "scratch"), "scratch: %s", err.msg);
    sp_forward_seq dup[2] = {{batch[0], t2, 1, NULL, NULL}, {batch[0], t2, 1, NULL, NULL}};
    CHECK(sp_model_forward_batch(m, scratch, dup, 2, &err) == -1 && strstr(err.msg, "share"), "dup: %s", err.msg);
    sp_forward_seq b[2] = {{batch[0], t2, 1, NULL, NULL}, {batch[1], bad, 1, NULL, NULL}};
    CHECK(sp_model_forward_batch(m, scratch, b, 2, &err) == -1 && strstr(err.msg, "out of range"), "tok: %s", err.msg);
    CHECK(sp_kv_len(batch[0]) == len0, "a failed batch appended to a cache");
    sp_kv_free(small);

    for (int s = 0; s < NSEQ; s++) {
        sp_kv_free(solo[s]);
        sp_kv_free(batch[s]);
    }
    sp_kv_free(scratch);
    free(lg_solo), free(lg_batch), free(hid_solo), free(hid_batch), free(tap_solo), free(tap_batch);
    sp_model_free(m);
}

static void test_batch_llama(void) { run_arch(ARCHS[0]); }
static void test_batch_qwen3(void) { run_arch(ARCHS[1]); }
static void test_batch_gemma4(void) { run_arch(ARCHS[2]); }

int main(void) {
    RUN(test_batch_llama);
    RUN(test_batch_qwen3);
    RUN(test_batch_gemma4);
    return harness_done("test_model_batch");
}
