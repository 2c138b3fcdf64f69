/* test_fpq.c — small-float weights (fpq.h): mxfp4, nvfp4, mxfp8 and block
 * FP8. Hand-packed words decode as the spec's tables say; the encoders round
 * to nearest (ties as MLX breaks them) and saturate; the quantizer follows
 * MLX's rule; the row
 * dequantizer twins write the same bits; every kernel set's product equals
 * the dense f32 product of the dequantized rows bit for bit, whatever T and
 * row range (matmul.h's contract). Odd shapes throughout: row counts 1, 7
 * and 13, block FP8 with columns and rows that are not multiples of 128. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/fpq.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "test.h"
#include "gathered.h"

#define MAX_T 16

static const kn_isa isas[] = {KN_ISA_AVX512VNNI, KN_ISA_AVXVNNI, KN_ISA_AVX2, KN_ISA_SCALAR};
static const char *const isa_names[] = {"avx512vnni", "avxvnni", "avx2", "scalar"};
enum { N_ISAS = sizeof isas / sizeof *isas };

/* Selects isas[k]; 0 (said once) where the CPU lacks it. */
static int use_isa(int k) {
    static int warned[N_ISAS];
    if (kn_select(isas[k]) == isas[k]) return 1;
    if (!warned[k]++) fprintf(stderr, "  note: this CPU lacks the %s kernels; their checks did not run\n", isa_names[k]);
    return 0;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- A matrix of random codes ------------------------------------------- */

typedef struct {
    kn_mat m;
    uint8_t *codes;
    void *scales;
} fmat;

/* rows x cols of mode: random element codes (NaN codes excluded unless
 * with_nan), scales of moderate size (E8M0 2^-8 .. 2^6, E4M3 from 2^-6 to
 * 448, block factors ~2^-7). Buffers at their exact size, so the sanitize
 * build catches a read past the last row. */
static fmat make_fmat(nx_test_rng *r, kn_fp_mode mode, int64_t rows, int64_t cols, int with_nan) {
    fmat f;
    memset(&f, 0, sizeof f);
    const int bits = kn_fp_bits(mode), group = kn_fp_group(mode);
    const size_t code_bytes = (size_t)(rows * cols * bits / 8);
    f.codes = malloc(code_bytes ? code_bytes : 1);
    for (size_t i = 0; i < code_bytes; i++) {
        uint8_t b = (uint8_t)nx_test_rng_next(r);
        if (bits == 8 && !with_nan && (b & 0x7f) == 0x7f) b ^= 1;
        f.codes[i] = b;
    }
    size_t n_scales;
    if (mode == KN_FP_FP8_BLOCK) {
        n_scales = (size_t)(((rows + 127) / 128) * ((cols + 127) / 128));
        float *s = malloc(n_scales * sizeof *s + 1);
        for (size_t i = 0; i < n_scales; i++) s[i] = ldexpf(1.0f + (float)(nx_test_rng_next(r) % 1000) / 1000.0f, -7);
        f.scales = s;
        f.m.sdtype = NX_DT_F32;
        f.m.dtype = NX_DT_F8_E4M3;
    } else {
        n_scales = (size_t)(rows * (cols / group));
        uint8_t *s = malloc(n_scales + 1);
        for (size_t i = 0; i < n_scales; i++)
            s[i] = mode == KN_FP_NVFP4 ? (uint8_t)(8 + nx_test_rng_next(r) % 118)   /* 2^-6 .. 448, no NaN */
                                       : (uint8_t)(119 + nx_test_rng_next(r) % 15);  /* 2^-8 .. 2^6 */
        f.scales = s;
        f.m.sdtype = NX_DT_U8;
        f.m.dtype = NX_DT_U32;
    }
    f.m.data = f.codes, f.m.scales = f.scales;
    f.m.rows = rows, f.m.cols = cols;
    f.m.fp = mode, f.m.group = group;
    return f;
}

static void free_fmat(fmat *f) { free(f->codes), free(f->scales); }

static float *make_acts(nx_test_rng *r, int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = nx_test_rng_normal(r, 1.0f);
    return x;
}

static const kn_fp_mode modes[] = {KN_FP_MXFP4, KN_FP_NVFP4, KN_FP_MXFP8, KN_FP_FP8_BLOCK};
enum { N_MODES = sizeof modes / sizeof *modes };

/* Columns for a mode: 1, 3 and 5 groups, or odd counts for block FP8. */
static int64_t cols_for(kn_fp_mode mode, int k) {
    static const int64_t fp8_cols[] = {7, 130, 261, 152, 40};   /* tails; 24 and 8 columns past the last 32 */
    return mode == KN_FP_FP8_BLOCK ? fp8_cols[k] : kn_fp_group(mode) * (1 + 2 * k);
}

/* ---- Codes --------------------------------------------------------------- */

static void test_codes_decode_as_the_spec_says(void) {
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (unsigned c = 0; c < 16; c++)
        CHECKF(bits_of(kn_e2m1_to_f32(c)) == bits_of(e2m1[c]), "e2m1 %u: %g", c, (double)kn_e2m1_to_f32(c));
    static const struct { unsigned code; float v; } e4m3[] = {
        {0x00, 0.0f}, {0x01, 0x1p-9f}, {0x07, 7 * 0x1p-9f}, {0x08, 0x1p-6f}, {0x09, 1.125f * 0x1p-6f},
        {0x38, 1.0f}, {0x3c, 1.5f}, {0x40, 2.0f}, {0x7e, 448.0f}, {0x80, -0.0f}, {0xb8, -1.0f}, {0xfe, -448.0f},
    };
    for (size_t i = 0; i < sizeof e4m3 / sizeof *e4m3; i++)
        CHECKF(bits_of(kn_e4m3_to_f32(e4m3[i].code)) == bits_of(e4m3[i].v), "e4m3 0x%02x: %g, want %g", e4m3[i].code,
               (double)kn_e4m3_to_f32(e4m3[i].code), (double)e4m3[i].v);
    CHECK(isnan(kn_e4m3_to_f32(0x7f)) && isnan(kn_e4m3_to_f32(0xff)));
    CHECK(kn_e8m0_to_f32(127) == 1.0f && kn_e8m0_to_f32(128) == 2.0f && kn_e8m0_to_f32(120) == 0x1p-7f);
    CHECK(kn_e8m0_to_f32(0) == 0x1p-127f && kn_e8m0_to_f32(254) == 0x1p127f && isinf(kn_e8m0_to_f32(255)));
}

/* Rows packed by hand, read back through kn_mat_row_f32 by each kernel set. */
static void test_hand_packed_rows_dequantize_as_the_spec_says(void) {
    /* mxfp4, one row of 32: words 0x76543210 (codes 0..7 in order, first in
     * the low nibble), 0xfedcba98 (their negatives), then zeros; scale 2^1 */
    uint32_t w4[4] = {0x76543210u, 0xfedcba98u, 0, 0x00000070u};
    uint8_t s4[1] = {128};
    kn_mat mx4 = {.data = w4, .dtype = NX_DT_U32, .rows = 1, .cols = 32, .group = 32, .scales = s4,
                  .sdtype = NX_DT_U8, .fp = KN_FP_MXFP4};
    static const float want4[16] = {0, 1, 2, 3, 4, 6, 8, 12, -0.0f, -1, -2, -3, -4, -6, -8, -12};
    /* nvfp4, one row of two groups of 16: the same words, scales E4M3 1.5 and 0.5 */
    uint8_t s16[2] = {0x3c, 0x30};
    kn_mat nv4 = mx4;
    nv4.group = 16, nv4.scales = s16, nv4.fp = KN_FP_NVFP4;
    /* mxfp8, one row of 32: bytes 0x08 (2^-6), 0x01 (2^-9), 0x38 (1), 0xbc (-1.5) in the first word */
    uint32_t w8[8] = {0xbc380108u, 0, 0, 0, 0, 0, 0, 0x7e000000u};
    uint8_t s8[1] = {126};   /* 1/2 */
    kn_mat mx8 = {.data = w8, .dtype = NX_DT_U32, .rows = 1, .cols = 32, .group = 32, .scales = s8,
                  .sdtype = NX_DT_U8, .fp = KN_FP_MXFP8};
    /* block FP8, 129 x 130: factors 1, 2 (columns 128+), 4 (rows 128+), 8 */
    uint8_t *b = calloc(129 * 130, 1);
    b[0] = 0x38, b[129] = 0x38, b[128 * 130] = 0xb8, b[128 * 130 + 129] = 0x40;
    float fs[4] = {1, 2, 4, 8};
    kn_mat fb = {.data = b, .dtype = NX_DT_F8_E4M3, .rows = 129, .cols = 130, .group = 128, .scales = fs,
                 .sdtype = NX_DT_F32, .fp = KN_FP_FP8_BLOCK};
    const uint16_t fs16[4] = {0x3f80, 0x4000, 0x4080, 0x4100};   /* 1, 2, 4, 8 */
    kn_mat fb16 = fb;
    fb16.scales = fs16, fb16.sdtype = NX_DT_BF16;
    float out[130];
    for (int k = 0; k < N_ISAS; k++) {
        if (!use_isa(k)) continue;
        kn_mat_row_f32(&mx4, 0, out);
        for (int i = 0; i < 16; i++)
            CHECKF(bits_of(out[i]) == bits_of(want4[i]), "%s mxfp4 [%d] = %g", isa_names[k], i, (double)out[i]);
        CHECKF(out[16] == 0 && out[31] == 0 && out[25] == 12, "%s mxfp4 tail: %g %g", isa_names[k], (double)out[25], (double)out[31]);
        kn_mat_row_f32(&nv4, 0, out);
        CHECKF(out[7] == 9.0f && out[15] == -9.0f && out[25] == 3.0f, "%s nvfp4: %g %g %g", isa_names[k], (double)out[7],
               (double)out[15], (double)out[25]);
        kn_mat_row_f32(&mx8, 0, out);
        CHECKF(out[0] == 0x1p-7f && out[1] == 0x1p-10f && out[2] == 0.5f && out[3] == -0.75f && out[31] == 224.0f,
               "%s mxfp8: %g %g %g %g %g", isa_names[k], (double)out[0], (double)out[1], (double)out[2], (double)out[3],
               (double)out[31]);
        kn_mat_row_f32(&fb, 0, out);
        CHECKF(out[0] == 1.0f && out[129] == 2.0f && out[1] == 0.0f, "%s fp8 row 0: %g %g", isa_names[k], (double)out[0],
               (double)out[129]);
        kn_mat_row_f32(&fb, 128, out);
        CHECKF(out[0] == -4.0f && out[129] == 16.0f, "%s fp8 row 128: %g %g", isa_names[k], (double)out[0], (double)out[129]);
        kn_mat_row_f32(&fb16, 128, out);   /* the factors as BF16 */
        CHECKF(out[0] == -4.0f && out[129] == 16.0f, "%s fp8 bf16 factors: %g %g", isa_names[k], (double)out[0],
               (double)out[129]);
    }
    free(b);
    kn_init(0);
}

static void test_encoders_round_to_nearest_and_saturate(void) {
    for (unsigned c = 0; c < 16; c++)
        if (c != 8) CHECKF(kn_f32_to_e2m1(kn_e2m1_to_f32(c)) == c, "e2m1 code %u", c);
    /* MLX's table search: ties to the smaller magnitude, zeros as +0 */
    static const struct { float x; unsigned code; } e2[] = {
        {0.25f, 0}, {0.26f, 1}, {0.75f, 1}, {0.76f, 2}, {1.25f, 2}, {1.75f, 3}, {2.5f, 4}, {3.5f, 5}, {5.0f, 6},
        {5.01f, 7}, {7.0f, 7}, {1e30f, 7}, {-0.3f, 9}, {-0.75f, 9}, {-2.9f, 13}, {-0.2f, 0}, {-0.0f, 0},
    };
    for (size_t i = 0; i < sizeof e2 / sizeof *e2; i++)
        CHECKF(kn_f32_to_e2m1(e2[i].x) == e2[i].code, "e2m1(%g) = %u, want %u", (double)e2[i].x, kn_f32_to_e2m1(e2[i].x),
               e2[i].code);
    /* every finite E4M3 code round-trips; the midpoint of two neighbours goes
     * to the even code, and anything past it to the nearer one */
    for (unsigned c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        CHECKF(kn_f32_to_e4m3(kn_e4m3_to_f32(c)) == c, "e4m3 code 0x%02x", c);
        if ((c & 0x7f) == 0x7e) continue;
        const float lo = kn_e4m3_to_f32(c), hi = kn_e4m3_to_f32(c + 1), mid = (lo + hi) / 2;
        const unsigned even = c % 2 == 0 ? c : c + 1;
        CHECKF(kn_f32_to_e4m3(mid) == even, "e4m3 midpoint of 0x%02x and 0x%02x: 0x%02x", c, c + 1, kn_f32_to_e4m3(mid));
        CHECKF(kn_f32_to_e4m3(nextafterf(mid, lo)) == c && kn_f32_to_e4m3(nextafterf(mid, hi)) == c + 1,
               "e4m3 near the midpoint of 0x%02x", c);
    }
    CHECK(kn_f32_to_e4m3(460.0f) == 0x7e && kn_f32_to_e4m3(464.0f) == 0x7e && kn_f32_to_e4m3(1e30f) == 0x7e &&
          kn_f32_to_e4m3(-1e30f) == 0xfe && kn_f32_to_e4m3(NAN) == 0x7f);
    CHECK(kn_f32_to_e8m0(1.0f) == 127 && kn_f32_to_e8m0(3.0f) == 129 && kn_f32_to_e8m0(0.7f) == 127 &&
          kn_f32_to_e8m0(0.5f) == 126 && kn_f32_to_e8m0(nextafterf(0.5f, 1)) == 127 && kn_f32_to_e8m0(0x1p-130f) == 0 &&
          kn_f32_to_e8m0(0.0f) == 127 && kn_f32_to_e8m0(1e-45f) == 0 && kn_f32_to_e8m0(INFINITY) == 255);
}

/* The quantizer: each group's scale code is MLX's (the smallest power of two
 * >= amax / 6 or amax / 448, found by search; or E4M3 of amax / 6 for
 * nvfp4), and each element's code is a nearest one to w / scale (an
 * independent search over every code). */
static void test_quantizer_follows_the_mlx_rule(void) {
    nx_test_rng r = {0x5EED0F9A7E11ULL};
    const kn_fp_mode qmodes[] = {KN_FP_MXFP4, KN_FP_NVFP4, KN_FP_MXFP8};
    for (int m = 0; m < 3; m++) {
        const kn_fp_mode mode = qmodes[m];
        const int bits = kn_fp_bits(mode), group = kn_fp_group(mode);
        const int64_t cols = 5 * group;
        float w[160], deq[160];
        uint32_t codes[40];
        uint8_t scales[10];
        double err = 0, ref = 0;
        for (int rep = 0; rep < 50; rep++) {
            for (int64_t c = 0; c < cols; c++) w[c] = nx_test_rng_normal(&r, 0.05f);
            if (rep == 0) memset(w, 0, sizeof(float) * (size_t)group);   /* an all-zero group */
            kn_fp_quantize_row(w, cols, mode, codes, scales);
            kn_mat q = {.data = codes, .dtype = NX_DT_U32, .rows = 1, .cols = cols, .group = group, .scales = scales,
                        .sdtype = NX_DT_U8, .fp = mode};
            kn_mat_row_f32(&q, 0, deq);
            for (int64_t g = 0; g < cols / group; g++) {
                float amax = 0;
                for (int i = 0; i < group; i++) amax = fmaxf(amax, fabsf(w[g * group + i]));
                unsigned want = amax == 0 ? (mode == KN_FP_NVFP4 ? 0 : 127) : kn_f32_to_e4m3(amax / 6);
                if (mode != KN_FP_NVFP4 && amax > 0) {   /* the smallest power of two >= amax / max, by search */
                    const float x = amax / (bits == 4 ? 6.0f : 448.0f);
                    int e = -127;
                    while (ldexpf(1.0f, e) < x) e++;
                    want = (unsigned)(127 + e);
                }
                CHECKF(scales[g] == want, "mode %s group %lld: scale code %u, want %u", kn_fp_name(mode), (long long)g,
                       scales[g], want);
                const float scale = mode == KN_FP_NVFP4 ? kn_e4m3_to_f32(scales[g]) : kn_e8m0_to_f32(scales[g]);
                for (int i = 0; i < group; i++) {
                    const int64_t c = g * group + i;
                    float best = INFINITY;
                    for (unsigned k = 0; k < (bits == 4 ? 16u : 256u); k++) {
                        const float v = (bits == 4 ? kn_e2m1_to_f32(k) : kn_e4m3_to_f32(k)) * scale;
                        if (v == v) best = fminf(best, fabsf(v - w[c]));
                    }
                    CHECKF(fabsf(deq[c] - w[c]) <= best * (1 + 0x1p-20f) + 0x1p-140f, "mode %s col %lld: |%g - %g| > %g",
                           kn_fp_name(mode), (long long)c, (double)deq[c], (double)w[c], (double)best);
                    err += (double)(deq[c] - w[c]) * (deq[c] - w[c]), ref += (double)w[c] * w[c];
                }
            }
        }
        printf("  %s: round-trip nmse of N(0, 0.05) weights %.2e\n", kn_fp_name(mode), err / ref);
        /* measured: mxfp4 1.3e-2, nvfp4 9.3e-3, mxfp8 7.2e-4 (with round-to-nearest E8M0 scales,
         * which saturate half the groups' largest elements: 1.6e-2, -, 4.9e-3) */
        CHECKF(err / ref < (bits == 4 ? 0.025 : 2e-3), "%s nmse %.2e", kn_fp_name(mode), err / ref);
    }
}

/* ---- Dequantization and products ------------------------------------------ */

static void test_row_dequantizer_twins_write_the_same_bits(void) {
    nx_test_rng r = {0xD0E5F00DULL};
    for (int m = 0; m < N_MODES; m++)
        for (int k = 0; k < 3; k++) {
            const int64_t rows = k == 2 ? 129 : 7, cols = cols_for(modes[m], k);
            fmat f = make_fmat(&r, modes[m], rows, cols, 1);
            float *a = malloc((size_t)cols * sizeof *a), *b = malloc((size_t)cols * sizeof *b);
            for (int64_t row = 0; row < rows; row++) {
                kn_fp_row_f32_ref(&f.m, row, a);
#if defined(__x86_64__) || defined(__i386__)
                if (kn_isa_available(KN_ISA_AVX2) >= KN_ISA_AVX2) {
                    kn_fp_row_f32_avx2(&f.m, row, b);
                    CHECKF(memcmp(a, b, (size_t)cols * sizeof *a) == 0, "%s %lldx%lld row %lld differs", kn_fp_name(modes[m]),
                           (long long)rows, (long long)cols, (long long)row);
                }
#endif
            }
            free(a), free(b);
            free_fmat(&f);
        }
}

/* A dense f32 copy of f: its rows dequantized by the scalar definition. */
static float *dequantized(const fmat *f) {
    float *d = malloc((size_t)(f->m.rows * f->m.cols) * sizeof *d + 1);
    for (int64_t row = 0; row < f->m.rows; row++) kn_fp_row_f32_ref(&f->m, row, d + row * f->m.cols);
    return d;
}

/* In every kernel set: the product of f equals the dense f32 product of the
 * dequantized matrix bit for bit, for T = 1..16, one call over all rows and
 * uneven row ranges, and no call writes outside its rows. */
static void test_products_equal_the_dense_product_of_the_dequantized_rows(void) {
    nx_test_rng r = {0xF00DFACEULL};
    enum { ROWS = 13, PAD = 3 };
    for (int m = 0; m < N_MODES; m++)
        for (int k = 0; k < 5; k++) {
            const int64_t cols = cols_for(modes[m], k), ldx = cols + 3, ldy = ROWS + PAD;
            fmat f = make_fmat(&r, modes[m], ROWS, cols, 0);
            if (k == 3 && modes[m] == KN_FP_MXFP8) {   /* scales whose 256-fold overflows: 2^120 and 2^127 */
                ((uint8_t *)f.scales)[2 * (cols / 32) + 1] = 247, ((uint8_t *)f.scales)[5 * (cols / 32)] = 254;
                for (int c = 0; c < 32; c++) f.codes[2 * cols + 32 + c] &= 0xaf, f.codes[5 * cols + c] &= 0xaf;
            }
            if (k == 1 && modes[m] == KN_FP_MXFP8) {   /* E8M0 0 (2^-127), 246 (the largest fast one), 255 (inf) */
                uint8_t *sc = f.scales;
                sc[0] = 0, sc[4] = 246, sc[7 * 3 + 2] = 255;
                for (int c = 0; c < 32; c++) f.codes[4 * 32 + c] &= 0xaf;   /* row 1's group 1 at 2^119: finite */
            }
            if (k == 1 && modes[m] == KN_FP_FP8_BLOCK) {   /* block factors in bf16: negative, subnormal, NaN-free */
                float *sf = f.scales;
                uint16_t *b = malloc(2 * sizeof *b);
                b[0] = 0xbc80;   /* -2^-6 */
                b[1] = 0x0005;   /* a bf16 subnormal */
                (void)sf;
                free(f.scales);
                f.scales = b, f.m.scales = b, f.m.sdtype = NX_DT_BF16;
            }
            if (k == 2 && modes[m] == KN_FP_FP8_BLOCK) {   /* E4M3 NaN codes: the products' NaNs keep their bits */
                f.codes[3 * cols + 5] = 0x7f, f.codes[7 * cols + 200] = 0xff;
            }
            if (k == 4 && modes[m] == KN_FP_FP8_BLOCK) {   /* the first column block's factor 2^121 */
                ((float *)f.scales)[0] = 0x1p121f;
                for (int64_t i = 0; i < ROWS * cols; i++)
                    if (i % cols < 128) f.codes[i] &= 0xaf;   /* finite products: |e| < 1 */
            }
            float *dq = dequantized(&f), *x = make_acts(&r, MAX_T * ldx);
            const kn_mat dense = {.data = dq, .dtype = NX_DT_F32, .rows = ROWS, .cols = cols};
            float want[MAX_T * (ROWS + PAD)], got[MAX_T * (ROWS + PAD)];
            for (int s = 0; s < N_ISAS; s++) {
                if (!use_isa(s)) continue;
                for (int T = 1; T <= MAX_T; T += (T < 4 ? 1 : 5)) {
                    for (int i = 0; i < MAX_T * ldy; i++) want[i] = got[i] = -7.0f;
                    kn_matmul_rows(&dense, x, ldx, T, want, ldy, 0, ROWS);
                    if (T % 2) {
                        kn_matmul_rows(&f.m, x, ldx, T, got, ldy, 0, ROWS);
                    } else {   /* row ranges of 1, 2, 3, 5, ... */
                        for (int64_t r0 = 0, n = 1; r0 < ROWS; r0 += n, n = n % 5 + 1)
                            kn_matmul_rows(&f.m, x, ldx, T, got, ldy, r0, r0 + n < ROWS ? r0 + n : ROWS);
                    }
                    CHECKF(memcmp(want, got, sizeof want) == 0, "%s %s %lld cols T=%d: product differs", isa_names[s],
                           kn_fp_name(modes[m]), (long long)cols, T);
                    /* T = 1 row by row equals the same row of the T-row call */
                    float one[ROWS];   /* y[t * ldy + r]: row r lands at one[r] */
                    kn_matmul_rows(&f.m, x + (T - 1) * ldx, ldx, 1, one, 1, ROWS - 1, ROWS);
                    CHECKF(bits_of(one[ROWS - 1]) == bits_of(got[(T - 1) * ldy + ROWS - 1]), "%s %s T=%d: last row alone differs",
                           isa_names[s], kn_fp_name(modes[m]), T);
                }
            }
            free(dq), free(x);
            free_fmat(&f);
        }
    kn_init(0);
}

/* mxfp4 and nvfp4 on int8 activations (fpq.h): every kernel set equals the
 * scalar definition bit for bit, for T = 1..16 and uneven row ranges; the
 * result is the dequantized weights times the dequantized activations
 * (checked in double), within the activations' rounding of the f32
 * product; the smallest scale codes (E8M0 0 and 1: subnormal h(s); E4M3
 * subnormals) included. */
static void test_fp4_int8_products_follow_the_definition(void) {
    nx_test_rng r = {0x1A7E5EEDULL};
    enum { ROWS = 13, PAD = 3 };
    /* 1, 3, 9, 17 and 33 groups of 32: full and partial blocks of 8 and steps of 16 */
    static const int64_t col_counts[] = {32, 96, 288, 544, 1056};
    for (int k = 0; k < 10; k++) {
        const kn_fp_mode mode = k % 2 ? KN_FP_NVFP4 : KN_FP_MXFP4;
        const int64_t cols = col_counts[k / 2], ldx = cols + 5, ldy = ROWS + PAD;
        fmat f = make_fmat(&r, mode, ROWS, cols, 0);
        CHECK(kn_fp_int8(&f.m) && kn_qx_lanes(&f.m));
        uint8_t *sc = f.scales;
        if (k == 6) sc[0] = 0, sc[1] = 1, sc[2] = 2, sc[3] = 160;   /* h: 2^-128, 2^-127 (subnormals), 2^-126, 2^32 */
        if (k == 7)   /* E4M3: 2^-9, 7 * 2^-9, -0, 448, -1, -2^-9 */
            sc[0] = 1, sc[1] = 7, sc[2] = 0x80, sc[3] = 0x7e, sc[4] = 0xb8, sc[19] = 0x81;
        float *x = make_acts(&r, MAX_T * ldx), *dq = dequantized(&f);
        void *buf = malloc(kn_qx_bytes(MAX_T, cols));
        memset(buf, 0xff, kn_qx_bytes(MAX_T, cols));   /* NaN where the quantizer writes nothing */
        kn_qx qx;
        kn_qx_bind(&qx, buf, MAX_T, &f.m);
        CHECK(qx.group == 32 && qx.lanes);
        kn_quantize_x(&qx, x, ldx);
        float want[MAX_T * (ROWS + PAD)], got[MAX_T * (ROWS + PAD)];
        for (int i = 0; i < MAX_T * ldy; i++) want[i] = -7.0f;
        kn_fp_matmul_qx_rows_ref(&f.m, &qx, want, ldy, 0, ROWS);
        /* the definition's value, in double: sum_c w_c (d xq_c); and the f32 product */
        for (int t = 0; t < MAX_T; t++)
            for (int64_t row = 0; row < ROWS; row++) {
                double exact = 0, f32 = 0, bound = 0, mag = 0;
                for (int64_t c = 0; c < cols; c++) {
                    const double wc = dq[row * cols + c], dc = qx.d[t * qx.ldg + c / 32];
                    const int xq = qx.q[t * qx.ldq + kn_qx_pos(&qx, c / 32, c % 32)];
                    exact += wc * dc * xq;
                    f32 += wc * x[t * ldx + c];
                    bound += fabs(wc) * dc / 2;
                    mag += fabs(wc * dc * xq);
                }
                const double y = want[t * ldy + row];
                CHECKF(fabs(y - exact) <= 1e-6 * mag + 1e-30, "t=%d row %lld: %g against %g", t, (long long)row, y, exact);
                CHECKF(fabs(y - f32) <= bound * 1.0001 + 1e-6 * mag + 1e-30, "t=%d row %lld: %g, f32 %g, bound %g", t,
                       (long long)row, y, f32, bound);
            }
        /* packed rows (kn_lanes_pack), read with the codes and scales as
         * stored zeroed: the product must take everything from the packing */
        unsigned char *packed = malloc(kn_lanes_packed_bytes(&f.m));
        kn_lanes_pack(&f.m, packed, 0, 5);
        kn_lanes_pack(&f.m, packed, 5, ROWS);
        void *zeros = calloc((size_t)(ROWS * cols), 1);
        const kn_mat from_packed = {.data = zeros, .dtype = f.m.dtype, .rows = ROWS, .cols = cols, .group = f.m.group,
                                    .scales = zeros, .sdtype = f.m.sdtype, .packed = packed, .fp = mode};
        for (int s = 0; s < N_ISAS; s++)
            for (int pk = 0; pk < 2; pk++) {
                if (!use_isa(s) || (pk && isas[s] == KN_ISA_SCALAR)) continue;   /* packed rows: the SIMD sets' */
                const kn_mat *w = pk ? &from_packed : &f.m;
                for (int T = 1; T <= MAX_T; T += (T < 5 ? 1 : 5)) {
                    qx.T = T;
                    for (int i = 0; i < MAX_T * ldy; i++) got[i] = -7.0f;
                    if (T % 2) {
                        kn_matmul_qx_rows(w, &qx, got, ldy, 0, ROWS);
                    } else {
                        for (int64_t r0 = 0, n = 1; r0 < ROWS; r0 += n, n = n % 5 + 1)
                            kn_matmul_qx_rows(w, &qx, got, ldy, r0, r0 + n < ROWS ? r0 + n : ROWS);
                    }
                    CHECKF(memcmp(want, got, (size_t)T * ldy * sizeof(float)) == 0,
                           "%s %s int8 %lld cols T=%d%s: differs", isa_names[s], kn_fp_name(mode), (long long)cols, T,
                           pk ? " packed" : "");
                    for (int i = T * (int)ldy; i < MAX_T * ldy; i++) CHECKF(got[i] == -7.0f, "T=%d wrote y[%d]", T, i);
                }
                qx.T = MAX_T;
            }
        free(packed), free(zeros);
        free(buf), free(x), free(dq);
        free_fmat(&f);
    }
    kn_init(0);
}

/* Wide passes whose activations outgrow L1 run in tiles of rows (quant.h:
 * KN_QX_TILE_X_BYTES, KN_QX_TILE_BYTES; fpq_qx.inc): mxfp4 and nvfp4 rows of
 * 2080 columns (65 groups of 32: a partial block), 301 rows (three tiles),
 * T = 13 (blocks of 4 and of 1: 27 KB of activations), as stored and
 * packed, every SIMD set: bit for bit the definition, over all rows and
 * over rows 3 .. 298. */
static void test_fp4_wide_passes_in_tiles_follow_the_definition(void) {
    enum { ROWS = 301, T = 13, COLS = 2080 };
    nx_test_rng r = {0x711E5F94ULL};
    float *want = malloc(sizeof(float) * T * ROWS), *got = malloc(sizeof(float) * T * ROWS);
    for (int k = 0; k < 2; k++) {
        const kn_fp_mode mode = k ? KN_FP_NVFP4 : KN_FP_MXFP4;
        fmat f = make_fmat(&r, mode, ROWS, COLS, 0);
        float *x = make_acts(&r, T * COLS);
        void *buf = malloc(kn_qx_bytes(T, COLS)), *packed = malloc(kn_lanes_packed_bytes(&f.m));
        kn_lanes_pack(&f.m, packed, 0, ROWS);
        kn_mat from_packed = f.m;
        from_packed.packed = packed;
        kn_qx qx;
        kn_qx_bind(&qx, buf, T, &f.m);
        kn_quantize_x(&qx, x, COLS);
        kn_fp_matmul_qx_rows_ref(&f.m, &qx, want, ROWS, 0, ROWS);
        for (int s = 0; s < N_ISAS - 1; s++)   /* the SIMD sets */
            for (int pk = 0; pk < 2; pk++) {
                if (!use_isa(s)) continue;
                const kn_mat *w = pk ? &from_packed : &f.m;
                for (int i = 0; i < T * ROWS; i++) got[i] = NAN;
                kn_matmul_qx_rows(w, &qx, got, ROWS, 0, ROWS);
                CHECKF(memcmp(want, got, sizeof(float) * T * ROWS) == 0, "%s %s%s T=%d: differs", isa_names[s],
                       kn_fp_name(mode), pk ? " packed" : "", T);
                for (int i = 0; i < T * ROWS; i++) got[i] = NAN;
                kn_matmul_qx_rows(w, &qx, got, ROWS, 3, ROWS - 2);
                for (int t = 0; t < T; t++)
                    CHECKF(memcmp(want + t * ROWS + 3, got + t * ROWS + 3, sizeof(float) * (ROWS - 5)) == 0 &&
                               isnan(got[t * ROWS + 2]) && isnan(got[t * ROWS + ROWS - 2]),
                           "%s %s%s rows 3..%d, t=%d: differ or spill", isa_names[s], kn_fp_name(mode),
                           pk ? " packed" : "", ROWS - 3, t);
            }
        free(buf), free(packed), free(x);
        free_fmat(&f);
    }
    free(want), free(got);
    kn_init(0);
}

/* The int8 product of fp4 matrix f (rows ROWS4) with T4 activation rows x
 * (cols apart): the definition into want, and every SIMD set's product,
 * from packed rows and from the codes as stored, checked against it bit
 * for bit (NaNs included). */
enum { ROWS4 = 5, T4 = 4 };
static void fp4_sets_match_the_definition(const fmat *f, const float *x, float want[T4 * ROWS4]) {
    const int64_t cols = f->m.cols;
    void *buf = malloc(kn_qx_bytes(T4, cols)), *packed = malloc(kn_lanes_packed_bytes(&f->m));
    memset(buf, 0xff, kn_qx_bytes(T4, cols));   /* NaN where the quantizer writes nothing */
    kn_lanes_pack(&f->m, packed, 0, ROWS4);
    kn_mat from_packed = f->m;
    from_packed.packed = packed;
    kn_qx qx;
    kn_qx_bind(&qx, buf, T4, &f->m);
    kn_quantize_x(&qx, x, cols);
    kn_fp_matmul_qx_rows_ref(&f->m, &qx, want, ROWS4, 0, ROWS4);
    float got[T4 * ROWS4];
    for (int s = 0; s < N_ISAS - 1; s++)   /* the SIMD sets */
        for (int pk = 0; pk < 2; pk++) {
            if (!use_isa(s)) continue;
            for (int i = 0; i < T4 * ROWS4; i++) got[i] = -7.0f;
            kn_matmul_qx_rows(pk ? &from_packed : &f->m, &qx, got, ROWS4, 0, ROWS4);
            for (int i = 0; i < T4 * ROWS4; i++)
                CHECKF(bits_of(got[i]) == bits_of(want[i]), "%s %s%s y[%d] = %08x against %08x", isa_names[s],
                       kn_fp_name((kn_fp_mode)f->m.fp), pk ? " packed" : "", i, (unsigned)bits_of(got[i]),
                       (unsigned)bits_of(want[i]));
        }
    kn_init(0);
    free(buf), free(packed);
}

/* A NaN nvfp4 scale code (0x7f, 0xff) makes its row's product NaN in every
 * kernel set, packed or not, as the dequantized weights would, with the
 * definition's bits (the NaN's too). */
static void test_nvfp4_nan_scales_give_nan(void) {
    nx_test_rng r = {0xBADC0DEULL};
    const int64_t cols = 288;
    fmat f = make_fmat(&r, KN_FP_NVFP4, ROWS4, cols, 0);
    uint8_t *sc = f.scales;
    sc[1 * 18 + 5] = 0x7f, sc[3 * 18 + 16] = 0xff;   /* rows 1 and 3 */
    float *x = make_acts(&r, T4 * cols), want[T4 * ROWS4];
    fp4_sets_match_the_definition(&f, x, want);
    for (int t = 0; t < T4; t++)
        for (int row = 0; row < ROWS4; row++)
            CHECKF(isnan(want[t * ROWS4 + row]) == (row == 1 || row == 3), "row %d t %d: %g", row, t, want[t * ROWS4 + row]);
    free(x);
    free_fmat(&f);
}

/* mxfp4 and nvfp4 int8 products at the extremes, in every kernel set, packed
 * or not, bit for bit with the definition: every code at the largest
 * magnitude (u = 28 or 4 against xq = +-127: the AVX2 int16 pair sums at
 * their bound, 4 steps of 2 * 28 * 127), an infinite E8M0 scale (255), and
 * an activation group holding a NaN (its row of outputs NaN). */
static void test_fp4_int8_extremes(void) {
    nx_test_rng r = {0xE87E3E5ULL};
    const int64_t cols = 288, G = cols / 32;
    for (int mi = 0; mi < 2; mi++) {
        const kn_fp_mode mode = mi ? KN_FP_NVFP4 : KN_FP_MXFP4;
        fmat f = make_fmat(&r, mode, ROWS4, cols, 0);
        for (int64_t c = 0; c < cols / 2; c++) {
            f.codes[c] = 0x77;                              /* row 0: every element 6 */
            f.codes[cols / 2 + c] = 0xff;                   /* row 1: every element -6 */
            f.codes[cols + c] = 0xf7;                       /* row 2: 6, -6, 6, ... */
        }
        if (!mi) ((uint8_t *)f.scales)[3 * G + 1] = 255;   /* row 3, group 1: h infinite */
        float *x = malloc((size_t)(T4 * cols) * sizeof *x), want[T4 * ROWS4];
        for (int64_t c = 0; c < cols; c++) {
            x[c] = 1.0f, x[cols + c] = -1.0f;               /* xq = 127, -127 */
            x[2 * cols + c] = c % 2 ? -0.5f : 0.5f;
            x[3 * cols + c] = nx_test_rng_normal(&r, 1.0f);
        }
        x[3 * cols + 70] = NAN;                              /* activation row 3's group 2 */
        fp4_sets_match_the_definition(&f, x, want);
        /* the definition's value where it is finite: 6 * 127 * d * scale a group */
        CHECKF(want[0] > 0 && want[ROWS4] < 0 && want[1] < 0 && fabsf(want[2]) < fabsf(want[0]) * 1e-3f,
               "%s: %g %g %g %g", kn_fp_name(mode), want[0], want[ROWS4], want[1], want[2]);
        for (int row = 0; row < ROWS4; row++)
            CHECKF(isnan(want[3 * ROWS4 + row]), "%s: NaN group, row %d", kn_fp_name(mode), row);
        if (!mi) CHECKF(isinf(want[3]) || isnan(want[3]), "mxfp4: an infinite scale gives %g", want[3]);
        free(x);
        free_fmat(&f);
    }
}

/* kn_lanes_pack on mxfp4 and nvfp4 (quant.h): element c of group g of 32
 * in the low (even c) or high nibble of byte (g / 8) * 128 + (c / 8) * 32 +
 * 4 (g % 8) + (c % 8) / 2, a partial block's missing groups 0; then the
 * row's scale bytes and zeros to a multiple of 64 bytes, up to the next 64
 * bytes of scales. nvfp4 rows of 16 + 32k columns and mxfp8 pack nothing. */
static void test_fp4_packed_rows_follow_the_documented_order(void) {
    nx_test_rng r = {0x9AC4ED0DE6ULL};
    static const int64_t gprs[] = {1, 7, 8, 9, 16, 17, 33, 120};
    for (size_t k = 0; k < 2 * sizeof gprs / sizeof *gprs; k++) {
        const kn_fp_mode mode = k % 2 ? KN_FP_NVFP4 : KN_FP_MXFP4;
        const int64_t rows = 3, G = gprs[k / 2], cols = 32 * G, codes = (G + 7) / 8 * 128;
        const int64_t sb = cols / kn_fp_group(mode), prow = (codes + sb + 63) / 64 * 64;
        fmat f = make_fmat(&r, mode, rows, cols, 0);
        CHECK(kn_qx_lanes(&f.m) && kn_lanes_packed_code_bytes(&f.m) == codes && kn_lanes_packed_row_bytes(&f.m) == prow);
        CHECK(kn_lanes_packed_bytes(&f.m) == (size_t)(rows * prow) && prow - codes >= (sb + 63) / 64 * 64);
        unsigned char *p = malloc((size_t)(rows * prow));
        memset(p, 0xAB, (size_t)(rows * prow));   /* every byte must be written */
        kn_lanes_pack(&f.m, p, 0, 1);
        kn_lanes_pack(&f.m, p, 1, rows);
        int bad = 0, bad_sc = 0, bad_pad = 0;
        for (int64_t row = 0; row < rows; row++) {
            const unsigned char *pr = p + row * prow, *q = f.codes + row * cols / 2;
            for (int64_t g = 0; g < (G + 7) / 8 * 8; g++)
                for (int64_t c = 0; c < 32; c++) {
                    const int64_t at = g / 8 * 128 + c / 8 * 32 + 4 * (g % 8) + c % 8 / 2;
                    const unsigned got = c % 2 ? pr[at] >> 4 : pr[at] & 15u;
                    const int64_t e = g * 32 + c;
                    bad += got != (g < G ? (q[e / 2] >> (4 * (e % 2))) & 15u : 0u);
                }
            bad_sc += memcmp(pr + codes, (const uint8_t *)f.scales + row * sb, (size_t)sb) != 0;
            for (int64_t b = codes + sb; b < prow; b++) bad_pad += pr[b] != 0;
        }
        CHECKF(bad == 0 && bad_sc == 0 && bad_pad == 0,
               "%s, %lld groups of 32 a row: %d codes out of place, %d scale rows differ, %d padding bytes not 0",
               kn_fp_name(mode), (long long)G, bad, bad_sc, bad_pad);
        free(p);
        free_fmat(&f);
    }
    nx_test_rng r2 = {3};
    fmat nv = make_fmat(&r2, KN_FP_NVFP4, 2, 48, 0), m8 = make_fmat(&r2, KN_FP_MXFP8, 2, 64, 0);
    CHECK(!kn_qx_lanes(&nv.m) && !kn_fp_int8(&nv.m) && kn_lanes_packed_bytes(&nv.m) == 0);
    CHECK(!kn_qx_lanes(&m8.m) && !kn_fp_int8(&m8.m) && kn_lanes_packed_bytes(&m8.m) == 0);
    free_fmat(&nv), free_fmat(&m8);
}

static void test_sizes_and_views(void) {
    nx_test_rng r = {7};
    fmat a = make_fmat(&r, KN_FP_MXFP4, 3, 64, 0), b = make_fmat(&r, KN_FP_NVFP4, 3, 64, 0),
         c = make_fmat(&r, KN_FP_MXFP8, 3, 64, 0), d = make_fmat(&r, KN_FP_FP8_BLOCK, 130, 200, 0);
    CHECK(kn_fp_valid(&a.m) && kn_fp_valid(&b.m) && kn_fp_valid(&c.m) && kn_fp_valid(&d.m));
    CHECK(kn_mat_bytes(&a.m) == 3 * 64 * (0.5 + 1.0 / 32) && kn_mat_bytes(&b.m) == 3 * 64 * (0.5 + 1.0 / 16) &&
          kn_mat_bytes(&c.m) == 3 * 64 * (1 + 1.0 / 32) && kn_mat_bytes(&d.m) == 130 * 200 + 2 * 2 * 4);
    kn_mat bad = a.m;
    bad.group = 64;
    CHECK(!kn_fp_valid(&bad));
    bad = d.m, bad.cols = KN_FP_MAX_COLS + 1;
    CHECK(!kn_fp_valid(&bad));
    CHECK(strcmp(kn_fp_name(KN_FP_NVFP4), "nvfp4") == 0 && kn_fp_bits(KN_FP_MXFP8) == 8 && kn_fp_group(KN_FP_NVFP4) == 16);
    free_fmat(&a), free_fmat(&b), free_fmat(&c), free_fmat(&d);
}

/* mxfp4 and nvfp4 products over gathered rows (kn_matmul_qx_gathered)
 * give the bits of the rows in place: 1 and 35 groups a row (1120 columns),
 * 70 rows, every SIMD set on packed rows; none gathers on codes as stored
 * or on the scalar set (gathered.h). */
static void test_fp4_gathered_rows_equal_the_rows_in_place(void) {
    enum { ROWS = 70 };
    nx_test_rng r = {0x6A7E4EDF4ULL};
    float want[ROWS];
    int gathered = 0;
    for (int k = 0; k < 4; k++) {
        const kn_fp_mode mode = k % 2 ? KN_FP_NVFP4 : KN_FP_MXFP4;
        const int64_t cols = k < 2 ? 32 : 1120;
        fmat f = make_fmat(&r, mode, ROWS, cols, 0);
        float *x = make_acts(&r, cols);
        void *buf = malloc(kn_qx_bytes(1, cols)), *packed = malloc(kn_lanes_packed_bytes(&f.m));
        kn_lanes_pack(&f.m, packed, 0, ROWS);
        kn_qx qx;
        kn_qx_bind(&qx, buf, 1, &f.m);
        for (int s = 0; s < N_ISAS; s++)
            for (int pk = 0; pk < 2; pk++) {
                if (!use_isa(s)) continue;
                f.m.packed = pk ? packed : NULL;
                kn_quantize_x(&qx, x, cols);
                kn_matmul_qx_rows(&f.m, &qx, want, ROWS, 0, ROWS);
                char what[96];
                snprintf(what, sizeof what, "%s %s %lld cols%s", isa_names[s], kn_fp_name(mode), (long long)cols,
                         pk ? " packed" : "");
                gathered += gathered_rows_match(&f.m, &qx, want, what);
            }
        f.m.packed = NULL;
        free(buf), free(packed), free(x);
        free_fmat(&f);
    }
    printf("  %d gathered checks\n", gathered);
    CHECK(gathered > 0 || kn_isa_available(KN_ISA_BEST) == KN_ISA_SCALAR);
    kn_init(0);
}

static const nx_test tests[] = {
    {"codes_decode_as_the_spec_says", "E2M1 all 16, E4M3 zero/subnormal/normal/448/NaN/negatives, E8M0 0/127/254/255",
     test_codes_decode_as_the_spec_says},
    {"hand_packed_rows_dequantize_as_the_spec_says",
     "mxfp4/nvfp4 nibbles low first, mxfp8 bytes in order, block FP8's four factors of a 129 x 130 matrix; every kernel set",
     test_hand_packed_rows_dequantize_as_the_spec_says},
    {"encoders_round_to_nearest_and_saturate",
     "E2M1 ties to the smaller magnitude (MLX), zeros +0, saturation at 6; every finite E4M3 code round-trips and its midpoints tie to even; 448 saturation; E8M0",
     test_encoders_round_to_nearest_and_saturate},
    {"quantizer_follows_the_mlx_rule", "scale codes as mlx.core.quantize, every element a nearest code; round-trip NMSE",
     test_quantizer_follows_the_mlx_rule},
    {"row_dequantizer_twins_write_the_same_bits", "scalar == AVX2 for every mode, odd shapes, NaN codes included",
     test_row_dequantizer_twins_write_the_same_bits},
    {"products_equal_the_dense_product_of_the_dequantized_rows",
     "every kernel set, T = 1..16, uneven row ranges, writes only its rows; bit for bit (fused E4M3 kernels too: tails, 8-24 columns past the last 32, scales whose 256-fold overflows, E8M0 0 / 246 / 255, bf16 block factors negative and subnormal, NaN codes)",
     test_products_equal_the_dense_product_of_the_dequantized_rows},
    {"fp4_int8_extremes",
     "mxfp4 / nvfp4 int8 products with every code at +-6 against xq = +-127 (the AVX2 int16 bound), an infinite E8M0 scale, a NaN activation group: every kernel set bit for bit",
     test_fp4_int8_extremes},
    {"nvfp4_nan_scales_give_nan", "a NaN E4M3 scale code makes its row NaN in every kernel set, packed or not, bit for bit with the definition",
     test_nvfp4_nan_scales_give_nan},
    {"fp4_packed_rows_follow_the_documented_order",
     "kn_lanes_pack on mxfp4 and nvfp4: every nibble where quant.h says, missing groups 0, the scale bytes after the codes, zeros to 64 bytes; nvfp4 rows of 16 + 32k and mxfp8 pack nothing",
     test_fp4_packed_rows_follow_the_documented_order},
    {"fp4_int8_products_follow_the_definition",
     "mxfp4 and nvfp4: every kernel set = the scalar definition bit for bit (T = 1..16, row ranges, 1 to 33 groups of 32, from packed rows and from codes as stored); = w (d xq) in double; within the int8 rounding of the f32 product; subnormal scales",
     test_fp4_int8_products_follow_the_definition},
    {"fp4_wide_passes_in_tiles_follow_the_definition",
     "mxfp4 and nvfp4, 2080 columns, 301 rows, T = 13 (tiled wide passes): every SIMD set, packed or not, bit for bit "
     "the definition, also over rows 3 .. 298",
     test_fp4_wide_passes_in_tiles_follow_the_definition},
    {"sizes_and_views", "kn_mat_bytes per mode, kn_fp_valid refuses a wrong group or too many columns", test_sizes_and_views},
    {"fp4_gathered_rows_equal_the_rows_in_place",
     "kn_matmul_qx_gathered: mxfp4 and nvfp4, 32 and 1120 columns, runs of 1-37 rows equal the rows in place "
     "bit for bit on every SIMD set's packed rows; no gather as stored or on the scalar set",
     test_fp4_gathered_rows_equal_the_rows_in_place},
};

NX_TEST_MAIN(tests)
