/* matmul_avx512.c — the AVX-512 tiles of sp_matmul (matmul.c): one zmm register holds a whole
 * canonical 16-lane accumulator.
 *   T = 1      (decode): 1 × 8 tiles streaming W from DRAM with software prefetch; bf16
 *              rows are read 64 bytes (32 weights) per load.
 *   T = 2, 3   (verify): T × 8 tiles: each W chunk is loaded and widened once for all tokens.
 *   T >= 4     (verify, prefill): 4 × 6 tiles; the token blocks of a row block share the
 *              prefetch of the row block MM_AHEAD_BLOCKS on and find their own in cache;
 *              for T > 16 the tokens go in chunks sized so a chunk of X stays in L2 while
 *              the rows of W stream past it.
 * Performance notes: W and X 64-byte aligned avoid split loads (f32 W: up to 2x at T >= 2). */
#include "kernels_avx512.h"

/* bf16 → f32 exactly, as one word permute: source word (l + 16·hi) goes to the high half
 * of f32 lane l; low halves are zeroed by the mask. One uop instead of zero-extend + shift. */
static SP_ALWAYS_INLINE __m512 bf16_widen(__m512i v, int hi) {
    const __m512i lo_idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6,
                                            0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi32(16 << 16));
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, hi ? hi_idx : lo_idx, v));
}

/* 16 weights from element offset `off`, widened to f32 */
static SP_ALWAYS_INLINE __m512 load_w16(const void *W, size_t off, sp_dtype dt) {
    if (dt == SP_DT_F32) return _mm512_loadu_ps((const float *)W + off);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)W + off));
    if (dt == SP_DT_BF16) return bf16_widen(_mm512_zextsi256_si512(h), 0);
    return _mm512_cvtph_ps(h);
}

/* the same for the lanes in m only (others 0) */
static SP_ALWAYS_INLINE __m512 load_w16_mask(const void *W, size_t off, sp_dtype dt, __mmask16 m) {
    if (dt == SP_DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)W + off);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)W + off);
    if (dt == SP_DT_BF16) return bf16_widen(_mm512_zextsi256_si512(h), 0);
    return _mm512_cvtph_ps(h);
}

/* bytes of each W row the single-token tile prefetches ahead of its loads */
#ifndef MM_PREFETCH_BYTES
#define MM_PREFETCH_BYTES 1024
#endif

/* Multi-token tiles stream the row block MM_AHEAD_BLOCKS ahead of the one they compute
 * (decode keeps its own-row prefetch). One block ahead left DRAM idle between blocks: an
 * 8-token verify of the embedded target took ~1.8 decode steps on one core, compute plus
 * memory nearly serialised; three ahead: 0.90x that time (docs/ROUND_COST.md). Decode does
 * not gain from it (1.1x slower: its own-row prefetch already runs ahead). */
#define MM_AHEAD_BLOCKS 3

#ifndef MM_STREAM_HINT
#define MM_STREAM_HINT _MM_HINT_T0
#endif

/* A software-prefetch stream for multi-token tiles: the lines [p, end) are requested at an
 * even pace of `step` bytes per 16-weight step while the tile computes, so DRAM keeps
 * streaming the next row block while the current one is worked on from cache (measured:
 * T=8 goes from 1.56x to 1.1x the cost of T=1 on one core). */
typedef struct {
    const char *p, *end;
    size_t step;
} mm_pf;

/* One TB × NB tile: Y[t0.., n0..] over the full K. TB, NB, dt and PF are compile-time
 * constants at every call site, so acc[][] lives in registers. PF 1: prefetch each of the
 * tile's own rows MM_PREFETCH_BYTES ahead (decode); PF 2: advance the stream *pf. */
static SP_ALWAYS_INLINE void mm_tile(const sp_mm_ctx *c, int t0, int n0, mm_pf *pf, sp_dtype dt,
                                     const int TB, const int NB, const int PF) {
    const int K = c->K;
    const float *X = c->X + (size_t)t0 * K;
    const size_t w0 = (size_t)n0 * K;
    const size_t esz = dt == SP_DT_F32 ? 4 : 2;
    __m512 acc[4][8];
    for (int i = 0; i < TB; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    const char *pf_goal = PF == 2 ? pf->p : NULL;
    int k = 0;
    if (dt == SP_DT_BF16 && TB == 1) {
        /* decode: one 64-byte load per row feeds two chunks (measured +13% from DRAM); the
         * per-accumulator order is unchanged: chunk k, then chunk k + 16 */
        for (; k + 32 <= K; k += 32) {
            if (PF == 2) {
                pf_goal += 2 * pf->step;
                for (; pf->p < pf_goal && pf->p < pf->end; pf->p += 64) _mm_prefetch(pf->p, MM_STREAM_HINT);
            }
            __m512 x0 = _mm512_loadu_ps(X + k), x1 = _mm512_loadu_ps(X + k + 16);
            for (int j = 0; j < NB; j++) {
                const uint16_t *wp = (const uint16_t *)c->W + w0 + (size_t)j * K + k;
                if (PF == 1) _mm_prefetch((const char *)wp + MM_PREFETCH_BYTES, _MM_HINT_T0);
                __m512i v = _mm512_loadu_si512(wp);
                acc[0][j] = _mm512_fmadd_ps(x0, bf16_widen(v, 0), acc[0][j]);
                acc[0][j] = _mm512_fmadd_ps(x1, bf16_widen(v, 1), acc[0][j]);
            }
        }
    }
    for (; k + 16 <= K; k += 16) {
        if (PF == 2) {
            pf_goal += pf->step;
            for (; pf->p < pf_goal && pf->p < pf->end; pf->p += 64) _mm_prefetch(pf->p, MM_STREAM_HINT);
        }
        __m512 xv[4];
        for (int i = 0; i < TB; i++) xv[i] = _mm512_loadu_ps(X + (size_t)i * K + k);
        for (int j = 0; j < NB; j++) {
            if (PF == 1)
                _mm_prefetch((const char *)c->W + (w0 + (size_t)j * K + k) * esz + MM_PREFETCH_BYTES,
                             _MM_HINT_T0);
            __m512 w = load_w16(c->W, w0 + (size_t)j * K + k, dt);
            for (int i = 0; i < TB; i++) acc[i][j] = _mm512_fmadd_ps(xv[i], w, acc[i][j]);
        }
    }
    if (k < K) {
        __mmask16 m = sp_tail_mask(K - k);
        __m512 xv[4];
        for (int i = 0; i < TB; i++) xv[i] = _mm512_maskz_loadu_ps(m, X + (size_t)i * K + k);
        for (int j = 0; j < NB; j++) {
            __m512 w = load_w16_mask(c->W, w0 + (size_t)j * K + k, dt, m);
            for (int i = 0; i < TB; i++) acc[i][j] = _mm512_mask3_fmadd_ps(xv[i], w, acc[i][j], m);
        }
    }
    /* canonical reductions, batched (bit-identical to one sp_hsum16_avx512 per output) */
    float *y[4];
    for (int i = 0; i < TB; i++) y[i] = c->Y + (size_t)(t0 + i) * c->N + n0;
    if (TB == 4 && NB == 6) {
        __m512 a[24];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++) a[i * 6 + j] = acc[i][j];
        sp_store_sums_4x6(a, y, 1.0f, 0);
    } else if (NB >= 6) {
        for (int i = 0; i < TB; i++) sp_store_sums_row(acc[i], NB, y[i], 1.0f, 0);
    } else {
        for (int i = 0; i < TB; i++)
            for (int j = 0; j < NB; j++) y[i][j] = sp_hsum16_avx512(acc[i][j]);
    }
}

typedef void (*mm_tile_fn)(const sp_mm_ctx *c, int t0, int n0, mm_pf *pf);

/* one out-of-line function per (dtype, TB, NB, PF) used below */
#define MM_TILE(DTN, DT, TB, NB, PF)                                                       \
    static void mm_tile_##DTN##_##TB##x##NB##_##PF(const sp_mm_ctx *c, int t0, int n0, mm_pf *pf) { \
        mm_tile(c, t0, n0, pf, DT, TB, NB, PF);                                            \
    }
/* 1 × 8 (T = 1, own-row prefetch), 2..3 × 8 (T = 2, 3), 1..4 × 6 (T >= 4; 1..3 for the
 * token remainder), all streaming the next row block; 1..4 × 1 for the row remainder. */
#define MM_TILES(DTN, DT)                                                                  \
    MM_TILE(DTN, DT, 1, 8, 2) MM_TILE(DTN, DT, 2, 8, 2) MM_TILE(DTN, DT, 3, 8, 2)          \
    MM_TILE(DTN, DT, 1, 6, 2) MM_TILE(DTN, DT, 2, 6, 2) MM_TILE(DTN, DT, 3, 6, 2)          \
    MM_TILE(DTN, DT, 4, 6, 2)                                                              \
    MM_TILE(DTN, DT, 1, 1, 0) MM_TILE(DTN, DT, 2, 1, 0) MM_TILE(DTN, DT, 3, 1, 0)          \
    MM_TILE(DTN, DT, 4, 1, 0)                                                              \
    static mm_tile_fn mm_tile_##DTN(int tb, int nb) {                                      \
        static const mm_tile_fn wide8[4] = {mm_tile_##DTN##_1x8_2, mm_tile_##DTN##_2x8_2,  \
                                            mm_tile_##DTN##_3x8_2, NULL};                  \
        static const mm_tile_fn wide6[4] = {mm_tile_##DTN##_1x6_2, mm_tile_##DTN##_2x6_2,  \
                                            mm_tile_##DTN##_3x6_2, mm_tile_##DTN##_4x6_2}; \
        static const mm_tile_fn narrow[4] = {mm_tile_##DTN##_1x1_0, mm_tile_##DTN##_2x1_0, \
                                             mm_tile_##DTN##_3x1_0, mm_tile_##DTN##_4x1_0};\
        return nb == 8 ? wide8[tb - 1] : nb == 6 ? wide6[tb - 1] : narrow[tb - 1];         \
    }
MM_TILES(f32, SP_DT_F32)
MM_TILES(bf16, SP_DT_BF16)
MM_TILES(f16, SP_DT_F16)

/* floats of X kept hot per token chunk (~512 KB of the 1 MB L2) */
#define MM_XCHUNK_FLOATS (128 * 1024)

/* Rows [n0, n1) of Y for all tokens. [f0, f1): the rows this thread will do next (its next
 * claimed chunk; empty if none) — the last row block streams their first block in, so
 * consecutive chunks flow without a cold start. cold: request the first row block at once. */
void sp_mm_rows_avx512(const sp_mm_ctx *c, int n0, int n1, int f0, int f1, int cold) {
    mm_tile_fn (*pick)(int, int) =
        c->dt == SP_DT_F32 ? mm_tile_f32 : c->dt == SP_DT_BF16 ? mm_tile_bf16 : mm_tile_f16;
    const int T = c->T, K = c->K;
    const size_t row_bytes = (size_t)K * sp_dtype_size(c->dt);
    const size_t steps = (size_t)(K / 16 > 0 ? K / 16 : 1);
    const int TBmax = T >= 4 ? 4 : T;
    const int NB = T >= 4 ? 6 : 8;
    int Tc = T;
    if (T > 16) {
        Tc = (MM_XCHUNK_FLOATS / (K > 0 ? K : 1)) & ~3;
        if (Tc < 4) Tc = 4;
    }
    const int ahead_rows = (T >= 2 ? MM_AHEAD_BLOCKS : 1) * NB;
    if (cold)
        for (size_t o = 0; o < (size_t)(n1 - n0 < ahead_rows ? n1 - n0 : ahead_rows) * row_bytes; o += 64)
            _mm_prefetch((const char *)c->W + (size_t)n0 * row_bytes + o, _MM_HINT_T0);
    for (int tc0 = 0; tc0 < T; tc0 += Tc) {
        int tc1 = tc0 + Tc < T ? tc0 + Tc : T;
        /* token blocks per row block, of near-equal sizes (9 tokens: 3+3+3, not 4+4+1 — a
         * lone token would widen every W chunk again for 6 FMAs) */
        int nblk = (tc1 - tc0 + TBmax - 1) / TBmax;
        int tb_base = (tc1 - tc0) / nblk, tb_extra = (tc1 - tc0) % nblk;
        for (int n = n0; n < n1;) {
            int nb = n1 - n >= NB ? NB : 1;
            /* the rows to stream in while this block computes: the row block `ahead` blocks on
             * in this chunk; past its end, the first block of the next token chunk (this
             * chunk again, likely still in L2) or the matching block of the next claimed chunk */
            int p0 = n + nb + ahead_rows - NB, p1 = p0 + NB < n1 ? p0 + NB : n1;
            if (p0 >= n1) {
                if (tc1 < T) {
                    p0 = n0, p1 = n0 + NB < n1 ? n0 + NB : n1;
                } else {
                    p0 = f0 + (p0 - n1) < f1 ? f0 + (p0 - n1) : f1; /* f1: nothing left to stream */
                    p1 = p0 + NB < f1 ? p0 + NB : f1;
                }
            }
            const char *next = (const char *)c->W + (size_t)p0 * row_bytes;
            size_t len = (size_t)(p1 > p0 ? p1 - p0 : 0) * row_bytes;
            int b = 0;
            for (int t = tc0; t < tc1; b++) {
                int tb = tb_base + (b < tb_extra);
                mm_pf pf = {next + len * b / nblk, next + len * (b + 1) / nblk, 0};
                pf.step = (size_t)(pf.end - pf.p) / steps + 1;
                pick(tb, nb)(c, t, n, &pf);
                t += tb;
            }
            n += nb;
        }
    }
}
