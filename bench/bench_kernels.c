/* bench_kernels.c — sp_matmul throughput on the qwen3-0.6b shapes, against OpenBLAS.
 *
 * For bf16 and f32 W[N, K] it prints:
 *   T=1 GB/s of weights streamed, 1 and 2 threads (W copies rotated through > L3 so every
 *   call reads DRAM, as a real decode step does);
 *   time(T=k) / time(T=1) for k = 2, 4, 8, 16 (2 threads, cold W as above);
 *   GFLOP/s at T=512 (2 threads);
 *   OpenBLAS sgemv (T=1) and sgemm (T=512) on the same f32 shapes, 2 threads.
 * Each figure is the best of a few repetitions (the machine is shared; noise is one-sided).
 * `bench_kernels [quick] quant` instead compares the quantized types with bf16 (bench_quant);
 * `bench_kernels [quick] gguf FILE` times every matmul of one step of a GGUF model (bench_gguf).
 * `bench_kernels vnni` measures one core's int8 multiply-accumulate rate (bench_vnni): the
 * compute floor of a quantized batch (docs/QUANTIZE.md, "The 8-token verify").
 * `bench_kernels kpacked` times the load-time repacked Q4_K / Q6_K tiles alone (bench_kpacked).
 * `bench_kernels attn` times attention alone: the long-context decode figures (bench_attention)
 * and a prefill (bench_attn_prefill) in GFLOP/s and as a fraction of one core's measured FMA rate.
 * Usage: bench_kernels [quick] [quant | kpacked | gguf FILE | vnni | attn]   (quick: fewer repetitions) */
#include <cblas.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "kernels/bandwidth.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

void openblas_set_num_threads(int);

#define ROTATE_BYTES (256u << 20) /* > 32 MB L3 by a wide margin */

typedef struct {
    const char *name;
    int N, K;
    int prefill; /* measure T = 512 */
} shape;

static int reps = 20;

/* copies of W back to back, enough to exceed ROTATE_BYTES (at least 1) */
typedef struct {
    void *buf;
    int copies;
    size_t bytes; /* one copy */
    sp_dtype dt;
    int N, K;
} wset;

static wset wset_make(int N, int K, sp_dtype dt) {
    wset w = {0};
    w.dt = dt, w.N = N, w.K = K;
    w.bytes = (size_t)N * sp_dtype_row_bytes(dt, (size_t)K);
    w.copies = (int)(ROTATE_BYTES / w.bytes) + 1;
    if (w.bytes >= ROTATE_BYTES) w.copies = 1;
    w.buf = aligned_alloc(64, (w.bytes * w.copies + 63) / 64 * 64);
    if (!w.buf) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    if (sp_dtype_is_quant(dt)) { /* random blocks with a finite f16 scale (and min) */
        size_t bb = sp_dtype_block_bytes(dt), nblk = w.bytes / bb * w.copies;
        unsigned char *b = w.buf;
        for (size_t i = 0; i < nblk * bb; i++) b[i] = (unsigned char)((i * 2654435761u) >> 13);
        uint16_t d = sp_f32_to_f16(0.01f);
        size_t doff = dt == SP_DT_Q6_K ? 208 : 0;
        for (size_t i = 0; i < nblk; i++) {
            memcpy(b + i * bb + doff, &d, 2);
            if (dt == SP_DT_Q4_K) memcpy(b + i * bb + 2, &d, 2);
        }
        return w;
    }
    size_t n = (size_t)N * K * w.copies;
    for (size_t i = 0; i < n; i++) {
        float v = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
        if (dt == SP_DT_F32) ((float *)w.buf)[i] = v;
        else ((uint16_t *)w.buf)[i] = sp_f32_to_bf16(v);
    }
    return w;
}

/* every timed call (ours and OpenBLAS's) takes the next copy, so none finds its W in L3 */
static int rotation;

static sp_mat wset_get(const wset *w, int i) {
    return (sp_mat){(const char *)w->buf + (size_t)(i % w->copies) * w->bytes, w->dt, w->N, w->K, 0, NULL};
}

/* best time in ms of one sp_matmul call over reps calls (rotating W copies) */
static double time_matmul(sp_pool *pool, const wset *w, float *Y, const float *X, int T, int n_reps) {
    double best = 1e30;
    sp_mat m0 = wset_get(w, rotation++);
    sp_matmul(pool, Y, X, T, &m0); /* warm-up */
    for (int r = 0; r < n_reps; r++) {
        sp_mat m = wset_get(w, rotation++);
        double t0 = sp_time_ms();
        sp_matmul(pool, Y, X, T, &m);
        double dt = sp_time_ms() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* Interleaved timing of several (pool, T) variants: round-robin one call of each, n_reps
 * rounds, best time of each into best[]. Interleaving keeps ratios meaningful while other
 * processes come and go on a shared machine. */
static void time_matmul_set(sp_pool *const *pools, const int *Ts, int nv, const wset *w, float *Y,
                            const float *X, int n_reps, double *best) {
    for (int v = 0; v < nv; v++) best[v] = 1e30;
    for (int r = 0; r < n_reps; r++)
        for (int v = 0; v < nv; v++) {
            sp_mat m = wset_get(w, rotation++);
            double t0 = sp_time_ms();
            sp_matmul(pools[v], Y, X, Ts[v], &m);
            double dt = sp_time_ms() - t0;
            if (dt < best[v]) best[v] = dt;
        }
}

static double time_sgemv(const wset *w, float *Y, const float *X, int T, int n_reps) {
    double best = 1e30;
    for (int r = 0; r <= n_reps; r++) {
        const float *A = (const float *)wset_get(w, rotation++).data;
        double t0 = sp_time_ms();
        if (T == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, w->N, w->K, 1.0f, A, w->K, X, 1, 0.0f, Y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, w->N, w->K, 1.0f, X, w->K, A, w->K,
                        0.0f, Y, w->N);
        double dt = sp_time_ms() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    return best;
}

/* a share of fixed work: `iters` dependent float operations */
static void busy(void *ctx, int i, int n) {
    (void)i, (void)n;
    long iters = *(const long *)ctx;
    volatile float x = 1.0f;
    float y = x;
    for (long k = 0; k < iters; k++) y = y * 0.999999f + 1e-7f;
    x = y;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median µs of sp_pool_run(pool, busy, iters) over `runs` back-to-back calls */
static double region_us(sp_pool *pool, long iters, int runs) {
    static double t[4096];
    for (int r = 0; r < runs; r++) {
        double t0 = sp_time_ms();
        sp_pool_run(pool, busy, &iters);
        t[r] = (sp_time_ms() - t0) * 1e3;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    return t[runs / 2];
}

/* dispatch cost: a region of one ~20 µs share per thread, against the same share alone */
static void print_dispatch(sp_pool *p2) {
    long iters = 1000;
    while (region_us(NULL, iters, 50) < 20.0 && iters < (1L << 30)) iters *= 2;
    double one = region_us(NULL, iters, 400), two = region_us(p2, iters, 400);
    printf("sp_pool_run, 2 threads, one %.1f us share each: median %.1f us (%.1f us over one share;"
           " serial would be %.1f)\n\n", one, two, two - one, 2 * one);
}

/* attention at the qwen3-0.6b shape (16 query heads, 8 KV heads, D 128), long context:
 * the f32 K/V cache read per call dominates, so print it as GB/s and T=8 vs T=1 */
static void bench_attention(sp_pool *p1, sp_pool *p2) {
    const int NH = 16, KVH = 8, D = 128, ctx = 4096, Tmax = 8;
    size_t kvn = (size_t)(ctx + Tmax) * KVH * D;
    float *K = aligned_alloc(64, kvn * sizeof(float)), *V = aligned_alloc(64, kvn * sizeof(float));
    float *q = aligned_alloc(64, (size_t)Tmax * NH * D * sizeof(float));
    float *o = aligned_alloc(64, (size_t)Tmax * NH * D * sizeof(float));
    if (!K || !V || !q || !o) exit(1);
    for (size_t i = 0; i < kvn; i++) K[i] = V[i] = (float)((i * 7919u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < (size_t)Tmax * NH * D; i++) q[i] = (float)((i * 31u) % 100) / 100.0f - 0.5f;
    double bytes = 2.0 * ctx * KVH * D * sizeof(float);
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps; r++) {
        for (int v = 0; v < 3; v++) {
            int T = v == 2 ? Tmax : 1;
            sp_attn_shape s = {T, ctx - T + 1, NH, KVH, D, ctx + Tmax, 0, 0, 0.088f, 0};
            double t0 = sp_time_ms();
            sp_attention(v == 0 ? p1 : p2, o, q, K, V, &s);
            double dt = sp_time_ms() - t0;
            if (dt < best[v]) best[v] = dt;
        }
    }
    printf("attention NH 16 KVH 8 D 128, %d keys, f32 cache: T=1 %.2f ms (%.1f GB/s) 1 thread, "
           "%.2f ms (%.1f GB/s) 2 threads; T=8/T=1 %.2f\n", ctx, best[0], bytes / best[0] / 1e6, best[1],
           bytes / best[1] / 1e6, best[2] / best[1]);
    free(K), free(V), free(q), free(o);
}

/* Quantized weights next to bf16 on the same shapes: decode GB/s of the bytes each type
 * streams (1 and 2 threads) and that as a share of the measured DRAM read bandwidth, the cost
 * of T = 8 (a verify) over T = 1, and T = 512 GFLOP/s. All types of a shape are timed
 * round-robin in one loop, so their ratios come from the same moments of machine load. */
static void bench_quant(sp_pool *p1, sp_pool *p2, const shape *shapes, int nshapes) {
    const sp_dtype dts[] = {SP_DT_BF16, SP_DT_Q8_0, SP_DT_Q4_0, SP_DT_Q4_K, SP_DT_Q6_K};
    enum { ND = sizeof dts / sizeof dts[0] };
    double bw1 = sp_measure_read_bw(p1), bw2 = sp_measure_read_bw(p2);
    printf("quantized weights (tier %s); DRAM read bandwidth %.1f GB/s 1 thread, %.1f GB/s 2 threads\n",
           getenv("SPECULA_CPU") ? getenv("SPECULA_CPU") : "best", bw1, bw2);
    printf("%-26s %-5s %8s %8s %6s %6s | %7s %7s | %7s %9s\n", "shape", "W", "MB", "ms T1", "GB/s", "%bw", "GB/s",
           "%bw", "T8/T1", "T512");
    printf("%-26s %-5s %8s %8s %6s %6s | %7s %7s | %7s %9s\n", "", "", "", "2 thr", "2 thr", "2 thr", "1 thr",
           "1 thr", "2 thr", "GFLOP/s");
    for (int si = 0; si < nshapes; si++) {
        shape s = shapes[si];
        float *X = aligned_alloc(64, (size_t)512 * s.K * sizeof(float));
        float *Y = aligned_alloc(64, (size_t)512 * s.N * sizeof(float));
        if (!X || !Y) exit(1);
        for (size_t i = 0; i < (size_t)512 * s.K; i++) X[i] = (float)((i * 40503u) % 1999) / 1000.0f - 1.0f;
        wset w[ND];
        for (int d = 0; d < ND; d++) w[d] = wset_make(s.N, s.K, dts[d]);
        int r = s.N > 100000 ? (reps + 3) / 4 : reps;
        double best[ND][3];
        for (int d = 0; d < ND; d++) best[d][0] = best[d][1] = best[d][2] = 1e30;
        for (int k = 0; k < r; k++)
            for (int d = 0; d < ND; d++)
                for (int v = 0; v < 3; v++) {
                    sp_mat m = wset_get(&w[d], rotation++);
                    double t0 = sp_time_ms();
                    sp_matmul(v == 0 ? p1 : p2, Y, X, v == 2 ? 8 : 1, &m);
                    double dt = sp_time_ms() - t0;
                    if (dt < best[d][v]) best[d][v] = dt;
                }
        for (int d = 0; d < ND; d++) {
            double mb = (double)w[d].bytes / 1e6, g1 = mb / best[d][0], g2 = mb / best[d][1], gflops = 0;
            if (s.prefill) gflops = 2.0 * 512 * s.N * s.K / (time_matmul(p2, &w[d], Y, X, 512, 2) * 1e6);
            printf("%-26s %-5s %8.1f %8.3f %6.1f %6.0f | %7.1f %7.0f | %7.2f %9.1f\n", s.name, sp_dtype_name(dts[d]), mb,
                   best[d][1], g2, 100 * g2 / bw2, g1, 100 * g1 / bw1, best[d][2] / best[d][1], gflops);
            fflush(stdout);
        }
        for (int d = 0; d < ND; d++) free(w[d].buf);
        free(X), free(Y);
    }
}

/* The packed K-quant tiles alone (sp_mat_pack, one thread): GB/s of weight bytes at T = 1, and
 * time(T) / time(T = 1) for T = 8 (a verify) and 64 (a prefill chunk), on the LM head (Q6_K)
 * and the layer shapes (Q4_K, Q6_K), with copies rotated through > L3 as in bench_quant; the
 * "hot" shapes (0.3-0.4 MB, one copy, in L2) call the same matrix 50 times per timing, so their
 * T = 1 figure is the tile's compute rate without DRAM; "pack GB/s" is sp_mat_pack's rate (the
 * load-time repack) over the file's bytes. */
static void bench_kpacked(sp_pool *p1) {
    static const struct {
        const char *name;
        int N, K;
        sp_dtype dt;
        int hot;
    } ks[] = {{"lm_head Q6_K K=1024 N=151936", 151936, 1024, SP_DT_Q6_K, 0},
              {"gate/up Q4_K K=1024 N=3072", 3072, 1024, SP_DT_Q4_K, 0},
              {"down    Q4_K K=3072 N=1024", 1024, 3072, SP_DT_Q4_K, 0},
              {"down    Q6_K K=3072 N=1024", 1024, 3072, SP_DT_Q6_K, 0},
              {"hot     Q6_K K=1024 N=512", 512, 1024, SP_DT_Q6_K, 1},
              {"hot     Q4_K K=1024 N=512", 512, 1024, SP_DT_Q4_K, 1}};
    printf("%-30s %8s %8s %8s %8s %9s\n", "packed, 1 thread", "MB", "T1 GB/s", "T8/T1", "T64/T1", "pack GB/s");
    for (size_t si = 0; si < sizeof ks / sizeof ks[0]; si++) {
        wset w = wset_make(ks[si].N, ks[si].K, ks[si].dt);
        sp_mat m0 = wset_get(&w, 0);
        size_t pb = sp_mat_pack_bytes(&m0);
        if (pb == 0) {
            printf("%-30s no packed layout on this CPU\n", ks[si].name);
            free(w.buf);
            continue;
        }
        int copies = ks[si].hot ? 1 : w.copies, inner = ks[si].hot ? 50 : 1;
        void *pk = aligned_alloc(64, (pb * copies + 63) / 64 * 64);
        float *X = aligned_alloc(64, (size_t)64 * ks[si].K * sizeof(float));
        float *Y = aligned_alloc(64, (size_t)64 * ks[si].N * sizeof(float));
        if (!pk || !X || !Y) exit(1);
        double pack_ms = 1e30; /* the load-time repack, best over the copies */
        for (int c = 0; c < copies; c++) {
            sp_mat m = wset_get(&w, c);
            double t0 = sp_time_ms();
            sp_mat_pack(&m, (char *)pk + (size_t)c * pb);
            double dt = sp_time_ms() - t0;
            if (dt < pack_ms) pack_ms = dt;
        }
        for (size_t i = 0; i < (size_t)64 * ks[si].K; i++) X[i] = (float)((i * 40503u) % 1999) / 1000.0f - 1.0f;
        const int Ts[3] = {1, 8, 64};
        double best[3] = {1e30, 1e30, 1e30};
        int r = ks[si].N > 100000 ? (reps + 3) / 4 : reps;
        for (int k = 0; k < r; k++)
            for (int v = 0; v < 3; v++) {
                int c = rotation++ % copies;
                sp_mat m = wset_get(&w, c);
                m.pack = (char *)pk + (size_t)c * pb;
                double t0 = sp_time_ms();
                for (int q = 0; q < inner; q++) sp_matmul(p1, Y, X, Ts[v], &m);
                double dt = (sp_time_ms() - t0) / inner;
                if (dt < best[v]) best[v] = dt;
            }
        double mb = (double)w.bytes / 1e6;
        printf("%-30s %8.1f %8.1f %8.2f %8.2f %9.2f\n", ks[si].name, mb, mb / best[0], best[1] / best[0], best[2] / best[0],
               mb / pack_ms);
        fflush(stdout);
        free(pk), free(X), free(Y), free(w.buf);
    }
}

/* Every matmul of one decoder token of a GGUF model, in place from the file: the 2-D weights
 * of types sp_matmul takes (token_embd only as the head of a tied model), with the packed copies
 * the loader makes (none with BENCH_NO_PACK set), timed at T = 1 (decode), 8 (a verify) and 64
 * (a prefill chunk), with BENCH_THREADS threads (default 2). A lower bound of a forward step
 * (no attention, norms or activations), to set beside llama-bench on the same file. */
static int bench_gguf(sp_pool *p2, const char *path) {
    sp_err err;
    gguf_file *f = sp_gguf_open(path, &err);
    if (!f) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    sp_mat *m = calloc(f->n_tensors, sizeof *m);
    int nm = 0, has_output = 0, kmax = 0, nmax = 0;
    size_t bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name.len == 13 && !memcmp(f->tensors[i].name.ptr, "output.weight", 13)) has_output = 1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor_info *t = &f->tensors[i];
        sp_dtype dt = sp_gguf_ggml_to_dtype(t->type);
        int embd = t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17);
        if (t->n_dims != 2 || dt == SP_DT_UNKNOWN || (embd && has_output)) continue;
        m[nm] = (sp_mat){f->map + f->data_offset + t->offset, dt, (int)t->dims[1], (int)t->dims[0], 0, NULL};
        if (sp_mat_check(&m[nm], "bench", &err)) continue;
        const char *np = getenv("BENCH_NO_PACK");
        size_t pb = np && *np ? 0 : sp_mat_pack_bytes(&m[nm]); /* the loader's packed copy */
        void *pk = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
        if (pk) sp_mat_pack(&m[nm], pk), m[nm].pack = pk;
        bytes += (size_t)m[nm].n * sp_dtype_row_bytes(dt, (size_t)m[nm].k);
        kmax = m[nm].k > kmax ? m[nm].k : kmax, nmax = m[nm].n > nmax ? m[nm].n : nmax;
        nm++;
    }
    float *X = aligned_alloc(64, (size_t)64 * kmax * sizeof(float)), *Y = aligned_alloc(64, (size_t)64 * nmax * sizeof(float));
    if (!X || !Y) return 1;
    for (size_t i = 0; i < (size_t)64 * kmax; i++) X[i] = (float)((i * 40503u) % 1999) / 1000.0f - 1.0f;
    const int Ts[3] = {1, 8, 64};
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < 3; v++) {
            double t0 = sp_time_ms();
            for (int i = 0; i < nm; i++) sp_matmul(p2, Y, X, Ts[v], &m[i]);
            double dt = sp_time_ms() - t0;
            if (dt < best[v]) best[v] = dt;
        }
    printf("%s: %d matrices, %.1f MB; all matmuls of one step, %d threads: T=1 %.2f ms (%.1f tok/s, %.1f GB/s), "
           "T=8 %.2f ms (%.2fx T=1), T=64 %.2f ms (%.1f tok/s)\n", path, nm, bytes / 1e6, sp_pool_size(p2), best[0], 1e3 / best[0],
           bytes / best[0] / 1e6, best[1], best[1] / best[0], best[2], 64e3 / best[2]);
    for (int i = 0; i < nm; i++) free((void *)m[i].pack);
    free(X), free(Y), free(m);
    sp_gguf_close(f);
    return 0;
}

#if defined(__x86_64__)
/* n rounds of 16 independent 512-bit vpdpbusd (64 u8·s8 multiply-adds each) on one core:
 * the throughput limit, not the latency one */
__attribute__((target("avx512f,avx512vnni"))) static int vnni_loop(long n) {
    __m512i a[16], w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-2);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_epi32(i);
    for (long r = 0; r < n; r++) {
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbusd_epi32(a[i], w, x);
        __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]),
                         "+v"(a[7]));
    }
    __m512i s = a[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_epi32(s, a[i]);
    return _mm512_reduce_add_epi32(s);
}
#endif

#if defined(__x86_64__)
/* n rounds of 16 independent 512-bit f32 FMAs on one core: the throughput limit */
__attribute__((target("avx512f"))) static float fma_loop(long n) {
    __m512 a[16], w = _mm512_set1_ps(0.999f), x = _mm512_set1_ps(1e-3f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    for (long r = 0; r < n; r++) {
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], w, x);
        __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]),
                         "+v"(a[7]));
    }
    __m512 s = a[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
#endif

/* one core's f32 rate in GFLOP/s (an FMA counts 2), best of 15 runs; 0 without AVX-512 */
static double fma_peak_gflops(void) {
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f")) return 0;
    const long n = 2000000;
    double best = 1e30;
    float sink = 0;
    for (int r = 0; r < 15; r++) {
        double t0 = sp_time_ms();
        sink += fma_loop(n);
        double dt = sp_time_ms() - t0;
        if (dt < best) best = dt;
    }
    if (sink == 12345.0f) printf(" ");
    return (double)n * 16 * 16 * 2 / (best * 1e6);
#else
    return 0;
#endif
}

/* Attention over a 512-token prefill at the qwen3-0.6b shape (16 query heads, 8 KV heads,
 * D 128), 1 thread: T = 512 causal from position 0 in one call, and as T = 64 chunks at
 * positions 0, 64, .., 448. Work: 4·D flops per (token, head, visible key) (QK and P·V). */
static int bench_attn_prefill(void) {
    const int NH = 16, KVH = 8, D = 128, N = 512, chunk = 64;
    size_t kvn = (size_t)N * KVH * D, qn = (size_t)N * NH * D;
    float *K = aligned_alloc(64, kvn * sizeof(float)), *V = aligned_alloc(64, kvn * sizeof(float));
    float *q = aligned_alloc(64, qn * sizeof(float)), *o = aligned_alloc(64, qn * sizeof(float));
    if (!K || !V || !q || !o) return 1;
    for (size_t i = 0; i < kvn; i++) {
        K[i] = (float)((i * 7919u) % 1000) / 1000.0f - 0.5f;
        V[i] = (float)((i * 104729u) % 1000) / 1000.0f - 0.5f;
    }
    for (size_t i = 0; i < qn; i++) q[i] = (float)((i * 31u) % 100) / 100.0f - 0.5f;
    sp_pool *p1 = sp_pool_create(1);
    double flops = 4.0 * D * NH * ((double)N * (N + 1) / 2), peak = fma_peak_gflops();
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < 2; v++) {
            double t0 = sp_time_ms();
            for (int c = 0; c < (v ? N / chunk : 1); c++) {
                int T = v ? chunk : N, pos0 = v ? c * chunk : 0;
                sp_attn_shape s = {T, pos0, NH, KVH, D, N, 0, 0, 0.088f, 0};
                sp_attention(p1, o + (size_t)pos0 * NH * D, q + (size_t)pos0 * NH * D, K, V, &s);
            }
            double dt = sp_time_ms() - t0;
            if (dt < best[v]) best[v] = dt;
        }
    printf("attention prefill NH 16 KVH 8 D 128, %d tokens, 1 thread (f32 FMA peak %.1f GFLOP/s):\n", N, peak);
    const char *name[2] = {"T=512 from 0", "T=64 chunks"};
    for (int v = 0; v < 2; v++) {
        double g = flops / (best[v] * 1e6);
        printf("  %-13s %7.2f ms  %6.1f GFLOP/s  %.2f of peak\n", name[v], best[v], g, peak > 0 ? g / peak : 0);
    }
    sp_pool_free(p1);
    free(K), free(V), free(q), free(o);
    return 0;
}

/* one core's vpdpbusd rate in int8 MAC/s, best of 7 runs of ~50 ms */
static int bench_vnni(void) {
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512vnni")) {
        printf("vnni: this processor has no AVX512-VNNI\n");
        return 0;
    }
    const long n = 2000000;
    double best = 1e30;
    int sink = 0;
    for (int r = 0; r < 7; r++) {
        double t0 = sp_time_ms();
        sink += vnni_loop(n);
        double dt = sp_time_ms() - t0;
        if (dt < best) best = dt;
    }
    double macs = (double)n * 16 * 64 / (best * 1e-3);
    printf("vnni: one core, 512-bit vpdpbusd: %.1f G int8 MAC/s (%.2f instructions/ns) [%d]\n", macs / 1e9,
           macs / 64 / 1e9, sink & 1);
#else
    printf("vnni: x86-64 only\n");
#endif
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "quick") == 0) reps = 6;
    if (argc > 1 && strcmp(argv[argc - 1], "vnni") == 0) return bench_vnni();
    if (argc > 1 && strcmp(argv[argc - 1], "attn") == 0) { /* bench_kernels [quick] attn */
        sp_pool *p1 = sp_pool_create(1), *p2 = sp_pool_create(2);
        bench_attention(p1, p2);
        sp_pool_free(p1), sp_pool_free(p2);
        return bench_attn_prefill();
    }
    if (argc > 2 && strcmp(argv[argc - 2], "gguf") == 0) { /* bench_kernels [quick] gguf FILE */
        const char *th = getenv("BENCH_THREADS");
        sp_pool *p = sp_pool_create(th && atoi(th) > 0 ? atoi(th) : 2);
        int rc = bench_gguf(p, argv[argc - 1]);
        sp_pool_free(p);
        return rc;
    }
    shape shapes[] = {
        {"q/gate/up K=1024 N=3072", 3072, 1024, 1},
        {"q_proj    K=1024 N=2048", 2048, 1024, 1},
        {"down      K=3072 N=1024", 1024, 3072, 1},
        {"lm_head   K=1024 N=151936", 151936, 1024, 0},
    };
    sp_pool *p1 = sp_pool_create(1), *p2 = sp_pool_create(2);
    if (argc > 1 && strcmp(argv[argc - 1], "kpacked") == 0) { /* bench_kernels [quick] kpacked */
        bench_kpacked(p1);
        sp_pool_free(p1), sp_pool_free(p2);
        return 0;
    }
    if (argc > 1 && strcmp(argv[argc - 1], "quant") == 0) { /* bench_kernels [quick] quant */
        bench_quant(p1, p2, shapes, (int)(sizeof shapes / sizeof *shapes));
        sp_pool_free(p1), sp_pool_free(p2);
        return 0;
    }
    openblas_set_num_threads(2);
    print_dispatch(p2);
    bench_attention(p1, p2);
    printf("\n");
    int Tmax = 512;
    sp_dtype dts[2] = {SP_DT_BF16, SP_DT_F32};
    printf("%-26s %-4s %9s %9s | %6s %6s %6s %6s | %9s | %9s %9s\n", "shape", "W", "T1 GB/s", "T1 GB/s",
           "T2/T1", "T4/T1", "T8/T1", "T16/T1", "T512", "blas gemv", "blas gemm");
    printf("%-26s %-4s %9s %9s | %6s %6s %6s %6s | %9s | %9s %9s\n", "", "", "1 thr", "2 thr", "", "", "", "",
           "GFLOP/s", "GB/s", "GFLOP/s");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        shape s = shapes[si];
        /* activations 64-byte aligned, as the model's arena gives them */
        float *X = aligned_alloc(64, (size_t)Tmax * s.K * sizeof(float));
        float *Y = aligned_alloc(64, (size_t)Tmax * s.N * sizeof(float));
        if (!X || !Y) return 1;
        for (size_t i = 0; i < (size_t)Tmax * s.K; i++) X[i] = (float)((i * 40503u) % 1999) / 1000.0f - 1.0f;
        for (int d = 0; d < 2; d++) {
            wset w = wset_make(s.N, s.K, dts[d]);
            int r = s.N > 100000 ? (reps + 3) / 4 : reps;
            double gb = (double)w.bytes / 1e6;
            sp_pool *pools[6] = {p1, p2, p2, p2, p2, p2};
            int Ts[6] = {1, 1, 2, 4, 8, 16};
            double best[6];
            time_matmul_set(pools, Ts, 6, &w, Y, X, r, best);
            double t1a = best[0], t1b = best[1], ratio[4];
            for (int k = 0; k < 4; k++) ratio[k] = best[2 + k] / t1b;
            double gflops = 0;
            if (s.prefill) {
                double t = time_matmul(p2, &w, Y, X, 512, 3);
                gflops = 2.0 * 512 * s.N * s.K / (t * 1e6);
            }
            char blas1[16] = "-", blas2[16] = "-";
            if (dts[d] == SP_DT_F32) {
                snprintf(blas1, sizeof blas1, "%.1f", gb / time_sgemv(&w, Y, X, 1, r));
                if (s.prefill)
                    snprintf(blas2, sizeof blas2, "%.1f", 2.0 * 512 * s.N * s.K / (time_sgemv(&w, Y, X, 512, 3) * 1e6));
            }
            printf("%-26s %-4s %9.1f %9.1f | %6.2f %6.2f %6.2f %6.2f | %9.1f | %9s %9s\n", s.name,
                   sp_dtype_name(dts[d]), gb / t1a, gb / t1b, ratio[0], ratio[1], ratio[2], ratio[3], gflops,
                   blas1, blas2);
            fflush(stdout);
            free(w.buf);
        }
        free(X), free(Y);
    }
    sp_pool_free(p1), sp_pool_free(p2);
    return 0;
}
