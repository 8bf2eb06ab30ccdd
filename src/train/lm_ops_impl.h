/* lm_ops_impl.h — the target-LM ops of lm_ops.h, written once over `real` and compiled by
 * lm_ops.c (float) and lm_ops_f64.c (double). The includer defines real, LOP(name), EXP,
 * TANH and GELU(x) (float: the inference kernel's sp_gelu_tanh, so the training forward is the
 * inference arithmetic whatever the compiler contracts). Dimension letters as in ops_impl.h; NB sequences of T tokens. */

/* ---- causal (+ sliding-window) attention -------------------------------------------------- */
typedef struct {
    real *out, *att, *dq, *dk, *dv, *dp;
    const real *q, *k, *v, *dout, *att_in;
    int NB, T, NH, KVH, D, window;
    real scale;
} LOP(attn_job);

static inline int LOP(attn_lo)(int i, int window) {
    int lo = window > 0 ? i - window + 1 : 0;
    return lo < 0 ? 0 : lo;
}

/* one (sequence b, head h): the forward of ops_impl.h's attention with a per-query key range */
static void LOP(attn_fwd_one)(const LOP(attn_job) *g, int b, int h) {
    int T = g->T, NH = g->NH, KVH = g->KVH, D = g->D, kh = h / (NH / KVH);
    size_t row0 = (size_t)b * T;
    for (int i = 0; i < T; i++) {
        const real *qi = g->q + ((row0 + i) * NH + h) * D;
        real *p = g->att + (((size_t)b * NH + h) * T + i) * T;
        int lo = LOP(attn_lo)(i, g->window);
        real mx = 0;
        for (int j = 0; j < T; j++) p[j] = 0;
        for (int j = lo; j <= i; j++) {
            const real *kj = g->k + ((row0 + j) * KVH + kh) * D;
            real s = 0;
            for (int d = 0; d < D; d++) s += qi[d] * kj[d];
            p[j] = s * g->scale;
            if (j == lo || p[j] > mx) mx = p[j];
        }
        real sum = 0;
        for (int j = lo; j <= i; j++) {
            p[j] = EXP(p[j] - mx);
            sum += p[j];
        }
        real *o = g->out + ((row0 + i) * NH + h) * D;
        for (int d = 0; d < D; d++) o[d] = 0;
        for (int j = lo; j <= i; j++) {
            p[j] /= sum;
            const real *vj = g->v + ((row0 + j) * KVH + kh) * D;
            for (int d = 0; d < D; d++) o[d] += p[j] * vj[d];
        }
    }
}

static void LOP(attn_fwd_share)(void *ctx, int share, int n_shares) {
    const LOP(attn_job) *g = ctx;
    int lo, hi;
    sp_pool_split(g->NB * g->NH, 1, share, n_shares, &lo, &hi);
    for (int u = lo; u < hi; u++) LOP(attn_fwd_one)(g, u / g->NH, u % g->NH);
}

void LOP(causal_attention_forward)(sp_pool *pool, real *out, real *att, const real *q, const real *k,
                                   const real *v, int NB, int T, int NH, int KVH, int D, int window,
                                   real scale) {
    LOP(attn_job) g = {.out = out, .att = att, .q = q, .k = k, .v = v, .NB = NB, .T = T, .NH = NH,
                       .KVH = KVH, .D = D, .window = window, .scale = scale};
    sp_pool_run(pool, LOP(attn_fwd_share), &g);
}

/* dv_j += Σ_i p_ij·dout_i;  dp_ij = dout_i·v_j;  ds_ij = p_ij·(dp_ij − Σ_j' p_ij'·dp_ij');
 * dq_i += scale·Σ_j ds_ij·k_j;  dk_j += scale·Σ_i ds_ij·q_i.
 * One share owns whole KV-head groups of a sequence, so dk/dv rows have a single writer. */
static void LOP(attn_bwd_one)(const LOP(attn_job) *g, int b, int h) {
    int T = g->T, NH = g->NH, KVH = g->KVH, D = g->D, kh = h / (NH / KVH);
    size_t row0 = (size_t)b * T;
    real *dp = g->dp + ((size_t)b * NH + h) * T;
    for (int i = 0; i < T; i++) {
        const real *p = g->att_in + (((size_t)b * NH + h) * T + i) * T;
        const real *doi = g->dout + ((row0 + i) * NH + h) * D;
        const real *qi = g->q + ((row0 + i) * NH + h) * D;
        real *dqi = g->dq + ((row0 + i) * NH + h) * D;
        int lo = LOP(attn_lo)(i, g->window);
        real pdp = 0;
        for (int j = lo; j <= i; j++) {
            const real *vj = g->v + ((row0 + j) * KVH + kh) * D;
            real *dvj = g->dv + ((row0 + j) * KVH + kh) * D;
            real s = 0;
            for (int d = 0; d < D; d++) {
                s += doi[d] * vj[d];
                dvj[d] += p[j] * doi[d];
            }
            dp[j] = s;
            pdp += p[j] * s;
        }
        for (int j = lo; j <= i; j++) {
            real ds = p[j] * (dp[j] - pdp) * g->scale;
            const real *kj = g->k + ((row0 + j) * KVH + kh) * D;
            real *dkj = g->dk + ((row0 + j) * KVH + kh) * D;
            for (int d = 0; d < D; d++) {
                dqi[d] += ds * kj[d];
                dkj[d] += ds * qi[d];
            }
        }
    }
}

static void LOP(attn_bwd_share)(void *ctx, int share, int n_shares) {
    const LOP(attn_job) *g = ctx;
    int lo, hi, grp = g->NH / g->KVH;
    sp_pool_split(g->NB * g->KVH, 1, share, n_shares, &lo, &hi);
    for (int u = lo; u < hi; u++) {
        int b = u / g->KVH, kh = u % g->KVH;
        for (int h = kh * grp; h < (kh + 1) * grp; h++) LOP(attn_bwd_one)(g, b, h);
    }
}

void LOP(causal_attention_backward)(sp_pool *pool, real *dq, real *dk, real *dv, real *dp, const real *dout,
                                    const real *q, const real *k, const real *v, const real *att, int NB,
                                    int T, int NH, int KVH, int D, int window, real scale) {
    LOP(attn_job) g = {.dq = dq, .dk = dk, .dv = dv, .dp = dp, .dout = dout, .q = q, .k = k, .v = v,
                       .att_in = att, .NB = NB, .T = T, .NH = NH, .KVH = KVH, .D = D, .window = window,
                       .scale = scale};
    sp_pool_run(pool, LOP(attn_bwd_share), &g);
}

/* ---- GeGLU: out = gelu_tanh(g)·u, gelu_tanh(g) = ½·g·(1 + tanh(κ·(g + 0.044715·g³))) ------ */
void LOP(geglu_forward)(real *out, const real *gate, const real *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = GELU(gate[i]) * up[i];
}
/* gelu'(g) = ½·(1 + th) + ½·g·(1 − th²)·κ·(1 + 3·0.044715·g²), th = tanh(inner) */
void LOP(geglu_backward)(real *dgate, real *dup, const real *dout, const real *gate, const real *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        real x = gate[i], x3 = x * x * x;
        real th = TANH((real)SP_GELU_K * (x + (real)SP_GELU_A * x3));
        real gelu = (real)0.5 * x * ((real)1 + th);
        real dgelu = (real)0.5 * ((real)1 + th) +
                     (real)0.5 * x * ((real)1 - th * th) * (real)SP_GELU_K * ((real)1 + (real)(3 * SP_GELU_A) * x * x);
        dgate[i] += dout[i] * up[i] * dgelu;
        dup[i] += dout[i] * gelu;
    }
}

/* ---- softcap: y = c·tanh(x/c);  dx = dy·(1 − (y/c)²) ----------------------------------------- */
void LOP(softcap_forward)(real *y, const real *x, size_t n, real c) {
    for (size_t i = 0; i < n; i++) y[i] = c * TANH(x[i] / c);
}
void LOP(softcap_backward)(real *dx, const real *dy, const real *y, size_t n, real c) {
    for (size_t i = 0; i < n; i++) {
        real t = y[i] / c;
        dx[i] += dy[i] * ((real)1 - t * t);
    }
}
