/* kernels.h — the numeric kernels shared by every model, drafter and (later) trainer.
 *
 * Each fast kernel has a naive `_ref` twin (double accumulation) that the tests compare
 * against. Fast kernels are BATCH-INVARIANT: an output row computed for token t is
 * bit-identical whatever T, the token's index in the batch, or the thread count. Lossless
 * greedy verification depends on this (a verify forward over k tokens must give exactly
 * the logits of k single-token forwards).
 *
 * Dimension letters: T tokens, K input width, N output width, H hidden, NH query heads,
 * KVH kv heads, D head dim, V vocab. */
#ifndef SPECULA_KERNELS_H
#define SPECULA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"
#include "../core/pool.h"

/* A weight matrix W[N, K] stored row-major (PyTorch nn.Linear layout: out × in). Quantized
 * types (quant.h): each row is K / block blocks; K a multiple of the block and at most
 * SP_QUANT_MAX_K (sp_mat_check tells at load time). */
typedef struct {
    const void *data;
    sp_dtype dt; /* SP_DT_F32, SP_DT_BF16, SP_DT_F16, SP_DT_Q8_0, SP_DT_Q4_0, SP_DT_Q5_0, SP_DT_Q4_K, SP_DT_Q6_K */
    int n, k;    /* rows (outputs), cols (inputs) */
    int bf16_dot; /* bf16 weights only: 1 = the bf16-dot numerics (activations rounded to bf16,
                     pairs accumulated as vdpbf16ps does; kernels_internal.h), 0 = the default
                     f32 order. Set for a whole model (sp_model_set_bf16_dot), never per call. */
    const void *pack; /* NULL, or the same weights repacked at load time for this CPU's fast tier
                         (sp_mat_pack, quant.h; owned by whoever made it); data stays valid and
                         the other tiers read it */
} sp_mat;

/* Y[T, N] = X[T, K] · W[N, K]ᵀ. Y must not alias X. Batch-invariant (see above). For quantized
 * W the activations are quantized per row as llama.cpp does (quant.h); sp_matmul_ref then
 * dequantizes W exactly and keeps X in full precision (the oracle). */
void sp_matmul(sp_pool *pool, float *Y, const float *X, int T, const sp_mat *W);
/* Y[i] = X · W[i]ᵀ for n <= SP_MATMUL_MULTI_MAX weights of one K (Q, K, V; gate, up): the
 * bits of n sp_matmul calls. Quantized weights that read one activation format share one
 * quantization of X and one parallel region (fewer waits per layer); others run one by one. */
#define SP_MATMUL_MULTI_MAX 16
void sp_matmul_multi(sp_pool *pool, float *const *Y, const float *X, int T, const sp_mat *const *W, int n);
/* sp_matmul_ref computes in double from the f32 activations; for a bf16_dot matrix it rounds
 * them to bf16 first (sp_bf16dot_round), so it is the exact product of what the order multiplies */
void sp_matmul_ref(float *Y, const float *X, int T, const sp_mat *W);

/* RMSNorm over rows of width n: y = x / sqrt(mean(x²) + eps) [· w]. w may be NULL
 * (weightless, Gemma-4 v_norm). y may alias x. Processes T rows. */
void sp_rmsnorm(float *y, const float *x, const float *w, int T, int n, float eps);
void sp_rmsnorm_ref(float *y, const float *x, const float *w, int T, int n, float eps);

/* RoPE inverse frequencies for a head of dim D (D/2 values), per docs/TRANSFORMER.md §3, §4
 * (llama3 scaling), docs/TRANSFORMER.md §4 (proportional: exponent over the full D, zero past n_rot). */
void sp_rope_inv_freq(float *inv_freq, int D, const sp_rope_params *rp);
/* Rotate-half RoPE in place on x[nh, D] at position pos: pairs (j, j + D/2).
 * cos/sin computed in f32 from pos·inv_freq[j]; zero frequencies leave the pair untouched. */
void sp_rope(float *x, int nh, int D, const float *inv_freq, int pos);
void sp_rope_ref(float *x, int nh, int D, const float *inv_freq, int pos);

/* Activations and gated MLP glue: out[i] = act(gate[i]) * up[i], n elements. */
void sp_silu_mul(float *out, const float *gate, const float *up, size_t n);
void sp_gelu_tanh_mul(float *out, const float *gate, const float *up, size_t n);
void sp_silu_mul_ref(float *out, const float *gate, const float *up, size_t n);
void sp_gelu_tanh_mul_ref(float *out, const float *gate, const float *up, size_t n);
float sp_gelu_tanh(float x);

/* the tanh GELU, everywhere: gelu_tanh(x) = ½·x·(1 + tanh(SP_GELU_K·(x + SP_GELU_A·x³))) */
#define SP_GELU_K 0.7978845608028654 /* sqrt(2/π) */
#define SP_GELU_A 0.044715

/* the residual add: x[i] += y[i], i < n */
void sp_add(float *x, const float *y, size_t n);
/* softcap in place: x = c · tanh(x / c) */
void sp_softcap(float *x, size_t n, float c);
/* numerically stable softmax in place over n values */
void sp_softmax(float *x, int n);

/* Causal GQA attention over a KV cache.
 * q: [T, NH, D] for tokens at positions pos0 .. pos0+T-1; out: [T, NH, D].
 * K, V: caches [cap, KVH, D]; position p lives in slot (ring ? p % cap : p).
 * Token t attends keys at positions lo(t) .. pos0+t, lo = window>0 ? max(0, pos0+t-window+1) : 0.
 * Query head h reads KV head h / (NH/KVH). scores = q·k · scale, softmax in f32, then Σ p·v.
 * Keys are visited in increasing position order, so results are batch-invariant.
 * noncausal = 1 (a drafter's block, docs/DFLASH.md §3): every token attends up to pos0+T-1 instead —
 * exactly the result of T one-token calls at position pos0+T-1. */
typedef struct {
    int T, pos0, NH, KVH, D;
    int cap, ring, window;
    float scale;
    int noncausal;
} sp_attn_shape;
void sp_attention(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                  const sp_attn_shape *s);
void sp_attention_ref(float *out, const float *q, const float *K, const float *V,
                      const sp_attn_shape *s);

/* Tree-masked attention (attention_tree.c, docs/TREE.md): T rows of a token tree after a prefix
 * of pos0 positions (s->noncausal 0). parent[t] < t is row t's parent row, -1 for a row hanging
 * off the prefix. Row t's query is at position pos0 + depth(t), its K/V in the slot of position
 * pos0 + t; it attends the prefix keys its window reaches, then its root path (ancestors and
 * itself) in row order. A row gets exactly (bit for bit) the output sp_attention gives the chain
 * row at its depth whose earlier rows are its ancestors. T <= SP_ATTN_TREE_MAX. */
#define SP_ATTN_TREE_MAX 256
void sp_attention_tree(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                       const sp_attn_shape *s, const int32_t *parent);
void sp_attention_tree_ref(float *out, const float *q, const float *K, const float *V, const sp_attn_shape *s,
                           const int32_t *parent);
/* The same for some rows only: q and out [n_rows, NH, D], row i being tree row rows[i] of the T
 * rows parent[] describes (each row's K/V, and its ancestors', already in the cache). Bit for bit
 * row i of sp_attention_tree's output for row rows[i]. A drafter that grows a tree one depth per
 * forward runs each depth's rows with it (eagle3_tree.c). */
void sp_attention_tree_rows(sp_pool *pool, float *out, const float *q, const float *K, const float *V,
                            const sp_attn_shape *s, const int32_t *parent, const int32_t *rows, int n_rows);

/* argmax: the first index of the largest non-NaN value (lowest index wins ties), 0 when all
 * are NaN or n <= 0 */
int sp_argmax(const float *x, int n);
int sp_argmax_ref(const float *x, int n);

#endif
