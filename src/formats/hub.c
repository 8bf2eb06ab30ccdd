/* hub.c — see hub.h. */
#include "hub.h"

#include "core/core.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define HUB_PART 256

typedef struct {
    char org[HUB_PART], name[HUB_PART], tag[HUB_PART], rev[HUB_PART];
    char tried[900]; /* "; "-separated paths tried so far */
} hub_req;

static int name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; }

/* copy [s, s+n) into dst when it is a non-empty run of name characters not starting with '.' */
static int take(char *dst, const char *s, size_t n) {
    if (!n || n >= HUB_PART || s[0] == '.') return -1;
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i])) return -1;
    memcpy(dst, s, n);
    dst[n] = 0;
    return 0;
}

/* ORG/NAME[:TAG][@REV] -> r; -1 when s is not of that form */
static int parse_name(const char *s, hub_req *r) {
    memset(r, 0, sizeof *r);
    const char *slash = strchr(s, '/');
    if (!slash || strchr(slash + 1, '/')) return -1;
    const char *at = strchr(slash, '@'), *end = at ? at : s + strlen(s);
    const char *colon = memchr(slash, ':', (size_t)(end - slash));
    const char *name_end = colon ? colon : end;
    if (take(r->org, s, (size_t)(slash - s)) || take(r->name, slash + 1, (size_t)(name_end - slash - 1))) return -1;
    if (colon && take(r->tag, colon + 1, (size_t)(end - colon - 1))) return -1;
    if (at && take(r->rev, at + 1, strlen(at + 1))) return -1;
    return 0;
}

static void tried(hub_req *r, const char *path) {
    size_t n = strlen(r->tried);
    snprintf(r->tried + n, sizeof r->tried - n, "%s%s", n ? "; " : "", path);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* $A, else $B/suffix_b, else $HOME/suffix_home into out; 0, or -1 when none is set */
static int cache_dir(char *out, size_t cap, const char *a, const char *b, const char *suffix_b, const char *suffix_home) {
    const char *v = getenv(a);
    if (v && *v) return snprintf(out, cap, "%s", v) < (int)cap ? 0 : -1;
    v = b ? getenv(b) : NULL;
    if (v && *v) return snprintf(out, cap, "%s/%s", v, suffix_b) < (int)cap ? 0 : -1;
    v = getenv("HOME");
    if (v && *v) return snprintf(out, cap, "%s/%s", v, suffix_home) < (int)cap ? 0 : -1;
    return -1;
}

static int contains_nocase(const char *s, const char *sub) {
    size_t n = strlen(sub);
    for (; *s; s++)
        if (!strncasecmp(s, sub, n)) return 1;
    return !n;
}

/* the first file name (in byte order) of dir that starts with prefix, ends in .gguf and
 * contains tag after the prefix (any when tag is empty); 0 and out = dir/file, or -1 */
static int pick_gguf(const char *dir, const char *prefix, const char *tag, char *out, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char best[HUB_PART * 2] = "";
    size_t np = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < np + 5 || strncmp(e->d_name, prefix, np) || strcmp(e->d_name + n - 5, ".gguf")) continue;
        if (!contains_nocase(e->d_name + np, tag) || n >= sizeof best) continue;
        if (!best[0] || strcmp(e->d_name, best) < 0) memcpy(best, e->d_name, n + 1);
    }
    closedir(d);
    if (!best[0]) return -1;
    return snprintf(out, cap, "%s/%s", dir, best) < (int)cap ? 0 : -1;
}

/* read the revision hash named by refs/REF into hash; 0, or -1 */
static int read_ref(const char *repo, const char *ref, char *hash, size_t cap) {
    char p[2048];
    snprintf(p, sizeof p, "%s/refs/%s", repo, ref);
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    size_t n = fread(hash, 1, cap - 1, f);
    fclose(f);
    while (n && isspace((unsigned char)hash[n - 1])) n--;
    hash[n] = 0;
    return n && !strchr(hash, '/') && strcmp(hash, "..") ? 0 : -1;
}

/* the Hugging Face hub cache: 1 found, 0 not there (paths recorded in r->tried) */
static int from_hf(hub_req *r, char *out, size_t cap) {
    char base[1024], repo[1600], hash[HUB_PART], snap[2048], cfg[2600];
    if (cache_dir(base, sizeof base, "HF_HUB_CACHE", "HF_HOME", "hub", ".cache/huggingface/hub")) return 0;
    snprintf(repo, sizeof repo, "%s/models--%s--%s", base, r->org, r->name);
    const char *ref = r->rev[0] ? r->rev : "main";
    if (read_ref(repo, ref, hash, sizeof hash)) {
        if (!r->rev[0]) {
            snprintf(snap, sizeof snap, "%s/refs/main", repo);
            tried(r, snap);
            return 0;
        }
        snprintf(hash, sizeof hash, "%s", r->rev); /* @REV names a snapshot itself */
    }
    snprintf(snap, sizeof snap, "%s/snapshots/%s", repo, hash);
    if (!is_dir(snap)) return tried(r, snap), 0;
    snprintf(cfg, sizeof cfg, "%s/config.json", snap);
    if (!r->tag[0] && is_file(cfg)) return snprintf(out, cap, "%s", snap) < (int)cap;
    if (!pick_gguf(snap, "", r->tag, out, cap)) return 1;
    if (r->tag[0]) snprintf(cfg, sizeof cfg, "%s/*%s*.gguf", snap, r->tag);
    tried(r, cfg);
    return 0;
}

/* llama.cpp's cache of downloaded GGUF files: 1 found, 0 not there */
static int from_llama(hub_req *r, char *out, size_t cap) {
    char base[1024], prefix[HUB_PART * 2 + 2], pat[2048];
    if (cache_dir(base, sizeof base, "LLAMA_CACHE", "XDG_CACHE_HOME", "llama.cpp", ".cache/llama.cpp")) return 0;
    snprintf(prefix, sizeof prefix, "%s_%s_", r->org, r->name);
    if (!pick_gguf(base, prefix, r->tag, out, cap)) return 1;
    snprintf(pat, sizeof pat, "%s/%s*%s%s.gguf", base, prefix, r->tag, r->tag[0] ? "*" : "");
    tried(r, pat);
    return 0;
}

int sp_hub_resolve(const char *name, char *out, size_t cap, sp_err *err) {
    struct stat st;
    hub_req *r = calloc(1, sizeof *r);
    if (!r) return sp_err_set(err, "out of memory");
    int rc = 0;
    if (stat(name, &st) == 0 || parse_name(name, r)) {
        rc = snprintf(out, cap, "%s", name) < (int)cap ? 0 : sp_err_set(err, "model path too long");
    } else if (from_hf(r, out, cap) || (!r->rev[0] && from_llama(r, out, cap))) {
        rc = 1;
    } else {
        sp_err_set(err, "model '%s': no such file or directory, nor a model in a local cache; tried: %s; %s", name,
                   name, r->tried);
        rc = -1;
    }
    free(r);
    return rc;
}
