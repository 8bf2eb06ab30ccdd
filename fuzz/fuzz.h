/* fuzz.h — what every libFuzzer target under fuzz/ shares (one target per fuzz_NAME.c, built by
 * `make fuzz-build` as build-fuzz/fuzz_NAME with -fsanitize=fuzzer,address,undefined).
 *
 * A target hands the fuzzer's bytes to one parser through the same entry point the program
 * uses, then walks whatever the parser accepted (every tensor's bytes, every key), so an
 * out-of-bounds pointer or length the parser let through is caught by ASan. Parsers that take
 * a path read the bytes from an in-memory file (memfd); the library's logging is silenced. */
#ifndef SPECULA_FUZZ_H
#define SPECULA_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"

/* An in-memory regular file holding data[0, size); its path ("/proc/self/fd/N") is written to
 * path. Returns the descriptor (close it when done), or -1. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap) {
    int fd = memfd_create("specula-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* A NUL-terminated copy of data (the caller frees it). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) return NULL;
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* Read every byte of [p, p + n) (volatile loads the compiler cannot drop): an accepted tensor
 * whose bytes lie outside its file is an ASan report here. */
static inline void fuzz_touch(const void *p, size_t n) {
    const volatile unsigned char *b = p;
    unsigned char x = 0;
    for (size_t i = 0; i < n; i++) x ^= b[i]; /* volatile reads: none is optimised away */
    (void)x;
}

/* Silence the library's warnings (one per rejected input would flood the fuzzer's output). */
static inline void fuzz_quiet(void) { sp_log_level = -1; }

#endif
