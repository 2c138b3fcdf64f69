/* test_drafter_sources.c — the three places an MTP drafter is loaded from
 * (spec §1.4, §2.3, §2.4), and the +1 rule that goes with each: the target's
 * own mtp.* tensors (raw, +1 at load), a separate qwen3_5_mtp drafter
 * directory (bare keys, already shifted), an mtp.safetensors beside the
 * target (raw, +1), and language_model.mtp.* inside an MLX target (already
 * shifted). nextn-fixture writes the same head, for one seed, in each of
 * these layouts (--mtp-layout); the fixtures are f32 so that the sources can
 * be compared tightly. Each variant is generated once, on first use, into
 * one temp directory per test program. */
#include "test.h"

#include <jansson.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "nextn.h"

/* f32 weights, and the +1 is the same f32 addition wherever it is done (the
 * fixture's 1.0f + w, the loader's w + 1.0f), so every source is the same
 * head bit for bit (max |d| is 0). 1e-5 leaves room for a reordered sum,
 * not for a wrong norm: a missing or extra +1 moves the logits by units. */
#define SOURCES_MAX_ABS 1e-5
/* A double shift moves every zero-centred norm from ~1 to ~2: the logits
 * move by units, far beyond this. */
#define DOUBLE_SHIFT_MIN_ABS 1e-2

#define SEED "7"
#define N_TOKENS 20

static char g_root[1024];

/* Runs nextn-fixture once per tag, into g_root/<tag>; returns the dir. */
static const char *fixture(const char *tag, const char *args) {
    static char dirs[4][1200];   /* rotating, so two results can be used together */
    static int k;
    char *dir = dirs[k = (k + 1) & 3];
    if (!g_root[0]) snprintf(g_root, sizeof g_root, "%s", nx_test_tmpdir("drafter_sources"));
    snprintf(dir, sizeof dirs[0], "%s/%s", g_root, tag);
    if (access(dir, F_OK) != 0) {
        int rc = nx_test_system("'%s' --out '%s' --seed " SEED " --dtype f32 %s", NX_FIXTURE_BIN, dir, args);
        CHECKF(rc == 0, "nextn-fixture %s exited %d", args, rc);
    }
    return dir;
}

static const char *inline_dir(void) { return fixture("inline", "--mtp-layout inline"); }
static const char *separate_dir(void) { return fixture("separate", "--mtp-layout separate"); }
static const char *file_dir(void) { return fixture("file", "--mtp-layout file"); }
static const char *mlx_inline_dir(void) { return fixture("mlx_inline", "--layout mlx --mtp-layout mlx-inline"); }

static nx_drafter *load_drafter(const nx_model *m, const char *dir) {
    char err[512];
    nx_drafter *d = NULL;
    nx_status st = nx_drafter_load(m, dir, NULL, &d, err, sizeof err);
    CHECKF(st == NX_OK, "%s: %s", dir ? dir : "(target)", err);
    return d;
}

/* Teacher-forced head logits ([N_TOKENS-1][vocab], caller frees) of the
 * target in target_dir with the drafter from drafter_dir (NULL: the
 * target's own); NULL on failure. *vocab gets the vocabulary size. */
static float *head_logits(const char *target_dir, const char *drafter_dir, int *vocab, int *block_size) {
    nx_model *m = nx_test_model(target_dir, 2);
    nx_drafter *d = m ? load_drafter(m, drafter_dir) : NULL;
    float *logits = NULL;
    if (d) {
        int V = nx_model_get_info(m)->vocab_size;
        int32_t seq[N_TOKENS];
        nx_test_tokens(seq, N_TOKENS, V, 12345u);
        logits = malloc((size_t)(N_TOKENS - 1) * (size_t)V * sizeof *logits);
        char err[512];
        nx_status st = nx_drafter_teacher_forced(d, seq, N_TOKENS, logits, NULL, err, sizeof err);
        CHECKF(st == NX_OK, "%s", err);
        if (st) free(logits), logits = NULL;
        *vocab = V;
        if (block_size) *block_size = nx_drafter_block_size(d);
    }
    nx_drafter_free(d);
    nx_model_free(m);
    return logits;
}

/* max |a - b| over every row, and the rows whose argmax differs. */
static double max_abs_diff(const float *a, const float *b, int V, long *argmax_diff) {
    nx_test_diff d = nx_test_compare(a, b, (long)(N_TOKENS - 1) * V);
    *argmax_diff = 0;
    for (long r = 0; r < N_TOKENS - 1; r++)
        *argmax_diff += nx_test_argmax(a + r * V, V) != nx_test_argmax(b + r * V, V);
    return d.max_abs;
}

/* ---- The four sources agree ------------------------------------------------ */

static void every_drafter_source_gives_the_same_logits(void) {
    char sep_drafter[1300];
    snprintf(sep_drafter, sizeof sep_drafter, "%s/mtp-drafter", separate_dir());
    struct {
        const char *what, *target, *drafter;
    } src[] = {
        {"inline mtp.* (+1 at load)", inline_dir(), NULL},
        {"separate mtp-drafter/ (shifted)", separate_dir(), sep_drafter},
        {"mtp.safetensors (+1 at load)", file_dir(), NULL},
        {"mlx language_model.mtp.* (shifted)", mlx_inline_dir(), NULL},
    };
    int n = (int)(sizeof src / sizeof src[0]), V = 0, V1 = 0, bs = 0;
    float *ref = head_logits(src[0].target, src[0].drafter, &V, NULL);
    if (!ref) return;
    for (int i = 1; i < n; i++) {
        float *got = head_logits(src[i].target, src[i].drafter, &V1, &bs);
        CHECKF(got != NULL && V1 == V, "%s: no logits", src[i].what);
        if (!got) continue;
        long bad;
        double d = max_abs_diff(got, ref, V, &bad);
        printf("  %-36s max|d| vs inline %.3e  argmax mismatches %ld\n", src[i].what, d, bad);
        CHECKF(d <= SOURCES_MAX_ABS && bad == 0, "%s: max|d| %.3e, %ld argmax mismatches", src[i].what, d, bad);
        if (src[i].drafter) CHECKF(bs == 3, "%s: block_size %d, want the config's 3", src[i].what, bs);
        free(got);
    }
    free(ref);
}

/* ---- Writing drafter directories that are wrong on purpose ------------------ */

static json_t *read_config(const char *dir) {
    char path[1400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    CHECKF(j != NULL, "%s: %s", path, e.text);
    return j;
}

/* A copy of the drafter directory src as g_root/<tag>: config.json is cfg
 * (consumed), and the tensors of src's model.safetensors are renamed to
 * key_prefix + name, `drop` left out (NULL: none), and fc.weight given the
 * shape [2H, H] when bad_fc (same bytes, the transposed shape). Returns the
 * new directory, or NULL. */
static const char *write_drafter(const char *tag, const char *src, json_t *cfg, const char *key_prefix, const char *drop,
                                 int bad_fc) {
    static char dir[1200];
    char path[1400], err[512];
    snprintf(dir, sizeof dir, "%s/%s", g_root, tag);
    CHECK(nx_test_system("mkdir -p '%s'", dir) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = cfg ? json_dump_file(cfg, path, JSON_INDENT(2)) : -1;
    json_decref(cfg);
    CHECKF(rc == 0, "cannot write %s", path);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    st_set *in = NULL;
    st_writer *w = NULL;
    nx_status st = st_open_file(path, &in, err, sizeof err);
    if (!st) st = st_writer_new(&w, err, sizeof err);
    if (!st) st = st_writer_meta(w, "format", "mlx", err, sizeof err);
    for (int i = 0; !st && i < st_count(in); i++) {
        const st_tensor *t = st_at(in, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        char name[256];
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (bad_fc && strcmp(t->name, "fc.weight") == 0) shape[0] = t->shape[1], shape[1] = t->shape[0];
        snprintf(name, sizeof name, "%s%s", key_prefix, t->name);
        st = st_writer_add(w, name, t->dtype, t->ndim, shape, t->data, t->nbytes, err, sizeof err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!st) st = st_writer_write(w, path, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    st_writer_free(w);
    st_close(in);
    return st ? NULL : dir;
}

/* The mlx-vlm double-shift bug (#1554) turned around: a drafter whose values
 * are already shifted but whose keys carry the raw "mtp." prefix gets +1
 * again, because the rule is decided by the key prefix alone. So the logits
 * must differ from the correct ones; if they did not, the loader would be
 * guessing the layout some other way and the rule would no longer be the one
 * mlx-vlm (and spec §2.4) states. */
static void a_double_shifted_drafter_is_caught(void) {
    char src[1300];
    snprintf(src, sizeof src, "%s/mtp-drafter", separate_dir());
    const char *dir = write_drafter("double_shift", src, read_config(src), "mtp.", NULL, 0);
    int V = 0, V1 = 0;
    float *good = head_logits(separate_dir(), src, &V, NULL);
    float *bad = dir ? head_logits(separate_dir(), dir, &V1, NULL) : NULL;
    CHECK(good && bad && V == V1);
    if (good && bad) {
        long am;
        double d = max_abs_diff(bad, good, V, &am);
        printf("  double-shifted head: max|d| %.3e, argmax differs in %ld of %d rows\n", d, am, N_TOKENS - 1);
        CHECKF(d > DOUBLE_SHIFT_MIN_ABS, "a shifted head under mtp. keys gives the same logits (max|d| %.3e)", d);
    }
    free(good);
    free(bad);
}

/* ---- Errors name the problem --------------------------------------------------- */

/* Loads dir as a drafter for the separate-layout target; expects status want
 * and every needle in the message, and no drafter. */
static void expect_error(const nx_model *m, const char *dir, nx_status want, const char *const *needles, int n_needles,
                         const char *what) {
    if (!m || !dir) return;
    char err[512] = "";
    nx_drafter *d = (nx_drafter *)&err;   /* not NULL, so that clearing *out is seen */
    nx_status st = nx_drafter_load(m, dir, NULL, &d, err, sizeof err);
    CHECKF(st == want, "%s: status %s, want %s (%s)", what, nx_status_str(st), nx_status_str(want), err);
    CHECKF(d == NULL, "%s: *out not cleared on failure", what);
    for (int i = 0; i < n_needles; i++) CHECKF(strstr(err, needles[i]) != NULL, "%s: '%s' lacks '%s'", what, err, needles[i]);
    printf("  %-28s %s: %s\n", what, nx_status_str(st), err);
    if (st == NX_OK) nx_drafter_free(d);
}

static void drafter_dir_errors_name_the_problem(void) {
    char src[1300];
    snprintf(src, sizeof src, "%s/mtp-drafter", separate_dir());
    nx_model *m = nx_test_model(separate_dir(), 2);
    json_t *cfg;

    cfg = read_config(src);
    json_object_set_new(cfg, "model_type", json_string("qwen3_5"));
    expect_error(m, write_drafter("err_type", src, cfg, "", NULL, 0), NX_EUNSUPPORTED,
                 (const char *[]){"not a qwen3_5_mtp drafter", "config.json"}, 2, "model_type qwen3_5");

    cfg = read_config(src);
    json_object_set_new(json_object_get(cfg, "text_config"), "hidden_size", json_integer(64));
    expect_error(m, write_drafter("err_hidden", src, cfg, "", NULL, 0), NX_EINVAL,
                 (const char *[]){"different checkpoint", "64", "128"}, 3, "hidden_size 64 vs 128");

    cfg = read_config(src);
    json_object_del(json_object_get(cfg, "text_config"), "hidden_size");
    expect_error(m, write_drafter("err_no_hidden", src, cfg, "", NULL, 0), NX_EFORMAT,
                 (const char *[]){"text_config.hidden_size is missing"}, 1, "hidden_size missing");

    cfg = read_config(src);
    json_object_set_new(json_object_get(cfg, "text_config"), "vocab_size", json_string("512"));
    expect_error(m, write_drafter("err_vocab_type", src, cfg, "", NULL, 0), NX_EFORMAT,
                 (const char *[]){"text_config.vocab_size must be an integer"}, 1, "vocab_size a string");

    cfg = read_config(src);
    json_object_del(cfg, "text_config");
    expect_error(m, write_drafter("err_no_text", src, cfg, "", NULL, 0), NX_EFORMAT,
                 (const char *[]){"text_config is missing"}, 1, "text_config missing");

    cfg = read_config(src);
    json_object_set_new(json_object_get(cfg, "text_config"), "model_type", json_string("llama"));
    expect_error(m, write_drafter("err_text_type", src, cfg, "", NULL, 0), NX_EUNSUPPORTED,
                 (const char *[]){"drafter for a llama model, but the target is Qwen3.5"}, 1, "text model_type llama");

    cfg = read_config(src);
    json_object_set_new(json_object_get(cfg, "text_config"), "vocab_size", json_integer(7));
    expect_error(m, write_drafter("err_vocab", src, cfg, "", NULL, 0), NX_EINVAL,
                 (const char *[]){"drafter vocab_size 7 != target", "different checkpoint"}, 2, "vocab_size 7");

    cfg = read_config(src);
    json_object_set_new(cfg, "quantization", json_pack("{s:s,s:i,s:i}", "mode", "int3", "bits", 3, "group_size", 64));
    expect_error(m, write_drafter("err_qmode", src, cfg, "", NULL, 0), NX_EUNSUPPORTED,
                 (const char *[]){"quantization mode 'int3' is not supported"}, 1, "quantization mode int3");

    expect_error(m, write_drafter("err_no_fc", src, read_config(src), "", "fc.weight", 0), NX_EFORMAT,
                 (const char *[]){"no fc.weight or mtp.fc.weight", "not an MTP drafter"}, 2, "fc.weight missing");

    const char *k_norm = "layers.0.self_attn.k_norm.weight";
    expect_error(m, write_drafter("err_missing", src, read_config(src), "", k_norm, 0), NX_EFORMAT,
                 (const char *[]){k_norm, "missing"}, 2, "k_norm missing");

    expect_error(m, write_drafter("err_fc_shape", src, read_config(src), "", NULL, 1), NX_EFORMAT,
                 (const char *[]){"'fc.weight'", "[256, 128]", "[128, 256]"}, 3, "fc.weight [2H, H]");

    cfg = read_config(src);
    json_object_set_new(json_object_get(cfg, "text_config"), "mtp_use_dedicated_embeddings", json_true());
    expect_error(m, write_drafter("err_dedicated", src, cfg, "", NULL, 0), NX_EUNSUPPORTED,
                 (const char *[]){"mtp_use_dedicated_embeddings"}, 1, "dedicated embeddings");

    nx_model_free(m);
}

/* ---- Speculative decoding with the separate drafter ---------------------------- */

/* Generates n_gen tokens (the prefill's first included) with K drafts per
 * round; d NULL is plain decoding. Returns how many; *stats gets the stats. */
static int generate(const nx_model *m, const nx_drafter *d, const int32_t *prompt, int n_prompt, int n_gen, int K,
                    int32_t *out, nx_spec_stats *stats) {
    char err[512];
    nx_spec *s = NULL;
    nx_spec_opts o = {.draft = K, .accept = NX_ACCEPT_GREEDY, .sampling = nx_sampling_default()};
    nx_status st = nx_spec_new(m, d, n_prompt + n_gen + 1, &o, &s, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    if (st) return 0;
    int n = 0;
    st = nx_spec_prefill(s, prompt, n_prompt, &out[0], err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    if (!st) n = 1;
    while (!st && n < n_gen) {
        int got = 0;
        st = nx_spec_step(s, n_gen - n, out + n, &got, err, sizeof err);
        CHECKF(st == NX_OK, "%s", err);
        n += got;
    }
    *stats = *nx_spec_get_stats(s);
    nx_spec_free(s);
    return n;
}

static void speculative_decoding_with_a_separate_drafter_equals_plain(void) {
    enum { N_PROMPT = 12, N_GEN = 100, K = 2 };
    char dir[1300];
    snprintf(dir, sizeof dir, "%s/mtp-drafter", separate_dir());
    nx_model *m = nx_test_model(separate_dir(), 2);
    nx_drafter *d = m ? load_drafter(m, dir) : NULL;
    nx_model *mi = nx_test_model(inline_dir(), 2);
    nx_drafter *di = mi ? load_drafter(mi, NULL) : NULL;
    if (d && di) {
        int32_t prompt[N_PROMPT], plain[N_GEN], spec[N_GEN], own[N_GEN];
        nx_test_tokens(prompt, N_PROMPT, nx_model_get_info(m)->vocab_size, 777u);
        nx_spec_stats s0, s1, s2;
        int n0 = generate(m, NULL, prompt, N_PROMPT, N_GEN, K, plain, &s0);
        int n1 = generate(m, d, prompt, N_PROMPT, N_GEN, K, spec, &s1);
        CHECK(n0 == N_GEN);
        CHECKF(n1 == n0 && memcmp(plain, spec, (size_t)n0 * sizeof *plain) == 0, "speculative ids differ from plain");
        CHECKF(s1.drafted > 0 && s1.emitted == n1 && s1.rounds == s1.target_forwards - 1,
               "drafted %lld emitted %lld rounds %lld forwards %lld", (long long)s1.drafted, (long long)s1.emitted,
               (long long)s1.rounds, (long long)s1.target_forwards);
        /* the same head as the target's own: the same drafts get accepted */
        int n2 = generate(mi, di, prompt, N_PROMPT, N_GEN, K, own, &s2);
        CHECK(n2 == n1 && memcmp(own, spec, (size_t)n1 * sizeof *own) == 0);
        CHECKF(s2.drafted == s1.drafted && s2.accepted == s1.accepted, "separate %lld/%lld accepted, inline %lld/%lld",
               (long long)s1.accepted, (long long)s1.drafted, (long long)s2.accepted, (long long)s2.drafted);
        printf("  K = %d: %lld of %lld drafts accepted, %lld target forwards for %d tokens\n", K, (long long)s1.accepted,
               (long long)s1.drafted, (long long)s1.target_forwards, n1);
    }
    nx_drafter_free(di);
    nx_model_free(mi);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* Regression: the dedicated-embeddings check once ran only for heads found in
 * the target's own files, so an mtp.safetensors beside the weights slipped past. */
static void dedicated_embeddings_are_refused_for_every_source(void) {
    static const char *tags[2][2] = {{"dedicated_inline", "--mtp-layout inline"}, {"dedicated_file", "--mtp-layout file"}};
    for (int i = 0; i < 2; i++) {
        const char *dir = fixture(tags[i][0], tags[i][1]);
        char path[1300], err[512];
        snprintf(path, sizeof path, "%s/config.json", dir);
        json_t *cfg = json_load_file(path, 0, NULL);
        CHECK(cfg != NULL);
        if (!cfg) continue;
        json_object_set_new(json_object_get(cfg, "text_config"), "mtp_use_dedicated_embeddings", json_true());
        json_dump_file(cfg, path, JSON_INDENT(2));
        json_decref(cfg);
        nx_model *m = nx_test_model(dir, 2);
        nx_drafter *d = NULL;
        CHECKF(m && nx_drafter_load(m, NULL, NULL, &d, err, sizeof err) == NX_EUNSUPPORTED && d == NULL &&
                   strstr(err, "mtp_use_dedicated_embeddings"),
               "%s: %s", tags[i][0], err);
        nx_model_free(m);
    }
}

static const nx_test tests[] = {
    {"dedicated_embeddings_are_refused_for_every_source", "mtp_use_dedicated_embeddings is refused for inline and mtp.safetensors heads",
     dedicated_embeddings_are_refused_for_every_source},
    {"every_drafter_source_gives_the_same_logits",
     "inline mtp.*, separate mtp-drafter/, mtp.safetensors, MLX language_model.mtp.*: teacher-forced logits within 1e-5",
     every_drafter_source_gives_the_same_logits},
    {"a_double_shifted_drafter_is_caught", "shifted values under raw mtp. keys get +1 again: the logits differ",
     a_double_shifted_drafter_is_caught},
    {"drafter_dir_errors_name_the_problem",
     "wrong model_type, text model, hidden_size, vocab_size or quantization mode, no text_config, a missing or mis-shaped tensor, "
     "no fc.weight, dedicated embeddings: status and message",
     drafter_dir_errors_name_the_problem},
    {"speculative_decoding_with_a_separate_drafter_equals_plain",
     "greedy K = 2, 100 tokens: ids equal plain decoding and the inline head's run",
     speculative_decoding_with_a_separate_drafter_equals_plain},
};

NX_TEST_MAIN(tests)
