/* test_cli.c — the `nextn` binary end to end: logits .npy files against
 * llama.cpp's golden logits, inspect --json, greedy and seeded generation,
 * and exit codes with one-line errors for bad use. */
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ctype.h>

#include <jansson.h>

#define GOLDEN NX_TEST_DATA "/golden/llamacpp-tiny-a-untied-bf16"

static char out_dir[1024];

/* `nextn ARGS` with its output captured into out_dir (test.h). */
static int nextn(const char *args) { return nx_test_nextn(out_dir, args); }
static char *captured(const char *which) { return nx_test_captured(out_dir, which); }

static char *golden_prompt(void) {
    char *t = nx_test_read_file(GOLDEN "/tokens.txt", NULL);
    for (char *p = t; p && *p; p++) {
        if (*p == ' ') *p = ',';
        if (*p == '\n') *p = 0;
    }
    return t;
}

static void logits_command_writes_golden_npy(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-logits"));
    char *prompt = golden_prompt(), args[4096];
    snprintf(args, sizeof args, "logits -m '%s/hf' --tokens %s --out '%s/l.npy' --hidden-out '%s/h.npy' --prenorm-out '%s/p.npy'",
             GOLDEN, prompt, out_dir, out_dir, out_dir);
    CHECK(nextn(args) == 0);
    char path[1200];
    long rows, cols;
    snprintf(path, sizeof path, "%s/l.npy", out_dir);
    float *l = nx_test_read_npy(path, &rows, &cols);
    CHECK(l && rows == 37 && cols == 8192);
    size_t n;
    float *ref = nx_test_read_file(GOLDEN "/prompt_logits.f32", &n);
    if (l && ref && n == 37 * 8192 * 4) {
        nx_test_diff d = nx_test_compare(l, ref, 37 * 8192);
        CHECKF(d.max_abs <= 1e-3 && d.nmse <= 1e-6, "max %.3e nmse %.3e", d.max_abs, d.nmse);
    }
    snprintf(path, sizeof path, "%s/h.npy", out_dir);
    float *h = nx_test_read_npy(path, &rows, &cols);
    CHECK(h && rows == 37 && cols == 256);
    snprintf(path, sizeof path, "%s/p.npy", out_dir);
    float *p = nx_test_read_npy(path, &rows, &cols);
    CHECK(p && rows == 37 && cols == 256 && h && memcmp(h, p, 256 * 4) != 0);
    free(l), free(ref), free(h), free(p), free(prompt);
}

static void inspect_json_describes_the_checkpoint(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-inspect"));
    CHECK(nextn("inspect -m '" GOLDEN "/hf' --json") == 0);
    char *out = captured("stdout");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CHECKF(j != NULL, "not JSON: %s", out);
    if (j) {
        CHECK(json_integer_value(json_object_get(j, "vocab_size")) == 8192);
        CHECK(json_integer_value(json_object_get(j, "hidden_size")) == 256);
        CHECK(strcmp(json_string_value(json_object_get(j, "layer_pattern")), "LLLA") == 0);
        CHECK(json_is_true(json_object_get(j, "mtp")) && json_is_false(json_object_get(j, "tie_word_embeddings")));
        CHECK(strcmp(json_string_value(json_object_get(j, "layout")), "hf") == 0);
        CHECK(strcmp(json_string_value(json_object_get(j, "weight_dtype")), "BF16") == 0);
        CHECK(json_integer_value(json_object_get(j, "mtp_tensors")) == 15);
        json_decref(j);
    }
    free(out);
    CHECK(nextn("inspect -m '" GOLDEN "/hf'") == 0);
    out = captured("stdout");
    CHECK(strstr(out, "LLLA") && strstr(out, "mtp head        present"));
    free(out);
}

static void generate_greedy_matches_llamacpp(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-generate"));
    char *prompt = golden_prompt(), args[4096];
    snprintf(args, sizeof args, "generate -m '%s/hf' --prompt-ids %s -n 32 --json", GOLDEN, prompt);
    CHECK(nextn(args) == 0);
    char *out = captured("stdout");
    json_t *j = json_loads(out, 0, NULL);
    int n;
    int *want = nx_test_read_ids(GOLDEN "/greedy.txt", &n);
    CHECKF(j != NULL, "not JSON: %s", out);
    if (j) {
        json_t *ids = json_object_get(j, "ids");
        CHECK(json_array_size(ids) == (size_t)n);
        for (int i = 0; i < n && i < (int)json_array_size(ids); i++) CHECK(json_integer_value(json_array_get(ids, (size_t)i)) == want[i]);
        CHECK(json_array_size(json_object_get(j, "prompt_ids")) == 37);
        CHECK(json_real_value(json_object_get(json_object_get(j, "stats"), "decode_tok_s")) > 0);
        json_decref(j);
    }
    free(out);
    /* streaming form: this checkpoint has a tokenizer, so the output is the
     * decoded text of the same ids (special tokens left out) */
    snprintf(args, sizeof args, "detokenize -m '%s/hf' --skip-special --ids %d,%d,%d,%d,%d", GOLDEN, want[0], want[1], want[2],
             want[3], want[4]);
    CHECK(nextn(args) == 0);
    char *expect = captured("stdout");
    snprintf(args, sizeof args, "generate -m '%s/hf' --prompt-ids %s -n 5 --stats", GOLDEN, prompt);
    CHECK(nextn(args) == 0);
    out = captured("stdout");
    size_t el = strlen(expect);
    CHECKF(strncmp(out, expect, el) == 0 && strcmp(out + el, "\n") == 0, "got '%s', want '%s'", out, expect);
    free(out), free(expect);
    out = captured("stderr");
    CHECK(strstr(out, "prefill:") && strstr(out, "tok/s"));
    free(out), free(want), free(prompt);
}

static void seeded_sampling_is_reproducible(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-seed"));
    const char *base = "generate -m '" GOLDEN "/hf' --prompt-ids 8129,872,198 -n 24 --temp 1.0 --top-k 50 --top-p 0.9";
    char args[1024], *runs[3];
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "%s --seed %d", base, i < 2 ? 42 : 43);
        CHECK(nextn(args) == 0);
        runs[i] = captured("stdout");
    }
    CHECK(strcmp(runs[0], runs[1]) == 0);
    CHECKF(strcmp(runs[0], runs[2]) != 0, "seeds 42 and 43 gave the same 24 tokens");
    for (int i = 0; i < 3; i++) free(runs[i]);
    /* a negative seed is the same 64 bits as 2^64 + S (the server's reading) */
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s --seed %s", base, i ? "18446744073709551574" : "-42");
        CHECK(nextn(args) == 0);
        runs[i] = captured("stdout");
    }
    CHECKF(strcmp(runs[0], runs[1]) == 0, "--seed -42: %s; 2^64 - 42: %s", runs[0], runs[1]);
    for (int i = 0; i < 2; i++) free(runs[i]);
}

/* --logit-bias: +100 on one token makes greedy output that token only; the
 * flag may be repeated. */
/* nextn perplexity over the golden prompt in one window equals the
 * perplexity llama.cpp's logits for it give (within 1e-3, the logits' own
 * agreement); in windows of 10 it scores 9 + 9 + 9 + 6 tokens. */
static void perplexity_matches_llamacpp_logits(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-ppl"));
    char *prompt = golden_prompt(), args[4096];
    size_t n;
    float *ref = nx_test_read_file(GOLDEN "/prompt_logits.f32", &n);
    int ids[37], k = 0;
    for (char *p = prompt; p && *p && k < 37; k++) {
        ids[k] = (int)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    CHECK(k == 37 && ref && n == 37 * 8192 * 4);
    double nll = 0;
    for (int r = 0; r < 36 && ref && k == 37; r++) {   /* row r predicts token r + 1 */
        const float *row = ref + (size_t)r * 8192;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < 8192; v++) mx = fmax(mx, row[v]);
        for (int v = 0; v < 8192; v++) sum += exp(row[v] - mx);
        nll += mx + log(sum) - row[ids[r + 1]];
    }
    const double want = exp(nll / 36);
    snprintf(args, sizeof args, "perplexity -m '%s/hf' --ids %s --ctx 37 --json", GOLDEN, prompt);
    CHECK(nextn(args) == 0);
    char *out = captured("stdout");
    json_t *j = json_loads(out, 0, NULL);
    double got = json_number_value(json_object_get(j, "perplexity"));
    CHECKF(fabs(got - want) <= 1e-3 * want, "perplexity %.6f, llama.cpp's logits give %.6f", got, want);
    CHECK(json_integer_value(json_object_get(j, "tokens")) == 36 && json_integer_value(json_object_get(j, "windows")) == 1);
    CHECK(json_number_value(json_object_get(j, "perplexity_se")) > 0);
    json_decref(j);
    free(out);
    snprintf(args, sizeof args, "perplexity -m '%s/hf' --ids %s --ctx 10 --json", GOLDEN, prompt);
    CHECK(nextn(args) == 0);
    out = captured("stdout");
    j = json_loads(out, 0, NULL);
    CHECKF(json_integer_value(json_object_get(j, "tokens")) == 33 && json_integer_value(json_object_get(j, "windows")) == 4,
           "'%s'", out);
    json_decref(j);
    free(out);
    /* text through the bundled model's tokenizer */
    CHECK(nextn("perplexity --text 'In the beginning God created the heaven and the earth.'") == 0);
    out = captured("stdout");
    CHECKF(strncmp(out, "perplexity ", 11) == 0 && strstr(out, " tokens in 1 window"), "'%s'", out);
    free(out);
    free(ref), free(prompt);
}

static void logit_bias_forces_a_token(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-bias"));
    CHECK(nextn("generate -m '" GOLDEN "/hf' --prompt-ids 8129,872,198 -n 6 --json --logit-bias 5:-3 --logit-bias 777:100") == 0);
    char *out = captured("stdout");
    CHECKF(strstr(out, "\"ids\":[777,777,777,777,777,777]") != NULL, "'%s'", out);
    free(out);
    CHECK(nextn("generate -m '" GOLDEN "/hf' --prompt-ids 8129,872,198 -n 6 --json") == 0);
    out = captured("stdout");
    CHECKF(strstr(out, "\"ids\":[777,777,777,777,777,777]") == NULL, "'%s'", out);   /* not the output anyway */
    free(out);
}

static void bad_use_exits_2_with_one_line(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-usage"));
    static const struct { const char *args; int code; const char *needle; } cases[] = {
        {"frobnicate", 2, "unknown command 'frobnicate'"},
        {"logits -m x --out y.npy", 2, "--tokens is required"},
        {"logits -m x --tokens 1,2,x --out y.npy", 2, "--tokens"},
        {"generate -m x --prompt-ids 1 -n -4", 2, "-n"},
        {"generate -m x --prompt-ids 1 -n 0", 2, "-n"},
        {"generate -m x --prompt-ids 1 --temp hot", 2, "--temp"},
        {"generate -m x", 2, "exactly one of"},
        {"generate -m x -p hello", 1, "x/config.json: cannot read"},
        {"generate -m '" NX_TEST_DATA "/golden/torchref-mini-a/hf' -p hello", 1, "no tokenizer.json"},
        {"generate -m x -p hi --jsn", 2, "option --jsn needs a value, or is not an option"},
        {"generate -m x -p hi -n 2 stray", 2, "unexpected argument 'stray'"},
        {"generate -m '' -p hi", 2, "-m wants a checkpoint directory"},
        {"generate -m x -p ''", 2, "-p wants a non-empty prompt"},
        {"generate -m x -p hi --seed ' -1'", 2, "--seed wants an integer"},
        {"generate -m x -p hi --temp +1", 2, "--temp"},
        {"chat-template --chat-template /nonexistent.jinja --messages /nonexistent.json", 1, "/nonexistent"},
        {"generate -m x --prompt-ids 1 --chat", 2, "need a text prompt"},
        {"generate -m x --prompt-ids 1 --draft 0", 2, "--draft"},
        {"generate -m x --prompt-ids 1 --draft lots", 2, "--draft"},
        {"generate -m x --prompt-ids 1 --draft-head-bits 7", 2, "--draft-head-bits"},
        {"generate -m x --prompt-ids 1 --draft-head-bits many", 2, "--draft-head-bits"},
        {"generate -m x --prompt-ids 1 --draft-screen -3", 2, "--draft-screen"},
        {"generate -m x --prompt-ids 1 --draft-screen some", 2, "--draft-screen"},
        {"generate -m x --prompt-ids 1 --accept maybe", 2, "--accept"},
        {"generate -m x --prompt-ids 1 --mtp-hidden mid", 2, "--mtp-hidden"},
        {"generate -m x --prompt-ids 1 --mtp /nonexistent/drafter", 2, "--mtp wants on, off or a drafter directory, got '/nonexistent/drafter'"},
        {"generate -m x --prompt-ids 1 --mtp OFF", 2, "--mtp wants on, off or a drafter directory, got 'OFF'"},
        {"bench -m x --mtp On", 2, "--mtp wants on, off or a drafter directory"},
        {"serve -m x --mtp none", 2, "--mtp wants on, off or a drafter directory"},
        /* an empty key would let a request with an empty bearer token in */
        {"serve -m x --api-key ''", 2, "--api-key wants a non-empty key"},
        /* a port file that cannot be written: refused before the model
         * loads (-m x is never read), with no "serving" line */
        {"serve -m x -t 1 --port 0 --port-file /nonexistent/port", 1, "--port-file /nonexistent/port: cannot write: No such file or directory"},
        {"generate -m '" GOLDEN "/hf' --prompt-ids 1 --mtp '" NX_TEST_DATA "'", 1, NX_TEST_DATA "/config.json"},
        {"generate -m '" GOLDEN "/hf' --load-state /nonexistent.state", 1, "/nonexistent.state"},
        /* a state that could not be saved is refused before the model loads
         * and the tokens are made, not after (-m x is never read) */
        {"generate -m x --prompt-ids 1 --save-state /nonexistent/x", 1, "/nonexistent/x: cannot write the checkpoint"},
        {"generate -m x --prompt-ids 1 --save-state /dev/null", 1, "/dev/null: not a regular file"},
        {"logits -m x --tokens 1,2 --mtp-out y.npy --mtp-hidden sideways", 2, "--mtp-hidden"},
        {"generate -m x -p hi --thinking maybe", 2, "--thinking"},
        {"tokenize -m x", 2, "exactly one of --text, --file"},
        {"detokenize -m x --ids 1,,2", 2, "--ids"},
        {"detokenize --ids 9,99999", 1, "id 99999 (at 1) is outside the vocabulary"},
        {"chat-template -m x", 2, "--messages is required"},
        {"chat-template -m x --messages /nonexistent.json", 1, "/nonexistent.json"},
        {"inspect --bogus", 2, "unknown option '--bogus'"},
        {"inspect -t 0 -m x", 2, "--threads"},
        {"inspect --kernels avx512 -m x", 2, "--kernels"},
        {"inspect --kv-cache f8 -m x", 2, "--kv-cache wants f32 or f16"},
        {"inspect -m /nonexistent/model", 1, "/nonexistent/model"},
        {"generate -m '" GOLDEN "/hf' --prompt-ids 1,99999", 1, "99999"},
        {"generate -m x --prompt-ids 1 --logit-bias 5=2", 2, "--logit-bias"},
        {"generate -m x --prompt-ids 1 --logit-bias 5:101", 2, "--logit-bias"},
        {"generate -m x --prompt-ids 1 --logit-bias -5:1", 2, "--logit-bias"},
        {"generate -m x --prompt-ids 1 --logit-bias ,", 2, "--logit-bias"},
        /* an empty item is refused in every list, as --prompt-ids refuses it
         * (a trailing comma may be a value cut short) */
        {"generate -m x --prompt-ids 1 --logit-bias 5:1,", 2, "--logit-bias"},
        {"generate -m x --prompt-ids 1 --logit-bias 5:1,,6:2", 2, "--logit-bias"},
        {"generate -m '" GOLDEN "/hf' --prompt-ids 1,2,", 2, "--prompt-ids"},
        {"generate -m '" GOLDEN "/hf' --prompt-ids 1 --logit-bias 99999999:1", 1, "logit_bias: token 99999999"},
        {"perplexity -m x", 2, "give one of -f FILE, --text TEXT, --ids IDS"},
        {"perplexity -m x --ids 1,2 --text y", 2, "give one of"},
        {"perplexity -m x --ids 1,2 --ctx 1", 2, "--ctx"},
        {"perplexity -m x -f /nonexistent.txt", 1, "/nonexistent.txt"},
        {"perplexity -m '" GOLDEN "/hf' --ids 5", 1, "at least 2"},
        {"perplexity -m '" GOLDEN "/hf' --ids 5,99999", 1, "99999"},
        {"quantize -o y --mode mxfp5", 2, "--mode wants affine, mxfp4, nvfp4 or mxfp8"},
        {"quantize -o y", 2, "--bits is required for affine (or give --mode mxfp4, nvfp4 or mxfp8)"},
        {"quantize -o y --mode affine", 2, "--bits is required for affine"},
        {"perplexity --ids 1,2 --ctx 99999999", 2, "--ctx wants an integer in [2, 16777216], got '99999999'"},
        {"quantize -m x -o y --mode nvfp4 --bits 8", 2, "--mode nvfp4 takes bits 4 and group size 16"},
        {"quantize -m x -o y --mode mxfp4 --group-size 64", 2, "--mode mxfp4 takes bits 4 and group size 32"},
        {"quantize -m x -o y --bits 4 --group-size 16", 2, "--group-size 16 is nvfp4's"},
        {"quantize -m '" GOLDEN "/hf' -o '" GOLDEN "/hf/config.json' --bits 4", 1, "exists and is not a directory"},
        {"quantize -m x -o y --bits 4 --group-size 48", 2, "quantize: --group-size wants 16 (nvfp4), 32, 64 or 128, got '48'"},
        /* each command names an option it does not know, and its own --help */
        {"quantize -m x -o y --bits 4 --bogus 1", 2, "quantize: unknown option '--bogus' (see nextn quantize --help)"},
        {"serve -m x --bogus 1", 2, "serve: unknown option '--bogus' (see nextn serve --help)"},
        {"logits -m x --bogus 1", 2, "logits: unknown option '--bogus'"},
        {"perplexity -m x --bogus 1", 2, "perplexity: unknown option '--bogus'"},
        {"tokenize -m x --bogus 1", 2, "tokenize: unknown option '--bogus'"},
        {"detokenize -m x --bogus 1", 2, "detokenize: unknown option '--bogus'"},
        {"chat-template -m x --bogus 1", 2, "chat-template: unknown option '--bogus'"},
        {"chat-template --messages m.json --thinking maybe", 2, "chat-template: --thinking wants on or off, got 'maybe'"},
        {"logits -m x --tokens 1,2", 2, "logits: give at least one of --out, --hidden-out, --prenorm-out, --mtp-out"},
        {"serve -m x --parallel 0", 2, "--parallel wants an integer in 1..64, got '0'"},
        {"serve -m x --max-body 10", 2, "--max-body wants an integer in 1024..1073741824, got '10'"},
        {"serve -m x --draft-policy sometimes", 2, "--draft-policy wants adaptive or always, got 'sometimes'"},
        {"serve -m x --draft-head-bits 7", 2, "--draft-head-bits wants auto, 0, 2, 3, 4, 5, 6 or 8, got '7'"},
        {"serve -m x --draft-screen some", 2, "--draft-screen wants auto, off or a number of rows, got 'some'"},
        {"generate -m x --prompt-ids 1 --draft-vocab 0", 2, "--draft-vocab wants a positive integer, got '0'"},
        {"generate -m x --prompt-ids 1 --draft-pick best", 2, "--draft-pick wants argmax or sample, got 'best'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = nextn(cases[i].args);
        char *err = captured("stderr");
        int lines = 0;
        for (char *p = err; *p; p++) lines += *p == '\n';
        CHECKF(rc == cases[i].code && lines == 1 && strstr(err, cases[i].needle), "nextn %s -> %d, stderr '%s'",
               cases[i].args, rc, err);
        free(err);
    }
    for (const char *const *c = (const char *const[]){"--help", "generate --help", "logits --help", "inspect --help", "tokenize --help",
                                                       "detokenize --help", "chat-template --help", "perplexity --help", NULL};
         *c; c++) {
        char args[64];
        snprintf(args, sizeof args, "%s", *c);
        CHECKF(nextn(args) == 0, "nextn %s", *c);
        char *out = captured("stdout");
        CHECK(strstr(out, "usage") != NULL);
        free(out);
    }
}


/* `nextn quantize --mode nvfp4` writes a checkpoint that inspect names and
 * generate runs. */
static void quantize_mode_writes_a_loadable_checkpoint(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-quantize"));
    char args[2400];
    snprintf(args, sizeof args, "quantize -m '" GOLDEN "/hf' -o '%s/nv' --mode nvfp4", out_dir);
    CHECK(nextn(args) == 0);
    char *out = captured("stdout");
    CHECKF(strstr(out, "quantized (nvfp4, 4 bits, group 16)") != NULL, "%s", out);
    free(out);
    snprintf(args, sizeof args, "inspect -m '%s/nv'", out_dir);
    CHECK(nextn(args) == 0);
    out = captured("stdout");
    CHECKF(strstr(out, "NVFP4") && strstr(out, "mlx nvfp4, 4 bits, group 16"), "%s", out);
    free(out);
    snprintf(args, sizeof args, "generate -m '%s/nv' --prompt-ids 1,2,3 -n 8 --mtp on", out_dir);
    CHECK(nextn(args) == 0);
}

#define TOKENIZER NX_TEST_DATA "/tokenizer"
#define CHAT NX_TEST_DATA "/chat"

static void tokenize_and_detokenize_round_trip(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-tokenize"));
    /* golden ids from Hugging Face tokenizers for a text with special tokens */
    const char *text = "<|im_start|>user\nHello, world! 123<|im_end|>";
    char path[1200], args[2048];
    snprintf(path, sizeof path, "%s/in.txt", out_dir);
    nx_test_write_file(path, text, strlen(text));
    snprintf(args, sizeof args, "tokenize -m '%s' --file '%s'", TOKENIZER, path);
    CHECK(nextn(args) == 0);
    char *ids = captured("stdout");
    CHECKF(strcmp(ids, "[151644,872,198,9707,11,1879,0,220,16,17,18,151645]\n") == 0, "got %s", ids);
    /* --no-special: the control-token strings are plain text */
    snprintf(args, sizeof args, "tokenize -m '%s' --file '%s' --no-special", TOKENIZER, path);
    CHECK(nextn(args) == 0);
    char *plain = captured("stdout");
    CHECKF(!strstr(plain, "151644") && !strstr(plain, "151645"), "got %s", plain);
    /* detokenize gives the text back */
    ids[strlen(ids) - 2] = 0; /* drop "]\n" */
    snprintf(args, sizeof args, "detokenize -m '%s' --ids %s", TOKENIZER, ids + 1);
    CHECK(nextn(args) == 0);
    char *back = captured("stdout");
    CHECKF(strcmp(back, text) == 0, "got '%s'", back);
    free(ids), free(plain), free(back);
}

static void chat_template_command_is_byte_exact(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-chat"));
    static const struct { const char *id, *tmpl, *file; } cases[] = {
        {"chat-021-tools-system-user-gen", "qwen3.5", "Qwen3.5-4B.jinja"},
        {"chat-025-tool-multi-step-reasoning", "qwen3", "Qwen-Qwen3-0.6B.jinja"},
        {"chat-045-no-messages", "qwen3.5", "Qwen3.5-4B.jinja"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *line = NULL;
        /* the golden file has one line per (id, template) */
        char *text = nx_test_read_file(CHAT "/chat-golden.jsonl", NULL);
        for (char *l = text, *next; l && *l && !line; l = next) {
            next = strchr(l, '\n');
            if (next) *next++ = 0;
            json_t *j = json_loads(l, 0, NULL);
            if (j && strcmp(json_string_value(json_object_get(j, "id")), cases[i].id) == 0 &&
                strcmp(json_string_value(json_object_get(j, "template")), cases[i].tmpl) == 0)
                line = j;
            else
                json_decref(j);
        }
        free(text);
        CHECKF(line != NULL, "golden line %s/%s", cases[i].id, cases[i].tmpl);
        if (!line) continue;
        char mpath[1200], tpath[1200], args[4096];
        snprintf(mpath, sizeof mpath, "%s/messages.json", out_dir);
        snprintf(tpath, sizeof tpath, "%s/tools.json", out_dir);
        json_dump_file(json_object_get(line, "messages"), mpath, JSON_ENCODE_ANY);
        json_t *tools = json_object_get(line, "tools"), *think = json_object_get(line, "enable_thinking");
        if (!json_is_null(tools)) json_dump_file(tools, tpath, JSON_ENCODE_ANY);
        snprintf(args, sizeof args, "chat-template --template '%s/%s' --messages '%s'%s%s%s%s%s", CHAT, cases[i].file, mpath,
                 json_is_null(tools) ? "" : " --tools '", json_is_null(tools) ? "" : tpath, json_is_null(tools) ? "" : "'",
                 json_is_true(json_object_get(line, "add_generation_prompt")) ? " --add-generation-prompt" : "",
                 json_is_null(think) ? "" : json_is_true(think) ? " --thinking on" : " --thinking off");
        int rc = nextn(args);
        const char *want = json_string_value(json_object_get(line, "rendered"));
        if (want) {
            char *out = captured("stdout");
            CHECKF(rc == 0 && strcmp(out, want) == 0, "%s: rc %d, got '%s'", cases[i].id, rc, out);
            free(out);
        } else {
            char *err = captured("stderr");
            CHECKF(rc == 1 && strstr(err, "No messages provided."), "%s: rc %d, stderr '%s'", cases[i].id, rc, err);
            free(err);
        }
        json_decref(line);
    }
}

static void chat_prompt_reproduces_llamacpp_tokens(void) {
    /* tokens.txt is a ChatML prompt tokenized by llama.cpp; its user text,
     * rendered by our Qwen3 template and tokenized, must give the same ids */
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-chatgen"));
    int n;
    int *tok = nx_test_read_ids(GOLDEN "/tokens.txt", &n);
    /* tokens: <|im_start|> user \n TEXT <|im_end|> \n <|im_start|> assistant \n,
     * where "assistant" is three tokens in this truncated vocabulary */
    char ids[1024] = "", args[4096];
    for (int i = 3, o = 0; i < n - 7; i++) o += snprintf(ids + o, sizeof ids - (size_t)o, "%s%d", i > 3 ? "," : "", tok[i]);
    snprintf(args, sizeof args, "detokenize -m '%s/hf' --ids %s", GOLDEN, ids);
    CHECK(nextn(args) == 0);
    char *user = captured("stdout");
    char path[1200];
    snprintf(path, sizeof path, "%s/user.txt", out_dir);
    nx_test_write_file(path, user, strlen(user));
    snprintf(args, sizeof args, "generate -m '%s/hf' -f '%s' --chat -n 4 --json", GOLDEN, path);
    CHECK(nextn(args) == 0);
    char *out = captured("stdout");
    json_t *j = json_loads(out, 0, NULL);
    CHECKF(j != NULL, "not JSON: %s", out);
    json_t *p = json_object_get(j, "prompt_ids");
    CHECKF(json_array_size(p) == (size_t)n, "prompt has %zu ids, llama.cpp %d", json_array_size(p), n);
    for (int i = 0; i < n && i < (int)json_array_size(p); i++) CHECK(json_integer_value(json_array_get(p, (size_t)i)) == tok[i]);
    CHECK(json_is_string(json_object_get(j, "text")));
    json_decref(j);
    free(out), free(user), free(tok);
}

#define COPY05 NX_TEST_DATA "/golden/torchref-mini-copy-s0.05/hf"

/* ids of `nextn ARGS --json` (caller frees); NULL on failure. */
static json_t *run_json(const char *args) {
    if (nextn(args) != 0) return NULL;
    char *out = captured("stdout");
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    return j;
}

static int same_ids(json_t *a, json_t *b, size_t offset) {
    json_t *x = json_object_get(a, "ids"), *y = json_object_get(b, "ids");
    for (size_t i = 0; i < json_array_size(y); i++)
        if (json_integer_value(json_array_get(x, i + offset)) != json_integer_value(json_array_get(y, i))) return 0;
    return json_array_size(y) > 0;
}

static void generate_with_mtp_reports_acceptance(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-mtp"));
    const char *base = "generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 60 --ignore-eos --json";
    char args[1024];
    json_t *plain = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 60 --ignore-eos --json --mtp off");
    CHECK(plain && !json_object_get(plain, "mtp"));
    static const char *variants[] = {"", "--draft 1", "--draft 3", "--draft auto", "--mtp on --accept greedy", "--mtp-hidden prenorm"};
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        snprintf(args, sizeof args, "%s %s", base, variants[v]);
        json_t *j = run_json(args);
        json_t *mtp = json_object_get(j, "mtp");
        CHECKF(j && mtp && same_ids(plain, j, 0) && json_array_size(json_object_get(j, "ids")) == 60, "variant '%s'", variants[v]);
        CHECK(json_integer_value(json_object_get(mtp, "drafted")) >= json_integer_value(json_object_get(mtp, "accepted")));
        CHECK(json_is_array(json_object_get(mtp, "per_position")) && json_integer_value(json_object_get(mtp, "target_forwards")) >= 1);
        /* the draft policy that ran: auto unless a K was given */
        json_t *policy = json_object_get(mtp, "draft");
        int want_k = strstr(variants[v], "--draft 1") ? 1 : strstr(variants[v], "--draft 3") ? 3 : 0;
        CHECKF(want_k ? json_integer_value(policy) == want_k : json_is_string(policy) && strcmp(json_string_value(policy), "auto") == 0,
               "variant '%s'", variants[v]);
        json_decref(j);
    }
    /* cheaper drafts, greedy output unchanged: the draft head as stored by
     * default here (auto copies only heads of 64 MiB or more) and a 4-bit copy
     * when asked; no screen by default (auto screens only such heads either),
     * k rows when asked, none for k >= the vocabulary */
    static const struct { const char *args, *field; int value; } cheap[] = {
        {"", "draft_head_bits", 0}, {"--draft-head-bits 4", "draft_head_bits", 4},
        {"--draft-head-bits 0", "draft_head_bits", 0}, {"", "draft_screen", 0},
        {"--draft-screen 16", "draft_screen", 16}, {"--draft-screen off", "draft_screen", 0},
        {"--draft-screen 1000000", "draft_screen", 0}};
    for (size_t v = 0; v < sizeof cheap / sizeof *cheap; v++) {
        snprintf(args, sizeof args, "%s --draft 2 %s", base, cheap[v].args);
        json_t *h = run_json(args);
        json_t *got = json_object_get(json_object_get(h, "mtp"), cheap[v].field);
        CHECKF(h && same_ids(plain, h, 0) && (cheap[v].value ? json_integer_value(got) == cheap[v].value : json_is_null(got)),
               "'%s': %s", cheap[v].args, cheap[v].field);
        json_decref(h);
    }
    /* the copy head accepts a lot on this checkpoint: fewer target forwards than tokens */
    json_t *j = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 60 --ignore-eos --json --draft 2");
    json_t *mtp = json_object_get(j, "mtp");
    CHECK(j && json_integer_value(json_object_get(mtp, "accepted")) > 0 &&
          json_integer_value(json_object_get(mtp, "target_forwards")) < 60);
    json_decref(j);
    /* match acceptance: sampled output identical to plain sampling */
    json_t *ps = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 40 --ignore-eos --json --mtp off --temp 0.8 --seed 5");
    json_t *ms = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 40 --ignore-eos --json --accept match --temp 0.8 --seed 5");
    CHECK(ps && ms && same_ids(ps, ms, 0));
    /* without --draft: auto with match acceptance, the head's fixed K = 2
     * with rejection sampling (auto's timing-driven K would change the sample) */
    json_t *rs = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 40 --ignore-eos --json --temp 0.8 --seed 5");
    json_t *ms_draft = json_object_get(json_object_get(ms, "mtp"), "draft"), *rs_draft = json_object_get(json_object_get(rs, "mtp"), "draft");
    CHECK(json_is_string(ms_draft) && strcmp(json_string_value(ms_draft), "auto") == 0);
    CHECK(rs && json_is_integer(rs_draft) && json_integer_value(rs_draft) == 2);
    /* ... so the same seed gives the same sample again */
    json_t *rs2 = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 40 --ignore-eos --json --temp 0.8 --seed 5");
    CHECK(rs && rs2 && same_ids(rs, rs2, 0));
    /* greedy acceptance whatever the temperature, and a one-hot distribution
     * (top-k 1) under rejection: the output cannot depend on K, so auto */
    static const char *const auto_variants[] = {"--accept greedy --temp 0.8", "--accept rejection --temp 0.8 --top-k 1",
                                                "--accept rejection --temp 0"};
    for (size_t v = 0; v < sizeof auto_variants / sizeof *auto_variants; v++) {
        char args[512];
        snprintf(args, sizeof args, "generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 8 --ignore-eos --json %s",
                 auto_variants[v]);
        json_t *a = run_json(args);
        json_t *policy = json_object_get(json_object_get(a, "mtp"), "draft");
        CHECKF(a && json_is_string(policy) && strcmp(json_string_value(policy), "auto") == 0, "'%s'", auto_variants[v]);
        json_decref(a);
    }
    json_decref(ps), json_decref(ms), json_decref(rs), json_decref(rs2);
    /* --stats prints the acceptance line, and the fixed K of a sampled run */
    CHECK(nextn("generate -m '" COPY05 "' --prompt-ids 1,2,3 -n 20 --stats --temp 0.8") == 0);
    char *err = captured("stderr");
    CHECKF(strstr(err, "mtp: accepted") && strstr(err, "tokens per target forward") && strstr(err, "; --draft 2\n"), "%s", err);
    free(err);
    CHECK(nextn("generate -m '" COPY05 "' --prompt-ids 1,2,3 -n 20 --stats --draft-head-bits 4") == 0);
    err = captured("stderr");
    CHECKF(strstr(err, "; drafts score a 4-bit copy of the LM head\n"), "%s", err);
    free(err);
    CHECK(nextn("generate -m '" COPY05 "' --prompt-ids 1,2,3 -n 20 --stats --draft-screen 64") == 0);
    err = captured("stderr");
    CHECKF(strstr(err, "; drafts score the 64 rows a sketch ranks best\n"), "%s", err);
    free(err);
    json_decref(plain);
}

static void state_saved_in_one_process_continues_in_another(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-state"));
    char args[2048], state[1200];
    snprintf(state, sizeof state, "%s/conv.state", out_dir);
    json_t *whole = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 50 --ignore-eos --json");
    snprintf(args, sizeof args, "generate -m '%s' --prompt-ids 11,42,7,300 -n 20 --ignore-eos --json --save-state '%s'", COPY05, state);
    json_t *first = run_json(args);
    snprintf(args, sizeof args, "generate -m '%s' --load-state '%s' -n 30 --ignore-eos --json", COPY05, state);
    json_t *rest = run_json(args);
    CHECK(whole && first && rest && same_ids(whole, first, 0) && same_ids(whole, rest, 20));
    /* a state from another model is refused */
    snprintf(args, sizeof args, "generate -m '%s/hf' --load-state '%s' -n 3", GOLDEN, state);
    CHECK(nextn(args) == 1);
    char *err = captured("stderr");
    CHECKF(strstr(err, "another model"), "stderr '%s'", err);
    free(err);
    json_decref(whole), json_decref(first), json_decref(rest);
    /* a chat continued with --chat: the next user turn, after the newline
     * the template puts between turns (the bundled model's template) */
    snprintf(args, sizeof args, "generate -p Hello --chat -n 6 -t 1 --json --save-state '%s'", state);
    json_t *turn1 = run_json(args);
    json_t *alone = run_json("generate -p 'And then?' --chat -n 1 -t 1 --json");
    json_t *nl = run_json("tokenize --text '\n'");
    snprintf(args, sizeof args, "generate --load-state '%s' -p 'And then?' --chat -n 1 -t 1 --json", state);
    json_t *turn2 = run_json(args);
    json_t *a = json_object_get(alone, "prompt_ids"), *b = json_object_get(turn2, "prompt_ids");
    int same = turn1 && json_is_array(nl) && json_array_size(nl) == 1 && json_is_array(a) && json_is_array(b) &&
               json_array_size(b) == json_array_size(a) + 1 && json_equal(json_array_get(b, 0), json_array_get(nl, 0));
    for (size_t i = 0; same && i < json_array_size(a); i++) same = json_equal(json_array_get(a, i), json_array_get(b, i + 1));
    CHECKF(same, "the continued turn's prompt is not a newline and the turn's own rendering");
    json_decref(turn1), json_decref(alone), json_decref(nl), json_decref(turn2);
    /* without a prompt the first call after a load is a whole round: an
     * exact copy head with --draft 4 emits 5 tokens there, which the decode
     * rate leaves out */
    snprintf(args, sizeof args,
             "generate -m '" NX_TEST_DATA "/golden/torchref-mini-copy-s0/hf' --prompt-ids 11,42,7,300 -n 10 --ignore-eos "
             "--save-state '%s' --json",
             state);
    json_t *saved = run_json(args);
    snprintf(args, sizeof args,
             "generate -m '" NX_TEST_DATA "/golden/torchref-mini-copy-s0/hf' --load-state '%s' -n 20 --draft 4 --ignore-eos --json",
             state);
    json_t *more = run_json(args), *stats = json_object_get(more, "stats");
    CHECKF(saved && json_integer_value(json_object_get(stats, "generated_tokens")) == 20 &&
               json_integer_value(json_object_get(stats, "decode_tokens")) == 15,
           "decode_tokens %lld of 20", (long long)json_integer_value(json_object_get(stats, "decode_tokens")));
    json_decref(saved), json_decref(more);
}

/* A link to a missing directory is refused before generating, as the path
 * itself would be (the save writes beside the link's target). A save that
 * fails after generating (here at its write: a file size limit of 512 bytes
 * the text fits in and the checkpoint does not) reports the error after the
 * text's line has ended, so the message starts a line of its own on a
 * terminal. */
static void a_failed_save_ends_the_texts_line(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-save-fails"));
    char args[2048];
    CHECK(nx_test_system("ln -s /nonexistent/x '%s/link'", out_dir) == 0);
    snprintf(args, sizeof args, "generate -m x --prompt-ids 1 --save-state '%s/link'", out_dir);
    int rc = nextn(args);
    char *out = captured("stdout"), *err = captured("stderr");
    CHECKF(rc == 1 && strstr(err, "link: cannot write the checkpoint") && !*out, "rc %d, stdout '%s', stderr '%s'", rc, out, err);
    free(out), free(err);

    /* SIGXFSZ ignored, so the write past the limit fails with EFBIG */
    rc = nx_test_system("trap '' XFSZ; ulimit -f 1; exec '%s' generate -m '" GOLDEN "/hf' --prompt-ids 8129,872,198 -n 3 "
                        "--save-state '%s/state' > '%s/stdout' 2> '%s/stderr'",
                        NX_NEXTN_BIN, out_dir, out_dir, out_dir);
    out = captured("stdout"), err = captured("stderr");
    const size_t ol = strlen(out);
    CHECKF(rc == 1 && strstr(err, "state: cannot write the checkpoint: File too large"), "rc %d, stderr '%s'", rc, err);
    CHECKF(ol > 1 && out[ol - 1] == '\n', "stdout '%s' does not end its line", out);
    free(out), free(err);
}

/* Without -n, generate makes 64 tokens, as its help says (--ignore-eos: the
 * checkpoint's eos cannot end the run early). */
static void generate_makes_64_tokens_by_default(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-default-n"));
    json_t *j = run_json("generate -m '" COPY05 "' --prompt-ids 11,42,7,300 --ignore-eos --json");
    CHECKF(j && json_array_size(json_object_get(j, "ids")) == 64, "%zu ids", json_array_size(json_object_get(j, "ids")));
    json_decref(j);
}

/* --ignore-eos keeps going where the model emits its own eos id (982 in
 * COPY05's config), also when a drafted round ends there; without it the
 * run stops after that token. */
static void ignore_eos_runs_past_the_models_eos(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-ignore-eos"));
    static const char *const drafting[] = {"--mtp off", "--draft 2"};
    for (int i = 0; i < 2; i++) {
        char args[512];
        snprintf(args, sizeof args, "generate -m '" COPY05 "' --prompt-ids 11,42,7,300 -n 5 --json --logit-bias 982:100 %s",
                 drafting[i]);
        json_t *stops = run_json(args);
        strcat(args, " --ignore-eos");
        json_t *goes_on = run_json(args);
        char *got = json_dumps(json_object_get(goes_on, "ids"), JSON_COMPACT);
        CHECKF(got && strcmp(got, "[982,982,982,982,982]") == 0, "%s --ignore-eos: ids %s", drafting[i], got ? got : "none");
        free(got);
        got = json_dumps(json_object_get(stops, "ids"), JSON_COMPACT);
        CHECKF(got && strcmp(got, "[982]") == 0, "%s: ids %s", drafting[i], got ? got : "none");
        free(got);
        json_decref(stops), json_decref(goes_on);
    }
}

/* The model's context bounds prompt + -n, to the last token: with a context
 * of 16 a 4-token prompt may ask for 12 tokens (with and without drafts), 13
 * is refused before anything runs. */
static void a_sequence_may_fill_the_models_context(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-ctx16"));
    CHECK(nx_test_system("mkdir '%s/m' && sed 's/\"max_position_embeddings\": 262144/\"max_position_embeddings\": 16/' "
                         "'" COPY05 "/config.json' > '%s/m/config.json' && ln -s '" COPY05 "/model.safetensors' '%s/m/'",
                         out_dir, out_dir, out_dir) == 0);
    static const char *const drafting[] = {"--mtp off", "--draft 2", "--draft 15"};
    for (int i = 0; i < 3; i++) {
        char args[1400];
        snprintf(args, sizeof args, "generate -m '%s/m' --prompt-ids 11,42,7,300 -n 12 --ignore-eos --json %s", out_dir,
                 drafting[i]);
        json_t *j = run_json(args);
        CHECKF(j && json_array_size(json_object_get(j, "ids")) == 12, "%s: %s", drafting[i], j ? "not 12 ids" : "failed");
        json_decref(j);
    }
    char args[1400];
    snprintf(args, sizeof args, "generate -m '%s/m' --prompt-ids 11,42,7,300 -n 13", out_dir);
    CHECK(nextn(args) == 1);
    char *err = captured("stderr");
    CHECKF(strstr(err, "+ -n 13 = 17 exceed the model's context of 16 tokens"), "stderr '%s'", err);
    free(err);
}

/* --echo with --json: stdout is the JSON object alone (a script parses it);
 * the prompt is in it as prompt_ids. */
static void echo_with_json_prints_only_the_json(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-echo-json"));
    CHECK(nextn("generate -p 'And God said' -n 4 -t 1 --echo --json") == 0);
    char *out = captured("stdout");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CHECKF(j && json_array_size(json_object_get(j, "prompt_ids")) > 0, "not JSON (%s): %s", je.text, out);
    json_decref(j);
    free(out);
}

static void logits_mtp_out_matches_llamacpp(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-mtpout"));
    char *prompt = golden_prompt(), args[4096], path[1200];
    int ng;
    int *gen = nx_test_read_ids(GOLDEN "/greedy.txt", &ng);
    size_t o = strlen(prompt);
    char *seq = malloc(o + (size_t)ng * 8 + 1);
    strcpy(seq, prompt);
    for (int i = 0; i < ng; i++) o += (size_t)sprintf(seq + o, ",%d", gen[i]);
    snprintf(path, sizeof path, "%s/mtp.npy", out_dir);
    snprintf(args, sizeof args, "logits -m '%s/hf' --tokens %s --mtp-out '%s'", GOLDEN, seq, path);
    CHECK(nextn(args) == 0);
    long rows, cols;
    float *l = nx_test_read_npy(path, &rows, &cols);
    size_t n;
    float *ref = nx_test_read_file(GOLDEN "/mtp_hf.f32", &n);
    CHECK(l && rows == 68 && cols == 8192 && ref && n == 68 * 8192 * 4);
    if (l && ref && rows == 68) {
        nx_test_diff d = nx_test_compare(l, ref, 68 * 8192);
        CHECKF(d.max_abs <= 1e-3 && d.nmse <= 1e-6, "max %.3e nmse %.3e", d.max_abs, d.nmse);
    }
    free(l), free(ref), free(seq), free(gen), free(prompt);
}

/* The README's main command: no -m means the bundled model (models/default),
 * whose tokenizer turns the prompt and the output into text; MTP is on. */
static void generate_defaults_to_the_bundled_model(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-default"));
    CHECK(nextn("generate -p 'And God said unto Moses,' -n 60 --echo --stats") == 0);
    char *out = captured("stdout"), *err = captured("stderr");
    const char *prompt = "And God said unto Moses,";
    CHECKF(strncmp(out, prompt, strlen(prompt)) == 0, "the echoed prompt starts the output: %.60s", out);
    /* text in the corpus's style: words of plain English, not ids or bytes */
    int letters = 0, spaces = 0, odd = 0;
    for (const char *p = out + strlen(prompt); *p; p++) {
        unsigned char c = (unsigned char)*p;
        letters += isalpha(c) != 0, spaces += c == ' ';
        odd += !(isalpha(c) || isspace(c) || strchr(",.;:?!'()-", c));
    }
    CHECKF(letters > 100 && spaces > 20 && odd == 0, "letters %d, spaces %d, other bytes %d: %s", letters, spaces, odd, out);
    CHECKF(strstr(out + strlen(prompt), " the ") || strstr(out + strlen(prompt), " and "), "%s", out);
    CHECKF(strstr(err, "mtp: accepted") != NULL && strstr(err, "--draft auto"), "%s", err);
    /* acceptance of the head's own block (auto may draft in few rounds here) */
    json_t *j = run_json("generate -p 'And God said unto Moses,' -n 60 --json --draft 2");
    double acc = json_real_value(json_object_get(json_object_get(j, "mtp"), "acceptance"));
    CHECKF(j && acc > 0.3, "acceptance %.3f", acc);
    json_decref(j);
    free(out), free(err);
}

/* "-f -" reads standard input: the ids of a piped text are --text's. */
static void a_file_of_dash_is_standard_input(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-stdin"));
    CHECK(nextn("tokenize --text 'And God said'") == 0);
    char *want = captured("stdout");
    CHECK(nx_test_system("printf 'And God said' | '%s' tokenize -f - > '%s/stdout' 2> '%s/stderr'", NX_NEXTN_BIN, out_dir,
                         out_dir) == 0);
    char *got = captured("stdout");
    CHECKF(*want == '[' && strcmp(want, got) == 0, "-f -: '%s', --text: '%s'", got, want);
    free(want), free(got);
}

/* A prompt that is not UTF-8 is refused naming where it came from (the
 * file, standard input, -p, --text) and the byte within it, so the user can
 * find it -- not a column of the chat JSON or an offset into a tokenizer's
 * buffer. */
static void invalid_utf8_names_the_texts_source(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-utf8"));
    char path[1200];
    snprintf(path, sizeof path, "%s/bad.txt", out_dir);
    CHECK(nx_test_write_file(path, "hi \xff there", 10) == 0);
    static const struct { const char *args, *source; } cases[] = {
        {"generate -n 2 -t 1 -f '%s'", "bad.txt"},
        {"generate -n 2 -t 1 --chat -f '%s'", "bad.txt"},
        {"generate -n 2 -t 1 -f - < '%s'", "standard input"},
        {"generate -n 2 -t 1 -p \"$(cat '%s')\"", "-p"},
        {"tokenize -f '%s'", "bad.txt"},
        {"tokenize --text \"$(cat '%s')\"", "--text"},
        {"perplexity -f '%s'", "bad.txt"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[2600], want[64];
        snprintf(args, sizeof args, cases[i].args, path);
        snprintf(want, sizeof want, "%s: invalid UTF-8 at byte 3\n", cases[i].source);
        const int rc = nextn(args);
        char *err = captured("stderr");
        const size_t el = strlen(err), wl = strlen(want);
        CHECKF(rc == 1 && strchr(err, '\n') == err + el - 1 && el >= wl && strcmp(err + el - wl, want) == 0,
               "nextn %s -> %d, stderr '%s'", args, rc, err);
        free(err);
    }
}

/* Output that cannot be written (a full device) is a failure: exit 1 and a
 * message, for every command that prints its result. */
static void output_that_cannot_be_written_fails(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-full"));
    CHECKF(access("/dev/full", W_OK) == 0, "/dev/full is needed for this test");
    static const char *const cmds[] = {"tokenize --text hi", "generate -p hi -n 4 -t 1", "generate -p hi -n 4 -t 1 --json",
                                       "inspect --json"};
    for (int i = 0; i < 4; i++) {
        const int rc = nx_test_system("'%s' %s > /dev/full 2> '%s/stderr'", NX_NEXTN_BIN, cmds[i], out_dir);
        char *err = captured("stderr");
        CHECKF(rc == 1 && strstr(err, "writing the output failed"), "nextn %s > /dev/full -> %d, stderr '%s'", cmds[i], rc,
               err);
        free(err);
    }
}

/* `nextn serve ARGS` must exit 1 with `want` on stderr. A server that
 * started instead is stopped by timeout(1) after 60 s: a failure, not a hang. */
static void expect_serve_fails(const char *args, const char *want) {
    const int rc = nx_test_system("timeout 60 '%s' %s > '%s/stdout' 2> '%s/stderr'", NX_NEXTN_BIN, args, out_dir, out_dir);
    char *err = captured("stderr");
    CHECKF(rc == 1 && strstr(err, want), "nextn %s -> %d, stderr '%s'", args, rc, err);
    free(err);
}

/* An address the server cannot bind, or a port another socket listens on:
 * serve exits 1 naming the address (after the model loads), not a server
 * that never answers. */
static void serve_fails_where_it_cannot_listen(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-port"));
    expect_serve_fails("serve -m '" GOLDEN "/hf' -t 1 --mtp off --host not-an-address --port 0",
                       "server: cannot listen on not-an-address:0 (an IPv4 address and a port 0-65535)");
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
    const int port = ntohs(a.sin_port);
    char args[1200], want[128];
    snprintf(args, sizeof args, "serve -m '%s/hf' -t 1 --mtp off --port %d", GOLDEN, port);
    snprintf(want, sizeof want, "server: cannot listen on 127.0.0.1:%d (in use, or not permitted)", port);
    expect_serve_fails(args, want);
    close(fd);
}

/* out_dir/model: the tiny checkpoint's files linked, but `file` (a JSON
 * file of it) written from `edited` (taken); returns the static path. */
static const char *edited_copy(const char *file, json_t *edited) {
    static char dir[1100];
    char path[1200];
    snprintf(dir, sizeof dir, "%s/model", out_dir);
    CHECK(nx_test_system("mkdir '%s' && for f in config.json generation_config.json model.safetensors tokenizer.json "
                         "tokenizer_config.json; do ln -s '%s/hf/'$f '%s/'$f; done && rm '%s/%s'",
                         dir, GOLDEN, dir, dir, file) == 0);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK(edited && json_dump_file(edited, path, 0) == 0);
    json_decref(edited);
    return dir;
}

/* A model whose context is 16 tokens: perplexity's default window shrinks to
 * it (the same figures as --ctx 16), and a --ctx asked for beyond it is a
 * usage error naming both. */
static void perplexity_windows_fit_the_models_context(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-ppl-ctx"));
    json_error_t je;
    json_t *cfg = json_load_file(GOLDEN "/hf/config.json", 0, &je);
    json_t *tc = json_object_get(cfg, "text_config");
    CHECK(cfg && json_object_set_new(tc ? tc : cfg, "max_position_embeddings", json_integer(16)) == 0);
    const char *dir = edited_copy("config.json", cfg);
    char ids[200] = "", args[1400];
    for (int i = 10; i <= 50; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i > 10 ? "," : "", i);
    char *figures[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "perplexity -m '%s' -t 1 --ids %s%s", dir, ids, k ? " --ctx 16" : "");
        CHECKF(nextn(args) == 0, "nextn %s", args);
        char *out = captured("stdout"), *cut = strstr(out, "windows of up to ");
        if (cut && (cut = strchr(cut, ';'))) *cut = 0;   /* the figures, not the timing */
        figures[k] = out;
    }
    CHECKF(strstr(figures[0], "in 3 windows of up to 16") && strcmp(figures[0], figures[1]) == 0,
           "default: '%s', --ctx 16: '%s'", figures[0], figures[1]);
    free(figures[0]), free(figures[1]);
    snprintf(args, sizeof args, "perplexity -m '%s' -t 1 --ids %s --ctx 17", dir, ids);
    const int rc = nextn(args);
    char *err = captured("stderr");
    CHECKF(rc == 2 && strstr(err, "perplexity: --ctx 17 exceeds the model's context of 16 tokens"), "-> %d, '%s'", rc, err);
    free(err);
}

/* A checkpoint whose tokenizer files carry no chat template: --chat says so
 * and names --chat-template; a --chat-template that cannot be read is named. */
static void chat_without_a_template_names_the_fix(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-notmpl"));
    json_error_t je;
    json_t *tc = json_load_file(GOLDEN "/hf/tokenizer_config.json", 0, &je);
    CHECK(tc && json_object_del(tc, "chat_template") == 0);
    const char *dir = edited_copy("tokenizer_config.json", tc);
    char args[3000], want[1300];
    snprintf(args, sizeof args, "generate -m '%s' -p hi -n 1 -t 1 --chat", dir);
    snprintf(want, sizeof want, "%s: the tokenizer files have no chat_template; pass --chat-template FILE", dir);
    int rc = nextn(args);
    char *err = captured("stderr");
    CHECKF(rc == 1 && strstr(err, want), "nextn %s -> %d, stderr '%s'", args, rc, err);
    free(err);
    snprintf(args, sizeof args, "generate -m '%s' -p hi -n 1 -t 1 --chat --chat-template '%s/none.jinja'", dir, out_dir);
    snprintf(want, sizeof want, "%s/none.jinja: cannot read the chat template", out_dir);
    rc = nextn(args);
    err = captured("stderr");
    CHECKF(rc == 1 && strstr(err, want), "nextn %s -> %d, stderr '%s'", args, rc, err);
    free(err);
    /* the fix it names works: the same model with the template given as a file */
    snprintf(args, sizeof args, "generate -m '%s' -p hi -n 1 -t 1 --chat --chat-template '%s/chat/Qwen3.5-4B.jinja'", dir,
             NX_TEST_DATA);
    rc = nextn(args);
    err = captured("stderr");
    CHECKF(rc == 0, "nextn %s -> %d, stderr '%s'", args, rc, err);
    free(err);
}

static const nx_test tests[] = {
    {"a_file_of_dash_is_standard_input", "tokenize -f - of a piped text = --text", a_file_of_dash_is_standard_input},
    {"invalid_utf8_names_the_texts_source", "a prompt or text that is not UTF-8: exit 1 naming the file, stdin, -p or --text "
     "and the byte", invalid_utf8_names_the_texts_source},
    {"perplexity_windows_fit_the_models_context", "a 16-token model: the default window shrinks to 16; --ctx 17 is a usage error",
     perplexity_windows_fit_the_models_context},
    {"serve_fails_where_it_cannot_listen", "serve on a bad address or a port in use: exit 1 naming the address",
     serve_fails_where_it_cannot_listen},
    {"chat_without_a_template_names_the_fix", "--chat without a chat_template names --chat-template; an unreadable one is named",
     chat_without_a_template_names_the_fix},
    {"output_that_cannot_be_written_fails", "tokenize, generate (text and --json), inspect > /dev/full: exit 1 with a message",
     output_that_cannot_be_written_fails},
    {"generate_defaults_to_the_bundled_model", "no -m: models/default, text in, readable text out, MTP stats",
     generate_defaults_to_the_bundled_model},
    {"perplexity_matches_llamacpp_logits", "nextn perplexity in one window = exp(mean NLL) of llama.cpp's logits (1e-3); "
     "windows of 10 score 33 tokens; --text through the tokenizer", perplexity_matches_llamacpp_logits},
    {"logits_command_writes_golden_npy", "nextn logits writes [L,V] and [L,H] .npy files matching llama.cpp", logits_command_writes_golden_npy},
    {"inspect_json_describes_the_checkpoint", "nextn inspect --json reports dims, pattern, dtype, MTP, layout", inspect_json_describes_the_checkpoint},
    {"generate_greedy_matches_llamacpp", "nextn generate greedy ids equal llama.cpp's; --json and --stats", generate_greedy_matches_llamacpp},
    {"seeded_sampling_is_reproducible", "the same seed gives the same sample, another seed differs", seeded_sampling_is_reproducible},
    {"tokenize_and_detokenize_round_trip", "tokenize matches Hugging Face ids, --no-special keeps text, detokenize inverts", tokenize_and_detokenize_round_trip},
    {"chat_template_command_is_byte_exact", "chat-template renders golden conversations byte for byte; template errors exit 1", chat_template_command_is_byte_exact},
    {"chat_prompt_reproduces_llamacpp_tokens", "generate --chat builds the same prompt ids llama.cpp tokenized", chat_prompt_reproduces_llamacpp_tokens},
    {"generate_with_mtp_reports_acceptance", "MTP on (every draft option) gives plain greedy ids and reports acceptance", generate_with_mtp_reports_acceptance},
    {"state_saved_in_one_process_continues_in_another",
     "--save-state then --load-state in a new process equals one run; with --chat the prompt is the next turn",
     state_saved_in_one_process_continues_in_another},
    {"logits_mtp_out_matches_llamacpp", "logits --mtp-out writes the head's teacher-forced logits, matching llama.cpp", logits_mtp_out_matches_llamacpp},
    {"a_failed_save_ends_the_texts_line", "--save-state through a link to nowhere refused first; failing after generating: exit 1, the text's line ended first",
     a_failed_save_ends_the_texts_line},
    {"generate_makes_64_tokens_by_default", "no -n: 64 tokens, as the help says", generate_makes_64_tokens_by_default},
    {"ignore_eos_runs_past_the_models_eos", "--ignore-eos with the eos forced: -n tokens, plain and drafted; without it one",
     ignore_eos_runs_past_the_models_eos},
    {"a_sequence_may_fill_the_models_context", "context 16: prompt 4 + -n 12 runs (drafts or not), -n 13 exits 1 naming the sizes",
     a_sequence_may_fill_the_models_context},
    {"echo_with_json_prints_only_the_json", "--echo --json: stdout parses as one JSON object", echo_with_json_prints_only_the_json},
    {"logit_bias_forces_a_token", "--logit-bias ID:100 makes greedy output that id, the flag repeated",
     logit_bias_forces_a_token},
    {"bad_use_exits_2_with_one_line", "bad options exit 2, runtime errors exit 1, each with one stderr line", bad_use_exits_2_with_one_line},
    {"quantize_mode_writes_a_loadable_checkpoint", "quantize --mode nvfp4: inspect names the format, generate --mtp on runs",
     quantize_mode_writes_a_loadable_checkpoint},
};

NX_TEST_MAIN(tests)
