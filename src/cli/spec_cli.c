/* spec_cli.c — shared pieces of the speculative subcommands (see spec_cli.h). */
#include "spec_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "tokenizer/tokenizer.h"

int cli_spec_opt_rows(void *rows, cli_spec_opts *o) {
    cli_opt *r = rows;
    r[0] = (cli_opt){NULL, "--spec", CLI_STR, &o->spec, "KIND",
                     "none | ngram | suffix | draft | assistant | dflash | dspark | eagle3, or KIND+suffix (default "
                     "none; -md alone: the kind its config.json names, draft for a FILE.gguf)"};
    r[1] = (cli_opt){"-md", "--model-draft", CLI_STR, &o->draft_dir, "DIR", "drafter directory (draft model: also FILE.gguf; assistant, DFlash / DSpark / EAGLE-3 checkpoint)"};
    r[2] = (cli_opt){NULL, "--draft-max", CLI_INT, &o->draft_max, "G", "most drafts per verify (default 8, max 32)"};
    r[3] = (cli_opt){NULL, "--draft-min", CLI_INT, &o->draft_min, "G0", "verify no drafts when fewer are proposed"};
    r[4] = (cli_opt){NULL, "--ngram-max", CLI_INT, &o->ngram_max, "N", "longest n-gram matched (default 4)"};
    r[5] = (cli_opt){NULL, "--draft-temp", CLI_FLOAT, &o->draft_temp, "T",
                     "drafter sampling temperature (default: the target's; still lossless)"};
    r[6] = (cli_opt){NULL, "--conf-threshold", CLI_FLOAT, &o->conf_threshold, "T",
                     "dspark: verify drafts up to the first confidence below T"};
    r[7] = (cli_opt){NULL, "--schedule", CLI_STR, &o->schedule, "auto",
                     "dspark: verify length by the hardware-aware prefix scheduler"};
    r[8] = (cli_opt){NULL, "--bf16-dot", CLI_FLAG, &o->bf16_dot, NULL, CLI_BF16_DOT_HELP};
    r[9] = (cli_opt){"-ctk", "--cache-type-k", CLI_STR, &o->cache_type_k, "TYPE",
                     "KV cache type of K: f32 (default) | f16 | bf16 | q8_0"};
    r[10] = (cli_opt){"-ctv", "--cache-type-v", CLI_STR, &o->cache_type_v, "TYPE",
                      "KV cache type of V: f32 (default) | f16 | bf16 | q8_0"};
    return CLI_SPEC_OPT_ROWS;
}

int cli_kv_types(const char *cmd, const cli_spec_opts *o, sp_kv_type *k, sp_kv_type *v) {
    sp_err err = {{0}};
    *k = *v = SP_KV_F32;
    if ((o->cache_type_k && sp_kv_type_parse(o->cache_type_k, k, &err)) ||
        (o->cache_type_v && sp_kv_type_parse(o->cache_type_v, v, &err)))
        return cli_error(cmd, "%s", err.msg), -1;
    return 0;
}

int cli_tree_opt_rows(void *rows, cli_tree_opts *o) {
    cli_opt *r = rows;
    r[0] = (cli_opt){NULL, "--tree", CLI_INT, &o->nodes, "N",
                     "verify a token tree of up to N draft nodes per round (dspark / dflash / eagle3; 0 = chains, "
                     "default)"};
    r[1] = (cli_opt){NULL, "--tree-k", CLI_INT, &o->k, "K", "most children per tree node (default 4)"};
    r[2] = (cli_opt){NULL, "--tree-shape", CLI_STR, &o->shape, "SHAPE",
                     "dynamic (best first by draft probability, default) | static (top-1 chain + siblings)"};
    return CLI_TREE_OPT_ROWS;
}

int cli_tree_apply(const char *cmd, const cli_tree_opts *o, sp_spec_params *p) {
    if (o->nodes < 0 || o->nodes > SP_TREE_MAX_NODES)
        return cli_error(cmd, "--tree %d out of range 0..%d", o->nodes, SP_TREE_MAX_NODES), -1;
    if (o->k < 1 || o->k > 16) return cli_error(cmd, "--tree-k %d out of range 1..16", o->k), -1;
    sp_tree_kind kind = SP_TREE_DYNAMIC;
    if (o->shape && !strcmp(o->shape, "static")) kind = SP_TREE_STATIC;
    else if (o->shape && strcmp(o->shape, "dynamic"))
        return cli_error(cmd, "--tree-shape %s (expected dynamic or static)", o->shape), -1;
    p->tree = (sp_tree_shape){.nodes = o->nodes, .k = o->k, .max_depth = p->draft_max, .kind = kind};
    return 0;
}

int cli_spec_resolve(const char *cmd, cli_spec_opts *o, const char *def_kind) {
    if (o->spec) return 0;
    if (!o->draft_dir) {
        o->spec = def_kind;
        return 0;
    }
    sp_err err = {{0}};
    if (sp_drafter_kind_detect(o->draft_dir, &o->spec, &err)) return cli_error(cmd, "-md: %s", err.msg), -1;
    return 0;
}

sp_drafter_opts cli_drafter_opts(const cli_spec_opts *o) {
    sp_drafter_opts d = sp_drafter_opts_default();
    d.kind = o->spec ? o->spec : "none";
    d.dir = o->draft_dir;
    d.draft_max = o->draft_max;
    d.draft_min = o->draft_min;
    d.ngram_min = o->ngram_min;
    d.ngram_max = o->ngram_max;
    d.draft_temp = o->draft_temp;
    d.conf_threshold = o->conf_threshold;
    d.schedule = o->schedule;
    d.bf16_dot = o->bf16_dot;
    return d;
}

/* The sources of the drafters handed out by cli_make_drafter / cli_make_dflash: a drafter borrows
 * its source (a DFlash / DSpark clone the loaded checkpoint), and these callers free only the
 * drafter, so the sources live until the process exits. */
#define CLI_MAX_SRCS 16
static sp_drafter_src *cli_srcs[CLI_MAX_SRCS];
static int cli_n_srcs;

static void cli_free_srcs(void) {
    while (cli_n_srcs > 0) sp_drafter_src_free(cli_srcs[--cli_n_srcs]);
}

sp_drafter *cli_src_drafter(const cli_spec_opts *o, sp_model *target, const char *target_dir,
                            const sp_sample_params *sample, int max_ctx, int threads, sp_model **draft_model,
                            sp_err *err) {
    sp_drafter_opts so = cli_drafter_opts(o);
    sp_drafter_src *src = NULL;
    if (cli_n_srcs == CLI_MAX_SRCS) {
        sp_err_set(err, "more than %d drafter sources in one process", CLI_MAX_SRCS);
        return NULL;
    }
    if (sp_drafter_src_open(&src, &so, target, target_dir, threads, max_ctx, err) || !src) return NULL;
    sp_drafter *d = sp_drafter_src_make(src, sample, max_ctx, err);
    if (!d) {
        sp_drafter_src_free(src);
        return NULL;
    }
    sp_model *m = sp_drafter_src_take_model(src);
    if (draft_model) *draft_model = m;
    if (cli_n_srcs == 0) atexit(cli_free_srcs);
    cli_srcs[cli_n_srcs++] = src;
    return d;
}

int cli_make_drafter(const char *cmd, const cli_spec_opts *o, sp_model *target, const char *target_dir,
                     const sp_sample_params *sample, int max_ctx, int threads, sp_model **draft_model,
                     sp_drafter **drafter) {
    sp_err err = {{0}};
    *draft_model = NULL;
    *drafter = NULL;
    sp_model_set_bf16_dot(target, o->bf16_dot);
    sp_kv_type kt, vt;
    if (cli_kv_types(cmd, o, &kt, &vt)) return -1;
    if (sp_model_set_kv_types(target, kt, vt, &err)) return cli_error(cmd, "%s", err.msg), -1;
    if (o->draft_max < 1 || o->draft_max > SP_SPEC_MAX_G)
        return cli_error(cmd, "--draft-max %d out of range 1..%d", o->draft_max, SP_SPEC_MAX_G), -1;
    if (!o->spec || !strcmp(o->spec, "none")) return 0;
    *drafter = cli_src_drafter(o, target, target_dir, sample, max_ctx, threads, draft_model, &err);
    if (!*drafter) return cli_error(cmd, "%s", err.msg), -1;
    return 0;
}

int cli_load_prompt(const char *cmd, const char *model_dir, const char *text, const char *ids_str, int32_t **ids,
                    int *n) {
    *ids = NULL;
    *n = 0;
    if (text && ids_str) return cli_error(cmd, "give either -p TEXT or --prompt-ids, not both"), -1;
    if (ids_str) return cli_parse_ids(cmd, "--prompt-ids", ids_str, ids, n);
    if (!text) return cli_error(cmd, "no prompt: give -p TEXT or --prompt-ids 1,2,3"), -1;
    sp_err err = {{0}};
    if (!sp_file_exists(model_dir))
        return cli_error(cmd, "-m %s: no such file or directory (-m takes a model directory or a FILE.gguf)",
                         model_dir), -1;
    if (!sp_tok_model_has_tokenizer(model_dir))
        return cli_error(cmd, "-p needs a tokenizer, and %s has none (no tokenizer.json / GGUF vocabulary): use --prompt-ids",
                         model_dir), -1;
    tok_tokenizer *t = sp_tok_load_model(model_dir, &err);
    if (!t) return cli_error(cmd, "%s", err.msg), -1;
    int rc = sp_tok_encode(t, text, strlen(text), 1, 1, ids, n, &err);
    sp_tok_free(t);
    if (rc) return cli_error(cmd, "%s", err.msg), -1;
    if (*n == 0) return cli_error(cmd, "the prompt encodes to no tokens"), -1;
    return 0;
}

/* the embedded default model directory (target/, drafter/, prompts.jsonl): $SPECULA_DEFAULT_MODEL,
 * then beside the binary (BIN/../models/default: the build tree), then its install prefix
 * (BIN/../share/specula/default), then ./models/default. Writes into buf. */
const char *cli_default_root(char *buf, size_t cap) {
    const char *env = getenv("SPECULA_DEFAULT_MODEL");
    char p[4096];
    if (env && *env) {
        snprintf(buf, cap, "%s", env);
        return buf;
    }
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"../models/default", "../share/specula/default"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            snprintf(buf, cap, "%s/%s", exe, rel[i]);
            if (!sp_path_join(p, sizeof p, buf, "target/config.json") && sp_file_exists(p)) return buf;
        }
    }
    snprintf(buf, cap, "models/default");
    return buf;
}
