/* cli_tok.h — tokenizer options shared by `specula tokenize`, `detokenize` (and later
 * `generate`): -m DIR | --tokenizer FILE.json | --vocab FILE.gguf. */
#ifndef SPECULA_CLI_TOK_H
#define SPECULA_CLI_TOK_H

#include "tokenizer/tokenizer.h"

typedef struct {
    const char *model_dir, *json, *gguf;
} cli_tok_source;

/* 1 when argv[*i] is one of the three flags (consumes its value), 0 otherwise, -1 on a
 * missing value (message printed). */
int cli_tok_parse_flag(cli_tok_source *src, int argc, char **argv, int *i);
/* load from whichever was given; prints "specula: error: ..." and returns NULL on failure */
tok_tokenizer *cli_tok_load(const cli_tok_source *src);

#endif
