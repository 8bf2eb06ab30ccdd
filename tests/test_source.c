/* test_source.c — rules the source tree keeps: no function in src/ runs over 80 lines, except one
 * whose one-line comment right above it says a long switch or table is the "clearest form".
 *
 * Each src/ .c file is read with its comments, string and character literals blanked out; a
 * function is a brace block opened at file scope after a ')' (its signature), and its length is
 * counted from the signature's last line to the closing brace. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MAX_LINES 80
#define EXEMPT_MARK "clearest form"

/* text with comments and literals blanked (newlines kept, so line numbers hold) */
static void blank(char *t) {
    for (char *p = t; *p;) {
        if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            for (; p < end; p++)
                if (*p != '\n') *p = ' ';
        } else if (p[0] == '/' && p[1] == '/') {
            for (; *p && *p != '\n'; p++) *p = ' ';
        } else if (*p == '"' || *p == '\'') {
            char q = *p++;
            for (; *p && *p != q && *p != '\n'; p++) {
                if (*p == '\\' && p[1]) *p++ = ' ';
                *p = ' ';
            }
            if (*p == q) p++;
        } else {
            p++;
        }
    }
}

/* the raw line `line` (1-based) of text, copied into out */
static void raw_line(const char *text, int line, char *out, size_t cap) {
    const char *p = text;
    for (int l = 1; l < line && p; l++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    size_t n = 0;
    while (p && p[n] && p[n] != '\n' && n + 1 < cap) n++;
    if (p) memcpy(out, p, n);
    out[n] = 0;
}

/* the long functions of one file (printed when report); returns how many */
static int scan_file(const char *path, int report) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *raw = malloc((size_t)n + 1), *t = malloc((size_t)n + 1);
    size_t got = raw && t ? fread(raw, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!raw || !t) {
        free(raw), free(t);
        return 0;
    }
    raw[got] = 0;
    memcpy(t, raw, got + 1);
    blank(t);
    int depth = 0, line = 1, start = 0, bad = 0;
    char last = 0; /* the last non-space character at file scope */
    int last_line = 0;
    for (char *p = t; *p; p++) {
        if (*p == '\n') line++;
        if (*p == '{') {
            if (depth == 0) start = last == ')' ? last_line : 0;
            depth++;
        } else if (*p == '}') {
            if (--depth == 0 && start) {
                int len = line - start + 1;
                char above[512];
                /* the signature may span lines: look above its first line */
                int first = start;
                while (first > 1) {
                    raw_line(raw, first - 1, above, sizeof above);
                    if (!above[0] || strchr(above, ';') || strchr(above, '}') || strstr(above, "*/")) break;
                    first--;
                }
                raw_line(raw, first - 1, above, sizeof above);
                if (len > MAX_LINES && !strstr(above, EXEMPT_MARK)) {
                    char sig[512];
                    raw_line(raw, start, sig, sizeof sig);
                    if (report) printf("  %s:%d: a function of %d lines (at most %d): %.80s\n", path, start, len, MAX_LINES, sig);
                    bad++;
                }
                start = 0;
            }
            if (depth < 0) depth = 0;
        } else if (depth == 0 && *p != ' ' && *p != '\n' && *p != '\t' && *p != '\r') {
            last = *p;
            last_line = line;
        }
    }
    free(raw), free(t);
    return bad;
}

static int scan_dir(const char *dir, int *files) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t l = strlen(e->d_name);
        if (e->d_type == DT_DIR) bad += scan_dir(path, files);
        else if (l > 2 && !strcmp(e->d_name + l - 2, ".c")) bad += scan_file(path, 1), (*files)++;
    }
    closedir(d);
    return bad;
}

static void test_function_length(void) {
    int files = 0;
    int bad = scan_dir("src", &files);
    CHECK(files > 100, "read %d source files under src/ (run from the repository root)", files);
    CHECK(bad == 0, "%d functions over %d lines", bad, MAX_LINES);
}

/* the scanner itself: a long function is found, an exempt one and a short one are not */
static void test_scanner(void) {
    const char *path = "build/tests/funclen_probe.c";
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fprintf(f, "static int a(int x) {\n    return x; /* { */\n}\n");
    fprintf(f, "/* one case per name: a table is the clearest form */\nstatic int b(int x)\n{\n");
    for (int i = 0; i < 90; i++) fprintf(f, "    x += %d; /* \"}\" */\n", i);
    fprintf(f, "    return x;\n}\nint c(const char *s,\n      int y) {\n");
    for (int i = 0; i < 85; i++) fprintf(f, "    y += s[%d] == '{';\n", i);
    fprintf(f, "    return y;\n}\n");
    fclose(f);
    int bad = scan_file(path, 0);
    CHECK(bad == 1, "the probe has one over-long function, found %d", bad);
    remove(path);
}

int main(void) {
    RUN(test_scanner);
    RUN(test_function_length);
    return harness_done("test_source");
}
