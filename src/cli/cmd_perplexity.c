/* cmd_perplexity.c — `nextn perplexity`: how well the model predicts a text.
 *
 * The text is cut into windows of --ctx tokens; each window is read from a
 * fresh state, and every token but its first is scored by the model's
 * log-probability of it given the tokens before it in the window
 * (nx_spec_input_logprobs). Perplexity = exp(mean negative log-likelihood).
 * The figure to compare quantizations of one model by (q4 against q8 against
 * bf16 on the same text and --ctx), as llama.cpp's perplexity tool is used;
 * figures from other tools agree only with the same windows and scoring. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *perplexity_help =
    "usage: nextn perplexity [-m DIR] (-f FILE | --text TEXT | --ids 1,2,3) [--ctx 512] [--json]\n"
    "Scores a text: cut into windows of --ctx tokens, each read from a fresh state, every token but\n"
    "a window's first scored by the model's log-probability of it after the ones before it.\n"
    "Prints the perplexity exp(mean NLL) with its standard error, the mean NLL and the tokens scored.\n\n" CLI_MODEL_HELP
    "  -f, --file FILE    the text to score (UTF-8; - for standard input)\n"
    "  --text TEXT        the text, given inline\n"
    "  --ids IDS          token ids instead of a text (comma-separated)\n"
    "  --ctx N            window length in tokens (default 512, or the model's context if\n"
    "                     smaller; at least 2, at most the model's context)\n"
    "  --json             one JSON object: perplexity, perplexity_se, nll_mean, tokens, windows, ctx, seconds\n";

/* Adds the scores of window ids[0..n) (n >= 2) to *sum and *sum2 (the NLL
 * and its square over tokens). Returns 0, or 1 with the error printed. */
static int score_window(const nx_model *m, const int32_t *ids, int n, double *sum, double *sum2) {
    char err[1024];
    nx_spec_opts so = {.accept = NX_ACCEPT_GREEDY, .sampling = nx_sampling_default(), .input_logprobs = 1};
    nx_spec *s = NULL;
    int got = 0;
    const nx_token_logprob *lp = NULL;
    if (nx_spec_new(m, NULL, n, &so, &s, err, sizeof err) == NX_OK &&
        nx_spec_absorb(s, ids, n, err, sizeof err) == NX_OK)
        lp = nx_spec_input_logprobs(s, &got);
    if (lp && got == n - 1)
        for (int i = 0; i < got; i++) {
            const double nll = -(double)lp[i].logprob;
            *sum += nll, *sum2 += nll * nll;
        }
    nx_spec_free(s);
    if (lp && got == n - 1) return 0;
    cli_fail("perplexity: %s", lp ? "the window was not scored whole" : err);
    return 1;
}

int cmd_perplexity(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *file = NULL, *text = NULL, *ids_arg = NULL, *ctx_arg = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &mo);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(perplexity_help, stdout); return 0; }
        if (strcmp(a, "--json") == 0) { json = 1; continue; }
        const char **slot = strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0 ? &file
                            : strcmp(a, "--text") == 0                          ? &text
                            : strcmp(a, "--ids") == 0                           ? &ids_arg
                            : strcmp(a, "--ctx") == 0                           ? &ctx_arg
                                                                                : NULL;
        if (!slot) return cli_usage_error("perplexity: unknown option '%s' (see nextn perplexity --help)", a);
        if (!(*slot = cli_value(argc, argv, &i))) return 2;
    }
    if ((file != NULL) + (text != NULL) + (ids_arg != NULL) != 1)
        return cli_usage_error("perplexity: give one of -f FILE, --text TEXT, --ids IDS");
    long ctx = 512;
    if (ctx_arg && cli_parse_int(ctx_arg, 2, 1 << 24, &ctx))
        return cli_usage_error("perplexity: --ctx wants an integer in [2, %d], got '%s'", 1 << 24, ctx_arg);

    int rc = 1, n = 0;
    int32_t *ids = NULL;
    char *owned = NULL, err[1024];
    nx_model *m = NULL;
    nx_tokenizer *tok = NULL;
    if (ids_arg && cli_parse_ids(ids_arg, &ids, &n)) return cli_usage_error("perplexity: --ids wants comma-separated token ids");
    size_t owned_len = 0;
    if (file && !(owned = cli_read_file(file, &owned_len))) {
        cli_fail("%s: cannot read the text: %s", file, strerror(errno));
        goto done;
    }
    if (!ids) { /* the text, as the model's tokenizer reads it (special tokens written in it are text) */
        const char *t = owned ? owned : text;
        const size_t t_len = owned ? owned_len : strlen(t);
        int32_t *tid = NULL;
        if (cli_check_utf8(file ? cli_source_name(file) : "--text", t, t_len)) goto done;
        if (!(tok = cli_load_tokenizer(mo.dir))) goto done;
        if (nx_tokenize(tok, t, t_len, NX_SPECIAL_AS_TEXT, &tid, &n, err, sizeof err) != NX_OK) {
            cli_fail("%s: %s", file ? file : "--text", err);
            goto done;
        }
        ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
        if (ids && n) memcpy(ids, tid, (size_t)n * sizeof *ids);
        nx_free(tid);
        if (!ids) { cli_fail("out of memory"); goto done; }
    }
    if (n < 2) {
        cli_fail("perplexity: %d tokens: at least 2 are needed", n);
        goto done;
    }
    if (!(m = cli_load_model(&mo))) goto done;
    const int max_pos = nx_model_get_info(m)->max_position_embeddings;
    if (ctx > max_pos) {   /* the default shrinks to a smaller model's context; a --ctx asked for is checked */
        if (ctx_arg) {
            cli_usage_error("perplexity: --ctx %ld exceeds the model's context of %d tokens", ctx, max_pos);
            rc = 2;
            goto done;
        }
        ctx = max_pos;
    }
    double sum = 0, sum2 = 0, t0 = cli_now();
    int windows = 0, scored = 0;
    for (int at = 0; at < n; at += (int)ctx) {
        int w = n - at < ctx ? n - at : (int)ctx;
        if (w < 2) break;   /* a last window of one token has nothing to score */
        if (score_window(m, ids + at, w, &sum, &sum2)) goto done;
        windows++, scored += w - 1;
    }
    double secs = cli_now() - t0, mean = sum / scored;
    /* the standard error of the mean NLL, carried to the perplexity (delta method) */
    double var = scored > 1 ? (sum2 / scored - mean * mean) * scored / (scored - 1) : 0;
    double ppl = exp(mean), se = ppl * sqrt(var > 0 ? var / scored : 0);
    if (json)
        printf("{\"perplexity\":%.6f,\"perplexity_se\":%.6f,\"nll_mean\":%.6f,\"tokens\":%d,\"windows\":%d,\"ctx\":%ld,"
               "\"seconds\":%.3f}\n",
               ppl, se, mean, scored, windows, ctx, secs);
    else
        printf("perplexity %.4f +/- %.4f (mean NLL %.5f) over %d tokens in %d window%s of up to %ld; %.2f s, %.1f tok/s\n", ppl,
               se, mean, scored, windows, windows == 1 ? "" : "s", ctx, secs, secs > 0 ? (scored + windows) / secs : 0.0);
    rc = 0;
done:
    free(ids);
    free(owned);
    nx_tokenizer_free(tok);
    nx_model_free(m);
    return rc;
}
