/* tokgguf.c — a tokenizer from the tokenizer.ggml.* keys of a GGUF file (docs/GGUF-FORMAT.md §2,
 * docs/GGUF-FORMAT.md §6), with llama.cpp's semantics (the reference the peer vectors come from):
 *
 *   llama   SentencePiece pieces + scores: " " -> "▁", a "▁" prefix on each text gap when
 *           add_space_prefix (default true), best-score merging, byte tokens for leftovers.
 *   gpt2    BPE with the pre-tokenizer family named by tokenizer.ggml.pre (pretok_table.c:
 *           every name llama.cpp accepts, its regexes and flags such as llama-bpe's
 *           ignore_merges); byte-level unless the family works on raw UTF-8. Invalid UTF-8
 *           input becomes U+FFFD per byte. No normalizer (llama.cpp applies none).
 *   gemma4  BPE over UTF-8 with "▁" for space and "<0xHH>" byte fallback, split into runs of
 *           newline / non-newline characters.
 * Control and unknown tokens are matched in text only with parse_special; user-defined ones
 * always (llama.cpp tokenizer_st_partition). A model whose general.name names Phi-3 strips the
 * whitespace after its added tokens except <unk>, <s> and <|endoftext|> (docs/TOKENIZER.md). */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../formats/gguf.h"
#include "tok_internal.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* ▁ U+2581 */

static int add_replace_norm(tok_tokenizer *t, const char *a, const char *b, sp_err *err) {
    tok_norm op = {.kind = NORM_REPLACE, .a = sp_tok_strndup(a, strlen(a)), .alen = strlen(a),
                   .b = sp_tok_strndup(b, strlen(b)), .blen = strlen(b)};
    return sp_tok_push_norm(t, &op, err);
}

static int add_sentencepiece_decoders(tok_tokenizer *t, int strip_first, sp_err *err) {
    tok_dec rep = {.kind = DEC_REPLACE, .a = sp_tok_strndup(SPACE_MARK, 3), .alen = 3,
                   .b = sp_tok_strndup(" ", 1), .blen = 1};
    tok_dec bf = {.kind = DEC_BYTEFALLBACK}, fuse = {.kind = DEC_FUSE};
    tok_dec strip = {.kind = DEC_STRIP, .a = sp_tok_strndup(" ", 1), .alen = 1, .start = 1};
    if (sp_tok_push_dec(t, &rep, err) || sp_tok_push_dec(t, &bf, err) || sp_tok_push_dec(t, &fuse, err))
        return -1;
    if (strip_first) return sp_tok_push_dec(t, &strip, err);
    sp_tok_dec_free(&strip);
    return 0;
}

static int push_split(tok_tokenizer *t, const char *re, sp_err *err) {
    tok_pre sp = {.kind = PRE_SPLIT, .re = sp_tok_regex_compile(re, strlen(re), err), .behavior = SPLIT_ISOLATED};
    return !sp.re || sp_tok_push_pre(t, &sp, err) ? -1 : 0;
}

/* the pre-tokenizer of a BPE vocabulary from its tokenizer.ggml.pre family (pretok_table.c);
 * no name is llama.cpp's "default" family. No normalizer: llama.cpp applies none. */
static int bpe_pre(tok_tokenizer *t, const tok_pre_family *f, sp_err *err) {
    if (f->flags & TOK_PRE_IGNORE_MERGES) t->ignore_merges = 1;
    if ((f->flags & TOK_PRE_ESCAPE_SPACES) && add_replace_norm(t, " ", SPACE_MARK, err)) return -1;
    for (int i = 0; f->regex[i]; i++) {
        if (!strcmp(f->regex[i], "[^\\n]+|[\\n]+")) { /* runs of newline / other characters: no regex */
            tok_pre nl = {.kind = PRE_NEWLINE_RUNS};
            if (sp_tok_push_pre(t, &nl, err)) return -1;
        } else if (push_split(t, f->regex[i], err)) {
            return sp_err_wrap(err, "%s: tokenizer.ggml.pre family '%s'", t->source, f->names);
        }
    }
    if (f->flags & TOK_PRE_RAW_UTF8) { /* pieces of raw UTF-8 with "<0xHH>" fallback */
        t->byte_fallback = 1;
        if (f->flags & TOK_PRE_ESCAPE_SPACES) return add_sentencepiece_decoders(t, 0, err);
        tok_dec bf = {.kind = DEC_BYTEFALLBACK}, fuse = {.kind = DEC_FUSE};
        return sp_tok_push_dec(t, &bf, err) || sp_tok_push_dec(t, &fuse, err) ? -1 : 0;
    }
    tok_pre bl = {.kind = PRE_BYTELEVEL};
    if (sp_tok_push_pre(t, &bl, err)) return -1;
    t->byte_level = 1;
    t->sanitize_utf8 = 1;
    tok_dec dec = {.kind = DEC_BYTELEVEL};
    return sp_tok_push_dec(t, &dec, err);
}

static int get_id(const gguf_file *g, tok_tokenizer *t, const char *key, int32_t *out, sp_err *err) {
    int64_t v;
    int rc = sp_gguf_get_i64(g, key, &v, err);
    if (rc < 0) return -1;
    if (rc == 1) return 0;
    if (v < 0 || v >= t->n_vocab) {
        if (v == -1 || v == 0xFFFFFFFFll) return 0; /* "none" */
        return sp_err_set(err, "%s: %s = %lld is outside the vocabulary (%d tokens)", t->source, key,
                          (long long)v, t->n_vocab);
    }
    *out = (int32_t)v;
    return 0;
}

/* the tokens, their types (token_type) and, for llama, their scores */
static int load_vocab(tok_tokenizer *t, int n, const gguf_kv *tokens, const gguf_kv *types, const gguf_kv *scores,
                      int is_llama, sp_err *err) {
    if (sp_tok_vocab_init(t, n, err)) return -1;
    for (int i = 0; i < n; i++)
        if (sp_tok_vocab_set(t, i, tokens->arr_strs[i].ptr, tokens->arr_strs[i].len, err)) return -1;
    static const uint8_t type_attr[7] = {TOK_ATTR_NORMAL, TOK_ATTR_NORMAL, TOK_ATTR_UNKNOWN,
                                         TOK_ATTR_CONTROL, TOK_ATTR_USER, TOK_ATTR_UNUSED, TOK_ATTR_BYTE};
    for (int i = 0; types && i < n; i++) {
        int64_t ty = sp_gguf_arr_i64(types, (uint64_t)i);
        t->attr[i] = ty >= 0 && ty <= 6 ? type_attr[ty] : TOK_ATTR_NORMAL;
    }
    if (is_llama) {
        t->score = malloc((size_t)n * sizeof *t->score);
        if (!t->score) return sp_err_set(err, "%s: out of memory", t->source);
        for (int i = 0; i < n; i++) {
            double s = sp_gguf_arr_f64(scores, (uint64_t)i);
            if (!(s >= -FLT_MAX && s <= FLT_MAX))
                return sp_err_set(err, "%s: tokenizer.ggml.scores[%d] = %g is not a finite float", t->source, i, s);
            t->score[i] = (float)s;
        }
    }
    if (sp_tok_vocab_finish(t, err)) return -1;
    /* byte tokens only count when typed BYTE (or when there are no types) */
    for (int b = 0; b < 256 && types; b++)
        if (t->byte_tok[b] >= 0 && !(t->attr[t->byte_tok[b]] & TOK_ATTR_BYTE)) t->byte_tok[b] = -1;
    return 0;
}

/* tokenizer.ggml.merges: "left right" strings, rank = index */
static int load_merges(tok_tokenizer *t, const gguf_kv *merges, sp_err *err) {
    if (merges->arr_n > (uint64_t)INT32_MAX) return sp_err_set(err, "%s: too many merges", t->source);
    if (sp_tok_merges_init(t, (int)merges->arr_n, err)) return -1;
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        const gguf_str *m = &merges->arr_strs[i];
        const char *sp = m->len > 1 ? memchr(m->ptr + 1, ' ', m->len - 1) : NULL;
        if (!sp)
            return sp_err_set(err, "%s: tokenizer.ggml.merges[%llu] '%.*s' is not 'left right'",
                              t->source, (unsigned long long)i, (int)(m->len > 60 ? 60 : m->len), m->ptr);
        size_t la = (size_t)(sp - m->ptr);
        int32_t a = sp_tok_vocab_find(t, m->ptr, la), b = sp_tok_vocab_find(t, sp + 1, m->len - la - 1);
        if (a < 0 || b < 0)
            return sp_err_set(err, "%s: tokenizer.ggml.merges[%llu] '%.*s' names a token not in "
                              "the vocabulary", t->source, (unsigned long long)i,
                              (int)(m->len > 60 ? 60 : m->len), m->ptr);
        if (sp_tok_merges_add(t, a, b, (int32_t)i, err)) return -1;
    }
    return 0;
}

/* special ids, add_bos / add_eos / add_space_prefix, the pre-tokenizer family, then the
 * normalizer / pre-tokenizer / decoder pipeline of the model type */
static int load_pipeline(const gguf_file *g, tok_tokenizer *t, int is_llama, int is_gpt2, int is_gemma4,
                         sp_err *err) {
    /* special ids and flags */
    if (get_id(g, t, "tokenizer.ggml.bos_token_id", &t->bos_id, err) ||
        get_id(g, t, "tokenizer.ggml.eos_token_id", &t->eos_id, err) ||
        get_id(g, t, "tokenizer.ggml.unknown_token_id", &t->unk_id, err))
        return -1;
    gguf_str pre = {0};
    if (sp_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err) < 0) return -1;
    const tok_pre_family *fam = NULL;
    if (is_gpt2 && pre.ptr && pre.len) {
        if (!(fam = sp_tok_pre_family_find(pre.ptr, pre.len)))
            return sp_err_set(err, "%s: tokenizer.ggml.pre '%.*s' is not a pre-tokenizer type llama.cpp knows (such "
                              "as llama-bpe, qwen2, gpt-2, deepseek-v3, tekken, gpt-4o)",
                              t->source, (int)(pre.len > 60 ? 60 : pre.len), pre.ptr);
    } else if (is_gpt2) {
        fam = sp_tok_pre_family_find("default", 7); /* llama.cpp's choice for a missing name */
    } else if (is_gemma4) {
        fam = sp_tok_pre_family_find("gemma4", 6);
    }
    if (fam && (fam->flags & TOK_PRE_NO_BOS)) t->bos_id = -1;
    int add_bos = is_llama || is_gemma4 || (fam && (fam->flags & TOK_PRE_ADD_BOS)), add_eos = 0, add_space = is_llama;
    if (sp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, err) < 0 ||
        sp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos, err) < 0 ||
        sp_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &add_space, err) < 0)
        return -1;
    if (add_bos && t->bos_id >= 0) t->post_pre[t->n_post_pre++] = t->bos_id;
    if (add_eos && t->eos_id >= 0) t->post_post[t->n_post_post++] = t->eos_id;
    /* pipeline */
    if (is_llama) {
        t->model = TOK_MODEL_SPM;
        t->byte_fallback = 1;
        if (add_space) {
            tok_norm pp = {.kind = NORM_PREPEND, .a = sp_tok_strndup(SPACE_MARK, 3), .alen = 3};
            if (sp_tok_push_norm(t, &pp, err)) return -1;
        }
        if (add_replace_norm(t, " ", SPACE_MARK, err) || add_sentencepiece_decoders(t, add_space, err))
            return -1;
    } else {
        t->model = TOK_MODEL_BPE;
        if (bpe_pre(t, fam, err)) return -1;
    }
    return 0;
}

/* 1 when general.name contains "phi-3" or "phi3" in any case: llama.cpp then gives every added
 * token but <unk>, <s> and <|endoftext|> the right-strip attribute */
static int names_phi3(const gguf_file *g) {
    sp_err ignored = {0};
    gguf_str name = {0};
    if (sp_gguf_get_str(g, "general.name", &name, &ignored) != 0) return 0;
    for (uint64_t i = 0; i < name.len; i++) {
        const char *s = name.ptr + i;
        size_t left = (size_t)(name.len - i);
        if ((left >= 5 && !strncasecmp(s, "phi-3", 5)) || (left >= 4 && !strncasecmp(s, "phi3", 4))) return 1;
    }
    return 0;
}

static int phi3_keeps_space(const char *s, size_t n) {
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t k = 0; k < sizeof keep / sizeof *keep; k++)
        if (n == strlen(keep[k]) && !memcmp(s, keep[k], n)) return 1;
    return 0;
}

static int load(const gguf_file *g, tok_tokenizer *t, sp_err *err) {
    gguf_str model;
    int rc = sp_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc) return rc < 0 ? -1 : sp_err_set(err, "%s: no tokenizer.ggml.model key (not a vocab)", t->source);
    int is_llama = model.len == 5 && !memcmp(model.ptr, "llama", 5);
    int is_gpt2 = model.len == 4 && !memcmp(model.ptr, "gpt2", 4);
    int is_gemma4 = model.len == 6 && !memcmp(model.ptr, "gemma4", 6);
    if (!is_llama && !is_gpt2 && !is_gemma4)
        return sp_err_set(err, "%s: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, gemma4)",
                          t->source, (int)(model.len > 40 ? 40 : model.len), model.ptr);
    const gguf_kv *tokens, *types = NULL, *scores = NULL, *merges = NULL;
    rc = sp_gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens, err);
    if (rc) return rc < 0 ? -1 : sp_err_set(err, "%s: tokenizer.ggml.tokens is missing", t->source);
    if (tokens->arr_n == 0 || tokens->arr_n > (1u << 26))
        return sp_err_set(err, "%s: tokenizer.ggml.tokens has %llu entries", t->source,
                          (unsigned long long)tokens->arr_n);
    int n = (int)tokens->arr_n;
    if (sp_gguf_get_arr(g, "tokenizer.ggml.token_type", -1, &types, err) < 0) return -1;
    if (sp_gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &scores, err) < 0) return -1;
    if (sp_gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &merges, err) < 0) return -1;
    if (types && (types->arr_n != (uint64_t)n || types->arr_type == GGUF_TYPE_STRING ||
                  types->arr_type == GGUF_TYPE_ARRAY))
        return sp_err_set(err, "%s: tokenizer.ggml.token_type must be %d integers", t->source, n);
    if (scores && scores->arr_n != (uint64_t)n)
        return sp_err_set(err, "%s: tokenizer.ggml.scores has %llu entries for %d tokens", t->source,
                          (unsigned long long)scores->arr_n, n);
    if (is_llama && !scores) return sp_err_set(err, "%s: a llama vocab needs tokenizer.ggml.scores", t->source);
    if (!is_llama && !merges) return sp_err_set(err, "%s: a BPE vocab needs tokenizer.ggml.merges", t->source);
    if (load_vocab(t, n, tokens, types, scores, is_llama, err)) return -1;
    if (merges && load_merges(t, merges, err)) return -1;
    if (load_pipeline(g, t, is_llama, is_gpt2, is_gemma4, err)) return -1;
    /* added tokens: control / unknown (special) and user-defined */
    int phi3 = names_phi3(g);
    for (int i = 0; i < n; i++) {
        if (!(t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER | TOK_ATTR_UNKNOWN)) || !t->len[i]) continue;
        tok_added a = {.id = i, .text = t->text.p + t->off[i], .len = t->len[i],
                       .special = !(t->attr[i] & TOK_ATTR_USER)};
        a.rstrip = (uint8_t)(phi3 && !phi3_keeps_space(a.text, a.len));
        if (sp_tok_added_add(t, &a, err)) return -1;
    }
    if (sp_tok_added_finish(t, err)) return -1;
    gguf_str ct;
    if (sp_gguf_get_str(g, "tokenizer.chat_template", &ct, err) == 0) {
        t->chat_template = sp_tok_strndup(ct.ptr, ct.len);
        if (!t->chat_template) return sp_err_set(err, "%s: out of memory", t->source);
    }
    sp_tok_collect_eog(t);
    sp_tok_vocab_find_cuts(t);
    return 0;
}

tok_tokenizer *sp_tok_load_gguf(const char *path, sp_err *err) {
    gguf_file *g = sp_gguf_open(path, err);
    if (!g) return NULL;
    tok_tokenizer *t = sp_tok_alloc(path);
    if (!t) {
        sp_err_set(err, "out of memory");
        sp_gguf_close(g);
        return NULL;
    }
    int rc = load(g, t, err);
    sp_gguf_close(g);
    if (rc) {
        sp_tok_free(t);
        return NULL;
    }
    return t;
}
