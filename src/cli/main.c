/* main.c — `nextn`: dispatch to subcommands. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *what;
} commands[] = {
    {"generate", cmd_generate, "generate tokens from a prompt"},
    {"logits", cmd_logits, "write logits / hidden states for a token sequence as .npy"},
    {"inspect", cmd_inspect, "describe a checkpoint: architecture, sizes, dtypes, MTP tensors"},
    {"tokenize", cmd_tokenize, "encode text to token ids (JSON array)"},
    {"detokenize", cmd_detokenize, "decode token ids to text"},
    {"chat-template", cmd_chat_template, "render a conversation with the checkpoint's chat template"},
    {"bench", cmd_bench, "measure load, prefill, decode and MTP speed against the machine's bandwidth roofline"},
    {"perplexity", cmd_perplexity, "score a text: perplexity over windows of --ctx tokens (compare quantizations)"},
    {"quantize", cmd_quantize, "write an MLX-quantized copy of a checkpoint (affine 2-6/8-bit, mxfp4, nvfp4, mxfp8)"},
    {"serve", cmd_serve, "serve the model over HTTP with the OpenAI API (chat, completions, metrics)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: nextn <command> [options]   (nextn <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].what);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        int rc = commands[i].fn(argc - 1, argv + 1);
        /* output that never arrived (a full disk, a closed pipe) is a failure,
         * whatever the command thought it wrote */
        errno = 0;
        if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
            fprintf(stderr, "nextn %s: writing the output failed: %s\n", argv[1],
                    errno ? strerror(errno) : "an earlier write was refused");
            rc = 1;
        }
        return rc;
    }
    return cli_usage_error("unknown command '%s' (try nextn --help)", argv[1]);
}
