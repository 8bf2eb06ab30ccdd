/* native.c — llama-server's own routes and formats beside the OpenAI ones: POST /completion
 * (its body and its stream: {"content", "stop", ...} events, the last with "stop": true and
 * the timings, no [DONE]), GET /props (the server's settings), GET /slots (read-only: each
 * slot's size and whether it is busy), POST /apply-template (a chat body rendered with the
 * model's template, not generated), /tokenize's with_pieces, and the chat template variables
 * (--chat-template-kwargs under a request's chat_template_kwargs). It does not implement
 * llama-server's slot save / restore / erase or its POST /props. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "server/respond.h"
#include "server/tools.h"
#include "specula.h"

int sp_srv_chat_vars(srv *s, const char *req_kwargs, json_t **vars, srv_error *e) {
    *vars = s->tmpl_vars ? json_deep_copy(s->tmpl_vars) : NULL;
    if (!req_kwargs) return 0;
    json_t *r = json_loads(req_kwargs, 0, NULL);
    if (!json_is_object(r)) {
        json_decref(r);
        json_decref(*vars);
        *vars = NULL;
        return sp_srv_error_set(e, 400, "invalid_request_error", NULL, "chat_template_kwargs",
                                "'chat_template_kwargs' must be an object");
    }
    if (!*vars) {
        *vars = r;
        return 0;
    }
    json_object_update(*vars, r); /* the request's values win */
    json_decref(r);
    return 0;
}

char *sp_srv_props_json(srv *s) {
    json_t *params = json_pack("{s:i, s:f, s:i, s:f, s:f, s:f}", "n_predict", s->o.n_predict, "temperature", 1.0,
                               "top_k", 0, "top_p", 1.0, "min_p", 0.0, "repeat_penalty", 1.0);
    json_t *o = json_pack("{s:{s:i, s:o}, s:i, s:s, s:s, s:{s:b, s:b}, s:s, s:s, s:i, s:s}", "default_generation_settings",
                          "n_ctx", s->o.ctx, "params", params, "total_slots", s->o.parallel, "model_alias",
                          s->o.model_name, "model_path", s->o.model_name, "modalities", "vision", 0, "audio", 0,
                          "chat_template", s->chat ? sp_chat_template_source(s->chat) : "", "build_info",
                          "specula " SPECULA_VERSION, "n_ctx", s->o.ctx * s->o.parallel, "speculative",
                          s->o.spec_name);
    if (o && s->o.synth) { /* synthetic acceptance: benchmark only (decode/spec.h) */
        json_t *pa = json_array();
        for (int i = 0; i < s->o.synth->n; i++) json_array_append_new(pa, json_real(s->o.synth->p[i]));
        json_object_set_new(o, "synthetic_acceptance", pa);
    }
    if (o) json_object_set_new(o, "lossless", json_boolean(!s->o.synth));
    char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    return txt;
}

char *sp_srv_slots_json(srv *s) {
    json_t *a = json_array();
    for (int i = 0; a && i < s->o.parallel; i++) {
        srv_job *j = s->slot_job ? s->slot_job[i] : NULL;
        json_t *sl = json_pack("{s:i, s:i, s:b, s:i, s:s}", "id", i, "n_ctx", s->o.ctx, "is_processing", j != NULL,
                               "id_task", j ? (int)j->id : -1, "speculative", s->o.spec_name);
        if (j) {
            json_object_set_new(sl, "n_prompt_tokens", json_integer(j->n_prompt));
            json_object_set_new(sl, "n_decoded", json_integer(j->n_toks));
        }
        json_array_append_new(a, sl);
    }
    char *txt = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return txt;
}

char *sp_srv_apply_template(srv *s, const char *body, size_t n, srv_error *e) {
    srv_request r;
    if (sp_srv_request_parse(SRV_ROUTE_APPLY_TEMPLATE, body, n, &r, e)) return NULL;
    json_t *vars = NULL, *msgs = NULL;
    char *text = NULL, *txt = NULL;
    sp_err err = {{0}};
    if (!s->chat) {
        sp_srv_error_set(e, 400, "invalid_request_error", NULL, "messages", "this server's model has no chat template");
    } else if (!sp_srv_chat_vars(s, r.tmpl_kwargs, &vars, e) &&
               !sp_srv_tools_render_input(s->chat, &r, vars, &msgs, &vars, e)) {
        pthread_mutex_lock(&s->chat_mu);
        int rc = sp_chat_render(s->chat, msgs, 1, vars, &text, &err);
        pthread_mutex_unlock(&s->chat_mu);
        if (rc) {
            sp_srv_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", err.msg);
        } else {
            json_t *o = json_pack("{s:s}", "prompt", text);
            txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
            if (!txt) sp_srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    json_decref(vars), json_decref(msgs);
    free(text);
    sp_srv_request_free(&r);
    return txt;
}

json_t *sp_srv_token_pieces(srv *s, const int32_t *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        char *t = NULL;
        json_t *piece = NULL;
        if (!sp_tok_decode(s->tok, &ids[i], 1, &t, NULL)) piece = json_string(t); /* NULL: not UTF-8 */
        if (!piece) {
            piece = json_array();
            for (size_t k = 0; t && t[k]; k++) json_array_append_new(piece, json_integer((unsigned char)t[k]));
        }
        free(t);
        json_array_append_new(a, json_pack("{s:i, s:o}", "id", ids[i], "piece", piece));
    }
    return a;
}

/* llama-server's stop_type: "eos", "word" (a stop string), "limit" (n_predict or the context) */
static const char *stop_type(const srv_job *j) {
    if (!j->finish || !strcmp(j->finish, "length")) return "limit";
    if (j->stopped) return "word";
    return !strcmp(j->finish, "stop") ? "eos" : "none";
}

/* the fields of a finished /completion beside its content */
static void native_close(srv *s, srv_job *j, json_t *o) {
    json_t *toks = json_array();
    for (int i = 0; j->req.return_tokens && i < j->n_toks; i++) json_array_append_new(toks, json_integer(j->toks[i]));
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "id_slot", json_integer(-1));
    json_object_set_new(o, "model", json_string(s->o.model_name));
    json_object_set_new(o, "tokens_predicted", json_integer(j->n_toks));
    json_object_set_new(o, "tokens_evaluated", json_integer(j->n_prompt));
    json_object_set_new(o, "tokens_cached", json_integer(0));
    json_object_set_new(o, "truncated", json_false());
    json_object_set_new(o, "stop_type", json_string(stop_type(j)));
    json_object_set_new(o, "stopping_word", json_string(""));
    json_object_set_new(o, "timings", sp_srv_timings_json(j));
}

char *sp_srv_native_final(srv *s, srv_job *j) {
    json_t *o = json_pack("{s:s%, s:b}", "content", j->text.p ? j->text.p : "", j->text.n, "stop", 1);
    if (!o) return NULL;
    native_close(s, j, o);
    char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    return txt;
}

int sp_srv_native_chunk(srv *s, srv_job *j, size_t from, size_t to, int final, srv_buf *out) {
    const char *t = j->text.p ? j->text.p + from : "";
    json_t *o = json_pack("{s:s%, s:b, s:i}", "content", t, to - from, "stop", final, "id_slot", -1);
    if (!o) return -1;
    if (final) native_close(s, j, o);
    char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!txt) return -1;
    int rc = sp_srv_buf_printf(out, "data: %s\n\n", txt);
    free(txt);
    return rc;
}
