/* cmd_logits.c — `nextn logits`: logits and hidden rows for every position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *logits_help =
    "usage: nextn logits [-m DIR] --tokens 1,2,3 [--out target.npy] [--hidden-out h.npy] [--prenorm-out p.npy]\n"
    "                    [--mtp-out m.npy [--mtp DIR]]  (at least one output)\n"
    "Runs the token ids through the model in one call and writes float32 .npy files:\n"
    "[L, vocab] logits, [L, hidden] post-final-norm and pre-final-norm hidden rows.\n\n" CLI_MODEL_HELP
    "  --tokens IDS       comma-separated token ids\n"
    "  --out F            logits output (.npy)\n"
    "  --hidden-out F     post-final-norm hidden rows (.npy), the MTP head's input\n"
    "  --prenorm-out F    last layer output before the final norm (.npy)\n"
    "  --mtp-out F        the MTP head's teacher-forced first-step logits [L-1, vocab] (.npy):\n"
    "                     row p from token p+1 and hidden row p\n"
    "  --mtp DIR          drafter directory for --mtp-out (default: the checkpoint's mtp.* tensors)\n"
    "  --mtp-hidden post|prenorm   which target hidden feeds the head (default post)\n";

int cmd_logits(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *tokens = NULL, *out = NULL, *hidden_out = NULL, *prenorm_out = NULL, *mtp_out = NULL, *mtp_dir = NULL;
    const char *mtp_hidden = "post";
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &mo);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(logits_help, stdout); return 0; }
        const char **slot = strcmp(a, "--tokens") == 0        ? &tokens
                            : strcmp(a, "--out") == 0         ? &out
                            : strcmp(a, "--hidden-out") == 0  ? &hidden_out
                            : strcmp(a, "--prenorm-out") == 0 ? &prenorm_out
                            : strcmp(a, "--mtp-out") == 0     ? &mtp_out
                            : strcmp(a, "--mtp") == 0         ? &mtp_dir
                            : strcmp(a, "--mtp-hidden") == 0  ? &mtp_hidden
                                                              : NULL;
        if (!slot) return cli_usage_error("logits: unknown option '%s' (see nextn logits --help)", a);
        if (!(*slot = cli_value(argc, argv, &i))) return 2;
    }
    if (!tokens) return cli_usage_error("logits: --tokens is required");
    if (!out && !hidden_out && !prenorm_out && !mtp_out)
        return cli_usage_error("logits: give at least one of --out, --hidden-out, --prenorm-out, --mtp-out");
    if (strcmp(mtp_hidden, "post") != 0 && strcmp(mtp_hidden, "prenorm") != 0)
        return cli_usage_error("logits: --mtp-hidden wants post or prenorm, got '%s'", mtp_hidden);
    int32_t *ids;
    int n;
    if (cli_parse_ids(tokens, &ids, &n)) return cli_usage_error("logits: --tokens wants comma-separated token ids, got '%s'", tokens);

    int rc = 1;
    char err[1024];
    nx_model *m = cli_load_model(&mo);
    nx_state *s = NULL;
    float *logits = NULL, *hidden = NULL, *prenorm = NULL, *mtp = NULL;
    nx_drafter *d = NULL;
    if (!m) goto done;
    const nx_model_info *in = nx_model_get_info(m);
    if (nx_state_new(m, n, &s, err, sizeof err)) { cli_fail("%s", err); goto done; }
    size_t V = (size_t)in->vocab_size, H = (size_t)in->hidden_size;
    if ((out && !(logits = malloc((size_t)n * V * sizeof(float)))) ||
        (hidden_out && !(hidden = malloc((size_t)n * H * sizeof(float)))) ||
        (prenorm_out && !(prenorm = malloc((size_t)n * H * sizeof(float))))) {
        cli_fail("out of memory for %d rows of output", n);
        goto done;
    }
    nx_forward_out fo = {.logits = logits, .hidden = hidden, .prenorm = prenorm, .all_rows = 1};
    /* --mtp-out alone needs no target outputs here (the drafter runs its own target pass) */
    if ((out || hidden_out || prenorm_out) && nx_forward(m, s, ids, n, &fo, err, sizeof err)) {
        cli_fail("%s", err);
        goto done;
    }
    if (out && cli_write_npy(out, logits, n, (int64_t)V)) { cli_fail("%s: cannot write", out); goto done; }
    if (hidden_out && cli_write_npy(hidden_out, hidden, n, (int64_t)H)) { cli_fail("%s: cannot write", hidden_out); goto done; }
    if (prenorm_out && cli_write_npy(prenorm_out, prenorm, n, (int64_t)H)) { cli_fail("%s: cannot write", prenorm_out); goto done; }
    if (mtp_out) {
        nx_drafter_opts dop = {.hidden_prenorm = strcmp(mtp_hidden, "prenorm") == 0};
        if (n < 2) { cli_fail("logits: --mtp-out needs at least 2 tokens"); goto done; }
        if (!(mtp = malloc((size_t)(n - 1) * V * sizeof(float)))) { cli_fail("out of memory"); goto done; }
        if (nx_drafter_load(m, mtp_dir, &dop, &d, err, sizeof err) ||
            nx_drafter_teacher_forced(d, ids, n, mtp, NULL, err, sizeof err)) {
            cli_fail("%s", err);
            goto done;
        }
        if (cli_write_npy(mtp_out, mtp, n - 1, (int64_t)V)) { cli_fail("%s: cannot write", mtp_out); goto done; }
    }
    rc = 0;
done:
    free(ids);
    free(logits);
    free(hidden);
    free(prenorm);
    free(mtp);
    nx_drafter_free(d);
    nx_state_free(s);
    nx_model_free(m);
    return rc;
}
