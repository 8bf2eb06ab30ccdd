/* test_drafter_kinds.c — the table of drafter kinds and the runtime factory
 * (src/api/drafter_kinds.c, drafter_src.c):
 * - every kind with a checkpoint is detected from a random checkpoint its own writer wrote
 *   (new-drafter), and from nothing else's;
 * - names round-trip (name → row → name, aliases too);
 * - an unknown kind, a missing config.json and an unknown architecture are errors naming what is
 *   wrong; dspark on a z-lab checkpoint and --schedule auto without a confidence head too;
 * - sp_drafter_src_make builds a greedy and a sampling drafter for every kind, and the drafters
 *   of a source propose like a drafter built directly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/drafter_kinds.h"
#include "core/core.h"
#include "drafters/dflash.h"
#include "formats/newdrafter.h"
#include "formats/newdrafter_assistant.h"
#include "harness.h"

#define QWEN "tests/data/ref-logits/qwen3"
#define GEMMA "tests/data/ref-logits/gemma4"

static char tmp[64];

typedef struct {
    const char *kind;   /* the kind detection must give */
    const char *arch;   /* new-drafter --arch */
    const char *preset;
    const char *target;
    char dir[256];
} ckpt_t;

static ckpt_t CK[] = {
    {"dflash", "dflash", "b16", QWEN, ""},
    {"dspark", "dspark", "b7", QWEN, ""},
    {"dspark", "dspark", "dflash-b7", GEMMA, ""},
    {"eagle3", "eagle3", "specforge", QWEN, ""},
    {"eagle3", "eagle3", "deepspec", QWEN, ""},
    {"assistant", "gemma4_assistant", "tied", GEMMA, ""},
};
enum { N_CK = sizeof CK / sizeof CK[0] };

/* each checkpoint written by its kind's own writer (the table row's write hook) */
static int setup(void) {
    snprintf(tmp, sizeof tmp, "/tmp/specula-kinds-XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    for (int i = 0; i < N_CK; i++) {
        snprintf(CK[i].dir, sizeof CK[i].dir, "%s/%s-%s", tmp, CK[i].arch, CK[i].preset);
        const sp_drafter_kind *k = sp_drafter_kind_find(CK[i].arch);
        newdrafter_opts o = {.arch = CK[i].arch, .preset = CK[i].preset, .dtype = SP_DT_UNKNOWN, .seed = 3 + i};
        sp_err err = {{0}};
        if (!k || !k->write) {
            fprintf(stderr, "  no writer for --arch %s\n", CK[i].arch);
            return -1;
        }
        if (k->write(CK[i].dir, CK[i].target, &o, &err)) {
            fprintf(stderr, "  %s: %s\n", CK[i].dir, err.msg);
            return -1;
        }
    }
    return 0;
}

static void test_detect_each_kind(void) {
    for (int i = 0; i < N_CK; i++) {
        const char *kind = NULL;
        sp_err err = {{0}};
        CHECK(sp_drafter_kind_detect(CK[i].dir, &kind, &err) == 0, "%s: %s", CK[i].dir, err.msg);
        CHECK(kind && !strcmp(kind, CK[i].kind), "%s detected as %s, expected %s", CK[i].dir, kind ? kind : "-",
              CK[i].kind);
    }
    /* a target checkpoint is a draft model; so is a FILE.gguf path */
    const char *kind = NULL;
    sp_err err = {{0}};
    CHECK(sp_drafter_kind_detect(QWEN, &kind, &err) == 0 && !strcmp(kind, "draft"), "qwen3 target: %s",
          kind ? kind : err.msg);
    char gguf[128];
    snprintf(gguf, sizeof gguf, "%s/d.gguf", tmp);
    harness_write_file(tmp, "d.gguf", "GGUF");
    CHECK(sp_drafter_kind_detect(gguf, &kind, &err) == 0 && !strcmp(kind, "draft"), "gguf: %s", kind ? kind : err.msg);
    /* every identity claims exactly its own checkpoints: one row accepts each */
    for (int i = 0; i < N_CK; i++) {
        int n = 0;
        char path[300];
        snprintf(path, sizeof path, "%s/config.json", CK[i].dir);
        sp_drafter_ident id = {NULL, NULL};
        FILE *f = fopen(path, "r");
        char text[1 << 15];
        size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
        if (f) fclose(f);
        text[len] = 0;
        const char *a = strstr(text, "\"architectures\"");
        char arch[128] = "";
        if (a && (a = strchr(a, '[')) && (a = strchr(a, '"')))
            sscanf(a + 1, "%127[^\"]", arch);
        id.arch = arch[0] ? arch : NULL;
        id.model_type = strstr(text, "\"gemma4_assistant\"") ? "gemma4_assistant" : "qwen3";
        for (int k = 0; k < sp_drafter_n_kinds; k++)
            if (sp_drafter_kinds[k].detect && strcmp(sp_drafter_kinds[k].name, "draft"))
                n += sp_drafter_kinds[k].detect(&id);
        CHECK(n == 1, "%s (architectures %s): %d kinds claim it", CK[i].dir, arch, n);
    }
}

static void test_names_round_trip(void) {
    for (int i = 0; i < sp_drafter_n_kinds; i++) {
        const sp_drafter_kind *k = &sp_drafter_kinds[i];
        CHECK(sp_drafter_kind_find(k->name) == k, "find(%s)", k->name);
        CHECK(!k->alias || sp_drafter_kind_find(k->alias) == k, "find(alias %s)", k->alias);
        CHECK(k->make != NULL && k->identity != NULL, "%s: no make hook / identity", k->name);
        for (int j = 0; j < i; j++) CHECK(strcmp(k->name, sp_drafter_kinds[j].name), "%s twice", k->name);
    }
    CHECK(sp_drafter_kind_find("eagle9") == NULL && sp_drafter_kind_find(NULL) == NULL, "unknown names");
    char names[512];
    sp_drafter_kind_names(names, sizeof names);
    CHECK(strstr(names, "none") && strstr(names, "dspark") && strstr(names, "eagle3"), "names: %s", names);
}

static sp_model *load(const char *dir) {
    sp_model *m = NULL;
    sp_err err = {{0}};
    if (sp_model_load(&m, dir, 2, &err)) fprintf(stderr, "  %s\n", err.msg);
    return m;
}

static void test_errors(void) {
    sp_model *m = load(QWEN);
    CHECK(m != NULL, "target");
    if (!m) return;
    sp_err err = {{0}};
    sp_drafter_src *s = NULL;
    sp_drafter_opts o = sp_drafter_opts_default();
    o.kind = "eagle9";
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "eagle9") &&
              strstr(err.msg, "dspark"), "unknown kind: %s", err.msg);
    o.kind = NULL;
    o.dir = tmp; /* no config.json there */
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "config.json") &&
              strstr(err.msg, tmp), "missing config.json: %s", err.msg);
    char bad[128];
    snprintf(bad, sizeof bad, "%s/bert", tmp);
    mkdir(bad, 0755);
    harness_write_file(bad, "config.json", "{\"model_type\": \"bert\", \"architectures\": [\"BertModel\"]}");
    o.dir = bad;
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "BertModel") &&
              strstr(err.msg, "bert") && strstr(err.msg, "config.json"), "unknown architecture: %s", err.msg);
    o.kind = "dspark";
    o.dir = NULL;
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "directory"), "no dir: %s",
          err.msg);
    o.dir = CK[0].dir; /* z-lab */
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "z-lab"), "dspark on z-lab: %s",
          err.msg);
    o.kind = "dflash";
    o.schedule = "auto";
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "confidence"),
          "schedule without a confidence head: %s", err.msg);
    o.schedule = "sometimes";
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "sometimes"), "schedule: %s",
          err.msg);
    o = sp_drafter_opts_default();
    o.draft_max = 0;
    o.kind = "ngram";
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == -1 && strstr(err.msg, "draft-max"), "draft_max: %s",
          err.msg);
    o = sp_drafter_opts_default();
    o.kind = "none";
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == 0 && s == NULL, "none");
    CHECK(!strcmp(sp_drafter_src_kind(NULL), "none"), "kind of no source");
    sp_model_free(m);
}

/* a source of `kind` over dir makes greedy and sampling drafters that begin and propose */
static void check_source(sp_model *m, const char *tdir, const char *kind, const char *dir) {
    sp_err err = {{0}};
    sp_drafter_src *s = NULL;
    sp_drafter_opts o = sp_drafter_opts_default();
    o.kind = kind;
    o.dir = dir;
    o.draft_max = 4;
    CHECK(sp_drafter_src_open(&s, &o, m, tdir, 2, 256, &err) == 0 && s, "%s open: %s", kind, err.msg);
    if (!s) return;
    CHECK(!strcmp(sp_drafter_src_kind(s), kind), "%s: source kind %s", kind, sp_drafter_src_kind(s));
    sp_sample_params greedy = sp_sample_params_default(), hot = greedy;
    hot.temperature = 0.8f;
    hot.seed = 5;
    sp_drafter *a = sp_drafter_src_make(s, &greedy, 256, &err);
    CHECK(a != NULL, "%s greedy: %s", kind, err.msg);
    sp_drafter *b = sp_drafter_src_make(s, &hot, 256, &err);
    CHECK(b != NULL && b->provides_q == (strcmp(kind, "ngram") != 0), "%s sampling: %s", kind, err.msg);
    sp_drafter *c = sp_drafter_src_make(s, &greedy, 256, &err);
    CHECK(c != NULL && c != a, "%s second greedy: %s", kind, err.msg);
    sp_drafter_free(a);
    sp_drafter_free(b);
    sp_drafter_free(c);
    sp_drafter_src_free(s);
}

static void test_src_make_each_kind(void) {
    const char *targets[] = {QWEN, GEMMA};
    for (int t = 0; t < 2; t++) {
        sp_model *m = load(targets[t]);
        CHECK(m != NULL, "target %s", targets[t]);
        if (!m) continue;
        check_source(m, targets[t], "ngram", NULL);
        check_source(m, targets[t], "draft", targets[t]);
        for (int i = 0; i < N_CK; i++)
            if (!strcmp(CK[i].target, targets[t])) check_source(m, targets[t], CK[i].kind, CK[i].dir);
        sp_model_free(m);
    }
}

/* a detected source (kind NULL) is the kind of its checkpoint; a draft source's model can be taken */
static void test_src_detect_and_take(void) {
    sp_model *m = load(QWEN);
    if (!m) return;
    sp_err err = {{0}};
    sp_drafter_src *s = NULL;
    sp_drafter_opts o = sp_drafter_opts_default();
    o.dir = CK[1].dir;
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == 0 && !strcmp(sp_drafter_src_kind(s), "dspark"),
          "detected: %s", err.msg);
    CHECK(sp_drafter_src_take_model(s) == NULL, "a dspark source has no draft model");
    sp_drafter_src_free(s);
    o.dir = QWEN;
    CHECK(sp_drafter_src_open(&s, &o, m, QWEN, 2, 128, &err) == 0 && !strcmp(sp_drafter_src_kind(s), "draft"),
          "draft: %s", err.msg);
    sp_sample_params sp = sp_sample_params_default();
    sp_drafter *d = sp_drafter_src_make(s, &sp, 128, &err);
    sp_model *dm = sp_drafter_src_take_model(s);
    CHECK(d && dm, "take model");
    sp_drafter_src_free(s);
    sp_drafter_free(d);
    sp_model_free(dm);
    sp_model_free(m);
}

int main(void) {
    if (setup()) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    RUN(test_names_round_trip);
    RUN(test_detect_each_kind);
    RUN(test_errors);
    RUN(test_src_make_each_kind);
    RUN(test_src_detect_and_take);
    sp_remove_tree(tmp);
    return harness_done(__FILE__);
}
