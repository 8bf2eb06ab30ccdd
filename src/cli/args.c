/* args.c — see args.h. */
#include "args.h"
#include "llama_flags.h"

#include "core/core.h"
#include "formats/hub.h"
#include "specula.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLI_STR_(x) #x
#define CLI_STR2_(x) CLI_STR_(x)
#define CLI_LIST_MAX_STR CLI_STR2_(CLI_LIST_MAX)

int cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "specula: error: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

void cli_usage(const char *cmd, const char *usage, const cli_opt *opts, int n_opts, FILE *f) {
    fprintf(f, "usage: specula %s %s\n\noptions:\n", cmd, usage);
    for (int i = 0; i < n_opts; i++) {
        char names[96];
        snprintf(names, sizeof names, "%s%s%s%s%s", opts[i].short_name ? opts[i].short_name : "",
                 opts[i].short_name && opts[i].long_name ? ", " : "",
                 opts[i].long_name ? opts[i].long_name : "", opts[i].metavar ? " " : "",
                 opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-28s %s\n", names, opts[i].help ? opts[i].help : "");
    }
    fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
    for (int i = 0; i < n_opts; i++)
        if (opts[i].short_name && !strcmp(opts[i].short_name, "-m")) {
            cli_llama_flags_usage(f);
            break;
        }
}

static const char *kind_name(cli_kind k) {
    switch (k) {
    case CLI_INT: return "an integer";
    case CLI_U64: return "a non-negative integer";
    case CLI_FLOAT: return "a number";
    case CLI_LIST: return "a value (at most " CLI_LIST_MAX_STR " times)";
    default: return "a value";
    }
}

/* a model path option (-m, -md): a hub name not on disk becomes the path it resolves to
 * (formats/hub.h); the resolved strings live until exit */
static int is_model_opt(const cli_opt *o) {
    return o->kind == CLI_STR && o->short_name && (!strcmp(o->short_name, "-m") || !strcmp(o->short_name, "-md"));
}

static int resolve_model(const char *cmd, const cli_opt *o, const char *text) {
    static char *kept[16];
    static int n_kept;
    char path[4096];
    sp_err err = {0};
    int r = sp_hub_resolve(text, path, sizeof path, &err);
    if (r < 0) return cli_error(cmd, "%s: %s", o->short_name, err.msg), -1;
    if (r == 0) return 0;
    if (n_kept == 16 || !(kept[n_kept] = strdup(path))) return cli_error(cmd, "out of memory"), -1;
    *(const char **)o->dst = kept[n_kept++];
    return 0;
}

/* store text into opt->dst; 0 or -1 (no message) */
static int store(const cli_opt *o, const char *text) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG: *(int *)o->dst = 1; return 0;
    case CLI_STR: *(const char **)o->dst = text; return 0;
    case CLI_LIST: {
        cli_list *l = o->dst;
        if (l->n >= CLI_LIST_MAX) return -1;
        l->v[l->n++] = text;
        return 0;
    }
    case CLI_INT: {
        long v = strtol(text, &end, 10);
        if (!*text || *end || errno || v < INT_MIN || v > INT_MAX) return -1;
        *(int *)o->dst = (int)v;
        return 0;
    }
    case CLI_U64: {
        if (*text == '-') return -1;
        unsigned long long v = strtoull(text, &end, 0);
        if (!*text || *end || errno) return -1;
        *(uint64_t *)o->dst = (uint64_t)v;
        return 0;
    }
    case CLI_FLOAT: {
        float v = strtof(text, &end);
        if (!*text || *end || errno || !isfinite(v)) return -1;
        *(float *)o->dst = v;
        return 0;
    }
    }
    return -1;
}

/* values that parse but that no command accepts: a thread count below 1 (0 and -1 do not mean
 * "all cores" here; leaving -t out does). 0, or -1 with the error printed. */
static int check_value(const char *cmd, const cli_opt *o, const char *val) {
    if (o->kind == CLI_INT && o->long_name && !strcmp(o->long_name, "--threads") && *(const int *)o->dst < 1) {
        cli_error(cmd, "--threads must be at least 1, got '%s' (leave -t out for every core)", val);
        return -1;
    }
    return 0;
}

int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int n_opts, int argc,
              char **argv, const char **positional, int *n_positional, int max_positional) {
    SP_ASSERT(n_opts <= CLI_OPTS_MAX); /* a table that outgrew CLI_OPTS_MAX */
    if (n_positional) *n_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_usage(cmd, usage, opts, n_opts, stdout);
            return 1;
        }
        if (!strcmp(a, "--version")) {
            printf("specula %s\n", SPECULA_VERSION);
            return 1;
        }
        if (a[0] != '-' || !a[1] || !strcmp(a, "--")) { /* positional ("-" alone is one too) */
            if (!strcmp(a, "--") && i + 1 < argc) a = argv[++i];
            if (!positional || *n_positional >= max_positional) {
                cli_error(cmd, "unexpected argument '%s' (see specula %s --help)", a, cmd);
                return -1;
            }
            positional[(*n_positional)++] = a;
            continue;
        }
        /* --name=value */
        const char *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = NULL;
        for (int j = 0; j < n_opts && !o; j++) {
            const char *s = opts[j].short_name, *l = opts[j].long_name;
            if ((s && strlen(s) == len && !strncmp(a, s, len)) || (l && strlen(l) == len && !strncmp(a, l, len)))
                o = &opts[j];
        }
        const char *val = NULL;
        int llama = 0;
        if (!o) { /* one of llama.cpp's flags: an alias of a row of ours, or a no-op */
            llama = cli_llama_flag(cmd, opts, n_opts, argc, argv, &i, len, eq, &o, &val);
            if (llama < 0) return -1;
            if (llama == 2) continue;
        }
        if (!o) {
            cli_error(cmd, "unknown option '%.*s' (see specula %s --help)", (int)len, a, cmd);
            return -1;
        }
        if (llama) {
            if (o->kind == CLI_FLAG && val) {
                cli_error(cmd, "option '%.*s' takes no value", (int)len, a);
                return -1;
            }
        } else if (o->kind == CLI_FLAG) {
            if (eq) {
                cli_error(cmd, "option '%.*s' takes no value", (int)len, a);
                return -1;
            }
        } else if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            cli_error(cmd, "option '%s' needs %s %s", a, kind_name(o->kind), o->metavar ? o->metavar : "");
            return -1;
        }
        if (store(o, val)) {
            cli_error(cmd, "option '%.*s' expects %s, got '%s'", (int)len, a, kind_name(o->kind), val);
            return -1;
        }
        if (check_value(cmd, o, val)) return -1;
        if (is_model_opt(o) && resolve_model(cmd, o, val)) return -1;
    }
    return 0;
}

void cli_unescape(char *s) {
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1]) {
            const char *from = "ntr\\\"'", *to = "\n\t\r\\\"'";
            const char *k = strchr(from, r[1]);
            if (k) {
                *w++ = to[k - from];
                r++;
                continue;
            }
        }
        *w++ = *r;
    }
    *w = 0;
}

int cli_parse_ids(const char *cmd, const char *what, const char *s, int32_t **out, int *n) {
    *out = NULL;
    *n = 0;
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return cli_error(cmd, "out of memory"), -1;
    int k = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            cli_error(cmd, "%s: expected a comma-separated list of token ids >= 0, got '%s'", what, s);
            free(ids);
            return -1;
        }
        ids[k++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (!*p) break;
        if (*p != ',') {
            cli_error(cmd, "%s: unexpected '%c' in token id list '%s'", what, *p, s);
            free(ids);
            return -1;
        }
        p++;
    }
    *out = ids;
    *n = k;
    return 0;
}
