/* test_golden.c — nextn's target forward against golden outputs of two
 * independent implementations (tests/data/README.md): llama.cpp in f32 and a
 * float64 PyTorch reference. Reports max |Δ| and NMSE for every file. */
#include "test.h"

#include "nextn.h"

/* Tolerances of issue #2, in f32: the references agree with each other to
 * <= 1e-4 and llama.cpp's own batched-vs-sequential spread is 4.3e-5. */
#define GOLDEN_MAX_ABS 1e-3
#define GOLDEN_NMSE 1e-6

static nx_model *load(const char *dir, int force_ref) {
    char err[512];
    nx_model *m = NULL;
    nx_load_opts o = {.n_threads = 2, .force_reference = force_ref};
    nx_status st = nx_model_load(dir, &o, &m, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    return m;
}

static float *read_f32(const char *path, long n) {
    size_t len;
    float *v = nx_test_read_file(path, &len);
    CHECKF(v && len == (size_t)n * 4, "%s: expected %ld floats", path, n);
    return v;
}

/* Compares n rows of ours with ref; for logits every row's argmax must agree too. */
static void compare_rows(const char *what, const float *ours, const float *ref, long n, long cols, int logits) {
    nx_test_diff d = nx_test_compare(ours, ref, n * cols);
    long bad_argmax = 0;
    for (long r = 0; r < n && logits; r++)
        bad_argmax += nx_test_argmax(ours + r * cols, cols) != nx_test_argmax(ref + r * cols, cols);
    printf("  %-44s rows %3ld  max|d| %.3e  nmse %.3e  argmax mismatches %ld\n", what, n, d.max_abs, d.nmse, bad_argmax);
    CHECKF(d.max_abs <= GOLDEN_MAX_ABS, "%s: max |d| %.3e", what, d.max_abs);
    CHECKF(d.nmse <= GOLDEN_NMSE, "%s: nmse %.3e", what, d.nmse);
    CHECKF(bad_argmax == 0, "%s: %ld argmax mismatches", what, bad_argmax);
}

/* Greedy decoding from the prompt, one token per forward. */
static void greedy_generate(nx_model *m, const int *prompt, int n_prompt, int n_gen, int *out) {
    char err[512];
    const nx_model_info *in = nx_model_get_info(m);
    nx_state *s = NULL;
    CHECK(nx_state_new(m, n_prompt + n_gen, &s, err, sizeof err) == NX_OK);
    float *logits = malloc((size_t)in->vocab_size * 4);
    int32_t *ids = malloc((size_t)n_prompt * 4);
    for (int i = 0; i < n_prompt; i++) ids[i] = prompt[i];
    nx_forward_out fo = {.logits = logits};
    CHECK(nx_forward(m, s, ids, n_prompt, &fo, err, sizeof err) == NX_OK);
    for (int i = 0; i < n_gen; i++) {
        int32_t t = (int32_t)nx_test_argmax(logits, in->vocab_size);
        out[i] = t;
        if (i + 1 < n_gen) CHECK(nx_forward(m, s, &t, 1, &fo, err, sizeof err) == NX_OK);
    }
    free(logits);
    free(ids);
    nx_state_free(s);
}

/* Runs ids in one call with all rows out. */
static void run_all(nx_model *m, const int *ids_in, int n, float *logits, float *hidden, float *prenorm) {
    char err[512];
    nx_state *s = NULL;
    CHECK(nx_state_new(m, n, &s, err, sizeof err) == NX_OK);
    int32_t *ids = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) ids[i] = ids_in[i];
    nx_forward_out fo = {.logits = logits, .hidden = hidden, .prenorm = prenorm, .all_rows = 1};
    nx_status st = nx_forward(m, s, ids, n, &fo, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    free(ids);
    nx_state_free(s);
}

static void llamacpp_case(int force_ref) {
    const char *dir = NX_TEST_DATA "/golden/llamacpp-tiny-a-untied-bf16";
    nx_model *m = load(NX_TEST_DATA "/golden/llamacpp-tiny-a-untied-bf16/hf", force_ref);
    if (!m) return;
    char path[512];
    int n_tok, n_gen;
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    int *tok = nx_test_read_ids(path, &n_tok);
    snprintf(path, sizeof path, "%s/greedy.txt", dir);
    int *gen = nx_test_read_ids(path, &n_gen);
    CHECK(tok && gen && n_tok == 37 && n_gen == 32);
    const long V = 8192, H = 256, L = n_tok + n_gen - 1; /* 68 positions */
    int *seq = malloc((size_t)L * sizeof *seq);
    memcpy(seq, tok, (size_t)n_tok * sizeof *seq);
    memcpy(seq + n_tok, gen, (size_t)(n_gen - 1) * sizeof *seq);
    float *logits = malloc((size_t)(L * V) * 4), *hidden = malloc((size_t)(L * H) * 4);
    run_all(m, seq, (int)L, logits, hidden, NULL);

    snprintf(path, sizeof path, "%s/prompt_logits.f32", dir);
    float *ref = read_f32(path, n_tok * V);
    if (ref) compare_rows("llama.cpp prompt logits", logits, ref, n_tok, V, 1);
    free(ref);
    snprintf(path, sizeof path, "%s/greedy_logits.f32", dir); /* row i: position 36+i */
    ref = read_f32(path, n_gen * V);
    if (ref) compare_rows("llama.cpp greedy logits (teacher forced)", logits + (n_tok - 1) * V, ref, n_gen, V, 1);
    free(ref);
    snprintf(path, sizeof path, "%s/hidden.f32", dir);
    ref = read_f32(path, L * H);
    if (ref) compare_rows("llama.cpp post-norm hidden", hidden, ref, L, H, 0);
    free(ref);

    int *ours = malloc((size_t)n_gen * sizeof *ours);
    greedy_generate(m, tok, n_tok, n_gen, ours);
    CHECKF(memcmp(ours, gen, (size_t)n_gen * sizeof *ours) == 0, "greedy ids differ from llama.cpp");
    free(ours);
    free(seq);
    free(logits);
    free(hidden);
    free(tok);
    free(gen);
    nx_model_free(m);
}

static void torchref_case(const char *name) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/golden/%s", NX_TEST_DATA, name);
    snprintf(path, sizeof path, "%s/hf", dir);
    nx_model *m = load(path, 0);
    if (!m) return;
    const nx_model_info *in = nx_model_get_info(m);
    long V = in->vocab_size, H = in->hidden_size;
    int n_tok, n_gen;
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    int *tok = nx_test_read_ids(path, &n_tok);
    snprintf(path, sizeof path, "%s/generate.txt", dir);
    int *gen = nx_test_read_ids(path, &n_gen);
    CHECK(tok && gen && n_tok == 24 && n_gen == 32);
    long L = n_tok + n_gen - 1;
    int *seq = malloc((size_t)L * sizeof *seq);
    memcpy(seq, tok, (size_t)n_tok * sizeof *seq);
    memcpy(seq + n_tok, gen, (size_t)(n_gen - 1) * sizeof *seq);
    float *logits = malloc((size_t)(L * V) * 4), *hidden = malloc((size_t)(L * H) * 4), *prenorm = malloc((size_t)(L * H) * 4);
    run_all(m, seq, (int)L, logits, hidden, prenorm);

    static const struct { const char *file, *what; int kind; long row0; } files[] = {
        {"target_logits.npy", "float64-ref prompt logits", 0, 0},
        {"greedy_logits.npy", "float64-ref greedy logits (teacher forced)", 0, 23},
        {"hidden_postnorm.npy", "float64-ref post-norm hidden", 1, 0},
        {"hidden_prenorm.npy", "float64-ref pre-norm hidden", 2, 0},
    };
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        long rows, cols;
        snprintf(path, sizeof path, "%s/%s", dir, files[f].file);
        float *ref = nx_test_read_npy(path, &rows, &cols);
        CHECKF(ref != NULL, "cannot read %s", path);
        if (!ref) continue;
        const float *ours = files[f].kind == 0 ? logits : files[f].kind == 1 ? hidden : prenorm;
        CHECK(cols == (files[f].kind ? H : V) && files[f].row0 + rows <= L);
        char what[128];
        snprintf(what, sizeof what, "%s %s", name + 9, files[f].what);
        compare_rows(what, ours + files[f].row0 * cols, ref, rows, cols, files[f].kind == 0);
        free(ref);
    }
    int *ours = malloc((size_t)n_gen * sizeof *ours);
    greedy_generate(m, tok, n_tok, n_gen, ours);
    CHECKF(memcmp(ours, gen, (size_t)n_gen * sizeof *ours) == 0, "%s: greedy ids differ from the reference", name);
    free(ours);
    free(seq);
    free(logits);
    free(hidden);
    free(prenorm);
    free(tok);
    free(gen);
    nx_model_free(m);
}

static void llamacpp_logits_match(void) { llamacpp_case(0); }
static void llamacpp_logits_match_with_reference_kernels(void) { llamacpp_case(1); }
static void torchref_mini_a_matches(void) { torchref_case("torchref-mini-a"); }
static void torchref_copy_s0_matches(void) { torchref_case("torchref-mini-copy-s0"); }
static void torchref_copy_s005_matches(void) { torchref_case("torchref-mini-copy-s0.05"); }

static const nx_test tests[] = {
    {"llamacpp_logits_match", "bf16 untied checkpoint: logits, hidden rows and 32 greedy ids match llama.cpp", llamacpp_logits_match},
    {"llamacpp_logits_match_with_reference_kernels", "the same with every kernel routed to its scalar reference",
     llamacpp_logits_match_with_reference_kernels},
    {"torchref_mini_a_matches", "mini-a: logits, post/pre-norm hidden and greedy ids match the float64 reference", torchref_mini_a_matches},
    {"torchref_copy_s0_matches", "copy-s0 (bigram target): matches the float64 reference", torchref_copy_s0_matches},
    {"torchref_copy_s005_matches", "copy-s0.05: matches the float64 reference", torchref_copy_s005_matches},
};

NX_TEST_MAIN(tests)
