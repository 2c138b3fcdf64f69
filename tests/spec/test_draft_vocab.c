/* test_draft_vocab.c — cheaper drafts: a reduced vocabulary (nx_drafter_opts
 * .draft_vocab: the draft logits are the full head's on ids [0, N) and -inf
 * beyond), a lower-bit copy of the head (.draft_head_bits: close to the
 * head's logits, made only when smaller) and a screen (.draft_screen: the
 * head's logits on the k rows a sign sketch ranks best, -inf elsewhere). The
 * output of greedy and match decoding is exactly the plain output every way,
 * since verification always uses the whole head. */
#include "test.h"

#include "io/safetensors.h"
#include "nextn.h"
#include "spec/mtp.h"

#define MODEL NX_MODELS_DIR "/default"

static nx_drafter *drafter_with(nx_model *m, int draft_vocab, int head_bits, int screen) {
    char err[512];
    nx_drafter *d = NULL;
    nx_drafter_opts o = {.draft_vocab = draft_vocab, .draft_head_bits = head_bits, .draft_screen = screen};
    nx_status st = nx_drafter_load(m, NULL, &o, &d, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    return d;
}

static nx_drafter *drafter_bits(nx_model *m, int draft_vocab, int head_bits) {
    return drafter_with(m, draft_vocab, head_bits, 0);
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
    /* the vocabulary the drafter reports is the one it drafts over: N, or 0
     * (all ids) where N would reach past the vocabulary */
    nx_drafter *past = drafter(m, V + 7);
    CHECKF(nx_drafter_draft_vocab(part) == N && nx_drafter_draft_vocab(full) == 0 && past &&
               nx_drafter_draft_vocab(past) == 0,
           "draft vocab %d / %d / %d", nx_drafter_draft_vocab(part), nx_drafter_draft_vocab(full),
           past ? nx_drafter_draft_vocab(past) : -1);
    nx_drafter_free(past);
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
    nx_quantize_opts qo = {4, 64, 0, NX_QUANT_AFFINE};
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

/* 48 greedy tokens of the 32768-token fixture below through d equal plain
 * decoding's, and some drafts were accepted. */
static void greedy_equals_plain_with_drafts_accepted(nx_model *m, nx_drafter *d) {
    int32_t prompt[8], plain[48], spec[48];
    nx_spec_stats st;
    nx_test_tokens(prompt, 8, 32768, 5);
    run(m, NULL, NX_ACCEPT_GREEDY, nx_sampling_default(), prompt, 8, 48, plain, NULL);
    run(m, d, NX_ACCEPT_GREEDY, nx_sampling_default(), prompt, 8, 48, spec, &st);
    CHECK(memcmp(plain, spec, sizeof plain) == 0 && st.accepted > 0);
}

/* NX_DRAFT_HEAD_AUTO end to end on a head at the threshold (32768 x 1024
 * bf16 = 64 MiB, untied, a copy-head fixture so that drafts are accepted):
 * the drafter makes the 4-bit copy, greedy output equals plain; with the
 * screen on auto as well it makes a screen and no copy, greedy == plain. With
 * a NaN in that head, both autos fall back to the head as stored while an
 * explicit 4 bits or screen is refused by row. */
static void auto_copies_a_big_head_end_to_end_and_falls_back_on_a_bad_one(void) {
    const char *dir = nx_test_fixture("draft-head-auto", "--vocab 32768 --hidden 1024 --layers 1 --no-tie --copy-head 0.05 --seed 3");
    nx_model *m = nx_test_model(dir, 2);
    if (!m) return;
    CHECKF(kn_mat_bytes(&m->lm_head) >= MTP_AUTO_HEAD_BYTES, "head of %.0f bytes", kn_mat_bytes(&m->lm_head));
    nx_drafter *d = drafter_bits(m, 0, NX_DRAFT_HEAD_AUTO);
    if (d) {
        CHECK(nx_drafter_head_bits(d) == 4 && d->head_copy != NULL);
        greedy_equals_plain_with_drafts_accepted(m, d);
    }
    nx_drafter_free(d);
    /* with the screen on auto too: a screen over the head as stored, no copy */
    if ((d = drafter_with(m, 0, NX_DRAFT_HEAD_AUTO, NX_DRAFT_SCREEN_AUTO))) {
        CHECK(nx_drafter_screen_k(d) == MTP_SCREEN_K && nx_drafter_head_bits(d) == 0 && d->head_copy == NULL);
        greedy_equals_plain_with_drafts_accepted(m, d);
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
    o = (nx_drafter_opts){.draft_screen = 16};
    CHECKF(nx_drafter_load(m, NULL, &o, &x, err, sizeof err) == NX_EFORMAT && !x && strstr(err, "row 1234") &&
               strstr(err, "draft_screen"),
           "%s", err);
    if ((d = drafter_with(m, 0, NX_DRAFT_HEAD_AUTO, NX_DRAFT_SCREEN_AUTO)))
        CHECK(nx_drafter_screen_k(d) == 0 && nx_drafter_head_bits(d) == 0);
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
    /* draft vocabularies, then head copies (bits), alone and with a reduced
     * vocabulary, then screens of k rows, alone and with both */
    const struct { int vocab, bits, screen; } cases[] = {
        {1, 0, 0}, {64, 0, 0}, {512, 0, 0}, {2048, 0, 0}, {V - 1, 0, 0}, {V, 0, 0}, {0, 8, 0}, {0, 4, 0},
        {0, 2, 0}, {512, 4, 0}, {0, 0, 1}, {0, 0, 16}, {0, 0, V - 1}, {512, 0, 16}, {512, 4, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nx_drafter *d = drafter_with(m, cases[i].vocab, cases[i].bits, cases[i].screen);
        if (!d) continue;
        nx_spec_stats st;
        run(m, d, NX_ACCEPT_GREEDY, greedy, prompt, 16, 120, spec, &st);
        CHECKF(memcmp(plain, spec, sizeof plain) == 0, "greedy, draft_vocab %d bits %d screen %d: output differs from plain",
               cases[i].vocab, cases[i].bits, cases[i].screen);
        printf("  draft_vocab %4d head bits %d screen %4d: greedy acceptance %.3f\n", cases[i].vocab, cases[i].bits,
               cases[i].screen, st.drafted ? (double)st.accepted / st.drafted : 0);
        run(m, d, NX_ACCEPT_MATCH, warm, prompt, 16, 120, spec, NULL);
        CHECKF(memcmp(plain_s, spec, sizeof plain_s) == 0,
               "match, draft_vocab %d bits %d screen %d: output differs from plain sampling", cases[i].vocab,
               cases[i].bits, cases[i].screen);
        nx_drafter_free(d);
    }
    nx_model_free(m);
}

/* A screened draft scores exactly k rows, each with the head's own logit bit
 * for bit (-inf elsewhere; within [0, N) with a draft vocabulary), and keeps
 * the head's argmax on this trained model; k >= the rows makes no screen;
 * bad values are refused by name. */
static void a_screened_draft_scores_k_rows_of_the_head(void) {
    nx_model *m = nx_test_model(MODEL, 2);
    if (!m) return;
    const int V = nx_model_get_info(m)->vocab_size, n = 40, K = 64, N = 512;
    int32_t tok[40];
    nx_test_tokens(tok, n, 3000, 12);
    nx_drafter *full = drafter(m, 0), *scr = drafter_with(m, 0, 0, K), *part = drafter_with(m, N, 0, 16);
    nx_drafter *all = drafter_with(m, 0, 0, V);
    if (full && scr && part && all) {
        CHECK(nx_drafter_screen_k(full) == 0 && nx_drafter_screen_k(scr) == K && nx_drafter_screen_k(part) == 16 &&
              nx_drafter_screen_k(all) == 0);
        float *a = draft_logits(full, tok, n, V), *b = draft_logits(scr, tok, n, V), *c = draft_logits(part, tok, n, V);
        int counts_ok = 1, rows_equal = 1, in_vocab = 1, same = 0;
        for (int p = 0; p + 1 < n; p++) {
            const float *fa = a + (long)p * V, *fb = b + (long)p * V, *fc = c + (long)p * V;
            int kb = 0, kc = 0;
            for (int v = 0; v < V; v++) {
                if (!isinf(fb[v])) kb++, rows_equal &= memcmp(&fb[v], &fa[v], sizeof *fa) == 0;
                else counts_ok &= fb[v] < 0;
                if (!isinf(fc[v])) kc++, in_vocab &= v < N && memcmp(&fc[v], &fa[v], sizeof *fa) == 0;
            }
            counts_ok &= kb == K && kc == 16;
            same += nx_test_argmax(fb, V) == nx_test_argmax(fa, V);
        }
        printf("  screen of %d rows: the head's argmax kept in %d of %d drafts\n", K, same, n - 1);
        CHECK(counts_ok && rows_equal && in_vocab);
        CHECK(same >= n - 2);   /* measured: 39 of 39 */
        free(a), free(b), free(c);
    }
    nx_drafter_free(full), nx_drafter_free(scr), nx_drafter_free(part), nx_drafter_free(all);
    /* through int8 activations too: a 4-bit copy's rows, screened or not, are the same bits */
    nx_drafter *q4 = drafter_with(m, 0, 4, 0), *q4s = drafter_with(m, 0, 4, K);
    if (q4 && q4s) {
        float *a = draft_logits(q4, tok, n, V), *b = draft_logits(q4s, tok, n, V);
        int rows_equal = 1, kept = 0;
        for (long i = 0; i < (long)(n - 1) * V; i++)
            if (!isinf(b[i])) kept++, rows_equal &= memcmp(&b[i], &a[i], sizeof *a) == 0;
        CHECK(rows_equal && kept == (n - 1) * K);
        free(a), free(b);
    }
    nx_drafter_free(q4), nx_drafter_free(q4s);
    char err[512];
    nx_drafter *x = NULL;
    nx_drafter_opts bad = {.draft_screen = -2};
    CHECKF(nx_drafter_load(m, NULL, &bad, &x, err, sizeof err) == NX_EINVAL && !x && strstr(err, "draft_screen"), "%s",
           err);
    nx_drafter *d = drafter_with(m, 0, NX_DRAFT_HEAD_AUTO, NX_DRAFT_SCREEN_AUTO);   /* a small head: neither */
    if (d) CHECK(nx_drafter_screen_k(d) == 0 && nx_drafter_head_bits(d) == 0);
    nx_drafter_free(d);
    nx_model_free(m);
    /* a hidden size the sketch cannot take: refused when asked for, skipped by auto */
    const char *dir = nx_test_fixture("draft-screen-h96", "--vocab 512 --hidden 96 --layers 1");
    if (!(m = nx_test_model(dir, 2))) return;
    nx_drafter_opts o = {.draft_screen = 8};
    CHECKF(nx_drafter_load(m, NULL, &o, &x, err, sizeof err) == NX_EUNSUPPORTED && !x && strstr(err, "hidden size 96"),
           "%s", err);
    CHECK(mtp_auto_screen_k(&m->lm_head) == 0);
    nx_model_free(m);
}

/* A chooser (mtp_pick_fn) that checks what it is handed against the rows of
 * mtp_head_rows (rows[t]: -inf off the screen's candidates) and picks the
 * last candidate, or -1 (the argmax) for row 2. */
typedef struct {
    const float *rows;
    int V, ok, calls;
} pick_check;

static int32_t pick_last(void *ctx, int t, float *logits, const int32_t *cand, int n) {
    pick_check *c = ctx;
    const float *row = c->rows + (long)t * c->V;
    c->calls++;
    if (!cand) {   /* the whole row: as mtp_head_rows gives it */
        c->ok &= n == c->V && memcmp(logits, row, (size_t)c->V * sizeof *row) == 0;
        return t == 2 ? -1 : c->V - 1;
    }
    int finite = 0, at = 1;   /* cand: the row's finite entries, ascending, with their values */
    for (int v = 0; v < c->V; v++) finite += !isinf(row[v]);
    for (int i = 0; i < n; i++)
        at &= (i == 0 || cand[i] > cand[i - 1]) && memcmp(&logits[cand[i]], &row[cand[i]], sizeof *row) == 0;
    c->ok &= n == finite && at;
    return t == 2 ? -1 : cand[n - 1];
}

/* Rows scored together through a screen: a row with a NaN is scored over the
 * whole head on its own; the others' logits are what they get alone; and
 * mtp_head_drafts gives each row's argmax of those logits, or hands a
 * chooser each row's candidates (the whole row for the NaN one) and takes
 * its pick. */
static void a_row_the_screen_cannot_rank_goes_over_the_whole_head(void) {
    nx_model *m = nx_test_model(MODEL, 2);
    nx_drafter *d = m ? drafter_with(m, 0, 0, 32) : NULL;
    mtp_rows r;
    char err[512];
    if (!d || mtp_rows_init(&r, d, 16, err, sizeof err) != NX_OK) goto done;
    const int V = nx_model_get_info(m)->vocab_size, H = nx_model_get_info(m)->hidden_size;
    float *x = malloc((size_t)3 * H * sizeof *x), *together = malloc((size_t)3 * V * sizeof *together);
    float *alone = malloc((size_t)V * sizeof *alone);
    nx_test_rng g = {31};
    for (int i = 0; i < 3 * H; i++) x[i] = nx_test_rng_normal(&g, 1.0f);
    x[H + 5] = NAN;   /* row 1 */
    mtp_head_rows(d, &r.sc, r.head_work, x, 3, together);
    int nan1 = 0;
    for (int v = 0; v < V; v++) nan1 += isnan(together[V + v]);
    CHECKF(nan1 == V, "row 1 (NaN): %d of %d logits NaN: not the whole head", nan1, V);
    for (int t = 0; t < 3; t += 2) {
        mtp_head_rows(d, &r.sc, r.head_work, x + t * H, 1, alone);
        CHECKF(memcmp(alone, together + (long)t * V, (size_t)V * sizeof *alone) == 0, "row %d differs in company", t);
    }
    /* the drafts alone (no -inf rows written): each row's argmax */
    float *scratch = malloc((size_t)3 * V * sizeof *scratch);
    int32_t ids[3];
    mtp_head_drafts(d, &r.sc, r.head_work, x, 3, scratch, ids, NULL);
    for (int t = 0; t < 3; t++)
        CHECKF(ids[t] == mtp_argmax(together + (long)t * V, V), "row %d: draft %d, the logits' argmax %d", t, ids[t],
               mtp_argmax(together + (long)t * V, V));
    pick_check c = {together, V, 1, 0};
    int32_t picked[3];
    const mtp_chooser ch = {pick_last, NULL, &c};
    mtp_head_drafts(d, &r.sc, r.head_work, x, 3, scratch, picked, &ch);
    int last0 = V - 1;
    while (last0 > 0 && isinf(together[last0])) last0--;
    CHECKF(c.ok && c.calls == 3 && picked[0] == last0 && picked[1] == V - 1 && picked[2] == ids[2],
           "chooser: ok %d, %d calls, picks %d %d %d", c.ok, c.calls, picked[0], picked[1], picked[2]);
    free(x), free(together), free(alone), free(scratch);
    mtp_rows_free(&r);
done:
    nx_drafter_free(d);
    nx_model_free(m);
}

/* NX_DRAFT_SCREEN_AUTO: MTP_SCREEN_K rows for a head of MTP_AUTO_HEAD_BYTES
 * or more in any format, none for a small one or a hidden size that is not
 * a multiple of 64 (views with no data: the rule reads shapes; the end to
 * end case is in auto_copies_a_big_head_end_to_end...). */
static void auto_screens_only_a_head_too_big_for_a_cache(void) {
    const int64_t V = 248320, H = 1024;
    const kn_mat bf16 = {.dtype = NX_DT_BF16, .rows = V, .cols = H};
    const kn_mat small = {.dtype = NX_DT_BF16, .rows = 4096, .cols = H}, odd = {.dtype = NX_DT_BF16, .rows = V, .cols = 1000};
    const kn_mat q4 = {.dtype = NX_DT_U32, .rows = V, .cols = H, .bits = 4, .group = 64, .sdtype = NX_DT_BF16};
    CHECK(mtp_auto_screen_k(&bf16) == MTP_SCREEN_K && mtp_auto_screen_k(&q4) == MTP_SCREEN_K);
    CHECK(mtp_auto_screen_k(&small) == 0 && mtp_auto_screen_k(&odd) == 0);
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
     "N = 1 .. V, 8/4/2-bit head copies and screens of 1 .. V-1 rows: greedy == plain greedy, match == plain sampling",
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
     "64 MiB bf16 head: auto drafts with a 4-bit copy (with auto screen: a screen, no copy), greedy == plain; a NaN in "
     "it: autos draft as stored, 4 bits / a screen refused",
     auto_copies_a_big_head_end_to_end_and_falls_back_on_a_bad_one},
    {"a_non_finite_head_weight_is_refused_by_name", "a NaN in the head: draft_head_bits fails naming the row",
     a_non_finite_head_weight_is_refused_by_name},
    {"a_screened_draft_scores_k_rows_of_the_head",
     "screen k = 64: k finite logits, the head's bit for bit, its argmax kept; with N = 512 inside [0, N); bad k and "
     "hidden 96 refused",
     a_screened_draft_scores_k_rows_of_the_head},
    {"a_row_the_screen_cannot_rank_goes_over_the_whole_head",
     "three rows through a screen, one with a NaN: that one over the whole head, the others as alone; drafts = argmaxes; "
     "a chooser is handed each row's candidates and values (the whole row for the NaN one) and its picks are taken",
     a_row_the_screen_cannot_rank_goes_over_the_whole_head},
    {"auto_screens_only_a_head_too_big_for_a_cache",
     "NX_DRAFT_SCREEN_AUTO: k for 64 MiB+ bf16 / q4 heads; none for an 8 MB head or 1000 columns",
     auto_screens_only_a_head_too_big_for_a_cache},
    {"a_checkpoint_loads_into_a_reduced_drafter", "saved with the whole head, loaded with N = 7: drafts from [0, 7)",
     a_checkpoint_loads_into_a_reduced_drafter},
};

NX_TEST_MAIN(tests)
