/* test_engine.c — the serving engine: rows in company give what they give
 * alone, cancellation frees a row without disturbing the others, the prefix
 * cache resumes prompts exactly (RAM and disk tiers, damaged files are
 * misses), and bad submissions are refused cleanly. */
#include <dirent.h>
#include <unistd.h>

#include "test.h"

/* 10 ms steps to wait for the engine thread to catch up with a request the
 * test let go: up to 30 s, since under the sanitizers and with the rest of
 * the suite on the other core one of its rounds can take seconds; the loops
 * end as soon as the condition holds. */
#define WAIT_STEPS 3000

#include "nextn.h"

/* the bundled model: trained, so its output depends on the whole context */
#define COPY NX_MODELS_DIR "/default"

static nx_draft_policy policy = NX_DRAFTS_ADAPTIVE; /* for the engines made next */
static int engine_ctx = 256;                        /* their max_ctx */

static nx_engine *engine(nx_model *m, nx_drafter *d, int parallel, size_t cache_ram, const char *cache_dir, int chunk) {
    nx_engine_opts o = {0};
    o.draft_policy = policy;
    o.parallel = parallel;
    o.max_ctx = engine_ctx;
    o.max_queue = 16;
    o.prefill_chunk = chunk;
    o.draft = 2;
    o.cache_ram_bytes = cache_ram;
    o.cache_dir = cache_dir;
    char err[512];
    nx_engine *e = NULL;
    CHECKF(nx_engine_new(m, d, &o, &e, err, sizeof err) == NX_OK, "%s", err);
    return e;
}

static nx_request *submit(nx_engine *e, const int32_t *prompt, int n, int cache_at, int max_tokens, float temp, uint64_t seed) {
    nx_request_opts o = {0};
    o.prompt = prompt;
    o.n_prompt = n;
    o.cache_at[0] = cache_at;
    o.max_tokens = max_tokens;
    o.sampling = nx_sampling_default();
    o.sampling.temperature = temp;
    o.sampling.seed = seed;
    o.accept = temp > 0 ? NX_ACCEPT_MATCH : NX_ACCEPT_GREEDY;
    char err[512];
    nx_request *r = NULL;
    CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_OK, "%s", err);
    return r;
}

/* Reads a request to its end; returns the token count, *fin the reason. */
static int drain(nx_request *r, int32_t *out, int cap, nx_finish *fin) {
    int n = 0;
    *fin = NX_FINISH_NONE;
    while (r && *fin == NX_FINISH_NONE) n += nx_request_read(r, out + n, cap - n, 1000, fin);
    return n;
}

/* The engine's figures once no row is active or prefilling and `finished`
 * requests have ended, `cancelled` of them cancelled (-1: any count), or
 * after WAIT_STEPS polls. The engine counts a row's end after the round
 * that ended it, which can come after the row's reader has drained it. */
static nx_engine_stats stats_when_idle(nx_engine *e, int64_t finished, int64_t cancelled) {
    nx_engine_stats st;
    for (int i = 0; i < WAIT_STEPS; i++) {
        nx_engine_get_stats(e, &st);
        if (st.active == 0 && st.prefilling == 0 && (finished < 0 || st.finished == finished) &&
            (cancelled < 0 || st.cancelled == cancelled))
            break;
        usleep(10000);
    }
    return st;
}
/* The output the same request gives through a plain speculative session. */
static int reference(nx_model *m, nx_drafter *d, const int32_t *prompt, int n, int max_tokens, float temp, uint64_t seed,
                     int32_t *out) {
    nx_spec_opts o = {.draft = 2, .accept = temp > 0 ? NX_ACCEPT_MATCH : NX_ACCEPT_GREEDY, .sampling = nx_sampling_default()};
    o.sampling.temperature = temp;
    o.sampling.seed = seed;
    return nx_test_generate(m, d, &o, prompt, n, max_tokens, out, NULL);
}

static void prompt_of(int32_t *p, int n, unsigned seed) { nx_test_tokens(p, n, 200, seed); }

/* Under both draft policies (adaptive rounds run with or without drafts). */
static void rows_in_company_with(nx_draft_policy pol) {
    policy = pol;
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    enum { R = 6, GEN = 24 };
    int32_t prompts[R][40], out[R][64], ref[64];
    int lens[R];
    nx_engine *e = engine(m, d, 4, 0, NULL, 7); /* 4 rows for 6 requests: two wait in the queue */
    nx_request *rq[R];
    for (int i = 0; i < R; i++) {
        lens[i] = 5 + 6 * i;
        prompt_of(prompts[i], lens[i], 100 + i);
        rq[i] = submit(e, prompts[i], lens[i], 0, GEN, i % 2 ? 0.8f : 0.0f, 7 + i);
    }
    for (int i = 0; i < R; i++) {
        nx_finish fin;
        int n = drain(rq[i], out[i], 64, &fin);
        int nr = reference(m, d, prompts[i], lens[i], GEN, i % 2 ? 0.8f : 0.0f, 7 + i, ref);
        CHECKF(fin == NX_FINISH_LENGTH || fin == NX_FINISH_STOP, "request %d finished with %d", i, fin);
        CHECKF(n == (fin == NX_FINISH_STOP ? nr - 1 : nr), "request %d: %d tokens, alone %d", i, n, nr);
        CHECKF(memcmp(out[i], ref, (size_t)n * sizeof *ref) == 0, "request %d differs from the same request alone", i);
        nx_request_info info;
        nx_request_get_info(rq[i], &info);
        CHECK(info.prompt_tokens == lens[i] && info.completion_tokens == n && info.ttft_s > 0 && info.total_s >= info.ttft_s);
        nx_request_free(rq[i]);
    }
    nx_engine_stats st = stats_when_idle(e, R, -1);
    CHECK(st.requests == R && st.finished == R && st.errors == 0 && st.active == 0 && st.queued == 0);
    CHECK(st.drafted > 0 && st.accepted > 0 && st.accepted <= st.drafted && st.generated_tokens > 0);
    CHECKF(st.row_rounds > st.sched_rounds, "rows never ran together (%lld row rounds in %lld rounds)",
           (long long)st.row_rounds, (long long)st.sched_rounds);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* A request with a logit bias queued behind one without: each equals its
 * request alone; the caller's bias array may go once nx_engine_submit
 * returns (one row, so the biased request's session starts after that). */
static void a_logit_bias_reaches_its_request_only(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    enum { GEN = 24 };
    int32_t prompt[12], plain[64], biased[64], ref[64];
    prompt_of(prompt, 12, 5);
    int nr = reference(m, d, prompt, 12, GEN, 0.0f, 1, ref);
    nx_engine *e = engine(m, d, 1, 0, NULL, 64);
    nx_request_opts o = {0};
    o.prompt = prompt;
    o.n_prompt = 12;
    o.max_tokens = GEN;
    o.sampling = nx_sampling_default();
    o.accept = NX_ACCEPT_GREEDY;
    nx_logit_bias *ban = malloc(2 * sizeof *ban);
    ban[0] = (nx_logit_bias){ref[0], -100.0f};
    ban[1] = (nx_logit_bias){ref[1], -100.0f};
    o.sampling.logit_bias = ban;
    o.sampling.n_logit_bias = 2;
    char err[512];
    nx_request *rb = NULL, *rp = submit(e, prompt, 12, 0, GEN, 0.0f, 1);
    CHECKF(nx_engine_submit(e, &o, &rb, err, sizeof err) == NX_OK, "%s", err);
    const nx_logit_bias keep[2] = {ban[0], ban[1]};
    memset(ban, 0, 2 * sizeof *ban);   /* gone: the engine holds its own copy */
    free(ban);
    nx_spec_opts so = {.draft = 2, .accept = NX_ACCEPT_GREEDY, .sampling = o.sampling};
    so.sampling.logit_bias = keep;
    int32_t want[64];
    int nw = nx_test_generate(m, d, &so, prompt, 12, GEN, want, NULL);
    nx_finish fin;
    int np = drain(rp, plain, 64, &fin), nb = drain(rb, biased, 64, &fin);
    CHECK(np == nr && memcmp(plain, ref, (size_t)np * sizeof *ref) == 0);
    CHECKF(nb > 0 && (nb == nw || nb == nw - 1) && memcmp(biased, want, (size_t)nb * sizeof *want) == 0,
           "the biased row differs from the same request alone (%d / %d tokens)", nb, nw);
    CHECK(biased[0] != ref[0]);
    for (int i = 0; i < nb; i++) CHECKF(biased[i] != ref[0] && biased[i] != ref[1], "a banned token at %d", i);
    nx_request_free(rp);
    nx_request_free(rb);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

static void rows_in_company_equal_rows_alone(void) {
    rows_in_company_with(NX_DRAFTS_ALWAYS);
    rows_in_company_with(NX_DRAFTS_ADAPTIVE);
    policy = NX_DRAFTS_ADAPTIVE;
}

static void cancelling_frees_the_row_and_others_go_on(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    int32_t p1[12], p2[9], out[256], ref[64];
    prompt_of(p1, 12, 5);
    prompt_of(p2, 9, 6);
    nx_engine *e = engine(m, d, 2, 0, NULL, 64);
    nx_request *a = submit(e, p1, 12, 0, 0, 0, 0), *b = submit(e, p2, 9, 0, 20, 0, 0);
    nx_finish fin;
    int n = 0;
    while (n < 3) n += nx_request_read(a, out + n, 256 - n, 1000, &fin);
    nx_request_cancel(a);
    n += drain(a, out + n, 256 - n, &fin);
    CHECKF(fin == NX_FINISH_CANCELLED, "finish %d", fin);
    int nb = drain(b, out, 64, &fin), nr = reference(m, d, p2, 9, 20, 0, 0, ref);
    CHECK(nb == nr && memcmp(out, ref, (size_t)nb * sizeof *ref) == 0);
    nx_engine_stats st = stats_when_idle(e, -1, 1);
    CHECKF(st.cancelled == 1 && st.active == 0, "cancelled %lld, active %d", (long long)st.cancelled, st.active);
    /* a request freed by its caller mid-stream is cancelled too */
    nx_request *c = submit(e, p1, 12, 0, 0, 0, 0);
    nx_request_read(c, out, 4, 1000, &fin);
    nx_request_free(c);
    nx_request_free(a);
    nx_request_free(b);
    st = stats_when_idle(e, -1, 2);
    CHECKF(st.cancelled == 2 && st.active == 0, "cancelled %lld, active %d", (long long)st.cancelled, st.active);
    /* requests left running when the engine goes end cancelled and stay readable */
    nx_request *left = submit(e, p1, 12, 0, 0, 0, 0);
    nx_engine_free(e);
    drain(left, out, 256, &fin);
    CHECK(fin == NX_FINISH_CANCELLED);
    nx_request_free(left);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* Bans the model's eos ids (at most 8, into ban); returns how many. */
static int eos_ban(nx_model *m, nx_logit_bias ban[8]) {
    const nx_model_info *info = nx_model_get_info(m);
    int nb = 0;
    for (int i = 0; i < info->n_eos && nb < 8; i++) ban[nb++] = (nx_logit_bias){info->eos_ids[i], -100.0f};
    return nb;
}

/* The context bounds prompt + output (nx_engine_opts.max_ctx): a prompt of
 * 255 tokens in a context of 256 gets one token, one of 240 with drafts
 * every round exactly 16 (a round never emits past the end), both ending
 * for length; 256 tokens are refused. The eos ids are banned so the output
 * runs to the limit. */
static void the_context_bounds_prompt_and_output(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    policy = NX_DRAFTS_ALWAYS;
    nx_engine *e = engine(m, d, 1, 0, NULL, 64);
    policy = NX_DRAFTS_ADAPTIVE;
    nx_logit_bias ban[8];
    const int nb = eos_ban(m, ban);
    int32_t p[256], out[64];
    prompt_of(p, 256, 3);
    char err[512];
    static const int lens[2] = {255, 240}, want[2] = {1, 16};
    for (int i = 0; e && i < 2; i++) {
        nx_request_opts o = {0};
        o.prompt = p, o.n_prompt = lens[i];
        o.sampling = nx_sampling_default();
        o.sampling.logit_bias = ban, o.sampling.n_logit_bias = nb;
        nx_request *r = NULL;
        CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_OK, "%s", err);
        nx_finish fin;
        const int n = drain(r, out, 64, &fin);
        CHECKF(n == want[i] && fin == NX_FINISH_LENGTH, "a prompt of %d: %d tokens (want %d), finish %d", lens[i], n,
               want[i], fin);
        nx_request_free(r);
    }
    nx_request_opts o = {0};
    o.prompt = p, o.n_prompt = 256;
    o.sampling = nx_sampling_default();
    nx_request *r = NULL;
    CHECKF(e && nx_engine_submit(e, &o, &r, err, sizeof err) == NX_ERANGE && !r && strstr(err, "256"), "%s", err);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* Near the end of the context a round whose drafts are all accepted still
 * ends at it: an exact copy head, drafts every round, prompts of each length
 * from 40 to 62 in a context of 64, run until the context is full
 * (max_tokens 0): prompt + output is 64 every time, never more. */
static void accepted_drafts_stop_at_the_end_of_the_context(void) {
    nx_model *m = nx_test_model(NX_TEST_DATA "/golden/torchref-mini-copy-s0/hf", 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    policy = NX_DRAFTS_ALWAYS, engine_ctx = 64;
    nx_engine *e = engine(m, d, 1, 0, NULL, 64);
    policy = NX_DRAFTS_ADAPTIVE, engine_ctx = 256;
    nx_logit_bias ban[8];
    nx_request_opts o = {.sampling = nx_sampling_default()};
    o.sampling.logit_bias = ban, o.sampling.n_logit_bias = eos_ban(m, ban);
    int32_t p[64], out[64];
    prompt_of(p, 64, 11);
    long long accepted = 0;
    for (int len = 40; e && len <= 62; len++) {
        o.prompt = p, o.n_prompt = len;
        nx_request *r = NULL;
        char err[512];
        CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_OK, "%s", err);
        nx_finish fin;
        const int n = drain(r, out, 64, &fin);
        nx_request_info info;
        nx_request_get_info(r, &info);
        accepted += info.accepted;
        CHECKF(len + n == 64 && fin == NX_FINISH_LENGTH, "a prompt of %d: %d tokens (want %d), finish %d", len, n, 64 - len, fin);
        nx_request_free(r);
    }
    CHECKF(accepted > 100, "only %lld drafts accepted", accepted);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

static void bad_submissions_are_refused(void) {
    nx_model *m = nx_test_model(COPY, 2);
    if (!m) return;
    nx_engine *e = engine(m, NULL, 1, 0, NULL, 64);
    int32_t p[300];
    prompt_of(p, 300, 1);
    nx_request_opts o = {0};
    o.sampling = nx_sampling_default();
    char err[512];
    nx_request *r = NULL;
    o.prompt = p, o.n_prompt = 0;
    CHECK(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && !r);
    o.n_prompt = 300;
    CHECK(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_ERANGE && strstr(err, "300"));
    int32_t bad[2] = {1, 1 << 30};
    o.prompt = bad, o.n_prompt = 2;
    CHECK(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && strstr(err, "vocabulary"));
    nx_logit_bias far = {1 << 30, -1.0f};
    o.prompt = p, o.n_prompt = 8;
    o.sampling.logit_bias = &far;
    o.sampling.n_logit_bias = 1;
    CHECK(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && !r && strstr(err, "request: logit_bias: token"));
    o.sampling = nx_sampling_default();
    /* the session's options too, at submit (a spare session is not spent on them) */
    o.accept = (nx_accept_mode)99;
    CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && !r && strstr(err, "request: acceptance mode 99"),
           "%s", err);
    o.accept = NX_ACCEPT_GREEDY, o.draft_pick = (nx_draft_pick)9;
    CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && !r && strstr(err, "request: draft pick 9"), "%s", err);
    o.draft_pick = NX_DRAFT_PICK_ARGMAX;
    /* a request holds at most 16 stop ids (it copies them) */
    int32_t stops[17];
    for (int i = 0; i < 17; i++) stops[i] = 100 + i;
    o.stop_ids = stops, o.n_stop = 17;
    CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && !r && strstr(err, "request: 17 stop ids (at most 16)"),
           "%s", err);
    o.n_stop = -1;
    CHECK(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && !r && strstr(err, "stop ids"));
    o.stop_ids = NULL, o.n_stop = 0;
    /* and an engine at most 64 rows */
    nx_engine *wide = (nx_engine *)&err;
    nx_engine_opts eo = {.parallel = 65};
    CHECKF(nx_engine_new(m, NULL, &eo, &wide, err, sizeof err) == NX_EINVAL && !wide && strstr(err, "parallel 65 (at most 64)"),
           "%s", err);
    /* a request that ends in its prefill round leaves no row counted as
     * prefilling once the engine is idle */
    nx_request *one = submit(e, p, 8, 0, 1, 0, 0);
    int32_t out[4];
    nx_finish fin;
    CHECK(drain(one, out, 4, &fin) == 1 && fin == NX_FINISH_LENGTH);
    nx_request_free(one);
    const nx_engine_stats idle = stats_when_idle(e, 1, -1);
    CHECKF(idle.finished == 1 && idle.active == 0 && idle.prefilling == 0, "finished %lld, active %d, prefilling %d",
           (long long)idle.finished, idle.active, idle.prefilling);
    /* the queue holds 16: the 18th waiting request is refused (one row runs) */
    o.prompt = p, o.n_prompt = 8;
    nx_request *many[20] = {0};
    int busy = 0;
    for (int i = 0; i < 20; i++)
        if (nx_engine_submit(e, &o, &many[i], err, sizeof err) == NX_EBUSY) busy++;
    CHECKF(busy >= 2, "%d refused", busy);
    for (int i = 0; i < 20; i++) nx_request_free(many[i]);
    nx_engine_stats st;
    nx_engine_get_stats(e, &st);
    CHECK(st.rejected == busy);
    nx_engine_free(e);
    nx_model_free(m);
}

/* files in dir ending in .nxc */
static int cache_files(const char *dir, char *first, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 4 && strcmp(de->d_name + l - 4, ".nxc") == 0) {
            if (n++ == 0 && first) snprintf(first, cap, "%s/%s", dir, de->d_name);
        }
    }
    if (d) closedir(d);
    return n;
}

/* Token ids of text in the bundled model's vocabulary; returns the count. */
static int text_ids(const char *text, int32_t *out, int cap) {
    char err[512];
    nx_tokenizer *t = NULL;
    int32_t *ids = NULL;
    int n = 0;
    CHECKF(nx_tokenizer_load(COPY, &t, err, sizeof err) == NX_OK, "%s", err);
    if (t) CHECK(nx_tokenize(t, text, strlen(text), NX_SPECIAL_PARSE, &ids, &n, err, sizeof err) == NX_OK && n <= cap);
    if (n > cap) n = cap;
    if (n) memcpy(out, ids, (size_t)n * sizeof *ids);
    nx_free(ids);
    nx_tokenizer_free(t);
    return n;
}

static void prefix_cache_resumes_exactly(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    /* a conversation: turn 1 checkpoints at cache_at (its text before the
     * generation prompt); turn 2 = that text + a little more */
    int32_t t1[64], t2[96], out[64], ref[64];
    int ca = text_ids("And God said unto Moses, I AM THAT I AM: and he said, Thus shalt thou say unto the children", t1, 64);
    int n1 = ca + text_ids(" of Israel", t1 + ca, 64 - ca);
    memcpy(t2, t1, (size_t)ca * sizeof *t1);
    int n2 = ca + text_ids(" of Egypt, and", t2 + ca, 96 - ca);
    CHECK(ca > 10 && n1 > ca && n2 > ca);
    nx_finish fin;
    for (int tier = 0; tier < 2; tier++) {
        const char *dir = tier ? nx_test_tmpdir("pcache") : NULL;
        nx_engine *e = engine(m, d, 2, tier ? 0 : 64u << 20, dir, 8);
        nx_request *r = submit(e, t1, n1, ca, 10, 0, 0);
        drain(r, out, 64, &fin);
        nx_request_free(r);
        if (tier) { /* the disk tier outlives the engine */
            nx_engine_free(e);
            CHECK(cache_files(dir, NULL, 0) == 2); /* at cache_at and at the end */
            e = engine(m, d, 2, 0, dir, 8);
        }
        /* sampled at temperature 1: the output follows every logit, so a
         * resumed state that is off shows */
        r = submit(e, t2, n2, 0, 24, 1.0f, 3);
        int n = drain(r, out, 64, &fin), nr = reference(m, d, t2, n2, 24, 1.0f, 3, ref);
        CHECKF(n == nr && memcmp(out, ref, (size_t)n * sizeof *ref) == 0, "tier %d: the resumed prompt's output differs", tier);
        nx_request_info info;
        nx_request_get_info(r, &info);
        CHECKF(info.cached_tokens == ca, "tier %d: %d cached tokens", tier, info.cached_tokens);
        nx_request_free(r);
        nx_engine_stats st;
        nx_engine_get_stats(e, &st);
        CHECK(st.cache_hits == 1 && st.cache_hit_tokens == ca && st.cache_entries >= 2);
        CHECK(tier ? st.cache_disk_bytes > 0 : st.cache_ram_bytes > 0);
        nx_engine_free(e);
    }
    nx_drafter_free(d);
    nx_model_free(m);
}

/* A checkpoint at cache_at = the whole prompt, and one at the end of a row
 * that a stop id ended, the stop id included (the session's pending token);
 * a later prompt that continues that sequence resumes from all of it. */
static void a_stopped_row_is_checkpointed_whole(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    enum { NP = 20 };
    int32_t p1[NP], ref[16], out[64], p2[NP + 24];
    prompt_of(p1, NP, 31);
    CHECK(reference(m, d, p1, NP, 8, 0, 0, ref) == 8);
    int j = 0;   /* the stop id: greedy's 4th token, first where it first comes */
    while (ref[j] != ref[3]) j++;
    const char *dir = nx_test_tmpdir("pcache-stop");
    nx_engine *e = engine(m, d, 1, 0, dir, 8);
    nx_request_opts o = {.prompt = p1, .n_prompt = NP, .max_tokens = 8, .sampling = nx_sampling_default(),
                         .accept = NX_ACCEPT_GREEDY, .stop_ids = &ref[3], .n_stop = 1};
    o.cache_at[0] = NP;
    char err[512];
    nx_request *r = NULL;
    CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_OK, "%s", err);
    nx_finish fin;
    int n = drain(r, out, 64, &fin);
    CHECKF(fin == NX_FINISH_STOP && n == j && memcmp(out, ref, (size_t)j * sizeof *out) == 0, "finish %d, %d tokens (want %d)",
           (int)fin, n, j);
    nx_request_free(r);
    nx_engine_free(e);   /* the row's end is checkpointed after its finish is read: joined here */
    CHECKF(cache_files(dir, NULL, 0) == 2, "%d cache files (want the prompt's and the whole sequence's)",
           cache_files(dir, NULL, 0));
    e = engine(m, d, 1, 0, dir, 8);
    /* prompt + output + stop id + three more */
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + NP, ref, (size_t)(j + 1) * sizeof *ref);
    prompt_of(p2 + NP + j + 1, 3, 77);
    const int n2 = NP + j + 4;
    r = submit(e, p2, n2, 0, 6, 0, 0);
    int got = drain(r, out, 64, &fin), want = reference(m, d, p2, n2, 6, 0, 0, ref);
    nx_request_info info;
    nx_request_get_info(r, &info);
    CHECKF(info.cached_tokens == NP + j + 1 && got == want && memcmp(out, ref, (size_t)got * sizeof *out) == 0,
           "%d cached tokens (want %d), output %s", info.cached_tokens, NP + j + 1,
           got == want && memcmp(out, ref, (size_t)got * sizeof *out) == 0 ? "as a fresh session's" : "differs");
    nx_request_free(r);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

static void damaged_cache_files_are_misses(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    int32_t t1[20], out[64], ref[64];
    prompt_of(t1, 20, 21);
    const char *dir = nx_test_tmpdir("pcache-bad");
    nx_finish fin;
    nx_engine *e = engine(m, d, 1, 0, dir, 64);
    nx_request *r = submit(e, t1, 20, 15, 4, 0, 0);
    drain(r, out, 64, &fin);
    nx_request_free(r);
    nx_engine_free(e);
    /* damage every file: a flipped byte deep inside the prompt's own entry
     * (the smaller file: the lookup reads it), the other one truncated (the
     * directory scan drops it). Chosen by size, not by readdir's order, which
     * follows the names (their hashes change with the model's fingerprint) */
    char path[1400];
    int files = cache_files(dir, path, sizeof path);
    CHECK(files == 2);
    DIR *dd = opendir(dir);
    struct dirent *de;
    char names[2][1400];
    size_t sizes[2] = {0, 0};
    int k = 0;
    while (dd && k < 2 && (de = readdir(dd))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".nxc") != 0) continue;
        snprintf(names[k], sizeof names[k], "%s/%s", dir, de->d_name);
        free(nx_test_read_file(names[k], &sizes[k]));
        k++;
    }
    if (dd) closedir(dd);
    for (int i = 0; k == 2 && i < 2; i++) {
        size_t n;
        unsigned char *b = nx_test_read_file(names[i], &n);
        if (!b) continue;
        if (sizes[i] < sizes[1 - i]) b[n - 100] ^= 0x40, nx_test_write_file(names[i], b, n);
        else nx_test_write_file(names[i], b, n / 2);
        free(b);
    }
    e = engine(m, d, 1, 0, dir, 64);
    r = submit(e, t1, 20, 0, 8, 0, 0);
    int n = drain(r, out, 64, &fin), nr = reference(m, d, t1, 20, 8, 0, 0, ref);
    CHECK(n == nr && memcmp(out, ref, (size_t)n * sizeof *ref) == 0);
    nx_request_info info;
    nx_request_get_info(r, &info);
    CHECK(info.cached_tokens == 0);
    nx_request_free(r);
    nx_engine_stats st;
    nx_engine_get_stats(e, &st);
    CHECKF(st.cache_bad_files == 2 && st.cache_hits == 0, "%lld bad files, %lld hits", (long long)st.cache_bad_files,
           (long long)st.cache_hits);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}


/* A long prompt is read in pieces between decode rounds: a stream that is
 * already running keeps producing tokens while it is read. */
static void a_long_prefill_does_not_stall_running_streams(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    int32_t shortp[6], longp[200], out[256];
    prompt_of(shortp, 6, 31);
    prompt_of(longp, 200, 32);
    nx_engine *e = engine(m, d, 2, 0, NULL, 8); /* 25 pieces of 8 tokens */
    nx_request *a = submit(e, shortp, 6, 0, 200, 0, 0);
    nx_finish fin;
    int na = 0;
    while (na < 1) na += nx_request_read(a, out + na, 256 - na, 1000, &fin);
    nx_request *b = submit(e, longp, 200, 0, 4, 0, 0);
    int32_t first;
    int nb = 0;
    while (nb == 0 && fin == NX_FINISH_NONE) nb = nx_request_read(b, &first, 1, 1000, &fin);
    int a_then = na + nx_request_read(a, out + na, 256 - na, 0, &fin);
    /* one decode round of a per prefill piece of b: at least 24 rounds */
    CHECKF(a_then - na >= 24, "the running stream made %d tokens while 200 prompt tokens were read", a_then - na);
    nx_request_free(a);
    nx_request_free(b);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}


/* Requests that wait in the queue and are cancelled leave it at once: they
 * neither hold queue places nor ever take a row. */
static void cancelled_waiting_requests_leave_the_queue(void) {
    nx_model *m = nx_test_model(COPY, 2);
    if (!m) return;
    int32_t p[8], out[8];
    prompt_of(p, 8, 3);
    nx_engine *e = engine(m, NULL, 1, 0, NULL, 64); /* one row, 16 queue places */
    nx_request *busy = submit(e, p, 8, 0, 0, 0, 0);  /* runs to the end of the context */
    nx_finish fin;
    while (nx_request_read(busy, out, 8, 1000, &fin) == 0 && fin == NX_FINISH_NONE) {}
    nx_request *waiting[16];
    for (int i = 0; i < 16; i++) waiting[i] = submit(e, p, 8, 0, 4, 0, 0);
    nx_engine_stats st;
    nx_engine_get_stats(e, &st);
    CHECK(st.queued == 16);
    /* 16 places exactly: one more is refused busy, naming the limit */
    nx_request_opts o = {.prompt = p, .n_prompt = 8, .max_tokens = 4, .sampling = nx_sampling_default()};
    nx_request *over = NULL;
    char err[512] = "";
    CHECKF(nx_engine_submit(e, &o, &over, err, sizeof err) == NX_EBUSY && !over && strstr(err, "(16 waiting)"), "'%s'", err);
    nx_request_free(over);
    for (int i = 0; i < 16; i++) nx_request_cancel(waiting[i]);
    for (int i = 0; i < 16; i++) {
        nx_finish f;
        drain(waiting[i], out, 8, &f);
        nx_request_info info;
        nx_request_get_info(waiting[i], &info);
        /* never admitted: the time in the queue is only set when a row takes it */
        CHECKF(f == NX_FINISH_CANCELLED && info.queue_s == 0, "request %d: finish %d, %.3f s in the queue", i, f, info.queue_s);
        nx_request_free(waiting[i]);
    }
    nx_engine_get_stats(e, &st);
    CHECKF(st.queued == 0 && st.cancelled == 16 && st.rejected == 1, "%d still queued, %lld cancelled, %lld rejected", st.queued,
           (long long)st.cancelled, (long long)st.rejected);
    nx_request_read(busy, out, 8, 0, &fin);
    CHECK(fin == NX_FINISH_NONE); /* all of it happened while the row was busy */
    nx_request *again = submit(e, p, 8, 0, 4, 0, 0); /* places are free again */
    CHECK(again != NULL);
    nx_request_free(again);
    nx_request_free(busy);
    nx_engine_free(e);
    nx_model_free(m);
}


/* A request may name two boundaries (the end of a shared system prompt and
 * the end of its conversation): both are checkpointed, and another
 * conversation that shares only the first resumes from it, exactly. */
static void a_shared_system_prompt_is_reused(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    int32_t a[96], b[96], out[64], ref[64];
    int sys = text_ids("In the beginning God created the heaven and the earth. And the earth was without form", a, 96);
    memcpy(b, a, (size_t)sys * sizeof *a);
    int na = sys + text_ids(" and void; and darkness was upon the face of the deep.", a + sys, 96 - sys);
    int nb = sys + text_ids(" and the Spirit of God moved upon the waters.", b + sys, 96 - sys);
    nx_engine *e = engine(m, d, 2, 64u << 20, NULL, 8);
    nx_request_opts o = {0};
    o.prompt = a, o.n_prompt = na, o.cache_at[0] = na - 3, o.cache_at[1] = sys; /* any order */
    o.max_tokens = 4, o.sampling = nx_sampling_default(), o.accept = NX_ACCEPT_GREEDY;
    char err[512];
    nx_request *r = NULL;
    CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_OK, "%s", err);
    nx_finish fin;
    drain(r, out, 64, &fin);
    nx_request_free(r);
    nx_engine_stats st;
    for (int i = 0; i < WAIT_STEPS; i++) { /* the end checkpoint is written just after the request ends */
        nx_engine_get_stats(e, &st);
        if (st.cache_entries == 3) break;
        usleep(10000);
    }
    CHECKF(st.cache_entries == 3, "%lld entries (want: both boundaries and the end)", (long long)st.cache_entries);
    r = submit(e, b, nb, 0, 16, 1.0f, 5);
    int n = drain(r, out, 64, &fin), nr = reference(m, d, b, nb, 16, 1.0f, 5, ref);
    CHECK(n == nr && memcmp(out, ref, (size_t)n * sizeof *ref) == 0);
    nx_request_info info;
    nx_request_get_info(r, &info);
    CHECKF(info.cached_tokens == sys, "%d cached tokens, the system prompt has %d", info.cached_tokens, sys);
    nx_request_free(r);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* Logprob entries travel with their tokens: two requests with logprobs
 * (greedy, and matched sampling with top 3) in company with one without,
 * read a few tokens at a time, carry the entries a speculative session
 * alone gives the same request (bit for bit, the prefill's first token
 * included); the request without logprobs leaves lp untouched; a
 * top_logprobs over the limit is refused at submit. */
static void logprobs_travel_with_their_tokens(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    enum { R = 3, GEN = 20 };
    int32_t prompts[R][16], out[R][GEN], ref[GEN + 1];
    nx_token_logprob lp[R][GEN], ref_lp[GEN + 1];
    nx_engine *e = engine(m, d, 2, 0, NULL, 5);
    nx_request *rq[R];
    char err[512];
    for (int i = 0; i < R; i++) {
        prompt_of(prompts[i], 16, 40 + i);
        nx_request_opts o = {.prompt = prompts[i], .n_prompt = 16, .max_tokens = GEN, .sampling = nx_sampling_default()};
        o.accept = i == 1 ? NX_ACCEPT_MATCH : NX_ACCEPT_GREEDY;
        o.sampling.temperature = i == 1 ? 0.8f : 0.0f;
        o.sampling.seed = 3;
        o.logprobs = i < 2;
        o.top_logprobs = i == 1 ? 3 : 0;
        rq[i] = NULL;
        CHECKF(nx_engine_submit(e, &o, &rq[i], err, sizeof err) == NX_OK, "%s", err);
    }
    for (int i = 0; i < R; i++) {
        nx_finish fin = NX_FINISH_NONE;
        int n = 0;
        memset(lp[i], 0xA5, sizeof lp[i]);
        while (rq[i] && fin == NX_FINISH_NONE) n += nx_request_read_logprobs(rq[i], out[i] + n, lp[i] + n, 3, 1000, &fin);
        /* alone: a session with the same options, its entries call by call */
        nx_spec_opts so = {.draft = 2, .accept = i == 1 ? NX_ACCEPT_MATCH : NX_ACCEPT_GREEDY,
                           .sampling = nx_sampling_default(), .logprobs = 1, .top_logprobs = i == 1 ? 3 : 0};
        so.sampling.temperature = i == 1 ? 0.8f : 0.0f;
        so.sampling.seed = 3;
        nx_spec *s = NULL;
        int nr = 0, got = 1, nl;
        CHECK(nx_spec_new(m, d, 64, &so, &s, err, sizeof err) == NX_OK);
        nx_status st = s ? nx_spec_prefill(s, prompts[i], 16, ref, err, sizeof err) : NX_EINVAL;
        while (!st) {
            const nx_token_logprob *e1 = nx_spec_logprobs(s, &nl);
            CHECK(nl == got);
            memcpy(ref_lp + nr, e1, (size_t)got * sizeof *e1);
            if ((nr += got) >= GEN) break;
            st = nx_spec_step(s, GEN - nr, ref + nr, &got, err, sizeof err);
        }
        nx_spec_free(s);
        CHECKF(fin == NX_FINISH_LENGTH && n == GEN && nr == GEN, "request %d: %d tokens (finish %d), alone %d", i, n, fin, nr);
        CHECKF(memcmp(out[i], ref, sizeof out[i]) == 0, "request %d: other tokens than alone", i);
        if (i < 2) CHECKF(nx_test_same_logprobs(lp[i], ref_lp, GEN), "request %d: other logprobs than alone", i);
        else
            for (size_t b = 0; b < sizeof lp[i]; b++) CHECKF(((unsigned char *)lp[i])[b] == 0xA5, "byte %zu of lp written", b);
        nx_request_free(rq[i]);
    }
    CHECK(lp[1][0].n_top == 3 && lp[0][0].n_top == 0);
    nx_request_opts o = {.prompt = prompts[0], .n_prompt = 16, .sampling = nx_sampling_default(), .logprobs = 1,
                         .top_logprobs = NX_MAX_TOP_LOGPROBS + 1};
    nx_request *r = NULL;
    CHECK(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_EINVAL && r == NULL && strstr(err, "top_logprobs 21"));
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

/* A scoring request (prompt_logprobs) read in prompt pieces of 7 tokens,
 * after the same prompt left a checkpoint: it does not resume from the
 * cache, and its entries are a session's input logprobs for the whole
 * prompt, bit for bit; its output is the same as without scoring. */
static void prompt_logprobs_score_the_whole_prompt(void) {
    nx_model *m = nx_test_model(COPY, 2);
    nx_drafter *d = m ? nx_test_drafter(m, 0) : NULL;
    if (!d) return;
    enum { NP = 40, GEN = 6 };
    int32_t prompt[NP], out[2][GEN + 1], first;
    nx_token_logprob lp[NP];
    prompt_of(prompt, NP, 99);
    nx_engine *e = engine(m, d, 2, 64u << 20, NULL, 7);
    char err[512];
    for (int i = 0; i < 2; i++) {   /* plain (leaves a checkpoint), then scoring */
        nx_request_opts o = {.prompt = prompt, .n_prompt = NP, .max_tokens = GEN, .sampling = nx_sampling_default(),
                             .accept = NX_ACCEPT_GREEDY, .prompt_logprobs = i, .top_logprobs = 3};
        o.cache_at[0] = NP;
        nx_request *r = NULL;
        CHECKF(nx_engine_submit(e, &o, &r, err, sizeof err) == NX_OK, "%s", err);
        nx_finish fin = NX_FINISH_NONE;
        int got = 0;
        while (r && got == 0 && fin == NX_FINISH_NONE) got = nx_request_read(r, out[i], 1, 1000, &fin);
        /* the prompt's entries are all there with the first output token */
        CHECK(got == 1 && nx_request_read_prompt_logprobs(r, lp, NP) == (i ? NP - 1 : 0));
        CHECK(drain(r, out[i] + 1, GEN, &fin) == GEN - 1 && fin == NX_FINISH_LENGTH);
        nx_request_info info;
        nx_request_get_info(r, &info);
        int n = nx_request_read_prompt_logprobs(r, lp, NP);
        if (i) CHECKF(n == NP - 1 && info.cached_tokens == 0, "%d entries, %d tokens from the cache", n, info.cached_tokens);
        else CHECK(n == 0);
        nx_request_free(r);
    }
    CHECK(memcmp(out[0], out[1], GEN * sizeof **out) == 0);
    nx_spec_opts so = {.sampling = nx_sampling_default(), .accept = NX_ACCEPT_GREEDY, .input_logprobs = 1, .top_logprobs = 3};
    nx_spec *s = NULL;
    int nl = 0;
    CHECK(nx_spec_new(m, NULL, 64, &so, &s, err, sizeof err) == NX_OK);
    const nx_token_logprob *ref = s && nx_spec_prefill(s, prompt, NP, &first, err, sizeof err) == NX_OK
                                      ? nx_spec_input_logprobs(s, &nl) : NULL;
    CHECK(nl == NP - 1 && ref && nx_test_same_logprobs(lp, ref, NP - 1) && lp[0].n_top == 3);
    nx_spec_free(s);
    nx_engine_free(e);
    nx_drafter_free(d);
    nx_model_free(m);
}

static const nx_test tests[] = {
    {"the_context_bounds_prompt_and_output",
     "prompt + output <= max_ctx: 255 of 256 gets 1 token, 240 gets 16 with drafts every round (length); 256 refused",
     the_context_bounds_prompt_and_output},
    {"accepted_drafts_stop_at_the_end_of_the_context",
     "an exact copy head, context 64, prompts of 40..62 run to the end: prompt + output = 64 exactly",
     accepted_drafts_stop_at_the_end_of_the_context},
    {"rows_in_company_equal_rows_alone",
     "6 requests on 4 rows (greedy and matched sampling), drafts always or adaptive: each equals the request alone",
     rows_in_company_equal_rows_alone},
    {"logprobs_travel_with_their_tokens",
     "greedy and matched requests with logprobs beside one without, read 3 tokens at a time: the entries of the request "
     "alone; lp untouched without logprobs; top_logprobs 21 refused",
     logprobs_travel_with_their_tokens},
    {"prompt_logprobs_score_the_whole_prompt",
     "a scoring request read in 7-token pieces after a checkpoint of its prompt: no cache resume, the entries of a "
     "session's prefill, the same output",
     prompt_logprobs_score_the_whole_prompt},
    {"a_logit_bias_reaches_its_request_only",
     "two banned tokens in a queued request: it equals the request alone, the one before it is unchanged",
     a_logit_bias_reaches_its_request_only},
    {"cancelling_frees_the_row_and_others_go_on", "cancel or free mid-stream, shut down with a row running: cancelled, others exact",
     cancelling_frees_the_row_and_others_go_on},
    {"a_long_prefill_does_not_stall_running_streams", "a 200-token prompt read in 8-token pieces: a running stream goes on meanwhile",
     a_long_prefill_does_not_stall_running_streams},
    {"cancelled_waiting_requests_leave_the_queue",
     "16 queued requests (a 17th refused busy) freed while the one row is busy: the queue empties at once",
     cancelled_waiting_requests_leave_the_queue},
    {"bad_submissions_are_refused", "empty or too long prompts, bad ids, 17 stop ids, 65 rows, a full queue: refused with the right status",
     bad_submissions_are_refused},
    {"prefix_cache_resumes_exactly", "turn 2 resumes from turn 1's checkpoint (RAM, and disk after a restart): same output",
     prefix_cache_resumes_exactly},
    {"a_stopped_row_is_checkpointed_whole",
     "cache_at = the whole prompt, and a row ended by a stop id, stop id included: a continuation resumes from all of it",
     a_stopped_row_is_checkpointed_whole},
    {"a_shared_system_prompt_is_reused", "two boundaries checkpointed; a conversation sharing the first resumes from it, exactly",
     a_shared_system_prompt_is_reused},
    {"damaged_cache_files_are_misses", "flipped or truncated cache files: misses, deleted, output still exact",
     damaged_cache_files_are_misses},
};

NX_TEST_MAIN(tests)
