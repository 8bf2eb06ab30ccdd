/* cmd_bench_decode.c — `specula bench-decode`: decode and prefill speed against the memory
 * roofline. Decode streams every weight once per token, so its ceiling is
 * read bandwidth ÷ weight bytes per token; roofline_fraction = achieved ÷ that ceiling, with
 * the bandwidth measured at the thread count the model runs with (one core cannot pull what
 * all cores together can). The read bandwidth of one thread and of every core are reported
 * beside it, and decode_gbs is the weight bandwidth decoding achieves.
 * Prompts are random token ids (seeded); EOS is ignored; decoding is greedy. --no-roofline leaves
 * out the bandwidth runs (a few seconds each) and the figures that need them. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "core/core.h"
#include "core/pool.h"
#include "kernels/bandwidth.h"
#include "decode/generate.h"
#include "specula.h"

static const char *CMD = "bench-decode";

/* Parameters of the matmuls one token runs through (projections, MLP, PLE, LM head):
 * 2 FLOPs each per token. Attention score / value FLOPs are not counted. */
static double matmul_params(const sp_config *c) {
    double H = c->hidden_size, p = (double)c->vocab_size * H;
    for (int l = 0; l < c->n_layers; l++) {
        const sp_layer_config *L = &c->layers[l];
        double q = (double)c->n_heads * L->head_dim, kv = (double)L->n_kv_heads * L->head_dim;
        int own_kv = L->kv_source == l; /* KV-shared Gemma-4 layers project no K/V */
        p += H * q * 2 + (own_kv ? H * kv * (L->has_v_proj ? 2 : 1) : 0) + 3.0 * H * L->ffn_dim;
        if (c->ple_dim > 0) p += 2.0 * H * c->ple_dim + H * c->ple_dim; /* gate, projection, model proj */
    }
    return p;
}

/* every online core (a default-sized pool) */
static int count_cores(void) {
    sp_pool *pool = sp_pool_create(0);
    int n = pool ? sp_pool_size(pool) : 1;
    sp_pool_free(pool);
    return n;
}

/* read bandwidth in GB/s with n threads streaming; <= 0 when it cannot be measured */
static double measure_bw(int n) {
    sp_pool *pool = sp_pool_create(n);
    double bw = pool ? sp_measure_read_bw(pool) : -1;
    sp_pool_free(pool);
    return bw;
}

static int run_gen(sp_model *m, int n_prompt, int n_new, uint64_t seed, sp_gen_stats *st, sp_err *err) {
    const sp_config *cfg = sp_model_config(m);
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt), *out = malloc((size_t)n_new * sizeof *out);
    int rc = -1;
    if (!prompt || !out) {
        sp_err_set(err, "out of memory");
    } else {
        for (int i = 0; i < n_prompt; i++)
            prompt[i] = (int32_t)(sp_rng_u64(seed, 77, (uint64_t)i) % (uint64_t)cfg->vocab_size);
        if (cfg->bos_id >= 0 && cfg->bos_id < cfg->vocab_size) prompt[0] = cfg->bos_id;
        sp_gen_params gp = sp_gen_params_default();
        gp.max_new = n_new;
        gp.ignore_eos = 1;
        gp.prefill_chunk = n_prompt < 512 ? n_prompt : 512;
        rc = sp_generate(m, NULL, prompt, n_prompt, &gp, out, n_new, st, err);
    }
    free(prompt);
    free(out);
    return rc;
}

/* the measured figures of one run */
typedef struct {
    sp_gen_stats dec, pre;
    int nt, ncores, short_prompt;
    double bw, bw1, bwall; /* read GB/s at nt threads, 1 thread, every core */
    double wbytes, ceiling, frac, gflops;
    int roofline; /* 0: the bandwidth was not measured (--no-roofline), bw / ceiling / frac unset */
} decode_bench;

static void print_json(const decode_bench *b) {
    json_t *o = json_object();
    json_object_set_new(o, "decode_tps", json_real(b->dec.decode_tps));
    json_object_set_new(o, "prefill_tps", json_real(b->pre.prefill_tps));
    json_object_set_new(o, "weight_bytes_per_token", json_integer((json_int_t)b->wbytes));
    if (b->roofline) {
        json_object_set_new(o, "read_bw_gbs", json_real(b->bw));
        json_object_set_new(o, "read_bw_1t_gbs", json_real(b->bw1));
        json_object_set_new(o, "read_bw_all_gbs", json_real(b->bwall));
    }
    json_object_set_new(o, "cores", json_integer(b->ncores));
    json_object_set_new(o, "decode_gbs", json_real(b->dec.decode_tps * b->wbytes / 1e9));
    if (b->roofline) json_object_set_new(o, "roofline_fraction", json_real(b->frac));
    json_object_set_new(o, "prefill_gflops", json_real(b->gflops));
    json_object_set_new(o, "threads", json_integer(b->nt));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (s) puts(s);
    free(s);
}

static void print_text(const char *dir, const sp_config *cfg, const decode_bench *b) {
    printf("model      %s (%s), %d threads\n", dir, sp_arch_name(cfg->arch), b->nt);
    printf("decode     %.2f tok/s (%d tokens after a %d-token prompt)\n", b->dec.decode_tps, b->dec.decode_steps,
           b->short_prompt);
    printf("prefill    %.1f tok/s (%d-token prompt), %.1f GFLOP/s\n", b->pre.prefill_tps, b->pre.prompt_tokens,
           b->gflops);
    printf("weights    %.1f MB read per decoded token\n", b->wbytes / 1e6);
    if (!b->roofline) return;
    printf("bandwidth  %.1f GB/s measured read at %d threads (1 thread %.1f, %d cores %.1f); "
           "decoding reads %.1f GB/s\n",
           b->bw, b->nt, b->bw1, b->ncores, b->bwall, b->dec.decode_tps * b->wbytes / 1e9);
    printf("roofline   %.3f of the %.2f tok/s ceiling at %d threads\n", b->frac, b->ceiling, b->nt);
}

/* load, time decode and prefill, measure the read bandwidth, print; 0, or 2 after an error */
static int run_bench_decode(const char *dir, int threads, int bf16_dot, int n_decode, int n_prefill, uint64_t seed,
                            int json, int roofline) {
    sp_err err = {{0}};
    sp_model *m = NULL;
    if (sp_model_load(&m, dir, threads, &err)) return cli_error(CMD, "%s", err.msg);
    sp_model_set_bf16_dot(m, bf16_dot);
    const sp_config *cfg = sp_model_config(m);
    decode_bench b = {.nt = sp_model_threads(m), .short_prompt = 16, .roofline = roofline};
    if (cfg->max_pos > 0 && n_prefill + 1 > cfg->max_pos) n_prefill = cfg->max_pos - 1;

    /* warm-up: fault in the mmapped weights before anything is timed */
    sp_gen_stats warm;
    int rc = 2;
    if (run_gen(m, 4, 4, seed + 2, &warm, &err) ||
        run_gen(m, b.short_prompt, n_decode + 1, seed, &b.dec, &err) || /* +1: the first token comes from the prefill */
        run_gen(m, n_prefill, 1, seed + 1, &b.pre, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    b.ncores = count_cores();
    b.wbytes = (double)sp_model_weight_bytes(m);
    /* read bandwidth at 1 thread, at every core, and at nt threads (one of those two, or a third run) */
    if (roofline) {
        b.bw1 = measure_bw(1);
        b.bwall = b.ncores > 1 ? measure_bw(b.ncores) : b.bw1;
        b.bw = b.nt == 1 ? b.bw1 : b.nt == b.ncores ? b.bwall : measure_bw(b.nt);
        if (b.bw1 <= 0 || b.bwall <= 0 || b.bw <= 0) {
            cli_error(CMD, "could not measure the read bandwidth (out of memory for the 256 MiB buffer)");
            goto done;
        }
        b.ceiling = b.bw * 1e9 / b.wbytes;
        b.frac = b.dec.decode_tps / b.ceiling;
    }
    /* every layer runs on all prompt tokens; the LM head only on the last one */
    const double head = (double)cfg->vocab_size * cfg->hidden_size;
    b.gflops = 2.0 * ((matmul_params(cfg) - head) * b.pre.prompt_tokens + head) / (b.pre.prefill_ms * 1e-3) / 1e9;
    if (json) print_json(&b);
    else print_text(dir, cfg, &b);
    rc = 0;
done:
    sp_model_free(m);
    return rc;
}

int cmd_bench_decode(int argc, char **argv) {
    const char *dir = NULL;
    int threads = 0, json = 0, n_decode = 64, n_prefill = 512;
    uint64_t seed = 1;
    int bf16_dot = 0, no_roofline = 0;
    const cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &dir, "DIR", "model directory or FILE.gguf, required"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {NULL, "--bf16-dot", CLI_FLAG, &bf16_dot, NULL, CLI_BF16_DOT_HELP},
        {"-n", "--n-decode", CLI_INT, &n_decode, "N", "decoded tokens timed (default 64)"},
        {NULL, "--n-prefill", CLI_INT, &n_prefill, "N", "prefill prompt length (default 512)"},
        {"-s", "--seed", CLI_U64, &seed, "S", "seed of the random prompts (default 1)"},
        {NULL, "--json", CLI_FLAG, &json, NULL, "print one JSON object"},
        {NULL, "--no-roofline", CLI_FLAG, &no_roofline, NULL, "skip the read-bandwidth runs and the roofline figures"},
    };
    int rc = cli_parse(CMD, "-m DIR [-t N] [--json]", opts, (int)(sizeof opts / sizeof *opts), argc,
                       argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!dir) return cli_error(CMD, "-m DIR is required (see specula bench-decode --help)");
    if (n_decode < 1 || n_prefill < 1) return cli_error(CMD, "-n and --n-prefill must be >= 1");
    return run_bench_decode(dir, threads, bf16_dot, n_decode, n_prefill, seed, json, !no_roofline);
}
