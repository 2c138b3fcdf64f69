/* sketch.c — one-bit sign sketches and top-k selection (see sketch.h).
 *
 * The score kernel's twins: scalar C (the definition, either layout), AVX2
 * (rows: each 32-bit half-word spread to 32 bytes of 0/1 by a shuffle, an
 * and and a min, then maddubs against the activations; blocks: nibble
 * look-ups), and AVX-512 (rows: AVX2's; blocks: the same look-ups 16
 * columns of 32 rows a 512-bit step). Each computes the same integer P_r,
 * so the results are the same bits. */
#include "kernels/sketch.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "kernels/avx2.h"
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Bytes of a sketch's bits in either layout: whole blocks of rows. */
static size_t sketch_bits_bytes(int64_t rows, int64_t cols) {
    const int64_t blocks = (rows + KN_SKETCH_BLOCK_ROWS - 1) / KN_SKETCH_BLOCK_ROWS;
    return nx_round64((size_t)blocks * KN_SKETCH_BLOCK_ROWS * (size_t)(cols / 8));
}

size_t kn_sketch_bytes(int64_t rows, int64_t cols) {
    return sketch_bits_bytes(rows, cols) + nx_round64((size_t)rows * sizeof(float));
}

void kn_sketch_bind(kn_sketch *s, void *buf, int64_t rows, int64_t cols, kn_sketch_layout layout) {
    assert(rows >= 0 && cols > 0 && cols % 64 == 0 && cols <= KN_SKETCH_MAX_COLS && buf != NULL);
    assert(((uintptr_t)buf & 63) == 0 && (layout == KN_SKETCH_ROWS || layout == KN_SKETCH_BLOCKS));
    s->rows = rows, s->cols = cols, s->layout = layout;
    s->bits = layout == KN_SKETCH_ROWS ? buf : NULL;
    s->blocks = layout == KN_SKETCH_BLOCKS ? buf : NULL;
    s->scale = (float *)((char *)buf + sketch_bits_bytes(rows, cols));
    /* the blocks kernel counts a last block's missing rows too (and drops
     * them): zeros, not whatever the buffer held */
    const int64_t full = rows / KN_SKETCH_BLOCK_ROWS;
    if (layout == KN_SKETCH_BLOCKS && rows % KN_SKETCH_BLOCK_ROWS)
        memset(s->blocks + full * KN_SKETCH_BLOCK_ROWS * (cols / 8), 0, KN_SKETCH_BLOCK_ROWS * (size_t)cols / 8);
}

/* Byte j (columns 8j .. 8j+7) of row r's bits in a KN_SKETCH_BLOCKS sketch. */
static inline uint8_t *block_byte(const kn_sketch *s, int64_t r, int64_t j) {
    const int64_t b = r / KN_SKETCH_BLOCK_ROWS, i = r % KN_SKETCH_BLOCK_ROWS;
    return s->blocks + (b * (s->cols / 8) + j) * KN_SKETCH_BLOCK_ROWS + i;
}

/* One word of bits (set where the sign bit is clear) from w[0..64), and the
 * sum of |w| over them in f32 (4 lanes, then (l0 + l2) + (l1 + l3), in the
 * SSE2 and the plain version alike). 0 when a weight is not finite. */
static int sketch_word(const float *w, uint64_t *word, float *abs_sum) {
    uint64_t bits = 0;
    float lane[4] = {0, 0, 0, 0};
    int finite = 1;
#ifdef __SSE2__
    const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)), big = _mm_set1_ps(FLT_MAX);
    __m128 acc = _mm_setzero_ps(), ok = _mm_castsi128_ps(_mm_set1_epi32(-1));
    for (int i = 0; i < 64; i += 4) {
        const __m128 v = _mm_loadu_ps(w + i), a = _mm_and_ps(v, abs_mask);
        bits |= (uint64_t)(~_mm_movemask_ps(v) & 0xf) << i;
        ok = _mm_and_ps(ok, _mm_cmple_ps(a, big));   /* false for inf and NaN */
        acc = _mm_add_ps(acc, a);
    }
    finite = _mm_movemask_ps(ok) == 0xf;
    _mm_storeu_ps(lane, acc);
#else
    for (int i = 0; i < 64; i++) {
        const float a = fabsf(w[i]);
        bits |= (uint64_t)!signbit(w[i]) << i;
        finite &= a <= FLT_MAX;
        lane[i % 4] += a;
    }
#endif
    *word = bits;
    *abs_sum = (lane[0] + lane[2]) + (lane[1] + lane[3]);
    return finite;
}

int kn_sketch_row(kn_sketch *s, int64_t r, const float *w) {
    assert(r >= 0 && r < s->rows);
    const int64_t W = s->cols / 64;
    double a = 0;   /* across words in double: cols / 64 terms of any size */
    for (int64_t j = 0; j < W; j++) {
        float part;
        uint64_t word;
        if (!sketch_word(w + j * 64, &word, &part)) return 0;
        a += part;
        if (s->layout == KN_SKETCH_ROWS) s->bits[r * W + j] = word;
        else
            for (int k = 0; k < 8; k++) *block_byte(s, r, 8 * j + k) = (uint8_t)(word >> 8 * k);
    }
    const float scale = (float)(a / (double)s->cols);
    if (!isfinite(scale)) return 0;
    s->scale[r] = scale;
    return 1;
}

size_t kn_sketch_x_bytes(int64_t cols) { return (size_t)cols + (size_t)(cols / 4) * 16; }

/* The nibble tables after xq[0..cols) (kn_sketch_quantize_x): entry n of
 * table g adds the values of group g that n's bits pick, entry by entry
 * from the one with n's lowest set bit cleared. */
static void sketch_tables(int8_t *xq, int64_t cols) {
    uint8_t *tab = (uint8_t *)xq + cols;
    for (int64_t g = 0; g < cols / 4; g++) {
        uint8_t *t = tab + 16 * g;
        t[0] = KN_SKETCH_TABLE_BIAS;
        for (int n = 1; n < 16; n++) t[n] = (uint8_t)(t[n & (n - 1)] + xq[4 * g + __builtin_ctz((unsigned)n)]);
    }
}

int kn_sketch_quantize_x(const float *x, int64_t cols, int8_t *xq, float *d, int32_t *sum) {
    float mx = 0.0f;
    for (int64_t c = 0; c < cols; c++) {
        if (!isfinite(x[c])) return 0;
        mx = fmaxf(mx, fabsf(x[c]));
    }
    int32_t s = 0;
    /* in double: XMAX / mx overflows f32 for tiny mx (0 * inf would then
     * be NaN), never f64; a zero row gives zeros */
    const double xmax = KN_SKETCH_XMAX, inv = mx == 0.0f ? 0.0 : xmax / (double)mx;
    for (int64_t c = 0; c < cols; c++) {
        double q = nearbyint((double)x[c] * inv);   /* |q| <= XMAX up to rounding: clamp */
        q = q > xmax ? xmax : q < -xmax ? -xmax : q;
        xq[c] = (int8_t)q;
        s += (int8_t)q;
    }
    sketch_tables(xq, cols);
    *d = mx / (float)KN_SKETCH_XMAX, *sum = s;
    return 1;
}

/* The finish every twin shares: s_r from the integer P. */
static inline float sketch_score(int32_t P, int32_t sum, float scale, float d) {
    return (float)(2 * P - sum) * (scale * d);
}

static void assert_scores_args(const kn_sketch *s, const int8_t *xq, const float *y, int64_t r0, int64_t r1) {
    (void)s, (void)xq, (void)y, (void)r0, (void)r1;
    assert(s && s->cols % 64 == 0 && s->cols <= KN_SKETCH_MAX_COLS && 0 <= r0 && r0 <= r1 && r1 <= s->rows);
    assert(r0 == r1 || (xq && y && ((uintptr_t)xq & 63) == 0));
}

void kn_sketch_scores_ref(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0, int64_t r1) {
    assert_scores_args(s, xq, y, r0, r1);
    for (int64_t r = r0; r < r1; r++) {
        int32_t P = 0;
        for (int64_t j = 0; j < s->cols / 8; j++) {
            const uint8_t byte = s->layout == KN_SKETCH_ROWS
                                     ? (uint8_t)(s->bits[r * (s->cols / 64) + j / 8] >> 8 * (j % 8))
                                     : *block_byte(s, r, j);
            for (int i = 0; i < 8; i++)
                if (byte >> i & 1) P += xq[8 * j + i];
        }
        y[r] = sketch_score(P, sum, s->scale[r], d);
    }
}

#if KN_HAVE_X86
/* A pass reads the sketch from DRAM once, front to back, and with the
 * hardware prefetcher alone it ran at ~11 GB/s where the machine reads 15.5:
 * the SIMD twins ask for the rows this far ahead as they start a row
 * (0.8B-shape q4 fixture, 2 threads, a 248k-row head: 2.6-3.5 -> 1.8-2.2
 * ms a pass; 6 or 12 KB ahead did no better, 16-64 KB or into L2 alone
 * slightly worse). */
#define SKETCH_PREFETCH_BYTES 8192

/* Rows of W words SKETCH_PREFETCH_BYTES make, at least step (the rows a
 * kernel scores at once: never rows it is already reading). */
static inline int64_t sketch_ahead(int64_t W, int64_t step) {
    const int64_t rows = W > 0 ? SKETCH_PREFETCH_BYTES / (W * 8) : step;
    return rows > step ? rows : step;
}

/* Asks for rows [r, r + n) of s (the caller's range ends at r1: none past it). */
KN_AVX2_INLINE void sketch_prefetch_rows(const kn_sketch *s, int64_t r, int n, int64_t r1) {
    const int64_t W = s->cols / 64;
    if (r + n <= r1) kn_prefetch_lines_avx2(s->bits + r * W, (size_t)(n * W) * sizeof(uint64_t), 0);
}

/* P of one row's 64-bit words [j0, j1), at most 64 of them: each 32-bit
 * half-word broadcast from memory and spread to 32 bytes of 0 / 1 by a
 * shuffle, an and and a min, then maddubs against the activations. int16
 * sums: each step adds at most 2 * 127 to a lane, 128 steps stay below 2^15. */
KN_AVX2_INLINE __m256i sketch_words_avx2(const uint64_t *b, const int8_t *xq, int64_t j0, int64_t j1) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                            3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ULL), one8 = _mm256_set1_epi8(1);
    __m256i acc16 = _mm256_setzero_si256();
    for (int64_t j = j0; j < j1; j++)
        for (int h = 0; h < 2; h++) {
            int32_t half;   /* little endian: the low half holds weights 0..31 */
            memcpy(&half, (const char *)(b + j) + 4 * h, sizeof half);
            __m256i m = _mm256_shuffle_epi8(_mm256_set1_epi32(half), spread);
            m = _mm256_min_epu8(_mm256_and_si256(m, bit), one8);   /* 0 / 1 */
            const __m256i xv = _mm256_load_si256((const __m256i *)(const void *)(xq + j * 64 + h * 32));
            acc16 = _mm256_add_epi16(acc16, _mm256_maddubs_epi16(m, xv));
        }
    return _mm256_madd_epi16(acc16, _mm256_set1_epi16(1));
}

static KN_AVX2 void sketch_scores_rows_avx2(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y,
                                            int64_t r0, int64_t r1) {
    const int64_t W = s->cols / 64, ahead = sketch_ahead(W, 2);
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) {   /* two rows: two independent sums in flight */
        const uint64_t *b = s->bits + r * W;
        sketch_prefetch_rows(s, r + ahead, 2, r1);
        __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
        for (int64_t j0 = 0; j0 < W; j0 += 64) {
            const int64_t j1 = j0 + 64 < W ? j0 + 64 : W;
            a0 = _mm256_add_epi32(a0, sketch_words_avx2(b, xq, j0, j1));
            a1 = _mm256_add_epi32(a1, sketch_words_avx2(b + W, xq, j0, j1));
        }
        y[r] = sketch_score(kn_hsum_epi32_avx2(a0), sum, s->scale[r], d);
        y[r + 1] = sketch_score(kn_hsum_epi32_avx2(a1), sum, s->scale[r + 1], d);
    }
    for (; r < r1; r++) {
        const uint64_t *b = s->bits + r * W;
        __m256i acc = _mm256_setzero_si256();
        for (int64_t j0 = 0; j0 < W; j0 += 64)
            acc = _mm256_add_epi32(acc, sketch_words_avx2(b, xq, j0, j0 + 64 < W ? j0 + 64 : W));
        y[r] = sketch_score(kn_hsum_epi32_avx2(acc), sum, s->scale[r], d);
    }
}

/* Columns a block's 16-bit sums take before they are widened. A step of 16
 * columns adds at most 4 * 8 XMAX = 224 to a row's byte lane; the 16-bit
 * lanes hold an even row's sum in the low byte and the next row's in the
 * high byte, and the even row's is recovered as the lane minus 256 times the
 * odd row's (kept apart), exact while it stays below 2^16: 292 steps. */
#define SKETCH_BLOCK_CHUNK 4096

/* Table g's entries at the low (high = 0) or high nibbles of v's 32 bytes:
 * the table's 16 bytes in both 128-bit lanes, as vpshufb looks up per lane. */
KN_AVX2_INLINE __m256i nibble_entries(const uint8_t *tab, int64_t g, __m256i v, int high) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(const void *)(tab + 16 * g)));
    return _mm256_shuffle_epi8(t, _mm256_and_si256(high ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f)));
}

/* acc[0..4) (rows 0-7, 8-15, 16-23, 24-31 of the block at p) += the table
 * entries their bits pick over columns [c0, c1), at most a chunk: per 16
 * columns two loads of 32 rows' bytes, their low and high nibbles as
 * indices into four tables, the four entries added as bytes (<= 224), then
 * into 16-bit lanes as above. */
KN_AVX2_INLINE void block_chunk(__m256i acc[4], const uint8_t *p, const uint8_t *tab, int64_t c0, int64_t c1) {
    __m256i lanes = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
    for (int64_t c = c0; c < c1; c += 16) {
        const __m256i v0 = _mm256_load_si256((const __m256i *)(const void *)(p + 4 * c));
        const __m256i v1 = _mm256_load_si256((const __m256i *)(const void *)(p + 4 * c + 32));
        const int64_t g = c / 4;   /* columns 4g .. 4g+15: tables g .. g+3 */
        const __m256i e01 = _mm256_add_epi8(nibble_entries(tab, g, v0, 0), nibble_entries(tab, g + 1, v0, 1));
        const __m256i e23 = _mm256_add_epi8(nibble_entries(tab, g + 2, v1, 0), nibble_entries(tab, g + 3, v1, 1));
        const __m256i e = _mm256_add_epi8(e01, e23);
        lanes = _mm256_add_epi16(lanes, e);
        odd = _mm256_add_epi16(odd, _mm256_srli_epi16(e, 8));
    }
    const __m256i even = _mm256_sub_epi16(lanes, _mm256_slli_epi16(odd, 8));
    /* rows in order within 128-bit lanes: 0-7 | 16-23, and 8-15 | 24-31 */
    const __m256i lo = _mm256_unpacklo_epi16(even, odd), hi = _mm256_unpackhi_epi16(even, odd);
    acc[0] = _mm256_add_epi32(acc[0], _mm256_cvtepu16_epi32(_mm256_castsi256_si128(lo)));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_cvtepu16_epi32(_mm256_castsi256_si128(hi)));
    acc[2] = _mm256_add_epi32(acc[2], _mm256_cvtepu16_epi32(_mm256_extracti128_si256(lo, 1)));
    acc[3] = _mm256_add_epi32(acc[3], _mm256_cvtepu16_epi32(_mm256_extracti128_si256(hi, 1)));
}

/* y[r] for the rows r of block b in [r0, r1) from the block's 32 values
 * 2P - S: sketch_score's two f32 products, 8 lanes at a time for a block
 * wholly in the range. */
KN_AVX2_INLINE void block_scores(const kn_sketch *s, const int32_t t[KN_SKETCH_BLOCK_ROWS], float d, float *y,
                                 int64_t b, int64_t r0, int64_t r1) {
    enum { R = KN_SKETCH_BLOCK_ROWS };
    if (b * R >= r0 && (b + 1) * R <= r1) {
        const __m256 d8 = _mm256_set1_ps(d);
        for (int i = 0; i < R; i += 8) {
            const __m256 sd = _mm256_mul_ps(_mm256_loadu_ps(s->scale + b * R + i), d8);
            const __m256 v = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(const void *)(t + i)));
            _mm256_storeu_ps(y + b * R + i, _mm256_mul_ps(v, sd));
        }
        return;
    }
    for (int64_t r = b * R > r0 ? b * R : r0; r < (b + 1) * R && r < r1; r++)
        y[r] = (float)t[r - b * R] * (s->scale[r] * d);
}

/* The blocks layout: a block's 32 rows at once, their sums less the tables'
 * bias, then sketch_score's operations lane by lane (2P - S exact in int32,
 * the same two f32 products). A block only partly in [r0, r1) is scored
 * whole and only its rows in the range written. */
static KN_AVX2 void sketch_scores_blocks_avx2(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y,
                                              int64_t r0, int64_t r1) {
    enum { R = KN_SKETCH_BLOCK_ROWS };
    const int64_t cols = s->cols, block_bytes = R * cols / 8;
    const int64_t ahead = SKETCH_PREFETCH_BYTES / block_bytes > 1 ? SKETCH_PREFETCH_BYTES / block_bytes : 1;
    const uint8_t *tab = (const uint8_t *)xq + cols;
    const __m256i bias = _mm256_set1_epi32(KN_SKETCH_TABLE_BIAS * (int32_t)(cols / 4)), sum8 = _mm256_set1_epi32(sum);
    const int64_t b1 = r0 < r1 ? (r1 + R - 1) / R : 0;   /* an empty range: no block (xq, y may be NULL) */
    for (int64_t b = r0 / R; b < b1; b++) {
        const uint8_t *p = s->blocks + b * block_bytes;
        if (b + ahead < b1) kn_prefetch_lines_avx2(p + ahead * block_bytes, (size_t)block_bytes, 0);
        __m256i acc[4];
        for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_si256();
        for (int64_t c0 = 0; c0 < cols; c0 += SKETCH_BLOCK_CHUNK)
            block_chunk(acc, p, tab, c0, c0 + SKETCH_BLOCK_CHUNK < cols ? c0 + SKETCH_BLOCK_CHUNK : cols);
        int32_t t[R];
        for (int i = 0; i < 4; i++) {
            const __m256i P = _mm256_sub_epi32(acc[i], bias);
            _mm256_storeu_si256((__m256i *)(void *)(t + 8 * i), _mm256_sub_epi32(_mm256_add_epi32(P, P), sum8));
        }
        block_scores(s, t, d, y, b, r0, r1);
    }
}

KN_AVX2 void kn_sketch_scores_avx2(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y, int64_t r0,
                                   int64_t r1) {
    assert_scores_args(s, xq, y, r0, r1);
    if (s->layout == KN_SKETCH_BLOCKS) sketch_scores_blocks_avx2(s, xq, d, sum, y, r0, r1);
    else sketch_scores_rows_avx2(s, xq, d, sum, y, r0, r1);
}

/* Columns a 512-bit blocks pass builds its look-up tables for on the stack
 * (64 bytes for every 8 columns); a wider sketch takes the AVX2 pass. */
#define SKETCH_WIDE_COLS 8192
/* How far ahead a 512-bit blocks pass asks for its bytes, two lines a step
 * (half a block of 1024 columns). Without those requests a pass from L3 ran
 * ~1.2x slower (one thread, the Xeon VM); 2, 4 and 8 KB ahead were within
 * the noise of each other. */
#define SKETCH_WIDE_AHEAD 2048

/* The nibble tables of columns [c, c + 16) as zt[c / 8] (low nibbles) and
 * zt[c / 8 + 1] (high nibbles), for a 64-byte load of a block's bytes for
 * those columns: its 128-bit lanes 0 and 1 hold columns c .. c+7 of rows
 * 0-15 and 16-31, lanes 2 and 3 columns c+8 .. c+15, and vpshufb looks up
 * within each lane, so each lane gets its columns' table. */
static KN_VNNI void wide_tables(const uint8_t *tab, int64_t cols, __m512i *zt) {
    for (int64_t c = 0; c < cols; c += 16) {
        const __m512i t = _mm512_loadu_si512((const void *)(tab + 4 * c));   /* tables c/4 .. c/4 + 3 */
        zt[c / 8] = _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(2, 2, 0, 0));
        zt[c / 8 + 1] = _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(3, 3, 1, 1));
    }
}

/* acc[0..2) (rows 0-15 and 16-31 of the block at p, int32) += the table
 * entries their bits pick over columns [c0, c1), at most a chunk: as
 * block_chunk, 32 columns a step, each 128-bit lane's 16 rows in 16-bit
 * lanes (the even rows' sums recovered as there), then the two lanes that
 * hold the same rows for other columns added (below 2^16: two lanes of at
 * most 128 steps of 224). While p + 4 c is below pf_end, each step asks for
 * the two lines SKETCH_WIDE_AHEAD bytes ahead. */
KN_VNNI_INLINE void wide_chunk(__m512i acc[2], const uint8_t *p, const __m512i *zt, int64_t c0, int64_t c1,
                               const uint8_t *pf_end) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i lanes = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
    for (int64_t c = c0; c < c1; c += 32) {
        const uint8_t *q = p + 4 * c;
        const __m512i v0 = _mm512_load_si512((const void *)q), v1 = _mm512_load_si512((const void *)(q + 64));
        if (q + SKETCH_WIDE_AHEAD < pf_end) {
            _mm_prefetch((const char *)(q + SKETCH_WIDE_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + SKETCH_WIDE_AHEAD + 64), _MM_HINT_T0);
        }
        const int64_t k = c / 8;
        /* each byte's low and high nibble, in its lane's two tables */
        const __m512i l0 = _mm512_and_si512(v0, m4), h0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
        const __m512i l1 = _mm512_and_si512(v1, m4), h1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
        const __m512i e0 = _mm512_add_epi8(_mm512_shuffle_epi8(zt[k], l0), _mm512_shuffle_epi8(zt[k + 1], h0));
        const __m512i e1 = _mm512_add_epi8(_mm512_shuffle_epi8(zt[k + 2], l1), _mm512_shuffle_epi8(zt[k + 3], h1));
        const __m512i e = _mm512_add_epi8(e0, e1);
        lanes = _mm512_add_epi16(lanes, e);
        odd = _mm512_add_epi16(odd, _mm512_srli_epi16(e, 8));
    }
    __m512i even = _mm512_sub_epi16(lanes, _mm512_slli_epi16(odd, 8));
    even = _mm512_add_epi16(even, _mm512_shuffle_i64x2(even, even, _MM_SHUFFLE(1, 0, 3, 2)));
    odd = _mm512_add_epi16(odd, _mm512_shuffle_i64x2(odd, odd, _MM_SHUFFLE(1, 0, 3, 2)));
    /* lane 0: rows 0-7 (lo), 8-15 (hi); lane 1: rows 16-23, 24-31 */
    const __m512i lo = _mm512_unpacklo_epi16(even, odd), hi = _mm512_unpackhi_epi16(even, odd);
    const __m512i rows = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi);
    acc[0] = _mm512_add_epi32(acc[0], _mm512_cvtepu16_epi32(_mm512_castsi512_si256(rows)));
    acc[1] = _mm512_add_epi32(acc[1], _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(rows, 1)));
}

/* The blocks layout on 512-bit vectors: sketch_scores_blocks_avx2's sums
 * (the same integers, so the same bits) with a 64-byte load covering 16
 * columns of a block's 32 rows, so a step is half the operations. Against
 * the rows layout's VPOPCNTQ bit planes it replaced (one thread, 1024
 * columns, ns a row): 2.6 against 4.5 in L2, 4.2-4.4 against 5.0-5.3 from
 * L3; MTP sessions at K = 3 on the q4 fixture, both in turn in one process
 * (two runs of 30-40 blocks of 12 rounds): round time 0.991-0.992x (paired
 * medians), draft 0.93-0.95x, tokens a second 1.019x. */
static KN_VNNI void sketch_scores_blocks_avx512(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y,
                                                int64_t r0, int64_t r1) {
    enum { R = KN_SKETCH_BLOCK_ROWS };
    const int64_t cols = s->cols, block_bytes = R * cols / 8;
    if (cols > SKETCH_WIDE_COLS) {
        sketch_scores_blocks_avx2(s, xq, d, sum, y, r0, r1);
        return;
    }
    __m512i zt[SKETCH_WIDE_COLS / 8];
    if (r0 < r1) wide_tables((const uint8_t *)xq + cols, cols, zt);
    const __m512i bias = _mm512_set1_epi32(KN_SKETCH_TABLE_BIAS * (int32_t)(cols / 4)), sum16 = _mm512_set1_epi32(sum);
    const int64_t b0 = r0 / R, b1 = r0 < r1 ? (r1 + R - 1) / R : 0;   /* an empty range: no block */
    const uint8_t *const pf_end = s->blocks + b1 * block_bytes;
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = s->blocks + b * block_bytes;
        __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int64_t c0 = 0; c0 < cols; c0 += SKETCH_BLOCK_CHUNK) {
            const int64_t c1 = c0 + SKETCH_BLOCK_CHUNK < cols ? c0 + SKETCH_BLOCK_CHUNK : cols;
            wide_chunk(acc, p, zt, c0, c1, pf_end);
        }
        int32_t t[R];
        for (int i = 0; i < 2; i++) {
            const __m512i P = _mm512_sub_epi32(acc[i], bias);
            _mm512_storeu_si512((void *)(t + 16 * i), _mm512_sub_epi32(_mm512_add_epi32(P, P), sum16));
        }
        block_scores(s, t, d, y, b, r0, r1);
    }
}

/* The blocks on 512-bit vectors; rows as the AVX2 set scores them. */
KN_VNNI void kn_sketch_scores_avx512vnni(const kn_sketch *s, const int8_t *xq, float d, int32_t sum, float *y,
                                         int64_t r0, int64_t r1) {
    assert_scores_args(s, xq, y, r0, r1);
    if (s->layout == KN_SKETCH_BLOCKS) sketch_scores_blocks_avx512(s, xq, d, sum, y, r0, r1);
    else sketch_scores_rows_avx2(s, xq, d, sum, y, r0, r1);
}
#endif

/* ---- the k best of n scores ----------------------------------------------
 * Scores become unsigned keys that order as the floats do (flip every bit of
 * a negative, set the sign bit of a positive), so the k-th largest can be
 * found digit by digit from the top. */

#define TOPK_SAMPLE 1024
#define TOPK_HIST 2048   /* 11-bit digits */

static inline uint32_t score_key(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* The float whose key is key. */
static inline float key_score(uint32_t key) {
    const uint32_t u = key & 0x80000000u ? key & 0x7fffffffu : ~key;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The collect pass one index at a time over [i0, n), after c entries: both
 * twins' tail (and the portable one's whole pass without SSE2). */
static int64_t collect_from(const float *x, int64_t i0, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey,
                            int64_t c) {
    for (int64_t i = i0; i < n; i++) {
        const uint32_t key = score_key(x[i]);
        if (key >= thr) cand[c] = (uint32_t)i, ckey[c++] = key;
    }
    return c;
}

/* kn_top_k_collect's portable twin. Blocks of 16 are tested first with
 * float compares (SSE2, in every x86-64 build; GCC left the plain loop
 * scalar): few blocks hold a score above a threshold meant to keep about 1 in
 * 30. The test passes every key >= thr (and any NaN, on either side: the key
 * test then decides). */
int64_t kn_top_k_collect_ref(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey) {
    int64_t c = 0, i0 = 0;
    const float thr_f = key_score(thr);
    for (; i0 + 16 <= n; i0 += 16) {
#ifdef __SSE2__
        const __m128 t = _mm_set1_ps(thr_f);
        /* not-less-than: true for a NaN on either side, which only the exact
         * key test below can place */
        const __m128 ge01 = _mm_or_ps(_mm_cmpnlt_ps(_mm_loadu_ps(x + i0), t), _mm_cmpnlt_ps(_mm_loadu_ps(x + i0 + 4), t));
        const __m128 ge23 = _mm_or_ps(_mm_cmpnlt_ps(_mm_loadu_ps(x + i0 + 8), t), _mm_cmpnlt_ps(_mm_loadu_ps(x + i0 + 12), t));
        const __m128 ge = _mm_or_ps(ge01, ge23);
        if (!_mm_movemask_ps(ge)) continue;
#else
        int any = 0;
        for (int i = 0; i < 16; i++) any |= !(x[i0 + i] < thr_f);
        if (!any) continue;
#endif
        for (int i = 0; i < 16; i++) {   /* written always, kept if it passes: no branch to mispredict */
            const uint32_t key = score_key(x[i0 + i]);
            cand[c] = (uint32_t)(i0 + i), ckey[c] = key;
            c += key >= thr;
        }
    }
    return collect_from(x, i0, n, thr, cand, ckey, c);
}

#if KN_HAVE_X86
/* The same on 16-lane vectors: one not-less-than compare a block (true for
 * a NaN, as above), and in the blocks that pass, the keys, their exact test
 * and the kept lanes packed in registers (vpcompressd to memory is slow on
 * Zen 4) and stored whole: c <= i0, so c + 16 <= n and the store stays in
 * the arrays. */
KN_VNNI int64_t kn_top_k_collect_avx512vnni(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey) {
    int64_t c = 0, i0 = 0;
    const __m512 thr_f = _mm512_set1_ps(key_score(thr));
    const __m512i thr_k = _mm512_set1_epi32((int)thr), sign = _mm512_set1_epi32(INT32_MIN), ones = _mm512_set1_epi32(-1);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; i0 + 16 <= n; i0 += 16) {
        const __m512 v = _mm512_loadu_ps(x + i0);
        if (!_mm512_cmp_ps_mask(v, thr_f, _CMP_NLT_UQ)) continue;
        const __m512i u = _mm512_castps_si512(v);
        /* score_key: ~u where the sign bit is set, else u with it set */
        const __mmask16 neg = _mm512_cmplt_epi32_mask(u, _mm512_setzero_si512());
        const __m512i key = _mm512_mask_xor_epi32(_mm512_or_si512(u, sign), neg, u, ones);
        const __mmask16 keep = _mm512_cmpge_epu32_mask(key, thr_k);
        _mm512_storeu_si512(cand + c, _mm512_maskz_compress_epi32(keep, _mm512_add_epi32(iota, _mm512_set1_epi32((int)i0))));
        _mm512_storeu_si512(ckey + c, _mm512_maskz_compress_epi32(keep, key));
        /* the mask widened explicitly: GCC 12 under -fsanitize=thread spilled
         * keep with a 16-bit kmovw and popcounted 32 bits of the slot, the
         * upper half stale (the collect test failed in that build only) */
        c += __builtin_popcount(_cvtmask16_u32(keep));
    }
    return collect_from(x, i0, n, thr, cand, ckey, c);
}
#endif

/* Scores a block of the split collect pass covers (kn_top_k_f32_split). */
#define TOPK_BLOCK 8192

static int64_t topk_blocks(int64_t n) { return (n + TOPK_BLOCK - 1) / TOPK_BLOCK; }

size_t kn_top_k_work_bytes(int64_t n) {
    return ((size_t)2 * (size_t)n + TOPK_SAMPLE + TOPK_HIST + (size_t)topk_blocks(n)) * sizeof(uint32_t);
}

/* The split collect pass: block b of x collects into its own stretch of
 * cand / ckey (from b * TOPK_BLOCK: a block keeps at most its length), its
 * count into counts[b]. */
typedef struct {
    const float *x;
    int64_t n;
    uint32_t thr, *cand, *ckey, *counts;
} topk_split;

static void collect_blocks(void *ctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const topk_split *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t i0 = b * TOPK_BLOCK, len = j->n - i0 < TOPK_BLOCK ? j->n - i0 : TOPK_BLOCK;
        const int64_t c = kn_top_k_collect(j->x + i0, len, j->thr, j->cand + i0, j->ckey + i0);
        for (int64_t i = 0; i < c; i++) j->cand[i0 + i] += (uint32_t)i0;
        j->counts[b] = (uint32_t)c;
    }
}

/* The k-th largest of keys[0..c) (1 <= k <= c), and in *ties how many of
 * the keys equal to it are among the k largest. */
static uint32_t kth_largest_key(const uint32_t *keys, int64_t c, int64_t k, uint32_t *hist, int64_t *ties) {
    static const int shift[3] = {21, 10, 0}, width[3] = {11, 11, 10};
    uint32_t prefix = 0, pmask = 0;
    int64_t need = k;   /* how many of those matching the prefix are still to take */
    for (int level = 0; level < 3; level++) {
        const uint32_t dmask = (1u << width[level]) - 1;
        memset(hist, 0, (size_t)(dmask + 1) * sizeof *hist);
        for (int64_t i = 0; i < c; i++) hist[keys[i] >> shift[level] & dmask] += (keys[i] & pmask) == prefix;
        uint32_t digit = dmask;
        while ((int64_t)hist[digit] < need) need -= hist[digit--];   /* stops: the prefix holds >= need keys */
        prefix |= digit << shift[level], pmask |= dmask << shift[level];
    }
    *ties = need;
    return prefix;
}

/* The collect pass over all of x into cand / ckey: one call, or (run) the
 * blocks by run, then each block's entries moved down after the ones before
 * (ascending order kept: block b's go no higher than where they were). */
static int64_t collect_all(const float *x, int64_t n, uint32_t thr, uint32_t *cand, uint32_t *ckey, uint32_t *counts,
                           kn_run_fn run, void *runner) {
    if (!run) return kn_top_k_collect(x, n, thr, cand, ckey);
    topk_split j = {x, n, thr, cand, ckey, counts};
    const int64_t nb = topk_blocks(n);
    run(runner, collect_blocks, &j, nb);
    int64_t c = 0;
    for (int64_t b = 0; b < nb; b++) {
        memmove(cand + c, cand + b * TOPK_BLOCK, counts[b] * sizeof *cand);
        memmove(ckey + c, ckey + b * TOPK_BLOCK, counts[b] * sizeof *ckey);
        c += counts[b];
    }
    return c;
}

int64_t kn_top_k_f32(const float *x, int64_t n, int64_t k, int32_t *idx, void *work) {
    return kn_top_k_f32_split(x, n, k, idx, work, NULL, NULL);
}

int64_t kn_top_k_f32_split(const float *x, int64_t n, int64_t k, int32_t *idx, void *work, kn_run_fn run,
                           void *runner) {
    assert(0 <= k && k <= n && n <= INT32_MAX && (k == 0 || (x && idx && work)));
    if (k == 0) return 0;
    uint32_t *cand = work, *ckey = cand + n, *sample = ckey + n, *hist = sample + TOPK_SAMPLE;
    uint32_t *counts = hist + TOPK_HIST;
    const int64_t m = n < TOPK_SAMPLE ? n : TOPK_SAMPLE;
    for (int64_t i = 0; i < m; i++) sample[i] = score_key(x[i * n / m]);
    /* the sample's rank above which about 1.25k + 8n/m of all n should lie:
     * at k = 4096 of 248k that is about 7k, 2.5 standard deviations of the
     * sample's estimate above k */
    int64_t rank = 5 * k * m / (4 * n) + 8;
    int64_t c, ties;
    for (;;) {
        const uint32_t thr = rank >= m ? 0 : kth_largest_key(sample, m, rank, hist, &ties);
        c = collect_all(x, n, thr, cand, ckey, counts, run, runner);
        if (c >= k) break;   /* at rank >= m every key passes: c = n >= k */
        rank = 2 * rank + 16;
    }
    const uint32_t kth = kth_largest_key(ckey, c, k, hist, &ties);
    int64_t out = 0;
    for (int64_t i = 0; i < c; i++)   /* ascending indices: ties go to the lowest */
        if (ckey[i] > kth || (ckey[i] == kth && ties-- > 0)) idx[out++] = (int32_t)cand[i];
    assert(out == k);
    return out;
}

int64_t kn_argmax_at_f32(const float *x, const int32_t *idx, int64_t k, int64_t n) {
    assert(0 <= k && k < n && (k == 0 || (x && idx)));
    int64_t best = -1;   /* position in idx */
    for (int64_t j = 0; j < k; j++) {
        const float v = x[idx[j]];
        if (v == v && (best < 0 || v > x[idx[best]])) best = j;
    }
    if (best >= 0 && x[idx[best]] > -INFINITY) return idx[best];
    /* nothing above -inf: the first index holding -inf, the first one
     * outside idx (idx is ascending and distinct) or a candidate's */
    int64_t gap = 0;
    while (gap < k && idx[gap] == gap) gap++;
    for (int64_t j = 0; j < k && idx[j] < gap; j++)
        if (x[idx[j]] == -INFINITY) return idx[j];
    return gap;
}
