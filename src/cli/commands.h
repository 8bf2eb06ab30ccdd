/* commands.h — the `specula` subcommands. Each lives in its own src/cli/cmd_*.c file and
 * is declared weak here so the CLI builds while a subcommand is still being written. */
#ifndef SPECULA_CLI_COMMANDS_H
#define SPECULA_CLI_COMMANDS_H

typedef int (*cli_cmd_fn)(int argc, char **argv);

#define CLI_COMMANDS(X)                                                                   \
    X(generate, "generate text from a model (plain or speculative decoding)")            \
    X(logits, "write raw float32 logits of every position")                              \
    X(bench_decode, "decode / prefill speed vs the memory roofline")                     \
    X(new_model, "write a random-weight checkpoint in the Hugging Face layout")          \
    X(export_gguf, "convert a model directory to GGUF for llama.cpp")                    \
    X(quantize, "quantize a model to GGUF: q8_0, q4_0, q4_k_m (llama.cpp's mix), q6_k")   \
    X(tokenize, "text -> token ids")                                                     \
    X(detokenize, "token ids -> text")                                                   \
    X(template, "render a conversation with the model's chat template")                  \
    X(train_tokenizer, "train a SentencePiece-style BPE tokenizer")                      \
    X(train_lm, "train a Gemma-4 text target model from scratch on text files")          \
    X(audit, "check a drafter's sampling path is exactly the target's distribution")       \
    X(bench_spec, "plain vs speculative decoding over a prompt file")                     \
    X(bench_verify, "cost of verifying k tokens relative to one decode step")             \
    X(run, "the embedded default model: plain vs speculative, with figures")              \
    X(regen, "target hidden states of a JSONL corpus into drafter-training shards")      \
    X(train, "train a DSpark / DFlash drafter from regenerated shards")                  \
    X(plot, "loss, tau and acceptance curves of a training log (gnuplot SVG)")           \
    X(new_drafter, "write a random DFlash / DSpark / assistant drafter for a target")     \
    X(calibrate, "STS-calibrate a DSpark drafter's confidences on held-out prompts")                \
    X(serve, "OpenAI-compatible HTTP server with continuous batching and speculation")

#define X(name, help) int cmd_##name(int argc, char **argv) __attribute__((weak));
CLI_COMMANDS(X)
#undef X

#endif
