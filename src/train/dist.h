/* dist.h — data parallelism across MPI ranks for regen and training.
 *
 * MPI is optional at build time: the Makefile defines SP_HAVE_MPI and links Open MPI only when
 * `mpicc` is present. Without it (or when not started by mpirun) there is one rank and every
 * call below is the identity, so the rest of the trainer has one code path.
 * The CLI calls sp_tr_dist_init once at start and sp_tr_dist_finalize at exit (MPI can be started
 * only once per process); library functions take a `const tr_dist *` (NULL = one rank).
 * Reductions go to rank 0 and are broadcast back, so every rank holds bit-identical sums and
 * the replicated AdamW updates stay identical. */
#ifndef SPECULA_TRAIN_DIST_H
#define SPECULA_TRAIN_DIST_H

#include <stddef.h>

typedef struct {
    int rank, size;
    int active; /* 1: MPI was initialised by sp_tr_dist_init */
} tr_dist;

/* 1 when this build has MPI */
int sp_tr_dist_available(void);
/* Start MPI when built with it and launched under mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set);
 * otherwise rank 0 of 1. */
void sp_tr_dist_init(tr_dist *d);
void sp_tr_dist_finalize(tr_dist *d);
/* in-place sums over ranks (identity for one rank) */
void sp_tr_dist_sum_f32(const tr_dist *d, float *buf, size_t n);
void sp_tr_dist_sum_f64(const tr_dist *d, double *buf, size_t n);
/* the value of rank 0, on every rank */
void sp_tr_dist_bcast_i64(const tr_dist *d, long long *v);
void sp_tr_dist_barrier(const tr_dist *d);

#endif
