/* test_train_gguf.c — drafter training with a GGUF target, through the `specula` binary of
 * this build: a tiny qwen3 (and gemma4) target is written as a checkpoint directory, exported to an f32 GGUF
 * (`export-gguf`) and quantized to Q8_0 (`quantize`). Regen + train on the f32 GGUF gives the
 * same shards, the same logged losses and the same drafter weights (byte for byte) as on the
 * directory; the drafter trained on the Q8_0 file speeds nothing up wrongly: greedy speculative
 * output on that file equals plain decoding. Also: the config.json written from GGUF metadata
 * (sp_model_config_json) parses back to the GGUF loader's sp_config for llama, qwen3 and gemma4. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "formats/config_json.h"
#include "formats/gguf_model.h"
#include "formats/newmodel.h"
#include "harness.h"

static char root[256], bin[512];

/* run cmd with stdout into root/out.txt, stderr into root/err.txt; returns the exit status */
static int run(const char *cmd) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>%s/err.txt >%s/out.txt", cmd, root, root);
    int st = system(full);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char p[400], *text = NULL;
        snprintf(p, sizeof p, "%s/err.txt", root);
        if (!sp_read_file(p, &text, NULL, NULL)) fprintf(stderr, "  %s\n  stderr: %s\n", cmd, text);
        free(text);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *dir, const char *name, size_t *n) {
    char p[512], *text = NULL;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t len = 0;
    if (sp_read_file(p, &text, &len, NULL)) return NULL;
    if (n) *n = len;
    return text;
}

static int same_file(const char *a, const char *b, const char *name) {
    size_t na = 0, nb = 0;
    char *x = slurp(a, name, &na), *y = slurp(b, name, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* the train_log.csv lines cut after grad_norm (the columns after it are timings / τ) */
static void log_losses(const char *dir, char *out, size_t cap) {
    char *text = slurp(dir, "train_log.csv", NULL);
    size_t o = 0;
    out[0] = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line && o + 256 < cap; line = strtok(NULL, "\n")) {
        int commas = 0;
        char *p = line;
        while (*p && commas < 8) commas += *p++ == ',';
        o += (size_t)snprintf(out + o, cap - o, "%.*s\n", (int)(p - line), line);
    }
    free(text);
}

static int rope_same(const sp_rope_params *a, const sp_rope_params *b) {
    return a->type == b->type && a->theta == b->theta && a->factor == b->factor &&
           a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
           a->original_max_pos == b->original_max_pos && a->partial_rotary_factor == b->partial_rotary_factor;
}

/* every field the model and the trainer read, tensor_prefix (set by the loader) aside */
static int config_same(const sp_config *a, const sp_config *b) {
    int same = a->arch == b->arch && a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
               a->n_layers == b->n_layers && a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
               a->head_dim == b->head_dim && a->ffn_dim == b->ffn_dim && a->global_head_dim == b->global_head_dim &&
               a->attention_k_eq_v == b->attention_k_eq_v && a->rms_eps == b->rms_eps &&
               a->tie_embeddings == b->tie_embeddings && a->max_pos == b->max_pos && a->qk_norm == b->qk_norm &&
               a->act == b->act && rope_same(&a->rope, &b->rope) && rope_same(&a->rope_swa, &b->rope_swa) &&
               a->sliding_window == b->sliding_window && a->final_softcap == b->final_softcap &&
               a->ple_dim == b->ple_dim && a->ple_vocab == b->ple_vocab && a->n_kv_shared == b->n_kv_shared &&
               a->double_wide_mlp == b->double_wide_mlp && a->bos_id == b->bos_id && a->pad_id == b->pad_id &&
               a->n_eos == b->n_eos && !memcmp(a->eos_ids, b->eos_ids, sizeof a->eos_ids) &&
               !strcmp(a->torch_dtype, b->torch_dtype);
    for (int i = 0; same && i < a->n_layers; i++) same = !memcmp(&a->layers[i], &b->layers[i], sizeof a->layers[i]);
    return same;
}

/* config.json from each architecture's tiny GGUF parses back to the loader's sp_config */
static void test_config_json(void) {
    const char *archs[] = {"llama", "qwen3", "gemma4"};
    for (int i = 0; i < 3; i++) {
        char dir[400], gg[400], cmd[2048];
        snprintf(dir, sizeof dir, "%s/cfg-%s", root, archs[i]);
        snprintf(gg, sizeof gg, "%s/cfg-%s.gguf", root, archs[i]);
        sp_err err;
        newmodel_opts o = {.arch = archs[i], .preset = "tiny", .seed = 7, .n_threads = 2};
        CHECK(sp_newmodel_write(dir, &o, &err) == 0, "%s", err.msg);
        snprintf(cmd, sizeof cmd, "%s export-gguf -m %s -o %s --no-tokenizer", bin, dir, gg);
        CHECK(run(cmd) == 0, "export-gguf %s", archs[i]);
        gguf_file *f = sp_gguf_open(gg, &err);
        CHECK(f != NULL, "%s", err.msg);
        if (!f) continue;
        sp_config want, got;
        CHECK(sp_config_from_gguf(&want, f, &err) == 0, "%s", err.msg);
        sp_gguf_close(f);
        char *text = NULL;
        CHECK(sp_model_config_json(gg, &text, &err) == 0, "%s", err.msg);
        CHECK(text && sp_config_parse(&got, text, "written config.json", &err) == 0, "%s: %s", archs[i], err.msg);
        CHECK(text && config_same(&want, &got), "%s: the written config.json reads back differently:\n%s", archs[i],
              text ? text : "");
        free(text);
        /* a directory gives its own config.json, verbatim */
        size_t n = 0;
        char *file = slurp(dir, "config.json", &n);
        CHECK(sp_model_config_json(dir, &text, &err) == 0 && file && !strcmp(text, file), "directory config.json");
        free(text);
        free(file);
    }
    sp_err err;
    char *text = NULL, missing[400];
    snprintf(missing, sizeof missing, "%s/none.gguf", root);
    CHECK(sp_model_config_json(missing, &text, &err) == -1 && strstr(err.msg, "none.gguf") && !text, "missing: %s",
          err.msg);
}

/* regen + train on an arch's tiny target as a directory, its f32 GGUF and its Q8_0 GGUF;
 * spec == plain on Q8_0 */
static void train_case(const char *arch) {
    char target[300], cmd[4096], p[512];
    snprintf(target, sizeof target, "%.250s/%s", root, arch);
    sp_err err;
    newmodel_opts o = {.arch = arch, .preset = "tiny", .seed = 2, .n_threads = 2};
    CHECK(sp_newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "%s export-gguf -m %s -o %s-t32.gguf --type f32 --no-tokenizer", bin, target, target);
    CHECK(run(cmd) == 0, "export-gguf f32");
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s-tq8.gguf --type q8_0 -q", bin, target, target);
    CHECK(run(cmd) == 0, "quantize q8_0");
    snprintf(p, sizeof p, "%s/ok.jsonl", root);
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 8; i++)
        fprintf(f, "{\"ids\": [1, %d, %d, %d, %d], \"resp_start\": 5}\n", 50 + i, 60 + 3 * i, 50 + i, 70 + i);
    fclose(f);
    const char *name[3] = {"dir", "f32", "q8"};
    char model[3][512];
    snprintf(model[0], sizeof model[0], "%s", target);
    snprintf(model[1], sizeof model[1], "%s-t32.gguf", target);
    snprintf(model[2], sizeof model[2], "%s-tq8.gguf", target);
    static char losses[3][8192];
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s regen -m %s --data %s -o %s-sh-%s --generate 24 --taps 0 -q -t 1", bin, model[i],
                 p, target, name[i]);
        CHECK(run(cmd) == 0, "regen %s", name[i]);
        snprintf(cmd, sizeof cmd,
                 "%s train --arch dspark -m %s --data %s-sh-%s -o %s-d-%s --steps 5 --batch 4 --block-size 4 "
                 "--layers 1 --markov-rank 8 --ctx 16 --lr 3e-3 -q -t 1",
                 bin, model[i], target, name[i], target, name[i]);
        CHECK(run(cmd) == 0, "%s: train on %s", arch, name[i]);
        char d[450];
        snprintf(d, sizeof d, "%s-d-%s", target, name[i]);
        log_losses(d, losses[i], sizeof losses[i]);
        CHECK(strstr(losses[i], "\n5,") != NULL, "%s: train_log.csv has no step 5:\n%s", name[i], losses[i]);
    }
    char a[450], b[450];
    snprintf(a, sizeof a, "%s-d-dir", target);
    snprintf(b, sizeof b, "%s-d-f32", target);
    CHECK(!strcmp(losses[0], losses[1]), "%s: f32 GGUF losses differ from the directory's:\n%s\n%s", arch, losses[0],
          losses[1]);
    CHECK(same_file(a, b, "model.safetensors"), "%s: the drafter trained on the f32 GGUF differs", arch);
    /* the drafter's config from GGUF metadata is a DSpark config for the same shapes */
    char *cfg = slurp(b, "config.json", NULL);
    CHECK(cfg && strstr(cfg, strcmp(arch, "gemma4") ? "\"Qwen3DSparkModel\"" : "\"Gemma4DSparkModel\"") &&
              strstr(cfg, "\"block_size\": 4"),
          "config: %s", cfg);
    free(cfg);

    /* lossless on the Q8_0 target: greedy speculative output equals plain decoding */
    static char plain[1 << 14], spec[1 << 14];
    const char *gen = "%s generate -m %s --prompt-ids 1,50,60,50,70 -n 32 --ignore-eos -t 1 %s %s 2>/dev/null";
    snprintf(cmd, sizeof cmd, gen, bin, model[2], "", "");
    CHECK(harness_run(cmd, plain, sizeof plain) == 0 && strlen(plain) > 10, "plain: %s", plain);
    char md[480];
    snprintf(md, sizeof md, "-md %s-d-q8", target);
    snprintf(cmd, sizeof cmd, gen, bin, model[2], "--spec dspark", md);
    CHECK(harness_run(cmd, spec, sizeof spec) == 0 && !strcmp(plain, spec), "%s: spec differs:\n%s\n%s", arch, plain,
          spec);
}

static void test_train_gguf_qwen3(void) { train_case("qwen3"); }
static void test_train_gguf_gemma4(void) { train_case("gemma4"); }

int main(int argc, char **argv) {
    (void)argc;
    snprintf(root, sizeof root, "/tmp/specula_test_train_gguf_%d", (int)getpid());
    snprintf(bin, sizeof bin, "%s", argv[0]);
    char *slash = strrchr(bin, '/');
    if (slash) *slash = 0;
    slash = strrchr(bin, '/');
    if (slash) strcpy(slash + 1, "specula");
    sp_err err;
    if (access(bin, X_OK) != 0 || sp_mkdir_p(root, &err)) {
        printf("skipped: no specula binary at %s\n", bin);
        return harness_done("test_train_gguf");
    }
    RUN(test_config_json);
    RUN(test_train_gguf_qwen3);
    RUN(test_train_gguf_gemma4);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_gguf");
}
