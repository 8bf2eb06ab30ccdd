/* attention.c — causal GQA attention over a (linear or ring) KV cache, docs/TRANSFORMER.md §3, §5.
 *
 * For each (token t, query head h), independently:
 *   keys p = lo .. pos (pos = pos0 + t, lo = window > 0 ? max(0, pos - window + 1) : 0),
 *   read from slot (ring ? p % cap : p) of KV head h / (NH / KVH);
 *   s_p = canonical_dot(q, k_p) · scale;   m = max s_p;   e_p = exp(s_p − m);
 *   sum = Σ e_p and acc = Σ e_p · v_p, both in increasing p;   out = acc / sum.
 * Nothing in that sequence depends on T, on t's index in the batch or on the thread count, so
 * a verify pass over k tokens gives exactly the outputs of k single-token passes.
 *
 * Work unit: up to 8 tokens × up to 8 query heads sharing one KV head (fewer tokens at long
 * context, so the unit's scores fit the scratch). Each K and V row is loaded once for all of
 * them (at long context the cache traffic rivals the weights': a verify pass over 8 tokens
 * must not read it 8 times, nor GQA once per query head). QK scores and the P·V sums are
 * register-tiled, and the rows' softmax sums advance side by side, each in its own key order
 * (docs/SIMD.md, "Attention"). Rows of one KV head are KVH·D floats apart — often a page, where hardware
 * prefetchers stop — so they are prefetched in software. Threads claim units from a shared counter; with few
 * units (T = 1, few KV heads) head subgroups shrink so every thread gets work. None of this
 * changes the sequence of operations of any (t, h).
 *
 * Scratch: scores live in a fixed 128 KB stack buffer (32768 floats: rows × keys, e.g.
 * 2 heads × 16384 keys at T = 1, 64 rows × 512 keys at most). When a unit spans
 * more keys than a tile, a first pass computes only the maxima and the second recomputes each
 * tile's scores (bit-identical: the dot product is deterministic) — no allocation, no length
 * limit, and the same results as the one-tile case.
 *
 * The caller guarantees that every visited position is still in the cache (for a ring:
 * cap >= window + T − 1, or cap > pos0 + T − 1 when window is 0). */
#include <stdatomic.h>

#include "core/prof.h"
#include "kernels_internal.h"

#define ATTN_BUF 32768  /* floats of score scratch per unit (128 KB of stack) */
#define ATTN_MAX_HS 8   /* query heads per work unit */
#define ATTN_MAX_TB 8   /* tokens per work unit */

typedef struct {
    float *out;
    const float *q, *K, *V;
    const sp_attn_shape *s;
    const sp_attn_ops *ops; /* the tier's pieces */
    int hs, nsub; /* heads per subgroup, subgroups per KV head */
    int tpu;      /* tokens per unit (<= ATTN_MAX_TB) */
    atomic_int next_unit; /* units are claimed dynamically (results do not depend on who) */
} attn_ctx;

/* one work unit: tokens t0 .. t0+nt-1, query heads h0 .. h0+nh-1 of KV head kvh */
typedef struct {
    int t0, nt, kvh, h0, nh;
    int lo[ATTN_MAX_TB], pos[ATTN_MAX_TB]; /* key range of each token */
} attn_unit;

static inline void prefetch_row(const float *row, int D) {
    for (int d = 0; d < D; d += 16) __builtin_prefetch(row + d, 0, 3);
}

/* the query row of (token u->t0 + j, head u->h0 + i) */
static inline const float *q_row(const attn_ctx *c, const attn_unit *u, int j, int i) {
    return c->q + ((size_t)(u->t0 + j) * c->s->NH + u->h0 + i) * c->s->D;
}

/* The keys a .. b-1 (b <= p1) from a on that every row in rows[0..*nr) sees, and no other
 * row: segment boundaries are every token's lo and pos + 1. Returns b. */
static int attn_segment(const attn_unit *u, int a, int p1, int *rows, int *nr) {
    int b = p1;
    for (int j = 0; j < u->nt; j++) {
        if (u->lo[j] > a && u->lo[j] < b) b = u->lo[j];
        if (u->pos[j] + 1 > a && u->pos[j] + 1 < b) b = u->pos[j] + 1;
    }
    *nr = 0;
    for (int j = 0; j < u->nt; j++)
        if (u->lo[j] <= a && a <= u->pos[j])
            for (int i = 0; i < u->nh; i++) rows[(*nr)++] = j * u->nh + i;
    return b;
}

/* ---- the portable pieces (the reference path; same operations as every tier's) ---------- */
/* rows × keys of scores per tile */
#define ATTN_QK_ROWS 4
#define ATTN_QK_KEYS 6
/* rows per P·V block */
#define ATTN_PV_ROWS 3

static void qk_scalar(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                      int col, float *m, int NR, int NK) {
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < NK; x++) {
            float v = sp_dot_f32_portable(q[r], k[x], D) * scale;
            e[r][col + x] = v;
            if (v > m[r]) m[r] = v;
        }
}
static void qk_scalar_1x6(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 1, 6);
}
static void qk_scalar_2x6(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 2, 6);
}
static void qk_scalar_3x6(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 3, 6);
}
static void qk_scalar_4x6(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 4, 6);
}
static void qk_scalar_1x1(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 1, 1);
}
static void qk_scalar_2x1(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 2, 1);
}
static void qk_scalar_3x1(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 3, 1);
}
static void qk_scalar_4x1(const float *const *q, const float *const *k, int D, float scale, float *const *e,
                          int col, float *m) {
    qk_scalar(q, k, D, scale, e, col, m, 4, 1);
}

static void exp_scalar(float *buf, int n, float m) {
    for (int i = 0; i < n; i++) buf[i] = sp_exp_lane(buf[i] - m);
}

static void pv_scalar(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                      const float *const *e, int d0, int dn, int NR) {
    for (int p = a; p < b; p++) {
        const float *vp = V + sp_kv_off(s, p, kvh) + d0;
        for (int r = 0; r < NR; r++)
            for (int d = 0; d < dn; d++) o[r][d0 + d] = fmaf(e[r][p - p0], vp[d], o[r][d0 + d]);
    }
}
static void pv_scalar_1(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                        const float *const *e, int d0, int dn) {
    pv_scalar(V, s, kvh, a, b, p0, o, e, d0, dn, 1);
}
static void pv_scalar_2(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                        const float *const *e, int d0, int dn) {
    pv_scalar(V, s, kvh, a, b, p0, o, e, d0, dn, 2);
}
static void pv_scalar_3(const float *V, const sp_attn_shape *s, int kvh, int a, int b, int p0, float *const *o,
                        const float *const *e, int d0, int dn) {
    pv_scalar(V, s, kvh, a, b, p0, o, e, d0, dn, 3);
}

static const sp_attn_ops attn_ops_scalar = {
    .qk_wide = {qk_scalar_1x6, qk_scalar_2x6, qk_scalar_3x6, qk_scalar_4x6},
    .qk_narrow = {qk_scalar_1x1, qk_scalar_2x1, qk_scalar_3x1, qk_scalar_4x1},
    .pv = {pv_scalar_1, pv_scalar_2, pv_scalar_3},
    .exp = exp_scalar,
};

static const sp_attn_ops *attn_ops(sp_cpu_tier tier) {
    switch (tier) {
#if defined(__x86_64__)
    case SP_CPU_AVX512: return &sp_attn_ops_avx512;
    case SP_CPU_AVX2: return &sp_attn_ops_avx2;
#endif
#if defined(__aarch64__)
    case SP_CPU_NEON: return &sp_attn_ops_neon;
#endif
    default: return &attn_ops_scalar;
    }
}

/* scores of keys p0 .. p1-1 into buf[(j·nh + i)·ld + p − p0] for every row (token j, head i)
 * that sees key p; m[row] = max(m[row], those scores) in increasing p */
static void attn_scores(const attn_ctx *c, const attn_unit *u, int p0, int p1,
                        float *buf, int ld, float *m) {
    const sp_attn_shape *s = c->s;
    const int D = s->D;
    const float *qr[ATTN_MAX_TB * ATTN_MAX_HS]; /* each row's query */
    for (int j = 0; j < u->nt; j++)
        for (int i = 0; i < u->nh; i++) qr[j * u->nh + i] = q_row(c, u, j, i);
    for (int a = p0; a < p1;) {
        int rows[ATTN_MAX_TB * ATTN_MAX_HS], nr;
        int b = attn_segment(u, a, p1, rows, &nr);
        for (int p = a; nr && p < b;) {
            int nk = b - p >= ATTN_QK_KEYS ? ATTN_QK_KEYS : 1;
            const float *k[ATTN_QK_KEYS];
            for (int x = 0; x < nk; x++) {
                k[x] = c->K + sp_kv_off(s, p + x, u->kvh);
                if (p + x + SP_ATTN_PF_KEYS < b) prefetch_row(c->K + sp_kv_off(s, p + x + SP_ATTN_PF_KEYS, u->kvh), D);
            }
            for (int r0 = 0; r0 < nr; r0 += ATTN_QK_ROWS) {
                int n = nr - r0 < ATTN_QK_ROWS ? nr - r0 : ATTN_QK_ROWS;
                const float *q[ATTN_QK_ROWS];
                float *e[ATTN_QK_ROWS], mm[ATTN_QK_ROWS];
                for (int x = 0; x < n; x++) {
                    int r = rows[r0 + x];
                    q[x] = qr[r];
                    e[x] = buf + (size_t)r * ld;
                    mm[x] = m[r];
                }
                sp_attn_qk_fn f = nk == ATTN_QK_KEYS ? c->ops->qk_wide[n - 1] : c->ops->qk_narrow[n - 1];
                f(q, k, D, s->scale, e, p - p0, mm);
                for (int x = 0; x < n; x++) m[rows[r0 + x]] = mm[x];
            }
            p += nk;
        }
        a = b;
    }
}

/* o += P·V over keys [a, b) for the rows listed in rows[0..nr) (all of which see every key
 * of [a, b)), in blocks of up to 3 rows and 128-float slices of D */
static void attn_pv(const attn_ctx *c, const attn_unit *u, int a, int b, int p0, const int *rows, int nr,
                    float *buf, int ld) {
    const int D = c->s->D;
    for (int d0 = 0; d0 < D; d0 += 128) {
        int dn = D - d0 < 128 ? D - d0 : 128;
        for (int k = 0, n; k < nr; k += n) {
            /* blocks of 3 rows, ending 2 + 2 rather than 3 + 1 (a lone row gets one FMA
             * per V load) */
            n = nr - k == 4 ? 2 : nr - k < ATTN_PV_ROWS ? nr - k : ATTN_PV_ROWS;
            float *o[ATTN_PV_ROWS];
            const float *e[ATTN_PV_ROWS];
            for (int x = 0; x < n; x++) {
                int r = rows[k + x], j = r / u->nh, i = r % u->nh;
                o[x] = c->out + ((size_t)(u->t0 + j) * c->s->NH + u->h0 + i) * D;
                e[x] = buf + (size_t)r * ld;
            }
            c->ops->pv[n - 1](c->V, c->s, u->kvh, a, b, p0, o, e, d0, dn);
        }
    }
}

/* rows whose running sums advance together */
#define ATTN_SUM_ROWS 8

/* sum[x] += e[x][p] for p = a[x] .. b[x]-1 in increasing p, for n <= ATTN_SUM_ROWS rows. Over
 * the keys every row has, the rows' additions interleave — independent chains, where one row
 * at a time would wait on each addition — while each row keeps its own order. */
static void attn_row_sums(const float *const *e, const int *a, const int *b, int n, float *sum) {
    int A = a[0], B = b[0];
    for (int x = 1; x < n; x++) {
        if (a[x] > A) A = a[x];
        if (b[x] < B) B = b[x];
    }
    if (A >= B) { /* no key in common */
        for (int x = 0; x < n; x++)
            for (int p = a[x]; p < b[x]; p++) sum[x] += e[x][p];
        return;
    }
    for (int x = 0; x < n; x++)
        for (int p = a[x]; p < A; p++) sum[x] += e[x][p];
    /* 4 or 8 chains; rows past n repeat row 0 and their sums are dropped */
    const float *f[ATTN_SUM_ROWS];
    float t[ATTN_SUM_ROWS];
    for (int x = 0; x < ATTN_SUM_ROWS; x++) f[x] = e[x < n ? x : 0], t[x] = sum[x < n ? x : 0];
    if (n <= 4)
        for (int p = A; p < B; p++)
            for (int x = 0; x < 4; x++) t[x] += f[x][p];
    else
        for (int p = A; p < B; p++)
            for (int x = 0; x < ATTN_SUM_ROWS; x++) t[x] += f[x][p];
    for (int x = 0; x < n; x++) sum[x] = t[x];
    for (int x = 0; x < n; x++)
        for (int p = B; p < b[x]; p++) sum[x] += e[x][p];
}

static void attn_run_unit(const attn_ctx *c, attn_unit *u) {
    const sp_attn_shape *s = c->s;
    const int D = s->D, rows = u->nt * u->nh;
    float buf[ATTN_BUF];
    /* keys per score tile: as many as the scratch holds for this unit's rows */
    const int tile = ATTN_BUF / rows / 16 * 16;
    float m[ATTN_MAX_TB * ATTN_MAX_HS], sum[ATTN_MAX_TB * ATTN_MAX_HS];

    for (int j = 0; j < u->nt; j++) {
        u->pos[j] = s->noncausal ? s->pos0 + s->T - 1 : s->pos0 + u->t0 + j;
        u->lo[j] = s->window > 0 && u->pos[j] - s->window + 1 > 0 ? u->pos[j] - s->window + 1 : 0;
    }
    /* lo and pos grow with t: the unit's keys are lo[0] .. pos[nt-1] */
    const int P0 = u->lo[0], P1 = u->pos[u->nt - 1] + 1;
    for (int r = 0; r < rows; r++) m[r] = -INFINITY, sum[r] = 0.0f;
    const int one_tile = P1 - P0 <= tile;
    for (int p0 = P0; p0 < P1; p0 += tile)
        attn_scores(c, u, p0, p0 + tile < P1 ? p0 + tile : P1, buf, tile, m);

    for (int j = 0; j < u->nt; j++)
        for (int i = 0; i < u->nh; i++) {
            float *o = c->out + ((size_t)(u->t0 + j) * s->NH + u->h0 + i) * D;
            for (int d = 0; d < D; d++) o[d] = 0.0f;
        }
    for (int p0 = P0; p0 < P1; p0 += tile) {
        int p1 = p0 + tile < P1 ? p0 + tile : P1;
        if (!one_tile) {
            float mdummy[ATTN_MAX_TB * ATTN_MAX_HS];
            for (int r = 0; r < rows; r++) mdummy[r] = -INFINITY;
            attn_scores(c, u, p0, p1, buf, tile, mdummy);
        }
        /* exp, then the running sums, per row over its visible keys in increasing order */
        int ra[ATTN_MAX_TB * ATTN_MAX_HS], rb[ATTN_MAX_TB * ATTN_MAX_HS];
        for (int j = 0; j < u->nt; j++) {
            int a = u->lo[j] > p0 ? u->lo[j] : p0, b = u->pos[j] + 1 < p1 ? u->pos[j] + 1 : p1;
            for (int i = 0; i < u->nh; i++) {
                int r = j * u->nh + i;
                ra[r] = a - p0, rb[r] = a < b ? b - p0 : a - p0;
                if (a < b) c->ops->exp(buf + (size_t)r * tile + (a - p0), b - a, m[r]);
            }
        }
        for (int r0 = 0; r0 < rows; r0 += ATTN_SUM_ROWS) {
            int n = rows - r0 < ATTN_SUM_ROWS ? rows - r0 : ATTN_SUM_ROWS;
            const float *e[ATTN_SUM_ROWS];
            for (int x = 0; x < n; x++) e[x] = buf + (size_t)(r0 + x) * tile;
            attn_row_sums(e, ra + r0, rb + r0, n, sum + r0);
        }
        /* P·V over segments of the tile in which the set of rows that see a key is fixed:
         * boundaries at every token's lo and pos + 1 */
        for (int a = p0; a < p1;) {
            int rows[ATTN_MAX_TB * ATTN_MAX_HS], nr;
            int b = attn_segment(u, a, p1, rows, &nr);
            if (nr) attn_pv(c, u, a, b, p0, rows, nr, buf, tile);
            a = b;
        }
    }
    for (int j = 0; j < u->nt; j++)
        for (int i = 0; i < u->nh; i++) {
            float *o = c->out + ((size_t)(u->t0 + j) * s->NH + u->h0 + i) * D;
            float sm = sum[j * u->nh + i];
            for (int d = 0; d < D; d++) o[d] = o[d] / sm;
        }
}

static void attn_task(void *arg, int i, int n) {
    (void)i, (void)n;
    attn_ctx *c = arg;
    const sp_attn_shape *s = c->s;
    const int G = s->NH / s->KVH, per_tb = s->KVH * c->nsub;
    const int n_tb = (s->T + c->tpu - 1) / c->tpu;
    for (;;) {
        int x = atomic_fetch_add_explicit(&c->next_unit, 1, memory_order_relaxed);
        if (x >= n_tb * per_tb) return;
        int tb = x / per_tb, kvh = x % per_tb / c->nsub, sg = x % c->nsub;
        int h0 = sg * c->hs, h1 = h0 + c->hs < G ? h0 + c->hs : G;
        int t0 = tb * c->tpu, t1 = t0 + c->tpu < s->T ? t0 + c->tpu : s->T;
        attn_unit u = {.t0 = t0, .nt = t1 - t0, .kvh = kvh, .h0 = kvh * G + h0, .nh = h1 - h0};
        attn_run_unit(c, &u);
    }
}

static void attn_run(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                     const sp_attn_shape *s, sp_cpu_tier tier) {
    SP_ASSERT(s->KVH > 0 && s->NH % s->KVH == 0);
    if (s->T <= 0) return;
    /* Unit shape. Heads: the whole group (up to 8). Tokens: up to 8, fewer when the unit's
     * rows × keys would not fit the score scratch — re-reading K/V (from cache) for another
     * unit costs less than the two-pass recomputation of every score. Then heads are halved
     * while there are fewer than two units per thread. None of it changes any result. */
    const int G = s->NH / s->KVH, nthr = sp_pool_size(pool);
    int hs = G < ATTN_MAX_HS ? G : ATTN_MAX_HS;
    long span = (long)s->pos0 + s->T; /* keys a unit of all T tokens can see, at most */
    if (s->window > 0 && span > (long)s->window + ATTN_MAX_TB - 1) span = (long)s->window + ATTN_MAX_TB - 1;
    int rows_fit = (int)(ATTN_BUF / (span > 16 ? span : 16));
    while (hs > 1 && rows_fit < hs) hs = (hs + 1) / 2;
    int tpu = rows_fit / hs;
    tpu = tpu < 1 ? 1 : tpu > ATTN_MAX_TB ? ATTN_MAX_TB : tpu;
    int n_tb = (s->T + tpu - 1) / tpu;
    tpu = (s->T + n_tb - 1) / n_tb; /* near-equal units: 9 tokens as 5 + 4, not 8 + 1 */
    while (hs > 1 && n_tb * s->KVH * ((G + hs - 1) / hs) < 2 * nthr) hs = (hs + 1) / 2;
    attn_ctx c = {out, q, K, V, s, attn_ops(tier), hs, (G + hs - 1) / hs, tpu, 0};
    atomic_init(&c.next_unit, 0);
    sp_pool_run(pool, attn_task, &c);
}

void sp_attention(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                  const sp_attn_shape *s) {
    int prof = sp_prof_enter_kernel(SP_PROF_ATTN);
    attn_run(pool, out, q, K, V, s, sp_cpu_level());
    sp_prof_leave(prof);
}

void sp_attention_tier(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                       const sp_attn_shape *s, sp_cpu_tier tier) {
    attn_run(pool, out, q, K, V, s, tier);
}

void sp_attention_ref(float *out, const float *q, const float *K, const float *V,
                      const sp_attn_shape *s) {
    const int D = s->D, group = s->NH / s->KVH;
    for (int t = 0; t < s->T; t++)
        for (int h = 0; h < s->NH; h++) {
            const int pos = s->noncausal ? s->pos0 + s->T - 1 : s->pos0 + t;
            const int lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
            const float *qh = q + ((size_t)t * s->NH + h) * D;
            double m = -INFINITY, sum = 0;
            for (int p = lo; p <= pos; p++) {
                const float *k = K + sp_kv_off(s, p, h / group);
                double d = 0;
                for (int i = 0; i < D; i++) d += (double)qh[i] * k[i];
                d *= s->scale;
                if (d > m) m = d;
            }
            double acc[1024] = {0};
            SP_ASSERT(D <= 1024);
            for (int p = lo; p <= pos; p++) {
                const float *k = K + sp_kv_off(s, p, h / group), *v = V + sp_kv_off(s, p, h / group);
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

const sp_attn_ops *sp_attn_ops_for(sp_cpu_tier tier) { return attn_ops(tier); }
