/* host_steal.c — steal time from /proc/stat (see host_steal.h). */
#include "host_steal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int host_ticks_parse(const char *text, host_ticks *t) {
    *t = (host_ticks){0};
    const char *line = text;
    while (line && strncmp(line, "cpu ", 4) != 0) {
        line = strchr(line, '\n');
        if (line) line++;
    }
    if (!line) return -1;
    /* user nice system idle iowait irq softirq steal [guest guest_nice] */
    uint64_t f[8];
    const char *p = line + 4;
    for (int i = 0; i < 8; i++) {
        while (*p == ' ') p++;
        if (*p < '0' || *p > '9') return -1;   /* a missing or malformed column */
        char *end;
        f[i] = strtoull(p, &end, 10);
        p = end;
    }
    t->busy = f[0] + f[1] + f[2] + f[5] + f[6];
    t->steal = f[7];
    t->ok = 1;
    return 0;
}

void host_ticks_read(host_ticks *t) {
    *t = (host_ticks){0};
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    char line[512];
    /* the aggregate line comes first; a line longer than the buffer parses
     * as malformed rather than being read in pieces */
    if (fgets(line, sizeof line, f) && strchr(line, '\n')) host_ticks_parse(line, t);
    fclose(f);
}

double host_steal_pct(const host_ticks *a, const host_ticks *b) {
    if (!a->ok || !b->ok || b->busy < a->busy || b->steal < a->steal) return NAN;
    const uint64_t busy = b->busy - a->busy, steal = b->steal - a->steal;
    if (busy + steal == 0) return NAN;
    return 100.0 * (double)steal / (double)(busy + steal);
}
