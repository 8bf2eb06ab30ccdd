/* drafter_src.c — the runtime factory of drafters (drafter_kinds.h): a kind's name resolved
 * (given, or detected from the checkpoint's config.json), its shared state opened through the
 * table's hooks, one validation drafter built at open (handed to the first request when it
 * samples the same way, else freed then), and per-request drafters made with the draft temperature applied. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/drafter_kinds.h"
#include "core/core.h"
#include "decode/spec.h"
#include "drafters/mlxbun.h"
#include "formats/hfjson.h"

struct sp_drafter_src {
    const sp_drafter_kind *kind;
    sp_drafter_opts o;         /* kind resolved; strings owned (dir, schedule) */
    char *target_dir;
    sp_drafter_env env;        /* env.o points at o */
    void *state;               /* the kind's shared state (open hook) */
    void *sfx;                 /* KIND+suffix: the suffix store each drafter is wrapped with (else NULL) */
    int with_suffix;
    char name[64];             /* the kind's name, "+suffix" appended when combined */
    sp_drafter *probe;         /* the validation drafter, until a request takes it */
    sp_sample_params probe_for;
    int probe_ctx;
};

static int identity_detect(const sp_drafter_ident *id, const char *path, const char **kind, sp_err *err) {
    for (int i = 0; i < sp_drafter_n_kinds; i++)
        if (sp_drafter_kinds[i].detect && sp_drafter_kinds[i].detect(id)) {
            *kind = sp_drafter_kinds[i].name;
            return 0;
        }
    char known[2048] = "";
    size_t n = 0;
    for (int i = 0; i < sp_drafter_n_kinds && n < sizeof known; i++)
        if (sp_drafter_kinds[i].detect)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s: %s", n ? "; " : "", sp_drafter_kinds[i].name,
                                  sp_drafter_kinds[i].identity);
    return sp_err_set(err, "%s: no drafter kind has model_type \"%s\", architectures[0] \"%s\" (known: %s)", path,
                      id->model_type ? id->model_type : "(none)", id->arch ? id->arch : "(none)", known);
}

int sp_drafter_kind_detect(const char *dir, const char **kind, sp_err *err) {
    *kind = NULL;
    if (!dir) return sp_err_set(err, "drafter kind: no drafter directory given");
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) { /* a GGUF file: a draft model */
        *kind = "draft";
        return 0;
    }
    char path[4096];
    if (sp_path_join(path, sizeof path, dir, "config.json")) return sp_err_set(err, "%s: path too long", dir);
    if (sp_mlxbun_dir(dir)) { /* dspark.json without config.json: mlx-bun's own layout */
        *kind = "mlx-dspark";
        return 0;
    }
    if (!sp_file_exists(path))
        return sp_err_set(err, "%s: no config.json there to tell the drafter's kind (name the kind: %s)", dir,
                          "--spec KIND");
    json_t *root = sp_hf_json_load_file(path, 0, err);
    if (!root) return -1;
    sp_drafter_ident id = {json_string_value(json_object_get(root, "model_type")),
                           json_string_value(json_array_get(json_object_get(root, "architectures"), 0))};
    int rc = identity_detect(&id, path, kind, err);
    json_decref(root);
    return rc;
}

static int same_sampling(const sp_sample_params *a, const sp_sample_params *b) {
    if (sp_sample_is_greedy(a) && sp_sample_is_greedy(b)) return 1; /* argmax drafts, no q */
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p &&
           a->min_p == b->min_p && a->seed == b->seed;
}

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* the kind named by o->kind (KIND+suffix: KIND, *with_suffix set), or detected from o->dir; *k NULL
 * for "none" */
static int resolve_kind(const sp_drafter_opts *o, const sp_drafter_kind **k, int *with_suffix, sp_err *err) {
    const char *name = o->kind;
    char base[64];
    *k = NULL;
    *with_suffix = 0;
    if (!name && !o->dir) return 0;
    if (!name && sp_drafter_kind_detect(o->dir, &name, err)) return -1;
    if (!strcmp(name, "none")) return 0;
    size_t n = strlen(name), ns = strlen("+suffix");
    if (n > ns && n - ns < sizeof base && !strcmp(name + n - ns, "+suffix")) {
        memcpy(base, name, n - ns);
        base[n - ns] = 0;
        name = base;
        *with_suffix = 1;
    }
    if (!(*k = sp_drafter_kind_find(name)) || (*with_suffix && !strcmp((*k)->name, "suffix"))) {
        char names[512];
        return sp_err_set(err, "unknown drafter kind '%s' (%s; any of them but suffix may take +suffix)",
                          o->kind ? o->kind : name,
                          sp_drafter_kind_names(names, sizeof names));
    }
    /* --spec dspark / dflash on a directory in mlx-bun's layout: its own DSpark / DFlash */
    if ((!strcmp((*k)->name, "dspark") || !strcmp((*k)->name, "dflash")) && sp_mlxbun_dir(o->dir))
        *k = sp_drafter_kind_find("mlx-dspark");
    if ((*k)->needs_dir && !o->dir)
        return sp_err_set(err, "drafter kind '%s' needs a drafter directory (-md DIR)", (*k)->name);
    return 0;
}

int sp_drafter_src_open(sp_drafter_src **out, const sp_drafter_opts *o, sp_model *target, const char *target_dir,
                        int n_threads, int max_ctx, sp_err *err) {
    *out = NULL;
    if (!o || !target) return sp_err_set(err, "sp_drafter_src_open: no options or no target");
    sp_model_set_bf16_dot(target, o->bf16_dot);
    if (o->draft_max < 1 || o->draft_max > SP_SPEC_MAX_G)
        return sp_err_set(err, "--draft-max %d out of range 1..%d", o->draft_max, SP_SPEC_MAX_G);
    if (o->draft_min < 0 || o->draft_min > o->draft_max)
        return sp_err_set(err, "--draft-min %d out of range 0..%d (it cannot exceed --draft-max)", o->draft_min,
                          o->draft_max);
    if (!(o->conf_threshold >= 0.0f && o->conf_threshold <= 1.0f))
        return sp_err_set(err, "--conf-threshold %g out of range 0..1 (a probability)", (double)o->conf_threshold);
    const sp_drafter_kind *k;
    int with_suffix;
    if (resolve_kind(o, &k, &with_suffix, err)) return -1;
    if (!k) return 0;
    sp_drafter_src *s = calloc(1, sizeof *s);
    if (!s) return sp_err_set(err, "out of memory");
    s->kind = k;
    s->with_suffix = with_suffix;
    snprintf(s->name, sizeof s->name, "%s%s", k->name, with_suffix ? "+suffix" : "");
    s->o = *o;
    s->o.kind = k->name;
    s->o.dir = dup_str(o->dir);
    s->o.schedule = dup_str(o->schedule);
    s->target_dir = dup_str(target_dir);
    if ((o->dir && !s->o.dir) || (o->schedule && !s->o.schedule) || (target_dir && !s->target_dir)) {
        sp_err_set(err, "out of memory");
        goto fail;
    }
    s->env = (sp_drafter_env){.o = &s->o, .target = target, .target_dir = s->target_dir, .n_threads = n_threads,
                              .max_ctx = max_ctx};
    if (k->open && k->open(&s->state, &s->env, err)) goto fail;
    if (with_suffix && sp_suffix_kind_open(&s->sfx, &s->env, err)) goto fail;
    /* one drafter now, for greedy requests, so a bad checkpoint fails at start */
    sp_sample_params greedy = sp_sample_params_default();
    s->probe = sp_drafter_src_make(s, &greedy, max_ctx, err);
    if (!s->probe) goto fail;
    s->probe_for = greedy;
    if (o->draft_temp > 0) s->probe_for.temperature = o->draft_temp;
    s->probe_ctx = max_ctx;
    *out = s;
    return 0;
fail:
    sp_drafter_src_free(s);
    return -1;
}

sp_drafter *sp_drafter_src_make(sp_drafter_src *s, const sp_sample_params *sample, int max_ctx, sp_err *err) {
    if (!s || !sample) {
        sp_err_set(err, "sp_drafter_src_make: no source or no sampling parameters");
        return NULL;
    }
    sp_sample_params ds = *sample; /* what the drafter draws its q from */
    if (s->o.draft_temp > 0) ds.temperature = s->o.draft_temp;
    if (s->probe && max_ctx == s->probe_ctx && same_sampling(&ds, &s->probe_for)) {
        sp_drafter *d = s->probe;
        s->probe = NULL;
        return d;
    }
    sp_drafter_free(s->probe); /* only the first request may take it */
    s->probe = NULL;
    sp_drafter *d = s->kind->make(s->state, &s->env, &ds, max_ctx, err);
    return s->with_suffix && d ? sp_suffix_wrap(s->sfx, &s->env, d, err) : d;
}

const char *sp_drafter_src_kind(const sp_drafter_src *s) { return s ? s->name : "none"; }

sp_model *sp_drafter_src_take_model(sp_drafter_src *s) {
    if (!s || s->kind->open != sp_draft_model_kind_open) return NULL;
    sp_model *m = s->state;
    s->state = NULL;
    return m;
}

void sp_drafter_src_free(sp_drafter_src *s) {
    if (!s) return;
    sp_drafter_free(s->probe);
    if (s->kind->close && s->state) s->kind->close(s->state);
    if (s->sfx) sp_suffix_kind_close(s->sfx);
    free((char *)s->o.dir);
    free((char *)s->o.schedule);
    free(s->target_dir);
    free(s);
}
