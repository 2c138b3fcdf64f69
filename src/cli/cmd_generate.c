/* cmd_generate.c — `nextn generate`: prefill a prompt, then decode. */
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *generate_help =
    "usage: nextn generate [-m DIR] (--prompt-ids 1,2,3 | -p TEXT | -f FILE) [-n N] [sampling] [--json] [--stats]\n"
    "Generates up to N tokens after the prompt and streams them to stdout.\n\n" CLI_MODEL_HELP
    "  --prompt-ids IDS   the prompt as comma-separated token ids\n"
    "  -p, --prompt TEXT  the prompt as text (tokenized with DIR/tokenizer.json)\n"
    "  -f, --file FILE    read the prompt text from FILE (- for standard input)\n"
    "  --chat             wrap the text prompt as one user turn with the chat template\n"
    "  --chat-template F  use this template file instead of the checkpoint's\n"
    "  --thinking on|off  enable_thinking for --chat (default: the template's default)\n"
    "  --parse-special    special tokens written in a plain text prompt become control tokens\n"
    "  -n, --max-tokens N tokens to generate (default 64)\n"
    CLI_SAMPLING_HELP
    "  --logit-bias ID:B[,ID:B...]  add B (-100..100) to token ID's logit before anything\n"
    "                     else (-100 all but bans it); may be given again to add more\n"
    "  --ignore-eos       keep going past end-of-sequence tokens\n"
    "  --mtp on|off|DIR   speculative decoding with the MTP head: the checkpoint's own (on,\n"
    "                     the default when it has one), none (off), or a drafter directory\n"
    "  --draft K|auto     drafts per round, or auto: K adapts to the measured acceptance and\n"
    "                     cost, down to plain decoding where drafts do not pay (the default when\n"
    "                     the output cannot depend on it: greedy or match acceptance, or --temp 0\n"
    "                     or --top-k 1; under rejection sampling the default is the drafter's\n"
    "                     block_size - 1, since auto's timing-driven choices would change which\n"
    "                     sample a seed gives)\n"
    "  --accept MODE      greedy | match | rejection (default: greedy at --temp 0, else rejection)\n"
    CLI_DRAFT_PICK_HELP
    "  --mtp-hidden post|prenorm   target hidden fed to the head (default post)\n"
    "  --draft-vocab N    draft over token ids [0, N) only (the first N rows of the LM\n"
    "                     head); verification still uses the whole vocabulary\n"
    "  --draft-head-bits B|auto  draft with a B-bit copy of the LM head made at load (2-6,\n"
    "                     8; only when smaller than the head), or 0: the head as stored;\n"
    "                     default auto: 4 bits for a head stored wider and of 64 MiB or more\n"
    "                     when drafts do not go through a screen (--draft-screen).\n"
    "                     Verification uses the head: greedy and match output is unchanged;\n"
    "                     under rejection sampling the distribution is, but which sample a\n"
    "                     seed gives depends on the drafts\n"
    CLI_DRAFT_SCREEN_HELP
    "  --save-state F     write the session (target state, drafter entries, sequence) to F\n"
    "  --load-state F     continue the session saved in F: the prompt, if any, is appended\n"
    "                     after it as tokens -- with --chat as the next user turn (a newline,\n"
    "                     then the template's rendering of that turn) -- then generation\n"
    "                     goes on\n"
    "  --echo             print the prompt's text before the generated text\n"
    "  --json             print one JSON object {prompt_ids, ids, text, stats, and mtp\n"
    "                     with a drafter} at the end\n"
    "  --stats            print prefill / decode speed and, with a drafter, MTP acceptance\n"
    "                     (else 'mtp: off') to stderr\n"
    "Output is text when DIR has a tokenizer.json (special tokens left out), else token ids.\n";

typedef struct {
    const char *prompt_ids, *prompt_text, *prompt_file;
    const char *chat_template, *thinking, *mtp, *mtp_hidden, *save_state, *load_state;
    cli_mtp mtp_mode;   /* what --mtp (mtp) says */
    int draft;
    long draft_vocab;
    long draft_head_bits;
    long draft_screen;
    nx_accept_mode accept;
    nx_draft_pick draft_pick;
    long max_tokens;
    nx_sampling sp;
    nx_logit_bias bias[NX_MAX_LOGIT_BIAS];   /* sp.logit_bias */
    int json, stats, ignore_eos, chat, parse_special, echo;
} gen_opts;

/* One "ID:B" of --logit-bias into g's logit bias: 0, or -1 if malformed or
 * the bias is full. */
static int parse_one_bias(char *tok, void *ctx) {
    gen_opts *g = ctx;
    char *colon = strchr(tok, ':');
    long id;
    double b;
    if (!colon || g->sp.n_logit_bias == NX_MAX_LOGIT_BIAS) return -1;
    *colon = '\0';
    if (cli_parse_int(tok, 0, INT32_MAX, &id) || cli_parse_float(colon + 1, -100, 100, &b)) return -1;
    g->bias[g->sp.n_logit_bias++] = (nx_logit_bias){(int32_t)id, (float)b};
    return 0;
}

/* Appends "ID:B[,ID:B...]" to g's logit bias. 0, or -1 if malformed or full. */
static int parse_logit_bias(const char *v, gen_opts *g) {
    g->sp.logit_bias = g->bias;
    return cli_parse_list(v, parse_one_bias, g);
}

static int parse_opts(int argc, char **argv, cli_model_opts *mo, gen_opts *g) {
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, mo);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v;
        long k;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(generate_help, stdout); return -1; }
        if (strcmp(a, "--json") == 0) { g->json = 1; continue; }
        if (strcmp(a, "--stats") == 0) { g->stats = 1; continue; }
        if (strcmp(a, "--echo") == 0) { g->echo = 1; continue; }
        if (strcmp(a, "--ignore-eos") == 0) { g->ignore_eos = 1; continue; }
        if (strcmp(a, "--chat") == 0) { g->chat = 1; continue; }
        if (strcmp(a, "--parse-special") == 0) { g->parse_special = 1; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (strcmp(a, "--prompt-ids") == 0) g->prompt_ids = v;
        else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) g->prompt_text = v;
        else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) g->prompt_file = v;
        else if (strcmp(a, "--chat-template") == 0) g->chat_template = v;
        else if (strcmp(a, "--mtp") == 0) {
            if (cli_parse_mtp(v, &g->mtp_mode)) return 2;
            g->mtp = v;
        }
        else if (strcmp(a, "--save-state") == 0) g->save_state = v;
        else if (strcmp(a, "--load-state") == 0) g->load_state = v;
        else if (strcmp(a, "--mtp-hidden") == 0) {
            if (strcmp(v, "post") != 0 && strcmp(v, "prenorm") != 0) return cli_usage_error("--mtp-hidden wants post or prenorm, got '%s'", v);
            g->mtp_hidden = v;
        } else if (strcmp(a, "--draft") == 0) {
            if (strcmp(v, "auto") == 0) g->draft = NX_DRAFT_AUTO;
            else if (cli_parse_int(v, 1, NX_SPEC_MAX_DRAFT, &k)) return cli_usage_error("--draft wants 1..%d or auto, got '%s'", NX_SPEC_MAX_DRAFT, v);
            else g->draft = (int)k;
        } else if (strcmp(a, "--draft-vocab") == 0) {
            if (cli_parse_int(v, 1, 1 << 30, &g->draft_vocab)) return cli_usage_error("--draft-vocab wants a positive integer, got '%s'", v);
        } else if (strcmp(a, "--draft-head-bits") == 0) {
            if (cli_parse_head_bits(v, &g->draft_head_bits))
                return cli_usage_error("--draft-head-bits wants auto, 0, 2, 3, 4, 5, 6 or 8, got '%s'", v);
        } else if (strcmp(a, "--draft-screen") == 0) {
            if (cli_parse_screen(v, &g->draft_screen))
                return cli_usage_error("--draft-screen wants auto, off or a number of rows, got '%s'", v);
        } else if (strcmp(a, "--accept") == 0) {
            if (strcmp(v, "greedy") == 0) g->accept = NX_ACCEPT_GREEDY;
            else if (strcmp(v, "match") == 0) g->accept = NX_ACCEPT_MATCH;
            else if (strcmp(v, "rejection") == 0) g->accept = NX_ACCEPT_REJECTION;
            else return cli_usage_error("--accept wants greedy, match or rejection, got '%s'", v);
        } else if (strcmp(a, "--draft-pick") == 0) {
            if (cli_parse_draft_pick(v, &g->draft_pick)) return 2;
        }
        else if (strcmp(a, "--thinking") == 0) {
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) return cli_usage_error("--thinking wants on or off, got '%s'", v);
            g->thinking = v;
        }
        else if (strcmp(a, "-n") == 0 || strcmp(a, "--max-tokens") == 0) {
            if (cli_parse_int(v, 1, 1 << 24, &g->max_tokens)) return cli_usage_error("%s wants an integer in [1, %d], got '%s'", a, 1 << 24, v);
        } else if (strcmp(a, "--logit-bias") == 0) {
            if (parse_logit_bias(v, g))
                return cli_usage_error("--logit-bias wants ID:BIAS[,ID:BIAS...] with BIAS in [-100, 100] (at most %d), got '%s'",
                                       NX_MAX_LOGIT_BIAS, v);
        } else {
            const int r = cli_sampling_option(a, v, &g->sp);
            if (r < 0) return 2;
            if (r == 0) return cli_usage_error("generate: unknown option '%s' (see nextn generate --help)", a);
        }
    }
    if (g->prompt_text && !*g->prompt_text) {   /* nothing to prefill; after a loaded state: no prompt */
        if (!g->load_state) return cli_usage_error("generate: -p wants a non-empty prompt");
        g->prompt_text = NULL;
    }
    if (g->accept == NX_ACCEPT_GREEDY && g->sp.temperature > 0)
        fprintf(stderr, "nextn: note: --accept greedy takes the likeliest token; --temp %g is not used\n", g->sp.temperature);
    int sources = !!g->prompt_ids + !!g->prompt_text + !!g->prompt_file;
    if (sources > 1 || (sources == 0 && !g->load_state))
        return cli_usage_error("generate: give exactly one of --prompt-ids, -p, -f (optional with --load-state)");
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
    if (!g->prompt_ids && !g->prompt_text && !g->prompt_file) { /* --load-state alone */
        *ids = NULL;
        *n = 0;
        return 0;
    }
    if (g->prompt_ids) {
        if (cli_parse_ids(g->prompt_ids, ids, n))
            return cli_usage_error("generate: --prompt-ids wants comma-separated token ids, got '%s'", g->prompt_ids);
        return 0;
    }
    if (!tok) return cli_fail("%s: no tokenizer.json, so text prompts cannot be tokenized; give --prompt-ids", dir);
    size_t len = 0;
    char *file_text = NULL, *rendered = NULL, *next_turn = NULL, err[1024];
    if (g->prompt_file && !(file_text = cli_read_file(g->prompt_file, &len))) return cli_fail("%s: cannot read: %s", g->prompt_file, strerror(errno));
    const char *text = file_text ? file_text : g->prompt_text;
    if (!file_text) len = strlen(text);
    int rc = 1;
    if (cli_check_utf8(file_text ? cli_source_name(g->prompt_file) : "-p", text, len)) goto done;
    /* Plain prompts keep special-token strings as text unless asked; a
     * rendered chat prompt is tokenized as HF does, control tokens parsed. */
    nx_special_mode mode = g->parse_special ? NX_SPECIAL_PARSE : NX_SPECIAL_AS_TEXT;
    if (g->chat) {
        if (!(rendered = render_chat(g, tok, dir, text, len))) goto done;
        text = rendered;
        len = strlen(rendered);
        mode = NX_SPECIAL_PARSE;
        /* the next turn of a saved conversation: after the end-of-turn the
         * state ends with, the newline a whole conversation's rendering has
         * between turns */
        if (g->load_state && rendered[0] != '\n') {
            if (!(next_turn = malloc(len + 2))) { cli_fail("out of memory"); goto done; }
            next_turn[0] = '\n';
            memcpy(next_turn + 1, rendered, len + 1);
            text = next_turn;
            len++;
        }
    }
    if (nx_tokenize(tok, text, len, mode, ids, n, err, sizeof err)) cli_fail("%s", err);
    else if (*n == 0) cli_fail("generate: the prompt is empty");
    else rc = 0;
done:
    free(file_text);
    free(next_turn);
    nx_free(rendered);
    return rc;
}

/* Refuses a --save-state path the save could not write before the model
 * loads and the tokens are made, not after (the path itself is not touched:
 * it may be the --load-state file). 0, or 1 after printing the error. */
static int check_save_state(const char *path) {
    char err[1024];
    return nx_spec_save_check(path, err, sizeof err) ? cli_fail("%s", err) : 0;
}

/* Loads the drafter --mtp asks for: NULL with *rc = 0 when MTP is off or
 * (by default) the checkpoint has no head. */
static nx_drafter *load_drafter(const gen_opts *g, const nx_model *m, int *rc) {
    *rc = 0;
    if (g->mtp_mode == CLI_MTP_OFF || (g->mtp_mode == CLI_MTP_DEFAULT && !nx_model_get_info(m)->has_mtp)) return NULL;
    char err[1024];
    nx_drafter *d = NULL;
    nx_drafter_opts o = {g->mtp_hidden && strcmp(g->mtp_hidden, "prenorm") == 0, (int)g->draft_vocab,
                         (int)g->draft_head_bits, (int)g->draft_screen};
    if (nx_drafter_load(m, g->mtp_mode == CLI_MTP_DIR ? g->mtp : NULL, &o, &d, err, sizeof err)) *rc = cli_fail("%s", err);
    return d;
}

static void print_mtp_json(FILE *f, const nx_spec_stats *st, int k_max, int draft, int head_bits, int screen_k) {
    if (draft == NX_DRAFT_AUTO) fprintf(f, ",\"mtp\":{\"draft\":\"auto\",");
    else fprintf(f, ",\"mtp\":{\"draft\":%d,", draft);
    if (head_bits) fprintf(f, "\"draft_head_bits\":%d,", head_bits);
    else fprintf(f, "\"draft_head_bits\":null,");
    if (screen_k) fprintf(f, "\"draft_screen\":%d,", screen_k);
    else fprintf(f, "\"draft_screen\":null,");
    fprintf(f, "\"drafted\":%lld,\"accepted\":%lld,\"acceptance\":%.4f,\"per_position\":[", (long long)st->drafted,
            (long long)st->accepted, st->drafted ? (double)st->accepted / (double)st->drafted : 0.0);
    for (int i = 0; i < k_max; i++)
        fprintf(f, "%s%.4f", i ? "," : "", st->tried[i] ? (double)st->hits[i] / (double)st->tried[i] : 0.0);
    fprintf(f, "],\"per_position_tried\":[");
    for (int i = 0; i < k_max; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)st->tried[i]);
    fprintf(f, "],\"rounds\":%lld,\"target_forwards\":%lld,\"tokens_per_forward\":%.4f,\"draft_s\":%.6f,\"verify_s\":%.6f,"
               "\"commit_s\":%.6f}",
            (long long)st->rounds, (long long)st->target_forwards,
            st->target_forwards ? (double)st->emitted / (double)st->target_forwards : 0.0, st->draft_s, st->verify_s, st->commit_s);
}

int cmd_generate(int argc, char **argv) {
    cli_model_opts mo = {0};
    gen_opts g = {.max_tokens = 64, .sp = nx_sampling_default(), .draft_head_bits = CLI_DRAFT_HEAD_BITS,
                  .draft_screen = CLI_DRAFT_SCREEN};
    int r = parse_opts(argc, argv, &mo, &g);
    if (r) return r < 0 ? 0 : r;
    /* No --draft: auto where the output cannot depend on the drafting
     * decisions: a fixed K = 2 decodes slower than plain where a verify
     * costs much more than a step (bench/RESULTS.md: q4 0.87x plain, bf16
     * 0.95x; auto 0.96x and 1.07x). Where it can (rejection sampling), auto's
     * timing-driven K would change which sample a seed gives, so the
     * drafter's fixed K stays. */
    if (g.draft == 0 && !nx_spec_drafts_shape_output(g.accept, &g.sp)) g.draft = NX_DRAFT_AUTO;
    const char *dir = mo.dir ? mo.dir : cli_default_model();
    if (g.save_state && check_save_state(g.save_state)) return 1;

    int rc = 1, n_gen = 0, n_first = 0, n_prompt = 0, n_stop = 0;
    char err[1024], *text = NULL;
    size_t text_len = 0;
    const int32_t *stop = NULL;
    int32_t *prompt = NULL, *out = NULL;
    nx_tokenizer *tok = NULL;
    nx_detok_stream *ds = NULL;
    nx_drafter *d = NULL;
    nx_spec *s = NULL;
    nx_model *m = NULL;
    /* the model first: a directory that is not a checkpoint says so, not
     * that it lacks a tokenizer */
    if (!(m = cli_load_model(&mo))) goto done;
    if (has_tokenizer(dir) && !(tok = cli_load_tokenizer(dir))) goto done;
    if ((r = prompt_ids(&g, tok, dir, &prompt, &n_prompt))) { rc = r; goto done; }
    if (tok && !g.ignore_eos) n_stop = nx_tokenizer_stop_ids(tok, &stop);
    d = load_drafter(&g, m, &r);
    if (r) { rc = r; goto done; }
    const nx_model_info *in = nx_model_get_info(m);
    nx_spec_opts so = {.draft = g.draft, .accept = g.accept, .draft_pick = g.draft_pick, .sampling = g.sp,
                       .stop_ids = stop, .n_stop = n_stop};
    if (!(out = malloc((size_t)(g.max_tokens + NX_SPEC_MAX_DRAFT + 1) * sizeof *out))) { cli_fail("out of memory"); goto done; }
    int held = 0;
    if (g.load_state && (held = nx_spec_checkpoint_tokens(g.load_state)) < 0) {
        cli_fail("%s: not a readable nextn checkpoint", g.load_state);
        goto done;
    }
    /* the sequence must fit the model's context; the session gets room for
     * a last verify block beyond it where there is some (near the end drafts
     * get shorter), and a loaded state its own verify block */
    const int64_t seq = (int64_t)held + n_prompt + g.max_tokens;
    if (seq > in->max_position_embeddings) {
        cli_fail("generate: %lld prompt and state tokens + -n %ld = %lld exceed the model's context of %d tokens",
                 (long long)held + n_prompt, g.max_tokens, (long long)seq, in->max_position_embeddings);
        goto done;
    }
    int64_t ctx64 = seq + 1 + (d ? NX_SPEC_MAX_DRAFT + 1 : 0);
    int ctx = (int)(ctx64 < in->max_position_embeddings ? ctx64 : in->max_position_embeddings);
    if (nx_spec_new(m, d, ctx, &so, &s, err, sizeof err) || (tok && nx_detok_stream_new(tok, 1, &ds, err, sizeof err)) ||
        (g.load_state && nx_spec_load(s, g.load_state, err, sizeof err))) {
        cli_fail("%s", err);
        goto done;
    }
    if (g.echo && !g.json && tok && n_prompt > 0) {
        char *ptext = NULL;
        size_t plen = 0;
        if (nx_detokenize(tok, prompt, n_prompt, 1, &ptext, &plen, err, sizeof err)) { cli_fail("%s", err); goto done; }
        fwrite(ptext, 1, plen, stdout);
        nx_free(ptext);
    }
    double t0 = cli_now(), t1 = t0;
    int stopped = 0;
    while (n_gen < g.max_tokens && !stopped) {
        int got = 1;
        nx_status st;
        if (n_gen == 0 && !g.load_state) st = nx_spec_prefill(s, prompt, n_prompt, out, err, sizeof err);
        else if (n_gen == 0 && n_prompt > 0) st = nx_spec_extend(s, prompt, n_prompt, out, err, sizeof err);
        else st = nx_spec_step(s, (int)g.max_tokens - n_gen, out + n_gen, &got, err, sizeof err);
        if (st) { cli_fail("%s", err); goto done; }
        const int first_call = n_gen == 0;   /* the prefill's token, or a loaded state's first round */
        if (first_call) t1 = cli_now();
        for (int i = 0; i < got && !stopped; i++) {
            int32_t id = out[n_gen++];
            if (!g.json) {
                size_t len = 0;
                const char *piece = ds ? nx_detok_stream_push(ds, id, &len) : NULL;
                if (ds) fwrite(piece, 1, len, stdout);
                else printf("%s%d", n_gen > 1 ? " " : "", id);
            }
            if (!g.ignore_eos && is_stop(in, stop, n_stop, id)) stopped = 1;
        }
        if (first_call) n_first = n_gen;
        if (!g.json) fflush(stdout);
    }
    double t2 = cli_now();
    if (!g.json) {   /* the streamed text's line ends before anything else is said, a failed save included */
        size_t len = 0;
        const char *tail = ds ? nx_detok_stream_flush(ds, &len) : NULL;
        if (ds) fwrite(tail, 1, len, stdout);
        printf("\n");
        fflush(stdout);
    }
    if (g.save_state && nx_spec_save(s, g.save_state, err, sizeof err)) {
        cli_fail("%s", err);
        goto done;
    }
    /* decode time covers the tokens after the first call's (the prefill's
     * token, or a loaded state's first round) */
    const int n_decoded = n_gen - n_first;
    double prefill_tps = n_prompt && t1 > t0 ? n_prompt / (t1 - t0) : 0.0,
           decode_tps = n_decoded > 0 && t2 > t1 ? n_decoded / (t2 - t1) : 0.0;
    const nx_spec_stats *st = nx_spec_get_stats(s);
    const int k_max = nx_spec_max_draft(s), policy = g.draft == NX_DRAFT_AUTO ? NX_DRAFT_AUTO : k_max;   /* as run */
    if (g.json) {
        printf("{\"prompt_ids\":[");
        print_ids(stdout, prompt, n_prompt);
        printf("],\"ids\":[");
        print_ids(stdout, out, n_gen);
        printf("],\"text\":");
        if (tok && nx_detokenize(tok, out, n_gen, 1, &text, &text_len, err, sizeof err) == NX_OK)
            cli_json_string(stdout, text, text_len);
        else
            printf("null");
        printf(",\"stats\":{\"prompt_tokens\":%d,\"generated_tokens\":%d,\"prefill_s\":%.6f,"
               "\"prefill_tok_s\":%.2f,\"decode_tokens\":%d,\"decode_s\":%.6f,\"decode_tok_s\":%.2f}",
               n_prompt, n_gen, t1 - t0, prefill_tps, n_decoded, t2 - t1, decode_tps);
        if (d) print_mtp_json(stdout, st, k_max, policy, nx_drafter_head_bits(d), nx_drafter_screen_k(d));
        printf("}\n");
    }
    fflush(stdout); /* keep the stats lines after the streamed output */
    if (g.stats) {
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s, with the first output token); decode: %d tokens "
                        "after it in %.3f s (%.1f tok/s)\n",
                n_prompt, t1 - t0, prefill_tps, n_decoded, t2 - t1, decode_tps);
        if (d) {
            fprintf(stderr, "mtp: accepted %lld of %lld drafts (%.1f%%)", (long long)st->accepted,
                    (long long)st->drafted, st->drafted ? 100.0 * (double)st->accepted / (double)st->drafted : 0.0);
            if (k_max > 0 && st->tried[0]) fprintf(stderr, ", per position");
            for (int i = 0; i < k_max && st->tried[i]; i++)
                fprintf(stderr, " %.2f", (double)st->hits[i] / (double)st->tried[i]);
            fprintf(stderr, "; %.2f tokens per target forward (%lld forwards); draft %.3f s, verify %.3f s, commit %.3f s",
                    st->target_forwards ? (double)st->emitted / (double)st->target_forwards : 0.0,
                    (long long)st->target_forwards, st->draft_s, st->verify_s, st->commit_s);
            if (policy == NX_DRAFT_AUTO) fprintf(stderr, "; --draft auto");
            else fprintf(stderr, "; --draft %d", policy);
            if (nx_drafter_head_bits(d)) fprintf(stderr, "; drafts score a %d-bit copy of the LM head", nx_drafter_head_bits(d));
            if (nx_drafter_screen_k(d)) fprintf(stderr, "; drafts score the %d rows a sketch ranks best", nx_drafter_screen_k(d));
            if (nx_drafter_draft_vocab(d)) fprintf(stderr, "; drafts range over token ids [0, %d) only", nx_drafter_draft_vocab(d));
            fprintf(stderr, "\n");
        } else {
            fprintf(stderr, "mtp: off\n");
        }
    }
    rc = 0;
done:
    free(prompt);
    free(out);
    nx_free(text);
    nx_detok_stream_free(ds);
    nx_tokenizer_free(tok);
    nx_spec_free(s);
    nx_drafter_free(d);
    nx_model_free(m);
    return rc;
}
