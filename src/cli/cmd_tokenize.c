/* cmd_tokenize.c — `nextn tokenize` and `nextn detokenize`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *tokenize_help =
    "usage: nextn tokenize [-m DIR] (--text T | -f, --file F) [--no-special]\n"
    "Encodes text with the checkpoint's tokenizer.json and prints a JSON array of ids.\n\n"
    "  -m, --model DIR    directory with tokenizer.json (default: $NEXTN_MODEL, else the bundled model)\n"
    "  --text T           the text\n"
    "  -f, --file F       read the text from F (bytes as they are; - for standard input)\n"
    "  --no-special       special tokens written in the text (<|im_start|>, ...) stay text\n";

static const char *detokenize_help =
    "usage: nextn detokenize [-m DIR] --ids 1,2,3 [--skip-special]\n"
    "Decodes token ids with the checkpoint's tokenizer and prints the text.\n\n"
    "  -m, --model DIR    directory with tokenizer.json (default: $NEXTN_MODEL, else the bundled model)\n"
    "  --ids IDS          comma-separated token ids\n"
    "  --skip-special     leave special tokens out\n";

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *file = NULL;
    nx_special_mode mode = NX_SPECIAL_PARSE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(tokenize_help, stdout); return 0; }
        if (strcmp(a, "--no-special") == 0) { mode = NX_SPECIAL_AS_TEXT; continue; }
        const char **slot = strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0 ? &dir
                            : strcmp(a, "--text") == 0                      ? &text
                            : strcmp(a, "--file") == 0 || strcmp(a, "-f") == 0 ? &file
                                                                            : NULL;
        if (!slot) return cli_usage_error("tokenize: unknown option '%s' (see nextn tokenize --help)", a);
        if (!(*slot = cli_value(argc, argv, &i))) return 2;
    }
    if (!!text + !!file != 1) return cli_usage_error("tokenize: give exactly one of --text, --file");
    size_t len = text ? strlen(text) : 0;
    char *owned = NULL;
    if (file && !(owned = cli_read_file(file, &len))) return cli_fail("%s: cannot read: %s", file, strerror(errno));
    if (cli_check_utf8(file ? cli_source_name(file) : "--text", file ? owned : text, len)) { free(owned); return 1; }
    int rc = 1, n = 0;
    int32_t *ids = NULL;
    char err[1024];
    nx_tokenizer *t = cli_load_tokenizer(dir);
    if (!t) goto done;
    if (nx_tokenize(t, file ? owned : text, len, mode, &ids, &n, err, sizeof err)) { cli_fail("%s", err); goto done; }
    putchar('[');
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    puts("]");
    rc = 0;
done:
    nx_free(ids);
    free(owned);
    nx_tokenizer_free(t);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *dir = NULL, *ids_arg = NULL;
    int skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(detokenize_help, stdout); return 0; }
        if (strcmp(a, "--skip-special") == 0) { skip = 1; continue; }
        const char **slot = strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0 ? &dir : strcmp(a, "--ids") == 0 ? &ids_arg : NULL;
        if (!slot) return cli_usage_error("detokenize: unknown option '%s' (see nextn detokenize --help)", a);
        if (!(*slot = cli_value(argc, argv, &i))) return 2;
    }
    if (!ids_arg) return cli_usage_error("detokenize: --ids is required");
    int32_t *ids;
    int n;
    if (cli_parse_ids(ids_arg, &ids, &n)) return cli_usage_error("detokenize: --ids wants comma-separated token ids, got '%s'", ids_arg);
    int rc = 1;
    char err[1024], *text = NULL;
    size_t len = 0;
    nx_tokenizer *t = cli_load_tokenizer(dir);
    if (!t) goto done;
    for (int i = 0; i < n; i++)   /* the library skips them; asked for by name here, they are an error */
        if (ids[i] >= nx_tokenizer_vocab_size(t)) {
            cli_fail("detokenize: id %d (at %d) is outside the vocabulary [0, %d)", ids[i], i, nx_tokenizer_vocab_size(t));
            goto done;
        }
    if (nx_detokenize(t, ids, n, skip, &text, &len, err, sizeof err)) { cli_fail("%s", err); goto done; }
    fwrite(text, 1, len, stdout);
    rc = 0;
done:
    nx_free(text);
    free(ids);
    nx_tokenizer_free(t);
    return rc;
}
