/* tok_internal.h — the tokenizer's internal data: vocabulary tables, the pipeline stages
 * (normalizers, pre-tokenizers, model, decoders, post-processor) and the helpers the
 * stage files share. Not part of the public API (see tokenizer.h). */
#ifndef SPECULA_TOK_INTERNAL_H
#define SPECULA_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "../core/core.h"
#include "tokenizer.h"

/* ---- token attributes (GGUF token_type, docs/GGUF-FORMAT.md §2, plus HF added-token flags) ---- */
enum {
    TOK_ATTR_NORMAL = 1,
    TOK_ATTR_UNKNOWN = 2,
    TOK_ATTR_CONTROL = 4, /* special: matched in text only with parse_special */
    TOK_ATTR_USER = 8,    /* non-special added token: always matched in text */
    TOK_ATTR_UNUSED = 16,
    TOK_ATTR_BYTE = 32,
    TOK_ATTR_HOLE = 64, /* id with no token (gap in the id space) */
};

/* ---- growable byte buffer ------------------------------------------------------------- */
typedef struct {
    char *p;
    size_t n, cap;
} tok_buf;
int sp_tok_buf_reserve(tok_buf *b, size_t extra);
int sp_tok_buf_put(tok_buf *b, const void *s, size_t n);
void sp_tok_buf_free(tok_buf *b);

/* ---- hashing ---------------------------------------------------------------------------- */
static inline uint64_t tok_hash(const void *s, size_t n) {
    const uint8_t *p = s;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h;
}
static inline uint64_t tok_hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* merge rule: (left id, right id) -> (rank, merged id) */
typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty */
    int32_t rank, id;
} tok_merge;

/* ---- pipeline stages -------------------------------------------------------------------- */
typedef enum {
    NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_LOWERCASE, NORM_REPLACE, NORM_PREPEND,
    NORM_STRIP, NORM_STRIP_ACCENTS, NORM_BERT
} tok_norm_kind;

typedef struct {
    tok_norm_kind kind;
    char *a; /* Replace: literal pattern (when re == NULL); Prepend: text */
    size_t alen;
    char *b; /* Replace: content */
    size_t blen;
    pcre2_code *re; /* Replace with a Regex pattern */
    int left, right; /* Strip */
    /* BertNormalizer: clean_text, handle_chinese_chars, strip_accents, lowercase */
    int clean_text, chinese, strip_accents, lowercase;
} tok_norm;

typedef enum {
    SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS
} tok_split_behavior;

typedef enum {
    PRE_SPLIT,            /* regex or literal; behavior; invert */
    PRE_BYTELEVEL,        /* add_prefix_space; use_regex (GPT-2 regex) */
    PRE_METASPACE,        /* replacement; prepend_scheme; split */
    PRE_DIGITS,           /* individual_digits */
    PRE_WHITESPACE_SPLIT, /* split on whitespace, removed */
    PRE_NEWLINE_RUNS,     /* GGUF gemma4: runs of non-newline / newline characters */
} tok_pre_kind;

enum { PREPEND_ALWAYS = 0, PREPEND_FIRST = 1, PREPEND_NEVER = 2 };

typedef struct {
    tok_pre_kind kind;
    pcre2_code *re; /* Split with regex; ByteLevel use_regex */
    char *lit;      /* Split with a literal; Metaspace replacement */
    size_t lit_len;
    tok_split_behavior behavior;
    int invert;
    int add_prefix_space;
    int prepend_scheme;
    int split;
    int individual_digits;
} tok_pre;

typedef enum {
    DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE
} tok_dec_kind;

typedef struct {
    tok_dec_kind kind;
    char *a; /* Replace pattern; Strip content (one char); Metaspace replacement */
    size_t alen;
    char *b; /* Replace content */
    size_t blen;
    int start, stop;    /* Strip */
    int prepend_scheme; /* Metaspace */
} tok_dec;

typedef struct {
    int32_t id;
    char *text;
    size_t len;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added;

typedef enum {
    TOK_MODEL_BPE, /* merges with ranks (HF BPE; GGUF gpt2 / gemma4) */
    TOK_MODEL_SPM  /* pieces with scores, best-scoring pair first (GGUF llama, llama.cpp) */
} tok_model_kind;

#define TOK_MAX_EOG 16
#define TOK_MAX_POST 8

struct tok_tokenizer {
    char source[256]; /* file name for messages */
    tok_model_kind model;
    /* vocabulary: id -> text in one arena; text -> id hash (open addressing) */
    int n_vocab;
    tok_buf text; /* all token texts, back to back */
    uint32_t *off, *len;
    uint8_t *attr;
    float *score; /* SPM only */
    uint64_t *map; /* hash slots: hash high bits << 32 | id; UINT64_MAX empty */
    int32_t ascii_tok[128]; /* id of each one-byte token, -1 absent (fast path) */
    uint64_t map_mask;
    int n_dups;     /* ids whose text an earlier id already has (sp_tok_vocab_finish) */
    int32_t dup_id; /* the first such id */
    /* merges */
    tok_merge *merges;
    uint64_t merge_mask;
    int n_merges;
    /* BPE options (docs/TOKENIZER.md §3) */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_tok[256]; /* "<0xHH>" ids for byte fallback, -1 absent */
    int byte_level;        /* a ByteLevel pre-tokenizer maps bytes to the GPT-2 alphabet */
    int32_t bl_tok[256];   /* byte-level: id of the one-char token of each byte */
    int sanitize_utf8;     /* replace invalid UTF-8 input by U+FFFD before normalizing */
    /* SentencePiece-style words may be cut before a "▁" whose preceding character never
     * precedes "▁" inside a token: no merge can cross such a cut (encode.c). */
    int cut_ok;             /* 0: never cut */
    char cut_bad[16][4];    /* characters that do precede "▁" inside some token */
    uint8_t cut_bad_len[16];
    int n_cut_bad;
    /* pipeline */
    tok_norm *norm;
    int n_norm;
    tok_pre *pre;
    int n_pre;
    tok_dec *dec;
    int n_dec;
    /* added tokens and their matcher: per first byte, the distinct lengths (descending) */
    tok_added *added;
    int n_added;
    int n_norm_added; /* how many match on normalized text ("normalized": true) */
    int32_t *added_map; /* hash of added texts -> index into added, -1 empty */
    uint64_t added_map_mask;
    uint16_t *first_lens[256];
    int n_first_lens[256];
    /* post-processor: ids before / after the sequence when add_bos */
    int32_t post_pre[TOK_MAX_POST], post_post[TOK_MAX_POST];
    int n_post_pre, n_post_post;
    int bos_id, eos_id;
    int32_t eog[TOK_MAX_EOG];
    int n_eog;
    char *chat_template;
};

/* ---- vocab.c ---------------------------------------------------------------------------- */
/* Allocate the id tables for n ids; all ids start as holes. */
int sp_tok_vocab_init(tok_tokenizer *t, int n, sp_err *err);
/* Set the text of id (copied). Duplicate texts are kept; the map keeps the first. */
int sp_tok_vocab_set(tok_tokenizer *t, int32_t id, const char *s, size_t n, sp_err *err);
/* Build the text->id map and byte tables once all ids are set. */
int sp_tok_vocab_finish(tok_tokenizer *t, sp_err *err);
/* insert one more id into the map (after sp_tok_vocab_finish); refresh the byte tables after */
void sp_tok_vocab_insert(tok_tokenizer *t, int32_t id);
void sp_tok_vocab_tables(tok_tokenizer *t);
/* work out cut_ok / cut_bad from the vocabulary (after sp_tok_vocab_finish) */
void sp_tok_vocab_find_cuts(tok_tokenizer *t);
int32_t sp_tok_vocab_find(const tok_tokenizer *t, const char *s, size_t n);
int sp_tok_merges_init(tok_tokenizer *t, int n, sp_err *err);
/* rank = insertion order; merged token text must be in the vocab */
int sp_tok_merges_add(tok_tokenizer *t, int32_t a, int32_t b, int32_t rank, sp_err *err);
const tok_merge *sp_tok_merges_find(const tok_tokenizer *t, int32_t a, int32_t b);
int sp_tok_added_add(tok_tokenizer *t, const tok_added *a, sp_err *err); /* copies text */
int sp_tok_added_finish(tok_tokenizer *t, sp_err *err);
void sp_tok_add_eog(tok_tokenizer *t, int32_t id);
/* append a pipeline stage (the struct is copied; its strings/regex become t's) */
int sp_tok_push_norm(tok_tokenizer *t, const tok_norm *op, sp_err *err);
int sp_tok_push_pre(tok_tokenizer *t, const tok_pre *op, sp_err *err);
int sp_tok_push_dec(tok_tokenizer *t, const tok_dec *op, sp_err *err);
char *sp_tok_strndup(const char *s, size_t n);
/* EOS plus the usual end-of-turn texts present in the vocab */
void sp_tok_collect_eog(tok_tokenizer *t);

/* ---- utf8 helpers (decode.c) -------------------------------------------------------------- */
/* length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid/truncated */
int sp_tok_utf8_valid_len(const uint8_t *s, size_t n);
/* Append s with invalid sequences replaced by U+FFFD. per_byte: one U+FFFD per invalid byte
 * (llama.cpp input rule); else one per maximal invalid subpart (Rust from_utf8_lossy). */
int sp_tok_utf8_lossy(tok_buf *out, const char *s, size_t n, int per_byte);
/* GPT-2 byte <-> char table (docs/TOKENIZER.md §5) */
uint32_t sp_tok_bytelevel_cp(uint8_t b);
int sp_tok_bytelevel_byte(uint32_t cp); /* -1 when cp is not in the table */
int sp_tok_utf8_put(char *out, uint32_t cp); /* bytes written (1..4) */
uint32_t sp_tok_utf8_get(const char *s, size_t n, int *len); /* cp and its length; invalid: len 1, 0xFFFD */

/* ---- normalize.c -------------------------------------------------------------------------- */
/* Apply the normalizers to s; result in out (replaced). */
int sp_tok_normalize(const tok_tokenizer *t, const char *s, size_t n, tok_buf *out, sp_err *err);
void sp_tok_norm_free(tok_norm *n);

/* ---- pretok.c ----------------------------------------------------------------------------- */
typedef struct {
    uint32_t off, len; /* into the arena */
} tok_piece;
typedef struct {
    tok_buf arena;
    tok_piece *p;
    int n, cap;
} tok_pieces;
/* Split s into words (stored in w, which is reset). first: the gap is the first of the text. */
int sp_tok_pretokenize(const tok_tokenizer *t, const char *s, size_t n, int first, tok_pieces *w,
                    sp_err *err);
void sp_tok_pieces_free(tok_pieces *w);
pcre2_code *sp_tok_regex_compile(const char *pattern, size_t len, sp_err *err);
/* pcre2_match that retries a match hitting PCRE2's default limits with limits proportional to
 * the subject (long runs cost linear time, not an error); returns pcre2_match's code */
int sp_tok_regex_match(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t from);
void sp_tok_pre_free(tok_pre *p);
extern const char SP_TOK_REGEX_GPT2[], SP_TOK_REGEX_QWEN2[], SP_TOK_REGEX_LLAMA3[];

/* ---- pretok_table.c: GGUF tokenizer.ggml.pre families --------------------------------------- */
enum {
    TOK_PRE_IGNORE_MERGES = 1, /* a word that is a whole token is emitted as is */
    TOK_PRE_ADD_BOS = 2,       /* BOS added by default (the GGUF add_bos_token key overrides) */
    TOK_PRE_NO_BOS = 4,        /* the vocabulary has no BOS, whatever bos_token_id says */
    TOK_PRE_RAW_UTF8 = 8,      /* BPE over raw UTF-8, no byte-level alphabet */
    TOK_PRE_ESCAPE_SPACES = 16 /* " " becomes "▁" before splitting */
};
typedef struct {
    const char *names;         /* tokenizer.ggml.pre values, space separated */
    const char *const *regex;  /* applied in turn, NULL-terminated */
    int flags;                 /* TOK_PRE_* */
} tok_pre_family;
/* the family of a tokenizer.ggml.pre name, NULL when unknown */
const tok_pre_family *sp_tok_pre_family_find(const char *name, size_t n);
const tok_pre_family *sp_tok_pre_family_at(int i); /* i-th row, NULL past the end */

/* ---- bpe.c -------------------------------------------------------------------------------- */
typedef struct tok_bpe_scratch tok_bpe_scratch;
tok_bpe_scratch *sp_tok_bpe_scratch_new(void);
void sp_tok_bpe_scratch_free(tok_bpe_scratch *s);
/* Encode one word (raw bytes when t->byte_level, else UTF-8) and append ids to out. */
int sp_tok_bpe_word(const tok_tokenizer *t, tok_bpe_scratch *s, const char *w, size_t n,
                 int32_t **out, int *n_out, int *cap_out, sp_err *err);

/* ---- decode.c ----------------------------------------------------------------------------- */
int sp_tok_decode_into(const tok_tokenizer *t, const int32_t *ids, int n, int flags, tok_buf *out,
                    sp_err *err);
void sp_tok_dec_free(tok_dec *d);

/* ---- tokjson.c / tokgguf.c ----------------------------------------------------------------- */
tok_tokenizer *sp_tok_alloc(const char *source);

#endif
