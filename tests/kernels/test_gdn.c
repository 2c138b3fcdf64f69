/* test_gdn.c — the Gated DeltaNet kernels (kernels/gdn.h) and the gated
 * RMSNorm (kernels/norm.h) against their formulas written out in double, in
 * both kernel modes, at odd sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "kernels/gdn.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "test.h"

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

static float *normals(nx_test_rng *r, int64_t n, float sigma) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = nx_test_rng_normal(r, sigma);
    return v;
}

/* Channels [c0, c1) of T tokens against the formula, taps [kc][ld]; the
 * window's rows lie in memory in reverse order (the kernel reads them by
 * the list); the channels outside the range keep their canary; every kernel
 * set this CPU has gives the scalar twin's bits (blocks of 64 channels and
 * their tails; AVX-512's vectors of 16 and a masked tail, kc past the 8 taps
 * it keeps in registers). */
static void test_conv_silu_follows_the_formula_on_its_channels_only(void) {
    static const struct { int T, kc; int64_t ld, c0, c1; } cases[] = {
        {1, 4, 37, 0, 37}, {3, 4, 37, 5, 29}, {5, 2, 200, 17, 200}, {2, 1, 9, 0, 9}, {4, 4, 1024, 256, 777},
        {9, 4, 300, 0, 300}, {1, 4, 6144, 1536, 3072}, {4, 4, 6144, 3072, 6144}, {3, 10, 50, 3, 47}};
    static const kn_isa sets[] = {KN_ISA_SCALAR, KN_ISA_AVX2, KN_ISA_AVX512VNNI};
    enum { N_SETS = sizeof sets / sizeof *sets };
    nx_test_rng r = {0xC0417AB5ULL};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int T = cases[ci].T, kc = cases[ci].kc, nrows = kc - 1 + T;
        const int64_t ld = cases[ci].ld, c0 = cases[ci].c0, c1 = cases[ci].c1;
        float *mem = normals(&r, nrows * ld, 1.5f), *w = normals(&r, kc * ld, 0.7f), *outs[N_SETS] = {NULL};
        const float *rows[64];
        for (int i = 0; i < nrows; i++) rows[i] = mem + (int64_t)(nrows - 1 - i) * ld;
        for (int mode = 0; mode < N_SETS; mode++) {
            if (kn_select(sets[mode]) != sets[mode]) continue;   /* a set this CPU lacks */
            float *out = outs[mode] = malloc((size_t)(T * ld) * sizeof *out);
            for (int64_t i = 0; i < T * ld; i++) out[i] = -777.0f;
            kn_conv_silu(out, rows, ld, T, w, kc, c0, c1);
            int bad = 0, touched = 0;
            for (int t = 0; t < T; t++)
                for (int64_t c = 0; c < ld; c++) {
                    const float got = out[t * ld + c];
                    if (c < c0 || c >= c1) {
                        touched += got != -777.0f;
                        continue;
                    }
                    double acc = 0, mag = 0;
                    for (int j = 0; j < kc; j++) {
                        acc += (double)w[j * ld + c] * rows[t + j][c];
                        mag += fabs((double)w[j * ld + c] * rows[t + j][c]);
                    }
                    bad += fabs(got - silu_d(acc)) > 1e-6 * (mag + 1e-3);
                }
            CHECKF(bad == 0 && touched == 0, "%s case %zu: %d off the formula, %d outside [c0, c1) written",
                   kn_impl_name(), ci, bad, touched);
        }
        for (int mode = 1; mode < N_SETS; mode++)
            CHECKF(!outs[mode] || memcmp(outs[0], outs[mode], (size_t)(T * ld) * sizeof(float)) == 0,
                   "case %zu: set %d differs from the scalar twin", ci, (int)sets[mode]);
        free(mem), free(w);
        for (int mode = 0; mode < N_SETS; mode++) free(outs[mode]);
    }
    kn_init(0);
}

/* Several tokens of the recurrence on one head against
 *   S <- alpha S;  m = S k;  delta = beta (v - m);  S <- S + delta k^T;  o = S q
 * in double (S[dv][dk]), with normalised k and q as the model feeds them;
 * odd steps write the new state out of place (as a verify's first token does),
 * which must give the in-place bits: a second state follows in place. */
static void test_gated_delta_steps_follow_the_recurrence(void) {
    static const int dims[][2] = {{7, 5}, {33, 17}, {128, 128}, {64, 96}};
    nx_test_rng r = {0xDE17A5ULL};
    for (int mode = 0; mode < 2; mode++) {
        kn_init(mode);
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            const int dk = dims[di][0], dv = dims[di][1];
            float *S = normals(&r, (int64_t)dk * dv, 0.3f), *o = malloc((size_t)dv * sizeof *o);
            float *S2 = malloc((size_t)dk * dv * sizeof *S2), *Sx = malloc((size_t)dk * dv * sizeof *Sx);
            float *o2 = malloc((size_t)dv * sizeof *o2);
            memcpy(S2, S, (size_t)dk * dv * sizeof *S2);
            int same = 1;
            double *Sd = malloc((size_t)dk * dv * sizeof *Sd), *od = malloc((size_t)dv * sizeof *od);
            for (int64_t i = 0; i < (int64_t)dk * dv; i++) Sd[i] = S[i];
            double worst = 0;
            for (int step = 0; step < 6; step++) {
                float *q = normals(&r, dk, 1.0f), *k = normals(&r, dk, 1.0f), *v = normals(&r, dv, 1.0f);
                double nq = 0, nk = 0;
                for (int j = 0; j < dk; j++) nq += (double)q[j] * q[j], nk += (double)k[j] * k[j];
                for (int j = 0; j < dk; j++) q[j] = (float)(q[j] / sqrt(nq) / sqrt((double)dk)), k[j] = (float)(k[j] / sqrt(nk));
                const float alpha = 0.6f + 0.06f * (float)step, beta = 0.9f - 0.1f * (float)step;
                if (step % 2) {   /* out of place, then back */
                    kn_gated_delta_step(Sx, S, q, k, v, alpha, beta, o, dk, dv);
                    memcpy(S, Sx, (size_t)dk * dv * sizeof *S);
                } else {
                    kn_gated_delta_step(S, S, q, k, v, alpha, beta, o, dk, dv);
                }
                kn_gated_delta_step(S2, S2, q, k, v, alpha, beta, o2, dk, dv);
                same &= memcmp(S, S2, (size_t)dk * dv * sizeof *S) == 0 && memcmp(o, o2, (size_t)dv * sizeof *o) == 0;
                for (int i = 0; i < dv; i++) {
                    double *row = Sd + (int64_t)i * dk, m = 0;
                    for (int j = 0; j < dk; j++) row[j] *= alpha, m += row[j] * k[j];
                    const double delta = beta * (v[i] - m);
                    od[i] = 0;
                    for (int j = 0; j < dk; j++) row[j] += delta * k[j], od[i] += row[j] * q[j];
                }
                for (int i = 0; i < dv; i++) worst = fmax(worst, fabs(o[i] - od[i]));
                for (int64_t i = 0; i < (int64_t)dk * dv; i++) worst = fmax(worst, fabs(S[i] - Sd[i]));
                free(q), free(k), free(v);
            }
            CHECKF(worst < 2e-5, "%s dk=%d dv=%d: %.3g off the recurrence", kn_impl_name(), dk, dv, worst);
            CHECKF(same, "%s dk=%d dv=%d: out of place differs from in place", kn_impl_name(), dk, dv);
            free(S), free(o), free(Sd), free(od), free(S2), free(Sx), free(o2);
        }
    }
    kn_init(0);
}

/* The AVX-512 step (16-lane vectors; dk = 128 with the row in registers,
 * other multiples of 32 in two passes, the rest row by row) gives the AVX2
 * set's bits: states and outputs over several steps, in place and out of
 * place, where the CPU has both sets. */
static void test_gated_delta_simd_sets_agree_bit_for_bit(void) {
    static const int dims[][2] = {{128, 128}, {128, 7}, {64, 96}, {96, 40}, {32, 3}, {33, 17}, {136, 5}};
    nx_test_rng r = {0x5EEDDE17ULL};
    if (kn_select(KN_ISA_AVX512VNNI) != KN_ISA_AVX512VNNI) {
        fprintf(stderr, "  note: this CPU lacks the avx512vnni kernels; their gated delta check did not run\n");
        kn_init(0);
        return;
    }
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        const int dk = dims[di][0], dv = dims[di][1];
        const size_t bytes = (size_t)dk * (size_t)dv * sizeof(float);
        float *S0 = normals(&r, (int64_t)dk * dv, 0.3f), *Sa = malloc(bytes), *Sb = malloc(bytes), *Xa = malloc(bytes),
              *Xb = malloc(bytes), *oa = malloc((size_t)dv * sizeof *oa), *ob = malloc((size_t)dv * sizeof *ob);
        memcpy(Sa, S0, bytes), memcpy(Sb, S0, bytes);
        int same = 1;
        for (int step = 0; step < 4; step++) {
            float *q = normals(&r, dk, 0.1f), *k = normals(&r, dk, 0.1f), *v = normals(&r, dv, 1.0f);
            const float alpha = 0.9f - 0.05f * (float)step, beta = 0.3f + 0.1f * (float)step;
            float *outa = step % 2 ? Xa : Sa, *outb = step % 2 ? Xb : Sb;   /* odd steps out of place */
            kn_select(KN_ISA_AVX2);
            kn_gated_delta_step(outa, Sa, q, k, v, alpha, beta, oa, dk, dv);
            kn_select(KN_ISA_AVX512VNNI);
            kn_gated_delta_step(outb, Sb, q, k, v, alpha, beta, ob, dk, dv);
            same &= memcmp(outa, outb, bytes) == 0 && memcmp(oa, ob, (size_t)dv * sizeof *oa) == 0;
            if (step % 2) memcpy(Sa, Xa, bytes), memcpy(Sb, Xb, bytes);
            free(q), free(k), free(v);
        }
        CHECKF(same, "dk=%d dv=%d: avx2 and avx512vnni differ", dk, dv);
        free(S0), free(Sa), free(Sb), free(Xa), free(Xb), free(oa), free(ob);
    }
    kn_init(0);
}

/* Runs check(r, dk, dv) for each shape dims[i] = {dk, dv} under every
 * kernel set this CPU runs (at least the scalar one), then restores the
 * default set. */
static void each_set_and_shape(const int (*dims)[2], size_t n, nx_test_rng *r, void (*check)(nx_test_rng *, int, int)) {
    int sets = 0;
    for (int isa = KN_ISA_SCALAR; isa <= KN_ISA_BEST; isa++) {
        if (kn_select((kn_isa)isa) != (kn_isa)isa) continue;
        sets++;
        for (size_t i = 0; i < n; i++) check(r, dims[i][0], dims[i][1]);
    }
    CHECK(sets >= 1);
    kn_init(0);
}

/* kn_gated_delta_steps == T kn_gated_delta_step calls (the first from S_in,
 * the rest in place), state and every token's o bit for bit: T 1, 2, 3, 5,
 * in place and not, streamed or not, into an aligned out and one a float
 * off, with a next state to prefetch (left as it was) and without, tokens
 * strided as the model lays them; every set this CPU runs and every path
 * of the AVX-512 steps (dk = 128, other multiples of 32 and those too long
 * for a block, the rest; blocks of rows, their groups of 16 and the rows
 * past them, blocks of one group), and nothing written around
 * the state or past the outputs. And the state never reads q (only o
 * does): with k passed as q too the state keeps its bits, and ldo 0 sends
 * every token's o to one row. */
static void steps_equal_single_steps(nx_test_rng *r, int dk, int dv) {
    static const int Ts[] = {1, 2, 3, 5};
    const int64_t ld = 2 * dk + dv + 3, ldo = dv + 1, n = (int64_t)dk * dv;
    const size_t bytes = (size_t)n * sizeof(float);
    float *S0 = normals(r, n, 0.3f), *want = malloc(bytes), *mem = nx_alloc_aligned(bytes + 64);
    float *qkv = normals(r, 5 * ld, 0.1f), *o_want = malloc((size_t)(5 * ldo) * sizeof(float));
    float *o = malloc((size_t)(5 * ldo) * sizeof(float)), alpha[5], beta[5];
    float *next = normals(r, n, 0.3f), *next_was = malloc(bytes);   /* S_next: hinted at only */
    memcpy(next_was, next, bytes);
    for (int t = 0; t < 5; t++) alpha[t] = 0.95f - 0.07f * (float)t, beta[t] = 0.2f + 0.15f * (float)t;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        const int T = Ts[ti];
        for (int t = 0; t < T; t++) {
            const float *x = qkv + t * ld;
            kn_gated_delta_step(want, t ? want : S0, x, x + dk, x + 2 * dk, alpha[t], beta[t], o_want + t * ldo,
                                dk, dv);
        }
        /* mode bit 0: stream, 1: in place, 2: out a float off and a
         * next state to prefetch, 3: k as q too, every o into one
         * row */
        for (int mode = 0; mode < 16; mode++) {
            const int stream = mode & 1, in_place = mode >> 1 & 1, k_as_q = mode >> 3;
            float *out = mem + (mode >> 2 & 1);
            memset(mem, 0xa5, bytes + 64);
            memcpy(out, S0, bytes);
            memset(o, 0xff, (size_t)(5 * ldo) * sizeof(float));
            const kn_delta_tokens tk = {T, k_as_q ? qkv + dk : qkv, qkv + dk, qkv + 2 * dk, ld, alpha, beta, o,
                                        k_as_q ? 0 : ldo, NULL, 0};
            kn_gated_delta_steps(out, in_place ? out : S0, mode & 4 ? next : NULL, &tk, dk, dv, stream);
            kn_store_fence();
            int same = memcmp(out, want, bytes) == 0 && memcmp(next, next_was, bytes) == 0;
            for (int t = 0; t < T && !k_as_q; t++)
                same &= memcmp(o + t * ldo, o_want + t * ldo, (size_t)dv * sizeof(float)) == 0;
            /* nothing written around the state, past each token's dv
             * outputs, nor past the last token */
            const unsigned char *m0 = (const unsigned char *)mem, *s0 = (const unsigned char *)out;
            for (const unsigned char *b = m0; b < m0 + bytes + 64; b++)
                if (b < s0 || b >= s0 + bytes) same &= *b == 0xa5;
            const unsigned char *ob = (const unsigned char *)o;
            for (int64_t b = 0; b < 5 * ldo * (int64_t)sizeof(float); b++) {
                const int64_t e = b / (int64_t)sizeof(float), t = e / ldo;
                const int written = k_as_q ? e < dv : t < T && e % ldo < dv;
                if (!written) same &= ob[b] == 0xff;
            }
            CHECKF(same, "%s dk=%d dv=%d T=%d mode %d: steps differ from single steps", kn_impl_name(), dk, dv, T,
                   mode);
        }
    }
    free(S0), free(want), free(qkv), free(o_want), free(o), free(next), free(next_was);
    nx_free_aligned(mem);
}

static void test_gated_delta_steps_equal_single_steps(void) {
    static const int dims[][2] = {{128, 128}, {128, 7},  {128, 37}, {128, 50}, {128, 16}, {64, 96}, {96, 40},
                                  {32, 40},   {192, 21}, {256, 16}, {32, 3},   {33, 17},  {4128, 3}};
    nx_test_rng r = {0x57E95ULL};
    each_set_and_shape(dims, sizeof dims / sizeof *dims, &r, steps_equal_single_steps);
}

/* A verify's record and a rollback's replay: kn_gated_delta_steps with
 * kn_delta_tokens.delta set writes each token's delta (dv floats a token,
 * nothing else in the record's rows, the state and outputs as without it),
 * and kn_gated_delta_replay of the first keep tokens from the state before
 * them gives the bits of keep single steps, for every keep <= T: T 1, 2, 3,
 * 5, streamed or not, deltas laid out as the model's record lays them (k and
 * delta in one row of ld floats); every set this CPU runs, and every path
 * of both kernels (dk = 128 with its row in registers, other multiples of
 * 16 and 32, tails of 8 and 16 lanes, blocks and whole heads, rows too long
 * for a block); each set's replay == the scalar twin's, bit for bit. */
static void replay_gives_the_steps_state(nx_test_rng *r, int dk, int dv) {
    static const int Ts[] = {1, 2, 3, 5};
    /* a record row: k (dk) | delta (dv) | slack, as model.h's; row 0's
     * deltas 64-byte aligned where dk is a multiple of 16, row 1's not */
    const int64_t n = (int64_t)dk * dv, ld = dk + dv + 5, ldo = dv + 1;
    const size_t bytes = (size_t)n * sizeof(float);
    float *S0 = normals(r, n, 0.3f), *want = malloc(6 * bytes), *S = malloc(bytes), *S_ref = malloc(bytes);
    float *out = nx_alloc_aligned(bytes), *out_plain = malloc(bytes), *o = malloc((size_t)(5 * ldo) * sizeof(float));
    float *o_plain = malloc((size_t)(5 * ldo) * sizeof(float)), *o_steps = malloc((size_t)(5 * ldo) * sizeof(float));
    /* token t's q | k | v at tok + t * tld; the record keeps k */
    const int64_t tld = 2 * dk + dv + 3;
    float *tok = normals(r, 5 * tld, 0.1f), *rec = nx_alloc_aligned((size_t)(5 * ld) * sizeof(float));
    float alpha[5], beta[5];
    for (int t = 0; t < 5; t++) alpha[t] = 0.93f - 0.05f * (float)t, beta[t] = 0.3f + 0.12f * (float)t;
    memcpy(want, S0, bytes);   /* want + t * n: the state after t single steps, o_plain their outputs */
    for (int t = 0; t < 5; t++)
        kn_gated_delta_step(want + (t + 1) * n, want + t * n, tok + t * tld, tok + t * tld + dk,
                            tok + t * tld + 2 * dk, alpha[t], beta[t], o_plain + t * ldo, dk, dv);
    for (int ti = 0; ti < (int)(sizeof Ts / sizeof *Ts); ti++) {
        const int T = Ts[ti];
        for (int stream = 0; stream < 2; stream++) {
            for (int64_t i = 0; i < 5 * ld; i++) rec[i] = -555.0f;
            for (int t = 0; t < T; t++) memcpy(rec + t * ld, tok + t * tld + dk, (size_t)dk * sizeof(float));
            kn_delta_tokens tk = {T, tok, tok + dk, tok + 2 * dk, tld, alpha, beta, o_steps, ldo, NULL, 0};
            kn_gated_delta_steps(out_plain, S0, NULL, &tk, dk, dv, 0);   /* without a record */
            tk.o = o, tk.delta = rec + dk, tk.ldd = ld;
            kn_gated_delta_steps(out, S0, NULL, &tk, dk, dv, stream);
            kn_store_fence();
            int same = memcmp(out, out_plain, bytes) == 0 && memcmp(out, want + T * n, bytes) == 0;
            for (int t = 0; t < T; t++)
                same &= memcmp(o + t * ldo, o_plain + t * ldo, (size_t)dv * sizeof(float)) == 0 &&
                        memcmp(o_steps + t * ldo, o + t * ldo, (size_t)dv * sizeof(float)) == 0;
            int stray = 0;   /* nothing in the record but each token's dv deltas */
            for (int t = 0; t < 5; t++)
                for (int64_t e = dk; e < ld; e++) stray += (t >= T || e >= dk + dv) && rec[t * ld + e] != -555.0f;
            CHECKF(same && stray == 0, "%s dk=%d dv=%d T=%d stream %d: the steps differ with the record, or "
                   "from single steps (%d stray writes)", kn_impl_name(), dk, dv, T, stream, stray);
            for (int keep = 1; keep <= T; keep++) {
                memcpy(S, S0, bytes);
                kn_gated_delta_replay(S, keep % 2 ? S0 : NULL, keep, rec, rec + dk, ld, alpha, dk, dv);
                CHECKF(memcmp(S, want + keep * n, bytes) == 0, "%s dk=%d dv=%d T=%d keep %d stream %d: replay "
                       "differs from %d single steps", kn_impl_name(), dk, dv, T, keep, stream, keep);
                memcpy(S_ref, S0, bytes);   /* the scalar twin: the same fused multiply-adds, the same bits */
                kn_gated_delta_replay_ref(S_ref, keep % 2 ? S0 : NULL, keep, rec, rec + dk, ld, alpha, dk, dv);
                CHECKF(memcmp(S, S_ref, bytes) == 0, "%s dk=%d dv=%d T=%d keep %d: replay differs from its scalar twin",
                       kn_impl_name(), dk, dv, T, keep);
            }
        }
    }
    free(S0), free(want), free(S), free(S_ref), free(out_plain), free(o), free(o_plain), free(o_steps), free(tok);
    nx_free_aligned(out), nx_free_aligned(rec);
}

static void test_gated_delta_replay_gives_the_steps_state(void) {
    static const int dims[][2] = {{128, 128}, {128, 37}, {64, 96}, {96, 40}, {32, 3},
                                  {33, 17},   {136, 5},  {8, 9},   {4128, 3}};
    nx_test_rng r = {0x2E91A7ULL};
    each_set_and_shape(dims, sizeof dims / sizeof *dims, &r, replay_gives_the_steps_state);
}

/* y = x rsqrt(mean(x^2) + eps) w silu(z), also in place, across the
 * norm's 256-element SiLU blocks. */
static void test_gated_rmsnorm_follows_the_formula(void) {
    static const int64_t lens[] = {1, 7, 128, 256, 300, 777};
    nx_test_rng r = {0x6A7EDULL};
    for (int mode = 0; mode < 2; mode++) {
        kn_init(mode);
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int64_t n = lens[li];
            float *x = normals(&r, n, 2.0f), *z = normals(&r, n, 3.0f), *w = normals(&r, n, 1.0f);
            float *y = malloc((size_t)n * sizeof *y), *x2 = malloc((size_t)n * sizeof *x2);
            memcpy(x2, x, (size_t)n * sizeof *x2);
            kn_rmsnorm_gated(y, x, z, w, n, 1e-6f);
            kn_rmsnorm_gated(x2, x2, z, w, n, 1e-6f);
            double ss = 0;
            for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
            const double rr = 1.0 / sqrt(ss / (double)n + 1e-6);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                const double want = x[i] * rr * w[i] * silu_d(z[i]);
                bad += fabs(y[i] - want) > 1e-6 * (fabs(want) + 1e-6);
            }
            CHECKF(bad == 0, "%s n=%lld: %d off the formula", kn_impl_name(), (long long)n, bad);
            CHECKF(memcmp(x2, y, (size_t)n * sizeof *y) == 0, "%s n=%lld: in place differs", kn_impl_name(), (long long)n);
            free(x), free(z), free(w), free(y), free(x2);
        }
    }
    kn_init(0);
}

static const nx_test tests[] = {
    {"conv_silu_follows_the_formula_on_its_channels_only",
     "silu(sum_j w[j][c] rows[t+j][c]) for c in [c0, c1), nothing else written; scalar, AVX2 and AVX-512 sets bit for bit",
     test_conv_silu_follows_the_formula_on_its_channels_only},
    {"gated_delta_steps_follow_the_recurrence", "6 steps of the gated delta rule within 2e-5 of double; odd dk, dv",
     test_gated_delta_steps_follow_the_recurrence},
    {"gated_delta_simd_sets_agree_bit_for_bit",
     "avx512vnni step == avx2 step bit for bit (S and o), in and out of place, dk 128 / other multiples of 32 / rest",
     test_gated_delta_simd_sets_agree_bit_for_bit},
    {"gated_delta_steps_equal_single_steps",
     "T steps at once == T single steps bit for bit (S, every o): T 1-5, in place or not, streamed or not, every set; "
     "the state the same with q = k",
     test_gated_delta_steps_equal_single_steps},
    {"gated_delta_replay_gives_the_steps_state",
     "steps recording deltas == steps without (S, o, nothing else written); a replay of keep <= T recorded "
     "updates == keep single steps and == the scalar replay, bit for bit; T 1-5, streamed or not, every set",
     test_gated_delta_replay_gives_the_steps_state},
    {"gated_rmsnorm_follows_the_formula", "x rsqrt(mean x^2 + eps) w silu(z), in place too, past 256 elements",
     test_gated_rmsnorm_follows_the_formula},
};

NX_TEST_MAIN(tests)
