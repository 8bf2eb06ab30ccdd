/* quant_avx512.c — the quantized row kernels for the avx512 tier (quant_internal.h). */
#include "quant_internal.h"

void qmm_rows_avx512(const qmm_ctx *c, int n0, int n1) { qmm_rows_scalar(c, n0, n1); }
