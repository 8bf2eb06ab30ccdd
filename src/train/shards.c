/* shards.c — write and read regenerated hidden-state shards (layout in shards.h). */
#include "train/shards.h"

#include <dirent.h>
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

void sp_tr_shard_dir(char *out, size_t cap, const char *dir, int index) {
    snprintf(out, cap, "%s/shard_%05d", dir, index);
}

static int read_shard_json(const char *shard_dir, json_t **out, sp_err *err) {
    char path[4096];
    sp_path_join(path, sizeof path, shard_dir, "shard.json");
    char *text = NULL;
    size_t n = 0;
    if (sp_read_file(path, &text, &n, err)) return -1;
    json_error_t je;
    json_t *j = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return sp_err_set(err, "%s: %s", path, j ? "not a JSON object" : je.text);
    }
    *out = j;
    return 0;
}

int sp_tr_shard_complete(const char *shard_dir) {
    json_t *j = NULL;
    if (read_shard_json(shard_dir, &j, NULL)) return 0;
    json_decref(j);
    char path[4096];
    sp_path_join(path, sizeof path, shard_dir, "model.safetensors");
    return sp_file_exists(path);
}

const char *sp_tr_shard_layout_name(tr_shard_layout l) {
    return l == TR_SHARDS_MLXBUN_V1 ? "mlx-bun v1" : l == TR_SHARDS_MLXBUN_DFLASH ? "mlx-bun DFlash" : "specula";
}

/* the tensors of one shard in layout l (hidden: [L, H]; hidden_ml: [L, m·H]) into dir/model.safetensors */
static int write_tensors(const char *shard_dir, tr_shard_layout l, int n_seq, int64_t L, const int32_t *seq_lens,
                         const int32_t *resp_starts, const int32_t *ids, const uint16_t *hidden,
                         const uint16_t *hidden_ml, int H, int m, sp_err *err) {
    st_writer *w = sp_st_writer_create();
    if (!w) return sp_err_set(err, "%s: out of memory", shard_dir);
    int64_t sh_h[2] = {L, H}, sh_ml[2] = {L, (int64_t)m * H}, sh_l[1] = {L}, sh_n[1] = {n_seq};
    int rc = 0;
    if (l != TR_SHARDS_MLXBUN_DFLASH) rc = sp_st_writer_add_ref(w, "hidden", SP_DT_BF16, 2, sh_h, hidden, err);
    if (!rc && l != TR_SHARDS_MLXBUN_V1)
        rc = sp_st_writer_add_ref(w, "hidden_ml", SP_DT_BF16, 2, sh_ml, hidden_ml, err);
    if (!rc)
        rc = sp_st_writer_add_ref(w, "ids", SP_DT_I32, 1, sh_l, ids, err) ||
             sp_st_writer_add_ref(w, "seq_lens", SP_DT_I32, 1, sh_n, seq_lens, err);
    if (!rc && l != TR_SHARDS_MLXBUN_V1)
        rc = sp_st_writer_add_ref(w, "resp_starts", SP_DT_I32, 1, sh_n, resp_starts, err);
    if (!rc && l != TR_SHARDS_SPECULA) rc = sp_st_writer_set_metadata(w, "format", "mlx", err);
    char path[4096];
    sp_path_join(path, sizeof path, shard_dir, "model.safetensors");
    if (!rc) rc = sp_st_writer_save(w, path, err);
    sp_st_writer_free(w);
    return rc ? -1 : 0;
}

/* model.safetensors, then shard.json (v1: no "m" / "tapLayers"); each atomic */
static int write_shard(const char *shard_dir, tr_shard_layout l, int n_seq, const int32_t *seq_lens,
                       const int32_t *resp_starts, const int32_t *ids, const uint16_t *hidden,
                       const uint16_t *hidden_ml, int H, int m, const int *tap_layers, sp_err *err) {
    if (sp_mkdir_p(shard_dir, err)) return -1;
    int64_t L = 0;
    for (int i = 0; i < n_seq; i++) L += seq_lens[i];
    char path[4096];
    /* a rewrite starts from nothing: an old shard.json must not vouch for a new, torn file */
    sp_path_join(path, sizeof path, shard_dir, "shard.json");
    remove(path);
    if (write_tensors(shard_dir, l, n_seq, L, seq_lens, resp_starts, ids, hidden, hidden_ml, H, m, err)) return -1;
    json_t *j = json_object();
    json_object_set_new(j, "nSeq", json_integer(n_seq));
    json_object_set_new(j, "nTokens", json_integer(L));
    json_object_set_new(j, "hiddenSize", json_integer(H));
    if (l != TR_SHARDS_MLXBUN_V1) {
        json_t *taps = json_array();
        for (int i = 0; i < m; i++) json_array_append_new(taps, json_integer(tap_layers[i]));
        json_object_set_new(j, "m", json_integer(m));
        json_object_set_new(j, "tapLayers", taps);
    }
    char *text = json_dumps(j, JSON_PRESERVE_ORDER | (l != TR_SHARDS_SPECULA ? JSON_INDENT(2) : 0));
    json_decref(j);
    if (!text) return sp_err_set(err, "%s: out of memory", shard_dir);
    sp_path_join(path, sizeof path, shard_dir, "shard.json");
    int rc = sp_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

int sp_tr_shard_write(const char *shard_dir, int n_seq, const int32_t *seq_lens, const int32_t *resp_starts,
                   const int32_t *ids, const uint16_t *hidden, const uint16_t *hidden_ml, int H, int m,
                   const int *tap_layers, sp_err *err) {
    return write_shard(shard_dir, TR_SHARDS_SPECULA, n_seq, seq_lens, resp_starts, ids, hidden, hidden_ml, H, m,
                       tap_layers, err);
}

int sp_tr_shard_write_mlxbun(const char *shard_dir, int n_seq, const int32_t *seq_lens, const int32_t *resp_starts,
                             const int32_t *ids, const uint16_t *hidden_ml, int H, int m, const int *tap_layers,
                             sp_err *err) {
    if (m == 1)
        return write_shard(shard_dir, TR_SHARDS_MLXBUN_V1, n_seq, seq_lens, resp_starts, ids, hidden_ml, NULL, H, 1,
                           tap_layers, err);
    return write_shard(shard_dir, TR_SHARDS_MLXBUN_DFLASH, n_seq, seq_lens, resp_starts, ids, NULL, hidden_ml, H, m,
                       tap_layers, err);
}

/* the layout from which of "hidden" / "hidden_ml" the file holds */
static int detect_layout(const st_set *st, const char *path, tr_shard_layout *l, sp_err *err) {
    int h = sp_st_find(st, "hidden") != NULL, ml = sp_st_find(st, "hidden_ml") != NULL;
    if (!h && !ml)
        return sp_err_set(err, "%s: neither tensor \"hidden\" (specula, mlx-bun v1) nor \"hidden_ml\" (mlx-bun "
                               "DFlash) found: not a hidden-state shard", path);
    *l = h && ml ? TR_SHARDS_SPECULA : h ? TR_SHARDS_MLXBUN_V1 : TR_SHARDS_MLXBUN_DFLASH;
    return 0;
}

int sp_tr_shard_layout(const char *shard_dir, tr_shard_layout *layout, sp_err *err) {
    char path[4096];
    sp_path_join(path, sizeof path, shard_dir, "model.safetensors");
    st_set *st = NULL;
    if (sp_st_open_file(&st, path, err)) return -1;
    int rc = detect_layout(st, path, layout, err);
    sp_st_close(st);
    return rc;
}

static int json_int(json_t *j, const char *key, int64_t *v, const char *what, sp_err *err) {
    json_t *x = json_object_get(j, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return sp_err_set(err, "%s: \"%s\" missing or not a non-negative integer", what, key);
    *v = json_integer_value(x);
    return 0;
}

/* "tapLayers" of j: m (1..16) strictly increasing layer indices into tl */
static int read_taps(json_t *j, const char *what, int64_t m, int *tl, sp_err *err) {
    json_t *taps = json_object_get(j, "tapLayers");
    if (!json_is_array(taps) || (int64_t)json_array_size(taps) != m || m < 1 || m > 16)
        return sp_err_set(err, "%s: \"tapLayers\" must list m (1..16) layers", what);
    for (int i = 0; i < m; i++) {
        json_t *v = json_array_get(taps, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= SP_MAX_LAYERS ||
            (i > 0 && json_integer_value(v) <= tl[i - 1]))
            return sp_err_set(err, "%s: \"tapLayers\"[%d] is not a layer index in [0, %d) above the one before it",
                              what, i, SP_MAX_LAYERS);
        tl[i] = (int)json_integer_value(v);
    }
    return 0;
}

/* shard.json of shard_dir: the counts, hidden size, tap count m and tap layers tl[m], checked
 * (an mlx-bun v1 shard has no "m": one tap, the final norm) */
static int read_shard_meta(const char *shard_dir, const char *what, tr_shard_layout l, int64_t *n_seq,
                           int64_t *n_tok, int64_t *H, int64_t *m, int *tl, sp_err *err) {
    json_t *j = NULL;
    if (read_shard_json(shard_dir, &j, err)) return -1;
    int rc = json_int(j, "nSeq", n_seq, what, err) || json_int(j, "nTokens", n_tok, what, err) ||
             json_int(j, "hiddenSize", H, what, err);
    if (!rc && l == TR_SHARDS_MLXBUN_V1 && !json_object_get(j, "m")) {
        *m = 1;
        tl[0] = TR_TAP_FINAL_NORM;
    } else if (!rc) {
        rc = json_int(j, "m", m, what, err) || read_taps(j, what, *m, tl, err);
        if (!rc && l == TR_SHARDS_MLXBUN_V1 && *m != 1)
            rc = sp_err_set(err, "%s: an mlx-bun v1 shard (tensor \"hidden\" only) has one tap, not m = %lld", what,
                            (long long)*m);
    }
    if (!rc && (*H < 1 || *H > SP_CONFIG_MAX_DIM || *n_seq > INT32_MAX))
        rc = sp_err_set(err, "%s: hiddenSize %lld (1..%d) or nSeq %lld out of range", what, (long long)*H,
                        SP_CONFIG_MAX_DIM, (long long)*n_seq);
    json_decref(j);
    return rc ? -1 : 0;
}

/* every sequence length and response start in range, the lengths summing to the ids, every id
 * in the vocabulary (vocab 0: unchecked); fills seq_off */
static int check_sequences(tr_shard *sh, const char *path, int vocab, sp_err *err) {
    int64_t off = 0;
    for (int i = 0; i < sh->n_seq; i++) {
        if (sh->seq_lens[i] < 1 || sh->resp_starts[i] < 0 || sh->resp_starts[i] > sh->seq_lens[i])
            return sp_err_set(err, "%s: sequence %d: length %d, response start %d", path, i, sh->seq_lens[i],
                              sh->resp_starts[i]);
        sh->seq_off[i] = off;
        off += sh->seq_lens[i];
    }
    if (off != sh->n_tokens)
        return sp_err_set(err, "%s: seq_lens sum to %lld, ids has %lld", path, (long long)off, (long long)sh->n_tokens);
    for (int64_t i = 0; i < sh->n_tokens; i++)
        if (sh->ids[i] < 0 || (vocab > 0 && sh->ids[i] >= vocab))
            return sp_err_set(err, "%s: ids[%lld] = %d outside the vocabulary (%d)", path, (long long)i, sh->ids[i],
                              vocab);
    return 0;
}

/* the tensors of sh in layout l, checked against the counts of shard.json */
static int get_tensors(tr_shard *sh, tr_shard_layout l, const char *path, int64_t n_seq, int64_t n_tok, int64_t H,
                       int64_t m, sp_err *err) {
    const st_tensor *t;
    int64_t sh_h[2] = {n_tok, H}, sh_ml[2] = {n_tok, m * H}, sh_l[1] = {n_tok}, sh_n[1] = {n_seq};
    if (l != TR_SHARDS_MLXBUN_DFLASH) {
        if (sp_st_get(sh->st, "hidden", SP_DT_BF16, 2, sh_h, &t, err)) return -1;
        sh->hidden = t->data;
        sh->hidden_stride = H;
    }
    if (l != TR_SHARDS_MLXBUN_V1) {
        if (sp_st_get(sh->st, "hidden_ml", SP_DT_BF16, 2, sh_ml, &t, err)) return -1;
        sh->hidden_ml = t->data;
    }
    if (l == TR_SHARDS_MLXBUN_V1) sh->hidden_ml = sh->hidden; /* the context is the final hidden itself */
    if (l == TR_SHARDS_MLXBUN_DFLASH) {                         /* the last tap is the final hidden */
        sh->hidden = sh->hidden_ml + (m - 1) * H;
        sh->hidden_stride = m * H;
    }
    if (sp_st_get(sh->st, "ids", SP_DT_I32, 1, sh_l, &t, err)) return -1;
    sh->ids = t->data;
    if (sp_st_get(sh->st, "seq_lens", SP_DT_I32, 1, sh_n, &t, err)) return -1;
    sh->seq_lens = t->data;
    if (l == TR_SHARDS_MLXBUN_V1) { /* v1: every position is a response position */
        if (!(sh->resp0 = calloc(n_seq ? n_seq : 1, sizeof(int32_t))))
            return sp_err_set(err, "%s: out of memory", path);
        sh->resp_starts = sh->resp0;
    } else {
        if (sp_st_get(sh->st, "resp_starts", SP_DT_I32, 1, sh_n, &t, err)) return -1;
        sh->resp_starts = t->data;
    }
    return 0;
}

/* open and validate one shard; fills H / m / taps / layout of s on the first shard, checks them after */
static int open_shard(tr_shardset *s, tr_shard *sh, const char *shard_dir, int vocab, sp_err *err) {
    memset(sh, 0, sizeof *sh);
    char what[4200], path[4096];
    snprintf(what, sizeof what, "%s/shard.json", shard_dir);
    sp_path_join(path, sizeof path, shard_dir, "model.safetensors");
    if (sp_st_open_file(&sh->st, path, err)) return -1;
    int64_t n_seq = 0, n_tok = 0, H = 0, m = 0;
    int tl[16];
    tr_shard_layout l = TR_SHARDS_SPECULA;
    if (detect_layout(sh->st, path, &l, err) || read_shard_meta(shard_dir, what, l, &n_seq, &n_tok, &H, &m, tl, err))
        goto fail;
    if (s->n_shards == 0) {
        s->H = (int)H;
        s->m = (int)m;
        s->layout = l;
        s->mlxbun_anchors = l != TR_SHARDS_SPECULA;
        memcpy(s->tap_layers, tl, sizeof(int) * m);
    } else if (l != s->layout) {
        sp_err_set(err, "%s: a shard in the %s layout among %s ones", shard_dir, sp_tr_shard_layout_name(l),
                   sp_tr_shard_layout_name(s->layout));
        goto fail;
    } else if (H != s->H || m != s->m || memcmp(tl, s->tap_layers, sizeof(int) * m)) {
        sp_err_set(err, "%s: hiddenSize / tapLayers differ from the first shard", what);
        goto fail;
    }
    if (get_tensors(sh, l, path, n_seq, n_tok, H, m, err)) goto fail;
    sh->n_seq = (int)n_seq;
    sh->n_tokens = n_tok;
    sh->seq_off = malloc(sizeof(int64_t) * (n_seq + 1));
    if (!sh->seq_off) { sp_err_set(err, "%s: out of memory", path); goto fail; }
    if (check_sequences(sh, path, vocab, err)) goto fail;
    return 0;
fail:
    sp_st_close(sh->st);
    free(sh->seq_off);
    free(sh->resp0);
    memset(sh, 0, sizeof *sh);
    return -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int sp_tr_shardset_open(tr_shardset *s, const char *dir, int vocab, sp_err *err) {
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    if (!d) return sp_err_set(err, "%s: cannot open the shard directory", dir);
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "shard_", 6) != 0 || strchr(e->d_name, '.')) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, sizeof(char *) * cap);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof(char *), cmp_str);
    s->shards = calloc(n ? n : 1, sizeof(tr_shard));
    int rc = s->shards ? 0 : sp_err_set(err, "%s: out of memory", dir);
    for (int i = 0; i < n && !rc; i++) {
        char sd[4096];
        snprintf(sd, sizeof sd, "%s/%s", dir, names[i]);
        char sj[4200];
        snprintf(sj, sizeof sj, "%s/shard.json", sd);
        if (!sp_file_exists(sj)) { /* shard.json is written last: without it the shard is unfinished */
            rc = sp_err_set(err, "%s: incomplete shard (no shard.json): finish it with `specula regen` (same "
                                 "flags) or remove it", sd);
            break;
        }
        rc = open_shard(s, &s->shards[s->n_shards], sd, vocab, err);
        if (!rc) s->n_shards++;
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!rc && s->n_shards == 0) rc = sp_err_set(err, "%s: no complete shard_NNNNN directory", dir);
    if (rc) sp_tr_shardset_close(s);
    return rc;
}

/* a view of sh holding the sequences q with (u(q) < frac) == want_val; 0 or -1 (out of memory) */
static int shard_view(const tr_shard *sh, int idx, double frac, uint64_t seed, int want_val, tr_shard *v) {
    *v = *sh;
    v->st = NULL;
    int32_t *blk = malloc(sizeof(int32_t) * 2 * (size_t)(sh->n_seq + 1));
    v->seq_off = malloc(sizeof(int64_t) * (size_t)(sh->n_seq + 1));
    if (!blk || !v->seq_off) return free(blk), free(v->seq_off), v->seq_off = NULL, v->seq_lens = NULL, -1;
    int k = 0;
    for (int q = 0; q < sh->n_seq; q++) {
        if ((sp_rng_uniform(seed, 0x7a1u + (uint64_t)idx, (uint64_t)q) < frac) != want_val) continue;
        blk[k] = sh->seq_lens[q];
        blk[sh->n_seq + 1 + k] = sh->resp_starts[q];
        v->seq_off[k++] = sh->seq_off[q];
    }
    v->n_seq = k;
    v->seq_lens = blk;
    v->resp_starts = blk + sh->n_seq + 1;
    return 0;
}

static int shardset_view(const tr_shardset *s, double frac, uint64_t seed, int want_val, tr_shardset *v, int *n_seq) {
    *v = *s;
    *n_seq = 0;
    if (!(v->shards = calloc((size_t)s->n_shards, sizeof *v->shards))) return -1;
    for (int i = 0; i < s->n_shards; i++) {
        if (shard_view(&s->shards[i], i, frac, seed, want_val, &v->shards[i])) {
            v->n_shards = i;
            return -1;
        }
        *n_seq += v->shards[i].n_seq;
    }
    return 0;
}

int sp_tr_shardset_split(const tr_shardset *s, double frac, uint64_t seed, tr_shardset *train, tr_shardset *val,
                         sp_err *err) {
    int nt = 0, nv = 0;
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (shardset_view(s, frac, seed, 0, train, &nt) || shardset_view(s, frac, seed, 1, val, &nv))
        return sp_err_set(err, "--val-split: out of memory");
    if (nt < 1 || nv < 1)
        return sp_err_set(err, "--val-split %g leaves %d training and %d held-out sequences (each needs one)", frac,
                          nt, nv);
    return 0;
}

void sp_tr_shardset_close_view(tr_shardset *v) {
    for (int i = 0; i < v->n_shards; i++) {
        free((void *)v->shards[i].seq_lens);
        free(v->shards[i].seq_off);
    }
    free(v->shards);
    memset(v, 0, sizeof *v);
}

void sp_tr_shardset_close(tr_shardset *s) {
    for (int i = 0; i < s->n_shards; i++) {
        sp_st_close(s->shards[i].st);
        free(s->shards[i].seq_off);
        free(s->shards[i].resp0);
    }
    free(s->shards);
    memset(s, 0, sizeof *s);
}
