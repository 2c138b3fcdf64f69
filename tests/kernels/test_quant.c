/* test_quant.c — MLX affine quantized weights (quant.h): the quantizer and the
 * bit stream it packs, read back by an independent bit-at-a-time reader; the
 * dequantization error bound; the quantizer twins byte for byte; both matmul
 * twins against the dense twins on the dequantized matrix (bit for bit) and
 * against each other; the bit-exactness contract of matmul.h; kn_mat_row_f32
 * on affine rows.
 *
 * Every bit width {2,3,4,5,6,8} x group {32,64,128} x scale type
 * {f32,bf16,f16} is covered, with odd row counts (1, 7, 13) and cols of 1, 3
 * and 5 groups. Weights are ~N(0, 0.05) like the model's, activations ~N(0, 1),
 * from a fixed-seed xorshift generator. Codes are allocated at their exact size
 * so the sanitize build catches a read past the last row. Tests that need the
 * SIMD twin fall back to scalar-vs-scalar (and say so) on a CPU without
 * AVX2+FMA+F16C. */
#include <stdint.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "test.h"
#include "gathered.h"

/* SIMD against the double-accumulating reference, relative to sum_c |w_c x_c|.
 * Both twins dequantize each weight with the same single f32 fma, so only the
 * summation differs, as for f32 weights in test_matmul.c: each lane adds at most
 * n/32 = 20 products here (cols <= 640), then 5 combine levels and the final
 * cast, about 26 roundings of 2^-24 worst case. */
#define KN_TOL_AFFINE 4e-6
/* The dequantization error bound of kn_affine_quantize_row: |w' - w| <= scale/2
 * from rounding to the nearest code (the grid covers [min, max], so nothing
 * clamps), plus the f32 rounding of w' = fma(scale, q, bias), at most 2^-24|w'|;
 * the slack covers the double arithmetic of the test's own check. */
#define QUANT_ROUND_SLACK 0x1p-23

#define WEIGHT_SIGMA 0.05f   /* model weights are ~N(0, 0.05)       */
#define ACT_SIGMA 1.0f       /* activations after a norm are ~N(0, 1) */
#define MAX_T 16             /* verify batches up to 16 tokens      */
#define MAX_ROWS 13

static const int bit_widths[] = {2, 3, 4, 5, 6, 8};
static const int groups[] = {32, 64, 128};
static const nx_dtype sdtypes[] = {NX_DT_F32, NX_DT_BF16, NX_DT_F16};
static const int64_t row_counts[] = {1, 7, 13};
static const int64_t groups_per_row[] = {1, 3, 5};
#define N_BITS 6
#define N_GROUPS 3
#define N_SD 3
#define N_SHAPES 3

/* ---- Inputs ------------------------------------------------------------ */

/* Inputs come from nx_test_rng (test.h). */

static float *make_acts(nx_test_rng *r, int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = nx_test_rng_normal(r, ACT_SIGMA);
    return x;
}

/* An affine matrix quantized from f32 weights ~N(0, sigma), which it keeps in
 * orig. Every buffer has its exact size. Free with free_affine. */
typedef struct {
    kn_mat m;
    float *orig;   /* [rows, cols] the weights before quantization */
    void *packed;  /* lanes' packed codes once use_int8_variant made them, or NULL */
} qmat;

static qmat make_affine(nx_test_rng *r, int64_t rows, int64_t cols, int bits, int group, nx_dtype sdt, float sigma) {
    const int64_t words = kn_affine_row_words(cols, bits), ng = cols / group;
    const size_t ss = nx_dtype_size(sdt);
    qmat q;
    q.orig = malloc((size_t)(rows * cols) * sizeof(float));
    uint32_t *codes = malloc((size_t)(rows * words) * sizeof *codes);
    char *sc = malloc((size_t)(rows * ng) * ss), *bi = malloc((size_t)(rows * ng) * ss);
    for (int64_t i = 0; i < rows * cols; i++) q.orig[i] = nx_test_rng_normal(r, sigma);
    for (int64_t i = 0; i < rows; i++)
        kn_affine_quantize_row(q.orig + i * cols, cols, bits, group, sdt, codes + i * words, sc + (size_t)(i * ng) * ss,
                               bi + (size_t)(i * ng) * ss);
    q.m = (kn_mat){.data = codes, .dtype = NX_DT_U32, .rows = rows, .cols = cols, .bits = bits, .group = group,
                   .scales = sc, .biases = bi, .sdtype = sdt};
    q.packed = NULL;
    return q;
}

static void free_affine(qmat *q) {
    free(q->packed);
    free((void *)q->m.data);
    free((void *)q->m.scales);
    free((void *)q->m.biases);
    free(q->orig);
}

/* ---- An independent reader --------------------------------------------------
 * Straight from the format: stream bit k of row r is bit k % 32 of word
 * r * cols * bits / 32 + k / 32, and element c is bits c*bits .. c*bits+bits-1
 * of the stream, low bit first. Read one bit at a time, nothing shared with
 * quant.c. */

static unsigned naive_code(const kn_mat *w, int64_t r, int64_t c) {
    const uint32_t *words = w->data;
    const int64_t row_words = w->cols * w->bits / 32;
    unsigned q = 0;
    for (int j = 0; j < w->bits; j++) {
        int64_t k = c * w->bits + j;
        q |= ((words[r * row_words + k / 32] >> (k % 32)) & 1u) << j;
    }
    return q;
}

static float naive_sd(const void *p, nx_dtype dt, int64_t i) {
    float v;
    kn_to_f32(dt, (const char *)p + (size_t)i * nx_dtype_size(dt), &v, 1);
    return v;
}

static float naive_scale(const kn_mat *w, int64_t r, int64_t c) {
    return naive_sd(w->scales, w->sdtype, r * (w->cols / w->group) + c / w->group);
}

static float naive_bias(const kn_mat *w, int64_t r, int64_t c) {
    return naive_sd(w->biases, w->sdtype, r * (w->cols / w->group) + c / w->group);
}

/* The dequantized weight by the definition: one f32 fma. */
static float naive_weight(const kn_mat *w, int64_t r, int64_t c) {
    return fmaf(naive_scale(w, r, c), (float)naive_code(w, r, c), naive_bias(w, r, c));
}

/* The dense f32 matrix of naive_weight; free .data with free(). */
static kn_mat dequantized(const kn_mat *w) {
    float *d = malloc((size_t)(w->rows * w->cols) * sizeof *d);
    for (int64_t r = 0; r < w->rows; r++)
        for (int64_t c = 0; c < w->cols; c++) d[r * w->cols + c] = naive_weight(w, r, c);
    return (kn_mat){.data = d, .dtype = NX_DT_F32, .rows = w->rows, .cols = w->cols};
}

/* Packs codes[0..n) into words, one bit at a time (the reader's mirror). */
static void naive_pack(const unsigned *codes, int64_t n, int bits, uint32_t *words) {
    memset(words, 0, (size_t)(n * bits / 32) * sizeof *words);
    for (int64_t c = 0; c < n; c++)
        for (int j = 0; j < bits; j++) {
            int64_t k = c * bits + j;
            words[k / 32] |= (uint32_t)((codes[c] >> j) & 1u) << (k % 32);
        }
}

/* Turns on the SIMD twin; returns 0 (and says so once) where the CPU lacks it. */
static int use_simd(void) {
    static int warned;
    int on = kn_init(0);
    if (!on && !warned++) fprintf(stderr, "  note: no AVX2+FMA+F16C here; SIMD checks compare scalar with scalar\n");
    return on;
}

static void set_impl(int simd) {
    if (simd) use_simd();
    else kn_init(1);
}

/* The int8 product has a kernel per SIMD set (quant_qx.inc); its tests run
 * the scalar definition and each set this CPU has, newest first. */
static const kn_isa int8_isas[] = {KN_ISA_AVX512VNNI, KN_ISA_AVXVNNI, KN_ISA_AVX2, KN_ISA_SCALAR};
enum { N_INT8_ISAS = sizeof int8_isas / sizeof *int8_isas };

/* Selects int8_isas[k]; returns 0, and says so once per set, where the CPU
 * lacks it. */
static int use_int8_isa(int k) {
    static const char *const names[] = {"avx512vnni", "avxvnni", "avx2", "scalar"};
    static int warned[N_INT8_ISAS];
    if (kn_select(int8_isas[k]) == int8_isas[k]) return 1;
    if (!warned[k]++) fprintf(stderr, "  note: this CPU lacks the %s kernels; their int8 checks did not run\n", names[k]);
    return 0;
}

/* The int8 checks run every kernel set on the codes as stored and each SIMD
 * set on lanes' packed codes too (kn_lanes_pack): int8_variants(w) runs,
 * variant v < N_INT8_ISAS the set int8_isas[v] as stored, beyond it the
 * SIMD sets in order on packed codes. */
static int int8_variants(const kn_mat *w) { return kn_qx_lanes(w) ? 2 * N_INT8_ISAS - 1 : N_INT8_ISAS; }

/* Selects variant v for w: its kernel set and w->packed (made once into
 * *packed, which the caller frees). Returns 0 where the CPU lacks the set. */
static int use_int8_variant(kn_mat *w, int v, void **packed) {
    w->packed = NULL;
    if (v < N_INT8_ISAS) return use_int8_isa(v);
    if (!*packed) {
        *packed = malloc(kn_lanes_packed_bytes(w));
        kn_lanes_pack(w, *packed, 0, w->rows);
    }
    w->packed = *packed;
    return use_int8_isa(v - N_INT8_ISAS);
}

/* "avx2 q4 g64 sd=BF16 7x192"; with_impl: whether to name the active twin
 * (and packed codes). */
static void describe(char *buf, size_t n, const kn_mat *w, int with_impl) {
    snprintf(buf, n, "%s%sq%d g%d sd=%s %lldx%lld%s", with_impl ? kn_impl_name() : "", with_impl ? " " : "", w->bits,
             w->group, nx_dtype_name(w->sdtype), (long long)w->rows, (long long)w->cols,
             with_impl && w->packed ? " packed" : "");
}

/* ---- Tests ---------------------------------------------------------------- */

static void test_hand_packed_words_decode_as_the_spec_says(void) {
    /* 4-bit: element i of a word is bits [4i, 4i+4), first in the low bits;
     * 8-bit likewise by bytes; the spec's 3-bit example crosses a byte. */
    const float one = 1.0f, zero = 0.0f;
    uint32_t w4[4] = {0x76543210u, 0xFEDCBA98u, 0, 0};
    kn_mat m = {.data = w4, .dtype = NX_DT_U32, .rows = 1, .cols = 32, .bits = 4, .group = 32, .scales = &one,
                .biases = &zero, .sdtype = NX_DT_F32};
    float out[32];
    kn_mat_row_f32(&m, 0, out);
    for (int i = 0; i < 16; i++) CHECKF(out[i] == (float)i, "4-bit element %d = %g", i, out[i]);

    uint32_t w8[8] = {0x04030201u, 0xFFFE0000u};
    m.data = w8, m.bits = 8;
    kn_mat_row_f32(&m, 0, out);
    CHECK(out[0] == 1 && out[1] == 2 && out[2] == 3 && out[3] == 4);
    CHECK(out[4] == 0 && out[5] == 0 && out[6] == 254 && out[7] == 255);

    /* byte0 = 0xD1 = 0b11'010'001, byte1 = 0x01: elements 1, 2, then
     * (byte0 >> 6) | ((byte1 & 1) << 2) = 3 | 4 = 7. */
    uint32_t w3[3] = {0x000001D1u, 0, 0};
    m.data = w3, m.bits = 3;
    kn_mat_row_f32(&m, 0, out);
    CHECK(out[0] == 1 && out[1] == 2 && out[2] == 7 && out[3] == 0);

    /* And through both matmul twins: X = unit rows, so Y[t][0] = W[0][t]. */
    float x[3 * 32] = {0}, y[3];
    for (int t = 0; t < 3; t++) x[t * 32 + t] = 1.0f;
    for (int simd = 1; simd >= 0; simd--) {
        set_impl(simd);
        kn_matmul_rows(&m, x, 32, 3, y, 1, 0, 1);
        CHECKF(y[0] == 1 && y[1] == 2 && y[2] == 7, "%s: %g %g %g", kn_impl_name(), y[0], y[1], y[2]);
    }
    kn_init(0);
}

/* Codes drawn at random, packed by the naive writer, with scale 1 and bias 0:
 * every element comes back as its code from kn_mat_row_f32 and from both
 * matmul twins (unit activations pick single columns), for every bit width. */
static void test_every_bit_width_unpacks_random_codes_at_every_position(void) {
    enum { COLS = 128, T = 4 };
    nx_test_rng r = {0x243F6A8885A308D3ULL};
    for (int b = 0; b < N_BITS; b++) {
        const int bits = bit_widths[b];
        unsigned codes[3 * COLS];
        uint32_t words[3 * COLS * 8 / 32];
        float ones[3], zeros[3] = {0, 0, 0}, out[COLS];
        for (int i = 0; i < 3 * COLS; i++) codes[i] = (unsigned)(nx_test_rng_next(&r) >> 40) & ((1u << bits) - 1);
        for (int i = 0; i < 3; i++) ones[i] = 1.0f;
        naive_pack(codes, 3 * COLS, bits, words);
        kn_mat m = {.data = words, .dtype = NX_DT_U32, .rows = 3, .cols = COLS, .bits = bits, .group = 128,
                    .scales = ones, .biases = zeros, .sdtype = NX_DT_F32};
        int bad = 0;
        for (int row = 0; row < 3; row++) {
            kn_mat_row_f32(&m, row, out);
            for (int c = 0; c < COLS; c++) bad += out[c] != (float)codes[row * COLS + c];
        }
        CHECKF(bad == 0, "q%d: kn_mat_row_f32 got %d of %d codes wrong", bits, bad, 3 * COLS);
        for (int simd = 1; simd >= 0; simd--) {
            set_impl(simd);
            for (int c0 = 0; c0 < COLS; c0 += T) {
                float x[T * COLS] = {0}, y[T * 3];
                for (int t = 0; t < T; t++) x[t * COLS + c0 + t] = 1.0f;
                kn_matmul_rows(&m, x, COLS, T, y, 3, 0, 3);
                for (int t = 0; t < T; t++)
                    for (int row = 0; row < 3; row++)
                        if (y[t * 3 + row] != (float)codes[row * COLS + c0 + t] && bad++ < 5)
                            CHECKF(0, "%s q%d: W[%d][%d] = %g, want %u", kn_impl_name(), bits, row, c0 + t,
                                   y[t * 3 + row], codes[row * COLS + c0 + t]);
            }
        }
        CHECKF(bad == 0, "q%d: %d products wrong", bits, bad);
    }
    kn_init(0);
}

/* For every format and shape: the quantizer's grid covers each group (bias <=
 * min, bias + scale * nbins >= max, scale > 0), every dequantized weight is
 * within scale/2 of the original (plus the fma's rounding), and
 * kn_mat_row_f32 returns the naive reader's weights bit for bit. */
static void test_quantizer_round_trips_within_half_a_scale(void) {
    nx_test_rng r = {0x13198A2E03707344ULL};
    static const float sigmas[] = {WEIGHT_SIGMA, 1e-4f, 30.0f};   /* model range; f16 subnormal scales; large */
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++)
            for (int s = 0; s < N_SD; s++)
                for (int sh = 0; sh < N_SHAPES; sh++) {
                    const int bits = bit_widths[b], group = groups[g];
                    const double nbins = (double)((1u << bits) - 1);
                    qmat q = make_affine(&r, row_counts[sh], group * groups_per_row[(sh + b) % N_SHAPES], bits, group,
                                         sdtypes[s], sigmas[(b + g + sh) % 3]);
                    const kn_mat *w = &q.m;
                    char what[96];
                    describe(what, sizeof what, w, 0);
                    float *row = malloc((size_t)w->cols * sizeof *row);
                    int cover = 0, err = 0, deq = 0;
                    double worst = 0.0;
                    for (int64_t i = 0; i < w->rows; i++) {
                        kn_mat_row_f32(w, i, row);
                        for (int64_t c = 0; c < w->cols; c++) {
                            const double orig = q.orig[i * w->cols + c];
                            const double sc = naive_scale(w, i, c), bi = naive_bias(w, i, c);
                            if (!(sc > 0 && bi <= orig && bi + sc * nbins >= orig)) cover++;
                            const float wq = naive_weight(w, i, c);
                            const double e = fabs((double)wq - orig);
                            if (e > 0.5 * sc + QUANT_ROUND_SLACK * fabs(wq)) err++;
                            if (e / sc > worst) worst = e / sc;
                            if (memcmp(&row[c], &wq, sizeof wq) != 0) deq++;
                        }
                    }
                    CHECKF(cover == 0, "%s: %d weights outside their group's grid", what, cover);
                    CHECKF(err == 0, "%s: %d weights off by more than scale/2 (worst %.4f scales)", what, err, worst);
                    CHECKF(deq == 0, "%s: kn_mat_row_f32 differs from the naive reader at %d weights", what, deq);
                    free(row);
                    free_affine(&q);
                }
}

static void test_quantizer_gives_a_flat_group_a_positive_scale_and_its_value(void) {
    enum { G = 32 };
    for (int s = 0; s < N_SD; s++) {
        for (int b = 0; b < N_BITS; b++) {
            /* 0.25 and 0 are exact in every sdtype: q = 0 and bias is the value. */
            static const float flat[] = {0.25f, 0.0f, -3.5f};
            for (int k = 0; k < 3; k++) {
                float w[2 * G], sc[2] = {0}, bi[2] = {0}, out[2 * G];
                uint32_t codes[2 * 8];
                for (int c = 0; c < 2 * G; c++) w[c] = c < G ? flat[k] : 0.1f;   /* 0.1: exact in f32 only */
                kn_affine_quantize_row(w, 2 * G, bit_widths[b], G, sdtypes[s], codes, sc, bi);
                kn_mat m = {.data = codes, .dtype = NX_DT_U32, .rows = 1, .cols = 2 * G, .bits = bit_widths[b],
                            .group = G, .scales = sc, .biases = bi, .sdtype = sdtypes[s]};
                kn_mat_row_f32(&m, 0, out);
                float s0 = naive_sd(sc, sdtypes[s], 0), s1 = naive_sd(sc, sdtypes[s], 1);
                CHECKF(s0 > 0 && s0 <= 2 * KN_AFFINE_MIN_SCALE && s1 > 0, "%s q%d: scales %g %g",
                       nx_dtype_name(sdtypes[s]), bit_widths[b], s0, s1);
                int bad = 0;
                for (int c = 0; c < G; c++) bad += out[c] != flat[k] || naive_code(&m, 0, c) != 0;
                for (int c = G; c < 2 * G; c++) bad += fabs((double)out[c] - (double)0.1f) > 0.5 * s1 + QUANT_ROUND_SLACK * 0.1;
                CHECKF(bad == 0, "%s q%d flat %g: %d elements wrong", nx_dtype_name(sdtypes[s]), bit_widths[b],
                       flat[k], bad);
            }
        }
    }
}

/* Row kinds for the quantizer twins: the model's range, tiny and large
 * weights, constant groups, codes that land exactly on a half step (ties),
 * zero minimums of either sign first (the bias keeps the scan's sign), and
 * magnitudes spread over 38 binades. */
static void fill_quantizer_row(nx_test_rng *r, int kind, float *w, int64_t cols, int group, int bits) {
    static const float sigmas[] = {WEIGHT_SIGMA, 1e-4f, 30.0f};
    for (int64_t c = 0; c < cols; c++) {
        const int64_t k = c % group;
        switch (kind) {
        case 0: case 1: case 2: w[c] = nx_test_rng_normal(r, sigmas[kind]); break;
        case 3: w[c] = (c / group) % 2 ? 0.1f : -2.5f; break;
        /* min 0, max nbins * 2^-6, so scale = 2^-6 exactly; odd elements lie
         * halfway between codes m and m + 1 (m even and odd: round half up,
         * not to even) */
        case 4: {
            const int nbins = (1 << bits) - 1, m = (int)(k / 2) % nbins;
            w[c] = k == 0 ? 0.0f : k == 1 ? (float)nbins * 0x1p-6f : ((float)m + (k % 2 ? 0.5f : 0.0f)) * 0x1p-6f;
            break;
        }
        case 5: w[c] = k % 3 == 0 ? (k % 2 ? 0.0f : -0.0f) : fabsf(nx_test_rng_normal(r, WEIGHT_SIGMA)); break;
        case 6: w[c] = (k + (c / group)) % 2 ? 0.0f : -0.0f; break;
        /* magnitudes 2^-24 .. 2^14 of either sign: wide groups, within f16 */
        default: w[c] = ldexpf(nx_test_rng_normal(r, 1.0f) < 0 ? -1.0f : 1.0f, -24 + (int)(nx_test_rng_next(r) % 39)); break;
        }
    }
}

static void test_quantizer_twins_write_the_same_bytes(void) {
    enum { KINDS = 8, MAXC = 5 * 128 };
    nx_test_rng r = {0x452821E638D01377ULL};
    if (!use_simd()) return;
    float w[MAXC];
    uint32_t codes[2][MAXC * 8 / 32];
    float sc[2][MAXC / 32], bi[2][MAXC / 32];
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++)
            for (int s = 0; s < N_SD; s++)
                for (int kind = 0; kind < KINDS; kind++) {
                    const int bits = bit_widths[b], group = groups[g];
                    const int64_t cols = group * groups_per_row[(kind + b) % N_SHAPES];
                    fill_quantizer_row(&r, kind, w, cols, group, bits);
                    for (int simd = 0; simd < 2; simd++) {
                        set_impl(simd);
                        memset(codes[simd], 0xA5, sizeof codes[simd]);   /* the quantizer must write every word */
                        kn_affine_quantize_row(w, cols, bits, group, sdtypes[s], codes[simd], sc[simd], bi[simd]);
                    }
                    const size_t cb = (size_t)kn_affine_row_words(cols, bits) * 4;
                    const size_t sb = (size_t)(cols / group) * nx_dtype_size(sdtypes[s]);
                    CHECKF(memcmp(codes[0], codes[1], cb) == 0 && memcmp(sc[0], sc[1], sb) == 0 && memcmp(bi[0], bi[1], sb) == 0,
                           "q%d g%d sd=%s kind %d (%lld cols): the twins wrote different bytes", bits, group,
                           nx_dtype_name(sdtypes[s]), kind, (long long)cols);
                }
    kn_init(0);
}

/* Both row dequantizers write the same floats for every row of every format
 * (the last row read at its exact byte count: the sanitize build catches a
 * read past the codes); kn_mat_row_f32 runs the active one, here the SIMD. */
static void test_row_dequantizer_twins_write_the_same_floats(void) {
    nx_test_rng r = {0x3F84D5B5B5470917ULL};
    if (!use_simd()) return;
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++)
            for (int s = 0; s < N_SD; s++)
                for (int sh = 0; sh < N_SHAPES; sh++) {
                    const int64_t rows = row_counts[sh], n = groups[g] * groups_per_row[(sh + s) % N_SHAPES];
                    qmat q = make_affine(&r, rows, n, bit_widths[b], groups[g], sdtypes[s], WEIGHT_SIGMA);
                    char what[96];
                    describe(what, sizeof what, &q.m, 0);
                    float *a = malloc((size_t)n * sizeof *a), *v = malloc((size_t)n * sizeof *v);
                    int bad = 0;
                    for (int64_t row = 0; row < rows; row++) {
                        kn_affine_row_f32_ref(&q.m, row, a);
                        kn_mat_row_f32(&q.m, row, v);   /* the SIMD twin */
                        bad += memcmp(a, v, (size_t)n * sizeof *a) != 0;
                    }
                    CHECKF(bad == 0, "%s: %d rows differ between the dequantizer twins", what, bad);
                    free(a), free(v);
                    free_affine(&q);
                }
    kn_init(0);
}

/* The affine twins are the dense twins on the dequantized matrix: equal bit
 * for bit (scalar with scalar, SIMD with SIMD), and SIMD within KN_TOL_AFFINE
 * of the scalar definition. T = 5 is a 3-row SIMD block plus a 2-row one. */
static void test_affine_matmul_equals_dense_matmul_on_dequantized_weights(void) {
    enum { T = 5 };
    nx_test_rng r = {0xA4093822299F31D0ULL};
    float ya[T * MAX_ROWS], yd[T * MAX_ROWS], yr[T * MAX_ROWS];
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++)
            for (int s = 0; s < N_SD; s++)
                for (int sh = 0; sh < N_SHAPES; sh++)
                    for (int cs = 0; cs < N_SHAPES; cs++) {
                        const int64_t rows = row_counts[sh], n = groups[g] * groups_per_row[cs];
                        qmat q = make_affine(&r, rows, n, bit_widths[b], groups[g], sdtypes[s], WEIGHT_SIGMA);
                        kn_mat d = dequantized(&q.m);
                        float *x = make_acts(&r, T * n);
                        char what[96];
                        for (int simd = 1; simd >= 0; simd--) {
                            set_impl(simd);
                            describe(what, sizeof what, &q.m, 1);
                            kn_matmul_rows(&q.m, x, n, T, ya, rows, 0, rows);
                            kn_matmul_rows(&d, x, n, T, yd, rows, 0, rows);
                            CHECKF(memcmp(ya, yd, (size_t)(T * rows) * sizeof(float)) == 0,
                                   "%s: differs from the dense product on its dequantized weights", what);
                        }
                        kn_matmul_rows_ref(&q.m, x, n, T, yr, rows, 0, rows);
                        use_simd();
                        describe(what, sizeof what, &q.m, 1);
                        kn_matmul_rows(&q.m, x, n, T, ya, rows, 0, rows);
                        double worst = 0.0;
                        for (int t = 0; t < T; t++)
                            for (int64_t row = 0; row < rows; row++) {
                                double scale = 0.0;
                                for (int64_t c = 0; c < n; c++)
                                    scale += fabs((double)((const float *)d.data)[row * n + c] * x[t * n + c]);
                                double e = fabs((double)ya[t * rows + row] - yr[t * rows + row]) / scale;
                                if (e > worst) worst = e;
                            }
                        CHECKF(worst <= KN_TOL_AFFINE, "%s: SIMD error %.3g of sum|w*x| exceeds %.3g", what, worst,
                               KN_TOL_AFFINE);
                        free((void *)d.data);
                        free(x);
                        free_affine(&q);
                    }
    kn_init(0);
}

/* A row-range matmul under test: Y rows t0 .. t0+T-1 of the product for
 * weight rows [r0, r1), into y with row stride ldy. */
typedef void (*rows_fn)(const void *ctx, int t0, int T, float *y, int64_t ldy, int64_t r0, int64_t r1);

typedef struct {
    const kn_mat *w;
    const float *x;
    int64_t ldx;
} f32_rows_ctx;

static void f32_rows(const void *ctx, int t0, int T, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const f32_rows_ctx *c = ctx;
    kn_matmul_rows(c->w, c->x + t0 * c->ldx, c->ldx, T, y, ldy, r0, r1);
}

/* Y[t][r] from one call per (r, t) pair, against calls over every T and
 * uneven row ranges; also checks no call writes outside its rows. */
static void check_bit_exact(rows_fn mm, const void *ctx, int64_t rows, const char *what) {
    enum { PAD = 5, CAP = MAX_T * (MAX_ROWS + PAD) };
    const float canary = -12345.0f;
    const int64_t ldy = rows + PAD;
    float base[MAX_T][MAX_ROWS], y[CAP];
    for (int t = 0; t < MAX_T; t++)
        for (int64_t row = 0; row < rows; row++) mm(ctx, t, 1, base[t], 0, row, row + 1);
    for (int T = 1; T <= MAX_T; T++) {
        for (int i = 0; i < CAP; i++) y[i] = canary;
        mm(ctx, 0, T, y, ldy, 0, rows);
        for (int t = 0; t < T; t++)
            CHECKF(memcmp(&y[t * ldy], base[t], (size_t)rows * sizeof(float)) == 0, "%s: T=%d row t=%d differs",
                   what, T, t);
        for (int i = 0; i < CAP; i++)
            if (i >= T * ldy || i % ldy >= rows) CHECKF(y[i] == canary, "%s: T=%d wrote y[%d]", what, T, i);
    }
    static const int chunks[] = {1, 2, 3, 5, 4};
    for (int T = 5; T <= MAX_T; T += MAX_T - 5) {
        for (int i = 0; i < CAP; i++) y[i] = canary;
        int64_t r0 = 0;
        for (int k = 0; r0 < rows; k = (k + 1) % 5) {
            int64_t r1 = r0 + chunks[k] < rows ? r0 + chunks[k] : rows;
            mm(ctx, 0, T, y, ldy, r0, r1);
            for (int t = 0; t < T; t++)
                CHECKF(memcmp(&y[t * ldy + r0], &base[t][r0], (size_t)(r1 - r0) * sizeof(float)) == 0,
                       "%s: T=%d rows [%lld,%lld) differ at t=%d", what, T, (long long)r0, (long long)r1, t);
            r0 = r1;
        }
        for (int i = 0; i < CAP; i++)
            if (i >= T * ldy || i % ldy >= rows) CHECKF(y[i] == canary, "%s: T=%d ranges wrote y[%d]", what, T, i);
    }
}

static void test_affine_rows_are_bit_identical_whatever_t_and_row_range(void) {
    nx_test_rng r = {0x082EFA98EC4E6C89ULL};
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++)
            for (int s = 0; s < N_SD; s++) {
                /* 13 rows (not a multiple of any chunk); cols of 1, 3 or 5 groups in turn. */
                const int64_t n = groups[g] * groups_per_row[(b + g + s) % N_SHAPES], ldx = n + 3;   /* odd stride */
                qmat q = make_affine(&r, MAX_ROWS, n, bit_widths[b], groups[g], sdtypes[s], WEIGHT_SIGMA);
                float *x = make_acts(&r, MAX_T * ldx);
                for (int simd = 1; simd >= 0; simd--) {
                    set_impl(simd);
                    char what[96];
                    describe(what, sizeof what, &q.m, 1);
                    f32_rows_ctx ctx = {&q.m, x, ldx};
                    check_bit_exact(f32_rows, &ctx, q.m.rows, what);
                }
                free(x);
                free_affine(&q);
            }
    kn_init(0);
}

static void test_affine_matmul_with_no_rows_or_no_tokens_writes_nothing(void) {
    nx_test_rng r = {17};
    qmat q = make_affine(&r, 4, 64, 4, 32, NX_DT_BF16, WEIGHT_SIGMA);
    float *x = make_acts(&r, 64), y[4] = {1, 2, 3, 4};
    for (int simd = 1; simd >= 0; simd--) {
        set_impl(simd);
        kn_matmul_rows(&q.m, x, 64, 0, y, 4, 0, 4);
        kn_matmul_rows(&q.m, x, 64, 1, y, 4, 2, 2);
        CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4);
        /* Zero columns: the empty sum is 0. */
        kn_mat w0 = q.m;
        w0.cols = 0;
        kn_matmul_rows(&w0, x, 0, 1, y, 4, 0, 4);
        CHECK(y[0] == 0 && y[3] == 0);
        y[0] = 1, y[1] = 2, y[2] = 3, y[3] = 4;
    }
    kn_affine_quantize_row(NULL, 0, 4, 32, NX_DT_BF16, NULL, NULL, NULL);   /* an empty row touches nothing */
    kn_init(0);
    free(x);
    free_affine(&q);
}

/* ---- Int8 activations (quant.h) ------------------------------------------ */

/* A kn_qx for w over an exactly sized malloc'd buffer (free .q), filled
 * with 0xff bytes (NaN scales) so that whatever the quantizer leaves
 * unwritten, its zero pads included, shows. */
static kn_qx make_qx(int T, const kn_mat *w) {
    kn_qx qx;
    const size_t bytes = kn_qx_bytes(T, w->cols) + 1;   /* +1: never a 0-byte malloc */
    void *buf = malloc(bytes);
    memset(buf, 0xff, bytes);
    kn_qx_bind(&qx, buf, T, w);
    return qx;
}

/* Straight from quant.h: where element c of group g of a row is stored,
 * relative to the row. */
static int64_t naive_pos(const kn_qx *qx, int64_t g, int64_t c) {
    if (!qx->lanes) return g * qx->group + c;
    const int64_t block = g / 8 * 8 * qx->group, j = g % 8;
    return block + c / 64 * 512 + c % 64 / 16 * 128 + c % 2 * 64 + c % 16 / 8 * 32 + 4 * j + c % 8 / 2;
}

/* Rows t0 .. t0+T-1 of qx as a view of its own. */
static kn_qx qx_rows(const kn_qx *qx, int t0, int T) {
    const int64_t G = qx->ldg;
    kn_qx v = *qx;
    v.T = T;
    v.q += t0 * qx->ldq, v.d += t0 * G, v.s += t0 * G, v.si += t0 * G, v.si16 += t0 * G;
    return v;
}

/* Activation rows with every kind of group: ~N(0, 1), tiny (1e-30), all
 * zero, a single large outlier, exact ties (amax 127: x*127/amax lands on
 * k + 0.5), below KN_QX_MIN_AMAX (1e-38, where 127 / amax overflows f32),
 * and, when with_bad, a NaN and an infinity. One group per kind, cycling over
 * the groups of all rows. */
static float *make_act_kinds(nx_test_rng *r, int T, int64_t n, int group, int with_bad) {
    float *x = make_acts(r, T * n);
    const int kinds = with_bad ? 8 : 6;
    for (int64_t g = 0; g < T * n / group; g++) {
        float *xg = x + g * group;
        switch (g % kinds) {
        case 1: for (int c = 0; c < group; c++) xg[c] *= 1e-30f; break;
        case 2: memset(xg, 0, (size_t)group * sizeof *xg); break;
        case 3: xg[(g * 7) % group] = 300.0f; break;
        case 4:
            for (int c = 0; c < group; c++) xg[c] = (float)((c % 9) - 4) + 0.5f;   /* +-0.5 .. +-4.5 */
            xg[0] = 127.0f;
            break;
        case 5: for (int c = 0; c < group; c++) xg[c] *= 1e-38f; break;
        case 6: xg[group / 2] = NAN; break;
        case 7: xg[group - 1] = -INFINITY; break;
        default: break;
        }
    }
    return x;
}

/* Checks qx against quant.h's definition for rows x (stride ldx). */
static void check_quantized_acts(const kn_qx *qx, const float *x, int64_t ldx, const char *what) {
    const int64_t n = qx->cols, G = n / qx->group;
    int bad = 0;
    for (int t = 0; t < qx->T; t++)
        for (int64_t g = 0; g < G; g++) {
            const float *xg = x + t * ldx + g * qx->group;
            int8_t q[128];   /* the group in element order */
            for (int c = 0; c < qx->group; c++) q[c] = qx->q[t * qx->ldq + naive_pos(qx, g, c)];
            const int64_t k = t * qx->ldg + g;
            float amax = 0;
            int finite = 1;
            for (int c = 0; c < qx->group; c++) {
                finite &= isfinite(xg[c]);
                if (fabsf(xg[c]) > amax) amax = fabsf(xg[c]);
            }
            int32_t sum = 0, first16 = 0;
            for (int c = 0; c < qx->group; c++) sum += q[c], first16 += c < 16 ? q[c] : 0;
            bad += qx->si[k] != sum || qx->si16[k] != first16;   /* S and H themselves, in every case */
            if (!finite) {
                bad += !(isnan(qx->d[k]) && isnan(qx->s[k]) && sum == 0);
                for (int c = 0; c < qx->group; c++) bad += q[c] != 0;
                continue;
            }
            if (amax < KN_QX_MIN_AMAX) {   /* counts as zero: 127 / amax could overflow */
                bad += qx->d[k] != 0.0f || qx->s[k] != 0.0f || sum != 0;
                for (int c = 0; c < qx->group; c++) bad += q[c] != 0;
                continue;
            }
            bad += qx->d[k] != amax / 127.0f || qx->s[k] != qx->d[k] * (float)sum;
            for (int c = 0; c < qx->group; c++) {
                const int qc = q[c];
                const double e = fabs((double)xg[c] - (double)qx->d[k] * qc);
                /* half a step, plus the rounding of 127 / amax and of the product */
                bad += qc < -127 || e > 0.5 * qx->d[k] * (1 + 0x1p-20);
                /* the largest element maps to +-127, and ties go to even */
                if (fabsf(xg[c]) == amax && amax > 0) bad += abs(qc) != 127;
                if (amax == 127.0f && xg[c] - floorf(xg[c]) == 0.5f) bad += (qc & 1) != 0;
            }
        }
    for (int t = 0; t < qx->T; t++)   /* a partial last block's missing groups hold zeros */
        for (int64_t g = G; g < qx->ldq / qx->group; g++)
            for (int c = 0; c < qx->group; c++) bad += qx->q[t * qx->ldq + naive_pos(qx, g, c)] != 0;
    CHECK(qx->ldg >= G && qx->ldg % KN_QX_GROUP_PAD == 0);
    for (int t = 0; t < qx->T; t++)   /* a row's per-group entries past G: zeros (KN_QX_GROUP_PAD) */
        for (int64_t k = t * qx->ldg + G; k < (t + 1) * qx->ldg; k++)
            bad += qx->d[k] != 0.0f || qx->s[k] != 0.0f || qx->si[k] != 0 || qx->si16[k] != 0;
    CHECKF(bad == 0, "%s: %d deviations from the definition", what, bad);
}

static void test_activation_quantizer_follows_the_definition_in_both_twins(void) {
    enum { T = 5 };
    nx_test_rng r = {0x5EED0F1A77C0FFEEULL};
    /* groups per row: also a full block of 8 (lanes' storage order) and more */
    static const int64_t gprs[] = {1, 3, 5, 8, 9, 17};
    for (int g = 0; g < N_GROUPS; g++)
        for (int cs = 0; cs < 18; cs++) {
            /* for 8-bit and for 4-bit weights (the lanes order from group
             * 64), and in groups of 32 for mxfp4 (the lanes order, fpq.h) */
            const int group = groups[g], kind = cs % 3, bits = kind == 1 ? 8 : 4;
            if (kind == 2 && group != 32) continue;
            const int64_t n = group * gprs[cs / 3], ldx = n + 5;
            const kn_mat w = kind == 2 ? (kn_mat){.dtype = NX_DT_U32, .cols = n, .group = 32, .sdtype = NX_DT_U8,
                                                  .fp = KN_FP_MXFP4}
                                       : (kn_mat){.dtype = NX_DT_U32, .cols = n, .bits = bits, .group = group,
                                                  .sdtype = NX_DT_F32};
            float *x = calloc((size_t)(T * ldx), sizeof *x);   /* rows at an odd stride */
            float *rows = make_act_kinds(&r, T, n, group, 1);
            for (int t = 0; t < T; t++) memcpy(x + t * ldx, rows + t * n, (size_t)n * sizeof *x);
            kn_qx a = make_qx(T, &w), b = make_qx(T, &w);
            CHECK(a.lanes == (kind == 2 || group >= 64));
            char what[64];
            set_impl(1);
            snprintf(what, sizeof what, "%s %s%d g%d n%lld", kn_impl_name(), kind == 2 ? "mxfp" : "q", bits, group,
                     (long long)n);
            kn_quantize_x(&a, x, ldx);
            check_quantized_acts(&a, x, ldx, what);
            set_impl(0);
            snprintf(what, sizeof what, "%s %s%d g%d n%lld", kn_impl_name(), kind == 2 ? "mxfp" : "q", bits, group,
                     (long long)n);
            kn_quantize_x(&b, x, ldx);
            check_quantized_acts(&b, x, ldx, what);
            CHECKF(memcmp(a.q, b.q, (size_t)(T * a.ldq)) == 0,
                   "g%d n%lld: twins quantize differently", group, (long long)n);
            for (int64_t k = 0; k < T * a.ldg; k++)
                CHECKF((a.d[k] == b.d[k] || (isnan(a.d[k]) && isnan(b.d[k]))) &&
                           (a.s[k] == b.s[k] || (isnan(a.s[k]) && isnan(b.s[k]))),
                       "g%d n%lld group %lld: twins give scales %g/%g sums %g/%g", group, (long long)n, (long long)k,
                       a.d[k], b.d[k], a.s[k], b.s[k]);
            free(a.q), free(b.q), free(x), free(rows);
        }
    kn_init(0);
}

/* Both twins of the int8 product are quant.h's formula bit for bit (scalar
 * with SIMD), that formula is the dequantized weights times the dequantized
 * activations (to f32 rounding), and it stays within the activation rounding
 * of the f32 product. T = 7: a 4-row SIMD block plus 3. */
static void test_int8_matmul_twins_agree_and_stay_within_the_activation_rounding(void) {
    enum { T = 7 };
    nx_test_rng r = {0x1A2B3C4D5E6F7081ULL};
    float ya[T * MAX_ROWS], yr[T * MAX_ROWS];
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++)
            for (int s = 0; s < N_SD; s++)
                for (int sh = 0; sh < N_SHAPES; sh++)
                    for (int cs = 0; cs < N_SHAPES; cs++) {
                        const int64_t rows = row_counts[sh], n = groups[g] * groups_per_row[cs];
                        qmat q = make_affine(&r, rows, n, bit_widths[b], groups[g], sdtypes[s], WEIGHT_SIGMA);
                        float *x = make_act_kinds(&r, T, n, groups[g], 0);
                        kn_qx qx = make_qx(T, &q.m);
                        kn_quantize_x_ref(&qx, x, n);
                        char what[96];
                        describe(what, sizeof what, &q.m, 0);
                        kn_matmul_qx_rows_ref(&q.m, &qx, yr, rows, 0, rows);
                        for (int k = 0; k < int8_variants(&q.m); k++) {
                            if (!use_int8_variant(&q.m, k, &q.packed)) continue;
                            kn_matmul_qx_rows(&q.m, &qx, ya, rows, 0, rows);
                            CHECKF(memcmp(ya, yr, sizeof(float) * (size_t)(T * rows)) == 0, "%s %s%s: the twins differ",
                                   kn_impl_name(), what, q.m.packed ? " packed" : "");
                        }
                        q.m.packed = NULL;
                        int off_def = 0, off_f32 = 0;
                        for (int t = 0; t < T; t++)
                            for (int64_t row = 0; row < rows; row++) {
                                double dq = 0, f32 = 0, mag = 0, round = 0;
                                for (int64_t c = 0; c < n; c++) {
                                    const double w = naive_weight(&q.m, row, c), xc = x[t * n + c];
                                    const double d = qx.d[t * qx.ldg + c / groups[g]];
                                    const int64_t g0 = c / groups[g] * groups[g];
                                    dq += w * (d * qx.q[t * qx.ldq + naive_pos(&qx, c / groups[g], c - g0)]);
                                    f32 += w * xc;
                                    mag += fabs(w * xc) + fabs(w) * d;
                                    /* a group below KN_QX_MIN_AMAX counts as zero (d = 0) */
                                    round += d == 0 ? fabs(w * xc) : fabs(w) * d / 2;
                                }
                                const double y = yr[t * rows + row];
                                off_def += fabs(y - dq) > 1e-5 * mag;
                                off_f32 += fabs(y - f32) > round + 1e-5 * mag;
                            }
                        CHECKF(off_def == 0, "%s: %d results off the dequantized product", what, off_def);
                        CHECKF(off_f32 == 0, "%s: %d results beyond the activation rounding of the f32 product", what,
                               off_f32);
                        free(qx.q), free(x);
                        free_affine(&q);
                    }
    kn_init(0);
}

typedef struct {
    const kn_mat *w;
    const kn_qx *qx;
} qx_rows_ctx;

static void int8_rows(const void *ctx, int t0, int T, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const qx_rows_ctx *c = ctx;
    kn_qx v = qx_rows(c->qx, t0, T);
    kn_matmul_qx_rows(c->w, &v, y, ldy, r0, r1);
}

static void test_int8_rows_are_bit_identical_whatever_t_and_row_range(void) {
    nx_test_rng r = {0x7E57AB1E5EEDULL};
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++) {
            const int64_t n = groups[g] * groups_per_row[(b + g) % N_SHAPES];
            qmat q = make_affine(&r, MAX_ROWS, n, bit_widths[b], groups[g], sdtypes[(b + g) % N_SD], WEIGHT_SIGMA);
            float *x = make_acts(&r, MAX_T * n);
            kn_qx qx = make_qx(MAX_T, &q.m);
            for (int k = 0; k < int8_variants(&q.m); k++)
                for (int tune = 0; tune < 2; tune++) {   /* kn_tuning: both ways on any CPU */
                    if (!use_int8_variant(&q.m, k, &q.packed)) continue;
                    kn_tuning_set((kn_tuning){.wide_l1 = tune});
                    kn_quantize_x(&qx, x, n);
                    char what[112];
                    describe(what, sizeof what, &q.m, 1);
                    snprintf(what + strlen(what), sizeof what - strlen(what), " wide_l1=%d", tune);
                    qx_rows_ctx ctx = {&q.m, &qx};
                    check_bit_exact(int8_rows, &ctx, q.m.rows, what);
                }
            free(qx.q), free(x);
            free_affine(&q);
        }
    kn_init(0);
}

/* Long and many rows: 8, 9, 17, 24, 25, 56 and 144 groups per row (56 and
 * 144: the 0.8B and 4B shapes' down projections at group 64, the latter's
 * 4-bit rows longer than the 4 KB prefetch reach; full and partial
 * blocks of eight scales, more than one of them; for lanes, whose AVX-512
 * twin takes 16 groups a step, one or two blocks a step, the second full,
 * partial or absent) and 30 rows (past the prefetch
 * distance, 4 KB of rows ahead, where rows are long): the twins agree bit for
 * bit, a T = 5 call (a wide pass) equals T = 1 calls row by row, and so
 * does a T = 3 call (a verify block) over the 29 rows from row 1. */
static void test_int8_matmul_on_long_and_many_rows_matches_the_reference(void) {
    enum { T = 5, ROWS = 30 };
    static const int64_t gprs[] = {8, 9, 17, 24, 25, 56, 144};
    nx_test_rng r = {0x51DE5EED0DDBA11ULL};
    float *ya = malloc(sizeof(float) * T * ROWS), *yr = malloc(sizeof(float) * T * ROWS), y1[ROWS];
    for (int b = 0; b < N_BITS; b++)
        for (int g = 0; g < N_GROUPS; g++)
            for (size_t k = 0; k < sizeof gprs / sizeof *gprs; k++) {
                const int64_t n = groups[g] * gprs[k];
                qmat q = make_affine(&r, ROWS, n, bit_widths[b], groups[g], sdtypes[(b + k) % N_SD], WEIGHT_SIGMA);
                float *x = make_act_kinds(&r, T, n, groups[g], 0);
                kn_qx qx = make_qx(T, &q.m);
                char what[96];
                describe(what, sizeof what, &q.m, 0);
                kn_quantize_x_ref(&qx, x, n);
                kn_matmul_qx_rows_ref(&q.m, &qx, yr, ROWS, 0, ROWS);
                for (int s = 0; s < int8_variants(&q.m); s++) {
                    if (!use_int8_variant(&q.m, s, &q.packed)) continue;
                    describe(what, sizeof what, &q.m, 0);
                    if (q.m.packed) strcat(what, " packed");
                    kn_matmul_qx_rows(&q.m, &qx, ya, ROWS, 0, ROWS);
                    CHECKF(memcmp(ya, yr, sizeof(float) * T * ROWS) == 0, "%s %s: the twins differ", kn_impl_name(), what);
                    for (int t = 0; t < T; t++) {
                        kn_qx one = qx_rows(&qx, t, 1);
                        kn_matmul_qx_rows(&q.m, &one, y1, ROWS, 0, ROWS);
                        CHECKF(memcmp(y1, ya + t * ROWS, sizeof y1) == 0, "%s %s: row t=%d alone differs", kn_impl_name(),
                               what, t);
                    }
                    /* a verify block (rows 1..3, one pass over the weights:
                     * packed 4-bit rows in pairs) over an odd row count */
                    kn_qx three = qx_rows(&qx, 1, 3);
                    kn_matmul_qx_rows(&q.m, &three, ya, ROWS, 1, ROWS);
                    for (int t = 0; t < 3; t++)
                        CHECKF(memcmp(ya + t * ROWS + 1, yr + (t + 1) * ROWS + 1, sizeof(float) * (ROWS - 1)) == 0,
                               "%s %s: rows 1..%d at T=3, t=%d differ", kn_impl_name(), what, ROWS - 1, t);
                }
                free(qx.q), free(x);
                free_affine(&q);
            }
    free(ya), free(yr);
    kn_init(0);
}

/* Wide passes of lanes rows whose activations outgrow L1 run in tiles of
 * rows (quant.c: qx_wide_tiles, 128 KB of rows, blocks of 4 activation rows
 * over each tile): 4- and 8-bit lanes in groups of 64 and 128, as stored
 * and packed, rows past 2048 columns (33 and 80 groups of 64; 40 groups of
 * 128), 227 rows (two or more tiles and an odd row left over), T = 13
 * (blocks of 4 and a block of 1) and T = 5 (the packed pair's one pass of
 * 5 unless wide_l1; tiled at 5120 columns), and 4-bit rows of 2048 columns
 * at T = 17 (packed pairs tile there past 32 KB of activations); both
 * kn_tuning choices. Every
 * result equals the reference bit for bit, over all rows and over rows
 * 3 .. 225 (tiles from an odd row), and row t of a T = 5 call equals a
 * T = 1 call. */
static void test_int8_wide_passes_in_tiles_match_the_reference(void) {
    enum { ROWS = 227, MAXT = 17 };
    static const struct { int bits, group, groups, T; } cases[] = {
        {4, 64, 33, 13}, {8, 64, 33, 13}, {4, 128, 40, 13}, {8, 128, 40, 13}, {4, 64, 80, 5}, {8, 64, 80, 5},
        {4, 64, 32, 17},
    };
    nx_test_rng r = {0x711E5B10CC5ULL};
    float *ya = malloc(sizeof(float) * MAXT * ROWS), *yr = malloc(sizeof(float) * MAXT * ROWS);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int T = cases[c].T;
        const int64_t n = (int64_t)cases[c].group * cases[c].groups;
        qmat q = make_affine(&r, ROWS, n, cases[c].bits, cases[c].group, sdtypes[c % N_SD], WEIGHT_SIGMA);
        float *x = make_act_kinds(&r, T, n, cases[c].group, 0);
        kn_qx qx = make_qx(T, &q.m);
        kn_quantize_x_ref(&qx, x, n);
        kn_matmul_qx_rows_ref(&q.m, &qx, yr, ROWS, 0, ROWS);
        for (int v = 0; v < int8_variants(&q.m); v++)
            for (int tune = 0; tune < 2; tune++) {
                if (!use_int8_variant(&q.m, v, &q.packed)) continue;
                kn_tuning_set((kn_tuning){.wide_l1 = tune});
                char what[112];
                describe(what, sizeof what, &q.m, 1);
                snprintf(what + strlen(what), sizeof what - strlen(what), " T=%d wide_l1=%d", T, tune);
                for (int i = 0; i < T * ROWS; i++) ya[i] = NAN;
                kn_matmul_qx_rows(&q.m, &qx, ya, ROWS, 0, ROWS);
                CHECKF(memcmp(ya, yr, sizeof(float) * T * ROWS) == 0, "%s: differs from the reference", what);
                for (int i = 0; i < T * ROWS; i++) ya[i] = NAN;
                kn_matmul_qx_rows(&q.m, &qx, ya, ROWS, 3, ROWS - 1);
                for (int t = 0; t < T; t++)
                    CHECKF(memcmp(ya + t * ROWS + 3, yr + t * ROWS + 3, sizeof(float) * (ROWS - 4)) == 0 &&
                               isnan(ya[t * ROWS + 2]) && isnan(ya[t * ROWS + ROWS - 1]),
                           "%s: rows 3..%d, t=%d differ or spill", what, ROWS - 2, t);
                if (T == 5)
                    for (int t = 0; t < T; t++) {
                        kn_qx one = qx_rows(&qx, t, 1);
                        kn_matmul_qx_rows(&q.m, &one, ya, ROWS, 0, ROWS);
                        CHECKF(memcmp(ya, yr + t * ROWS, sizeof(float) * ROWS) == 0, "%s: row t=%d alone differs", what,
                               t);
                    }
            }
        free(qx.q), free(x);
        free_affine(&q);
    }
    free(ya), free(yr);
    kn_init(0);
}

/* Products over gathered rows (kn_matmul_qx_gathered, the screened draft
 * head's) give the bits of the rows in place for 4-, 8- and 3-bit lanes (3
 * bits in bit planes), groups of 64 and 128, every scale type, 3 and 17
 * groups a row (1088 columns: rows past 512 bytes), 70 rows, every SIMD
 * set on packed rows and both tunings; nothing gathers without packed rows,
 * on the scalar set, or in groups of 32, which pack nothing (gathered.h). */
static void test_gathered_rows_equal_the_rows_in_place(void) {
    enum { ROWS = 70 };
    static const int lanes_bits[] = {4, 8, 3}, gprs[] = {3, 17};
    nx_test_rng r = {0x6A7E4ED5EEDULL};
    float want[ROWS];
    int gathered = 0;
    for (int b = 0; b < 3; b++)
        for (int g = 0; g < N_GROUPS; g++) {
            const int64_t n = groups[g] * gprs[(b + g) % 2];
            qmat q = make_affine(&r, ROWS, n, lanes_bits[b], groups[g], sdtypes[(b + g) % N_SD], WEIGHT_SIGMA);
            float *x = make_acts(&r, n);
            kn_qx qx = make_qx(1, &q.m);
            for (int k = 0; k < int8_variants(&q.m); k++)
                for (int tune = 0; tune < 2; tune++) {
                    if (!use_int8_variant(&q.m, k, &q.packed)) continue;
                    kn_tuning_set((kn_tuning){.wide_l1 = tune});
                    kn_quantize_x(&qx, x, n);
                    kn_matmul_qx_rows(&q.m, &qx, want, ROWS, 0, ROWS);
                    char what[112];
                    describe(what, sizeof what, &q.m, 1);
                    gathered += gathered_rows_match(&q.m, &qx, want, what);
                }
            if (q.packed && use_int8_isa(N_INT8_ISAS - 1)) {   /* the scalar set reads the codes as stored */
                q.m.packed = q.packed;
                CHECK(kn_gather_rows(&q.m, 1 << 20) == 0);
            }
            free(qx.q), free(x);
            free_affine(&q);
        }
    printf("  %d gathered checks\n", gathered);
    CHECK(gathered > 0 || kn_isa_available(KN_ISA_BEST) == KN_ISA_SCALAR);
    kn_init(0);
}

/* The largest codes against the largest activations, where the int16 sums
 * come closest to overflowing: 8-bit codes 0 and 255 (q - 128 = -128 and 127:
 * a pair sum of 32512 with the sign trick; in lanes, VNNI's int32 sums of
 * the codes as they are, up to 255 * 127 * 128, less 128 S); in lanes
 * (groups of 64 and 128), the AVX2 int16 sums of each group's pair sums
 * over 8 steps of 4-bit nibbles (8 * 2 * 15 * 127 = 30480) and over 16, 16,
 * 4 and 2 steps of the bit planes of 2, 3, 5 and 6 bits (6 bits: 2 * 2 * 63
 * * 127 = 32004); in groups of 32 (no lanes) a group's int16 sums of 6-bit
 * codes (2 * 63 * 127 = 16002). Rows of 128 columns (a partial block of
 * groups) and of 1152 (a full block of 8 and a partial one). All codes at
 * their maximum against xq = 127.
 * Every result must be the exact sum; a NaN activation gives NaN. The three
 * activation rows run twice: alone (T = 3, one weight row a pass) and
 * repeated (T = 6, a wide pass: weight rows in pairs where the set has them,
 * lanes excepted). */
static void test_int8_matmul_extreme_codes_do_not_saturate_and_nan_propagates(void) {
    enum { NMAX = 1152, rows = 3 };
    static const struct { int bits, group, n; } cases[] = {{8, 64, 128},  {8, 128, 128}, {8, 64, 1152}, {8, 128, 1152},
                                                          {6, 64, 128},  {6, 128, 128}, {5, 128, 128}, {4, 128, 1152},
                                                          {4, 64, 1152}, {3, 128, 128}, {6, 128, 1152}, {5, 64, 1152},
                                                          {3, 64, 1152}, {2, 128, 1152}, {6, 32, 128}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int bits = cases[ci].bits, group = cases[ci].group, n = cases[ci].n;
        const unsigned top = (1u << bits) - 1;
        static unsigned codes[rows * NMAX];   /* row 0 all at the top, row 1 all 0, row 2 alternating */
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < n; c++) codes[r * n + c] = r == 0 ? top : r == 1 ? 0 : (c % 2 ? top : 0);
        static uint32_t words[rows * NMAX];   /* more than enough */
        for (int r = 0; r < rows; r++) naive_pack(codes + r * n, n, bits, words + r * kn_affine_row_words(n, bits));
        static float sc[rows * NMAX / 32], bs[rows * NMAX / 32];
        for (int i = 0; i < rows * NMAX / 32; i++) sc[i] = 1.0f, bs[i] = 0.0f;
        kn_mat w = {.data = words, .dtype = NX_DT_U32, .rows = rows, .cols = n, .bits = bits, .group = group,
                    .scales = sc, .biases = bs, .sdtype = NX_DT_F32};
        static float x[6 * NMAX];   /* row 0 all +127; row 1 alternating +-127; row 2 with a NaN; rows 3-5 again */
        for (int c = 0; c < n; c++) x[c] = 127.0f, x[n + c] = c % 2 ? -127.0f : 127.0f, x[2 * n + c] = 127.0f;
        x[2 * n + 5] = NAN;
        memcpy(x + 3 * n, x, sizeof(float) * 3 * n);
        for (int T = 3; T <= 6; T += 3) {
            kn_qx qx = make_qx(T, &w);
            void *packed = NULL;
            for (int k = 0; k < int8_variants(&w); k++) {
                if (!use_int8_variant(&w, k, &packed)) continue;
                kn_quantize_x(&qx, x, n);
                float y[6 * rows];
                kn_matmul_qx_rows(&w, &qx, y, rows, 0, rows);
                for (int t = 0; t < T; t++)
                    for (int r = 0; r < rows; r++) {
                        if (t % 3 == 2) {
                            CHECKF(isnan(y[t * rows + r]), "%s q%d T=%d row %d: a NaN activation gave %g",
                                   kn_impl_name(), bits, T, r, y[t * rows + r]);
                            continue;
                        }
                        double want = 0;
                        for (int c = 0; c < n; c++) want += (double)codes[r * n + c] * x[t * n + c];
                        CHECKF(y[t * rows + r] == (float)want, "%s q%d g%d%s T=%d t=%d row %d: %g, want %g",
                               kn_impl_name(), bits, group, w.packed ? " packed" : "", T, t, r, y[t * rows + r], want);
                    }
            }
            w.packed = NULL;
            free(packed);
            free(qx.q);
        }
    }
    kn_init(0);
}

/* The code of element e of group g from a packed row pr of bit planes
 * (quant.h): chunk e / 64 of block g / 8 takes 64 * bits bytes; within it
 * the element's activation is byte o = 32n + b of 512, and its fields lie in
 * the nibbles (256 bytes), the 2-bit fields (128) and the 1-bit ones (64)
 * that the width has, in that order. */
static unsigned plane_code(const unsigned char *pr, int bits, int64_t group, int64_t g, int64_t e) {
    const int64_t c = e % 64, j = g % 8;
    const int64_t o = c / 16 * 128 + c % 2 * 64 + c % 16 / 8 * 32 + 4 * j + c % 8 / 2, n = o / 32, b = o % 32;
    const unsigned char *pc = pr + g / 8 * group * bits + e / 64 * 64 * bits;
    const unsigned char *two = pc + (bits >= 4 ? 256 : 0), *one = two + (bits & 2 ? 128 : 0);
    /* each plane read only where the width has it (the chunk ends there) */
    const unsigned nib = bits >= 4 ? pc[n / 4 * 64 + n % 2 * 32 + b] >> (n / 2 % 2 * 4) & 15u : 0;
    const unsigned f2 = bits & 2 ? two[n / 4 * 32 + b] >> (2 * (n % 4)) & 3u : 0;
    const unsigned f1 = bits & 1 ? one[n / 4 * 16 + b % 16] >> (2 * (n % 4) + b / 16) & 1u : 0;
    switch (bits) {
    case 2: return f2;
    case 3: return f1 | f2 << 1;
    case 5: return nib | f1 << 4;
    default: return nib | f2 << 4;   /* 6 */
    }
}

/* kn_lanes_pack by quant.h's words, read back one code at a time (2, 3, 5
 * and 6 bits from their planes, plane_code above): element
 * e of group g (block g / 8, lane j = g % 8) of row r is, for 4 bits, the low
 * (even e) or high nibble of byte (g / 8) * 4 * group + (e / 64) * 256 + (e %
 * 64 / 8) * 32 + 4j + (e % 8) / 2 of packed row r, for 8 bits byte (g / 8) *
 * 8 * group + (e / 64) * 512 + (e % 64 / 16) * 128 + (e % 2) * 64 + (e % 16
 * / 8) * 32 + 4j + (e % 8) / 2, rows kn_lanes_packed_row_bytes (a multiple
 * of 64) apart; the padding groups of a last partial block are 0; the
 * row's scales and then biases follow the codes as stored, then zeros.
 * Groups of 64 and 128, rows of 1, 8, 9, 16, 17, 25 and 33 groups, 16-bit
 * and f32 scales, and a row range packed in two calls; the bit planes of the
 * active set's packer are the scalar one's bytes. */
static void test_packed_rows_follow_the_documented_order(void) {
    static const int64_t gprs[] = {1, 8, 9, 16, 17, 25, 33};
    nx_test_rng r = {0x9AC4ED0DE5ULL};
    static const int widths[] = {4, 8, 2, 3, 5, 6};
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
        for (int group = 64; group <= 128; group *= 2)
            for (size_t k = 0; k < sizeof gprs / sizeof *gprs; k++) {
                const nx_dtype sdt = k % 2 ? NX_DT_F32 : NX_DT_BF16;
                const int bits = widths[wi];
                const int64_t rows = 5, G = gprs[k], n = group * G, codes = (G + 7) / 8 * bits * group;
                const int64_t sb = G * (int64_t)nx_dtype_size(sdt), prow = (codes + 2 * sb + 63) / 64 * 64;
                qmat q = make_affine(&r, rows, n, bits, group, sdt, WEIGHT_SIGMA);
                CHECK(kn_lanes_packed_code_bytes(&q.m) == codes && kn_lanes_packed_row_bytes(&q.m) == prow);
                CHECK(kn_lanes_packed_bytes(&q.m) == (size_t)(rows * prow));
                unsigned char *p = malloc((size_t)(rows * prow));
                memset(p, 0xAB, (size_t)(rows * prow));   /* every byte must be written */
                kn_lanes_pack(&q.m, p, 0, 2);
                kn_lanes_pack(&q.m, p, 2, rows);
                if (bits != 4 && bits != 8) {   /* the bit planes' twins: the scalar one's bytes */
                    unsigned char *ps = malloc((size_t)(rows * prow));
                    kn_select(KN_ISA_SCALAR);
                    kn_lanes_pack(&q.m, ps, 0, rows);
                    kn_init(0);
                    CHECKF(memcmp(p, ps, (size_t)(rows * prow)) == 0, "q%d g%d, %lld groups: %s planes != scalar",
                           bits, group, (long long)G, kn_impl_name());
                    free(ps);
                }
                int bad = 0, bad_sd = 0, bad_pad = 0;
                for (int64_t row = 0; row < rows; row++) {
                    unsigned char *pr = p + row * prow;
                    for (int64_t g = 0; g < (G + 7) / 8 * 8; g++)
                        for (int64_t e = 0; e < group; e++) {
                            /* 8 bits: a byte at the activation's place; 4 bits: a nibble, low for even e */
                            const int64_t at8 = g / 8 * 8 * group + e / 64 * 512 + e % 64 / 16 * 128 + e % 2 * 64 +
                                                e % 16 / 8 * 32 + 4 * (g % 8) + e % 8 / 2;
                            const int64_t at =
                                g / 8 * 4 * group + e / 64 * 256 + e % 64 / 8 * 32 + 4 * (g % 8) + e % 8 / 2;
                            const unsigned got = bits == 8   ? pr[at8]
                                                 : bits != 4 ? plane_code(pr, bits, group, g, e)
                                                 : e % 2     ? pr[at] >> 4
                                                             : pr[at] & 15u;
                            bad += got != (g < G ? naive_code(&q.m, row, g * group + e) : 0u);
                        }
                    bad_sd += memcmp(pr + codes, (const char *)q.m.scales + row * sb, (size_t)sb) != 0;
                    bad_sd += memcmp(pr + codes + sb, (const char *)q.m.biases + row * sb, (size_t)sb) != 0;
                    for (int64_t b = codes + 2 * sb; b < prow; b++) bad_pad += pr[b] != 0;
                }
                CHECKF(bad == 0 && bad_sd == 0 && bad_pad == 0,
                       "q%d g%d %s, %lld groups a row: %d codes out of place, %d scale or bias rows differ, %d padding bytes not 0",
                       bits, group, nx_dtype_name(sdt), (long long)G, bad, bad_sd, bad_pad);
                free(p);
                free_affine(&q);
            }
    CHECK(kn_lanes_packed_bytes(&(kn_mat){.dtype = NX_DT_U32, .rows = 3, .cols = 64, .bits = 4, .group = 32}) == 0);
    CHECK(kn_lanes_packed_bytes(&(kn_mat){.dtype = NX_DT_U32, .rows = 3, .cols = 64, .bits = 8, .group = 32}) == 0);
    CHECK(kn_lanes_packed_bytes(&(kn_mat){.dtype = NX_DT_U32, .rows = 3, .cols = 64, .bits = 6, .group = 32}) == 0);
}

/* The int8 product with nothing to do, in every kernel set: zero columns
 * give 0 (every bit width's prefetch rule included), and T = 0 or an empty
 * row range writes nothing. */
static void test_int8_matmul_with_no_columns_rows_or_tokens(void) {
    static const int bits[] = {8, 4, 3};
    for (size_t b = 0; b < sizeof bits / sizeof *bits; b++)
        for (int g = 0; g < N_GROUPS; g++) {
            const uint32_t word = 0;
            const float one = 1.0f;
            const kn_mat w = {.data = &word, .dtype = NX_DT_U32, .rows = 4, .cols = 0, .bits = bits[b], .group = groups[g],
                              .scales = &one, .biases = &one, .sdtype = NX_DT_F32};
            kn_qx qx = make_qx(2, &w), none = qx_rows(&qx, 0, 0);
            for (int k = 0; k < N_INT8_ISAS; k++) {
                if (!use_int8_isa(k)) continue;
                float y[8] = {1, 2, 3, 4, 5, 6, 7, 8};
                kn_quantize_x(&qx, NULL, 0);
                kn_matmul_qx_rows(&w, &none, y, 4, 0, 4);
                kn_matmul_qx_rows(&w, &qx, y, 4, 2, 2);
                CHECKF(y[0] == 1 && y[7] == 8, "%s q%d g%d: an empty call wrote", kn_impl_name(), bits[b], groups[g]);
                kn_matmul_qx_rows(&w, &qx, y, 4, 0, 4);
                int zero = 1;
                for (int i = 0; i < 8; i++) zero &= y[i] == 0.0f;
                CHECKF(zero, "%s q%d g%d: zero columns did not give 0", kn_impl_name(), bits[b], groups[g]);
            }
            free(qx.q);
        }
    kn_init(0);
}

static const nx_test tests[] = {
    {"hand_packed_words_decode_as_the_spec_says",
     "4-bit nibbles low first, 8-bit bytes, the spec's 3-bit example; kn_mat_row_f32 and both twins",
     test_hand_packed_words_decode_as_the_spec_says},
    {"every_bit_width_unpacks_random_codes_at_every_position",
     "codes packed bit by bit come back from kn_mat_row_f32 and both matmul twins, bits 2..8",
     test_every_bit_width_unpacks_random_codes_at_every_position},
    {"quantizer_round_trips_within_half_a_scale",
     "grid covers each group, |w' - w| <= scale/2, row_f32 = naive reader; every bits x group x sdtype",
     test_quantizer_round_trips_within_half_a_scale},
    {"quantizer_gives_a_flat_group_a_positive_scale_and_its_value",
     "a constant group: scale > 0, q = 0, bias = the value when it is exact in sdtype",
     test_quantizer_gives_a_flat_group_a_positive_scale_and_its_value},
    {"quantizer_twins_write_the_same_bytes",
     "scalar and AVX2 quantizer: same codes, scales, biases; every bits x group x sdtype; ties, flat groups, signed zeros, wide ranges",
     test_quantizer_twins_write_the_same_bytes},
    {"row_dequantizer_twins_write_the_same_floats",
     "kn_affine_row_f32 scalar and AVX2 agree bit for bit; every bits x group x sdtype, odd rows",
     test_row_dequantizer_twins_write_the_same_floats},
    {"affine_matmul_equals_dense_matmul_on_dequantized_weights",
     "each twin equals its dense twin bit for bit; SIMD within KN_TOL_AFFINE of the reference",
     test_affine_matmul_equals_dense_matmul_on_dequantized_weights},
    {"affine_rows_are_bit_identical_whatever_t_and_row_range",
     "Y[t][r] is the same bits for T=1..16 and uneven row ranges, every format, both twins",
     test_affine_rows_are_bit_identical_whatever_t_and_row_range},
    {"affine_matmul_with_no_rows_or_no_tokens_writes_nothing",
     "T=0 or r0=r1 is a no-op; zero columns give 0; an empty row quantizes to nothing",
     test_affine_matmul_with_no_rows_or_no_tokens_writes_nothing},
    {"activation_quantizer_follows_the_definition_in_both_twins",
     "int8 activations per group: |x - d q| <= d/2, amax -> 127, ties to even, sums (d S, S itself, H of the first 16); NaN/inf groups; twins equal; every storage order (mxfp4's lanes in groups of 32 too)",
     test_activation_quantizer_follows_the_definition_in_both_twins},
    {"int8_matmul_twins_agree_and_stay_within_the_activation_rounding",
     "scalar == each SIMD set (avx2, avxvnni, avx512vnni; lanes also packed) bit for bit, = dequantized W times dequantized x, within sum|w| d/2 of the f32 product",
     test_int8_matmul_twins_agree_and_stay_within_the_activation_rounding},
    {"int8_rows_are_bit_identical_whatever_t_and_row_range",
     "Y[t][r] is the same bits for T=1..16 and uneven row ranges, every bit width and group, every kernel set, "
     "both kn_tuning choices",
     test_int8_rows_are_bit_identical_whatever_t_and_row_range},
    {"int8_matmul_on_long_and_many_rows_matches_the_reference",
     "8 to 56 groups a row and 30 rows: every kernel set bit for bit, T = 5 and T = 3 equal T = 1 row by row",
     test_int8_matmul_on_long_and_many_rows_matches_the_reference},
    {"int8_wide_passes_in_tiles_match_the_reference",
     "4- and 8-bit lanes past 2048 columns (4-bit also at 2048, T = 17), 227 rows, T = 13 and 5, both tunings: "
     "tiled wide passes equal the reference bit for bit, also from an odd row",
     test_int8_wide_passes_in_tiles_match_the_reference},
    {"packed_rows_follow_the_documented_order",
     "kn_lanes_pack: every code where quant.h says (4 and 8 bits, and the bit planes of 2, 3, 5 and 6), padding groups 0, scales and biases after the codes; groups of 32 pack nothing",
     test_packed_rows_follow_the_documented_order},
    {"int8_matmul_with_no_columns_rows_or_tokens", "every kernel set: 0 columns give 0, T = 0 or r0 = r1 writes nothing",
     test_int8_matmul_with_no_columns_rows_or_tokens},
    {"gathered_rows_equal_the_rows_in_place",
     "kn_matmul_qx_gathered: runs of 1-37 rows (apart, descending, repeated, first and last) equal the rows in "
     "place bit for bit, q4, q8 and q3 lanes, every SIMD set on packed rows; no gather without packed rows, on the "
     "scalar set or in groups of 32",
     test_gathered_rows_equal_the_rows_in_place},
    {"int8_matmul_extreme_codes_do_not_saturate_and_nan_propagates",
     "q8 0/255, every width in lanes (groups of 64 and 128), q6 g32, at their largest sums against xq = 127: exact in every kernel set; a NaN activation gives NaN",
     test_int8_matmul_extreme_codes_do_not_saturate_and_nan_propagates},
};

NX_TEST_MAIN(tests)
