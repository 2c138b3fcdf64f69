/* bench_util.h — the median, the kernel choice and the cache flush the benchmark programs share
 * (the clock: base/clock.h). */
#ifndef NX_BENCH_UTIL_H
#define NX_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/clock.h"
#include "model/model.h"
#include "nextn.h"

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) and returns its median (the upper one for even n). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return v[n / 2];
}

/* Bytes a benchmark reads between its timed runs so that what they read
 * comes from DRAM, as a step's caches do after the step's weights went
 * through: twice the last-level cache (sysconf), and at least 64 MB. A
 * fixed 64 MB left the caches in a 260 MB L3 (a Xeon VM): bench-attention
 * timed them from there, 0.72 ms a step at 576 positions against 1.21 ms
 * from DRAM, which is what a model's step (~0.09 ms a head there) sees. */
static inline size_t bench_flush_bytes(void) {
    long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    const size_t floor = (size_t)64 << 20;
    return l3 > 0 && 2 * (size_t)l3 > floor ? 2 * (size_t)l3 : floor;
}

/* The kernel set named by NEXTN_BENCH_KERNELS (auto, avx512vnni, avx2 or
 * scalar; unset: auto), for timing one set against another; exits on a bad
 * name. */
static inline nx_kernels bench_kernels(void) {
    const char *v = getenv("NEXTN_BENCH_KERNELS");
    nx_kernels k = NX_KERNELS_AUTO;
    if (v && nx_kernels_parse(v, &k)) {
        fprintf(stderr, "NEXTN_BENCH_KERNELS wants auto, avx512vnni, avxvnni, avx2 or scalar, got '%s'\n", v);
        exit(2);
    }
    return k;
}

/* For tools that call kernels without loading a model: selects the set
 * NEXTN_BENCH_KERNELS names (kn_select), as a model load would. */
static inline void bench_select_kernels(void) {
    kn_isa isa = KN_ISA_BEST;
    mdl_kernels_isa(bench_kernels(), &isa);   /* bench_kernels gives a valid set */
    kn_select(isa);
}

#endif
