/* core.c — errors, logging, f16 conversion, counter-based RNG, timers, crash-safe files. */
#include "core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- errors -------------------------------------------------------------------------- */
int sp_err_set(sp_err *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int sp_err_wrap(sp_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.400s: %.600s", prefix, old);
    return -1;
}

void sp_assert_fail(const char *what, const char *file, int line) {
    fprintf(stderr, "specula: internal assertion failed: %s (%s:%d)\n", what, file, line);
    abort();
}

/* ---- logging ------------------------------------------------------------------------- */
int sp_log_level = SP_LOG_WARN;

void sp_log(int level, const char *fmt, ...) {
    if (level > sp_log_level) return;
    static const char *names[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "specula: %s: ", names[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- f16 ----------------------------------------------------------------------------- */
float sp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t sp_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t ax = u & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow → inf */
    if (ax < 0x38800000u) {                                   /* subnormal or zero */
        float a;
        memcpy(&a, &ax, 4);
        /* a * 2^24 rounded to nearest even */
        float s = a * 16777216.0f;
        uint32_t r = (uint32_t)nearbyintf(s);
        return (uint16_t)(sign | r);
    }
    uint32_t e = ((ax >> 23) - 127 + 15);
    uint32_t m = ax & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

size_t sp_dtype_size(sp_dtype dt) {
    switch (dt) {
    case SP_DT_F32: case SP_DT_I32: case SP_DT_U32: return 4;
    case SP_DT_F16: case SP_DT_BF16: case SP_DT_I16: case SP_DT_U16: return 2;
    case SP_DT_I64: case SP_DT_U64: case SP_DT_F64: return 8;
    case SP_DT_U8: case SP_DT_I8: case SP_DT_BOOL: return 1;
    default: return 0;
    }
}

const char *sp_dtype_name(sp_dtype dt) {
    static const char *names[] = {"F32",  "F16",  "BF16", "I64",  "I32",  "U8",   "BOOL",
                                  "I8",   "I16",  "U16",  "U32",  "U64",  "F64",  "Q8_0",
                                  "Q4_0", "Q4_K", "Q6_K", "Q8_K", "Q5_0", "Q5_K", "Q3_K", "Q2_K",
                                  "Q5_1", "IQ4_NL", "IQ4_XS", "Q4_1", "QA8", "UNKNOWN"};
    _Static_assert(sizeof names / sizeof names[0] == SP_DT_UNKNOWN + 1, "one name per sp_dtype");
    return (unsigned)dt <= SP_DT_UNKNOWN ? names[dt] : "UNKNOWN";
}

int sp_dtype_is_quant(sp_dtype dt) { return dt >= SP_DT_Q8_0 && dt <= SP_DT_QA8; }

/* block geometry of the quantized types (layouts in src/kernels/quant.h, docs/QUANT.md) */
size_t sp_dtype_block_elems(sp_dtype dt) {
    switch (dt) {
    case SP_DT_Q8_0: case SP_DT_Q4_0: case SP_DT_Q5_0: case SP_DT_Q5_1: case SP_DT_IQ4_NL: case SP_DT_Q4_1:
    case SP_DT_QA8: return 32;
    case SP_DT_Q4_K: case SP_DT_Q6_K: case SP_DT_Q8_K: case SP_DT_Q5_K: case SP_DT_Q3_K: case SP_DT_Q2_K:
    case SP_DT_IQ4_XS: return 256;
    default: return sp_dtype_size(dt) ? 1 : 0;
    }
}

size_t sp_dtype_block_bytes(sp_dtype dt) {
    switch (dt) {
    case SP_DT_Q8_0: return 34;
    case SP_DT_Q4_0: return 18;
    case SP_DT_Q5_0: return 22;
    case SP_DT_Q4_K: return 144;
    case SP_DT_Q6_K: return 210;
    case SP_DT_Q8_K: return 292;
    case SP_DT_Q5_K: return 176;
    case SP_DT_Q3_K: return 110;
    case SP_DT_Q2_K: return 84;
    case SP_DT_Q5_1: return 24;
    case SP_DT_IQ4_NL: return 18;
    case SP_DT_IQ4_XS: return 136;
    case SP_DT_Q4_1: return 20;
    case SP_DT_QA8: return 36;
    default: return sp_dtype_size(dt);
    }
}

size_t sp_dtype_row_bytes(sp_dtype dt, size_t n) {
    size_t be = sp_dtype_block_elems(dt);
    if (!be || n % be) return 0;
    return n / be * sp_dtype_block_bytes(dt);
}

void sp_to_f32(float *dst, const void *src, sp_dtype dt, size_t n) {
    switch (dt) {
    case SP_DT_F32: memcpy(dst, src, n * 4); break;
    case SP_DT_BF16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = sp_bf16_to_f32(s[i]);
        break;
    }
    case SP_DT_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = sp_f16_to_f32(s[i]);
        break;
    }
    case SP_DT_F64: {
        const double *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
        break;
    }
    default: SP_ASSERT(!"sp_to_f32: not a float dtype");
    }
}

/* ---- RNG: Philox-2x64-style rounds over (counter, stream) keyed by seed --------------- */
static inline uint64_t mulhilo(uint64_t a, uint64_t b, uint64_t *hi) {
    __uint128_t p = (__uint128_t)a * b;
    *hi = (uint64_t)(p >> 64);
    return (uint64_t)p;
}

uint64_t sp_rng_u64(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint64_t c0 = counter, c1 = stream, k = seed;
    for (int r = 0; r < 10; r++) {
        uint64_t hi, lo = mulhilo(0xD2B74407B1CE6E93ull, c0, &hi);
        c0 = hi ^ k ^ c1;
        c1 = lo;
        k += 0x9E3779B97F4A7C15ull;
    }
    return c0 ^ (c1 >> 1);
}

double sp_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    return (double)(sp_rng_u64(seed, stream, counter) >> 11) * (1.0 / 9007199254740992.0);
}

float sp_rng_normal(uint64_t seed, uint64_t stream, uint64_t counter) {
    /* Box–Muller from two draws at counters 2c and 2c+1 */
    double u1 = sp_rng_uniform(seed, stream, 2 * counter);
    double u2 = sp_rng_uniform(seed, stream, 2 * counter + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- owned allocations ------------------------------------------------------------------- */
/* room for one more pointer */
static int owner_reserve(sp_owner *o) {
    if (o->n < o->cap) return 0;
    int cap = o->cap ? 2 * o->cap : 64;
    void **p = realloc(o->p, (size_t)cap * sizeof *p);
    if (!p) return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

void *sp_owner_calloc(sp_owner *o, size_t bytes) {
    if (owner_reserve(o)) return NULL;
    void *x = calloc(1, bytes ? bytes : 1);
    if (x) o->p[o->n++] = x;
    return x;
}

void *sp_owner_alloc64(sp_owner *o, size_t bytes) {
    void *x = NULL;
    if (owner_reserve(o) || posix_memalign(&x, 64, bytes ? bytes : 1)) return NULL;
    o->p[o->n++] = x;
    return x;
}

void sp_owner_free(sp_owner *o) {
    for (int i = 0; i < o->n; i++) free(o->p[i]);
    free(o->p);
    o->p = NULL;
    o->n = o->cap = 0;
}

/* ---- time ---------------------------------------------------------------------------- */
double sp_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---- files --------------------------------------------------------------------------- */
int sp_path_join(char *out, size_t cap, const char *a, const char *b) {
    size_t la = strlen(a);
    int n = (la && a[la - 1] == '/') ? snprintf(out, cap, "%s%s", a, b)
                                     : snprintf(out, cap, "%s/%s", a, b);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

int sp_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int sp_mkdir_p(const char *path, sp_err *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return sp_err_set(err, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return sp_err_set(err, "cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return sp_err_set(err, "cannot create directory %s: %s", buf, strerror(errno));
    return 0;
}

int sp_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return -1;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return -1;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[4200];
            if (sp_path_join(sub, sizeof sub, path, e->d_name) == 0) sp_remove_tree(sub);
        }
        closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

int sp_tmp_name(char *out, size_t cap, const char *path) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--; /* "out/" names the directory "out" */
    int n = snprintf(out, cap, "%.*s.tmp.%ld", (int)len, path, (long)getpid());
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int sp_remove_stale_tmp(const char *path) {
    char dirbuf[4200], basebuf[4200];
    snprintf(dirbuf, sizeof dirbuf, "%s", path);
    snprintf(basebuf, sizeof basebuf, "%s", path);
    const char *dir = dirname(dirbuf), *base = basename(basebuf);
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (strncmp(nm, base, bl) != 0 || strncmp(nm + bl, ".tmp.", 5) != 0) continue;
        const char *digits = nm + bl + 5;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (!*digits || *end || errno || pid <= 0 || pid == (long)getpid()) continue;
        /* a live process (ours or another user's) keeps its temp file */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char full[4200];
        if (sp_path_join(full, sizeof full, dir, nm) == 0 && sp_remove_tree(full) == 0) {
            sp_log(SP_LOG_WARN, "removed %s, left by process %ld that no longer runs", full, pid);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

int sp_dir_publish(const char *tmp, const char *dir, sp_err *err) {
    if (rename(tmp, dir) == 0) { /* dir did not exist, or was an empty directory */
        sp_fsync_parent_dir(dir);
        return 0;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sp_err_set(err, "cannot move %s to %s: %s", tmp, dir, strerror(errno));
    /* dir holds other files: move ours in one by one (each rename atomic), then drop tmp */
    DIR *d = opendir(tmp);
    if (!d) return sp_err_set(err, "cannot read %s: %s", tmp, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char a[4200], b[4200];
        if (sp_path_join(a, sizeof a, tmp, e->d_name) || sp_path_join(b, sizeof b, dir, e->d_name))
            rc = sp_err_set(err, "path too long: %s/%s", dir, e->d_name);
        else if (rename(a, b) != 0)
            rc = sp_err_set(err, "cannot move %s to %s: %s", a, b, strerror(errno));
    }
    closedir(d);
    if (rc) return -1;
    rmdir(tmp);
    sp_fsync_parent_dir(dir);
    return 0;
}

enum { AFILE_BUF = 1 << 20 };

/* what already sits at path: 0 nothing or a regular file (temp + rename), 1 a character device
 * or FIFO (written in place), -1 something no file may replace (err set) */
static int afile_target_kind(const char *path, sp_err *err) {
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return 0;
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return 1;
    const char *what = S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file";
    return sp_err_set(err, "output %s is %s: refusing to write over it", path, what);
}

static int afile_start(sp_afile *f, const char *path, sp_afile_mode mode, sp_err *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->mode = mode;
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path)
        return sp_err_set(err, "path too long: %s", path);
    if (mode == SP_AFILE_RENAME) {
        if (sp_tmp_name(f->tmp, sizeof f->tmp, path)) return sp_err_set(err, "path too long: %s", path);
        sp_remove_stale_tmp(path);
    } else {
        snprintf(f->tmp, sizeof f->tmp, "%s", path);
    }
    f->buf = malloc(AFILE_BUF);
    if (!f->buf) return sp_err_set(err, "out of memory writing %s", path);
    /* a FIFO's open waits for a reader, as cp's does */
    int flags = mode == SP_AFILE_DEVICE ? O_WRONLY : O_WRONLY | O_CREAT | O_TRUNC;
    f->fd = open(f->tmp, flags | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        free(f->buf);
        f->buf = NULL;
        return sp_err_set(err, "cannot %s %s: %s", mode == SP_AFILE_DEVICE ? "open" : "create", f->tmp,
                          strerror(errno));
    }
    return 0;
}

int sp_afile_open(sp_afile *f, const char *path, sp_err *err) {
    int kind = afile_target_kind(path, err);
    if (kind < 0) {
        memset(f, 0, sizeof *f);
        f->fd = -1;
        return -1;
    }
    return afile_start(f, path, kind ? SP_AFILE_DEVICE : SP_AFILE_RENAME, err);
}

int sp_afile_open_direct(sp_afile *f, const char *path, sp_err *err) {
    return afile_start(f, path, SP_AFILE_IN_PLACE, err);
}

static void afile_drain(sp_afile *f, const unsigned char *p, size_t n) {
    while (n > 0 && !f->failed) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            f->failed = errno ? errno : EIO;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

void sp_afile_write(sp_afile *f, const void *data, size_t n) {
    if (f->failed || n == 0) return;
    if (f->used + n > AFILE_BUF) {
        afile_drain(f, f->buf, f->used);
        f->used = 0;
    }
    if (n >= AFILE_BUF) {
        afile_drain(f, data, n);
        return;
    }
    memcpy(f->buf + f->used, data, n);
    f->used += n;
}

void sp_afile_abort(sp_afile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->fd >= 0 && f->mode != SP_AFILE_DEVICE) unlink(f->tmp);
    f->fd = -1;
    free(f->buf);
    f->buf = NULL;
}

void sp_fsync_parent_dir(const char *path) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

int sp_afile_commit(sp_afile *f, sp_err *err) {
    afile_drain(f, f->buf, f->used);
    f->used = 0;
    /* a terminal, pipe or /dev/null cannot be synced (EINVAL): nothing is lost */
    if (!f->failed && fsync(f->fd) != 0 && !(f->mode == SP_AFILE_DEVICE && (errno == EINVAL || errno == EROFS)))
        f->failed = errno;
    if (f->failed) {
        sp_err_set(err, "cannot write %s: %s", f->tmp, strerror(f->failed));
        sp_afile_abort(f);
        return -1;
    }
    int rc = close(f->fd);
    f->fd = -1;
    free(f->buf);
    f->buf = NULL;
    if (f->mode != SP_AFILE_RENAME) {
        if (rc != 0) return sp_err_set(err, "cannot write %s: %s", f->path, strerror(errno));
        return 0;
    }
    if (rc != 0 || rename(f->tmp, f->path) != 0) {
        sp_err_set(err, "cannot move %s to %s: %s", f->tmp, f->path, strerror(errno));
        unlink(f->tmp);
        return -1;
    }
    sp_fsync_parent_dir(f->path);
    return 0;
}

int sp_write_file_atomic(const char *path, const void *buf, size_t n, sp_err *err) {
    sp_afile f;
    if (sp_afile_open(&f, path, err)) return -1;
    sp_afile_write(&f, buf, n);
    return sp_afile_commit(&f, err);
}

int sp_open_regular(const char *path, off_t *size, sp_err *err) {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; regular files ignore the flag */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return sp_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        sp_err_set(err, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sp_err_set(err, "%s: not a regular file (%s)", path,
                          S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                          : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a special file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size) *size = st.st_size;
    return fd;
}

int sp_check_regular(const char *path, sp_err *err) {
    int fd = sp_open_regular(path, NULL, err);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

int sp_read_file(const char *path, char **out, size_t *n, sp_err *err) {
    off_t len = 0;
    int fd = sp_open_regular(path, &len, err);
    if (fd < 0) return -1;
    if ((uint64_t)len >= SIZE_MAX / 2) {
        close(fd);
        return sp_err_set(err, "%s: file too large (%lld bytes)", path, (long long)len);
    }
    char *buf = malloc((size_t)len + 1);
    if (!buf) {
        close(fd);
        return sp_err_set(err, "out of memory reading %s (%lld bytes)", path, (long long)len);
    }
    size_t got = 0;
    while (got < (size_t)len) {
        ssize_t r = read(fd, buf + got, (size_t)len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            sp_err_set(err, "%s: short read (%zu of %lld bytes)%s%s", path, got, (long long)len, r < 0 ? ": " : "",
                       r < 0 ? strerror(errno) : "");
            free(buf);
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    *out = buf;
    if (n) *n = (size_t)len;
    return 0;
}
