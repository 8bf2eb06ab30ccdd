/* cmd_quantize.c — `specula quantize`: a model directory or GGUF file → a quantized GGUF that
 * specula and llama.cpp both load (src/formats/gguf_quantize.h, docs/QUANTIZE.md). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "specula.h"
#include "formats/gguf_quantize.h"
#include "formats/st_quantize.h"

#define CMD "quantize"

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = NULL;
    int threads = 0, quiet = 0, drafter = 0;
    cli_opt opts[] = {
        {"-m", "--model", CLI_STR, &in, "DIR|FILE", "model directory (config.json + safetensors) or GGUF file, required"},
        {"-o", "--output", CLI_STR, &out, "FILE", "output GGUF file, required (written to a temp name, then renamed)"},
        {NULL, "--type", CLI_STR, &type, "T",
         "q8_0 | q4_0 | q4_k_m | q6_k (q4_k_m: llama.cpp's mix, Q6_K on the LM head and some attn_v / "
         "ffn_down); f32 dequantizes every tensor"},
        {"-t", "--threads", CLI_INT, &threads, "N", "threads (default: all cores)"},
        {"-q", "--quiet", CLI_FLAG, &quiet, NULL, "no progress bar"},
        {NULL, "--drafter", CLI_FLAG, &drafter, NULL,
         "-m is a DFlash / DSpark drafter directory: -o OUT_DIR gets the same checkpoint with its projection "
         "matrices as q8_0 (or q4_0) blocks in safetensors"},
    };
    int rc = cli_parse(CMD, "-m DIR|FILE.gguf -o OUT.gguf --type q8_0|q4_0|q4_k_m|q6_k|f32  |  --drafter -m DIR -o DIR",
                       opts, 6, argc, argv, NULL, NULL, 0);
    if (rc) return rc > 0 ? 0 : 2;
    if (!in || !out || !type) return cli_error(CMD, "-m, -o and --type are required (see specula quantize --help)");
    sp_err err = {{0}};
    if (drafter) {
        sp_dtype qt = !strcmp(type, "q8_0") ? SP_DT_Q8_0 : !strcmp(type, "q4_0") ? SP_DT_Q4_0 : SP_DT_UNKNOWN;
        int nq = 0;
        if (qt == SP_DT_UNKNOWN) return cli_error(CMD, "--drafter: --type %s: expected q8_0 or q4_0", type);
        if (sp_st_quantize_drafter(in, out, qt, &nq, &err)) return cli_error(CMD, "%s", err.msg);
        fprintf(stderr, "wrote %s (%d matrices as %s)\n", out, nq, sp_dtype_name(qt));
        return 0;
    }
    gguf_quantize_opts o = {.n_threads = threads, .progress = !quiet};
    if (sp_gguf_mix_parse(type, &o.mix)) return cli_error(CMD, "--type %s: expected q8_0, q4_0, q4_k_m, q6_k or f32", type);
    /* the model must load as generate loads it: the one validator, before anything is written */
    if (sp_model_check(in, &err)) return cli_error(CMD, "%s", err.msg);
    if (sp_gguf_quantize(in, out, &o, &err)) return cli_error(CMD, "%s", err.msg);
    fprintf(stderr, "wrote %s (%s)\n", out, sp_gguf_mix_name(o.mix));
    return 0;
}
