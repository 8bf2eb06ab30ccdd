/* cmd_quantize.c — `specula quantize`: a model directory or GGUF file → a quantized GGUF that
 * specula and llama.cpp both load (src/formats/gguf_quantize.h, docs/QUANTIZE.md). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "formats/gguf_quantize.h"

#define CMD "quantize"

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = NULL;
    int threads = 0, quiet = 0;
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &in, "DIR|FILE", "model directory (config.json + safetensors) or GGUF file, required"},
        {"-o", "--output", CLI_STR, &out, "FILE", "output GGUF file, required (written to a temp name, then renamed)"},
        {NULL, "--type", CLI_STR, &type, "T",
         "q8_0 | q4_0 | q4_k_m | q6_k (q4_k_m: llama.cpp's mix, Q6_K on the LM head and some attn_v / "
         "ffn_down); f32 dequantizes every tensor"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {"-q", "--quiet", CLI_FLAG, &quiet, NULL, "no progress bar"},
    };
    int rc = cli_parse(CMD, "-m DIR|FILE.gguf -o OUT.gguf --type q8_0|q4_0|q4_k_m|q6_k", opts, 5, argc, argv, NULL,
                       NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!in || !out || !type) return cli_error(CMD, "-m, -o and --type are required (see specula quantize --help)");
    gguf_quantize_opts o = {.n_threads = threads, .progress = !quiet};
    if (gguf_mix_parse(type, &o.mix)) return cli_error(CMD, "--type %s: expected q8_0, q4_0, q4_k_m, q6_k or f32", type);
    sp_err err = {{0}};
    if (gguf_quantize(in, out, &o, &err)) return cli_error(CMD, "%s", err.msg);
    fprintf(stderr, "wrote %s (%s)\n", out, gguf_mix_name(o.mix));
    return 0;
}
