/* cmd_bench_verify.c — `specula bench-verify`: the cost of one target forward over k tokens
 * relative to one decode step, k = 1..16. This curve bounds every drafter's speedup on a CPU:
 * a block of k drafts pays off only if verifying it costs about as much as one step.
 * --tree adds, interleaved with the chains, the tree-masked forward over k rows (a binary tree:
 * row t's parent is (t − 1) / 2; docs/TREE.md), the cost of verifying a token tree of k nodes.
 * --slots N times what a server step does with N busy slots: one batched forward over N
 * sequences of k rows each (sp_model_forward_batch), relative to the N-slot forward of one row
 * each (docs/server-batching.md).
 * On a mixture-of-experts target the table adds the mean number of distinct experts an MoE layer
 * ran for the block (sp_kv_moe_experts): the verify cost follows it rather than k alone
 * (docs/TRANSFORMER.md §5a). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "args.h"
#include "core/core.h"
#include "specula.h"

static const char *CMD = "bench-verify";

/* milliseconds of wall time, or of this process's CPU time (--cpu: with -t 1 that is the work
 * done, unaffected by other processes taking the core — for a shared, loaded machine) */
static int use_cpu_time;
static double now_ms(void) {
    if (!use_cpu_time) return sp_time_ms();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* the timed forward: k rows on each of n caches (one sequence: sp_model_forward), logits of
 * every row as the verifier needs them; the caches are trimmed back afterwards */
static int verify_forward(sp_model *m, sp_kv **kv, int n, const int32_t *tok, int k, float *logits, int V,
                          sp_err *err) {
    sp_forward_out out[64];
    sp_forward_seq seq[64];
    for (int i = 0; i < n; i++) {
        out[i] = (sp_forward_out){.logits = logits + (size_t)i * k * V};
        seq[i] = (sp_forward_seq){.kv = kv[i], .tokens = tok, .T = k, .out = &out[i]};
    }
    int rc = n == 1 ? sp_model_forward(m, kv[0], tok, k, &out[0], err) : sp_model_forward_batch(m, kv[0], seq, n, err);
    for (int i = 0; i < n && !rc; i++) sp_kv_trim(kv[i], k, err);
    return rc;
}

/* the options of one run */
typedef struct {
    const char *model;
    int threads, json, ctx, reps, kmax, tree, slots, bf16_dot;
} verify_opts;

/* ms[k] / tms[k]: the best time of a verify block of k tokens (logits of every position, as the
 * verifier needs, then a trim) and of a tree-masked forward over k rows, over R repetitions.
 * Repetitions are interleaved over k so drift on a shared machine hits every k alike. */
static int time_blocks(const verify_opts *v, sp_model *m, sp_kv **kvs, const int32_t *tok, float *logits, int R,
                       double *ms, double *tms, double *ex, sp_err *err) {
    const sp_config *c = sp_model_config(m);
    sp_kv *kv = kvs[0];
    sp_forward_out o = {.logits = logits};
    int32_t parent[64];
    for (int t = 0; t < 64; t++) parent[t] = t == 0 ? -1 : (t - 1) / 2;
    for (int k = 1; k <= v->kmax; k++) ms[k] = tms[k] = 1e30;
    for (int r = 0; r < R; r++) {
        for (int k = 1; k <= v->kmax; k++) {
            double t0 = now_ms();
            if (verify_forward(m, kvs, v->slots, tok + v->ctx, k, logits, c->vocab_size, err)) return -1;
            double dt = now_ms() - t0;
            ex[k] = sp_kv_moe_experts(kvs[0]); /* the same tokens every repetition */
            if (dt < ms[k]) ms[k] = dt;
            if (!v->tree) continue;
            t0 = now_ms();
            if (sp_model_forward_tree(m, kv, tok + v->ctx, parent, k, &o, err)) return -1;
            dt = now_ms() - t0;
            sp_kv_trim(kv, k, err);
            if (dt < tms[k]) tms[k] = dt;
        }
    }
    return 0;
}

static void print_json(const verify_opts *v, int threads, const double *ms, const double *tms, const double *ex) {
    json_t *jo = json_object(), *jk = json_array(), *jr = json_array(), *jm = json_array(), *je = json_array();
    for (int k = 1; k <= v->kmax; k++) {
        json_array_append_new(jk, json_integer(k));
        json_array_append_new(jr, json_real(ms[k] / ms[1]));
        json_array_append_new(jm, json_real(ms[k]));
        json_array_append_new(je, json_real(ex[k]));
    }
    if (ex[1] > 0) json_object_set_new(jo, "experts", je);
    else json_decref(je);
    if (v->tree) {
        json_t *jt = json_array();
        for (int k = 1; k <= v->kmax; k++) json_array_append_new(jt, json_real(tms[k] / ms[1]));
        json_object_set_new(jo, "tree_ratio", jt);
    }
    json_object_set_new(jo, "k", jk);
    json_object_set_new(jo, "ratio", jr);
    json_object_set_new(jo, "ms", jm);
    json_object_set_new(jo, "threads", json_integer(threads));
    json_object_set_new(jo, "slots", json_integer(v->slots));
    char *s = json_dumps(jo, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(jo);
}

static void print_table(const verify_opts *v, int threads, int R, const double *ms, const double *tms,
                        const double *ex) {
    if (v->slots > 1)
        printf("batched verify of %d slots, k rows each, vs %d slots of one row (%s, %d threads, context %d, best "
               "of %d%s)\n",
               v->slots, v->slots, v->model, threads, v->ctx, R, use_cpu_time ? ", process CPU time" : "");
    else
        printf("verify cost vs one decode step (%s, %d threads, context %d, best of %d%s)\n", v->model, threads,
               v->ctx, R, use_cpu_time ? ", process CPU time" : "");
    int moe = ex[1] > 0;
    printf("   k      ms   ratio   ms/token%s%s\n", moe ? "  experts" : "", v->tree ? "   tree ms  tree ratio" : "");
    for (int k = 1; k <= v->kmax; k++) {
        printf("  %2d %8.2f %7.3f %10.3f", k, ms[k], ms[k] / ms[1], ms[k] / k);
        if (moe) printf(" %8.2f", ex[k]);
        if (v->tree) printf(" %9.2f %11.3f", tms[k], tms[k] / ms[1]);
        printf("\n");
    }
}

/* load the model, fill a context of ctx tokens in each of the slots' caches, time, print */
static int run_bench_verify(const verify_opts *v) {
    const int slots = v->slots, kmax = v->kmax, ctx = v->ctx;
    sp_err err = {{0}};
    sp_model *m;
    if (sp_model_load(&m, v->model, v->threads, &err)) return cli_error(CMD, "%s", err.msg);
    sp_model_set_bf16_dot(m, v->bf16_dot);
    const sp_config *c = sp_model_config(m);
    sp_kv *kvs[64] = {0};
    int kv_ok = 1;
    for (int i = 0; i < slots && kv_ok; i++) {
        int batch = i == 0 ? slots * kmax : kmax; /* the first cache is the batched forward's scratch */
        kv_ok = (kvs[i] = sp_kv_create(m, ctx + kmax + 1, ctx > batch ? ctx : batch, &err)) != NULL;
    }
    sp_kv *kv = kv_ok ? kvs[0] : NULL;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(ctx + kmax));
    float *logits = malloc(sizeof(float) * (size_t)slots * kmax * c->vocab_size);
    double *ms = calloc((size_t)kmax + 1, sizeof(double)), *tms = calloc((size_t)kmax + 1, sizeof(double));
    double *ex = calloc((size_t)kmax + 1, sizeof(double));
    if (!kv || !tok || !logits || !ms || !tms || !ex) {
        cli_error(CMD, "%s", kv ? "out of memory" : err.msg);
        return 1;
    }
    for (int i = 0; i < ctx + kmax; i++) tok[i] = (int32_t)((i * 2654435761u) % (unsigned)c->vocab_size);
    for (int i = 0; i < slots; i++) sp_model_forward(m, kvs[i], tok, ctx, NULL, &err); /* the context */
    /* repetitions: as asked, else about 3 s of work; the minimum over them is reported */
    int R = v->reps > 0 ? v->reps : 0;
    if (!R) {
        double t0 = now_ms();
        verify_forward(m, kvs, slots, tok + ctx, 1, logits, c->vocab_size, &err);
        double one = now_ms() - t0;
        R = (int)(3000.0 / (one * kmax * 2 + 1e-3));
        if (R < 3) R = 3;
        if (R > 50) R = 50;
    }
    if (time_blocks(v, m, kvs, tok, logits, R, ms, tms, ex, &err)) {
        cli_error(CMD, "%s", err.msg);
        return 1;
    }
    if (v->json) print_json(v, sp_model_threads(m), ms, tms, ex);
    else print_table(v, sp_model_threads(m), R, ms, tms, ex);
    for (int i = 0; i < slots; i++) sp_kv_free(kvs[i]);
    free(tok);
    free(logits);
    free(ms);
    free(tms);
    free(ex);
    sp_model_free(m);
    return 0;
}

int cmd_bench_verify(int argc, char **argv) {
    verify_opts v = {.ctx = 128, .kmax = 16, .slots = 1};
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &v.model, "DIR", "target model directory or FILE.gguf"},
        {"-t", "--threads", CLI_INT, &v.threads, "N", "threads (default: all cores)"},
        {NULL, "--bf16-dot", CLI_FLAG, &v.bf16_dot, NULL, CLI_BF16_DOT_HELP},
        {NULL, "--ctx", CLI_INT, &v.ctx, "N", "context length before the verified block (default 128)"},
        {NULL, "--reps", CLI_INT, &v.reps, "N", "repetitions per k (default: adaptive)"},
        {NULL, "--k-max", CLI_INT, &v.kmax, "K", "largest block (default 16)"},
        {NULL, "--json", CLI_FLAG, &v.json, NULL, "print {\"k\": [...], \"ratio\": [...]}"},
        {NULL, "--tree", CLI_FLAG, &v.tree, NULL, "also time tree-masked forwards over k rows (a binary tree)"},
        {NULL, "--cpu", CLI_FLAG, &use_cpu_time, NULL, "time by process CPU time (with -t 1: robust on a loaded machine)"},
        {NULL, "--slots", CLI_INT, &v.slots, "N",
         "N sequences of k rows in one batched forward, as a server step with N busy slots (default 1)"},
    };
    int rc = cli_parse(CMD, "-m DIR [-t N] [--tree | --slots N] [--cpu] [--json]", opts, (int)(sizeof opts / sizeof *opts), argc, argv,
                       NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!v.model) return cli_error(CMD, "-m DIR is required");
    if (v.kmax < 1 || v.kmax > 64 || v.ctx < 1) return cli_error(CMD, "--k-max must be 1..64 and --ctx >= 1");
    if (v.slots < 1 || v.slots > 64) return cli_error(CMD, "--slots must be 1..64");
    if (v.slots > 1 && v.tree) return cli_error(CMD, "--tree times one sequence: it does not combine with --slots");
    return run_bench_verify(&v);
}
