/* st_quantize.c — a DFlash / DSpark drafter directory with its projection matrices stored as
 * Q8_0 (or Q4_0) blocks inside safetensors (docs/QUANTIZE.md, "Drafters").
 *
 * The drafter keeps its published layout and names; each quantized matrix W [n, k] becomes a
 * U8 tensor [n, row bytes] holding llama.cpp's blocks, and the file's __metadata__ says so with
 * "quant.NAME": "Q8_0" (read back by sp_st_get_weight). Quantized: 2-D float tensors named
 * `*_proj.weight`, `fc.weight` or `markov_head.markov_w2.weight` whose rows are whole blocks —
 * the matrices the drafter multiplies by; norms, the Markov embedding and the confidence head
 * stay as they are. config.json (and sts.json) are copied. Files are written atomically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/quant.h"
#include "safetensors.h"
#include "st_quantize.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int quantizable(const st_tensor *t, sp_dtype qt) {
    if (t->ndim != 2 || (t->dtype != SP_DT_F32 && t->dtype != SP_DT_BF16 && t->dtype != SP_DT_F16)) return 0;
    if (sp_dtype_row_bytes(qt, (size_t)t->shape[1]) == 0) return 0;
    return ends_with(t->name, "_proj.weight") || !strcmp(t->name, "fc.weight") ||
           !strcmp(t->name, "markov_head.markov_w2.weight");
}

static int copy_file(const char *dir, const char *out_dir, const char *name, int required, sp_err *err) {
    char src[4096], dst[4096], *buf;
    size_t n;
    if (sp_path_join(src, sizeof src, dir, name) || sp_path_join(dst, sizeof dst, out_dir, name))
        return sp_err_set(err, "path too long: %s", dir);
    if (!sp_file_exists(src)) return required ? sp_err_set(err, "%s: no %s", dir, name) : 0;
    if (sp_read_file(src, &buf, &n, err)) return -1;
    int rc = sp_write_file_atomic(dst, buf, n, err);
    free(buf);
    return rc;
}

int sp_st_quantize_drafter(const char *dir, const char *out_dir, sp_dtype qt, int *n_quantized, sp_err *err) {
    if (qt != SP_DT_Q8_0 && qt != SP_DT_Q4_0) return sp_err_set(err, "drafters are stored as Q8_0 or Q4_0 only");
    st_set *s = NULL;
    st_writer *w = NULL;
    uint8_t **bufs = NULL;
    float *row = NULL;
    int rc = -1, nq = 0;
    if (sp_st_open_dir(&s, dir, err)) return -1;
    w = sp_st_writer_create();
    bufs = calloc((size_t)sp_st_count(s) + 1, sizeof *bufs);
    if (!w || !bufs) {
        sp_err_set(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < sp_st_count(s); i++) {
        const st_tensor *t = sp_st_at(s, i);
        if (!quantizable(t, qt)) {
            if (sp_st_writer_add_ref(w, t->name, t->dtype, t->ndim, t->shape, t->data, err)) goto done;
            continue;
        }
        size_t n = (size_t)t->shape[0], k = (size_t)t->shape[1], rb = sp_dtype_row_bytes(qt, k);
        free(row);
        if (!(row = malloc(k * sizeof(float))) || !(bufs[i] = malloc(n * rb))) {
            sp_err_set(err, "out of memory quantizing %s", t->name);
            goto done;
        }
        size_t es = sp_dtype_size(t->dtype);
        for (size_t r = 0; r < n; r++) {
            sp_to_f32(row, (const char *)t->data + r * k * es, t->dtype, k);
            if (sp_quantize_row(bufs[i] + r * rb, row, qt, k, err)) goto done;
        }
        int64_t shape[2] = {(int64_t)n, (int64_t)rb};
        char key[320];
        snprintf(key, sizeof key, "quant.%s", t->name);
        if (sp_st_writer_add_ref(w, t->name, SP_DT_U8, 2, shape, bufs[i], err) ||
            sp_st_writer_set_metadata(w, key, sp_dtype_name(qt), err))
            goto done;
        nq++;
    }
    char path[4096];
    if (sp_mkdir_p(out_dir, err) || sp_path_join(path, sizeof path, out_dir, "model.safetensors")) goto done;
    if (sp_st_writer_save(w, path, err) || copy_file(dir, out_dir, "config.json", 1, err) ||
        copy_file(dir, out_dir, "sts.json", 0, err))
        goto done;
    if (n_quantized) *n_quantized = nq;
    rc = 0;
done:
    for (int i = 0; bufs && i < sp_st_count(s); i++) free(bufs[i]);
    free(bufs);
    free(row);
    sp_st_writer_free(w);
    sp_st_close(s);
    return rc;
}
