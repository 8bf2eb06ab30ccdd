/* mlx_quant_write.c — `specula quantize --type mlx4|mlx8`: a Hugging Face checkpoint written as
 * an MLX affine group-quantized one (docs/MLX-QUANT.md §4). */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfjson.h"
#include "mlx_quant.h"

static int quantizable(const st_tensor *t, const sp_mlxq_params *p) {
    size_t n = strlen(t->name);
    return t->ndim == 2 && (t->dtype == SP_DT_F32 || t->dtype == SP_DT_BF16 || t->dtype == SP_DT_F16) && n > 7 &&
           !strcmp(t->name + n - 7, ".weight") && t->shape[1] % p->group == 0 && t->shape[1] > 0;
}

/* X.weight, X.scales, X.biases of one matrix into w; the buffers go to *bufs (freed by the caller) */
static int add_quantized(st_writer *w, const st_tensor *t, const sp_mlxq_params *p, void **bufs, sp_err *err) {
    int64_t n = t->shape[0], k = t->shape[1], ng = k / p->group, nw = k * p->bits / 32;
    sp_dtype sdt = t->dtype == SP_DT_F16 ? SP_DT_F16 : SP_DT_BF16;
    size_t es = sp_dtype_size(t->dtype), ss = sp_dtype_size(sdt);
    float *row = malloc((size_t)k * sizeof(float));
    bufs[0] = malloc((size_t)(n * nw) * 4 + 1);
    bufs[1] = malloc((size_t)(n * ng) * ss + 1);
    bufs[2] = malloc((size_t)(n * ng) * ss + 1);
    if (!row || !bufs[0] || !bufs[1] || !bufs[2]) {
        free(row);
        return sp_err_set(err, "out of memory quantizing %s", t->name);
    }
    for (int64_t r = 0; r < n; r++) {
        sp_to_f32(row, (const char *)t->data + (size_t)(r * k) * es, t->dtype, (size_t)k);
        sp_mlxq_quantize_row((uint32_t *)bufs[0] + r * nw, (char *)bufs[1] + (size_t)(r * ng) * ss,
                             (char *)bufs[2] + (size_t)(r * ng) * ss, sdt, row, k, p);
    }
    free(row);
    char mod[400], nm[420];
    snprintf(mod, sizeof mod, "%.*s", (int)(strlen(t->name) - 7), t->name);
    int64_t ws[2] = {n, nw}, gs[2] = {n, ng};
    snprintf(nm, sizeof nm, "%s.weight", mod);
    if (sp_st_writer_add_ref(w, nm, SP_DT_U32, 2, ws, bufs[0], err)) return -1;
    snprintf(nm, sizeof nm, "%s.scales", mod);
    if (sp_st_writer_add_ref(w, nm, sdt, 2, gs, bufs[1], err)) return -1;
    snprintf(nm, sizeof nm, "%s.biases", mod);
    return sp_st_writer_add_ref(w, nm, sdt, 2, gs, bufs[2], err);
}

/* config.json with "quantization" (and mlx-lm's copy, "quantization_config") */
static int write_config(const char *in_dir, const char *out_dir, const sp_mlxq_params *p, sp_err *err) {
    char src[4096], dst[4096];
    if (sp_path_join(src, sizeof src, in_dir, "config.json") || sp_path_join(dst, sizeof dst, out_dir, "config.json"))
        return sp_err_set(err, "path too long: %s", in_dir);
    json_t *root = sp_hf_json_load_file(src, 0, err);
    if (!root) return -1;
    json_t *q = json_pack("{s:i, s:i}", "group_size", p->group, "bits", p->bits);
    json_object_set_new(root, "quantization", json_deep_copy(q));
    json_object_set_new(root, "quantization_config", q);
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text) return sp_err_set(err, "out of memory writing %s", dst);
    int rc = sp_write_file_atomic(dst, text, strlen(text), err);
    free(text);
    return rc;
}

/* every regular file of in_dir but the weights and config.json (tokenizer, templates, ...) */
static int copy_others(const char *in_dir, const char *out_dir, sp_err *err) {
    DIR *d = opendir(in_dir);
    if (!d) return sp_err_set(err, "cannot read directory %s", in_dir);
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        const char *nm = e->d_name;
        size_t n = strlen(nm);
        if (nm[0] == '.' || !strcmp(nm, "config.json") || (n > 12 && !strcmp(nm + n - 12, ".safetensors")) ||
            !strcmp(nm, "model.safetensors.index.json"))
            continue;
        char src[4096], dst[4096], *buf;
        size_t len;
        if (sp_path_join(src, sizeof src, in_dir, nm) || sp_path_join(dst, sizeof dst, out_dir, nm)) {
            rc = sp_err_set(err, "path too long: %s", nm);
            break;
        }
        if (sp_check_regular(src, err)) { /* a sub-directory is not part of the checkpoint */
            err->msg[0] = 0;
            continue;
        }
        if ((rc = sp_read_file(src, &buf, &len, err))) break;
        rc = sp_write_file_atomic(dst, buf, len, err);
        free(buf);
    }
    closedir(d);
    return rc;
}

static int write_into(const char *in_dir, const char *tmp, const st_set *s, const sp_mlxq_params *p, int *nq,
                      void **bufs, sp_err *err) {
    st_writer *w = sp_st_writer_create();
    if (!w) return sp_err_set(err, "out of memory");
    int rc = 0;
    for (int i = 0; !rc && i < sp_st_count(s); i++) {
        const st_tensor *t = sp_st_at(s, i);
        if (!quantizable(t, p)) rc = sp_st_writer_add_ref(w, t->name, t->dtype, t->ndim, t->shape, t->data, err);
        else if (!(rc = add_quantized(w, t, p, bufs + 3 * (size_t)i, err))) (*nq)++;
    }
    char path[4096];
    if (!rc && sp_path_join(path, sizeof path, tmp, "model.safetensors")) rc = sp_err_set(err, "path too long: %s", tmp);
    if (!rc) rc = sp_st_writer_save(w, path, err);
    sp_st_writer_free(w);
    if (!rc) rc = write_config(in_dir, tmp, p, err);
    if (!rc) rc = copy_others(in_dir, tmp, err);
    return rc;
}

int sp_mlxq_write_model(const char *in_dir, const char *out_dir, const sp_mlxq_params *p, int *n_quantized,
                        sp_err *err) {
    if ((p->bits != 4 && p->bits != 8) || (p->group != 32 && p->group != 64 && p->group != 128))
        return sp_err_set(err, "MLX quantization: %d bits, group size %d: expected 4 or 8 bits, group 32, 64 or 128",
                          p->bits, p->group);
    char cfg[4096];
    sp_mlxq *already = NULL;
    if (sp_path_join(cfg, sizeof cfg, in_dir, "config.json")) return sp_err_set(err, "path too long: %s", in_dir);
    if (sp_mlxq_load(&already, cfg, err)) return -1;
    if (already) {
        sp_mlxq_free(already);
        return sp_err_set(err, "%s is already MLX-quantized (config.json has \"quantization\"): quantize the "
                          "unquantized checkpoint", in_dir);
    }
    st_set *s = NULL;
    if (sp_st_open_dir(&s, in_dir, err)) return -1;
    char tmp[4200];
    void **bufs = calloc(3 * (size_t)sp_st_count(s) + 1, sizeof *bufs);
    int nq = 0, rc = -1;
    if (!bufs) sp_err_set(err, "out of memory");
    else if (sp_tmp_name(tmp, sizeof tmp, out_dir)) sp_err_set(err, "output path too long: %s", out_dir);
    else {
        sp_remove_stale_tmp(out_dir);
        rc = sp_mkdir_p(tmp, err) || write_into(in_dir, tmp, s, p, &nq, bufs, err) || sp_dir_publish(tmp, out_dir, err)
                 ? -1 : 0;
        if (rc) sp_remove_tree(tmp);
    }
    for (int i = 0; bufs && i < 3 * sp_st_count(s); i++) free(bufs[i]);
    free(bufs);
    sp_st_close(s);
    if (!rc && n_quantized) *n_quantized = nq;
    return rc;
}
