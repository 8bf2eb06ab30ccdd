/* quant_neon.c — the quantized row kernels for the NEON (dotprod) tier (quant_internal.h). */
#include "quant_internal.h"

void qmm_rows_neon(const qmm_ctx *c, int n0, int n1) { qmm_rows_scalar(c, n0, n1); }
