/* llama_flags.h — llama.cpp's flags as they appear in copied command lines (llama-cli,
 * llama-server), for the commands that load a model. A flag that names something specula has
 * under another name (`--predict`, `-a`, `-to`, `--chat-template-file`, `--spec-type draft-dspark`)
 * works as that flag; a flag that means nothing on a CPU build, or names what is always the case
 * here (`-ngl 99`, `-fa on`, `--jinja`, `--no-mmap`, `--metrics`), is accepted, its value
 * consumed, with one warning line on stderr. The table is in llama_flags.c. */
#ifndef SPECULA_CLI_LLAMA_FLAGS_H
#define SPECULA_CLI_LLAMA_FLAGS_H

#include "args.h"

/* What cli_parse does with argv[*i] (a, its name of len bytes; eq: the '=' of --name=value or
 * NULL), which the command's table lacks:
 *   1  an alias: *o is the command's own row and *val the value to store (NULL for a flag);
 *      *i is advanced past a separate value;
 *   2  a no-op: the warning is printed and *i advanced past its value;
 *   0  not a llama.cpp flag this command accepts (the caller reports it unknown);
 *  -1  a missing value (the error is printed). */
int cli_llama_flag(const char *cmd, const cli_opt *opts, int n_opts, int argc, char **argv, int *i, size_t len,
                   const char *eq, const cli_opt **o, const char **val);

/* The table as help text lines on f (for --help of the commands that accept it). */
void cli_llama_flags_usage(FILE *f);

#endif
