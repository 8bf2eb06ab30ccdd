/* export_gguf_tok.c — tokenizer metadata for the GGUF exporter (docs/GGUF-FORMAT.md §6).
 *
 * Two sources:
 *  - another GGUF: every `tokenizer.*` key is copied byte for byte (how the ref-logits
 *    fixtures got llama-spm's vocabulary; tests/data/ref-logits/README.md);
 *  - a Hugging Face tokenizer.json with a BPE model:
 *      byte-level BPE (Llama-3, Qwen3)  → model "gpt2", pre "llama-bpe" / "qwen2",
 *                                         tokens, token_type, merges;
 *      SentencePiece-style BPE (▁, <0xHH> byte fallback):
 *        gemma4 → model "gemma4": tokens, scores (-1000 placeholders), token_type, merges;
 *        others → model "llama" (SPM): tokens, scores, token_type; llama.cpp's SPM merges
 *        by score, so a token made by merge number r gets score -r (earlier merges win).
 *    Special ids from tokenizer_config.json (bos/eos/unk/pad token strings), else config.json.
 * Unigram (SentencePiece unigram) tokenizer.json files are refused. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_gguf_internal.h"
#include "hfjson.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* ---- copy tokenizer.* keys from a GGUF ------------------------------------------------- */

/* bytes taken by a value of type `type` at p (avail bytes left); -1 when it runs past the end */
static int value_size(const uint8_t *p, size_t avail, uint32_t type, int depth, size_t *out) {
    size_t es = type <= GGUF_TYPE_FLOAT64 ? sp_gguf_type_size((gguf_type)type) : 0;
    if (es) {
        *out = es;
        return es <= avail ? 0 : -1;
    }
    if (type == GGUF_TYPE_STRING) {
        uint64_t n;
        if (avail < 8) return -1;
        memcpy(&n, p, 8);
        if (n > avail - 8) return -1;
        *out = 8 + (size_t)n;
        return 0;
    }
    if (type != GGUF_TYPE_ARRAY || depth > 4 || avail < 12) return -1;
    uint32_t et;
    uint64_t n;
    memcpy(&et, p, 4);
    memcpy(&n, p + 4, 8);
    size_t at = 12;
    size_t ees = et <= GGUF_TYPE_FLOAT64 ? sp_gguf_type_size((gguf_type)et) : 0;
    if (ees) {
        if (n > (avail - at) / ees) return -1;
        *out = at + (size_t)n * ees;
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        size_t s;
        if (value_size(p + at, avail - at, et, depth + 1, &s)) return -1;
        at += s;
    }
    *out = at;
    return 0;
}

static int copy_gguf_tokenizer(gguf_writer *w, const char *path, int V, sp_err *err) {
    char *buf;
    size_t n;
    if (sp_read_file(path, &buf, &n, err)) return -1;
    const uint8_t *p = (const uint8_t *)buf, *end = p + n;
    int rc = -1, copied = 0;
    uint32_t magic, version;
    uint64_t n_kv;
    if (n < 24) goto bad;
    memcpy(&magic, p, 4);
    memcpy(&version, p + 4, 4);
    memcpy(&n_kv, p + 16, 8);
    if (magic != GGUF_MAGIC || (version != 2 && version != 3)) {
        sp_err_set(err, "%s: not a GGUF v2/v3 file", path);
        goto out;
    }
    p += 24;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t klen;
        uint32_t type;
        size_t vs;
        if ((size_t)(end - p) < 8) goto bad;
        memcpy(&klen, p, 8);
        if (klen > 65535 || klen + 12 > (uint64_t)(end - p)) goto bad;
        char key[65536];
        memcpy(key, p + 8, klen);
        key[klen] = 0;
        memcpy(&type, p + 8 + klen, 4);
        p += 12 + klen;
        if (value_size(p, (size_t)(end - p), type, 0, &vs)) goto bad;
        if (!strncmp(key, "tokenizer.", 10)) {
            if (!strcmp(key, "tokenizer.ggml.tokens")) {
                uint64_t count;
                memcpy(&count, p + 4, 8);
                if (type != GGUF_TYPE_ARRAY || count != (uint64_t)V) {
                    sp_err_set(err, "%s: tokenizer.ggml.tokens has %llu entries, the model's vocab_size is %d "
                                    "(llama.cpp needs them equal)", path, (unsigned long long)count, V);
                    goto out;
                }
            }
            if (sp_gguf_writer_set_raw(w, key, (gguf_type)type, p, vs, err)) goto out;
            copied++;
        }
        p += vs;
    }
    if (!copied) {
        sp_err_set(err, "%s: no tokenizer.* keys found", path);
        goto out;
    }
    rc = 0;
    goto out;
bad:
    sp_err_set(err, "%s: truncated or malformed GGUF metadata", path);
out:
    free(buf);
    return rc;
}

/* ---- tokenizer.json ------------------------------------------------------------------------ */

/* does any "type" in this pre_tokenizer / decoder tree equal t? */
static int has_type(json_t *node, const char *t) {
    if (json_is_array(node)) {
        size_t i;
        json_t *e;
        json_array_foreach(node, i, e) if (has_type(e, t)) return 1;
        return 0;
    }
    if (!json_is_object(node)) return 0;
    const char *ty = json_string_value(json_object_get(node, "type"));
    if (ty && !strcmp(ty, t)) return 1;
    return has_type(json_object_get(node, "pretokenizers"), t) || has_type(json_object_get(node, "decoders"), t) ||
           has_type(json_object_get(node, "normalizers"), t);
}

/* the first node of type t in a pre_tokenizer / normalizer tree, or NULL */
static json_t *find_type(json_t *node, const char *t) {
    if (json_is_array(node)) {
        size_t i;
        json_t *e, *r;
        json_array_foreach(node, i, e) if ((r = find_type(e, t))) return r;
        return NULL;
    }
    if (!json_is_object(node)) return NULL;
    const char *ty = json_string_value(json_object_get(node, "type"));
    if (ty && !strcmp(ty, t)) return node;
    json_t *r = find_type(json_object_get(node, "pretokenizers"), t);
    return r ? r : find_type(json_object_get(node, "normalizers"), t);
}

/* SentencePiece-style: does the tokenizer put "▁" before the text? (a Prepend normalizer, or a
 * Metaspace pre-tokenizer whose prepend_scheme is not "never") */
static int adds_space_prefix(json_t *root) {
    if (find_type(json_object_get(root, "normalizer"), "Prepend")) return 1;
    json_t *ms = find_type(json_object_get(root, "pre_tokenizer"), "Metaspace");
    if (!ms) return 0;
    const char *scheme = json_string_value(json_object_get(ms, "prepend_scheme"));
    if (scheme) return strcmp(scheme, "never") != 0;
    return json_is_true(json_object_get(ms, "add_prefix_space"));
}

/* a token string of tokenizer_config.json: "x" or {"content": "x", ...} */
static const char *token_content(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    return json_string_value(json_object_get(v, "content"));
}

typedef struct {
    json_t *vocab, *added;
} tok_maps;

static int lookup_id(const tok_maps *m, const char *content) {
    if (!content) return -1;
    size_t i;
    json_t *e;
    json_array_foreach(m->added, i, e) {
        const char *c = json_string_value(json_object_get(e, "content"));
        if (c && !strcmp(c, content)) return (int)json_integer_value(json_object_get(e, "id"));
    }
    json_t *v = json_object_get(m->vocab, content);
    return json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

static int is_byte_token(const char *s) {
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && strchr("0123456789ABCDEF", s[3]) &&
           strchr("0123456789ABCDEF", s[4]);
}

/* a tokenizer.json being turned into tokenizer.* keys: V entries per table */
typedef struct {
    const char *path; /* the tokenizer.json, for messages */
    int V, byte_level, gemma, unk;
    const char *ggml_model;
    json_t *root, *model, *vocab;
    tok_maps maps;
    const char **tokens;
    char **pads; /* "[PAD{id}]" names owned here */
    int32_t *types;
    float *scores;
    const char **merges;
    char **merge_buf; /* "a b" strings built from [a, b] pairs, owned here */
    size_t n_merges;
} tj_export;

static int tj_oom(const tj_export *x, sp_err *err) { return sp_err_set(err, "out of memory reading %s", x->path); }

/* tokens and their types from model.vocab and added_tokens; ids without a token become
 * "[PAD{id}]" (unused) */
static int tj_tokens(tj_export *x, sp_err *err) {
    const int V = x->V;
    const char *k;
    json_t *v;
    json_object_foreach(x->vocab, k, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= V)
            return sp_err_set(err, "%s: token \"%s\" has id %lld outside the model's vocab_size %d", x->path, k,
                              (long long)id, V);
        x->tokens[id] = k;
        x->types[id] = !x->byte_level && is_byte_token(k) ? TT_BYTE : TT_NORMAL;
    }
    size_t i;
    json_array_foreach(x->maps.added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        const char *content = json_string_value(json_object_get(v, "content"));
        if (!content || id < 0 || id >= V)
            return sp_err_set(err, "%s: added_tokens[%zu] has no content or an id outside vocab_size %d", x->path, i, V);
        x->tokens[id] = content;
        x->types[id] = json_is_true(json_object_get(v, "special")) ? TT_CONTROL : TT_USER;
        /* Gemma-4 renders these markers as text (converter marks them user-defined, docs/GGUF-FORMAT.md §6) */
        static const char *gemma_user[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                                           "<|tool_response>", "<tool_response|>", "<|\"|>"};
        for (size_t g = 0; x->gemma && g < sizeof gemma_user / sizeof gemma_user[0]; g++)
            if (!strcmp(content, gemma_user[g])) x->types[id] = TT_USER;
    }
    x->unk = lookup_id(&x->maps, json_string_value(json_object_get(x->model, "unk_token")));
    if (x->unk >= 0) x->types[x->unk] = TT_UNKNOWN;
    int n_pad = 0;
    for (int t = 0; t < V; t++)
        if (!x->tokens[t]) {
            char tmp[32];
            snprintf(tmp, sizeof tmp, "[PAD%d]", t);
            if (!(x->pads[t] = strdup(tmp))) return tj_oom(x, err);
            x->tokens[t] = x->pads[t];
            x->types[t] = TT_UNUSED;
            n_pad++;
        }
    if (n_pad) sp_log(SP_LOG_INFO, "export: %d token ids without a token padded as [PAD{id}]", n_pad);
    return 0;
}

/* SPM score of merge i ("a b"): -rank for the token it makes, unless an earlier merge made it */
static void tj_merge_score(tj_export *x, size_t i) {
    const char *sp = strchr(x->merges[i], ' ');
    if (!sp) return;
    char joined[1024];
    size_t la = (size_t)(sp - x->merges[i]), lb = strlen(sp + 1);
    if (la + lb >= sizeof joined) return;
    memcpy(joined, x->merges[i], la);
    memcpy(joined + la, sp + 1, lb + 1);
    json_t *id = json_object_get(x->vocab, joined);
    if (json_is_integer(id) && x->scores[json_integer_value(id)] == 0.0f)
        x->scores[json_integer_value(id)] = -(float)(i + 1);
}

/* merges: "a b" strings or [a, b] pairs; the "llama" model gets scores from their ranks */
static int tj_merges(tj_export *x, sp_err *err) {
    json_t *jm = json_object_get(x->model, "merges"), *v;
    size_t i;
    x->n_merges = json_is_array(jm) ? json_array_size(jm) : 0;
    x->merges = calloc(x->n_merges + 1, sizeof *x->merges);
    x->merge_buf = calloc(x->n_merges + 1, sizeof *x->merge_buf);
    if (!x->merges || !x->merge_buf) return tj_oom(x, err);
    json_array_foreach(jm, i, v) {
        if (json_is_string(v)) {
            x->merges[i] = json_string_value(v);
        } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            const char *a = json_string_value(json_array_get(v, 0)), *b = json_string_value(json_array_get(v, 1));
            size_t la = strlen(a), lb = strlen(b);
            if (!(x->merge_buf[i] = malloc(la + lb + 2))) return tj_oom(x, err);
            memcpy(x->merge_buf[i], a, la);
            x->merge_buf[i][la] = ' ';
            memcpy(x->merge_buf[i] + la + 1, b, lb + 1);
            x->merges[i] = x->merge_buf[i];
        } else {
            return sp_err_set(err, "%s: model.merges[%zu] is neither \"a b\" nor [a, b]", x->path, i);
        }
        if (!strcmp(x->ggml_model, "llama")) tj_merge_score(x, i);
    }
    if (x->gemma && !x->byte_level)
        for (int t = 0; t < x->V; t++) x->scores[t] = -1000.0f;
    return 0;
}

/* tokenizer.ggml.model / pre / tokens / token_type / scores / merges */
static int tj_write_vocab(gguf_writer *w, const tj_export *x, const sp_config *c, sp_err *err) {
    if (sp_gguf_writer_set_str(w, "tokenizer.ggml.model", x->ggml_model, err)) return -1;
    if (x->byte_level && sp_gguf_writer_set_str(w, "tokenizer.ggml.pre",
                                                c->arch == SP_ARCH_LLAMA   ? "llama-bpe"
                                                : c->arch == SP_ARCH_QWEN3 ? "qwen2"
                                                                           : "default",
                                                err))
        return -1;
    if (sp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", x->tokens, (size_t)x->V, err) ||
        sp_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, x->types, (size_t)x->V, err))
        return -1;
    if (!x->byte_level &&
        sp_gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, x->scores, (size_t)x->V, err))
        return -1;
    if (strcmp(x->ggml_model, "llama") && x->n_merges &&
        sp_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", x->merges, x->n_merges, err))
        return -1;
    return 0;
}

/* special ids (tokenizer_config.json strings first, then config.json ids), add_bos / add_eos /
 * add_space_prefix and the chat template */
static int tj_write_specials(gguf_writer *w, const tj_export *x, const sp_config *c, const char *dir,
                             const export_gguf_opts *o, sp_err *err) {
    const int V = x->V;
    json_t *tcfg = NULL;
    char path[4096];
    sp_path_join(path, sizeof path, dir, "tokenizer_config.json");
    if (sp_file_exists(path) && !(tcfg = sp_hf_json_load_file(path, 0, err))) return -1;
    int rc = -1, unk = x->unk;
    int bos = lookup_id(&x->maps, token_content(json_object_get(tcfg, "bos_token")));
    int eos = lookup_id(&x->maps, token_content(json_object_get(tcfg, "eos_token")));
    int pad = lookup_id(&x->maps, token_content(json_object_get(tcfg, "pad_token")));
    int unk2 = lookup_id(&x->maps, token_content(json_object_get(tcfg, "unk_token")));
    if (unk < 0) unk = unk2;
    if (bos < 0) bos = c->bos_id;
    if (eos < 0 && c->n_eos > 0) eos = c->eos_ids[0];
    if (pad < 0) pad = c->pad_id;
    static const char *id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    int ids[4] = {bos, eos, unk, pad};
    for (int t = 0; t < 4; t++)
        if (ids[t] >= 0 && ids[t] < V && sp_gguf_writer_set_u32(w, id_keys[t], (uint32_t)ids[t], err)) goto out;
    /* what the tokenizer adds to raw text, so that llama.cpp adds the same (its default for a
     * missing key differs by vocabulary type) */
    json_t *ab = json_object_get(tcfg, "add_bos_token"), *ae = json_object_get(tcfg, "add_eos_token");
    int known = o && o->tok_adds_known;
    int add_bos = known ? o->tok_add_bos : json_is_boolean(ab) ? json_is_true(ab) : c->arch != SP_ARCH_QWEN3;
    int add_eos = known ? o->tok_add_eos : json_is_true(ae);
    if (sp_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos, err) ||
        sp_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", add_eos, err))
        goto out;
    /* gemma4 never prefixes a space; llama.cpp's SPM ("llama") does unless told not to */
    if (!x->byte_level && sp_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix",
                                                  x->gemma ? 0 : adds_space_prefix(x->root), err))
        goto out;
    const char *tmpl = json_string_value(json_object_get(tcfg, "chat_template"));
    char *tmpl_file = NULL;
    sp_path_join(path, sizeof path, dir, "chat_template.jinja");
    if (!tmpl && sp_file_exists(path) && sp_read_file(path, &tmpl_file, NULL, err) == 0) tmpl = tmpl_file;
    int trc = tmpl ? sp_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl, err) : 0;
    free(tmpl_file);
    if (!trc) rc = 0;
out:
    json_decref(tcfg);
    return rc;
}

static int from_tokenizer_json(gguf_writer *w, const sp_config *c, const char *dir, const char *tj_path,
                               const export_gguf_opts *o, sp_err *err) {
    const int V = c->vocab_size;
    tj_export x = {.path = tj_path, .V = V, .unk = -1};
    x.root = sp_hf_json_load_file(tj_path, 0, err);
    if (!x.root) return -1;
    x.tokens = calloc((size_t)V, sizeof *x.tokens);
    x.pads = calloc((size_t)V, sizeof *x.pads);
    x.types = calloc((size_t)V, sizeof *x.types);
    x.scores = calloc((size_t)V, sizeof *x.scores);
    int rc = -1;
    if (!x.tokens || !x.pads || !x.types || !x.scores) {
        tj_oom(&x, err);
        goto out;
    }
    x.model = json_object_get(x.root, "model");
    const char *mtype = json_string_value(json_object_get(x.model, "type"));
    x.vocab = json_object_get(x.model, "vocab");
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(x.vocab)) {
        sp_err_set(err, "%s: model.type \"%s\" is not supported for GGUF export (BPE only)", tj_path,
                   mtype ? mtype : "(none)");
        goto out;
    }
    x.maps = (tok_maps){x.vocab, json_object_get(x.root, "added_tokens")};
    x.byte_level = has_type(json_object_get(x.root, "pre_tokenizer"), "ByteLevel") ||
                   has_type(json_object_get(x.root, "decoder"), "ByteLevel");
    x.gemma = c->arch == SP_ARCH_GEMMA4;
    x.ggml_model = x.byte_level ? "gpt2" : x.gemma ? "gemma4" : "llama";
    if (!tj_tokens(&x, err) && !tj_merges(&x, err) && !tj_write_vocab(w, &x, c, err) &&
        !tj_write_specials(w, &x, c, dir, o, err))
        rc = 0;
out:
    for (int t = 0; x.pads && t < V; t++) free(x.pads[t]);
    for (size_t m = 0; x.merge_buf && m < x.n_merges; m++) free(x.merge_buf[m]);
    free(x.pads);
    free(x.tokens);
    free(x.types);
    free(x.scores);
    free(x.merges);
    free(x.merge_buf);
    json_decref(x.root);
    return rc;
}

int sp_export_tokenizer_keys(gguf_writer *w, const sp_config *cfg, const char *dir, const export_gguf_opts *o,
                          sp_err *err) {
    if (o->tokenizer_gguf) return copy_gguf_tokenizer(w, o->tokenizer_gguf, cfg->vocab_size, err);
    char path[4096];
    sp_path_join(path, sizeof path, dir, "tokenizer.json");
    if (sp_file_exists(path)) return from_tokenizer_json(w, cfg, dir, path, o, err);
    if (o->no_tokenizer) {
        sp_log(SP_LOG_WARN, "export: %s has no tokenizer.json: writing no tokenizer keys (llama.cpp will not load "
                            "this file)", dir);
        return 0;
    }
    return sp_err_set(err, "%s has no tokenizer.json: pass --tokenizer-gguf FILE to copy a GGUF's vocabulary, or "
                           "--no-tokenizer to write the weights without one",
                      dir);
}
