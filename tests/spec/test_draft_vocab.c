/* test_draft_vocab.c — drafting over a reduced vocabulary (nx_drafter_opts
 * .draft_vocab): the draft logits are the full head's on ids [0, N) and -inf
 * beyond, and the output of greedy and match decoding is exactly the plain
 * output whatever N is, since verification always uses the whole head. */
#include "test.h"

#include "nextn.h"

#define MODEL NX_MODELS_DIR "/default"

static nx_drafter *drafter(nx_model *m, int draft_vocab) {
    char err[512];
    nx_drafter *d = NULL;
    nx_drafter_opts o = {.draft_vocab = draft_vocab};
    nx_status st = nx_drafter_load(m, NULL, &o, &d, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    return d;
}

static void draft_logits_are_the_head_rows_below_n(void) {
    nx_model *m = nx_test_model(MODEL, 2);
    if (!m) return;
    const int V = nx_model_get_info(m)->vocab_size, n = 40, N = 1000;
    int32_t tok[40];
    nx_test_tokens(tok, n, 3000, 5);
    nx_drafter *full = drafter(m, 0), *part = drafter(m, N);
    float *a = malloc((size_t)(n - 1) * V * sizeof *a), *b = malloc((size_t)(n - 1) * V * sizeof *b);
    char err[512];
    CHECK(full && part && nx_drafter_teacher_forced(full, tok, n, a, NULL, err, sizeof err) == NX_OK &&
          nx_drafter_teacher_forced(part, tok, n, b, NULL, err, sizeof err) == NX_OK);
    int rows_equal = 1, tail_inf = 1;
    for (int p = 0; p + 1 < n; p++) {
        rows_equal &= memcmp(a + (long)p * V, b + (long)p * V, (size_t)N * sizeof *a) == 0;
        for (int v = N; v < V; v++) tail_inf &= isinf(b[(long)p * V + v]) && b[(long)p * V + v] < 0;
        CHECK(nx_test_argmax(b + (long)p * V, V) < N);
    }
    CHECK(rows_equal && tail_inf);
    nx_drafter *neg = NULL;
    nx_drafter_opts bad = {.draft_vocab = -1};
    CHECK(nx_drafter_load(m, NULL, &bad, &neg, err, sizeof err) == NX_EINVAL && neg == NULL);
    free(a), free(b);
    nx_drafter_free(full), nx_drafter_free(part);
    nx_model_free(m);
}

/* n tokens from the prompt, K = 2; d NULL: plain */
static void run(nx_model *m, nx_drafter *d, nx_accept_mode acc, nx_sampling sp, const int32_t *prompt, int np, int n,
                int32_t *out, nx_spec_stats *stats) {
    nx_spec_opts o = {.draft = 2, .accept = acc, .sampling = sp};
    CHECK(nx_test_generate(m, d, &o, prompt, np, n, out, stats) == n);
}

static void output_is_exact_for_every_draft_vocabulary(void) {
    nx_model *m = nx_test_model(MODEL, 2);
    if (!m) return;
    const int V = nx_model_get_info(m)->vocab_size;
    int32_t prompt[16], plain[120], spec[120], plain_s[120];
    nx_test_tokens(prompt, 16, 3000, 9);
    nx_sampling greedy = nx_sampling_default(), warm = nx_sampling_default();
    warm.temperature = 0.8f, warm.seed = 4;
    run(m, NULL, NX_ACCEPT_GREEDY, greedy, prompt, 16, 120, plain, NULL);
    run(m, NULL, NX_ACCEPT_MATCH, warm, prompt, 16, 120, plain_s, NULL);
    const int sizes[] = {1, 64, 512, 2048, V - 1, V};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        nx_drafter *d = drafter(m, sizes[i]);
        if (!d) continue;
        nx_spec_stats st;
        run(m, d, NX_ACCEPT_GREEDY, greedy, prompt, 16, 120, spec, &st);
        CHECKF(memcmp(plain, spec, sizeof plain) == 0, "greedy, draft_vocab %d: output differs from plain", sizes[i]);
        printf("  draft_vocab %4d: greedy acceptance %.3f\n", sizes[i], st.drafted ? (double)st.accepted / st.drafted : 0);
        run(m, d, NX_ACCEPT_MATCH, warm, prompt, 16, 120, spec, NULL);
        CHECKF(memcmp(plain_s, spec, sizeof plain_s) == 0, "match, draft_vocab %d: output differs from plain sampling", sizes[i]);
        nx_drafter_free(d);
    }
    nx_model_free(m);
}

/* A session saved with the whole head and loaded into one that drafts over
 * [0, N): its first draft comes from the new head, inside [0, N). */
static void a_checkpoint_loads_into_a_reduced_drafter(void) {
    nx_model *m = nx_test_model(MODEL, 2);
    nx_drafter *full = m ? drafter(m, 0) : NULL, *part = m ? drafter(m, 7) : NULL;
    if (!full || !part) goto done;
    char err[512], path[1200];
    snprintf(path, sizeof path, "%s/s.ckpt", nx_test_tmpdir("draft-vocab-ckpt"));
    int32_t prompt[12], first, drafts[2];
    nx_test_tokens(prompt, 12, 3000, 21);
    nx_spec_opts o = {.draft = 2, .accept = NX_ACCEPT_GREEDY};
    nx_spec *a = NULL, *b = NULL;
    CHECK(nx_spec_new(m, full, 64, &o, &a, err, sizeof err) == NX_OK);
    CHECK(a && nx_spec_prefill(a, prompt, 12, &first, err, sizeof err) == NX_OK);
    CHECK(a && nx_spec_save(a, path, err, sizeof err) == NX_OK);
    CHECK(nx_spec_new(m, part, 64, &o, &b, err, sizeof err) == NX_OK);
    CHECKF(b && nx_spec_load(b, path, err, sizeof err) == NX_OK, "%s", err);
    int nd = 0;
    CHECK(b && nx_spec_draft(b, 2, drafts, &nd, err, sizeof err) == NX_OK);
    CHECK(nd == 2 && drafts[0] >= 0 && drafts[0] < 7 && drafts[1] >= 0 && drafts[1] < 7);
    nx_spec_free(a), nx_spec_free(b);
done:
    nx_drafter_free(full), nx_drafter_free(part);
    nx_model_free(m);
}

static const nx_test tests[] = {
    {"draft_logits_are_the_head_rows_below_n", "ids < N: the full head's logits bit for bit; ids >= N: -inf; N < 0 refused",
     draft_logits_are_the_head_rows_below_n},
    {"output_is_exact_for_every_draft_vocabulary", "N = 1 .. V: greedy == plain greedy, match == plain sampling",
     output_is_exact_for_every_draft_vocabulary},
    {"a_checkpoint_loads_into_a_reduced_drafter", "saved with the whole head, loaded with N = 7: drafts from [0, 7)",
     a_checkpoint_loads_into_a_reduced_drafter},
};

NX_TEST_MAIN(tests)
