/* regen.c — target hidden states for drafter training (see regen.h). */
#include "train/regen.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "chat/chat.h"
#include "core/progress.h"
#include "decode/generate.h"
#include "tokenizer/tokenizer.h"
#include "train/shards.h"

int sp_tr_eagle3_taps(int *taps, int n_layers) {
    int t[3] = {1, n_layers / 2 - 1, n_layers - 4};
    if (!(t[0] < t[1] && t[1] < t[2])) return 0;
    memcpy(taps, t, sizeof t);
    return 3;
}

int sp_tr_auto_taps(int *taps, int n_layers) {
    int n = 0;
    if (n_layers < 2) return 0;
    int start = 1, end = n_layers - 3 > start ? n_layers - 3 : start;
    for (int i = 0; i < 5; i++) {
        int id = (int)nearbyint(start + i * (double)(end - start) / 4.0);
        if (id > n_layers - 2) id = n_layers - 2;
        if (n == 0 || id > taps[n - 1]) taps[n++] = id;
    }
    return n;
}

/* one parsed record: ids (malloc'd) and the response start */
typedef struct {
    int32_t *ids;
    int n, resp_start;
} record;

static int append_ids(record *r, const int32_t *ids, int n) {
    int32_t *p = realloc(r->ids, sizeof(int32_t) * (r->n + n + 1));
    if (!p) return -1;
    memcpy(p + r->n, ids, sizeof(int32_t) * n);
    r->ids = p;
    r->n += n;
    return 0;
}

static int encode_into(record *r, tok_tokenizer *tok, const char *text, int add_bos, int special, sp_err *err) {
    int32_t *ids = NULL;
    int n = 0;
    if (sp_tok_encode(tok, text, strlen(text), add_bos, special, &ids, &n, err)) return -1;
    int rc = append_ids(r, ids, n);
    free(ids);
    return rc ? sp_err_set(err, "out of memory") : 0;
}

/* Parse one JSON line into a record. With generate, only the prompt is kept (resp_start = n). */
/* a conversation's text with the target's own chat template, loaded at the first use */
typedef struct {
    const char *model_dir;
    tok_tokenizer *tok;
    chat_template *ct;
} chat_src;

static int chat_text(chat_src *cs, const tok_msg *m, int n, int add_generation_prompt, char **out, sp_err *err) {
    *out = NULL;
    if (!cs->ct && !(cs->ct = sp_chat_template_load(cs->model_dir, cs->tok, NULL, err))) return -1;
    return sp_chat_render_msgs(cs->ct, m, n, add_generation_prompt, NULL, out, err);
}

/* {"ids": [...], "resp_start": k}: token ids as they are; with generate, only the prompt */
static int parse_ids_record(record *r, json_t *j, json_t *ids, const char *what, int vocab, int generate,
                            sp_err *err) {
    json_t *rs = json_object_get(j, "resp_start");
    if (!json_is_array(ids) || json_array_size(ids) == 0 || !json_is_integer(rs))
        return sp_err_set(err, "%s: \"ids\" must be a non-empty array of token ids with an integer \"resp_start\"", what);
    int n = (int)json_array_size(ids);
    r->ids = malloc(sizeof(int32_t) * (n + 1));
    if (!r->ids) return sp_err_set(err, "%s: out of memory", what);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab)
            return sp_err_set(err, "%s: ids[%d] is not a token id in [0, %d)", what, i, vocab);
        r->ids[i] = (int32_t)json_integer_value(v);
    }
    r->n = n;
    json_int_t k = json_integer_value(rs);
    if (k < 0 || k > n) return sp_err_set(err, "%s: resp_start %lld outside [0, %d]", what, (long long)k, n);
    r->resp_start = (int)k;
    if (generate) r->n = r->resp_start;
    return 0;
}

/* r = the prompt ids (pt, already encoded into r), then the rest of the conversation full: the
 * ids after the prompt text when full extends it, else the whole with the response starting
 * where the ids stop agreeing */
static int append_conversation(record *r, tok_tokenizer *tok, const char *pt, const char *full, sp_err *err) {
    size_t lp = strlen(pt);
    if (strncmp(full, pt, lp) == 0) /* the conversation extends the prompt text: prompt ids, then the rest */
        return encode_into(r, tok, full + lp, 0, 1, err) ? -1 : 0;
    /* the template renders earlier turns differently once answered: encode the whole and start
     * the response where the ids stop agreeing */
    record w = {0};
    int ok = !encode_into(&w, tok, full, 0, 1, err);
    int common = 0;
    while (ok && common < w.n && common < r->n && w.ids[common] == r->ids[common]) common++;
    free(r->ids);
    *r = w;
    r->resp_start = common;
    return ok ? 0 : -1;
}

/* {"messages": [{"role", "content"}, ...]} rendered with the target's chat template */
static int parse_messages_record(record *r, json_t *msgs, const char *what, chat_src *cs, int generate, sp_err *err) {
    tok_tokenizer *tok = cs->tok;
    size_t nm = json_is_array(msgs) ? json_array_size(msgs) : 0;
    tok_msg *m = calloc(nm ? nm : 1, sizeof(tok_msg));
    int last_user = -1, ok = nm > 0 && m;
    for (size_t i = 0; ok && i < nm; i++) {
        json_t *role = json_object_get(json_array_get(msgs, i), "role");
        json_t *content = json_object_get(json_array_get(msgs, i), "content");
        ok = json_is_string(role) && json_is_string(content);
        if (ok) {
            m[i].role = json_string_value(role);
            m[i].content = json_string_value(content);
            if (strcmp(m[i].role, "assistant") != 0) last_user = (int)i;
        }
    }
    /* prompt = the turns up to the last non-assistant one, with the generation prompt;
     * the record = every turn (unless the response is to be generated) */
    char *pt = NULL, *full = NULL;
    if (!ok || last_user < 0) {
        sp_err_set(err, "%s: \"messages\" must be a non-empty array of {\"role\", \"content\"} strings "
                        "with a non-assistant turn", what);
        ok = 0;
    } else if (!generate && (size_t)last_user + 1 == nm) {
        sp_err_set(err, "%s: the conversation ends with a %s turn and has no assistant reply to train on: "
                        "add --generate N to have the target write the replies", what, m[last_user].role);
        ok = 0;
    } else {
        int whole = !generate && (size_t)last_user + 1 < nm;
        ok = !chat_text(cs, m, last_user + 1, 1, &pt, err) && !encode_into(r, tok, pt, 0, 1, err);
        r->resp_start = r->n;
        if (ok && whole) ok = !chat_text(cs, m, (int)nm, 0, &full, err) && !append_conversation(r, tok, pt, full, err);
    }
    free(full);
    free(pt);
    free(m);
    return ok ? 0 : -1;
}

/* ShareGPT / SpecForge "conversations": [{"from": "human"|"gpt"|"system", "value"} or {"role",
 * "content"}, ...] as a new "messages" array ({"role", "content"}); NULL when a turn is neither */
static json_t *conversations_to_messages(json_t *conv, const char *what, sp_err *err) {
    static const char *const names[][2] = {{"human", "user"}, {"gpt", "assistant"}, {"chatgpt", "assistant"},
                                            {"bing", "assistant"}, {"bard", "assistant"}, {"model", "assistant"}};
    json_t *msgs = json_is_array(conv) ? json_array() : NULL;
    for (size_t i = 0; msgs && i < json_array_size(conv); i++) {
        json_t *t = json_array_get(conv, i);
        json_t *role = json_object_get(t, "from"), *content = json_object_get(t, "value");
        if (!role) role = json_object_get(t, "role");
        if (!content) content = json_object_get(t, "content");
        if (!json_is_string(role) || !json_is_string(content)) {
            json_decref(msgs);
            msgs = NULL;
            break;
        }
        const char *r = json_string_value(role);
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (!strcmp(r, names[k][0])) r = names[k][1];
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", r, "content", content));
    }
    if (!msgs)
        sp_err_set(err, "%s: \"conversations\" must be an array of {\"from\", \"value\"} (ShareGPT) or "
                        "{\"role\", \"content\"} turns", what);
    return msgs;
}

static int parse_record(record *r, const char *line, size_t len, const char *what, chat_src *cs, int vocab,
                        int generate, sp_err *err) {
    tok_tokenizer *tok = cs->tok;
    memset(r, 0, sizeof *r);
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) return sp_err_set(err, "%s: invalid JSON: %s", what, je.text);
    int rc = -1;
    json_t *ids = json_object_get(j, "ids"), *text = json_object_get(j, "text");
    json_t *prompt = json_object_get(j, "prompt"), *msgs = json_object_get(j, "messages");
    json_t *conv = json_object_get(j, "conversations"), *conv_msgs = NULL;
    if (!msgs && conv && !(msgs = conv_msgs = conversations_to_messages(conv, what, err))) goto out;
    if (!json_is_object(j)) {
        sp_err_set(err, "%s: a record must be a JSON object", what);
        goto out;
    } else if (ids) {
        if (parse_ids_record(r, j, ids, what, vocab, generate, err)) goto out;
    } else if (text || prompt || msgs) {
        if (!tok) { sp_err_set(err, "%s: text records need the target's tokenizer.json", what); goto out; }
        if (text) {
            if (!json_is_string(text)) { sp_err_set(err, "%s: \"text\" must be a string", what); goto out; }
            if (encode_into(r, tok, json_string_value(text), 1, 0, err)) goto out;
            r->resp_start = 0;
        } else if (prompt) {
            json_t *resp = json_object_get(j, "response");
            if (!generate && json_is_string(prompt) && !resp) {
                sp_err_set(err, "%s: a \"prompt\" without a \"response\": add --generate N to have the "
                                "target write the responses", what);
                goto out;
            }
            if (!json_is_string(prompt) || (!generate && !json_is_string(resp))) {
                sp_err_set(err, "%s: \"prompt\" and \"response\" must be strings", what);
                goto out;
            }
            if (encode_into(r, tok, json_string_value(prompt), 1, 0, err)) goto out;
            r->resp_start = r->n;
            if (!generate && encode_into(r, tok, json_string_value(resp), 0, 0, err)) goto out;
        } else if (parse_messages_record(r, msgs, what, cs, generate, err)) {
            goto out;
        }
    } else {
        sp_err_set(err, "%s: a record needs one of \"text\", \"prompt\"/\"response\", \"messages\", "
                        "\"conversations\" or \"ids\"", what);
        goto out;
    }
    if (r->n < 1) { sp_err_set(err, "%s: the record has no tokens", what); goto out; }
    rc = 0;
out:
    json_decref(conv_msgs);
    json_decref(j);
    if (rc) { free(r->ids); r->ids = NULL; }
    return rc;
}

/* line offsets of the non-blank lines of text */
typedef struct { size_t off, len; int lineno; } line_ref;

static int split_lines(const char *text, size_t n, line_ref **out, int *count) {
    int cap = 64, k = 0, lineno = 0;
    line_ref *v = malloc(sizeof(line_ref) * cap);
    if (!v) return -1;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && text[e] != '\n') e++;
        lineno++;
        size_t s = i;
        while (s < e && (text[s] == ' ' || text[s] == '\t' || text[s] == '\r')) s++;
        if (s < e) {
            if (k == cap) {
                line_ref *nv = realloc(v, sizeof(line_ref) * (cap *= 2));
                if (!nv) { free(v); return -1; }
                v = nv;
            }
            v[k++] = (line_ref){i, e - i, lineno};
        }
        i = e + 1;
    }
    *out = v;
    *count = k;
    return 0;
}

/* Parse and check every non-blank line of text into recs[n_lines] (calloc'd; the caller frees
 * each record's ids and the array, also on failure); lengths cut to max_len. */
static int parse_all(const char *text, const line_ref *lines, int n_lines, const char *path, chat_src *cs,
                     int vocab, int generate, int max_len, record **out, sp_err *err) {
    record *recs = calloc(n_lines ? n_lines : 1, sizeof(record));
    *out = recs;
    if (!recs) return sp_err_set(err, "out of memory");
    for (int i = 0; i < n_lines; i++) {
        char what[4200];
        snprintf(what, sizeof what, "%s:%d", path, lines[i].lineno);
        if (parse_record(&recs[i], text + lines[i].off, lines[i].len, what, cs, vocab, generate, err)) return -1;
        if (recs[i].n > max_len) recs[i].n = max_len;
        if (recs[i].resp_start > recs[i].n) recs[i].resp_start = recs[i].n;
    }
    return 0;
}

int sp_tr_regen_check_records(const char *text, size_t n, const char *path, const char *model_dir, tok_tokenizer *tok,
                           int vocab, int generate, int *n_records, sp_err *err) {
    line_ref *lines = NULL;
    int n_lines = 0;
    record *recs = NULL;
    if (split_lines(text, n, &lines, &n_lines)) return sp_err_set(err, "%s: out of memory", path);
    chat_src cs = {model_dir, tok, NULL};
    int rc = parse_all(text, lines, n_lines, path, &cs, vocab, generate, TR_REGEN_MAX_TOKENS, &recs, err);
    for (int i = 0; recs && i < n_lines; i++) free(recs[i].ids);
    free(recs);
    free(lines);
    sp_chat_template_free(cs.ct);
    if (!rc && n_records) *n_records = n_lines;
    return rc;
}

/* Target forward over one sequence: hidden [n, H] and taps [n, m·H] as bf16. */
static int run_target(sp_model *m, const int32_t *ids, int n, const int *taps, int nt, uint16_t *hid_bf,
                      uint16_t *ml_bf, float *hid, float *tap, int chunk, sp_err *err) {
    const sp_config *c = sp_model_config(m);
    int H = c->hidden_size;
    sp_kv *kv = sp_kv_create(m, n, chunk, err);
    if (!kv) return -1;
    for (int i = 0; i < n; i += chunk) {
        int T = n - i < chunk ? n - i : chunk;
        sp_forward_out o = {.hidden = hid, .tap_layers = taps, .n_taps = nt, .taps = tap};
        if (sp_model_forward(m, kv, ids + i, T, &o, err)) { sp_kv_free(kv); return -1; }
        for (size_t j = 0; j < (size_t)T * H; j++) hid_bf[(size_t)i * H + j] = sp_f32_to_bf16(hid[j]);
        for (size_t j = 0; j < (size_t)T * nt * H; j++) ml_bf[(size_t)i * nt * H + j] = sp_f32_to_bf16(tap[j]);
    }
    sp_kv_free(kv);
    return 0;
}

/* the tap layers: automatic (n_taps 0), EAGLE-3's three (n_taps < 0) or as listed, checked */
static int resolve_taps(tr_regen_cfg *c, const sp_config *cfg, sp_err *err) {
    if (c->n_taps == 0) c->n_taps = sp_tr_auto_taps(c->taps, cfg->n_layers);
    if (c->n_taps < 0 && (c->n_taps = sp_tr_eagle3_taps(c->taps, cfg->n_layers)) == 0)
        return sp_err_set(err, "--taps eagle3: the target's %d layers give no 3 distinct taps (inputs of 2, N/2, N-3); "
                               "list three layers",
                          cfg->n_layers);
    for (int i = 0; i < c->n_taps; i++) {
        int sentinel = c->taps[i] == cfg->n_layers; /* the post-final-norm hidden (mlx-bun's last tap) */
        if (c->taps[i] < 0 || (c->taps[i] >= cfg->n_layers - 1 && !sentinel) || (i && c->taps[i] <= c->taps[i - 1]))
            return sp_err_set(err, "--taps: layer %d: taps must be strictly increasing layers in [0, %d) (the final "
                                   "layer is not used), optionally ending with %d (the final norm's output)",
                              c->taps[i], cfg->n_layers - 1, cfg->n_layers);
    }
    if (c->n_taps < 1) return sp_err_set(err, "%s: the target has too few layers for taps", c->model_dir);
    return 0;
}

/* one regen run's model, records and scratch */
typedef struct {
    const tr_regen_cfg *c;
    sp_model *m;
    record *recs;
    const line_ref *lines;
    int n_lines, H, nt, chunk;
    float *hid, *tap; /* [chunk, H], [chunk, nt·H]: one forward chunk */
    int32_t *gen;     /* [generate + 1] */
    sp_progress pr;
    double tokens, t0;
} regen_run;

/* generate the responses of records r0..r1 (their lengths size the shard) */
static int generate_responses(regen_run *R, int r0, int r1, sp_err *err) {
    const tr_regen_cfg *c = R->c;
    for (int i = r0; i < r1 && c->generate > 0; i++) {
        record *rec = &R->recs[i];
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = c->generate;
        gp.sample.temperature = c->temp;
        gp.sample.seed = c->seed + (uint64_t)i;
        int room = c->max_len - rec->n;
        if (room < 1) continue;
        if (gp.max_new > room) gp.max_new = room;
        sp_gen_stats gs;
        if (sp_generate(R->m, NULL, rec->ids, rec->n, &gp, R->gen, c->generate + 1, &gs, err))
            return sp_err_wrap(err, "%s:%d: generating", c->data_path, R->lines[i].lineno);
        rec->resp_start = rec->n;
        if (append_ids(rec, R->gen, gs.emitted)) return sp_err_set(err, "out of memory");
    }
    return 0;
}

/* shard s (records r0..r1) into directory sd: the ids, then the target's hidden states and taps */
static int write_shard(regen_run *R, int s, const char *sd, int r0, int r1, sp_err *err) {
    const tr_regen_cfg *c = R->c;
    int H = R->H, nt = R->nt;
    int64_t L = 0;
    for (int i = r0; i < r1; i++) L += R->recs[i].n;
    int32_t *ids = malloc(sizeof(int32_t) * L), *lens = malloc(sizeof(int32_t) * (r1 - r0)),
            *rs = malloc(sizeof(int32_t) * (r1 - r0));
    uint16_t *hid_bf = malloc(sizeof(uint16_t) * L * H);
    uint16_t *ml_bf = malloc(sizeof(uint16_t) * L * nt * H);
    int bad = !ids || !lens || !rs || !hid_bf || !ml_bf;
    if (bad) sp_err_set(err, "out of memory for shard %d (%lld tokens)", s, (long long)L);
    int64_t off = 0;
    for (int i = r0; i < r1 && !bad; i++) {
        const record *rec = &R->recs[i];
        memcpy(ids + off, rec->ids, sizeof(int32_t) * rec->n);
        lens[i - r0] = rec->n;
        rs[i - r0] = rec->resp_start;
        bad = run_target(R->m, rec->ids, rec->n, c->taps, nt, hid_bf + off * H, ml_bf + off * nt * H, R->hid, R->tap,
                         R->chunk, err);
        off += rec->n;
        R->tokens += rec->n;
        if (c->progress) {
            char extra[64];
            snprintf(extra, sizeof extra, "%.0f tok/s", R->tokens / ((sp_time_ms() - R->t0) / 1000 + 1e-9));
            sp_progress_update(&R->pr, i + 1, extra);
        }
    }
    if (!bad) bad = sp_tr_shard_write(sd, r1 - r0, lens, rs, ids, hid_bf, ml_bf, H, nt, c->taps, err);
    free(ids); free(lens); free(rs); free(hid_bf); free(ml_bf);
    return bad ? -1 : 0;
}

/* every shard of this rank: skipped when complete, else generated and written */
static int regen_shards(regen_run *R, int *n_written, int *n_skipped, sp_err *err) {
    const tr_regen_cfg *c = R->c;
    int n_shards = (int)(((int64_t)R->n_lines + c->shard_records - 1) / c->shard_records);
    for (int s = 0; s < n_shards; s++) {
        char sd[4096];
        sp_tr_shard_dir(sd, sizeof sd, c->out_dir, s);
        if (c->dist && s % c->dist->size != c->dist->rank) continue;
        int r0 = s * c->shard_records, r1 = r0 + c->shard_records < R->n_lines ? r0 + c->shard_records : R->n_lines;
        if (sp_tr_shard_complete(sd)) {
            (*n_skipped)++;
            continue;
        }
        if (generate_responses(R, r0, r1, err) || write_shard(R, s, sd, r0, r1, err)) return -1;
        (*n_written)++;
    }
    return 0;
}

int sp_tr_regen_run(const tr_regen_cfg *cin, int *written, int *skipped, sp_err *err) {
    tr_regen_cfg c = *cin;
    if (c.shard_records < 0 || c.shard_records > TR_REGEN_MAX_RECORDS || c.max_len < 0 ||
        c.max_len > TR_REGEN_MAX_TOKENS || c.generate < 0 || c.generate > TR_REGEN_MAX_TOKENS)
        return sp_err_set(err, "--shard-records %d (0..%d), --max-len %d and --generate %d (0..%d): a value is out of range",
                          c.shard_records, TR_REGEN_MAX_RECORDS, c.max_len, c.generate, TR_REGEN_MAX_TOKENS);
    if (!isfinite(c.temp) || c.temp < 0) return sp_err_set(err, "--temp %g must be a finite number >= 0", c.temp);
    if (c.shard_records == 0) c.shard_records = 256;
    if (c.max_len == 0) c.max_len = 4096;
    int n_written = 0, n_skipped = 0, rc = -1;
    char *text = NULL;
    size_t text_n = 0;
    line_ref *lines = NULL;
    tok_tokenizer *tok = NULL;
    chat_src cs = {0};
    regen_run R = {.c = &c, .chunk = 256};
    if (sp_read_file(c.data_path, &text, &text_n, err)) return -1;
    if (split_lines(text, text_n, &lines, &R.n_lines)) { sp_err_set(err, "%s: out of memory", c.data_path); goto out; }
    R.lines = lines;
    if (R.n_lines == 0) { sp_err_set(err, "%s: no record", c.data_path); goto out; }
    if (sp_model_load(&R.m, c.model_dir, c.threads, err)) goto out;
    const sp_config *cfg = sp_model_config(R.m);

    if (sp_tok_model_has_tokenizer(c.model_dir) && !(tok = sp_tok_load_model(c.model_dir, err))) goto out;
    if (resolve_taps(&c, cfg, err)) goto out;
    /* parse and check every record before any work */
    cs = (chat_src){c.model_dir, tok, NULL};
    if (parse_all(text, lines, R.n_lines, c.data_path, &cs, cfg->vocab_size, c.generate, c.max_len, &R.recs, err))
        goto out;
    if (sp_mkdir_p(c.out_dir, err)) goto out;
    R.H = cfg->hidden_size;
    R.nt = c.n_taps;
    R.hid = malloc(sizeof(float) * R.chunk * R.H);
    R.tap = malloc(sizeof(float) * R.chunk * R.nt * R.H);
    R.gen = malloc(sizeof(int32_t) * (c.generate + 1));
    if (!R.hid || !R.tap || !R.gen) { sp_err_set(err, "out of memory"); goto out; }
    if (c.progress) sp_progress_start(&R.pr, "regen", R.n_lines, "rec");
    R.t0 = sp_time_ms();
    if (regen_shards(&R, &n_written, &n_skipped, err)) goto out;
    if (n_written + n_skipped == 0 && (!c.dist || c.dist->size <= 1)) {
        sp_err_set(err, "%s: no shard written for %d records", c.out_dir, R.n_lines);
        goto out;
    }
    if (c.progress) {
        char extra[64];
        snprintf(extra, sizeof extra, "%.0f tok/s, %d shards written, %d skipped",
                 R.tokens / ((sp_time_ms() - R.t0) / 1000 + 1e-9), n_written, n_skipped);
        sp_progress_finish(&R.pr, R.n_lines, extra);
    }
    rc = 0;
out:
    if (written) *written = n_written;
    if (skipped) *skipped = n_skipped;
    for (int i = 0; R.recs && i < R.n_lines; i++) free(R.recs[i].ids);
    free(R.recs); free(lines); free(text); free(R.hid); free(R.tap); free(R.gen);
    sp_chat_template_free(cs.ct);
    sp_tok_free(tok);
    sp_model_free(R.m);
    return rc;
}
