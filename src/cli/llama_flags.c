/* llama_flags.c — the table of llama.cpp flags specula accepts (llama_flags.h). */
#include "llama_flags.h"

#include <stdio.h>
#include <string.h>

typedef enum {
    LF_NONE,  /* takes no value */
    LF_VALUE, /* takes one value */
    LF_ONOFF  /* takes an optional on / off / auto (llama.cpp's newer `-fa on`; older: a bare flag) */
} lf_value;

typedef struct {
    const char *names[3]; /* the spellings llama.cpp accepts (unused ones NULL) */
    lf_value value;
    const char *alias; /* the specula flag it works as, or NULL for a no-op */
    const char *why;   /* a no-op: why it changes nothing here */
} lf_row;

static const lf_row LLAMA_FLAGS[] = {
    /* flags with a specula equivalent */
    {{"--predict"}, LF_VALUE, "-n", NULL},
    {{"-hf", "-hfr", "--hf-repo"}, LF_VALUE, "-m", NULL},
    {{"-hfd", "-hfrd", "--hf-repo-draft"}, LF_VALUE, "-md", NULL},
    {{"--chat-template-file"}, LF_VALUE, "--chat-template", NULL},
    {{"-a"}, LF_VALUE, "--alias", NULL},
    {{"-to"}, LF_VALUE, "--timeout", NULL},
    {{"--draft", "--draft-n"}, LF_VALUE, "--draft-max", NULL},
    {{"--spec-type"}, LF_VALUE, "--spec", NULL},
    {{"-i", "--interactive", "--interactive-first"}, LF_NONE, "-cnv", NULL},
    /* flags that change nothing on a CPU build, or name what is always so here */
    {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, LF_VALUE, NULL, "a CPU build offloads no layers to a GPU"},
    {{"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"}, LF_VALUE, NULL, "a CPU build offloads no layers to a GPU"},
    {{"-dev", "--device"}, LF_VALUE, NULL, "a CPU build has one device"},
    {{"-sm", "--split-mode"}, LF_VALUE, NULL, "a CPU build has one device"},
    {{"-mg", "--main-gpu"}, LF_VALUE, NULL, "a CPU build has one device"},
    {{"-ts", "--tensor-split"}, LF_VALUE, NULL, "a CPU build has one device"},
    {{"-fa", "--flash-attn"}, LF_ONOFF, NULL, "attention is one fused CPU kernel here"},
    {{"--jinja"}, LF_NONE, NULL, "chat templates are always rendered with Jinja here"},
    {{"--no-mmap"}, LF_NONE, NULL, "weights are always memory-mapped read-only here"},
    {{"--mlock"}, LF_NONE, NULL, "weights are not locked in memory here"},
    {{"-no-cnv", "--no-conversation"}, LF_NONE, NULL, "generate is interactive only with -cnv"},
    {{"--no-display-prompt"}, LF_NONE, NULL, "the prompt is never echoed here"},
    {{"-b", "--batch-size"}, LF_VALUE, NULL, "the engine sizes its prefill batches itself"},
    {{"-ub", "--ubatch-size"}, LF_VALUE, NULL, "the engine sizes its prefill batches itself"},
    {{"-tb", "--threads-batch"}, LF_VALUE, NULL, "prefill runs on the -t threads"},
    {{"--numa"}, LF_VALUE, NULL, "threads are not placed by NUMA node here"},
    {{"--no-warmup"}, LF_NONE, NULL, "there is no warmup run here"},
    {{"--color"}, LF_ONOFF, NULL, "output is not colored here"},
    {{"-cd", "--ctx-size-draft"}, LF_VALUE, NULL, "the drafter's context follows the target's here"},
    {{"--metrics"}, LF_NONE, NULL, "serve always answers GET /metrics"},
    {{"--slots"}, LF_NONE, NULL, "serve always answers GET /slots"},
    {{"-cb", "--cont-batching"}, LF_NONE, NULL, "serve always batches continuously"},
    {{"--no-webui"}, LF_NONE, NULL, "serve has no web UI"},
    {{"--reasoning-format"}, LF_VALUE, NULL, "thinking text is returned as the model writes it"},
};

/* --spec-type VALUE (llama.cpp's speculative types) as --spec KIND: "draft-dspark" -> "dspark",
 * "ngram-simple" / "ngram-map-k" / ... -> "ngram"; other values pass unchanged (--spec checks them) */
static const char *spec_type_kind(const char *v) {
    if (!strncmp(v, "draft-", 6) && v[6]) return v + 6;
    if (!strncmp(v, "ngram", 5)) return "ngram";
    return v;
}

static const cli_opt *find_opt(const cli_opt *opts, int n_opts, const char *name) {
    for (int j = 0; j < n_opts; j++)
        if ((opts[j].short_name && !strcmp(opts[j].short_name, name)) ||
            (opts[j].long_name && !strcmp(opts[j].long_name, name)))
            return &opts[j];
    return NULL;
}

static const lf_row *find_row(const char *a, size_t len) {
    for (size_t r = 0; r < sizeof LLAMA_FLAGS / sizeof LLAMA_FLAGS[0]; r++)
        for (int k = 0; k < 3 && LLAMA_FLAGS[r].names[k]; k++)
            if (strlen(LLAMA_FLAGS[r].names[k]) == len && !strncmp(a, LLAMA_FLAGS[r].names[k], len))
                return &LLAMA_FLAGS[r];
    return NULL;
}

static int is_onoff(const char *v) {
    static const char *W[] = {"on", "off", "auto", "true", "false", "1", "0", "enabled", "disabled"};
    for (size_t k = 0; k < sizeof W / sizeof W[0]; k++)
        if (!strcmp(v, W[k])) return 1;
    return 0;
}

int cli_llama_flag(const char *cmd, const cli_opt *opts, int n_opts, int argc, char **argv, int *i, size_t len,
                   const char *eq, const cli_opt **o, const char **val) {
    const char *a = argv[*i];
    const lf_row *row = find_row(a, len);
    *o = NULL, *val = NULL;
    /* only commands that load a model (their table has -m) speak llama.cpp's flags */
    if (!row || !find_opt(opts, n_opts, "-m")) return 0;
    if (row->alias && !(*o = find_opt(opts, n_opts, row->alias))) return 0;
    const char *v = NULL;
    if (eq) {
        v = eq + 1;
    } else if (row->value == LF_VALUE || (row->alias && (*o)->kind != CLI_FLAG)) {
        if (*i + 1 >= argc) return cli_error(cmd, "option '%s' needs a value", a), -1;
        v = argv[++*i];
    } else if (row->value == LF_ONOFF && *i + 1 < argc && is_onoff(argv[*i + 1])) {
        v = argv[++*i];
    }
    if (row->alias) {
        *val = v && !strcmp(row->alias, "--spec") ? spec_type_kind(v) : v;
        return 1;
    }
    fprintf(stderr, "specula: warning: %s: %.*s%s%s ignored: %s\n", cmd, (int)len, a, v ? " " : "", v ? v : "", row->why);
    return 2;
}

void cli_llama_flags_usage(FILE *f) {
    fprintf(f, "\nllama.cpp flags also accepted:");
    for (size_t r = 0; r < sizeof LLAMA_FLAGS / sizeof LLAMA_FLAGS[0]; r++) {
        const lf_row *w = &LLAMA_FLAGS[r];
        if (!w->alias) continue;
        fprintf(f, "%s %s (= %s)", r ? "," : "", w->names[0], w->alias);
    }
    fprintf(f, "\n  and, ignored with a warning: ");
    int first = 1;
    for (size_t r = 0; r < sizeof LLAMA_FLAGS / sizeof LLAMA_FLAGS[0]; r++)
        if (!LLAMA_FLAGS[r].alias) fprintf(f, "%s%s", first ? "" : " ", LLAMA_FLAGS[r].names[0]), first = 0;
    fprintf(f, "\n");
}
