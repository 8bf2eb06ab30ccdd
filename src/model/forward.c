/* forward.c — the decoder forward over T tokens (prefill, decode, verify), FORMATS.md §4.3, §5.3–5.6.
 *
 *   llama / qwen3:  h += o_proj(attn(norm_in(h)));        h += mlp(norm_post(h))
 *   gemma4:         h += norm_post_attn(o_proj(attn(norm_in(h))))
 *                   h += norm_post_ffn(mlp(norm_pre_ffn(h)))
 *                   h += norm_ple(proj(gelu(gate(h)) ⊙ ple[l]))      (if PLE)
 *                   h *= layer_scalar
 *
 * Every kernel used here is batch-invariant, so each position's logits are bit-identical whether
 * it is computed alone or inside a block of T — the property lossless greedy verification needs.
 * The same holds across sequences: sp_model_forward_batch runs the rows of several sequences
 * through every matmul and norm together and attention per sequence on its own cache, so each
 * sequence gets exactly the results of its own forward (the server's continuous batching). */
#include <math.h>
#include <stdlib.h>

#include "kernels/quant.h"
#include "model_internal.h"

void sp_mat_row_f32(const sp_mat *w, int r, float *out) {
    size_t row = sp_dtype_row_bytes(w->dt, (size_t)w->k);
    int rc = sp_row_to_f32(out, (const char *)w->data + (size_t)r * row, w->dt, (size_t)w->k, NULL);
    SP_ASSERT(rc == 0); /* types and row lengths were checked at load (sp_mat_check) */
}

void sp_model_embed(const sp_model *m, float *out, int32_t token) {
    int H = m->cfg.hidden_size;
    sp_mat_row_f32(&m->embed, token, out);
    if (m->embed_scale != 1.0f)
        for (int i = 0; i < H; i++) out[i] *= m->embed_scale;
}

void sp_model_logits(sp_model *m, float *logits, const float *hidden, int T) {
    sp_matmul(m->pool, logits, hidden, T, &m->lm_head);
    if (m->cfg.final_softcap > 0) sp_softcap(logits, (size_t)T * m->cfg.vocab_size, (float)m->cfg.final_softcap);
}

/* Gemma-4 per-layer inputs for T tokens → ple[T, L, P] (FORMATS.md §5.6) */
static void ple_inputs(sp_model *m, sp_kv *kv, const int32_t *tokens, int T) {
    const sp_config *c = &m->cfg;
    int L = c->n_layers, P = c->ple_dim, H = c->hidden_size;
    float eps = (float)c->rms_eps;
    sp_matmul(m->pool, kv->ple, kv->x, T, &m->ple_model_proj); /* [T, L·P] = e · W_pmpᵀ */
    float proj_scale = 1.0f / sqrtf((float)H), in_scale = 1.0f / sqrtf(2.0f);
    float *tok = kv->pg; /* [L·P] scratch, one token at a time */
    for (int t = 0; t < T; t++) {
        float *ctx = kv->ple + (size_t)t * L * P;
        for (int i = 0; i < L * P; i++) ctx[i] *= proj_scale;
        sp_rmsnorm(ctx, ctx, m->ple_proj_norm, L, P, eps);
        int32_t id = tokens[t] < c->ple_vocab ? tokens[t] : 0;
        sp_mat_row_f32(&m->ple_embed, id, tok);
        for (int i = 0; i < L * P; i++) ctx[i] = (ctx[i] + tok[i] * m->ple_embed_scale) * in_scale;
    }
}

/* llama GGUF: attn_q / attn_k rows come in llama.cpp's order, where pair (2j, 2j+1) of a head
 * holds HF dims (j, j + D/2) (docs/GGUF.md). Each projected head is put back in HF order, so RoPE,
 * the cache and every later float operation are those of the safetensors checkpoint. */
static void heads_from_interleaved(float *x, int n_heads, int D) {
    float tmp[SP_MODEL_MAX_HEAD_DIM];
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * D;
        for (int j = 0; j < D / 2; j++) {
            tmp[j] = v[2 * j];
            tmp[j + D / 2] = v[2 * j + 1];
        }
        memcpy(v, tmp, (size_t)D * sizeof(float));
    }
}

/* position of row t: a chain's pos0 + t, a tree row's pos0 + its depth */
static inline int row_pos(int pos0, const int *depth, int t) { return pos0 + (depth ? depth[t] : t); }

/* Attention of layer li for the rows of every sequence: Q/K/V/O projections over all R rows at
 * once (S holds the scratch), RoPE by each row's own position, K/V appended to each sequence's
 * cache, and attention per sequence over its own cache. parents: NULL, or per sequence NULL (a
 * chain) or a token tree's parent rows: row t then sits at position pos0 + depth(t) and attends
 * its root path (attention_tree.c). */
static void attention_block(sp_model *m, sp_kv *S, const sp_forward_seq *seqs, const int32_t *const *parents, int n,
                            int R, int li) {
    const sp_config *c = &m->cfg;
    const sp_layer_config *lc = &c->layers[li];
    const sp_layer *l = &m->layers[li];
    int NH = c->n_heads, D = lc->head_dim, KVH = lc->n_kv_heads, src = lc->kv_source;
    float eps = (float)c->rms_eps;
    sp_pool *pool = m->pool;
    size_t qrow = (size_t)NH * D, row = (size_t)KVH * D;

    sp_matmul(pool, S->q, S->xn, R, &l->wq);
    if (m->qk_interleaved) heads_from_interleaved(S->q, R * NH, D);
    if (l->q_norm) sp_rmsnorm(S->q, S->q, l->q_norm, R * NH, D, eps);
    if (src == li) { /* project K/V of all rows */
        sp_matmul(pool, S->k, S->xn, R, &l->wk);
        if (m->qk_interleaved) heads_from_interleaved(S->k, R * KVH, D);
        if (l->wv.data) sp_matmul(pool, S->v, S->xn, R, &l->wv);
        else memcpy(S->v, S->k, (size_t)R * row * sizeof(float)); /* k_eq_v: V = raw K */
        if (l->k_norm) sp_rmsnorm(S->k, S->k, l->k_norm, R * KVH, D, eps);
        if (c->arch == SP_ARCH_GEMMA4) sp_rmsnorm(S->v, S->v, NULL, R * KVH, D, eps); /* weightless v_norm */
    }
    for (int s = 0, r0 = 0; s < n; r0 += seqs[s].T, s++) {
        sp_kv *kv = seqs[s].kv;
        int T = seqs[s].T, pos0 = kv->len;
        const int32_t *parent = parents ? parents[s] : NULL;
        int depth[SP_TREE_MAX_ROWS]; /* a tree row's offset from pos0 */
        for (int t = 0; parent && t < T; t++) depth[t] = parent[t] < 0 ? 0 : depth[parent[t]] + 1;
        const int *dp = parent ? depth : NULL;
        float *q = S->q + (size_t)r0 * qrow;
        for (int t = 0; t < T; t++) sp_rope(q + (size_t)t * qrow, NH, D, l->inv_freq, row_pos(pos0, dp, t));
        if (src == li) { /* append this sequence's K/V rows to its cache (row t in the slot of pos0 + t) */
            float *k = S->k + (size_t)r0 * row, *v = S->v + (size_t)r0 * row;
            for (int t = 0; t < T; t++) sp_rope(k + (size_t)t * row, KVH, D, l->inv_freq, row_pos(pos0, dp, t));
            for (int t = 0; t < T; t++) {
                int p = pos0 + t, slot = kv->ring[li] ? p % kv->cap[li] : p;
                memcpy(kv->K[li] + (size_t)slot * row, k + (size_t)t * row, row * sizeof(float));
                memcpy(kv->V[li] + (size_t)slot * row, v + (size_t)t * row, row * sizeof(float));
            }
        }
        sp_attn_shape sh = {
            .T = T, .pos0 = pos0, .NH = NH, .KVH = KVH, .D = D, .cap = kv->cap[src], .ring = kv->ring[src],
            .window = lc->sliding ? c->sliding_window : 0,
            .scale = c->arch == SP_ARCH_GEMMA4 ? 1.0f : 1.0f / sqrtf((float)D),
        };
        if (parent) sp_attention_tree(pool, S->att + (size_t)r0 * qrow, q, kv->K[src], kv->V[src], &sh, parent);
        else sp_attention(pool, S->att + (size_t)r0 * qrow, q, kv->K[src], kv->V[src], &sh);
    }
    sp_matmul(pool, S->o, S->att, R, &l->wo);
}

static void add(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* Check one sequence of a batched forward. */
static int check_seq(const sp_model *m, const sp_forward_seq *q, int i, sp_err *err) {
    const sp_config *c = &m->cfg;
    const sp_kv *kv = q->kv;
    if (!kv || kv->m != m) return sp_err_set(err, "forward: sequence %d: KV cache belongs to another model", i);
    if (q->T <= 0 || q->T > kv->max_batch)
        return sp_err_set(err, "forward: sequence %d: %d tokens in one call (allowed 1..%d)", i, q->T, kv->max_batch);
    if (kv->len + q->T > kv->max_ctx)
        return sp_err_set(err, "forward: sequence %d: context full (%d + %d tokens > %d)", i, kv->len, q->T,
                          kv->max_ctx);
    for (int t = 0; t < q->T; t++)
        if (q->tokens[t] < 0 || q->tokens[t] >= c->vocab_size)
            return sp_err_set(err, "forward: token id %d out of range 0..%d", q->tokens[t], c->vocab_size - 1);
    for (int j = 0; q->out && j < q->out->n_taps; j++)
        if (q->out->tap_layers[j] < 0 || q->out->tap_layers[j] >= c->n_layers)
            return sp_err_set(err, "forward: tap layer %d out of range 0..%d", q->out->tap_layers[j],
                              c->n_layers - 1);
    return 0;
}

/* The forward of n sequences whose R rows (sequence by sequence) run through S's scratch. */
static int forward_rows(sp_model *m, sp_kv *S, const sp_forward_seq *seqs, const int32_t *const *parents, int n, int R,
                        const int32_t *tokens) {
    const sp_config *c = &m->cfg;
    int H = c->hidden_size, L = c->n_layers;
    float eps = (float)c->rms_eps;
    int gemma = c->arch == SP_ARCH_GEMMA4;

    for (int t = 0; t < R; t++) sp_model_embed(m, S->x + (size_t)t * H, tokens[t]);
    if (gemma && c->ple_dim > 0) ple_inputs(m, S, tokens, R);
    size_t TH = (size_t)R * H;

    for (int li = 0; li < L; li++) {
        const sp_layer *l = &m->layers[li];
        int I = c->layers[li].ffn_dim;
        sp_rmsnorm(S->xn, S->x, l->attn_norm, R, H, eps);
        attention_block(m, S, seqs, parents, n, R, li);
        if (gemma) sp_rmsnorm(S->o, S->o, l->post_attn_norm, R, H, eps);
        add(S->x, S->o, TH);

        sp_rmsnorm(S->xn, S->x, gemma ? l->pre_ffn_norm : l->post_attn_norm, R, H, eps);
        sp_matmul(m->pool, S->g, S->xn, R, &l->w_gate);
        sp_matmul(m->pool, S->u, S->xn, R, &l->w_up);
        if (c->act == SP_ACT_GELU_TANH) sp_gelu_tanh_mul(S->g, S->g, S->u, (size_t)R * I);
        else sp_silu_mul(S->g, S->g, S->u, (size_t)R * I);
        sp_matmul(m->pool, S->o, S->g, R, &l->w_down);
        if (gemma) sp_rmsnorm(S->o, S->o, l->post_ffn_norm, R, H, eps);
        add(S->x, S->o, TH);

        if (gemma && c->ple_dim > 0) {
            int P = c->ple_dim;
            sp_matmul(m->pool, S->g, S->x, R, &l->ple_gate); /* [R, P] */
            for (int t = 0; t < R; t++) {
                const float *ple = S->ple + ((size_t)t * L + li) * P;
                sp_gelu_tanh_mul(S->g + (size_t)t * P, S->g + (size_t)t * P, ple, (size_t)P);
            }
            sp_matmul(m->pool, S->o, S->g, R, &l->ple_proj);
            sp_rmsnorm(S->o, S->o, l->ple_post_norm, R, H, eps);
            add(S->x, S->o, TH);
        }
        if (l->layer_scalar != 1.0f)
            for (size_t i = 0; i < TH; i++) S->x[i] *= l->layer_scalar;

        for (int s = 0, r0 = 0; s < n; r0 += seqs[s].T, s++) {
            const sp_forward_out *out = seqs[s].out;
            for (int j = 0; out && j < out->n_taps; j++) {
                if (out->tap_layers[j] != li) continue;
                for (int t = 0; t < seqs[s].T; t++)
                    memcpy(out->taps + ((size_t)t * out->n_taps + j) * H, S->x + (size_t)(r0 + t) * H,
                           H * sizeof(float));
            }
        }
    }
    for (int s = 0; s < n; s++) {
        sp_kv *kv = seqs[s].kv;
        kv->len += seqs[s].T;
        if (kv->len > kv->high) kv->high = kv->len;
    }

    sp_rmsnorm(S->hid, S->x, m->final_norm, R, H, eps);
    /* per-sequence outputs; the LM head runs once over every run of sequences whose logits
     * buffers follow one another in memory */
    size_t V = (size_t)c->vocab_size;
    for (int s = 0, r0 = 0; s < n; r0 += seqs[s].T, s++) {
        const sp_forward_out *out = seqs[s].out;
        if (!out) continue;
        const float *hid = S->hid + (size_t)r0 * H;
        if (out->hidden) memcpy(out->hidden, hid, (size_t)seqs[s].T * H * sizeof(float));
        if (out->last_logits) sp_model_logits(m, out->last_logits, hid + (size_t)(seqs[s].T - 1) * H, 1);
    }
    for (int s = 0, r0 = 0; s < n;) {
        const sp_forward_out *out = seqs[s].out;
        if (!out || !out->logits) {
            r0 += seqs[s++].T;
            continue;
        }
        int e = s + 1, rows = seqs[s].T;
        while (e < n && seqs[e].out && seqs[e].out->logits == out->logits + (size_t)rows * V) rows += seqs[e++].T;
        sp_model_logits(m, out->logits, S->hid + (size_t)r0 * H, rows);
        r0 += rows;
        s = e;
    }
    return 0;
}

int sp_model_forward_batch(sp_model *m, sp_kv *scratch, const sp_forward_seq *seqs, int n, sp_err *err) {
    if (n <= 0) return sp_err_set(err, "forward: no sequences");
    int R = 0;
    for (int i = 0; i < n; i++) {
        if (check_seq(m, &seqs[i], i, err)) return -1;
        for (int j = 0; j < i; j++)
            if (seqs[j].kv == seqs[i].kv) return sp_err_set(err, "forward: sequences %d and %d share a KV cache", j, i);
        R += seqs[i].T;
    }
    if (!scratch || scratch->m != m || R > scratch->max_batch)
        return sp_err_set(err, "forward: %d rows in one batch, the scratch holds %d", R,
                          scratch && scratch->m == m ? scratch->max_batch : 0);
    int32_t *tokens = malloc((size_t)R * sizeof *tokens);
    if (!tokens) return sp_err_set(err, "forward: out of memory for %d tokens", R);
    for (int i = 0, r = 0; i < n; r += seqs[i].T, i++) memcpy(tokens + r, seqs[i].tokens, (size_t)seqs[i].T * 4);
    int rc = forward_rows(m, scratch, seqs, NULL, n, R, tokens);
    free(tokens);
    return rc;
}

int sp_model_forward(sp_model *m, sp_kv *kv, const int32_t *tokens, int T, sp_forward_out *out, sp_err *err) {
    sp_forward_seq q = {kv, tokens, T, out};
    if (check_seq(m, &q, 0, err)) return -1;
    return forward_rows(m, kv, &q, NULL, 1, T, tokens);
}

int sp_model_forward_tree(sp_model *m, sp_kv *kv, const int32_t *tokens, const int32_t *parent, int T,
                          sp_forward_out *out, sp_err *err) {
    _Static_assert(SP_TREE_MAX_ROWS <= SP_ATTN_TREE_MAX, "tree rows beyond the tree attention kernel's bound");
    sp_forward_seq q = {kv, tokens, T, out};
    if (check_seq(m, &q, 0, err)) return -1;
    if (!parent) return sp_err_set(err, "forward tree: no parent rows");
    if (T > SP_TREE_MAX_ROWS) return sp_err_set(err, "forward tree: %d rows (at most %d)", T, SP_TREE_MAX_ROWS);
    for (int t = 0; t < T; t++)
        if (parent[t] < -1 || parent[t] >= t)
            return sp_err_set(err, "forward tree: row %d has parent %d (expected -1 .. %d)", t, parent[t], t - 1);
    const int32_t *parents[1] = {parent};
    return forward_rows(m, kv, &q, parents, 1, T, tokens);
}
