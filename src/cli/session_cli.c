/* session_cli.c — flags into an engine session, prompts into tokens (see session_cli.h). */
#include "session_cli.h"

#include <jansson.h>
#include <string.h>

#include "args.h"
#include "core/core.h"

sp_drafter_opts cli_spec_drafter_opts(const cli_spec_opts *so) {
    sp_drafter_opts o = sp_drafter_opts_default();
    o.kind = so->spec;
    o.dir = so->draft_dir;
    o.draft_max = so->draft_max;
    o.draft_min = so->draft_min;
    o.ngram_min = so->ngram_min;
    o.ngram_max = so->ngram_max;
    o.draft_temp = so->draft_temp;
    o.conf_threshold = so->conf_threshold;
    o.schedule = so->schedule;
    o.bf16_dot = so->bf16_dot;
    return o;
}

int cli_session_open(const char *cmd, const char *model, int threads, const cli_spec_opts *so,
                     const cli_tree_opts *tree, const char *chat_tmpl, int drafter_ctx, sp_session **out) {
    *out = NULL;
    sp_session_params p = sp_session_params_default();
    p.model = model;
    p.n_threads = threads;
    p.drafter = cli_spec_drafter_opts(so);
    p.policy = so->always ? SP_SPEC_POLICY_ALWAYS : SP_SPEC_POLICY_ADAPTIVE;
    p.chat_template = chat_tmpl;
    p.drafter_ctx = drafter_ctx;
    if (cli_kv_types(cmd, so, &p.kv_k, &p.kv_v)) return -1;
    if (tree) {
        sp_spec_params sp = sp_spec_params_default();
        sp.draft_max = so->draft_max;
        if (cli_tree_apply(cmd, tree, &sp)) return -1;
        p.tree = sp.tree;
    }
    sp_err err = {{0}};
    if (sp_session_open(out, &p, &err)) return cli_error(cmd, "%s", err.msg), -1;
    return 0;
}

int cli_session_chat_turn(const char *cmd, sp_session *s, const char *system, const char *text, const char *kwargs,
                          int32_t **ids, int *n) {
    *ids = NULL, *n = 0;
    json_t *vars, *msgs = json_array();
    sp_err err = {{0}};
    if (cli_chat_vars(cmd, kwargs, &vars)) {
        json_decref(msgs);
        return -1;
    }
    int rc = -1;
    if (!msgs || (system && cli_chat_push(msgs, "system", system)) || cli_chat_push(msgs, "user", text))
        cli_error(cmd, "the prompt is not valid UTF-8 text");
    else if (sp_session_chat_tokens(s, msgs, vars, ids, n, &err))
        cli_error(cmd, "%s", err.msg);
    else
        rc = 0;
    json_decref(msgs);
    json_decref(vars);
    return rc;
}

int cli_session_prompt(const char *cmd, sp_session *s, const cli_chat_opts *co, int chat, const char *text,
                       const char *ids_str, int32_t **ids, int *n) {
    *ids = NULL, *n = 0;
    if (text && ids_str) return cli_error(cmd, "give either -p TEXT or --prompt-ids, not both"), -1;
    if (ids_str) return cli_parse_ids(cmd, "--prompt-ids", ids_str, ids, n);
    if (!text) return cli_error(cmd, "no prompt: give -p TEXT or --prompt-ids 1,2,3"), -1;
    if (cli_chat_wanted(co, chat, text)) return cli_session_chat_turn(cmd, s, co->system, text, co->kwargs, ids, n);
    sp_err err = {{0}};
    if (!sp_session_tokenizer(s))
        return cli_error(cmd, "-p needs a tokenizer, and %s has none (no tokenizer.json / GGUF vocabulary): use --prompt-ids",
                         sp_session_model_dir(s)), -1;
    if (sp_session_text_tokens(s, text, ids, n, &err)) return cli_error(cmd, "%s", err.msg), -1;
    return 0;
}
