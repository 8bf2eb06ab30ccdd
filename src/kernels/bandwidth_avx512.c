/* bandwidth_avx512.c — the bandwidth probe's read loop (bandwidth.c) on 64-byte loads. */
#include "kernels_avx512.h"

uint64_t sp_read_span_avx512(const uint8_t *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t o = 0; o + 256 <= n; o += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + o)));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(p + o + 64)));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(p + o + 128)));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(p + o + 192)));
    }
    __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    uint64_t out[8];
    _mm512_storeu_si512((void *)out, a);
    return out[0] ^ out[1] ^ out[2] ^ out[3] ^ out[4] ^ out[5] ^ out[6] ^ out[7];
}
