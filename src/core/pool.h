/* pool.h — a fixed thread pool that runs one parallel region at a time on every thread.
 *
 * Decode makes a few hundred short parallel calls per token, so dispatch must cost
 * microseconds: workers spin briefly on an atomic generation counter before sleeping.
 * Work splitting is static (thread i of n), so results never depend on scheduling. */
#ifndef SPECULA_POOL_H
#define SPECULA_POOL_H

typedef struct sp_pool sp_pool;

/* fn(ctx, i, n) is called once for each share i = 0..n-1; share 0 runs on the caller.
 * A share no worker has started by the time the caller is done with its own is run by the
 * caller (so a descheduled worker never stalls a region): fn must not wait for another
 * share, and must split work by i, never by thread identity. */
typedef void (*sp_pool_fn)(void *ctx, int i, int n);

/* The most threads a pool may be asked for: 4 per online CPU (at least 8). More only
 * oversubscribes the machine; callers turn a larger request into an error. */
#define SP_POOL_THREADS_PER_CPU 4
int sp_pool_max_threads(void);

/* n_threads <= 0: number of online CPUs. Returns NULL only on allocation failure. */
sp_pool *sp_pool_create(int n_threads);
void sp_pool_free(sp_pool *p);
int sp_pool_size(const sp_pool *p);
/* Run fn on all threads and wait for all to return. p may be NULL (runs fn(ctx, 0, 1)). */
void sp_pool_run(sp_pool *p, sp_pool_fn fn, void *ctx);
/* the share [*lo, *hi) of [0, total) for thread i of n, in chunks aligned to `align` */
void sp_pool_split(int total, int align, int i, int n, int *lo, int *hi);

#endif
