/* pool.c — the fixed thread pool of pool.h.
 *
 * One parallel region at a time. The caller is thread 0; n-1 workers wait on an atomic
 * generation counter. sp_pool_run publishes (fn, ctx), bumps the generation, runs its own
 * share and spins until every worker has checked in. Workers spin on the counter with a
 * pause instruction for a short while after each region (decode issues regions a few µs
 * apart) and then sleep on a futex so an idle pool burns no CPU.
 *
 * Not here: work queues, nested regions, dynamic load balancing — splitting is static
 * (sp_pool_split), so which thread computes what never depends on timing. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* pause iterations a worker spins before sleeping (~50–200 µs depending on the CPU's pause) */
#define POOL_SPIN_ITERS 4096
/* pause iterations the caller spins on stragglers before yielding its time slice */
#define POOL_WAIT_SPINS 1024

typedef struct {
    struct sp_pool *pool;
    int index;
} pool_worker;

struct sp_pool {
    _Alignas(64) atomic_uint gen; /* bumped once per region; also the futex word */
    atomic_int sleepers;          /* workers in (or about to enter) futex wait */
    _Alignas(64) atomic_int pending; /* workers that have not finished the current region */
    _Alignas(64) sp_pool_fn fn;
    void *ctx;
    int stop;
    int n;
    pthread_t *threads;
    pool_worker *workers;
};

static void futex_wait(atomic_uint *addr, unsigned expected) {
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
    (void)addr, (void)expected;
    sched_yield();
#endif
}

static void futex_wake_all(atomic_uint *addr) {
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

static void *pool_main(void *arg) {
    pool_worker *w = arg;
    sp_pool *p = w->pool;
    /* the generation at creation, not a fresh load: a region may already have been
     * published before this thread got to run */
    unsigned seen = 0;
    for (;;) {
        /* wait for a new generation: spin, then sleep */
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < POOL_SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&p->sleepers, 1);          /* seq_cst: pairs with run() */
            if (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (p->stop) break;
        p->fn(p->ctx, w->index, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    return NULL;
}

sp_pool *sp_pool_create(int n_threads) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    sp_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->pending, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            free(p->threads), free(p->workers), free(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            p->workers[i] = (pool_worker){p, i};
            if (pthread_create(&p->threads[i], NULL, pool_main, &p->workers[i]) != 0) {
                /* run with the threads we have: shrink the pool to i */
                p->n = i;
                break;
            }
        }
    }
    return p;
}

void sp_pool_free(sp_pool *p) {
    if (!p) return;
    if (p->n > 1) {
        p->stop = 1;
        atomic_fetch_add(&p->gen, 1);
        futex_wake_all(&p->gen);
        for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    }
    free(p->threads);
    free(p->workers);
    free(p);
}

int sp_pool_size(const sp_pool *p) { return p ? p->n : 1; }

void sp_pool_run(sp_pool *p, sp_pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes fn/ctx/pending */
    if (atomic_load(&p->sleepers) > 0) futex_wake_all(&p->gen);
    fn(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        if (++spins < POOL_WAIT_SPINS) {
            cpu_relax();
        } else {
            sched_yield(); /* a worker was descheduled: give it the core */
            spins = 0;
        }
    }
}

void sp_pool_split(int total, int align, int i, int n, int *lo, int *hi) {
    if (align < 1) align = 1;
    if (n < 1) n = 1;
    long chunks = ((long)total + align - 1) / align;
    long c0 = chunks * i / n, c1 = chunks * (i + 1) / n;
    long a = c0 * align, b = c1 * align;
    *lo = (int)(a < total ? a : total);
    *hi = (int)(b < total ? b : total);
}
