/* test_act.c — the vector SiLU, sigmoid gate and softmax (kernels/act.h): the
 * twins agree bit for bit, kn_exp stays within a few ulp of e^x, SiLU and the
 * gate within a few ulp of x / (1 + e^-x) and y / (1 + e^-g) computed in
 * double, softmax close to softmax in double. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/matmul.h"
#include "test.h"

/* |a - b| in units of b's last place (b a nonzero finite float). */
static double ulps(double a, double b) { return fabs(a - b) / (nextafterf((float)fabs(b), INFINITY) - fabsf((float)b)); }

/* Inputs: a wide normal spread, a dense sweep over the clamped range and
 * past it, and the special values (zeros, infinities, NaN, subnormals, the
 * clamp edges). */
static float *make_inputs(int64_t *n_out) {
    static const float special[] = {0.0f,   -0.0f,  1e-45f, -1e-45f, 1e-38f,   -1e-38f,   1.0f,     -1.0f,
                                    87.0f,  -87.0f, 88.0f,  -88.0f,  87.5f,    -87.5f,    100.0f,   -100.0f,
                                    1e30f,  -1e30f, FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN,     0.5f};
    const int64_t ns = (int64_t)(sizeof special / sizeof *special), nsweep = 200001, nr = 4099;
    float *x = malloc((size_t)(ns + nsweep + nr) * sizeof *x);
    memcpy(x, special, sizeof special);
    for (int64_t i = 0; i < nsweep; i++) x[ns + i] = -95.0f + 190.0f * (float)i / (float)(nsweep - 1);
    nx_test_rng r = {0x5111A0E9ULL};
    for (int64_t i = 0; i < nr; i++) x[ns + nsweep + i] = nx_test_rng_normal(&r, 4.0f);
    *n_out = ns + nsweep + nr;
    return x;
}

/* The SIMD sets with twins of their own here (the avx512vnni set's 16-lane
 * SiLU and exp sums, the AVX2 ones), each tested where the CPU runs it; the
 * caller restores the newest with kn_init(0). */
static const kn_isa simd_sets[] = {KN_ISA_AVX512VNNI, KN_ISA_AVX2};
enum { N_SIMD_SETS = sizeof simd_sets / sizeof *simd_sets };

static void test_silu_twins_agree_bit_for_bit_at_every_length(void) {
    int64_t n;
    float *x = make_inputs(&n), *u = malloc((size_t)n * sizeof *u);
    float *ys = malloc((size_t)n * sizeof *ys), *yr = malloc((size_t)n * sizeof *yr);
    for (int64_t i = 0; i < n; i++) u[i] = (float)((i % 7) - 3) * 0.75f;
    if (!kn_init(0)) fprintf(stderr, "  note: no AVX2 here; the twins are compared scalar with scalar\n");
    for (int si = 0; si < N_SIMD_SETS; si++) {
        if (kn_isa_available(KN_ISA_BEST) >= KN_ISA_AVX2 && kn_select(simd_sets[si]) != simd_sets[si]) continue;
        for (int with_u = 0; with_u < 2; with_u++)
            for (int64_t len = n; len > 0; len = len > 40 ? len / 3 : len - 1) {   /* many tails */
                kn_silu_mul_f32(ys, x, with_u ? u : NULL, len);
                kn_silu_mul_f32_ref(yr, x, with_u ? u : NULL, len);
                CHECKF(memcmp(ys, yr, (size_t)len * sizeof *ys) == 0, "%s u=%d len=%lld: the twins differ",
                       kn_impl_name(), with_u, (long long)len);
            }
        memcpy(ys, x, (size_t)n * sizeof *ys);   /* in place: y == x */
        kn_silu_mul_f32(ys, ys, u, n);
        kn_silu_mul_f32_ref(yr, x, u, n);
        CHECKF(memcmp(ys, yr, (size_t)n * sizeof *ys) == 0, "%s in place: the twins differ", kn_impl_name());
    }
    kn_init(0);
    free(x), free(u), free(ys), free(yr);
}

static void test_exp_and_silu_are_within_a_few_ulp(void) {
    int64_t n;
    float *x = make_inputs(&n), *y = malloc((size_t)n * sizeof *y);
    kn_silu_mul_f32_ref(y, x, NULL, n);
    double worst_exp = 0, worst_silu = 0;
    for (int64_t i = 0; i < n; i++) {
        const double xi = x[i];
        if (isnan(xi)) {
            CHECKF(isnan(y[i]), "silu(NaN) = %g", y[i]);
            continue;
        }
        if (xi >= -87.0 && xi <= 88.0) {
            const double e = ulps(kn_exp(x[i]), exp(xi));
            worst_exp = e > worst_exp ? e : worst_exp;
        }
        if (isinf(xi)) continue;
        const double want = xi / (1.0 + exp(-xi));   /* the exact SiLU, rounded once */
        if (fabs(want) < FLT_MIN) {   /* underflows: only the magnitude bound matters */
            CHECKF(fabsf(y[i]) < 1e-30f, "silu(%g) = %g, want ~0", xi, y[i]);
            continue;
        }
        if (xi < -88.0) {   /* e^-x is +inf: silu is -0, and the exact value is below 1e-36 */
            CHECKF(y[i] == 0.0f && signbit(y[i]), "silu(%g) = %g, want -0", xi, y[i]);
            continue;
        }
        const double e = ulps(y[i], want);
        worst_silu = e > worst_silu ? e : worst_silu;
    }
    CHECKF(worst_exp <= 2.0, "kn_exp: %.2f ulp at worst", worst_exp);
    CHECKF(worst_silu <= 4.0, "silu: %.2f ulp at worst", worst_silu);
    CHECK(isinf(kn_exp(INFINITY)) && isinf(kn_exp(88.5f)) && kn_exp(-INFINITY) == kn_exp(-87.0f) && kn_exp(0.0f) == 1.0f);
    printf("  kn_exp %.2f ulp, silu %.2f ulp at worst\n", worst_exp, worst_silu);
    free(x), free(y);
}

/* The gate's twins on every tail length (in place, as attention uses it):
 * the same bits; each value within a few ulp of y / (1 + e^-g) in double;
 * a NaN gate gives NaN, g = -inf gives a zero of y's sign, g = +inf gives y. */
static void test_sigmoid_gate_twins_agree_and_follow_the_sigmoid(void) {
    int64_t n;
    float *g = make_inputs(&n), *y0 = malloc((size_t)n * sizeof *y0);
    float *ys = malloc((size_t)n * sizeof *ys), *yr = malloc((size_t)n * sizeof *yr);
    nx_test_rng r = {0x6A7E5ULL};
    for (int64_t i = 0; i < n; i++) y0[i] = nx_test_rng_normal(&r, 2.0f);
    if (!kn_init(0)) fprintf(stderr, "  note: no AVX2 here; the twins are compared scalar with scalar\n");
    for (int64_t len = n; len > 0; len = len > 40 ? len / 3 : len - 1) {   /* many tails */
        memcpy(ys, y0, (size_t)len * sizeof *ys);
        memcpy(yr, y0, (size_t)len * sizeof *yr);
        kn_sigmoid_gate_f32(ys, g, len);
        kn_sigmoid_gate_f32_ref(yr, g, len);
        CHECKF(memcmp(ys, yr, (size_t)len * sizeof *ys) == 0, "%s len=%lld: the twins differ", kn_impl_name(),
               (long long)len);
    }
    kn_init(0);
    double worst = 0;
    int special = 0;
    for (int64_t i = 0; i < n; i++) {
        const double gi = g[i], want = y0[i] / (1.0 + exp(-gi));   /* the exact gate, rounded once */
        if (isnan(gi)) special += !isnan(yr[i]);
        else if (gi == -INFINITY || gi < -104.0) special += yr[i] != 0.0f || signbit(yr[i]) != signbit(y0[i]);
        else if (gi == INFINITY) special += yr[i] != y0[i];
        else if (fabs(want) >= FLT_MIN && gi > -87.0) {   /* below -87 kn_exp stays at e^87: y e^-87 */
            const double e = ulps(yr[i], want);
            worst = e > worst ? e : worst;
        }
    }
    CHECKF(special == 0, "%d NaN, infinite or underflowing gates give the wrong value", special);
    CHECKF(worst <= 4.0, "gate: %.2f ulp at worst", worst);
    printf("  gate %.2f ulp at worst\n", worst);
    free(g), free(y0), free(ys), free(yr);
}

/* Softmax against softmax in double: each p and the sum of the row. */
#define SOFTMAX_TOL 1e-6

/* Softmax twins on rows of every length up to 40 and longer ones, scores
 * spread wide enough that some fall past kn_exp's clamp: the same bits, each
 * p within SOFTMAX_TOL (absolute) of softmax in double and the row summing to
 * 1 within it; a NaN or +inf score at the start, middle or end (in the vector
 * body or the tail) makes the whole row NaN in both twins, a -inf score only
 * its own p (0 or e^-87 of the rest). */
static void test_softmax_twins_agree_and_follow_softmax(void) {
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    static const int64_t longer[] = {255, 699, 1023};
    nx_test_rng r = {0x50F7AAULL};
    if (!kn_init(0)) fprintf(stderr, "  note: no AVX2 here; the twins are compared scalar with scalar\n");
    for (int64_t li = -40; li < (int64_t)(sizeof longer / sizeof *longer); li++) {
        const int64_t n = li < 0 ? li + 41 : longer[li];
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        double *w = malloc((size_t)n * sizeof *w), mx = -INFINITY, sum = 0, err = 0, total = 0;
        for (int64_t i = 0; i < n; i++) a[i] = b[i] = nx_test_rng_normal(&r, i % 5 ? 3.0f : 60.0f);
        for (int64_t i = 0; i < n; i++) mx = fmax(mx, (w[i] = 0.5 * a[i]));
        for (int64_t i = 0; i < n; i++) sum += (w[i] = exp(w[i] - mx));
        kn_softmax_f32(a, n, 0.5f);
        kn_softmax_f32_ref(b, n, 0.5f);
        CHECKF(memcmp(a, b, (size_t)n * sizeof *a) == 0, "%s n=%lld: the twins differ", kn_impl_name(), (long long)n);
        for (int64_t i = 0; i < n; i++) err = fmax(err, fabs(a[i] - w[i] / sum)), total += a[i];
        CHECKF(err < SOFTMAX_TOL && fabs(total - 1.0) < SOFTMAX_TOL, "n=%lld: off softmax by %g, sums to %.9f", (long long)n,
               err, total);
        const int64_t at[] = {0, n / 2, n - 1};
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
            for (size_t ai = 0; ai < sizeof at / sizeof *at; ai++) {
                for (int64_t i = 0; i < n; i++) a[i] = b[i] = (float)(i % 7);
                a[at[ai]] = b[at[ai]] = bad[k];
                kn_softmax_f32(a, n, 1.0f);
                kn_softmax_f32_ref(b, n, 1.0f);
                CHECKF(memcmp(a, b, (size_t)n * sizeof *a) == 0, "n=%lld score %g at %lld: the twins differ",
                       (long long)n, bad[k], (long long)at[ai]);
                int nans = 0;
                for (int64_t i = 0; i < n; i++) nans += isnan(a[i]);
                const int want = bad[k] < 0 && n > 1 ? 0 : (int)n;   /* -inf alone in a row of one: no max */
                CHECKF(nans == want, "n=%lld score %g at %lld: %d of the row NaN, want %d", (long long)n, bad[k],
                       (long long)at[ai], nans, want);
                if (bad[k] < 0 && n > 1) CHECK(a[at[ai]] < 1e-37f);
            }
        free(a), free(b), free(w);
    }
    kn_init(0);
}

/* kn_sum_exp_f32's twins at lengths 1-40 and longer rows (one the size of
 * the Qwen3.5 vocabulary), scores spread past kn_exp's clamp and some -inf
 * (masked tokens, which add 0), reading the row without writing it: the
 * same bits, and within 1e-6 (relative) of sum exp(x - max) in double -- so
 * a log-probability x_i - max - log(sum) is within 1e-6 of the exact one.
 * kn_exp_sum_f32 (both twins) returns the same bits and writes kn_exp of
 * each, 0 for -inf. */
static void test_sum_exp_twins_agree_and_follow_the_sum(void) {
    static const int64_t longer[] = {255, 1023, 248320};
    for (int si = 0; si < N_SIMD_SETS; si++) {
        if (kn_isa_available(KN_ISA_BEST) >= KN_ISA_AVX2 && kn_select(simd_sets[si]) != simd_sets[si]) continue;
        nx_test_rng r = {0x5E1AULL};
        for (int64_t li = -40; li < (int64_t)(sizeof longer / sizeof *longer); li++) {
            const int64_t n = li < 0 ? li + 41 : longer[li];
            float *x = malloc((size_t)n * sizeof *x), *copy = malloc((size_t)n * sizeof *copy);
            float mx = -INFINITY;
            for (int64_t i = 0; i < n; i++)
                x[i] = i % 7 == 3 ? -INFINITY : nx_test_rng_normal(&r, i % 5 ? 3.0f : 60.0f);
            for (int64_t i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
            memcpy(copy, x, (size_t)n * sizeof *x);
            double exact = 0;
            for (int64_t i = 0; i < n; i++) exact += exp((double)x[i] - mx);
            const double a = kn_sum_exp_f32(x, n, mx), b = kn_sum_exp_f32_ref(x, n, mx);
            CHECKF(memcmp(&a, &b, sizeof a) == 0, "%s n=%lld: the twins differ (%.17g, %.17g)", kn_impl_name(),
                   (long long)n, a, b);
            CHECKF(fabs(a - exact) <= 1e-6 * exact, "n=%lld: %.17g against %.17g in double", (long long)n, a, exact);
            CHECKF(memcmp(x, copy, (size_t)n * sizeof *x) == 0, "n=%lld: the row was written", (long long)n);
            float *w = malloc((size_t)n * sizeof *w), *wr = malloc((size_t)n * sizeof *wr);
            const double c = kn_exp_sum_f32(w, x, n, mx), d = kn_exp_sum_f32_ref(wr, x, n, mx);
            int each = memcmp(w, wr, (size_t)n * sizeof *w) == 0;
            for (int64_t i = 0; i < n; i++) each &= x[i] == -INFINITY ? wr[i] == 0.0f : wr[i] == kn_exp(x[i] - mx);
            CHECKF(memcmp(&c, &a, sizeof a) == 0 && memcmp(&d, &a, sizeof a) == 0 && each,
                   "%s n=%lld: kn_exp_sum_f32 %.17g / %.17g, weights %s", kn_impl_name(), (long long)n, c, d,
                   each ? "right" : "wrong");
            free(x), free(copy), free(w), free(wr);
        }
    }
    kn_init(0);
}

static const nx_test tests[] = {
    {"silu_twins_agree_bit_for_bit_at_every_length",
     "kn_silu_mul_f32 (each SIMD set the CPU runs) == the scalar twin, with and without u, every tail length, "
     "in place",
     test_silu_twins_agree_bit_for_bit_at_every_length},
    {"exp_and_silu_are_within_a_few_ulp", "kn_exp <= 2 ulp on [-87, 88], +inf above; silu <= 4 ulp, -0 below -88; NaN stays NaN",
     test_exp_and_silu_are_within_a_few_ulp},
    {"sigmoid_gate_twins_agree_and_follow_the_sigmoid",
     "kn_sigmoid_gate_f32 (AVX2) == the scalar twin in place at every tail length; <= 4 ulp of y / (1 + e^-g) in double; "
     "NaN gate -> NaN, -inf -> signed 0, +inf -> y",
     test_sigmoid_gate_twins_agree_and_follow_the_sigmoid},
    {"softmax_twins_agree_and_follow_softmax",
     "kn_softmax_f32 == its scalar twin at lengths 1-40, 255, 699, 1023; within 1e-6 of softmax in double; NaN or +inf "
     "anywhere -> NaN row, -inf -> ~0",
     test_softmax_twins_agree_and_follow_softmax},
    {"sum_exp_twins_agree_and_follow_the_sum",
     "kn_sum_exp_f32 (each SIMD set) == its scalar twin at lengths 1-40, 255, 1023, 248320, -inf adding 0; "
     "within 1e-6 of the sum in double; the row is not written; kn_exp_sum_f32's twins: the same sum, kn_exp of each (0 for -inf)",
     test_sum_exp_twins_agree_and_follow_the_sum},
};

NX_TEST_MAIN(tests)
