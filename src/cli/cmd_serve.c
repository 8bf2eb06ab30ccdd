/* cmd_serve.c — `specula serve`: the OpenAI-compatible HTTP server (src/server/). Opens the engine
 * session (by default the embedded pair under models/default/, speculating with its DSpark
 * drafter; else the --spec flags), hands it to the server, serves until SIGINT / SIGTERM, then
 * stops accepting, cancels what is in flight and exits 0. */
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "core/core.h"
#include "server/server.h"
#include "session_cli.h"
#include "spec_cli.h"
#include "synth_cli.h"

static const char *CMD = "serve";

typedef struct {
    const char *dir, *host, *api_key, *name, *chat_tpl, *tpl_kwargs;
    int threads, port, parallel, ctx, max_queue, timeout, n_predict, verbose, spec_max_slots;
    int read_timeout, max_conns, max_conn_ip; /* the connection guard (src/server/conn.c) */
    cli_spec_opts so;
    cli_tree_opts to;
    sp_tree_shape tree; /* --tree: the shape, draft_max levels */
    cli_synth_opts sy;  /* --spec-synthetic: benchmark only */
    sp_synth synth;     /* synth.n > 0: synthetic acceptance */
    char root[4096], tdef[4300], ddef[4400];
} serve_opts;

/* The flags. Returns 0 to run, 1 when --help was printed, -1 on a usage error (printed). */
static int serve_parse(serve_opts *o, int argc, char **argv) {
    cli_opt opts[CLI_OPTS_MAX] = {
        {"-m", "--model", CLI_STR, &o->dir, "DIR", "target model (default: the embedded pair, models/default/)"},
        {NULL, "--host", CLI_STR, &o->host, "ADDR",
         "address or host name to listen on: IPv4, IPv6 (::1) or a name (localhost) (default 127.0.0.1)"},
        {NULL, "--port", CLI_INT, &o->port, "N", "TCP port (default 8080; 0 = any free port)"},
        {"-np", "--parallel", CLI_INT, &o->parallel, "N", "requests decoded at once, one slot each (default 4)"},
        {"-c", "--ctx-size", CLI_INT, &o->ctx, "N",
         "KV cache positions in all, split evenly across the -np slots as llama-server does "
         "(default 4096 per slot; 0 = the model's context)"},
        {"-n", "--n-predict", CLI_INT, &o->n_predict, "N", "max_tokens when a request gives none (default 256)"},
        {NULL, "--api-key", CLI_STR, &o->api_key, "KEY", "require Authorization: Bearer KEY"},
        {NULL, "--max-queue", CLI_INT, &o->max_queue, "N", "requests waiting for a slot before 503 (default 64)"},
        {NULL, "--timeout", CLI_INT, &o->timeout, "S", "idle connection timeout in seconds (default 60)"},
        {NULL, "--read-timeout", CLI_INT, &o->read_timeout, "S",
         "a request's line, headers and body must arrive within S seconds, however slowly they trickle "
         "(default 30)"},
        {NULL, "--max-connections", CLI_INT, &o->max_conns, "N",
         "connections at once (default 512); near the limit the oldest unfinished requests are dropped"},
        {NULL, "--max-conn-per-ip", CLI_INT, &o->max_conn_ip, "N", "connections from one client address (default 128; 0: no cap)"},
        {NULL, "--alias", CLI_STR, &o->name, "NAME", "model id in responses (default: the directory name)"},
        {"-t", "--threads", CLI_INT, &o->threads, "N", "threads (default: all cores)"},
        {"-v", "--verbose", CLI_FLAG, &o->verbose, NULL, "log one line per request (on by default; -v adds debug lines)"},
        {NULL, "--chat-template", CLI_STR, &o->chat_tpl, "NAME|FILE",
         "chat template: a Jinja file or gemma4 | gemma3 | qwen3 | chatml | llama3 (default: the model's)"},
        {NULL, "--chat-template-kwargs", CLI_STR, &o->tpl_kwargs, "JSON",
         "template variables for every chat request, e.g. '{\"enable_thinking\": false}' "
         "(a request's chat_template_kwargs add to them)"},
        {NULL, "--spec-max-slots", CLI_INT, &o->spec_max_slots, "N",
         "greedy requests: -1 = drafts per step chosen by measured cost and acceptance (default); "
         "0 = always --draft-max; N = --draft-max while <= N slots are busy, else none"},
    };
    int n_opts = 0; /* the rows above; the speculative and tree rows follow them */
    while (n_opts < CLI_OPTS_MAX && opts[n_opts].long_name) n_opts++;
    n_opts += cli_spec_opt_rows(opts + n_opts, &o->so);
    n_opts += cli_tree_opt_rows(opts + n_opts, &o->to);
    n_opts += cli_synth_opt_rows(opts + n_opts, &o->sy);
    int rc = cli_parse(CMD, "[-m DIR] [--spec KIND -md DRAFTER] [--host ADDR] [--port N] [--parallel N] [options]", opts,
                       n_opts, argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 1 : -1;
    return 0;
}

/* The embedded pair when no -m is given (speculating as `specula run` does), the defaults, and
 * the checks. Prints errors; returns 0 / -1. */
static int serve_defaults(serve_opts *o, int default_draft_max) {
    if (!o->dir) {
        snprintf(o->tdef, sizeof o->tdef, "%s/target", cli_default_root(o->root, sizeof o->root));
        o->dir = o->tdef;
        if (!o->so.spec && !o->so.draft_dir) {
            snprintf(o->ddef, sizeof o->ddef, "%s/drafter", o->root);
            o->so.spec = "dspark";
            o->so.draft_dir = o->ddef;
            if (o->so.draft_max == INT_MIN) o->so.draft_max = 7;
        } else if (!o->so.draft_dir && o->so.spec && !strncmp(o->so.spec, "dspark", 6)) {
            /* dspark or dspark+suffix without -md: the embedded drafter (a DSpark checkpoint) */
            snprintf(o->ddef, sizeof o->ddef, "%s/drafter", o->root);
            o->so.draft_dir = o->ddef;
        }
        if (!o->name) o->name = "specula-default";
    }
    if (o->so.draft_max == INT_MIN) o->so.draft_max = default_draft_max;
    if (cli_spec_resolve(CMD, &o->so, "none")) return -1;
    if (o->timeout < 1) return cli_error(CMD, "--timeout must be >= 1"), -1;
    if (o->n_predict < 1) return cli_error(CMD, "-n must be >= 1"), -1;
    if (o->parallel < 1 || o->parallel > 64) return cli_error(CMD, "-np %d out of range 1..64", o->parallel), -1;
    if (o->ctx == -1) o->ctx = 4096 * o->parallel; /* -c not given */
    if (o->ctx < 0 || o->ctx > CLI_MAX_TOKENS) return cli_error(CMD, "-c must be in [0, %d], got %d", CLI_MAX_TOKENS, o->ctx), -1;
    if (o->ctx > 0 && o->ctx / o->parallel < 8)
        return cli_error(CMD, "-c %d split across %d slots leaves %d positions per slot; give at least %d", o->ctx,
                         o->parallel, o->ctx / o->parallel, 8 * o->parallel), -1;
    if (o->max_queue < 0 || o->max_queue > SRV_MAX_QUEUE)
        return cli_error(CMD, "--max-queue must be in [0, %d], got %d", SRV_MAX_QUEUE, o->max_queue), -1;
    if (o->so.draft_max < 1 || o->so.draft_max > SP_SPEC_MAX_G)
        return cli_error(CMD, "--draft-max %d out of range 1..%d", o->so.draft_max, SP_SPEC_MAX_G), -1;
    sp_spec_params tp = sp_spec_params_default();
    tp.draft_max = o->so.draft_max;
    if (cli_tree_apply(CMD, &o->to, &tp)) return -1;
    o->tree = tp.tree;
    int n_synth = 0;
    if (cli_synth_resolve(CMD, &o->sy, &o->synth, 1, &n_synth)) return -1;
    if (n_synth && !strcmp(o->so.spec, "none")) return cli_error(CMD, "--spec-synthetic needs a drafter (--spec)"), -1;
    if (n_synth && o->tree.nodes > 0) return cli_error(CMD, "--spec-synthetic works on chains, not --tree"), -1;
    if (!o->name) {
        const char *slash = strrchr(o->dir, '/');
        o->name = slash && slash[1] ? slash + 1 : o->dir;
    }
    return 0;
}

static srv_opts server_opts(const serve_opts *o) {
    srv_opts so = sp_srv_opts_default();
    so.host = o->host;
    so.port = o->port;
    so.parallel = o->parallel;
    so.ctx = o->ctx / o->parallel; /* 0: the model's context, split by the server */
    so.chat_template_kwargs = o->tpl_kwargs;
    so.api_key = o->api_key;
    so.max_queue = o->max_queue;
    so.timeout_s = o->timeout;
    so.read_timeout_s = o->read_timeout;
    so.max_connections = o->max_conns;
    so.max_conn_per_ip = o->max_conn_ip;
    so.n_predict = o->n_predict;
    so.model_name = o->name;
    so.spec_name = o->so.spec;
    so.draft_max = o->so.draft_max;
    so.draft_min = o->so.draft_min;
    so.spec_max_slots = o->spec_max_slots;
    so.tree = o->tree;
    so.synth = o->synth.n > 0 ? &o->synth : NULL;
    return so;
}

/* Listen, load the session, serve until SIGINT / SIGTERM (blocked in every thread, taken by
 * sigwait). The exit status. */
static int serve(serve_opts *o, sigset_t *sigs) {
    srv_opts so = server_opts(o);
    sp_err err = {{0}};
    srv *s = NULL;
    if (sp_srv_start(&s, &so, &err)) return cli_error(CMD, "%s", err.msg);
    int v6 = strchr(o->host, ':') != NULL;
    fprintf(stderr, "specula serve: listening on http://%s%s%s:%d (loading %s)\n", v6 ? "[" : "", o->host, v6 ? "]" : "",
            sp_srv_port(s), o->dir);
    if (strcmp(o->so.spec, "none"))
        fprintf(stderr, "specula serve: speculating with %s, up to %d drafts per round\n", o->so.spec, o->so.draft_max);
    if (so.synth) cli_synth_banner(stderr, "specula serve", so.synth);
    sp_session *ss = NULL;
    int rc = 2;
    if (!cli_session_open(CMD, o->dir, o->threads, &o->so, NULL, o->chat_tpl, so.ctx, &ss)) {
        if (sp_srv_set_session(s, ss, &err)) {
            cli_error(CMD, "%s", err.msg);
        } else {
            int per_slot = sp_srv_slot_ctx(s);
            fprintf(stderr, "specula serve: ready: model %s, spec %s%s, %d slots of %d positions (-c %d), port %d\n",
                    o->name, o->so.spec, so.synth ? " (SYNTHETIC acceptance, not lossless)" : "", o->parallel, per_slot,
                    per_slot * o->parallel, sp_srv_port(s));
            int sig = 0;
            sigwait(sigs, &sig);
            fprintf(stderr, "specula serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            rc = 0;
        }
    }
    sp_srv_stop(s);
    sp_session_free(ss);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .ctx = -1, .max_queue = 64, .timeout = 60,
                    .n_predict = 256, .spec_max_slots = -1, .read_timeout = 30, .max_conns = 512, .max_conn_ip = 128,
                    .so = CLI_SPEC_OPTS_DEFAULT,
                    .to = CLI_TREE_OPTS_DEFAULT};
    const int default_draft_max = o.so.draft_max;
    o.so.draft_max = INT_MIN; /* still INT_MIN after parsing: --draft-max not given */
    int rc = serve_parse(&o, argc, argv);
    if (rc) return rc > 0 ? 0 : 2;
    if (serve_defaults(&o, default_draft_max)) return 2;
    sp_log_level = o.verbose ? SP_LOG_DEBUG : SP_LOG_INFO;
    cli_log_verbose = o.verbose;
    /* one thread per connection: a few malloc arenas are plenty, and keep the heap from spreading */
    mallopt(M_ARENA_MAX, 4);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return serve(&o, &sigs);
}
