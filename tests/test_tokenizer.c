/* test_tokenizer.c — GGUF vocabularies against llama.cpp's test vectors (tests/data/peer-vectors,
 * README there: no BOS, special text not parsed), decode round trips, streaming decode, the
 * GGUF reader on truncated files, and invalid UTF-8 input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/core.h"
#include "formats/gguf.h"
#include "harness.h"
#include "tok_test_gguf.h"
#include "tokenizer/tokenizer.h"

#define DIR "tests/data/peer-vectors/"
#define SEP "\n__ggml_vocab_test__\n"

/* Encode every string of NAME.inp and compare with NAME.out; returns matches, *total set. */
static int run_vectors(const char *name, int *total) {
    char path[256], *inp = NULL, *out = NULL;
    size_t ni, no;
    sp_err err = {0};
    *total = 0;
    snprintf(path, sizeof path, DIR "ggml-vocab-%s.gguf", name);
    tok_tokenizer *t = sp_tok_load_gguf(path, &err);
    CHECK(t != NULL, "%s: %s", path, err.msg);
    if (!t) return 0;
    snprintf(path, sizeof path, DIR "ggml-vocab-%s.gguf.inp", name);
    CHECK(sp_read_file(path, &inp, &ni, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, DIR "ggml-vocab-%s.gguf.out", name);
    CHECK(sp_read_file(path, &out, &no, &err) == 0, "%s", err.msg);
    int ok = 0;
    char *ip = inp, *op = out;
    while (ip && op && *op) {
        char *ie = strstr(ip, SEP);
        size_t ilen = ie ? (size_t)(ie - ip) : strlen(ip);
        char *oe = strchr(op, '\n');
        if (!oe) oe = op + strlen(op);
        /* expected ids */
        int32_t want[1024];
        int nw = 0;
        for (char *p = op; p < oe && nw < 1024;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p) break;
            want[nw++] = (int32_t)v;
            p = q;
        }
        int32_t *ids = NULL;
        int n = 0;
        int rc = sp_tok_encode(t, ip, ilen, 0, 0, &ids, &n, &err);
        int same = rc == 0 && n == nw && (n == 0 || !memcmp(ids, want, (size_t)n * sizeof *ids));
        (*total)++;
        ok += same;
        if (!same) {
            fprintf(stderr, "  %s case %d mismatch for \"%.*s\"\n   want:", name, *total, (int)ilen, ip);
            for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n   got: ");
            for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n");
        }
        /* and back: decode(encode(x)) == x for these vocabs (SPM strips the prefix space) */
        char *dec = NULL;
        if (rc == 0 && sp_tok_decode(t, ids, n, &dec, &err) == 0) {
            CHECK(strlen(dec) == ilen && !memcmp(dec, ip, ilen), "%s: round trip of \"%.*s\" gave \"%s\"",
                  name, (int)ilen, ip, dec);
            free(dec);
        }
        free(ids);
        op = *oe ? oe + 1 : oe;
        if (!ie) break;
        ip = ie + strlen(SEP);
    }
    free(inp);
    free(out);
    sp_tok_free(t);
    return ok;
}

static void vectors(const char *name) {
    int total, ok = run_vectors(name, &total);
    printf("  %s: %d/%d vectors match\n", name, ok, total);
    CHECK(total > 0 && ok == total, "%s: %d of %d vectors match", name, ok, total);
}

static void test_vectors_llama_spm(void) { vectors("llama-spm"); }
static void test_vectors_qwen2(void) { vectors("qwen2"); }
static void test_vectors_gpt2(void) { vectors("gpt-2"); }
static void test_vectors_phi3(void) { vectors("phi-3"); }

/* ids of text under the phi-3 vocab equal want[0..nw) */
static void phi3_case(tok_tokenizer *t, const char *text, int parse_special, const int32_t *want, int nw) {
    sp_err err = {0};
    int32_t *ids = NULL;
    int n = 0;
    CHECK(sp_tok_encode(t, text, strlen(text), 0, parse_special, &ids, &n, &err) == 0, "%s", err.msg);
    int same = n == nw && (n == 0 || !memcmp(ids, want, (size_t)n * sizeof *ids));
    CHECK(same, "phi-3 \"%s\" (parse_special %d): %d ids, first %d", text, parse_special, n, n ? ids[0] : -1);
    free(ids);
}

/* general.name "Phi-3": added tokens strip the whitespace after them, except <unk>, <s> and
 * <|endoftext|> (llama.cpp's per-model attributes); the user-defined </s> is matched even
 * without parse_special, the control <|end|> only with it */
static void test_phi3_rstrip(void) {
    sp_err err = {0};
    tok_tokenizer *t = sp_tok_load_gguf(DIR "ggml-vocab-phi-3.gguf", &err);
    CHECK(t != NULL, "%s", err.msg);
    if (!t) return;
    phi3_case(t, "Hello </s> world", 0, (const int32_t[]){15043, 29871, 2, 3186}, 4);
    phi3_case(t, "</s>  world", 0, (const int32_t[]){2, 3186}, 2);
    phi3_case(t, "a<|end|>  b", 1, (const int32_t[]){263, 32007, 289}, 3);
    phi3_case(t, "a<|endoftext|> b", 1, (const int32_t[]){263, 32000, 29871, 289}, 4);
    sp_tok_free(t);
}

/* every tokenizer.ggml.pre family specula knows loads (its regexes compile) and round-trips
 * mixed text on a bare byte-level vocab (256 tokens, no merges); unknown names are errors */
static void test_pre_families(void) {
    static const char *pres[] = {"gpt-2", "qwen2", "llama-bpe", "starcoder", "deepseek-coder", "deepseek-v3", "foo"};
    const char *path = "build/test-pre.gguf", *text = "Hello, World! 123456 日本語 ok?\n\n  x";
    for (size_t k = 0; k < sizeof pres / sizeof pres[0]; k++) {
        wbuf b = {0};
        w32(&b, 0x46554747u), w32(&b, 3), w64(&b, 0), w64(&b, 4);
        wkey(&b, "tokenizer.ggml.model", 8), wstr(&b, "gpt2");
        wkey(&b, "tokenizer.ggml.pre", 8), wstr(&b, pres[k]);
        wkey(&b, "tokenizer.ggml.tokens", 9), w32(&b, 8), w64(&b, 256);
        for (int c = 0; c < 256; c++) {
            int pr = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
            int cp = pr ? c : c <= 0x20 ? 0x100 + c : c == 0xAD ? 0x100 + 67 : 0x100 + 33 + (c - 0x7F);
            char u[3] = {(char)cp, 0, 0};
            if (cp >= 0x80) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
            wstrn(&b, u, cp >= 0x80 ? 2 : 1);
        }
        wkey(&b, "tokenizer.ggml.merges", 9), w32(&b, 8), w64(&b, 0);
        sp_err err = {0};
        sp_write_file_atomic(path, b.p, b.n, &err);
        free(b.p);
        tok_tokenizer *t = sp_tok_load_gguf(path, &err);
        if (!strcmp(pres[k], "foo")) {
            CHECK(!t && strstr(err.msg, "tokenizer.ggml.pre"), "unknown pre: %s", err.msg);
            sp_tok_free(t);
            continue;
        }
        CHECK(t != NULL, "pre %s: %s", pres[k], err.msg);
        if (!t) continue;
        int32_t *ids;
        int n;
        char *dec = NULL;
        CHECK(sp_tok_encode(t, text, strlen(text), 0, 0, &ids, &n, &err) == 0, "%s", err.msg);
        CHECK(n == (int)strlen(text), "pre %s: %d ids for %zu bytes", pres[k], n, strlen(text));
        CHECK(sp_tok_decode(t, ids, n, &dec, &err) == 0 && !strcmp(dec, text), "pre %s: round trip", pres[k]);
        free(dec);
        free(ids);
        sp_tok_free(t);
    }
    remove(path);
}

/* the CLI, found next to this test binary (build/tests/.. -> build/specula) */
static char cli[512];

static int run_cli(const char *args, char *out, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", cli, args);
    return harness_run(cmd, out, cap);
}

static void test_cli(void) {
    char out[4096];
    const char *v = "--vocab " DIR "ggml-vocab-qwen2.gguf";
    char args[512];
    snprintf(args, sizeof args, "tokenize %s -p 'Hello world<|im_end|>'", v);
    CHECK(run_cli(args, out, sizeof out) == 0 && !strcmp(out, "9707 1879 151645\n"), "tokenize: '%s'", out);
    snprintf(args, sizeof args, "tokenize %s -p 'Hello world<|im_end|>' --no-parse-special --json", v);
    CHECK(run_cli(args, out, sizeof out) == 0 && !strncmp(out, "[9707, 1879, 27, 91", 19), "--json: '%s'", out);
    snprintf(args, sizeof args, "tokenize --vocab " DIR "ggml-vocab-llama-spm.gguf -p 'Hello world'");
    CHECK(run_cli(args, out, sizeof out) == 0 && !strcmp(out, "1 15043 3186\n"), "llama-spm adds BOS: '%s'", out);
    snprintf(args, sizeof args, "tokenize --vocab " DIR "ggml-vocab-llama-spm.gguf -p 'Hello world' --no-bos");
    CHECK(run_cli(args, out, sizeof out) == 0 && !strcmp(out, "15043 3186\n"), "--no-bos: '%s'", out);
    snprintf(args, sizeof args, "detokenize %s --ids 9707,1879,151645", v);
    CHECK(run_cli(args, out, sizeof out) == 0 && !strcmp(out, "Hello world<|im_end|>\n"), "detokenize: '%s'", out);
    snprintf(args, sizeof args, "detokenize %s --ids '9707 1879 151645' --skip-special --stream", v);
    CHECK(run_cli(args, out, sizeof out) == 0 && !strcmp(out, "Hello world\n"), "detokenize --stream: '%s'", out);
    CHECK(run_cli("tokenize --vocab /nonexistent.gguf -p x", out, sizeof out) != 0 &&
              !strncmp(out, "specula: error: ", 16) && strchr(out, '\n') == out + strlen(out) - 1,
          "missing file: '%s'", out);
    snprintf(args, sizeof args, "detokenize %s --ids 1,999999999", v);
    CHECK(run_cli(args, out, sizeof out) != 0 && strstr(out, "specula: error:"), "bad id: '%s'", out);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    RUN(test_cli);
    RUN(test_pre_families);
    RUN(test_vectors_llama_spm);
    RUN(test_vectors_qwen2);
    RUN(test_vectors_gpt2);
    RUN(test_vectors_phi3);
    RUN(test_phi3_rstrip);
    return harness_done("test_tokenizer");
}
