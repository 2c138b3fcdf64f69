/* test_default_model.c — the bundled model (models/default, trained by
 * tools/train) against the training side's own float64 forward
 * (tests/data/default-model, written by tools/train/export.py):
 * target and MTP logits, first-draft acceptance on held-out text, greedy
 * speculative runs, and the tokenizer's ids. */
#include "test.h"

#include <jansson.h>

#include "nextn.h"

#define MODEL_DIR NX_MODELS_DIR "/default"
#define GOLDEN_DIR NX_TEST_DATA "/default-model"

/* Issue #5: argmax agreement at every position and NMSE <= 1e-5. The C
 * engine computes in f32 and the reference in float64 from the same bf16
 * weights, so the real spread is far smaller (printed). */
#define DEFAULT_NMSE 1e-5
/* The engine and the training side measure acceptance on the same tokens;
 * they may differ only where two logits tie to within f32 rounding. */
#define ACCEPT_AGREE 0.02
#define ACCEPT_MIN 0.5

static json_t *acceptance_report(void) {
    json_error_t je;
    json_t *r = json_load_file(GOLDEN_DIR "/acceptance.json", 0, &je);
    CHECKF(r != NULL, "%s/acceptance.json: %s", GOLDEN_DIR, je.text);
    return r;
}

static int32_t *read_ids32(const char *path, int *n) {
    int *v = nx_test_read_ids(path, n);
    CHECKF(v && *n > 1, "%s: no token ids", path);
    if (!v) return NULL;
    int32_t *out = malloc((size_t)*n * sizeof *out);
    for (int i = 0; i < *n; i++) out[i] = v[i];
    free(v);
    return out;
}

static void compare(const char *what, const float *ours, const char *ref_path, long rows, long V) {
    long r, c;
    float *ref = nx_test_read_npy(ref_path, &r, &c);
    CHECKF(ref && r == rows && c == V, "%s: expected [%ld, %ld]", ref_path, rows, V);
    if (!ref) return;
    nx_test_diff d = nx_test_compare(ours, ref, rows * V);
    long bad = 0;
    for (long i = 0; i < rows; i++) bad += nx_test_argmax(ours + i * V, V) != nx_test_argmax(ref + i * V, V);
    printf("  %-28s rows %3ld  max|d| %.3e  nmse %.3e  argmax mismatches %ld\n", what, rows, d.max_abs, d.nmse, bad);
    CHECKF(d.nmse <= DEFAULT_NMSE, "%s: nmse %.3e", what, d.nmse);
    CHECKF(bad == 0, "%s: %ld argmax mismatches", what, bad);
    free(ref);
}

static void logits_match_the_training_side_forward(void) {
    nx_model *m = nx_test_model(MODEL_DIR, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) {
        nx_model_free(m);
        return;
    }
    long V = nx_model_get_info(m)->vocab_size;
    for (int k = 0; k < 3; k++) {
        char path[512], what[64];
        int n;
        snprintf(path, sizeof path, GOLDEN_DIR "/seq%d.txt", k);
        int32_t *seq = read_ids32(path, &n);
        if (!seq) continue;
        float *logits = nx_test_logits(m, seq, n);
        snprintf(path, sizeof path, GOLDEN_DIR "/seq%d_logits.npy", k);
        snprintf(what, sizeof what, "seq%d target logits", k);
        compare(what, logits, path, n, V);
        /* MTP row p = MTP(x_{p+1}, H_p), p = 0 .. n-2 */
        char err[512];
        float *mtp = malloc((size_t)(n - 1) * V * sizeof *mtp);
        CHECK(nx_drafter_teacher_forced(d, seq, n, mtp, NULL, err, sizeof err) == NX_OK);
        snprintf(path, sizeof path, GOLDEN_DIR "/seq%d_mtp_logits.npy", k);
        snprintf(what, sizeof what, "seq%d MTP logits", k);
        compare(what, mtp, path, n - 1, V);
        free(mtp), free(logits), free(seq);
    }
    nx_drafter_free(d);
    nx_model_free(m);
}

/* On held-out text as the committed context: how often the first draft,
 * argmax MTP(x_{p+1}, H_p), equals the target's argmax at p + 1. */
static void first_draft_acceptance_on_held_out_text(void) {
    json_t *rep = acceptance_report();
    nx_model *m = nx_test_model(MODEL_DIR, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    int n;
    int32_t *seq = read_ids32(GOLDEN_DIR "/heldout.txt", &n);
    if (rep && d && seq) {
        long V = nx_model_get_info(m)->vocab_size;
        float *logits = nx_test_logits(m, seq, n);
        float *mtp = malloc((size_t)(n - 1) * V * sizeof *mtp);
        char err[512];
        CHECK(nx_drafter_teacher_forced(d, seq, n, mtp, NULL, err, sizeof err) == NX_OK);
        long agree = 0;
        for (int p = 0; p + 1 < n; p++)
            agree += nx_test_argmax(mtp + (long)p * V, V) == nx_test_argmax(logits + (long)(p + 1) * V, V);
        double ours = (double)agree / (n - 1);
        double theirs = json_real_value(json_object_get(json_object_get(rep, "teacher_forced"), "first_draft"));
        printf("  first-draft acceptance over %d held-out positions: engine %.4f, training side %.4f\n", n - 1, ours,
               theirs);
        CHECKF(ours >= ACCEPT_MIN, "first-draft acceptance %.4f < %.2f", ours, ACCEPT_MIN);
        CHECKF(fabs(ours - theirs) <= ACCEPT_AGREE, "engine %.4f vs training side %.4f", ours, theirs);
        free(mtp), free(logits);
    }
    free(seq);
    nx_drafter_free(d);
    nx_model_free(m);
    json_decref(rep);
}

/* Greedy speculative decoding from held-out prompts, K = 1..3, the way the
 * training side simulated it: same per-position acceptance, same output, and
 * the output equals plain greedy decoding. */
static void greedy_speculative_runs_match_the_training_side(void) {
    json_t *rep = acceptance_report();
    nx_model *m = nx_test_model(MODEL_DIR, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!rep || !d) goto done;
    json_t *prompts = json_object_get(json_object_get(rep, "prompts"), "ids");
    int n_gen = (int)json_integer_value(json_object_get(json_object_get(rep, "prompts"), "generate"));
    CHECK(json_array_size(prompts) > 0 && n_gen > 0);
    int32_t *out = malloc((size_t)n_gen * sizeof *out), *plain = malloc((size_t)n_gen * sizeof *plain);
    for (int K = 1; K <= 3; K++) {
        char key[8];
        snprintf(key, sizeof key, "%d", K);
        json_t *theirs = json_object_get(json_object_get(rep, "speculative"), key);
        int64_t tried[3] = {0}, hits[3] = {0};
        int same_as_theirs = 0, n_prompts = (int)json_array_size(prompts);
        for (int i = 0; i < n_prompts; i++) {
            json_t *pj = json_array_get(prompts, (size_t)i);
            int np = (int)json_array_size(pj);
            int32_t *prompt = malloc((size_t)np * sizeof *prompt);
            for (int j = 0; j < np; j++) prompt[j] = (int32_t)json_integer_value(json_array_get(pj, (size_t)j));
            nx_spec_opts o = {.draft = K, .accept = NX_ACCEPT_GREEDY};
            nx_spec_stats st;
            CHECK(nx_test_generate(m, d, &o, prompt, np, n_gen, out, &st) == n_gen);
            for (int k = 0; k < K; k++) tried[k] += st.tried[k], hits[k] += st.hits[k];
            /* plain greedy decoding of the same prompt (no drafter) */
            int np_out = nx_test_generate(m, NULL, &o, prompt, np, n_gen, plain, NULL);
            CHECK(np_out == n_gen && memcmp(out, plain, (size_t)n_gen * sizeof *out) == 0);
            json_t *ref = json_array_get(json_object_get(theirs, "outputs"), (size_t)i);
            int same = (int)json_array_size(ref) == n_gen;
            for (int j = 0; same && j < n_gen; j++) same = json_integer_value(json_array_get(ref, (size_t)j)) == out[j];
            same_as_theirs += same;
            free(prompt);
        }
        printf("  K=%d: per-position acceptance", K);
        for (int k = 0; k < K; k++) {
            double ours = tried[k] ? (double)hits[k] / (double)tried[k] : 0;
            double ref = json_real_value(json_array_get(json_object_get(theirs, "per_position"), (size_t)k));
            printf(" %.3f (training side %.3f)", ours, ref);
            if (k == 0) {
                CHECKF(ours >= ACCEPT_MIN, "K=%d first-draft acceptance %.3f", K, ours);
                CHECKF(fabs(ours - ref) <= ACCEPT_AGREE, "K=%d engine %.3f vs training side %.3f", K, ours, ref);
            }
        }
        printf("; outputs equal to the training side's: %d/%d\n", same_as_theirs, n_prompts);
        CHECKF(same_as_theirs >= n_prompts - 1, "K=%d: only %d/%d outputs equal the training side's", K,
               same_as_theirs, n_prompts);
    }
    free(out), free(plain);
done:
    nx_drafter_free(d);
    nx_model_free(m);
    json_decref(rep);
}

static void tokenizer_reproduces_the_training_side_ids(void) {
    char err[512];
    nx_tokenizer *t = NULL;
    nx_status st = nx_tokenizer_load(MODEL_DIR, &t, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    size_t len;
    char *text = nx_test_read_file(GOLDEN_DIR "/heldout_text.txt", &len);
    int n_ref;
    int32_t *ref = read_ids32(GOLDEN_DIR "/heldout_tokens.txt", &n_ref);
    if (!t || !text || !ref) goto done;
    int32_t *ids = NULL;
    int n = 0;
    CHECK(nx_tokenize(t, text, len, NX_SPECIAL_PARSE, &ids, &n, err, sizeof err) == NX_OK);
    int first_diff = -1;
    for (int i = 0; i < n && i < n_ref && first_diff < 0; i++)
        if (ids[i] != ref[i]) first_diff = i;
    printf("  %zu bytes -> %d ids (training side %d)\n", len, n, n_ref);
    CHECKF(n == n_ref && first_diff < 0, "ids differ (count %d vs %d, first at %d)", n, n_ref, first_diff);
    char *back = NULL;
    size_t blen = 0;
    CHECK(nx_detokenize(t, ids, n, 0, &back, &blen, err, sizeof err) == NX_OK);
    CHECK(back && blen == len && memcmp(back, text, len) == 0);
    /* the Qwen special tokens are added tokens: one id each when parsed */
    int32_t *sp = NULL, *raw = NULL;
    int nsp = 0, nraw = 0;
    CHECK(nx_tokenize(t, "<|im_start|><think>", 19, NX_SPECIAL_PARSE, &sp, &nsp, err, sizeof err) == NX_OK);
    CHECK(nx_tokenize(t, "<|im_start|><think>", 19, NX_SPECIAL_NONE, &raw, &nraw, err, sizeof err) == NX_OK);
    CHECK(nsp == 2 && nraw > 2);
    nx_free(sp), nx_free(raw), nx_free(back), nx_free(ids);
done:
    free(ref);
    free(text);
    nx_tokenizer_free(t);
}

static const nx_test tests[] = {
    {"logits_match_the_training_side_forward", "target and teacher-forced MTP logits: NMSE <= 1e-5, every argmax equal",
     logits_match_the_training_side_forward},
    {"first_draft_acceptance_on_held_out_text", ">= 0.5, within 0.02 of the training side's figure",
     first_draft_acceptance_on_held_out_text},
    {"greedy_speculative_runs_match_the_training_side", "K = 1..3 from held-out prompts: acceptance, outputs, == plain",
     greedy_speculative_runs_match_the_training_side},
    {"tokenizer_reproduces_the_training_side_ids", "held-out text -> the training side's ids -> the same text",
     tokenizer_reproduces_the_training_side_ids},
};

NX_TEST_MAIN(tests)
