/* eagle3_train.c — EAGLE-3 drafter training (see eagle3_train.h; docs/EAGLE3.md §2, §6).
 *
 * The layer is the inference one (drafters/eagle3.c) with norm_before_residual and norm_before_fc
 * off, written as a forward / backward pair over every row of every window at once. Its
 * attention half is written here: Q/K/V from [embedding ; state], attention per query over the
 * keys it may see, gathered into one contiguous block (the ops of ops.h, finite-difference tested
 * in test_train_ops.c); its MLP half is the training block's (block_train.h). */
#include "train/eagle3_train.h"
#include "train/kind_hooks.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "formats/hfjson.h"
#include "formats/tensor_names.h"
#include "model/model.h"
#include "train/block_train.h"
#include "train/ops.h"

/* parameter order; each named by the tensor table's SpecForge layout (formats/tensor_names.h) */
enum { P_FC, P_HN, P_IN, P_Q, P_K, P_V, P_O, P_POST, P_GATE, P_UP, P_DOWN, P_NORM, P_LM, P_COUNT };
static const sp_tensor_role PROLES[P_COUNT] = {
    SP_TN_FC, SP_TN_HIDDEN_NORM, SP_TN_ATTN_NORM, SP_TN_Q, SP_TN_K, SP_TN_V, SP_TN_O,
    SP_TN_FFN_NORM, SP_TN_GATE, SP_TN_UP, SP_TN_DOWN, SP_TN_FINAL_NORM, SP_TN_LM_HEAD};

int sp_tr_e3_model_init(tr_model *m, const tr_dims *d, uint64_t seed, const float *Wlm, const int32_t *d2t,
                     sp_err *err) {
    memset(m, 0, sizeof *m);
    m->d = *d;
    if (d->m != 3 || d->B < 1 || d->NH % d->KVH || d->Vd < 1 || d->Vd > d->V)
        return sp_err_set(err, "eagle3 dims: taps %d (3), steps %d, heads %d/%d, draft vocabulary %d of %d", d->m, d->B,
                          d->NH, d->KVH, d->Vd, d->V);
    int64_t H = d->H, QD = (int64_t)d->NH * d->D, KD = (int64_t)d->KVH * d->D, I = d->I;
    const int64_t shapes[P_COUNT][2] = {{H, 3 * H}, {H, 0},  {H, 0}, {QD, 2 * H}, {KD, 2 * H}, {KD, 2 * H}, {H, QD},
                                        {H, 0},     {I, H},  {I, H}, {H, I},      {H, 0},      {d->Vd, H}};
    for (int i = 0; i < P_COUNT; i++) {
        tr_param *p = &m->params[m->n_params++];
        int li = PROLES[i] < SP_TN_FIRST_LAYER_ROLE ? -1 : 0;
        if (!sp_tensor_hf_name_in(SP_TN_EAGLE3_SPECFORGE, SP_ARCH_LLAMA, PROLES[i], li, p->name, sizeof p->name)) {
            sp_tr_model_free(m);
            return sp_err_set(err, "eagle3: no SpecForge name for parameter %d", i);
        }
        p->ndim = shapes[i][1] ? 2 : 1;
        p->shape[0] = shapes[i][0];
        p->shape[1] = shapes[i][1];
        p->off = m->n;
        p->n = (size_t)shapes[i][0] * (size_t)(shapes[i][1] ? shapes[i][1] : 1);
        m->n += p->n;
    }
    m->w = malloc(m->n * sizeof(float));
    m->inv_freq = malloc((size_t)d->D / 2 * sizeof(float));
    if (!m->w || !m->inv_freq) {
        sp_tr_model_free(m);
        return sp_err_set(err, "eagle3: out of memory for %zu parameters", m->n);
    }
    sp_rope_inv_freq(m->inv_freq, d->D, &d->rope);
    for (int i = 0; i < m->n_params; i++) {
        const tr_param *p = &m->params[i];
        float *w = m->w + p->off;
        if (i == P_LM) {
            for (int r = 0; r < d->Vd; r++) memcpy(w + (size_t)r * d->H, Wlm + (size_t)d2t[r] * d->H, sizeof(float) * d->H);
            continue;
        }
        for (size_t j = 0; j < p->n; j++) w[j] = p->ndim == 1 ? 1.0f : 0.02f * sp_rng_normal(seed, 2000 + (uint64_t)i, j);
    }
    return 0;
}

/* ---- vocabulary ------------------------------------------------------------------------------- */
typedef struct {
    int64_t count;
    int32_t id;
} vc_t;

static int vc_cmp(const void *a, const void *b) {
    const vc_t *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int id_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int sp_tr_e3_vocab(const tr_shardset *data, int V, int Vd, int32_t *d2t, sp_err *err) {
    vc_t *c = calloc((size_t)V, sizeof *c);
    if (!c) return sp_err_set(err, "eagle3: out of memory");
    for (int v = 0; v < V; v++) c[v].id = v;
    for (int s = 0; s < data->n_shards; s++) {
        const tr_shard *sh = &data->shards[s];
        for (int64_t t = 0; t < sh->n_tokens; t++)
            if (sh->ids[t] >= 0 && sh->ids[t] < V) c[sh->ids[t]].count++;
    }
    qsort(c, (size_t)V, sizeof *c, vc_cmp); /* unseen ids (count 0) follow in id order */
    for (int i = 0; i < Vd; i++) d2t[i] = c[i].id;
    qsort(d2t, (size_t)Vd, sizeof *d2t, id_cmp);
    free(c);
    return 0;
}

/* ---- config ----------------------------------------------------------------------------------- */
int sp_tr_e3_config_json(char **out, const char *target_config, const tr_dims *d, sp_err *err) {
    json_t *t = sp_hf_json_loadb(target_config, strlen(target_config), JSON_REJECT_DUPLICATES, "target config.json", err);
    if (!t) return -1;
    json_t *c = json_object(), *ids = json_array();
    for (int i = 0; i < 3; i++) json_array_append_new(ids, json_integer(d->tap_layers[i] + 1)); /* layer inputs */
    json_object_set_new(c, "architectures", json_pack("[s]", "LlamaForCausalLMEagle3"));
    json_object_set_new(c, "model_type", json_string("llama"));
    json_object_set_new(c, "hidden_size", json_integer(d->H));
    json_object_set_new(c, "intermediate_size", json_integer(d->I));
    json_object_set_new(c, "num_attention_heads", json_integer(d->NH));
    json_object_set_new(c, "num_key_value_heads", json_integer(d->KVH));
    json_object_set_new(c, "head_dim", json_integer(d->D));
    json_object_set_new(c, "num_hidden_layers", json_integer(1));
    json_object_set_new(c, "rms_norm_eps", json_real(d->eps));
    json_object_set_new(c, "rope_theta", json_real(d->rope.theta));
    json_t *rs = json_object_get(t, "rope_scaling"); /* a Llama target's llama3 scaling */
    if (json_is_object(rs)) json_object_set_new(c, "rope_scaling", json_deep_copy(rs));
    json_object_set_new(c, "max_position_embeddings", json_integer(8192));
    json_object_set_new(c, "vocab_size", json_integer(d->V));
    json_object_set_new(c, "draft_vocab_size", json_integer(d->Vd));
    json_object_set_new(c, "target_hidden_size", json_integer(d->H));
    json_object_set_new(c, "eagle_aux_hidden_state_layer_ids", ids);
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "ttt_length", json_integer(d->B));
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    *out = json_dumps(c, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(c);
    json_decref(t);
    if (!*out) return sp_err_set(err, "config.json: out of memory");
    return 0;
}

/* ---- windows ---------------------------------------------------------------------------------- */
int sp_tr_e3_sampler_init(tr_e3_sampler *s, const tr_shardset *data, sp_model *target, int S, int K, double decay,
                       const int32_t *d2t, int Vd, uint64_t seed, sp_err *err) {
    memset(s, 0, sizeof *s);
    s->data = data;
    s->target = target;
    s->S = S;
    s->K = K;
    s->decay = decay;
    s->d2t = d2t;
    s->Vd = Vd;
    int64_t n = 0;
    for (int a = 0; a < 2; a++) { /* count, then list */
        int64_t k = 0;
        for (int sh = 0; sh < data->n_shards; sh++)
            for (int q = 0; q < data->shards[sh].n_seq; q++)
                for (int p = 0; p + 1 < data->shards[sh].seq_lens[q] - 1; p += S) {
                    if (a) s->shard[k] = sh, s->seq[k] = q, s->start[k] = p;
                    k++;
                }
        if (!a) {
            n = k;
            if (n < 1) return sp_err_set(err, "eagle3: the shards hold no sequence of 3 tokens or more");
            s->shard = malloc(sizeof(int32_t) * (size_t)n);
            s->seq = malloc(sizeof(int32_t) * (size_t)n);
            s->start = malloc(sizeof(int32_t) * (size_t)n);
            if (!s->shard || !s->seq || !s->start) return sp_tr_e3_sampler_free(s), sp_err_set(err, "out of memory");
        }
    }
    s->n = n;
    for (int64_t i = n - 1; i > 0; i--) { /* seeded shuffle */
        int64_t j = (int64_t)(sp_rng_u64(seed, 77, (uint64_t)i) % (uint64_t)(i + 1));
        int32_t t;
        t = s->shard[i], s->shard[i] = s->shard[j], s->shard[j] = t;
        t = s->seq[i], s->seq[i] = s->seq[j], s->seq[j] = t;
        t = s->start[i], s->start[i] = s->start[j], s->start[j] = t;
    }
    int H = data->H;
    s->Wd = malloc(sizeof(float) * (size_t)Vd * H);
    s->hid = malloc(sizeof(float) * (size_t)H);
    s->logit = malloc(sizeof(float) * (size_t)sp_model_config(target)->vocab_size);
    if (!s->Wd || !s->hid || !s->logit) return sp_tr_e3_sampler_free(s), sp_err_set(err, "out of memory");
    for (int r = 0; r < Vd; r++) sp_mat_row_f32(sp_model_lm_head(target), d2t[r], s->Wd + (size_t)r * H);
    return 0;
}

void sp_tr_e3_sampler_free(tr_e3_sampler *s) {
    free(s->shard);
    free(s->seq);
    free(s->start);
    free(s->Wd);
    free(s->hid);
    free(s->logit);
    memset(s, 0, sizeof *s);
}

int sp_tr_e3_batch_alloc(tr_e3_batch *b, int cap, int S, int K, int H, int mH, int Vd, sp_err *err) {
    memset(b, 0, sizeof *b);
    size_t T = (size_t)cap * S;
    *b = (tr_e3_batch){.cap = cap, .S = S, .K = K, .H = H, .mH = mH, .Vd = Vd};
    b->F = malloc(sizeof(float) * T * mH);
    b->x0 = malloc(sizeof(float) * K * T * H);
    b->P = malloc(sizeof(float) * K * T * Vd);
    b->mass = malloc(sizeof(float) * K * T);
    b->wt = malloc(sizeof(float) * K * T);
    if (!b->F || !b->x0 || !b->P || !b->mass || !b->wt) return sp_tr_e3_batch_free(b), sp_err_set(err, "out of memory");
    return 0;
}

void sp_tr_e3_batch_free(tr_e3_batch *b) {
    free(b->F);
    free(b->x0);
    free(b->P);
    free(b->mass);
    free(b->wt);
    memset(b, 0, sizeof *b);
}

static float bf16_f32(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* the target's distribution at row `row` of shard sh, within the draft vocabulary: P [Vd] and the
 * full distribution's mass there */
static float target_probs(tr_e3_sampler *s, const tr_shard *sh, int64_t row, float *P) {
    int H = s->data->H, V = sp_model_config(s->target)->vocab_size, Vd = s->Vd;
    for (int i = 0; i < H; i++) s->hid[i] = bf16_f32(sh->hidden[(size_t)row * sh->hidden_stride + i]);
    sp_model_logits(s->target, s->logit, s->hid, 1); /* the LM head (+ soft-cap) of the target */
    float mx = s->logit[0];
    for (int v = 1; v < V; v++) mx = s->logit[v] > mx ? s->logit[v] : mx;
    double all = 0, in = 0;
    for (int v = 0; v < V; v++) all += exp((double)s->logit[v] - mx);
    for (int j = 0; j < Vd; j++) in += P[j] = (float)exp((double)s->logit[s->d2t[j]] - mx);
    for (int j = 0; j < Vd; j++) P[j] = (float)(P[j] / in);
    return (float)(in / all);
}

void sp_tr_e3_fill(tr_e3_sampler *s, tr_e3_batch *b, int64_t i0, int n) {
    int S = s->S, K = s->K, H = b->H, mH = b->mH, Vd = s->Vd;
    size_t T = (size_t)b->cap * S; /* the stride of a step's rows */
    b->NW = n;
    memset(b->F, 0, sizeof(float) * T * mH);
    memset(b->x0, 0, sizeof(float) * K * T * H);
    memset(b->P, 0, sizeof(float) * K * T * Vd);
    memset(b->mass, 0, sizeof(float) * K * T);
    memset(b->wt, 0, sizeof(float) * K * T);
    for (int w = 0; w < n; w++) {
        int64_t idx = (i0 + w) % s->n;
        const tr_shard *sh = &s->data->shards[s->shard[idx]];
        int q = s->seq[idx], p = s->start[idx], len = sh->seq_lens[q], rs = sh->resp_starts[q];
        int64_t off = sh->seq_off[q];
        /* the target's distribution of each position p+1 .. p+S+K−1 once (rows of several steps
         * share it): into the slot of its first (k = 0, or row S−1 with the smallest k) user */
        for (int tp = p + 1; tp < p + S + K && tp + 1 < len; tp++) {
            if (tp + 1 < rs) continue;
            int k = tp - p - 1 < S ? 0 : tp - p - S, i = tp - p - 1 - k;
            size_t kt = (size_t)k * T + (size_t)w * S + i;
            b->mass[kt] = target_probs(s, sh, off + tp, b->P + kt * Vd);
        }
        for (int i = 0; i < S && p + i < len; i++) {
            size_t t = (size_t)w * S + i;
            for (int j = 0; j < mH; j++) b->F[t * mH + j] = bf16_f32(sh->hidden_ml[(size_t)(off + p + i) * mH + j]);
            for (int k = 0; k < K; k++) {
                int tp = p + i + 1 + k; /* the input token's position; its target state predicts tp+1 */
                if (tp >= len) break;
                size_t kt = (size_t)k * T + t;
                sp_mat_row_f32(sp_model_embed_table(s->target), sh->ids[off + tp], b->x0 + kt * H); /* unscaled, as SpecForge */
                if (tp + 1 >= len || tp + 1 < rs) continue;
                int k0 = tp - p - 1 < S ? 0 : tp - p - S; /* where the distribution was computed */
                size_t src = (size_t)k0 * T + (size_t)w * S + (size_t)(tp - p - 1 - k0);
                if (src != kt) {
                    memcpy(b->P + kt * Vd, b->P + src * Vd, sizeof(float) * (size_t)Vd);
                    b->mass[kt] = b->mass[src];
                }
                b->wt[kt] = (float)pow(s->decay, k);
            }
        }
    }
}

/* ---- forward / backward ----------------------------------------------------------------------- */
struct tr_e3_acts {
    int cap, S, K;
    /* per step k, T = cap·S rows */
    float *fc;                             /* [T, H] */
    float *en, *re, *hn, *rh;              /* [K, T, H], [K, T] */
    float *q, *kr, *v, *att, *ao;          /* [K, T, QD], [K, T, KD] ×2, [K, T, NH·Tkmax], [K, T, QD] */
    float *h, *n, *rn, *g, *u, *out, *fn, *rf, *prob; /* [K, T, ·] */
    /* scratch */
    float *A, *tq, *tk, *tH, *act, *Kg, *Vg, *dKg, *dVg, *dp, *dZ, *dfn, *dout, *dh, *dact, *dg, *du, *dn, *dao,
        *dq, *dKall, *dVall, *dqp, *dkp, *dA, *dhn, *dcarry, *dgin;
    double *lse;
};

void sp_tr_e3_acts_free(tr_e3_acts *a) {
    if (!a) return;
    float **f[] = {&a->fc, &a->en, &a->re, &a->hn, &a->rh, &a->q, &a->kr, &a->v, &a->att, &a->ao, &a->h, &a->n,
                   &a->rn, &a->g, &a->u, &a->out, &a->fn, &a->rf, &a->prob, &a->A, &a->tq, &a->tk, &a->tH, &a->act,
                   &a->Kg, &a->Vg, &a->dKg, &a->dVg, &a->dp, &a->dZ, &a->dfn, &a->dout, &a->dh, &a->dact, &a->dg,
                   &a->du, &a->dn, &a->dao, &a->dq, &a->dKall, &a->dVall, &a->dqp, &a->dkp, &a->dA, &a->dhn,
                   &a->dcarry, &a->dgin};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(*f[i]);
    free(a->lse);
    free(a);
}

tr_e3_acts *sp_tr_e3_acts_create(const tr_dims *d, int cap, int S, sp_err *err) {
    tr_e3_acts *a = calloc(1, sizeof *a);
    if (!a) return sp_err_set(err, "out of memory"), NULL;
    size_t K = (size_t)d->B, T = (size_t)cap * S, H = d->H, QD = (size_t)d->NH * d->D, KD = (size_t)d->KVH * d->D;
    size_t I = d->I, Vd = d->Vd, TK = (size_t)S + K, AT = (size_t)d->NH * TK;
    a->cap = cap, a->S = S, a->K = (int)K;
    int ok = 1;
#define AL(p, n) ok &= ((p) = malloc(sizeof(float) * (n))) != NULL
    AL(a->fc, T * H);
    AL(a->en, K * T * H); AL(a->re, K * T); AL(a->hn, K * T * H); AL(a->rh, K * T);
    AL(a->q, K * T * QD); AL(a->kr, K * T * KD); AL(a->v, K * T * KD); AL(a->att, K * T * AT); AL(a->ao, K * T * QD);
    AL(a->h, K * T * H); AL(a->n, K * T * H); AL(a->rn, K * T); AL(a->g, K * T * I); AL(a->u, K * T * I);
    AL(a->out, K * T * H); AL(a->fn, K * T * H); AL(a->rf, K * T); AL(a->prob, K * T * Vd);
    AL(a->A, T * 2 * H); AL(a->tq, T * QD); AL(a->tk, T * KD); AL(a->tH, T * H); AL(a->act, T * I);
    AL(a->Kg, TK * KD); AL(a->Vg, TK * KD); AL(a->dKg, TK * KD); AL(a->dVg, TK * KD); AL(a->dp, TK * (size_t)d->KVH);
    AL(a->dZ, T * Vd); AL(a->dfn, T * H); AL(a->dout, T * H); AL(a->dh, T * H); AL(a->dact, T * I);
    AL(a->dg, T * I); AL(a->du, T * I); AL(a->dn, T * H); AL(a->dao, T * QD); AL(a->dq, T * QD);
    AL(a->dKall, K * T * KD); AL(a->dVall, K * T * KD); AL(a->dqp, T * QD); AL(a->dkp, T * KD);
    AL(a->dA, T * 2 * H); AL(a->dhn, T * H); AL(a->dcarry, T * H); AL(a->dgin, T * H);
#undef AL
    ok &= (a->lse = malloc(sizeof(double) * T)) != NULL;
    if (!ok) {
        sp_tr_e3_acts_free(a);
        return sp_err_set(err, "eagle3: out of memory for the activations of %zu rows", T), NULL;
    }
    return a;
}

const float *sp_tr_e3_acts_probs(const tr_e3_acts *a) { return a->prob; }

#define W(i) (m->w + m->params[i].off)
#define G(i) (grad + m->params[i].off)

/* the keys query (window w, row i) of step k sees: step-0 rows 0..i of its window, then its own
 * row of steps 1..k; gathered into a->Kg / a->Vg from K_all / V_all ([K, T, KD]). Returns the count. */
static int gather(tr_e3_acts *a, const float *Kall, const float *Vall, size_t T, size_t KD, int w, int i, int k) {
    int n = 0;
    size_t base = (size_t)w * a->S;
    for (int j = 0; j <= i; j++, n++) {
        memcpy(a->Kg + n * KD, Kall + (base + j) * KD, sizeof(float) * KD);
        memcpy(a->Vg + n * KD, Vall + (base + j) * KD, sizeof(float) * KD);
    }
    for (int s = 1; s <= k; s++, n++) {
        memcpy(a->Kg + n * KD, Kall + ((size_t)s * T + base + i) * KD, sizeof(float) * KD);
        memcpy(a->Vg + n * KD, Vall + ((size_t)s * T + base + i) * KD, sizeof(float) * KD);
    }
    return n;
}

static void scatter_add(const tr_e3_acts *a, float *dKall, float *dVall, size_t T, size_t KD, int w, int i, int k) {
    int n = 0;
    size_t base = (size_t)w * a->S;
    for (int j = 0; j <= i; j++, n++)
        for (size_t c = 0; c < KD; c++) {
            dKall[(base + j) * KD + c] += a->dKg[n * KD + c];
            dVall[(base + j) * KD + c] += a->dVg[n * KD + c];
        }
    for (int s = 1; s <= k; s++, n++)
        for (size_t c = 0; c < KD; c++) {
            dKall[((size_t)s * T + base + i) * KD + c] += a->dKg[n * KD + c];
            dVall[((size_t)s * T + base + i) * KD + c] += a->dVg[n * KD + c];
        }
}

static void positions(int *pos, int T, int S, int k) {
    for (int t = 0; t < T; t++) pos[t] = t % S + k;
}

/* The layer's MLP half is the training block's (block_train.h): Llama's post_attention_layernorm,
 * SwiGLU, no post norms; its attention half is this file's (input [embedding ; state], keys
 * gathered per query). */
static sp_block_desc mlp_desc(const tr_dims *d) {
    return (sp_block_desc){.H = d->H, .NH = d->NH, .KVH = d->KVH, .D = d->D, .I = d->I, .act = SP_ACT_SILU,
                           .eps = (float)d->eps};
}

/* step k's MLP activations in the block's roles (gu: a->act, recomputed by the backward) */
static tr_block_acts mlp_acts(const tr_e3_acts *a, size_t k, size_t T, size_t H, size_t I) {
    return (tr_block_acts){.xn2 = a->n + k * T * H, .rstd_ffn = a->rn + k * T, .g = a->g + k * T * I,
                           .u = a->u + k * T * I, .gu = a->act, .dn = a->tH};
}

void sp_tr_e3_forward(sp_pool *pool, const tr_model *m, tr_e3_acts *a, const tr_e3_batch *b, double denom, tr_stats *st,
                   float *cstar) {
    const tr_dims *d = &m->d;
    int S = b->S, K = b->K, Tn = b->NW * S, H = d->H, NH = d->NH, KVH = d->KVH, D = d->D, I = d->I, Vd = d->Vd;
    size_t T = (size_t)a->cap * S, QD = (size_t)NH * D, KD = (size_t)KVH * D, TK = (size_t)S + K;
    float scale = 1.0f / sqrtf((float)D);
    int *pos = malloc(sizeof(int) * (size_t)Tn);
    sp_block_desc md = mlp_desc(d);
    tr_block_w mw = {.ffn_norm = W(P_POST), .w_gate = W(P_GATE), .w_up = W(P_UP), .w_down = W(P_DOWN),
                     .layer_scalar = 1.0f};
    memset(st, 0, sizeof *st);
    sp_tr_linear_forward(pool, a->fc, b->F, W(P_FC), Tn, 3 * H, H);
    for (int k = 0; k < K; k++) {
        positions(pos, Tn, S, k);
        size_t oH = (size_t)k * T * H;
        const float *gin = k ? a->out + (size_t)(k - 1) * T * H : a->fc;
        float *en = a->en + oH, *hn = a->hn + oH;
        sp_tr_rmsnorm_forward(en, a->re + (size_t)k * T, b->x0 + (size_t)k * T * H, W(P_IN), Tn, H, d->eps);
        sp_tr_rmsnorm_forward(hn, a->rh + (size_t)k * T, gin, W(P_HN), Tn, H, d->eps);
        for (int t = 0; t < Tn; t++) { /* A = [input_layernorm(embed) ; hidden_norm(g)] */
            memcpy(a->A + (size_t)t * 2 * H, en + (size_t)t * H, sizeof(float) * H);
            memcpy(a->A + (size_t)t * 2 * H + H, hn + (size_t)t * H, sizeof(float) * H);
        }
        float *q = a->q + (size_t)k * T * QD, *kr = a->kr + (size_t)k * T * KD, *v = a->v + (size_t)k * T * KD;
        sp_tr_linear_forward(pool, a->tq, a->A, W(P_Q), Tn, 2 * H, (int)QD);
        sp_tr_rope_forward(q, a->tq, Tn, NH, D, pos, m->inv_freq);
        sp_tr_linear_forward(pool, a->tk, a->A, W(P_K), Tn, 2 * H, (int)KD);
        sp_tr_rope_forward(kr, a->tk, Tn, KVH, D, pos, m->inv_freq);
        sp_tr_linear_forward(pool, v, a->A, W(P_V), Tn, 2 * H, (int)KD);
        float *ao = a->ao + (size_t)k * T * QD;
        for (int t = 0; t < Tn; t++) {
            int nk = gather(a, a->kr, a->v, T, KD, t / S, t % S, k);
            tr_attn_shape sh = {.NB = 1, .Tq = 1, .Tk = nk, .NH = NH, .KVH = KVH, .D = D, .scale = scale};
            sp_tr_attention_forward(NULL, ao + t * QD, a->att + ((size_t)k * T + t) * NH * TK, q + t * QD, a->Kg, a->Vg,
                                 &sh);
        }
        float *h = a->h + oH, *out = a->out + oH, *fn = a->fn + oH;
        sp_tr_linear_forward(pool, a->tH, ao, W(P_O), Tn, (int)QD, H);
        for (size_t i = 0; i < (size_t)Tn * H; i++) h[i] = gin[i] + a->tH[i];
        /* out = h + down(silu(gate(n)) ⊙ up(n)),  n = post_attention_layernorm(h) */
        tr_block_acts ma = mlp_acts(a, (size_t)k, T, (size_t)H, (size_t)I);
        sp_tr_block_mlp_forward(pool, &md, &mw, Tn, h, out, &ma);
        sp_tr_rmsnorm_forward(fn, a->rf + (size_t)k * T, out, W(P_NORM), Tn, H, d->eps);
        float *prob = a->prob + (size_t)k * T * Vd;
        sp_tr_linear_forward(pool, prob, fn, W(P_LM), Tn, H, Vd);
        for (int t = 0; t < Tn; t++) { /* log-sum-exp of Z, then q = softmax(Z) in place */
            const float *z = prob + (size_t)t * Vd;
            float mx = z[0];
            for (int j = 1; j < Vd; j++) mx = z[j] > mx ? z[j] : mx;
            double s = 0;
            for (int j = 0; j < Vd; j++) s += exp((double)z[j] - mx);
            a->lse[t] = mx + log(s);
            float wt = b->wt[(size_t)k * T + t];
            if (wt != 0) { /* Σ w · −Σ_v P log q */
                const float *P = b->P + ((size_t)k * T + t) * Vd;
                double ce = 0;
                for (int j = 0; j < Vd; j++)
                    if (P[j] > 0) ce -= (double)P[j] * ((double)z[j] - a->lse[t]);
                st->ce += wt * ce;
                st->wsum += wt;
            }
        }
        sp_tr_softmax_rows(prob, prob, Tn, Vd);
        if (cstar)
            for (int t = 0; t < Tn; t++) {
                size_t kt = (size_t)k * T + t;
                const float *P = b->P + kt * Vd, *qq = prob + (size_t)t * Vd;
                double c = 0;
                for (int j = 0; j < Vd; j++) c += fminf(b->mass[kt] * P[j], qq[j]);
                cstar[(size_t)k * Tn + t] = b->wt[kt] != 0 ? (float)c : 0.0f;
            }
    }
    st->loss = st->ce / denom;
    free(pos);
}

void sp_tr_e3_backward(sp_pool *pool, const tr_model *m, tr_e3_acts *a, const tr_e3_batch *b, double denom,
                    float *grad) {
    const tr_dims *d = &m->d;
    int S = b->S, K = b->K, Tn = b->NW * S, H = d->H, NH = d->NH, KVH = d->KVH, D = d->D, I = d->I, Vd = d->Vd;
    size_t T = (size_t)a->cap * S, QD = (size_t)NH * D, KD = (size_t)KVH * D, TK = (size_t)S + K, nH = (size_t)Tn * H;
    float scale = 1.0f / sqrtf((float)D);
    int *pos = malloc(sizeof(int) * (size_t)Tn);
    sp_block_desc md = mlp_desc(d);
    tr_block_w mw = {.ffn_norm = W(P_POST), .w_gate = W(P_GATE), .w_up = W(P_UP), .w_down = W(P_DOWN),
                     .layer_scalar = 1.0f};
    tr_block_g mg = {.ffn_norm = G(P_POST), .w_gate = G(P_GATE), .w_up = G(P_UP), .w_down = G(P_DOWN)};
    tr_block_scratch ms = {.dgu = a->dact, .dg = a->dg, .du = a->du, .dxn = a->dn};
    memset(a->dKall, 0, sizeof(float) * (size_t)K * T * KD);
    memset(a->dVall, 0, sizeof(float) * (size_t)K * T * KD);
    memset(a->dcarry, 0, sizeof(float) * nH);
    for (int k = K - 1; k >= 0; k--) {
        positions(pos, Tn, S, k);
        size_t oH = (size_t)k * T * H;
        const float *gin = k ? a->out + (size_t)(k - 1) * T * H : a->fc;
        const float *prob = a->prob + (size_t)k * T * Vd;
        /* dZ = w · (q − P) / denom */
        for (int t = 0; t < Tn; t++) {
            size_t kt = (size_t)k * T + t;
            float wt = b->wt[kt], *dz = a->dZ + (size_t)t * Vd;
            const float *P = b->P + kt * Vd, *qq = prob + (size_t)t * Vd;
            for (int j = 0; j < Vd; j++) dz[j] = wt != 0 ? (float)(wt * ((double)qq[j] - P[j]) / denom) : 0.0f;
        }
        memset(a->dfn, 0, sizeof(float) * nH);
        sp_tr_linear_backward(pool, a->dfn, G(P_LM), a->dZ, a->fn + oH, W(P_LM), Tn, H, Vd);
        memcpy(a->dout, a->dcarry, sizeof(float) * nH);
        sp_tr_rmsnorm_backward(a->dout, G(P_NORM), a->dfn, a->out + oH, W(P_NORM), a->rf + (size_t)k * T, Tn, H);
        /* out = h + down(silu(gate(n)) ⊙ up(n)): the block's MLP half, act recomputed */
        tr_block_acts ma = mlp_acts(a, (size_t)k, T, (size_t)H, (size_t)I);
        sp_tr_swiglu_forward(a->act, ma.g, ma.u, (size_t)Tn * I);
        memcpy(a->dh, a->dout, sizeof(float) * nH);
        sp_tr_block_mlp_backward(pool, &md, &mw, &mg, Tn, a->h + oH, &ma, &ms, a->dh);
        /* h = g_in + o_proj(attn) */
        memcpy(a->dgin, a->dh, sizeof(float) * nH);
        const float *ao = a->ao + (size_t)k * T * QD, *q = a->q + (size_t)k * T * QD;
        memset(a->dao, 0, sizeof(float) * (size_t)Tn * QD);
        sp_tr_linear_backward(pool, a->dao, G(P_O), a->dh, ao, W(P_O), Tn, (int)QD, H);
        memset(a->dq, 0, sizeof(float) * (size_t)Tn * QD);
        for (int t = 0; t < Tn; t++) {
            int nk = gather(a, a->kr, a->v, T, KD, t / S, t % S, k);
            memset(a->dKg, 0, sizeof(float) * nk * KD);
            memset(a->dVg, 0, sizeof(float) * nk * KD);
            tr_attn_shape sh = {.NB = 1, .Tq = 1, .Tk = nk, .NH = NH, .KVH = KVH, .D = D, .scale = scale};
            sp_tr_attention_backward(NULL, a->dq + t * QD, a->dKg, a->dVg, a->dp, a->dao + t * QD, q + t * QD, a->Kg,
                                  a->Vg, a->att + ((size_t)k * T + t) * NH * TK, &sh);
            scatter_add(a, a->dKall, a->dVall, T, KD, t / S, t % S, k);
        }
        /* step k's keys and values are complete: every query that sees them (steps >= k) is done */
        memset(a->dqp, 0, sizeof(float) * (size_t)Tn * QD);
        sp_tr_rope_backward(a->dqp, a->dq, Tn, NH, D, pos, m->inv_freq);
        memset(a->dkp, 0, sizeof(float) * (size_t)Tn * KD);
        sp_tr_rope_backward(a->dkp, a->dKall + (size_t)k * T * KD, Tn, KVH, D, pos, m->inv_freq);
        const float *en = a->en + oH, *hn = a->hn + oH;
        for (int t = 0; t < Tn; t++) {
            memcpy(a->A + (size_t)t * 2 * H, en + (size_t)t * H, sizeof(float) * H);
            memcpy(a->A + (size_t)t * 2 * H + H, hn + (size_t)t * H, sizeof(float) * H);
        }
        memset(a->dA, 0, sizeof(float) * (size_t)Tn * 2 * H);
        sp_tr_linear_backward(pool, a->dA, G(P_Q), a->dqp, a->A, W(P_Q), Tn, 2 * H, (int)QD);
        sp_tr_linear_backward(pool, a->dA, G(P_K), a->dkp, a->A, W(P_K), Tn, 2 * H, (int)KD);
        sp_tr_linear_backward(pool, a->dA, G(P_V), a->dVall + (size_t)k * T * KD, a->A, W(P_V), Tn, 2 * H, (int)KD);
        for (int t = 0; t < Tn; t++) { /* split dA: the embedding half (frozen input) and the state half */
            memcpy(a->dfn + (size_t)t * H, a->dA + (size_t)t * 2 * H, sizeof(float) * H);
            memcpy(a->dhn + (size_t)t * H, a->dA + (size_t)t * 2 * H + H, sizeof(float) * H);
        }
        sp_tr_rmsnorm_backward(NULL, G(P_IN), a->dfn, b->x0 + (size_t)k * T * H, W(P_IN), a->re + (size_t)k * T, Tn, H);
        sp_tr_rmsnorm_backward(a->dgin, G(P_HN), a->dhn, gin, W(P_HN), a->rh + (size_t)k * T, Tn, H);
        if (k > 0) memcpy(a->dcarry, a->dgin, sizeof(float) * nH); /* into the previous step's output */
        else sp_tr_linear_backward(pool, NULL, G(P_FC), a->dgin, b->F, W(P_FC), Tn, 3 * H, H);
    }
    free(pos);
}

/* the training hooks of the eagle3 kind (kind_hooks.h) */
const struct sp_tr_kind_hooks sp_tr_hooks_eagle3 = {1, {{"eagle3", TR_ARCH_EAGLE3, sp_tr_eagle3_dims}}};
