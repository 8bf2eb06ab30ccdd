/* bandwidth.h — this machine's DRAM read bandwidth, measured (for the roofline of
 * `specula bench-decode`: decode can go no faster than bandwidth ÷ weight bytes). */
#ifndef SPECULA_BANDWIDTH_H
#define SPECULA_BANDWIDTH_H

#include "../core/pool.h"

/* Read bandwidth in GB/s (1e9 bytes/s) with every pool thread streaming its share of a
 * 256 MiB buffer (8× a 32 MB L3) with wide loads; best of several passes, ~1.3 s at most
 * including the first-touch fill (at least three passes). pool may be NULL (one thread). Allocates and frees the
 * buffer itself. Returns a value <= 0 when the buffer cannot be allocated. */
double sp_measure_read_bw(sp_pool *pool);

#endif
