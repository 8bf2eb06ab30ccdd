/* dist.c — MPI glue (see dist.h); compiled to one-rank identities without SP_HAVE_MPI. */
#include "train/dist.h"

#include <stdlib.h>
#include <string.h>

#ifdef SP_HAVE_MPI
#include <mpi.h>

int sp_tr_dist_available(void) { return 1; }

void sp_tr_dist_init(tr_dist *d) {
    memset(d, 0, sizeof *d);
    d->size = 1;
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE")) return;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->active = 1;
}

void sp_tr_dist_finalize(tr_dist *d) {
    if (d->active) MPI_Finalize();
    d->active = 0;
}

/* reduce to rank 0 in chunks (counts are int), then broadcast: identical bits on every rank */
static void sum(const tr_dist *d, void *buf, size_t n, MPI_Datatype t, size_t es) {
    if (!d || !d->active || d->size == 1) return;
    char *p = buf;
    for (size_t i = 0; i < n;) {
        int c = n - i > (1u << 28) ? (1 << 28) : (int)(n - i);
        if (d->rank == 0) MPI_Reduce(MPI_IN_PLACE, p + i * es, c, t, MPI_SUM, 0, MPI_COMM_WORLD);
        else MPI_Reduce(p + i * es, NULL, c, t, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Bcast(p + i * es, c, t, 0, MPI_COMM_WORLD);
        i += (size_t)c;
    }
}

void sp_tr_dist_sum_f32(const tr_dist *d, float *buf, size_t n) { sum(d, buf, n, MPI_FLOAT, 4); }
void sp_tr_dist_sum_f64(const tr_dist *d, double *buf, size_t n) { sum(d, buf, n, MPI_DOUBLE, 8); }

void sp_tr_dist_bcast_i64(const tr_dist *d, long long *v) {
    if (d && d->active && d->size > 1) MPI_Bcast(v, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
}

void sp_tr_dist_barrier(const tr_dist *d) {
    if (d && d->active && d->size > 1) MPI_Barrier(MPI_COMM_WORLD);
}

#else

int sp_tr_dist_available(void) { return 0; }
void sp_tr_dist_init(tr_dist *d) {
    memset(d, 0, sizeof *d);
    d->size = 1;
}
void sp_tr_dist_finalize(tr_dist *d) { (void)d; }
void sp_tr_dist_sum_f32(const tr_dist *d, float *buf, size_t n) { (void)d; (void)buf; (void)n; }
void sp_tr_dist_sum_f64(const tr_dist *d, double *buf, size_t n) { (void)d; (void)buf; (void)n; }
void sp_tr_dist_bcast_i64(const tr_dist *d, long long *v) { (void)d; (void)v; }
void sp_tr_dist_barrier(const tr_dist *d) { (void)d; }

#endif
