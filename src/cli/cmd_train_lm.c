/* cmd_train_lm.c — `specula train-lm`: train a Gemma-4 text target model from scratch on text
 * files and write it in the Hugging Face layout `specula generate -m DIR` loads.
 *
 *   specula train-lm --arch gemma4 --config config.json --tokenizer tokenizer.json
 *                    --data FILE... [--eval FILE...] -o DIR [--steps N --batch B --seq T
 *                    --lr LR --seed S --save-every K --eval-every K --resume ...]
 *
 * --data / --eval take every following argument up to the next option; --data-list /
 * --eval-list read one path per line from a file. The trainer is src/train/lm_train.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "core/core.h"
#include "train/lm_train.h"

typedef struct {
    const char **v;
    int n, cap;
    char *buf; /* list-file contents the paths point into */
} path_list;

static int list_push(path_list *l, const char *p) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        const char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return 0;
}

static int list_read(path_list *l, const char *file) {
    size_t n;
    sp_err err;
    if (sp_read_file(file, &l->buf, &n, &err)) return cli_error("train-lm", "%s", err.msg), -1;
    for (char *s = strtok(l->buf, "\n"); s; s = strtok(NULL, "\n"))
        if (*s && list_push(l, s)) return cli_error("train-lm", "out of memory"), -1;
    return 0;
}

/* the multi-value --data / --eval pulled out of argv into data / eval; rest gets every other
 * argument (argv[0] first) */
static int pull_lists(int argc, char **argv, char **rest, int *n_rest, path_list *data, path_list *eval) {
    rest[(*n_rest)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        path_list *l = !strcmp(argv[i], "--data") ? data : !strcmp(argv[i], "--eval") ? eval : NULL;
        if (!l) {
            rest[(*n_rest)++] = argv[i];
            continue;
        }
        while (i + 1 < argc && argv[i + 1][0] != '-')
            if (list_push(l, argv[++i])) return -1;
    }
    return 0;
}

/* the options that are not fields of lm_train_opts as given */
typedef struct {
    const char *arch, *dtype, *data_list, *eval_list;
    float time_limit, lr, wd, min_lr, clip;
} lm_cli;

/* read the list files, check the options and complete o from c, data and eval */
static int apply_cli(lm_train_opts *o, const lm_cli *c, path_list *data, path_list *eval) {
    if ((c->data_list && list_read(data, c->data_list)) || (c->eval_list && list_read(eval, c->eval_list))) return -1;
    if (strcmp(c->arch, "gemma4")) return cli_error("train-lm", "--arch %s: only gemma4 is supported", c->arch), -1;
    if (!o->config_path || !o->tokenizer_path || !o->out_dir || !data->n)
        return cli_error("train-lm", "--config, --tokenizer, --data (or --data-list) and -o are required"), -1;
    if (!strcmp(c->dtype, "bf16")) o->dtype = SP_DT_BF16;
    else if (!strcmp(c->dtype, "f32")) o->dtype = SP_DT_F32;
    else return cli_error("train-lm", "--dtype %s: expected bf16 or f32", c->dtype), -1;
    o->lr = c->lr;
    o->time_limit_s = c->time_limit;
    o->weight_decay = c->wd;
    o->min_lr_frac = c->min_lr;
    o->clip = c->clip;
    o->data = data->v;
    o->n_data = data->n;
    o->eval = eval->v;
    o->n_eval = eval->n;
    return 0;
}

/* train, then a summary on stderr; 0 or 1 */
static int run_train_lm(const lm_train_opts *o) {
    lm_train_result r;
    sp_err err = {0};
    if (sp_lm_train_run(o, &r, &err)) {
        fprintf(stderr, "specula: error: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "train-lm: %zu parameters, %lld train / %lld held-out tokens; step %d, loss %.4f -> %.4f, %.1f tok/s",
            r.n_params, (long long)r.train_tokens, (long long)r.eval_tokens, r.step, r.first_loss, r.last_loss,
            r.tokens_per_s);
    if (r.eval_ppl > 0) fprintf(stderr, ", held-out loss %.4f ppl %.3f", r.eval_loss, r.eval_ppl);
    fprintf(stderr, "\nmodel written to %s\n", o->out_dir);
    if (r.step < o->steps) fprintf(stderr, "stopped at step %d of %d: add --resume to continue\n", r.step, o->steps);
    return 0;
}

int cmd_train_lm(int argc, char **argv) {
    lm_train_opts o;
    sp_lm_train_defaults(&o);
    path_list data = {0}, eval = {0};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0, rc = 2;
    if (!rest) return cli_error("train-lm", "out of memory");
    if (pull_lists(argc, argv, rest, &n_rest, &data, &eval)) goto out;
    lm_cli c = {.arch = "gemma4", .dtype = "bf16", .lr = (float)o.lr, .wd = (float)o.weight_decay,
                .min_lr = (float)o.min_lr_frac, .clip = (float)o.clip};
    cli_opt opts[] = {
        {NULL, "--arch", CLI_STR, &c.arch, "ARCH", "architecture (gemma4 only)"},
        {"-c", "--config", CLI_STR, &o.config_path, "FILE", "Hugging Face config.json of the model (required)"},
        {NULL, "--tokenizer", CLI_STR, &o.tokenizer_path, "FILE", "tokenizer.json (required; copied to DIR)"},
        {NULL, "--data", CLI_FLAG, NULL, NULL, "FILE... training text files"},
        {NULL, "--data-list", CLI_STR, &c.data_list, "FILE", "training files, one path per line"},
        {NULL, "--eval", CLI_FLAG, NULL, NULL, "FILE... held-out text files (perplexity)"},
        {NULL, "--eval-list", CLI_STR, &c.eval_list, "FILE", "held-out files, one path per line"},
        {"-o", "--out", CLI_STR, &o.out_dir, "DIR", "output model directory (required)"},
        {NULL, "--steps", CLI_INT, &o.steps, "N", "optimizer steps (default 1000)"},
        {NULL, "--batch", CLI_INT, &o.batch, "B", "sequences per step (default 8)"},
        {NULL, "--seq", CLI_INT, &o.seq, "T", "tokens per sequence (default 256)"},
        {NULL, "--lr", CLI_FLOAT, &c.lr, "LR", "peak learning rate (default 1e-3)"},
        {NULL, "--min-lr-frac", CLI_FLOAT, &c.min_lr, "F", "final lr as a fraction of the peak (default 0.1)"},
        {NULL, "--warmup", CLI_INT, &o.warmup, "N", "warmup steps (default 4% of the steps)"},
        {NULL, "--weight-decay", CLI_FLOAT, &c.wd, "W", "AdamW weight decay on matrices (default 0.1)"},
        {NULL, "--clip", CLI_FLOAT, &c.clip, "C", "gradient global-norm clip (default 1.0; 0 = off)"},
        {NULL, "--seed", CLI_U64, &o.seed, "S", "initialisation and data seed (default 1234)"},
        {NULL, "--save-every", CLI_INT, &o.save_every, "K", "checkpoint every K steps (default: end only)"},
        {NULL, "--eval-every", CLI_INT, &o.eval_every, "K", "held-out evaluation every K steps (default: end)"},
        {NULL, "--eval-seqs", CLI_INT, &o.eval_seqs, "N", "held-out sequences per evaluation (default 64)"},
        {NULL, "--stop-after", CLI_INT, &o.stop_after, "N", "stop (with a checkpoint) after step N; --resume continues"},
        {NULL, "--time-limit", CLI_FLOAT, &c.time_limit, "SECONDS", "stop (with a checkpoint) after this wall time; --resume continues"},
        {NULL, "--resume", CLI_FLAG, &o.resume, NULL, "continue from DIR's checkpoint (DIR/optimizer.safetensors; bit-identical)"},
        {NULL, "--dtype", CLI_STR, &c.dtype, "bf16|f32", "dtype of the exported weights (default bf16)"},
        {"-t", "--threads", CLI_INT, &o.n_threads, "N", "threads (default: all cores)"},
        {"-q", "--quiet", CLI_FLAG, &o.quiet, NULL, "no progress bar"},
    };
    int n_opts = (int)(sizeof opts / sizeof opts[0]);
    const char *usage = "--arch gemma4 --config FILE --tokenizer FILE --data FILE... -o DIR [options]";
    int prc = cli_parse("train-lm", usage, opts, n_opts, n_rest, rest, NULL, NULL, 0);
    if (prc) {
        rc = prc > 0 ? 0 : 2;
        goto out;
    }
    if (apply_cli(&o, &c, &data, &eval)) goto out;
    rc = run_train_lm(&o);
out:
    free(rest);
    free(data.v);
    free(eval.v);
    free(data.buf);
    free(eval.buf);
    return rc;
}
