/* pool.c — the fixed thread pool of pool.h.
 *
 * One parallel region at a time, split into n shares i = 0..n-1. sp_pool_run publishes
 * (fn, ctx), runs share 0 on the caller and bumps a generation counter that n-1 workers
 * watch. Shares 1..n-1 are claimed through one atomic word that holds (generation, next
 * share): a worker claims a share, runs it, counts it done. When the caller has finished
 * share 0 it claims any share no worker has taken yet and runs it itself, so a worker that
 * the OS has not scheduled (the machine is shared, or oversubscribed) delays nothing —
 * results cannot change, since every kernel is split statically by share index i, never by
 * which thread runs it.
 *
 * Waiting: workers spin on the generation with a pause instruction, calling sched_yield now
 * and then (on an oversubscribed machine the thread they wait for may be queued behind them
 * on the same core), and after ~100 µs sleep on a futex so an idle pool burns no CPU.
 *
 * Not here: work queues, nested regions, barriers inside fn (a share must never wait for
 * another share: all shares may run one after another on the caller). */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* pause iterations a worker spins before sleeping (~100 µs at ~24 ns per pause on Zen 5) */
#define POOL_SPIN_ITERS 4096
/* a spinning thread calls sched_yield every this many pauses; on an idle core it returns at
 * once, on a busy one it lets the thread we wait for run (measured: 100 µs → 4 µs dispatch
 * with two agents' threads sharing a core) */
#define POOL_YIELD_EVERY 16

typedef struct {
    struct sp_pool *pool;
    int index;
} pool_worker;

struct sp_pool {
    _Alignas(64) atomic_uint gen;   /* bumped once per region; the futex word */
    atomic_int sleepers;            /* workers in (or about to enter) futex wait */
    _Alignas(64) _Atomic uint64_t claim; /* (generation << 32) | next unclaimed share */
    _Alignas(64) atomic_int done;   /* shares 1..n-1 finished in the current region */
    _Alignas(64) sp_pool_fn fn;
    void *ctx;
    atomic_int stop;
    int n;         /* shares per region (the thread count asked for) */
    int n_started; /* workers actually running (n - 1 unless pthread_create failed) */
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

static inline void spin_once(int *spins) {
    if (++*spins % POOL_YIELD_EVERY == 0) sched_yield();
    else cpu_relax();
}

/* claim the next share of region `gen`; -1 when none is left or the region is over */
static int claim_share(sp_pool *p, unsigned gen) {
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if ((unsigned)(c >> 32) != gen || (int)(uint32_t)c >= p->n) return -1;
        if (atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return (int)(uint32_t)c;
    }
}

/* run every share of region `gen` this thread can claim */
static void run_shares(sp_pool *p, unsigned gen) {
    int i;
    while ((i = claim_share(p, gen)) >= 0) {
        /* the region cannot end while our claimed share is not done: fn/ctx are its own */
        p->fn(p->ctx, i, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void *pool_main(void *arg) {
    pool_worker *w = arg;
    sp_pool *p = w->pool;
    unsigned seen = 0; /* the generation at creation: a region may predate our first look */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (spins < POOL_SPIN_ITERS) {
                spin_once(&spins);
                continue;
            }
            atomic_fetch_add(&p->sleepers, 1); /* seq_cst: pairs with sp_pool_run */
            if (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
        run_shares(p, g);
    }
    return NULL;
}

int sp_pool_max_threads(void) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    long n = (c > 0 ? c : 1) * SP_POOL_THREADS_PER_CPU;
    return n < 8 ? 8 : n > 4096 ? 4096 : (int)n;
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
    atomic_init(&p->claim, (uint64_t)0);
    atomic_init(&p->done, 0);
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
                if (i == 1) {
                    free(p->threads), free(p->workers), free(p);
                    return NULL;
                }
                /* keep the threads we have; n (the share count) stays as asked, so splits
                 * do not change — the caller picks up the missing thread's shares */
                break;
            }
            p->n_started = i;
        }
    }
    return p;
}

void sp_pool_free(sp_pool *p) {
    if (!p) return;
    if (p->n > 1) {
        atomic_store(&p->stop, 1);
        atomic_fetch_add(&p->gen, 1);
        futex_wake_all(&p->gen);
        for (int i = 1; i <= p->n_started; i++) pthread_join(p->threads[i], NULL);
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
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store(&p->claim, ((uint64_t)g << 32) | 1u); /* share 0 is ours */
    atomic_store(&p->gen, g);                          /* seq_cst: publishes all of the above */
    if (atomic_load(&p->sleepers) > 0) futex_wake_all(&p->gen);
    fn(ctx, 0, p->n);
    run_shares(p, g); /* whatever no worker has picked up yet */
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < p->n - 1) spin_once(&spins);
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
