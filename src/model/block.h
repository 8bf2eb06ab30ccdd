/* block.h — one transformer decoder layer, described once and executed by one function for the
 * target (forward.c), the DFlash / DSpark drafters (drafters/dflash.c) and the Gemma-4 assistant
 * (drafters/assistant.c). The architectures differ only in the description (docs/TRANSFORMER.md):
 *
 *   llama / qwen3:  h += o_proj(attn(norm_attn(h)));             h += mlp(norm_ffn(h))
 *   gemma4:         h += norm_attn_post(o_proj(attn(norm_attn(h))))
 *                   h += norm_ffn_post(mlp(norm_ffn(h)))
 *                   h += norm_ple(ple_proj(gelu(ple_gate(h)) ⊙ ple))   (per-layer input, if any)
 *                   h *= layer_scalar
 *
 * and attention reads and writes K/V in one of three ways (sp_attn_mode). Its input is the normed
 * residual, or for EAGLE-3 (sp_attn_input) the pair [attn_norm(embedding) ; hidden_norm(h)]:
 *
 *   eagle3:         a = [norm_attn(e) ; norm_hidden(h)]   (2H; h ← norm_hidden(h) first when norm_residual)
 *                   h += o_proj(attn(a));  h += mlp(norm_ffn(h))      (gemma4: its post norms too)
 *
 * The caller owns the
 * caches and the scratch; block.c only runs the float operations, the same ones in the same order
 * for every executor, so a drafter layer and a target layer with the same weights give the same
 * bits (tests/test_train_infer.c, tests/test_model.c). */
#ifndef SPECULA_MODEL_BLOCK_H
#define SPECULA_MODEL_BLOCK_H

#include "core/pool.h"
#include "formats/tensor_names.h"
#include "kernels/kernels.h"
#include "specula.h"

#define SP_BLOCK_MAX_HEAD_DIM 1024 /* head dims of interleaved Q/K (reordered per head on the stack) */

typedef enum {
    SP_ATTN_CAUSAL = 0, /* row t sees positions ..pos0+t of the cache (window > 0: the last `window`) */
    SP_ATTN_BLOCK,      /* non-causal block: every row sees the cache up to the block's last row */
    SP_ATTN_BORROWED,   /* Q only; another model's cache holding positions < pos0 (the assistant) */
} sp_attn_mode;

/* What attention's Q/K/V projections read */
typedef enum {
    SP_ATTN_IN_HIDDEN = 0,  /* attn_norm(x), H wide */
    SP_ATTN_IN_EMBED_STATE, /* EAGLE-3: [attn_norm(e) ; hidden_norm(x)], 2H wide; e = the row's token embedding,
                             * the forward's side input (docs/EAGLE3.md §2) */
} sp_attn_input;

/* What a layer is. Norm weights are required exactly where the flags say so (the binders check). */
typedef struct {
    int H, NH, KVH, D, I; /* hidden, query heads, KV heads, head dim, MLP width */
    int post_norms;       /* gemma4: attn_post_norm and ffn_post_norm on the sublayer outputs */
    int kv_proj;          /* projects its own K/V (0: reads another layer's or model's cache) */
    int v_proj;           /* V has its own projection (0: V = the raw K projection, attention_k_eq_v) */
    int qk_norm;          /* q_norm (and k_norm where the layer projects K) */
    int v_norm;           /* weightless RMSNorm of V (gemma4) */
    int qk_interleaved;   /* Q/K rows in llama.cpp's pair order (a llama GGUF), put back per head */
    sp_act act;           /* MLP activation: silu(gate)·up or gelu_tanh(gate)·up */
    sp_attn_mode attn;
    int window;           /* sliding window (0: full attention) */
    float attn_scale;     /* on q·k: 1/sqrt(D), or 1 for gemma4 (q_norm / k_norm do the scaling) */
    float eps;            /* RMSNorm epsilon */
    int ple_dim;          /* P: per-layer input width (0: none) */
    sp_attn_input attn_in;
    int norm_residual;    /* SP_ATTN_IN_EMBED_STATE: the attention residual is hidden_norm(x), not x */
    /* MLP kind: n_experts 0 is the dense MLP of width I; else a mixture of experts (qwen3_moe,
     * docs/TRANSFORMER.md §5a): each row goes to the n_experts_used experts of highest router
     * probability, each a SwiGLU MLP of width I, their outputs summed with those probabilities
     * (renormalised to sum 1 when norm_topk) */
    int n_experts, n_experts_used, norm_topk;
    int Ie;               /* an expert's MLP width */
    /* gemma4 (docs/TRANSFORMER.md §5b): the experts run beside the dense MLP of width I, the router
     * reads the scaled weightless norm of the residual, each chosen weight is multiplied by its
     * expert's scale, and the two outputs are normed and summed before the post norm */
    int moe_dual;
} sp_block_desc;

/* A layer's weights as the executor reads them (f32 vectors owned by the loader). */
typedef struct {
    sp_block_desc d;
    float *attn_norm;      /* [H] input_layernorm */
    float *hidden_norm;    /* [H] SP_ATTN_IN_EMBED_STATE: the state's norm */
    sp_mat wq;             /* [NH·D, Hin]; Hin = H, or 2H for SP_ATTN_IN_EMBED_STATE */
    sp_mat wk, wv;         /* [KVH·D, Hin] when kv_proj (wv when v_proj) */
    sp_mat wo;             /* [H, NH·D] */
    float *q_norm, *k_norm; /* [D] */
    float *attn_post_norm; /* [H] gemma4's post_attention_layernorm */
    float *ffn_norm;       /* [H] the pre-MLP norm: llama / qwen3 post_attention_layernorm, gemma4
                            * pre_feedforward_layernorm */
    float *ffn_post_norm;  /* [H] gemma4 post_feedforward_layernorm */
    sp_mat w_gate, w_up;   /* [I, H] (dense MLP) */
    sp_mat w_down;         /* [H, I] */
    sp_mat router;         /* [E, H] MoE router */
    sp_mat *e_gate, *e_up; /* [E] arrays of [Ie, H]: expert e's gate / up; the caller allocates the
                            * arrays (E entries each) before sp_block_bind when n_experts > 0 */
    sp_mat *e_down;        /* [E] of [H, Ie] */
    float *router_scale;   /* [H] moe_dual: the router input's scale */
    float *expert_scale;   /* [E] moe_dual: per-expert output scale */
    float *ffn_norm_2;     /* [H] moe_dual: the experts' input norm */
    float *ffn_post_norm_1, *ffn_post_norm_2; /* [H] moe_dual: the dense / expert output norms */
    sp_mat ple_gate;       /* [P, H] gemma4 per-layer input */
    sp_mat ple_proj;       /* [H, P] */
    float *ple_post_norm;  /* [H] */
    float layer_scalar;    /* 1 when absent */
    float *inv_freq;       /* [D/2] RoPE frequencies of this layer's type */
} sp_block_layer;

/* The description of layer li of a checkpoint with config c, attention as `attn` says: the
 * architecture decides the norms, v_norm, scale and per-layer input; the caller may still
 * adjust it (a drafter's q/k norms are decided by its tensors). */
sp_block_desc sp_block_describe(const sp_config *c, int li, sp_attn_mode attn);

/* How a loader reads tensors from its container, for sp_block_bind. mat / vec return 0, or -1
 * with err naming the tensor (absent, wrong shape or type); vec converts to an owned f32 array.
 * scalar returns 1 when the tensor is absent, 0 with *out set, -1 on error. */
typedef struct {
    void *ctx;
    const char *prefix; /* put before the table's names ("model." for the assistant), or "" */
    int (*mat)(void *ctx, const char *name, int n, int k, sp_mat *out, sp_err *err);
    int (*vec)(void *ctx, const char *name, int n, float **out, sp_err *err);
    int (*scalar)(void *ctx, const char *name, float *out, sp_err *err);
} sp_block_binder;

/* Bind every tensor l->d asks for, named by the tensor table of `arch` (formats/tensor_names.h),
 * for layer li: the norms, projections and per-layer input the description has, the layer scalar
 * when the checkpoint carries one (1 otherwise). inv_freq is the caller's. */
int sp_block_bind(sp_block_layer *l, sp_arch arch, int li, const sp_block_binder *b, sp_err *err);
/* The same with the names of a given layout (an EAGLE-3 drafter's: SP_TN_EAGLE3_*);
 * sp_block_bind is this with SP_TN_MODEL. */
int sp_block_bind_layout(sp_block_layer *l, sp_tn_layout layout, sp_arch arch, int li, const sp_block_binder *b,
                         sp_err *err);

/* One run of consecutive rows that share a cache (one sequence of a batch): T rows at positions
 * pos0.., K/V [cap, KVH, D] with position p in slot (ring ? p % cap : p). parent: NULL, or the
 * rows are a token tree (causal mode, T <= SP_ATTN_TREE_MAX; docs/TREE.md): parent[t] < t (-1: a
 * root), row t rotated for position pos0 + depth(t), its K/V in the slot of pos0 + t, attending
 * the cache and its root path (sp_attention_tree). */
typedef struct {
    int T, pos0;
    float *K, *V;
    int cap, ring;
    const int32_t *parent;
    /* NULL: K / V are the cache. Else they are an f32 view of a typed cache: each row the layer
     * writes at slot goes through store(store_ctx, slot, k_row, v_row), which stores it in the
     * cache's type and rounds the view's rows to what the cache holds. */
    void (*store)(const void *ctx, int slot, float *k, float *v);
    const void *store_ctx;
} sp_block_seg;

/* Scratch for R rows: xn [R, Hin] (Hin: H, or 2H for SP_ATTN_IN_EMBED_STATE), o [R, H]; q, att
 * [R, NH·D]; k, v [R, KVH·D]; g, u [R, max(I, P)]. MoE layers also: ex, ey [R, H] (one
 * expert's rows and outputs), router [R, E], ew [R, k] (k = n_experts_used), esel [R, k],
 * erow [R] (NULL for executors without MoE layers); moe_dual layers also mo [R, H] (the dense
 * MLP's output), and optionally eg, eu. g and u hold max(I, Ie, P) per row. */
typedef struct {
    float *xn, *q, *k, *v, *att, *o, *g, *u;
    float *ex, *ey, *router, *ew;
    int32_t *esel, *erow;
    int *moe_touched; /* NULL, or += the number of distinct experts each MoE layer runs */
    float *mo;
    float *eg, *eu; /* NULL, or [k, Ie] each: a one-row forward's experts' gate / up, run as one call */
} sp_block_scratch;

/* The layer on x [R, H] in place. The rows are the segments' rows, segment by segment; a layer
 * that projects K/V (wk present) appends each segment's rows to its cache first. side: the
 * layer's second input per row, side_stride floats apart: the per-layer input (P floats) when
 * ple_dim > 0, the token embedding (H floats) for SP_ATTN_IN_EMBED_STATE, else NULL (a layer has
 * at most one of the two). */
void sp_block_forward(sp_pool *pool, const sp_block_layer *l, float *x, int R, const sp_block_seg *segs, int n_segs,
                      const float *side, size_t side_stride, const sp_block_scratch *s);

/* Some rows of a token tree whose other rows' K/V are cached already (a tree grown one depth per
 * call, drafters/eagle3_tree.c): call row t is node rows[t] of the n nodes parent[] describes
 * (parent[i] < i; -1: a root), n <= SP_ATTN_TREE_MAX. */
typedef struct {
    const int32_t *parent;
    int n;
    const int32_t *rows;
} sp_block_tree_rows;

/* sp_block_forward on R rows of a tree in one segment (seg->T = R, seg->parent NULL, no ring):
 * node i rotated for position seg->pos0 + its number of ancestors, its K/V in slot seg->pos0 + i, attending
 * the cache before pos0 and its root path (sp_attention_tree_rows). Bit for bit each row's result
 * in sp_block_forward over the whole tree. */
void sp_block_forward_tree_rows(sp_pool *pool, const sp_block_layer *l, float *x, int R, const sp_block_seg *seg,
                                const sp_block_tree_rows *tr, const float *side, size_t side_stride,
                                const sp_block_scratch *s);

/* K/V of R normalized rows xn into the segments' caches (RoPE at each row's position): the part of
 * sp_block_forward a drafter also runs alone for its context rows. Uses s->k and s->v. */
void sp_block_kv_write(sp_pool *pool, const sp_block_layer *l, const float *xn, int R, const sp_block_seg *segs,
                       int n_segs, const sp_block_scratch *s);

#endif
