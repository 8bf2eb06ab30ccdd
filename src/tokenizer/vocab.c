/* vocab.c — the tokenizer's tables: id <-> text (one arena + an open-addressing hash), the
 * merge table ((left, right) -> rank, merged id), the added-token matcher index, the
 * end-of-generation ids, sp_tok_free and the small public getters. Loaders (tokjson.c,
 * tokgguf.c) fill these; bpe.c / encode.c read them. */
#include <stdio.h>
#include <stdlib.h>

#include "tok_internal.h"

/* ---- byte buffer ------------------------------------------------------------------------ */
int sp_tok_buf_reserve(tok_buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int sp_tok_buf_put(tok_buf *b, const void *s, size_t n) {
    if (sp_tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void sp_tok_buf_free(tok_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- vocabulary ------------------------------------------------------------------------- */
tok_tokenizer *sp_tok_alloc(const char *source) {
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    snprintf(t->source, sizeof t->source, "%s", source ? source : "tokenizer");
    t->unk_id = t->bos_id = t->eos_id = -1;
    for (int i = 0; i < 256; i++) t->byte_tok[i] = t->bl_tok[i] = -1;
    return t;
}

int sp_tok_vocab_init(tok_tokenizer *t, int n, sp_err *err) {
    if (n <= 0 || n > (1 << 26))
        return sp_err_set(err, "%s: vocabulary size %d out of range (1..%d)", t->source, n, 1 << 26);
    t->n_vocab = n;
    t->off = calloc((size_t)n, sizeof *t->off);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->attr = malloc((size_t)n);
    if (!t->off || !t->len || !t->attr) return sp_err_set(err, "%s: out of memory", t->source);
    memset(t->attr, TOK_ATTR_HOLE, (size_t)n);
    return 0;
}

int sp_tok_vocab_set(tok_tokenizer *t, int32_t id, const char *s, size_t n, sp_err *err) {
    if (id < 0 || id >= t->n_vocab)
        return sp_err_set(err, "%s: token id %d out of range [0, %d)", t->source, id, t->n_vocab);
    if (n > 65535) return sp_err_set(err, "%s: token %d is %zu bytes long", t->source, id, n);
    if (!(t->attr[id] & TOK_ATTR_HOLE))
        return sp_err_set(err, "%s: token id %d is given twice ('%.*s' and '%.*s')", t->source, id,
                          (int)(t->len[id] > 40 ? 40 : t->len[id]), t->text.p + t->off[id],
                          (int)(n > 40 ? 40 : n), s);
    if (t->text.n + n > UINT32_MAX - 1) return sp_err_set(err, "%s: vocabulary text too large", t->source);
    t->off[id] = (uint32_t)t->text.n;
    t->len[id] = (uint32_t)n;
    t->attr[id] = TOK_ATTR_NORMAL;
    if (sp_tok_buf_put(&t->text, s, n)) return sp_err_set(err, "%s: out of memory", t->source);
    return 0;
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c *= 2;
    return c;
}

int32_t sp_tok_vocab_find(const tok_tokenizer *t, const char *s, size_t n) {
    if (!t->map) return -1;
    uint64_t h = tok_hash(s, n), fp = h >> 32;
    for (h &= t->map_mask;; h = (h + 1) & t->map_mask) {
        uint64_t e = t->map[h];
        if (e == UINT64_MAX) return -1;
        if (e >> 32 != fp) continue; /* fingerprint first: no text access on a miss */
        int32_t id = (int32_t)(uint32_t)e;
        if (t->len[id] == n && !memcmp(t->text.p + t->off[id], s, n)) return id;
    }
}

void sp_tok_vocab_insert(tok_tokenizer *t, int32_t id) {
    if (t->attr[id] & TOK_ATTR_HOLE) return;
    const char *s = t->text.p + t->off[id];
    size_t n = t->len[id];
    uint64_t h = tok_hash(s, n), fp = h >> 32;
    for (h &= t->map_mask;; h = (h + 1) & t->map_mask) {
        uint64_t e = t->map[h];
        if (e == UINT64_MAX) break;
        int32_t o = (int32_t)(uint32_t)e;
        if (e >> 32 == fp && t->len[o] == n && !memcmp(t->text.p + t->off[o], s, n)) {
            if (!t->n_dups++) t->dup_id = id; /* duplicate text: the first id wins */
            return;
        }
    }
    t->map[h] = fp << 32 | (uint32_t)id;
}

void sp_tok_vocab_tables(tok_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b); /* byte tokens, uppercase hex (docs/TOKENIZER.md §3) */
        t->byte_tok[b] = sp_tok_vocab_find(t, hex, 6);
        char u[4];
        int k = sp_tok_utf8_put(u, sp_tok_bytelevel_cp((uint8_t)b)); /* byte-level alphabet */
        t->bl_tok[b] = sp_tok_vocab_find(t, u, (size_t)k);
    }
    for (int c = 0; c < 128; c++) {
        char ch = (char)c;
        t->ascii_tok[c] = sp_tok_vocab_find(t, &ch, 1);
    }
}

int sp_tok_vocab_finish(tok_tokenizer *t, sp_err *err) {
    free(t->map);
    t->map_mask = pow2_at_least((uint64_t)t->n_vocab * 2) - 1;
    t->map = malloc((t->map_mask + 1) * sizeof *t->map);
    if (!t->map) return sp_err_set(err, "%s: out of memory", t->source);
    memset(t->map, 0xff, (t->map_mask + 1) * sizeof *t->map);
    t->n_dups = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) sp_tok_vocab_insert(t, id);
    sp_tok_vocab_tables(t);
    return 0;
}

void sp_tok_vocab_find_cuts(tok_tokenizer *t) {
    static const char mark[3] = {(char)0xE2, (char)0x96, (char)0x81};
    t->cut_ok = !t->byte_level && sp_tok_vocab_find(t, mark, 3) >= 0;
    t->n_cut_bad = 0;
    for (int32_t id = 0; id < t->n_vocab && t->cut_ok; id++) {
        const char *s = t->text.p + t->off[id];
        size_t n = t->len[id];
        for (size_t i = 1; i + 3 <= n; i++) {
            if (memcmp(s + i, mark, 3)) continue;
            size_t j = i - 1; /* start of the preceding character */
            while (j > 0 && ((uint8_t)s[j] & 0xC0) == 0x80) j--;
            size_t cl = i - j;
            if (cl == 3 && !memcmp(s + j, mark, 3)) continue; /* a run of marks */
            int seen = 0;
            for (int k = 0; k < t->n_cut_bad; k++)
                seen |= t->cut_bad_len[k] == cl && !memcmp(t->cut_bad[k], s + j, cl);
            if (seen) continue;
            if (t->n_cut_bad == 16 || cl > 4) {
                t->cut_ok = 0; /* too many: do not cut at all */
                break;
            }
            memcpy(t->cut_bad[t->n_cut_bad], s + j, cl);
            t->cut_bad_len[t->n_cut_bad++] = (uint8_t)cl;
        }
    }
}

/* ---- merges ------------------------------------------------------------------------------- */
int sp_tok_merges_init(tok_tokenizer *t, int n, sp_err *err) {
    free(t->merges);
    t->merge_mask = pow2_at_least((uint64_t)(n > 0 ? n : 1) * 2) - 1;
    t->merges = malloc((t->merge_mask + 1) * sizeof *t->merges);
    if (!t->merges) return sp_err_set(err, "%s: out of memory for %d merges", t->source, n);
    for (uint64_t i = 0; i <= t->merge_mask; i++) t->merges[i].key = UINT64_MAX;
    t->n_merges = 0;
    return 0;
}

const tok_merge *sp_tok_merges_find(const tok_tokenizer *t, int32_t a, int32_t b) {
    if (!t->merges || a < 0 || b < 0) return NULL;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = tok_hash_u64(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
        const tok_merge *m = &t->merges[h];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

int sp_tok_merges_add(tok_tokenizer *t, int32_t a, int32_t b, int32_t rank, sp_err *err) {
    if ((uint64_t)t->n_merges * 2 > t->merge_mask)
        return sp_err_set(err, "%s: merge table full", t->source);
    size_t la = t->len[a], lb = t->len[b];
    char small[256], *cat = la + lb <= sizeof small ? small : malloc(la + lb);
    if (!cat) return sp_err_set(err, "%s: out of memory", t->source);
    memcpy(cat, t->text.p + t->off[a], la);
    memcpy(cat + la, t->text.p + t->off[b], lb);
    int32_t id = sp_tok_vocab_find(t, cat, la + lb);
    if (id < 0) {
        sp_err_set(err, "%s: merge #%d ('%.*s' + '%.*s') makes '%.*s', which is not in the "
                   "vocabulary", t->source, rank, (int)(la > 40 ? 40 : la), t->text.p + t->off[a],
                   (int)(lb > 40 ? 40 : lb), t->text.p + t->off[b],
                   (int)(la + lb > 80 ? 80 : la + lb), cat);
        if (cat != small) free(cat);
        return -1;
    }
    if (cat != small) free(cat);
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = tok_hash_u64(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
        tok_merge *m = &t->merges[h];
        if (m->key == key) return 0; /* a repeated merge keeps its first (best) rank */
        if (m->key == UINT64_MAX) {
            m->key = key;
            m->rank = rank;
            m->id = id;
            t->n_merges++;
            return 0;
        }
    }
}

/* ---- added tokens ----------------------------------------------------------------------- */
int sp_tok_added_add(tok_tokenizer *t, const tok_added *a, sp_err *err) {
    if (a->len == 0) return sp_err_set(err, "%s: added token %d has empty content", t->source, a->id);
    tok_added *na = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *na);
    if (!na) return sp_err_set(err, "%s: out of memory", t->source);
    t->added = na;
    tok_added *d = &t->added[t->n_added];
    *d = *a;
    d->text = malloc(a->len + 1);
    if (!d->text) return sp_err_set(err, "%s: out of memory", t->source);
    memcpy(d->text, a->text, a->len);
    d->text[a->len] = 0;
    t->n_added++;
    t->n_norm_added += a->normalized != 0;
    return 0;
}

static int cmp_u16_desc(const void *a, const void *b) {
    return (int)*(const uint16_t *)b - (int)*(const uint16_t *)a;
}

int sp_tok_added_finish(tok_tokenizer *t, sp_err *err) {
    free(t->added_map);
    t->added_map = NULL;
    for (int b = 0; b < 256; b++) {
        free(t->first_lens[b]);
        t->first_lens[b] = NULL;
        t->n_first_lens[b] = 0;
    }
    if (!t->n_added) return 0;
    t->added_map_mask = pow2_at_least((uint64_t)t->n_added * 2) - 1;
    t->added_map = malloc((t->added_map_mask + 1) * sizeof *t->added_map);
    if (!t->added_map) return sp_err_set(err, "%s: out of memory", t->source);
    memset(t->added_map, 0xff, (t->added_map_mask + 1) * sizeof *t->added_map);
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        if (a->len > 65535) return sp_err_set(err, "%s: added token %d too long", t->source, a->id);
        uint64_t h = tok_hash(a->text, a->len) & t->added_map_mask;
        int dup = 0;
        for (; t->added_map[h] >= 0; h = (h + 1) & t->added_map_mask) {
            const tok_added *o = &t->added[t->added_map[h]];
            if (o->len == a->len && !memcmp(o->text, a->text, a->len)) dup = 1;
        }
        if (dup) continue; /* same content twice: the first entry wins */
        t->added_map[h] = i;
        uint8_t fb = (uint8_t)a->text[0];
        int k = t->n_first_lens[fb], seen = 0;
        for (int j = 0; j < k; j++) seen |= t->first_lens[fb][j] == a->len;
        if (seen) continue;
        uint16_t *nl = realloc(t->first_lens[fb], (size_t)(k + 1) * sizeof *nl);
        if (!nl) return sp_err_set(err, "%s: out of memory", t->source);
        nl[k] = (uint16_t)a->len;
        t->first_lens[fb] = nl;
        t->n_first_lens[fb] = k + 1;
    }
    for (int b = 0; b < 256; b++)
        if (t->n_first_lens[b] > 1)
            qsort(t->first_lens[b], (size_t)t->n_first_lens[b], sizeof(uint16_t), cmp_u16_desc);
    return 0;
}

/* ---- end of generation -------------------------------------------------------------------- */
void sp_tok_add_eog(tok_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab || t->n_eog >= TOK_MAX_EOG) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog[t->n_eog++] = id;
}

void sp_tok_collect_eog(tok_tokenizer *t) {
    static const char *texts[] = {"<eos>",       "<end_of_turn>", "<turn|>",     "<|eot_id|>",
                                  "<|eom_id|>",  "<|end_of_text|>", "<|im_end|>", "<|endoftext|>",
                                  "</s>",        "<|end|>"};
    sp_tok_add_eog(t, t->eos_id);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t id = sp_tok_vocab_find(t, texts[i], strlen(texts[i]));
        if (id >= 0 && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER))) sp_tok_add_eog(t, id);
    }
}

/* ---- pipeline stages -------------------------------------------------------------------- */
char *sp_tok_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

#define PUSH_STAGE(arr, cnt, op)                                                          \
    do {                                                                                  \
        void *np = realloc(t->arr, (size_t)(t->cnt + 1) * sizeof *t->arr);                \
        if (!np) return sp_err_set(err, "%s: out of memory", t->source);                  \
        t->arr = np;                                                                      \
        t->arr[t->cnt++] = *(op);                                                         \
        return 0;                                                                         \
    } while (0)

int sp_tok_push_norm(tok_tokenizer *t, const tok_norm *op, sp_err *err) { PUSH_STAGE(norm, n_norm, op); }
int sp_tok_push_pre(tok_tokenizer *t, const tok_pre *op, sp_err *err) { PUSH_STAGE(pre, n_pre, op); }
int sp_tok_push_dec(tok_tokenizer *t, const tok_dec *op, sp_err *err) { PUSH_STAGE(dec, n_dec, op); }

/* ---- free and getters --------------------------------------------------------------------- */
void sp_tok_free(tok_tokenizer *t) {
    if (!t) return;
    sp_tok_buf_free(&t->text);
    free(t->off);
    free(t->len);
    free(t->attr);
    free(t->score);
    free(t->map);
    free(t->merges);
    for (int i = 0; i < t->n_norm; i++) sp_tok_norm_free(&t->norm[i]);
    free(t->norm);
    for (int i = 0; i < t->n_pre; i++) sp_tok_pre_free(&t->pre[i]);
    free(t->pre);
    for (int i = 0; i < t->n_dec; i++) sp_tok_dec_free(&t->dec[i]);
    free(t->dec);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    free(t->added_map);
    for (int b = 0; b < 256; b++) free(t->first_lens[b]);
    free(t->chat_template);
    free(t);
}

int sp_tok_vocab_size(const tok_tokenizer *t) { return t->n_vocab; }
int sp_tok_bos(const tok_tokenizer *t) { return t->bos_id; }
int sp_tok_eos(const tok_tokenizer *t) { return t->eos_id; }
int sp_tok_n_eog(const tok_tokenizer *t) { return t->n_eog; }
int sp_tok_eog(const tok_tokenizer *t, int i) { return i >= 0 && i < t->n_eog ? t->eog[i] : -1; }
int sp_tok_adds_bos(const tok_tokenizer *t) {
    return t->n_post_pre > 0 && t->bos_id >= 0 && t->post_pre[0] == t->bos_id;
}
const char *sp_tok_chat_template(const tok_tokenizer *t) { return t->chat_template; }

int sp_tok_is_eog(const tok_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

const char *sp_tok_token_text(const tok_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || (t->attr[id] & TOK_ATTR_HOLE)) return NULL;
    if (len) *len = t->len[id];
    return t->text.p + t->off[id];
}

int32_t sp_tok_token_id(const tok_tokenizer *t, const char *text, size_t len) {
    return sp_tok_vocab_find(t, text, len);
}

int sp_tok_is_special(const tok_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)) != 0;
}
