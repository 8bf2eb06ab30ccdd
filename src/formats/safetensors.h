/* safetensors.h — read and write safetensors files and sharded checkpoints (FORMATS.md §1).
 *
 * The reader mmaps each file read-only and validates every rule of §1.2 before any tensor
 * pointer is handed out; a tensor whose data is not aligned to its element size is copied
 * into an owned aligned buffer rather than cast. The writer lays tensors out aligned and
 * writes atomically (temp file + fsync + rename). */
#ifndef SPECULA_SAFETENSORS_H
#define SPECULA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"

#define ST_MAX_DIMS 8

typedef struct {
    const char *name;  /* owned by the st_file / st_set */
    sp_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const void *data;  /* into the mmap, or an owned aligned copy */
    const char *file;  /* the file it came from (for messages) */
} st_tensor;

/* One checkpoint: a single .safetensors file, or every shard named by an index. */
typedef struct st_set st_set;

/* Open a single .safetensors file. */
int st_open_file(st_set **out, const char *path, sp_err *err);
/* Open a model directory: model.safetensors.index.json if present, else model.safetensors. */
int st_open_dir(st_set **out, const char *dir, sp_err *err);
void st_close(st_set *s);

int st_count(const st_set *s);
const st_tensor *st_at(const st_set *s, int i);
/* NULL when absent */
const st_tensor *st_find(const st_set *s, const char *name);
/* __metadata__ value for key, or NULL */
const char *st_metadata(const st_set *s, const char *key);

/* Look up `name` and check dtype/shape. Any mismatch → error naming the tensor, its file,
 * the expected and the found shape. dtype SP_DT_UNKNOWN accepts any float dtype
 * (F32/F16/BF16). ndim/shape give the expected shape. */
int st_get(const st_set *s, const char *name, sp_dtype dtype, int ndim, const int64_t *shape,
           const st_tensor **out, sp_err *err);

/* ---- writer -------------------------------------------------------------------------- */
typedef struct st_writer st_writer;
st_writer *st_writer_create(void);
/* Adds a tensor; data is copied now (the caller may free it after the call). */
int st_writer_add(st_writer *w, const char *name, sp_dtype dtype, int ndim, const int64_t *shape,
                  const void *data, sp_err *err);
int st_writer_set_metadata(st_writer *w, const char *key, const char *value, sp_err *err);
/* Writes the file atomically. Header padded so every tensor is aligned to 8 bytes. */
int st_writer_save(st_writer *w, const char *path, sp_err *err);
void st_writer_free(st_writer *w);

/* dtype name ("BF16") <-> sp_dtype; SP_DT_UNKNOWN when not recognised */
sp_dtype st_dtype_from_name(const char *s);

#endif
