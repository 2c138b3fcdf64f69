/* clock.h — seconds on the monotonic clock, for every timing the engine,
 * the CLI, the benchmarks and the tests take (one definition instead of a
 * copy per file). */
#ifndef NX_BASE_CLOCK_H
#define NX_BASE_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC): only
 * differences mean anything. */
double nx_now_s(void);

#endif
