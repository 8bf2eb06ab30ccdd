/* genconfig.c — generation_config.json → sp_genconfig (see genconfig.h). All parsing of the
 * file is in sp_genconfig_load, through the shared Hugging Face JSON reader (hfjson.h). */
#include "formats/genconfig.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "formats/hfjson.h"

/* v as an int id (an integer, or a real with an integral value: hfjson reads integers beyond 64
 * bits as reals) */
static int as_id(const json_t *v, int32_t *out) {
    if (!json_is_number(v)) return -1;
    double x = json_number_value(v);
    if (x != floor(x) || x < 0 || x > 2147483647.0) return -1;
    *out = (int32_t)x;
    return 0;
}

int sp_genconfig_load(const char *dir, sp_genconfig *gc, sp_err *err) {
    memset(gc, 0, sizeof *gc);
    char path[4096];
    if (sp_path_join(path, sizeof path, dir, "generation_config.json"))
        return sp_err_set(err, "%s: path too long", dir);
    if (!sp_file_exists(path)) return 0;
    json_t *root = sp_hf_json_load_file(path, 0, err);
    if (!root) return -1;
    int rc = -1;
    if (!json_is_object(root)) {
        sp_err_set(err, "%s: expected a JSON object", path);
        goto done;
    }
    json_t *v = json_object_get(root, "eos_token_id");
    if (v && !json_is_null(v)) {
        if (json_is_array(v)) {
            if (json_array_size(v) > SP_MAX_EOS) {
                sp_err_set(err, "%s: \"eos_token_id\" lists %zu ids, at most %d are supported", path,
                           json_array_size(v), SP_MAX_EOS);
                goto done;
            }
            for (size_t i = 0; i < json_array_size(v); i++)
                if (as_id(json_array_get(v, i), &gc->eos_ids[gc->n_eos++])) {
                    sp_err_set(err, "%s: \"eos_token_id\"[%zu] is not a token id", path, i);
                    goto done;
                }
        } else if (as_id(v, &gc->eos_ids[gc->n_eos++])) {
            sp_err_set(err, "%s: \"eos_token_id\" must be a token id or a list of them", path);
            goto done;
        }
    }
    v = json_object_get(root, "do_sample");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            sp_err_set(err, "%s: \"do_sample\" must be true or false", path);
            goto done;
        }
        gc->has_do_sample = 1;
        gc->do_sample = json_is_true(v);
    }
    struct {
        const char *key;
        int *has;
        float *out;
        double lo, hi;
    } nums[] = {
        {"temperature", &gc->has_temperature, &gc->temperature, 0, 1e6},
        {"top_p", &gc->has_top_p, &gc->top_p, 0, 1},
        {"min_p", &gc->has_min_p, &gc->min_p, 0, 1},
        {"repetition_penalty", &gc->has_repetition_penalty, &gc->repetition_penalty, 1e-6, 1e6},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        v = json_object_get(root, nums[i].key);
        if (!v || json_is_null(v)) continue;
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(x >= nums[i].lo && x <= nums[i].hi)) {
            sp_err_set(err, "%s: \"%s\" must be a number in [%g, %g]", path, nums[i].key, nums[i].lo, nums[i].hi);
            goto done;
        }
        *nums[i].has = 1;
        *nums[i].out = (float)x;
    }
    v = json_object_get(root, "top_k");
    if (v && !json_is_null(v)) {
        int32_t k;
        if (as_id(v, &k)) {
            sp_err_set(err, "%s: \"top_k\" must be an integer >= 0", path);
            goto done;
        }
        gc->has_top_k = 1;
        gc->top_k = k;
    }
    gc->found = 1;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

void sp_genconfig_sampling(const sp_genconfig *gc, float *temperature, int temp_set, int *top_k, int top_k_set,
                           float *top_p, int top_p_set, float *min_p, int min_p_set) {
    if (!gc->found) return;
    if (!(gc->has_do_sample && gc->do_sample)) { /* greedy, as transformers' generate() does */
        if (!temp_set) *temperature = 0.0f;
        return;
    }
    if (!temp_set) *temperature = gc->has_temperature ? gc->temperature : 1.0f;
    if (!top_k_set) *top_k = gc->has_top_k ? gc->top_k : 50;
    if (!top_p_set) *top_p = gc->has_top_p ? gc->top_p : 1.0f;
    if (!min_p_set) *min_p = gc->has_min_p ? gc->min_p : 0.0f;
}
