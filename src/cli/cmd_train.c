/* cmd_train.c — `specula train`: train a DSpark, DFlash or EAGLE-3 drafter for a llama, qwen3 or gemma4
 * target from regenerated shards (src/train/trainer.h). An output directory that already holds
 * files is refused unless --resume (continue its checkpoint) or --force (start over in it) says
 * what to do with it. Without --held-out the τ monitor runs on training blocks and is reported as
 * "train-set tau". */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/drafter_kinds.h"
#include "cli/args.h"
#include "train/mlxbun_train.h"
#include "train/trainer.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* 1 when dir exists and holds anything but . and .. */
static int dir_has_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d))) any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

/* --arch and --markov-head into c; 0, or cli_error's status */
static int set_arch(tr_train_cfg *c, const char *arch, const char *markov) {
    int id;
    sp_err aerr = {{0}};
    if (sp_drafter_train_arch(arch, &id, &aerr)) return cli_error("train", "%s", aerr.msg);
    c->arch = (tr_arch)id;
    if (!strcmp(markov, "vanilla")) c->markov_head = TR_MARKOV_VANILLA;
    else if (!strcmp(markov, "gated")) c->markov_head = TR_MARKOV_GATED;
    else if (!strcmp(markov, "rnn")) c->markov_head = TR_MARKOV_RNN;
    else return cli_error("train", "--markov-head must be vanilla, gated or rnn, not '%s'", markov);
    return 0;
}

/* train (data parallel over the ranks under mpirun), then rank 0 prints a summary */
static int run_train(tr_train_cfg *c) {
    tr_dist dist;
    sp_tr_dist_init(&dist); /* under mpirun: data parallel over the ranks */
    c->dist = &dist;
    sp_err err = {{0}};
    tr_train_result r;
    int rc = sp_tr_train_run(c, &r, &err);
    sp_tr_dist_finalize(&dist);
    if (rc) return cli_error("train", "%s", err.msg);
    if (dist.rank != 0) return 0;
    fprintf(stderr, "train: step %ld, loss %.4f -> %.4f, %s tau %.3f -> %.3f, %.0f block tok/s, %.1f GFLOP/s\n",
            r.step, r.loss_first, r.loss_last, c->heldout_dir || c->val_split > 0 ? "held-out" : "train-set", r.tau_first, r.tau_last,
            r.tok_per_s, r.gflops);
    return 0;
}

/* --gamma G|block, --loss-weights CE,TV,CONF, --loss-norm weights|anchors into c; 0 or 2 (printed) */
static int set_loss(tr_train_cfg *c, const char *gamma, const char *weights, const char *norm) {
    char *end;
    if (gamma && !strcmp(gamma, "block")) {
        c->gamma_block = 1;
    } else if (gamma) {
        c->gamma_block = 0;
        c->gamma = strtod(gamma, &end);
        if (end == gamma || *end || !isfinite(c->gamma) || c->gamma <= 0)
            return cli_error("train", "--gamma expects a number > 0 or 'block', got '%s'", gamma);
    }
    if (weights) {
        const char *p = weights;
        double sum = 0;
        for (int i = 0; i < 3; i++, p = end + 1) {
            c->loss_weights[i] = strtod(p, &end);
            if (end == p || *end != (i < 2 ? ',' : 0) || !isfinite(c->loss_weights[i]) || c->loss_weights[i] < 0)
                return cli_error("train", "--loss-weights expects three numbers >= 0 as CE,TV,CONF, got '%s'", weights);
            sum += c->loss_weights[i];
        }
        if (!(sum > 0)) return cli_error("train", "--loss-weights %s: at least one weight must be > 0", weights);
        c->loss_weights_set = 1;
    }
    if (norm && !strcmp(norm, "anchors")) c->loss_norm = TR_LOSS_NORM_ANCHORS;
    else if (norm && !strcmp(norm, "weights")) c->loss_norm = TR_LOSS_NORM_WEIGHTS;
    else if (norm) return cli_error("train", "--loss-norm expects weights or anchors, got '%s'", norm);
    return 0;
}

/* --temp T[,T…] and --kl-weight W into c (the tempered loss, docs/TRAINING.md §7); 0 or 2 (printed) */
static int set_temp(tr_train_cfg *c, const char *temp, const char *kl) {
    char *end;
    if (temp) {
        const char *p = temp;
        c->n_temps = 0;
        for (;;) {
            double t = strtod(p, &end);
            if (end == p || (*end && *end != ',') || !isfinite(t) || !(t > 0))
                return cli_error("train", "--temp expects temperatures > 0, one or several separated by commas "
                                          "(e.g. 0.8 or 0.6,0.8,1), got '%s'", temp);
            if (c->n_temps == TR_MAX_TEMPS)
                return cli_error("train", "--temp %s: at most %d temperatures", temp, TR_MAX_TEMPS);
            c->temps[c->n_temps++] = t;
            if (!*end) break;
            p = end + 1;
        }
    }
    if (kl) {
        c->kl_weight = strtod(kl, &end);
        if (end == kl || *end || !isfinite(c->kl_weight) || c->kl_weight < 0)
            return cli_error("train", "--kl-weight expects a number >= 0, got '%s'", kl);
        if (c->kl_weight > 0 && !temp)
            return cli_error("train", "--kl-weight needs --temp (--temp 1: the untempered distribution)");
    }
    return 0;
}

/* the value of option `name` in argv (--name V or --name=V; the last one), else NULL */
static const char *prescan(int argc, char **argv, const char *name) {
    const char *v = NULL;
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], name) && i + 1 < argc) v = argv[++i];
        else if (!strncmp(argv[i], name, n) && argv[i][n] == '=') v = argv[i] + n + 1;
    }
    return v;
}

/* --layout: mlx-bun's modules take mlx-bun's sizes and recipe as their defaults (set before the
 * options are read, so any option given overrides them); 0, or cli_error's status */
static int layout_defaults(tr_train_cfg *c, int argc, char **argv) {
    const char *layout = prescan(argc, argv, "--layout"), *arch = prescan(argc, argv, "--arch");
    if (!layout || !strcmp(layout, "deepspec")) return 0;
    if (strcmp(layout, "mlx-bun")) return cli_error("train", "--layout expects deepspec or mlx-bun, got '%s'", layout);
    if (arch && strcmp(arch, "dspark") && strcmp(arch, "dflash"))
        return cli_error("train", "--layout mlx-bun trains --arch dspark (DSpark v1) or dflash (faithful DFlash), not %s",
                         arch);
    sp_tr_mlxbun_defaults(c, arch && !strcmp(arch, "dflash") ? TR_ARCH_DFLASH : TR_ARCH_DSPARK);
    return 0;
}

/* the required options, --resume / --force against the output folder, --steps and --epochs;
 * 0, or cli_error's status */
static int check_run(const tr_train_cfg *c, int resume, int force, int steps) {
    if (!c->model_dir || !c->data_dir || !c->out_dir) return cli_error("train", "-m, --data and -o are required");
    if (resume && force) return cli_error("train", "give either --resume or --force, not both");
    if (!resume && !force && dir_has_files(c->out_dir))
        return cli_error("train", "%s already holds files (a checkpoint would be overwritten): --resume continues "
                                  "its training, --force starts over", c->out_dir);
    if (steps != INT_MIN && steps < 1) return cli_error("train", "--steps must be at least 1, got %d", steps);
    if (c->epochs < 1) return cli_error("train", "--epochs must be at least 1, got %d", c->epochs);
    return 0;
}

int cmd_train(int argc, char **argv) {
    tr_train_cfg c = sp_tr_train_defaults();
    const char *arch = "dspark", *markov = "vanilla", *gamma = NULL, *weights = NULL, *norm = NULL, *layout = NULL;
    const char *temp = NULL, *kl = NULL;
    int rc = layout_defaults(&c, argc, argv);
    if (rc) return rc;
    int steps = INT_MIN, warmup = -1, resume = 0, force = 0, quiet = 0, stop_after = 0;
    float lr = (float)c.lr, val_split = 0;
    cli_opt opts[] = {
        {NULL, "--arch", CLI_STR, &arch, "dspark|dflash|dflash-zlab|eagle3",
         "DSpark; DeepSpec DFlash (DSpark layout, no heads); z-lab DFlashDraftModel; EAGLE-3 (SpecForge layout, "
         "shards from regen --taps eagle3) (default dspark)"},
        {NULL, "--layout", CLI_STR, &layout, "deepspec|mlx-bun",
         "mlx-bun: its own modules and files (dspark.json): --arch dspark = DSpark v1, dflash = faithful DFlash, "
         "with its defaults: block 5, layers 2 (v1) / 5, --gamma block, --loss-norm anchors (default deepspec)"},
        {NULL, "--draft-dim", CLI_INT, &c.mb_dim, "D", "mlx-bun: the drafter width dDraft (default 1024)"},
        {NULL, "--heads", CLI_INT, &c.mb_heads, "N", "mlx-bun: attention heads nHeads (default 8)"},
        {NULL, "--ff-mult", CLI_INT, &c.mb_ff_mult, "N", "mlx-bun: FFN width multiplier ffMult (default 2)"},
        {"-m", "--model", CLI_STR, &c.model_dir, "TARGET", "target model: a directory or a .gguf file; llama, qwen3 or gemma4 (required)"},
        {NULL, "--data", CLI_STR, &c.data_dir, "SHARDS", "training shards from `specula regen` (required)"},
        {NULL, "--held-out", CLI_STR, &c.heldout_dir, "SHARDS",
         "held-out shards for the tau monitor (default: training blocks, reported as train-set tau)"},
        {"-o", "--out", CLI_STR, &c.out_dir, "DIR", "drafter checkpoint directory (required)"},
        {NULL, "--steps", CLI_INT, &steps, "N", "optimizer steps (default: --epochs over the anchors)"},
        {NULL, "--epochs", CLI_INT, &c.epochs, "E", "epochs when --steps is not given (default 1)"},
        {NULL, "--lr", CLI_FLOAT, &lr, "LR", "peak learning rate (default 6e-4)"},
        {NULL, "--warmup", CLI_INT, &warmup, "N", "warmup steps (default 4% of the steps)"},
        {NULL, "--batch", CLI_INT, &c.batch, "N", "anchors per step (default 16)"},
        {NULL, "--anchors-per-seq", CLI_INT, &c.anchors_per_seq, "A",
         "anchors drawn together from one sequence, whose shared context rows are computed once; "
         "a step sees batch/A sequences "
         "(default " STR(TR_ANCHORS_PER_SEQ_DEFAULT) "; 1 = every anchor its own context)"},
        {NULL, "--block-size", CLI_INT, &c.block, "B", "block size (default 7); eagle3: training-time-test steps"},
        {NULL, "--window", CLI_INT, &c.window, "S", "eagle3: positions per training window (default 64)"},
        {NULL, "--draft-vocab", CLI_INT, &c.draft_vocab, "N",
         "eagle3: draft vocabulary, the N most frequent ids of the data (default min(V, 32000))"},
        {NULL, "--layers", CLI_INT, &c.layers, "L", "draft layers (default 5)"},
        {NULL, "--markov-rank", CLI_INT, &c.markov_rank, "R", "DSpark Markov head rank (default 256)"},
        {NULL, "--markov-head", CLI_STR, &markov, "vanilla|gated|rnn",
         "DSpark Markov head type (markov_head_type, default vanilla)"},
        {NULL, "--ctx", CLI_INT, &c.ctx, "N", "context rows per anchor (default 512)"},
        {NULL, "--gamma", CLI_STR, &gamma, "G|block", "loss position decay exp(-k/G); block: G = the block size (default 4; mlx-bun: block)"},
        {NULL, "--loss-weights", CLI_STR, &weights, "CE,TV,CONF", "loss weights (default: dspark 0.1,0.9,1; dflash 1,0,0; mlx-bun 0.1,0.9,1)"},
        {NULL, "--loss-norm", CLI_STR, &norm, "weights|anchors", "divide the loss by the weight sum or the anchors (default weights; mlx-bun: anchors)"},
        {NULL, "--temp", CLI_STR, &temp, "T[,T...]",
         "dspark: train for sampled decoding at temperature T: TV, KL and the confidence target against the "
         "target's distribution at T; several: one drawn per anchor (default: the untempered loss)"},
        {NULL, "--kl-weight", CLI_STR, &kl, "W", "with --temp: weight of the KL(target_T || drafter_T) term (default 0)"},
        {NULL, "--init", CLI_STR, &c.init_dir, "DRAFTER",
         "start from this drafter's weights (its model.safetensors, same settings) instead of a random init"},
        {NULL, "--mask-id", CLI_INT, &c.mask_id, "ID", "mask token id (default: 4 for Gemma-4, 151669 for the Qwen3 vocab, 128002 for the Llama-3 vocab, else V-1)"},
        {NULL, "--seed", CLI_U64, &c.seed, "S", "init and data-order seed (default 42)"},
        {NULL, "--save-every", CLI_INT, &c.save_every, "K", "checkpoint every K steps (default: at the end)"},
        {NULL, "--eval-every", CLI_INT, &c.eval_every, "K", "held-out tau every K steps (default: start, end)"},
        {NULL, "--eval-blocks", CLI_INT, &c.eval_blocks, "N", "held-out blocks per evaluation (default 64)"},
        {NULL, "--val-split", CLI_FLOAT, &val_split, "F", "hold out this fraction of the shards' sequences for tau (by --seed)"},
        {NULL, "--keep-best", CLI_FLAG, &c.keep_best, NULL, "keep the model at the best held-out tau in DIR/best/"},
        {NULL, "--patience", CLI_INT, &c.patience, "N", "stop after N evaluations without a better tau (implies --keep-best)"},
        {NULL, "--log", CLI_STR, &c.log_path, "FILE.csv", "CSV log (default DIR/train_log.csv)"},
        {NULL, "--resume", CLI_FLAG, &resume, NULL, "continue from DIR's checkpoint (bit-identical)"},
        {NULL, "--force", CLI_FLAG, &force, NULL, "train from scratch into a DIR that already holds files"},
        {NULL, "--stop-after", CLI_INT, &stop_after, "N", "stop after N steps without a final save (testing)"},
        {"-t", "--threads", CLI_INT, &c.threads, "N", "threads (default: all cores)"},
        {"-q", "--quiet", CLI_FLAG, &quiet, NULL, "no progress bar"},
    };
    rc = cli_parse("train", "--arch {dspark,dflash,dflash-zlab,eagle3} -m TARGET --data SHARDS -o DIR [options]", opts,
                       (int)(sizeof opts / sizeof opts[0]), argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if ((rc = check_run(&c, resume, force, steps)) || (rc = set_arch(&c, arch, markov)) || (rc = set_loss(&c, gamma, weights, norm)) || (rc = set_temp(&c, temp, kl)))
        return rc;
    c.steps = steps == INT_MIN ? 0 : steps;
    c.warmup = warmup;
    c.lr = lr, c.val_split = val_split;
    c.resume = resume;
    c.stop_after = stop_after;
    c.progress = !quiet;
    return run_train(&c);
}
