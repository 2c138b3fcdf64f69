/* test_draft_vocab.c — cheaper drafts: a reduced vocabulary (nx_drafter_opts
 * .draft_vocab: the draft logits are the full head's on ids [0, N) and -inf
 * beyond) and a lower-bit copy of the head (.draft_head_bits: close to the
 * head's logits, made only when smaller). The output of greedy and match
 * decoding is exactly the plain output either way, since verification always
 * uses the whole head. */
#include "test.h"

#include "io/safetensors.h"
#include "nextn.h"
#include "spec/mtp.h"

#define MODEL NX_MODELS_DIR "/default"

static nx_drafter *drafter_bits(nx_model *m, int draft_vocab, int head_bits) {
    char err[512];
    nx_drafter *d = NULL;
    nx_drafter_opts o = {.draft_vocab = draft_vocab, .draft_head_bits = head_bits};
    nx_status st = nx_drafter_load(m, NULL, &o, &d, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    return d;
}

static nx_drafter *drafter(nx_model *m, int draft_vocab) { return drafter_bits(m, draft_vocab, 0); }

/* A copy of dir's checkpoint in a new directory with [row][3] := NaN in the
 * bf16 tensor whose name contains `tensor`; returns the directory. */
static const char *with_nan_in(const char *dir, const char *name, const char *tensor, int64_t row) {
    const char *out = nx_test_tmpdir(name);
    char err[512], path[1200];
    st_set *st = NULL;
    st_writer *w = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(st_open_file(path, &st, err, sizeof err) == NX_OK && st_writer_new(&w, err, sizeof err) == NX_OK);
    for (int i = 0; st && w && i < st_count(st); i++) {
        const st_tensor *t = st_at(st, i);
        void *data = (void *)t->data;
        unsigned char *copy = NULL;
        if (strstr(t->name, tensor)) {
            copy = malloc(t->nbytes);
            memcpy(copy, t->data, t->nbytes);
            const uint16_t nan = 0x7FC0;
            memcpy(copy + ((size_t)row * (size_t)t->shape[1] + 3) * 2, &nan, 2);
            data = copy;
        }
        CHECK(st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, data, t->nbytes, err, sizeof err) == NX_OK);
        free(copy);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    CHECK(w && st_writer_write(w, path, err, sizeof err) == NX_OK);
    st_writer_free(w), st_close(st);
    CHECK(nx_test_system("cp %s/config.json %s/", dir, out) == 0);
    return out;
}

/* Teacher-forced draft logits of n tokens through d ([n-1][V], caller frees). */
static float *draft_logits(nx_drafter *d, const int32_t *tok, int n, int V) {
    float *out = malloc((size_t)(n - 1) * V * sizeof *out);
    char err[512];
    CHECKF(nx_drafter_teacher_forced(d, tok, n, out, NULL, err, sizeof err) == NX_OK, "%s", err);
    return out;
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

/* The q8 and q4 copies stay close to the bf16 head (q8 closer), a copy over
 * a reduced vocabulary still gives -inf beyond N, and bad bit widths are
 * refused. */
static void a_lower_bit_head_copy_stays_close_to_the_head(void) {
    nx_model *m = nx_test_model(MODEL, 2);
    if (!m) return;
    const int V = nx_model_get_info(m)->vocab_size, n = 40, N = 1000;
    int32_t tok[40];
    nx_test_tokens(tok, n, 3000, 6);
    nx_drafter *full = drafter(m, 0), *q8 = drafter_bits(m, 0, 8), *q4 = drafter_bits(m, 0, 4), *q4n = drafter_bits(m, N, 4);
    if (full && q8 && q4 && q4n) {
        float *a = draft_logits(full, tok, n, V), *b8 = draft_logits(q8, tok, n, V), *b4 = draft_logits(q4, tok, n, V);
        float *c = draft_logits(q4n, tok, n, V);
        nx_test_diff d8 = nx_test_compare(b8, a, (long)(n - 1) * V), d4 = nx_test_compare(b4, a, (long)(n - 1) * V);
        int same8 = 0, same4 = 0, tail_inf = 1, head_equal = 1;
        for (int p = 0; p + 1 < n; p++) {
            same8 += nx_test_argmax(b8 + (long)p * V, V) == nx_test_argmax(a + (long)p * V, V);
            same4 += nx_test_argmax(b4 + (long)p * V, V) == nx_test_argmax(a + (long)p * V, V);
            for (int v = N; v < V; v++) tail_inf &= isinf(c[(long)p * V + v]) && c[(long)p * V + v] < 0;
            head_equal &= memcmp(c + (long)p * V, b4 + (long)p * V, (size_t)N * sizeof *c) == 0;
        }
        printf("  draft head copy q8: nmse %.2e argmax %d/%d; q4: nmse %.2e argmax %d/%d\n", d8.nmse, same8, n - 1,
               d4.nmse, same4, n - 1);
        /* measured: q8 7.1e-6 (39/39), q4 9.0e-4 (39/39); bounds about 4x above */
        CHECKF(d8.nmse > 0 && d8.nmse < 3e-5 && d8.nmse < d4.nmse && d4.nmse < 4e-3, "nmse q8 %.2e q4 %.2e", d8.nmse,
               d4.nmse);
        CHECK(full->head_copy == NULL && q8->head_copy && q4->head_copy && q4n->head_copy && q4n->head.rows == N);
        CHECK(nx_drafter_head_bits(full) == 0 && nx_drafter_head_bits(q8) == 8 && nx_drafter_head_bits(q4) == 4);
        CHECK(same8 >= n - 2 && same4 >= (n - 1) * 3 / 4);
        CHECK(tail_inf && head_equal);   /* the reduced copy is the first N rows of the full copy */
        free(a), free(b8), free(b4), free(c);
    }
    nx_drafter_free(full), nx_drafter_free(q8), nx_drafter_free(q4), nx_drafter_free(q4n);
    char err[512];
    static const int bad[] = {1, 7, 9, -3};   /* -1 is NX_DRAFT_HEAD_AUTO */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        nx_drafter *x = NULL;
        nx_drafter_opts o = {.draft_head_bits = bad[i]};
        CHECKF(nx_drafter_load(m, NULL, &o, &x, err, sizeof err) == NX_EINVAL && x == NULL && strstr(err, "draft_head_bits"),
               "bits %d: %s", bad[i], err);
    }
    nx_model_free(m);
}

/* A head already stored at 4 bits (group 64, bf16 scales: 4.5 bits a weight)
 * gets no 4-bit copy: the drafts are the plain drafter's bit for bit. */
static void no_copy_when_the_head_is_no_larger(void) {
    const char *dir = nx_test_tmpdir("draft-head-q4");
    char err[512];
    nx_quantize_opts qo = {4, 64, 0};
    nx_quantize_report r;
    CHECKF(nx_quantize(MODEL, dir, &qo, &r, err, sizeof err) == NX_OK, "%s", err);
    nx_model *m = nx_test_model(dir, 2);
    nx_drafter *plain = m ? drafter(m, 0) : NULL, *q4 = m ? drafter_bits(m, 0, 4) : NULL;
    if (plain && q4) {
        const int V = nx_model_get_info(m)->vocab_size;
        int32_t tok[24];
        nx_test_tokens(tok, 24, 3000, 8);
        float *a = draft_logits(plain, tok, 24, V), *b = draft_logits(q4, tok, 24, V);
        CHECK(memcmp(a, b, (size_t)23 * V * sizeof *a) == 0);
        /* re-quantizing a q4 head to q4 could give the same drafts, so look inside too */
        CHECK(q4->head_copy == NULL && q4->head.data == plain->head.data);
        free(a), free(b);
    }
    nx_drafter_free(plain), nx_drafter_free(q4);
    nx_model_free(m);
}

/* A head weight the quantizer cannot take (NaN) is a clear error naming the
 * row, not a crash; the plain drafter still loads (the NaN is the model's). */
static void a_non_finite_head_weight_is_refused_by_name(void) {
    /* tied: the embedding is the head */
    const char *dir = with_nan_in(MODEL, "draft-head-nan", "embed_tokens.weight", 77);
    char err[512];
    nx_model *m = nx_test_model(dir, 2);
    if (m) {
        nx_drafter *x = NULL;
        nx_drafter_opts o = {.draft_head_bits = 4};
        CHECKF(nx_drafter_load(m, NULL, &o, &x, err, sizeof err) == NX_EFORMAT && x == NULL && strstr(err, "row 77"),
               "%s", err);
        CHECK(nx_drafter_load(m, NULL, NULL, &x, err, sizeof err) == NX_OK);
        nx_drafter_free(x);
    }
    nx_model_free(m);
}

/* NX_DRAFT_HEAD_AUTO: a 4-bit copy only of a head stored wider than 4 bits
 * and of MTP_AUTO_HEAD_BYTES or more (views with no data: the rule reads
 * shapes and formats). The bundled model's head is small: no copy. */
static void auto_copies_only_a_wide_head_too_big_for_a_cache(void) {
    const int64_t V = 248320, H = 1024;
    const kn_mat bf16 = {.dtype = NX_DT_BF16, .rows = V, .cols = H}, f32 = {.dtype = NX_DT_F32, .rows = V, .cols = H};
    const kn_mat small = {.dtype = NX_DT_BF16, .rows = 4096, .cols = H}, odd = {.dtype = NX_DT_BF16, .rows = V, .cols = 1000};
    kn_mat q8 = {.dtype = NX_DT_U32, .rows = V, .cols = H, .bits = 8, .group = 64, .sdtype = NX_DT_BF16};
    kn_mat q5 = q8, q4 = q8;
    q5.bits = 5, q4.bits = 4;
    CHECKF(mtp_auto_head_bits(&bf16) == 4 && mtp_auto_head_bits(&f32) == 4 && mtp_auto_head_bits(&q8) == 4 &&
               mtp_auto_head_bits(&q5) == 4,
           "bf16 %d f32 %d q8 %d q5 %d", mtp_auto_head_bits(&bf16), mtp_auto_head_bits(&f32), mtp_auto_head_bits(&q8),
           mtp_auto_head_bits(&q5));
    CHECKF(mtp_auto_head_bits(&q4) == 0 && mtp_auto_head_bits(&small) == 0 && mtp_auto_head_bits(&odd) == 0,
           "q4 %d, 8 MB bf16 %d, 1000 columns %d", mtp_auto_head_bits(&q4), mtp_auto_head_bits(&small),
           mtp_auto_head_bits(&odd));
    nx_model *m = nx_test_model(MODEL, 2);
    if (!m) return;
    nx_drafter *d = drafter_bits(m, 0, NX_DRAFT_HEAD_AUTO);
    if (d) CHECK(nx_drafter_head_bits(d) == 0 && d->head_copy == NULL);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* n tokens from the prompt, K = 2; d NULL: plain */
static void run(nx_model *m, nx_drafter *d, nx_accept_mode acc, nx_sampling sp, const int32_t *prompt, int np, int n,
                int32_t *out, nx_spec_stats *stats) {
    nx_spec_opts o = {.draft = 2, .accept = acc, .sampling = sp};
    CHECK(nx_test_generate(m, d, &o, prompt, np, n, out, stats) == n);
}

/* NX_DRAFT_HEAD_AUTO end to end on a head at the threshold (32768 x 1024
 * bf16 = 64 MiB, untied, a copy-head fixture so that drafts are accepted):
 * the drafter makes the 4-bit copy, greedy output equals plain; with a NaN in
 * that head, auto falls back to the head as stored while an explicit 4 bits
 * is refused. */
static void auto_copies_a_big_head_end_to_end_and_falls_back_on_a_bad_one(void) {
    const char *dir = nx_test_fixture("draft-head-auto", "--vocab 32768 --hidden 1024 --layers 1 --no-tie --copy-head 0.05 --seed 3");
    nx_model *m = nx_test_model(dir, 2);
    if (!m) return;
    CHECKF(kn_mat_bytes(&m->lm_head) >= MTP_AUTO_HEAD_BYTES, "head of %.0f bytes", kn_mat_bytes(&m->lm_head));
    nx_drafter *d = drafter_bits(m, 0, NX_DRAFT_HEAD_AUTO);
    if (d) {
        CHECK(nx_drafter_head_bits(d) == 4 && d->head_copy != NULL);
        int32_t prompt[8], plain[48], spec[48];
        nx_spec_stats st;
        nx_test_tokens(prompt, 8, 32768, 5);
        run(m, NULL, NX_ACCEPT_GREEDY, nx_sampling_default(), prompt, 8, 48, plain, NULL);
        run(m, d, NX_ACCEPT_GREEDY, nx_sampling_default(), prompt, 8, 48, spec, &st);
        CHECK(memcmp(plain, spec, sizeof plain) == 0 && st.accepted > 0);
    }
    nx_drafter_free(d);
    nx_model_free(m);
    const char *bad = with_nan_in(dir, "draft-head-auto-nan", "lm_head.weight", 1234);
    if (!(m = nx_test_model(bad, 2))) return;
    char err[512];
    nx_drafter *x = NULL;
    nx_drafter_opts o = {.draft_head_bits = 4};
    CHECKF(nx_drafter_load(m, NULL, &o, &x, err, sizeof err) == NX_EFORMAT && !x && strstr(err, "row 1234"), "%s", err);
    if ((d = drafter_bits(m, 0, NX_DRAFT_HEAD_AUTO))) CHECK(nx_drafter_head_bits(d) == 0 && d->head_copy == NULL);
    nx_drafter_free(d);
    nx_model_free(m);
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
    /* draft vocabularies, then head copies (bits), alone and with a reduced vocabulary */
    const struct { int vocab, bits; } cases[] = {{1, 0}, {64, 0}, {512, 0}, {2048, 0}, {V - 1, 0}, {V, 0},
                                                 {0, 8}, {0, 4}, {0, 2}, {512, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nx_drafter *d = drafter_bits(m, cases[i].vocab, cases[i].bits);
        if (!d) continue;
        nx_spec_stats st;
        run(m, d, NX_ACCEPT_GREEDY, greedy, prompt, 16, 120, spec, &st);
        CHECKF(memcmp(plain, spec, sizeof plain) == 0, "greedy, draft_vocab %d bits %d: output differs from plain",
               cases[i].vocab, cases[i].bits);
        printf("  draft_vocab %4d head bits %d: greedy acceptance %.3f\n", cases[i].vocab, cases[i].bits,
               st.drafted ? (double)st.accepted / st.drafted : 0);
        run(m, d, NX_ACCEPT_MATCH, warm, prompt, 16, 120, spec, NULL);
        CHECKF(memcmp(plain_s, spec, sizeof plain_s) == 0, "match, draft_vocab %d bits %d: output differs from plain sampling",
               cases[i].vocab, cases[i].bits);
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
    {"output_is_exact_for_every_draft_vocabulary",
     "N = 1 .. V and 8/4/2-bit head copies: greedy == plain greedy, match == plain sampling",
     output_is_exact_for_every_draft_vocabulary},
    {"a_lower_bit_head_copy_stays_close_to_the_head",
     "q8 / q4 copies: draft logits near the head's (q8 nearer), -inf beyond N with a vocabulary; bad bits refused",
     a_lower_bit_head_copy_stays_close_to_the_head},
    {"no_copy_when_the_head_is_no_larger", "a q4 g64 head gets no 4-bit copy: drafts equal the plain drafter's",
     no_copy_when_the_head_is_no_larger},
    {"auto_copies_only_a_wide_head_too_big_for_a_cache",
     "NX_DRAFT_HEAD_AUTO: 4 bits for big bf16/f32/q8/q5 heads; none for q4, an 8 MB head, 1000 columns, the bundled model",
     auto_copies_only_a_wide_head_too_big_for_a_cache},
    {"auto_copies_a_big_head_end_to_end_and_falls_back_on_a_bad_one",
     "64 MiB bf16 head: auto drafts with a 4-bit copy, greedy == plain; a NaN in it: auto drafts as stored, 4 bits refused",
     auto_copies_a_big_head_end_to_end_and_falls_back_on_a_bad_one},
    {"a_non_finite_head_weight_is_refused_by_name", "a NaN in the head: draft_head_bits fails naming the row",
     a_non_finite_head_weight_is_refused_by_name},
    {"a_checkpoint_loads_into_a_reduced_drafter", "saved with the whole head, loaded with N = 7: drafts from [0, 7)",
     a_checkpoint_loads_into_a_reduced_drafter},
};

NX_TEST_MAIN(tests)
