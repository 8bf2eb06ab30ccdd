/* forward.c — the decoder forward over T tokens (prefill, decode, verify), docs/TRANSFORMER.md §3, §5:
 * embeddings (and Gemma-4's per-layer inputs), the layers through block.c's sp_block_forward, the
 * final norm and the LM head (+ softcap).
 *
 * Every kernel used here is batch-invariant, so each position's logits are bit-identical whether
 * it is computed alone or inside a block of T — the property lossless greedy verification needs.
 * The same holds across sequences: sp_model_forward_batch runs the rows of several sequences
 * through every matmul and norm together and attention per sequence on its own cache, so each
 * sequence gets exactly the results of its own forward (the server's continuous batching). */
#include <math.h>
#include <stdlib.h>

#include "core/prof.h"
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
    int prof = sp_prof_enter(SP_PROF_LM_HEAD);
    sp_matmul(m->pool, logits, hidden, T, &m->lm_head);
    if (m->cfg.final_softcap > 0) sp_softcap(logits, (size_t)T * m->cfg.vocab_size, (float)m->cfg.final_softcap);
    sp_prof_leave(prof);
}

/* Gemma-4 per-layer inputs for T tokens → ple[T, L, P] (docs/TRANSFORMER.md §5) */
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
        if (q->out->tap_layers[j] < 0 || q->out->tap_layers[j] > c->n_layers)
            return sp_err_set(err, "forward: tap layer %d out of range 0..%d (%d: after the final norm)",
                              q->out->tap_layers[j], c->n_layers, c->n_layers);
    if (!q->parent) return 0;
    if (q->T > SP_TREE_MAX_ROWS)
        return sp_err_set(err, "forward: sequence %d: a tree of %d rows (at most %d)", i, q->T, SP_TREE_MAX_ROWS);
    for (int t = 0; t < q->T; t++)
        if (q->parent[t] < -1 || q->parent[t] >= t)
            return sp_err_set(err, "forward: sequence %d: tree row %d has parent %d (expected -1 .. %d)", i, t,
                              q->parent[t], t - 1);
    return 0;
}

/* Copy rows x (every sequence's rows, in order) into each tap slot that names layer li; li =
 * n_layers is the sentinel tap, the hidden state after the final norm. */
static void copy_taps(const sp_forward_seq *seqs, int n, int li, const float *x, int H) {
    for (int s = 0, r0 = 0; s < n; r0 += seqs[s].T, s++) {
        const sp_forward_out *out = seqs[s].out;
        for (int j = 0; out && j < out->n_taps; j++) {
            if (out->tap_layers[j] != li) continue;
            for (int t = 0; t < seqs[s].T; t++)
                memcpy(out->taps + ((size_t)t * out->n_taps + j) * H, x + (size_t)(r0 + t) * H, H * sizeof(float));
        }
    }
}

/* The forward of n sequences whose R rows (sequence by sequence) run through S's scratch; segs
 * holds n entries for the layers' cache views. A sequence with parent rows is a token tree. */
static int forward_rows(sp_model *m, sp_kv *S, const sp_forward_seq *seqs, int n, int R, const int32_t *tokens,
                        sp_block_seg *segs) {
    const sp_config *c = &m->cfg;
    int H = c->hidden_size, L = c->n_layers;
    float eps = (float)c->rms_eps;
    sp_block_scratch scr = {S->xn, S->q, S->k, S->v, S->att, S->o, S->g, S->u,
                            S->ex, S->ey, S->router, S->ew, S->esel, S->erow, &S->moe_touched, S->mo, S->eg, S->eu};
    S->moe_touched = S->moe_layers = 0;
    for (int li = 0; li < L; li++) S->moe_layers += m->layers[li].d.n_experts > 0;

    for (int t = 0; t < R; t++) sp_model_embed(m, S->x + (size_t)t * H, tokens[t]);
    if (c->arch == SP_ARCH_GEMMA4 && c->ple_dim > 0) ple_inputs(m, S, tokens, R);

    for (int li = 0; li < L; li++) {
        int src = c->layers[li].kv_source; /* KV-shared layers read an earlier layer's cache */
        for (int s = 0; s < n; s++) {
            sp_kv *kv = seqs[s].kv;
            segs[s] = sp_kv_layer_seg(kv, src, seqs[s].T, kv->len);
            segs[s].parent = seqs[s].parent;
        }
        int P = m->layers[li].d.ple_dim;
        sp_block_forward(m->pool, &m->layers[li], S->x, R, segs, n, P ? S->ple + (size_t)li * P : NULL,
                         (size_t)L * P, &scr);

        copy_taps(seqs, n, li, S->x, H);
    }
    for (int s = 0; s < n; s++) {
        sp_kv *kv = seqs[s].kv;
        kv->len += seqs[s].T;
        if (kv->len > kv->high) kv->high = kv->len;
    }

    sp_rmsnorm(S->hid, S->x, m->final_norm, R, H, eps);
    copy_taps(seqs, n, L, S->hid, H); /* the sentinel tap n_layers: the post-final-norm hidden */
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

/* the first non-finite value of x[0, n), or -1: the sum of x·0 is NaN exactly when one is
 * (inf·0 and NaN·0 are NaN), and vectorizes */
static long first_non_finite(const float *x, size_t n) {
    float z = 0.0f;
    for (size_t i = 0; i < n; i++) z += x[i] * 0.0f;
    if (z == 0.0f) return -1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

/* every logit a forward computed must be finite: a NaN or inf there (broken or mis-typed weights)
 * is an error naming the position, never a token */
static int check_logits(const sp_model *m, const sp_forward_seq *seqs, int n, sp_err *err) {
    size_t V = (size_t)m->cfg.vocab_size;
    for (int s = 0; s < n; s++) {
        const sp_forward_out *out = seqs[s].out;
        int T = seqs[s].T, pos0 = seqs[s].kv->len - T;
        for (int t = 0; out && out->logits && t < T; t++) {
            long i = first_non_finite(out->logits + (size_t)t * V, V);
            if (i >= 0)
                return sp_err_set(err, "forward: the logits of position %d are not finite (token %ld is %g): the "
                                       "model's weights or activations overflow or hold NaN", pos0 + t, i,
                                  (double)out->logits[(size_t)t * V + (size_t)i]);
        }
        long i = out && out->last_logits ? first_non_finite(out->last_logits, V) : -1;
        if (i >= 0)
            return sp_err_set(err, "forward: the logits of position %d are not finite (token %ld is %g): the model's "
                                   "weights or activations overflow or hold NaN", pos0 + T - 1, i,
                              (double)out->last_logits[i]);
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
    sp_block_seg *segs = malloc((size_t)n * sizeof *segs);
    if (!tokens || !segs) {
        free(tokens);
        free(segs);
        return sp_err_set(err, "forward: out of memory for %d tokens", R);
    }
    for (int i = 0, r = 0; i < n; r += seqs[i].T, i++) memcpy(tokens + r, seqs[i].tokens, (size_t)seqs[i].T * 4);
    int rc = forward_rows(m, scratch, seqs, n, R, tokens, segs);
    free(tokens);
    free(segs);
    return rc ? rc : check_logits(m, seqs, n, err);
}

int sp_model_forward(sp_model *m, sp_kv *kv, const int32_t *tokens, int T, sp_forward_out *out, sp_err *err) {
    sp_forward_seq q = {kv, tokens, T, out, NULL};
    sp_block_seg seg;
    if (check_seq(m, &q, 0, err)) return -1;
    return forward_rows(m, kv, &q, 1, T, tokens, &seg) || check_logits(m, &q, 1, err) ? -1 : 0;
}

int sp_model_forward_tree(sp_model *m, sp_kv *kv, const int32_t *tokens, const int32_t *parent, int T,
                          sp_forward_out *out, sp_err *err) {
    _Static_assert(SP_TREE_MAX_ROWS <= SP_ATTN_TREE_MAX, "tree rows beyond the tree attention kernel's bound");
    if (!parent) return sp_err_set(err, "forward tree: no parent rows");
    sp_forward_seq q = {kv, tokens, T, out, parent};
    sp_block_seg seg;
    if (check_seq(m, &q, 0, err)) return -1;
    return forward_rows(m, kv, &q, 1, T, tokens, &seg) || check_logits(m, &q, 1, err) ? -1 : 0;
}
