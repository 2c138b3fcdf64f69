/* test_batch.c — many speculative sessions verified in one forward
 * (nx_spec_step_batch): each session's tokens are exactly what nx_spec_step
 * gives it alone, whatever its draft length and acceptance mode, across
 * forwards split at 32 rows; misuse is reported per session. */
#include "test.h"

#include "nextn.h"

/* the bundled model: its trained head reads the hidden rows (a wrong row shows) */
#define COPY NX_MODELS_DIR "/default"

enum { N = 36, GEN = 40, W = NX_SPEC_MAX_DRAFT + 1 };

/* Session i's options: draft lengths 0 (plain) .. 3 and auto, greedy,
 * matched sampling and rejection sampling, its drafts the head's argmax or
 * drawn from the head's distribution (both in one chunk), some with
 * penalties or a logit bias (argmax drafts after them). */
static nx_spec_opts opts_of(int i) {
    static const int drafts[] = {1, 2, 3, NX_DRAFT_AUTO, 3, 2};
    nx_spec_opts o = {.draft = drafts[i % 6], .accept = NX_ACCEPT_GREEDY, .sampling = nx_sampling_default()};
    if (i % 3 == 1) o.accept = NX_ACCEPT_MATCH, o.sampling.temperature = 0.9f, o.sampling.seed = 5 + i;
    if (i % 3 == 2) o.accept = NX_ACCEPT_REJECTION, o.sampling.temperature = 0.7f, o.sampling.top_p = 0.9f, o.sampling.seed = 9 + i;
    if (i % 3 == 2) o.draft_pick = i % 2 ? NX_DRAFT_PICK_SAMPLE : NX_DRAFT_PICK_ARGMAX;
    static const nx_logit_bias bias[2] = {{11, 3.0f}, {267, -5.0f}};
    if (i % 4 == 3) o.sampling.repetition_penalty = 1.3f, o.sampling.presence_penalty = 0.3f;
    if (i % 8 == 4) o.sampling.logit_bias = bias, o.sampling.n_logit_bias = 2;
    return o;
}

/* screen: the drafter's draft_screen (0: drafts score the whole head) */
static void batched_rounds(int screen) {
    nx_model *m = nx_test_model(COPY, 2);
    char err[512];
    nx_drafter *d = NULL;
    nx_drafter_opts dopts = {.draft_screen = screen};
    if (m) CHECKF(nx_drafter_load(m, NULL, &dopts, &d, err, sizeof err) == NX_OK, "%s", err);
    if (!d) return;
    CHECK(nx_drafter_screen_k(d) == screen);
    int V = nx_model_get_info(m)->vocab_size;
    int32_t prompt[N][16], alone[N][GEN + W], batched[N][GEN + W];
    int n_alone[N], n_batched[N];
    nx_spec_stats stats_alone[N];
    nx_spec *ss[N];
    for (int i = 0; i < N; i++) {
        nx_test_tokens(prompt[i], 4 + i % 12, V, 70 + i);
        nx_spec_opts o = opts_of(i);
        nx_drafter *di = i == 5 ? NULL : d; /* one plain-decoding session among them */
        /* alone: prefill, then nx_spec_step until GEN tokens */
        nx_spec *s = NULL;
        CHECKF(nx_spec_new(m, di, 256, &o, &s, err, sizeof err) == NX_OK, "%s", err);
        CHECK(nx_spec_prefill(s, prompt[i], 4 + i % 12, &alone[i][0], err, sizeof err) == NX_OK);
        n_alone[i] = 1;
        while (n_alone[i] < GEN) {
            int got = 0;
            CHECK(nx_spec_step(s, GEN - n_alone[i], alone[i] + n_alone[i], &got, err, sizeof err) == NX_OK);
            n_alone[i] += got;
            if (!got) break;
        }
        stats_alone[i] = *nx_spec_get_stats(s);
        nx_spec_free(s);
        CHECKF(nx_spec_new(m, di, 256, &o, &ss[i], err, sizeof err) == NX_OK, "%s", err);
        CHECK(nx_spec_prefill(ss[i], prompt[i], 4 + i % 12, &batched[i][0], err, sizeof err) == NX_OK);
        n_batched[i] = 1;
    }
    nx_spec_batch *b = NULL;
    CHECKF(nx_spec_batch_new(m, 256, &b, err, sizeof err) == NX_OK, "%s", err);
    static int32_t emitted[N * W];
    static char msgs[N][256];
    int max_emit[N], n_emitted[N];
    nx_status st[N];
    for (int round = 0; b && round < GEN; round++) {
        nx_spec *live[N];
        int who[N], n = 0;
        for (int i = 0; i < N; i++)
            if (n_batched[i] < GEN) {
                who[n] = i;
                live[n] = ss[i];
                max_emit[n++] = GEN - n_batched[i];
            }
        if (!n) break;
        CHECK(nx_spec_step_batch(b, live, n, max_emit, emitted, n_emitted, st, &msgs[0][0], sizeof msgs[0]) == NX_OK);
        for (int k = 0; k < n; k++) {
            CHECKF(st[k] == NX_OK, "session %d: %s", who[k], msgs[k]);
            memcpy(batched[who[k]] + n_batched[who[k]], emitted + k * W, (size_t)n_emitted[k] * sizeof(int32_t));
            n_batched[who[k]] += n_emitted[k];
        }
    }
    for (int i = 0; i < N; i++) {
        CHECKF(n_batched[i] == n_alone[i] && memcmp(batched[i], alone[i], (size_t)n_alone[i] * sizeof(int32_t)) == 0,
               "session %d (draft %d, accept %d) differs in the batch", i, opts_of(i).draft, opts_of(i).accept);
        const nx_spec_stats *stats = nx_spec_get_stats(ss[i]);
        CHECK(i == 5 ? stats->drafted == 0 : stats->drafted > 0);
        /* the same drafts too (the drafter's entries come from the batch's
         * hidden rows), except where the adaptive length follows timings */
        if (opts_of(i).draft != NX_DRAFT_AUTO)
            CHECKF(stats->drafted == stats_alone[i].drafted && stats->accepted == stats_alone[i].accepted,
                   "session %d: %lld/%lld accepted in the batch, %lld/%lld alone", i, (long long)stats->accepted,
                   (long long)stats->drafted, (long long)stats_alone[i].accepted, (long long)stats_alone[i].drafted);
    }
    /* misuse, reported per session; the others still step */
    nx_spec *twice[3] = {ss[0], ss[1], ss[0]};
    int me[3] = {4, 0, 4};
    CHECK(nx_spec_step_batch(b, twice, 3, me, emitted, n_emitted, st, &msgs[0][0], sizeof msgs[0]) == NX_OK);
    CHECK(st[0] == NX_OK && n_emitted[0] >= 1);
    CHECK(st[1] == NX_EINVAL && strstr(msgs[1], "max_emit"));
    CHECK(st[2] == NX_EINVAL && strstr(msgs[2], "also session 0"));
    nx_spec *fresh = NULL;
    nx_spec_opts o = opts_of(0);
    CHECK(nx_spec_new(m, d, 64, &o, &fresh, err, sizeof err) == NX_OK);
    nx_spec *one[1] = {fresh};
    CHECK(nx_spec_step_batch(b, one, 1, me, emitted, n_emitted, st, &msgs[0][0], sizeof msgs[0]) == NX_OK);
    CHECK(st[0] == NX_ESTATE && strstr(msgs[0], "prefill first"));
    nx_spec_free(fresh);
    nx_spec_batch_free(b);
    for (int i = 0; i < N; i++) nx_spec_free(ss[i]);
    nx_drafter_free(d);
    nx_model_free(m);
}

static void batched_rounds_equal_each_session_alone(void) { batched_rounds(0); }

/* The batch scores its sessions' first drafts together through the screen
 * (mtp_head_rows of several rows, one work area): the same drafts. */
static void batched_rounds_equal_each_session_alone_with_a_screen(void) { batched_rounds(16); }

/* A batch refused before its forward (sessions whose drafters read
 * different hidden rows) undoes each session's round: the next drafts, and a
 * snapshot taken then, equal those of a twin that never joined it (the
 * drafts' provisional entries had overwritten the head's output m). */
static void a_refused_batch_leaves_the_drafts_as_they_were(void) {
    nx_model *m = nx_test_model(COPY, 2);
    char err[512];
    nx_drafter *post = NULL, *pre = NULL;
    nx_drafter_opts po = {0}, pr = {.hidden_prenorm = 1};
    if (m)
        CHECKF(nx_drafter_load(m, NULL, &po, &post, err, sizeof err) == NX_OK &&
                   nx_drafter_load(m, NULL, &pr, &pre, err, sizeof err) == NX_OK,
               "%s", err);
    nx_spec_opts o = {.draft = 3, .sampling = nx_sampling_default()};
    nx_spec *s = NULL, *twin = NULL, *other = NULL, *from_s = NULL, *from_twin = NULL;
    nx_spec_batch *b = NULL;
    if (post && pre)
        CHECKF(nx_spec_new(m, post, 256, &o, &s, err, sizeof err) == NX_OK &&
                   nx_spec_new(m, post, 256, &o, &twin, err, sizeof err) == NX_OK &&
                   nx_spec_new(m, pre, 256, &o, &other, err, sizeof err) == NX_OK &&
                   nx_spec_new(m, post, 256, &o, &from_s, err, sizeof err) == NX_OK &&
                   nx_spec_new(m, post, 256, &o, &from_twin, err, sizeof err) == NX_OK &&
                   nx_spec_batch_new(m, 256, &b, err, sizeof err) == NX_OK,
               "%s", err);
    if (!b) goto done;
    const int32_t prompt[] = {10, 200, 3000, 45, 7, 99, 512, 33};
    int32_t first, emitted[2 * W];
    CHECK(nx_spec_prefill(s, prompt, 8, &first, err, sizeof err) == NX_OK &&
          nx_spec_prefill(twin, prompt, 8, &first, err, sizeof err) == NX_OK &&
          nx_spec_prefill(other, prompt, 8, &first, err, sizeof err) == NX_OK);
    nx_spec *both[2] = {s, other};
    int me[2] = {4, 4}, n_emitted[2];
    nx_status st[2];
    char msgs[2][256];
    CHECK(nx_spec_step_batch(b, both, 2, me, emitted, n_emitted, st, &msgs[0][0], sizeof msgs[0]) == NX_OK);
    CHECKF(st[0] == NX_EINVAL && strstr(msgs[0], "different hidden rows") && st[1] == NX_EINVAL, "%s", msgs[0]);
    void *blob = NULL, *blob_twin = NULL;
    size_t len = 0, len_twin = 0;
    CHECK(nx_spec_snapshot(s, &blob, &len, err, sizeof err) == NX_OK &&
          nx_spec_snapshot(twin, &blob_twin, &len_twin, err, sizeof err) == NX_OK &&
          nx_spec_restore(from_s, blob, len, err, sizeof err) == NX_OK &&
          nx_spec_restore(from_twin, blob_twin, len_twin, err, sizeof err) == NX_OK);
    nx_spec *pairs[2][2] = {{s, twin}, {from_s, from_twin}};
    for (int p = 0; p < 2; p++) {
        int32_t d[2][NX_SPEC_MAX_DRAFT];
        int k[2];
        CHECK(nx_spec_draft(pairs[p][0], 3, d[0], &k[0], err, sizeof err) == NX_OK &&
              nx_spec_draft(pairs[p][1], 3, d[1], &k[1], err, sizeof err) == NX_OK);
        CHECKF(k[0] == k[1] && memcmp(d[0], d[1], (size_t)k[0] * sizeof(int32_t)) == 0,
               "%s: drafts %d %d %d after the refused batch, %d %d %d from the twin", p ? "restored" : "live", d[0][0],
               d[0][1], d[0][2], d[1][0], d[1][1], d[1][2]);
    }
    nx_free(blob), nx_free(blob_twin);
done:
    nx_spec_batch_free(b);
    nx_spec_free(s), nx_spec_free(twin), nx_spec_free(other), nx_spec_free(from_s), nx_spec_free(from_twin);
    nx_drafter_free(post), nx_drafter_free(pre);
    nx_model_free(m);
}

static const nx_test tests[] = {
    {"batched_rounds_equal_each_session_alone",
     "36 sessions (plain, K 1-3, auto; greedy, match, rejection; > 32 rows) stepped together: each equals itself alone",
     batched_rounds_equal_each_session_alone},
    {"batched_rounds_equal_each_session_alone_with_a_screen",
     "the same 36 sessions with drafts through a screen of 16 rows: each equals itself alone",
     batched_rounds_equal_each_session_alone_with_a_screen},
    {"a_refused_batch_leaves_the_drafts_as_they_were",
     "a batch refused before its forward: the next drafts and a snapshot equal an untouched twin's",
     a_refused_batch_leaves_the_drafts_as_they_were},
};

NX_TEST_MAIN(tests)
