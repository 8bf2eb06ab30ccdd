/* session_cli.c — flags into an engine session, prompts into tokens (see session_cli.h). */
#include "session_cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "core/core.h"
#include "core/cpu.h"
#include "model/model.h"

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

int cli_model_path_check(const char *cmd, const char *path) {
    struct stat st;
    if (path && stat(path, &st) != 0)
        return cli_error(cmd, "-m %s: no such file or directory (-m takes a model directory or a FILE.gguf)", path), -1;
    return 0;
}

int cli_session_open(const char *cmd, const char *model, int threads, const cli_spec_opts *so,
                     const cli_tree_opts *tree, const char *chat_tmpl, int drafter_ctx, sp_session **out) {
    *out = NULL;
    if (cli_model_path_check(cmd, model)) return -1;
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
    if (cli_log_verbose && sp_log_level < SP_LOG_DEBUG) sp_log_level = SP_LOG_DEBUG;
    double t0 = sp_time_ms();
    if (sp_session_open(out, &p, &err)) return cli_error(cmd, "%s", err.msg), -1;
    cli_session_summary(*out, so, sp_time_ms() - t0);
    return 0;
}

int cli_log_verbose, cli_log_quiet;

int cli_log_opt_rows(cli_opt *rows) {
    rows[0] = (cli_opt){"-v", "--verbose", CLI_FLAG, &cli_log_verbose, NULL,
                        "a longer model summary on load (every tensor type, RoPE, special ids)"};
    rows[1] = (cli_opt){"-q", "--quiet", CLI_FLAG, &cli_log_quiet, NULL, "no model summary on load"};
    rows[2] = (cli_opt){NULL, "--log-disable", CLI_FLAG, &cli_log_quiet, NULL, "same as --quiet"};
    return 3;
}

/* "1.23 B" / "45.6 M" / "789 K" */
static void human_count(char *buf, size_t cap, double v) {
    if (v >= 1e9) snprintf(buf, cap, "%.2f B", v / 1e9);
    else if (v >= 1e6) snprintf(buf, cap, "%.2f M", v / 1e6);
    else snprintf(buf, cap, "%.1f K", v / 1e3);
}

/* -v: the rest of the configuration and every type's tensors and bytes */
static void summary_verbose(const sp_config *c, const sp_model_census *k) {
    fprintf(stderr, "  heads %d (kv %d), head dim %d, ffn %d, rope theta %g, rms eps %g, tied embeddings %s\n",
            c->n_heads, c->n_kv_heads, c->head_dim, c->ffn_dim, c->rope.theta, c->rms_eps,
            c->tie_embeddings ? "yes" : "no");
    fprintf(stderr, "  bos %d, eos", c->bos_id);
    for (int i = 0; i < c->n_eos; i++) fprintf(stderr, " %d", c->eos_ids[i]);
    fprintf(stderr, "%s\n", c->sliding_window ? "" : ", no sliding window");
    for (int i = 0; i < k->n_types; i++)
        fprintf(stderr, "  type %-6s %4d tensors, %12lld params, %8.2f MiB\n", k->types[i].name, k->types[i].tensors,
                (long long)k->types[i].params, k->types[i].bytes / 1048576.0);
}

void cli_session_summary(sp_session *s, const cli_spec_opts *so, double load_ms) {
    if (cli_log_quiet) return;
    const sp_model *m = sp_session_model(s);
    const sp_config *c = sp_model_config(m);
    sp_model_census k;
    sp_model_census_of(m, &k);
    char params[32], types[256] = "";
    human_count(params, sizeof params, (double)k.params);
    size_t n = 0;
    for (int i = 0; i < k.n_types && n < sizeof types; i++)
        n += (size_t)snprintf(types + n, sizeof types - n, "%s%s x%d", i ? ", " : "", k.types[i].name,
                              k.types[i].tensors);
    fprintf(stderr, "model: %s (%s, %s)\n", sp_session_model_dir(s), sp_arch_name(c->arch), k.format);
    fprintf(stderr, "  %s params, %.2f MiB | types %s\n", params, k.bytes / 1048576.0, types);
    fprintf(stderr, "  %d layers, hidden %d, vocab %d, context %d | loaded in %.0f ms | cpu %s, %d threads\n",
            c->n_layers, c->hidden_size, c->vocab_size, c->max_pos, load_ms, sp_cpu_tier_name(sp_cpu_level()),
            sp_model_threads(m));
    if (cli_log_verbose) summary_verbose(c, &k);
    const char *kind = sp_session_drafter_kind(s);
    if (strcmp(kind, "none"))
        fprintf(stderr, "  drafter: %s%s%s\n", kind, so && so->draft_dir ? " from " : "",
                so && so->draft_dir ? so->draft_dir : "");
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
