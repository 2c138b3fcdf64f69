/* cmd_generate.c — `nextn generate`: prefill a prompt, then decode. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *generate_help =
    "usage: nextn generate [-m DIR] (--prompt-ids 1,2,3 | -p TEXT | -f FILE) [-n N] [sampling] [--json] [--stats]\n"
    "Generates up to N tokens after the prompt and streams them to stdout.\n\n" CLI_MODEL_HELP
    "  --prompt-ids IDS   the prompt as comma-separated token ids\n"
    "  -p, --prompt TEXT  the prompt as text (needs the tokenizer)\n"
    "  -f, --file FILE    read the prompt text from FILE (needs the tokenizer)\n"
    "  -n, --max-tokens N tokens to generate (default 64)\n"
    "  --temp T           temperature; 0 = greedy (default 0)\n"
    "  --top-k K          keep the K most likely tokens (default 0 = off)\n"
    "  --top-p P          nucleus sampling mass (default 1 = off)\n"
    "  --min-p P          drop tokens below P x the top probability (default 0 = off)\n"
    "  --repeat-penalty R repetition penalty (default 1 = off)\n"
    "  --presence-penalty P, --frequency-penalty F   (default 0 = off)\n"
    "  --seed S           sampling seed (default 0); draws are keyed by (seed, position)\n"
    "  --ignore-eos       keep going past end-of-sequence tokens\n"
    "  --json             print one JSON object {prompt_ids, ids, text, stats} at the end\n"
    "  --stats            print prefill / decode speed to stderr\n";

typedef struct {
    const char *prompt_ids, *prompt_text, *prompt_file;
    long max_tokens;
    nx_sampling sp;
    int json, stats, ignore_eos;
} gen_opts;

static int parse_opts(int argc, char **argv, cli_model_opts *mo, gen_opts *g) {
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, mo);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v;
        double d;
        long k;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(generate_help, stdout); return -1; }
        if (strcmp(a, "--json") == 0) { g->json = 1; continue; }
        if (strcmp(a, "--stats") == 0) { g->stats = 1; continue; }
        if (strcmp(a, "--ignore-eos") == 0) { g->ignore_eos = 1; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (strcmp(a, "--prompt-ids") == 0) g->prompt_ids = v;
        else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) g->prompt_text = v;
        else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) g->prompt_file = v;
        else if (strcmp(a, "-n") == 0 || strcmp(a, "--max-tokens") == 0) {
            if (cli_parse_int(v, 0, 1 << 24, &g->max_tokens)) return cli_usage_error("%s wants an integer >= 0, got '%s'", a, v);
        } else if (strcmp(a, "--top-k") == 0) {
            if (cli_parse_int(v, 0, 1 << 24, &k)) return cli_usage_error("--top-k wants an integer >= 0, got '%s'", v);
            g->sp.top_k = (int)k;
        } else if (strcmp(a, "--seed") == 0) {
            if (cli_parse_u64(v, &g->sp.seed)) return cli_usage_error("--seed wants an unsigned integer, got '%s'", v);
        } else {
            static const struct { const char *name; double lo, hi; size_t off; } fl[] = {
                {"--temp", 0, 100, offsetof(nx_sampling, temperature)},
                {"--top-p", 0, 1, offsetof(nx_sampling, top_p)},
                {"--min-p", 0, 1, offsetof(nx_sampling, min_p)},
                {"--repeat-penalty", 0.01, 100, offsetof(nx_sampling, repetition_penalty)},
                {"--presence-penalty", -100, 100, offsetof(nx_sampling, presence_penalty)},
                {"--frequency-penalty", -100, 100, offsetof(nx_sampling, frequency_penalty)},
            };
            size_t f = 0;
            while (f < sizeof fl / sizeof *fl && strcmp(a, fl[f].name) != 0) f++;
            if (f == sizeof fl / sizeof *fl) return cli_usage_error("generate: unknown option '%s' (see nextn generate --help)", a);
            if (cli_parse_float(v, fl[f].lo, fl[f].hi, &d))
                return cli_usage_error("%s wants a number in [%g, %g], got '%s'", a, fl[f].lo, fl[f].hi, v);
            *(float *)((char *)&g->sp + fl[f].off) = (float)d;
        }
    }
    int sources = !!g->prompt_ids + !!g->prompt_text + !!g->prompt_file;
    if (sources != 1) return cli_usage_error("generate: give exactly one of --prompt-ids, -p, -f");
    if (g->prompt_text || g->prompt_file)
        return cli_usage_error("generate: text prompts need the tokenizer, which is not built yet; give --prompt-ids");
    return 0;
}

static int is_eos(const nx_model_info *in, int32_t id) {
    for (int i = 0; i < in->n_eos; i++)
        if (in->eos_ids[i] == id) return 1;
    return 0;
}

static void print_ids(FILE *f, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
}

int cmd_generate(int argc, char **argv) {
    cli_model_opts mo = {0};
    gen_opts g = {.max_tokens = 64, .sp = nx_sampling_default()};
    int r = parse_opts(argc, argv, &mo, &g);
    if (r) return r < 0 ? 0 : r;
    int32_t *prompt;
    int n_prompt;
    if (cli_parse_ids(g.prompt_ids, &prompt, &n_prompt))
        return cli_usage_error("generate: --prompt-ids wants comma-separated token ids, got '%s'", g.prompt_ids);

    int rc = 1, n_gen = 0;
    char err[1024];
    nx_state *s = NULL;
    nx_sampler *smp = NULL;
    float *logits = NULL;
    int32_t *hist = malloc((size_t)(n_prompt + g.max_tokens) * sizeof *hist);
    nx_model *m = cli_load_model(&mo);
    if (!m || !hist) goto done;
    const nx_model_info *in = nx_model_get_info(m);
    if (nx_state_new(m, n_prompt + (int)g.max_tokens, &s, err, sizeof err) ||
        nx_sampler_new(in->vocab_size, &smp, err, sizeof err)) {
        cli_fail("%s", err);
        goto done;
    }
    if (!(logits = malloc((size_t)in->vocab_size * sizeof *logits))) { cli_fail("out of memory"); goto done; }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    nx_forward_out fo = {.logits = logits};

    double t0 = cli_now();
    if (nx_forward(m, s, prompt, n_prompt, &fo, err, sizeof err)) { cli_fail("%s", err); goto done; }
    double t1 = cli_now();
    while (n_gen < g.max_tokens) {
        int64_t pos = n_prompt + n_gen;
        int32_t tok = nx_sample(smp, &g.sp, logits, hist, (int)pos, pos);
        hist[n_prompt + n_gen++] = tok;
        if (!g.json) {
            printf("%s%d", n_gen > 1 ? " " : "", tok);
            fflush(stdout);
        }
        if (!g.ignore_eos && is_eos(in, tok)) break;
        if (n_gen == g.max_tokens) break;
        if (nx_forward(m, s, &tok, 1, &fo, err, sizeof err)) { cli_fail("%s", err); goto done; }
    }
    double t2 = cli_now();
    /* decode time covers n_gen - 1 single-token forwards (the first token
     * comes from the prefill logits) */
    double prefill_tps = n_prompt / (t1 - t0), decode_tps = n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0;
    if (g.json) {
        printf("{\"prompt_ids\":[");
        print_ids(stdout, prompt, n_prompt);
        printf("],\"ids\":[");
        print_ids(stdout, hist + n_prompt, n_gen);
        printf("],\"text\":null,\"stats\":{\"prompt_tokens\":%d,\"generated_tokens\":%d,\"prefill_s\":%.6f,"
               "\"prefill_tok_s\":%.2f,\"decode_s\":%.6f,\"decode_tok_s\":%.2f}}\n",
               n_prompt, n_gen, t1 - t0, prefill_tps, t2 - t1, decode_tps);
    } else {
        printf("\n");
    }
    fflush(stdout); /* keep the stats line after the streamed ids */
    if (g.stats)
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s)\n", n_prompt,
                t1 - t0, prefill_tps, n_gen, t2 - t1, decode_tps);
    rc = 0;
done:
    free(prompt);
    free(hist);
    free(logits);
    nx_sampler_free(smp);
    nx_state_free(s);
    nx_model_free(m);
    return rc;
}
