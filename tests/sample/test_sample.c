/* test_sample.c — logit processing, the counter-based RNG and the draw.
 *
 * Hand-made distributions pin each filter; a slow full-sort reference written
 * from the contract in sample.h pins the fast selection paths bit for bit;
 * a chi-square test pins the draw against the probabilities. */
#include "test.h"

#include <stdint.h>

#include "base/alloc.h"
#include "kernels/act.h"
#include "sample/sample.h"

/* ---- helpers ------------------------------------------------------------ */

static nx_sampler *new_sampler(int vocab) {
    nx_sampler *s = NULL;
    char err[256];
    nx_status st = nx_sampler_new(vocab, &s, err, sizeof err);
    CHECKF(st == NX_OK && s, "nx_sampler_new(%d): %s", vocab, err);
    return s;
}

/* The test's own generator (independent of smp_uniform): splitmix64. */
static uint64_t test_rng(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double test_unif(uint64_t *state) { return (double)(test_rng(state) >> 11) * 0x1.0p-53; }

/* Standard normal logits times scale (Box-Muller). */
static void random_logits(float *out, int n, uint64_t seed, float scale) {
    uint64_t st = seed;
    for (int i = 0; i < n; i++) {
        double u1 = test_unif(&st), u2 = test_unif(&st);
        out[i] = scale * (float)(sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2));
    }
}

/* Processes a copy of logits and returns the candidate count; ids/probs point
 * into the sampler. */
static int dist_of(nx_sampler *s, const nx_sampling *p, const float *logits, int n,
                   float *work, const int32_t **ids, const float **probs) {
    memcpy(work, logits, (size_t)n * sizeof *work);
    return smp_distribution(s, p, work, NULL, 0, 0, ids, probs);
}

/* ---- a slow reference, straight from the contract in sample.h ------------ */

static const float *ref_x;

static int ref_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (ref_x[i] != ref_x[j]) return ref_x[i] > ref_x[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

/* Full sort of the vocabulary, then top-k, top-p, min-p, drop zeros,
 * renormalize; without top-k and top-p, the tokens min-p keeps in id order
 * instead. Assumes temperature > 0 and finite logits. Also reports whether
 * the nucleus lies within the first 1024 (the fast path). */
/* probs[0..n) / their sum, the sum as the contract (2h) adds it: the first
 * n & ~7 in 8 lanes by position, the lanes ((0+4) + (1+5)) + ((2+6) + (3+7)),
 * then the rest in order. */
static void ref_normalize(float *probs, int n) {
    double lane[8] = {0}, sum;
    int n8 = n & ~7;
    for (int j = 0; j < n8; j++) lane[j % 8] += probs[j];
    sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (int j = n8; j < n; j++) sum += probs[j];
    for (int j = 0; j < n; j++) probs[j] = (float)(probs[j] / sum);
}

static int ref_distribution(const float *logits, int V, const nx_sampling *p,
                            int32_t *ids, float *probs, float *x, int *within_1024) {
    float xmax = -INFINITY;
    for (int i = 0; i < V; i++) {
        x[i] = logits[i] / p->temperature;
        if (x[i] > xmax) xmax = x[i];
    }
    for (int i = 0; i < V; i++) ids[i] = i;
    float keep_min = p->min_p > 0.0f ? fminf(p->min_p, 1.0f) : 0.0f;
    if (!(p->top_k > 0 && p->top_k < V) && !(p->top_p < 1.0f)) {
        int n = 0;
        for (int i = 0; i < V; i++) {
            float w = kn_exp(x[i] - xmax);
            if (w > 0.0f && w >= keep_min) ids[n] = i, probs[n++] = w;
        }
        if (keep_min > 0.0f) {
            ref_normalize(probs, n);
        } else {   /* temperature alone: the row's sum */
            const double sum = kn_sum_exp_f32_ref(x, V, xmax);
            for (int j = 0; j < n; j++) probs[j] = (float)(probs[j] / sum);
        }
        if (within_1024) *within_1024 = 1;
        return n;
    }
    ref_x = x;
    qsort(ids, (size_t)V, sizeof *ids, ref_cmp);
    int n = V;
    double z = 0.0;
    if (p->top_k > 0 && p->top_k < V) {
        n = p->top_k;
        for (int j = 0; j < n; j++) z += kn_exp(x[ids[j]] - xmax);
    } else {
        z = kn_sum_exp_f32_ref(x, V, xmax);   /* the contract's mass for top-p */
    }
    for (int j = 0; j < n; j++) probs[j] = kn_exp(x[ids[j]] - xmax);
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int j = 0; j < n; j++) {
            cum += probs[j];
            if (cum >= (double)p->top_p * z) { n = j + 1; break; }
        }
    }
    if (within_1024) *within_1024 = n <= 1024;
    int keep = 1;
    while (keep < n && probs[keep] > 0.0f && probs[keep] >= keep_min * probs[0]) keep++;
    n = keep;
    ref_normalize(probs, n);
    return n;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_sampler_new_rejects_a_vocab_that_is_not_positive(void) {
    nx_sampler *s = NULL;
    char err[128] = "";
    CHECK(nx_sampler_new(0, &s, err, sizeof err) == NX_EINVAL);
    CHECK(s == NULL);
    CHECK(strstr(err, "vocab") != NULL);
    CHECK(nx_sampler_new(-5, &s, NULL, 0) == NX_EINVAL);
    nx_sampler_free(NULL);
    s = new_sampler(7);
    CHECK(smp_vocab_size(s) == 7);
    nx_sampler_free(s);
    nx_sampling d = nx_sampling_default();
    CHECK(d.temperature == 0.0f && d.top_k == 0 && d.top_p == 1.0f && d.min_p == 0.0f);
    CHECK(d.repetition_penalty == 1.0f && d.presence_penalty == 0.0f && d.frequency_penalty == 0.0f);
}

static void test_greedy_takes_the_argmax_and_breaks_ties_to_the_lowest_id(void) {
    nx_sampler *s = new_sampler(6);
    nx_sampling p = nx_sampling_default();
    float a[6] = {1, 3, 3, 2, -1, 3};
    CHECK(nx_sample(s, &p, a, NULL, 0, 0, 0) == 1);
    float b[6] = {NAN, 3, 5, 5, 0, 1};          /* NaN never wins */
    CHECK(nx_sample(s, &p, b, NULL, 0, 0, 0) == 2);
    float c[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(nx_sample(s, &p, c, NULL, 0, 0, 0) == 0);
    const int32_t *ids;
    const float *probs;
    float d[6] = {0, 0, 0, 0, 7, 0};
    p.temperature = -1.0f;                       /* any temperature <= 0 is greedy */
    CHECK(smp_distribution(s, &p, d, NULL, 0, 0, &ids, &probs) == 1);
    CHECK(ids[0] == 4 && probs[0] == 1.0f);
    /* All -inf with a positive temperature: softmax is undefined, greedy is the limit. */
    float e[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    p.temperature = 1.0f;
    CHECK(smp_distribution(s, &p, e, NULL, 0, 0, &ids, &probs) == 1 && ids[0] == 0);
    nx_sampler_free(s);
}

static void test_uniform_is_a_pure_function_of_seed_position_and_stream(void) {
    enum { N = 200000 };
    CHECK(smp_uniform(42, 7, 0) == smp_uniform(42, 7, 0));
    CHECK(smp_uniform(42, 7, 0) != smp_uniform(42, 8, 0));
    CHECK(smp_uniform(42, 7, 0) != smp_uniform(42, 7, 1));
    CHECK(smp_uniform(42, 7, 0) != smp_uniform(43, 7, 0));
    /* Mean 1/2 and variance 1/12 over positions; the standard error of the
     * mean is sqrt(1/12/N) = 0.00065, we allow 5 of them. Pearson correlation
     * between adjacent positions, between streams and between adjacent seeds
     * has standard error 1/sqrt(N) = 0.0022; we allow 5 of them. */
    double sum = 0, sq = 0, min = 1, max = 0;
    double cxy[3] = {0, 0, 0};
    double prev = smp_uniform(1234, 0, 0);
    for (int64_t i = 1; i <= N; i++) {
        double u = smp_uniform(1234, i, 0);
        double v = smp_uniform(1234, i, SMP_STREAM_ACCEPT);
        double w = smp_uniform(1235, i, 0);
        sum += u; sq += u * u;
        if (u < min) min = u;
        if (u > max) max = u;
        cxy[0] += (u - 0.5) * (prev - 0.5);
        cxy[1] += (u - 0.5) * (v - 0.5);
        cxy[2] += (u - 0.5) * (w - 0.5);
        prev = u;
    }
    double mean = sum / N, var = sq / N - mean * mean;
    CHECKF(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / N), "mean %.6f", mean);
    CHECKF(fabs(var - 1.0 / 12) < 0.002, "variance %.6f", var);
    CHECK(min >= 0.0 && max < 1.0);
    for (int k = 0; k < 3; k++) {
        double r = cxy[k] / N / (1.0 / 12);
        CHECKF(fabs(r) < 5 / sqrt((double)N), "correlation %d: %.5f", k, r);
    }
}

static void test_same_seed_and_position_draw_the_same_token_in_any_call_order(void) {
    enum { V = 5, P = 1000 };
    const float logits[V] = {0.3f, 0.1f, 0.0f, -0.2f, 0.25f};
    nx_sampler *s1 = new_sampler(V), *s2 = new_sampler(V);
    nx_sampling p = nx_sampling_default();
    p.temperature = 1.0f;
    p.seed = 99;
    int32_t fwd[P];
    float w[V];
    int seen[V] = {0};
    for (int i = 0; i < P; i++) {
        memcpy(w, logits, sizeof w);
        fwd[i] = nx_sample(s1, &p, w, NULL, 0, 0, i);
        seen[fwd[i]]++;
    }
    /* Backwards, on another sampler: what a batched verifier would do. */
    int same = 1;
    for (int i = P - 1; i >= 0; i--) {
        memcpy(w, logits, sizeof w);
        if (nx_sample(s2, &p, w, NULL, 0, 0, i) != fwd[i]) same = 0;
    }
    CHECK(same);
    for (int t = 0; t < V; t++) CHECKF(seen[t] > 100, "token %d drawn %d times", t, seen[t]);
    /* Another seed gives another sequence. */
    p.seed = 100;
    int differ = 0;
    for (int i = 0; i < P; i++) {
        memcpy(w, logits, sizeof w);
        differ += nx_sample(s1, &p, w, NULL, 0, 0, i) != fwd[i];
    }
    CHECKF(differ > P / 2, "only %d of %d tokens differ", differ, P);
    nx_sampler_free(s1);
    nx_sampler_free(s2);
}

static void test_top_k_of_one_equals_greedy(void) {
    enum { V = 1000 };
    nx_sampler *s = new_sampler(V);
    float logits[V], w[V];
    nx_sampling g = nx_sampling_default(), p = g;
    p.temperature = 0.8f;
    p.top_k = 1;
    for (uint64_t seed = 1; seed <= 50; seed++) {
        random_logits(logits, V, seed, 3.0f);
        if (seed % 5 == 0) {    /* plant a tie for the maximum */
            logits[700] = 20.0f;
            logits[300] = 20.0f;
        }
        memcpy(w, logits, sizeof w);
        int32_t greedy = nx_sample(s, &g, w, NULL, 0, 0, 0);
        memcpy(w, logits, sizeof w);
        int32_t k1 = nx_sample(s, &p, w, NULL, 0, 0, (int64_t)seed);
        CHECKF(k1 == greedy, "seed %d: top-k=1 %d, greedy %d", (int)seed, k1, greedy);
        if (seed % 5 == 0) CHECK(greedy == 300);
    }
    nx_sampler_free(s);
}

static void test_top_k_keeps_the_k_most_likely_and_renormalizes(void) {
    const float probs0[4] = {0.5f, 0.25f, 0.15f, 0.1f};
    float logits[4], w[4];
    for (int i = 0; i < 4; i++) logits[3 - i] = logf(probs0[i]);   /* reversed ids */
    nx_sampler *s = new_sampler(4);
    nx_sampling p = nx_sampling_default();
    p.temperature = 1.0f;
    p.top_k = 2;
    const int32_t *ids;
    const float *probs;
    int n = dist_of(s, &p, logits, 4, w, &ids, &probs);
    CHECK(n == 2 && ids[0] == 3 && ids[1] == 2);
    CHECK(fabsf(probs[0] - 2.0f / 3) < 1e-6f && fabsf(probs[1] - 1.0f / 3) < 1e-6f);
    nx_sampler_free(s);
}

static void test_top_p_keeps_the_smallest_nucleus_in_the_fixed_order(void) {
    /* p = {0.5, 0.25, 0.15, 0.1}; cumulative 0.5, 0.75, 0.9, 1.0. */
    float logits[4] = {logf(0.5f), logf(0.25f), logf(0.15f), logf(0.1f)}, w[4];
    nx_sampler *s = new_sampler(4);
    nx_sampling p = nx_sampling_default();
    p.temperature = 1.0f;
    const int32_t *ids;
    const float *probs;
    p.top_p = 0.3f;
    CHECK(dist_of(s, &p, logits, 4, w, &ids, &probs) == 1 && ids[0] == 0 && probs[0] == 1.0f);
    p.top_p = 0.7f;
    CHECK(dist_of(s, &p, logits, 4, w, &ids, &probs) == 2 && ids[0] == 0 && ids[1] == 1);
    CHECK(fabsf(probs[0] - 2.0f / 3) < 1e-6f && fabsf(probs[1] - 1.0f / 3) < 1e-6f);
    p.top_p = 0.8f;
    CHECK(dist_of(s, &p, logits, 4, w, &ids, &probs) == 3 && ids[2] == 2);
    CHECK(fabsf(probs[2] - 0.15f / 0.9f) < 1e-6f);
    p.top_p = 0.95f;
    CHECK(dist_of(s, &p, logits, 4, w, &ids, &probs) == 4);
    /* Ties: ids 1 and 2 share the top logit (p = 0.366 each); the lower id is first. */
    float tied[4] = {0.0f, 1.0f, 1.0f, 0.0f};
    p.top_p = 0.3f;
    CHECK(dist_of(s, &p, tied, 4, w, &ids, &probs) == 1 && ids[0] == 1);
    p.top_p = 0.5f;
    CHECK(dist_of(s, &p, tied, 4, w, &ids, &probs) == 2 && ids[0] == 1 && ids[1] == 2);
    p.top_p = 0.9f;
    CHECK(dist_of(s, &p, tied, 4, w, &ids, &probs) == 4 && ids[2] == 0 && ids[3] == 3);
    p.top_p = 1.0f;                   /* off: nothing ranks, so the ids come in id order */
    CHECK(dist_of(s, &p, tied, 4, w, &ids, &probs) == 4);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2 && ids[3] == 3);
    nx_sampler_free(s);
}

static void test_min_p_drops_tokens_below_a_fraction_of_the_best(void) {
    float logits[5] = {logf(0.1f), logf(0.5f), logf(0.15f), logf(0.25f), -INFINITY}, w[5];
    nx_sampler *s = new_sampler(5);
    nx_sampling p = nx_sampling_default();
    p.temperature = 1.0f;
    const int32_t *ids;
    const float *probs;
    p.min_p = 0.25f;                  /* threshold 0.125: keeps 0.5, 0.25, 0.15, in id order */
    CHECK(dist_of(s, &p, logits, 5, w, &ids, &probs) == 3);
    CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 3);
    CHECK(fabsf(probs[1] - 0.15f / 0.9f) < 1e-6f);
    p.top_k = 4;                      /* with top-k, in the fixed order */
    CHECK(dist_of(s, &p, logits, 5, w, &ids, &probs) == 3);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 2);
    CHECK(fabsf(probs[2] - 0.15f / 0.9f) < 1e-6f);
    p.top_k = 0;
    p.min_p = 0.6f;                   /* threshold 0.3: only the best */
    CHECK(dist_of(s, &p, logits, 5, w, &ids, &probs) == 1 && ids[0] == 1);
    p.min_p = 5.0f;                   /* above 1: still the best, never nothing */
    CHECK(dist_of(s, &p, logits, 5, w, &ids, &probs) == 1 && ids[0] == 1);
    p.min_p = 0.0f;                   /* off: everything but the -inf token */
    CHECK(dist_of(s, &p, logits, 5, w, &ids, &probs) == 4);
    p.top_p = 0.9999f;                /* the same through the nucleus, in the fixed order */
    CHECK(dist_of(s, &p, logits, 5, w, &ids, &probs) == 4 && ids[3] == 0);
    nx_sampler_free(s);
    /* a masked token among the top k weighs 0 and is dropped */
    float masked[6] = {0.0f, -INFINITY, 1.0f, -INFINITY, 2.0f, 0.5f}, w6[6];
    s = new_sampler(6);
    p = nx_sampling_default();
    p.temperature = 1.0f, p.top_k = 5;
    CHECK(dist_of(s, &p, masked, 6, w6, &ids, &probs) == 4 && ids[0] == 4 && ids[3] == 0);
    nx_sampler_free(s);
}

static void test_penalties_apply_once_per_distinct_token_in_the_history(void) {
    const float logits[6] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, 0.0f};
    const int32_t hist[6] = {0, 1, 0, 3, 99, -1};  /* 99 and -1 are out of range */
    nx_sampler *s = new_sampler(6);
    nx_sampling p = nx_sampling_default();
    float w[6];
    const int32_t *ids;
    const float *probs;

    p.repetition_penalty = 2.0f;      /* positive: divide; negative: multiply */
    memcpy(w, logits, sizeof w);
    smp_distribution(s, &p, w, hist, 6, 0, &ids, &probs);
    CHECK(w[0] == 1.0f && w[1] == -4.0f && w[2] == 1.0f && w[3] == 0.25f && w[4] == 3.0f);

    p = nx_sampling_default();
    p.presence_penalty = 0.5f;        /* subtracted once, whatever the count */
    memcpy(w, logits, sizeof w);
    smp_distribution(s, &p, w, hist, 6, 0, &ids, &probs);
    CHECK(w[0] == 1.5f && w[1] == -2.5f && w[3] == 0.0f && w[2] == 1.0f);

    p = nx_sampling_default();
    p.frequency_penalty = 0.5f;       /* subtracted count times */
    memcpy(w, logits, sizeof w);
    smp_distribution(s, &p, w, hist, 6, 0, &ids, &probs);
    CHECK(w[0] == 1.0f && w[1] == -2.5f && w[3] == 0.0f && w[5] == 0.0f);

    /* All three: repetition first, then count * frequency + presence. */
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.25f;
    memcpy(w, logits, sizeof w);
    int n = smp_distribution(s, &p, w, hist, 6, 0, &ids, &probs);
    CHECK(w[0] == 1.0f - 1.0f - 0.25f && w[1] == -4.0f - 0.5f - 0.25f && w[3] == 0.25f - 0.5f - 0.25f);
    CHECK(n == 1 && ids[0] == 4);

    /* The penalties decide greedy: token 4 repeated loses to token 0. */
    const int32_t rep4[3] = {4, 4, 4};
    p = nx_sampling_default();
    p.frequency_penalty = 0.5f;
    memcpy(w, logits, sizeof w);
    CHECK(nx_sample(s, &p, w, rep4, 3, 0, 0) == 0);

    /* The counts are cleared between calls: no history, no change. */
    memcpy(w, logits, sizeof w);
    smp_distribution(s, &p, w, NULL, 0, 0, &ids, &probs);
    CHECK(memcmp(w, logits, sizeof w) == 0);

    /* hist[0..3) = {0, 1, 0} as input (the prompt): the repetition penalty
     * sees tokens 0 and 1 there, presence and frequency only the output's
     * token 3. */
    p = nx_sampling_default();
    p.repetition_penalty = 2.0f, p.presence_penalty = 0.25f, p.frequency_penalty = 0.5f;
    memcpy(w, logits, sizeof w);
    smp_distribution(s, &p, w, hist, 6, 3, &ids, &probs);
    CHECKF(w[0] == 1.0f && w[1] == -4.0f && w[2] == 1.0f && w[3] == 0.25f - 0.5f - 0.25f && w[4] == 3.0f,
           "input split: %g %g %g %g %g", w[0], w[1], w[2], w[3], w[4]);
    /* an input token counted once more in the output gets one count */
    const int32_t again[4] = {0, 0, 1, 0};
    memcpy(w, logits, sizeof w);
    smp_distribution(s, &p, w, again, 4, 3, &ids, &probs);
    CHECKF(w[0] == 1.0f - 0.5f - 0.25f && w[1] == -4.0f, "again: %g %g", w[0], w[1]);
    /* all of it input: presence and frequency change nothing */
    p.repetition_penalty = 1.0f;
    memcpy(w, logits, sizeof w);
    smp_distribution(s, &p, w, hist, 6, 6, &ids, &probs);
    CHECK(memcmp(w, logits, sizeof w) == 0);
    nx_sampler_free(s);
}

static void test_logit_bias_comes_first_and_decides_greedy_and_sampling(void) {
    const float logits[6] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, 0.0f};
    const int32_t hist[2] = {2, 2};
    nx_sampler *s = new_sampler(6);
    nx_sampling p = nx_sampling_default();
    float w[6];
    const int32_t *ids;
    const float *probs;

    /* added to the logit, before the penalties: 1 + 2 = 3, then / 2 for the
     * repetition; an id listed twice gets both; ids outside the vocabulary
     * are skipped (nx_sample cannot fail) */
    const nx_logit_bias bias[5] = {{2, 2.0f}, {1, 0.5f}, {1, 0.25f}, {6, 50.0f}, {-1, 50.0f}};
    p.logit_bias = bias;
    p.n_logit_bias = 5;
    p.repetition_penalty = 2.0f;
    memcpy(w, logits, sizeof w);
    int n = smp_distribution(s, &p, w, hist, 2, 0, &ids, &probs);
    CHECKF(w[2] == 1.5f && w[1] == -1.25f && w[0] == 2.0f && w[4] == 3.0f && w[5] == 0.0f, "%g %g", w[2], w[1]);
    CHECK(n == 1 && ids[0] == 4);

    /* -100 bans the argmax from greedy, +100 forces a token */
    const nx_logit_bias ban = {4, -100.0f}, force = {1, 100.0f};
    p = nx_sampling_default();
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    memcpy(w, logits, sizeof w);
    CHECK(nx_sample(s, &p, w, NULL, 0, 0, 0) == 0);
    p.logit_bias = &force;
    memcpy(w, logits, sizeof w);
    CHECK(nx_sample(s, &p, w, NULL, 0, 0, 0) == 1);

    /* sampling at temperature 1: the banned token is never drawn, and the
     * distribution is softmax(logits + bias) */
    p = nx_sampling_default();
    p.temperature = 1.0f;
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    for (int64_t pos = 0; pos < 2000; pos++) {
        memcpy(w, logits, sizeof w);
        CHECK(nx_sample(s, &p, w, NULL, 0, 0, pos) != 4);
    }
    memcpy(w, logits, sizeof w);
    n = smp_distribution(s, &p, w, NULL, 0, 0, &ids, &probs);
    double z = 0;
    for (int i = 0; i < 6; i++) z += exp(logits[i] + (i == 4 ? -100.0 : 0.0));
    for (int j = 0; j < n; j++) {
        double want = exp(logits[ids[j]] + (ids[j] == 4 ? -100.0 : 0.0)) / z;
        CHECKF(fabs(probs[j] - want) < 1e-6 * want + 1e-30, "id %d: %g vs %g", ids[j], probs[j], want);
    }

    /* nx_sampling_check: what nx_spec_new and nx_engine_submit refuse */
    char err[256];
    CHECK(nx_sampling_check(&p, 6, err, sizeof err) == NX_OK);
    const nx_logit_bias out_of_vocab = {6, 1.0f}, not_finite = {0, NAN};
    p.logit_bias = &out_of_vocab;
    CHECK(nx_sampling_check(&p, 6, err, sizeof err) == NX_EINVAL && strstr(err, "logit_bias: token 6"));
    p.logit_bias = &not_finite;
    CHECK(nx_sampling_check(&p, 6, err, sizeof err) == NX_EINVAL && strstr(err, "not finite"));
    p.logit_bias = NULL;
    CHECK(nx_sampling_check(&p, 6, err, sizeof err) == NX_EINVAL && strstr(err, "no array"));
    p.logit_bias = &ban;
    p.n_logit_bias = NX_MAX_LOGIT_BIAS + 1;
    CHECK(nx_sampling_check(&p, 6, err, sizeof err) == NX_EINVAL && strstr(err, "entries"));
    /* every float finite: a NaN penalty banned what it touched, a NaN top-p
     * switched it off */
    p.n_logit_bias = 0;
    float *fields[] = {&p.temperature, &p.top_p, &p.min_p, &p.repetition_penalty, &p.presence_penalty,
                       &p.frequency_penalty};
    const char *names[] = {"temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 6; i++) {
        const float keep = *fields[i];
        *fields[i] = i % 2 ? NAN : INFINITY;
        CHECKF(nx_sampling_check(&p, 6, err, sizeof err) == NX_EINVAL && strstr(err, names[i]), "%s: %s", names[i], err);
        *fields[i] = keep;
    }
    CHECK(nx_sampling_check(&p, 6, err, sizeof err) == NX_OK);
    nx_sampler_free(s);
}

static void test_temperature_divides_the_logits_before_softmax(void) {
    const float logits[3] = {2.0f, 1.0f, 0.0f};
    const float temps[3] = {0.5f, 1.0f, 2.0f};
    nx_sampler *s = new_sampler(3);
    nx_sampling p = nx_sampling_default();
    float w[3];
    const int32_t *ids;
    const float *probs;
    for (int k = 0; k < 3; k++) {
        p.temperature = temps[k];
        CHECK(dist_of(s, &p, logits, 3, w, &ids, &probs) == 3);
        double z = 0;
        for (int i = 0; i < 3; i++) z += exp(logits[i] / temps[k]);
        for (int j = 0; j < 3; j++) {
            double want = exp(logits[ids[j]] / temps[k]) / z;
            CHECKF(fabs(probs[j] - want) < 1e-6, "T=%g id %d: %g vs %g", temps[k], ids[j],
                   probs[j], want);
        }
        CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
        CHECK(w[0] == logits[0] / temps[k]);   /* the caller's logits are processed in place */
    }
    nx_sampler_free(s);
}

/* A temperature whose quotient leaves the floats is greedy on the row
 * itself: dividing first made every large logit +inf (or every negative one
 * -inf), and the lowest such id won. */
static void test_a_vanishing_temperature_is_greedy(void) {
    static const float rows[3][4] = {{3.5f, 4.0f, 1.0f, -2.0f}, {-9.0f, -5.0f, -4.0f, -7.0f}, {4e29f, 5e29f, -1e29f, 0}};
    static const int32_t best[3] = {1, 2, 1};
    static const float temps[] = {1e-37f, 1e-38f, 1e-45f, 1e-30f, 1e-9f};
    nx_sampler *s = new_sampler(4);
    nx_sampling p = nx_sampling_default();
    for (int r = 0; r < 3; r++)
        for (size_t k = 0; k < sizeof temps / sizeof *temps; k++)
            for (int64_t pos = 0; pos < 8; pos++) {
                float x[4];
                memcpy(x, rows[r], sizeof x);
                p.temperature = temps[k];
                p.seed = (uint64_t)pos;
                int32_t got = nx_sample(s, &p, x, NULL, 0, 0, pos);
                CHECKF(got == best[r], "row %d, T = %g, position %lld: token %d, want %d", r, temps[k], (long long)pos,
                       got, best[r]);
            }
    nx_sampler_free(s);
}

/* The filters' edges, as sample.h states them: top-p keeps the smallest
 * prefix whose mass reaches top_p exactly; min-p keeps p == min_p * p_max;
 * top-k = the vocabulary is off (the same list, in id order, so the same
 * draws); the logit bias takes exactly NX_MAX_LOGIT_BIAS entries. */
static void test_filter_edges_are_inclusive(void) {
    nx_sampler *s = new_sampler(4);
    nx_sampling p = nx_sampling_default();
    float w[4];
    const int32_t *ids;
    const float *probs;
    const float flat[4] = {1, 1, 1, 1}, two[4] = {2, 2, 1, 0}, mixed[4] = {0.3f, 2.0f, -1.0f, 1.1f};
    p.temperature = 1.0f;
    p.top_p = 0.5f;   /* 2 of 4 equal weights are exactly half the mass */
    CHECK(dist_of(s, &p, flat, 4, w, &ids, &probs) == 2 && ids[0] == 0 && ids[1] == 1);
    p.top_p = 1.0f, p.min_p = 1.0f;   /* the tokens tied with the best stay */
    int n = dist_of(s, &p, two, 4, w, &ids, &probs);
    CHECKF(n == 2 && ids[0] == 0 && ids[1] == 1 && probs[0] == 0.5f && probs[1] == 0.5f, "min-p 1 kept %d", n);
    p.top_k = 3;   /* the same in rank order */
    n = dist_of(s, &p, two, 4, w, &ids, &probs);
    CHECKF(n == 2 && ids[0] == 0 && ids[1] == 1, "min-p 1 after top-k 3 kept %d", n);
    p.min_p = 0.0f;
    for (int64_t pos = 0; pos < 64; pos++) {
        float a[4], b[4];
        memcpy(a, mixed, sizeof a), memcpy(b, mixed, sizeof b);
        p.top_k = 0;
        int32_t off = nx_sample(s, &p, a, NULL, 0, 0, pos);
        p.top_k = 4;
        int32_t all = nx_sample(s, &p, b, NULL, 0, 0, pos);
        CHECKF(off == all, "position %lld: top-k 4 of 4 drew %d, off %d", (long long)pos, all, off);
    }
    p.top_k = 0;
    nx_logit_bias many[NX_MAX_LOGIT_BIAS + 1];
    for (int i = 0; i <= NX_MAX_LOGIT_BIAS; i++) many[i] = (nx_logit_bias){i % 4, 0.5f};
    char err[256];
    p.logit_bias = many, p.n_logit_bias = NX_MAX_LOGIT_BIAS;
    CHECKF(nx_sampling_check(&p, 4, err, sizeof err) == NX_OK, "%s", err);
    p.n_logit_bias++;
    CHECK(nx_sampling_check(&p, 4, err, sizeof err) == NX_EINVAL);
    nx_sampler_free(s);
}

static void test_draw_walks_the_candidates_in_the_given_order(void) {
    const int32_t ids[3] = {5, 2, 9};
    const float probs[3] = {0.5f, 0.3f, 0.2f};
    CHECK(smp_draw(ids, probs, 3, 0.0) == 5);
    CHECK(smp_draw(ids, probs, 3, 0.49) == 5);
    CHECK(smp_draw(ids, probs, 3, 0.5) == 2);
    CHECK(smp_draw(ids, probs, 3, 0.79) == 2);
    CHECK(smp_draw(ids, probs, 3, 0.81) == 9);
    CHECK(smp_draw(ids, probs, 3, 0.9999999999) == 9);
    CHECK(smp_draw(ids, probs, 1, 0.7) == 5);
}

static void test_20000_draws_on_a_5_token_softmax_match_its_probabilities(void) {
    /* Chi-square with 4 degrees of freedom; the critical value at p = 0.001
     * is 18.467. The RNG is counter-based, so the test is deterministic. */
    enum { V = 5, N = 20000 };
    const double CRIT_DF4_P001 = 18.467;
    const float logits[V] = {1.0f, 0.5f, 0.0f, -0.5f, -1.5f};
    const uint64_t seeds[2] = {12345, 777};
    nx_sampler *s = new_sampler(V);
    nx_sampling p = nx_sampling_default();
    p.temperature = 1.0f;
    double z = 0, want[V];
    for (int i = 0; i < V; i++) z += exp(logits[i]);
    for (int i = 0; i < V; i++) want[i] = exp(logits[i]) / z;
    for (int k = 0; k < 2; k++) {
        p.seed = seeds[k];
        int count[V] = {0};
        float w[V];
        for (int64_t pos = 0; pos < N; pos++) {
            memcpy(w, logits, sizeof w);
            count[nx_sample(s, &p, w, NULL, 0, 0, pos)]++;
        }
        double chi2 = 0;
        for (int i = 0; i < V; i++) {
            double e = N * want[i];
            chi2 += (count[i] - e) * (count[i] - e) / e;
        }
        CHECKF(chi2 < CRIT_DF4_P001, "seed %llu: chi2 %.3f >= %.3f", (unsigned long long)p.seed,
               chi2, CRIT_DF4_P001);
    }
    nx_sampler_free(s);
}

static void test_fast_selection_paths_equal_a_full_sort_of_the_vocabulary(void) {
    /* Vocab 50000 with random logits: peaked ones (the nucleus fits in the
     * 1024-token fast path), wider ones (the tokens of the buckets that hold
     * the nucleus are sorted) and flat ones (every token is), some rounded
     * so that many logits tie, plus top-k, min-p alone and pure temperature.
     * Bit-identical ids and probs. */
    enum { V = 50000 };
    static float logits[V], w[V], x[V], rprobs[V];
    static int32_t rids[V];
    struct { float temp; int top_k; float top_p, min_p; } cfg[] = {
        {1.0f, 0, 0.95f, 0.0f}, {0.7f, 0, 0.8f, 0.0f}, {1.3f, 0, 0.5f, 0.0f},
        {1.0f, 0, 0.99f, 0.05f}, {1.0f, 20, 0.95f, 0.0f}, {0.6f, 40, 1.0f, 0.1f},
        {1.0f, 0, 1.0f, 0.02f}, {0.9f, 0, 1.0f, 0.3f}, {1.0f, 0, 1.0f, 0.0f},
    };
    const float scales[4] = {0.5f, 4.0f, 12.0f, 3.0f};
    nx_sampler *s = new_sampler(V);
    int fast = 0, pruned = 0, full = 0, bad = 0;
    for (uint64_t seed = 1; seed <= 16; seed++) {
        random_logits(logits, V, seed * 7919, scales[seed % 4]);
        if (seed % 4 == 0)    /* quarter steps: thousands of ties, to pin the tie rule */
            for (int i = 0; i < V; i++) logits[i] = roundf(logits[i] * 4.0f) / 4.0f;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            nx_sampling p = nx_sampling_default();
            p.temperature = cfg[c].temp;
            p.top_k = cfg[c].top_k;
            p.top_p = cfg[c].top_p;
            p.min_p = cfg[c].min_p;
            p.seed = seed;
            int within = 0;
            int rn = ref_distribution(logits, V, &p, rids, rprobs, x, &within);
            const int32_t *ids;
            const float *probs;
            const long sorted_all = smp_sorted_all(s);
            int n = dist_of(s, &p, logits, V, w, &ids, &probs);
            if (p.top_k == 0 && p.top_p < 1.0f)
                *(within ? &fast : smp_sorted_all(s) == sorted_all ? &pruned : &full) += 1;
            /* a nucleus narrower than a tenth of the row never sorts every
             * token (with min-p, which can keep the list from reaching
             * top_p of the mass, every token may be) */
            CHECKF(within || p.min_p > 0.0f || rn >= V / 10 || smp_sorted_all(s) == sorted_all,
                   "seed %d config %d: %d tokens, all sorted", (int)seed, (int)c, rn);
            int ok = n == rn && memcmp(ids, rids, (size_t)n * sizeof *ids) == 0 &&
                     memcmp(probs, rprobs, (size_t)n * sizeof *probs) == 0;
            if (!ok && bad++ < 5)
                CHECKF(ok, "seed %d config %d: n %d vs reference %d", (int)seed, (int)c, n, rn);
            /* And nx_sample is the draw over exactly this list. */
            memcpy(w, logits, sizeof w);
            int32_t t = nx_sample(s, &p, w, NULL, 0, 0, (int64_t)seed);
            CHECK(t == smp_draw(rids, rprobs, rn, smp_uniform(seed, (int64_t)seed, 0)));
        }
    }
    CHECK(bad == 0);
    CHECKF(fast > 0 && pruned > 0 && full > 0,
           "top-p cases: %d on the fast path, %d sorting the nucleus's buckets, %d all", fast, pruned, full);
    nx_sampler_free(s);
}

/* smp_distribution_at over a list of candidates equals smp_distribution of
 * the row with every other logit -inf -- the same ids and probs bit for bit
 * (min-p, top-k with and without top-p, greedy, a list shorter than k, a
 * bias and penalties on listed and unlisted ids) -- and, without top-k
 * (top-p's mass and temperature alone's normalizer summed over the list),
 * the same ids with probs within 1e-6. */
static void test_distribution_at_equals_the_row_with_the_rest_masked(void) {
    enum { V = 50000 };
    static float logits[V], dense[V], sparse[V];
    static int32_t cand[V], ids_d[V];
    static float probs_d[V];
    struct { float temp; int top_k; float top_p, min_p; int n_cand; } cfg[] = {
        {1.0f, 0, 1.0f, 0.0f, 2048}, {0.7f, 20, 0.8f, 0.0f, 2048}, {0.6f, 40, 1.0f, 0.1f, 2048},
        {1.0f, 0, 1.0f, 0.05f, 1000}, {0.8f, 50, 1.0f, 0.0f, 30}, {0.0f, 0, 1.0f, 0.0f, 2048},
        {1.0f, 0, 0.9f, 0.0f, 2048},
    };
    const nx_logit_bias bias[2] = {{7, 3.0f}, {11, -2.0f}};
    const int32_t hist[4] = {7, 11, 40000, 7};
    nx_sampler *s = new_sampler(V);
    for (uint64_t seed = 1; seed <= 4; seed++) {
        random_logits(logits, V, seed * 104729, seed % 2 ? 2.0f : 6.0f);
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            uint64_t st = seed * 31 + c;
            int n_cand = 0;   /* a random ascending subset, ids 7 and 11 (bias, history) among them */
            for (int i = 0; i < V; i++)
                if (i == 7 || i == 11 || test_unif(&st) < (double)cfg[c].n_cand / V) cand[n_cand++] = i;
            nx_sampling p = nx_sampling_default();
            p.temperature = cfg[c].temp, p.top_k = cfg[c].top_k, p.top_p = cfg[c].top_p, p.min_p = cfg[c].min_p;
            p.logit_bias = bias, p.n_logit_bias = 2, p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f;
            for (int i = 0; i < V; i++) dense[i] = -INFINITY;
            for (int j = 0; j < n_cand; j++) dense[cand[j]] = logits[cand[j]];
            memcpy(sparse, logits, sizeof sparse);
            const int32_t *ids;
            const float *probs;
            const int nd = smp_distribution(s, &p, dense, hist, 4, 0, &ids, &probs);
            memcpy(ids_d, ids, (size_t)nd * sizeof *ids), memcpy(probs_d, probs, (size_t)nd * sizeof *probs);
            const int ns = smp_distribution_at(s, &p, sparse, cand, n_cand, hist, 4, 0, &ids, &probs);
            int same_ids = ns == nd && memcmp(ids, ids_d, (size_t)nd * sizeof *ids) == 0, close = same_ids;
            for (int j = 0; close && j < nd; j++) close = fabsf(probs[j] - probs_d[j]) <= 1e-6f;
            const int exact = same_ids && memcmp(probs, probs_d, (size_t)nd * sizeof *probs) == 0;
            const int list_sums = p.top_k == 0 && (p.top_p < 1.0f || p.min_p == 0.0f) && p.temperature > 0;
            CHECKF(list_sums ? close : exact, "seed %d config %d: %d candidates against %d (%s)", (int)seed, (int)c, ns,
                   nd, same_ids ? "probs differ" : "ids differ");
        }
    }
    nx_sampler_free(s);
}

/* smp_process + smp_prob: for temperature alone, P(id) without a list, the
 * very float smp_list then lists for it (0 for a masked token), on a row
 * with a bias, penalties and masked tokens; -1 (a list is needed) with
 * top-k, top-p or min-p, or greedy. smp_process + smp_list ==
 * smp_distribution. */
static void test_one_probability_without_the_list(void) {
    enum { V = 50000 };
    static float logits[V], a[V], b[V];
    const nx_logit_bias bias[1] = {{42, 2.5f}};
    const int32_t hist[3] = {42, 9, 9};
    nx_sampler *s = new_sampler(V);
    random_logits(logits, V, 777, 3.0f);
    for (int i = 5; i < V; i += 97) logits[i] = -INFINITY;
    struct { float temp; int top_k; float top_p, min_p; int direct; } cfg[] = {
        {1.0f, 0, 1.0f, 0.0f, 1}, {0.6f, 0, 1.0f, 0.0f, 1}, {1.0f, 20, 1.0f, 0.0f, 0},
        {1.0f, 0, 0.9f, 0.0f, 0}, {1.0f, 0, 1.0f, 0.05f, 0}, {0.0f, 0, 1.0f, 0.0f, 0},
    };
    const int32_t probe[5] = {42, 9, 5, 0, V - 1};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        nx_sampling p = nx_sampling_default();
        p.temperature = cfg[c].temp, p.top_k = cfg[c].top_k, p.top_p = cfg[c].top_p, p.min_p = cfg[c].min_p;
        p.logit_bias = bias, p.n_logit_bias = 1, p.frequency_penalty = 0.4f;
        memcpy(a, logits, sizeof a), memcpy(b, logits, sizeof b);
        const int32_t *ids, *ids2;
        const float *probs, *probs2;
        smp_process(s, &p, a, hist, 3, 0);
        double pr[5];
        for (int k = 0; k < 5; k++) pr[k] = smp_prob(s, &p, a, probe[k]);
        const int n = smp_list(s, &p, a, &ids, &probs);
        int ok = 1;
        for (int k = 0; k < 5; k++) {
            double want = 0.0;   /* as listed, or 0 when not listed */
            for (int j = 0; j < n; j++)
                if (ids[j] == probe[k]) want = probs[j];
            ok &= cfg[c].direct ? pr[k] == want : pr[k] == -1.0;
        }
        const int32_t first = ids[0];
        const float p0 = probs[0];
        const int n2 = smp_distribution(s, &p, b, hist, 3, 0, &ids2, &probs2);
        CHECKF(ok && n2 == n && ids2[0] == first && probs2[0] == p0, "config %d: smp_prob disagrees with the list",
               (int)c);
    }
    nx_sampler_free(s);
}

static void test_sample_never_allocates(void) {
    /* The real vocabulary size; every path, under the no-allocation guard
     * (which aborts the program on any allocation). */
    enum { V = 248320 };
    static float logits[V], w[V];
    random_logits(logits, V, 5, 3.0f);
    int32_t hist[64];
    for (int i = 0; i < 64; i++) hist[i] = (i * 7919) % V;
    nx_sampler *s = new_sampler(V);
    nx_sampling cfg[6];
    for (int i = 0; i < 6; i++) { cfg[i] = nx_sampling_default(); cfg[i].seed = 3; }
    cfg[1].temperature = 1.0f; cfg[1].top_k = 20; cfg[1].top_p = 0.95f;
    cfg[1].presence_penalty = 1.5f;
    cfg[2].temperature = 1.0f; cfg[2].top_p = 0.9f;                    /* fast nucleus */
    cfg[3].temperature = 5.0f; cfg[3].top_p = 0.9f;                    /* full sort    */
    cfg[4].temperature = 0.8f; cfg[4].min_p = 0.05f;
    cfg[5].temperature = 1.0f; cfg[5].repetition_penalty = 1.1f;       /* no filter    */
    cfg[5].frequency_penalty = 0.2f;
    int32_t out[6];
    nx_alloc_guard_begin();
    for (int i = 0; i < 6; i++) {
        memcpy(w, logits, sizeof w);
        out[i] = nx_sample(s, &cfg[i], w, hist, 64, 0, 1000 + i);
    }
    nx_alloc_guard_end();
    for (int i = 0; i < 6; i++) CHECK(out[i] >= 0 && out[i] < V);
    nx_sampler_free(s);
}

static const nx_test tests[] = {
    {"sampler_new_rejects_a_vocab_that_is_not_positive",
     "nx_sampler_new fails with NX_EINVAL and a message for vocab <= 0; defaults are greedy",
     test_sampler_new_rejects_a_vocab_that_is_not_positive},
    {"greedy_takes_the_argmax_and_breaks_ties_to_the_lowest_id",
     "temperature <= 0 is argmax; ties go to the lowest id; NaN never wins",
     test_greedy_takes_the_argmax_and_breaks_ties_to_the_lowest_id},
    {"uniform_is_a_pure_function_of_seed_position_and_stream",
     "smp_uniform repeats for equal inputs, has mean 1/2 and no correlation across positions",
     test_uniform_is_a_pure_function_of_seed_position_and_stream},
    {"same_seed_and_position_draw_the_same_token_in_any_call_order",
     "nx_sample depends only on (seed, position), as batched verification requires",
     test_same_seed_and_position_draw_the_same_token_in_any_call_order},
    {"top_k_of_one_equals_greedy", "top_k = 1 picks the argmax at any temperature, ties included",
     test_top_k_of_one_equals_greedy},
    {"top_k_keeps_the_k_most_likely_and_renormalizes", "top-k on a hand-made distribution",
     test_top_k_keeps_the_k_most_likely_and_renormalizes},
    {"top_p_keeps_the_smallest_nucleus_in_the_fixed_order",
     "top-p keeps the smallest prefix with mass >= top_p; ties go to the lower id",
     test_top_p_keeps_the_smallest_nucleus_in_the_fixed_order},
    {"min_p_drops_tokens_below_a_fraction_of_the_best",
     "min-p on a hand-made distribution: kept in id order, in the fixed order with top-k",
     test_min_p_drops_tokens_below_a_fraction_of_the_best},
    {"penalties_apply_once_per_distinct_token_in_the_history",
     "repetition, presence and frequency penalties on hand-made logits; the prompt seen by the repetition penalty only",
     test_penalties_apply_once_per_distinct_token_in_the_history},
    {"logit_bias_comes_first_and_decides_greedy_and_sampling",
     "bias before penalties; -100 bans, +100 forces; softmax(logits + bias); the checks nx_spec_new makes",
     test_logit_bias_comes_first_and_decides_greedy_and_sampling},
    {"temperature_divides_the_logits_before_softmax", "probabilities equal softmax(logits / T)",
     test_temperature_divides_the_logits_before_softmax},
    {"filter_edges_are_inclusive", "top-p at exactly its mass, min-p at exactly its ratio, top-k = V off, "
     "NX_MAX_LOGIT_BIAS entries taken", test_filter_edges_are_inclusive},
    {"a_vanishing_temperature_is_greedy", "T = 1e-38 (l / T past the floats) samples the argmax, as T -> 0",
     test_a_vanishing_temperature_is_greedy},
    {"draw_walks_the_candidates_in_the_given_order", "smp_draw's cumulative walk and its end",
     test_draw_walks_the_candidates_in_the_given_order},
    {"20000_draws_on_a_5_token_softmax_match_its_probabilities",
     "chi-square of 20000 draws (positions 0..19999) below 18.467 (df 4, p = 0.001)",
     test_20000_draws_on_a_5_token_softmax_match_its_probabilities},
    {"fast_selection_paths_equal_a_full_sort_of_the_vocabulary",
     "vocab 50000, many seeds: heap/radix paths give the reference's ids and probs bit for bit",
     test_fast_selection_paths_equal_a_full_sort_of_the_vocabulary},
    {"one_probability_without_the_list",
     "smp_prob (temperature alone) == the float smp_list lists for the id, 0 for a masked one; -1 with top-k, top-p, "
     "min-p or greedy; process + list == smp_distribution",
     test_one_probability_without_the_list},
    {"distribution_at_equals_the_row_with_the_rest_masked",
     "smp_distribution_at over 30-2048 candidates == smp_distribution of the row masked to them, bit for bit (without "
     "top-k, sums over the list: the same ids, probs within 1e-6); bias and penalties on listed ids",
     test_distribution_at_equals_the_row_with_the_rest_masked},
    {"sample_never_allocates", "nx_sample on a 248320 vocab under the no-allocation guard",
     test_sample_never_allocates},
};

NX_TEST_MAIN(tests)
