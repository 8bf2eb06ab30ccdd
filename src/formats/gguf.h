/* gguf.h — read GGUF v2/v3 files (docs/GGUF-FORMAT.md §1): metadata key/values and tensor infos.
 *
 * The reader mmaps the file read-only and validates every count, length and offset against
 * the file size before forming a pointer: a truncated or hostile file is an error naming
 * the file and the key / tensor, never a crash. Strings point into the mapping and are NOT
 * NUL-terminated (use the length). Tensor names must be unique and no two tensors' bytes may
 * overlap. Only little-endian files are read. Writing GGUF is
 * gguf_write.c's job (not here). */
#ifndef SPECULA_GGUF_H
#define SPECULA_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"

/* GGUF_TYPE_* value types, GGUF_MAX_DIMS and GGUF_MAGIC are shared with the writer */
#include "gguf_write.h"

#define GGUF_TYPE_COUNT 13 /* value types 0..12 */

typedef struct {
    const char *ptr; /* into the mapping; not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    uint32_t type; /* GGUF_TYPE_* */
    /* scalars (type != ARRAY): the value widened; s for STRING */
    union {
        uint64_t u;
        int64_t i;
        double f;
        gguf_str s;
    } v;
    /* arrays (type == ARRAY) */
    uint32_t arr_type;     /* element type */
    uint64_t arr_n;        /* element count */
    const uint8_t *arr_data; /* first element (raw little-endian) */
    gguf_str *arr_strs;    /* arr_n strings when arr_type == STRING (owned), else NULL */
    const uint8_t *raw;    /* the encoded value as in the file (after the type tag), raw_len bytes */
    uint64_t raw_len;
} gguf_kv;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    uint64_t dims[GGUF_MAX_DIMS]; /* dims[0] fastest-varying */
    uint32_t type;                /* ggml type id (docs/GGUF-FORMAT.md §3) */
    uint64_t offset;              /* relative to the data section */
    uint64_t nbytes;              /* 0 when the ggml type is unknown to this reader */
} gguf_tensor_info;

typedef struct {
    char path[512];
    const uint8_t *map;
    size_t size;
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor_info *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* start of tensor data in the file */
} gguf_file;

/* Open and validate. Returns NULL with *err set on failure. Free with sp_gguf_close. */
gguf_file *sp_gguf_open(const char *path, sp_err *err);
void sp_gguf_close(gguf_file *f);

/* index of key, or -1 when absent */
int64_t sp_gguf_find(const gguf_file *f, const char *key);
const gguf_kv *sp_gguf_get(const gguf_file *f, const char *key); /* NULL when absent */

/* Typed getters. Return 0 on success; 1 when the key is absent (outputs untouched);
 * -1 with *err set when it is present with an incompatible type or out-of-range value.
 * Integer getters accept any integer type (and BOOL) whose value fits. */
int sp_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, sp_err *err);
int sp_gguf_get_bool(const gguf_file *f, const char *key, int *out, sp_err *err);
int sp_gguf_get_f64(const gguf_file *f, const char *key, double *out, sp_err *err);
int sp_gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, sp_err *err);
/* array of elem_type (-1: any); *out points at the kv */
int sp_gguf_get_arr(const gguf_file *f, const char *key, int elem_type, const gguf_kv **out,
                 sp_err *err);

/* element i of a numeric array, widened (caller checked i < arr_n); as an integer, a float element
 * is truncated, and one that is NaN or outside the int64 range reads as INT64_MIN */
double sp_gguf_arr_f64(const gguf_kv *kv, uint64_t i);
int64_t sp_gguf_arr_i64(const gguf_kv *kv, uint64_t i);

const char *sp_gguf_type_name(uint32_t type);
/* bytes of one ggml block and values per block; 0 when unknown */
size_t sp_ggml_type_block_bytes(uint32_t ggml_type);
size_t sp_ggml_type_block_values(uint32_t ggml_type);
/* "Q4_K", "BF16", ... for every ggml type id llama.cpp defines; "unknown" otherwise */
const char *sp_ggml_type_label(uint32_t ggml_type);

/* tensor lookup; data pointer NULL (with *err) when the type is unknown */
const gguf_tensor_info *sp_gguf_find_tensor(const gguf_file *f, const char *name);
const void *sp_gguf_tensor_data(const gguf_file *f, const gguf_tensor_info *t, sp_err *err);
/* Hand back to the kernel the mapped pages wholly inside [p, p + n) (a tensor whose bytes the
 * caller copied, e.g. into a repacked layout): they leave the process's resident memory and are
 * read again from the file if ever touched. Outside the map, or where the kernel declines,
 * nothing changes. */
void sp_gguf_drop_pages(const gguf_file *f, const void *p, size_t n);

#endif
