/* core.h — the pieces every module uses: error values, the one ASSERT, logging,
 * bf16/f16 conversion, a counter-based RNG, timers and crash-safe file writes.
 *
 * Nothing here allocates behind the caller's back or calls exit (except ASSERT, which
 * is for broken internal invariants only, never for bad input). */
#ifndef SPECULA_CORE_H
#define SPECULA_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "specula.h" /* sp_err, sp_dtype: the public shared types */

/* ---- errors ------------------------------------------------------------------------
 * Library functions return 0 on success and -1 on failure, writing a one-line message
 * (what is wrong, naming the file / tensor / key) into *err. err may be NULL. */
int sp_err_set(sp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* prepend context: "ctx: <old message>" */
int sp_err_wrap(sp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Internal invariant: aborts with file and line. Never used for bad input. */
#define SP_ASSERT(cond)                                                                   \
    do {                                                                                  \
        if (!(cond)) sp_assert_fail(#cond, __FILE__, __LINE__);                           \
    } while (0)
_Noreturn void sp_assert_fail(const char *what, const char *file, int line);

/* ---- logging (stderr) -------------------------------------------------------------- */
enum { SP_LOG_ERROR = 0, SP_LOG_WARN = 1, SP_LOG_INFO = 2, SP_LOG_DEBUG = 3 };
extern int sp_log_level;
void sp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- numeric formats --------------------------------------------------------------- */
static inline float sp_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* round to nearest even; NaN stays NaN */
static inline uint16_t sp_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float sp_f16_to_f32(uint16_t h);
uint16_t sp_f32_to_f16(float f);
/* bytes per element; 0 for unknown and for the block-quantized types (see below) */
size_t sp_dtype_size(sp_dtype dt);
const char *sp_dtype_name(sp_dtype dt);
/* 1 for a block-quantized type (SP_DT_Q8_0 .. SP_DT_QA8), else 0 */
int sp_dtype_is_quant(sp_dtype dt);
/* elements per block: 32 or 256 for a quantized type, 1 for a plain one, 0 for unknown */
size_t sp_dtype_block_elems(sp_dtype dt);
/* bytes per block (the element size for a plain type), 0 for unknown */
size_t sp_dtype_block_bytes(sp_dtype dt);
/* bytes of n elements: n / block_elems · block_bytes; 0 when n is not a whole number of
 * blocks or dt is unknown */
size_t sp_dtype_row_bytes(sp_dtype dt, size_t n);
/* convert n elements of any float dtype to f32 */
void sp_to_f32(float *dst, const void *src, sp_dtype dt, size_t n);

/* ---- counter-based RNG ---------------------------------------------------------------
 * Philox-style stateless generator: the value depends only on (seed, stream, counter), so
 * results do not depend on thread count or call order. */
uint64_t sp_rng_u64(uint64_t seed, uint64_t stream, uint64_t counter);
/* uniform in [0, 1) with 24 bits of resolution per float, 53 for double */
double sp_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter);
float sp_rng_normal(uint64_t seed, uint64_t stream, uint64_t counter);

/* ---- time -------------------------------------------------------------------------- */
double sp_time_ms(void);

/* ---- owned allocations ---------------------------------------------------------------
 * Small arrays a loader converts (norm weights, tables) and frees all at once with its object. */
typedef struct {
    void **p;
    int n, cap;
} sp_owner;
/* zeroed allocation recorded in o; NULL when out of memory */
void *sp_owner_calloc(sp_owner *o, size_t bytes);
/* bytes starting at a multiple of 64, not cleared (the caller writes every byte) */
void *sp_owner_alloc64(sp_owner *o, size_t bytes);
/* free every allocation of o (o itself is the caller's) */
void sp_owner_free(sp_owner *o);

/* ---- files ------------------------------------------------------------------------- */
/* Crash-safe streaming write: data goes to path.tmp.PID; commit fsyncs it, renames it over path
 * and fsyncs the directory, so readers see the old file or the whole new one, never a torn one.
 * Writes are buffered; the first failure is remembered and reported by commit. abort (or a
 * failed commit) removes the temp file.
 * When path already names a character device or a FIFO (/dev/null, /dev/stdout on a pipe), the
 * data is written to it directly, as cp does, and nothing is renamed over it; a block device or a
 * socket is refused with an error naming it. sp_afile_open_direct writes path itself in place (a
 * scratch file of the caller's: no temp name, no rename; abort removes it). */
typedef enum { SP_AFILE_RENAME, SP_AFILE_IN_PLACE, SP_AFILE_DEVICE } sp_afile_mode;
typedef struct {
    int fd;
    int failed;           /* errno of the first failed write, 0 if none */
    sp_afile_mode mode;
    size_t used;
    unsigned char *buf;   /* 1 MiB write buffer */
    char path[4096], tmp[4200]; /* tmp: the file written (path itself unless mode is RENAME) */
} sp_afile;
int sp_afile_open(sp_afile *f, const char *path, sp_err *err);
int sp_afile_open_direct(sp_afile *f, const char *path, sp_err *err);
void sp_afile_write(sp_afile *f, const void *data, size_t n);
int sp_afile_commit(sp_afile *f, sp_err *err);
void sp_afile_abort(sp_afile *f);
/* Temp names: a file or directory being written as path is named path.tmp.PID (PID: the writer's
 * process id). sp_tmp_name writes that name for this process (-1 if it does not fit in cap).
 * sp_remove_stale_tmp removes every path.tmp.N beside path whose process N no longer runs (what a
 * killed writer left), logging each; it returns how many it removed. sp_afile_open calls it. */
int sp_tmp_name(char *out, size_t cap, const char *path);
int sp_remove_stale_tmp(const char *path);
/* Remove path and, when it is a directory, everything under it. 0 or -1. */
int sp_remove_tree(const char *path);
/* Publish the finished directory tmp as dir: one rename when dir does not exist (or is empty),
 * so readers see all of it or nothing; into an existing dir, each entry is renamed over its
 * namesake and tmp removed. The caller removes tmp on failure. */
int sp_dir_publish(const char *tmp, const char *dir, sp_err *err);
/* fsync the directory holding path (after a rename or an unlink there) */
void sp_fsync_parent_dir(const char *path);
/* Write buf to path crash-safely (sp_afile in one call). */
int sp_write_file_atomic(const char *path, const void *buf, size_t n, sp_err *err);
/* Open path for reading after checking it is a regular file (a directory, FIFO or device is an
 * error naming it; a FIFO never blocks the open). Returns the descriptor (the caller closes it)
 * with the size in *size, or -1 with err set. */
int sp_open_regular(const char *path, off_t *size, sp_err *err);
/* 0 when path is a regular file that can be opened for reading, else -1 with err (as above);
 * for readers that open the file themselves (json_load_file). */
int sp_check_regular(const char *path, sp_err *err);
/* Read a whole regular file into a malloc'd NUL-terminated buffer. Caller frees. */
int sp_read_file(const char *path, char **out, size_t *n, sp_err *err);
int sp_mkdir_p(const char *path, sp_err *err);
int sp_path_join(char *out, size_t cap, const char *a, const char *b);
int sp_file_exists(const char *path);

#endif
