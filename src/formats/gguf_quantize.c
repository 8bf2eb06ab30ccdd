/* gguf_quantize.c — GGUF → quantized GGUF with llama.cpp's type mix (see gguf_quantize.h,
 * docs/QUANTIZE.md). Metadata is copied value for value (general.file_type and
 * general.quantization_version are rewritten); each tensor is streamed row block by row block:
 * dequantized to f32 (unless its type is kept) and quantized in parallel on the thread pool. */
#include "gguf_quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../core/pool.h"
#include "../core/progress.h"
#include "../kernels/quant.h"
#include "export_gguf.h"
#include "gguf_model.h"

/* each mix: llama-quantize's name, its llama_ftype (general.file_type) and its base type */
static const struct {
    const char *name;
    uint32_t file_type;
    ggml_type base;
} MIXES[GGUF_MIX_COUNT] = {
    [GGUF_MIX_Q8_0] = {"Q8_0", 7, GGML_TYPE_Q8_0},       [GGUF_MIX_Q4_0] = {"Q4_0", 2, GGML_TYPE_Q4_0},
    [GGUF_MIX_Q4_K_M] = {"Q4_K_M", 15, GGML_TYPE_Q4_K},  [GGUF_MIX_Q6_K] = {"Q6_K", 18, GGML_TYPE_Q6_K},
    [GGUF_MIX_F32] = {"F32", 0, GGML_TYPE_F32},          [GGUF_MIX_Q2_K] = {"Q2_K", 10, GGML_TYPE_Q2_K},
    [GGUF_MIX_Q3_K_S] = {"Q3_K_S", 11, GGML_TYPE_Q3_K},  [GGUF_MIX_Q3_K_M] = {"Q3_K_M", 12, GGML_TYPE_Q3_K},
    [GGUF_MIX_Q3_K_L] = {"Q3_K_L", 13, GGML_TYPE_Q3_K},  [GGUF_MIX_Q4_K_S] = {"Q4_K_S", 14, GGML_TYPE_Q4_K},
    [GGUF_MIX_Q5_K_S] = {"Q5_K_S", 16, GGML_TYPE_Q5_K},  [GGUF_MIX_Q5_K_M] = {"Q5_K_M", 17, GGML_TYPE_Q5_K},
    [GGUF_MIX_Q5_0] = {"Q5_0", 8, GGML_TYPE_Q5_0},       [GGUF_MIX_Q5_1] = {"Q5_1", 9, GGML_TYPE_Q5_1},
    [GGUF_MIX_IQ4_NL] = {"IQ4_NL", 25, GGML_TYPE_IQ4_NL}, [GGUF_MIX_IQ4_XS] = {"IQ4_XS", 30, GGML_TYPE_IQ4_XS},
    [GGUF_MIX_F16] = {"F16", 1, GGML_TYPE_F16},          [GGUF_MIX_BF16] = {"BF16", 32, GGML_TYPE_BF16},
};

int sp_gguf_mix_parse(const char *s, gguf_mix *out) {
    static const struct { const char *alias; gguf_mix mix; } aliases[] = {
        {"Q3_K", GGUF_MIX_Q3_K_M}, {"Q4_K", GGUF_MIX_Q4_K_M}, {"Q5_K", GGUF_MIX_Q5_K_M}};
    for (int i = 0; i < GGUF_MIX_COUNT; i++)
        if (!strcasecmp(s, MIXES[i].name)) {
            *out = (gguf_mix)i;
            return 0;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcasecmp(s, aliases[i].alias)) {
            *out = aliases[i].mix;
            return 0;
        }
    return -1;
}

const char *sp_gguf_mix_name(gguf_mix m) { return (unsigned)m < GGUF_MIX_COUNT ? MIXES[m].name : "?"; }

const char *sp_gguf_mix_names(void) {
    return "Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_0, Q4_K_S, Q4_K_M, Q5_0, Q5_1, Q5_K_S, Q5_K_M, Q6_K, Q8_0, IQ4_NL, "
           "IQ4_XS, F16, BF16 or F32 (any case)";
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* layers that get more bits in llama.cpp's *_M mixes: the first and last eighth, every third between */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* llama.cpp's choice for attn_v (i: its index, n: their count) */
static ggml_type mix_attn_v(gguf_mix mix, ggml_type t, int i, int n, int n_gqa) {
    switch (mix) {
    case GGUF_MIX_Q2_K: return n_gqa >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
    case GGUF_MIX_Q3_K_M: return i < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
    case GGUF_MIX_Q3_K_L: return GGML_TYPE_Q5_K;
    case GGUF_MIX_IQ4_NL: case GGUF_MIX_IQ4_XS: return n_gqa >= 4 ? GGML_TYPE_Q5_K : t;
    case GGUF_MIX_Q4_K_M: case GGUF_MIX_Q5_K_M: return more_bits(i, n) ? GGML_TYPE_Q6_K : t;
    case GGUF_MIX_Q4_K_S: return i < 4 ? GGML_TYPE_Q5_K : t;
    default: return t;
    }
}

/* llama.cpp's choice for ffn_down of layer i of n */
static ggml_type mix_ffn_down(gguf_mix mix, ggml_type t, int i, int n) {
    switch (mix) {
    case GGUF_MIX_Q2_K: return GGML_TYPE_Q3_K;
    case GGUF_MIX_Q3_K_M: return i < n / 16 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
    case GGUF_MIX_Q3_K_L: return GGML_TYPE_Q5_K;
    case GGUF_MIX_Q4_K_M: case GGUF_MIX_Q5_K_M: return more_bits(i, n) ? GGML_TYPE_Q6_K : t;
    case GGUF_MIX_IQ4_NL: case GGUF_MIX_IQ4_XS: case GGUF_MIX_Q4_K_S: return i < n / 8 ? GGML_TYPE_Q5_K : t;
    default: return t;
    }
}

/* llama.cpp's choice for attn_output */
static ggml_type mix_attn_output(gguf_mix mix, ggml_type t) {
    return mix == GGUF_MIX_Q2_K ? GGML_TYPE_Q3_K : mix == GGUF_MIX_Q3_K_M ? GGML_TYPE_Q4_K
         : mix == GGUF_MIX_Q3_K_L ? GGML_TYPE_Q5_K : t;
}

/* a type whose block does not divide the rows: llama.cpp's next choice, then F16 */
static ggml_type mix_fallback(ggml_type t, int64_t ne0) {
    if (sp_ggml_row_size(t, ne0)) return t;
    switch (t) {
    case GGML_TYPE_IQ4_XS: t = GGML_TYPE_IQ4_NL; break;
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: t = GGML_TYPE_Q4_0; break;
    case GGML_TYPE_Q4_K: t = GGML_TYPE_Q5_0; break;
    case GGML_TYPE_Q5_K: t = GGML_TYPE_Q5_1; break;
    case GGML_TYPE_Q6_K: t = GGML_TYPE_Q8_0; break;
    default: break;
    }
    return sp_ggml_row_size(t, ne0) ? t : GGML_TYPE_F16;
}

ggml_type sp_gguf_mix_tensor_type(gguf_mix mix, const char *name, int n_dims, int64_t ne0, ggml_type src_type, int tied,
                               int i_attn_v, int n_attn_v, int i_ffn_down, int n_layers, int n_gqa) {
    if (mix == GGUF_MIX_F32) return GGML_TYPE_F32;
    /* not quantized: vectors, non-weights, norms, the Gemma-4 per-layer model projection */
    /* and, as llama.cpp, the MoE router (ffn_gate_inp) */
    if (n_dims < 2 || !ends_with(name, "weight") || strstr(name, "_norm.weight") || strstr(name, "per_layer_model_proj") ||
        strstr(name, "ffn_gate_inp.weight"))
        return src_type;
    ggml_type base = MIXES[mix].base, t = base;
    if (mix == GGUF_MIX_F16 || mix == GGUF_MIX_BF16) return t;
    int embd = !strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight");
    if (!strcmp(name, "output.weight") || (tied && embd)) {
        if (ne0 % (int64_t)sp_dtype_block_elems(sp_gguf_ggml_to_dtype(base))) t = GGML_TYPE_Q8_0;
        else if (base != GGML_TYPE_Q8_0) t = GGML_TYPE_Q6_K;
    } else if (embd) {
        t = base;
    } else if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight")) {
        t = mix_attn_v(mix, base, i_attn_v, n_attn_v, n_gqa);
    } else if (strstr(name, "attn_output.weight")) {
        t = mix_attn_output(mix, base);
    } else if (strstr(name, "ffn_down")) {
        t = mix_ffn_down(mix, base, i_ffn_down, n_layers);
    }
    return mix_fallback(t, ne0);
}

/* ---- streaming one tensor ------------------------------------------------------------------ */
typedef struct {
    double total, done; /* bytes of output */
    sp_progress bar;
    int on;
} progress_state;

typedef struct {
    char name[GGUF_MAX_NAME + 1];
    const uint8_t *src;
    sp_dtype src_dt;
    uint32_t src_ggml;
    ggml_type dst;
    int64_t ne0;
    size_t in_row, out_row;
    sp_pool *pool;
    progress_state *prog;
} tensor_job;

typedef struct {
    const tensor_job *j;
    uint8_t *dst;
    size_t row0, nrows;
    int failed;
} rows_task;

static void convert_rows(void *ctx, int i, int n) {
    rows_task *r = ctx;
    const tensor_job *j = r->j;
    int lo, hi;
    sp_pool_split((int)r->nrows, 1, i, n, &lo, &hi);
    if (lo >= hi) return;
    float *x = malloc((size_t)j->ne0 * sizeof(float));
    if (!x) {
        r->failed = 1;
        return;
    }
    for (int k = lo; k < hi; k++) {
        const uint8_t *src = j->src + (r->row0 + (size_t)k) * j->in_row;
        uint8_t *dst = r->dst + (size_t)k * j->out_row;
        if (sp_row_to_f32(x, src, j->src_dt, (size_t)j->ne0, NULL)) {
            r->failed = 1;
            break;
        }
        if (j->dst == GGML_TYPE_F32) memcpy(dst, x, (size_t)j->ne0 * sizeof(float));
        else if (j->dst == GGML_TYPE_F16)
            for (int64_t e = 0; e < j->ne0; e++) ((uint16_t *)dst)[e] = sp_f32_to_f16(x[e]);
        else if (j->dst == GGML_TYPE_BF16)
            for (int64_t e = 0; e < j->ne0; e++) ((uint16_t *)dst)[e] = sp_f32_to_bf16(x[e]);
        else if (sp_quantize_row(dst, x, sp_gguf_ggml_to_dtype((uint32_t)j->dst), (size_t)j->ne0, NULL)) {
            r->failed = 1;
            break;
        }
    }
    free(x);
}

static int fill_tensor(void *ctx, void *dst, size_t offset, size_t n, sp_err *err) {
    const tensor_job *j = ctx;
    if ((uint32_t)j->dst == j->src_ggml) {
        memcpy(dst, j->src + offset, n); /* kept as is */
    } else {
        rows_task r = {j, dst, offset / j->out_row, n / j->out_row, 0};
        sp_pool_run(j->pool, convert_rows, &r);
        if (r.failed) return sp_err_set(err, "cannot convert %s to %s", j->name, sp_ggml_type_name(j->dst));
    }
    progress_state *p = j->prog;
    p->done += (double)n;
    if (p->on) sp_progress_update(&p->bar, p->done / 1048576.0, NULL);
    return 0;
}

/* ---- the whole file ------------------------------------------------------------------------- */
/* metadata: every key as it is, but the file type and quantization version (written anew) and
 * the alignment */
static int copy_metadata(const gguf_file *f, gguf_writer *w, const char *in, gguf_mix mix, sp_err *err) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        char key[256];
        if (kv->key.len >= sizeof key)
            return sp_err_set(err, "%s: metadata key of %llu bytes is too long to copy", in,
                              (unsigned long long)kv->key.len);
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.quantization_version") ||
            !strcmp(key, "general.alignment"))
            continue;
        if (sp_gguf_writer_set_raw(w, key, (gguf_type)kv->type, kv->raw, (size_t)kv->raw_len, err)) return -1;
    }
    if (sp_gguf_writer_set_u32(w, "general.quantization_version", 2, err) ||
        sp_gguf_writer_set_u32(w, "general.file_type", MIXES[mix].file_type, err))
        return -1;
    return 0;
}

/* one job per tensor of f: its target type by llama.cpp's mix rule, added to w to be converted
 * at save time; prog->total sums the output bytes */
static int add_tensor_jobs(const gguf_file *f, gguf_writer *w, const char *in, const gguf_quantize_opts *o,
                           tensor_job *jobs, sp_pool *pool, progress_state *prog, sp_err *err) {
    /* the counters llama.cpp's rule reads */
    int64_t n_layers = 0, n_head = 0, n_head_kv = 0;
    gguf_str arch;
    if (sp_gguf_get_str(f, "general.architecture", &arch, err) == 0) {
        char key[96];
        int al = (int)(arch.len > 64 ? 64 : arch.len);
        snprintf(key, sizeof key, "%.*s.block_count", al, arch.ptr);
        if (sp_gguf_get_i64(f, key, &n_layers, err) < 0) return -1;
        /* heads per KV head, as llama.cpp's n_gqa() (Gemma-4 stores per-layer arrays: 0 here) */
        snprintf(key, sizeof key, "%.*s.attention.head_count", al, arch.ptr);
        if (sp_gguf_get_i64(f, key, &n_head, NULL) < 0) n_head = 0;
        snprintf(key, sizeof key, "%.*s.attention.head_count_kv", al, arch.ptr);
        if (sp_gguf_get_i64(f, key, &n_head_kv, NULL) < 0) n_head_kv = 0;
    }
    int n_gqa = n_head > 0 && n_head_kv > 0 ? (int)(n_head / n_head_kv) : 0;
    int n_attn_v = 0, i_attn_v = 0, i_ffn_down = 0, n_requant = 0, tied = sp_gguf_find_tensor(f, "output.weight") == NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_str *nm = &f->tensors[i].name;
        n_attn_v += (nm->len >= 13 && !memcmp(nm->ptr + nm->len - 13, "attn_v.weight", 13)) ||
                    (nm->len >= 15 && !memcmp(nm->ptr + nm->len - 15, "attn_qkv.weight", 15));
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor_info *t = &f->tensors[i];
        char name[GGUF_MAX_NAME + 1];
        if (t->name.len > GGUF_MAX_NAME)
            return sp_err_set(err, "%s: tensor name of %llu bytes", in, (unsigned long long)t->name.len);
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        tensor_job *j = &jobs[i];
        memcpy(j->name, name, sizeof name);
        j->src_ggml = t->type;
        j->src_dt = sp_gguf_ggml_to_dtype(t->type);
        if (j->src_dt == SP_DT_UNKNOWN)
            return sp_err_set(err, "%s: tensor %s has ggml type %s, which specula cannot read", in, name,
                              sp_ggml_type_label(t->type));
        if (t->dims[0] > INT32_MAX)
            return sp_err_set(err, "%s: tensor %s: rows too long", in, name);
        j->ne0 = (int64_t)t->dims[0];
        j->dst = sp_gguf_mix_tensor_type(o->mix, name, (int)t->n_dims, j->ne0, (ggml_type)t->type, tied, i_attn_v,
                                      n_attn_v, i_ffn_down, (int)n_layers, n_gqa);
        if ((strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight")) && t->n_dims >= 2) i_attn_v++;
        if (strstr(name, "ffn_down") && t->n_dims >= 2) i_ffn_down++;
        n_requant += sp_dtype_is_quant(j->src_dt) && (uint32_t)j->dst != t->type && j->dst != GGML_TYPE_F32;
        j->src = sp_gguf_tensor_data(f, t, err);
        if (!j->src) return -1;
        j->in_row = sp_dtype_row_bytes(j->src_dt, (size_t)j->ne0);
        j->out_row = sp_ggml_row_size(j->dst, j->ne0);
        j->pool = pool;
        j->prog = prog;
        int64_t ne[GGUF_MAX_DIMS];
        for (uint32_t d = 0; d < t->n_dims; d++) ne[d] = (int64_t)t->dims[d];
        if (sp_gguf_writer_add_tensor(w, name, j->dst, (int)t->n_dims, ne, NULL, fill_tensor, j, err)) return -1;
        prog->total += (double)(j->out_row * (t->nbytes / (j->in_row ? j->in_row : 1)));
        sp_log(SP_LOG_DEBUG, "quantize: %-32s %s -> %s", name, sp_ggml_type_label(t->type), sp_ggml_type_name(j->dst));
    }
    if (n_requant)
        sp_log(SP_LOG_WARN, "quantize: %d tensors of %s are already quantized: dequantized and quantized again "
                            "(the quality losses add up)", n_requant, in);
    return 0;
}

/* in: a GGUF file. scratch: 1 when in is this run's own intermediate, removed as soon as it is
 * mapped (the mapping keeps its pages), so a killed run leaves nothing of it behind */
static int quantize_file(const char *in, const char *out, const gguf_quantize_opts *o, int scratch, sp_err *err) {
    gguf_file *f = sp_gguf_open(in, err);
    if (scratch) remove(in);
    if (!f) return -1;
    gguf_writer *w = sp_gguf_writer_create();
    tensor_job *jobs = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *jobs);
    sp_pool *pool = sp_pool_create(o->n_threads);
    progress_state prog = {.on = o->progress};
    int rc = -1;
    if (!w || !jobs || !pool) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    if (copy_metadata(f, w, in, o->mix, err) || add_tensor_jobs(f, w, in, o, jobs, pool, &prog, err)) goto done;
    if (prog.on) sp_progress_start(&prog.bar, "quantize", prog.total / 1048576.0, "MiB");
    if (sp_gguf_writer_save(w, out, err)) goto done;
    if (prog.on) sp_progress_finish(&prog.bar, prog.done / 1048576.0, NULL);
    rc = 0;
done:
    sp_gguf_writer_free(w);
    free(jobs);
    sp_pool_free(pool);
    sp_gguf_close(f);
    return rc;
}

/* ---- a model directory: through a scratch GGUF ------------------------------------------------ */
/* The scratch GGUF of out: OUT.export.tmp.PID beside the output, or in $TMPDIR (else /tmp) when
 * the output is not a regular file (a device such as /dev/null, a FIFO). */
static int scratch_name(char *buf, size_t cap, const char *out) {
    struct stat st;
    char base[4200];
    if (stat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
        const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(base, sizeof base, "%s/specula-quantize.export", dir);
    } else if (snprintf(base, sizeof base, "%s.export", out) >= (int)sizeof base) {
        return -1;
    }
    return sp_tmp_name(buf, cap, base);
}

/* Remove what killed runs left beside scratch (SCRATCH_BASE.tmp.N, and the names
 * BASE.N.tmp / BASE.N.tmp.tmp.N of older writers) when process N no longer runs. */
static void remove_stale_scratch(const char *scratch) {
    char base[4200], dirbuf[4200];
    snprintf(base, sizeof base, "%s", scratch);
    char *t = strrchr(base, '.');
    if (t && t - base > 4 && !strncmp(t - 4, ".tmp", 4)) t[-4] = 0; /* BASE.tmp.PID -> BASE */
    sp_remove_stale_tmp(base);
    snprintf(dirbuf, sizeof dirbuf, "%s", base);
    char *slash = strrchr(dirbuf, '/');
    const char *name = slash ? slash + 1 : dirbuf;
    if (slash) *slash = 0;
    DIR *d = opendir(slash ? (*dirbuf ? dirbuf : "/") : ".");
    if (!d) return;
    size_t nl = strlen(name);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *p = e->d_name;
        if (strncmp(p, name, nl) || p[nl] != '.') continue;
        char *end;
        long pid = strtol(p + nl + 1, &end, 10);
        if (end == p + nl + 1 || pid <= 0 || (strcmp(end, ".tmp") && strncmp(end, ".tmp.tmp.", 9))) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char full[8400];
        snprintf(full, sizeof full, "%s/%s", slash ? (*dirbuf ? dirbuf : "") : ".", p);
        if (remove(full) == 0) sp_log(SP_LOG_WARN, "removed %s, left by process %ld that no longer runs", full, pid);
    }
    closedir(d);
}

/* bytes of the *.safetensors files in dir (what the scratch GGUF will about take) */
static double safetensors_bytes(const char *dir) {
    double sum = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        char p[8400];
        struct stat st;
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) == 0) sum += (double)st.st_size;
    }
    closedir(d);
    return sum;
}

/* The scratch GGUF and the output (on the same file system) must fit in its free space: say so
 * before anything is written. */
static int check_free_space(const char *dir, const char *scratch, const char *out, gguf_mix mix, sp_err *err) {
    char buf[4200];
    snprintf(buf, sizeof buf, "%s", scratch);
    const char *sdir = dirname(buf);
    struct statvfs vs;
    struct stat ss, os;
    if (statvfs(sdir, &vs) != 0 || stat(sdir, &ss) != 0) return 0; /* unknown: let the writes tell */
    double in = safetensors_bytes(dir), need = in;
    /* the output: at most the input's size, twice it for f32 from 16-bit weights */
    int out_here = stat(out, &os) != 0 ? 1 : S_ISREG(os.st_mode) && os.st_dev == ss.st_dev;
    if (out_here) need += mix == GGUF_MIX_F32 ? 2 * in : in;
    double avail = (double)vs.f_bavail * (double)vs.f_frsize;
    if (need <= avail) return 0;
    return sp_err_set(err, "quantize from a model directory writes a scratch GGUF (%s, about %.0f MiB)%s: about "
                      "%.0f MiB needed in %s, %.0f MiB free (quantize an exported GGUF instead, or free space)",
                      scratch, in / 1048576.0, out_here ? " beside the output" : "", need / 1048576.0, sdir,
                      avail / 1048576.0);
}

int sp_gguf_quantize(const char *in_path, const char *out_path, const gguf_quantize_opts *o, sp_err *err) {
    struct stat st;
    if (stat(in_path, &st) != 0) return sp_err_set(err, "cannot open %s", in_path);
    if (S_ISREG(st.st_mode)) return quantize_file(in_path, out_path, o, 0, err);
    /* a model directory: exported to a scratch GGUF, which is unlinked once mapped */
    char tmp[4200];
    if (scratch_name(tmp, sizeof tmp, out_path)) return sp_err_set(err, "path too long: %s", out_path);
    remove_stale_scratch(tmp);
    if (check_free_space(in_path, tmp, out_path, o->mix, err)) return -1;
    export_gguf_opts eo = {.weight_type = -1, .no_tokenizer = 1, .in_place = 1};
    if (sp_export_gguf(in_path, tmp, &eo, err)) return -1;
    return quantize_file(tmp, out_path, o, 1, err);
}
