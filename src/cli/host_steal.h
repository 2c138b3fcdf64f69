/* host_steal.h — how much of the CPU time this machine wanted its host took
 * for other guests ("steal" in Linux's /proc/stat), so that `nextn bench`
 * can say when its figures were measured on a busy virtual machine.
 *
 * Why it exists: on a shared VM the hypervisor deschedules a virtual CPU for
 * milliseconds at a time. Every parallel job of a forward waits for its
 * slowest thread, so a decode on 2 threads runs at the speed of whichever
 * vCPU is off at the moment: 30-40% steal has made this project's 2-thread
 * q4 decode slower than its 1-thread decode (10-14 against 17-18 tok/s,
 * bench/RESULTS.md). Such a run says nothing about the code; the report
 * should say so instead of printing a low roofline share.
 *
 * The counters are machine-wide (all CPUs, all processes): steal / (busy +
 * steal) between two readings is the share of the time the CPUs had work
 * to run that the host ran something else. CLI-local, not library API. */
#ifndef NX_CLI_HOST_STEAL_H
#define NX_CLI_HOST_STEAL_H

#include <stdint.h>

/* One reading of the all-CPU counters, in clock ticks. */
typedef struct {
    uint64_t busy;    /* user + nice + system + irq + softirq (guest time is in user) */
    uint64_t steal;
    int ok;           /* 0: no reading (not Linux, or the line could not be parsed) */
} host_ticks;

/* Parses the aggregate "cpu " line of /proc/stat's text (the first line
 * starting "cpu "; kernels before 2.6.11 have no steal column and give no
 * reading). Returns 0 with t->ok = 1, or -1 with t->ok = 0. */
int host_ticks_parse(const char *text, host_ticks *t);

/* Reads /proc/stat now; t->ok = 0 where it cannot. */
void host_ticks_read(host_ticks *t);

/* Percent of the CPU time wanted between readings a and b (b later) that
 * the host took: 100 * d(steal) / (d(busy) + d(steal)). NAN when either
 * reading is missing, the counters went backwards, or nothing ran. */
double host_steal_pct(const host_ticks *a, const host_ticks *b);

#endif
