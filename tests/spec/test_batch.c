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

/* screen: the drafter's draft_screen (0: drafts score the whole head). Four
 * sessions draft with a head that reads the target's rows before the final
 * norm: one forward gives each session its own kind of row. */
static void batched_rounds(int screen) {
    nx_model *m = nx_test_model(COPY, 2);
    char err[512];
    nx_drafter *d = NULL, *pre = NULL;
    nx_drafter_opts dopts = {.draft_screen = screen}, popts = {.hidden_prenorm = 1, .draft_screen = screen};
    if (m)
        CHECKF(nx_drafter_load(m, NULL, &dopts, &d, err, sizeof err) == NX_OK &&
                   nx_drafter_load(m, NULL, &popts, &pre, err, sizeof err) == NX_OK,
               "%s", err);
    if (!d || !pre) goto done;
    CHECK(nx_drafter_screen_k(d) == screen);
    int V = nx_model_get_info(m)->vocab_size;
    int32_t prompt[N][16], alone[N][GEN + W], batched[N][GEN + W];
    int n_alone[N], n_batched[N];
    nx_spec_stats stats_alone[N];
    nx_spec *ss[N];
    for (int i = 0; i < N; i++) {
        nx_test_tokens(prompt[i], 4 + i % 12, V, 70 + i);
        nx_spec_opts o = opts_of(i);
        nx_drafter *di = i == 5 ? NULL : i % 9 == 7 ? pre : d; /* one plain-decoding session among them */
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
    CHECK(nx_spec_batch_new(m, -5, &b, err, sizeof err) == NX_EINVAL && !b && strstr(err, "context size -5"));
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
done:
    nx_drafter_free(d), nx_drafter_free(pre);
    nx_model_free(m);
}

static void batched_rounds_equal_each_session_alone(void) { batched_rounds(0); }

/* The batch scores its sessions' first drafts together through the screen
 * (mtp_head_rows of several rows, one work area): the same drafts. */
static void batched_rounds_equal_each_session_alone_with_a_screen(void) { batched_rounds(16); }

static const nx_test tests[] = {
    {"batched_rounds_equal_each_session_alone",
     "36 sessions (plain, K 1-3, auto; greedy, match, rejection; post- and pre-norm heads; > 32 rows) stepped together: each equals itself alone",
     batched_rounds_equal_each_session_alone},
    {"batched_rounds_equal_each_session_alone_with_a_screen",
     "the same 36 sessions with drafts through a screen of 16 rows: each equals itself alone",
     batched_rounds_equal_each_session_alone_with_a_screen},
};

NX_TEST_MAIN(tests)
