/* kind_src_shim.c — the drafter source over the existing constructors (kind.h). */
#include "drafters/kind.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "decode/schedule.h"
#include "decode/spec.h"
#include "drafters/assistant.h"
#include "drafters/dflash.h"
#include "drafters/drafters.h"
#include "drafters/eagle3.h"
#include "formats/hfjson.h"

struct sp_drafter_src {
    sp_drafter_opts o;
    char *kind, *dir, *target_dir;
    sp_model *target, *draft_model;
    sp_drafter *proto;
};

sp_drafter_opts sp_drafter_opts_default(void) {
    return (sp_drafter_opts){NULL, NULL, 8, 0, 1, 4, 0.0f, 0.0f, NULL, 0};
}

int sp_drafter_kind_detect(const char *dir, const char **kind, sp_err *err) {
    char path[4096];
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) return *kind = "draft", 0;
    if (sp_path_join(path, sizeof path, dir, "config.json") || !sp_file_exists(path))
        return sp_err_set(err, "-md %s: no config.json there (give --spec KIND for a drafter without one)", dir);
    json_t *root = sp_hf_json_load_file(path, 0, err);
    if (!root) return -1;
    const char *a = json_string_value(json_array_get(json_object_get(root, "architectures"), 0));
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (mt && !strcmp(mt, "gemma4_assistant")) *kind = "assistant";
    else if (!a) *kind = "draft";
    else if (strstr(a, "DSpark")) *kind = "dspark";
    else if (strstr(a, "Eagle3")) *kind = "eagle3";
    else if (strstr(a, "DFlash")) *kind = "dflash";
    else if (strstr(a, "Assistant")) *kind = "assistant";
    else *kind = "draft";
    json_decref(root);
    return 0;
}

static sp_sample_params draft_sample(const sp_drafter_src *s, const sp_sample_params *sample) {
    sp_sample_params ds = *sample;
    if (s->o.draft_temp > 0) ds.temperature = s->o.draft_temp;
    return ds;
}

static sp_drafter *make_dflash(sp_drafter_src *s, const sp_sample_params *sample, sp_err *err) {
    const sp_drafter_opts *o = &s->o;
    sp_dflash_opts dfo = sp_dflash_opts_default();
    dfo.no_draft_temps = o->draft_temp > 0;
    dfo.max_drafts = o->draft_max;
    dfo.clamp_to_block = 1;
    dfo.conf_threshold = o->conf_threshold;
    sp_sps_table sps;
    if (o->schedule && strcmp(o->schedule, "none")) {
        if (strcmp(o->schedule, "auto")) return sp_err_set(err, "--schedule %s: expected auto or none", o->schedule), NULL;
        if (o->conf_threshold > 0)
            return sp_err_set(err, "give either --conf-threshold or --schedule auto, not both"), NULL;
        sp_drafter *probe = sp_drafter_dflash(s->dir, s->target, sample, &dfo, err);
        sp_dflash_info pi;
        int has_conf = probe && !sp_dflash_info_get(probe, &pi) && pi.has_conf;
        sp_drafter_free(probe);
        if (!probe) return NULL;
        if (!has_conf)
            return sp_err_set(err, "%s: --schedule auto needs a drafter with a confidence head (DSpark)", s->dir), NULL;
        char path[4300];
        int b = o->draft_max + 1 <= SP_SPS_MAX ? o->draft_max + 1 : SP_SPS_MAX;
        if (sp_sps_cached(s->target, s->target_dir, b, &sps, path, sizeof path, err)) return NULL;
        sp_log(SP_LOG_INFO, "verify cost table (SPS by width) from %s", path);
        dfo.policy = SP_VERIFY_SCHEDULE;
        dfo.sps = &sps;
    }
    sp_drafter *d = sp_drafter_dflash(s->dir, s->target, sample, &dfo, err);
    sp_dflash_info info;
    if (d && !strcmp(s->kind, "dspark") && (sp_dflash_info_get(d, &info) || info.kind != SP_DFLASH_DSPARK)) {
        sp_drafter_free(d);
        return sp_err_set(err, "%s is a z-lab DFlash drafter: use --spec dflash", s->dir), NULL;
    }
    return d;
}

sp_drafter *sp_drafter_src_make(sp_drafter_src *s, const sp_sample_params *sample, int max_ctx, sp_err *err) {
    sp_sample_params ds = draft_sample(s, sample);
    const char *k = s->kind;
    if (!strcmp(k, "ngram")) return sp_drafter_ngram(s->o.ngram_min, s->o.ngram_max, err);
    if (!strcmp(k, "draft"))
        return sp_drafter_draft_model(s->draft_model, s->target, s->dir, s->target_dir, max_ctx, &ds, err);
    if (!strcmp(k, "assistant")) return sp_drafter_assistant(s->dir, s->target, &ds, err);
    if (!strcmp(k, "eagle3")) return sp_drafter_eagle3(s->dir, s->target, &ds, s->o.draft_max, err);
    if (s->proto) return sp_dflash_clone(s->proto, &ds, err);
    return make_dflash(s, &ds, err);
}

const char *sp_drafter_src_kind(const sp_drafter_src *s) { return s->kind; }

void sp_drafter_src_free(sp_drafter_src *s) {
    if (!s) return;
    sp_drafter_free(s->proto);
    sp_model_free(s->draft_model);
    free(s->kind), free(s->dir), free(s->target_dir);
    free(s);
}

static const char *const KINDS[] = {"ngram", "draft", "assistant", "dflash", "dspark", "eagle3"};

int sp_drafter_src_open(sp_drafter_src **out, const sp_drafter_opts *o, sp_model *target, const char *target_dir,
                        int n_threads, int max_ctx, sp_err *err) {
    *out = NULL;
    if (o->draft_max < 1 || o->draft_max > SP_SPEC_MAX_G)
        return sp_err_set(err, "--draft-max %d out of range 1..%d", o->draft_max, SP_SPEC_MAX_G);
    const char *kind = o->kind;
    if (!kind && !o->dir) return 0;
    if (!kind && sp_drafter_kind_detect(o->dir, &kind, err)) return -1;
    if (!strcmp(kind, "none")) return 0;
    int known = 0;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) known |= !strcmp(kind, KINDS[i]);
    if (!known)
        return sp_err_set(err, "--spec %s: unknown drafter (none, ngram, draft, assistant, dflash, dspark, eagle3)", kind);
    if (strcmp(kind, "ngram") && !o->dir) return sp_err_set(err, "--spec %s needs -md DRAFTER_DIR", kind);
    sp_drafter_src *s = calloc(1, sizeof *s);
    if (!s) return sp_err_set(err, "out of memory");
    s->o = *o;
    s->kind = strdup(kind), s->dir = o->dir ? strdup(o->dir) : NULL, s->target_dir = strdup(target_dir);
    s->target = target;
    s->o.kind = s->kind, s->o.dir = s->dir;
    if (!s->kind || (o->dir && !s->dir) || !s->target_dir) {
        sp_drafter_src_free(s);
        return sp_err_set(err, "out of memory");
    }
    if (!strcmp(kind, "draft") && sp_model_load(&s->draft_model, s->dir, n_threads, err)) goto fail;
    sp_sample_params greedy = sp_sample_params_default();
    sp_drafter *probe = sp_drafter_src_make(s, &greedy, max_ctx, err); /* a bad -md fails now */
    if (!probe) goto fail;
    sp_dflash_info info;
    if (sp_dflash_info_get(probe, &info) == 0) s->proto = probe; /* requests clone it */
    else sp_drafter_free(probe);
    *out = s;
    return 0;
fail:
    sp_drafter_src_free(s);
    return -1;
}
