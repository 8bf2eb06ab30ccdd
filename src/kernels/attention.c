/* attention.c — causal GQA attention over a (linear or ring) KV cache, FORMATS.md §4.3, §5.5.
 *
 * For each (token t, query head h), independently:
 *   keys p = lo .. pos (pos = pos0 + t, lo = window > 0 ? max(0, pos - window + 1) : 0),
 *   read from slot (ring ? p % cap : p) of KV head h / (NH / KVH);
 *   s_p = canonical_dot(q, k_p) · scale;   m = max s_p;   e_p = exp(s_p − m);
 *   sum = Σ e_p and acc = Σ e_p · v_p, both in increasing p;   out = acc / sum.
 * Nothing in that sequence depends on T, on t's index in the batch or on the thread count, so
 * a verify pass over k tokens gives exactly the outputs of k single-token passes.
 *
 * Scratch: scores go to a fixed 16 KB stack tile. When a query sees more keys than the tile
 * holds, a first pass computes only the max and the second recomputes each tile's scores
 * (bit-identical, as the dot product is deterministic) — no allocation, no length limit,
 * and the same results as the one-tile case.
 *
 * Threads split the T·NH (token, head) pairs statically. The caller guarantees that every
 * visited position is still in the cache (for a ring: cap >= window + T − 1). */
#include "kernels_internal.h"

#define ATTN_TILE 4096

typedef struct {
    float *out;
    const float *q, *K, *V;
    const sp_attn_shape *s;
} attn_ctx;

static inline size_t kv_off(const sp_attn_shape *s, int p, int kvh) {
    size_t slot = (size_t)(s->ring ? p % s->cap : p);
    return (slot * (size_t)s->KVH + (size_t)kvh) * (size_t)s->D;
}

/* scores of keys p0 .. p1-1 into buf; returns their max */
static float attn_scores(const attn_ctx *c, const float *q, int kvh, int p0, int p1, float *buf) {
    const sp_attn_shape *s = c->s;
    float m = -INFINITY;
    for (int p = p0; p < p1; p++) {
        float v = sp_dot_f32(q, c->K + kv_off(s, p, kvh), s->D) * s->scale;
        buf[p - p0] = v;
        if (v > m) m = v;
    }
    return m;
}

/* buf[i] = exp(buf[i] - m), i < n; lane-wise, so each value is independent of its index */
static void attn_exp(float *buf, int n, float m) {
    int i = 0;
#if SP_AVX512
    __m512 vm = _mm512_set1_ps(m);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(buf + i, sp_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(buf + i), vm)));
    if (i < n) {
        __mmask16 k = sp_tail_mask(n - i);
        __m512 e = sp_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, buf + i), vm));
        _mm512_mask_storeu_ps(buf + i, k, e);
    }
#else
    for (; i < n; i++) buf[i] = expf(buf[i] - m);
#endif
}

/* o[d] = fma(e, v[d], o[d]) for d < D */
static inline void attn_axpy(float *o, float e, const float *v, int D) {
    int d = 0;
#if SP_AVX512
    __m512 ve = _mm512_set1_ps(e);
    for (; d + 16 <= D; d += 16)
        _mm512_storeu_ps(o + d, _mm512_fmadd_ps(ve, _mm512_loadu_ps(v + d), _mm512_loadu_ps(o + d)));
#endif
    for (; d < D; d++) o[d] = fmaf(e, v[d], o[d]);
}

static void attn_one(const attn_ctx *c, int t, int h) {
    const sp_attn_shape *s = c->s;
    const int D = s->D, pos = s->pos0 + t;
    const int lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
    const int kvh = h / (s->NH / s->KVH);
    const float *q = c->q + ((size_t)t * s->NH + h) * D;
    float *o = c->out + ((size_t)t * s->NH + h) * D;
    float buf[ATTN_TILE];

    float m = -INFINITY;
    const int one_tile = pos + 1 - lo <= ATTN_TILE;
    for (int p0 = lo; p0 <= pos; p0 += ATTN_TILE) {
        int p1 = p0 + ATTN_TILE < pos + 1 ? p0 + ATTN_TILE : pos + 1;
        float mt = attn_scores(c, q, kvh, p0, p1, buf);
        if (mt > m) m = mt;
    }
    for (int d = 0; d < D; d++) o[d] = 0.0f;
    float sum = 0.0f;
    for (int p0 = lo; p0 <= pos; p0 += ATTN_TILE) {
        int p1 = p0 + ATTN_TILE < pos + 1 ? p0 + ATTN_TILE : pos + 1;
        if (!one_tile) attn_scores(c, q, kvh, p0, p1, buf);
        attn_exp(buf, p1 - p0, m);
        for (int p = p0; p < p1; p++) {
            float e = buf[p - p0];
            sum += e;
            attn_axpy(o, e, c->V + kv_off(s, p, kvh), D);
        }
    }
    for (int d = 0; d < D; d++) o[d] = o[d] / sum;
}

static void attn_task(void *arg, int i, int n) {
    const attn_ctx *c = arg;
    int lo, hi;
    sp_pool_split(c->s->T * c->s->NH, 1, i, n, &lo, &hi);
    for (int j = lo; j < hi; j++) attn_one(c, j / c->s->NH, j % c->s->NH);
}

void sp_attention(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                  const sp_attn_shape *s) {
    SP_ASSERT(s->KVH > 0 && s->NH % s->KVH == 0);
    if (s->T <= 0) return;
    attn_ctx c = {out, q, K, V, s};
    sp_pool_run(pool, attn_task, &c);
}

void sp_attention_ref(float *out, const float *q, const float *K, const float *V,
                      const sp_attn_shape *s) {
    const int D = s->D, group = s->NH / s->KVH;
    for (int t = 0; t < s->T; t++)
        for (int h = 0; h < s->NH; h++) {
            const int pos = s->pos0 + t;
            const int lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
            const float *qh = q + ((size_t)t * s->NH + h) * D;
            double m = -INFINITY, sum = 0;
            for (int p = lo; p <= pos; p++) {
                const float *k = K + kv_off(s, p, h / group);
                double d = 0;
                for (int i = 0; i < D; i++) d += (double)qh[i] * k[i];
                d *= s->scale;
                if (d > m) m = d;
            }
            double acc[1024] = {0};
            SP_ASSERT(D <= 1024);
            for (int p = lo; p <= pos; p++) {
                const float *k = K + kv_off(s, p, h / group), *v = V + kv_off(s, p, h / group);
                double d = 0;
                for (int i = 0; i < D; i++) d += (double)qh[i] * k[i];
                double e = exp(d * s->scale - m);
                sum += e;
                for (int i = 0; i < D; i++) acc[i] += e * v[i];
            }
            float *o = out + ((size_t)t * s->NH + h) * D;
            for (int i = 0; i < D; i++) o[i] = (float)(acc[i] / sum);
        }
}
