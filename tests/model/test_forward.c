/* test_forward.c — properties of the target forward that need no reference:
 * chunking and batching never change a bit, the thread count never changes a
 * bit, both file layouts and sharded files load to the same model, decode
 * does not allocate, and bad calls are clear errors that leave the state as
 * it was. Random checkpoints come from nextn-fixture. */
#include "test.h"

#include "base/alloc.h"
#include "model/model.h"
#include "nextn.h"

static const char *golden_dir = NX_TEST_DATA "/golden/llamacpp-tiny-a-untied-bf16/hf";

/* The golden model on 2 threads with its KV cache in the given layout. */
static nx_model *golden_model(nx_kv_cache kv) {
    char err[512];
    nx_model *m = NULL;
    nx_load_opts o = {.n_threads = 2, .kv_cache = kv};
    CHECKF(nx_model_load(golden_dir, &o, &m, err, sizeof err) == NX_OK, "%s", err);
    return m;
}

/* Runs tok[0..n) split into calls of the given sizes (cycled); returns the
 * logits and hidden rows of every position. */
static void run_split(nx_model *m, const int32_t *tok, int n, const int *sizes, int n_sizes, float *logits, float *hidden) {
    char err[512];
    const nx_model_info *in = nx_model_get_info(m);
    nx_state *s = NULL;
    CHECK(nx_state_new(m, n, &s, err, sizeof err) == NX_OK);
    if (!s) return;
    for (int done = 0, k = 0; done < n; k++) {
        int T = sizes[k % n_sizes];
        if (T > n - done) T = n - done;
        nx_forward_out fo = {.logits = logits + (size_t)done * in->vocab_size, .hidden = hidden + (size_t)done * in->hidden_size, .all_rows = 1};
        nx_status st = nx_forward(m, s, tok + done, T, &fo, err, sizeof err);
        CHECKF(st == NX_OK, "%s", err);
        done += T;
    }
    CHECK(nx_state_pos(s) == n);
    nx_state_free(s);
}

static void any_split_is_bit_identical_with(nx_kv_cache kv) {
    nx_model *m = golden_model(kv);
    if (!m) return;
    const nx_model_info *in = nx_model_get_info(m);
    enum { N = 90 }; /* crosses the internal chunk size (32) twice */
    int32_t tok[N];
    nx_test_tokens(tok, N, in->vocab_size, 7);
    size_t LV = (size_t)N * in->vocab_size, LH = (size_t)N * in->hidden_size;
    float *l1 = malloc(LV * 4), *h1 = malloc(LH * 4), *l2 = malloc(LV * 4), *h2 = malloc(LH * 4);
    static const int one[] = {1}, all[] = {N}, verify[] = {5, 1, 3, 16, 2, 4, 7}, odd[] = {31, 33, 1};
    run_split(m, tok, N, one, 1, l1, h1);
    const struct { const int *sizes; int n; const char *what; } splits[] = {
        {all, 1, "one call"}, {verify, 7, "verify-sized blocks (T <= 16)"}, {odd, 3, "blocks across chunk edges"}};
    for (size_t k = 0; k < sizeof splits / sizeof *splits; k++) {
        run_split(m, tok, N, splits[k].sizes, splits[k].n, l2, h2);
        CHECKF(memcmp(l1, l2, LV * 4) == 0, "KV %s: logits of %s differ from single steps",
               nx_model_get_info(m)->kv_cache, splits[k].what);
        CHECKF(memcmp(h1, h2, LH * 4) == 0, "KV %s: hidden rows of %s differ from single steps",
               nx_model_get_info(m)->kv_cache, splits[k].what);
    }
    free(l1), free(h1), free(l2), free(h2);
    nx_model_free(m);
}

static void any_split_is_bit_identical(void) {
    any_split_is_bit_identical_with(NX_KV_F32);
    any_split_is_bit_identical_with(NX_KV_F16);
}

static void thread_count_does_not_change_results(void) {
    nx_model *m1 = nx_test_model(golden_dir, 1), *m2 = nx_test_model(golden_dir, 2), *m3 = nx_test_model(golden_dir, 3);
    if (!m1 || !m2 || !m3) goto out;
    const nx_model_info *in = nx_model_get_info(m1);
    enum { N = 40 };
    int32_t tok[N];
    nx_test_tokens(tok, N, in->vocab_size, 3);
    size_t LV = (size_t)N * in->vocab_size, LH = (size_t)N * in->hidden_size;
    float *l1 = malloc(LV * 4), *h1 = malloc(LH * 4), *l2 = malloc(LV * 4), *h2 = malloc(LH * 4);
    static const int all[] = {N};
    run_split(m1, tok, N, all, 1, l1, h1);
    run_split(m2, tok, N, all, 1, l2, h2);
    CHECK(memcmp(l1, l2, LV * 4) == 0 && memcmp(h1, h2, LH * 4) == 0);
    run_split(m3, tok, N, all, 1, l2, h2);
    CHECK(memcmp(l1, l2, LV * 4) == 0 && memcmp(h1, h2, LH * 4) == 0);
    free(l1), free(h1), free(l2), free(h2);
out:
    nx_model_free(m1), nx_model_free(m2), nx_model_free(m3);
}

static void decode_does_not_allocate(void) {
    nx_model *m = nx_test_model(golden_dir, 2);
    if (!m) return;
    char err[512];
    nx_state *s = NULL;
    CHECK(nx_state_new(m, 64, &s, err, sizeof err) == NX_OK);
    float *logits = malloc((size_t)nx_model_get_info(m)->vocab_size * 4);
    int32_t prompt[20];
    nx_test_tokens(prompt, 20, nx_model_get_info(m)->vocab_size, 9);
    nx_forward_out fo = {.logits = logits};
    /* the guard aborts the process on any allocation inside */
    nx_alloc_guard_begin();
    nx_status st = nx_forward(m, s, prompt, 20, &fo, err, sizeof err);
    for (int i = 0; i < 10 && st == NX_OK; i++) st = nx_forward(m, s, &prompt[i], 1, &fo, err, sizeof err);
    nx_alloc_guard_end();
    CHECK(st == NX_OK && nx_state_pos(s) == 30);
    free(logits);
    nx_state_free(s);
    nx_model_free(m);
}

static void bad_calls_are_errors_that_keep_the_state(void) {
    nx_model *m = nx_test_model(golden_dir, 2);
    if (!m) return;
    char err[512];
    nx_state *s = NULL;
    CHECK(nx_state_new(m, 8, &s, err, sizeof err) == NX_OK);
    const nx_model_info *in = nx_model_get_info(m);
    float *a = malloc((size_t)in->vocab_size * 4), *b = malloc((size_t)in->vocab_size * 4);
    int32_t ok[5] = {1, 2, 3, 4, 5}, bad[2] = {6, in->vocab_size};
    nx_forward_out fo = {.logits = a};
    CHECK(nx_forward(m, s, ok, 3, &fo, err, sizeof err) == NX_OK);
    CHECK(nx_forward(m, s, bad, 2, &fo, err, sizeof err) == NX_EINVAL);
    CHECKF(strstr(err, "8192") && strstr(err, "index 1"), "message: %s", err);
    CHECK(nx_state_pos(s) == 3);
    CHECK(nx_forward(m, s, ok, 6, &fo, err, sizeof err) == NX_ERANGE);
    CHECKF(strstr(err, "context"), "message: %s", err);
    CHECK(nx_forward(m, s, ok, 0, &fo, err, sizeof err) == NX_EINVAL);
    CHECK(nx_state_pos(s) == 3);
    /* after the errors, the state continues exactly as a fresh run would */
    CHECK(nx_forward(m, s, ok + 3, 2, &fo, err, sizeof err) == NX_OK);
    nx_state *fresh = NULL;
    CHECK(nx_state_new(m, 8, &fresh, err, sizeof err) == NX_OK);
    fo.logits = b;
    CHECK(nx_forward(m, fresh, ok, 5, &fo, err, sizeof err) == NX_OK);
    CHECK(memcmp(a, b, (size_t)in->vocab_size * 4) == 0);
    /* reset forgets everything */
    nx_state_reset(s);
    CHECK(nx_state_pos(s) == 0);
    fo.logits = a;
    CHECK(nx_forward(m, s, ok, 5, &fo, err, sizeof err) == NX_OK);
    CHECK(memcmp(a, b, (size_t)in->vocab_size * 4) == 0);
    nx_state_free(fresh);
    CHECK(nx_state_new(m, 0, &fresh, err, sizeof err) == NX_EINVAL && fresh == NULL);
    free(a), free(b);
    nx_state_free(s);
    nx_model_free(m);
}

/* Logits of a short sequence, all rows. */
static float *logits_of(const char *dir, int n, size_t *count) {
    nx_model *m = nx_test_model(dir, 2);
    if (!m) return NULL;
    const nx_model_info *in = nx_model_get_info(m);
    int32_t tok[16];
    nx_test_tokens(tok, n, in->vocab_size, 11);
    *count = (size_t)n * in->vocab_size;
    float *l = malloc(*count * 4), *h = malloc((size_t)n * in->hidden_size * 4);
    static const int all[] = {16};
    run_split(m, tok, n, all, 1, l, h);
    free(h);
    nx_model_free(m);
    return l;
}

static void hf_and_mlx_layouts_give_the_same_logits(void) {
    const char *hf = nx_test_fixture("layout-hf", "--preset tiny --seed 5 --dtype f32");
    const char *mlx = nx_test_fixture("layout-mlx", "--preset tiny --seed 5 --dtype f32 --layout mlx");
    size_t n1 = 0, n2 = 0;
    float *a = logits_of(hf, 12, &n1), *b = logits_of(mlx, 12, &n2);
    CHECK(a && b && n1 == n2);
    if (a && b) {
        nx_test_diff d = nx_test_compare(b, a, (long)n1);
        /* w+1 is rounded once in f32 when the mlx file is written, so the two
         * norms differ by at most an ulp; the logits follow within 1e-5. */
        CHECKF(d.max_abs <= 1e-5, "max |d| %.3e", d.max_abs);
        for (size_t r = 0; r < 12; r++) CHECK(nx_test_argmax(a + r * (n1 / 12), (long)(n1 / 12)) == nx_test_argmax(b + r * (n1 / 12), (long)(n1 / 12)));
    }
    free(a), free(b);
}

static void sharded_and_single_files_agree(void) {
    const char *one = nx_test_fixture("shard-1", "--preset tiny --seed 6");
    const char *three = nx_test_fixture("shard-3", "--preset tiny --seed 6 --shards 3");
    size_t n1 = 0, n2 = 0;
    float *a = logits_of(one, 10, &n1), *b = logits_of(three, 10, &n2);
    CHECK(a && b && n1 == n2 && memcmp(a, b, n1 * 4) == 0);
    free(a), free(b);
}

static void tied_f16_and_bf16_fixtures_run(void) {
    const char *dirs[] = {nx_test_fixture("tied-f16", "--preset tiny --seed 2 --dtype f16 --tie"),
                          nx_test_fixture("untied-bf16", "--preset tiny --seed 2 --dtype bf16 --no-tie")};
    for (int i = 0; i < 2; i++) {
        size_t n = 0;
        float *l = logits_of(dirs[i], 8, &n);
        CHECK(l != NULL);
        int finite = 1;
        for (size_t k = 0; l && k < n; k++) finite &= isfinite(l[k]) != 0;
        CHECK(finite);
        free(l);
    }
}

static void broken_checkpoints_are_named_errors(void) {
    char err[512];
    nx_model *m = NULL;
    const char *dir = nx_test_fixture("broken", "--preset tiny --seed 3");
    /* config promising more layers than the file has */
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cfg = nx_test_read_file(path, NULL), *orig = cfg ? strdup(cfg) : NULL;
    CHECK(cfg != NULL && orig != NULL);
    if (!cfg || !orig) return;
    char *p = strstr(cfg, "\"intermediate_size\": 256");
    CHECK(p != NULL);
    if (p) {
        memcpy(p, "\"intermediate_size\": 384", 24);
        nx_test_write_file(path, cfg, strlen(cfg));
        nx_status st = nx_model_load(dir, NULL, &m, err, sizeof err);
        CHECK(st == NX_EFORMAT && m == NULL);
        CHECKF(strstr(err, "mlp.gate_proj.weight") && strstr(err, "[384, 128]"), "message: %s", err);
    }
    /* config promising fewer layers than the file has (the last one cut from
     * num_hidden_layers and layer_types): not a shorter model, an error */
    char *layers = strstr(orig, "\"num_hidden_layers\": 4"), *last = strstr(orig, "\"full_attention\"");
    char *comma = last;
    while (comma && comma > orig && *comma != ',') comma--;
    CHECK(layers && last && comma > orig);
    if (layers && last && comma > orig) {
        layers[strlen("\"num_hidden_layers\": ")] = '3';
        memmove(comma, last + strlen("\"full_attention\""), strlen(last + strlen("\"full_attention\"")) + 1);
        nx_test_write_file(path, orig, strlen(orig));
        nx_status st = nx_model_load(dir, NULL, &m, err, sizeof err);
        CHECKF(st == NX_EFORMAT && m == NULL && strstr(err, "layers.3.") && strstr(err, "num_hidden_layers 3"), "%d %s", st,
               err);
    }
    free(cfg), free(orig);
    CHECK(nx_model_load("/nonexistent/dir", NULL, &m, err, sizeof err) == NX_EIO);
    CHECKF(strstr(err, "/nonexistent/dir"), "message: %s", err);
}


/* Logits after feeding tok[0..n) to a fresh state then `more` tokens one by one. */
static void plain_logits(nx_model *m, const int32_t *tok, int n, const int32_t *more, int n_more, float *out) {
    char err[512];
    nx_state *s = NULL;
    CHECK(nx_state_new(m, 128, &s, err, sizeof err) == NX_OK);
    size_t V = (size_t)nx_model_get_info(m)->vocab_size;
    nx_forward_out fo = {.logits = out};
    CHECK(nx_forward(m, s, tok, n, &fo, err, sizeof err) == NX_OK);
    for (int i = 0; i < n_more; i++) {
        fo.logits = out + (size_t)(i + 1) * V;
        CHECK(nx_forward(m, s, &more[i], 1, &fo, err, sizeof err) == NX_OK);
    }
    nx_state_free(s);
}

static void rollback_equals_plain_decoding_of_the_kept_tokens(void) {
    nx_model *m = nx_test_model(golden_dir, 2);
    if (!m) return;
    char err[512];
    size_t V = (size_t)nx_model_get_info(m)->vocab_size;
    enum { P = 21, B = 5, MORE = 3 };
    int32_t seq[P + B], more[MORE];
    nx_test_tokens(seq, P + B, (int)V, 17);
    nx_test_tokens(more, MORE, (int)V, 23);
    float *want = malloc((MORE + 1) * V * 4), *got = malloc((MORE + 1) * V * 4), *block = malloc(B * V * 4);
    for (int keep = 1; keep <= B; keep++) {
        nx_state *s = NULL;
        CHECK(nx_state_new(m, 128, &s, err, sizeof err) == NX_OK);
        CHECK(mdl_state_enable_rollback(s, 8, err, sizeof err) == NX_OK);
        nx_forward_out fo = {.logits = got};
        CHECK(nx_forward(m, s, seq, P, &fo, err, sizeof err) == NX_OK);
        nx_forward_out vo = {.logits = block, .all_rows = 1};
        CHECK(mdl_forward_verify(m, s, seq + P, B, &vo, err, sizeof err) == NX_OK);
        CHECK(mdl_rollback_to(s, keep, err, sizeof err) == NX_OK);
        CHECK(nx_state_pos(s) == P + keep);
        /* the verify rows themselves equal single steps */
        plain_logits(m, seq, P + keep - 1, seq + P + keep - 1, 1, want);
        CHECKF(memcmp(block + (size_t)(keep - 1) * V, want + V, V * 4) == 0, "verify row %d", keep - 1);
        /* and decoding after the rollback equals decoding the kept tokens */
        for (int i = 0; i < MORE; i++) {
            fo.logits = got + (size_t)(i + 1) * V;
            CHECK(nx_forward(m, s, &more[i], 1, &fo, err, sizeof err) == NX_OK);
        }
        plain_logits(m, seq, P + keep, more, MORE, want);
        CHECKF(memcmp(got + V, want + V, MORE * V * 4) == 0, "keep %d: logits after rollback differ", keep);
        nx_state_free(s);
    }
    free(want), free(got), free(block);
    nx_model_free(m);
}

/* A rollback leaves the kept tokens' updates to the next forward
 * (mdl_rollback's pending); mdl_state_settle applies them at once: every
 * GDN layer's recurrent state then equals, byte for byte, the state of plain
 * decoding of the kept tokens, and a second settle or the next forward
 * applies nothing more. */
static void a_settled_rollback_holds_the_kept_tokens_state(void) {
    nx_model *m = nx_test_model(golden_dir, 2);
    if (!m) return;
    char err[512];
    const cfg_model *c = &m->cfg;
    const size_t V = (size_t)c->vocab_size, rec = (size_t)c->linear_v_heads * c->linear_v_dim * c->linear_k_dim;
    enum { P = 13, B = 4 };
    int32_t seq[P + B + 1];
    nx_test_tokens(seq, P + B + 1, (int)V, 29);
    float *got = malloc(V * 4), *want = malloc(V * 4);
    for (int keep = 1; keep < B; keep++) {
        nx_state *s = NULL, *p = NULL;
        CHECK(nx_state_new(m, 64, &s, err, sizeof err) == NX_OK && nx_state_new(m, 64, &p, err, sizeof err) == NX_OK);
        CHECK(mdl_state_enable_rollback(s, B, err, sizeof err) == NX_OK);
        CHECK(nx_forward(m, s, seq, P, NULL, err, sizeof err) == NX_OK);
        CHECK(mdl_forward_verify(m, s, seq + P, B, NULL, err, sizeof err) == NX_OK);
        CHECK(mdl_rollback_to(s, keep, err, sizeof err) == NX_OK);
        CHECK(s->rb.pending == keep);
        mdl_state_settle(s);
        mdl_state_settle(s);
        CHECK(s->rb.pending == 0);
        CHECK(nx_forward(m, p, seq, P + keep, NULL, err, sizeof err) == NX_OK);
        int same = 1;
        for (int l = 0; l < c->n_layers; l++)
            if (!c->layer_full[l]) same &= memcmp(s->recurrent[l], p->recurrent[l], rec * sizeof(float)) == 0;
        CHECKF(same, "keep %d of %d: the settled recurrent state differs from plain decoding's", keep, B);
        nx_forward_out go = {.logits = got}, wo = {.logits = want};
        CHECK(nx_forward(m, s, seq + P + B, 1, &go, err, sizeof err) == NX_OK &&
              nx_forward(m, p, seq + P + B, 1, &wo, err, sizeof err) == NX_OK);
        CHECKF(memcmp(got, want, V * 4) == 0, "keep %d of %d: the step after a settle differs", keep, B);
        nx_state_free(s), nx_state_free(p);
    }
    free(got), free(want);
    nx_model_free(m);
}

/* Rounds on one state, as a session runs them: verify a block, keep a
 * prefix (1, all, 2, all, 4, 1 of 5 tokens), once a plain token between
 * rounds, and once the record grown (to 7 tokens) while the states a
 * verify kept lie in the record's own buffers. Each round's verify rows, the
 * first of which reads the state the last rollback left, equal plain
 * decoding of the kept sequence bit for bit: the state and its spare buffer
 * change places every round. */
static void rounds_of_verify_and_rollback_equal_plain_decoding_with(nx_kv_cache kv) {
    nx_model *m = golden_model(kv);
    if (!m) return;
    char err[512];
    size_t V = (size_t)nx_model_get_info(m)->vocab_size;
    enum { P = 9, B = 5, ROUNDS = 6, CAP = P + ROUNDS * B + 1 };
    static const int keep[ROUNDS] = {1, B, 2, B, 4, 1};
    int32_t kept[CAP], blk[B];
    nx_test_tokens(kept, P, (int)V, 31);
    int n = P;
    float *rows = malloc(B * V * 4), *want = malloc((B + 1) * V * 4);
    nx_state *s = NULL;
    CHECK(nx_state_new(m, 128, &s, err, sizeof err) == NX_OK);
    CHECK(mdl_state_enable_rollback(s, B, err, sizeof err) == NX_OK);
    CHECK(nx_forward(m, s, kept, P, NULL, err, sizeof err) == NX_OK);
    for (int r = 0; r < ROUNDS; r++) {
        nx_test_tokens(blk, B, (int)V, 70 + r);
        nx_forward_out vo = {.logits = rows, .all_rows = 1};
        CHECK(mdl_forward_verify(m, s, blk, B, &vo, err, sizeof err) == NX_OK);
        plain_logits(m, kept, n, blk, B, want);
        CHECKF(memcmp(rows, want + V, B * V * 4) == 0, "KV %s, round %d: verify rows differ from plain decoding",
               nx_model_get_info(m)->kv_cache, r);
        CHECK(mdl_rollback_to(s, keep[r], err, sizeof err) == NX_OK);
        memcpy(kept + n, blk, (size_t)keep[r] * sizeof *blk);
        n += keep[r];
        if (r == 1) /* all kept: the states now live in the record's block, which growing replaces */
            CHECK(mdl_state_enable_rollback(s, B + 2, err, sizeof err) == NX_OK);
        if (r == 2) { /* a plain step between rounds: no record, in place */
            CHECK(nx_forward(m, s, &blk[B - 1], 1, NULL, err, sizeof err) == NX_OK);
            kept[n++] = blk[B - 1];
        }
        CHECK(nx_state_pos(s) == n);
    }
    nx_state_free(s);
    free(rows), free(want);
    nx_model_free(m);
}

static void rounds_of_verify_and_rollback_equal_plain_decoding(void) {
    rounds_of_verify_and_rollback_equal_plain_decoding_with(NX_KV_F32);
    rounds_of_verify_and_rollback_equal_plain_decoding_with(NX_KV_F16);
}

/* Every allocation of the rollback record failing in turn: NX_ENOMEM, no
 * record left half made (the sanitizer build sees any leak), and the state
 * still verifies and rolls back once one succeeds. */
static void rollback_record_allocation_failures_are_clean(void) {
    nx_model *m = nx_test_model(golden_dir, 2);
    if (!m) return;
    char err[512];
    nx_state *s = NULL;
    CHECK(nx_state_new(m, 64, &s, err, sizeof err) == NX_OK);
    int32_t t[4] = {3, 1, 4, 1};
    int fails = 0, bad = 0;
    for (long k = 0; k < 1000; k++) {
        nx_alloc_fail_after(k);
        const nx_status st = mdl_state_enable_rollback(s, 4, err, sizeof err);
        nx_alloc_fail_after(-1);
        if (st == NX_OK) break;
        fails++;
        bad += st != NX_ENOMEM || s->rb.max_block != 0 || s->rb.prior != NULL;
    }
    CHECKF(fails > 3 && bad == 0, "%d failed allocations, %d left a record behind", fails, bad);
    CHECK(mdl_forward_verify(m, s, t, 4, NULL, err, sizeof err) == NX_OK);
    CHECK(mdl_rollback_to(s, 2, err, sizeof err) == NX_OK && nx_state_pos(s) == 2);
    nx_state_free(s);
    nx_model_free(m);
}

static void rollback_misuse_is_an_error(void) {
    nx_model *m = nx_test_model(golden_dir, 1);
    if (!m) return;
    char err[512];
    nx_state *s = NULL;
    CHECK(nx_state_new(m, 64, &s, err, sizeof err) == NX_OK);
    int32_t t[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK(mdl_rollback_to(s, 1, err, sizeof err) == NX_ESTATE);
    CHECK(mdl_forward_verify(m, s, t, 3, NULL, err, sizeof err) == NX_EINVAL); /* no rollback buffers */
    CHECK(mdl_state_enable_rollback(s, 4, err, sizeof err) == NX_OK);
    CHECK(mdl_state_enable_rollback(s, 0, err, sizeof err) == NX_EINVAL);
    CHECK(mdl_forward_verify(m, s, t, 5, NULL, err, sizeof err) == NX_EINVAL && nx_state_pos(s) == 0);
    CHECK(mdl_forward_verify(m, s, t, 4, NULL, err, sizeof err) == NX_OK && nx_state_pos(s) == 4);
    /* growing the record would drop the pending one */
    CHECK(mdl_state_enable_rollback(s, 4, err, sizeof err) == NX_OK);
    CHECKF(mdl_state_enable_rollback(s, 6, err, sizeof err) == NX_ESTATE && strstr(err, "pending"), "%s", err);
    CHECK(mdl_rollback_to(s, 5, err, sizeof err) == NX_EINVAL && nx_state_pos(s) == 4);
    CHECK(mdl_rollback_to(s, 0, err, sizeof err) == NX_EINVAL);
    CHECK(mdl_rollback_to(s, 4, err, sizeof err) == NX_OK && nx_state_pos(s) == 4);
    CHECK(mdl_rollback_to(s, 1, err, sizeof err) == NX_ESTATE); /* the record was consumed */
    CHECK(mdl_state_enable_rollback(s, 6, err, sizeof err) == NX_OK);   /* and may grow now */
    CHECK(mdl_forward_verify(m, s, t, 2, NULL, err, sizeof err) == NX_OK);
    CHECK(nx_forward(m, s, t, 1, NULL, err, sizeof err) == NX_OK);
    CHECK(mdl_rollback_to(s, 1, err, sizeof err) == NX_ESTATE); /* a later forward forgets it */
    nx_state_free(s);
    nx_model_free(m);
}


/* Four sequences at different positions in states of different sizes,
 * blocks of 3, 11, 1 and 4 tokens (the 3- and 4-token ones recorded as
 * verifies; the 11 rows take two attention blocks, between other
 * sequences'; two take their hidden rows before the final norm): one batched
 * forward gives every row bit-identical to each sequence run alone, and each
 * state rolls back and continues exactly as it would have alone. */
static void batched_blocks_equal_each_sequence_alone_with(nx_kv_cache kv) {
    nx_model *m = golden_model(kv);
    if (!m) return;
    char err[512];
    int V = nx_model_get_info(m)->vocab_size, H = nx_model_get_info(m)->hidden_size;
    enum { N = 4, MAXB = 11, ROWS = 3 + 11 + 1 + 4 };
    static const int hist_len[N] = {9, 5, 17, 4}, block[N] = {3, 11, 1, 4}, keep[N] = {2, 11, 1, 3};
    static const int ctx[N] = {64, 40, 100, 64}, record[N] = {1, 0, 0, 1};
    int32_t hist[N][24], blk[N][MAXB], more[N];
    nx_state *bs[N], *alone[N];
    float *want = malloc((size_t)MAXB * V * 4), *next = malloc((size_t)V * 4), *next_alone = malloc((size_t)V * 4);
    float *logits = malloc((size_t)ROWS * V * 4), *hid = malloc((size_t)ROWS * H * 4);
    float *hid_alone = malloc((size_t)MAXB * H * 4);
    for (int i = 0; i < N; i++) {
        nx_test_tokens(hist[i], hist_len[i], V, 40 + i);
        nx_test_tokens(blk[i], block[i], V, 50 + i);
        nx_test_tokens(&more[i], 1, V, 60 + i);
        CHECK(nx_state_new(m, ctx[i], &bs[i], err, sizeof err) == NX_OK);
        CHECK(nx_state_new(m, ctx[i], &alone[i], err, sizeof err) == NX_OK);
        CHECK(mdl_state_enable_rollback(bs[i], 4, err, sizeof err) == NX_OK);
        CHECK(mdl_state_enable_rollback(alone[i], 4, err, sizeof err) == NX_OK);
        CHECK(nx_forward(m, bs[i], hist[i], hist_len[i], NULL, err, sizeof err) == NX_OK);
        CHECK(nx_forward(m, alone[i], hist[i], hist_len[i], NULL, err, sizeof err) == NX_OK);
    }
    mdl_batch_item items[N];
    for (int i = 0; i < N; i++) items[i] = (mdl_batch_item){bs[i], blk[i], block[i], record[i], i % 2};
    CHECKF(mdl_forward_batch(m, items, N, logits, hid, err, sizeof err) == NX_OK, "%s", err);
    int row = 0;
    for (int i = 0; i < N; i++) {
        /* odd items' hidden rows: before the final norm */
        nx_forward_out fo = {.logits = want, .hidden = i % 2 ? NULL : hid_alone, .prenorm = i % 2 ? hid_alone : NULL,
                             .all_rows = 1};
        CHECK((record[i] ? mdl_forward_verify(m, alone[i], blk[i], block[i], &fo, err, sizeof err)
                         : nx_forward(m, alone[i], blk[i], block[i], &fo, err, sizeof err)) == NX_OK);
        CHECKF(memcmp(logits + (size_t)row * V, want, (size_t)block[i] * V * 4) == 0, "sequence %d: batched logits differ", i);
        CHECKF(memcmp(hid + (size_t)row * H, hid_alone, (size_t)block[i] * H * 4) == 0, "sequence %d: batched hiddens differ", i);
        row += block[i];
        if (record[i]) {
            CHECK(mdl_rollback_to(bs[i], keep[i], err, sizeof err) == NX_OK);
            CHECK(mdl_rollback_to(alone[i], keep[i], err, sizeof err) == NX_OK);
        }
        nx_forward_out one = {.logits = next};
        CHECK(nx_forward(m, bs[i], &more[i], 1, &one, err, sizeof err) == NX_OK);
        one.logits = next_alone;
        CHECK(nx_forward(m, alone[i], &more[i], 1, &one, err, sizeof err) == NX_OK);
        CHECKF(memcmp(next, next_alone, (size_t)V * 4) == 0, "sequence %d: the state after the batch differs", i);
    }
    /* misuse: one state twice, too many rows, a bad token: errors, nothing moves */
    int pos0 = nx_state_pos(bs[0]);
    mdl_batch_item twice[2] = {{bs[0], blk[0], 1, 0, 0}, {bs[0], blk[1], 1, 0, 0}};
    CHECK(mdl_forward_batch(m, twice, 2, NULL, NULL, err, sizeof err) == NX_EINVAL && strstr(err, "share"));
    int32_t bad = V + 5;
    mdl_batch_item badtok[2] = {{bs[0], blk[0], 1, 0, 0}, {bs[1], &bad, 1, 0, 0}};
    CHECK(mdl_forward_batch(m, badtok, 2, NULL, NULL, err, sizeof err) == NX_EINVAL && strstr(err, "item 1"));
    mdl_batch_item big = {bs[0], blk[3], 4, 1, 0};
    CHECK(mdl_forward_batch(m, &big, 1, NULL, NULL, err, sizeof err) == NX_OK); /* 4 rows fit */
    CHECK(nx_state_pos(bs[0]) == pos0 + 4 && nx_state_pos(bs[1]) == hist_len[1] + block[1] + 1);
    for (int i = 0; i < N; i++) nx_state_free(bs[i]), nx_state_free(alone[i]);
    free(want), free(next), free(next_alone), free(logits), free(hid), free(hid_alone);
    nx_model_free(m);
}

static void batched_blocks_equal_each_sequence_alone(void) {
    batched_blocks_equal_each_sequence_alone_with(NX_KV_F32);
    batched_blocks_equal_each_sequence_alone_with(NX_KV_F16);
}

#include <pthread.h>

typedef struct {
    nx_model *m;
    const int32_t *tok;
    int n;
    float *logits;
    int ok;
} share_job;

static void *share_main(void *arg) {
    share_job *j = arg;
    char err[256];
    nx_state *s = NULL;
    j->ok = nx_state_new(j->m, j->n, &s, err, sizeof err) == NX_OK;
    nx_forward_out fo = {.logits = j->logits, .all_rows = 1};
    for (int i = 0; j->ok && i < j->n; i++) { /* many small jobs: maximal interleaving */
        fo.logits = j->logits + (size_t)i * nx_model_get_info(j->m)->vocab_size;
        j->ok = nx_forward(j->m, s, j->tok + i, 1, &fo, err, sizeof err) == NX_OK;
    }
    nx_state_free(s);
    return NULL;
}

/* Regression: sharing one model (and its thread pool) between threads that
 * decode their own sequences once corrupted memory. */
static void threads_can_share_a_model(void) {
    nx_model *m = nx_test_model(golden_dir, 2);
    if (!m) return;
    enum { N = 24, THREADS = 3 };
    size_t V = (size_t)nx_model_get_info(m)->vocab_size;
    int32_t tok[THREADS][N];
    share_job jobs[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        nx_test_tokens(tok[t], N, (int)V, 40u + (unsigned)t);
        jobs[t] = (share_job){m, tok[t], N, malloc(N * V * 4), 0};
        pthread_create(&th[t], NULL, share_main, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    float *want = malloc(N * V * 4);
    for (int t = 0; t < THREADS; t++) {
        CHECK(jobs[t].ok);
        share_job alone = {m, tok[t], N, want, 0};
        share_main(&alone);
        CHECKF(alone.ok && memcmp(want, jobs[t].logits, N * V * 4) == 0, "thread %d differs from running alone", t);
        free(jobs[t].logits);
    }
    free(want);
    nx_model_free(m);
}

static const nx_test tests[] = {
    {"any_split_is_bit_identical",
     "one call, single steps and verify-sized blocks give bit-identical rows (f32 and f16 KV)",
     any_split_is_bit_identical},
    {"rollback_equals_plain_decoding_of_the_kept_tokens", "after a verify block, rollback to any prefix decodes bit-identically", rollback_equals_plain_decoding_of_the_kept_tokens},
    {"a_settled_rollback_holds_the_kept_tokens_state",
     "rollback to 1-3 of 4, settled (twice): each GDN layer's recurrent state equals plain decoding's byte for byte, "
     "and so does the next step's logits",
     a_settled_rollback_holds_the_kept_tokens_state},
    {"batched_blocks_equal_each_sequence_alone",
     "3 sequences' blocks in one forward: rows, hiddens and later states equal each alone (f32 and f16 KV)",
     batched_blocks_equal_each_sequence_alone},
    {"rounds_of_verify_and_rollback_equal_plain_decoding",
     "6 verify/rollback rounds on one state (keeps 1,5,2,5,4,1, a plain step between): every verify row "
     "bit-identical to plain decoding (f32 and f16 KV)",
     rounds_of_verify_and_rollback_equal_plain_decoding},
    {"rollback_record_allocation_failures_are_clean", "each failing allocation of the rollback record: NX_ENOMEM, nothing left, then it works",
     rollback_record_allocation_failures_are_clean},
    {"rollback_misuse_is_an_error", "rollback without a record, bad keep, oversized block, growing the record past a pending verify: errors, state kept", rollback_misuse_is_an_error},
    {"thread_count_does_not_change_results", "1, 2 and 3 threads give bit-identical logits", thread_count_does_not_change_results},
    {"threads_can_share_a_model", "three threads decoding their own sequences on one model match running alone", threads_can_share_a_model},
    {"decode_does_not_allocate", "prefill and decode run under the no-allocation guard", decode_does_not_allocate},
    {"bad_calls_are_errors_that_keep_the_state", "bad token, full context, empty call: errors, state unchanged", bad_calls_are_errors_that_keep_the_state},
    {"hf_and_mlx_layouts_give_the_same_logits", "raw HF (1+w) and MLX (+1 baked, conv [CD,K,1]) files agree", hf_and_mlx_layouts_give_the_same_logits},
    {"sharded_and_single_files_agree", "a 3-shard checkpoint and a single file give identical logits", sharded_and_single_files_agree},
    {"tied_f16_and_bf16_fixtures_run", "tied f16 and untied bf16 fixtures load and give finite logits", tied_f16_and_bf16_fixtures_run},
    {"broken_checkpoints_are_named_errors", "a tensor shape, or a layer past num_hidden_layers, that disagrees with config.json names the tensor", broken_checkpoints_are_named_errors},
};

NX_TEST_MAIN(tests)
