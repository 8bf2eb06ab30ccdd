/* bandwidth.c — DRAM read bandwidth: each pool thread first touches (so its pages are
 * local) and then streams its own contiguous share of one large buffer; the caller times
 * whole parallel passes and keeps the fastest. The loads feed XOR accumulators (1-cycle
 * latency, no dependence on float timing) whose result is kept so nothing is elided. */
#include "bandwidth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels_internal.h"


#define BW_BYTES ((size_t)256 << 20) /* 8x a 32 MB L3 */
#define BW_MAX_PASSES 12
#define BW_BUDGET_MS 1300.0 /* fill + timed passes; at least 3 passes run */

typedef struct {
    uint8_t *buf;
    size_t bytes;
    int fill;          /* 1: first-touch fill instead of reading */
    uint64_t sink[64]; /* one slot per thread (8 bytes apart is fine: written once) */
} bw_ctx;

static void thread_share(const bw_ctx *c, int i, int n, size_t *lo, size_t *hi) {
    size_t lines = c->bytes / 4096; /* page granularity */
    *lo = lines * (size_t)i / (size_t)n * 4096;
    *hi = lines * (size_t)(i + 1) / (size_t)n * 4096;
}

/* XOR of the 8-byte words of p[0, n) (n a multiple of 256), on the widest loads the tier has */
static uint64_t read_span(const uint8_t *p, size_t n) {
    switch (sp_cpu_level()) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: return sp_read_span_avx512(p, n);
    case SP_CPU_AVX2: return sp_read_span_avx2(p, n);
#endif
    default: break;
    }
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t o = 0; o + 4 <= n / 8; o += 4) {
        a0 ^= q[o];
        a1 ^= q[o + 1];
        a2 ^= q[o + 2];
        a3 ^= q[o + 3];
    }
    return a0 ^ a1 ^ a2 ^ a3;
}

static void bw_worker(void *ctx, int i, int n) {
    bw_ctx *c = ctx;
    size_t lo, hi;
    thread_share(c, i, n, &lo, &hi);
    if (c->fill) {
        for (size_t o = lo; o < hi; o += 8) {
            uint64_t v = o * 0x9E3779B97F4A7C15ull;
            memcpy(c->buf + o, &v, 8);
        }
        return;
    }
    uint64_t x = read_span(c->buf + lo, hi - lo);
    if (i < 64) c->sink[i] ^= x;
}

double sp_measure_read_bw(sp_pool *pool) {
    bw_ctx c = {0};
    c.bytes = BW_BYTES;
    c.buf = aligned_alloc(4096, c.bytes);
    if (!c.buf) return -1.0;
    /* 4 KiB pages, no MADV_HUGEPAGE: like the page-cache pages of mmapped weights, and
     * without the multi-second direct-compaction stalls huge pages can cause */
    double best = 1e30, start = sp_time_ms();
    c.fill = 1;
    sp_pool_run(pool, bw_worker, &c);
    c.fill = 0;

    for (int pass = 0; pass < BW_MAX_PASSES; pass++) {
        double t0 = sp_time_ms();
        sp_pool_run(pool, bw_worker, &c);
        double dt = sp_time_ms() - t0;
        if (dt < best) best = dt;
        if (pass >= 2 && sp_time_ms() - start > BW_BUDGET_MS) break;
    }
    free(c.buf);
    size_t lo, hi, read = 0;
    int n = pool ? sp_pool_size(pool) : 1;
    for (int i = 0; i < n; i++) {
        thread_share(&c, i, n, &lo, &hi);
        read += (hi - lo) / 256 * 256;
    }
    return best > 0 ? (double)read / (best * 1e-3) / 1e9 : -1.0;
}
