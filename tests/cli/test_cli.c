/* test_cli.c — the `nextn` binary end to end: logits .npy files against
 * llama.cpp's golden logits, inspect --json, greedy and seeded generation,
 * and exit codes with one-line errors for bad use. */
#include "test.h"

#include <jansson.h>

#define GOLDEN NX_TEST_DATA "/golden/llamacpp-tiny-a-untied-bf16"

static char out_dir[1024];

/* Runs `nextn ARGS` with stdout/stderr captured into out_dir; returns the exit code. */
static int nextn(const char *args) {
    return nx_test_system("'%s' %s > '%s/stdout' 2> '%s/stderr'", NX_NEXTN_BIN, args, out_dir, out_dir);
}

static char *captured(const char *which) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", out_dir, which);
    char *s = nx_test_read_file(path, NULL);
    return s ? s : calloc(1, 1);
}

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
    /* streaming form: the same ids, space separated */
    snprintf(args, sizeof args, "generate -m '%s/hf' --prompt-ids %s -n 5 --stats", GOLDEN, prompt);
    CHECK(nextn(args) == 0);
    out = captured("stdout");
    char expect[128];
    snprintf(expect, sizeof expect, "%d %d %d %d %d\n", want[0], want[1], want[2], want[3], want[4]);
    CHECKF(strcmp(out, expect) == 0, "got '%s'", out);
    free(out);
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
}

static void bad_use_exits_2_with_one_line(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("cli-usage"));
    static const struct { const char *args; int code; const char *needle; } cases[] = {
        {"frobnicate", 2, "unknown command 'frobnicate'"},
        {"logits -m x --out y.npy", 2, "--tokens is required"},
        {"logits -m x --tokens 1,2,x --out y.npy", 2, "--tokens"},
        {"generate -m x --prompt-ids 1 -n -4", 2, "-n"},
        {"generate -m x --prompt-ids 1 --temp hot", 2, "--temp"},
        {"generate -m x", 2, "exactly one of"},
        {"generate -m x -p hello", 2, "tokenizer"},
        {"inspect --bogus", 2, "unknown option '--bogus'"},
        {"inspect -t 0 -m x", 2, "--threads"},
        {"inspect -m /nonexistent/model", 1, "/nonexistent/model"},
        {"generate -m '" GOLDEN "/hf' --prompt-ids 1,99999", 1, "99999"},
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
    for (const char *const *c = (const char *const[]){"--help", "generate --help", "logits --help", "inspect --help", NULL}; *c; c++) {
        char args[64];
        snprintf(args, sizeof args, "%s", *c);
        CHECKF(nextn(args) == 0, "nextn %s", *c);
        char *out = captured("stdout");
        CHECK(strstr(out, "usage") != NULL);
        free(out);
    }
}

static const nx_test tests[] = {
    {"logits_command_writes_golden_npy", "nextn logits writes [L,V] and [L,H] .npy files matching llama.cpp", logits_command_writes_golden_npy},
    {"inspect_json_describes_the_checkpoint", "nextn inspect --json reports dims, pattern, dtype, MTP, layout", inspect_json_describes_the_checkpoint},
    {"generate_greedy_matches_llamacpp", "nextn generate greedy ids equal llama.cpp's; --json and --stats", generate_greedy_matches_llamacpp},
    {"seeded_sampling_is_reproducible", "the same seed gives the same sample, another seed differs", seeded_sampling_is_reproducible},
    {"bad_use_exits_2_with_one_line", "bad options exit 2, runtime errors exit 1, each with one stderr line", bad_use_exits_2_with_one_line},
};

NX_TEST_MAIN(tests)
