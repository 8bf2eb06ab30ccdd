/* cmd_serve.c — `specula serve`: the OpenAI-compatible HTTP server (src/server/). Loads the
 * target (by default the embedded pair under models/default/, speculating with its DSpark
 * drafter), builds each request's drafter from the --spec flags, serves until SIGINT / SIGTERM,
 * then stops accepting, cancels what is in flight and exits 0. */
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "server/server.h"
#include "spec_cli.h"
#include "spec_cli_dflash.h"
#include "drafters/assistant.h"
#include "drafters/dflash.h"
#include "drafters/eagle3.h"

static const char *CMD = "serve";

typedef struct {
    cli_spec_opts so;
    sp_model *target, *draft_model;
    const char *target_dir;
    sp_drafter *proto; /* dflash / dspark: the loaded checkpoint every request's drafter shares */
} drafter_ctx;

/* one request's drafter, for its sampling params (the draft model and a DFlash / DSpark checkpoint
 * are loaded once and shared: the scheduler steps drafters from one thread) */
static sp_drafter *make_drafter(void *ctx, const sp_sample_params *sample, int max_ctx, sp_err *err) {
    drafter_ctx *c = ctx;
    const cli_spec_opts *o = &c->so;
    sp_sample_params ds = *sample;
    if (o->draft_temp > 0) ds.temperature = o->draft_temp;
    if (!strcmp(o->spec, "ngram")) return sp_drafter_ngram(o->ngram_min, o->ngram_max, err);
    if (!strcmp(o->spec, "draft"))
        return sp_drafter_draft_model(c->draft_model, c->target, o->draft_dir, c->target_dir, max_ctx, &ds, err);
    if (!strcmp(o->spec, "assistant")) return sp_drafter_assistant(o->draft_dir, c->target, &ds, err);
    if (c->proto) return sp_dflash_clone(c->proto, &ds, err);
    if (!strcmp(o->spec, "eagle3")) return sp_drafter_eagle3(o->draft_dir, c->target, &ds, o->draft_max, err);
    return cli_make_dflash(o, c->target, c->target_dir, &ds, err);
}

int cmd_serve(int argc, char **argv) {
    const char *dir = NULL, *host = "127.0.0.1", *api_key = NULL, *name = NULL, *chat_tpl = NULL;
    int threads = 0, port = 8080, parallel = 4, ctx = 4096, max_queue = 64, timeout = 60, n_predict = 256;
    int verbose = 0, spec_max_slots = -1;
    drafter_ctx dc = {.so = CLI_SPEC_OPTS_DEFAULT};
    cli_tree_opts to = CLI_TREE_OPTS_DEFAULT;
    const int default_draft_max = dc.so.draft_max;
    dc.so.draft_max = INT_MIN; /* still INT_MIN after parsing: --draft-max not given */
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &dir, "DIR", "target model (default: the embedded pair, models/default/)"},
        {NULL, "--host", CLI_STR, &host, "ADDR", "IPv4 address to listen on (default 127.0.0.1)"},
        {NULL, "--port", CLI_INT, &port, "N", "TCP port (default 8080; 0 = any free port)"},
        {"-np", "--parallel", CLI_INT, &parallel, "N", "requests decoded at once, one slot each (default 4)"},
        {"-c", "--ctx-size", CLI_INT, &ctx, "N", "KV cache positions per slot (default 4096)"},
        {"-n", "--n-predict", CLI_INT, &n_predict, "N", "max_tokens when a request gives none (default 256)"},
        {NULL, "--api-key", CLI_STR, &api_key, "KEY", "require Authorization: Bearer KEY"},
        {NULL, "--max-queue", CLI_INT, &max_queue, "N", "requests waiting for a slot before 503 (default 64)"},
        {NULL, "--timeout", CLI_INT, &timeout, "S", "idle connection timeout in seconds (default 60)"},
        {NULL, "--alias", CLI_STR, &name, "NAME", "model id in responses (default: the directory name)"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {"-v", "--verbose", CLI_FLAG, &verbose, NULL, "log one line per request (on by default; -v adds debug lines)"},
        {NULL, "--chat-template", CLI_STR, &chat_tpl, "NAME|FILE",
         "chat template: a Jinja file or gemma4 | gemma3 | qwen3 | chatml | llama3 (default: the model's)"},
        {NULL, "--spec-max-slots", CLI_INT, &spec_max_slots, "N",
         "greedy requests: -1 = drafts per step chosen by measured cost and acceptance (default); "
         "0 = always --draft-max; N = --draft-max while <= N slots are busy, else none"},
    };
    int n_opts = 14;
    n_opts += cli_spec_opt_rows(opts + n_opts, &dc.so);
    n_opts += cli_tree_opt_rows(opts + n_opts, &to);
    int rc = cli_parse(CMD, "[-m DIR] [--spec KIND -md DRAFTER] [--host ADDR] [--port N] [--parallel N] [options]", opts,
                       n_opts, argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    char root[4096], tdef[4300], ddef[4400];
    int embedded = !dir;
    if (!dir) { /* the embedded pair, speculating as `specula run` does */
        snprintf(tdef, sizeof tdef, "%s/target", cli_default_root(root, sizeof root));
        dir = tdef;
        if (!dc.so.spec && !dc.so.draft_dir) {
            snprintf(ddef, sizeof ddef, "%s/drafter", root);
            dc.so.spec = "dspark";
            dc.so.draft_dir = ddef;
            if (dc.so.draft_max == INT_MIN) dc.so.draft_max = 7;
        }
    }
    if (dc.so.draft_max == INT_MIN) dc.so.draft_max = default_draft_max;
    if (cli_spec_resolve(CMD, &dc.so, "none")) return 2;
    if (timeout < 1) return cli_error(CMD, "--timeout must be >= 1");
    if (n_predict < 1) return cli_error(CMD, "-n must be >= 1");
    if (dc.so.draft_max < 1 || dc.so.draft_max > SP_SPEC_MAX_G)
        return cli_error(CMD, "--draft-max %d out of range 1..%d", dc.so.draft_max, SP_SPEC_MAX_G);
    sp_spec_params tp = sp_spec_params_default(); /* --tree: the tree shape, draft_max levels */
    tp.draft_max = dc.so.draft_max;
    if (cli_tree_apply(CMD, &to, &tp)) return 2;
    sp_log_level = verbose ? SP_LOG_DEBUG : SP_LOG_INFO;
    if (!name) {
        const char *slash = strrchr(dir, '/');
        name = slash && slash[1] ? slash + 1 : dir;
        if (embedded) name = "specula-default";
    }

    /* one thread per connection: a few malloc arenas are plenty, and keep the heap from spreading */
    mallopt(M_ARENA_MAX, 4);
    /* SIGINT / SIGTERM are taken by sigwait below; every thread inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_opts so = sp_srv_opts_default();
    so.host = host;
    so.port = port;
    so.parallel = parallel;
    so.ctx = ctx;
    so.api_key = api_key;
    so.max_queue = max_queue;
    so.timeout_s = timeout;
    so.n_predict = n_predict;
    so.model_name = name;
    so.spec_name = dc.so.spec;
    so.draft_max = dc.so.draft_max;
    so.draft_min = dc.so.draft_min;
    so.tree = tp.tree;
    so.spec_max_slots = spec_max_slots;
    so.chat_template = chat_tpl;
    sp_err err = {{0}};
    srv *s = NULL;
    if (sp_srv_start(&s, &so, &err)) return cli_error(CMD, "%s", err.msg);
    fprintf(stderr, "specula serve: listening on http://%s:%d (loading %s)\n", host, sp_srv_port(s), dir);
    if (dc.so.spec && strcmp(dc.so.spec, "none"))
        fprintf(stderr, "specula serve: speculating with %s, up to %d drafts per round\n", dc.so.spec, dc.so.draft_max);

    tok_tokenizer *tok = NULL;
    rc = 2;
    if (sp_model_load(&dc.target, dir, threads, &err) || !(tok = sp_tok_load_model(dir, &err))) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    sp_model_set_bf16_dot(dc.target, dc.so.bf16_dot);
    dc.target_dir = dir;
    if (strcmp(dc.so.spec, "none")) {
        /* build one drafter now so a bad --spec / -md fails at start, not per request */
        sp_sample_params greedy = sp_sample_params_default();
        sp_drafter *probe = NULL;
        if (cli_make_drafter(CMD, &dc.so, dc.target, dir, &greedy, ctx, threads, &dc.draft_model, &probe)) goto done;
        sp_dflash_info info;
        if (sp_dflash_info_get(probe, &info) == 0) dc.proto = probe; /* requests clone it */
        else sp_drafter_free(probe);
        if (strcmp(dc.so.spec, "draft")) {
            sp_model_free(dc.draft_model);
            dc.draft_model = NULL;
        }
        sp_srv_set_drafter(s, make_drafter, &dc);
    }
    if (sp_srv_set_model(s, dc.target, tok, dir, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    fprintf(stderr, "specula serve: ready: model %s, spec %s, %d slots of %d positions, port %d\n", name, dc.so.spec,
            parallel, ctx, sp_srv_port(s));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "specula serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
done:
    sp_srv_stop(s);
    sp_drafter_free(dc.proto);
    sp_tok_free(tok);
    sp_model_free(dc.draft_model);
    sp_model_free(dc.target);
    return rc;
}
