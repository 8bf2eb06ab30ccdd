/* tokjson.c — load a Hugging Face tokenizer.json (docs/TOKENIZER.md §1): the BPE model (vocab,
 * merges as strings or pairs, byte_fallback, unk/fuse_unk, ignore_merges), added_tokens,
 * normalizer, pre_tokenizer, decoder and post_processor; plus tokenizer_config.json
 * (add_bos_token / add_eos_token, bos/eos tokens, chat_template) when present.
 *
 * Every field is type-checked; a malformed file is an error naming the file and the field
 * (JSON path), never a crash. Unsupported components (WordPiece, Unigram, Precompiled…) are
 * errors that name the component. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../formats/hfjson.h"
#include "tok_internal.h"
#include "tokjson_scan.h"

typedef struct {
    tok_tokenizer *t;
    sp_err *err;
} ld;

/* error "FILE: message" */
static int fail(ld *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ld *L, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sp_err_set(L->err, "%.200s: %s", L->t->source, msg);
}
#define FAIL fail

static const char *str_of(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* optional bool: absent or null -> def; wrong type -> -1 */
static int opt_bool(ld *L, json_t *o, const char *key, int def, const char *where) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return def;
    if (!json_is_boolean(v)) return FAIL(L, "%s.%s must be true or false", where, key);
    return json_is_true(v);
}

/* {"String": s} or {"Regex": r}: literal (is_regex 0) or regex (1) */
static int pattern_of(ld *L, json_t *o, const char *where, const char **s, size_t *n, int *is_regex) {
    json_t *p = json_object_get(o, "pattern");
    json_t *v;
    if (json_is_object(p) && json_is_string(v = json_object_get(p, "String"))) *is_regex = 0;
    else if (json_is_object(p) && json_is_string(v = json_object_get(p, "Regex"))) *is_regex = 1;
    else return FAIL(L, "%s.pattern must be {\"String\": ...} or {\"Regex\": ...}", where);
    *s = json_string_value(v);
    *n = json_string_length(v);
    return 0;
}

/* ---- normalizers ------------------------------------------------------------------------ */
static int parse_norm(ld *L, json_t *o, const char *where, int depth) {
    if (!o || json_is_null(o)) return 0;
    const char *type = json_is_object(o) ? str_of(o, "type") : NULL;
    if (!type) return FAIL(L, "%s must be an object with a \"type\"", where);
    if (depth > 8) return FAIL(L, "%s: normalizers nested too deeply", where);
    tok_norm op = {0};
    char sub[128];
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(o, "normalizers");
        if (!json_is_array(arr)) return FAIL(L, "%s.normalizers must be an array", where);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
            if (parse_norm(L, json_array_get(arr, i), sub, depth + 1)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "NFC")) op.kind = NORM_NFC;
    else if (!strcmp(type, "NFD")) op.kind = NORM_NFD;
    else if (!strcmp(type, "NFKC")) op.kind = NORM_NFKC;
    else if (!strcmp(type, "NFKD")) op.kind = NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) op.kind = NORM_LOWERCASE;
    else if (!strcmp(type, "StripAccents")) op.kind = NORM_STRIP_ACCENTS;
    else if (!strcmp(type, "Strip")) {
        op.kind = NORM_STRIP;
        if ((op.left = opt_bool(L, o, "strip_left", 1, where)) < 0 ||
            (op.right = opt_bool(L, o, "strip_right", 1, where)) < 0)
            return -1;
    } else if (!strcmp(type, "Prepend")) {
        const char *p = str_of(o, "prepend");
        if (!p) return FAIL(L, "%s.prepend must be a string", where);
        op.kind = NORM_PREPEND;
        op.alen = strlen(p);
        op.a = sp_tok_strndup(p, op.alen);
    } else if (!strcmp(type, "Replace")) {
        const char *pat, *content = str_of(o, "content");
        size_t n;
        int is_re;
        if (pattern_of(L, o, where, &pat, &n, &is_re)) return -1;
        if (!content) return FAIL(L, "%s.content must be a string", where);
        op.kind = NORM_REPLACE;
        if (is_re && !(op.re = sp_tok_regex_compile(pat, n, L->err))) return sp_err_wrap(L->err, "%s: %s", L->t->source, where);
        if (!is_re) op.a = sp_tok_strndup(pat, n), op.alen = n;
        op.blen = strlen(content);
        op.b = sp_tok_strndup(content, op.blen);
    } else if (!strcmp(type, "BertNormalizer")) {
        op.kind = NORM_BERT;
        json_t *sa = json_object_get(o, "strip_accents");
        if ((op.clean_text = opt_bool(L, o, "clean_text", 1, where)) < 0 ||
            (op.chinese = opt_bool(L, o, "handle_chinese_chars", 1, where)) < 0 ||
            (op.lowercase = opt_bool(L, o, "lowercase", 1, where)) < 0)
            return -1;
        if (sa && !json_is_null(sa) && !json_is_boolean(sa)) return FAIL(L, "%s.strip_accents must be true, false or null", where);
        op.strip_accents = json_is_boolean(sa) ? json_is_true(sa) : op.lowercase; /* null follows lowercase */
    } else {
        return FAIL(L, "%s: normalizer type '%s' is not supported", where, type);
    }
    return sp_tok_push_norm(L->t, &op, L->err);
}

/* ---- pre-tokenizers ------------------------------------------------------------------------ */
static int prepend_scheme(ld *L, json_t *o, const char *where) {
    const char *s = str_of(o, "prepend_scheme");
    if (s) {
        if (!strcmp(s, "always")) return PREPEND_ALWAYS;
        if (!strcmp(s, "first")) return PREPEND_FIRST;
        if (!strcmp(s, "never")) return PREPEND_NEVER;
        return FAIL(L, "%s.prepend_scheme '%s' is not always/first/never", where, s);
    }
    int add = opt_bool(L, o, "add_prefix_space", 1, where); /* legacy form */
    return add < 0 ? -1 : add ? PREPEND_ALWAYS : PREPEND_NEVER;
}

static const char *split_names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};

/* {"type": "Split", "pattern": ..., "behavior": ..., "invert": ...} */
static int pre_split(ld *L, json_t *o, const char *where, tok_pre *op) {
    const char *pat, *beh = str_of(o, "behavior");
    size_t n;
    int is_re, k = -1;
    if (pattern_of(L, o, where, &pat, &n, &is_re)) return -1;
    for (int i = 0; beh && i < 5; i++)
        if (!strcmp(beh, split_names[i])) k = i;
    if (k < 0) return FAIL(L, "%s.behavior must be one of Removed, Isolated, MergedWithPrevious, "
                           "MergedWithNext, Contiguous", where);
    op->kind = PRE_SPLIT;
    op->behavior = (tok_split_behavior)k;
    if ((op->invert = opt_bool(L, o, "invert", 0, where)) < 0) return -1;
    if (is_re && !(op->re = sp_tok_regex_compile(pat, n, L->err))) return sp_err_wrap(L->err, "%s: %s", L->t->source, where);
    if (!is_re) op->lit = sp_tok_strndup(pat, n), op->lit_len = n;
    return 0;
}

/* Punctuation / BertPreTokenizer: each punctuation character (Unicode P* or ASCII punctuation)
 * is a match; Bert first splits on whitespace (removed) and isolates punctuation */
static int pre_punctuation(ld *L, json_t *o, const char *where, const char *type, tok_pre *op) {
    const char *beh = str_of(o, "behavior");
    int k = beh ? -1 : SPLIT_ISOLATED;
    for (int i = 0; beh && i < 5; i++)
        if (!strcmp(beh, split_names[i])) k = i;
    if (k < 0) return FAIL(L, "%s.behavior '%s' is not a split behavior", where, beh);
    if (!strcmp(type, "BertPreTokenizer")) {
        tok_pre ws = {.kind = PRE_WHITESPACE_SPLIT};
        if (sp_tok_push_pre(L->t, &ws, L->err)) return -1;
    }
    static const char punct[] = "[\\p{P}!-/:-@\\[-`{-~]";
    op->kind = PRE_SPLIT;
    op->behavior = (tok_split_behavior)k;
    if (!(op->re = sp_tok_regex_compile(punct, strlen(punct), L->err))) return -1;
    return 0;
}

static int parse_pre(ld *L, json_t *o, const char *where, int depth) {
    if (!o || json_is_null(o)) return 0;
    const char *type = json_is_object(o) ? str_of(o, "type") : NULL;
    if (!type) return FAIL(L, "%s must be an object with a \"type\"", where);
    if (depth > 8) return FAIL(L, "%s: pre-tokenizers nested too deeply", where);
    tok_pre op = {0};
    char sub[128];
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(o, "pretokenizers");
        if (!json_is_array(arr)) return FAIL(L, "%s.pretokenizers must be an array", where);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", where, i);
            if (parse_pre(L, json_array_get(arr, i), sub, depth + 1)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        if (pre_split(L, o, where, &op)) return -1;
    } else if (!strcmp(type, "ByteLevel")) {
        op.kind = PRE_BYTELEVEL;
        int use_regex = opt_bool(L, o, "use_regex", 1, where);
        if ((op.add_prefix_space = opt_bool(L, o, "add_prefix_space", 1, where)) < 0 || use_regex < 0) return -1;
        if (use_regex && !(op.re = sp_tok_regex_compile(SP_TOK_REGEX_GPT2, strlen(SP_TOK_REGEX_GPT2), L->err))) return -1;
        L->t->byte_level = 1;
    } else if (!strcmp(type, "Metaspace")) {
        const char *r = str_of(o, "replacement");
        op.kind = PRE_METASPACE;
        if (!r) r = "\xE2\x96\x81";
        op.lit_len = strlen(r);
        op.lit = sp_tok_strndup(r, op.lit_len);
        if ((op.prepend_scheme = prepend_scheme(L, o, where)) < 0 ||
            (op.split = opt_bool(L, o, "split", 1, where)) < 0) {
            sp_tok_pre_free(&op);
            return -1;
        }
    } else if (!strcmp(type, "Digits")) {
        op.kind = PRE_DIGITS;
        if ((op.individual_digits = opt_bool(L, o, "individual_digits", 0, where)) < 0) return -1;
    } else if (!strcmp(type, "WhitespaceSplit")) {
        op.kind = PRE_WHITESPACE_SPLIT;
    } else if (!strcmp(type, "Punctuation") || !strcmp(type, "BertPreTokenizer")) {
        if (pre_punctuation(L, o, where, type, &op)) return -1;
    } else if (!strcmp(type, "CharDelimiterSplit")) {
        const char *d = str_of(o, "delimiter");
        if (!d || !*d) return FAIL(L, "%s.delimiter must be a one-character string", where);
        op.kind = PRE_SPLIT;
        op.behavior = SPLIT_REMOVED;
        op.lit_len = strlen(d);
        op.lit = sp_tok_strndup(d, op.lit_len);
    } else if (!strcmp(type, "Whitespace")) {
        op.kind = PRE_SPLIT;
        op.behavior = SPLIT_REMOVED;
        op.invert = 1;
        static const char words[] = "\\w+|[^\\w\\s]+";
        if (!(op.re = sp_tok_regex_compile(words, strlen(words), L->err))) return -1;
    } else {
        return FAIL(L, "%s: pre_tokenizer type '%s' is not supported", where, type);
    }
    return sp_tok_push_pre(L->t, &op, L->err);
}

/* ---- decoders ------------------------------------------------------------------------------ */
static int parse_dec(ld *L, json_t *o, const char *where, int depth) {
    if (!o || json_is_null(o)) return 0;
    const char *type = json_is_object(o) ? str_of(o, "type") : NULL;
    if (!type) return FAIL(L, "%s must be an object with a \"type\"", where);
    if (depth > 8) return FAIL(L, "%s: decoders nested too deeply", where);
    tok_dec op = {0};
    char sub[128];
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(o, "decoders");
        if (!json_is_array(arr)) return FAIL(L, "%s.decoders must be an array", where);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", where, i);
            if (parse_dec(L, json_array_get(arr, i), sub, depth + 1)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) op.kind = DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) op.kind = DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) op.kind = DEC_FUSE;
    else if (!strcmp(type, "Replace")) {
        const char *pat, *content = str_of(o, "content");
        size_t n;
        int is_re;
        if (pattern_of(L, o, where, &pat, &n, &is_re)) return -1;
        if (is_re) return FAIL(L, "%s: a Replace decoder with a Regex pattern is not supported", where);
        if (!content) return FAIL(L, "%s.content must be a string", where);
        op.kind = DEC_REPLACE;
        op.a = sp_tok_strndup(pat, n), op.alen = n;
        op.blen = strlen(content);
        op.b = sp_tok_strndup(content, op.blen);
    } else if (!strcmp(type, "Strip")) {
        const char *c = str_of(o, "content");
        json_t *st = json_object_get(o, "start"), *sp = json_object_get(o, "stop");
        if (!c || !json_is_integer(st) || !json_is_integer(sp) || json_integer_value(st) < 0 ||
            json_integer_value(sp) < 0 || json_integer_value(st) > 1000 || json_integer_value(sp) > 1000)
            return FAIL(L, "%s: Strip needs content (string), start and stop (small integers)", where);
        op.kind = DEC_STRIP;
        op.alen = strlen(c);
        op.a = sp_tok_strndup(c, op.alen);
        op.start = (int)json_integer_value(st);
        op.stop = (int)json_integer_value(sp);
    } else if (!strcmp(type, "Metaspace")) {
        const char *r = str_of(o, "replacement");
        if (!r) r = "\xE2\x96\x81";
        op.kind = DEC_METASPACE;
        op.alen = strlen(r);
        op.a = sp_tok_strndup(r, op.alen);
        if ((op.prepend_scheme = prepend_scheme(L, o, where)) < 0) {
            sp_tok_dec_free(&op);
            return -1;
        }
    } else {
        return FAIL(L, "%s: decoder type '%s' is not supported", where, type);
    }
    return sp_tok_push_dec(L->t, &op, L->err);
}

/* ---- post-processor ------------------------------------------------------------------------ */
static int special_ids(ld *L, json_t *specials, const char *name, int32_t *out, int *n, int cap) {
    json_t *e = json_object_get(specials, name), *ids;
    if (!json_is_object(e) || !json_is_array(ids = json_object_get(e, "ids")))
        return FAIL(L, "post_processor.special_tokens has no ids for '%s'", name);
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= L->t->n_vocab)
            return FAIL(L, "post_processor.special_tokens['%s'].ids[%zu] is not a vocabulary id", name, i);
        if (*n >= cap) return FAIL(L, "post_processor: too many special tokens");
        out[(*n)++] = (int32_t)json_integer_value(v);
    }
    return 0;
}

static int parse_post(ld *L, json_t *o, int depth) {
    if (!o || json_is_null(o)) return 0;
    const char *type = json_is_object(o) ? str_of(o, "type") : NULL;
    if (!type) return FAIL(L, "post_processor must be an object with a \"type\"");
    if (depth > 8) return FAIL(L, "post_processor nested too deeply");
    tok_tokenizer *t = L->t;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(o, "processors");
        if (!json_is_array(arr)) return FAIL(L, "post_processor.processors must be an array");
        for (size_t i = 0; i < json_array_size(arr); i++)
            if (parse_post(L, json_array_get(arr, i), depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) return 0; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) {
        json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens");
        if (!json_is_array(single) || !json_is_object(specials))
            return FAIL(L, "post_processor: TemplateProcessing needs 'single' (array) and 'special_tokens'");
        int seen_seq = 0;
        t->n_post_pre = t->n_post_post = 0;
        for (size_t i = 0; i < json_array_size(single); i++) {
            json_t *it = json_array_get(single, i), *st;
            if (json_object_get(it, "Sequence")) {
                seen_seq = 1;
                continue;
            }
            st = json_object_get(it, "SpecialToken");
            const char *id = json_is_object(st) ? str_of(st, "id") : NULL;
            if (!id) return FAIL(L, "post_processor.single[%zu] is neither SpecialToken nor Sequence", i);
            if (seen_seq ? special_ids(L, specials, id, t->post_post, &t->n_post_post, TOK_MAX_POST)
                         : special_ids(L, specials, id, t->post_pre, &t->n_post_pre, TOK_MAX_POST))
                return -1;
        }
        return 0;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        json_t *cls = json_object_get(o, "cls"), *sep = json_object_get(o, "sep");
        if (!json_is_array(cls) || !json_is_integer(json_array_get(cls, 1)) || !json_is_array(sep) ||
            !json_is_integer(json_array_get(sep, 1)))
            return FAIL(L, "post_processor: %s needs cls and sep as [text, id]", type);
        json_int_t c = json_integer_value(json_array_get(cls, 1)), s = json_integer_value(json_array_get(sep, 1));
        if (c < 0 || c >= t->n_vocab || s < 0 || s >= t->n_vocab) return FAIL(L, "post_processor: cls/sep id out of range");
        t->post_pre[0] = (int32_t)c, t->n_post_pre = 1;
        t->post_post[0] = (int32_t)s, t->n_post_post = 1;
        return 0;
    }
    return FAIL(L, "post_processor type '%s' is not supported", type);
}

/* ---- model: vocab, added tokens, merges --------------------------------------------------- */
/* model.vocab entries as read (either reader), before the id range is known */
typedef struct {
    ld *L;
    tok_buf arena;
    uint32_t *off, *len;
    int32_t *id;
    size_t n, cap;
    long long max_id;
} vocab_list;

static int vocab_add(void *ctx, const char *s, size_t n, long long id) {
    vocab_list *v = ctx;
    if (id < 0 || id >= (1 << 26))
        return FAIL(v->L, "model.vocab['%.*s'] = %lld is not an id in [0, %d)", (int)(n > 60 ? 60 : n), s, id, 1 << 26);
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        uint32_t *o = realloc(v->off, cap * sizeof *o), *l = o ? realloc(v->len, cap * sizeof *l) : NULL;
        if (o) v->off = o;
        if (l) v->len = l;
        int32_t *d = l ? realloc(v->id, cap * sizeof *d) : NULL;
        if (!d) return FAIL(v->L, "out of memory");
        v->id = d;
        v->cap = cap;
    }
    if (v->arena.n + n > UINT32_MAX - 1) return FAIL(v->L, "model.vocab is too large");
    v->off[v->n] = (uint32_t)v->arena.n;
    v->len[v->n] = (uint32_t)n;
    v->id[v->n++] = (int32_t)id;
    if (id > v->max_id) v->max_id = id;
    return sp_tok_buf_put(&v->arena, s, n) ? FAIL(v->L, "out of memory") : 0;
}

static int merge_add(void *ctx, long long i, const char *a, size_t la, const char *b, size_t lb) {
    ld *L = ctx;
    tok_tokenizer *t = L->t;
    int32_t ia = sp_tok_vocab_find(t, a, la), ib = sp_tok_vocab_find(t, b, lb);
    if (ia < 0 || ib < 0)
        return FAIL(L, "model.merges[%lld] names '%.*s', which is not in model.vocab", i,
                    (int)(ia < 0 ? (la > 60 ? 60 : la) : (lb > 60 ? 60 : lb)), ia < 0 ? a : b);
    if (i > INT32_MAX / 2) return FAIL(L, "model.merges is too long");
    if (sp_tok_merges_add(t, ia, ib, (int32_t)i, L->err)) return sp_err_wrap(L->err, "model.merges[%lld]", i);
    return 0;
}

/* model.vocab (from the scanner span vs, else from jansson) and the ids of added_tokens: the
 * dense id table of t, checked for duplicates */
static int model_vocab(ld *L, json_t *vocab, json_t *added, const tj_span *vs) {
    tok_tokenizer *t = L->t;
    vocab_list vl = {.L = L, .max_id = -1};
    int rc = 0;
    size_t bad = 0;
    if (vs) {
        int r = sp_tj_vocab_each(vs->base + vs->a, vs->base + vs->b, vocab_add, &vl, &bad);
        if (r == -1) rc = FAIL(L, "model.vocab must be {\"token\": id, ...}: malformed at byte %zu", vs->a + bad);
        else if (r) rc = -1;
    } else {
        const char *key;
        json_t *val;
        json_object_foreach(vocab, key, val) {
            if (!json_is_integer(val)) {
                rc = FAIL(L, "model.vocab['%.60s'] must be an integer id", key);
                break;
            }
            if ((rc = vocab_add(&vl, key, strlen(key), json_integer_value(val)))) break;
        }
    }
    for (size_t i = 0; !rc && added && i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        if (!json_is_object(a) || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 26) || !json_is_string(json_object_get(a, "content")))
            rc = FAIL(L, "added_tokens[%zu] needs an integer id in range and a string content", i);
        else if (json_integer_value(id) > vl.max_id)
            vl.max_id = json_integer_value(id);
    }
    if (!rc && vl.max_id < 0) rc = FAIL(L, "model.vocab is empty");
    /* the id tables are dense: an id far beyond the number of tokens would cost memory for
     * the holes, not for tokens the file has (real vocabularies have no or few gaps) */
    size_t n_tokens = vl.n + (added ? json_array_size(added) : 0);
    if (!rc && (size_t)vl.max_id >= 2 * n_tokens + 65536)
        rc = FAIL(L, "token id %lld with only %zu tokens: ids must be dense (at most %zu ids for this file)",
                  vl.max_id, n_tokens, 2 * n_tokens + 65536);
    if (!rc) rc = sp_tok_vocab_init(t, (int)vl.max_id + 1, L->err);
    for (size_t i = 0; !rc && i < vl.n; i++)
        if (sp_tok_vocab_set(t, vl.id[i], vl.arena.p + vl.off[i], vl.len[i], L->err)) rc = sp_err_wrap(L->err, "model.vocab");
    sp_tok_buf_free(&vl.arena);
    free(vl.off);
    free(vl.len);
    free(vl.id);
    if (rc || sp_tok_vocab_finish(t, L->err)) return -1;
    if (t->n_dups)
        return FAIL(L, "model.vocab has the token '%.*s' twice", (int)(t->len[t->dup_id] > 60 ? 60 : t->len[t->dup_id]),
                    t->text.p + t->off[t->dup_id]);
    return 0;
}

/* added_tokens[i] (id and content already checked by model_vocab): its flags, its place in the
 * vocabulary (a hole is filled, a present token must match) */
static int model_added_token(ld *L, json_t *a, size_t i) {
    tok_tokenizer *t = L->t;
    int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
    json_t *c = json_object_get(a, "content");
    const char *s = json_string_value(c);
    size_t n = json_string_length(c);
    char where[64];
    snprintf(where, sizeof where, "added_tokens[%zu]", i);
    tok_added ad = {.id = id, .text = (char *)s, .len = n};
    int v;
    if ((v = opt_bool(L, a, "special", 0, where)) < 0) return -1;
    ad.special = (uint8_t)v;
    if ((v = opt_bool(L, a, "lstrip", 0, where)) < 0) return -1;
    ad.lstrip = (uint8_t)v;
    if ((v = opt_bool(L, a, "rstrip", 0, where)) < 0) return -1;
    ad.rstrip = (uint8_t)v;
    if ((v = opt_bool(L, a, "single_word", 0, where)) < 0) return -1;
    ad.single_word = (uint8_t)v;
    if ((v = opt_bool(L, a, "normalized", 0, where)) < 0) return -1;
    ad.normalized = (uint8_t)v;
    if (!(t->attr[id] & TOK_ATTR_HOLE) && (t->len[id] != n || memcmp(t->text.p + t->off[id], s, n)))
        return FAIL(L, "%s: id %d is '%.*s' in model.vocab but '%.*s' here", where, id,
                    (int)(t->len[id] > 40 ? 40 : t->len[id]), t->text.p + t->off[id], (int)(n > 40 ? 40 : n), s);
    if (t->attr[id] & TOK_ATTR_HOLE) {
        if (sp_tok_vocab_set(t, id, s, n, L->err)) return -1;
        sp_tok_vocab_insert(t, id);
    }
    t->attr[id] = ad.special ? TOK_ATTR_CONTROL : TOK_ATTR_USER;
    return sp_tok_added_add(t, &ad, L->err) ? -1 : 0;
}

/* model.merges from the scanner span ms */
static int model_merges_span(ld *L, const tj_span *ms) {
    /* count bound: 2 quotes per "a b" merge, 4 per ["a", "b"] pair */
    size_t quotes = 0, bad = 0;
    const char *p0 = ms->base + ms->a + 1;
    while (p0 < ms->base + ms->b && (*p0 == ' ' || *p0 == '\n' || *p0 == '\r' || *p0 == '\t')) p0++;
    for (const char *p = ms->base + ms->a; (p = memchr(p, '"', (size_t)(ms->base + ms->b - p))); p++) quotes++;
    size_t bound = quotes / (p0 < ms->base + ms->b && *p0 == '[' ? 4 : 2);
    if (bound > (size_t)INT32_MAX / 4) return FAIL(L, "model.merges is too long");
    if (sp_tok_merges_init(L->t, (int)bound, L->err)) return -1;
    int r = sp_tj_merges_each(ms->base + ms->a, ms->base + ms->b, merge_add, L, &bad);
    if (r == -1) return FAIL(L, "model.merges must be [\"a b\", ...] or [[\"a\", \"b\"], ...]: malformed at byte %zu", ms->a + bad);
    if (r == -3) return FAIL(L, "model.merges: a string merge is not 'left right' (byte %zu)", ms->a + bad);
    return r ? -1 : 0;
}

/* model.merges as a jansson array */
static int model_merges_json(ld *L, json_t *merges) {
    size_t nm = json_array_size(merges);
    if (nm > (size_t)INT32_MAX / 4) return FAIL(L, "model.merges is too long");
    if (sp_tok_merges_init(L->t, (int)nm, L->err)) return -1;
    for (size_t i = 0; i < nm; i++) {
        json_t *m = json_array_get(merges, i);
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            size_t n = json_string_length(m);
            const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
            if (!sp) return FAIL(L, "model.merges[%zu] '%.60s' is not 'left right'", i, s);
            if (merge_add(L, (long long)i, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp - s) - 1)) return -1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            if (merge_add(L, (long long)i, json_string_value(a), json_string_length(a), json_string_value(b),
                          json_string_length(b)))
                return -1;
        } else {
            return FAIL(L, "model.merges[%zu] must be a string 'a b' or a pair [\"a\", \"b\"]", i);
        }
    }
    return 0;
}

/* byte_fallback, fuse_unk, ignore_merges, unk_token; the unsupported options must be unset */
static int model_options(ld *L, json_t *model) {
    tok_tokenizer *t = L->t;
    int v;
    if ((v = opt_bool(L, model, "byte_fallback", 0, "model")) < 0) return -1;
    t->byte_fallback = v;
    if ((v = opt_bool(L, model, "fuse_unk", 0, "model")) < 0) return -1;
    t->fuse_unk = v;
    if ((v = opt_bool(L, model, "ignore_merges", 0, "model")) < 0) return -1;
    t->ignore_merges = v;
    json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk)) return FAIL(L, "model.unk_token must be a string or null");
        t->unk_id = sp_tok_vocab_find(t, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0) return FAIL(L, "model.unk_token '%.60s' is not in model.vocab", json_string_value(unk));
        t->attr[t->unk_id] |= TOK_ATTR_UNKNOWN;
    }
    static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *x = json_object_get(model, affixes[i]);
        if (x && !json_is_null(x) && (!json_is_string(x) || json_string_length(x) > 0))
            return FAIL(L, "model.%s is not supported (must be null or empty)", affixes[i]);
    }
    json_t *drop = json_object_get(model, "dropout");
    if (drop && !json_is_null(drop) && (!json_is_number(drop) || json_number_value(drop) != 0.0))
        return FAIL(L, "model.dropout must be null (BPE dropout is for training only)");
    return 0;
}

/* vocab / merges come from the fast scanner when their spans are known, else from jansson */
static int parse_model(ld *L, json_t *model, json_t *added, const tj_span *vs, const tj_span *ms) {
    tok_tokenizer *t = L->t;
    if (!json_is_object(model)) return FAIL(L, "'model' must be an object");
    const char *type = str_of(model, "type");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (type && strcmp(type, "BPE")) return FAIL(L, "model type '%s' is not supported (only BPE)", type);
    if (!vs && !json_is_object(vocab)) return FAIL(L, "model.vocab must be an object {token: id}");
    if (!ms && !json_is_array(merges)) return FAIL(L, "model.merges must be an array");
    if (added && !json_is_null(added) && !json_is_array(added)) return FAIL(L, "added_tokens must be an array");
    if (model_vocab(L, vocab, added, vs)) return -1;
    for (size_t i = 0; added && i < json_array_size(added); i++)
        if (model_added_token(L, json_array_get(added, i), i)) return -1;
    sp_tok_vocab_tables(t);
    if (sp_tok_added_finish(t, L->err)) return -1;
    for (int b = 0; b < 256; b++)
        if (t->byte_tok[b] >= 0) t->attr[t->byte_tok[b]] |= TOK_ATTR_BYTE;
    /* merges: "a b" strings or ["a", "b"] pairs; rank = index (docs/TOKENIZER.md §1) */
    if (ms ? model_merges_span(L, ms) : model_merges_json(L, merges)) return -1;
    return model_options(L, model);
}

/* "bos_token": "<s>" or {"content": "<s>", ...} */
static int32_t config_token(const tok_tokenizer *t, json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return -1;
    return sp_tok_vocab_find(t, json_string_value(v), json_string_length(v));
}

static int apply_config(ld *L, const char *cfg_text, int has_post) {
    tok_tokenizer *t = L->t;
    json_t *cfg = sp_hf_json_loadb(cfg_text, strlen(cfg_text), 0, "tokenizer_config.json", L->err);
    if (!cfg) return sp_err_wrap(L->err, "%s", t->source);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return sp_err_set(L->err, "%s: tokenizer_config.json: the top level must be an object", t->source);
    }
    int32_t bos = config_token(t, cfg, "bos_token"), eos = config_token(t, cfg, "eos_token");
    if (bos >= 0) t->bos_id = bos;
    if (eos >= 0) t->eos_id = eos;
    /* transformers rebuilds the post-processor as [bos] $A [eos] from add_bos_token /
     * add_eos_token when the config names either flag, when its tokenizer class defaults them
     * (Llama / CodeLlama / Gemma: BOS on), or when tokenizer.json has no post-processor;
     * otherwise tokenizer.json's post-processor stands (docs/tokenizer-fidelity.md). */
    json_t *ab = json_object_get(cfg, "add_bos_token"), *ae = json_object_get(cfg, "add_eos_token");
    const char *cls = str_of(cfg, "tokenizer_class");
    int class_bos = cls && (!strncmp(cls, "LlamaTokenizer", 14) || !strncmp(cls, "CodeLlamaTokenizer", 18) ||
                            !strncmp(cls, "GemmaTokenizer", 14));
    if (json_is_boolean(ab) || json_is_boolean(ae) || class_bos || !has_post) {
        int add_bos = json_is_boolean(ab) ? json_is_true(ab) : class_bos;
        int add_eos = json_is_true(ae);
        json_t *bv = json_object_get(cfg, "bos_token"), *ev = json_object_get(cfg, "eos_token");
        int32_t b = bv ? bos : t->bos_id, e = ev ? eos : t->eos_id; /* "bos_token": null -> none */
        t->n_post_pre = t->n_post_post = 0;
        if (add_bos && b >= 0) t->post_pre[t->n_post_pre++] = b;
        if (add_eos && e >= 0) t->post_post[t->n_post_post++] = e;
    }
    json_t *ct = json_object_get(cfg, "chat_template");
    const char *tmpl = json_is_string(ct) ? json_string_value(ct) : NULL;
    for (size_t i = 0; json_is_array(ct) && i < json_array_size(ct); i++) { /* [{name, template}] */
        json_t *e = json_array_get(ct, i);
        const char *name = str_of(e, "name");
        if (name && !strcmp(name, "default")) tmpl = str_of(e, "template");
    }
    if (tmpl && !(t->chat_template = sp_tok_strndup(tmpl, strlen(tmpl)))) {
        json_decref(cfg);
        return sp_err_set(L->err, "out of memory");
    }
    json_decref(cfg);
    return 0;
}

tok_tokenizer *sp_tok_load_json_mem(const char *text, size_t len, const char *config_json,
                                 const char *what, sp_err *err) {
    tok_tokenizer *t = sp_tok_alloc(what);
    if (!t) {
        sp_err_set(err, "out of memory");
        return NULL;
    }
    ld L = {t, err};
    /* fast path: read model.vocab / model.merges here, the rest with jansson */
    tj_span vs, ms;
    char *rest = NULL;
    size_t rest_len = 0;
    if (sp_tj_find_model_members(text, len, &vs, &ms) == 0 && vs.b && ms.b && (rest = malloc(len))) {
        /* the document without the two big values: [.. vocab {} .. merges [] ..] */
        const tj_span *first = vs.a < ms.a ? &vs : &ms, *second = vs.a < ms.a ? &ms : &vs;
        const char *fill1 = first == &vs ? "{}" : "[]", *fill2 = first == &vs ? "[]" : "{}";
        memcpy(rest, text, first->a), rest_len = first->a;
        memcpy(rest + rest_len, fill1, 2), rest_len += 2;
        memcpy(rest + rest_len, text + first->b, second->a - first->b), rest_len += second->a - first->b;
        memcpy(rest + rest_len, fill2, 2), rest_len += 2;
        memcpy(rest + rest_len, text + second->b, len - second->b), rest_len += len - second->b;
    }
    json_t *root = sp_hf_json_loadb(rest ? rest : text, rest ? rest_len : len, JSON_REJECT_DUPLICATES, what, err);
    int rc = root ? 0 : -1;
    if (root && !json_is_object(root)) rc = sp_err_set(err, "%s: the top level must be an object", what);
    if (!rc)
        rc = parse_model(&L, json_object_get(root, "model"), json_object_get(root, "added_tokens"),
                         rest ? &vs : NULL, rest ? &ms : NULL);
    free(rest);
    if (!rc) rc = parse_norm(&L, json_object_get(root, "normalizer"), "normalizer", 0);
    if (!rc) rc = parse_pre(&L, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", 0);
    if (!rc) rc = parse_dec(&L, json_object_get(root, "decoder"), "decoder", 0);
    json_t *post = json_object_get(root, "post_processor");
    int has_post = post && !json_is_null(post);
    if (!rc) rc = parse_post(&L, post, 0);
    json_decref(root);
    if (!rc) {
        t->model = TOK_MODEL_BPE;
        t->sanitize_utf8 = !t->byte_fallback;
        if (t->n_post_pre) t->bos_id = t->post_pre[0];
        if (t->n_post_post) t->eos_id = t->post_post[t->n_post_post - 1];
        if (config_json) rc = apply_config(&L, config_json, has_post);
    }
    if (!rc) {
        if (t->eos_id < 0) { /* the usual names */
            static const char *eos[] = {"</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>"};
            for (size_t i = 0; i < 4 && t->eos_id < 0; i++) t->eos_id = sp_tok_vocab_find(t, eos[i], strlen(eos[i]));
        }
        sp_tok_collect_eog(t);
        sp_tok_vocab_find_cuts(t);
        return t;
    }
    sp_tok_free(t);
    return NULL;
}

static tok_tokenizer *load_with_config(const char *json_path, const char *cfg_path, sp_err *err) {
    char *text = NULL, *cfg = NULL;
    size_t n;
    if (sp_read_file(json_path, &text, &n, err)) return NULL;
    if (cfg_path && sp_file_exists(cfg_path) && sp_read_file(cfg_path, &cfg, NULL, err)) {
        free(text);
        return NULL;
    }
    tok_tokenizer *t = sp_tok_load_json_mem(text, n, cfg, json_path, err);
    free(text);
    free(cfg);
    return t;
}

tok_tokenizer *sp_tok_load_json(const char *path, sp_err *err) {
    char dir[1024], cfg[1100];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    sp_path_join(cfg, sizeof cfg, dir, "tokenizer_config.json");
    return load_with_config(path, cfg, err);
}

tok_tokenizer *sp_tok_load_dir(const char *model_dir, sp_err *err) {
    char json[1100], cfg[1100];
    sp_path_join(json, sizeof json, model_dir, "tokenizer.json");
    sp_path_join(cfg, sizeof cfg, model_dir, "tokenizer_config.json");
    if (!sp_file_exists(json)) {
        sp_err_set(err, "%s: no tokenizer.json in the model directory", model_dir);
        return NULL;
    }
    return load_with_config(json, cfg, err);
}
