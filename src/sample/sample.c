/* sample.c — logit processing and sampling (contract in sample.h).
 *
 * The file follows one call: the counter-based RNG, logit bias and
 * penalties, greedy, then the candidate selection that keeps sampling cheap
 * on a 248320-token vocab, then the filters and the draw. Where top-k or
 * top-p ranks the tokens, every path that builds a candidate list produces
 * the same list a full sort of the vocabulary would: the fast paths only
 * avoid sorting tokens that cannot survive; without them the list is in id
 * order and nothing is sorted. The passes over the whole row (temperature,
 * selection, weights) are vector kernels with scalar twins (kernels/). */
#include "sample/sample.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "kernels/act.h"
#include "kernels/matmul.h"
#include "kernels/sketch.h"

/* Top-p without top-k first selects this many tokens by partial selection.
 * With a real model's logits at temperature 1 or below the nucleus almost
 * always lies inside them; when it does not (a flat distribution, a high
 * temperature) the tokens of the logit buckets that hold the nucleus are
 * sorted (collect_nucleus). */
#define SMP_NUCLEUS_FAST 1024
/* Those buckets split the gaps below the row's max x into widths of
 * SMP_NUCLEUS_SPAN / SMP_NUCLEUS_BUCKETS (0.2: weights within 22% of each
 * other), the last taking every wider gap (weights of 1e-45 or less). */
#define SMP_NUCLEUS_BUCKETS 512
#define SMP_NUCLEUS_SPAN 104.0f

/* Scratch for one vocabulary size, allocated once; nothing is allocated per
 * call. Every buffer has vocab entries. */
struct nx_sampler {
    int vocab;
    int32_t *counts;   /* token counts of the history; all zero between calls   */
    uint64_t *cand;    /* candidate ranks (see rank_of), sorted descending       */
    uint64_t *tmp;     /* radix-sort ping-pong buffer; kn_top_k_f32's work (it is
                          sized for both)                                        */
    int32_t *ids;      /* output: candidate ids in the fixed order               */
    float *probs;      /* output: their weights, then their probabilities        */
    float *weight;     /* weight[id] = kn_exp(x - xmax), filled by collect_*     */
    float *gather;     /* smp_distribution_at's candidates' logits               */
    float xmax;        /* the tempered row's max (softmax)                       */
    long sorted_all;   /* lists that sorted every token (smp_sorted_all)         */
    int softmax;       /* the last temper: 1 a softmax follows, 0 greedy         */
    int weighed;       /* smp_prob filled weight[] and row_sum for this row      */
    double row_sum;
    const float *processed;   /* the row smp_process left for smp_list / smp_prob */
};

/* ---- Counter-based RNG --------------------------------------------------
 * No state: the number for (seed, position, stream) is a hash of the three.
 * Each input enters through its own full avalanche round of the splitmix64
 * finalizer (Stafford's "mix13"), so nearby positions, streams and seeds give
 * unrelated outputs; the top 53 bits become the mantissa of a double. */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double smp_uniform(uint64_t seed, int64_t position, uint32_t stream) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);         /* golden ratio */
    h = mix64(h + (uint64_t)position * 0xd1b54a32d192ed03ULL); /* odd constants */
    h = mix64(h + ((uint64_t)stream + 1) * 0xaef17502108ef2d9ULL);
    return (double)(h >> 11) * 0x1.0p-53;
}

/* ---- Sampler ------------------------------------------------------------ */

nx_sampling nx_sampling_default(void) {
    nx_sampling p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.0f;          /* greedy */
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.seed = 0;
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    return p;
}

nx_status nx_sampling_check(const nx_sampling *p, int vocab_size, char *err, size_t errlen) {
    /* a NaN compares false with everything: a NaN penalty banned every
     * token it touched, a NaN top-p or min-p switched the filter off */
    const struct { const char *name; float v; } f[] = {
        {"temperature", p->temperature},           {"top_p", p->top_p},
        {"min_p", p->min_p},                       {"repetition_penalty", p->repetition_penalty},
        {"presence_penalty", p->presence_penalty}, {"frequency_penalty", p->frequency_penalty},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (!isfinite(f[i].v)) return nx_fail(err, errlen, NX_EINVAL, "sampling: %s is %g", f[i].name, (double)f[i].v);
    if (p->n_logit_bias < 0 || p->n_logit_bias > NX_MAX_LOGIT_BIAS)
        return nx_fail(err, errlen, NX_EINVAL, "logit_bias: %d entries (at most %d)", p->n_logit_bias,
                       NX_MAX_LOGIT_BIAS);
    if (p->n_logit_bias && !p->logit_bias)
        return nx_fail(err, errlen, NX_EINVAL, "logit_bias: %d entries but no array", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const nx_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= vocab_size)
            return nx_fail(err, errlen, NX_EINVAL, "logit_bias: token %d is outside the vocabulary [0, %d)", b->id,
                           vocab_size);
        if (!isfinite(b->bias))
            return nx_fail(err, errlen, NX_EINVAL, "logit_bias: the bias of token %d is not finite", b->id);
    }
    return NX_OK;
}

void nx_sampler_free(nx_sampler *s) {
    if (!s) return;
    nx_free_aligned(s->counts);
    nx_free_aligned(s->cand);
    nx_free_aligned(s->tmp);
    nx_free_aligned(s->ids);
    nx_free_aligned(s->probs);
    nx_free_aligned(s->weight);
    nx_free_aligned(s->gather);
    nx_free(s);
}

nx_status nx_sampler_new(int vocab_size, nx_sampler **out, char *err, size_t errlen) {
    if (vocab_size <= 0)
        return nx_fail(err, errlen, NX_EINVAL, "sampler: vocab_size %d must be positive",
                       vocab_size);
    size_t v = (size_t)vocab_size;
    nx_sampler *s = nx_calloc(1, sizeof *s);
    if (!s) return nx_fail(err, errlen, NX_ENOMEM, "sampler: out of memory");
    s->vocab = vocab_size;
    /* Aligned blocks are zeroed at allocation (alloc.h): the pages are touched
     * now rather than as first-touch faults in the first decode step, and
     * counts starts at the all-zero state apply_penalties relies on. */
    s->counts = nx_alloc_aligned(v * sizeof *s->counts);
    s->cand = nx_alloc_aligned(v * sizeof *s->cand);
    size_t topk = kn_top_k_work_bytes(vocab_size);
    s->tmp = nx_alloc_aligned(topk > v * sizeof *s->tmp ? topk : v * sizeof *s->tmp);
    s->ids = nx_alloc_aligned(v * sizeof *s->ids);
    s->probs = nx_alloc_aligned(v * sizeof *s->probs);
    s->weight = nx_alloc_aligned(v * sizeof *s->weight);
    s->gather = nx_alloc_aligned(v * sizeof *s->gather);
    if (!s->counts || !s->cand || !s->tmp || !s->ids || !s->probs || !s->weight || !s->gather) {
        nx_sampler_free(s);
        return nx_fail(err, errlen, NX_ENOMEM, "sampler: out of memory for vocab %d",
                       vocab_size);
    }
    *out = s;
    return NX_OK;
}

int smp_vocab_size(const nx_sampler *s) { return s->vocab; }

long smp_sorted_all(const nx_sampler *s) { return s->sorted_all; }

/* ---- Logit bias ---------------------------------------------------------- */

static void apply_logit_bias(const nx_sampler *s, const nx_sampling *p, float *logits) {
    for (int i = 0; i < p->n_logit_bias; i++) {
        const nx_logit_bias *b = &p->logit_bias[i];
        if (b->id >= 0 && b->id < s->vocab) logits[b->id] += b->bias;
    }
}

/* ---- Penalties ----------------------------------------------------------
 * The repetition penalty sees every token of the history; presence and
 * frequency see the output only, history[n_input..) (OpenAI's and vLLM's
 * definition: tokens sampled so far; a prompt's tokens -- a chat template's
 * end-of-turn among them -- are not penalised). counts[] is all zero on entry
 * and on exit, so the work is O(n_history), not O(vocab): the first pass
 * marks each token seen (bit 0) and counts its output occurrences (the bits
 * above), the second applies each distinct token's penalty once and zeroes
 * its entry, which also marks it done. */

static int uses_repetition_penalty(const nx_sampling *p) {
    return p->repetition_penalty > 0.0f && p->repetition_penalty != 1.0f;
}

int nx_sampling_changes_logits(const nx_sampling *p) {
    return p->n_logit_bias > 0 || uses_repetition_penalty(p) || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

static void apply_penalties(nx_sampler *s, const nx_sampling *p, float *logits, const int32_t *history, int n_history,
                            int n_input) {
    float rep = p->repetition_penalty;
    int use_rep = uses_repetition_penalty(p);
    float pres = p->presence_penalty, freq = p->frequency_penalty;
    if (!use_rep && pres == 0.0f && freq == 0.0f) return;
    int32_t *counts = s->counts;
    for (int i = 0; i < n_history; i++) {
        int32_t t = history[i];
        if (t >= 0 && t < s->vocab) counts[t] = (counts[t] | 1) + (i >= n_input ? 2 : 0);
    }
    for (int i = 0; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || t >= s->vocab || counts[t] == 0) continue;
        int32_t c = counts[t] >> 1;
        counts[t] = 0;
        float l = logits[t];
        if (use_rep) l = l > 0.0f ? l / rep : l * rep;
        if (c) l -= (float)c * freq + pres;
        logits[t] = l;
    }
}

/* ---- The fixed order ----------------------------------------------------
 * A candidate is one uint64 "rank": the high 32 bits map the float logit to
 * an unsigned key with the same order (flip all bits of negatives, set the
 * sign bit of positives; -0 is folded into +0), the low 32 bits are
 * 0xffffffff - id so that, for equal logits, the lower id ranks higher.
 * Ranks are distinct, so "descending rank" is exactly the fixed order and
 * every comparison below is one integer compare. */

static inline uint64_t rank_of(float x, int32_t id) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    if (b == 0x80000000u) b = 0;
    uint32_t key = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)key << 32) | (uint32_t)(0xffffffffu - (uint32_t)id);
}

static inline int32_t rank_id(uint64_t r) { return (int32_t)(0xffffffffu - (uint32_t)r); }

/* The logit a rank was made from (rank_of's key undone; -0 comes back as +0,
 * and a tempered row holds none). */
static inline float rank_x(uint64_t r) {
    const uint32_t key = (uint32_t)(r >> 32), b = key & 0x80000000u ? key & 0x7fffffffu : ~key;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Sorts a[0..n) (ranks built in ascending id order) into descending rank
 * order: an LSD radix sort, 4 stable passes of 8 bits over the inverted
 * logit key. Stability keeps equal keys in ascending id order, which is the
 * tie rule, so the low 32 bits never need a pass. O(n), and a pass whose
 * digit is the same for every element is skipped. Against 3 passes of 11,
 * 11 and 10 bits (one process, both alternating): 180k ranks 0.955x the
 * time of a whole top-p list (256 scatter targets stay in L1, 2048 did
 * not), top-k 20 0.965x (smaller histograms to clear and sum). */
static void radix_sort_desc(uint64_t *a, uint64_t *tmp, int n) {
    enum { PASSES = 4, BITS = 8, BUCKETS = 1 << BITS };
    if (n < 2) return;
    uint32_t hist[PASSES][BUCKETS];
    memset(hist, 0, sizeof hist);
    for (int i = 0; i < n; i++) {
        uint32_t k = ~(uint32_t)(a[i] >> 32);
        for (int pass = 0; pass < PASSES; pass++) hist[pass][(k >> (BITS * pass)) & (BUCKETS - 1)]++;
    }
    uint64_t *src = a, *dst = tmp;
    for (int pass = 0; pass < PASSES; pass++) {
        int shift = BITS * pass;
        uint32_t first = (~(uint32_t)(src[0] >> 32) >> shift) & (BUCKETS - 1);
        if (hist[pass][first] == (uint32_t)n) continue;
        uint32_t *pos = hist[pass], sum = 0;
        for (int d = 0; d < BUCKETS; d++) { uint32_t c = pos[d]; pos[d] = sum; sum += c; }
        for (int i = 0; i < n; i++) {
            uint32_t d = (~(uint32_t)(src[i] >> 32) >> shift) & (BUCKETS - 1);
            dst[pos[d]++] = src[i];
        }
        uint64_t *t = src; src = dst; dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
}

/* The m best tokens of x[0..V) into cand[0..m), in the fixed order: the
 * vector selection (kn_top_k_f32: ties at the m-th value to the lowest ids,
 * which is the rank's tie rule, and x holds no -0 or NaN once tempered, so
 * its order is the ranks'), then a sort of the m ranks. A third of the time
 * of the bounded heap it replaced over a 248k vocabulary (top-k 20: 105 ->
 * ~35 us). Returns m (at most V). */
static int select_top(nx_sampler *s, const float *x, int n, int m) {
    if (m > n) m = n;
    int32_t *idx = s->ids;   /* free until fill_weights */
    kn_top_k_f32(x, n, m, idx, s->tmp);
    for (int j = 0; j < m; j++) s->cand[j] = rank_of(x[idx[j]], idx[j]);
    radix_sort_desc(s->cand, s->tmp, m);
    return m;
}

/* Nothing selects by rank (no top-k, no top-p): every token whose weight
 * w = kn_exp(x - xmax) is > 0 and >= keep_min goes to ids[] and probs[] in
 * id order (contract 3), with no sort: the weights on vectors, then one
 * branch-free pass that keeps them. */
static int collect_by_id(nx_sampler *s, const float *x, int n_x, float xmax, float keep_min, double *row_sum) {
    *row_sum = s->weighed ? s->row_sum : kn_exp_sum_f32(s->weight, x, n_x, xmax);   /* smp_prob's, if it ran */
    int n = 0;
    for (int i = 0; i < n_x; i++) {
        const float w = s->weight[i];
        s->ids[n] = i, s->probs[n] = w;
        n += w > 0.0f && w >= keep_min;
    }
    return n;
}

/* Expands cand[0..n) into ids[] and unnormalized weights probs[]: taken
 * from w_by_id when a pass over the row filled it (a wide nucleus: its
 * weights are read in id order there anyway), else kn_exp_sum_f32's weights
 * of the ranks' logits (rank_x): on vectors, without reading x at
 * scattered ids (0 for a masked, -inf token). A 1024-token top-p list took
 * 0.92x the time of scalar kn_exp at each id. */
static void fill_weights(nx_sampler *s, float xmax, const float *w_by_id, int n) {
    if (w_by_id) {
        for (int j = 0; j < n; j++) s->probs[j] = w_by_id[s->ids[j] = rank_id(s->cand[j])];
        return;
    }
    float *xs = (float *)(void *)s->tmp;   /* free once the ranks are sorted */
    for (int j = 0; j < n; j++) xs[j] = rank_x(s->cand[j]), s->ids[j] = rank_id(s->cand[j]);
    kn_exp_sum_f32(s->probs, xs, n, xmax);
}

/* Top-p on weights w[0..n) in the fixed order with total mass z (which may
 * include tokens beyond n): the length of the smallest prefix whose mass is
 * >= top_p * z, or 0 if the n given do not reach it. The fast path and
 * collect_nucleus both call this, so they cut at the same index. */
static int top_p_find(const float *w, int n, float top_p, double z) {
    double target = (double)top_p * z, cum = 0.0;
    for (int j = 0; j < n; j++) {
        cum += w[j];
        if (cum >= target) return j + 1;
    }
    return 0;
}

/* Top-p's bucket of x: the gap xmax - x in widths of SMP_NUCLEUS_SPAN /
 * SMP_NUCLEUS_BUCKETS, the last bucket taking every wider gap. Never
 * decreases as x decreases (each float operation is monotone), so the
 * tokens of buckets 0..b are a prefix of the fixed order. */
static inline int nucleus_bucket(float xmax, float x) {
    const float f = (xmax - x) * ((float)SMP_NUCLEUS_BUCKETS / SMP_NUCLEUS_SPAN);
    return f < (float)(SMP_NUCLEUS_BUCKETS - 1) ? (int)f : SMP_NUCLEUS_BUCKETS - 1;
}

/* The candidates of a wide nucleus, sorted into cand[]: of the tokens with x
 * >= theta (a prefix of the fixed order), those whose weight s->weight[i]
 * is > 0 and >= keep_min (as steps g and h keep them) in the buckets that
 * first reach target (every bucket if none do). Where more than half the
 * row is above theta, every token that steps g and h keep instead: the
 * buckets would prune little, and one pass over the row is cheaper. */
static int collect_nucleus_prefix(nx_sampler *s, const float *x, int n_x, float xmax, float keep_min, float theta,
                                  double target) {
    uint32_t *idx = (uint32_t *)(void *)s->tmp, *key = idx + n_x;   /* tmp: 8 bytes a token */
    const uint32_t thr = (uint32_t)(rank_of(theta, 0) >> 32);
    const int64_t c = theta == -INFINITY ? n_x : kn_top_k_collect(x, n_x, thr, idx, key);   /* -inf: the whole row */
    int n = 0;
    if (2 * c > n_x) {
        for (int i = 0; i < n_x; i++)
            if (s->weight[i] > 0.0f && s->weight[i] >= keep_min) s->cand[n++] = rank_of(x[i], i);
        radix_sort_desc(s->cand, s->tmp, n);
        s->sorted_all++;
        return n;
    }
    /* four histograms, token j into j % 4: consecutive tokens of one bucket
     * add to different sums instead of waiting on each other */
    double part[4][SMP_NUCLEUS_BUCKETS];
    memset(part, 0, sizeof part);
    for (int64_t j = 0; j < c; j++) {
        const float w = s->weight[idx[j]];
        part[j & 3][nucleus_bucket(xmax, x[idx[j]])] += w > 0.0f && w >= keep_min ? w : 0.0f;
    }
    /* a margin of 1e-9 of target: far above the rounding of this sum or
     * top_p_find's over at most 2^31 floats in double */
    const double need = target * (1.0 + 1e-9);
    double cum = 0.0;
    int last = 0;
    for (; last < SMP_NUCLEUS_BUCKETS - 1; last++) {
        cum += (part[0][last] + part[1][last]) + (part[2][last] + part[3][last]);
        if (cum >= need) break;
    }
    for (int64_t j = 0; j < c; j++) {   /* branch-free: the kept tokens come at random */
        const int32_t i = (int32_t)idx[j];
        const float w = s->weight[i];
        s->cand[n] = rank_of(x[i], i);
        n += (w > 0.0f) & (w >= keep_min) & (nucleus_bucket(xmax, x[i]) <= last);
    }
    radix_sort_desc(s->cand, s->tmp, n);   /* idx and key are spent */
    return n;
}

/* Top-p over a nucleus wider than SMP_NUCLEUS_FAST tokens, with z the
 * softmax's mass: the nucleus's length, its candidates in cand[], ids[] and
 * probs[] (fill_weights). Tokens below theta, whose weights are each at most
 * kn_exp(theta - xmax) = eps * z / n_x with eps = (1 - top_p) / 2, together
 * weigh at most about eps * z, so the tokens above it hold the nucleus; of
 * those, the buckets that reach top_p * z are sorted. A real model's tail
 * is far below the mean weight, so theta is far above most tokens. Where
 * the candidates fall short (rounding, or min-p dropping weight), every
 * token is sorted: the same list either way, since both are prefixes of
 * the fixed order that top_p_find sums alike. */
static int collect_nucleus(nx_sampler *s, const nx_sampling *p, const float *x, int n_x, float xmax,
                           float keep_min, double z) {
    const double target = (double)p->top_p * z;   /* s->weight: the weights z sums */
    const double eps_share = 0.5 * (1.0 - (double)p->top_p) * z / n_x;
    float theta = eps_share > 0.0 ? xmax + (float)log(eps_share) : -INFINITY;
    for (;;) {
        const int n = collect_nucleus_prefix(s, x, n_x, xmax, keep_min, theta, target);
        fill_weights(s, xmax, s->weight, n);
        const int cut = top_p_find(s->probs, n, p->top_p, z);
        if (cut > 0) return cut;
        if (theta == -INFINITY) return n;   /* every token, short of top_p * z by rounding */
        theta = -INFINITY;
    }
}

/* ---- Processing and drawing --------------------------------------------- */

/* probs[0..n) /= their sum (contract 2h): in double, entry j of the first
 * n & ~7 into lane j % 8, the lanes added ((0+4) + (1+5)) + ((2+6) + (3+7)),
 * then the rest in order -- eight chains instead of one long one over a
 * vocabulary's candidates. */
static void normalize(nx_sampler *s, int n) {
    const int n8 = n & ~7;
    double lane[8] = {0};
    for (int j = 0; j < n8; j += 8)
        for (int l = 0; l < 8; l++) lane[l] += s->probs[j + l];
    double sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (int j = n8; j < n; j++) sum += s->probs[j];
    for (int j = 0; j < n; j++) s->probs[j] = (float)(s->probs[j] / sum);
}

/* Steps b and c over x[0..n_x) in place: 1 if a softmax follows (s->xmax
 * its max), 0 if the distribution is greedy -- temperature 0, everything
 * masked (-inf), or a temperature so small that the best logit over it
 * leaves the floats (softmax is undefined there, and the limit T -> 0 is
 * greedy). That case is caught before the division: after it every large
 * logit is +inf, or every negative one -inf, and the argmax of the tempered
 * row would be the lowest such id, not the best token. NaN becomes -inf so
 * it can never be drawn, and -0 becomes +0 (the kernel's twins and the
 * ranks agree on zeros). */
static int temper(nx_sampler *s, const nx_sampling *p, float *x, int n_x) {
    const float T = p->temperature;
    if (!(T > 0.0f)) return 0;
    if (T < 0x1p-10f) {   /* above, only logits past 2^118 overflow: none of a model's */
        const float best = x[kn_argmax_f32(x, n_x)];
        if (fabs((double)best) / (double)T >= (double)FLT_MAX) return 0;   /* greedy on the row as it is */
    }
    s->xmax = kn_temper_f32(x, n_x, T);
    return s->xmax > -INFINITY && s->xmax < INFINITY;
}

/* The greedy list: the argmax (ties to the lowest position; NaN never wins). */
static int list_greedy(nx_sampler *s, const float *x, int n_x) {
    s->ids[0] = (int32_t)kn_argmax_f32(x, n_x);
    s->probs[0] = 1.0f;
    return 1;
}

/* min-p is relative to p_max, and the best token's weight is kn_exp(0) = 1,
 * so "p >= min_p * p_max" is "w >= min_p"; above 1 it would drop the best
 * token too, so it is clamped (keeping exactly one token). */
static float min_p_weight(const nx_sampling *p) { return p->min_p > 0.0f ? fminf(p->min_p, 1.0f) : 0.0f; }

/* 1 if p ranks (top-k or top-p); else the candidates come in id order. */
static int ranks(const nx_sampler *s, const nx_sampling *p) {
    return (p->top_k > 0 && p->top_k < s->vocab) || p->top_p < 1.0f;
}

/* Steps d-h over tempered x[0..n_x) (s->xmax its max) -- the row, or the
 * logits of a list of candidates (smp_distribution_at) -- into ids
 * (positions in x) and probs. Top-k is on when 0 < top_k < the vocabulary,
 * whatever n_x: a list shorter than k keeps its rank order. */
static int list_softmax(nx_sampler *s, const nx_sampling *p, const float *x, int n_x) {
    const float xmax = s->xmax, keep_min = min_p_weight(p);
    const int use_top_p = p->top_p < 1.0f;

    /* d-f. Candidates (in the fixed order where top-k or top-p ranks them),
     * with weights w = kn_exp(x - xmax) (the softmax numerators; the max is
     * in every candidate set) and z, the mass the top-p threshold is
     * relative to. */
    int n = 0;
    double z = 0.0;
    if (p->top_k > 0 && p->top_k < s->vocab) {
        /* Softmax is over the top-k only, so z is their sum (in fixed order). */
        n = select_top(s, x, n_x, p->top_k);
        fill_weights(s, xmax, NULL, n);
        for (int j = 0; j < n; j++) z += s->probs[j];
        if (use_top_p) {
            int cut = top_p_find(s->probs, n, p->top_p, z);
            if (cut > 0) n = cut;
        }
    } else if (!use_top_p) {
        /* temperature alone, or with min-p: no rank needed, no sort; the
         * filters g and h are done. Alone, the normalizer is the row's sum
         * (what smp_prob divides by); with min-p, the kept weights'. */
        double row_sum;
        n = collect_by_id(s, x, n_x, xmax, keep_min, &row_sum);
        if (keep_min > 0.0f) normalize(s, n);
        else
            for (int j = 0; j < n; j++) s->probs[j] = (float)(s->probs[j] / row_sum);
        return n;
    } else {
        int m = select_top(s, x, n_x, SMP_NUCLEUS_FAST);
        /* the softmax's mass, and its weights by id for a wide nucleus
         * (kn_sum_exp_f32's sum; the stores cost nothing beside the exps) */
        z = kn_exp_sum_f32(s->weight, x, n_x, xmax);
        fill_weights(s, xmax, NULL, m);
        n = top_p_find(s->probs, m, p->top_p, z);
        if (n == 0) n = collect_nucleus(s, p, x, n_x, xmax, keep_min, z);
    }

    /* g. min-p, and h. drop zero weights: both keep a prefix of the order,
     * and probs[0] = 1 always survives. Then renormalize. */
    int keep = 1;
    while (keep < n && s->probs[keep] > 0.0f && s->probs[keep] >= keep_min * s->probs[0])
        keep++;
    n = keep;
    normalize(s, n);
    return n;
}

/* Step a on a row of the vocabulary, in place. */
static void bias_and_penalties(nx_sampler *s, const nx_sampling *p, float *logits, const int32_t *history,
                               int n_history, int n_input) {
    assert(s && p && logits && n_history >= 0 && (history || n_history == 0));
    apply_logit_bias(s, p, logits);
    apply_penalties(s, p, logits, history, n_history, n_input);
}

/* Steps d-h over x[0..n_x), tempered by the last temper (s->softmax). */
static int list(nx_sampler *s, const nx_sampling *p, const float *x, int n_x) {
    return s->softmax ? list_softmax(s, p, x, n_x) : list_greedy(s, x, n_x);
}

void smp_process(nx_sampler *s, const nx_sampling *p, float *logits, const int32_t *history, int n_history,
                 int n_input) {
    bias_and_penalties(s, p, logits, history, n_history, n_input);
    s->softmax = temper(s, p, logits, s->vocab);
    s->processed = logits;
    s->weighed = 0;
}

double smp_prob(nx_sampler *s, const nx_sampling *p, const float *logits, int32_t id) {
    assert(logits == s->processed && id >= 0 && id < s->vocab);
    if (!s->softmax || ranks(s, p) || min_p_weight(p) > 0.0f) return -1.0;
    if (!s->weighed) {   /* the weights a list would compute: kept for smp_list */
        s->row_sum = kn_exp_sum_f32(s->weight, logits, s->vocab, s->xmax);
        s->weighed = 1;
    }
    return (float)(s->weight[id] / s->row_sum);
}

int smp_list(nx_sampler *s, const nx_sampling *p, const float *logits, const int32_t **ids, const float **probs) {
    assert(logits == s->processed);
    *ids = s->ids;
    *probs = s->probs;
    s->processed = NULL;
    const int n = list(s, p, logits, s->vocab);
    s->weighed = 0;
    return n;
}

int smp_distribution(nx_sampler *s, const nx_sampling *p, float *logits,
                     const int32_t *history, int n_history, int n_input,
                     const int32_t **ids, const float **probs) {
    assert(s && p && logits && ids && probs);
    smp_process(s, p, logits, history, n_history, n_input);
    return smp_list(s, p, logits, ids, probs);
}

int smp_distribution_at(nx_sampler *s, const nx_sampling *p, float *logits, const int32_t *cand, int n_cand,
                        const int32_t *history, int n_history, int n_input, const int32_t **ids,
                        const float **probs) {
    assert(cand && ids && probs && n_cand >= 1 && n_cand <= s->vocab);
    *ids = s->ids;
    *probs = s->probs;
    s->processed = NULL, s->weighed = 0;
    bias_and_penalties(s, p, logits, history, n_history, n_input);
    for (int j = 0; j < n_cand; j++) s->gather[j] = logits[cand[j]];
    s->softmax = temper(s, p, s->gather, n_cand);
    const int n = list(s, p, s->gather, n_cand);
    for (int j = 0; j < n; j++) s->ids[j] = cand[s->ids[j]];
    return n;
}

int32_t smp_draw(const int32_t *ids, const float *probs, int n, double u) {
    assert(n >= 1);
    double cum = 0.0;
    for (int j = 0; j < n - 1; j++) {
        cum += probs[j];
        if (u < cum) return ids[j];
    }
    return ids[n - 1];
}

/* ---- Log-probabilities ------------------------------------------------------ */

void smp_logprobs(nx_sampler *s, const float *logits, int32_t id, int n_top, nx_token_logprob *out) {
    assert(s && logits && out && id >= 0 && id < s->vocab);
    const int V = s->vocab;
    const float mx = logits[kn_argmax_f32(logits, V)];   /* NaNs skipped */
    /* log p_i = x_i - (mx + log sum_j e^(x_j - mx)); an infinite max leaves
     * no distribution: NaN */
    const double lse = isfinite(mx) ? (double)mx + log(kn_sum_exp_f32(logits, V, mx)) : NAN;
    out->id = id;
    out->logprob = (float)((double)logits[id] - lse);
    /* the n_top best by the vector selection, then put in the fixed order
     * (not select_top: raw logits may hold -0, which the selection ranks
     * below +0 and the fixed order does not) */
    n_top = n_top < 0 ? 0 : n_top > NX_MAX_TOP_LOGPROBS ? NX_MAX_TOP_LOGPROBS : n_top > V ? V : n_top;
    int32_t idx[NX_MAX_TOP_LOGPROBS];
    uint64_t r[NX_MAX_TOP_LOGPROBS];
    if (n_top) kn_top_k_f32(logits, V, n_top, idx, s->tmp);
    for (int j = 0; j < n_top; j++) { /* insertion by descending rank */
        uint64_t x = rank_of(logits[idx[j]], idx[j]);
        int k = j;
        for (; k > 0 && r[k - 1] < x; k--) r[k] = r[k - 1];
        r[k] = x;
    }
    out->n_top = n_top;
    for (int j = 0; j < n_top; j++) {
        out->top_id[j] = rank_id(r[j]);
        out->top_logprob[j] = (float)((double)logits[out->top_id[j]] - lse);
    }
}

int32_t nx_sample(nx_sampler *s, const nx_sampling *p, float *logits,
                  const int32_t *history, int n_history, int n_input, int64_t position) {
    const int32_t *ids;
    const float *probs;
    int n = smp_distribution(s, p, logits, history, n_history, n_input, &ids, &probs);
    return smp_draw(ids, probs, n, smp_uniform(p->seed, position, SMP_STREAM_TARGET));
}
