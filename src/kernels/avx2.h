/* avx2.h — the AVX2+FMA+F16C pieces matmul.c and quant.c share (internal to
 * kernels/): the target attributes, the widening of stored elements to f32,
 * the per-row FMA step and the fixed horizontal sum of the "Dot product
 * layout" (matmul.c). One definition, so that the dense and the affine twins
 * cannot drift apart in the order that makes their results bit-identical.
 *
 * Everything here is static inline with a target attribute: the build stays
 * portable (no -mavx2) and kn_init() only routes to these after a CPUID check. */
#ifndef NX_KERNELS_AVX2_H
#define NX_KERNELS_AVX2_H

#if defined(__x86_64__) || defined(__i386__)
#define KN_HAVE_X86 1
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "base/fp16.h"

#define KN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KN_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))
/* AVX2 plus AVX-VNNI: vpdpbusd on 256-bit vectors in its VEX form, which
 * CPUs without AVX-512 have (Intel client cores from Alder Lake on). Only
 * the int8 products of kn_select's "avxvnni" set carry it. The attribute and
 * _mm256_dpbusd_avx_epi32 need GCC 11 or clang 12 or later (Debian 12 has
 * GCC 12 and clang 14). */
#define KN_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KN_AVXVNNI_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c,avxvnni")))
/* AVX2 plus AVX-512 F, BW, VL and VNNI (vpdpbusd on 256-bit vectors needs
 * VNNI and VL). Only the kernels of kn_select's "avx512vnni" set carry it. */
#define KN_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KN_VNNI_INLINE \
    static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* Stored elements w[i .. i+8) of type dt (f32, bf16, f16) widened to f32;
 * unaligned loads. dt is a constant after inlining. */
KN_AVX2_INLINE __m256 kn_load8_avx2(const void *w, nx_dtype dt, int64_t i) {
    if (dt == NX_DT_F32) return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (dt == NX_DT_F16) return _mm256_cvtph_ps(h);
    /* bf16 is the top half of an f32: zero-extend to 32 bits, shift up 16. */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Element w[i] as f32 (w aligned to its element size): the value
 * kn_load8_avx2 produces for it. */
KN_AVX2_INLINE float kn_load1_avx2(const void *w, nx_dtype dt, int64_t i) {
    if (dt == NX_DT_F32) return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    if (dt == NX_DT_F16) return _cvtsh_ss(h);
    return nx_bf16_to_f32(h);
}

/* acc[t][acc_k] = fma(wv, x_t[i..i+8), acc[t][acc_k]) for t < nt. A macro
 * over the caller's locals (acc, nt, x, ldx) so that acc stays an array of
 * registers; a helper taking acc by pointer would risk spilling it. */
#define KN_FMA_ROWS(acc_k, wv, i)                                                       \
    do {                                                                                \
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t][acc_k] =            \
            _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (int64_t)t * ldx + (i)), acc[t][acc_k]); \
    } while (0)

/* Prefetches bytes [0, bytes) from p, a line at a time: into L1, or into L2
 * where to_l2. Always inline: GCC 12 finds a function that only prefetches
 * free of side effects and drops calls to it that it did not inline. */
KN_AVX2_INLINE void kn_prefetch_lines_avx2(const void *p, size_t bytes, int to_l2) {
    for (size_t b = 0; b < bytes; b += 64) {
        if (to_l2) _mm_prefetch((const char *)p + b, _MM_HINT_T1);
        else _mm_prefetch((const char *)p + b, _MM_HINT_T0);
    }
}

/* The far reach of a product's prefetch (the int8 products' steps and
 * verifies, T <= 4 activation rows; the dense products' first block of
 * activation rows from T = 2 on): besides the lines it fetches into L1 a
 * few KB ahead of its loads, it fetches the lines KN_FAR_BYTES further on
 * into L2. In this
 * VM's fast memory phases the hardware prefetcher alone kept a product's
 * read at 0.6-0.8x a plain read of the same bytes. Which products take it,
 * and what it measured: quant.c (affine), fpq_qx.inc (mxfp4, nvfp4),
 * matmul.c (KN_DENSE_AHEAD_BYTES: dense verifies). */
#define KN_FAR_BYTES 32768

/* far bytes counted in whole rows of row_bytes, rounded up (0 where either
 * is 0): how many rows past its L1 reach a row-at-a-time product fetches. */
static inline int64_t kn_far_rows(size_t far, size_t row_bytes) {
    return far && row_bytes ? (int64_t)((far + row_bytes - 1) / row_bytes) : 0;
}

/* A cursor that fetches each line twice: into L2 `far` bytes past `at`
 * (0: not at all), and into L1 when the cursor itself reaches it. */
typedef struct {
    const char *at;
    size_t far;
} kn_cursor2;

/* A kernel's step fetching a row ahead in address order (quant_qx.inc):
 * the `lines` lines at c->at into L1 and, where c->far, the lines c->far
 * bytes on into L2; then c->at moves past them. */
KN_AVX2_INLINE void kn_prefetch_step2_avx2(kn_cursor2 *c, int lines) {
    for (int i = 0; i < lines; i++) {
        _mm_prefetch(c->at + 64 * i, _MM_HINT_T0);
        if (c->far) _mm_prefetch(c->at + c->far + 64 * i, _MM_HINT_T1);
    }
    c->at += 64 * lines;
}

/* The rest of a cursor's row once its steps are done: the lines from c->at
 * below end into L1, and (where c->far) the same lines c->far on into L2. */
KN_AVX2_INLINE void kn_prefetch_rest2_avx2(const kn_cursor2 *c, const char *end) {
    kn_prefetch_lines_avx2(c->at, (size_t)(end - c->at), 0);
    if (c->far) kn_prefetch_lines_avx2(c->at + c->far, (size_t)(end - c->at), 1);
}

/* A kernel's prefetch ahead of its own loads, in address order (the dense
 * products, matmul.c): each step fetches as many bytes as it consumes, at
 * `at` bytes from base, a fixed distance ahead of its loads, and moves `at`
 * on; nothing at or past end (the matrix's end, not the thread's share of
 * its rows: the pool's next claim usually starts where this one ends). The
 * fetches keep the loads' pace, a line or two a step, where fetching a
 * chunk's lines at once ran slower (KN_DENSE_AHEAD_BYTES). The int8
 * products' cursor (kn_prefetch_step2_avx2) is the same idea in whole lines
 * without the bound, which their callers check once a row or row pair. */
typedef struct {
    const char *base;
    size_t at, end;
} kn_ahead;

/* One step's fetches: the lines that hold at, at + 64, ... below at + bytes
 * into L1 and those KN_FAR_BYTES on into L2, then at += bytes (the next
 * step starts with the line that holds the new at, so no line the cursor
 * passes over goes unfetched). Nothing at or past end. bytes is a constant
 * after inlining. */
KN_AVX2_INLINE void kn_ahead_step_avx2(kn_ahead *a, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64) {
        if (a->at + b < a->end) _mm_prefetch(a->base + a->at + b, _MM_HINT_T0);
        if (a->at + KN_FAR_BYTES + b < a->end) _mm_prefetch(a->base + a->at + KN_FAR_BYTES + b, _MM_HINT_T1);
    }
    a->at += bytes;
}

/* Sum of the 8 int32 lanes of v (exact in any order). */
KN_AVX2_INLINE int32_t kn_hsum_epi32_avx2(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The layout's horizontal sum, in lane 0 of the result: nacc = 4 accumulators
 * combined as (acc0 + acc1) + (acc2 + acc3) first; then the 8 lanes v as
 * ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). nacc (1 or 4) is a
 * constant after inlining. */
KN_AVX2_INLINE __m128 kn_hsum_avx2(const __m256 *acc, int nacc) {
    __m256 v = nacc == 1 ? acc[0] : _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_add_ss(s, _mm_movehdup_ps(s));
}

#else
#define KN_HAVE_X86 0
#endif

#endif
