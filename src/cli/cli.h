/* cli.h — shared helpers of the `nextn` command-line tool.
 *
 * The CLI sees only the public API (nextn.h). Every subcommand returns its
 * exit code: 0 success, 1 runtime failure (the library's message is printed),
 * 2 bad usage (a one-line error naming the option). */
#ifndef NX_CLI_CLI_H
#define NX_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "nextn.h"

int cmd_generate(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);

/* Prints "nextn: <message>" to stderr and returns 2 (usage) — for option errors. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "nextn: <message>" to stderr and returns 1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Strict number parsing: the whole string must be a number in range. Return 0
 * on success, -1 otherwise (nothing printed). */
int cli_parse_int(const char *s, long lo, long hi, long *out);
int cli_parse_u64(const char *s, uint64_t *out);
int cli_parse_float(const char *s, double lo, double hi, double *out);
/* Calls item on each item of the comma-separated list s (the item a
 * writable NUL-terminated copy). 0, or -1 when s is empty, an item is empty
 * (",1", "1,,2", "1,") or item returns nonzero -- one rule for every list
 * option. */
int cli_parse_list(const char *s, int (*item)(char *item, void *ctx), void *ctx);
/* "1,2,3" -> a malloc'd array (caller frees) of n ids in [0, INT32_MAX]. */
int cli_parse_ids(const char *s, int32_t **ids, int *n);

/* --draft-head-bits when not given (generate, bench, serve): auto, a 4-bit
 * draft copy of an LM head stored wider and too big for a cache, unless a
 * screen is made (see mtp_auto_head_bits for the measurements). */
#define CLI_DRAFT_HEAD_BITS NX_DRAFT_HEAD_AUTO
/* --draft-head-bits B: auto (NX_DRAFT_HEAD_AUTO), 0 (the head as stored) or
 * 2, 3, 4, 5, 6, 8. */
int cli_parse_head_bits(const char *s, long *out);

/* --draft-screen when not given (generate, bench, serve): auto, a sketch
 * screen where the head is too big for a cache (mtp_auto_screen_k). */
#define CLI_DRAFT_SCREEN NX_DRAFT_SCREEN_AUTO
#define CLI_DRAFT_SCREEN_HELP                                                                              \
    "  --draft-screen K|auto|off  rank the LM head's rows for a draft by a one-bit sketch made at\n"    \
    "                     load and score only the K best with the head (default auto: 2048 for a\n" \
    "                     head of 64 MiB or more whose hidden size is a multiple of 64; K >= the\n"  \
    "                     vocabulary: no screen); verification uses the whole head\n"
/* --draft-screen K: auto (NX_DRAFT_SCREEN_AUTO), off or 0, or K >= 1. */
int cli_parse_screen(const char *s, long *out);

/* Sampling options (generate, bench): --temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --presence-penalty, --frequency-penalty, --seed. Option
 * a with value v into sp: 1 if a is one of them and v fits, 0 if a is not
 * one of them, -1 (an error printed) if v does not fit or is NULL. */
int cli_sampling_option(const char *a, const char *v, nx_sampling *sp);
#define CLI_SAMPLING_HELP                                                                                   \
    "  --temp T           temperature; 0 = greedy (default 0)\n"                                         \
    "  --top-k K          keep the K most likely tokens (default 0 = off)\n"                             \
    "  --top-p P          nucleus sampling mass (default 1 = off)\n"                                     \
    "  --min-p P          drop tokens below P x the top probability (default 0 = off)\n"                 \
    "  --repeat-penalty R repetition penalty over prompt and output (default 1 = off)\n"                \
    "  --presence-penalty P, --frequency-penalty F   over the output only (default 0 = off)\n"          \
    "  --seed S           sampling seed (default 0; a negative S is 2^64 + S); draws are keyed\n"     \
    "                     by (seed, position)\n"
/* --mtp: which drafter a command loads. */
typedef enum {
    CLI_MTP_DEFAULT,   /* not given: the checkpoint's head where it has one */
    CLI_MTP_ON,        /* "on": the checkpoint's head                        */
    CLI_MTP_OFF,       /* "off": none                                        */
    CLI_MTP_DIR        /* a drafter directory                                */
} cli_mtp;
/* --mtp V (NULL: not given) into *out: 0, or -1 (an error printed) when V is
 * no word and no directory -- "OFF" is a usage error, not a missing
 * OFF/config.json. */
int cli_parse_mtp(const char *v, cli_mtp *out);
/* --draft-pick argmax|sample into *out: 0, or -1 (an error printed). */
int cli_parse_draft_pick(const char *v, nx_draft_pick *out);
#define CLI_DRAFT_PICK_HELP                                                                                 \
    "  --draft-pick argmax|sample  under rejection sampling, draft the head's likeliest token or\n"     \
    "                     one drawn from its distribution under the same sampling settings\n"        \
    "                     (default sample: accepted with probability sum min(P, Q) rather\n"         \
    "                     than P(argmax Q)); greedy and match acceptance always draft the argmax\n"

/* The option value after argv[*i], advancing *i; NULL (and an error printed)
 * if missing. */
const char *cli_value(int argc, char **argv, int *i);

/* The model directory: -m DIR, else $NEXTN_MODEL, else the bundled default model. */
const char *cli_default_model(void);

/* Options every model-loading command takes: -m DIR, -t N, --ref, --kernels,
 * --f32-activations, --kv-cache. */
typedef struct {
    const char *dir;
    nx_load_opts load;
} cli_model_opts;

#define CLI_MODEL_HELP                                                              \
    "  -m, --model DIR    checkpoint directory (default: $NEXTN_MODEL, else the bundled model)\n" \
    "  -t, --threads N    worker threads (default: one per physical core)\n"                  \
    "  --ref              use the scalar reference kernels (slow; for checking)\n"                 \
    "  --kernels SET      newest kernel set to use: auto (default: the newest this CPU runs),\n" \
    "                     avx512vnni, avxvnni, avx2 or scalar (the three SIMD sets give the\n"    \
    "                     same bits)\n"                                                          \
    "  --f32-activations  quantized weights multiply f32 activations, not int8 (slower, closer)\n" \
    "  --kv-cache f32|f16 how states store attention's K and V rows (default f32; f16: half\n"  \
    "                     the memory and the bytes a step reads at long contexts)\n"

/* If argv[*i] is one of the model options, consumes it (and its value) and
 * returns 1; returns 0 if it is not; -1 (error printed) on a bad value. */
int cli_model_option(int argc, char **argv, int *i, cli_model_opts *o);
/* Loads the model, printing the library's error on failure. */
nx_model *cli_load_model(const cli_model_opts *o);

/* Writes a float32 little-endian .npy of shape [rows, cols]. 0 on success. */
int cli_write_npy(const char *path, const float *data, int64_t rows, int64_t cols);

/* Reads a whole file ("-": standard input) into a malloc'd NUL-terminated
 * buffer (caller frees); NULL (nothing printed, errno set) on error. *len
 * may be NULL. */
char *cli_read_file(const char *path, size_t *len);

/* How errors name a file read with cli_read_file: "standard input" for "-". */
const char *cli_source_name(const char *path);
/* Checked where a text is read, so an error names where it came from and the
 * byte within it, not a tokenizer's or chat renderer's internal buffer:
 * 0 if text[0..len) is valid UTF-8, else prints "nextn: SOURCE: invalid
 * UTF-8 at byte N" and returns 1. */
int cli_check_utf8(const char *source, const char *text, size_t len);

/* Loads the tokenizer of a model directory (-m DIR or the default), printing
 * the library's error on failure. */
nx_tokenizer *cli_load_tokenizer(const char *dir);

/* Loads a chat template: from FILE if given, else the tokenizer's. Prints
 * the error on failure. */
nx_chat_template *cli_load_chat_template(const char *file, const nx_tokenizer *tok, const char *dir);

/* Writes s as a JSON string literal (quotes, escapes) to f. */
void cli_json_string(FILE *f, const char *s, size_t len);

/* Monotonic seconds. */
double cli_now(void);

#endif
