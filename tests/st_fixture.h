/* st_fixture.h — what the mlx-bun fixture tests write files with, independently of specula's own
 * writers: a small safetensors writer (the header JSON, 8-byte aligned, then the tensors' bytes),
 * a text-file writer and the bf16 random stream of their hidden-state fixtures. */
#ifndef SPECULA_TESTS_ST_FIXTURE_H
#define SPECULA_TESTS_ST_FIXTURE_H
#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

static inline uint16_t rnd_bf16(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return sp_f32_to_bf16(((float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f) * 2.0f);
}

/* ---- a safetensors writer ------------------------------------------------------------------- */
typedef struct {
    const char *name, *dtype;
    int ndim;
    int64_t shape[2];
    const void *data;
    size_t bytes;
} fx_tensor;

static inline void write_st(const char *path, const fx_tensor *t, int n) {
    char hdr[4096];
    int k = snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"format\":\"mlx\"}");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        k += snprintf(hdr + k, sizeof hdr - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", t[i].name, t[i].dtype,
                      (long long)t[i].shape[0]);
        if (t[i].ndim == 2) k += snprintf(hdr + k, sizeof hdr - k, ",%lld", (long long)t[i].shape[1]);
        k += snprintf(hdr + k, sizeof hdr - k, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].bytes);
        off += t[i].bytes;
    }
    k += snprintf(hdr + k, sizeof hdr - k, "}");
    while (k % 8) hdr[k++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t len = (uint64_t)k;
    fwrite(&len, 8, 1, f);
    fwrite(hdr, 1, (size_t)k, f);
    for (int i = 0; i < n; i++) fwrite(t[i].data, 1, t[i].bytes, f);
    fclose(f);
}

static inline void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

#endif
