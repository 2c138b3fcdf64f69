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
    "  -p, --prompt TEXT  the prompt as text (tokenized with DIR/tokenizer.json)\n"
    "  -f, --file FILE    read the prompt text from FILE\n"
    "  --chat             wrap the text prompt as one user turn with the chat template\n"
    "  --chat-template F  use this template file instead of the checkpoint's\n"
    "  --thinking on|off  enable_thinking for --chat (default: the template's default)\n"
    "  --parse-special    special tokens written in a plain text prompt become control tokens\n"
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
    "Output is text when DIR has a tokenizer.json (special tokens left out), else token ids.\n"
    "  --stats            print prefill / decode speed to stderr\n";

typedef struct {
    const char *prompt_ids, *prompt_text, *prompt_file;
    const char *chat_template, *thinking;
    long max_tokens;
    nx_sampling sp;
    int json, stats, ignore_eos, chat, parse_special;
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
        if (strcmp(a, "--chat") == 0) { g->chat = 1; continue; }
        if (strcmp(a, "--parse-special") == 0) { g->parse_special = 1; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (strcmp(a, "--prompt-ids") == 0) g->prompt_ids = v;
        else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) g->prompt_text = v;
        else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) g->prompt_file = v;
        else if (strcmp(a, "--chat-template") == 0) g->chat_template = v;
        else if (strcmp(a, "--thinking") == 0) {
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) return cli_usage_error("--thinking wants on or off, got '%s'", v);
            g->thinking = v;
        }
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
    if ((g->chat || g->chat_template || g->thinking) && g->prompt_ids)
        return cli_usage_error("generate: --chat, --chat-template and --thinking need a text prompt (-p or -f)");
    if ((g->chat_template || g->thinking) && !g->chat) return cli_usage_error("generate: --chat-template and --thinking go with --chat");
    return 0;
}

static int is_stop(const nx_model_info *in, const int32_t *extra, int n_extra, int32_t id) {
    for (int i = 0; i < in->n_eos; i++)
        if (in->eos_ids[i] == id) return 1;
    for (int i = 0; i < n_extra; i++)
        if (extra[i] == id) return 1;
    return 0;
}

static void print_ids(FILE *f, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
}

static int has_tokenizer(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* Renders text as one user turn with the chat template, ending with the
 * assistant opener. Returns the rendered prompt (free with nx_free) or NULL
 * after printing the error. */
static char *render_chat(const gen_opts *g, const nx_tokenizer *tok, const char *dir, const char *text, size_t len) {
    char err[1024], *msgs = NULL, *rendered = NULL;
    size_t mlen;
    nx_chat_template *ct = cli_load_chat_template(g->chat_template, tok, dir);
    FILE *m = ct ? open_memstream(&msgs, &mlen) : NULL;
    if (m) {
        fputs("[{\"role\":\"user\",\"content\":", m);
        cli_json_string(m, text, len);
        fputs("}]", m);
        fclose(m);
        nx_chat_request req = {msgs, NULL, 1, g->thinking ? strcmp(g->thinking, "on") == 0 : -1};
        if (nx_chat_render(ct, &req, &rendered, err, sizeof err)) cli_fail("%s", err);
    } else if (ct) {
        cli_fail("out of memory");
    }
    free(msgs);
    nx_chat_template_free(ct);
    return rendered;
}

/* The prompt as token ids: parsed from --prompt-ids, or the text of -p / -f
 * (rendered as one user turn with --chat) through the tokenizer. Returns 0,
 * or the exit code after printing the error. */
static int prompt_ids(const gen_opts *g, nx_tokenizer *tok, const char *dir, int32_t **ids, int *n) {
    if (g->prompt_ids) {
        if (cli_parse_ids(g->prompt_ids, ids, n))
            return cli_usage_error("generate: --prompt-ids wants comma-separated token ids, got '%s'", g->prompt_ids);
        return 0;
    }
    if (!tok) return cli_fail("%s: no tokenizer.json, so text prompts cannot be tokenized; give --prompt-ids", dir);
    size_t len = 0;
    char *file_text = NULL, *rendered = NULL, err[1024];
    if (g->prompt_file && !(file_text = cli_read_file(g->prompt_file, &len))) return cli_fail("%s: cannot read", g->prompt_file);
    const char *text = file_text ? file_text : g->prompt_text;
    if (!file_text) len = strlen(text);
    /* Plain prompts keep special-token strings as text unless asked; a
     * rendered chat prompt is tokenized as HF does, control tokens parsed. */
    nx_special_mode mode = g->parse_special ? NX_SPECIAL_PARSE : NX_SPECIAL_AS_TEXT;
    int rc = 1;
    if (g->chat) {
        if (!(rendered = render_chat(g, tok, dir, text, len))) goto done;
        text = rendered;
        len = strlen(rendered);
        mode = NX_SPECIAL_PARSE;
    }
    if (nx_tokenize(tok, text, len, mode, ids, n, err, sizeof err)) cli_fail("%s", err);
    else if (*n == 0) cli_fail("generate: the prompt is empty");
    else rc = 0;
done:
    free(file_text);
    nx_free(rendered);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    cli_model_opts mo = {0};
    gen_opts g = {.max_tokens = 64, .sp = nx_sampling_default()};
    int r = parse_opts(argc, argv, &mo, &g);
    if (r) return r < 0 ? 0 : r;
    const char *dir = mo.dir ? mo.dir : cli_default_model();

    int rc = 1, n_gen = 0, n_prompt = 0, n_stop = 0;
    char err[1024], *text = NULL;
    size_t text_len = 0;
    const int32_t *stop = NULL;
    int32_t *prompt = NULL, *hist = NULL;
    nx_tokenizer *tok = NULL;
    nx_detok_stream *ds = NULL;
    nx_state *s = NULL;
    nx_sampler *smp = NULL;
    float *logits = NULL;
    nx_model *m = NULL;
    if (has_tokenizer(dir) && !(tok = cli_load_tokenizer(dir))) goto done;
    if ((r = prompt_ids(&g, tok, dir, &prompt, &n_prompt))) { rc = r; goto done; }
    if (tok) n_stop = nx_tokenizer_stop_ids(tok, &stop);
    if (!(m = cli_load_model(&mo))) goto done;
    const nx_model_info *in = nx_model_get_info(m);
    if (!(hist = malloc((size_t)(n_prompt + g.max_tokens) * sizeof *hist))) { cli_fail("out of memory"); goto done; }
    if (nx_state_new(m, n_prompt + (int)g.max_tokens, &s, err, sizeof err) ||
        nx_sampler_new(in->vocab_size, &smp, err, sizeof err) ||
        (tok && nx_detok_stream_new(tok, 1, &ds, err, sizeof err))) {
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
        int32_t tok_id = nx_sample(smp, &g.sp, logits, hist, (int)pos, pos);
        hist[n_prompt + n_gen++] = tok_id;
        if (!g.json) {
            size_t len = 0;
            const char *piece = ds ? nx_detok_stream_push(ds, tok_id, &len) : NULL;
            if (ds) fwrite(piece, 1, len, stdout);
            else printf("%s%d", n_gen > 1 ? " " : "", tok_id);
            fflush(stdout);
        }
        if (!g.ignore_eos && is_stop(in, stop, n_stop, tok_id)) break;
        if (n_gen == g.max_tokens) break;
        if (nx_forward(m, s, &tok_id, 1, &fo, err, sizeof err)) { cli_fail("%s", err); goto done; }
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
        printf("],\"text\":");
        if (tok && nx_detokenize(tok, hist + n_prompt, n_gen, 1, &text, &text_len, err, sizeof err) == NX_OK)
            cli_json_string(stdout, text, text_len);
        else
            printf("null");
        printf(",\"stats\":{\"prompt_tokens\":%d,\"generated_tokens\":%d,\"prefill_s\":%.6f,"
               "\"prefill_tok_s\":%.2f,\"decode_s\":%.6f,\"decode_tok_s\":%.2f}}\n",
               n_prompt, n_gen, t1 - t0, prefill_tps, t2 - t1, decode_tps);
    } else {
        size_t len = 0;
        const char *tail = ds ? nx_detok_stream_flush(ds, &len) : NULL;
        if (ds) fwrite(tail, 1, len, stdout);
        printf("\n");
    }
    fflush(stdout); /* keep the stats line after the streamed output */
    if (g.stats)
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s)\n", n_prompt,
                t1 - t0, prefill_tps, n_gen, t2 - t1, decode_tps);
    rc = 0;
done:
    free(prompt);
    free(hist);
    free(logits);
    nx_free(text);
    nx_detok_stream_free(ds);
    nx_tokenizer_free(tok);
    nx_sampler_free(smp);
    nx_state_free(s);
    nx_model_free(m);
    return rc;
}
