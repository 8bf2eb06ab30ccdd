/* prompts_cli.h — the one prompt-file format of `run`, `bench-spec` and `calibrate`
 * (docs/prompt-files.md).
 *
 * JSONL, one prompt per line, each an object with one of
 *     "prompt":     text, tokenized with the model's tokenizer (BOS as the model adds it)
 *     "prompt_ids": [token ids]
 *     "messages":   [{"role": ..., "content": ...}, ...], rendered with the model's own chat
 *                   template (src/chat/chat.h; generation prompt added)
 * (other keys are ignored; blank lines are skipped). Plain text, one prompt per line, is read
 * only when the caller asks for it (a --text-prompts flag) or the file name ends in ".txt".
 * Anything else is an error naming FILE:LINE. */
#ifndef SPECULA_CLI_PROMPTS_H
#define SPECULA_CLI_PROMPTS_H

#include <stdint.h>

typedef struct {
    int32_t *ids; /* malloc'd */
    int n;
    int line;     /* 1-based line of the file */
    char *label;  /* malloc'd: the prompt text, the last message's content, or "ids" */
} cli_prompt;

/* Read every prompt of path for model_dir's tokenizer. text_lines: plain text lines (also
 * implied by a ".txt" name). Prints errors; returns 0 / -1. *out malloc'd (cli_prompts_free). */
int cli_prompts_read(const char *cmd, const char *path, const char *model_dir, int text_lines, cli_prompt **out,
                     int *n);
void cli_prompts_free(cli_prompt *p, int n);

#endif
