/* safetensors.h — read and write safetensors files and sharded checkpoints (docs/SAFETENSORS.md).
 *
 * The reader mmaps each file read-only and validates every rule of docs/SAFETENSORS.md §2 before any tensor
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

/* Open a single .safetensors file. On success *out owns the mapping; every st_tensor pointer
 * and string obtained from it stays valid until sp_st_close(*out). On failure *out is NULL,
 * nothing is left open and err names the file (and tensor) and the rule broken. */
int sp_st_open_file(st_set **out, const char *path, sp_err *err);
/* Open a model directory: model.safetensors.index.json if present (every distinct shard is
 * opened once; each weight_map name must be in its shard; no tensor may be in two shards),
 * else model.safetensors. Same ownership and failure rules as sp_st_open_file. */
int sp_st_open_dir(st_set **out, const char *dir, sp_err *err);
/* Unmaps every file and frees every owned copy; s may be NULL. */
void sp_st_close(st_set *s);

/* Tensors are kept sorted by name: sp_st_at(s, 0 .. sp_st_count(s)-1) walks them in strcmp order. */
int sp_st_count(const st_set *s);
const st_tensor *sp_st_at(const st_set *s, int i);
/* NULL when absent */
const st_tensor *sp_st_find(const st_set *s, const char *name);
/* __metadata__ value for key, or NULL */
const char *sp_st_metadata(const st_set *s, const char *key);
/* The tensor's dtype as written in the file ("BF16", "F8_E4M3", ...). Tensors whose dtype has
 * no sp_dtype (F4, F6_*, F8_*, C64) have t->dtype == SP_DT_UNKNOWN; this names them. */
const char *sp_st_tensor_dtype_name(const st_tensor *t);
/* Absolute byte offset of the tensor's data in t->file (8 + N + BEGIN). */
uint64_t sp_st_tensor_file_offset(const st_tensor *t);

/* Look up `name` and check dtype/shape. Any mismatch → error naming the tensor, its file,
 * the expected and the found shape. dtype SP_DT_UNKNOWN accepts any float dtype
 * (F32/F16/BF16). ndim/shape give the expected shape; ndim < 0 skips the shape check. */
int sp_st_get(const st_set *s, const char *name, sp_dtype dtype, int ndim, const int64_t *shape,
           const st_tensor **out, sp_err *err);

/* A 2-D weight [n, k] for matmul: a float tensor (F32/F16/BF16) of that shape, or block-quantized
 * rows stored as a U8 tensor [n, row bytes] named in the __metadata__ as "quant.NAME": "Q8_0"
 * (or Q4_0, Q4_K, Q6_K; docs/QUANTIZE.md). *data points into the mapping; *dt is its type. */
int sp_st_get_weight(const st_set *s, const char *name, int64_t n, int64_t k, const void **data, sp_dtype *dt,
                  sp_err *err);

/* ---- writer -------------------------------------------------------------------------- */
typedef struct st_writer st_writer;
st_writer *sp_st_writer_create(void);
/* Adds a tensor; data is copied now (the caller may free it after the call). */
int sp_st_writer_add(st_writer *w, const char *name, sp_dtype dtype, int ndim, const int64_t *shape,
                  const void *data, sp_err *err);
/* Adds a tensor by reference: only the pointer is kept, so the caller must keep data alive
 * and unchanged until the last sp_st_writer_save* call. Nothing is copied (for multi-GB saves). */
int sp_st_writer_add_ref(st_writer *w, const char *name, sp_dtype dtype, int ndim,
                      const int64_t *shape, const void *data, sp_err *err);
/* __metadata__ entry; {"format": "pt"} is present by default (setting "format" replaces it). */
int sp_st_writer_set_metadata(st_writer *w, const char *key, const char *value, sp_err *err);
/* Writes the file atomically (path.tmp.PID, fsync, rename, fsync dir), streaming each tensor
 * from its buffer. Layout as the reference writer: tensors sorted by descending element size,
 * then name; header padded with spaces so 8+N is a multiple of 8 and every tensor is aligned.
 * Tensor names must be unique. The writer is unchanged and may be saved again. */
int sp_st_writer_save(st_writer *w, const char *path, sp_err *err);
/* Writes a checkpoint directory (created if needed). Tensors, in insertion order, are cut into
 * shards of at most max_shard_bytes of tensor data (a larger tensor gets a shard of its own;
 * 0 = no limit), written as model-0000i-of-0000n.safetensors, then
 * model.safetensors.index.json (each file atomic; the index last). When everything fits in one
 * shard, writes a single model.safetensors instead (and removes a stale index, which would
 * otherwise shadow it). */
int sp_st_writer_save_sharded(st_writer *w, const char *dir, uint64_t max_shard_bytes, sp_err *err);
void sp_st_writer_free(st_writer *w);

/* dtype name ("BF16") <-> sp_dtype; SP_DT_UNKNOWN when not recognised */
sp_dtype sp_st_dtype_from_name(const char *s);

#endif
