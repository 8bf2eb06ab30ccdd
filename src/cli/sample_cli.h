/* sample_cli.h — the sampling flags the generating subcommands share, as llama.cpp spells them
 * (--temp, --top-k, --top-p, --min-p, -s/--seed with -1 = random, --repeat-penalty,
 * --repeat-last-n, --presence-penalty, --frequency-penalty, --ignore-generation-config), and
 * their resolution against the model's generation_config.json: a value the user gives wins,
 * then the checkpoint's generation_config.json, then the command's default. */
#ifndef SPECULA_CLI_SAMPLE_H
#define SPECULA_CLI_SAMPLE_H

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "args.h"
#include "decode/generate.h"

typedef struct {
    float temp, top_p, min_p; /* NAN: not given */
    int top_k;                /* INT_MIN: not given */
    const char *seed;         /* NULL: not given; "-1": random */
    float repeat, presence, frequency; /* NAN: not given */
    int last_n;               /* INT_MIN: not given */
    int ignore_gc;            /* --ignore-generation-config */
    /* resolved by cli_sample_resolve */
    int seed_random;          /* the seed was drawn at random (--seed -1) */
    int from_gc;              /* generation_config.json supplied a setting or an eos id */
} cli_sample_opts;

#define CLI_SAMPLE_OPTS_UNSET {NAN, NAN, NAN, INT_MIN, NULL, NAN, NAN, NAN, INT_MIN, 0, 0, 0}
#define CLI_SAMPLE_OPT_ROWS 10
#define CLI_PENALTY_OPT_ROWS 4

/* option rows (cli_opt[CLI_SAMPLE_OPT_ROWS]): sampling, seed, penalties, --ignore-generation-config */
int cli_sample_opt_rows(void *rows, cli_sample_opts *o);
/* option rows (cli_opt[CLI_PENALTY_OPT_ROWS]): the four penalty flags alone */
int cli_penalty_opt_rows(void *rows, cli_sample_opts *o);

/* --seed text: a non-negative integer, or -1 for a random seed (*random = 1). Prints errors;
 * returns 0 / -1. */
int cli_seed_parse(const char *cmd, const char *text, uint64_t *seed, int *random);

/* -l / --logit-bias TOKEN_ID(+|-)BIAS values (llama.cpp's form: 15043+1, 15043-1, 15043-inf) into
 * ids[i] / bias[i] (room for l->n each) and gp->penalty's bias list, which points at them.
 * Prints errors; returns 0 / -1. */
int cli_logit_bias_parse(const char *cmd, const cli_list *l, int32_t *ids, float *bias, sp_gen_params *gp);

/* Fill gp->sample, gp->penalty and gp->extra_eos: the user's values, else (use_gc and not
 * --ignore-generation-config) model_dir's generation_config.json (its eos ids always join
 * unless ignored), else def. Prints errors; returns 0 / -1. */
int cli_sample_resolve(const char *cmd, cli_sample_opts *o, const char *model_dir, const sp_sample_params *def,
                       int use_gc_sampling, sp_gen_params *gp);

#endif
