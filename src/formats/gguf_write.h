/* gguf_write.h — write GGUF version 3 files (docs/GGUF-FORMAT.md §1).
 *
 * Build the file in memory as a list of metadata key/values and tensor descriptions, then
 * sp_gguf_writer_save() writes it crash-safely (temp file + fsync + rename). Tensor data is
 * streamed: each tensor either points at caller-owned bytes or names a fill callback that
 * produces its bytes chunk by chunk while saving, so a converter never holds a whole model
 * in memory. Alignment is 32 (the GGUF default; `general.alignment` is not written).
 *
 * Dimensions are given in ggml order (ne[0] fastest), i.e. the REVERSE of a PyTorch shape:
 * a PyTorch [out, in] weight is ne = {in, out}. This writer does not read GGUF (see
 * gguf.h for the reader) and does not quantize: a fill callback produces quantized rows. */
#ifndef SPECULA_GGUF_WRITE_H
#define SPECULA_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_VERSION 3
#define GGUF_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 63 /* ggml keeps names in char[64] */

/* metadata value types (docs/GGUF-FORMAT.md §1) */
typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

/* ggml tensor types this writer is used with (docs/GGUF-FORMAT.md §3) */
typedef enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I64 = 27, /* integer tables (EAGLE-3 d2t) */
    GGML_TYPE_BF16 = 30,
} ggml_type;

/* bytes per element of a gguf scalar type; 0 for STRING / ARRAY */
size_t sp_gguf_type_size(gguf_type t);
/* bytes per element of F32 / F16 / BF16 / I64; 0 for anything else */
size_t sp_ggml_type_size(ggml_type t);
const char *sp_ggml_type_name(ggml_type t);
/* bytes of one row of ne0 elements (any type above); 0 when ne0 is not a whole number of blocks */
size_t sp_ggml_row_size(ggml_type t, int64_t ne0);

typedef struct gguf_writer gguf_writer;

gguf_writer *sp_gguf_writer_create(void);
void sp_gguf_writer_free(gguf_writer *w);

/* Metadata. Keys are copied; setting a key twice is an error (names the key). Values are
 * written in the order they were set. */
int sp_gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v, sp_err *err);
int sp_gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v, sp_err *err);
int sp_gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v, sp_err *err);
int sp_gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v, sp_err *err);
int sp_gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, sp_err *err);
int sp_gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, sp_err *err);
int sp_gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, sp_err *err);
int sp_gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v, sp_err *err);
int sp_gguf_writer_set_f32(gguf_writer *w, const char *key, float v, sp_err *err);
int sp_gguf_writer_set_f64(gguf_writer *w, const char *key, double v, sp_err *err);
int sp_gguf_writer_set_bool(gguf_writer *w, const char *key, int v, sp_err *err);
int sp_gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, sp_err *err);
/* Array of n scalars of elem_type (not STRING/ARRAY), read from data (copied). For BOOL,
 * data holds one byte per element, each 0 or 1. */
int sp_gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data,
                        size_t n, sp_err *err);
/* Array of n strings (copied). */
int sp_gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, size_t n,
                            sp_err *err);
/* Append an already-encoded value (the bytes after the u32 type tag, exactly as they appear in
 * a GGUF file) — used to copy keys from another GGUF without decoding them. */
int sp_gguf_writer_set_raw(gguf_writer *w, const char *key, gguf_type type, const void *value,
                        size_t nbytes, sp_err *err);

/* Produces bytes [offset, offset + n) of a tensor's data into dst. The writer calls it with
 * consecutive ranges whose offsets and sizes are multiples of the tensor's row size
 * (ne[0] · element size), so a callback can convert or reorder whole rows. */
typedef int (*gguf_fill_fn)(void *ctx, void *dst, size_t offset, size_t n, sp_err *err);

/* Describe a tensor. ne: ggml-order dims (ndim 1..4). Exactly one of data (borrowed, must
 * stay valid until save/free) or fill (+ ctx, also borrowed) is given. */
int sp_gguf_writer_add_tensor(gguf_writer *w, const char *name, ggml_type type, int ndim,
                           const int64_t *ne, const void *data, gguf_fill_fn fill, void *ctx,
                           sp_err *err);

int sp_gguf_writer_n_tensors(const gguf_writer *w);
int sp_gguf_writer_n_kv(const gguf_writer *w);

/* Write the file atomically: PATH.tmp.PID, fsync, rename. On failure no file appears at
 * path. Memory used while writing: one chunk (<= 64 MiB) of tensor data. */
int sp_gguf_writer_save(gguf_writer *w, const char *path, sp_err *err);
/* Write path itself, in place (a scratch file of the caller's): no temp name, no rename; on
 * failure the file is removed. */
int sp_gguf_writer_save_in_place(gguf_writer *w, const char *path, sp_err *err);

#endif
