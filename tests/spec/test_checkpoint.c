/* test_checkpoint.c — saving and restoring a speculative session: a restored
 * session continues exactly like the uninterrupted one, and checkpoints of
 * another model or drafter, damaged files and misuse are refused without
 * touching the session. */
#include "test.h"

#include "nextn.h"
#include "spec/checkpoint.h"
#include "spec/spec.h"

#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY NX_TEST_DATA "/golden/torchref-mini-copy-s0.05/hf"

/* A session of K drafts, greedy, or (sampled) under rejection sampling with
 * drafts drawn from the head's distribution; sampled 2: with presence and
 * frequency penalties too (which count the output only: n_input). */
static nx_spec *session_of(nx_model *m, nx_drafter *d, int K, int ctx, int sampled) {
    char err[512];
    nx_spec *s = NULL;
    nx_spec_opts o = {.draft = K, .accept = NX_ACCEPT_GREEDY, .sampling = nx_sampling_default()};
    if (sampled) {
        o.accept = NX_ACCEPT_REJECTION, o.draft_pick = NX_DRAFT_PICK_SAMPLE;
        o.sampling.temperature = 0.8f, o.sampling.top_k = 30, o.sampling.seed = 21;
    }
    if (sampled == 2) o.sampling.presence_penalty = 0.8f, o.sampling.frequency_penalty = 0.3f;
    CHECKF(nx_spec_new(m, d, ctx, &o, &s, err, sizeof err) == NX_OK, "%s", err);
    return s;
}

static nx_spec *session_ctx(nx_model *m, nx_drafter *d, int K, int ctx) { return session_of(m, d, K, ctx, 0); }
static nx_spec *session(nx_model *m, nx_drafter *d, int K) { return session_ctx(m, d, K, 256); }

/* Steps until `total` tokens were emitted in this session's lifetime. */
static int run_to(nx_spec *s, int32_t *out, int have, int total) {
    char err[512];
    while (have < total) {
        int got;
        if (nx_spec_step(s, total - have, out + have, &got, err, sizeof err) != NX_OK) {
            CHECKF(0, "%s", err);
            break;
        }
        have += got;
    }
    return have;
}

static const int32_t prompt[6] = {11, 42, 7, 300, 5, 9}, turn2[4] = {77, 78, 79, 80};

/* One session run uninterrupted to 51 tokens (after 20 a second turn where
 * greedy), and one saved after 20, restored in a new session and run on:
 * the same tokens. */
static void restored_equals_uninterrupted(nx_model *m, nx_drafter *dk, int K, int sampled, const char *path,
                                          const char *what) {
    char err[512];
    int32_t a[128], b[128], first;
    nx_spec *s = session_of(m, dk, K, 256, sampled);
    CHECK(nx_spec_prefill(s, prompt, 6, &a[0], err, sizeof err) == NX_OK);
    int n = run_to(s, a, 1, 20);
    if (!sampled) CHECK(nx_spec_extend(s, turn2, 4, &a[n++], err, sizeof err) == NX_OK);
    run_to(s, a, n, 51);
    nx_spec_free(s);
    s = session_of(m, dk, K, 256, sampled);
    CHECK(nx_spec_prefill(s, prompt, 6, &b[0], err, sizeof err) == NX_OK);
    run_to(s, b, 1, 20);
    CHECK(nx_spec_save(s, path, err, sizeof err) == NX_OK);
    nx_spec_free(s);
    CHECK(nx_spec_checkpoint_tokens(path) == 6 + 20);
    s = session_of(m, dk, K, 256, sampled);
    CHECKF(nx_spec_load(s, path, err, sizeof err) == NX_OK, "%s", err);
    CHECK(nx_spec_length(s) == 26);
    if (!sampled) CHECK(nx_spec_extend(s, turn2, 4, &first, err, sizeof err) == NX_OK);
    b[20] = first;
    run_to(s, b, 20 + !sampled, 51);
    CHECKF(memcmp(a, b, 51 * sizeof *a) == 0, "%s K %d%s: the restored session diverges", what, K, sampled ? " sampled" : "");
    nx_spec_free(s);
}

/* Greedy K = 0..3, and K = 1..3 under rejection sampling with sampled
 * drafts, without the second turn: the restored session draws its first
 * draft again, from the same (seed, position) stream, as the uninterrupted
 * one did at the commit before the save; sampled drafts through a screen
 * and from a 4-bit head copy too (their Q drawn again the same way). */
static void restored_session_continues_exactly(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL, *screened = NULL, *copy4 = NULL;
    char err[512], path[1200];
    nx_drafter_opts so = {.draft_screen = 64}, co = {.draft_head_bits = 4};
    if (d)
        CHECKF(nx_drafter_load(m, NULL, &so, &screened, err, sizeof err) == NX_OK &&
                   nx_drafter_load(m, NULL, &co, &copy4, err, sizeof err) == NX_OK,
               "%s", err);
    if (!screened || !copy4) goto done;
    snprintf(path, sizeof path, "%s/s.ckpt", nx_test_tmpdir("ckpt"));
    for (int run = 0; run < 7; run++) { /* K = 0: plain decoding through the same session */
        const int K = run % 4 + run / 4;
        restored_equals_uninterrupted(m, K ? d : NULL, K, run >= 4, path, "");
    }
    restored_equals_uninterrupted(m, screened, 3, 1, path, "screen of 64,");
    restored_equals_uninterrupted(m, copy4, 2, 1, path, "4-bit head copy,");
    restored_equals_uninterrupted(m, d, 2, 2, path, "presence and frequency penalties,");
done:
    nx_drafter_free(screened), nx_drafter_free(copy4);
    nx_drafter_free(d);
    nx_model_free(m);
}

static void foreign_and_damaged_checkpoints_are_refused(void) {
    nx_model *m = nx_test_model(COPY, 2), *other = nx_test_model(NX_TEST_DATA "/golden/torchref-mini-copy-s0/hf", 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL, *pre = m ? nx_test_drafter(m, 1) : NULL, *od = other ? nx_test_drafter(other, 0) : NULL;
    if (!d || !pre || !od) goto out;
    char err[512], dir[1024], path[1200], bad[1200];
    snprintf(dir, sizeof dir, "%s", nx_test_tmpdir("ckpt-bad"));
    snprintf(path, sizeof path, "%s/s.ckpt", dir);
    int32_t out[64], first;
    nx_spec *s = session(m, d, 2);
    CHECK(nx_spec_save(s, path, err, sizeof err) == NX_ESTATE); /* not prefilled */
    CHECK(nx_spec_prefill(s, prompt, 6, &out[0], err, sizeof err) == NX_OK);
    run_to(s, out, 1, 10);
    CHECK(nx_spec_save(s, path, err, sizeof err) == NX_OK);
    CHECK(nx_spec_load(s, path, err, sizeof err) == NX_ESTATE && strstr(err, "fresh")); /* into a used session */
    nx_spec_free(s);

    s = session(other, od, 2);
    CHECK(nx_spec_load(s, path, err, sizeof err) == NX_EINVAL && strstr(err, "another model"));
    nx_spec_free(s);
    s = session(m, pre, 2); /* same weights, the head fed another hidden: another drafter */
    CHECK(nx_spec_load(s, path, err, sizeof err) == NX_EINVAL && strstr(err, "another drafter"));
    nx_spec_free(s);
    s = session(m, NULL, 0);
    CHECKF(nx_spec_load(s, path, err, sizeof err) == NX_EINVAL && strstr(err, "saved with a drafter; this session has none"),
           "%s", err);
    nx_spec_free(s);
    /* save refuses a path that is not a regular file, follows a link */
    s = session(m, d, 2);
    CHECK(nx_spec_prefill(s, prompt, 6, &out[0], err, sizeof err) == NX_OK);
    CHECKF(nx_spec_save(s, dir, err, sizeof err) == NX_EINVAL && strstr(err, "not a regular file"), "%s", err);
    nx_spec *fresh = session(m, d, 2);   /* nor does load read one (a directory's size is not its bytes) */
    CHECKF(nx_spec_load(fresh, dir, err, sizeof err) == NX_EIO && strstr(err, "not a regular file"), "%s", err);
    nx_spec_free(fresh);
    char link[1300], real[1300];
    snprintf(link, sizeof link, "%s/link.ckpt", dir);
    snprintf(real, sizeof real, "%s/real.ckpt", dir);
    remove(link), remove(real);
    CHECK(symlink("real.ckpt", link) == 0);
    /* the check sees what the save will: the link's target, not made here */
    CHECKF(nx_spec_save_check(link, err, sizeof err) == NX_OK && lstat(real, &(struct stat){0}) != 0, "%s", err);
    CHECKF(nx_spec_save_check(dir, err, sizeof err) == NX_EINVAL && strstr(err, "not a regular file"), "%s", err);
    CHECKF(nx_spec_save(s, link, err, sizeof err) == NX_OK, "%s", err);
    char nowhere[1300];
    snprintf(nowhere, sizeof nowhere, "%s/nowhere.ckpt", dir);
    remove(nowhere);
    CHECK(symlink("/nonexistent/x.ckpt", nowhere) == 0);
    CHECKF(nx_spec_save_check(nowhere, err, sizeof err) == NX_EIO && strstr(err, "nowhere.ckpt: cannot write the checkpoint"),
           "%s", err);
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode) && stat(real, &sb) == 0 && S_ISREG(sb.st_mode));
    CHECK(nx_spec_checkpoint_tokens(real) == 7);
    nx_spec_free(s);

    size_t n;
    unsigned char *bytes = nx_test_read_file(path, &n);
    CHECK(bytes && n > 200);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    static const struct { long at; int truncate; const char *what; } cases[] = {
        {-40, 0, "a flipped byte in the payload"}, {150, 0, "a flipped byte in the first tokens"},
        {-1, 1, "a truncated file"}, {0, 0, "a wrong magic"}};
    for (size_t i = 0; bytes && i < sizeof cases / sizeof *cases; i++) {
        unsigned char *copy = malloc(n);
        memcpy(copy, bytes, n);
        long at = cases[i].at < 0 ? (long)n + cases[i].at : cases[i].at;
        size_t len = cases[i].truncate ? (size_t)at : n;
        if (!cases[i].truncate) copy[at] ^= 0x5a;
        nx_test_write_file(bad, copy, len);
        free(copy);
        s = session(m, d, 2);
        CHECKF(nx_spec_load(s, bad, err, sizeof err) == NX_EFORMAT, "%s: %s", cases[i].what, err);
        /* the session is still fresh and works normally */
        CHECK(nx_spec_prefill(s, prompt, 6, &first, err, sizeof err) == NX_OK && first == out[0]);
        nx_spec_free(s);
    }
    /* the checksum covers the header: the lowest bit of a field that still
     * fits (the split of the penalties, the head's rows, the pending draft) */
    static const size_t fields[] = {offsetof(ckpt_header, n_input), offsetof(ckpt_header, rows), offsetof(ckpt_header, d1)};
    for (size_t i = 0; bytes && i < sizeof fields / sizeof *fields; i++) {
        bytes[fields[i]] ^= 1;
        nx_test_write_file(bad, bytes, n);
        bytes[fields[i]] ^= 1;
        s = session(m, d, 2);
        CHECKF(nx_spec_load(s, bad, err, sizeof err) == NX_EFORMAT && strstr(err, "checksum"), "header byte %zu: %s",
               fields[i], err);
        nx_spec_free(s);
    }
    /* a forged token count (near INT32_MAX) must not size any read */
    if (bytes) {
        int32_t forged = 0x7ffffffe;
        memcpy(bytes + offsetof(ckpt_header, n), &forged, 4);
        nx_test_write_file(bad, bytes, n);
        CHECK(nx_spec_checkpoint_tokens(bad) == -1);
        s = session(m, d, 2);
        CHECK(nx_spec_load(s, bad, err, sizeof err) == NX_EFORMAT);
        nx_spec_free(s);
    }
    free(bytes);
    CHECK(nx_spec_checkpoint_tokens("/nonexistent.ckpt") == -1);
out:
    nx_drafter_free(d), nx_drafter_free(pre), nx_drafter_free(od);
    nx_model_free(m), nx_model_free(other);
}

/* Writes bytes[0..n) to path with the checksum made to match its payload. */
static void write_forged(const char *path, unsigned char *bytes, size_t n) {
    uint64_t h = ckpt_hash(bytes, n);
    memcpy(bytes + offsetof(ckpt_header, payload_hash), &h, 8);
    nx_test_write_file(path, bytes, n);
}

/* The checksum catches damage, not forgery: a file edited with its checksum
 * recomputed must still be refused wherever the session would index with
 * it. Found by fuzzing nx_spec_load: a deferred draft token outside the
 * vocabulary passed the load and later read an embedding row past the
 * mapped file (an assert in a debug build). */
static void forged_checkpoints_with_valid_checksums_are_refused(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) goto out;
    char err[512], dir[1024], path[1200], bad[1200];
    snprintf(dir, sizeof dir, "%s", nx_test_tmpdir("ckpt-forged"));
    snprintf(path, sizeof path, "%s/s.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    int32_t out[64], first;
    /* rounds that may emit one token only are plain; with a head they
     * leave deferred (token, hidden) entries */
    nx_spec *s = session(m, d, 2);
    CHECK(nx_spec_prefill(s, prompt, 6, &out[0], err, sizeof err) == NX_OK);
    for (int i = 1, got; i < 10; i++) CHECK(nx_spec_step(s, 1, &out[i], &got, err, sizeof err) == NX_OK && got == 1);
    CHECK(s->n_defer > 0);
    CHECK(nx_spec_save(s, path, err, sizeof err) == NX_OK);
    nx_spec_free(s);
    size_t n;
    unsigned char *bytes = nx_test_read_file(path, &n);
    CHECK(bytes && n > sizeof(ckpt_header));
    if (bytes) {
        ckpt_header h;
        memcpy(&h, bytes, sizeof h);
        const size_t tail = (size_t)h.n_defer * (4 + 4 * (size_t)h.hidden);
        CHECK(h.n_defer > 0 && tail < n - sizeof h);
        /* the deferred tokens sit just before the deferred hiddens, at the end */
        const size_t at = n - tail;
        const int32_t forged[2] = {h.vocab, -1};
        for (int i = 0; i < 2; i++) {
            unsigned char *copy = malloc(n);
            memcpy(copy, bytes, n);
            memcpy(copy + at, &forged[i], 4);
            write_forged(bad, copy, n);
            free(copy);
            s = session(m, d, 2);
            CHECKF(nx_spec_load(s, bad, err, sizeof err) == NX_EFORMAT && strstr(err, "do not fit"),
                   "deferred token %d: %s", forged[i], err);
            CHECK(nx_spec_prefill(s, prompt, 6, &first, err, sizeof err) == NX_OK && first == out[0]);
            nx_spec_free(s);
        }
        /* the unedited bytes, checksum recomputed, still load */
        write_forged(bad, bytes, n);
        s = session(m, d, 2);
        CHECKF(nx_spec_load(s, bad, err, sizeof err) == NX_OK, "%s", err);
        nx_spec_free(s);
    }
    free(bytes);
    /* a session without a head has no deferred entries to restore */
    s = session(m, NULL, 0);
    CHECK(nx_spec_prefill(s, prompt, 6, &out[0], err, sizeof err) == NX_OK);
    run_to(s, out, 1, 10);
    CHECK(nx_spec_save(s, path, err, sizeof err) == NX_OK);
    nx_spec_free(s);
    bytes = nx_test_read_file(path, &n);
    CHECK(bytes && n > sizeof(ckpt_header));
    if (bytes) {
        const int32_t one = 1;
        memcpy(bytes + offsetof(ckpt_header, n_defer), &one, 4);
        write_forged(bad, bytes, n);
        s = session(m, NULL, 0);
        CHECKF(nx_spec_load(s, bad, err, sizeof err) == NX_EFORMAT, "%s", err);
        nx_spec_free(s);
    }
    free(bytes);
out:
    nx_drafter_free(d);
    nx_model_free(m);
}

/* Snapshots taken right after a round that rejected a draft (a rollback
 * whose kept updates the recurrent state does not hold until the next
 * forward: mdl_rollback) restore into sessions that go on as an
 * uninterrupted session does, and so does the session snapshotted. */
static void snapshots_after_a_rejection_continue_exactly(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    enum { N = 170, MORE = 20 };
    char err[512];
    int32_t ref[N + 8], a[N + 8], b[N + 8];
    nx_spec *s = session(m, d, 3);
    CHECK(nx_spec_prefill(s, prompt, 6, &ref[0], err, sizeof err) == NX_OK);
    run_to(s, ref, 1, N);
    nx_spec_free(s);
    int taken = 0, n = 1;
    s = session(m, d, 3);
    CHECK(nx_spec_prefill(s, prompt, 6, &a[0], err, sizeof err) == NX_OK);
    while (n < N - MORE - 8) {
        const nx_spec_stats before = *nx_spec_get_stats(s);
        int got;
        if (nx_spec_step(s, 8, a + n, &got, err, sizeof err) != NX_OK) {
            CHECKF(0, "%s", err);
            break;
        }
        n += got;
        const nx_spec_stats *after = nx_spec_get_stats(s);
        if (taken == 3 || after->accepted - before.accepted == after->drafted - before.drafted) continue;
        void *blob = NULL;   /* a rejection in this round: snapshot now */
        size_t len = 0;
        CHECKF(nx_spec_snapshot(s, &blob, &len, err, sizeof err) == NX_OK, "%s", err);
        nx_spec *r = session(m, d, 3);
        CHECKF(blob && nx_spec_restore(r, blob, len, err, sizeof err) == NX_OK, "%s", err);
        run_to(r, b, n, n + MORE);
        CHECKF(memcmp(ref + n, b + n, MORE * sizeof *b) == 0, "restored after the rejection at token %d: diverges", n);
        nx_spec_free(r);
        nx_free(blob);
        taken++;
    }
    run_to(s, a, n, N);
    CHECKF(memcmp(ref, a, N * sizeof *a) == 0, "the session snapshotted after rejections diverges");
    CHECKF(taken == 3, "%d rounds with a rejection in %d tokens (3 wanted)", taken, N);
    nx_spec_free(s);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* A prompt read in pieces with nx_spec_absorb, snapshotted in memory at a
 * piece boundary and restored elsewhere, continues exactly like the prompt
 * prefilled at once (the server's chunked prefill and prefix cache). */
static void absorbed_pieces_and_memory_snapshots_continue_exactly(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    static const int32_t long_prompt[12] = {11, 42, 7, 300, 5, 9, 17, 250, 3, 99, 64, 8};
    char err[512];
    for (int K = 0; K <= 3; K++) {
        nx_drafter *dk = K ? d : NULL;
        int32_t a[64], b[64], first;
        nx_spec *s = session(m, dk, K);
        CHECK(nx_spec_prefill(s, long_prompt, 12, &a[0], err, sizeof err) == NX_OK);
        run_to(s, a, 1, 30);
        nx_spec_free(s);

        s = session(m, dk, K);
        CHECKF(nx_spec_absorb(s, long_prompt, 5, err, sizeof err) == NX_OK, "%s", err);
        CHECKF(nx_spec_absorb(s, long_prompt + 5, 4, err, sizeof err) == NX_OK, "%s", err);
        CHECK(nx_spec_length(s) == 9 && nx_spec_get_stats(s)->emitted == 0);
        void *blob = NULL;
        size_t len = 0;
        CHECKF(nx_spec_snapshot(s, &blob, &len, err, sizeof err) == NX_OK, "%s", err);
        nx_spec_free(s);
        s = session(m, dk, K);
        CHECKF(blob && nx_spec_restore(s, blob, len, err, sizeof err) == NX_OK, "%s", err);
        CHECK(nx_spec_extend(s, long_prompt + 9, 3, &first, err, sizeof err) == NX_OK);
        b[0] = first;
        run_to(s, b, 1, 30);
        CHECKF(memcmp(a, b, 30 * sizeof *a) == 0, "K %d: absorbed + restored diverges", K);
        nx_spec_free(s);

        /* a damaged blob is refused and leaves the session fresh */
        if (blob && len > 100) {
            ((unsigned char *)blob)[len - 7] ^= 0x21;
            s = session(m, dk, K);
            CHECK(nx_spec_restore(s, blob, len, err, sizeof err) == NX_EFORMAT && strstr(err, "damaged"));
            CHECK(nx_spec_restore(s, blob, 10, err, sizeof err) == NX_EFORMAT);
            CHECK(nx_spec_prefill(s, long_prompt, 12, &first, err, sizeof err) == NX_OK && first == a[0]);
            nx_spec_free(s);
        }
        nx_free(blob);
    }
    /* misuse: one token into a fresh session, absorb while a round is open */
    nx_spec *s = session(m, d, 2);
    CHECK(nx_spec_absorb(s, prompt, 1, err, sizeof err) == NX_EINVAL);
    CHECK(nx_spec_absorb(s, (const int32_t[]){1, 1 << 30}, 2, err, sizeof err) == NX_EINVAL && strstr(err, "vocabulary"));
    CHECK(nx_spec_absorb(s, prompt, 6, err, sizeof err) == NX_OK);
    int32_t dr[4];
    int nd;
    CHECK(nx_spec_draft(s, 2, dr, &nd, err, sizeof err) == NX_OK);
    CHECK(nx_spec_absorb(s, prompt, 2, err, sizeof err) == NX_ESTATE);
    /* a snapshot restores only into a fresh session, as a file does */
    void *blob = NULL;
    size_t len = 0;
    nx_spec *used = session(m, d, 2);
    CHECK(nx_spec_absorb(used, prompt, 6, err, sizeof err) == NX_OK);
    CHECKF(nx_spec_snapshot(used, &blob, &len, err, sizeof err) == NX_OK, "%s", err);
    CHECKF(nx_spec_restore(used, blob, len, err, sizeof err) == NX_ESTATE && strstr(err, "only into a fresh session"), "%s", err);
    nx_free(blob);
    nx_spec_free(used);
    /* a fresh session takes no more tokens than its context holds */
    nx_spec *small = session_ctx(m, d, 2, 8);
    static const int32_t nine[9] = {11, 42, 7, 300, 5, 9, 17, 250, 3};
    CHECKF(nx_spec_absorb(small, nine, 9, err, sizeof err) == NX_ERANGE && strstr(err, "9 tokens exceed a context of 8"),
           "%s", err);
    CHECKF(nx_spec_absorb(small, nine, 8, err, sizeof err) == NX_OK, "%s", err);
    nx_spec_free(small);
    nx_spec_free(s);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* The first n rows of each KV head of two caches of cap_a and cap_b
 * positions (model.h's mdl_kv layout): 1 if they are the same. */
/* The first n rows of each of n_kv heads of two caches of elements of es
 * bytes, cap_a and cap_b rows a head. */
/* Whether the first n positions of each of n_kv heads agree between caches
 * for contexts ctx_a and ctx_b (mdl_kv's layout: K tiles with k set, else
 * rows). */
static int same_heads(const void *a, int ctx_a, const void *b, int ctx_b, int n, int n_kv, int hd, size_t es, int k) {
    const char *ca = a, *cb = b;
    const size_t cap_a = (size_t)mdl_kv_cap(ctx_a), cap_b = (size_t)mdl_kv_cap(ctx_b);
    for (int h = 0; h < n_kv; h++)
        for (int t = 0; t < n; t++)
            for (int d = 0; d < hd; d++) {
                const size_t at = (size_t)(k ? kn_k_elem(t, d, hd) : (int64_t)t * hd + d) * es;
                if (memcmp(ca + h * cap_a * hd * es + at, cb + h * cap_b * hd * es + at, es) != 0) return 0;
            }
    return 1;
}

/* A model with 2 KV heads: the caches hold each head's rows apart, at a
 * stride of the session's context in whole K tiles, and a checkpoint holds
 * them back to back.
 * A snapshot taken in a session of 256 positions restores into sessions of
 * 120 and 300 with every head's K and V rows (the target's and the
 * drafter's) as they were, and each continues as the uninterrupted session
 * does; with caches of f32 and of f16 rows. A model loaded with the other
 * layout refuses the snapshot. */
static void checkpoints_move_between_contexts_one(nx_kv_cache layout) {
    const char *dir = NX_TEST_DATA "/golden/llamacpp-tiny-a-untied-bf16/hf";
    char err[512];
    nx_model *m = NULL, *other = NULL;
    nx_load_opts lo = {.n_threads = 2, .kv_cache = layout}, lo_other = {.n_threads = 2, .kv_cache = !layout};
    CHECKF(nx_model_load(dir, &lo, &m, err, sizeof err) == NX_OK, "%s", err);
    CHECKF(nx_model_load(dir, &lo_other, &other, err, sizeof err) == NX_OK, "%s", err);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d || !other) {
        nx_model_free(other), nx_model_free(m);
        return;
    }
    static const int ctxs[] = {120, 300};
    const cfg_model *cfg = &m->cfg;
    const int nkv = cfg->n_kv_heads, hd = cfg->head_dim;
    const size_t es = layout == NX_KV_F16 ? 2 : 4;
    CHECK(nkv == 2);
    for (int K = 0; K <= 3; K += 3) {
        nx_drafter *dk = K ? d : NULL;
        int32_t a[64], b[64];
        nx_spec *s = session_ctx(m, dk, K, 256);
        CHECK(nx_spec_prefill(s, prompt, 6, &a[0], err, sizeof err) == NX_OK);
        run_to(s, a, 1, 30);
        void *blob = NULL;
        size_t len = 0;
        CHECKF(nx_spec_snapshot(s, &blob, &len, err, sizeof err) == NX_OK, "%s", err);
        /* rows below these counts stay as they are while s goes on */
        const int n = s->n, rows = dk ? s->rows.n : 0;
        run_to(s, a, 30, 60);
        for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
            const int cap = ctxs[ci];
            nx_spec *t = session_ctx(m, dk, K, cap);
            CHECKF(nx_spec_restore(t, blob, len, err, sizeof err) == NX_OK, "%s", err);
            int bad = 0;
            for (int l = 0; l < cfg->n_layers; l++)
                if (cfg->layer_full[l])
                    bad += !same_heads(s->target->k_cache[l], 256, t->target->k_cache[l], cap, n, nkv, hd, es, 1) +
                           !same_heads(s->target->v_cache[l], 256, t->target->v_cache[l], cap, n, nkv, hd, es, 0);
            if (dk)
                bad += !same_heads(s->rows.k_cache, 256, t->rows.k_cache, cap, rows, nkv, hd, es, 1) +
                       !same_heads(s->rows.v_cache, 256, t->rows.v_cache, cap, rows, nkv, hd, es, 0);
            CHECKF(bad == 0, "K %d context %d: %d caches differ after the restore", K, cap, bad);
            memcpy(b, a, 30 * sizeof *b);
            run_to(t, b, 30, 60);
            CHECKF(memcmp(a, b, 60 * sizeof *a) == 0, "K %d: restored into a context of %d, the session diverges", K, cap);
            nx_spec_free(t);
        }
        if (!K) {   /* the other layout's rows would be read as garbage: refused, and the session left as it was */
            nx_spec *o = session_ctx(other, NULL, 0, 256);
            CHECKF(nx_spec_restore(o, blob, len, err, sizeof err) == NX_EINVAL && strstr(err, "another model"),
                   "layout %d: restored into the other layout (%s)", (int)layout, err);
            int32_t first;
            CHECK(nx_spec_prefill(o, prompt, 6, &first, err, sizeof err) == NX_OK);
            nx_spec_free(o);
        }
        nx_free(blob);
        nx_spec_free(s);
    }
    nx_drafter_free(d);
    nx_model_free(other);
    nx_model_free(m);
}

/* The checkpoint files the fuzz harness starts from (tests/data/fuzz/
 * checkpoint, tests/fuzz/README.md) are this version's: the seeds load, and
 * the reproducers reach the check they were made for (deferred tokens
 * outside the vocabulary), not the version or identity checks -- else they
 * no longer cover what they are kept for. */
static void the_fuzz_corpus_checkpoints_are_current(void) {
    nx_model *m = nx_test_model(NX_TEST_DATA "/golden/torchref-mini-a/hf", 1);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    static const char *const files[] = {"seed-plain-session", "seed-drafting-session", "seed-deferred-entries",
                                        "ckpt-deferred-token-1024", "ckpt-deferred-token-garbage"};
    for (int i = 0; d && i < 5; i++) {
        char path[1200], err[512];
        snprintf(path, sizeof path, "%s/fuzz/checkpoint/%s.bin", NX_TEST_DATA, files[i]);
        nx_spec *s = session_ctx(m, i ? d : NULL, 0, 64);
        const nx_status st = s ? nx_spec_load(s, path, err, sizeof err) : NX_ENOMEM;
        if (i < 3) CHECKF(st == NX_OK, "%s: %s", files[i], err);
        else CHECKF(st == NX_EFORMAT && strstr(err, "contents do not fit"), "%s: %d %s", files[i], st, err);
        nx_spec_free(s);
    }
    nx_drafter_free(d);
    nx_model_free(m);
}

/* A checkpoint restores into a context just long enough for its sequence
 * (its pending token at the last position): one token more comes (the
 * drafts shortened to none), then the context is full; one position less
 * is refused. */
static void a_checkpoint_fits_a_context_as_long_as_its_sequence(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) goto done;
    char err[512], path[1200];
    int32_t out[64];
    int got;
    snprintf(path, sizeof path, "%s/fit.ckpt", nx_test_tmpdir("ckpt-fit"));
    nx_spec *s = session(m, d, 2);
    CHECK(nx_spec_prefill(s, prompt, 6, &out[0], err, sizeof err) == NX_OK);
    run_to(s, out, 1, 10);
    const int len = nx_spec_length(s);
    CHECKF(nx_spec_save(s, path, err, sizeof err) == NX_OK, "%s", err);
    nx_spec_free(s);
    s = session_ctx(m, d, 2, len - 1);
    CHECKF(nx_spec_load(s, path, err, sizeof err) == NX_ERANGE && strstr(err, "too small"), "%s", err);
    nx_spec_free(s);
    s = session_ctx(m, d, 2, len);
    CHECKF(nx_spec_load(s, path, err, sizeof err) == NX_OK, "%s", err);
    CHECKF(nx_spec_step(s, 4, out, &got, err, sizeof err) == NX_OK && got == 1, "%s", err);
    CHECK(nx_spec_length(s) == len + 1);
    CHECK(nx_spec_step(s, 4, out, &got, err, sizeof err) == NX_ERANGE);
    nx_spec_free(s);
done:
    nx_drafter_free(d);
    nx_model_free(m);
}

static void checkpoints_move_between_contexts(void) {
    checkpoints_move_between_contexts_one(NX_KV_F32);
    checkpoints_move_between_contexts_one(NX_KV_F16);
}

static const nx_test tests[] = {
    {"checkpoints_move_between_contexts",
     "2 KV heads: a snapshot of a 256-position session restores into 120 and 300 and continues exactly (K 0, 3), "
     "f32 and f16 caches; the other layout refuses it",
     checkpoints_move_between_contexts},
    {"restored_session_continues_exactly", "save after 20 tokens, restore, add a turn, go on: equals the uninterrupted run; "
     "rejection sampling with sampled drafts too, through a screen, from a 4-bit head copy, with presence and "
     "frequency penalties",
     restored_session_continues_exactly},
    {"a_checkpoint_fits_a_context_as_long_as_its_sequence",
     "restored into a context of its length: one more token, then full; one position less refused",
     a_checkpoint_fits_a_context_as_long_as_its_sequence},
    {"the_fuzz_corpus_checkpoints_are_current",
     "tests/data/fuzz/checkpoint: the seeds load; the reproducers are refused for their deferred tokens",
     the_fuzz_corpus_checkpoints_are_current},
    {"forged_checkpoints_with_valid_checksums_are_refused",
     "a file edited and its checksum recomputed: deferred tokens outside the vocabulary, entries without a head",
     forged_checkpoints_with_valid_checksums_are_refused},
    {"foreign_and_damaged_checkpoints_are_refused",
     "another model or drafter, damaged or truncated files, a flipped header bit, used sessions: refused",
     foreign_and_damaged_checkpoints_are_refused},
    {"snapshots_after_a_rejection_continue_exactly",
     "K 3: a snapshot right after each of three rounds that rejected a draft restores into a session that goes on "
     "20 tokens as an uninterrupted one; so does the session snapshotted",
     snapshots_after_a_rejection_continue_exactly},
    {"absorbed_pieces_and_memory_snapshots_continue_exactly",
     "prompt absorbed in pieces, snapshot in memory, restored, extended: equals one prefill; damaged blobs, a restore into a used session and more tokens than the context refused",
     absorbed_pieces_and_memory_snapshots_continue_exactly},
};

NX_TEST_MAIN(tests)
