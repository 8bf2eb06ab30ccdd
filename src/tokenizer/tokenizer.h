/* tokenizer.h — text <-> token ids for the models specula runs (docs/TOKENIZER.md).
 *
 * Loads Hugging Face tokenizer.json files (BPE model with the normalizers, pre-tokenizers,
 * decoders and post-processor the file declares, tokenizer_config.json's add_bos_token /
 * add_eos_token as transformers applies them) and GGUF vocabularies (tokenizer.ggml.model =
 * llama | gpt2 | gemma4; every tokenizer.ggml.pre name llama.cpp knows). SentencePiece-style
 * BPE with byte fallback (Gemma, Llama 2) and byte-level BPE with regex pre-tokenizers (Qwen,
 * Llama 3, GPT-2, DeepSeek…). What decides each step: docs/tokenizer-fidelity.md.
 *
 * Ownership: tok_load_* return a tokenizer the caller frees with sp_tok_free. Functions that
 * return malloc'd arrays/strings say so; the caller frees them with free(). A tokenizer is
 * read-only after loading: several threads may encode/decode with it at once. */
#ifndef SPECULA_TOKENIZER_H
#define SPECULA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "specula.h"

typedef struct tok_tokenizer tok_tokenizer;
typedef struct tok_stream tok_stream;

/* ---- loading ------------------------------------------------------------------------- */
/* model_dir/tokenizer.json (+ model_dir/tokenizer_config.json when present: add_bos_token,
 * eos_token, chat_template). */
tok_tokenizer *sp_tok_load_dir(const char *model_dir, sp_err *err);
/* One tokenizer.json; a tokenizer_config.json next to it is read too. */
tok_tokenizer *sp_tok_load_json(const char *path, sp_err *err);
/* Same from memory (config_json may be NULL); `what` names the source in messages. */
tok_tokenizer *sp_tok_load_json_mem(const char *json, size_t len, const char *config_json,
                                 const char *what, sp_err *err);
/* The tokenizer.ggml.* keys of a GGUF file (vocab-only or a full model). */
tok_tokenizer *sp_tok_load_gguf(const char *path, sp_err *err);
/* The tokenizer of a model path: DIR/tokenizer.json for a directory, the vocabulary of a GGUF
 * model file otherwise; sp_tok_model_has_tokenizer says whether there is one (1) or not (0). */
tok_tokenizer *sp_tok_load_model(const char *model_path, sp_err *err);
int sp_tok_model_has_tokenizer(const char *model_path);
void sp_tok_free(tok_tokenizer *t);

/* ---- encode / decode ----------------------------------------------------------------- */
/* text (len bytes, need not be NUL-terminated, may be invalid UTF-8) -> ids.
 * add_bos: add the special tokens the tokenizer adds to raw text (BOS, and EOS where the
 *          post-processor says so). parse_special: special-token text (e.g. "<|im_end|>") in
 *          the input becomes that token; with 0 only non-special added tokens are matched and
 *          a control token's text is encoded as plain text.
 * On success *ids is malloc'd (caller frees; non-NULL even when *n == 0). */
int sp_tok_encode(tok_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, int *n, sp_err *err);
/* sp_tok_encode of a text that must fit max_tokens (> 0; 0: no limit): a text too long for that
 * by its length alone (more than max_tokens times the longest token's bytes) is an error before
 * any encoding, so a huge text costs no memory; otherwise encoded, and more than max_tokens ids
 * are an error too. */
int sp_tok_encode_max(tok_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int max_tokens,
                      int32_t **ids, int *n, sp_err *err);
/* ids -> UTF-8 text (special tokens rendered as their text). *text is malloc'd and
 * NUL-terminated (caller frees). Invalid byte sequences become U+FFFD as the model's
 * decoder specifies. Ids out of range are an error. */
int sp_tok_decode(tok_tokenizer *t, const int32_t *ids, int n, char **text, sp_err *err);
/* Same with flags: TOK_DECODE_SKIP_SPECIAL drops control/special tokens. */
enum { TOK_DECODE_SKIP_SPECIAL = 1 };
int sp_tok_decode_ex(tok_tokenizer *t, const int32_t *ids, int n, int flags, char **text,
                  sp_err *err);

/* ---- streaming decode -----------------------------------------------------------------
 * Feed ids one at a time; each push writes the text that became final (never half of a
 * multi-byte character) into out (at most cap bytes, NUL-terminated when room is left) and
 * returns its byte count, or -1 on a bad id. Text that did not fit stays queued for the
 * next push / flush. sp_tok_stream_flush writes what is left (call until it returns 0). */
tok_stream *sp_tok_stream_new(tok_tokenizer *t);
tok_stream *sp_tok_stream_new_ex(tok_tokenizer *t, int flags); /* TOK_DECODE_* flags */
int sp_tok_stream_push(tok_stream *s, int32_t id, char *out, size_t cap);
int sp_tok_stream_flush(tok_stream *s, char *out, size_t cap);
void sp_tok_stream_free(tok_stream *s);

/* ---- vocabulary ---------------------------------------------------------------------- */
int sp_tok_vocab_size(const tok_tokenizer *t); /* highest id + 1 */
int sp_tok_bos(const tok_tokenizer *t);        /* -1 when none */
int sp_tok_eos(const tok_tokenizer *t);        /* -1 when none */
int sp_tok_n_eog(const tok_tokenizer *t);      /* end-of-generation ids (EOS, end-of-turn…) */
int sp_tok_eog(const tok_tokenizer *t, int i);
int sp_tok_is_eog(const tok_tokenizer *t, int32_t id);
int sp_tok_adds_bos(const tok_tokenizer *t); /* 1 when encode(add_bos=1) prepends a BOS */
/* token text as stored in the vocabulary (e.g. "Ġthe", "▁the", "<0x0A>"); NULL if no such
 * id. *len gets its length (the text is not NUL-terminated in general). */
const char *sp_tok_token_text(const tok_tokenizer *t, int32_t id, size_t *len);
int32_t sp_tok_token_id(const tok_tokenizer *t, const char *text, size_t len); /* -1 if absent */
int sp_tok_is_special(const tok_tokenizer *t, int32_t id); /* control / special added token */
/* The bytes token id adds in the middle of a text (raw: half of a UTF-8 character stays half) into
 * out (cap bytes); returns their count (copied only when it fits cap), -1 for a special token or a
 * bad id. */
int sp_tok_token_bytes(const tok_tokenizer *t, int32_t id, char *out, size_t cap);
/* chat_template text from tokenizer_config.json or GGUF tokenizer.chat_template; NULL if none */
const char *sp_tok_chat_template(const tok_tokenizer *t);

/* ---- chat templates ------------------------------------------------------------------ */
typedef struct {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} tok_msg;

/* Render a conversation with a known template: "gemma4", "gemma3", "qwen3" (ChatML, thinking
 * off), "llama3". name NULL: detect from the tokenizer's chat_template; none / unrecognised
 * is an error that names --chat-template. *out is malloc'd (caller frees). Encode the
 * result with add_bos=0, parse_special=1 (the text carries its own BOS). */
int sp_tok_chat_render(tok_tokenizer *t, const char *template_name, const tok_msg *msgs, int n,
                    int add_generation_prompt, char **out, sp_err *err);
/* Detected template name for this tokenizer, or NULL. */
const char *sp_tok_chat_detect(const tok_tokenizer *t);

/* ---- training (SentencePiece-style BPE with byte fallback; Gemma's family) ------------- */
typedef struct {
    int vocab_size;          /* total ids, including specials and the 256 byte tokens */
    double char_coverage;    /* fraction of character occurrences covered by char tokens */
    int max_token_chars;     /* longest piece in characters (0: 16) */
    int log_progress;        /* 1: progress lines on stderr */
} tok_train_opts;

/* Train on the concatenated texts; writes a tokenizer.json (atomically) that sp_tok_load_json
 * reads back. */
int sp_tok_train_bpe(const char *const *texts, const size_t *lens, int n_texts,
                  const tok_train_opts *opts, const char *out_path, sp_err *err);

#endif
