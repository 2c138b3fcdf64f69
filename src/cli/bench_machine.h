/* bench_machine.h — machine probes for `nextn bench`: memory read bandwidth
 * and FMA throughput, measured in the same process as the model figures.
 *
 * Why they exist: decode of a model that does not fit in cache is bound by
 * how fast the weights stream from memory, so "decode tok/s" means little
 * until it is set against bandwidth / (weight bytes per token), the roofline.
 * Measuring the machine in the same run (same threads, same load on the box)
 * keeps that ratio honest; a datasheet figure would not.
 *
 * Both probes run on `threads` threads (the caller's thread is one of them),
 * started together at a barrier per pass, and report the best of `passes`
 * (best, not median: a probe estimates what the hardware can do, and anything
 * else running only ever makes a pass slower). Each has an AVX2 path chosen
 * at run time from CPUID and a plain C path used without AVX2/FMA or when the
 * caller forces it. These are CLI-local helpers, not library API. */
#ifndef NX_CLI_BENCH_MACHINE_H
#define NX_CLI_BENCH_MACHINE_H

#include <stddef.h>

/* What one probe measured. */
typedef struct {
    double rate;          /* bandwidth: GB/s (1e9 bytes); FMA: GFLOP/s (an FMA is 2 flops) */
    double best_s;        /* seconds of the best pass                                    */
    size_t bytes;         /* bandwidth: bytes read per pass; FMA: 0                      */
    int threads, passes;
    const char *impl;     /* "avx2, plain and prefetched" or "scalar" (static)          */
} bench_probe;

/* Reads a buffer of `bytes` (rounded down to whole 4 KiB pages per thread,
 * at least one; give 256 MiB or more to measure DRAM rather than cache, or
 * as many bytes as the workload compared with it reads) with `threads`
 * threads, each summing its own contiguous slice, best of `passes`; with
 * AVX2 the passes alternate plain loads and loads fetched 4 KiB ahead into
 * L2 (as the kernels fetch their weights), the first pass plain. The
 * buffer is allocated, written once (so every page is really backed, not the
 * shared zero page) and freed before this returns. Returns 0, or -1 with a
 * message in err (allocation or thread creation failed). */
int bench_read_bandwidth(size_t bytes, int threads, int passes, int force_scalar, bench_probe *out, char *err,
                         size_t errlen);

/* Runs independent multiply-add chains held in registers (12 vectors of 8
 * floats per thread on the AVX2 path, so FMA latency is hidden) on `threads`
 * threads, best of `passes`. Each pass is a fixed amount of work, roughly
 * 10-20 ms per thread on a current x86 core. Returns 0, or -1 with a message in
 * err (thread creation failed). */
int bench_fma_throughput(int threads, int passes, int force_scalar, bench_probe *out, char *err, size_t errlen);

#endif
