/* bench_util.h — the median and the kernel choice the benchmark programs share (the clock: base/clock.h). */
#ifndef NX_BENCH_UTIL_H
#define NX_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

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
