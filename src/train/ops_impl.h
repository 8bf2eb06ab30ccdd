/* ops_impl.h — the bodies of the training ops of ops.h, written once over a scalar type `real`
 * and compiled twice: ops.c (real = float: the trainer's path, GEMMs and attention on the thread
 * pool) and ops_f64.c (real = double, naive GEMMs: the reference the finite-difference tests
 * differentiate; it renames every op to its _f64 twin with the list in ops_f64_names.h). Every
 * definition carries its float name, so `grep '^void sp_tr_linear_forward'` finds it.
 *
 * Every op is a pair, llm.c style: `*_forward(out…, saved…, in…, weights…, dims)` and
 * `*_backward(d_in…, d_weights…, d_out, in/saved…, weights…, dims)`. Backward ACCUMULATES
 * (+=) into every gradient it is given, so gradients are zeroed once per step; a NULL gradient
 * pointer means "not wanted". The includer defines, before including this file:
 *   real            float or double
 *   MM_NT(pool, C, A, B, M, K, N)       C[M,N]  = A[M,K] · B[N,K]ᵀ   (overwrite)
 *   MM_NN_ACC(pool, C, A, B, M, K, N)   C[M,N] += A[M,K] · B[K,N]
 *   MM_TN_ACC(pool, C, A, B, M, K, N)   C[M,N] += A[K,M]ᵀ · B[K,N]
 *   EXP, COS, SIN, FABS, TANH           math functions of that precision
 *   GELU_TANH(x)                        the tanh GELU of one value
 * Dimension letters: T rows (tokens), K in width, N out width, H hidden, NH / KVH heads,
 * D head dim, V vocab, r Markov rank, Tq / Tk query / key rows of one attention group. */

/* ---- linear: out[T,N] = in[T,K] · W[N,K]ᵀ (PyTorch nn.Linear without bias) ---------------- */
void sp_tr_linear_forward(sp_pool *pool, real *out, const real *in, const real *W, int T, int K, int N) {
    MM_NT(pool, out, in, W, T, K, N);
}
void sp_tr_linear_backward(sp_pool *pool, real *din, real *dW, const real *dout, const real *in,
                         const real *W, int T, int K, int N) {
    if (din) MM_NN_ACC(pool, din, dout, W, T, N, K);  /* din[T,K] += dout[T,N] · W[N,K] */
    if (dW) MM_TN_ACC(pool, dW, dout, in, N, T, K);   /* dW[N,K]  += dout[T,N]ᵀ · in[T,K] */
}

/* ---- RMSNorm over rows of width n: out = in · rstd · w, rstd = 1/sqrt(mean(in²) + eps) ---- */
void sp_tr_rmsnorm_forward(real *out, real *rstd, const real *in, const real *w, int T, int n, double eps) {
    for (int t = 0; t < T; t++) {
        const real *x = in + (size_t)t * n;
        real *y = out + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
        real r = (real)(1.0 / sqrt(ss / n + eps));
        rstd[t] = r;
        for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    }
}
/* with xhat = x·r, g = dout·w:  din = r · (g − xhat · mean(g·xhat)),  dw = Σ_t dout·xhat */
void sp_tr_rmsnorm_backward(real *din, real *dw, const real *dout, const real *in, const real *w,
                          const real *rstd, int T, int n) {
    for (int t = 0; t < T; t++) {
        const real *x = in + (size_t)t * n, *dy = dout + (size_t)t * n;
        real r = rstd[t];
        double dot = 0;
        for (int i = 0; i < n; i++) dot += (double)dy[i] * w[i] * x[i] * r;
        real m = (real)(dot / n);
        if (dw)
            for (int i = 0; i < n; i++) dw[i] += dy[i] * x[i] * r;
        if (din) {
            real *dx = din + (size_t)t * n;
            for (int i = 0; i < n; i++) dx[i] += r * (dy[i] * w[i] - x[i] * r * m);
        }
    }
}

/* ---- RoPE (rotate-half, pairs (j, j+D/2)) on x[T, nh, D], row t at position pos[t] ---------
 * forward: (a, b) -> (a·c − b·s, a·s + b·c); backward is the inverse rotation of the gradient. */
static void tr_rope_rotate(real *out, const real *in, int T, int nh, int D, const int *pos,
                            const float *inv_freq, int sign, int accumulate) {
    int half = D / 2;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < half; j++) {
            real ang = (real)pos[t] * (real)inv_freq[j];
            real c = COS(ang), s = (real)sign * SIN(ang);
            for (int h = 0; h < nh; h++) {
                const real *x = in + ((size_t)t * nh + h) * D;
                real *y = out + ((size_t)t * nh + h) * D;
                real a = x[j], b = x[j + half];
                real ya = a * c - b * s, yb = a * s + b * c;
                if (accumulate) { y[j] += ya; y[j + half] += yb; }
                else { y[j] = ya; y[j + half] = yb; }
            }
        }
}
void sp_tr_rope_forward(real *out, const real *in, int T, int nh, int D, const int *pos, const float *inv_freq) {
    tr_rope_rotate(out, in, T, nh, D, pos, inv_freq, +1, 0);
}
void sp_tr_rope_backward(real *din, const real *dout, int T, int nh, int D, const int *pos, const float *inv_freq) {
    tr_rope_rotate(din, dout, T, nh, D, pos, inv_freq, -1, 1);
}

/* ---- attention: NB groups, each Tq queries over its own Tk keys (tr_attn_shape) --------------
 * Query i of a group sees key j when the mode allows it (causal: lo(i) <= j <= i, with
 * lo(i) = i − window + 1 for a sliding window, the window counting the query itself as
 * sp_attention's does; non-causal: every key) and kmask[j] is 1. Query head h reads KV head
 * h / (NH/KVH); a query with no visible key gets out = 0 and att = 0. The float ops split
 * (group, head) pairs over the pool: every output has one writer and sums run in key order, so
 * the result does not depend on the thread count. */
typedef struct {
    real *out, *att, *dq, *dk, *dv, *dp;
    const real *q, *k, *v, *dout, *att_in;
    const tr_attn_shape *s;
} tr_attn_job;

static int tr_attn_visible(const tr_attn_shape *s, const uint8_t *km, int i, int j) {
    if (km && !km[j]) return 0;
    if (!s->causal) return 1;
    return j <= i && (s->window <= 0 || j > i - s->window);
}

/* one (group b, head h) */
static void tr_attn_fwd_one(const tr_attn_job *g, int b, int h) {
    const tr_attn_shape *s = g->s;
    int Tq = s->Tq, Tk = s->Tk, NH = s->NH, KVH = s->KVH, D = s->D, kh = h / (NH / KVH);
    real scale = (real)s->scale;
    const uint8_t *km = s->kmask ? s->kmask + (size_t)b * Tk : NULL;
    size_t q0 = (size_t)b * Tq, k0 = (size_t)b * Tk;
    for (int i = 0; i < Tq; i++) {
        const real *qi = g->q + ((q0 + i) * NH + h) * D;
        real *p = g->att + (((size_t)b * NH + h) * Tq + i) * Tk;
        real mx = 0;
        int any = 0;
        for (int j = 0; j < Tk; j++) {
            if (!tr_attn_visible(s, km, i, j)) { p[j] = 0; continue; }
            const real *kj = g->k + ((k0 + j) * KVH + kh) * D;
            real dot = 0;
            for (int d = 0; d < D; d++) dot += qi[d] * kj[d];
            p[j] = dot * scale;
            if (!any || p[j] > mx) mx = p[j];
            any = 1;
        }
        real sum = 0;
        for (int j = 0; j < Tk; j++)
            if (tr_attn_visible(s, km, i, j)) { p[j] = EXP(p[j] - mx); sum += p[j]; }
        real *o = g->out + ((q0 + i) * NH + h) * D;
        for (int d = 0; d < D; d++) o[d] = 0;
        if (!any) continue;
        for (int j = 0; j < Tk; j++) {
            if (!tr_attn_visible(s, km, i, j)) continue;
            p[j] /= sum;
            const real *vj = g->v + ((k0 + j) * KVH + kh) * D;
            for (int d = 0; d < D; d++) o[d] += p[j] * vj[d];
        }
    }
}

static void tr_attn_fwd_share(void *ctx, int share, int n_shares) {
    const tr_attn_job *g = ctx;
    int lo, hi, NH = g->s->NH;
    sp_pool_split(g->s->NB * NH, 1, share, n_shares, &lo, &hi);
    for (int u = lo; u < hi; u++) tr_attn_fwd_one(g, u / NH, u % NH);
}

void sp_tr_attention_forward(sp_pool *pool, real *out, real *att, const real *q, const real *k, const real *v,
                          const tr_attn_shape *s) {
    tr_attn_job g = {.out = out, .att = att, .q = q, .k = k, .v = v, .s = s};
    sp_pool_run(pool, tr_attn_fwd_share, &g);
}

/* dv_j += Σ_i p_ij·dout_i;  dp_ij = dout_i·v_j;  ds_ij = p_ij·(dp_ij − Σ_j' p_ij'·dp_ij');
 * dq_i += scale·Σ_j ds_ij·k_j;  dk_j += scale·Σ_i ds_ij·q_i.  One (group, KV head) at a time:
 * its query heads in order, each query in order; dp row [Tk] of that pair. */
static void tr_attn_bwd_one(const tr_attn_job *g, int b, int h, real *dp) {
    const tr_attn_shape *s = g->s;
    int Tq = s->Tq, Tk = s->Tk, NH = s->NH, KVH = s->KVH, D = s->D, kh = h / (NH / KVH);
    real scale = (real)s->scale;
    const uint8_t *km = s->kmask ? s->kmask + (size_t)b * Tk : NULL;
    size_t q0 = (size_t)b * Tq, k0 = (size_t)b * Tk;
    for (int i = 0; i < Tq; i++) {
        const real *p = g->att_in + (((size_t)b * NH + h) * Tq + i) * Tk;
        const real *doi = g->dout + ((q0 + i) * NH + h) * D;
        const real *qi = g->q + ((q0 + i) * NH + h) * D;
        real *dqi = g->dq + ((q0 + i) * NH + h) * D;
        real pdp = 0;
        for (int j = 0; j < Tk; j++) {
            dp[j] = 0;
            if (!tr_attn_visible(s, km, i, j)) continue;
            const real *vj = g->v + ((k0 + j) * KVH + kh) * D;
            real *dvj = g->dv + ((k0 + j) * KVH + kh) * D;
            real dot = 0;
            for (int d = 0; d < D; d++) { dot += doi[d] * vj[d]; dvj[d] += p[j] * doi[d]; }
            dp[j] = dot;
            pdp += p[j] * dot;
        }
        for (int j = 0; j < Tk; j++) {
            if (!tr_attn_visible(s, km, i, j)) continue;
            real ds = p[j] * (dp[j] - pdp) * scale;
            const real *kj = g->k + ((k0 + j) * KVH + kh) * D;
            real *dkj = g->dk + ((k0 + j) * KVH + kh) * D;
            for (int d = 0; d < D; d++) { dqi[d] += ds * kj[d]; dkj[d] += ds * qi[d]; }
        }
    }
}

/* a share owns whole (group, KV head) pairs, so dk / dv rows have a single writer */
static void tr_attn_bwd_share(void *ctx, int share, int n_shares) {
    const tr_attn_job *g = ctx;
    const tr_attn_shape *s = g->s;
    int lo, hi, grp = s->NH / s->KVH;
    sp_pool_split(s->NB * s->KVH, 1, share, n_shares, &lo, &hi);
    for (int u = lo; u < hi; u++)
        for (int h = (u % s->KVH) * grp; h < (u % s->KVH + 1) * grp; h++)
            tr_attn_bwd_one(g, u / s->KVH, h, g->dp + (size_t)u * s->Tk);
}

void sp_tr_attention_backward(sp_pool *pool, real *dq, real *dk, real *dv, real *dp, const real *dout, const real *q,
                           const real *k, const real *v, const real *att, const tr_attn_shape *s) {
    tr_attn_job g = {.dq = dq, .dk = dk, .dv = dv, .dp = dp, .dout = dout, .q = q, .k = k, .v = v, .att_in = att,
                     .s = s};
    sp_pool_run(pool, tr_attn_bwd_share, &g);
}

/* ---- SiLU-gated MLP glue: out = silu(gate) · up, n elements -------------------------------- */
void sp_tr_swiglu_forward(real *out, const real *gate, const real *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gate[i] / (1 + EXP(-gate[i])) * up[i];
}
/* silu'(g) = σ(g)·(1 + g·(1 − σ(g))) */
void sp_tr_swiglu_backward(real *dgate, real *dup, const real *dout, const real *gate, const real *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        real s = 1 / (1 + EXP(-gate[i]));
        dgate[i] += dout[i] * up[i] * s * (1 + gate[i] * (1 - s));
        dup[i] += dout[i] * gate[i] * s;
    }
}

/* ---- GeGLU (Gemma-4 MLP, docs/TRANSFORMER.md §5): out = gelu_tanh(gate) ⊙ up ----------------
 * gelu_tanh(g) = ½·g·(1 + tanh(u)), u = √(2/π)·(g + 0.044715·g³): GELU_TANH of the includer (the
 * float build uses the inference kernel's sp_gelu_tanh, so the training forward is the inference
 * arithmetic). gelu_tanh'(g) = ½·(1 + tanh u) + ½·g·(1 − tanh² u)·√(2/π)·(1 + 3·0.044715·g²) */
void sp_tr_geglu_forward(real *out, const real *gate, const real *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = GELU_TANH(gate[i]) * up[i];
}
void sp_tr_geglu_backward(real *dgate, real *dup, const real *dout, const real *gate, const real *up, size_t n) {
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

/* ---- vanilla low-rank Markov head (docs/DSPARK.md §4) ---------------------------------------
 * code[t] = W1[prev[t]] (r), bias[t] = W2 · code[t] (V): bias[T,V] = code[T,r] · W2[V,r]ᵀ. */
void sp_tr_markov_forward(sp_pool *pool, real *bias, real *code, const int32_t *prev, const real *W1,
                        const real *W2, int T, int V, int r) {
    for (int t = 0; t < T; t++) memcpy(code + (size_t)t * r, W1 + (size_t)prev[t] * r, sizeof(real) * r);
    MM_NT(pool, bias, code, W2, T, r, V);
}
/* dcode[T,r]: on entry the gradient other consumers of code (the confidence head) left there;
 * this adds dbias·W2 and scatters it into dW1 rows. */
void sp_tr_markov_backward(sp_pool *pool, real *dW1, real *dW2, real *dcode, const real *dbias, const real *code,
                         const int32_t *prev, const real *W2, int T, int V, int r) {
    MM_NN_ACC(pool, dcode, dbias, W2, T, V, r);
    if (dW2) MM_TN_ACC(pool, dW2, dbias, code, V, T, r);
    if (dW1)
        for (int t = 0; t < T; t++) {
            real *g = dW1 + (size_t)prev[t] * r;
            const real *d = dcode + (size_t)t * r;
            for (int i = 0; i < r; i++) g[i] += d[i];
        }
}

/* ---- gated Markov head (docs/DSPARK.md §4, markov_head_type "gated") -----------------------
 * vec[t] = [h[t] ; code[t]] (H + r), gate[t] = σ(Wg·vec[t] + bg), mix[t] = gate[t] ⊙ code[t];
 * the bias is then W2 · mix (linear op). Wg [r, H + r], bg [r]. Saved: vec, gate. */
void sp_tr_gated_forward(sp_pool *pool, real *mix, real *gate, real *vec, const real *h, const real *code,
                       const real *Wg, const real *bg, int T, int H, int r) {
    size_t K = (size_t)H + r;
    for (int t = 0; t < T; t++) {
        memcpy(vec + t * K, h + (size_t)t * H, sizeof(real) * H);
        memcpy(vec + t * K + H, code + (size_t)t * r, sizeof(real) * r);
    }
    MM_NT(pool, gate, vec, Wg, T, (int)K, r);
    for (size_t j = 0; j < (size_t)T * r; j++) {
        real g = 1 / (1 + EXP(-(gate[j] + bg[j % r])));
        gate[j] = g;
        mix[j] = g * code[j];
    }
}
/* dpre [T, r] and dvec [T, H + r]: scratch. mix = g ⊙ code, g = σ(pre):
 * dcode += dmix ⊙ g + dvec[H:], dpre = dmix ⊙ code ⊙ g(1 − g), dvec = dpre · Wg, dh += dvec[:H] */
void sp_tr_gated_backward(sp_pool *pool, real *dh, real *dcode, real *dWg, real *dbg, real *dpre, real *dvec,
                        const real *dmix, const real *vec, const real *gate, const real *code, const real *Wg,
                        int T, int H, int r) {
    size_t K = (size_t)H + r;
    for (size_t j = 0; j < (size_t)T * r; j++) {
        real g = gate[j];
        dpre[j] = dmix[j] * code[j] * g * (1 - g);
        dcode[j] += dmix[j] * g;
        dbg[j % r] += dpre[j];
    }
    memset(dvec, 0, sizeof(real) * T * K);
    MM_NN_ACC(pool, dvec, dpre, Wg, T, r, (int)K);     /* dvec[T,K] += dpre[T,r] · Wg[r,K] */
    if (dWg) MM_TN_ACC(pool, dWg, dpre, vec, r, T, (int)K); /* dWg[r,K] += dpreᵀ · vec */
    for (int t = 0; t < T; t++)
        for (size_t i = 0; i < K; i++) {
            if (i < (size_t)H) dh[(size_t)t * H + i] += dvec[t * K + i];
            else dcode[(size_t)t * r + (i - H)] += dvec[t * K + i];
        }
}

/* ---- rnn Markov head (docs/DSPARK.md §4, markov_head_type "rnn") ---------------------------
 * Over the B slots of each of NB blocks (row t = e·B + k), left to right from s = 0:
 *   z = [s_prev ; code ; h] (2r + H);  [g|c|o] = Wj·z + bj;
 *   s = σ(g) ⊙ s_prev + (1 − σ(g)) ⊙ tanh(c);  mix = tanh(o)   (the bias is W2 · mix).
 * Wj [3r, 2r + H], bj [3r]. Saved, SLOT-major (row k·NB + e, so one GEMM per slot): z [T, 2r+H]
 * and act [T, 3r] = (σ(g), tanh(c), tanh(o)). mix is element-major [T, r]. */
void sp_tr_rnn_forward(sp_pool *pool, real *mix, real *act, real *z, const real *h, const real *code,
                     const real *Wj, const real *bj, int NB, int B, int H, int r) {
    size_t K = 2 * (size_t)r + H, R3 = 3 * (size_t)r;
    for (int k = 0; k < B; k++) {
        real *zk = z + (size_t)k * NB * K, *ak = act + (size_t)k * NB * R3;
        for (int e = 0; e < NB; e++) {
            size_t t = (size_t)e * B + k;
            if (k == 0) memset(zk + e * K, 0, sizeof(real) * r); /* s_prev of slot k > 0: written below */
            memcpy(zk + e * K + r, code + t * r, sizeof(real) * r);
            memcpy(zk + e * K + 2 * r, h + t * H, sizeof(real) * H);
        }
        MM_NT(pool, ak, zk, Wj, NB, (int)K, (int)R3);
        for (int e = 0; e < NB; e++) {
            size_t t = (size_t)e * B + k;
            real *a = ak + e * R3;
            for (int i = 0; i < r; i++) {
                real g = 1 / (1 + EXP(-(a[i] + bj[i]))), c = TANH(a[r + i] + bj[r + i]);
                real o = TANH(a[2 * r + i] + bj[2 * r + i]);
                a[i] = g; a[r + i] = c; a[2 * r + i] = o;
                mix[t * r + i] = o;
                if (k + 1 < B) z[((size_t)(k + 1) * NB + e) * K + i] = g * zk[e * K + i] + (1 - g) * c;
            }
        }
    }
}
/* dpre [T, 3r] and dz [T, 2r+H] (slot-major) and ds [NB, r]: scratch. Back through the slots,
 * ds = ∂L/∂s_k = ∂L/∂s_{k+1} ⊙ σ(g_{k+1}) + dz_{k+1}[:r] (0 for the last slot):
 *   d(pre o) = dmix ⊙ (1 − o²),  d(pre g) = ds ⊙ (s_prev − c) ⊙ g(1 − g),
 *   d(pre c) = ds ⊙ (1 − g)(1 − c²) */
void sp_tr_rnn_backward(sp_pool *pool, real *dh, real *dcode, real *dWj, real *dbj, real *dpre, real *dz, real *ds,
                      const real *dmix, const real *act, const real *z, const real *Wj, int NB, int B, int H,
                      int r) {
    size_t K = 2 * (size_t)r + H, R3 = 3 * (size_t)r, T = (size_t)NB * B;
    memset(dz, 0, sizeof(real) * T * K);
    for (int k = B - 1; k >= 0; k--) {
        const real *zk = z + (size_t)k * NB * K, *ak = act + (size_t)k * NB * R3;
        const real *an = act + (size_t)(k + 1) * NB * R3, *dzn = dz + (size_t)(k + 1) * NB * K; /* slot k+1 */
        real *dpk = dpre + (size_t)k * NB * R3;
        for (int e = 0; e < NB; e++) {
            size_t t = (size_t)e * B + k;
            const real *a = ak + e * R3;
            for (int i = 0; i < r; i++) {
                real dsk = k + 1 < B ? ds[(size_t)e * r + i] * an[e * R3 + i] + dzn[e * K + i] : 0;
                real g = a[i], c = a[r + i], o = a[2 * r + i], sp = zk[e * K + i];
                real *dp = dpk + e * R3;
                dp[i] = dsk * (sp - c) * g * (1 - g);
                dp[r + i] = dsk * (1 - g) * (1 - c * c);
                dp[2 * r + i] = dmix[t * r + i] * (1 - o * o);
                ds[(size_t)e * r + i] = dsk;
            }
            for (size_t i = 0; i < R3; i++) dbj[i] += dpk[e * R3 + i];
        }
        MM_NN_ACC(pool, dz + (size_t)k * NB * K, dpk, Wj, NB, (int)R3, (int)K); /* dz_k += dpre_k · Wj */
    }
    if (dWj) MM_TN_ACC(pool, dWj, dpre, z, (int)R3, (int)T, (int)K); /* dWj[3r,K] += dpreᵀ · z */
    for (int k = 0; k < B; k++)
        for (int e = 0; e < NB; e++) {
            size_t t = (size_t)e * B + k;
            const real *dzr = dz + ((size_t)k * NB + e) * K;
            for (int i = 0; i < r; i++) dcode[t * r + i] += dzr[r + i];
            for (int i = 0; i < H; i++) dh[t * H + i] += dzr[2 * r + i];
        }
}

/* ---- rows of a table by index (the Markov code W1[prev]) ---------------------------------
 * out[t] = W[idx[t]] (n wide); backward scatter-adds. */
void sp_tr_gather_forward(real *out, const int32_t *idx, const real *W, int T, int n) {
    for (int t = 0; t < T; t++) memcpy(out + (size_t)t * n, W + (size_t)idx[t] * n, sizeof(real) * n);
}
void sp_tr_gather_backward(real *dW, const real *dout, const int32_t *idx, int T, int n) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) dW[(size_t)idx[t] * n + i] += dout[(size_t)t * n + i];
}

/* ---- confidence head (docs/DSPARK.md §5): logit[t] = w · [h[t] ; code[t]] + b --------------
 * code may be NULL (r = 0: confidence_head_with_markov false). */
void sp_tr_conf_forward(real *logit, const real *h, const real *code, const real *w, const real *b,
                      int T, int H, int r) {
    for (int t = 0; t < T; t++) {
        real s = b[0];
        for (int i = 0; i < H; i++) s += w[i] * h[(size_t)t * H + i];
        for (int i = 0; i < r; i++) s += w[H + i] * code[(size_t)t * r + i];
        logit[t] = s;
    }
}
void sp_tr_conf_backward(real *dh, real *dcode, real *dw, real *db, const real *dlogit, const real *h,
                       const real *code, const real *w, int T, int H, int r) {
    for (int t = 0; t < T; t++) {
        real g = dlogit[t];
        db[0] += g;
        for (int i = 0; i < H; i++) {
            dw[i] += g * h[(size_t)t * H + i];
            if (dh) dh[(size_t)t * H + i] += g * w[i];
        }
        for (int i = 0; i < r; i++) {
            dw[H + i] += g * code[(size_t)t * r + i];
            if (dcode) dcode[(size_t)t * r + i] += g * w[H + i];
        }
    }
}

/* ---- frozen shared LM head: U[T,V] = h[T,H] · Wlm[V,H]ᵀ; gradient to h only --------------- */
void sp_tr_lmhead_forward(sp_pool *pool, real *U, const real *h, const real *Wlm, int T, int H, int V) {
    MM_NT(pool, U, h, Wlm, T, H, V);
}
void sp_tr_lmhead_backward(sp_pool *pool, real *dh, const real *dU, const real *Wlm, int T, int H, int V) {
    MM_NN_ACC(pool, dh, dU, Wlm, T, V, H);
}

/* ---- final logit soft-cap (Gemma-4, docs/TRANSFORMER.md §5): y = c·tanh(x/c) over n logits (in
 * place allowed); backward from the capped values: dx += dy·(1 − (y/c)²). */
void sp_tr_softcap_forward(real *y, const real *x, size_t n, real c) {
    for (size_t i = 0; i < n; i++) y[i] = c * TANH(x[i] / c);
}
void sp_tr_softcap_backward(real *dx, const real *dy, const real *y, size_t n, real c) {
    for (size_t i = 0; i < n; i++) {
        real t = y[i] / c;
        dx[i] += dy[i] * ((real)1 - t * t);
    }
}

/* ---- softmax of each row of Z[T,V] into q ------------------------------------------------- */
void sp_tr_softmax_rows(real *q, const real *Z, int T, int V) {
    for (int t = 0; t < T; t++) {
        const real *z = Z + (size_t)t * V;
        real *p = q + (size_t)t * V, mx = z[0], sum = 0;
        for (int v = 1; v < V; v++) if (z[v] > mx) mx = z[v];
        for (int v = 0; v < V; v++) { p[v] = EXP(z[v] - mx); sum += p[v]; }
        for (int v = 0; v < V; v++) p[v] /= sum;
    }
}

/* −log softmax(z)[label] = logsumexp(z) − z[label], in double from the logits: the probability
 * itself underflows to 0 (and its log to −inf) once the label's logit is ~100 below the row's
 * largest, which a wide random head reaches at the first step */
static double tr_row_nll(const real *z, int V, int label) {
    double mx = z[0], s = 0;
    for (int v = 1; v < V; v++) if (z[v] > mx) mx = z[v];
    for (int v = 0; v < V; v++) s += exp((double)z[v] - mx);
    return mx + log(s) - (double)z[label];
}

/* Σ|q − p| of one row, and *cstar = 1 − Σ|q − p| / 2 = Σ min(q, p) clamped to [0, 1] (the
 * confidence head's target) */
static double tr_l1_cstar(const real *q, const real *p, int V, real *cstar) {
    double l1 = 0;
    for (int v = 0; v < V; v++) l1 += FABS(q[v] - p[v]);
    double c = 1 - 0.5 * l1;
    *cstar = (real)(c < 0 ? 0 : c > 1 ? 1 : c);
    return l1;
}

/* ---- softmax cross-entropy: loss = Σ_t wt[t]·(−log softmax(Z_t)[label_t]) / denom ---------- */
double sp_tr_ce_forward(real *q, const real *Z, const int32_t *labels, const real *wt, int T, int V, double denom) {
    sp_tr_softmax_rows(q, Z, T, V);
    double L = 0;
    for (int t = 0; t < T; t++)
        if (wt[t] != 0) L += (double)wt[t] * tr_row_nll(Z + (size_t)t * V, V, labels[t]);
    return L / denom;
}
void sp_tr_ce_backward(real *dZ, const real *q, const int32_t *labels, const real *wt, int T, int V, double denom) {
    for (int t = 0; t < T; t++) {
        if (wt[t] == 0) continue;
        real g = (real)(wt[t] / denom);
        for (int v = 0; v < V; v++) dZ[(size_t)t * V + v] += g * q[(size_t)t * V + v];
        dZ[(size_t)t * V + labels[t]] -= g;
    }
}

/* ---- the DSpark loss (docs/DSPARK.md §7), per slot t with weight wt[t] -----------------------
 *   q = softmax(Z_t);  CE_t = −log q[label];  L1_t = Σ_v |q_v − P_t,v|  (FULL L1, not halved);
 *   c*_t = clamp(1 − ½·L1_t, 0, 1) (no gradient);  BCE_t = BCEWithLogits(conf_t, c*_t);
 *   L = (a_ce·Σ w·CE + a_l1·Σ w·L1 + a_conf·Σ w·BCE) / denom,  denom = Σ w + 1e-6 (global).
 * We use the full L1 exactly as DeepSpec's loss.py computes it (its comment calls it "TV"):
 * ½·L1 is the total-variation distance, so c* = 1 − TV = Σ_v min(q_v, P_v) is the exact
 * acceptance probability of a draft sampled from q against the target P; the L1 term is thus
 * 2·TV, and keeping it unhalved keeps the published loss weights (0.1, 0.9, 1.0) meaning what
 * they mean in the released checkpoints. sign(0) is taken as 0 (a subgradient).
 * conf may be NULL (no confidence head: the BCE term is skipped). P may be NULL when a_l1 = 0
 * and conf is NULL (DFlash: CE only). terms[4] receives Σw·CE, Σw·L1, Σw·BCE, Σw (unnormalised).
 * cstar[T] receives c*_t (computed whenever P is given). Returns L. */
double sp_tr_spark_loss_forward(double *terms, real *q, real *cstar, const real *Z, const real *P,
                              const int32_t *labels, const real *conf, const real *wt, int T, int V,
                              const double *alpha, double denom) {
    sp_tr_softmax_rows(q, Z, T, V);
    double sce = 0, sl1 = 0, sbce = 0, sw = 0;
    for (int t = 0; t < T; t++) {
        const real *qt = q + (size_t)t * V;
        double l1 = P ? tr_l1_cstar(qt, P + (size_t)t * V, V, &cstar[t]) : 0;
        double w = wt[t];
        sw += w;
        if (w == 0) continue;
        sce += w * tr_row_nll(Z + (size_t)t * V, V, labels[t]);
        sl1 += w * l1;
        if (conf) {
            double z = conf[t], y = cstar[t];
            sbce += w * ((z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z))));
        }
    }
    terms[0] = sce; terms[1] = sl1; terms[2] = sbce; terms[3] = sw;
    return (alpha[0] * sce + alpha[1] * sl1 + alpha[2] * sbce) / denom;
}

/* dz[v] += g · q_v · (sign(q_v − p_v) − Σ_u q_u · sign(q_u − p_u)): the gradient of g · Σ|q − p|
 * with respect to the logits z of q = softmax(z) */
static void tr_tv_grad_add(real *dz, const real *q, const real *p, real g, int V) {
    real qs = 0;
    for (int v = 0; v < V; v++) {
        real d = q[v] - p[v];
        qs += q[v] * (real)((d > 0) - (d < 0));
    }
    for (int v = 0; v < V; v++) {
        real d = q[v] - p[v];
        dz[v] += g * q[v] * ((real)((d > 0) - (d < 0)) - qs);
    }
}

/* dZ_u += w/denom · (a_ce·(q_u − 1[u = label]) + a_l1·q_u·(s_u − Σ_v q_v·s_v)), s = sign(q − P);
 * dconf += w/denom · a_conf · (σ(conf) − c*). */
void sp_tr_spark_loss_backward(real *dZ, real *dconf, const real *q, const real *cstar, const real *P,
                             const int32_t *labels, const real *conf, const real *wt, int T, int V,
                             const double *alpha, double denom) {
    for (int t = 0; t < T; t++) {
        double w = wt[t];
        if (w == 0) continue;
        const real *qt = q + (size_t)t * V;
        real *dz = dZ + (size_t)t * V;
        real gce = (real)(w * alpha[0] / denom), gl1 = (real)(w * alpha[1] / denom);
        if (gce != 0) {
            for (int v = 0; v < V; v++) dz[v] += gce * qt[v];
            dz[labels[t]] -= gce;
        }
        if (gl1 != 0 && P) tr_tv_grad_add(dz, qt, P + (size_t)t * V, gl1, V);
        if (conf && dconf) {
            double s = 1 / (1 + exp(-(double)conf[t]));
            dconf[t] += (real)(w * alpha[2] / denom * (s - cstar[t]));
        }
    }
}

/* ---- the tempered DSpark loss (docs/TRAINING.md §7), per slot t with weight wt[t] and inverse
 * temperature β = tinv[t]:
 *   q = softmax(Z_t) (the CE term, untempered);  qT = softmax(β·Z_t);  P_t the target's tempered
 *   distribution softmax(β·z_t), given by the caller;
 *   CE_t = −log q[label];  L1_t = Σ_v |qT_v − P_t,v|;  KL_t = Σ_v P_t,v (log P_t,v − log qT_v);
 *   c*_t = clamp(1 − ½·L1_t, 0, 1) = Σ_v min(qT_v, P_t,v) (no gradient): the probability that a
 *   draft sampled at temperature 1/β is accepted by a verify sampling the target at 1/β;
 *   BCE_t = BCEWithLogits(conf_t, c*_t);
 *   L = (a_ce·Σ w·CE + a_l1·Σ w·L1 + a_conf·Σ w·BCE + a_kl·Σ w·KL) / denom.
 * alpha[4] = a_ce, a_l1, a_conf, a_kl. P is required (conf may be NULL). terms[5] receives Σw·CE,
 * Σw·L1, Σw·BCE, Σw, Σw·KL; q and qT [T,V] the two softmaxes, cstar[T] c*_t. Returns L. */
double sp_tr_spark_loss_temp_forward(double *terms, real *q, real *qT, real *cstar, const real *Z, const real *P,
                                   const int32_t *labels, const real *conf, const real *wt, const real *tinv, int T,
                                   int V, const double *alpha, double denom) {
    sp_tr_softmax_rows(q, Z, T, V);
    double sce = 0, sl1 = 0, sbce = 0, skl = 0, sw = 0;
    for (int t = 0; t < T; t++) {
        const real *z = Z + (size_t)t * V, *pt = P + (size_t)t * V;
        real *qt = qT + (size_t)t * V, b = tinv[t], mx = b * z[0], sum = 0;
        for (int v = 1; v < V; v++) if (b * z[v] > mx) mx = b * z[v];
        for (int v = 0; v < V; v++) { qt[v] = EXP(b * z[v] - mx); sum += qt[v]; }
        for (int v = 0; v < V; v++) qt[v] /= sum;
        double l1 = tr_l1_cstar(qt, pt, V, &cstar[t]);
        double w = wt[t];
        sw += w;
        if (w == 0) continue;
        sce += w * tr_row_nll(z, V, labels[t]);
        sl1 += w * l1;
        if (alpha[3] != 0) { /* log qT_v = β·z_v − logsumexp(β·z), in double; 0·log 0 = 0 */
            double m2 = (double)b * z[0], s2 = 0, kl = 0;
            for (int v = 1; v < V; v++) if ((double)b * z[v] > m2) m2 = (double)b * z[v];
            for (int v = 0; v < V; v++) s2 += exp((double)b * z[v] - m2);
            double lse = m2 + log(s2);
            for (int v = 0; v < V; v++)
                if (pt[v] > 0) kl += (double)pt[v] * (log((double)pt[v]) - ((double)b * z[v] - lse));
            skl += w * kl;
        }
        if (conf) {
            double zc = conf[t], y = cstar[t];
            sbce += w * ((zc > 0 ? zc : 0) - zc * y + log1p(exp(-fabs(zc))));
        }
    }
    terms[0] = sce; terms[1] = sl1; terms[2] = sbce; terms[3] = sw; terms[4] = skl;
    return (alpha[0] * sce + alpha[1] * sl1 + alpha[2] * sbce + alpha[3] * skl) / denom;
}
/* Through qT = softmax(β·Z) every distillation gradient carries the factor β:
 * dZ_u += w/denom · (a_ce·(q_u − 1[u = label]) + β·a_l1·qT_u·(s_u − Σ_v qT_v·s_v)
 *                    + β·a_kl·(qT_u − P_u)),  s = sign(qT − P);
 * dconf += w/denom · a_conf · (σ(conf) − c*). */
void sp_tr_spark_loss_temp_backward(real *dZ, real *dconf, const real *q, const real *qT, const real *cstar,
                                  const real *P, const int32_t *labels, const real *conf, const real *wt,
                                  const real *tinv, int T, int V, const double *alpha, double denom) {
    for (int t = 0; t < T; t++) {
        double w = wt[t];
        if (w == 0) continue;
        const real *qt = q + (size_t)t * V, *qtT = qT + (size_t)t * V, *pt = P + (size_t)t * V;
        real *dz = dZ + (size_t)t * V;
        real gce = (real)(w * alpha[0] / denom), gl1 = (real)(w * alpha[1] / denom * tinv[t]);
        real gkl = (real)(w * alpha[3] / denom * tinv[t]);
        if (gce != 0) {
            for (int v = 0; v < V; v++) dz[v] += gce * qt[v];
            dz[labels[t]] -= gce;
        }
        if (gl1 != 0) tr_tv_grad_add(dz, qtT, pt, gl1, V);
        if (gkl != 0)
            for (int v = 0; v < V; v++) dz[v] += gkl * (qtT[v] - pt[v]);
        if (conf && dconf) {
            double s = 1 / (1 + exp(-(double)conf[t]));
            dconf[t] += (real)(w * alpha[2] / denom * (s - cstar[t]));
        }
    }
}
