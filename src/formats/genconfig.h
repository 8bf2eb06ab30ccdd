/* genconfig.h — a Hugging Face generation_config.json: the end-of-generation ids and the
 * default sampling settings a checkpoint ships (docs/generation-config.md).
 *
 * Read fields (each optional): eos_token_id (an integer or a list), do_sample, temperature,
 * top_p, top_k, min_p, repetition_penalty. Other keys (max_length, bos/pad ids, cache settings…)
 * are ignored. Integers of any size and other valid JSON that jansson rejects by default are
 * accepted; a field of the wrong type is an error naming it. */
#ifndef SPECULA_GENCONFIG_H
#define SPECULA_GENCONFIG_H

#include <stdint.h>

#include "specula.h"

typedef struct {
    int found;                     /* 1: DIR/generation_config.json exists (and was read) */
    int32_t eos_ids[SP_MAX_EOS];   /* eos_token_id, int or list (extra entries are an error) */
    int n_eos;
    int has_do_sample, do_sample;
    int has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    float temperature, top_p, min_p, repetition_penalty;
    int top_k;
} sp_genconfig;

/* Read DIR/generation_config.json into *gc (zeroed first; found = 0 when there is none, which
 * is not an error). Returns 0, or -1 with err naming the file and field. */
int sp_genconfig_load(const char *dir, sp_genconfig *gc, sp_err *err);

/* The sampling a checkpoint asks for, Hugging Face's way: do_sample false or absent → greedy
 * (temperature 0); do_sample true → temperature (default 1), top_k (default 50), top_p
 * (default 1), min_p (default 0). Writes only the fields whose *_set flag is 0 (the user's own
 * settings win). */
void sp_genconfig_sampling(const sp_genconfig *gc, float *temperature, int temp_set, int *top_k, int top_k_set,
                           float *top_p, int top_p_set, float *min_p, int min_p_set);

#endif
